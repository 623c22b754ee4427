//! The binary cache: the outputs of build derivations (images: their disk, kernel, rootfs
//! and package list), looked up by the derivation's resolved hash before building, fetched
//! when present, pushed after a build — Nix's substituters, Bazel's remote cache.
//!
//! Layout under the cache's URL:
//! - `entries/<blake3 of the resolved hash>`: a signed [`CacheEntry`] naming the facts of
//!   the output and its objects;
//! - `chunks/<blake3>`: the objects' bytes, in chunks of [`CHUNK`] bytes;
//! - `debs/<sha256>.deb`: pinned `.deb`s, whole. No entry and no signature: the lockfile
//!   names each by its sha256, and a `.deb` is taken only when it hashes to that (Nix's
//!   fixed-output paths). A CI run whose store is empty gets them here, and a `.deb` the
//!   mirror no longer serves stays fetchable for as long as the cache keeps it.
//!
//! Why chunks: every backend can store an object of 8 MiB in one atomic PUT (plain
//! HTTP/WebDAV has no multipart upload), memory stays bounded whatever the image's size, a
//! server that dies mid-upload leaves whole chunks or none, and a sparse disk image (mostly
//! zeros) stores its zero chunk once and is written back sparse. The entry is written last,
//! so it never names a chunk that is not there.
//!
//! Trust: an entry is used only when signed by a key in `trusted-public-keys`; every chunk
//! is checked against its blake3 as it arrives, and every object against its id before it
//! enters the local store (by rename from the store's `tmp/`, so a partial download never
//! does).

use envc_ids::ResolvedHash;
use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::keys::{PublicKey, SecretKey};
use crate::record::Facts;
use crate::remote::{Remote, RemoteError};
use crate::store::{ObjectId, Store, StoreError};

/// The size of a chunk (the last chunk of an object may be shorter).
pub const CHUNK: u64 = 8 << 20;

/// Requests in flight at once: with [`CHUNK`], what bounds memory (about 4 × 8 MiB).
const PARALLEL: usize = 4;

/// The version of the entry format; part of what is signed.
const FORMAT: u32 = 1;

/// What a cache entry says: signed as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryBody {
    pub format: u32,
    /// The build derivation's resolved hash: what a build looks the entry up by.
    pub resolved_hash: ResolvedHash,
    /// `kind:name` of the node that built it (for people; the hash is the key).
    pub node: String,
    /// The facts of the output, as a record of it holds them.
    pub facts: Facts,
    pub chunk_size: u64,
    pub objects: Vec<CachedObject>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedObject {
    pub id: ObjectId,
    pub size: u64,
    /// Its bytes, chunk by chunk.
    pub chunks: Vec<ObjectId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    #[serde(flatten)]
    pub body: EntryBody,
    /// The name of the key that signed it (`NAME` of `NAME:BASE64`).
    pub signer: Option<String>,
    /// base64 ed25519 signature of [`signed_bytes`] of the body.
    pub signature: Option<String>,
}

/// What a signature covers: a domain tag, then the body's JSON (struct fields in
/// declaration order, facts a sorted map: the same body gives the same bytes).
fn signed_bytes(body: &EntryBody) -> Vec<u8> {
    let mut bytes = b"envc-cache-entry\0".to_vec();
    bytes.extend(serde_json::to_vec(body).unwrap_or_default());
    bytes
}

/// Where the cache keeps the pinned `.deb` of a sha256.
pub fn deb_key(sha256: &str) -> String {
    format!("debs/{sha256}.deb")
}

pub use crate::store::entry_key;

fn chunk_key(id: &ObjectId) -> String {
    format!("chunks/{}", id.hex())
}

/// The id of a chunk of [`CHUNK`] zero bytes: not downloaded, but skipped over, which
/// keeps a sparse disk image sparse.
fn zero_chunk() -> ObjectId {
    let mut h = blake3::Hasher::new();
    h.update(&vec![0u8; CHUNK as usize]);
    ObjectId(*h.finalize().as_bytes())
}

#[derive(Debug)]
pub enum CacheError {
    Remote(RemoteError),
    /// No signature, or one by a key not in `trusted-public-keys`.
    Untrusted {
        url: String,
        node: String,
        signer: Option<String>,
    },
    /// Signed by a trusted key's name, but the signature does not verify: the entry was
    /// changed after signing, or signed by another key of the same name.
    BadSignature {
        url: String,
        node: String,
        signer: String,
    },
    /// An entry that was listed is gone when it is read (someone removed it meanwhile).
    Vanished {
        url: String,
        key: String,
    },
    /// Bytes that do not hash to their name.
    Corrupt {
        url: String,
        what: String,
    },
    Malformed {
        url: String,
        key: String,
        error: String,
    },
    Store(StoreError),
    /// Pushing needs the secret key.
    NoSigningKey,
    Io(String),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Remote(e) => write!(f, "{e}"),
            CacheError::Untrusted { url, node, signer: None } => write!(
                f,
                "{url}: the entry of {node} is not signed, so it is not used\n  \
                 hint: push it again with a signing key (ENVC_SIGNING_KEY or --signing-key)"
            ),
            CacheError::Untrusted { url, node, signer: Some(k) } => write!(
                f,
                "{url}: the entry of {node} is signed by `{k}`, a key this project does not trust, so it is not used\n  \
                 hint: if `{k}` is yours, add its public key (`{k}:…`, from {k}.public) to `trusted-public-keys` under [cache] in envc.toml"
            ),
            CacheError::BadSignature { url, node, signer } => write!(
                f,
                "{url}: the signature of {node}'s entry by `{signer}` does not verify: the entry was changed after it was signed, so it is not used\n  \
                 hint: push it again from a trusted machine (`envc cache push FILE`)"
            ),
            CacheError::Vanished { url, key } => write!(
                f,
                "{url}: {key} vanished while it was checked\n  hint: the damaged entry is skipped; `envc cache push FILE` from a machine that built it uploads it again"
            ),
            CacheError::Corrupt { url, what } => write!(
                f,
                "{url}: {what}\n  hint: the damaged entry is skipped; `envc cache push FILE` from a machine that built it uploads it again"
            ),
            CacheError::Malformed { url, key, error } => {
                write!(f, "{url}: {key} is not a cache entry: {error}")
            }
            CacheError::Store(e) => write!(f, "{e}"),
            CacheError::NoSigningKey => write!(
                f,
                "pushing to the cache needs a signing key\n  \
                 hint: make one with `envc key generate NAME`, then set ENVC_SIGNING_KEY=NAME.secret (or `signing-key` under [cache] in envc.toml)"
            ),
            CacheError::Io(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for CacheError {}

impl From<RemoteError> for CacheError {
    fn from(e: RemoteError) -> CacheError {
        CacheError::Remote(e)
    }
}

impl From<StoreError> for CacheError {
    fn from(e: StoreError) -> CacheError {
        CacheError::Store(e)
    }
}

/// A built output, as the cache takes it: the node that built it, its resolved hash, its
/// facts and the objects they name.
#[derive(Clone, Debug)]
pub struct Output {
    pub node: String,
    pub resolved_hash: ResolvedHash,
    pub facts: Facts,
    pub objects: Vec<ObjectId>,
}

/// Told as bytes move, for progress bars.
pub trait Progress: Send + Sync {
    fn object(&self, _id: &ObjectId, _size: u64) {}
    fn bytes(&self, _n: u64) {}
    /// The transfer ended: what it moved, or `None` when it moved nothing (no entry to
    /// fetch) or failed (its caller says why).
    fn finished(&self, _moved: Option<&Transfer>) {}
}

/// No progress shown.
pub struct Quiet;
impl Progress for Quiet {}

/// Which way a transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Fetch,
    Push,
}

impl Direction {
    /// How a person reads it when done: `fetched`, `pushed`.
    pub fn done(self) -> &'static str {
        match self {
            Direction::Fetch => "fetched",
            Direction::Push => "pushed",
        }
    }
}

/// Where a run tells the transfers its nodes make to and from the binary cache. The
/// engine's reporter hands one down to the node kinds (an image's fetch or push), which sit
/// below the engine and so cannot see the reporter itself.
pub trait Transfers: Send + Sync {
    /// `node`'s outputs start to move `direction`, to or from `url`: what comes back is
    /// told as they go.
    fn begin(&self, node: &str, direction: Direction, url: &str) -> Box<dyn Progress>;
}

impl Transfers for Quiet {
    fn begin(&self, _node: &str, _direction: Direction, _url: &str) -> Box<dyn Progress> {
        Box::new(Quiet)
    }
}

/// What a push or fetch moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    pub objects: usize,
    /// Bytes sent or received (chunks the other side had are not counted).
    pub bytes: u64,
}

#[derive(Clone)]
pub struct BinaryCache {
    remote: Remote,
    trusted: Arc<Vec<PublicKey>>,
    signer: Option<Arc<SecretKey>>,
}

impl fmt::Debug for BinaryCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BinaryCache({})", self.remote.url())
    }
}

impl BinaryCache {
    pub fn new(remote: Remote, trusted: Vec<PublicKey>, signer: Option<SecretKey>) -> Self {
        BinaryCache {
            remote,
            trusted: Arc::new(trusted),
            signer: signer.map(Arc::new),
        }
    }

    pub fn url(&self) -> &str {
        self.remote.url()
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    pub fn can_push(&self) -> bool {
        self.signer.is_some()
    }

    /// Checks an entry's signature against the trusted keys.
    pub fn check_trust(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        let node = entry.body.node.clone();
        let url = self.url().to_string();
        let (Some(signer), Some(signature)) = (&entry.signer, &entry.signature) else {
            return Err(CacheError::Untrusted {
                url,
                node,
                signer: None,
            });
        };
        let keys: Vec<&PublicKey> = self.trusted.iter().filter(|k| &k.name == signer).collect();
        if keys.is_empty() {
            return Err(CacheError::Untrusted {
                url,
                node,
                signer: Some(signer.clone()),
            });
        }
        let message = signed_bytes(&entry.body);
        if keys.iter().any(|k| k.verifies(&message, signature)) {
            Ok(())
        } else {
            Err(CacheError::BadSignature {
                url,
                node,
                signer: signer.clone(),
            })
        }
    }

    /// The entry of a resolved hash, if the cache has one; checked for trust and for
    /// matching the hash it is stored under (`parse_entry`).
    pub async fn lookup(
        &self,
        resolved_hash: &ResolvedHash,
    ) -> Result<Option<CacheEntry>, CacheError> {
        let key = entry_key(resolved_hash);
        let Some(bytes) = self.get(&key).await? else {
            return Ok(None);
        };
        self.parse_entry(&key, &bytes).map(Some)
    }

    fn parse_entry(&self, key: &str, bytes: &[u8]) -> Result<CacheEntry, CacheError> {
        let entry: CacheEntry =
            serde_json::from_slice(bytes).map_err(|e| CacheError::Malformed {
                url: self.url().into(),
                key: key.into(),
                error: e.to_string(),
            })?;
        if entry.body.format != FORMAT || entry.body.chunk_size != CHUNK {
            return Err(CacheError::Malformed {
                url: self.url().into(),
                key: key.into(),
                error: format!(
                    "format {} with chunks of {} bytes; this envc reads format {FORMAT} with chunks of {CHUNK}",
                    entry.body.format, entry.body.chunk_size
                ),
            });
        }
        self.check_trust(&entry)?;
        // Signed, but for another derivation: never taken for this one.
        if entry_key(&entry.body.resolved_hash) != key {
            return Err(CacheError::Corrupt {
                url: self.url().into(),
                what: format!("{key} holds the entry of another derivation"),
            });
        }
        Ok(entry)
    }

    /// The pinned `.deb` of this sha256 and size, if the cache has one of that size (other
    /// bytes under the name are not read). The caller checks the bytes against the pin.
    pub async fn get_deb(&self, sha256: &str, size: u64) -> Result<Option<Bytes>, CacheError> {
        let key = deb_key(sha256);
        match self.remote.store().head(&self.remote.key(&key)).await {
            Ok(meta) if meta.size == size => self.get(&key).await,
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.remote.error(format!("reading {key}"), e).into()),
        }
    }

    /// Keeps a pinned `.deb` (already checked against its pin) for other machines.
    pub async fn put_deb(&self, sha256: &str, bytes: Bytes) -> Result<(), CacheError> {
        let key = deb_key(sha256);
        self.remote
            .store()
            .put(&self.remote.key(&key), PutPayload::from(bytes))
            .await
            .map_err(|e| self.remote.error(format!("writing {key}"), e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, CacheError> {
        let store = self.remote.store();
        match store.get(&self.remote.key(key)).await {
            Ok(r) => match r.bytes().await {
                Ok(b) => Ok(Some(b)),
                Err(e) => Err(self.remote.error(format!("reading {key}"), e).into()),
            },
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.remote.error(format!("reading {key}"), e).into()),
        }
    }

    /// Every entry key in the cache. Listed one level deep: WebDAV servers refuse
    /// `Depth: infinity`, and entries are flat.
    pub async fn entry_keys(&self) -> Result<Vec<String>, CacheError> {
        let prefix = self.remote.key("entries");
        let listed = match self.remote.store().list_with_delimiter(Some(&prefix)).await {
            Ok(l) => l.objects,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(self.remote.error("listing entries", e).into()),
        };
        let mut keys: Vec<String> = listed
            .into_iter()
            .filter_map(|m| m.location.filename().map(|f| format!("entries/{f}")))
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// The build output of `resolved_hash` from the cache into the local store, if the
    /// cache has it: looked up, checked, fetched, and remembered as the store's substitute.
    /// `named` gives the objects the facts name, which must all have come.
    pub async fn pull(
        &self,
        store: &Store,
        resolved_hash: &ResolvedHash,
        named: impl Fn(&Facts) -> Vec<ObjectId>,
        progress: &dyn Progress,
    ) -> Result<Option<(CacheEntry, Transfer)>, CacheError> {
        let Some(entry) = self.lookup(resolved_hash).await? else {
            return Ok(None);
        };
        let moved = self.fetch(&entry, store, progress).await?;
        if let Some(missing) = named(&entry.body.facts)
            .into_iter()
            .find(|id| !store.contains(id))
        {
            return Err(CacheError::Corrupt {
                url: self.url().into(),
                what: format!(
                    "the entry of {} names object {missing} in its facts but does not carry it",
                    entry.body.node
                ),
            });
        }
        store.put_substitute(resolved_hash, &entry.body.facts)?;
        Ok(Some((entry, moved)))
    }

    /// [`pull`](Self::pull) on the cache's own runtime, told to `transfers` as `node`'s
    /// fetch (a build's or a verify's progress).
    pub async fn pull_told(
        &self,
        store: &Store,
        resolved_hash: &ResolvedHash,
        named: impl Fn(&Facts) -> Vec<ObjectId> + Send + 'static,
        node: &str,
        transfers: &dyn Transfers,
    ) -> Result<Option<(CacheEntry, Transfer)>, CacheError> {
        let progress = transfers.begin(node, Direction::Fetch, self.url());
        let (c, s, hash) = (self.clone(), store.clone(), resolved_hash.clone());
        let pull = async move {
            let pulled = c.pull(&s, &hash, named, &*progress).await;
            progress.finished(pulled.as_ref().ok().and_then(|p| p.as_ref().map(|p| &p.1)));
            pulled
        };
        self.remote.run(pull).await
    }

    /// [`push`](Self::push) on the cache's own runtime, told to `transfers` as the output's
    /// node's push.
    pub async fn push_told(
        &self,
        store: &Store,
        output: Output,
        repair: bool,
        transfers: &dyn Transfers,
    ) -> Result<Transfer, CacheError> {
        let progress = transfers.begin(&output.node, Direction::Push, self.url());
        let (c, s) = (self.clone(), store.clone());
        let push = async move {
            let pushed = c.push(&s, &output, repair, &*progress).await;
            progress.finished(pushed.as_ref().ok());
            pushed
        };
        self.remote.run(push).await
    }

    /// Brings an entry's objects into the local store (those it lacks), each verified.
    pub async fn fetch(
        &self,
        entry: &CacheEntry,
        store: &Store,
        progress: &dyn Progress,
    ) -> Result<Transfer, CacheError> {
        let mut moved = Transfer::default();
        for object in &entry.body.objects {
            if store.contains(&object.id) {
                continue;
            }
            progress.object(&object.id, object.size);
            let (tmp, bytes) = self.download(object, store, progress).await?;
            store.put_verified_file(tmp.path(), &object.id)?;
            moved.objects += 1;
            moved.bytes += bytes;
        }
        Ok(moved)
    }

    /// Downloads one object into a file in the store's `tmp/`, checking every chunk and
    /// then the whole; returns the file and the bytes received.
    async fn download(
        &self,
        object: &CachedObject,
        store: &Store,
        progress: &dyn Progress,
    ) -> Result<(tempfile::NamedTempFile, u64), CacheError> {
        let io =
            |e: std::io::Error| CacheError::Io(format!("writing a download to the store: {e}"));
        self.check_chunk_count(object)?;
        let tmp = tempfile::NamedTempFile::new_in(store.root().join("tmp")).map_err(io)?;
        // Holes where nothing is written: zero chunks stay sparse.
        tmp.as_file().set_len(object.size).map_err(io)?;
        let zero = zero_chunk();
        let file = tmp.as_file();
        let mut received = 0;
        // Hashed as it arrives, in order: reading the file back (or mapping it) would put a
        // whole disk image into this process's memory.
        let mut whole = blake3::Hasher::new();
        let zeros = vec![0u8; CHUNK as usize];
        let size = object.size;
        let mut chunks = futures::stream::iter(object.chunks.clone().into_iter().enumerate())
            .map(|(i, id)| async move {
                let offset = i as u64 * CHUNK;
                let len = CHUNK.min(size - offset);
                if id == zero && len == CHUNK {
                    return Ok((offset, None));
                }
                self.chunk(&id, len).await.map(|b| (offset, Some(b)))
            })
            .buffered(PARALLEL);
        while let Some(next) = chunks.next().await {
            let (offset, bytes) = next?;
            if let Some(bytes) = bytes {
                file.write_all_at(&bytes, offset).map_err(io)?;
                whole.update(&bytes);
                received += bytes.len() as u64;
                progress.bytes(bytes.len() as u64);
            } else {
                whole.update(&zeros);
                progress.bytes(CHUNK);
            }
        }
        file.sync_all().map_err(io)?;
        if ObjectId(*whole.finalize().as_bytes()) != object.id {
            return Err(CacheError::Corrupt {
                url: self.url().into(),
                what: format!(
                    "object {} does not hash to its name once assembled",
                    object.id
                ),
            });
        }
        Ok((tmp, received))
    }

    /// An object's size and its chunk list must agree before any chunk is read.
    fn check_chunk_count(&self, object: &CachedObject) -> Result<(), CacheError> {
        let expected = object.size.div_ceil(CHUNK);
        if object.chunks.len() as u64 == expected {
            return Ok(());
        }
        Err(CacheError::Corrupt {
            url: self.url().into(),
            what: format!(
                "object {} of {} bytes lists {} chunks, not {expected}",
                object.id,
                object.size,
                object.chunks.len()
            ),
        })
    }

    /// One chunk, checked against its id and length.
    async fn chunk(&self, id: &ObjectId, len: u64) -> Result<Bytes, CacheError> {
        let key = chunk_key(id);
        let doing = || format!("reading {key}");
        let corrupt = || CacheError::Corrupt {
            url: self.url().into(),
            what: format!("chunk {id} does not hash to its name"),
        };
        let got = match self.remote.store().get(&self.remote.key(&key)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(CacheError::Corrupt {
                    url: self.url().into(),
                    what: format!("chunk {id} is missing, though an entry names it"),
                })
            }
            Err(e) => return Err(self.remote.error(doing(), e).into()),
        };
        // Before reading the body: a server that sends more than a chunk is not believed.
        if got.meta.size != len {
            return Err(corrupt());
        }
        let bytes = got
            .bytes()
            .await
            .map_err(|e| self.remote.error(doing(), e))?;
        if bytes.len() as u64 != len || ObjectId::of(&bytes) != *id {
            return Err(corrupt());
        }
        Ok(bytes)
    }

    /// Uploads the objects of a build output (the chunks the cache lacks), then its signed
    /// entry. Returns what was sent.
    pub async fn push(
        &self,
        store: &Store,
        output: &Output,
        repair: bool,
        progress: &dyn Progress,
    ) -> Result<Transfer, CacheError> {
        let Output {
            node,
            resolved_hash,
            facts,
            objects,
        } = output;
        let signer = self.signer.as_ref().ok_or(CacheError::NoSigningKey)?;
        let mut moved = Transfer::default();
        let mut cached = Vec::new();
        let mut sent: BTreeSet<ObjectId> = BTreeSet::new();
        for id in objects {
            let path = store.object_file(id);
            let size = std::fs::metadata(&path)
                .map_err(|e| CacheError::Io(format!("{}: {e}", path.display())))?
                .len();
            progress.object(id, size);
            let (chunks, bytes) = self
                .upload(&path, id, size, &mut sent, repair, progress)
                .await?;
            moved.objects += 1;
            moved.bytes += bytes;
            cached.push(CachedObject {
                id: *id,
                size,
                chunks,
            });
        }
        let body = EntryBody {
            format: FORMAT,
            resolved_hash: resolved_hash.clone(),
            node: node.to_string(),
            facts: facts.clone(),
            chunk_size: CHUNK,
            objects: cached,
        };
        let entry = CacheEntry {
            signature: Some(signer.sign(&signed_bytes(&body))),
            signer: Some(signer.name.clone()),
            body,
        };
        let key = entry_key(resolved_hash);
        let json = serde_json::to_vec_pretty(&entry).unwrap_or_default();
        self.remote
            .store()
            .put(&self.remote.key(&key), PutPayload::from(json))
            .await
            .map_err(|e| self.remote.error(format!("writing {key}"), e))?;
        Ok(moved)
    }

    /// Uploads the chunks of the object at `path` the cache does not have (checking the
    /// file against its id on the way); returns its chunk ids and the bytes sent.
    async fn upload(
        &self,
        path: &std::path::Path,
        id: &ObjectId,
        size: u64,
        sent: &mut BTreeSet<ObjectId>,
        repair: bool,
        progress: &dyn Progress,
    ) -> Result<(Vec<ObjectId>, u64), CacheError> {
        let io = |e: std::io::Error| CacheError::Io(format!("{}: {e}", path.display()));
        let mut file = File::open(path).map_err(io)?;
        let mut whole = blake3::Hasher::new();
        let mut chunks = Vec::new();
        let mut bytes_sent = 0;
        let mut offset = 0;
        // Read ahead one chunk per request in flight: memory is bounded by PARALLEL chunks.
        let mut pending = futures::stream::FuturesOrdered::new();
        loop {
            let len = CHUNK.min(size - offset) as usize;
            if len > 0 {
                let mut buf = vec![0u8; len];
                file.read_exact(&mut buf).map_err(io)?;
                whole.update(&buf);
                let chunk_id = ObjectId::of(&buf);
                chunks.push(chunk_id);
                offset += len as u64;
                let first = sent.insert(chunk_id);
                pending.push_back(async move {
                    if !first {
                        return Ok::<u64, CacheError>(0);
                    }
                    self.put_chunk(&chunk_id, Bytes::from(buf), repair).await
                });
                progress.bytes(len as u64);
            }
            if pending.len() >= PARALLEL || (len == 0 && !pending.is_empty()) {
                if let Some(r) = pending.next().await {
                    bytes_sent += r?;
                }
            }
            if len == 0 && pending.is_empty() {
                break;
            }
        }
        if ObjectId(*whole.finalize().as_bytes()) != *id {
            return Err(CacheError::Store(StoreError::Corrupt {
                id: *id,
                path: PathBuf::from(path),
            }));
        }
        Ok((chunks, bytes_sent))
    }

    /// Puts one chunk unless the cache has it already; returns the bytes sent. With
    /// `repair`, a chunk that is there is read back and replaced unless it hashes right:
    /// what mends a cache whose chunk was damaged (a HEAD sees only its size).
    async fn put_chunk(
        &self,
        id: &ObjectId,
        bytes: Bytes,
        repair: bool,
    ) -> Result<u64, CacheError> {
        let key = self.remote.key(&chunk_key(id));
        let store = self.remote.store();
        let present = if repair {
            match self.chunk(id, bytes.len() as u64).await {
                Ok(_) => true,
                Err(CacheError::Corrupt { .. }) => false,
                Err(e) => return Err(e),
            }
        } else {
            match store.head(&key).await {
                Ok(meta) => meta.size == bytes.len() as u64,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => return Err(self.remote.error(format!("checking chunk {id}"), e).into()),
            }
        };
        if present {
            return Ok(0);
        }
        let n = bytes.len() as u64;
        store
            .put(&key, PutPayload::from_bytes(bytes))
            .await
            .map_err(|e| self.remote.error(format!("writing chunk {id}"), e))?;
        Ok(n)
    }

    /// Checks one entry deeply: its signature, then every chunk of every object against its
    /// hash, and every object against its id (streamed: nothing is kept).
    pub async fn verify_entry(&self, key: &str) -> Result<CacheEntry, CacheError> {
        let Some(bytes) = self.get(key).await? else {
            return Err(CacheError::Vanished {
                url: self.url().into(),
                key: key.to_string(),
            });
        };
        let entry = self.parse_entry(key, &bytes)?;
        for object in &entry.body.objects {
            let mut whole = blake3::Hasher::new();
            self.check_chunk_count(object)?;
            let size = object.size;
            let mut chunks = futures::stream::iter(object.chunks.clone().into_iter().enumerate())
                .map(|(i, id)| async move {
                    let len = CHUNK.min(size - i as u64 * CHUNK);
                    self.chunk(&id, len).await
                })
                .buffered(PARALLEL);
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| match e {
                    CacheError::Corrupt { url, what } => CacheError::Corrupt {
                        url,
                        what: format!("{what} (object {} of {})", object.id, entry.body.node),
                    },
                    e => e,
                })?;
                whole.update(&chunk);
            }
            if ObjectId(*whole.finalize().as_bytes()) != object.id {
                return Err(CacheError::Corrupt {
                    url: self.url().into(),
                    what: format!(
                        "object {} of {} does not hash to its name",
                        object.id, entry.body.node
                    ),
                });
            }
        }
        Ok(entry)
    }
}

/// The binary cache as a build uses it: looked up before building, pushed to after, each
/// transfer told to `transfers` (the run's progress).
#[derive(Clone)]
pub struct CacheUse {
    pub cache: BinaryCache,
    pub push: bool,
    pub transfers: Arc<dyn Transfers>,
}

impl CacheUse {
    /// Using `cache`, its transfers told to nobody.
    pub fn new(cache: BinaryCache, push: bool) -> CacheUse {
        CacheUse {
            cache,
            push,
            transfers: Arc::new(Quiet),
        }
    }
}

impl std::fmt::Debug for CacheUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheUse")
            .field("cache", &self.cache)
            .field("push", &self.push)
            .finish_non_exhaustive()
    }
}

/// The binary cache is where the store finds pinned `.deb`s it lacks, before the mirror.
impl crate::store::DebSubstituter for CacheUse {
    fn url(&self) -> String {
        self.cache.url().to_string()
    }

    fn push(&self) -> bool {
        self.push
    }

    fn get_deb(
        &self,
        sha256: &str,
        size: u64,
    ) -> futures::future::BoxFuture<'static, Result<Option<Vec<u8>>, crate::store::SubstituteError>>
    {
        let (cache, sha256) = (self.cache.clone(), sha256.to_string());
        Box::pin(async move {
            let remote = cache.remote().clone();
            remote
                .run(async move { cache.get_deb(&sha256, size).await })
                .await
                .map(|found| found.map(|b| b.to_vec()))
                .map_err(Into::into)
        })
    }

    fn put_deb(
        &self,
        sha256: &str,
        bytes: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Result<(), crate::store::SubstituteError>> {
        let (cache, sha256) = (self.cache.clone(), sha256.to_string());
        Box::pin(async move {
            let remote = cache.remote().clone();
            remote
                .run(async move { cache.put_deb(&sha256, bytes::Bytes::from(bytes)).await })
                .await
                .map_err(Into::into)
        })
    }
}
