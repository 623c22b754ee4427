//! A property test of the shared state, in the manner of Terraform's backend lock tests and
//! Pulumi's snapshot-integrity fuzzing: several runners on one bucket of the real S3 server
//! (moto, tests/support/servers.rs) take the lock, read the head, commit, are killed (with or
//! without their lease renewed until then, some between uploading a state and moving the
//! head), stall past their lease while another takes the lock over, and force the lock open,
//! in an order drawn from a seed. After every step the head is one of the committed states;
//! after every sequence the history, read through a store that never saw it (every object
//! fetched from the bucket and checked against its id), is exactly the committed states, in
//! the order they were committed.
//!
//! The sequence of steps is the seed's; what each step does can depend on timing (a lease
//! renewal on a loaded machine may come late and lose the lock), which the property must
//! hold under as well. `ENVC_PROPS_SEED=N` runs that seed alone (a failure prints its seed).

#![allow(clippy::unwrap_used)]

#[path = "../../tests/support/servers.rs"]
mod servers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use envc_executor::envlock::Holder;
use envc_executor::record::State;
use envc_executor::remote::Remote;
use envc_executor::shared_state::{LeaseGuard, SharedState, Watch};
use envc_executor::store::{HeldLock, ObjectId, Store, StoreError};
use servers::S3Server;

const ENV: &str = "prod";
const LEASE: Duration = Duration::from_secs(1);
const RUNNERS: usize = 3;
const STEPS: usize = 48;
const SEEDS: [u64; 7] = [1, 0x5eed, 0xdead_beef, 20_261_122, 77, 3, 0x0c0f_fee5];

/// xorshift64*: enough randomness for choosing steps, and the same from the same seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn s3(server: &S3Server, url: &str) -> Remote {
    let endpoint = server.endpoint();
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_access_key_id", servers::S3_ACCESS_KEY_ID),
        ("aws_secret_access_key", servers::S3_SECRET_ACCESS_KEY),
        ("aws_region", servers::S3_REGION),
        ("aws_allow_http", "true"),
    ];
    Remote::open_with(url, &options, Some(Duration::from_secs(10))).unwrap()
}

/// How a runner holds the lock.
enum Lock {
    /// Renewed in the background, as a build holds it.
    Renewed(LeaseGuard),
    /// Taken and never renewed: a runner that stalls (it goes on believing it holds the
    /// lock, as a process stopped for longer than its lease does) or was killed.
    Stalled,
}

/// The lock as the store sees it when a runner commits.
struct Held<'a>(&'a Lock);

impl HeldLock for Held<'_> {
    fn env(&self) -> &str {
        ENV
    }

    fn lost(&self) -> bool {
        match self.0 {
            Lock::Renewed(guard) => guard.lost(),
            Lock::Stalled => false,
        }
    }
}

struct Runner {
    name: String,
    dir: PathBuf,
    url: String,
    store: Store,
    lock: Option<Lock>,
    watch: Watch,
    /// The head it read and builds on: `None` until it reads one.
    base: Option<Option<ObjectId>>,
}

impl Runner {
    fn open(server: &S3Server, dir: &Path, url: &str, name: &str) -> Runner {
        let store = Store::open(dir)
            .unwrap()
            .with_shared_state(SharedState::open(s3(server, url), LEASE).unwrap());
        Runner {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            url: url.to_string(),
            store,
            lock: None,
            watch: Watch::default(),
            base: None,
        }
    }

    fn shared(&self) -> &Arc<SharedState> {
        self.store.shared().unwrap()
    }

    /// Killed: its lease is neither renewed nor released, and what it held in memory (the
    /// objects not yet uploaded, the head it read) is gone; its store on disk stays.
    fn kill(&mut self, server: &S3Server) {
        if let Some(Lock::Renewed(guard)) = self.lock.take() {
            guard.abandon();
        }
        *self = Runner::open(server, &self.dir, &self.url, &self.name);
    }
}

enum Step {
    Lock,
    Read,
    Commit,
    Race,
    KillMidCommit,
    Kill,
    Release,
    ForceUnlock,
    Sleep,
}

/// One commit of `runner` on the head it read, its state told apart by `tag`; with
/// `barrier`, the head moves only once every racer is about to move it. What happened, and
/// the state if it was committed.
fn commit(
    runner: &mut Runner,
    tag: String,
    barrier: Option<&std::sync::Barrier>,
) -> (String, Option<ObjectId>) {
    let (Some(lock), Some(base)) = (&runner.lock, runner.base) else {
        return ("commit: holds no lock or read no head".into(), None);
    };
    let mut state = State {
        previous: base,
        ..State::default()
    };
    state
        .outputs
        .insert(runner.name.clone(), serde_json::json!(tag));
    let id = runner.store.put_json(&state).unwrap();
    if let Some(b) = barrier {
        b.wait();
    }
    let name = &runner.name;
    match runner.store.update_ref(&Held(lock), base, id) {
        Ok(Ok(())) => {
            // It goes on from its own commit, as a run's checkpoints do.
            runner.base = Some(Some(id));
            (format!("{name} commit {id:?}: committed"), Some(id))
        }
        Ok(Err(conflict)) => {
            let did = format!(
                "{name} commit {id:?}: refused, head is {:?}",
                conflict.found
            );
            runner.base = None;
            (did, None)
        }
        Err(StoreError::LockLost { .. }) => {
            runner.lock = None;
            runner.base = None;
            (format!("{name} commit {id:?}: refused, lock lost"), None)
        }
        Err(e) => panic!("commit: {e}"),
    }
}

/// What one sequence did, for the message of a failure.
struct Trace(Vec<String>);

fn run_sequence(server: &S3Server, seed: u64, root: &Path) {
    let url = format!("s3://state/seq-{seed:x}");
    let mut rng = Rng::new(seed);
    let mut runners: Vec<Runner> = (0..RUNNERS)
        .map(|i| Runner::open(server, &root.join(format!("r{i}")), &url, &format!("r{i}")))
        .collect();
    let observer = Runner::open(server, &root.join("observer"), &url, "observer");
    let mut committed: Vec<ObjectId> = Vec::new();
    let mut trace = Trace(Vec::new());
    let mut serial = 0u64;
    for step in 0..STEPS {
        let r = rng.below(RUNNERS);
        // Mostly a runner's next step (lock, read, commit), sometimes a disruption, and
        // sometimes every runner that believes it holds the lock commits at once.
        let action = match rng.below(100) {
            0..=2 => Step::KillMidCommit,
            3..=5 => Step::Kill,
            6..=13 => Step::ForceUnlock,
            14..=23 => Step::Sleep,
            24..=27 => Step::Release,
            28..=41 => Step::Race,
            _ if runners[r].lock.is_none() => Step::Lock,
            _ if runners[r].base.is_none() || rng.below(5) == 0 => Step::Read,
            _ => Step::Commit,
        };
        if let Step::Race = action {
            let barrier = std::sync::Barrier::new(
                runners
                    .iter()
                    .filter(|r| r.lock.is_some() && r.base.is_some())
                    .count(),
            );
            let results: Vec<(String, Option<ObjectId>)> = std::thread::scope(|s| {
                let racing: Vec<_> = runners
                    .iter_mut()
                    .filter(|r| r.lock.is_some() && r.base.is_some())
                    .map(|runner| {
                        serial += 1;
                        let tag = format!("{seed:x}-{serial}");
                        let barrier = &barrier;
                        s.spawn(move || commit(runner, tag, Some(barrier)))
                    })
                    .collect();
                racing.into_iter().map(|t| t.join().unwrap()).collect()
            });
            let winners: Vec<ObjectId> = results.iter().filter_map(|(_, id)| *id).collect();
            let did: Vec<String> = results.into_iter().map(|(d, _)| d).collect();
            trace.0.push(format!("{step:2} race: {}", did.join("; ")));
            check(
                winners.len() <= 1,
                seed,
                &trace,
                &format!("{} commits of one race went through", winners.len()),
            );
            committed.extend(winners);
        } else {
            let runner = &mut runners[r];
            let did: String = match action {
                // Take the lock (or go on watching it).
                Step::Lock => {
                    let me = Holder::current(&runner.name);
                    let shared = runner.shared().clone();
                    match shared.try_lock(ENV, &me, &mut runner.watch).unwrap() {
                        Ok(taken) => {
                            runner.watch = Watch::default();
                            let renewed = rng.below(2) == 0;
                            runner.lock = Some(if renewed {
                                Lock::Renewed(LeaseGuard::new(
                                    runner.shared().clone(),
                                    ENV,
                                    taken.etag,
                                    me,
                                ))
                            } else {
                                Lock::Stalled
                            });
                            format!(
                                "lock (renewed: {renewed}, took over: {:?})",
                                taken.took_over
                            )
                        }
                        Err(lease) => format!("lock: held by {}", lease.holder.command),
                    }
                }
                Step::Read => {
                    let (head, _) = State::current(&runner.store, ENV).unwrap();
                    runner.base = Some(head);
                    format!("read head {head:?}")
                }
                // Commit a state on the head it read.
                Step::Commit => {
                    serial += 1;
                    let (did, id) = commit(runner, format!("{seed:x}-{serial}"), None);
                    committed.extend(id);
                    did
                }
                Step::Race => unreachable!("handled above"),
                // Killed between uploading a state and moving the head.
                Step::KillMidCommit => match (&runner.lock, runner.base) {
                    (Some(_), Some(base)) => {
                        serial += 1;
                        let mut state = State {
                            previous: base,
                            ..State::default()
                        };
                        state
                            .outputs
                            .insert("killed".into(), serde_json::json!(serial));
                        let id = runner.store.put_json(&state).unwrap();
                        for pending in runner.shared().pending() {
                            let bytes = runner.store.get(&pending).unwrap();
                            runner.shared().upload(&pending, bytes).unwrap();
                        }
                        runner.kill(server);
                        format!("killed after uploading {id:?}")
                    }
                    _ => {
                        runner.kill(server);
                        "killed".into()
                    }
                },
                Step::Kill => {
                    runner.kill(server);
                    "killed".into()
                }
                // Ends its run: a renewed lock is released, a stalled one stays as it is.
                Step::Release => match runner.lock.take() {
                    Some(Lock::Renewed(guard)) => {
                        drop(guard);
                        runner.base = None;
                        "released".into()
                    }
                    other => {
                        runner.lock = other;
                        "release: nothing renewed to release".into()
                    }
                },
                Step::ForceUnlock => {
                    let held = runner.shared().force_unlock(ENV).unwrap();
                    format!("unlock --force (held: {})", held.is_some())
                }
                // Time passes: leases nobody renews run out.
                Step::Sleep => {
                    std::thread::sleep(LEASE / 2);
                    "slept half a lease".into()
                }
            };
            trace.0.push(format!("{step:2} r{r}: {did}"));
        }
        let head = observer.store.read_ref(ENV).unwrap();
        check(
            head == committed.last().copied(),
            seed,
            &trace,
            &format!(
                "the head {head:?} is not the last committed state {:?}",
                committed.last()
            ),
        );
    }
    let count = |what: &str| trace.0.iter().filter(|l| l.contains(what)).count();
    eprintln!(
        "seed {seed}: {} committed, {} refused, {} taken over, {} killed, {} forced open",
        committed.len(),
        count(": refused"),
        count("took over: Some"),
        count("killed"),
        count("unlock --force"),
    );
    if std::env::var_os("ENVC_PROPS_TRACE").is_some() {
        eprintln!("{}", trace.0.join("\n"));
    }
    for runner in &mut runners {
        runner.lock = None;
    }
    // The whole history, through a store that never saw it.
    let fresh = Runner::open(server, &root.join("fresh"), &url, "fresh");
    let history: Vec<ObjectId> = State::history(&fresh.store, ENV)
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .rev()
        .collect();
    check(
        history == committed,
        seed,
        &trace,
        &format!("the history {history:?} is not the committed states {committed:?}"),
    );
}

fn check(ok: bool, seed: u64, trace: &Trace, what: &str) {
    assert!(
        ok,
        "seed {seed}: {what}\nsteps:\n{}\nrerun with ENVC_PROPS_SEED={seed}",
        trace.0.join("\n")
    );
}

#[test]
fn runners_killed_stalled_and_forced_open_never_lose_a_committed_state() {
    let server = S3Server::start();
    server.create_bucket("state");
    let seeds: Vec<u64> = match std::env::var("ENVC_PROPS_SEED") {
        Ok(s) => vec![s.parse().expect("ENVC_PROPS_SEED is a number")],
        Err(_) => SEEDS.to_vec(),
    };
    let started = std::time::Instant::now();
    for seed in seeds {
        let root = tempfile::tempdir().unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_sequence(&server, seed, root.path())
        }));
        if let Err(panic) = outcome {
            eprintln!("the shared state's property failed with seed {seed} (ENVC_PROPS_SEED={seed} reruns it)");
            std::panic::resume_unwind(panic);
        }
    }
    eprintln!("sequences ran in {:?}", started.elapsed());
}
