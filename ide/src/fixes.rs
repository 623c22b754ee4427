//! Quick fixes: a diagnostic whose help says "did you mean `x`?" becomes an edit that
//! puts `x` where the misspelt name is.

use envc_lang::{Diagnostic, FileId, Span};

use crate::{Edit, Snapshot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub title: String,
    pub edit: Edit,
    /// The diagnostic it fixes (its index in `Snapshot::diagnostics`).
    pub diagnostic: usize,
}

impl Snapshot {
    /// The fixes of the diagnostics in `file` whose primary span meets `range`.
    pub fn fixes(&self, file: FileId, range: Span) -> Vec<Fix> {
        self.diagnostics()
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let label = d.labels.first()?;
                if label.file != file
                    || label.span.end < range.start
                    || label.span.start > range.end
                {
                    return None;
                }
                let (span, wrong, right) = self.misspelling(d)?;
                Some(Fix {
                    title: format!("Change `{wrong}` to `{right}`"),
                    edit: Edit {
                        file,
                        span,
                        text: right,
                    },
                    diagnostic: i,
                })
            })
            .collect()
    }

    /// Where the misspelt name is, what it says and what it should: the suggestion from the
    /// help, and the first name quoted in the title that stands as a whole word in the
    /// primary span (which may be larger than the name: a record with an unknown field).
    fn misspelling(&self, d: &Diagnostic) -> Option<(Span, String, String)> {
        let right = envc_lang::suggestion(d.help.as_deref()?)?;
        let label = d.labels.first()?;
        let text = self
            .sources()
            .get(label.file)
            .text
            .get(label.span.range())?;
        d.title.split('`').skip(1).step_by(2).find_map(|wrong| {
            let at = word_at(text, wrong)?;
            let start = label.span.start as usize + at;
            Some((
                Span::new(start, start + wrong.len()),
                wrong.to_string(),
                right.to_string(),
            ))
        })
    }
}

/// The offset of `word` in `text` as a whole word (not part of a longer name).
fn word_at(text: &str, word: &str) -> Option<usize> {
    if word.is_empty() {
        return None;
    }
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word)
        .map(|(i, _)| i)
        .find(|&i| !text[..i].ends_with(is_name) && !text[i + word.len()..].starts_with(is_name))
}
