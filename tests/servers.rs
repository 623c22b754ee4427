//! The servers that envc's shared binary cache and state backend are tested against
//! (tests/support/servers.rs) do what envc relies on, through object_store 0.14 — the client
//! envc uses — and, for S3's conditional writes, through boto3 too. Real servers, no mocks:
//! moto's S3 server and nginx with WebDAV, on loopback.
//!
//! What these tests pin for envc's code:
//! - S3 (moto): put/get/list/delete; `PutMode::Create` is create-if-absent (the lease lock);
//!   `PutMode::Update` is compare-and-swap on the e_tag (the head ref); multipart uploads;
//!   an outage cuts uploads in flight, keeps what was stored, and a multipart upload resumes
//!   after it (through `MultipartStore`, which lets a failed part be sent again).
//! - HTTP/WebDAV (nginx): put (new directories included), get (ranges), head, delete,
//!   `list_with_delimiter`, copy-if-not-exists. NOT supported, and so not usable by envc on
//!   an `http(s)://` URL: recursive `list` (nginx's dav-ext module answers `Depth: infinity`
//!   with 403), conditional puts (`PutMode::Create`/`Update` are NotImplemented for the HTTP
//!   store: an HTTP URL can hold a binary cache, not a state backend), multipart uploads
//!   (NotImplemented: one PUT per object, of any size), and COPY into a directory that does
//!   not exist yet (nginx answers 500, which object_store does not retry with MKCOL).

use crate::support::servers;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use futures_util::TryStreamExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::http::{HttpBuilder, HttpStore};
use object_store::multipart::MultipartStore as _;
use object_store::path::Path;
use object_store::{
    ClientConfigKey, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, RetryConfig,
    UpdateVersion, WriteMultipart,
};
use servers::{S3Server, WebDavServer};

/// Few, quick retries: a test of a server that is down must not wait object_store's default
/// three minutes.
fn quick_retry() -> RetryConfig {
    RetryConfig {
        max_retries: 1,
        retry_timeout: Duration::from_secs(5),
        ..RetryConfig::default()
    }
}

/// An S3 store for `bucket` configured only by `server.env()`, the way
/// `AmazonS3Builder::from_env` reads the environment (every `AWS_*` variable whose lowercased
/// name is a config key), so these tests also prove that the variables the support code
/// gives envc are the ones object_store reads.
fn s3_store(server: &S3Server, bucket: &str) -> AmazonS3 {
    let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
    for (key, value) in server.env() {
        let config: AmazonS3ConfigKey = key
            .to_ascii_lowercase()
            .parse()
            .unwrap_or_else(|e| panic!("object_store does not read {key}: {e}"));
        builder = builder.with_config(config, value);
    }
    builder.with_retry(quick_retry()).build().unwrap()
}

fn http_store(server: &WebDavServer) -> HttpStore {
    HttpBuilder::new()
        .with_url(server.url())
        .with_config(ClientConfigKey::AllowHttp, "true")
        .with_retry(quick_retry())
        .build()
        .unwrap()
}

/// `len` bytes that differ from one offset to the next, so a misplaced part shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

async fn get_bytes(store: &impl ObjectStore, path: &str) -> Vec<u8> {
    store
        .get(&Path::from(path))
        .await
        .unwrap_or_else(|e| panic!("get {path}: {e}"))
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

async fn list_all(store: &impl ObjectStore, prefix: Option<&str>) -> Vec<String> {
    let prefix = prefix.map(Path::from);
    let mut names: Vec<String> = store
        .list(prefix.as_ref())
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    names
}

#[tokio::test]
async fn s3_put_get_list_delete() {
    let server = S3Server::start();
    server.create_bucket("envc-cache");
    let store = s3_store(&server, "envc-cache");

    for (path, body) in [
        ("quickstart/nar/aa.nar", "first"),
        ("quickstart/nar/bb.nar", "second"),
        ("quickstart/narinfo/aa.narinfo", "third"),
        ("other/x", "elsewhere"),
    ] {
        let put = store.put(&Path::from(path), body.into()).await.unwrap();
        assert!(put.e_tag.is_some(), "S3 gives every put an e_tag");
    }
    assert_eq!(get_bytes(&store, "quickstart/nar/bb.nar").await, b"second");
    let meta = store
        .head(&Path::from("quickstart/nar/aa.nar"))
        .await
        .unwrap();
    assert_eq!(meta.size, 5);
    assert_eq!(
        store
            .get_range(&Path::from("quickstart/nar/bb.nar"), 1..4)
            .await
            .unwrap()
            .as_ref(),
        b"eco"
    );

    assert_eq!(
        list_all(&store, Some("quickstart")).await,
        [
            "quickstart/nar/aa.nar",
            "quickstart/nar/bb.nar",
            "quickstart/narinfo/aa.narinfo"
        ]
    );
    let level = store
        .list_with_delimiter(Some(&Path::from("quickstart")))
        .await
        .unwrap();
    let mut dirs: Vec<String> = level
        .common_prefixes
        .iter()
        .map(|p| p.to_string())
        .collect();
    dirs.sort();
    assert_eq!(dirs, ["quickstart/nar", "quickstart/narinfo"]);

    store
        .delete(&Path::from("quickstart/nar/aa.nar"))
        .await
        .unwrap();
    let gone = store.head(&Path::from("quickstart/nar/aa.nar")).await;
    assert!(
        matches!(gone, Err(object_store::Error::NotFound { .. })),
        "{gone:?}"
    );
    // S3 deletes are idempotent: deleting what is not there succeeds.
    store
        .delete(&Path::from("quickstart/nar/aa.nar"))
        .await
        .unwrap();
}

#[tokio::test]
async fn s3_create_if_absent_refuses_the_second_writer() {
    let server = S3Server::start();
    server.create_bucket("envc-state");
    let store = s3_store(&server, "envc-state");
    let lock = Path::from("quickstart/lock");
    let create = || PutOptions::from(PutMode::Create);

    store
        .put_opts(&lock, "holder: runner-1".into(), create())
        .await
        .unwrap();
    let second = store
        .put_opts(&lock, "holder: runner-2".into(), create())
        .await;
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "a second create-if-absent must fail with AlreadyExists: {second:?}"
    );
    assert_eq!(
        get_bytes(&store, "quickstart/lock").await,
        b"holder: runner-1",
        "the refused write changed nothing"
    );

    // Released (deleted), the lock can be taken again.
    store.delete(&lock).await.unwrap();
    store
        .put_opts(&lock, "holder: runner-2".into(), create())
        .await
        .unwrap();
}

#[tokio::test]
async fn s3_compare_and_swap_on_the_e_tag() {
    let server = S3Server::start();
    server.create_bucket("envc-state");
    let store = s3_store(&server, "envc-state");
    let head = Path::from("quickstart/HEAD");

    let first = store.put(&head, "run-1".into()).await.unwrap();
    let second = store
        .put_opts(
            &head,
            "run-2".into(),
            PutMode::Update(UpdateVersion::from(first.clone())).into(),
        )
        .await
        .unwrap();
    assert_ne!(first.e_tag, second.e_tag);

    // A writer that read the ref before run-2 moved it loses.
    let stale = store
        .put_opts(
            &head,
            "run-3 from a stale read".into(),
            PutMode::Update(UpdateVersion::from(first)).into(),
        )
        .await;
    assert!(
        matches!(stale, Err(object_store::Error::Precondition { .. })),
        "an update with a stale e_tag must fail with Precondition: {stale:?}"
    );
    assert_eq!(get_bytes(&store, "quickstart/HEAD").await, b"run-2");

    // With the current e_tag, as read back by head, it goes through.
    let current = store.head(&head).await.unwrap();
    assert_eq!(current.e_tag, second.e_tag);
    store
        .put_opts(
            &head,
            "run-3".into(),
            PutMode::Update(UpdateVersion {
                e_tag: current.e_tag,
                version: None,
            })
            .into(),
        )
        .await
        .unwrap();
    assert_eq!(get_bytes(&store, "quickstart/HEAD").await, b"run-3");

    // Updating what does not exist is a failed precondition too, not a create.
    let absent = store
        .put_opts(
            &Path::from("quickstart/absent"),
            "x".into(),
            PutMode::Update(UpdateVersion {
                e_tag: second.e_tag,
                version: None,
            })
            .into(),
        )
        .await;
    assert!(
        matches!(absent, Err(object_store::Error::Precondition { .. })),
        "{absent:?}"
    );
}

#[tokio::test]
async fn s3_multipart_upload_of_12_mib() {
    let server = S3Server::start();
    server.create_bucket("envc-cache");
    let store = s3_store(&server, "envc-cache");
    let path = Path::from("quickstart/nar/disk.img");
    let data = pattern(12 << 20);

    let upload = store.put_multipart(&path).await.unwrap();
    // S3's minimum part size is 5 MiB: 12 MiB is two full parts and a short last one.
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 5 << 20);
    for chunk in data.chunks(1 << 20) {
        writer.write(chunk);
    }
    writer.finish().await.unwrap();

    assert_eq!(store.head(&path).await.unwrap().size, data.len() as u64);
    assert!(get_bytes(&store, "quickstart/nar/disk.img").await == data);
}

/// S3's conditional writes as boto3 (the AWS SDK) sends them, checked against the pinned
/// moto: the wire protocol the state backend needs, independent of object_store.
#[test]
fn s3_conditional_writes_with_boto3() {
    let server = S3Server::start();
    server.create_bucket("envc-state");
    let venv = servers::s3_venv().unwrap();
    let script = r#"
import sys, boto3, botocore.exceptions
s3 = boto3.client("s3")
def refused(**kw):
    try:
        s3.put_object(Bucket="envc-state", Key="lock", Body=b"second", **kw)
    except botocore.exceptions.ClientError as e:
        return (e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
    return None
first = s3.put_object(Bucket="envc-state", Key="lock", Body=b"first", IfNoneMatch="*")
print("create", first["ResponseMetadata"]["HTTPStatusCode"])
print("create again", refused(IfNoneMatch="*"))
print("stale if-match", refused(IfMatch='"0123456789abcdef0123456789abcdef"'))
ok = s3.put_object(Bucket="envc-state", Key="lock", Body=b"third", IfMatch=first["ETag"])
print("current if-match", ok["ResponseMetadata"]["HTTPStatusCode"])
print("body", s3.get_object(Bucket="envc-state", Key="lock")["Body"].read())
"#;
    let out = Command::new(venv.join("bin/python"))
        .args(["-c", script])
        .env_clear()
        .envs(server.env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "boto3 script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "create 200\n\
         create again ('PreconditionFailed', 412)\n\
         stale if-match ('PreconditionFailed', 412)\n\
         current if-match 200\n\
         body b'third'\n"
    );
}

/// A PUT whose body is only half sent when the server goes down: the connection is cut
/// without an answer and nothing is stored; what was stored before stays; while down,
/// connections are refused; afterwards a multipart upload started before the outage resumes.
///
/// Resuming needs `MultipartStore` (upload id and part index chosen by the caller):
/// `put_multipart`'s `MultipartUpload` numbers parts as they are sent, so a part that failed
/// leaves a hole that no retry through it can fill ("Missing part" on complete).
#[tokio::test]
async fn s3_outage_cuts_uploads_and_keeps_data() {
    let mut server = S3Server::start();
    server.create_bucket("envc-cache");
    let store = s3_store(&server, "envc-cache");
    store
        .put(&Path::from("kept"), "stored before".into())
        .await
        .unwrap();
    let multipart_path = Path::from("resumed.img");
    let id = store.create_multipart(&multipart_path).await.unwrap();
    let part = pattern(5 << 20);
    let first = store
        .put_part(&multipart_path, &id, 0, part.clone().into())
        .await
        .unwrap();

    // Half of a 1 MiB body, by hand, so that the outage is sure to come in the middle.
    let mut half_sent = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    half_sent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        half_sent,
        "PUT /envc-cache/cut HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n",
        server.port(),
        1 << 20
    )
    .unwrap();
    half_sent.write_all(&pattern(1 << 19)).unwrap();
    // moto reads the headers and starts on the body before the outage.
    std::thread::sleep(Duration::from_millis(300));

    server.stop();
    let mut answer = Vec::new();
    let read = half_sent.read_to_end(&mut answer);
    assert!(
        read.is_err() || answer.is_empty(),
        "a cut request gets no answer, got {:?}",
        String::from_utf8_lossy(&answer)
    );
    let down = store.head(&Path::from("kept")).await;
    assert!(
        matches!(down, Err(object_store::Error::Generic { .. })),
        "a request to a server that is down fails (not NotFound): {down:?}"
    );
    let failed = store
        .put_part(&multipart_path, &id, 1, part.clone().into())
        .await;
    assert!(
        failed.is_err(),
        "an upload part fails while the server is down"
    );

    server.restart();
    assert_eq!(get_bytes(&store, "kept").await, b"stored before");
    let cut = store.head(&Path::from("cut")).await;
    assert!(
        matches!(cut, Err(object_store::Error::NotFound { .. })),
        "the half-sent PUT stored nothing: {cut:?}"
    );
    // The upload id is still valid: the failed part is sent again and the upload completes.
    let second = store
        .put_part(&multipart_path, &id, 1, part.clone().into())
        .await
        .unwrap();
    store
        .complete_multipart(&multipart_path, &id, vec![first, second])
        .await
        .unwrap();
    let whole = get_bytes(&store, "resumed.img").await;
    assert_eq!(whole.len(), 2 * part.len());
    assert!(whole[..part.len()] == part[..] && whole[part.len()..] == part[..]);
}

#[tokio::test]
async fn webdav_put_get_head_list_delete() {
    let server = WebDavServer::start();
    let store = http_store(&server);

    // New directories come into being with the PUT.
    for (path, body) in [
        ("quickstart/nar/aa.nar", "first"),
        ("quickstart/nar/bb.nar", "second"),
        ("quickstart/narinfo/aa.narinfo", "third"),
    ] {
        store.put(&Path::from(path), body.into()).await.unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(server.root().join("quickstart/nar/bb.nar")).unwrap(),
        "second",
        "objects are plain files under the served root"
    );
    assert_eq!(get_bytes(&store, "quickstart/nar/aa.nar").await, b"first");
    let meta = store
        .head(&Path::from("quickstart/narinfo/aa.narinfo"))
        .await
        .unwrap();
    assert_eq!(meta.size, 5);
    assert!(meta.e_tag.is_some(), "nginx sends an ETag on GET and HEAD");
    assert_eq!(
        store
            .get_range(&Path::from("quickstart/nar/bb.nar"), 1..4)
            .await
            .unwrap()
            .as_ref(),
        b"eco",
        "ranges are served (206)"
    );

    // One level at a time (PROPFIND, Depth: 1).
    let top = store
        .list_with_delimiter(Some(&Path::from("quickstart")))
        .await
        .unwrap();
    let mut dirs: Vec<String> = top.common_prefixes.iter().map(|p| p.to_string()).collect();
    dirs.sort();
    assert_eq!(dirs, ["quickstart/nar", "quickstart/narinfo"]);
    assert!(top.objects.is_empty());
    let nar = store
        .list_with_delimiter(Some(&Path::from("quickstart/nar")))
        .await
        .unwrap();
    let mut objects: Vec<(String, u64)> = nar
        .objects
        .iter()
        .map(|m| (m.location.to_string(), m.size))
        .collect();
    objects.sort();
    assert_eq!(
        objects,
        [
            ("quickstart/nar/aa.nar".to_string(), 5),
            ("quickstart/nar/bb.nar".to_string(), 6)
        ]
    );
    // A prefix that does not exist lists as empty.
    let none = store
        .list_with_delimiter(Some(&Path::from("absent")))
        .await
        .unwrap();
    assert!(none.objects.is_empty() && none.common_prefixes.is_empty());

    store
        .delete(&Path::from("quickstart/nar/aa.nar"))
        .await
        .unwrap();
    let gone = store.head(&Path::from("quickstart/nar/aa.nar")).await;
    assert!(
        matches!(gone, Err(object_store::Error::NotFound { .. })),
        "{gone:?}"
    );
    assert!(!server.root().join("quickstart/nar/aa.nar").exists());
    // Unlike S3, deleting what is not there is NotFound: envc treats that as done.
    let again = store.delete(&Path::from("quickstart/nar/aa.nar")).await;
    assert!(
        matches!(again, Err(object_store::Error::NotFound { .. })),
        "{again:?}"
    );
}

#[tokio::test]
async fn webdav_large_put_is_one_request() {
    let server = WebDavServer::start();
    let store = http_store(&server);
    let data = pattern(12 << 20);
    store
        .put(&Path::from("quickstart/nar/disk.img"), data.clone().into())
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(server.root().join("quickstart/nar/disk.img"))
            .unwrap()
            .len(),
        data.len() as u64
    );
    assert!(get_bytes(&store, "quickstart/nar/disk.img").await == data);
    assert_eq!(
        store
            .get_range(&Path::from("quickstart/nar/disk.img"), 5_000_000..5_000_010)
            .await
            .unwrap()
            .as_ref(),
        &data[5_000_000..5_000_010]
    );
}

#[tokio::test]
async fn webdav_copy_if_not_exists() {
    let server = WebDavServer::start();
    let store = http_store(&server);
    let (from, to) = (Path::from("dir/a"), Path::from("dir/b"));
    store.put(&from, "one".into()).await.unwrap();
    store.copy_if_not_exists(&from, &to).await.unwrap();
    assert_eq!(get_bytes(&store, "dir/b").await, b"one");
    store.put(&from, "two".into()).await.unwrap();
    let again = store.copy_if_not_exists(&from, &to).await;
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "COPY with `Overwrite: F` onto an existing file: {again:?}"
    );
    assert_eq!(get_bytes(&store, "dir/b").await, b"one");
    // MKCOL (object_store's way to make a directory after a 409) works too.
    store.copy(&from, &Path::from("dir/c")).await.unwrap();
    assert_eq!(get_bytes(&store, "dir/c").await, b"two");
}

/// What the HTTP store cannot do against nginx, pinned so that a change shows: envc must
/// not rely on these for an `http(s)://` cache.
#[tokio::test]
async fn webdav_limits() {
    let server = WebDavServer::start();
    let store = http_store(&server);
    store
        .put(&Path::from("quickstart/nar/aa.nar"), "x".into())
        .await
        .unwrap();

    let recursive: Result<Vec<_>, _> = store.list(None).try_collect().await;
    assert!(
        recursive.is_err(),
        "nginx's dav-ext refuses PROPFIND Depth: infinity (403), so a recursive list fails \
         rather than returning part of the tree: {recursive:?}"
    );
    for mode in [
        PutMode::Create,
        PutMode::Update(UpdateVersion {
            e_tag: None,
            version: None,
        }),
    ] {
        let put = store
            .put_opts(&Path::from("lock"), "x".into(), mode.clone().into())
            .await;
        assert!(
            matches!(put, Err(object_store::Error::NotImplemented { .. })),
            "{mode:?}: {put:?}"
        );
    }
    let multipart = store.put_multipart(&Path::from("big")).await;
    assert!(
        matches!(multipart, Err(object_store::Error::NotImplemented { .. })),
        "multipart over HTTP"
    );
    let copy = store
        .copy(
            &Path::from("quickstart/nar/aa.nar"),
            &Path::from("new/dir/aa.nar"),
        )
        .await;
    assert!(
        copy.is_err(),
        "nginx answers COPY into a missing directory with 500: {copy:?}"
    );
}

#[tokio::test]
async fn webdav_stop_and_restart_keep_the_files() {
    let mut server = WebDavServer::start();
    let store = http_store(&server);
    store
        .put(&Path::from("a/kept"), "kept".into())
        .await
        .unwrap();
    let port = server.port();

    server.stop();
    let down = store.head(&Path::from("a/kept")).await;
    assert!(
        matches!(down, Err(object_store::Error::Generic { .. })),
        "a request to a server that is down fails (not NotFound): {down:?}"
    );

    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(get_bytes(&store, "a/kept").await, b"kept");
}
