//! Transports: how commands reach a target. `Local` runs them on the machine envc runs on;
//! `Ssh` runs them over one multiplexed OpenSSH connection per host (the `openssh` crate,
//! native-mux: a command is a request on the master's control socket, not an ssh process
//! of its own), with connect and command timeouts and host keys checked against the key
//! recorded in the environment's state.
//!
//! Commands are argv vectors, never shell text built from values: each argument is quoted
//! for the remote shell here, in one place, and bulk data (file contents) goes over stdin.

use std::path::PathBuf;
use std::time::Duration;

use crate::kept::{Persist, Target};

/// How to reach one `host` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    /// The host node's name, for messages.
    pub name: String,
    /// A DNS name or IP address, or `@local` for the machine envc runs on.
    pub address: String,
    pub port: u16,
    pub user: String,
    /// The private key to log in with, for machines envc made itself (its VMs trust one
    /// key of the store's); `None` uses the ssh configuration's.
    pub identity: Option<PathBuf>,
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
    /// Masters kept open after the run for the next one to reuse; `None` ends them with
    /// envc.
    pub persist: Option<Persist>,
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

/// The `HostKeyAlias` under which envc's own known_hosts file records a target's key: one entry,
/// whatever the address, port or the user's ssh configuration call the host.
const KNOWN_HOSTS_ALIAS: &str = "envc-target";
/// Keepalive interval of the master connection; with `ServerAliveCountMax 2` a host that
/// stopped answering is noticed after about 15 s (three unanswered intervals).
const SERVER_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// The least time a kept master is given to answer before it is replaced: a live one answers
/// in milliseconds, but a loaded machine must not make envc drop good connections.
const REUSE_CHECK_MIN: Duration = Duration::from_secs(5);
/// A unix socket path has at most 107 bytes; the control socket is `DIR/master`, and ssh
/// binds it with a 17-character random suffix before renaming it.
const MAX_WORK_DIR_LEN: usize = 107 - "/master".len() - 17;

/// Why a command could not be run on a target. Every message names the host and says what to
/// do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The host could not be reached, or the connection to it was lost.
    Unreachable { host: String, detail: String },
    /// The host presented a different key than the one recorded for it.
    HostKeyChanged {
        host: String,
        recorded_fingerprint: String,
        presented_fingerprint: String,
    },
    /// A command did not finish within `SshOptions::command_timeout`.
    Timeout {
        host: String,
        after: Duration,
        /// The command's program (the first element of argv), for the message.
        command: String,
    },
    /// A local failure: files in the work directory, spawning ssh, an unusable argument.
    Io { host: String, detail: String },
}

impl TransportError {
    /// The host node's name the error is about.
    pub fn host(&self) -> &str {
        match self {
            TransportError::Unreachable { host, .. }
            | TransportError::HostKeyChanged { host, .. }
            | TransportError::Timeout { host, .. }
            | TransportError::Io { host, .. } => host,
        }
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Unreachable { host, detail } => write!(
                f,
                "cannot reach host `{host}`: {detail}\n  hint: check the host's address and \
                 port, that it is up and sshd runs on it, and that `ssh` with the same \
                 configuration logs in without a password"
            ),
            TransportError::HostKeyChanged {
                host,
                recorded_fingerprint,
                presented_fingerprint,
            } => write!(
                f,
                "host `{host}` presented host key {presented_fingerprint}, but the key recorded \
                 for it is {recorded_fingerprint}\n  hint: either the machine was reinstalled or \
                 recreated, or someone is intercepting the connection; nothing was run on it. \
                 If you expect the change, run `envc build --trust-host-key {host}`"
            ),
            TransportError::Timeout {
                host,
                after,
                command,
            } => write!(
                f,
                "`{command}` on host `{host}` did not finish within {} s and was stopped\n  \
                 hint: check whether the host is overloaded or waiting on something (a lock, \
                 the network), or raise the command timeout",
                after.as_secs_f64()
            ),
            TransportError::Io { host, detail } => write!(f, "host `{host}`: {detail}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// How commands reach one target.
pub enum Transport {
    Local(LocalTransport),
    Ssh(SshTransport),
}

/// Commands run as child processes of envc, without a shell.
pub struct LocalTransport {
    host: String,
    command_timeout: Duration,
}

/// Commands run over one multiplexed OpenSSH master connection.
pub struct SshTransport {
    host: String,
    command_timeout: Duration,
    // Field order is drop order: the session, then the master process, then its directory.
    session: openssh::Session,
    master: Master,
    /// The master's control socket.
    ctl: PathBuf,
    /// Holds the generated ssh_config and the known_hosts file (and the control socket of a
    /// master that is not kept).
    dir: tempfile::TempDir,
    /// `(user, address, port)` it logged in as, for programs that ssh through its master.
    login: (String, String, u16),
}

/// How a local `git` reaches a repository on a target: the URL and, over SSH, the
/// `GIT_SSH_COMMAND` that goes through the target's connection (its checked host key,
/// its identity, its jump hosts).
#[derive(Clone, Debug)]
pub struct GitRemote {
    pub url: String,
    pub ssh_command: Option<String>,
}

/// The `ssh -M` process.
enum Master {
    /// A child of envc that dies with it (see [`spawn_tied`]).
    Tied(std::process::Child),
    /// Detached from envc, ending after [`Persist::idle`] without a command.
    Kept,
}

impl Drop for Master {
    fn drop(&mut self) {
        if let Master::Tied(child) = self {
            // SIGKILL, so the wait is short; after `Session::close` it has exited already.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The process that starts a master: the master itself when tied, else ssh's foreground
/// half, which exits once the detached master is logged in. Killed if still running when
/// dropped (a login that did not complete in time).
struct Starting(Option<std::process::Child>);

impl Starting {
    fn child(&mut self) -> &mut std::process::Child {
        self.0
            .as_mut()
            .expect("a starting master is only taken once")
    }

    /// The tied master, which lives on as the connection's.
    fn disarm(mut self) -> std::process::Child {
        self.0.take().expect("a starting master is only taken once")
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Spawns `cmd` so that the kernel kills it when envc ends, however envc ends (SIGKILL
/// included): a ControlMaster left behind would hold a connection to the host forever.
///
/// `openssh::SessionBuilder` starts masters with `-f` and `ControlPersist=yes`, which detach
/// them from envc; so envc starts its masters itself, in the foreground, with
/// `PR_SET_PDEATHSIG`. That signal fires when the *thread* that forked the child ends, which
/// is why [`Transport::connect`] must run on a thread that outlives the connection (a tokio
/// worker or `block_on` thread, never `spawn_blocking`'s). The fork happens on the calling
/// thread because threads may differ in network namespace (the tests' `setns`), which the
/// child inherits.
fn spawn_tied(mut cmd: std::process::Command) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid), allocating nothing on success.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // envc died before the prctl: nothing would send the signal now.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

impl Transport {
    /// Connects to `host`. `known` is the host key recorded for it: the host must present
    /// exactly that key (else [`TransportError::HostKeyChanged`]). `None` is a first contact:
    /// whatever key the host presents is accepted. Returns the key the connected host has.
    ///
    /// Host keys are checked against a known_hosts file of envc's own in `opts.work_dir`,
    /// never the user's or the system's.
    ///
    /// The connection's ssh process is killed when the thread that started it ends (see
    /// [`spawn_tied`]): poll this on a thread that outlives the connection.
    pub async fn connect(
        host: &HostSpec,
        known: Option<&HostKey>,
        opts: &SshOptions,
    ) -> Result<(Transport, HostKey), TransportError> {
        if host.is_local() {
            let key = local_host_key(&host.name)?;
            let t = LocalTransport {
                host: host.name.clone(),
                command_timeout: opts.command_timeout,
            };
            return Ok((Transport::Local(t), key));
        }
        let (t, key) = SshTransport::connect(host, known, opts).await?;
        Ok((Transport::Ssh(t), key))
    }

    /// The host node's name.
    pub fn host(&self) -> &str {
        match self {
            Transport::Local(t) => &t.host,
            Transport::Ssh(t) => &t.host,
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Transport::Local(_))
    }

    /// How `git` on this machine reaches the repository at `repo` on the target. Over SSH
    /// it goes through this connection's master (`-S`, never a master of its own), so the
    /// host key it meets is the one envc checked.
    pub fn git_remote(&self, repo: &str) -> GitRemote {
        match self {
            Transport::Local(_) => GitRemote {
                url: repo.to_string(),
                ssh_command: None,
            },
            Transport::Ssh(t) => {
                let (user, addr, port) = &t.login;
                let command = [
                    "ssh".to_string(),
                    "-F".into(),
                    shell_quote(&t.dir.path().join("ssh_config").to_string_lossy()),
                    "-S".into(),
                    shell_quote(&t.ctl.to_string_lossy()),
                    "-o".into(),
                    "ControlMaster=no".into(),
                    "-o".into(),
                    "BatchMode=yes".into(),
                    "-o".into(),
                    "StrictHostKeyChecking=yes".into(),
                    "-p".into(),
                    port.to_string(),
                    "-l".into(),
                    shell_quote(user),
                ]
                .join(" ");
                // scp-like `HOST:PATH`: the path is passed as written (relative to the
                // login's home, or absolute), as a git service expects it.
                let host = if addr.contains(':') {
                    format!("[{addr}]")
                } else {
                    addr.clone()
                };
                GitRemote {
                    url: format!("{host}:{repo}"),
                    ssh_command: Some(command),
                }
            }
        }
    }

    /// Runs `argv` with `stdin` as its standard input and collects its output, within the
    /// command timeout (on timeout the local process — ssh's, for a remote command — is
    /// killed; a remote process that ignores its closed channel may linger until it ends).
    ///
    /// Over SSH each argument is quoted for the remote POSIX shell ([`shell_quote`]), so any
    /// value is passed as exactly one argument; the login shell of the remote user must be a
    /// POSIX shell (sh, dash, bash, zsh, ...).
    pub async fn run(&self, argv: &[&str], stdin: &[u8]) -> Result<CommandOutput, TransportError> {
        self.run_within(argv, stdin, None).await
    }

    /// [`Transport::run`], waiting `timeout` instead of the command timeout when given (a
    /// command with a timeout of its own, enforced on the target).
    pub async fn run_within(
        &self,
        argv: &[&str],
        stdin: &[u8],
        timeout: Option<Duration>,
    ) -> Result<CommandOutput, TransportError> {
        self.run_streamed(argv, &[Input::Bytes(stdin)], timeout)
            .await
    }

    /// [`Transport::run_within`], with standard input made of `input` in order: files are
    /// streamed from disk, never held in memory whole (a package step's `.deb`s).
    pub async fn run_streamed(
        &self,
        argv: &[&str],
        stdin: &[Input<'_>],
        timeout: Option<Duration>,
    ) -> Result<CommandOutput, TransportError> {
        let host = self.host();
        let Some(program) = argv.first() else {
            return Err(TransportError::Io {
                host: host.to_string(),
                detail: "an empty command cannot be run (this is a bug in envc)".into(),
            });
        };
        if let Some(arg) = argv.iter().find(|a| a.contains('\0')) {
            return Err(TransportError::Io {
                host: host.to_string(),
                detail: format!(
                    "the argument {arg:?} contains a NUL byte, which no command line can carry"
                ),
            });
        }
        let timeout = timeout.unwrap_or(match self {
            Transport::Local(t) => t.command_timeout,
            Transport::Ssh(t) => t.command_timeout,
        });
        let fut = async {
            match self {
                Transport::Local(t) => t.run(argv, stdin).await,
                Transport::Ssh(t) => t.run(argv, stdin).await,
            }
        };
        // Dropping `fut` on timeout drops the child, which is spawned with kill_on_drop.
        match tokio::time::timeout(timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::Timeout {
                host: host.to_string(),
                after: timeout,
                command: program.to_string(),
            }),
        }
    }

    /// Closes the connection: for SSH, stops the master unless it is kept for the next run.
    /// Errors while closing are ignored.
    pub async fn close(self) {
        if let Transport::Ssh(t) = self {
            let SshTransport {
                session,
                master,
                dir,
                ..
            } = t;
            // A resumed session does nothing when dropped: a kept master stays up.
            if let Master::Tied(_) = master {
                let _ = session.close().await;
            }
            drop(master);
            drop(dir);
        }
    }
}

/// Quotes `s` as one word for a POSIX shell: `'…'`, with each `'` written as `'\''`. Every
/// other byte (newlines, `$`, backticks, `\`, unicode) is literal inside single quotes.
pub fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// `SHA256:<base64, no padding>` of an OpenSSH public key blob, as `ssh-keygen -l` prints it.
/// `key` is `TYPE BASE64 [comment]`; `None` when it is not of that form.
pub fn fingerprint(key: &str) -> Option<String> {
    use sha2::Digest as _;
    let blob = base64_decode(key.split_whitespace().nth(1)?)?;
    let digest = sha2::Sha256::digest(&blob);
    Some(format!("SHA256:{}", base64_encode_unpadded(&digest)))
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode_unpadded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = B64.iter().position(|&b| b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (bits < 6 && acc == 0).then_some(out)
}

/// The local machine's identity: its systemd/D-Bus machine id.
fn local_host_key(host: &str) -> Result<HostKey, TransportError> {
    for path in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(text) = std::fs::read_to_string(path) {
            let id = text.trim();
            if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Ok(HostKey {
                    key: format!("local {id}"),
                    fingerprint: format!("machine-id:{id}"),
                });
            }
        }
    }
    Err(TransportError::Io {
        host: host.to_string(),
        detail: "this machine has no machine id (/etc/machine-id is missing or empty), which \
                 envc uses as its identity\n  hint: run `systemd-machine-id-setup` (or \
                 `dbus-uuidgen --ensure=/etc/machine-id`) once"
            .into(),
    })
}

impl LocalTransport {
    async fn run(
        &self,
        argv: &[&str],
        stdin: &[Input<'_>],
    ) -> Result<CommandOutput, TransportError> {
        let io = |what: &str, e: std::io::Error| TransportError::Io {
            host: self.host.clone(),
            detail: format!("{what} `{}`: {e}", argv[0]),
        };
        use std::io::ErrorKind;
        let child = tokio::process::Command::new(argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        // As a shell (and the SSH transport) reports them: 127 not found, 126 not executable.
        let mut child = match child {
            Ok(child) => child,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => {
                let status = if e.kind() == ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                return Ok(CommandOutput {
                    status: Some(status),
                    stdout: Vec::new(),
                    stderr: format!("envc: {}: {e}\n", argv[0]).into_bytes(),
                });
            }
            Err(e) => return Err(io("cannot start", e)),
        };
        let input = child.stdin.take();
        let (written, output) = tokio::join!(feed(input, stdin), child.wait_with_output());
        let output = output.map_err(|e| io("waiting for", e))?;
        written.map_err(|e| io("writing the input of", e))?;
        Ok(CommandOutput {
            status: output.status.code(),
            stdout: output.stdout,
            stderr: output.stderr,
        })
    }
}

/// A part of a command's standard input.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    Bytes(&'a [u8]),
    /// A file's content, read as it is sent.
    File(&'a std::path::Path),
}

/// Writes `parts` to a child's stdin and closes it. A child that exits without reading all
/// of its input is not an error here (its exit status tells).
async fn feed<W: tokio::io::AsyncWrite + Unpin>(
    input: Option<W>,
    parts: &[Input<'_>],
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let Some(mut input) = input else {
        return Ok(());
    };
    let result = async {
        for part in parts {
            match part {
                Input::Bytes(data) => input.write_all(data).await?,
                Input::File(path) => {
                    let mut file = tokio::fs::File::open(path).await?;
                    tokio::io::copy(&mut file, &mut input).await?;
                }
            }
        }
        input.shutdown().await
    }
    .await;
    drop(input);
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

async fn read_all<R: tokio::io::AsyncRead + Unpin>(r: Option<R>) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    if let Some(mut r) = r {
        r.read_to_end(&mut buf).await?;
    }
    Ok(buf)
}

impl SshTransport {
    async fn connect(
        host: &HostSpec,
        known: Option<&HostKey>,
        opts: &SshOptions,
    ) -> Result<(SshTransport, HostKey), TransportError> {
        let name = &host.name;
        let io = |detail: String| TransportError::Io {
            host: name.clone(),
            detail,
        };
        let addr = host.address.as_str();
        if addr.is_empty()
            || addr.starts_with('-')
            || addr
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '@')
        {
            return Err(TransportError::Unreachable {
                host: name.clone(),
                detail: format!(
                    "{addr:?} is not a host name or IP address; set the host's address to one"
                ),
            });
        }
        if let Some(k) = known {
            if fingerprint(&k.key).is_none() {
                return Err(io(format!(
                    "the host key recorded for it ({:?}) is not an OpenSSH public key; run \
                     `envc build --trust-host-key {name}` to record the key it presents",
                    k.key
                )));
            }
        }

        let work = std::path::absolute(&opts.work_dir)
            .map_err(|e| io(format!("work directory {}: {e}", opts.work_dir.display())))?;
        let dir = tempfile::Builder::new()
            .prefix("ssh")
            .tempdir_in(&work)
            .map_err(|e| {
                io(format!(
                    "cannot create a directory in {}: {e}",
                    work.display()
                ))
            })?;
        let dir_len = dir.path().as_os_str().len();
        if dir_len > MAX_WORK_DIR_LEN {
            return Err(io(format!(
                "the work directory {} is too long a path for ssh's control socket (at most \
                 {} bytes); use a shorter one",
                work.display(),
                MAX_WORK_DIR_LEN - 10
            )));
        }
        let known_hosts = dir.path().join("known_hosts");
        let known_line = known
            .map(|k| format!("{KNOWN_HOSTS_ALIAS} {}\n", k.key.trim()))
            .unwrap_or_default();
        std::fs::write(&known_hosts, known_line)
            .map_err(|e| io(format!("cannot write {}: {e}", known_hosts.display())))?;
        let config = dir.path().join("ssh_config");
        let text = ssh_config_text(
            &known_hosts,
            host.identity.as_deref(),
            opts.config_file.as_deref(),
        )
        .map_err(|e| io(e.to_string()))?;
        std::fs::write(&config, text)
            .map_err(|e| io(format!("cannot write {}: {e}", config.display())))?;

        let config_files = match &opts.config_file {
            Some(p) => vec![std::path::absolute(p).unwrap_or_else(|_| p.clone())],
            None => {
                let home = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_default();
                vec![
                    home.join(".ssh/config"),
                    PathBuf::from("/etc/ssh/ssh_config"),
                ]
            }
        };
        let target = Target {
            user: &host.user,
            address: addr,
            port: host.port,
            identity: host.identity.as_deref(),
            config_files: &config_files,
        };
        let dir = match Self::resume_kept(host, known, opts, dir, &target).await {
            Ok(kept) => return Ok(kept),
            Err(dir) => dir,
        };
        Self::login(host, known, opts, dir, &target).await
    }

    /// The master a run before kept for this target and the host key `known`, when there is
    /// one and it still answers; else `dir` back, for a new login. Only a run that expects a
    /// host key reuses a master: the one that checked that key.
    async fn resume_kept(
        host: &HostSpec,
        known: Option<&HostKey>,
        opts: &SshOptions,
        dir: tempfile::TempDir,
        target: &Target<'_>,
    ) -> Result<(SshTransport, HostKey), tempfile::TempDir> {
        let (Some(p), Some(k)) = (opts.persist.as_ref(), known) else {
            return Err(dir);
        };
        let Some(ctl) = p.socket(target, &k.key).filter(|ctl| ctl.exists()) else {
            return Err(dir);
        };
        let kept = SshTransport {
            host: host.name.clone(),
            command_timeout: opts.command_timeout,
            session: openssh::Session::resume_mux(ctl.clone().into_boxed_path(), None),
            master: Master::Kept,
            ctl,
            dir,
            login: (host.user.clone(), host.address.clone(), host.port),
        };
        let limit = opts.connect_timeout.max(REUSE_CHECK_MIN);
        if kept.answers(limit).await {
            return Ok((kept, k.clone()));
        }
        // Its peer went away or silent: stop it and forget it.
        let _ = std::fs::remove_file(&kept.ctl);
        let SshTransport { session, dir, .. } = kept;
        let _ = tokio::time::timeout(limit, session.close()).await;
        Err(dir)
    }

    /// A new master: logs in to `host`, checking its key against `known` (accepting and
    /// recording the presented one on a first contact). Kept after the run when `opts`
    /// says so, under the name of the key it checked.
    async fn login(
        host: &HostSpec,
        known: Option<&HostKey>,
        opts: &SshOptions,
        dir: tempfile::TempDir,
        target: &Target<'_>,
    ) -> Result<(SshTransport, HostKey), TransportError> {
        let name = &host.name;
        let addr = host.address.as_str();
        let io = |detail: String| TransportError::Io {
            host: name.clone(),
            detail,
        };
        let known_hosts = dir.path().join("known_hosts");
        let config = dir.path().join("ssh_config");
        let persist = opts.persist.as_ref();
        let ctl = match persist {
            Some(p) => p.starting_socket(),
            None => dir.path().join("master"),
        };
        let log = dir.path().join("master.log");
        let mut cmd = std::process::Command::new("ssh");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .arg("-E")
            .arg(&log)
            .arg("-S")
            .arg(&ctl)
            .args(["-M", "-N", "-o", "BatchMode=yes"]);
        match persist {
            // ssh logs in, detaches the master (no longer envc's child) and exits.
            Some(p) => cmd
                .arg("-f")
                .arg("-o")
                .arg(format!("ControlPersist={}", p.idle.as_secs().max(1))),
            // In the foreground (no -f, no ControlPersist, which would fork it away from envc).
            None => cmd.args(["-o", "ControlPersist=no"]),
        };
        cmd.arg("-o")
            .arg(if known.is_some() {
                "StrictHostKeyChecking=yes"
            } else {
                "StrictHostKeyChecking=accept-new"
            })
            .arg("-o")
            .arg(format!(
                "ConnectTimeout={}",
                opts.connect_timeout.as_secs().max(1)
            ))
            .arg("-o")
            .arg(format!(
                "ServerAliveInterval={}",
                SERVER_ALIVE_INTERVAL.as_secs()
            ))
            .arg("-p")
            .arg(host.port.to_string())
            .arg("-l")
            .arg(&host.user)
            .arg("-F")
            .arg(&config)
            .arg("--")
            .arg(addr);
        // A kept master outlives envc by design (its idle limit bounds it, a killed run
        // included), so it needs no tie: spawned plainly, it is started without copying
        // envc's address space (posix_spawn), which a `pre_exec` hook would force.
        let spawned = match persist {
            Some(_) => cmd.spawn(),
            None => spawn_tied(cmd),
        };
        let mut starting = match spawned {
            Ok(child) => Starting(Some(child)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(io(format!(
                    "cannot run the ssh client: {e}\n  hint: install OpenSSH's client \
                     (`apt-get install openssh-client`)"
                )));
            }
            Err(e) => return Err(io(format!("cannot run the ssh client: {e}"))),
        };
        // The connect timeout bounds the TCP connection; this bounds the whole handshake too
        // (a host that accepts and then says nothing).
        let limit = opts.connect_timeout * 3 + Duration::from_secs(5);
        // ssh creates the control socket (by renaming it into place) once it is logged in;
        // a detaching one has exited by then.
        let ready = async {
            loop {
                if ctl.exists() && persist.is_none() {
                    return Ok(());
                }
                match starting.child().try_wait() {
                    Ok(Some(status)) if status.success() && ctl.exists() => return Ok(()),
                    Ok(Some(status)) => {
                        let text = std::fs::read_to_string(&log).unwrap_or_default();
                        return Err(master_failure(&text, status));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("waiting for ssh: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        match tokio::time::timeout(limit, ready).await {
            Ok(Ok(())) => {}
            Ok(Err(detail)) => {
                if let Some(k) = known {
                    if detail.contains("Host key verification failed")
                        || detail.contains("HOST IDENTIFICATION HAS CHANGED")
                    {
                        let presented = match presented_fingerprint(&detail) {
                            Some(fp) => fp,
                            None => keyscan_fingerprint(host, &k.key, opts).await,
                        };
                        return Err(TransportError::HostKeyChanged {
                            host: name.clone(),
                            recorded_fingerprint: k.fingerprint.clone(),
                            presented_fingerprint: presented,
                        });
                    }
                }
                return Err(TransportError::Unreachable {
                    host: name.clone(),
                    detail: format!("ssh to {}@{addr} port {}: {detail}", host.user, host.port),
                });
            }
            Err(_) => {
                return Err(TransportError::Unreachable {
                    host: name.clone(),
                    detail: format!(
                        "ssh to {}@{addr} port {} did not complete within {} s",
                        host.user,
                        host.port,
                        limit.as_secs()
                    ),
                })
            }
        }
        let mut session = openssh::Session::resume_mux(
            ctl.clone().into_boxed_path(),
            Some(log.into_boxed_path()),
        );
        let mut ctl = ctl;
        let key = match known {
            Some(k) => k.clone(),
            None => {
                let text = std::fs::read_to_string(&known_hosts)
                    .map_err(|e| io(format!("cannot read {}: {e}", known_hosts.display())))?;
                let recorded = text.lines().find_map(|line| {
                    let mut f = line.split_whitespace();
                    (f.next() == Some(KNOWN_HOSTS_ALIAS))
                        .then(|| Some(format!("{} {}", f.next()?, f.next()?)))
                        .flatten()
                });
                let Some(key) = recorded else {
                    let _ = session.close().await;
                    return Err(io(format!(
                        "connected, but ssh did not record the host's key in {}; does the ssh \
                         configuration override host key checking (KnownHostsCommand, \
                         StrictHostKeyChecking)?",
                        known_hosts.display()
                    )));
                };
                let Some(fp) = fingerprint(&key) else {
                    let _ = session.close().await;
                    return Err(io(format!("ssh recorded an unreadable host key {key:?}")));
                };
                HostKey {
                    key,
                    fingerprint: fp,
                }
            }
        };
        let master = match persist {
            Some(p) => {
                // Found by the next run only now, under the key it checked.
                if let Some(kept) = p.socket(target, &key.key) {
                    if std::fs::rename(&ctl, &kept).is_ok() {
                        ctl = kept;
                        session = openssh::Session::resume_mux(ctl.clone().into_boxed_path(), None);
                    }
                }
                drop(starting);
                Master::Kept
            }
            None => Master::Tied(starting.disarm()),
        };
        let t = SshTransport {
            host: name.clone(),
            command_timeout: opts.command_timeout,
            session,
            master,
            ctl,
            dir,
            login: (host.user.clone(), addr.to_string(), host.port),
        };
        Ok((t, key))
    }

    /// Whether a kept master still reaches its host: it runs a command within `limit`.
    async fn answers(&self, limit: Duration) -> bool {
        let alive = async {
            self.session.check().await.ok()?;
            let out = self.run(&["true"], &[]).await.ok()?;
            out.success().then_some(())
        };
        matches!(tokio::time::timeout(limit, alive).await, Ok(Some(())))
    }

    async fn run(
        &self,
        argv: &[&str],
        stdin: &[Input<'_>],
    ) -> Result<CommandOutput, TransportError> {
        use openssh::Stdio;
        let mut cmd = self.session.raw_command(shell_quote(argv[0]));
        for arg in &argv[1..] {
            cmd.raw_arg(shell_quote(arg));
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn().await {
            Ok(child) => child,
            // The master is gone: its host stopped answering (keepalives) or closed it.
            Err(e) if self.session.check().await.is_err() => return Err(self.lost(&e)),
            Err(e) => {
                return Err(TransportError::Io {
                    host: self.host.clone(),
                    detail: format!("cannot start the command: {}", error_chain(&e)),
                })
            }
        };
        let input = child.stdin().take();
        let out = child.stdout().take();
        let err = child.stderr().take();
        let (written, stdout, stderr) =
            tokio::join!(feed(input, stdin), read_all(out), read_all(err));
        let status = match child.wait().await {
            Ok(status) => status.code(),
            // The mux reports exit status 127 as an error.
            Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
            Err(openssh::Error::RemoteProcessTerminated) => {
                // No exit status: the command was killed by a signal (reported as 255, as
                // the ssh client reports it), or the connection is gone.
                if let Err(e) = self.session.check().await {
                    return Err(self.lost(&e));
                }
                Some(255)
            }
            Err(e) => return Err(self.lost(&e)),
        };
        let io = |e: std::io::Error| TransportError::Unreachable {
            host: self.host.clone(),
            detail: format!("the connection broke while running `{}`: {e}", argv[0]),
        };
        written.map_err(io)?;
        Ok(CommandOutput {
            status,
            stdout: stdout.map_err(io)?,
            stderr: stderr.map_err(io)?,
        })
    }

    fn lost(&self, e: &openssh::Error) -> TransportError {
        TransportError::Unreachable {
            host: self.host.clone(),
            detail: format!(
                "the ssh connection was lost (the host stopped answering or closed it): {}",
                error_chain(e)
            ),
        }
    }
}

/// What a master that exited during its login said, as one line per message.
fn master_failure(log: &str, status: std::process::ExitStatus) -> String {
    let text: Vec<&str> = log
        .lines()
        .map(|l| l.trim().trim_start_matches("ssh: "))
        .filter(|l| !l.is_empty() && !l.starts_with("Warning: Permanently added"))
        .collect();
    if text.is_empty() {
        format!("ssh exited ({status}) without a message")
    } else {
        text.join("\n")
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s += ": ";
            s += text.trim();
        }
        source = inner.source();
    }
    s
}

/// Why envc cannot write an ssh_config for a connection.
#[derive(Debug)]
enum SshConfigError {
    NotUtf8(std::path::PathBuf),
    /// An ssh_config cannot quote a `"` or a line break.
    Unquotable(String),
    NotAbsolute(std::path::PathBuf, std::io::Error),
    NoSuchFile(std::path::PathBuf),
}

impl std::fmt::Display for SshConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SshConfigError::NotUtf8(p) => write!(f, "the path {} is not UTF-8", p.display()),
            SshConfigError::Unquotable(s) => write!(
                f,
                "the path {s:?} contains a quote or a line break, which an ssh_config cannot \
                 hold; use another path"
            ),
            SshConfigError::NotAbsolute(p, e) => write!(f, "{}: {e}", p.display()),
            SshConfigError::NoSuchFile(p) => write!(
                f,
                "the ssh config file {} does not exist; fix --ssh-config / $ENVC_SSH_CONFIG",
                p.display()
            ),
        }
    }
}

/// envc's ssh_config for one connection. ssh uses the first value it finds for an option, so
/// these lines win over the user's configuration, which they include afterwards.
fn ssh_config_text(
    known_hosts: &std::path::Path,
    identity: Option<&std::path::Path>,
    user_config: Option<&std::path::Path>,
) -> Result<String, SshConfigError> {
    let quote = |p: &std::path::Path| -> Result<String, SshConfigError> {
        let s = p
            .to_str()
            .ok_or_else(|| SshConfigError::NotUtf8(p.to_path_buf()))?;
        if s.contains(['"', '\n', '\r']) {
            return Err(SshConfigError::Unquotable(s.to_string()));
        }
        Ok(format!("\"{s}\""))
    };
    let mut text = String::from(
        "# Generated by envc for one connection: its own known_hosts, never the user's or the\n\
         # system's. ssh takes the first value of each option, so these win over the Includes.\n",
    );
    text += &format!("HostKeyAlias {KNOWN_HOSTS_ALIAS}\n");
    text += &format!(
        "UserKnownHostsFile {}\n",
        quote(known_hosts)?.replace('%', "%%")
    );
    text += "GlobalKnownHostsFile /dev/null\n\
             KnownHostsCommand none\n\
             HashKnownHosts no\n\
             UpdateHostKeys no\n\
             CheckHostIP no\n\
             VerifyHostKeyDNS no\n\
             ServerAliveCountMax 2\n";
    if let Some(key) = identity {
        text += &format!(
            "IdentityFile {}\nIdentitiesOnly yes\n",
            quote(key)?.replace('%', "%%")
        );
    }
    match user_config {
        Some(p) => {
            let p = std::path::absolute(p)
                .map_err(|e| SshConfigError::NotAbsolute(p.to_path_buf(), e))?;
            if !p.is_file() {
                return Err(SshConfigError::NoSuchFile(p));
            }
            text += &format!("Include {}\n", quote(&p)?);
        }
        None => {
            // What ssh reads without -F. A missing file is skipped.
            text += "Include ~/.ssh/config\nInclude /etc/ssh/ssh_config\n";
        }
    }
    Ok(text)
}

/// The fingerprint ssh printed for the key a host presented when it did not match.
fn presented_fingerprint(log: &str) -> Option<String> {
    let at = log.find("sent by the remote host is")?;
    log[at..]
        .split_whitespace()
        .find(|w| w.starts_with("SHA256:"))
        .map(|w| w.trim_end_matches('.').to_string())
}

/// Asks the host for its key of the recorded key's type with `ssh-keyscan`.
async fn keyscan_fingerprint(host: &HostSpec, recorded_key: &str, opts: &SshOptions) -> String {
    let kind = match recorded_key.split_whitespace().next().unwrap_or("") {
        "ssh-rsa" => "rsa",
        "ssh-dss" => "dsa",
        k if k.starts_with("ecdsa-") => "ecdsa",
        _ => "ed25519",
    };
    let timeout = opts.connect_timeout.as_secs().max(1).to_string();
    let port = host.port.to_string();
    let run = tokio::process::Command::new("ssh-keyscan")
        .args(["-T", &timeout, "-t", kind, "-p", &port, "--", &host.address])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let limit = opts.connect_timeout * 2 + Duration::from_secs(2);
    match tokio::time::timeout(limit, run).await {
        Ok(Ok(out)) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.split_once(' ').and_then(|(_, key)| fingerprint(key)))
            .unwrap_or_else(|| "(unknown: ssh-keyscan got no key)".into()),
        Ok(Err(e)) => format!("(unknown: ssh-keyscan: {e})"),
        Err(_) => "(unknown: ssh-keyscan timed out)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_is_one_literal_word() {
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("abc"), "'abc'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("''"), "''\\'''\\'''");
        assert_eq!(shell_quote("$(touch x)"), "'$(touch x)'");
        assert_eq!(shell_quote("a\nb"), "'a\nb'");
        assert_eq!(shell_quote("-rf"), "'-rf'");
        assert_eq!(shell_quote("ünï`c`"), "'ünï`c`'");
    }

    /// The quoted words, read back by a real `sh`, are the original strings.
    #[test]
    fn shell_quote_round_trips_through_sh() {
        let values = [
            "",
            "plain",
            "it's",
            "'",
            "\\'",
            "$(touch /tmp/envc-pwned)",
            "`id`",
            "a\nb\n",
            "; rm -rf /",
            "-n",
            "  spaces  ",
            "ünïcødé ✓",
            "\"double\" $HOME \\n",
            "*",
        ];
        let mut script = String::from("for a in");
        for v in values {
            script.push(' ');
            script.push_str(&shell_quote(v));
        }
        script.push_str("; do printf '%s\\0' \"$a\"; done");
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success());
        let got: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        let want: Vec<&[u8]> = values
            .iter()
            .map(|v| v.as_bytes())
            .chain([&b""[..]])
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn fingerprints_match_ssh_keygen() {
        // Compared with what `ssh-keygen -lf` prints for the same key, where it is installed.
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFN9BY+YLk9Eq+w7rDUcp0DsQh9w4mUIUtFE6x/RXHsg";
        let fp = fingerprint(key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k.pub");
        std::fs::write(&file, format!("{key} comment\n")).unwrap();
        if let Ok(out) = std::process::Command::new("ssh-keygen")
            .arg("-lf")
            .arg(&file)
            .output()
        {
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(text.split_whitespace().nth(1), Some(fp.as_str()), "{text}");
        }
        assert!(fp.starts_with("SHA256:") && !fp.ends_with('='));
        assert_eq!(fingerprint("ssh-ed25519"), None);
        assert_eq!(fingerprint("ssh-ed25519 not*base64"), None);
    }

    #[test]
    fn base64_round_trips() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let enc = base64_encode_unpadded(&bytes);
            assert_eq!(base64_decode(&enc), Some(bytes));
        }
        assert_eq!(base64_encode_unpadded(b"foob"), "Zm9vYg");
        assert_eq!(base64_decode("Zm9vYg=="), Some(b"foob".to_vec()));
    }

    #[test]
    fn presented_fingerprint_is_read_from_the_warning() {
        let log = "@@@@@\nThe fingerprint for the ED25519 key sent by the remote host is\n\
                   SHA256:abcDEF123+/x.\nPlease contact your system administrator.\n\
                   Host key verification failed.";
        assert_eq!(
            presented_fingerprint(log).as_deref(),
            Some("SHA256:abcDEF123+/x")
        );
        assert_eq!(presented_fingerprint("Host key verification failed."), None);
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = TransportError::HostKeyChanged {
            host: "web".into(),
            recorded_fingerprint: "SHA256:old".into(),
            presented_fingerprint: "SHA256:new".into(),
        };
        let text = e.to_string();
        assert!(text.contains("SHA256:old") && text.contains("SHA256:new"));
        assert!(text.contains("envc build --trust-host-key web"));
        let e = TransportError::Unreachable {
            host: "db".into(),
            detail: "connection timed out".into(),
        };
        assert!(e.to_string().contains("`db`") && e.to_string().contains("sshd"));
    }

    #[test]
    fn config_lines_come_before_the_users() {
        let text = ssh_config_text(
            std::path::Path::new("/w/50%/known_hosts"),
            Some(std::path::Path::new("/s/id_%d")),
            Some(std::path::Path::new("/etc/hostname")),
        )
        .unwrap();
        let kh = text
            .find("UserKnownHostsFile \"/w/50%%/known_hosts\"")
            .unwrap();
        let inc = text.find("Include \"/etc/hostname\"").unwrap();
        let id = text
            .find("IdentityFile \"/s/id_%%d\"\nIdentitiesOnly yes")
            .unwrap();
        assert!(kh < inc && id < inc && text.contains("GlobalKnownHostsFile /dev/null"));
        assert!(ssh_config_text(std::path::Path::new("/x\"y"), None, None).is_err());
        assert!(ssh_config_text(
            std::path::Path::new("/k"),
            None,
            Some(std::path::Path::new("/nonexistent/envc"))
        )
        .is_err());
    }

    /// The scheduler shares transports between tasks on a multi-threaded runtime: this only
    /// has to compile (the kinds' operations are held to it beside them, `kinds::tests`).
    #[allow(dead_code)]
    fn transports_are_send(t: &Transport) {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: T) {}
        send_sync(t);
        send(t.run(&[], b""));
    }

    #[tokio::test]
    async fn local_transport_runs_without_a_shell() {
        let opts = SshOptions {
            config_file: None,
            connect_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(1),
            work_dir: std::env::temp_dir(),
            persist: None,
        };
        let host = HostSpec {
            name: "me".into(),
            address: LOCAL_ADDRESS.into(),
            port: 22,
            user: "root".into(),
            identity: None,
        };
        let Ok((t, key)) = Transport::connect(&host, None, &opts).await else {
            return; // no machine id here
        };
        assert!(key.fingerprint.starts_with("machine-id:"));
        let out = t.run(&["printf", "%s", "$(id)"], b"").await.unwrap();
        assert_eq!(out.stdout, b"$(id)");
        let out = t.run(&["cat"], b"in\0put").await.unwrap();
        assert_eq!((out.status, out.stdout), (Some(0), b"in\0put".to_vec()));
        let out = t.run(&["sh", "-c", "exit 3"], b"").await.unwrap();
        assert_eq!(out.status, Some(3));
        let e = t.run(&["sleep", "10"], b"").await.unwrap_err();
        assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
        let out = t.run(&["envc-no-such-program"], b"").await.unwrap();
        assert_eq!(out.status, Some(127));
        assert!(String::from_utf8_lossy(&out.stderr).contains("envc-no-such-program"));
        t.close().await;
    }
}
