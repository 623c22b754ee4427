//! The store: immutable, blake3-addressed objects and one small mutable ref per
//! environment.
//!
//! Every write goes to a temporary file in `tmp/`, is fsynced, renamed into place, and the
//! directory is fsynced: a process killed at any instant (SIGKILL included) leaves either
//! the old state or the new one, never a torn file. Objects are verified against their
//! name when read, so corruption is reported rather than used.

use envc_ids::ResolvedHash;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::names::{env_of_safe_name, hex_key, parse_key, safe_name};
use crate::remote::RemoteError;
use crate::shared_state::SharedState;

pub use crate::object_id::ObjectId;

#[derive(Debug)]
pub enum StoreError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    Missing(ObjectId),
    /// The object's content does not hash to its name.
    Corrupt {
        id: ObjectId,
        path: PathBuf,
    },
    /// The object is not the JSON document expected.
    Malformed {
        id: ObjectId,
        error: String,
    },
    BadRef {
        env: String,
        /// Where the ref is: the bucket's head object, or the local ref file.
        at: String,
        content: String,
    },
    /// The shared state could not be read or written.
    Remote(Box<RemoteError>),
    /// The shared state's lock was taken from this run while it held it.
    LockLost {
        env: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            StoreError::Missing(id) => write!(f, "object {id} is not in the store{REPAIR_HINT}"),
            StoreError::Corrupt { id, path } => {
                write!(
                    f,
                    "object {id} is corrupt: {} does not hash to its name{REPAIR_HINT}",
                    path.display()
                )
            }
            StoreError::Malformed { id, error } => {
                write!(f, "object {id} is not what was expected: {error}")
            }
            StoreError::BadRef { env, at, content } => {
                write!(
                    f,
                    "the current state of environment `{env}` ({at}) holds {content:?}, not an object id{REPAIR_HINT}"
                )
            }
            StoreError::Remote(e) => write!(f, "{e}"),
            StoreError::LockLost { env } => write!(
                f,
                "the lock of `{env}` was taken from this run (forced open with `envc unlock --force`, or its lease ran out while the run stalled); nothing more is recorded\n  hint: what was recorded before stays; run the build again"
            ),
        }
    }
}

/// Deleting a damaged object by hand leaves a state that names it: repair drops it from there.
const REPAIR_HINT: &str =
    "\n  hint: `envc store verify --repair FILE` removes damaged objects and \
                           makes the environments' states valid without them";

impl std::error::Error for StoreError {}

/// The ref moved since it was read: another run committed in between.
#[derive(Debug, PartialEq, Eq)]
pub struct RefConflict {
    pub expected: Option<ObjectId>,
    pub found: Option<ObjectId>,
}

/// Space set aside in the store's `tmp/` (see [`Store::reserve`]); freed when dropped,
/// and by the next reserve of any run once its holder died without freeing it.
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    /// Open while reserved: the space of a removed file is free only once it is closed.
    held: std::sync::Mutex<Option<crate::held::Held>>,
}

impl Reserve {
    pub fn release(&self) {
        let _ = fs::remove_file(&self.path);
        drop(self.held.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.release();
    }
}

/// Proof that the caller holds an environment's lock (the `EnvLock` above the store):
/// moving or removing the environment's ref takes one.
pub trait HeldLock {
    fn env(&self) -> &str;
    /// The lock was taken from its holder (a shared lease expired or was forced).
    fn lost(&self) -> bool;
}

/// Where pinned `.deb`s come from when the store lacks them, before their mirror: a
/// binary cache, plugged in from above (`image::CacheUse`). Every answer is checked
/// against its pin by the caller, so a substituter is trusted for nothing.
pub trait DebSubstituter: fmt::Debug + Send + Sync {
    /// Where it is, to say so and to stop asking one that failed in this run.
    fn url(&self) -> String;
    /// Whether `.deb`s fetched from their mirror are pushed to it.
    fn push(&self) -> bool;
    /// The `.deb` of that sha256 and size, if it has one.
    fn get_deb(
        &self,
        sha256: &str,
        size: u64,
    ) -> futures::future::BoxFuture<'static, Result<Option<Vec<u8>>, SubstituteError>>;
    fn put_deb(
        &self,
        sha256: &str,
        bytes: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Result<(), SubstituteError>>;
}

/// Why a substituter could not answer: its own error (the store, below it, does not know
/// its type; a failure only means the mirror is asked instead).
pub type SubstituteError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
    /// Where the environments' refs, locks and state objects are shared, if anywhere:
    /// then this store is the working copy of those objects.
    shared: Option<std::sync::Arc<SharedState>>,
    /// Where pinned `.deb`s are kept: `ROOT/debs`, or another store's (a scratch store of
    /// `verify` uses production's: they are named and checked by their sha256, so sharing
    /// them changes nothing but the downloads).
    debs: PathBuf,
    /// The binary cache pinned `.deb`s are looked up in before their mirror (and pushed to
    /// when it says so), if the project has one.
    deb_cache: Option<std::sync::Arc<dyn DebSubstituter>>,
}

impl From<RemoteError> for StoreError {
    fn from(e: RemoteError) -> StoreError {
        StoreError::Remote(Box::new(e))
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |error| StoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

impl Store {
    /// Opens (creating if needed) the store at `root`: `.envc/` beside the env file, or
    /// `$ENVC_STORE`.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        // Absolute: paths of the store end up in records and in QEMU's command lines, and
        // must mean the same from any working directory.
        let root = std::path::absolute(root).map_err(io_err(root))?;
        let root = root.as_path();
        for dir in ["objects", "refs", "locks", "tmp", "substitutes"] {
            let p = root.join(dir);
            fs::create_dir_all(&p).map_err(io_err(&p))?;
        }
        Ok(Store {
            root: root.to_path_buf(),
            shared: None,
            debs: root.join("debs"),
            deb_cache: None,
        })
    }

    /// This store, keeping its pinned `.deb`s in `other`'s (and taking them from its cache).
    pub fn with_debs_of(self, other: &Store) -> Store {
        Store {
            debs: other.debs.clone(),
            deb_cache: other.deb_cache.clone(),
            ..self
        }
    }

    /// This store, looking pinned `.deb`s it lacks up in `cache` first.
    pub fn with_deb_cache(self, cache: Option<impl DebSubstituter + 'static>) -> Store {
        Store {
            deb_cache: cache.map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn DebSubstituter>),
            ..self
        }
    }

    pub fn deb_cache(&self) -> Option<&dyn DebSubstituter> {
        self.deb_cache.as_deref()
    }

    /// This store, with its environments' state kept in `shared` instead of `refs/`.
    pub fn with_shared_state(self, shared: SharedState) -> Store {
        Store {
            shared: Some(std::sync::Arc::new(shared)),
            ..self
        }
    }

    pub fn shared(&self) -> Option<&std::sync::Arc<SharedState>> {
        self.shared.as_ref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn object_path(&self, id: &ObjectId) -> PathBuf {
        let hex = id.hex();
        self.root.join("objects").join(&hex[..2]).join(&hex[2..])
    }

    /// Writes `bytes` as a file at `dest`, atomically and durably.
    fn write_atomically(&self, dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let tmp_dir = self.root.join("tmp");
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(io_err(&tmp_dir))?;
        tmp.write_all(bytes).map_err(io_err(tmp.path()))?;
        tmp.as_file().sync_all().map_err(io_err(tmp.path()))?;
        tmp.persist(dest).map_err(|e| StoreError::Io {
            path: dest.to_path_buf(),
            error: e.error,
        })?;
        let dir = dest.parent().expect("store paths have parents");
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))
    }

    /// The key of this store's keyed hashes of secrets (`secret-key`: 32 bytes as hex, mode
    /// 0600), made on first use when `create`; with a shared state, the bucket's, so that
    /// every machine sharing the state hashes a secret alike. `None`: there is none yet.
    pub fn secret_key(&self, create: bool) -> Result<Option<[u8; 32]>, StoreError> {
        let fresh = match create {
            true => Some(new_key().map_err(io_err(&self.root))?),
            false => None,
        };
        self.secret_key_with(fresh)
    }

    /// The store's key, or `fresh` made its key when it has none (`None`: none made).
    pub fn secret_key_with(&self, fresh: Option<[u8; 32]>) -> Result<Option<[u8; 32]>, StoreError> {
        if let Some(shared) = &self.shared {
            return Ok(shared.secret_key(fresh)?);
        }
        let path = self.root.join("secret-key");
        let parse = |text: &str| -> Result<[u8; 32], StoreError> {
            parse_key(text).ok_or_else(|| StoreError::Io {
                path: path.clone(),
                error: io::Error::new(io::ErrorKind::InvalidData, "not a 32-byte hex key"),
            })
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => return parse(&text).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::Io { path, error: e }),
        }
        let Some(key) = fresh else {
            return Ok(None);
        };
        let tmp_dir = self.root.join("tmp");
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(io_err(&tmp_dir))?;
        writeln!(tmp, "{}", hex_key(&key)).map_err(io_err(tmp.path()))?;
        tmp.as_file().sync_all().map_err(io_err(tmp.path()))?;
        match tmp.persist_noclobber(&path) {
            Ok(_) => Ok(Some(key)),
            // Another run made it first: theirs is the store's.
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
                parse(&text).map(Some)
            }
            Err(e) => Err(StoreError::Io {
                path,
                error: e.error,
            }),
        }
    }

    /// Where the store keeps a pinned `.deb`: `debs/SHA256.deb`, named by the sha256 its pin
    /// gives it (Debian's hash, not an object id: the pin is what it is checked against),
    /// shared by every environment, target and run of this store.
    pub fn deb_path(&self, sha256: &str) -> PathBuf {
        self.debs.join(format!("{sha256}.deb"))
    }

    /// Keeps `bytes`, already checked against `sha256`, as [`Store::deb_path`].
    pub fn put_deb(&self, sha256: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let path = self.deb_path(sha256);
        fs::create_dir_all(&self.debs).map_err(io_err(&self.debs))?;
        self.write_atomically(&path, bytes)?;
        Ok(path)
    }

    /// Sets `bytes` of space aside in `tmp/` (a file of zeros) until the [`Reserve`] is
    /// released: what lets a run record how it ended on a store that filled up meanwhile.
    pub fn reserve(&self, name: &str, bytes: usize) -> Result<Reserve, StoreError> {
        let tmp = self.root.join("tmp");
        // The reserves of runs that were killed: nobody holds them any more.
        for entry in fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let p = entry.path();
            let is_reserve = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("reserve."));
            if is_reserve && crate::held::abandoned(&p) {
                let _ = fs::remove_file(&p);
            }
        }
        let path = tmp.join(format!("reserve.{name}"));
        let held = crate::held::Held::take(&path).map_err(io_err(&path))?;
        let mut f: &File = held.file();
        if let Err(e) = f.write_all(&vec![0; bytes]).and_then(|()| f.sync_all()) {
            let _ = fs::remove_file(&path);
            return Err(io_err(&path)(e));
        }
        Ok(Reserve {
            path,
            held: std::sync::Mutex::new(Some(held)),
        })
    }

    /// Stores `bytes` and returns their id. Storing what is already there is a no-op.
    pub fn put(&self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
        let id = ObjectId::of(bytes);
        if let Some(shared) = &self.shared {
            // Also when it is here already: a killed run may have written it and never
            // uploaded it.
            shared.written(id);
        }
        self.put_local(&id, bytes)?;
        Ok(id)
    }

    fn put_local(&self, id: &ObjectId, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.object_path(id);
        if path.exists() {
            return Ok(());
        }
        let dir = path.parent().expect("object paths have parents");
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        self.write_atomically(&path, bytes)
    }

    /// Stores `objects` (their bytes, each with its id as [`ObjectId::of`] gives it),
    /// durably, as one group: every file written and its write-back started, then each
    /// synced and renamed into place, then each directory synced. A run records hundreds of
    /// small objects; one [`Store::put`] after another costs two journal commits each, where
    /// a group's syncs find most of their work done by the first (920 small objects in
    /// groups of 20 on an idle ext4 here: 0.22–0.26 s, against 0.36–0.43 s one by one).
    pub fn put_many(&self, objects: &[(ObjectId, Vec<u8>)]) -> Result<(), StoreError> {
        let mut fresh: Vec<(PathBuf, &[u8])> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (id, bytes) in objects {
            if let Some(shared) = &self.shared {
                shared.written(*id);
            }
            let path = self.object_path(id);
            if seen.insert(*id) && !path.exists() {
                fresh.push((path, bytes));
            }
        }
        let tmp_dir = self.root.join("tmp");
        let mut written = Vec::with_capacity(fresh.len());
        for (path, bytes) in &fresh {
            let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(io_err(&tmp_dir))?;
            tmp.write_all(bytes).map_err(io_err(tmp.path()))?;
            start_writeback(tmp.as_file());
            written.push((tmp, path));
        }
        let mut dirs = std::collections::BTreeSet::new();
        for (tmp, path) in written {
            tmp.as_file().sync_all().map_err(io_err(tmp.path()))?;
            let dir = path.parent().expect("object paths have parents");
            if dirs.insert(dir) {
                fs::create_dir_all(dir).map_err(io_err(dir))?;
            }
            tmp.persist(path).map_err(|e| StoreError::Io {
                path: path.to_path_buf(),
                error: e.error,
            })?;
        }
        for dir in dirs {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        Ok(())
    }

    /// Reads an object, checking that its content still hashes to its name.
    pub fn get(&self, id: &ObjectId) -> Result<Vec<u8>, StoreError> {
        let path = self.object_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Not here yet: the shared state has it (checked against its id there).
                let Some(shared) = &self.shared else {
                    return Err(StoreError::Missing(*id));
                };
                let bytes = shared.fetch(id)?.ok_or(StoreError::Missing(*id))?;
                if ObjectId::of(&bytes) != *id {
                    return Err(StoreError::Corrupt {
                        id: *id,
                        path: PathBuf::from(shared.object_url(id)),
                    });
                }
                self.put_local(id, &bytes)?;
                return Ok(bytes);
            }
            Err(e) => return Err(StoreError::Io { path, error: e }),
        };
        if ObjectId::of(&bytes) != *id {
            return Err(StoreError::Corrupt { id: *id, path });
        }
        Ok(bytes)
    }

    /// Moves the file at `path` into the store as an object (read-only from then on) and
    /// returns its id. For large build outputs (disk images): hashed by streaming, moved
    /// by rename when `path` is on the store's file system, so sparse files stay sparse.
    pub fn put_file(&self, path: &Path) -> Result<ObjectId, StoreError> {
        let mut h = blake3::Hasher::new();
        h.update_mmap_rayon(path).map_err(io_err(path))?;
        let id = ObjectId(*h.finalize().as_bytes());
        self.put_verified_file(path, &id)?;
        Ok(id)
    }

    /// [`Store::put_file`] of a file already checked to hash to `id` (a download, hashed
    /// as it arrived): moved in without reading it again.
    pub fn put_verified_file(&self, path: &Path, id: &ObjectId) -> Result<(), StoreError> {
        let id = *id;
        let dest = self.object_path(&id);
        if dest.exists() {
            fs::remove_file(path).map_err(io_err(path))?;
            return Ok(());
        }
        let dir = dest.parent().expect("object paths have parents");
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        File::open(path)
            .and_then(|f| f.sync_all())
            .map_err(io_err(path))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o444)).map_err(io_err(path))?;
        if fs::rename(path, &dest).is_err() {
            // Another file system: copy beside the destination, then rename.
            let tmp = self.root.join("tmp").join(format!("{}.part", id.hex()));
            fs::copy(path, &tmp).map_err(io_err(&tmp))?;
            fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
            fs::remove_file(path).map_err(io_err(path))?;
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))
    }

    /// Takes object `id` from another store on this machine: a hard link (objects are never
    /// written in place, so sharing the inode is safe), or a copy across file systems.
    /// Checked against its id only by `verify`, as every object is.
    pub fn link_object(&self, from: &Store, id: &ObjectId) -> Result<(), StoreError> {
        let (src, dest) = (from.object_path(id), self.object_path(id));
        if dest.exists() {
            return Ok(());
        }
        let dir = dest.parent().expect("object paths have parents");
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let tmp = self.root.join("tmp").join(format!("{}.link", id.hex()));
        let _ = fs::remove_file(&tmp);
        if fs::hard_link(&src, &tmp).is_err() {
            fs::copy(&src, &tmp).map_err(io_err(&src))?;
        }
        fs::rename(&tmp, &dest).map_err(io_err(&dest))
    }

    /// Where object `id` lives, for tools that read it in place (QEMU reads disk images).
    pub fn object_file(&self, id: &ObjectId) -> PathBuf {
        self.object_path(id)
    }

    pub fn contains(&self, id: &ObjectId) -> bool {
        self.object_path(id).exists()
    }

    /// Stores a value as JSON. Struct fields serialise in declaration order and maps are
    /// `BTreeMap`s, so equal values give equal bytes and so equal ids.
    pub fn put_json<T: Serialize>(&self, value: &T) -> Result<ObjectId, StoreError> {
        self.put(&json_bytes(value))
    }

    pub fn get_json<T: DeserializeOwned>(&self, id: &ObjectId) -> Result<T, StoreError> {
        let bytes = self.get(id)?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Malformed {
            id: *id,
            error: e.to_string(),
        })
    }

    fn substitute_path(&self, resolved_hash: &ResolvedHash) -> PathBuf {
        self.root
            .join("substitutes")
            .join(entry_name(resolved_hash))
    }

    /// Remembers the facts of a build output (an image) by its resolved hash, so that the
    /// same build is not run again while its objects are here: after `destroy`, for another
    /// environment, after `envc cache pull`. Only what this store built or fetched and
    /// verified is ever written here.
    pub fn put_substitute(
        &self,
        resolved_hash: &ResolvedHash,
        facts: &crate::record::Facts,
    ) -> Result<(), StoreError> {
        let entry = serde_json::json!({ "resolved_hash": resolved_hash, "facts": facts });
        let bytes = serde_json::to_vec(&entry).unwrap_or_default();
        self.write_atomically(&self.substitute_path(resolved_hash), &bytes)
    }

    /// The facts of a build output this store has whole (`objects` of them all present).
    pub fn substitute(
        &self,
        resolved_hash: &ResolvedHash,
        objects: impl Fn(&crate::record::Facts) -> Vec<ObjectId>,
    ) -> Option<crate::record::Facts> {
        #[derive(serde::Deserialize)]
        struct Entry {
            resolved_hash: ResolvedHash,
            facts: crate::record::Facts,
        }
        let bytes = fs::read(self.substitute_path(resolved_hash)).ok()?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        (entry.resolved_hash == *resolved_hash
            && objects(&entry.facts).iter().all(|id| self.contains(id)))
        .then_some(entry.facts)
    }

    fn ref_path(&self, env: &str) -> PathBuf {
        self.root.join("refs").join(safe_name(env))
    }

    /// The current state of `env`, if it was ever committed.
    pub fn read_ref(&self, env: &str) -> Result<Option<ObjectId>, StoreError> {
        let text = match &self.shared {
            Some(shared) => shared.read_head(env)?,
            None => {
                let path = self.ref_path(env);
                match fs::read_to_string(&path) {
                    Ok(s) => Some(s),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                    Err(e) => return Err(StoreError::Io { path, error: e }),
                }
            }
        };
        text.map(|s| {
            ObjectId::parse(&s).ok_or_else(|| StoreError::BadRef {
                env: env.to_string(),
                at: self.ref_location(env),
                content: s.chars().take(80).collect(),
            })
        })
        .transpose()
    }

    /// Where `env`'s ref lives, for messages: the bucket's head object, or `refs/ENV`.
    pub fn ref_location(&self, env: &str) -> String {
        match &self.shared {
            Some(shared) => shared.head_url(env),
            None => self.ref_path(env).display().to_string(),
        }
    }

    /// Every object where the environments' states are kept (the bucket's, with a shared
    /// state), with its size: where a repair looks for states when a ref names none.
    pub fn object_ids(&self) -> Result<Vec<(ObjectId, u64)>, StoreError> {
        if let Some(shared) = &self.shared {
            return Ok(shared.object_ids()?);
        }
        let mut ids = Vec::new();
        let objects = self.root.join("objects");
        for shard in fs::read_dir(&objects).map_err(io_err(&objects))? {
            let shard = shard.map_err(io_err(&objects))?.path();
            let Ok(entries) = fs::read_dir(&shard) else {
                continue;
            };
            for entry in entries {
                let entry = entry.map_err(io_err(&shard))?;
                let name = format!(
                    "{}{}",
                    shard.file_name().unwrap_or_default().to_string_lossy(),
                    entry.file_name().to_string_lossy()
                );
                if let Some(id) = ObjectId::parse(&name) {
                    let size = entry.metadata().map_or(0, |m| m.len());
                    ids.push((id, size));
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The bucket's objects that do not hash to their names (none without a shared state),
    /// each with whether this store has it whole (a repair uploads it again) or not (a
    /// repair removes it from the bucket, and the states lose what it held).
    pub fn verify_shared(&self) -> Result<Vec<(ObjectId, String, bool)>, StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(Vec::new());
        };
        let mut damaged = Vec::new();
        for (id, _) in shared.object_ids()? {
            let Some(bytes) = shared.fetch(&id)? else {
                continue; // removed meanwhile
            };
            if ObjectId::of(&bytes) != id {
                let path = self.object_path(&id);
                let whole = fs::read(&path).is_ok_and(|b| ObjectId::of(&b) == id);
                damaged.push((id, shared.object_url(&id), whole));
            }
        }
        Ok(damaged)
    }

    /// Mends an object [`Store::verify_shared`] found damaged in the bucket: uploads this
    /// store's copy if it is whole, removes it from the bucket otherwise. Whether it was
    /// uploaded.
    /// Run under every environment's lock (`store verify --repair`).
    pub fn mend_shared(&self, id: &ObjectId) -> Result<bool, StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(false);
        };
        let path = self.object_path(id);
        match fs::read(&path) {
            Ok(bytes) if ObjectId::of(&bytes) == *id => {
                shared.upload(id, bytes)?;
                Ok(true)
            }
            _ => {
                shared.delete_object(id)?;
                Ok(false)
            }
        }
    }

    /// Moves `env`'s ref from `expected` to `new`. Holding the environment's lock (the
    /// `EnvLock` argument) makes the compare and the swap one step; the swap itself is an
    /// atomic rename.
    pub fn update_ref(
        &self,
        lock: &impl HeldLock,
        expected: Option<ObjectId>,
        new: ObjectId,
    ) -> Result<Result<(), RefConflict>, StoreError> {
        let env = lock.env();
        if !self.contains(&new) {
            return Err(StoreError::Missing(new));
        }
        if lock.lost() {
            return Err(StoreError::LockLost {
                env: env.to_string(),
            });
        }
        let found = self.read_ref(env)?;
        if found != expected {
            return Ok(Err(RefConflict { expected, found }));
        }
        let Some(shared) = &self.shared else {
            self.write_atomically(&self.ref_path(env), format!("{}\n", new.hex()).as_bytes())?;
            return Ok(Ok(()));
        };
        // Every object the new state names is in the bucket before the head names it; the
        // move is conditional on the head being what was just read.
        for id in shared.pending() {
            let path = self.object_path(&id);
            let bytes = fs::read(&path).map_err(io_err(&path))?;
            shared.upload(&id, bytes)?;
        }
        if shared.move_head(env, &new)? {
            Ok(Ok(()))
        } else {
            let found = self.read_ref(env)?;
            Ok(Err(RefConflict { expected, found }))
        }
    }

    /// Checks every object against its name; returns the corrupt ones. Leftover temporary
    /// files (from a killed writer) are removed when older than `tmp_age`.
    pub fn verify(&self, tmp_age: std::time::Duration) -> Result<Vec<PathBuf>, StoreError> {
        let mut corrupt = Vec::new();
        let objects = self.root.join("objects");
        for shard in fs::read_dir(&objects).map_err(io_err(&objects))? {
            let shard = shard.map_err(io_err(&objects))?.path();
            if !shard.is_dir() {
                corrupt.push(shard); // objects live in shard directories only
                continue;
            }
            for entry in fs::read_dir(&shard).map_err(io_err(&shard))? {
                let path = entry.map_err(io_err(&shard))?.path();
                let name = format!(
                    "{}{}",
                    shard.file_name().unwrap_or_default().to_string_lossy(),
                    path.file_name().unwrap_or_default().to_string_lossy()
                );
                // Hashed by streaming: disk images are objects too, of gigabytes.
                // A file that cannot be read is an error, not damage: repair must never
                // delete a sound object it merely could not open.
                let ok = match ObjectId::parse(&name) {
                    Some(id) if path.is_file() => {
                        let mut h = blake3::Hasher::new();
                        h.update_mmap_rayon(&path).map_err(io_err(&path))?;
                        ObjectId(*h.finalize().as_bytes()) == id
                    }
                    _ => false,
                };
                if !ok {
                    corrupt.push(path);
                }
            }
        }
        // Pinned .debs are named by their sha256: one that no longer hashes to its name is
        // damage too (a step would fetch it again, but verify says so first). Another
        // store's, for a scratch store, are that store's to check.
        if self.debs == self.root.join("debs") && self.debs.is_dir() {
            for entry in fs::read_dir(&self.debs).map_err(io_err(&self.debs))? {
                let path = entry.map_err(io_err(&self.debs))?.path();
                let named = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".deb"))
                    .filter(|h| envc_lockfiles::text::is_sha256(h))
                    .map(str::to_string);
                let ok = match named {
                    Some(sha256) if path.is_file() => {
                        let bytes = fs::read(&path).map_err(io_err(&path))?;
                        envc_lockfiles::fetch::sha256_hex(&bytes) == sha256
                    }
                    _ => false,
                };
                if !ok {
                    corrupt.push(path);
                }
            }
        }
        let tmp = self.root.join("tmp");
        for entry in fs::read_dir(&tmp).map_err(io_err(&tmp))? {
            let path = entry.map_err(io_err(&tmp))?.path();
            let old = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok());
            if old.is_some_and(|age| age >= tmp_age) {
                let _ = fs::remove_file(&path);
            }
        }
        Ok(corrupt)
    }
}

impl Store {
    /// The environments that have a ref, by name.
    pub fn envs(&self) -> Result<Vec<String>, StoreError> {
        let mut envs = Vec::new();
        if let Some(shared) = &self.shared {
            envs.extend(shared.envs()?.iter().filter_map(|n| env_of_safe_name(n)));
            envs.sort();
            return Ok(envs);
        }
        let dir = self.root.join("refs");
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let name = entry.map_err(io_err(&dir))?.file_name();
            if let Some(env) = name.to_str().and_then(env_of_safe_name) {
                envs.push(env);
            }
        }
        envs.sort();
        Ok(envs)
    }

    /// Removes what [`Store::verify`] found damaged in `objects/` or `debs/`.
    pub fn remove_damaged(&self, path: &Path) -> Result<(), StoreError> {
        if !path.starts_with(self.root.join("objects")) && !path.starts_with(self.root.join("debs"))
        {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                error: io::Error::other("not in the store's objects (this is a bug in envc)"),
            });
        }
        let removed = if path.is_dir() {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::Io {
                path: path.to_path_buf(),
                error: e,
            }),
            _ => Ok(()),
        }
    }

    /// Forgets `env`'s state (its ref), as if it had never been built.
    pub fn remove_ref(&self, lock: &impl HeldLock) -> Result<(), StoreError> {
        if lock.lost() {
            return Err(StoreError::LockLost {
                env: lock.env().to_string(),
            });
        }
        if let Some(shared) = &self.shared {
            return Ok(shared.delete_head(lock.env())?);
        }
        let path = self.ref_path(lock.env());
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(StoreError::Io { path, error: e })
            }
            _ => {}
        }
        let dir = self.root.join("refs");
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&dir))
    }
}

/// A value's bytes as an object: struct fields in declaration order and `BTreeMap`s, so
/// equal values give equal bytes.
pub fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("records serialise")
}

/// Asks the kernel to start writing `file` out now, without waiting: the sync that follows
/// then finds it written, or being written with the others of its group.
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on an open descriptor; it reads no memory of ours. Its
        // failure only loses the head start (the sync that follows still syncs).
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// A new random key for keyed hashes.
pub fn new_key() -> io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(key)
}

/// Where the entry of a resolved hash lives, in a binary cache and in the store's
/// substitutes alike. Hashed again so that whatever a resolved hash
/// is spelled with, the key is 64 hex digits.
pub fn entry_key(resolved_hash: &ResolvedHash) -> String {
    format!("entries/{}", entry_name(resolved_hash))
}

/// The name an output's entry has: in the cache's `entries/`, and in the store's
/// `substitutes/`.
fn entry_name(resolved_hash: &ResolvedHash) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"envc-cache-key\0");
    h.update(resolved_hash.as_str().as_bytes());
    h.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_reserve_a_killed_run_left_is_freed_by_the_next() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let tmp = d.path().join("tmp");
        // A reserve whose run was killed: the file stayed, nobody holds it.
        std::fs::write(tmp.join("reserve.killed"), vec![0u8; 1024]).unwrap();
        let first = store.reserve("first", 4096).unwrap();
        assert!(!tmp.join("reserve.killed").exists());
        assert_eq!(
            std::fs::metadata(tmp.join("reserve.first")).unwrap().len(),
            4096
        );
        // A reserve a live run holds stays while the next run reserves its own.
        let second = store.reserve("second", 4096).unwrap();
        assert!(tmp.join("reserve.first").exists());
        drop(first);
        drop(second);
        assert!(!tmp.join("reserve.first").exists() && !tmp.join("reserve.second").exists());
    }
}
