//! The binary cache over a `file://` remote (the local file system is a real backend of
//! `object_store`; S3 and WebDAV servers are exercised end to end in the root tests).

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;

use envc_executor::cache::{entry_key, BinaryCache, CacheError, Output, Quiet, CHUNK};
use envc_executor::keys::SecretKey;
use envc_executor::remote::Remote;
use envc_executor::store::{ObjectId, Store};

struct World {
    _dir: tempfile::TempDir,
    remote_dir: std::path::PathBuf,
    laptop: Store,
    runner: Store,
    key: SecretKey,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let remote_dir = dir.path().join("remote");
    World {
        laptop: Store::open(&dir.path().join("laptop")).unwrap(),
        runner: Store::open(&dir.path().join("runner")).unwrap(),
        remote_dir,
        key: SecretKey::generate("laptop").unwrap(),
        _dir: dir,
    }
}

impl World {
    fn cache(&self, trusted: &[&SecretKey], signer: Option<&SecretKey>) -> BinaryCache {
        let remote = Remote::open(&format!("file://{}", self.remote_dir.display())).unwrap();
        let signer = signer.map(|k| SecretKey::parse(&k.to_secret_text()).unwrap());
        BinaryCache::new(remote, trusted.iter().map(|k| k.public()).collect(), signer)
    }

    /// A sparse "disk" of 3 chunks and a bit: data, a hole, data.
    fn disk(&self) -> ObjectId {
        let path = self.laptop.root().join("tmp/disk");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"boot sector").unwrap();
        f.seek(SeekFrom::Start(3 * CHUNK)).unwrap();
        f.write_all(b"end").unwrap();
        drop(f);
        self.laptop.put_file(&path).unwrap()
    }
}

fn facts(disk: &ObjectId) -> BTreeMap<String, String> {
    BTreeMap::from([("digest".to_string(), disk.hex())])
}

#[test]
fn what_one_store_pushes_another_fetches_bit_for_bit_and_sparse() {
    let w = world();
    let disk = w.disk();
    let small = w.laptop.put(b"kernel").unwrap();
    let cache = w.cache(&[&w.key], Some(&w.key));
    let remote = cache.remote().clone();
    let sent = remote
        .block(cache.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk, small]),
            false,
            &Quiet,
        ))
        .unwrap();
    assert_eq!(sent.objects, 2);
    // The zero chunks are sent once: two distinct data chunks, one zero chunk, the kernel.
    assert_eq!(sent.bytes, 2 * CHUNK + 3 + 6);

    let entry = remote
        .block(cache.lookup(&"h1".into()))
        .unwrap()
        .expect("an entry");
    assert_eq!(entry.body.facts, facts(&disk));
    let got = remote
        .block(cache.fetch(&entry, &w.runner, &Quiet))
        .unwrap();
    assert_eq!(got.objects, 2);
    assert_eq!(
        std::fs::read(w.runner.object_file(&disk)).unwrap(),
        std::fs::read(w.laptop.object_file(&disk)).unwrap()
    );
    assert_eq!(w.runner.get(&small).unwrap(), b"kernel");
    // Holes where the zero chunks are: far fewer blocks than the apparent size.
    let meta = std::fs::metadata(w.runner.object_file(&disk)).unwrap();
    assert!(
        meta.blocks() * 512 < 2 * CHUNK + CHUNK / 2,
        "{} blocks",
        meta.blocks()
    );
    // A second push sends nothing new; a second fetch fetches nothing.
    let again = remote
        .block(cache.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk, small]),
            false,
            &Quiet,
        ))
        .unwrap();
    assert_eq!(again.bytes, 0);
    assert_eq!(
        remote
            .block(cache.fetch(&entry, &w.runner, &Quiet))
            .unwrap()
            .objects,
        0
    );
    assert!(remote
        .block(cache.lookup(&"other".into()))
        .unwrap()
        .is_none());
    let verified = remote
        .block(cache.verify_entry(&entry_key(&"h1".into())))
        .unwrap();
    assert_eq!(verified, entry);
}

#[test]
fn untrusted_unsigned_and_altered_entries_are_refused_by_name() {
    let w = world();
    let disk = w.disk();
    let stranger = SecretKey::generate("stranger").unwrap();
    let pusher = w.cache(&[], Some(&stranger));
    let remote = pusher.remote().clone();
    remote
        .block(pusher.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk]),
            false,
            &Quiet,
        ))
        .unwrap();
    let runner = w.cache(&[&w.key], None);
    let e = remote.block(runner.lookup(&"h1".into())).unwrap_err();
    assert!(
        matches!(&e, CacheError::Untrusted { signer: Some(k), .. } if k == "stranger"),
        "{e}"
    );
    assert!(
        e.to_string().contains("add its public key (`stranger:…`"),
        "{e}"
    );

    // Unsigned: the signature fields removed by hand.
    let entry_path = w.remote_dir.join(entry_key(&"h1".into()));
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&entry_path).unwrap()).unwrap();
    json["signer"] = serde_json::Value::Null;
    json["signature"] = serde_json::Value::Null;
    std::fs::write(&entry_path, serde_json::to_vec(&json).unwrap()).unwrap();
    let e = remote.block(runner.lookup(&"h1".into())).unwrap_err();
    assert!(
        matches!(e, CacheError::Untrusted { signer: None, .. }),
        "{e}"
    );

    // Signed by the trusted key's name, then altered: the facts point elsewhere.
    let trusted = w.cache(&[&w.key], Some(&w.key));
    remote
        .block(trusted.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk]),
            false,
            &Quiet,
        ))
        .unwrap();
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&entry_path).unwrap()).unwrap();
    json["facts"]["digest"] = serde_json::json!(ObjectId::of(b"evil").hex());
    std::fs::write(&entry_path, serde_json::to_vec(&json).unwrap()).unwrap();
    let e = remote.block(runner.lookup(&"h1".into())).unwrap_err();
    assert!(matches!(e, CacheError::BadSignature { .. }), "{e}");
}

#[test]
fn a_tampered_chunk_is_caught_and_nothing_enters_the_store() {
    let w = world();
    let disk = w.disk();
    let cache = w.cache(&[&w.key], Some(&w.key));
    let remote = cache.remote().clone();
    remote
        .block(cache.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk]),
            false,
            &Quiet,
        ))
        .unwrap();
    let entry = remote.block(cache.lookup(&"h1".into())).unwrap().unwrap();
    let first = entry.body.objects[0].chunks[0];
    let chunk = w.remote_dir.join(format!("chunks/{}", first.hex()));
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&chunk, bytes).unwrap();
    let e = remote
        .block(cache.fetch(&entry, &w.runner, &Quiet))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("chunk {first} does not hash to its name")),
        "{e}"
    );
    assert!(!w.runner.contains(&disk));
    let leftovers: Vec<_> = std::fs::read_dir(w.runner.root().join("tmp"))
        .unwrap()
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let e = remote
        .block(cache.verify_entry(&entry_key(&"h1".into())))
        .unwrap_err();
    assert!(e.to_string().contains("does not hash to its name"), "{e}");
    // A plain push only sees that the chunk is there (same size); a repairing push (what
    // `envc cache push` does) reads it back and replaces it.
    let output = out("h1", "image:base", &facts(&disk), &[disk]);
    remote
        .block(cache.push(&w.laptop, &output, false, &Quiet))
        .unwrap();
    assert!(remote
        .block(cache.fetch(&entry, &w.runner, &Quiet))
        .is_err());
    let mended = remote
        .block(cache.push(&w.laptop, &output, true, &Quiet))
        .unwrap();
    assert_eq!(mended.bytes, CHUNK);
    remote
        .block(cache.fetch(&entry, &w.runner, &Quiet))
        .unwrap();
    assert!(w.runner.contains(&disk));
}

#[test]
fn pushing_needs_a_signing_key() {
    let w = world();
    let disk = w.disk();
    let cache = w.cache(&[&w.key], None);
    let e = cache
        .remote()
        .block(cache.push(
            &w.laptop,
            &out("h1", "image:base", &facts(&disk), &[disk]),
            false,
            &Quiet,
        ))
        .unwrap_err();
    assert!(matches!(e, CacheError::NoSigningKey));
    assert!(e.to_string().contains("envc key generate"), "{e}");
}

fn out(hash: &str, node: &str, facts: &BTreeMap<String, String>, objects: &[ObjectId]) -> Output {
    Output {
        node: node.to_string(),
        resolved_hash: hash.into(),
        facts: facts.clone(),
        objects: objects.to_vec(),
    }
}

#[path = "../../lockfiles/tests/support/mod.rs"]
mod archive;

/// A pinned `.deb` served by a mirror: its source as a lockfile gives it.
fn served_deb(a: &archive::TinyArchive) -> envc_executor::debs::DebSource {
    a.write(
        &[archive::pkg("hello", "2.10-3", "")],
        "Sat, 10 Jan 2026 10:14:31 UTC",
        false,
    );
    let filename = "pool/main/h/hello/hello_2.10-3_amd64.deb";
    let bytes = std::fs::read(a.root().join(filename)).unwrap();
    envc_executor::debs::DebSource {
        pin: envc_lockfiles::PackagePin {
            name: "hello".into(),
            archive: "debian/bookworm".into(),
            version: "2.10-3".into(),
            architecture: "amd64".into(),
            filename: filename.into(),
            size: bytes.len() as u64,
            sha256: envc_lockfiles::fetch::sha256_hex(&bytes),
            closure: None,
        },
        mirror: a.mirror.clone(),
    }
}

#[test]
fn a_pinned_deb_goes_through_the_cache_to_a_machine_the_mirror_no_longer_serves() {
    let w = world();
    let mirror = archive::TinyArchive::new("bookworm");
    let deb = served_deb(&mirror);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let using = |store: &Store, push: bool| {
        store
            .clone()
            .with_deb_cache(Some(envc_executor::cache::CacheUse::new(
                w.cache(&[], None),
                push,
            )))
    };
    // The laptop fetches it from the mirror, keeps it, and pushes it (no key needed: the
    // pin is what it is checked against).
    let laptop = using(&w.laptop, true);
    let path = rt
        .block_on(envc_executor::debs::path_of(&laptop, &deb, &deb.pin.key()))
        .unwrap();
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(envc_lockfiles::fetch::sha256_hex(&bytes), deb.pin.sha256);
    let cached = w.remote_dir.join(format!("debs/{}.deb", deb.pin.sha256));
    assert_eq!(std::fs::read(&cached).unwrap(), bytes);

    // The archive moves on: the mirror no longer serves the pinned file. A runner with an
    // empty store gets it from the cache, checked.
    std::fs::remove_file(mirror.root().join(&deb.pin.filename)).unwrap();
    let runner = using(&w.runner, false);
    let got = rt
        .block_on(envc_executor::debs::path_of(&runner, &deb, &deb.pin.key()))
        .unwrap();
    assert_eq!(std::fs::read(got).unwrap(), bytes);
    assert_eq!(
        std::fs::read(runner.deb_path(&deb.pin.sha256)).unwrap(),
        bytes
    );

    // Other bytes under the name in the cache are passed over, never installed: with the
    // mirror gone too, the error names the pin and says where a snapshot of the archive is.
    std::fs::write(&cached, b"not the pinned bytes").unwrap();
    let fresh = Store::open(&w.remote_dir.parent().unwrap().join("fresh")).unwrap();
    let err = rt
        .block_on(envc_executor::debs::path_of(
            &using(&fresh, false),
            &deb,
            &deb.pin.key(),
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("(pin package:hello)")
            && err.contains("no longer serves")
            && err.contains("snapshot.debian.org"),
        "{err}"
    );
    assert!(!fresh.deb_path(&deb.pin.sha256).exists());

    // A vendor's archive has no snapshot service: the hint says what does keep its .debs.
    let mut vendor = deb.clone();
    vendor.pin.archive = "acme".into();
    let err = rt
        .block_on(envc_executor::debs::path_of(
            &fresh,
            &vendor,
            &vendor.pin.key(),
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the vendor's archive dropped this version") && !err.contains("snapshot"),
        "{err}"
    );
}
