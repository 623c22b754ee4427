//! The `envc` command line: argument parsing (clap), rendering (diagnostics with miette,
//! plans, logs) and progress (indicatif). Everything else lives in the workspace crates:
//! the application layer is `envc_executor::session`, `locking` and `project`.

pub mod cli;
mod commands;
pub mod environment;
pub mod exit;
mod help;
mod lsp;
mod output;
pub mod render;
mod utc;
pub mod version;
/// The diagnostic of an `--only`/`--exclude` pattern that cannot be used (tests snapshot it).
pub use commands::targeted::diagnostic as selection_diagnostic;
