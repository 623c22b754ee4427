//! Whether pinned `.deb`s install onto a system as it is (pure). This is the check apt makes
//! before it unpacks anything, made by the build from the `.deb`s' own control paragraphs
//! ([`crate::deb`]) and dpkg's list of what the target has. The build can then hand the
//! `.deb`s to dpkg directly, and a dependency the target lacks still stops the step before
//! anything is unpacked.
//!
//! After the install, for the packages it ships and for those it leaves:
//! - every Pre-Depends and Depends group of a shipped package is satisfied;
//! - no shipped package Conflicts with or Breaks a package present, and no package present
//!   Conflicts with or Breaks a shipped one;
//! - no package present loses a dependency it had (a downgrade, a provider replaced).
//!
//! A package counts as present unless dpkg lists it as not installed, with its configuration
//! only, or half-installed: an unpacked or half-configured one is configured by the step
//! before it installs (`dpkg --configure -a`). As in the lock's resolver
//! ([`crate::resolve`]), architecture qualifiers are dropped: a target is one architecture.

use std::fmt;

use crate::archive::{parse_provides, parse_relations, Alternatives, Dep, Provide, RelationError};
use crate::resolve::{provided_ok, version_ok};

/// The relations of a package that decide whether it installs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relations {
    pub pre_depends: Vec<Alternatives>,
    pub depends: Vec<Alternatives>,
    pub conflicts: Vec<Alternatives>,
    pub breaks: Vec<Alternatives>,
    pub provides: Vec<Provide>,
}

impl Relations {
    /// The relations in the fields `field` gives by name (empty when absent), as a `.deb`'s
    /// control paragraph or dpkg's listing of a target hold them; an error names the field.
    pub fn read<'a>(field: impl Fn(&str) -> &'a str) -> Result<Relations, FieldError> {
        let in_field = |field: &'static str| move |error| FieldError { field, error };
        let relations = |name: &'static str| parse_relations(field(name)).map_err(in_field(name));
        Ok(Relations {
            pre_depends: relations("Pre-Depends")?,
            depends: relations("Depends")?,
            conflicts: relations("Conflicts")?,
            breaks: relations("Breaks")?,
            provides: parse_provides(field("Provides")).map_err(in_field("Provides"))?,
        })
    }
}

/// A relationship field of a package that cannot be read: which field, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// `Depends`, `Provides`, …
    pub field: &'static str,
    pub error: RelationError,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.error)
    }
}

impl std::error::Error for FieldError {}

/// A package: one a `.deb` holds, or one a target has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub relations: Relations,
}

/// A package dpkg knows on a target, with its status (`installed`, `config-files`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    pub package: Package,
    pub status: String,
}

impl Installed {
    fn present(&self) -> bool {
        !matches!(
            self.status.as_str(),
            "not-installed" | "config-files" | "half-installed"
        )
    }
}

/// Why the `.deb`s do not install as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A shipped package's dependency that nothing present after the install satisfies;
    /// `have` is what the target has of its names.
    Unmet {
        package: String,
        version: String,
        relation: Alternatives,
        have: Vec<String>,
    },
    /// `package` Conflicts with or Breaks (`kind`) the package `other`.
    Conflict {
        package: String,
        version: String,
        kind: &'static str,
        relation: Dep,
        other: String,
    },
    /// A package the target keeps whose dependency the shipped ones would take away.
    Broken {
        package: String,
        version: String,
        relation: Alternatives,
        by: Vec<String>,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unmet {
                package,
                version,
                relation,
                have,
            } => {
                write!(f, "`{package}` {version} depends on `{}`", group(relation))?;
                if have.is_empty() {
                    write!(f, ", which the host does not have")
                } else {
                    write!(f, ", and the host has {}", have.join(", "))
                }
            }
            Problem::Conflict {
                package,
                version,
                kind,
                relation,
                other,
            } => write!(f, "`{package}` {version} {kind} `{relation}`: {other}"),
            Problem::Broken {
                package,
                version,
                relation,
                by,
            } => write!(
                f,
                "the host's `{package}` {version} depends on `{}`, which {} would no longer \
                 satisfy",
                group(relation),
                by.join(", ")
            ),
        }
    }
}

fn group(alternatives: &Alternatives) -> String {
    let alts: Vec<String> = alternatives.iter().map(Dep::to_string).collect();
    alts.join(" | ")
}

fn named(p: &Package) -> String {
    format!("{} {}", p.name, p.version)
}

/// Whether `dep` names `p`, by name and version or by what it provides.
fn matches(dep: &Dep, p: &Package) -> bool {
    (p.name == dep.name && version_ok(dep, &p.version))
        || p.relations
            .provides
            .iter()
            .any(|v| v.name == dep.name && provided_ok(dep, v.version.as_deref()))
}

fn satisfied(set: &[&Package], group: &Alternatives) -> bool {
    group.iter().any(|dep| set.iter().any(|p| matches(dep, p)))
}

fn requirements(p: &Package) -> impl Iterator<Item = &Alternatives> {
    p.relations.pre_depends.iter().chain(&p.relations.depends)
}

fn exclusions(p: &Package) -> impl Iterator<Item = (&'static str, &Dep)> {
    let r = &p.relations;
    (r.conflicts.iter().flatten().map(|d| ("conflicts with", d)))
        .chain(r.breaks.iter().flatten().map(|d| ("breaks", d)))
}

/// Every reason `shipping` does not install onto a target that has `installed`, in a stable
/// order; empty when it does.
pub fn check(installed: &[Installed], shipping: &[Package]) -> Vec<Problem> {
    let before: Vec<&Package> = installed
        .iter()
        .filter(|i| i.present())
        .map(|i| &i.package)
        .collect();
    let kept: Vec<&Package> = before
        .iter()
        .copied()
        .filter(|p| !shipping.iter().any(|s| s.name == p.name))
        .collect();
    let after: Vec<&Package> = kept.iter().copied().chain(shipping).collect();
    let mut problems = Vec::new();
    for s in shipping {
        for relation in requirements(s) {
            if !satisfied(&after, relation) {
                let have = relation
                    .iter()
                    .flat_map(|d| before.iter().filter(|p| p.name == d.name))
                    .map(|p| named(p))
                    .collect();
                problems.push(Problem::Unmet {
                    package: s.name.clone(),
                    version: s.version.clone(),
                    relation: relation.clone(),
                    have,
                });
            }
        }
    }
    // Each pair once, from the side that names the other: shipped against everything
    // present after, kept against shipped (two kept packages were there before).
    let pairs = shipping
        .iter()
        .flat_map(|s| after.iter().map(move |p| (s, *p)))
        .chain(
            kept.iter()
                .flat_map(|k| shipping.iter().map(move |s| (*k, s))),
        );
    for (one, other) in pairs {
        if one.name == other.name {
            continue;
        }
        for (kind, relation) in exclusions(one) {
            if matches(relation, other) {
                problems.push(Problem::Conflict {
                    package: one.name.clone(),
                    version: one.version.clone(),
                    kind,
                    relation: relation.clone(),
                    other: named(other),
                });
            }
        }
    }
    for k in &kept {
        for relation in requirements(k) {
            if satisfied(&before, relation) && !satisfied(&after, relation) {
                let replaced: Vec<&str> = relation
                    .iter()
                    .flat_map(|d| before.iter().filter(|p| matches(d, p)))
                    .map(|p| p.name.as_str())
                    .collect();
                let by = shipping
                    .iter()
                    .filter(|s| replaced.contains(&s.name.as_str()))
                    .map(named)
                    .collect();
                problems.push(Problem::Broken {
                    package: k.name.clone(),
                    version: k.version.clone(),
                    relation: relation.clone(),
                    by,
                });
            }
        }
    }
    problems
}

/// The order dpkg unpacks `shipping` in, as each package's batch number: a package comes in
/// a batch after every shipped package that one of its Pre-Depends names, because dpkg
/// unpacks a package only once what it pre-depends on is configured.
pub fn unpack_batches(shipping: &[Package]) -> Vec<usize> {
    let n = shipping.len();
    let mut batch = vec![0; n];
    // An archive dpkg can install has no Pre-Depends cycle; n rounds bound a broken one.
    for _ in 0..n {
        let mut moved = false;
        for i in 0..n {
            for j in 0..n {
                let needs = shipping[i]
                    .relations
                    .pre_depends
                    .iter()
                    .flatten()
                    .any(|d| matches(d, &shipping[j]));
                if i != j && needs && batch[i] <= batch[j] {
                    batch[i] = batch[j] + 1;
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deb::parse_control;

    /// `text`: one package per line, `[STATUS] NAME VERSION [FIELD: VALUE]…` with fields
    /// separated by `;`: `installed jq 1.6; Depends: libjq1 (= 1.6)`. Shipped packages have
    /// no status.
    fn packages(text: &str, with_status: bool) -> Vec<(String, Package)> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|line| {
                let mut parts = line.split(';');
                let head: Vec<&str> = parts.next().unwrap().split_whitespace().collect();
                let (status, name, version) = if with_status {
                    (head[0], head[1], head[2])
                } else {
                    ("", head[0], head[1])
                };
                let mut control =
                    format!("Package: {name}\nVersion: {version}\nArchitecture: amd64\n");
                for field in parts {
                    control.push_str(field.trim());
                    control.push('\n');
                }
                (status.to_string(), parse_control(&control).unwrap())
            })
            .collect()
    }

    /// Packages to ship, one per line: `NAME VERSION [; FIELD: VALUE]…`.
    fn shipped(text: &str) -> Vec<Package> {
        packages(text, false).into_iter().map(|(_, p)| p).collect()
    }

    fn check_install(installed: &str, shipping: &str, expected: &str) {
        let installed: Vec<Installed> = packages(installed, true)
            .into_iter()
            .map(|(status, package)| Installed { package, status })
            .collect();
        let shipping = shipped(shipping);
        let got: Vec<String> = check(&installed, &shipping)
            .iter()
            .map(Problem::to_string)
            .collect();
        assert_eq!(got.join("\n"), expected.trim(), "installing\n{shipping:#?}");
    }

    const BASE: &str = "
        installed libc6 2.36-9; Provides: libc6-x
        installed mawk 1.3.4; Provides: awk
        installed libold 1.0
        config-files libgone 1.0
        installed tool 2.0; Depends: libold (>= 1.0)
    ";

    #[test]
    fn what_the_target_and_the_shipment_satisfy_installs() {
        check_install(
            BASE,
            "jq 1.6; Depends: libjq1 (= 1.6), libc6 (>= 2.34), awk | gawk
             libjq1 1.6; Pre-Depends: libc6 (>= 2.17); Depends: libonig5
             libonig5 6.9",
            "",
        );
        // Upgrading what others depend on, within their range; a conflict with oneself.
        check_install(
            BASE,
            "libold 1.5; Conflicts: libold-x; Provides: libold-x",
            "",
        );
        // A package with its configuration only does not conflict.
        check_install(BASE, "new 1; Conflicts: libgone", "");
    }

    #[test]
    fn a_dependency_nothing_satisfies_is_named_with_what_the_host_has() {
        check_install(
            BASE,
            "jq 1.6; Depends: libjq1 (= 1.6), libc6 (>= 2.38)",
            "`jq` 1.6 depends on `libjq1 (= 1.6)`, which the host does not have\n\
             `jq` 1.6 depends on `libc6 (>= 2.38)`, and the host has libc6 2.36-9",
        );
        // Only configuration files left, or only half installed, is not installed.
        check_install(
            "config-files libjq1 1.6\nhalf-installed libonig5 6.9",
            "jq 1.6; Depends: libjq1, libonig5",
            "`jq` 1.6 depends on `libjq1`, which the host does not have\n\
             `jq` 1.6 depends on `libonig5`, which the host does not have",
        );
        // A versioned dependency is not satisfied by an unversioned Provides.
        check_install(
            BASE,
            "x 1; Pre-Depends: awk (>= 1)",
            "`x` 1 depends on `awk (>= 1)`, which the host does not have",
        );
    }

    #[test]
    fn conflicts_and_breaks_are_checked_both_ways() {
        check_install(
            BASE,
            "gawk 5; Conflicts: awk
             old-breaker 1; Breaks: tool (<< 3)",
            "`gawk` 5 conflicts with `awk`: mawk 1.3.4\n\
             `old-breaker` 1 breaks `tool (<< 3)`: tool 2.0",
        );
        check_install(
            "installed guard 1; Conflicts: jq; Breaks: libjq1 (<< 2)",
            "jq 1.6\nlibjq1 1.6",
            "`guard` 1 conflicts with `jq`: jq 1.6\n\
             `guard` 1 breaks `libjq1 (<< 2)`: libjq1 1.6",
        );
        // Two shipped packages that exclude each other: reported from the side that says so.
        check_install(
            "",
            "a 1; Conflicts: b\nb 1",
            "`a` 1 conflicts with `b`: b 1",
        );
    }

    #[test]
    fn a_kept_package_must_not_lose_a_dependency() {
        check_install(
            BASE,
            "libold 0.9",
            "the host's `tool` 2.0 depends on `libold (>= 1.0)`, which libold 0.9 would no \
             longer satisfy",
        );
        // A dependency already broken on the target is not this install's doing.
        check_install("installed tool 2.0; Depends: libnone", "libold 0.9", "");
    }

    #[test]
    fn pre_dependencies_are_unpacked_in_earlier_batches() {
        let shipping = shipped(
            "app 1; Pre-Depends: helpers (>= 1); Depends: lib
             lib 1
             helpers 1; Pre-Depends: base-x
             base 1; Provides: base-x",
        );
        assert_eq!(unpack_batches(&shipping), [2, 0, 1, 0]);
        // A cycle (not installable by dpkg either) ends.
        let cycle = shipped("a 1; Pre-Depends: b\nb 1; Pre-Depends: a");
        assert_eq!(unpack_batches(&cycle).len(), 2);
    }
}
