//! The executor: store, state and realization records, the scheduler, transports (local and
//! SSH) and node executors. It consumes `envc_compiler::Graph` (nodes in canonical
//! topological order, each with its blake3 id) and resolves deferred values before hashing
//! again (the resolved hash).

pub mod connect;
pub mod image;
pub mod lock;
pub mod ops;
pub mod plan;
pub mod probe;
pub mod qemu;
pub mod record;
pub mod repair;
pub mod resolve;
pub mod run;
pub mod spec;
pub mod store;
pub mod transport;

pub use lock::{EnvLock, Holder, LockError};
pub use record::{RealizationRecord, RunRecord, State};
pub use store::{ObjectId, RefConflict, Store, StoreError};
