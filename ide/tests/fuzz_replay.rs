//! Replays the fuzz corpus (`fuzz/seeds/`, every minimised crash in `fuzz/regressions/`)
//! and the examples' environments through every editor question (`fuzz/ide_check.rs`): a
//! language server must never crash on what a user is typing.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::path::{Path, PathBuf};

#[path = "../../fuzz/check.rs"]
#[allow(dead_code)] // only its fixtures are used here
mod check;
#[path = "../../fuzz/ide_check.rs"]
mod ide_check;

fn env_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            env_files(&p, out);
        } else if p.is_file()
            && (dir.ends_with("seeds")
                || dir.ends_with("regressions")
                || p.extension().is_some_and(|x| x == "env"))
        {
            out.push(p);
        }
    }
}

#[test]
fn every_editor_question_on_the_corpus_and_the_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["fuzz/seeds", "fuzz/regressions", "examples", "std"] {
        env_files(&root.join(dir), &mut files);
    }
    files.sort();
    assert!(files.len() > 20, "too few inputs: {}", files.len());
    let mut failed = Vec::new();
    for path in &files {
        let input = std::fs::read(path).unwrap();
        // Whole, and cut short as if being typed: a prefix ends mid-token.
        let cut = input.len() * 2 / 3;
        for text in [&input[..], &input[..cut]] {
            if std::panic::catch_unwind(|| ide_check::check(text)).is_err() {
                failed.push(
                    path.strip_prefix(&root)
                        .unwrap_or(path)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} inputs failed: {failed:#?}",
        failed.len()
    );
}
