//! HTTP for the registry and mirror protocols: https only, unless the caller says
//! otherwise for a server on loopback (the tests'), and never downgraded by a redirect.
//! Requests go through [`crate::fetch`]'s `get`, and so are retried as the archive's are.

use std::time::Duration;

use reqwest::Url;
use serde::de::DeserializeOwned;

use super::error::ProviderError;
use crate::fetch::{self, FetchError};

/// Which URLs may be plain `http://`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpPolicy {
    /// Every URL is https, as Terraform requires of registries and network mirrors.
    #[default]
    HttpsOnly,
    /// Plain http too, but only to a loopback address (127.0.0.0/8, ::1, `localhost`): a
    /// test's server, which has no certificate. Never chosen by default.
    AllowPlainHttpToLoopback,
}

impl HttpPolicy {
    pub(crate) fn allows(self, url: &Url) -> bool {
        match url.scheme() {
            "https" => true,
            "http" => self == HttpPolicy::AllowPlainHttpToLoopback && is_loopback(url),
            _ => false,
        }
    }

    /// The scheme service discovery reaches `host` (a provider address's hostname, with
    /// its port) with: plain http only where the policy allows it to this host, a loopback
    /// one, so that one policy serves an environment whose providers come from a test's
    /// registry and from a real one (reached over https as ever).
    pub(crate) fn discovery_scheme(self, host: &str) -> &'static str {
        let url = Url::parse(&format!("http://{host}/"));
        match url {
            Ok(u) if self.allows(&u) => "http",
            _ => "https",
        }
    }
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Long enough for a large provider package (hundreds of MB) on a slow link.
const TIMEOUT: Duration = Duration::from_secs(1800);

/// A client for one provider's requests: its errors name the provider.
pub(crate) struct Http {
    client: reqwest::Client,
    policy: HttpPolicy,
    provider: String,
}

impl Http {
    pub(crate) fn new(policy: HttpPolicy, provider: &str) -> Result<Http, ProviderError> {
        // A redirect is followed only where the policy allows its target, so an https
        // registry cannot hand us over to plain http.
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 10 {
                attempt.error("too many redirects")
            } else if policy.allows(attempt.url()) {
                attempt.follow()
            } else {
                attempt.error("a redirect to plain http was refused")
            }
        });
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .redirect(redirects)
            .user_agent(concat!("envc/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Unreachable {
                provider: provider.to_string(),
                url: String::new(),
                detail: format!("cannot set up an HTTP client: {e}"),
            })?;
        Ok(Http {
            client,
            policy,
            provider: provider.to_string(),
        })
    }

    /// Parses `text` as a URL, relative to `base` when it is relative (as the protocol
    /// allows for every URL it hands out), and checks it against the policy.
    pub(crate) fn url(&self, base: &Url, text: &str) -> Result<Url, ProviderError> {
        let url = base.join(text).map_err(|e| ProviderError::BadDocument {
            provider: self.provider.clone(),
            url: base.to_string(),
            detail: format!("`{text}` is not a URL: {e}"),
        })?;
        self.check(&url)?;
        Ok(url)
    }

    pub(crate) fn check(&self, url: &Url) -> Result<(), ProviderError> {
        if self.policy.allows(url) {
            Ok(())
        } else {
            Err(ProviderError::PlainHttp {
                provider: self.provider.clone(),
                url: url.to_string(),
            })
        }
    }

    /// The body at `url`; `None` on 404.
    pub(crate) async fn get(&self, url: &Url) -> Result<Option<Vec<u8>>, ProviderError> {
        self.check(url)?;
        fetch::get(&self.client, url.as_str())
            .await
            .map_err(|e| match e {
                FetchError::Status { url, status } => ProviderError::Status {
                    provider: self.provider.clone(),
                    url,
                    status,
                },
                FetchError::Unreachable { url, detail } => ProviderError::Unreachable {
                    provider: self.provider.clone(),
                    url,
                    detail,
                },
                other => ProviderError::Unreachable {
                    provider: self.provider.clone(),
                    url: url.to_string(),
                    detail: other.to_string(),
                },
            })
    }

    /// The body at `url`, a 404 being an error that says it was `what` that is missing.
    pub(crate) async fn require(
        &self,
        url: &Url,
        what: &'static str,
    ) -> Result<Vec<u8>, ProviderError> {
        self.get(url).await?.ok_or_else(|| ProviderError::NotFound {
            provider: self.provider.clone(),
            url: url.to_string(),
            what,
        })
    }

    /// The JSON document at `url`, read as `T`.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        url: &Url,
        what: &'static str,
    ) -> Result<T, ProviderError> {
        let body = self.require(url, what).await?;
        serde_json::from_slice(&body).map_err(|e| ProviderError::BadDocument {
            provider: self.provider.clone(),
            url: url.to_string(),
            detail: format!("not the {what} the protocol describes: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_is_plain_http_only_to_loopback_and_only_when_allowed() {
        // `(policy, host)` → the scheme service discovery uses.
        let check = |policy: HttpPolicy, host: &str, expected: &str| {
            assert_eq!(policy.discovery_scheme(host), expected, "{policy:?} {host}");
        };
        let loopback = HttpPolicy::AllowPlainHttpToLoopback;
        check(loopback, "127.0.0.1:8443", "http");
        check(loopback, "localhost:8080", "http");
        check(loopback, "[::1]:8080", "http");
        check(loopback, "registry.terraform.io", "https");
        check(loopback, "registry.envc.test", "https");
        check(HttpPolicy::HttpsOnly, "127.0.0.1:8443", "https");
        check(HttpPolicy::HttpsOnly, "registry.terraform.io", "https");
    }
}
