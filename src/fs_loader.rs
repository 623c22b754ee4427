//! The filesystem side of `SourceLoader`: reads files under the project directory (the root
//! file's directory) and refuses anything that resolves outside it, symlinks included.
//! Every file a user names is read through [`read_bounded`]: regular files only, and never
//! more than a limit, however large the file says it is.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use envc_compiler::{LoadError, SourceLoader};

/// Files named with `path(…)` are held in memory whole, at compile time and again when a
/// build renders and sends them: larger ones belong in a package or an image.
pub const MAX_PROJECT_FILE_BYTES: u64 = 256 << 20;

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

/// Splits a command-line path into the project directory and the root file's name in it.
pub fn split_root(file: &Path) -> (PathBuf, String) {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}
