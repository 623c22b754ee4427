//! The pipeline checks shared by the fuzz target (`fuzz/fuzz_targets/pipeline.rs`) and the
//! regression test (`compiler/tests/fuzz_regressions.rs`), which both include this file.
//!
//! For any bytes as `main.env` (beside a fixed `lib.env` and `t.j2`): compiling must not
//! panic (invalid UTF-8 included). For UTF-8 input, parsing must not panic and, when the
//! formatter accepts the input, its output must parse cleanly, be a fixed point of the
//! formatter, and keep every `#` comment. Every diagnostic label must point inside its file.

use envc_compiler::{compile, CompileOptions, Limits, MemoryLoader};
use envc_lang::Diagnostic;

pub const LIB_ENV: &str = r#"# lib.env: imported by seeds as `import "./lib.env"`.
let greeting = "hello"
fn double(x: int) -> int { x * 2 }
type Svc = { name: str, port: int(1..=65535) = 80 }
fn web(t: target, s: Svc) -> service {
  service(name = s.name, target = t, restart_on = [file(path = "/etc/${s.name}", template = path("./t.j2"), vars = { port = s.port }, target = t)])
}
"#;

pub const TEMPLATE: &str = "listen {{ port }}\n";

/// Runs the checks on a thread with a large stack, as the CLI does (the checker and the
/// evaluator recurse). A panic on that thread is re-raised on the caller's.
pub fn check(input: &[u8]) {
    on_big_stack(input, run);
}

/// Runs `run(input)` on a thread with the CLI's large stack, re-raising its panic here.
pub fn on_big_stack(input: &[u8], run: fn(&[u8])) {
    let input = input.to_vec();
    let worker = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || run(&input))
        .expect("spawn the pipeline thread");
    if let Err(panic) = worker.join() {
        std::panic::resume_unwind(panic);
    }
}

/// `input` as `main.env` beside the fixed `lib.env` and `t.j2`, and the options it is
/// compiled with (a small step limit, so that a slow input is not a hang).
pub fn project(input: &[u8]) -> (MemoryLoader, CompileOptions) {
    let mut loader = MemoryLoader::new([("lib.env", LIB_ENV), ("t.j2", TEMPLATE)]);
    loader.files.insert("main.env".to_string(), input.to_vec());
    let options = CompileOptions {
        limits: Limits {
            max_steps: 200_000,
            ..Default::default()
        },
        ..Default::default()
    };
    (loader, options)
}

fn run(input: &[u8]) {
    let (loader, options) = project(input);
    let compiled = compile("main.env", &loader, &options);
    let texts: Vec<&str> = compiled.sources.files.iter().map(|f| &*f.text).collect();
    for d in &compiled.diagnostics {
        spans_in_bounds(d, &texts);
    }

    let Ok(src) = std::str::from_utf8(input) else {
        return;
    };
    let parsed = envc_lang::parse(src, 0);
    for d in &parsed.errors {
        spans_in_bounds(d, &[src]);
    }
    let Ok(out) = envc_lang::format::format(src) else {
        return;
    };
    let reparsed = envc_lang::parse(&out, 0);
    assert!(
        reparsed.errors.is_empty(),
        "formatted output does not parse: {:?}\n--- input\n{src}\n--- formatted\n{out}",
        reparsed.errors
    );
    assert_eq!(
        parsed.comments.len(),
        reparsed.comments.len(),
        "formatting changed the number of comments\n--- input\n{src}\n--- formatted\n{out}"
    );
    match envc_lang::format::format(&out) {
        Ok(twice) => assert_eq!(
            twice, out,
            "formatting is not idempotent\n--- input\n{src}\n--- formatted once\n{out}"
        ),
        Err(e) => {
            panic!("formatted output is refused by the formatter: {e:?}\n--- formatted\n{out}")
        }
    }
}

/// Labels must name a known file and a span inside it on character boundaries, so that
/// whatever slices the source with them (rendering, `fmt`) cannot panic.
fn spans_in_bounds(d: &Diagnostic, texts: &[&str]) {
    for l in &d.labels {
        let text = texts.get(l.file as usize).unwrap_or_else(|| {
            panic!(
                "diagnostic {} labels unknown file {}: {d:?}",
                d.code, l.file
            )
        });
        let (s, e) = (l.span.start as usize, l.span.end as usize);
        assert!(
            s <= e && e <= text.len() && text.is_char_boundary(s) && text.is_char_boundary(e),
            "diagnostic {} has a label span {s}..{e} outside its file (len {}): {d:?}",
            d.code,
            text.len()
        );
    }
}
