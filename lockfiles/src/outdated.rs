//! `envc lock --outdated`: the pins that have newer versions in their suites, security
//! updates first.
//!
//! Offline, against the indices the last `envc lock` read: every lock (and `--outdated
//! --refresh`) keeps, per archive, the versions it served ([`SuiteIndex`], one small text
//! file each under the store's `indices/`, [`save`]); [`load`] reads those a lockfile's
//! archives need back, and [`outdated`] compares (pure). A package pinned from a Debian
//! suite is compared with the newest version of the suite and the suites beside it (the
//! lockfile's `with`, and those the last lock read beside it), as apt's candidate; a
//! vendor's, with its archive. A newer version from a security suite is a security update.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::model::{ArchivePin, Lockfile, PackagePin, PinKey};
use crate::version;

/// What one archive served when it was last read: its versions by package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteIndex {
    /// The archive pin's name (`debian/bookworm-security`, a vendor's name).
    pub archive: String,
    /// A Debian security suite's (`bookworm-security`).
    pub security: bool,
    /// The suites read beside it (a Debian suite's `-updates`, `-security`).
    pub with: Vec<String>,
    /// Its Release's sha256 and `Date`, as read.
    pub release_sha256: String,
    pub date: String,
    /// Package → every version it served, newest first.
    pub versions: BTreeMap<String, Vec<String>>,
}

impl SuiteIndex {
    /// An empty index of the archive `pin` pins.
    pub fn new(pin: &ArchivePin) -> SuiteIndex {
        SuiteIndex {
            archive: pin.name.clone(),
            security: pin.is_security(),
            with: pin.with.clone(),
            release_sha256: pin.release_sha256.clone(),
            date: pin.date.clone(),
            versions: BTreeMap::new(),
        }
    }

    /// The newest version it has of a package.
    pub fn newest(&self, package: &str) -> Option<&str> {
        self.versions
            .get(package)
            .and_then(|v| v.iter().max_by(|a, b| version::compare(a, b)))
            .map(String::as_str)
    }
}

/// A pin that has a newer version in its suites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outdated {
    /// The pin that holds the package: `package:nginx`, or `image:NAME` for a package of an
    /// image's set.
    pub key: String,
    pub package: String,
    pub from: String,
    pub to: String,
    /// The archive the newer version is in.
    pub archive: String,
    /// It is in a security suite.
    pub security: bool,
}

impl fmt::Display for Outdated {
    /// `` `package:nginx` 1.22.1-9+deb12u9 → 1.22.1-9+deb12u11 (debian/bookworm-security) ``;
    /// a package of an image's set names itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key == PinKey::Package(self.package.clone()).to_string() {
            write!(f, "`{}` ", self.key)?;
        } else {
            write!(f, "`{}`: `{}` ", self.key, self.package)?;
        }
        write!(f, "{} → {} ({})", self.from, self.to, self.archive)
    }
}

/// Why the indices to compare with are not at hand.
#[derive(Debug)]
pub enum IndexError {
    /// No `envc lock` kept this archive's index (in the store's `indices/`).
    Missing { archive: String },
    /// The file cannot be read.
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file is not an index this envc wrote.
    Corrupt { path: PathBuf, line: usize },
    /// It cannot be written.
    Unwritable {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Missing { archive } => write!(
                f,
                "no index of archive `{archive}` is kept here (the last `envc lock` keeps what \
                 it read in the store's indices/)\n  hint: read the archives' current indices \
                 with `envc lock --outdated FILE --refresh`"
            ),
            IndexError::Unreadable { path, error } => write!(
                f,
                "cannot read {}: {error}\n  hint: `envc lock --outdated FILE --refresh` reads \
                 the archives again",
                path.display()
            ),
            IndexError::Corrupt { path, line } => write!(
                f,
                "{}:{line}: not an index envc wrote\n  hint: `envc lock --outdated FILE \
                 --refresh` reads the archives again and replaces it",
                path.display()
            ),
            IndexError::Unwritable { path, error } => {
                write!(f, "cannot write {}: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for IndexError {}

/// The first line of every index file: what wrote it, and its format.
const MAGIC: &str = "envc-index 1";

/// An archive's index file in `dir`: its name with every byte other than a letter, a digit,
/// `-` and `_` escaped (`debian/bookworm` → `debian%2Fbookworm`).
pub fn path_of(dir: &Path, archive: &str) -> PathBuf {
    let mut name = String::new();
    for b in archive.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    dir.join(format!("{name}.index"))
}

impl SuiteIndex {
    /// Its text: a header (`key value` lines), a blank line, then one line per package: its
    /// name and its versions, newest first. The same index gives the same bytes.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{MAGIC}\narchive {}\nsecurity {}\nwith {}\nrelease_sha256 {}\ndate {}\n\n",
            self.archive,
            if self.security { "yes" } else { "no" },
            self.with.join(" "),
            self.release_sha256,
            self.date
        );
        for (name, versions) in &self.versions {
            let mut versions = versions.clone();
            versions.sort_by(|a, b| version::compare(b, a));
            versions.dedup();
            out += &format!("{name} {}\n", versions.join(" "));
        }
        out
    }

    /// Reads [`SuiteIndex::to_text`]'s form; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<SuiteIndex, IndexError> {
        let corrupt = |line: usize| IndexError::Corrupt {
            path: path.to_path_buf(),
            line,
        };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        if lines.next().map(|(_, l)| l) != Some(MAGIC) {
            return Err(corrupt(1));
        }
        let mut header: BTreeMap<&str, &str> = BTreeMap::new();
        for (n, line) in lines.by_ref() {
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            if header.insert(k, v).is_some() {
                return Err(corrupt(n));
            }
        }
        let field = |k: &str| header.get(k).map(|v| v.to_string()).ok_or(corrupt(1));
        let mut index = SuiteIndex {
            archive: field("archive")?,
            security: field("security")? == "yes",
            with: field("with")?
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            release_sha256: field("release_sha256")?,
            date: field("date")?,
            versions: BTreeMap::new(),
        };
        for (n, line) in lines {
            let mut words = line.split(' ');
            let name = words.next().filter(|w| !w.is_empty()).ok_or(corrupt(n))?;
            let versions: Vec<String> = words.map(str::to_string).collect();
            if versions.is_empty() || versions.iter().any(|v| !version::is_valid(v)) {
                return Err(corrupt(n));
            }
            index.versions.insert(name.to_string(), versions);
        }
        Ok(index)
    }
}

/// Keeps `indices` in `dir`, one file each, each written whole (a temporary file renamed
/// over the old one): a reader sees the last lock's index or the one before, never a part.
pub fn save(dir: &Path, indices: &[SuiteIndex]) -> Result<(), IndexError> {
    std::fs::create_dir_all(dir).map_err(|error| IndexError::Unwritable {
        path: dir.to_path_buf(),
        error,
    })?;
    for index in indices {
        let path = path_of(dir, &index.archive);
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(index.to_text().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(error) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(IndexError::Unwritable { path, error });
        }
    }
    Ok(())
}

/// The indices `lock`'s archives need, from `dir`: each archive it pins, and the suites the
/// last lock read beside each.
pub fn load(dir: &Path, lock: &Lockfile) -> Result<BTreeMap<String, SuiteIndex>, IndexError> {
    let mut out: BTreeMap<String, SuiteIndex> = BTreeMap::new();
    let mut todo: Vec<String> = lock.archives.iter().map(|a| a.name.clone()).collect();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let path = path_of(dir, &name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(IndexError::Missing { archive: name })
            }
            Err(error) => return Err(IndexError::Unreadable { path, error }),
        };
        let index = SuiteIndex::parse(&text, &path)?;
        if index.archive != name {
            return Err(IndexError::Corrupt { path, line: 2 });
        }
        todo.extend(index.with.iter().cloned());
        out.insert(name, index);
    }
    Ok(out)
}

/// The pins of `lock` (packages, and the packages of images' sets) that have a newer
/// version in the archives they may come from, security updates first, then by key and
/// package. An archive without an index is an error (`indices` comes from [`load`]).
pub fn outdated(
    lock: &Lockfile,
    indices: &BTreeMap<String, SuiteIndex>,
) -> Result<Vec<Outdated>, IndexError> {
    let mut out = Vec::new();
    let pins = lock
        .packages
        .iter()
        .map(|p| (p.key().to_string(), p))
        .chain(lock.images.iter().flat_map(|i| {
            let key = i.key().to_string();
            i.packages.iter().map(move |p| (key.clone(), p))
        }));
    for (key, p) in pins {
        if let Some(newer) = newer(lock, indices, p)? {
            out.push(Outdated {
                key,
                package: p.name.clone(),
                from: p.version.clone(),
                to: newer.0,
                security: newer.1.security,
                archive: newer.1.archive.clone(),
            });
        }
    }
    out.sort_by(|a, b| (!a.security, &a.key, &a.package).cmp(&(!b.security, &b.key, &b.package)));
    Ok(out)
}

/// The newest version of `p` across its suite's archives, when newer than the pin, and the
/// archive that has it.
fn newer<'i>(
    lock: &Lockfile,
    indices: &'i BTreeMap<String, SuiteIndex>,
    p: &PackagePin,
) -> Result<Option<(String, &'i SuiteIndex)>, IndexError> {
    let main = lock.main_of(&p.archive);
    let mut names: std::collections::BTreeSet<String> = lock.group(main).into_iter().collect();
    if let Some(i) = indices.get(main) {
        names.extend(i.with.iter().cloned());
    }
    let mut best: Option<(String, &SuiteIndex)> = None;
    for name in names {
        let Some(index) = indices.get(&name) else {
            return Err(IndexError::Missing { archive: name });
        };
        if let Some(v) = index.newest(&p.name) {
            if best
                .as_ref()
                .is_none_or(|(b, _)| version::compare(v, b).is_gt())
            {
                best = Some((v.to_string(), index));
            }
        }
    }
    Ok(best.filter(|(v, _)| version::compare(v, &p.version).is_gt()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    fn index(archive: &str, security: bool, versions: &[(&str, &str)]) -> SuiteIndex {
        let mut i = SuiteIndex {
            archive: archive.into(),
            security,
            with: Vec::new(),
            release_sha256: "a".repeat(64),
            date: "Sat, 17 Jan 2026 10:14:31 UTC".into(),
            versions: BTreeMap::new(),
        };
        for (n, v) in versions {
            i.versions
                .entry(n.to_string())
                .or_default()
                .push(v.to_string());
        }
        i
    }

    #[test]
    fn lists_newer_versions_security_first_across_the_suites_beside() {
        let lock = sample();
        let mut main = index(
            "debian/bookworm",
            false,
            &[
                ("hello", "2.10-3"),
                ("libgreet1", "1.0-2"),
                ("libc6", "2.36-9+deb12u13"),
            ],
        );
        // The lockfile pins bookworm alone (an older envc): the last lock read the
        // security suite beside it, and that counts.
        main.with = vec!["debian/bookworm-security".into()];
        let security = index(
            "debian/bookworm-security",
            true,
            &[("hello", "2.10-3+deb12u1"), ("libc6", "2.36-9+deb12u14")],
        );
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &[main.clone(), security.clone()]).unwrap();
        let loaded = load(dir.path(), &lock).unwrap();
        assert_eq!(loaded["debian/bookworm"], main);
        assert_eq!(loaded["debian/bookworm-security"], security);
        let got: Vec<String> = outdated(&lock, &loaded)
            .unwrap()
            .iter()
            .map(|o| format!("{}{o}", if o.security { "security " } else { "" }))
            .collect();
        assert_eq!(
            got,
            [
                "security `image:debian-12`: `libc6` 2.36-9+deb12u13 → 2.36-9+deb12u14 \
                 (debian/bookworm-security)",
                "security `package:hello` 2.10-3 → 2.10-3+deb12u1 (debian/bookworm-security)",
                "security `package:libc6` 2.36-9+deb12u13 → 2.36-9+deb12u14 \
                 (debian/bookworm-security)",
                "`package:libgreet1` 1.0-1 → 1.0-2 (debian/bookworm)",
            ]
        );
        // The same index, the same bytes.
        assert_eq!(
            SuiteIndex::parse(&security.to_text(), Path::new("x")).unwrap(),
            security
        );
    }

    #[test]
    fn a_missing_or_broken_index_says_how_to_read_the_archives_again() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path(), &sample()).unwrap_err().to_string();
        assert!(
            e.starts_with("no index of archive `debian/bookworm` is kept here")
                && e.contains("`envc lock --outdated FILE --refresh`"),
            "{e}"
        );
        std::fs::write(
            path_of(dir.path(), "debian/bookworm"),
            "envc-index 1\narchive x\n",
        )
        .unwrap();
        let e = load(dir.path(), &sample()).unwrap_err().to_string();
        assert!(
            e.contains("debian%2Fbookworm.index:1: not an index envc wrote"),
            "{e}"
        );
    }
}
