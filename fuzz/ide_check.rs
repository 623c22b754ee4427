//! The editor's checks, shared by the fuzz target (`fuzz/fuzz_targets/ide.rs`) and the
//! replay test (`ide/tests/fuzz_replay.rs`), which both include this file.
//!
//! For any UTF-8 text as `main.env` (beside the pipeline's `lib.env` and `t.j2`): analysing
//! it and asking every question an editor asks, at every position (or, for long inputs, at
//! positions spread over it), must not panic, and every span in an answer must lie inside
//! its file, on character boundaries.

use envc_ide::Snapshot;
use envc_lang::{FileId, Span};

/// Positions asked about per input, at most.
const MAX_POSITIONS: usize = 400;

pub fn check(input: &[u8]) {
    crate::check::on_big_stack(input, run);
}

fn run(input: &[u8]) {
    let Ok(src) = std::str::from_utf8(input) else {
        return;
    };
    let (loader, options) = crate::check::project(input);
    let s = Snapshot::analyze("main.env", &loader, &options);
    let Some(main) = s.file("main.env") else {
        return;
    };
    let in_bounds = |file: FileId, span: Span| {
        let text = &s.sources().get(file).text;
        assert!(
            span.start <= span.end
                && (span.end as usize) <= text.len()
                && text.is_char_boundary(span.start as usize)
                && text.is_char_boundary(span.end as usize),
            "span {span:?} outside {} ({} bytes)",
            s.sources().get(file).name,
            text.len()
        );
    };
    for sym in s.symbols(main) {
        in_bounds(main, sym.span);
        in_bounds(main, sym.name_span);
    }
    let boundaries: Vec<u32> = (0..=src.len())
        .filter(|i| src.is_char_boundary(*i))
        .map(|i| i as u32)
        .collect();
    let step = boundaries.len().div_ceil(MAX_POSITIONS).max(1);
    for &offset in boundaries.iter().step_by(step) {
        if let Some(h) = s.hover(main, offset) {
            in_bounds(main, h.span);
        }
        if let Some((f, span)) = s.definition(main, offset) {
            in_bounds(f, span);
        }
        for (f, span) in s.references(main, offset, true) {
            in_bounds(f, span);
        }
        let _ = s.completions(main, offset);
        if let Ok(edits) = s.rename(main, offset, "renamed") {
            for e in edits {
                in_bounds(e.file, e.span);
            }
        }
        for fix in s.fixes(main, Span::new(offset as usize, offset as usize)) {
            in_bounds(fix.edit.file, fix.edit.span);
        }
    }
}
