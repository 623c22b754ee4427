//! Why an object the store was asked for cannot be used: missing, corrupt, not the
//! document expected, or a ref that names no object. What `store verify` reports and
//! what a rollback that needs the object says.

use std::fmt;

use crate::store::StoreError;

/// Why an object the state refers to cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    Missing,
    /// Its content does not hash to its name.
    Corrupt,
    /// It hashes right but is not the JSON document expected.
    Malformed(String),
    /// The ref holds this instead of an object id.
    NotAnId(String),
}

impl Damage {
    /// The damage a read error shows, or the error itself when it is not damage (an I/O
    /// error says nothing about the object).
    pub fn of(e: StoreError) -> Result<Damage, StoreError> {
        match e {
            StoreError::Missing(_) => Ok(Damage::Missing),
            StoreError::Corrupt { .. } => Ok(Damage::Corrupt),
            StoreError::Malformed { error, .. } => Ok(Damage::Malformed(error)),
            StoreError::BadRef { content, .. } => Ok(Damage::NotAnId(content)),
            e @ (StoreError::Io { .. } | StoreError::Remote(_) | StoreError::LockLost { .. }) => {
                Err(e)
            }
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Missing => f.write_str("missing from the store"),
            Damage::Corrupt => f.write_str("corrupt (its content does not hash to its name)"),
            Damage::Malformed(e) => write!(f, "not the document expected ({e})"),
            Damage::NotAnId(content) => write!(f, "the ref holds {content:?}, not an object id"),
        }
    }
}
