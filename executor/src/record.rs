//! What the store remembers: realization records (what was observed after a deploy step on
//! one target), run records (what one run did), and states (an environment's current
//! records, chained to the previous state: the audit trail).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lock::EnvLock;
use crate::store::{ObjectId, RefConflict, Store, StoreError};

/// The result of realizing one derivation on one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealizationRecord {
    /// The derivation's id after deferred values were substituted.
    pub resolved_hash: String,
    /// The target's identity: its host key fingerprint (or a provider's machine id).
    pub target_identity: String,
    /// `target/kind:name`, for people reading the history.
    pub node: String,
    /// What was observed afterwards (content hash, installed version, unit state, …).
    pub facts: BTreeMap<String, String>,
    pub run: ObjectId,
    pub at_unix: u64,
}

impl RealizationRecord {
    /// Records are found by (resolved hash, target identity).
    pub fn key(resolved_hash: &str, target_identity: &str) -> String {
        format!("{resolved_hash}@{target_identity}")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeOutcome {
    pub node: String,
    pub id: String,
    /// `create`, `update`, `replace`, `delete`, `unchanged`.
    pub action: String,
    /// `ok`, `failed: …`, `skipped: …`.
    pub outcome: String,
    pub duration_ms: u64,
    pub output_hash: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub env: String,
    pub command: String,
    pub graph_hash: String,
    pub lock_hash: Option<String>,
    pub started_unix: u64,
    pub finished_unix: u64,
    pub nodes: Vec<NodeOutcome>,
}

/// An environment's state after a run: its live records by node, and the state before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub previous: Option<ObjectId>,
    pub run: Option<ObjectId>,
    /// `RealizationRecord::key` → record object.
    pub records: BTreeMap<String, ObjectId>,
}

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
        mut self,
        store: &Store,
        lock: &EnvLock,
        base: Option<ObjectId>,
    ) -> Result<Result<ObjectId, RefConflict>, StoreError> {
        self.previous = base;
        let id = store.put_json(&self)?;
        Ok(store.update_ref(lock, base, id)?.map(|()| id))
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
