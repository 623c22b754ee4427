//! Files held by a live process: an exclusive `flock` that the kernel drops when its holder
//! ends, however it ends (SIGKILL included). What a killed run leaves behind (its reserve
//! in the store's `tmp/`, its scratch directory for ssh sockets) is found by the next run
//! as files nobody holds, and removed; what a running process holds is left alone.

use std::fs::File;
use std::path::Path;

use rustix::fs::{flock, FlockOperation};

/// A file this process holds, for as long as the value lives.
#[derive(Debug)]
pub struct Held(File);

impl Held {
    /// Creates (or opens) `path` and holds it.
    pub fn take(path: &Path) -> std::io::Result<Held> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        Ok(Held(file))
    }

    pub fn file(&self) -> &File {
        &self.0
    }
}

/// A directory of this process's own beside others' (`PREFIX` and a random tail), with a
/// `.held` file it holds while the value lives, and removed with everything in it when
/// dropped. Making one first removes the directories of the same prefix that a process
/// killed before it could (SIGKILL) left behind.
#[derive(Debug)]
pub struct HeldDir {
    // Dropped first: the directory goes while it is still held.
    dir: tempfile::TempDir,
    _held: Held,
}

const HELD: &str = ".held";

impl HeldDir {
    /// Makes one in `parent`, after sweeping `parent`'s abandoned ones of this `prefix`.
    pub fn new(parent: &Path, prefix: &str) -> std::io::Result<HeldDir> {
        sweep(parent, prefix);
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
        let held = Held::take(&dir.path().join(HELD))?;
        Ok(HeldDir { dir, _held: held })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the directories `prefix…` in `parent` that their process left: only this user's,
/// only real directories (a link named like one is not followed), only those with a
/// `.held` nobody holds.
fn sweep(parent: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail and has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(prefix)
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && abandoned(&path.join(HELD)) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Whether `path` exists and no live process holds it: its holder ended without cleaning
/// up. Asking takes the lock for a moment, so a holder that starts at that very moment
/// fails to take it (and makes a new file) rather than share it.
pub fn abandoned(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_held_file_is_not_abandoned_until_its_holder_lets_go() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("x");
        assert!(!abandoned(&path), "no file: nothing to remove");
        let held = Held::take(&path).unwrap();
        assert!(!abandoned(&path));
        // A second holder in the same process is refused too (flock is per open file).
        assert!(Held::take(&path).is_err());
        drop(held);
        assert!(abandoned(&path));
    }

    #[test]
    fn a_killed_runs_scratch_goes_and_nothing_else_does() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path();
        // What a SIGKILLed run left: its directory, its `.held` that nobody holds now.
        let dead = root.join("envc-ssh-dead01");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(HELD), "").unwrap();
        std::fs::write(dead.join("socket-leftover"), "").unwrap();
        // Kept masters' directory (no `.held`), a link named like a scratch, another file.
        std::fs::create_dir(root.join("envc-ssh-0")).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join(HELD), "").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.join("envc-ssh-link")).unwrap();

        let live = HeldDir::new(root, "envc-ssh-").unwrap();
        assert!(!dead.exists());
        assert!(live.path().exists());
        assert!(root.join("envc-ssh-0").exists());
        assert!(elsewhere.path().join(HELD).exists());
        // A second run leaves the first one's, which is held.
        let second = HeldDir::new(root, "envc-ssh-").unwrap();
        assert!(live.path().exists() && second.path().exists());
        let gone = live.path().to_path_buf();
        drop(live);
        assert!(!gone.exists(), "a run that ends removes its own");
    }
}
