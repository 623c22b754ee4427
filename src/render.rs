//! Rendering diagnostics with miette: `FILE:LINE:COL`, the source lines with labels, the
//! explanation and the hint. Line and column are computed here and nowhere else.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use envc_compiler::SourceMap;
use envc_lang::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource};

pub struct Renderer<'a> {
    pub sources: &'a SourceMap,
    /// Prepended to project-relative file names so they read as the user typed them.
    pub prefix: String,
    pub color: bool,
    pub width: usize,
    /// Each file's text and line index as miette reads them, made once however many
    /// diagnostics it has.
    windows: RefCell<BTreeMap<u32, Window>>,
}

impl<'a> Renderer<'a> {
    pub fn new(sources: &'a SourceMap, prefix: &str, color: bool, width: usize) -> Renderer<'a> {
        Renderer {
            sources,
            prefix: prefix.to_string(),
            color,
            width,
            windows: RefCell::default(),
        }
    }
}

struct Report {
    title: String,
    code: &'static str,
    help: Option<String>,
    labels: Vec<LabeledSpan>,
    source: Option<NamedSource<Window>>,
    /// Labels in other files than the primary one, rendered after it.
    also: Vec<Report>,
    severity: miette::Severity,
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title)
    }
}

impl std::error::Error for Report {}

impl miette::Diagnostic for Report {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        if self.code.is_empty() {
            None
        } else {
            Some(Box::new(self.code))
        }
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(self.severity)
    }
}

impl<'a> Renderer<'a> {
    pub fn display_name(&self, src: &envc_compiler::source::SourceFile) -> String {
        let name = &src.name;
        if src.verbatim || name.starts_with("std/") || name.starts_with("--set ") {
            name.to_string()
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    fn report(&self, d: &Diagnostic, severity: miette::Severity) -> Report {
        // Labels in the primary file go in the report; labels in other files each become
        // a report of its own, rendered after the primary one.
        let primary = d.labels.first().map(|l| l.file);
        let mut files: Vec<u32> = Vec::new();
        for l in &d.labels {
            if !files.contains(&l.file) {
                files.push(l.file);
            }
        }
        let make = |file: u32, title: String, code: &'static str, help: Option<String>| {
            let src = self.sources.get(file);
            let labels = d
                .labels
                .iter()
                .filter(|l| l.file == file)
                .enumerate()
                .map(|(i, l)| {
                    let start = (l.span.start as usize).min(src.text.len());
                    let len = (l.span.len()).min(src.text.len() - start);
                    let text = if l.text.is_empty() {
                        None
                    } else {
                        Some(l.text.clone())
                    };
                    if i == 0 && Some(file) == primary {
                        LabeledSpan::new_primary_with_span(text, (start, len))
                    } else {
                        LabeledSpan::new_with_span(text, (start, len))
                    }
                })
                .collect();
            Report {
                title,
                code,
                help,
                labels,
                source: Some(NamedSource::new(self.display_name(src), self.window(file))),
                also: Vec::new(),
                severity,
            }
        };
        let help = d.help.clone();
        match primary {
            None => Report {
                title: d.title.clone(),
                code: d.code,
                help,
                labels: Vec::new(),
                source: None,
                also: Vec::new(),
                severity,
            },
            Some(p) => {
                let mut r = make(p, d.title.clone(), d.code, help);
                for f in files.into_iter().skip(1) {
                    let name = self.display_name(self.sources.get(f));
                    let mut also = make(f, format!("and in {name}"), "", None);
                    also.severity = miette::Severity::Advice;
                    r.also.push(also);
                }
                r
            }
        }
    }

    /// File `file` as miette reads it (shared: its text is copied once).
    fn window(&self, file: u32) -> Window {
        self.windows
            .borrow_mut()
            .entry(file)
            .or_insert_with(|| Window::new(&self.sources.get(file).text))
            .clone()
    }

    pub fn render(&self, d: &Diagnostic) -> String {
        self.render_as(d, miette::Severity::Error)
    }

    fn render_as(&self, d: &Diagnostic, severity: miette::Severity) -> String {
        let theme = if self.color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(self.width)
            .with_links(false);
        let mut out = String::new();
        let report = self.report(d, severity);
        if handler.render_report(&mut out, &report).is_err() {
            out = format!("error: {}\n", d.title);
        }
        for also in &report.also {
            let _ = handler.render_report(&mut out, also);
        }
        if !d.message.is_empty() {
            out.push_str(&wrap(
                &d.message,
                self.width.saturating_sub(4),
                "  note: ",
                "        ",
            ));
        }
        out
    }

    /// All diagnostics, in reading order (by file, then position), each preceded by its
    /// `FILE:LINE:COL` when it has a place.
    pub fn render_all(&self, diagnostics: &[Diagnostic]) -> String {
        self.render_all_as(diagnostics, miette::Severity::Error)
    }

    /// [`Renderer::render_all`] for warnings: what is likely a mistake, not an error.
    pub fn render_warnings(&self, warnings: &[Diagnostic]) -> String {
        self.render_all_as(warnings, miette::Severity::Warning)
    }

    fn render_all_as(&self, diagnostics: &[Diagnostic], severity: miette::Severity) -> String {
        let word = match severity {
            miette::Severity::Warning => "warning",
            _ => "error",
        };
        let mut sorted: Vec<&Diagnostic> = diagnostics.iter().collect();
        sorted.sort_by_key(|d| d.primary().map(|l| (l.file, l.span.start)));
        let mut out = String::new();
        for d in sorted.iter().take(envc_lang::diag::SHOWN) {
            if let Some(loc) = self.location(d) {
                out.push_str(&format!("{word}: {loc}: {}\n", d.title));
            }
            out.push_str(&self.render_as(d, severity));
            out.push('\n');
        }
        let more = sorted.len().saturating_sub(envc_lang::diag::SHOWN);
        if more > 0 {
            let s = if more == 1 { "" } else { "s" };
            out.push_str(&format!(
                "{word}: {more} more {word}{s} not shown (the first {} are above, in reading order: fix those and check again)\n",
                envc_lang::diag::SHOWN
            ));
        }
        out
    }

    /// `FILE:LINE:COL` of a diagnostic's primary label, 1-based, columns in characters.
    pub fn location(&self, d: &Diagnostic) -> Option<String> {
        let l = d.labels.first()?;
        let src = self.sources.get(l.file);
        let (line, col) = self.sources.line_col(l.file, l.span.start as usize);
        Some(format!("{}:{line}:{col}", self.display_name(src)))
    }

    /// Diagnostics as `envc check --json` prints them, one object each, in reading order:
    /// `{"type": "diagnostic", "severity", "code", "title", "message", "help", "location",
    /// "labels": [{"location", "text"}]}` (`location`: `FILE:LINE:COL`, or `null`).
    pub fn json_lines(&self, diagnostics: &[Diagnostic], warning: bool) -> Vec<serde_json::Value> {
        let mut sorted: Vec<&Diagnostic> = diagnostics.iter().collect();
        sorted.sort_by_key(|d| d.primary().map(|l| (l.file, l.span.start)));
        let place = |file: u32, offset: usize| {
            let (line, col) = self.sources.line_col(file, offset);
            format!("{}:{line}:{col}", self.display_name(self.sources.get(file)))
        };
        (sorted.into_iter())
            .map(|d| {
                let labels: Vec<serde_json::Value> = (d.labels.iter())
                    .map(|l| {
                        serde_json::json!({
                            "location": place(l.file, l.span.start as usize),
                            "text": l.text,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "type": "diagnostic",
                    "severity": if warning { "warning" } else { "error" },
                    "code": d.code,
                    "title": d.title,
                    "message": d.message,
                    "help": d.help,
                    "location": self.location(d),
                    "labels": labels,
                })
            })
            .collect()
    }
}

/// A file as miette reads it, without the cost: miette finds a span's lines by scanning
/// the source from its top, so rendering each diagnostic of a long file took time in its
/// length, and every diagnostic copied the whole text. Here the text is shared, each span is
/// found in the file's line index, and miette reads only the lines around it (the context
/// it asks for, and two more after, so that its scan ends where it would in the whole
/// file); offsets and line numbers are the file's.
#[derive(Clone)]
pub struct Window {
    text: Arc<str>,
    /// Where each line starts, as miette counts lines (`\n`, `\r\n`, and a lone `\r`).
    lines: Arc<[usize]>,
}

impl Window {
    fn new(text: &str) -> Window {
        let bytes = text.as_bytes();
        let mut lines = vec![0];
        for (i, b) in bytes.iter().enumerate() {
            let ends_line = match b {
                b'\n' => true,
                b'\r' => bytes.get(i + 1) != Some(&b'\n'),
                _ => false,
            };
            if ends_line {
                lines.push(i + 1);
            }
        }
        Window {
            text: text.into(),
            lines: lines.into(),
        }
    }

    /// The line that holds byte `offset` (0-based).
    fn line_of(&self, offset: usize) -> usize {
        self.lines
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }
}

impl miette::SourceCode for Window {
    fn read_span<'a>(
        &'a self,
        span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        let first = self
            .line_of(span.offset())
            .saturating_sub(context_lines_before);
        let last = self.line_of(span.offset() + span.len()) + context_lines_after + 2;
        let start = self.lines[first];
        let end = self.lines.get(last).copied().unwrap_or(self.text.len());
        let local = miette::SourceSpan::new((span.offset() - start).into(), span.len());
        let inner = self.text.as_bytes()[start..end].read_span(
            &local,
            context_lines_before,
            context_lines_after,
        )?;
        let at =
            miette::SourceSpan::new((inner.span().offset() + start).into(), inner.span().len());
        Ok(Box::new(miette::MietteSpanContents::new(
            inner.data(),
            at,
            inner.line() + first,
            inner.column(),
            inner.line_count() + first,
        )))
    }
}

/// Greedy word wrap with a first-line and a continuation prefix.
fn wrap(text: &str, width: usize, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}
