//! The project file, `envc.toml` beside the env files: where the shared cache and state
//! live and whom the cache trusts. Settings a machine owns (the URL for one run, the
//! signing key's path) can also come from flags and the environment (`--cache`/
//! `ENVC_CACHE`, `--state`/`ENVC_STATE`, `--signing-key`/`ENVC_SIGNING_KEY`), which win.
//! Credentials never come from here: each cloud's own variables and files give them.
//!
//! Where `envc lock` resolves Terraform/OpenTofu providers (`[providers] mirror`,
//! [`provider_source`]): a filesystem mirror (a directory laid out as Terraform's
//! `filesystem_mirror`, relative to the project directory) or a network mirror
//! (`https://…`, Terraform's `network_mirror` protocol); without one, the registry each
//! address's hostname names. `ENVC_PROVIDER_MIRROR` wins over the file (a path in it is
//! relative to where envc runs; empty is unset), for an air-gapped machine or a test.
//! Plain `http://` is refused, with two exceptions that never leave the machine: a network
//! mirror whose URL's host is a loopback address (`127.0.0.0/8`, `::1`, `localhost`), and
//! a registry whose address names a loopback hostname (`127.0.0.1:8443/envc/tiny`) — a
//! test's server, which has no certificate. Either way a package is used only once it
//! matches the registry's signed checksums or the lockfile's hashes.
//!
//! ```toml
//! [cache]
//! url = "s3://envc-cache/quickstart"
//! trusted-public-keys = ["ci-2026:BASE64"]
//! push = false
//!
//! [state]
//! url = "s3://envc-state/quickstart"
//! lease-seconds = 60
//!
//! [secrets]
//! file = "secrets.age"                 # the default
//! recipients = ["age1…", "age1…"]      # who can read it
//! identity = "~/.config/age/key.txt"   # ENVC_AGE_IDENTITY wins
//! [secrets.from]
//! pg_password = { env = "PG_PASSWORD" }
//! vault_token = { command = ["vault", "kv", "get", "-field=token", "secret/ci"] }
//!
//! [providers]
//! mirror = "vendor/providers"          # or "https://mirror.example/providers/"
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use envc_lockfiles::provider::{HttpPolicy, ProviderSource};
use serde::Deserialize;

use crate::cache::BinaryCache;
use crate::keys::{KeyError, PublicKey, SecretKey};
use crate::remote::{Remote, RemoteError};
use crate::secrets::{SecretSettings, Source};

pub const FILE_NAME: &str = "envc.toml";

/// The environment variable that names the provider mirror, over `[providers] mirror`.
pub const PROVIDER_MIRROR_ENV: &str = "ENVC_PROVIDER_MIRROR";

/// The lease of a shared state's lock when the project does not set one: long enough that
/// a busy runner renews it many times over, short enough that a killed runner's lock frees
/// the environment within a minute.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    cache: Option<CacheSection>,
    state: Option<StateSection>,
    secrets: Option<SecretsSection>,
    policy: Option<PolicySection>,
    /// Values of the environment's `param`s for this project (a cloud region, a count):
    /// compile inputs like `--set`, which overrides them.
    params: Option<std::collections::BTreeMap<String, toml::Value>>,
    providers: Option<ProvidersSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvidersSection {
    /// A directory (relative to the project file) or an `https://` URL.
    mirror: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    /// Policy packs (directories) every build of the project is checked against, relative
    /// to the project file.
    #[serde(default)]
    packs: Vec<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SecretsSection {
    /// Relative to the project file.
    file: Option<PathBuf>,
    #[serde(default)]
    recipients: Vec<String>,
    identity: Option<PathBuf>,
    #[serde(default)]
    from: std::collections::BTreeMap<String, SourceSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceSection {
    env: Option<String>,
    command: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CacheSection {
    url: Option<String>,
    #[serde(default)]
    trusted_public_keys: Vec<String>,
    #[serde(default)]
    push: bool,
    /// A path, relative to the project file: never the key itself.
    signing_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StateSection {
    url: Option<String>,
    lease_seconds: Option<u64>,
}

/// What the command line and the environment say, before the project file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub cache: Option<String>,
    pub state: Option<String>,
    pub signing_key: Option<PathBuf>,
    /// `--no-cache`: build without looking anything up.
    pub no_cache: bool,
}

/// Where the project's shared things are, once flags, environment and file are merged.
#[derive(Clone, Debug, Default)]
pub struct Shared {
    pub cache: Option<CacheSettings>,
    pub state: Option<StateSettings>,
    pub secrets: SecretSettings,
}

#[derive(Clone, Debug)]
pub struct CacheSettings {
    pub url: String,
    pub trusted: Vec<PublicKey>,
    pub signing_key: Option<PathBuf>,
    /// Push what `build` builds.
    pub push: bool,
}

#[derive(Clone, Debug)]
pub struct StateSettings {
    pub url: String,
    pub lease: Duration,
}

#[derive(Debug)]
pub enum ConfigError {
    /// The file cannot be read or is not what it should be; `at` is `FILE:LINE:COL`.
    File {
        at: String,
        message: String,
        hint: String,
    },
    Key(KeyError),
    Remote(RemoteError),
    /// A command that needs the binary cache, in a project without one.
    NoCache,
    /// Pushing (`--push`, `cache push`) without a signing key.
    NoSigningKey,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::File { at, message, hint } => {
                write!(f, "{at}: {message}\n  hint: {hint}")
            }
            ConfigError::Key(e) => write!(f, "{e}"),
            ConfigError::Remote(e) => write!(f, "{e}"),
            ConfigError::NoCache => f.write_str(
                "no binary cache is configured\n  hint: set [cache] url in envc.toml, or pass --cache URL (ENVC_CACHE)",
            ),
            ConfigError::NoSigningKey => write!(f, "{}", crate::cache::CacheError::NoSigningKey),
        }
    }
}

impl std::error::Error for ConfigError {}

/// `FILE:LINE:COL` of a byte offset.
fn place(path: &Path, text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{}:{line}:{col}", path.display())
}

/// The policy packs `envc.toml` in `project` names (`[policy] packs`), as paths from
/// where envc runs.
pub fn policy_packs(project: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let (_, file) = read_project_file(project)?;
    let packs = file.policy.unwrap_or_default().packs;
    Ok(packs.into_iter().map(|p| project.join(p)).collect())
}

/// The values `envc.toml` in `project` gives the environment's `param`s (`[params]`), as
/// `--set` would give them: a string as it is, a number or a boolean as written.
pub fn project_params(
    project: &Path,
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    let (path, file) = read_project_file(project)?;
    let mut out = std::collections::BTreeMap::new();
    for (name, value) in file.params.unwrap_or_default() {
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError::File {
                    at: path.display().to_string(),
                    message: format!(
                        "[params] {name} is {}, not a string, a whole number or a boolean",
                        match other.type_str() {
                            t @ ("array" | "integer") => format!("an {t}"),
                            t => format!("a {t}"),
                        }
                    ),
                    hint: "give it as `--set` would: `region = \"eu-west-1\"`, `web_count = 3`, `memory = \"2GiB\"`".into(),
                })
            }
        };
        out.insert(name, text);
    }
    Ok(out)
}

/// `envc.toml` in `project`, parsed (empty when there is none), and its path.
fn read_project_file(project: &Path) -> Result<(PathBuf, ProjectFile), ConfigError> {
    let path = project.join(FILE_NAME);
    let file = match envc_lockfiles::file::read_bounded(&path, 1 << 20) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| ConfigError::File {
                at: path.display().to_string(),
                message: "is not UTF-8".into(),
                hint: "envc.toml is a TOML file".into(),
            })?;
            parse(&path, &text)?
        }
        Err(envc_lockfiles::file::ReadError::NotFound) => ProjectFile::default(),
        Err(e) => {
            return Err(ConfigError::File {
                at: path.display().to_string(),
                message: e.to_string(),
                hint: "envc.toml must be a readable regular file".into(),
            })
        }
    };
    Ok((path, file))
}

/// Where `envc lock` resolves providers from, for the project in `project`: `env` (the
/// value of [`PROVIDER_MIRROR_ENV`], when set) over `envc.toml`'s `[providers] mirror`,
/// else the registries the addresses name. See the module's docs for what each may be.
pub fn provider_source(project: &Path, env: Option<&str>) -> Result<ProviderSource, ConfigError> {
    if let Some(value) = env.filter(|v| !v.is_empty()) {
        return mirror_source(value, Path::new(""), PROVIDER_MIRROR_ENV);
    }
    let (path, file) = read_project_file(project)?;
    match file.providers.and_then(|p| p.mirror) {
        Some(value) => mirror_source(
            &value,
            project,
            &format!("{}: [providers] mirror", path.display()),
        ),
        // Plain http only to a loopback hostname: `HttpPolicy` says no to any other.
        None => Ok(ProviderSource::Registry {
            http: HttpPolicy::AllowPlainHttpToLoopback,
        }),
    }
}

/// A mirror setting (`at` names where it was read) as a source: a URL, or a directory
/// relative to `base`, which must exist.
fn mirror_source(value: &str, base: &Path, at: &str) -> Result<ProviderSource, ConfigError> {
    let fail = |message: String, hint: &str| ConfigError::File {
        at: at.to_string(),
        message,
        hint: hint.to_string(),
    };
    if let Some((scheme, _)) = value.split_once("://") {
        let url = url::Url::parse(value).map_err(|e| {
            fail(
                format!("{value:?} is not a URL: {e}"),
                "write a network mirror as https://HOST/PATH/",
            )
        })?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            None => false,
        };
        return match scheme {
            "https" => Ok(ProviderSource::NetworkMirror {
                base: value.to_string(),
                http: HttpPolicy::HttpsOnly,
            }),
            "http" if loopback => Ok(ProviderSource::NetworkMirror {
                base: value.to_string(),
                http: HttpPolicy::AllowPlainHttpToLoopback,
            }),
            "http" => Err(fail(
                format!("{value:?} is plain http to a host other than this machine"),
                "a network mirror is reached over https (plain http only to a loopback \
                 address, a test's server)",
            )),
            other => Err(fail(
                format!("{value:?}: `{other}://` is not a mirror's scheme"),
                "give an https:// URL (a network mirror) or a directory (a filesystem mirror)",
            )),
        };
    }
    let dir = base.join(value);
    if !dir.is_dir() {
        return Err(fail(
            format!("the provider mirror {} is not a directory", dir.display()),
            "make it (laid out as Terraform's filesystem_mirror: \
             HOSTNAME/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip), or point \
             the setting at one",
        ));
    }
    Ok(ProviderSource::FilesystemMirror { root: dir })
}

impl Shared {
    /// Reads `envc.toml` in `project` (if there is one) under `overrides`.
    pub fn load(project: &Path, overrides: &Overrides) -> Result<Shared, ConfigError> {
        let (path, file) = read_project_file(project)?;
        let cache_section = file.cache.unwrap_or_default();
        let cache_url = if overrides.no_cache {
            None
        } else {
            overrides.cache.clone().or(cache_section.url)
        };
        let cache = match cache_url {
            None => None,
            Some(url) => {
                let trusted = cache_section
                    .trusted_public_keys
                    .iter()
                    .map(|k| PublicKey::parse(k))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| KeyError {
                        what: format!(
                            "{}: [cache] trusted-public-keys: {}",
                            path.display(),
                            e.what
                        ),
                        hint: e.hint,
                    })
                    .map_err(ConfigError::Key)?;
                let signing_key = overrides
                    .signing_key
                    .clone()
                    .or_else(|| cache_section.signing_key.map(|p| project.join(p)));
                Some(CacheSettings {
                    url,
                    trusted,
                    signing_key,
                    push: cache_section.push,
                })
            }
        };
        let state_section = file.state.unwrap_or_default();
        let state = overrides
            .state
            .clone()
            .or(state_section.url)
            .map(|url| StateSettings {
                url,
                lease: state_section
                    .lease_seconds
                    .map_or(DEFAULT_LEASE, Duration::from_secs),
            });
        let section = file.secrets.unwrap_or_default();
        let mut sources = std::collections::BTreeMap::new();
        for (name, s) in section.from {
            let source = match (s.env, s.command) {
                (Some(var), None) => Source::Env(var),
                (None, Some(argv)) if !argv.is_empty() => Source::Command(argv),
                _ => {
                    return Err(ConfigError::File {
                        at: path.display().to_string(),
                        message: format!("[secrets.from] {name}: give exactly one of `env` and `command`"),
                        hint: "`NAME = { env = \"VAR\" }` or `NAME = { command = [\"pass\", \"show\", \"db/admin\"] }`".into(),
                    })
                }
            };
            sources.insert(name, source);
        }
        let home = |p: PathBuf| match p.strip_prefix("~") {
            Ok(rest) => std::env::var_os("HOME").map_or(p.clone(), |h| PathBuf::from(h).join(rest)),
            Err(_) => project.join(p),
        };
        let secrets = SecretSettings {
            file: project.join(section.file.unwrap_or_else(|| PathBuf::from("secrets.age"))),
            recipients: section.recipients,
            identity: section.identity.map(home),
            sources,
            env_file: None,
        };
        Ok(Shared {
            cache,
            state,
            secrets,
        })
    }
}

fn parse(path: &Path, text: &str) -> Result<ProjectFile, ConfigError> {
    let file: ProjectFile = toml::from_str(text).map_err(|e| {
        let at = match e.span() {
            Some(span) => place(path, text, span.start),
            None => path.display().to_string(),
        };
        ConfigError::File {
            at,
            message: e.message().trim().to_string(),
            hint: "envc.toml has a [cache] table (url, trusted-public-keys, push, signing-key), a [state] table (url, lease-seconds) and a [secrets] table (file, recipients, identity, from), a [policy] table (packs) and a [providers] table (mirror); see docs/ci.md and docs/language.md".into(),
        }
    })?;
    if let Some(0) = file.state.as_ref().and_then(|s| s.lease_seconds) {
        return Err(ConfigError::File {
            at: path.display().to_string(),
            message: "[state] lease-seconds is 0".into(),
            hint: "a lease must last long enough to be renewed: 60 is the default".into(),
        });
    }
    Ok(file)
}

impl CacheSettings {
    /// Opens the cache: its remote, the trusted keys, and the signing key if one is set.
    pub fn open(&self) -> Result<BinaryCache, ConfigError> {
        let remote = Remote::open(&self.url).map_err(ConfigError::Remote)?;
        let signer = match &self.signing_key {
            Some(path) => Some(SecretKey::read(path).map_err(ConfigError::Key)?),
            None => None,
        };
        Ok(BinaryCache::new(remote, self.trusted.clone(), signer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: &str) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
        let got = match Shared::load(dir.path(), &Overrides::default()) {
            Ok(s) => format!(
                "cache={:?} keys={:?} push={:?} state={:?} lease={:?}",
                s.cache.as_ref().map(|c| &c.url),
                s.cache.as_ref().map(|c| c.trusted.len()),
                s.cache.as_ref().map(|c| c.push),
                s.state.as_ref().map(|c| &c.url),
                s.state.as_ref().map(|c| c.lease.as_secs()),
            ),
            Err(e) => e
                .to_string()
                .replace(&dir.path().display().to_string(), "DIR"),
        };
        assert!(got.contains(expected), "{text}\n---\n{got}");
    }

    #[test]
    fn project_files() {
        check("", "cache=None keys=None push=None state=None");
        check(
            "[cache]\nurl = \"s3://b/p\"\npush = true\n[state]\nurl = \"file:///s\"\n",
            "cache=Some(\"s3://b/p\") keys=Some(0) push=Some(true) state=Some(\"file:///s\") lease=Some(60)",
        );
        check("[cache]\nurl = 3\n", "DIR/envc.toml:2:7: invalid type");
        check(
            "[cache]\nurls = \"x\"\n",
            "DIR/envc.toml:2:1: unknown field `urls`",
        );
        check("[stat]\n", "unknown field `stat`");
        check(
            "[cache]\nurl = \"s3://b\"\ntrusted-public-keys = [\"nocolon\"]\n",
            "[cache] trusted-public-keys: `nocolon` is not a public key",
        );
        check(
            "[state]\nurl = \"s3://b\"\nlease-seconds = 0\n",
            "lease-seconds is 0",
        );
    }

    #[test]
    fn the_provider_source_is_the_environment_then_the_file_then_the_registries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("vendor/providers")).unwrap();
        let here = tempfile::tempdir().unwrap();
        // `(envc.toml, ENVC_PROVIDER_MIRROR)` → the source, or the error.
        let check = |file: Option<&str>, env: Option<&str>, expected: &str| {
            let path = dir.path().join(FILE_NAME);
            match file {
                Some(text) => std::fs::write(&path, text).unwrap(),
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
            let got = match provider_source(dir.path(), env) {
                Ok(s) => format!("{s:?}"),
                Err(e) => e.to_string(),
            };
            let got = got
                .replace(&dir.path().display().to_string(), "DIR")
                .replace(&here.path().display().to_string(), "HERE");
            assert_eq!(got, expected, "{file:?} {env:?}");
        };
        let registry = "Registry { http: AllowPlainHttpToLoopback }";
        check(None, None, registry);
        check(Some("[providers]\n"), Some(""), registry);
        check(
            Some("[providers]\nmirror = \"vendor/providers\"\n"),
            None,
            "FilesystemMirror { root: \"DIR/vendor/providers\" }",
        );
        check(
            Some("[providers]\nmirror = \"https://mirror.example/providers/\"\n"),
            None,
            "NetworkMirror { base: \"https://mirror.example/providers/\", http: HttpsOnly }",
        );
        check(
            Some("[providers]\nmirror = \"vendor/providers\"\n"),
            Some("http://127.0.0.1:8080/"),
            "NetworkMirror { base: \"http://127.0.0.1:8080/\", http: AllowPlainHttpToLoopback }",
        );
        check(
            None,
            Some(&here.path().display().to_string()),
            "FilesystemMirror { root: \"HERE\" }",
        );
        check(
            Some("[providers]\nmirror = \"http://mirror.example/\"\n"),
            None,
            "DIR/envc.toml: [providers] mirror: \"http://mirror.example/\" is plain http to a \
             host other than this machine\n  hint: a network mirror is reached over https (plain \
             http only to a loopback address, a test's server)",
        );
        check(
            None,
            Some("ftp://mirror.example/"),
            "ENVC_PROVIDER_MIRROR: \"ftp://mirror.example/\": `ftp://` is not a mirror's \
             scheme\n  hint: give an https:// URL (a network mirror) or a directory (a \
             filesystem mirror)",
        );
        check(
            Some("[providers]\nmirror = \"missing\"\n"),
            None,
            "DIR/envc.toml: [providers] mirror: the provider mirror DIR/missing is not a \
             directory\n  hint: make it (laid out as Terraform's filesystem_mirror: \
             HOSTNAME/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip), or point the \
             setting at one",
        );
        check(
            Some("[providers]\nregistry = \"x\"\n"),
            None,
            "DIR/envc.toml:2:1: unknown field `registry`, expected `mirror`\n  hint: envc.toml \
             has a [cache] table (url, trusted-public-keys, push, signing-key), a [state] table \
             (url, lease-seconds) and a [secrets] table (file, recipients, identity, from), a \
             [policy] table (packs) and a [providers] table (mirror); see docs/ci.md and \
             docs/language.md",
        );
    }

    #[test]
    fn flags_win_over_the_file_and_no_cache_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "[cache]\nurl = \"s3://file\"\n").unwrap();
        let mut o = Overrides {
            cache: Some("s3://flag".into()),
            ..Overrides::default()
        };
        let s = Shared::load(dir.path(), &o).unwrap();
        assert_eq!(s.cache.unwrap().url, "s3://flag");
        o.no_cache = true;
        assert!(Shared::load(dir.path(), &o).unwrap().cache.is_none());
    }
}
