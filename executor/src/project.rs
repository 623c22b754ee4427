//! The project on disk: the filesystem side of `SourceLoader`, which finds the project root
//! (the nearest directory at or above the root file's holding an `envc.toml`, else the git
//! work tree, else the root file's directory), reads files named relative to the root
//! file's directory, and refuses anything that resolves outside the project root, symlinks
//! included. The compiler and the executor read the project only
//! through it (templates and `source` files included), and every file through
//! `envc_lockfiles::file::read_bounded`: regular files only, never more than a limit.

use std::path::{Path, PathBuf};

use envc_compiler::{LoadError, ProjectRoot, RootFoundBy, SourceLoader};
use envc_lockfiles::file::{read_bounded, ReadError};

/// Files named with `path(…)` are held in memory whole, at compile time and again when a
/// build renders and sends them: larger ones belong in a package or an image.
pub const MAX_PROJECT_FILE_BYTES: u64 = 256 << 20;

pub struct FsLoader {
    /// The root file's directory: paths are relative to it.
    root: PathBuf,
    /// The project root, canonical: nothing is read outside it.
    canonical_root: Option<PathBuf>,
    project: ProjectRoot,
}

impl FsLoader {
    /// The loader of the project whose root file is in directory `root`.
    pub fn new(root: &Path) -> FsLoader {
        let (canonical_root, project) = match find_project_root(root) {
            Some((at, project)) => (Some(at), project),
            None => (None, ProjectRoot::default()),
        };
        FsLoader {
            root: root.to_path_buf(),
            canonical_root,
            project,
        }
    }
}

impl FsLoader {
    /// The project root on disk, resolved (`None` when the root file's directory cannot be).
    pub fn canonical_root(&self) -> Option<&Path> {
        self.canonical_root.as_deref()
    }
}

/// The project root of the root file's directory `dir` (canonical) and where `dir` is in
/// it; `None` when `dir` cannot be resolved (nothing of it can be read either).
fn find_project_root(dir: &Path) -> Option<(PathBuf, ProjectRoot)> {
    let dir = dir.canonicalize().ok()?;
    let marked = |name: &str| {
        dir.ancestors()
            .find(|d| std::fs::symlink_metadata(d.join(name)).is_ok())
    };
    let (at, found_by) = match (marked(crate::config::FILE_NAME), marked(".git")) {
        (Some(at), _) => (at, RootFoundBy::EnvcToml),
        (None, Some(at)) => (at, RootFoundBy::Git),
        (None, None) => (dir.as_path(), RootFoundBy::RootFile),
    };
    let base = dir
        .strip_prefix(at)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let project = ProjectRoot {
        base,
        shown: at.display().to_string(),
        found_by,
    };
    Some((at.to_path_buf(), project))
}

impl SourceLoader for FsLoader {
    fn project_root(&self) -> ProjectRoot {
        self.project.clone()
    }

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
