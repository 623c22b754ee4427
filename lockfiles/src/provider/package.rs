//! A provider package as a source hands it over (a zip's bytes, or an unpacked directory of
//! a filesystem mirror), checked against hashes before anything of it is written: only a
//! [`VerifiedPackage`] can be unpacked, and only [`verify`] makes one.
//!
//! Unpacking writes one file, the provider's executable (`terraform-provider-TYPE_vVERSION`,
//! or with a protocol suffix such as HashiCorp's `_x5`), into the directory the caller
//! gives. Every entry name of a zip is checked first, and a package with one that would
//! land outside that directory (absolute, `..`, a backslash) is refused whole: such a zip
//! is not a package its publisher's tools made.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::address::ProviderAddress;
use super::constraint::Version;
use super::error::{HashMismatch, ProviderError};
use super::hashes::{self, FileDigests, HashError, PackageHash};

/// A package as a source handed it over, not yet trusted.
#[derive(Clone, Debug)]
pub enum Package {
    /// A zip's bytes, and where they came from (a URL or a path).
    Zip { bytes: Vec<u8>, origin: String },
    /// A filesystem mirror's unpacked package.
    Dir { path: PathBuf },
}

impl Package {
    /// Where the package came from.
    pub fn origin(&self) -> String {
        match self {
            Package::Zip { origin, .. } => origin.clone(),
            Package::Dir { path } => path.display().to_string(),
        }
    }
}

/// A package whose hashes matched a pin or a registry's signed checksums.
#[derive(Clone, Debug)]
pub struct VerifiedPackage {
    provider: ProviderAddress,
    version: Version,
    package: Package,
    /// A directory's files as they were hashed: the executable is checked against its
    /// entry again as it is copied, so a file changed since is not installed.
    files: FileDigests,
    /// What the package hashed to: `zh:` (for a zip) and `h1:`.
    hashes: Vec<PackageHash>,
}

/// The hashes of a package, and a directory's files as they were hashed.
fn compute(package: &Package) -> Result<(Vec<PackageHash>, FileDigests), HashError> {
    match package {
        Package::Zip { bytes, .. } => Ok((
            vec![PackageHash::zh(bytes), hashes::h1_of_zip(bytes)?],
            FileDigests::new(),
        )),
        Package::Dir { path } => {
            let files = hashes::dir_files(path)?;
            Ok((vec![hashes::h1_of_files(&files)?], files))
        }
    }
}

/// Checks `package` of `provider` `version` against `accepted`: it is verified when any
/// hash it has is one of them (a zip is checked by `zh:` and `h1:`, a directory by `h1:`),
/// as Terraform checks a package against a lock. `against` says what the hashes are, for
/// the error.
pub fn verify(
    provider: &ProviderAddress,
    version: &Version,
    package: Package,
    accepted: &[PackageHash],
    against: &str,
) -> Result<VerifiedPackage, ProviderError> {
    let (hashes, files) = compute(&package).map_err(|e| bad(provider, version, &package, e))?;
    if !hashes.iter().any(|h| accepted.contains(h)) {
        let usable: Vec<String> = accepted
            .iter()
            .filter(|h| h.is_h1() || matches!(package, Package::Zip { .. }))
            .map(PackageHash::to_string)
            .collect();
        return Err(ProviderError::HashMismatch(Box::new(HashMismatch {
            provider: provider.to_string(),
            version: version.to_string(),
            url: package.origin(),
            against: against.to_string(),
            expected: if usable.is_empty() {
                "an h1: hash (the pin has only zh: hashes, which an unpacked package cannot \
                 match)"
                    .into()
            } else {
                format!("one of {}", usable.join(", "))
            },
            actual: hashes
                .iter()
                .map(PackageHash::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })));
    }
    Ok(VerifiedPackage {
        provider: provider.clone(),
        version: version.clone(),
        package,
        files,
        hashes,
    })
}

/// Trusts a zip whose sha256 the caller has checked against a signed SHA256SUMS.
pub(crate) fn verified_zip(
    provider: &ProviderAddress,
    version: &Version,
    bytes: Vec<u8>,
    origin: String,
) -> Result<VerifiedPackage, ProviderError> {
    let zh = PackageHash::zh(&bytes);
    verify(
        provider,
        version,
        Package::Zip { bytes, origin },
        &[zh],
        "its own sha256",
    )
}

fn bad(
    provider: &ProviderAddress,
    version: &Version,
    package: &Package,
    detail: impl std::fmt::Display,
) -> ProviderError {
    ProviderError::BadPackage {
        provider: provider.to_string(),
        version: version.to_string(),
        origin: package.origin(),
        detail: detail.to_string(),
    }
}

impl VerifiedPackage {
    /// What the package hashed to: `zh:` for a zip, and `h1:`.
    pub fn hashes(&self) -> &[PackageHash] {
        &self.hashes
    }

    /// The package's `h1:`.
    pub fn h1(&self) -> Option<&PackageHash> {
        self.hashes.iter().find(|h| h.is_h1())
    }

    /// Whether `name` (an entry at the package's top) is the provider's executable.
    fn is_executable(&self, name: &str) -> bool {
        is_executable_name(&self.provider, &self.version, name)
    }

    fn bad(&self, detail: impl std::fmt::Display) -> ProviderError {
        bad(&self.provider, &self.version, &self.package, detail)
    }

    /// The zip's bytes, for a package handed over as a zip (`None` for a filesystem
    /// mirror's unpacked directory).
    pub fn zip(&self) -> Option<&[u8]> {
        match &self.package {
            Package::Zip { bytes, .. } => Some(bytes),
            Package::Dir { .. } => None,
        }
    }

    /// Writes every file of the package into `dir` (which must not exist: it is made here),
    /// with the package's modes (no set-id bits, nothing writable by others), so that the
    /// directory hashes to the package's `h1:` ([`hashes::h1_of_dir`]) and can be checked
    /// against it each time it is used. Every entry name is checked before anything is
    /// written; a directory package's files are checked against their digests as they are
    /// copied.
    pub fn unpack_all(&self, dir: &Path) -> Result<(), ProviderError> {
        let files: Vec<(String, Vec<u8>, u32)> = match &self.package {
            Package::Zip { bytes, .. } => self.files_in_zip(bytes)?,
            Package::Dir { path } => self.files_in_dir(path)?,
        };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| ProviderError::Io { path, error }
        };
        std::fs::create_dir(dir).map_err(io(dir))?;
        for (name, bytes, mode) in files {
            let path = dir.join(&name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(&path, &bytes).map_err(io(&path))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(io(&path))?;
        }
        Ok(())
    }

    /// Every regular file of a zip whose every name is safe: name, bytes, mode.
    fn files_in_zip(&self, zip: &[u8]) -> Result<Vec<(String, Vec<u8>, u32)>, ProviderError> {
        let mut archive =
            zip::ZipArchive::new(std::io::Cursor::new(zip)).map_err(|e| self.bad(e))?;
        let mut out = Vec::new();
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).map_err(|e| self.bad(e))?;
            let name = entry.name().map_err(|e| self.bad(e))?.into_owned();
            if !safe_entry_name(&name) {
                return Err(self.bad(format!(
                    "the zip entry `{}` would be written outside the directory it is unpacked \
                     into; the package is refused",
                    name.escape_debug()
                )));
            }
            let mode = entry.unix_mode();
            if mode.is_some_and(|m| m & 0o170000 == 0o120000) {
                return Err(self.bad(format!("`{name}` is a symbolic link, not a file")));
            }
            // Directory entries hash as empty files in `h1:` over a zip but are not seen
            // over a directory; provider packages hold none, so they are left out here.
            if name.ends_with('/') {
                continue;
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).map_err(|e| self.bad(e))?;
            out.push((name, bytes, file_mode(mode)));
        }
        Ok(out)
    }

    /// Every file of an unpacked package, each checked against its digest as hashed.
    fn files_in_dir(&self, dir: &Path) -> Result<Vec<(String, Vec<u8>, u32)>, ProviderError> {
        let mut out = Vec::new();
        for (name, digest) in &self.files {
            let path = dir.join(name);
            let io = |error| ProviderError::Io {
                path: path.clone(),
                error,
            };
            let bytes = std::fs::read(&path).map_err(io)?;
            let meta = std::fs::metadata(&path).map_err(io)?;
            let actual: [u8; 32] = Sha256::digest(&bytes).into();
            if actual != *digest {
                return Err(self.bad(format!("`{name}` changed after it was hashed")));
            }
            use std::os::unix::fs::PermissionsExt;
            out.push((
                name.clone(),
                bytes,
                file_mode(Some(meta.permissions().mode())),
            ));
        }
        Ok(out)
    }

    /// Writes the provider's executable into `dir` (made if missing) and returns its path.
    /// It is written under a temporary name and renamed, so `dir` never holds half of it.
    pub fn unpack(&self, dir: &Path) -> Result<PathBuf, ProviderError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| ProviderError::Io { path, error }
        };
        // The executable is read (and every entry name checked) before anything is made.
        let (name, bytes, mode) = match &self.package {
            Package::Zip { bytes, .. } => self.executable_in_zip(bytes)?,
            Package::Dir { path } => self.executable_in_dir(path)?,
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let target = dir.join(&name);
        let partial = dir.join(format!(".{name}.partial"));
        let write = || -> std::io::Result<()> {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(&partial)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            // The mode given at creation is masked by the umask; the package's is kept.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(mode))?;
            std::fs::rename(&partial, &target)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            ProviderError::Io {
                path: target.clone(),
                error: e,
            }
        })?;
        Ok(target)
    }

    /// The executable's name, bytes and mode, from a zip whose every name is safe.
    fn executable_in_zip(&self, zip: &[u8]) -> Result<(String, Vec<u8>, u32), ProviderError> {
        let mut archive =
            zip::ZipArchive::new(std::io::Cursor::new(zip)).map_err(|e| self.bad(e))?;
        let mut found = Vec::new();
        for i in 0..archive.len() {
            let entry = archive.by_index_raw(i).map_err(|e| self.bad(e))?;
            let name = entry.name().map_err(|e| self.bad(e))?.into_owned();
            if !safe_entry_name(&name) {
                return Err(self.bad(format!(
                    "the zip entry `{}` would be written outside the directory it is unpacked \
                     into; the package is refused",
                    name.escape_debug()
                )));
            }
            if self.is_executable(&name) {
                found.push(i);
            }
        }
        let index = match found.as_slice() {
            [one] => *one,
            [] => {
                return Err(self.bad(format!(
                    "the zip holds no executable {}_v{}",
                    self.provider.binary_prefix(),
                    self.version
                )))
            }
            _ => return Err(self.bad("the zip holds more than one provider executable")),
        };
        let mut entry = archive.by_index(index).map_err(|e| self.bad(e))?;
        let name = entry.name().map_err(|e| self.bad(e))?.into_owned();
        let mode = entry.unix_mode();
        if mode.is_some_and(|m| m & 0o170000 == 0o120000) {
            return Err(self.bad(format!("`{name}` is a symbolic link, not an executable")));
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).map_err(|e| self.bad(e))?;
        Ok((name, bytes, file_mode(mode)))
    }

    /// The executable's name, bytes and mode, from an unpacked package, checked against its
    /// sha256 as it was hashed.
    fn executable_in_dir(&self, dir: &Path) -> Result<(String, Vec<u8>, u32), ProviderError> {
        let found: Vec<&String> = self
            .files
            .keys()
            .filter(|name| self.is_executable(name))
            .collect();
        let name = match found.as_slice() {
            [one] => (*one).clone(),
            [] => {
                return Err(self.bad(format!(
                    "the directory holds no executable {}_v{}",
                    self.provider.binary_prefix(),
                    self.version
                )))
            }
            _ => return Err(self.bad("the directory holds more than one provider executable")),
        };
        let path = dir.join(&name);
        let io = |error| ProviderError::Io {
            path: path.clone(),
            error,
        };
        let bytes = std::fs::read(&path).map_err(io)?;
        let meta = std::fs::metadata(&path).map_err(io)?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if self.files.get(&name) != Some(&digest) {
            return Err(self.bad(format!("`{name}` changed after it was hashed")));
        }
        use std::os::unix::fs::PermissionsExt;
        Ok((name, bytes, file_mode(Some(meta.permissions().mode()))))
    }
}

/// Whether `name` is the executable of `provider` `version` in its package:
/// `terraform-provider-TYPE_vVERSION`, maybe with a protocol suffix (`_x5`), as HashiCorp's
/// and OpenTofu's tools name it. For a caller finding it again in an unpacked copy.
pub fn is_executable_name(provider: &ProviderAddress, version: &Version, name: &str) -> bool {
    let stem = format!("{}_v{}", provider.binary_prefix(), version);
    name == stem
        || name
            .strip_prefix(&stem)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|suffix| {
                !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
            })
}

/// The mode an executable is written with: the package's permission bits without
/// set-id bits or write for others, and executable when the package records no mode (a zip
/// made on Windows) — it is the program we were asked for.
fn file_mode(mode: Option<u32>) -> u32 {
    match mode {
        Some(m) if m & 0o777 != 0 => m & 0o755,
        _ => 0o755,
    }
}

/// A zip entry name that stays inside the directory: relative, `/`-separated, with no
/// `..`, `.` or empty component (a trailing `/` marks a directory), no backslash (a
/// separator on Windows) and no NUL.
fn safe_entry_name(name: &str) -> bool {
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    !trimmed.is_empty()
        && !name.contains('\\')
        && !name.contains('\0')
        && trimmed
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_inside_the_directory_are_safe() {
        for ok in ["a", "a/b", "dir/", "terraform-provider-x_v1.0.0", "a..b"] {
            assert!(safe_entry_name(ok), "{ok}");
        }
        for bad in [
            "",
            "/",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\\..\\x",
            "C:\\x",
            "a\0b",
        ] {
            assert!(!safe_entry_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn modes_keep_the_exec_bit_and_drop_the_rest() {
        assert_eq!(file_mode(Some(0o100755)), 0o755);
        assert_eq!(file_mode(Some(0o104777)), 0o755);
        assert_eq!(file_mode(Some(0o100644)), 0o644);
        assert_eq!(file_mode(None), 0o755);
    }
}
