//! Templates checked before anything runs (`envc check`): each `file` node's template must
//! parse, and every variable it reads must be in its `vars` (or be one of minijinja's
//! globals). A build renders it strictly (`substitute::render_template`), so what this
//! finds would fail there, at the template alone; here it is a diagnostic with two labels:
//! the call in the `.env` file, and the place in the template.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use envc_compiler::source::SourceMap;
use envc_compiler::types::NodeKind;
use envc_compiler::value::Value;
use envc_compiler::{Graph, SourceLoader};
use envc_lang::{Diagnostic, Span};

/// The problems of every template of `graph`'s files. A template file is added to
/// `sources` when a diagnostic points into it.
pub fn check_templates(
    graph: &Graph,
    sources: &mut SourceMap,
    files: &dyn SourceLoader,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // A template used by many nodes (one per host, say) is read and parsed once, and shown
    // once in the map.
    let mut parsed: BTreeMap<Rc<str>, Option<Parsed>> = BTreeMap::new();
    let mut added: Vec<(Rc<str>, u32)> = Vec::new();
    let env = crate::substitute::template_environment();
    let globals: BTreeSet<&str> = env.globals().map(|(k, _)| k).collect();
    for node in graph.nodes().filter(|n| n.kind == NodeKind::File) {
        let Some(Value::Path(template)) = node.attrs.get("template") else {
            continue;
        };
        let path = &template.path;
        let Some(template) = parsed
            .entry(path.clone())
            .or_insert_with(|| Parsed::read(&env, path, files))
        else {
            // Unreadable or not text: the build says so, naming the file.
            continue;
        };
        let mut file_id = |sources: &mut SourceMap| match added.iter().find(|(p, _)| p == path) {
            Some((_, id)) => *id,
            None => {
                let id = sources.add(path.to_string(), template.text.clone());
                added.push((path.clone(), id));
                id
            }
        };
        let undeclared = match &template.reads {
            Ok(undeclared) => undeclared,
            Err((detail, span)) => {
                let id = file_id(sources);
                out.push(
                    Diagnostic::new(
                        "template::syntax",
                        format!("template `{path}` does not parse: {detail}"),
                    )
                    .label(node.file, node.span, format!("renders `{path}`"))
                    .label(id, *span, detail.clone())
                    .message("A build renders the template with minijinja (Jinja2's syntax); it cannot render one that does not parse."),
                );
                continue;
            }
        };
        let given: BTreeSet<&str> = match node.attrs.get("vars") {
            Some(Value::Record(r)) => r.keys().map(|k| &**k).collect(),
            None => BTreeSet::new(),
            // Not a record of names known now: nothing to compare with.
            Some(_) => continue,
        };
        let missing = (undeclared.iter())
            .filter(|v| !given.contains(v.as_str()) && !globals.contains(v.as_str()));
        for name in missing {
            let id = file_id(sources);
            let span = first_use(&template.text, name).unwrap_or(Span::at(0));
            let help = envc_lang::did_you_mean(name, given.iter().copied())
                .map(|d| format!("{d} (a name in `vars`)"))
                .unwrap_or_else(|| format!("add `{name} = …` to the node's `vars`"));
            let have = match given.is_empty() {
                true => "it gives none".to_string(),
                false => format!(
                    "it gives {}",
                    given
                        .iter()
                        .map(|g| format!("`{g}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            out.push(
                Diagnostic::new(
                    "template::undefined",
                    format!("template `{path}` uses `{name}`, which `vars` does not give"),
                )
                .label(node.file, node.span, format!("`vars` has no `{name}`"))
                .label(id, span, format!("`{name}` is read here"))
                .message(format!(
                    "A template reads only what the node's `vars` gives ({have}); a build would stop at this file."
                ))
                .help(help),
            );
        }
    }
    out
}

/// A template file as the check needs it: its text, and the variables it reads (in
/// order), or why it does not parse (the detail and where).
struct Parsed {
    text: Rc<str>,
    reads: Result<BTreeSet<String>, (String, Span)>,
}

impl Parsed {
    /// `None` when the file cannot be read or is not text.
    fn read(
        env: &minijinja::Environment<'_>,
        path: &str,
        files: &dyn SourceLoader,
    ) -> Option<Parsed> {
        let text = String::from_utf8(files.read(path).ok()?).ok()?;
        let reads = match env.template_from_named_str(path, &text) {
            Ok(t) => Ok(t.undeclared_variables(false).into_iter().collect()),
            Err(e) => {
                let detail = e
                    .detail()
                    .map_or_else(|| e.kind().to_string(), str::to_string);
                let span = e
                    .range()
                    .map(|r| Span::new(r.start, r.end))
                    .or_else(|| e.line().map(|l| line_span(&text, l)))
                    .unwrap_or(Span::at(0));
                Err((detail, span))
            }
        };
        Some(Parsed {
            text: Rc::from(text),
            reads,
        })
    }
}

/// Line `line` (1-based) of `text`, without its newline.
fn line_span(text: &str, line: usize) -> Span {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let end = text[start..].find('\n').map_or(text.len(), |e| start + e);
    Span::new(start, end)
}

/// Where `name` is first read as a variable: an identifier of that name inside `{{ … }}`
/// or `{% … %}`, not an attribute (`x.name`) nor in a string.
fn first_use(text: &str, name: &str) -> Option<Span> {
    let mut at = 0;
    while let Some(open) = text[at..].find('{').map(|i| at + i) {
        let close = match text[open..].get(..2) {
            Some("{{") => "}}",
            Some("{%") => "%}",
            _ => {
                at = open + 1;
                continue;
            }
        };
        let body_start = open + 2;
        let body_end = text[body_start..]
            .find(close)
            .map_or(text.len(), |e| body_start + e);
        let body = &text[body_start..body_end];
        let bytes = body.as_bytes();
        let mut i = 0;
        let mut quote: Option<u8> = None;
        while i < bytes.len() {
            let c = bytes[i];
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) if c == b'\\' => i += 1,
                Some(_) => {}
                None if c == b'"' || c == b'\'' => quote = Some(c),
                None if c.is_ascii_alphabetic() || c == b'_' => {
                    let start = i;
                    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_')
                    {
                        i += 1;
                    }
                    let attribute = body[..start].trim_end().ends_with('.');
                    if &body[start..i] == name && !attribute {
                        return Some(Span::new(body_start + start, body_start + i));
                    }
                    continue;
                }
                None => {}
            }
            i += 1;
        }
        at = body_end;
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_first_use_of_a_variable() {
        let text =
            "port = {{ port }}\n{% if cfg.name %}name = \"{{ 'name' }}\" {{ name }}{% endif %}\n";
        let span = |n: &str| first_use(text, n).map(|s| &text[s.start as usize..s.end as usize]);
        assert_eq!(span("port"), Some("port"));
        assert_eq!(first_use(text, "port").unwrap().start, 10);
        // Not `cfg.name`, not the string `'name'`: the `name` read in the last tag.
        let name = first_use(text, "name").unwrap();
        assert_eq!(
            &text[..name.start as usize],
            "port = {{ port }}\n{% if cfg.name %}name = \"{{ 'name' }}\" {{ "
        );
        assert_eq!(span("cfg"), Some("cfg"));
        assert_eq!(first_use(text, "nope"), None);
    }

    #[test]
    fn a_line_of_a_text() {
        let text = "a\nbb\nccc";
        let s = line_span(text, 2);
        assert_eq!(&text[s.start as usize..s.end as usize], "bb");
        let s = line_span(text, 3);
        assert_eq!(&text[s.start as usize..s.end as usize], "ccc");
    }
}
