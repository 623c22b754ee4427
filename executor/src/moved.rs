//! `moved` declarations in the state (issue 37): before a plan or a build, the records of
//! each renamed node are taken under its new key (`Spec::moved`: the node a `moved` line
//! names, and everything on a moved machine). A carried record keeps its old `node` field,
//! which is how `plan::assess` knows it was carried and compares the node with it as it
//! was before the rename (`resolve::resolve_as_before`): `moved` when only the names
//! changed, an update with its reasons otherwise. The build writes the record under its
//! new key with its new hash; the old key leaves the state, and the history keeps it.

use std::collections::{BTreeMap, BTreeSet};

use envc_ids::NodeKey;

use crate::record::RealizationRecord;
use crate::spec::Spec;

/// A `moved` line refused against the state (`moved::target-exists`): its new key (or, for
/// a machine, a key on it) has records of its own while the old key has some too. Carrying
/// would keep one and leave the other to be deleted, so nothing of the line is carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The line, as written: old key, new key.
    pub from: String,
    pub to: String,
    /// The new keys that have records of their own.
    pub taken: Vec<String>,
}

/// The line of `spec.moves` that moves `key` (its new key): the line naming it, or the
/// line of the machine it is on.
fn line_of(spec: &Spec, key: &str) -> Option<usize> {
    (spec.moves.iter().position(|(_, to)| to == key)).or_else(|| {
        let target = key.parse::<NodeKey>().ok()?.target?;
        spec.moves.iter().position(|(_, to)| {
            to.parse::<NodeKey>()
                .is_ok_and(|k| k.kind.is_target() && k.target.is_none() && k.name == target)
        })
    })
}

/// Every record the lines carry: (old key, new key, line). The nodes `Spec::moved` names,
/// and what is recorded on a moved machine that left the source (`r/file:…` when the
/// source has `moved "host:r" -> "host:s"` and no such file any more): it follows its
/// machine to `s/file:…`, where it is deleted as anything that left the source is, on the
/// machine that is still there, as `terraform state mv` carries a resource's children.
fn carried<'k>(
    spec: &Spec,
    recorded: impl Iterator<Item = &'k String>,
) -> Vec<(String, String, usize)> {
    let mut out: Vec<(String, String, usize)> = (spec.moved.iter())
        .filter_map(|(i, m)| {
            let key = &spec.nodes.get(*i)?.key;
            Some((m.key.clone(), key.clone(), line_of(spec, key)?))
        })
        .collect();
    let claimed: BTreeSet<String> = out.iter().map(|(old, _, _)| old.clone()).collect();
    let machines: Vec<(String, String, usize)> = (spec.moves.iter().enumerate())
        .filter_map(|(l, (from, to))| {
            let (from, to) = (from.parse::<NodeKey>().ok()?, to.parse::<NodeKey>().ok()?);
            (from.kind.is_target() && from.target.is_none() && to.target.is_none())
                .then_some((from.name, to.name, l))
        })
        .collect();
    if machines.is_empty() {
        return out;
    }
    let recorded: BTreeSet<&String> = recorded.collect();
    for key in recorded {
        if claimed.contains(key) {
            continue;
        }
        let Ok(mut k) = key.parse::<NodeKey>() else {
            continue;
        };
        let Some((_, to, l)) =
            (machines.iter()).find(|(from, _, _)| k.target.as_ref() == Some(from))
        else {
            continue;
        };
        k.target = Some(to.clone());
        out.push((key.clone(), k.to_string(), *l));
    }
    out
}

/// The `moved` lines whose new keys have records of their own beside the old keys' (the
/// VM it renames was created under its new name too): `plan` and `build` refuse them.
pub fn conflicts<R, I>(
    spec: &Spec,
    records: &BTreeMap<String, R>,
    intents: &BTreeMap<String, I>,
) -> Vec<Conflict> {
    let has = |k: &str| records.contains_key(k) || intents.contains_key(k);
    let mut taken: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (old, new, l) in carried(spec, records.keys().chain(intents.keys())) {
        if has(&old) && has(&new) {
            taken.entry(l).or_default().push(new);
        }
    }
    (taken.into_iter())
        .filter_map(|(l, mut taken)| {
            let (from, to) = spec.moves.get(l)?;
            taken.sort();
            taken.dedup();
            Some(Conflict {
                from: from.clone(),
                to: to.clone(),
                taken,
            })
        })
        .collect()
}

/// Takes each moved node's record (and intent) from its old key to its new one, with what
/// is recorded on a moved machine that left the source. A line with a [`Conflict`] carries
/// nothing (none of its records half-moved); those lines are returned.
pub fn carry<R, I>(
    spec: &Spec,
    records: &mut BTreeMap<String, R>,
    intents: &mut BTreeMap<String, I>,
) -> Vec<Conflict> {
    let refused = conflicts(spec, records, intents);
    let moves = carried(spec, records.keys().chain(intents.keys()));
    for (old, new, l) in moves {
        let line = spec.moves.get(l);
        if refused
            .iter()
            .any(|c| line.is_some_and(|(from, to)| &c.from == from && &c.to == to))
        {
            continue;
        }
        if records.contains_key(&new) || intents.contains_key(&new) {
            continue;
        }
        if let Some(r) = records.remove(&old) {
            records.insert(new.clone(), r);
        }
        if let Some(x) = intents.remove(&old) {
            intents.insert(new, x);
        }
    }
    refused
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

    /// A record names its node by its key, and holds what is said of it in `run`.
    fn record(k: &str, v: &str) -> RealizationRecord {
        RealizationRecord {
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
        }
    }

    /// Records before as (key, what it holds); after as (key, the key the record names,
    /// what it holds); the notes.
    fn check(s: &Spec, before: &[(&str, &str)], after: &[(&str, &str, &str)], notes: &[&str]) {
        let mut records: BTreeMap<String, RealizationRecord> = before
            .iter()
            .map(|(k, v)| (k.to_string(), record(k, v)))
            .collect();
        let mut intents: BTreeMap<String, ()> = BTreeMap::new();
        let refused = carry(s, &mut records, &mut intents);
        assert_eq!(refused, conflicts(s, &records, &intents));
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
        // The new key's own record: the line is refused (`plan` and `build` say so), and
        // nothing of it is carried.
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

    /// Issue 60, item 2: `moved` onto a VM built under its new name too. Before, the VM's
    /// record stayed (and was deleted, with its disk) while a file on it was carried.
    #[test]
    fn a_line_onto_records_of_their_own_is_refused_whole() {
        let s = spec(
            &["vm:web-b", "web-b/file:/etc/motd", "web-b/file:/etc/issue"],
            &[
                (0, "vm:web-0"),
                (1, "web-0/file:/etc/motd"),
                (2, "web-0/file:/etc/issue"),
            ],
            &[("vm:web-0", "vm:web-b")],
        );
        let before = [
            ("vm:web-0", "old"),
            ("web-0/file:/etc/issue", "old issue"),
            ("vm:web-b", "new"),
            ("web-b/file:/etc/motd", "new motd"),
        ];
        let mut records: BTreeMap<String, RealizationRecord> = (before.iter())
            .map(|(k, v)| (k.to_string(), record(k, v)))
            .collect();
        let mut intents: BTreeMap<String, ()> = BTreeMap::new();
        let refused = carry(&s, &mut records, &mut intents);
        assert_eq!(
            refused,
            vec![Conflict {
                from: "vm:web-0".into(),
                to: "vm:web-b".into(),
                taken: vec!["vm:web-b".into()],
            }]
        );
        let keys: Vec<&str> = records.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "vm:web-0",
                "vm:web-b",
                "web-0/file:/etc/issue",
                "web-b/file:/etc/motd"
            ]
        );
        // Only a file on it recorded under both names: refused too, named.
        let mut records: BTreeMap<String, RealizationRecord> = [
            ("vm:web-0", "old"),
            ("web-0/file:/etc/motd", "old motd"),
            ("web-b/file:/etc/motd", "new motd"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), record(k, v)))
        .collect();
        let refused = carry(&s, &mut records, &mut intents);
        assert_eq!(refused[0].taken, ["web-b/file:/etc/motd"]);
        assert!(records.contains_key("vm:web-0"));
    }

    /// Issue 59, item 3: what was on a renamed machine and left the source follows the
    /// machine (`r/...` to `s/...`), so it is deleted on the machine that is still there
    /// instead of on `r`, of which no address is known any more.
    #[test]
    fn what_left_the_source_follows_its_renamed_machine() {
        let s = spec(
            &["host:s", "s/file:/etc/motd", "vm:other"],
            &[(0, "host:r"), (1, "r/file:/etc/motd")],
            &[("host:r", "host:s")],
        );
        check(
            &s,
            &[
                ("host:r", "host"),
                ("r/file:/etc/motd", "motd"),
                ("r/file:/etc/issue", "issue"),
                ("r/exec:init", "init"),
                ("rr/exec:init", "another machine"),
                ("vm:other", "other"),
            ],
            &[
                ("host:s", "host:r", "host"),
                ("rr/exec:init", "rr/exec:init", "another machine"),
                ("s/exec:init", "r/exec:init", "init"),
                ("s/file:/etc/issue", "r/file:/etc/issue", "issue"),
                ("s/file:/etc/motd", "r/file:/etc/motd", "motd"),
                ("vm:other", "vm:other", "other"),
            ],
            &[],
        );
        // Leaving the source, each is deleted under the key it is live under: on `s`.
        let mut records: BTreeMap<String, RealizationRecord> =
            [("host:r", "host"), ("r/exec:init", "init")]
                .iter()
                .map(|(k, v)| (k.to_string(), record(k, v)))
                .collect();
        let mut intents = BTreeMap::new();
        carry(&s, &mut records, &mut intents);
        let in_graph = |k: &str| s.nodes.iter().any(|n| n.key == k);
        let gone: Vec<String> = crate::record::leaving(&in_graph, &records, &intents)
            .into_iter()
            .map(|r| r.node)
            .collect();
        assert_eq!(gone, ["s/exec:init"]);
    }
}
