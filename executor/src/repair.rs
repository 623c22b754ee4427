//! Checking the store and bringing it back to a usable state (`envc store verify [--repair]`).
//!
//! Objects are verified when read, so a damaged one is an error wherever it is used: a damaged
//! record stops every build of its environment, a damaged state cuts the history, a damaged
//! run record breaks `envc log`. Deleting the object by hand only turns "corrupt" into
//! "missing". Repair removes the damaged objects and rewrites each environment's state chain
//! without what they held: records that are gone leave the current state (the next build runs
//! those nodes again, as if for the first time), runs that are gone leave the history, and the
//! chain stops at its first unreadable state.
//!
//! A ref that cannot be read (it holds no object id, or names a state that is gone) does not
//! lose the history: the states are still objects. Repair looks through every object where
//! states are kept (the bucket, with a shared state) for the environment's states, and sets
//! the ref to the newest one whose chain reads back to the first (the longest chain; a tie
//! goes to the run that finished last). With a shared state, objects in the bucket are
//! checked too: one that does not hash to its name is uploaded again from this store when
//! it has it whole, and removed otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::envlock::{EnvLock, EnvLockError, Holder};
use crate::error::unusable;
use crate::record::{Intent, RealizationRecord, RunRecord, State};
use crate::store::{ObjectId, RefConflict, Store, StoreError};

/// How long a temporary file must have been left alone before verify takes it for a killed
/// writer's and removes it.
const TMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

pub use envc_store::damage::Damage;

/// A live record of the current state that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedRecord {
    /// The node's key (`target/kind:name`): the next build runs it again.
    pub node: String,
    pub object: ObjectId,
    pub damage: Damage,
}

/// A run record of the history that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedRun {
    pub object: ObjectId,
    pub damage: Damage,
}

/// A run of the history that can no longer be rolled back to (`envc rollback --to`): an
/// object it would put back is missing or damaged. Repair cannot bring it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRun {
    /// The run as `envc log` names it.
    pub run: String,
    pub command: String,
    pub finished_unix: u64,
    /// Each node of its state whose record, content or `.deb`s are not whole in the store,
    /// and why (the object, and what is wrong with it).
    pub why: Vec<(String, String)>,
}

/// The first state of the chain, going back, that cannot be read: it and everything before
/// it are lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub state: ObjectId,
    pub damage: Damage,
    /// The states after it, which stay.
    pub kept: usize,
}

/// The state a repair sets an unreadable ref to: the newest of the environment's states
/// whose history reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    pub state: ObjectId,
    /// The states of its history (itself included).
    pub states: usize,
    /// When its run finished (unix time), if it names a readable run.
    pub finished_unix: Option<u64>,
}

/// What one environment loses to damaged objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvDamage {
    pub env: String,
    /// Where its ref is: the bucket's head object (`s3://…/envs/ENV/head`) or `refs/ENV`.
    pub head_at: String,
    /// The ref or the current state itself cannot be read. Repair sets the ref to
    /// `fallback`, or, when no state of the environment reads, removes it (the next build
    /// is a first build).
    pub head: Option<Damage>,
    pub fallback: Option<Fallback>,
    pub records: Vec<DamagedRecord>,
    /// Intents (what a run was about to create) that cannot be read: repair drops them, so
    /// the next build decides afresh whether what it finds is envc's.
    pub intents: Vec<DamagedRecord>,
    /// Newest first.
    pub runs: Vec<DamagedRun>,
    pub cut: Option<Cut>,
    /// Runs of the readable history that can no longer be rolled back to, newest first.
    /// Repair leaves them in the history (every other node of theirs is still there) and
    /// cannot make them whole: only the objects themselves, from a backup, can.
    pub lost: Vec<LostRun>,
}

impl EnvDamage {
    pub fn is_empty(&self) -> bool {
        !self.needs_repair() && self.lost.is_empty()
    }

    /// Whether repair has something to do here: the state refers to objects it cannot read.
    pub fn needs_repair(&self) -> bool {
        self.head.is_some()
            || !self.records.is_empty()
            || !self.intents.is_empty()
            || !self.runs.is_empty()
            || self.cut.is_some()
    }
}

/// An object in the shared state's bucket that does not hash to its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketDamage {
    pub object: ObjectId,
    /// Its URL (`s3://bucket/prefix/objects/…`).
    pub url: String,
    /// This store has it whole: repair uploads it again (else repair removes it).
    pub whole_here: bool,
}

/// What verify found (and, after a repair, what was removed and dropped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Files in `objects/` that are not the object they are named after.
    pub corrupt: Vec<PathBuf>,
    /// Objects in the shared state's bucket that are not the object they are named after.
    pub bucket: Vec<BucketDamage>,
    /// Environments that refer to damaged or missing objects; the others are not listed.
    pub envs: Vec<EnvDamage>,
}

impl StoreReport {
    pub fn is_sound(&self) -> bool {
        !self.needs_repair() && self.lost().next().is_none()
    }

    /// Whether `store verify --repair` has something to remove or rewrite.
    pub fn needs_repair(&self) -> bool {
        !self.corrupt.is_empty()
            || !self.bucket.is_empty()
            || self.envs.iter().any(EnvDamage::needs_repair)
    }

    /// The runs that can no longer be rolled back to, with their environments.
    pub fn lost(&self) -> impl Iterator<Item = (&str, &LostRun)> {
        (self.envs.iter()).flat_map(|e| e.lost.iter().map(move |l| (e.env.as_str(), l)))
    }
}

#[derive(Debug)]
pub enum RepairError {
    Store(StoreError),
    /// An environment is held by a running envc: nothing was changed.
    Locked(EnvLockError),
    /// The ref moved while the repair held the lock (something wrote the store without it).
    RefMoved {
        env: String,
        conflict: RefConflict,
    },
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::Store(e) => write!(f, "{e}"),
            RepairError::Locked(e) => write!(f, "{e}; nothing was repaired"),
            RepairError::RefMoved { env, conflict } => write!(
                f,
                "the state of `{env}` moved during the repair (expected {:?}, found {:?}); \
                 something wrote the store without its lock",
                conflict.expected, conflict.found
            ),
        }
    }
}

impl std::error::Error for RepairError {}

impl From<StoreError> for RepairError {
    fn from(e: StoreError) -> RepairError {
        RepairError::Store(e)
    }
}

/// The readable part of an environment's history.
pub struct History {
    /// Newest first.
    pub states: Vec<(ObjectId, State)>,
    /// What ended it early: the state that cannot be read (`None`: the ref itself), and why.
    pub end: Option<(Option<ObjectId>, Damage)>,
}

/// `env`'s history as far back as it can be read.
pub fn readable_history(store: &Store, env: &str) -> Result<History, StoreError> {
    match store.read_ref(env) {
        Ok(head) => history_from(store, head),
        Err(e) => Ok(History {
            states: Vec::new(),
            end: Some((None, Damage::of(e)?)),
        }),
    }
}

/// The history from state `next` back, as far as it can be read.
fn history_from(store: &Store, mut next: Option<ObjectId>) -> Result<History, StoreError> {
    let mut states = Vec::new();
    while let Some(id) = next {
        match store.get_json::<State>(&id) {
            Ok(s) => {
                next = s.previous;
                states.push((id, s));
            }
            Err(e) => {
                return Ok(History {
                    states,
                    end: Some((Some(id), Damage::of(e)?)),
                })
            }
        }
    }
    Ok(History { states, end: None })
}

/// States are small JSON documents: objects larger than this (disk images) are not read
/// when looking for them.
const MAX_STATE_BYTES: u64 = 64 << 20;

/// The newest of `env`'s states whose history reads, for a ref that names none: every
/// object that parses as a state is a candidate; a state is `env`'s when the nearest run
/// record of its history says so. Preferred: a history that reads back to its first state,
/// then the longest, then the run that finished last, then the greatest id (so that the
/// choice does not depend on listing order).
fn newest_state(store: &Store, env: &str) -> Result<Option<Fallback>, StoreError> {
    let mut states: BTreeMap<ObjectId, State> = BTreeMap::new();
    for (id, size) in store.object_ids()? {
        if size > MAX_STATE_BYTES {
            continue;
        }
        match store.get_json::<State>(&id) {
            Ok(s) => {
                states.insert(id, s);
            }
            // Not a state, or damaged (verify lists it on its own).
            Err(e) => drop(Damage::of(e)?),
        }
    }
    let mut runs: BTreeMap<ObjectId, Option<RunRecord>> = BTreeMap::new();
    let mut run_of = |id: ObjectId| -> Option<RunRecord> {
        runs.entry(id)
            .or_insert_with(|| store.get_json::<RunRecord>(&id).ok())
            .clone()
    };
    // Per state: whose it is, how long its readable history is, whether that reaches the
    // first state. Walked iteratively from each state (histories can be long).
    let mut known: BTreeMap<ObjectId, (Option<String>, usize, bool)> = BTreeMap::new();
    let ids: Vec<ObjectId> = states.keys().copied().collect();
    for start in ids {
        let mut path = Vec::new();
        let mut next = Some(start);
        let mut base = (None, 0, true);
        while let Some(id) = next {
            if let Some(k) = known.get(&id) {
                base = k.clone();
                break;
            }
            match states.get(&id) {
                Some(s) => {
                    path.push(id);
                    next = s.previous;
                }
                None => {
                    base = (None, 0, false);
                    break;
                }
            }
        }
        let (mut owner, mut depth, intact) = base;
        for id in path.into_iter().rev() {
            depth += 1;
            if let Some(run) = states[&id].run.and_then(&mut run_of) {
                owner = Some(run.env);
            }
            known.insert(id, (owner.clone(), depth, intact));
        }
    }
    let best = known
        .iter()
        .filter(|(_, (owner, _, _))| owner.as_deref() == Some(env))
        .map(|(id, (_, depth, intact))| {
            let finished = states[id]
                .run
                .and_then(&mut run_of)
                .map(|r| r.finished_unix);
            (*intact, *depth, finished, *id)
        })
        .max();
    Ok(best.map(|(_, states, finished_unix, state)| Fallback {
        state,
        states,
        finished_unix,
    }))
}

/// Re-hashes every object (the bucket's too, with a shared state) and checks every
/// environment's state against the store. Changes nothing but old temporary files.
pub fn verify(store: &Store) -> Result<StoreReport, StoreError> {
    let mut corrupt = store.verify(TMP_AGE)?;
    corrupt.sort();
    let bucket = bucket_damage(store)?;
    let mut envs = Vec::new();
    for env in store.envs()? {
        let (damage, _) = examine(store, &env)?;
        if !damage.is_empty() {
            envs.push(damage);
        }
    }
    Ok(StoreReport {
        corrupt,
        bucket,
        envs,
    })
}

fn bucket_damage(store: &Store) -> Result<Vec<BucketDamage>, StoreError> {
    Ok(store
        .verify_shared()?
        .into_iter()
        .map(|(object, url, whole_here)| BucketDamage {
            object,
            url,
            whole_here,
        })
        .collect())
}

/// [`verify`], then removes the corrupt objects and rewrites every damaged environment's
/// state so that it reads again (see the module's documentation). Holds every environment's
/// lock throughout: a build running meanwhile could read an object being removed, or commit
/// over the rewritten chain. Returns what verify found, which is what was repaired.
pub fn repair(store: &Store, holder: &Holder) -> Result<StoreReport, RepairError> {
    let names = store.envs()?;
    let locks = names
        .iter()
        .map(|env| EnvLock::acquire(store, env, false, holder))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RepairError::Locked)?;
    let mut corrupt = store.verify(TMP_AGE)?;
    corrupt.sort();
    // The bucket first: what can be uploaded again is not lost, and the environments are
    // then examined against what stays.
    let bucket = bucket_damage(store)?;
    for b in &bucket {
        store.mend_shared(&b.object)?;
    }
    if store.shared().is_some() {
        // A damaged local copy of a shared object is fetched again from the bucket.
        for path in &corrupt {
            store.remove_damaged(path)?;
        }
    }
    let mut envs = Vec::new();
    for lock in &locks {
        let (damage, chain) = examine(store, lock.env())?;
        if !damage.is_empty() {
            envs.push((damage, chain, lock));
        }
    }
    for path in &corrupt {
        store.remove_damaged(path)?;
    }
    for (damage, chain, lock) in &envs {
        if !damage.needs_repair() {
            // Only runs that can no longer be rolled back to: nothing to rewrite.
            continue;
        }
        if damage.head.is_some() {
            // Nothing to compare the unreadable ref with: removed, then created anew.
            store.remove_ref(*lock)?;
            rewrite(store, lock, None, chain, damage)?;
        } else {
            let head = chain.first().map(|(id, _)| *id);
            rewrite(store, lock, head, chain, damage)?;
        }
    }
    Ok(StoreReport {
        corrupt,
        bucket,
        envs: envs.into_iter().map(|(d, _, _)| d).collect(),
    })
}

/// What `env` loses, and the readable part of its chain (newest first).
fn examine(store: &Store, env: &str) -> Result<(EnvDamage, Vec<(ObjectId, State)>), StoreError> {
    let mut d = EnvDamage {
        env: env.to_string(),
        head_at: store.ref_location(env),
        ..EnvDamage::default()
    };
    let History {
        states: mut chain,
        mut end,
    } = readable_history(store, env)?;
    if chain.is_empty() {
        if let Some((_, damage)) = end.take() {
            d.head = Some(damage);
            d.fallback = newest_state(store, env)?;
            if let Some(f) = &d.fallback {
                History { states: chain, end } = history_from(store, Some(f.state))?;
            }
        }
    }
    match end {
        Some((Some(state), damage)) if !chain.is_empty() => {
            d.cut = Some(Cut {
                state,
                damage,
                kept: chain.len(),
            })
        }
        Some((_, damage)) => d.head = Some(damage),
        None => {}
    }
    if let Some((_, current)) = chain.first() {
        for (node, object) in &current.records {
            if let Err(e) = store.get_json::<RealizationRecord>(object) {
                d.records.push(DamagedRecord {
                    node: node.clone(),
                    object: *object,
                    damage: Damage::of(e)?,
                });
            }
        }
        for (node, object) in &current.intents {
            if let Err(e) = store.get_json::<Intent>(object) {
                d.intents.push(DamagedRecord {
                    node: node.clone(),
                    object: *object,
                    damage: Damage::of(e)?,
                });
            }
        }
    }
    let mut seen = BTreeSet::new();
    for run in chain.iter().filter_map(|(_, s)| s.run) {
        if seen.insert(run) {
            if let Err(e) = RunRecord::load(store, &run) {
                d.runs.push(DamagedRun {
                    object: run,
                    damage: Damage::of(e)?,
                });
            }
        }
    }
    // A live record that does not read leaves the current state with the repair (the next
    // build runs it again): going back to the newest run does not need it then.
    let dropped: BTreeSet<&str> = d.records.iter().map(|r| r.node.as_str()).collect();
    d.lost = lost_runs(store, &chain, &dropped);
    Ok((d, chain))
}

/// The runs of `chain` (newest first) that `envc rollback --to` can no longer go back to:
/// the state each left (the newest naming it, as the rollback finds it) names a record
/// that does not read, or one whose content, kept `.deb` set or `.deb`s are not whole in
/// the store (`Restores::kept`; a `.deb` is looked for in the store only, not in a binary
/// cache). A run whose own record does not read is not found by a rollback at all (it is
/// among the damaged runs), and neither are the live records repair drops (`dropped`, of
/// the current state). Each object is checked once.
fn lost_runs(store: &Store, chain: &[(ObjectId, State)], dropped: &BTreeSet<&str>) -> Vec<LostRun> {
    let mut records: BTreeMap<ObjectId, Option<String>> = BTreeMap::new();
    let mut debs: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut lost = Vec::new();
    for (i, (_, state)) in chain.iter().enumerate() {
        let Some(run) = state.run.and_then(|id| RunRecord::load(store, &id).ok()) else {
            continue;
        };
        if !seen.insert(run.run.clone()) {
            continue;
        }
        let mut why = Vec::new();
        for (node, id) in &state.records {
            if i == 0 && dropped.contains(node.as_str()) {
                continue;
            }
            let problem = records
                .entry(*id)
                .or_insert_with(|| unrestorable(store, node, id, &mut debs));
            if let Some(p) = problem {
                why.push((node.clone(), p.clone()));
            }
        }
        if !why.is_empty() {
            lost.push(LostRun {
                run: run.run,
                command: run.command,
                finished_unix: run.finished_unix,
                why,
            });
        }
    }
    lost
}

/// Why the record `id` of `node` cannot be put back from this store, or `None`.
fn unrestorable(
    store: &Store,
    node: &str,
    id: &ObjectId,
    debs: &mut BTreeMap<String, Option<String>>,
) -> Option<String> {
    let record = match store.get_json::<RealizationRecord>(id) {
        Ok(r) => r,
        Err(e) => return Some(unusable("its record", id, e).cause),
    };
    let key = node.parse::<envc_ids::NodeKey>().ok()?;
    let restores = crate::kinds::of(key.kind).restores()?;
    if restores.not_restorable(&key.name, &record).is_some() {
        // It kept nothing to put back: a rollback leaves it and says so; nothing is lost.
        return None;
    }
    let sources = match restores.kept(&key.name, &record, store) {
        Ok(s) => s,
        Err(e) => return Some(e.cause),
    };
    let missing: Vec<String> = sources
        .iter()
        .filter_map(|d| {
            debs.entry(d.pin.sha256.clone())
                .or_insert_with(|| deb_damage(store, d))
                .clone()
        })
        .collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Why the store's copy of a pinned `.deb` cannot be installed, or `None`.
fn deb_damage(store: &Store, d: &crate::debs::DebSource) -> Option<String> {
    let p = &d.pin;
    let path = store.deb_path(&p.sha256);
    let what = match std::fs::read(&path) {
        Ok(b) if b.len() as u64 == p.size && envc_lockfiles::fetch::sha256_hex(&b) == p.sha256 => {
            return None
        }
        Ok(_) => "is damaged (not its pinned size and sha256)".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is not in the store".to_string(),
        Err(e) => format!("cannot be read ({e})"),
    };
    Some(format!(
        "the .deb of `{}` {} ({}) {what}",
        p.name,
        p.version,
        path.display()
    ))
}

/// Stores `chain` again, oldest first, without what `damage` lists, and moves the ref from
/// `expected` to its new head. States that keep their content and predecessor keep their
/// ids.
fn rewrite(
    store: &Store,
    lock: &EnvLock,
    expected: Option<ObjectId>,
    chain: &[(ObjectId, State)],
    damage: &EnvDamage,
) -> Result<(), RepairError> {
    if chain.is_empty() {
        return Ok(());
    }
    let lost_runs: BTreeSet<ObjectId> = damage.runs.iter().map(|r| r.object).collect();
    // The oldest kept state has no predecessor: the chain is cut there.
    let mut previous = None;
    for (i, (_, state)) in chain.iter().enumerate().rev() {
        let mut s = state.clone();
        s.previous = previous;
        if s.run.is_some_and(|r| lost_runs.contains(&r)) {
            s.run = None;
        }
        if i == 0 {
            for r in &damage.records {
                s.records.remove(&r.node);
            }
            for r in &damage.intents {
                s.intents.remove(&r.node);
            }
        }
        previous = Some(store.put_json(&s)?);
    }
    let new_head = previous.expect("the chain is not empty");
    store
        .update_ref(lock, expected, new_head)?
        .map_err(|conflict| RepairError::RefMoved {
            env: lock.env().to_string(),
            conflict,
        })
}
