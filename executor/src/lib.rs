//! The executor: store, state and realization records, the scheduler, transports (local and
//! SSH) and node executors.
//!
//! Not built yet: the executor issue fills this crate. It will consume
//! `envc_compiler::Graph` (nodes in canonical topological order, each with its blake3 id)
//! and resolve deferred values before hashing again (the resolved hash).
