//! Debian version comparison, exactly as dpkg does it (`dpkg --compare-versions`), because the
//! lockfile picks "the newest version in the suite" and must agree with apt on what that is.
//!
//! A version is `[epoch:]upstream[-revision]`: the epoch is the number before the first `:`,
//! the revision what follows the last `-`. Epochs compare as numbers; upstream and revision
//! with dpkg's `verrevcmp`: alternate runs of non-digits (compared character by character,
//! `~` before everything, even the end of the string, then letters, then the other
//! characters) and runs of digits (compared as numbers).

use std::cmp::Ordering;

/// Compares two Debian versions. Malformed versions (an epoch that is not a number) compare
/// as dpkg would treat their parts: the epoch as 0 and the rest as text, so that a sort never
/// panics; `is_valid` says whether a version is well formed.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb)
        .then_with(|| verrevcmp(ua, ub))
        .then_with(|| verrevcmp(ra, rb))
}

/// Whether `v` is a version dpkg accepts: a numeric epoch if any, an upstream part that
/// starts with a digit, and only the characters Debian policy allows.
pub fn is_valid(v: &str) -> bool {
    let (epoch, rest) = match v.split_once(':') {
        Some((e, rest)) => (Some(e), rest),
        None => (None, v),
    };
    if let Some(e) = epoch {
        if e.is_empty() || !e.bytes().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    let (upstream, revision) = match rest.rfind('-') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let allowed = |c: u8| c.is_ascii_alphanumeric() || b".+~-:".contains(&c);
    upstream.bytes().next().is_some_and(|c| c.is_ascii_digit())
        && upstream.bytes().all(allowed)
        && revision.is_none_or(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".+~".contains(&c))
        })
}

/// A dependency's version relation, as written in `Depends:` (`<<`, `<=`, `=`, `>=`, `>>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Relation {
    Earlier,
    EarlierEqual,
    Equal,
    LaterEqual,
    Later,
}

impl Relation {
    /// Parses a relation operator. `<` and `>` are the obsolete spellings of `<=` and `>=`
    /// (dpkg still reads them that way).
    pub fn parse(op: &str) -> Option<Relation> {
        Some(match op {
            "<<" => Relation::Earlier,
            "<=" | "<" => Relation::EarlierEqual,
            "=" => Relation::Equal,
            ">=" | ">" => Relation::LaterEqual,
            ">>" => Relation::Later,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Earlier => "<<",
            Relation::EarlierEqual => "<=",
            Relation::Equal => "=",
            Relation::LaterEqual => ">=",
            Relation::Later => ">>",
        }
    }

    /// Whether `version` stands in this relation to `to` (`version OP to`).
    pub fn holds(self, version: &str, to: &str) -> bool {
        let o = compare(version, to);
        match self {
            Relation::Earlier => o == Ordering::Less,
            Relation::EarlierEqual => o != Ordering::Greater,
            Relation::Equal => o == Ordering::Equal,
            Relation::LaterEqual => o != Ordering::Less,
            Relation::Later => o == Ordering::Greater,
        }
    }
}

fn split(v: &str) -> (u64, &str, &str) {
    let (epoch, rest) = match v.split_once(':') {
        Some((e, rest)) if !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()) => {
            // dpkg refuses epochs above INT_MAX; saturating keeps the order sensible.
            (e.parse().unwrap_or(u64::MAX), rest)
        }
        _ => (0, v),
    };
    match rest.rfind('-') {
        Some(i) => (epoch, &rest[..i], &rest[i + 1..]),
        None => (epoch, rest, ""),
    }
}

/// dpkg's character order for the non-digit runs: `~` first (before the end of the string),
/// then the end of the string and digits, then letters, then everything else.
fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(b'~') => -1,
        Some(c) => i32::from(c) + 256,
    }
}

/// dpkg's `verrevcmp` (lib/dpkg/version.c), transcribed.
fn verrevcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let mut first_diff = 0;
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ac = order(a.get(i).copied());
            let bc = order(b.get(j).copied());
            if ac != bc {
                return ac.cmp(&bc);
            }
            i += 1;
            j += 1;
        }
        while i < a.len() && a[i] == b'0' {
            i += 1;
        }
        while j < b.len() && b[j] == b'0' {
            j += 1;
        }
        while i < a.len() && a[i].is_ascii_digit() && j < b.len() && b[j].is_ascii_digit() {
            if first_diff == 0 {
                first_diff = i32::from(a[i]) - i32::from(b[j]);
            }
            i += 1;
            j += 1;
        }
        if i < a.len() && a[i].is_ascii_digit() {
            return Ordering::Greater;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            return Ordering::Less;
        }
        if first_diff != 0 {
            return first_diff.cmp(&0);
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a OP b` as dpkg says it: `<`, `=` or `>`. Both directions are checked.
    fn check(a: &str, expected: &str, b: &str) {
        let want = match expected {
            "<" => Ordering::Less,
            "=" => Ordering::Equal,
            ">" => Ordering::Greater,
            _ => panic!("bad expectation {expected}"),
        };
        assert_eq!(compare(a, b), want, "{a} {expected} {b}");
        assert_eq!(compare(b, a), want.reverse(), "{b} vs {a} (reversed)");
    }

    #[test]
    fn compares_like_dpkg() {
        for (a, op, b) in [
            // The classics.
            ("1.0~rc1", "<", "1.0"),
            ("1:0.1", ">", "2.0"),
            ("1.0-1", "<", "1.0-1+deb12u1"),
            ("2.10-3", "<", "2.10-3+b1"),
            // Tilde sorts before everything, even the end.
            ("1.0~", "<", "1.0"),
            ("1.0~~", "<", "1.0~"),
            ("1.0~~a", "<", "1.0~"),
            ("1.0~rc1", "<", "1.0~rc2"),
            ("1.0~rc1-1", "<", "1.0-1"),
            // Numbers compare as numbers, leading zeros do not count.
            ("1.10", ">", "1.9"),
            ("1.010", "=", "1.10"),
            ("0001", "=", "1"),
            ("1.2.3", ">", "1.2"),
            // Letters before other characters, after the end.
            ("1.0a", ">", "1.0"),
            ("1.0a", "<", "1.0+"),
            ("1.0+", "<", "1.0."),
            ("1.0.", ">", "1.0"),
            ("1a", "<", "1b"),
            ("1Z", "<", "1a"),
            // Epochs.
            ("0:1.0", "=", "1.0"),
            ("2:1", ">", "1:9"),
            ("1:1.0-1", "<", "1:1.0-2"),
            // Revisions: the last hyphen splits; a missing revision is the empty one.
            ("1.0-1-1", ">", "1.0-1"),
            ("1.0", "<", "1.0-0.1"),
            ("1.0-0", "=", "1.0"),
            ("2.36-9+deb12u4", ">", "2.36-9+deb12u3"),
            ("2.36-9+deb12u10", ">", "2.36-9+deb12u9"),
            ("7.2+dfsg-7+deb12u16", "<", "7.2+dfsg-7+deb12u18"),
            ("1:7.2+dfsg-7+deb12u18+b3", ">", "1:7.2+dfsg-7+deb12u18"),
            ("9.2p1-2+deb12u6", ">", "9.2p1-2+deb12u5"),
            ("6.1.0-41", "<", "6.1.0-42"),
            ("252.38-1~deb12u1", "<", "252.38-1"),
            ("1.2.3", "=", "1.2.3"),
        ] {
            check(a, op, b);
        }
    }

    #[test]
    fn relations() {
        for (v, op, to, holds) in [
            ("2.36", ">=", "2.34", true),
            ("2.34", ">=", "2.34", true),
            ("2.33", ">=", "2.34", false),
            ("1.0", "<<", "1.0", false),
            ("1.0~", "<<", "1.0", true),
            ("1.0", "=", "1.0-0", true),
            ("2", ">>", "1", true),
            ("1", "<=", "1", true),
            ("1", "<", "1", true),
        ] {
            let rel = Relation::parse(op).unwrap();
            assert_eq!(rel.holds(v, to), holds, "{v} {op} {to}");
        }
        assert_eq!(Relation::parse("=>"), None);
    }

    #[test]
    fn validity() {
        for (v, ok) in [
            ("1.0", true),
            ("1:2.36-9+deb12u4", true),
            ("7.2+dfsg-7+deb12u18+b3", true),
            ("1.0~rc1", true),
            ("", false),
            ("a1.0", false),
            (":1.0", false),
            ("x:1.0", false),
            ("1.0-", false),
            ("1.0 ", false),
            ("1.0=2", false),
        ] {
            assert_eq!(is_valid(v), ok, "{v:?}");
        }
    }
}
