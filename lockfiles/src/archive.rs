//! Debian archive indices, parsed (pure; [`crate::fetch`] gets the bytes).
//!
//! The chain of trust the lockfile relies on: the `InRelease` file (signed; its sha256 is
//! the archive pin) lists the sha256 and size of every `Packages` index, and each
//! `Packages` stanza lists the sha256 and size of its `.deb`. So a package pin is only as
//! good as the Release it came from, and [`crate::fetch`] checks each link.
//!
//! Both files are deb822: paragraphs of `Field: value` lines separated by blank lines, a
//! line starting with a space or tab continuing the previous field.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::ArchivePin;
use crate::version::{self, Relation};

/// A malformed index: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line in the (de-armoured) file.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// A relationship field (`Depends`, `Provides`, …) envc cannot read: what is wrong, and the
/// relation it is wrong in (as written, `[arch]` and `<profile>` lists dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelationError {
    /// No package name, or one with whitespace in it.
    Malformed { relation: String },
    /// A `(` with no `)` at the end.
    Unclosed { relation: String },
    /// An operator that is none of `<<`, `<=`, `=`, `>=`, `>>` (nor the obsolete `<`, `>`).
    UnknownRelation { operator: String, relation: String },
    /// An operator with no version after it.
    NoVersion { relation: String },
}

impl fmt::Display for RelationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelationError::Malformed { relation } => write!(f, "malformed relation {relation:?}"),
            RelationError::Unclosed { relation } => write!(f, "unclosed `(` in {relation:?}"),
            RelationError::UnknownRelation { operator, relation } => {
                write!(f, "unknown relation {operator:?} in {relation:?}")
            }
            RelationError::NoVersion { relation } => {
                write!(f, "relation without a version in {relation:?}")
            }
        }
    }
}

impl std::error::Error for RelationError {}

// ------------------------------------------------------------------------------ deb822 --

/// One paragraph: its first line, and its fields as slices of the input. A field's value is
/// everything after the colon, continuation lines included (newlines kept).
#[derive(Debug)]
pub struct Paragraph<'a> {
    pub line: usize,
    pub fields: Vec<(&'a str, &'a str)>,
}

impl<'a> Paragraph<'a> {
    /// A field's value with surrounding whitespace removed (field names are
    /// case-insensitive in deb822).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// The continuation lines of a multi-line field (the first line is usually empty), each
    /// trimmed, empty ones skipped.
    pub fn lines(&self, name: &str) -> Vec<&'a str> {
        self.get(name)
            .map(|v| v.lines().map(str::trim).filter(|l| !l.is_empty()).collect())
            .unwrap_or_default()
    }
}

/// Splits deb822 text into paragraphs. Comment lines (`#`) are skipped; a continuation line
/// before any field, or a line without a colon, is an error.
pub fn paragraphs(text: &str) -> Result<Vec<Paragraph<'_>>, ParseError> {
    let mut out = Vec::new();
    let mut current: Option<Paragraph<'_>> = None;
    // Byte range of the value of the field being read, extended over continuation lines.
    let mut value: Option<(usize, usize)> = None;
    let mut offset = 0;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        let end = start + line.len();
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) && !line.trim().is_empty() {
            match value.as_mut() {
                Some((_, e)) => *e = end,
                None => {
                    return Err(ParseError {
                        line: i + 1,
                        message: "continuation line outside a field".into(),
                    })
                }
            }
            continue;
        }
        // Whatever comes now ends the field being read.
        if let (Some(p), Some((s, e))) = (current.as_mut(), value.take()) {
            if let Some(last) = p.fields.last_mut() {
                last.1 = &text[s..e];
            }
        }
        if line.trim().is_empty() {
            out.extend(current.take());
            continue;
        }
        let Some(colon) = line.find(':') else {
            return Err(ParseError {
                line: i + 1,
                message: format!("expected `Field: value`, found {line:?}"),
            });
        };
        current
            .get_or_insert_with(|| Paragraph {
                line: i + 1,
                fields: Vec::new(),
            })
            .fields
            .push((&line[..colon], ""));
        value = Some((start + colon + 1, end));
    }
    if let (Some(p), Some((s, e))) = (current.as_mut(), value.take()) {
        if let Some(last) = p.fields.last_mut() {
            last.1 = &text[s..e];
        }
    }
    out.extend(current);
    Ok(out)
}

// ----------------------------------------------------------------------------- Release --

/// A suite's Release file: what it is, and the hash and size of each index it lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub origin: String,
    pub suite: String,
    pub codename: String,
    pub date: String,
    pub architectures: Vec<String>,
    pub components: Vec<String>,
    /// Whether indices may be fetched under `by-hash/SHA256/HASH`, which a mirror
    /// updating in place cannot change under our feet.
    pub acquire_by_hash: bool,
    /// Path under `dists/SUITE/` → (sha256, size).
    pub sha256: BTreeMap<String, (String, u64)>,
}

/// Strips an OpenPGP clear-signature (as in `InRelease`) and returns the signed text,
/// dash-escaping undone; text that is not clear-signed is returned as it is. The signature
/// is not checked here: see [`crate::fetch::verify_signature`].
pub fn strip_clearsign(text: &str) -> Result<String, ParseError> {
    let mut lines = text.lines().enumerate();
    let Some((_, first)) = lines.next() else {
        return Ok(String::new());
    };
    if first.trim_end() != "-----BEGIN PGP SIGNED MESSAGE-----" {
        return Ok(text.to_string());
    }
    // Armour headers (`Hash: SHA512`) end at the first empty line.
    for (_, l) in lines.by_ref() {
        if l.trim().is_empty() {
            break;
        }
    }
    let mut out = String::new();
    for (_, l) in lines {
        if l.trim_end() == "-----BEGIN PGP SIGNATURE-----" {
            return Ok(out);
        }
        out.push_str(l.strip_prefix("- ").unwrap_or(l));
        out.push('\n');
    }
    Err(ParseError {
        line: text.lines().count(),
        message: "clear-signed text without its signature block (truncated download?)".into(),
    })
}

/// Parses an `InRelease` (clear-signed) or `Release` file.
pub fn parse_release(text: &str) -> Result<Release, ParseError> {
    let body = strip_clearsign(text)?;
    let paras = paragraphs(&body)?;
    let Some(p) = paras.first() else {
        return Err(ParseError {
            line: 1,
            message: "empty Release file".into(),
        });
    };
    let words = |name: &str| -> Vec<String> {
        p.get(name)
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut sha256 = BTreeMap::new();
    for entry in p.lines("SHA256") {
        let parts: Vec<&str> = entry.split_whitespace().collect();
        let parsed = match parts.as_slice() {
            [hash, size, path] if crate::text::is_sha256(hash) => size
                .parse::<u64>()
                .ok()
                .map(|s| (path.to_string(), (hash.to_string(), s))),
            _ => None,
        };
        let Some((path, value)) = parsed else {
            return Err(ParseError {
                line: p.line,
                message: format!("malformed SHA256 entry {entry:?} (expected `HASH SIZE PATH`)"),
            });
        };
        sha256.insert(path, value);
    }
    if sha256.is_empty() {
        return Err(ParseError {
            line: p.line,
            message: "the Release file lists no SHA256 hashes, so nothing it names can be verified"
                .into(),
        });
    }
    let field = |name: &str| p.get(name).unwrap_or("").to_string();
    Ok(Release {
        origin: field("Origin"),
        suite: field("Suite"),
        codename: field("Codename"),
        date: field("Date"),
        architectures: words("Architectures"),
        components: words("Components"),
        acquire_by_hash: p
            .get("Acquire-By-Hash")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes")),
        sha256,
    })
}

// ---------------------------------------------------------------------------- Packages --

/// One alternative of a dependency: `libc6 (>= 2.34)`, `python3:any`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    pub constraint: Option<(Relation, String)>,
}

impl fmt::Display for Dep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.constraint {
            Some((rel, v)) => write!(f, "{} ({} {v})", self.name, rel.as_str()),
            None => f.write_str(&self.name),
        }
    }
}

/// `a | b (>= 1)`: satisfied by any one of them.
pub type Alternatives = Vec<Dep>;

/// What a `Provides:` entry offers: a virtual name, with a version when written
/// `name (= 1.0)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provide {
    pub name: String,
    pub version: Option<String>,
}

/// The fields of a `Packages` stanza that locking uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stanza {
    pub package: String,
    pub version: String,
    pub architecture: String,
    pub filename: String,
    pub size: u64,
    pub sha256: String,
    pub depends: Vec<Alternatives>,
    pub pre_depends: Vec<Alternatives>,
    pub provides: Vec<Provide>,
    pub essential: bool,
    pub priority: Option<String>,
    /// The archive it comes from, in an archive merged of several ([`Archive::merged`]);
    /// `None`: the archive that holds it.
    pub origin: Option<String>,
}

/// Parses a `Packages` index. A stanza without one of the fields a pin needs (Package,
/// Version, Architecture, Filename, Size, SHA256) is an error: a pin could not be made of it.
pub fn parse_packages(text: &str) -> Result<Vec<Stanza>, ParseError> {
    paragraphs(text)?.iter().map(stanza).collect()
}

fn stanza(p: &Paragraph<'_>) -> Result<Stanza, ParseError> {
    let err = |message: String| ParseError {
        line: p.line,
        message,
    };
    let package = p
        .get("Package")
        .ok_or_else(|| err("stanza without a Package field".into()))?;
    let need = |name: &str| {
        p.get(name)
            .ok_or_else(|| err(format!("package {package}: no {name} field")))
    };
    let version = need("Version")?;
    if !version::is_valid(version) {
        return Err(err(format!(
            "package {package}: invalid version {version:?}"
        )));
    }
    let size = need("Size")?;
    let size = size
        .parse()
        .map_err(|_| err(format!("package {package}: Size {size:?} is not a number")))?;
    let sha256 = need("SHA256")?;
    if !crate::text::is_sha256(sha256) {
        return Err(err(format!(
            "package {package}: SHA256 {sha256:?} is not a sha256"
        )));
    }
    let relations = |name: &str| {
        p.get(name)
            .map(|v| parse_relations(v).map_err(|m| err(format!("package {package}: {name}: {m}"))))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let provides = parse_provides(p.get("Provides").unwrap_or(""))
        .map_err(|m| err(format!("package {package}: Provides: {m}")))?;
    Ok(Stanza {
        package: package.to_string(),
        version: version.to_string(),
        architecture: need("Architecture")?.to_string(),
        filename: need("Filename")?.to_string(),
        size,
        sha256: sha256.to_string(),
        depends: relations("Depends")?,
        pre_depends: relations("Pre-Depends")?,
        provides,
        essential: p
            .get("Essential")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes")),
        priority: p.get("Priority").map(str::to_string),
        origin: None,
    })
}

/// Parses a `Provides` field: `a, b (= 1.0)`.
pub fn parse_provides(value: &str) -> Result<Vec<Provide>, RelationError> {
    Ok(parse_relations(value)?
        .into_iter()
        .flatten()
        .map(|d| Provide {
            name: d.name,
            version: d
                .constraint
                .filter(|(r, _)| *r == Relation::Equal)
                .map(|(_, v)| v),
        })
        .collect())
}

/// Parses a relationship field: `a (>= 1) | b, c:any [amd64] <!nocheck>`. Architecture
/// qualifiers (`:any`), restriction lists and build profiles are dropped: binary indices of
/// one architecture do not need them.
pub fn parse_relations(value: &str) -> Result<Vec<Alternatives>, RelationError> {
    let mut out = Vec::new();
    for group in value.split(',') {
        let group = group.trim();
        if group.is_empty() {
            continue;
        }
        let mut alts = Vec::new();
        for alt in group.split('|') {
            alts.push(parse_dep(alt.trim())?);
        }
        out.push(alts);
    }
    Ok(out)
}

fn parse_dep(s: &str) -> Result<Dep, RelationError> {
    // Drop `[arch list]` and `<profiles>`; `<` inside the version's parentheses is a
    // relation.
    let mut clean = String::with_capacity(s.len());
    let mut in_paren = false;
    let mut skip_to: Option<char> = None;
    for c in s.chars() {
        if let Some(close) = skip_to {
            if c == close {
                skip_to = None;
            }
            continue;
        }
        match c {
            '(' => in_paren = true,
            ')' => in_paren = false,
            '[' if !in_paren => skip_to = Some(']'),
            '<' if !in_paren => skip_to = Some('>'),
            _ => {}
        }
        if skip_to.is_none() {
            clean.push(c);
        }
    }
    let s = clean.trim();
    let (name, rest) = match s.find('(') {
        Some(i) => (s[..i].trim(), Some(&s[i + 1..])),
        None => (s, None),
    };
    let name = name.split(':').next().unwrap_or(name).trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(RelationError::Malformed {
            relation: s.to_string(),
        });
    }
    let constraint = match rest {
        None => None,
        Some(rest) => {
            let inner = rest
                .strip_suffix(')')
                .ok_or_else(|| RelationError::Unclosed {
                    relation: s.to_string(),
                })?
                .trim();
            let op_len = inner
                .find(|c: char| !matches!(c, '<' | '>' | '='))
                .unwrap_or(inner.len());
            let op = Relation::parse(&inner[..op_len]).ok_or_else(|| {
                RelationError::UnknownRelation {
                    operator: inner[..op_len].to_string(),
                    relation: s.to_string(),
                }
            })?;
            let v = inner[op_len..].trim();
            if v.is_empty() {
                return Err(RelationError::NoVersion {
                    relation: s.to_string(),
                });
            }
            Some((op, v.to_string()))
        }
    };
    Ok(Dep {
        name: name.to_string(),
        constraint,
    })
}

// ----------------------------------------------------------------------------- Archive --

/// One suite of one mirror for one architecture, indexed for resolution: what
/// [`crate::fetch`] produces and [`crate::resolve`] reads.
#[derive(Clone, Debug)]
pub struct Archive {
    /// The pin this state would be locked as (its `name` may be changed by the caller).
    pub pin: ArchivePin,
    pub release: Release,
    /// The Release file as served (the clear-signed `InRelease` when there is one), for
    /// [`crate::fetch::verify_signature`].
    pub release_raw: Vec<u8>,
    /// Package name → its stanzas, newest version first.
    packages: BTreeMap<String, Vec<Stanza>>,
    /// Virtual name → (providing package, provided version), from the newest version of
    /// each package (the one apt would install).
    providers: BTreeMap<String, Vec<(String, Option<String>)>>,
}

impl Archive {
    /// Indexes stanzas. Stanzas of another architecture than the pin's (or `all`) are left
    /// out: they cannot be installed.
    pub fn new(
        pin: ArchivePin,
        release: Release,
        release_raw: Vec<u8>,
        stanzas: Vec<Stanza>,
    ) -> Archive {
        let mut packages: BTreeMap<String, Vec<Stanza>> = BTreeMap::new();
        for s in stanzas {
            if s.architecture == pin.architecture || s.architecture == "all" {
                packages.entry(s.package.clone()).or_default().push(s);
            }
        }
        for versions in packages.values_mut() {
            versions.sort_by(|a, b| version::compare(&b.version, &a.version));
            versions.dedup_by(|a, b| a.version == b.version);
        }
        let mut providers: BTreeMap<String, Vec<(String, Option<String>)>> = BTreeMap::new();
        for (name, versions) in &packages {
            for p in &versions[0].provides {
                providers
                    .entry(p.name.clone())
                    .or_default()
                    .push((name.clone(), p.version.clone()));
            }
        }
        Archive {
            pin,
            release,
            release_raw,
            packages,
            providers,
        }
    }

    /// Every version of a package, newest first (empty if the package is not there).
    pub fn versions(&self, name: &str) -> &[Stanza] {
        self.packages.get(name).map_or(&[], Vec::as_slice)
    }

    /// The version apt would install: the newest.
    pub fn candidate(&self, name: &str) -> Option<&Stanza> {
        self.versions(name).first()
    }

    /// The packages that provide a virtual name, sorted by name.
    pub fn providers(&self, name: &str) -> &[(String, Option<String>)] {
        self.providers.get(name).map_or(&[], Vec::as_slice)
    }

    /// Every package name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.packages.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.packages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
    }

    /// This archive and `others` as apt sees them together (a vendor's archive beside the
    /// Debian suite it builds for): every stanza, each knowing its archive; of two stanzas
    /// of one version, this archive's. Named and pinned as this one.
    pub fn merged(&self, others: &[&Archive]) -> Archive {
        let stanzas = std::iter::once(self)
            .chain(others.iter().copied())
            .flat_map(|a| {
                a.packages.values().flatten().map(|s| Stanza {
                    origin: Some(s.origin.clone().unwrap_or_else(|| a.pin.name.clone())),
                    ..s.clone()
                })
            })
            .collect();
        Archive::new(
            self.pin.clone(),
            self.release.clone(),
            self.release_raw.clone(),
            stanzas,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INRELEASE: &str = "\
-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA512

Origin: Debian
Label: Debian
Suite: stable
Version: 12.13
Codename: bookworm
Changelogs: https://metadata.ftp-master.debian.org/changelogs/@CHANGEPATH@_changelog
Date: Sat, 10 Jan 2026 10:14:31 UTC
Acquire-By-Hash: yes
No-Support-for-Architecture-all: Packages
Architectures: all amd64 arm64
Components: main contrib non-free-firmware non-free
Description: Debian 12.13 Released 10 January 2026
MD5Sum:
 0ed6d4c8891eb86358b94bb35d9e4da4  1484322 contrib/Contents-all
SHA256:
 0000000000000000000000000000000000000000000000000000000000000001 1234 main/binary-amd64/Packages
 0000000000000000000000000000000000000000000000000000000000000002   99 main/binary-amd64/Packages.gz
-----BEGIN PGP SIGNATURE-----

iQIzBAEBCgAdFiEE
-----END PGP SIGNATURE-----
";

    #[test]
    fn reads_a_clear_signed_release() {
        let r = parse_release(INRELEASE).unwrap();
        assert_eq!(r.origin, "Debian");
        assert_eq!(r.suite, "stable");
        assert_eq!(r.codename, "bookworm");
        assert_eq!(r.date, "Sat, 10 Jan 2026 10:14:31 UTC");
        assert_eq!(r.architectures, ["all", "amd64", "arm64"]);
        assert_eq!(
            r.components,
            ["main", "contrib", "non-free-firmware", "non-free"]
        );
        assert!(r.acquire_by_hash);
        assert_eq!(
            r.sha256.get("main/binary-amd64/Packages.gz"),
            Some(&(format!("{}2", "0".repeat(63)), 99))
        );
        assert_eq!(r.sha256.len(), 2);
        // Dash-escaped lines (any line that starts with a dash) are un-escaped.
        let signed = "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\na\n- -b\n- c\n\
                      -----BEGIN PGP SIGNATURE-----\nxyz\n-----END PGP SIGNATURE-----\n";
        assert_eq!(strip_clearsign(signed).unwrap(), "a\n-b\nc\n");
        assert_eq!(strip_clearsign("a\n").unwrap(), "a\n");
    }

    #[test]
    fn reads_a_plain_release_and_refuses_broken_ones() {
        let plain = "Origin: Test\nSuite: s\nSHA256:\n ".to_string()
            + &"a".repeat(64)
            + " 3 main/binary-amd64/Packages\n";
        assert_eq!(parse_release(&plain).unwrap().suite, "s");
        for (text, expected) in [
            ("", "line 1: empty Release file"),
            (
                "Origin: x\n",
                "line 1: the Release file lists no SHA256 hashes, so nothing it names can be verified",
            ),
            (
                "Origin: x\nSHA256:\n abc 3 main/Packages\n",
                "line 1: malformed SHA256 entry \"abc 3 main/Packages\" (expected `HASH SIZE PATH`)",
            ),
            ("Origin x\n", "line 1: expected `Field: value`, found \"Origin x\""),
            (" Origin: x\n", "line 1: continuation line outside a field"),
            (
                "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nOrigin: x\n",
                "line 4: clear-signed text without its signature block (truncated download?)",
            ),
        ] {
            assert_eq!(parse_release(text).unwrap_err().to_string(), expected, "{text:?}");
        }
    }

    /// Parses one stanza's relationship field and renders it back, canonically.
    fn check(value: &str, expected: &str) {
        let rendered = match parse_relations(value) {
            Ok(groups) => groups
                .iter()
                .map(|alts| {
                    alts.iter()
                        .map(|d| match &d.constraint {
                            Some((r, v)) => format!("{} ({} {v})", d.name, r.as_str()),
                            None => d.name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(" | ")
                })
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(rendered, expected, "{value:?}");
    }

    #[test]
    fn reads_relationship_fields() {
        check("libc6 (>= 2.34)", "libc6 (>= 2.34)");
        check("libc6(>=2.34),zlib1g", "libc6 (>= 2.34), zlib1g");
        check(
            "debconf (>= 0.5) | debconf-2.0, libpam0g (>= 0.99.7.1)",
            "debconf (>= 0.5) | debconf-2.0, libpam0g (>= 0.99.7.1)",
        );
        check("python3:any, perl:native (>> 5)", "python3, perl (>> 5)");
        check(
            "foo [amd64 arm64] (<< 2~), bar <!nocheck>",
            "foo (<< 2~), bar",
        );
        check("foo (< 2)", "foo (<= 2)");
        check("a,\n b ,", "a, b");
        check("", "");
        check("foo (>= 1", "error: unclosed `(` in \"foo (>= 1\"");
        check("foo (~ 1)", "error: unknown relation \"\" in \"foo (~ 1)\"");
        check(
            "foo (>=)",
            "error: relation without a version in \"foo (>=)\"",
        );
        check("foo bar", "error: malformed relation \"foo bar\"");
    }

    const PACKAGES: &str = "\
Package: hello
Version: 2.10-3
Installed-Size: 281
Maintainer: Santiago Vila <sanvila@debian.org>
Architecture: amd64
Depends: libc6 (>= 2.34)
Description: example package based on GNU hello
 The GNU hello program produces a familiar, friendly greeting.
 .
 Seriously, though: this is an example.
Filename: pool/main/h/hello/hello_2.10-3_amd64.deb
Size: 53064
SHA256: 3cb7b64fbe0ef7bd6ad6a4e1a8ee8ab4f36a1e2c6e39c0a1da8fcc3e9ebc5e3e
Priority: optional

Package: mawk
Version: 1.3.4.20200120-3.1
Architecture: amd64
Pre-Depends: libc6 (>= 2.34)
Provides: awk
Priority: required
Filename: pool/main/m/mawk/mawk_1.3.4.20200120-3.1_amd64.deb
Size: 119088
SHA256: 8efe4a3b5a1dbd5b8d16ac9e6e4f3e5a4ef6e1c5e0e6c2e0d7c7e1d1e5f3a4b2
Essential: yes
";

    #[test]
    fn reads_packages_stanzas() {
        let s = parse_packages(PACKAGES).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].package, "hello");
        assert_eq!(s[0].version, "2.10-3");
        assert_eq!(s[0].filename, "pool/main/h/hello/hello_2.10-3_amd64.deb");
        assert_eq!(s[0].size, 53064);
        assert_eq!(s[0].depends.len(), 1);
        assert!(!s[0].essential);
        assert_eq!(s[1].pre_depends[0][0].name, "libc6");
        assert_eq!(
            s[1].provides,
            [Provide {
                name: "awk".into(),
                version: None
            }]
        );
        assert!(s[1].essential);
        assert_eq!(s[1].priority.as_deref(), Some("required"));

        let paras = paragraphs(PACKAGES).unwrap();
        assert_eq!(paras[1].line, 16);
        assert!(paras[0]
            .get("description")
            .unwrap()
            .ends_with("this is an example."));
    }

    #[test]
    fn refuses_stanzas_a_pin_cannot_be_made_of() {
        for (edit, expected) in [
            (
                ("Size: 53064\n", ""),
                "line 1: package hello: no Size field",
            ),
            (("Size: 53064", "Size: big"), "line 1: package hello: Size \"big\" is not a number"),
            (
                ("SHA256: 3cb7", "SHA256: 3cb"),
                "line 1: package hello: SHA256 \"3cbb64fbe0ef7bd6ad6a4e1a8ee8ab4f36a1e2c6e39c0a1da8fcc3e9ebc5e3e\" is not a sha256",
            ),
            (("Package: mawk\n", ""), "line 16: stanza without a Package field"),
            (
                ("Provides: awk", "Provides: awk ("),
                "line 16: package mawk: Provides: unclosed `(` in \"awk (\"",
            ),
        ] {
            let text = PACKAGES.replacen(edit.0, edit.1, 1);
            assert_eq!(parse_packages(&text).unwrap_err().to_string(), expected);
        }
    }
}
