//! The tools envc drives, as installed on this machine: their versions are pinned, so that
//! a build on a machine with another QEMU or mmdebstrap says so instead of quietly giving
//! another image.
//!
//! The version pinned is the most precise one the tool prints: the Debian package version
//! where the tool reports it (QEMU and OpenSSH do), else its own version string.

use std::fmt;
use std::process::Command;

use crate::model::{Lockfile, PinKey, ToolPin};

/// The tools envc probes, and the argument that makes each print its version.
pub const TOOLS: &[(&str, &str)] = &[
    ("mmdebstrap", "--version"),
    ("qemu-system-x86_64", "--version"),
    ("ssh", "-V"),
];

/// Not a program: the Kubernetes API schema built into envc, that `manifest`s are checked
/// against. Pinned like a tool, so that an envc carrying another schema says so.
pub const KUBERNETES: &str = "kubernetes";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeError {
    pub tool: String,
    pub message: String,
    pub hint: String,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}\n  hint: {}",
            PinKey::Tool(self.tool.clone()),
            self.message,
            self.hint
        )
    }
}

impl std::error::Error for ProbeError {}

/// Runs a tool's version command and pins what it says.
pub fn probe_tool(name: &str) -> Result<ToolPin, ProbeError> {
    let error = |message: String, hint: &str| ProbeError {
        tool: name.to_string(),
        message,
        hint: hint.to_string(),
    };
    if name == KUBERNETES {
        return Ok(ToolPin {
            name: name.to_string(),
            version: envc_ids::KUBERNETES_VERSION.to_string(),
        });
    }
    let Some((_, arg)) = TOOLS.iter().find(|(t, _)| *t == name) else {
        let known: Vec<&str> = TOOLS.iter().map(|(t, _)| *t).collect();
        return Err(error(
            format!(
                "envc does not probe `{name}` (it probes {})",
                known.join(", ")
            ),
            "this is a bug in the caller",
        ));
    };
    let out = Command::new(name).arg(arg).output().map_err(|e| {
        error(
            format!("cannot run `{name} {arg}`: {e}"),
            "install it (`./scripts/setup` installs what envc drives)",
        )
    })?;
    // ssh prints its version on stderr; the others on stdout.
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(error(
            format!("`{name} {arg}` failed ({}): {}", out.status, text.trim()),
            "check the installation of the tool",
        ));
    }
    let version = parse_version(name, &text).ok_or_else(|| {
        error(
            format!(
                "cannot find a version in the output of `{name} {arg}`: {:?}",
                text.trim()
            ),
            "envc may not know this build of the tool: report it",
        )
    })?;
    Ok(ToolPin {
        name: name.to_string(),
        version,
    })
}

/// Probes every tool in [`TOOLS`]; the errors of the ones that are missing are returned
/// alongside the pins of the others.
pub fn probe_all() -> (Vec<ToolPin>, Vec<ProbeError>) {
    let mut pins = Vec::new();
    let mut errors = Vec::new();
    for (name, _) in TOOLS {
        match probe_tool(name) {
            Ok(p) => pins.push(p),
            Err(e) => errors.push(e),
        }
    }
    (pins, errors)
}

/// The version in a tool's version output (pure, so it is tested on recorded outputs).
pub fn parse_version(tool: &str, output: &str) -> Option<String> {
    let line = output.lines().map(str::trim).find(|l| !l.is_empty())?;
    match tool {
        // "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
        t if t.starts_with("qemu-") => {
            let rest = line.split("version ").nth(1)?;
            if let Some(deb) = rest.split("(Debian ").nth(1) {
                return deb.split(')').next().map(|v| v.trim().to_string());
            }
            rest.split_whitespace().next().map(str::to_string)
        }
        // "OpenSSH_9.2p1 Debian-2+deb12u6, OpenSSL 3.0.19 27 Jan 2026"
        "ssh" => {
            let rest = line.strip_prefix("OpenSSH_")?;
            let v = rest.split(',').next()?.trim();
            (!v.is_empty()).then(|| v.to_string())
        }
        // "mmdebstrap 1.3.5"
        _ => {
            let rest = line.strip_prefix(tool)?.trim();
            rest.split_whitespace().next().map(str::to_string)
        }
    }
}

/// A tool whose version here is not the locked one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolMismatch {
    pub tool: String,
    pub locked: String,
    /// `None` when the tool was not found here.
    pub found: Option<String>,
}

impl fmt::Display for ToolMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = PinKey::Tool(self.tool.clone());
        match &self.found {
            Some(found) if self.tool == KUBERNETES => write!(
                f,
                "this envc checks objects against the Kubernetes {found} API, the lock says {}: \
                 use an envc that carries {}, or run `envc lock FILE --update={key}` and check \
                 the objects again",
                self.locked, self.locked
            ),
            Some(found) => write!(
                f,
                "{} is {found} here, the lock says {}: install that version or run `envc lock FILE \
                 --update={key}`",
                self.tool, self.locked
            ),
            None => write!(
                f,
                "{} is not installed here, the lock says {}: install that version or run `envc \
                 lock FILE --update={key}`",
                self.tool, self.locked
            ),
        }
    }
}

/// The locked tools whose probed version differs (or which were not found). Tools probed
/// but not locked are not mismatches: the lock decides what is checked.
pub fn check_tools(lock: &Lockfile, probed: &[ToolPin]) -> Vec<ToolMismatch> {
    let mut out = Vec::new();
    for t in &lock.tools {
        let found = probed.iter().find(|p| p.name == t.name).map(|p| &p.version);
        if found != Some(&t.version) {
            out.push(ToolMismatch {
                tool: t.name.clone(),
                locked: t.version.clone(),
                found: found.cloned(),
            });
        }
    }
    out.sort_by(|a, b| a.tool.cmp(&b.tool));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    fn check(tool: &str, output: &str, expected: Option<&str>) {
        assert_eq!(
            parse_version(tool, output).as_deref(),
            expected,
            "{tool}: {output:?}"
        );
    }

    #[test]
    fn reads_versions_from_recorded_outputs() {
        check(
            "qemu-system-x86_64",
            "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n\
             Copyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n",
            Some("1:7.2+dfsg-7+deb12u18+b3"),
        );
        check(
            "qemu-system-x86_64",
            "QEMU emulator version 9.1.0\nCopyright (c) 2003-2024\n",
            Some("9.1.0"),
        );
        check("mmdebstrap", "mmdebstrap 1.3.5\n", Some("1.3.5"));
        check(
            "ssh",
            "\nOpenSSH_9.2p1 Debian-2+deb12u6, OpenSSL 3.0.19 27 Jan 2026\n",
            Some("9.2p1 Debian-2+deb12u6"),
        );
        check("ssh", "OpenSSH_10.0p2, LibreSSL 3.3.6\n", Some("10.0p2"));
        check("ssh", "usage: ssh [-46AaCfGgKkMNnqsTtVvXxYy]\n", None);
        check("mmdebstrap", "", None);
        check("qemu-system-x86_64", "qemu: unknown option\n", None);
    }

    #[test]
    fn mismatches_name_the_tool_both_versions_and_the_fix() {
        let lock = sample();
        let probed = vec![
            ToolPin {
                name: "qemu-system-x86_64".into(),
                version: "1:7.2+dfsg-7+deb12u16".into(),
            },
            ToolPin {
                name: "mmdebstrap".into(),
                version: "1.3.5".into(),
            },
            ToolPin {
                name: "unlocked".into(),
                version: "1".into(),
            },
        ];
        let got: Vec<String> = check_tools(&lock, &probed)
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "qemu-system-x86_64 is 1:7.2+dfsg-7+deb12u16 here, the lock says \
                 1:7.2+dfsg-7+deb12u18+b3: install that version or run `envc lock FILE \
                 --update=tool:qemu-system-x86_64`",
                "ssh is not installed here, the lock says 9.2p1 Debian-2+deb12u6: install that \
                 version or run `envc lock FILE --update=tool:ssh`",
            ]
        );
        assert_eq!(check_tools(&lock, &lock.tools), []);
    }

    /// The schema is envc's own: pinned without running anything, and a lock of another
    /// version says which envc to use.
    #[test]
    fn the_kubernetes_schema_is_pinned_as_this_envc_carries_it() {
        let pin = probe_tool(KUBERNETES).unwrap();
        assert_eq!(pin.version, envc_ids::KUBERNETES_VERSION);
        let mut lock = sample();
        lock.tools = vec![ToolPin {
            name: KUBERNETES.into(),
            version: "1.30".into(),
        }];
        let got: Vec<String> = check_tools(&lock, &[pin])
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(
            got,
            [format!(
                "this envc checks objects against the Kubernetes {} API, the lock says 1.30: use \
                 an envc that carries 1.30, or run `envc lock FILE --update=tool:kubernetes` and \
                 check the objects again",
                envc_ids::KUBERNETES_VERSION
            )]
        );
    }

    #[test]
    fn unknown_tools_are_refused() {
        let e = probe_tool("rm").unwrap_err();
        assert_eq!(
            e.message,
            "envc does not probe `rm` (it probes mmdebstrap, qemu-system-x86_64, ssh)"
        );
    }
}
