//! Why a provider could not be resolved or fetched: each error names the provider (and the
//! version and URL where there is one) and says what to do.

use std::fmt;
use std::path::PathBuf;

/// Why a provider could not be resolved, fetched or unpacked.
#[derive(Debug)]
pub enum ProviderError {
    /// A plain `http://` URL where only https is allowed.
    PlainHttp { provider: String, url: String },
    /// No connection (refused, no route, DNS, timeout).
    Unreachable {
        provider: String,
        url: String,
        detail: String,
    },
    /// An HTTP status other than success.
    Status {
        provider: String,
        url: String,
        status: u16,
    },
    /// A 404 where a document must be: `what` says which.
    NotFound {
        provider: String,
        url: String,
        what: &'static str,
    },
    /// The host's service discovery document names no provider registry.
    NoProviderRegistry { host: String, url: String },
    /// A document that is not what the protocol says it is.
    BadDocument {
        provider: String,
        url: String,
        detail: String,
    },
    /// No version the source offers (for this platform) satisfies the constraint.
    NoMatchingVersion {
        provider: String,
        constraint: String,
        platform: String,
        /// The versions offered, oldest first.
        available: Vec<String>,
    },
    /// The version exists, but has no package for this platform.
    NotForPlatform {
        provider: String,
        version: String,
        platform: String,
    },
    /// The signature of SHA256SUMS could not be checked (no gpg, no keys offered).
    CannotVerify {
        provider: String,
        version: String,
        url: String,
        detail: String,
    },
    /// SHA256SUMS is not signed by any key the registry offers for this provider.
    BadSignature {
        provider: String,
        version: String,
        url: String,
        detail: String,
    },
    /// The signed SHA256SUMS does not list the package.
    NotInSums {
        provider: String,
        version: String,
        filename: String,
        url: String,
    },
    /// Bytes that do not match the hash they are checked against.
    HashMismatch(Box<HashMismatch>),
    /// A package that is not a usable provider package (not a zip, no executable, an entry
    /// that would land outside the directory it is unpacked into).
    BadPackage {
        provider: String,
        version: String,
        origin: String,
        detail: String,
    },
    /// A file or directory that cannot be read or written.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The details of [`ProviderError::HashMismatch`] (boxed: they make the error large).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashMismatch {
    pub provider: String,
    pub version: String,
    /// Where the package came from: its URL or path.
    pub url: String,
    /// What it was checked against: "the registry's shasum", "the lockfile's pin".
    pub against: String,
    pub expected: String,
    pub actual: String,
}

impl ProviderError {
    pub fn hint(&self) -> String {
        match self {
            ProviderError::PlainHttp { .. } => {
                "registries and mirrors are used over https only: give the https URL".into()
            }
            ProviderError::Unreachable { .. } => {
                "locking asks the registry or mirror: check the address and the network, then \
                 run again"
                    .into()
            }
            ProviderError::Status { .. } | ProviderError::BadDocument { .. } => {
                "the registry or mirror does not speak the provider registry protocol as \
                 expected: check its URL, or use another source"
                    .into()
            }
            ProviderError::NotFound { .. } => {
                "check the provider's source address (HOSTNAME/NAMESPACE/TYPE) against the \
                 registry or mirror"
                    .into()
            }
            ProviderError::NoProviderRegistry { .. } => {
                "the host is not a provider registry: check the address's hostname, or use a \
                 network or filesystem mirror"
                    .into()
            }
            ProviderError::NoMatchingVersion { .. } => {
                "loosen the version constraint, or choose one of the versions available".into()
            }
            ProviderError::NotForPlatform { .. } => {
                "constrain the provider to a version published for this platform".into()
            }
            ProviderError::CannotVerify { .. } => {
                "install gnupg and gpgv (`apt-get install gnupg gpgv`); a registry must offer \
                 the keys its SHA256SUMS is signed with"
                    .into()
            }
            ProviderError::BadSignature { .. } => {
                "do not use this package: the registry (or the network) serves checksums its \
                 publisher did not sign"
                    .into()
            }
            ProviderError::NotInSums { .. } => {
                "the registry's signed checksums do not cover this package: report it to the \
                 provider's publisher, or use another version"
                    .into()
            }
            ProviderError::HashMismatch(_) => {
                "do not use these bytes: the source serves another package under this name; \
                 use another source, and if the publisher really replaced the package, lock \
                 again and review the new hashes"
                    .into()
            }
            ProviderError::BadPackage { .. } => {
                "the package is not a provider package as Terraform builds them (one \
                 executable terraform-provider-TYPE_vVERSION): use the publisher's package"
                    .into()
            }
            ProviderError::Io { .. } => "check the path and its permissions".into(),
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::PlainHttp { provider, url } => {
                write!(f, "provider {provider}: refusing plain http URL {url}")?
            }
            ProviderError::Unreachable {
                provider,
                url,
                detail,
            } => write!(f, "provider {provider}: cannot reach {url}: {detail}")?,
            ProviderError::Status {
                provider,
                url,
                status,
            } => write!(f, "provider {provider}: {url} answered HTTP {status}")?,
            ProviderError::NotFound {
                provider,
                url,
                what,
            } => write!(f, "provider {provider}: no {what} at {url} (404)")?,
            ProviderError::NoProviderRegistry { host, url } => write!(
                f,
                "{host} offers no provider registry: {url} names no `providers.v1` service"
            )?,
            ProviderError::BadDocument {
                provider,
                url,
                detail,
            } => write!(f, "provider {provider}: {url}: {detail}")?,
            ProviderError::NoMatchingVersion {
                provider,
                constraint,
                platform,
                available,
            } => write!(
                f,
                "provider {provider}: no version for {platform} satisfies `{constraint}` \
                 (available: {})",
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                }
            )?,
            ProviderError::NotForPlatform {
                provider,
                version,
                platform,
            } => write!(
                f,
                "provider {provider} {version} has no package for {platform}"
            )?,
            ProviderError::CannotVerify {
                provider,
                version,
                url,
                detail,
            } => write!(
                f,
                "provider {provider} {version}: cannot check the signature of {url}: {detail}"
            )?,
            ProviderError::BadSignature {
                provider,
                version,
                url,
                detail,
            } => write!(
                f,
                "provider {provider} {version}: {url} is not signed by any key the registry \
                 offers: {detail}"
            )?,
            ProviderError::NotInSums {
                provider,
                version,
                filename,
                url,
            } => write!(
                f,
                "provider {provider} {version}: {url} does not list `{filename}`"
            )?,
            ProviderError::HashMismatch(m) => write!(
                f,
                "provider {} {}: the package at {} does not match {}: expected {}, got {}; \
                 nothing was unpacked",
                m.provider, m.version, m.url, m.against, m.expected, m.actual
            )?,
            ProviderError::BadPackage {
                provider,
                version,
                origin,
                detail,
            } => write!(f, "provider {provider} {version}: {origin}: {detail}")?,
            ProviderError::Io { path, error } => write!(f, "{}: {error}", path.display())?,
        }
        write!(f, "\n  hint: {}", self.hint())
    }
}

impl std::error::Error for ProviderError {}
