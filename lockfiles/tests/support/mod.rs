//! A tiny Debian archive the tests build themselves, served over loopback, so that version
//! moves and hash failures are tested deterministically.
//!
//! Layout, as a mirror has it: `debian/dists/SUITE/{Release,InRelease}`,
//! `debian/dists/SUITE/main/binary-amd64/Packages{,.gz}`, `debian/pool/main/…/*.deb` (the
//! "debs" are a few bytes of text unless a test gives their bytes: only their hashes matter
//! to locking). The suites beside a release ([`TinyArchive::beside`]) are served by the same
//! server, as Debian serves them: `debian/dists/bookworm-updates`,
//! `debian-security/dists/bookworm-security` with its pool under `pool/updates/main`.

#![allow(dead_code)]

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use envc_lockfiles::fetch::sha256_hex;
use flate2::write::GzEncoder;

/// One package of the tiny archive.
#[derive(Clone)]
pub struct Pkg {
    pub name: &'static str,
    pub version: &'static str,
    pub fields: &'static str,
    /// The `.deb`'s bytes, when they matter (a real `.deb`); a line of text otherwise.
    pub deb: Option<fn(&Pkg) -> Vec<u8>>,
}

pub const fn pkg(name: &'static str, version: &'static str, fields: &'static str) -> Pkg {
    Pkg {
        name,
        version,
        fields,
        deb: None,
    }
}

pub struct TinyArchive {
    pub dir: Rc<tempfile::TempDir>,
    pub suite: &'static str,
    /// `http://127.0.0.1:PORT/debian`
    pub mirror: String,
    /// The mirror's directory under the server's root: `debian`, `debian-security`.
    path: &'static str,
    /// Where its `.deb`s go under the mirror: `pool/main`; `pool/updates/main` for a
    /// security suite, as Debian's security archive has it.
    pool: &'static str,
    /// The pool files the last [`TinyArchive::write`] wrote (a mirror keeps only the
    /// current versions' files; other suites of the same mirror keep theirs).
    written: RefCell<Vec<PathBuf>>,
}

impl TinyArchive {
    /// An empty archive directory, served.
    pub fn new(suite: &'static str) -> TinyArchive {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = serve(dir.path().to_path_buf());
        TinyArchive {
            dir: Rc::new(dir),
            suite,
            mirror: format!("{server}/debian"),
            path: "debian",
            pool: "pool/main",
            written: RefCell::new(Vec::new()),
        }
    }

    /// Another suite served by the same server, as Debian serves the suites beside a
    /// release: `bookworm-updates` on the same mirror, `bookworm-security` on
    /// `…/debian-security` with its pool under `pool/updates/`.
    pub fn beside(&self, suite: &'static str) -> TinyArchive {
        let security = suite.ends_with("-security");
        let (path, pool) = if security {
            ("debian-security", "pool/updates/main")
        } else {
            (self.path, self.pool)
        };
        let server = self
            .mirror
            .strip_suffix(&format!("/{}", self.path))
            .unwrap();
        TinyArchive {
            dir: self.dir.clone(),
            suite,
            mirror: format!("{server}/{path}"),
            path,
            pool,
            written: RefCell::new(Vec::new()),
        }
    }

    /// The `-updates` and `-security` suites beside this one, written empty (what an
    /// environment that takes them by default needs of a test archive that has no updates).
    pub fn companions(&self, date: &str) -> [TinyArchive; 2] {
        let updates = self.beside(Box::leak(
            format!("{}-updates", self.suite).into_boxed_str(),
        ));
        let security = self.beside(Box::leak(
            format!("{}-security", self.suite).into_boxed_str(),
        ));
        updates.write(&[], date, true);
        security.write(&[], date, true);
        [updates, security]
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join(self.path)
    }

    pub fn dists(&self) -> PathBuf {
        self.root().join("dists").join(self.suite)
    }

    /// (Re)writes the archive with these packages: pool files, Packages, Packages.gz, and a
    /// Release listing their hashes and sizes (and an InRelease with a clear-sign armour
    /// around it when `signed`; the signature is not a real one).
    pub fn write(&self, packages: &[Pkg], date: &str, signed: bool) {
        // A mirror keeps only the current versions' files.
        for f in self.written.borrow_mut().drain(..) {
            let _ = std::fs::remove_file(f);
        }
        let mut index = String::new();
        for p in packages {
            let filename = format!(
                "{}/{}/{}/{}_{}_amd64.deb",
                self.pool,
                &p.name[..1],
                p.name,
                p.name,
                // Pool file names leave the epoch out, as Debian's do.
                p.version.split_once(':').map_or(p.version, |(_, v)| v)
            );
            let content = match p.deb {
                Some(deb) => deb(p),
                None => format!("not really a deb: {} {}\n", p.name, p.version).into_bytes(),
            };
            let content = content.as_slice();
            write(&self.root().join(&filename), content);
            self.written.borrow_mut().push(self.root().join(&filename));
            index.push_str(&format!(
                "Package: {}\nVersion: {}\nArchitecture: amd64\nMaintainer: Test <t@example.org>\n\
                 Filename: {filename}\nSize: {}\nSHA256: {}\nDescription: {}\n",
                p.name,
                p.version,
                content.len(),
                sha256_hex(content),
                p.name
            ));
            for f in p.fields.split(';').map(str::trim).filter(|f| !f.is_empty()) {
                index.push_str(f);
                index.push('\n');
            }
            index.push('\n');
        }
        let bin = self.dists().join("main/binary-amd64");
        write(&bin.join("Packages"), index.as_bytes());
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(index.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        write(&bin.join("Packages.gz"), &gz);

        let mut release = format!(
            "Origin: Test\nLabel: Test\nSuite: stable\nCodename: {}\nDate: {date}\n\
             Architectures: amd64\nComponents: main\nDescription: a tiny archive\nSHA256:\n",
            self.suite
        );
        for (path, bytes) in [
            ("main/binary-amd64/Packages", index.as_bytes()),
            ("main/binary-amd64/Packages.gz", gz.as_slice()),
        ] {
            release.push_str(&format!(
                " {} {:>8} {path}\n",
                sha256_hex(bytes),
                bytes.len()
            ));
        }
        write(&self.dists().join("Release"), release.as_bytes());
        let inrelease = self.dists().join("InRelease");
        if signed {
            let armoured = format!(
                "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{release}\
                 -----BEGIN PGP SIGNATURE-----\n\nnot a signature\n-----END PGP SIGNATURE-----\n"
            );
            write(&inrelease, armoured.as_bytes());
        } else {
            let _ = std::fs::remove_file(inrelease);
        }
    }

    /// Replaces a file without updating the Release: a mirror caught mid-update.
    pub fn overwrite(&self, path_under_mirror: &str, content: &[u8]) {
        write(&self.root().join(path_under_mirror), content);
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Serves a directory over HTTP/1.1 on 127.0.0.1 (a free port), GET only, one thread per
/// connection, `Connection: close`. Returns `http://127.0.0.1:PORT`. The server lives as long
/// as the test process; it only answers, so it does nothing once the tests stop asking.
pub fn serve(root: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, &root);
            });
        }
    });
    format!("http://{addr}")
}

fn answer(mut stream: TcpStream, root: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // Headers, up to the blank line.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
    }
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let rel = path.trim_start_matches('/');
    let file = (method == "GET" && !rel.split('/').any(|s| s == ".." || s.is_empty()))
        .then(|| root.join(rel))
        .filter(|p| p.is_file());
    match file.and_then(|p| std::fs::read(p).ok()) {
        Some(body) => {
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            stream.write_all(&body)?;
        }
        None => {
            let body = b"not found\n";
            write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            stream.write_all(body)?;
        }
    }
    stream.flush()
}

/// A URL on which nothing listens: a port bound, then released.
pub fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/debian")
}

/// What the test packages' changelogs say, newest first: (package, version, entry text).
const HISTORY: &[(&str, &str, &str)] = &[
    (
        "hello",
        "2.10-3+deb12u2",
        "  * Fix CVE-2026-0002 and CVE-2026-0003 (greeting overflow).\n  * Closes: #1100002",
    ),
    (
        "hello",
        "2.10-3+deb12u1",
        "  * d/p/CVE-2026-0001.patch: a long name (closes: #1100001)",
    ),
    (
        "hello",
        "2.10-3",
        "  * Upload to bookworm. Closes: #1000000",
    ),
];

/// `p` as a real `.deb` (control and data tarballs, gzip), its data holding
/// `usr/share/doc/NAME/changelog.Debian.gz`: the [`HISTORY`] entries up to its version.
pub fn with_changelog(p: Pkg) -> Pkg {
    Pkg {
        deb: Some(real_deb),
        ..p
    }
}

fn real_deb(p: &Pkg) -> Vec<u8> {
    use envc_lockfiles::version::compare;
    let mut changelog = String::new();
    for (name, version, text) in HISTORY {
        if *name == p.name && compare(version, p.version).is_le() {
            changelog.push_str(&format!(
                "{name} ({version}) bookworm-security; urgency=medium\n\n{text}\n\n \
                 -- Test <t@example.org>  Sat, 10 Jan 2026 10:14:31 +0000\n\n"
            ));
        }
    }
    let control = format!(
        "Package: {}\nVersion: {}\nArchitecture: amd64\nMaintainer: Test <t@example.org>\n\
         Description: {}\n",
        p.name, p.version, p.name
    );
    let gz = |bytes: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    };
    let tar = |path: &str, bytes: &[u8]| -> Vec<u8> {
        // One regular file in a ustar archive, written by hand (512-byte header and blocks).
        let mut h = [0u8; 512];
        h[..path.len()].copy_from_slice(path.as_bytes());
        let octal = |h: &mut [u8; 512], at: usize, width: usize, n: u64| {
            let text = format!("{n:0w$o}\0", w = width - 1);
            h[at..at + width].copy_from_slice(text.as_bytes());
        };
        octal(&mut h, 100, 8, 0o644);
        octal(&mut h, 108, 8, 0);
        octal(&mut h, 116, 8, 0);
        octal(&mut h, 124, 12, bytes.len() as u64);
        octal(&mut h, 136, 12, 0);
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let mut out = h.to_vec();
        out.extend(bytes);
        out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
        out
    };
    let doc = format!("usr/share/doc/{}/changelog.Debian.gz", p.name);
    let members = [
        ("debian-binary", b"2.0\n".to_vec()),
        ("control.tar.gz", gz(&tar("control", control.as_bytes()))),
        ("data.tar.gz", gz(&tar(&doc, &gz(changelog.as_bytes())))),
    ];
    let mut out = b"!<arch>\n".to_vec();
    for (name, body) in members {
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
        out.extend(&body);
        if body.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    out
}
