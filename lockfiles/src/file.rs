//! The lockfile on disk: where it lives (`prod.env` → `prod.lock`, beside it), reading it,
//! and writing it so that a failed or interrupted lock leaves the old file as it was.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::model::Lockfile;
use crate::text::LockError;

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

/// A regular file of at most [`MAX_BYTES`], as UTF-8 text. Checked to be a regular file
/// before it is opened, since opening a FIFO blocks.
fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read as _};
    if !std::fs::metadata(path)?.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("it is too large: a lockfile has at most {MAX_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "it is not UTF-8 text"))
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
