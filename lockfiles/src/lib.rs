//! The lockfile: the model of pinned external inputs (Debian archive state, package versions
//! and hashes, kernel, tool versions, `SOURCE_DATE_EPOCH`), its deterministic text form,
//! resolution against the archive, and `lock diff`.
//!
//! Not built yet: the lockfile issue fills this crate. The compiler already reserves the
//! `pins` field in every derivation's encoding, so pins will change exactly the ids of the
//! derivations that use them.
