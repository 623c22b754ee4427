//! Every ```env block in the docs and the README compiles without a diagnostic; every
//! command docs/cli.md shows parses as the command line it documents (each synopsis of its
//! table in its shortest and its longest form, each example in its prose), and what it says
//! `render` writes is what `render` writes.

use crate::support::offline;

use clap::Parser;
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

fn cli_md() -> String {
    std::fs::read_to_string(format!("{}/docs/cli.md", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A word of a synopsis that stands for a value, as a value of that kind.
fn value_for(word: &str) -> String {
    match word {
        "FILE" => "prod.env",
        "DIR" | "OUT" => "out",
        "NODE" => "file:/etc/motd",
        "N" => "4",
        "NAME" => "ops",
        "OLD" => "main:prod.lock",
        "NEW" => "prod.lock",
        "URL" => "file:///srv/state",
        "RUN" => "4f2a",
        "KEY" => "package:hello",
        w => w,
    }
    .to_string()
}

/// The command line of a synopsis (`envc plan FILE [--json] [--format text\|json\|markdown]`):
/// its required words only, or with each optional group too (the first of alternatives).
fn synopsis_args(synopsis: &str, optional: bool) -> Vec<String> {
    // Asides (`-j N (≥ 1, default 32)`) are not words of the command.
    let mut text = String::new();
    let mut depth = 0;
    for c in synopsis.replace("\\|", "|").chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if depth == 0 => text.push(c),
            _ => {}
        }
    }
    let mut args = Vec::new();
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
        } else if c == '[' {
            let end = rest.find(']').unwrap();
            if optional {
                let first = rest[1..end].split(" | ").next().unwrap();
                args.extend(first.split_whitespace().map(word));
            }
            rest = &rest[end + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            args.push(word(&rest[..end]));
            rest = &rest[end..];
        }
    }
    args
}

/// One word: a placeholder becomes a value, `a|b` its first alternative, `--x=KEY` takes one.
fn word(w: &str) -> String {
    let w = w.split('|').next().unwrap();
    match w.split_once('=') {
        Some((flag, v)) if flag.starts_with("--") => format!("{flag}={}", value_for(v)),
        _ => value_for(w),
    }
}

fn parses(args: &[String]) -> Result<(), clap::Error> {
    envc::cli::Cli::try_parse_from(args).map(|_| ())
}

#[test]
fn every_documented_command_parses() {
    let doc = cli_md();
    let mut synopses = 0;
    for line in doc.lines().filter(|l| l.starts_with("| `envc ")) {
        let synopsis = &line[3..line[3..].find('`').unwrap() + 3];
        for optional in [false, true] {
            let args = synopsis_args(synopsis, optional);
            if let Err(e) = parses(&args) {
                panic!("docs/cli.md documents `{synopsis}`, but {args:?} does not parse:\n{e}");
            }
        }
        synopses += 1;
    }
    assert!(
        synopses >= 20,
        "found only {synopses} commands in the table"
    );

    // Each example in the prose: a whole command parses; a command named alone (`envc
    // check`) exists.
    let mut examples = 0;
    for line in doc.lines().filter(|l| !l.starts_with("| `envc ")) {
        for (i, _) in line.match_indices("`envc ") {
            let Some(end) = line[i + 1..].find('`') else {
                continue;
            };
            // A pipeline's first command.
            let example = line[i + 1..i + 1 + end].split(" | ").next().unwrap();
            let args = synopsis_args(example, true);
            match parses(&args) {
                Ok(()) => {}
                Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
                    let help = [args.clone(), vec!["--help".into()]].concat();
                    let named = parses(&help).map_err(|e| e.kind());
                    assert_eq!(
                        named,
                        Err(clap::error::ErrorKind::DisplayHelp),
                        "docs/cli.md names `{example}`, which is no command"
                    );
                }
                Err(e) => panic!("docs/cli.md shows `{example}`, which does not parse:\n{e}"),
            }
            examples += 1;
        }
    }
    assert!(examples >= 20, "found only {examples} examples");
}

/// docs/cli.md names the files `render` writes by example; `render` writes them so, offline
/// (nothing in the environment reads a value a build would give).
#[test]
fn render_writes_the_files_the_docs_name() {
    let doc = cli_md();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `envc render "))
        .unwrap();
    assert!(
        row.contains("`DIR/NAMESPACE/kind-NAME.yaml`, the kind in lower case"),
        "{row}"
    );
    let named: Vec<&str> = [
        "`shop/deployment-web.yaml`",
        "`_cluster/namespace-shop.yaml`",
    ]
    .into_iter()
    .filter(|f| row.contains(f))
    .map(|f| f.trim_matches('`'))
    .collect();
    assert_eq!(named.len(), 2, "{row}");

    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("prod.env"),
        "let ns = manifest(api_version = \"v1\", kind = \"Namespace\", name = \"shop\")\n\
         let web = manifest(\n  api_version = \"apps/v1\",\n  kind = \"Deployment\",\n  name = \"web\",\n  namespace = \"shop\",\n  \
         body = { spec = {\n    selector = { matchLabels = { app = \"web\" } },\n    \
         template = {\n      metadata = { labels = { app = \"web\" } },\n      \
         spec = { containers = [{ name = \"web\", image = \"nginx:1.27\" }] },\n    },\n  } },\n)\n",
    )
    .unwrap();
    let o = offline::envc(d.path(), &["render", "prod.env", "--out", "out"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut wrote: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim_start_matches("wrote out/").to_string())
        .collect();
    wrote.sort();
    let mut named = named;
    named.sort();
    assert_eq!(wrote, named);
}
