//! What a node kind is built on, and the contract it meets (`node_type`): the graph as the
//! executor holds it (`spec`), substitution of deferred values and the resolved hash's
//! inputs (`substitute`), transports (local, SSH) and the connections of one run
//! (`transport`, `connect`, `kept`), how a remote operation's script runs (`script`),
//! checks, pinned `.deb`s and Terraform/OpenTofu providers (`providers`), secrets and keys, the binary cache, the machine providers'
//! contract (`machines`), and why a step failed (`error`).
//!
//! Below the kinds (`envc-kinds`), which implement the contract, and the engine
//! (`envc-executor`), which drives them through it: Cargo keeps this crate from naming
//! either.

// The store's modules under the names this crate's modules use.
pub use envc_store::{envlock, held, names, record, remote, shared_state, store};

pub mod beneath;
pub mod cache;
pub mod checks;
pub mod connect;
pub mod debs;
pub mod error;
pub mod future;
pub mod kept;
pub mod keys;
pub mod kustomize;
pub mod machines;
pub mod node_type;
pub mod providers;
pub mod script;
pub mod secrets;
pub mod spec;
pub mod stack;
pub mod substitute;
pub mod tools;
pub mod transport;
