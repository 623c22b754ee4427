//! The lockfile: the model of pinned external inputs (Debian archive state, package versions
//! and hashes, image package sets, tool versions, `SOURCE_DATE_EPOCH`, the standard
//! library's hash), its deterministic text form, resolution against Debian's archive, tool
//! probing, and `lock diff`.
//!
//! Modules follow the pipeline of `envc lock`: [`fetch`] reads an archive's indices over
//! HTTP and verifies them along the chain Release → Packages; [`archive`] parses them (pure);
//! [`resolve`] picks versions and image package sets (pure, [`version`] orders versions the
//! way dpkg does); [`deb`] reads a `.deb`'s control paragraph from its bytes and
//! [`installable`] checks, as apt would, that `.deb`s install onto a target's packages (both
//! pure, for the build); [`probe`] asks the machine's tools for their versions; [`model`] is what is
//! pinned, [`text`] its TOML form ([`error`] what reading it reports) and [`file`](mod@file) its place on disk; [`diff`](mod@diff) explains the
//! change between two lockfiles, [`changelog`] what each moved package's changelog says it
//! fixes; [`updates`] is `--update=security`, [`outdated`] `--outdated` (the pins that have
//! newer versions, against the indices the last lock kept). [`provider`] resolves
//! Terraform/OpenTofu providers through the provider registry protocol or a mirror and pins
//! them by their package hashes (`zh:`/`h1:`, as `.terraform.lock.hcl` does); the model pins
//! each as a [`ProviderPin`] (`[[provider]]`). Every error is a value whose message names the pin and
//! the fix; nothing here panics on bad input.
//!
//! What `envc lock FILE` does with it, in order: the executor reads the environment's
//! [`Needs`] off its graph; [`needs::stale`] compares them with the lockfile offline
//! (`--check`, `build --locked`); [`environment::resolve_environment`] fetches each suite
//! ([`Archive::fetch`], its signature checked), resolves what it names
//! ([`resolve_packages`], [`resolve_image`]), resolves each provider from the
//! [`provider::ProviderSource`] the caller gives, and probes the tools; [`update`] keeps the
//! unnamed pins on `--update=KEY`; [`Lockfile::write_to`] writes the path [`lock_path`]
//! gives, only when everything resolved. Pin keys and values go through
//! `envc_ids::pin`, the one codec every crate shares. The format is described in
//! `lockfiles/README.md`.

pub mod archive;
pub mod changelog;
pub mod cloud;
pub mod consistency;
pub mod deb;
pub mod diff;
pub mod environment;
pub mod error;
pub mod fetch;
pub mod file;
pub mod installable;
pub mod mirror;
pub mod model;
pub mod needs;
pub mod outdated;
pub mod probe;
pub mod provider;
pub mod resolve;
pub mod text;
pub mod updates;
pub mod version;

#[cfg(test)]
mod testdata;

pub use archive::Archive;
pub use cloud::{CloudImageError, CloudImageNeed, CloudImages};
pub use consistency::{inconsistencies, Inconsistency};
pub use diff::{diff, LockDiff};
pub use error::LockError;
pub use fetch::FetchError;
pub use file::{lock_path, read_lock, read_lock_arg, LockedFile, ReadLockError};
pub use model::*;
pub use needs::{
    stale, CloudImageConflict, LockProblem, Needs, NeedsConflict, ProviderNeed, ProviderNeedError,
    Stale, SuiteConflict, VendorConflict,
};
pub use probe::{check_tools, probe_tool, upstream, ToolMismatch, ToolRole};
pub use resolve::{resolve_image, resolve_packages, ResolveError};
