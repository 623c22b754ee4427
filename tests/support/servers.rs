//! Real object-store servers on loopback, for the tests of envc's shared binary cache and
//! state backend.
//!
//! - [`S3Server`]: moto's S3 server (PyPI `moto[server]`, pinned in `scripts/s3-server`, from a
//!   venv cached under `target/testhosts`), with SigV4 requests and conditional writes
//!   (`If-None-Match: *`, `If-Match`). Any credentials are accepted.
//! - [`WebDavServer`]: Debian's nginx with its WebDAV module and `libnginx-mod-http-dav-ext`
//!   (PROPFIND), serving a temporary directory: what object_store's `HttpBuilder` talks to.
//!
//! - [`Ec2Server`]: the same moto server, serving EC2 inside a network namespace (the test
//!   hosts' controller namespace, tests/support/nshosts.rs), with the Debian images of
//!   `tests/fixtures/aws/amis.json`; and [`CheckIpServer`], a stand-in for AWS's checkip
//!   service in the same namespace. tests/support/cloud.rs boots its instances.
//!
//! Each `start` picks a free port on 127.0.0.1 and returns once the server answers (bounded;
//! the first venv build is not counted), or panics with the server's log. Each server can be
//! stopped and restarted on the same port with the same data, to test a server that dies in
//! the middle of an upload. Dropping a server kills it and waits for it; its processes are
//! also tied to the thread that called `start` (parent death signal), so they die with the
//! test process even if `Drop` never runs: create a server on the thread that uses it.
//!
//! Needs `setpriv` (util-linux), `nginx` and `libnginx-mod-http-dav-ext` (Debian), python3
//! with the venv module; `scripts/setup` installs them. nginx runs as root (`user root`), so
//! the tests do too.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to answer after it was started (moto imports for a few
/// seconds; two cores may be shared with other test binaries).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stop or an outage may take to show on the port.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of each request the support code makes itself (readiness, bucket creation).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The dav-ext module, from Debian's `libnginx-mod-http-dav-ext`.
const DAV_EXT_MODULE: &str = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so";
/// How often `WebDavServer::start` tries another port when the one it picked was taken in the
/// moment between picking and nginx binding it.
const PORT_ATTEMPTS: usize = 5;

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn setns(fd: i32, nstype: i32) -> i32;
}
const CLONE_NEWNET: i32 = 0x4000_0000;
const SIGHUP: i32 = 1;
const SIGUSR1: i32 = 10;
const SIGUSR2: i32 = 12;

/// Access key, secret and region the tests give object_store and envc; moto checks the
/// signature's form, not the key.
pub const S3_ACCESS_KEY_ID: &str = "envc-test";
pub const S3_SECRET_ACCESS_KEY: &str = "envc-test-secret";
pub const S3_REGION: &str = "us-east-1";

/// A moto S3 server on 127.0.0.1.
pub struct S3Server {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    down: bool,
}

impl S3Server {
    /// Starts a server on a free port and returns once it answers S3 requests. Builds the
    /// venv first if the cache does not have it (about a minute, once).
    pub fn start() -> S3Server {
        match Self::try_start() {
            Ok(server) => server,
            Err(e) => panic!("S3Server::start: {e}"),
        }
    }

    fn try_start() -> Result<S3Server, String> {
        s3_venv()?;
        let dir = tempfile::Builder::new()
            .prefix("envc-s3-")
            .tempdir()
            .map_err(|e| format!("creating the state directory: {e}"))?;
        let port_file = dir.path().join("port");
        let mut cmd = Command::new("bash");
        cmd.arg(repo_path("scripts/s3-server"))
            .arg("--port-file")
            .arg(&port_file);
        // The server runs with a clean environment, but must find the venv s3_venv found.
        if let Some(cache) = std::env::var_os("ENVC_S3_VENV_CACHE") {
            cmd.env("ENVC_S3_VENV_CACHE", cache);
        }
        let child = spawn_tied(&mut cmd, &dir.path().join("s3-server.log"))?;
        let mut server = S3Server {
            child: Some(child),
            port: 0,
            dir,
            down: false,
        };
        // From here on, dropping `server` (on an error return) kills what started.
        let deadline = Instant::now() + READY_TIMEOUT;
        server.port = loop {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break port;
            }
            server.check_running()?;
            if Instant::now() > deadline {
                return Err(server.failure(&format!("no port after {READY_TIMEOUT:?}")));
            }
            sleep(Duration::from_millis(20));
        };
        server.wait_answering(deadline)?;
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`, the S3 endpoint (path-style requests).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The environment variables that point an S3 client at this server: what envc (through
    /// object_store's `AmazonS3Builder::from_env`, which reads every `AWS_*` variable whose
    /// lowercased name is one of its config keys) and the AWS CLI and SDKs read.
    /// `AWS_ALLOW_HTTP` lets object_store use plain http; `AWS_ENDPOINT` (object_store) and
    /// `AWS_ENDPOINT_URL` (AWS SDKs, also read by object_store) name the server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET_ACCESS_KEY.to_string()),
            ("AWS_REGION", S3_REGION.to_string()),
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Creates a bucket (S3 names: 3 to 63 characters of `a-z0-9.-`). Panics if the server
    /// refuses.
    pub fn create_bucket(&self, name: &str) {
        let (status, body) = http_request(self.port, "PUT", &format!("/{name}"), &[])
            .unwrap_or_else(|e| panic!("creating bucket {name}: {e}"));
        assert_eq!(status, 200, "creating bucket {name}: {body}");
    }

    /// An outage: the port closes (new connections are refused) and every open connection is
    /// cut, in the middle of a request or not, as when a server crashes. Unlike a crash, the
    /// data stays: moto keeps it in memory and cannot persist it, so the process lives on
    /// and only stops serving (see `scripts/s3-server.py`). What a cut request had not
    /// finished is not stored. Returns once connections are refused.
    pub fn stop(&mut self) {
        if self.down {
            return;
        }
        self.signal(SIGUSR1);
        self.down = true;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while connects(self.port) {
            if Instant::now() > deadline {
                panic!(
                    "{}",
                    self.failure(&format!(
                        "port still open {STOP_TIMEOUT:?} after the outage"
                    ))
                );
            }
            sleep(Duration::from_millis(10));
        }
    }

    /// Ends an outage: serves again on the same port, with the data it had. Returns once the
    /// server answers.
    pub fn restart(&mut self) {
        if !self.down {
            return;
        }
        self.signal(SIGUSR2);
        self.down = false;
        if let Err(e) = self.wait_answering(Instant::now() + READY_TIMEOUT) {
            panic!("S3Server::restart: {e}");
        }
    }

    /// Kills the server process (SIGKILL): its data is gone, and it cannot be restarted.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        last_lines(&self.dir.path().join("s3-server.log"), 40)
    }

    fn signal(&mut self, sig: i32) {
        if let Err(e) = self.check_running() {
            panic!("{e}");
        }
        let pid = self.child.as_ref().map(Child::id).unwrap_or_default();
        // SAFETY: plain syscall; the pid is our child, not yet reaped (checked just above),
        // so it cannot have been recycled.
        unsafe { kill(pid as i32, sig) };
    }

    fn check_running(&mut self) -> Result<(), String> {
        match self.child.as_mut().map(Child::try_wait) {
            None => Err(self.failure("the server was killed")),
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(status))) => Err(self.failure(&format!("the server exited ({status})"))),
            Some(Err(e)) => Err(self.failure(&format!("waiting for the server: {e}"))),
        }
    }

    /// Waits until a ListBuckets request gets moto's answer.
    fn wait_answering(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            match http_request(self.port, "GET", "/", &[]) {
                Ok((200, body)) if body.contains("ListAllMyBucketsResult") => return Ok(()),
                Ok((status, body)) => {
                    return Err(self.failure(&format!(
                        "ListBuckets answered {status}, not moto's 200: {body}"
                    )))
                }
                Err(e) => {
                    self.check_running()?;
                    if Instant::now() > deadline {
                        return Err(
                            self.failure(&format!("not answering after {READY_TIMEOUT:?}: {e}"))
                        );
                    }
                }
            }
            sleep(Duration::from_millis(20));
        }
    }

    fn failure(&self, what: &str) -> String {
        format!(
            "moto S3 server (port {}): {what}\n[{}, last lines]\n{}",
            self.port,
            self.dir.path().join("s3-server.log").display(),
            self.log()
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The region every [`Ec2Server`] test uses; moto keeps each region apart.
pub const EC2_REGION: &str = "eu-west-1";

/// What an [`Ec2Server`] starts with.
#[derive(Debug, Clone, Default)]
pub struct Ec2Options {
    /// The images moto offers (moto's `MOTO_AMIS_PATH`: a JSON list, the shape of
    /// `tests/fixtures/aws/amis.json`, which is the default). moto offers no other image.
    pub amis: Option<PathBuf>,
    /// moto's `INITIAL_NO_AUTH_ACTION_COUNT`: after that many requests, moto checks every
    /// request's credentials and signature against its IAM (whose users and access keys the
    /// test must create in those first requests). Without it, any credentials are accepted.
    /// The readiness check makes no request when it is set, so that none is used up.
    pub initial_no_auth_action_count: Option<u32>,
}

/// moto's server (scripts/s3-server, the same one as [`S3Server`]) serving EC2 on 127.0.0.1
/// inside the network namespace of a given process: the test hosts' controller namespace,
/// where envc runs in the tests (`TestHosts::in_controller`), so that envc reaches both moto and
/// the hosts that stand in for the instances (tests/support/cloud.rs), and nothing else.
///
/// moto keeps its state in memory: a server that is killed loses every resource. Newer images
/// can appear while it runs ([`Ec2Server::add_images`]), as when Debian publishes one.
pub struct Ec2Server {
    child: Option<Child>,
    port: u16,
    netns_pid: u32,
    dir: TempDir,
}

impl Ec2Server {
    /// Starts moto inside the network namespace of `netns_pid` (`TestHosts::controller_pid`)
    /// on a free port and returns once it listens. Builds the venv first if the cache does
    /// not have it (about a minute, once). Panics on any failure, with the server's log.
    pub fn start_in(netns_pid: u32, opts: Ec2Options) -> Ec2Server {
        match Self::try_start_in(netns_pid, opts) {
            Ok(server) => server,
            Err(e) => panic!("Ec2Server::start_in: {e}"),
        }
    }

    fn try_start_in(netns_pid: u32, opts: Ec2Options) -> Result<Ec2Server, String> {
        s3_venv()?;
        let dir = tempfile::Builder::new()
            .prefix("envc-ec2-")
            .tempdir()
            .map_err(|e| format!("creating the state directory: {e}"))?;
        // moto reads its own copy: add_images rewrites it.
        let amis = opts
            .amis
            .clone()
            .unwrap_or_else(|| repo_path("tests/fixtures/aws/amis.json"));
        let copy = dir.path().join("amis.json");
        fs::copy(&amis, &copy).map_err(|e| format!("copying {}: {e}", amis.display()))?;
        let port_file = dir.path().join("port");
        let mut cmd = Command::new("nsenter");
        // nsenter execs (it forks only to enter a pid namespace), and so does the script: the
        // child is moto's python, which the signals must reach.
        cmd.arg("-t")
            .arg(netns_pid.to_string())
            .args(["-n", "--", "bash"])
            .arg(repo_path("scripts/s3-server"))
            .args(["--port", "0", "--port-file"])
            .arg(&port_file)
            .env("MOTO_AMIS_PATH", &copy)
            // As EC2 does: an instance of an image that does not exist is refused.
            .env("MOTO_ENABLE_AMI_VALIDATION", "true");
        if let Some(n) = opts.initial_no_auth_action_count {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        if let Some(cache) = std::env::var_os("ENVC_S3_VENV_CACHE") {
            cmd.env("ENVC_S3_VENV_CACHE", cache);
        }
        let child = spawn_tied(&mut cmd, &dir.path().join("ec2-server.log"))?;
        let mut server = Ec2Server {
            child: Some(child),
            port: 0,
            netns_pid,
            dir,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        server.port = loop {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break port;
            }
            server.check_running()?;
            if Instant::now() > deadline {
                return Err(server.failure(&format!("no port after {READY_TIMEOUT:?}")));
            }
            sleep(Duration::from_millis(20));
        };
        // The port file is written once the socket serves; a request proves moto answers EC2.
        // Its first EC2 request builds every region's backend, which on a loaded machine
        // outlasts one request's timeout: asked again until the server's own deadline.
        if opts.initial_no_auth_action_count.is_none() {
            let port = server.port;
            let answer = loop {
                let answer = in_netns(netns_pid, move || {
                    http_request(
                        port,
                        "GET",
                        "/?Action=DescribeRegions&Version=2016-11-15",
                        &[("Authorization", &fake_ec2_authorization())],
                    )
                })
                .and_then(|r| r);
                if answer.is_ok() || Instant::now() > deadline {
                    break answer;
                }
                server.check_running()?;
            };
            match answer {
                Ok((200, body)) if body.contains("DescribeRegionsResponse") => {}
                Ok((status, body)) => {
                    return Err(server.failure(&format!(
                        "DescribeRegions answered {status}, not moto's 200: {body}"
                    )))
                }
                Err(e) => return Err(server.failure(&format!("DescribeRegions: {e}"))),
            }
        }
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`: the EC2 endpoint, valid inside the namespace only.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid whose network namespace the server is in.
    pub fn netns_pid(&self) -> u32 {
        self.netns_pid
    }

    /// The environment that points an EC2 client at this server: envc, boto3 and the AWS
    /// CLI read `AWS_ENDPOINT_URL_EC2` (the AWS SDKs' service-specific endpoint) and the
    /// credentials; `AWS_DEFAULT_REGION` is boto3's name for the region, `AWS_REGION` the
    /// SDKs'.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL_EC2", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET_ACCESS_KEY.to_string()),
            ("AWS_REGION", EC2_REGION.to_string()),
            ("AWS_DEFAULT_REGION", EC2_REGION.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Adds the images of `amis` (a JSON list, the fixture's shape) that the server does not
    /// have yet, keeping all else (instances, VPCs, ...): a newer image appears, as when its
    /// publisher registers one. Returns once moto has them. (`RegisterImage` would not do: it
    /// makes the caller the image's owner, not Debian's account.)
    pub fn add_images(&self, amis: &Path) {
        let copy = self.dir.path().join("amis.json");
        if let Err(e) = fs::copy(amis, &copy) {
            panic!("copying {}: {e}", amis.display());
        }
        let log = self.dir.path().join("ec2-server.log");
        let done = |text: &str| text.matches("s3-server: images ").count();
        let before = done(&fs::read_to_string(&log).unwrap_or_default());
        let pid = self.child.as_ref().map(Child::id).unwrap_or_default();
        // SAFETY: plain syscall; the pid is our child, which `Drop` alone reaps.
        unsafe { kill(pid as i32, SIGHUP) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            let text = fs::read_to_string(&log).unwrap_or_default();
            if done(&text) > before {
                assert!(
                    !text.contains("images not reloaded"),
                    "{}",
                    self.failure("adding images failed")
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}",
                self.failure(&format!("images not added within {STOP_TIMEOUT:?}"))
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        last_lines(&self.dir.path().join("ec2-server.log"), 40)
    }

    fn check_running(&mut self) -> Result<(), String> {
        match self.child.as_mut().map(Child::try_wait) {
            None => Err(self.failure("the server was killed")),
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(status))) => Err(self.failure(&format!("the server exited ({status})"))),
            Some(Err(e)) => Err(self.failure(&format!("waiting for the server: {e}"))),
        }
    }

    fn failure(&self, what: &str) -> String {
        format!(
            "moto EC2 server (port {}): {what}\n[{}, last lines]\n{}",
            self.port,
            self.dir.path().join("ec2-server.log").display(),
            self.log()
        )
    }
}

impl Drop for Ec2Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An `Authorization` header whose credential scope names EC2: moto routes a request to
/// 127.0.0.1 by it, and checks no signature unless told to.
pub fn fake_ec2_authorization() -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={S3_ACCESS_KEY_ID}/20260101/{EC2_REGION}/ec2/aws4_request, \
         SignedHeaders=host, Signature=0"
    )
}

/// A stand-in for AWS's checkip service (https://checkip.amazonaws.com), which cannot be
/// reached here: a plain-text HTTP server on 127.0.0.1 inside a network namespace that answers
/// every GET with the address it was given and a newline, as checkip answers with the
/// caller's public address. envc learns "where it runs" from it (for the security group's
/// SSH rule); point envc at [`CheckIpServer::url`] with `ENVC_AWS_CHECKIP_URL`. In the tests the
/// address is the controller's (`TestHosts::controller_addr`), the source of envc's
/// connections to the instances. It serves from a thread of the test process that entered the
/// namespace; dropping it stops the thread.
pub struct CheckIpServer {
    port: u16,
    netns_pid: u32,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    requests: Arc<std::sync::atomic::AtomicUsize>,
}

impl CheckIpServer {
    /// Serves `addr` inside the network namespace of `netns_pid`.
    pub fn start_in(netns_pid: u32, addr: Ipv4Addr) -> CheckIpServer {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let body = format!("{addr}\n");
        let (stop2, requests2) = (stop.clone(), requests.clone());
        let thread = std::thread::spawn(move || {
            let listener = enter_netns(netns_pid).and_then(|()| {
                TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .map_err(|e| format!("binding 127.0.0.1:0: {e}"))
            });
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(
                listener
                    .local_addr()
                    .map(|a| a.port())
                    .map_err(|e| e.to_string()),
            );
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
                // The request's head, up to the blank line; a GET has no body.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                requests2.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain;charset=UTF-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        let port = match rx.recv() {
            Ok(Ok(port)) => port,
            Ok(Err(e)) => panic!("CheckIpServer::start_in: {e}"),
            Err(e) => panic!("CheckIpServer::start_in: the server thread ended: {e}"),
        };
        CheckIpServer {
            port,
            netns_pid,
            stop,
            thread: Some(thread),
            requests,
        }
    }

    /// `http://127.0.0.1:PORT/`, valid inside the namespace only.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// `ENVC_AWS_CHECKIP_URL`, which points envc at it.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("ENVC_AWS_CHECKIP_URL".to_string(), self.url())]
    }

    /// How many requests it has answered.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for CheckIpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A connection wakes the thread from accept, to see the flag.
        let port = self.port;
        let woken = in_netns(self.netns_pid, move || connects(port));
        // A namespace already gone (its hosts dropped first) took the socket with it: the
        // thread cannot be woken, and is left to end with the process.
        if let (Ok(true), Some(thread)) = (woken, self.thread.take()) {
            let _ = thread.join();
        }
    }
}

/// Moves the calling thread into the network namespace of `pid`: only this thread's sockets
/// are made there from now on.
fn enter_netns(pid: u32) -> Result<(), String> {
    let path = format!("/proc/{pid}/ns/net");
    let ns = File::open(&path).map_err(|e| format!("opening {path}: {e}"))?;
    // SAFETY: plain syscall on a file descriptor that `ns` keeps open.
    if unsafe { setns(ns.as_raw_fd(), CLONE_NEWNET) } != 0 {
        return Err(format!(
            "setns({path}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Runs `f` on a new thread inside the network namespace of `pid`, so that the connections it
/// makes (to 127.0.0.1 say) are made there; the caller's thread stays where it was.
pub fn in_netns<T: Send + 'static>(
    pid: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(move || enter_netns(pid).map(|()| f()))
        .join()
        .map_err(|_| "a thread in another network namespace panicked".to_string())?
}

/// The moto venv's directory: `scripts/s3-server --venv`, run once per test process (it
/// builds the venv when the cache does not have it).
pub fn s3_venv() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| {
        let script = repo_path("scripts/s3-server");
        let out = Command::new("bash")
            .arg(&script)
            .arg("--venv")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --venv failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let venv = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        if !venv.join("bin/python").exists() {
            return Err(format!(
                "{} --venv printed {venv:?}, which has no bin/python",
                script.display()
            ));
        }
        Ok(venv)
    })
    .clone()
}

/// nginx serving a temporary directory over WebDAV on 127.0.0.1: PUT (creating missing
/// parent directories), GET with ranges, HEAD, DELETE, MKCOL, COPY, MOVE, and PROPFIND with
/// `Depth: 0` or `1` (the dav-ext module refuses `Depth: infinity` with 403).
pub struct WebDavServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl WebDavServer {
    /// Starts nginx on a free port and returns once it answers a PROPFIND.
    pub fn start() -> WebDavServer {
        match Self::try_start() {
            Ok(server) => server,
            Err(e) => panic!("WebDavServer::start: {e}"),
        }
    }

    fn try_start() -> Result<WebDavServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("envc-webdav-")
            .tempdir()
            .map_err(|e| format!("creating the state directory: {e}"))?;
        for sub in ["root", "tmp", "logs"] {
            fs::create_dir(dir.path().join(sub))
                .map_err(|e| format!("creating {sub} in {}: {e}", dir.path().display()))?;
        }
        let mut server = WebDavServer {
            child: None,
            port: 0,
            dir,
        };
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port()?;
            match server.launch() {
                Ok(()) => return Ok(server),
                // Another process took the port between free_port and nginx's bind.
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(format!(
            "no free port in {PORT_ATTEMPTS} attempts; last:\n{last}"
        ))
    }

    /// Writes the configuration for `self.port` and runs nginx in the foreground until it
    /// answers.
    fn launch(&mut self) -> Result<(), String> {
        let conf = self.dir.path().join("nginx.conf");
        fs::write(&conf, nginx_conf(self.dir.path(), self.port))
            .map_err(|e| format!("writing {}: {e}", conf.display()))?;
        let log = self.dir.path().join("logs/stderr.log");
        self.child = Some(spawn_tied(
            Command::new("nginx")
                .arg("-p")
                .arg(self.dir.path())
                .arg("-c")
                .arg(&conf)
                // Before the configuration is read, nginx logs to its compiled-in path.
                .arg("-e")
                .arg(self.dir.path().join("logs/error.log"))
                .args(["-g", "daemon off;"]),
            &log,
        )?);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match http_request(self.port, "PROPFIND", "/", &[("Depth", "0")]) {
                Ok((207, _)) => return Ok(()),
                Ok((status, body)) => {
                    let e = self.failure(&format!("PROPFIND / answered {status}, not 207: {body}"));
                    self.kill();
                    return Err(e);
                }
                Err(e) => {
                    let exited = self
                        .child
                        .as_mut()
                        .map(|c| c.try_wait())
                        .and_then(Result::ok)
                        .flatten();
                    if let Some(status) = exited {
                        self.child = None;
                        return Err(self.failure(&format!("nginx exited ({status})")));
                    }
                    if Instant::now() > deadline {
                        let e =
                            self.failure(&format!("not answering after {READY_TIMEOUT:?}: {e}"));
                        self.kill();
                        return Err(e);
                    }
                }
            }
            sleep(Duration::from_millis(10));
        }
    }

    /// `http://127.0.0.1:PORT/`, the URL to give object_store's `HttpBuilder` (or envc as a
    /// cache URL).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory served: `PUT /a/b` writes `root()/a/b`.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Kills nginx (SIGKILL): connections are reset, the port closes. The files stay.
    pub fn stop(&mut self) {
        self.kill();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while connects(self.port) {
            assert!(
                Instant::now() < deadline,
                "WebDavServer::stop: port {} still open after {STOP_TIMEOUT:?}",
                self.port
            );
            sleep(Duration::from_millis(10));
        }
    }

    /// Starts nginx again on the same port, serving the same directory.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            return;
        }
        if let Err(e) = self.launch() {
            panic!("WebDavServer::restart: {e}");
        }
    }

    /// nginx's error log and stderr, for failure messages.
    pub fn log(&self) -> String {
        let logs = self.dir.path().join("logs");
        format!(
            "[{}, last lines]\n{}\n[{}, last lines]\n{}",
            logs.join("error.log").display(),
            last_lines(&logs.join("error.log"), 30),
            logs.join("stderr.log").display(),
            last_lines(&logs.join("stderr.log"), 10)
        )
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn failure(&self, what: &str) -> String {
        format!("nginx WebDAV (port {}): {what}\n{}", self.port, self.log())
    }
}

impl Drop for WebDavServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// nginx's configuration for a test server. One process (`master_process off`), so killing
/// the child kills all of nginx; every path is under `dir`, nothing under /etc/nginx or
/// /var is read or written, and the package's own service is irrelevant.
fn nginx_conf(dir: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        r#"# Written by tests/support/servers.rs.
load_module {DAV_EXT_MODULE};
master_process off;
# The tests run as root; the served directory is theirs.
user root;
pid {d}/nginx.pid;
error_log {d}/logs/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {d}/logs/access.log;
    default_type application/octet-stream;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {d}/root;
        # Cache entries are disk images and kernels: no body size limit.
        client_max_body_size 0;
        dav_methods PUT DELETE MKCOL COPY MOVE;
        dav_ext_methods PROPFIND OPTIONS;
        # object_store's PUT to a new directory then works at once; it falls back on MKCOL
        # only after a 409.
        create_full_put_path on;
        dav_access user:rw group:r all:r;
        # object_store sends MKCOL without the trailing slash that nginx requires of a
        # collection (it answers 409 otherwise).
        if ($request_method = MKCOL) {{
            rewrite ^(.*[^/])$ $1/ break;
        }}
    }}
}}
"#
    )
}

/// The repository's root (this file is `tests/support/servers.rs` in the root package).
/// A path in the repository, from the root package's tests or a member crate's (which
/// include this file too): the nearest ancestor of the crate that has `rel`.
fn repo_path(rel: &str) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|d| d.join(rel))
        .find(|p| p.exists())
        .unwrap_or_else(|| crate_dir.join(rel))
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// Whether a TCP connection to 127.0.0.1:`port` is accepted.
fn connects(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_secs(1),
    )
    .is_ok()
}

/// One HTTP/1.1 request to 127.0.0.1:`port` with an empty body; returns the status and the
/// body. Just enough for readiness and bucket creation, so that the support code depends on
/// no HTTP client crate.
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT)
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        request += &format!("{k}: {v}\r\n");
    }
    request += "\r\n";
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("sending {method} {path}: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("reading the answer to {method} {path}: {e}"))?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: not an HTTP answer: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Spawns `cmd` with a clean environment (PATH and the variables set on `cmd`), stdin closed and output to `log`, under
/// `setpriv --pdeathsig KILL` so that it dies if this thread does. `setpriv` execs: the pid
/// is the command's (and `scripts/s3-server` execs python in turn).
fn spawn_tied(cmd: &mut Command, log: &Path) -> Result<Child, String> {
    let out = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .arg(&program)
        .args(&args)
        .env_clear()
        .env("PATH", PATH)
        .envs(envs)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawning setpriv {program:?}: {e}"))
}

fn last_lines(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
