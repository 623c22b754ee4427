//! What names things across envc, each with one spelling: the pin key and value codec
//! ([`pin`]), node kinds and node keys ([`NodeKind`], [`NodeKey`]), the hashes and
//! identities a realization record is keyed by ([`ResolvedHash`], [`TargetIdentity`]), and
//! the names of the facts nodes record ([`fact`]).
//!
//! Pure, with no dependency on the language: the lockfile crate, the compiler and the
//! executor all meet here, so none of them formats or splits a key itself.

pub mod fact;
mod node;
pub mod pin;
mod record;

pub use node::{BadNodeKey, NodeKey, NodeKind};
pub use record::{ResolvedHash, TargetIdentity};

/// The Kubernetes API version `manifest`s are checked against (pinned as
/// `tool:kubernetes`): the `k8s-openapi` feature `envc-k8s` builds with (`v1_37` in
/// k8s/Cargo.toml); change both together.
pub const KUBERNETES_VERSION: &str = "1.37";
