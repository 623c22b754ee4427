//! Probing: read the facts of every live record back from its target and report what
//! differs (`envc drift`; `envc build --refresh` then repairs it). What a repository holds
//! is read back by every build too ([`Reading::EveryBuild`]): others push to it.

use std::collections::{BTreeMap, BTreeSet};

use crate::connect::Connections;
use crate::kinds;
use crate::kinds::node_type::{Local, ProbeError, Probing};
use crate::machines::Machines;
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

/// What the providers of machines say differs from their records (a cloud machine stopped,
/// terminated or resized behind envc's back): asked for `drift` and `--refresh` only, never
/// by a plan. A machine whose provider cannot be asked (no credentials) is unchecked, with
/// why.
pub async fn remote_drift(
    records: &BTreeMap<String, RealizationRecord>,
    machines: &Machines,
) -> Probed {
    let looks = records.iter().filter_map(|(key, r)| {
        let kind = crate::spec::targetless(key)?.kind;
        let look = kinds::of(kind).remote_drift(r, machines)?;
        Some(async move { (key.clone(), look.await) })
    });
    let mut out = Probed::default();
    for (key, seen) in futures::future::join_all(looks).await {
        match seen {
            Ok(d) if d.is_empty() => {}
            Ok(d) => {
                out.drift.insert(key, d);
            }
            Err(e) => {
                out.unreachable.insert(key, e.to_string());
            }
        }
    }
    out
}

/// What a probe found, by node key: differences from the record, or why it could not look.
#[derive(Clone, Debug, Default)]
pub struct Probed {
    pub drift: BTreeMap<String, DriftFacts>,
    pub unreachable: BTreeMap<String, String>,
}

/// Which records a probe reads back.
#[derive(Clone, Copy, Debug)]
pub enum Reading<'a> {
    /// Every live record whose kind reads back (`drift`, `--refresh`).
    All,
    /// What every build reads back before it decides (`NodeType::read_on_every_build`:
    /// the objects in a repository), of the nodes with these keys.
    EveryBuild(&'a BTreeSet<String>),
}

/// What is read back on one machine: records by their kind, and the records held by each
/// node there that holds others (a repository's objects).
#[derive(Default)]
struct OnMachine<'r> {
    items: Vec<(NodeKind, String, &'r RealizationRecord)>,
    held: Vec<Held<'r>>,
}

/// Records probed together, and what the probe saw of each (in order), or why it could
/// not look.
type Seen<'r> = (
    Vec<&'r RealizationRecord>,
    Result<Vec<Option<Facts>>, String>,
);

/// A node on a machine that holds others, and their records (node name, record).
struct Held<'r> {
    kind: NodeKind,
    record: &'r RealizationRecord,
    items: Vec<(String, &'r RealizationRecord)>,
}

/// Probes the records in `records` that `reading` asks for. `hosts` gives, by host name,
/// the current address of hosts still in the graph; others are reached where their record
/// says. What a node holds without being a machine (a repository's objects) is read back
/// through that node, once for all of them.
pub async fn probe(
    records: &BTreeMap<String, RealizationRecord>,
    hosts: &BTreeMap<String, HostSpec>,
    conns: &Connections,
    secrets: Option<&crate::secrets::Secrets>,
    environment: &str,
    reading: Reading<'_>,
) -> Probed {
    // The nodes that hold others (repositories), by name: kind, machine, record.
    let holders: BTreeMap<String, (NodeKind, String, &RealizationRecord)> = records
        .iter()
        .filter_map(|(key, r)| {
            let k = on_target(key).filter(|k| kinds::of(k.kind).holds().is_some())?;
            Some((k.name, (k.kind, k.target?, r)))
        })
        .collect();
    let mut by_target: BTreeMap<String, OnMachine> = BTreeMap::new();
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    for (key, r) in records {
        let Some(k) = on_target(key) else { continue };
        let target = k.target.clone().unwrap_or_default();
        if let Some((kind, _, holder)) = holders.get(&target) {
            let wanted = match reading {
                Reading::All => true,
                Reading::EveryBuild(keys) => {
                    (kinds::of(*kind).holds()).is_some_and(|h| h.read_on_every_build())
                        && keys.contains(key)
                }
            };
            if wanted {
                held.entry(target)
                    .or_insert_with(|| Held {
                        kind: *kind,
                        record: holder,
                        items: Vec::new(),
                    })
                    .items
                    .push((k.name, r));
            }
            continue;
        }
        // A kind that reads nothing back (a command; a repository, whose objects are read
        // back through it) has no drift of its own.
        if matches!(reading, Reading::All) && kinds::of(k.kind).reads_back().is_some() {
            by_target
                .entry(target)
                .or_default()
                .items
                .push((k.kind, k.name, r));
        }
    }
    for (name, h) in held {
        if let Some((_, machine, _)) = holders.get(&name) {
            by_target.entry(machine.clone()).or_default().held.push(h);
        }
    }
    let mut out = Probed {
        drift: BTreeMap::new(),
        unreachable: BTreeMap::new(),
    };
    let probes = by_target.into_iter().map(|(target, on)| async move {
        let all = || {
            (on.items.iter().map(|x| x.2))
                .chain(on.held.iter().flat_map(|h| h.items.iter().map(|x| x.1)))
                .collect::<Vec<_>>()
        };
        let t = match conns.to_target(&target, hosts.get(&target), records).await {
            Ok((t, _)) => t,
            Err(e) => return vec![(all(), Err(e.to_string()))],
        };
        let mut found: Vec<Seen> = Vec::new();
        for node_type in kinds::all() {
            let (names, recs): (Vec<String>, Vec<&RealizationRecord>) = (on.items.iter())
                .filter(|x| x.0 == node_type.kind())
                .map(|x| (x.1.clone(), x.2))
                .unzip();
            let Some(reader) = node_type.reads_back().filter(|_| !names.is_empty()) else {
                continue;
            };
            match reader.probe(&t, &names).await {
                Ok(facts) => found.push((recs, Ok(facts))),
                Err(ProbeError::Kind(e)) => found.push((recs, Err(e))),
                // Nothing more is asked of this target.
                Err(ProbeError::Target(e)) => return vec![(all(), Err(e.to_string()))],
            }
        }
        let cx = Probing {
            transport: &t,
            work_dir: &conns.ssh.work_dir,
            environment,
        };
        for h in &on.held {
            let recs: Vec<&RealizationRecord> = h.items.iter().map(|x| x.1).collect();
            let Some(holds) = kinds::of(h.kind).holds() else {
                continue;
            };
            match holds.probe_held(&cx, h.record, &h.items).await {
                Ok(facts) => found.push((recs, Ok(facts))),
                Err(ProbeError::Kind(e)) => found.push((recs, Err(e))),
                Err(ProbeError::Target(e)) => return vec![(all(), Err(e.to_string()))],
            }
        }
        found
    });
    for (recs, result) in futures_join_all(probes).await.into_iter().flatten() {
        match result {
            Ok(facts) => {
                // A probe that answered for fewer items than asked: the rest are gone.
                let facts = facts.into_iter().chain(std::iter::repeat(None));
                for (r, observed) in recs.into_iter().zip(facts) {
                    let observed = observed.map(|o| sealed_like(&r.facts, &o, secrets));
                    let d = drift_between(&r.facts, observed.as_ref());
                    if !d.is_empty() {
                        out.drift.insert(r.node.clone(), d);
                    }
                }
            }
            Err(e) => {
                for r in recs {
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
