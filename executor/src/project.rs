//! The project on disk: the filesystem side of `SourceLoader`, which reads files under the
//! project directory (the root file's directory) and refuses anything that resolves
//! outside it, symlinks included. The compiler and the executor read the project only
//! through it (templates and `source` files included), and every file through
//! `envc_lockfiles::file::read_bounded`: regular files only, never more than a limit.

use std::path::{Path, PathBuf};

use envc_compiler::{LoadError, SourceLoader};
use envc_lockfiles::file::{read_bounded, ReadError};

/// Files named with `path(…)` are held in memory whole, at compile time and again when a
/// build renders and sends them: larger ones belong in a package or an image.
pub const MAX_PROJECT_FILE_BYTES: u64 = 256 << 20;

pub struct FsLoader {
    root: PathBuf,
    canonical_root: Option<PathBuf>,
}

impl FsLoader {
    pub fn new(root: &Path) -> FsLoader {
        FsLoader {
            root: root.to_path_buf(),
            canonical_root: root.canonicalize().ok(),
        }
    }
}

impl SourceLoader for FsLoader {
    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError> {
        self.read_at_most(path, MAX_PROJECT_FILE_BYTES)
    }

    fn read_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, LoadError> {
        let full = self.root.join(path);
        let canonical = full.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LoadError::NotFound,
            _ => LoadError::Other(e.to_string()),
        })?;
        if let Some(root) = &self.canonical_root {
            if !canonical.starts_with(root) {
                return Err(LoadError::OutsideProject);
            }
        }
        read_bounded(&canonical, limit).map_err(|e| match e {
            ReadError::NotFound => LoadError::NotFound,
            e => LoadError::Other(e.to_string()),
        })
    }
}

/// The project directory of an env file: the directory it is in.
pub fn project_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Splits a command-line path into the project directory and the root file's name in it.
pub fn split_root(file: &Path) -> (PathBuf, String) {
    let dir = project_dir(file);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}
