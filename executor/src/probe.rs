//! Probing: read the facts of every live record back from its target and report what
//! differs (`envc drift`; `envc build --refresh` then repairs it).

use std::collections::BTreeMap;

use crate::connect::Connections;
use crate::kinds::file::remote::probe_files;
use crate::kinds::image::build::objects;
use crate::kinds::package::remote::probe_packages;
use crate::kinds::service::remote::probe_services;
use crate::kinds::vm::qemu::Machines;
use crate::plan::{drift_between, DriftFacts};
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
    let mut out = BTreeMap::new();
    for (key, r) in records {
        let kind = crate::spec::targetless(key).map(|k| k.kind);
        if kind == Some(NodeKind::Vm) && !machines.is_running(&r.facts) {
            out.insert(
                key.clone(),
                vec![("running".into(), "yes".into(), "no".into())],
            );
        }
        if kind == Some(NodeKind::Image) && !objects(&r.facts).iter().all(|id| store.contains(id)) {
            out.insert(
                key.clone(),
                vec![("files in the store".into(), "yes".into(), "no".into())],
            );
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
        match on_target(key) {
            // A command leaves nothing envc can read back: it has no drift. A repository and
            // the objects committed to it are not read back yet: what changed in git is
            // seen in its history, and the next delivery writes envc's objects again.
            Some(k)
                if matches!(
                    k.kind,
                    NodeKind::Exec | NodeKind::Gitops | NodeKind::Manifest
                ) => {}
            None => {}
            Some(k) => by_target
                .entry(k.target.unwrap_or_default())
                .or_default()
                .push((k.kind, k.name, r)),
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
        let names = |k: NodeKind| -> Vec<String> {
            items
                .iter()
                .filter(|x| x.0 == k)
                .map(|x| x.1.clone())
                .collect()
        };
        // Per item: what the probe saw, or why it could not look.
        let mut found: BTreeMap<(NodeKind, String), Result<Option<Facts>, String>> =
            BTreeMap::new();
        let mut collect =
            |kind: NodeKind, names: Vec<String>, facts: Result<Vec<Option<Facts>>, String>| {
                match facts {
                    Ok(facts) => {
                        for (n, f) in names.into_iter().zip(facts) {
                            found.insert((kind, n), Ok(f));
                        }
                    }
                    Err(e) => {
                        for n in names {
                            found.insert((kind, n), Err(e.clone()));
                        }
                    }
                }
            };
        let files = names(NodeKind::File);
        let packages = names(NodeKind::Package);
        let services = names(NodeKind::Service);
        let r = async {
            if !files.is_empty() {
                let f = probe_files(&t, &files).await?;
                collect(NodeKind::File, files, Ok(f));
            }
            if !packages.is_empty() {
                let f = probe_packages(&t, &packages).await?;
                collect(NodeKind::Package, packages, Ok(f));
            }
            if !services.is_empty() {
                // No systemd on the host is an answer about the services alone.
                let f = probe_services(&t, &services).await;
                collect(NodeKind::Service, services, f.map_err(|e| e.to_string()));
            }
            Ok::<_, crate::transport::TransportError>(())
        }
        .await;
        (items, r.map(|()| found).map_err(|e| e.to_string()))
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
