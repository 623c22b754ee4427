//! Pinned `.deb`s on the controller. A locked `package` node installs exactly the `.deb`s
//! its pin names, the package and its closure (`envc_lockfiles::model::PackageClosure`):
//! the controller fetches each one once from the locked archive into the store
//! (`debs/SHA256.deb`, [`Store::deb_path`]), checked against the pin's size and sha256,
//! and `ops/package.rs` ships what a target lacks over the connection envc already has. A
//! target needs no mirror, no package index and no network beyond envc's SSH.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use envc_lockfiles::fetch::{fetch_deb, sha256_hex, FetchError};
use envc_lockfiles::installable::Package;
use envc_lockfiles::{Lockfile, PackagePin};

use serde::{Deserialize, Serialize};

use crate::error::StepError;
use crate::store::Store;
use envc_compiler::pin::{ClosureDeb, PinKey};

/// One pinned `.deb` and the mirror of the archive it was locked from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebSource {
    pub pin: PackagePin,
    pub mirror: String,
}

impl DebSource {
    pub fn url(&self) -> String {
        format!(
            "{}/{}",
            self.mirror.trim_end_matches('/'),
            self.pin.filename
        )
    }
}

/// Where each `.deb` a lockfile pins comes from (its packages, their closures, its images'
/// sets), by sha256: the pin values the nodes carry name `.deb`s by their bytes, and a
/// package may be pinned at one version for a host and at another in an image. A `.deb`
/// whose archive is not pinned is left out (the lockfile's parser refuses such a lockfile).
pub fn sources(lock: &Lockfile) -> BTreeMap<String, DebSource> {
    let images = lock.images.iter().flat_map(|i| &i.packages);
    lock.packages
        .iter()
        .chain(images)
        .filter_map(|p| {
            let archive = lock.archive(&p.archive)?;
            Some((
                p.sha256.clone(),
                DebSource {
                    pin: p.clone(),
                    mirror: archive.mirror.clone(),
                },
            ))
        })
        .collect()
}

/// A `.deb` a node was compiled with that the lockfile does not pin (the lockfile is
/// stale: `envc lock FILE` fixes it); `what` names who needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnpinnedDeb {
    /// The node's pin names a package of its closure the lockfile has no `[[package]]` for.
    NotInLock { what: String, name: String },
    /// The lockfile pins the package, but not at the version and hash compiled in.
    OtherPin { what: String, deb: ClosureDeb },
    /// An older format's lockfile pins it by version only, without its `.deb`'s bytes.
    NoBytes { what: String, deb: ClosureDeb },
}

impl std::fmt::Display for UnpinnedDeb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpinnedDeb::NotInLock { what, name } => write!(
                f,
                "{what}: no [[package]] of the lockfile pins `{name}`, which comes with it; run \
                 `envc lock FILE`"
            ),
            UnpinnedDeb::OtherPin { what, deb } => write!(
                f,
                "{what}: the lockfile does not pin `{}` {} (sha256 {}), which the environment \
                 was compiled with; run `envc lock FILE`",
                deb.name, deb.version, deb.sha256
            ),
            UnpinnedDeb::NoBytes { what, deb } => write!(
                f,
                "{what}: the lockfile pins `{}` {} without its .deb's bytes (an older envc's \
                 lockfile format); run `envc lock FILE --update=KEY` for it",
                deb.name, deb.version
            ),
        }
    }
}

impl std::error::Error for UnpinnedDeb {}

/// The sources of `wanted` (what a pin value names: name, version, sha256), in its order;
/// `what` names who needs them, for the error when the lockfile does not pin one.
pub fn pinned<'a>(
    sources: &BTreeMap<String, DebSource>,
    wanted: impl IntoIterator<Item = &'a ClosureDeb>,
    what: &str,
) -> Result<Vec<DebSource>, UnpinnedDeb> {
    wanted
        .into_iter()
        .map(|d| match sources.get(&d.sha256) {
            Some(s) if s.pin.name == d.name && s.pin.version == d.version => Ok(s.clone()),
            _ if d.sha256 == envc_lockfiles::model::UNPINNED => Err(UnpinnedDeb::NotInLock {
                what: what.to_string(),
                name: d.name.clone(),
            }),
            // Formats 1 and 2 pinned an image's set as versions only.
            _ if d.sha256.is_empty() => Err(UnpinnedDeb::NoBytes {
                what: what.to_string(),
                deb: d.clone(),
            }),
            _ => Err(UnpinnedDeb::OtherPin {
                what: what.to_string(),
                deb: d.clone(),
            }),
        })
        .collect()
}

/// The pinned `.deb`s a locked package was installed from (itself first, then its
/// closure), as a store object its record names (`RealizationRecord::content`): what a
/// rollback installs again, from the store alone. The lock that pinned them may have moved
/// on since: the set keeps what the store needs to find and check each `.deb`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptDebs {
    pub debs: Vec<KeptDeb>,
}

/// One pinned `.deb` of a [`KeptDebs`]: its pin, without the mirror (a rollback never
/// fetches) and without the closure (the set is the closure).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptDeb {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// The archive it was locked from, as the lockfile named it.
    pub archive: String,
    /// Its path under that archive's mirror (the name it is shipped under).
    pub filename: String,
    pub size: u64,
    pub sha256: String,
}

impl KeptDebs {
    /// The set a package installs from `debs` (its `PackageSpec`'s).
    pub fn of(debs: &[DebSource]) -> KeptDebs {
        let debs = debs
            .iter()
            .map(|d| KeptDeb {
                name: d.pin.name.clone(),
                version: d.pin.version.clone(),
                architecture: d.pin.architecture.clone(),
                archive: d.pin.archive.clone(),
                filename: d.pin.filename.clone(),
                size: d.pin.size,
                sha256: d.pin.sha256.clone(),
            })
            .collect();
        KeptDebs { debs }
    }

    /// The set as sources for an install from the store: no mirror ([`from_store`]
    /// checks first that the store, or the binary cache, has each one).
    pub fn sources(&self) -> Vec<DebSource> {
        self.debs
            .iter()
            .map(|d| DebSource {
                pin: PackagePin {
                    name: d.name.clone(),
                    archive: d.archive.clone(),
                    version: d.version.clone(),
                    architecture: d.architecture.clone(),
                    filename: d.filename.clone(),
                    size: d.size,
                    sha256: d.sha256.clone(),
                    closure: None,
                },
                mirror: String::new(),
            })
            .collect()
    }
}

/// That the store holds `deb` with its pinned bytes, taking it from the binary cache when
/// it does not, and never from a mirror: what a rollback installs must be what was
/// installed, whatever the archive serves now.
pub async fn from_store(store: &Store, deb: &DebSource) -> Result<(), StepError> {
    let path = store.deb_path(&deb.pin.sha256);
    let slot = in_flight(&path);
    let _turn = slot.lock().await;
    if stored_or_cached(store, deb).await? {
        return Ok(());
    }
    let p = &deb.pin;
    Err(StepError::with_hint(
        format!(
            "the .deb of `{}` {} (sha256 {}) is no longer in the store, nor in a binary cache",
            p.name, p.version, p.sha256
        ),
        "a rollback installs only what the store kept; `envc store verify --repair` removes \
         damaged .debs, and a store that was cleared has none",
    ))
}

/// Where the store keeps a pinned `.deb`, with the pinned bytes: the store's copy while it
/// still has the pinned hash, otherwise the binary cache's (when the store has one) or the
/// mirror's, checked against the pin (size, sha256) and kept, and pushed to the cache when
/// fetched from the mirror and the build pushes. A copy that no longer verifies (a damaged
/// disk) is fetched again. `owner` is the pin that needs it (the package's own, or an
/// image's for the `.deb`s of its set), for the error.
pub async fn path_of(store: &Store, deb: &DebSource, owner: &PinKey) -> Result<PathBuf, StepError> {
    keep_checked(store, deb, owner).await?;
    Ok(store.deb_path(&deb.pin.sha256))
}

/// That the store holds a pinned `.deb` with its pinned bytes, without reading a copy it
/// already has (a copy is checked when it is kept, and again where it is shipped): for a
/// pin whose version the target already has, so a hand-edited sha256 is caught even where
/// nothing is installed. A copy the store lacks is fetched and checked as [`path_of`] does.
pub async fn hold(store: &Store, deb: &DebSource, owner: &PinKey) -> Result<(), StepError> {
    let size = tokio::fs::metadata(store.deb_path(&deb.pin.sha256))
        .await
        .map(|m| m.len());
    if size.is_ok_and(|s| s == deb.pin.size) {
        return Ok(());
    }
    keep_checked(store, deb, owner).await
}

/// The package a pinned `.deb` of the store holds ([`path_of`] put it there), with its
/// relations, read once per process: the same `.deb` goes to many targets. A `.deb` whose
/// control paragraph names another package or version than its pin is refused.
pub async fn control_of(store: &Store, deb: &DebSource) -> Result<Arc<Package>, StepError> {
    static READ: OnceLock<Mutex<BTreeMap<String, Arc<Package>>>> = OnceLock::new();
    let read = || {
        READ.get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some(p) = read().get(&deb.pin.sha256) {
        return Ok(p.clone());
    }
    let p = &deb.pin;
    let what = format!("package `{}` {} ({})", p.name, p.version, p.filename);
    let path = store.deb_path(&p.sha256);
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| StepError::new(format!("{what}: reading {}: {e}", path.display())))?;
    let package =
        envc_lockfiles::deb::control(&bytes).map_err(|e| StepError::new(format!("{what}: {e}")))?;
    if package.name != p.name || package.version != p.version {
        return Err(StepError::new(format!(
            "{what}: the .deb holds `{}` {}, not what its pin names; nothing was installed",
            package.name, package.version
        )));
    }
    let package = Arc::new(package);
    read().insert(p.sha256.clone(), package.clone());
    Ok(package)
}

async fn keep_checked(store: &Store, deb: &DebSource, owner: &PinKey) -> Result<(), StepError> {
    // Steps of many targets need the same .deb at once: one of them fetches it, the others
    // wait and read it from the store.
    let path = store.deb_path(&deb.pin.sha256);
    let slot = in_flight(&path);
    let _turn = slot.lock().await;
    if stored_or_cached(store, deb).await? {
        return Ok(());
    }
    let bytes = fetch_deb(&deb.mirror, &deb.pin)
        .await
        .map_err(|e| fetch_error(deb, owner, e))?;
    store.put_deb(&deb.pin.sha256, &bytes)?;
    let cache = store.deb_cache().filter(|c| !unreachable(&c.url(), false));
    if let Some(c) = cache.filter(|c| c.push()) {
        // Best effort: a .deb the cache lacks is fetched from the mirror next time.
        if c.put_deb(&deb.pin.sha256, bytes).await.is_err() {
            unreachable(&c.url(), true);
        }
    }
    Ok(())
}

/// Whether the store has `deb` with its pinned bytes, or has it now from the binary cache
/// (kept in the store): the two places [`keep_checked`] looks before the mirror. The
/// caller holds the `.deb`'s turn ([`in_flight`]).
async fn stored_or_cached(store: &Store, deb: &DebSource) -> Result<bool, StepError> {
    let path = store.deb_path(&deb.pin.sha256);
    let pinned =
        |bytes: &[u8]| bytes.len() as u64 == deb.pin.size && sha256_hex(bytes) == deb.pin.sha256;
    if let Ok(bytes) = tokio::fs::read(&path).await {
        if pinned(&bytes) {
            return Ok(true);
        }
    }
    // The binary cache, then the mirror. A cache that cannot be read, or that holds other
    // bytes under the name, is passed over: the mirror is the authority, the pin the check.
    // A cache that failed once in this run is not asked again: with many .debs to fetch,
    // waiting out its timeout for each would stall the build.
    let cache = store.deb_cache().filter(|c| !unreachable(&c.url(), false));
    if let Some(c) = cache {
        let cached = c.get_deb(&deb.pin.sha256, deb.pin.size).await;
        match cached {
            Ok(Some(bytes)) if pinned(&bytes) => {
                store.put_deb(&deb.pin.sha256, &bytes)?;
                return Ok(true);
            }
            Ok(_) => {}
            Err(_) => {
                unreachable(&c.url(), true);
            }
        }
    }
    Ok(false)
}

/// Whether the binary cache at `url` failed in this process; `failed` records that it did.
fn unreachable(url: &str, failed: bool) -> bool {
    static FAILED: OnceLock<Mutex<std::collections::BTreeSet<String>>> = OnceLock::new();
    let mut set = FAILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if failed {
        set.insert(url.to_string());
    }
    set.contains(url)
}

/// The lock of one `.deb` of one store, while any step of this process needs it.
fn in_flight(path: &std::path::Path) -> Arc<tokio::sync::Mutex<()>> {
    static SLOTS: OnceLock<Mutex<BTreeMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Slots nobody holds any more are dropped, so the map stays as small as the work.
    slots.retain(|_, slot| Arc::strong_count(slot) > 1);
    slots.entry(path.to_path_buf()).or_default().clone()
}

fn fetch_error(deb: &DebSource, owner: &PinKey, e: FetchError) -> StepError {
    let p = &deb.pin;
    let what = format!("package `{}` {} (pin {owner})", p.name, p.version);
    match e {
        // A vendor's archive: nobody keeps its old states for it.
        FetchError::Gone(_) if !p.archive.starts_with("debian/") => StepError::with_hint(
            format!(
                "{what}: {} no longer serves {}; nothing was installed",
                deb.mirror, p.filename
            ),
            format!(
                "the vendor's archive dropped this version: a binary cache that has the \
                     .deb serves it (`envc.toml` [cache]), or move the pin with `envc lock \
                     FILE --update={owner}`"
            ),
        ),
        FetchError::Gone(_) => StepError::with_hint(
            format!(
                "{what}: {} no longer serves {}; nothing was installed",
                deb.mirror, p.filename
            ),
            format!(
                "Debian's mirrors keep only the current versions. Build from a snapshot of the \
                 archive as it was locked: set the archive's `mirror` in the lockfile to \
                 https://snapshot.debian.org/archive/debian/<TIME>/ (a time after its `date`), \
                 or move the pin with `envc lock FILE --update={owner}`"
            ),
        ),
        FetchError::Mismatch(m) => StepError::with_hint(
            format!(
                "{what}: the .deb at {} does not match its pin: expected {}, got {}; nothing \
                 was installed",
                deb.url(),
                m.expected,
                m.got
            ),
            m.hint.clone(),
        ),
        other => StepError::with_hint(
            format!("{what}: cannot fetch {}: {other}", deb.url()),
            "the controller fetches every pinned .deb once into its store: the lockfile's \
             mirror must be reachable from this machine for a .deb the store does not have",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lockfile_s_packages_come_from_their_archive_s_mirror() {
        let text = "version = 3\nsource_date_epoch = 1\nstdlib = \"".to_string()
            + &"0".repeat(64)
            + "\"\n\n[[archive]]\nname = \"debian/bookworm\"\nmirror = \"http://m.test/debian\"\n\
               suite = \"bookworm\"\narchitecture = \"amd64\"\ncomponents = [\"main\"]\n\
               release_sha256 = \""
            + &"1".repeat(64)
            + "\"\ndate = \"x\"\n\n[[package]]\nname = \"jq\"\narchive = \"debian/bookworm\"\n\
               version = \"1.6-2.1\"\narchitecture = \"amd64\"\n\
               filename = \"pool/main/j/jq/jq_1.6-2.1_amd64.deb\"\nsize = 10\nsha256 = \""
            + &"2".repeat(64)
            + "\"\n";
        let lock = Lockfile::parse(&text).unwrap();
        let s = sources(&lock);
        assert_eq!(
            s[&"2".repeat(64)].url(),
            "http://m.test/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb"
        );
        assert_eq!(s.len(), 1);
    }
}
