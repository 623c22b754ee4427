//! Rendering diagnostics with miette: `FILE:LINE:COL`, the source lines with labels, the
//! explanation and the hint. Line and column are computed here and nowhere else.

use std::fmt;

use envc_compiler::SourceMap;
use envc_lang::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource};

pub struct Renderer<'a> {
    pub sources: &'a SourceMap,
    /// Prepended to project-relative file names so they read as the user typed them.
    pub prefix: String,
    pub color: bool,
    pub width: usize,
}

struct Report {
    title: String,
    code: &'static str,
    help: Option<String>,
    labels: Vec<LabeledSpan>,
    source: Option<NamedSource<String>>,
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
                source: Some(NamedSource::new(
                    self.display_name(src),
                    src.text.to_string(),
                )),
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
        for d in sorted {
            if let Some(loc) = self.location(d) {
                out.push_str(&format!("{word}: {loc}: {}\n", d.title));
            }
            out.push_str(&self.render_as(d, severity));
            out.push('\n');
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
