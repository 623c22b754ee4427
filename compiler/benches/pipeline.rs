//! The compiler's stages, measured separately on the generated 100 hosts × 100 nodes project
//! (10,000 nodes; `benches/envgen`, the same text `examples/gen_env.rs` writes to disk):
//!
//! - `parse`:   `envc_lang::parse` of `main.env` (lexer + parser, one file);
//! - `load`:    `program::load`: reads and parses the root file and its imports (`std/files`);
//! - `check`:   `check::check` (names, types) of the loaded program;
//! - `eval`:    `Evaluator::run`: values, node construction and **derivation ids** (each
//!   node's canonical encoding is built and blake3-hashed when the node is constructed,
//!   inside eval, so hashing is part of this stage, not of `lower`);
//! - `lower`:   `graph::lower`: the reachable-node closure, dedup by id, conflict check and
//!   the canonical topological order;
//! - `to_json`: `Graph::to_json` + serialisation, what `envc graph --format json` prints;
//! - `compile`: `envc_compiler::compile`, load → check → eval → lower, end to end.
//!
//! Each iteration includes dropping its result (as the CLI does before it exits). Sample
//! sizes are small (10 samples, 1 s warm-up, 6 s measurement) so `cargo bench -p
//! envc-compiler` takes about a minute on 2 cores. `ENVC_BENCH_SIZE=HOSTSxNODES` measures
//! another size, e.g. `ENVC_BENCH_SIZE=100x1000 cargo bench -p envc-compiler`.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

#[path = "envgen/mod.rs"]
mod envgen;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use envc_compiler::eval::Evaluator;
use envc_compiler::{check, compile, graph, program, CompileOptions, Limits, MemoryLoader};

fn size() -> (usize, usize) {
    std::env::var("ENVC_BENCH_SIZE")
        .ok()
        .and_then(|s| {
            let (h, n) = s.split_once('x')?;
            Some((h.parse().ok()?, n.parse().ok()?))
        })
        .unwrap_or((100, 100))
}

fn pipeline(c: &mut Criterion) {
    let (hosts, per_host) = size();
    let nodes = hosts * per_host;
    let files = envgen::project(hosts, per_host);
    let loader = MemoryLoader::new(files.iter().map(|(p, s)| (p.as_str(), s.as_str())));
    let main = files[0].1.clone();
    let label = format!("{hosts}x{per_host}");

    // Every stage's input, computed once, and a sanity check that the project compiles.
    let program = program::load("main.env", &loader);
    assert!(program.errors.is_empty(), "generated project does not load");
    let (checked, errors) = check::check(&program);
    assert!(errors.is_empty(), "generated project does not check");
    let params = BTreeMap::new();
    let pins = BTreeMap::new();
    let (evaluated, errors) = Evaluator::new(
        &program,
        &checked,
        &loader,
        &params,
        &pins,
        Limits::default(),
    )
    .run();
    assert!(errors.is_empty(), "generated project does not evaluate");
    let g = graph::lower(&evaluated).unwrap_or_else(|_| panic!("generated project does not lower"));
    assert_eq!(g.order.len(), nodes, "node count");

    let mut group = c.benchmark_group("pipeline");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));

    group.throughput(Throughput::Bytes(main.len() as u64));
    group.bench_function(BenchmarkId::new("parse", &label), |b| {
        b.iter(|| envc_lang::parse(black_box(&main), 0))
    });
    group.bench_function(BenchmarkId::new("load", &label), |b| {
        b.iter(|| program::load(black_box("main.env"), &loader))
    });

    group.throughput(Throughput::Elements(nodes as u64));
    group.bench_function(BenchmarkId::new("check", &label), |b| {
        b.iter(|| check::check(black_box(&program)))
    });
    group.bench_function(BenchmarkId::new("eval", &label), |b| {
        b.iter(|| {
            Evaluator::new(
                black_box(&program),
                &checked,
                &loader,
                &params,
                &pins,
                Limits::default(),
            )
            .run()
        })
    });
    group.bench_function(BenchmarkId::new("lower", &label), |b| {
        b.iter(|| graph::lower(black_box(&evaluated)).ok())
    });
    group.bench_function(BenchmarkId::new("to_json", &label), |b| {
        b.iter(|| black_box(&g).to_json())
    });
    let options = CompileOptions::default();
    group.bench_function(BenchmarkId::new("compile", &label), |b| {
        b.iter(|| compile(black_box("main.env"), &loader, &options))
    });
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
