//! Isolated SSH "hosts" for end-to-end tests of the executor.
//!
//! `TestHosts::start(n)` starts `n` hosts. Each one is a process tree in its own network, pid,
//! mount, uts and ipc namespaces, with an overlayfs over a shared Debian bookworm rootfs (built
//! once by `scripts/testhosts/build-rootfs`, cached under `target/testhosts`) and a real `sshd`
//! as its pid 1 (`scripts/testhosts/host-init`). All hosts hang off a bridge in a *controller*
//! network namespace that this instance creates:
//!
//! ```text
//!   controller netns: lo, br0 10.77.0.1/24 ── vh0 ── host 0: eth0 10.77.0.10, sshd :22
//!                                         ── vh1 ── host 1: eth0 10.77.0.11, sshd :22 ...
//! ```
//!
//! These addresses exist only inside namespaces the test created, and the controller namespace
//! has no route anywhere else: a client run with [`TestHosts::in_controller`] reaches the hosts
//! and nothing outside. Never connect to the addresses from the machine's own namespace.
//!
//! Several instances may live at once (parallel tests): each has its own controller namespace
//! (so they reuse the same addresses without meeting) and its own state directory. Dropping an
//! instance kills every host and the controller and waits for them, leaving no process, mount
//! or namespace behind. The processes are also tied to the thread that called `start` (parent
//! death signal), so they die with the test process even if `Drop` never runs: create an
//! instance on the thread that uses it, not on a short-lived helper thread.
//!
//! Needs root, `unshare`/`nsenter`/`setpriv` (util-linux), `ip` (iproute2), `ssh` and
//! `ssh-keygen` (openssh-client) and, for the first build of the rootfs, `mmdebstrap`.
//!
//! Host indices are 0-based: host `i` is named `host{i}`; a host of `start(n)` has address
//! `10.77.0.{10 + i}`.
//!
//! Hosts at chosen addresses: [`TestHosts::start_empty`] makes the controller and its bridge
//! only, and [`TestHosts::add_host`] adds one host at a time, at any addresses and with a given
//! SSH host key: a cloud instance's private and public address and the host key its user data
//! carries, so that the host stands in for the instance once it booted (tests/support/cloud.rs).
//!
//! ```text
//!   controller netns: br0 10.77.0.1/24, route 10.0.1.4/32 dev br0, route 54.214.9.8/32 dev br0
//!                     ── vh0 ── host 0: eth0 10.0.1.4/32 + 54.214.9.8/32,
//!                                       default via 10.77.0.1 dev eth0 onlink
//! ```
//!
//! Each added address is a /32 on the host and a /32 route to the bridge in the controller, and
//! the host's default route goes to the controller's address `onlink` (it is in none of the
//! host's prefixes). This works for any addresses, unlike giving the bridge a gateway address
//! in each host's /24: two instances' public addresses may share a /24, or an instance's /24 may
//! be another's private subnet, and no address has to be invented. ARP does the rest (a Linux
//! host answers for every address it has). The controller forwards between hosts, so hosts also
//! reach each other at any address, as instances in one VPC do; it has no interface but the
//! bridge and no route out, so the addresses still exist only inside the instance's
//! namespaces.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The controller's address on the bridge; hosts use it as their default gateway.
const CONTROLLER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const PREFIX_LEN: u8 = 24;
/// Host `i` gets `10.77.0.(FIRST_HOST + i)`.
const FIRST_HOST: u8 = 10;
const MAX_HOSTS: usize = 200;
const SSH_PORT: u16 = 22;
const SSH_USER: &str = "root";
/// `ConnectTimeout` of [`TestHosts::ssh_options`]: connecting to a dead host fails after this.
pub const SSH_CONNECT_TIMEOUT_SECS: u32 = 2;
/// How long `start` waits for every sshd to listen (the rootfs build is not counted).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopping a host may take before its `unshare` is killed directly.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn geteuid() -> u32;
}
const SIGKILL: i32 = 9;

/// A set of running SSH test hosts behind their own controller network namespace.
pub struct TestHosts {
    // Drop order matters: `Drop::drop` stops the processes, then the state dir goes last.
    hosts: Vec<Host>,
    controller: Option<Child>,
    controller_pid: u32,
    key: PathBuf,
    rootfs: PathBuf,
    state: TempDir,
    /// Run by host-init with the host's root before its sshd starts ([`Self::set_boot_hook`]).
    boot_hook: Option<PathBuf>,
}

struct Host {
    name: String,
    /// The primary address, `addrs[0]`.
    addr: Ipv4Addr,
    addrs: Vec<Ipv4Addr>,
    dir: PathBuf,
    /// The `unshare` process; it lives in the host's network namespace (its child does not
    /// share its pid namespace, but it shares every other).
    pid: u32,
    proc: Mutex<HostProc>,
}

struct HostProc {
    unshare: Child,
    /// host-init, later sshd: pid 1 of the host's pid namespace, as seen from ours.
    init: Option<u32>,
    stopped: bool,
}

impl TestHosts {
    /// Starts `n` hosts and returns once every one's sshd listens on port 22. Builds the rootfs
    /// first if the cache does not have it (about a minute, once). Panics on any failure, with
    /// the hosts' logs in the message.
    pub fn start(n: usize) -> TestHosts {
        match Self::try_start(n) {
            Ok(hosts) => hosts,
            Err(e) => panic!("TestHosts::start({n}): {e}"),
        }
    }

    fn try_start(n: usize) -> Result<TestHosts, String> {
        assert!(
            (1..=MAX_HOSTS).contains(&n),
            "between 1 and {MAX_HOSTS} hosts"
        );
        let mut th = Self::controller()?;
        for i in 0..n {
            let addr = host_addr(i);
            th.spawn_host(&[format!("{addr}/{PREFIX_LEN}")], None, "")?;
        }
        // Wire every host to the bridge in one `ip` run inside the controller namespace.
        let mut batch = bridge_batch();
        for i in 0..n {
            batch += &th.link_host(i)?;
        }
        th.ip_batch(&batch)?;
        th.wait_listening(0..n)?;
        Ok(th)
    }

    /// Starts the controller namespace and its bridge, with no host yet: hosts come with
    /// [`Self::add_host`], at the addresses a test chooses (a cloud's instances, say).
    /// Panics on any failure.
    pub fn start_empty() -> TestHosts {
        let run = || -> Result<TestHosts, String> {
            let th = Self::controller()?;
            th.ip_batch(&bridge_batch())?;
            Ok(th)
        };
        match run() {
            Ok(hosts) => hosts,
            Err(e) => panic!("TestHosts::start_empty: {e}"),
        }
    }

    /// Starts one more host whose eth0 has every address of `addrs` (the first is its primary
    /// address: what [`Self::addr`] returns, the source of its own connections) and returns its
    /// index once its sshd listens. Its sshd's host key is `host_key` (an ed25519 private key
    /// file; its public key is `host_key` with `.pub` appended if that exists, else derived
    /// from it) or, without one, a key made at start. Its `root` accepts [`Self::key_path`].
    ///
    /// The addresses are arbitrary (a cloud's private and public addresses): each is a /32 on
    /// the host, routed to the bridge by a /32 route in the controller namespace; the host's
    /// default route goes to the controller's address `onlink`. The controller forwards between
    /// hosts (so hosts reach each other at any of their addresses) and has no other interface,
    /// so the addresses exist, as before, only inside this instance's namespaces. An address
    /// must not be one that a live host of this instance has already, nor the controller's;
    /// a killed host's ([`Self::kill_host`]) may be given again.
    /// Hosts started from now on run `hook` (an executable, given the host's root directory
    /// as its argument) once their file systems are mounted and before their sshd starts:
    /// what a test's hosts need that the shared rootfs has not, in place before anyone can
    /// log in (e.g. scripts/testhosts/systemd-stand-in).
    pub fn set_boot_hook(&mut self, hook: &Path) {
        self.boot_hook = Some(hook.to_path_buf());
    }

    pub fn add_host(&mut self, addrs: &[Ipv4Addr], host_key: Option<&Path>) -> usize {
        self.add_host_with_keys(addrs, host_key, &[])
    }

    /// [`Self::add_host`], whose `root` also accepts each of `authorized` (lines of an
    /// `authorized_keys` file): the keys a cloud instance's boot authorizes.
    pub fn add_host_with_keys(
        &mut self,
        addrs: &[Ipv4Addr],
        host_key: Option<&Path>,
        authorized: &[String],
    ) -> usize {
        match self.try_add_host(addrs, host_key, authorized) {
            Ok(i) => i,
            Err(e) => panic!("TestHosts::add_host({addrs:?}): {e}"),
        }
    }

    fn try_add_host(
        &mut self,
        addrs: &[Ipv4Addr],
        host_key: Option<&Path>,
        authorized: &[String],
    ) -> Result<usize, String> {
        if addrs.is_empty() {
            return Err("no address".into());
        }
        if self.hosts.len() >= MAX_HOSTS {
            return Err(format!("at most {MAX_HOSTS} hosts"));
        }
        for addr in addrs {
            let taken = *addr == CONTROLLER_ADDR
                || self
                    .hosts
                    .iter()
                    .any(|h| h.addrs.contains(addr) && !h.lock().stopped)
                || addrs.iter().filter(|a| *a == addr).count() > 1;
            if taken {
                return Err(format!("{addr} is taken"));
            }
        }
        if let Some(key) = host_key {
            if !key.is_file() {
                return Err(format!("no host key file {}", key.display()));
            }
        }
        let cidrs: Vec<String> = addrs.iter().map(|a| format!("{a}/32")).collect();
        let mut keys = fs::read_to_string(self.key.with_extension("pub"))
            .map_err(|e| format!("reading the test's public key: {e}"))?;
        for line in authorized {
            keys += &format!("{}\n", line.trim());
        }
        let i = self.spawn_host(&cidrs, host_key, &keys)?;
        let mut batch = self.link_host(i)?;
        for addr in addrs {
            // A killed host's address may come again (a new instance at it): its route is
            // replaced, and its neighbour entry (the dead host's MAC) forgotten, or connections
            // would wait for the entry to go stale.
            batch += &format!(
                "route replace {addr}/32 dev br0 src {CONTROLLER_ADDR}\nneigh flush to {addr} dev br0\n"
            );
        }
        self.ip_batch(&batch)?;
        // Hosts at /32 addresses reach each other through the controller. No redirects: the
        // path stays the same whatever the hosts' kernels make of them.
        let sysctl = self
            .in_controller("sh")
            .arg("-c")
            .arg(
                "echo 1 >/proc/sys/net/ipv4/ip_forward && \
                 echo 0 >/proc/sys/net/ipv4/conf/all/send_redirects && \
                 echo 0 >/proc/sys/net/ipv4/conf/br0/send_redirects",
            )
            .stdin(Stdio::null())
            .output();
        check("sysctl (controller network)", sysctl)?;
        self.wait_listening(i..i + 1)?;
        Ok(i)
    }

    /// The controller network namespace (no bridge yet) and the state directory with the
    /// test's client key.
    fn controller() -> Result<TestHosts, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { geteuid() } != 0 {
            return Err("needs root (network, pid and mount namespaces, overlayfs)".into());
        }
        let rootfs = rootfs()?;
        let state = tempfile::Builder::new()
            .prefix("envc-testhosts-")
            .tempdir()
            .map_err(|e| format!("creating the state directory: {e}"))?;
        let key = state.path().join("id_ed25519");
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "envc-testhosts"])
            .arg("-f")
            .arg(&key))?;

        let controller = spawn_tied(
            Command::new("unshare").args(["--net", "--", "sleep", "infinity"]),
            &state.path().join("controller.log"),
        )?;
        let controller_pid = controller.id();
        let mut th = TestHosts {
            hosts: Vec::new(),
            controller: Some(controller),
            controller_pid,
            key,
            rootfs,
            state,
            boot_hook: None,
        };
        // From here on, dropping `th` (on an error return or a panic) cleans up what started.
        wait_netns(controller_pid, th.controller.as_mut().unwrap())?;
        Ok(th)
    }

    /// Starts host-init for host number `self.hosts.len()` in its namespaces (not yet wired to
    /// the bridge) and returns its index. Its root accepts the lines of `authorized_keys`, or
    /// the test's key when that is empty.
    fn spawn_host(
        &mut self,
        cidrs: &[String],
        host_key: Option<&Path>,
        authorized_keys: &str,
    ) -> Result<usize, String> {
        let i = self.hosts.len();
        let name = format!("host{i}");
        let addrs = cidrs
            .iter()
            .map(|c| c.split('/').next().unwrap_or_default().parse())
            .collect::<Result<Vec<Ipv4Addr>, _>>()
            .map_err(|e| format!("{cidrs:?}: {e}"))?;
        let dir = self.state.path().join(&name);
        fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let keys = if authorized_keys.is_empty() {
            self.key.with_extension("pub")
        } else {
            let keys = dir.join("authorized_keys");
            fs::write(&keys, authorized_keys)
                .map_err(|e| format!("writing {}: {e}", keys.display()))?;
            keys
        };
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--mount", "--uts", "--ipc", "--pid", "--fork"])
            .args(["--kill-child", "--propagation", "private", "--"])
            .arg(script("host-init"))
            .arg(&name)
            .arg(cidrs.join(","))
            .arg(CONTROLLER_ADDR.to_string())
            .arg(&self.rootfs)
            .arg(&dir)
            .arg(&keys);
        if let Some(key) = host_key {
            cmd.arg(key);
        }
        match &self.boot_hook {
            Some(hook) => cmd.env("ENVC_HOST_BOOT_HOOK", hook),
            None => cmd.env_remove("ENVC_HOST_BOOT_HOOK"),
        };
        let unshare = spawn_tied(&mut cmd, &dir.join("init.log"))?;
        self.hosts.push(Host {
            name,
            addr: addrs[0],
            addrs,
            dir,
            pid: unshare.id(),
            proc: Mutex::new(HostProc {
                unshare,
                init: None,
                stopped: false,
            }),
        });
        Ok(i)
    }

    /// The `ip -batch` lines that give host `i` its eth0, once it has its network namespace.
    fn link_host(&self, i: usize) -> Result<String, String> {
        let host = &self.hosts[i];
        wait_netns(host.pid, &mut host.lock().unshare)
            .map_err(|e| format!("{}: {e}\n{}", host.name, host.logs()))?;
        Ok(format!(
            "link add vh{i} type veth peer name eth0 netns {}\nlink set vh{i} master br0 up\n",
            host.pid
        ))
    }

    /// Runs `ip -batch -` inside the controller namespace.
    fn ip_batch(&self, batch: &str) -> Result<(), String> {
        let mut ip = self
            .in_controller("ip")
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running nsenter ... ip: {e}"))?;
        ip.stdin
            .take()
            .unwrap()
            .write_all(batch.as_bytes())
            .map_err(|e| format!("writing to ip -batch: {e}"))?;
        check("ip -batch (controller network)", ip.wait_with_output())?;
        Ok(())
    }

    /// Waits until the sshd of every host in `which` listens, watching its socket table from
    /// outside: probing the port before sshd listens would cost a 1 s SYN retransmit.
    fn wait_listening(&self, which: std::ops::Range<usize>) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let hosts = &self.hosts[which];
        let mut ready = vec![false; hosts.len()];
        loop {
            for (host, ready) in hosts.iter().zip(ready.iter_mut()) {
                if *ready {
                    continue;
                }
                let mut p = host.lock();
                if let Ok(Some(status)) = p.unshare.try_wait() {
                    p.stopped = true;
                    return Err(format!(
                        "{} exited ({status}) before sshd listened\n{}",
                        host.name,
                        host.logs()
                    ));
                }
                if p.init.is_none() {
                    p.init = only_child(host.pid);
                }
                *ready = p.init.is_some() && listens_on(host.pid, SSH_PORT);
            }
            if ready.iter().all(|r| *r) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let mut msg = format!("sshd not listening after {READY_TIMEOUT:?} on:");
                for (host, _) in hosts.iter().zip(&ready).filter(|(_, r)| !**r) {
                    msg += &format!("\n{}", host.logs());
                }
                return Err(msg);
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Address of host `i` (reachable only from the controller namespace).
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        self.hosts[i].addr
    }

    /// Every address of host `i`, its primary one ([`Self::addr`]) first.
    pub fn host_addrs(&self, i: usize) -> &[Ipv4Addr] {
        &self.hosts[i].addrs
    }

    /// Primary addresses of all hosts, in index order.
    pub fn addrs(&self) -> Vec<Ipv4Addr> {
        self.hosts.iter().map(|h| h.addr).collect()
    }

    /// Host name of host `i` (what `hostname` prints on it).
    pub fn name(&self, i: usize) -> &str {
        &self.hosts[i].name
    }

    /// The controller's own address on the hosts' network (their default gateway): a server
    /// started with [`Self::in_controller`] and bound there is reachable from the hosts.
    pub fn controller_addr(&self) -> Ipv4Addr {
        CONTROLLER_ADDR
    }

    /// SSH port of every host.
    pub fn port(&self) -> u16 {
        SSH_PORT
    }

    /// SSH user of every host.
    pub fn user(&self) -> &str {
        SSH_USER
    }

    /// Private key (ed25519, no passphrase) that every host's `root` accepts; the public key is
    /// beside it with `.pub` appended.
    pub fn key_path(&self) -> &Path {
        &self.key
    }

    /// Pid of the process that holds the controller network namespace
    /// (`nsenter -t PID -n CMD` runs CMD there).
    pub fn controller_pid(&self) -> u32 {
        self.controller_pid
    }

    /// Pid of host `i`'s `unshare` process (in the host's network namespace; its only child is
    /// the host's pid 1).
    pub fn host_pid(&self, i: usize) -> u32 {
        self.hosts[i].pid
    }

    /// This instance's state directory (keys, logs, each host's overlay upper directory).
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// The shared read-only rootfs (the overlay lower directory of every host).
    pub fn rootfs(&self) -> &Path {
        &self.rootfs
    }

    /// Host `i`'s init and sshd logs (their last lines), for failure messages.
    pub fn logs(&self, i: usize) -> String {
        self.hosts[i].logs()
    }

    /// A command that runs `program` inside the controller network namespace, where the hosts
    /// are reachable (and nothing else is). Only the network namespace changes: the file system,
    /// environment and working directory stay the caller's.
    pub fn in_controller(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.controller_pid.to_string())
            .arg("-n")
            .arg("--")
            .arg(program);
        cmd
    }

    /// `ssh` options that log into any host with the test key, non-interactively, ignoring the
    /// user's ssh configuration and not recording host keys (each start makes new ones).
    pub fn ssh_options(&self) -> Vec<String> {
        let mut opts = vec![
            "-F".to_string(),
            "/dev/null".to_string(),
            "-i".to_string(),
            self.key.display().to_string(),
            "-p".to_string(),
            SSH_PORT.to_string(),
            "-l".to_string(),
            SSH_USER.to_string(),
        ];
        for o in [
            "BatchMode=yes",
            "IdentitiesOnly=yes",
            "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null",
            "GlobalKnownHostsFile=/dev/null",
            "LogLevel=ERROR",
        ] {
            opts.push("-o".to_string());
            opts.push(o.to_string());
        }
        opts.push("-o".to_string());
        opts.push(format!("ConnectTimeout={SSH_CONNECT_TIMEOUT_SECS}"));
        opts
    }

    /// `ssh <options> <host i>` inside the controller namespace; append the remote command.
    pub fn ssh_command(&self, i: usize) -> Command {
        let mut cmd = self.in_controller("ssh");
        cmd.args(self.ssh_options()).arg(self.addr(i).to_string());
        cmd
    }

    /// Runs the shell command `cmd` on host `i` as root over ssh, stdin empty.
    pub fn ssh(&self, i: usize, cmd: &str) -> Output {
        self.ssh_command(i)
            .arg(cmd)
            .stdin(Stdio::null())
            .output()
            .expect("running nsenter ... ssh")
    }

    /// Simulates host `i` dying: first its network link is cut (its veth is deleted, as if the
    /// cable were pulled, so nothing it does while dying reaches a client), then its pid 1 is
    /// SIGKILLed, which takes its whole pid namespace down. When this returns its processes and
    /// mounts are gone. Open connections then hear nothing (as from a crashed machine, so a
    /// client notices only through its own timeouts or keepalives) and new ones fail after
    /// `ConnectTimeout`. Calling it again does nothing.
    pub fn kill_host(&self, i: usize) {
        let host = &self.hosts[i];
        if host.lock().stopped {
            return;
        }
        // The deletion takes both ends of the pair down at once.
        let _ = self
            .in_controller("ip")
            .args(["link", "del", &format!("vh{i}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        host.stop();
    }
}

impl Drop for TestHosts {
    fn drop(&mut self) {
        for host in &self.hosts {
            host.stop();
        }
        if let Some(mut controller) = self.controller.take() {
            let _ = controller.kill();
            let _ = controller.wait();
        }
    }
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, HostProc> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills the host's pid 1 and reaps `unshare`, which waits for it; a pid namespace's init
    /// exits only after every other process in it, so nothing of the host is left afterwards.
    /// Killing pid 1 rather than `unshare` keeps everything reaped (an orphaned init would be
    /// left to the machine's pid 1).
    fn stop(&self) {
        let mut p = self.lock();
        if p.stopped {
            return;
        }
        p.stopped = true;
        if let Ok(Some(_)) = p.unshare.try_wait() {
            return;
        }
        if p.init.is_none() {
            p.init = only_child(self.pid);
        }
        match p.init {
            // Only while it is still unshare's child: never signal a recycled pid.
            Some(init) if parent_of(init) == Some(self.pid) => {
                // SAFETY: plain syscall; the pid is our unshare's child, checked just above.
                unsafe { kill(init as i32, SIGKILL) };
            }
            _ => {
                let _ = p.unshare.kill();
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match p.unshare.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    // --kill-child takes the pid namespace down with it.
                    let _ = p.unshare.kill();
                    let _ = p.unshare.wait();
                    return;
                }
                Ok(None) => sleep(Duration::from_millis(2)),
            }
        }
    }

    fn logs(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(Ipv4Addr::to_string).collect();
        let mut s = format!("--- {} ({}) ---", self.name, addrs.join(", "));
        for log in ["init.log", "sshd.log"] {
            let text = fs::read_to_string(self.dir.join(log)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s += &format!("\n[{log}, last lines]");
            for line in &lines[lines.len().saturating_sub(20)..] {
                s += &format!("\n  {line}");
            }
        }
        s
    }
}

/// The `ip -batch` lines that make the controller's bridge, the hosts' gateway.
fn bridge_batch() -> String {
    format!(
        "link set lo up\nlink add br0 type bridge\n\
         addr add {CONTROLLER_ADDR}/{PREFIX_LEN} dev br0\nlink set br0 up\n"
    )
}

fn host_addr(i: usize) -> Ipv4Addr {
    let [a, b, c, _] = CONTROLLER_ADDR.octets();
    Ipv4Addr::new(a, b, c, FIRST_HOST + u8::try_from(i).expect("host index"))
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts/testhosts")
        .join(name)
}

/// The rootfs directory, built (or found in the cache) once per test process.
fn rootfs() -> Result<PathBuf, String> {
    static ROOTFS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            let script = script("build-rootfs");
            let out = check(
                &script.display().to_string(),
                Command::new("bash")
                    .arg(&script)
                    .stdin(Stdio::null())
                    .output(),
            )?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
            if !path.join("usr/sbin/sshd").exists() {
                return Err(format!(
                    "{} printed {path:?}, which has no usr/sbin/sshd",
                    script.display()
                ));
            }
            Ok(path)
        })
        .clone()
}

/// Spawns `cmd` with a clean environment, stdin closed and output to `log`, under
/// `setpriv --pdeathsig KILL` so that it dies if this thread does (a test process that exits
/// without dropping its `TestHosts`). `setpriv` and `unshare` exec: the pid is the command's.
fn spawn_tied(cmd: &mut Command, log: &Path) -> Result<Child, String> {
    let out = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    // Only what `cmd` sets explicitly (ENVC_HOST_BOOT_HOOK) passes, beside PATH.
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .arg(&program)
        .args(&args)
        .env_clear()
        .env("PATH", PATH)
        .envs(envs)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawning setpriv {program:?}: {e}"))
}

/// Waits until `pid` is in a network namespace other than ours.
fn wait_netns(pid: u32, child: &mut Child) -> Result<(), String> {
    let ours = fs::read_link("/proc/self/ns/net").map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(theirs) = fs::read_link(format!("/proc/{pid}/ns/net")) {
            if theirs != ours {
                return Ok(());
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "pid {pid} exited ({status}) before unsharing its network"
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("pid {pid} did not unshare its network within 10 s"));
        }
        sleep(Duration::from_millis(1));
    }
}

/// Whether a TCP socket listens on `port` in the network namespace of `pid`
/// (`/proc/PID/net/tcp` shows that namespace's sockets).
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return false;
    };
    let port = format!(":{port:04X}");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // fields: sl local_address rem_address st ...; st 0A = LISTEN
        fields.len() > 3 && fields[1].ends_with(&port) && fields[3] == "0A"
    })
}

/// The single child of `pid`, once it has one.
fn only_child(pid: u32) -> Option<u32> {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let what = format!("{:?}", cmd.get_program());
    check(&what, cmd.stdin(Stdio::null()).output())
}

fn check(what: &str, result: std::io::Result<Output>) -> Result<Output, String> {
    let out = result.map_err(|e| format!("running {what}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
