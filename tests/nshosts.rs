//! End-to-end checks of the SSH test hosts that the executor's tests run against
//! (tests/support/nshosts.rs): real sshd, isolated file systems, a host that dies, and a
//! teardown that leaves nothing behind.

use crate::support::nshosts;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nshosts::{TestHosts, SSH_CONNECT_TIMEOUT_SECS};

fn stdout_ok(hosts: &TestHosts, i: usize, out: Output) -> String {
    assert!(
        out.status.success(),
        "on {}: {}\nstdout: {}\nstderr: {}\n{}",
        hosts.name(i),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        hosts.logs(i)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `pid` and all its descendants, each with its start time (to tell a recycled pid apart).
fn process_tree(pid: u32, into: &mut BTreeMap<u32, String>) {
    let Some(start) = start_time(pid) else { return };
    into.insert(pid, start);
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace() {
            process_tree(child.parse().unwrap(), into);
        }
    }
}

fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 22 of stat; the 20th after the command name.
    after_comm.split_whitespace().nth(19).map(str::to_string)
}

/// Whether any process on the machine still has a mount under `dir` in its mount namespace.
fn mounted_anywhere(dir: &Path) -> Option<String> {
    let dir = dir.to_str().unwrap();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(info) = fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        if let Some(line) = info.lines().find(|l| l.contains(dir)) {
            return Some(format!("{}: {line}", entry.path().display()));
        }
    }
    None
}

#[test]
fn three_hosts_are_separate_machines_and_leave_nothing_behind() {
    let t0 = Instant::now();
    let hosts = TestHosts::start(3);
    eprintln!("TestHosts::start(3): {:?}", t0.elapsed());
    assert_eq!(hosts.len(), 3);
    assert_eq!((hosts.port(), hosts.user()), (22, "root"));
    assert!(hosts.key_path().exists());

    for i in 0..3 {
        let name = stdout_ok(&hosts, i, hosts.ssh(i, "hostname"));
        assert_eq!(name.trim(), hosts.name(i));
    }

    // A write to /etc on host 0 lands in its overlay only.
    let marker = format!(
        "envc-nshosts-{}",
        hosts.state_dir().file_name().unwrap().to_str().unwrap()
    );
    stdout_ok(
        &hosts,
        0,
        hosts.ssh(0, &format!("echo written > /etc/{marker}")),
    );
    let seen = stdout_ok(&hosts, 0, hosts.ssh(0, &format!("cat /etc/{marker}")));
    assert_eq!(seen, "written\n");
    let other = hosts.ssh(1, &format!("test -e /etc/{marker}"));
    assert_eq!(other.status.code(), Some(1), "host1 sees host0's file");
    assert!(!Path::new("/etc").join(&marker).exists());
    assert!(!hosts.rootfs().join("etc").join(&marker).exists());

    // A Debian system with its package database, python3, and only an ed25519 host key made
    // at start. Its network settings are its own; the machine's kernel settings are read-only
    // (the write would not change the value anyway).
    let out = stdout_ok(
        &hosts,
        2,
        hosts.ssh(
            2,
            "dpkg -l openssh-server | tail -n 1; python3 -c 'print(6*7)'; ls /etc/ssh/ | grep host_
             echo 1 > /proc/sys/net/ipv4/ip_forward && cat /proc/sys/net/ipv4/ip_forward
             (cat /proc/sys/vm/swappiness > /proc/sys/vm/swappiness) 2>/dev/null || echo read-only",
        ),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ii  openssh-server"), "{out}");
    assert_eq!(
        lines[1..],
        [
            "42",
            "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub",
            "1",
            "read-only"
        ]
    );

    // Everything that belongs to this instance, for the teardown check.
    let mut procs = BTreeMap::new();
    process_tree(hosts.controller_pid(), &mut procs);
    for i in 0..3 {
        process_tree(hosts.host_pid(i), &mut procs);
    }
    // controller, and per host: unshare + sshd (pid 1)
    assert!(procs.len() >= 7, "{procs:?}");

    // A host that dies mid-run: a session open on it hears nothing more (its client notices
    // through keepalives), a new connection times out, the other hosts still answer.
    let mut session = hosts
        .ssh_command(2)
        .args(["-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=1"])
        .arg("echo started; sleep 60")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(session.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "started\n");
    let mut host2 = BTreeMap::new();
    process_tree(hosts.host_pid(2), &mut host2);
    let killed = Instant::now();
    hosts.kill_host(2);
    for (pid, start) in &host2 {
        assert_ne!(start_time(*pid).as_ref(), Some(start), "pid {pid} survived");
    }
    let dead = hosts.ssh(2, "true");
    let took = killed.elapsed();
    let stderr = String::from_utf8_lossy(&dead.stderr);
    eprintln!(
        "ssh to the killed host failed after {took:?}: {}",
        stderr.trim()
    );
    assert_eq!(dead.status.code(), Some(255), "ssh to a killed host");
    assert!(
        !stderr.contains("refused"),
        "a dead host answered: {stderr}"
    );
    assert!(
        took < Duration::from_secs(u64::from(SSH_CONNECT_TIMEOUT_SECS) + 2),
        "ssh to a killed host took {took:?}"
    );
    assert_eq!(
        stdout_ok(&hosts, 0, hosts.ssh(0, "hostname")).trim(),
        "host0"
    );
    let status = loop {
        if let Some(status) = session.try_wait().unwrap() {
            break status;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "session still open"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("open session ended {:?} after the kill", killed.elapsed());
    assert_eq!(status.code(), Some(255));
    hosts.kill_host(2); // twice is fine

    let state = hosts.state_dir().to_path_buf();
    drop(hosts);
    for (pid, start) in &procs {
        assert_ne!(start_time(*pid).as_ref(), Some(start), "pid {pid} survived");
    }
    assert_eq!(mounted_anywhere(&state), None);
    assert!(!state.exists(), "{} is left", state.display());
}

#[test]
fn instances_side_by_side_use_the_same_addresses_without_meeting() {
    let a = TestHosts::start(1);
    let b = TestHosts::start(1);
    assert_eq!(a.addr(0), b.addr(0));
    assert_ne!(a.controller_pid(), b.controller_pid());

    stdout_ok(&a, 0, a.ssh(0, "echo a > /root/instance"));
    assert_eq!(b.ssh(0, "test -e /root/instance").status.code(), Some(1));
    let key = "cat /etc/ssh/ssh_host_ed25519_key.pub";
    assert_ne!(
        stdout_ok(&a, 0, a.ssh(0, key)),
        stdout_ok(&b, 0, b.ssh(0, key))
    );
    // Each instance has its own client key: a's host refuses b's.
    let mut opts = a.ssh_options();
    let key_at = opts.iter().position(|o| o == "-i").unwrap() + 1;
    opts[key_at] = b.key_path().display().to_string();
    let wrong_key = a
        .in_controller("ssh")
        .args(opts)
        .arg(a.addr(0).to_string())
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(wrong_key.status.code(), Some(255));
}

/// The `ssh-keyscan` lines (`ADDRESS TYPE KEY`) of `addr`, from the controller namespace.
fn keyscan(hosts: &TestHosts, addr: Ipv4Addr) -> Vec<String> {
    let out = hosts
        .in_controller("ssh-keyscan")
        .args(["-T", "5", "-t", "ed25519"])
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn hosts_added_at_chosen_addresses_answer_on_each_with_the_given_host_key() {
    let mut hosts = TestHosts::start_empty();
    assert_eq!(hosts.len(), 0);
    let keys = tempfile::tempdir().unwrap();
    let host_key = keys.path().join("host_key");
    let keygen = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "given"])
        .arg("-f")
        .arg(&host_key)
        .status()
        .unwrap();
    assert!(keygen.success());
    let public = fs::read_to_string(host_key.with_extension("pub")).unwrap();
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    // Without the .pub beside it: host-init derives it.
    fs::remove_file(host_key.with_extension("pub")).unwrap();

    let private: Ipv4Addr = "10.0.1.4".parse().unwrap();
    let elastic: Ipv4Addr = "54.214.9.8".parse().unwrap();
    let a = hosts.add_host(&[private, elastic], Some(&host_key));
    assert_eq!((a, hosts.len()), (0, 1));
    assert_eq!(hosts.addr(a), private);
    assert_eq!(hosts.host_addrs(a), [private, elastic]);

    // Exactly the given key, on both addresses.
    for addr in [private, elastic] {
        assert_eq!(
            keyscan(&hosts, addr),
            [format!("{addr} {} {}", public[0], public[1])],
            "{}",
            hosts.logs(a)
        );
    }
    // And ssh that checks it strictly, against a known_hosts that holds only that key.
    let known_hosts = keys.path().join("known_hosts");
    fs::write(
        &known_hosts,
        format!("{private},{elastic} {} {}\n", public[0], public[1]),
    )
    .unwrap();
    for addr in [private, elastic] {
        let out = hosts
            .in_controller("ssh")
            // Before ssh_options: ssh takes the first value it is given.
            .args(["-o", "StrictHostKeyChecking=yes", "-o"])
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(hosts.ssh_options())
            .arg(addr.to_string())
            .arg("hostname; ip -4 -o addr show dev eth0 | awk '{print $4}'")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            stdout_ok(&hosts, a, out),
            "host0\n10.0.1.4/32\n54.214.9.8/32\n"
        );
    }
    // A key that is not the host's is refused under the same options.
    fs::write(
        &known_hosts,
        format!(
            "{private} {}\n",
            fs::read_to_string(hosts.key_path().with_extension("pub")).unwrap()
        ),
    )
    .unwrap();
    let wrong = hosts
        .in_controller("ssh")
        .args(["-o", "StrictHostKeyChecking=yes", "-o"])
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(hosts.ssh_options())
        .arg(private.to_string())
        .arg("true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(255));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("HOST IDENTIFICATION HAS CHANGED"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );

    // A second host, its own key made at start, in the same /24 as the first's public address:
    // each address reaches its own host, and the hosts reach each other (through the
    // controller), as instances of one VPC do.
    let b = hosts.add_host(
        &["10.0.1.5".parse().unwrap(), "54.214.9.9".parse().unwrap()],
        None,
    );
    assert_eq!(b, 1);
    let b_key = stdout_ok(
        &hosts,
        b,
        hosts.ssh(b, "cat /etc/ssh/ssh_host_ed25519_key.pub"),
    );
    assert!(!b_key.contains(public[1]), "host1 has the given key");
    for (addr, name) in [
        ("54.214.9.9", "host1"),
        ("54.214.9.8", "host0"),
        ("10.0.1.5", "host1"),
    ] {
        let out = hosts
            .in_controller("ssh")
            .args(hosts.ssh_options())
            .arg(addr)
            .arg("hostname")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(stdout_ok(&hosts, b, out).trim(), name, "at {addr}");
    }
    for (from, to) in [(b, "54.214.9.8"), (b, "10.0.1.4"), (a, "10.0.1.5")] {
        let probe = format!("timeout 5 bash -c 'echo >/dev/tcp/{to}/22' && echo open");
        assert_eq!(stdout_ok(&hosts, from, hosts.ssh(from, &probe)), "open\n");
    }
    // An address is taken while its host lives; once the host is killed, a new host may
    // have it (a new instance at a terminated one's address).
    let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        hosts.add_host(&[private], None)
    }));
    assert!(taken.is_err(), "a live host's address was given again");
    hosts.kill_host(a);
    let c = hosts.add_host(&[private], None);
    let out = hosts.ssh(c, "hostname");
    assert_eq!(stdout_ok(&hosts, c, out), "host2\n");

    // Nothing leads out of the controller namespace.
    let routes = hosts
        .in_controller("ip")
        .args(["-4", "route", "show", "default"])
        .output()
        .unwrap();
    assert!(routes.status.success());
    assert_eq!(String::from_utf8_lossy(&routes.stdout), "");
}
