#![no_main]
//! Parse, compile and format arbitrary bytes. The checks live in `../check.rs`, shared with
//! `compiler/tests/fuzz_regressions.rs`, which replays `fuzz/seeds/` and `fuzz/regressions/`.

#[path = "../check.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
