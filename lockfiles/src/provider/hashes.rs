//! The two hash schemes of `.terraform.lock.hcl`, so that a package verifies here as it
//! does in Terraform and OpenTofu:
//!
//! - `zh:` — the sha256 of the package's zip, in hex: what the registry's signed
//!   `SHA256SUMS` lists, so a lock holds one for every platform's package.
//! - `h1:` — Go's `dirhash.Hash1` over the package's files: for each file, sorted by name
//!   (bytewise), the line `"{sha256 hex}  {name}\n"`; then the sha256 of those lines, in
//!   standard base64. Computed over a zip's entries ([`h1_of_zip`], as `dirhash.HashZip`)
//!   or over the unpacked directory ([`h1_of_dir`], as `dirhash.HashDir` with no prefix),
//!   so a mirror's unpacked copy verifies against the hash of the zip it came from.
//!
//! One difference from Go stays Go's: `HashZip` counts a zip's directory entries
//! (`dir/`) as empty files and `HashDir` does not see directories, so a zip holding
//! directory entries has two different `h1:`s. Provider packages hold none.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine;
use sha2::{Digest, Sha256};

/// A package hash as a lockfile writes it: `zh:HEX` or `h1:BASE64`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PackageHash {
    /// sha256 of the zip.
    Zh([u8; 32]),
    /// `dirhash.Hash1` of the package's files.
    H1([u8; 32]),
}

impl PackageHash {
    pub fn zh(zip: &[u8]) -> PackageHash {
        PackageHash::Zh(Sha256::digest(zip).into())
    }

    pub fn is_h1(&self) -> bool {
        matches!(self, PackageHash::H1(_))
    }
}

impl fmt::Display for PackageHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackageHash::Zh(d) => {
                f.write_str("zh:")?;
                d.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            PackageHash::H1(d) => write!(
                f,
                "h1:{}",
                base64::engine::general_purpose::STANDARD.encode(d)
            ),
        }
    }
}

/// Ordered by their text, as Terraform sorts a provider's `hashes` list (`h1:` first).
impl Ord for PackageHash {
    fn cmp(&self, other: &Self) -> Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for PackageHash {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A hash that is not `zh:` + 64 hex digits or `h1:` + the base64 of 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadHash {
    pub input: String,
}

impl fmt::Display for BadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a provider package hash\n  hint: hashes are `zh:` and 64 hex digits, \
             or `h1:` and 44 base64 characters, as .terraform.lock.hcl writes them \
             (other schemes are not read)",
            self.input
        )
    }
}

impl std::error::Error for BadHash {}

impl FromStr for PackageHash {
    type Err = BadHash;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadHash {
            input: s.to_string(),
        };
        if let Some(hex) = s.strip_prefix("zh:") {
            return parse_hex(hex).map(PackageHash::Zh).ok_or_else(bad);
        }
        if let Some(b64) = s.strip_prefix("h1:") {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| bad())?;
            return <[u8; 32]>::try_from(bytes.as_slice())
                .map(PackageHash::H1)
                .map_err(|_| bad());
        }
        Err(bad())
    }
}

/// 64 lowercase hex digits (as `SHA256SUMS` and `zh:` write them) as 32 bytes.
pub(crate) fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *slot = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Why a package's `h1:` could not be computed.
#[derive(Debug)]
pub enum HashError {
    /// The zip cannot be read.
    Zip(String),
    /// A name Hash1 cannot list (a newline in it), or a name twice in one zip.
    Name(String),
    /// A file of an unpacked package cannot be read.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashError::Zip(detail) => write!(f, "not a readable zip: {detail}"),
            HashError::Name(detail) => write!(f, "{detail}"),
            HashError::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for HashError {}

/// A package's files: each one's name (`/`-separated, below the package's top) and sha256.
pub type FileDigests = BTreeMap<String, [u8; 32]>;

/// `dirhash.Hash1` of files given as name → sha256.
pub fn h1_of_files(files: &FileDigests) -> Result<PackageHash, HashError> {
    let mut summary = String::new();
    // A BTreeMap of Strings iterates in bytewise order: Go's sort.Strings.
    for (name, digest) in files {
        if name.contains('\n') {
            return Err(HashError::Name(format!(
                "the file name {name:?} holds a newline, which an h1: hash cannot list"
            )));
        }
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        summary.push_str(&format!("{hex}  {name}\n"));
    }
    Ok(PackageHash::H1(Sha256::digest(summary.as_bytes()).into()))
}

/// `h1:` of a zip: every entry, by its name in the zip, as `dirhash.HashZip`.
pub fn h1_of_zip(zip: &[u8]) -> Result<PackageHash, HashError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map_err(|e| HashError::Zip(e.to_string()))?;
    let mut files = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| HashError::Zip(e.to_string()))?;
        let name = entry
            .name()
            .map_err(|e| HashError::Zip(e.to_string()))?
            .into_owned();
        let digest = sha256_of(&mut entry).map_err(|e| HashError::Zip(format!("{name}: {e}")))?;
        if files.insert(name.clone(), digest).is_some() {
            return Err(HashError::Name(format!(
                "the zip holds `{name}` twice, so which one counts is not defined"
            )));
        }
    }
    h1_of_files(&files)
}

/// The sha256 of everything `r` yields, read in pieces (a provider is tens of MB).
fn sha256_of(r: &mut impl Read) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize().into());
        }
        hasher.update(&buf[..n]);
    }
}

/// `h1:` of an unpacked package: every file under `dir` (following symlinks, as Go's
/// `os.Open` does), named by its path below `dir` with `/`, as `dirhash.HashDir`.
pub fn h1_of_dir(dir: &Path) -> Result<PackageHash, HashError> {
    h1_of_files(&dir_files(dir)?)
}

/// Every file under `dir`, by its path below `dir` with `/`, and its sha256: what
/// [`h1_of_dir`] hashes.
pub fn dir_files(dir: &Path) -> Result<FileDigests, HashError> {
    let mut files = BTreeMap::new();
    walk(dir, "", &mut files)?;
    Ok(files)
}

fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, [u8; 32]>) -> Result<(), HashError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| HashError::Io { path, error }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        // Go's filepath.Walk does not descend into a symlinked directory (it lstats),
        // but lists a symlink to a file as that file.
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            walk(&path, &rel, files)?;
        } else {
            let mut file = std::fs::File::open(&path).map_err(io(&path))?;
            files.insert(rel, sha256_of(&mut file).map_err(io(&path))?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A published vector, checked independently of this code: go.sum files across the Go
    /// ecosystem record `golang.org/x/text v0.3.0/go.mod
    /// h1:NqM8EUOU14njkJ3fqMW+pc6Ldnwhi/IjpwHt7yyuwOQ=`, the Hash1 of one file named
    /// `go.mod` holding the go.mod the go command synthesises for a module without one.
    /// Recomputed with coreutils before it was written here:
    /// `printf '%s  go.mod\n' "$(printf 'module golang.org/x/text\n' | sha256sum | cut -d' ' -f1)"
    /// | sha256sum | cut -d' ' -f1 | xxd -r -p | base64`.
    #[test]
    fn h1_matches_a_published_go_sum_line() {
        let mut files = BTreeMap::new();
        files.insert(
            "go.mod".to_string(),
            Sha256::digest(b"module golang.org/x/text\n").into(),
        );
        let h1 = h1_of_files(&files).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            h1.to_string(),
            "h1:NqM8EUOU14njkJ3fqMW+pc6Ldnwhi/IjpwHt7yyuwOQ="
        );
    }

    #[test]
    fn hashes_read_back_and_sort_as_terraform_writes_them() {
        let zh = PackageHash::zh(b"");
        assert_eq!(
            zh.to_string(),
            "zh:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let h1: PackageHash = "h1:NqM8EUOU14njkJ3fqMW+pc6Ldnwhi/IjpwHt7yyuwOQ="
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(zh.to_string().parse::<PackageHash>().ok(), Some(zh.clone()));
        let mut both = vec![zh.clone(), h1.clone()];
        both.sort();
        assert_eq!(both, vec![h1, zh]);
        for bad in [
            "zh:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "zh:e3b0",
            "h1:not base64!",
            "h1:AAAA",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            let e = bad.parse::<PackageHash>().err();
            assert!(e.is_some_and(|e| e.to_string().contains("hint:")), "{bad}");
        }
    }

    #[test]
    fn a_newline_in_a_name_is_refused() {
        let mut files = BTreeMap::new();
        files.insert("a\nb".to_string(), [0u8; 32]);
        assert!(matches!(h1_of_files(&files), Err(HashError::Name(_))));
    }
}
