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

use crate::support::{cloud, cloud_lab, output, servers};

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
        assert_eq!(
            live[0].tags.get(k).map(String::as_str),
            Some(v),
            "{:?}",
            live[0].tags
        );
    }
    let all = describe_all(&c.ec2);
    for kind in [
        "vpc ",
        "subnet ",
        "internet-gateway ",
        "security-group ",
        "key-pair ",
    ] {
        assert!(
            all.lines().any(|l| l.starts_with(kind)),
            "no {kind}in:\n{all}"
        );
    }
    // The newest matching image, with SSH open to where envc runs from.
    assert!(
        all.contains("debian-12-amd64-20261101") || all.contains("ami-0d2c5a1f3e4b61101"),
        "{all}"
    );
    assert!(
        all.contains("10.77.0.1/32"),
        "the security group lets in envc's address:\n{all}"
    );
    assert!(c.checkip.requests() >= 1);
    let motd = c.on(&id, "cat /etc/motd");
    assert!(
        motd.starts_with(&format!("web-0 {id} at 10.0.0.")),
        "{motd}"
    );
    assert_eq!(
        c.on(&id, "dpkg-query -W -f '${Status}' jq"),
        "install ok installed"
    );

    // Again: nothing to do, and EC2 is asked nothing new.
    let again = c.envc(&["build", "--locked=false"]);
    ok(&again);
    assert_eq!(summary(&again), (0, 3, 0), "{}", text(&again));

    // A plan needs no credentials: it reads the records. Drift without them cannot ask
    // EC2: the machine is named as not checked (exit 6), not taken as gone.
    let home = tempfile::tempdir().unwrap();
    let without = |args: &[&str]| {
        c.project
            .command(&c.hosts, args)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("HOME", home.path())
            .output()
            .unwrap()
    };
    let plan = without(&["plan"]);
    ok(&plan);
    assert!(
        text(&plan).contains("0 to create, 0 to update, 0 to replace, 0 to delete, 3 unchanged"),
        "{}",
        text(&plan)
    );
    let unchecked = without(&["drift"]);
    assert_eq!(unchecked.status.code(), Some(6), "{}", text(&unchecked));
    assert!(
        text(&unchecked).contains("vm:web-0"),
        "{}",
        text(&unchecked)
    );

    // A new type: stopped, resized and started, the same machine (nothing on it runs again).
    c.project.write(&source("t3.small", "debian-12-amd64-*"));
    let plan = c.envc(&["plan", "--json"]);
    ok(&plan);
    let vm = planned(&plan, "vm:web-0");
    assert_eq!(vm["action"], "update", "{vm}");
    assert_eq!(
        vm["reasons"],
        serde_json::json!([
            "instance_type: \"t3.micro\" → \"t3.small\"",
            "the machine restarts: stopped, resized and started (the same machine: nothing on it runs again)"
        ]),
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
    assert!(
        text(&drift).contains("terminated") || text(&drift).contains("gone"),
        "{}",
        text(&drift)
    );
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

/// The instances of node `name`, by id, as moto lists them now.
fn ids(c: &Cloud, name: &str) -> Vec<String> {
    c.live(name).into_iter().map(|i| i.id).collect()
}

#[test]
fn a_create_killed_before_it_was_recorded_is_adopted_not_made_twice() {
    let mut c = Cloud::start();
    c.project.write(&source("t3.micro", "debian-12-amd64-*"));
    // The first build creates the instance and then waits for its sshd: nothing boots it
    // (no stand-in runs), so it is still waiting, nothing recorded, when it is killed.
    let mut cmd = c.project.command(&c.hosts, &["build", "--locked=false"]);
    let mut first = cmd
        .envs(c.ec2.env())
        .envs(c.checkip.env())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while ids(&c, "web-0").is_empty() {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the build ended before it made the instance"
        );
        assert!(started.elapsed().as_secs() < 120, "no instance after 120 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let made = ids(&c, "web-0");
    assert_eq!(made.len(), 1, "{made:?}");
    let log = c.envc(&["log"]);
    assert!(!text(&log).contains("vm:web-0: ok"), "{}", text(&log));

    // The next build finds it by its tags and adopts it, with the host key it was given.
    let second = c.envc(&["build", "--locked=false"]);
    ok(&second);
    assert_eq!(summary(&second), (3, 0, 0), "{}", text(&second));
    assert_eq!(ids(&c, "web-0"), made, "a second instance was made");
    assert!(c.on(&made[0], "cat /etc/motd").contains(&made[0]));
    let destroyed = c.envc(&["destroy", "--yes"]);
    ok(&destroyed);
    assert_eq!(describe_all(&c.ec2), "");
}

#[test]
fn aws_failures_name_the_node_and_the_fix_and_make_nothing() {
    // No credentials anywhere: the SDKs' places are named, nothing is made.
    let mut c = Cloud::start();
    c.project.write(&source("t3.micro", "debian-12-amd64-*"));
    let home = tempfile::tempdir().unwrap();
    let mut cmd = c.project.command(&c.hosts, &["build", "--locked=false"]);
    cmd.envs(c.ec2.env())
        .envs(c.checkip.env())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_PROFILE")
        .env("HOME", home.path());
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("vm:web-0"), "{said}");
    assert!(
        said.contains("AWS_PROFILE") && said.contains("AWS_ACCESS_KEY_ID"),
        "{said}"
    );
    assert_eq!(describe_all(&c.ec2), "");

    // No image matches the pattern.
    c.project.write(&source("t3.micro", "debian-99-amd64-*"));
    let out = c.envc(&["build", "--locked=false"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("no available image of owner 136693071363 named like \"debian-99-amd64-*\""),
        "{said}"
    );
    assert_eq!(describe_all(&c.ec2), "");

    // A lockfile whose image id was edited by hand to one that does not exist.
    c.project.write(
        "import \"std/aws\"\n\
         let net = aws.network(\"lab\", region = \"eu-west-1\")\n\
         let web = aws.machine(\"web-0\", network = net)\n",
    );
    let locked = c.envc(&["lock"]);
    ok(&locked);
    let lock = c.project.path("prod.lock");
    let text_of = std::fs::read_to_string(&lock).unwrap();
    let pinned = text_of
        .lines()
        .find_map(|l| l.strip_prefix("id = \""))
        .map(|id| id.trim_end_matches('"').to_string())
        .unwrap_or_else(|| panic!("no image id in {text_of}"));
    std::fs::write(&lock, text_of.replace(&pinned, "ami-0123456789abcdef0")).unwrap();
    let out = c.envc(&["build"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("the pinned image ami-0123456789abcdef0 does not exist"),
        "{said}"
    );
    assert!(said.contains("envc lock --update=cloud_image:"), "{said}");
    assert_eq!(describe_all(&c.ec2), "");
}

#[test]
fn credentials_aws_refuses_are_an_error_naming_the_fix() {
    // moto checks every request against its IAM: the test's made-up key is refused.
    let c = Cloud::start_with(servers::Ec2Options {
        initial_no_auth_action_count: Some(0),
        ..Default::default()
    });
    c.project.write(&source("t3.micro", "debian-12-amd64-*"));
    // (The boot stand-in cannot list instances either: the build runs without it.)
    let out = c
        .project
        .command(&c.hosts, &["build", "--locked=false"])
        .envs(c.ec2.env())
        .envs(c.checkip.env())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("vm:web-0"), "{said}");
    assert!(
        said.contains("AuthFailure") || said.contains("InvalidClientTokenId"),
        "{said}"
    );
    assert!(
        said.contains("lacks this permission") || said.contains("other credentials"),
        "{said}"
    );
}

/// A new ed25519 key pair at `path` (and `path.pub`).
fn keygen(path: &std::path::Path) {
    let o = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "made-by-hand", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// What moto says of instance `id`.
fn instance(c: &Cloud, id: &str) -> cloud::Instance {
    cloud::instances(&c.ec2, &[("instance-id", id)])
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no instance {id}"))
}

/// An instance made outside envc, straight through EC2's API (the test support's boto3,
/// with a host key in its user data and envc's login key as its key pair: what its owner
/// gave it), is adopted by its id: no instance is made, it is tagged as envc's and
/// `envc:adopted`, what differs is shown, and what is declared on it is placed. `destroy`
/// takes envc's tags off it and leaves it running; adopted again, `destroy --adopted`
/// terminates it.
#[test]
fn an_instance_made_outside_envc_is_adopted_and_left_running_by_destroy() {
    let mut c = Cloud::start();
    let keys = tempfile::tempdir().unwrap();
    let host_key = keys.path().join("host");
    keygen(&host_key);
    let login = c.project.store_dir().join("machines/id_ed25519");
    std::fs::create_dir_all(login.parent().unwrap()).unwrap();
    keygen(&login);
    let id = cloud::create_test_instance(&c.ec2, &host_key, Some(&login.with_extension("pub")));
    let host_pub = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
    let host_pub: Vec<&str> = host_pub.split_whitespace().take(2).collect();
    let host_pub = host_pub.join(" ");
    let source = |id: &str| {
        format!(
            r#"import "std/aws"

let net = aws.network("lab", region = "eu-west-1")
let legacy = aws.machine(
  "legacy",
  network = net,
  instance_type = "t3.small",
  image = {{ name = "debian", owner = "136693071363", pattern = "debian-12-amd64-*" }},
  tags = {{ team = "ops" }},
)
let motd = file(path = "/etc/motd", content = "adopted ${{legacy.instance_id}}\n", target = legacy)
adopt "vm:legacy" from {{ instance_id = "{id}", host_key = "{host_pub}" }}
"#
        )
    };
    let before: Vec<String> = cloud::instances(&c.ec2, &[])
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(before, std::slice::from_ref(&id));

    // An id EC2 does not know: said at the node, and the build fails naming the line.
    c.project.write(&source("i-0123456789abcdef0"));
    let o = c.envc(&["build", "--locked=false"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("`vm:legacy` is adopted (line prod.env:12:1), but it was not found: there is no instance i-0123456789abcdef0 in eu-west-1"),
        "{}",
        text(&o)
    );

    c.project.write(&source(&id));
    let plan = c.envc(&["plan"]);
    ok(&plan);
    assert!(
        text(&plan).contains(&format!("adopt     vm:legacy\n          found running (instance {id}, running, host key SHA256:"))
            && text(&plan).contains("instance_type: found t3.micro, the source says t3.small (kept as it is"),
        "{}",
        text(&plan)
    );
    let built = c.envc(&["build", "--locked=false"]);
    ok(&built);
    assert_eq!(summary(&built), (2, 0, 0), "{}", text(&built));
    // No instance was made: the one there is envc's now, by its tags.
    let after: Vec<String> = (cloud::instances(&c.ec2, &[]).into_iter())
        .filter(|i| i.state != "terminated")
        .map(|i| i.id)
        .collect();
    assert_eq!(after, std::slice::from_ref(&id));
    let tags = instance(&c, &id).tags;
    for (k, v) in [
        ("envc:node", "legacy"),
        ("envc:environment", "prod"),
        ("envc:managed-by", "envc"),
        ("envc:adopted", "true"),
        ("team", "ops"),
    ] {
        assert_eq!(tags.get(k).map(String::as_str), Some(v), "{tags:?}");
    }
    assert_eq!(c.on(&id, "cat /etc/motd"), format!("adopted {id}\n"));
    let again = c.envc(&["build", "--locked=false"]);
    ok(&again);
    assert_eq!(summary(&again).0, 0, "{}", text(&again));

    // Destroyed: left running as found, without envc's tags.
    let destroyed = c.envc(&["destroy", "--yes"]);
    ok(&destroyed);
    assert!(
        text(&destroyed).contains(&format!(
            "left running as it was found: adopted (instance {id}"
        )),
        "{}",
        text(&destroyed)
    );
    let found = instance(&c, &id);
    assert_eq!(found.state, "running");
    assert!(
        !found.tags.keys().any(|k| k.starts_with("envc:")) && !found.tags.contains_key("team"),
        "{:?}",
        found.tags
    );

    // Adopted again, and destroyed with --adopted: terminated.
    let built = c.envc(&["build", "--locked=false"]);
    ok(&built);
    let destroyed = c.envc(&["destroy", "--yes", "--adopted"]);
    ok(&destroyed);
    assert_eq!(
        instance(&c, &id).state,
        "terminated",
        "{}",
        text(&destroyed)
    );
}
