//! `envc rollback FILE --to RUN`: the environment's packages, files and services put back
//! as they stood after an earlier run, from the store alone (that run's state names its
//! records; a file's record names its content object, a locked package's the set of pinned
//! `.deb`s it installed), recorded as a run of its own (`rollback`).
//! Today's source is not read: what is restored is what was recorded, and the targets are
//! reached as their records say, each checked against its recorded host key.
//!
//! What the run's state did not have (nodes added since) is removed as a build removes
//! nodes that left the graph: only what envc created; the rest is forgotten, left in
//! place. Machines, images and commands are not put back, nor a package whose record names
//! no `.deb`s (see `rollback.rs`): where theirs differ, the plan says so and leaves them.

use std::collections::{BTreeMap, BTreeSet};

use envc_ids::{fact, NodeKey, NodeKind, TargetIdentity};

use crate::envlock::{EnvLock, Holder};
use crate::error::unusable;
use crate::kinds::node_type::Restore;
use crate::plan::Action;
use crate::record::{Intent, NodeOutcome, Outcome, RealizationRecord, RunRecord, RunResult, State};
use crate::repair::readable_history;
use crate::rollback::{not_restorable, restore, rolls_back, unsound, RollbackError};
use crate::run::{BuildReport, Env, Event, Reporter};
use crate::session::{runtime, Session, SessionError};
use crate::store::{ObjectId, Store};

/// What going back to a run does to one node.
#[derive(Clone, Debug)]
pub struct RollbackItem {
    /// `target/kind:name`.
    pub node: String,
    /// `update` (put back as the run had it), `delete` (it did not exist then), or
    /// `unchanged` where it is left as it is now (`note` says why).
    pub action: Action,
    pub note: Option<String>,
    /// The record to go back to and its object (`update`).
    to: Option<(ObjectId, RealizationRecord)>,
    /// What is there now: `update`: its record now (a package's closure moved since goes
    /// back); `delete`: what envc wrote, for the removal (`None` forgets it).
    now: Option<RealizationRecord>,
}

/// `envc rollback --to RUN`'s plan.
#[derive(Clone, Debug)]
pub struct RollbackPlan {
    /// The run gone back to, as `envc log` names it, with its command and end.
    pub run: String,
    pub command: String,
    pub finished_unix: u64,
    /// The nodes that change or are left with a note, in key order.
    pub items: Vec<RollbackItem>,
    /// How many nodes are already as the run left them.
    pub unchanged: usize,
    outputs: BTreeMap<String, serde_json::Value>,
    graph_hash: String,
    /// The records of its state that do not read: each node, and why.
    unread: Vec<(String, String)>,
}

impl Session {
    /// What `envc rollback --to RUN` would do, without the lock and without contacting
    /// any target.
    pub fn rollback_plan(&self, run: &str) -> Result<RollbackPlan, SessionError> {
        let (_, state) = State::current(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        let records = state
            .load_records(&self.store)
            .map_err(|e| self.store_error(e))?;
        let intents = state
            .load_intents(&self.store)
            .map_err(|e| self.store_error(e))?;
        let plan = self.plan_back(run, &records, &intents)?;
        runtime()?.block_on(self.sound(&plan))?;
        Ok(plan)
    }

    /// `envc rollback --to RUN`: under the environment's lock, the plan, then each target's
    /// files and services put back; recorded as a run (`rollback`).
    pub fn rollback(
        &self,
        run: &str,
        wait: bool,
        reporter: &dyn Reporter,
    ) -> Result<(RollbackPlan, BuildReport), SessionError> {
        let lock = EnvLock::acquire(
            &self.store,
            &self.env,
            wait,
            &Holder::current("envc rollback"),
        )
        .map_err(|e| self.lock_error(e))?;
        if let Some(what) = lock.took_over() {
            reporter.took_over(what);
        }
        let mut env = Env::open(&self.store, &lock).map_err(|e| SessionError::State {
            env: self.env.clone(),
            error: e.to_string(),
        })?;
        let plan = self.plan_back(run, &env.records, &env.intents)?;
        let rt = runtime()?;
        // Every object it needs, before the first target is touched (or even reached).
        rt.block_on(self.sound(&plan))?;
        let machines = self.machines();
        let (conns, _work) = self.connections(&machines)?;
        let report = rt.block_on(async {
            let r = apply(&plan, &mut env, &conns, reporter).await;
            conns.close().await;
            r
        });
        report
            .map(|r| (plan, r))
            .map_err(|error| SessionError::Run {
                error: Box::new(error),
                commit: None,
            })
    }

    fn plan_back(
        &self,
        given: &str,
        current: &BTreeMap<String, RealizationRecord>,
        intents: &BTreeMap<String, Intent>,
    ) -> Result<RollbackPlan, SessionError> {
        let (run, state, since) = self.find_run(given)?;
        // Its records under the keys they have now: the moves recorded since followed.
        let follow = Moves::since(&since, current);
        let mut then: BTreeMap<String, (ObjectId, RealizationRecord)> = BTreeMap::new();
        let mut renamed: BTreeMap<String, String> = BTreeMap::new();
        let mut unread = Vec::new();
        for (key, id) in &state.records {
            match self.store.get_json::<RealizationRecord>(id) {
                Ok(r) => {
                    let now = follow.key(key);
                    if &now != key {
                        renamed.insert(now.clone(), key.clone());
                    }
                    then.insert(now, (*id, r));
                }
                Err(e) => unread.push((key.clone(), unusable("its record", id, e).cause)),
            }
        }
        let now_ids = State::current(&self.store, &self.env)
            .map_err(|e| self.store_error(e))?
            .1
            .records;
        let identity_now = |target: &str| -> Option<TargetIdentity> {
            ["host", "vm"]
                .iter()
                .find_map(|k| current.get(&format!("{k}:{target}")))
                .and_then(|r| r.facts.get(fact::machine::FINGERPRINT))
                .map(|f| TargetIdentity::from(f.as_str()))
        };
        let keys: BTreeSet<&String> = then.keys().chain(current.keys()).collect();
        let mut items = Vec::new();
        let mut unchanged = 0;
        for key in keys {
            let Ok(parsed) = key.parse::<NodeKey>() else {
                continue;
            };
            let was = then.get(key);
            let is = current.get(key);
            if was.is_some_and(|(id, _)| now_ids.get(key) == Some(id)) {
                unchanged += 1;
                continue;
            }
            // Renamed since and otherwise as it was: the same thing on the same machine
            // (the rename rewrote its record, not what it describes).
            let same_thing = |(_, r): &(ObjectId, RealizationRecord)| {
                is.is_some_and(|n| {
                    n.output_hash == r.output_hash && n.target_identity == r.target_identity
                })
            };
            if renamed.contains_key(key) && was.is_some_and(same_thing) {
                unchanged += 1;
                continue;
            }
            let item = |action, note: Option<String>, to, now| RollbackItem {
                node: key.clone(),
                action,
                note,
                to,
                now,
            };
            if !rolls_back(parsed.kind) {
                let what = format!("a `{}` is not rolled back: left as it is now", parsed.kind);
                items.push(item(Action::Unchanged, Some(what), None, None));
                continue;
            }
            let not_kept = was.and_then(|(_, r)| not_restorable(parsed.kind, &parsed.name, r));
            if let Some(why) = not_kept {
                items.push(item(Action::Unchanged, Some(why), None, None));
                continue;
            }
            match was {
                Some((id, r)) => {
                    let target = parsed.target.as_deref().unwrap_or_default();
                    if identity_now(target).as_ref() != Some(&r.target_identity) {
                        items.push(item(
                            Action::Unchanged,
                            Some(format!("`{target}` is another machine now (or gone): its records from that run do not apply")),
                            None,
                            None,
                        ));
                    } else {
                        // What is there now: the packages of a closure it moved go back.
                        let now = is.cloned();
                        let note = renamed
                            .get(key)
                            .map(|old| format!("`{old}` then (renamed since)"));
                        items.push(item(Action::Update, note, Some((*id, r.clone())), now));
                    }
                }
                None => {
                    let made = is.filter(|r| {
                        r.created
                            || intents
                                .get(key)
                                .is_some_and(|i| i.target_identity == r.target_identity)
                    });
                    let note = match made {
                        Some(_) => "it did not exist then",
                        None => "it did not exist then; not made by envc, so left in place and forgotten",
                    };
                    items.push(item(
                        Action::Delete,
                        Some(note.to_string()),
                        None,
                        made.cloned(),
                    ));
                }
            }
        }
        Ok(RollbackPlan {
            run: run.run.clone(),
            command: run.command.clone(),
            finished_unix: run.finished_unix,
            items,
            unchanged,
            outputs: state.outputs.clone(),
            graph_hash: run.graph_hash.clone(),
            unread,
        })
    }

    /// That every object going back to the plan's run needs is whole: the records of its
    /// state, and what each record to put back names (`rollback::unsound`: content, a kept
    /// `.deb` set, the `.deb`s). Otherwise each one, with its node, and nothing is done.
    async fn sound(&self, plan: &RollbackPlan) -> Result<(), SessionError> {
        let mut why = plan.unread.clone();
        for item in &plan.items {
            if let (Action::Update, Some((_, r))) = (&item.action, &item.to) {
                for w in unsound(&self.store, &item.node, r).await {
                    why.push((item.node.clone(), w));
                }
            }
        }
        if why.is_empty() {
            return Ok(());
        }
        why.sort();
        Err(SessionError::Rollback(RollbackError::Unsound {
            run: plan.run.clone(),
            why,
        }))
    }

    /// The run `given` names (its id or a prefix of one only), the state it left, and the
    /// runs after it, newest first (each as its newest record has it).
    fn find_run(&self, given: &str) -> Result<(RunRecord, State, Vec<RunRecord>), SessionError> {
        let history = readable_history(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        let mut runs: Vec<RunRecord> = Vec::new();
        let mut found: Vec<(RunRecord, State, Vec<RunRecord>)> = Vec::new();
        for (_, state) in history.states {
            let Some(run_id) = state.run else { continue };
            let Ok(run) = self.store.get_json::<RunRecord>(&run_id) else {
                continue;
            };
            if runs.iter().any(|r| r.run == run.run) {
                continue;
            }
            let matches = run.run == given || (given.len() >= 4 && run.run.starts_with(given));
            if matches {
                found.push((run.clone(), state, runs.clone()));
            }
            runs.push(run);
        }
        let ids: Vec<String> = runs.into_iter().map(|r| r.run).collect();
        match found.len() {
            1 => Ok(found.remove(0)),
            _ => Err(SessionError::Rollback(RollbackError::UnknownRun {
                env: self.env.clone(),
                given: given.to_string(),
                closest: closest(given, &ids),
            })),
        }
    }
}

/// The renames recorded since a run, oldest first: a `moved` node's outcome names the key
/// it was carried from (`NodeOutcome::moved_from`), and a machine's rename carries every
/// key on it (`OLD/…` becomes `NEW/…`, even where the node also changed and its outcome is
/// an update); a record carried and not yet written anew under its new key still names its
/// old one (`moved.rs`).
struct Moves(Vec<BTreeMap<String, String>>);

impl Moves {
    /// From the runs after the one gone back to (newest first), then the live records.
    fn since(runs: &[RunRecord], current: &BTreeMap<String, RealizationRecord>) -> Moves {
        let mut steps: Vec<BTreeMap<String, String>> = (runs.iter().rev())
            .map(|run| {
                (run.nodes.iter())
                    .filter_map(|o| Some((o.moved_from.clone()?, o.node.clone())))
                    .collect()
            })
            .collect();
        steps.push(
            (current.iter())
                .filter(|(key, r)| &r.node != *key && !r.node.is_empty())
                .map(|(key, r)| (r.node.clone(), key.clone()))
                .collect(),
        );
        steps.retain(|s| !s.is_empty());
        Moves(steps)
    }

    /// What `key` is called now.
    fn key(&self, key: &str) -> String {
        let mut key = key.to_string();
        for step in &self.0 {
            if let Some(new) = step.get(&key) {
                key = new.clone();
                continue;
            }
            // On a renamed machine: `OLD/kind:name` is `NEW/kind:name` now.
            let on_machine = key.split_once('/').and_then(|(target, rest)| {
                step.iter().find_map(|(old, new)| {
                    let (old, new) = (machine(old)?, machine(new)?);
                    (old == target).then(|| format!("{new}/{rest}"))
                })
            });
            if let Some(new) = on_machine {
                key = new;
            }
        }
        key
    }
}

/// The name of the machine `key` is (`vm:NAME`, `host:NAME`: a key on no target, of a kind
/// that others are on), or `None`.
fn machine(key: &str) -> Option<String> {
    let parsed = key.parse::<NodeKey>().ok()?;
    let on_it = parsed.target.is_none() && matches!(parsed.kind, NodeKind::Vm | NodeKind::Host);
    on_it.then_some(parsed.name)
}

/// The run `given` was likely meant to name, by the measure every "did you mean" uses
/// (`envc_lang::closest`): a mistyped prefix is as near as the prefix it was meant to be.
fn closest(given: &str, ids: &[String]) -> Option<String> {
    let prefixes = ids.iter().map(|id| id.get(..given.len()).unwrap_or(id));
    let near = envc_lang::closest(given, prefixes)
        .or_else(|| envc_lang::closest(given, ids.iter().map(String::as_str)))?;
    ids.iter().find(|id| id.starts_with(near)).cloned()
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn apply(
    plan: &RollbackPlan,
    env: &mut Env<'_>,
    conns: &crate::connect::Connections,
    reporter: &dyn Reporter,
) -> Result<BuildReport, crate::run::RunError> {
    let started = now_unix();
    let run_id = crate::run::new_run_id(&plan.run);
    let mut report = BuildReport {
        cached: plan.unchanged,
        ..BuildReport::default()
    };
    let current = env.records.clone();
    let record_run = |env: &mut Env<'_>,
                      result: RunResult,
                      nodes: Vec<NodeOutcome>|
     -> Result<ObjectId, crate::run::RunError> {
        let run = RunRecord {
            run: run_id.clone(),
            env: env.lock.env().to_string(),
            command: "rollback".into(),
            graph_hash: plan.graph_hash.clone(),
            lock_hash: None,
            started_unix: started,
            finished_unix: now_unix(),
            result,
            nodes,
            earlier: None,
            error: None,
            stacks: BTreeMap::new(),
            targeted: None,
            rollouts: Vec::new(),
            // Put back from the store alone: no tool of the lock's built anything.
            tools: BTreeMap::new(),
        };
        let id = env.store.put_json(&run)?;
        env.state.run = Some(id);
        env.commit()?;
        Ok(id)
    };
    // The state first: killed from here on, it says what the rollback goes back to (an
    // intent for what it removes), and the next build or rollback converges from there.
    for item in &plan.items {
        match (&item.action, &item.to, &item.now) {
            (Action::Update, Some((id, r)), _) => {
                env.state.records.insert(item.node.clone(), *id);
                env.records.insert(item.node.clone(), r.clone());
            }
            (Action::Delete, _, now) => {
                env.state.records.remove(&item.node);
                env.records.remove(&item.node);
                if let Some(w) = now {
                    let intent = Intent {
                        node: item.node.clone(),
                        target_identity: w.target_identity.clone(),
                        facts: w.facts.clone(),
                        run: run_id.clone(),
                        at_unix: now_unix(),
                    };
                    let id = env.store.put_json(&intent)?;
                    env.state.intents.insert(item.node.clone(), id);
                    env.intents.insert(item.node.clone(), intent);
                }
            }
            _ => {}
        }
    }
    env.state.outputs = plan.outputs.clone();
    record_run(env, RunResult::Unfinished, Vec::new())?;

    // By target, files before services (`restore`).
    let mut by_target: BTreeMap<String, Vec<(&RollbackItem, Restore)>> = BTreeMap::new();
    let mut outcomes: Vec<NodeOutcome> = Vec::new();
    for item in &plan.items {
        let Ok(key) = item.node.parse::<NodeKey>() else {
            continue;
        };
        let restore = match (&item.action, &item.to, &item.now) {
            (Action::Update, Some((_, r)), now) => Restore {
                key: item.node.clone(),
                kind: key.kind,
                name: key.name.clone(),
                to: Some(r.clone()),
                written: now.clone(),
            },
            (Action::Delete, _, Some(w)) => Restore {
                key: item.node.clone(),
                kind: key.kind,
                name: key.name.clone(),
                to: None,
                written: Some(w.clone()),
            },
            (Action::Delete, _, None) => {
                report.deleted += 1;
                outcomes.push(outcome(item, Outcome::Ok(Some("forgotten".into()))));
                continue;
            }
            _ => continue,
        };
        by_target
            .entry(key.target.unwrap_or_default())
            .or_default()
            .push((item, restore));
    }
    for (target, items) in by_target {
        for (item, _) in &items {
            reporter.event(Event::Started {
                key: &item.node,
                target: &target,
                action: item.action,
            });
        }
        let t0 = std::time::Instant::now();
        let restores: Vec<Restore> = items.iter().map(|(_, r)| r.clone()).collect();
        // Reached as the records stand now: a host where its record says, a VM where it
        // reported, either held to its recorded key.
        let done = match conns.to_target(&target, None, &current).await {
            Ok((transport, _)) => restore(&transport, env.store, &restores).await,
            Err(e) => restores
                .iter()
                .map(|r| (r.key.clone(), Err(e.clone())))
                .collect(),
        };
        let elapsed = t0.elapsed();
        for ((item, _), (_, result)) in items.iter().zip(done) {
            let o = match result {
                Ok(what) => {
                    if item.action == Action::Delete {
                        report.deleted += 1;
                        env.state.intents.remove(&item.node);
                        env.intents.remove(&item.node);
                    } else {
                        report.ran += 1;
                    }
                    Outcome::Ok(Some(what))
                }
                Err(e) => {
                    report.failed += 1;
                    // Not put back: the record stays the one that describes the target.
                    if let Some(id) = env_id(&current, item, env.store) {
                        env.state.records.insert(item.node.clone(), id);
                        if let Some(r) = current.get(&item.node) {
                            env.records.insert(item.node.clone(), r.clone());
                        }
                    }
                    Outcome::Failed(e.to_string())
                }
            };
            reporter.event(Event::Finished {
                key: &item.node,
                target: &target,
                action: item.action,
                outcome: &o,
                duration: elapsed,
            });
            outcomes.push(outcome(item, o));
        }
    }
    let result = if report.failed > 0 {
        RunResult::Failed
    } else {
        RunResult::Ok
    };
    report.run = Some(record_run(env, result, outcomes.clone())?);
    report.outcomes = outcomes;
    Ok(report)
}

/// The object of the record `item` had before the rollback (written again if need be).
fn env_id(
    current: &BTreeMap<String, RealizationRecord>,
    item: &RollbackItem,
    store: &Store,
) -> Option<ObjectId> {
    let r = current.get(&item.node)?;
    store.put_json(r).ok()
}

fn outcome(item: &RollbackItem, outcome: Outcome) -> NodeOutcome {
    NodeOutcome {
        node: item.node.clone(),
        id: item
            .to
            .as_ref()
            .map_or(String::new(), |(_, r)| r.derivation.clone()),
        action: item.action,
        outcome,
        duration_ms: 0,
        output_hash: item.to.as_ref().map(|(_, r)| r.output_hash.clone()),
        checks: Vec::new(),
        log: None,
        tags: BTreeMap::new(),
        rollback: None,
        moved_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::closest;

    fn check(given: &str, expected: Option<&str>) {
        let ids = ["3570a7f384b2540b", "6ef61e1098ed34d7", "a1b2c3d4e5f60718"].map(String::from);
        assert_eq!(closest(given, &ids).as_deref(), expected, "{given}");
    }

    /// A mistyped id or prefix is answered with the run it was meant to be; something
    /// unlike every id is not.
    #[test]
    fn an_unknown_run_is_answered_with_the_nearest_id() {
        check("3570a7f384b2540c", Some("3570a7f384b2540b"));
        check("6ef61e1098x", Some("6ef61e1098ed34d7"));
        check("6ef61f", Some("6ef61e1098ed34d7"));
        check("zzzzzzzzzzzzzzzz", None);
        check("latest", None);
    }
}
