//! Every ```env block in the docs and the README compiles without a diagnostic.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use envc_compiler::{compile, CompileOptions, MemoryLoader};

fn blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```env") => current = Some(String::new()),
            (Some(_), "```") => out.push(current.take().unwrap()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn documented_examples_compile() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut count = 0;
    for doc in ["README.md", "docs/language.md"] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        for (i, block) in blocks(&text).into_iter().enumerate() {
            let files = [
                ("main.env", block.as_str()),
                ("files/site.conf", "server {}\n"),
                ("files/app.conf.j2", "port = {{ port }}\n"),
                ("keys/pgdg.asc", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"),
                // The environment `stack("core.env")` reads.
                (
                    "core.env",
                    "output db_address = \"10.0.0.5\"\noutput db_port = 5432\n",
                ),
            ];
            let c = compile(
                "main.env",
                &MemoryLoader::new(files),
                &CompileOptions::default(),
            );
            assert!(
                c.diagnostics.is_empty(),
                "{doc} block {i}:\n{block}\n{:#?}",
                c.diagnostics
            );
            let formatted = envc_lang::format::format(&block).unwrap();
            assert_eq!(
                formatted, block,
                "{doc} block {i} is not formatted as `envc fmt` would"
            );
            count += 1;
        }
    }
    assert!(count >= 15, "found only {count} blocks");
}
