//! Debian packages through apt: one transaction per batch. `dpkg --configure -a` runs first so
//! that a run killed in the middle of dpkg converges; apt waits for the dpkg lock (up to
//! 10 minutes) instead of failing when another apt runs.

use super::{indexed, no_record, records, run_script, tail, Applied, Facts};
use crate::error::StepError;
use crate::transport::{CommandOutput, Transport, TransportError};

const INSTALL: &str = include_str!("install_packages.sh");
const PROBE: &str = include_str!("probe_packages.sh");
const PURGE: &str = include_str!("purge_packages.sh");

/// A package to install, optionally pinned to an exact version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageSpec {
    pub name: String,
    pub version: Option<String>,
}

/// Installs `packages` in one apt transaction. On success, per package (in order): the
/// installed `version` as a fact, and whether it was not installed before. On failure, one
/// message for the batch naming the packages, with the end of apt's output.
pub async fn install_packages(
    t: &Transport,
    packages: &[PackageSpec],
) -> Result<Vec<Applied>, StepError> {
    if packages.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = Vec::with_capacity(packages.len());
    for p in packages {
        check_name(&p.name)?;
        match &p.version {
            Some(v) => {
                check_version(&p.name, v)?;
                args.push(format!("{}={v}", p.name));
            }
            None => args.push(p.name.clone()),
        }
    }
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_script(t, INSTALL, &arg_refs, b"").await?;
    let names = list(packages.iter().map(|p| p.name.as_str()));
    if let Some(e) = no_apt(t, &out) {
        return Err(e.into());
    }
    if let Some(e) = apt_failure(&out) {
        return Err(StepError::new(format!(
            "installing {names} on host `{}` failed: {e}",
            t.host()
        )));
    }
    let before = indexed(records(&out, "B"), packages.len());
    let after = indexed(records(&out, "A"), packages.len());
    let mut applied = Vec::with_capacity(packages.len());
    for (i, p) in packages.iter().enumerate() {
        let (Some(before), Some(after)) = (&before[i], &after[i]) else {
            return Err(StepError::new(format!(
                "installing {names} on host `{}`: {}",
                t.host(),
                no_record(&out)
            )));
        };
        let version = match after.as_slice() {
            ["installed", version] => version.to_string(),
            [status, ..] => {
                return Err(StepError::new(format!(
                    "package `{}` on host `{}` is `{status}` after apt-get install, not \
                     installed",
                    p.name,
                    t.host()
                )))
            }
            [] => String::new(),
        };
        if let Some(want) = &p.version {
            if *want != version {
                return Err(StepError::new(format!(
                    "package `{}` on host `{}` is at version {version} after apt-get install, \
                     not the pinned {want}",
                    p.name,
                    t.host()
                )));
            }
        }
        applied.push(Applied {
            facts: Facts::from([("version".to_string(), version)]),
            created: before.first() != Some(&"installed"),
            note: None,
        });
    }
    Ok(applied)
}

/// The installed version of each package (`version` fact), `None` where it is not installed.
/// Names that are not valid Debian package names are reported not installed.
pub async fn probe_packages(
    t: &Transport,
    names: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let valid: Vec<usize> = (0..names.len())
        .filter(|&i| check_name(&names[i]).is_ok())
        .collect();
    let mut results = vec![None; names.len()];
    if valid.is_empty() {
        return Ok(results);
    }
    let args: Vec<&str> = valid.iter().map(|&i| names[i].as_str()).collect();
    let out = run_script(t, PROBE, &args, b"").await?;
    for (j, rec) in indexed(records(&out, "R"), valid.len())
        .into_iter()
        .enumerate()
    {
        results[valid[j]] = match rec.as_deref() {
            Some(["installed", version]) => {
                Some(Facts::from([("version".to_string(), version.to_string())]))
            }
            Some([_, ..]) => None,
            _ => {
                return Err(TransportError::Io {
                    host: t.host().to_string(),
                    detail: format!("probing package `{}`: {}", names[valid[j]], no_record(&out)),
                })
            }
        };
    }
    Ok(results)
}

/// Purges (removes with their configuration) those of `names` that are installed, in one apt
/// transaction. Packages that are not installed are fine.
pub async fn purge_packages(t: &Transport, names: &[String]) -> Result<(), StepError> {
    if names.is_empty() {
        return Ok(());
    }
    for name in names {
        check_name(name)?;
    }
    let args: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = run_script(t, PURGE, &args, b"").await?;
    if let Some(e) = no_apt(t, &out) {
        return Err(e.into());
    }
    if let Some(e) = apt_failure(&out) {
        return Err(StepError::new(format!(
            "purging {} on host `{}` failed: {e}",
            list(args.iter().copied()),
            t.host()
        )));
    }
    if !out.success() {
        return Err(StepError::new(format!(
            "purging {} on host `{}`: {}",
            list(args.iter().copied()),
            t.host(),
            no_record(&out)
        )));
    }
    Ok(())
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    let s = if names.len() == 1 { "" } else { "s" };
    format!("package{s} {}", names.join(", "))
}

fn no_apt(t: &Transport, out: &CommandOutput) -> Option<String> {
    if records(out, "N").is_empty() {
        return None;
    }
    Some(format!(
        "host `{}` has no apt-get: envc manages packages only on Debian-like systems",
        t.host()
    ))
}

/// apt's failure as reported by the scripts: its exit status and the end of its output, with a
/// hint for the common causes.
fn apt_failure(out: &CommandOutput) -> Option<String> {
    let status = records(out, "F").first()?.first()?.to_string();
    let log: Vec<String> = records(out, "L").iter().map(|r| r.join("\t")).collect();
    let log = tail(&log.join("\n"), 20);
    let mut msg = format!("apt-get exited with status {status}:\n{log}");
    if log.contains("Unable to locate package") || log.contains("has no installation candidate") {
        msg += "\n  hint: check the package name, and that the host's apt sources offer it \
                (run `apt-get update` there if its lists are old)";
    } else if log.contains("was not found") && log.contains("Version") {
        msg += "\n  hint: the pinned version is not offered by the host's apt sources; \
                `apt-cache policy NAME` on the host lists the versions it can install";
    }
    Some(msg)
}

/// Debian policy: lower-case letters, digits, `+`, `-`, `.`; at least two characters, starting
/// with a letter or digit. An architecture qualifier (`:amd64`) is allowed.
fn check_name(name: &str) -> Result<(), StepError> {
    let (base, arch) = match name.split_once(':') {
        Some((b, a)) => (b, Some(a)),
        None => (name, None),
    };
    let ok = base.len() >= 2
        && base.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && base
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
        && arch.is_none_or(|a| {
            !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(StepError::new(format!(
            "`{name}` is not a Debian package name (lower-case letters, digits, `+`, `-`, `.`, \
             starting with a letter or digit)"
        )))
    }
}

/// Debian versions: `[epoch:]upstream[-revision]` of letters, digits and `.+~-:`.
fn check_version(name: &str, version: &str) -> Result<(), StepError> {
    let ok = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+~-:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(StepError::new(format!(
            "`{version}` (pinned for package `{name}`) is not a Debian version"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        for ok in ["jq", "libc6", "g++", "libstdc++6:amd64", "0ad"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a", "-f", "Jq", "a b", "x;y", "jq=1", "$(id)", "jq:"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        for ok in ["1.6-2.1+deb12u2", "1:2.3~rc1-1", "2.0"] {
            assert!(check_version("x", ok).is_ok(), "{ok}");
        }
        for bad in ["", "latest", "1 2", "1;2", "-1"] {
            assert!(check_version("x", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn apt_failures_carry_the_log_and_a_hint() {
        let out = CommandOutput {
            status: Some(0),
            stdout: b"B\t0\tnot-installed\t\nF\t100\nL\tReading package lists...\nL\tE: Unable to locate package nosuch\nA\t0\tnot-installed\t\n".to_vec(),
            stderr: vec![],
        };
        let msg = apt_failure(&out).unwrap();
        assert!(msg.contains("status 100") && msg.contains("Unable to locate package nosuch"));
        assert!(msg.contains("hint:"));
        assert_eq!(list(["a", "b"].into_iter()), "packages `a`, `b`");
    }
}
