//! The transport and the remote operations of the executor against real SSH hosts
//! (tests/support/nshosts.rs) and the local machine.

use crate::support::nshosts;

use std::future::Future;
use std::time::{Duration, Instant};

use envc_executor::debs::DebSource;
use envc_executor::kept::Persist;
use envc_executor::kinds::file::remote as files;
use envc_executor::kinds::file::remote::FileSpec;
use envc_executor::kinds::package::remote as packages;
use envc_executor::kinds::package::remote::PackageSpec;
use envc_executor::kinds::service::remote as services;
use envc_executor::kinds::service::remote::ServiceSpec;
use envc_executor::transport::{
    HostKey, HostSpec, SshOptions, Transport, TransportError, LOCAL_ADDRESS,
};
use envc_executor::Store;
use envc_lockfiles::PackagePin;
use nshosts::TestHosts;
use tempfile::TempDir;

unsafe extern "C" {
    fn setns(fd: i32, nstype: i32) -> i32;
}
const CLONE_NEWNET: i32 = 0x4000_0000;

/// Runs the future made by `f` on a new thread inside the hosts' controller network namespace
/// (where their addresses exist), on a current-thread tokio runtime. Processes it spawns (ssh,
/// the mux master) inherit the namespace.
fn in_controller<T, Fut>(hosts: &TestHosts, f: impl FnOnce() -> Fut + Send) -> T
where
    T: Send,
    Fut: Future<Output = T>,
{
    use std::os::fd::AsRawFd as _;
    let ns = std::fs::File::open(format!("/proc/{}/ns/net", hosts.controller_pid())).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: plain syscall on an fd we own; it affects only this thread.
            let rc = unsafe { setns(ns.as_raw_fd(), CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Options for the test hosts: an ssh_config with the test key, and a short work dir (the
/// control socket's path must fit in 107 bytes).
struct Env {
    opts: SshOptions,
    _dir: TempDir,
}

fn env(hosts: &TestHosts, command_timeout: Duration) -> Env {
    let dir = tempfile::Builder::new().prefix("envc-t").tempdir().unwrap();
    let config = dir.path().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "IdentityFile {}\nIdentitiesOnly yes\nBatchMode yes\nUser root\nLogLevel ERROR\n",
            hosts.key_path().display()
        ),
    )
    .unwrap();
    Env {
        opts: SshOptions {
            config_file: Some(config),
            connect_timeout: Duration::from_secs(2),
            command_timeout,
            work_dir: dir.path().to_path_buf(),
            persist: None,
        },
        _dir: dir,
    }
}

fn spec(hosts: &TestHosts, i: usize) -> HostSpec {
    HostSpec {
        name: hosts.name(i).to_string(),
        address: hosts.addr(i).to_string(),
        port: hosts.port(),
        user: hosts.user().to_string(),
        identity: None,
    }
}

async fn connect(
    hosts_spec: &HostSpec,
    known: Option<&HostKey>,
    opts: &SshOptions,
) -> (Transport, HostKey) {
    match Transport::connect(hosts_spec, known, opts).await {
        Ok(t) => t,
        Err(e) => panic!("connect: {e}"),
    }
}

#[test]
fn connect_run_and_host_keys() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(20));
    let host = spec(&hosts, 0);
    let presented = hosts.ssh(0, "cat /etc/ssh/ssh_host_ed25519_key.pub");
    let presented = String::from_utf8(presented.stdout).unwrap();
    in_controller(&hosts, || async {
        let t0 = Instant::now();
        let (t, key) = connect(&host, None, &env.opts).await;
        eprintln!("first contact: {:?}", t0.elapsed());
        assert!(presented.starts_with(&key.key), "{presented} vs {key:?}");
        assert!(key.fingerprint.starts_with("SHA256:"));
        let out = t.run(&["hostname"], b"").await.unwrap();
        assert_eq!((out.status, out.stdout), (Some(0), b"host0\n".to_vec()));
        let out = t.run(&["cat"], b"stdin\nbytes\0").await.unwrap();
        assert_eq!(out.stdout, b"stdin\nbytes\0");
        let out = t
            .run(&["sh", "-c", "echo oops >&2; exit 255"], b"")
            .await
            .unwrap();
        assert_eq!((out.status, out.stderr), (Some(255), b"oops\n".to_vec()));
        let out = t.run(&["envc-no-such-command"], b"").await.unwrap();
        assert_eq!(out.status, Some(127));
        t.close().await;

        // A command that outlives the timeout is stopped; the connection stays usable.
        let short = SshOptions {
            command_timeout: Duration::from_secs(1),
            ..env.opts.clone()
        };
        let (t, _) = connect(&host, Some(&key), &short).await;
        let t0 = Instant::now();
        let e = t.run(&["sleep", "30"], b"").await.unwrap_err();
        assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("`sleep` on host `host0`"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(run_ok(&t, &["hostname"]).await, b"host0\n");
        t.close().await;

        // The key returned is accepted as the known one.
        let (t, again) = connect(&host, Some(&key), &env.opts).await;
        assert_eq!(again, key);
        t.close().await;

        // Any other key is refused, with both fingerprints.
        let other = HostKey {
            key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFN9BY+YLk9Eq+w7rDUcp0DsQh9w4mUIUtFE6x/RXHsg"
                .into(),
            fingerprint: envc_executor::transport::fingerprint(
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFN9BY+YLk9Eq+w7rDUcp0DsQh9w4mUIUtFE6x/RXHsg",
            )
            .unwrap(),
        };
        match Transport::connect(&host, Some(&other), &env.opts).await {
            Err(TransportError::HostKeyChanged {
                host: name,
                recorded_fingerprint,
                presented_fingerprint,
            }) => {
                assert_eq!(name, "host0");
                assert_eq!(recorded_fingerprint, other.fingerprint);
                assert_eq!(presented_fingerprint, key.fingerprint);
            }
            Err(e) => panic!("expected HostKeyChanged, got {e}"),
            Ok(_) => panic!("connected with a wrong host key"),
        }
    });
}

/// What identifies the login a command ran in: `SSH_CONNECTION` (a new TCP connection has a
/// new source port) and the pid of the sshd serving it.
async fn login_of(t: &Transport) -> (String, String) {
    let out = run_ok(t, &["sh", "-c", "echo \"$SSH_CONNECTION\"; echo $PPID"]).await;
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines().map(str::to_string);
    (lines.next().unwrap(), lines.next().unwrap())
}

/// Whether a master still listens at `socket`.
fn master_at(socket: &std::path::Path) -> bool {
    std::process::Command::new("ssh")
        .arg("-S")
        .arg(socket)
        .args(["-o", "BatchMode=yes", "-O", "check", "none"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sockets(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all
}

#[test]
fn a_kept_master_is_reused_only_for_its_host_key_and_while_it_answers() {
    let hosts = TestHosts::start(1);
    let mut env = env(&hosts, Duration::from_secs(20));
    let kept = tempfile::Builder::new().prefix("envc-k").tempdir().unwrap();
    env.opts.persist = Some(Persist {
        dir: kept.path().to_path_buf(),
        idle: Duration::from_secs(30),
    });
    let host = spec(&hosts, 0);
    in_controller(&hosts, || async {
        // A first contact logs in, and its master outlives the connection, named after the key.
        let (t, key) = connect(&host, None, &env.opts).await;
        let first = login_of(&t).await;
        t.close().await;
        let left = sockets(kept.path());
        assert_eq!(left.len(), 1, "{left:?}");
        let name = left[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.starts_with("new-"), "{left:?}");
        assert!(master_at(&left[0]));

        // The next connection that expects that key runs in the same login.
        let (t, again) = connect(&host, Some(&key), &env.opts).await;
        assert_eq!(again, key);
        assert_eq!(login_of(&t).await, first);
        t.close().await;

        // Expecting another key never reaches it: a new login, refused.
        let other =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFN9BY+YLk9Eq+w7rDUcp0DsQh9w4mUIUtFE6x/RXHsg";
        let other = HostKey {
            key: other.into(),
            fingerprint: envc_executor::transport::fingerprint(other).unwrap(),
        };
        match Transport::connect(&host, Some(&other), &env.opts).await {
            Err(TransportError::HostKeyChanged { .. }) => {}
            Err(e) => panic!("expected HostKeyChanged, got {e}"),
            Ok(_) => panic!("a kept master was used for another host key"),
        }

        // Its host stops answering (its sshd frozen, the TCP connection still up): the kept
        // master is stopped and replaced by a new login, instead of hanging the run.
        hosts.ssh(0, &format!("kill -STOP {}", first.1));
        let (t, _) = connect(&host, Some(&key), &env.opts).await;
        let replaced = login_of(&t).await;
        hosts.ssh(0, &format!("kill -CONT {}", first.1));
        assert_ne!(replaced, first);
        t.close().await;
        assert_eq!(
            sockets(kept.path()),
            left,
            "the new login is kept under the same name"
        );

        // Without a command for the idle time, a kept master ends by itself.
        let brief = SshOptions {
            persist: Some(Persist {
                dir: kept.path().to_path_buf(),
                idle: Duration::from_secs(1),
            }),
            ..env.opts.clone()
        };
        let (t, _) = connect(&host, None, &brief).await;
        t.close().await;
        let socket = sockets(kept.path()).pop().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while master_at(&socket) {
            assert!(Instant::now() < deadline, "the idle master did not end");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}

fn file(path: &str, content: &[u8], owner: &str, group: &str, mode: u32) -> FileSpec {
    FileSpec {
        path: path.to_string(),
        content: content.to_vec(),
        owner: owner.to_string(),
        group: group.to_string(),
        mode,
        written_sha256: None,
        sealed: None,
    }
}

/// Runs argv on the transport and returns its stdout, asserting success.
async fn run_ok(t: &Transport, argv: &[&str]) -> Vec<u8> {
    let out = t.run(argv, b"").await.unwrap();
    assert!(
        out.success(),
        "{argv:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

const PWNED: &str = "/tmp/envc-pwned";

/// Values that would run commands, split words or look like options if they reached a shell
/// unquoted.
fn hostile_names() -> Vec<String> {
    [
        "it's",
        "$(touch /tmp/envc-pwned)",
        "`touch /tmp/envc-pwned`",
        "a;touch /tmp/envc-pwned;b",
        "two words",
        "-rf",
        "--help",
        "line\nbreak",
        "'; touch /tmp/envc-pwned; '",
        "\"$(touch /tmp/envc-pwned)\"",
        "ünïcødé ✓",
        "* ?",
        "tab\there",
        "trailing newline\n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn hostile_values_are_data_never_code() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(20));
    let host = spec(&hosts, 0);
    let base = "/tmp/envc-hostile";
    let names = hostile_names();
    // Each file: a hostile name, in a hostile directory, with hostile content (every byte
    // value, quotes, NULs, what would be commands).
    let files: Vec<FileSpec> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut content = format!("{name}\n'\"$(touch {PWNED})`id`\\\n").into_bytes();
            content.extend((0..=255u8).cycle().skip(i).take(300));
            file(
                &format!("{base}/dir {name}/{name}"),
                &content,
                "root",
                "root",
                0o640,
            )
        })
        .collect();
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        // Arguments reach the remote command exactly.
        for name in &names {
            assert_eq!(run_ok(&t, &["printf", "%s", name]).await, name.as_bytes());
        }
        let results = files::apply_files(&t, &files).await;
        for (f, r) in files.iter().zip(&results) {
            let applied = r.as_ref().unwrap_or_else(|e| panic!("{:?}: {e}", f.path));
            assert!(applied.created);
            assert_eq!(
                applied.facts,
                files::file_facts(&f.content, "root", "root", 0o640)
            );
            assert_eq!(run_ok(&t, &["cat", "--", &f.path]).await, f.content);
        }
        // Hostile owners and groups are per-file errors that name the file.
        let bad: Vec<FileSpec> = names
            .iter()
            .flat_map(|name| {
                [
                    file(&format!("{base}/owner"), b"x", name, "root", 0o644),
                    file(&format!("{base}/group"), b"x", "root", name, 0o644),
                ]
            })
            .collect();
        let results = files::apply_files(&t, &bad).await;
        for (f, r) in bad.iter().zip(&results) {
            let e = r.as_ref().unwrap_err().to_string();
            assert!(
                e.contains("does not exist on the host") || e.contains("is not a user or group"),
                "{e}"
            );
            assert!(e.contains(&format!("`{}`", f.path)), "{e}");
        }
        let probed = files::probe_files(&t, &[format!("{base}/owner")])
            .await
            .unwrap();
        assert_eq!(probed, vec![None], "a refused file was created");
        t.close().await;
    });
    // Exactly the expected files exist on the host (listed by find, NUL-separated).
    let out = hosts.ssh(
        0,
        &format!("find {base} -type f -print0; test ! -e {PWNED}"),
    );
    assert!(out.status.success(), "an injected command ran on the host");
    let mut found: Vec<&[u8]> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .collect();
    found.sort();
    let mut want: Vec<&[u8]> = files.iter().map(|f| f.path.as_bytes()).collect();
    want.sort();
    assert_eq!(found, want);
    assert!(!std::path::Path::new(PWNED).exists());
}

#[test]
fn files_apply_probe_drift_and_remove() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(20));
    let host = spec(&hosts, 0);
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        let files = vec![
            file("/etc/envc/app.conf", b"port = 80\n", "root", "root", 0o644),
            file("/etc/envc/secret", b"s3cret", "root", "adm", 0o0640),
            file(
                "/usr/local/bin/envc-tool",
                b"#!/bin/sh\necho tool\n",
                "root",
                "root",
                0o755,
            ),
            file(
                "/etc/envc/nobody-owns",
                b"x",
                "envc-no-such-user",
                "root",
                0o644,
            ),
            file("relative/path", b"x", "root", "root", 0o644),
        ];
        let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        let t0 = Instant::now();
        let first = files::apply_files(&t, &files).await;
        eprintln!("apply_files of {}: {:?}", files.len(), t0.elapsed());
        for (f, r) in files.iter().zip(&first).take(3) {
            let a = r.as_ref().unwrap();
            assert!(a.created, "{}", f.path);
            assert_eq!(
                a.facts,
                files::file_facts(&f.content, &f.owner, &f.group, f.mode)
            );
        }
        let e = first[3].as_ref().unwrap_err().to_string();
        assert!(e.contains("`envc-no-such-user` does not exist"), "{e}");
        assert!(first[4]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        assert_eq!(run_ok(&t, &["/usr/local/bin/envc-tool"]).await, b"tool\n");

        // Again: nothing is new, the facts are the same.
        let second = files::apply_files(&t, &files[..3]).await;
        for (a, b) in first.iter().zip(&second) {
            let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
            assert!(!b.created);
            assert_eq!(a.facts, b.facts);
        }

        // Probing sees what apply saw; a change on the host is drift.
        let probed = files::probe_files(&t, &paths).await.unwrap();
        for (p, r) in probed.iter().zip(&second) {
            assert_eq!(p.as_ref(), Some(&r.as_ref().unwrap().facts));
        }
        assert_eq!(probed[3..], [None, None]);
        run_ok(
            &t,
            &[
                "sh",
                "-c",
                "echo edited >> /etc/envc/app.conf; chmod 600 /etc/envc/secret",
            ],
        )
        .await;
        let drifted = files::probe_files(&t, &paths[..2]).await.unwrap();
        let (conf, secret) = (drifted[0].as_ref().unwrap(), drifted[1].as_ref().unwrap());
        assert_ne!(conf["sha256"], second[0].as_ref().unwrap().facts["sha256"]);
        assert_eq!(conf["mode"], "0644");
        assert_eq!(secret["mode"], "0600");
        assert_eq!(
            secret["sha256"],
            second[1].as_ref().unwrap().facts["sha256"]
        );
        // A directory in the way is reported, not replaced.
        let dir = files::probe_files(&t, &["/etc/envc".to_string()])
            .await
            .unwrap();
        assert_eq!(dir[0].as_ref().unwrap()["sha256"], "(directory)");
        let r = files::apply_files(&t, &[file("/etc/envc", b"x", "root", "root", 0o644)]).await;
        assert!(r[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("is a directory"));

        // Removal of what still holds what envc wrote: the edited file stays.
        use files::Removed::{Absent, Changed, Deleted};
        let written = |i: usize| Some(second[i].as_ref().unwrap().facts["sha256"].clone());
        let removal = |path: &str, written_sha256| files::FileRemoval {
            path: path.to_string(),
            written_sha256,
        };
        let removed = files::remove_files(
            &t,
            &[
                removal(&paths[0], written(0)),
                removal(&paths[1], written(1)),
                removal(&paths[2], written(2)),
            ],
        )
        .await;
        assert_eq!(removed, [Ok(Changed), Ok(Deleted), Ok(Deleted)]);
        // Applying over it replaces it, and says so.
        let over = files::apply_files(
            &t,
            &[FileSpec {
                written_sha256: written(0),
                ..files[0].clone()
            }],
        )
        .await;
        assert_eq!(
            over[0].as_ref().unwrap().note.as_deref(),
            Some(files::REPLACED_CHANGED)
        );
        // Without a recorded content: removed whatever it holds; absent is fine, a directory
        // is refused.
        let again = files::remove_files(
            &t,
            &[
                removal(&paths[0], None),
                removal(&paths[1], None),
                removal("/etc/envc", None),
            ],
        )
        .await;
        assert_eq!(again[..2], [Ok(Deleted), Ok(Absent)]);
        assert!(again[2]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("is a directory"));
        assert_eq!(
            files::probe_files(&t, &paths[..3]).await.unwrap(),
            [None, None, None]
        );
        // No temporary files are left beside the destinations.
        assert_eq!(run_ok(&t, &["ls", "-A", "/etc/envc"]).await, b"");

        // A large batch is one run.
        let many: Vec<FileSpec> = (0..200)
            .map(|i| {
                file(
                    &format!("/srv/many/{i}.conf"),
                    format!("{i}\n").as_bytes(),
                    "root",
                    "root",
                    0o644,
                )
            })
            .collect();
        let t0 = Instant::now();
        let r = files::apply_files(&t, &many).await;
        eprintln!("apply_files of {}: {:?}", many.len(), t0.elapsed());
        assert!(r.iter().all(|r| r.as_ref().is_ok_and(|a| a.created)));

        // Special bits, numeric ids, a dotfile, a file at `/`, directories made on the way,
        // and the time of placing as the file's time.
        let odd = [
            file("/usr/local/bin/envc-suid", b"s", "root", "root", 0o4755),
            file("/etc/envc-ids/by-number", b"n", "0", "0", 0o600),
            file("/etc/envc-ids/.hidden", b"h", "root", "adm", 0o640),
            file("/envc-top", b"t", "root", "root", 0o644),
        ];
        let r = files::apply_files(&t, &odd).await;
        let facts: Vec<_> = r
            .iter()
            .map(|r| r.as_ref().unwrap().facts.clone())
            .collect();
        assert_eq!(facts[0], files::file_facts(b"s", "root", "root", 0o4755));
        // A numeric owner is recorded as the name the host gives it.
        assert_eq!(facts[1], files::file_facts(b"n", "root", "root", 0o600));
        assert_eq!(facts[2], files::file_facts(b"h", "root", "adm", 0o640));
        assert_eq!(facts[3], files::file_facts(b"t", "root", "root", 0o644));
        let listed = run_ok(
            &t,
            &[
                "sh",
                "-c",
                "stat -c '%n %a %Y' /usr/local/bin/envc-suid /etc/envc-ids/.hidden /envc-top; \
                 ls -A /etc/envc-ids /usr/local/bin /; stat -c %a /etc/envc-ids",
            ],
        )
        .await;
        let listed = String::from_utf8(listed).unwrap();
        for line in listed.lines().take(3) {
            let time: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(time > 1_700_000_000, "placed with an old time: {line}");
        }
        assert!(!listed.contains(".envc-new"), "{listed}");
        assert!(listed.ends_with("\n755\n"), "{listed}");
        t.close().await;
    });
}

fn pkg(name: &str, version: Option<&str>) -> PackageSpec {
    PackageSpec {
        name: name.to_string(),
        version: version.map(str::to_string),
        debs: Vec::new(),
    }
}

/// A store of its own, in a directory that lives as long as the value.
fn scratch_store() -> (Store, TempDir) {
    let dir = TempDir::new().unwrap();
    (Store::open(dir.path()).unwrap(), dir)
}

#[test]
fn packages_install_pin_fail_and_purge() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(120));
    let host = spec(&hosts, 0);
    let (store, _store_dir) = scratch_store();
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        let names = vec![
            "hello".to_string(),
            "jq".to_string(),
            "envc-demo".to_string(),
        ];
        assert_eq!(
            packages::probe_packages(&t, &names).await.unwrap(),
            [None, None, None]
        );

        // Two packages (and jq's dependencies) in one transaction.
        let t0 = Instant::now();
        let applied =
            packages::install_packages(&t, &store, &[pkg("hello", None), pkg("jq", None)], None)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        eprintln!("install hello jq: {:?}", t0.elapsed());
        assert!(applied.iter().all(|a| a.created));
        assert_eq!(run_ok(&t, &["hello"]).await, b"Hello, world!\n");
        let probed = packages::probe_packages(&t, &names).await.unwrap();
        for (a, p) in applied.iter().zip(&probed) {
            assert_eq!(Some(&a.facts), p.as_ref());
        }
        let dpkg = run_ok(&t, &["dpkg-query", "-W", "-f", "${Version}", "hello"]).await;
        assert_eq!(probed[0].as_ref().unwrap()["version"].as_bytes(), dpkg);
        assert_eq!(probed[2], None);

        // Installing an installed package again: not created.
        let again = packages::install_packages(&t, &store, &[pkg("hello", None)], None)
            .await
            .unwrap();
        assert!(!again[0].created);

        // Pinned versions: install 1.0, upgrade to 2.0, downgrade to 1.0.
        for (version, created) in [("1.0", true), ("2.0", false), ("1.0", false)] {
            let a =
                packages::install_packages(&t, &store, &[pkg("envc-demo", Some(version))], None)
                    .await
                    .unwrap_or_else(|e| panic!("envc-demo={version}: {e}"));
            assert_eq!(
                (a[0].facts["version"].as_str(), a[0].created),
                (version, created)
            );
            let file = run_ok(&t, &["cat", "/usr/share/envc-demo/version"]).await;
            assert_eq!(file, format!("{version}\n").into_bytes());
        }

        // Failures name the packages and the host and carry apt's own words.
        let e = packages::install_packages(&t, &store, &[pkg("envc-no-such-package", None)], None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`envc-no-such-package`") && e.contains("host0"),
            "{e}"
        );
        assert!(
            e.contains("Unable to locate package envc-no-such-package"),
            "{e}"
        );
        let e = packages::install_packages(&t, &store, &[pkg("envc-demo", Some("9.9"))], None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("'9.9'") && e.contains("hint:"), "{e}");
        let e =
            packages::install_packages(&t, &store, &[pkg("$(touch /tmp/envc-pwned)", None)], None)
                .await
                .unwrap_err()
                .to_string();
        assert!(e.contains("not a Debian package name"), "{e}");

        // Purge: installed ones go, absent ones are fine.
        let all = vec![
            "hello".to_string(),
            "jq".to_string(),
            "envc-demo".to_string(),
            "tree".to_string(),
        ];
        packages::purge_packages(&t, &all).await.unwrap();
        let probed = packages::probe_packages(&t, &all).await.unwrap();
        assert_eq!(probed, [None, None, None, None]);
        packages::purge_packages(&t, &all).await.unwrap();
        t.close().await;
    });
}

/// The pins of the test hosts' own repository (`/srv/envc-repo` in their rootfs: hello, jq and
/// its libraries, envc-demo), by name, served from a mirror nobody listens on: only the
/// store can give their bytes.
fn repo_pins(hosts: &TestHosts) -> std::collections::BTreeMap<String, DebSource> {
    let repo = hosts.rootfs().join("srv/envc-repo");
    let index = std::fs::read_to_string(repo.join("Packages")).unwrap();
    let mut pins = std::collections::BTreeMap::new();
    for s in envc_lockfiles::archive::parse_packages(&index).unwrap() {
        let pin = PackagePin {
            name: s.package,
            archive: "debian/bookworm".into(),
            version: s.version,
            architecture: s.architecture,
            filename: s.filename.trim_start_matches("./").to_string(),
            size: s.size,
            sha256: s.sha256,
            closure: None,
        };
        // envc-demo is there twice: the later one (2.0) wins.
        pins.insert(
            pin.name.clone(),
            DebSource {
                pin,
                mirror: "http://127.0.0.1:9/debian".into(),
            },
        );
    }
    pins
}

fn pinned(pins: &std::collections::BTreeMap<String, DebSource>, names: &[&str]) -> PackageSpec {
    PackageSpec {
        name: names[0].to_string(),
        version: Some(pins[names[0]].pin.version.clone()),
        debs: names.iter().map(|n| pins[*n].clone()).collect(),
    }
}

#[test]
fn pinned_debs_install_from_the_store_on_a_host_with_no_apt_source() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(120));
    let host = spec(&hosts, 0);
    // The host's only apt source and its index go: nothing can be resolved or fetched there.
    // apt-get goes too, until the purge: pinned .debs need only dpkg.
    let out = hosts.ssh(
        0,
        "rm -f /etc/apt/sources.list.d/* && rm -rf /var/lib/apt/lists/* && \
         mv /usr/bin/apt-get /usr/bin/apt-get.hidden",
    );
    assert!(out.status.success(), "{out:?}");
    let pins = repo_pins(&hosts);
    let (store, _store_dir) = scratch_store();
    let repo = hosts.rootfs().join("srv/envc-repo");
    for name in ["jq", "libjq1", "libonig5"] {
        let p = &pins[name].pin;
        store
            .put_deb(&p.sha256, &std::fs::read(repo.join(&p.filename)).unwrap())
            .unwrap();
    }
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        let jq = pinned(&pins, &["jq", "libjq1", "libonig5"]);

        // Without its closure, the .debs are refused before anything is shipped or unpacked,
        // with what jq's own control paragraph asks and what the host has.
        let bare = pinned(&pins, &["jq"]);
        let e = packages::install_packages(&t, &store, std::slice::from_ref(&bare), None)
            .await
            .unwrap_err()
            .to_string();
        let v = &pins["jq"].pin.version;
        for want in [
            format!("`jq` {v} depends on `libjq1 (= {v})`, which the host does not have"),
            "do not install onto host `host0` as it is; nothing was installed".to_string(),
            "`base`".to_string(),
        ] {
            assert!(e.contains(&want), "{e}\nlacks {want}");
        }
        let names: Vec<String> = ["jq", "libjq1", "libonig5"].map(String::from).to_vec();
        assert_eq!(
            packages::probe_packages(&t, &names).await.unwrap(),
            [None, None, None]
        );

        // A listing the host has moved on from is not acted on: here it still shows
        // libonig5, which is gone by the install, and would leave it unshipped.
        let onig = format!("/srv/envc-repo/{}", pins["libonig5"].pin.filename);
        run_ok(&t, &["dpkg", "-i", &onig]).await;
        let stale = packages::list_packages(&t).await.unwrap();
        assert!(stale.version_of("libonig5").is_some());
        run_ok(&t, &["dpkg", "--purge", "libonig5"]).await;

        // With it: exactly the pinned versions, the closure marked as dependencies.
        let applied =
            packages::install_packages(&t, &store, std::slice::from_ref(&jq), Some(stale))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(applied[0].created);
        assert_eq!(applied[0].facts["version"], pins["jq"].pin.version);
        assert_eq!(run_ok(&t, &["jq", "-n", "1+1"]).await, b"2\n");
        let auto = run_ok(&t, &["apt-mark", "showauto", "jq", "libjq1", "libonig5"]).await;
        assert_eq!(String::from_utf8_lossy(&auto), "libjq1\nlibonig5\n");

        // Again, with the store emptied and no mirror: the host has every pinned version,
        // but nothing can hold them to their pinned bytes (an edited sha256 would pass), so
        // the node fails naming the pin, and the host is left as it is.
        for name in ["jq", "libjq1", "libonig5"] {
            std::fs::remove_file(store.deb_path(&pins[name].pin.sha256)).unwrap();
        }
        let e = packages::install_packages(&t, &store, std::slice::from_ref(&jq), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(pin package:jq)") && e.contains("cannot fetch"),
            "{e}"
        );
        assert_eq!(
            run_ok(&t, &["dpkg-query", "-W", "-f", "${Status}", "jq"]).await,
            b"install ok installed"
        );
        // With the store's copies back: what the host has is checked, and not shipped.
        for name in ["jq", "libjq1", "libonig5"] {
            let p = &pins[name].pin;
            store
                .put_deb(&p.sha256, &std::fs::read(repo.join(&p.filename)).unwrap())
                .unwrap();
        }
        let again = packages::install_packages(&t, &store, std::slice::from_ref(&jq), None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!again[0].created);

        // A package the environment names is its own, even when another brought it first:
        // nothing to ship, and no longer marked as a dependency.
        let libjq1 = packages::install_packages(&t, &store, &[pinned(&pins, &["libjq1"])], None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!libjq1[0].created);
        let auto = run_ok(&t, &["apt-mark", "showauto", "jq", "libjq1", "libonig5"]).await;
        assert_eq!(String::from_utf8_lossy(&auto), "libonig5\n");

        // Purged (by dpkg: there is no apt-get), jq leaves the package the environment names
        // and what that one needs.
        packages::purge_packages(&t, &["jq".to_string()])
            .await
            .unwrap();
        let left = packages::probe_packages(&t, &names).await.unwrap();
        let present: Vec<bool> = left.iter().map(Option::is_some).collect();
        assert_eq!(present, [false, true, true]);
        // dpkg refuses to purge what an installed package needs, and says so.
        let e = packages::purge_packages(&t, &["libonig5".to_string()])
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("dpkg exited") && e.contains("libjq1"), "{e}");
        // Purged in turn with apt back, libjq1 takes libonig5 with it: it came as a
        // dependency, and nothing needs it now.
        run_ok(&t, &["mv", "/usr/bin/apt-get.hidden", "/usr/bin/apt-get"]).await;
        packages::purge_packages(&t, &["libjq1".to_string()])
            .await
            .unwrap();
        assert_eq!(
            packages::probe_packages(&t, &names).await.unwrap(),
            [None, None, None]
        );
        let still = run_ok(&t, &["dpkg-query", "-W", "-f", "${Status}", "libc6"]).await;
        assert_eq!(still, b"install ok installed");

        // A store copy that does not match its pin is not used: it is fetched again, and
        // here the mirror cannot be reached, so the error names the pin and nothing is
        // installed.
        let hello = &pins["hello"].pin;
        store.put_deb(&hello.sha256, b"not hello").unwrap();
        let e = packages::install_packages(&t, &store, &[pinned(&pins, &["hello"])], None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("package `hello`") && e.contains("pin package:hello"),
            "{e}"
        );
        assert!(
            e.contains("nothing was installed") || e.contains("cannot fetch"),
            "{e}"
        );
        assert_eq!(
            packages::probe_packages(&t, &["hello".to_string()])
                .await
                .unwrap(),
            [None]
        );
        t.close().await;
    });
}

/// A `.deb` of `name` 1.0 (architecture all, one file, `/usr/share/NAME/version`) with
/// `fields` added to its control paragraph, built by dpkg-deb in `dir` and put in `store`,
/// and its pin (served from a mirror nobody listens on: only the store has it).
fn tiny_deb(dir: &std::path::Path, store: &Store, name: &str, fields: &str) -> DebSource {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/share").join(name)).unwrap();
    std::fs::write(root.join("usr/share").join(name).join("version"), "1.0\n").unwrap();
    let control = format!(
        "Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: envc tests \
         <tests@envc.invalid>\nDescription: envc test package\n{fields}"
    );
    std::fs::write(root.join("DEBIAN/control"), control).unwrap();
    let deb = dir.join(format!("{name}_1.0_all.deb"));
    let out = std::process::Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&root)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&deb).unwrap();
    let sha256 = envc_lockfiles::fetch::sha256_hex(&bytes);
    store.put_deb(&sha256, &bytes).unwrap();
    DebSource {
        pin: PackagePin {
            name: name.to_string(),
            archive: "debian/bookworm".into(),
            version: "1.0".into(),
            architecture: "all".into(),
            filename: format!("pool/main/e/{name}/{name}_1.0_all.deb"),
            size: bytes.len() as u64,
            sha256,
            closure: None,
        },
        mirror: "http://127.0.0.1:9/debian".into(),
    }
}

#[test]
fn shipped_debs_install_in_pre_dependency_order_and_conflicts_ship_nothing() {
    let hosts = TestHosts::start(1);
    let env = env(&hosts, Duration::from_secs(120));
    let host = spec(&hosts, 0);
    let (store, _store_dir) = scratch_store();
    let debs = TempDir::new().unwrap();
    // By name, `envc-pre-app` comes first; dpkg unpacks it only once `envc-pre-base` is
    // configured, so one `dpkg -i` of both would refuse it.
    let app = tiny_deb(
        debs.path(),
        &store,
        "envc-pre-app",
        "Pre-Depends: envc-pre-base (>= 1.0)\n",
    );
    let base = tiny_deb(debs.path(), &store, "envc-pre-base", "");
    let rival = tiny_deb(
        debs.path(),
        &store,
        "envc-rival",
        "Conflicts: envc-pre-base\n",
    );
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        let spec = PackageSpec {
            name: "envc-pre-app".into(),
            version: Some("1.0".into()),
            debs: vec![app, base],
        };
        let applied = packages::install_packages(&t, &store, &[spec], None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(applied[0].created);
        let names = ["envc-pre-app".to_string(), "envc-pre-base".to_string()];
        let probed = packages::probe_packages(&t, &names).await.unwrap();
        assert!(probed.iter().all(Option::is_some), "{probed:?}");

        // A package that conflicts with one the host has is refused before it is shipped.
        let rival = PackageSpec {
            name: "envc-rival".into(),
            version: Some("1.0".into()),
            debs: vec![rival],
        };
        let e = packages::install_packages(&t, &store, &[rival], None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`envc-rival` 1.0 conflicts with `envc-pre-base`: envc-pre-base 1.0"),
            "{e}"
        );
        let probed = packages::probe_packages(&t, &["envc-rival".to_string()])
            .await
            .unwrap();
        assert_eq!(probed, [None]);
        t.close().await;
    });
}

#[test]
fn services_need_systemd_and_a_dead_host_is_an_error_not_a_hang() {
    let hosts = TestHosts::start(1);
    // Longer than the keepalives take to notice a dead host (5 s interval, 2 missed).
    let env = env(&hosts, Duration::from_secs(30));
    let host = spec(&hosts, 0);
    in_controller(&hosts, || async {
        let (t, _) = connect(&host, None, &env.opts).await;
        let want = "`host0` does not run systemd, so service `nginx` cannot be managed there";
        let svc = ServiceSpec {
            name: "nginx".into(),
            enabled: true,
            running: true,
            restart: false,
        };
        assert_eq!(
            services::apply_service(&t, &svc)
                .await
                .unwrap_err()
                .to_string(),
            want
        );
        let names = ["nginx".to_string()];
        assert_eq!(
            services::probe_services(&t, &names)
                .await
                .unwrap_err()
                .to_string(),
            want
        );
        assert_eq!(
            services::remove_service(&t, "nginx")
                .await
                .unwrap_err()
                .to_string(),
            want
        );

        // The host dies while connected: the next command fails once the keepalives notice,
        // well before the command timeout.
        hosts.kill_host(0);
        let t0 = Instant::now();
        let e = t.run(&["true"], b"").await.unwrap_err();
        eprintln!("command on a killed host: {:?}: {e}", t0.elapsed());
        assert!(matches!(e, TransportError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains("host0"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        t.close().await;

        // A new connection to it fails after the connect timeout.
        let t0 = Instant::now();
        let e = Transport::connect(&host, None, &env.opts)
            .await
            .err()
            .unwrap();
        eprintln!("connect to a killed host: {:?}: {e}", t0.elapsed());
        assert!(matches!(e, TransportError::Unreachable { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    });
}

#[test]
fn local_transport_runs_commands_and_places_files() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SshOptions {
        config_file: None,
        connect_timeout: Duration::from_secs(2),
        command_timeout: Duration::from_secs(10),
        work_dir: dir.path().to_path_buf(),
        persist: None,
    };
    let host = HostSpec {
        name: "this-machine".into(),
        address: LOCAL_ADDRESS.into(),
        port: 22,
        user: "root".into(),
        identity: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (t, key) = Transport::connect(&host, None, &opts).await.unwrap();
        let id = std::fs::read_to_string("/etc/machine-id").unwrap();
        assert_eq!(key.fingerprint, format!("machine-id:{}", id.trim()));
        assert!(t.is_local());
        // No shell: the argument is printed, not run.
        let out = t
            .run(&["echo", "$(touch /tmp/envc-pwned)"], b"")
            .await
            .unwrap();
        assert_eq!(out.stdout, b"$(touch /tmp/envc-pwned)\n");

        let (uid, gid) = (
            String::from_utf8(run_ok(&t, &["id", "-un"]).await).unwrap(),
            String::from_utf8(run_ok(&t, &["id", "-gn"]).await).unwrap(),
        );
        let (user, group) = (uid.trim(), gid.trim());
        let path = dir.path().join("sub dir/it's $(x).conf");
        let path = path.to_str().unwrap().to_string();
        let f = file(&path, b"local\n", user, group, 0o600);
        let r = files::apply_files(&t, std::slice::from_ref(&f)).await;
        let a = r[0].as_ref().unwrap();
        assert!(a.created);
        assert_eq!(a.facts, files::file_facts(b"local\n", user, group, 0o600));
        assert_eq!(std::fs::read(&path).unwrap(), b"local\n");
        let probed = files::probe_files(&t, std::slice::from_ref(&path))
            .await
            .unwrap();
        assert_eq!(probed[0].as_ref(), Some(&a.facts));
        let removal = files::FileRemoval {
            path: path.clone(),
            written_sha256: Some(a.facts["sha256"].clone()),
        };
        assert_eq!(
            files::remove_files(&t, &[removal]).await,
            [Ok(files::Removed::Deleted)]
        );
        assert!(!std::path::Path::new(&path).exists());
        t.close().await;
    });
    assert!(!std::path::Path::new(PWNED).exists());
}
