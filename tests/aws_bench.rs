//! The EC2 figures of docs/benchmarks.md (issue 36): 20 `aws.machine`s, each with a file and
//! a package, created and configured, built again (a no-op), planned with and without
//! `--refresh`, and destroyed, against moto's EC2 through namespace hosts
//! (tests/support/cloud_lab.rs). Each step is its own envc run; for each the test prints
//! envc's wall time, its peak RSS and the EC2 API calls it made. `#[ignore]`d: it is a
//! measurement (under a minute), run by scripts/bench-aws.sh.
//!
//! What is real and what stands in is as in tests/aws.rs: moto's EC2 answers at once (real
//! EC2 takes tens of seconds to boot an instance), and the boot is the test's: between its
//! polls (every 250 ms) it starts a namespace host for each instance moto reports running, one
//! after another. The time the test spent booting hosts while envc ran is printed beside the
//! wall time, since envc waits for the hosts' sshd.
//!
//! How the calls are counted: envc's EC2 endpoint is a small counting proxy in front of moto
//! (one HTTP request per API call, each on its own connection), so that only envc's requests
//! are counted, not the boot stand-in's (its polls and boto3's look-ups go to moto directly).
//! Wall time is from spawning envc to its exit (a thread waits for it). CPU time and peak RSS
//! come from `/usr/bin/time -f '%M %U %S'` around `nsenter … envc` (nsenter execs envc): they
//! cover envc and the processes it waited for (ssh), `%M` being the largest RSS of any one.

use crate::support::{cloud, cloud_lab, output, servers};

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use cloud::{describe_all, instances, sync_instances};
use cloud_lab::Cloud;
use output::{summary, text};
use servers::in_netns;

const MACHINES: usize = 20;

fn source() -> String {
    format!(
        r#"import "std/aws"

let net = aws.network("bench", region = "eu-west-1")
let machines = [for i in 0..{MACHINES} => aws.machine(
  "web-${{i}}",
  network = net,
  instance_type = "t3.micro",
  image = {{ name = "debian", owner = "136693071363", pattern = "debian-12-amd64-*" }},
  tags = {{ team = "web" }},
)]
let motds = [for m in machines => file(path = "/etc/motd", content = "${{m.instance_id}} at ${{m.address}}\n", target = m)]
let jqs = [for m in machines => package(name = "jq", target = m)]
"#
    )
}

/// A counting proxy in front of moto, inside its network namespace: each request's `Action`
/// is recorded, in order, then passed on.
struct Counter {
    port: u16,
    actions: Arc<Mutex<Vec<String>>>,
}

impl Counter {
    fn start(netns_pid: u32, moto: u16) -> Counter {
        let actions = Arc::new(Mutex::new(Vec::new()));
        let seen = actions.clone();
        // Threads started by a thread in the namespace are in it too: the listener, the
        // handlers and their connections to moto.
        let port = in_netns(netns_pid, move || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            std::thread::spawn(move || {
                for conn in listener.incoming().flatten() {
                    let seen = seen.clone();
                    std::thread::spawn(move || relay(conn, moto, &seen));
                }
            });
            port
        })
        .unwrap();
        Counter { port, actions }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The actions recorded since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.actions.lock().unwrap())
    }
}

/// One request from `client`, recorded and sent to moto; moto's answer back, marked
/// `Connection: close` so that the client opens a new connection for its next call.
fn relay(client: TcpStream, moto: u16, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut head = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let end = line == "\r\n";
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if !lower.starts_with("connection:") && !end {
            head.push(line);
        }
        if end {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let query = head[0].split(' ').nth(1).unwrap_or("").to_string();
    let form = String::from_utf8_lossy(&body).into_owned();
    let action = form
        .split('&')
        .chain(query.split(['?', '&']))
        .find_map(|p| p.strip_prefix("Action="))
        .unwrap_or("?")
        .to_string();
    seen.lock().unwrap().push(action);

    let mut upstream = TcpStream::connect(("127.0.0.1", moto)).unwrap();
    let mut request = head.concat().into_bytes();
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    request.extend_from_slice(&body);
    upstream.write_all(&request).unwrap();
    let mut answer = Vec::new();
    upstream.read_to_end(&mut answer).unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("moto's answer has a head");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut out: String = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    out.push_str("Connection: close\r\n");
    let mut client = client;
    client.write_all(out.as_bytes()).unwrap();
    client.write_all(&answer[split + 2..]).unwrap();
}

/// What one envc run cost.
struct Step {
    name: &'static str,
    output: Output,
    wall_s: f64,
    /// envc's user and system time, and its children's (ssh).
    cpu_s: f64,
    rss_kib: u64,
    actions: Vec<String>,
    /// Instances the stand-in booted while envc ran, and the time it spent doing so.
    boots: usize,
    boot_s: f64,
}

/// `envc ARGS…` as the lab runs it (AWS pointed at the counter, instances booting as it
/// runs), under `/usr/bin/time`.
fn run(c: &mut Cloud, counter: &Counter, name: &'static str, args: &[&str]) -> Step {
    let dir = tempfile::tempdir().unwrap();
    let times = dir.path().join("time");
    let inner = c.project.command(&c.hosts, args);
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "%M %U %S", "-o"])
        .arg(&times)
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.envs(c.ec2.env())
        .envs(c.checkip.env())
        .env("AWS_ENDPOINT_URL_EC2", counter.endpoint());
    counter.take();

    // tests/support/cloud.rs's run_booting, keeping the time spent booting; a thread waits
    // for envc so that its end is timed to the millisecond, not to the next poll.
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let waiter = std::thread::spawn(move || {
        let status = child.wait().unwrap();
        (status, start.elapsed())
    });
    let (mut boots, mut boot_time) = (0, Duration::ZERO);
    let mut sync = |c: &mut Cloud| {
        let t = Instant::now();
        let done = sync_instances(&mut c.hosts, &c.ec2, &mut c.booted);
        let n = done.iter().filter(|d| d.starts_with("boot ")).count();
        if n > 0 {
            boots += n;
            boot_time += t.elapsed();
        }
    };
    while !waiter.is_finished() {
        sync(c);
        sleep(Duration::from_millis(250));
    }
    sync(c);
    let (status, wall) = waiter.join().unwrap();
    let output = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    let measured = std::fs::read_to_string(&times).unwrap();
    // `time` writes a line of its own first when the command failed.
    let last = measured.lines().last().unwrap_or_default();
    let fields: Vec<&str> = last.split(' ').collect();
    let [rss, user, system] = fields[..] else {
        panic!("/usr/bin/time wrote {measured:?}")
    };
    Step {
        name,
        output,
        wall_s: wall.as_secs_f64(),
        cpu_s: user.parse::<f64>().unwrap() + system.parse::<f64>().unwrap(),
        rss_kib: rss.parse().unwrap(),
        actions: counter.take(),
        boots,
        boot_s: boot_time.as_secs_f64(),
    }
}

/// The instances envc manages that are running.
fn running(c: &Cloud) -> usize {
    instances(
        &c.ec2,
        &[
            ("tag:envc:managed-by", "envc"),
            ("instance-state-name", "running"),
        ],
    )
    .len()
}

fn ok(step: &Step) {
    assert!(
        step.output.status.success(),
        "{}: {}",
        step.name,
        text(&step.output)
    );
}

#[test]
#[ignore = "a measurement (under a minute): scripts/bench-aws.sh runs it"]
fn twenty_machines_on_ec2_created_configured_planned_and_destroyed() {
    let mut c = Cloud::start();
    let counter = Counter::start(c.ec2.netns_pid(), c.ec2.port());
    let before = describe_all(&c.ec2);
    c.project.write(&source());
    let mut steps = Vec::new();
    let build = run(&mut c, &counter, "build", &["build", "--locked=false"]);
    ok(&build);
    let after_build = running(&c);
    steps.push(build);
    let noop = run(
        &mut c,
        &counter,
        "build (no-op)",
        &["build", "--locked=false"],
    );
    ok(&noop);
    steps.push(noop);
    let plan = run(&mut c, &counter, "plan", &["plan"]);
    ok(&plan);
    steps.push(plan);
    let refresh = run(&mut c, &counter, "plan --refresh", &["plan", "--refresh"]);
    ok(&refresh);
    steps.push(refresh);
    // What was configured, checked before the machines go.
    let mut configured = 0;
    for (id, &host) in &c.booted {
        let jq = c
            .hosts
            .ssh(host, "dpkg-query -W -f '${Status}' jq; cat /etc/motd");
        let out = String::from_utf8_lossy(&jq.stdout);
        if out.starts_with("install ok installed") && out.contains(id.as_str()) {
            configured += 1;
        }
    }
    let destroy = run(&mut c, &counter, "destroy", &["destroy", "--yes"]);
    ok(&destroy);
    steps.push(destroy);

    println!(
        "| step ({MACHINES} machines) | wall | CPU | peak RSS | EC2 calls | per machine | stand-in booting |"
    );
    println!("|---|---|---|---|---|---|---|");
    for s in &steps {
        println!(
            "| {} | {:.3} s | {:.2} s | {:.1} MiB | {} | {:.1} | {} in {:.1} s |",
            s.name,
            s.wall_s,
            s.cpu_s,
            s.rss_kib as f64 / 1024.0,
            s.actions.len(),
            s.actions.len() as f64 / MACHINES as f64,
            s.boots,
            s.boot_s
        );
    }
    for s in &steps {
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for a in &s.actions {
            *by.entry(a.as_str()).or_default() += 1;
        }
        let by: Vec<String> = by.iter().map(|(a, n)| format!("{a} {n}")).collect();
        println!("calls of {}: {}", s.name, by.join(", "));
    }
    // For scripts/bench-aws.sh: one line per step, tab-separated.
    for s in &steps {
        println!(
            "BENCH\t{}\t{:.3}\t{:.2}\t{}\t{}\t{:.1}",
            s.name,
            s.wall_s,
            s.cpu_s,
            s.rss_kib,
            s.actions.len(),
            s.boot_s
        );
    }

    // The basics, so that the figures are of a run that did what it says.
    let n = MACHINES * 3;
    assert_eq!(after_build, MACHINES, "running after the build");
    assert_eq!(
        summary(&steps[0].output),
        (n, 0, 0),
        "{}",
        text(&steps[0].output)
    );
    assert_eq!(configured, MACHINES, "machines with jq and their /etc/motd");
    assert_eq!(
        summary(&steps[1].output),
        (0, n, 0),
        "{}",
        text(&steps[1].output)
    );
    assert_eq!(steps[1].boots, 0);
    assert!(
        steps[2].actions.is_empty(),
        "plan asks EC2 nothing: {:?}",
        steps[2].actions
    );
    assert!(!steps[3].actions.is_empty(), "plan --refresh asks EC2");
    assert_eq!(running(&c), 0, "running after the destroy");
    assert_eq!(
        describe_all(&c.ec2),
        before,
        "the destroy left the account as it was"
    );
}
