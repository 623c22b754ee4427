//! What this envc was built from (build.rs): `envc --version`, `envc version [--json]`. A
//! build outside a git checkout knows no commit, and no date unless SOURCE_DATE_EPOCH was
//! set: the text says `unknown`, the JSON `null`.

use serde_json::json;

use crate::exit::Exit;
use crate::output;

/// `0.1.0 (commit 0123456789ab, 2026-12-06T08:10:00Z, x86_64-unknown-linux-gnu)`.
pub const LINE: &str = env!("BUILT_VERSION_LINE");

/// The commit's short hash (without `-dirty`), if built from a git checkout.
pub fn commit() -> Option<&'static str> {
    Some(env!("BUILT_COMMIT")).filter(|c| !c.is_empty())
}

/// Whether tracked files differed from the commit, if built from a git checkout.
pub fn dirty() -> Option<bool> {
    match env!("BUILT_DIRTY") {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The commit's date (or SOURCE_DATE_EPOCH's), in seconds since 1970.
pub fn date_unix() -> Option<u64> {
    env!("BUILT_DATE_UNIX").parse().ok()
}

/// The target triple it was compiled for.
pub const TARGET: &str = env!("BUILT_TARGET");

pub fn json() -> serde_json::Value {
    output::versioned(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "commit": commit(),
        "dirty": dirty(),
        "commit_date": date_unix().map(crate::utc::rfc3339),
        "commit_unix": date_unix(),
        "target": TARGET,
    }))
}

/// `envc version [--json]`.
pub fn print(json_out: bool) -> Exit {
    if json_out {
        output::line(json());
    } else {
        output::line(format!("envc {LINE}"));
    }
    Exit::Ok
}
