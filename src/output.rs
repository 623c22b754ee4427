//! Standard output and standard error. A closed pipe (`envc build … | head -1`, or a
//! stderr whose reader went away) is not an error: printing stops quietly and the command
//! finishes its work and exits as it would have. Nothing in the CLI uses `println!` or
//! `eprintln!`, which panic on a closed stream.
//!
//! Text envc prints carries what targets said (a failing command's output, a captured
//! `stdout`, a file's content in a plan): a target must not be able to drive the user's
//! terminal (retitle it, clear it, rewrite lines, OSC 52 the clipboard). So everything
//! printed here has its terminal control characters escaped ([`terminal_safe`]); only the
//! diagnostics miette draws go out raw, through [`eprint_rendered`], and they hold none
//! of a target's text.

use std::borrow::Cow;
use std::io::Write;

/// `text` with every control character but newline and tab written as an escape
/// (`\x1b`, `\u{9b}`): C0, DEL and C1, which is what starts a terminal's escape sequences.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    let control = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !control(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Writes `text` to stdout, terminal controls escaped; a failed write (a closed pipe) is
/// ignored.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(terminal_safe(text).as_bytes())
        .and_then(|_| out.flush());
}

/// `print` with a newline.
pub fn line(text: impl std::fmt::Display) {
    print(&format!("{text}\n"));
}

/// The version of every JSON object envc prints (`--json`, `--format json`, `envc version
/// --json`), as each object's `format_version`: "MAJOR.MINOR". MINOR grows when fields or
/// values are added (a reader ignores what it does not know); MAJOR when a field is removed,
/// renamed or changes meaning. The promise is in docs/cli.md ("JSON output").
pub const FORMAT_VERSION: &str = "1.0";

/// `value` with its `format_version` (an object's; another value as it is).
pub fn versioned(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(fields) => {
            let mut object = fields;
            object.insert("format_version".into(), FORMAT_VERSION.into());
            serde_json::Value::Object(object)
        }
        other => other,
    }
}

/// One JSON object on a line of its own, with its `format_version`.
pub fn json_line(value: serde_json::Value) {
    line(versioned(value));
}

/// `println!` that stops quietly on a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::line(format!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `text` to stderr, terminal controls escaped; a failed write (a closed pipe) is
/// ignored.
pub fn eprint(text: &str) {
    eprint_rendered(&terminal_safe(text));
}

/// Writes a diagnostic as miette rendered it (its colours are envc's own) to stderr.
pub fn eprint_rendered(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}

/// `eprintln!` that stops quietly on a closed stderr.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::eprint(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use errln;

#[cfg(test)]
mod tests {
    use super::terminal_safe;

    fn check(input: &str, expected: &str) {
        assert_eq!(terminal_safe(input), expected, "{input:?}");
    }

    #[test]
    fn terminal_controls_are_escaped() {
        check("plain text\n\twith tab", "plain text\n\twith tab");
        // OSC (retitle), CSI (clear screen, colour), BEL, a bare CR, C1's CSI, DEL.
        check("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07");
        check("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred");
        check("over\rwrite", "over\\x0dwrite");
        check("c1 \u{9b}31m and \x7f", "c1 \\u{9b}31m and \\x7f");
        check("ünïcödé ✓", "ünïcödé ✓");
    }
}
