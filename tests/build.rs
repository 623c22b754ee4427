//! `envc build` end to end, against real SSH hosts (tests/support/nshosts.rs): the envc
//! binary runs inside the hosts' controller network namespace, as a user's would run on
//! their network, with its own store and an ssh_config naming the test key.

use crate::support::{nshosts, output, signing_key, ssh_config};

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nshosts::TestHosts;
use output::{summary, text};

struct Project {
    dir: tempfile::TempDir,
    ssh_config: PathBuf,
}

impl Project {
    fn new(hosts: &TestHosts) -> Project {
        let dir = tempfile::Builder::new()
            .prefix("envc-build-")
            .tempdir()
            .unwrap();
        let ssh_config = ssh_config::write(dir.path(), hosts.key_path());
        std::fs::create_dir_all(dir.path().join("env")).unwrap();
        Project { dir, ssh_config }
    }

    fn env_file(&self) -> PathBuf {
        self.dir.path().join("env/prod.env")
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.dir.path().join("env").join(rel), text).unwrap();
    }

    fn envc(&self, hosts: &TestHosts, args: &[&str]) -> Command {
        self.envc_on(hosts, &self.env_file(), args)
    }

    /// `envc` on another environment file of the project (`env/NAME`).
    fn envc_on(&self, hosts: &TestHosts, file: &std::path::Path, args: &[&str]) -> Command {
        let mut cmd = hosts.in_controller(env!("CARGO_BIN_EXE_envc"));
        // `envc COMMAND FILE [ARGS…]`
        cmd.arg(args[0])
            .arg(file)
            .args(&args[1..])
            .env("ENVC_SSH_CONFIG", &self.ssh_config)
            .env_remove("ENVC_STORE")
            // These tests are about building; lock policy is tests/lock.rs's.
            .env_remove("CI")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, hosts: &TestHosts, args: &[&str]) -> Output {
        self.envc(hosts, args).output().unwrap()
    }
}

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
}

/// An environment over every test host: per host a template rendered with all hosts'
/// addresses, a plain file, and a marker file.
fn source(hosts: &TestHosts, extra: &str) -> String {
    let mut s = String::from("import \"std/files\"\n\n");
    for i in 0..hosts.len() {
        s.push_str(&format!(
            "let h{i} = host(name = \"{}\", address = \"{}\")\n",
            hosts.name(i),
            hosts.addr(i)
        ));
    }
    let list: Vec<String> = (0..hosts.len()).map(|i| format!("h{i}")).collect();
    s.push_str(&format!("let all = [{}]\n", list.join(", ")));
    s.push_str(
        r#"
let peers = [for h in all => h.address]
let confs = [for h in all => files.template(h, "/etc/app/peers.conf", path("peers.j2"), vars = { peers = peers, me = h.name })]
let motds = [for h in all => file(path = "/etc/motd", content = "managed by envc: ${h.name}\n", target = h)]
output keys = [for h in all => h.host_key]
"#,
    );
    s.push_str(extra);
    s
}

const TEMPLATE: &str = "# {{ me }}\n{% for p in peers %}peer {{ p }}\n{% endfor %}";

fn remote(hosts: &TestHosts, i: usize, cmd: &str) -> String {
    let o = hosts.ssh(i, cmd);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn build_rebuild_change_remove_and_drift_on_three_hosts() {
    let hosts = TestHosts::start(3);
    let p = Project::new(&hosts);
    p.write(
        "prod.env",
        &source(
            &hosts,
            "let extra = file(path = \"/etc/extra\", content = \"x\\n\", target = h1)\n",
        ),
    );
    p.write("peers.j2", TEMPLATE);

    // Cold: everything runs (3 hosts + 3 templates + 3 motds + 1 extra).
    let cold = p.run(&hosts, &["build"]);
    ok(&cold);
    assert_eq!(summary(&cold), (10, 0, 0), "{}", text(&cold));
    let conf = remote(
        &hosts,
        0,
        "cat /etc/app/peers.conf; stat -c '%U:%G %a' /etc/app/peers.conf",
    );
    let expected: String = std::iter::once(format!("# {}\n", hosts.name(0)))
        .chain(hosts.addrs().iter().map(|a| format!("peer {a}\n")))
        .collect();
    assert_eq!(conf, format!("{expected}root:root 644\n"));

    // No-op: nothing runs, nothing is contacted.
    let noop = p.run(&hosts, &["build"]);
    ok(&noop);
    assert_eq!(summary(&noop), (0, 10, 0), "{}", text(&noop));

    // An edited template re-runs exactly that file on each host, and nothing else.
    p.write("peers.j2", &format!("{TEMPLATE}# end\n"));
    let plan = p.run(&hosts, &["plan"]);
    ok(&plan);
    let plan_out = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan_out.contains("plan: 0 to create, 3 to update, 0 to replace, 0 to delete, 7 unchanged"),
        "{plan_out}"
    );
    assert!(plan_out.contains("template: "), "{plan_out}");
    let change = p.run(&hosts, &["build"]);
    ok(&change);
    assert_eq!(summary(&change), (3, 7, 0), "{}", text(&change));
    assert!(remote(&hosts, 2, "cat /etc/app/peers.conf").ends_with("# end\n"));

    // A removed node is removed from its host.
    assert_eq!(remote(&hosts, 1, "cat /etc/extra"), "x\n");
    p.write("prod.env", &source(&hosts, ""));
    let removed = p.run(&hosts, &["build"]);
    ok(&removed);
    assert!(
        String::from_utf8_lossy(&removed.stdout).contains("1 deleted"),
        "{}",
        text(&removed)
    );
    assert_eq!(
        remote(
            &hosts,
            1,
            "test -e /etc/extra && echo present || echo absent"
        ),
        "absent\n"
    );

    // Drift: a file edited on a host is detected, then repaired by build --refresh.
    hosts.ssh(2, "echo tampered > /etc/motd; chmod 600 /etc/motd");
    let drift = p.run(&hosts, &["drift"]);
    assert_eq!(drift.status.code(), Some(3), "{}", text(&drift));
    let d = String::from_utf8_lossy(&drift.stdout);
    assert!(
        d.contains(&format!(
            "{}/file:/etc/motd: mode was 0644, found 0600",
            hosts.name(2)
        )),
        "{d}"
    );
    assert!(d.contains("sha256 was"), "{d}");
    let repaired = p.run(&hosts, &["build", "--refresh"]);
    ok(&repaired);
    assert_eq!(summary(&repaired).0, 1, "{}", text(&repaired));
    assert_eq!(
        remote(&hosts, 2, "cat /etc/motd; stat -c %a /etc/motd"),
        format!("managed by envc: {}\n644\n", hosts.name(2))
    );
    let clean = p.run(&hosts, &["drift"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));

    // why explains one node; output shows deferred values resolved.
    let why = p.run(
        &hosts,
        &["why", &format!("{}/file:/etc/motd", hosts.name(0))],
    );
    ok(&why);
    let w = String::from_utf8_lossy(&why.stdout);
    assert!(
        w.contains("action     unchanged") && w.contains("content = blake3:"),
        "{w}"
    );
    let out = p.run(&hosts, &["output", "--json"]);
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = v["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3);
    assert!(
        keys.iter()
            .all(|k| k.as_str().unwrap().starts_with("ssh-ed25519 ")),
        "{v}"
    );

    // The history has every build (plan and drift change nothing, so they are not runs).
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout)
            .lines()
            .filter(|l| l.starts_with("run "))
            .count(),
        5,
        "{}",
        text(&log)
    );

    // destroy removes what envc made, and only that: Debian ships /etc/motd, so envc
    // leaves it in place; peers.conf was envc's.
    let refused = p.run(&hosts, &["destroy"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let destroyed = p.run(&hosts, &["destroy", "--yes"]);
    ok(&destroyed);
    assert!(
        String::from_utf8_lossy(&destroyed.stderr)
            .contains("left in place: envc did not create it"),
        "{}",
        text(&destroyed)
    );
    for i in 0..3 {
        assert_eq!(
            remote(&hosts, i, "ls /etc/app; test -e /etc/motd && echo motd"),
            "motd\n"
        );
    }
    let after = p.run(&hosts, &["plan"]);
    assert!(
        String::from_utf8_lossy(&after.stdout)
            .contains("plan: 9 to create, 0 to update, 0 to replace, 0 to delete, 0 unchanged"),
        "{}",
        text(&after)
    );
}

#[test]
fn an_unreachable_host_fails_its_nodes_and_the_others_finish() {
    let hosts = TestHosts::start(3);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    ok(&p.run(&hosts, &["build"]));
    hosts.kill_host(1);
    p.write(
        "prod.env",
        &source(&hosts, "").replace("managed by envc", "managed by envc (v2)"),
    );
    let started = Instant::now();
    let o = p.run(&hosts, &["build", "--connect-timeout", "3"]);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let (ran, _, failed) = summary(&o);
    assert_eq!((ran, failed), (2, 1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}/file:/etc/motd", hosts.name(1))),
        "{err}"
    );
    assert!(remote(&hosts, 0, "cat /etc/motd").contains("(v2)"));
    assert!(remote(&hosts, 2, "cat /etc/motd").contains("(v2)"));
}

#[test]
fn a_killed_build_leaves_a_store_the_next_build_converges_from() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    // Enough files that the kill lands mid-run.
    let many = "let many = [for h in all for i in 0..40 => file(path = \"/etc/many/f${i}\", content = \"${i}\\n\", target = h)]\n";
    p.write("prod.env", &source(&hosts, many));
    p.write("peers.j2", TEMPLATE);
    // Killed at several points of a run (nsenter execs envc, so the pid is envc's).
    for delay_ms in [150, 400, 800] {
        let mut child = p
            .envc(&hosts, &["build", "-j", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
    }
    let again = p.run(&hosts, &["build"]);
    ok(&again);
    let (ran, cached, failed) = summary(&again);
    assert_eq!(
        (ran + cached, failed),
        (2 + 2 + 2 + 80, 0),
        "{}",
        text(&again)
    );
    let last = p.run(&hosts, &["build"]);
    assert_eq!(summary(&last), (0, 86, 0), "{}", text(&last));
    assert_eq!(remote(&hosts, 1, "cat /etc/many/f39"), "39\n");
}

/// The ssh ControlMaster processes of envc runs in `hosts`' controller network namespace
/// that talk to `addr`, as (pid, command line).
fn ssh_masters(hosts: &TestHosts, addr: std::net::Ipv4Addr) -> Vec<(u32, String)> {
    let netns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let ours = netns(&hosts.controller_pid().to_string());
    let addr = addr.to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        let Ok(n) = pid.parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_ssh = argv
            .first()
            .is_some_and(|a| a == "ssh" || a.ends_with("/ssh"));
        if is_ssh && argv.iter().any(|a| a == "-M") && argv.contains(&addr) && netns(&pid) == ours {
            found.push((n, argv.join(" ")));
        }
    }
    found
}

/// Polls `f` every 100 ms until it holds; panics with `what` after `limit` (a bound so that a
/// regression fails instead of hanging, not a timing assertion).
fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_build_keeps_its_connections_for_the_next_and_zero_keeps_none() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    let src = |v: &str| {
        source(
            &hosts,
            &format!(
                "let f = file(path = \"/etc/kept.conf\", content = \"{v}\\n\", target = h0)\n"
            ),
        )
    };
    p.write("peers.j2", TEMPLATE);
    p.write("prod.env", &src("v1"));
    let addr = hosts.addr(0);
    let masters = || -> Vec<u32> { ssh_masters(&hosts, addr).into_iter().map(|m| m.0).collect() };
    ok(&p.run(&hosts, &["build"]));
    let kept = masters();
    assert_eq!(kept.len(), 1, "one master, kept after the build: {kept:?}");
    // The next build reaches the host through it: no new master, and the change is placed.
    p.write("prod.env", &src("v2"));
    let next = p.run(&hosts, &["build"]);
    assert_eq!(summary(&next), (1, 3, 0), "{}", text(&next));
    assert_eq!(masters(), kept);
    assert_eq!(remote(&hosts, 0, "cat /etc/kept.conf"), "v2\n");
    // With 0, a build neither uses a kept master nor leaves its own behind.
    p.write("prod.env", &src("v3"));
    let closed = p
        .envc(&hosts, &["build"])
        .env("ENVC_SSH_PERSIST", "0")
        .output()
        .unwrap();
    assert_eq!(summary(&closed), (1, 3, 0), "{}", text(&closed));
    assert_eq!(masters(), kept);
    assert_eq!(remote(&hosts, 0, "cat /etc/kept.conf"), "v3\n");
}

#[test]
fn a_sigkilled_build_leaves_no_ssh_master_and_the_next_waits_for_dpkg() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    p.write(
        "prod.env",
        &source(&hosts, "let jq = package(name = \"jq\", target = h0)\n"),
    );
    p.write("peers.j2", TEMPLATE);
    // Something else holds dpkg's lock (as an apt that a killed envc left running would): the
    // package step waits for it, so the build is mid-run, its master up, when it is killed.
    let holder = remote(
        &hosts,
        0,
        "setsid python3 -c 'import fcntl, time; f = open(\"/var/lib/dpkg/lock-frontend\", \"w\"); \
         fcntl.lockf(f, fcntl.LOCK_EX); open(\"/run/envc-held\", \"w\").close(); time.sleep(600)' \
         </dev/null >/dev/null 2>&1 & echo $!; \
         for i in $(seq 100); do [ -e /run/envc-held ] && break; sleep 0.1; done",
    );
    // Connections not kept after the run (as for every run by default, 60 s after it ends).
    let mut child = p
        .envc(&hosts, &["build"])
        .env("ENVC_SSH_PERSIST", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(60),
        "envc's ssh master to start",
        || {
            assert_eq!(
                child.try_wait().unwrap(),
                None,
                "envc ended before it was killed"
            );
            !ssh_masters(&hosts, hosts.addr(0)).is_empty()
        },
    );
    let _ = child.kill();
    let _ = child.wait();
    let mut left = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "the ssh masters of the killed envc to exit",
        || {
            left = ssh_masters(&hosts, hosts.addr(0));
            left.is_empty()
        },
    );
    assert!(left.is_empty(), "{left:?}");
    // The killed run's reserve of space is left in the store's tmp/ ...
    let reserves = || -> Vec<String> {
        std::fs::read_dir(p.dir.path().join("env/.envc/tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("reserve."))
            .collect()
    };
    assert_eq!(reserves().len(), 1, "{:?}", reserves());

    // The lock is let go while the next build runs (the killed run's apt script may still be
    // waiting too): that build waits for it and finishes.
    let next = p
        .envc(&hosts, &["build"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "the next build to connect", || {
        !ssh_masters(&hosts, hosts.addr(0)).is_empty()
    });
    remote(&hosts, 0, &format!("kill {}", holder.trim()));
    let o = output_within(next, Duration::from_secs(300));
    ok(&o);
    assert_eq!(remote(&hosts, 0, "command -v jq"), "/usr/bin/jq\n");
    // ... and the next run frees it (issue 34: each kill left 1 MiB forever).
    assert_eq!(reserves(), Vec::<String>::new());
}

/// The output of `child`, which is killed if it does not finish within `limit` (so that a
/// regression fails the test instead of hanging it).
fn output_within(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("envc did not finish within {limit:?}: {}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_second_build_of_the_same_environment_is_refused_while_one_holds_the_lock() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    let store = envc_executor::Store::open(&p.dir.path().join("env/.envc")).unwrap();
    let holder = envc_executor::Holder::current("envc build (the other one)");
    let lock = envc_executor::EnvLock::acquire(&store, "prod", false, &holder).unwrap();
    let o = p.run(&hosts, &["build"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("envc build (the other one)")
            && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    drop(lock);
    ok(&p.run(&hosts, &["build"]));
}

#[test]
fn sigint_lets_running_steps_finish_records_them_and_exits_130() {
    let hosts = TestHosts::start(3);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    // A dead host keeps its connect step running for the whole timeout: the interrupt
    // arrives while it runs, after the other hosts are done.
    hosts.kill_host(2);
    let child = p
        .envc(&hosts, &["build", "--connect-timeout", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: kill has no memory preconditions; the pid is our child's (nsenter execs envc).
    assert_eq!(unsafe { kill(child.id() as i32, 2) }, 0);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("interrupted"),
        "{}",
        text(&o)
    );
    // The finished steps were recorded: the live hosts are unchanged in the next plan.
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let unchanged: Vec<String> = String::from_utf8_lossy(&plan.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["action"] == "unchanged")
        .map(|v| v["node"].as_str().unwrap().to_string())
        .collect();
    for i in 0..2 {
        for node in [
            format!("host:{}", hosts.name(i)),
            format!("{}/file:/etc/motd", hosts.name(i)),
        ] {
            assert!(
                unchanged.contains(&node),
                "{node} not recorded: {unchanged:?}\n{}",
                text(&o)
            );
        }
    }
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn hostile_values_reach_the_host_as_data_never_as_commands() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    // As the language spells it, and as the bytes on the host must read.
    let hostile = r#"it's \"quoted\" $(touch /tmp/pwned-content) `touch /tmp/pwned-bt`; rm -rf / \\ \n\ttab \${HOME} 'x'"#;
    let hostile_bytes = "it's \"quoted\" $(touch /tmp/pwned-content) `touch /tmp/pwned-bt`; rm -rf / \\ \n\ttab ${HOME} 'x'\n";
    p.write(
        "prod.env",
        &format!(
            r#"let h = host(name = "h", address = "{addr}")
let a = file(path = "/srv/it's a \"dir\"/$(touch /tmp/pwned-path) `x`;y.conf", content = "{hostile}\n", target = h)
let b = file(path = "/srv/plain", content = "ok\n", owner = "no-such-user", target = h)
let c = file(path = "/srv/-dash", content = "", mode = 0o600, target = h)
"#,
            addr = hosts.addr(0)
        ),
    );
    let o = p.run(&hosts, &["build", "--keep-going"]);
    // The file owned by a missing user fails alone, with the reason; the others land.
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("h/file:/srv/plain") && err.contains("no-such-user"),
        "{err}"
    );
    assert_eq!(summary(&o), (3, 0, 1), "{}", text(&o));
    let expected = hostile_bytes;
    let got = remote(
        &hosts,
        0,
        r#"cat "/srv/it's a \"dir\"/\$(touch /tmp/pwned-path) \`x\`;y.conf""#,
    );
    assert_eq!(got, expected);
    assert_eq!(
        remote(
            &hosts,
            0,
            "stat -c %a /srv/-dash; ls /tmp | grep -c pwned || true"
        ),
        "600\n0\n"
    );
    assert_eq!(
        remote(
            &hosts,
            0,
            "test -e /srv/plain && echo present || echo absent"
        ),
        "absent\n"
    );
}

#[test]
fn packages_install_in_one_transaction_per_host_move_versions_and_are_purged() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    let src = |demo: &str, with_tree: bool| {
        let mut s = String::from("import \"std/debian\"\n");
        for i in 0..hosts.len() {
            s.push_str(&format!(
                "let h{i} = host(name = \"{}\", address = \"{}\")\n",
                hosts.name(i),
                hosts.addr(i)
            ));
            let tree = if with_tree { r#", tree = """# } else { "" };
            s.push_str(&format!("let p{i} = debian.packages(h{i}, {{ hello = \"\", envc-demo = \"{demo}\"{tree} }})\n"));
        }
        s.replace("envc-demo = ", "\"envc-demo\" = ")
    };
    p.write("prod.env", &src("1.0", true));
    let cold = p.run(&hosts, &["build"]);
    ok(&cold);
    assert_eq!(summary(&cold), (2 + 6, 0, 0), "{}", text(&cold));
    for i in 0..2 {
        // One apt transaction for the host's three packages.
        assert_eq!(
            remote(
                &hosts,
                i,
                "grep -c '^Commandline: apt-get .* install ' /var/log/apt/history.log"
            ),
            "1\n"
        );
        assert_eq!(
            remote(
                &hosts,
                i,
                "cat /usr/share/envc-demo/version; command -v hello tree"
            ),
            "1.0\n/usr/bin/hello\n/usr/bin/tree\n"
        );
    }
    assert_eq!(summary(&p.run(&hosts, &["build"])), (0, 8, 0));

    // The pin moves: exactly that package, on each host.
    p.write("prod.env", &src("2.0", true));
    let moved = p.run(&hosts, &["build"]);
    ok(&moved);
    assert_eq!(summary(&moved), (2, 6, 0), "{}", text(&moved));
    assert_eq!(
        remote(&hosts, 1, "cat /usr/share/envc-demo/version"),
        "2.0\n"
    );

    // A package dropped from the source is purged (envc installed it).
    p.write("prod.env", &src("2.0", false));
    let dropped = p.run(&hosts, &["build"]);
    ok(&dropped);
    assert!(
        String::from_utf8_lossy(&dropped.stdout).contains("2 deleted"),
        "{}",
        text(&dropped)
    );
    assert_eq!(
        remote(
            &hosts,
            0,
            "dpkg -s tree >/dev/null 2>&1 && echo installed || echo purged; command -v hello"
        ),
        "purged\n/usr/bin/hello\n"
    );

    // A package that does not exist fails with apt's reason; the other host is unaffected.
    p.write(
        "prod.env",
        &src("2.0", false).replace(
            "let p1 = debian.packages(h1, {",
            "let p1 = debian.packages(h1, { \"no-such-package\" = \"\",",
        ),
    );
    let missing = p.run(&hosts, &["build"]);
    assert_eq!(missing.status.code(), Some(4), "{}", text(&missing));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("no-such-package") && err.contains("Unable to locate package"),
        "{err}"
    );
}

#[test]
fn a_changed_host_key_stops_the_host_until_trusted_and_then_everything_on_it_reruns() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    let src = |addr: std::net::Ipv4Addr| {
        format!("let h = host(name = \"app\", address = \"{addr}\")\nlet f = file(path = \"/etc/app.conf\", content = \"v1\\n\", target = h)\n")
    };
    p.write("prod.env", &src(hosts.addr(0)));
    ok(&p.run(&hosts, &["build"]));
    // The name now points at another machine (as after a reinstall, or an attack): its
    // key differs from the recorded one, and nothing is sent to it.
    p.write("prod.env", &src(hosts.addr(1)));
    let o = p.run(&hosts, &["build", "--json"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let host = events.iter().find(|e| e["node"] == "host:app").unwrap();
    let why = host["outcome"].as_str().unwrap();
    assert!(
        why.contains("SHA256:") && why.contains("--trust-host-key app"),
        "{why}"
    );
    assert_eq!(events.last().unwrap()["summary"]["failed"], 1);
    assert_eq!(
        remote(
            &hosts,
            1,
            "test -e /etc/app.conf && echo present || echo absent"
        ),
        "absent\n"
    );
    // Trusted anew: a new identity, so the file is placed again on the new machine.
    let trusted = p.run(&hosts, &["build", "--trust-host-key", "app"]);
    ok(&trusted);
    assert_eq!(summary(&trusted), (2, 0, 0), "{}", text(&trusted));
    assert_eq!(remote(&hosts, 1, "cat /etc/app.conf"), "v1\n");
    assert_eq!(summary(&p.run(&hosts, &["build"])), (0, 2, 0));
}

#[test]
fn a_host_that_dies_during_its_step_fails_that_step_and_the_others_finish() {
    use std::io::BufRead;
    let hosts = TestHosts::start(3);
    let p = Project::new(&hosts);
    // Every host installs jq: an apt transaction takes long enough to die during it.
    p.write(
        "prod.env",
        &source(
            &hosts,
            "let jqs = [for h in all => package(name = \"jq\", target = h)]\n",
        ),
    );
    p.write("peers.j2", TEMPLATE);
    let started = Instant::now();
    let mut child = p
        .envc(&hosts, &["build", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut events = Vec::new();
    let victim = format!("host:{}", hosts.name(1));
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["node"] == victim.as_str() && v["outcome"] == "ok" {
            // Connected, and its steps are starting: pull the cable.
            hosts.kill_host(1);
        }
        events.push(v);
    }
    let status = child.wait().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(status.code(), Some(4), "{events:#?}");
    let outcome = |node: String| {
        events
            .iter()
            .find(|e| e["node"] == node.as_str())
            .map_or(String::new(), |e| {
                e["outcome"].as_str().unwrap().to_string()
            })
    };
    let jq1 = outcome(format!("{}/package:jq", hosts.name(1)));
    assert!(
        jq1.starts_with("failed: ") && jq1.contains(hosts.name(1)),
        "{jq1}"
    );
    for i in [0, 2] {
        assert_eq!(outcome(format!("{}/package:jq", hosts.name(i))), "ok");
        // Debian's own /etc/motd was there: taken over, and said so.
        assert_eq!(
            outcome(format!("{}/file:/etc/motd", hosts.name(i))),
            "ok: taken over: it was there before envc, so envc will leave it in place when it leaves the source"
        );
        assert_eq!(remote(&hosts, i, "command -v jq"), "/usr/bin/jq\n");
    }
}

#[test]
fn a_corrupt_record_and_run_are_reported_repaired_and_rebuilt() {
    use envc_executor::{ObjectId, RunRecord, State, Store};
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    ok(&p.run(&hosts, &["build"]));
    p.write(
        "prod.env",
        &source(&hosts, "").replace("managed by envc", "managed by envc (v2)"),
    );
    ok(&p.run(&hosts, &["build"]));

    // One bit flips in the motd's live record and in the first run's record.
    let store = Store::open(&p.dir.path().join("env/.envc")).unwrap();
    let (_, state) = State::current(&store, "prod").unwrap();
    let motd = format!("{}/file:/etc/motd", hosts.name(0));
    let record = state.records[&motd];
    let history = State::history(&store, "prod").unwrap();
    // The first run's final record: the newest of the records its states point to (it was
    // written `unfinished` at its start and rewritten as it went).
    let runs: Vec<ObjectId> = history.iter().rev().filter_map(|(_, s)| s.run).collect();
    let name = |id: &ObjectId| store.get_json::<RunRecord>(id).unwrap().run;
    let first_name = name(&runs[0]);
    let first_run = *runs.iter().rev().find(|id| name(id) == first_name).unwrap();
    let flip = |id: &ObjectId| {
        let path = store.object_file(id);
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, bytes).unwrap();
    };
    flip(&record);
    flip(&first_run);
    let store_cmd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_envc"))
            .args(["store", "verify"])
            .args(args)
            .arg(p.env_file())
            .env_remove("ENVC_STORE")
            .output()
            .unwrap()
    };

    // The log shows the run it can read and names the one it cannot.
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout)
            .lines()
            .filter(|l| l.starts_with("run ") && !l.contains(" unfinished "))
            .count(),
        1,
        "{}",
        text(&log)
    );
    let err = String::from_utf8_lossy(&log.stderr);
    assert!(
        err.contains(&format!("run {first_run}: damaged: corrupt"))
            && err.contains("`envc store verify --repair "),
        "{err}"
    );
    // A build cannot start on a state it cannot read, and says what to do.
    let stopped = p.run(&hosts, &["build"]);
    assert_eq!(stopped.status.code(), Some(1), "{}", text(&stopped));
    assert!(
        String::from_utf8_lossy(&stopped.stderr).contains("envc store verify --repair"),
        "{}",
        text(&stopped)
    );

    // verify names exactly the two objects, and exits 3.
    let found = store_cmd(&[]);
    assert_eq!(found.status.code(), Some(3), "{}", text(&found));
    let out = String::from_utf8_lossy(&found.stdout);
    let corrupt: Vec<&str> = out.lines().filter(|l| l.starts_with("corrupt ")).collect();
    assert_eq!(corrupt.len(), 2, "{out}");
    for id in [record, first_run] {
        assert!(corrupt.iter().any(|l| l.contains(&id.hex()[2..])), "{out}");
    }
    assert!(out.contains(&format!("record of {motd}")), "{out}");
    assert!(store.object_file(&record).exists());

    // repair removes them and says what the next build runs again; that build converges.
    let repaired = store_cmd(&["--repair"]);
    ok(&repaired);
    assert!(
        String::from_utf8_lossy(&repaired.stdout)
            .contains(&format!("record of {motd} ({record}): corrupt")),
        "{}",
        text(&repaired)
    );
    let sound = store_cmd(&[]);
    ok(&sound);
    let again = p.run(&hosts, &["build"]);
    ok(&again);
    assert_eq!(summary(&again), (1, 2, 0), "{}", text(&again));
    assert_eq!(summary(&p.run(&hosts, &["build"])), (0, 3, 0));
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    assert!(log.stderr.is_empty(), "{}", text(&log));
}

#[test]
fn a_file_another_environment_rewrote_is_left_in_place_and_an_overwrite_is_noted() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    let write = |name: &str, content: &str| {
        p.write(
            name,
            &format!(
                "let h = host(name = \"{}\", address = \"{}\")\nlet f = file(path = \"/etc/shared.conf\", content = \"{content}\\n\", target = h)\n",
                hosts.name(0),
                hosts.addr(0)
            ),
        )
    };
    let run = |name: &str, args: &[&str]| {
        let file = p.dir.path().join("env").join(name);
        p.envc_on(&hosts, &file, args).output().unwrap()
    };
    let shared = || remote(&hosts, 0, "cat /etc/shared.conf");
    write("a.env", "from a");
    write("b.env", "from b");
    ok(&run("a.env", &["build"]));
    ok(&run("b.env", &["build"]));
    assert_eq!(shared(), "from b\n");

    // A created the file, but it now holds B's content: destroying A leaves it.
    let destroyed = run("a.env", &["destroy", "--yes"]);
    ok(&destroyed);
    assert!(
        String::from_utf8_lossy(&destroyed.stderr).contains(
            "left in place: its content changed since envc wrote it (now held by something else)"
        ),
        "{}",
        text(&destroyed)
    );
    assert_eq!(shared(), "from b\n");

    // A build still owns what it declares: B's new content replaces what A wrote meanwhile,
    // and the output says so.
    ok(&run("a.env", &["build"]));
    assert_eq!(shared(), "from a\n");
    write("b.env", "from b, again");
    let rebuilt = run("b.env", &["build"]);
    ok(&rebuilt);
    assert_eq!(shared(), "from b, again\n");
    assert!(
        String::from_utf8_lossy(&rebuilt.stderr).contains(&format!(
            "{}/file:/etc/shared.conf: ok: replaced content that changed since envc wrote it",
            hosts.name(0)
        )),
        "{}",
        text(&rebuilt)
    );
}

#[test]
fn drift_with_an_unreachable_host_says_what_it_could_not_check() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    ok(&p.run(&hosts, &["build"]));
    hosts.kill_host(1);
    let gone = format!("{}/file:/etc/motd", hosts.name(1));

    // Nothing drifted where envc could look, but that is not "none": exit 6.
    let o = p.run(&hosts, &["drift", "--connect-timeout", "3"]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("every target matches"), "{out}");
    assert!(out.contains("drift: none found, but "), "{out}");
    assert!(out.contains("could not be checked"), "{out}");
    assert!(out.contains(&gone), "{out}");
    let json = p.run(&hosts, &["drift", "--json", "--connect-timeout", "3"]);
    assert_eq!(json.status.code(), Some(6), "{}", text(&json));
    let last: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&json.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["summary"]["drifted"], 0, "{}", text(&json));
    assert!(
        last["summary"]["unchecked"].as_u64().unwrap() >= 2,
        "{}",
        text(&json)
    );

    // Drift found and a host unreachable: drift decides the code, the summary says both.
    hosts.ssh(0, "echo tampered > /etc/motd");
    let o = p.run(&hosts, &["drift", "--connect-timeout", "3"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("drift: 1 nodes differ"), "{out}");
    assert!(out.contains("could not be checked"), "{out}");

    // plan --refresh plans from the records of what it could not probe, and says so.
    let o = p.run(&hosts, &["plan", "--refresh", "--connect-timeout", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("could not be checked"), "{out}");
    assert!(out.contains(&gone), "{out}");
}

#[test]
fn a_build_labels_each_node_with_the_action_plan_gave_it_even_when_it_cannot_run() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    // Host 1 was never reached: everything on it is to be created, and stays unbuilt.
    hosts.kill_host(1);
    let json_lines = |o: &Output| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let planned: std::collections::BTreeMap<String, String> = json_lines(&plan)
        .iter()
        .filter_map(|v| {
            Some((
                v["node"].as_str()?.to_string(),
                v["action"].as_str()?.to_string(),
            ))
        })
        .collect();
    let build = p.run(&hosts, &["build", "--json", "--connect-timeout", "3"]);
    assert_eq!(build.status.code(), Some(4), "{}", text(&build));
    let mut seen = 0;
    for v in json_lines(&build) {
        let Some(node) = v["node"].as_str() else {
            continue;
        };
        assert_eq!(
            v["action"].as_str(),
            planned.get(node).map(String::as_str),
            "{node}: {v}\n{}",
            text(&build)
        );
        if node.starts_with(&format!("{}/", hosts.name(1))) {
            assert!(!v["outcome"].as_str().unwrap().starts_with("ok"), "{v}");
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "host 1's template and motd: {}", text(&build));
}

/// What envc made stays envc's through a SIGKILL: the killed run's package step had installed
/// its packages (apt is held in a `DPkg::Post-Invoke` hook) and its file step written its
/// files, but their records were never committed. The rebuild finds them present; destroy
/// still removes all of it, leaving each host as it was.
#[test]
fn what_a_killed_build_created_is_still_destroyed_after_the_rebuild() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    p.write(
        "prod.env",
        &files_and_packages(&hosts, "/etc/envc-kill", 4, "", &["hello", "tree"]),
    );
    let look = host_state("/etc/envc-kill", &["hello", "tree"]);
    let before: Vec<String> = (0..2).map(|i| remote(&hosts, i, &look)).collect();
    assert!(before[0].starts_with("hello absent"), "{}", before[0]);
    for i in 0..2 {
        remote(
            &hosts,
            i,
            "echo 'DPkg::Post-Invoke { \"while [ ! -e /run/envc-go ]; do sleep 0.1; done\"; };' \
             >/etc/apt/apt.conf.d/99envc-hold",
        );
    }
    let mut child = p
        .envc(&hosts, &["build"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(120),
        "the files and packages to be on both hosts",
        || {
            assert_eq!(
                child.try_wait().unwrap(),
                None,
                "envc ended before it was killed"
            );
            (0..2).all(|i| {
                remote(
                    &hosts,
                    i,
                    "[ -e /etc/envc-kill/f3 ] && dpkg -s hello tree >/dev/null 2>&1 && echo yes",
                ) == "yes\n"
            })
        },
    );
    let _ = child.kill();
    let _ = child.wait();
    // The killed run is in the history, as one that never ended.
    let log = p.run(&hosts, &["log"]);
    let first = String::from_utf8_lossy(&log.stdout)
        .lines()
        .next()
        .map(str::to_string);
    assert!(
        first.is_some_and(|l| l.contains(" unfinished ")),
        "{}",
        text(&log)
    );
    for i in 0..2 {
        remote(
            &hosts,
            i,
            "rm /etc/apt/apt.conf.d/99envc-hold; touch /run/envc-go; \
             while cat /proc/[0-9]*/comm 2>/dev/null | grep -qx apt-get; do sleep 0.1; done",
        );
    }
    ok(&p.run(&hosts, &["build"]));
    destroy_restores(&p, &hosts, &look, &before);
}

/// A store that fills up mid-run (a small tmpfs as `ENVC_STORE`, filled once the file step
/// is done while apt waits for dpkg's lock) fails the run with exit 4, and still prints its
/// summary and records it: after space is freed, `envc log` lists it as failed.
#[test]
fn a_run_that_fills_the_store_prints_its_summary_and_is_in_the_log() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    let store = p.dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&store)
        .status()
        .unwrap();
    assert!(mount.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(store.clone());
    p.write(
        "prod.env",
        &format!(
            "let h = host(name = \"{}\", address = \"{}\")\n\
             let fs = [for n in 0..4 => file(path = \"/etc/envc-full/f${{n}}\", content = \"${{n}}\\n\", target = h)]\n\
             let jq = package(name = \"jq\", target = h)\n",
            hosts.name(0),
            hosts.addr(0)
        ),
    );
    let holder = remote(
        &hosts,
        0,
        "setsid python3 -c 'import fcntl, time; f = open(\"/var/lib/dpkg/lock-frontend\", \"w\"); \
         fcntl.lockf(f, fcntl.LOCK_EX); open(\"/run/envc-held\", \"w\").close(); time.sleep(600)' \
         </dev/null >/dev/null 2>&1 & echo $!; \
         for i in $(seq 100); do [ -e /run/envc-held ] && break; sleep 0.1; done",
    );
    let envc = |args: &[&str]| {
        let mut cmd = p.envc(&hosts, args);
        cmd.env("ENVC_STORE", &store);
        cmd
    };
    let child = envc(&["build"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "the files on the host", || {
        remote(&hosts, 0, "[ -e /etc/envc-full/f3 ] && echo yes") == "yes\n"
    });
    std::thread::sleep(Duration::from_millis(500));
    // Fill the store's file system.
    let fill = store.join("fill");
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&fill).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
    }
    remote(&hosts, 0, &format!("kill {}", holder.trim()));
    let o = output_within(child, Duration::from_secs(300));
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let (ran, _, _) = summary(&o);
    assert!(ran >= 1, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("No space left on device"),
        "{}",
        text(&o)
    );
    std::fs::remove_file(&fill).unwrap();
    let log = envc(&["log"]).output().unwrap();
    ok(&log);
    let out = String::from_utf8_lossy(&log.stdout);
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains(" build ") && first.contains(" failed "),
        "{}",
        text(&log)
    );
}

/// Fault injection: builds SIGKILLed at pseudo-random moments from a fixed seed (so a failure
/// names a schedule that can be replayed), over files and a package on two hosts, with apt
/// slowed so that no kill comes after the end. Wherever a
/// kill lands, the invariants hold: the rebuild converges, the store verifies, `drift` is
/// clean; and at the end `destroy` leaves each host as it was before the first build.
/// (A full store and a lost host have their own tests above.)
#[test]
fn builds_killed_at_seeded_moments_keep_every_invariant() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts);
    // Each round changes every file and swaps the package, so each killed build has
    // updates, an install and a purge under way.
    let source = |round: usize| {
        let package = ["hello", "tree"][round % 2];
        files_and_packages(
            &hosts,
            "/etc/envc-fault",
            20,
            &round.to_string(),
            &[package],
        )
    };
    let look = host_state("/etc/envc-fault", &["hello", "tree"]);
    let before: Vec<String> = (0..2).map(|i| remote(&hosts, i, &look)).collect();
    // Every apt transaction takes 3 s more, so each build lasts longer than the longest
    // delay below: every kill lands while envc runs, wherever in the run that is.
    for i in 0..2 {
        remote(
            &hosts,
            i,
            "echo 'DPkg::Pre-Invoke { \"sleep 3\"; };' >/etc/apt/apt.conf.d/99envc-slow",
        );
    }
    let store_verify = || {
        hosts
            .in_controller(env!("CARGO_BIN_EXE_envc"))
            .args(["store", "verify"])
            .arg(p.env_file())
            .env_remove("ENVC_STORE")
            .output()
            .unwrap()
    };
    let mut seed: u64 = 0x5eed_0001;
    let mut landed = 0;
    for round in 0..4 {
        p.write("prod.env", &source(round));
        // xorshift64: the same schedule on every run of the test.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(100 + seed % 2500);
        let mut child = p
            .envc(&hosts, &["build"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        landed += usize::from(child.try_wait().unwrap().is_none());
        let _ = child.kill();
        let _ = child.wait();
        let what = format!("round {round}, killed after {delay:?}");
        let again = p.run(&hosts, &["build"]);
        assert_eq!(again.status.code(), Some(0), "{what}: {}", text(&again));
        let verify = store_verify();
        assert_eq!(verify.status.code(), Some(0), "{what}: {}", text(&verify));
        let drift = p.run(&hosts, &["drift"]);
        assert_eq!(drift.status.code(), Some(0), "{what}: {}", text(&drift));
        let last = p.run(&hosts, &["build"]);
        assert_eq!(
            summary(&last).0,
            0,
            "{what}: nothing left to run: {}",
            text(&last)
        );
    }
    // A kill that came after the build ended would test nothing.
    assert_eq!(landed, 4, "every kill lands mid-build");
    destroy_restores(&p, &hosts, &look, &before);
}

/// On every host: `files` files under `dir` (`f0`…, holding `N SUFFIX`) and the Debian
/// `packages`.
fn files_and_packages(
    hosts: &TestHosts,
    dir: &str,
    files: usize,
    suffix: &str,
    packages: &[&str],
) -> String {
    let set: Vec<String> = packages.iter().map(|p| format!("{p} = \"\"")).collect();
    let mut s = String::from("import \"std/debian\"\n");
    for i in 0..hosts.len() {
        s.push_str(&format!(
            "let h{i} = host(name = \"{}\", address = \"{}\")\n\
             let f{i} = [for n in 0..{files} => file(path = \"{dir}/f${{n}}\", content = \"${{n}}{suffix}\\n\", target = h{i})]\n\
             let p{i} = debian.packages(h{i}, {{ {} }})\n",
            hosts.name(i),
            hosts.addr(i),
            set.join(", ")
        ));
    }
    s
}

/// A shell command printing what of `dir` and `packages` a host has: the files, and each
/// package installed or absent. (The directory `mkdir -p` made stays: envc removes files,
/// never directories.)
fn host_state(dir: &str, packages: &[&str]) -> String {
    format!(
        "ls -A {dir} 2>/dev/null; for p in {}; do \
         [ \"$(dpkg-query -W -f '${{db:Status-Status}}' $p 2>/dev/null)\" = installed ] \
         && echo $p installed || echo $p absent; done",
        packages.join(" ")
    )
}

/// `destroy --yes` removes everything envc made (nothing is "left in place: envc did not
/// create it"), and each host is again as `before` (what `look` printed before the first
/// build).
fn destroy_restores(p: &Project, hosts: &TestHosts, look: &str, before: &[String]) {
    let destroyed = p.run(hosts, &["destroy", "--yes"]);
    ok(&destroyed);
    assert!(
        !text(&destroyed).contains("did not create"),
        "{}",
        text(&destroyed)
    );
    for (i, was) in before.iter().enumerate() {
        assert_eq!(&remote(hosts, i, look), was, "host {i}");
    }
}

/// `envc build --json | head -1`: once the reader is gone every write to stdout fails, and
/// the build still runs to its end, records the run and exits as the run would (0), not 101.
#[test]
fn a_build_whose_stdout_is_closed_finishes_and_is_recorded() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    p.write("prod.env", &source(&hosts, ""));
    p.write("peers.j2", TEMPLATE);
    for args in [&["build", "--json"][..], &["build"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = p
            .envc(&hosts, args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    }
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    let runs = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| l.starts_with("run ") && l.contains(" ok "))
        .count();
    assert_eq!(runs, 2, "both runs are recorded: {}", text(&log));
    assert_eq!(
        remote(&hosts, 0, "cat /etc/motd"),
        format!("managed by envc: {}\n", hosts.name(0))
    );
}

#[test]
fn a_locked_build_installs_exactly_the_pinned_debs_on_hosts_with_no_mirror() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    // The hosts' rootfs and its repository as a mirror (scripts/testhosts/make-archive).
    let archive = tempfile::tempdir().unwrap();
    let made = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/testhosts/make-archive"
    ))
    .arg(hosts.rootfs())
    .arg(archive.path())
    .output()
    .unwrap();
    assert!(made.status.success(), "{made:?}");
    // The mirror lives in the controller's network, where envc runs; the host has no route
    // to it, and no apt source or index of its own.
    let mut server = hosts
        .in_controller("python3")
        .args([
            "-m",
            "http.server",
            "8765",
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(archive.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), "the archive's server", || {
        let mut probe = hosts.in_controller("bash");
        probe.args(["-c", "exec 3<>/dev/tcp/127.0.0.1/8765"]);
        probe.status().is_ok_and(|s| s.success())
    });
    let cleared = hosts.ssh(
        0,
        "rm -f /etc/apt/sources.list.d/* && rm -rf /var/lib/apt/lists/*",
    );
    assert!(cleared.status.success(), "{cleared:?}");
    let run = |args: &[&str]| {
        p.envc(&hosts, args)
            .env("ENVC_DEBIAN_MIRROR", "http://127.0.0.1:8765")
            .env("ENVC_ARCHIVE_KEYRING", "")
            .output()
            .unwrap()
    };
    let src = |names: &[&str]| {
        let mut s = format!(
            "let h = host(name = \"{}\", address = \"{}\")\n",
            hosts.name(0),
            hosts.addr(0)
        );
        for n in names {
            s.push_str(&format!(
                "let {} = package(name = \"{n}\", target = h)\n",
                n.replace('-', "_")
            ));
        }
        s
    };

    p.write("prod.env", &src(&["jq"]));
    ok(&run(&["lock"]));
    let lock = std::fs::read_to_string(p.dir.path().join("env/prod.lock")).unwrap();
    assert!(
        lock.contains(
            "starts_from = [\"required\"]\nclosure = [\n    \"libjq1\",\n    \"libonig5\",\n]"
        ),
        "{lock}"
    );
    let built = run(&["build"]);
    ok(&built);
    assert_eq!(remote(&hosts, 0, "jq -n '[1,2] | add'"), "3\n");
    // The .debs came through envc's connection and the store, each kept once by its hash.
    let kept = std::fs::read_dir(p.dir.path().join("env/.envc/debs"))
        .unwrap()
        .count();
    assert_eq!(kept, 3);
    assert_eq!(summary(&run(&["build"])), (0, 2, 0));

    // jq's sha256 edited by hand (its fields still agree, so `lock --check` cannot see it):
    // the host has the pinned version, so nothing would ship, and still the build holds the
    // pin to its bytes and refuses it.
    let lock_path = p.dir.path().join("env/prod.lock");
    let block = lock.find("name = \"jq\"\n").unwrap();
    let at = block + lock[block..].find("sha256 = \"").unwrap() + "sha256 = \"".len();
    let mut edited = lock.clone();
    edited.replace_range(at..at + 64, &"5".repeat(64));
    std::fs::write(&lock_path, &edited).unwrap();
    let refused = run(&["build"]);
    assert_eq!(refused.status.code(), Some(4), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("pin package:jq") && err.contains("does not match its pin"),
        "{err}"
    );
    std::fs::write(&lock_path, &lock).unwrap();
    assert_eq!(summary(&run(&["build"])), (0, 2, 0));

    // The mirror serves other bytes than were locked: the build says which pin, and
    // installs nothing.
    p.write("prod.env", &src(&["jq", "hello"]));
    ok(&run(&["lock"]));
    let hello = std::fs::read_dir(archive.path().join("pool/main"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("hello_")
        })
        .unwrap();
    let mut bytes = std::fs::read(&hello).unwrap();
    // `envc lock` kept the .deb it checked to pin hello in the store, and a build installs
    // the store's copy: without it, the build goes to the mirror.
    let kept = format!("{}.deb", envc_lockfiles::fetch::sha256_hex(&bytes));
    std::fs::remove_file(p.dir.path().join("env/.envc/debs").join(kept)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&hello, bytes).unwrap();
    let refused = run(&["build"]);
    assert_eq!(refused.status.code(), Some(4), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("package `hello`")
            && err.contains("pin package:hello")
            && err.contains("does not match its pin")
            && err.contains("nothing was installed"),
        "{err}"
    );
    assert_eq!(
        remote(
            &hosts,
            0,
            "dpkg -s hello >/dev/null 2>&1 && echo installed || echo absent"
        ),
        "absent\n"
    );

    // A vendor's archive, served beside Debian's and signed with a key the source pins:
    // its package is locked from it, and installed from its pinned .deb like any other.
    let vendor = archive.path().join("acme");
    let dists = vendor.join("dists/bookworm-acme");
    let index = std::fs::read_to_string(
        archive
            .path()
            .join("dists/bookworm/main/binary-amd64/Packages"),
    )
    .unwrap();
    let demo = index
        .split("\n\n")
        .find(|s| s.contains("Package: envc-demo\n") && s.contains("Version: 2.0\n"))
        .unwrap();
    let deb = demo
        .lines()
        .find_map(|l| l.strip_prefix("Filename: "))
        .unwrap();
    std::fs::create_dir_all(vendor.join(deb).parent().unwrap()).unwrap();
    std::fs::copy(archive.path().join(deb), vendor.join(deb)).unwrap();
    let packages = format!("{}\n", demo.trim_end());
    std::fs::create_dir_all(dists.join("main/binary-amd64")).unwrap();
    std::fs::write(dists.join("main/binary-amd64/Packages"), &packages).unwrap();
    std::fs::write(
        dists.join("Release"),
        format!(
            "Origin: Acme\nSuite: bookworm-acme\nCodename: bookworm-acme\n\
             Date: Sat, 11 Jul 2026 10:16:37 UTC\nArchitectures: amd64\nComponents: main\n\
             SHA256:\n {} {} main/binary-amd64/Packages\n",
            envc_lockfiles::fetch::sha256_hex(packages.as_bytes()),
            packages.len()
        ),
    )
    .unwrap();
    let acme = signing_key::TestKey::new("Acme Archive <apt@acme.test>");
    acme.sign(&dists);
    std::fs::create_dir_all(p.dir.path().join("env/keys")).unwrap();
    p.write("keys/acme.asc", &String::from_utf8(acme.public()).unwrap());
    p.write(
        "prod.env",
        &format!(
            "import \"std/debian\"\n{}let acme = debian.vendor_archive(name = \"acme\", \
             url = \"http://127.0.0.1:8765/acme\", suite = \"bookworm-acme\", \
             key = path(\"keys/acme.asc\"), fingerprint = \"{}\")\n\
             let demo = package(name = \"envc-demo\", target = h, archive = acme)\n",
            src(&["jq"]),
            acme.fingerprint
        ),
    );
    ok(&run(&["lock"]));
    let lock = std::fs::read_to_string(p.dir.path().join("env/prod.lock")).unwrap();
    assert!(
        lock.contains("name = \"envc-demo\"\narchive = \"acme\"\nversion = \"2.0\"")
            && lock.contains(&format!("signed_by = \"{}\"", acme.fingerprint)),
        "{lock}"
    );
    ok(&run(&["build"]));
    assert_eq!(
        remote(&hosts, 0, "cat /usr/share/envc-demo/version"),
        "2.0\n"
    );
    let _ = server.kill();
    let _ = server.wait();
}

/// Each checkpoint of a run writes only the outcomes since the one before it (a long run
/// writes each outcome once, not once per checkpoint), and the log of a killed run reads
/// the chain back whole; a finished run's record is one object.
#[test]
fn checkpoints_write_each_outcome_once_and_a_killed_runs_log_reads_them_all() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts);
    let mut s = format!(
        "let h = host(name = \"{}\", address = \"{}\")\n",
        hosts.name(0),
        hosts.addr(0)
    );
    // One command after another, each long enough for a checkpoint (every 300 ms) after
    // it; the last waits for the test.
    for n in 0..6 {
        let after = if n == 0 {
            String::new()
        } else {
            format!(", after = [s{}]", n - 1)
        };
        let script = if n == 5 {
            "while [ ! -e /run/envc-go ]; do sleep 0.1; done".to_string()
        } else {
            format!("sleep 0.5; touch /run/envc-s{n}")
        };
        s.push_str(&format!(
            "let s{n} = exec(name = \"s{n}\", target = h, argv = [\"sh\", \"-c\", \"{script}\"]{after})\n"
        ));
    }
    p.write("prod.env", &s);
    let mut child = p
        .envc(&hosts, &["build"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = || {
        let o = p.run(&hosts, &["log", "--json"]);
        ok(&o);
        let newest = String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        newest.unwrap_or_default()
    };
    let done = |run: &serde_json::Value| {
        run["nodes"].as_array().map_or(0, |n| {
            (n.iter())
                .filter(|n| n["node"].as_str().is_some_and(|k| k.contains("/exec:")))
                .filter(|n| n["outcome"].as_str().is_some_and(|o| o.starts_with("ok")))
                .count()
        })
    };
    let mut last = serde_json::Value::Null;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done(&last) < 5 {
        assert!(
            Instant::now() < deadline,
            "five steps not in the log: {last}"
        );
        std::thread::sleep(Duration::from_millis(200));
        last = log();
    }
    let _ = child.kill();
    let _ = child.wait();
    let killed = log();
    assert_eq!(killed["result"], "unfinished", "{killed}");
    assert_eq!(done(&killed), 5, "{killed}");
    let run_id = killed["run"].as_str().unwrap().to_string();

    // The run's checkpoints in the store: several, none repeating an outcome of another.
    let records = |run: &str| -> Vec<serde_json::Value> {
        let mut found = Vec::new();
        let objects = p.dir.path().join("env/.envc/objects");
        for shard in std::fs::read_dir(objects).unwrap() {
            for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
                let bytes = std::fs::read(f.unwrap().path()).unwrap();
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                    if v["run"] == run && v.get("graph_hash").is_some() {
                        found.push(v);
                    }
                }
            }
        }
        found
    };
    let checkpoints = records(&run_id);
    assert!(checkpoints.len() >= 3, "{checkpoints:?}");
    let mut seen = std::collections::BTreeSet::new();
    for c in &checkpoints {
        assert_eq!(c["result"], "unfinished", "{c}");
        for n in c["nodes"].as_array().unwrap() {
            assert!(
                seen.insert(n["node"].to_string()),
                "written twice: {n} in {checkpoints:?}"
            );
        }
    }
    // The host and the five commands.
    assert_eq!(seen.len(), 6, "{checkpoints:?}");

    // Let the last command end: the next build runs it and records the run in one object.
    hosts.ssh(0, "touch /run/envc-go");
    let built = p.run(&hosts, &["build"]);
    ok(&built);
    let finished = log();
    assert_eq!(finished["result"], "ok", "{finished}");
    let whole: Vec<serde_json::Value> = records(finished["run"].as_str().unwrap())
        .into_iter()
        .filter(|r| r["result"] == "ok")
        .collect();
    assert_eq!(whole.len(), 1, "{whole:?}");
    assert!(whole[0].get("earlier").is_none(), "{}", whole[0]);
    // The host and six commands, of which the last ran.
    assert_eq!(
        whole[0]["nodes"].as_array().unwrap().len(),
        7,
        "{}",
        whole[0]
    );
    assert_eq!(done(&finished), 1, "{finished}");
}
