//! The lockfile: the model of pinned external inputs (Debian archive state, package versions
//! and hashes, image package sets, tool versions, `SOURCE_DATE_EPOCH`, the standard
//! library's hash), its deterministic text form, resolution against Debian's archive, tool
//! probing, and `lock diff`.
//!
//! Modules follow the pipeline of `envc lock`: [`fetch`] reads an archive's indices over
//! HTTP and verifies them along the chain Release → Packages; [`archive`] parses them (pure);
//! [`resolve`] picks versions and image package sets (pure, [`version`] orders versions the
//! way dpkg does); [`probe`] asks the machine's tools for their versions; [`model`] is what is
//! pinned, [`text`] its TOML form and [`file`](mod@file) its place on disk; [`diff`](mod@diff) explains the
//! change between two lockfiles. Every error is a value whose message names the pin and
//! the fix; nothing here panics on bad input.
//!
//! What `envc lock FILE` does with it, in order: [`Archive::fetch`] each suite the
//! environment uses, [`resolve_packages`] and [`resolve_image`] what it names,
//! [`probe::probe_all`] the tools, build a [`Lockfile`] (with [`update`] to keep unnamed
//! pins on `--update KEY`), and [`Lockfile::write_to`] the path [`lock_path`] gives, only
//! when everything resolved. The format is described in `lockfiles/README.md`.

pub mod archive;
pub mod consistency;
pub mod diff;
pub mod fetch;
pub mod file;
pub mod model;
pub mod probe;
pub mod resolve;
pub mod text;
pub mod version;

#[cfg(test)]
mod testdata;

pub use archive::Archive;
pub use consistency::{inconsistencies, Inconsistency};
pub use diff::{diff, LockDiff};
pub use fetch::FetchError;
pub use file::lock_path;
pub use model::*;
pub use probe::{check_tools, probe_tool, ToolMismatch};
pub use resolve::{resolve_image, resolve_packages, ResolveError};
pub use text::LockError;
