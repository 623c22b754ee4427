//! Replays the fuzzer's seed corpus (`fuzz/seeds/`) and every minimised crash it found
//! (`fuzz/regressions/`) through the same checks as the fuzz target: no panic, diagnostics
//! inside their files, formatter output that parses, keeps its comments and is a fixed point.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::path::Path;

#[path = "../../fuzz/check.rs"]
mod check;

#[test]
fn fuzz_seeds_and_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["seeds", "regressions"] {
        let entries =
            std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("reading fuzz/{dir}: {e}"));
        files.extend(entries.map(|e| e.expect("directory entry").path()));
    }
    files.retain(|p| p.is_file());
    files.sort();
    assert!(!files.is_empty(), "no fuzz inputs found");

    let mut failed = Vec::new();
    for path in &files {
        let input = std::fs::read(path).expect("readable input");
        if std::panic::catch_unwind(|| check::check(&input)).is_err() {
            failed.push(
                path.strip_prefix(&root)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            );
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} inputs failed: {failed:#?}",
        failed.len(),
        files.len()
    );
}
