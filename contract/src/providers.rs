//! Pinned Terraform/OpenTofu providers on the controller: a `resource` node's provider runs
//! from exactly the package its pin names (`provider:ADDRESS`, value `VERSION HASH…`,
//! `envc_ids::pin::ProviderValue`), fetched once from its source and then kept in the store,
//! so that later runs need no registry or mirror.
//!
//! What the store keeps, under its root:
//!
//! ```text
//! objects/ab/cdef…              the package's zip, an object named by its blake3 (verified
//!                               on every read, as every object is)
//! providers/index/SCHEME-HEX    one per hash the package has (`zh-…`, `h1-…`, the hash's 32
//!                               bytes in hex): `OBJECT H1`, the zip's object id (`-` for a
//!                               filesystem mirror's unpacked package, which has no zip) and
//!                               the package's `h1:`
//! providers/unpacked/H1HEX/     the package's files, unpacked, the executable mode 0755:
//!                               objects are read-only and not executable, so the provider
//!                               runs from here
//! ```
//!
//! Each use checks what it runs: the unpacked directory must hash to the `h1:` it is named
//! by ([`h1_of_dir`]) — which is one of the pin's, or, for a pin holding only `zh:` for this
//! platform (locked elsewhere), the `h1:` the index recorded when a zip matching the pin's
//! `zh:` was unpacked. A directory that does not is removed and unpacked again from the zip
//! object, which is checked against the pin first; failing that the package is fetched
//! again from the source ([`provider::fetch_package`] verifies it against the pin), and
//! failing that the provider is refused: nothing that fails verification is run.
//!
//! Like `debs.rs`'s pinned `.deb`s, the copy is named by the pin's hashes, not by an
//! environment: every environment and run of the store shares it.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use envc_ids::pin::{PinValue, ProviderValue};
use envc_lockfiles::provider::hashes::h1_of_dir;
use envc_lockfiles::provider::package::{is_executable_name, verify, Package};
use envc_lockfiles::provider::{
    self, PackageHash, Platform, ProviderAddress, ProviderError, ProviderSource, ResolvedProvider,
    VerifiedPackage, Version,
};

use crate::store::{ObjectId, Store, StoreError};

/// Why no verified executable of a pinned provider could be had.
#[derive(Debug)]
pub enum ProviderFetchError {
    /// The pin is not a provider's: its address, or its value (`VERSION HASH…`).
    BadPin {
        address: String,
        value: String,
        detail: String,
    },
    /// The store has no copy that verifies, and the source gave none (unreachable, or a
    /// package that does not match the pin).
    Fetch(ProviderError),
    /// The store could not keep or read the package.
    Store { address: String, error: StoreError },
    /// A file of the store's copy could not be written or read.
    Io {
        address: String,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A package that matched the pin did not unpack into files that hash as it did, or
    /// holds no single executable for its version.
    Unusable {
        address: String,
        version: String,
        detail: String,
    },
}

impl fmt::Display for ProviderFetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderFetchError::BadPin {
                address,
                value,
                detail,
            } => write!(
                f,
                "provider:{address}: the pin `{value}` is not a provider's ({detail})\n  hint: \
                 the lockfile was edited by hand; run `envc lock FILE \
                 --update=provider:{address}`"
            ),
            ProviderFetchError::Fetch(e) => e.fmt(f),
            ProviderFetchError::Store { address, error } => write!(
                f,
                "provider:{address}: the store cannot keep its package: {error}\n  hint: \
                 check the store's disk (`envc store verify`)"
            ),
            ProviderFetchError::Io {
                address,
                path,
                error,
            } => write!(
                f,
                "provider:{address}: {}: {error}\n  hint: check that the store's directory \
                 is writable and has space",
                path.display()
            ),
            ProviderFetchError::Unusable {
                address,
                version,
                detail,
            } => write!(
                f,
                "provider:{address} {version}: {detail}\n  hint: the package is not one its \
                 publisher's tools made; pin another version (`envc lock FILE \
                 --update=provider:{address}`)"
            ),
        }
    }
}

impl std::error::Error for ProviderFetchError {}

/// The path of a verified, runnable (mode 0755) executable of the provider `address` (its
/// full address, as the pin key names it) pinned at `pin_value`, for this machine's
/// platform: the store's copy when it verifies, else one fetched from `source`, verified
/// against the pin and kept in the store first.
pub async fn provider_executable(
    store: &Store,
    address: &str,
    pin_value: &str,
    source: &ProviderSource,
) -> Result<PathBuf, ProviderFetchError> {
    let pin = parse_pin(address, pin_value)?;
    let kept = Kept::new(store, &pin);
    if let Some(exe) = kept.find()? {
        return Ok(exe);
    }
    let package = provider::fetch_package(&pin, &Platform::current(), source)
        .await
        .map_err(ProviderFetchError::Fetch)?;
    kept.install(&package)
}

/// The pin a node carries, read: its address and its `VERSION HASH…`.
fn parse_pin(address: &str, value: &str) -> Result<ResolvedProvider, ProviderFetchError> {
    let bad = |detail: String| ProviderFetchError::BadPin {
        address: address.to_string(),
        value: value.to_string(),
        detail,
    };
    let first = |e: &dyn fmt::Display| e.to_string().lines().next().unwrap_or("").to_string();
    let parsed = ProviderAddress::parse(address).map_err(|e| bad(first(&e)))?;
    let v = ProviderValue::decode(value)
        .ok_or_else(|| bad("expected VERSION then h1:/zh: hashes, sorted".into()))?;
    let version = Version::parse(&v.version).map_err(|e| bad(first(&e)))?;
    let hashes = v
        .hashes
        .iter()
        .map(|h| h.parse::<PackageHash>().map_err(|e| bad(first(&e))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ResolvedProvider::new(parsed, version, hashes))
}

/// A hash's 32 bytes in hex, with its scheme: the name of its index entry.
fn hash_name(h: &PackageHash) -> String {
    let (scheme, bytes) = match h {
        PackageHash::Zh(b) => ("zh", b),
        PackageHash::H1(b) => ("h1", b),
    };
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{scheme}-{hex}")
}

/// One pinned provider's copy in one store.
struct Kept<'a> {
    store: &'a Store,
    pin: &'a ResolvedProvider,
    address: String,
    index: PathBuf,
    unpacked: PathBuf,
}

/// What an index entry says of a package with a given hash.
struct Entry {
    object: Option<ObjectId>,
    h1: PackageHash,
}

impl<'a> Kept<'a> {
    fn new(store: &'a Store, pin: &'a ResolvedProvider) -> Kept<'a> {
        let root = store.root().join("providers");
        Kept {
            store,
            pin,
            address: pin.address.to_string(),
            index: root.join("index"),
            unpacked: root.join("unpacked"),
        }
    }

    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> ProviderFetchError {
        let (address, path) = (self.address.clone(), path.to_path_buf());
        move |error| ProviderFetchError::Io {
            address,
            path,
            error,
        }
    }

    /// The executable of a copy in the store that verifies: unpacked already, or unpacked
    /// now from the kept zip. `None`: none does (a damaged copy is removed on the way).
    fn find(&self) -> Result<Option<PathBuf>, ProviderFetchError> {
        for hash in self.pin.hashes() {
            let Some(entry) = self.entry(hash) else {
                continue;
            };
            if let Some(exe) = self.verified_dir(&entry.h1)? {
                return Ok(Some(exe));
            }
            // The object is checked against its blake3 by `get`, then against the pin.
            let Some(bytes) = entry.object.and_then(|id| self.store.get(&id).ok()) else {
                continue;
            };
            let package = Package::Zip {
                bytes,
                origin: format!("the store's copy of {}", self.address),
            };
            let against = "the lockfile's pin";
            let Ok(verified) = verify(
                &self.pin.address,
                &self.pin.version,
                package,
                self.pin.hashes(),
                against,
            ) else {
                continue;
            };
            return self.install(&verified).map(Some);
        }
        Ok(None)
    }

    /// The index entry of a package with `hash`, if the store has one that reads.
    fn entry(&self, hash: &PackageHash) -> Option<Entry> {
        let text = std::fs::read_to_string(self.index.join(hash_name(hash))).ok()?;
        let (object, h1) = text.trim_end().split_once(' ')?;
        let object = match object {
            "-" => None,
            hex => Some(ObjectId::parse(hex)?),
        };
        let h1: PackageHash = h1.parse().ok()?;
        h1.is_h1().then_some(Entry { object, h1 })
    }

    /// The unpacked copy named by `h1`, when it hashes to it and holds the executable.
    /// A copy that does not is removed.
    fn verified_dir(&self, h1: &PackageHash) -> Result<Option<PathBuf>, ProviderFetchError> {
        let dir = self.unpacked.join(hash_name(h1));
        if !dir.is_dir() {
            return Ok(None);
        }
        if h1_of_dir(&dir).ok().as_ref() == Some(h1) {
            if let Some(exe) = self.executable_in(&dir)? {
                return Ok(Some(exe));
            }
        }
        std::fs::remove_dir_all(&dir).map_err(self.io(&dir))?;
        Ok(None)
    }

    /// The executable of the unpacked copy `dir`, made runnable (a package may record no
    /// mode, or one without the execute bits: it is still the program the pin names).
    fn executable_in(&self, dir: &Path) -> Result<Option<PathBuf>, ProviderFetchError> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(self.io(dir))? {
            let entry = entry.map_err(self.io(dir))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        let found: Vec<&String> = names
            .iter()
            .filter(|n| is_executable_name(&self.pin.address, &self.pin.version, n))
            .collect();
        let [name] = found.as_slice() else {
            return Ok(None);
        };
        let exe = dir.join(name);
        let mode = std::fs::metadata(&exe)
            .map_err(self.io(&exe))?
            .permissions();
        if mode.mode() & 0o777 != 0o755 {
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
                .map_err(self.io(&exe))?;
        }
        Ok(Some(exe))
    }

    /// Keeps a verified package: its zip as an object, its files unpacked under its `h1:`
    /// (checked to hash to it), and an index entry for each of its hashes; returns the
    /// executable.
    fn install(&self, package: &VerifiedPackage) -> Result<PathBuf, ProviderFetchError> {
        let unusable = |detail: String| ProviderFetchError::Unusable {
            address: self.address.clone(),
            version: self.pin.version.to_string(),
            detail,
        };
        let h1 = package
            .h1()
            .cloned()
            .ok_or_else(|| unusable("the package has no h1: hash".into()))?;
        let object = match package.zip() {
            Some(zip) => Some(
                self.store
                    .put(zip)
                    .map_err(|error| ProviderFetchError::Store {
                        address: self.address.clone(),
                        error,
                    })?,
            ),
            None => None,
        };
        let exe = match self.verified_dir(&h1)? {
            Some(exe) => exe,
            None => self.unpack(package, &h1)?,
        };
        std::fs::create_dir_all(&self.index).map_err(self.io(&self.index))?;
        let line = format!(
            "{} {h1}\n",
            object.map_or_else(|| "-".to_string(), |id| id.hex())
        );
        for hash in package.hashes() {
            self.write_entry(&hash_name(hash), &line)?;
        }
        Ok(exe)
    }

    /// Unpacks `package` beside its place, checks the files hash to `h1`, then renames the
    /// directory into place: a reader sees a whole copy or none.
    fn unpack(
        &self,
        package: &VerifiedPackage,
        h1: &PackageHash,
    ) -> Result<PathBuf, ProviderFetchError> {
        let unusable = |detail: String| ProviderFetchError::Unusable {
            address: self.address.clone(),
            version: self.pin.version.to_string(),
            detail,
        };
        std::fs::create_dir_all(&self.unpacked).map_err(self.io(&self.unpacked))?;
        let scratch = tempfile::Builder::new()
            .prefix(".unpacking-")
            .tempdir_in(&self.unpacked)
            .map_err(self.io(&self.unpacked))?;
        let files = scratch.path().join("package");
        package
            .unpack_all(&files)
            .map_err(ProviderFetchError::Fetch)?;
        let unpacked_h1 =
            h1_of_dir(&files).map_err(|e| unusable(format!("its files cannot be hashed: {e}")))?;
        if unpacked_h1 != *h1 {
            return Err(unusable(format!(
                "unpacked, its files hash to {unpacked_h1}, not to the package's {h1}"
            )));
        }
        let dest = self.unpacked.join(hash_name(h1));
        if let Err(e) = std::fs::rename(&files, &dest) {
            // Another run put the same copy in place first: use it if it verifies.
            if let Some(exe) = self.verified_dir(h1)? {
                return Ok(exe);
            }
            return Err(self.io(&dest)(e));
        }
        self.executable_in(&dest)?.ok_or_else(|| {
            unusable(format!(
                "the package holds no single executable {}_v{}",
                self.pin.address.binary_prefix(),
                self.pin.version
            ))
        })
    }

    /// Writes index entry `name` atomically, as the store writes everything.
    fn write_entry(&self, name: &str, line: &str) -> Result<(), ProviderFetchError> {
        let tmp_dir = self.store.root().join("tmp");
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(self.io(&tmp_dir))?;
        let path = self.index.join(name);
        tmp.write_all(line.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(self.io(&path))?;
        tmp.persist(&path).map_err(|e| self.io(&path)(e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envc_lockfiles::provider::{Constraints, PackageHash};

    const ADDRESS: &str = "registry.envc.test/envc-test/local";

    /// A zip of an executable shell script saying `says`, and a licence beside it, as the
    /// test registry's packages are built (lockfiles/tests/provider_registry.rs).
    fn zip_of(version: &str, says: &str, exe_mode: u32) -> Vec<u8> {
        use zip::write::SimpleFileOptions;
        let files = [
            (
                format!("terraform-provider-local_v{version}"),
                format!("#!/bin/sh\necho {says}\n").into_bytes(),
                exe_mode,
            ),
            (
                "LICENSE".to_string(),
                b"MIT, for the test\n".to_vec(),
                0o644,
            ),
        ];
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, bytes, mode) in files {
            let options = SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .unix_permissions(mode);
            w.start_file(name.as_str(), options).unwrap();
            w.write_all(&bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// A filesystem mirror (packed layout) holding `zip` as `version` for this machine.
    fn mirror_with(version: &str, zip: &[u8]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(ADDRESS);
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!(
            "terraform-provider-local_{version}_{}.zip",
            Platform::current()
        );
        std::fs::write(dir.join(name), zip).unwrap();
        root
    }

    fn source(root: &Path) -> ProviderSource {
        ProviderSource::FilesystemMirror {
            root: root.to_path_buf(),
        }
    }

    /// The pin value `envc lock` writes for the mirror's package.
    async fn locked(root: &Path) -> String {
        let address = ProviderAddress::parse(ADDRESS).unwrap();
        let pin = provider::resolve(
            &address,
            &Constraints::parse("~> 0.1.0").unwrap(),
            &Platform::current(),
            &source(root),
        )
        .await
        .unwrap();
        ProviderValue::new(
            &pin.version.to_string(),
            pin.hashes().iter().map(PackageHash::to_string),
        )
        .encode()
    }

    fn run(exe: &Path) -> String {
        let out = std::process::Command::new(exe).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[tokio::test]
    async fn fetched_once_then_run_from_the_store_with_no_source() {
        let mirror = mirror_with("0.1.0", &zip_of("0.1.0", "local 0.1.0", 0o755));
        let value = locked(mirror.path()).await;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let exe = provider_executable(&store, ADDRESS, &value, &source(mirror.path()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            exe.starts_with(store.root().join("providers/unpacked")),
            "{exe:?}"
        );
        assert_eq!(
            std::fs::metadata(&exe).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(run(&exe), "local 0.1.0\n");

        // The mirror gone: the store's copy, verified, is enough.
        let gone = mirror.path().to_path_buf();
        drop(mirror);
        let again = provider_executable(&store, ADDRESS, &value, &source(&gone))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, exe);

        // The unpacked copy tampered with: unpacked again from the zip the store keeps.
        std::fs::write(&exe, "#!/bin/sh\necho evil\n").unwrap();
        let mended = provider_executable(&store, ADDRESS, &value, &source(&gone))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run(&mended), "local 0.1.0\n");

        // Tampered with, and the zip gone too: refused, never run.
        std::fs::write(&mended, "#!/bin/sh\necho evil\n").unwrap();
        std::fs::remove_dir_all(store.root().join("objects")).unwrap();
        std::fs::create_dir_all(store.root().join("objects")).unwrap();
        let refused = provider_executable(&store, ADDRESS, &value, &source(&gone))
            .await
            .unwrap_err();
        assert!(matches!(refused, ProviderFetchError::Fetch(_)), "{refused}");
        assert!(!mended.exists(), "the tampered copy is removed");
    }

    #[tokio::test]
    async fn a_package_that_is_not_the_pinned_one_is_refused_and_nothing_is_kept() {
        let mirror = mirror_with("0.1.0", &zip_of("0.1.0", "local 0.1.0", 0o755));
        let value = locked(mirror.path()).await;
        // The mirror now serves other bytes under the same version.
        let other = mirror_with("0.1.0", &zip_of("0.1.0", "someone else", 0o755));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let e = provider_executable(&store, ADDRESS, &value, &source(other.path()))
            .await
            .unwrap_err();
        assert!(
            matches!(e, ProviderFetchError::Fetch(ProviderError::HashMismatch(_))),
            "{e}"
        );
        assert!(!store.root().join("providers").exists());
    }

    #[tokio::test]
    async fn an_executable_without_its_mode_is_made_runnable() {
        let mirror = mirror_with("0.1.0", &zip_of("0.1.0", "local 0.1.0", 0o644));
        let value = locked(mirror.path()).await;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let exe = provider_executable(&store, ADDRESS, &value, &source(mirror.path()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run(&exe), "local 0.1.0\n");
    }

    #[test]
    fn a_pin_that_is_not_a_providers_names_the_fix() {
        // `(address, value)` → the start of the error.
        let check = |address: &str, value: &str, expected: &str| {
            let e = parse_pin(address, value).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{address} {value}: {e}");
            assert!(e.ends_with(&format!("--update=provider:{address}`")), "{e}");
        };
        let h1 = format!("h1:{}", "A".repeat(43) + "=");
        check(
            "local",
            &format!("0.1.0 {h1}"),
            "provider:local: the pin `0.1.0 h1:AAA",
        );
        check(
            ADDRESS,
            "0.1.0",
            &format!(
                "provider:{ADDRESS}: the pin `0.1.0` is not a provider's (expected VERSION then \
                 h1:/zh: hashes, sorted)"
            ),
        );
        check(
            ADDRESS,
            &format!("0.1 {h1}"),
            &format!("provider:{ADDRESS}: the pin `0.1 h1:"),
        );
        check(
            ADDRESS,
            "0.1.0 h1:short",
            &format!(
                "provider:{ADDRESS}: the pin `0.1.0 h1:short` is not a provider's (`h1:short`"
            ),
        );
        assert!(parse_pin(ADDRESS, &format!("0.1.0 {h1}")).is_ok());
    }
}
