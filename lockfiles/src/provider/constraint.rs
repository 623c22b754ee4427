//! Provider versions (`MAJOR.MINOR.PATCH[-PRERELEASE]`, ordered as semver orders them) and
//! Terraform's version constraints: `=` (or no operator), `!=`, `>`, `>=`, `<`, `<=` and
//! `~>`, comma-separated, all of which must hold.
//!
//! - A constraint's version may have one to three parts; the missing ones are zero
//!   (`>= 1.2` is `>= 1.2.0`), as hashicorp/go-version reads them.
//! - `~>` lets only the rightmost part given grow: `~> 1.2.3` is `>= 1.2.3, < 1.3.0`,
//!   `~> 1.2` is `>= 1.2.0, < 2.0.0`, `~> 1` is `>= 1.0.0, < 2.0.0`. So `~> 0.1` admits
//!   0.2.0: write `~> 0.1.0` for 0.1.x only.
//! - A prerelease (`1.0.0-beta1`) is chosen only by a `=` that names it exactly, never by a
//!   range, as Terraform's provider installer does: a range means "releases".
//! - Build metadata (`+…`) is not read: a version listed with it is skipped by the callers,
//!   since the version in the URLs must be spelled as the registry spells it.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A provider release: `1.2.3` or `1.2.3-rc.1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// What follows `-`, empty for a release.
    pub prerelease: String,
}

/// Why a version or a constraint cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstraintError {
    /// The version or constraint as given.
    pub input: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid provider version constraint `{}`: {}\n  hint: write versions as \
             MAJOR.MINOR.PATCH and constraints as Terraform does, e.g. `~> 6.0` or \
             `>= 1.2, < 2.0`",
            self.input, self.problem
        )
    }
}

impl std::error::Error for ConstraintError {}

impl Version {
    /// Reads exactly `MAJOR.MINOR.PATCH[-PRERELEASE]`.
    pub fn parse(input: &str) -> Result<Version, ConstraintError> {
        let fail = |problem: &str| ConstraintError {
            input: input.to_string(),
            problem: problem.to_string(),
        };
        let (numbers, parts, prerelease) =
            parse_numbers(input).map_err(|p| fail(&p.to_string()))?;
        if parts != 3 {
            return Err(fail("a version has three parts, MAJOR.MINOR.PATCH"));
        }
        Ok(Version {
            major: numbers[0],
            minor: numbers[1],
            patch: numbers[2],
            prerelease,
        })
    }

    pub fn new(major: u64, minor: u64, patch: u64) -> Version {
        Version {
            major,
            minor,
            patch,
            prerelease: String::new(),
        }
    }

    pub fn is_prerelease(&self) -> bool {
        !self.prerelease.is_empty()
    }
}

/// What is wrong with a version's spelling.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Spelling {
    BuildMetadata,
    TooManyParts,
    NotANumber(String),
    LeadingZero(String),
    TooLarge(String),
    BadPrerelease(String),
}

impl fmt::Display for Spelling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spelling::BuildMetadata => {
                f.write_str("build metadata (`+…`) is not part of a provider version")
            }
            Spelling::TooManyParts => f.write_str("a version has at most three parts"),
            Spelling::NotANumber(s) => write!(f, "`{s}` is not a number"),
            Spelling::LeadingZero(s) => write!(f, "`{s}` has a leading zero"),
            Spelling::TooLarge(s) => write!(f, "`{s}` is too large"),
            Spelling::BadPrerelease(s) => write!(f, "`{s}` is not a prerelease label"),
        }
    }
}

/// What [`parse_numbers`] reads: the numbers (missing ones zero), how many were written,
/// the prerelease.
type Numbers = ([u64; 3], usize, String);

/// One to three dot-separated numbers (no leading zeros, no sign), then an optional
/// `-PRERELEASE` of dot-separated `[0-9A-Za-z-]` identifiers.
fn parse_numbers(input: &str) -> Result<Numbers, Spelling> {
    if input.contains('+') {
        return Err(Spelling::BuildMetadata);
    }
    let (core, prerelease) = match input.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (input, None),
    };
    let mut numbers = [0u64; 3];
    let fields: Vec<&str> = core.split('.').collect();
    if fields.len() > 3 {
        return Err(Spelling::TooManyParts);
    }
    for (slot, field) in numbers.iter_mut().zip(&fields) {
        let digits = !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
        if !digits {
            return Err(Spelling::NotANumber(field.to_string()));
        }
        if field.len() > 1 && field.starts_with('0') {
            return Err(Spelling::LeadingZero(field.to_string()));
        }
        *slot = field
            .parse()
            .map_err(|_| Spelling::TooLarge(field.to_string()))?;
    }
    let prerelease = match prerelease {
        None => String::new(),
        Some(pre) => {
            let ok = pre.split('.').all(|id| {
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
            if !ok {
                return Err(Spelling::BadPrerelease(pre.to_string()));
            }
            pre.to_string()
        }
    };
    Ok((numbers, fields.len(), prerelease))
}

impl Ord for Version {
    /// Semver's precedence: the numbers, then a prerelease before its release, then the
    /// prerelease identifiers in turn (numbers numerically and before words, a longer list
    /// after its prefix).
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.is_prerelease(), other.is_prerelease()) {
                (false, false) => Ordering::Equal,
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (true, true) => compare_prerelease(&self.prerelease, &other.prerelease),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn compare_prerelease(a: &str, b: &str) -> Ordering {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        match (a.next(), b.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let numeric = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
                let order = match (numeric(x), numeric(y)) {
                    // Longer digit strings are larger numbers (no leading zeros to mind
                    // beyond this), and this never overflows.
                    (true, true) => x.len().cmp(&y.len()).then_with(|| x.cmp(y)),
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    (false, false) => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if self.is_prerelease() {
            write!(f, "-{}", self.prerelease)?;
        }
        Ok(())
    }
}

impl FromStr for Version {
    type Err = ConstraintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `~>`: only the rightmost part written may grow.
    Pessimistic,
}

impl Operator {
    fn symbol(self) -> &'static str {
        match self {
            Operator::Eq => "=",
            Operator::Ne => "!=",
            Operator::Gt => ">",
            Operator::Ge => ">=",
            Operator::Lt => "<",
            Operator::Le => "<=",
            Operator::Pessimistic => "~>",
        }
    }
}

/// One comma-separated term: `~> 1.2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub operator: Operator,
    pub version: Version,
    /// How many parts were written (1–3): what `~>` lets grow, and how it is shown.
    pub parts: usize,
}

impl Term {
    fn admits(&self, v: &Version) -> bool {
        let bound = &self.version;
        match self.operator {
            Operator::Eq => v == bound,
            Operator::Ne => v != bound,
            Operator::Gt => v > bound,
            Operator::Ge => v >= bound,
            Operator::Lt => v < bound,
            Operator::Le => v <= bound,
            Operator::Pessimistic => {
                let upper = match self.parts {
                    1 | 2 => Version::new(bound.major.saturating_add(1), 0, 0),
                    _ => Version::new(bound.major, bound.minor.saturating_add(1), 0),
                };
                v >= bound && *v < upper
            }
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.version;
        let numbers = [v.major, v.minor, v.patch];
        let written: Vec<String> = numbers[..self.parts].iter().map(u64::to_string).collect();
        write!(f, "{} {}", self.operator.symbol(), written.join("."))?;
        if v.is_prerelease() {
            write!(f, "-{}", v.prerelease)?;
        }
        Ok(())
    }
}

/// A version constraint: every term must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraints {
    pub terms: Vec<Term>,
}

impl Constraints {
    /// Reads a constraint string such as `~> 6.0` or `>= 1.2.0, != 1.3.1, < 2`.
    pub fn parse(input: &str) -> Result<Constraints, ConstraintError> {
        let fail = |problem: String| ConstraintError {
            input: input.to_string(),
            problem,
        };
        if input.trim().is_empty() {
            return Err(fail(
                "it is empty (a provider declared without a constraint takes the newest release; \
                 say so with `>= 0.0.0`)"
                    .into(),
            ));
        }
        let mut terms = Vec::new();
        for raw in input.split(',') {
            let term = raw.trim();
            if term.is_empty() {
                return Err(fail("it has an empty term between commas".into()));
            }
            // Longest operators first, so that `>=` is not read as `>` then `=1.0`.
            let (operator, rest) = [
                ("~>", Operator::Pessimistic),
                (">=", Operator::Ge),
                ("<=", Operator::Le),
                ("!=", Operator::Ne),
                (">", Operator::Gt),
                ("<", Operator::Lt),
                ("=", Operator::Eq),
            ]
            .iter()
            .find_map(|(sym, op)| term.strip_prefix(sym).map(|rest| (*op, rest)))
            .unwrap_or((Operator::Eq, term));
            let rest = rest.trim_start();
            let (numbers, parts, prerelease) =
                parse_numbers(rest).map_err(|p| fail(format!("in `{term}`: {p}")))?;
            if !prerelease.is_empty() && parts != 3 {
                return Err(fail(format!(
                    "in `{term}`: a prerelease needs all three parts, MAJOR.MINOR.PATCH-PRE"
                )));
            }
            terms.push(Term {
                operator,
                version: Version {
                    major: numbers[0],
                    minor: numbers[1],
                    patch: numbers[2],
                    prerelease,
                },
                parts,
            });
        }
        Ok(Constraints { terms })
    }

    /// Whether `v` satisfies every term; a prerelease also needs a `=` naming it.
    pub fn admits(&self, v: &Version) -> bool {
        let all = self.terms.iter().all(|t| t.admits(v));
        let exact = || {
            self.terms
                .iter()
                .any(|t| t.operator == Operator::Eq && t.version == *v)
        };
        all && (!v.is_prerelease() || exact())
    }

    /// The newest of `versions` that the constraint admits.
    pub fn newest<'a, I>(&self, versions: I) -> Option<&'a Version>
    where
        I: IntoIterator<Item = &'a Version>,
    {
        versions.into_iter().filter(|v| self.admits(v)).max()
    }
}

impl fmt::Display for Constraints {
    /// The normal form: `~> 1.2, != 1.3.0` (one space after each operator, `, ` between).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.terms.iter().map(Term::to_string).collect();
        f.write_str(&terms.join(", "))
    }
}

impl FromStr for Constraints {
    type Err = ConstraintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Constraints::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVAILABLE: &[&str] = &[
        "0.1.0",
        "0.1.1",
        "0.2.0",
        "1.0.0-beta1",
        "1.0.0",
        "1.2.0",
        "1.2.3",
        "1.2.10",
        "1.3.0",
        "2.0.0-rc.1",
        "2.0.0",
    ];

    /// `expected`: the newest available version the constraint admits, `none`, or
    /// `error: …` with a piece of the message.
    fn check(input: &str, expected: &str) {
        let versions: Vec<Version> = AVAILABLE
            .iter()
            .map(|v| Version::parse(v).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let got = match Constraints::parse(input) {
            Ok(c) => c
                .newest(&versions)
                .map_or("none".to_string(), Version::to_string),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("hint:"), "{text}");
                format!("error: {text}")
            }
        };
        if let Some(piece) = expected.strip_prefix("error: ") {
            assert!(
                got.starts_with("error: ") && got.contains(piece),
                "{input}: {got}"
            );
        } else {
            assert_eq!(got, expected, "{input}");
        }
    }

    #[test]
    fn picks_the_newest_version_a_constraint_admits() {
        check("1.2.3", "1.2.3");
        check("= 1.2.3", "1.2.3");
        check("=1.2", "1.2.0");
        check("!= 2.0.0", "1.3.0");
        check("> 1.2.3", "2.0.0");
        check(">= 2", "2.0.0");
        check("< 1.2.3", "1.2.0");
        check("<= 1.2.3", "1.2.3");
        check("~> 1.2.3", "1.2.10");
        check("~> 1.2", "1.3.0");
        check("~> 1", "1.3.0");
        check("~> 0.1", "0.2.0");
        check("~> 0.1.0", "0.1.1");
        check(">= 1.0, < 1.2.10, != 1.2.3", "1.2.0");
        check("  >=1.0 ,<2 ", "1.3.0");
        check("> 2.0.0", "none");
        check(">= 1.3, < 1.2", "none");
    }

    #[test]
    fn a_prerelease_is_chosen_only_by_name() {
        check("= 2.0.0-rc.1", "2.0.0-rc.1");
        check("2.0.0-rc.1", "2.0.0-rc.1");
        check("1.0.0-beta1", "1.0.0-beta1");
        check(">= 2.0.0-rc.1, < 2.0.0", "none");
        check("~> 1.0.0-beta1", "1.0.0");
        check("= 2.0.0-rc.2", "none");
    }

    #[test]
    fn refuses_what_is_not_a_constraint() {
        check("", "error: it is empty");
        check("~> 1.2,", "error: an empty term");
        check("=> 1.2", "error: `=> 1.2`");
        check("~> 1.2.3.4", "error: at most three parts");
        check("~> v1.2", "error: `v1` is not a number");
        check("1.02", "error: leading zero");
        check("1.2.3+abc", "error: build metadata");
        check("1.2-beta", "error: a prerelease needs all three parts");
        check("1.2.3-", "error: is not a prerelease label");
        check("99999999999999999999.0.0", "error: too large");
    }

    #[test]
    fn orders_versions_as_semver_does() {
        let order = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.10.0",
            "10.0.0",
        ];
        let parsed: Vec<Version> = order
            .iter()
            .map(|v| Version::parse(v).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for pair in parsed.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        for (v, text) in parsed.iter().zip(order) {
            assert_eq!(v.to_string(), text);
        }
        assert!(Version::parse("1.2").is_err());
    }

    #[test]
    fn shows_constraints_in_one_spelling() {
        let c = Constraints::parse(">=1.2,!=1.3.1 , ~>2.0.0-rc1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.to_string(), ">= 1.2, != 1.3.1, ~> 2.0.0-rc1");
    }
}
