//! The EXIT STATUS and ENVIRONMENT sections, from `exit::Exit` and `environment`'s list:
//! as text after `envc --help`, and as roff in every man page (`envc man`).

use crate::environment::{Variable, OTHERS, VARIABLES};
use crate::exit::Exit;

/// What `envc --help` prints after the options.
pub fn after_long_help() -> String {
    let mut out = String::from("Exit status:\n");
    for e in Exit::ALL {
        out.push_str(&format!("  {:<5}{}\n", e.code(), e.meaning()));
    }
    out.push_str("\nEnvironment:\n");
    let width = (VARIABLES.iter().chain(OTHERS))
        .map(|v| v.name.len())
        .max()
        .unwrap_or(0);
    for v in VARIABLES.iter().chain(OTHERS) {
        out.push_str(&format!("  {:<width$}  {}\n", v.name, v.meaning));
    }
    out.push_str(
        "\nDetails, and the --json formats: docs/cli.md; a command's own: envc help COMMAND",
    );
    out
}

/// The two sections as roff, for a man page.
pub fn man_sections() -> String {
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    for e in Exit::ALL {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            e.code(),
            roff_text(e.meaning())
        ));
    }
    out.push_str(".SH ENVIRONMENT\n");
    let item = |v: &Variable| {
        format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(v.name),
            roff_text(v.meaning)
        )
    };
    for v in VARIABLES.iter().chain(OTHERS) {
        out.push_str(&item(v));
    }
    out
}

/// `text` as a roff text line: backslashes and hyphens escaped, and a leading `.` or `'`
/// (which would start a request) guarded.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// `page` (a man page clap_mangen rendered) with the sections before its VERSION section
/// (or at its end): where man pages have them, after the options.
pub fn with_man_sections(page: &str) -> String {
    let sections = man_sections();
    match page.find("\n.SH VERSION") {
        Some(at) => format!("{}\n{sections}{}", &page[..at], &page[at + 1..]),
        None if page.ends_with('\n') => format!("{page}{sections}"),
        None => format!("{page}\n{sections}"),
    }
}
