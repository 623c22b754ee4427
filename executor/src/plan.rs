//! Deciding what to do: for each node, resolve it against what is known of its inputs and
//! compare with its live record. The same decision serves `envc plan` (before anything
//! runs, with predicted outputs) and `envc build` (as inputs complete, with real ones).

use std::collections::BTreeMap;

use envc_compiler::SourceLoader;

use crate::kinds;
use crate::record::{leaving, DriftFacts, Intent, RealizationRecord};
use crate::resolve::{preview, resolve, resolve_as_before, Resolved};
use crate::spec::Spec;
use crate::substitute::{Known, Resolution};

pub use crate::record::Action;

/// What is known of one node before it runs.
#[derive(Clone, Debug)]
pub struct Assessment {
    pub action: Action,
    /// Why it changes, one line each: `mode: "0o644" → "0o600"`, `never built`.
    pub reasons: Vec<String>,
    pub resolved: Result<Resolved, Resolution>,
    /// The key its record was carried from by a `moved` declaration (`moved.rs`).
    pub moved_from: Option<String>,
}

/// Decides node `i`. `identity` is its target's identity (its own, for a host) when known;
/// `drift` holds what a probe found different from the record (`--refresh`).
pub fn assess<'a>(
    spec: &'a Spec,
    i: usize,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    record: Option<&RealizationRecord>,
    identity: Option<&str>,
    drift: Option<&DriftFacts>,
    files: &'a dyn SourceLoader,
) -> Assessment {
    let resolved = resolve(spec, i, known, files);
    let node = &spec.nodes[i];
    let Some(rec) = record else {
        return Assessment {
            action: Action::Create,
            reasons: vec!["not built yet".into()],
            resolved,
            moved_from: None,
        };
    };
    let mut reasons = Vec::new();
    // A renamed node whose record is the one it had under its old names.
    let moved_from = (rec.node != node.key).then_some(rec.node.as_str());
    match identity {
        Some(id) if rec.target_identity != id => reasons.push(format!(
            "new target: `{}` is now {id}, was {}",
            target_name(spec, i),
            rec.target_identity
        )),
        // Targets have their own identity; images are built where envc runs.
        None if node.target.is_some() => {
            reasons.push(format!("target `{}` not known yet", target_name(spec, i)));
        }
        _ => {}
    }
    if !reasons.is_empty() {
        return Assessment {
            action: Action::Create,
            reasons,
            resolved,
            moved_from: moved_from.map(str::to_string),
        };
    }
    let as_before = moved_from.is_some()
        && spec.moved.contains_key(&i)
        && resolve_as_before(spec, i, known, files).is_ok_and(|r| r.hash == rec.resolved_hash);
    match &resolved {
        Ok(r) if r.hash == rec.resolved_hash || as_before => {}
        Ok(r) => reasons.extend(attr_changes(&rec.attrs, &r.display)),
        Err(Resolution::Pending(j)) => reasons.push(format!(
            "depends on `{}`, which changes first",
            spec.nodes[*j].key
        )),
        Err(Resolution::Failed(_) | Resolution::Unread(_)) => {}
    }
    if let (true, Some(d)) = (reasons.is_empty(), drift) {
        reasons.extend(drift_reasons(d));
    }
    let action = if reasons.is_empty() && resolved.is_ok() {
        match resolved.as_ref().map(|r| check_changes(spec, r, rec)) {
            Ok(Some(why)) => {
                reasons.push(why);
                Action::Check
            }
            _ if moved_from.is_some() => Action::Moved,
            _ => Action::Unchanged,
        }
    } else {
        if reasons.is_empty() {
            reasons.push("changed".into());
        }
        let same = matches!(&resolved, Ok(r) if r.hash == rec.resolved_hash) || as_before;
        let new = resolved.as_ref().ok().map(|r| &r.display);
        let kind = kinds::of(node.kind);
        if !same && kind.replaced_by(&rec.attrs, new) {
            Action::Replace
        } else {
            if let Some(note) = new.and_then(|n| kind.update_note(&rec.attrs, n)) {
                reasons.push(note.to_string());
            }
            Action::Update
        }
    };
    if let Some(from) = moved_from {
        reasons.insert(0, format!("moved from `{from}`"));
    }
    Assessment {
        action,
        reasons,
        resolved,
        moved_from: moved_from.map(str::to_string),
    }
}

/// Why a node that is otherwise unchanged must run its postconditions again: they are not
/// the ones that held when it was recorded, or they read a node that changes first.
fn check_changes(spec: &Spec, r: &Resolved, rec: &RealizationRecord) -> Option<String> {
    match &r.checks {
        Ok(_) => {
            let now = r.checks_hash();
            if now.is_none() || now == rec.checks_hash {
                return None;
            }
            let was = rec.attrs.get("expect").map_or("(none)", String::as_str);
            let new = r.display.get("expect").map_or("(none)", String::as_str);
            Some(if was == new {
                "postconditions read values that changed".to_string()
            } else {
                format!("expect: {was} → {new}")
            })
        }
        Err(Resolution::Pending(j)) => Some(format!(
            "its checks read `{}`, which changes first",
            spec.nodes[*j].key
        )),
        Err(Resolution::Failed(_) | Resolution::Unread(_)) => None,
    }
}

/// What a probe found different from the record, one reason each.
fn drift_reasons(drift: &DriftFacts) -> impl Iterator<Item = String> + '_ {
    (drift.iter()).map(|(fact, was, now)| format!("drift: {fact} was {was}, found {now}"))
}

/// A node that uses a secret whose value is not at hand (a plan without it), decided from
/// what is known: unchanged when its source is the recorded derivation and nothing it
/// reads changes (only the secret's value could differ, and no plan without it can tell);
/// otherwise it changes, and the reasons say why and that its new hash waits for the value.
fn without_secret(
    spec: &Spec,
    i: usize,
    secret: &str,
    rec: &RealizationRecord,
    drift: Option<&DriftFacts>,
    mut a: Assessment,
    planned: &[PlannedNode],
) -> Assessment {
    let node = &spec.nodes[i];
    // A new target: created there, as assess said.
    if a.action == Action::Create {
        return a;
    }
    let mut reasons: Vec<String> = drift.into_iter().flat_map(drift_reasons).collect();
    if rec.derivation != node.id {
        reasons.push("its source changed".to_string());
    }
    let reads = node.inputs.iter().chain(node.target.as_ref());
    for &j in reads {
        if !matches!(
            planned[j].assessment.action,
            Action::Unchanged | Action::Check | Action::Moved
        ) {
            reasons.push(format!(
                "depends on `{}`, which changes first",
                spec.nodes[j].key
            ));
        }
    }
    let unread = format!("secret `{secret}` is not at hand");
    if reasons.is_empty() {
        a.action = Action::Unchanged;
        a.reasons = vec![format!(
            "{unread}: taken as unchanged, as its source and inputs are (a changed value shows at build)"
        )];
    } else {
        reasons.push(format!("{unread}: its new resolved hash is known at build"));
        let new = a.resolved.as_ref().ok().map(|r| &r.display);
        a.action = if kinds::of(node.kind).replaced_by(&rec.attrs, new) {
            Action::Replace
        } else {
            Action::Update
        };
        a.reasons = reasons;
    }
    a
}

fn target_name(spec: &Spec, i: usize) -> &str {
    let n = &spec.nodes[i];
    n.target.map_or(&n.name, |t| &spec.nodes[t].name)
}

/// One line per attribute that differs between a record and a new resolution.
pub fn attr_changes(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        match (old.get(k), new.get(k)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => out.push(format!("{k}: {a} → {b}")),
            (None, Some(b)) => out.push(format!("{k}: (unset) → {b}")),
            (Some(a), None) => out.push(format!("{k}: {a} → (unset)")),
            (None, None) => {}
        }
    }
    out
}

#[derive(Clone, Debug)]
pub struct PlannedNode {
    pub index: usize,
    pub assessment: Assessment,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub nodes: Vec<PlannedNode>,
    /// Live records whose node left the graph: (key, record).
    pub deletions: Vec<(String, RealizationRecord)>,
    /// Each Kubernetes object that waits for a value not known yet, resolved with that
    /// value's placeholder in its place (`envc render --preview`), by node index.
    pub previews: BTreeMap<usize, Resolved>,
}

impl Plan {
    pub fn counts(&self) -> BTreeMap<Action, usize> {
        let mut c = BTreeMap::new();
        for n in &self.nodes {
            *c.entry(n.assessment.action).or_default() += 1;
        }
        if !self.deletions.is_empty() {
            c.insert(Action::Delete, self.deletions.len());
        }
        c
    }

    pub fn has_changes(&self) -> bool {
        !self.deletions.is_empty()
            || self
                .nodes
                .iter()
                .any(|n| n.assessment.action != Action::Unchanged)
    }
}

/// The identity a node is recorded against, from the records: its target's `fingerprint`
/// fact, as the scheduler reads it (a machine's key; for a `gitops` node, the place in a
/// repository its objects go), or a target's own record's identity.
pub fn recorded_identity<'r>(
    spec: &Spec,
    i: usize,
    records: &'r BTreeMap<String, RealizationRecord>,
) -> Option<&'r str> {
    let r = match spec.nodes[i].target {
        Some(t) => records
            .get(&spec.nodes[t].key)?
            .facts
            .get(envc_ids::fact::machine::FINGERPRINT)?
            .as_str(),
        None => records.get(&spec.nodes[i].key)?.target_identity.as_str(),
    };
    Some(r)
}

/// The whole plan, from the live records (and, with `--refresh`, what probes found).
pub fn plan(
    spec: &Spec,
    records: &BTreeMap<String, RealizationRecord>,
    intents: &BTreeMap<String, Intent>,
    drift: &BTreeMap<String, DriftFacts>,
    files: &dyn SourceLoader,
) -> Plan {
    let mut known: Vec<Option<Known>> = vec![None; spec.nodes.len()];
    let mut nodes: Vec<PlannedNode> = Vec::with_capacity(spec.nodes.len());
    for i in 0..spec.nodes.len() {
        let key = &spec.nodes[i].key;
        let record = records.get(key);
        // A target that will be created or replaced is a new machine: nothing on it is
        // known to be there.
        let new_target = spec.nodes[i].target.is_some_and(|t| {
            matches!(nodes[t].assessment.action, Action::Create | Action::Replace)
        });
        let identity = if new_target {
            None
        } else {
            recorded_identity(spec, i, records)
        };
        let mut a = {
            let lookup = |j: usize| known[j].as_ref();
            assess(spec, i, &lookup, record, identity, drift.get(key), files)
        };
        if let (Err(Resolution::Unread(secret)), Some(rec)) = (&a.resolved, record) {
            let secret = secret.clone();
            a = without_secret(spec, i, &secret, rec, drift.get(key), a, &nodes);
        }
        known[i] = match (&a.action, record, &a.resolved) {
            (Action::Unchanged | Action::Check | Action::Moved, Some(r), _) => {
                Some(Known::of_record(r))
            }
            // Only drift (a stopped VM, an image gone from the store, an edited file):
            // redoing the same resolution gives what it gave before.
            (Action::Update, Some(r), Ok(res)) if res.hash == r.resolved_hash => {
                Some(Known::of_record(r))
            }
            // A host that moved is expected to be the same machine (a different key is
            // an error unless trusted anew), so what it reported stands.
            (Action::Update, Some(r), _) if kinds::of(spec.nodes[i].kind).update_keeps_facts() => {
                Some(Known::of_record(r))
            }
            (_, _, Ok(r)) => r.predicted_facts().map(Known::new),
            _ => None,
        };
        nodes.push(PlannedNode {
            index: i,
            assessment: a,
        });
    }
    let mut previews = BTreeMap::new();
    for n in &nodes {
        let i = n.index;
        if kinds::of(spec.nodes[i].kind).previewed()
            && matches!(n.assessment.resolved, Err(Resolution::Pending(_)))
        {
            let lookup = |j: usize| known[j].as_ref();
            if let Ok(r) = preview(spec, i, &lookup, files) {
                previews.insert(i, r);
            }
        }
    }
    let in_graph: std::collections::BTreeSet<&str> =
        spec.nodes.iter().map(|n| n.key.as_str()).collect();
    let stays =
        |k: &str| in_graph.contains(k) || spec.targeted.as_ref().is_some_and(|t| t.spares(k));
    let deletions = leaving(&stays, records, intents)
        .into_iter()
        .map(|r| (r.node.clone(), r))
        .collect();
    Plan {
        nodes,
        deletions,
        previews,
    }
}
