//! systemd services: enabled or not, running or not, restarted on demand.
//!
//! The namespace test hosts do not run systemd, so the tests exercise only the clear error a
//! systemd-less target gives; enabling, starting, restarting and probing units can only be
//! exercised against VMs (the qemu provider's targets boot systemd).

use crate::error::StepError;
use crate::record::Facts;
use crate::script::{indexed, no_record, records, run_script};
use crate::transport::{CommandOutput, Transport};

const APPLY: &str = include_str!("apply_service.sh");
const PROBE: &str = include_str!("probe_services.sh");
const REMOVE: &str = include_str!("remove_service.sh");

/// The wanted state of one systemd unit (`nginx` means `nginx.service`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    pub name: String,
    /// Started at boot (`systemctl enable`), or not (`disable`).
    pub enabled: bool,
    /// Running now (`start`), or stopped (`stop`).
    pub running: bool,
    /// Restart it now (when `running`): something it reads changed.
    pub restart: bool,
}

/// Brings one unit to `spec` in one `run`. Facts afterwards: `enabled` (what
/// `systemctl is-enabled` says: enabled, disabled, static, …) and `active` (`is-active`:
/// active, inactive, failed, …).
pub async fn apply_service(t: &Transport, spec: &ServiceSpec) -> Result<Facts, StepError> {
    check_name(&spec.name)?;
    let yn = |b: bool| if b { "yes" } else { "no" };
    let args = [
        spec.name.as_str(),
        yn(spec.enabled),
        yn(spec.running),
        yn(spec.restart),
    ];
    let out = run_script(t, APPLY, &args, b"").await?;
    if let Some(e) = failure(t, &spec.name, &out) {
        return Err(StepError::new(e));
    }
    match records(&out, "S").first().map(Vec::as_slice) {
        Some([enabled, active]) => Ok(facts(enabled, active)),
        _ => Err(StepError::new(format!(
            "service `{}` on host `{}`: {}",
            spec.name,
            t.host(),
            no_record(&out)
        ))),
    }
}

/// The state of each unit, `None` where no such unit exists; one `run`. On a host without
/// systemd, the error [`apply_service`] gives.
pub async fn probe_services(
    t: &Transport,
    names: &[String],
) -> Result<Vec<Option<Facts>>, StepError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    for name in names {
        check_name(name)?;
    }
    let args: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = run_script(t, PROBE, &args, b"").await?;
    if let Some(e) = failure(t, &names[0], &out) {
        return Err(StepError::new(e));
    }
    let mut results = Vec::with_capacity(names.len());
    for (i, rec) in indexed(records(&out, "R"), names.len())
        .into_iter()
        .enumerate()
    {
        results.push(match rec.as_deref() {
            Some(["absent"]) => None,
            Some(["present", enabled, active]) => Some(facts(enabled, active)),
            _ => {
                return Err(StepError::new(format!(
                    "probing service `{}` on host `{}`: {}",
                    names[i],
                    t.host(),
                    no_record(&out)
                )))
            }
        });
    }
    Ok(results)
}

/// Stops and disables a unit (`systemctl disable --now`); a unit that does not exist is fine.
pub async fn remove_service(t: &Transport, name: &str) -> Result<(), StepError> {
    check_name(name)?;
    let out = run_script(t, REMOVE, &[name], b"").await?;
    if let Some(e) = failure(t, name, &out) {
        return Err(StepError::new(e));
    }
    if records(&out, "S").is_empty() {
        return Err(StepError::new(format!(
            "removing service `{name}` on host `{}`: {}",
            t.host(),
            no_record(&out)
        )));
    }
    Ok(())
}

fn facts(enabled: &str, active: &str) -> Facts {
    Facts::from([
        ("enabled".to_string(), enabled.to_string()),
        ("active".to_string(), active.to_string()),
    ])
}

/// The no-systemd error or a failure message the script reported.
fn failure(t: &Transport, name: &str, out: &CommandOutput) -> Option<String> {
    if !records(out, "N").is_empty() {
        return Some(no_systemd(t.host(), name));
    }
    let rec = records(out, "E").into_iter().next()?;
    // The script encodes line breaks as the record separator character (036).
    let msg = rec.join(" ").replace('\u{1e}', "\n  ");
    Some(format!(
        "service `{name}` on host `{}`: {}",
        t.host(),
        msg.trim_end()
    ))
}

fn no_systemd(host: &str, name: &str) -> String {
    format!("`{host}` does not run systemd, so service `{name}` cannot be managed there")
}

/// systemd unit names: letters, digits and `:_.@-\`, at most 255 bytes, not starting with `-`.
fn check_name(name: &str) -> Result<(), StepError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ":_.@-\\".contains(c));
    if ok {
        Ok(())
    } else {
        Err(StepError::new(format!(
            "`{name}` is not a systemd unit name (letters, digits and `:_.@-\\`, such as \
             `nginx` or `getty@tty1.service`)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names() {
        for ok in [
            "nginx",
            "getty@tty1.service",
            "systemd-journald.socket",
            "a\\x2db",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a b", "x;y", "$(id)", "a/b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(
            no_systemd("web", "nginx"),
            "`web` does not run systemd, so service `nginx` cannot be managed there"
        );
    }
}
