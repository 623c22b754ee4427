//! Terraform/OpenTofu providers, pinned by their bytes: what `envc lock` resolves for a
//! `resource` node's provider, and how the build gets a package that matches the pin.
//!
//! A provider is declared by its source address ([`ProviderAddress`], `hashicorp/google`)
//! and a version constraint ([`Constraints`], `~> 6.0`). [`resolve`] asks a
//! [`ProviderSource`] — the provider's registry ([`registry`], the protocol Terraform and
//! OpenTofu use), a network mirror or a filesystem mirror ([`mirror`]) — for the newest
//! version the constraint admits on a [`Platform`], verifies its package, and returns a
//! [`ResolvedProvider`]: the version and the package hashes in the `zh:`/`h1:` schemes of
//! `.terraform.lock.hcl` ([`hashes`]), sorted, so that the same packages verify the same
//! way here and in Terraform. [`fetch`] later takes that pin and a source, gets this
//! platform's package, checks it against the pin, and only then writes the provider's
//! executable into a directory the caller gives (whence it goes into the store, named by
//! its content).
//!
//! ```text
//! let address = ProviderAddress::parse("hashicorp/google")?;
//! let constraint = Constraints::parse("~> 6.0")?;
//! let source = ProviderSource::Registry { http: HttpPolicy::HttpsOnly };
//! let pin = provider::resolve(&address, &constraint, &Platform::current(), &source).await?;
//! // … the lockfile records pin.version and pin.hashes() …
//! let exe = provider::fetch(&pin, &Platform::current(), &source, &scratch_dir).await?;
//! ```
//!
//! [`resolve_package`] is [`resolve`] that also hands back the verified package, so that
//! locking need not download it twice. The lockfile pins what [`resolve`] returns
//! (`crate::model::ProviderPin`); [`fetch_package`] hands a verified package to a caller
//! that keeps it (the contract's `providers.rs`, in the store).
//!
//! Every error is a [`ProviderError`] naming the provider (its version, URL and hashes
//! where they matter) and the fix; nothing here panics on bad input. Plain http is refused
//! unless the caller chooses [`HttpPolicy::AllowPlainHttpToLoopback`], for a test's server.

pub mod address;
pub mod constraint;
pub mod error;
pub mod hashes;
mod http;
pub mod mirror;
pub mod package;
pub mod platform;
pub mod registry;
pub mod resolved;

use std::path::{Path, PathBuf};

pub use address::{AddressError, ProviderAddress, DEFAULT_HOST};
pub use constraint::{ConstraintError, Constraints, Version};
pub use error::{HashMismatch, ProviderError};
pub use hashes::PackageHash;
pub use http::HttpPolicy;
pub use package::{Package, VerifiedPackage};
pub use platform::Platform;
pub use resolved::ResolvedProvider;

/// Where providers are resolved and fetched from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderSource {
    /// The registry the address names (service discovery on its hostname).
    Registry { http: HttpPolicy },
    /// A network mirror at `base` (`https://mirror.example/providers/`).
    NetworkMirror { base: String, http: HttpPolicy },
    /// A filesystem mirror rooted at `root`.
    FilesystemMirror { root: PathBuf },
}

/// The newest version of `address` that `constraint` admits on `platform`, from `source`,
/// its package verified and pinned.
pub async fn resolve(
    address: &ProviderAddress,
    constraint: &Constraints,
    platform: &Platform,
    source: &ProviderSource,
) -> Result<ResolvedProvider, ProviderError> {
    resolve_package(address, constraint, platform, source)
        .await
        .map(|(pin, _)| pin)
}

/// [`resolve`], with the verified package (to unpack without downloading it again).
pub async fn resolve_package(
    address: &ProviderAddress,
    constraint: &Constraints,
    platform: &Platform,
    source: &ProviderSource,
) -> Result<(ResolvedProvider, VerifiedPackage), ProviderError> {
    match source {
        ProviderSource::Registry { http } => {
            registry::resolve(address, constraint, platform, *http).await
        }
        ProviderSource::NetworkMirror { base, http } => {
            mirror::NetworkMirror::new(base, address, *http)?
                .resolve(constraint, platform)
                .await
        }
        ProviderSource::FilesystemMirror { root } => {
            mirror::FilesystemMirror::new(root, address).resolve(constraint, platform)
        }
    }
}

/// Gets the package `pin` names for `platform` from `source`, checks it against the pin's
/// hashes (`zh:` or `h1:` for a zip, `h1:` for an unpacked directory), and only then writes
/// the provider's executable into `dir`; returns its path.
pub async fn fetch(
    pin: &ResolvedProvider,
    platform: &Platform,
    source: &ProviderSource,
    dir: &Path,
) -> Result<PathBuf, ProviderError> {
    fetch_package(pin, platform, source).await?.unpack(dir)
}

/// [`fetch`]'s package, verified against the pin and not yet unpacked: for a caller that
/// keeps the package itself (the store, by its bytes) and unpacks it where it chooses
/// ([`VerifiedPackage::unpack_all`]).
pub async fn fetch_package(
    pin: &ResolvedProvider,
    platform: &Platform,
    source: &ProviderSource,
) -> Result<VerifiedPackage, ProviderError> {
    let address = &pin.address;
    match source {
        ProviderSource::Registry { http } => {
            registry::Registry::discover(address, *http)
                .await?
                .fetch(pin, platform)
                .await
        }
        ProviderSource::NetworkMirror { base, http } => {
            mirror::NetworkMirror::new(base, address, *http)?
                .fetch(pin, platform)
                .await
        }
        ProviderSource::FilesystemMirror { root } => {
            mirror::FilesystemMirror::new(root, address).fetch(pin, platform)
        }
    }
}
