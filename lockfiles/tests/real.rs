//! Against the real world: Debian's archive (network: deb.debian.org over http) and the tools
//! installed on this machine.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use envc_lockfiles::fetch::{fetch_deb, verify_signature, DEBIAN_KEYRING};
use envc_lockfiles::probe::{probe_tool, TOOLS};
use envc_lockfiles::*;

const MIRROR: &str = "http://deb.debian.org/debian";

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

#[tokio::test]
async fn locks_against_debian_bookworm() {
    let archive = Archive::fetch(MIRROR, "bookworm", "amd64", &["main"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(archive.pin.name, "debian/bookworm");
    assert!(is_sha256(&archive.pin.release_sha256));
    assert_eq!(archive.release.codename, "bookworm");
    assert!(archive.len() > 50_000, "only {} packages", archive.len());

    let pins = resolve_packages(&archive, &[("hello", None)]).unwrap_or_else(|e| panic!("{e:?}"));
    let hello = &pins[0];
    assert!(is_sha256(&hello.sha256), "{hello:?}");
    assert!(
        hello.filename.starts_with("pool/main/h/hello/hello_"),
        "{hello:?}"
    );
    assert!(hello.filename.ends_with("_amd64.deb"), "{hello:?}");
    // The last link: the .deb the pin names has the pinned bytes.
    let deb = fetch_deb(MIRROR, hello)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(deb.len() as u64, hello.size);

    let set = resolve_image(&archive, &["openssh-server"]).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = set.iter().map(|p| p.name.as_str()).collect();
    for want in [
        "openssh-server",
        "openssh-client",
        "apt",
        "dpkg",
        "libc6",
        "base-files",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);

    // What the image builder (executor/src/image.sh) installs: its base packages, with
    // usr-is-merged standing for mmdebstrap's merged-usr hook. Checked once by hand to be
    // identical, versions included, to the package list of a real build; here, the
    // choices that would differ without the hook.
    let base = [
        "openssh-server",
        "systemd-sysv",
        "udev",
        "kmod",
        "iproute2",
        "e2fsprogs",
        "dbus",
        "linux-image-cloud-amd64",
        "usr-is-merged",
    ];
    let image = resolve_image(&archive, &base).unwrap_or_else(|e| panic!("{e:?}"));
    let image: Vec<&str> = image.iter().map(|p| p.name.as_str()).collect();
    for want in base.iter().chain(&["systemd", "mawk", "libc6"]) {
        assert!(image.contains(want), "{want} missing from {image:?}");
    }
    for unwanted in ["usrmerge", "perl", "lsb-base"] {
        assert!(!image.contains(&unwanted), "{unwanted} in {image:?}");
    }

    // The whole lock round-trips.
    let mut lock = Lockfile::new(1_700_000_000, "0".repeat(64));
    lock.archives.push(archive.pin.clone());
    lock.packages = pins;
    lock.images.push(ImagePin {
        name: "ssh-box".into(),
        archive: archive.pin.name.clone(),
        includes: vec!["openssh-server".into()],
        packages: set,
    });
    let text = lock.to_toml("envc lock test.env");
    assert_eq!(Lockfile::parse(&text), Ok(lock));

    // Debian signs its InRelease; check it where the machine can.
    let keyring = std::path::Path::new(DEBIAN_KEYRING);
    if keyring.is_file()
        && std::process::Command::new("gpgv")
            .arg("--version")
            .output()
            .is_ok()
    {
        verify_signature(&archive, keyring).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn probes_the_tools_installed_here() {
    for (tool, _) in TOOLS {
        let installed = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            eprintln!("{tool} is not installed here: not probed");
            continue;
        }
        let pin = probe_tool(tool).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pin.name, *tool);
        assert!(
            pin.version.starts_with(|c: char| c.is_ascii_digit()),
            "{tool}: {:?}",
            pin.version
        );
    }
}
