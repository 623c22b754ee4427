//! One environment's session: its store, its targets and the commands that reach them —
//! plan, build, destroy, drift, log, output. The command line only parses arguments and
//! renders what these return.
//!
//! Every command that compares targets with records goes through one path: the records,
//! what is visible locally (`local_drift`), then, when asked to look at the targets, a
//! plan that tells where each host is now, the probes, and the plan again with what the
//! probes found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envc_compiler::SourceLoader;

use crate::cache::CacheUse;
use crate::checks::{run_phase, CheckResult, CheckSpec, Phase};
use crate::config::{ConfigError, Shared, StateSettings};
use crate::connect::Connections;
use crate::envlock::{EnvLock, EnvLockError, Holder};
use crate::held::HeldDir;
use crate::kept::Persist;
use crate::machines::Machines;
use crate::plan::{plan, Action, Plan};
use crate::probe::{local_drift, probe, remote_drift, Probed, Reading};
use crate::record::DriftFacts;
use crate::record::{Intent, RealizationRecord, RunRecord, State};
use crate::remote::{Remote, RemoteError};
use crate::repair::{readable_history, Damage, History};
use crate::run::{BuildOptions, BuildReport, Env, Reporter, RunError, Scheduler};
use crate::shared_state::SharedState;
use crate::spec::{on_target, Spec};
use crate::store::{ObjectId, Store, StoreError};
use crate::substitute::Resolution;
use crate::tools::{missing_tools, MissingTool};
use crate::transport::{HostSpec, SshOptions};

/// Live records by node key.
type Records = BTreeMap<String, RealizationRecord>;

/// How targets are reached; the command line's `--ssh-config`, timeouts and trust.
#[derive(Clone, Debug)]
pub struct TargetOptions {
    pub ssh_config: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Hosts whose changed host key is accepted (after a reinstall).
    pub trust_host_key: BTreeSet<String>,
    pub boot_timeout: Duration,
    /// How long a connection stays open after the run for the next to reuse (zero: it ends
    /// with the run).
    pub ssh_persist: Duration,
}

/// Why a session command could not do its work (as opposed to a step that failed, which is
/// in the build report).
#[derive(Debug)]
pub enum SessionError {
    /// The store cannot be opened or read.
    Store {
        root: PathBuf,
        error: StoreError,
    },
    /// Another envc holds the environment.
    Locked(EnvLockError),
    /// The environment's lock or state cannot be used.
    State {
        env: String,
        error: String,
    },
    /// `output` of an environment that was never built.
    NeverBuilt {
        env: String,
        file: PathBuf,
    },
    /// Tools the nodes about to run need are missing; nothing ran.
    MissingTools(Vec<MissingTool>),
    /// envc.toml, a key, or a flag naming the cache or state is wrong.
    Config(ConfigError),
    /// The shared state or cache could not be reached.
    Remote(RemoteError),
    /// The run itself broke off; its state is committed as far as it got, unless `commit`
    /// says why not.
    Run {
        error: Box<RunError>,
        commit: Option<Box<RunError>>,
    },
    Io(String),
    /// A secret the environment uses cannot be read; nothing ran.
    Secrets(crate::secrets::SecretError),
    /// `envc rollback --to` names no run it can go back to.
    Rollback(crate::rollback::RollbackError),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // These name the object or ref themselves (in the bucket, or in the store):
            // the store's directory would point at the wrong place.
            SessionError::Store {
                error:
                    error @ (StoreError::Remote(_)
                    | StoreError::LockLost { .. }
                    | StoreError::BadRef { .. }
                    | StoreError::Corrupt { .. }
                    | StoreError::Missing(_)
                    | StoreError::Malformed { .. }),
                ..
            } => write!(f, "{error}"),
            SessionError::Store { root, error } => write!(
                f,
                "cannot open the store at {}: {error}\n  hint: set ENVC_STORE to a writable directory",
                root.display()
            ),
            SessionError::Locked(e) => write!(f, "{e}"),
            SessionError::State { env, error } => write!(f, "the state of `{env}`: {error}"),
            SessionError::NeverBuilt { env, file } => write!(
                f,
                "`{env}` was never built; run `envc build {}` first",
                file.display()
            ),
            SessionError::MissingTools(missing) => {
                let lines: Vec<String> = missing.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "{}\n  hint: `./scripts/setup` installs every tool envc drives; nothing was changed",
                    lines.join("\n")
                )
            }
            SessionError::Run { error, commit } => {
                write!(f, "{error}")?;
                match commit {
                    Some(c) => write!(f, "; and what it did could not be recorded: {c}"),
                    None => Ok(()),
                }
            }
            SessionError::Config(e) => write!(f, "{e}"),
            SessionError::Remote(e) => write!(f, "{e}"),
            SessionError::Io(e) => f.write_str(e),
            SessionError::Secrets(e) => write!(f, "{e}\n  nothing was run"),
            SessionError::Rollback(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SessionError {}

/// The store beside the env file (`.envc/`), or `$ENVC_STORE`.
pub fn store_root(env_file: &Path) -> PathBuf {
    if let Some(s) = std::env::var_os("ENVC_STORE") {
        return PathBuf::from(s);
    }
    crate::project::project_dir(env_file).join(".envc")
}

/// The environment's name: the file's stem (`prod.env` → `prod`).
pub fn env_name(env_file: &Path) -> String {
    env_file
        .file_stem()
        .map_or("env".into(), |s| s.to_string_lossy().into_owned())
}

/// A plan, and what the targets showed on the way to it.
pub struct PlanReport {
    pub plan: Plan,
    /// Nodes whose target differs from their record (locally visible, or probed).
    pub drift: BTreeMap<String, DriftFacts>,
    /// Nodes that could not be probed, and why.
    pub unreachable: BTreeMap<String, String>,
    /// Warnings about the source against the state: `moved` lines with nothing recorded
    /// under their old key.
    pub notes: Vec<String>,
    /// What the look before the plan found of each node an `adopt` line takes over, by key.
    pub adoptions: BTreeMap<String, crate::adopt::Found>,
    /// `adopt` lines whose node already has a record (they can go).
    pub adopt_warnings: Vec<String>,
}

/// What `drift --checks` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Per node, what its postconditions found (they stop at the first that fails).
    pub results: Vec<(String, Vec<CheckResult>)>,
    /// Nodes whose postconditions could not run, and why.
    pub unchecked: BTreeMap<String, String>,
}

impl CheckReport {
    /// The checks that did not hold: (node, result).
    pub fn failures(&self) -> impl Iterator<Item = (&str, &CheckResult)> {
        self.results
            .iter()
            .flat_map(|(k, rs)| rs.iter().filter(|r| !r.ok).map(move |r| (k.as_str(), r)))
    }
}

/// What `build` is asked to do beyond the graph.
pub struct BuildRequest {
    pub jobs: usize,
    pub keep_going: bool,
    /// Probe the targets first and repair what drifted.
    pub refresh: bool,
    /// Wait for another run of the environment instead of failing.
    pub wait: bool,
    /// `build` or `destroy`, for the run record and the lock's holder.
    pub command: String,
    /// blake3 of the lockfile the build used.
    pub lock_hash: Option<String>,
    /// Push what is built to the binary cache (`--push`); the project's `push = true`
    /// pushes too, whenever a signing key is at hand.
    pub push: bool,
    /// The commit of the environment's source, for the commits delivering its objects.
    pub source: Option<String>,
    /// `destroy --adopted`: what `adopt` lines took over is removed too, as if envc had
    /// made it.
    pub remove_adopted: bool,
    /// `--no-rollback`: a failed update leaves what it changed in place.
    pub no_rollback: bool,
}

/// An environment's runs as far back as they can be read.
pub struct RunHistory {
    /// Newest first; a run record that cannot be read is its object id and the damage.
    pub runs: Vec<Result<RunRecord, (ObjectId, Damage)>>,
    /// What ended the history early: the state that cannot be read (`None`: the ref).
    pub end: Option<(Option<ObjectId>, Damage)>,
}

/// Told when SIGINT arrives during a build: the first stops new steps, the second is the
/// user insisting (the command line exits at once).
pub trait Interrupts: Sync {
    fn interrupted(&self, again: bool);
}

pub struct Session {
    pub(crate) store: Store,
    pub env: String,
    pub env_file: PathBuf,
    pub target: TargetOptions,
    /// The project's binary cache and shared state, if it has them.
    pub shared: Shared,
}

impl Session {
    /// Opens the store of `env_file`'s environment.
    ///
    /// With a shared state (`[state]`, `--state`, `ENVC_STATE`), the local store keeps the
    /// objects as a working copy and the environment's head and lock live in the bucket; a
    /// `file://` state is a local store at that path.
    pub fn open(
        env_file: &Path,
        target: TargetOptions,
        shared: Shared,
    ) -> Result<Session, SessionError> {
        let root = store_root(env_file);
        let store = match &shared.state {
            Some(state) => state_store(&root, state)?,
            None => Store::open(&root).map_err(|error| SessionError::Store { root, error })?,
        };
        Ok(Session {
            store,
            env: env_name(env_file),
            env_file: env_file.to_path_buf(),
            target,
            shared,
        })
    }

    /// Reads the secrets `spec` uses and the store's key for their hashes, and gives them
    /// to it: before anything is planned or run, so a missing or undecryptable secret stops
    /// the command first. A spec without secrets still gets the key when the store has one
    /// (a file that held a secret is then still recognised when it leaves).
    ///
    /// Only a build (`create`) makes the store's key; a command that only reads (plan,
    /// drift) before any build hashes with a key of its own, which no record shares
    /// (nothing using a secret has been built yet, so nothing can match anyway).
    ///
    /// Without `create` (a command that only reads: plan, render, drift), a secret whose
    /// value is not at hand is no error: the nodes that use it are planned without it
    /// (`Resolution::Unread`), and [`crate::secrets::Secrets::unread`] says which and why.
    pub fn unseal(&self, spec: &mut Spec, create: bool) -> Result<(), SessionError> {
        let names = spec.secret_names();
        let key = self
            .store
            .secret_key(create && !names.is_empty())
            .map_err(|error| SessionError::Store {
                root: self.store.root().to_path_buf(),
                error,
            })?;
        let key = match key {
            Some(k) => k,
            None if names.is_empty() => return Ok(()),
            None => crate::store::new_key()
                .map_err(|e| SessionError::Io(format!("cannot make a key: {e}")))?,
        };
        let secrets = if create {
            let values = crate::secrets::load(&names, &self.shared.secrets)
                .map_err(SessionError::Secrets)?;
            crate::secrets::Secrets::new(values, key)
        } else {
            let at_hand = crate::secrets::load_available(&names, &self.shared.secrets)
                .map_err(SessionError::Secrets)?;
            crate::secrets::Secrets::partial(at_hand.values, key, at_hand.unread)
        };
        spec.secrets = Some(std::sync::Arc::new(secrets));
        Ok(())
    }

    /// The binary cache a build uses, if the project has one. An explicit `--push`
    /// without a signing key is an error before anything runs.
    pub fn cache_use(&self, push: bool) -> Result<Option<CacheUse>, SessionError> {
        let Some(settings) = &self.shared.cache else {
            return match push {
                true => Err(SessionError::Config(ConfigError::NoCache)),
                false => Ok(None),
            };
        };
        let cache = self.cache()?;
        if push && !cache.can_push() {
            return Err(SessionError::Config(ConfigError::NoSigningKey));
        }
        let push = push || (settings.push && cache.can_push());
        Ok(Some(CacheUse::new(cache, push)))
    }

    /// The project's binary cache, opened (with its signing key, if one is set).
    pub fn cache(&self) -> Result<crate::cache::BinaryCache, SessionError> {
        let settings = (self.shared.cache.as_ref()).ok_or(ConfigError::NoCache);
        settings
            .and_then(|s| s.open())
            .map_err(SessionError::Config)
    }

    /// What it means for a command that the environment's lock could not be taken.
    pub(crate) fn lock_error(&self, e: EnvLockError) -> SessionError {
        match e {
            e @ EnvLockError::Held { .. } => SessionError::Locked(e),
            EnvLockError::Remote(e) => SessionError::Remote(e),
            e => SessionError::State {
                env: self.env.clone(),
                error: e.to_string(),
            },
        }
    }

    pub(crate) fn store_error(&self, error: StoreError) -> SessionError {
        SessionError::Store {
            root: self.store.root().to_path_buf(),
            error,
        }
    }

    /// The environment's VMs (the `qemu` provider).
    pub(crate) fn machines(&self) -> Machines {
        self.machines_using(None)
    }

    /// The environment's VMs, their store taking pinned `.deb`s from `deb_cache` too.
    fn machines_using(&self, deb_cache: Option<CacheUse>) -> Machines {
        let machines = crate::kinds::vm::machines::machines(
            &self.store.clone().with_deb_cache(deb_cache),
            &self.env,
            self.target.boot_timeout.max(Duration::from_secs(1)),
        );
        // Where resources' providers come from, as `envc lock` reads it; a bad setting is
        // said by the first resource that needs a provider, not by runs that have none.
        let env = std::env::var(crate::config::PROVIDER_MIRROR_ENV).ok();
        let source = crate::config::provider_source(
            &crate::project::project_dir(&self.env_file),
            env.as_deref(),
        )
        .map_err(|e| e.to_string());
        machines.with_provider_source(source)
    }

    pub(crate) fn connections(
        &self,
        machines: &Machines,
    ) -> Result<(Connections, HeldDir), SessionError> {
        // Control sockets need short paths (108 bytes): keep them under the system temp dir.
        // The run's scratch directory for ssh control sockets and git clones, held while
        // the run lives, so that the next run removes those of runs that were killed. Kept
        // masters' own directory (`envc-ssh-UID`, `kept.rs`) has no `.held` and stays.
        let work = HeldDir::new(&std::env::temp_dir(), "envc-ssh-")
            .map_err(|e| SessionError::Io(format!("cannot create a temporary directory: {e}")))?;
        let second = Duration::from_secs(1);
        let persist = Persist::in_user_dir(self.target.ssh_persist);
        if let Some(p) = &persist {
            p.sweep();
        }
        let ssh = SshOptions {
            config_file: self.target.ssh_config.clone(),
            connect_timeout: self.target.connect_timeout.max(second),
            command_timeout: self.target.command_timeout.max(second),
            work_dir: work.path().to_path_buf(),
            persist,
        };
        let mut conns = Connections::new(
            ssh,
            self.target.trust_host_key.clone(),
            crate::kinds::reach_record,
        );
        conns.vm_identity = Some(machines.login_key().to_path_buf());
        Ok((conns, work))
    }

    /// The live records of the environment, and its intents (things steps may have
    /// created without recording them yet).
    pub fn live(&self) -> Result<(Records, BTreeMap<String, Intent>), SessionError> {
        let (_, state) = State::current(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        let records = state.load_records(&self.store);
        let intents = state.load_intents(&self.store);
        Ok((
            records.map_err(|e| self.store_error(e))?,
            intents.map_err(|e| self.store_error(e))?,
        ))
    }

    /// What differs from the records: what is visible locally, plus, with `conns`, what
    /// probes of the targets find (hosts reached where `first`, the plan before probing,
    /// says they are now): every record that reads back (`all`), or what every build reads
    /// back (a repository's objects; only of nodes that `first` leaves unchanged, on a
    /// target it leaves unchanged: the others run anyway, and a machine about to be
    /// started or moved is not contacted before the run does it).
    async fn observe(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
        records: &BTreeMap<String, RealizationRecord>,
        machines: &Machines,
        conns: Option<&Connections>,
        all: bool,
    ) -> (BTreeMap<String, DriftFacts>, Probed) {
        let mut drift = local_drift(records, &self.store, machines);
        // A build of an environment that delivers to no repository contacts nothing first.
        let some_read = all
            || records.keys().filter_map(|k| on_target(k)).any(|k| {
                (crate::kinds::of(k.kind).holds()).is_some_and(|h| h.read_on_every_build())
            });
        let Some(conns) = conns.filter(|_| some_read) else {
            let nothing = Probed {
                drift: BTreeMap::new(),
                unreachable: BTreeMap::new(),
            };
            return (drift, nothing);
        };
        // Where each host is now (what leaves the graph does not matter), and what stays.
        let first = plan(spec, records, &BTreeMap::new(), &drift, files);
        let settled = settled(spec, &first);
        let reading = match all {
            true => Reading::All,
            false => Reading::EveryBuild(&settled),
        };
        let mut probed = probe(
            records,
            &graph_hosts(&first),
            conns,
            spec.secrets.as_deref(),
            &self.env,
            reading,
        )
        .await;
        if all {
            let remote = remote_drift(records, machines).await;
            probed.drift.extend(remote.drift);
            probed.unreachable.extend(remote.unreachable);
        }
        drift.extend(probed.drift.clone());
        (drift, probed)
    }

    /// `envc plan` (and `why`, `drift`): the records, optional probes, then the plan.
    pub fn plan(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
        refresh: bool,
    ) -> Result<PlanReport, SessionError> {
        let (mut records, mut intents) = self.live()?;
        crate::moved::carry(spec, &mut records, &mut intents);
        let notes = crate::moved::stale(spec, &records);
        let machines = self.machines();
        let (drift, unreachable) = if refresh {
            let (conns, _work) = self.connections(&machines)?;
            runtime()?.block_on(async {
                let seen = self
                    .observe(spec, files, &records, &machines, Some(&conns), true)
                    .await;
                conns.close().await;
                (seen.0, seen.1.unreachable)
            })
        } else {
            (
                local_drift(&records, &self.store, &machines),
                BTreeMap::new(),
            )
        };
        let mut plan = plan(spec, &records, &intents, &drift, files);
        let pending = crate::adopt::pending(spec, &records);
        let mut adoptions = BTreeMap::new();
        if !pending.is_empty() {
            let (conns, _work) = self.connections(&machines)?;
            let found = runtime()?.block_on(async {
                let mut found = crate::adopt::look(
                    spec,
                    &plan,
                    &records,
                    &graph_hosts(&plan),
                    &conns,
                    &self.env,
                )
                .await;
                found.extend(
                    crate::adopt::look_machines(spec, &plan, &records, &machines, &conns).await,
                );
                conns.close().await;
                found
            });
            crate::adopt::mark(spec, &mut plan, &found, &pending);
            adoptions = (found.into_iter())
                .map(|(i, f)| (spec.nodes[i].key.clone(), f))
                .collect();
        }
        // A message about a node can quote what it was rendered from.
        if let Some(secrets) = &spec.secrets {
            for n in &mut plan.nodes {
                if let Err(Resolution::Failed(m)) = &mut n.assessment.resolved {
                    *m = secrets.redact(m);
                }
            }
        }
        Ok(PlanReport {
            adopt_warnings: crate::adopt::already_managed(spec, &records),
            plan,
            drift,
            unreachable,
            notes,
            adoptions,
        })
    }

    /// `envc drift --checks`: runs again, on their targets, the postconditions of every
    /// node that has a live record, with the values its inputs' records hold. Read-only:
    /// no record changes, whatever the checks find.
    pub fn run_checks(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
    ) -> Result<CheckReport, SessionError> {
        let (mut records, mut intents) = self.live()?;
        crate::moved::carry(spec, &mut records, &mut intents);
        let machines = self.machines();
        let p = plan(spec, &records, &intents, &BTreeMap::new(), files);
        let hosts = graph_hosts(&p);
        let mut report = CheckReport::default();
        // By target: (node key, its postconditions).
        let mut by_target: BTreeMap<String, Vec<(String, Vec<CheckSpec>)>> = BTreeMap::new();
        for n in &p.nodes {
            let node = &spec.nodes[n.index];
            if !node.checks.iter().any(|c| c.phase == Phase::Expect) {
                continue;
            }
            // As drift: only what was built is compared.
            if !records.contains_key(&node.key) {
                continue;
            }
            let Some(t) = node.target else { continue };
            match n.assessment.resolved.as_ref().map(|r| &r.checks) {
                Ok(Ok(cs)) => {
                    let expect: Vec<CheckSpec> = cs
                        .iter()
                        .filter(|c| c.phase == Phase::Expect)
                        .cloned()
                        .collect();
                    let target = spec.nodes[t].name.clone();
                    by_target
                        .entry(target)
                        .or_default()
                        .push((node.key.clone(), expect));
                }
                Ok(Err(Resolution::Pending(j))) | Err(Resolution::Pending(j)) => {
                    report.unchecked.insert(
                        node.key.clone(),
                        format!(
                            "its checks read `{}`, which is not built",
                            spec.nodes[*j].key
                        ),
                    );
                }
                Ok(Err(Resolution::Failed(m))) | Err(Resolution::Failed(m)) => {
                    let m = spec.secrets.as_ref().map_or(m.clone(), |s| s.redact(m));
                    report.unchecked.insert(node.key.clone(), m);
                }
                Ok(Err(Resolution::Unread(secret))) | Err(Resolution::Unread(secret)) => {
                    report.unchecked.insert(
                        node.key.clone(),
                        format!("it uses secret `{secret}`, whose value is not at hand"),
                    );
                }
            }
        }
        if by_target.is_empty() {
            return Ok(report);
        }
        let (conns, _work) = self.connections(&machines)?;
        runtime()?.block_on(async {
            for (target, nodes) in by_target {
                match conns.to_target(&target, hosts.get(&target), &records).await {
                    Err(e) => {
                        for (key, _) in nodes {
                            report.unchecked.insert(key, e.to_string());
                        }
                    }
                    Ok((t, _)) => {
                        for (key, expect) in nodes {
                            let (mut results, _) = run_phase(&t, &expect, Phase::Expect).await;
                            if let Some(secrets) = &spec.secrets {
                                for r in &mut results {
                                    r.output = secrets.redact(&r.output);
                                }
                            }
                            report.results.push((key, results));
                        }
                    }
                }
            }
            conns.close().await;
        });
        Ok(report)
    }

    /// `envc build` (and `envc destroy`, which builds an empty graph).
    pub fn build(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
        request: &BuildRequest,
        reporter: &dyn Reporter,
        interrupts: &'static dyn Interrupts,
    ) -> Result<BuildReport, SessionError> {
        let cache = (self.cache_use(request.push)?).map(|c| CacheUse {
            transfers: reporter.transfers(),
            ..c
        });
        let lock = EnvLock::acquire(
            &self.store,
            &self.env,
            request.wait,
            &Holder::current(&format!("envc {}", request.command)),
        )
        .map_err(|e| self.lock_error(e))?;
        if let Some(what) = lock.took_over() {
            reporter.took_over(what);
        }
        let mut env = Env::open(&self.store, &lock).map_err(|e| SessionError::State {
            env: self.env.clone(),
            error: e.to_string(),
        })?;
        // Renamed nodes take their records along; the state commits that with the run. A
        // line onto records of their own (the CLI refuses it first) changes nothing.
        if let Some(c) = crate::moved::carry(spec, &mut env.records, &mut env.intents).first() {
            return Err(SessionError::State {
                env: self.env.clone(),
                error: format!(
                    "moved {} -> {}: `{}` has records of its own (moved::target-exists); nothing was changed",
                    c.from,
                    c.to,
                    c.taken.join("`, `")
                ),
            });
        }
        let notes = crate::moved::stale(spec, &env.records);
        crate::moved::carry(spec, &mut env.state.records, &mut env.state.intents);
        // Pinned .debs the store lacks come from the binary cache first, and go to it.
        let machines = Arc::new(self.machines_using(cache.clone()));
        let (conns, _work) = self.connections(&machines)?;
        let conns = Arc::new(conns);
        let rt = runtime()?;
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let cancel = cancel.clone();
            rt.spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    cancel.store(true, Ordering::SeqCst);
                    interrupts.interrupted(false);
                    if tokio::signal::ctrl_c().await.is_ok() {
                        interrupts.interrupted(true);
                    }
                }
            });
        }
        // Every build reads back what others change as a matter of course (a GitOps
        // repository: a force-push, a colleague's commit); `--refresh` reads back all.
        let (drift, probed) = rt.block_on(self.observe(
            spec,
            files,
            &env.records,
            &machines,
            Some(&*conns),
            request.refresh,
        ));
        // What the probes found; what is visible locally is the plan's business.
        reporter.probed(&probed.drift, &probed.unreachable);
        // Every tool the nodes about to run need, before any of them runs.
        let mut first = plan(spec, &env.records, &env.intents, &drift, files);
        // What adopted nodes find on their targets decides whether they run at all.
        let pending = crate::adopt::pending(spec, &env.records);
        let adoptions = match pending.is_empty() {
            true => BTreeMap::new(),
            false => rt.block_on(async {
                let mut found = crate::adopt::look(
                    spec,
                    &first,
                    &env.records,
                    &graph_hosts(&first),
                    &conns,
                    &self.env,
                )
                .await;
                found.extend(
                    crate::adopt::look_machines(spec, &first, &env.records, &machines, &conns)
                        .await,
                );
                found
            }),
        };
        crate::adopt::mark(spec, &mut first, &adoptions, &pending);
        let missing = missing_tools(
            first
                .nodes
                .iter()
                .filter(|n| !matches!(n.assessment.action, Action::Unchanged | Action::Moved))
                .map(|n| &spec.nodes[n.index])
                .map(|n| (n.kind, crate::kinds::of(n.kind).tools_for(n))),
        );
        if !missing.is_empty() {
            return Err(SessionError::MissingTools(missing));
        }
        let opts = BuildOptions {
            jobs: request.jobs,
            keep_going: request.keep_going,
            command: request.command.clone(),
            drift,
            lock_hash: request.lock_hash.clone(),
            tools: crate::locking::tools_here(spec),
            planned: {
                let mut planned = vec![Action::Update; spec.nodes.len()];
                for n in &first.nodes {
                    planned[n.index] = n.assessment.action;
                }
                planned
            },
            cache,
            source: request.source.clone(),
            adoptions,
            remove_adopted: request.remove_adopted,
            rollback: !request.no_rollback,
        };
        let scheduler = Scheduler::new(
            spec,
            files,
            &opts,
            conns.clone(),
            machines,
            cancel.clone(),
            reporter,
        );
        let result = rt.block_on(async {
            let r = scheduler.run(&mut env).await;
            conns.close().await;
            r
        });
        match result {
            Ok(mut report) => {
                report.notes = notes;
                Ok(report)
            }
            Err(error) => {
                // Keep what the run got done; if even that fails, say so too.
                let commit = env.commit().err().map(Box::new);
                Err(SessionError::Run {
                    error: Box::new(error),
                    commit,
                })
            }
        }
    }

    /// The environment's runs, newest first (intermediate commits of one run share its
    /// record, so each run is listed once). A damaged run is listed as such, and a damaged
    /// state ends the history: what is readable is still worth showing.
    pub fn history(&self) -> Result<RunHistory, SessionError> {
        let History { states, end } =
            readable_history(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        let mut seen = BTreeSet::new();
        // A run's record is rewritten as it goes (`unfinished` at its start, then its
        // checkpoints): the newest wins, and only its chain is read.
        let mut seen_runs = BTreeSet::new();
        let mut runs = Vec::new();
        for (_, state) in states {
            let Some(run_id) = state.run else { continue };
            if !seen.insert(run_id) {
                continue;
            }
            let newest = self.store.get_json::<RunRecord>(&run_id);
            if newest.is_ok_and(|run| !seen_runs.insert(run.run)) {
                continue;
            }
            runs.push(match RunRecord::load(&self.store, &run_id) {
                Ok(run) => Ok(run),
                Err(e) => Err((run_id, Damage::of(e).map_err(|e| self.store_error(e))?)),
            });
        }
        Ok(RunHistory { runs, end })
    }

    /// What the environment's last build published, for the environments that reference
    /// it (`None`: never built).
    pub fn published(&self) -> Result<Option<crate::stack::Published>, SessionError> {
        let (_, state) = State::current(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        let Some(run) = state.run else {
            return Ok(None);
        };
        let record = RunRecord::load(&self.store, &run).map_err(|e| self.store_error(e))?;
        Ok(Some(crate::stack::Published {
            run: record.run,
            outputs: state.outputs,
        }))
    }

    /// The environment's outputs as of its last build.
    pub fn outputs(&self) -> Result<BTreeMap<String, serde_json::Value>, SessionError> {
        let (_, state) = State::current(&self.store, &self.env).map_err(|e| self.store_error(e))?;
        if state.run.is_none() {
            return Err(SessionError::NeverBuilt {
                env: self.env.clone(),
                file: self.env_file.clone(),
            });
        }
        Ok(state.outputs)
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, SessionError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| SessionError::Io(format!("cannot start the async runtime: {e}")))
}

/// Hosts by name as the graph has them now, resolved from the plan (for probes).
/// The keys of the nodes plan `p` leaves unchanged, on targets it leaves unchanged (and
/// their targets in turn: a repository's host).
fn settled(spec: &Spec, p: &Plan) -> BTreeSet<String> {
    let mut unchanged = vec![false; spec.nodes.len()];
    for n in &p.nodes {
        unchanged[n.index] = n.assessment.action == Action::Unchanged;
    }
    let stays = |i: usize| {
        let mut at = Some(i);
        // A target's chain is short (an object, its repository, its host); the bound
        // only guards against a cycle no compiled graph has.
        for _ in 0..spec.nodes.len() {
            match at {
                Some(j) if unchanged[j] => at = spec.nodes[j].target,
                Some(_) => return false,
                None => return true,
            }
        }
        false
    };
    (0..spec.nodes.len())
        .filter(|&i| stays(i))
        .map(|i| spec.nodes[i].key.clone())
        .collect()
}

fn graph_hosts(p: &Plan) -> BTreeMap<String, HostSpec> {
    p.nodes
        .iter()
        .filter_map(|n| n.assessment.resolved.as_ref().ok()?.host())
        .map(|h| (h.name.clone(), h.clone()))
        .collect()
}

/// The store a state names: a local store for `file://`, else the local store at
/// `local_root` as the working copy of objects, with the state in the bucket.
pub fn state_store(
    local_root: &std::path::Path,
    state: &StateSettings,
) -> Result<Store, SessionError> {
    // A URL that names no state envc can keep is a mistake in the input, not an outage.
    let config = |e| SessionError::Config(crate::config::ConfigError::Remote(e));
    if let Some(path) = url::Url::parse(&state.url)
        .ok()
        .filter(|u| u.scheme() == "file")
        .and_then(|u| u.to_file_path().ok())
    {
        return Store::open(&path).map_err(|error| SessionError::Store { root: path, error });
    }
    let remote = Remote::open(&state.url).map_err(config)?;
    let shared = SharedState::open(remote, state.lease).map_err(config)?;
    let local = Store::open(local_root).map_err(|error| SessionError::Store {
        root: local_root.to_path_buf(),
        error,
    })?;
    Ok(local.with_shared_state(shared))
}
