//! An environment's state in the store: its head (the current [`State`]), the records and
//! intents it names, and its history. Above the store, which knows nothing of records, and
//! below the run that commits states.

use std::collections::BTreeMap;

use crate::envlock::EnvLock;
use crate::record::{Intent, RealizationRecord, RunRecord, State};
use crate::store::{ObjectId, RefConflict, Store, StoreError};

impl State {
    /// The environment's current state (empty if it never ran).
    pub fn current(store: &Store, env: &str) -> Result<(Option<ObjectId>, State), StoreError> {
        match store.read_ref(env)? {
            Some(id) => Ok((Some(id), store.get_json(&id)?)),
            None => Ok((None, State::default())),
        }
    }

    /// Stores this state as the successor of `base` and moves the ref to it.
    pub fn commit(
        &self,
        store: &Store,
        lock: &EnvLock,
        base: Option<ObjectId>,
    ) -> Result<Result<ObjectId, RefConflict>, StoreError> {
        let mut next = self.clone();
        next.previous = base;
        let id = store.put_json(&next)?;
        Ok(store.update_ref(lock, base, id)?.map(|()| id))
    }

    /// Loads every live record.
    pub fn load_records(
        &self,
        store: &Store,
    ) -> Result<BTreeMap<String, RealizationRecord>, StoreError> {
        self.records
            .iter()
            .map(|(k, id)| Ok((k.clone(), store.get_json(id)?)))
            .collect()
    }

    /// Loads every intent.
    pub fn load_intents(&self, store: &Store) -> Result<BTreeMap<String, Intent>, StoreError> {
        self.intents
            .iter()
            .map(|(k, id)| Ok((k.clone(), store.get_json(id)?)))
            .collect()
    }

    /// States from the newest back, following `previous`.
    pub fn history(store: &Store, env: &str) -> Result<Vec<(ObjectId, State)>, StoreError> {
        let mut out = Vec::new();
        let mut next = store.read_ref(env)?;
        while let Some(id) = next {
            let s: State = store.get_json(&id)?;
            next = s.previous;
            out.push((id, s));
        }
        Ok(out)
    }
}

impl RunRecord {
    /// The run's record `id` names, whole: a checkpoint of a run that did not finish holds
    /// only the outcomes since the checkpoint before it ([`RunRecord::earlier`]), so the
    /// chain is read back to its start, earliest outcomes first (a node's latest outcome
    /// where two checkpoints hold one).
    pub fn load(store: &Store, id: &ObjectId) -> Result<RunRecord, StoreError> {
        let mut run: RunRecord = store.get_json(id)?;
        let mut segments = Vec::new();
        let mut earlier = run.earlier.take();
        while let Some(e) = earlier {
            let mut before: RunRecord = store.get_json(&e)?;
            earlier = before.earlier.take();
            segments.push(std::mem::take(&mut before.nodes));
        }
        if segments.is_empty() {
            return Ok(run);
        }
        segments.reverse();
        segments.push(std::mem::take(&mut run.nodes));
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for outcome in segments.into_iter().flatten() {
            match at.get(&outcome.node) {
                Some(&i) => run.nodes[i] = outcome,
                None => {
                    at.insert(outcome.node.clone(), run.nodes.len());
                    run.nodes.push(outcome);
                }
            }
        }
        Ok(run)
    }
}
