//! systemd services: enabled or disabled, started or stopped, and restarted when the
//! scheduler says an input they restart on changed. Facts: `systemctl is-enabled` and
//! `is-active`. A target without systemd gets a clear error. (The SSH test hosts have no
//! init system, so end-to-end tests exercise only that error; the rest runs on VMs.)

use super::{item_lines, missing, run_script, Facts};
use crate::transport::{Transport, TransportError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    pub name: String,
    pub enabled: bool,
    pub running: bool,
    /// Restart (when running): something it restarts on changed.
    pub restart: bool,
}

const NO_SYSTEMD: &str = "the target does not run systemd (no /run/systemd/system), so services cannot be managed there; run it on a machine booted with systemd";

const FACTS_FN: &str = r#"
facts() {
  e=$(systemctl is-enabled -- "$1" 2>/dev/null) || true
  a=$(systemctl is-active -- "$1" 2>/dev/null) || true
  printf 'OK\t%s\t%s\t%s\n' "$2" "${e:-unknown}" "${a:-unknown}"
}
"#;

/// Args: name, enable|disable, start|stop|restart.
const APPLY: &str = r#"
[ -d /run/systemd/system ] || { printf 'NOSYSTEMD\t0\n'; exit 0; }
if ! err=$(systemctl "$2" -q -- "$1" 2>&1 && systemctl "$3" -- "$1" 2>&1); then
  printf 'ERR\t0\t%s\n' "$(printf %s "$err" | tr '\n\t' '  ' | cut -c1-400)"
  exit 0
fi
facts "$1" 0
"#;

const PROBE: &str = r#"
[ -d /run/systemd/system ] || exit 0
n=0
for name in "$@"; do facts "$name" "$n"; n=$((n+1)); done
"#;

const REMOVE: &str = r#"
[ -d /run/systemd/system ] || { printf 'NOSYSTEMD\t0\n'; exit 0; }
systemctl stop -- "$1" >/dev/null 2>&1
if err=$(systemctl disable -q -- "$1" 2>&1); then printf 'OK\t0\n'
else printf 'ERR\t0\t%s\n' "$(printf %s "$err" | tr '\n\t' '  ' | cut -c1-400)"; fi
"#;

fn service_facts(f: &[String]) -> Option<Facts> {
    let [enabled, active, ..] = f else {
        return None;
    };
    Some(Facts::from([
        ("active".to_string(), active.clone()),
        ("enabled".to_string(), enabled.clone()),
    ]))
}

pub async fn apply_service(
    t: &Transport,
    s: &ServiceSpec,
) -> Result<Result<Facts, String>, TransportError> {
    let enable = if s.enabled { "enable" } else { "disable" };
    let start = match (s.running, s.restart) {
        (false, _) => "stop",
        (true, true) => "restart",
        (true, false) => "start",
    };
    let args = [s.name.clone(), enable.into(), start.into()];
    let out = run_script(t, &format!("{FACTS_FN}{APPLY}"), &args, b"").await?;
    Ok(match item_lines(&out).get(&0) {
        Some((tag, _)) if tag == "NOSYSTEMD" => Err(format!("service `{}`: {NO_SYSTEMD}", s.name)),
        Some((tag, f)) if tag == "OK" => {
            service_facts(f).ok_or_else(|| "the target reported facts envc cannot read".into())
        }
        Some((_, f)) => Err(f.join(" ")),
        None => Err(missing(&out)),
    })
}

/// Each service's state (`None` when the target has no systemd).
pub async fn probe_services(
    t: &Transport,
    names: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let out = run_script(t, &format!("{FACTS_FN}{PROBE}"), names, b"").await?;
    let lines = item_lines(&out);
    Ok((0..names.len())
        .map(|n| lines.get(&n).and_then(|(_, f)| service_facts(f)))
        .collect())
}

/// Stops and disables a service.
pub async fn remove_service(
    t: &Transport,
    name: &str,
) -> Result<Result<(), String>, TransportError> {
    let out = run_script(t, REMOVE, &[name.to_string()], b"").await?;
    Ok(match item_lines(&out).get(&0) {
        Some((tag, _)) if tag == "OK" => Ok(()),
        Some((tag, _)) if tag == "NOSYSTEMD" => Err(format!("service `{name}`: {NO_SYSTEMD}")),
        Some((_, f)) => Err(f.join(" ")),
        None => Err(missing(&out)),
    })
}
