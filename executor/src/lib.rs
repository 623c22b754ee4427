//! The executor: store, state and realization records, the scheduler, transports (local and
//! SSH) and node executors. It consumes `envc_compiler::Graph` (nodes in canonical
//! topological order, each with its blake3 id) and resolves deferred values before hashing
//! again (the resolved hash).

pub mod lock;
pub mod ops;
pub mod record;
pub mod store;
pub mod transport;

pub use lock::{EnvLock, Holder, LockError};
pub use record::{RealizationRecord, RunRecord, State};
pub use store::{ObjectId, RefConflict, Store, StoreError};
