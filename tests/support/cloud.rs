//! The boot of an EC2 instance, for the end-to-end tests of envc's `vm` machines on AWS.
//!
//! moto's EC2 ([`Ec2Server`], tests/support/servers.rs) only records instances: one it reports
//! as running is reachable only if something listens at its addresses. [`boot_instance`] does
//! what the instance's boot (cloud-init) would do on AWS: it reads the instance and its user
//! data from moto and starts a test host (tests/support/nshosts.rs) at the instance's private
//! and public addresses, with the SSH host key the user data gives, and with the keys cloud-init
//! would authorize. The other helpers read moto's state for assertions.
//!
//! The user data is `#cloud-config` YAML; what is read from it (cloud-init's own keys):
//!
//! ```yaml
//! #cloud-config
//! ssh_keys:
//!   ed25519_private: |
//!     -----BEGIN OPENSSH PRIVATE KEY-----
//!     ...
//!     -----END OPENSSH PRIVATE KEY-----
//!   ed25519_public: ssh-ed25519 AAAA... comment
//! ssh_authorized_keys:          # optional
//!   - ssh-ed25519 AAAA... comment
//! ```
//!
//! An instance must boot while envc waits for it (envc runs RunInstances, then connects):
//! [`run_booting`] runs a command (envc) and meanwhile keeps the hosts in step with moto's
//! instances ([`sync_instances`]): a new running instance boots, a stopped or terminated
//! one's host is killed (its addresses may then be another instance's).
//!
//! Everything goes through boto3 (scripts/testhosts/ec2.py, run with the moto venv's python
//! inside the server's network namespace). A test crate that includes this file includes
//! tests/support/nshosts.rs as `mod nshosts` and tests/support/servers.rs as `mod servers`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::Duration;

use super::nshosts::TestHosts;
use super::servers::{fake_ec2_authorization, http_request, in_netns, s3_venv, Ec2Server};

/// One instance as DescribeInstances shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    /// `pending`, `running`, `stopping`, `stopped`, `shutting-down`, `terminated`.
    pub state: String,
    pub tags: BTreeMap<String, String>,
}

/// What [`boot_instance`] read from moto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// The test host's index in the `TestHosts`.
    pub host: usize,
    pub private: Ipv4Addr,
    pub public: Option<Ipv4Addr>,
    pub key_name: Option<String>,
    /// Whether the user data gave the host key (else the host made its own).
    pub host_key_given: bool,
    /// The keys the host's root accepts besides the test's: the key pair's, then the user
    /// data's `ssh_authorized_keys`.
    pub authorized: Vec<String>,
}

/// Boots instance `instance_id` of `ec2`: adds a host to `hosts` at its private address and,
/// if it has one, its public address (in that order), with the user data's ed25519 host key,
/// whose root accepts the test's key, the instance's key pair and the user data's
/// `ssh_authorized_keys`. Returns the host's index once its sshd listens. Panics unless moto
/// reports the instance as running, or if its user data is not `#cloud-config`.
pub fn boot_instance(hosts: &mut TestHosts, ec2: &Ec2Server, instance_id: &str) -> usize {
    boot_instance_info(hosts, ec2, instance_id).host
}

/// [`boot_instance`], returning what it read.
pub fn boot_instance_info(hosts: &mut TestHosts, ec2: &Ec2Server, instance_id: &str) -> Boot {
    match try_boot(hosts, ec2, instance_id) {
        Ok(boot) => boot,
        Err(state) => panic!("boot_instance({instance_id}): moto reports it {state}, not running"),
    }
}

/// Boots the instance if moto reports it as running; else its state.
fn try_boot(hosts: &mut TestHosts, ec2: &Ec2Server, instance_id: &str) -> Result<Boot, String> {
    let dir = hosts.state_dir().join(format!("boot-{instance_id}"));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let host_key = dir.join("ssh_host_ed25519_key");
    let text = ec2_py(ec2, &["boot-info", instance_id, path_str(&host_key)]);
    let mut state = None;
    let mut private = None;
    let mut public = None;
    let mut key_name = None;
    let mut host_key_given = false;
    let mut authorized = Vec::new();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let some = |v: &str| (v != "-").then(|| v.to_string());
        match key {
            "state" => state = Some(value.to_string()),
            "private" => private = some(value),
            "public" => public = some(value),
            "key-name" => key_name = some(value),
            "host-key" => host_key_given = value == "given",
            "authorized-key" => authorized.push(value.to_string()),
            _ => panic!("ec2.py boot-info printed {line:?}"),
        }
    }
    if state.as_deref() != Some("running") {
        return Err(state.unwrap_or_default());
    }
    let parse = |a: String| -> Ipv4Addr {
        a.parse()
            .unwrap_or_else(|e| panic!("boot_instance({instance_id}): address {a:?}: {e}"))
    };
    let private =
        parse(private.unwrap_or_else(|| {
            panic!("boot_instance({instance_id}): no private address:\n{text}")
        }));
    let public = public.map(parse);
    let addrs: Vec<Ipv4Addr> = std::iter::once(private).chain(public).collect();
    let host = hosts.add_host_with_keys(
        &addrs,
        host_key_given.then_some(host_key.as_path()),
        &authorized,
    );
    Ok(Boot {
        host,
        private,
        public,
        key_name,
        host_key_given,
        authorized,
    })
}

/// How often [`run_booting`] looks at moto's instances.
const SYNC_INTERVAL: Duration = Duration::from_millis(250);

/// Brings `hosts` in step with moto's instances, as the cloud would: each running instance
/// not in `booted` (instance id -> host index) is booted ([`boot_instance`]) and recorded;
/// each instance of `booted` that is no longer running or pending (stopping, stopped,
/// shutting-down, terminated, or gone) has its host killed and leaves `booted`, so that it
/// boots afresh (new host, empty disk) if it runs again. Returns what it did, as
/// `boot ID` / `halt ID` lines.
pub fn sync_instances(
    hosts: &mut TestHosts,
    ec2: &Ec2Server,
    booted: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let mut done = Vec::new();
    let now = instance_states(ec2);
    let live: BTreeMap<&str, (&str, Option<&str>)> = now
        .iter()
        .map(|(id, state, public)| (id.as_str(), (state.as_str(), public.as_deref())))
        .collect();
    // Halted, or moved: EC2 gives an instance that was stopped and started again a new
    // public address, and it boots again there.
    let moved = |id: &str, host: usize| match live.get(id) {
        Some((_, Some(public))) => !hosts
            .host_addrs(host)
            .iter()
            .any(|a| a.to_string() == *public),
        _ => false,
    };
    let halted: Vec<String> = booted
        .iter()
        .filter(|(id, host)| {
            !matches!(live.get(id.as_str()), Some(("running" | "pending", _))) || moved(id, **host)
        })
        .map(|(id, _)| id.clone())
        .collect();
    for id in halted {
        if let Some(host) = booted.remove(&id) {
            hosts.kill_host(host);
            done.push(format!("halt {id}"));
        }
    }
    for (id, _, _) in now.iter().filter(|(_, state, _)| state == "running") {
        // One that stopped since it was listed boots at the next call, if it runs again.
        if !booted.contains_key(id) {
            if let Ok(boot) = try_boot(hosts, ec2, id) {
                booted.insert(id.clone(), boot.host);
                done.push(format!("boot {id}"));
            }
        }
    }
    done
}

/// Every instance's id, state and public address. Asked of moto directly (one DescribeInstances in its
/// namespace, the XML picked apart), as python's start would cost most of a poll; through
/// boto3 when moto checks signatures (`INITIAL_NO_AUTH_ACTION_COUNT`).
fn instance_states(ec2: &Ec2Server) -> Vec<(String, String, Option<String>)> {
    let port = ec2.port();
    let answer = in_netns(ec2.netns_pid(), move || {
        http_request(
            port,
            "GET",
            "/?Action=DescribeInstances&Version=2016-11-15&MaxResults=1000",
            &[("Authorization", &fake_ec2_authorization())],
        )
    });
    let Ok(Ok((200, body))) = answer else {
        return instances(ec2, &[])
            .into_iter()
            .map(|i| (i.id, i.state, None))
            .collect();
    };
    // Each instance's <instanceId> comes before its <instanceState>; nothing else in an
    // instance is called instanceId.
    body.split("<instanceId>")
        .skip(1)
        .filter_map(|chunk| {
            let id = chunk.split('<').next()?;
            let state = chunk.split_once("<instanceState>")?.1;
            let name = state.split_once("<name>")?.1.split('<').next()?;
            // The instance's public address comes before its network interfaces'.
            let public = chunk
                .split_once("<ipAddress>")
                .and_then(|(_, rest)| rest.split('<').next())
                .map(str::to_string);
            Some((id.to_string(), name.to_string(), public))
        })
        .collect()
}

/// Runs `cmd` (stdin empty, output captured) to its end, meanwhile calling
/// [`sync_instances`] every 250 ms, and once more at the end: the instances that `cmd`
/// starts boot while it waits for them, those it terminates go down. Call it on the thread
/// that owns `hosts` (hosts die with the thread that started them). Returns the command's
/// output; `booted` holds the instances booted at the end.
pub fn run_booting(
    hosts: &mut TestHosts,
    ec2: &Ec2Server,
    booted: &mut BTreeMap<String, usize>,
    mut cmd: Command,
) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {:?}: {e}", cmd.get_program()));
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("piped stderr")));
    let status = loop {
        sync_instances(hosts, ec2, booted);
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => sleep(SYNC_INTERVAL),
            Err(e) => panic!("waiting for {:?}: {e}", cmd.get_program()),
        }
    };
    sync_instances(hosts, ec2, booted);
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// The instances DescribeInstances lists under `filters` (EC2 filter names and values, e.g.
/// `("tag:envc:machine", "web")`, `("instance-state-name", "running")`; several values of one
/// filter are comma-separated), terminated ones included, sorted by id.
pub fn instances(ec2: &Ec2Server, filters: &[(&str, &str)]) -> Vec<Instance> {
    let mut args = vec!["instances".to_string()];
    args.extend(filters.iter().map(|(k, v)| format!("{k}={v}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ec2_py(ec2, &args)
        .lines()
        .map(|line| {
            let mut fields = line.split(' ');
            let (id, state, tags) = (fields.next(), fields.next(), fields.next());
            let (Some(id), Some(state), Some(tags)) = (id, state, tags) else {
                panic!("ec2.py instances printed {line:?}");
            };
            let tags = tags
                .split(';')
                .filter(|t| *t != "-")
                .filter_map(|t| t.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Instance {
                id: id.to_string(),
                state: state.to_string(),
                tags,
            }
        })
        .collect()
}

/// The account's resources as sorted lines, one per resource, with its id, the properties
/// that matter and its tags: instances (not terminated), security groups (not the VPCs'
/// `default` ones) with their rules, key pairs, VPCs (not the default VPC), subnets, internet
/// gateways and route tables (not main ones) outside the default VPC. Equal before a create
/// and after the destroy when the destroy left nothing behind.
pub fn describe_all(ec2: &Ec2Server) -> String {
    ec2_py(ec2, &["describe-all"])
}

/// Makes, with boto3, a VPC 10.0.0.0/16 with an internet gateway, a subnet 10.0.1.0/24 that
/// maps public addresses and a running instance there (the newest debian-12-amd64 image)
/// whose user data carries the ed25519 host key `host_key` (with `host_key.pub` beside it)
/// and, given `key_pair_pub` (a public key file), the key pair `cloud-support` made from it;
/// returns the instance id. For tests of this support code: envc makes its own.
pub fn create_test_instance(
    ec2: &Ec2Server,
    host_key: &Path,
    key_pair_pub: Option<&Path>,
) -> String {
    let mut args = vec!["create-test-instance", path_str(host_key)];
    args.extend(key_pair_pub.map(path_str));
    ec2_py(ec2, &args).trim().to_string()
}

/// Terminates instances (TerminateInstances), as a test's own cleanup would.
pub fn terminate(ec2: &Ec2Server, ids: &[&str]) {
    let mut args = vec!["terminate"];
    args.extend(ids);
    ec2_py(ec2, &args);
}

/// Stops instances (StopInstances), as someone at the console would: they stay, stopped.
pub fn stop(ec2: &Ec2Server, ids: &[&str]) {
    let mut args = vec!["stop"];
    args.extend(ids);
    ec2_py(ec2, &args);
}

/// The images of Debian's account (136693071363) as `ID NAME ARCHITECTURE` lines, sorted.
pub fn debian_images(ec2: &Ec2Server) -> Vec<String> {
    ec2_py(ec2, &["images"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs scripts/testhosts/ec2.py with `args` in the server's network namespace; its stdout.
fn ec2_py(ec2: &Ec2Server, args: &[&str]) -> String {
    let venv = s3_venv().unwrap_or_else(|e| panic!("{e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testhosts/ec2.py");
    let out = Command::new("nsenter")
        .arg("-t")
        .arg(ec2.netns_pid().to_string())
        .args(["-n", "--"])
        .arg(venv.join("bin/python"))
        .arg(&script)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(ec2.env())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running nsenter ... ec2.py: {e}"));
    assert!(
        out.status.success(),
        "ec2.py {args:?} failed ({}):\n{}\n[moto]\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        ec2.log()
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("ec2.py {args:?}: {e}"))
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
}
