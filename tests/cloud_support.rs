//! The support code of the AWS end-to-end tests does what they rely on: moto's EC2 runs in the
//! test hosts' controller namespace (tests/support/servers.rs, Ec2Server), an instance it
//! reports as running boots into a test host at its private and public addresses with the host
//! key its user data gives (tests/support/cloud.rs), the checkip stand-in answers with the
//! controller's address, and newer images appear without losing the account's state.

use crate::support::{cloud, nshosts, servers};

use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use cloud::{boot_instance_info, create_test_instance, debian_images, describe_all, instances};
use nshosts::TestHosts;
use servers::{CheckIpServer, Ec2Options, Ec2Server};

#[test]
fn an_instance_boots_into_a_host_at_its_addresses_with_its_host_key() {
    let mut hosts = TestHosts::start_empty();
    let ec2 = Ec2Server::start_in(hosts.controller_pid(), Ec2Options::default());
    let checkip = CheckIpServer::start_in(hosts.controller_pid(), hosts.controller_addr());

    // A fresh account: the default VPC and its parts are left out.
    assert_eq!(describe_all(&ec2), "");

    let keys = tempfile::tempdir().unwrap();
    let keygen = |name: &str| {
        let path = keys.path().join(name);
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name])
            .arg("-f")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        path
    };
    let host_key = keygen("host_key");
    let public = fs::read_to_string(host_key.with_extension("pub")).unwrap();
    // The key pair's key: the instance's root accepts it, as cloud-init makes it do.
    let pair_key = keygen("pair_key");
    let pair_pub = pair_key.with_extension("pub");

    let id = create_test_instance(&ec2, &host_key, Some(&pair_pub));
    let listed = instances(&ec2, &[("tag:Name", "cloud-support,other")]);
    assert_eq!(
        listed,
        [cloud::Instance {
            id: id.clone(),
            state: "running".into(),
            tags: BTreeMap::from([("Name".to_string(), "cloud-support".to_string())]),
        }]
    );
    assert_eq!(instances(&ec2, &[("tag:Name", "other")]), []);

    let boot = boot_instance_info(&mut hosts, &ec2, &id);
    assert_eq!(boot.host, 0);
    assert!(boot.host_key_given);
    assert_eq!(boot.key_name.as_deref(), Some("cloud-support"));
    let pair_line = fs::read_to_string(&pair_pub).unwrap();
    let pair_words: Vec<&str> = pair_line.split_whitespace().take(2).collect();
    assert_eq!(boot.authorized.len(), 1, "{:?}", boot.authorized);
    assert!(
        boot.authorized[0].starts_with(&pair_words.join(" ")),
        "{:?}",
        boot.authorized
    );
    // moto's addresses: the subnet's first free one, a random 54.214.x.y.
    assert_eq!(boot.private, Ipv4Addr::new(10, 0, 1, 4));
    let public_addr = boot.public.unwrap();
    assert_eq!(public_addr.octets()[..2], [54, 214]);
    assert_eq!(hosts.host_addrs(boot.host), [boot.private, public_addr]);

    // ssh from the controller to both addresses, checking the host key strictly against a
    // known_hosts that holds only the key the user data gave.
    let known_hosts = keys.path().join("known_hosts");
    fs::write(
        &known_hosts,
        format!("{},{public_addr} {public}", boot.private),
    )
    .unwrap();
    for addr in [boot.private, public_addr] {
        let out = hosts
            .in_controller("ssh")
            // Before ssh_options: ssh takes the first value it is given.
            .args(["-o", "StrictHostKeyChecking=yes", "-o"])
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(hosts.ssh_options())
            .arg(addr.to_string())
            .arg("cat /etc/ssh/ssh_host_ed25519_key.pub")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ssh to {addr}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            hosts.logs(boot.host)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), public);
    }

    // The key pair's key logs in on its own too.
    let mut opts = hosts.ssh_options();
    let key_at = opts.iter().position(|o| o == "-i").unwrap() + 1;
    opts[key_at] = pair_key.display().to_string();
    let out = hosts
        .in_controller("ssh")
        .args(opts)
        .arg(public_addr.to_string())
        .arg("hostname")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "host0\n");

    // The checkip stand-in answers, inside the controller namespace, with the controller's
    // address, the source of the connections to the instance.
    let (var, url) = checkip.env().remove(0);
    assert_eq!(
        (var.as_str(), url.clone()),
        ("ENVC_AWS_CHECKIP_URL", checkip.url())
    );
    let out = hosts
        .in_controller("curl")
        .args(["-sS", "--max-time", "10", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "10.77.0.1\n");
    assert_eq!(checkip.requests(), 1);

    // What the test made, as describe_all shows it.
    let all = describe_all(&ec2);
    let kinds: Vec<&str> = all.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        kinds,
        ["instance", "internet-gateway", "key-pair", "subnet", "vpc"],
        "{all}"
    );
    assert!(all.starts_with(&format!("instance {id} running ")), "{all}");

    // A newer image appears; the instance is still there.
    let before = debian_images(&ec2);
    let mut names: Vec<&str> = before
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "debian-12-amd64-20260901-1001",
            "debian-12-amd64-20261001-1101",
            "debian-12-amd64-20261101-1201",
            "debian-12-arm64-20261101-1900",
            "debian-13-amd64-20261101-0100",
        ]
    );
    let fixture = fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aws/amis.json"),
    )
    .unwrap();
    let newer = fixture.trim_end().trim_end_matches(']').to_string()
        + r#",
  {
    "ami_id": "ami-0d12a0000000a1201",
    "state": "available",
    "public": true,
    "owner_id": "136693071363",
    "image_location": "136693071363/debian-12-amd64-20261201-2500",
    "sriov": "simple",
    "root_device_type": "ebs",
    "root_device_name": "/dev/xvda",
    "description": "Debian 12 (20261201-2500)",
    "image_type": "machine",
    "platform": null,
    "architecture": "x86_64",
    "name": "debian-12-amd64-20261201-2500",
    "virtualization_type": "hvm",
    "hypervisor": "xen",
    "creation_date": "2026-12-01T08:00:00.000Z"
  }
]"#;
    let newer_path = keys.path().join("amis.json");
    fs::write(&newer_path, newer).unwrap();
    ec2.add_images(&newer_path);
    let after = debian_images(&ec2);
    assert_eq!(after.len(), before.len() + 1);
    assert!(
        after.contains(&"ami-0d12a0000000a1201 debian-12-amd64-20261201-2500 x86_64".to_string())
    );
    assert_eq!(describe_all(&ec2), all);
}

#[test]
fn without_credentials_after_the_free_actions_moto_refuses() {
    // INITIAL_NO_AUTH_ACTION_COUNT reaches moto: with 0, the first request is checked, and
    // the test's made-up access key is unknown to moto's IAM.
    let hosts = TestHosts::start_empty();
    let ec2 = Ec2Server::start_in(
        hosts.controller_pid(),
        Ec2Options {
            initial_no_auth_action_count: Some(0),
            ..Ec2Options::default()
        },
    );
    let port = ec2.port();
    let (status, body) = servers::in_netns(hosts.controller_pid(), move || {
        servers::http_request(
            port,
            "GET",
            "/?Action=DescribeRegions&Version=2016-11-15",
            &[(
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=envc-test/20260101/us-east-1/ec2/aws4_request, \
                 SignedHeaders=host, Signature=0",
            )],
        )
    })
    .unwrap()
    .unwrap();
    assert_ne!(status, 200, "{body}");
    assert!(
        body.contains("AuthFailure") || body.contains("InvalidClientTokenId"),
        "{status}: {body}"
    );
}

#[test]
fn instances_boot_while_a_command_waits_for_them_and_halt_when_terminated() {
    // The command plays envc: it starts an instance, waits until it answers SSH, terminates
    // it and waits until it no longer answers. It ends only if run_booting boots the instance
    // meanwhile and takes it down after.
    let mut hosts = TestHosts::start_empty();
    let ec2 = Ec2Server::start_in(hosts.controller_pid(), Ec2Options::default());
    let keys = tempfile::tempdir().unwrap();
    let host_key = keys.path().join("host_key");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&host_key)
        .status()
        .unwrap();
    assert!(status.success());
    let python = servers::s3_venv().unwrap().join("bin/python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testhosts/ec2.py");
    let play = r#"
        set -eu
        ec2() { "$PYTHON" "$SCRIPT" "$@"; }
        answers() { [ -n "$(ssh-keyscan -T 1 -t ed25519 10.0.1.4 2>/dev/null)" ]; }
        id=$(ec2 create-test-instance "$HOST_KEY")
        echo "created $id"
        for _ in $(seq 100); do answers && break; sleep 0.2; done
        answers && echo "answered"
        ec2 terminate "$id"
        for _ in $(seq 100); do answers || break; sleep 0.2; done
        answers || echo "gone"
    "#;
    let mut cmd = hosts.in_controller("bash");
    cmd.arg("-c")
        .arg(play)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(ec2.env())
        .env("PYTHON", &python)
        .env("SCRIPT", &script)
        .env("HOST_KEY", &host_key);
    let mut booted = BTreeMap::new();
    let out = cloud::run_booting(&mut hosts, &ec2, &mut booted, cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = instances(&ec2, &[])[0].id.clone();
    assert_eq!(stdout, format!("created {id}\nanswered\ngone\n"));
    assert!(booted.is_empty(), "{booted:?}");
    assert_eq!(hosts.len(), 1);
    assert_eq!(
        instances(&ec2, &[])
            .iter()
            .map(|i| i.state.as_str())
            .collect::<Vec<_>>(),
        ["terminated"]
    );
}
