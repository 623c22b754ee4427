//! Cached CI rebuilds end to end: a "laptop" builds the quickstart's image and pushes it to
//! a real S3 server (moto, tests/support/servers.rs); a "CI runner" with an empty store and
//! the same shared state fetches it instead of running mmdebstrap, bit for bit; the shared
//! state shows both their runs; an untrusted key is refused by name; a runner SIGKILLed
//! while holding the lock blocks the next one (exit 5) until a waiting one has seen its
//! lease go unrenewed. Damage in the bucket (a garbage head, a truncated object, a garbage
//! lock) is named there and repaired without losing the history.

use crate::support::{output, servers};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use output::{summary, text};
use servers::S3Server;

const IMAGE_ONLY: &str = "import \"std/debian\"\noutput image = debian.default_image.digest\n";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One machine's checkout: the env file and envc.toml, its own store, its own PATH.
struct Machine {
    dir: tempfile::TempDir,
    server_env: Vec<(String, String)>,
    path: String,
}

impl Machine {
    fn new(server: &S3Server, trusted: &str) -> Machine {
        let dir = tempfile::Builder::new()
            .prefix("envc-ci-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("i.env"), IMAGE_ONLY).unwrap();
        std::fs::write(
            dir.path().join("envc.toml"),
            format!(
                "[cache]\nurl = \"s3://envc/cache\"\ntrusted-public-keys = [\"{trusted}\"]\n\n\
                 [state]\nurl = \"s3://envc/state\"\nlease-seconds = 10\n"
            ),
        )
        .unwrap();
        Machine {
            dir,
            server_env: server.env(),
            path: std::env::var("PATH").unwrap_or_default(),
        }
    }

    /// A PATH whose `mmdebstrap` answers `--version` (the tool check) and otherwise leaves
    /// a mark and `then` (`exit 1`, or `sleep 600` to hold a build).
    fn with_fake_mmdebstrap(mut self, then: &str) -> Machine {
        let bin = self.dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let mark = self.dir.path().join("mmdebstrap-ran");
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && exec /usr/bin/mmdebstrap --version\ntouch {}\n{then}\n",
            mark.display()
        );
        let fake = bin.join("mmdebstrap");
        std::fs::write(&fake, script).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&fake)
            .status()
            .unwrap();
        self.path = format!("{}:{}", bin.display(), self.path);
        self
    }

    /// The lockfile beside the env file: only locked images go through the cache.
    fn with_lock(self, lock: &str) -> Machine {
        std::fs::write(self.dir.path().join("i.lock"), lock).unwrap();
        self
    }

    fn mmdebstrap_ran(&self) -> bool {
        self.dir.path().join("mmdebstrap-ran").exists()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_envc"));
        cmd.arg(args[0])
            .args(args[1..].iter().map(|a| {
                if *a == "FILE" {
                    self.dir.path().join("i.env").into_os_string()
                } else {
                    a.into()
                }
            }))
            .envs(self.server_env.iter().map(|(k, v)| (k, v)))
            .env("PATH", &self.path)
            .env("ENVC_DEB_CACHE", repo().join("target/envc-cache"))
            .env_remove("ENVC_STORE")
            .env_remove("ENVC_CACHE")
            .env_remove("ENVC_STATE")
            .env_remove("ENVC_SIGNING_KEY")
            .env_remove("CI")
            .stdin(Stdio::null());
        cmd
    }

    fn envc(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join(".envc")
    }
}

/// `cmd` run with its output on a terminal (util-linux's `script`, 200 columns wide), as a
/// person at a shell sees it: stdout is what the terminal showed, escape codes and all.
fn on_a_terminal(cmd: &Command) -> Output {
    let quote = |a: &std::ffi::OsStr| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''"));
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(quote)
        .collect();
    let mut script = Command::new("script");
    script
        .arg("-qec")
        .arg(format!("stty cols 200 rows 50; exec {}", line.join(" ")))
        .arg("/dev/null")
        .stdin(Stdio::null());
    if let Some(dir) = cmd.get_current_dir() {
        script.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    script.output().unwrap()
}

fn code(o: &Output, expected: i32) {
    assert_eq!(o.status.code(), Some(expected), "{}", text(o));
}

fn image_of(m: &Machine) -> String {
    let o = m.envc(&["output", "FILE", "--json"]);
    code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["image"].as_str().unwrap().to_string()
}

fn object(store: &Path, id: &str) -> PathBuf {
    store.join("objects").join(&id[..2]).join(&id[2..])
}

#[test]
fn a_ci_runner_fetches_the_laptops_image_and_shares_its_state() {
    let mut server = S3Server::start();
    server.create_bucket("envc");

    // The laptop makes a key, trusts it, builds and pushes.
    let keys = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["key", "generate", "laptop", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    code(&o, 0);
    let public = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let secret = keys.path().join("laptop.secret");
    let laptop = Machine::new(&server, &public);
    let o = laptop.envc(&["lock", "FILE"]);
    code(&o, 0);
    let lock = std::fs::read_to_string(laptop.dir.path().join("i.lock")).unwrap();
    // On a terminal, as a person at a shell: the push has a bar of its own, left saying
    // what it sent.
    let mut build = laptop.command(&["build", "FILE", "--push"]);
    build.env("ENVC_SIGNING_KEY", &secret);
    let o = on_a_terminal(&build);
    code(&o, 0);
    assert!(
        text(&o).contains("pushed to s3://envc/cache"),
        "{}",
        text(&o)
    );
    let image = image_of(&laptop);
    let drawn = String::from_utf8_lossy(&o.stdout);
    // The bar's last words (only a transfer's bar says them; the step's line says
    // "pushed to").
    let objects: usize = drawn
        .split("pushed image:debian-12: ")
        .nth(1)
        .and_then(|rest| rest.split(" objects, ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no finished push bar in what the terminal showed:\n{drawn}"));
    assert_eq!(
        objects, 4,
        "the disk, kernel, file tree and package list: {drawn}"
    );
    // `cache push` sends what a locked build takes, and leaves out what no build would:
    // the same image, with the lockfile gone, is unlocked.
    let push = |m: &Machine| {
        m.command(&["cache", "push", "FILE"])
            .env("ENVC_SIGNING_KEY", &secret)
            .output()
            .unwrap()
    };
    let o = push(&laptop);
    code(&o, 0);
    assert!(text(&o).contains("pushed image:"), "{}", text(&o));
    std::fs::rename(
        laptop.dir.path().join("i.lock"),
        laptop.dir.path().join("i.lock.away"),
    )
    .unwrap();
    let o = push(&laptop);
    code(&o, 0);
    assert!(
        text(&o).contains("left out image:")
            && text(&o).contains("no lockfile pins it")
            && text(&o).contains("nothing to push")
            && !text(&o).contains("pushed image:"),
        "{}",
        text(&o)
    );
    std::fs::rename(
        laptop.dir.path().join("i.lock.away"),
        laptop.dir.path().join("i.lock"),
    )
    .unwrap();

    // The runner: an empty store, the same project file; mmdebstrap must not run.
    let runner = Machine::new(&server, &public)
        .with_lock(&lock)
        .with_fake_mmdebstrap("exit 1");
    // The plan reviewed in a pull request already knows the image is built (shared state).
    let o = runner.envc(&["plan", "FILE"]);
    code(&o, 0);
    let o = runner.envc(&["build", "FILE", "--locked", "--json"]);
    code(&o, 0);
    assert!(
        text(&o).contains("fetched from s3://envc/cache") && text(&o).contains("signed by laptop"),
        "{}",
        text(&o)
    );
    // `--json` says what the fetch moved: every object the laptop pushed, none twice.
    let transfers: Vec<serde_json::Value> = (String::from_utf8_lossy(&o.stdout).lines())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "transfer")
        .collect();
    assert_eq!(transfers.len(), 1, "{}", text(&o));
    let t = &transfers[0];
    assert_eq!(
        (&t["node"], &t["direction"], &t["url"], &t["objects"]),
        (
            &serde_json::json!("image:debian-12"),
            &serde_json::json!("fetch"),
            &serde_json::json!("s3://envc/cache"),
            &serde_json::json!(objects)
        ),
        "{t}"
    );
    assert!(t["bytes"].as_u64().unwrap() > 1 << 20, "{t}");
    assert!(
        !runner.mmdebstrap_ran(),
        "the runner built the image instead of fetching it"
    );
    assert_eq!(image_of(&runner), image);
    let fetched = std::fs::read(object(&runner.store(), &image)).unwrap();
    assert_eq!(
        blake3::hash(&fetched).to_hex().as_str(),
        image,
        "bit for bit"
    );
    drop(fetched);
    // A no-op against the shared state, and one history for both machines.
    let o = runner.envc(&["build", "FILE"]);
    code(&o, 0);
    assert_eq!(summary(&o), (0, 1, 0), "{}", text(&o));
    let o = laptop.envc(&["log", "FILE"]);
    code(&o, 0);
    assert_eq!(text(&o).matches("run ").count(), 3, "{}", text(&o));

    // A project that trusts another key refuses the laptop's entry, saying how to trust it.
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["key", "generate", "other", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    code(&o, 0);
    let other = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let stranger = Machine::new(&server, &other)
        .with_lock(&lock)
        .with_fake_mmdebstrap("exit 1");
    let o = stranger.envc(&["cache", "pull", "FILE"]);
    code(&o, 4);
    assert!(
        text(&o).contains("signed by `laptop`, a key this project does not trust")
            && text(&o).contains("trusted-public-keys"),
        "{}",
        text(&o)
    );
    // A build there never uses the entry: it builds (here, a build that fails), and
    // says why the cache was not used.
    // (Its own local state: what it records must not touch the shared one.)
    let own = format!("file://{}", stranger.dir.path().join("state").display());
    let o = stranger.envc(&["build", "FILE", "--state", &own]);
    code(&o, 4);
    assert!(stranger.mmdebstrap_ran(), "{}", text(&o));
    assert!(
        text(&o).contains("the binary cache was not used")
            && text(&o).contains("a key this project does not trust"),
        "{}",
        text(&o)
    );
    let o = runner.envc(&["cache", "verify", "FILE"]);
    code(&o, 0);

    // A runner killed while it holds the environment's lock.
    let killed = Machine::new(&server, &public)
        .with_lock(&lock)
        .with_fake_mmdebstrap("sleep 600");
    let mut cmd = killed.command(&["build", "FILE", "--no-cache"]);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !killed.mmdebstrap_ran() {
        assert!(
            Instant::now() < deadline,
            "the killed runner never started its build"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pgid = child.id() as i32;
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    let _ = child.wait_with_output();
    let o = runner.envc(&["build", "FILE"]);
    code(&o, 5);
    assert!(
        text(&o).contains("locked in the shared state by `envc build`")
            && text(&o).contains("envc unlock --force"),
        "{}",
        text(&o)
    );
    let o = runner.envc(&["unlock", "FILE"]);
    code(&o, 2);
    // The lease (10 s) runs out; the next build takes the lock over and converges.
    let o = runner.envc(&["build", "FILE", "--wait"]);
    code(&o, 0);

    // The server goes down: a build ends with exit 4 naming it, and converges once it is
    // back.
    server.stop();
    let o = runner
        .command(&["build", "FILE"])
        .env("ENVC_REMOTE_TIMEOUT", "2")
        .output()
        .unwrap();
    code(&o, 4);
    assert!(text(&o).contains("s3://envc/state"), "{}", text(&o));
    server.restart();
    let o = runner.envc(&["build", "FILE"]);
    code(&o, 0);

    // The state moves to another backend without loss.
    let moved = tempfile::tempdir().unwrap();
    let url = format!("file://{}", moved.path().display());
    let o = runner.envc(&["state", "migrate", "FILE", "--to", &url]);
    code(&o, 0);
    let before = runner.envc(&["log", "FILE", "--json"]);
    let after = runner.envc(&["log", "FILE", "--json", "--state", &url]);
    code(&after, 0);
    assert_eq!(before.stdout, after.stdout);
    // And from a local store into a bucket: the usual way a project starts sharing.
    let o = runner.envc(&[
        "state",
        "migrate",
        "FILE",
        "--state",
        &url,
        "--to",
        "s3://envc/moved",
    ]);
    code(&o, 0);
    let o = runner.envc(&[
        "state",
        "migrate",
        "FILE",
        "--state",
        &url,
        "--to",
        "s3://envc/moved",
    ]);
    code(&o, 1);
    assert!(text(&o).contains("already holds a state"), "{}", text(&o));
    let moved = runner.envc(&["log", "FILE", "--json", "--state", "s3://envc/moved"]);
    code(&moved, 0);
    assert_eq!(before.stdout, moved.stdout);
}

/// A build whose lock is forced open under it (`envc unlock --force` from another machine)
/// exits 5 like any loser of a race, and cannot record its end: also when it ends before its
/// lease's next renewal (a 60 s lease is renewed every 20 s; this build takes a few), because
/// the lock is asked for once more before the run's last commit. (Until a renewal notices,
/// its checkpoints still move the head; the head's compare-and-swap is what keeps a
/// competitor's runs, as `two_runners_on_one_shared_state_never_lose_a_record` shows.)
#[test]
fn a_build_whose_lock_is_forced_open_exits_5_and_cannot_record_its_end() {
    let server = S3Server::start();
    server.create_bucket("envc");
    let keys = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["key", "generate", "ci", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    code(&o, 0);
    let public = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let building = Machine::new(&server, &public).with_fake_mmdebstrap("sleep 4");
    let toml = building.dir.path().join("envc.toml");
    let text_of = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text_of.replace("lease-seconds = 10", "lease-seconds = 60"),
    )
    .unwrap();
    let other = Machine::new(&server, &public);
    std::fs::copy(&toml, other.dir.path().join("envc.toml")).unwrap();

    let child = building
        .command(&["build", "FILE", "--no-cache"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !building.mmdebstrap_ran() {
        assert!(
            Instant::now() < deadline,
            "the build never started its image"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = other.envc(&["unlock", "--force", "FILE"]);
    code(&o, 0);
    let o = child.wait_with_output().unwrap();
    code(&o, 5);
    assert!(
        text(&o).contains("could not be recorded") && text(&o).contains("lock"),
        "{}",
        text(&o)
    );
    // Its end was refused: the history holds the run as unfinished.
    let after = other.envc(&["log", "FILE", "--json"]);
    code(&after, 0);
    let last: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&after.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["result"], "unfinished", "{}", text(&after));
}

/// An S3 client of `server`'s bucket `bucket`, configured by the same variables envc reads.
fn bucket(server: &S3Server, bucket: &str) -> object_store::aws::AmazonS3 {
    let mut builder = object_store::aws::AmazonS3Builder::new().with_bucket_name(bucket);
    for (key, value) in server.env() {
        builder = builder.with_config(key.to_ascii_lowercase().parse().unwrap(), value);
    }
    builder.build().unwrap()
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn put(store: &object_store::aws::AmazonS3, key: &str, bytes: Vec<u8>) {
    use object_store::ObjectStoreExt;
    block(store.put(&object_store::path::Path::from(key), bytes.into())).unwrap();
}

fn get(store: &object_store::aws::AmazonS3, key: &str) -> Vec<u8> {
    use object_store::ObjectStoreExt;
    block(async {
        store
            .get(&object_store::path::Path::from(key))
            .await?
            .bytes()
            .await
    })
    .unwrap()
    .to_vec()
}

/// Damage in the bucket, as the issue found it: a garbage head does not lose the history
/// (repair sets it back to the newest state whose history reads, and every message names
/// the bucket's object, not the local store); a truncated object is caught when read and by
/// `store verify`, and repair uploads it again from a store that has it whole; a garbage
/// lock is taken over with a warning naming it.
#[test]
fn damage_in_the_bucket_is_named_there_and_repaired_without_losing_the_history() {
    let server = S3Server::start();
    server.create_bucket("envc");
    let keys = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["key", "generate", "ci", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    code(&o, 0);
    let public = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let m = Machine::new(&server, &public);
    let files = m.dir.path().join("files");
    std::fs::write(
        m.dir.path().join("i.env"),
        format!(
            "param v: str = \"a\"\nlet here = host(name = \"here\", address = \"@local\")\n{}",
            (0..3)
                .map(|i| format!(
                    "let f{i} = file(path = \"{}/f{i}\", content = \"${{v}}\\n\", target = here)\n",
                    files.display()
                ))
                .collect::<String>()
        ),
    )
    .unwrap();
    for v in ["a", "b", "c"] {
        let o = m.envc(&["build", "FILE", "--set", &format!("v={v}")]);
        code(&o, 0);
    }
    let history = m.envc(&["log", "FILE", "--json"]);
    code(&history, 0);
    let s3 = bucket(&server, "envc");
    let head_key = "state/envs/i/head";
    let head = String::from_utf8(get(&s3, head_key))
        .unwrap()
        .trim()
        .to_string();

    // A garbage head: the error names the bucket's object.
    put(&s3, head_key, b"garbage\n".to_vec());
    let o = m.envc(&["plan", "FILE", "--set", "v=c"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("s3://envc/state/envs/i/head")
            && text(&o).contains("garbage")
            && !text(&o).contains(".envc"),
        "{}",
        text(&o)
    );
    let o = m.envc(&["store", "verify", "FILE"]);
    code(&o, 3);
    assert!(
        text(&o).contains("s3://envc/state/envs/i/head")
            && text(&o).contains(&format!("repair sets it back to state {head}")),
        "{}",
        text(&o)
    );
    let o = m.envc(&["store", "verify", "--repair", "FILE"]);
    code(&o, 0);
    assert!(
        text(&o).contains(&format!("set back to state {head}")),
        "{}",
        text(&o)
    );
    assert_eq!(String::from_utf8(get(&s3, head_key)).unwrap().trim(), head);
    // The history is whole, and nothing is created again: the records are all there.
    let o = m.envc(&["log", "FILE", "--json"]);
    code(&o, 0);
    assert_eq!(o.stdout, history.stdout);
    let o = m.envc(&["build", "FILE", "--set", "v=c"]);
    code(&o, 0);
    assert_eq!(summary(&o).0, 0, "{}", text(&o));

    // A truncated state in the bucket: this machine has it whole, another fetches it and
    // must not take it.
    let head = String::from_utf8(get(&s3, head_key))
        .unwrap()
        .trim()
        .to_string();
    let object_key = format!("state/objects/{head}");
    let whole = get(&s3, &object_key);
    put(&s3, &object_key, whole[..whole.len() / 2].to_vec());
    let other = Machine::new(&server, &public);
    std::fs::copy(m.dir.path().join("i.env"), other.dir.path().join("i.env")).unwrap();
    let o = other.envc(&["plan", "FILE", "--set", "v=c"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let url = format!("s3://envc/state/objects/{head}");
    assert!(
        text(&o).contains(&url) && text(&o).contains("does not hash"),
        "{}",
        text(&o)
    );
    let o = m.envc(&["store", "verify", "FILE"]);
    code(&o, 3);
    assert!(
        text(&o).contains(&format!("corrupt   {url} (this store has it whole")),
        "{}",
        text(&o)
    );
    let o = m.envc(&["store", "verify", "--repair", "FILE"]);
    code(&o, 0);
    assert!(text(&o).contains("uploaded again"), "{}", text(&o));
    assert_eq!(get(&s3, &object_key), whole);
    let o = other.envc(&["plan", "FILE", "--set", "v=c"]);
    code(&o, 0);
    let o = m.envc(&["store", "verify", "FILE"]);
    code(&o, 0);

    // A garbage lock: taken over, and said.
    put(&s3, "state/envs/i/lock", b"garbage\n".to_vec());
    let o = m.envc(&["build", "FILE", "--set", "v=c"]);
    code(&o, 0);
    assert!(
        text(&o)
            .contains("warning: the lock object s3://envc/state/envs/i/lock held \"garbage\\n\""),
        "{}",
        text(&o)
    );
}
