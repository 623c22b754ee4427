//! Adoption: nodes with an `adopt` line and no record yet are looked at on their targets
//! before anything runs, with the kind's own probe (the one `envc drift` reads records back
//! with), against what the source declares. Found as declared, the node is recorded as found
//! and nothing is done on the target; found different, it is updated in place; not found,
//! it fails, naming the line. Either way the record is `adopted` and never `created`, so
//! leaving the source (or `destroy`) leaves the thing where it was found, unless
//! `destroy --adopted`.
//!
//! A machine made outside envc (a QEMU VM by its disk and port, an EC2 instance by its id)
//! is found by its provider where its `adopt` line's `from` says, and logged in to: found
//! `running`, it is taken over as it runs (nothing rebooted), and what differs from the
//! source is shown, not changed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::connect::Connections;
use crate::kinds::node_type::Adopting;
use crate::machines::Machines;
use crate::plan::{Action, Plan};
use crate::probe::{probe, Reading};
use crate::record::{DriftFacts, Facts, RealizationRecord};
use crate::spec::{targetless, Spec};
use crate::transport::HostSpec;
use envc_ids::{ResolvedHash, TargetIdentity};

/// What the look before the run found of an adopted node's thing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "found", rename_all = "lowercase")]
pub enum Found {
    /// There, as the source declares it: recorded with these facts, nothing runs.
    Same { facts: Facts },
    /// There, different: (fact, what the source says, what was found); updated in place.
    Differs { differences: DriftFacts },
    /// Not there: adopting it fails (`why`: what the provider looked for, for a machine).
    Absent {
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A machine, found running and logged in to: taken over as it runs. `differences`:
    /// what the source declares that it is not (shown, not changed).
    Running {
        facts: Facts,
        differences: DriftFacts,
        how: String,
    },
    /// Could not be looked at (the target did not answer): decided at build.
    Unread { why: String },
}

/// The nodes of `spec` that have an `adopt` line and no live record, by index.
pub fn pending(spec: &Spec, records: &BTreeMap<String, RealizationRecord>) -> Vec<usize> {
    (spec.nodes.iter().enumerate())
        .filter(|(_, n)| spec.adoptions.contains_key(&n.key) && !records.contains_key(&n.key))
        .map(|(i, _)| i)
        .collect()
}

/// One warning per `adopt` line whose node already has a record: it did its work.
pub fn already_managed(spec: &Spec, records: &BTreeMap<String, RealizationRecord>) -> Vec<String> {
    (spec.adoptions.iter())
        .filter(|(key, _)| records.contains_key(*key))
        .map(|(key, a)| {
            format!(
                "`{key}` is already managed; the `adopt` line at {} can go",
                a.location
            )
        })
        .collect()
}

/// Looks at every pending adoption that `plan` could resolve on its target (a node whose
/// inputs change first is looked at by the build, when they have). `records`: the live
/// ones, for the targets' recorded host keys.
pub async fn look(
    spec: &Spec,
    plan: &Plan,
    records: &BTreeMap<String, RealizationRecord>,
    hosts: &BTreeMap<String, HostSpec>,
    conns: &Connections,
    environment: &str,
) -> BTreeMap<usize, Found> {
    // The targets' records (for their keys), and what each adopted thing should be, as if
    // recorded: the probe reports what differs from it.
    let mut asked: BTreeMap<String, RealizationRecord> = (records.iter())
        .filter(|(k, _)| targetless(k).is_some())
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let mut expected: BTreeMap<usize, Facts> = BTreeMap::new();
    for i in pending(spec, records) {
        let node = &spec.nodes[i];
        if node.target.is_none() {
            continue;
        }
        let Some(facts) = (plan.nodes.get(i))
            .and_then(|n| n.assessment.resolved.as_ref().ok())
            .and_then(|r| r.payload.adopt_facts())
        else {
            continue;
        };
        asked.insert(node.key.clone(), as_recorded(&node.key, &facts));
        expected.insert(i, facts);
    }
    if expected.is_empty() {
        return BTreeMap::new();
    }
    let seen = probe(
        &asked,
        hosts,
        conns,
        spec.secrets.as_deref(),
        environment,
        Reading::All,
    )
    .await;
    expected
        .into_iter()
        .map(|(i, facts)| {
            let key = &spec.nodes[i].key;
            let found = match (seen.unreachable.get(key), seen.drift.get(key)) {
                (Some(why), _) => Found::Unread { why: why.clone() },
                (None, Some(d)) if d.iter().any(|(fact, _, _)| fact == "exists") => {
                    Found::Absent { why: None }
                }
                (None, Some(d)) => Found::Differs {
                    differences: d.clone(),
                },
                (None, None) => Found::Same { facts },
            };
            (i, found)
        })
        .collect()
}

/// A record holding only `facts`, for the probe to compare against.
fn as_recorded(key: &str, facts: &Facts) -> RealizationRecord {
    RealizationRecord {
        resolved_hash: ResolvedHash::default(),
        target_identity: TargetIdentity::default(),
        node: key.to_string(),
        derivation: String::new(),
        attrs: BTreeMap::new(),
        facts: facts.clone(),
        output_hash: String::new(),
        created: false,
        run: String::new(),
        at_unix: 0,
        checks_hash: None,
        undo: None,
        adopted: true,
        content: None,
    }
}

/// Looks for every pending adoption of a machine where its `from` says, with its provider:
/// found running (logged in to, then the connection closed) or absent, and why. Nothing is
/// changed on the machine nor in the store.
pub async fn look_machines(
    spec: &Spec,
    plan: &Plan,
    records: &BTreeMap<String, RealizationRecord>,
    machines: &Machines,
    conns: &Connections,
) -> BTreeMap<usize, Found> {
    let mut out = BTreeMap::new();
    for i in pending(spec, records) {
        let node = &spec.nodes[i];
        let Some(line) = (spec.adoptions.get(&node.key)).filter(|_| node.target.is_none()) else {
            continue;
        };
        let Some(resolved) = (plan.nodes.get(i)).and_then(|n| n.assessment.resolved.as_ref().ok())
        else {
            continue;
        };
        let cx = Adopting {
            machines,
            ssh: &conns.ssh,
            tags: &node.tags,
            take: false,
        };
        let Some(finding) = resolved.payload.find_adopted(&line.from, cx) else {
            continue;
        };
        let found = match finding.await {
            Ok(a) => {
                a.transport.close().await;
                Found::Running {
                    facts: a.facts,
                    differences: a.differences,
                    how: a.how,
                }
            }
            Err(e) => Found::Absent {
                why: Some(match e.hint {
                    Some(h) => format!("{}; {h}", e.cause),
                    None => e.cause,
                }),
            },
        };
        out.insert(i, found);
    }
    out
}

/// The error of a node whose adopted thing is not on its target (or, a machine, not where
/// its `from` says: `why`).
pub fn absent_error(spec: &Spec, i: usize, why: Option<&str>) -> String {
    let node = &spec.nodes[i];
    let at = (spec.adoptions.get(&node.key)).map_or("", |a| a.location.as_str());
    if let Some(why) = why {
        return format!(
            "`{}` is adopted (line {at}), but it was not found: {why}",
            node.key
        );
    }
    let target = node.target.map_or("", |t| spec.nodes[t].name.as_str());
    format!(
        "`{}` is adopted (line {at}), but there is no such {} on `{target}`: create it there first, or remove the `adopt` line to let envc create it",
        node.key,
        node.kind.name()
    )
}

/// Marks the plan's nodes with pending adoptions `adopt`, with what was found as reasons.
pub fn mark(spec: &Spec, plan: &mut Plan, found: &BTreeMap<usize, Found>, pending: &[usize]) {
    for &i in pending {
        let Some(n) = plan.nodes.get_mut(i) else {
            continue;
        };
        if n.assessment.action != Action::Create {
            continue;
        }
        n.assessment.action = Action::Adopt;
        n.assessment.reasons = match found.get(&i) {
            Some(Found::Same { .. }) => {
                vec!["found as the source declares it: recorded as found, nothing changes".into()]
            }
            Some(Found::Differs { differences }) => {
                let mut r: Vec<String> = (differences.iter())
                    .map(|(fact, want, seen)| {
                        format!("{fact}: found {seen}, the source says {want}")
                    })
                    .collect();
                r.push("updated in place to what the source says (not created)".into());
                r
            }
            Some(Found::Absent { why }) => vec![absent_error(spec, i, why.as_deref())],
            Some(Found::Running {
                differences, how, ..
            }) => {
                let mut r = vec![format!(
                    "found running ({how}): taken over as it runs, nothing rebooted"
                )];
                r.extend((differences.iter()).map(|(fact, want, seen)| {
                    format!("{fact}: found {seen}, the source says {want} (kept as it is: adopting does not change a running machine)")
                }));
                r
            }
            Some(Found::Unread { why }) => {
                vec![format!(
                    "could not look at it now ({why}): compared at build"
                )]
            }
            None => vec!["compared with what is there when the build reaches it".into()],
        };
    }
}
