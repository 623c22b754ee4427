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
}
