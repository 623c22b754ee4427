//! `image` nodes: a Debian disk image and kernel built reproducibly with mmdebstrap
//! (`build.rs`, `image.sh`), kept in the store, shared through the binary cache.

pub mod build;
pub mod lock;

use std::collections::BTreeMap;
use std::sync::Arc;

use envc_compiler::pin::{ArchiveValue, ImageValue, PinKey, PinValue};
use envc_ids::{NodeKind, ResolvedHash};
use serde_json::json;

use crate::cache::CacheUse;
use crate::error::StepError;
use crate::machines::Machines;
use crate::node_type::{
    BoxFuture, Cached, Launch, Launching, Local, LockNeeds, NodeType, Payload, Realize, Unit,
    UnitCx,
};
use crate::record::{Applied, DriftFacts, RealizationRecord};
use crate::spec::{NodeSpec, Val};
use crate::substitute::{Resolution, Resolving};
use crate::tools::{tool, Tool};
use build::{objects, realize_image, ImageSpec};

pub struct Image;

impl Cached for Image {
    fn looked_up(&self, node: &NodeSpec) -> bool {
        locked(node)
    }

    fn objects(&self, facts: &crate::record::Facts) -> Vec<crate::store::ObjectId> {
        objects(facts)
    }
}

/// What image builds need on this machine.
const TOOLS: &[Tool] = &[
    tool("mmdebstrap", Some("--version"), "mmdebstrap"),
    tool("mke2fs", Some("-V"), "e2fsprogs"),
    tool("debugfs", Some("-V"), "e2fsprogs"),
    tool("e2fsck", Some("-V"), "e2fsprogs"),
    // The disk is laid out in a private mount namespace, as root or not.
    tool("unshare", Some("--version"), "util-linux"),
];

/// Whether the lockfile pins `node`'s package set: only such an image is the same bits on
/// every machine, so only it goes through the binary cache (pushed, pulled or taken).
pub fn locked(node: &NodeSpec) -> bool {
    node.pins.contains_key(&PinKey::Image(node.name.clone()))
}

impl NodeType for Image {
    fn kind(&self) -> NodeKind {
        NodeKind::Image
    }

    fn lock_needs(&self, node: &NodeSpec, cx: &mut LockNeeds<'_>) {
        lock::lock_needs(node, cx)
    }

    fn cached(&self) -> Option<&dyn Cached> {
        Some(self)
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let node = r.node;
        let mut packages = crate::spec::strings(r.attrs.get("packages"));
        packages.sort();
        packages.dedup();
        let files: BTreeMap<String, String> = match r.attrs.get("files") {
            Some(Val::Record(m)) => m
                .iter()
                .filter_map(|(k, v)| match v {
                    Val::Str(s) => Some((k.clone(), s.clone())),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        // The lockfile's package set and clock, when locked.
        let pinned = match node.pins.get(&PinKey::Image(node.name.clone())) {
            Some(v) => {
                // A pin value that does not read is a bug, never an unlocked build.
                let i = ImageValue::decode(v).ok_or_else(|| {
                    Resolution::Failed(format!(
                        "`{}`: its image pin does not read ({v:?}); run `envc lock FILE`",
                        node.key
                    ))
                })?;
                Some(
                    crate::debs::pinned(&r.spec.debs, &i.packages, &format!("`{}`", node.key))
                        .map_err(|e| Resolution::Failed(e.to_string()))?,
                )
            }
            None => None,
        };
        let source_date_epoch = node
            .pins
            .get(&PinKey::SourceDateEpoch)
            .and_then(|v| u64::decode(v))
            .unwrap_or(build::SOURCE_DATE_EPOCH);
        let mirror = node
            .pins
            .get(&PinKey::debian_archive(&r.text("suite")))
            .and_then(|v| ArchiveValue::decode(v))
            .map(|a| a.mirror);
        let img = ImageSpec {
            mirror,
            name: node.name.clone(),
            suite: r.text("suite"),
            packages,
            files,
            source_date_epoch,
            pinned,
        };
        r.put("suite", json!(img.suite));
        r.put("packages", json!(img.packages));
        r.put("files", json!(img.files));
        // The builder and the fixed time are inputs too: a new builder is a new image.
        r.put("builder", json!(build::builder_hash()));
        r.put("source_date_epoch", json!(img.source_date_epoch));
        Ok(Arc::new(img))
    }

    fn tools(&self) -> &'static [Tool] {
        TOOLS
    }

    fn local_drift(&self, record: &RealizationRecord, cx: &Local<'_>) -> Option<DriftFacts> {
        let present = objects(&record.facts)
            .iter()
            .all(|id| cx.store.contains(id));
        (!present).then(|| vec![("files in the store".into(), "yes".into(), "no".into())])
    }

    fn retire<'a>(
        &'a self,
        _machines: &'a Machines,
        _record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        Some(Box::pin(async {
            Ok("forgotten; its files stay in the store".to_string())
        }))
    }
}

impl Realize for ImageSpec {
    fn launch(&self, cx: &Launching<'_>) -> Launch {
        Launch::Alone(Box::new(Make {
            key: cx.spec.key.clone(),
            hash: cx.hash.clone(),
            spec: self.clone(),
            cache: cx.cache.cloned(),
        }))
    }
}

/// Make an image's outputs present in the store: from the store, the cache, or a build.
struct Make {
    key: String,
    hash: ResolvedHash,
    spec: ImageSpec,
    cache: Option<CacheUse>,
}

impl Unit for Make {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            let (facts, note) = realize_image(
                cx.store,
                self.cache.as_ref(),
                &self.key,
                &self.hash,
                &self.spec,
            )
            .await?;
            Ok(Applied {
                facts,
                created: true,
                note,
                log: None,
            })
        })
    }
}
