//! `envc` run in a directory, offline, with nothing of the caller's environment that would
//! change what it does: not `CI` (which makes a build locked), not a store or a state named
//! elsewhere.

use std::path::Path;
use std::process::{Command, Output};

/// `envc ARGS` in `dir`.
pub fn envc(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("CI")
        .env_remove("ENVC_STORE")
        .env_remove("ENVC_STATE")
        .output()
        .expect("envc runs")
}
