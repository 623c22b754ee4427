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
/// the new key has its own. Returns what a person should hear: each `moved` line under
/// whose old key nothing is recorded (never built, or carried by an earlier build).
pub fn carry<R, I>(
    spec: &Spec,
    records: &mut BTreeMap<String, R>,
    intents: &mut BTreeMap<String, I>,
) -> Vec<String> {
    let unrecorded: Vec<String> = (spec.moves.iter())
        .filter(|(from, _)| !records.contains_key(from) && !intents.contains_key(from))
        .map(|(from, to)| {
            format!("moved {from} -> {to}: nothing recorded under {from}; this line can go")
        })
        .collect();
    for (i, m) in &spec.moved {
        let key = &spec.nodes[*i].key;
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
    unrecorded
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

    /// (records before, records after as (key, what it held), notes).
    fn check(s: &Spec, before: &[(&str, &str)], after: &[(&str, &str)], notes: &[&str]) {
        let mut records: BTreeMap<String, String> = before
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut intents: BTreeMap<String, ()> = BTreeMap::new();
        let got = carry(s, &mut records, &mut intents);
        let after: BTreeMap<String, String> = after
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(records, after);
        assert_eq!(got, notes);
    }

    #[test]
    fn records_follow_their_nodes_and_stale_lines_are_named() {
        let s = spec(
            &["vm:web-a", "web-a/file:/etc/motd", "vm:db"],
            &[(0, "vm:web-0"), (1, "web-0/file:/etc/motd")],
            &[("vm:web-0", "vm:web-a")],
        );
        // The VM and what is on it.
        check(
            &s,
            &[
                ("vm:web-0", "vm"),
                ("web-0/file:/etc/motd", "motd"),
                ("vm:db", "db"),
            ],
            &[
                ("vm:web-a", "vm"),
                ("web-a/file:/etc/motd", "motd"),
                ("vm:db", "db"),
            ],
            &[],
        );
        // Carried already: nothing to do, and the line can go.
        check(
            &s,
            &[("vm:web-a", "vm"), ("web-a/file:/etc/motd", "motd")],
            &[("vm:web-a", "vm"), ("web-a/file:/etc/motd", "motd")],
            &["moved vm:web-0 -> vm:web-a: nothing recorded under vm:web-0; this line can go"],
        );
        // The new key's own record wins; the old one leaves as any removed node does.
        check(
            &s,
            &[("vm:web-0", "old"), ("vm:web-a", "new")],
            &[("vm:web-0", "old"), ("vm:web-a", "new")],
            &[],
        );
    }
}
