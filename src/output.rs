//! Standard output and standard error. A closed pipe (`envc build … | head -1`, or a
//! stderr whose reader went away) is not an error: printing stops quietly and the command
//! finishes its work and exits as it would have. Nothing in the CLI uses `println!` or
//! `eprintln!`, which panic on a closed stream.

use std::io::Write;

/// Writes `text` to stdout; a failed write (a closed pipe) is ignored.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// `print` with a newline.
pub fn line(text: impl std::fmt::Display) {
    print(&format!("{text}\n"));
}

/// `println!` that stops quietly on a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::line(format!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `text` to stderr; a failed write (a closed pipe) is ignored.
pub fn eprint(text: &str) {
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
