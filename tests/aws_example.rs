//! `examples/aws` (the quickstart on EC2: two instances, nginx, a config file listing both),
//! end to end against moto's EC2 through the namespace hosts that stand in for its instances'
//! boot (tests/aws.rs says what is real and what stands in). Locked: the lockfile pins
//! Debian's image and nginx's `.deb`s from Debian's real archive, and the build installs
//! exactly those bytes on hosts that reach no archive.
//!
//! Two stand-ins besides the boot: moto a second time, beside the test in the machine's own
//! network namespace, where `envc lock` reaches both EC2 (for the image) and Debian's archive
//! (for the packages); and systemd on the hosts (scripts/testhosts/systemd-stand-in: a
//! `systemctl` over the units' init scripts), which a Debian instance on EC2 runs and the
//! test hosts do not. Needs the network (Debian's archive), root, and what tests/aws.rs
//! needs.

use crate::support::{cloud, cloud_lab, output, servers};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use cloud::{describe_all, stop};
use cloud_lab::Cloud;
use output::{summary, text};
use servers::{Ec2Options, Ec2Server};

/// The fixture's newest Debian 12 amd64 image (tests/fixtures/aws/amis.json).
const NEWEST: &str = "ami-0d2c5a1f3e4b61101";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

/// Copies `from`'s files (recursively) into `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// The `[[cloud_image]]` block of `lock` that pins image `name` in `region`, as its lines.
fn cloud_image<'a>(lock: &'a str, name: &str, region: &str) -> Vec<&'a str> {
    lock.split("[[cloud_image]]")
        .skip(1)
        .map(|b| b.split("\n[[").next().unwrap_or_default())
        .map(|b| {
            b.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|b| {
            b.contains(&format!("name = \"{name}\"").as_str())
                && b.contains(&format!("region = \"{region}\"").as_str())
        })
        .unwrap_or_else(|| panic!("no [[cloud_image]] for {name}@{region} in:\n{lock}"))
}

/// The version `lock` pins package `name` at, for hosts (its first pin).
fn pinned_version(lock: &str, name: &str) -> String {
    lock.split(&format!("\nname = \"{name}\"\n"))
        .nth(1)
        .and_then(|b| b.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no pin of {name} in:\n{lock}"))
        .to_string()
}

/// `curl` in the controller's namespace, where envc runs: what the web sees of `addr`.
fn get(c: &Cloud, addr: &str) -> String {
    let o = c
        .hosts
        .in_controller("curl")
        .args(["-sS", "--max-time", "10", &format!("http://{addr}/")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ok(&o);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_aws_example_builds_locked_is_a_no_op_again_drifts_and_destroys_on_moto() {
    let t0 = Instant::now();
    let mut c = Cloud::start();
    c.hosts
        .set_boot_hook(&repo().join("scripts/testhosts/systemd-stand-in"));
    copy_tree(&repo().join("examples/aws"), c.project.root());
    let env_file = c.project.path("prod.env");
    let lock_file = c.project.path("prod.lock");

    // Locked where Debian's archive is reachable: the machine's own network namespace, with
    // a moto of its own there. moto's images are the fixture's, with the fixture's ids, in
    // both servers: the AMI pinned here is one the lab's moto has. The `.deb`s go to the
    // project's store (`.envc` beside prod.env), which the build below uses.
    let lock_ec2 = Ec2Server::start_in(std::process::id(), Ec2Options::default());
    let mut lock = Command::new(env!("CARGO_BIN_EXE_envc"));
    lock.arg("lock").arg(&env_file);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("AWS_") {
            lock.env_remove(k);
        }
    }
    let home = c.project.path("home");
    let lock = lock
        .env_remove("ENVC_STORE")
        .env_remove("CI")
        .env("HOME", &home)
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .envs(lock_ec2.env())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ok(&lock);
    drop(lock_ec2);
    // `envc lock` fetches only the packages named (to check their bytes); a build fetches
    // their closures from the lockfile's mirror, which the lab's namespace cannot reach.
    // Fetched here, as a build beside the test would, into the store the build reads.
    c.project.fetch_pinned_debs(&lock_file);
    let pinned = std::fs::read_to_string(&lock_file).unwrap();
    let t_lock = t0.elapsed();
    let image = cloud_image(&pinned, "debian-12", "eu-west-1");
    assert!(
        image.contains(&format!("id = \"{NEWEST}\"").as_str()),
        "{image:?}"
    );
    assert!(
        pinned.contains("name = \"nginx\"\narchive = \"debian/bookworm"),
        "nginx is pinned from Debian's archive:\n{pinned}"
    );
    let nginx = pinned_version(&pinned, "nginx");

    // Built locked, in the lab: two instances of the pinned image, each serving its page,
    // each with the upstreams file listing both machines' private addresses.
    let before = describe_all(&c.ec2);
    let first = c.envc(&["build", "--locked"]);
    ok(&first);
    assert_eq!(summary(&first), (10, 0, 0), "{}", text(&first));
    let t_build = t0.elapsed();
    let all = describe_all(&c.ec2);
    let webs: Vec<(String, usize)> = ["web-0", "web-1"]
        .iter()
        .map(|name| {
            let live = c.live(name);
            assert_eq!(live.len(), 1, "{name}: {live:?}");
            let id = live[0].id.clone();
            let line = all
                .lines()
                .find(|l| l.starts_with(&format!("instance {id} ")))
                .unwrap_or_else(|| panic!("{id} not in:\n{all}"));
            assert!(line.contains(&format!("image={NEWEST} ")), "{line}");
            assert_eq!(
                live[0].tags.get("owner").map(String::as_str),
                Some("platform")
            );
            let host = c.booted[&id];
            (id, host)
        })
        .collect();
    let privates: Vec<String> = webs
        .iter()
        .map(|(_, host)| c.hosts.host_addrs(*host)[0].to_string())
        .collect();
    for (i, (id, host)) in webs.iter().enumerate() {
        let addrs = c.hosts.host_addrs(*host).to_vec();
        assert_eq!(addrs.len(), 2, "a private and a public address: {addrs:?}");
        let page = get(&c, &addrs[1].to_string());
        assert_eq!(page, format!("<h1>web-{i}</h1>\n"));
        let upstreams = c.on(id, "cat /etc/nginx/conf.d/upstreams.conf");
        for p in &privates {
            assert!(
                upstreams.contains(&format!("server {p}:80;")),
                "{upstreams}"
            );
        }
        // The pinned nginx: the host's only archive (its local repository) has none.
        assert_eq!(c.on(id, "dpkg-query -W -f '${Version}' nginx"), nginx);
    }
    let outputs = c.envc(&["output"]);
    ok(&outputs);
    for (_, host) in &webs {
        let public = c.hosts.host_addrs(*host)[1].to_string();
        assert!(text(&outputs).contains(&public), "{}", text(&outputs));
    }

    // Again: nothing runs.
    let again = c.envc(&["build", "--locked"]);
    ok(&again);
    assert_eq!(summary(&again), (0, 10, 0), "{}", text(&again));
    let t_again = t0.elapsed();

    // Stopped behind envc's back: drift says so, naming the machine.
    let (stopped, _) = &webs[1];
    stop(&c.ec2, &[stopped]);
    let drift = c.envc(&["drift"]);
    assert_eq!(drift.status.code(), Some(3), "{}", text(&drift));
    let said = text(&drift);
    assert!(
        said.contains("vm:web-1") && said.contains("stopped"),
        "{said}"
    );
    assert!(!said.contains("vm:web-0"), "{said}");

    // Destroy leaves the account as it was before the first build.
    let destroyed = c.envc(&["destroy", "--yes"]);
    ok(&destroyed);
    assert_eq!(describe_all(&c.ec2), before);
    eprintln!(
        "aws_example: lock {:?}, first build {:?}, no-op build {:?}, total {:?}",
        t_lock,
        t_build - t_lock,
        t_again - t_build,
        t0.elapsed()
    );
}
