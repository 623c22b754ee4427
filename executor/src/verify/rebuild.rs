//! Verify's first level: every build derivation (an image) built again in the lab's
//! scratch store and compared bit for bit with what production recorded, or with the
//! binary cache's entry, or, when there is neither, with a second build (Nix's
//! `--check`, reproducible-builds.org's two builds). A mismatch is explained inside the
//! artefact: the first differing paths of the image's file tree, with their hashes, or,
//! when the trees agree, the first differing block of the disk.

use envc_ids::ResolvedHash;
use std::time::Instant;

use serde::Serialize;

use crate::cache::{BinaryCache, Transfers};
use crate::kinds::image::build::{build_image, fact, objects, ImageSpec};
use crate::record::Facts;
use crate::store::{ObjectId, Store};

use super::tree::{diff_tars, first_difference, PathDiff};

/// How many differing paths a mismatch lists (the total is said too).
const PATHS_SHOWN: usize = 20;

/// What a rebuild is compared with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Reference {
    /// The record production holds of this very derivation (same resolved hash).
    Record { run: String },
    /// The binary cache's signed entry.
    Cache { url: String },
    /// Nothing was recorded: a second, independent build.
    SecondBuild,
}

/// A path of the image's file tree that differs, as people and `--json` read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathChange {
    pub path: String,
    /// What differs, in words (`content 1a2b… → 3c4d…`, `missing from the rebuild`).
    pub what: String,
    /// The entry on each side, in one line (`None`: absent there).
    pub expected: Option<String>,
    pub found: Option<String>,
}

impl From<PathDiff> for PathChange {
    fn from(d: PathDiff) -> PathChange {
        PathChange {
            what: d.what(),
            expected: d.expected.as_ref().map(|e| e.summary()),
            found: d.found.as_ref().map(|e| e.summary()),
            path: d.path,
        }
    }
}

/// One output of the image that differs: (output, reference's, rebuild's).
pub type OutputDiff = (String, Option<String>, Option<String>);

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RebuildOutcome {
    Same,
    Differs {
        outputs: Vec<OutputDiff>,
        /// The first differing paths of the file tree.
        paths: Vec<PathChange>,
        paths_total: usize,
        /// When the trees agree: the first differing 4 KiB block of the disk.
        disk_offset: Option<u64>,
        /// Why the inside could not be compared, when it could not.
        note: Option<String>,
    },
    /// The rebuild itself failed: not reproducible from the lock as things stand.
    Failed {
        error: String,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Rebuild {
    pub node: String,
    pub reference: Reference,
    #[serde(flatten)]
    pub outcome: RebuildOutcome,
    pub seconds: f64,
}

impl Rebuild {
    pub fn differs(&self) -> bool {
        !matches!(self.outcome, RebuildOutcome::Same)
    }
}

/// Where the reference's bytes can be read, once it is known to differ.
pub enum ReferenceBytes<'a> {
    /// Objects of this store (production's, or the second build's).
    Store(&'a Store),
    /// Objects fetched from the cache into the lab's store on demand.
    Cache(&'a BinaryCache),
}

/// Rebuilds image `node` into `lab` and compares it with `reference` (its facts, and
/// where its bytes are). Without a reference, builds a second time in `second` first.
pub async fn rebuild(
    lab: &Store,
    second: &Store,
    node: &str,
    resolved_hash: &ResolvedHash,
    spec: &ImageSpec,
    reference: Option<(Reference, Facts, ReferenceBytes<'_>)>,
    transfers: &dyn Transfers,
) -> Rebuild {
    let started = Instant::now();
    let done = |reference, outcome| Rebuild {
        node: node.to_string(),
        reference,
        outcome,
        seconds: started.elapsed().as_secs_f64(),
    };
    let (reference, expected, bytes) = match reference {
        Some(r) => r,
        None => match build_image(second, spec).await {
            Ok(facts) => (Reference::SecondBuild, facts, ReferenceBytes::Store(second)),
            Err(e) => {
                let error = format!("the first of two builds failed: {e}");
                return done(Reference::SecondBuild, RebuildOutcome::Failed { error });
            }
        },
    };
    let found = match build_image(lab, spec).await {
        Ok(facts) => facts,
        Err(e) => {
            let error = e.to_string();
            return done(reference, RebuildOutcome::Failed { error });
        }
    };
    // The lab deploys from this build, as production deployed from its own.
    if let Err(e) = lab.put_substitute(resolved_hash, &found) {
        let error = format!("cannot keep the rebuild in the lab's store: {e}");
        return done(reference, RebuildOutcome::Failed { error });
    }
    let outputs: Vec<OutputDiff> = [
        fact::DISK,
        fact::KERNEL,
        fact::ROOTFS,
        fact::PACKAGES,
        fact::KERNEL_VERSION,
    ]
    .iter()
    .filter(|k| expected.get(**k) != found.get(**k))
    .map(|k| {
        (
            k.to_string(),
            expected.get(*k).cloned(),
            found.get(*k).cloned(),
        )
    })
    .collect();
    if outputs.is_empty() {
        return done(reference, RebuildOutcome::Same);
    }
    let looked = inside(
        lab,
        node,
        resolved_hash,
        &expected,
        &found,
        bytes,
        transfers,
    );
    let outcome = match looked.await {
        Ok((paths, paths_total, disk_offset)) => RebuildOutcome::Differs {
            outputs,
            paths,
            paths_total,
            disk_offset,
            note: None,
        },
        Err(note) => RebuildOutcome::Differs {
            outputs,
            paths: Vec::new(),
            paths_total: 0,
            disk_offset: None,
            note: Some(note.to_string()),
        },
    };
    done(reference, outcome)
}

/// Why a rebuild's outputs could not be compared inside, only by their digests.
#[derive(Debug)]
enum NoLookInside {
    CacheFetch(crate::cache::CacheError),
    /// The reference's output (`file tree`, `disk`) is not in its store.
    Missing(&'static str),
    /// The blocking comparison ended without an answer.
    Stopped(tokio::task::JoinError),
    Trees(std::io::Error),
    Disks(std::io::Error),
}

impl std::fmt::Display for NoLookInside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoLookInside::CacheFetch(e) => {
                write!(f, "the cache's bytes could not be fetched to look inside: {e}")
            }
            NoLookInside::Missing(output) => write!(
                f,
                "the reference's {output} is not on this machine (its objects left the store): only the digests can be compared"
            ),
            NoLookInside::Stopped(e) => write!(f, "{e}"),
            NoLookInside::Trees(e) => write!(f, "cannot read the file trees: {e}"),
            NoLookInside::Disks(e) => write!(f, "cannot read the disks: {e}"),
        }
    }
}

/// What differs inside: the trees' differing paths, else the disks' first differing block.
async fn inside(
    lab: &Store,
    node: &str,
    resolved_hash: &ResolvedHash,
    expected: &Facts,
    found: &Facts,
    bytes: ReferenceBytes<'_>,
    transfers: &dyn Transfers,
) -> Result<(Vec<PathChange>, usize, Option<u64>), NoLookInside> {
    let store = match bytes {
        ReferenceBytes::Store(s) => s,
        ReferenceBytes::Cache(cache) => {
            (cache
                .pull_told(lab, resolved_hash, objects, node, transfers)
                .await)
                .map_err(NoLookInside::CacheFetch)?;
            lab
        }
    };
    let path = |st: &Store, facts: &Facts, output: &str| {
        let id = facts.get(output).and_then(|h| ObjectId::parse(h))?;
        st.contains(&id).then(|| st.object_file(&id))
    };
    let (Some(want), Some(got)) = (
        path(store, expected, fact::ROOTFS),
        path(lab, found, fact::ROOTFS),
    ) else {
        return Err(NoLookInside::Missing("file tree"));
    };
    let (paths, total) = tokio::task::spawn_blocking(move || diff_tars(&want, &got, PATHS_SHOWN))
        .await
        .map_err(NoLookInside::Stopped)?
        .map_err(NoLookInside::Trees)?;
    let paths: Vec<PathChange> = paths.into_iter().map(PathChange::from).collect();
    if total > 0 || expected.get(fact::DISK) == found.get(fact::DISK) {
        return Ok((paths, total, None));
    }
    let (Some(want), Some(got)) = (
        path(store, expected, fact::DISK),
        path(lab, found, fact::DISK),
    ) else {
        return Err(NoLookInside::Missing("disk"));
    };
    let offset = tokio::task::spawn_blocking(move || first_difference(&want, &got, 4096))
        .await
        .map_err(NoLookInside::Stopped)?
        .map_err(NoLookInside::Disks)?;
    Ok((paths, 0, offset))
}
