//! `vm` nodes on AWS EC2, end to end against moto's real EC2 API server.
//!
//! What is real: moto's EC2 (its API, its state, its ids and addresses), envc's EC2 client
//! and provider, sshd on a namespace test host, and everything envc does over SSH. What
//! stands in for the boot: an instance moto reports as running does not boot anything, so
//! the test's support code (tests/support/cloud.rs) starts a namespace host at the private
//! and public addresses moto assigned it, with the SSH host key its user data carries, and
//! takes it down when the instance stops or terminates (what cloud-init and the hypervisor
//! would do). AWS's checkip service is a loopback server answering the controller's address.
//! moto, the hosts and envc all live in the test's own network namespace.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

#[path = "support/cloud.rs"]
mod cloud;
#[path = "support/cloud_lab.rs"]
mod cloud_lab;
#[path = "support/nshosts.rs"]
mod nshosts;
#[path = "support/output.rs"]
mod output;
#[path = "support/project.rs"]
mod project;
#[path = "support/servers.rs"]
mod servers;
#[path = "support/ssh_config.rs"]
mod ssh_config;

use std::process::Output;

use cloud::{describe_all, terminate};
use cloud_lab::Cloud;
use output::{summary, text};

fn source(instance_type: &str, image: &str) -> String {
    format!(
        r#"import "std/aws"

let net = aws.network("lab", region = "eu-west-1")
let web = aws.machine(
  "web-0",
  network = net,
  instance_type = "{instance_type}",
  image = {{ name = "debian", owner = "136693071363", pattern = "{image}" }},
  tags = {{ team = "web" }},
)
let motd = file(path = "/etc/motd", content = "web-0 ${{web.instance_id}} at ${{web.address}}\n", target = web)
let jq = package(name = "jq", target = web)
output public = web.public_address
"#
    )
}

/// What `plan --json` says of node `key`.
fn planned(o: &Output, key: &str) -> serde_json::Value {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|n| n["node"] == key)
        .unwrap_or_else(|| panic!("no {key} in {}", text(o)))
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

#[test]
fn a_machine_on_ec2_lives_its_whole_life_through_envc() {
    let mut c = Cloud::start();
    let before = describe_all(&c.ec2);
    c.project.write(&source("t3.micro", "debian-12-amd64-*"));

    // Created with its network, its key pair and its tags; configured over SSH.
    let first = c.envc(&["build", "--locked=false"]);
    ok(&first);
    assert_eq!(summary(&first), (3, 0, 0), "{}", text(&first));
    let live = c.live("web-0");
    assert_eq!(live.len(), 1, "{live:?}");
    let id = live[0].id.clone();
    for (k, v) in [
        ("envc:node", "web-0"),
        ("envc:network", "lab"),
        ("envc:managed-by", "envc"),
        ("team", "web"),
    ] {
        assert_eq!(live[0].tags.get(k).map(String::as_str), Some(v), "{:?}", live[0].tags);
    }
    let all = describe_all(&c.ec2);
    for kind in ["vpc ", "subnet ", "internet-gateway ", "security-group ", "key-pair "] {
        assert!(all.lines().any(|l| l.starts_with(kind)), "no {kind}in:\n{all}");
    }
    // The newest matching image, with SSH open to where envc runs from.
    assert!(all.contains("debian-12-amd64-20261101") || all.contains("ami-0d2c5a1f3e4b61101"), "{all}");
    assert!(all.contains("10.77.0.1/32"), "the security group lets in envc's address:\n{all}");
    assert!(c.checkip.requests() >= 1);
    let motd = c.on(&id, "cat /etc/motd");
    assert!(motd.starts_with(&format!("web-0 {id} at 10.0.0.")), "{motd}");
    assert_eq!(c.on(&id, "dpkg-query -W -f '${Status}' jq"), "install ok installed");

    // Again: nothing to do, and EC2 is asked nothing new.
    let again = c.envc(&["build", "--locked=false"]);
    ok(&again);
    assert_eq!(summary(&again), (0, 3, 0), "{}", text(&again));

    // A plan needs no credentials: it reads the records.
    let plan = c
        .project
        .command(&c.hosts, &["plan"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap();
    ok(&plan);

    // A new type: stopped, resized and started, the same machine (nothing on it runs again).
    c.project.write(&source("t3.small", "debian-12-amd64-*"));
    let plan = c.envc(&["plan", "--json"]);
    ok(&plan);
    let vm = planned(&plan, "vm:web-0");
    assert_eq!(vm["action"], "update", "{vm}");
    assert_eq!(
        vm["reasons"],
        serde_json::json!(["instance_type: \"t3.micro\" → \"t3.small\""]),
        "{vm}"
    );
    let resized = c.envc(&["build", "--locked=false"]);
    ok(&resized);
    assert_eq!(summary(&resized), (1, 2, 0), "{}", text(&resized));
    let live = c.live("web-0");
    assert_eq!(live.iter().map(|i| &i.id).collect::<Vec<_>>(), [&id]);
    assert!(describe_all(&c.ec2).contains("t3.small"));

    // Terminated behind envc's back: drift sees it; a plan without --refresh does not ask.
    terminate(&c.ec2, &[&id]);
    let drift = c.envc(&["drift"]);
    assert_eq!(drift.status.code(), Some(3), "{}", text(&drift));
    assert!(text(&drift).contains("terminated") || text(&drift).contains("gone"), "{}", text(&drift));
    // The next build makes a new machine, and everything on it runs again.
    let rebuilt = c.envc(&["build", "--locked=false", "--refresh"]);
    ok(&rebuilt);
    assert_eq!(summary(&rebuilt), (3, 0, 0), "{}", text(&rebuilt));
    let live = c.live("web-0");
    assert_eq!(live.len(), 1);
    assert_ne!(live[0].id, id);
    let id = live[0].id.clone();

    // Another image replaces the machine.
    c.project.write(&source("t3.small", "debian-13-amd64-*"));
    let replaced = c.envc(&["build", "--locked=false"]);
    ok(&replaced);
    assert_eq!(summary(&replaced), (3, 0, 0), "{}", text(&replaced));
    let live = c.live("web-0");
    assert_eq!(live.len(), 1);
    assert_ne!(live[0].id, id);

    // Destroy leaves the account as it was.
    let destroyed = c.envc(&["destroy", "--yes"]);
    ok(&destroyed);
    assert_eq!(describe_all(&c.ec2), before);
}
