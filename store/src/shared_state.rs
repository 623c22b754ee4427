//! Shared deploy state: an environment's records, run history and outputs in a bucket, so
//! that a laptop and a CI runner see the same deployed state — Terraform's S3 backend with
//! `use_lockfile`, Pulumi's self-managed backends.
//!
//! Layout under the state's URL:
//! - `objects/<blake3>`: states, records, intents and run records (immutable, JSON);
//! - `envs/<env>/head`: the id of the environment's current state. It moves only by a
//!   conditional write on the ETag it was read with: two runners racing never lose a
//!   record, the second one gets a conflict;
//! - `envs/<env>/lock`: who holds the environment. Taken by a create that fails if it
//!   exists (`If-None-Match: *`), renewed while the run lives (each renewal a new version
//!   of the object), taken over by a conditional write once a waiting runner has seen the
//!   same version for longer than the lease on its own clock, so a killed runner does not
//!   wedge the environment.
//!
//! No clock of one machine is ever compared with another's: the holder writes no expiry a
//! waiter trusts, it only renews (a counter in the lease changes the object, and so its
//! ETag, every time); the waiter times how long the version it sees stays unchanged with
//! its own monotonic clock ([`Watch`]). This is how DynamoDB's lock client and
//! Consul-style sessions work: a holder whose wall clock is hours off is neither taken over
//! early nor kept forever, since only the rates of the two clocks matter, and the holder
//! gives itself up a sixth of a lease before a waiter may take it. (The alternative, the
//! server's Last-Modified against the server's time, needs the server's "now", which the
//! object store clients do not expose without a write of a clock object each time a lock
//! is looked at, and trusts a whole-second timestamp.)
//!
//! The local store stays the working copy: objects are written there first and uploaded
//! before the head that names them moves; objects the local store lacks are fetched (and
//! checked against their id) when read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::names::{hex_key, parse_key, safe_name};
use crate::object_id::ObjectId;
use crate::remote::{Backend, Remote, RemoteError};

/// Who holds a lock: shown to whoever finds it held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    pub command: String,
    pub since_unix: u64,
}

impl Holder {
    /// This process.
    pub fn current(command: &str) -> Holder {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let since_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Holder {
            pid: std::process::id(),
            host,
            command: command.to_string(),
            since_unix,
        }
    }
}

/// What the lock object holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub holder: Holder,
    /// When the lease runs out by the holder's own clock: for people to read, never
    /// compared with another machine's clock (see the module's documentation). 0: ended
    /// (what envc before the renewal count wrote on release).
    pub expires_unix: u64,
    /// How long the lease lasts unrenewed: a waiter that sees the lock unchanged for
    /// longer, by its own clock, takes it over.
    pub lease_seconds: u64,
    /// Renewals so far: each makes the object a new version, even within one second.
    #[serde(default)]
    pub renewals: u64,
    /// Released by its holder: anyone may take it at once.
    #[serde(default)]
    pub ended: bool,
}

impl Lease {
    /// Whether its holder released it.
    pub fn ended(&self) -> bool {
        self.ended || self.expires_unix == 0
    }
}

/// What a lock object held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockObject {
    Lease(Lease),
    /// Not a lease (`object`: its URL; `content`: its first 80 characters).
    Unreadable {
        object: String,
        content: String,
    },
}

impl LockObject {
    /// The lease it holds, if it holds one.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            LockObject::Lease(l) => Some(l),
            LockObject::Unreadable { .. } => None,
        }
    }
}

/// What taking a lock replaced, when it was not free: said to the user, who may want to
/// know whose run was cut off or that something wrote the lock object that was not envc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakenOver {
    /// The lock object held something that is not a lease (`object`: its URL).
    Unreadable { object: String, content: String },
    /// A lease its holder stopped renewing (killed, or stalled past its lease).
    Unrenewed { holder: Holder, seconds: u64 },
}

impl std::fmt::Display for TakenOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TakenOver::Unreadable { object, content } => write!(
                f,
                "the lock object {object} held {content:?}, not a lease envc wrote; it was overwritten with this run's lease\n  \
                 hint: if another tool writes that key, give the state a prefix of its own"
            ),
            TakenOver::Unrenewed { holder, seconds } => write!(
                f,
                "took over the lock of `{}` (pid {} on {}, since unix time {}): its lease went unrenewed for {seconds} s",
                holder.command, holder.pid, holder.host, holder.since_unix
            ),
        }
    }
}

/// The lock taken: the ETag of the lease written, and what it replaced if anything.
#[derive(Clone, Debug)]
pub struct Taken {
    pub etag: Option<String>,
    pub took_over: Option<TakenOver>,
}

/// What a runner waiting for a lock has seen of it: the version of the lock object, and
/// when this machine first saw that version (its monotonic clock). A lock is expired
/// once one version has been seen for longer than its lease: its holder stopped renewing.
#[derive(Debug, Default)]
pub struct Watch {
    seen: Option<(LockVersion, std::time::Instant)>,
}

/// A version of the lock object: its ETag and a hash of its bytes (a server without ETags
/// still shows a renewal as new bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
struct LockVersion(Option<String>, ObjectId);

impl Watch {
    /// How long `version` has been seen unchanged, starting now if it is new.
    fn unchanged(&mut self, version: LockVersion) -> Duration {
        match &self.seen {
            Some((v, since)) if *v == version => since.elapsed(),
            _ => {
                self.seen = Some((version, std::time::Instant::now()));
                Duration::ZERO
            }
        }
    }
}

/// The state of environments in a bucket.
#[derive(Debug)]
pub struct SharedState {
    remote: Remote,
    pub lease: Duration,
    /// Objects written locally since the last upload: uploaded before a head names them.
    pending: Mutex<BTreeSet<ObjectId>>,
    /// The ETag each environment's head was last seen with: what a move is conditional on.
    heads: Mutex<BTreeMap<String, Option<String>>>,
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere leaves plain data behind: still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SharedState {
    /// Opens the shared state at `remote`; only backends with conditional writes can hold
    /// one.
    pub fn open(remote: Remote, lease: Duration) -> Result<SharedState, RemoteError> {
        if !remote.backend().conditional_writes() {
            return Err(RemoteError {
                url: remote.url().to_string(),
                doing: "opening the shared state".into(),
                cause: format!(
                    "a {:?} backend has no conditional writes, which a state needs so that two runs cannot overwrite each other",
                    remote.backend()
                ),
                hint: Some(match remote.backend() {
                    Backend::Http => "use s3://, gs:// or az:// for [state]; an HTTP server can still hold the [cache]".into(),
                    _ => "use s3://, gs:// or az://, or a file:// URL, which is a local store at that path".into(),
                }),
                conflict: false,
                not_found: false,
            });
        }
        Ok(SharedState {
            remote,
            lease,
            pending: Mutex::new(BTreeSet::new()),
            heads: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    fn head_key(env: &str) -> String {
        format!("envs/{}/head", safe_name(env))
    }

    /// Where an environment's head lives in the bucket, for messages.
    pub fn head_url(&self, env: &str) -> String {
        self.url_of(&Self::head_key(env))
    }

    /// Where an environment's lock lives in the bucket, for messages.
    pub fn lock_url(&self, env: &str) -> String {
        self.url_of(&Self::lock_key(env))
    }

    fn url_of(&self, key: &str) -> String {
        format!("{}/{key}", self.remote.url().trim_end_matches('/'))
    }

    fn lock_key(env: &str) -> String {
        format!("envs/{}/lock", safe_name(env))
    }

    fn object_key(id: &ObjectId) -> String {
        format!("objects/{}", id.hex())
    }

    /// The bucket's key for keyed hashes of secrets (`secret-key`), made by the first run
    /// that needs one (a conditional create: two runs cannot make two keys).
    pub fn secret_key(&self, fresh: Option<[u8; 32]>) -> Result<Option<[u8; 32]>, RemoteError> {
        const KEY: &str = "secret-key";
        let bad = || {
            RemoteError {
            url: self.remote.url().to_string(),
            doing: format!("reading {KEY}"),
            cause: "it is not a 32-byte hex key".into(),
            hint: Some("it was damaged: restore it from a backup (every keyed hash in the records was made with it), or delete it and accept that every node that uses a secret runs again".into()),
            conflict: false,
            not_found: false,
        }
        };
        for _ in 0..2 {
            if let Some((bytes, _)) = self.get(KEY)? {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                return parse_key(&text).map(Some).ok_or_else(bad);
            }
            let Some(key) = fresh else {
                return Ok(None);
            };
            let text = format!("{}\n", hex_key(&key)).into_bytes();
            match self.put(KEY, text, PutMode::Create, None) {
                Ok(_) => return Ok(Some(key)),
                // Another run made it first: read theirs.
                Err(e) if e.conflict => continue,
                Err(e) => return Err(e),
            }
        }
        Err(bad())
    }

    /// Notes that `id` was written locally and must reach the bucket before a head names it.
    pub fn written(&self, id: ObjectId) {
        locked(&self.pending).insert(id);
    }

    /// An object the local store lacks (the caller checks it against its id).
    pub fn fetch(&self, id: &ObjectId) -> Result<Option<Vec<u8>>, RemoteError> {
        Ok(self
            .get(&Self::object_key(id))?
            .map(|(bytes, _)| bytes.to_vec()))
    }

    /// Where an object lives in the bucket, for messages.
    pub fn object_url(&self, id: &ObjectId) -> String {
        self.url_of(&Self::object_key(id))
    }

    fn get(&self, key: &str) -> Result<Option<(Bytes, Option<String>)>, RemoteError> {
        let path = self.remote.key(key);
        self.remote.block(async {
            match self.remote.store().get(&path).await {
                Ok(r) => {
                    let etag = r.meta.e_tag.clone();
                    let bytes = r
                        .bytes()
                        .await
                        .map_err(|e| self.remote.error(format!("reading {key}"), e))?;
                    Ok(Some((bytes, etag)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.remote.error(format!("reading {key}"), e)),
            }
        })
    }

    /// A write; with `within`, given up after that long (a lease renewal must not outlast
    /// the lease it renews).
    fn put(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mode: PutMode,
        within: Option<Duration>,
    ) -> Result<Option<String>, RemoteError> {
        let path = self.remote.key(key);
        self.remote.block(async {
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            let write = self
                .remote
                .store()
                .put_opts(&path, PutPayload::from(bytes), opts);
            let written = match within {
                Some(limit) => match tokio::time::timeout(limit, write).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(RemoteError {
                            url: self.remote.url().into(),
                            doing: format!("writing {key}"),
                            cause: format!("no answer within {} s", limit.as_secs()),
                            hint: None,
                            conflict: false,
                            not_found: false,
                        })
                    }
                },
                None => write.await,
            };
            written
                .map(|r| r.e_tag)
                .map_err(|e| self.remote.error(format!("writing {key}"), e))
        })
    }

    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let path = self.remote.key(key);
        self.remote.block(async {
            match self.remote.store().delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.remote.error(format!("deleting {key}"), e)),
            }
        })
    }

    /// Removes a damaged object from the bucket (`store verify --repair`, when no store
    /// has it whole).
    pub fn delete_object(&self, id: &ObjectId) -> Result<(), RemoteError> {
        self.delete(&Self::object_key(id))
    }

    /// Every object in the bucket whose name is an object id, with its size, in id order.
    pub fn object_ids(&self) -> Result<Vec<(ObjectId, u64)>, RemoteError> {
        use futures::TryStreamExt;
        let prefix = self.remote.key("objects");
        let listed: Vec<object_store::ObjectMeta> = self.remote.block(async {
            self.remote
                .store()
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|e| self.remote.error("listing objects", e))
        })?;
        let mut ids: Vec<(ObjectId, u64)> = listed
            .iter()
            .filter_map(|m| Some((ObjectId::parse(m.location.filename()?)?, m.size)))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The objects written since they were last uploaded.
    pub fn pending(&self) -> Vec<ObjectId> {
        locked(&self.pending).iter().copied().collect()
    }

    /// Uploads one object; it is no longer pending once it is in the bucket.
    pub fn upload(&self, id: &ObjectId, bytes: Vec<u8>) -> Result<(), RemoteError> {
        self.put(&Self::object_key(id), bytes, PutMode::Overwrite, None)?;
        locked(&self.pending).remove(id);
        Ok(())
    }

    /// The environment's head, remembering the ETag it was read with.
    pub fn read_head(&self, env: &str) -> Result<Option<String>, RemoteError> {
        let found = self.get(&Self::head_key(env))?;
        let (text, etag) = match found {
            Some((b, etag)) => (Some(String::from_utf8_lossy(&b).into_owned()), etag),
            None => (None, None),
        };
        locked(&self.heads).insert(env.to_string(), etag);
        Ok(text)
    }

    /// Moves the head from what it was last read as to `new`. `Ok(false)`: someone else
    /// moved it first (nothing was written).
    pub fn move_head(&self, env: &str, new: &ObjectId) -> Result<bool, RemoteError> {
        let etag = locked(&self.heads).get(env).cloned();
        let mode = match etag {
            // Never read (or absent when read): it must still be absent.
            None | Some(None) => PutMode::Create,
            Some(Some(e_tag)) => PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag),
                version: None,
            }),
        };
        match self.put(
            &Self::head_key(env),
            format!("{}\n", new.hex()).into_bytes(),
            mode,
            None,
        ) {
            Ok(etag) => {
                locked(&self.heads).insert(env.to_string(), etag);
                Ok(true)
            }
            Err(e) if e.conflict => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn delete_head(&self, env: &str) -> Result<(), RemoteError> {
        self.delete(&Self::head_key(env))?;
        locked(&self.heads).insert(env.to_string(), None);
        Ok(())
    }

    /// The environments that have a head.
    pub fn envs(&self) -> Result<Vec<String>, RemoteError> {
        let prefix = self.remote.key("envs");
        let listed = self.remote.block(async {
            self.remote
                .store()
                .list_with_delimiter(Some(&prefix))
                .await
                .map_err(|e| self.remote.error("listing environments", e))
        })?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// The lock's content and ETag, if there is a lock object.
    pub fn read_lock(
        &self,
        env: &str,
    ) -> Result<Option<(LockObject, Option<String>)>, RemoteError> {
        Ok(self.read_lock_version(env)?.map(|(l, etag, _)| (l, etag)))
    }

    #[allow(clippy::type_complexity)]
    fn read_lock_version(
        &self,
        env: &str,
    ) -> Result<Option<(LockObject, Option<String>, LockVersion)>, RemoteError> {
        let Some((bytes, etag)) = self.get(&Self::lock_key(env))? else {
            return Ok(None);
        };
        let version = LockVersion(etag.clone(), ObjectId::of(&bytes));
        let lock = match serde_json::from_slice(&bytes) {
            Ok(lease) => LockObject::Lease(lease),
            Err(_) => LockObject::Unreadable {
                object: self.lock_url(env),
                content: String::from_utf8_lossy(&bytes).chars().take(80).collect(),
            },
        };
        Ok(Some((lock, etag, version)))
    }

    fn lease_for(&self, me: &Holder, renewals: u64) -> Vec<u8> {
        self.lease_bytes(me, renewals, false)
    }

    fn lease_bytes(&self, me: &Holder, renewals: u64, ended: bool) -> Vec<u8> {
        let lease = Lease {
            holder: me.clone(),
            expires_unix: if ended {
                0
            } else {
                now_unix() + self.lease.as_secs()
            },
            lease_seconds: self.lease.as_secs(),
            renewals,
            ended,
        };
        serde_json::to_vec(&lease).unwrap_or_default()
    }

    /// Takes the lock of `env`: creates it, or takes it over when it was released, holds
    /// no lease (said in [`Taken::took_over`]), or `watch` has seen it unrenewed for longer
    /// than its lease. `Ok(Err(lease))`: held by someone whose lease may still be running
    /// (a runner that waits calls again with the same `watch`).
    pub fn try_lock(
        &self,
        env: &str,
        me: &Holder,
        watch: &mut Watch,
    ) -> Result<Result<Taken, Lease>, RemoteError> {
        let key = Self::lock_key(env);
        // Twice at most: a lock released between the create and the read is created anew.
        for _ in 0..2 {
            match self.put(&key, self.lease_for(me, 0), PutMode::Create, None) {
                Ok(etag) => {
                    return Ok(Ok(Taken {
                        etag,
                        took_over: None,
                    }))
                }
                Err(e) if e.conflict => {}
                Err(e) => return Err(e),
            }
            let Some((lease, etag, version)) = self.read_lock_version(env)? else {
                continue;
            };
            let unchanged = watch.unchanged(version);
            let took_over = match lease {
                LockObject::Lease(lease) if lease.ended() => None,
                LockObject::Lease(lease) => {
                    let lasts = match lease.lease_seconds {
                        0 => self.lease,
                        s => Duration::from_secs(s),
                    };
                    if unchanged <= lasts {
                        return Ok(Err(lease));
                    }
                    Some(TakenOver::Unrenewed {
                        holder: lease.holder,
                        seconds: unchanged.as_secs(),
                    })
                }
                LockObject::Unreadable { object, content } => {
                    Some(TakenOver::Unreadable { object, content })
                }
            };
            // Take it over, unless another runner (or a renewal) wrote it first.
            let mode = PutMode::Update(UpdateVersion {
                e_tag: etag,
                version: None,
            });
            return match self.put(&key, self.lease_for(me, 0), mode, None) {
                Ok(etag) => Ok(Ok(Taken { etag, took_over })),
                Err(e) if e.conflict => Ok(Err(self.holder_now(env)?)),
                Err(e) => Err(e),
            };
        }
        Ok(Err(self.holder_now(env)?))
    }

    /// Who holds the lock now, for a runner that lost a race for it.
    fn holder_now(&self, env: &str) -> Result<Lease, RemoteError> {
        Ok(match self.read_lock(env)? {
            Some((LockObject::Lease(lease), _)) => lease,
            _ => Lease {
                holder: Holder {
                    pid: 0,
                    host: "?".into(),
                    command: "another envc".into(),
                    since_unix: 0,
                },
                expires_unix: 0,
                lease_seconds: self.lease.as_secs(),
                renewals: 0,
                ended: false,
            },
        })
    }

    /// Deletes the lock whoever holds it (`envc unlock --force`); returns what it held
    /// unless it was released.
    pub fn force_unlock(&self, env: &str) -> Result<Option<LockObject>, RemoteError> {
        let held = self.read_lock(env)?;
        self.delete(&Self::lock_key(env))?;
        Ok(match held {
            Some((LockObject::Lease(lease), _)) if lease.ended() => None,
            held => held.map(|(l, _)| l),
        })
    }
}

/// A held lock of a shared state: renewed in the background while it lives, its lease
/// ended when dropped. If a renewal finds the lock taken (forced open, or taken over after this
/// process stalled past its lease), the lock is lost: [`LeaseGuard::lost`] says so and
/// the state's head move still protects the records.
pub struct LeaseGuard {
    shared: Arc<SharedState>,
    env: String,
    etag: Arc<Mutex<Option<String>>>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    lost: Arc<AtomicBool>,
    /// Held for a whole renewal (read the ETag, write, keep the new one): a renewal the
    /// run asks for itself ([`LeaseGuard::confirm`]) and the background one must not both
    /// write with the same ETag, or the second would find the lock "taken".
    renewing: Arc<Mutex<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
    me: Holder,
    /// Renewals written so far (the next one writes one more).
    renewals: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeaseGuard({})", self.env)
    }
}

impl LeaseGuard {
    pub fn new(shared: Arc<SharedState>, env: &str, etag: Option<String>, me: Holder) -> Self {
        let etag = Arc::new(Mutex::new(etag));
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let lost = Arc::new(AtomicBool::new(false));
        let renewing = Arc::new(Mutex::new(()));
        let renewals = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let every = (shared.lease / 3).max(Duration::from_millis(200));
        // Past this without a renewal, another runner may be about to take the lock over:
        // this one counts it lost rather than go on as if it held it. A slow renewal (a
        // loaded server or machine) is waited for up to the same margin. Counted from when
        // the last successful renewal was sent: a waiter starts timing a version no earlier
        // than the server wrote it, which is after that.
        let give_up = shared.lease.saturating_sub(shared.lease / 6);
        let holder = me.clone();
        let renewer = {
            let (shared, env, etag, stop, lost, renewing, renewals) = (
                shared.clone(),
                env.to_string(),
                etag.clone(),
                stop.clone(),
                lost.clone(),
                renewing.clone(),
                renewals.clone(),
            );
            let mut renewed = std::time::Instant::now();
            std::thread::Builder::new()
                .name("envc-lease".into())
                .spawn(move || loop {
                    let (flag, wake) = &*stop;
                    let guard = locked(flag);
                    let (guard, _) = wake
                        .wait_timeout_while(guard, every, |stopped| !*stopped)
                        .unwrap_or_else(|e| e.into_inner());
                    if *guard {
                        return;
                    }
                    drop(guard);
                    if lost.load(Ordering::SeqCst) {
                        return;
                    }
                    let within = give_up.saturating_sub(renewed.elapsed());
                    let _renewal = locked(&renewing);
                    let sent = std::time::Instant::now();
                    match renew(&shared, &env, &etag, &me, &renewals, within) {
                        Ok(()) => renewed = sent,
                        Err(e) if e.conflict || e.not_found => {
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        // A network blip: the next renewal tries again, within the lease.
                        Err(_) if renewed.elapsed() < give_up => {}
                        Err(_) => {
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                })
                .ok()
        };
        LeaseGuard {
            shared,
            env: env.to_string(),
            etag,
            stop,
            lost,
            renewing,
            renewer,
            me: holder,
            renewals,
        }
    }

    /// Leaves the lock as a killed process leaves it: renewals stop, and nothing is
    /// released. What tests of takeovers use to stand for a SIGKILL within one process.
    pub fn abandon(mut self) {
        self.stop_renewing();
        self.lost.store(true, Ordering::SeqCst);
    }

    fn stop_renewing(&mut self) {
        {
            let (flag, wake) = &*self.stop;
            *locked(flag) = true;
            wake.notify_all();
        }
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
    }

    /// Whether the lock was taken from this process while it held it.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Renews the lease now, so that a lock forced open since the last renewal is known
    /// before a run's last commit (a run shorter than the renewal period would otherwise
    /// end as if it held it). Whether it is still held; a store that does not answer
    /// leaves the answer to the next renewal.
    pub fn confirm(&self) -> bool {
        if self.lost() {
            return false;
        }
        let _renewal = locked(&self.renewing);
        match renew(
            &self.shared,
            &self.env,
            &self.etag,
            &self.me,
            &self.renewals,
            self.shared.lease / 3,
        ) {
            Err(e) if e.conflict || e.not_found => {
                self.lost.store(true, Ordering::SeqCst);
                false
            }
            Ok(()) | Err(_) => true,
        }
    }
}

/// One renewal of `env`'s lock: a conditional write on the ETag this holder last wrote,
/// of a lease whose renewal count is one more (so a new version even within a second).
fn renew(
    shared: &SharedState,
    env: &str,
    etag: &Mutex<Option<String>>,
    me: &Holder,
    renewals: &std::sync::atomic::AtomicU64,
    within: Duration,
) -> Result<(), RemoteError> {
    let mode = PutMode::Update(UpdateVersion {
        e_tag: locked(etag).clone(),
        version: None,
    });
    let count = renewals.fetch_add(1, Ordering::SeqCst) + 1;
    let new = shared.put(
        &SharedState::lock_key(env),
        shared.lease_for(me, count),
        mode,
        Some(within),
    )?;
    *locked(etag) = new;
    Ok(())
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.stop_renewing();
        if self.lost() {
            return;
        }
        // Released by a conditional write that ends the lease now: if the lock is no longer
        // ours (its ETag moved), nothing is written. A plain delete could remove another
        // runner's lock. The next runner takes an ended lease over.
        let Some(ours) = locked(&self.etag).clone() else {
            return;
        };
        let mode = PutMode::Update(UpdateVersion {
            e_tag: Some(ours),
            version: None,
        });
        let ended = self.shared.lease_bytes(&self.me, 0, true);
        let _ = self
            .shared
            .put(&SharedState::lock_key(&self.env), ended, mode, None);
    }
}
