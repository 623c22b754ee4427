//! The executor: the application layer of envc. Store, state and realization records, the
//! scheduler, transports (local and SSH) and node executors; the project on disk
//! (`project`), the session that plans, builds, destroys and probes an environment
//! (`session`), and the lockfile as the graph needs it (`locking`). It consumes `envc_compiler::Graph` (nodes in canonical
//! topological order, each with its blake3 id) and resolves deferred values before hashing
//! again (the resolved hash).

pub mod beneath;
pub mod cache;
pub mod checks;
pub mod config;
pub mod connect;
pub mod debs;
pub mod envlock;
pub mod error;
pub mod future;
pub mod held;
pub mod kept;
pub mod keys;
pub mod kinds;
pub mod kustomize;
pub mod locking;
mod names;
pub mod object_id;
pub mod plan;
pub mod probe;
pub mod project;
pub mod record;
pub mod remote;
pub mod repair;
pub mod resolve;
pub mod run;
pub mod script;
pub mod secret_edit;
pub mod secrets;
pub mod session;
pub mod shared_state;
pub mod sharing;
pub mod spec;
pub mod stack;
pub mod state;
pub mod store;
pub mod substitute;
pub mod tools;
pub mod transport;
pub mod verify;

pub use envlock::{EnvLock, EnvLockError, Holder};
pub use record::{RealizationRecord, RunRecord, State};
pub use store::{ObjectId, RefConflict, Store, StoreError};

/// 16 hex digits no other caller gets: names of things made beside others' (staging
/// directories on targets, control sockets being started). Random; should the system's
/// randomness fail, the process id, the clock and a counter still keep it unique here.
pub(crate) fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mixed = (u64::from(std::process::id()) << 32)
            ^ u64::from(nanos)
            ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(17);
        bytes = mixed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
