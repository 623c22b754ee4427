//! The provider registry protocol, as Terraform and OpenTofu speak it
//! (<https://developer.hashicorp.com/terraform/internals/provider-registry-protocol>):
//!
//! 1. service discovery: `https://HOST/.well-known/terraform.json` names the providers API,
//!    `{"providers.v1": "/v1/providers/"}`, relative to that document or absolute;
//! 2. `GET {base}{namespace}/{type}/versions`: the versions, with their platforms;
//! 3. `GET {base}{namespace}/{type}/{version}/download/{os}/{arch}`: the package's URL and
//!    sha256, the URLs of `SHA256SUMS` and its detached signature, and the public keys that
//!    may have signed it (every URL may be relative to that document).
//!
//! [`resolve`] checks, in order, before it returns anything: the signature of `SHA256SUMS`
//! against the keys offered (gpgv, with a scratch keyring made from them, as
//! [`crate::fetch::verify_vendor_signature`] does for archives); that `SHA256SUMS` lists
//! the package under its filename with the sha256 the registry gave; and that the
//! package's bytes have that sha256. What trusts the keys is the registry, reached over
//! https, as in Terraform; once locked, the pinned hashes are what packages are checked
//! against.

use reqwest::Url;
use serde::Deserialize;

use super::address::ProviderAddress;
use super::constraint::{Constraints, Version};
use super::error::{HashMismatch, ProviderError};
use super::hashes::{parse_hex, PackageHash};
use super::http::{Http, HttpPolicy};
use super::package::{self, VerifiedPackage};
use super::platform::Platform;
use super::resolved::ResolvedProvider;
use crate::fetch::{self, ScratchGpg};

/// One version the registry lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvailableVersion {
    pub version: Version,
    /// Plugin protocol versions (`5.0`, `6.0`) the version speaks.
    pub protocols: Vec<String>,
    /// The platforms it has packages for (empty when the registry does not say).
    pub platforms: Vec<Platform>,
}

#[derive(Deserialize)]
struct Discovery {
    #[serde(rename = "providers.v1")]
    providers_v1: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct VersionsDoc {
    versions: Vec<VersionEntry>,
}

#[derive(Deserialize)]
struct VersionEntry {
    version: String,
    #[serde(default)]
    protocols: Vec<String>,
    #[serde(default)]
    platforms: Vec<PlatformEntry>,
}

#[derive(Deserialize)]
struct PlatformEntry {
    os: String,
    arch: String,
}

#[derive(Deserialize)]
struct DownloadDoc {
    filename: String,
    download_url: String,
    shasum: String,
    shasums_url: String,
    shasums_signature_url: String,
    signing_keys: SigningKeys,
}

#[derive(Deserialize)]
struct SigningKeys {
    #[serde(default)]
    gpg_public_keys: Vec<GpgKey>,
}

#[derive(Deserialize)]
struct GpgKey {
    ascii_armor: String,
}

/// A provider registry: one host's providers API, reached for one provider.
pub struct Registry {
    http: Http,
    address: ProviderAddress,
    /// The providers API, ending in `/`.
    base: Url,
}

impl Registry {
    /// Finds the providers API of `address`'s host by service discovery.
    pub async fn discover(
        address: &ProviderAddress,
        policy: HttpPolicy,
    ) -> Result<Registry, ProviderError> {
        let http = Http::new(policy, &address.to_string())?;
        let text = format!(
            "{}://{}/.well-known/terraform.json",
            policy.discovery_scheme(&address.hostname),
            address.hostname
        );
        let doc_url = Url::parse(&text).map_err(|e| ProviderError::BadDocument {
            provider: address.to_string(),
            url: text.clone(),
            detail: format!("the hostname does not make a URL: {e}"),
        })?;
        let doc: Discovery = http.json(&doc_url, "service discovery document").await?;
        let no_registry = || ProviderError::NoProviderRegistry {
            host: address.hostname.clone(),
            url: doc_url.to_string(),
        };
        let base = match doc.providers_v1 {
            Some(serde_json::Value::String(s)) => s,
            _ => return Err(no_registry()),
        };
        let mut base = http.url(&doc_url, &base)?;
        // `versions` is joined onto the base: without a trailing `/` its last segment
        // would be replaced rather than extended.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(Registry {
            http,
            address: address.clone(),
            base,
        })
    }

    fn provider_url(&self, rest: &str) -> Result<Url, ProviderError> {
        let path = format!(
            "{}/{}/{rest}",
            self.address.namespace, self.address.type_name
        );
        self.http.url(&self.base, &path)
    }

    /// The versions the registry lists, oldest first; versions it spells in a way this
    /// crate does not read (build metadata) are left out.
    pub async fn versions(&self) -> Result<Vec<AvailableVersion>, ProviderError> {
        let url = self.provider_url("versions")?;
        let doc: VersionsDoc = self.http.json(&url, "provider versions list").await?;
        let mut versions: Vec<AvailableVersion> = doc
            .versions
            .into_iter()
            .filter_map(|v| {
                Some(AvailableVersion {
                    version: Version::parse(&v.version).ok()?,
                    protocols: v.protocols,
                    platforms: v
                        .platforms
                        .into_iter()
                        .map(|p| Platform::new(&p.os, &p.arch))
                        .collect(),
                })
            })
            .collect();
        versions.sort_by(|a, b| a.version.cmp(&b.version));
        versions.dedup_by(|a, b| a.version == b.version);
        Ok(versions)
    }

    /// The newest listed version for `platform` that `constraints` admits.
    pub async fn choose(
        &self,
        constraints: &Constraints,
        platform: &Platform,
    ) -> Result<Version, ProviderError> {
        let versions = self.versions().await?;
        // A version that names its platforms and not this one cannot be installed here:
        // choosing it would only fail later, at its download.
        let here: Vec<&Version> = versions
            .iter()
            .filter(|v| v.platforms.is_empty() || v.platforms.contains(platform))
            .map(|v| &v.version)
            .collect();
        constraints
            .newest(here.iter().copied())
            .cloned()
            .ok_or_else(|| ProviderError::NoMatchingVersion {
                provider: self.address.to_string(),
                constraint: constraints.to_string(),
                platform: platform.to_string(),
                available: here.iter().map(|v| v.to_string()).collect(),
            })
    }

    async fn download_doc(
        &self,
        version: &Version,
        platform: &Platform,
    ) -> Result<(Url, DownloadDoc), ProviderError> {
        let url = self.provider_url(&format!(
            "{version}/download/{}/{}",
            platform.os, platform.arch
        ))?;
        let Some(body) = self.http.get(&url).await? else {
            return Err(ProviderError::NotForPlatform {
                provider: self.address.to_string(),
                version: version.to_string(),
                platform: platform.to_string(),
            });
        };
        let doc = serde_json::from_slice(&body).map_err(|e| ProviderError::BadDocument {
            provider: self.address.to_string(),
            url: url.to_string(),
            detail: format!("not the package metadata the protocol describes: {e}"),
        })?;
        Ok((url, doc))
    }

    /// Resolves `version` for `platform`: the package, checked against the signed
    /// `SHA256SUMS` (see the module's doc), and the pin: the version, the `zh:` of every
    /// package `SHA256SUMS` lists, and the `h1:` of this platform's package (as
    /// `terraform providers lock` records them).
    pub async fn package(
        &self,
        version: &Version,
        platform: &Platform,
    ) -> Result<(ResolvedProvider, VerifiedPackage), ProviderError> {
        let provider = self.address.to_string();
        let (doc_url, doc) = self.download_doc(version, platform).await?;
        let sums_url = self.http.url(&doc_url, &doc.shasums_url)?;
        let sig_url = self.http.url(&doc_url, &doc.shasums_signature_url)?;
        let package_url = self.http.url(&doc_url, &doc.download_url)?;
        let bad_doc = |detail: String| ProviderError::BadDocument {
            provider: provider.clone(),
            url: doc_url.to_string(),
            detail,
        };
        let shasum = parse_hex(&doc.shasum)
            .ok_or_else(|| bad_doc(format!("`shasum` {} is not a sha256", doc.shasum)))?;

        let sums = self.http.require(&sums_url, "SHA256SUMS").await?;
        let signature = self.http.require(&sig_url, "SHA256SUMS signature").await?;
        let keys: Vec<&str> = doc
            .signing_keys
            .gpg_public_keys
            .iter()
            .map(|k| k.ascii_armor.as_str())
            .collect();
        verify_sums(&provider, version, &sums_url, &sums, &signature, &keys)?;

        let listed = parse_sums(&sums).map_err(|detail| ProviderError::BadDocument {
            provider: provider.clone(),
            url: sums_url.to_string(),
            detail: detail.0,
        })?;
        let Some((_, in_sums)) = listed.iter().find(|(name, _)| *name == doc.filename) else {
            return Err(ProviderError::NotInSums {
                provider,
                version: version.to_string(),
                filename: doc.filename,
                url: sums_url.to_string(),
            });
        };
        let hex = |d: &[u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let mismatch = |against: String, expected: &[u8; 32], actual: &[u8; 32]| {
            ProviderError::HashMismatch(Box::new(HashMismatch {
                provider: provider.clone(),
                version: version.to_string(),
                url: package_url.to_string(),
                against,
                expected: format!("sha256 {}", hex(expected)),
                actual: format!("sha256 {}", hex(actual)),
            }))
        };
        if *in_sums != shasum {
            return Err(mismatch(
                format!("the signed {sums_url} (the registry's `shasum` disagrees with it)"),
                in_sums,
                &shasum,
            ));
        }

        let bytes = self.http.require(&package_url, "provider package").await?;
        let actual = fetch::sha256_hex(&bytes);
        if actual != hex(&shasum) {
            let actual = parse_hex(&actual).unwrap_or_default();
            return Err(mismatch(
                format!("the registry's shasum and the signed {sums_url}"),
                &shasum,
                &actual,
            ));
        }
        let verified =
            package::verified_zip(&self.address, version, bytes, package_url.to_string())?;
        // Every package the signed SHA256SUMS lists: the other lines (a manifest) are not
        // packages, and Terraform does not pin them.
        let zh = listed
            .iter()
            .filter(|(name, _)| name.ends_with(".zip"))
            .map(|(_, digest)| PackageHash::Zh(*digest));
        let h1 = verified.h1().cloned();
        let pin = ResolvedProvider::new(self.address.clone(), version.clone(), zh.chain(h1));
        Ok((pin, verified))
    }

    /// The package of a pinned `version` for `platform`, checked against the pin's hashes
    /// only (the pin is what is trusted once locked, not the registry's checksums).
    pub async fn fetch(
        &self,
        pin: &ResolvedProvider,
        platform: &Platform,
    ) -> Result<VerifiedPackage, ProviderError> {
        let (doc_url, doc) = self.download_doc(&pin.version, platform).await?;
        let package_url = self.http.url(&doc_url, &doc.download_url)?;
        let bytes = self.http.require(&package_url, "provider package").await?;
        package::verify(
            &self.address,
            &pin.version,
            package::Package::Zip {
                bytes,
                origin: package_url.to_string(),
            },
            pin.hashes(),
            "the lockfile's pin",
        )
    }
}

/// Checks `signature` (detached, binary or armoured) over `sums` against `keys` (armoured
/// public keys): good when any of them made it.
fn verify_sums(
    provider: &str,
    version: &Version,
    url: &Url,
    sums: &[u8],
    signature: &[u8],
    keys: &[&str],
) -> Result<(), ProviderError> {
    let cannot = |detail: String| ProviderError::CannotVerify {
        provider: provider.to_string(),
        version: version.to_string(),
        url: url.to_string(),
        detail,
    };
    if keys.is_empty() {
        return Err(cannot("the registry offers no signing key".into()));
    }
    let scratch = ScratchGpg::new().map_err(|e| cannot(format!("no scratch GnuPG home: {e}")))?;
    for key in keys {
        scratch
            .gpg(&["--import"], key.as_bytes())
            .map_err(|e| cannot(format!("a signing key the registry offers: {e}")))?;
    }
    let keyring = scratch.path().join("offered.gpg");
    let exported = scratch
        .gpg(&["--export"], b"")
        .map_err(|e| cannot(e.to_string()))?;
    std::fs::write(&keyring, exported)
        .map_err(|e| cannot(format!("{}: {e}", keyring.display())))?;
    match fetch::verify_detached(scratch.path(), &keyring, signature, sums) {
        Err(e) => Err(cannot(format!("cannot run gpgv: {e}"))),
        Ok(Err(fetch::GpgvRefused(detail))) => Err(ProviderError::BadSignature {
            provider: provider.to_string(),
            version: version.to_string(),
            url: url.to_string(),
            detail,
        }),
        Ok(Ok(())) => Ok(()),
    }
}

/// A `SHA256SUMS` that is not one: what is wrong, for [`ProviderError::BadDocument`].
#[derive(Debug)]
struct BadSums(String);

/// The lines of a `SHA256SUMS` (`HEX  FILENAME`, or `HEX *FILENAME` for binary mode), in
/// the order written.
fn parse_sums(sums: &[u8]) -> Result<Vec<(String, [u8; 32])>, BadSums> {
    let text =
        std::str::from_utf8(sums).map_err(|_| BadSums("SHA256SUMS is not UTF-8".to_string()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = line.split_once(' ').and_then(|(hex, rest)| {
            let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
            Some((name.to_string(), parse_hex(hex)?))
        });
        match parsed {
            Some(entry) => out.push(entry),
            None => {
                return Err(BadSums(format!(
                    "line {} of SHA256SUMS is not `SHA256  FILENAME`: {line:?}",
                    n + 1
                )))
            }
        }
    }
    Ok(out)
}

/// Resolves `address` against its registry: the newest version `constraints` admits for
/// `platform`, verified, pinned.
pub async fn resolve(
    address: &ProviderAddress,
    constraints: &Constraints,
    platform: &Platform,
    policy: HttpPolicy,
) -> Result<(ResolvedProvider, VerifiedPackage), ProviderError> {
    let registry = Registry::discover(address, policy).await?;
    let version = registry.choose(constraints, platform).await?;
    registry.package(&version, platform).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sha256sums_lines() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let text = format!("{a}  x_linux_amd64.zip\n{b} *x_manifest.json\n\n");
        let parsed = parse_sums(text.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(parsed[0].0, "x_linux_amd64.zip");
        assert_eq!(parsed[1].0, "x_manifest.json");
        assert_eq!(parsed[1].1, [0xbb; 32]);
        let err = parse_sums(b"nothex  file\n")
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(err.contains("line 1"), "{err}");
    }
}
