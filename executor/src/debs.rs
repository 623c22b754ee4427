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
use envc_lockfiles::{Lockfile, PackagePin};

use crate::error::StepError;
use crate::store::Store;

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

/// Where each package a lockfile pins comes from, by package name. A package whose
/// archive is not pinned is left out (the lockfile's parser refuses such a lockfile).
pub fn sources(lock: &Lockfile) -> BTreeMap<String, DebSource> {
    lock.packages
        .iter()
        .filter_map(|p| {
            let archive = lock.archive(&p.archive)?;
            Some((
                p.name.clone(),
                DebSource {
                    pin: p.clone(),
                    mirror: archive.mirror.clone(),
                },
            ))
        })
        .collect()
}

/// The bytes of a pinned `.deb`: the store's copy while it still has the pinned hash,
/// otherwise fetched from the mirror, checked against the pin (size, sha256) and kept.
/// A copy that no longer verifies (a damaged disk) is fetched again.
pub async fn bytes_of(store: &Store, deb: &DebSource) -> Result<Vec<u8>, StepError> {
    // Steps of many targets need the same .deb at once: one of them fetches it, the others
    // wait and read it from the store.
    let path = store.deb_path(&deb.pin.sha256);
    let slot = in_flight(&path);
    let _turn = slot.lock().await;
    if let Ok(bytes) = tokio::fs::read(&path).await {
        if bytes.len() as u64 == deb.pin.size && sha256_hex(&bytes) == deb.pin.sha256 {
            return Ok(bytes);
        }
    }
    let bytes = fetch_deb(&deb.mirror, &deb.pin)
        .await
        .map_err(|e| fetch_error(deb, e))?;
    store.put_deb(&deb.pin.sha256, &bytes)?;
    Ok(bytes)
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

fn fetch_error(deb: &DebSource, e: FetchError) -> StepError {
    let p = &deb.pin;
    let what = format!("package `{}` {} (pin {})", p.name, p.version, p.key());
    match e {
        FetchError::Mismatch(m) if m.got.starts_with("404") => StepError::with_hint(
            format!(
                "{what}: {} no longer serves {}; nothing was installed",
                deb.mirror, p.filename
            ),
            format!(
                "Debian's mirrors keep only the current versions. Build from a snapshot of the \
                 archive as it was locked: set the archive's `mirror` in the lockfile to \
                 https://snapshot.debian.org/archive/debian/<TIME>/ (a time after its `date`), \
                 or move the pin with `envc lock FILE --update {}`",
                p.key()
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
        let text = "version = 2\nsource_date_epoch = 1\nstdlib = \"".to_string()
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
            s["jq"].url(),
            "http://m.test/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb"
        );
        assert_eq!(s.len(), 1);
    }
}
