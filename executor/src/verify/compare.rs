//! The lab's records against production's, node by node and fact by fact. Pure: the
//! session gathers both sides (records, what probes of production found, what the checks
//! found) and this decides, for every fact, whether it is the same, an expected difference,
//! or a failure.
//!
//! A difference is expected only when it follows from the lab's own machines: the facts
//! that are a machine's identity or whereabouts (host keys, ssh ports, VM directories), and
//! facts derived from an attribute whose resolved value differs between the two sides —
//! the same source and lock compile to the same attributes everywhere, except where they
//! read a value of the lab's own machines (a template listing the hosts' addresses). What
//! production's targets hold that its records do not (a file edited by hand, another
//! package version) is never expected.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::checks::{CheckResult, Phase};
use crate::record::DriftFacts;
use crate::record::RealizationRecord;

/// One side's records, by node key.
pub type Records = BTreeMap<String, RealizationRecord>;

/// Everything the comparison reads.
pub struct Sides<'a> {
    /// The node keys of the graph, in its order.
    pub keys: &'a [String],
    pub production: &'a Records,
    /// What probes of production's targets found different from its records.
    pub drift: &'a BTreeMap<String, DriftFacts>,
    /// Production nodes that could not be probed, and why.
    pub unreachable: &'a BTreeMap<String, String>,
    /// Production's postconditions, run again now.
    pub production_checks: &'a BTreeMap<String, Vec<CheckResult>>,
    pub lab: &'a Records,
    /// Why a node has no record in the lab (its step failed or was skipped there).
    pub lab_failures: &'a BTreeMap<String, String>,
    /// What the lab's checks found when it was built.
    pub lab_checks: &'a BTreeMap<String, Vec<CheckResult>>,
    /// Hosts stood in for by a fresh VM from their base (by key); the lab's record of the
    /// VM is under the host's key. Every fact of such a node is the lab's own machine's.
    pub vm_stand_ins: &'a BTreeSet<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "why", rename_all = "lowercase")]
pub enum Verdict {
    Same,
    /// Follows from the lab's own machines; the reason says how.
    Expected(String),
    /// A failure; the reason says what it means.
    Differs(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FactComparison {
    pub fact: String,
    pub production: Option<String>,
    pub lab: Option<String>,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// How one node compares as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "why", rename_all = "snake_case")]
pub enum NodeStatus {
    /// Every fact is the same or an expected difference.
    Matches,
    /// At least one fact differs, or the lab could not realize it.
    Differs,
    /// Production could not be looked at: nothing was compared.
    Unchecked(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeComparison {
    pub node: String,
    #[serde(flatten)]
    pub status: NodeStatus,
    /// Every fact of either side (checks as `check FILE:LINE:COL`).
    pub facts: Vec<FactComparison>,
}

impl NodeComparison {
    pub fn differences(&self) -> impl Iterator<Item = &FactComparison> {
        self.facts
            .iter()
            .filter(|f| matches!(f.verdict, Verdict::Differs(_)))
    }
}

/// The kind's type of a node key (`target/kind:name` or `kind:name`).
fn type_of(key: &str) -> Option<&'static dyn crate::kinds::node_type::NodeType> {
    key.parse::<envc_ids::NodeKey>()
        .ok()
        .map(|k| crate::kinds::of(k.kind))
}

/// The attribute a fact is derived from, when it is not the fact's own name.
fn source_attr(fact: &str) -> &str {
    match fact {
        envc_ids::fact::content::SHA256 | "size" => "content",
        other => other,
    }
}

pub fn compare(sides: &Sides<'_>) -> Vec<NodeComparison> {
    sides
        .keys
        .iter()
        .map(|key| compare_node(sides, key))
        .collect()
}

fn compare_node(sides: &Sides<'_>, key: &str) -> NodeComparison {
    let node = key.to_string();
    let differs = |fact: &str, production: Option<&String>, lab: Option<&String>, why: String| {
        FactComparison {
            fact: fact.to_string(),
            production: production.cloned(),
            lab: lab.cloned(),
            verdict: Verdict::Differs(why),
        }
    };
    let Some(prod) = sides.production.get(key) else {
        let fact = differs(
            "built",
            None,
            sides.lab.get(key).map(|_| "yes".to_string()).as_ref(),
            "production has no record of it: it was never built there".into(),
        );
        return NodeComparison {
            node,
            status: NodeStatus::Differs,
            facts: vec![fact],
        };
    };
    if let Some(why) = sides.unreachable.get(key) {
        return NodeComparison {
            node,
            status: NodeStatus::Unchecked(why.clone()),
            facts: Vec::new(),
        };
    }
    let Some(lab) = sides.lab.get(key) else {
        let why = sides
            .lab_failures
            .get(key)
            .cloned()
            .unwrap_or_else(|| "it has no record in the lab".into());
        let fact = differs(
            "built",
            Some(&"yes".to_string()),
            None,
            format!("the lab could not realize it: {why}"),
        );
        return NodeComparison {
            node,
            status: NodeStatus::Differs,
            facts: vec![fact],
        };
    };
    let drift: BTreeMap<&str, (&String, &String)> = sides
        .drift
        .get(key)
        .map(|d| {
            d.iter()
                .map(|(f, was, now)| (f.as_str(), (was, now)))
                .collect()
        })
        .unwrap_or_default();
    let changed_attrs: BTreeSet<&str> = prod
        .attrs
        .iter()
        .filter(|(k, v)| lab.attrs.get(*k) != Some(*v))
        .map(|(k, _)| k.as_str())
        .chain(
            lab.attrs
                .keys()
                .filter(|k| !prod.attrs.contains_key(*k))
                .map(String::as_str),
        )
        .collect();
    let names: BTreeSet<&str> = prod
        .facts
        .keys()
        .chain(lab.facts.keys())
        .map(String::as_str)
        .chain(drift.keys().copied())
        .collect();
    let mut facts = Vec::new();
    for name in names {
        let recorded = prod.facts.get(name);
        let lab_value = lab.facts.get(name);
        if let Some((was, now)) = drift.get(name) {
            facts.push(differs(
                name,
                Some(now),
                lab_value,
                format!("production's target changed since envc wrote it (its record says {was})"),
            ));
            continue;
        }
        let verdict = if recorded == lab_value {
            Verdict::Same
        } else if sides.vm_stand_ins.contains(key) {
            Verdict::Expected("the lab's own machine: a fresh VM from the host's base".into())
        } else if type_of(key).is_some_and(|t| t.identity_facts().contains(&name)) {
            Verdict::Expected("the lab's own machine".into())
        } else if type_of(key).is_some_and(|t| t.run_facts().contains(&name))
            && !changed_attrs.is_empty()
        {
            // A command's run and output follow from all of what it runs with.
            Verdict::Expected(format!(
                "the command ran with values of the lab's own machines (its {})",
                changed_attrs
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        } else if changed_attrs.contains(source_attr(name)) {
            Verdict::Expected(format!(
                "its `{}` reads values of the lab's own machines",
                source_attr(name)
            ))
        } else {
            Verdict::Differs("the same source and lock realized something else".into())
        };
        facts.push(FactComparison {
            fact: name.to_string(),
            production: recorded.cloned(),
            lab: lab_value.cloned(),
            verdict,
        });
    }
    facts.extend(compare_checks(
        sides.production_checks.get(key),
        sides.lab_checks.get(key),
    ));
    let status = if facts
        .iter()
        .any(|f| matches!(f.verdict, Verdict::Differs(_)))
    {
        NodeStatus::Differs
    } else {
        NodeStatus::Matches
    };
    NodeComparison {
        node,
        status,
        facts,
    }
}

/// Postconditions by where they were written: whether each holds on both sides. Outputs
/// are not compared (they name the lab's own addresses and times).
fn compare_checks(
    production: Option<&Vec<CheckResult>>,
    lab: Option<&Vec<CheckResult>>,
) -> Vec<FactComparison> {
    fn by_location(rs: Option<&Vec<CheckResult>>) -> BTreeMap<String, &CheckResult> {
        rs.into_iter()
            .flatten()
            .filter(|r| r.phase == Phase::Expect)
            .map(|r| (r.location.clone(), r))
            .collect()
    }
    let (prod, lab) = (by_location(production), by_location(lab));
    let held = |r: Option<&&CheckResult>| {
        r.map(|r| match r.ok {
            true => "holds".to_string(),
            false => format!("does not hold: {}", last_line(&r.output)),
        })
    };
    let locations: BTreeSet<&String> = prod.keys().chain(lab.keys()).collect();
    locations
        .into_iter()
        .map(|loc| {
            let (p, l) = (prod.get(loc), lab.get(loc));
            let verdict = match (p.map(|r| r.ok), l.map(|r| r.ok)) {
                (Some(true), Some(true)) => Verdict::Same,
                (Some(false), _) => Verdict::Differs(format!(
                    "`{}` does not hold in production",
                    p.map_or("", |r| r.check.as_str())
                )),
                (_, Some(false)) => Verdict::Differs(format!(
                    "`{}` does not hold in the lab",
                    l.map_or("", |r| r.check.as_str())
                )),
                // Ran on one side only (a node whose checks could not run): not a pass.
                _ => Verdict::Differs("it ran on one side only".into()),
            };
            FactComparison {
                fact: format!("check {loc}"),
                production: held(p),
                lab: held(l),
                verdict,
            }
        })
        .collect()
}

fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Facts;

    fn record(key: &str, attrs: &[(&str, &str)], facts: &[(&str, &str)]) -> RealizationRecord {
        let map = |xs: &[(&str, &str)]| -> BTreeMap<String, String> {
            xs.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let facts: Facts = map(facts);
        RealizationRecord {
            resolved_hash: "r".into(),
            target_identity: "t".into(),
            node: key.into(),
            derivation: "d".into(),
            attrs: map(attrs),
            output_hash: crate::record::output_hash(&facts),
            facts,
            created: true,
            run: "run".into(),
            at_unix: 0,
            checks_hash: None,
            undo: None,
            adopted: false,
            content: None,
        }
    }

    fn check_result(location: &str, ok: bool, output: &str) -> CheckResult {
        CheckResult {
            check: "tcp(80)".into(),
            phase: Phase::Expect,
            location: location.into(),
            ok,
            output: output.into(),
            attempts: 1,
            duration_ms: 1,
        }
    }

    /// One side's state, written compactly.
    #[derive(Default)]
    struct Side {
        records: Records,
        checks: BTreeMap<String, Vec<CheckResult>>,
        vm_stand_ins: BTreeSet<String>,
    }

    impl Side {
        fn node(mut self, key: &str, attrs: &[(&str, &str)], facts: &[(&str, &str)]) -> Side {
            self.records.insert(key.into(), record(key, attrs, facts));
            self
        }
        /// The lab's record of the VM that stood in for host `key`, under the host's key.
        fn vm_stand_in(mut self, key: &str, facts: &[(&str, &str)]) -> Side {
            self.vm_stand_ins.insert(key.into());
            self.node(key, &[("image", "i")], facts)
        }
        fn check(mut self, key: &str, location: &str, ok: bool) -> Side {
            let out = if ok { "" } else { "connection refused\n" };
            self.checks
                .entry(key.into())
                .or_default()
                .push(check_result(location, ok, out));
            self
        }
    }

    /// Every fact that is not the same, as `node fact: verdict (production → lab)`, and the
    /// node statuses.
    fn check(
        production: Side,
        lab: Side,
        drift: &[(&str, &str, &str, &str)],
        unreachable: &[&str],
        lab_failures: &[(&str, &str)],
        expected: &[&str],
    ) {
        let keys: Vec<String> = production
            .records
            .keys()
            .chain(lab.records.keys())
            .chain(
                lab_failures
                    .iter()
                    .map(|(k, _)| k)
                    .copied()
                    .map(String::from)
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut d: BTreeMap<String, DriftFacts> = BTreeMap::new();
        for (k, f, was, now) in drift {
            d.entry(k.to_string()).or_default().push((
                f.to_string(),
                was.to_string(),
                now.to_string(),
            ));
        }
        let unreachable: BTreeMap<String, String> = unreachable
            .iter()
            .map(|k| (k.to_string(), "connection refused".to_string()))
            .collect();
        let lab_failures: BTreeMap<String, String> = lab_failures
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = compare(&Sides {
            keys: &keys,
            production: &production.records,
            drift: &d,
            unreachable: &unreachable,
            production_checks: &production.checks,
            lab: &lab.records,
            lab_failures: &lab_failures,
            lab_checks: &lab.checks,
            vm_stand_ins: &lab.vm_stand_ins,
        });
        let mut lines = Vec::new();
        for n in &out {
            lines.push(format!("{}: {:?}", n.node, n.status));
            for f in &n.facts {
                let (word, why) = match &f.verdict {
                    Verdict::Same => continue,
                    Verdict::Expected(w) => ("expected", w),
                    Verdict::Differs(w) => ("DIFFERS", w),
                };
                lines.push(format!(
                    "  {} {word}: {} → {} ({why})",
                    f.fact,
                    f.production.as_deref().unwrap_or("-"),
                    f.lab.as_deref().unwrap_or("-")
                ));
            }
        }
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
    }

    #[test]
    fn the_same_realization_on_other_machines_matches() {
        let prod = Side::default()
            .node(
                "host:web",
                &[("address", "\"10.0.0.1\"")],
                &[("host_key", "k1"), ("fingerprint", "f1")],
            )
            .node(
                "web/file:/etc/a",
                &[("content", "blake3:aa"), ("mode", "\"0o644\"")],
                &[("sha256", "s1"), ("mode", "0644")],
            )
            .check("web/file:/etc/a", "a.env:3:1", true);
        let lab = Side::default()
            .node(
                "host:web",
                &[("address", "\"10.9.0.1\"")],
                &[("host_key", "k2"), ("fingerprint", "f2")],
            )
            .node(
                "web/file:/etc/a",
                &[("content", "blake3:aa"), ("mode", "\"0o644\"")],
                &[("sha256", "s1"), ("mode", "0644")],
            )
            .check("web/file:/etc/a", "a.env:3:1", true);
        check(
            prod,
            lab,
            &[],
            &[],
            &[],
            &[
                "host:web: Matches",
                "  fingerprint expected: f1 → f2 (the lab's own machine)",
                "  host_key expected: k1 → k2 (the lab's own machine)",
                "web/file:/etc/a: Matches",
            ],
        );
    }

    #[test]
    fn content_rendered_from_the_labs_addresses_is_expected_to_differ() {
        let prod = Side::default().node(
            "web/file:/etc/peers",
            &[("content", "blake3:aa"), ("mode", "\"0o644\"")],
            &[("sha256", "s1"), ("mode", "0644")],
        );
        let lab = Side::default().node(
            "web/file:/etc/peers",
            &[("content", "blake3:bb"), ("mode", "\"0o644\"")],
            &[("sha256", "s2"), ("mode", "0644")],
        );
        check(
            prod,
            lab,
            &[],
            &[],
            &[],
            &[
                "web/file:/etc/peers: Matches",
                "  sha256 expected: s1 → s2 (its `content` reads values of the lab's own machines)",
            ],
        );
    }

    #[test]
    fn a_command_is_expected_to_differ_only_where_what_it_ran_with_did() {
        let prod = Side::default()
            .node(
                "web/exec:join",
                &[("argv", "[\"join\",\"10.0.0.1\"]")],
                &[("ran", "yes"), ("inputs", "h1"), ("stdout", "token-1")],
            )
            .node(
                "web/exec:migrate",
                &[("argv", "[\"migrate\"]")],
                &[("ran", "yes"), ("inputs", "h2"), ("stdout", "done")],
            );
        let lab = Side::default()
            .node(
                "web/exec:join",
                &[("argv", "[\"join\",\"10.9.0.1\"]")],
                &[("ran", "yes"), ("inputs", "h3"), ("stdout", "token-2")],
            )
            .node(
                "web/exec:migrate",
                &[("argv", "[\"migrate\"]")],
                &[("ran", "yes"), ("inputs", "h2"), ("stdout", "failed half")],
            );
        check(
            prod,
            lab,
            &[],
            &[],
            &[],
            &[
                "web/exec:join: Matches",
                "  inputs expected: h1 → h3 (the command ran with values of the lab's own machines (its `argv`))",
                "  stdout expected: token-1 → token-2 (the command ran with values of the lab's own machines (its `argv`))",
                "web/exec:migrate: Differs",
                "  stdout DIFFERS: done → failed half (the same source and lock realized something else)",
            ],
        );
    }

    #[test]
    fn a_fact_whose_inputs_are_the_same_must_be_the_same() {
        // Same pinned version asked for, another installed: not explained by the lab.
        let prod = Side::default().node(
            "web/package:nginx",
            &[("version", "\"1.22\"")],
            &[("version", "1.22")],
        );
        let lab = Side::default().node(
            "web/package:nginx",
            &[("version", "\"1.22\"")],
            &[("version", "1.24")],
        );
        check(
            prod,
            lab,
            &[],
            &[],
            &[],
            &[
                "web/package:nginx: Differs",
                "  version DIFFERS: 1.22 → 1.24 (the same source and lock realized something else)",
            ],
        );
    }

    #[test]
    fn what_a_probe_found_changed_in_production_differs_even_where_content_may() {
        let prod = Side::default().node(
            "web/file:/etc/peers",
            &[("content", "blake3:aa")],
            &[("sha256", "s1"), ("mode", "0644")],
        );
        let lab = Side::default().node(
            "web/file:/etc/peers",
            &[("content", "blake3:bb")],
            &[("sha256", "s2"), ("mode", "0644")],
        );
        check(prod, lab, &[("web/file:/etc/peers", "sha256", "s1", "s9")], &[], &[], &[
            "web/file:/etc/peers: Differs",
            "  sha256 DIFFERS: s9 → s2 (production's target changed since envc wrote it (its record says s1))",
        ]);
        // A file deleted by hand: the probe's `exists` fact.
        let prod = Side::default().node(
            "web/file:/etc/a",
            &[("content", "blake3:aa")],
            &[("sha256", "s1")],
        );
        let lab = Side::default().node(
            "web/file:/etc/a",
            &[("content", "blake3:aa")],
            &[("sha256", "s1")],
        );
        check(prod, lab, &[("web/file:/etc/a", "exists", "yes", "no")], &[], &[], &[
            "web/file:/etc/a: Differs",
            "  exists DIFFERS: no → - (production's target changed since envc wrote it (its record says yes))",
        ]);
    }

    #[test]
    fn what_the_lab_could_not_build_or_production_never_built_differs() {
        let prod = Side::default().node("web/service:nginx", &[], &[("active", "active")]);
        check(prod, Side::default(), &[], &[], &[("web/service:nginx", "failed: unit nginx.service not found")], &[
            "web/service:nginx: Differs",
            "  built DIFFERS: yes → - (the lab could not realize it: failed: unit nginx.service not found)",
        ]);
        let lab = Side::default().node("web/service:nginx", &[], &[("active", "active")]);
        check(Side::default(), lab, &[], &[], &[], &[
            "web/service:nginx: Differs",
            "  built DIFFERS: - → yes (production has no record of it: it was never built there)",
        ]);
    }

    #[test]
    fn an_unreachable_production_target_is_not_compared() {
        let prod = Side::default().node("web/file:/etc/a", &[], &[("sha256", "s1")]);
        let lab = Side::default().node("web/file:/etc/a", &[], &[("sha256", "s2")]);
        check(
            prod,
            lab,
            &[],
            &["web/file:/etc/a"],
            &[],
            &["web/file:/etc/a: Unchecked(\"connection refused\")"],
        );
    }

    #[test]
    fn a_postcondition_must_hold_on_both_sides() {
        let node = |s: Side| s.node("web/service:nginx", &[], &[("active", "active")]);
        let prod = node(Side::default()).check("web/service:nginx", "a.env:9:5", false);
        let lab = node(Side::default()).check("web/service:nginx", "a.env:9:5", true);
        check(prod, lab, &[], &[], &[], &[
            "web/service:nginx: Differs",
            "  check a.env:9:5 DIFFERS: does not hold: connection refused → holds (`tcp(80)` does not hold in production)",
        ]);
    }

    #[test]
    fn a_vms_whereabouts_are_its_own_but_its_private_address_is_not() {
        let vm = |port: &str, address: &str| {
            Side::default().node(
                "vm:web",
                &[("image", "i")],
                &[
                    ("address", address),
                    ("port", port),
                    ("dir", "/x"),
                    ("user", "root"),
                ],
            )
        };
        check(vm("2201", "10.89.0.10"), vm("2299", "10.89.0.11"), &[], &[], &[], &[
            "vm:web: Differs",
            "  address DIFFERS: 10.89.0.10 → 10.89.0.11 (the same source and lock realized something else)",
            "  port expected: 2201 → 2299 (the lab's own machine)",
        ]);
    }

    #[test]
    fn a_host_stood_in_for_by_a_vm_is_the_labs_own_machine_and_what_is_on_it_is_compared() {
        let prod = Side::default()
            .node(
                "host:web",
                &[("address", "\"10.0.0.1\"")],
                &[("host_key", "k1")],
            )
            .node(
                "web/file:/etc/a",
                &[("content", "blake3:aa")],
                &[("sha256", "s1")],
            );
        let lab = Side::default()
            .vm_stand_in(
                "host:web",
                &[
                    ("address", "10.89.0.10"),
                    ("port", "2299"),
                    ("host_key", "k9"),
                ],
            )
            .node(
                "web/file:/etc/a",
                &[("content", "blake3:aa")],
                &[("sha256", "s2")],
            );
        let why = "the lab's own machine: a fresh VM from the host's base";
        check(
            prod,
            lab,
            &[],
            &[],
            &[],
            &[
                "host:web: Matches",
                &format!("  address expected: - → 10.89.0.10 ({why})"),
                &format!("  host_key expected: k1 → k9 ({why})"),
                &format!("  port expected: - → 2299 ({why})"),
                "web/file:/etc/a: Differs",
                "  sha256 DIFFERS: s1 → s2 (the same source and lock realized something else)",
            ],
        );
    }
}
