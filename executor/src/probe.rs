//! Probing: read the facts of every live record back from its target and report what
//! differs (`envc drift`; `envc build --refresh` then repairs it).

use std::collections::BTreeMap;

use crate::connect::Connections;
use crate::kinds;
use crate::kinds::node_type::{Local, ProbeError};
use crate::kinds::vm::machines::Machines;
use crate::record::{drift_between, DriftFacts};
use crate::record::{Facts, RealizationRecord};
use crate::spec::on_target;
use crate::store::Store;
use crate::transport::HostSpec;
use envc_compiler::types::NodeKind;

/// What envc can see without contacting anything: a VM whose QEMU no longer runs, an image
/// whose files left the store. Cheap, so plans and builds always look.
pub fn local_drift(
    records: &BTreeMap<String, RealizationRecord>,
    store: &Store,
    machines: &Machines,
) -> BTreeMap<String, DriftFacts> {
    let cx = Local { store, machines };
    records
        .iter()
        .filter_map(|(key, r)| {
            let kind = crate::spec::targetless(key)?.kind;
            Some((key.clone(), kinds::of(kind).local_drift(r, &cx)?))
        })
        .collect()
}

/// What a probe found, by node key: differences from the record, or why it could not look.
#[derive(Clone, Debug, Default)]
pub struct Probed {
    pub drift: BTreeMap<String, DriftFacts>,
    pub unreachable: BTreeMap<String, String>,
}

/// Probes every record in `records`. `hosts` gives, by host name, the current address of
/// hosts still in the graph; others are reached where their record says.
pub async fn probe(
    records: &BTreeMap<String, RealizationRecord>,
    hosts: &BTreeMap<String, HostSpec>,
    conns: &Connections,
    secrets: Option<&crate::secrets::Secrets>,
) -> Probed {
    let mut by_target: BTreeMap<String, Vec<(NodeKind, String, &RealizationRecord)>> =
        BTreeMap::new();
    for (key, r) in records {
        // A kind that reads nothing back (a command; a repository and the objects committed
        // to it, whose changes are git's history) has no drift.
        if let Some(k) = on_target(key).filter(|k| kinds::of(k.kind).reads_back()) {
            by_target
                .entry(k.target.unwrap_or_default())
                .or_default()
                .push((k.kind, k.name, r));
        }
    }
    let mut out = Probed {
        drift: BTreeMap::new(),
        unreachable: BTreeMap::new(),
    };
    let probes = by_target.into_iter().map(|(target, items)| async move {
        let t = match conns.to_target(&target, hosts.get(&target), records).await {
            Ok((t, _)) => t,
            Err(e) => return (items, Err(e.to_string())),
        };
        // Per item: what the probe saw, or why it could not look.
        let mut found: BTreeMap<(NodeKind, String), Result<Option<Facts>, String>> =
            BTreeMap::new();
        for kind in NodeKind::ALL {
            let names: Vec<String> = (items.iter())
                .filter(|x| x.0 == kind)
                .map(|x| x.1.clone())
                .collect();
            if names.is_empty() {
                continue;
            }
            match kinds::of(kind).probe(&t, &names).await {
                Ok(facts) => {
                    for (n, f) in names.into_iter().zip(facts) {
                        found.insert((kind, n), Ok(f));
                    }
                }
                Err(ProbeError::Kind(e)) => {
                    for n in names {
                        found.insert((kind, n), Err(e.clone()));
                    }
                }
                // Nothing more is asked of this target.
                Err(ProbeError::Target(e)) => return (items, Err(e.to_string())),
            }
        }
        (items, Ok(found))
    });
    for (items, result) in futures_join_all(probes).await {
        match result {
            Ok(found) => {
                for (kind, name, r) in items {
                    match found.get(&(kind, name)) {
                        Some(Err(e)) => {
                            out.unreachable.insert(r.node.clone(), e.clone());
                        }
                        observed => {
                            let observed = observed.and_then(|o| o.as_ref().ok()?.as_ref());
                            let observed = observed.map(|o| sealed_like(&r.facts, o, secrets));
                            let d = drift_between(&r.facts, observed.as_ref());
                            if !d.is_empty() {
                                out.drift.insert(r.node.clone(), d);
                            }
                        }
                    }
                }
            }
            Err(e) => {
                for (_, _, r) in items {
                    out.unreachable.insert(r.node.clone(), e.clone());
                }
            }
        }
    }
    out
}

/// Runs futures concurrently on the current task (the probes borrow the records).
async fn futures_join_all<F: std::future::Future>(
    fs: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = fs.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, r) in pinned.iter_mut().zip(results.iter_mut()) {
            if r.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *r = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results
        .into_iter()
        .map(|r| r.expect("every future completed"))
        .collect()
}

/// What a probe saw of a file, as its record keeps it: a file that holds a secret is
/// recorded by the keyed hash of its sha256, so the sha256 seen is keyed the same way
/// (without the key, the content is not compared).
fn sealed_like(
    recorded: &Facts,
    observed: &Facts,
    secrets: Option<&crate::secrets::Secrets>,
) -> Facts {
    if recorded.get("sealed").map(String::as_str) != Some("yes") {
        return observed.clone();
    }
    let mut o = observed.clone();
    o.insert("sealed".into(), "yes".into());
    match (secrets, observed.get("sha256")) {
        (Some(s), Some(sha)) if !sha.starts_with('(') => {
            o.insert("sha256".into(), s.keyed(sha.as_bytes()));
        }
        (None, _) => {
            o.insert(
                "sha256".into(),
                recorded.get("sha256").cloned().unwrap_or_default(),
            );
        }
        _ => {}
    }
    o
}
