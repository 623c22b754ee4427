//! Each feature with one `check` helper: sources with a cursor written `$0`, the answer as
//! text. Files are in memory, compiled exactly as `envc check` compiles them.

use envc_compiler::{CompileOptions, MemoryLoader};
use envc_lang::Span;

use super::*;

/// The snapshot of `main.env` (with `$0` taken out of it) among `files`, and the cursor.
fn at(main: &str, others: &[(&str, &str)]) -> (Snapshot, FileId, u32) {
    let offset = main.find("$0").expect("a $0 cursor") as u32;
    let main = main.replace("$0", "");
    let mut files: Vec<(&str, &str)> = vec![("main.env", &main)];
    files.extend_from_slice(others);
    let s = Snapshot::analyze(
        "main.env",
        &MemoryLoader::new(files),
        &CompileOptions::default(),
    );
    let file = s.file("main.env").expect("main.env is loaded");
    (s, file, offset)
}

/// `file:start-end text` of each location: what a reader checks at a glance.
fn show(s: &Snapshot, locations: &[(FileId, Span)]) -> String {
    locations
        .iter()
        .map(|(f, sp)| {
            let src = s.sources().get(*f);
            let (line, _) = s.sources().line_col(*f, sp.start as usize);
            format!("{}:{line} {}", src.name, &src.text[sp.range()])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_hover(main: &str, expected: &str) {
    let (s, f, o) = at(main, &[]);
    let h = s.hover(f, o).map(|h| h.text).unwrap_or_default();
    // The nodes built there, with their ids, are `hover_on_a_node_names_its_derivation`'s.
    let h = h.split("\n\n---\n\n").next().unwrap_or_default();
    assert_eq!(h, expected, "{main}\n{:#?}", s.diagnostics());
}

#[test]
fn hover_shows_types_values_docs_and_nodes() {
    check_hover("let port = 80$0 + 1\n", "```envc\nint\n```");
    check_hover(
        "# How many web servers.\nlet replicas = 3\nlet n = replica$0s * 2\n",
        "```envc\nlet replicas: int\n```\n\n```envc\n= 3\n```\n\nHow many web servers.",
    );
    check_hover(
        "fn double(x: int) -> int => x * 2\nlet y = double(2$0)\n",
        "```envc\nint\n```",
    );
    check_hover(
        "fn double(x: int) -> int => x$0 * 2\n",
        "```envc\nx: int\n```",
    );
    check_hover(
        "# Twice as many.\nfn double(x: int) -> int => x * 2\nlet y = dou$0ble(2)\n",
        "```envc\nfn double(x: int) -> int\n```\n\nTwice as many.",
    );
    check_hover(
        "let n = le$0n([1, 2])\n",
        "```envc\nlen(value: any) -> int\n```\n\nelements of a list, characters of a string, fields of a record",
    );
    check_hover(
        "let h = host(name = \"h1\", address = \"192.0.2.1\")\nlet f = file(path = \"/etc/motd\", con$0tent = \"hi\", target = h)\n",
        "```envc\ncontent?: str\n```\n\nof `file`",
    );
    check_hover("import \"./li$0b.env\"\n", "");
}

#[test]
fn hover_on_a_node_names_its_derivation() {
    let (s, f, o) = at(
        "let h = host(name = \"h1\", address = \"192.0.2.1\")\nlet f = fi$0le(path = \"/etc/motd\", content = \"hi\", target = h)\n",
        &[],
    );
    let text = s.hover(f, o).unwrap().text;
    let id = s
        .analysis()
        .graph
        .as_ref()
        .unwrap()
        .nodes()
        .find(|n| &*n.name == "/etc/motd")
        .unwrap()
        .id
        .short();
    assert!(
        text.starts_with("```envc\nfile(path: str, target: target"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "- file `/etc/motd` on host `h1`  \n  derivation `{id}`"
        )),
        "{text}"
    );
}

fn check_definition(main: &str, others: &[(&str, &str)], expected: &str) {
    let (s, f, o) = at(main, others);
    let d: Vec<_> = s.definition(f, o).into_iter().collect();
    assert_eq!(show(&s, &d), expected, "{main}");
}

#[test]
fn definitions_across_scopes_and_imports() {
    check_definition("let a = 1\nlet b = a$0 + 1\n", &[], "main.env:1 a");
    check_definition("fn f(x: int) -> int => x$0\n", &[], "main.env:1 x");
    // The innermost of two names wins, as in the checker.
    check_definition(
        "let x = 1\nfn f(x: int) -> int => x$0\n",
        &[],
        "main.env:2 x",
    );
    check_definition(
        "let xs = [for x in [1, 2] => x$0 * 2]\n",
        &[],
        "main.env:1 x",
    );
    check_definition(
        "import \"./lib.env\"\nlet p = lib.po$0rt\n",
        &[("lib.env", "let port = 8080\n")],
        "lib.env:1 port",
    );
    check_definition(
        "import \"./li$0b.env\"\n",
        &[("lib.env", "let port = 8080\n")],
        "lib.env:1 ",
    );
    // Into the standard library: the line moves as it grows, the file and name do not.
    let (s, f, o) = at("import \"std/debian\"\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet p = debian.pack$0ages(h, [\"curl\"])\n", &[]);
    let d = show(&s, &[s.definition(f, o).unwrap()]);
    assert!(
        d.starts_with("std/debian:") && d.ends_with(" packages"),
        "{d}"
    );
    check_definition(
        "type Port = int(1..=65535)\nlet p: Po$0rt = 80\n",
        &[],
        "main.env:1 Port",
    );
    check_definition("let n = le$0n([1])\n", &[], "");
}

fn check_references(main: &str, expected: &str) {
    let (s, f, o) = at(main, &[]);
    assert_eq!(show(&s, &s.references(f, o, true)), expected, "{main}");
}

#[test]
fn references_of_globals_and_locals() {
    check_references(
        "let a$0 = 1\nlet b = a + a\nfn f(a: int) -> int => a\n",
        "main.env:1 a\nmain.env:2 a\nmain.env:2 a",
    );
    check_references(
        "let a = 1\nfn f(a: int) -> int => a$0 + 1\n",
        "main.env:2 a\nmain.env:2 a",
    );
}

fn check_rename(main: &str, new_name: &str, expected: Result<&str, &str>) {
    let (s, f, o) = at(main, &[]);
    let got = s.rename(f, o, new_name).map(|edits| {
        let mut text = s.sources().get(f).text.to_string();
        let mut edits = edits;
        edits.sort_by_key(|e| std::cmp::Reverse(e.span.start));
        for e in edits {
            text.replace_range(e.span.range(), &e.text);
        }
        text
    });
    let got = got.map_err(|e| e.to_string());
    assert_eq!(got.as_deref().map_err(String::as_str), expected, "{main}");
}

#[test]
fn rename_a_binding_and_refuse_what_would_break() {
    check_rename(
        "let a$0 = 1\nlet b = a + a\nfn f(a: int) -> int => a\n",
        "count",
        Ok("let count = 1\nlet b = count + count\nfn f(a: int) -> int => a\n"),
    );
    check_rename(
        "fn f(x: int) -> int => x$0 * x\n",
        "y",
        Ok("fn f(y: int) -> int => y * y\n"),
    );
    check_rename(
        "let a$0 = 1\nlet b = a\n",
        "b",
        Err("`b` is already defined where `a` is visible"),
    );
    check_rename("let a$0 = 1\n", "let", Err("`let` is not a name: letters, digits and `_`, not starting with a digit, and not a keyword"));
    check_rename(
        "let n = le$0n([1])\n",
        "size",
        Err("a built-in cannot be renamed"),
    );
}

fn check_completions(main: &str, expected: &[&str], absent: &[&str]) {
    let (s, f, o) = at(
        main,
        &[(
            "lib.env",
            "# The port.\nlet port = 8080\nfn url(host: str) -> str => host\n",
        )],
    );
    let labels: Vec<String> = s.completions(f, o).into_iter().map(|c| c.label).collect();
    for e in expected {
        assert!(
            labels.iter().any(|l| l == e),
            "{e} missing from {labels:?}\n{main}"
        );
    }
    for a in absent {
        assert!(
            !labels.iter().any(|l| l == a),
            "{a} offered in {labels:?}\n{main}"
        );
    }
}

#[test]
fn completion_by_context() {
    // Names in scope: locals, globals, builtins, keywords.
    check_completions(
        "let count = 1\nfn f(xs: int) -> int => c$0\n",
        &["count"],
        &["xs", "let"],
    );
    check_completions(
        "let count = 1\nfn f(xs: int) -> int => $0x\n",
        &["count", "xs", "len", "vm", "if"],
        &[],
    );
    // After a dot: a record's fields, a node's attributes and outputs, a module's names.
    check_completions(
        "let r = { port = 1, host = \"h\" }\nlet p = r.$0\n",
        &["port", "host"],
        &["len"],
    );
    check_completions(
        "let v = vm(name = \"v\", image = image(name = \"i\"))\nlet a = v.ad$0\n",
        &["address"],
        &["memory"],
    );
    check_completions(
        "import \"./lib.env\"\nlet p = lib.$0\n",
        &["port", "url"],
        &["len"],
    );
    // Arguments of a call: the ones not given yet.
    check_completions(
        "let h = host(name = \"h\", $0)\n",
        &["address", "user"],
        &["name"],
    );
    check_completions(
        "import \"./lib.env\"\nlet u = lib.url($0)\n",
        &["host"],
        &[],
    );
    // Types after `:`.
    check_completions(
        "type Port = int\nlet p: $0\n",
        &["Port", "int", "secret"],
        &["len"],
    );
    // The standard library in an import.
    check_completions("import \"std/$0\n", &["std/debian", "std/systemd"], &[]);
}

#[test]
fn completion_in_a_file_that_does_not_parse() {
    // The user is typing: the line is broken, the rest of the file still helps.
    check_completions(
        "let count = 1\nlet r = { port = 1 }\nlet x = r.$0\nlet y = \n",
        &["port"],
        &[],
    );
    check_completions("let count = 1\nlet y = (co$0\n", &["count"], &[]);
}

#[test]
fn symbols_outline_the_file() {
    let (s, f, _) = at(
        "import \"std/debian\"\nparam n: int = 1\n# doc\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet xs = [1]\nfn f() -> int => 1\ntype T = str\noutput o = 1$0\n",
        &[],
    );
    let got: Vec<String> = s
        .symbols(f)
        .into_iter()
        .map(|sy| format!("{:?} {} {}", sy.kind, sy.name, sy.detail))
        .collect();
    assert_eq!(
        got,
        [
            "Import debian std/debian",
            "Param n int",
            "Node h host",
            "Value xs list[int]",
            "Function f ",
            "Type T ",
            "Output o ",
        ]
    );
}

#[test]
fn fixes_from_did_you_mean() {
    let check = |main: &str, expected: &str| {
        let (s, f, _) = at(main, &[]);
        let fixes = s.fixes(f, Span::new(0, main.len()));
        let got: Vec<String> = fixes
            .iter()
            .map(|x| {
                format!(
                    "{} @{}",
                    x.title,
                    &s.sources().get(f).text[x.edit.span.range()]
                )
            })
            .collect();
        assert_eq!(got.join("\n"), expected, "{main}\n{:#?}", s.diagnostics());
    };
    check(
        "let h = hots(name = \"h\", address = \"192.0.2.1\")$0\n",
        "Change `hots` to `host` @hots",
    );
    check(
        "let r: { port: int = 80 } = { prot = 1 }$0\n",
        "Change `prot` to `port` @prot",
    );
    check("let a = 1$0\n", "");
}

#[test]
fn formatting_is_envc_fmt() {
    assert_eq!(format("let   a=1\n").as_deref(), Some("let a = 1\n"));
    assert_eq!(format("let a = \n"), None);
}
