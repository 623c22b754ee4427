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
    ("mke2fs", "-V"),
    ("mmdebstrap", "--version"),
    ("qemu-system-x86_64", "--version"),
    ("ssh", "-V"),
    ("tar", "--version"),
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
        // "tar (GNU tar) 1.34"
        "tar" => line.split_whitespace().last().map(str::to_string),
        // "mmdebstrap 1.3.5", "mke2fs 1.47.0 (5-Feb-2023)"
        _ => {
            let rest = line.strip_prefix(tool)?.trim();
            rest.split_whitespace().next().map(str::to_string)
        }
    }
}

/// What a tool's version can change, and so how closely a lock holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolRole {
    /// Its version can change what a derivation is: mmdebstrap lays out every file of an
    /// image's root, GNU tar writes the root's tarball and `mke2fs -d` (e2fsprogs, with
    /// `debugfs`) the disk image (the image's node id is made with the locked versions of
    /// all three); the Kubernetes schema decides which objects are valid. Held exactly.
    Shapes,
    /// It only carries bytes (ssh) or runs what was built (QEMU boots the image, whose bytes
    /// it does not write). Any build of the locked upstream version will do: a Debian
    /// security update to it changes nothing envc makes.
    Carries,
}

impl ToolRole {
    pub fn of(tool: &str) -> ToolRole {
        match tool {
            "ssh" | "qemu-system-x86_64" => ToolRole::Carries,
            _ => ToolRole::Shapes,
        }
    }
}

/// The upstream part of a version as a tool or Debian prints it: without the epoch (`1:`)
/// and without the Debian revision (`-7+deb12u18+b3`, which ssh prints as ` Debian-2+deb12u6`).
/// A version with neither is its own upstream.
pub fn upstream(version: &str) -> &str {
    let v = version.split_whitespace().next().unwrap_or(version);
    let v = match v.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => v,
    };
    v.rsplit_once('-').map_or(v, |(up, _)| up)
}

/// A tool whose version here is not the locked one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolMismatch {
    pub tool: String,
    pub locked: String,
    /// `None` when the tool was not found here.
    pub found: Option<String>,
}

impl ToolMismatch {
    /// Whether the difference can change what envc makes, so that a locked build refuses:
    /// a tool that shapes derivations at any other version; one that carries bytes or runs
    /// what was built only at another upstream version (or when it is missing).
    pub fn matters(&self) -> bool {
        match (&self.found, ToolRole::of(&self.tool)) {
            (None, _) => true,
            (Some(_), ToolRole::Shapes) => true,
            (Some(found), ToolRole::Carries) => upstream(found) != upstream(&self.locked),
        }
    }
}

impl fmt::Display for ToolMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = PinKey::Tool(self.tool.clone());
        let (tool, locked) = (&self.tool, &self.locked);
        match &self.found {
            Some(found) if self.tool == KUBERNETES => write!(
                f,
                "this envc checks objects against the Kubernetes {found} API, the lock says \
                 {locked}: use an envc that carries {locked}, or run `envc lock FILE \
                 --update={key}` and check the objects again"
            ),
            Some(found) if !self.matters() => write!(
                f,
                "{tool} is {found} here, the lock says {locked}: the same upstream version \
                 ({}), and {tool} {}, so what is built is the same; `envc lock FILE \
                 --update={key}` records this one",
                upstream(found),
                match self.tool.as_str() {
                    "ssh" => "only carries bytes",
                    _ => "only runs what was built",
                }
            ),
            Some(found) => match ToolRole::of(tool) {
                ToolRole::Shapes => write!(
                    f,
                    "{tool} is {found} here, the lock says {locked}: {tool}'s version can \
                     change what is built, so it is held exactly; install {locked}, or run \
                     `envc lock FILE --update={key}` to build with {found} (new ids for what \
                     it builds)"
                ),
                ToolRole::Carries => write!(
                    f,
                    "{tool} is {found} here, the lock says {locked}: another upstream version \
                     ({} for {}); install a {} build, or run `envc lock FILE --update={key}`",
                    upstream(found),
                    upstream(locked),
                    upstream(locked)
                ),
            },
            None => write!(
                f,
                "{tool} is not installed here, the lock says {locked}: install that version or \
                 run `envc lock FILE --update={key}`"
            ),
        }
    }
}

/// The locked tools whose probed version differs (or which were not found), each with
/// whether that matters ([`ToolMismatch::matters`]). Tools probed but not locked are not
/// mismatches: the lock decides what is checked.
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
            "mke2fs",
            "\nmke2fs 1.47.0 (5-Feb-2023)\n\tUsing EXT2FS Library version 1.47.0\n",
            Some("1.47.0"),
        );
        check(
            "tar",
            "tar (GNU tar) 1.34\nCopyright (C) 2021 Free Software Foundation, Inc.\n",
            Some("1.34"),
        );
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
    fn upstream_versions_drop_the_epoch_and_the_debian_revision() {
        for (version, up) in [
            ("1:7.2+dfsg-7+deb12u18+b3", "7.2+dfsg"),
            ("1:10.0.2+ds-2+deb13u1~bpo12+1", "10.0.2+ds"),
            ("9.2p1 Debian-2+deb12u10", "9.2p1"),
            ("10.0p2", "10.0p2"),
            ("1.3.5", "1.3.5"),
            ("1.3.5-1", "1.3.5"),
            ("2:1.0-rc1-3", "1.0-rc1"),
            ("a:1", "a:1"),
        ] {
            assert_eq!(upstream(version), up, "{version}");
        }
    }

    /// One locked tool at a time against what is found here: whether it matters, and what
    /// is said.
    fn check_mismatch(tool: &str, locked: &str, found: Option<&str>, matters: bool, says: &str) {
        let mut lock = sample();
        lock.tools = vec![ToolPin {
            name: tool.into(),
            version: locked.into(),
        }];
        let probed: Vec<ToolPin> = found
            .map(|v| ToolPin {
                name: tool.into(),
                version: v.into(),
            })
            .into_iter()
            .collect();
        let got = check_tools(&lock, &probed);
        assert_eq!(got.len(), 1, "{tool} {locked} vs {found:?}");
        assert_eq!(got[0].matters(), matters, "{tool} {locked} vs {found:?}");
        assert_eq!(got[0].to_string(), says);
    }

    #[test]
    fn mismatches_matter_only_where_the_version_can_change_what_is_built() {
        check_mismatch(
            "ssh",
            "9.2p1 Debian-2+deb12u10",
            Some("9.2p1 Debian-2+deb12u6"),
            false,
            "ssh is 9.2p1 Debian-2+deb12u6 here, the lock says 9.2p1 Debian-2+deb12u10: the \
             same upstream version (9.2p1), and ssh only carries bytes, so what is built is the \
             same; `envc lock FILE --update=tool:ssh` records this one",
        );
        check_mismatch(
            "qemu-system-x86_64",
            "1:7.2+dfsg-7+deb12u18+b3",
            Some("1:7.2+dfsg-7+deb12u16"),
            false,
            "qemu-system-x86_64 is 1:7.2+dfsg-7+deb12u16 here, the lock says \
             1:7.2+dfsg-7+deb12u18+b3: the same upstream version (7.2+dfsg), and \
             qemu-system-x86_64 only runs what was built, so what is built is the same; `envc \
             lock FILE --update=tool:qemu-system-x86_64` records this one",
        );
        check_mismatch(
            "qemu-system-x86_64",
            "1:7.2+dfsg-7+deb12u18+b3",
            Some("1:10.0.2+ds-2+deb13u1~bpo12+1"),
            true,
            "qemu-system-x86_64 is 1:10.0.2+ds-2+deb13u1~bpo12+1 here, the lock says \
             1:7.2+dfsg-7+deb12u18+b3: another upstream version (10.0.2+ds for 7.2+dfsg); \
             install a 7.2+dfsg build, or run `envc lock FILE --update=tool:qemu-system-x86_64`",
        );
        check_mismatch(
            "mmdebstrap",
            "1.3.5",
            Some("1.3.5-2"),
            true,
            "mmdebstrap is 1.3.5-2 here, the lock says 1.3.5: mmdebstrap's version can change \
             what is built, so it is held exactly; install 1.3.5, or run `envc lock FILE \
             --update=tool:mmdebstrap` to build with 1.3.5-2 (new ids for what it builds)",
        );
        check_mismatch(
            "ssh",
            "9.2p1 Debian-2+deb12u6",
            None,
            true,
            "ssh is not installed here, the lock says 9.2p1 Debian-2+deb12u6: install that \
             version or run `envc lock FILE --update=tool:ssh`",
        );
    }

    #[test]
    fn tools_at_the_locked_version_and_unlocked_tools_are_no_mismatch() {
        let lock = sample();
        assert_eq!(check_tools(&lock, &lock.tools), []);
        let mut probed = lock.tools.clone();
        probed.push(ToolPin {
            name: "unlocked".into(),
            version: "1".into(),
        });
        assert_eq!(check_tools(&lock, &probed), []);
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
            "envc does not probe `rm` (it probes mke2fs, mmdebstrap, qemu-system-x86_64, ssh, tar)"
        );
    }
}
