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
use crate::record::Phase;
use crate::rollback::{restore, rolls_back, summary, Restore};

impl Scheduler<'_> {
    /// After node `i` failed: when that was an update failing on its target, rolls back
    /// what this run changed there that it was made from ([`Scheduler::rollback_set`]).
    pub(super) async fn after_failure(
        &mut self,
        i: usize,
        env: &mut Env<'_>,
    ) -> Result<(), RunError> {
        let node = &self.spec.nodes[i];
        let updated = matches!(self.decided[i], Some((Action::Update, _)));
        let postcondition = (self.outcomes.get(&i))
            .is_some_and(|o| o.checks.iter().any(|c| c.phase == Phase::Expect && !c.ok));
        if !updated || !(postcondition || node.kind == NodeKind::Service) {
            return Ok(());
        }
        let Some(t) = node.target else {
            return Ok(());
        };
        let nodes = self.rollback_set(i);
        if nodes.is_empty() {
            return Ok(());
        }
        let note = self.roll_back(env, t, &nodes).await?;
        if let Some(o) = self.outcomes.get_mut(&i) {
            o.rollback = Some(note);
        }
        Ok(())
    }

    /// What rolling back failed node `i` puts back: itself, and the nodes on its target it
    /// was made from (its inputs, transitively) that ran in this run, with the services on
    /// that target that ran in this run reading any of those (restarted with them), in
    /// the graph's order. Nodes that say `rollback = false` stay as the update left them.
    pub(crate) fn rollback_set(&self, i: usize) -> Vec<usize> {
        let t = self.target_of(i);
        let ran = |j: usize| self.outcomes.get(&j).is_some_and(|o| o.outcome.ran());
        let eligible = |j: usize| {
            let n = &self.spec.nodes[j];
            n.rollback && rolls_back(n.kind) && n.target == Some(t)
        };
        let mut set = BTreeSet::from([i]);
        let mut seen = BTreeSet::new();
        let mut work = self.spec.nodes[i].inputs.clone();
        while let Some(j) = work.pop() {
            if !seen.insert(j) {
                continue;
            }
            if eligible(j) && ran(j) {
                set.insert(j);
            }
            work.extend(self.spec.nodes[j].inputs.iter().copied());
        }
        for (j, n) in self.spec.nodes.iter().enumerate() {
            if n.kind == NodeKind::Service
                && eligible(j)
                && ran(j)
                && n.inputs.iter().any(|x| set.contains(x))
            {
                set.insert(j);
            }
        }
        set.into_iter().filter(|j| eligible(*j)).collect()
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
                env.state.records.insert(key.clone(), *id);
                env.records.insert(key.clone(), r.clone());
                items.push((j, restore(Some(r.clone()), None)));
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
