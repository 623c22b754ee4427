//! Adopting a QEMU VM made outside envc (`adopt "vm:NAME" from { disk = …, port = … }`):
//! its QEMU process is found by the disk it runs (its command line, `/proc/PID/cmdline`),
//! what it was started with is compared with what the source declares (memory, cpus,
//! kernel, image, disk size: what the command line and the disk's header say, nothing
//! guessed), and envc logs in on the port with its login key. Taking it over writes only
//! envc's own directory for it (`machines/ENV/NAME/`: the pid file, the disk path QEMU was
//! started with, and the `adopted` mark); the VM is neither stopped nor rebooted, and its
//! disk stays where it is.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::StepError;
use crate::record::{DriftFacts, Facts};
use crate::store::ObjectId;
use crate::transport::{fingerprint, HostKey, HostSpec, SshOptions, Transport};
use crate::vm::provider::{Realized, VmSpec};
use crate::vm::qemu::{fact, Qemu, ADOPTED_DISK};

/// A VM found where an `adopt` line says.
pub struct FoundVm {
    pub realized: Realized,
    /// (what, the source's, found): what the source declares that the VM does not have.
    /// Shown, never changed: a running VM is not resized or re-imaged.
    pub differences: DriftFacts,
    pub pid: i32,
}

/// A QEMU process: its pid and arguments.
struct Process {
    pid: i32,
    args: Vec<String>,
}

impl Qemu {
    /// Finds the VM `from` names and logs in to it; with `take`, also writes envc's
    /// directory for it, so that it is known as this node's from now on.
    pub async fn find_adopted(
        &self,
        spec: &VmSpec,
        from: &BTreeMap<String, String>,
        ssh: &SshOptions,
        take: bool,
    ) -> Result<FoundVm, StepError> {
        let disk = from.get("disk").map(String::as_str).unwrap_or_default();
        let port: u16 = (from.get("port"))
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| StepError::new("`from` names no port"))?;
        let meta = std::fs::metadata(disk).map_err(|e| {
            StepError::with_hint(
                format!("its disk {disk} cannot be read: {e}"),
                "write in `disk` the path of the disk image the VM's QEMU runs",
            )
        })?;
        let mut found = qemu_processes_with(&meta);
        let process = match found.len() {
            1 => found.remove(0),
            0 => {
                return Err(StepError::with_hint(
                    format!("no QEMU process runs with the disk {disk}"),
                    format!("start the VM (its ssh forwarded to 127.0.0.1:{port}) and build again, or remove the `adopt` line to let envc make the machine"),
                ))
            }
            _ => {
                let pids: Vec<String> = found.iter().map(|p| p.pid.to_string()).collect();
                return Err(StepError::with_hint(
                    format!(
                        "{} QEMU processes run with the disk {disk} (pids {})",
                        found.len(),
                        pids.join(", ")
                    ),
                    "stop all but the VM to adopt",
                ));
            }
        };
        let forwarded = ssh_forwards(&process.args);
        if !forwarded.is_empty() && !forwarded.contains(&port) {
            let ports: Vec<String> = forwarded.iter().map(u16::to_string).collect();
            return Err(StepError::with_hint(
                format!(
                    "QEMU (pid {}) forwards port {} to the guest's ssh, not {port}",
                    process.pid,
                    ports.join(", ")
                ),
                format!("write `port = {}`", ports[0]),
            ));
        }
        let login = self.key.public().await?;
        let known = match from.get("host_key") {
            Some(k) => {
                let key = k.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                Some(HostKey {
                    fingerprint: fingerprint(&key).ok_or_else(|| {
                        StepError::new(format!("`host_key` is not a public key: {k}"))
                    })?,
                    key,
                })
            }
            None => None,
        };
        let host = HostSpec {
            name: spec.name.clone(),
            address: "127.0.0.1".into(),
            port,
            user: spec.user.clone(),
            identity: Some(self.key.path.clone()),
        };
        let opts = SshOptions {
            connect_timeout: Duration::from_secs(10),
            ..ssh.clone()
        };
        let (transport, key) = Transport::connect(&host, known.as_ref(), &opts)
            .await
            .map_err(|e| {
                StepError::with_hint(
                    format!(
                        "QEMU (pid {}) runs, but 127.0.0.1:{port} does not let envc in as {}: {e}",
                        process.pid, spec.user
                    ),
                    format!(
                        "envc logs in with its key {}: add `{login}` to {}'s authorized_keys on the VM",
                        self.key.path.display(),
                        spec.user
                    ),
                )
            })?;
        let address = guest_address(&transport).await;
        let started_with = drive_path(&process.args, &meta).unwrap_or_else(|| disk.to_string());
        let differences = self.differences(spec, &process.args, Path::new(disk));
        let dir = self.vm_dir_of(&spec.name);
        let mut facts = Facts::from([
            (fact::ADDRESS.to_string(), address.clone()),
            (fact::PUBLIC_ADDRESS.to_string(), address),
            (fact::INSTANCE_ID.to_string(), dir.display().to_string()),
            (fact::SSH_ADDRESS.to_string(), "127.0.0.1".to_string()),
            (fact::PORT.to_string(), port.to_string()),
            (fact::USER.to_string(), spec.user.clone()),
            (fact::HOST_KEY.to_string(), key.key.clone()),
            (fact::FINGERPRINT.to_string(), key.fingerprint.clone()),
            (fact::DIR.to_string(), dir.display().to_string()),
            (ADOPTED_DISK.to_string(), started_with.clone()),
        ]);
        if take {
            self.take_over(&dir, process.pid, &started_with)?;
        } else {
            facts.remove(fact::DIR);
        }
        Ok(FoundVm {
            realized: (facts, transport, key),
            differences,
            pid: process.pid,
        })
    }

    /// What the source declares that QEMU's command line and the disk say otherwise.
    fn differences(&self, spec: &VmSpec, args: &[String], disk: &Path) -> DriftFacts {
        let mut out = DriftFacts::new();
        let memory = option(args, "-m").map_or(Some(128), memory_mib);
        if memory != Some(spec.memory_mib) {
            out.push((
                "memory".into(),
                format!("{} MiB", spec.memory_mib),
                memory.map_or("unreadable".into(), |m| format!("{m} MiB")),
            ));
        }
        let cpus = option(args, "-smp").map_or(Some(1), cpus);
        if cpus != Some(spec.cpus) {
            out.push((
                "cpus".into(),
                spec.cpus.to_string(),
                cpus.map_or("unreadable".into(), |c| c.to_string()),
            ));
        }
        let kernel = option(args, "-kernel");
        if kernel.and_then(|k| object_of(Path::new(k))) != Some(spec.kernel) {
            out.push((
                "kernel".into(),
                format!("the image's ({:?})", spec.kernel),
                kernel.map_or("its disk's own boot loader".into(), str::to_string),
            ));
        }
        let (backing, size) = disk_header(disk);
        if backing.as_deref().and_then(|b| object_of(Path::new(b))) != Some(spec.disk_image) {
            out.push((
                "image".into(),
                format!("a disk over the image's ({:?})", spec.disk_image),
                backing.map_or("a disk of its own".into(), |b| format!("a disk over {b}")),
            ));
        }
        if let Some(size) = size.filter(|s| *s != spec.disk_bytes) {
            out.push((
                "disk".into(),
                format!("{} MiB", spec.disk_bytes >> 20),
                format!("{} MiB", size >> 20),
            ));
        }
        out
    }

    /// envc's directory for an adopted VM: how its QEMU is known (pid, the disk path it
    /// was started with) and the mark that it is not envc's to stop or delete.
    fn take_over(&self, dir: &Path, pid: i32, disk: &str) -> Result<(), StepError> {
        if dir.exists() {
            if self.running_in(dir) {
                return Err(StepError::new(format!(
                    "{} holds a VM envc runs already; it is not replaced by an adopted one",
                    dir.display()
                )));
            }
            let _ = std::fs::remove_dir_all(dir);
        }
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).map_err(|e| {
                StepError::new(format!("cannot write {}: {e}", dir.join(name).display()))
            })
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| StepError::new(format!("cannot create {}: {e}", dir.display())))?;
        write(super::qemu::STARTED_AS, format!("{disk}\n"))?;
        write(super::qemu::ADOPTED, format!("{disk}\n"))?;
        write(super::qemu::PID, format!("{pid}\n"))
    }
}

/// The live QEMU processes one of whose arguments (or `file=` option) is the file `disk`
/// (the same device and inode, however the path is spelt).
fn qemu_processes_with(disk: &std::fs::Metadata) -> Vec<Process> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<Process> = procs
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            if stat.rsplit_once(')')?.1.split_whitespace().next()? == "Z" {
                return None;
            }
            let args: Vec<String> = (cmdline.split(|b| *b == 0))
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let program = Path::new(args.first()?).file_name()?.to_str()?;
            if !program.starts_with("qemu-system") && !program.starts_with("qemu-kvm") {
                return None;
            }
            let process = Process { pid, args };
            drive_path(&process.args, disk).map(|_| process)
        })
        .collect();
    out.sort_by_key(|p| p.pid);
    out
}

/// The argument (or `file=` value) of `args` that is the file `disk`.
fn drive_path(args: &[String], disk: &std::fs::Metadata) -> Option<String> {
    let same = |p: &str| {
        std::fs::metadata(p).is_ok_and(|m| m.dev() == disk.dev() && m.ino() == disk.ino())
    };
    args.iter()
        .flat_map(|a| {
            std::iter::once(a.as_str()).chain(a.split(',').filter_map(|o| o.strip_prefix("file=")))
        })
        .filter(|p| p.contains('/') || Path::new(p).exists())
        .find(|p| same(p))
        .map(str::to_string)
}

/// The value after option `name` (`-m 512`).
fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

/// `-m`'s value in MiB: `512`, `512M`, `2G`, `size=1G,slots=…`.
fn memory_mib(v: &str) -> Option<u64> {
    let v = (v.split(',').find_map(|o| o.strip_prefix("size="))).unwrap_or(v.split(',').next()?);
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" | "MIB" => Some(n),
        "G" | "GB" | "GIB" => Some(n << 10),
        "T" => Some(n << 20),
        "K" => Some(n >> 10),
        _ => None,
    }
}

/// `-smp`'s cpus: `2`, `cpus=2,sockets=1`, `2,cores=2`.
fn cpus(v: &str) -> Option<u32> {
    let first = v.split(',').next()?;
    (v.split(',').find_map(|o| o.strip_prefix("cpus=")))
        .unwrap_or(first)
        .parse()
        .ok()
}

/// The host ports forwarded to the guest's port 22 (`hostfwd=tcp:127.0.0.1:2222-:22`).
fn ssh_forwards(args: &[String]) -> Vec<u16> {
    (args.iter().flat_map(|a| a.split(',')))
        .filter_map(|o| o.strip_prefix("hostfwd="))
        .filter_map(|f| {
            let (host, guest) = f.split_once('-')?;
            (guest.rsplit(':').next()? == "22").then_some(())?;
            host.rsplit(':').next()?.parse().ok()
        })
        .collect()
}

/// The store object a path names (`…/objects/ab/cdef…`), if it is one.
fn object_of(path: &Path) -> Option<ObjectId> {
    let name = path.file_name()?.to_str()?;
    let dir = path.parent()?.file_name()?.to_str()?;
    ObjectId::parse(&format!("{dir}{name}")).filter(|_| dir.len() == 2)
}

/// A disk's backing file and virtual size: from its qcow2 header, or a raw disk's length.
fn disk_header(disk: &Path) -> (Option<String>, Option<u64>) {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(disk) else {
        return (None, None);
    };
    let mut h = [0u8; 32];
    if f.read_exact(&mut h).is_err() || h[..4] != *b"QFI\xfb" {
        return (None, f.metadata().ok().map(|m| m.len()));
    }
    let be64 = |b: &[u8]| b.try_into().map(u64::from_be_bytes).unwrap_or(0);
    let offset = be64(&h[8..16]);
    let len = h[16..20].try_into().map(u32::from_be_bytes).unwrap_or(0);
    let size = be64(&h[24..32]);
    let mut backing = None;
    if offset > 0 && (1..=4096).contains(&len) && f.seek(SeekFrom::Start(offset)).is_ok() {
        let mut name = vec![0u8; len as usize];
        if f.read_exact(&mut name).is_ok() {
            let name = String::from_utf8_lossy(&name).into_owned();
            // Relative to the disk's directory.
            backing = Some(match Path::new(&name).is_absolute() {
                true => name,
                false => (disk
                    .parent()
                    .map_or(PathBuf::from(&name), |d| d.join(&name)))
                .display()
                .to_string(),
            });
        }
    }
    (backing, Some(size))
}

/// The guest's address for other machines: one on envc's private network (`10.89.0.N`) if
/// it has one, else its first that is not loopback, else the forwarded loopback.
async fn guest_address(t: &Transport) -> String {
    let out = t.run(&["hostname", "-I"], b"").await;
    let text = out
        .ok()
        .filter(|o| o.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text
        .split_whitespace()
        .filter(|a| !a.contains(':'))
        .collect();
    (all.iter().find(|a| a.starts_with("10.89.0.")))
        .or(all.first())
        .map_or("127.0.0.1".to_string(), |a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn a_command_line_says_memory_cpus_and_the_ssh_port() {
        assert_eq!(memory_mib("512"), Some(512));
        assert_eq!(memory_mib("2G"), Some(2048));
        assert_eq!(memory_mib("size=1G,slots=2,maxmem=4G"), Some(1024));
        assert_eq!(memory_mib("lots"), None);
        assert_eq!(cpus("2"), Some(2));
        assert_eq!(cpus("cpus=4,sockets=1"), Some(4));
        let a = args("qemu-system-x86_64 -m 768 -netdev user,id=n0,hostfwd=tcp:127.0.0.1:2222-:22,hostfwd=tcp::8080-:80");
        assert_eq!(ssh_forwards(&a), vec![2222]);
        assert_eq!(option(&a, "-m"), Some("768"));
        assert_eq!(option(&a, "-smp"), None);
        let id = ObjectId::of(b"x");
        let hex = id.hex();
        let p = PathBuf::from(format!("/s/objects/{}/{}", &hex[..2], &hex[2..]));
        assert_eq!(object_of(&p), Some(id));
        assert_eq!(object_of(Path::new("/var/lib/vms/legacy.qcow2")), None);
    }

    #[test]
    fn a_disk_is_named_by_its_file_however_the_path_is_spelt() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("d.qcow2");
        std::fs::write(&disk, b"raw").unwrap();
        let meta = std::fs::metadata(&disk).unwrap();
        let spelt = format!("{}/./d.qcow2", dir.path().display());
        let a = vec![
            "qemu-system-x86_64".to_string(),
            "-drive".to_string(),
            format!("file={spelt},if=none,format=qcow2"),
        ];
        assert_eq!(drive_path(&a, &meta), Some(spelt));
        assert_eq!(drive_path(&a[..1], &meta), None);
        assert_eq!(disk_header(&disk), (None, Some(3)));
    }
}
