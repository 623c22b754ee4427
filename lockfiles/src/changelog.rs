//! What a lock change fixes: for each package that moved, the CVE ids and Debian bug numbers
//! that the changelog entries between its old and new versions name, read from the new
//! `.deb`'s own `usr/share/doc/PACKAGE/changelog.Debian.gz` (pure: the caller hands over the
//! `.deb`s it has, the store's copies of what `envc lock` fetched to pin them; no network
//! service is asked).
//!
//! A Debian changelog is a list of entries, newest first, each opened by a line
//! `PACKAGE (VERSION) DISTRIBUTIONS; urgency=…`. The entries between two versions are those
//! newer than the old version and not newer than the new one. A CVE id is `CVE-YYYY-N…`
//! anywhere in an entry; a bug number is what a `Closes: #N, #M` names (Debian policy's
//! syntax, case-insensitive).

use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;

use crate::deb::{data_file, DebError};
use crate::model::{Lockfile, PackagePin};
use crate::version;

/// One changelog entry between two versions: what it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub version: String,
    /// Sorted, each once.
    pub cves: Vec<String>,
    /// Debian bug numbers its `Closes:` names, sorted.
    pub bugs: Vec<u64>,
}

/// One package that moved, and what its changelog says the move fixes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub package: String,
    pub from: String,
    pub to: String,
    /// The entries between the versions, newest first; or why they are not known.
    pub entries: Result<Vec<Entry>, Unavailable>,
}

/// Why a moved package's changelog could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Its new `.deb` is not at hand (not in the store).
    NoDeb,
    /// The `.deb` has no `changelog.Debian.gz` of its own (its docs are another package's).
    NoChangelog,
    /// The `.deb` or its changelog cannot be read.
    Unreadable(String),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NoDeb => f.write_str(
                "its .deb is not in the store (`envc lock` keeps the .debs it pins, `envc build` \
                 those it installs)",
            ),
            Unavailable::NoChangelog => f.write_str("its .deb has no changelog.Debian.gz"),
            Unavailable::Unreadable(e) => write!(f, "its changelog cannot be read: {e}"),
        }
    }
}

/// A changelog, ungzipped, from a `.deb`'s bytes: `None` when it has none.
pub fn changelog(deb: &[u8], package: &str) -> Result<Option<String>, DebError> {
    // A native package (apt, dpkg) has only `changelog.gz`.
    let mut found = None;
    for name in ["changelog.Debian.gz", "changelog.gz"] {
        let path = format!("usr/share/doc/{package}/{name}");
        if let Some(gz) = data_file(deb, &path)? {
            found = Some((path, gz));
            break;
        }
    }
    let Some((path, gz)) = found else {
        return Ok(None);
    };
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(gz.as_slice())
        .read_to_string(&mut text)
        .map_err(|e| DebError::Decompress {
            member: path,
            detail: e.to_string(),
        })?;
    Ok(Some(text))
}

/// The entries of `text` newer than `from` and not newer than `to`, newest first.
pub fn between(text: &str, from: &str, to: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut current: Option<Entry> = None;
    for line in text.lines() {
        if let Some(v) = header_version(line) {
            out.extend(current.take());
            let wanted = version::compare(v, from).is_gt() && version::compare(v, to).is_le();
            current = wanted.then(|| Entry {
                version: v.to_string(),
                cves: Vec::new(),
                bugs: Vec::new(),
            });
            continue;
        }
        if let Some(e) = current.as_mut() {
            e.cves.extend(cves(line));
            e.bugs.extend(closes(line));
        }
    }
    out.extend(current);
    for e in &mut out {
        e.cves.sort();
        e.cves.dedup();
        e.bugs.sort_unstable();
        e.bugs.dedup();
    }
    out
}

/// `nginx (1.22.1-9+deb12u11) bookworm-security; urgency=medium` → `1.22.1-9+deb12u11`.
fn header_version(line: &str) -> Option<&str> {
    if line.starts_with([' ', '\t']) || line.is_empty() {
        return None;
    }
    let (_, rest) = line.split_once(" (")?;
    let (v, rest) = rest.split_once(')')?;
    (rest.contains(';') && version::is_valid(v)).then_some(v)
}

/// The CVE ids a line names: `CVE-2025-23419`.
fn cves(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("CVE-") {
        let after = &rest[i + 4..];
        let year: String = after.chars().take_while(char::is_ascii_digit).collect();
        let tail = &after[year.len()..];
        let number: String = tail
            .strip_prefix('-')
            .map(|t| t.chars().take_while(char::is_ascii_digit).collect())
            .unwrap_or_default();
        if year.len() == 4 && number.len() >= 4 {
            out.push(format!("CVE-{year}-{number}"));
        }
        rest = after;
    }
    out
}

/// The bug numbers a line's `Closes:` names: `Closes: #1, #2` (also `bug#3`, `# 4`).
fn closes(line: &str) -> Vec<u64> {
    let lower = line.to_ascii_lowercase();
    let Some(i) = lower.find("closes:") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for part in lower[i + "closes:".len()..].split(',') {
        let part = part.trim().trim_start_matches("bug").trim_start();
        let Some(number) = part.strip_prefix('#') else {
            break;
        };
        let digits: String = number
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        match digits.parse() {
            Ok(n) => out.push(n),
            Err(_) => break,
        }
    }
    out
}

/// The packages that moved from `old` to `new` (the packages the environment names, their
/// closures and the images' sets), each once by name and version, with what the new `.deb`'s
/// changelog says it fixes. `deb` gives the bytes of a pinned `.deb` when they are at hand.
pub fn fixes(
    old: &Lockfile,
    new: &Lockfile,
    deb: impl Fn(&PackagePin) -> Option<Vec<u8>>,
) -> Vec<Fix> {
    let pins = |l: &Lockfile| -> Vec<PackagePin> {
        let images = l.images.iter().flat_map(|i| i.packages.iter());
        l.packages.iter().chain(images).cloned().collect()
    };
    let before = pins(old);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for n in pins(new) {
        let Some(o) = before
            .iter()
            .find(|o| o.name == n.name && version::compare(&o.version, &n.version).is_lt())
        else {
            continue;
        };
        if !seen.insert((n.name.clone(), o.version.clone(), n.version.clone())) {
            continue;
        }
        let entries = match deb(&n) {
            None => Err(Unavailable::NoDeb),
            Some(bytes) => match changelog(&bytes, &n.name) {
                Ok(Some(text)) => Ok(between(&text, &o.version, &n.version)),
                Ok(None) => Err(Unavailable::NoChangelog),
                Err(e) => Err(Unavailable::Unreadable(e.to_string())),
            },
        };
        out.push(Fix {
            package: n.name.clone(),
            from: o.version.clone(),
            to: n.version.clone(),
            entries,
        });
    }
    out.sort_by(|a, b| (&a.package, &a.to).cmp(&(&b.package, &b.to)));
    out
}

impl Fix {
    /// Every CVE id of its entries, sorted, each once.
    pub fn cves(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .entries
            .iter()
            .flatten()
            .flat_map(|e| e.cves.iter().map(String::as_str))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Every bug number of its entries, sorted, each once.
    pub fn bugs(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self
            .entries
            .iter()
            .flatten()
            .flat_map(|e| e.bugs.clone())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

impl fmt::Display for Fix {
    /// `` `nginx` 1.22.1-9+deb12u9 → 1.22.1-9+deb12u11: 14 CVEs (CVE-…, …); bugs #1, #2 ``
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {} → {}: ", self.package, self.from, self.to)?;
        if let Err(why) = &self.entries {
            return write!(f, "changelog not read: {why}");
        }
        let (cves, bugs) = (self.cves(), self.bugs());
        let plural = |n: usize, one: &str, many: &str| {
            if n == 1 {
                format!("1 {one}")
            } else {
                format!("{n} {many}")
            }
        };
        let mut parts = Vec::new();
        if !cves.is_empty() {
            parts.push(format!(
                "{} ({})",
                plural(cves.len(), "CVE", "CVEs"),
                cves.join(", ")
            ));
        }
        if !bugs.is_empty() {
            let list: Vec<String> = bugs.iter().map(|b| format!("#{b}")).collect();
            parts.push(format!(
                "{} ({})",
                plural(bugs.len(), "bug", "bugs"),
                list.join(", ")
            ));
        }
        if parts.is_empty() {
            f.write_str("no CVE or bug named by its changelog")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGELOG: &str = "\
nginx (1.22.1-9+deb12u11) bookworm-security; urgency=medium

  * Fix CVE-2025-53859 (mail, SMTP auth) and CVE-2026-1642.
  * Closes: #1111111, #1111112

 -- Jan Mojžíš <janmojzis@debian.org>  Sat, 07 Feb 2026 10:00:00 +0100

nginx (1.22.1-9+deb12u10) bookworm-security; urgency=medium

  * d/p/CVE-2025-23419.patch: TLS session resumption (closes: bug#1099999)
  * mention CVE-2025-53859 again, and a stray CVE-20 that is not one

 -- Jan Mojžíš <janmojzis@debian.org>  Sat, 01 Feb 2025 10:00:00 +0100

nginx (1.22.1-9+deb12u9) bookworm; urgency=medium

  * CVE-2024-7347 (closes: #1000000)

 -- Jan Mojžíš <janmojzis@debian.org>  Sat, 01 Jan 2025 10:00:00 +0100
";

    #[test]
    fn names_the_cves_and_bugs_of_the_entries_between_two_versions() {
        let got = between(CHANGELOG, "1.22.1-9+deb12u9", "1.22.1-9+deb12u11");
        assert_eq!(
            got,
            [
                Entry {
                    version: "1.22.1-9+deb12u11".into(),
                    cves: vec!["CVE-2025-53859".into(), "CVE-2026-1642".into()],
                    bugs: vec![1111111, 1111112],
                },
                Entry {
                    version: "1.22.1-9+deb12u10".into(),
                    cves: vec!["CVE-2025-23419".into(), "CVE-2025-53859".into()],
                    bugs: vec![1099999],
                },
            ]
        );
        // Only what is newer than the old version and not newer than the new one.
        let one = between(CHANGELOG, "1.22.1-9+deb12u10", "1.22.1-9+deb12u10");
        assert!(one.is_empty());
        let fix = Fix {
            package: "nginx".into(),
            from: "1.22.1-9+deb12u9".into(),
            to: "1.22.1-9+deb12u11".into(),
            entries: Ok(got),
        };
        assert_eq!(
            fix.to_string(),
            "`nginx` 1.22.1-9+deb12u9 → 1.22.1-9+deb12u11: 3 CVEs (CVE-2025-23419, \
             CVE-2025-53859, CVE-2026-1642); 3 bugs (#1099999, #1111111, #1111112)"
        );
        let none = Fix {
            entries: Err(Unavailable::NoDeb),
            ..fix
        };
        assert!(none.to_string().ends_with("changelog not read: its .deb is not in the store (`envc lock` keeps the .debs it pins, `envc build` those it installs)"));
    }
}
