//! Files: placed atomically (staged in the destination's directory with their owner, group
//! and mode, then renamed into place), probed, removed. A batch is one `run`: the contents go
//! over stdin as one tar archive, which stages them all at once.

use crate::error::StepError;
use crate::record::{Applied, Facts};
use crate::script::{indexed, no_record, records, run_script, sha256_hex};
use crate::transport::{Transport, TransportError};
use envc_ids::fact::content::SHA256;

const APPLY: &str = include_str!("apply_files.sh");
const PROBE: &str = include_str!("probe_files.sh");
const REMOVE: &str = include_str!("remove_files.sh");

/// One file to place on a target.
#[derive(Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Absolute, normalized (no `.`, `..` or empty components, no trailing `/`).
    pub path: String,
    pub content: Vec<u8>,
    /// A user name (the facts record the name the target reports, so a numeric id shows up
    /// as drift against the name).
    pub owner: String,
    pub group: String,
    /// Permission bits, at most `0o7777`.
    pub mode: u32,
    /// The sha256 of what envc last wrote there, from the record: when the file holds
    /// something else, it is still replaced (the build declares it), and the result says so.
    pub written_sha256: Option<String>,
    /// For a file that holds a secret: what stands for its sha256 in facts and records,
    /// the sha256's hash under the store's key ([`crate::secrets::Secrets::keyed`]).
    pub sealed: Option<String>,
}

// The content may hold a secret: Debug shows its size only.
impl std::fmt::Debug for FileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSpec")
            .field("path", &self.path)
            .field("content_bytes", &self.content.len())
            .field("owner", &self.owner)
            .field("group", &self.group)
            .field("mode", &format_args!("{:04o}", self.mode))
            .field("sealed", &self.sealed.is_some())
            .finish()
    }
}

impl FileSpec {
    /// What a correct apply observes afterwards ([`file_facts`], sealed when it holds a
    /// secret).
    pub fn facts(&self) -> Facts {
        let facts = file_facts(&self.content, &self.owner, &self.group, self.mode);
        match &self.sealed {
            Some(keyed) => seal(facts, keyed),
            None => facts,
        }
    }
}

/// Facts of a secret-bearing file: its sha256 replaced by `keyed`, and marked `sealed`.
pub fn seal(mut facts: Facts, keyed: &str) -> Facts {
    facts.insert(SHA256.into(), keyed.to_string());
    facts.insert("sealed".into(), "yes".into());
    facts
}

/// A file to remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRemoval {
    pub path: String,
    /// The sha256 of what envc wrote there: a file that holds anything else now belongs to
    /// someone else (another environment, a person) and is left in place. `None` removes
    /// whatever is there.
    pub written_sha256: Option<String>,
}

/// What [`remove_files`] did with one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    Deleted,
    /// It was not there.
    Absent,
    /// Its content is no longer what envc wrote (or it is no longer a regular file): left.
    Changed,
}

/// The note of an apply that replaced content envc had not written.
pub const REPLACED_CHANGED: &str = "replaced content that changed since envc wrote it";

/// What a correct apply of this file observes afterwards: compare with [`probe_files`] to
/// detect drift. Keys: `sha256` (hex of the content), `owner`, `group`, `mode` (`0644`).
pub fn file_facts(content: &[u8], owner: &str, group: &str, mode: u32) -> Facts {
    Facts::from([
        (SHA256.to_string(), sha256_hex(content)),
        ("owner".to_string(), owner.to_string()),
        ("group".to_string(), group.to_string()),
        ("mode".to_string(), format!("{mode:04o}")),
    ])
}

/// Places `files` on the target in one `run`. Per file: `Ok(Applied)` with the facts observed
/// afterwards, or `Err` naming the file and the cause (a missing owner, a directory in the
/// way, a full disk). The outer error is a transport failure.
pub async fn apply_files(t: &Transport, files: &[FileSpec]) -> Vec<Result<Applied, StepError>> {
    per_item(apply_batch(t, files).await, files.len())
}

async fn apply_batch(
    t: &Transport,
    files: &[FileSpec],
) -> Result<Vec<Result<Applied, StepError>>, TransportError> {
    let mut results: Vec<Option<Result<Applied, StepError>>> = vec![None; files.len()];
    // Items that pass validation go into the batch; `batch[j]` is their index in `files`.
    let mut batch = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match check_file(f) {
            Ok(()) => batch.push(i),
            Err(e) => results[i] = Some(Err(StepError::new(format!("file `{}`: {e}", f.path)))),
        }
    }
    if !batch.is_empty() {
        let token = crate::names::unique_tag();
        let archive = tar_of(files, &batch, &token).map_err(|e| TransportError::Io {
            host: t.host().to_string(),
            detail: format!("cannot pack the files to send: {e}"),
        })?;
        let modes: Vec<String> = batch
            .iter()
            .map(|&i| format!("{:04o}", files[i].mode))
            .collect();
        let mut args = Vec::with_capacity(1 + batch.len() * 5);
        args.push(token.as_str());
        for (j, &i) in batch.iter().enumerate() {
            let f = &files[i];
            args.extend_from_slice(&[
                f.path.as_str(),
                f.owner.as_str(),
                f.group.as_str(),
                modes[j].as_str(),
                f.written_sha256.as_deref().unwrap_or(""),
            ]);
        }
        let out = run_script(t, APPLY, &args, &archive).await?;
        let recs = indexed(records(&out, "R"), batch.len());
        for (j, rec) in recs.into_iter().enumerate() {
            let f = &files[batch[j]];
            let path = &f.path;
            let result = match rec.as_deref() {
                // A sealed file's content hash never leaves this function in the clear.
                Some(["ok", _, sha, ..]) if f.sealed.is_some() && *sha != sha256_hex(&f.content) => {
                    Err(StepError::new(format!(
                        "file `{path}` on host `{}`: after writing it, it does not hold what was sent",
                        t.host()
                    )))
                }
                Some(["ok", created, sha, mode, owner, group, changed]) => Ok(Applied {
                    facts: match &f.sealed {
                        Some(keyed) => seal(observed(sha, mode, owner, group), keyed),
                        None => observed(sha, mode, owner, group),
                    },
                    created: *created == "true",
                    note: (*changed == "changed").then(|| REPLACED_CHANGED.to_string()),
                    log: None,
                }),
                Some(["err", msg]) => Err(StepError::new(format!(
                    "file `{path}` on host `{}`: {msg}",
                    t.host()
                ))),
                _ => Err(StepError::new(format!(
                    "file `{path}` on host `{}`: {}",
                    t.host(),
                    no_record(&out)
                ))),
            };
            results[batch[j]] = Some(result);
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))))
        .collect())
}

/// The facts of each path as it is on the target, in one `run`; `None` where it is absent.
/// A path that is not a regular file (a directory, a symlink) has `sha256` set to `(KIND)`,
/// which never equals a content hash. Paths that are not absolute are reported absent.
pub async fn probe_files(
    t: &Transport,
    paths: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let valid: Vec<usize> = (0..paths.len())
        .filter(|&i| check_path(&paths[i]).is_ok())
        .collect();
    let mut results = vec![None; paths.len()];
    if valid.is_empty() {
        return Ok(results);
    }
    let args: Vec<&str> = valid.iter().map(|&i| paths[i].as_str()).collect();
    let out = run_script(t, PROBE, &args, b"").await?;
    let recs = indexed(records(&out, "R"), valid.len());
    for (j, rec) in recs.into_iter().enumerate() {
        results[valid[j]] = match rec.as_deref() {
            Some(["absent"]) => None,
            Some(["file", sha, mode, owner, group]) => Some(observed(sha, mode, owner, group)),
            Some(["other", kind, mode, owner, group]) => {
                Some(observed(&format!("({kind})"), mode, owner, group))
            }
            Some(["unreadable", msg]) => Some(Facts::from([(
                SHA256.to_string(),
                format!("(unreadable: {msg})"),
            )])),
            _ => {
                return Err(TransportError::Io {
                    host: t.host().to_string(),
                    detail: format!("probing file `{}`: {}", paths[valid[j]], no_record(&out)),
                })
            }
        };
    }
    Ok(results)
}

/// Removes each file that still holds what envc wrote (absent is fine; a directory is
/// refused), in one `run`.
pub async fn remove_files(t: &Transport, files: &[FileRemoval]) -> Vec<Result<Removed, StepError>> {
    per_item(remove_batch(t, files).await, files.len())
}

/// A batch's results, or its transport failure as every item's.
fn per_item<T>(
    batch: Result<Vec<Result<T, StepError>>, TransportError>,
    n: usize,
) -> Vec<Result<T, StepError>> {
    batch.unwrap_or_else(|e| {
        let e = StepError::from(e);
        (0..n).map(|_| Err(e.clone())).collect()
    })
}

async fn remove_batch(
    t: &Transport,
    files: &[FileRemoval],
) -> Result<Vec<Result<Removed, StepError>>, TransportError> {
    let mut results: Vec<Option<Result<Removed, StepError>>> = vec![None; files.len()];
    let mut valid = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match check_path(&f.path) {
            Ok(()) => valid.push(i),
            Err(e) => results[i] = Some(Err(StepError::new(format!("file `{}`: {e}", f.path)))),
        }
    }
    if !valid.is_empty() {
        let args: Vec<&str> = valid
            .iter()
            .flat_map(|&i| {
                let f = &files[i];
                [f.path.as_str(), f.written_sha256.as_deref().unwrap_or("")]
            })
            .collect();
        let out = run_script(t, REMOVE, &args, b"").await?;
        let recs = indexed(records(&out, "R"), valid.len());
        for (j, rec) in recs.into_iter().enumerate() {
            let path = &files[valid[j]].path;
            results[valid[j]] = Some(match rec.as_deref() {
                Some(["ok"]) => Ok(Removed::Deleted),
                Some(["absent"]) => Ok(Removed::Absent),
                Some(["changed"]) => Ok(Removed::Changed),
                Some(["err", msg]) => Err(StepError::new(format!(
                    "cannot remove file `{path}` on host `{}`: {msg}",
                    t.host()
                ))),
                _ => Err(StepError::new(format!(
                    "removing file `{path}` on host `{}`: {}",
                    t.host(),
                    no_record(&out)
                ))),
            });
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))))
        .collect())
}

fn observed(sha: &str, mode: &str, owner: &str, group: &str) -> Facts {
    let mode = u32::from_str_radix(mode, 8)
        .map(|m| format!("{m:04o}"))
        .unwrap_or_else(|_| mode.to_string());
    Facts::from([
        (SHA256.to_string(), sha.to_string()),
        ("owner".to_string(), owner.to_string()),
        ("group".to_string(), group.to_string()),
        ("mode".to_string(), mode),
    ])
}

fn check_path(path: &str) -> Result<(), StepError> {
    if !path.starts_with('/') {
        return Err(StepError::new("the path must be absolute (start with `/`)"));
    }
    if path == "/" || path.ends_with('/') {
        return Err(StepError::new(
            "the path must name a file, not end with `/`",
        ));
    }
    if path.contains('\0') {
        return Err(StepError::new("the path contains a NUL byte"));
    }
    if path[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(StepError::new(
            "the path must be normalized (no `//`, `.` or `..` components)",
        ));
    }
    Ok(())
}

fn check_file(f: &FileSpec) -> Result<(), StepError> {
    check_path(&f.path)?;
    if f.mode > 0o7777 {
        return Err(StepError::new(format!(
            "mode {:o} is not a permission mode (at most 7777 in octal)",
            f.mode
        )));
    }
    for (what, name) in [("owner", &f.owner), ("group", &f.group)] {
        if name.is_empty() || name.contains(['\0', ':', '\n']) {
            return Err(StepError::new(format!(
                "the {what} {name:?} is not a user or group name; give a name like `root`"
            )));
        }
    }
    Ok(())
}

/// The tar archive `apply_files.sh` unpacks at `/`: for each file of `batch`, the member
/// `DIR/.envc-new.TOKEN/NAME` of its path `DIR/NAME`, with its content, mode, owner and
/// group (a name, or a numeric id as given).
fn tar_of(files: &[FileSpec], batch: &[usize], token: &str) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for &i in batch {
        let f = &files[i];
        let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", &f.path));
        let member = format!("{}/.envc-new.{token}/{name}", dir.trim_start_matches('/'));
        let mut header = tar::Header::new_gnu();
        header.set_size(f.content.len() as u64);
        header.set_mode(f.mode);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        match f.owner.parse::<u64>() {
            Ok(uid) => header.set_uid(uid),
            Err(_) => header.set_username(&f.owner)?,
        }
        match f.group.parse::<u64>() {
            Ok(gid) => header.set_gid(gid),
            Err(_) => header.set_groupname(&f.group)?,
        }
        b.append_data(
            &mut header,
            member.trim_start_matches('/'),
            f.content.as_slice(),
        )?;
    }
    b.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_normalized() {
        assert!(check_path("/etc/motd").is_ok());
        assert!(check_path("/a b/-x/'$(y)'\n").is_ok());
        for bad in [
            "",
            "etc/motd",
            "/",
            "/etc/",
            "/etc//x",
            "/etc/./x",
            "/etc/../x",
            "/a\0b",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn facts_of_a_correct_apply() {
        let f = file_facts(b"", "root", "adm", 0o640);
        assert_eq!(f["mode"], "0640");
        assert_eq!(f["owner"], "root");
        assert_eq!(f["group"], "adm");
        assert_eq!(f, observed(&sha256_hex(b""), "640", "root", "adm"));
        assert_eq!(observed("x", "4755", "a", "b")["mode"], "4755");
    }

    #[test]
    fn bad_specs_are_refused_before_anything_runs() {
        let spec = |owner: &str, mode| FileSpec {
            path: "/x".into(),
            content: vec![],
            owner: owner.into(),
            group: "root".into(),
            mode,
            written_sha256: None,
            sealed: None,
        };
        assert!(check_file(&spec("root", 0o644)).is_ok());
        assert!(check_file(&spec("root", 0o17777)).is_err());
        assert!(check_file(&spec("", 0o644)).is_err());
        assert!(check_file(&spec("a:b", 0o644)).is_err());
    }
}
