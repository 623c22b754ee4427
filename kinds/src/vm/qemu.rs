//! The `qemu` provider: `vm` nodes as local QEMU machines.
//!
//! A VM lives in a directory of the store (`machines/ENV/NAME/`): a copy-on-write qcow2 disk
//! over the image's disk object (the image stays immutable and shared), the pid file, the
//! console log and the launch arguments. QEMU runs daemonized, so VMs outlive envc; a later
//! run finds them by pid file and reattaches, or starts a dead one again from its disk.
//!
//! Each VM has two network cards. One is QEMU's user mode (NAT to the outside, which is how
//! apt in the guest reaches the archive) with the guest's port 22 forwarded to a free port
//! on 127.0.0.1: envc's way in. The other joins the environment's private network, a
//! multicast group on the loopback interface of its own (derived from the environment's
//! absolute directory; a network for development and tests, not a security boundary: any
//! local process could join it), where
//! each VM has an address of `10.89.0.0/24` (the `address` output): the VMs' way to each
//! other. envc logs in with one ed25519 key of the store's, given to the guest at boot as
//! the systemd credential `ssh.authorized_keys.root`. The guest makes its own ed25519 host
//! key on first boot and prints it on the serial console, which envc reads and pins, so even
//! the first connection is checked rather than trusted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::error::StepError;
use crate::future::BoxFuture;
use crate::record::Facts;
use crate::store::Store;
use crate::tools::{tool, Tool};
use crate::transport::{fingerprint, HostKey, HostSpec, SshOptions, Transport, TransportError};
use crate::vm::login::LoginKey;
use crate::vm::provider::{VmProvider, VmSpec};

/// The facts of a VM (and the names of its outputs).
pub use envc_ids::fact::machine as fact;

const CONSOLE: &str = "console.log";
pub(super) const PID: &str = "qemu.pid";
const LAUNCH: &str = "launch.json";
const DISK: &str = "disk.qcow2";
/// In a VM's directory that was renamed while its QEMU ran (a `moved` declaration): the
/// disk paths that QEMU was started with, one a line, by which it is still known.
pub(super) const STARTED_AS: &str = "started-as";
/// In the directory of a VM envc adopted (made outside envc): the disk path its QEMU runs.
/// Such a VM is not envc's to stop or delete, save by `destroy --adopted`, nor to boot
/// again (envc does not know how it was started).
pub(super) const ADOPTED: &str = "adopted";
/// The fact of an adopted VM naming its disk, as its QEMU's command line has it.
pub const ADOPTED_DISK: &str = "adopted_disk";
/// The line the guest prints on its console once its host key exists.
const HOST_KEY_LINE: &str = "envc-host-key: ";

/// How a VM was started: what a restart from its disk needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Launch {
    spec: VmSpec,
    port: u16,
    /// Its host number on the private network: `10.89.0.N`.
    lan: u8,
}

const LAN_PREFIX: &str = "10.89.0";
const LAN_HOSTS: std::ops::RangeInclusive<u8> = 10..=250;

/// The QEMU provider: the VMs of one environment, on this machine.
pub struct Qemu {
    store: Store,
    dir: PathBuf,
    /// The key envc logs in with; its public half goes to every VM.
    pub key: Arc<LoginKey>,
    pub boot_timeout: Duration,
    /// Held while a VM picks its private address, so two VMs created at once do not
    /// pick the same.
    allocating: tokio::sync::Mutex<()>,
}

impl Qemu {
    pub fn new(store: &Store, env: &str, key: Arc<LoginKey>, boot_timeout: Duration) -> Qemu {
        Qemu {
            store: store.clone(),
            dir: store.root().join("machines").join(env),
            key,
            boot_timeout,
            allocating: tokio::sync::Mutex::new(()),
        }
    }

    /// Makes the VM run. `previous` are the facts of the VM this node had: with `restart`
    /// (its spec is unchanged) it starts again from its disk, unless the disk is gone;
    /// otherwise it is destroyed and a new VM is created.
    pub async fn realize(
        &self,
        spec: &VmSpec,
        previous: Option<&Facts>,
        restart: bool,
        ssh: &SshOptions,
    ) -> Result<(Facts, Transport, HostKey), StepError> {
        if let Some(p) = previous {
            if let Some(disk) = adopted_disk(p) {
                let why = match restart {
                    true => "its QEMU no longer runs",
                    false => "the source changed what it is made of (a new VM would replace it)",
                };
                return Err(StepError::with_hint(
                    format!("`{}` was adopted (envc did not make it) and {why}: envc neither boots nor deletes a machine it adopted", spec.name),
                    format!("start it again as it was started (its disk {disk}) and build again; or remove the VM from the source and build (it is forgotten, left as it is), then add it back without the `adopt` line for envc to make one"),
                ));
            }
            let disk_kept = p
                .get(fact::DIR)
                .is_some_and(|d| Path::new(d).join(DISK).exists());
            if restart && disk_kept {
                return self.restart(p, ssh).await;
            }
            self.destroy_vm(p).await?;
        }
        self.create(spec, ssh).await
    }

    fn vm_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub(super) fn vm_dir_of(&self, name: &str) -> PathBuf {
        self.vm_dir(name)
    }

    /// Whether a QEMU runs the VM of directory `dir`.
    pub(super) fn running_in(&self, dir: &Path) -> bool {
        running_pid(dir).is_some()
    }

    /// Whether the VM these facts describe runs: its pid file names a live QEMU that uses
    /// its disk.
    fn running(&self, facts: &Facts) -> bool {
        facts
            .get(fact::DIR)
            .is_some_and(|d| running_pid(Path::new(d)).is_some())
    }

    /// Creates the VM: a fresh disk over the image, then boots it. Whatever was at its
    /// place before (a VM being replaced) must have been destroyed first.
    async fn create(
        &self,
        spec: &VmSpec,
        ssh: &SshOptions,
    ) -> Result<(Facts, Transport, HostKey), StepError> {
        let dir = self.vm_dir(&spec.name);
        if dir.exists() {
            self.destroy_dir(&dir).await?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| StepError::new(format!("cannot create {}: {e}", dir.display())))?;
        let image = std::path::absolute(self.store.object_file(&spec.disk_image))
            .map_err(|e| StepError::new(e.to_string()))?;
        let image_size = std::fs::metadata(&image)
            .map_err(|e| {
                StepError::new(format!(
                    "the image's disk {} is missing: {e}",
                    image.display()
                ))
            })?
            .len();
        if spec.disk_bytes < image_size {
            return Err(StepError::new(format!(
                "`{}`: disk = {} MiB is smaller than its image ({} MiB); give it at least that",
                spec.name,
                spec.disk_bytes >> 20,
                image_size.div_ceil(1 << 20)
            )));
        }
        let disk = dir.join(DISK);
        let out = tokio::process::Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(&image)
            .arg(&disk)
            .arg(spec.disk_bytes.to_string())
            .output()
            .await
            .map_err(|e| {
                StepError::with_hint(format!("cannot run qemu-img: {e}"), "install qemu-utils")
            })?;
        if !out.status.success() {
            return Err(StepError::new(format!(
                "qemu-img could not create the disk of `{}`: {}",
                spec.name,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let launch = {
            let _guard = self.allocating.lock().await;
            let launch = Launch {
                spec: spec.clone(),
                port: 0,
                lan: self.free_lan_host(spec.lan_rank)?,
            };
            write_launch(&dir, &launch)?;
            launch
        };
        self.boot(&dir, launch, ssh).await
    }

    /// The host number of the private network that the VM's rank asks for, or else the
    /// lowest that no VM of this environment has.
    fn free_lan_host(&self, rank: u8) -> Result<u8, StepError> {
        let taken: Vec<u8> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(|e| read_launch(&e.ok()?.path()))
                    .map(|l| l.lan)
                    .collect()
            })
            .unwrap_or_default();
        let preferred = LAN_HOSTS
            .start()
            .checked_add(rank)
            .filter(|n| LAN_HOSTS.contains(n));
        preferred
            .into_iter()
            .chain(LAN_HOSTS)
            .find(|n| !taken.contains(n))
            .ok_or_else(|| {
                StepError::new("the private network of this environment is full (241 VMs)")
            })
    }

    /// The environment's private network: a multicast group and port on loopback, derived
    /// from where its VMs live so that two environments never share one.
    fn lan_socket(&self) -> String {
        let h = blake3::hash(self.dir.as_os_str().as_encoded_bytes());
        let b = h.as_bytes();
        let port = 20000 + u16::from_le_bytes([b[2], b[3]]) % 40000;
        format!("239.255.{}.{}:{port}", b[0], b[1])
    }

    /// Starts a stopped VM again from its disk, on its old port when that is free.
    async fn restart(
        &self,
        facts: &Facts,
        ssh: &SshOptions,
    ) -> Result<(Facts, Transport, HostKey), StepError> {
        let dir = PathBuf::from(
            facts
                .get(fact::DIR)
                .ok_or_else(|| StepError::new("the record names no directory"))?,
        );
        let launch = read_launch(&dir).ok_or_else(|| {
            StepError::new(format!(
                "{} is missing or damaged, so the VM cannot be restarted; `envc destroy` \
                     and build again",
                dir.join(LAUNCH).display()
            ))
        })?;
        if !dir.join(DISK).exists() {
            return Err(StepError::new(format!(
                "the disk of the VM ({}) is gone; `envc destroy` and build again",
                dir.join(DISK).display()
            )));
        }
        self.boot(&dir, launch, ssh).await
    }

    /// Starts QEMU as `launch` says (on its port if it has one and it is free), records how,
    /// and waits for ssh. A guest that stays silent under KVM is taken for hung: it is
    /// stopped and started again under TCG, which the rest of the machine's boot then uses.
    async fn boot(
        &self,
        dir: &Path,
        mut launch: Launch,
        ssh: &SshOptions,
    ) -> Result<(Facts, Transport, HostKey), StepError> {
        let login = self.key.public().await?;
        let accel_cache = self.key.path.with_file_name("accel");
        let spec = launch.spec.clone();
        let kernel = std::path::absolute(self.store.object_file(&spec.kernel))
            .map_err(|e| StepError::new(e.to_string()))?;
        let mut accel = accelerator(&accel_cache, &kernel).await;
        let mut port = Some(launch.port).filter(|p| *p != 0 && port_is_free(*p));
        let (transport, key) = loop {
            let net = |ssh_port| Net {
                ssh_port,
                lan: launch.lan,
                lan_socket: self.lan_socket(),
            };
            launch.port = self
                .launch(
                    dir,
                    &spec,
                    &kernel,
                    &login,
                    port.take(),
                    net,
                    &mut accel,
                    &accel_cache,
                )
                .await?;
            let waited = match write_launch(dir, &launch) {
                Ok(()) => self.wait_for_ssh(dir, &spec, launch.port, ssh, accel).await,
                Err(e) => Err(Waited::Failed(e)),
            };
            let e = match waited {
                Ok(x) => break x,
                Err(Waited::Silent) => {
                    kvm_failed(
                        &accel_cache,
                        &format!(
                            "`{}` printed nothing on its console in {} s under KVM",
                            spec.name,
                            KVM_SILENCE.as_secs()
                        ),
                    );
                    accel = Accel::Tcg;
                    port = Some(launch.port);
                    match stop(dir).await {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Err(Waited::Failed(e)) => e,
            };
            // A VM that never answered is stopped, not left running unrecorded; its
            // directory stays for the console log until it is created again or `destroy`
            // sweeps it.
            return Err(match stop(dir).await {
                Ok(()) => e,
                Err(stop_error) => StepError {
                    cause: format!("{}\n  and then: {stop_error}", e.cause),
                    hint: e.hint,
                },
            });
        };
        let port = launch.port;
        let address = format!("{LAN_PREFIX}.{}", launch.lan);
        let facts = Facts::from([
            (fact::ADDRESS.to_string(), address.clone()),
            // A local VM has no other address, and its directory is its id.
            (fact::PUBLIC_ADDRESS.to_string(), address),
            (fact::INSTANCE_ID.to_string(), dir.display().to_string()),
            (fact::SSH_ADDRESS.to_string(), "127.0.0.1".to_string()),
            (fact::PORT.to_string(), port.to_string()),
            (fact::USER.to_string(), spec.user.clone()),
            (fact::HOST_KEY.to_string(), key.key.clone()),
            (fact::FINGERPRINT.to_string(), key.fingerprint.clone()),
            (fact::DIR.to_string(), dir.display().to_string()),
        ]);
        Ok((facts, transport, key))
    }

    /// Starts QEMU, daemonized, on `port` (or a free one): the port it listens on. A start
    /// that fails under KVM is tried again under TCG (`accel` then says so); one that lost
    /// its port to another process, on another port.
    #[allow(clippy::too_many_arguments)]
    async fn launch(
        &self,
        dir: &Path,
        spec: &VmSpec,
        kernel: &Path,
        login: &str,
        mut port: Option<u16>,
        net: impl Fn(u16) -> Net,
        accel: &mut Accel,
        accel_cache: &Path,
    ) -> Result<u16, StepError> {
        let mut last_error = String::new();
        for _ in 0..5 {
            let p = match port.take() {
                Some(p) => p,
                None => free_port()?,
            };
            // Started from this directory, it is known by it.
            let _ = std::fs::remove_file(dir.join(STARTED_AS));
            let console = dir.join(CONSOLE);
            if console.exists() {
                let _ = std::fs::rename(&console, dir.join(format!("{CONSOLE}.1")));
            }
            let args = qemu_args(dir, spec, kernel, &net(p), login, *accel)?;
            let out = tokio::process::Command::new("qemu-system-x86_64")
                .args(&args)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(|e| {
                    StepError::with_hint(
                        format!("cannot run qemu-system-x86_64: {e}"),
                        "install qemu-system-x86",
                    )
                })?;
            if out.status.success() {
                return Ok(p);
            }
            last_error = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if *accel == Accel::Kvm && !last_error.contains("host forwarding") {
                // The probe passed but a real VM does not start under KVM: TCG from now on.
                *accel = Accel::Tcg;
                kvm_failed(
                    accel_cache,
                    &format!(
                        "QEMU could not start `{}` under KVM: {last_error}",
                        spec.name
                    ),
                );
                port = Some(p);
                continue;
            }
            // Another process took the port between our check and QEMU's bind: try another.
            if !last_error.contains("host forwarding") {
                break;
            }
        }
        Err(StepError::new(format!(
            "QEMU could not start `{}`: {last_error}",
            spec.name
        )))
    }

    /// Waits, at most the boot timeout, for the guest to print its host key and for sshd to
    /// accept envc's key with that host key. Under KVM, a console still empty after
    /// [`KVM_SILENCE`] is [`Waited::Silent`]: the guest is not running.
    async fn wait_for_ssh(
        &self,
        dir: &Path,
        spec: &VmSpec,
        port: u16,
        ssh: &SshOptions,
        accel: Accel,
    ) -> Result<(Transport, HostKey), Waited> {
        let started = Instant::now();
        let host = HostSpec {
            name: spec.name.clone(),
            address: "127.0.0.1".into(),
            port,
            user: spec.user.clone(),
            identity: Some(self.key.path.clone()),
        };
        let opts = SshOptions {
            connect_timeout: Duration::from_secs(5),
            ..ssh.clone()
        };
        let console = dir.join(CONSOLE);
        let fail = |what: String, hint: String| {
            Waited::Failed(StepError::with_hint(
                format!(
                    "{what}\n  console ({}), last lines:\n{}",
                    console.display(),
                    console_tail(&console, 15)
                ),
                hint,
            ))
        };
        let mut last = None;
        loop {
            let printed = std::fs::metadata(&console).map(|m| m.len()).unwrap_or(0) > 0;
            if accel == Accel::Kvm && !printed && started.elapsed() > KVM_SILENCE {
                return Err(Waited::Silent);
            }
            if started.elapsed() > self.boot_timeout {
                let secs = self.boot_timeout.as_secs();
                let name = &spec.name;
                let cause = match (&last, printed) {
                    (_, false) => format!(
                        "it printed nothing on its console under {}, so the guest never ran",
                        accel.name()
                    ),
                    (None, true) => format!(
                        "it booted under {} (its console below) but had not printed its host \
                         key yet",
                        accel.name()
                    ),
                    (Some(e), true) => {
                        format!("it printed its host key, but sshd did not accept envc's key: {e}")
                    }
                };
                let hint = match printed {
                    false => {
                        "QEMU's accelerator here may be broken: ENVC_QEMU_ACCEL=tcg (or \
                              kvm) chooses it instead of the probe"
                    }
                    true => {
                        "a slow machine may need a longer --boot-timeout; a console that \
                             stops at an error says what the guest lacks"
                    }
                };
                return Err(fail(
                    format!("`{name}` did not answer ssh within {secs} s: {cause}"),
                    hint.into(),
                ));
            }
            if running_pid(dir).is_none() {
                return Err(fail(
                    format!("`{}` stopped while booting", spec.name),
                    "the console's last lines say why".into(),
                ));
            }
            if let Some(key) = console_host_key(&console) {
                match Transport::connect(&host, Some(&key), &opts).await {
                    Ok((t, k)) => return Ok((t, k)),
                    Err(e @ TransportError::HostKeyChanged { .. }) => {
                        return Err(fail(
                            e.to_string(),
                            "the guest's host key is not the one it printed".into(),
                        ))
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stops the VM these facts describe and deletes its directory (its disk with it). An
    /// adopted VM's disk is where it was found: deleted there (`destroy --adopted`).
    async fn destroy_vm(&self, facts: &Facts) -> Result<(), StepError> {
        let Some(d) = facts.get(fact::DIR).map(Path::new) else {
            return Ok(());
        };
        if let Some(disk) = adopted_disk(facts) {
            stop(d).await?;
            match std::fs::remove_file(&disk) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StepError::new(format!("cannot delete {disk}: {e}"))),
            }
            return remove_dir(d);
        }
        self.destroy_dir(d).await
    }

    /// Destroys every VM of the environment not named in `keep`, recorded or not (what a
    /// failed creation left): `destroy` leaves nothing behind.
    async fn sweep_vms(&self, keep: &BTreeSet<String>) -> Result<(), StepError> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            if e.path().is_dir() && !keep.contains(&*e.file_name().to_string_lossy()) {
                self.destroy_dir(&e.path()).await?;
            }
        }
        // The environment's directory goes too once it is empty.
        let _ = std::fs::remove_dir(&self.dir);
        Ok(())
    }

    /// Stops the VM of `dir` and deletes the directory; only the directory for a VM envc
    /// adopted (what a sweep or a new VM in its place finds): that VM is not envc's.
    async fn destroy_dir(&self, dir: &Path) -> Result<(), StepError> {
        if !dir.join(ADOPTED).exists() {
            stop(dir).await?;
        }
        remove_dir(dir)
    }
}

fn remove_dir(dir: &Path) -> Result<(), StepError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StepError::new(format!(
            "cannot delete {}: {e}",
            dir.display()
        ))),
    }
}

/// The disk of a VM envc adopted, as its record says.
fn adopted_disk(facts: &Facts) -> Option<String> {
    facts.get(ADOPTED_DISK).cloned()
}

/// Stops the QEMU of the VM in `dir`, if one runs: SIGTERM, then SIGKILL after 10 s.
async fn stop(dir: &Path) -> Result<(), StepError> {
    let Some(pid) = running_pid(dir) else {
        return Ok(());
    };
    signal(pid, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while running_pid(dir).is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if running_pid(dir).is_some() {
        signal(pid, libc::SIGKILL);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if running_pid(dir).is_some() {
        return Err(StepError::new(format!(
            "QEMU (pid {pid}) did not stop; kill it and run the command again"
        )));
    }
    Ok(())
}

fn read_launch(dir: &Path) -> Option<Launch> {
    serde_json::from_slice(&std::fs::read(dir.join(LAUNCH)).ok()?).ok()
}

fn write_launch(dir: &Path, launch: &Launch) -> Result<(), StepError> {
    let path = dir.join(LAUNCH);
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(launch).expect("launch serialises"),
    )
    .map_err(|e| StepError::new(format!("cannot write {}: {e}", path.display())))
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The pid of the QEMU that runs the VM in `dir`: the pid file's, if that process lives and
/// its command line names this directory (pids are reused).
fn running_pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.join(PID))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // A zombie has exited.
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    let disk = dir.join(DISK);
    let names = |needle: &str| {
        let needle = needle.as_bytes();
        cmdline.windows(needle.len()).any(|w| w == needle)
    };
    let named = names(disk.to_str()?) || started_as(dir).iter().any(|d| names(d));
    (named && state != "Z").then_some(pid)
}

fn console_host_key(console: &Path) -> Option<HostKey> {
    let text = std::fs::read(console).ok()?;
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().rev().find_map(|l| {
        let i = l.find(HOST_KEY_LINE)?;
        Some(l[i + HOST_KEY_LINE.len()..].trim().to_string())
    })?;
    let mut words = line.split_whitespace();
    let key = format!("{} {}", words.next()?, words.next()?);
    Some(HostKey {
        fingerprint: fingerprint(&key)?,
        key,
    })
}

fn console_tail(console: &Path, n: usize) -> String {
    let text = std::fs::read(console).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(n)..];
    if tail.is_empty() {
        "    (empty)".into()
    } else {
        tail.iter()
            .map(|l| format!("    {}", l.trim_end()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn port_is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> Result<u16, StepError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| StepError::new(format!("cannot find a free port on 127.0.0.1: {e}")))
}

/// QEMU option values are comma-separated; a comma in a path would split it.
fn qemu_path(p: &Path) -> Result<String, StepError> {
    let s = p
        .to_str()
        .ok_or_else(|| StepError::new(format!("the path {} is not UTF-8", p.display())))?;
    if s.contains(',') {
        return Err(StepError::new(format!(
            "the path {s} contains a comma, which QEMU options cannot hold; move the store"
        )));
    }
    Ok(s.to_string())
}

/// A VM's network: its ssh port on 127.0.0.1 and its place on the private network.
struct Net {
    ssh_port: u16,
    lan: u8,
    /// `GROUP:PORT` of the private network's multicast socket.
    lan_socket: String,
}

/// Why waiting for a booting VM ended without ssh.
enum Waited {
    /// Under KVM, the console stayed empty: the guest is not running.
    Silent,
    Failed(StepError),
}

fn qemu_args(
    dir: &Path,
    spec: &VmSpec,
    kernel: &Path,
    net: &Net,
    login: &str,
    accel: Accel,
) -> Result<Vec<String>, StepError> {
    use base64_encode as b64;
    let disk = qemu_path(&dir.join(DISK))?;
    let console = qemu_path(&dir.join(CONSOLE))?;
    let pid = qemu_path(&dir.join(PID))?;
    let kernel = qemu_path(kernel)?;
    let (accel, cpu) = match accel {
        // A bounded translation cache: TCG's default takes ~600 MB per VM.
        Accel::Tcg => ("tcg,tb-size=64", "max"),
        Accel::Kvm => ("kvm", "host"),
    };
    let args = [
        "-name",
        &format!("envc-{}", spec.name),
        "-machine",
        "q35",
        "-accel",
        accel,
        "-cpu",
        cpu,
        "-smp",
        &spec.cpus.to_string(),
        "-m",
        &spec.memory_mib.to_string(),
        "-kernel",
        &kernel,
        "-append",
        &format!(
            // Not `quiet`: when a boot stalls, the console's tail in the error says where.
            "root=/dev/nvme0n1 rw console=ttyS0 systemd.hostname={} envc.lan={LAN_PREFIX}.{}/24",
            spec.name, net.lan
        ),
        "-drive",
        &format!("file={disk},if=none,id=d0,format=qcow2"),
        "-device",
        "nvme,drive=d0,serial=root0",
        // The guest names its cards by slot: 4 is the NAT card, 5 the private one.
        "-netdev",
        &format!("user,id=n0,hostfwd=tcp:127.0.0.1:{}-:22", net.ssh_port),
        "-device",
        "virtio-net-pci,netdev=n0,addr=0x4",
        "-netdev",
        &format!("socket,id=n1,mcast={},localaddr=127.0.0.1", net.lan_socket),
        "-device",
        &format!(
            "virtio-net-pci,netdev=n1,addr=0x5,mac=52:54:00:89:00:{:02x}",
            net.lan
        ),
        "-smbios",
        &format!(
            "type=11,value=io.systemd.credential.binary:ssh.authorized_keys.root={}",
            b64(format!("{login}\n").as_bytes())
        ),
        "-display",
        "none",
        "-serial",
        &format!("file:{console}"),
        "-daemonize",
        "-pidfile",
        &pid,
    ];
    Ok(args.iter().map(|s| s.to_string()).collect())
}

fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(A[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG (software emulation)",
        }
    }
}

/// How long a guest under KVM may leave its console empty before it is taken for hung: a
/// kernel under KVM prints within a second or two (seen here: `/dev/kvm` opened, QEMU ran,
/// and the guest never printed one byte).
const KVM_SILENCE: Duration = Duration::from_secs(15);

/// How long the probe's kernel has to boot to its panic. Under a working KVM it takes
/// about a second; under TCG on a loaded machine of two cores, about ten.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

static KVM_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Remembers the accelerator, with why, for the rest of the machine's boot: the first line
/// is `kvm|tcg BOOT_ID`, the second says what the probe or a VM saw.
fn remember(cache: &Path, accel: Accel, why: &str) {
    let name = if accel == Accel::Kvm { "kvm" } else { "tcg" };
    let _ = std::fs::write(cache, format!("{name} {}\n{why}\n", boot_id()));
}

/// KVM failed a VM although the probe passed: TCG from now on, in this process and in the
/// cache.
fn kvm_failed(cache: &Path, why: &str) {
    KVM_FAILED.store(true, std::sync::atomic::Ordering::SeqCst);
    remember(cache, Accel::Tcg, why);
}

/// KVM when the probe boots a guest's kernel under it, TCG otherwise: `/dev/kvm` can open
/// and still fail every vCPU ("failed to set MSR") or run guests that never execute.
/// `$ENVC_QEMU_ACCEL` (`kvm` or `tcg`) skips the probe. The answer is kept in `cache` for
/// the rest of the machine's boot (a hung probe costs its whole [`PROBE_LIMIT`]).
pub async fn accelerator(cache: &Path, kernel: &Path) -> Accel {
    static ACCEL: tokio::sync::OnceCell<Accel> = tokio::sync::OnceCell::const_new();
    if KVM_FAILED.load(std::sync::atomic::Ordering::SeqCst) {
        return Accel::Tcg;
    }
    *ACCEL
        .get_or_init(|| async {
            match std::env::var("ENVC_QEMU_ACCEL").as_deref() {
                Ok("kvm") => return Accel::Kvm,
                Ok("tcg") => return Accel::Tcg,
                _ => {}
            }
            let boot = boot_id();
            let cached = std::fs::read_to_string(cache).unwrap_or_default();
            let first = cached.lines().next().unwrap_or_default();
            match first.split_once(' ') {
                Some(("kvm", b)) if !boot.is_empty() && b == boot => return Accel::Kvm,
                Some(("tcg", b)) if !boot.is_empty() && b == boot => return Accel::Tcg,
                _ => {}
            }
            let (found, why) = match probe_kvm(kernel, cache).await {
                Ok(()) => (
                    Accel::Kvm,
                    "the probe's kernel booted under KVM".to_string(),
                ),
                Err(why) => (Accel::Tcg, why.to_string()),
            };
            remember(cache, found, &why);
            found
        })
        .await
}

/// Boots `kernel` under KVM with no disk: it prints, panics for want of a root and powers
/// off (`panic=-1` with `-no-reboot`). Only a guest that really runs gets there; a vCPU
/// that runs a moment under `-S`/`cont` proves nothing (seen passing where every guest then
/// hung). Err says what went wrong.
/// Why the probe found that KVM runs no guest here.
#[derive(Debug)]
enum NoKvm {
    /// QEMU could not be started or waited for.
    CannotRun(std::io::Error),
    /// QEMU ended before the kernel booted ("failed to set MSR", no /dev/kvm, …): its
    /// first line on stderr.
    Ended {
        status: std::process::ExitStatus,
        said: String,
    },
    /// The kernel had not booted within [`PROBE_LIMIT`]; whether it printed at all.
    TimedOut { printed: bool },
}

impl std::fmt::Display for NoKvm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = PROBE_LIMIT.as_secs();
        match self {
            NoKvm::CannotRun(e) => write!(f, "cannot run qemu-system-x86_64: {e}"),
            NoKvm::Ended { status, said } if said.is_empty() => {
                write!(
                    f,
                    "a guest kernel under KVM ended without booting ({status})"
                )
            }
            NoKvm::Ended { status, said } => write!(
                f,
                "a guest kernel under KVM ended without booting ({status}): {said}"
            ),
            NoKvm::TimedOut { printed: false } => write!(
                f,
                "a guest kernel under KVM printed nothing in {secs} s: /dev/kvm opens but runs \
                 no guest"
            ),
            NoKvm::TimedOut { printed: true } => write!(
                f,
                "a guest kernel under KVM printed but had not booted after {secs} s"
            ),
        }
    }
}

async fn probe_kvm(kernel: &Path, cache: &Path) -> Result<(), NoKvm> {
    // No look at /dev/kvm first: QEMU says why it cannot use it (absent, or not this
    // user's to open) as it fails, at once.
    let console = cache.with_file_name("accel-probe-console.log");
    let _ = std::fs::remove_file(&console);
    let serial = format!("file:{}", console.display());
    let child = tokio::process::Command::new("qemu-system-x86_64")
        .args([
            "-machine", "q35", "-accel", "kvm", "-cpu", "host", "-m", "256",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-monitor",
            "none",
        ])
        .args(["-no-reboot", "-serial", &serial, "-kernel"])
        .arg(kernel)
        .args([
            "-append",
            "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return Err(NoKvm::CannotRun(e)),
    };
    let mut child = child;
    let read = || std::fs::read(&console).unwrap_or_default();
    // The kernel got through its whole boot to the root it was not given: it runs.
    let panicked = |text: &[u8]| text.windows(12).any(|w| w == b"Kernel panic");
    let started = Instant::now();
    let result = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() && !read().is_empty() => break Ok(()),
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use tokio::io::AsyncReadExt as _;
                    let _ = e.read_to_string(&mut stderr).await;
                }
                let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                break Err(NoKvm::Ended {
                    status,
                    said: first.trim().to_string(),
                });
            }
            Ok(None) if panicked(&read()) => break Ok(()),
            Ok(None) if started.elapsed() > PROBE_LIMIT => {
                break Err(NoKvm::TimedOut {
                    printed: !read().is_empty(),
                });
            }
            Ok(None) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => break Err(NoKvm::CannotRun(e)),
        }
    };
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = std::fs::remove_file(&console);
    result
}

/// What QEMU VMs need on this machine.
pub const TOOLS: &[Tool] = &[
    tool("qemu-system-x86_64", Some("--version"), "qemu-system-x86"),
    tool("qemu-img", Some("--version"), "qemu-utils"),
    tool("ssh-keygen", None, "openssh-client"),
];

impl VmProvider for Qemu {
    fn name(&self) -> &'static str {
        "qemu"
    }

    fn tools(&self) -> &'static [Tool] {
        TOOLS
    }

    fn is_running(&self, facts: &Facts) -> bool {
        self.running(facts)
    }

    fn destroy<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(self.destroy_vm(facts))
    }

    fn destroyed(&self) -> &'static str {
        "stopped, its disk deleted"
    }

    fn sweep<'a>(&'a self, keep: &'a BTreeSet<String>) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(self.sweep_vms(keep))
    }

    /// Only envc's directory for it goes: its QEMU runs on, its disk stays.
    fn release<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<String, StepError>> {
        Box::pin(async move {
            if let Some(d) = facts.get(fact::DIR) {
                remove_dir(Path::new(d))?;
            }
            Ok(format!(
                "left running as it was found: adopted (its disk {} stays; `destroy --adopted` stops it and deletes the disk)",
                adopted_disk(facts).unwrap_or_default()
            ))
        })
    }

    /// The VM's directory is renamed to the new name, QEMU left running: it holds its disk
    /// and console open, and is known by the disk path it was started with (kept in
    /// `started-as`) until it next starts. Done twice (a run killed before it recorded the
    /// move), it finds the directory already renamed.
    fn moved(&self, facts: &Facts, name: &str) -> Result<Facts, StepError> {
        let Some(old) = facts.get(fact::DIR).map(PathBuf::from) else {
            return Ok(facts.clone());
        };
        let new = self.vm_dir(name);
        if old == new {
            return Ok(facts.clone());
        }
        if old.exists() {
            if new.exists() {
                return Err(StepError::new(format!(
                    "cannot move VM `{name}`'s directory: {} is there already",
                    new.display()
                )));
            }
            if running_pid(&old).is_some() {
                let started: Vec<String> = std::iter::once(old.join(DISK).display().to_string())
                    .chain(started_as(&old))
                    .collect();
                let text = started.join("\n") + "\n";
                std::fs::write(old.join(STARTED_AS), text).map_err(|e| {
                    StepError::new(format!(
                        "cannot write {}: {e}",
                        old.join(STARTED_AS).display()
                    ))
                })?;
            }
            std::fs::rename(&old, &new).map_err(|e| {
                StepError::new(format!(
                    "cannot move {} to {}: {e}",
                    old.display(),
                    new.display()
                ))
            })?;
        }
        let mut facts = facts.clone();
        let dir = new.display().to_string();
        facts.insert(fact::DIR.to_string(), dir.clone());
        facts.insert(fact::INSTANCE_ID.to_string(), dir);
        Ok(facts)
    }
}

/// The disk paths the QEMU of a renamed VM's directory was started with.
fn started_as(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(STARTED_AS))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        let check =
            |input: &str, expected: &str| assert_eq!(base64_encode(input.as_bytes()), expected);
        check("", "");
        check("f", "Zg==");
        check("fo", "Zm8=");
        check("foo", "Zm9v");
        check(
            "ssh-ed25519 AAAA envc\n",
            "c3NoLWVkMjU1MTkgQUFBQSBlbnZjCg==",
        );
    }

    #[test]
    fn the_host_key_comes_from_the_last_console_line_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("c");
        let k1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFtrLGaZm1eKVAChFbi9WgDHC7XQqEGEqXgBrdO2Zp1m";
        let k2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOg3L4ETtbrbZ/3EA41XPKo0hz2GTO7dLSWMiNBwJ8Pj";
        std::fs::write(&console, "boot\n").unwrap();
        assert_eq!(console_host_key(&console), None);
        std::fs::write(
            &console,
            format!("[  1.0] x\r\n{HOST_KEY_LINE}{k1} root@a\r\nmore\n{HOST_KEY_LINE}{k2}\n"),
        )
        .unwrap();
        let key = console_host_key(&console).unwrap();
        assert_eq!(key.key, k2);
        assert!(key.fingerprint.starts_with("SHA256:"));
        assert!(console_tail(&console, 2).contains("more"));
    }

    #[test]
    fn a_pid_file_counts_only_for_a_live_qemu_of_this_vm() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running_pid(dir.path()), None);
        // This test process lives, but its command line does not name the VM's disk.
        std::fs::write(dir.path().join(PID), std::process::id().to_string()).unwrap();
        assert_eq!(running_pid(dir.path()), None);
        assert!(qemu_path(Path::new("/a,b")).is_err());
    }
}
