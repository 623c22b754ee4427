//! Machines end to end: an image built by envc from Debian's archive, a real QEMU VM booted
//! from it (TCG unless KVM works), configured over ssh, and the VM's lifecycle: rebuild as a
//! no-op, a service restarted by a change, a VM found dead started again from its disk, a
//! removed service stopped, `destroy` leaving no process, disk or port. And `verify`: the
//! image built again is the same bits, a lab VM deployed from the lockfile has the same
//! facts, and an image made non-reproducible on purpose is caught by the differing path.
//!
//! Slow (a few minutes under TCG), so it is one test that walks the whole life of a VM, and
//! beside it, on the other core, one that builds an image from its pinned `.deb`s, rebuilds
//! it with no network from the store alone, and once more with noise in it.
//! (A locked build whose archive moved under the lock is `image.rs`'s unit test: here it
//! cost a whole image build.)
//! envc needs no root: the VM's whole life runs as `envc-test`, the ordinary user
//! `./scripts/setup` makes (with subordinate ids, as `adduser` gives any user), and its
//! image is the golden's, bit for bit what root builds beside it. The test itself runs as
//! root (the offline rebuild needs a network namespace; setpriv switches users).
//! `./scripts/setup` installs mmdebstrap, uidmap and qemu-system-x86.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::tool_shims::{locked_tool, KvmHangs, ToolShims};
use crate::support::{output, ssh_config};
use output::{summary, text};

const ENV: &str = r#"
import "std/debian"

param greeting: str = "hello"
param with_service: bool = true
param memory: size = 512MiB
param extra: bool = false
param host_port: int = 0

let vm0 = debian.machine("t-0", memory = memory, disk = 3GiB)
let more = if extra { [debian.machine("t-1", memory = 256MiB)] } else { [] }

let hello = package(name = "hello", target = vm0)
let conf = file(
  path = "/etc/envc-test.conf",
  content = "greeting=${greeting}\naddress=${vm0.address}\n",
  target = vm0,
)
let tick = if with_service {
  [{
    unit = file(
      path = "/etc/systemd/system/envc-tick.service",
      content = """
      [Unit]
      Description=envc test service
      [Service]
      ExecStart=/bin/sh -c 'cp /etc/envc-test.conf /run/envc-tick; exec sleep infinity'
      [Install]
      WantedBy=multi-user.target
      """,
      target = vm0,
    ),
  }]
} else {
  []
}
let services = [for t in tick => service(name = "envc-tick", target = vm0, after = [t.unit, hello], restart_on = [t.unit, conf])]

# The VM again, reached as an existing machine by its forwarded port, declaring the image
# it was provisioned from: verify's lab boots a fresh VM from that to stand in for it.
let h = if host_port > 0 {
  [host(name = "h", address = "127.0.0.1", port = host_port, base = debian.default_image)]
} else {
  []
}
let on_h = [for x in h => file(path = "/etc/envc-host.conf", content = "reached as a host\n", target = x)]

output address = vm0.address
output port = vm0.port
output image = vm0.image.digest
"#;

/// An environment with only the image of `ENV`: to build it alone into another store.
const IMAGE_ONLY: &str = r#"
import "std/debian"
output image = debian.default_image.digest
output kernel = debian.default_image.kernel
"#;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ordinary user `scripts/setup` makes for these tests.
const TEST_USER: &str = "envc-test";

struct Project {
    dir: tempfile::TempDir,
    /// Who runs envc: root, or `TEST_USER`.
    as_user: bool,
    /// Where tools are stood in for (`ToolShims`), first on envc's `PATH`.
    shims: Option<PathBuf>,
}

/// An ordinary user's login `PATH` on Debian (`su -l`): no `/usr/sbin`, where `mke2fs`,
/// `debugfs` and `e2fsck` are. envc finds them there all the same.
const USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/games";

impl Project {
    fn new(name: &str, text: &str) -> Project {
        let dir = tempfile::Builder::new()
            .prefix("envc-vm-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join(name), text).unwrap();
        Project {
            dir,
            as_user: false,
            shims: None,
        }
    }

    /// A project of `TEST_USER`'s, in a directory only it may enter (mode 0700, as a home
    /// directory can be): what mmdebstrap's unshared root reads must not come from there.
    fn of_test_user(name: &str, source: &str, lock: Option<&Path>) -> Project {
        let mut p = Project::new(name, source);
        if let Some(lock) = lock {
            let to = p.dir.path().join(name.replace(".env", ".lock"));
            std::fs::copy(lock, to).unwrap();
        }
        let o = Command::new("chown")
            .args(["-R", &format!("{TEST_USER}:{TEST_USER}")])
            .arg(p.dir.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "no user {TEST_USER} (./scripts/setup makes it): {}",
            text(&o)
        );
        p.as_user = true;
        p
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join(".envc")
    }

    fn envc(&self, file: &str, args: &[&str]) -> Output {
        self.command(file, args).output().unwrap()
    }

    fn command(&self, file: &str, args: &[&str]) -> Command {
        let mut cmd = if self.as_user {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={TEST_USER}"))
                .arg(format!("--regid={TEST_USER}"))
                .args(["--init-groups", "--", env!("CARGO_BIN_EXE_envc")])
                .env("HOME", self.dir.path())
                .env("USER", TEST_USER)
                .env("LOGNAME", TEST_USER)
                // A package cache of its own: one root shares would not be its to write.
                .env("ENVC_DEB_CACHE", self.dir.path().join("deb-cache"));
            c
        } else {
            let mut c = Command::new(env!("CARGO_BIN_EXE_envc"));
            // Downloaded packages are shared between builds (and test runs): apt checks
            // them against the archive's signed index, so they cannot change an image.
            c.env("ENVC_DEB_CACHE", repo().join("target/envc-cache"));
            c
        };
        cmd.arg(args[0])
            .arg(self.dir.path().join(file))
            .args(&args[1..])
            .env_remove("ENVC_STORE")
            // `build` is not forced to be locked; the lockfile is used where there is one.
            .env_remove("CI")
            // The host `h` is the VM again: envc reaches it with the VMs' key.
            .env("ENVC_SSH_CONFIG", self.ssh_config())
            .stdin(Stdio::null());
        let base = match self.as_user {
            true => USER_PATH.to_string(),
            false => std::env::var("PATH").unwrap_or_default(),
        };
        cmd.env(
            "PATH",
            match &self.shims {
                Some(dir) => format!("{}:{base}", dir.display()),
                None => base,
            },
        );
        cmd
    }

    fn ssh_config(&self) -> PathBuf {
        ssh_config::write(self.dir.path(), &self.store().join("machines/id_ed25519"))
    }
}

/// A failing test leaves no VM running: QEMU is daemonized and would outlive it.
impl Drop for Project {
    fn drop(&mut self) {
        let Ok(envs) = std::fs::read_dir(self.store().join("machines")) else {
            return;
        };
        for vm in envs
            .flatten()
            .filter_map(|e| std::fs::read_dir(e.path()).ok())
            .flatten()
        {
            if let Ok(pid) = std::fs::read_to_string(vm.unwrap().path().join("qemu.pid")) {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
    }
}

fn build_ok(p: &Project, args: &[&str]) -> (usize, usize) {
    let mut all = vec!["build"];
    all.extend_from_slice(args);
    let o = p.envc("t.env", &all);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (ran, cached, failed) = summary(&o);
    assert_eq!(failed, 0, "{}", text(&o));
    (ran, cached)
}

fn outputs(p: &Project, file: &str) -> serde_json::Value {
    let o = p.envc(file, &["output", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Runs `command` in the VM over ssh, as root, with the store's key.
fn in_vm(p: &Project, port: u64, command: &str) -> String {
    let o = Command::new("ssh")
        .args([
            "-q",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
        ])
        .args([
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .arg("-i")
        .arg(p.store().join("machines/id_ed25519"))
        .args(["-p", &port.to_string(), "root@127.0.0.1", command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "in the VM: {command}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The phases `envc verify` said it went through, in order.
fn phases(o: &Output) -> Vec<String> {
    (String::from_utf8_lossy(&o.stderr).lines())
        .filter_map(|l| l.strip_prefix("verify: "))
        .map(str::to_string)
        .collect()
}

fn vm_dir(p: &Project) -> PathBuf {
    p.store().join("machines/t/t-0")
}

fn qemu_pid(p: &Project) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(vm_dir(p).join("qemu.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (!ended_now(pid)).then_some(pid)
}

#[test]
fn a_vm_from_a_reproducible_image_lives_its_whole_life() {
    // All of it as an ordinary user: the image, the VM, its configuration and `verify`.
    // Locked against Debian's archive: `verify` rebuilds from the lockfile. The image's
    // pins are the quickstart's, so it is the golden's image (`lock` adds `hello`).
    let mut p = Project::of_test_user("t.env", ENV, Some(&repo().join("examples/quickstart.lock")));
    let o = p.envc("t.env", &["lock"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // From here on, this machine is at another patch level than the lock's, and its KVM
    // opens but runs no guest: ssh and QEMU report other Debian revisions of the locked
    // upstream versions, and a VM that QEMU is asked to run under KVM never prints (the
    // probe's kernel still boots, as where the probe passed and every guest then hung).
    // (Each a revision past the lock's, whatever this machine has.)
    let lock = std::fs::read_to_string(p.dir.path().join("t.lock")).unwrap();
    let ssh = format!("{}+shim1", locked_tool(&lock, "ssh"));
    let qemu = format!("{}+shim1", locked_tool(&lock, "qemu-system-x86_64"));
    let shims = ToolShims::new(&p.dir.path().join("shims"));
    shims.ssh(&ssh);
    shims.qemu(&qemu, KvmHangs::Machines);
    p.shims = Some(shims.dir.clone());

    // Cold and locked: the image is built, the VM created and configured. The other
    // revisions are said and do not stop the build: ssh carries bytes, QEMU runs the image.
    // The boot timeout is far below the 300 s default: only a guest found hung within
    // seconds and started again under TCG boots in time.
    let o = p.envc("t.env", &["build", "--locked", "--boot-timeout", "150"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (ran, _, failed) = summary(&o);
    assert_eq!(
        (ran, failed),
        (6, 0),
        "image, vm, package, two files, service"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    for (tool, version) in [("ssh", &ssh), ("qemu-system-x86_64", &qemu)] {
        assert!(
            err.contains(&format!("note: {tool} is {version} here")),
            "{err}"
        );
    }
    // The probe's kernel booted under "KVM"; the VM printed nothing, so it was stopped and
    // started under TCG, which the rest of the machine's boot then uses.
    assert_eq!(
        shims.qemu_log(),
        [
            "kvm=yes daemonize=no hang=no",
            "kvm=yes daemonize=yes hang=yes",
            "kvm=no daemonize=yes hang=no"
        ]
    );
    let accel = std::fs::read_to_string(p.store().join("machines/accel")).unwrap();
    assert!(
        accel.starts_with("tcg ")
            && accel.contains("`t-0` printed nothing on its console in 15 s under KVM"),
        "{accel}"
    );
    // The run record holds the tools as they were found here.
    let log = p.envc("t.env", &["log", "--json"]);
    let run: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&log.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(run["tools"]["ssh"], ssh.as_str(), "{run}");
    assert_eq!(run["tools"]["qemu-system-x86_64"], qemu.as_str(), "{run}");
    // Built without root, it is the bits root built where the golden was written (and
    // builds beside this test, in the next one). Only the bits: adding `hello` moved the
    // archive pins its image hash covers, not one of the image's `.deb`s.
    same_bits_as_golden(&p);
    let out = outputs(&p, "t.env");
    let port = out["port"].as_u64().unwrap();
    let address = out["address"].as_str().unwrap().to_string();
    // The first VM of the environment by name: the same address on every rebuild.
    assert_eq!(address, "10.89.0.10", "{out}");
    assert_eq!(in_vm(&p, port, "hostname"), "t-0");
    assert_eq!(
        in_vm(&p, port, "cat /etc/envc-test.conf"),
        format!("greeting=hello\naddress={address}")
    );
    assert!(in_vm(&p, port, "dpkg-query -W hello").starts_with("hello\t"));
    assert_eq!(
        in_vm(
            &p,
            port,
            "systemctl is-enabled envc-tick; systemctl is-active envc-tick"
        ),
        "enabled\nactive"
    );
    // The address is the VM's own, on its private network; the disk grew to its size.
    assert!(in_vm(&p, port, "ip -4 -o addr show").contains(&format!("{address}/24")));
    let root_kib: u64 = in_vm(&p, port, "df --output=size -k / | tail -1")
        .parse()
        .unwrap();
    assert!(root_kib > 2_500_000, "root is {root_kib} KiB");

    // Again: nothing runs, the VM is found running.
    assert_eq!(build_ok(&p, &[]).0, 0);

    // Another project adopts it, a VM made outside envc from where it stands, and hands it
    // back as it found it.
    adopted_by_another_project(&p, port);
    assert_eq!(
        build_ok(&p, &[]).0,
        0,
        "the VM is still this project's, as it was"
    );

    // A change to what the service reads restarts it: the file and the service run.
    let pid_before = in_vm(&p, port, "systemctl show -p MainPID --value envc-tick");
    assert_eq!(build_ok(&p, &["--set", "greeting=\"bonjour\""]).0, 2);
    assert_eq!(
        in_vm(&p, port, "cat /run/envc-tick"),
        format!("greeting=bonjour\naddress={address}")
    );
    assert_ne!(
        in_vm(&p, port, "systemctl show -p MainPID --value envc-tick"),
        pid_before
    );

    // A resized VM would be replaced: the plan says so (not built: it takes a new boot).
    let o = p.envc(
        "t.env",
        &[
            "plan",
            "--set",
            "greeting=\"bonjour\"",
            "--set",
            "memory=768MiB",
        ],
    );
    // Everything on it would be created again: a new VM is a new target.
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains("replace   vm:t-0"), "{}", text(&o));
    assert!(
        plan.contains("create    t-0/file:/etc/envc-test.conf"),
        "{}",
        text(&o)
    );

    // A VM that does not answer in time fails with its console, and is not left running.
    let o = p.envc(
        "t.env",
        &[
            "build",
            "--set",
            "greeting=\"bonjour\"",
            "--set",
            "extra=true",
            "--boot-timeout",
            "2",
        ],
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`t-1` did not answer ssh within 2 s: it "),
        "{err}"
    );
    assert!(
        err.contains("console") && err.contains("last lines"),
        "{err}"
    );
    // (QEMU deletes its pid file as it stops: look for the process itself.)
    let t1 = p.store().join("machines/t/t-1");
    assert!(t1.join("console.log").exists(), "the console log is kept");
    assert!(
        processes_naming(&t1).is_empty(),
        "the VM that timed out still runs"
    );

    // The VM dies: the next build starts it again from its disk, and only the VM runs.
    // (Its root is remounted read-only first, as sysrq's emergency remount does: with
    // nothing in flight, the kill cannot cost the guest file system anything. A `sync`
    // alone was not enough: writes after it, at the kill, sometimes left a root that did
    // not mount, or a unit file with older content. What a crash loses is the guest file
    // system's to recover; this checks envc's side, finding the VM dead and starting it
    // again.)
    in_vm(
        &p,
        port,
        "sync; echo 1 > /proc/sys/kernel/sysrq; echo u > /proc/sysrq-trigger; sleep 2; \
         grep -E ' / .* ro[ ,]' /proc/mounts >/dev/null",
    );
    let pid = qemu_pid(&p).expect("QEMU runs");
    kill_hard(pid);
    // Now the probe's kernel hangs too, on a machine whose answer is not known yet: the
    // restart probes, finds no guest running under KVM and boots under TCG at once.
    shims.qemu(&qemu, KvmHangs::Always);
    std::fs::remove_file(p.store().join("machines/accel")).unwrap();
    let before = shims.qemu_log().len();
    let o = p.envc("t.env", &["plan", "--set", "greeting=\"bonjour\""]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("drift: running was yes, found no"),
        "{}",
        text(&o)
    );
    assert_eq!(build_ok(&p, &["--set", "greeting=\"bonjour\""]).0, 1);
    assert_eq!(
        shims.qemu_log()[before..],
        [
            "kvm=yes daemonize=no hang=yes",
            "kvm=no daemonize=yes hang=no"
        ]
    );
    let accel = std::fs::read_to_string(p.store().join("machines/accel")).unwrap();
    assert!(
        accel.starts_with("tcg ") && accel.contains("printed nothing in 30 s"),
        "{accel}"
    );
    let port = outputs(&p, "t.env")["port"].as_u64().unwrap();
    assert!(in_vm(&p, port, "cat /etc/envc-test.conf").contains("bonjour"));

    // The service leaves the source: it is stopped and disabled, its unit file deleted.
    let o = p.envc(
        "t.env",
        &[
            "build",
            "--set",
            "greeting=\"bonjour\"",
            "--set",
            "with_service=false",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // (What the build said of each removal is in the message: a file left in place says
    // why.)
    assert_eq!(
        in_vm(
            &p,
            port,
            "systemctl is-active envc-tick; test -e /etc/systemd/system/envc-tick.service && echo present || echo gone"
        ),
        "inactive\ngone",
        "{}",
        text(&o)
    );

    // A host: the VM again, reached as an existing machine by its forwarded port.
    let host_port = format!("host_port={port}");
    let params = [
        "--set",
        "greeting=\"bonjour\"",
        "--set",
        "with_service=false",
        "--set",
        &host_port,
    ];
    assert_eq!(build_ok(&p, &params).0, 2, "the host and its file");
    assert_eq!(
        in_vm(&p, port, "cat /etc/envc-host.conf"),
        "reached as a host"
    );

    // The lockfile rebuilds production: the image is the same bits built again in a
    // scratch store, and a lab deployed from the same source and lock has the same facts
    // and passing checks: a VM booted from the rebuilt image for the VM, a fresh VM from
    // its declared base for the host. The lab leaves nothing behind.
    let o = p.envc("t.env", &[&["verify"][..], &params].concat());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("bit for bit the same as production's record"),
        "{}",
        text(&o)
    );
    assert!(out.contains("lab: 6 nodes match, 0 differ"), "{}", text(&o));
    assert!(
        out.lines()
            .any(|l| l.starts_with("lab       host:h: host_key expected")
                && l.ends_with("(the lab's own machine: a fresh VM from the host's base)")),
        "{}",
        text(&o)
    );
    assert!(out.contains("verify: reproducible"), "{}", text(&o));
    // What it was doing, phase by phase, on stderr (a terminal gets a spinner instead).
    assert_eq!(
        phases(&o),
        [
            "rebuild image:debian-12 (1 of 1)",
            "boot the lab's 2 machines",
            "deploy in the lab",
            "compare with production",
            "tear the lab down"
        ],
        "{}",
        text(&o)
    );
    let labs = p.store().join("labs");
    assert_eq!(std::fs::read_dir(&labs).map(|d| d.count()).unwrap_or(0), 0);
    assert!(processes_naming(&labs).is_empty(), "a lab VM still runs");
    // The host leaves the source while the VM that it is still runs: its file is deleted.
    build_ok(&p, &params[..4]);
    assert_eq!(
        in_vm(
            &p,
            port,
            "test -e /etc/envc-host.conf && echo present || echo gone"
        ),
        "gone"
    );

    // The VM is renamed, with `moved`: the plan says so for it and what is on it, and the
    // build boots nothing and runs nothing there. The same QEMU goes on running from the
    // same disk, in its directory under the new name.
    let pid = qemu_pid(&p).expect("QEMU runs");
    let disk_inode = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(vm_dir(&p).join("disk.qcow2")).unwrap(),
    );
    let renamed = ENV.replace("debian.machine(\"t-0\"", "debian.machine(\"t-a\"")
        + "moved \"vm:t-0\" -> \"vm:t-a\"\n";
    std::fs::write(p.dir.path().join("t.env"), renamed).unwrap();
    let o = p.envc("t.env", &[&["plan"][..], &params[..4]].concat());
    let plan = String::from_utf8_lossy(&o.stdout);
    for (new, old) in [
        ("vm:t-a", "vm:t-0"),
        (
            "t-a/file:/etc/envc-test.conf",
            "t-0/file:/etc/envc-test.conf",
        ),
        ("t-a/package:hello", "t-0/package:hello"),
    ] {
        assert!(
            plan.contains(&format!("moved     {new}\n          moved from `{old}`")),
            "{}",
            text(&o)
        );
    }
    assert!(
        !plan
            .lines()
            .any(|l| l.starts_with("delete") || l.starts_with("create")),
        "{}",
        text(&o)
    );
    let o = p.envc("t.env", &[&["build"][..], &params[..4]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o).0, 0, "nothing ran: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(", 3 moved,"),
        "{}",
        text(&o)
    );
    let moved_dir = p.store().join("machines/t/t-a");
    assert!(!vm_dir(&p).exists(), "the old directory is left");
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(moved_dir.join("disk.qcow2")).unwrap()
        ),
        disk_inode,
        "another disk"
    );
    assert!(!ended_now(pid), "QEMU stopped");
    assert_eq!(
        std::fs::read_to_string(moved_dir.join("qemu.pid"))
            .unwrap()
            .trim(),
        pid.to_string()
    );
    assert_eq!(outputs(&p, "t.env")["port"].as_u64().unwrap(), port);
    assert!(in_vm(&p, port, "cat /etc/envc-test.conf").contains("bonjour"));
    // Found running under its new name: nothing to do, and the line can go.
    let o = p.envc("t.env", &[&["plan"][..], &params[..4]].concat());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("0 to delete, ")
            && !String::from_utf8_lossy(&o.stdout).contains("moved     "),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("nothing recorded under vm:t-0; this line can go"),
        "{}",
        text(&o)
    );

    // Destroy leaves nothing: no process, no disk, no port. (The renamed VM's QEMU is
    // found by the disk path it was started with.)
    let o = p.envc("t.env", &["destroy", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(ended(pid), "QEMU still runs");
    assert!(
        !p.store().join("machines/t").exists(),
        "VM directories are left (the one that timed out included)"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port as u16)).is_err(),
        "port {port} still answers"
    );
}

/// A project with a store of its own and no records (its image's objects linked in from
/// `p`'s store, so nothing is built) adopts `p`'s running VM by its disk and port: each
/// way of not finding it fails naming the line and the fix; found, it is taken over with
/// no boot (the same QEMU, the same disk) and what differs from its source is shown; a file
/// declared on it is placed; `destroy` removes that file and leaves the VM running.
fn adopted_by_another_project(p: &Project, port: u64) {
    let disk = vm_dir(p).join("disk.qcow2");
    let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&disk).unwrap());
    let (pid, disk_inode) = (qemu_pid(p).expect("QEMU runs"), inode());
    let source = |disk: &str, port: u64| {
        format!(
            r#"import "std/debian"
let vm0 = debian.machine("t-0", memory = 768MiB, disk = 3GiB)
let mark = file(path = "/etc/envc-adopted.conf", content = "adopted\n", target = vm0)
adopt "vm:t-0" from {{ disk = "{disk}", port = {port} }}
"#
        )
    };
    let lock = p.dir.path().join("t.lock");
    let b = Project::of_test_user("a.env", &source(disk.to_str().unwrap(), port), Some(&lock));
    std::fs::create_dir_all(b.store()).unwrap();
    for dir in ["objects", "substitutes"] {
        let o = Command::new("cp")
            .arg("-al")
            .arg(p.store().join(dir))
            .arg(b.store().join(dir))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = Command::new("chown")
        .args(["-R", &format!("{TEST_USER}:{TEST_USER}")])
        .arg(b.store())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let write = |text: String| std::fs::write(b.dir.path().join("a.env"), text).unwrap();
    // Its image first, from the store (built before): then the plan knows what the VM is.
    let o = b.envc("a.env", &["build", "--only", "image:*"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o).0, 1, "{}", text(&o));
    assert!(
        text(&o).contains("from the store (built before)"),
        "{}",
        text(&o)
    );

    // envc's login key of this store is not the VM's: the plan says so and how to fix it,
    // the build fails naming the line, and nothing is booted.
    let o = b.envc("a.env", &["plan"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        plan.contains("adopt     vm:t-0\n          `vm:t-0` is adopted (line a.env:4:1), but it was not found:")
            && plan.contains(&format!("but 127.0.0.1:{port} does not let envc in as root"))
            && plan.contains("authorized_keys on the VM"),
        "{}",
        text(&o)
    );
    let o = b.envc("a.env", &["build"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("`vm:t-0` is adopted (line a.env:4:1), but it was not found"),
        "{}",
        text(&o)
    );
    assert_eq!(qemu_pid(p), Some(pid), "{}", text(&o));
    let key = std::fs::read_to_string(b.store().join("machines/id_ed25519.pub")).unwrap();
    let key = key.trim();
    in_vm(
        p,
        port,
        &format!("echo '{key}' >> /root/.ssh/authorized_keys"),
    );

    // A port its QEMU does not forward to ssh, a disk no QEMU runs: each named, with the fix.
    write(source(disk.to_str().unwrap(), port + 1));
    let o = b.envc("a.env", &["plan"]);
    assert!(
        text(&o).contains(&format!(
            "QEMU (pid {pid}) forwards port {port} to the guest's ssh, not {}; write `port = {port}`",
            port + 1
        )),
        "{}",
        text(&o)
    );
    let not_a_vm = b.dir.path().join("a.env");
    write(source(not_a_vm.to_str().unwrap(), port));
    let o = b.envc("a.env", &["build"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "but it was not found: no QEMU process runs with the disk {}",
            not_a_vm.display()
        )) && text(&o).contains("or remove the `adopt` line to let envc make the machine"),
        "{}",
        text(&o)
    );

    // Found: the plan says adopt, with what differs (shown, not changed).
    write(source(disk.to_str().unwrap(), port));
    let o = b.envc("a.env", &["plan"]);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        plan.contains(&format!(
            "adopt     vm:t-0\n          found running (QEMU pid {pid}, ssh on 127.0.0.1:{port}, host key SHA256:"
        )) && plan.contains("memory: found 512 MiB, the source says 768 MiB (kept as it is"),
        "{}",
        text(&o)
    );
    assert!(
        !plan.contains("cpus:") && !plan.contains("image:"),
        "{plan}"
    );
    // The build boots nothing: the same QEMU, the same disk; the file is placed.
    let o = b.envc("a.env", &["build"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        summary(&o),
        (2, 1, 0),
        "the VM taken over, the file: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("adopted as found running (QEMU pid"),
        "{}",
        text(&o)
    );
    assert_eq!(qemu_pid(p), Some(pid));
    assert_eq!(inode(), disk_inode);
    assert_eq!(in_vm(p, port, "cat /etc/envc-adopted.conf"), "adopted");
    let recorded = b.store().join("machines/a/t-0");
    assert_eq!(
        std::fs::read_to_string(recorded.join("qemu.pid"))
            .unwrap()
            .trim(),
        pid.to_string()
    );
    assert!(
        !recorded.join("disk.qcow2").exists(),
        "a disk of envc's own"
    );
    // Again: nothing to do; it is found running as its record says.
    let o = b.envc("a.env", &["build"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o).0, 0, "{}", text(&o));

    // Destroyed: what envc put there goes, the VM stays running with its disk.
    let o = b.envc("a.env", &["destroy", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("left running as it was found: adopted"),
        "{}",
        text(&o)
    );
    assert!(!ended_now(pid), "QEMU stopped: {}", text(&o));
    assert_eq!(inode(), disk_inode);
    assert!(!recorded.exists());
    assert_eq!(
        in_vm(
            p,
            port,
            "test -e /etc/envc-adopted.conf && echo present || echo gone"
        ),
        "gone"
    );
    // Handed back as found: its key no longer lets that project in.
    in_vm(
        p,
        port,
        &format!("grep -vF '{key}' /root/.ssh/authorized_keys > /root/k; cat /root/k > /root/.ssh/authorized_keys; rm /root/k"),
    );
}

/// Runs on the other core beside the VM's life: three image builds, no VM. A locked image
/// is built from exactly its pinned `.deb`s, fetched once into the store, and is the image
/// the committed golden names; with no network at all it then rebuilds from the store
/// alone, bit for bit; and an image made non-reproducible on purpose is caught naming the
/// path.
#[test]
fn a_locked_image_rebuilds_offline_from_the_store_and_noise_in_it_is_caught() {
    let p = Project::new("i.env", IMAGE_ONLY);
    // The quickstart's committed lockfile, whose image is the one the golden names; `envc
    // lock` drops the pins this environment does not use and moves none, however far the
    // archive moved since the lock was written.
    std::fs::copy(
        repo().join("examples/quickstart.lock"),
        p.dir.path().join("i.lock"),
    )
    .unwrap();
    let o = p.envc("i.env", &["lock"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(": 0 added, ") && text(&o).contains(" removed, 0 moved"),
        "{}",
        text(&o)
    );

    // No route to any mirror and nothing in the store: the build says which pin needs what.
    let o = offline(p.command("i.env", &["build"])).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("(pin image:debian-12)") && err.contains("mirror must be reachable"),
        "{}",
        text(&o)
    );
    let debs_in_store = || std::fs::read_dir(p.store().join("debs")).map_or(0, |d| d.count());
    assert_eq!(debs_in_store(), 0);

    // Online: every pinned .deb fetched into the store, and the image built from them.
    let o = p.envc("i.env", &["build"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let pinned = std::fs::read_to_string(p.dir.path().join("i.lock")).unwrap();
    let debs = debs_in_store();
    assert!(debs > 100, "{debs} .debs in the store");
    assert!(
        pinned.contains(" pool/main/o/openssh/openssh-server_"),
        "{pinned}"
    );
    same_as_golden(&p);

    // A test-only input: mmdebstrap, the real one, with a hook that writes random bytes
    // into the image. Rebuilt with no network, from the store alone, it differs from
    // production's record in that path and nothing else.
    let shim = p.dir.path().join("noisy-bin");
    std::fs::create_dir_all(&shim).unwrap();
    let mmdebstrap = shim.join("mmdebstrap");
    std::fs::write(
        &mmdebstrap,
        "#!/bin/sh\n[ \"$1\" = --version ] && exec /usr/bin/mmdebstrap --version\n\
         exec /usr/bin/mmdebstrap --customize-hook='head -c 16 /dev/urandom | od -An -tx1 > \"$1/etc/envc-noise\"' \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &mmdebstrap,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut noisy = p.command("i.env", &["verify", "--rebuild-only"]);
    noisy.env("PATH", path);
    let o = offline(noisy).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("DIFFERS from production's record"),
        "{}",
        text(&o)
    );
    // The differing paths listed under the image: the noise, and nothing else of the tree.
    let paths: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('/'))
        .collect();
    assert_eq!(paths.len(), 1, "{}", text(&o));
    assert!(
        paths[0].starts_with("etc/envc-noise: only in the rebuild"),
        "{}",
        text(&o)
    );

    // And without the noise: the same bits as production's, with no network.
    let o = offline(p.command("i.env", &["verify", "--rebuild-only"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        phases(&o),
        ["rebuild image:debian-12 (1 of 1)"],
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("bit for bit the same as production's record"),
        "{}",
        text(&o)
    );
}

/// The image `examples/quickstart.lock` pins, as built here, against the one committed in
/// `examples/quickstart.golden` (built where the lock last moved): every run of this test
/// on a fresh machine proves the image is the same bits on another machine, not only twice
/// on one. A golden of another resolved hash is stale (the lock or the builder moved), and
/// the failure prints the lines to commit.
fn same_as_golden(p: &Project) {
    compare_with_golden(p, true)
}

/// The bits of `same_as_golden`, from a lock whose image pins are the quickstart's but whose
/// archive pins moved (another resolved hash, the same `.deb`s).
fn same_bits_as_golden(p: &Project) {
    compare_with_golden(p, false)
}

fn compare_with_golden(p: &Project, same_hash: bool) {
    let golden = std::fs::read_to_string(repo().join("examples/quickstart.golden")).unwrap();
    let field = |name: &str| -> String {
        let line = golden
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = \"")))
            .unwrap_or_else(|| panic!("examples/quickstart.golden has no `{name}`"));
        line.trim_end_matches('"').to_string()
    };
    let record = image_record(p, "image:debian-12");
    let built = |fact: &str| {
        record["facts"][fact]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let resolved = record["resolved_hash"].as_str().unwrap_or_default();
    let lines = format!(
        "resolved_hash = \"{resolved}\"\ndigest = \"{}\"\nkernel = \"{}\"\nrootfs = \"{}\"\n",
        built("digest"),
        built("kernel"),
        built("rootfs")
    );
    assert!(
        !same_hash || resolved == field("resolved_hash"),
        "examples/quickstart.golden is stale: the lockfile's image or the image builder moved \
         since it was written. If the image was built from the new lock, commit:\n{lines}"
    );
    for fact in ["digest", "kernel", "rootfs"] {
        assert_eq!(
            built(fact),
            field(fact),
            "the quickstart image built here is not the golden's ({fact} differs): the same \
             source, lock and builder gave other bits on this machine. Built here:\n{lines}"
        );
    }
}

/// The live realization record of `node` in `p`'s store, as JSON.
fn image_record(p: &Project, node: &str) -> serde_json::Value {
    let objects = p.store().join("objects");
    let mut found = Vec::new();
    for shard in std::fs::read_dir(objects).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let bytes = std::fs::read(f.unwrap().path()).unwrap();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                if v["node"] == node && v.get("resolved_hash").is_some() {
                    found.push(v);
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

/// `cmd` run in a new network namespace of its own: loopback only, down; no mirror, no
/// resolver, nothing beyond this machine.
fn offline(cmd: Command) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--net", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped.stdin(Stdio::null());
    wrapped
}

fn kill_hard(pid: i32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(ended(pid), "QEMU {pid} survived SIGKILL");
}

/// Whether process `pid` ends within 5 s (a zombie has ended: only its parent's reaping is
/// left, and a daemon's parent is init).
fn ended(pid: i32) -> bool {
    for _ in 0..50 {
        if ended_now(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// Live processes whose command line names `path`.
fn processes_naming(path: &Path) -> Vec<i32> {
    let needle = path.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| !ended_now(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

fn ended_now(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, s)| s.trim_start().starts_with('Z')),
    }
}

/// What `envc init` writes builds on the first try, as a new user runs it (not root): the
/// image, the VM, its file and its service, whose postcondition holds; then it is destroyed.
#[test]
fn a_project_from_envc_init_builds_on_the_first_try() {
    let p = Project::of_test_user("README", "", None);
    let o = p.envc("", &["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let built = p.envc("prod.env", &["build"]);
    assert_eq!(built.status.code(), Some(0), "{}", text(&built));
    assert_eq!(summary(&built), (5, 0, 0), "{}", text(&built));
    let again = p.envc("prod.env", &["build"]);
    assert_eq!(summary(&again), (0, 5, 0), "{}", text(&again));
    let o = p.envc("prod.env", &["destroy", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
