//! SSH connections kept open between runs, as Ansible does with `ControlPersist=60s`: a run
//! leaves each master behind for a while, and the next run to the same target reuses it
//! instead of a new TCP connection, key exchange and login (most of a small run's time).
//!
//! A kept master is found by a name that hashes everything that decides what it is connected
//! to: the network namespace it was started in, user, address, port, identity, the ssh
//! configuration's text and the host key it checked. So a master is reused only by a run
//! that expects exactly that host key (a first contact always connects anew), a changed ssh
//! configuration never gets an old connection, and a host recreated at the same address with
//! a new key gets a new one. Before reuse, a master must answer a command within the connect
//! timeout (5 s at least); one whose peer went silent is stopped and replaced.
//!
//! Masters live in a private directory (mode 0700, owned by this user): a control socket
//! lets whoever can open it run commands on the host.

use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Hex digits of a kept master's socket name (a new one's, `new-` and 16, is shorter).
const NAME_LEN: usize = 32;
/// The longest directory a socket fits in: a unix socket path has at most 107 bytes, and ssh
/// binds it with a 17-character random suffix before renaming it.
const MAX_DIR_LEN: usize = 107 - 1 - NAME_LEN - 17;

/// Where kept masters live and how long an idle one waits for the next run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persist {
    /// Private directory of the control sockets.
    pub dir: PathBuf,
    /// How long a master with no command running stays open.
    pub idle: Duration,
}

impl Persist {
    /// Masters kept for `idle` in this user's directory for them: `$XDG_RUNTIME_DIR/envc-ssh`,
    /// else (unset, or not this user's: a `sudo` that kept the variable) `envc-ssh-UID` in
    /// the system's temporary directory. `None` when `idle` is zero, or when neither can be
    /// made private or is short enough for a socket path (then connections end with the
    /// run, as they would with `--ssh-persist 0`).
    pub fn in_user_dir(idle: Duration) -> Option<Persist> {
        // SAFETY: geteuid cannot fail and has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
        Persist::in_first_private(idle, uid, runtime, &std::env::temp_dir())
    }

    fn in_first_private(
        idle: Duration,
        uid: u32,
        runtime: Option<PathBuf>,
        temp: &Path,
    ) -> Option<Persist> {
        if idle.is_zero() {
            return None;
        }
        let runtime = runtime
            // Only a runtime directory of this user's: never make one in someone else's.
            .filter(|run| run.is_absolute() && std::fs::metadata(run).is_ok_and(|m| m.uid() == uid))
            .map(|run| run.join("envc-ssh"));
        let temp = temp.join(format!("envc-ssh-{uid}"));
        let dir = runtime
            .into_iter()
            .chain([temp])
            .find(|dir| dir.as_os_str().len() <= MAX_DIR_LEN && private_dir(dir, uid))?;
        Some(Persist { dir, idle })
    }

    /// The control socket of the master to `target` that checked `host_key`, or `None` when
    /// this thread's network namespace cannot be read.
    pub fn socket(&self, target: &Target<'_>, host_key: &str) -> Option<PathBuf> {
        let netns = std::fs::read_link("/proc/thread-self/ns/net").ok()?;
        let mut h = blake3::Hasher::new();
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(netns.as_os_str().as_encoded_bytes());
        field(target.user.as_bytes());
        field(target.address.as_bytes());
        field(&target.port.to_le_bytes());
        field(
            target
                .identity
                .map(|p| p.as_os_str().as_encoded_bytes())
                .unwrap_or(b""),
        );
        for file in target.config_files {
            field(file.as_os_str().as_encoded_bytes());
            field(&std::fs::read(file).unwrap_or_default());
        }
        field(host_key.trim().as_bytes());
        let name = h.finalize().to_hex();
        Some(self.dir.join(&name.as_str()[..NAME_LEN]))
    }

    /// A fresh name for a master being started: it is renamed to [`Persist::socket`] once
    /// logged in, so no run ever finds a master that has not checked its host key.
    pub fn starting_socket(&self) -> PathBuf {
        self.dir.join(format!("new-{}", crate::names::unique_tag()))
    }

    /// Removes the sockets of masters that have ended, and returns how many. A master that
    /// ends unlinks the name ssh started it under, not the name envc renamed it to, so each
    /// leaves its socket behind: without this the directory would grow by one for every
    /// host key ever met. ssh makes a socket's name only once it listens, so a socket that
    /// refuses a connection has no master; one whose master answers is left alone.
    pub fn sweep(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let socket = entry.file_type().is_ok_and(|t| t.is_socket());
            let dead = || {
                std::os::unix::net::UnixStream::connect(&path)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
            };
            if socket && dead() && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// What a master is connected to, besides the host key.
pub struct Target<'a> {
    pub user: &'a str,
    pub address: &'a str,
    pub port: u16,
    pub identity: Option<&'a Path>,
    /// The ssh configuration files the connection reads (their text is part of the name).
    pub config_files: &'a [PathBuf],
}

/// Makes `dir` if needed; true when it is a directory (not a symlink) of `uid` that no one
/// else can enter.
fn private_dir(dir: &Path, uid: u32) -> bool {
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    match std::fs::symlink_metadata(dir) {
        Ok(m) => m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Masters kept in `dir` for a minute.
    fn kept_in(dir: &Path) -> Persist {
        Persist {
            dir: dir.to_path_buf(),
            idle: Duration::from_secs(60),
        }
    }

    fn target<'a>(address: &'a str, files: &'a [PathBuf]) -> Target<'a> {
        Target {
            user: "root",
            address,
            port: 22,
            identity: None,
            config_files: files,
        }
    }

    #[test]
    fn the_socket_name_changes_with_what_the_master_is_connected_to() {
        let dir = tempfile::tempdir().unwrap();
        let p = kept_in(dir.path());
        let config = dir.path().join("ssh_config");
        std::fs::write(&config, "User root\n").unwrap();
        let files = [config.clone()];
        let a = p
            .socket(&target("10.0.0.1", &files), "ssh-ed25519 AAAA")
            .unwrap();
        assert_eq!(
            a,
            p.socket(&target("10.0.0.1", &files), "ssh-ed25519 AAAA")
                .unwrap()
        );
        assert!(a.starts_with(dir.path()));
        assert_ne!(
            a,
            p.socket(&target("10.0.0.2", &files), "ssh-ed25519 AAAA")
                .unwrap()
        );
        assert_ne!(
            a,
            p.socket(&target("10.0.0.1", &files), "ssh-ed25519 BBBB")
                .unwrap()
        );
        std::fs::write(&config, "User root\nProxyJump bastion\n").unwrap();
        assert_ne!(
            a,
            p.socket(&target("10.0.0.1", &files), "ssh-ed25519 AAAA")
                .unwrap()
        );
        assert_ne!(p.starting_socket(), p.starting_socket());
    }

    #[test]
    fn sockets_of_ended_masters_are_swept_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = kept_in(dir.path());
        let live = dir.path().join("a".repeat(NAME_LEN));
        let _listening = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let ended = dir.path().join("b".repeat(NAME_LEN));
        drop(std::os::unix::net::UnixListener::bind(&ended).unwrap());
        let other = dir.path().join("notes");
        std::fs::write(&other, "not a socket").unwrap();
        assert_eq!(p.sweep(), 1);
        assert!(live.exists() && other.exists() && !ended.exists());
        assert_eq!(p.sweep(), 0);
    }

    #[test]
    fn a_directory_others_can_enter_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: as above.
        let uid = unsafe { libc::geteuid() };
        let kept = dir.path().join("kept");
        assert!(private_dir(&kept, uid));
        assert_eq!(
            std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!private_dir(&kept, uid));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(!private_dir(&link, uid));
        assert!(Persist::in_user_dir(Duration::ZERO).is_none());
    }

    #[test]
    fn a_runtime_directory_of_another_user_is_passed_over() {
        let root = tempfile::tempdir().unwrap();
        // SAFETY: as above.
        let uid = unsafe { libc::geteuid() };
        let idle = Duration::from_secs(60);
        let (run, temp) = (root.path().join("run"), root.path().join("tmp"));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(&temp).unwrap();
        let mine = Persist::in_first_private(idle, uid, Some(run.clone()), &temp).unwrap();
        assert_eq!(mine.dir, run.join("envc-ssh"));
        // Someone else's runtime directory (a `sudo` that kept the variable): nothing is made
        // in it, the temporary directory serves. Only root can make such a directory here.
        if uid == 0 {
            let theirs = root.path().join("theirs");
            std::fs::create_dir_all(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
            let p = Persist::in_first_private(idle, uid, Some(theirs.clone()), &temp).unwrap();
            assert_eq!(p.dir, temp.join("envc-ssh-0"));
            assert!(!theirs.join("envc-ssh").exists());
        }
        let unset = Persist::in_first_private(idle, uid, None, &temp).unwrap();
        assert_eq!(unset.dir, temp.join(format!("envc-ssh-{uid}")));
        // A temporary directory too long for a socket path keeps nothing, and makes nothing.
        let long = root.path().join("t".repeat(MAX_DIR_LEN));
        std::fs::create_dir_all(&long).unwrap();
        assert_eq!(Persist::in_first_private(idle, uid, None, &long), None);
        assert_eq!(std::fs::read_dir(&long).unwrap().count(), 0);
    }
}
