//! Automatic rollback: when an update fails on its target (a postcondition that does not
//! hold, a service that does not restart), what this run changed there for it is put back
//! as the run's starting records had it (`crate::rollback::restore`), and the state keeps
//! those records, so the next plan shows the update still to do.
//!
//! The state goes back first and is committed before anything on the target is touched:
//! a run killed during the rollback leaves the previous records live (and an intent for
//! what the update created), so the next build redoes the update from the source; nothing
//! it needs is lost, as the previous records and their content objects stay in the store.

use super::*;
use crate::kinds::node_type::Restore;
use crate::record::Phase;
use crate::rollback::{not_restorable, restore, rolls_back, summary};

/// A node's rollback note while its rollback runs: what the log of a run killed then says.
const UNDER_WAY: &str = "rolling back: the state holds the previous record again (the next \
    build redoes the update if the run ends before the target is put back)";

impl Scheduler<'_> {
    /// After node `i` failed: when that was an update failing on its target, rolls back
    /// what this run changed there that it was made from ([`Scheduler::rollback_set`]);
    /// with `--no-rollback`, says that it did not. What was built on a node put back and
    /// has not started yet does not start: with `--keep-going`, or on another target, it
    /// would run on what the rollback just took away.
    pub(super) async fn after_failure(
        &mut self,
        i: usize,
        env: &mut Env<'_>,
        dependents: &[Vec<usize>],
    ) -> Result<(), RunError> {
        let node = &self.spec.nodes[i];
        let updated = matches!(self.decided[i], Some((Action::Update, _)));
        let postcondition = (self.outcomes.get(&i))
            .is_some_and(|o| o.checks.iter().any(|c| c.phase == Phase::Expect && !c.ok));
        let failure_rolls_back = kinds::of(node.kind)
            .restores()
            .is_some_and(|r| r.failure_rolls_back());
        if !updated || !(postcondition || failure_rolls_back) {
            return Ok(());
        }
        let Some(t) = node.target else {
            return Ok(());
        };
        let target_name = self.spec.nodes[t].name.clone();
        if !self.opts.rollback {
            let note = format!(
                "not rolled back (`--no-rollback`): what this run changed on `{target_name}` stays"
            );
            self.note_rollback(i, &target_name, note);
            return Ok(());
        }
        let (nodes, opted_out) = self.rollback_set(i);
        for &j in opted_out.iter().filter(|j| **j != i) {
            let note = "not rolled back: it says `rollback = false`".to_string();
            self.note_rollback(j, &target_name, note);
        }
        let itself = opted_out
            .contains(&i)
            .then_some("not rolled back itself (it says `rollback = false`)");
        let note = match (nodes.is_empty(), itself) {
            (true, None) => return Ok(()),
            (true, Some(itself)) => {
                self.note_rollback(i, &target_name, itself.to_string());
                return Ok(());
            }
            (false, _) => self.roll_back(env, t, &nodes).await?,
        };
        for &j in &nodes {
            let key = &self.spec.nodes[j].key;
            let why = format!("its input `{key}` was rolled back");
            for &d in &dependents[j] {
                if self.status[d] == Status::Waiting {
                    self.stop(d, Status::Skipped, why.clone(), Duration::ZERO, dependents);
                }
            }
        }
        let note = match itself {
            Some(itself) => format!("{itself}; {note}"),
            None => note,
        };
        if let Some(o) = self.outcomes.get_mut(&i) {
            o.rollback = Some(note);
        }
        Ok(())
    }

    /// Node `j`'s rollback note, in its outcome and told to the reporter.
    fn note_rollback(&mut self, j: usize, target_name: &str, note: String) {
        let key = self.spec.nodes[j].key.clone();
        self.reporter.rolled_back(&key, target_name, &note);
        if let Some(o) = self.outcomes.get_mut(&j) {
            o.rollback = Some(note);
        }
    }

    /// What rolling back failed node `i` puts back: itself, and the nodes on its target it
    /// was made from (its inputs, transitively) that ran in this run, with the services on
    /// that target that ran in this run reading any of those (restarted with them), in
    /// the graph's order. Then the nodes that would be in it but say `rollback = false`:
    /// they stay as the update left them.
    pub(crate) fn rollback_set(&self, i: usize) -> (Vec<usize>, Vec<usize>) {
        let t = self.target_of(i);
        let ran = |j: usize| self.outcomes.get(&j).is_some_and(|o| o.outcome.ran());
        let here = |j: usize| {
            let n = &self.spec.nodes[j];
            rolls_back(n.kind) && n.target == Some(t)
        };
        let eligible = |j: usize| here(j) && self.spec.nodes[j].rollback;
        let mut set = BTreeSet::from([i]);
        let mut opted_out = BTreeSet::new();
        if here(i) && !eligible(i) {
            opted_out.insert(i);
        }
        let mut seen = BTreeSet::new();
        let mut work = self.spec.nodes[i].inputs.clone();
        while let Some(j) = work.pop() {
            if !seen.insert(j) {
                continue;
            }
            if here(j) && ran(j) {
                if eligible(j) {
                    set.insert(j);
                } else {
                    opted_out.insert(j);
                }
            }
            work.extend(self.spec.nodes[j].inputs.iter().copied());
        }
        for (j, n) in self.spec.nodes.iter().enumerate() {
            if kinds::of(n.kind)
                .restores()
                .is_some_and(|r| r.follows_inputs())
                && here(j)
                && ran(j)
                && n.inputs.iter().any(|x| set.contains(x))
            {
                if eligible(j) {
                    set.insert(j);
                } else if j != i {
                    opted_out.insert(j);
                }
            }
        }
        let set = set.into_iter().filter(|j| eligible(*j)).collect();
        (set, opted_out.into_iter().collect())
    }

    /// Puts `nodes` on target `t` back as this run's starting records had them: the state
    /// first (committed), then the target; what was created since is removed. Each node's
    /// outcome notes it, and the reporter hears of it. Returns one line saying what was
    /// done. The entry point for anything that rolls back part of a run (a failed update
    /// here, a rolling build's batch).
    pub(crate) async fn roll_back(
        &mut self,
        env: &mut Env<'_>,
        t: usize,
        nodes: &[usize],
    ) -> Result<String, RunError> {
        let identity = self.identity(t);
        let here = |r: &TargetIdentity| Some(r) == identity.as_ref();
        let mut items: Vec<(usize, Restore)> = Vec::new();
        let mut left: Vec<(usize, String)> = Vec::new();
        for &j in nodes {
            let n = &self.spec.nodes[j];
            let key = n.key.clone();
            let before = (self.before.get(&key)).filter(|(_, r)| here(&r.target_identity));
            let restore = |to, written| Restore {
                key: key.clone(),
                kind: n.kind,
                name: n.name.clone(),
                to,
                written,
            };
            if let Some((id, r)) = before {
                if let Some(why) = not_restorable(n.kind, &n.name, r) {
                    // Left as the update made it: its record says so.
                    left.push((j, why));
                    continue;
                }
                let since = env.records.get(&key).cloned();
                env.state.records.insert(key.clone(), *id);
                env.records.insert(key.clone(), r.clone());
                items.push((j, restore(Some(r.clone()), since)));
                continue;
            }
            let made_now = (env.records.get(&key))
                .filter(|r| r.run == self.run_id && r.created && here(&r.target_identity))
                .cloned();
            let intended = (env.intents.get(&key))
                .filter(|x| here(&x.target_identity))
                .map(Intent::as_record);
            match made_now.or(intended) {
                Some(w) => {
                    // Until it is removed, an intent says envc made it.
                    env.forget(&key);
                    env.put_intent(Intent {
                        node: key.clone(),
                        target_identity: w.target_identity.clone(),
                        facts: w.facts.clone(),
                        run: self.run_id.clone(),
                        at_unix: now_unix(),
                    });
                    items.push((j, restore(None, Some(w))));
                }
                None => left.push((
                    j,
                    "not rolled back: it was there before envc, and no record says what it held"
                        .to_string(),
                )),
            }
        }
        // Said in this checkpoint, so that a run killed while it rolls back says so in the
        // log; what is done replaces it.
        for (j, _) in &items {
            if let Some(o) = self.outcomes.get_mut(j) {
                o.rollback = Some(UNDER_WAY.to_string());
                if !self.unrecorded.contains(j) {
                    self.unrecorded.push(*j);
                }
            }
        }
        self.record_run(env, RunResult::Unfinished)?;
        let target = self.target_for(t, env).or_else(|| {
            let first = *nodes.first()?;
            self.target_for(first, env)
        });
        let restores: Vec<Restore> = items.iter().map(|(_, r)| r.clone()).collect();
        let done = match &target {
            Some(tg) => match self.conns.get(&tg.key, &tg.host, tg.recorded.clone()).await {
                Ok((transport, _)) => restore(&transport, env.store, &restores).await,
                Err(e) => (restores.iter())
                    .map(|r| (r.key.clone(), Err(e.clone())))
                    .collect(),
            },
            None => (restores.iter())
                .map(|r| (r.key.clone(), Err(StepError::new(NO_TARGET))))
                .collect(),
        };
        let target_name = self.spec.nodes[t].name.clone();
        let mut notes: Vec<(usize, String)> = left;
        for ((j, item), (_, result)) in items.iter().zip(&done) {
            let note = match result {
                Ok(what) => {
                    if item.to.is_none() {
                        env.forget(&item.key);
                    }
                    self.report.rolled_back += 1;
                    format!("rolled back: {what}")
                }
                Err(e) => format!("rollback failed: {e}"),
            };
            notes.push((*j, note));
        }
        for (j, note) in &notes {
            let key = self.spec.nodes[*j].key.clone();
            self.reporter.rolled_back(&key, &target_name, note);
            if let Some(o) = self.outcomes.get_mut(j) {
                o.rollback = Some(note.clone());
            }
        }
        Ok(format!(
            "rolled back on `{target_name}`: {}",
            summary(&done)
        ))
    }
}
