//! `package` nodes: a Debian package on a target, installed in one transaction per target
//! (from its pinned `.deb`s when locked, else by the target's apt), read back, and purged.

pub mod lock;
pub mod remote;
mod restore;

use std::collections::BTreeSet;
use std::sync::Arc;

use envc_compiler::pin::{ClosureDeb, PackageValue, PinKey, PinValue};
use envc_ids::NodeKind;
use serde_json::json;

use crate::debs::{DebSource, KeptDebs};
use crate::error::StepError;
use crate::node_type::{
    absorb_same, Absent, BoxFuture, Launch, Launching, LockNeeds, NodeType, Payload, ProbeError,
    ReadsBack, Realize, Removable, Removal, Removing, Restores, Step, StepCx,
};
use crate::record::{Applied, Facts, RealizationRecord};
use crate::spec::{NodeSpec, Spec, Val};
use crate::substitute::{Resolution, Resolving};
use crate::transport::Transport;
use remote::{
    install_packages, list_packages, probe_packages, purge_packages, Listing, PackageSpec,
};

pub struct Package;

impl NodeType for Package {
    fn kind(&self) -> NodeKind {
        NodeKind::Package
    }

    fn restores(&self) -> Option<&dyn Restores> {
        Some(self)
    }

    fn lock_needs(&self, node: &NodeSpec, cx: &mut LockNeeds<'_>) {
        lock::lock_needs(node, cx)
    }

    fn read_output(
        &self,
        producer: &NodeSpec,
        output: &str,
        facts: &Facts,
    ) -> Result<Val, Resolution> {
        let fact = match output {
            "installed_version" => "version",
            other => other,
        };
        crate::substitute::read_fact(producer, output, fact, facts)
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let node = r.node;
        // The source's version, else the lockfile's.
        let pin = node
            .pins
            .get(&PinKey::Package(node.name.clone()))
            .and_then(|v| PackageValue::decode(v));
        let version = match r.attrs.get("version") {
            Some(Val::Str(v)) if !v.is_empty() => Some(v.clone()),
            _ => pin.as_ref().map(|p| p.version.clone()),
        };
        r.put("version", json!(version));
        // Locked: exactly the pinned .debs (a lock that pins another version than the
        // source asks for is stale; the target's apt installs what the source says).
        let debs = match pin.filter(|p| Some(&p.version) == version.as_ref()) {
            Some(p) => {
                pinned_debs(r.spec, node, &p).map_err(|e| Resolution::Failed(e.to_string()))?
            }
            None => Vec::new(),
        };
        Ok(Arc::new(PackageSpec {
            name: node.name.clone(),
            version,
            debs,
        }))
    }

    fn reads_back(&self) -> Option<&dyn ReadsBack> {
        Some(self)
    }

    fn removable(&self) -> Option<&dyn Removable> {
        Some(self)
    }
}

impl ReadsBack for Package {
    fn probe<'a>(
        &'a self,
        t: &'a Transport,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>> {
        Box::pin(async move { Ok(probe_packages(t, names).await?) })
    }
}

impl Removable for Package {
    fn removal_rank(&self) -> u8 {
        3
    }

    fn remove<'a>(
        &'a self,
        cx: &'a Removing<'a>,
        records: Vec<(&'a RealizationRecord, String)>,
    ) -> BoxFuture<'a, Vec<Removal>> {
        Box::pin(async move {
            let names: Vec<String> = records.iter().map(|(_, n)| n.clone()).collect();
            let res = purge_packages(cx.transport, &names)
                .await
                .map(|()| "purged".to_string());
            records
                .iter()
                .map(|(r, _)| Removal::of(r, res.clone()))
                .collect()
        })
    }
}

/// Where the `.deb`s a package's pin names come from: the package itself, then its
/// closure, each found in the lockfile with the version and hash the node was compiled with.
fn pinned_debs(
    spec: &Spec,
    node: &NodeSpec,
    pin: &PackageValue,
) -> Result<Vec<DebSource>, crate::debs::UnpinnedDeb> {
    let root = ClosureDeb {
        name: node.name.clone(),
        version: pin.version.clone(),
        sha256: pin.sha256.clone(),
    };
    let what = format!("`{}`", node.key);
    crate::debs::pinned(
        &spec.debs,
        std::iter::once(&root).chain(&pin.closure),
        &what,
    )
}

impl Realize for PackageSpec {
    fn predicted_facts(&self) -> Option<Facts> {
        self.version
            .as_ref()
            .map(|v| Facts::from([("version".to_string(), v.clone())]))
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        Launch::OnTarget(Box::new(Packages {
            items: vec![(cx.node, self.clone())],
            listing: None,
        }))
    }

    // A rollback installs exactly these `.deb`s again, from the store. An unlocked package
    // is whatever the target's apt chose: nothing to keep.
    fn kept(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        if self.debs.is_empty() {
            return None;
        }
        serde_json::to_vec(&KeptDebs::of(&self.debs))
            .ok()
            .map(std::borrow::Cow::Owned)
    }
}

/// Packages installed on one target in one transaction, with what the target's dpkg
/// listed when the step's probe asked.
struct Packages {
    items: Vec<(usize, PackageSpec)>,
    listing: Option<Listing>,
}

impl Step for Packages {
    fn nodes(&self) -> Vec<usize> {
        self.items.iter().map(|x| x.0).collect()
    }

    fn without(self: Box<Self>, gone: &BTreeSet<usize>) -> Option<Box<dyn Step>> {
        let Packages { items, listing } = *self;
        let items: Vec<_> = items.into_iter().filter(|x| !gone.contains(&x.0)).collect();
        (!items.is_empty()).then(|| Box::new(Packages { items, listing }) as Box<dyn Step>)
    }

    fn absorb(&mut self, other: Box<dyn Step>) -> Option<Box<dyn Step>> {
        absorb_same(self, other, |a, b| a.items.extend(b.items))
    }

    fn probes(&self) -> bool {
        true
    }

    fn absent<'a>(
        self: Box<Self>,
        t: &'a Transport,
        nodes: &'a [usize],
    ) -> BoxFuture<'a, Result<Absent, StepError>> {
        Box::pin(async move {
            let listing = list_packages(t).await?;
            let absent = (self.items.iter())
                .filter(|x| nodes.contains(&x.0) && listing.version_of(&x.1.name).is_none())
                .map(|x| x.0)
                .collect();
            let step = Packages {
                items: self.items,
                listing: Some(listing),
            };
            Ok((absent, Box::new(step) as Box<dyn Step>))
        })
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move {
            let (nodes, specs): (Vec<usize>, Vec<PackageSpec>) = self.items.into_iter().unzip();
            match install_packages(cx.transport, cx.store, &specs, self.listing).await {
                Ok(rs) => nodes.into_iter().zip(rs.into_iter().map(Ok)).collect(),
                Err(e) => nodes.into_iter().map(|i| (i, Err(e.clone()))).collect(),
            }
        })
    }
}
