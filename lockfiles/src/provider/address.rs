//! A provider's source address, `[HOSTNAME/]NAMESPACE/TYPE`, read as Terraform and OpenTofu
//! read it (`tfaddr.ParseProviderSource`): the hostname defaults to `registry.terraform.io`,
//! every part is compared in lowercase, so `HashiCorp/Google` and `hashicorp/google` are one
//! provider, and a lockfile spells it the one way ([`ProviderAddress`]'s `Display`, always
//! with the hostname, as `.terraform.lock.hcl` does).
//!
//! Narrower than Terraform in one way: parts are ASCII. Terraform accepts internationalised
//! names through IDNA; no registry we know serves one, and refusing them keeps one spelling
//! per provider without an IDNA table here.

use std::fmt;
use std::str::FromStr;

/// The registry a `NAMESPACE/TYPE` address names.
pub const DEFAULT_HOST: &str = "registry.terraform.io";

/// `registry.terraform.io/hashicorp/google`: where a provider is published, lowercase.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProviderAddress {
    /// `registry.terraform.io`, or `HOST:PORT` (a port other than 443 is kept).
    pub hostname: String,
    pub namespace: String,
    /// The provider's type: `google` in `hashicorp/google`.
    pub type_name: String,
}

/// Why a source address is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressError {
    /// The address as given.
    pub input: String,
    pub problem: AddressProblem,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddressProblem {
    /// Not two or three parts separated by `/`.
    Shape,
    /// A part is empty (`hashicorp//google`).
    EmptyPart { part: &'static str },
    /// A namespace or type with a character other than a letter, digit or dash, a leading
    /// or trailing dash, or two dashes in a row.
    BadPart { part: &'static str, value: String },
    /// The hostname is not a DNS name with an optional port.
    BadHostname { value: String },
    /// The type was written as the name of the provider's binary or repository.
    RepositoryName { suggestion: String },
    /// `-` as the namespace: Terraform 0.12's legacy addresses, which no registry serves.
    LegacyNamespace,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = &self.input;
        write!(f, "invalid provider source address `{input}`: ")?;
        match &self.problem {
            AddressProblem::Shape => write!(
                f,
                "it must be NAMESPACE/TYPE or HOSTNAME/NAMESPACE/TYPE\n  hint: write it as \
                 Terraform's `source` does, e.g. `hashicorp/google` or \
                 `registry.opentofu.org/hashicorp/google`"
            ),
            AddressProblem::EmptyPart { part } => write!(
                f,
                "its {part} is empty\n  hint: remove the extra `/`, e.g. `hashicorp/google`"
            ),
            AddressProblem::BadPart { part, value } => write!(
                f,
                "its {part} `{value}` must hold only letters, digits and dashes, not begin or \
                 end with a dash, and have no two dashes in a row\n  hint: copy the address \
                 from the provider's registry page"
            ),
            AddressProblem::BadHostname { value } => write!(
                f,
                "its hostname `{value}` is not a DNS name (with an optional :PORT)\n  hint: \
                 leave the hostname out for {DEFAULT_HOST}"
            ),
            AddressProblem::RepositoryName { suggestion } => write!(
                f,
                "the type is the provider's name, not its repository's or binary's\n  hint: \
                 did you mean `{suggestion}`?"
            ),
            AddressProblem::LegacyNamespace => write!(
                f,
                "the namespace `-` is Terraform 0.12's legacy form, which no registry serves\n  \
                 hint: name the namespace that publishes the provider, e.g. `hashicorp`"
            ),
        }
    }
}

impl std::error::Error for AddressError {}

impl ProviderAddress {
    /// Reads `[HOSTNAME/]NAMESPACE/TYPE`.
    pub fn parse(input: &str) -> Result<ProviderAddress, AddressError> {
        let fail = |problem| AddressError {
            input: input.to_string(),
            problem,
        };
        let parts: Vec<&str> = input.split('/').collect();
        let (host, namespace, type_name) = match parts.as_slice() {
            [namespace, type_name] => (None, *namespace, *type_name),
            [host, namespace, type_name] => (Some(*host), *namespace, *type_name),
            _ => return Err(fail(AddressProblem::Shape)),
        };
        let hostname = match host {
            None => DEFAULT_HOST.to_string(),
            Some("") => return Err(fail(AddressProblem::EmptyPart { part: "hostname" })),
            Some(h) => normalise_hostname(h).ok_or_else(|| {
                fail(AddressProblem::BadHostname {
                    value: h.to_string(),
                })
            })?,
        };
        if namespace == "-" {
            return Err(fail(AddressProblem::LegacyNamespace));
        }
        let namespace = part(namespace, "namespace").map_err(fail)?;
        let type_name = part(type_name, "type").map_err(fail)?;
        // Terraform's own check: `terraform-provider-google` is the repository, `google`
        // the provider.
        if let Some(rest) = type_name.strip_prefix("terraform-provider-") {
            let mut suggestion = format!("{namespace}/{rest}");
            if host.is_some() {
                suggestion = format!("{hostname}/{suggestion}");
            }
            return Err(fail(AddressProblem::RepositoryName { suggestion }));
        }
        Ok(ProviderAddress {
            hostname,
            namespace,
            type_name,
        })
    }

    /// `hashicorp/google` for the default registry, the full address otherwise: how
    /// Terraform shows a provider to people (`ForDisplay`).
    pub fn for_display(&self) -> String {
        if self.hostname == DEFAULT_HOST {
            format!("{}/{}", self.namespace, self.type_name)
        } else {
            self.to_string()
        }
    }

    /// `terraform-provider-TYPE`: how the provider's packages and executables begin.
    pub fn binary_prefix(&self) -> String {
        format!("terraform-provider-{}", self.type_name)
    }
}

/// A namespace or type, lowercase: letters, digits, dashes, no dash at either end and no
/// two in a row (what IDNA's lookup profile leaves of an ASCII label).
fn part(value: &str, name: &'static str) -> Result<String, AddressProblem> {
    if value.is_empty() {
        return Err(AddressProblem::EmptyPart { part: name });
    }
    let ok = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
        && !value.contains("--");
    if ok {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(AddressProblem::BadPart {
            part: name,
            value: value.to_string(),
        })
    }
}

/// A hostname as svchost compares it: lowercase DNS labels, an optional port, and `:443`
/// (the port https implies) left out.
fn normalise_hostname(host: &str) -> Option<String> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return None;
    }
    let name = name.to_ascii_lowercase();
    match port {
        None => Some(name),
        Some(p) => {
            let n: u16 = p.parse().ok().filter(|n| *n != 0)?;
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(if n == 443 {
                name
            } else {
                format!("{name}:{n}")
            })
        }
    }
}

impl fmt::Display for ProviderAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.hostname, self.namespace, self.type_name)
    }
}

impl FromStr for ProviderAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProviderAddress::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `expected`: the address's full form, or the start of the error's message.
    fn check(input: &str, expected: &str) {
        match ProviderAddress::parse(input) {
            Ok(a) => assert_eq!(a.to_string(), expected, "{input}"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains(expected), "{input}: {text}");
                assert!(text.contains("hint:"), "{input}: {text}");
            }
        }
    }

    #[test]
    fn reads_addresses_as_terraform_does() {
        check("hashicorp/google", "registry.terraform.io/hashicorp/google");
        check("HashiCorp/Google", "registry.terraform.io/hashicorp/google");
        check(
            "registry.opentofu.org/hashicorp/google",
            "registry.opentofu.org/hashicorp/google",
        );
        check(
            "Example.COM:443/Acme/my-thing2",
            "example.com/acme/my-thing2",
        );
        check("127.0.0.1:8443/envc/tiny", "127.0.0.1:8443/envc/tiny");
        check("google", "must be NAMESPACE/TYPE");
        check("a/b/c/d", "must be NAMESPACE/TYPE");
        check("hashicorp//google", "its namespace is empty");
        check("/hashicorp/google", "its hostname is empty");
        check("hashicorp/", "its type is empty");
        check("hashi_corp/google", "its namespace `hashi_corp` must hold");
        check("hashicorp/-google", "its type `-google`");
        check("hashicorp/goo--gle", "its type `goo--gle`");
        check("hashicorp/gööle", "its type `gööle`");
        check("exa mple.com/a/b", "its hostname `exa mple.com`");
        check("example.com:0/a/b", "its hostname `example.com:0`");
        check("example.com:x/a/b", "its hostname `example.com:x`");
        check("-/google", "legacy form");
        check(
            "hashicorp/terraform-provider-google",
            "did you mean `hashicorp/google`?",
        );
    }

    #[test]
    fn display_leaves_out_the_default_registry() {
        let a = ProviderAddress::parse("hashicorp/google").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.for_display(), "hashicorp/google");
        assert_eq!(a.binary_prefix(), "terraform-provider-google");
        let b = ProviderAddress::parse("example.com/a/b").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.for_display(), "example.com/a/b");
    }
}
