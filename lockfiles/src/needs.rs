//! What an environment needs pinned, and where a lockfile falls short of it (offline).
//!
//! The executor reads `Needs` off the derivation graph (each `package` node its package,
//! each `image` node its package set, the tools that build and reach the nodes); `stale`
//! compares them with a lockfile without touching the network, so CI can refuse a stale
//! lock without reaching a mirror.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::cloud::CloudImageNeed;
use crate::consistency::{inconsistencies, Inconsistency};
use crate::model::{ArchivePin, Lockfile, PinKey};
use crate::provider::{AddressError, ConstraintError, Constraints, ProviderAddress};

/// The suite of packages on hosts envc did not build (their sources are their own).
pub const DEFAULT_SUITE: &str = "bookworm";

/// An image's package set, as the source asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageNeed {
    pub suite: String,
    /// Exactly what the image build is asked to install, sorted.
    pub includes: Vec<String>,
}

/// A vendor's archive, as the source declares it (`debian.vendor_archive`): its packages
/// are locked from it, their dependencies from it and from the Debian suite of their
/// targets, as apt would see both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorArchive {
    /// `https://apt.example.com/debian`, without a trailing slash.
    pub url: String,
    pub suite: String,
    pub components: Vec<String>,
    /// Its signing key: a project file, relative to the project's root.
    pub key: String,
    /// The fingerprint of the key its Release must be signed with.
    pub fingerprint: String,
}

/// A package, as the source asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageNeed {
    /// The Debian suite of its targets.
    pub suite: String,
    /// The vendor archive it comes from (a key of [`Needs::vendors`]); `None`: Debian's.
    pub vendor: Option<String>,
    /// The version the source asks for; `None` takes the newest.
    pub version: Option<String>,
    /// The nodes that install it (`h/package:curl`).
    pub used_by: Vec<String>,
    /// What its targets start from (`image:NAME`, or [`crate::model::REQUIRED`]): its
    /// closure is resolved against what all of them have.
    pub starts_from: BTreeSet<String>,
}

/// How the source takes a Debian suite: with the suites apt reads beside it (`-updates`,
/// `-security`; the default) or alone (`updates = false` on its images and hosts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteNeed {
    pub updates: bool,
    /// The first node that said so (`image:debian-12`, `h/host:h`), for a conflict's message.
    pub declared_by: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub images: BTreeMap<String, ImageNeed>,
    pub packages: BTreeMap<String, PackageNeed>,
    pub vendors: BTreeMap<String, VendorArchive>,
    pub tools: BTreeSet<String>,
    /// Debian suite → whether it is taken with its updates. A suite no node declared is.
    pub suite_updates: BTreeMap<String, SuiteNeed>,
    /// The cloud images the environment's cloud machines boot, by `NAME@REGION` (the name
    /// of their [`PinKey::CloudImage`]).
    pub cloud_images: BTreeMap<String, CloudImageNeed>,
    /// The Terraform/OpenTofu providers the `resource` nodes are served by, by canonical
    /// address (`registry.terraform.io/hashicorp/google`: the name of their
    /// [`PinKey::Provider`]). [`Needs::add_provider`] fills it.
    pub providers: BTreeMap<String, ProviderNeed>,
}

/// A provider, as the source declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderNeed {
    /// The version constraint, as [`Constraints`]' `Display` writes it (`~> 0.1.0`).
    pub constraint: String,
    /// The nodes it serves (`h/resource:notes`).
    pub used_by: Vec<String>,
}

/// Why a node's provider cannot be added to [`Needs`]: its address or constraint is not
/// one, or another node declares the same provider with another constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderNeedError {
    Address {
        node: String,
        error: AddressError,
    },
    Constraint {
        node: String,
        error: ConstraintError,
    },
    /// A lockfile pins one version of a provider: its nodes must agree on what admits it.
    Conflict {
        address: String,
        node: String,
        wants: String,
        earlier_node: String,
        earlier: String,
    },
}

impl fmt::Display for ProviderNeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderNeedError::Address { node, error } => write!(f, "`{node}`: {error}"),
            ProviderNeedError::Constraint { node, error } => write!(f, "`{node}`: {error}"),
            ProviderNeedError::Conflict {
                address,
                node,
                wants,
                earlier_node,
                earlier,
            } => write!(
                f,
                "{}: `{node}` constrains it to `{wants}`, `{earlier_node}` to `{earlier}`; a \
                 lockfile pins one version of a provider\n  hint: give every resource of \
                 {address} the same version constraint",
                PinKey::Provider(address.clone())
            ),
        }
    }
}

impl std::error::Error for ProviderNeedError {}

/// Two machines name one cloud image (a name, in a region) differently: a lockfile pins one
/// image of a name per region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudImageConflict {
    pub earlier: CloudImageNeed,
    pub wants: CloudImageNeed,
    pub node: String,
}

impl fmt::Display for CloudImageConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: `{}` names it as {}, `{}` as {}; a lockfile pins one image of a name per \
             region\n  hint: give the two images different names, or use one value for both",
            self.wants.key(),
            self.node,
            self.wants.describe(),
            self.earlier.used_by.first().map_or("", String::as_str),
            self.earlier.describe()
        )
    }
}

impl std::error::Error for CloudImageConflict {}

/// Two nodes of one Debian suite disagree on taking its updates: a lockfile pins one view of
/// a suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteConflict {
    pub suite: String,
    pub node: String,
    pub updates: bool,
    pub earlier: String,
}

impl fmt::Display for SuiteConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = |updates: bool| {
            if updates {
                "with its -updates and -security suites"
            } else {
                "alone (`updates = false`)"
            }
        };
        write!(
            f,
            "{}: `{}` takes {} {}, `{}` {}; a lockfile pins one view of a suite\n  hint: give \
             every image and host of {} the same `updates`",
            PinKey::debian_archive(&self.suite),
            self.node,
            self.suite,
            how(self.updates),
            self.earlier,
            how(!self.updates),
            self.suite
        )
    }
}

impl std::error::Error for SuiteConflict {}

impl PackageNeed {
    /// The name of the archive it is pinned from.
    pub fn archive(&self) -> String {
        self.vendor
            .clone()
            .unwrap_or_else(|| ArchivePin::default_name(&self.suite))
    }
}

/// Two nodes ask for one package differently: a lockfile pins one version of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeedsConflict {
    pub package: String,
    pub node: String,
    pub wants: (Option<String>, String),
    pub earlier: (Option<String>, String),
}

impl fmt::Display for NeedsConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let version = |v: &Option<String>| v.clone().unwrap_or_else(|| "the newest".into());
        write!(
            f,
            "{}: `{}` asks for {} from {}, another node for {} from {}; a lockfile pins one \
             version of a package\n  hint: give every node of `{}` the same version",
            PinKey::Package(self.package.clone()),
            self.node,
            version(&self.wants.0),
            self.wants.1,
            version(&self.earlier.0),
            self.earlier.1,
            self.package
        )
    }
}

/// Two nodes declare one vendor archive name differently: a lockfile pins one archive of a
/// name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorConflict {
    pub name: String,
    /// As declared first.
    pub earlier: VendorArchive,
    /// As declared again.
    pub wants: VendorArchive,
}

impl fmt::Display for VendorConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (earlier, archive) = (&self.earlier, &self.wants);
        write!(
            f,
            "{}: declared twice, differently ({} {} key {} and {} {} key {}); a lockfile \
             pins one archive of a name\n  hint: declare it once and use that value",
            PinKey::Archive(self.name.clone()),
            earlier.url,
            earlier.suite,
            earlier.fingerprint,
            archive.url,
            archive.suite,
            archive.fingerprint
        )
    }
}

impl std::error::Error for VendorConflict {}

impl Needs {
    /// Adds a package `node` installs; a second node asking for it differently conflicts.
    /// `starts_from`: what the node's target starts from (see [`PackageNeed::starts_from`]).
    /// `vendor`: the vendor archive it comes from, when not Debian's.
    pub fn add_package(
        &mut self,
        name: &str,
        suite: &str,
        vendor: Option<&str>,
        version: Option<String>,
        node: &str,
        starts_from: &str,
    ) -> Result<(), Box<NeedsConflict>> {
        let vendor = vendor.map(str::to_string);
        let entry = self
            .packages
            .entry(name.to_string())
            .or_insert_with(|| PackageNeed {
                suite: suite.to_string(),
                vendor: vendor.clone(),
                version: version.clone(),
                used_by: Vec::new(),
                starts_from: BTreeSet::new(),
            });
        entry.used_by.push(node.to_string());
        entry.starts_from.insert(starts_from.to_string());
        let wants = vendor.clone().unwrap_or_else(|| suite.to_string());
        if entry.version != version || entry.suite != suite || entry.vendor != vendor {
            let earlier = entry.vendor.clone().unwrap_or_else(|| entry.suite.clone());
            return Err(Box::new(NeedsConflict {
                package: name.to_string(),
                node: node.to_string(),
                wants: (version, wants),
                earlier: (entry.version.clone(), earlier),
            }));
        }
        Ok(())
    }

    /// Adds a vendor archive a package node names; one name declared two ways is refused.
    pub fn add_vendor(
        &mut self,
        name: &str,
        archive: VendorArchive,
    ) -> Result<(), Box<VendorConflict>> {
        match self.vendors.get(name) {
            Some(earlier) if *earlier != archive => Err(Box::new(VendorConflict {
                name: name.to_string(),
                earlier: earlier.clone(),
                wants: archive,
            })),
            _ => {
                self.vendors.insert(name.to_string(), archive);
                Ok(())
            }
        }
    }

    /// Records how `node` takes its Debian suite (see [`SuiteNeed`]); a node of the same
    /// suite that takes it the other way conflicts.
    pub fn add_suite(
        &mut self,
        suite: &str,
        updates: bool,
        node: &str,
    ) -> Result<(), Box<SuiteConflict>> {
        let entry = self
            .suite_updates
            .entry(suite.to_string())
            .or_insert_with(|| SuiteNeed {
                updates,
                declared_by: node.to_string(),
            });
        if entry.updates != updates {
            return Err(Box::new(SuiteConflict {
                suite: suite.to_string(),
                node: node.to_string(),
                updates,
                earlier: entry.declared_by.clone(),
            }));
        }
        Ok(())
    }

    /// Adds the cloud image a machine boots (`need.used_by` its node); a machine naming the
    /// same image in the same region with another owner, pattern or architecture conflicts.
    pub fn add_cloud_image(&mut self, need: CloudImageNeed) -> Result<(), Box<CloudImageConflict>> {
        let name = need.key().name().to_string();
        match self.cloud_images.get_mut(&name) {
            None => {
                self.cloud_images.insert(name, need);
                Ok(())
            }
            Some(earlier) => {
                let same = CloudImageNeed {
                    used_by: earlier.used_by.clone(),
                    ..need.clone()
                };
                if *earlier != same {
                    return Err(Box::new(CloudImageConflict {
                        earlier: earlier.clone(),
                        node: need.used_by.first().cloned().unwrap_or_default(),
                        wants: need,
                    }));
                }
                earlier.used_by.extend(need.used_by);
                Ok(())
            }
        }
    }

    /// Adds the provider `node` is served by: `address` as the source wrote it
    /// (`hashicorp/google`, kept under its full address), `constraint` as Terraform reads
    /// one (kept as [`Constraints`] writes it). A second node of the same provider with a
    /// constraint that reads otherwise conflicts.
    pub fn add_provider(
        &mut self,
        address: &str,
        constraint: &str,
        node: &str,
    ) -> Result<(), Box<ProviderNeedError>> {
        let address = ProviderAddress::parse(address).map_err(|error| {
            Box::new(ProviderNeedError::Address {
                node: node.to_string(),
                error,
            })
        })?;
        let constraint = Constraints::parse(constraint).map_err(|error| {
            Box::new(ProviderNeedError::Constraint {
                node: node.to_string(),
                error,
            })
        })?;
        let constraint = constraint.to_string();
        let entry = self
            .providers
            .entry(address.to_string())
            .or_insert_with(|| ProviderNeed {
                constraint: constraint.clone(),
                used_by: Vec::new(),
            });
        if entry.constraint != constraint {
            return Err(Box::new(ProviderNeedError::Conflict {
                address: address.to_string(),
                node: node.to_string(),
                wants: constraint,
                earlier_node: entry.used_by.first().cloned().unwrap_or_default(),
                earlier: entry.constraint.clone(),
            }));
        }
        entry.used_by.push(node.to_string());
        Ok(())
    }

    /// Whether `suite` is taken with its `-updates` and `-security` suites: unless a node
    /// opted out.
    pub fn takes_updates(&self, suite: &str) -> bool {
        self.suite_updates.get(suite).is_none_or(|s| s.updates)
    }

    /// The names of the archives a Debian suite's pin should hold beside it.
    pub fn companions(&self, suite: &str) -> Vec<String> {
        if self.takes_updates(suite) {
            ArchivePin::companion_suites(suite)
                .iter()
                .map(|s| ArchivePin::default_name(s))
                .collect()
        } else {
            Vec::new()
        }
    }

    /// Every suite an image or a package comes from.
    pub fn suites(&self) -> BTreeSet<&str> {
        self.images
            .values()
            .map(|i| i.suite.as_str())
            .chain(self.packages.values().map(|p| p.suite.as_str()))
            .collect()
    }
}

/// One way a lockfile falls short of what the environment needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    pub key: PinKey,
    pub problem: String,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}; run `envc lock FILE` (or `--update=KEY`) and commit the lockfile",
            self.key, self.problem
        )
    }
}

/// Why `envc lock --check` refuses a lockfile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockProblem {
    /// It falls short of the environment.
    Stale(Stale),
    /// A pin's own fields disagree: it was edited by hand.
    Inconsistent(Inconsistency),
}

impl LockProblem {
    /// The pin it is about, as `envc lock --update` takes it.
    pub fn key(&self) -> &PinKey {
        match self {
            LockProblem::Stale(s) => &s.key,
            LockProblem::Inconsistent(i) => &i.key,
        }
    }
}

impl fmt::Display for LockProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockProblem::Stale(s) => s.fmt(f),
            LockProblem::Inconsistent(i) => i.fmt(f),
        }
    }
}

/// Where `lock` falls short of `needs`: missing pins, pins for what left the source, a
/// version the source asks for that the lock does not hold, a standard library other than
/// `stdlib` (the hash of this envc's); and pins whose own fields disagree.
pub fn stale(lock: &Lockfile, needs: &Needs, stdlib: &str) -> Vec<LockProblem> {
    let mut out = Vec::new();
    let mut push =
        |key: PinKey, problem: String| out.push(LockProblem::Stale(Stale { key, problem }));
    for (name, need) in &needs.packages {
        let key = PinKey::Package(name.clone());
        match lock.package(name) {
            None => push(
                key,
                format!("not in the lockfile (used by {})", need.used_by.join(", ")),
            ),
            Some(p) => {
                if let Some(v) = &need.version {
                    if *v != p.version {
                        push(
                            key.clone(),
                            format!("the source asks for {v}, the lockfile pins {}", p.version),
                        );
                    }
                }
                // A Debian package may come from its suite or one pinned beside it.
                let from = match &need.vendor {
                    Some(_) => vec![need.archive()],
                    None => lock.group(&need.archive()),
                };
                if !from.contains(&p.archive) {
                    push(
                        key.clone(),
                        format!(
                            "pinned from {}, the source installs it from {}",
                            p.archive,
                            need.archive()
                        ),
                    );
                }
                // A vendor package's Debian dependencies come from its targets' suite.
                let debian = lock.group(&ArchivePin::default_name(&need.suite));
                let members = p.closure.iter().flat_map(|c| &c.packages);
                let moved = members.filter_map(|m| lock.package(m)).find(|m| {
                    lock.archive(&m.archive).is_some_and(|a| !a.is_vendor())
                        && !debian.contains(&m.archive)
                });
                if let Some(m) = moved {
                    push(
                        key.clone(),
                        format!(
                            "its closure pins `{}` from {}, its targets now run {}",
                            m.name, m.archive, need.suite
                        ),
                    );
                }
                let starts: Vec<&str> = need.starts_from.iter().map(String::as_str).collect();
                match &p.closure {
                    None => push(
                        key,
                        format!(
                            "pinned only as a dependency, without the closure of its own (used \
                             by {})",
                            need.used_by.join(", ")
                        ),
                    ),
                    // Format 1 pinned no closure: the package alone.
                    Some(c) if c.starts_from.is_empty() && !starts.is_empty() => push(
                        key,
                        format!(
                            "pinned by an older envc without its closure (what it brings onto \
                             {})",
                            starts.join(", ")
                        ),
                    ),
                    Some(c) if c.starts_from != starts => push(
                        key,
                        format!(
                            "its closure was resolved onto {}, its targets now start from {}",
                            c.starts_from.join(", "),
                            starts.join(", ")
                        ),
                    ),
                    Some(_) => {}
                }
            }
        }
    }
    // Formats 1 and 2 pinned an image's set as versions, not bytes: a build cannot check
    // the .debs it installs against them.
    for i in &lock.images {
        let unknown = i.packages.iter().filter(|p| !p.bytes_known()).count();
        if unknown > 0 && needs.images.contains_key(&i.name) {
            push(
                i.key(),
                format!(
                    "its set pins the versions of {unknown} packages but not their .debs' bytes \
                     (an older envc's lockfile format): `envc lock FILE --update={}` pins them \
                     (at the suite's current versions)",
                    i.key()
                ),
            );
        }
    }
    for (name, need) in &needs.images {
        let key = PinKey::Image(name.clone());
        match lock.image(name) {
            None => push(key, "not in the lockfile".into()),
            Some(i) if i.archive != ArchivePin::default_name(&need.suite) => push(
                key,
                format!(
                    "pinned from {}, the source builds it from {}",
                    i.archive, need.suite
                ),
            ),
            Some(i) if i.includes != need.includes => {
                let list = |xs: Vec<&str>| {
                    if xs.is_empty() {
                        "none".to_string()
                    } else {
                        xs.join(", ")
                    }
                };
                let added = need
                    .includes
                    .iter()
                    .filter(|p| !i.includes.contains(p))
                    .map(String::as_str)
                    .collect();
                let dropped = i
                    .includes
                    .iter()
                    .filter(|p| !need.includes.contains(p))
                    .map(String::as_str)
                    .collect();
                push(
                    key,
                    format!(
                        "the source's packages changed (added: {}; dropped: {}) since its set \
                         was pinned",
                        list(added),
                        list(dropped)
                    ),
                );
            }
            Some(_) => {}
        }
    }
    // Each Debian suite's pin holds the suites the source takes beside it.
    for suite in needs.suites() {
        let key = PinKey::debian_archive(suite);
        let Some(a) = lock.archive(&ArchivePin::default_name(suite)) else {
            continue;
        };
        let wanted = needs.companions(suite);
        if a.with != wanted {
            let view = |with: &[String]| {
                if with.is_empty() {
                    format!("{suite} alone")
                } else {
                    format!("{suite} with {}", with.join(", "))
                }
            };
            push(
                key,
                format!(
                    "the lockfile pins {}, the source takes {}",
                    view(&a.with),
                    view(&wanted)
                ),
            );
        }
    }
    for (name, v) in &needs.vendors {
        let key = PinKey::Archive(name.clone());
        match lock.archive(name) {
            None => push(key, "not in the lockfile".into()),
            Some(a) => {
                let pinned = (&a.mirror, &a.suite, &a.components, a.signed_by.as_ref());
                if pinned != (&v.url, &v.suite, &v.components, Some(&v.fingerprint)) {
                    push(
                        key,
                        format!(
                            "the source declares {} {} {} signed by {}, the lockfile pins {} {} \
                             {} signed by {}",
                            v.url,
                            v.suite,
                            v.components.join(","),
                            v.fingerprint,
                            a.mirror,
                            a.suite,
                            a.components.join(","),
                            a.signed_by.as_deref().unwrap_or("Debian's keyring")
                        ),
                    );
                }
            }
        }
    }
    for p in &lock.packages {
        if !needs.packages.contains_key(&p.name) && !lock.in_a_closure(&p.name) {
            push(p.key(), "pinned, but no node installs it any more".into());
        }
    }
    // A closure resolved onto an image's set holds while that set does: a moved set may
    // satisfy a dependency another way.
    for p in &lock.packages {
        let onto = p.closure.iter().flat_map(|c| &c.starts_from);
        for start in onto {
            let Some(image) = PinKey::image_of(start) else {
                continue;
            };
            if lock.image(&image).is_none() {
                push(
                    p.key(),
                    format!("its closure was resolved onto {start}, which is not pinned"),
                );
            }
        }
    }
    for i in &lock.images {
        if !needs.images.contains_key(&i.name) {
            push(
                i.key(),
                "pinned, but the source has no such image any more".into(),
            );
        }
    }
    for need in needs.cloud_images.values() {
        let key = need.key();
        match lock.cloud_image(&need.name, &need.region) {
            None => push(
                key,
                format!(
                    "not in the lockfile (booted by {})",
                    need.used_by.join(", ")
                ),
            ),
            Some(pin) if !need.named_by(pin) => push(
                key,
                format!(
                    "the source names {} {}, the lockfile pinned {} for {} owner {}, pattern \
                     {:?}, {}",
                    need.provider,
                    need.describe(),
                    pin.id,
                    pin.provider,
                    pin.owner,
                    pin.pattern,
                    pin.architecture
                ),
            ),
            Some(_) => {}
        }
    }
    for c in &lock.cloud_images {
        if !needs.cloud_images.contains_key(c.key().name()) {
            push(c.key(), "pinned, but no machine boots it any more".into());
        }
    }
    for (address, need) in &needs.providers {
        let key = PinKey::Provider(address.clone());
        let used_by = need.used_by.join(", ");
        let Some(pin) = lock.provider(address) else {
            push(key, format!("not in the lockfile (serves {used_by})"));
            continue;
        };
        match Constraints::parse(&need.constraint) {
            Ok(c) if !c.admits(&pin.version) => push(
                key.clone(),
                format!(
                    "pinned at {}, which the constraint `{c}` of {used_by} does not admit: run \
                     `envc lock FILE --update={key}` to pin a version it admits",
                    pin.version
                ),
            ),
            Ok(_) => {}
            // `add_provider` reads every constraint first; a `Needs` built otherwise may not.
            Err(e) => push(
                key,
                format!("{used_by}: {}", e.to_string().replace('\n', "; ")),
            ),
        }
    }
    for p in &lock.providers {
        let address = p.address.to_string();
        if !needs.providers.contains_key(&address) {
            push(p.key(), "pinned, but no resource uses it any more".into());
        }
    }
    for t in &needs.tools {
        if lock.tool(t).is_none() {
            push(PinKey::Tool(t.clone()), "not in the lockfile".into());
        }
    }
    for t in &lock.tools {
        if !needs.tools.contains(&t.name) {
            push(
                t.key(),
                "pinned, but nothing in the environment uses it any more".into(),
            );
        }
    }
    if lock.stdlib != stdlib {
        push(
            PinKey::Stdlib,
            format!(
                "this envc's standard library ({}) is not the one locked ({})",
                &stdlib[..stdlib.len().min(12)],
                &lock.stdlib[..lock.stdlib.len().min(12)]
            ),
        );
    }
    out.extend(
        inconsistencies(lock)
            .into_iter()
            .map(LockProblem::Inconsistent),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{hex, sample_with_cloud, sample_with_provider};

    /// What a machine in `region` booting Debian 12 (std/aws's `debian_12`) needs.
    fn debian_12(region: &str, node: &str) -> CloudImageNeed {
        CloudImageNeed {
            name: "debian-12".into(),
            provider: "aws".into(),
            region: region.into(),
            owner: "136693071363".into(),
            pattern: "debian-12-amd64-*".into(),
            architecture: "x86_64".into(),
            used_by: vec![node.into()],
        }
    }

    /// The sample's needs: its packages, image and tools as they are pinned, and Debian 12
    /// in both regions the sample pins it in.
    fn needs() -> Needs {
        let lock = sample_with_cloud();
        let mut needs = Needs::default();
        for p in lock.packages.iter().filter(|p| p.closure.is_some()) {
            let c = p.closure.clone().unwrap_or_default();
            for s in &c.starts_from {
                needs
                    .add_package(&p.name, "bookworm", None, None, "h/package", s)
                    .unwrap();
            }
        }
        for i in &lock.images {
            needs.images.insert(
                i.name.clone(),
                ImageNeed {
                    suite: "bookworm".into(),
                    includes: i.includes.clone(),
                },
            );
        }
        needs.suite_updates.insert(
            "bookworm".into(),
            SuiteNeed {
                updates: false,
                declared_by: "image:debian-12".into(),
            },
        );
        needs.tools = lock.tools.iter().map(|t| t.name.clone()).collect();
        for (region, node) in [("eu-west-1", "vm:web-0"), ("us-east-1", "vm:web-1")] {
            needs.add_cloud_image(debian_12(region, node)).unwrap();
        }
        needs
    }

    /// `stale(edit_lock(sample), edit_needs(needs))`, one problem a line.
    fn check(
        edit_lock: impl Fn(&mut Lockfile),
        edit_needs: impl Fn(&mut Needs),
        expected: &[&str],
    ) {
        let mut lock = sample_with_cloud();
        edit_lock(&mut lock);
        let mut needs = needs();
        edit_needs(&mut needs);
        let got: Vec<String> = stale(&lock, &needs, &hex('5'))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_cloud_image_pin_is_stale_when_missing_moved_left_over_or_edited() {
        check(|_| {}, |_| {}, &[]);
        // A machine in a third region.
        check(
            |_| {},
            |n| {
                n.add_cloud_image(debian_12("ap-south-1", "vm:web-2"))
                    .unwrap()
            },
            &[
                "cloud_image:debian-12@ap-south-1: not in the lockfile (booted by vm:web-2); run \
               `envc lock FILE` (or `--update=KEY`) and commit the lockfile",
            ],
        );
        // The source names another release under the same name.
        check(
            |_| {},
            |n| {
                let d = n.cloud_images.get_mut("debian-12@eu-west-1").unwrap();
                d.pattern = "debian-13-amd64-*".into();
            },
            &[
                "cloud_image:debian-12@eu-west-1: the source names aws owner 136693071363, \
               pattern \"debian-13-amd64-*\", x86_64, the lockfile pinned ami-0a1b2c3d4e5f60718 \
               for aws owner 136693071363, pattern \"debian-12-amd64-*\", x86_64; run `envc \
               lock FILE` (or `--update=KEY`) and commit the lockfile",
            ],
        );
        // The machine in us-east-1 is gone.
        check(
            |_| {},
            |n| {
                n.cloud_images.remove("debian-12@us-east-1");
            },
            &[
                "cloud_image:debian-12@us-east-1: pinned, but no machine boots it any more; run \
               `envc lock FILE` (or `--update=KEY`) and commit the lockfile",
            ],
        );
        // Edited by hand: an id that is no AMI's, an image the pattern does not name.
        check(
            |l| {
                l.cloud_images[0].id = "ami-12345".into();
                l.cloud_images[1].image_name = "debian-13-amd64-20261001-1890".into();
            },
            |_| {},
            &[
                "cloud_image:debian-12@eu-west-1: id \"ami-12345\" is not an AMI id (`ami-` and \
                 8 or 17 lowercase hex digits); its fields disagree, so it was edited by hand: \
                 run `envc lock --update=cloud_image:debian-12@eu-west-1 FILE`",
                "cloud_image:debian-12@us-east-1: image name \"debian-13-amd64-20261001-1890\" \
                 does not match the pattern \"debian-12-amd64-*\" it was chosen by; its fields \
                 disagree, so it was edited by hand: run `envc lock \
                 --update=cloud_image:debian-12@us-east-1 FILE`",
            ],
        );
    }

    /// What `stale` says of the sample with a provider, against `declare`'s needs (each
    /// `(address, constraint, node)` added to the sample's own).
    fn check_providers(
        edit_lock: impl Fn(&mut Lockfile),
        declare: &[(&str, &str, &str)],
        expected: &[&str],
    ) {
        check(
            |l| {
                l.providers = sample_with_provider().providers;
                edit_lock(l);
            },
            |n| {
                for (address, constraint, node) in declare {
                    n.add_provider(address, constraint, node).unwrap();
                }
            },
            expected,
        );
    }

    #[test]
    fn a_provider_pin_is_stale_when_missing_left_over_or_no_longer_admitted() {
        const ADDRESS: &str = "registry.envc.test/envc-test/local";
        const KEY: &str = "provider:registry.envc.test/envc-test/local";
        let fix = "run `envc lock FILE` (or `--update=KEY`) and commit the lockfile";
        check_providers(|_| {}, &[(ADDRESS, "~> 0.1.0", "h/resource:notes")], &[]);
        // Any spelling of the address and the constraint that reads the same.
        check_providers(
            |_| {},
            &[(
                "Registry.ENVC.test/envc-test/local",
                ">=0.1,<0.2",
                "h/resource:notes",
            )],
            &[],
        );
        check_providers(
            |l| l.providers.clear(),
            &[
                (ADDRESS, "~> 0.1.0", "h/resource:notes"),
                (ADDRESS, "~> 0.1.0", "h/resource:b"),
            ],
            &[&format!(
                "{KEY}: not in the lockfile (serves h/resource:notes, h/resource:b); {fix}"
            )],
        );
        check_providers(
            |_| {},
            &[(ADDRESS, "~> 0.2.0", "h/resource:notes")],
            &[&format!(
                "{KEY}: pinned at 0.1.0, which the constraint `~> 0.2.0` of h/resource:notes \
                 does not admit: run `envc lock FILE --update={KEY}` to pin a version it admits; \
                 {fix}"
            )],
        );
        check_providers(
            |_| {},
            &[],
            &[&format!(
                "{KEY}: pinned, but no resource uses it any more; {fix}"
            )],
        );
    }

    #[test]
    fn a_providers_nodes_must_agree_on_its_constraint() {
        let mut needs = Needs::default();
        let add = |n: &mut Needs, address: &str, constraint: &str, node: &str| {
            n.add_provider(address, constraint, node)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            add(&mut needs, "envc-test/local", "~>0.1.0", "h/resource:a"),
            Ok(())
        );
        assert_eq!(
            add(&mut needs, "ENVC-test/local", "~> 0.1.0", "h/resource:b"),
            Ok(())
        );
        let need = &needs.providers["registry.terraform.io/envc-test/local"];
        assert_eq!(need.constraint, "~> 0.1.0");
        assert_eq!(need.used_by, ["h/resource:a", "h/resource:b"]);
        assert_eq!(
            add(&mut needs, "envc-test/local", "~> 0.2", "h/resource:c"),
            Err(
                "provider:registry.terraform.io/envc-test/local: `h/resource:c` constrains it to \
                 `~> 0.2`, `h/resource:a` to `~> 0.1.0`; a lockfile pins one version of a \
                 provider\n  hint: give every resource of registry.terraform.io/envc-test/local \
                 the same version constraint"
                    .into()
            )
        );
        let bad = add(&mut needs, "envc-test/local", "0.1.x", "h/resource:d").unwrap_err();
        assert!(
            bad.starts_with("`h/resource:d`: invalid provider version constraint `0.1.x`"),
            "{bad}"
        );
        let bad = add(&mut needs, "local", "~> 0.1", "h/resource:e").unwrap_err();
        assert!(
            bad.starts_with("`h/resource:e`: invalid provider source address `local`"),
            "{bad}"
        );
    }

    #[test]
    fn two_machines_naming_one_image_differently_conflict() {
        let mut needs = Needs::default();
        needs
            .add_cloud_image(debian_12("eu-west-1", "vm:a"))
            .unwrap();
        // The same image again: one need, booted by both.
        needs
            .add_cloud_image(debian_12("eu-west-1", "vm:b"))
            .unwrap();
        assert_eq!(
            needs.cloud_images["debian-12@eu-west-1"].used_by,
            ["vm:a", "vm:b"]
        );
        let arm = CloudImageNeed {
            architecture: "arm64".into(),
            ..debian_12("eu-west-1", "vm:c")
        };
        let e = needs.add_cloud_image(arm).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cloud_image:debian-12@eu-west-1: `vm:c` names it as owner 136693071363, pattern \
             \"debian-12-amd64-*\", arm64, `vm:a` as owner 136693071363, pattern \
             \"debian-12-amd64-*\", x86_64; a lockfile pins one image of a name per region\n  \
             hint: give the two images different names, or use one value for both"
        );
    }
}
