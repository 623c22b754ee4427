//! The two values a realization record is keyed by, as types of their own so that one is
//! never passed where the other (or any string) is meant. Both serialize as the plain
//! string they wrap: the store's records keep their encoding.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The hash of a node's derivation with every deferred input substituted by its realized
/// value: what the cache of realizations is keyed by (early cutoff).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResolvedHash(pub String);

/// Who a target is: a machine's host key fingerprint (or a provider's machine id), a
/// repository's place. A recreated machine is a new identity, so a clean target.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TargetIdentity(pub String);

macro_rules! string_newtype {
    ($t:ident) => {
        impl $t {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $t {
            fn from(s: String) -> $t {
                $t(s)
            }
        }

        impl From<&str> for $t {
            fn from(s: &str) -> $t {
                $t(s.to_string())
            }
        }

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

string_newtype!(ResolvedHash);
string_newtype!(TargetIdentity);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn they_serialize_as_the_string_they_wrap() {
        let h = ResolvedHash::from("ab12");
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"ab12\"");
        let back: TargetIdentity = serde_json::from_str("\"SHA256:xyz\"").unwrap();
        assert_eq!(back, "SHA256:xyz");
    }
}
