//! Secrets: values the source names (`secret("pg_password")`) but never holds. They come
//! from the project's age-encrypted file, or per secret from an environment variable or a
//! command (`pass`, `vault kv get`, `sops -d`); they reach targets as file content, template
//! variables, a command's environment or input, and check arguments; and they never reach
//! the store, a record, a plan, a log or an error message: what is kept is a keyed hash
//! (blake3 in keyed mode, with the store's own key), so a rotated secret still re-runs
//! exactly the nodes that use it, and text that could carry one is redacted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

/// A secret shorter than this could not be told apart from ordinary text when redacting.
const MIN_LEN: usize = 4;
/// A file of secrets larger than this is not one (it is read into memory).
const MAX_FILE: u64 = 1 << 20;

/// Where one secret comes from, when not from the project's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The value of an environment variable of envc's process.
    Env(String),
    /// What a command prints on stdout (one trailing newline removed).
    Command(Vec<String>),
}

/// The project's secret settings (`[secrets]` in envc.toml).
#[derive(Clone, Debug, Default)]
pub struct SecretSettings {
    /// The age-encrypted file (ASCII-armored TOML, `NAME = "VALUE"`).
    pub file: PathBuf,
    /// Who can read it: age recipients (`age1…`), written to on every change.
    pub recipients: Vec<String>,
    /// The age identity file that reads it (`ENVC_AGE_IDENTITY` wins).
    pub identity: Option<PathBuf>,
    pub sources: BTreeMap<String, Source>,
    /// The environment file the command was given, as typed: what the hints tell to run
    /// `envc secret set` with (`FILE` when unknown).
    pub env_file: Option<String>,
}

impl SecretSettings {
    fn env_file(&self) -> &str {
        self.env_file.as_deref().unwrap_or("FILE")
    }
}

#[derive(Debug)]
pub struct SecretError {
    pub what: String,
    pub hint: String,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n  hint: {}", self.what, self.hint)
    }
}

impl std::error::Error for SecretError {}

fn error(what: impl Into<String>, hint: impl Into<String>) -> SecretError {
    SecretError {
        what: what.into(),
        hint: hint.into(),
    }
}

/// The values of the secrets one run uses, and the key their hashes are made with; for a
/// command that plans without some (`plan`, `render`), why each of those is not at hand.
pub struct Secrets {
    values: BTreeMap<String, String>,
    key: [u8; 32],
    unread: BTreeMap<String, String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: a Debug print must not be the leak.
        f.debug_struct("Secrets")
            .field("names", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Secrets {
    pub fn new(values: BTreeMap<String, String>, key: [u8; 32]) -> Secrets {
        Secrets {
            values,
            key,
            unread: BTreeMap::new(),
        }
    }

    /// Secrets of which only `values` are at hand; `unread` says why each other is not.
    pub fn partial(
        values: BTreeMap<String, String>,
        key: [u8; 32],
        unread: BTreeMap<String, String>,
    ) -> Secrets {
        Secrets {
            values,
            key,
            unread,
        }
    }

    /// The secrets whose value is not at hand, each with why.
    pub fn unread(&self) -> &BTreeMap<String, String> {
        &self.unread
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The keyed hash that stands for secret-bearing bytes wherever envc keeps anything.
    pub fn keyed(&self, bytes: &[u8]) -> String {
        format!("keyed:{}", blake3::keyed_hash(&self.key, bytes).to_hex())
    }

    /// `text` with every secret value (and every long line of a multi-line one) replaced
    /// by `<secret NAME>`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        let mut needles: Vec<(&str, &str)> = Vec::new();
        // Also as Rust's `{:?}` and `escape_default` print it: an error message may quote
        // a value escaped.
        let escaped: Vec<(&str, String)> = self
            .values
            .iter()
            .flat_map(|(n, v)| {
                [
                    (n.as_str(), v.escape_debug().to_string()),
                    (n.as_str(), v.escape_default().to_string()),
                ]
            })
            .filter(|(n, e)| self.values.get(*n) != Some(e))
            .collect();
        needles.extend(escaped.iter().map(|(n, e)| (*n, e.as_str())));
        // And as a command may print it encoded: base64 (in a stream at any alignment),
        // hex, URL-encoded.
        let encoded: Vec<(&str, String)> = (self.values.iter())
            .flat_map(|(n, v)| encodings(v).into_iter().map(move |e| (n.as_str(), e)))
            .collect();
        needles.extend(encoded.iter().map(|(n, e)| (*n, e.as_str())));
        for (name, value) in &self.values {
            needles.push((name, value));
            if value.contains('\n') {
                needles.extend(
                    value
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.len() >= 8)
                        .map(|l| (name.as_str(), l)),
                );
            }
        }
        // Longest first: a secret that contains another is replaced whole.
        needles.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        for (name, value) in needles {
            if value.len() >= MIN_LEN && out.contains(value) {
                out = out.replace(value, &format!("<secret {name}>"));
            }
        }
        out
    }

    /// The name of a secret whose value appears in `text`.
    pub fn found_in(&self, text: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(_, v)| text.contains(v.as_str()))
            .map(|(n, _)| n.as_str())
    }
}

/// The forms of `value` that a command printing it encoded would show: its base64 (standard
/// and URL-safe alphabets) as it reads at each of the three alignments in a longer
/// encoded stream (`echo "user:$PW" | base64`: only the characters that depend on the value
/// alone), its hex in both cases, and its URL-encoding in both cases. Reversed, spaced or
/// compressed output is not caught: the docs say so.
fn encodings(value: &str) -> Vec<String> {
    use base64::Engine as _;
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for k in 0..3usize {
            let mut shifted = vec![0u8; k];
            shifted.extend_from_slice(bytes);
            let text = engine.encode(&shifted);
            // Characters wholly made of the value's bits: from the first after the `k`
            // bytes before it, to the last before the bytes after it.
            let from = (4 * k).div_ceil(3);
            let to = (4 * (k + bytes.len()) / 3).min(text.len());
            if from < to {
                out.push(text[from..to].to_string());
            }
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    out.push(hex.to_uppercase());
    out.push(hex);
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    if bytes.iter().any(|b| !unreserved(*b)) {
        for upper in [true, false] {
            out.push(
                (bytes.iter())
                    .map(|&b| match (unreserved(b), upper) {
                        (true, _) => char::from(b).to_string(),
                        (false, true) => format!("%{b:02X}"),
                        (false, false) => format!("%{b:02x}"),
                    })
                    .collect(),
            );
        }
    }
    out.retain(|e| e != value);
    out
}

/// Why `value` cannot be a secret, if it cannot: the one rule for what loads and what
/// `envc secret set|edit` writes.
pub fn unusable(value: &str) -> Option<String> {
    if value.contains('\0') {
        Some("holds a NUL byte, which no file or command can carry".into())
    } else if value.len() < MIN_LEN {
        Some(format!(
            "is shorter than {MIN_LEN} bytes: too short to keep out of output by redaction"
        ))
    } else {
        None
    }
}

/// Reads the values of `names`: each from its own source if it has one, else from the
/// project's file. Every secret that cannot be read is named in the one error.
pub fn load(
    names: &BTreeSet<String>,
    settings: &SecretSettings,
) -> Result<BTreeMap<String, String>, SecretError> {
    let read = read_each(names, settings);
    if read.unread.is_empty() && read.unusable.is_empty() {
        return Ok(read.values);
    }
    let problems: Vec<String> = (read.unread.iter())
        .map(|(name, why)| format!("`{name}`{why}"))
        .chain(read.unusable)
        .collect();
    Err(read_error(&problems, read.file_hint, settings))
}

/// What `load` reads, for a command that can go on without some values (`plan`, `render`):
/// the values at hand, and by name why each other one is not (a value that is there but
/// unusable is still an error: it is wrong, not missing).
pub fn load_available(
    names: &BTreeSet<String>,
    settings: &SecretSettings,
) -> Result<Available, SecretError> {
    let read = read_each(names, settings);
    if !read.unusable.is_empty() {
        return Err(read_error(&read.unusable, read.file_hint, settings));
    }
    let unread = (read.unread.into_iter())
        .map(|(name, why)| (name, why.trim_start_matches(": ").trim().to_string()))
        .collect();
    Ok(Available {
        values: read.values,
        unread,
    })
}

/// The secrets at hand, and by name why each other is not.
pub struct Available {
    pub values: BTreeMap<String, String>,
    pub unread: BTreeMap<String, String>,
}

/// The secrets one command reads: the values, those not at hand (name → why, as `: …` or
/// ` is not in …`), those whose value is unusable, and the hint of a file that did not read.
struct ReadSecrets {
    values: BTreeMap<String, String>,
    unread: BTreeMap<String, String>,
    unusable: Vec<String>,
    file_hint: Option<String>,
}

fn read_each(names: &BTreeSet<String>, settings: &SecretSettings) -> ReadSecrets {
    let mut read = ReadSecrets {
        values: BTreeMap::new(),
        unread: BTreeMap::new(),
        unusable: Vec::new(),
        file_hint: None,
    };
    let mut file: Option<Result<BTreeMap<String, String>, SecretError>> = None;
    for name in names {
        let got = match settings.sources.get(name) {
            Some(Source::Env(var)) => std::env::var(var)
                .map_err(|_| format!(": the environment variable {var} is not set (or not UTF-8)")),
            Some(Source::Command(argv)) => run_source(argv).map_err(|e| format!(": {e}")),
            None => {
                let file = file.get_or_insert_with(|| read_file(settings));
                match file {
                    Ok(all) => all.get(name).cloned().ok_or_else(|| {
                        format!(
                            " is not in {} (run `envc secret set {} {name}`)",
                            settings.file.display(),
                            settings.env_file()
                        )
                    }),
                    Err(e) => Err(format!(": {}", e.what)),
                }
            }
        };
        match got {
            Ok(v) => match unusable(&v) {
                Some(why) => read.unusable.push(format!("`{name}` {why}")),
                None => {
                    read.values.insert(name.clone(), v);
                }
            },
            Err(e) => {
                read.unread.insert(name.clone(), e);
            }
        }
    }
    if let Some(Err(e)) = file {
        read.file_hint = Some(e.hint);
    }
    read
}

fn read_error(
    problems: &[String],
    file_hint: Option<String>,
    settings: &SecretSettings,
) -> SecretError {
    let hint = file_hint.unwrap_or_else(|| {
        format!("set each secret with `envc secret set {} NAME` (the value on stdin), or give it a source in envc.toml: `[secrets.from] NAME = {{ env = \"VAR\" }}` or `{{ command = [\"pass\", \"show\", \"…\"] }}`", settings.env_file())
    });
    error(
        format!(
            "cannot read the secrets this environment uses:\n  - {}",
            problems.join("\n  - ")
        ),
        hint,
    )
}

/// Why a secret's command gave no value.
#[derive(Debug)]
enum SourceFault {
    Empty,
    CannotRun {
        program: String,
        error: std::io::Error,
    },
    /// It ran and failed: its status and the last line of its stderr (the source's own
    /// message; its stdout could be the value).
    Failed {
        program: String,
        status: std::process::ExitStatus,
        last: String,
    },
    NotUtf8 {
        program: String,
    },
}

impl std::fmt::Display for SourceFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceFault::Empty => f.write_str("its command is empty"),
            SourceFault::CannotRun { program, error } => {
                write!(f, "cannot run `{program}`: {error}")
            }
            SourceFault::Failed {
                program,
                status,
                last,
            } => write!(f, "`{program}` failed ({status}): {last}"),
            SourceFault::NotUtf8 { program } => {
                write!(f, "`{program}` printed something that is not UTF-8")
            }
        }
    }
}

fn run_source(argv: &[String]) -> Result<String, SourceFault> {
    let Some((program, args)) = argv.split_first() else {
        return Err(SourceFault::Empty);
    };
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|error| SourceFault::CannotRun {
            program: program.clone(),
            error,
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(SourceFault::Failed {
            program: program.clone(),
            status: out.status,
            last: last.to_string(),
        });
    }
    let mut s = String::from_utf8(out.stdout).map_err(|_| SourceFault::NotUtf8 {
        program: program.clone(),
    })?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

/// The identities that read the project's file.
fn identities(
    settings: &SecretSettings,
) -> Result<Vec<Box<dyn age::Identity + Send + Sync>>, SecretError> {
    let path = std::env::var_os("ENVC_AGE_IDENTITY")
        .map(PathBuf::from)
        .or_else(|| settings.identity.clone())
        .ok_or_else(|| {
            error(
                format!("no age identity to read {} with", settings.file.display()),
                "set ENVC_AGE_IDENTITY to your age identity file (`envc secret keygen FILE` makes one), or [secrets] identity in envc.toml",
            )
        })?;
    let bytes = envc_lockfiles::file::read_bounded(&path, MAX_FILE).map_err(|e| {
        error(
            format!("cannot read the age identity {}: {e}", path.display()),
            "ENVC_AGE_IDENTITY names an age identity file (AGE-SECRET-KEY-1…)",
        )
    })?;
    age::IdentityFile::from_buffer(&bytes[..])
        .and_then(|f| f.into_identities().map_err(std::io::Error::other))
        .map_err(|e| error(format!("{} is not an age identity file: {e}", path.display()), "an identity file holds lines `AGE-SECRET-KEY-1…` (`envc secret keygen FILE` makes one)"))
}

/// Every secret of the project's file (none when it does not exist yet).
pub fn read_file(settings: &SecretSettings) -> Result<BTreeMap<String, String>, SecretError> {
    let path = &settings.file;
    let bytes = match envc_lockfiles::file::read_bounded(path, MAX_FILE) {
        Ok(b) => b,
        Err(envc_lockfiles::file::ReadError::NotFound) => return Ok(BTreeMap::new()),
        Err(e) => {
            return Err(error(
                format!("cannot read {}: {e}", path.display()),
                "the secrets file is an age file beside envc.toml",
            ))
        }
    };
    let ids = identities(settings)?;
    let undecryptable = |e: &dyn fmt::Display| {
        error(
            format!("cannot decrypt {}: {e}", path.display()),
            format!("the file is encrypted to [secrets] recipients in envc.toml; decrypt it with the identity of one of them (ENVC_AGE_IDENTITY), or ask someone who can to add your recipient and set any secret again (`envc secret set {} NAME`), which encrypts the file to every recipient", settings.env_file()),
        )
    };
    let decryptor = age::Decryptor::new(age::armor::ArmoredReader::new(&bytes[..]))
        .map_err(|e| undecryptable(&e))?;
    let mut reader = decryptor
        .decrypt(ids.iter().map(|i| i.as_ref() as &dyn age::Identity))
        .map_err(|e| undecryptable(&e))?;
    let mut text = String::new();
    reader
        .read_to_string(&mut text)
        .map_err(|e| undecryptable(&e))?;
    from_text(&text).ok_or_else(|| {
        error(
            format!(
                "{} does not hold NAME = \"VALUE\" lines of text",
                path.display()
            ),
            format!("move it aside and set each secret again with `envc secret set {} NAME` (the value on stdin)", settings.env_file()),
        )
    })
}

/// Writes the project's file with `values`, encrypted to its recipients (atomically).
pub fn write_file(
    settings: &SecretSettings,
    values: &BTreeMap<String, String>,
) -> Result<(), SecretError> {
    if settings.recipients.is_empty() {
        return Err(error(
            "[secrets] recipients in envc.toml names no one to encrypt to",
            "list the age recipients (age1…) who may read the secrets: `[secrets] recipients = [\"age1…\"]`",
        ));
    }
    let recipients = settings
        .recipients
        .iter()
        .map(|r| {
            age::x25519::Recipient::from_str(r).map_err(|e| {
                error(
                    format!("[secrets] recipients: `{r}` is not an age recipient: {e}"),
                    "a recipient is the `age1…` line `envc secret keygen` (or age-keygen) prints",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let text = to_text(values);
    let io = |e: std::io::Error| {
        error(
            format!("cannot write {}: {e}", settings.file.display()),
            "check that the directory is writable",
        )
    };
    let encryptor =
        age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
            .map_err(|e| error(format!("cannot encrypt: {e}"), "check [secrets] recipients"))?;
    let mut armored = Vec::new();
    {
        let armor =
            age::armor::ArmoredWriter::wrap_output(&mut armored, age::armor::Format::AsciiArmor)
                .map_err(io)?;
        let mut w = encryptor.wrap_output(armor).map_err(io)?;
        w.write_all(text.as_bytes()).map_err(io)?;
        w.finish().and_then(|a| a.finish()).map_err(io)?;
    }
    let dir = settings.file.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(&armored).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(&settings.file).map_err(|e| io(e.error))?;
    Ok(())
}

/// The plaintext of the secrets file: `"NAME" = "VALUE"` lines (TOML). JSON's string
/// escapes are TOML's basic-string escapes; keys are quoted, since a bare `a.b` would be
/// a table.
pub fn to_text(values: &BTreeMap<String, String>) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{} = {}\n", serde_json::json!(k), serde_json::json!(v)))
        .collect()
}

/// [`to_text`] read back; `None` when it is not that (serde's message is not kept: it can
/// quote a value).
pub fn from_text(text: &str) -> Option<BTreeMap<String, String>> {
    toml::from_str(text).ok()
}

/// A new age identity: (the identity file's text, its recipient).
pub fn keygen() -> (String, String) {
    use age::secrecy::ExposeSecret;
    let id = age::x25519::Identity::generate();
    let recipient = id.to_public().to_string();
    (
        format!(
            "# public key: {recipient}\n{}\n",
            id.to_string().expose_secret()
        ),
        recipient,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_values_and_long_lines_of_multiline_ones() {
        let s = Secrets::new(
            BTreeMap::from([
                ("pw".to_string(), "hunter22".to_string()),
                (
                    "pem".to_string(),
                    "-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----".to_string(),
                ),
                ("inner".to_string(), "hunter".to_string()),
            ]),
            [7; 32],
        );
        assert_eq!(
            s.redact("pw=hunter22 and hunter"),
            "pw=<secret pw> and <secret inner>"
        );
        assert_eq!(s.redact("line: AAAABBBBCCCC"), "line: <secret pem>");
        assert_eq!(s.found_in("x hunter22"), Some("inner"));
        assert_eq!(
            format!("{s:?}"),
            "Secrets { names: [\"inner\", \"pem\", \"pw\"] }"
        );
    }

    /// A command that prints a secret encoded (base64 in a longer stream, hex, URL-encoded)
    /// does not get it past redaction.
    #[test]
    fn redaction_catches_common_encodings() {
        use base64::Engine as _;
        let pw = "S3cret-db/pw+1";
        let s = Secrets::new(
            BTreeMap::from([("pw".to_string(), pw.to_string())]),
            [7; 32],
        );
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        for printed in [
            b64(pw),
            b64(&format!("user:{pw}")),
            b64(&format!("ab{pw}xyz")),
            b64(&format!("a{pw}")),
            base64::engine::general_purpose::URL_SAFE.encode(format!("u={pw}")),
            pw.bytes().map(|b| format!("{b:02x}")).collect(),
            pw.bytes().map(|b| format!("{b:02X}")).collect(),
            "S3cret-db%2Fpw%2B1".to_string(),
            "S3cret-db%2fpw%2b1".to_string(),
        ] {
            let shown = s.redact(&format!("out: {printed} end"));
            assert!(shown.contains("<secret pw>"), "{printed} -> {shown}");
        }
        // What is not the secret stays as it is.
        assert_eq!(
            s.redact(&b64("something else entirely")),
            b64("something else entirely")
        );
    }

    #[test]
    fn keyed_hashes_depend_on_the_key() {
        let a = Secrets::new(BTreeMap::new(), [1; 32]);
        let b = Secrets::new(BTreeMap::new(), [2; 32]);
        assert_eq!(a.keyed(b"x"), a.keyed(b"x"));
        assert_ne!(a.keyed(b"x"), b.keyed(b"x"));
        assert!(a.keyed(b"x").starts_with("keyed:"));
    }

    #[test]
    fn the_file_round_trips_and_refuses_other_identities() {
        let dir = tempfile::tempdir().unwrap();
        let (id_text, recipient) = keygen();
        std::fs::write(dir.path().join("id"), &id_text).unwrap();
        let settings = SecretSettings {
            file: dir.path().join("secrets.age"),
            recipients: vec![recipient],
            identity: Some(dir.path().join("id")),
            sources: BTreeMap::new(),
            env_file: None,
        };
        let values = BTreeMap::from([("a".to_string(), "v a l u e".to_string())]);
        write_file(&settings, &values).unwrap();
        let on_disk = std::fs::read_to_string(&settings.file).unwrap();
        assert!(on_disk.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"));
        assert!(!on_disk.contains("v a l u e"));
        assert_eq!(read_file(&settings).unwrap(), values);
        let (other, _) = keygen();
        std::fs::write(dir.path().join("other"), other).unwrap();
        let wrong = SecretSettings {
            identity: Some(dir.path().join("other")),
            ..settings
        };
        let e = read_file(&wrong).unwrap_err();
        assert!(e.what.contains("cannot decrypt"), "{e}");
    }
}
