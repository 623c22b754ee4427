//! Why evaluation stopped short of a value: an error to report, or one reported already.
//! Its own module, below the evaluator and the library functions it calls, which both stop
//! with it.

use envc_lang::Diagnostic;

pub enum Stop {
    Error(Box<Diagnostic>),
    /// Already reported (a failed top-level binding used again).
    Reported,
}

impl From<Diagnostic> for Stop {
    fn from(d: Diagnostic) -> Stop {
        Stop::Error(Box::new(d))
    }
}
