//! The exclusive lock of one environment. It is a kernel `flock` on a file in the store: the
//! kernel releases it when its holder exits for any reason, SIGKILL included, so a lock left
//! by a dead process is never seen as held and is taken over by the next run. The file also
//! names its holder, for the message a second run prints.
//!
//! A store whose state is shared (`[state]` in envc.toml) locks in the bucket instead: a
//! lock object with a lease, renewed while the run lives (see `shared_state`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use crate::names::safe_name;
use crate::remote::RemoteError;
use crate::shared_state::{LeaseGuard, TakenOver, Watch};
use crate::store::Store;

pub use crate::shared_state::Holder;

#[derive(Debug)]
pub enum EnvLockError {
    /// Held by another live process; `None` when it has not written its name yet.
    /// `lease_seconds`: a shared lock's lease, which a waiting run takes it over after
    /// once it has seen it unrenewed that long.
    Held {
        env: String,
        holder: Option<Holder>,
        lease_seconds: Option<u64>,
    },
    Remote(RemoteError),
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl std::fmt::Display for EnvLockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvLockError::Held {
                env,
                holder: Some(h),
                lease_seconds: None,
            } => write!(
                f,
                "environment `{env}` is locked by `{}` (pid {} on {}, since unix time {}); wait for it, or pass --wait",
                h.command, h.pid, h.host, h.since_unix
            ),
            EnvLockError::Held {
                env,
                holder: Some(h),
                lease_seconds: Some(t),
            } => write!(
                f,
                "environment `{env}` is locked in the shared state by `{}` (pid {} on {}, since unix time {}), which renews its lease of {t} s while it runs\n  \
                 hint: wait for it, or pass --wait; if that runner is dead, a run with --wait takes the lock over once it has seen it unrenewed for {t} s, or `envc unlock --force FILE` frees it now",
                h.command, h.pid, h.host, h.since_unix
            ),
            EnvLockError::Remote(e) => write!(f, "{e}"),
            EnvLockError::Held { env, holder: None, .. } => {
                write!(f, "environment `{env}` is locked by another envc that is starting; wait for it, or pass --wait")
            }
            EnvLockError::Io { path, error } => write!(f, "cannot lock {}: {error}", path.display()),
        }
    }
}

impl std::error::Error for EnvLockError {}

/// Held while it lives; dropping it (or the process dying) releases the lock.
pub struct EnvLock {
    env: String,
    _file: Option<File>,
    lease: Option<LeaseGuard>,
    took_over: Option<TakenOver>,
}

impl crate::store::HeldLock for EnvLock {
    fn env(&self) -> &str {
        EnvLock::env(self)
    }

    fn lost(&self) -> bool {
        EnvLock::lost(self)
    }
}

impl EnvLock {
    /// Takes the lock of `env`, failing at once when another process holds it, or waiting
    /// for it when `wait` is set.
    pub fn acquire(
        store: &Store,
        env: &str,
        wait: bool,
        me: &Holder,
    ) -> Result<EnvLock, EnvLockError> {
        if let Some(shared) = store.shared() {
            // Looked at often enough that a lease's end is noticed within a fraction of it.
            let every = (shared.lease / 4).clamp(
                std::time::Duration::from_millis(100),
                std::time::Duration::from_secs(1),
            );
            let mut watch = Watch::default();
            loop {
                match shared
                    .try_lock(env, me, &mut watch)
                    .map_err(EnvLockError::Remote)?
                {
                    Ok(taken) => {
                        let lease = LeaseGuard::new(shared.clone(), env, taken.etag, me.clone());
                        return Ok(EnvLock {
                            env: env.to_string(),
                            _file: None,
                            lease: Some(lease),
                            took_over: taken.took_over,
                        });
                    }
                    Err(_) if wait => std::thread::sleep(every),
                    Err(lease) => {
                        return Err(EnvLockError::Held {
                            env: env.to_string(),
                            holder: Some(lease.holder),
                            lease_seconds: Some(lease.lease_seconds),
                        })
                    }
                }
            }
        }
        let path = store
            .root()
            .join("locks")
            .join(format!("{}.lock", safe_name(env)));
        let io = |error| EnvLockError::Io {
            path: path.clone(),
            error,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) if wait => file.lock().map_err(io)?,
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = serde_json::from_str(&text).ok();
                return Err(EnvLockError::Held {
                    env: env.to_string(),
                    holder,
                    lease_seconds: None,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Ours now: replace whatever an earlier (finished or killed) holder wrote.
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&serde_json::to_vec(me).expect("holder serialises"))
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(EnvLock {
            env: env.to_string(),
            _file: Some(file),
            lease: None,
            took_over: None,
        })
    }

    /// What taking a shared lock replaced: a lease its holder stopped renewing, or a lock
    /// object that held no lease (the user is told either).
    pub fn took_over(&self) -> Option<&TakenOver> {
        self.took_over.as_ref()
    }

    /// Whether a shared lock was taken from this process while it held it.
    pub fn lost(&self) -> bool {
        self.lease.as_ref().is_some_and(LeaseGuard::lost)
    }

    /// Whether it is still held, asking the shared state now rather than at the next
    /// renewal (a file lock cannot be taken while its process lives).
    pub fn confirm(&self) -> bool {
        self.lease.as_ref().is_none_or(LeaseGuard::confirm)
    }

    pub fn env(&self) -> &str {
        &self.env
    }
}
