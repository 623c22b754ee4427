//! The lockfile's model: every external input an environment depends on, pinned.
//!
//! Each pin has a stable key (`package:hello`, `archive:debian/bookworm`, …): `lock diff`
//! reports by key and `envc lock --update=KEY` re-resolves one pin, so keys never depend on
//! a pin's content, only on its kind and name.

/// The lockfile format's version; a lockfile of another version is refused with a message
/// that says to regenerate it (or to upgrade envc, when the lockfile is newer).
/// Version 2: a package the environment names carries its closure (`starts_from`,
/// `closure`), each package of it pinned down to its bytes.
/// Version 3: an image's package set is pinned down to its bytes too (arch, size, sha256
/// and pool path of every `.deb`), so that an image builds from the store, not the mirror.
/// Version 4: a Debian suite's pin holds its `-updates` and `-security` suites (`with`, each
/// pinned as an archive of its own), and an image's package names its archive when it is not
/// the image's (a package of the set from `bookworm-security`). Version 3 reads as version 4
/// with no suite beside any other ([`crate::text`] migrates it in memory). Versions 1 (no
/// closures: every package is one the environment names, with an empty closure; images
/// maybe without `includes`) and 2 (closures) pinned an image's set as versions only
/// (`NAME=VERSION`): read as they were, those packages' bytes unknown
/// ([`PackagePin::bytes_known`]), which `envc lock --migrate` keeps and `lock --check` reports.
/// Version 5: cloud images (`[[cloud_image]]`, an AMI per image and region) are pinned.
/// Version 4 reads as version 5 with none (an environment of that lockfile had no cloud
/// machine: one that has shows the pin missing).
/// A lockfile read keeps the format it was read from in [`Lockfile::version`]; the text
/// written is always this version's.
pub const FORMAT_VERSION: u32 = 5;

/// The earliest lockfile format this envc still reads (migrated in memory).
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// The suites apt reads beside a Debian release's own, in the order `with` lists them: the
/// point-release updates and the security updates (`bookworm-updates`,
/// `bookworm-security`).
pub const COMPANION_SUFFIXES: [&str; 2] = ["-updates", "-security"];

pub use envc_ids::pin::PinKey;
use envc_ids::pin::{ArchiveValue, ClosureDeb, ImageValue, PackageValue, PinValue, ProviderValue};

use crate::provider::{Constraints, PackageHash, ProviderAddress, ResolvedProvider, Version};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lockfile {
    pub version: u32,
    /// The only clock image builds see (`SOURCE_DATE_EPOCH`), in seconds.
    pub source_date_epoch: u64,
    /// Hash (64 hex) of the standard library embedded in the envc that locked.
    pub stdlib: String,
    pub archives: Vec<ArchivePin>,
    pub packages: Vec<PackagePin>,
    pub images: Vec<ImagePin>,
    pub tools: Vec<ToolPin>,
    /// The cloud images the environment's cloud machines boot, one per image and region.
    pub cloud_images: Vec<CloudImagePin>,
    /// The Terraform/OpenTofu providers the environment's `resource` nodes are served by.
    pub providers: Vec<ProviderPin>,
}

/// A Terraform/OpenTofu provider as `envc lock` resolved it: the newest version its
/// constraint admitted then, and the hashes any package of that version must match
/// (`h1:`/`zh:`, as `.terraform.lock.hcl` holds them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderPin {
    /// The full source address (`registry.terraform.io/hashicorp/google`): the pin's name.
    pub address: ProviderAddress,
    pub version: Version,
    /// The constraint the source declared when the pin was made, as `Constraints`' Display
    /// writes it: for the reader, and for `lock --check` to tell a pin the source moved
    /// away from. Not part of the pin's value: what a node runs is the version and bytes.
    pub constraints: Constraints,
    /// Sorted as text (`h1:` before `zh:`), without repeats ([`Lockfile::normalize`]).
    pub hashes: Vec<PackageHash>,
}

impl ProviderPin {
    /// The pin of `resolved`, declared with `constraints`.
    pub fn of(resolved: &ResolvedProvider, constraints: &Constraints) -> ProviderPin {
        ProviderPin {
            address: resolved.address.clone(),
            version: resolved.version.clone(),
            constraints: constraints.clone(),
            hashes: resolved.hashes().to_vec(),
        }
    }

    pub fn key(&self) -> PinKey {
        PinKey::Provider(self.address.to_string())
    }

    /// What [`crate::provider::fetch`] checks a package against.
    pub fn resolved(&self) -> ResolvedProvider {
        ResolvedProvider::new(
            self.address.clone(),
            self.version.clone(),
            self.hashes.iter().cloned(),
        )
    }

    /// The pin value a node carries: `VERSION HASH…`.
    pub fn value(&self) -> ProviderValue {
        ProviderValue::new(
            &self.version.to_string(),
            self.hashes.iter().map(PackageHash::to_string),
        )
    }
}

/// The state of one Debian archive (a mirror's suite) when it was locked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivePin {
    /// How packages and images refer to it: `debian/bookworm`.
    pub name: String,
    /// `http://deb.debian.org/debian`, without a trailing slash.
    pub mirror: String,
    pub suite: String,
    pub architecture: String,
    pub components: Vec<String>,
    /// sha256 of `dists/SUITE/InRelease` as served (of `Release` on a mirror without
    /// InRelease): what the package hashes are verified from.
    pub release_sha256: String,
    /// The Release file's `Date:` field, so a reader sees how old the pinned state is.
    pub date: String,
    /// A vendor's archive: the fingerprint of the key its InRelease was checked with (the
    /// key the source declares, pinned). `None` for Debian's, checked with Debian's keyring.
    pub signed_by: Option<String>,
    /// A Debian suite's pin: the names of the archives pinned beside it, which its packages
    /// and image sets are resolved across as apt does (`debian/bookworm-updates`,
    /// `debian/bookworm-security`). Empty for a suite alone (the source opted out), for a
    /// companion itself and for a vendor's archive.
    pub with: Vec<String>,
}

/// One package down to the bytes of its `.deb`: one an environment names (with its
/// [`PackageClosure`]), one of such a package's closure, or one of an image's set
/// (`closure: None` for both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackagePin {
    pub name: String,
    /// The `name` of an [`ArchivePin`] of the same lockfile.
    pub archive: String,
    pub version: String,
    pub architecture: String,
    /// Path of the `.deb` under the mirror (`pool/main/h/hello/hello_2.10-3_amd64.deb`).
    pub filename: String,
    pub size: u64,
    pub sha256: String,
    /// Present on the packages the environment names; `None` on the packages of their
    /// closures, which are pinned only to be installed with them.
    pub closure: Option<PackageClosure>,
}

/// What installing a package brings onto its targets besides itself: its dependency
/// closure beyond what every one of its targets starts from. Installing exactly these
/// `.deb`s needs no archive on the target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackageClosure {
    /// What its targets start from, sorted: `image:NAME` (a VM booting that image, a host
    /// declaring it as its `base`) or [`REQUIRED`] (a host envc knows nothing of). The
    /// closure is resolved against the packages every one of them has.
    pub starts_from: Vec<String>,
    /// The other packages installed with it, sorted by name; each is a [`PackagePin`] of
    /// the same lockfile.
    pub packages: Vec<String>,
}

/// The version and hash a pin value gives a closure package the lockfile does not pin.
pub const UNPINNED: &str = "unpinned";

/// The start of a host that declares no `base`: the archive's `Priority: required`
/// packages (and their closure), which every Debian system has.
pub const REQUIRED: &str = "required";

/// The whole package set of an image, down to each `.deb`'s bytes: so that a changed
/// dependency of a dependency shows up in review, not only in the built image, and so that
/// the image is built from exactly these `.deb`s (kept in the store), whatever the mirror
/// serves by then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePin {
    /// The image node's name.
    pub name: String,
    pub archive: String,
    /// What the set was resolved from (the image's base and its own packages), sorted: so
    /// that a package dropped from the source shows the pin stale, offline.
    pub includes: Vec<String>,
    /// Sorted by package name, one entry per package; each of the image's `archive`, with
    /// no closure.
    pub packages: Vec<PackagePin>,
}

/// A tool envc drives, as probed on the machine that locked (`qemu-system-x86_64`,
/// `mmdebstrap`, `ssh`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPin {
    pub name: String,
    pub version: String,
}

/// A cloud image as `envc lock` resolved it in one region: the source names an image by its
/// owner and a name pattern (std/aws's `Image`); the pin is the AMI that was the newest match
/// then. A build boots exactly `id` until `envc lock --update` moves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudImagePin {
    /// The source's name for the image (`debian-12`), not the AMI's.
    pub name: String,
    /// `aws`.
    pub provider: String,
    /// `eu-west-1`: an AMI id is a region's.
    pub region: String,
    /// The owner account the source trusts (`136693071363`, Debian's).
    pub owner: String,
    /// The name pattern the image was chosen by (`debian-12-amd64-*`; `*` and `?` as AWS's
    /// `name` filter reads them).
    pub pattern: String,
    /// `x86_64`, `arm64`, as EC2 names them.
    pub architecture: String,
    /// The AMI: `ami-` and 8 or 17 hex digits.
    pub id: String,
    /// The AMI's name (`debian-12-amd64-20261101-1900`), matching `pattern`.
    pub image_name: String,
    /// The AMI's creation date as EC2 gives it (`2026-11-01T12:00:00.000Z`).
    pub created: String,
}

impl CloudImagePin {
    pub fn key(&self) -> PinKey {
        PinKey::cloud_image(&self.name, &self.region)
    }

    /// The day it was created (`2026-11-01`), for a diff line.
    pub fn day(&self) -> &str {
        self.created.get(..10).unwrap_or(&self.created)
    }
}

impl ArchivePin {
    pub fn key(&self) -> PinKey {
        PinKey::Archive(self.name.clone())
    }

    /// A vendor's archive (its name is the source's, its key pinned), not Debian's.
    pub fn is_vendor(&self) -> bool {
        self.signed_by.is_some()
    }

    /// The conventional name of a Debian suite's pin: `debian/SUITE`.
    pub fn default_name(suite: &str) -> String {
        format!("debian/{suite}")
    }

    /// The suites apt reads beside a Debian suite: `bookworm` → `bookworm-updates`,
    /// `bookworm-security`.
    pub fn companion_suites(suite: &str) -> Vec<String> {
        COMPANION_SUFFIXES
            .iter()
            .map(|s| format!("{suite}{s}"))
            .collect()
    }

    /// Whether this pin is a Debian suite's security suite (`bookworm-security`).
    pub fn is_security(&self) -> bool {
        !self.is_vendor() && self.suite.ends_with("-security")
    }
}

impl PackagePin {
    pub fn key(&self) -> PinKey {
        PinKey::Package(self.name.clone())
    }

    /// Whether its `.deb`'s bytes are pinned: not for a package of an image's set read
    /// from format 1 or 2, which pinned versions only.
    pub fn bytes_known(&self) -> bool {
        !self.sha256.is_empty()
    }

    /// The `.deb` as a pin value names it.
    pub fn deb(&self) -> ClosureDeb {
        ClosureDeb {
            name: self.name.clone(),
            version: self.version.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

impl ImagePin {
    pub fn key(&self) -> PinKey {
        PinKey::Image(self.name.clone())
    }

    /// `(package, version)` of the set, sorted by package name.
    pub fn versions(&self) -> Vec<(String, String)> {
        self.packages
            .iter()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect()
    }
}

impl ToolPin {
    pub fn key(&self) -> PinKey {
        PinKey::Tool(self.name.clone())
    }
}

impl Lockfile {
    /// An empty lockfile of the current format.
    pub fn new(source_date_epoch: u64, stdlib: impl Into<String>) -> Lockfile {
        Lockfile {
            version: FORMAT_VERSION,
            source_date_epoch,
            stdlib: stdlib.into(),
            archives: Vec::new(),
            packages: Vec::new(),
            images: Vec::new(),
            tools: Vec::new(),
            cloud_images: Vec::new(),
            providers: Vec::new(),
        }
    }

    /// Sorts every list the way the text form writes it (pins by name, image sets by package
    /// name, components as given: their order is the mirror's `sources.list` order and
    /// does not change what is installed, but it is kept rather than guessed).
    pub fn normalize(&mut self) {
        self.archives.sort_by(|a, b| a.name.cmp(&b.name));
        self.packages.sort_by(|a, b| a.name.cmp(&b.name));
        for c in self.packages.iter_mut().filter_map(|p| p.closure.as_mut()) {
            c.packages.sort();
            c.packages.dedup();
            c.starts_from.sort();
            c.starts_from.dedup();
        }
        self.images.sort_by(|a, b| a.name.cmp(&b.name));
        for image in &mut self.images {
            image.packages.sort_by(|a, b| a.name.cmp(&b.name));
            image.includes.sort();
            image.includes.dedup();
        }
        self.tools.sort_by(|a, b| a.name.cmp(&b.name));
        self.cloud_images
            .sort_by(|a, b| (&a.name, &a.region).cmp(&(&b.name, &b.region)));
        // By the address's text, as keys sort.
        self.providers.sort_by_key(|p| p.address.to_string());
        for p in &mut self.providers {
            p.hashes.sort();
            p.hashes.dedup();
        }
    }

    /// Every key of this lockfile, sorted: what diff compares and what `--update` accepts.
    pub fn keys(&self) -> Vec<PinKey> {
        let mut keys = vec![PinKey::SourceDateEpoch, PinKey::Stdlib];
        keys.extend(self.archives.iter().map(ArchivePin::key));
        keys.extend(self.packages.iter().map(PackagePin::key));
        keys.extend(self.images.iter().map(ImagePin::key));
        keys.extend(self.tools.iter().map(ToolPin::key));
        keys.extend(self.cloud_images.iter().map(CloudImagePin::key));
        keys.extend(self.providers.iter().map(ProviderPin::key));
        keys.sort();
        keys
    }

    pub fn archive(&self, name: &str) -> Option<&ArchivePin> {
        self.archives.iter().find(|a| a.name == name)
    }

    /// The archives a package of the Debian suite pinned as `main` may come from: `main`
    /// and the archives pinned beside it (its `with`).
    pub fn group(&self, main: &str) -> Vec<String> {
        let with = self
            .archive(main)
            .map(|a| a.with.clone())
            .unwrap_or_default();
        std::iter::once(main.to_string()).chain(with).collect()
    }

    /// The archive `name` is pinned beside (`debian/bookworm` for
    /// `debian/bookworm-security`), or `name` itself when it is a main suite's.
    pub fn main_of<'a>(&'a self, name: &'a str) -> &'a str {
        self.archives
            .iter()
            .find(|a| a.with.iter().any(|w| w == name))
            .map_or(name, |a| a.name.as_str())
    }

    /// Whether two archives are one Debian suite's (the same, or pinned beside each other).
    pub fn same_suite(&self, a: &str, b: &str) -> bool {
        self.main_of(a) == self.main_of(b)
    }

    pub fn package(&self, name: &str) -> Option<&PackagePin> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// Whether a package of this lockfile is in the closure of one the environment names.
    pub fn in_a_closure(&self, name: &str) -> bool {
        self.packages
            .iter()
            .filter_map(|p| p.closure.as_ref())
            .any(|c| c.packages.iter().any(|n| n == name))
    }

    /// Drops the packages that are neither named by the environment nor in a closure of one
    /// that is (what an update or a dropped package left behind).
    pub fn drop_unused_closure_pins(&mut self) {
        let keep: Vec<bool> = self
            .packages
            .iter()
            .map(|p| p.closure.is_some() || self.in_a_closure(&p.name))
            .collect();
        let mut keep = keep.into_iter();
        self.packages.retain(|_| keep.next().unwrap_or(true));
    }

    pub fn image(&self, name: &str) -> Option<&ImagePin> {
        self.images.iter().find(|i| i.name == name)
    }

    pub fn tool(&self, name: &str) -> Option<&ToolPin> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The pin of cloud image `name` in `region`.
    pub fn cloud_image(&self, name: &str, region: &str) -> Option<&CloudImagePin> {
        self.cloud_images
            .iter()
            .find(|c| c.name == name && c.region == region)
    }

    /// The pin of the provider at `address` (its full address, as keys name it).
    pub fn provider(&self, address: &str) -> Option<&ProviderPin> {
        self.providers
            .iter()
            .find(|p| p.address.to_string() == address)
    }

    /// The pins a derivation uses, as the compiler's `pins` map wants them (key → a string
    /// that changes whenever the pin does): a package pin's `version sha256`, an image's
    /// archive state and package set, and so on. `None` for a key this lockfile lacks.
    pub fn pin_value(&self, key: &PinKey) -> Option<String> {
        match key {
            PinKey::SourceDateEpoch => Some(self.source_date_epoch.encode()),
            PinKey::Stdlib => Some(self.stdlib.clone()),
            PinKey::Archive(name) => self.archive(name).map(|a| {
                ArchiveValue {
                    mirror: a.mirror.clone(),
                    suite: a.suite.clone(),
                    architecture: a.architecture.clone(),
                    components: a.components.clone(),
                    release_sha256: a.release_sha256.clone(),
                }
                .encode()
            }),
            PinKey::Package(name) => self.package(name).map(|p| {
                // A closure package without its pin is a broken lockfile (`consistency.rs`
                // reports it): the value keeps its name, so the build names it too.
                let names = p.closure.iter().flat_map(|c| &c.packages);
                let closure = names
                    .map(|n| match self.package(n) {
                        Some(d) => d.deb(),
                        None => ClosureDeb {
                            name: n.clone(),
                            version: UNPINNED.into(),
                            sha256: UNPINNED.into(),
                        },
                    })
                    .collect();
                PackageValue {
                    version: p.version.clone(),
                    architecture: p.architecture.clone(),
                    sha256: p.sha256.clone(),
                    closure,
                }
                .encode()
            }),
            PinKey::Image(name) => self.image(name).map(|i| {
                ImageValue {
                    archive: i.archive.clone(),
                    packages: i.packages.iter().map(PackagePin::deb).collect(),
                }
                .encode()
            }),
            PinKey::Tool(name) => self.tool(name).map(|t| t.version.clone()),
            // The AMI a machine boots: an id is unique in its region, which the key names.
            PinKey::CloudImage(_) => {
                let (name, region) = key.cloud_image_parts()?;
                self.cloud_image(name, region).map(|c| c.id.clone())
            }
            // The version and every package hash: a node's id moves with its provider's
            // bytes, not only with its version.
            PinKey::Provider(address) => self.provider(address).map(|p| p.value().encode()),
        }
    }

    /// Every pin as the compiler takes them: key → value.
    pub fn pins(&self) -> std::collections::BTreeMap<PinKey, String> {
        self.keys()
            .into_iter()
            .filter_map(|k| {
                let v = self.pin_value(&k)?;
                Some((k, v))
            })
            .collect()
    }
}

/// `envc lock FILE --update=KEY…`: the freshly resolved lockfile for the named pins, the old
/// one for every other pin that both have. Pins that the environment added or dropped
/// follow `fresh` (what the environment needs now).
///
/// Updating a package or an image also updates its archive pin: the archive pin records
/// the archive state the newest pins were verified against. Other packages of that archive
/// keep their pins, which hold by their `.deb` hashes.
///
/// A key in neither lockfile is an error, so that a typo does not silently update nothing.
pub fn update(
    old: &Lockfile,
    fresh: &Lockfile,
    keys: &[PinKey],
) -> Result<Lockfile, crate::error::LockError> {
    let known_old = old.keys();
    let known_fresh = fresh.keys();
    for key in keys {
        if !known_old.iter().chain(&known_fresh).any(|k| k == key) {
            return Err(crate::error::LockError {
                message: format!("no pin `{key}` in the lockfile or the environment"),
                line: None,
                pin: Some(key.clone()),
                hint: "keys are package:NAME, image:NAME, archive:NAME, \
                       cloud_image:NAME@REGION, provider:HOSTNAME/NAMESPACE/TYPE, tool:NAME, \
                       source_date_epoch and stdlib, as `envc lock diff` prints them"
                    .into(),
            });
        }
    }
    let mut named: Vec<PinKey> = keys.to_vec();
    // A package in a closure moves with the packages that bring it: their closures were
    // resolved together, and a dependency moved alone may no longer satisfy them.
    for p in fresh.packages.iter().chain(&old.packages) {
        let members = p.closure.iter().flat_map(|c| &c.packages);
        if members
            .map(|m| PinKey::Package(m.clone()))
            .any(|m| keys.contains(&m))
        {
            named.push(p.key());
        }
    }
    // A package whose closure was resolved onto an image's set is resolved again with it.
    for p in &fresh.packages {
        let onto = p.closure.iter().flat_map(|c| &c.starts_from);
        let images: Vec<PinKey> = onto
            .filter_map(|s| PinKey::image_of(s))
            .map(PinKey::Image)
            .collect();
        if images.iter().any(|i| keys.contains(i)) {
            named.push(p.key());
        }
    }
    // A package's closure moves with it; then every package that moves brings its archive
    // (a vendor package's closure names Debian's packages, pinned from Debian's archive).
    for p in &fresh.packages {
        if named.contains(&p.key()) {
            let members = p.closure.iter().flat_map(|c| &c.packages);
            named.extend(members.map(|n| PinKey::Package(n.clone())));
        }
    }
    for p in &fresh.packages {
        if named.contains(&p.key()) {
            named.push(PinKey::Archive(p.archive.clone()));
        }
    }
    for i in &fresh.images {
        if named.contains(&i.key()) {
            named.push(PinKey::Archive(i.archive.clone()));
            named.extend(
                i.packages
                    .iter()
                    .map(|p| PinKey::Archive(p.archive.clone())),
            );
        }
    }
    // A Debian suite's pin and the suites pinned beside it move together: the suite's
    // `with` names them.
    let groups: Vec<PinKey> = fresh
        .archives
        .iter()
        .chain(&old.archives)
        .filter(|a| named.contains(&a.key()))
        .flat_map(|a| {
            let main = fresh.main_of(&a.name).to_string();
            fresh.group(&main).into_iter().chain(old.group(&main))
        })
        .map(PinKey::Archive)
        .collect();
    named.extend(groups);
    let keep = |key: &PinKey| !named.contains(key);
    let mut out = fresh.clone();
    if keep(&PinKey::SourceDateEpoch) {
        out.source_date_epoch = old.source_date_epoch;
    }
    if keep(&PinKey::Stdlib) {
        out.stdlib = old.stdlib.clone();
    }
    fn keep_old<T: Clone>(
        list: &mut [T],
        key: impl Fn(&T) -> PinKey,
        old: &[T],
        keep: &dyn Fn(&PinKey) -> bool,
    ) {
        for item in list.iter_mut() {
            let k = key(item);
            if keep(&k) {
                if let Some(o) = old.iter().find(|o| key(o) == k) {
                    *item = o.clone();
                }
            }
        }
    }
    keep_old(&mut out.archives, ArchivePin::key, &old.archives, &keep);
    // A package that became named, or only a dependency, since `old` takes its new pin.
    let same_role = |p: &PackagePin| {
        old.package(&p.name)
            .is_none_or(|o| o.closure.is_some() == p.closure.is_some())
    };
    let keep_package = |key: &PinKey| keep(key) && fresh.package(key.name()).is_none_or(same_role);
    keep_old(
        &mut out.packages,
        PackagePin::key,
        &old.packages,
        &keep_package,
    );
    // A package kept from `old` keeps its closure, even where `fresh` resolved another one.
    let missing: Vec<PackagePin> = old
        .packages
        .iter()
        .filter(|m| out.package(&m.name).is_none() && out.in_a_closure(&m.name))
        .cloned()
        .collect();
    out.packages.extend(missing);
    out.drop_unused_closure_pins();
    keep_old(&mut out.images, ImagePin::key, &old.images, &keep);
    keep_old(&mut out.tools, ToolPin::key, &old.tools, &keep);
    // A cloud image kept holds whatever AWS published since: only naming it moves it.
    keep_old(
        &mut out.cloud_images,
        CloudImagePin::key,
        &old.cloud_images,
        &keep,
    );
    // A provider kept holds whatever its registry published since, as a package does. Its
    // `constraints` follow the source where the kept version still satisfies them (a
    // constraint widened around the pin moves nothing but that line); one that no longer
    // does is stale, and a plain relock names it (`needs::stale`).
    for p in out.providers.iter_mut() {
        if !keep(&p.key()) {
            continue;
        }
        if let Some(o) = old.providers.iter().find(|o| o.address == p.address) {
            let constraints = p.constraints.clone();
            *p = o.clone();
            if constraints.admits(&o.version) {
                p.constraints = constraints;
            }
        }
    }
    out.normalize();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    fn key(text: &str) -> PinKey {
        text.parse().unwrap()
    }

    #[test]
    fn keys_name_every_pin() {
        let keys: Vec<String> = sample().keys().iter().map(PinKey::to_string).collect();
        assert_eq!(
            keys,
            [
                "archive:debian/bookworm",
                "image:debian-12",
                "package:hello",
                "package:libc6",
                "package:libgreet1",
                "source_date_epoch",
                "stdlib",
                "tool:mmdebstrap",
                "tool:qemu-system-x86_64",
                "tool:ssh",
            ]
        );
    }

    /// `update(old, fresh, keys)` rendered as the keys whose pin came from `fresh`.
    fn check(keys: &[&str], expected: &str) {
        let keys: Vec<PinKey> = keys.iter().map(|k| k.parse().unwrap()).collect();
        let old = sample();
        let mut fresh = sample();
        fresh.source_date_epoch += 1;
        fresh.archives[0].release_sha256 = "d".repeat(64);
        fresh.packages[0].version = "2.10-4".into();
        fresh.packages[1].version = "2.36-9+deb12u14".into();
        fresh.packages[2].sha256 = "e".repeat(64);
        fresh.images[0].packages[0].version = "2.6.2".into();
        fresh.tools[2].version = "9.3".into();
        let got = match update(&old, &fresh, &keys) {
            Ok(lock) => {
                let mut from_fresh: Vec<String> = lock
                    .keys()
                    .into_iter()
                    .filter(|k| lock.pin_value(k) != old.pin_value(k))
                    .map(|k| k.to_string())
                    .collect();
                from_fresh.sort();
                from_fresh.join(" ")
            }
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expected, "{keys:?}");
    }

    #[test]
    fn update_takes_the_named_pins_and_keeps_the_rest() {
        check(&[], "");
        check(&["tool:ssh"], "tool:ssh");
        check(&["source_date_epoch"], "source_date_epoch");
        // A package brings its archive's state and its closure along.
        check(
            &["package:hello"],
            "archive:debian/bookworm package:hello package:libgreet1",
        );
        check(&["package:libc6"], "archive:debian/bookworm package:libc6");
        // ... and a package of a closure moves with the packages that bring it.
        check(
            &["package:libgreet1"],
            "archive:debian/bookworm package:hello package:libgreet1",
        );
        // An image brings the packages whose closure was resolved onto it.
        check(
            &["image:debian-12"],
            "archive:debian/bookworm image:debian-12 package:hello package:libgreet1",
        );
        check(&["archive:debian/bookworm"], "archive:debian/bookworm");
        check(
            &["package:helo"],
            "package:helo: no pin `package:helo` in the lockfile or the environment\n  \
             hint: keys are package:NAME, image:NAME, archive:NAME, cloud_image:NAME@REGION, \
             provider:HOSTNAME/NAMESPACE/TYPE, tool:NAME, source_date_epoch and stdlib, as \
             `envc lock diff` prints them",
        );
    }

    #[test]
    fn a_cloud_image_moves_only_when_named_and_with_nothing_else() {
        use crate::testdata::{cloud_image, sample_with_cloud};
        let old = sample_with_cloud();
        let mut fresh = sample_with_cloud();
        for c in &mut fresh.cloud_images {
            *c = cloud_image(
                &c.region.clone(),
                "ami-0b2c3d4e5f6071829",
                "20261101",
                "1900",
            );
        }
        fresh.tools[2].version = "9.3".into();
        // `keys` → the keys whose pin came from `fresh`.
        let check = |keys: &[&str], expected: &[&str]| {
            let keys: Vec<PinKey> = keys.iter().map(|k| k.parse().unwrap()).collect();
            let lock = update(&old, &fresh, &keys).unwrap();
            let moved: Vec<String> = lock
                .keys()
                .into_iter()
                .filter(|k| lock.pin_value(k) != old.pin_value(k))
                .map(|k| k.to_string())
                .collect();
            assert_eq!(moved, expected, "{keys:?}");
        };
        // A relock keeps an image that still holds, however new AWS's is.
        check(&[], &[]);
        check(
            &["cloud_image:debian-12@eu-west-1"],
            &["cloud_image:debian-12@eu-west-1"],
        );
        check(&["tool:ssh"], &["tool:ssh"]);
    }

    #[test]
    fn update_follows_the_environment_for_added_and_dropped_pins() {
        let old = sample();
        let mut fresh = sample();
        fresh.packages.remove(0);
        fresh.tools.push(ToolPin {
            name: "new-tool".into(),
            version: "1".into(),
        });
        let lock = update(&old, &fresh, &[]).unwrap();
        assert!(lock.package("hello").is_none());
        assert!(lock.tool("new-tool").is_some());
    }

    #[test]
    fn a_package_that_changed_role_takes_its_new_pin() {
        // libgreet1 was a dependency of hello; the environment now names it.
        let old = sample();
        let mut fresh = sample();
        fresh.packages[2].closure = Some(PackageClosure {
            starts_from: vec![REQUIRED.into()],
            packages: Vec::new(),
        });
        let lock = update(&old, &fresh, &[key("tool:ssh")]).unwrap();
        assert!(lock.package("libgreet1").unwrap().closure.is_some());
        // hello kept its pin, and so its closure: libgreet1 is both.
        assert!(lock.in_a_closure("libgreet1"));
    }

    #[test]
    fn a_closure_package_without_its_pin_keeps_its_name_in_the_value() {
        let mut lock = sample();
        lock.packages.retain(|p| p.name != "libgreet1");
        let value = lock.pin_value(&key("package:hello")).unwrap();
        assert!(value.ends_with(" libgreet1=unpinned@unpinned"), "{value}");
    }

    #[test]
    fn pin_values_change_with_their_pin() {
        let lock = sample();
        let mut moved = lock.clone();
        moved.packages[0].sha256 = "f".repeat(64);
        assert_ne!(
            lock.pin_value(&key("package:hello")),
            moved.pin_value(&key("package:hello"))
        );
        assert_eq!(
            lock.pin_value(&key("package:libc6")),
            moved.pin_value(&key("package:libc6"))
        );
        assert_eq!(lock.pin_value(&key("package:nope")), None);
        assert_eq!(
            lock.pin_value(&key("source_date_epoch")).as_deref(),
            Some("1700000000")
        );
        assert_eq!(
            lock.pin_value(&key("tool:ssh")).as_deref(),
            Some("9.2p1 Debian-2+deb12u6")
        );
    }
}

#[cfg(test)]
mod provider_tests {
    use super::*;
    use crate::testdata::{provider_pin, sample};

    /// `update(old, fresh, keys)` with `old` pinning 0.1.0 under `old_constraints` and
    /// `fresh` resolving 0.1.5 under `fresh_constraints`: the version and constraints kept.
    fn check(
        old_constraints: &str,
        fresh_constraints: &str,
        keys: &[&str],
        expected: (&str, &str),
    ) {
        let with = |pin: ProviderPin| {
            let mut l = sample();
            l.providers = vec![pin];
            l
        };
        let old = with(provider_pin("0.1.0", old_constraints, 1));
        let fresh = with(provider_pin("0.1.5", fresh_constraints, 5));
        let keys: Vec<PinKey> = keys.iter().map(|k| k.parse().unwrap()).collect();
        let out = update(&old, &fresh, &keys).unwrap();
        let p = &out.providers[0];
        assert_eq!(
            (p.version.to_string(), p.constraints.to_string()),
            (expected.0.to_string(), expected.1.to_string()),
            "{keys:?}"
        );
        // The value a node carries follows the pin kept.
        assert_eq!(
            out.pin_value(&p.key()),
            Some(p.value().encode()),
            "{keys:?}"
        );
    }

    #[test]
    fn a_provider_moves_only_when_named() {
        const KEY: &str = "provider:registry.envc.test/envc-test/local";
        check("~> 0.1.0", "~> 0.1.0", &[], ("0.1.0", "~> 0.1.0"));
        check("~> 0.1.0", "~> 0.1.0", &["tool:ssh"], ("0.1.0", "~> 0.1.0"));
        check("~> 0.1.0", "~> 0.1.0", &[KEY], ("0.1.5", "~> 0.1.0"));
        // A constraint widened around the pin: recorded, the pin kept.
        check("~> 0.1.0", ">= 0.1.0", &[], ("0.1.0", ">= 0.1.0"));
        // One that no longer admits it: kept as it was (stale, so a relock names it).
        check("~> 0.1.0", ">= 0.1.2", &[], ("0.1.0", "~> 0.1.0"));
    }

    #[test]
    fn a_providers_value_is_its_version_and_hashes() {
        let pin = provider_pin("0.1.0", "~> 0.1.0", 0x0f);
        let mut lock = sample();
        lock.providers = vec![pin.clone()];
        let value = lock.pin_value(&pin.key()).unwrap();
        assert_eq!(
            value,
            format!(
                "0.1.0 h1:Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8= zh:{} zh:{}",
                "0f".repeat(32),
                "10".repeat(32)
            )
        );
        assert!(lock.keys().contains(&pin.key()));
        assert_eq!(
            lock.pin_value(&PinKey::Provider("example.com/a/b".into())),
            None
        );
    }
}
