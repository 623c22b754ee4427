//! `envc lock`'s resolution: every pin an environment needs, resolved against the archive
//! (over the network), with the archive's signature checked and each named `.deb` fetched
//! and checked before it is pinned.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::cloud::{resolve_cloud_images, CloudImages};
use crate::error::LockError;
use crate::mirror::NoMirror;
use crate::model::{
    ArchivePin, ImagePin, Lockfile, PackageClosure, PackagePin, PinKey, ProviderPin, REQUIRED,
};
use crate::needs::Needs;
use crate::outdated::SuiteIndex;
use crate::provider::{self, Constraints, Platform, ProviderAddress, ProviderSource};
use crate::resolve::{required_set, resolve_closure, ResolveError};
use crate::{fetch, probe_tool, resolve_image, resolve_packages, Archive};

/// A new lockfile's clock for image builds. Kept across relocks: only `--update
/// source_date_epoch` moves it, to the time of the newest archive state it pins.
pub const DEFAULT_SOURCE_DATE_EPOCH: u64 = 1_700_000_000;
const ARCHITECTURE: &str = "amd64";

/// A resolved lockfile, and what the person locking should know (an archive whose
/// signature was not checked).
pub struct Resolved {
    pub lock: Lockfile,
    pub warnings: Vec<String>,
    /// The `.deb`s fetched to pin the packages the environment names, checked, by sha256:
    /// the caller keeps them (the store), so that their changelogs can say what a move fixes.
    pub debs: BTreeMap<String, Vec<u8>>,
    /// The versions each archive served, for `envc lock --outdated` to compare pins with
    /// offline (the caller keeps them: [`crate::outdated::save`]).
    pub indices: Vec<SuiteIndex>,
}

/// Why nothing was resolved: one message per pin that failed, and the warnings so far.
pub struct Unresolved {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Resolves every pin `needs` names; `old` keeps the mirror and the clock a lockfile
/// already pins, so that relocking on another machine does not move every pin. `stdlib`
/// is the hash of this envc's standard library; `project` the directory vendor archives'
/// key files are relative to; `clouds` resolves the cloud images (each to its newest match:
/// whether a pin moves is [`crate::model::update`]'s business); `providers` is where the
/// providers are resolved from (each to the newest version its constraint admits, its
/// package fetched and verified; again [`crate::model::update`] keeps the pins not named).
/// Errors: one message per pin that failed.
pub fn resolve_environment(
    needs: &Needs,
    old: Option<&Lockfile>,
    stdlib: &str,
    project: &Path,
    clouds: &dyn CloudImages,
    providers: &ProviderSource,
) -> Result<Resolved, Unresolved> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Unresolved {
            errors: vec![e.to_string()],
            warnings: Vec::new(),
        })?;
    let Fetched {
        archives,
        mut companions,
        vendors,
        warnings,
    } = fetch_archives(&rt, needs, old, project)?;
    let mut errors: Vec<String> = Vec::new();
    let indices = indices_of(&archives, &companions, &vendors);
    let mut lock = Lockfile::new(
        old.map_or(DEFAULT_SOURCE_DATE_EPOCH, |o| o.source_date_epoch),
        stdlib.to_string(),
    );
    // Debian's suites by suite, vendors' archives by name.
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut used_vendors: BTreeSet<&str> = BTreeSet::new();
    // Images first: a package's closure is resolved onto the sets of the images its
    // targets start from.
    for (name, need) in &needs.images {
        let archive = &archives[need.suite.as_str()];
        let includes: Vec<&str> = need.includes.iter().map(String::as_str).collect();
        match resolve_image(archive, &includes) {
            Ok(packages) => lock.images.push(ImagePin {
                name: name.clone(),
                archive: archive.pin.name.clone(),
                includes: need.includes.clone(),
                packages,
            }),
            Err(es) => errors.extend(es.iter().map(|e| {
                format!(
                    "{}: {}",
                    PinKey::Image(name.clone()),
                    e.to_string().replace('\n', "\n  ")
                )
            })),
        }
        used.insert(need.suite.as_str());
    }
    let mut members: BTreeMap<String, PackagePin> = BTreeMap::new();
    let mut debs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Each suite's required set, resolved once for all the packages of hosts without a base.
    let mut required: BTreeMap<&str, Result<PackageSet, Vec<ResolveError>>> = BTreeMap::new();
    for (name, need) in &needs.packages {
        let debian = &archives[need.suite.as_str()];
        used.insert(need.suite.as_str());
        // A vendor's package comes from its archive; its dependencies from it and from the
        // Debian suite beside it, as apt sees both.
        let vendor = need.vendor.as_deref().and_then(|v| vendors.get(v));
        let merged = vendor.map(|v| v.merged(&[debian]));
        let (archive, closure_from) = match (vendor, &merged) {
            (Some(v), Some(m)) => {
                used_vendors.insert(&v.pin.name);
                (v, m)
            }
            _ => (debian, debian),
        };
        if need.starts_from.contains(REQUIRED) {
            required
                .entry(need.suite.as_str())
                .or_insert_with(|| required_set(debian));
        }
        let start = match start_of(&lock, required.get(need.suite.as_str()), &need.starts_from) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{}: {e}", PinKey::Package(name.clone())));
                continue;
            }
        };
        let version = need.version.as_deref();
        let resolved = resolve_packages(archive, &[(name.as_str(), version)]).and_then(|root| {
            // The root's own version: a Debian package of its name may be newer.
            let exact = root.first().map(|r| r.version.clone());
            let exact = exact.as_deref().or(version);
            let closure = resolve_closure(closure_from, &start, name, exact)?;
            Ok((root, closure))
        });
        let (mut root, closure) = match resolved {
            Ok(r) => r,
            Err(es) => {
                errors.extend(es.iter().map(|e| e.to_string()));
                continue;
            }
        };
        // The last link of Release → Packages → .deb: the file itself matches. (The
        // closure's files are checked where they are fetched, by the build.)
        for pin in &root {
            // Its own archive's mirror: the security suite's is not the suite's.
            let mirror = companions
                .iter()
                .find(|c| c.name == pin.archive)
                .map_or(&archive.pin.mirror, |c| &c.mirror);
            match rt.block_on(fetch::fetch_deb(mirror, pin)) {
                Ok(bytes) => {
                    debs.insert(pin.sha256.clone(), bytes);
                }
                Err(e) => errors.push(format!("{}: {e}", pin.key())),
            }
        }
        for pin in &mut root {
            pin.closure = Some(PackageClosure {
                starts_from: need.starts_from.iter().cloned().collect(),
                packages: closure.iter().map(|m| m.name.clone()).collect(),
            });
        }
        lock.packages.extend(root);
        for m in closure {
            // One version of one archive's build: a vendor's `libfoo 1.0` is other bytes
            // than Debian's.
            let what = |p: &PackagePin| format!("{} from {}", p.version, p.archive);
            match members.get(&m.name) {
                Some(other) if (&other.version, &other.sha256) != (&m.version, &m.sha256) => errors
                    .push(format!(
                        "{}: the closures of two packages need `{}` at {} and at {}; a \
                         lockfile pins one build of a package\n  hint: pin the packages that \
                         need it to versions that agree",
                        PinKey::Package(name.clone()),
                        m.name,
                        what(other),
                        what(&m)
                    )),
                _ => {
                    members.insert(m.name.clone(), m);
                }
            }
        }
    }
    // A package both named and in a closure is pinned once, as the one named.
    for (name, m) in members {
        match lock.package(&name) {
            None => lock.packages.push(m),
            Some(root) if (&root.version, &root.sha256) != (&m.version, &m.sha256) => {
                errors.push(format!(
                    "{}: pinned at {} from {}, and a closure needs {} from {}\n  hint: ask for \
                     the version the other packages need, or none",
                    PinKey::Package(name.clone()),
                    root.version,
                    root.archive,
                    m.version,
                    m.archive
                ))
            }
            Some(_) => {}
        }
    }
    lock.archives = used.into_iter().map(|s| archives[s].pin.clone()).collect();
    let with: Vec<&String> = lock.archives.iter().flat_map(|a| &a.with).collect();
    companions.retain(|c| with.contains(&&c.name));
    lock.archives.extend(companions);
    lock.archives
        .extend(used_vendors.into_iter().map(|v| vendors[v].pin.clone()));
    for t in &needs.tools {
        match probe_tool(t) {
            Ok(p) => lock.tools.push(p),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let (cloud_images, cloud_errors) = resolve_cloud_images(needs.cloud_images.values(), clouds);
    lock.cloud_images = cloud_images;
    errors.extend(cloud_errors);
    let (provider_pins, provider_errors) =
        resolve_providers(&rt, needs, providers, &Platform::current());
    lock.providers = provider_pins;
    errors.extend(provider_errors);
    if errors.is_empty() {
        lock.normalize();
        Ok(Resolved {
            lock,
            warnings,
            debs,
            indices,
        })
    } else {
        Err(Unresolved { errors, warnings })
    }
}

/// Each provider `needs` names, resolved from `source` for `platform` (this machine's: the
/// one whose package is fetched and verified, and so whose `h1:` the pin holds; a registry's
/// signed SHA256SUMS adds every platform's `zh:`). One message per provider that failed.
pub fn resolve_providers(
    rt: &tokio::runtime::Runtime,
    needs: &Needs,
    source: &ProviderSource,
    platform: &Platform,
) -> (Vec<ProviderPin>, Vec<String>) {
    let mut pins = Vec::new();
    let mut errors = Vec::new();
    for (address, need) in &needs.providers {
        let key = PinKey::Provider(address.clone());
        let parsed = ProviderAddress::parse(address)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                let c = Constraints::parse(&need.constraint).map_err(|e| e.to_string())?;
                Ok((a, c))
            });
        let resolved = parsed.and_then(|(a, c)| {
            rt.block_on(provider::resolve(&a, &c, platform, source))
                .map(|r| ProviderPin::of(&r, &c))
                .map_err(|e| e.to_string())
        });
        match resolved {
            Ok(pin) => pins.push(pin),
            Err(e) => errors.push(format!(
                "{key} (for {}): {}",
                need.used_by.join(", "),
                e.replace('\n', "\n  ")
            )),
        }
    }
    (pins, errors)
}

/// The suites and vendors' archives an environment needs, fetched and verified: each Debian
/// suite merged with the suites beside it (by suite), the pins of those suites, the vendors'
/// archives (by name), and the warnings so far.
struct Fetched<'n> {
    archives: BTreeMap<&'n str, Archive>,
    companions: Vec<ArchivePin>,
    vendors: BTreeMap<&'n str, Archive>,
    warnings: Vec<String>,
}

fn fetch_archives<'n>(
    rt: &tokio::runtime::Runtime,
    needs: &'n Needs,
    old: Option<&Lockfile>,
    project: &Path,
) -> Result<Fetched<'n>, Unresolved> {
    let mut errors: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    // Each Debian suite with the suites apt reads beside it (unless the source opted out),
    // each Release fetched and checked like the suite's own; resolution sees them merged,
    // the newest version winning, as apt's candidate does at equal priority.
    let mut archives: BTreeMap<&str, Archive> = BTreeMap::new();
    let mut companions: Vec<ArchivePin> = Vec::new();
    for suite in needs.suites() {
        let mirror = match mirror_for(suite, old) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let mut fetch = |suite: &str, mirror: &str| -> Result<Archive, String> {
            let a = rt
                .block_on(Archive::fetch(mirror, suite, ARCHITECTURE, &["main"]))
                .map_err(|e| format!("{}: {e}", PinKey::debian_archive(suite)))?;
            warnings.extend(authenticate(&a).map_err(|e| e.to_string())?);
            Ok(a)
        };
        let mut main = match fetch(suite, &mirror) {
            Ok(a) => a,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let mut beside = Vec::new();
        if needs.takes_updates(suite) {
            for companion in ArchivePin::companion_suites(suite) {
                let m = companion_mirror(&companion, &mirror, old);
                match fetch(&companion, &m) {
                    Ok(a) => beside.push(a),
                    Err(e) => errors.push(format!(
                        "{e}\n  note: {suite} is locked with its -updates and -security suites \
                         by default, as apt reads them: serve {companion} (or set \
                         ENVC_DEBIAN_SECURITY_MIRROR), or take {suite} alone with `updates = \
                         false` on its images and hosts"
                    )),
                }
            }
        }
        main.pin.with = beside.iter().map(|a| a.pin.name.clone()).collect();
        let group = if beside.is_empty() {
            main
        } else {
            let others: Vec<&Archive> = beside.iter().collect();
            main.merged(&others)
        };
        companions.extend(beside.into_iter().map(|a| a.pin));
        archives.insert(suite, group);
    }
    // Vendors' archives: their InRelease checked with the key the source pins, whatever
    // ENVC_ARCHIVE_KEYRING says (that is for Debian's).
    let mut vendors: BTreeMap<&str, Archive> = BTreeMap::new();
    for (name, v) in &needs.vendors {
        let key = PinKey::Archive(name.clone());
        let components: Vec<&str> = v.components.iter().map(String::as_str).collect();
        let fetched = rt
            .block_on(Archive::fetch_named(
                name,
                &v.url,
                &v.suite,
                ARCHITECTURE,
                &components,
            ))
            .map_err(|e| e.to_string())
            .and_then(|mut a| {
                a.pin.signed_by = Some(v.fingerprint.clone());
                let file = project.join(&v.key);
                let bytes = std::fs::read(&file)
                    .map_err(|e| format!("cannot read its key file {}: {e}", file.display()))?;
                fetch::verify_vendor_signature(&a, &bytes, &v.fingerprint)
                    .map_err(|e| e.to_string())?;
                Ok(a)
            });
        match fetched {
            Ok(a) => {
                vendors.insert(name, a);
            }
            Err(e) => errors.push(format!("{key}: {}", e.replace('\n', "\n  "))),
        }
    }
    if !errors.is_empty() {
        return Err(Unresolved { errors, warnings });
    }
    Ok(Fetched {
        archives,
        companions,
        vendors,
        warnings,
    })
}

/// The versions each archive served, from the fetched suites (each stanza of a merged suite
/// knows its archive) and vendors' archives, each with its pin (`companions` are the pins of
/// the suites beside a suite): what [`crate::outdated`] compares pins with.
fn indices_of(
    archives: &BTreeMap<&str, Archive>,
    companions: &[ArchivePin],
    vendors: &BTreeMap<&str, Archive>,
) -> Vec<SuiteIndex> {
    let groups = || archives.values().chain(vendors.values());
    let pins: Vec<&ArchivePin> = groups().map(|a| &a.pin).chain(companions).collect();
    let mut out: BTreeMap<String, SuiteIndex> = pins
        .iter()
        .map(|p| (p.name.clone(), SuiteIndex::new(p)))
        .collect();
    for group in groups() {
        for name in group.names() {
            for s in group.versions(name) {
                let archive = s.origin.as_deref().unwrap_or(&group.pin.name);
                if let Some(index) = out.get_mut(archive) {
                    index
                        .versions
                        .entry(name.to_string())
                        .or_default()
                        .push(s.version.clone());
                }
            }
        }
    }
    out.into_values().collect()
}

/// `envc lock --outdated --refresh`: the current indices of every suite and vendor's
/// archive `needs` names (as `envc lock` would fetch and verify them), resolving nothing.
pub fn fetch_indices(
    needs: &Needs,
    old: Option<&Lockfile>,
    project: &Path,
) -> Result<(Vec<SuiteIndex>, Vec<String>), Unresolved> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Unresolved {
            errors: vec![e.to_string()],
            warnings: Vec::new(),
        })?;
    let f = fetch_archives(&rt, needs, old, project)?;
    Ok((
        indices_of(&f.archives, &f.companions, &f.vendors),
        f.warnings,
    ))
}

/// Fetches pinned `.deb`s from their archives' mirrors, each checked against its pin: what
/// `envc lock` keeps of the packages a change moved, so that their changelogs can be read.
/// A `.deb` that cannot be fetched is left out, with why.
pub fn fetch_pinned(
    lock: &Lockfile,
    pins: &[PackagePin],
) -> (BTreeMap<String, Vec<u8>>, Vec<String>) {
    let mut debs = BTreeMap::new();
    let mut errors = Vec::new();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return (debs, vec![e.to_string()]),
    };
    for pin in pins {
        let Some(archive) = lock.archive(&pin.archive) else {
            continue;
        };
        match rt.block_on(fetch::fetch_deb(&archive.mirror, pin)) {
            Ok(bytes) => {
                debs.insert(pin.sha256.clone(), bytes);
            }
            Err(e) => errors.push(format!("{}: {e}", pin.key())),
        }
    }
    (debs, errors)
}

/// A package set as an image pin holds it: `(name, version)`, sorted by name.
type PackageSet = Vec<(String, String)>;

/// What every target of a package starts from (`starts_from`: `image:NAME` or
/// [`REQUIRED`], the suite's `required` set), as name → version: the packages all of them
/// have at the same version.
fn start_of(
    lock: &Lockfile,
    required: Option<&Result<PackageSet, Vec<ResolveError>>>,
    starts_from: &BTreeSet<String>,
) -> Result<BTreeMap<String, String>, StartError> {
    let mut common: Option<BTreeMap<String, String>> = None;
    for start in starts_from {
        let set: PackageSet = if start == REQUIRED {
            match required {
                Some(Ok(set)) => set.clone(),
                Some(Err(es)) => return Err(StartError::Required(es.clone())),
                None => return Err(StartError::NoRequiredSet),
            }
        } else {
            let image = PinKey::image_of(start).unwrap_or_else(|| start.clone());
            match lock.image(&image) {
                Some(i) => i.versions(),
                // The image did not resolve: its own error says why.
                None => return Err(StartError::ImageNotPinned { image }),
            }
        };
        common = Some(match common {
            None => set.into_iter().collect(),
            Some(c) => set
                .into_iter()
                .filter(|(n, v)| c.get(n) == Some(v))
                .collect(),
        });
    }
    Ok(common.unwrap_or_default())
}

/// Why what a package's targets start from is not known.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StartError {
    /// The suite's `required` set did not resolve: why, one error a line.
    Required(Vec<ResolveError>),
    /// The `required` set was not resolved for the suite (a bug: it is resolved first).
    NoRequiredSet,
    /// The target's image did not resolve (its own error says why).
    ImageNotPinned { image: String },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Required(es) => {
                let es: Vec<String> = es.iter().map(|e| e.to_string()).collect();
                f.write_str(&es.join("\n"))
            }
            StartError::NoRequiredSet => f.write_str("no required set was resolved"),
            StartError::ImageNotPinned { image } => {
                write!(f, "its target's image `{image}` could not be pinned")
            }
        }
    }
}

impl std::error::Error for StartError {}

/// Why `envc lock --update=KEY…` cannot update the pins it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateError {
    /// A key in neither lockfile (see [`crate::model::update`]).
    UnknownKey(LockError),
    /// `source_date_epoch` was named, and no archive is pinned to take its date from.
    NoArchivePinned,
}

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpdateError::UnknownKey(e) => write!(f, "{e}"),
            UpdateError::NoArchivePinned => f.write_str(
                "source_date_epoch moves to the pinned archive's Release date, and no archive \
                 is pinned",
            ),
        }
    }
}

impl std::error::Error for UpdateError {}

/// `envc lock --update=KEY…`: `fresh`'s pins for `keys`, `old`'s for the rest. Updating
/// `source_date_epoch` moves the images' clock to the newest archive state pinned.
pub fn update_pins(
    old: &Lockfile,
    fresh: &Lockfile,
    keys: &[PinKey],
) -> Result<Lockfile, UpdateError> {
    let mut new = crate::model::update(old, fresh, keys).map_err(UpdateError::UnknownKey)?;
    if keys.contains(&PinKey::SourceDateEpoch) {
        new.source_date_epoch = archive_epoch(&new).ok_or(UpdateError::NoArchivePinned)?;
    }
    Ok(new)
}

/// Checks the archive's InRelease signature against Debian's keyring (`gpgv`), so that a
/// lock records an archive state Debian signed, not whatever a mirror or proxy served.
/// `ENVC_ARCHIVE_KEYRING` names another keyring; set empty, it skips the check (for an
/// archive of one's own), and the warning that says so is returned.
fn authenticate(archive: &Archive) -> Result<Option<String>, Unauthenticated> {
    let keyring =
        std::env::var("ENVC_ARCHIVE_KEYRING").unwrap_or_else(|_| fetch::DEBIAN_KEYRING.to_string());
    if keyring.is_empty() {
        return Ok(Some(format!(
            "{}: its signature is not checked (ENVC_ARCHIVE_KEYRING is empty)",
            archive.pin.key()
        )));
    }
    fetch::verify_signature(archive, Path::new(&keyring))
        .map(|()| None)
        .map_err(|error| Unauthenticated {
            archive: archive.pin.key(),
            error,
        })
}

/// An archive whose signature does not check out against the keyring it is checked with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Unauthenticated {
    archive: PinKey,
    error: fetch::FetchError,
}

impl std::fmt::Display for Unauthenticated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}\n  hint: for an archive Debian does not sign, set \
             ENVC_ARCHIVE_KEYRING to the keyring that does",
            self.archive, self.error
        )
    }
}

impl std::error::Error for Unauthenticated {}

/// The mirror to lock `suite` from: `$ENVC_DEBIAN_MIRROR`, else the one the lockfile
/// already pins, else the one apt here uses.
fn mirror_for(suite: &str, old: Option<&Lockfile>) -> Result<String, NoMirror> {
    let overridden = std::env::var("ENVC_DEBIAN_MIRROR").is_ok_and(|m| !m.is_empty());
    match old.and_then(|o| o.archive(&ArchivePin::default_name(suite))) {
        Some(a) if !overridden => Ok(a.mirror.clone()),
        _ => crate::mirror::local_mirror(),
    }
}

/// The mirror of a suite beside a Debian suite (`bookworm-updates`, `bookworm-security`),
/// locked from `main_mirror`: for the security suite `$ENVC_DEBIAN_SECURITY_MIRROR`; else
/// the one the lockfile already pins (unless `$ENVC_DEBIAN_MIRROR` moves the main one);
/// else the main mirror, but for the security suite of a mirror `…/debian`, which Debian
/// serves beside it as `…/debian-security` (`http://deb.debian.org/debian-security`).
fn companion_mirror(suite: &str, main_mirror: &str, old: Option<&Lockfile>) -> String {
    let security = suite.ends_with("-security");
    if security {
        if let Ok(m) = std::env::var("ENVC_DEBIAN_SECURITY_MIRROR") {
            if !m.is_empty() {
                return m.trim_end_matches('/').to_string();
            }
        }
    }
    let overridden = std::env::var("ENVC_DEBIAN_MIRROR").is_ok_and(|m| !m.is_empty());
    if let Some(a) = old.and_then(|o| o.archive(&ArchivePin::default_name(suite))) {
        if !overridden {
            return a.mirror.clone();
        }
    }
    match main_mirror.strip_suffix("/debian") {
        Some(root) if security => format!("{root}/debian-security"),
        _ => main_mirror.to_string(),
    }
}

/// The newest `Date:` of the archives a lockfile pins, as seconds since the epoch: what
/// `--update=source_date_epoch` moves the images' clock to (deterministic: it is the
/// archive's own time, not this machine's).
fn archive_epoch(lock: &Lockfile) -> Option<u64> {
    lock.archives
        .iter()
        .filter_map(|a| rfc2822_epoch(&a.date))
        .max()
}

/// `Sat, 11 Jul 2026 10:16:37 UTC` → seconds since 1970 (Release files use UTC).
fn rfc2822_epoch(date: &str) -> Option<u64> {
    let mut w = date.split_whitespace();
    let first = w.next()?;
    let day: u64 = if first.ends_with(',') {
        w.next()?
    } else {
        first
    }
    .parse()
    .ok()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let name = w.next()?;
    let month = MONTHS.iter().position(|m| *m == name)? as i64 + 1;
    let year: i64 = w.next()?.parse().ok()?;
    let mut hms = w.next()?.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days)
        .ok()
        .map(|d| d * 86_400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn release_dates_are_read_as_utc_seconds() {
        let check = |date: &str, expected: Option<u64>| {
            assert_eq!(super::rfc2822_epoch(date), expected, "{date}");
        };
        check("Thu, 01 Jan 1970 00:00:00 UTC", Some(0));
        check("Tue, 14 Nov 2023 22:13:20 UTC", Some(1_700_000_000));
        check("Sat, 11 Jul 2026 10:16:37 UTC", Some(1_783_764_997));
        check("29 Feb 2024 12:00:00 UTC", Some(1_709_208_000));
        check("Sat, 11 Jul", None);
        check("Sat, 11 Foo 2026 10:16:37 UTC", None);
    }
}
