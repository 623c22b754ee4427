//! Cloud images (AMIs) as `envc lock` pins them: the source names an image by its owner and
//! a name pattern (std/aws's `Image`); `envc lock` resolves it in each region a machine runs
//! in to the newest matching AMI, and a build boots exactly that one.
//!
//! This crate does not talk to a cloud: it defines what it asks of one ([`CloudImages`]),
//! which the executor implements with the EC2 client, and the pure parts — which image is
//! the newest ([`newest_of`]), how AWS's name filter matches ([`name_matches`]), what an
//! AMI id looks like ([`is_ami_id`]) — so that they are tested without a cloud.

use std::fmt;

use crate::model::{CloudImagePin, PinKey};

/// A cloud image as the source asks for it: what a machine's `cloud.image` says, in the
/// region the machine runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudImageNeed {
    /// The source's name for the image (`debian-12`).
    pub name: String,
    /// `aws`.
    pub provider: String,
    pub region: String,
    /// The owner account trusted to publish it (`136693071363`).
    pub owner: String,
    /// The AMI name pattern (`debian-12-amd64-*`).
    pub pattern: String,
    /// `x86_64`, `arm64`.
    pub architecture: String,
    /// The nodes that boot it (`vm:web-0`).
    pub used_by: Vec<String>,
}

impl CloudImageNeed {
    pub fn key(&self) -> PinKey {
        PinKey::cloud_image(&self.name, &self.region)
    }

    /// Whether `pin` is still what this need names: the same provider, owner, pattern and
    /// architecture (the AMI itself is the pin's business).
    pub fn named_by(&self, pin: &CloudImagePin) -> bool {
        (
            &self.provider,
            &self.owner,
            &self.pattern,
            &self.architecture,
        ) == (&pin.provider, &pin.owner, &pin.pattern, &pin.architecture)
    }

    /// `owner 136693071363, pattern "debian-12-amd64-*", x86_64`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "owner {}, pattern {:?}, {}",
            self.owner, self.pattern, self.architecture
        )
    }
}

/// One image a cloud lists for an owner and pattern: what [`newest_of`] picks from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudImageCandidate {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub architecture: String,
    /// As the cloud gives it (`2026-11-01T12:00:00.000Z`: ISO 8601, so it sorts as text).
    pub created: String,
}

/// What `envc lock` asks of a cloud, image by image. Implemented by the executor with the
/// EC2 client; a test implements it with a list.
pub trait CloudImages {
    /// The newest available image `need` names (see [`newest_of`]), as a pin.
    fn newest(&self, need: &CloudImageNeed) -> Result<CloudImagePin, CloudImageError>;
    /// Whether `pin` is what the cloud has: its id exists in its region, of the pinned
    /// owner, under the pinned name (so a hand edit of the id is caught).
    fn check(&self, pin: &CloudImagePin) -> Result<(), CloudImageError>;
}

/// Why a cloud image could not be resolved or checked. Its Display says what to do; the
/// caller puts the pin's key in front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloudImageError {
    /// No credentials for the provider: `tried` is where they were looked for.
    NoCredentials { provider: String, tried: String },
    /// The provider refused the call (credentials rejected, or no permission for `action`).
    Unauthorized { action: String, message: String },
    /// No available image of the owner matches the pattern and architecture in the region.
    NoMatch {
        owner: String,
        pattern: String,
        architecture: String,
        region: String,
    },
    /// `check`: the pinned id does not exist in the region.
    NotFound { id: String, region: String },
    /// `check`: the pinned id exists, but is another owner's or has another name: the pin
    /// was edited by hand.
    Differs {
        id: String,
        field: &'static str,
        pinned: String,
        found: String,
    },
    /// Anything else (the endpoint did not answer, an answer that could not be read).
    Other { message: String },
}

impl CloudImageError {
    /// Whether this only says the cloud could not be asked (no credentials): `lock --check`
    /// then notes the pin as not checked rather than failing.
    pub fn is_no_credentials(&self) -> bool {
        matches!(self, CloudImageError::NoCredentials { .. })
    }

    /// Whether the cloud answered that the pin is not what it has (`check`).
    pub fn is_mismatch(&self) -> bool {
        matches!(
            self,
            CloudImageError::NotFound { .. } | CloudImageError::Differs { .. }
        )
    }
}

impl fmt::Display for CloudImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloudImageError::NoCredentials { provider, tried } => write!(
                f,
                "no {provider} credentials to look the image up with ({tried})\n  hint: give \
                 them as the AWS SDKs take them: AWS_PROFILE naming a profile of \
                 ~/.aws/credentials (`aws configure` writes one), or AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)"
            ),
            CloudImageError::Unauthorized { action, message } => write!(
                f,
                "AWS refused {action}: {message}\n  hint: the credentials must be valid and \
                 allowed `ec2:{action}` (an IAM policy with that action on `*`); check which \
                 ones are used with `aws sts get-caller-identity`"
            ),
            CloudImageError::NoMatch {
                owner,
                pattern,
                architecture,
                region,
            } => write!(
                f,
                "no available image of owner {owner} named like {pattern:?} for {architecture} \
                 in {region}\n  hint: check the image's `owner`, `pattern` and `architecture` \
                 (`aws ec2 describe-images --region {region} --owners {owner} --filters \
                 Name=name,Values='{pattern}' Name=architecture,Values={architecture}`)"
            ),
            CloudImageError::NotFound { id, region } => write!(
                f,
                "AWS has no image {id} in {region}: the pin was edited by hand, or the image \
                 was deregistered\n  hint: run `envc lock FILE` to pin the newest image again"
            ),
            CloudImageError::Differs {
                id,
                field,
                pinned,
                found,
            } => write!(
                f,
                "image {id} has {field} {found:?} on AWS, the lockfile pins {pinned:?}: the pin \
                 was edited by hand\n  hint: run `envc lock FILE` to pin the image again"
            ),
            CloudImageError::Other { message } => f.write_str(message),
        }
    }
}

impl std::error::Error for CloudImageError {}

/// The image `envc lock` pins for `need` among `candidates`: of its owner and architecture,
/// named like its pattern, the latest `created` (ties: the greater name, so the choice never
/// depends on the order the cloud listed them in).
pub fn newest_of(
    need: &CloudImageNeed,
    candidates: &[CloudImageCandidate],
) -> Result<CloudImagePin, CloudImageError> {
    candidates
        .iter()
        .filter(|c| {
            c.owner == need.owner
                && c.architecture == need.architecture
                && name_matches(&need.pattern, &c.name)
        })
        .max_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)))
        .map(|c| CloudImagePin {
            name: need.name.clone(),
            provider: need.provider.clone(),
            region: need.region.clone(),
            owner: need.owner.clone(),
            pattern: need.pattern.clone(),
            architecture: need.architecture.clone(),
            id: c.id.clone(),
            image_name: c.name.clone(),
            created: c.created.clone(),
        })
        .ok_or_else(|| CloudImageError::NoMatch {
            owner: need.owner.clone(),
            pattern: need.pattern.clone(),
            architecture: need.architecture.clone(),
            region: need.region.clone(),
        })
}

/// Whether `name` matches `pattern` as EC2's `name` filter reads it: `*` any text (empty
/// too), `?` one character, anything else itself.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative wildcard matching with one backtrack point: linear in practice.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(&c) if c == '?' || c == n[j] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) => {
                    i = si + 1;
                    j = sj + 1;
                    star = Some((si, sj + 1));
                }
                None => return false,
            },
        }
    }
    p[i.min(p.len())..].iter().all(|&c| c == '*')
}

/// An AMI id as EC2 writes them: `ami-` and 8 or 17 lowercase hex digits.
pub fn is_ami_id(id: &str) -> bool {
    id.strip_prefix("ami-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Resolves each needed cloud image with `clouds`: the pins, and one message per image that
/// failed (its key first).
pub fn resolve_cloud_images<'a>(
    needs: impl IntoIterator<Item = &'a CloudImageNeed>,
    clouds: &dyn CloudImages,
) -> (Vec<CloudImagePin>, Vec<String>) {
    let mut pins = Vec::new();
    let mut errors = Vec::new();
    for need in needs {
        match clouds.newest(need) {
            Ok(pin) => pins.push(pin),
            Err(e) => errors.push(format!("{}: {e}", need.key())),
        }
    }
    (pins, errors)
}

/// A cloud for environments that have no cloud machine: asked anything, it says it cannot
/// be asked. (What `envc lock` passes where no cloud image is needed, and tests.)
pub struct NoCloud;

impl CloudImages for NoCloud {
    fn newest(&self, need: &CloudImageNeed) -> Result<CloudImagePin, CloudImageError> {
        Err(CloudImageError::NoCredentials {
            provider: need.provider.clone(),
            tried: "no cloud client was given".into(),
        })
    }

    fn check(&self, pin: &CloudImagePin) -> Result<(), CloudImageError> {
        Err(CloudImageError::NoCredentials {
            provider: pin.provider.clone(),
            tried: "no cloud client was given".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_as_the_ec2_name_filter_reads_patterns() {
        let check = |pattern: &str, name: &str, expected: bool| {
            assert_eq!(name_matches(pattern, name), expected, "{pattern} {name}");
        };
        check("debian-12-amd64-*", "debian-12-amd64-20261101-1900", true);
        check("debian-12-amd64-*", "debian-12-amd64-", true);
        check("debian-12-amd64-*", "debian-12-arm64-20261101-1900", false);
        check("debian-12-amd64-*", "debian-13-amd64-20261101-1900", false);
        check("debian-1?-amd64-*", "debian-13-amd64-x", true);
        check("debian-1?-amd64-*", "debian-1-amd64-x", false);
        check("*-amd64-*", "debian-12-amd64-2026", true);
        check("*", "", true);
        check("a*b*c", "aXbYbZc", true);
        check("a*b*c", "aXbYbZ", false);
        check("exact", "exact", true);
        check("exact", "exactly", false);
        check("", "", true);
        check("", "x", false);
    }

    #[test]
    fn ami_ids_are_ami_and_8_or_17_hex_digits() {
        for (id, ok) in [
            ("ami-0123abcd", true),
            ("ami-0123456789abcdef0", true),
            ("ami-0123ABCD", false),
            ("ami-0123abc", false),
            ("ami-0123abcdx", false),
            ("ami-", false),
            ("i-0123abcd", false),
            ("0123abcd", false),
        ] {
            assert_eq!(is_ami_id(id), ok, "{id}");
        }
    }

    fn need() -> CloudImageNeed {
        CloudImageNeed {
            name: "debian-12".into(),
            provider: "aws".into(),
            region: "eu-west-1".into(),
            owner: "136693071363".into(),
            pattern: "debian-12-amd64-*".into(),
            architecture: "x86_64".into(),
            used_by: vec!["vm:web-0".into()],
        }
    }

    fn candidate(id: &str, name: &str, owner: &str, arch: &str, day: &str) -> CloudImageCandidate {
        CloudImageCandidate {
            id: id.into(),
            name: name.into(),
            owner: owner.into(),
            architecture: arch.into(),
            created: format!("{day}T12:00:00.000Z"),
        }
    }

    /// `newest_of(need(), candidates)` as `ID NAME` or the error.
    fn check(candidates: &[CloudImageCandidate], expected: &str) {
        let got = match newest_of(&need(), candidates) {
            Ok(p) => format!("{} {}", p.id, p.image_name),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expected);
        // The order the cloud listed them in does not matter.
        let mut reversed = candidates.to_vec();
        reversed.reverse();
        let again = match newest_of(&need(), &reversed) {
            Ok(p) => format!("{} {}", p.id, p.image_name),
            Err(e) => e.to_string(),
        };
        assert_eq!(again, expected);
    }

    #[test]
    fn the_newest_matching_image_of_the_owner_and_architecture_is_pinned() {
        let debian = "136693071363";
        let images = [
            candidate(
                "ami-00000001",
                "debian-12-amd64-20260901-1800",
                debian,
                "x86_64",
                "2026-09-01",
            ),
            candidate(
                "ami-00000003",
                "debian-12-amd64-20261101-1900",
                debian,
                "x86_64",
                "2026-11-01",
            ),
            candidate(
                "ami-00000002",
                "debian-12-amd64-20261001-1890",
                debian,
                "x86_64",
                "2026-10-01",
            ),
            // Newer, but not what the need names: another release, architecture, owner.
            candidate(
                "ami-00000004",
                "debian-13-amd64-20261201-2000",
                debian,
                "x86_64",
                "2026-12-01",
            ),
            candidate(
                "ami-00000005",
                "debian-12-arm64-20261201-2000",
                debian,
                "arm64",
                "2026-12-01",
            ),
            candidate(
                "ami-00000006",
                "debian-12-amd64-20261201-2000",
                "999999999999",
                "x86_64",
                "2026-12-01",
            ),
        ];
        check(&images, "ami-00000003 debian-12-amd64-20261101-1900");
        // Created the same second: the greater name.
        let tie = [
            candidate(
                "ami-0000000a",
                "debian-12-amd64-a",
                debian,
                "x86_64",
                "2026-11-01",
            ),
            candidate(
                "ami-0000000b",
                "debian-12-amd64-b",
                debian,
                "x86_64",
                "2026-11-01",
            ),
        ];
        check(&tie, "ami-0000000b debian-12-amd64-b");
        check(
            &images[3..],
            "no available image of owner 136693071363 named like \"debian-12-amd64-*\" for \
             x86_64 in eu-west-1\n  hint: check the image's `owner`, `pattern` and \
             `architecture` (`aws ec2 describe-images --region eu-west-1 --owners 136693071363 \
             --filters Name=name,Values='debian-12-amd64-*' Name=architecture,Values=x86_64`)",
        );
    }
}
