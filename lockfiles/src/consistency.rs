//! What must hold between the fields of a pin, checked offline: a hand edit that changes one
//! field of a pin and not the others (a version bumped, an architecture changed) leaves a pin
//! whose fields disagree, and `envc lock --check` says so without reaching a mirror.
//!
//! [`Lockfile::parse`] already rejects what one field shows alone: malformed versions and
//! hashes, a package or image naming an archive that is not pinned, an image package listed
//! twice (and it sorts image sets). What is checked here:
//!
//! - a package's `filename` is `pool/COMPONENT/…/NAME_VERSION_ARCH.deb`, as Debian's pool
//!   names it: its name, its version without the epoch (`1:2.3-1` → `2.3-1`), its
//!   architecture, under one of its archive's components (`pool/updates/COMPONENT/` in a
//!   security suite, as Debian's security archive keeps it);
//! - a package's architecture is its archive's, or `all`;
//! - a package's `size` is not 0;
//! - a Debian archive pin's name is the one its suite gives it ([`ArchivePin::default_name`]);
//! - every package of a closure is pinned, and from the Debian suite of the package it comes
//!   with (its archive or one pinned beside it: `-updates`, `-security`), or, for a vendor
//!   archive's package, from a Debian archive;
//! - every package of an image's set passes the package checks above;
//! - a cloud image's id is an AMI id (`ami-` and 8 or 17 hex digits) and its image name
//!   matches its pattern (as EC2's name filter reads `*` and `?`). An id edited by hand into
//!   another valid-looking id is caught only by asking the cloud (`envc lock --check` with
//!   credentials: [`crate::cloud::CloudImages::check`]).
//!
//! A hash edited by hand cannot be caught offline: only fetching the `.deb` shows it.

use std::fmt;

use crate::model::{ArchivePin, Lockfile, PackagePin, PinKey};

/// One pin whose fields disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistency {
    /// The pin's key (`package:nginx`), as `envc lock --update` takes it.
    pub key: PinKey,
    pub problem: Problem,
}

/// What disagrees within a pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A package's `.deb` is not named after the pin's name, version (without its epoch)
    /// and architecture.
    FileName { filename: String, expected: String },
    /// A package's `.deb` is not under `pool/COMPONENT/` for a component of its archive.
    NotInPool {
        filename: String,
        components: Vec<String>,
    },
    /// A package of another architecture than its archive's, and not `all`.
    Architecture {
        architecture: String,
        archive: String,
        archive_architecture: String,
    },
    /// A package whose `.deb` has 0 bytes.
    EmptyDeb,
    /// An archive pin whose name is not the one its suite gives it.
    ArchiveName { suite: String, expected: String },
    /// A package of the closure that no `[[package]]` pins.
    ClosureNotPinned { member: String },
    /// A package of the closure pinned from another archive than the package it comes with.
    ClosureArchive { member: String, archive: String },
    /// A cloud image whose id is not an AMI id.
    AmiId { id: String },
    /// A cloud image whose name does not match the pattern it was chosen by.
    ImageName { image_name: String, pattern: String },
    /// A package of an image's set whose fields disagree.
    ImagePackage {
        package: String,
        problem: Box<Problem>,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::FileName { filename, expected } => write!(
                f,
                "filename {filename:?} is not this pin's .deb, which Debian's pool names \
                 {expected:?} (NAME_VERSION_ARCH.deb, the version without its epoch)"
            ),
            Problem::NotInPool {
                filename,
                components,
            } => write!(
                f,
                "filename {filename:?} is not under pool/COMPONENT/ for a component of its \
                 archive ({})",
                components.join(", ")
            ),
            Problem::Architecture {
                architecture,
                archive,
                archive_architecture,
            } => write!(
                f,
                "architecture {architecture:?} is neither \"all\" nor that of {} \
                 ({archive_architecture:?})",
                PinKey::Archive(archive.clone())
            ),
            Problem::EmptyDeb => write!(f, "size is 0, and no .deb is empty"),
            Problem::ArchiveName { suite, expected } => {
                write!(f, "its suite {suite:?} makes its name {expected:?}")
            }
            Problem::ClosureNotPinned { member } => write!(
                f,
                "its closure lists `{member}`, and no [[package]] pins it"
            ),
            Problem::ClosureArchive { member, archive } => write!(
                f,
                "its closure lists `{member}`, which is pinned from {}",
                PinKey::Archive(archive.clone())
            ),
            Problem::AmiId { id } => write!(
                f,
                "id {id:?} is not an AMI id (`ami-` and 8 or 17 lowercase hex digits)"
            ),
            Problem::ImageName {
                image_name,
                pattern,
            } => write!(
                f,
                "image name {image_name:?} does not match the pattern {pattern:?} it was chosen by"
            ),
            Problem::ImagePackage { package, problem } => write!(f, "`{package}`: {problem}"),
        }
    }
}

impl fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{key}: {problem}; its fields disagree, so it was edited by hand: \
             run `envc lock --update={key} FILE`",
            key = self.key,
            problem = self.problem
        )
    }
}

/// Every pin of `lock` whose fields disagree, in the lockfile's order. Pure: nothing is
/// fetched. Meant for a lockfile [`Lockfile::parse`] accepted (see the module's docs for
/// what that already guarantees); a package whose archive is not pinned is checked only
/// for what does not need the archive.
pub fn inconsistencies(lock: &Lockfile) -> Vec<Inconsistency> {
    let mut out = Vec::new();
    // A vendor's archive is named by the source; Debian's by their suite.
    for a in lock.archives.iter().filter(|a| !a.is_vendor()) {
        let expected = ArchivePin::default_name(&a.suite);
        if a.name != expected {
            out.push(Inconsistency {
                key: a.key(),
                problem: Problem::ArchiveName {
                    suite: a.suite.clone(),
                    expected,
                },
            });
        }
    }
    for p in &lock.packages {
        out.extend(
            package(p, lock.archive(&p.archive))
                .into_iter()
                .chain(closure(p, lock))
                .map(|problem| Inconsistency {
                    key: p.key(),
                    problem,
                }),
        );
    }
    for i in &lock.images {
        // A set read from format 1 or 2 has versions only: `needs::stale` says so.
        for p in i.packages.iter().filter(|p| p.bytes_known()) {
            out.extend(
                package(p, lock.archive(&p.archive))
                    .into_iter()
                    .map(|problem| Inconsistency {
                        key: i.key(),
                        problem: Problem::ImagePackage {
                            package: p.name.clone(),
                            problem: Box::new(problem),
                        },
                    }),
            );
        }
    }
    for c in &lock.cloud_images {
        if !crate::cloud::is_ami_id(&c.id) {
            out.push(Inconsistency {
                key: c.key(),
                problem: Problem::AmiId { id: c.id.clone() },
            });
        }
        if !crate::cloud::name_matches(&c.pattern, &c.image_name) {
            out.push(Inconsistency {
                key: c.key(),
                problem: Problem::ImageName {
                    image_name: c.image_name.clone(),
                    pattern: c.pattern.clone(),
                },
            });
        }
    }
    out
}

fn closure(p: &PackagePin, lock: &Lockfile) -> Vec<Problem> {
    let members = p.closure.iter().flat_map(|c| &c.packages);
    // A vendor's package depends on Debian's too; Debian's only on Debian's.
    let vendor = lock.archive(&p.archive).is_some_and(ArchivePin::is_vendor);
    let from_debian = |archive: &str| lock.archive(archive).is_some_and(|a| !a.is_vendor());
    members
        .filter_map(|m| match lock.package(m) {
            None => Some(Problem::ClosureNotPinned { member: m.clone() }),
            Some(pin) if vendor && from_debian(&pin.archive) => None,
            // Debian's suite and its updates are one archive to apt.
            Some(pin) if !lock.same_suite(&pin.archive, &p.archive) => {
                Some(Problem::ClosureArchive {
                    member: m.clone(),
                    archive: pin.archive.clone(),
                })
            }
            Some(_) => None,
        })
        .collect()
}

fn package(p: &PackagePin, archive: Option<&ArchivePin>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let version = p.version.split_once(':').map_or(&*p.version, |(_, v)| v);
    let expected = format!("{}_{version}_{}.deb", p.name, p.architecture);
    if p.filename.rsplit('/').next() != Some(expected.as_str()) {
        problems.push(Problem::FileName {
            filename: p.filename.clone(),
            expected,
        });
    }
    if let Some(a) = archive {
        // Debian's security archive keeps its pool under `pool/updates/`.
        let pool = if a.is_security() && p.filename.starts_with("pool/updates/") {
            "pool/updates/"
        } else {
            "pool/"
        };
        let in_pool = p.filename.strip_prefix(pool).is_some_and(|rest| {
            a.components
                .iter()
                .any(|c| rest.starts_with(&format!("{c}/")))
        });
        if !in_pool {
            problems.push(Problem::NotInPool {
                filename: p.filename.clone(),
                components: a.components.clone(),
            });
        }
        if p.architecture != "all" && p.architecture != a.architecture {
            problems.push(Problem::Architecture {
                architecture: p.architecture.clone(),
                archive: a.name.clone(),
                archive_architecture: a.architecture.clone(),
            });
        }
    }
    if p.size == 0 {
        problems.push(Problem::EmptyDeb);
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    /// `edits` (each `(from, to)`, replacing the first `from`) applied to the sample
    /// lockfile's text, which must still parse; `expected`: the inconsistencies found, one
    /// per line.
    fn check(edits: &[(&str, &str)], expected: &[&str]) {
        let mut text = sample().to_toml("envc lock prod.env");
        for (from, to) in edits {
            assert!(text.contains(from), "{from:?} not in the sample");
            text = text.replacen(from, to, 1);
        }
        let lock = Lockfile::parse(&text)
            .unwrap_or_else(|e| panic!("the edit does not parse: {e:?}\n{text}"));
        let got: Vec<String> = inconsistencies(&lock)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, expected, "\n--- text ---\n{text}");
    }

    const FIX_HELLO: &str =
        "its fields disagree, so it was edited by hand: run `envc lock --update=package:hello FILE`";

    #[test]
    fn a_lockfile_as_written_is_consistent() {
        check(&[], &[]);
        // An epoch is not part of a pool filename.
        check(&[("version = \"2.10-3\"", "version = \"1:2.10-3\"")], &[]);
        // Architecture-independent packages are in every architecture's archive.
        check(
            &[
                (
                    "architecture = \"amd64\"\nfilename",
                    "architecture = \"all\"\nfilename",
                ),
                ("hello_2.10-3_amd64.deb", "hello_2.10-3_all.deb"),
            ],
            &[],
        );
    }

    #[test]
    fn the_committed_lockfiles_are_consistent() {
        for text in [
            include_str!("../../examples/quickstart.lock"),
            include_str!("../../examples/component/prod.lock"),
            include_str!("../../examples/replset/prod.lock"),
        ] {
            let lock = Lockfile::parse(text).unwrap();
            assert_eq!(inconsistencies(&lock), []);
        }
    }

    #[test]
    fn an_image_package_is_checked_like_any_package() {
        check(
            &[("\"libc6=2.36-9+deb12u13 ", "\"libc6=2.36-9+deb12u14 ")],
            &["image:debian-12: `libc6`: filename \"pool/main/g/glibc/libc6_2.36-9+deb12u13_amd64.deb\" \
               is not this pin's .deb, which Debian's pool names \"libc6_2.36-9+deb12u14_amd64.deb\" \
               (NAME_VERSION_ARCH.deb, the version without its epoch); its fields disagree, so it \
               was edited by hand: run `envc lock --update=image:debian-12 FILE`"],
        );
    }

    #[test]
    fn hand_edits_that_leave_a_pin_disagreeing_with_itself() {
        // The version moved, the filename (and hash) did not.
        check(
            &[("version = \"2.10-3\"", "version = \"2.10-3+tampered\"")],
            &[&format!(
                "package:hello: filename \"pool/main/h/hello/hello_2.10-3_amd64.deb\" is not \
                 this pin's .deb, which Debian's pool names \"hello_2.10-3+tampered_amd64.deb\" \
                 (NAME_VERSION_ARCH.deb, the version without its epoch); {FIX_HELLO}"
            )],
        );
        // An epoch written into the filename: the pool drops it.
        check(
            &[
                ("version = \"2.10-3\"", "version = \"1:2.10-3\""),
                ("hello_2.10-3_amd64.deb", "hello_1:2.10-3_amd64.deb"),
            ],
            &[&format!(
                "package:hello: filename \"pool/main/h/hello/hello_1:2.10-3_amd64.deb\" is not \
                 this pin's .deb, which Debian's pool names \"hello_2.10-3_amd64.deb\" \
                 (NAME_VERSION_ARCH.deb, the version without its epoch); {FIX_HELLO}"
            )],
        );
        // The filename points at another package's .deb.
        check(
            &[("hello/hello_2.10-3", "hello/hellox_2.10-3")],
            &[&format!(
                "package:hello: filename \"pool/main/h/hello/hellox_2.10-3_amd64.deb\" is not \
                 this pin's .deb, which Debian's pool names \"hello_2.10-3_amd64.deb\" \
                 (NAME_VERSION_ARCH.deb, the version without its epoch); {FIX_HELLO}"
            )],
        );
        // Outside the pool, or in a component the archive does not pin.
        check(
            &[("\"pool/main/h/hello/", "\"dists/main/h/hello/")],
            &[&format!(
                "package:hello: filename \"dists/main/h/hello/hello_2.10-3_amd64.deb\" is not \
                 under pool/COMPONENT/ for a component of its archive (main); {FIX_HELLO}"
            )],
        );
        check(
            &[("\"pool/main/h/hello/", "\"pool/contrib/h/hello/")],
            &[&format!(
                "package:hello: filename \"pool/contrib/h/hello/hello_2.10-3_amd64.deb\" is not \
                 under pool/COMPONENT/ for a component of its archive (main); {FIX_HELLO}"
            )],
        );
        // Another architecture than the archive's, filename edited to match.
        check(
            &[
                (
                    "architecture = \"amd64\"\nfilename",
                    "architecture = \"arm64\"\nfilename",
                ),
                ("hello_2.10-3_amd64.deb", "hello_2.10-3_arm64.deb"),
            ],
            &[&format!(
                "package:hello: architecture \"arm64\" is neither \"all\" nor that of \
                 archive:debian/bookworm (\"amd64\"); {FIX_HELLO}"
            )],
        );
        // ... and not edited to match: both are reported.
        check(
            &[(
                "architecture = \"amd64\"\nfilename",
                "architecture = \"arm64\"\nfilename",
            )],
            &[
                &format!(
                    "package:hello: filename \"pool/main/h/hello/hello_2.10-3_amd64.deb\" is not \
                     this pin's .deb, which Debian's pool names \"hello_2.10-3_arm64.deb\" \
                     (NAME_VERSION_ARCH.deb, the version without its epoch); {FIX_HELLO}"
                ),
                &format!(
                    "package:hello: architecture \"arm64\" is neither \"all\" nor that of \
                     archive:debian/bookworm (\"amd64\"); {FIX_HELLO}"
                ),
            ],
        );
        check(
            &[("size = 56120", "size = 0")],
            &[&format!(
                "package:hello: size is 0, and no .deb is empty; {FIX_HELLO}"
            )],
        );
        // A package of a closure lost its pin (a bad merge, a block deleted by hand).
        check(
            &[("name = \"libgreet1\"", "name = \"libgreet2\"")],
            &[
                &format!(
                    "package:hello: its closure lists `libgreet1`, and no [[package]] pins it; \
                 {FIX_HELLO}"
                ),
                "package:libgreet2: filename \"pool/main/g/greet/libgreet1_1.0-1_amd64.deb\" is \
             not this pin's .deb, which Debian's pool names \"libgreet2_1.0-1_amd64.deb\" \
             (NAME_VERSION_ARCH.deb, the version without its epoch); its fields disagree, so \
             it was edited by hand: run `envc lock --update=package:libgreet2 FILE`",
            ],
        );
        // The suite moved, the name (which packages and images refer to) did not.
        check(
            &[("suite = \"bookworm\"", "suite = \"trixie\"")],
            &[
                "archive:debian/bookworm: its suite \"trixie\" makes its name \"debian/trixie\"; \
               its fields disagree, so it was edited by hand: run \
               `envc lock --update=archive:debian/bookworm FILE`",
            ],
        );
    }
}
