#![no_main]
//! Every editor question at positions over arbitrary text. The checks live in
//! `../ide_check.rs`, shared with `ide/tests/fuzz_replay.rs`, which replays `fuzz/seeds/`,
//! `fuzz/regressions/` and the examples.

#[path = "../check.rs"]
mod check;
#[path = "../ide_check.rs"]
mod ide_check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| ide_check::check(data));
