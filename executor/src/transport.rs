//! Transports: how commands reach a target. `Local` runs them on the machine envc runs on;
//! `Ssh` runs them over one multiplexed OpenSSH connection per host (the `openssh` crate,
//! process-mux), with connect and command timeouts and host keys checked against the key
//! recorded in the environment's state.
//!
//! Commands are argv vectors, never shell text built from values: each argument is quoted
//! for the remote shell here, in one place, and bulk data (file contents) goes over stdin.

use std::path::PathBuf;
use std::time::Duration;

/// How to reach one `host` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    /// The host node's name, for messages.
    pub name: String,
    /// A DNS name or IP address, or `@local` for the machine envc runs on.
    pub address: String,
    pub port: u16,
    pub user: String,
}

impl HostSpec {
    pub fn is_local(&self) -> bool {
        self.address == LOCAL_ADDRESS
    }
}

/// The address that selects the local transport (pyinfra's spelling).
pub const LOCAL_ADDRESS: &str = "@local";

#[derive(Clone, Debug)]
pub struct SshOptions {
    /// An ssh_config file (`--ssh-config` / `$ENVC_SSH_CONFIG`): identity files, jump hosts.
    /// `None` uses the user's usual configuration.
    pub config_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    /// Bounds every single command; a dead host is also noticed by keepalives.
    pub command_timeout: Duration,
    /// Private scratch directory (control sockets, known_hosts files); exists.
    pub work_dir: PathBuf,
}

/// A target's identity as presented when connecting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostKey {
    /// `ssh-ed25519 AAAA…` (no host name), or `local <machine-id>` for the local transport.
    pub key: String,
    /// `SHA256:…` as `ssh-keygen -l` prints it, or `machine-id:<id>` for the local transport.
    pub fingerprint: String,
}

#[derive(Debug)]
pub struct CommandOutput {
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}
