//! Why a step failed: the error every operation on a target, image build and provider call
//! returns, and what a failed node's outcome and diagnostic are made of.

use std::fmt;

use crate::transport::TransportError;

/// A failed step: the cause (naming what and where: `file /etc/motd on host web-0: …`) and,
/// where there is one, what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepError {
    pub cause: String,
    pub hint: Option<String>,
}

impl StepError {
    pub fn new(cause: impl Into<String>) -> StepError {
        StepError {
            cause: cause.into(),
            hint: None,
        }
    }

    pub fn with_hint(cause: impl Into<String>, hint: impl Into<String>) -> StepError {
        StepError {
            cause: cause.into(),
            hint: Some(hint.into()),
        }
    }

    /// The same error, with `hint` on what to do.
    pub fn hint(self, hint: impl Into<String>) -> StepError {
        StepError {
            cause: self.cause,
            hint: Some(hint.into()),
        }
    }

    /// The same error, said of `subject` (`file /etc/motd`): `SUBJECT: CAUSE`.
    pub fn of(self, subject: &str) -> StepError {
        StepError {
            cause: format!("{subject}: {}", self.cause),
            hint: self.hint,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cause)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StepError {}

impl From<TransportError> for StepError {
    fn from(e: TransportError) -> StepError {
        StepError::new(e.to_string())
    }
}

impl From<crate::store::StoreError> for StepError {
    fn from(e: crate::store::StoreError) -> StepError {
        StepError::new(e.to_string())
    }
}

/// Why an object something needs cannot be used: `WHAT (object ID) is missing from the
/// store` (or corrupt, or not the document expected; or cannot be read, with the error).
pub fn unusable(what: &str, id: &crate::store::ObjectId, e: crate::store::StoreError) -> StepError {
    let why = match envc_store::damage::Damage::of(e) {
        Ok(d) => d.to_string(),
        Err(e) => format!("cannot be read ({e})"),
    };
    StepError::new(format!("{what} (object {id}) is {why}"))
}
