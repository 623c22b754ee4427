//! `moved` declarations in the state (issue 37): before a plan or a build, the records of
//! each renamed node are taken under its new key (`Spec::moved`: the node a `moved` line
//! names, and everything on a moved machine). A carried record keeps its old `node` field,
//! which is how `plan::assess` knows it was carried and compares the node with it as it
//! was before the rename (`resolve::resolve_as_before`): `moved` when only the names
//! changed, an update with its reasons otherwise. The build writes the record under its
//! new key with its new hash; the old key leaves the state, and the history keeps it.

use std::collections::BTreeMap;

use crate::record::RealizationRecord;
use crate::spec::Spec;

/// Takes each moved node's record (and intent) from its old key to its new one, unless
/// the new key has its own.
pub fn carry<R, I>(
    spec: &Spec,
    records: &mut BTreeMap<String, R>,
    intents: &mut BTreeMap<String, I>,
) {
    for (i, m) in &spec.moved {
        let Some(key) = spec.nodes.get(*i).map(|n| &n.key) else {
            continue;
        };
        if records.contains_key(key) || intents.contains_key(key) {
            continue;
        }
        if let Some(r) = records.remove(&m.key) {
            records.insert(key.clone(), r);
        }
        if let Some(x) = intents.remove(&m.key) {
            intents.insert(key.clone(), x);
        }
    }
}

/// What a person should hear once the records are carried: each `moved` line under whose
/// old key nothing is recorded (never built, or carried by an earlier build: no record
/// still names it, as a carried one does until its build writes it anew).
pub fn stale(spec: &Spec, records: &BTreeMap<String, RealizationRecord>) -> Vec<String> {
    (spec.moves.iter())
        .filter(|(from, _)| !records.values().any(|r| &r.node == from))
        .map(|(from, to)| {
            format!("moved {from} -> {to}: nothing recorded under {from}; this line can go")
        })
        .collect()
}

/// The record of a moved node under its new key: what its rename changed (key, resolved
/// hash, shown attributes, derivation), with the facts its kind reports after following
/// the rename (a QEMU VM's directory).
pub fn rekeyed(
    old: &RealizationRecord,
    key: &str,
    derivation: &str,
    resolved: &crate::resolve::Resolved,
    facts: crate::record::Facts,
    run: &str,
    at_unix: u64,
) -> RealizationRecord {
    RealizationRecord {
        resolved_hash: resolved.hash.clone(),
        node: key.to_string(),
        derivation: derivation.to_string(),
        attrs: resolved.display.clone(),
        output_hash: crate::record::output_hash(&facts),
        facts,
        run: run.to_string(),
        at_unix,
        ..old.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::spec::MovedFrom;

    fn spec(keys: &[&str], moved: &[(usize, &str)], moves: &[(&str, &str)]) -> Spec {
        Spec {
            nodes: keys
                .iter()
                .map(|k| crate::spec::NodeSpec {
                    id: String::new(),
                    kind: k.parse::<envc_ids::NodeKey>().unwrap().kind,
                    name: String::new(),
                    target: None,
                    attrs: BTreeMap::new(),
                    inputs: Vec::new(),
                    pins: BTreeMap::new(),
                    key: k.to_string(),
                    checks: Vec::new(),
                    base: None,
                    stands_in: false,
                    tags: BTreeMap::new(),
                    rollback: true,
                })
                .collect(),
            moved: moved
                .iter()
                .map(|(i, k)| {
                    (
                        *i,
                        MovedFrom {
                            key: k.to_string(),
                            name: String::new(),
                        },
                    )
                })
                .collect(),
            moves: moves
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            ..Spec::default()
        }
    }

    /// Records before as (key, what it holds); after as (key, the key the record names,
    /// what it holds); the notes.
    fn check(s: &Spec, before: &[(&str, &str)], after: &[(&str, &str, &str)], notes: &[&str]) {
        // A record names its node by its key, and holds what is said of it in `run`.
        let record = |k: &str, v: &str| RealizationRecord {
            resolved_hash: Default::default(),
            target_identity: Default::default(),
            node: k.to_string(),
            derivation: String::new(),
            attrs: BTreeMap::new(),
            facts: BTreeMap::new(),
            output_hash: String::new(),
            created: true,
            run: v.to_string(),
            at_unix: 0,
            checks_hash: None,
            undo: None,
            adopted: false,
            content: None,
        };
        let mut records: BTreeMap<String, RealizationRecord> = before
            .iter()
            .map(|(k, v)| (k.to_string(), record(k, v)))
            .collect();
        let mut intents: BTreeMap<String, ()> = BTreeMap::new();
        carry(s, &mut records, &mut intents);
        let got: Vec<(String, String, String)> = (records.iter())
            .map(|(k, r)| (k.clone(), r.node.clone(), r.run.clone()))
            .collect();
        let after: Vec<(String, String, String)> = after
            .iter()
            .map(|(k, from, v)| (k.to_string(), from.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, after);
        assert_eq!(stale(s, &records), notes);
    }

    #[test]
    fn records_follow_their_nodes_and_stale_lines_are_named() {
        let s = spec(
            &["vm:web-a", "web-a/file:/etc/motd", "vm:db"],
            &[(0, "vm:web-0"), (1, "web-0/file:/etc/motd")],
            &[("vm:web-0", "vm:web-a")],
        );
        // The VM and what is on it, each still naming its old key until built.
        check(
            &s,
            &[
                ("vm:web-0", "vm"),
                ("web-0/file:/etc/motd", "motd"),
                ("vm:db", "db"),
            ],
            &[
                ("vm:db", "vm:db", "db"),
                ("vm:web-a", "vm:web-0", "vm"),
                ("web-a/file:/etc/motd", "web-0/file:/etc/motd", "motd"),
            ],
            &[],
        );
        // Carried and written anew by a build: nothing to do, and the line can go.
        check(
            &s,
            &[("vm:web-a", "vm"), ("web-a/file:/etc/motd", "motd")],
            &[
                ("vm:web-a", "vm:web-a", "vm"),
                ("web-a/file:/etc/motd", "web-a/file:/etc/motd", "motd"),
            ],
            &["moved vm:web-0 -> vm:web-a: nothing recorded under vm:web-0; this line can go"],
        );
        // The new key's own record wins; the old one leaves as any removed node does.
        check(
            &s,
            &[("vm:web-0", "old"), ("vm:web-a", "new")],
            &[
                ("vm:web-0", "vm:web-0", "old"),
                ("vm:web-a", "vm:web-a", "new"),
            ],
            &[],
        );
    }
}
