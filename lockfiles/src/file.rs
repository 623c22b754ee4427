//! The lockfile on disk: where it lives (`prod.env` → `prod.lock`, beside it), reading it,
//! and writing it so that a failed or interrupted lock leaves the old file as it was.

use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

use crate::error::LockError;
use crate::model::Lockfile;

/// The largest lockfile read. A lockfile pins a few hundred inputs in well under a megabyte;
/// the bound keeps a wrong path (a device, a huge file) from being read whole.
pub const MAX_BYTES: u64 = 64 << 20;

/// The lockfile of an environment file: the same name with `.lock` for its extension.
pub fn lock_path(env_file: &Path) -> PathBuf {
    env_file.with_extension("lock")
}

impl Lockfile {
    /// Reads and parses a lockfile. A missing file is an error that says how to create it.
    pub fn read_from(path: &Path) -> Result<Lockfile, Vec<LockError>> {
        let text = read_text(path).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::NotFound => "create it with `envc lock FILE`",
                std::io::ErrorKind::InvalidInput => "name the environment's `.lock` file",
                _ => "check the file's permissions",
            };
            vec![LockError {
                message: format!("cannot read {}: {e}", path.display()),
                line: None,
                pin: None,
                hint: hint.to_string(),
            }]
        })?;
        Lockfile::parse(&text)
    }

    /// Writes the lockfile atomically: a temporary file beside it, synced, then renamed
    /// over it. Readers see the old bytes or the new ones, never a part; an error leaves
    /// the old file untouched.
    pub fn write_to(&self, path: &Path, command: &str) -> std::io::Result<()> {
        let text = self.to_toml(command);
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path.file_name().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the lockfile path has no file name",
            )
        })?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            // The rename itself is durable once the directory is synced.
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// A regular file of at most [`MAX_BYTES`], as UTF-8 text.
fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let bytes = read_bounded(path, MAX_BYTES).map_err(|e| match e {
        ReadError::NotFound => Error::from(ErrorKind::NotFound),
        ReadError::Io(e) => e,
        ReadError::TooLarge { limit } => Error::new(
            ErrorKind::FileTooLarge,
            format!("it is too large: a lockfile has at most {limit} bytes"),
        ),
        e => Error::new(ErrorKind::InvalidInput, e.to_string()),
    })?;
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "it is not UTF-8 text"))
}

// Every file a user names (sources, templates, lockfiles) is read with `read_bounded`. It is
// here because this is the lowest crate of the workspace that reads files.

/// Why a file a user named was not read.
#[derive(Debug)]
pub enum ReadError {
    NotFound,
    Directory,
    /// A FIFO, a device, a socket: reading one can block forever or never end.
    NotRegular(&'static str),
    TooLarge {
        limit: u64,
    },
    Io(std::io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotFound => f.write_str("no such file"),
            ReadError::Directory => f.write_str("it is a directory"),
            ReadError::NotRegular(kind) => write!(f, "it is not a regular file (it is {kind})"),
            ReadError::TooLarge { limit } => {
                write!(
                    f,
                    "it is too large: envc reads files of up to {limit} bytes"
                )
            }
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> ReadError {
        if e.kind() == std::io::ErrorKind::NotFound {
            ReadError::NotFound
        } else {
            ReadError::Io(e)
        }
    }
}

/// Reads the regular file at `path`, of at most `limit` bytes. The limit holds while
/// reading, not against the size the file reports (which a device, a file under /proc, or a
/// file that grows does not tell truthfully).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let kind = |t: std::fs::FileType| -> Result<(), ReadError> {
        if t.is_file() {
            Ok(())
        } else if t.is_dir() {
            Err(ReadError::Directory)
        } else if t.is_fifo() {
            Err(ReadError::NotRegular("a FIFO"))
        } else if t.is_char_device() {
            Err(ReadError::NotRegular("a character device"))
        } else if t.is_block_device() {
            Err(ReadError::NotRegular("a block device"))
        } else if t.is_socket() {
            Err(ReadError::NotRegular("a socket"))
        } else {
            Err(ReadError::NotRegular("not a file"))
        }
    };
    // Checked before opening: opening a FIFO blocks until a writer comes.
    kind(std::fs::metadata(path)?.file_type())?;
    // Non-blocking, and checked again on what was opened, in case the path was swapped for a
    // FIFO in between; O_NONBLOCK does nothing to reads of a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    kind(file.metadata()?.file_type())?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    #[test]
    fn the_lockfile_sits_beside_the_env_file() {
        for (env, lock) in [
            ("prod.env", "prod.lock"),
            ("envs/prod.env", "envs/prod.lock"),
            ("/abs/dir/staging.env", "/abs/dir/staging.lock"),
            ("noext", "noext.lock"),
        ] {
            assert_eq!(lock_path(Path::new(env)), PathBuf::from(lock), "{env}");
        }
    }

    #[test]
    fn writes_atomically_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir.path().join("prod.env"));
        let lock = sample();
        lock.write_to(&path, "envc lock prod.env").unwrap();
        assert_eq!(Lockfile::read_from(&path), Ok(lock.clone()));
        // Nothing else is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["prod.lock"]);
        // A write that fails leaves the old file as it was.
        let blocked = dir.path().join("sub.lock");
        std::fs::create_dir(&blocked).unwrap();
        assert!(lock.write_to(&blocked, "x").is_err());
        assert!(blocked.is_dir());
    }

    #[test]
    fn a_missing_lockfile_says_how_to_create_it() {
        let errors = Lockfile::read_from(Path::new("/nonexistent/prod.lock")).unwrap_err();
        assert_eq!(errors[0].hint, "create it with `envc lock FILE`");
        assert!(errors[0]
            .message
            .starts_with("cannot read /nonexistent/prod.lock: "));
    }
}

/// A lockfile as read: its pins, and the blake3 of its bytes (what a run record names),
/// read once so that the two cannot disagree.
#[derive(Clone, Debug)]
pub struct LockedFile {
    pub lock: Lockfile,
    pub hash: String,
}

/// `WHAT is not a valid lockfile:` and every problem, one per line.
fn invalid(f: &mut std::fmt::Formatter<'_>, what: &str, errors: &[LockError]) -> std::fmt::Result {
    write!(f, "{what} is not a valid lockfile:")?;
    for e in errors {
        write!(f, "\n  {}", e.to_string().replace('\n', "\n  "))?;
    }
    Ok(())
}

/// Why a lockfile was not read: by [`read_lock`] (the lockfile beside an environment file)
/// or by [`read_lock_arg`] (one named on the command line, `PATH` or `REV:PATH`).
#[derive(Debug)]
pub enum ReadLockError {
    /// The lockfile beside an environment file exists but cannot be read.
    Unreadable { path: PathBuf, error: ReadError },
    /// The lockfile beside `env_file` is read but broken: every problem in it.
    Invalid {
        path: PathBuf,
        env_file: PathBuf,
        errors: Vec<LockError>,
    },
    /// The file an argument names cannot be read.
    ArgUnreadable { arg: String, error: ReadError },
    /// The file an argument names is not UTF-8.
    ArgNotUtf8 { arg: String },
    /// `git` could not be started to read `REV:PATH`.
    CannotRunGit { arg: String, error: std::io::Error },
    /// `git show REV:PATH` failed; `stderr` is what it said, trimmed.
    NotInGit { arg: String, stderr: String },
    /// An argument that is neither a file nor `REV:PATH`.
    NoSuchFile { arg: String },
    /// A `REV:PATH` whose revision starts with `-`: git would read it as an option
    /// (`--output=/tmp/x:y` wrote a file).
    RevisionIsAnOption { arg: String },
    /// The lockfile an argument names is read but broken: every problem in it.
    ArgInvalid { arg: String, errors: Vec<LockError> },
}

impl std::fmt::Display for ReadLockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadLockError::Unreadable { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            ReadLockError::Invalid {
                path,
                env_file,
                errors,
            } => {
                invalid(f, &path.display().to_string(), errors)?;
                write!(
                    f,
                    "\n  hint: regenerate it with `envc lock {}`",
                    env_file.display()
                )
            }
            ReadLockError::ArgUnreadable { arg, error } => write!(f, "{arg}: {error}"),
            ReadLockError::ArgNotUtf8 { arg } => write!(f, "{arg}: it is not UTF-8 text"),
            ReadLockError::CannotRunGit { arg, error } => {
                write!(f, "cannot run git for {arg}: {error}")
            }
            ReadLockError::NotInGit { arg, stderr } => {
                write!(f, "{arg}: neither a file nor a git `REV:PATH`: {stderr}")
            }
            ReadLockError::NoSuchFile { arg } => write!(
                f,
                "{arg}: no such file (a git revision is written `REV:PATH`)"
            ),
            ReadLockError::RevisionIsAnOption { arg } => write!(
                f,
                "{arg}: a revision does not start with `-` (git would take it for an option); \
                 write `./{arg}` for a file of that name"
            ),
            ReadLockError::ArgInvalid { arg, errors } => invalid(f, arg, errors),
        }
    }
}

impl std::error::Error for ReadLockError {}

/// The lockfile beside `env_file`, if there is one. A broken one is an error: builds must
/// not quietly go unpinned.
pub fn read_lock(env_file: &Path) -> Result<Option<LockedFile>, ReadLockError> {
    let path = lock_path(env_file);
    let bytes = match read_bounded(&path, MAX_BYTES) {
        Ok(b) => b,
        Err(ReadError::NotFound) => return Ok(None),
        Err(error) => return Err(ReadLockError::Unreadable { path, error }),
    };
    let lock = match Lockfile::parse(&String::from_utf8_lossy(&bytes)) {
        Ok(lock) => lock,
        Err(errors) => {
            return Err(ReadLockError::Invalid {
                path,
                env_file: env_file.to_path_buf(),
                errors,
            })
        }
    };
    Ok(Some(LockedFile {
        lock,
        hash: blake3::hash(&bytes).to_hex().to_string(),
    }))
}

/// A lockfile named on the command line of `lock diff`: a path, or `REV:PATH` read from git.
pub fn read_lock_arg(arg: &str) -> Result<Lockfile, ReadLockError> {
    let text = if Path::new(arg).exists() {
        let bytes = read_bounded(Path::new(arg), MAX_BYTES).map_err(|error| {
            ReadLockError::ArgUnreadable {
                arg: arg.to_string(),
                error,
            }
        })?;
        String::from_utf8(bytes).map_err(|_| ReadLockError::ArgNotUtf8 {
            arg: arg.to_string(),
        })?
    } else if let Some((rev, path)) = arg.split_once(':') {
        if rev.starts_with('-') {
            return Err(ReadLockError::RevisionIsAnOption {
                arg: arg.to_string(),
            });
        }
        let out = std::process::Command::new("git")
            .args(["show", "--end-of-options", &format!("{rev}:{path}")])
            .output()
            .map_err(|error| ReadLockError::CannotRunGit {
                arg: arg.to_string(),
                error,
            })?;
        if !out.status.success() {
            return Err(ReadLockError::NotInGit {
                arg: arg.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        return Err(ReadLockError::NoSuchFile {
            arg: arg.to_string(),
        });
    };
    Lockfile::parse(&text).map_err(|errors| ReadLockError::ArgInvalid {
        arg: arg.to_string(),
        errors,
    })
}
