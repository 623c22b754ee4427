//! The Debian package (`scripts/package-deb`, issue 41): the same binary packaged twice gives
//! the same bytes, the package declares what envc runs on the controller, and `dpkg -i` on a
//! Debian machine that has never seen envc (a namespace test host, bookworm like the
//! controller) gives a working `envc` with its man pages and shell completions.
//!
//! A second compile of the binary packaged the same is checked by `.ci/run` (a test cannot
//! run cargo in the target directory cargo holds while it tests).

use crate::support::nshosts;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nshosts::TestHosts;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Packages the binary under test into `dir`; the package's path.
fn package(dir: &Path) -> PathBuf {
    let out = Command::new(root().join("scripts/package-deb"))
        .arg(dir)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_envc"))
        .output()
        .unwrap();
    PathBuf::from(ok("scripts/package-deb", out).trim())
}

/// `dpkg-deb --field DEB FIELD`.
fn field(deb: &Path, name: &str) -> String {
    let out = Command::new("dpkg-deb")
        .arg("--field")
        .arg(deb)
        .arg(name)
        .output()
        .unwrap();
    ok("dpkg-deb --field", out).trim().to_string()
}

#[test]
fn the_package_is_reproducible_declares_its_tools_and_installs_a_working_envc() {
    let scratch = tempfile::tempdir().unwrap();
    let first = package(&scratch.path().join("first"));
    let second = package(&scratch.path().join("second"));
    assert_eq!(
        first.file_name(),
        second.file_name(),
        "one name for one version"
    );
    let (a, b) = (fs::read(&first).unwrap(), fs::read(&second).unwrap());
    assert!(
        a == b,
        "packaging the same binary twice gave different bytes: {} and {} (diffoscope them)",
        first.display(),
        second.display()
    );

    let version = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("--version")
        .output()
        .unwrap();
    let version = ok("envc --version", version);
    // `envc 0.1.0 (commit …, DATE, TARGET)`: the commit is the binary's, not the package's.
    assert_eq!(
        version.split_whitespace().take(2).collect::<Vec<_>>(),
        ["envc", &field(&first, "Version")],
        "the package's version is the binary's: {version}"
    );
    let depends = field(&first, "Depends");
    assert!(
        depends.contains("openssh-client"),
        "ssh reaches every target: {depends}"
    );
    assert!(
        depends.contains("libc6 (>="),
        "shared libraries from dpkg-shlibdeps: {depends}"
    );
    let recommends = field(&first, "Recommends");
    for tool in ["qemu-system-x86", "qemu-utils", "mmdebstrap", "uidmap"] {
        assert!(
            recommends.contains(tool),
            "{tool} is needed for `vm` and `image` nodes only, so recommended: {recommends}"
        );
        assert!(!depends.contains(tool), "{tool} is not required: {depends}");
    }

    // A Debian machine that has never seen envc.
    let hosts = TestHosts::start(1);
    let upload = hosts
        .ssh_command(0)
        .arg("cat > /tmp/envc.deb")
        .stdin(File::open(&first).unwrap())
        .output()
        .unwrap();
    ok("copying the package", upload);
    let host = |cmd: &str| {
        let out = hosts.ssh(0, cmd);
        assert!(
            out.status.success(),
            "on the host: {cmd}: {}\nstdout: {}\nstderr: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            hosts.logs(0)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(
        !hosts.ssh(0, "command -v envc").status.success(),
        "the host starts without envc"
    );
    host("dpkg -i /tmp/envc.deb");
    assert_eq!(host("envc --version").trim(), version.trim());
    // It works, not only starts: it checks and plans an environment there.
    host(
        "mkdir -p /srv/p && printf 'let f = file(path = \"/etc/x\", content = \"x\\\\n\", \
         target = host(name = \"h\", address = \"@local\"))\\n' > /srv/p/prod.env",
    );
    let checked = host("cd /srv/p && envc check prod.env 2>&1");
    assert!(checked.contains("ok"), "envc check on the host: {checked}");
    let planned = host("cd /srv/p && envc plan prod.env 2>&1");
    assert!(
        planned.contains("h/file:/etc/x"),
        "envc plan on the host: {planned}"
    );
    // Every subcommand has its man page, gzipped where man looks for it.
    let pages = host("ls /usr/share/man/man1");
    for page in [
        "envc.1.gz",
        "envc-build.1.gz",
        "envc-plan.1.gz",
        "envc-init.1.gz",
    ] {
        assert!(pages.lines().any(|p| p == page), "{page} in {pages}");
    }
    let page = host("zcat /usr/share/man/man1/envc-build.1.gz");
    assert!(page.contains(".TH envc-build"), "a man page: {page}");
    // bash loads the completion and completes subcommands from it.
    let completion = host(
        "bash -c '. /usr/share/bash-completion/completions/envc; \
         COMP_WORDS=(envc bu); COMP_CWORD=1; COMP_LINE=\"envc bu\"; COMP_POINT=7; \
         _envc envc bu envc; printf \"%s\\n\" \"${COMPREPLY[@]}\"'",
    );
    assert!(
        completion.lines().any(|w| w == "build"),
        "bash completes `envc bu` to build: {completion:?}"
    );
    for file in [
        "/usr/share/zsh/vendor-completions/_envc",
        "/usr/share/fish/vendor_completions.d/envc.fish",
    ] {
        host(&format!("test -s {file}"));
    }
    // And it leaves as it came.
    host("dpkg --purge envc");
    assert!(
        !hosts
            .ssh(0, "command -v envc || ls /usr/share/man/man1/envc.1.gz")
            .status
            .success(),
        "purged without a trace"
    );
}
