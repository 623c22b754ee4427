//! What the integration tests share: test hosts in network namespaces, the servers they
//! talk to, projects and their output. A module here may use its siblings (`super::`).

pub mod cloud;
pub mod cloud_lab;
pub mod nshosts;
pub mod offline;
pub mod output;
pub mod project;
pub mod servers;
pub mod signing_key;
pub mod ssh_config;
pub mod tool_shims;

// The small Debian archive the lockfile crate's tests serve, shared with them.
#[path = "../../lockfiles/tests/support/mod.rs"]
pub mod archive;
