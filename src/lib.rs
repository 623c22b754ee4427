//! The `envc` command line: argument parsing, the filesystem loader and diagnostic
//! rendering. Everything else lives in the workspace crates.

pub mod cli;
pub mod deploy;
pub mod fs_loader;
pub mod lock;
pub mod render;
pub mod store_cmd;
