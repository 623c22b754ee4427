//! Providers resolved and fetched against real parts: a provider registry served over
//! loopback (the tiny static server of `support`, laid out as the registry protocol's
//! URLs), SHA256SUMS signed with a key gpg makes for the test and checked with gpgv, zips
//! built here with the `zip` crate, a network mirror and both filesystem mirror layouts.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

#[path = "../../tests/support/signing_key.rs"]
mod signing_key;
mod support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use envc_lockfiles::fetch::sha256_hex;
use envc_lockfiles::provider::hashes::{h1_of_dir, h1_of_zip};
use envc_lockfiles::provider::{
    self, Constraints, HttpPolicy, PackageHash, Platform, ProviderAddress, ProviderError,
    ProviderSource, ResolvedProvider,
};
use signing_key::TestKey;

const LOOPBACK: HttpPolicy = HttpPolicy::AllowPlainHttpToLoopback;

fn linux() -> Platform {
    Platform::new("linux", "amd64")
}

fn darwin() -> Platform {
    Platform::new("darwin", "arm64")
}

/// The files of `terraform-provider-tiny` VERSION: an executable shell script that says
/// its version, and a licence beside it (as HashiCorp's packages have).
fn package_files(version: &str) -> Vec<(String, Vec<u8>, u32)> {
    vec![
        (
            format!("terraform-provider-tiny_v{version}"),
            format!("#!/bin/sh\necho tiny {version}\n").into_bytes(),
            0o755,
        ),
        ("LICENSE".into(), b"MIT, for the test\n".to_vec(), 0o644),
    ]
}

/// A zip of `files`, deflated, with their modes (the `zip` crate, no time feature: every
/// entry has the same fixed date, so the bytes are the same each run).
fn zip_of(files: &[(String, Vec<u8>, u32)]) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes, mode) in files {
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode);
        w.start_file(name.as_str(), options).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A provider registry on loopback, serving `127.0.0.1:PORT/envc/tiny`.
struct Registry {
    root: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`
    server: String,
    key: TestKey,
    address: ProviderAddress,
    versions: Vec<String>,
}

impl Registry {
    fn new() -> Registry {
        let root = tempfile::tempdir().unwrap();
        let server = support::serve(root.path().to_path_buf());
        let host = server.strip_prefix("http://").unwrap();
        // Discovery names the API by an absolute path, relative to the document's URL.
        write(
            &root.path().join(".well-known/terraform.json"),
            br#"{"providers.v1": "/v1/providers/"}"#,
        );
        Registry {
            address: ProviderAddress::parse(&format!("{host}/envc/tiny")).unwrap(),
            root,
            server,
            key: TestKey::new("Tiny Provider Publisher <tiny@example.org>"),
            versions: Vec::new(),
        }
    }

    fn releases(&self, version: &str) -> PathBuf {
        self.root.path().join(format!("releases/tiny/{version}"))
    }

    fn zip_path(&self, version: &str, platform: &Platform) -> PathBuf {
        self.releases(version)
            .join(format!("terraform-provider-tiny_{version}_{platform}.zip"))
    }

    fn sums_path(&self, version: &str) -> PathBuf {
        self.releases(version)
            .join(format!("terraform-provider-tiny_{version}_SHA256SUMS"))
    }

    /// Publishes `version` for linux_amd64 and darwin_arm64: packages, SHA256SUMS (with a
    /// manifest line, as HashiCorp's have) signed by the registry's key, the download
    /// documents, and the versions list.
    fn publish(&mut self, version: &str) {
        let mut sums = String::new();
        for platform in [darwin(), linux()] {
            // The darwin package differs from the linux one, as real builds do.
            let mut files = package_files(version);
            files[0].1.extend(format!("# {platform}\n").as_bytes());
            let zip = zip_of(&files);
            write(&self.zip_path(version, &platform), &zip);
            let filename = format!("terraform-provider-tiny_{version}_{platform}.zip");
            sums.push_str(&format!("{}  {filename}\n", sha256_hex(&zip)));
            let doc = serde_json::json!({
                "protocols": ["5.0"],
                "os": platform.os,
                "arch": platform.arch,
                "filename": filename,
                // Relative to the document, as the protocol allows.
                "download_url": format!("/releases/tiny/{version}/{filename}"),
                "shasums_url": format!(
                    "{}/releases/tiny/{version}/terraform-provider-tiny_{version}_SHA256SUMS",
                    self.server
                ),
                "shasums_signature_url": format!(
                    "{}/releases/tiny/{version}/terraform-provider-tiny_{version}_SHA256SUMS.sig",
                    self.server
                ),
                "shasum": sha256_hex(&zip),
                "signing_keys": {"gpg_public_keys": [{
                    "key_id": &self.key.fingerprint[24..],
                    "ascii_armor": String::from_utf8(self.key.public()).unwrap(),
                }]},
            });
            write(
                &self.root.path().join(format!(
                    "v1/providers/envc/tiny/{version}/download/{}/{}",
                    platform.os, platform.arch
                )),
                doc.to_string().as_bytes(),
            );
        }
        sums.push_str(&format!(
            "{}  terraform-provider-tiny_{version}_manifest.json\n",
            sha256_hex(b"{}")
        ));
        write(&self.sums_path(version), sums.as_bytes());
        self.key.detach_sign(&self.sums_path(version));
        self.versions.push(version.to_string());
        let list: Vec<serde_json::Value> = self
            .versions
            .iter()
            .map(|v| {
                serde_json::json!({
                    "version": v,
                    "protocols": ["5.0"],
                    "platforms": [{"os": "darwin", "arch": "arm64"}, {"os": "linux", "arch": "amd64"}],
                })
            })
            .collect();
        write(
            &self.root.path().join("v1/providers/envc/tiny/versions"),
            serde_json::json!({ "versions": list })
                .to_string()
                .as_bytes(),
        );
    }

    fn source(&self) -> ProviderSource {
        ProviderSource::Registry { http: LOOPBACK }
    }

    async fn resolve(&self, constraint: &str) -> Result<ResolvedProvider, ProviderError> {
        let c = Constraints::parse(constraint).unwrap();
        provider::resolve(&self.address, &c, &linux(), &self.source()).await
    }
}

fn published() -> Registry {
    let mut r = Registry::new();
    for v in ["0.1.0", "0.1.1", "1.0.0"] {
        r.publish(v);
    }
    r
}

fn zh(bytes: &[u8]) -> String {
    PackageHash::zh(bytes).to_string()
}

#[tokio::test]
async fn resolves_the_newest_version_the_constraint_admits_and_pins_its_hashes() {
    let r = published();
    let pin = r.resolve("~> 0.1").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pin.version.to_string(), "0.1.1");
    assert_eq!(pin.address, r.address);

    let linux_zip = std::fs::read(r.zip_path("0.1.1", &linux())).unwrap();
    let darwin_zip = std::fs::read(r.zip_path("0.1.1", &darwin())).unwrap();
    // The h1: of this platform's package, and a zh: for each package the signed SHA256SUMS
    // lists (not its manifest line), sorted by text.
    let mut expected = vec![
        h1_of_zip(&linux_zip).unwrap().to_string(),
        zh(&linux_zip),
        zh(&darwin_zip),
    ];
    expected.sort();
    let got: Vec<String> = pin.hashes().iter().map(|h| h.to_string()).collect();
    assert_eq!(got, expected);
    assert!(got[0].starts_with("h1:"), "{got:?}");

    assert_eq!(
        r.resolve(">= 0.1.0").await.unwrap().version.to_string(),
        "1.0.0"
    );
    assert_eq!(
        r.resolve("0.1.0").await.unwrap().version.to_string(),
        "0.1.0"
    );
    let none = r.resolve("~> 2.0").await.unwrap_err();
    assert!(
        matches!(none, ProviderError::NoMatchingVersion { .. }),
        "{none}"
    );
    assert!(
        none.to_string().contains("available: 0.1.0, 0.1.1, 1.0.0"),
        "{none}"
    );

    // Fetching by the pin unpacks the executable, runnable, and nothing else.
    let out = tempfile::tempdir().unwrap();
    let exe = provider::fetch(&pin, &linux(), &r.source(), out.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exe, out.path().join("terraform-provider-tiny_v0.1.1"));
    let mode = std::fs::metadata(&exe).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let ran = std::process::Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "tiny 0.1.1\n");
    let listed: Vec<_> = std::fs::read_dir(out.path()).unwrap().collect();
    assert_eq!(listed.len(), 1);

    // On another platform the pin still verifies the package, by its zh:.
    let other = tempfile::tempdir().unwrap();
    provider::fetch(&pin, &darwin(), &r.source(), other.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_tampered_package_is_refused_and_nothing_is_unpacked() {
    let r = published();
    let pin = r.resolve("~> 0.1").await.unwrap();

    // The registry now serves other bytes under the package's name.
    let path = r.zip_path("0.1.1", &linux());
    let mut files = package_files("0.1.1");
    files[0].1 = b"#!/bin/sh\necho pwned\n".to_vec();
    let evil = zip_of(&files);
    let honest = std::fs::read(&path).unwrap();
    write(&path, &evil);

    let e = r.resolve("~> 0.1").await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ProviderError::HashMismatch(_)), "{text}");
    for piece in [
        r.address.to_string(),
        "0.1.1".to_string(),
        format!(
            "{}/releases/tiny/0.1.1/terraform-provider-tiny_0.1.1_linux_amd64.zip",
            r.server
        ),
        format!("expected sha256 {}", sha256_hex(&honest)),
        format!("got sha256 {}", sha256_hex(&evil)),
        "hint:".to_string(),
    ] {
        assert!(text.contains(&piece), "{piece} not in {text}");
    }

    // Fetching by the pin made before is refused the same way, and writes nothing.
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("bin");
    let e = provider::fetch(&pin, &linux(), &r.source(), &dest)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ProviderError::HashMismatch(_)), "{text}");
    assert!(text.contains("the lockfile's pin"), "{text}");
    assert!(text.contains(&zh(&evil)), "{text}");
    assert!(!dest.exists(), "something was unpacked");
}

#[tokio::test]
async fn a_bad_signature_is_refused() {
    // SHA256SUMS signed by a key the registry does not offer.
    let r = published();
    let stranger = TestKey::new("Someone Else <else@example.org>");
    stranger.detach_sign(&r.sums_path("0.1.1"));
    let e = r.resolve("~> 0.1").await.unwrap_err();
    assert!(matches!(e, ProviderError::BadSignature { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("0.1.1") && text.contains("SHA256SUMS"),
        "{text}"
    );

    // SHA256SUMS changed after it was signed (to vouch for a swapped package).
    let r = published();
    let sums = std::fs::read_to_string(r.sums_path("0.1.1")).unwrap();
    write(
        &r.sums_path("0.1.1"),
        format!("{}  extra.zip\n{sums}", "0".repeat(64)).as_bytes(),
    );
    let e = r.resolve("~> 0.1").await.unwrap_err();
    assert!(matches!(e, ProviderError::BadSignature { .. }), "{e}");
}

/// A network mirror (served by the same kind of server), a packed and an unpacked
/// filesystem mirror, all holding `example.com/envc/tiny` 0.1.1's linux package.
struct Mirrors {
    _root: tempfile::TempDir,
    network: String,
    packed: PathBuf,
    unpacked: PathBuf,
    zip: Vec<u8>,
    dir: PathBuf,
}

fn mirrors(listed_h1: Option<String>) -> Mirrors {
    let root = tempfile::tempdir().unwrap();
    let files = package_files("0.1.1");
    let zip = zip_of(&files);
    let h1 = listed_h1.unwrap_or_else(|| h1_of_zip(&zip).unwrap().to_string());

    let net = root.path().join("net/example.com/envc/tiny");
    write(
        &net.join("index.json"),
        br#"{"versions": {"0.1.0": {}, "0.1.1": {}, "v-not-a-version": {}}}"#,
    );
    write(
        &net.join("0.1.1.json"),
        serde_json::json!({"archives": {"linux_amd64": {
            "url": "terraform-provider-tiny_0.1.1_linux_amd64.zip",
            "hashes": [h1],
        }}})
        .to_string()
        .as_bytes(),
    );
    write(
        &net.join("terraform-provider-tiny_0.1.1_linux_amd64.zip"),
        &zip,
    );
    let server = support::serve(root.path().to_path_buf());

    let packed = root.path().join("packed");
    write(
        &packed.join("example.com/envc/tiny/terraform-provider-tiny_0.1.1_linux_amd64.zip"),
        &zip,
    );
    // Another platform's package is not this platform's version.
    write(
        &packed.join("example.com/envc/tiny/terraform-provider-tiny_0.2.0_darwin_arm64.zip"),
        &zip,
    );
    let unpacked = root.path().join("unpacked");
    let dir = unpacked.join("example.com/envc/tiny/0.1.1/linux_amd64");
    for (name, bytes, mode) in &files {
        write(&dir.join(name), bytes);
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    Mirrors {
        _root: root,
        network: format!("{server}/net/"),
        packed,
        unpacked,
        zip,
        dir,
    }
}

fn tiny_elsewhere() -> ProviderAddress {
    ProviderAddress::parse("example.com/envc/tiny").unwrap()
}

#[tokio::test]
async fn a_network_mirror_and_both_filesystem_layouts_pin_the_same_h1() {
    let m = mirrors(None);
    let address = tiny_elsewhere();
    let constraint = Constraints::parse("~> 0.1").unwrap();
    let sources = [
        ProviderSource::NetworkMirror {
            base: m.network.clone(),
            http: LOOPBACK,
        },
        ProviderSource::FilesystemMirror {
            root: m.packed.clone(),
        },
        ProviderSource::FilesystemMirror {
            root: m.unpacked.clone(),
        },
    ];
    let expected = h1_of_zip(&m.zip).unwrap();
    assert_eq!(h1_of_dir(&m.dir).unwrap(), expected);
    let mut pins = Vec::new();
    for source in &sources {
        let pin = provider::resolve(&address, &constraint, &linux(), source)
            .await
            .unwrap_or_else(|e| panic!("{source:?}: {e}"));
        assert_eq!(pin.version.to_string(), "0.1.1", "{source:?}");
        assert_eq!(pin.hashes(), std::slice::from_ref(&expected), "{source:?}");
        pins.push(pin);
    }
    // Each source's package verifies against any other's pin, and unpacks.
    for source in &sources {
        let out = tempfile::tempdir().unwrap();
        let exe = provider::fetch(&pins[0], &linux(), source, out.path())
            .await
            .unwrap_or_else(|e| panic!("{source:?}: {e}"));
        let ran = std::process::Command::new(&exe).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&ran.stdout), "tiny 0.1.1\n");
    }
    // A pin of other bytes refuses the unpacked copy too.
    let other = ResolvedProvider::new(
        address.clone(),
        pins[0].version.clone(),
        [PackageHash::zh(b"x")],
    );
    let out = tempfile::tempdir().unwrap();
    let e = provider::fetch(&other, &linux(), &sources[2], out.path())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("only zh: hashes"), "{e}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_network_mirror_whose_hash_does_not_match_is_refused() {
    let wrong = "h1:NqM8EUOU14njkJ3fqMW+pc6Ldnwhi/IjpwHt7yyuwOQ=".to_string();
    let m = mirrors(Some(wrong.clone()));
    let source = ProviderSource::NetworkMirror {
        base: m.network.clone(),
        http: LOOPBACK,
    };
    let e = provider::resolve(
        &tiny_elsewhere(),
        &Constraints::parse("0.1.1").unwrap(),
        &linux(),
        &source,
    )
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ProviderError::HashMismatch(_)), "{text}");
    assert!(
        text.contains(&wrong) && text.contains("0.1.1.json lists"),
        "{text}"
    );
}

#[tokio::test]
async fn plain_http_is_used_only_when_asked_and_only_to_loopback() {
    let m = mirrors(None);
    let constraint = Constraints::parse("~> 0.1").unwrap();
    for (base, http) in [
        (m.network.as_str(), HttpPolicy::HttpsOnly),
        ("http://mirror.example/providers/", LOOPBACK),
    ] {
        let source = ProviderSource::NetworkMirror {
            base: base.to_string(),
            http,
        };
        let e = provider::resolve(&tiny_elsewhere(), &constraint, &linux(), &source)
            .await
            .unwrap_err();
        assert!(matches!(e, ProviderError::PlainHttp { .. }), "{base}: {e}");
        assert!(e.to_string().contains(base), "{e}");
    }
}

/// The h1: recomputed with coreutils over the unpacked files, as `dirhash.Hash1` is
/// defined: `sha256sum` of the files in byte order writes exactly its summary lines.
#[test]
fn h1_agrees_with_sha256sum_and_base64() {
    let m = mirrors(None);
    let script = "cd \"$1\" && find . -type f | sed 's|^\\./||' | LC_ALL=C sort \
                  | xargs sha256sum | sha256sum | cut -d' ' -f1 | xxd -r -p | base64";
    let out = std::process::Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(&m.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by_hand = format!("h1:{}", String::from_utf8(out.stdout).unwrap().trim());
    assert_eq!(h1_of_dir(&m.dir).unwrap().to_string(), by_hand);
    assert_eq!(h1_of_zip(&m.zip).unwrap().to_string(), by_hand);
}

#[tokio::test]
async fn a_zip_entry_outside_the_directory_refuses_the_package() {
    let root = tempfile::tempdir().unwrap();
    let mut files = package_files("0.1.1");
    files.push(("../escaped".into(), b"x".to_vec(), 0o644));
    write(
        &root
            .path()
            .join("example.com/envc/tiny/terraform-provider-tiny_0.1.1_linux_amd64.zip"),
        &zip_of(&files),
    );
    let source = ProviderSource::FilesystemMirror {
        root: root.path().to_path_buf(),
    };
    let (_, package) = provider::resolve_package(
        &tiny_elsewhere(),
        &Constraints::parse("0.1.1").unwrap(),
        &linux(),
        &source,
    )
    .await
    .unwrap();
    let out = root.path().join("out/bin");
    let e = package.unpack(&out).unwrap_err();
    assert!(matches!(e, ProviderError::BadPackage { .. }), "{e}");
    assert!(e.to_string().contains("`../escaped`"), "{e}");
    assert!(!root.path().join("out/escaped").exists());
    assert_eq!(std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0), 0);
}

/// `envc lock`'s resolution of an environment whose one need is a provider (a `Needs` built
/// by hand, as a `resource` node's `lock_needs` fills it): pinned from the loopback
/// registry, fresh against the source, kept by a relock after the registry publishes a
/// newer version, moved by `--update=provider:…`, and stale once the source's constraint
/// no longer admits it. A plain test, not a tokio one: resolution runs its own runtime.
#[test]
fn an_environments_provider_is_locked_kept_and_moved_like_other_pins() {
    use envc_lockfiles::cloud::NoCloud;
    use envc_lockfiles::environment::resolve_environment;
    use envc_lockfiles::{diff, model::update, stale, Lockfile, Needs, PinKey};

    // The registry publishes linux_amd64 and darwin_arm64; resolution fetches this
    // machine's package.
    if Platform::current() != linux() && Platform::current() != darwin() {
        eprintln!("skipped: no test package for {}", Platform::current());
        return;
    }
    let mut r = published();
    let stdlib = "5".repeat(64);
    let project = tempfile::tempdir().unwrap();
    let address = r.address.to_string();
    let needs = |constraint: &str| {
        let mut n = Needs::default();
        n.add_provider(&address, constraint, "h/resource:notes")
            .unwrap();
        n
    };
    let lock = |needs: &Needs, r: &Registry| -> Lockfile {
        match resolve_environment(needs, None, &stdlib, project.path(), &NoCloud, &r.source()) {
            Ok(resolved) => resolved.lock,
            Err(u) => panic!("{}", u.errors.join("\n")),
        }
    };
    let old = lock(&needs("~> 0.1.0"), &r);
    let key = PinKey::Provider(r.address.to_string());
    let pin = old.provider(&r.address.to_string()).unwrap();
    assert_eq!(pin.version.to_string(), "0.1.1");
    assert_eq!(pin.constraints.to_string(), "~> 0.1.0");
    // Written and read back, with the block as the README shows it.
    let text = old.to_toml("envc lock prod.env");
    assert!(
        text.contains(&format!(
            "\n[[provider]]\nname = \"{}\"\nversion = \"0.1.1\"\nconstraints = \"~> 0.1.0\"\nhashes = [\n    \"h1:",
            r.address
        )),
        "{text}"
    );
    assert_eq!(Lockfile::parse(&text).as_ref(), Ok(&old));
    assert!(stale(&old, &needs("~> 0.1.0"), &stdlib).is_empty());

    // The registry moves on: a relock keeps the pin, naming it moves it.
    r.publish("0.1.2");
    let fresh = lock(&needs("~> 0.1.0"), &r);
    assert_eq!(
        fresh
            .provider(&r.address.to_string())
            .unwrap()
            .version
            .to_string(),
        "0.1.2"
    );
    let kept = update(&old, &fresh, &[]).unwrap();
    assert_eq!(kept.pin_value(&key), old.pin_value(&key));
    let moved = update(&old, &fresh, std::slice::from_ref(&key)).unwrap();
    assert_ne!(moved.pin_value(&key), old.pin_value(&key));
    let shown = diff(&old, &moved).to_string();
    assert!(
        shown.contains(&format!(
            "- `{key}`: 0.1.1 → 0.1.2, hashes: 3 dropped, 3 added"
        )),
        "{shown}"
    );

    // The source asks for 1.x: the pin is stale, and says how to move it.
    let problems: Vec<String> = stale(&old, &needs("~> 1.0"), &stdlib)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        [format!(
            "{key}: pinned at 0.1.1, which the constraint `~> 1.0` of h/resource:notes does not \
             admit: run `envc lock FILE --update={key}` to pin a version it admits; run `envc \
             lock FILE` (or `--update=KEY`) and commit the lockfile"
        )]
    );

    // A version the constraint admits that the registry lacks: one message naming the pin.
    let missing = resolve_environment(
        &needs("~> 3.0"),
        None,
        &stdlib,
        project.path(),
        &NoCloud,
        &r.source(),
    )
    .err()
    .unwrap();
    assert_eq!(missing.errors.len(), 1, "{:?}", missing.errors);
    assert!(
        missing.errors[0].starts_with(&format!("{key} (for h/resource:notes): ")),
        "{}",
        missing.errors[0]
    );
}
