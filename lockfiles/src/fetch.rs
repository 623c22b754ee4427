//! Reading a Debian archive over HTTP, verifying each link of the chain as it goes:
//! `InRelease` (its sha256 is the archive pin; its signature can be checked with
//! [`verify_signature`]) → `Packages.gz` (size and sha256 listed in the Release) → `.deb`
//! (size and sha256 listed in Packages, checked by [`fetch_deb`]).
//!
//! Mirrors are used over plain http, as apt does: integrity comes from the hashes, not from
//! the transport. Indices are fetched by hash (`by-hash/SHA256/…`) when the Release offers
//! it, so a mirror that updates while we read cannot hand us a Packages file of another
//! Release.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::archive::{self, Archive, Release};
use crate::model::{ArchivePin, PackagePin};

/// Debian's archive keyring, as the `debian-archive-keyring` package installs it.
pub const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Long enough for a suite's Packages.gz (12 MB for bookworm main) on a slow link.
const TIMEOUT: Duration = Duration::from_secs(600);

/// Why an archive could not be read, with the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchError {
    /// No connection (refused, no route, DNS, timeout).
    Unreachable { url: String, detail: String },
    /// An HTTP status other than success (and other than a 404 that has a fallback).
    Status { url: String, status: u16 },
    /// Neither `dists/SUITE/InRelease` nor `dists/SUITE/Release` exists.
    SuiteNotFound { mirror: String, suite: String },
    /// The Release does not list the index of a component/architecture.
    MissingIndex {
        archive: String,
        path: String,
        available: String,
    },
    /// Bytes that do not match the hash or size they are verified against.
    Mismatch(Box<Mismatch>),
    /// A pinned file the mirror no longer serves (404): Debian's mirrors keep only the
    /// current versions, a vendor's archive may drop any.
    Gone(Box<Mismatch>),
    /// A file that cannot be decompressed or parsed.
    Corrupt { url: String, detail: String },
    /// The signature could not be checked (no gpgv, no keyring, no InRelease).
    CannotVerify { archive: String, detail: String },
    /// The signature was checked, and is bad.
    BadSignature { archive: String, detail: String },
}

/// The details of [`FetchError::Mismatch`] (boxed: they make the error large).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub archive: String,
    /// `main/binary-amd64/Packages.gz`, or a `.deb`'s pool path.
    pub file: String,
    /// What it was checked against: "its Release", "its pin (package:hello)".
    pub against: String,
    pub expected: String,
    pub got: String,
    pub hint: String,
}

impl FetchError {
    pub fn hint(&self) -> String {
        match self {
            FetchError::Unreachable { .. } => {
                "locking reads the archive's indices: the mirror must be reachable from this \
                 machine (check the mirror URL and the network, then run again)"
                    .into()
            }
            FetchError::Status { .. } => {
                "check that the mirror URL is a Debian archive (it serves dists/SUITE/InRelease)"
                    .into()
            }
            FetchError::SuiteNotFound { mirror, .. } => format!(
                "check the suite's name (bookworm, trixie, …) and that {mirror} is a Debian archive"
            ),
            FetchError::MissingIndex { .. } => {
                "check the archive's components and architecture".into()
            }
            FetchError::Mismatch(m) | FetchError::Gone(m) => m.hint.clone(),
            FetchError::Corrupt { .. } => {
                "the mirror served a broken file: run again, or use another mirror".into()
            }
            FetchError::CannotVerify { .. } => {
                "install gpgv and debian-archive-keyring (`apt-get install gpgv \
                 debian-archive-keyring`), or use a mirror that serves InRelease"
                    .into()
            }
            FetchError::BadSignature { .. } => {
                "do not lock from this mirror: it (or the network) serves an archive Debian did \
                 not sign; if the keyring is old, update debian-archive-keyring"
                    .into()
            }
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Unreachable { url, detail } => write!(f, "cannot reach {url}: {detail}")?,
            FetchError::Status { url, status } => write!(f, "{url} answered HTTP {status}")?,
            FetchError::SuiteNotFound { mirror, suite } => write!(
                f,
                "suite `{suite}` not found on {mirror} (neither dists/{suite}/InRelease nor \
                 dists/{suite}/Release exists)"
            )?,
            FetchError::MissingIndex {
                archive,
                path,
                available,
            } => write!(
                f,
                "the Release of {archive} does not list `{path}` ({available})"
            )?,
            FetchError::Mismatch(m) | FetchError::Gone(m) => write!(
                f,
                "`{}` of {} does not match {}: expected {}, got {}",
                m.file, m.archive, m.against, m.expected, m.got
            )?,
            FetchError::Corrupt { url, detail } => write!(f, "{url}: {detail}")?,
            FetchError::CannotVerify { archive, detail } => {
                write!(f, "cannot check the signature of {archive}: {detail}")?
            }
            FetchError::BadSignature { archive, detail } => write!(
                f,
                "the signature of {archive}'s InRelease does not verify: {detail}"
            )?,
        }
        write!(f, "\n  hint: {}", self.hint())
    }
}

impl std::error::Error for FetchError {}

/// sha256 as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn client() -> Result<reqwest::Client, FetchError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TIMEOUT)
        .user_agent(concat!("envc/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| FetchError::Unreachable {
            url: String::new(),
            detail: format!("cannot set up an HTTP client: {e}"),
        })
}

/// How many times a request that failed on the way (a name lookup, a timeout, a reset, a
/// 502/503/504) is made in all before its error stands, and the pause before each retry:
/// one DNS hiccup must not fail a build that fetches a hundred `.deb`s (apt retries too).
/// A refused connection is not retried: nothing listens there.
const ATTEMPTS: [std::time::Duration; 3] = [
    std::time::Duration::ZERO,
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(3),
];

/// GETs a URL: `Ok(None)` on 404 (the callers have fallbacks), the body on success;
/// retried per [`ATTEMPTS`].
pub(crate) async fn get(
    client: &reqwest::Client,
    url: &str,
) -> Result<Option<Vec<u8>>, FetchError> {
    let mut last = None;
    for pause in ATTEMPTS {
        tokio::time::sleep(pause).await;
        match get_once(client, url).await {
            Err(e) if transient(&e) => last = Some(e),
            done => return done,
        }
    }
    Err(last.unwrap_or_else(|| FetchError::Unreachable {
        url: url.to_string(),
        detail: "no attempt was made".into(),
    }))
}

fn transient(e: &FetchError) -> bool {
    match e {
        FetchError::Unreachable { detail, .. } => !detail.contains("onnection refused"),
        FetchError::Status { status, .. } => matches!(status, 502..=504),
        _ => false,
    }
}

async fn get_once(client: &reqwest::Client, url: &str) -> Result<Option<Vec<u8>>, FetchError> {
    let unreachable = |e: reqwest::Error| FetchError::Unreachable {
        url: url.to_string(),
        detail: describe(&e),
    };
    let resp = client.get(url).send().await.map_err(unreachable)?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(FetchError::Status {
            url: url.to_string(),
            status: status.as_u16(),
        });
    }
    let body = resp.bytes().await.map_err(unreachable)?;
    Ok(Some(body.to_vec()))
}

/// reqwest's errors say "error sending request"; the cause says what happened.
fn describe(e: &reqwest::Error) -> String {
    let mut parts = vec![if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "connection failed".to_string()
    } else {
        e.to_string()
    }];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

impl Archive {
    /// Reads one suite of a mirror for one architecture and the given components,
    /// verifying every index against the Release. The pin is named `debian/SUITE`.
    pub async fn fetch(
        mirror: &str,
        suite: &str,
        architecture: &str,
        components: &[&str],
    ) -> Result<Archive, FetchError> {
        let name = ArchivePin::default_name(suite);
        Archive::fetch_named(&name, mirror, suite, architecture, components).await
    }

    /// [`Archive::fetch`], the pin (and its errors) named `name`: a vendor's archive.
    pub async fn fetch_named(
        name: &str,
        mirror: &str,
        suite: &str,
        architecture: &str,
        components: &[&str],
    ) -> Result<Archive, FetchError> {
        let mirror = mirror.trim_end_matches('/');
        let client = client()?;
        let name = name.to_string();
        let dists = format!("{mirror}/dists/{suite}");

        let mut release_url = format!("{dists}/InRelease");
        let mut raw = get(&client, &release_url).await?;
        if raw.is_none() {
            release_url = format!("{dists}/Release");
            raw = get(&client, &release_url).await?;
        }
        let Some(raw) = raw else {
            return Err(FetchError::SuiteNotFound {
                mirror: mirror.to_string(),
                suite: suite.to_string(),
            });
        };
        let release_sha256 = sha256_hex(&raw);
        let text = std::str::from_utf8(&raw).map_err(|_| FetchError::Corrupt {
            url: release_url.clone(),
            detail: "the Release file is not UTF-8".into(),
        })?;
        let release = archive::parse_release(text).map_err(|e| FetchError::Corrupt {
            url: release_url.clone(),
            detail: format!("not a Release file: {e}"),
        })?;

        let mut stanzas = Vec::new();
        for component in components {
            let text =
                fetch_index(&client, &dists, &name, &release, component, architecture).await?;
            stanzas.extend(text);
        }
        let pin = ArchivePin {
            name,
            mirror: mirror.to_string(),
            suite: suite.to_string(),
            architecture: architecture.to_string(),
            components: components.iter().map(|c| c.to_string()).collect(),
            release_sha256,
            date: release.date.clone(),
            signed_by: None,
            with: Vec::new(),
        };
        Ok(Archive::new(pin, release, raw, stanzas))
    }
}

/// One component's Packages index, verified against the Release and parsed.
async fn fetch_index(
    client: &reqwest::Client,
    dists: &str,
    archive: &str,
    release: &Release,
    component: &str,
    architecture: &str,
) -> Result<Vec<archive::Stanza>, FetchError> {
    let dir = format!("{component}/binary-{architecture}");
    // gzip where listed (smaller, and flate2 is pure Rust); xz where only it is (Debian's
    // -updates and -security suites); the plain file otherwise.
    let Some((path, (hash, size))) = ["Packages.gz", "Packages.xz", "Packages"]
        .iter()
        .map(|f| format!("{dir}/{f}"))
        .find_map(|p| release.sha256.get(&p).map(|v| (p, v.clone())))
    else {
        return Err(FetchError::MissingIndex {
            archive: archive.to_string(),
            path: format!("{dir}/Packages.gz"),
            available: format!(
                "components: {}; architectures: {}",
                release.components.join(" "),
                release.architectures.join(" ")
            ),
        });
    };
    let plain_url = format!("{dists}/{path}");
    let mut url = plain_url.clone();
    let mut body = None;
    if release.acquire_by_hash {
        url = format!("{dists}/{dir}/by-hash/SHA256/{hash}");
        body = get(client, &url).await?;
    }
    if body.is_none() {
        url = plain_url;
        body = get(client, &url).await?;
    }
    let Some(body) = body else {
        return Err(FetchError::Status { url, status: 404 });
    };
    let file = path.rsplit('/').next().unwrap_or(&path).to_string();
    let mismatch = |expected: String, got: String| {
        FetchError::Mismatch(Box::new(Mismatch {
            archive: archive.to_string(),
            file: format!("{dir}/{file}"),
            against: "its Release".into(),
            expected,
            got,
            hint:
                "the mirror changed mid-update: run again (if it persists, the mirror is broken: \
               use another)"
                    .into(),
        }))
    };
    if body.len() as u64 != size {
        return Err(mismatch(
            format!("{size} bytes"),
            format!("{} bytes", body.len()),
        ));
    }
    let got = sha256_hex(&body);
    if got != hash {
        return Err(mismatch(format!("sha256 {hash}"), format!("sha256 {got}")));
    }
    let text = if path.ends_with(".gz") {
        let mut out = String::new();
        flate2::read::MultiGzDecoder::new(body.as_slice())
            .read_to_string(&mut out)
            .map_err(|e| FetchError::Corrupt {
                url: url.clone(),
                detail: format!("cannot decompress: {e}"),
            })?;
        out
    } else if path.ends_with(".xz") {
        let mut out = Vec::new();
        lzma_rs::xz_decompress(&mut body.as_slice(), &mut out).map_err(|e| {
            FetchError::Corrupt {
                url: url.clone(),
                detail: format!("cannot decompress: {e}"),
            }
        })?;
        String::from_utf8(out).map_err(|_| FetchError::Corrupt {
            url: url.clone(),
            detail: "the Packages file is not UTF-8".into(),
        })?
    } else {
        String::from_utf8(body).map_err(|_| FetchError::Corrupt {
            url: url.clone(),
            detail: "the Packages file is not UTF-8".into(),
        })?
    };
    archive::parse_packages(&text).map_err(|e| FetchError::Corrupt {
        url,
        detail: format!("not a Packages file: {e}"),
    })
}

/// Downloads a pinned `.deb` and checks it against its pin (size, then sha256): the last
/// link of the chain.
pub async fn fetch_deb(mirror: &str, pin: &PackagePin) -> Result<Vec<u8>, FetchError> {
    let client = client()?;
    let url = format!("{}/{}", mirror.trim_end_matches('/'), pin.filename);
    let Some(body) = get(&client, &url).await? else {
        return Err(FetchError::Gone(Box::new(Mismatch {
            archive: pin.archive.clone(),
            file: pin.filename.clone(),
            against: format!("its pin ({})", pin.key()),
            expected: format!("{} {}", pin.name, pin.version),
            got: "404: the mirror no longer has it".into(),
            hint: format!(
                "Debian mirrors keep only the current versions: use a snapshot mirror for this \
                 lock, or run `envc lock FILE --update={}`",
                pin.key()
            ),
        })));
    };
    let mismatch = |expected: String, got: String| {
        FetchError::Mismatch(Box::new(Mismatch {
            archive: pin.archive.clone(),
            file: pin.filename.clone(),
            against: format!("its pin ({})", pin.key()),
            expected,
            got,
            hint: "the mirror serves other bytes under this name: use another mirror; if the \
               archive really changed the file, run `envc lock FILE --update=KEY` and review"
                .replace("KEY", &pin.key().to_string()),
        }))
    };
    if body.len() as u64 != pin.size {
        return Err(mismatch(
            format!("{} bytes", pin.size),
            format!("{} bytes", body.len()),
        ));
    }
    let got = sha256_hex(&body);
    if got != pin.sha256 {
        return Err(mismatch(
            format!("sha256 {}", pin.sha256),
            format!("sha256 {got}"),
        ));
    }
    Ok(body)
}

/// Checks the OpenPGP signature of an archive's InRelease with `gpgv` against a keyring
/// ([`DEBIAN_KEYRING`] for Debian). Separate from [`Archive::fetch`] because it needs two
/// things from the machine (gpgv, the keyring); the caller decides whether their absence
/// is an error.
pub fn verify_signature(archive: &Archive, keyring: &Path) -> Result<(), FetchError> {
    let name = archive.pin.name.clone();
    let cannot = |detail: String| FetchError::CannotVerify {
        archive: name.clone(),
        detail,
    };
    if !archive
        .release_raw
        .starts_with(b"-----BEGIN PGP SIGNED MESSAGE-----")
    {
        return Err(cannot(
            "the mirror serves no InRelease (a detached Release.gpg is not checked)".into(),
        ));
    }
    if !keyring.is_file() {
        return Err(cannot(format!("no keyring at {}", keyring.display())));
    }
    let mut gpgv = std::process::Command::new("gpgv");
    gpgv.arg("--keyring").arg(keyring).arg("-");
    let out = run_fed(&mut gpgv, &archive.release_raw)
        .map_err(|e| cannot(format!("cannot run gpgv: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FetchError::BadSignature {
            archive: name,
            detail: gpgv_detail(&out.stderr),
        })
    }
}

/// What gpgv said, on one line: its non-empty lines joined with `; `.
fn gpgv_detail(stderr: &[u8]) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let detail: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    detail.join("; ")
}

/// A signature gpgv did not accept: what it said, for the caller's error.
#[derive(Debug)]
pub(crate) struct GpgvRefused(pub(crate) String);

/// Checks a detached signature of `data` with `gpgv` against `keyring`: `Ok(Ok(()))` when
/// it verifies, `Ok(Err(what gpgv said))` when it does not, `Err` when gpgv cannot run.
/// Both go through files in `scratch` (gpgv reads a detached signature from a file only).
pub(crate) fn verify_detached(
    scratch: &Path,
    keyring: &Path,
    signature: &[u8],
    data: &[u8],
) -> std::io::Result<Result<(), GpgvRefused>> {
    let sig = scratch.join("detached.sig");
    let signed = scratch.join("detached.data");
    std::fs::write(&sig, signature)?;
    std::fs::write(&signed, data)?;
    let out = std::process::Command::new("gpgv")
        .arg("--keyring")
        .arg(keyring)
        .arg(&sig)
        .arg(&signed)
        .stdin(std::process::Stdio::null())
        .output()?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(GpgvRefused(gpgv_detail(&out.stderr)))
    })
}

/// Runs `cmd` with `input` on its stdin, its stdout and stderr captured. The input is
/// written from a thread, so that a program that stops reading cannot block us.
fn run_fed(cmd: &mut std::process::Command, input: &[u8]) -> std::io::Result<std::process::Output> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            use std::io::Write;
            let _ = stdin.write_all(&data);
        }
    });
    let out = child.wait_with_output();
    let _ = writer.join();
    out
}

/// Why `gpg` did not do what it was asked.
#[derive(Debug)]
pub enum GpgError {
    /// `gpg` could not be run (not installed).
    CannotRun(std::io::Error),
    /// `gpg ARGS` failed; `stderr` is what it said, trimmed.
    Failed { args: String, stderr: String },
}

impl fmt::Display for GpgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpgError::CannotRun(e) => write!(
                f,
                "cannot run gpg: {e}\n  hint: install gnupg (`./scripts/setup` does)"
            ),
            GpgError::Failed { args, stderr } => write!(f, "gpg {args}: {stderr}"),
        }
    }
}

impl std::error::Error for GpgError {}

/// A scratch GnuPG home, removed when dropped: keys someone hands us (a vendor's key file,
/// the keys a provider registry offers) are imported here and exported as a keyring for
/// gpgv, so that no user's keyring is read or changed.
pub(crate) struct ScratchGpg {
    home: tempfile::TempDir,
}

impl ScratchGpg {
    pub(crate) fn new() -> std::io::Result<ScratchGpg> {
        Ok(ScratchGpg {
            home: tempfile::tempdir()?,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        self.home.path()
    }

    /// Runs `gpg ARGS` in this home with `stdin`, its stdout on success. No agent is
    /// started (`--no-autostart`): importing, listing and exporting public keys need none.
    pub(crate) fn gpg(&self, args: &[&str], stdin: &[u8]) -> Result<Vec<u8>, GpgError> {
        let mut gpg = std::process::Command::new("gpg");
        gpg.arg("--homedir")
            .arg(self.home.path())
            .args(["--batch", "--quiet", "--no-options", "--no-autostart"])
            .args(args);
        let out = run_fed(&mut gpg, stdin).map_err(GpgError::CannotRun)?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(GpgError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// The fingerprint of each primary key imported: the `fpr` line after its `pub` line.
    pub(crate) fn primary_fingerprints(&self) -> Result<Vec<String>, GpgError> {
        let listing = String::from_utf8_lossy(&self.gpg(&["--with-colons", "--list-keys"], b"")?)
            .into_owned();
        let mut primaries = Vec::new();
        let mut after_pub = false;
        for line in listing.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.first() {
                Some(&"pub") => after_pub = true,
                Some(&"fpr") if after_pub => {
                    primaries.extend(fields.get(9).map(|f| f.to_string()));
                    after_pub = false;
                }
                _ => {}
            }
        }
        Ok(primaries)
    }
}

/// Why a vendor archive's InRelease is not accepted as signed by the key its source pins.
#[derive(Debug)]
pub enum VendorSignatureError {
    /// No scratch GnuPG home could be made.
    ScratchHome(std::io::Error),
    /// `gpg --import` refused the key file.
    NotAKey(GpgError),
    /// Listing or exporting the imported key failed.
    Gpg(GpgError),
    /// The key file does not hold the pinned key: the primary keys it holds instead.
    WrongKey {
        found: Vec<String>,
        fingerprint: String,
    },
    /// The pinned key could not be written out as a keyring.
    Keyring {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The InRelease is not signed by the pinned key.
    NotSignedByPin { fingerprint: String, detail: String },
    /// The signature could not be checked (no InRelease, no gpgv).
    CannotVerify { detail: String },
    /// Any other failure of [`verify_signature`].
    Fetch(FetchError),
}

impl fmt::Display for VendorSignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VendorSignatureError::ScratchHome(e) => {
                write!(f, "cannot make a scratch GnuPG home: {e}")
            }
            VendorSignatureError::NotAKey(e) => {
                write!(f, "its key file is not an OpenPGP key: {e}")
            }
            VendorSignatureError::Gpg(e) => write!(f, "{e}"),
            VendorSignatureError::WrongKey { found, fingerprint } => write!(
                f,
                "its key file holds {}, not the key the source pins ({fingerprint})\n  hint: the \
                 fingerprint is what trusts the key: take both from the vendor's documentation, \
                 never the fingerprint from the key file itself",
                if found.is_empty() {
                    "no key".to_string()
                } else {
                    found.join(", ")
                }
            ),
            VendorSignatureError::Keyring { path, error } => {
                write!(f, "{}: {error}", path.display())
            }
            VendorSignatureError::NotSignedByPin {
                fingerprint,
                detail,
            } => write!(
                f,
                "its InRelease is not signed by the pinned key {fingerprint}: {detail}\n  hint: do \
                 not lock from this mirror, or, if the vendor changed its key, take the new key \
                 and fingerprint from the vendor"
            ),
            VendorSignatureError::CannotVerify { detail } => write!(
                f,
                "cannot check its signature: {detail}\n  hint: a vendor's archive must serve \
                 InRelease (its Release, clear-signed); a detached Release.gpg is not checked"
            ),
            VendorSignatureError::Fetch(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for VendorSignatureError {}

/// Checks a vendor archive's InRelease against `key` (the key file the source names),
/// trusting only the key whose fingerprint the source pins: a key file that does not hold
/// that key, or an InRelease that another key signed, is refused. Needs `gpg` and `gpgv`.
pub fn verify_vendor_signature(
    archive: &Archive,
    key: &[u8],
    fingerprint: &str,
) -> Result<(), VendorSignatureError> {
    let scratch = ScratchGpg::new().map_err(VendorSignatureError::ScratchHome)?;
    scratch
        .gpg(&["--import"], key)
        .map_err(VendorSignatureError::NotAKey)?;
    let primaries = scratch
        .primary_fingerprints()
        .map_err(VendorSignatureError::Gpg)?;
    if !primaries.iter().any(|f| f == fingerprint) {
        return Err(VendorSignatureError::WrongKey {
            found: primaries,
            fingerprint: fingerprint.to_string(),
        });
    }
    let keyring = scratch.path().join("pinned.gpg");
    let exported = scratch
        .gpg(&["--export", fingerprint], b"")
        .map_err(VendorSignatureError::Gpg)?;
    std::fs::write(&keyring, exported).map_err(|error| VendorSignatureError::Keyring {
        path: keyring.clone(),
        error,
    })?;
    verify_signature(archive, &keyring).map_err(|e| match e {
        FetchError::BadSignature { detail, .. } => VendorSignatureError::NotSignedByPin {
            fingerprint: fingerprint.to_string(),
            detail,
        },
        FetchError::CannotVerify { detail, .. } => VendorSignatureError::CannotVerify { detail },
        other => VendorSignatureError::Fetch(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_on_the_way_are_retried() {
        let unreachable = |d: &str| FetchError::Unreachable {
            url: "http://m/x".into(),
            detail: d.into(),
        };
        let status = |status: u16| FetchError::Status {
            url: "http://m/x".into(),
            status,
        };
        assert!(transient(&unreachable(
            "connection failed: dns error: failed to lookup address information: Temporary failure in name resolution"
        )));
        assert!(transient(&unreachable("timed out")));
        assert!(!transient(&unreachable(
            "connection failed: tcp connect error: Connection refused (os error 111)"
        )));
        assert!(transient(&status(503)));
        assert!(!transient(&status(403)));
    }
}
