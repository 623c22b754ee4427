//! Where shared things live: one bucket (or folder, or WebDAV server) named by a URL, over
//! the `object_store` crate — `s3://bucket/prefix`, `gs://…`, `az://…`, `http(s)://…`,
//! `file:///…`. The binary cache and the shared state both sit on it.
//!
//! Credentials come from each cloud's usual environment variables and files (the builders'
//! `from_env`), never from an env file. Requests that are safe to repeat are retried with
//! exponential backoff by `object_store` itself, within a bounded time.
//!
//! The rest of the executor is synchronous around these calls: [`Remote::block`] runs a
//! request on the one runtime of remote requests from any thread, including a thread that is itself
//! inside a tokio runtime (a build's checkpoint commits are).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{self, AmazonS3ConfigKey};
use object_store::azure::{self, AzureConfigKey};
use object_store::gcp::{self, GoogleConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, ObjectStoreScheme, RetryConfig,
};

/// A remote location that could not be opened or a request to it that failed.
#[derive(Debug, Clone)]
pub struct RemoteError {
    /// The remote's URL, as the user wrote it.
    pub url: String,
    /// What envc was doing (`reading entries/…`).
    pub doing: String,
    pub cause: String,
    pub hint: Option<String>,
    /// A precondition of a conditional write failed: someone else wrote first.
    pub conflict: bool,
    /// The thing asked for is not there.
    pub not_found: bool,
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} failed: {}", self.url, self.doing, self.cause)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RemoteError {}

/// The kinds of remote envc knows, from a URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    S3,
    Gcs,
    Azure,
    Http,
    File,
}

impl Backend {
    /// Whether writes can be conditional (create-if-absent, compare-and-swap on an ETag):
    /// what shared state needs. Plain HTTP/WebDAV has neither in `object_store`, and the
    /// local file system has no compare-and-swap (a `file://` state is a local store).
    pub fn conditional_writes(self) -> bool {
        matches!(self, Backend::S3 | Backend::Gcs | Backend::Azure)
    }
}

/// One remote: its store, the prefix everything of envc's lives under, and the runtime its
/// requests run on.
#[derive(Clone)]
pub struct Remote {
    url: String,
    backend: Backend,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: &'static tokio::runtime::Runtime,
}

/// The one runtime every remote's requests run on, for the life of the process: a runtime
/// owned by a remote would be dropped wherever its last clone goes, which may be inside a
/// task of another runtime (tokio refuses that).
fn runtime() -> Result<&'static tokio::runtime::Runtime, &'static std::io::Error> {
    static RUNTIME: std::sync::OnceLock<std::io::Result<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("envc-remote")
                .enable_all()
                .build()
        })
        .as_ref()
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Remote({})", self.url)
    }
}

/// How long a request may take, and how long retries of one may go on: a dead server ends
/// the command (exit 4) in bounded time instead of hanging it. `ENVC_REMOTE_TIMEOUT`
/// (seconds) overrides both, for tests that stop a server on purpose.
fn timeouts() -> (Duration, Duration) {
    let configured = std::env::var("ENVC_REMOTE_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    match configured {
        Some(t) => (t, t),
        None => (Duration::from_secs(300), Duration::from_secs(60)),
    }
}

impl Remote {
    /// Opens the remote a URL names. Nothing is requested yet: a wrong bucket or missing
    /// credentials show at the first request, with the request's own error.
    pub fn open(url: &str) -> Result<Remote, RemoteError> {
        Remote::open_with(url, &[], None)
    }

    /// [`Remote::open`] with S3 configuration keys (`aws_endpoint`, `aws_allow_http`, …;
    /// other backends take theirs from the environment only) over what the environment
    /// says, and a time limit per request and for the retries of one: what tests use to
    /// point one process at several servers.
    pub fn open_with(
        url: &str,
        options: &[(&str, &str)],
        timeout: Option<Duration>,
    ) -> Result<Remote, RemoteError> {
        let error = |cause: String, hint: &str| RemoteError {
            url: url.to_string(),
            doing: "opening".into(),
            cause,
            hint: Some(hint.to_string()),
            conflict: false,
            not_found: false,
        };
        let hint = "use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX, \
                    http(s)://HOST/PATH or file:///ABSOLUTE/PATH";
        let parsed = url::Url::parse(url).map_err(|e| error(e.to_string(), hint))?;
        let (scheme, path) =
            ObjectStoreScheme::parse(&parsed).map_err(|e| error(e.to_string(), hint))?;
        let prefix = ObjectPath::parse(path).map_err(|e| error(e.to_string(), hint))?;
        let (request_timeout, retry_timeout) = timeout.map_or_else(timeouts, |t| (t, t));
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(15),
                base: 2.,
            },
            max_retries: 10,
            retry_timeout,
        };
        let connect_timeout = Duration::from_secs(10).min(request_timeout);
        // Set key by key: the builders' `from_env` already put what the environment says
        // into their client options (AWS_ALLOW_HTTP, proxies), which replacing them loses.
        let timeouts = [
            (
                ClientConfigKey::Timeout,
                format!("{}s", request_timeout.as_secs()),
            ),
            (
                ClientConfigKey::ConnectTimeout,
                format!("{}s", connect_timeout.as_secs()),
            ),
        ];
        let build_error = |e: object_store::Error| error(e.to_string(), hint);
        // The clouds' builders share a shape but no trait: each starts from what the
        // environment says, takes the URL, then the timeouts key by key.
        macro_rules! from_env {
            ($builder:ty, $key:ident) => {
                timeouts
                    .iter()
                    .fold(<$builder>::from_env().with_url(url), |b, (k, v)| {
                        b.with_config($key::Client(*k), v)
                    })
            };
        }
        let (backend, store, prefix): (Backend, Arc<dyn ObjectStore>, ObjectPath) = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let s3 = options
                    .iter()
                    .try_fold(
                        from_env!(aws::AmazonS3Builder, AmazonS3ConfigKey),
                        |b, (k, v)| k.parse::<AmazonS3ConfigKey>().map(|k| b.with_config(k, *v)),
                    )
                    .map_err(build_error)?
                    .with_retry(retry)
                    .build()
                    .map_err(build_error)?;
                (Backend::S3, Arc::new(s3), prefix)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let gcs = from_env!(gcp::GoogleCloudStorageBuilder, GoogleConfigKey)
                    .with_retry(retry)
                    .build()
                    .map_err(build_error)?;
                (Backend::Gcs, Arc::new(gcs), prefix)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let az = from_env!(azure::MicrosoftAzureBuilder, AzureConfigKey)
                    .with_retry(retry)
                    .build()
                    .map_err(build_error)?;
                (Backend::Azure, Arc::new(az), prefix)
            }
            ObjectStoreScheme::Http => {
                let base = &parsed[..url::Position::BeforePath];
                let http = object_store::http::HttpBuilder::new()
                    .with_url(base)
                    .with_retry(retry)
                    .with_client_options(
                        ClientOptions::new()
                            .with_timeout(request_timeout)
                            .with_connect_timeout(connect_timeout)
                            .with_allow_http(true),
                    )
                    .build()
                    .map_err(build_error)?;
                (Backend::Http, Arc::new(http), prefix)
            }
            ObjectStoreScheme::Local => {
                // Rooted at the URL's folder, so keys are relative like every other backend's.
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| error("not an absolute local path".into(), hint))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| error(format!("cannot create {}: {e}", dir.display()), hint))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(build_error)?;
                (Backend::File, Arc::new(fs), ObjectPath::default())
            }
            other => {
                return Err(error(
                    format!("{other:?} is not a backend envc supports"),
                    hint,
                ))
            }
        };
        let runtime = runtime().map_err(|e| {
            error(
                format!("cannot start the runtime for remote requests: {e}"),
                "the system refused threads; retry with fewer processes running",
            )
        })?;
        Ok(Remote {
            url: url.to_string(),
            backend,
            store,
            prefix,
            runtime,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of `rel` (`objects/ab…`) under the remote's prefix.
    pub fn key(&self, rel: &str) -> ObjectPath {
        rel.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |key, part| key.clone().join(part))
    }

    /// Runs `request` to completion on the remote requests' runtime, from a thread of its own so
    /// that it works from inside another runtime too.
    pub fn block<T: Send>(&self, request: impl Future<Output = T> + Send) -> T {
        std::thread::scope(|s| {
            match s.spawn(|| self.runtime.block_on(request)).join() {
                Ok(value) => value,
                // A panic in a request is a bug: keep it one.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `request` on the remote requests' runtime and awaits it from any other runtime (a
    /// build's steps run on the session's).
    pub async fn run<T: Send + 'static>(
        &self,
        request: impl Future<Output = T> + Send + 'static,
    ) -> T {
        match self.runtime.spawn(request).await {
            Ok(value) => value,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// The error of a request: what envc was doing, the cause, and for the errors people
    /// can fix themselves, how.
    pub fn error(&self, doing: impl Into<String>, e: object_store::Error) -> RemoteError {
        let (hint, conflict, not_found) = match &e {
            object_store::Error::NotFound { .. } => (None, false, true),
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. } => {
                (None, true, false)
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => (Some(self.credentials_hint()), false, false),
            // No credentials in the environment: the S3 client asked the instance
            // metadata service, which is not there.
            e if e.to_string().contains("169.254.169.254") => {
                (Some(self.credentials_hint()), false, false)
            }
            _ => (
                Some("check that the server is reachable and the URL is right; rerun once it is: the store and state are left valid".into()),
                false,
                false,
            ),
        };
        RemoteError {
            url: self.url.clone(),
            doing: doing.into(),
            cause: e.to_string(),
            hint,
            conflict,
            not_found,
        }
    }

    fn credentials_hint(&self) -> String {
        match self.backend {
            Backend::S3 => "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT for an S3-compatible server), or use an instance role".into(),
            Backend::Gcs => "set GOOGLE_SERVICE_ACCOUNT (a service account key file) or GOOGLE_APPLICATION_CREDENTIALS".into(),
            Backend::Azure => "set AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or a SAS / client secret)".into(),
            Backend::Http | Backend::File => "check the permissions of the server's or folder's files".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend_and_prefix() {
        let check = |url: &str, backend: Backend, key: &str| {
            let r = Remote::open(url).unwrap();
            assert_eq!(r.backend(), backend, "{url}");
            assert_eq!(r.key("objects/ab").as_ref(), key, "{url}");
        };
        check("s3://bucket/team/ci", Backend::S3, "team/ci/objects/ab");
        check(
            "http://127.0.0.1:1/cache",
            Backend::Http,
            "cache/objects/ab",
        );
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        check(&url, Backend::File, "objects/ab");
    }

    #[test]
    fn an_unknown_scheme_is_an_error_with_the_forms_that_work() {
        let e = Remote::open("ftp://example/x").unwrap_err();
        assert!(e.hint.unwrap().contains("s3://BUCKET"), "{}", e.cause);
        let e = Remote::open("not a url").unwrap_err();
        assert_eq!(e.doing, "opening");
    }
}
