//! Files beneath one directory, never outside it, whatever the tree holds.
//!
//! A tree envc writes into may hold what someone else put there: a GitOps checkout holds
//! whatever anyone with push access committed, a `render --out` directory whatever was
//! left in it. A symbolic link in such a tree (`clusters/prod/shop -> /etc`) would lead
//! a plain `std::fs` path walk out of it, onto the machine that runs envc. So every path
//! here is relative, is walked one component at a time from an open handle of the root
//! with `O_NOFOLLOW`, and a link anywhere on it is refused, not followed: a race in which
//! a component is swapped for a link between two steps meets the same refusal, as the
//! handle of each directory is what the next step opens from.
//! The root itself is resolved as usual: it is the caller's choice (`--out DIR`, or envc's
//! own scratch clone), not the tree's.

use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as fs, Mode, OFlags};
use rustix::io::Errno;

/// Why a path beneath the root could not be used.
#[derive(Debug)]
pub enum BeneathError {
    /// A component of the path is a symbolic link (or, for the last one, not a file).
    Link {
        path: String,
    },
    /// The path is not a plain relative one (empty, absolute, `.` or `..` in it).
    NotBeneath {
        path: String,
    },
    Io {
        path: String,
        error: std::io::Error,
    },
}

impl fmt::Display for BeneathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BeneathError::Link { path } => write!(
                f,
                "`{path}` is a symbolic link (or leads through one); envc never follows a link in a directory it writes, as it could lead out of it: replace the link with a plain directory or file"
            ),
            BeneathError::NotBeneath { path } => {
                write!(f, "`{path}` is not a path inside the directory")
            }
            BeneathError::Io { path, error } => write!(f, "{path}: {error}"),
        }
    }
}

impl std::error::Error for BeneathError {}

/// An open directory; every path given to it resolves beneath it.
pub struct Beneath {
    root: OwnedFd,
    shown: PathBuf,
}

impl Beneath {
    /// Opens `root`, making it (and its parents) first when `create`.
    pub fn open(root: &Path, create: bool) -> Result<Beneath, BeneathError> {
        if create {
            std::fs::create_dir_all(root).map_err(|error| BeneathError::Io {
                path: root.display().to_string(),
                error,
            })?;
        }
        let fd = fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BeneathError::Io {
            path: root.display().to_string(),
            error: e.into(),
        })?;
        Ok(Beneath {
            root: fd,
            shown: root.to_path_buf(),
        })
    }

    /// The file's bytes, `None` when there is no such file.
    pub fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(None);
        };
        match fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => {
                if !fs::fstat(&fd)
                    .map(|st| fs::FileType::from_raw_mode(st.st_mode).is_file())
                    .unwrap_or(false)
                {
                    return Err(BeneathError::Link { path: rel.into() });
                }
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes)
                    .map_err(|e| self.io(rel, e))?;
                Ok(Some(bytes))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.errno(rel, e)),
        }
    }

    /// Writes the file whole or not at all (a temporary file beside it, synced, renamed
    /// over it), making its directories. A link at its own name is replaced, not followed.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), BeneathError> {
        let Some((dir, name)) = self.parent(rel, true)? else {
            return Err(BeneathError::NotBeneath { path: rel.into() });
        };
        let (tmp_name, fd) = create_temporary(&dir, name).map_err(|e| self.errno(rel, e))?;
        let written = (|| {
            let mut file = std::fs::File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()
        })();
        let renamed = written.map_err(|e| self.io(rel, e)).and_then(|()| {
            fs::renameat(&dir, tmp_name.as_str(), &dir, name).map_err(|e| self.errno(rel, e))
        });
        if renamed.is_err() {
            let _ = fs::unlinkat(&dir, tmp_name.as_str(), fs::AtFlags::empty());
        }
        renamed
    }

    /// Removes the file (or a link at that name, never what it points at); `false` when
    /// there was none.
    pub fn remove(&self, rel: &str) -> Result<bool, BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(false);
        };
        match fs::unlinkat(&dir, name, fs::AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(self.errno(rel, e)),
        }
    }

    /// Removes the directory `rel` when it is empty; anything else leaves it.
    pub fn remove_empty_dir(&self, rel: &str) {
        if let Ok(Some((dir, name))) = self.parent(rel, false) {
            let _ = fs::unlinkat(&dir, name, fs::AtFlags::REMOVEDIR);
        }
    }

    /// The open directory that holds `rel`'s last component, and that component; `None`
    /// when a directory on the way does not exist (and `create` is off).
    fn parent<'a>(
        &self,
        rel: &'a str,
        create: bool,
    ) -> Result<Option<(OwnedFd, &'a str)>, BeneathError> {
        let parts: Vec<&str> = rel.split('/').collect();
        if rel.is_empty()
            || rel.starts_with('/')
            || parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
        {
            return Err(BeneathError::NotBeneath { path: rel.into() });
        }
        let (last, dirs) = parts.split_last().unwrap_or((&"", &[]));
        let mut dir = fs::openat(
            &self.root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.errno(rel, e))?;
        for (i, part) in dirs.iter().enumerate() {
            let shown = parts[..=i].join("/");
            let open = |d: &OwnedFd| {
                fs::openat(
                    d,
                    *part,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            };
            dir = match open(&dir) {
                Ok(next) => next,
                Err(Errno::NOENT) if create => {
                    // As `create_dir_all` would: the umask decides.
                    match fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.errno(&shown, e)),
                    }
                    open(&dir).map_err(|e| self.errno(&shown, e))?
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(self.errno(&shown, e)),
            };
        }
        Ok(Some((dir, last)))
    }

    fn errno(&self, rel: &str, e: Errno) -> BeneathError {
        match e {
            // O_NOFOLLOW on a link, or O_DIRECTORY on a link's name.
            Errno::LOOP | Errno::NOTDIR => BeneathError::Link { path: rel.into() },
            e => self.io(rel, e.into()),
        }
    }

    fn io(&self, rel: &str, error: std::io::Error) -> BeneathError {
        BeneathError::Io {
            path: self.shown.join(rel).display().to_string(),
            error,
        }
    }
}

/// A new file beside `name` in `dir`, under a name nobody else holds.
fn create_temporary(dir: &OwnedFd, name: &str) -> Result<(String, OwnedFd), Errno> {
    for attempt in 0u32.. {
        let mut random = [0u8; 8];
        let _ = getrandom::fill(&mut random);
        let tmp = format!(
            ".{name}.{}{attempt}.tmp",
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        match fs::openat(
            dir.as_fd(),
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            // Objects are not secrets (a manifest refuses one): the umask decides, as for
            // any file a program creates (0644 under the usual 0022), and the rename keeps it.
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(Errno::EXIST) if attempt < 16 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EXIST)
}

#[cfg(test)]
pub mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    /// A tree and, beside it, a directory outside that holds `victim.yaml` (`precious`).
    pub fn tree_and_outside() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim.yaml"), "precious\n").unwrap();
        (d, tree, outside)
    }

    #[test]
    fn writes_reads_and_removes_inside() {
        let (_d, tree, _) = tree_and_outside();
        let b = Beneath::open(&tree, false).unwrap();
        assert_eq!(b.read("a/b.yaml").unwrap(), None);
        b.write("a/b.yaml", b"x: 1\n").unwrap();
        assert_eq!(std::fs::read(tree.join("a/b.yaml")).unwrap(), b"x: 1\n");
        assert_eq!(b.read("a/b.yaml").unwrap().unwrap(), b"x: 1\n");
        b.write("a/b.yaml", b"x: 2\n").unwrap();
        assert_eq!(b.read("a/b.yaml").unwrap().unwrap(), b"x: 2\n");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(tree.join("a")).unwrap().count(), 1);
        assert!(b.remove("a/b.yaml").unwrap());
        assert!(!b.remove("a/b.yaml").unwrap());
        b.remove_empty_dir("a");
        assert!(!tree.join("a").exists());
    }

    /// This process's umask, as the kernel reports it (reading it with `umask(2)` would
    /// change it for every test running beside this one).
    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
    }

    #[test]
    fn files_and_directories_get_the_modes_the_umask_gives() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, tree, _) = tree_and_outside();
        let b = Beneath::open(&tree, false).unwrap();
        b.write("shop/configmap-web.yaml", b"x: 1\n").unwrap();
        let mode = |p: &str| {
            std::fs::metadata(tree.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        let mask = umask();
        // Not a secret: readable as any file a program makes (0644 under umask 0022).
        assert_eq!(mode("shop/configmap-web.yaml"), 0o666 & !mask);
        assert_eq!(mode("shop"), 0o777 & !mask);
        // Rewritten (a new file renamed over it): the same.
        b.write("shop/configmap-web.yaml", b"x: 2\n").unwrap();
        assert_eq!(mode("shop/configmap-web.yaml"), 0o666 & !mask);
    }

    #[test]
    fn a_linked_directory_is_refused_for_every_operation() {
        let (_d, tree, outside) = tree_and_outside();
        symlink(&outside, tree.join("shop")).unwrap();
        let b = Beneath::open(&tree, false).unwrap();
        for result in [
            b.read("shop/victim.yaml").map(|_| ()),
            b.write("shop/victim.yaml", b"evil\n"),
            b.write("shop/new.yaml", b"evil\n"),
            b.remove("shop/victim.yaml").map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(BeneathError::Link { ref path }) if path == "shop"),
                "{result:?}"
            );
        }
        b.remove_empty_dir("shop/x");
        assert_eq!(
            std::fs::read(outside.join("victim.yaml")).unwrap(),
            b"precious\n"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn a_linked_file_is_not_read_through_and_is_replaced_not_followed() {
        let (_d, tree, outside) = tree_and_outside();
        symlink(outside.join("victim.yaml"), tree.join("x.yaml")).unwrap();
        let b = Beneath::open(&tree, false).unwrap();
        assert!(matches!(b.read("x.yaml"), Err(BeneathError::Link { .. })));
        b.write("x.yaml", b"ours\n").unwrap();
        assert_eq!(std::fs::read(tree.join("x.yaml")).unwrap(), b"ours\n");
        assert!(!tree.join("x.yaml").is_symlink());
        assert_eq!(
            std::fs::read(outside.join("victim.yaml")).unwrap(),
            b"precious\n"
        );
        // Removing a link removes the link alone.
        symlink(outside.join("victim.yaml"), tree.join("y.yaml")).unwrap();
        assert!(b.remove("y.yaml").unwrap());
        assert!(outside.join("victim.yaml").exists());
    }

    #[test]
    fn paths_that_are_not_plainly_relative_are_refused() {
        let (_d, tree, _) = tree_and_outside();
        let b = Beneath::open(&tree, false).unwrap();
        for p in [
            "",
            "/etc/passwd",
            "../outside/victim.yaml",
            "a//b",
            "./a",
            "a/..",
        ] {
            assert!(
                matches!(b.write(p, b"x"), Err(BeneathError::NotBeneath { .. })),
                "{p}"
            );
        }
    }
}
