//! What an editor waits for on a 1,000-line file (the generated inventory of
//! `compiler/benches/envgen`, 930 hosts × 5 nodes: one line of tuning data per host, 4,650
//! nodes): `analyze`, the whole pipeline the language server runs after a change (parse,
//! check with the index, evaluate, lower), and then each question on that analysis.
//! `change+hover` is the cost of the first answer after a keystroke, the figure the
//! issue's 50 ms is about.
//!
//! `cargo bench -p envc-ide` (about 40 s on 2 cores).

#![allow(clippy::unwrap_used)] // a bench that cannot go on fails by panicking

#[path = "../../compiler/benches/envgen/mod.rs"]
mod envgen;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use envc_compiler::{CompileOptions, MemoryLoader};
use envc_ide::Snapshot;

fn analysis(c: &mut Criterion) {
    let files = envgen::project(930, 5);
    let main = files[0].1.clone();
    let lines = main.lines().count();
    assert!((950..=1100).contains(&lines), "main.env has {lines} lines");
    let loader = MemoryLoader::new(files.iter().map(|(p, s)| (p.as_str(), s.as_str())));
    let options = CompileOptions::default();
    let s = Snapshot::analyze("main.env", &loader, &options);
    assert!(s.diagnostics().is_empty(), "{:#?}", s.diagnostics());
    let file = s.file("main.env").unwrap();
    // Questions near the end of the file, where the functions that build the nodes are.
    let at = |needle: &str| main.rfind(needle).unwrap() as u32 + 1;
    let hover_at = at("stack(");
    let complete_at = at("app.") + 3;
    assert!(s.hover(file, hover_at).is_some());
    assert!(!s.completions(file, complete_at).is_empty());

    let mut group = c.benchmark_group(format!("ide-{lines}-lines"));
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("analyze", |b| {
        b.iter(|| Snapshot::analyze("main.env", black_box(&loader), &options))
    });
    group.bench_function("change+hover", |b| {
        b.iter(|| {
            let s = Snapshot::analyze("main.env", black_box(&loader), &options);
            s.hover(file, hover_at)
        })
    });
    group.bench_function("hover", |b| b.iter(|| s.hover(file, black_box(hover_at))));
    group.bench_function("completion", |b| {
        b.iter(|| s.completions(file, black_box(complete_at)))
    });
    group.bench_function("definition", |b| {
        b.iter(|| s.definition(file, black_box(hover_at)))
    });
    group.bench_function("references", |b| {
        b.iter(|| s.references(file, black_box(hover_at), true))
    });
    group.finish();
}

criterion_group!(benches, analysis);
criterion_main!(benches);
