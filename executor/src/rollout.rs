//! Rolling builds: a `rollout`'s machines are updated batch by batch (Ansible's `serial`).
//! A batch is made of the machines that have something to do (a node on them, or the
//! machine itself, is not unchanged in the plan), in the order the rollout lists them;
//! unchanged machines are in no batch, so `batch = 2` means two machines that change,
//! not two machines of which some idle. The plan and the build cut batches the same way,
//! from the same actions.
//!
//! The scheduler holds back a node on a machine whose batch is not open yet, once the node
//! is assessed to run (a node found unchanged does nothing and is never held). A batch is
//! done when every node on its machines is done, failed or skipped; the next opens only
//! while the machines that failed, over the batches so far, are no more than
//! `max_failures`. Otherwise the rollout stops: the nodes held or still to come on the
//! later batches' machines are skipped, and those machines are not contacted for changes.

use std::collections::{BTreeMap, BTreeSet};

use crate::plan::Action;
use crate::record::RolloutOutcome;
use crate::spec::{Amount, Spec};

/// A rollout cut into batches: machines by node index.
#[derive(Clone, Debug)]
pub struct Batches {
    pub name: String,
    pub batch: Amount,
    pub max_failures: Amount,
    pub batches: Vec<Vec<usize>>,
    /// Its machines with nothing to do, in no batch.
    pub unchanged: Vec<usize>,
    /// How many failed machines it tolerates (`max_failures` of the machines in batches).
    pub tolerated: usize,
}

/// The machine node `i` is on (itself, for a machine).
fn machine_of(spec: &Spec, i: usize) -> usize {
    spec.nodes[i].target.unwrap_or(i)
}

/// Every rollout of `spec` in batches, given each node's planned action (by index; a
/// missing one counts as a change).
pub fn batches(spec: &Spec, actions: &[Action]) -> Vec<Batches> {
    let mut busy: BTreeSet<usize> = BTreeSet::new();
    for i in 0..spec.nodes.len() {
        if actions.get(i).copied() != Some(Action::Unchanged) {
            busy.insert(machine_of(spec, i));
        }
    }
    spec.rollouts
        .iter()
        .map(|r| {
            let (changed, unchanged): (Vec<usize>, Vec<usize>) =
                r.targets.iter().partition(|t| busy.contains(t));
            let size = r.batch.batch_of(changed.len());
            Batches {
                name: r.name.clone(),
                batch: r.batch,
                max_failures: r.max_failures,
                batches: changed.chunks(size).map(<[usize]>::to_vec).collect(),
                unchanged,
                tolerated: r.max_failures.limit_of(changed.len()),
            }
        })
        .collect()
}

/// A rollout's batches as a plan shows them: machine names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutPlan {
    pub name: String,
    pub batch: Amount,
    pub max_failures: Amount,
    pub batches: Vec<Vec<String>>,
    pub unchanged: Vec<String>,
    /// How many failed machines it tolerates.
    pub tolerated: usize,
}

/// The rollouts of `spec` as `plan` would have the build take them.
pub fn plan(spec: &Spec, plan: &crate::plan::Plan) -> Vec<RolloutPlan> {
    let mut actions = vec![Action::Update; spec.nodes.len()];
    for n in &plan.nodes {
        actions[n.index] = n.assessment.action;
    }
    let name = |t: &usize| spec.nodes[*t].name.clone();
    batches(spec, &actions)
        .into_iter()
        .map(|b| RolloutPlan {
            name: b.name,
            batch: b.batch,
            max_failures: b.max_failures,
            batches: (b.batches.iter())
                .map(|ms| ms.iter().map(name).collect())
                .collect(),
            unchanged: b.unchanged.iter().map(name).collect(),
            tolerated: b.tolerated,
        })
        .collect()
}

impl RolloutPlan {
    /// `rollout web: batch 1 web-0 web-1, batch 2 web-2 (max_failures 0)`.
    pub fn describe(&self) -> String {
        let mut s = format!("rollout {}: ", self.name);
        if self.batches.is_empty() {
            s.push_str("nothing to do");
        } else {
            let each: Vec<String> = (self.batches.iter().enumerate())
                .map(|(k, ms)| format!("batch {} {}", k + 1, ms.join(" ")))
                .collect();
            s.push_str(&each.join(", "));
        }
        s.push_str(&format!(" (max_failures {}", self.max_failures));
        if let Amount::Percent(_) = self.max_failures {
            s.push_str(&format!(": {}", self.tolerated));
        }
        s.push(')');
        if !self.unchanged.is_empty() {
            s.push_str(&format!("; unchanged: {}", self.unchanged.join(" ")));
        }
        s
    }
}

/// What the gate says of a node that is ready to run.
pub enum Admit<T> {
    Run(T),
    /// Kept until its batch opens.
    Held,
    /// Its rollout stopped before its batch: skip it, with why.
    Stopped(String),
}

struct Rolling<T> {
    b: Batches,
    /// How many batches are open; the machines in no batch go after the last.
    open: usize,
    failed: BTreeSet<usize>,
    stopped: Option<String>,
    held: Vec<(usize, T)>,
}

impl<T> Rolling<T> {
    /// The batch machine `t` is in (`batches.len()` for an unchanged one).
    fn batch_of(&self, t: usize) -> usize {
        self.b
            .batches
            .iter()
            .position(|ms| ms.contains(&t))
            .unwrap_or(self.b.batches.len())
    }
}

/// The scheduler's view of the rollouts: which nodes may run now.
pub struct Gate<T> {
    rollouts: Vec<Rolling<T>>,
    /// Rollout machine → its rollout.
    of_machine: BTreeMap<usize, usize>,
    /// Rollout machine → the nodes on it (itself included).
    nodes_on: BTreeMap<usize, Vec<usize>>,
}

impl<T> Gate<T> {
    pub fn new(spec: &Spec, batches: Vec<Batches>) -> Gate<T> {
        let mut of_machine = BTreeMap::new();
        for (r, b) in batches.iter().enumerate() {
            for t in b.batches.iter().flatten().chain(&b.unchanged) {
                of_machine.insert(*t, r);
            }
        }
        let mut nodes_on: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..spec.nodes.len() {
            let m = machine_of(spec, i);
            if of_machine.contains_key(&m) {
                nodes_on.entry(m).or_default().push(i);
            }
        }
        Gate {
            rollouts: batches
                .into_iter()
                .map(|b| Rolling {
                    b,
                    open: 1,
                    failed: BTreeSet::new(),
                    stopped: None,
                    held: Vec::new(),
                })
                .collect(),
            of_machine,
            nodes_on,
        }
    }

    /// Node `i`, on machine `m`, is ready to run as `item`.
    pub fn admit(&mut self, m: usize, item: T) -> Admit<T> {
        let Some(&r) = self.of_machine.get(&m) else {
            return Admit::Run(item);
        };
        let ro = &mut self.rollouts[r];
        if ro.batch_of(m) < ro.open {
            return Admit::Run(item);
        }
        match &ro.stopped {
            Some(why) => Admit::Stopped(why.clone()),
            None => {
                ro.held.push((m, item));
                Admit::Held
            }
        }
    }

    /// A node on machine `m` failed.
    pub fn failed(&mut self, m: usize) {
        if let Some(&r) = self.of_machine.get(&m) {
            self.rollouts[r].failed.insert(m);
        }
    }

    /// Opens every batch whose turn has come: a rollout's open batches are over when each
    /// node on their machines is `settled` (by index), or, when `idle`, as soon as nothing
    /// else can move (a node there waits for one on a later batch's machine). Returns the
    /// held items that may run now, and those to skip (with why).
    pub fn advance(
        &mut self,
        spec: &Spec,
        settled: &dyn Fn(usize) -> bool,
        idle: bool,
    ) -> (Vec<T>, Vec<(T, String)>) {
        let mut run = Vec::new();
        let mut skip = Vec::new();
        for ro in &mut self.rollouts {
            let mut forced = idle && !ro.held.is_empty();
            while ro.stopped.is_none() && ro.open <= ro.b.batches.len() {
                let over = ro.b.batches[..ro.open.min(ro.b.batches.len())]
                    .iter()
                    .flatten()
                    .all(|t| {
                        self.nodes_on
                            .get(t)
                            .is_none_or(|ns| ns.iter().all(|n| settled(*n)))
                    });
                if !over && !forced {
                    break;
                }
                forced = false;
                let done = ro.open;
                if ro.failed.len() > ro.b.tolerated {
                    ro.stopped = Some(stop_reason(spec, &ro.b, done, &ro.failed));
                    break;
                }
                ro.open += 1;
            }
            let open = ro.open;
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut ro.held)
                .into_iter()
                .partition(|(m, _)| ro.batch_of(*m) < open);
            run.extend(now.into_iter().map(|(_, item)| item));
            match &ro.stopped {
                Some(why) => skip.extend(later.into_iter().map(|(_, item)| (item, why.clone()))),
                None => ro.held = later,
            }
        }
        (run, skip)
    }

    /// Whether any node is held back.
    pub fn holds(&self) -> bool {
        self.rollouts.iter().any(|r| !r.held.is_empty())
    }

    /// What the run did of each rollout, for its record.
    pub fn outcomes(&self, spec: &Spec) -> Vec<RolloutOutcome> {
        let name = |t: &usize| spec.nodes[*t].name.clone();
        self.rollouts
            .iter()
            .map(|ro| {
                let started = ro.open.min(ro.b.batches.len());
                RolloutOutcome {
                    name: ro.b.name.clone(),
                    batch: ro.b.batch.to_string(),
                    max_failures: ro.b.max_failures.to_string(),
                    batches: (ro.b.batches.iter())
                        .map(|ms| ms.iter().map(name).collect())
                        .collect(),
                    started,
                    failed: ro.failed.iter().map(name).collect(),
                    untouched: match ro.stopped {
                        Some(_) => ro.b.batches[started..].iter().flatten().map(name).collect(),
                        None => Vec::new(),
                    },
                    stopped: ro.stopped.clone(),
                }
            })
            .collect()
    }
}

fn stop_reason(spec: &Spec, b: &Batches, done: usize, failed: &BTreeSet<usize>) -> String {
    let names: Vec<&str> = failed
        .iter()
        .map(|t| spec.nodes[*t].name.as_str())
        .collect();
    let limit = match b.max_failures {
        Amount::Count(_) => format!("max_failures = {}", b.max_failures),
        Amount::Percent(_) => format!("max_failures = {} ({})", b.max_failures, b.tolerated),
    };
    let count = match names.len() {
        1 => "1 machine".to_string(),
        n => format!("{n} machines"),
    };
    format!(
        "rollout `{}` stopped after batch {done} of {}: {count} failed ({}), more than {limit}",
        b.name,
        b.batches.len(),
        names.join(", "),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

    use super::*;
    use envc_compiler::{compile, CompileOptions, MemoryLoader};

    /// Five web hosts and a db, a file on each; `web-2` has nothing to do.
    fn spec(rollout: &str) -> (Spec, Vec<Action>) {
        let src = format!(
            "let webs = [for i in 0..5 => host(name = \"web-${{i}}\", address = \"192.0.2.${{10 + i}}\")]\n\
             let db = host(name = \"db\", address = \"192.0.2.20\")\n\
             let fs = [for h in webs + [db] => file(path = \"/etc/x\", content = \"x\", target = h)]\n\
             {rollout}\n"
        );
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src.as_str())]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        let spec = Spec::from_graph(&c.graph.unwrap(), &c.sources);
        let actions = (0..spec.nodes.len())
            .map(|i| match machine_of(&spec, i) {
                m if spec.nodes[m].name == "web-2" => Action::Unchanged,
                _ => Action::Create,
            })
            .collect();
        (spec, actions)
    }

    fn names(spec: &Spec, ms: &[usize]) -> Vec<String> {
        ms.iter().map(|m| spec.nodes[*m].name.clone()).collect()
    }

    #[test]
    fn batches_take_only_machines_with_something_to_do() {
        for (rollout, expected, tolerated) in [
            (
                "rollout \"web\": webs, batch = 2",
                vec![vec!["web-0", "web-1"], vec!["web-3", "web-4"]],
                0,
            ),
            (
                "rollout \"web\": webs, batch = \"50%\", max_failures = \"50%\"",
                vec![vec!["web-0", "web-1"], vec!["web-3", "web-4"]],
                2,
            ),
            (
                "rollout \"web\": [webs[4], webs[0]], batch = 5",
                vec![vec!["web-4", "web-0"]],
                0,
            ),
        ] {
            let (spec, actions) = spec(rollout);
            let b = &batches(&spec, &actions)[0];
            let got: Vec<Vec<String>> = b.batches.iter().map(|ms| names(&spec, ms)).collect();
            assert_eq!(got, expected, "{rollout}");
            assert_eq!(b.tolerated, tolerated, "{rollout}");
        }
    }

    /// Every file is ready at once; the first batch's nodes finish, with a failure on
    /// each machine of `failing`: which files run, and which are skipped, after the batch.
    fn check(max_failures: u32, failing: &[&str], run: &[&str], skipped: &[&str]) {
        let rollout = format!("rollout \"web\": webs, batch = 2, max_failures = {max_failures}");
        let (spec, actions) = spec(&rollout);
        let mut gate: Gate<usize> = Gate::new(&spec, batches(&spec, &actions));
        let files: Vec<usize> = (0..spec.nodes.len())
            .filter(|i| spec.nodes[*i].target.is_some())
            .collect();
        let mut first = Vec::new();
        for f in &files {
            match gate.admit(machine_of(&spec, *f), *f) {
                Admit::Run(i) => first.push(i),
                Admit::Held => {}
                Admit::Stopped(why) => panic!("stopped before anything ran: {why}"),
            }
        }
        let on = |is: &[usize]| -> Vec<String> {
            let mut v: Vec<String> = is
                .iter()
                .map(|i| spec.nodes[machine_of(&spec, *i)].name.clone())
                .collect();
            v.sort();
            v
        };
        // The first batch and the db (in no rollout) run at once; web-2 had nothing to do in
        // the plan, so what it turns out to need waits until every batch is over.
        assert_eq!(on(&first), ["db", "web-0", "web-1"]);
        let (none, _) = gate.advance(&spec, &|_| false, false);
        assert!(none.is_empty(), "a batch under way opens nothing");
        for m in failing {
            gate.failed(spec.find(&format!("host:{m}")).unwrap());
        }
        let batch1: Vec<usize> = (0..spec.nodes.len())
            .filter(|i| {
                ["web-0", "web-1"].contains(&spec.nodes[machine_of(&spec, *i)].name.as_str())
            })
            .collect();
        let (now, stop) = gate.advance(&spec, &|i| batch1.contains(&i), false);
        assert_eq!(
            on(&now),
            run,
            "max_failures {max_failures}, failing {failing:?}"
        );
        let stopped: Vec<usize> = stop.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            on(&stopped),
            skipped,
            "max_failures {max_failures}, failing {failing:?}"
        );
        let outcome = &gate.outcomes(&spec)[0];
        assert_eq!(outcome.started, if skipped.is_empty() { 2 } else { 1 });
        let batches_untouched: Vec<&str> =
            skipped.iter().copied().filter(|m| *m != "web-2").collect();
        assert_eq!(outcome.untouched, batches_untouched);
    }

    #[test]
    fn a_batch_opens_the_next_unless_too_many_machines_failed() {
        check(0, &[], &["web-3", "web-4"], &[]);
        check(0, &["web-1"], &[], &["web-2", "web-3", "web-4"]);
        check(1, &["web-1"], &["web-3", "web-4"], &[]);
        check(1, &["web-0", "web-1"], &[], &["web-2", "web-3", "web-4"]);
    }
}
