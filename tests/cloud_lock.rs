//! `envc lock` pins cloud images, end to end, against moto's EC2 (scripts/s3-server serves
//! moto's whole API) with the Debian AMI catalogue of tests/fixtures/aws/amis.json: the
//! newest image is pinned, a relock keeps it when a newer one appears, `--update` moves it
//! and `lock diff` shows the move, `--check` asks EC2 about a hand-edited id.
//!
//! Needs what scripts/s3-server needs (nsenter, python3 with venv; the venv is cached under
//! target/testhosts).

use crate::support::{output, servers};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use output::{stderr, stdout, text};
use servers::{Ec2Options, Ec2Server};

/// One machine of std/aws in eu-west-1, booting Debian 12 (std/aws's default image).
const ENV: &str = r#"import "std/aws"
let net = aws.network("web", region = "eu-west-1")
let web = aws.machine("web-0", network = net)
"#;

/// The fixture's Debian 12 amd64 images, oldest first: (id, name, day).
const SEPTEMBER: (&str, &str) = ("ami-0d2c5a1f3e4b60901", "debian-12-amd64-20260901-1001");
const OCTOBER: (&str, &str) = ("ami-0d2c5a1f3e4b61001", "debian-12-amd64-20261001-1101");
const NOVEMBER: (&str, &str) = ("ami-0d2c5a1f3e4b61101", "debian-12-amd64-20261101-1201");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// moto's EC2 on this test's loopback serving `amis` as its AMI catalogue (the one
/// starter every test of EC2 uses, tests/support/servers.rs), killed when dropped.
fn start_moto(amis: &Path) -> Ec2Server {
    start_moto_with(amis, None)
}

/// With moto checking every call after `free` unchecked ones against its IAM.
fn start_moto_with(amis: &Path, free: Option<u32>) -> Ec2Server {
    Ec2Server::start_in(
        std::process::id(),
        Ec2Options {
            amis: Some(amis.to_path_buf()),
            initial_no_auth_action_count: free,
        },
    )
}

/// The fixture catalogue without the images named in `without`, written into `dir`.
fn catalogue(dir: &Path, without: &[&str]) -> PathBuf {
    let all = fs::read_to_string(repo().join("tests/fixtures/aws/amis.json")).unwrap();
    let mut images: Vec<serde_json::Value> = serde_json::from_str(&all).unwrap();
    images.retain(|i| !without.contains(&i["name"].as_str().unwrap_or("")));
    let path = dir.join(format!("amis-{}.json", images.len()));
    fs::write(&path, serde_json::to_string_pretty(&images).unwrap()).unwrap();
    path
}

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new(env: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("prod.env"), env).unwrap();
        Project { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn lockfile(&self) -> String {
        fs::read_to_string(self.path("prod.lock")).unwrap_or_default()
    }

    /// envc with the credentials and endpoint AWS's SDKs read pointing at `moto` (moto
    /// checks no signature); `None`: no credentials anywhere.
    fn envc(&self, moto: Option<&Ec2Server>, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_envc"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("ENVC_STORE", self.path(".envc"))
            .env_remove("CI")
            .stdin(Stdio::null());
        // Nothing of the machine's own AWS setup: no profile, no files.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HOME", self.path("home"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                self.path("home/no-credentials"),
            )
            .env("AWS_CONFIG_FILE", self.path("home/no-config"));
        if let Some(m) = moto {
            cmd.env("AWS_ACCESS_KEY_ID", "envc-test")
                .env("AWS_SECRET_ACCESS_KEY", "envc-test-secret")
                .env("AWS_ENDPOINT_URL", m.endpoint());
        }
        cmd.output().unwrap()
    }
}

fn expect(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "{}", text(o));
}

/// The `[[cloud_image]]` block's `key = "value"`.
fn field(lock: &str, key: &str) -> String {
    let block = lock.split_once("[[cloud_image]]").map_or("", |(_, b)| b);
    block
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_newest_image_is_pinned_kept_on_relock_moved_on_update_and_checked_against_ec2() {
    let scratch = tempfile::tempdir().unwrap();
    let p = Project::new(ENV);

    // Until November's image exists, October's is the newest.
    let moto = start_moto(&catalogue(scratch.path(), &[NOVEMBER.1]));
    let o = p.envc(Some(&moto), &["lock", "prod.env"]);
    expect(&o, 0);
    let lock = p.lockfile();
    assert!(lock.contains("\nversion = 5\n"), "{lock}");
    for (key, value) in [
        ("name", "debian-12"),
        ("provider", "aws"),
        ("region", "eu-west-1"),
        ("owner", "136693071363"),
        ("pattern", "debian-12-amd64-*"),
        ("architecture", "x86_64"),
        ("id", OCTOBER.0),
        ("image_name", OCTOBER.1),
        ("created", "2026-10-01T11:20:00.000Z"),
    ] {
        assert_eq!(field(&lock, key), value, "{key}\n{lock}\n{}", moto.log());
    }
    // A cloud machine is not booted here: no QEMU pinned.
    assert!(!lock.contains("qemu"), "{lock}");
    let o = p.envc(Some(&moto), &["lock", "--check", "prod.env"]);
    expect(&o, 0);
    assert_eq!(stderr(&o), "", "{}", text(&o));
    drop(moto);

    // November's image appears: a relock keeps the pin, `--update` moves it.
    let moto = start_moto(&repo().join("tests/fixtures/aws/amis.json"));
    let o = p.envc(Some(&moto), &["lock", "prod.env"]);
    expect(&o, 0);
    assert_eq!(stdout(&o), "prod.lock: unchanged\n", "{}", text(&o));
    assert_eq!(field(&p.lockfile(), "id"), OCTOBER.0);
    let october = p.lockfile();
    fs::write(p.path("october.lock"), &october).unwrap();
    let o = p.envc(
        Some(&moto),
        &[
            "lock",
            "prod.env",
            "--update=cloud_image:debian-12@eu-west-1",
        ],
    );
    expect(&o, 0);
    let moved = format!(
        "- `cloud_image:debian-12@eu-west-1`: {} {} (2026-10-01) → {} {} (2026-11-01)\n",
        OCTOBER.0, OCTOBER.1, NOVEMBER.0, NOVEMBER.1
    );
    assert!(stdout(&o).contains(&moved), "{}", text(&o));
    assert_eq!(field(&p.lockfile(), "id"), NOVEMBER.0);
    let o = p.envc(None, &["lock", "diff", "october.lock", "prod.lock"]);
    expect(&o, 0);
    assert_eq!(
        stdout(&o),
        format!("1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n{moved}"),
        "{}",
        text(&o)
    );
    // `--update` alone moves it too (back from a hand-restored October pin).
    fs::write(p.path("prod.lock"), &october).unwrap();
    let o = p.envc(Some(&moto), &["lock", "prod.env", "--update"]);
    expect(&o, 0);
    assert_eq!(field(&p.lockfile(), "id"), NOVEMBER.0);
    // `--update=security` leaves images.
    fs::write(p.path("prod.lock"), &october).unwrap();
    let o = p.envc(Some(&moto), &["lock", "prod.env", "--update=security"]);
    expect(&o, 0);
    assert_eq!(field(&p.lockfile(), "id"), OCTOBER.0, "{}", text(&o));

    // A hand edit of the id into September's: consistent offline, caught by EC2.
    let edited = october.replace(OCTOBER.0, SEPTEMBER.0);
    fs::write(p.path("prod.lock"), &edited).unwrap();
    let o = p.envc(Some(&moto), &["lock", "--check", "prod.env"]);
    expect(&o, 3);
    assert!(
        stderr(&o).contains(&format!(
            "cloud_image:debian-12@eu-west-1: image {} has name \"{}\" on AWS, the lockfile pins \
             \"{}\": the pin was edited by hand",
            SEPTEMBER.0, SEPTEMBER.1, OCTOBER.1
        )),
        "{}",
        text(&o)
    );
    // An id EC2 does not know.
    fs::write(
        p.path("prod.lock"),
        october.replace(OCTOBER.0, "ami-0123456789abcdef0"),
    )
    .unwrap();
    let o = p.envc(Some(&moto), &["lock", "--check", "prod.env"]);
    expect(&o, 3);
    assert!(
        stderr(&o).contains("AWS has no image ami-0123456789abcdef0 in eu-west-1"),
        "{}",
        text(&o)
    );
    // Without credentials the edit passes offline, with a note that EC2 was not asked.
    fs::write(p.path("prod.lock"), &edited).unwrap();
    let o = p.envc(None, &["lock", "--check", "prod.env"]);
    expect(&o, 0);
    assert!(
        stderr(&o).starts_with(
            "note: cloud_image:debian-12@eu-west-1: not checked against AWS, only offline: no \
             aws credentials"
        ),
        "{}",
        text(&o)
    );
    // An id that is no AMI's is caught offline.
    fs::write(p.path("prod.lock"), october.replace(OCTOBER.0, "ami-12345")).unwrap();
    let o = p.envc(None, &["lock", "--check", "prod.env"]);
    expect(&o, 3);
    assert!(
        stderr(&o).contains("id \"ami-12345\" is not an AMI id"),
        "{}",
        text(&o)
    );
    // A relock mends a hand edit EC2 disowns: the image is resolved again (the newest now).
    fs::write(p.path("prod.lock"), &edited).unwrap();
    let o = p.envc(Some(&moto), &["lock", "prod.env"]);
    expect(&o, 0);
    assert_eq!(field(&p.lockfile(), "id"), NOVEMBER.0, "{}", text(&o));
}

#[test]
fn a_lock_without_credentials_or_without_a_match_says_what_to_do() {
    let p = Project::new(ENV);
    let o = p.envc(None, &["lock", "prod.env"]);
    expect(&o, 1);
    assert!(
        stderr(&o).contains("cloud_image:debian-12@eu-west-1: no aws credentials")
            && stderr(&o).contains("AWS_PROFILE")
            && stderr(&o).contains("AWS_ACCESS_KEY_ID")
            && stderr(&o).contains("`aws configure`"),
        "{}",
        text(&o)
    );
    assert!(!p.path("prod.lock").exists());

    let moto = start_moto(&repo().join("tests/fixtures/aws/amis.json"));
    let p = Project::new(
        r#"import "std/aws"
let net = aws.network("web", region = "eu-west-1")
let trixie = { name = "debian-14", owner = "136693071363", pattern = "debian-14-amd64-*", architecture = "x86_64", suite = "forky" }
let web = aws.machine("web-0", network = net, image = trixie)
"#,
    );
    let o = p.envc(Some(&moto), &["lock", "prod.env"]);
    expect(&o, 1);
    assert!(
        stderr(&o).contains(
            "cloud_image:debian-14@eu-west-1: no available image of owner 136693071363 named \
             like \"debian-14-amd64-*\" for x86_64 in eu-west-1"
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn credentials_aws_refuses_name_the_action_and_the_fix() {
    // moto checking every call against its IAM, which knows no key of envc's.
    let moto = start_moto_with(&repo().join("tests/fixtures/aws/amis.json"), Some(0));
    let p = Project::new(ENV);
    let o = p.envc(Some(&moto), &["lock", "prod.env"]);
    expect(&o, 1);
    assert!(
        stderr(&o).contains("cloud_image:debian-12@eu-west-1: AWS refused DescribeImages: ")
            && stderr(&o).contains("allowed `ec2:DescribeImages`"),
        "{}\n{}",
        text(&o),
        moto.log()
    );
    assert!(!p.path("prod.lock").exists());
}
