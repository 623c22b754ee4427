//! Lockfile pins as the crates exchange them: the key that names a pin and the one-line
//! value a derivation carries. This module is the only place either is written or read,
//! so the lockfile, the compiler and the executor cannot disagree on a spelling or on the
//! position of a field.
//!
//! The value lines are part of derivation encodings (a moved pin changes the ids of its
//! users), so their shape is fixed: changing it changes ids, like `ENCODING_VERSION`.

use std::fmt;
use std::str::FromStr;

/// The vendor part of the archive pins envc makes for a Debian suite: `debian/SUITE`.
pub const DEBIAN_VENDOR: &str = "debian";

/// What a pin is about, and its stable name in lockfiles, diffs and `--update=KEY`.
///
/// The variants are declared in the order of their text (`archive:` < `cloud_image:` <
/// `image:` < `package:` < `provider:` < `source_date_epoch` < `stdlib` < `tool:`), so keys
/// sort the same
/// as keys or as text: derivation encodings and lockfiles list pins in text order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PinKey {
    /// `archive:debian/bookworm`: one archive state.
    Archive(String),
    /// `cloud_image:debian-12@eu-west-1`: a cloud image (an AMI) named by its owner and a
    /// name pattern, resolved in one region. The name is `IMAGE@REGION` (see
    /// [`PinKey::cloud_image`]): an AMI id is a region's, so each region is its own pin.
    CloudImage(String),
    /// `image:debian-12`: an image's whole package set.
    Image(String),
    /// `package:nginx`: one package down to its bytes.
    Package(String),
    /// `provider:registry.terraform.io/hashicorp/google`: a Terraform/OpenTofu provider,
    /// named by its full source address `HOSTNAME/NAMESPACE/TYPE` (lowercase, the hostname
    /// always written, as `.terraform.lock.hcl` spells it), down to its packages' hashes.
    Provider(String),
    /// `source_date_epoch`: the only clock image builds see.
    SourceDateEpoch,
    /// `stdlib`: the standard library embedded in the envc that locked.
    Stdlib,
    /// `tool:qemu-system-x86_64`: a tool's version.
    Tool(String),
}

impl PinKey {
    /// The archive pin of a Debian suite (`archive:debian/bookworm`).
    pub fn debian_archive(suite: &str) -> PinKey {
        PinKey::Archive(debian_archive_name(suite))
    }

    /// The pin of cloud image `name` (`debian-12`) in `region` (`eu-west-1`):
    /// `cloud_image:debian-12@eu-west-1`.
    pub fn cloud_image(name: &str, region: &str) -> PinKey {
        PinKey::CloudImage(format!("{name}@{region}"))
    }

    /// The key of a lockfile block: `[[package]]` with `name = "nginx"` is `package:nginx`.
    /// A `[[cloud_image]]` block's name here is `NAME@REGION` ([`PinKey::cloud_image`]).
    pub fn of_block(block: &str, name: &str) -> Option<PinKey> {
        if block == "cloud_image" {
            return match name.split_once('@') {
                Some((image, region))
                    if !image.is_empty() && !region.is_empty() && !region.contains('@') =>
                {
                    Some(PinKey::CloudImage(name.to_string()))
                }
                _ => None,
            };
        }
        let name = name.to_string();
        Some(match block {
            "archive" => PinKey::Archive(name),
            "package" => PinKey::Package(name),
            "image" => PinKey::Image(name),
            "tool" => PinKey::Tool(name),
            // Only the full address: `hashicorp/google` would be a second spelling of
            // `registry.terraform.io/hashicorp/google`, so one provider could have two keys.
            "provider" if is_full_address(&name) => PinKey::Provider(name),
            _ => return None,
        })
    }

    /// The image named by `image:NAME` (a closure's `starts_from` entry, say); `None` for
    /// any other text.
    pub fn image_of(text: &str) -> Option<String> {
        match text.parse() {
            Ok(PinKey::Image(name)) => Some(name),
            _ => None,
        }
    }

    /// The name after the kind (`nginx` of `package:nginx`); empty for the scalar pins.
    pub fn name(&self) -> &str {
        match self {
            PinKey::SourceDateEpoch | PinKey::Stdlib => "",
            PinKey::Archive(n)
            | PinKey::CloudImage(n)
            | PinKey::Package(n)
            | PinKey::Image(n)
            | PinKey::Provider(n)
            | PinKey::Tool(n) => n,
        }
    }

    /// A cloud image pin's image and region (`("debian-12", "eu-west-1")`); `None` for any
    /// other pin.
    pub fn cloud_image_parts(&self) -> Option<(&str, &str)> {
        match self {
            PinKey::CloudImage(n) => n.split_once('@'),
            _ => None,
        }
    }
}

/// Whether `name` has the shape of a full provider source address: three non-empty,
/// lowercase `/`-separated parts (`registry.terraform.io/hashicorp/google`). The parts'
/// own rules are `envc_lockfiles::provider::ProviderAddress`'s; this layer only keeps
/// short and mixed-case spellings out of keys.
fn is_full_address(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    parts.len() == 3
        && parts.iter().all(|p| !p.is_empty())
        && !name.chars().any(|c| c.is_whitespace() || c.is_uppercase())
}

/// The name of a Debian suite's archive pin: `debian/SUITE`.
pub fn debian_archive_name(suite: &str) -> String {
    format!("{DEBIAN_VENDOR}/{suite}")
}

impl fmt::Display for PinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinKey::SourceDateEpoch => f.write_str("source_date_epoch"),
            PinKey::Stdlib => f.write_str("stdlib"),
            PinKey::Archive(n) => write!(f, "archive:{n}"),
            PinKey::CloudImage(n) => write!(f, "cloud_image:{n}"),
            PinKey::Package(n) => write!(f, "package:{n}"),
            PinKey::Image(n) => write!(f, "image:{n}"),
            PinKey::Provider(n) => write!(f, "provider:{n}"),
            PinKey::Tool(n) => write!(f, "tool:{n}"),
        }
    }
}

/// A string that is not a pin key; its `Display` says what keys look like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadPinKey(pub String);

impl fmt::Display for BadPinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a pin key; keys are package:NAME, image:NAME, archive:NAME, \
             cloud_image:NAME@REGION, provider:HOSTNAME/NAMESPACE/TYPE, tool:NAME, \
             source_date_epoch and stdlib, as `envc lock diff` prints them",
            self.0
        )
    }
}

impl FromStr for PinKey {
    type Err = BadPinKey;

    fn from_str(s: &str) -> Result<PinKey, BadPinKey> {
        let bad = || BadPinKey(s.to_string());
        match s {
            "source_date_epoch" => return Ok(PinKey::SourceDateEpoch),
            "stdlib" => return Ok(PinKey::Stdlib),
            _ => {}
        }
        let (kind, name) = s.split_once(':').ok_or_else(bad)?;
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        PinKey::of_block(kind, name).ok_or_else(bad)
    }
}

/// `package:NAME`'s value: `VERSION ARCH SHA256`, then one `NAME=VERSION@SHA256` per
/// package of its closure (what it brings onto its targets beyond what they start from),
/// sorted by name: a dependency whose bytes move changes the ids of the package's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageValue {
    pub version: String,
    pub architecture: String,
    pub sha256: String,
    pub closure: Vec<ClosureDeb>,
}

/// One `.deb` of a package's closure or of an image's set, as a pin value carries it:
/// `NAME=VERSION@SHA256`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClosureDeb {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// `image:NAME`'s value: `ARCHIVE NAME=VERSION@SHA256…`, the set sorted by name: a
/// package whose bytes move changes the image's id, not only one whose version does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageValue {
    pub archive: String,
    pub packages: Vec<ClosureDeb>,
}

impl ClosureDeb {
    fn encode(&self) -> String {
        format!("{}={}@{}", self.name, self.version, self.sha256)
    }

    fn decode(word: &str) -> Option<ClosureDeb> {
        let (name, rest) = word.split_once('=')?;
        let (version, sha256) = rest.split_once('@')?;
        Some(ClosureDeb {
            name: name.to_string(),
            version: version.to_string(),
            sha256: sha256.to_string(),
        })
    }
}

/// `archive:NAME`'s value: `MIRROR SUITE ARCH COMPONENT,… RELEASE_SHA256`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveValue {
    pub mirror: String,
    pub suite: String,
    pub architecture: String,
    pub components: Vec<String>,
    pub release_sha256: String,
}

/// `provider:ADDRESS`'s value: `VERSION HASH…`, the version then every pinned package hash
/// (`h1:…`, `zh:…`) sorted as text, one space between: a provider whose version or
/// packages move changes the ids of the nodes it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderValue {
    pub version: String,
    /// Sorted as text, without repeats: [`PinValue::encode`] sorts them, and
    /// [`PinValue::decode`] reads only a line in that order, so a pin has one value line.
    pub hashes: Vec<String>,
}

impl ProviderValue {
    /// The value of `version` with `hashes`, sorted and without repeats.
    pub fn new(version: &str, hashes: impl IntoIterator<Item = String>) -> ProviderValue {
        let hashes: std::collections::BTreeSet<String> = hashes.into_iter().collect();
        ProviderValue {
            version: version.to_string(),
            hashes: hashes.into_iter().collect(),
        }
    }
}

/// One pin value's line: written by `encode`, read back by `decode` (`None` when the line
/// is not of this shape). No field may contain whitespace; the lockfile parser ensures it.
pub trait PinValue: Sized {
    fn encode(&self) -> String;
    fn decode(line: &str) -> Option<Self>;
}

impl PinValue for PackageValue {
    fn encode(&self) -> String {
        let mut line = format!("{} {} {}", self.version, self.architecture, self.sha256);
        for d in &self.closure {
            line.push(' ');
            line.push_str(&d.encode());
        }
        line
    }

    fn decode(line: &str) -> Option<PackageValue> {
        let mut words = line.split(' ');
        let mut word = || words.next().filter(|w| !w.is_empty()).map(str::to_string);
        let (version, architecture, sha256) = (word()?, word()?, word()?);
        let mut closure = Vec::new();
        while let Some(w) = word() {
            closure.push(ClosureDeb::decode(&w)?);
        }
        if line.ends_with(' ') || line.contains("  ") {
            return None;
        }
        Some(PackageValue {
            version,
            architecture,
            sha256,
            closure,
        })
    }
}

impl PinValue for ImageValue {
    fn encode(&self) -> String {
        let mut line = self.archive.clone();
        for d in &self.packages {
            line.push(' ');
            line.push_str(&d.encode());
        }
        line
    }

    fn decode(line: &str) -> Option<ImageValue> {
        let mut words = line.split(' ');
        let archive = words.next().filter(|a| !a.is_empty())?.to_string();
        let packages = words.map(ClosureDeb::decode).collect::<Option<Vec<_>>>()?;
        Some(ImageValue { archive, packages })
    }
}

impl PinValue for ArchiveValue {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.mirror,
            self.suite,
            self.architecture,
            self.components.join(","),
            self.release_sha256
        )
    }

    fn decode(line: &str) -> Option<ArchiveValue> {
        let [mirror, suite, architecture, components, release_sha256] = words(line)?;
        Some(ArchiveValue {
            mirror,
            suite,
            architecture,
            components: components.split(',').map(str::to_string).collect(),
            release_sha256,
        })
    }
}

impl PinValue for ProviderValue {
    fn encode(&self) -> String {
        let mut sorted = self.hashes.clone();
        sorted.sort();
        sorted.dedup();
        let mut line = self.version.clone();
        for h in &sorted {
            line.push(' ');
            line.push_str(h);
        }
        line
    }

    /// At least one hash, each `h1:` or `zh:` (the schemes `.terraform.lock.hcl` has), in
    /// text order without repeats; the hashes' own digits are the lockfile's to check.
    fn decode(line: &str) -> Option<ProviderValue> {
        let mut words = line.split(' ');
        let version = words.next().filter(|v| !v.is_empty())?.to_string();
        let hashes: Vec<String> = words.map(str::to_string).collect();
        let scheme_ok = |h: &String| {
            ["h1:", "zh:"]
                .iter()
                .any(|s| h.strip_prefix(s).is_some_and(|rest| !rest.is_empty()))
        };
        let in_order = hashes.windows(2).all(|w| w[0] < w[1]);
        if hashes.is_empty() || !hashes.iter().all(scheme_ok) || !in_order {
            return None;
        }
        Some(ProviderValue { version, hashes })
    }
}

/// `source_date_epoch`'s value: seconds, in decimal.
impl PinValue for u64 {
    fn encode(&self) -> String {
        self.to_string()
    }

    fn decode(line: &str) -> Option<u64> {
        line.parse().ok()
    }
}

/// Exactly `N` space-separated, non-empty words.
fn words<const N: usize>(line: &str) -> Option<[String; N]> {
    let words: Vec<String> = line.split(' ').map(str::to_string).collect();
    if words.iter().any(String::is_empty) {
        return None;
    }
    words.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_bad_keys_are_refused() {
        let check = |text: &str, expected: Option<PinKey>| {
            let parsed = text.parse::<PinKey>().ok();
            assert_eq!(parsed, expected, "{text}");
            if let Some(k) = parsed {
                assert_eq!(k.to_string(), text);
            }
        };
        check("source_date_epoch", Some(PinKey::SourceDateEpoch));
        check("stdlib", Some(PinKey::Stdlib));
        check("package:nginx", Some(PinKey::Package("nginx".into())));
        check("image:debian-12", Some(PinKey::Image("debian-12".into())));
        check(
            "archive:debian/bookworm",
            Some(PinKey::debian_archive("bookworm")),
        );
        check("tool:ssh", Some(PinKey::Tool("ssh".into())));
        check(
            "cloud_image:debian-12@eu-west-1",
            Some(PinKey::cloud_image("debian-12", "eu-west-1")),
        );
        check("cloud_image:debian-12", None);
        check("cloud_image:@eu-west-1", None);
        check("cloud_image:debian-12@", None);
        check("cloud_image:a@b@c", None);
        check("package:", None);
        check("image:", None);
        check("package:a b", None);
        check(
            "provider:registry.terraform.io/hashicorp/google",
            Some(PinKey::Provider(
                "registry.terraform.io/hashicorp/google".into(),
            )),
        );
        check(
            "provider:127.0.0.1:8443/envc/tiny",
            Some(PinKey::Provider("127.0.0.1:8443/envc/tiny".into())),
        );
        // Only the full, lowercase address: one provider, one key.
        check("provider:hashicorp/google", None);
        check("provider:registry.terraform.io/HashiCorp/google", None);
        check("provider:a//b", None);
        check("provider:a/b/c/d", None);
        check("pkg:nginx", None);
        check("nginx", None);
    }

    #[test]
    fn keys_sort_as_their_text() {
        let mut keys = [
            PinKey::Tool("a".into()),
            PinKey::Stdlib,
            PinKey::SourceDateEpoch,
            PinKey::Package("b".into()),
            PinKey::Package("a".into()),
            PinKey::Provider("registry.terraform.io/hashicorp/google".into()),
            PinKey::Provider("example.com/a/b".into()),
            PinKey::Image("z".into()),
            PinKey::cloud_image("debian-12", "eu-west-1"),
            PinKey::Archive("debian/x".into()),
        ];
        keys.sort();
        let mut texts: Vec<String> = keys.iter().map(PinKey::to_string).collect();
        let sorted_as_keys = texts.clone();
        texts.sort();
        assert_eq!(sorted_as_keys, texts);
    }

    fn deb(name: &str, version: &str, sha256: &str) -> ClosureDeb {
        ClosureDeb {
            name: name.into(),
            version: version.into(),
            sha256: sha256.into(),
        }
    }

    #[test]
    fn values_round_trip_in_their_fixed_shape() {
        let p = PackageValue {
            version: "1:2.10-3".into(),
            architecture: "amd64".into(),
            sha256: "ab".into(),
            closure: Vec::new(),
        };
        assert_eq!(p.encode(), "1:2.10-3 amd64 ab");
        assert_eq!(PackageValue::decode(&p.encode()), Some(p.clone()));
        let with_closure = PackageValue {
            closure: vec![deb("libfoo1", "1:1.0-2", "cd")],
            ..p
        };
        assert_eq!(
            with_closure.encode(),
            "1:2.10-3 amd64 ab libfoo1=1:1.0-2@cd"
        );
        assert_eq!(
            PackageValue::decode(&with_closure.encode()),
            Some(with_closure)
        );
        assert_eq!(PackageValue::decode("2.10 amd64"), None);
        assert_eq!(PackageValue::decode("2.10 amd64 ab extra"), None);
        assert_eq!(PackageValue::decode("2.10 amd64 ab a=1"), None);
        assert_eq!(PackageValue::decode("2.10 amd64 ab a=1@x "), None);

        let i = ImageValue {
            archive: "debian/bookworm".into(),
            packages: vec![deb("a", "1", "ab"), deb("b", "2:3", "cd")],
        };
        assert_eq!(i.encode(), "debian/bookworm a=1@ab b=2:3@cd");
        assert_eq!(ImageValue::decode(&i.encode()), Some(i));
        assert_eq!(ImageValue::decode("debian/bookworm a"), None);
        assert_eq!(ImageValue::decode("debian/bookworm a=1"), None);

        let a = ArchiveValue {
            mirror: "http://m/debian".into(),
            suite: "bookworm".into(),
            architecture: "amd64".into(),
            components: vec!["main".into(), "contrib".into()],
            release_sha256: "ff".into(),
        };
        assert_eq!(a.encode(), "http://m/debian bookworm amd64 main,contrib ff");
        assert_eq!(ArchiveValue::decode(&a.encode()), Some(a));
        assert_eq!(u64::decode("1700000000"), Some(1_700_000_000));
        assert_eq!(u64::decode("soon"), None);
    }

    #[test]
    fn provider_values_are_the_version_then_the_hashes_sorted() {
        // `value` → its line; `line` → what it decodes to (`None`: not a value line).
        let zh = format!("zh:{}", "0f".repeat(32));
        let h1 = "h1:abc=".to_string();
        let v = ProviderValue::new("0.1.0", [zh.clone(), h1.clone(), zh.clone()]);
        assert_eq!(v.hashes, [h1.clone(), zh.clone()]);
        assert_eq!(v.encode(), format!("0.1.0 {h1} {zh}"));
        // Built by hand out of order, it still encodes in order.
        let unsorted = ProviderValue {
            version: "0.1.0".into(),
            hashes: vec![zh.clone(), h1.clone()],
        };
        assert_eq!(unsorted.encode(), v.encode());
        let check = |line: &str, expected: Option<&ProviderValue>| {
            assert_eq!(ProviderValue::decode(line).as_ref(), expected, "{line:?}");
        };
        check(&v.encode(), Some(&v));
        check(
            "1.2.3-rc.1 h1:x",
            Some(&ProviderValue::new("1.2.3-rc.1", ["h1:x".into()])),
        );
        check("0.1.0", None);
        check("0.1.0 ", None);
        check("", None);
        check(&format!("0.1.0 {zh} {h1}"), None);
        check(&format!("0.1.0 {h1} {h1}"), None);
        check("0.1.0 sha256:ab", None);
        check("0.1.0 h1:", None);
        check(&format!("0.1.0  {h1}"), None);
    }
}
