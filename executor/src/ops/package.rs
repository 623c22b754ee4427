//! Debian packages through apt: a host's ready packages install in one transaction, with
//! the version pinned where one is given; apt waits for the dpkg lock rather than failing,
//! and an interrupted dpkg run is finished first. Facts: the installed version.

use super::{item_lines, missing, run_script, Applied, Facts};
use crate::transport::{Transport, TransportError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageSpec {
    pub name: String,
    /// `None` installs the candidate version (the lockfile pins it, once there is one).
    pub version: Option<String>,
}

const STATUS_FN: &str = r#"
status() {
  s=$(dpkg-query -W -f='${db:Status-Abbrev}	${Version}' -- "$1" 2>/dev/null) || s=
  case "$s" in ii*) printf '%s' "${s#*	}";; *) return 1;; esac
}
"#;

/// Args: the package names, then `--`, then the apt specs (`name` or `name=version`).
const INSTALL: &str = r#"
export DEBIAN_FRONTEND=noninteractive
names=; n=0
while [ "$1" != "--" ]; do
  if status "$1" >/dev/null; then eval "was$n=1"; else eval "was$n=0"; fi
  names="$names $n"; n=$((n+1)); shift
done
shift
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
dpkg --configure -a >/dev/null 2>&1
if ! apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 \
     -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >"$log" 2>&1; then
  printf 'FAIL\t0\t%s\n' "$(tail -n 8 "$log" | tr '\n\t' '  ')"
  exit 0
fi
"#;

const INSTALLED: &str = r#"
i=0
for spec in "$@"; do
  name=${spec%%=*}
  eval "was=\$was$i"
  if v=$(status "$name"); then printf 'OK\t%s\t%s\t%s\n' "$i" "$v" "$was"
  else printf 'ERR\t%s\tapt reported success but the package is not installed\n' "$i"; fi
  i=$((i+1))
done
"#;

const PROBE: &str = r#"
n=0
for name in "$@"; do
  if v=$(status "$name"); then printf 'OK\t%s\t%s\n' "$n" "$v"; else printf 'NO\t%s\n' "$n"; fi
  n=$((n+1))
done
"#;

const PURGE: &str = r#"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
if apt-get purge -y -q -o DPkg::Lock::Timeout=600 "$@" >"$log" 2>&1; then
  printf 'OK\t0\n'
else
  printf 'FAIL\t0\t%s\n' "$(tail -n 8 "$log" | tr '\n\t' '  ')"
fi
"#;

fn version_fact(v: &str) -> Facts {
    Facts::from([("version".to_string(), v.to_string())])
}

/// Installs the batch in one apt transaction. The whole batch fails together (apt's own
/// semantics), with the tail of apt's output.
pub async fn install_packages(
    t: &Transport,
    packages: &[PackageSpec],
) -> Result<Result<Vec<Applied>, String>, TransportError> {
    let mut args: Vec<String> = packages.iter().map(|p| p.name.clone()).collect();
    args.push("--".into());
    args.extend(packages.iter().map(|p| match &p.version {
        Some(v) => format!("{}={v}", p.name),
        None => p.name.clone(),
    }));
    let out = run_script(t, &format!("{STATUS_FN}{INSTALL}{INSTALLED}"), &args, b"").await?;
    let lines = item_lines(&out);
    if let Some((tag, fields)) = lines.get(&0) {
        if tag == "FAIL" {
            return Ok(Err(format!("apt-get install failed: {}", fields.join(" "))));
        }
    }
    let mut applied = Vec::with_capacity(packages.len());
    for n in 0..packages.len() {
        match lines.get(&n) {
            Some((tag, f)) if tag == "OK" && f.len() >= 2 => applied.push(Applied {
                facts: version_fact(&f[0]),
                created: f[1] == "0",
            }),
            Some((_, f)) => return Ok(Err(f.join(" "))),
            None => return Ok(Err(missing(&out))),
        }
    }
    Ok(Ok(applied))
}

/// The installed version of each package (`None`: not installed).
pub async fn probe_packages(
    t: &Transport,
    names: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let out = run_script(t, &format!("{STATUS_FN}{PROBE}"), names, b"").await?;
    let lines = item_lines(&out);
    Ok((0..names.len())
        .map(|n| match lines.get(&n) {
            Some((tag, f)) if tag == "OK" && !f.is_empty() => Some(version_fact(&f[0])),
            _ => None,
        })
        .collect())
}

/// Purges the packages (configuration included) in one transaction.
pub async fn purge_packages(
    t: &Transport,
    names: &[String],
) -> Result<Result<(), String>, TransportError> {
    let out = run_script(t, PURGE, names, b"").await?;
    Ok(match item_lines(&out).get(&0) {
        Some((tag, _)) if tag == "OK" => Ok(()),
        Some((_, f)) => Err(format!("apt-get purge failed: {}", f.join(" "))),
        None => Err(missing(&out)),
    })
}
