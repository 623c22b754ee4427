//! What differs inside two builds of an image, not only that their digests differ.
//!
//! A rebuild that does not reproduce is only actionable when the user sees *where* it
//! departs: which paths of the root file system tree differ and in which field (content,
//! mode, owner, mtime, link target), like diffoscope but small. The tree is read from the
//! rootfs tar, since that is the one artefact that names every path; the ext4 disk image
//! is only compared block by block, for the case where the trees agree and the filesystem
//! layout does not.
//!
//! Both readers stream: an image's tar is hundreds of MiB and its disk several GiB
//! (sparse), so content is hashed or compared as it is read and never held whole.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

/// The kind of a tree entry, with what tells two entries of that kind apart besides
/// their metadata (link targets, device numbers), so that a retargeted link or a
/// renumbered device node is a difference even though no content is hashed for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    /// The target exactly as recorded: a symlink's target is resolved relative to the
    /// link, so `./x` and `x` are not the same thing to compare.
    Symlink(String),
    /// The target normalised like entry paths, since it names another entry of the tar.
    Hardlink(String),
    CharDevice {
        major: u32,
        minor: u32,
    },
    BlockDevice {
        major: u32,
        minor: u32,
    },
    Fifo,
    /// Any other tar type flag, kept as its byte so that it still compares.
    Other(u8),
}

impl EntryKind {
    /// The kind as a word, device numbers included: a change from one device to
    /// another must read as a change.
    fn name(&self) -> String {
        match self {
            EntryKind::File => "file".into(),
            EntryKind::Dir => "dir".into(),
            EntryKind::Symlink(_) => "symlink".into(),
            EntryKind::Hardlink(_) => "hardlink".into(),
            EntryKind::CharDevice { major, minor } => format!("char {major},{minor}"),
            EntryKind::BlockDevice { major, minor } => format!("block {major},{minor}"),
            EntryKind::Fifo => "fifo".into(),
            EntryKind::Other(b) => format!("type {}", escape(&[*b])),
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            EntryKind::Symlink(t) | EntryKind::Hardlink(t) => Some(t),
            _ => None,
        }
    }
}

/// One entry of a file tree as a tar holds it.
///
/// Only what a reproducible build must reproduce and a user can act on: the fields a tar
/// header carries for the path and a hash standing in for the content, so that two trees
/// of any size can be held and compared in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// Permission bits only (`0o7777`): the file type is `kind`, and writers disagree on
    /// whether they put the type bits in the header's mode.
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    /// Whole seconds; a PAX `mtime` record overrides the header's field, its fraction
    /// dropped.
    pub mtime: u64,
    /// The content's length for files (a sparse file's real size); what the header
    /// says for other kinds (normally 0).
    pub size: u64,
    /// blake3 hex of the content (files only).
    pub blake3: Option<String>,
}

/// How much of a content hash is shown: enough to tell two contents apart by eye, short
/// enough to keep a diff line on one line.
const HASH_SHOWN: usize = 16;

impl Entry {
    /// The entry on one line, for showing each side of a difference in full next to
    /// the short [`PathDiff::what`].
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} {:04o} {}:{} mtime {}",
            self.kind.name(),
            self.mode,
            self.uid,
            self.gid,
            self.mtime
        );
        if self.kind == EntryKind::File {
            let _ = write!(s, " {} bytes", self.size);
        }
        if let Some(h) = &self.blake3 {
            let _ = write!(s, " blake3:{}", short(h));
        }
        if let Some(t) = self.kind.target() {
            let _ = write!(s, " -> {t}");
        }
        s
    }
}

fn short(hash: &str) -> &str {
    hash.get(..HASH_SHOWN).unwrap_or(hash)
}

/// A path whose entry differs between the two trees; `None` on a side = absent there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathDiff {
    pub path: String,
    pub expected: Option<Entry>,
    pub found: Option<Entry>,
}

impl PathDiff {
    /// What differs, in words, one short line naming each differing field with both
    /// values, so the user can tell a timestamp leak from a content change from a
    /// permission change without opening either tar.
    pub fn what(&self) -> String {
        let (e, f) = match (&self.expected, &self.found) {
            (Some(e), Some(f)) => (e, f),
            (Some(_), None) => return "missing from the rebuild".into(),
            (None, Some(_)) => return "only in the rebuild".into(),
            (None, None) => return "absent from both".into(),
        };
        let mut parts: Vec<String> = Vec::new();
        let same_kind = std::mem::discriminant(&e.kind) == std::mem::discriminant(&f.kind);
        match (&e.kind, &f.kind) {
            (EntryKind::Symlink(a), EntryKind::Symlink(b)) if a != b => {
                parts.push(format!("symlink target {a} → {b}"));
            }
            (EntryKind::Hardlink(a), EntryKind::Hardlink(b)) if a != b => {
                parts.push(format!("hardlink target {a} → {b}"));
            }
            (a, b) if a != b => {
                parts.push(format!("type {} → {}", a.name(), b.name()));
            }
            _ => {}
        }
        if e.mode != f.mode {
            parts.push(format!("mode {:04o} → {:04o}", e.mode, f.mode));
        }
        if (e.uid, e.gid) != (f.uid, f.gid) {
            parts.push(format!("owner {}:{} → {}:{}", e.uid, e.gid, f.uid, f.gid));
        }
        if e.mtime != f.mtime {
            parts.push(format!("mtime {} → {}", e.mtime, f.mtime));
        }
        // A file against a directory has no comparable size or content: the type says it.
        if same_kind {
            if e.size != f.size {
                parts.push(format!("size {} → {}", e.size, f.size));
            }
            if e.blake3 != f.blake3 {
                let side = |h: &Option<String>| h.as_deref().map_or("none", short).to_string();
                parts.push(format!("content {} → {}", side(&e.blake3), side(&f.blake3)));
            }
        }
        if parts.is_empty() {
            "no difference".into()
        } else {
            parts.join(", ")
        }
    }
}

/// An io::Error that says which tar (and which entry of it) could not be read: the
/// caller compares two tars and the user must know which one is damaged.
fn at(tar: &Path, entry: Option<&str>, e: io::Error) -> io::Error {
    let msg = match entry {
        Some(p) => format!("{}: entry {p}: {e}", tar.display()),
        None => format!("{}: {e}", tar.display()),
    };
    io::Error::new(e.kind(), msg)
}

/// Bytes as text, invalid UTF-8 escaped rather than replaced, so that two distinct
/// non-UTF-8 names cannot collapse into one key and hide a difference.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// One spelling per path whatever the writer: mmdebstrap and `tar -C dir .` write
/// `./etc/`, other writers `etc` or `/etc`, and the comparison must be of trees, not of
/// spellings.
fn normalise(raw: &str) -> String {
    let mut s = raw;
    loop {
        if let Some(r) = s.strip_prefix("./") {
            s = r;
        } else if let Some(r) = s.strip_prefix('/') {
            s = r;
        } else {
            break;
        }
    }
    let s = s.trim_end_matches('/');
    if s.is_empty() || s == "." {
        ".".into()
    } else {
        s.into()
    }
}

/// The reader under the tar parser, remembering whether it met end of file: the `tar`
/// crate takes end of file at a header boundary for the end of the archive, so a tar cut
/// short between two entries would otherwise read as a smaller, valid tree.
struct Watched<R> {
    inner: R,
    hit_eof: bool,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.hit_eof = true;
        }
        Ok(n)
    }
}

/// Reads a tar's entries by normalised path (leading "./" and "/" stripped, trailing "/"
/// stripped; the root "." / "" entry kept as ".").
///
/// Streams: content is hashed as it is read, so memory grows with the number of entries
/// and never with their sizes. GNU long names and PAX headers are followed. A path that
/// appears twice keeps its last entry, as extracting the tar would. A tar that is cut
/// short (inside an entry, inside a header, or without its end-of-archive blocks) is an
/// error naming the tar, never a smaller tree.
pub fn read_tar(path: &Path) -> io::Result<BTreeMap<String, Entry>> {
    let file = File::open(path).map_err(|e| at(path, None, e))?;
    let reader = BufReader::with_capacity(
        1 << 20,
        Watched {
            inner: file,
            hit_eof: false,
        },
    );
    let mut archive = tar::Archive::new(reader);
    let mut tree = BTreeMap::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut last: Option<String> = None;
    {
        let entries = archive.entries().map_err(|e| at(path, None, e))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| after(path, last.as_deref(), e))?;
            let name = normalise(&escape(&entry.path_bytes()));
            if let Some(read) =
                read_entry(&mut entry, &mut buf).map_err(|e| at(path, Some(&name), e))?
            {
                tree.insert(name.clone(), read);
            }
            last = Some(name);
        }
    }
    if archive.into_inner().into_inner().hit_eof {
        return Err(after(
            path,
            last.as_deref(),
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the tar ends without its end-of-archive blocks (truncated?)",
            ),
        ));
    }
    Ok(tree)
}

/// An error between entries, placed after the last entry read since there is no entry
/// of its own to name.
fn after(tar: &Path, last: Option<&str>, e: io::Error) -> io::Error {
    let msg = match last {
        Some(p) => format!("{}: after entry {p}: {e}", tar.display()),
        None => format!("{}: {e}", tar.display()),
    };
    io::Error::new(e.kind(), msg)
}

/// One entry's fields and content hash; `None` for what is not part of the tree (a
/// global PAX header).
fn read_entry<R: Read>(entry: &mut tar::Entry<'_, R>, buf: &mut [u8]) -> io::Result<Option<Entry>> {
    let header = entry.header();
    let t = header.entry_type();
    if t.is_pax_global_extensions() {
        return Ok(None);
    }
    let mode = header.mode()? & 0o7777;
    let uid = header.uid()?;
    let gid = header.gid()?;
    let mut mtime = header.mtime()?;
    let is_file = t.is_file() || t.is_contiguous() || t.is_gnu_sparse();
    // A sparse file's header size is its real size; the entry's is what the archive holds.
    let size = if t.is_gnu_sparse() {
        header.size()?
    } else {
        entry.size()
    };
    let device = |h: &tar::Header| -> io::Result<(u32, u32)> {
        Ok((
            h.device_major()?.unwrap_or(0),
            h.device_minor()?.unwrap_or(0),
        ))
    };
    let link = || escape(&entry.link_name_bytes().unwrap_or_default());
    let kind = if is_file {
        EntryKind::File
    } else if t.is_dir() {
        EntryKind::Dir
    } else if t.is_symlink() {
        EntryKind::Symlink(link())
    } else if t.is_hard_link() {
        EntryKind::Hardlink(normalise(&link()))
    } else if t.is_character_special() {
        let (major, minor) = device(header)?;
        EntryKind::CharDevice { major, minor }
    } else if t.is_block_special() {
        let (major, minor) = device(header)?;
        EntryKind::BlockDevice { major, minor }
    } else if t.is_fifo() {
        EntryKind::Fifo
    } else {
        EntryKind::Other(t.as_byte())
    };
    if let Some(exts) = entry.pax_extensions()? {
        for ext in exts {
            let ext = ext?;
            if ext.key_bytes() == b"mtime" {
                if let Some(secs) = pax_seconds(ext.value_bytes()) {
                    mtime = secs;
                }
            }
        }
    }
    let blake3 = if is_file {
        let mut hasher = blake3::Hasher::new();
        let mut read: u64 = 0;
        loop {
            let n = match entry.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            read += n as u64;
        }
        // The crate's reader stops quietly at end of file: a short read is a cut tar.
        if read != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("truncated: {read} of {size} bytes of content"),
            ));
        }
        Some(hasher.finalize().to_hex().to_string())
    } else {
        None
    };
    Ok(Some(Entry {
        kind,
        mode,
        uid,
        gid,
        mtime,
        size,
        blake3,
    }))
}

/// The whole seconds of a PAX time ("1700000000.25"); `None` for what cannot be one
/// (negative or malformed), which leaves the header's field in force.
fn pax_seconds(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?;
    let whole = s.split('.').next()?;
    whole.parse().ok()
}

/// The differing paths of two tars, in path order, at most `limit` (plus the total count
/// of differing paths): (first `limit` diffs, total).
///
/// The count is total so the user knows how much is left unshown: one stray timestamp
/// and a thousand are different problems.
pub fn diff_tars(
    expected: &Path,
    found: &Path,
    limit: usize,
) -> io::Result<(Vec<PathDiff>, usize)> {
    // Two tars of an image take a while to hash: read them side by side.
    let (want, got) = std::thread::scope(|s| {
        let other = s.spawn(|| read_tar(found));
        let want = read_tar(expected);
        let got = other.join().unwrap_or_else(|_| {
            Err(io::Error::other(format!(
                "{}: reader panicked",
                found.display()
            )))
        });
        (want, got)
    });
    let (want, got) = (want?, got?);
    Ok(diff_trees(want, got, limit))
}

/// The merge of two sorted trees, so the result's order is the paths' and nothing else.
fn diff_trees(
    want: BTreeMap<String, Entry>,
    got: BTreeMap<String, Entry>,
    limit: usize,
) -> (Vec<PathDiff>, usize) {
    let mut diffs = Vec::new();
    let mut total = 0usize;
    let mut push = |path: String, expected: Option<Entry>, found: Option<Entry>| {
        total += 1;
        if diffs.len() < limit {
            diffs.push(PathDiff {
                path,
                expected,
                found,
            });
        }
    };
    let mut a = want.into_iter().peekable();
    let mut b = got.into_iter().peekable();
    loop {
        let order = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some((p, e)) = a.next() {
                    push(p, Some(e), None);
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some((p, f)) = b.next() {
                    push(p, None, Some(f));
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some((p, e)), Some((_, f))) = (a.next(), b.next()) {
                    if e != f {
                        push(p, Some(e), Some(f));
                    }
                }
            }
        }
    }
    (diffs, total)
}

/// Reads until `buf` is full or the file ends: a short read is not the end of a file,
/// and comparing two chunks of unequal fill would place differences wrongly.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The byte offset of the first differing `block`-sized block of two files (None:
/// identical), streaming both with bounded memory; files of different lengths differ at
/// the shorter one's end if they agree up to there. Used when the trees agree but the
/// disk images do not (ext4 layout): the block tells which filesystem structure moved.
///
/// The offset is a multiple of `block` (a `block` of 0 is taken as 1: the byte itself).
/// Holes of a sparse disk are read as the zeros they are.
pub fn first_difference(a: &Path, b: &Path, block: u64) -> io::Result<Option<u64>> {
    const CHUNK: usize = 1 << 20;
    let block = block.max(1);
    let mut fa = File::open(a).map_err(|e| at(a, None, e))?;
    let mut fb = File::open(b).map_err(|e| at(b, None, e))?;
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    let mut offset: u64 = 0;
    loop {
        let na = fill(&mut fa, &mut ba).map_err(|e| at(a, None, e))?;
        let nb = fill(&mut fb, &mut bb).map_err(|e| at(b, None, e))?;
        let n = na.min(nb);
        if ba[..n] != bb[..n] {
            let i = ba[..n]
                .iter()
                .zip(&bb[..n])
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            let at_byte = offset + i as u64;
            return Ok(Some(at_byte - at_byte % block));
        }
        if na != nb {
            let at_byte = offset + n as u64;
            return Ok(Some(at_byte - at_byte % block));
        }
        if na == 0 {
            return Ok(None);
        }
        offset += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const T0: u64 = 1_700_000_000;

    /// A tree entry to write into a test tar.
    #[derive(Clone)]
    struct E {
        path: String,
        kind: K,
        mode: u32,
        mtime: u64,
    }

    #[derive(Clone)]
    enum K {
        File(Vec<u8>),
        Dir,
        Symlink(&'static str),
    }

    fn file(path: &str, content: &[u8]) -> E {
        E {
            path: path.into(),
            kind: K::File(content.to_vec()),
            mode: 0o644,
            mtime: T0,
        }
    }

    fn dir(path: &str) -> E {
        E {
            path: path.into(),
            kind: K::Dir,
            mode: 0o755,
            mtime: T0,
        }
    }

    fn symlink(path: &str, target: &'static str) -> E {
        E {
            path: path.into(),
            kind: K::Symlink(target),
            mode: 0o777,
            mtime: T0,
        }
    }

    impl E {
        fn mode(mut self, mode: u32) -> E {
            self.mode = mode;
            self
        }
        fn mtime(mut self, mtime: u64) -> E {
            self.mtime = mtime;
            self
        }
    }

    /// A small tree as mmdebstrap spells it: "./" first, directories with a trailing "/".
    fn base() -> Vec<E> {
        vec![
            dir("./"),
            dir("./etc/"),
            file("./etc/hostname", b"debian\n"),
            file("./etc/passwd", b"root:x:0:0::/root:/bin/sh\n"),
            symlink("./bin", "usr/bin"),
            dir("./usr/"),
            dir("./usr/bin/"),
            file("./usr/bin/true", b"\x7fELF true"),
        ]
    }

    fn write_tar(path: &Path, entries: &[E]) {
        let mut b = tar::Builder::new(File::create(path).unwrap());
        for e in entries {
            let mut h = tar::Header::new_gnu();
            h.set_mode(e.mode);
            h.set_mtime(e.mtime);
            h.set_uid(0);
            h.set_gid(0);
            let data: &[u8] = match &e.kind {
                K::File(c) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    c
                }
                K::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    b""
                }
                K::Symlink(t) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_link_name(t).unwrap();
                    b""
                }
            };
            h.set_size(data.len() as u64);
            if e.path.len() < 100 {
                // Written as is, so the reader's normalisation of "./x/" is exercised.
                h.as_old_mut().name[..e.path.len()].copy_from_slice(e.path.as_bytes());
                h.set_cksum();
                b.append(&h, data).unwrap();
            } else {
                b.append_data(&mut h, &e.path, data).unwrap();
            }
        }
        b.into_inner().unwrap();
    }

    fn tars(expected: &[E], found: &[E]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            dir.path().join("expected.tar"),
            dir.path().join("found.tar"),
        );
        write_tar(&a, expected);
        write_tar(&b, found);
        (dir, a, b)
    }

    fn render(diffs: &[PathDiff]) -> Vec<String> {
        diffs
            .iter()
            .map(|d| format!("{}: {}", d.path, d.what()))
            .collect()
    }

    fn check_limit<S: AsRef<str>>(
        expected: &[E],
        found: &[E],
        limit: usize,
        want: &[S],
        total: usize,
    ) {
        let (_dir, a, b) = tars(expected, found);
        let (diffs, n) = diff_tars(&a, &b, limit).unwrap();
        let want: Vec<String> = want.iter().map(|s| s.as_ref().to_string()).collect();
        assert_eq!(render(&diffs), want);
        assert_eq!(n, total);
    }

    /// The diff of two trees rendered as `path: what`, all of it.
    fn check<S: AsRef<str>>(expected: &[E], found: &[E], want: &[S]) {
        check_limit(expected, found, usize::MAX, want, want.len());
    }

    const NONE: &[&str] = &[];

    fn h(content: &[u8]) -> String {
        blake3::hash(content).to_hex()[..16].to_string()
    }

    fn with(tree: Vec<E>, path: &str, f: impl Fn(E) -> E) -> Vec<E> {
        tree.into_iter()
            .map(|e| if e.path == path { f(e) } else { e })
            .collect()
    }

    #[test]
    fn same_tree_no_diffs() {
        check(&base(), &base(), NONE);
    }

    #[test]
    fn changed_content_names_only_that_path_with_both_hashes() {
        let found = with(base(), "./etc/hostname", |_| {
            file("./etc/hostname", b"ubuntu\n")
        });
        check(
            &base(),
            &found,
            &[format!(
                "etc/hostname: content {} → {}",
                h(b"debian\n"),
                h(b"ubuntu\n")
            )],
        );
        let found = with(base(), "./etc/hostname", |_| {
            file("./etc/hostname", b"deb\n")
        });
        check(
            &base(),
            &found,
            &[format!(
                "etc/hostname: size 7 → 4, content {} → {}",
                h(b"debian\n"),
                h(b"deb\n")
            )],
        );
    }

    #[test]
    fn changed_mode() {
        let found = with(base(), "./etc/passwd", |e| e.mode(0o600));
        check(&base(), &found, &["etc/passwd: mode 0644 → 0600"]);
        let found = with(base(), "./usr/bin/", |e| e.mode(0o4755));
        check(&base(), &found, &["usr/bin: mode 0755 → 4755"]);
    }

    #[test]
    fn changed_mtime() {
        let found = with(base(), "./", |e| e.mtime(T0 + 1));
        check(&base(), &found, &[".: mtime 1700000000 → 1700000001"]);
        let found = with(base(), "./etc/passwd", |e| e.mtime(T0 + 5).mode(0o640));
        check(
            &base(),
            &found,
            &["etc/passwd: mode 0644 → 0640, mtime 1700000000 → 1700000005"],
        );
    }

    #[test]
    fn path_only_on_one_side() {
        let mut found = base();
        found.push(file("./etc/machine-id", b"0123\n"));
        found.retain(|e| e.path != "./usr/bin/true");
        check(
            &base(),
            &found,
            &[
                "etc/machine-id: only in the rebuild",
                "usr/bin/true: missing from the rebuild",
            ],
        );
    }

    #[test]
    fn symlink_target_and_type_changes() {
        let found = with(base(), "./bin", |_| symlink("./bin", "/usr/bin"));
        check(&base(), &found, &["bin: symlink target usr/bin → /usr/bin"]);
        let found = with(base(), "./bin", |_| dir("./bin/"));
        check(
            &base(),
            &found,
            &["bin: type symlink → dir, mode 0777 → 0755"],
        );
    }

    #[test]
    fn limit_keeps_the_first_paths_and_counts_all() {
        let found: Vec<E> = base().into_iter().map(|e| e.mtime(T0 + 1)).collect();
        let m = "mtime 1700000000 → 1700000001";
        check_limit(
            &base(),
            &found,
            3,
            &[format!(".: {m}"), format!("bin: {m}"), format!("etc: {m}")],
            8,
        );
        check_limit(&base(), &found, 0, NONE, 8);
    }

    #[test]
    fn long_paths() {
        let long = format!("./usr/share/doc/{}/changelog.Debian.gz", "x".repeat(120));
        let mut expected = base();
        expected.push(file(&long, b"one"));
        let found = with(expected.clone(), &long, |_| file(&long, b"two"));
        let key = &long[2..];
        check(
            &expected,
            &found,
            &[format!("{key}: content {} → {}", h(b"one"), h(b"two"))],
        );
        let tree = read_tar(&tars(&expected, &found).1).unwrap();
        assert_eq!(tree[key].size, 3);
    }

    #[test]
    fn summaries() {
        let (_dir, a, _) = tars(&base(), &base());
        let tree = read_tar(&a).unwrap();
        let keys: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                ".",
                "bin",
                "etc",
                "etc/hostname",
                "etc/passwd",
                "usr",
                "usr/bin",
                "usr/bin/true"
            ]
        );
        assert_eq!(
            tree["etc/hostname"].summary(),
            format!(
                "file 0644 0:0 mtime 1700000000 7 bytes blake3:{}",
                h(b"debian\n")
            )
        );
        assert_eq!(
            tree["bin"].summary(),
            "symlink 0777 0:0 mtime 1700000000 -> usr/bin"
        );
        assert_eq!(tree["etc"].summary(), "dir 0755 0:0 mtime 1700000000");
        assert_eq!(
            tree["etc/hostname"].blake3.as_deref(),
            Some(blake3::hash(b"debian\n").to_hex().as_str())
        );
    }

    #[test]
    fn pax_path_and_fractional_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pax.tar");
        let mut b = tar::Builder::new(File::create(&p).unwrap());
        let name = format!("./opt/{}", "p".repeat(150));
        b.append_pax_extensions([
            ("path", name.as_bytes()),
            ("mtime", b"1700000123.75".as_slice()),
        ])
        .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("short").unwrap();
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1);
        h.set_size(2);
        h.set_cksum();
        b.append(&h, &b"hi"[..]).unwrap();
        b.into_inner().unwrap();
        let tree = read_tar(&p).unwrap();
        let keys: Vec<&String> = tree.keys().collect();
        assert_eq!(keys, [&name[2..]]);
        assert_eq!(tree[&name[2..]].mtime, 1_700_000_123);
    }

    #[test]
    fn truncated_tar_is_an_error_naming_it() {
        let big = vec![7u8; 3000];
        let entries = vec![file("./a", &big), file("./b", b"b")];
        let (_dir, a, _) = tars(&entries, &entries);
        let whole = std::fs::read(&a).unwrap();
        // Inside a's content, inside b's header, and at the end of b without the end blocks.
        for cut in [1000, 512 + 3072 + 100, 512 + 3072 + 1024] {
            let p = a.with_file_name(format!("cut-{cut}.tar"));
            std::fs::write(&p, &whole[..cut]).unwrap();
            let err = read_tar(&p).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("{}: ", p.display())),
                "cut at {cut}: {msg}"
            );
            let err = diff_tars(&a, &p, 10).unwrap_err();
            assert!(err.to_string().contains(&*p.display().to_string()), "{err}");
        }
        let p = a.with_file_name("cut-1000.tar");
        assert_eq!(
            read_tar(&p).unwrap_err().to_string(),
            format!(
                "{}: entry a: truncated: 488 of 3000 bytes of content",
                p.display()
            )
        );
        let p = a.with_file_name("cut-4608.tar");
        assert_eq!(
            read_tar(&p).unwrap_err().to_string(),
            format!(
                "{}: after entry b: the tar ends without its end-of-archive blocks (truncated?)",
                p.display()
            )
        );
    }

    fn first(a: &[u8], b: &[u8], block: u64) -> Option<u64> {
        let dir = tempfile::tempdir().unwrap();
        let (pa, pb) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&pa, a).unwrap();
        std::fs::write(&pb, b).unwrap();
        first_difference(&pa, &pb, block).unwrap()
    }

    #[test]
    fn first_difference_blocks() {
        let a: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(first(&a, &a, 4096), None);
        assert_eq!(first(b"", b"", 4096), None);
        let mut b = a.clone();
        b[5000] ^= 1;
        assert_eq!(first(&a, &b, 4096), Some(4096));
        assert_eq!(first(&a, &b, 1), Some(5000));
        // Past the first 1 MiB chunk.
        let mut c = a.clone();
        c[(1 << 20) + 10] ^= 1;
        assert_eq!(first(&a, &c, 4096), Some(1 << 20));
        // Different lengths that agree up to the shorter one's end.
        assert_eq!(first(&a[..8192], &a[..9000], 4096), Some(8192));
        assert_eq!(first(&a[..9000], &a[..5000], 4096), Some(4096));
        assert_eq!(first(&a, &a[..(1 << 20)], 4096), Some(1 << 20));
        assert_eq!(first(b"", b"x", 4096), Some(0));
    }

    #[test]
    fn first_difference_names_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.raw");
        let err = first_difference(&missing, &missing, 4096).unwrap_err();
        assert!(err
            .to_string()
            .starts_with(&format!("{}: ", missing.display())));
    }
}
