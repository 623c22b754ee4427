//! Locking against a tiny archive served over loopback: resolution, a version move and its
//! diff, and each way the chain Release → Packages → .deb can fail.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

mod support;

use envc_lockfiles::fetch::{fetch_deb, sha256_hex, verify_signature, FetchError, DEBIAN_KEYRING};
use envc_lockfiles::resolve::verify_packages;
use envc_lockfiles::*;
use support::{closed_port_url, pkg, Pkg, TinyArchive};

const DATE_1: &str = "Sat, 10 Jan 2026 10:14:31 UTC";
const DATE_2: &str = "Sat, 07 Feb 2026 09:50:12 UTC";

const V1: &[Pkg] = &[
    pkg("base-files", "12.4", "Essential: yes"),
    pkg(
        "dpkg",
        "1.21.22",
        "Essential: yes; Pre-Depends: libc6 (>= 2.34), tar",
    ),
    pkg("tar", "1.34", "Essential: yes; Pre-Depends: libc6"),
    pkg("libc6", "2.36-9", ""),
    pkg("apt", "2.6.1", "Depends: libc6, debconf | debconf-2.0"),
    pkg("debconf", "1.5.82", ""),
    pkg("hello", "2.10-2", "Depends: libc6 (>= 2.34)"),
    pkg("openssh-client", "1:9.2p1-2", "Depends: libc6"),
    pkg(
        "openssh-server",
        "1:9.2p1-2",
        "Depends: libc6, openssh-client (= 1:9.2p1-2); Recommends: xauth",
    ),
    pkg("xauth", "1:1.1.2-1", ""),
];

/// V1 a month later: a point release moved libc6 and hello, and ssh moved to a new
/// revision.
const V2: &[Pkg] = &[
    pkg("base-files", "12.4", "Essential: yes"),
    pkg(
        "dpkg",
        "1.21.22",
        "Essential: yes; Pre-Depends: libc6 (>= 2.34), tar",
    ),
    pkg("tar", "1.34", "Essential: yes; Pre-Depends: libc6"),
    pkg("libc6", "2.36-9+deb12u4", ""),
    pkg("apt", "2.6.1", "Depends: libc6, debconf | debconf-2.0"),
    pkg("debconf", "1.5.82", ""),
    pkg("hello", "2.10-3", "Depends: libc6 (>= 2.34)"),
    pkg(
        "openssh-client",
        "1:9.2p1-2+deb12u1",
        "Depends: libc6, libfido2-1",
    ),
    pkg("libfido2-1", "1.12.0-2", ""),
    pkg(
        "openssh-server",
        "1:9.2p1-2+deb12u1",
        "Depends: libc6, openssh-client (= 1:9.2p1-2+deb12u1)",
    ),
];

async fn fetch(a: &TinyArchive) -> Result<Archive, FetchError> {
    Archive::fetch(&a.mirror, a.suite, "amd64", &["main"]).await
}

/// What `envc lock` would write for an environment naming `hello` and an image of
/// openssh-server (tools and stdlib fixed).
fn lock(archive: &Archive) -> Lockfile {
    let mut lock = Lockfile::new(1_700_000_000, "5".repeat(64));
    lock.archives.push(archive.pin.clone());
    lock.packages = resolve_packages(archive, &[("hello", None)]).unwrap();
    lock.images.push(ImagePin {
        name: "ssh-box".into(),
        archive: archive.pin.name.clone(),
        includes: vec!["openssh-server".into()],
        packages: resolve_image(archive, &["openssh-server"]).unwrap(),
    });
    lock
}

fn file(a: &TinyArchive, path: &str) -> Vec<u8> {
    std::fs::read(a.root().join(path)).unwrap()
}

#[tokio::test]
async fn resolves_against_a_served_archive() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let archive = fetch(&a).await.unwrap();

    // The archive pin is the InRelease as served.
    let inrelease = file(&a, "dists/tiny/InRelease");
    assert_eq!(archive.pin.name, "debian/tiny");
    assert_eq!(archive.pin.release_sha256, sha256_hex(&inrelease));
    assert_eq!(archive.pin.date, DATE_1);
    assert_eq!(archive.pin.mirror, a.mirror);

    // A package pin is its .deb: path, size, sha256.
    let pins = resolve_packages(&archive, &[("hello", None)]).unwrap();
    let deb = file(&a, "pool/main/h/hello/hello_2.10-2_amd64.deb");
    assert_eq!(
        pins,
        [PackagePin {
            name: "hello".into(),
            archive: "debian/tiny".into(),
            version: "2.10-2".into(),
            architecture: "amd64".into(),
            filename: "pool/main/h/hello/hello_2.10-2_amd64.deb".into(),
            size: deb.len() as u64,
            sha256: sha256_hex(&deb),
            closure: None,
        }]
    );
    // ... and the last link of the chain verifies.
    assert_eq!(fetch_deb(&a.mirror, &pins[0]).await.unwrap(), deb);
    assert_eq!(verify_packages(&archive, &pins), []);

    // The image set: essential, apt, the include, closed over dependencies; Recommends
    // (xauth) are not installed.
    let set: Vec<String> = resolve_image(&archive, &["openssh-server"])
        .unwrap()
        .iter()
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    assert_eq!(
        set,
        [
            "apt=2.6.1",
            "base-files=12.4",
            "debconf=1.5.82",
            "dpkg=1.21.22",
            "libc6=2.36-9",
            "openssh-client=1:9.2p1-2",
            "openssh-server=1:9.2p1-2",
            "tar=1.34",
        ]
    );

    // The lockfile of it reads back, and locking again gives the same bytes.
    let text = lock(&archive).to_toml("envc lock tiny.env");
    assert_eq!(Lockfile::parse(&text), Ok(lock(&archive)));
    let again = fetch(&a).await.unwrap();
    assert_eq!(lock(&again).to_toml("envc lock tiny.env"), text);
}

#[tokio::test]
async fn a_mirror_without_inrelease_is_pinned_by_its_release() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, false);
    let archive = fetch(&a).await.unwrap();
    assert_eq!(
        archive.pin.release_sha256,
        sha256_hex(&file(&a, "dists/tiny/Release"))
    );
    // Nothing to check a signature on.
    let e = verify_signature(&archive, std::path::Path::new(DEBIAN_KEYRING)).unwrap_err();
    assert!(matches!(e, FetchError::CannotVerify { .. }), "{e}");
    assert!(e.to_string().contains("serves no InRelease"), "{e}");
}

#[tokio::test]
async fn a_forged_signature_does_not_verify() {
    let keyring = std::path::Path::new(DEBIAN_KEYRING);
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let archive = fetch(&a).await.unwrap();
    let e = verify_signature(&archive, keyring).unwrap_err();
    let have_gpgv = std::process::Command::new("gpgv")
        .arg("--version")
        .output()
        .is_ok();
    if keyring.is_file() && have_gpgv {
        assert!(matches!(e, FetchError::BadSignature { .. }), "{e}");
    } else {
        assert!(matches!(e, FetchError::CannotVerify { .. }), "{e}");
    }
}

#[tokio::test]
async fn a_version_move_shows_in_the_diff() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let v1 = fetch(&a).await.unwrap();
    let old = lock(&v1);

    a.write(V2, DATE_2, true);
    let v2 = fetch(&a).await.unwrap();
    let new = lock(&v2);

    let d = diff(&old, &new);
    insta::assert_snapshot!(d.to_string());

    // The old pins no longer verify against the moved archive: stale, with the fix.
    let errors: Vec<String> = verify_packages(&v2, &old.packages)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        errors,
        [
            "package:hello: `hello` 2.10-2 is no longer in debian/tiny (now 2.10-3)\n  \
          hint: the suite moved on: run `envc lock FILE --update=package:hello`"
        ]
    );
    // ... and the mirror no longer has the old .deb.
    let e = fetch_deb(&a.mirror, &old.packages[0]).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "`pool/main/h/hello/hello_2.10-2_amd64.deb` of debian/tiny does not match its pin \
         (package:hello): expected hello 2.10-2, got 404: the mirror no longer has it\n  \
         hint: Debian mirrors keep only the current versions: use a snapshot mirror for this \
         lock, or run `envc lock FILE --update=package:hello`"
    );
}

#[tokio::test]
async fn a_packages_file_that_does_not_match_its_release_is_refused() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let path = "dists/tiny/main/binary-amd64/Packages.gz";
    let listed = file(&a, path);

    // Same size, other bytes.
    let mut changed = listed.clone();
    *changed.last_mut().unwrap() ^= 1;
    a.overwrite(path, &changed);
    let e = fetch(&a).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "`main/binary-amd64/Packages.gz` of debian/tiny does not match its Release: \
             expected sha256 {}, got sha256 {}\n  \
             hint: the mirror changed mid-update: run again (if it persists, the mirror is \
             broken: use another)",
            sha256_hex(&listed),
            sha256_hex(&changed)
        )
    );

    // Another size.
    a.overwrite(path, &listed[..listed.len() - 1]);
    let e = fetch(&a).await.unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "`main/binary-amd64/Packages.gz` of debian/tiny does not match its Release: \
             expected {} bytes, got {} bytes",
            listed.len(),
            listed.len() - 1
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_tampered_deb_is_refused() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let archive = fetch(&a).await.unwrap();
    let pins = resolve_packages(&archive, &[("hello", None)]).unwrap();
    let path = "pool/main/h/hello/hello_2.10-2_amd64.deb";
    let mut deb = file(&a, path);
    deb[0] ^= 0x20;
    a.overwrite(path, &deb);
    let e = fetch_deb(&a.mirror, &pins[0]).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "`{path}` of debian/tiny does not match its pin (package:hello): expected sha256 {}, \
             got sha256 {}\n  \
             hint: the mirror serves other bytes under this name: use another mirror; if the \
             archive really changed the file, run `envc lock FILE --update=package:hello` and \
             review",
            pins[0].sha256,
            sha256_hex(&deb)
        )
    );
}

#[tokio::test]
async fn a_missing_package_is_named_with_a_suggestion() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let archive = fetch(&a).await.unwrap();
    let errors: Vec<String> =
        resolve_packages(&archive, &[("openssh-sever", None), ("hello", None)])
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect();
    assert_eq!(
        errors,
        [format!(
            "package:openssh-sever: package `openssh-sever` does not exist in debian/tiny ({} tiny \
             main, amd64)\n  hint: did you mean `openssh-server`? Check the name in the \
             environment file",
            a.mirror
        )]
    );
    let errors = resolve_image(&archive, &["helo"]).unwrap_err();
    assert_eq!(errors[0].pin.to_string(), "package:helo");
    assert!(errors[0].hint.contains("did you mean `hello`?"));
}

#[tokio::test]
async fn an_unreachable_mirror_names_the_url() {
    let mirror = closed_port_url();
    let e = Archive::fetch(&mirror, "bookworm", "amd64", &["main"])
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, FetchError::Unreachable { .. }), "{text}");
    assert!(
        text.starts_with(&format!("cannot reach {mirror}/dists/bookworm/InRelease: ")),
        "{text}"
    );
    assert!(
        text.ends_with(
            "hint: locking reads the archive's indices: the mirror must be reachable from this \
             machine (check the mirror URL and the network, then run again)"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_unknown_suite_or_component_is_named() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    let e = Archive::fetch(&a.mirror, "bookwurm", "amd64", &["main"])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "suite `bookwurm` not found on {0} (neither dists/bookwurm/InRelease nor \
             dists/bookwurm/Release exists)\n  \
             hint: check the suite's name (bookworm, trixie, …) and that {0} is a Debian archive",
            a.mirror
        )
    );
    let e = Archive::fetch(&a.mirror, "tiny", "amd64", &["main", "contrib"])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the Release of debian/tiny does not list `contrib/binary-amd64/Packages.gz` \
         (components: main; architectures: amd64)\n  \
         hint: check the archive's components and architecture"
    );
    let e = Archive::fetch(&a.mirror, "tiny", "arm64", &["main"])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("`main/binary-arm64/Packages.gz`"),
        "{e}"
    );
}

#[tokio::test]
async fn a_broken_release_is_reported_with_its_url() {
    let a = TinyArchive::new("tiny");
    a.write(V1, DATE_1, true);
    a.overwrite("dists/tiny/InRelease", b"<html>captive portal</html>\n");
    let e = fetch(&a).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}/dists/tiny/InRelease: not a Release file: line 1: expected `Field: value`, \
             found \"<html>captive portal</html>\"\n  \
             hint: the mirror served a broken file: run again, or use another mirror",
            a.mirror
        )
    );
}
