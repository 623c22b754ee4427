//! The project on disk: the filesystem side of `SourceLoader`, which reads files under the
//! project directory (the root file's directory) and refuses anything that resolves
//! outside it, symlinks included. The compiler and the executor read the project only
//! through it (templates and `source` files included).

use std::path::{Path, PathBuf};

use envc_compiler::{LoadError, SourceLoader};

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
        if canonical.is_dir() {
            return Err(LoadError::Other("it is a directory".into()));
        }
        std::fs::read(&canonical).map_err(|e| LoadError::Other(e.to_string()))
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
