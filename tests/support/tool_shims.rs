//! Stand-ins on `PATH` for the tools envc probes and drives, so that a test shows what envc
//! does on a machine at another patch level, or with a KVM that opens and runs no guest,
//! whatever this machine has. Each reports a version of its own for `--version` (`-V` for
//! ssh) and otherwise runs the real tool, found in the `PATH` it was made with.
//!
//! QEMU's stands in for a hung KVM: asked for `-accel kvm`, it runs the real QEMU under TCG
//! (`-cpu max` for `-cpu host`), paused with `-S` where it is to hang, so the guest never
//! prints a byte. What it was asked is logged to `qemu.log`. A mock where no real part can
//! run: this machine's KVM fails at once ("failed to set MSR") and a fresh one's may hang,
//! and a test must see the same either way.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Which QEMU runs asked for KVM hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvmHangs {
    /// None: KVM runs under TCG, as if it worked.
    Never,
    /// Only the VMs (daemonized): the probe's kernel boots, the machines never print.
    Machines,
    /// Every run, the probe's too.
    Always,
}

pub struct ToolShims {
    pub dir: PathBuf,
}

impl ToolShims {
    /// Shims in `dir` (made, mode 0755, so an ordinary user can run them).
    pub fn new(dir: &Path) -> ToolShims {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ToolShims {
            dir: dir.to_path_buf(),
        }
    }

    /// `PATH` with the shims first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The real tool's path, as `PATH` finds it without the shims.
    fn real(name: &str) -> String {
        let o = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(
            !path.is_empty(),
            "{name} is not installed (./scripts/setup installs it)"
        );
        path
    }

    /// `ssh -V` says `version` (as ssh prints it: `9.2p1 Debian-2+deb12u2`).
    pub fn ssh(&self, version: &str) {
        let real = Self::real("ssh");
        self.write(
            "ssh",
            &format!(
                "#!/bin/sh\nfor a; do [ \"$a\" = -V ] && {{ echo 'OpenSSH_{version}, OpenSSL 3.0.17 1 Jul 2025' >&2; exit 0; }}; done\nexec {real} \"$@\"\n"
            ),
        );
    }

    /// `mmdebstrap --version` says `version`.
    pub fn mmdebstrap(&self, version: &str) {
        let real = Self::real("mmdebstrap");
        self.write(
            "mmdebstrap",
            &format!(
                "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'mmdebstrap {version}'; exit 0; }}\nexec {real} \"$@\"\n"
            ),
        );
    }

    /// `qemu-system-x86_64 --version` says Debian's `version`; KVM hangs as `hangs` says.
    pub fn qemu(&self, version: &str, hangs: KvmHangs) {
        let real = Self::real("qemu-system-x86_64");
        let hangs = match hangs {
            KvmHangs::Never => "never",
            KvmHangs::Machines => "machines",
            KvmHangs::Always => "always",
        };
        let log = self.dir.join("qemu.log");
        // Written by whoever runs envc (an ordinary user, in tests/machines.rs).
        if !log.exists() {
            std::fs::write(&log, "").unwrap();
            std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        self.write(
            "qemu-system-x86_64",
            &format!(
                r#"#!/bin/bash
[ "$1" = --version ] && {{ echo 'QEMU emulator version 7.2.22 (Debian {version})'; exit 0; }}
hangs={hangs}
args=() prev= kvm=no daemon=no
for a in "$@"; do
    if [ "$prev" = -accel ] && [ "${{a%%,*}}" = kvm ]; then args+=(tcg); kvm=yes
    elif [ "$prev" = -cpu ] && [ "$a" = host ]; then args+=(max)
    else args+=("$a")
    fi
    [ "$a" = -daemonize ] && daemon=yes
    prev=$a
done
hang=no
if [ $kvm = yes ]; then
    case $hangs in always) hang=yes ;; machines) [ $daemon = yes ] && hang=yes ;; esac
    [ $hang = yes ] && args+=(-S)
fi
echo "kvm=$kvm daemonize=$daemon hang=$hang" >>{log}
exec {real} "${{args[@]}}"
"#,
                log = log.display()
            ),
        );
    }

    /// What the QEMU shim was asked, a line a run: `kvm=yes daemonize=no hang=yes`.
    pub fn qemu_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("qemu.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The version a lockfile's text pins `tool` at.
pub fn locked_tool(lock: &str, tool: &str) -> String {
    let block = lock
        .split("[[tool]]")
        .find(|b| b.contains(&format!("name = \"{tool}\"")))
        .unwrap_or_else(|| panic!("no tool {tool} in\n{lock}"));
    let line = (block.lines())
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap();
    line.trim_matches('"').to_string()
}
