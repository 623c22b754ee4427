//! `envc lock diff OLD NEW`: what a lockfile change means, pin by pin, in text that reads
//! the same in a terminal and in a pull-request comment (plain lines, markdown lists).
//!
//! A pin is added, removed, or moved (same key, other content). A package that moved
//! without changing version is called out: the same version with other bytes is the one
//! change a reviewer must not wave through.

use std::collections::BTreeMap;
use std::fmt;

use crate::changelog::Fix;
use crate::model::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockDiff {
    /// Sorted by key.
    pub changes: Vec<Change>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub kind: ChangeKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// With a one-line summary of the new pin.
    Added(String),
    /// With a one-line summary of the old pin.
    Removed(String),
    /// One line saying what moved, and detail lines (an image's package changes).
    Moved {
        summary: String,
        details: Vec<String>,
    },
}

impl LockDiff {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    fn count(&self, f: impl Fn(&ChangeKind) -> bool) -> usize {
        self.changes.iter().filter(|c| f(&c.kind)).count()
    }
}

/// Compares two lockfiles pin by pin.
pub fn diff(old: &Lockfile, new: &Lockfile) -> LockDiff {
    let old = pins(old);
    let new = pins(new);
    let mut changes = Vec::new();
    for (key, o) in &old {
        match new.get(key) {
            None => changes.push(Change {
                key: key.clone(),
                kind: ChangeKind::Removed(o.summary()),
            }),
            Some(n) if n != o => changes.push(Change {
                key: key.clone(),
                kind: moved(o, n),
            }),
            Some(_) => {}
        }
    }
    for (key, n) in &new {
        if !old.contains_key(key) {
            changes.push(Change {
                key: key.clone(),
                kind: ChangeKind::Added(n.summary()),
            });
        }
    }
    changes.sort_by(|a, b| a.key.cmp(&b.key));
    LockDiff { changes }
}

/// Any pin, by reference, so that one comparison covers every kind.
#[derive(PartialEq, Eq)]
enum Pin<'a> {
    Epoch(u64),
    Stdlib(&'a str),
    Version(u32),
    Archive(&'a ArchivePin),
    Package(&'a PackagePin),
    Image(&'a ImagePin),
    Tool(&'a ToolPin),
    CloudImage(&'a CloudImagePin),
    Provider(&'a ProviderPin),
}

fn pins(lock: &Lockfile) -> BTreeMap<String, Pin<'_>> {
    let mut m = BTreeMap::new();
    m.insert("version".to_string(), Pin::Version(lock.version));
    m.insert(
        PinKey::SourceDateEpoch.to_string(),
        Pin::Epoch(lock.source_date_epoch),
    );
    m.insert(PinKey::Stdlib.to_string(), Pin::Stdlib(&lock.stdlib));
    for a in &lock.archives {
        m.insert(a.key().to_string(), Pin::Archive(a));
    }
    for p in &lock.packages {
        m.insert(p.key().to_string(), Pin::Package(p));
    }
    for i in &lock.images {
        m.insert(i.key().to_string(), Pin::Image(i));
    }
    for t in &lock.tools {
        m.insert(t.key().to_string(), Pin::Tool(t));
    }
    for c in &lock.cloud_images {
        m.insert(c.key().to_string(), Pin::CloudImage(c));
    }
    for p in &lock.providers {
        m.insert(p.key().to_string(), Pin::Provider(p));
    }
    m
}

/// The first 12 hex digits: enough to tell hashes apart in review.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

impl Pin<'_> {
    fn summary(&self) -> String {
        match self {
            Pin::Epoch(e) => e.to_string(),
            Pin::Stdlib(h) => short(h).to_string(),
            Pin::Version(v) => format!("format {v}"),
            Pin::Archive(a) => format!(
                "{} {} {} [{}], Release {} of {}{}",
                a.mirror,
                a.suite,
                a.architecture,
                a.components.join(" "),
                short(&a.release_sha256),
                a.date,
                a.signed_by
                    .as_ref()
                    .map_or(String::new(), |f| format!(", signed by key {f}"))
            ),
            Pin::Package(p) => format!("{} ({}, {})", p.version, p.architecture, p.archive),
            Pin::Image(i) => format!("{} packages from {}", i.packages.len(), i.archive),
            Pin::Tool(t) => t.version.clone(),
            Pin::CloudImage(c) => format!(
                "{} (owner {}, pattern {:?}, {})",
                ami(c),
                c.owner,
                c.pattern,
                c.architecture
            ),
            Pin::Provider(p) => format!(
                "{} (constraints {}, {})",
                p.version,
                p.constraints,
                plural(p.hashes.len(), "hash", "hashes")
            ),
        }
    }
}

/// `what: old → new` for each field that differs.
fn fields(changes: &[(&str, String, String)]) -> Vec<String> {
    changes
        .iter()
        .filter(|(_, o, n)| o != n)
        .map(|(what, o, n)| {
            if what.is_empty() {
                format!("{o} → {n}")
            } else {
                format!("{what} {o} → {n}")
            }
        })
        .collect()
}

/// The suites a Debian suite's pin holds beside it, for a diff line.
fn suites(with: &[String]) -> String {
    if with.is_empty() {
        "none".into()
    } else {
        with.join(" ")
    }
}

fn moved(old: &Pin<'_>, new: &Pin<'_>) -> ChangeKind {
    let (summary, details) = match (old, new) {
        (Pin::Package(o), Pin::Package(n)) => {
            let mut parts = fields(&[
                ("", o.version.clone(), n.version.clone()),
                ("archive", o.archive.clone(), n.archive.clone()),
                (
                    "architecture",
                    o.architecture.clone(),
                    n.architecture.clone(),
                ),
            ]);
            if o.version == n.version && (o.sha256 != n.sha256 || o.size != n.size) {
                let size = if o.size == n.size {
                    String::new()
                } else {
                    format!(", {} → {} bytes", o.size, n.size)
                };
                parts.insert(
                    0,
                    format!(
                        "{}: same version, other bytes (sha256 {} → {}{size}): check why before \
                         merging",
                        o.version,
                        short(&o.sha256),
                        short(&n.sha256),
                    ),
                );
            } else if parts.is_empty() {
                parts.extend(fields(&[("file", o.filename.clone(), n.filename.clone())]));
            }
            // What it brings with it; the packages of the closure have their own lines.
            let oc = o.closure.clone().unwrap_or_default();
            let nc = n.closure.clone().unwrap_or_default();
            parts.extend(fields(&[(
                "starts from",
                oc.starts_from.join(" "),
                nc.starts_from.join(" "),
            )]));
            // `sign` and each of `these` that `those` lacks.
            let lacking = |sign: char, these: &[String], those: &[String]| -> Vec<String> {
                let only = these.iter().filter(|m| !those.contains(m));
                only.map(|m| format!("{sign}{m}")).collect()
            };
            let dropped = lacking('-', &oc.packages, &nc.packages);
            let added = lacking('+', &nc.packages, &oc.packages);
            if !added.is_empty() || !dropped.is_empty() {
                parts.push(format!("closure {}", [dropped, added].concat().join(" ")));
            }
            (parts.join(", "), Vec::new())
        }
        (Pin::Archive(o), Pin::Archive(n)) => {
            let parts = fields(&[
                ("mirror", o.mirror.clone(), n.mirror.clone()),
                ("suite", o.suite.clone(), n.suite.clone()),
                (
                    "architecture",
                    o.architecture.clone(),
                    n.architecture.clone(),
                ),
                ("components", o.components.join(" "), n.components.join(" ")),
                (
                    "Release",
                    short(&o.release_sha256).to_string(),
                    short(&n.release_sha256).to_string(),
                ),
                ("dated", o.date.clone(), n.date.clone()),
                ("with", suites(&o.with), suites(&n.with)),
                (
                    "signed by key",
                    o.signed_by
                        .clone()
                        .unwrap_or_else(|| "Debian's keyring".into()),
                    n.signed_by
                        .clone()
                        .unwrap_or_else(|| "Debian's keyring".into()),
                ),
            ]);
            (parts.join(", "), Vec::new())
        }
        (Pin::Image(o), Pin::Image(n)) => image(o, n),
        (Pin::Tool(o), Pin::Tool(n)) => (format!("{} → {}", o.version, n.version), Vec::new()),
        (Pin::CloudImage(o), Pin::CloudImage(n)) => {
            let mut parts = Vec::new();
            if (&o.id, &o.image_name, &o.created) != (&n.id, &n.image_name, &n.created) {
                parts.push(format!("{} → {}", ami(o), ami(n)));
            }
            // What the source names it by: a move here is the source's, not AWS's.
            parts.extend(fields(&[
                ("owner", o.owner.clone(), n.owner.clone()),
                ("pattern", o.pattern.clone(), n.pattern.clone()),
                (
                    "architecture",
                    o.architecture.clone(),
                    n.architecture.clone(),
                ),
                ("provider", o.provider.clone(), n.provider.clone()),
            ]));
            (parts.join(", "), Vec::new())
        }
        (Pin::Provider(o), Pin::Provider(n)) => provider(o, n),
        (o, n) => (format!("{} → {}", o.summary(), n.summary()), Vec::new()),
    };
    ChangeKind::Moved { summary, details }
}

/// A provider's move: its version (`0.1.0 → 0.2.0`), its constraints, and its hashes, each
/// one dropped or added on a detail line. Other hashes at the same version are called out
/// as a package's other bytes are: a release re-published under its old number.
fn provider(o: &ProviderPin, n: &ProviderPin) -> (String, Vec<String>) {
    // Sorted here too: the lines must not depend on the order a model was built in.
    let text = |p: &ProviderPin| -> Vec<String> {
        let mut hs: Vec<String> = p.hashes.iter().map(ToString::to_string).collect();
        hs.sort();
        hs.dedup();
        hs
    };
    let (old, new) = (text(o), text(n));
    let dropped: Vec<&String> = old.iter().filter(|h| !new.contains(h)).collect();
    let added: Vec<&String> = new.iter().filter(|h| !old.contains(h)).collect();
    let mut parts = Vec::new();
    if o.version != n.version {
        parts.push(format!("{} → {}", o.version, n.version));
    } else if !dropped.is_empty() || !added.is_empty() {
        parts.push(format!(
            "{}: same version, other hashes: check why before merging",
            o.version
        ));
    }
    parts.extend(fields(&[(
        "constraints",
        o.constraints.to_string(),
        n.constraints.to_string(),
    )]));
    if !dropped.is_empty() || !added.is_empty() {
        parts.push(format!(
            "hashes: {} dropped, {} added",
            dropped.len(),
            added.len()
        ));
    }
    let details = dropped
        .iter()
        .map(|h| format!("dropped {h}"))
        .chain(added.iter().map(|h| format!("added {h}")))
        .collect();
    (parts.join(", "), details)
}

/// `ami-… debian-12-amd64-20261101-1900 (2026-11-01)`: the AMI, its name and its day.
fn ami(c: &CloudImagePin) -> String {
    format!("{} {} ({})", c.id, c.image_name, c.day())
}

fn image(o: &ImagePin, n: &ImagePin) -> (String, Vec<String>) {
    let by_name = |i: &'_ ImagePin| -> BTreeMap<String, (String, String)> {
        i.packages
            .iter()
            .map(|p| (p.name.clone(), (p.version.clone(), p.sha256.clone())))
            .collect()
    };
    let (old, new) = (by_name(o), by_name(n));
    let mut details = Vec::new();
    let (mut added, mut removed, mut moved) = (0, 0, 0);
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        match (old.get(name), new.get(name)) {
            (None, Some((v, _))) => {
                added += 1;
                details.push(format!("added `{name}` {v}"));
            }
            (Some((v, _)), None) => {
                removed += 1;
                details.push(format!("removed `{name}` {v}"));
            }
            (Some((a, _)), Some((b, _))) if a != b => {
                moved += 1;
                // From another archive than before (the security suite): say which.
                let from = n.packages.iter().find(|p| &p.name == name);
                let was = o.packages.iter().find(|p| &p.name == name);
                let archive = match (was, from) {
                    (Some(w), Some(f)) if w.archive != f.archive => format!(" ({})", f.archive),
                    _ => String::new(),
                };
                details.push(format!("`{name}` {a} → {b}{archive}"));
            }
            // The archive rebuilt the same version: worth a reviewer's look.
            // Unknown bytes (a set read from format 1 or 2) are not other bytes.
            (Some((a, x)), Some((_, y))) if x != y && !x.is_empty() && !y.is_empty() => {
                moved += 1;
                details.push(format!(
                    "`{name}` {a}: same version, other bytes (sha256 {} → {}): check why \
                     before merging",
                    &x[..x.len().min(12)],
                    &y[..y.len().min(12)]
                ));
            }
            _ => {}
        }
    }
    let mut parts = fields(&[("archive", o.archive.clone(), n.archive.clone())]);
    let mut counts = Vec::new();
    for (k, what) in [(added, "added"), (removed, "removed"), (moved, "moved")] {
        if k > 0 {
            counts.push(format!("{k} {what}"));
        }
    }
    if !counts.is_empty() {
        parts.push(format!(
            "{} of {} packages changed: {}",
            added + removed + moved,
            new.len(),
            counts.join(", ")
        ));
    }
    (parts.join(", "), details)
}

impl fmt::Display for LockDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "No pin changed.");
        }
        let added = self.count(|k| matches!(k, ChangeKind::Added(_)));
        let removed = self.count(|k| matches!(k, ChangeKind::Removed(_)));
        let moved = self.count(|k| matches!(k, ChangeKind::Moved { .. }));
        let plural = if self.changes.len() == 1 {
            "pin"
        } else {
            "pins"
        };
        writeln!(
            f,
            "{} {plural} changed: {added} added, {removed} removed, {moved} moved.",
            self.changes.len()
        )?;
        for (title, which) in [("Added", 0), ("Removed", 1), ("Moved", 2)] {
            let section: Vec<&Change> = self
                .changes
                .iter()
                .filter(|c| match c.kind {
                    ChangeKind::Added(_) => which == 0,
                    ChangeKind::Removed(_) => which == 1,
                    ChangeKind::Moved { .. } => which == 2,
                })
                .collect();
            if section.is_empty() {
                continue;
            }
            writeln!(f, "\n{title}:")?;
            for c in section {
                match &c.kind {
                    ChangeKind::Added(s) | ChangeKind::Removed(s) => {
                        writeln!(f, "- `{}` {s}", c.key)?
                    }
                    ChangeKind::Moved { summary, details } => {
                        writeln!(f, "- `{}`: {summary}", c.key)?;
                        for d in details {
                            writeln!(f, "  - {d}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl LockDiff {
    /// The change as a pull request's body (`envc lock diff OLD NEW --format markdown`):
    /// a title line, a table of the packages that moved with what their changelogs say the
    /// move fixes (CVE ids and Debian bug numbers, each linked to Debian's trackers), and
    /// the pins that changed. Deterministic: the same lockfiles and `.deb`s give the same
    /// bytes.
    pub fn markdown(&self, fixes: &[Fix]) -> String {
        let mut out = String::new();
        let (cves, bugs) = fixes
            .iter()
            .fold((0, 0), |(c, b), f| (c + f.cves().len(), b + f.bugs().len()));
        let title = if self.is_empty() {
            "No pin changed".to_string()
        } else {
            let mut t = plural(self.changes.len(), "pin", "pins") + " changed";
            if !fixes.is_empty() {
                t += &format!(
                    ", {} moved: {} and {} fixed",
                    plural(fixes.len(), "package", "packages"),
                    plural(cves, "CVE", "CVEs"),
                    plural(bugs, "bug", "bugs")
                );
            }
            t
        };
        out += &format!("### envc lock: {title}\n");
        if !fixes.is_empty() {
            out += "\n| Package | From | To | Fixes |\n|---|---|---|---|\n";
            for f in fixes {
                out += &format!(
                    "| `{}` | {} | {} | {} |\n",
                    f.package,
                    f.from,
                    f.to,
                    fix_summary(f)
                );
            }
            let named: Vec<&Fix> = fixes
                .iter()
                .filter(|f| !f.cves().is_empty() || !f.bugs().is_empty())
                .collect();
            if !named.is_empty() {
                out += "\n<details><summary>What each changelog names</summary>\n\n";
                for f in named {
                    out += &format!("- `{}` {} → {}\n", f.package, f.from, f.to);
                    let cves: Vec<String> = f
                        .cves()
                        .iter()
                        .map(|c| format!("[{c}](https://security-tracker.debian.org/tracker/{c})"))
                        .collect();
                    if !cves.is_empty() {
                        out += &format!("  - CVEs: {}\n", cves.join(", "));
                    }
                    let bugs: Vec<String> = f
                        .bugs()
                        .iter()
                        .map(|b| format!("[#{b}](https://bugs.debian.org/{b})"))
                        .collect();
                    if !bugs.is_empty() {
                        out += &format!("  - Bugs: {}\n", bugs.join(", "));
                    }
                }
                out += "\n</details>\n";
            }
        }
        if !self.is_empty() {
            // The text form's sections, one level down: it is markdown already.
            let text = self.to_string();
            let body = text.split_once('\n').map_or("", |(_, rest)| rest);
            out += "\n#### Pins\n";
            for line in body.lines() {
                match line.strip_suffix(':') {
                    Some(section @ ("Added" | "Removed" | "Moved")) => {
                        out += &format!("\n{section}:\n")
                    }
                    _ if line.is_empty() => {}
                    _ => {
                        out += line;
                        out += "\n";
                    }
                }
            }
        }
        out
    }
}

/// `1 CVE`, `14 CVEs`.
fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// A table cell: what a moved package's changelog names, or why it was not read.
fn fix_summary(f: &Fix) -> String {
    match &f.entries {
        Err(why) => format!("changelog not read: {why}").replace('|', "\\|"),
        Ok(_) => {
            let (cves, bugs) = (f.cves().len(), f.bugs().len());
            match (cves, bugs) {
                (0, 0) => "no CVE or bug named".into(),
                (c, 0) => plural(c, "CVE", "CVEs"),
                (0, b) => plural(b, "bug", "bugs"),
                (c, b) => format!("{}, {}", plural(c, "CVE", "CVEs"), plural(b, "bug", "bugs")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{cloud_image, hex, image_deb, sample, sample_with_cloud};

    #[test]
    fn the_same_lockfile_has_no_change() {
        let d = diff(&sample(), &sample());
        assert!(d.is_empty());
        assert_eq!(d.to_string(), "No pin changed.\n");
    }

    #[test]
    fn renders_every_kind_of_change() {
        let old = sample();
        let mut new = sample();
        new.source_date_epoch += 86_400;
        new.archives[0].release_sha256 = hex('d');
        new.archives[0].date = "Sat, 11 Jul 2026 10:16:37 UTC".into();
        // hello moves; libc6 keeps its version but changes bytes.
        new.packages[0].version = "2.10-3+b1".into();
        new.packages[0].filename = "pool/main/h/hello/hello_2.10-3+b1_amd64.deb".into();
        new.packages[0].sha256 = hex('e');
        new.packages[1].sha256 = hex('f');
        new.packages.push(PackagePin {
            name: "curl".into(),
            archive: "debian/bookworm".into(),
            version: "7.88.1-10+deb12u14".into(),
            architecture: "amd64".into(),
            filename: "pool/main/c/curl/curl_7.88.1-10+deb12u14_amd64.deb".into(),
            size: 315_000,
            sha256: hex('1'),
            closure: Some(PackageClosure::default()),
        });
        let image = old.images[0].packages.clone();
        new.images[0].packages = vec![
            image[0].clone(),
            image_deb(
                "curl",
                "7.88.1-10+deb12u14",
                "amd64",
                "pool/main/c/curl/curl_7.88.1-10+deb12u14_amd64.deb",
                '4',
            ),
            image_deb(
                "libc6",
                "2.36-9+deb12u14",
                "amd64",
                "pool/main/g/glibc/libc6_2.36-9+deb12u14_amd64.deb",
                '5',
            ),
            PackagePin {
                sha256: hex('6'),
                ..image[3].clone()
            },
        ];
        new.tools.retain(|t| t.name != "ssh");
        new.tools[1].version = "1:7.2+dfsg-7+deb12u19".into();
        insta::assert_snapshot!(diff(&old, &new).to_string());
    }

    #[test]
    fn markdown_is_a_pull_request_body_naming_what_each_move_fixes() {
        use crate::changelog::{Entry, Unavailable};
        let old = sample();
        let mut new = sample();
        new.archives[0].release_sha256 = hex('d');
        new.packages[0].version = "2.10-3+deb12u2".into();
        new.packages[0].filename =
            "pool/updates/main/h/hello/hello_2.10-3+deb12u2_amd64.deb".into();
        new.packages[0].sha256 = hex('e');
        new.packages[1].version = "2.36-9+deb12u14".into();
        new.packages[1].sha256 = hex('f');
        let fixes = [
            Fix {
                package: "hello".into(),
                from: "2.10-3".into(),
                to: "2.10-3+deb12u2".into(),
                entries: Ok(vec![
                    Entry {
                        version: "2.10-3+deb12u2".into(),
                        cves: vec!["CVE-2026-0002".into(), "CVE-2026-0003".into()],
                        bugs: vec![1100002],
                    },
                    Entry {
                        version: "2.10-3+deb12u1".into(),
                        cves: vec!["CVE-2026-0001".into()],
                        bugs: vec![1100001],
                    },
                ]),
            },
            Fix {
                package: "libc6".into(),
                from: "2.36-9+deb12u13".into(),
                to: "2.36-9+deb12u14".into(),
                entries: Err(Unavailable::NoDeb),
            },
        ];
        let d = diff(&old, &new);
        insta::assert_snapshot!(d.markdown(&fixes));
        // Nothing moved: one line.
        assert_eq!(
            diff(&old, &old).markdown(&[]),
            "### envc lock: No pin changed\n"
        );
    }

    /// `diff(sample_with_cloud(), edit(sample_with_cloud()))` in text.
    fn check(edit: impl Fn(&mut Lockfile), expected: &str) {
        let old = sample_with_cloud();
        let mut new = old.clone();
        edit(&mut new);
        new.normalize();
        assert_eq!(diff(&old, &new).to_string(), expected);
    }

    #[test]
    fn a_cloud_image_moves_is_added_and_is_removed() {
        check(|_| {}, "No pin changed.\n");
        // AWS published a newer image and `--update` took it.
        check(
            |l| {
                l.cloud_images[0] =
                    cloud_image("eu-west-1", "ami-0b2c3d4e5f6071829", "20261101", "1900")
            },
            "1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n\
             - `cloud_image:debian-12@eu-west-1`: ami-0a1b2c3d4e5f60718 \
             debian-12-amd64-20261001-1890 (2026-10-01) → ami-0b2c3d4e5f6071829 \
             debian-12-amd64-20261101-1900 (2026-11-01)\n",
        );
        // The source moved to arm64: the pattern and the architecture say why.
        check(
            |l| {
                let c = &mut l.cloud_images[1];
                c.id = "ami-0123456789abcdef0".into();
                c.pattern = "debian-12-arm64-*".into();
                c.image_name = "debian-12-arm64-20261001-1890".into();
                c.architecture = "arm64".into();
            },
            "1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n\
             - `cloud_image:debian-12@us-east-1`: ami-0fedcba9876543210 \
             debian-12-amd64-20261001-1890 (2026-10-01) → ami-0123456789abcdef0 \
             debian-12-arm64-20261001-1890 (2026-10-01), pattern debian-12-amd64-* → \
             debian-12-arm64-*, architecture x86_64 → arm64\n",
        );
        check(
            |l| {
                l.cloud_images.remove(1);
                l.cloud_images.push(cloud_image(
                    "ap-south-1",
                    "ami-0c3d4e5f607182930",
                    "20261101",
                    "1900",
                ));
            },
            "2 pins changed: 1 added, 1 removed, 0 moved.\n\nAdded:\n\
             - `cloud_image:debian-12@ap-south-1` ami-0c3d4e5f607182930 \
             debian-12-amd64-20261101-1900 (2026-11-01) (owner 136693071363, pattern \
             \"debian-12-amd64-*\", x86_64)\n\nRemoved:\n\
             - `cloud_image:debian-12@us-east-1` ami-0fedcba9876543210 \
             debian-12-amd64-20261001-1890 (2026-10-01) (owner 136693071363, pattern \
             \"debian-12-amd64-*\", x86_64)\n",
        );
    }

    #[test]
    fn markdown_shows_a_cloud_image_move_with_the_pins() {
        let old = sample_with_cloud();
        let mut new = old.clone();
        new.cloud_images[0] = cloud_image("eu-west-1", "ami-0b2c3d4e5f6071829", "20261101", "1900");
        new.tools[0].version = "1.4.0".into();
        insta::assert_snapshot!(diff(&old, &new).markdown(&[]));
    }

    #[test]
    fn one_change_reads_as_one_pin() {
        let mut new = sample();
        new.tools[0].version = "1.4.0".into();
        insta::assert_snapshot!(diff(&sample(), &new).to_string(), @r"
        1 pin changed: 0 added, 0 removed, 1 moved.

        Moved:
        - `tool:mmdebstrap`: 1.3.5 → 1.4.0
        ");
    }
}

#[cfg(test)]
mod provider_tests {
    use super::*;
    use crate::testdata::{provider_pin, sample};

    /// `lock diff` of the sample with `old`'s providers against the sample with `new`'s.
    fn check(old: &[ProviderPin], new: &[ProviderPin], expected: &str) {
        let with = |ps: &[ProviderPin]| {
            let mut l = sample();
            l.providers = ps.to_vec();
            l
        };
        assert_eq!(diff(&with(old), &with(new)).to_string(), expected);
    }

    #[test]
    fn a_providers_version_and_hashes_show_as_they_move() {
        let zh = |b: &str| format!("zh:{}", b.repeat(32));
        let h1 = |b: &str| format!("h1:{b}");
        let at_1 = provider_pin("0.1.0", "~> 0.1.0", 0x0f);
        let at_2 = provider_pin("0.2.0", "~> 0.2.0", 0x20);
        let key = "provider:registry.envc.test/envc-test/local";
        check(
            std::slice::from_ref(&at_1),
            std::slice::from_ref(&at_1),
            "No pin changed.\n",
        );
        check(
            &[],
            std::slice::from_ref(&at_1),
            &format!(
                "1 pin changed: 1 added, 0 removed, 0 moved.\n\nAdded:\n- `{key}` 0.1.0 \
                 (constraints ~> 0.1.0, 3 hashes)\n"
            ),
        );
        check(
            std::slice::from_ref(&at_1),
            &[at_2],
            &format!(
                "1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n- `{key}`: 0.1.0 → \
                 0.2.0, constraints ~> 0.1.0 → ~> 0.2.0, hashes: 3 dropped, 3 added\n  \
                 - dropped {}\n  - dropped {}\n  - dropped {}\n  - added {}\n  - added {}\n  \
                 - added {}\n",
                h1("Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8="),
                zh("0f"),
                zh("10"),
                h1("ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICA="),
                zh("20"),
                zh("21"),
            ),
        );
        // Re-published under the same version: other bytes, called out.
        let mut rebuilt = at_1.clone();
        rebuilt.hashes[0] = crate::provider::PackageHash::Zh([0x99; 32]);
        check(
            &[at_1],
            &[rebuilt],
            &format!(
                "1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n- `{key}`: 0.1.0: same \
                 version, other hashes: check why before merging, hashes: 1 dropped, 1 added\n  \
                 - dropped {}\n  - added {}\n",
                zh("10"),
                zh("99"),
            ),
        );
    }
}
