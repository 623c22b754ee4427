//! The error of a lockfile that cannot be read or updated. Its own module, below both the
//! model (whose `update` refuses unknown keys with it) and the text form (whose parser
//! reports every broken line with it), so that neither imports the other for it.

use std::fmt;

use envc_ids::pin::PinKey;

/// A lockfile that cannot be read: which line, which pin, what is wrong, and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockError {
    pub message: String,
    /// 1-based line in the lockfile.
    pub line: Option<usize>,
    /// The key of the pin the error is in (`package:hello`), when there is one.
    pub pin: Option<PinKey>,
    pub hint: String,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if let Some(pin) = &self.pin {
            write!(f, "{pin}: ")?;
        }
        write!(f, "{}\n  hint: {}", self.message, self.hint)
    }
}

impl std::error::Error for LockError {}
