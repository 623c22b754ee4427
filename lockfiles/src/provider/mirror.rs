//! Provider mirrors, for sites that cannot reach a registry (and for the tests):
//!
//! - the network mirror protocol
//!   (<https://developer.hashicorp.com/terraform/internals/provider-network-mirror-protocol>):
//!   `{base}{hostname}/{namespace}/{type}/index.json` lists the versions
//!   (`{"versions": {"2.0.0": {}}}`), `…/{version}.json` each platform's package
//!   (`{"archives": {"linux_amd64": {"url": "…zip", "hashes": ["h1:…"]}}}`, the URL
//!   relative to that document). A package is checked against the hashes listed; a mirror
//!   that lists none is taken at its word, as Terraform takes it, and then only the pin
//!   protects later fetches.
//! - the filesystem mirror: under its root, `HOSTNAME/NAMESPACE/TYPE/` holds packed
//!   packages, `terraform-provider-TYPE_VERSION_OS_ARCH.zip`, and unpacked ones,
//!   `VERSION/OS_ARCH/`. Where both are there the packed one is used. Nothing is listed
//!   beside them to check them against: the directory is as trusted as the machine.
//!
//! A mirror's pin holds the `h1:` of this platform's package (and, from a network mirror,
//! the hashes it lists), as Terraform records it: `zh:` needs the publisher's SHA256SUMS,
//! which mirrors do not carry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reqwest::Url;
use serde::Deserialize;

use super::address::ProviderAddress;
use super::constraint::{Constraints, Version};
use super::error::ProviderError;
use super::hashes::PackageHash;
use super::http::{Http, HttpPolicy};
use super::package::{self, Package, VerifiedPackage};
use super::platform::Platform;
use super::resolved::ResolvedProvider;

#[derive(Deserialize)]
struct IndexDoc {
    versions: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct VersionDoc {
    archives: BTreeMap<String, Archive>,
}

#[derive(Deserialize)]
struct Archive {
    url: String,
    #[serde(default)]
    hashes: Vec<String>,
}

/// A network mirror, reached for one provider.
pub struct NetworkMirror {
    http: Http,
    address: ProviderAddress,
    /// `{base}{hostname}/{namespace}/{type}/`.
    dir: Url,
}

impl NetworkMirror {
    /// The mirror at `base` (`https://mirror.example/providers/`), for `address`.
    pub fn new(
        base: &str,
        address: &ProviderAddress,
        policy: HttpPolicy,
    ) -> Result<NetworkMirror, ProviderError> {
        let http = Http::new(policy, &address.to_string())?;
        // The base is a directory: without its trailing `/`, joining would replace its last
        // segment.
        let base = if base.ends_with('/') {
            base.to_string()
        } else {
            format!("{base}/")
        };
        let base_url = Url::parse(&base).map_err(|e| ProviderError::BadDocument {
            provider: address.to_string(),
            url: base.clone(),
            detail: format!("the network mirror's base is not a URL: {e}"),
        })?;
        let dir = http.url(
            &base_url,
            &format!(
                "{}/{}/{}/",
                address.hostname, address.namespace, address.type_name
            ),
        )?;
        Ok(NetworkMirror {
            http,
            address: address.clone(),
            dir,
        })
    }

    /// The versions the mirror holds, oldest first (those it spells in a way this crate
    /// does not read are left out).
    pub async fn versions(&self) -> Result<Vec<Version>, ProviderError> {
        let url = self.http.url(&self.dir, "index.json")?;
        let doc: IndexDoc = self.http.json(&url, "network mirror index").await?;
        let mut versions: Vec<Version> = doc
            .versions
            .keys()
            .filter_map(|v| Version::parse(v).ok())
            .collect();
        versions.sort();
        Ok(versions)
    }

    /// The package of `version` for `platform`, checked against the hashes the mirror
    /// lists for it; and those hashes.
    pub async fn package(
        &self,
        version: &Version,
        platform: &Platform,
    ) -> Result<(VerifiedPackage, Vec<PackageHash>), ProviderError> {
        let doc_url = self.http.url(&self.dir, &format!("{version}.json"))?;
        let doc: VersionDoc = self
            .http
            .json(&doc_url, "network mirror version document")
            .await?;
        let Some(archive) = doc.archives.get(&platform.to_string()) else {
            return Err(ProviderError::NotForPlatform {
                provider: self.address.to_string(),
                version: version.to_string(),
                platform: platform.to_string(),
            });
        };
        let url = self.http.url(&doc_url, &archive.url)?;
        // Schemes this crate does not compute (Terraform's legacy ones) cannot vouch for a
        // package: they are left out rather than refused.
        let listed: Vec<PackageHash> = archive
            .hashes
            .iter()
            .filter_map(|h| h.parse().ok())
            .collect();
        let bytes = self.http.require(&url, "provider package").await?;
        let package = Package::Zip {
            bytes,
            origin: url.to_string(),
        };
        let verified = if listed.is_empty() {
            trust(&self.address, version, package)?
        } else {
            package::verify(
                &self.address,
                version,
                package,
                &listed,
                &format!("the hashes {doc_url} lists"),
            )?
        };
        Ok((verified, listed))
    }

    /// Resolves against this mirror: the newest version `constraints` admits.
    pub async fn resolve(
        &self,
        constraints: &Constraints,
        platform: &Platform,
    ) -> Result<(ResolvedProvider, VerifiedPackage), ProviderError> {
        let versions = self.versions().await?;
        let version = newest(&self.address, constraints, platform, &versions)?;
        let (verified, listed) = self.package(&version, platform).await?;
        let h1 = verified.h1().cloned();
        let pin =
            ResolvedProvider::new(self.address.clone(), version, listed.into_iter().chain(h1));
        Ok((pin, verified))
    }

    /// The package of a pin, checked against the pin.
    pub async fn fetch(
        &self,
        pin: &ResolvedProvider,
        platform: &Platform,
    ) -> Result<VerifiedPackage, ProviderError> {
        let doc_url = self.http.url(&self.dir, &format!("{}.json", pin.version))?;
        let doc: VersionDoc = self
            .http
            .json(&doc_url, "network mirror version document")
            .await?;
        let Some(archive) = doc.archives.get(&platform.to_string()) else {
            return Err(ProviderError::NotForPlatform {
                provider: self.address.to_string(),
                version: pin.version.to_string(),
                platform: platform.to_string(),
            });
        };
        let url = self.http.url(&doc_url, &archive.url)?;
        let bytes = self.http.require(&url, "provider package").await?;
        package::verify(
            &self.address,
            &pin.version,
            Package::Zip {
                bytes,
                origin: url.to_string(),
            },
            pin.hashes(),
            "the lockfile's pin",
        )
    }
}

/// A package nothing can be checked against (a filesystem mirror's, a network mirror that
/// lists no hashes): verified against its own hashes, which makes it usable; the pin made
/// from it is what later fetches are checked against.
fn trust(
    address: &ProviderAddress,
    version: &Version,
    package: Package,
) -> Result<VerifiedPackage, ProviderError> {
    let own = match &package {
        Package::Zip { bytes, .. } => vec![PackageHash::zh(bytes)],
        Package::Dir { path } => {
            vec![
                super::hashes::h1_of_dir(path).map_err(|e| ProviderError::BadPackage {
                    provider: address.to_string(),
                    version: version.to_string(),
                    origin: package.origin(),
                    detail: e.to_string(),
                })?,
            ]
        }
    };
    package::verify(address, version, package, &own, "its own hash")
}

fn newest(
    address: &ProviderAddress,
    constraints: &Constraints,
    platform: &Platform,
    versions: &[Version],
) -> Result<Version, ProviderError> {
    constraints
        .newest(versions)
        .cloned()
        .ok_or_else(|| ProviderError::NoMatchingVersion {
            provider: address.to_string(),
            constraint: constraints.to_string(),
            platform: platform.to_string(),
            available: versions.iter().map(Version::to_string).collect(),
        })
}

/// A filesystem mirror: a directory laid out as Terraform's `filesystem_mirror`.
pub struct FilesystemMirror {
    address: ProviderAddress,
    /// `ROOT/HOSTNAME/NAMESPACE/TYPE`.
    dir: PathBuf,
}

impl FilesystemMirror {
    pub fn new(root: &Path, address: &ProviderAddress) -> FilesystemMirror {
        FilesystemMirror {
            address: address.clone(),
            dir: root
                .join(&address.hostname)
                .join(&address.namespace)
                .join(&address.type_name),
        }
    }

    fn packed(&self, version: &Version, platform: &Platform) -> PathBuf {
        self.dir.join(format!(
            "{}_{version}_{platform}.zip",
            self.address.binary_prefix()
        ))
    }

    fn unpacked(&self, version: &Version, platform: &Platform) -> PathBuf {
        self.dir
            .join(version.to_string())
            .join(platform.to_string())
    }

    /// The versions the mirror has a package of for `platform`, in either layout, oldest
    /// first. A mirror without the provider's directory has none.
    pub fn versions(&self, platform: &Platform) -> Result<Vec<Version>, ProviderError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(ProviderError::Io {
                    path: self.dir.clone(),
                    error,
                })
            }
        };
        let prefix = format!("{}_", self.address.binary_prefix());
        let suffix = format!("_{platform}.zip");
        let mut versions = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| ProviderError::Io {
                path: self.dir.clone(),
                error,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let packed = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(&suffix))
                .and_then(|v| Version::parse(v).ok());
            let unpacked = Version::parse(&name)
                .ok()
                .filter(|v| self.unpacked(v, platform).is_dir());
            versions.extend(packed.or(unpacked));
        }
        versions.sort();
        versions.dedup();
        Ok(versions)
    }

    /// The package of `version` for `platform`, as it lies: the packed zip where there is
    /// one, else the unpacked directory.
    pub fn package(
        &self,
        version: &Version,
        platform: &Platform,
    ) -> Result<Package, ProviderError> {
        let packed = self.packed(version, platform);
        if packed.is_file() {
            let bytes = std::fs::read(&packed).map_err(|error| ProviderError::Io {
                path: packed.clone(),
                error,
            })?;
            return Ok(Package::Zip {
                bytes,
                origin: packed.display().to_string(),
            });
        }
        let unpacked = self.unpacked(version, platform);
        if unpacked.is_dir() {
            return Ok(Package::Dir { path: unpacked });
        }
        Err(ProviderError::NotForPlatform {
            provider: self.address.to_string(),
            version: version.to_string(),
            platform: platform.to_string(),
        })
    }

    /// Resolves against this mirror: the newest version `constraints` admits, pinned by the
    /// `h1:` of its package.
    pub fn resolve(
        &self,
        constraints: &Constraints,
        platform: &Platform,
    ) -> Result<(ResolvedProvider, VerifiedPackage), ProviderError> {
        let versions = self.versions(platform)?;
        let version = newest(&self.address, constraints, platform, &versions)?;
        let verified = trust(&self.address, &version, self.package(&version, platform)?)?;
        let h1 = verified.h1().cloned();
        let pin = ResolvedProvider::new(self.address.clone(), version, h1);
        Ok((pin, verified))
    }

    /// The package of a pin, checked against the pin.
    pub fn fetch(
        &self,
        pin: &ResolvedProvider,
        platform: &Platform,
    ) -> Result<VerifiedPackage, ProviderError> {
        let package = self.package(&pin.version, platform)?;
        package::verify(
            &self.address,
            &pin.version,
            package,
            pin.hashes(),
            "the lockfile's pin",
        )
    }
}
