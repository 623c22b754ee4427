//! The shared binary cache and state against real servers on loopback: moto's S3 server
//! (conditional writes, SigV4) and Debian's nginx with WebDAV, both started by the
//! project's own support code (tests/support/servers.rs).

#![allow(clippy::unwrap_used)]

#[path = "../../tests/support/servers.rs"]
mod servers;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use envc_executor::cache::{entry_key, BinaryCache, Output, Quiet, CHUNK};
use envc_executor::envlock::{EnvLock, EnvLockError, Holder};
use envc_executor::keys::SecretKey;
use envc_executor::record::State;
use envc_executor::remote::Remote;
use envc_executor::shared_state::{SharedState, TakenOver, Watch};
use envc_executor::store::{ObjectId, Store, StoreError};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use servers::{S3Server, WebDavServer};

/// A client of `server`'s bucket `bucket`, configured explicitly (not from the
/// environment, which all tests of this process share).
fn s3(server: &S3Server, url: &str) -> Remote {
    let endpoint = server.endpoint();
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_access_key_id", servers::S3_ACCESS_KEY_ID),
        ("aws_secret_access_key", servers::S3_SECRET_ACCESS_KEY),
        ("aws_region", servers::S3_REGION),
        ("aws_allow_http", "true"),
    ];
    Remote::open_with(url, &options, Some(Duration::from_secs(5))).unwrap()
}

fn shared_store(dir: &std::path::Path, remote: Remote, lease: Duration) -> Store {
    Store::open(dir)
        .unwrap()
        .with_shared_state(SharedState::open(remote, lease).unwrap())
}

fn commit_output(store: &Store, lock: &EnvLock, who: &str) -> Result<ObjectId, String> {
    let (base, mut state) = State::current(store, "prod").unwrap();
    state.outputs.insert(who.into(), serde_json::json!(who));
    match state.commit(store, lock, base) {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(conflict)) => Err(format!("conflict: {conflict:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn two_runners_on_one_shared_state_never_lose_a_record() {
    let server = S3Server::start();
    server.create_bucket("state");
    let dirs = tempfile::tempdir().unwrap();
    let lease = Duration::from_secs(30);
    let a = shared_store(
        &dirs.path().join("a"),
        s3(&server, "s3://state/team"),
        lease,
    );
    let b = shared_store(
        &dirs.path().join("b"),
        s3(&server, "s3://state/team"),
        lease,
    );

    let lock_a = EnvLock::acquire(&a, "prod", false, &Holder::current("runner a")).unwrap();
    commit_output(&a, &lock_a, "first").unwrap();
    // A goes on working from the state it has read.
    let (base_a, mut state_a) = State::current(&a, "prod").unwrap();
    // B sees the lock, who holds it and until when: the message a second runner prints.
    match EnvLock::acquire(&b, "prod", false, &Holder::current("runner b")) {
        Err(
            e @ EnvLockError::Held {
                lease_seconds: Some(30),
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("`runner a`") && text.contains("envc unlock --force"),
                "{text}"
            );
        }
        other => panic!("expected Held, got {:?}", other.map(|_| ())),
    }
    // A runner forces the lock open while A still runs, and commits.
    assert!(b.shared().unwrap().force_unlock("prod").unwrap().is_some());
    let lock_b = EnvLock::acquire(&b, "prod", false, &Holder::current("runner b")).unwrap();
    let b_head = commit_output(&b, &lock_b, "second").unwrap();
    // A's commit is refused, whether its lease renewal noticed yet or not: nothing of B's
    // is lost.
    state_a
        .outputs
        .insert("lost".into(), serde_json::json!("lost"));
    match state_a.commit(&a, &lock_a, base_a) {
        Ok(Err(conflict)) => assert_eq!(conflict.found, Some(b_head)),
        Err(StoreError::LockLost { .. }) => {}
        other => panic!("A's stale commit went through: {other:?}"),
    }
    drop(lock_a);
    // A's lock going away does not free B's.
    assert!(matches!(
        EnvLock::acquire(&a, "prod", false, &Holder::current("runner c")),
        Err(EnvLockError::Held { .. })
    ));
    let (head, state) = State::current(&a, "prod").unwrap();
    assert_eq!(head, Some(b_head));
    assert_eq!(
        state.outputs.keys().collect::<Vec<_>>(),
        ["first", "second"]
    );
    // The whole history reads back through a store that never saw it (objects are fetched
    // from the bucket and checked against their ids).
    let fresh = shared_store(
        &dirs.path().join("c"),
        s3(&server, "s3://state/team"),
        lease,
    );
    assert_eq!(State::history(&fresh, "prod").unwrap().len(), 2);
    assert_eq!(fresh.envs().unwrap(), ["prod"]);
}

#[test]
fn a_lock_left_by_a_dead_runner_frees_itself_when_its_lease_runs_out() {
    let server = S3Server::start();
    server.create_bucket("state");
    let dirs = tempfile::tempdir().unwrap();
    let lease = Duration::from_secs(2);
    let a = shared_store(&dirs.path().join("a"), s3(&server, "s3://state/x"), lease);
    // Taken and never renewed nor released: what a SIGKILLed runner leaves.
    let dead = Holder::current("killed runner");
    assert!(a
        .shared()
        .unwrap()
        .try_lock("prod", &dead, &mut Watch::default())
        .unwrap()
        .is_ok());
    let started = Instant::now();
    let me = Holder::current("next runner");
    assert!(matches!(
        EnvLock::acquire(&a, "prod", false, &me),
        Err(EnvLockError::Held { .. })
    ));
    // With --wait, the next runner takes it over once it has seen it unrenewed for longer
    // than the lease, by its own clock.
    let lock = EnvLock::acquire(&a, "prod", true, &me).unwrap();
    assert!(started.elapsed() > lease, "{:?}", started.elapsed());
    let (held, _) = a.shared().unwrap().read_lock("prod").unwrap().unwrap();
    assert_eq!(held.lease().unwrap().holder.command, "next runner");
    assert!(matches!(
        lock.took_over(),
        Some(TakenOver::Unrenewed { holder, .. }) if holder.command == "killed runner"
    ));
    // Renewed while held: still ours after two leases.
    std::thread::sleep(2 * lease);
    assert!(!lock.lost());
    commit_output(&a, &lock, "after").unwrap();
    drop(lock);
    // Released: its lease ended, so the next runner takes it at once.
    let (ended, _) = a.shared().unwrap().read_lock("prod").unwrap().unwrap();
    assert!(ended.lease().unwrap().ended());
    let started = Instant::now();
    drop(EnvLock::acquire(&a, "prod", false, &me).unwrap());
    assert!(started.elapsed() < lease, "{:?}", started.elapsed());
}

fn random_file(store: &Store, len: usize) -> ObjectId {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).unwrap();
    let path = store.root().join("tmp/random");
    std::fs::write(&path, &bytes).unwrap();
    store.put_file(&path).unwrap()
}

#[test]
fn a_server_that_dies_mid_upload_leaves_no_entry_and_no_partial_chunk() {
    let mut server = S3Server::start();
    server.create_bucket("cache");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let big = random_file(&store, 12 * CHUNK as usize);
    let key = SecretKey::generate("laptop").unwrap();
    let signer = SecretKey::parse(&key.to_secret_text()).unwrap();
    let cache = BinaryCache::new(
        s3(&server, "s3://cache/c"),
        vec![key.public()],
        Some(signer),
    );
    let facts = BTreeMap::from([("digest".to_string(), big.hex())]);

    let pushing = {
        let (cache, store, facts) = (cache.clone(), store.clone(), facts.clone());
        std::thread::spawn(move || {
            cache.remote().block(cache.push(
                &store,
                &out("h", "image:big", &facts, &[big]),
                false,
                &Quiet,
            ))
        })
    };
    // Cut the server once some chunks are in.
    let remote = cache.remote().clone();
    let chunks = || -> Vec<object_store::ObjectMeta> {
        remote
            .block(
                remote
                    .store()
                    .list(Some(&remote.key("chunks")))
                    .try_collect(),
            )
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while chunks().len() < 2 {
        assert!(Instant::now() < deadline, "no chunk arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop();
    let e = pushing.join().unwrap().unwrap_err();
    assert!(e.to_string().contains("s3://cache/c"), "{e}");
    server.restart();

    assert!(remote.block(cache.lookup(&"h".into())).unwrap().is_none());
    let landed = chunks();
    assert!(landed.len() < 12, "{} chunks", landed.len());
    for meta in landed {
        let bytes = remote
            .block(async { remote.store().get(&meta.location).await?.bytes().await })
            .unwrap();
        assert_eq!(
            ObjectId::of(&bytes).hex(),
            meta.location.filename().unwrap(),
            "a chunk is whole or absent"
        );
    }
    // The next push completes; another store fetches the same bits.
    let sent = remote
        .block(cache.push(
            &store,
            &out("h", "image:big", &facts, &[big]),
            false,
            &Quiet,
        ))
        .unwrap();
    assert!(
        sent.bytes < 12 * CHUNK,
        "chunks already there are not sent again"
    );
    let other = Store::open(&dir.path().join("other")).unwrap();
    let entry = remote.block(cache.lookup(&"h".into())).unwrap().unwrap();
    remote.block(cache.fetch(&entry, &other, &Quiet)).unwrap();
    assert_eq!(
        std::fs::read(other.object_file(&big)).unwrap(),
        std::fs::read(store.object_file(&big)).unwrap()
    );
}

#[test]
fn a_webdav_server_holds_a_cache_but_not_a_state() {
    let server = WebDavServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a")).unwrap();
    let disk = random_file(&store, CHUNK as usize + 100);
    let key = SecretKey::generate("ci").unwrap();
    let signer = SecretKey::parse(&key.to_secret_text()).unwrap();
    let url = format!("{}team/cache", server.url());
    let cache = BinaryCache::new(
        Remote::open(&url).unwrap(),
        vec![key.public()],
        Some(signer),
    );
    let remote = cache.remote().clone();
    let facts = BTreeMap::from([("digest".to_string(), disk.hex())]);
    remote
        .block(cache.push(&store, &out("h", "image:x", &facts, &[disk]), false, &Quiet))
        .unwrap();
    assert_eq!(
        remote.block(cache.entry_keys()).unwrap(),
        [entry_key(&"h".into())]
    );
    remote
        .block(cache.verify_entry(&entry_key(&"h".into())))
        .unwrap();
    let other = Store::open(&dir.path().join("b")).unwrap();
    let entry = remote.block(cache.lookup(&"h".into())).unwrap().unwrap();
    remote.block(cache.fetch(&entry, &other, &Quiet)).unwrap();
    assert!(other.contains(&disk));

    // A chunk changed on the server is caught; nothing enters the store.
    let chunk = entry.body.objects[0].chunks[1];
    let on_disk = server
        .root()
        .join(format!("team/cache/chunks/{}", chunk.hex()));
    std::fs::write(&on_disk, b"tampered").unwrap();
    let third = Store::open(&dir.path().join("c")).unwrap();
    let e = remote
        .block(cache.fetch(&entry, &third, &Quiet))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("chunk {chunk} does not hash")),
        "{e}"
    );
    assert!(!third.contains(&disk));

    // No conditional writes over WebDAV: a state there is refused, saying what to use.
    let e = SharedState::open(Remote::open(&url).unwrap(), Duration::from_secs(60)).unwrap_err();
    assert!(
        e.to_string()
            .contains("use s3://, gs:// or az:// for [state]"),
        "{e}"
    );
}

fn out(hash: &str, node: &str, facts: &BTreeMap<String, String>, objects: &[ObjectId]) -> Output {
    Output {
        node: node.to_string(),
        resolved_hash: hash.into(),
        facts: facts.clone(),
        objects: objects.to_vec(),
    }
}

/// Writes the lock of `prod` under `remote` directly, as a holder whose wall clock is
/// `skew` seconds off would: its start and expiry by its own clock.
fn write_skewed_lease(remote: &Remote, skew: i64, lease_seconds: u64, renewals: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let lease = serde_json::json!({
        "holder": {"pid": 4242, "host": "skewed", "command": "skewed runner", "since_unix": now + skew},
        "expires_unix": now + skew + lease_seconds as i64,
        "lease_seconds": lease_seconds,
        "renewals": renewals,
    });
    let bytes = serde_json::to_vec(&lease).unwrap();
    remote
        .block(
            remote
                .store()
                .put(&remote.key("envs/prod/lock"), bytes.into()),
        )
        .unwrap();
}

/// A waiter judges a lease by how long it sees the lock unrenewed on its own clock, never
/// by the expiry the holder wrote: a live holder whose clock is an hour slow is not taken
/// over while it renews, and a dead holder whose clock is an hour fast is taken over after
/// one lease, not an hour. (Comparing the holder's expiry with the waiter's clock, as envc
/// did, fails both.)
#[test]
fn a_lease_is_timed_by_the_waiters_clock_whatever_the_holders_clock_says() {
    let server = S3Server::start();
    server.create_bucket("state");
    let dirs = tempfile::tempdir().unwrap();
    let lease = Duration::from_secs(2);
    let remote = s3(&server, "s3://state/skew");
    let a = shared_store(&dirs.path().join("a"), remote.clone(), lease);
    let waiting = |store: Store| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let lock = EnvLock::acquire(&store, "prod", true, &Holder::current("waiter")).unwrap();
            tx.send((Instant::now(), lock)).unwrap();
        });
        rx
    };

    // Alive, an hour slow: by the waiter's clock its lease ended long ago. It renews
    // every 500 ms for three leases: the waiter must not take it.
    write_skewed_lease(&remote, -3600, 2, 0);
    let rx = waiting(a.clone());
    let mut renewals = 0;
    let renewing_until = Instant::now() + 3 * lease;
    while Instant::now() < renewing_until {
        std::thread::sleep(Duration::from_millis(500));
        renewals += 1;
        write_skewed_lease(&remote, -3600, 2, renewals);
        assert!(
            rx.try_recv().is_err(),
            "a live holder was taken over after {renewals} renewals"
        );
    }
    // It dies: taken over once unrenewed for the lease, not before.
    let died = Instant::now();
    let (taken, lock) = rx.recv_timeout(lease + Duration::from_secs(8)).unwrap();
    assert!(
        taken - died >= lease - Duration::from_millis(600),
        "taken over {:?} after the last renewal",
        taken - died
    );
    assert!(matches!(
        lock.took_over(),
        Some(TakenOver::Unrenewed { holder, .. }) if holder.host == "skewed"
    ));
    drop(lock);

    // Dead, an hour fast: by the waiter's clock its lease runs for another hour.
    write_skewed_lease(&remote, 3600, 2, 0);
    let written = Instant::now();
    let rx = waiting(a.clone());
    let (taken, lock) = rx.recv_timeout(lease + Duration::from_secs(8)).unwrap();
    assert!(taken - written >= lease, "{:?}", taken - written);
    assert!(lock.took_over().is_some());
}

/// A lock object that holds no lease (damaged, or written by something else) is taken over
/// at once, but never silently: the taker is told which object held what.
#[test]
fn a_garbage_lock_is_taken_over_and_named() {
    let server = S3Server::start();
    server.create_bucket("state");
    let dirs = tempfile::tempdir().unwrap();
    let remote = s3(&server, "s3://state/g");
    let a = shared_store(
        &dirs.path().join("a"),
        remote.clone(),
        Duration::from_secs(30),
    );
    remote
        .block(
            remote
                .store()
                .put(&remote.key("envs/prod/lock"), b"garbage\n".to_vec().into()),
        )
        .unwrap();
    let lock = EnvLock::acquire(&a, "prod", false, &Holder::current("runner")).unwrap();
    let said = lock.took_over().unwrap().to_string();
    assert!(
        said.contains("s3://state/g/envs/prod/lock") && said.contains("garbage"),
        "{said}"
    );
    let (held, _) = a.shared().unwrap().read_lock("prod").unwrap().unwrap();
    assert_eq!(held.lease().unwrap().holder.command, "runner");
}
