//! The store's guarantees: content addressing with verification, atomic ref updates that
//! detect a concurrent commit, an exclusive lock per environment that names its holder and
//! is released by the kernel when its holder dies, and a history of states.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::BTreeMap;
use std::time::Duration;

use envc_executor::plan::Action;
use envc_executor::record::{NodeOutcome, Outcome, RunResult};
use envc_executor::{
    EnvLock, EnvLockError, Holder, ObjectId, RealizationRecord, RunRecord, State, Store, StoreError,
};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join(".envc")).unwrap();
    (dir, s)
}

#[test]
fn objects_are_content_addressed_and_verified() {
    let (_d, s) = store();
    let id = s.put(b"hello").unwrap();
    assert_eq!(id, ObjectId::of(b"hello"));
    assert_eq!(
        s.put(b"hello").unwrap(),
        id,
        "storing twice is the same object"
    );
    assert_eq!(s.get(&id).unwrap(), b"hello");
    assert!(matches!(
        s.get(&ObjectId::of(b"absent")),
        Err(StoreError::Missing(_))
    ));
    // Corrupt the object on disk: reading it is an error, and verify() finds it.
    let hex = id.hex();
    let path = s.root().join("objects").join(&hex[..2]).join(&hex[2..]);
    std::fs::write(&path, b"hellp").unwrap();
    assert!(matches!(s.get(&id), Err(StoreError::Corrupt { .. })));
    assert_eq!(s.verify(Duration::from_secs(3600)).unwrap(), vec![path]);
}

#[test]
fn a_group_of_objects_is_stored_whole_and_what_is_there_is_kept() {
    let (_d, s) = store();
    let kept = s.put(b"already here").unwrap();
    let group: Vec<(ObjectId, Vec<u8>)> = [&b"one"[..], b"two", b"one", b"already here"]
        .iter()
        .map(|b| (ObjectId::of(b), b.to_vec()))
        .collect();
    s.put_many(&group).unwrap();
    for (id, bytes) in &group {
        assert_eq!(&s.get(id).unwrap(), bytes);
    }
    assert_eq!(s.get(&kept).unwrap(), b"already here");
    assert!(s.verify(Duration::from_secs(3600)).unwrap().is_empty());
    let tmp = std::fs::read_dir(s.root().join("tmp")).unwrap().count();
    assert_eq!(tmp, 0, "nothing is left in tmp/");
}

#[test]
fn pinned_debs_are_verified_by_their_sha256_and_a_scratch_store_shares_them() {
    let (d, s) = store();
    let bytes = b"!<arch>\na pinned .deb";
    let sha256 = envc_lockfiles::fetch::sha256_hex(bytes);
    let kept = s.put_deb(&sha256, bytes).unwrap();
    assert_eq!(kept, s.deb_path(&sha256));
    assert!(s.verify(Duration::from_secs(3600)).unwrap().is_empty());
    // A scratch store (verify's lab) keeps and finds its .debs in production's store.
    let lab = Store::open(&d.path().join(".envc/labs/x"))
        .unwrap()
        .with_debs_of(&s);
    assert_eq!(lab.deb_path(&sha256), kept);
    // A .deb whose bytes changed on disk, and a file that is no .deb's name: damage,
    // and repair's removal takes them (the next step that needs the .deb fetches it).
    std::fs::write(&kept, b"other bytes").unwrap();
    let stray = s.root().join("debs").join("notes.txt");
    std::fs::write(&stray, b"?").unwrap();
    let mut damaged = s.verify(Duration::from_secs(3600)).unwrap();
    damaged.sort();
    let mut expected = vec![stray.clone(), kept.clone()];
    expected.sort();
    assert_eq!(damaged, expected);
    for p in &damaged {
        s.remove_damaged(p).unwrap();
    }
    assert!(!kept.exists() && !stray.exists());
    assert!(s.verify(Duration::from_secs(3600)).unwrap().is_empty());
}

#[test]
fn verify_removes_old_temporary_files_only() {
    let (_d, s) = store();
    s.put(b"x").unwrap();
    let leftover = s.root().join("tmp").join(".tmpKILLED");
    std::fs::write(&leftover, b"half a file").unwrap();
    assert!(s.verify(Duration::from_secs(3600)).unwrap().is_empty());
    assert!(
        leftover.exists(),
        "a fresh temporary file may belong to a running writer"
    );
    assert!(s.verify(Duration::ZERO).unwrap().is_empty());
    assert!(!leftover.exists());
}

#[test]
fn the_lock_is_exclusive_and_names_its_holder() {
    let (_d, s) = store();
    let me = Holder::current("envc build prod.env");
    let held = EnvLock::acquire(&s, "prod", false, &me).unwrap();
    // A second acquisition (another open file: what another process would do) fails at
    // once and says who holds it.
    match EnvLock::acquire(
        &s,
        "prod",
        false,
        &Holder::current("envc build prod.env -j 4"),
    ) {
        Err(EnvLockError::Held {
            env,
            holder: Some(h),
            lease_seconds: None,
        }) => {
            assert_eq!(env, "prod");
            assert_eq!(h, me);
        }
        other => panic!("expected Held, got {:?}", other.map(|_| ())),
    }
    let message = EnvLock::acquire(&s, "prod", false, &me)
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.contains("locked by `envc build prod.env`") && message.contains("--wait"),
        "{message}"
    );
    // Another environment is independent.
    EnvLock::acquire(&s, "staging", false, &me).unwrap();
    drop(held);
    EnvLock::acquire(&s, "prod", false, &me).unwrap();
}

#[test]
fn waiting_gets_the_lock_when_it_is_released() {
    let (_d, s) = store();
    let root = s.root().to_path_buf();
    let held = EnvLock::acquire(&s, "prod", false, &Holder::current("first")).unwrap();
    let waiter = std::thread::spawn(move || {
        let s = Store::open(&root).unwrap();
        EnvLock::acquire(&s, "prod", true, &Holder::current("second")).map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiter.is_finished(),
        "--wait blocks while the lock is held"
    );
    drop(held);
    waiter.join().unwrap().unwrap();
}

fn record(store: &Store, run: ObjectId, node: &str, hash: &str) -> (String, ObjectId) {
    let facts = BTreeMap::from([("sha256".to_string(), "1234".to_string())]);
    let r = RealizationRecord {
        resolved_hash: hash.into(),
        target_identity: "SHA256:abc".into(),
        node: node.into(),
        derivation: "d1".into(),
        attrs: BTreeMap::from([("mode".to_string(), "0o644".to_string())]),
        output_hash: envc_executor::record::output_hash(&facts),
        facts,
        created: true,
        run: run.hex(),
        at_unix: 1,
        checks_hash: None,
        undo: None,
        adopted: false,
        content: None,
    };
    (node.to_string(), store.put_json(&r).unwrap())
}

#[test]
fn states_commit_by_compare_and_swap_and_keep_history() {
    let (_d, s) = store();
    let lock = EnvLock::acquire(&s, "prod", false, &Holder::current("test")).unwrap();
    let run = RunRecord {
        run: "r".into(),
        result: RunResult::Ok,
        env: "prod".into(),
        command: "build".into(),
        graph_hash: "g".into(),
        lock_hash: None,
        earlier: None,
        started_unix: 1,
        finished_unix: 2,
        nodes: vec![NodeOutcome {
            node: "h1/file:/etc/motd".into(),
            id: "d1".into(),
            action: Action::Create,
            outcome: Outcome::Ok(None),
            duration_ms: 5,
            output_hash: None,
            checks: Vec::new(),
            log: None,
            tags: [("owner".to_string(), "platform".to_string())].into(),
            moved_from: None,
            rollback: None,
        }],
        error: None,
        stacks: [("core.env".to_string(), "r0".to_string())].into(),
        targeted: Some(envc_executor::Targeted {
            only: vec!["h1/file:*".into()],
            left_out: vec!["h2/file:/etc/motd".into()],
            ..Default::default()
        }),
        rollouts: Vec::new(),
        tools: Default::default(),
    };
    let run_id = s.put_json(&run).unwrap();
    assert_eq!(s.get_json::<RunRecord>(&run_id).unwrap(), run);

    let (base, state) = State::current(&s, "prod").unwrap();
    assert_eq!((base, &state), (None, &State::default()));
    let mut first = state.clone();
    first.run = Some(run_id);
    first
        .records
        .extend([record(&s, run_id, "h1/file:/etc/motd", "r1")]);
    let first_id = first.clone().commit(&s, &lock, base).unwrap().unwrap();
    assert_eq!(s.read_ref("prod").unwrap(), Some(first_id));

    // A commit based on a stale view is refused, and the ref does not move.
    let mut stale = State::default();
    stale
        .records
        .extend([record(&s, run_id, "h1/file:/etc/motd", "r2")]);
    let conflict = stale.commit(&s, &lock, None).unwrap().unwrap_err();
    assert_eq!((conflict.expected, conflict.found), (None, Some(first_id)));
    assert_eq!(s.read_ref("prod").unwrap(), Some(first_id));

    let mut second = first.clone();
    second
        .records
        .extend([record(&s, run_id, "h1/file:/etc/motd", "r3")]);
    let second_id = second.commit(&s, &lock, Some(first_id)).unwrap().unwrap();
    let history = State::history(&s, "prod").unwrap();
    assert_eq!(
        history.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![second_id, first_id]
    );
    assert_eq!(history[1].1, first.clone().tap_previous(None));
}

trait TapPrevious {
    fn tap_previous(self, p: Option<ObjectId>) -> Self;
}

impl TapPrevious for State {
    fn tap_previous(mut self, p: Option<ObjectId>) -> State {
        self.previous = p;
        self
    }
}

#[test]
fn a_ref_that_is_not_an_id_is_reported() {
    let (_d, s) = store();
    std::fs::write(s.root().join("refs/prod"), "garbage").unwrap();
    let e = s.read_ref("prod").unwrap_err();
    assert!(e.to_string().contains("not an object id"), "{e}");
}

#[test]
fn odd_environment_names_stay_inside_the_store() {
    let (_d, s) = store();
    let lock = EnvLock::acquire(&s, "../../etc/passwd", false, &Holder::current("t")).unwrap();
    let id = s.put(b"{}").unwrap();
    s.update_ref(&lock, None, id).unwrap().unwrap();
    assert_eq!(s.read_ref("../../etc/passwd").unwrap(), Some(id));
    for dir in ["refs", "locks"] {
        for e in std::fs::read_dir(s.root().join(dir)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(!name.contains('/') && !name.starts_with(".."), "{name}");
        }
    }
}

#[test]
fn distinct_environment_names_never_share_a_ref() {
    let (_d, s) = store();
    let names = [".", "x-2e", "", "x-", "prod", "x-prod"];
    for (i, env) in names.iter().enumerate() {
        let lock = EnvLock::acquire(&s, env, false, &Holder::current("t")).unwrap();
        let id = s.put(format!("{i}").as_bytes()).unwrap();
        s.update_ref(&lock, None, id).unwrap().unwrap();
    }
    for (i, env) in names.iter().enumerate() {
        assert_eq!(
            s.read_ref(env).unwrap(),
            Some(ObjectId::of(format!("{i}").as_bytes())),
            "{env:?}"
        );
    }
}

/// Flips one bit of object `id` on disk, as a failing disk would.
fn flip(s: &Store, id: &ObjectId) {
    let path = s.object_file(id);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&path, bytes).unwrap();
}

fn run_record(s: &Store, env: &str, n: u64) -> ObjectId {
    s.put_json(&RunRecord {
        run: format!("run-{n}"),
        env: env.into(),
        command: "build".into(),
        graph_hash: "g".into(),
        lock_hash: None,
        earlier: None,
        started_unix: n,
        finished_unix: n,
        result: RunResult::Ok,
        nodes: Vec::new(),
        error: None,
        stacks: Default::default(),
        targeted: None,
        rollouts: Vec::new(),
        tools: Default::default(),
    })
    .unwrap()
}

/// `env` built three times, each run adding a record: the state ids newest first, and the
/// run record ids oldest first.
fn three_runs(s: &Store, env: &str) -> (Vec<ObjectId>, Vec<ObjectId>) {
    let lock = EnvLock::acquire(s, env, false, &Holder::current("test")).unwrap();
    let mut state = State::default();
    let (mut base, mut states, mut runs) = (None, Vec::new(), Vec::new());
    for i in 0..3 {
        let run = run_record(s, env, i);
        state.run = Some(run);
        state
            .records
            .extend([record(s, run, &format!("h1/file:/etc/{env}{i}"), "r")]);
        base = Some(state.commit(s, &lock, base).unwrap().unwrap());
        states.insert(0, base.unwrap());
        runs.push(run);
    }
    (states, runs)
}

#[test]
fn verify_names_damaged_objects_and_repair_drops_them_from_the_state() {
    use envc_executor::repair::{self, Damage, DamagedRecord, DamagedRun};
    let (_d, s) = store();
    let (_, runs) = three_runs(&s, "prod");
    let (_, current) = State::current(&s, "prod").unwrap();
    let bad_record = current.records["h1/file:/etc/prod1"];
    flip(&s, &bad_record);
    flip(&s, &runs[1]);
    // What every build and `envc log` ran into.
    assert!(matches!(
        current.load_records(&s),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(State::history(&s, "prod").is_ok());

    let found = repair::verify(&s).unwrap();
    let mut expected = vec![s.object_file(&bad_record), s.object_file(&runs[1])];
    expected.sort();
    assert_eq!(found.corrupt, expected);
    assert_eq!(found.envs.len(), 1);
    let env = &found.envs[0];
    assert_eq!(
        env.records,
        vec![DamagedRecord {
            node: "h1/file:/etc/prod1".into(),
            object: bad_record,
            damage: Damage::Corrupt,
        }]
    );
    assert_eq!(
        env.runs,
        vec![DamagedRun {
            object: runs[1],
            damage: Damage::Corrupt,
        }]
    );
    assert_eq!((&env.head, &env.cut), (&None, &None));
    assert!(
        s.object_file(&bad_record).exists(),
        "verify alone changes nothing"
    );

    let repaired = repair::repair(&s, &Holder::current("test")).unwrap();
    assert_eq!(repaired, found);
    assert!(repair::verify(&s).unwrap().is_sound());
    let (_, current) = State::current(&s, "prod").unwrap();
    let records = current.load_records(&s).unwrap();
    assert_eq!(
        records.keys().collect::<Vec<_>>(),
        ["h1/file:/etc/prod0", "h1/file:/etc/prod2"]
    );
    // The history keeps its three states; the one whose run record is gone says no run.
    let history = State::history(&s, "prod").unwrap();
    assert_eq!(
        history.iter().map(|(_, st)| st.run).collect::<Vec<_>>(),
        vec![Some(runs[2]), None, Some(runs[0])]
    );
    // A second repair finds nothing to do.
    assert!(repair::repair(&s, &Holder::current("test"))
        .unwrap()
        .is_sound());
}

/// A damaged state cuts the history there; a current state that is gone does not lose the
/// history: repair sets the ref back to the newest state of the environment that reads,
/// and forgets the state only when none does.
#[test]
fn a_damaged_state_cuts_the_history_and_a_lost_current_state_falls_back_to_the_newest_that_reads() {
    use envc_executor::repair::{self, Cut, Damage, Fallback};
    let (_d, s) = store();
    let (prod_states, _) = three_runs(&s, "prod");
    let (dev_states, _) = three_runs(&s, "dev");
    flip(&s, &prod_states[1]);
    std::fs::remove_file(s.object_file(&dev_states[0])).unwrap();
    // An environment whose only state is gone, and one whose ref holds no id.
    let qa = {
        let lock = EnvLock::acquire(&s, "qa", false, &Holder::current("test")).unwrap();
        let state = State {
            run: Some(run_record(&s, "qa", 7)),
            ..State::default()
        };
        state.commit(&s, &lock, None).unwrap().unwrap()
    };
    std::fs::remove_file(s.object_file(&qa)).unwrap();
    three_runs(&s, "stage");
    std::fs::write(s.root().join("refs/stage"), "garbage\n").unwrap();

    let found = repair::verify(&s).unwrap();
    assert_eq!(found.corrupt, vec![s.object_file(&prod_states[1])]);
    let by_env: BTreeMap<&str, _> = found.envs.iter().map(|e| (e.env.as_str(), e)).collect();
    assert_eq!(by_env["dev"].head, Some(Damage::Missing));
    assert_eq!(
        by_env["dev"].fallback,
        Some(Fallback {
            state: dev_states[1],
            states: 2,
            finished_unix: Some(1),
        })
    );
    assert_eq!(
        by_env["dev"].head_at,
        s.root().join("refs/dev").display().to_string()
    );
    assert_eq!(by_env["qa"].head, Some(Damage::Missing));
    assert_eq!(by_env["qa"].fallback, None);
    assert_eq!(
        by_env["stage"].head,
        Some(Damage::NotAnId("garbage\n".into()))
    );
    assert_eq!(by_env["stage"].fallback.as_ref().unwrap().states, 3);
    assert_eq!(
        by_env["prod"].cut,
        Some(Cut {
            state: prod_states[1],
            damage: Damage::Corrupt,
            kept: 1,
        })
    );
    assert_eq!(by_env["prod"].head, None);

    // While a build holds an environment, nothing is repaired.
    let held = EnvLock::acquire(&s, "dev", false, &Holder::current("a build")).unwrap();
    let e = repair::repair(&s, &Holder::current("test")).unwrap_err();
    assert!(e.to_string().contains("a build"), "{e}");
    assert_eq!(repair::verify(&s).unwrap(), found);
    drop(held);

    assert_eq!(repair::repair(&s, &Holder::current("test")).unwrap(), found);
    assert_eq!(s.read_ref("dev").unwrap(), Some(dev_states[1]));
    assert_eq!(State::history(&s, "dev").unwrap().len(), 2);
    assert_eq!(s.read_ref("qa").unwrap(), None);
    assert_eq!(State::history(&s, "stage").unwrap().len(), 3);
    let history = State::history(&s, "prod").unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].1.previous, None);
    assert_eq!(history[0].1.records.len(), 3);
    assert!(repair::verify(&s).unwrap().is_sound());
}

/// A damaged intent (what a killed run was about to create) stops `Env::open`, as a
/// damaged record does; repair drops it, and every build can open the state again.
#[test]
fn repair_drops_a_damaged_intent_so_builds_can_open_the_state() {
    use envc_executor::record::Intent;
    use envc_executor::repair::{self, Damage, DamagedRecord};
    use envc_executor::run::Env;
    let (_d, s) = store();
    three_runs(&s, "prod");
    let intent = s
        .put_json(&Intent {
            node: "h1/file:/etc/new".into(),
            target_identity: "SHA256:h1".into(),
            facts: BTreeMap::new(),
            run: "run-3".into(),
            at_unix: 3,
        })
        .unwrap();
    {
        let lock = EnvLock::acquire(&s, "prod", false, &Holder::current("test")).unwrap();
        let (base, mut state) = State::current(&s, "prod").unwrap();
        state.intents.insert("h1/file:/etc/new".into(), intent);
        state.commit(&s, &lock, base).unwrap().unwrap();
        flip(&s, &intent);
        assert!(
            Env::open(&s, &lock).is_err(),
            "a damaged intent stops a build"
        );
    }
    let found = repair::verify(&s).unwrap();
    assert_eq!(
        found.envs[0].intents,
        vec![DamagedRecord {
            node: "h1/file:/etc/new".into(),
            object: intent,
            damage: Damage::Corrupt,
        }]
    );
    repair::repair(&s, &Holder::current("test")).unwrap();
    assert!(repair::verify(&s).unwrap().is_sound());
    let lock = EnvLock::acquire(&s, "prod", false, &Holder::current("test")).unwrap();
    let env = Env::open(&s, &lock).unwrap();
    assert!(env.state.intents.is_empty());
    assert_eq!(env.records.len(), 3, "the records are kept");
}

#[test]
fn a_chain_of_checkpoints_loads_as_one_run_earliest_outcomes_first() {
    let (_d, s) = store();
    let outcome = |node: &str, o: Outcome| NodeOutcome {
        node: node.into(),
        id: "d".into(),
        action: Action::Create,
        outcome: o,
        duration_ms: 1,
        output_hash: None,
        checks: Vec::new(),
        log: None,
        tags: BTreeMap::new(),
        moved_from: None,
        rollback: None,
    };
    let checkpoint = |nodes: Vec<NodeOutcome>, earlier: Option<ObjectId>| {
        s.put_json(&RunRecord {
            run: "r".into(),
            env: "prod".into(),
            command: "build".into(),
            graph_hash: "g".into(),
            lock_hash: None,
            earlier,
            started_unix: 1,
            finished_unix: 2,
            result: RunResult::Unfinished,
            nodes,
            error: None,
            stacks: Default::default(),
            targeted: None,
            rollouts: Vec::new(),
            tools: Default::default(),
        })
        .unwrap()
    };
    let first = checkpoint(vec![outcome("h/exec:b", Outcome::Ok(None))], None);
    let second = checkpoint(vec![outcome("h/exec:a", Outcome::Ok(None))], Some(first));
    // A later checkpoint's outcome of a node replaces the earlier one, where it stood.
    let third = checkpoint(
        vec![
            outcome("h/exec:c", Outcome::Ok(None)),
            outcome("h/exec:b", Outcome::Failed("late".into())),
        ],
        Some(second),
    );
    let run = RunRecord::load(&s, &third).unwrap();
    let read: Vec<(&str, &Outcome)> = run.nodes.iter().map(|n| (&*n.node, &n.outcome)).collect();
    assert_eq!(
        read,
        [
            ("h/exec:b", &Outcome::Failed("late".into())),
            ("h/exec:a", &Outcome::Ok(None)),
            ("h/exec:c", &Outcome::Ok(None)),
        ]
    );
    assert_eq!(run.earlier, None);
    // A damaged checkpoint anywhere in the chain is the run's damage.
    flip(&s, &first);
    assert!(RunRecord::load(&s, &third).is_err());
    assert!(s.get_json::<RunRecord>(&third).is_ok());
}
