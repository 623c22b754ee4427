//! The one diagnostic shape used by every stage: a short title, labelled spans, a plain
//! sentence, a hint. Rendering (miette, line/column) happens at the edge, in the CLI.

use crate::span::{FileId, Span};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub file: FileId,
    pub span: Span,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable machine-readable code, e.g. `parse::unexpected-token`.
    pub code: &'static str,
    /// Short title: "unknown name `hots`".
    pub title: String,
    /// The first label is the primary one; its file is the diagnostic's file.
    pub labels: Vec<Label>,
    /// A plain sentence explaining the problem (may be empty).
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: &'static str, title: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            title: title.into(),
            labels: Vec::new(),
            message: String::new(),
            help: None,
        }
    }

    pub fn label(mut self, file: FileId, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            file,
            span,
            text: text.into(),
        });
        self
    }

    pub fn message(mut self, message: impl Into<String>) -> Diagnostic {
        self.message = message.into();
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    pub fn primary(&self) -> Option<&Label> {
        self.labels.first()
    }
}

/// How many errors are shown (the first, by place); the rest are counted. A file with
/// thousands of mistakes is fixed from the top, and rendering each costs time and memory.
pub const SHOWN: usize = 100;

/// "did you mean `x`?" for the closest candidate, if any is close enough to be a likely typo.
/// On a tie the earliest candidate wins: callers list the nearest scopes first.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(name, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The candidate other than `name` itself that is close enough to be a likely typo of it,
/// the closest first ([`did_you_mean`]'s choice).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let n = name.chars().count();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        let m = c.chars().count();
        let limit = (n.max(m) / 3).max(1);
        // The distance is at least the difference of the lengths: a candidate that cannot
        // be close enough, or closer than the best so far, is not measured (a file with
        // thousands of names and unknown names would otherwise take time in the square).
        let at_least = n.abs_diff(m);
        if at_least > limit || best.is_some_and(|(bd, _)| at_least >= bd) {
            continue;
        }
        let d = edit_distance(name, c);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The name a help made by [`did_you_mean`] suggests (an editor's quick fix reads it).
pub fn suggestion(help: &str) -> Option<&str> {
    help.strip_prefix("did you mean `")?.strip_suffix("`?")
}

/// Edit distance counting a swap of neighbours as one edit (optimal string alignment):
/// `hots` is one typo away from `host`. Names are short, so the full table is fine.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, candidates: &[&str], expected: Option<&str>) {
        assert_eq!(
            did_you_mean(name, candidates.iter().copied()).as_deref(),
            expected
        );
    }

    #[test]
    fn suggestions() {
        check(
            "hots",
            &["hosts", "host", "x"],
            Some("did you mean `hosts`?"),
        ); // ties: first listed
        check("hots", &["host", "x"], Some("did you mean `host`?"));
        check("prot", &["port", "path"], Some("did you mean `port`?"));
        check("replicas", &["replica_count", "zzz"], None);
        check("a", &["b"], Some("did you mean `b`?"));
        check("name", &["name"], None);
    }
}
