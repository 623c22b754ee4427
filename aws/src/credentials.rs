//! Credentials, region and endpoint, from what the AWS SDKs read: the environment, then the
//! shared credentials and config files. IMDS, SSO and `credential_process` are left out: envc
//! runs on an operator's machine or in CI, where keys come from the environment or a profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::AwsError;

/// What the client reads from the process environment, passed in explicitly so that tests
/// (and anything hashed) never see ambient state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsEnv {
    pub vars: BTreeMap<String, String>,
    pub home: Option<PathBuf>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// Where they came from, for messages: "environment", "profile `dev` in ~/.aws/credentials".
    pub source: String,
}

/// The secret and the token stay out of logs and error messages.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("source", &self.source)
            .finish()
    }
}

impl AwsEnv {
    /// The `AWS_*` variables of this process, and `$HOME`.
    pub fn from_process() -> AwsEnv {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("AWS_"))
            .collect();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        AwsEnv { vars, home }
    }

    /// A variable, `None` when unset or empty (as the SDKs treat an empty one).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// AWS_PROFILE, else `default`.
    pub fn profile(&self) -> String {
        self.var("AWS_PROFILE").unwrap_or("default").to_string()
    }

    /// AWS_REGION, AWS_DEFAULT_REGION, then the profile's `region` in the config file. A
    /// malformed config file counts as no region here ([`AwsEnv::try_region`] reports it).
    pub fn region(&self) -> Option<String> {
        self.try_region().ok().flatten()
    }

    /// [`AwsEnv::region`], with a malformed config file as the error it is.
    pub fn try_region(&self) -> Result<Option<String>, AwsError> {
        if let Some(r) = self
            .var("AWS_REGION")
            .or_else(|| self.var("AWS_DEFAULT_REGION"))
        {
            return Ok(Some(r.to_string()));
        }
        let Some(path) = self.config_path() else {
            return Ok(None);
        };
        let Some(file) = read_ini(&path)? else {
            return Ok(None);
        };
        Ok(file
            .config_profile(&self.profile())
            .and_then(|s| s.get("region"))
            .map(|(_, v)| v.to_string()))
    }

    /// AWS_ENDPOINT_URL_EC2, then AWS_ENDPOINT_URL (the SDKs' standard variables), else
    /// `https://ec2.{region}.amazonaws.com`.
    pub fn ec2_endpoint(&self, region: &str) -> Result<url::Url, AwsError> {
        let (name, text) = match self
            .var("AWS_ENDPOINT_URL_EC2")
            .map(|v| ("AWS_ENDPOINT_URL_EC2", v.to_string()))
            .or_else(|| {
                self.var("AWS_ENDPOINT_URL")
                    .map(|v| ("AWS_ENDPOINT_URL", v.to_string()))
            }) {
            Some(found) => found,
            None => ("the region", format!("https://ec2.{region}.amazonaws.com")),
        };
        let url = url::Url::parse(&text).map_err(|e| AwsError::Config {
            path: PathBuf::from(name),
            line: 0,
            what: format!("`{text}` is not a URL: {e}"),
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(AwsError::Config {
                path: PathBuf::from(name),
                line: 0,
                what: format!("`{text}` is not an http(s) URL with a host"),
            });
        }
        Ok(url)
    }

    fn credentials_path(&self) -> Option<PathBuf> {
        match self.var("AWS_SHARED_CREDENTIALS_FILE") {
            Some(p) => Some(self.expand(p)),
            None => self.home.as_ref().map(|h| h.join(".aws/credentials")),
        }
    }

    fn config_path(&self) -> Option<PathBuf> {
        match self.var("AWS_CONFIG_FILE") {
            Some(p) => Some(self.expand(p)),
            None => self.home.as_ref().map(|h| h.join(".aws/config")),
        }
    }

    /// `~/x` as the SDKs expand it.
    fn expand(&self, path: &str) -> PathBuf {
        match (path.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => PathBuf::from(path),
        }
    }

    /// A path for messages: under $HOME as `~/…`.
    fn show(&self, path: &Path) -> String {
        if let Some(home) = &self.home {
            if let Ok(rest) = path.strip_prefix(home) {
                return format!("~/{}", rest.display());
            }
        }
        path.display().to_string()
    }
}

/// The SDKs' standard chain, minus IMDS/SSO/process: AWS_ACCESS_KEY_ID +
/// AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); then profile AWS_PROFILE (else `default`)
/// from AWS_SHARED_CREDENTIALS_FILE (else ~/.aws/credentials) and AWS_CONFIG_FILE (else
/// ~/.aws/config, sections `[profile NAME]` / `[default]`). `NoCredentials` lists every place
/// tried; a malformed file is an error naming file and line.
pub fn load_credentials(env: &AwsEnv) -> Result<Credentials, AwsError> {
    let mut tried = Vec::new();
    match (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(id), Some(secret)) => {
            return Ok(Credentials {
                access_key_id: id.to_string(),
                secret_access_key: secret.to_string(),
                session_token: env.var("AWS_SESSION_TOKEN").map(str::to_string),
                source: "environment".to_string(),
            })
        }
        (Some(_), None) => tried.push(
            "the environment (AWS_ACCESS_KEY_ID is set, AWS_SECRET_ACCESS_KEY is not)".to_string(),
        ),
        (None, Some(_)) => tried.push(
            "the environment (AWS_SECRET_ACCESS_KEY is set, AWS_ACCESS_KEY_ID is not)".to_string(),
        ),
        (None, None) => {
            tried.push("the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)".to_string())
        }
    }
    let profile = env.profile();
    for (path, is_config) in [(env.credentials_path(), false), (env.config_path(), true)] {
        let Some(path) = path else {
            tried.push(format!(
                "{} (no $HOME to find it under)",
                if is_config {
                    "~/.aws/config"
                } else {
                    "~/.aws/credentials"
                }
            ));
            continue;
        };
        let shown = env.show(&path);
        let Some(file) = read_ini(&path)? else {
            tried.push(format!("profile `{profile}` in {shown} (no such file)"));
            continue;
        };
        let section = if is_config {
            file.config_profile(&profile)
        } else {
            file.sections.get(&profile)
        };
        let Some(section) = section else {
            tried.push(format!("profile `{profile}` in {shown} (no such profile)"));
            continue;
        };
        match (
            section.get("aws_access_key_id"),
            section.get("aws_secret_access_key"),
        ) {
            (Some((_, id)), Some((_, secret))) => {
                return Ok(Credentials {
                    access_key_id: id.to_string(),
                    secret_access_key: secret.to_string(),
                    session_token: section
                        .get("aws_session_token")
                        .map(|(_, t)| t.to_string()),
                    source: format!("profile `{profile}` in {shown}"),
                })
            }
            (Some((line, _)), None) | (None, Some((line, _))) => {
                return Err(AwsError::Config {
                    path,
                    line: *line,
                    what: format!(
                        "profile `{profile}` has only one of aws_access_key_id and aws_secret_access_key"
                    ),
                })
            }
            (None, None) => {
                // What the SDKs would use instead, named, so that "no credentials" is not
                // a puzzle for someone whose `aws` command works.
                let other: Vec<&str> = UNSUPPORTED
                    .iter()
                    .copied()
                    .filter(|k| section.contains_key(*k))
                    .collect();
                tried.push(if other.is_empty() {
                    format!("profile `{profile}` in {shown} (no aws_access_key_id in it)")
                } else {
                    format!(
                        "profile `{profile}` in {shown} (no aws_access_key_id in it; its {} is not read by envc)",
                        other.join(", ")
                    )
                })
            }
        }
    }
    Err(AwsError::NoCredentials { tried })
}

/// Profile settings of the SDKs' other credential providers, which this chain leaves out.
const UNSUPPORTED: &[&str] = &[
    "credential_process",
    "sso_session",
    "sso_start_url",
    "role_arn",
    "web_identity_token_file",
    "credential_source",
];

/// One section: key → (line, value).
type Section = BTreeMap<String, (usize, String)>;

/// An INI file as the AWS CLI reads it: `[section]`, `key = value`, `#`/`;` comments, and
/// indented lines under a key with an empty value (a nested block such as `s3 =`), skipped.
struct Ini {
    sections: BTreeMap<String, Section>,
}

impl Ini {
    /// A profile of the config file: `[profile NAME]`, and `[default]` for `default`.
    fn config_profile(&self, profile: &str) -> Option<&Section> {
        self.sections
            .get(&format!("profile {profile}"))
            .or_else(|| {
                if profile == "default" {
                    self.sections.get("default")
                } else {
                    None
                }
            })
    }
}

/// `None` when the file does not exist.
fn read_ini(path: &Path) -> Result<Option<Ini>, AwsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(AwsError::Config {
                path: path.to_path_buf(),
                line: 0,
                what: format!("cannot read it: {e}"),
            })
        }
    };
    parse_ini(&text)
        .map(Some)
        .map_err(|(line, what)| AwsError::Config {
            path: path.to_path_buf(),
            line,
            what,
        })
}

fn parse_ini(text: &str) -> Result<Ini, (usize, String)> {
    let mut sections: BTreeMap<String, Section> = BTreeMap::new();
    let mut current: Option<String> = None;
    // Inside a nested block (`key =` followed by indented lines).
    let mut nested = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let indented = raw.starts_with([' ', '\t']);
        if indented && nested {
            continue;
        }
        if line.starts_with('[') {
            let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
                return Err((
                    line_no,
                    format!("`{line}` opens a section but does not close it with `]`"),
                ));
            };
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            if name.is_empty() {
                return Err((line_no, "a section with no name".to_string()));
            }
            sections.entry(name.clone()).or_default();
            current = Some(name);
            nested = false;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err((
                line_no,
                format!("`{line}` is neither `[section]` nor `key = value`"),
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err((line_no, "a value with no key before its `=`".to_string()));
        }
        let Some(section) = current.as_ref().and_then(|c| sections.get_mut(c)) else {
            return Err((line_no, format!("`{key}` comes before any `[section]`")));
        };
        let value = value.trim();
        nested = value.is_empty();
        section.insert(key.to_ascii_lowercase(), (line_no, value.to_string()));
    }
    Ok(Ini { sections })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)], home: &Path) -> AwsEnv {
        AwsEnv {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            home: Some(home.to_path_buf()),
        }
    }

    /// Writes `files` (path under a fresh $HOME → text), loads the credentials with `vars`,
    /// and compares the outcome, spelled `key/secret/token @ source` or the error's text with
    /// $HOME as `HOME`.
    fn check(vars: &[(&str, &str)], files: &[(&str, &str)], expected: &str) {
        let home = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = home.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.replace("HOME", &home.path().display().to_string()),
                )
            })
            .collect();
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let got = match load_credentials(&env(&vars, home.path())) {
            Ok(c) => format!(
                "{}/{}/{} @ {}",
                c.access_key_id,
                c.secret_access_key,
                c.session_token.as_deref().unwrap_or("-"),
                c.source
            ),
            Err(e) => e
                .to_string()
                .replace(&home.path().display().to_string(), "HOME"),
        };
        assert_eq!(got, expected);
    }

    const CREDS: &str = "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n\n[dev]\n# the dev account\naws_access_key_id=AKDEV\naws_secret_access_key=sdev\naws_session_token = tdev\n";
    const CONFIG: &str = "[default]\nregion = eu-west-1\n\n[profile ci]\nregion = us-east-2\naws_access_key_id = AKCI\naws_secret_access_key = sci\ns3 =\n  max_concurrent_requests = 4\n";

    #[test]
    fn the_chain() {
        // The environment wins over every file.
        check(
            &[
                ("AWS_ACCESS_KEY_ID", "AKENV"),
                ("AWS_SECRET_ACCESS_KEY", "senv"),
                ("AWS_SESSION_TOKEN", "tenv"),
            ],
            &[(".aws/credentials", CREDS)],
            "AKENV/senv/tenv @ environment",
        );
        // A profile of the credentials file, `default` when AWS_PROFILE is unset.
        check(
            &[],
            &[(".aws/credentials", CREDS)],
            "AKDEF/sdef/- @ profile `default` in ~/.aws/credentials",
        );
        check(
            &[("AWS_PROFILE", "dev")],
            &[(".aws/credentials", CREDS), (".aws/config", CONFIG)],
            "AKDEV/sdev/tdev @ profile `dev` in ~/.aws/credentials",
        );
        // `[profile x]` of the config file, its nested `s3 =` block skipped.
        check(
            &[("AWS_PROFILE", "ci")],
            &[(".aws/credentials", CREDS), (".aws/config", CONFIG)],
            "AKCI/sci/- @ profile `ci` in ~/.aws/config",
        );
        // Files named by the environment.
        check(
            &[
                ("AWS_SHARED_CREDENTIALS_FILE", "HOME/elsewhere/creds"),
                ("AWS_PROFILE", "dev"),
            ],
            &[("elsewhere/creds", CREDS)],
            "AKDEV/sdev/tdev @ profile `dev` in ~/elsewhere/creds",
        );
        // A half-set environment does not stop the chain; it is named in what was tried.
        check(
            &[("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_PROFILE", "nope")],
            &[(".aws/credentials", CREDS), (".aws/config", CONFIG)],
            "no AWS credentials found; tried the environment (AWS_ACCESS_KEY_ID is set, AWS_SECRET_ACCESS_KEY is not); \
             profile `nope` in ~/.aws/credentials (no such profile); profile `nope` in ~/.aws/config (no such profile)",
        );
        check(
            &[],
            &[],
            "no AWS credentials found; tried the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); \
             profile `default` in ~/.aws/credentials (no such file); profile `default` in ~/.aws/config (no such file)",
        );
        // `[default]` of the config file has no keys.
        check(
            &[],
            &[(".aws/config", CONFIG)],
            "no AWS credentials found; tried the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); \
             profile `default` in ~/.aws/credentials (no such file); profile `default` in ~/.aws/config (no aws_access_key_id in it)",
        );
        // A profile the SDKs would resolve with a provider envc leaves out.
        check(
            &[("AWS_PROFILE", "sso")],
            &[(".aws/config", "[profile sso]\nsso_session = corp\nregion = eu-west-1\n")],
            "no AWS credentials found; tried the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); \
             profile `sso` in ~/.aws/credentials (no such file); profile `sso` in ~/.aws/config (no aws_access_key_id in it; its sso_session is not read by envc)",
        );
        // Malformed files: the path and the line.
        check(
            &[],
            &[(".aws/credentials", "[default]\naws_access_key_id = A\nthis is not a setting\n")],
            "HOME/.aws/credentials:3: `this is not a setting` is neither `[section]` nor `key = value`",
        );
        check(
            &[],
            &[(".aws/credentials", "# keys\n[default\n")],
            "HOME/.aws/credentials:2: `[default` opens a section but does not close it with `]`",
        );
        check(
            &[],
            &[(".aws/credentials", "aws_access_key_id = A\n")],
            "HOME/.aws/credentials:1: `aws_access_key_id` comes before any `[section]`",
        );
        check(
            &[("AWS_PROFILE", "half")],
            &[(".aws/credentials", "[half]\n\naws_secret_access_key = s\n")],
            "HOME/.aws/credentials:3: profile `half` has only one of aws_access_key_id and aws_secret_access_key",
        );
    }

    #[test]
    fn region_and_endpoint() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".aws")).unwrap();
        std::fs::write(home.path().join(".aws/config"), CONFIG).unwrap();
        let region = |vars: &[(&str, &str)]| env(vars, home.path()).region();
        assert_eq!(
            region(&[("AWS_REGION", "ap-south-1"), ("AWS_DEFAULT_REGION", "x")]).as_deref(),
            Some("ap-south-1")
        );
        assert_eq!(
            region(&[("AWS_DEFAULT_REGION", "sa-east-1")]).as_deref(),
            Some("sa-east-1")
        );
        assert_eq!(region(&[]).as_deref(), Some("eu-west-1"));
        assert_eq!(
            region(&[("AWS_PROFILE", "ci")]).as_deref(),
            Some("us-east-2")
        );
        assert_eq!(region(&[("AWS_PROFILE", "nope")]), None);

        let endpoint = |vars: &[(&str, &str)]| {
            env(vars, home.path())
                .ec2_endpoint("eu-west-1")
                .map(|u| u.to_string())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            endpoint(&[]).unwrap(),
            "https://ec2.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            endpoint(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")]).unwrap(),
            "http://127.0.0.1:5000/"
        );
        assert_eq!(
            endpoint(&[
                ("AWS_ENDPOINT_URL", "http://a:1"),
                ("AWS_ENDPOINT_URL_EC2", "http://b:2")
            ])
            .unwrap(),
            "http://b:2/"
        );
        assert_eq!(
            endpoint(&[("AWS_ENDPOINT_URL_EC2", "ftp://b")]).unwrap_err(),
            "AWS_ENDPOINT_URL_EC2: `ftp://b` is not an http(s) URL with a host"
        );
    }

    #[test]
    fn debug_hides_the_secret() {
        let c = Credentials {
            access_key_id: "AK".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("token".into()),
            source: "environment".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("AK") && !shown.contains("very-secret") && !shown.contains("token\"")
        );
    }
}
