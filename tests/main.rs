//! envc's integration tests, as one test binary: each file in `tests/` is a module of it,
//! and `tests/support/` holds what they share. One binary rather than one per file: each
//! file built as its own crate was compiled and linked against envc's whole dependency graph
//! again (37 of them, minutes of every CI run: issue 39), and in one binary a long
//! end-to-end test shares the test threads with the rest instead of holding up the next file.
//! `tests/architecture.rs` checks that every file in `tests/` is declared here.
//!
//! One file's tests: `cargo test --release --test integration -- adopt::`.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

mod support;

mod adopt;
mod architecture;
mod aws;
mod aws_bench;
mod aws_example;
mod build;
mod checks;
mod ci_examples;
mod cli;
mod cloud_lock;
mod cloud_support;
mod diagnostics;
mod docs;
mod editor;
mod envc_test;
mod exec;
mod gitops;
mod lock;
mod lsp;
mod machines;
mod moved;
mod nshosts;
mod package;
mod picture;
mod render;
mod resource;
mod rollback;
mod rolling;
mod secrets;
mod servers;
mod shared;
mod stacks;
mod targeted;
mod transport;
mod verify;
