//! What a `.deb` says of itself (pure): the control paragraph inside its bytes. A `.deb` is an
//! `ar` archive of `debian-binary`, `control.tar[.gz|.xz|.zst]` and the data; the control
//! member's `./control` is one deb822 paragraph, the package's name, version and relations.
//! The build reads it from the pinned bytes (their sha256 already checked), so that what it
//! checks before installing is exactly what dpkg will read.

use std::fmt;
use std::io::{Read, Write};

use crate::archive::{paragraphs, ParseError};
use crate::installable::{FieldError, Package, Relations};

/// A control tarball larger than this is not a package's metadata: reading it is an error.
const MAX_CONTROL: u64 = 64 << 20;

/// Why a `.deb`'s control paragraph cannot be read: the `ar` archive, its control member,
/// the tarball in it, or the paragraph itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DebError {
    /// The bytes do not start with `!<arch>\n`.
    NoArSignature,
    /// Fewer bytes left than an `ar` header holds.
    TruncatedHeader,
    /// An `ar` header without its closing magic.
    DamagedHeader,
    /// An `ar` header whose name or size is not UTF-8.
    HeaderNotText,
    /// An `ar` member size that is not a decimal number.
    SizeNotNumber,
    /// A member whose bytes end before its size says.
    MemberCutShort { member: String },
    /// No member whose name starts with `prefix` (`control.tar`).
    NoMember { prefix: String },
    /// A control member compressed in a way dpkg does not write (by its name's extension).
    UnknownCompression { member: String },
    /// The control member cannot be decompressed, or inflates past the limit.
    Decompress { member: String, detail: String },
    /// The control tarball cannot be read.
    ControlTar { detail: String },
    /// The tarball's `./control` cannot be read as text.
    ReadControl { detail: String },
    /// The tarball has no `./control`.
    NoControlFile,
    /// `./control` is not deb822.
    ControlSyntax(ParseError),
    /// `./control` holds this many paragraphs, not one.
    Paragraphs(usize),
    /// `./control` lacks a required field (`Package`, `Version`, `Architecture`).
    MissingField(&'static str),
    /// A relationship field of package `package` cannot be read.
    Relations { package: String, error: FieldError },
}

impl fmt::Display for DebError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DebError::NoArSignature => write!(f, "not a .deb: no `ar` signature"),
            DebError::TruncatedHeader => write!(f, "not a .deb: a truncated `ar` header"),
            DebError::DamagedHeader => write!(f, "not a .deb: a damaged `ar` header"),
            DebError::HeaderNotText => write!(f, "not a .deb: an `ar` header that is not text"),
            DebError::SizeNotNumber => {
                write!(f, "not a .deb: an `ar` member size that is not a number")
            }
            DebError::MemberCutShort { member } => {
                write!(f, "not a .deb: member `{member}` is cut short")
            }
            DebError::NoMember { prefix } => write!(f, "not a .deb: no `{prefix}*` member"),
            DebError::UnknownCompression { member } => {
                write!(f, "{member}: a compression dpkg does not write")
            }
            DebError::Decompress { member, detail } => write!(f, "{member}: {detail}"),
            DebError::ControlTar { detail } => write!(f, "control.tar: {detail}"),
            DebError::ReadControl { detail } => write!(f, "control.tar: ./control: {detail}"),
            DebError::NoControlFile => write!(f, "control.tar has no ./control"),
            DebError::ControlSyntax(e) => write!(f, "./control: {e}"),
            DebError::Paragraphs(n) => write!(f, "./control: {n} paragraphs, not one"),
            DebError::MissingField(name) => write!(f, "./control: no {name} field"),
            DebError::Relations { package, error } => {
                write!(f, "./control of {package}: {error}")
            }
        }
    }
}

impl std::error::Error for DebError {}

/// The package a `.deb` holds, with its relations.
pub fn control(deb: &[u8]) -> Result<Package, DebError> {
    let (name, compressed) = member(deb, "control.tar")?;
    let tar = decompress(name, compressed)?;
    let text = control_file(&tar)?;
    parse_control(&text)
}

/// The first `ar` member whose name starts with `prefix`: its name and bytes.
fn member<'a>(deb: &'a [u8], prefix: &str) -> Result<(&'a str, &'a [u8]), DebError> {
    let mut rest = deb
        .strip_prefix(b"!<arch>\n")
        .ok_or(DebError::NoArSignature)?;
    while !rest.is_empty() {
        if rest.len() < 60 {
            return Err(DebError::TruncatedHeader);
        }
        let (header, body) = rest.split_at(60);
        if &header[58..60] != b"`\n" {
            return Err(DebError::DamagedHeader);
        }
        let field = |range: std::ops::Range<usize>| {
            std::str::from_utf8(&header[range])
                .map(str::trim_end)
                .map_err(|_| DebError::HeaderNotText)
        };
        // GNU ar ends a short name with `/`; dpkg-deb writes none.
        let name = field(0..16)?.trim_end_matches('/');
        let size: usize = field(48..58)?
            .parse()
            .map_err(|_| DebError::SizeNotNumber)?;
        if body.len() < size {
            return Err(DebError::MemberCutShort {
                member: name.to_string(),
            });
        }
        if name.starts_with(prefix) {
            return Ok((name, &body[..size]));
        }
        // Members start on even offsets.
        rest = &body[(size + size % 2).min(body.len())..];
    }
    Err(DebError::NoMember {
        prefix: prefix.to_string(),
    })
}

/// The bytes of one file of a `.deb`'s data tarball (`usr/share/doc/hello/changelog.Debian.gz`,
/// without `./`), `None` when it has no such regular file. The tarball may inflate to
/// [`MAX_DATA`] at most.
pub fn data_file(deb: &[u8], path: &str) -> Result<Option<Vec<u8>>, DebError> {
    let (name, compressed) = member(deb, "data.tar")?;
    let tar = decompress_limited(name, compressed, MAX_DATA)?;
    let unreadable = |e: std::io::Error| DebError::ControlTar {
        detail: e.to_string(),
    };
    let mut archive = tar::Archive::new(tar.as_slice());
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let here = entry.path().map_err(unreadable)?;
        let here = here.strip_prefix(".").unwrap_or(&here);
        if here == std::path::Path::new(path) && entry.header().entry_type().is_file() {
            let mut out = Vec::new();
            entry
                .read_to_end(&mut out)
                .map_err(|e| DebError::ReadControl {
                    detail: e.to_string(),
                })?;
            return Ok(Some(out));
        }
    }
    Ok(None)
}

/// How far a `.deb`'s data tarball may inflate when a file is read from it (a kernel's is
/// some hundreds of MB).
pub const MAX_DATA: u64 = 2 << 30;

fn decompress(name: &str, bytes: &[u8]) -> Result<Vec<u8>, DebError> {
    decompress_limited(name, bytes, MAX_CONTROL)
}

fn decompress_limited(name: &str, bytes: &[u8], limit: u64) -> Result<Vec<u8>, DebError> {
    let mut out = Vec::new();
    let mut sink = LimitedWriter(&mut out, limit);
    let copy = |r: &mut dyn Read, sink: &mut LimitedWriter<'_>| std::io::copy(r, sink).map(drop);
    let done = match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("tar") => sink.write_all(bytes),
        Some("gz") => copy(&mut flate2::read::GzDecoder::new(bytes), &mut sink),
        Some("xz") => lzma_rs::xz_decompress(&mut { bytes }, &mut sink)
            .map_err(|e| std::io::Error::other(e.to_string())),
        Some("zst") => ruzstd::decoding::StreamingDecoder::new(bytes)
            .map_err(std::io::Error::other)
            .and_then(|mut d| copy(&mut d, &mut sink)),
        _ => {
            return Err(DebError::UnknownCompression {
                member: name.to_string(),
            })
        }
    };
    done.map_err(|e| DebError::Decompress {
        member: name.to_string(),
        detail: e.to_string(),
    })?;
    Ok(out)
}

/// A `Write` that refuses to grow past its limit ([`MAX_CONTROL`] for a control tarball).
struct LimitedWriter<'a>(&'a mut Vec<u8>, u64);

impl std::io::Write for LimitedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.0.len() + buf.len()) as u64 > self.1 {
            return Err(std::io::Error::other("archive member too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn control_file(tar: &[u8]) -> Result<String, DebError> {
    let unreadable = |e: std::io::Error| DebError::ControlTar {
        detail: e.to_string(),
    };
    let mut archive = tar::Archive::new(tar);
    let entries = archive.entries().map_err(unreadable)?;
    for entry in entries {
        let mut entry = entry.map_err(unreadable)?;
        let path = entry.path().map_err(unreadable)?;
        // dpkg-deb names it `./control`.
        let mut parts = path
            .components()
            .filter(|c| *c != std::path::Component::CurDir);
        if parts.next() == Some(std::path::Component::Normal("control".as_ref()))
            && parts.next().is_none()
        {
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|e| DebError::ReadControl {
                    detail: e.to_string(),
                })?;
            return Ok(text);
        }
    }
    Err(DebError::NoControlFile)
}

/// A control paragraph: `Package`, `Version` and `Architecture` are required.
pub fn parse_control(text: &str) -> Result<Package, DebError> {
    let paragraphs = paragraphs(text).map_err(DebError::ControlSyntax)?;
    let [p] = paragraphs.as_slice() else {
        return Err(DebError::Paragraphs(paragraphs.len()));
    };
    let need = |name: &'static str| {
        p.get(name)
            .map(str::to_string)
            .ok_or(DebError::MissingField(name))
    };
    let name = need("Package")?;
    let relations = Relations::read(|field| p.get(field).unwrap_or("")).map_err(|error| {
        DebError::Relations {
            package: name.clone(),
            error,
        }
    })?;
    Ok(Package {
        version: need("Version")?,
        architecture: need("Architecture")?,
        name,
        relations,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `.deb` holding `control` as its control file, its control tarball compressed as
    /// `ext` says (`""`, `gz`, `xz`, `zst`).
    pub(crate) fn deb(control: &str, ext: &str) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        // As dpkg-deb writes it (the builder's own path setter would drop the `./`).
        h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"./control");
        h.set_size(control.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append(&h, control.as_bytes()).unwrap();
        let tar = tar.into_inner().unwrap();
        let compressed = match ext {
            "" => tar,
            "gz" => {
                use std::io::Write;
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(&tar).unwrap();
                e.finish().unwrap()
            }
            "xz" => {
                let mut out = Vec::new();
                lzma_rs::xz_compress(&mut &tar[..], &mut out).unwrap();
                out
            }
            "zst" => ruzstd::encoding::compress_to_vec(
                &tar[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
            _ => unreachable!(),
        };
        let name = if ext.is_empty() {
            "control.tar".to_string()
        } else {
            format!("control.tar.{ext}")
        };
        ar(&name, &compressed)
    }

    /// A `.deb` (an `ar` archive) whose control member is `name`, holding `control`.
    fn ar(name: &str, control: &[u8]) -> Vec<u8> {
        let mut out = b"!<arch>\n".to_vec();
        for (name, body) in [
            ("debian-binary", &b"2.0\n"[..]),
            (name, control),
            ("data.tar.xz", b"x"),
        ] {
            out.extend(
                format!(
                    "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                    0,
                    0,
                    0,
                    100644,
                    body.len()
                )
                .as_bytes(),
            );
            out.extend_from_slice(body);
            if body.len() % 2 == 1 {
                out.push(b'\n');
            }
        }
        out
    }

    const JQ: &str = "Package: jq\nVersion: 1.6-2.1+deb12u2\nArchitecture: amd64\n\
                      Depends: libjq1 (= 1.6-2.1+deb12u2), libc6 (>= 2.34)\n\
                      Breaks: jq-old (<< 1)\nProvides: json-tool (= 1)\n\
                      Description: lightweight JSON processor\n multi-line\n";

    #[test]
    fn the_control_file_is_read_whatever_the_compression() {
        for ext in ["", "gz", "xz", "zst"] {
            let p = control(&deb(JQ, ext)).unwrap_or_else(|e| panic!("{ext}: {e}"));
            assert_eq!(
                (p.name.as_str(), p.version.as_str(), p.architecture.as_str()),
                ("jq", "1.6-2.1+deb12u2", "amd64"),
                "{ext}"
            );
            assert_eq!(p.relations.depends.len(), 2);
            assert_eq!(p.relations.breaks[0][0].name, "jq-old");
            assert_eq!(p.relations.provides[0].version.as_deref(), Some("1"));
            assert!(p.relations.conflicts.is_empty() && p.relations.pre_depends.is_empty());
        }
    }

    #[test]
    fn what_is_not_a_deb_is_an_error_that_says_what_is_wrong() {
        let check = |bytes: &[u8], expected: &str| {
            let e = control(bytes).unwrap_err().to_string();
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
        };
        check(b"PK\x03\x04", "no `ar` signature");
        check(b"!<arch>\nshort", "truncated `ar` header");
        // Cut inside the control member (what follows it is not read).
        check(&deb(JQ, "xz")[..8 + 60 + 4 + 60 + 10], "cut short");
        check(&deb(JQ, "xz")[..8 + 60 + 4], "no `control.tar*` member");
        let mut damaged = deb(JQ, "gz");
        let at = 8 + 60 + 4 + 60 + 12;
        damaged[at] ^= 0xff;
        assert!(control(&damaged).is_err());
        check(&deb("Version: 1\n", ""), "no Package field");
        check(
            &deb(
                "Package: a\nVersion: 1\nArchitecture: all\nDepends: b (>> )\n",
                "gz",
            ),
            "Depends",
        );
        check(&deb("Package: a\n\nPackage: b\n", ""), "2 paragraphs");
        // A control archive that inflates past the limit is refused, not read on.
        let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut bomb, &vec![0; MAX_CONTROL as usize + 1]).unwrap();
        check(&ar("control.tar.gz", &bomb.finish().unwrap()), "too large");
    }
}
