//! moto's AWS server on loopback for the client's tests: `scripts/s3-server` (which serves
//! moto's whole API, EC2 and IAM included, from the venv it caches under target/testhosts),
//! with the Debian AMI fixture (`tests/fixtures/aws/amis.json`) as its image catalogue.
//! Dropping a server kills it; it is also tied to the test process (parent death signal).
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envc_aws::{Credentials, Ec2Client, RetryPolicy};

/// moto imports for a few seconds; the two cores may be shared with other builds. The first
/// venv build (about a minute) also runs inside this.
const READY_TIMEOUT: Duration = Duration::from_secs(600);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
pub const REGION: &str = "us-east-1";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub struct Moto {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Moto {
    /// A server whose first `no_auth` calls pass without a signature check, the rest checked
    /// against its IAM (moto's `INITIAL_NO_AUTH_ACTION_COUNT`); `None`: no checks at all.
    pub fn start(no_auth: Option<u32>) -> Moto {
        let dir = tempfile::Builder::new()
            .prefix("envc-aws-moto-")
            .tempdir()
            .unwrap();
        let port_file = dir.path().join("port");
        let log = fs::File::create(dir.path().join("moto.log")).unwrap();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "bash"])
            .arg(repo().join("scripts/s3-server"))
            .arg("--port-file")
            .arg(&port_file)
            .env_clear()
            .env("PATH", PATH)
            .env(
                "MOTO_AMIS_PATH",
                repo().join("tests/fixtures/aws/amis.json"),
            )
            // RunInstances with an unknown AMI fails, as on AWS (moto launches it otherwise).
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(cache) = std::env::var_os("ENVC_S3_VENV_CACHE") {
            cmd.env("ENVC_S3_VENV_CACHE", cache);
        }
        if let Some(home) = std::env::var_os("HOME") {
            // pip's cache, for a first venv build.
            cmd.env("HOME", home);
        }
        if let Some(n) = no_auth {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        let child = cmd.spawn().unwrap();
        let mut moto = Moto {
            child,
            port: 0,
            dir,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    moto.port = port;
                    return moto;
                }
            }
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto exited ({status}) before serving:\n{}", moto.log());
            }
            assert!(
                Instant::now() < deadline,
                "moto did not serve within {READY_TIMEOUT:?}:\n{}",
                moto.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn endpoint(&self) -> url::Url {
        url::Url::parse(&format!("http://127.0.0.1:{}", self.port)).unwrap()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }

    /// A client with these keys; moto without checks takes any.
    pub fn client(&self, access_key_id: &str, secret: &str) -> Ec2Client {
        self.client_with_token(access_key_id, secret, None)
    }

    pub fn client_with_token(
        &self,
        access_key_id: &str,
        secret: &str,
        token: Option<&str>,
    ) -> Ec2Client {
        let credentials = Credentials {
            access_key_id: access_key_id.to_string(),
            secret_access_key: secret.to_string(),
            session_token: token.map(str::to_string),
            source: "test".to_string(),
        };
        Ec2Client::new(REGION, self.endpoint(), credentials, fast_retry()).unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Retries that do not slow a test down.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
    }
}

/// A fresh ed25519 public key from ssh-keygen (`ssh-ed25519 AAAA… comment`).
pub fn ssh_public_key() -> String {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("id");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "envc-aws-test", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::read_to_string(key.with_extension("pub")).unwrap()
}

/// The text between `open` and `close` in an XML answer.
pub fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {text}"))
        + open.len();
    let end = text[start..].find(close).unwrap() + start;
    &text[start..end]
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
