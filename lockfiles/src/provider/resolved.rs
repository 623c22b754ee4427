//! What resolution pins for one provider: the version, and the hashes any package of it must
//! match to be used. The lockfile writes it; [`super::fetch`] checks packages against it.

use std::collections::BTreeSet;

use super::address::ProviderAddress;
use super::constraint::Version;
use super::hashes::PackageHash;

/// A provider pinned: address, version, and its package hashes, sorted by their text and
/// without repeats (as `.terraform.lock.hcl` lists them), so the lockfile's bytes do not
/// depend on the order a registry listed its packages in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedProvider {
    pub address: ProviderAddress,
    pub version: Version,
    hashes: Vec<PackageHash>,
}

impl ResolvedProvider {
    pub fn new(
        address: ProviderAddress,
        version: Version,
        hashes: impl IntoIterator<Item = PackageHash>,
    ) -> ResolvedProvider {
        let hashes: BTreeSet<PackageHash> = hashes.into_iter().collect();
        ResolvedProvider {
            address,
            version,
            hashes: hashes.into_iter().collect(),
        }
    }

    /// Sorted by text (`h1:` before `zh:`), no repeats.
    pub fn hashes(&self) -> &[PackageHash] {
        &self.hashes
    }

    /// The `h1:` hashes only: what an unpacked copy can be checked against.
    pub fn h1(&self) -> impl Iterator<Item = &PackageHash> {
        self.hashes.iter().filter(|h| h.is_h1())
    }
}
