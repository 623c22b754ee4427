//! The scheduler: realizes a graph on its targets. Nodes become ready when their inputs are
//! done; a ready node is resolved and assessed against its live record, and runs only when
//! the record does not match. Ready files and packages of one host run as one batch (one
//! upload, one apt transaction). Steps run on tokio, at most `jobs` at once.
//!
//! Failures: a failed step skips everything that depends on it; without `keep_going` it
//! also stops further steps on its own target (the host "leaves the play", as in Ansible),
//! while other targets finish. A cancel (SIGINT) starts nothing new and lets running steps
//! finish. Records are written as steps complete and the state is committed often, so a
//! run killed at any point loses at most the last few records, and the next run redoes
//! only those (every step is idempotent).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envc_compiler::types::NodeKind;
use envc_compiler::SourceLoader;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::adopt::Found;
use crate::cache::CacheUse;
use crate::checks::{run_phase, CheckResult, CheckSpec, Phase};
use crate::connect::{recorded_key, Connections};
use crate::envlock::EnvLock;
use crate::error::StepError;
use crate::kinds;
use crate::kinds::node_type::{
    Absent, Delivery, Holds, Launch, Launching, Payload, Removal, Removing, Step, StepCx, Unit,
    UnitCx,
};
use crate::machines::Machines;
use crate::plan::{assess, Action};
use crate::record::DriftFacts;
use crate::record::{
    leaving, output_hash, Intent, NodeOutcome, Outcome, RealizationRecord, RunRecord, RunResult,
    State,
};
use crate::record::{Applied, CommandLog};
use crate::resolve::Resolved;
use crate::rollout::{self, Admit, Gate};
use crate::spec::{on_target, targetless, Spec};
use crate::store::{ObjectId, RefConflict, Reserve, Store, StoreError};
use crate::substitute::{Known, Resolution};
use crate::transport::{HostKey, HostSpec};
use envc_ids::{fact, TargetIdentity};

pub struct BuildOptions {
    pub jobs: usize,
    pub keep_going: bool,
    /// `build`, `destroy`: for the run record.
    pub command: String,
    /// What probes found different from the records (`--refresh`).
    pub drift: BTreeMap<String, DriftFacts>,
    /// blake3 of the lockfile this run used.
    pub lock_hash: Option<String>,
    /// The tools the environment uses, as found on this machine (for the run record).
    pub tools: BTreeMap<String, String>,
    /// Per node, the action `plan` gives it before the run: the label of a node that
    /// fails or is skipped before the run assesses it, so that `build` and `plan` agree
    /// (a first-time node is `create`, not `update`). Missing entries read `update`.
    pub planned: Vec<Action>,
    /// The binary cache images are looked up in (and pushed to), if one is configured.
    pub cache: Option<CacheUse>,
    /// The commit of the environment's source (`abc123…`, `-dirty` when it has changes),
    /// named in the commits that deliver objects to a GitOps repository.
    pub source: Option<String>,
    /// What the look before the run found of each node an `adopt` line takes over (and
    /// that has no record), by node index.
    pub adoptions: BTreeMap<usize, crate::adopt::Found>,
    /// `destroy --adopted`: records of adopted things leaving the graph are removed from
    /// their targets as if envc had created them.
    pub remove_adopted: bool,
    /// Put back what a failed update changed on its target (`build --no-rollback`: no).
    pub rollback: bool,
}

/// What the scheduler tells its user as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    Started {
        key: &'a str,
        target: &'a str,
        action: Action,
    },
    Finished {
        key: &'a str,
        target: &'a str,
        action: Action,
        outcome: &'a Outcome,
        duration: Duration,
    },
}

pub trait Reporter: Send + Sync {
    fn event(&self, e: Event<'_>);

    /// What probes of the targets found before the run (`--refresh`): drifted facts by
    /// node, and the nodes that could not be probed, with why.
    fn probed(
        &self,
        _drift: &BTreeMap<String, DriftFacts>,
        _unreachable: &BTreeMap<String, String>,
    ) {
    }

    /// The run took the environment's shared lock over (a lease left unrenewed, or a lock
    /// object that held no lease): said before anything runs.
    fn took_over(&self, _what: &crate::shared_state::TakenOver) {}

    /// A failed update on `target` was rolled back (`note`: what was put back, or why not).
    fn rolled_back(&self, _key: &str, _target: &str, _note: &str) {}

    /// Where the nodes' transfers to and from the binary cache are told (an image's fetch
    /// or push), owned: the kinds carry it into the tasks that move the bytes.
    fn transfers(&self) -> Arc<dyn crate::cache::Transfers> {
        Arc::new(crate::cache::Quiet)
    }
}

#[derive(Debug, Default)]
pub struct BuildReport {
    pub run: Option<ObjectId>,
    pub outcomes: Vec<NodeOutcome>,
    pub ran: usize,
    pub cached: usize,
    pub failed: usize,
    pub skipped: usize,
    pub deleted: usize,
    pub interrupted: bool,
    /// What stopped the run early (a store write that failed): the counts are what was done.
    pub error: Option<String>,
    /// The run lost the environment's lock (forced open, or its lease ran out) or found its
    /// state moved by another: it started nothing after it knew, and committed nothing.
    pub lock_lost: bool,
    /// Nodes whose records a `moved` declaration carried to their new key, nothing run.
    pub moved: usize,
    /// Warnings about the source against the state (`moved` lines that can go).
    pub notes: Vec<String>,
    /// What it did of each rollout (as its run record has it).
    pub rollouts: Vec<crate::record::RolloutOutcome>,
    /// Nodes whose changes a rollback put back (`run/rollback.rs`).
    pub rolled_back: usize,
}

/// Why a run broke off (its state is committed as far as it got); a failed step is not
/// this, but an outcome in the report.
#[derive(Debug)]
pub enum RunError {
    /// The store could not be written.
    Store(StoreError),
    /// The state moved under the run although the run holds the lock.
    StateMoved { env: String, conflict: RefConflict },
    /// A step's task panicked (a bug).
    Panicked(String),
    /// `destroy` could not remove VMs that never got a record.
    Sweep(StepError),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Store(e) => write!(f, "{e}"),
            RunError::StateMoved { env, conflict } => write!(
                f,
                "the state of `{env}` moved under this run (expected {:?}, found {:?}); nothing else should write it while the lock is held",
                conflict.expected, conflict.found
            ),
            RunError::Panicked(e) => write!(f, "a step panicked: {e}"),
            RunError::Sweep(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> RunError {
        RunError::Store(e)
    }
}

/// The store, the environment's lock and its state as this run advances it.
pub struct Env<'a> {
    pub store: &'a Store,
    pub lock: &'a EnvLock,
    pub base: Option<ObjectId>,
    pub state: State,
    pub records: BTreeMap<String, RealizationRecord>,
    /// The intents of steps that may have created things and have no record yet.
    pub intents: BTreeMap<String, Intent>,
    /// Records and intents the state names that are not in the store yet: written as one
    /// group by the next commit, which is what makes them count.
    unwritten: Vec<(ObjectId, Vec<u8>)>,
    last_commit: Instant,
}

impl<'a> Env<'a> {
    pub fn open(store: &'a Store, lock: &'a EnvLock) -> Result<Env<'a>, StoreError> {
        let (base, state) = State::current(store, lock.env())?;
        let records = state.load_records(store)?;
        let intents = state.load_intents(store)?;
        Ok(Env {
            store,
            lock,
            base,
            state,
            records,
            intents,
            unwritten: Vec::new(),
            last_commit: Instant::now(),
        })
    }

    pub fn commit(&mut self) -> Result<(), RunError> {
        self.store.put_many(&self.unwritten)?;
        self.unwritten.clear();
        match self.state.commit(self.store, self.lock, self.base)? {
            Ok(id) => {
                self.base = Some(id);
                self.last_commit = Instant::now();
                Ok(())
            }
            Err(conflict) => Err(RunError::StateMoved {
                env: self.lock.env().to_string(),
                conflict,
            }),
        }
    }

    fn commit_due(&self) -> bool {
        self.last_commit.elapsed() >= Duration::from_millis(300)
    }

    /// `value` as the object the state will name, written by the next commit.
    fn write_later<T: serde::Serialize>(&mut self, value: &T) -> ObjectId {
        let bytes = crate::store::json_bytes(value);
        let id = ObjectId::of(&bytes);
        self.unwritten.push((id, bytes));
        id
    }

    /// `bytes` as an object the state's records name, written by the next commit.
    fn write_bytes_later(&mut self, bytes: Vec<u8>) -> ObjectId {
        let id = ObjectId::of(&bytes);
        self.unwritten.push((id, bytes));
        id
    }

    fn put_record(&mut self, r: RealizationRecord) {
        let id = self.write_later(&r);
        self.state.records.insert(r.node.clone(), id);
        self.state.intents.remove(&r.node);
        self.intents.remove(&r.node);
        self.records.insert(r.node.clone(), r);
    }

    fn put_intent(&mut self, i: Intent) {
        let id = self.write_later(&i);
        self.state.intents.insert(i.node.clone(), id);
        self.intents.insert(i.node.clone(), i);
    }

    /// Whether a step of this run or an earlier one found `key`'s thing absent on the
    /// target `identity` and then may have created it.
    fn intended(&self, key: &str, identity: &TargetIdentity) -> bool {
        self.intents
            .get(key)
            .is_some_and(|i| i.target_identity == *identity)
    }

    fn forget(&mut self, key: &str) {
        self.state.records.remove(key);
        self.records.remove(key);
        self.state.intents.remove(key);
        self.intents.remove(key);
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Waiting,
    Queued,
    Done,
    Failed,
    Skipped,
}

/// The record of node `i` realized as `resolved`, observed as `applied`, on the target
/// `identity`. A thing envc created stays "created" across later updates of it.
pub fn realization_record(
    spec: &Spec,
    i: usize,
    resolved: &Resolved,
    applied: &Applied,
    identity: TargetIdentity,
    previous: Option<&RealizationRecord>,
    run: &str,
) -> RealizationRecord {
    let previous = previous.filter(|p| p.target_identity == identity);
    RealizationRecord {
        resolved_hash: resolved.hash.clone(),
        target_identity: identity,
        node: spec.nodes[i].key.clone(),
        derivation: spec.nodes[i].id.clone(),
        attrs: resolved.display.clone(),
        output_hash: output_hash(&applied.facts),
        facts: applied.facts.clone(),
        created: previous.map_or(applied.created, |p| p.created || applied.created),
        run: run.to_string(),
        at_unix: now_unix(),
        checks_hash: resolved.checks_hash(),
        undo: resolved.payload.undo(),
        adopted: previous.is_some_and(|p| p.adopted),
        content: None,
    }
}

/// What a build says of a thing it found already there and took over (the same or other
/// content, an installed package): not envc's to remove later.
const TAKEN_OVER: &str =
    "taken over: it was there before envc, so envc will leave it in place when it leaves the source";

/// What a build says of a node an `adopt` line took over, found as the source declares it.
const ADOPTED_AS_FOUND: &str = "adopted as found: nothing changed on the target";

/// ... and of one found different from the source, then updated in place.
const ADOPTED_UPDATED: &str =
    "adopted, and updated in place to what the source says; envc leaves it when it leaves the source";

/// Space set aside in the store at a run's start, to record how it ended on a full store.
const RESERVE: usize = 1 << 20;

/// One unit of work and the nodes it realizes.
enum Work {
    /// A node that runs by itself, on no target: a machine, an image, a read.
    Alone(usize, Box<dyn Unit>),
    /// A step on a target (`None` if its host could not be resolved).
    OnTarget(Option<Target>, Box<dyn Step>),
    /// First find which of these nodes' things are absent (their intents are written
    /// before the step runs), then the step.
    Probe(Option<Target>, Box<dyn Step>, Vec<usize>),
    /// Only run a node's postconditions (they changed; the node did not): it stands as
    /// `applied` (its record's facts) when they hold.
    Verify {
        node: usize,
        target: Option<Target>,
        applied: Applied,
    },
}

impl Work {
    /// The nodes whose checks run with it.
    fn checked_nodes(&self) -> Vec<usize> {
        match self {
            Work::OnTarget(_, step) | Work::Probe(_, step, _) => step.nodes(),
            Work::Verify { node, .. } => vec![*node],
            Work::Alone(..) => Vec::new(),
        }
    }
}

struct Done {
    results: Vec<(usize, Result<Applied, StepError>)>,
    /// What the nodes' checks found.
    checks: Vec<(usize, Vec<CheckResult>)>,
    elapsed: Duration,
    /// After a probe: the nodes found absent, and the step to run once their intents are
    /// committed.
    then: Option<(Vec<usize>, Work)>,
}

/// Where a node's target is reached: the host node's state key, its spec and its key.
#[derive(Clone)]
struct Target {
    key: String,
    host: HostSpec,
    recorded: Option<HostKey>,
}

const NO_TARGET: &str = "a node without a target cannot be realized here";

async fn execute(work: Work, conns: Arc<Connections>, machines: Arc<Machines>) -> Done {
    let started = Instant::now();
    let results = match work {
        Work::Alone(node, unit) => {
            let cx = UnitCx {
                conns: &conns,
                machines: &machines,
                store: machines.store(),
            };
            vec![(node, unit.run(cx).await)]
        }
        Work::OnTarget(target, step) => execute_step(target, step, &conns, machines.store()).await,
        // Checks only: `checked` runs them.
        Work::Verify { node, applied, .. } => vec![(node, Ok(applied))],
        Work::Probe(target, step, nodes) => {
            let all = step.nodes();
            return match probe_absent(target.as_ref(), step, &nodes, &conns).await {
                Ok((absent, step)) => Done {
                    results: Vec::new(),
                    checks: Vec::new(),
                    elapsed: started.elapsed(),
                    then: Some((absent, Work::OnTarget(target, step))),
                },
                Err(e) => Done {
                    results: all.into_iter().map(|i| (i, Err(e.clone()))).collect(),
                    checks: Vec::new(),
                    elapsed: started.elapsed(),
                    then: None,
                },
            };
        }
    };
    Done {
        results,
        checks: Vec::new(),
        elapsed: started.elapsed(),
        then: None,
    }
}

/// The checks of the nodes of one unit of work, by node.
type WorkChecks = BTreeMap<usize, Vec<CheckSpec>>;

/// `execute`, with the nodes' checks on their target: preconditions first (when `pre`; a
/// node whose precondition fails leaves the work before anything changes), postconditions
/// of each node that ran (one that fails makes the node fail: it is not recorded).
async fn checked(
    work: Work,
    checks: WorkChecks,
    pre: bool,
    conns: Arc<Connections>,
    machines: Arc<Machines>,
) -> Done {
    if checks.is_empty() {
        return execute(work, conns, machines).await;
    }
    let started = Instant::now();
    let target = match &work {
        Work::OnTarget(t, _) | Work::Probe(t, _, _) | Work::Verify { target: t, .. } => t.clone(),
        Work::Alone(..) => None,
    };
    let transport = match &target {
        Some(t) => conns
            .get(&t.key, &t.host, t.recorded.clone())
            .await
            .map(|c| c.0),
        None => Err(StepError::new(
            "a node without a target cannot be checked here",
        )),
    };
    let run = |specs: &'_ [CheckSpec], phase: Phase| {
        let transport = &transport;
        let specs = specs.to_vec();
        async move {
            match transport {
                Ok(t) => run_phase(t, &specs, phase).await,
                Err(e) => (Vec::new(), Err(e.clone())),
            }
        }
    };
    let mut found: Vec<(usize, Vec<CheckResult>)> = Vec::new();
    let mut refused: Vec<(usize, Result<Applied, StepError>)> = Vec::new();
    let mut work = Some(work);
    if pre {
        let mut failed = BTreeSet::new();
        for (i, specs) in &checks {
            if !specs.iter().any(|c| c.phase == Phase::Require) {
                continue;
            }
            let (results, ok) = run(specs, Phase::Require).await;
            found.push((*i, results));
            if let Err(e) = ok {
                failed.insert(*i);
                refused.push((*i, Err(e)));
            }
        }
        if !failed.is_empty() {
            work = match work {
                Some(Work::OnTarget(t, step)) => {
                    step.without(&failed).map(|s| Work::OnTarget(t, s))
                }
                Some(Work::Probe(t, step, mut probed)) => {
                    probed.retain(|i| !failed.contains(i));
                    step.without(&failed).map(|s| Work::Probe(t, s, probed))
                }
                other => other,
            };
        }
    }
    let mut done = match work {
        Some(w) => execute(w, conns, machines).await,
        None => Done {
            results: Vec::new(),
            checks: Vec::new(),
            elapsed: Duration::ZERO,
            then: None,
        },
    };
    for (i, result) in std::mem::take(&mut done.results) {
        let result = match (result, checks.get(&i)) {
            (Ok(applied), Some(specs)) if specs.iter().any(|c| c.phase == Phase::Expect) => {
                let (results, ok) = run(specs, Phase::Expect).await;
                found.push((i, results));
                ok.map(|()| applied)
            }
            (result, _) => result,
        };
        done.results.push((i, result));
    }
    done.results.extend(refused);
    done.checks.extend(found);
    done.elapsed = started.elapsed();
    done
}

/// Which of `nodes` (of `step`) are absent from the target, and the step to run then.
async fn probe_absent(
    target: Option<&Target>,
    step: Box<dyn Step>,
    nodes: &[usize],
    conns: &Connections,
) -> Result<Absent, StepError> {
    let t = target.ok_or_else(|| StepError::new(NO_TARGET))?;
    let (transport, _) = conns.get(&t.key, &t.host, t.recorded.clone()).await?;
    step.absent(&transport, nodes).await
}

async fn execute_step(
    target: Option<Target>,
    step: Box<dyn Step>,
    conns: &Connections,
    store: &Store,
) -> Vec<(usize, Result<Applied, StepError>)> {
    let nodes = step.nodes();
    let all = |e: StepError| nodes.iter().map(|i| (*i, Err(e.clone()))).collect();
    let Some(t) = target else {
        return all(StepError::new(NO_TARGET));
    };
    let (transport, host_key) = match conns.get(&t.key, &t.host, t.recorded).await {
        Ok(c) => c,
        Err(e) => return all(e),
    };
    let cx = StepCx {
        transport: &transport,
        host_key: &host_key,
        store,
        work_dir: &conns.ssh.work_dir,
    };
    step.run(cx).await
}

/// A new run's id: unique to this process and moment, and to what it runs (`what`: the
/// graph's hash, or the run a rollback goes back to). Names the run, never part of a hash.
pub(crate) fn new_run_id(what: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&std::process::id().to_le_bytes());
    h.update(
        &std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_le_bytes(),
    );
    h.update(what.as_bytes());
    h.finalize().to_hex()[..16].to_string()
}

/// Node `i` is done: its dependents wait for one input less.
fn release(
    i: usize,
    dependents: &[Vec<usize>],
    waiting_on: &mut [usize],
    ready: &mut VecDeque<usize>,
) {
    for d in &dependents[i] {
        waiting_on[*d] -= 1;
        if waiting_on[*d] == 0 {
            ready.push_back(*d);
        }
    }
}

pub struct Scheduler<'s> {
    spec: &'s Spec,
    files: &'s dyn SourceLoader,
    opts: &'s BuildOptions,
    conns: Arc<Connections>,
    machines: Arc<Machines>,
    cancel: Arc<AtomicBool>,
    reporter: &'s dyn Reporter,
    run_id: String,
    status: Vec<Status>,
    known: Vec<Option<Known>>,
    /// Per node: the action decided and its resolution, once assessed.
    decided: Vec<Option<(Action, Resolved)>>,
    outcomes: BTreeMap<usize, NodeOutcome>,
    deletions: Vec<NodeOutcome>,
    /// What the checkpoints have not written yet: the nodes whose outcome came since the
    /// last one, and how many deletions it wrote; with the last checkpoint's record, which
    /// the next one names as `earlier`.
    unrecorded: Vec<usize>,
    deletions_recorded: usize,
    last_checkpoint: Option<ObjectId>,
    failed_targets: BTreeSet<usize>,
    /// What nodes' checks found, until their outcome takes it.
    check_results: BTreeMap<usize, Vec<CheckResult>>,
    /// Objects waiting to be delivered, by repository node: (node, file, YAML).
    deliveries: BTreeMap<usize, Vec<(usize, String, String)>>,
    /// The commit each repository node got in this run.
    delivered: BTreeMap<usize, String>,
    report: BuildReport,
    started_unix: u64,
    /// The rollouts: nodes on a machine whose batch is not open yet wait here.
    gate: Gate<(usize, Action, Resolved)>,
    /// The live records when the run started, by node (with their objects): what a
    /// rollback goes back to.
    before: BTreeMap<String, (ObjectId, RealizationRecord)>,
}

mod rollback;

impl<'s> Scheduler<'s> {
    pub fn new(
        spec: &'s Spec,
        files: &'s dyn SourceLoader,
        opts: &'s BuildOptions,
        conns: Arc<Connections>,
        machines: Arc<Machines>,
        cancel: Arc<AtomicBool>,
        reporter: &'s dyn Reporter,
    ) -> Scheduler<'s> {
        let n = spec.nodes.len();
        let run_id = new_run_id(&spec.graph_hash);
        Scheduler {
            spec,
            files,
            opts,
            conns,
            machines,
            cancel,
            reporter,
            run_id,
            status: vec![Status::Waiting; n],
            known: vec![None; n],
            decided: vec![None; n],
            outcomes: BTreeMap::new(),
            deletions: Vec::new(),
            unrecorded: Vec::new(),
            deletions_recorded: 0,
            last_checkpoint: None,
            failed_targets: BTreeSet::new(),
            check_results: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            delivered: BTreeMap::new(),
            report: BuildReport::default(),
            started_unix: now_unix(),
            gate: Gate::new(spec, rollout::batches(spec, &opts.planned)),
            before: BTreeMap::new(),
        }
    }

    /// The action `plan` gave node `i` (for a node this run did not assess).
    fn planned(&self, i: usize) -> Action {
        self.opts.planned.get(i).copied().unwrap_or(Action::Update)
    }

    fn target_of(&self, i: usize) -> usize {
        self.spec.nodes[i].target.unwrap_or(i)
    }

    fn target_name(&self, i: usize) -> &str {
        &self.spec.nodes[self.target_of(i)].name
    }

    fn identity(&self, i: usize) -> Option<TargetIdentity> {
        self.known[self.target_of(i)]
            .as_ref()
            .and_then(|k| k.facts.get(fact::machine::FINGERPRINT))
            .map(|f| TargetIdentity::from(f.as_str()))
    }

    /// Text that may carry a secret (a command's output, an error quoting a file), as it
    /// may be shown and kept.
    fn redact(&self, text: &str) -> String {
        match &self.spec.secrets {
            Some(s) => s.redact(text),
            None => text.to_string(),
        }
    }

    fn redact_outcome(&self, outcome: Outcome) -> Outcome {
        match outcome {
            Outcome::Ok(note) => Outcome::Ok(note.map(|n| self.redact(&n))),
            Outcome::Failed(m) => Outcome::Failed(self.redact(&m)),
            Outcome::Skipped(m) => Outcome::Skipped(self.redact(&m)),
            Outcome::Cached => Outcome::Cached,
        }
    }

    fn redact_log(&self, log: Option<CommandLog>) -> Option<CommandLog> {
        log.map(|l| CommandLog {
            exit: l.exit,
            stdout: self.redact(&l.stdout),
            stderr: self.redact(&l.stderr),
        })
    }

    fn outcome(
        &mut self,
        i: usize,
        action: Action,
        outcome: Outcome,
        d: Duration,
        oh: Option<String>,
    ) {
        let outcome = self.redact_outcome(outcome);
        let mut checks = self.check_results.remove(&i).unwrap_or_default();
        for c in &mut checks {
            c.output = self.redact(&c.output);
        }
        let node = &self.spec.nodes[i];
        self.reporter.event(Event::Finished {
            key: &node.key,
            target: &self.spec.nodes[self.target_of(i)].name,
            action,
            outcome: &outcome,
            duration: d,
        });
        self.unrecorded.push(i);
        self.outcomes.insert(
            i,
            NodeOutcome {
                node: node.key.clone(),
                id: node.id.clone(),
                action,
                outcome,
                duration_ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                output_hash: oh,
                checks,
                log: None,
                tags: node.tags.clone(),
                moved_from: None,
                rollback: None,
            },
        );
    }

    /// Node `i`, renamed and otherwise what its record describes (`Action::Moved`): its
    /// record under its new key, nothing run on its target; its kind follows the rename
    /// where it keeps something by name (a QEMU VM's directory).
    fn carry(&mut self, i: usize, r: Resolved, env: &mut Env) -> Result<(), StepError> {
        let node = &self.spec.nodes[i];
        let old = (env.records.get(&node.key).cloned()).ok_or_else(|| {
            StepError::new(format!(
                "`{}` has no record to carry (this is a bug in envc)",
                node.key
            ))
        })?;
        let facts = crate::kinds::of(node.kind).moved(&self.machines, &old, &node.name)?;
        let rec = crate::moved::rekeyed(
            &old,
            &node.key,
            &node.id,
            &r,
            facts,
            &self.run_id,
            now_unix(),
        );
        let known = Known::of_record(&rec);
        let oh = known.output_hash.clone();
        env.put_record(rec);
        self.known[i] = Some(known);
        self.decided[i] = Some((Action::Moved, r));
        self.status[i] = Status::Done;
        self.report.moved += 1;
        self.outcome(i, Action::Moved, Outcome::Cached, Duration::ZERO, Some(oh));
        if let Some(o) = self.outcomes.get_mut(&i) {
            o.moved_from = Some(old.node);
        }
        Ok(())
    }

    /// Marks `i` failed or skipped, and everything downstream of it skipped.
    fn stop(
        &mut self,
        i: usize,
        status: Status,
        why: String,
        elapsed: Duration,
        dependents: &[Vec<usize>],
    ) {
        let action = self.decided[i]
            .as_ref()
            .map_or_else(|| self.planned(i), |d| d.0);
        self.status[i] = status.clone();
        if status == Status::Failed {
            self.report.failed += 1;
            self.gate.failed(self.target_of(i));
            if !self.opts.keep_going {
                self.failed_targets.insert(self.target_of(i));
            }
            self.outcome(i, action, Outcome::Failed(why), elapsed, None);
        } else {
            self.report.skipped += 1;
            self.outcome(i, action, Outcome::Skipped(why), Duration::ZERO, None);
        }
        let key = self.spec.nodes[i].key.clone();
        let mut work: Vec<usize> = dependents[i].clone();
        while let Some(d) = work.pop() {
            if matches!(self.status[d], Status::Waiting) {
                self.status[d] = Status::Skipped;
                self.report.skipped += 1;
                let action = self.planned(d);
                self.outcome(
                    d,
                    action,
                    Outcome::Skipped(format!("its input `{key}` did not complete")),
                    Duration::ZERO,
                    None,
                );
                work.extend(dependents[d].iter().copied());
            }
        }
    }

    /// Runs the graph, then deletes what left it. Records and state go to `env`. The run is
    /// in the history from its start (`unfinished`) to its end, whatever ended it: a store
    /// that fails a write ends the run `failed`, recorded in space set aside at its start,
    /// and the report says why.
    pub async fn run(mut self, env: &mut Env<'_>) -> Result<BuildReport, RunError> {
        let reserve = env.store.reserve(&self.run_id, RESERVE).ok();
        if self.opts.rollback {
            self.before = (env.state.records.iter())
                .filter_map(|(k, id)| Some((k.clone(), (*id, env.records.get(k)?.clone()))))
                .collect();
        }
        self.record_run(env, RunResult::Unfinished)?;
        let ended = self.realize(env).await;
        let mut outputs = self.resolve_outputs();
        // A targeted run leaves the outputs that read what it left out as they were.
        for name in self.spec.targeted.iter().flat_map(|t| &t.outputs_left_out) {
            if let Some(v) = env.state.outputs.get(name) {
                outputs.insert(name.clone(), v.clone());
            }
        }
        env.state.outputs = outputs;
        // A lock forced open since the last renewal is known before the last commit, which
        // it then refuses.
        env.lock.confirm();
        self.report.lock_lost |= env.lock.lost()
            || matches!(
                ended,
                Err(RunError::StateMoved { .. } | RunError::Store(StoreError::LockLost { .. }))
            );
        let result = if ended.is_err() {
            RunResult::Failed
        } else if self.report.interrupted {
            RunResult::Interrupted
        } else if self.report.failed > 0 {
            RunResult::Failed
        } else {
            RunResult::Ok
        };
        self.report.error = ended.err().map(|e| e.to_string());
        if let Err(e) = self.record_run(env, result) {
            // A full store: the space set aside is for this.
            reserve.as_ref().map(Reserve::release);
            if let Err(again) = self.record_run(env, result) {
                // Said once where the errors are the same (a lost lock stays lost).
                let (e, again) = (e.to_string(), again.to_string());
                let why = if again == e {
                    format!("this run could not be recorded in the store: {e}")
                } else {
                    format!("this run could not be recorded in the store: {again} (first: {e})")
                };
                self.report.error = Some(match self.report.error.take() {
                    Some(first) if first == e => {
                        format!("{first}\n(this run could not be recorded in the store either)")
                    }
                    Some(first) => format!("{first}; {why}"),
                    None => why,
                });
            }
        }
        self.report.outcomes = self.nodes_so_far();
        self.report.rollouts = self.gate.outcomes(self.spec);
        Ok(self.report)
    }

    /// Every node's outcome so far, deletions last.
    fn nodes_so_far(&self) -> Vec<NodeOutcome> {
        let nodes = self.outcomes.values().chain(&self.deletions);
        nodes.cloned().collect()
    }

    /// Writes the run's record as it stands and commits the state with it: while the run
    /// goes on (`unfinished`), a checkpoint of the outcomes since the last one; at its end,
    /// the whole record, which is what readers of a finished run read.
    fn record_run(&mut self, env: &mut Env, result: RunResult) -> Result<(), RunError> {
        let checkpoint = result == RunResult::Unfinished;
        let (nodes, earlier) = if checkpoint {
            let since = (self.unrecorded.iter())
                .filter_map(|i| self.outcomes.get(i))
                .chain(&self.deletions[self.deletions_recorded..]);
            (since.cloned().collect(), self.last_checkpoint)
        } else {
            (self.nodes_so_far(), None)
        };
        let run = RunRecord {
            run: self.run_id.clone(),
            env: env.lock.env().to_string(),
            command: self.opts.command.clone(),
            graph_hash: self.spec.graph_hash.clone(),
            lock_hash: self.opts.lock_hash.clone(),
            started_unix: self.started_unix,
            finished_unix: now_unix(),
            result,
            nodes,
            earlier,
            error: self.report.error.clone(),
            stacks: (self.spec.stacks.iter())
                .map(|(env, p)| (env.clone(), p.run.clone()))
                .collect(),
            targeted: self.spec.targeted.as_deref().cloned(),
            rollouts: self.gate.outcomes(self.spec),
            tools: self.opts.tools.clone(),
        };
        let id = env.store.put_json(&run)?;
        if checkpoint {
            self.unrecorded.clear();
            self.deletions_recorded = self.deletions.len();
            self.last_checkpoint = Some(id);
        }
        env.state.run = Some(id);
        self.report.run = Some(id);
        env.commit()
    }

    /// Commits the state when it is time, with the run's record as it stands (not once the
    /// lock is lost: the commit would be refused, and the steps still running may finish).
    fn checkpoint(&mut self, env: &mut Env) -> Result<(), RunError> {
        if env.commit_due() && !env.lock.lost() {
            self.record_run(env, RunResult::Unfinished)
        } else {
            Ok(())
        }
    }

    async fn realize(&mut self, env: &mut Env<'_>) -> Result<(), RunError> {
        let spec = self.spec;
        let n = spec.nodes.len();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut waiting_on: Vec<usize> = vec![0; n];
        for (i, node) in spec.nodes.iter().enumerate() {
            let mut inputs: Vec<usize> = node.inputs.clone();
            inputs.extend(node.target);
            inputs.sort_unstable();
            inputs.dedup();
            waiting_on[i] = inputs.len();
            for j in inputs {
                dependents[j].push(i);
            }
        }
        let mut ready: VecDeque<usize> = (0..n).filter(|i| waiting_on[*i] == 0).collect();
        let semaphore = Arc::new(Semaphore::new(self.opts.jobs.max(1)));
        let mut tasks: JoinSet<Done> = JoinSet::new();

        loop {
            let mut to_run: Vec<(usize, Action, Resolved)> = Vec::new();
            let mut newly_done: Vec<usize> = Vec::new();
            while let Some(i) = ready.pop_front() {
                if self.status[i] != Status::Waiting {
                    continue;
                }
                if self.cancel.load(Ordering::SeqCst) {
                    self.report.interrupted = true;
                    self.stop(
                        i,
                        Status::Skipped,
                        "interrupted".into(),
                        Duration::ZERO,
                        &dependents,
                    );
                    continue;
                }
                if env.lock.lost() {
                    self.report.lock_lost = true;
                    let why = format!(
                        "the lock of `{}` was taken from this run (forced open, or its lease ran out): nothing more starts",
                        env.lock.env()
                    );
                    self.stop(i, Status::Skipped, why, Duration::ZERO, &dependents);
                    continue;
                }
                if self.failed_targets.contains(&self.target_of(i)) {
                    let t = self.target_name(i).to_string();
                    self.stop(i, Status::Skipped, format!("an earlier step on `{t}` failed (--keep-going runs independent steps anyway)"), Duration::ZERO, &dependents);
                    continue;
                }
                let key = &spec.nodes[i].key;
                let identity = self.identity(i);
                let mut a = {
                    let known = &self.known;
                    let lookup = |j: usize| known[j].as_ref();
                    assess(
                        spec,
                        i,
                        &lookup,
                        env.records.get(key),
                        identity.as_ref().map(TargetIdentity::as_str),
                        self.opts.drift.get(key),
                        self.files,
                    )
                };
                let node = &spec.nodes[i];
                if kinds::of(node.kind).renews_trust()
                    && a.action == Action::Unchanged
                    && self.conns.trusted.contains(&node.name)
                {
                    // Trusting a new key means contacting the host to learn it.
                    a.action = Action::Update;
                }
                // Not recorded yet, and an `adopt` line: taken over as found, never created.
                if a.action == Action::Create
                    && spec.adoptions.contains_key(key)
                    && !env.records.contains_key(key)
                {
                    a.action = Action::Adopt;
                    let refused = match self.opts.adoptions.get(&i) {
                        Some(Found::Absent { why }) => {
                            Some(crate::adopt::absent_error(spec, i, why.as_deref()))
                        }
                        _ => None,
                    };
                    if let Some(why) = refused {
                        self.stop(i, Status::Failed, why, Duration::ZERO, &dependents);
                        continue;
                    }
                }
                match a.resolved {
                    Err(Resolution::Failed(m)) => {
                        self.stop(i, Status::Failed, m, Duration::ZERO, &dependents)
                    }
                    // A build reads every secret before it starts; never here.
                    Err(Resolution::Unread(secret)) => self.stop(
                        i,
                        Status::Failed,
                        format!(
                            "secret `{secret}` was not read before the run (this is a bug in envc)"
                        ),
                        Duration::ZERO,
                        &dependents,
                    ),
                    Err(Resolution::Pending(j)) => self.stop(
                        i,
                        Status::Failed,
                        format!(
                            "`{}` completed without the output this node needs",
                            spec.nodes[j].key
                        ),
                        Duration::ZERO,
                        &dependents,
                    ),
                    Ok(r) if a.action == Action::Moved => match self.carry(i, r, env) {
                        Ok(()) => newly_done.push(i),
                        Err(why) => self.stop(
                            i,
                            Status::Failed,
                            why.to_string(),
                            Duration::ZERO,
                            &dependents,
                        ),
                    },
                    Ok(r) if a.action == Action::Unchanged => {
                        let known = Known::of_record(&env.records[key]);
                        let oh = known.output_hash.clone();
                        self.known[i] = Some(known);
                        self.decided[i] = Some((Action::Unchanged, r));
                        self.status[i] = Status::Done;
                        self.report.cached += 1;
                        self.outcome(
                            i,
                            Action::Unchanged,
                            Outcome::Cached,
                            Duration::ZERO,
                            Some(oh),
                        );
                        newly_done.push(i);
                    }
                    Ok(r) => match r.payload.not_run(&spec.nodes[i]) {
                        Some(why) => {
                            self.decided[i] = Some((a.action, r));
                            self.stop(i, Status::Skipped, why, Duration::ZERO, &dependents)
                        }
                        None => {
                            self.decided[i] = Some((a.action, r.clone()));
                            self.status[i] = Status::Queued;
                            match self.gate.admit(self.target_of(i), (i, a.action, r)) {
                                Admit::Run(item) => to_run.push(item),
                                Admit::Held => {}
                                Admit::Stopped(why) => self.untouched(i, why, &dependents),
                            }
                        }
                    },
                }
            }
            for i in newly_done {
                release(i, &dependents, &mut waiting_on, &mut ready);
            }
            if !ready.is_empty() {
                // Cached nodes made more ready: assess those too before launching, so that
                // batches are as large as they can be.
                self.launch(to_run, env, &semaphore, &mut tasks);
                continue;
            }
            // A batch that is over opens the next (or stops its rollout); when nothing
            // else can move, a held batch opens anyway (its nodes wait for a later one's).
            let idle = to_run.is_empty() && tasks.is_empty() && ready.is_empty();
            let status = &self.status;
            let settled =
                |j: usize| matches!(status[j], Status::Done | Status::Failed | Status::Skipped);
            let (open, stopped) = self.gate.advance(spec, &settled, idle);
            for item in open {
                if self.cancel.load(Ordering::SeqCst) || env.lock.lost() {
                    // What the ready loop would have said, had it come by then.
                    self.report.interrupted |= self.cancel.load(Ordering::SeqCst);
                    let why = "interrupted before its batch started".to_string();
                    self.stop(item.0, Status::Skipped, why, Duration::ZERO, &dependents);
                } else {
                    to_run.push(item);
                }
            }
            for ((j, _, _), why) in stopped {
                self.untouched(j, why, &dependents);
            }
            if !ready.is_empty() {
                self.launch(to_run, env, &semaphore, &mut tasks);
                continue;
            }
            self.launch(to_run, env, &semaphore, &mut tasks);
            if tasks.is_empty() && self.gate.holds() {
                continue;
            }
            if tasks.is_empty() {
                for work in self.deliver(env, true) {
                    self.spawn(work, true, &semaphore, &mut tasks);
                }
            }
            let Some(joined) = tasks.join_next().await else {
                break;
            };
            let done = joined.map_err(|e| RunError::Panicked(e.to_string()))?;
            if let Some((absent, work)) = done.then {
                self.intend(&absent, &work, env)?;
                // Its preconditions held before the probe.
                self.spawn(work, false, &semaphore, &mut tasks);
            }
            for (i, results) in done.checks {
                self.check_results.entry(i).or_default().extend(results);
            }
            for (i, result) in done.results {
                let key = spec.nodes[i].key.clone();
                let (action, resolved) =
                    self.decided[i].clone().expect("queued nodes were decided");
                // A fact is kept in the record and read by later runs: a secret in one
                // (a command that printed it) would be stored in the clear.
                let result = result.and_then(|applied| {
                    match applied.facts.iter().find_map(|(k, v)| {
                        let s = self.spec.secrets.as_ref()?;
                        Some((k, s.found_in(v)?))
                    }) {
                        Some((fact, secret)) => Err(StepError::with_hint(
                            format!("`{key}` reported secret `{secret}` in its `{fact}`; envc does not keep secrets, so it was not recorded"),
                            "do not print the secret (capture only what other nodes need), or write it to a file on the target",
                        )),
                        None => Ok(applied),
                    }
                });
                match result {
                    Ok(mut applied) => {
                        let identity = if spec.nodes[i].kind.is_target() {
                            applied
                                .facts
                                .get(fact::machine::FINGERPRINT)
                                .map(|f| TargetIdentity::from(f.as_str()))
                        } else {
                            self.identity(i)
                        }
                        .unwrap_or_default();
                        // Found absent before a step that may not have been recorded.
                        applied.created |= env.intended(&key, &identity);
                        let first_here =
                            (env.records.get(&key)).is_none_or(|p| p.target_identity != identity);
                        let mut record = realization_record(
                            spec,
                            i,
                            &resolved,
                            &applied,
                            identity,
                            env.records.get(&key),
                            &self.run_id,
                        );
                        if action == Action::Adopt && !applied.created {
                            record.adopted = true;
                            if applied.note.is_none() || applied.note.as_deref() == Some(TAKEN_OVER)
                            {
                                applied.note = Some(ADOPTED_UPDATED.into());
                            }
                        }
                        if let Some(bytes) = resolved.payload.kept() {
                            record.content = Some(env.write_bytes_later(bytes.into_owned()));
                        }
                        if let Some(commit) =
                            applied.facts.get(fact::delivery::COMMIT).filter(|_| {
                                spec.nodes[i].target.is_some_and(|t| {
                                    kinds::of(spec.nodes[t].kind).holds().is_some()
                                })
                            })
                        {
                            self.delivered.insert(self.target_of(i), commit.clone());
                        }
                        // Found in place and taken over, not made: said, since a later
                        // removal leaves it there (it is not envc's to remove).
                        if first_here
                            && !record.created
                            && applied.note.is_none()
                            && kinds::of(spec.nodes[i].kind).removable().is_some()
                        {
                            applied.note = Some(TAKEN_OVER.to_string());
                        }
                        let known = Known::of_record(&record);
                        let oh = known.output_hash.clone();
                        env.put_record(record);
                        self.known[i] = Some(known);
                        self.status[i] = Status::Done;
                        self.report.ran += 1;
                        self.outcome(i, action, Outcome::Ok(applied.note), done.elapsed, Some(oh));
                        let log = self.redact_log(applied.log);
                        if let Some(o) = self.outcomes.get_mut(&i) {
                            o.log = log;
                        }
                        release(i, &dependents, &mut waiting_on, &mut ready);
                    }
                    Err(e) => {
                        self.stop(i, Status::Failed, e.to_string(), done.elapsed, &dependents);
                        self.after_failure(i, env, &dependents).await?;
                    }
                }
            }
            self.checkpoint(env)?;
        }

        self.report.interrupted |= self.cancel.load(Ordering::SeqCst);
        if !self.report.interrupted && !env.lock.lost() {
            self.delete_removed(env).await?;
        }
        Ok(())
    }

    /// Node `i`, held for a batch its rollout never started: skipped, with what depends
    /// on it, and its machine left as it was.
    fn untouched(&mut self, i: usize, why: String, dependents: &[Vec<usize>]) {
        let m = self.target_name(i).to_string();
        let why = format!("{why}; `{m}` left untouched");
        self.stop(i, Status::Skipped, why, Duration::ZERO, dependents);
    }

    /// How to reach target `t` (a host or VM node) as this run decided it.
    fn reach(&self, t: usize) -> Option<HostSpec> {
        let payload = &self.decided[t].as_ref()?.1.payload;
        let facts = self.known[t].as_ref().map(|k| &k.facts);
        payload.reach(&self.spec.nodes[t].name, facts, &self.conns)
    }

    fn target_for(&self, i: usize, env: &Env) -> Option<Target> {
        let t = self.spec.nodes[i].target?;
        let host = self.reach(t)?;
        let key = self.spec.nodes[t].key.clone();
        let recorded = self.known[t]
            .as_ref()
            .and_then(|k| recorded_key(&k.facts))
            .or_else(|| env.records.get(&key).and_then(|r| recorded_key(&r.facts)));
        Some(Target {
            key,
            host,
            recorded,
        })
    }

    fn launch(
        &mut self,
        to_run: Vec<(usize, Action, Resolved)>,
        env: &Env,
        semaphore: &Arc<Semaphore>,
        tasks: &mut JoinSet<Done>,
    ) {
        // Steps by target, each one batch of its kind there (files, packages) or one node.
        let mut steps: BTreeMap<usize, Vec<Box<dyn Step>>> = BTreeMap::new();
        let mut works: Vec<Work> = Vec::new();
        for (i, action, r) in to_run {
            let node = &self.spec.nodes[i];
            self.reporter.event(Event::Started {
                key: &node.key,
                target: self.target_name(i),
                action,
            });
            let t = self.target_of(i);
            let record = env.records.get(&node.key);
            if let (Action::Adopt, Some(Found::Same { facts })) =
                (action, self.opts.adoptions.get(&i))
            {
                // Found as declared: nothing to do there but its postconditions.
                works.push(Work::Verify {
                    node: i,
                    target: self.target_for(i, env),
                    applied: Applied {
                        facts: facts.clone(),
                        created: false,
                        note: Some(ADOPTED_AS_FOUND.into()),
                        log: None,
                    },
                });
                continue;
            }
            if action == Action::Check {
                // Only its postconditions run; it stands as recorded when they hold.
                works.push(Work::Verify {
                    node: i,
                    target: self.target_for(i, env),
                    applied: Applied {
                        facts: record.map(|r| r.facts.clone()).unwrap_or_default(),
                        created: record.is_some_and(|r| r.created),
                        note: Some("postconditions hold".into()),
                        log: None,
                    },
                });
                continue;
            }
            let identity = self.identity(i);
            let outcomes = &self.outcomes;
            let ran_now = |j: usize| outcomes.get(&j).is_some_and(|o| o.outcome.ran());
            let cx = Launching {
                node: i,
                spec: node,
                hash: &r.hash,
                display: &r.display,
                record,
                record_here: record.filter(|r| Some(&r.target_identity) == identity.as_ref()),
                ran_now: &ran_now,
                cache: self.opts.cache.as_ref(),
                adopt: (self.spec.adoptions.get(&node.key))
                    .filter(|_| action == Action::Adopt && node.target.is_none()),
            };
            match r.payload.launch(&cx) {
                Launch::Alone(unit) => works.push(Work::Alone(i, unit)),
                Launch::OnTarget(step) => {
                    let here = steps.entry(t).or_default();
                    let mut left = Some(step);
                    for s in here.iter_mut() {
                        left = match left {
                            Some(step) => s.absorb(step),
                            None => break,
                        };
                    }
                    here.extend(left);
                }
                Launch::Deliver { file, yaml } => {
                    self.deliveries.entry(t).or_default().push((i, file, yaml))
                }
            }
        }
        for step in steps.into_values().flatten() {
            let target = self.target_for(step.nodes()[0], env);
            // What is not known to be envc's already is probed first: found absent, it
            // gets an intent before the step may create it.
            let unknown: Vec<usize> = match step.probes() {
                false => Vec::new(),
                true => (step.nodes().into_iter())
                    .filter(|&i| {
                        let key = &self.spec.nodes[i].key;
                        let identity = self.identity(i).unwrap_or_default();
                        let created = env
                            .records
                            .get(key)
                            .is_some_and(|r| r.created && r.target_identity == identity);
                        !created && !env.intended(key, &identity)
                    })
                    .collect(),
            };
            works.push(if unknown.is_empty() {
                Work::OnTarget(target, step)
            } else {
                Work::Probe(target, step, unknown)
            });
        }
        works.extend(self.deliver(env, false));
        for work in works {
            self.spawn(work, true, semaphore, tasks);
        }
    }

    /// The deliveries whose repository has every object of the environment decided (one
    /// commit each, not one per object as they become ready), or all of them (`all`: when
    /// nothing else runs, an object may be waiting for one held here).
    fn deliver(&mut self, env: &Env, all: bool) -> Vec<Work> {
        let ready: Vec<usize> = self
            .deliveries
            .keys()
            .copied()
            .filter(|&t| {
                all || self
                    .objects_of(t)
                    .all(|j| self.status[j] != Status::Waiting)
            })
            .collect();
        let mut works = Vec::new();
        for t in ready {
            let Some(objects) = self.deliveries.remove(&t) else {
                continue;
            };
            let Some((holds, payload)) = self.holder(t) else {
                continue;
            };
            let write = objects.iter().map(|(_, f, y)| (f.clone(), y.clone()));
            let delivery = self.delivery(env, write.collect(), self.files_of(t));
            let Some(step) = holds.deliver(payload, objects, delivery) else {
                continue;
            };
            works.push(Work::OnTarget(self.target_for(t, env), step));
        }
        works
    }

    /// Holder node `t` (a repository) as this run decided it, and how it holds.
    fn holder(&self, t: usize) -> Option<(&'static dyn Holds, &Payload)> {
        let holds = kinds::of(self.spec.nodes[t].kind).holds()?;
        Some((holds, &self.decided[t].as_ref()?.1.payload))
    }

    /// Starts `work`, with its nodes' checks (preconditions only when `pre`).
    fn spawn(&self, work: Work, pre: bool, semaphore: &Arc<Semaphore>, tasks: &mut JoinSet<Done>) {
        let checks: WorkChecks = work
            .checked_nodes()
            .into_iter()
            .filter_map(|i| {
                let specs = self.decided[i].as_ref()?.1.check_specs().to_vec();
                (!specs.is_empty()).then_some((i, specs))
            })
            .collect();
        let conns = self.conns.clone();
        let machines = self.machines.clone();
        let semaphore = semaphore.clone();
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            checked(work, checks, pre, conns, machines).await
        });
    }

    /// Writes and commits the intents of the nodes of `work` found `absent`, before it runs.
    fn intend(&self, absent: &[usize], work: &Work, env: &mut Env) -> Result<(), RunError> {
        let Work::OnTarget(_, step) = work else {
            return Ok(());
        };
        for &i in absent {
            env.put_intent(Intent {
                node: self.spec.nodes[i].key.clone(),
                target_identity: self.identity(i).unwrap_or_default(),
                facts: step.intent_facts(i),
                run: self.run_id.clone(),
                at_unix: now_unix(),
            });
        }
        if absent.is_empty() {
            Ok(())
        } else {
            env.commit()
        }
    }

    fn resolve_outputs(&self) -> BTreeMap<String, serde_json::Value> {
        self.spec
            .outputs
            .iter()
            .map(|(name, v)| {
                (
                    name.clone(),
                    crate::substitute::output_json(
                        self.spec,
                        v,
                        &|j| self.known[j].as_ref(),
                        kinds::read_output,
                    ),
                )
            })
            .collect()
    }

    /// Removes from their targets the nodes whose records are live but which left the
    /// graph: services first, then files, then packages; what envc did not create is
    /// left in place and forgotten.
    async fn delete_removed(&mut self, env: &mut Env<'_>) -> Result<(), RunError> {
        // A targeted run spares what it left out and the records it keeps.
        let spared = (self.spec.targeted.iter()).flat_map(|t| t.left_out.iter().chain(&t.kept));
        let in_graph: BTreeSet<&str> = (self.spec.nodes.iter().map(|n| n.key.as_str()))
            .chain(spared.map(String::as_str))
            .collect();
        let gone = leaving(&|k| in_graph.contains(k), &env.records, &env.intents);
        let mut by_target: BTreeMap<String, Vec<RealizationRecord>> = BTreeMap::new();
        for r in gone {
            // Targets (no target of their own) are handled below, after what was on them.
            if let Some(target) = on_target(&r.node).and_then(|k| k.target) {
                by_target.entry(target).or_default().push(r);
            }
        }
        // Objects delivered to a repository leave it first, while its own record (where it
        // is) is still there.
        let repositories: Vec<String> = by_target
            .keys()
            .filter(|t| self.repository(t, env).is_some())
            .cloned()
            .collect();
        for name in repositories {
            let recs = by_target.remove(&name).unwrap_or_default();
            self.undeliver(env, &name, recs).await;
            self.checkpoint(env)?;
        }
        // Machines that leave and take what is on them along (a VM and its disk), by kind.
        // (An adopted one stays unless `--adopted`: what envc put on it is removed there.)
        let remove_adopted = self.opts.remove_adopted;
        let taken_along: BTreeMap<String, &str> = (env.records.iter())
            .filter(|(k, r)| !in_graph.contains(k.as_str()) && (!r.adopted || remove_adopted))
            .map(|(k, _)| k)
            .filter_map(|k| targetless(k))
            .filter_map(|k| Some((k.name, kinds::of(k.kind).takes_along()?)))
            .collect();
        for (target, mut recs) in by_target {
            // A repository is forgotten (it stays as it is) once no object is recorded in it.
            let repos: Vec<RealizationRecord> = recs
                .extract_if(.., |r| {
                    on_target(&r.node).is_some_and(|k| kinds::of(k.kind).holds().is_some())
                })
                .collect();
            for r in repos {
                let name = on_target(&r.node).map_or(String::new(), |k| k.name);
                if !env
                    .records
                    .keys()
                    .any(|k| on_target(k).is_some_and(|k| k.target.as_ref() == Some(&name)))
                {
                    self.report_deletion(
                        env,
                        &r.node,
                        &target,
                        Ok("forgotten; the repository stays as it is".into()),
                        Duration::ZERO,
                        None,
                    );
                }
            }
            if recs.is_empty() {
                continue;
            }
            let started = Instant::now();
            let mut results: Vec<Removal> = Vec::new();
            if let Some(said) = taken_along.get(&target) {
                // Its machine goes too, and everything on it.
                for r in recs {
                    self.report_deletion(
                        env,
                        &r.node,
                        &target,
                        Ok(said.to_string()),
                        Duration::ZERO,
                        None,
                    );
                }
                continue;
            }
            let host_ix = self.machine_named(&target);
            if host_ix.is_some_and(|h| self.failed_targets.contains(&h)) {
                continue;
            }
            let current = host_ix.and_then(|h| self.reach(h));
            let remove_adopted = self.opts.remove_adopted;
            let (mine, foreign): (Vec<_>, Vec<_>) =
                (recs.into_iter()).partition(|r| r.created || (remove_adopted && r.adopted));
            let type_of =
                |r: &RealizationRecord| on_target(&r.node).map(|k| (kinds::of(k.kind), k.name));
            let forgotten_why = |r: &RealizationRecord| {
                let removable = type_of(r)?.0.removable()?;
                removable.forgotten(r)
            };
            for r in &foreign {
                let said = match r.adopted {
                    true => "left as it was found: adopted (`destroy --adopted` removes it)",
                    false => type_of(r).map_or("left in place: envc did not create it", |t| {
                        t.0.left_in_place()
                    }),
                };
                results.push(Removal::said(r, said));
            }
            // What is only forgotten needs no visit to its target.
            let (mine, forgotten): (Vec<_>, Vec<_>) =
                mine.into_iter().partition(|r| forgotten_why(r).is_none());
            for r in &forgotten {
                let said = forgotten_why(r).unwrap_or("forgotten");
                results.push(Removal::said(r, said));
            }
            if !mine.is_empty() {
                match self
                    .conns
                    .to_target(&target, current.as_ref(), &env.records)
                    .await
                {
                    Err(e) => results.extend(mine.iter().map(|r| Removal::of(r, Err(e.clone())))),
                    Ok((t, _)) => {
                        let cx = Removing {
                            transport: &t,
                            secrets: self.spec.secrets.as_deref(),
                        };
                        // Kind by kind, in their removal order: a command's undo may need
                        // the files and services removed after it.
                        for (kind, removable) in kinds::by_removal_rank() {
                            let of_kind: Vec<(&RealizationRecord, String)> = mine
                                .iter()
                                .filter_map(|r| {
                                    let key = on_target(&r.node)?;
                                    (key.kind == kind).then_some((r, key.name))
                                })
                                .collect();
                            if !of_kind.is_empty() {
                                results.extend(removable.remove(&cx, of_kind).await);
                            }
                        }
                    }
                }
            }
            for r in results {
                self.report_deletion(env, &r.node, &target, r.result, started.elapsed(), r.log);
            }
            self.checkpoint(env)?;
        }
        // Records without a target of their own (`kind:name`) whose node left the graph:
        // VMs are stopped and their disks deleted; images stay in the store as a cache;
        // hosts are forgotten once nothing envc put on them is left.
        let without_target: Vec<(String, NodeKind, String)> = env
            .records
            .keys()
            .filter(|k| !in_graph.contains(k.as_str()))
            .filter_map(|k| {
                let key = targetless(k)?;
                Some((k.clone(), key.kind, key.name))
            })
            .collect();
        for (key, kind, name) in without_target {
            let started = Instant::now();
            let record = env.records[&key].clone();
            let machines = self.machines.clone();
            let released = (record.adopted && !remove_adopted)
                .then(|| kinds::of(kind).release(&machines, &record))
                .flatten();
            if let Some(released) = released {
                let res = released.await;
                self.report_deletion(env, &key, &name, res, started.elapsed(), None);
                self.checkpoint(env)?;
                continue;
            }
            let res =
                match kinds::of(kind).retire(&machines, &record) {
                    Some(done) => done.await,
                    None if env.records.keys().chain(env.intents.keys()).any(|k| {
                        on_target(k).is_some_and(|k| k.target.as_ref() == Some(&name))
                    }) =>
                    {
                        continue
                    }
                    None => Ok("forgotten".into()),
                };
            self.report_deletion(env, &key, &name, res, started.elapsed(), None);
            self.checkpoint(env)?;
        }
        if self.spec.nodes.is_empty() {
            // `destroy`: machines that never got a record (a failed creation) go too.
            for node_type in kinds::all() {
                let recorded: BTreeSet<String> = env
                    .records
                    .keys()
                    .filter_map(|k| targetless(k).filter(|k| k.kind == node_type.kind()))
                    .map(|k| k.name)
                    .collect();
                let swept = node_type.sweep(&self.machines, &recorded);
                if let Some(swept) = swept {
                    swept.await.map_err(RunError::Sweep)?;
                }
            }
        }
        Ok(())
    }

    /// The holder node (a repository) named `name`: its machine's name, how it holds, its
    /// payload, and whether it is in the graph (its record says where one that left the
    /// graph was).
    fn repository(
        &self,
        name: &str,
        env: &Env,
    ) -> Option<(String, &'static dyn Holds, Payload, Option<usize>)> {
        let in_graph = (self.spec.nodes.iter())
            .position(|n| kinds::of(n.kind).holds().is_some() && n.name == name);
        if let Some(ix) = in_graph {
            if let Some((holds, payload)) = self.holder(ix) {
                let machine = self.target_name(ix).to_string();
                return Some((machine, holds, payload.clone(), Some(ix)));
            }
        }
        let (key, record, holds) = env.records.iter().find_map(|(k, r)| {
            let key = on_target(k).filter(|k| k.name == name)?;
            let holds = kinds::of(key.kind).holds()?;
            Some((key, r, holds))
        })?;
        let payload = holds.holder_of_record(record)?;
        Some((key.target?, holds, payload, in_graph))
    }

    /// Removes the files of objects that left the environment from repository `name`: in
    /// the commit this run delivered there, or in one of their own.
    async fn undeliver(&mut self, env: &mut Env<'_>, name: &str, recs: Vec<RealizationRecord>) {
        let started = Instant::now();
        let Some((machine, holds, payload, ix)) = self.repository(name, env) else {
            return;
        };
        let results: Vec<Result<String, StepError>> =
            match ix.and_then(|ix| self.delivered.get(&ix)) {
                Some(commit) => {
                    let said = holds.removed_in(commit);
                    recs.iter().map(|_| Ok(said.clone())).collect()
                }
                None => {
                    let current = self.machine_named(&machine).and_then(|h| self.reach(h));
                    let keep = ix.map(|ix| self.files_of(ix)).unwrap_or_default();
                    let delivery = self.delivery(env, Vec::new(), keep);
                    match (self.conns)
                        .to_target(&machine, current.as_ref(), &env.records)
                        .await
                    {
                        Ok((t, _)) => {
                            let work_dir = &self.conns.ssh.work_dir;
                            (holds.undeliver(&t, &payload, &delivery, work_dir, &recs)).await
                        }
                        Err(e) => recs.iter().map(|_| Err(e.clone())).collect(),
                    }
                }
            };
        for (r, res) in recs.iter().zip(results) {
            self.report_deletion(env, &r.node, name, res, started.elapsed(), None);
        }
    }

    /// A delivery by this run of `write`, to a repository where the environment's objects
    /// are `keep`.
    fn delivery(
        &self,
        env: &Env,
        write: Vec<(String, String)>,
        keep: BTreeMap<String, Option<String>>,
    ) -> Delivery {
        Delivery {
            write,
            keep,
            environment: env.lock.env().to_string(),
            run: self.run_id.clone(),
            source: self.opts.source.clone(),
        }
    }

    /// The files of the objects delivered to repository node `ix`, each with its YAML when
    /// this run decided the object (cached or run; not one whose input failed): a delivery
    /// writes again what the branch lost of them and lists them all.
    fn files_of(&self, ix: usize) -> BTreeMap<String, Option<String>> {
        self.objects_of(ix)
            .map(|j| {
                let yaml = (self.decided[j].as_ref())
                    .and_then(|(_, r)| r.payload.rendered())
                    .map(|(_, yaml)| yaml);
                (envc_k8s::file_of_node(&self.spec.nodes[j].name), yaml)
            })
            .collect()
    }

    /// The machine node (a host, a VM) named `name`.
    fn machine_named(&self, name: &str) -> Option<usize> {
        (self.spec.nodes.iter()).position(|n| n.kind.is_target() && n.name == name)
    }

    /// The nodes delivered to repository node `ix`: what targets a holder is delivered to it
    /// (the compiler lets only objects target one).
    fn objects_of(&self, ix: usize) -> impl Iterator<Item = usize> + '_ {
        let nodes = &self.spec.nodes;
        (0..nodes.len()).filter(move |&j| nodes[j].target == Some(ix))
    }

    fn report_deletion(
        &mut self,
        env: &mut Env,
        key: &str,
        target: &str,
        res: Result<String, StepError>,
        d: Duration,
        log: Option<CommandLog>,
    ) {
        let outcome = self.redact_outcome(match &res {
            Ok(m) => Outcome::Ok(Some(m.clone())),
            Err(e) => Outcome::Failed(e.to_string()),
        });
        let log = self.redact_log(log);
        self.reporter.event(Event::Finished {
            key,
            target,
            action: Action::Delete,
            outcome: &outcome,
            duration: d,
        });
        match res {
            Ok(_) => {
                env.forget(key);
                self.report.deleted += 1;
            }
            Err(_) => self.report.failed += 1,
        }
        let id = env
            .records
            .get(key)
            .map_or(String::new(), |r| r.derivation.clone());
        self.deletions.push(NodeOutcome {
            node: key.to_string(),
            id,
            action: Action::Delete,
            outcome,
            duration_ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            output_hash: None,
            checks: Vec::new(),
            log,
            tags: BTreeMap::new(),
            moved_from: None,
            rollback: None,
        });
    }
}
