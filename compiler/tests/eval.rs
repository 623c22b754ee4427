//! Evaluation semantics, data-driven: each case is a program whose `output`s are compared,
//! as JSON, with the expected values.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::BTreeMap;

use envc_compiler::derivation::value_json;
use envc_compiler::{compile, CompileOptions, MemoryLoader};

/// Compiles `src` (plus `extra` files) and compares its outputs with `expected` (JSON).
fn check_with(src: &str, extra: &[(&str, &str)], expected: &str) {
    let mut files = vec![("main.env", src)];
    files.extend_from_slice(extra);
    let c = compile(
        "main.env",
        &MemoryLoader::new(files),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{src}\n{:#?}", c.diagnostics);
    let outputs: serde_json::Map<String, serde_json::Value> = c
        .graph
        .unwrap()
        .outputs
        .iter()
        .map(|(k, v)| (k.to_string(), value_json(v)))
        .collect();
    let expected: serde_json::Value = serde_json::from_str(expected).expect("expected is JSON");
    assert_eq!(serde_json::Value::Object(outputs), expected, "{src}");
}

fn check(src: &str, expected: &str) {
    check_with(src, &[], expected)
}

#[test]
fn arithmetic_and_comparison() {
    check("output a = 1 + 2 * 3 - 4 / 2 % 3", r#"{"a": 5}"#);
    check(
        "output a = -(2 + 3)\noutput b = not (1 < 2) or 3 >= 3",
        r#"{"a": -5, "b": true}"#,
    );
    check(
        "output a = 512MiB + 512MiB\noutput b = 3GiB / 1GiB\noutput c = 2 * 1KiB",
        r#"{"a": {"size": "1GiB"}, "b": 3, "c": {"size": "2KiB"}}"#,
    );
    check(
        "output a = \"b\" > \"a\" and [1, 2] == [1, 2] and { x = 1 } != { x = 2 }",
        r#"{"a": true}"#,
    );
    check(
        "output a = 0o644\noutput b = \"${0o644} ${0o4755}\"",
        r#"{"a": {"mode": "0o644"}, "b": "0644 4755"}"#,
    );
}

#[test]
fn strings() {
    check(
        "let n = 3\noutput s = \"n=${n} ok=${n > 2} mem=${2GiB} \\${literal}\"",
        r#"{"s": "n=3 ok=true mem=2GiB ${literal}"}"#,
    );
    check(
        "output s = \"\"\"\n    a\n      b ${1 + 1}\n    c\n    \"\"\"",
        r#"{"s": "a\n  b 2\nc\n"}"#,
    );
    check("output s = \"a\" + \"b\"", r#"{"s": "ab"}"#);
    check(
        "output s = [upper(\"ab\"), lower(\"AB\"), trim(\"  x \"), replace(\"a-b-c\", \"-\", \"+\"), str(42), str(true)]",
        r#"{"s": ["AB", "ab", "x", "a+b+c", "42", "true"]}"#,
    );
    check(
        "output s = [starts_with(\"debian\", \"deb\"), ends_with(\"x.conf\", \".conf\"), contains(\"abc\", \"b\")]",
        r#"{"s": [true, true, true]}"#,
    );
    check(
        "output s = split(\"a,b,,c\", \",\")",
        r#"{"s": ["a", "b", "", "c"]}"#,
    );
}

#[test]
fn lists_records_and_comprehensions() {
    check(
        "output r = 0..3\noutput s = 1..=3",
        r#"{"r": [0, 1, 2], "s": [1, 2, 3]}"#,
    );
    check(
        "output x = [for i in 0..10 if i % 3 == 0 => i * i]",
        r#"{"x": [0, 9, 36, 81]}"#,
    );
    check(
        "output x = [for i in 0..2 for j in [\"a\", \"b\"] => \"${i}${j}\"]",
        r#"{"x": ["0a", "0b", "1a", "1b"]}"#,
    );
    check(
        "output x = [for i, s in [\"a\", \"b\"] => \"${i}:${s}\"]",
        r#"{"x": ["0:a", "1:b"]}"#,
    );
    check("let r = { b = 2, a = 1 }\noutput k = keys(r)\noutput v = values(r)\noutput kv = [for k, v in r => \"${k}=${v}\"]", r#"{"k": ["a", "b"], "v": [1, 2], "kv": ["a=1", "b=2"]}"#);
    check(
        "output x = {for h in [\"web\", \"db\"] => h = len(h)}",
        r#"{"x": {"db": 2, "web": 3}}"#,
    );
    check(
        "let xs = [10, 20, 30]\noutput a = xs[0]\noutput b = xs[-1]\noutput n = len(xs)",
        r#"{"a": 10, "b": 30, "n": 3}"#,
    );
    check(
        "output x = [1] + [2, 3]\noutput m = merge({ a = 1, b = 1 }, { b = 2 })",
        r#"{"x": [1, 2, 3], "m": {"a": 1, "b": 2}}"#,
    );
    check("output x = sort([3, 1, 2])\noutput y = sort([\"b\", \"a\"])\noutput c = contains([1, 2], 2)", r#"{"x": [1, 2, 3], "y": ["a", "b"], "c": true}"#);
    check(
        "output r = { \"kebab-key\" = 1 }[\"kebab-key\"]",
        r#"{"r": 1}"#,
    );
    check(
        "output j = to_json({ b = [1, 2], a = \"x\", c = true })",
        r#"{"j": "{\"a\":\"x\",\"b\":[1,2],\"c\":true}"}"#,
    );
}

#[test]
fn functions() {
    check("fn add(a: int, b: int = 10) -> int { a + b }\noutput x = [add(1), add(1, 2), add(b = 5, a = 1)]", r#"{"x": [11, 3, 6]}"#);
    check(
        "fn fact(n: int) -> int { if n <= 1 { 1 } else { n * fact(n - 1) } }\noutput x = fact(10)",
        r#"{"x": 3628800}"#,
    );
    check(
        "let k = 3\nlet times = fn(x) => x * k\noutput x = [for i in 0..3 => times(i)]",
        r#"{"x": [0, 3, 6]}"#,
    );
    check(
        "fn adder(n: int) { fn(x) => x + n }\nlet add2 = adder(2)\noutput x = add2(40)",
        r#"{"x": 42}"#,
    );
    check(
        "fn f(a: int, b: int = a * 2) => a + b\noutput x = f(1)",
        r#"{"x": 3}"#,
    );
    check("fn f(x: int) -> int {\n  let y = x + 1\n  assert y > 0, \"positive\"\n  fn g(z) => z * 2\n  g(y)\n}\noutput x = f(1)", r#"{"x": 4}"#);
    check(
        "output x = if 1 > 2 { \"a\" } else if 2 > 1 { \"b\" } else { \"c\" }",
        r#"{"x": "b"}"#,
    );
}

#[test]
fn types_fill_defaults_and_check_ranges() {
    check(
        "type Db = { name: str, port: int(1..=65535) = 5432, tags: list[str] = [] }\nlet d: Db = { name = \"main\" }\noutput d = d",
        r#"{"d": {"name": "main", "port": 5432, "tags": []}}"#,
    );
    check(
        "type Db = { name: str, port: int = 5432 }\nfn url(d: Db) -> str { \"pg://${d.name}:${d.port}\" }\noutput u = url({ name = \"x\" })",
        r#"{"u": "pg://x:5432"}"#,
    );
    check("param n: int(1..=9) = 3\noutput n = n", r#"{"n": 3}"#);
}

#[test]
fn top_level_order_does_not_matter() {
    check("output x = b\nlet b = a + 1\nlet a = 1", r#"{"x": 2}"#);
}

#[test]
fn modules() {
    check_with(
        "import \"./lib/net.env\"\nimport \"./lib/net.env\" as n2\noutput p = net.port(80)\noutput same = n2.base",
        &[("lib/net.env", "let base = 8000\nfn port(n: int) -> int { base + n }\n")],
        r#"{"p": 8080, "same": 8000}"#,
    );
    check(
        "import \"std/files\"\noutput s = files.lines([\"a\", \"b\"])",
        r#"{"s": "a\nb\n"}"#,
    );
}

#[test]
fn deferred_values_stay_deferred_through_interpolation_and_join() {
    let src = "let v = vm(name = \"db-0\", image = image(name = \"i\"))\noutput a = \"${v.address}:${v.port}\"\noutput j = join([v.address, \"x\"], \",\")";
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let g = c.graph.unwrap();
    let id = g
        .nodes()
        .find(|n| n.name.as_ref() == "db-0")
        .unwrap()
        .id
        .hex();
    let deferred =
        |out: &str| serde_json::json!({"deferred": {"name": "db-0", "node": id, "output": out}});
    let outputs: Vec<serde_json::Value> = g.outputs.iter().map(|(_, v)| value_json(v)).collect();
    assert_eq!(
        outputs[0],
        serde_json::json!({"interpolate": [deferred("address"), ":", deferred("port")]})
    );
    assert_eq!(
        outputs[1],
        serde_json::json!({"interpolate": [deferred("address"), ",x"]})
    );
}

#[test]
fn project_files_are_hashed_by_content() {
    let src = "let p = path(\"conf/app.conf\")\noutput p = p";
    let hash = blake3::hash(b"port=1\n").to_hex().to_string();
    check_with(
        src,
        &[("conf/app.conf", "port=1\n")],
        &format!(r#"{{"p": {{"path": "conf/app.conf", "blake3": "{hash}"}}}}"#),
    );
}

#[test]
fn quantifiers_extremes_and_file_contents() {
    check(
        "output a = [all([]), all([true, 1 < 2]), all([true, false])]\noutput b = [any([]), any([false, true])]",
        r#"{"a": [true, true, false], "b": [false, true]}"#,
    );
    check(
        "output m = [min([3, 1, 2]), max([3, 1, 2])]\noutput s = max([\"b\", \"a\"])\noutput z = min([2GiB, 512MiB])",
        r#"{"m": [1, 3], "s": "b", "z": {"size": "512MiB"}}"#,
    );
    // The checker knows `max` of a list of ints is an int.
    check("let m: int = max([1, 2])\noutput m = m + 1", r#"{"m": 3}"#);
    check_with(
        "output motd = upper(trim(read(path(\"motd.txt\"))))",
        &[("motd.txt", "  welcome\n")],
        r#"{"motd": "WELCOME"}"#,
    );
}

#[test]
fn the_graph_is_what_the_root_reaches() {
    // A node made in an imported module but never used by the root is not in the graph.
    let src = "import \"./lib.env\"\nlet h = lib.h\n";
    let lib = "let h = host(name = \"a\", address = \"192.0.2.1\")\nlet unused = host(name = \"b\", address = \"192.0.2.2\")\n";
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src), ("lib.env", lib)]),
        &CompileOptions::default(),
    );
    let g = c.graph.expect("compiles");
    let names: Vec<&str> = g.nodes().map(|n| &*n.name).collect();
    assert_eq!(names, ["a"]);
}

/// Values share strings and lists, so a value small in memory can be huge written out:
/// every place that writes values out (JSON, node encodings, outputs) bounds the expansion.
#[test]
fn shared_values_cannot_expand_past_the_limit() {
    let prelude = "fn dbl(s: str, n: int) -> str { if n == 0 { s } else { dbl(s + s, n - 1) } }\n\
                   let s = dbl(\"x\", 20)\nlet d = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n\
                   let big = [for a in d for b in d for c in d => s]\n";
    for (tail, what) in [
        (
            "output j = len(to_json(big))\n",
            "this value as JSON is too large",
        ),
        (
            "let m = manifest(name = \"m\", api_version = \"v1\", kind = \"ConfigMap\", body = { xs = big })\n",
            "attribute `body` of this manifest is too large",
        ),
        ("output o = big\n", "output `o` is too large"),
    ] {
        let src = format!("{prelude}{tail}");
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src.as_str())]),
            &CompileOptions::default(),
        );
        let titles: Vec<&str> = c.diagnostics.iter().map(|d| d.title.as_str()).collect();
        assert_eq!(titles, [what], "{tail}");
        assert_eq!(c.diagnostics[0].code, "eval::too-large");
    }
    // The same shapes, small, are fine.
    let small = prelude.replace("dbl(\"x\", 20)", "dbl(\"x\", 2)");
    let src = format!("{small}output o = len(to_json(big))\n");
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src.as_str())]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
}

/// Compiles `src` and compares the codes of its diagnostics (in order) with `expected`.
fn check_errors(files: &[(&str, &str)], set: &[(&str, &str)], expected: &[&str]) {
    let options = CompileOptions {
        params: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let c = compile(
        "main.env",
        &MemoryLoader::new(files.iter().copied()),
        &options,
    );
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, expected, "{files:?}\n{:#?}", c.diagnostics);
    if expected.is_empty() {
        assert!(c.graph.is_some());
    }
}

/// Found in review: each of these compiled "ok" while a binding (and its nodes) silently
/// disappeared, or was rejected or accepted wrongly.
#[test]
fn review_regressions() {
    let m = |src: &'static str| vec![("main.env", src)];
    // Field access through an unannotated parameter, on a deferred value and on a module.
    check_errors(
        &m("fn f(x) => x.foo\nlet v = vm(name = \"m\", image = image(name = \"i\"))\nlet y = f(v.address)\n"),
        &[],
        &["type::no-fields"],
    );
    check_errors(
        &[
            (
                "main.env",
                "import \"./lib.env\"\nfn f(x) => x.nope\noutput o = f(lib)\n",
            ),
            ("lib.env", "let a = 1\n"),
        ],
        &[],
        &["type::unknown-field"],
    );
    // A record-type default cannot see local variables (it is evaluated in its module).
    check_errors(
        &m("fn f(x: int) -> int {\n  let r: { a: int = x } = {}\n  r.a\n}\nlet n = f(3)\n"),
        &[],
        &["name::unknown"],
    );
    // A project directory named `std` is an ordinary directory.
    check_errors(
        &[
            ("main.env", "import \"./std/a.env\"\noutput x = a.v\n"),
            ("std/a.env", "import \"./b.env\"\nlet v = b.w\n"),
            ("std/b.env", "let w = path(\"conf.txt\")\n"),
            ("std/conf.txt", "hi\n"),
        ],
        &[],
        &[],
    );
    // Size arithmetic: no wrap-around, real division by zero, no negative sizes.
    check_errors(&m("output o = 10000000TB / 1B\n"), &[], &["eval::overflow"]);
    check_errors(
        &m("output o = 1GiB / 0\n"),
        &[],
        &["eval::division-by-zero"],
    );
    check_errors(
        &m("output o = 1GiB / (1GiB - 1GiB)\n"),
        &[],
        &["eval::division-by-zero"],
    );
    check_errors(&m("output o = 1GiB - 2GiB\n"), &[], &["eval::overflow"]);
    // Arithmetic on an unknown operand is not assumed to be an int.
    check_errors(
        &m("fn double(x) => x * 2\nlet s: size = double(1GiB)\n"),
        &[],
        &[],
    );
    // `merge` and `str` are typed by their arguments; every node has a `name`.
    check_errors(
        &m("output o = merge({ a = 1 }, { a = \"s\" }).a + 1\n"),
        &[],
        &["type::bad-operands"],
    );
    check_errors(
        &m("let v = vm(name = \"m\", image = image(name = \"i\"))\nlet b = if str(v.port) == \"22\" { 1 } else { 2 }\n"),
        &[],
        &["type::deferred"],
    );
    check_errors(
        &m("let h = host(name = \"h\", address = \"192.0.2.1\")\nlet f = file(path = \"/x\", content = \"a\", target = h)\noutput n = f.name\n"),
        &[],
        &[],
    );
    // A bare word sets a parameter whose type is an alias of `str`.
    check_errors(
        &m("type Region = str\nparam region: Region = \"eu\"\noutput r = region\n"),
        &[("region", "us-east")],
        &[],
    );
    // Range bounds match their base type; sizes are never negative.
    check_errors(
        &m("param p: size(-1GiB..=1GiB) = 1GiB\n"),
        &[],
        &["type::bad-range"],
    );
    check_errors(
        &m("param q: size(1..=5) = 2GiB\n"),
        &[],
        &["type::bad-range", "type::bad-range"],
    );
    check_errors(
        &m("param r: int(1GiB..=2GiB) = 1\n"),
        &[],
        &["type::bad-range", "type::bad-range"],
    );
    // One failing function called three times is one problem.
    check_errors(
        &m("fn f(x) => x.foo\nlet a = [f(1), f(2), f(3)]\n"),
        &[],
        &["type::no-fields"],
    );
}

/// A `--set` value for a `str` parameter: a bare word is the string itself, but a value
/// that reads as another literal (`[1]`, `12`, `true`, `1GiB`) is refused with a hint to
/// quote it, instead of silently becoming the string `"[1]"`.
#[test]
fn set_values_of_str_parameters() {
    let m = vec![("main.env", "param s: str = \"x\"\noutput o = s\n")];
    for bare in [
        "eu",
        "us-east-1",
        "web.example.org",
        "1.2.3",
        "a b",
        "",
        "hello!",
    ] {
        check_errors(&m, &[("s", bare)], &[]);
    }
    for quoted in ["\"[1]\"", "\"12\"", "\"true\""] {
        check_errors(&m, &[("s", quoted)], &[]);
    }
    for literal in [
        "[1]",
        "12",
        "-3",
        "true",
        "1GiB",
        "0o644",
        "{ a = 1 }",
        "[]",
        "(4)",
    ] {
        check_errors(&m, &[("s", literal)], &["param::not-a-string"]);
    }
}

#[test]
fn checks_are_values_with_their_defaults() {
    check(
        r#"
let h = host(name = "h1", address = "192.0.2.1")
let p = package(name = "nginx", target = h, expect = [http("http://localhost/"), tcp(80)])
output c = p.expect
output r = p.require
output t = free_space("/var", 1GiB, timeout = 5)
"#,
        r#"{
  "c": [
    {"check": "http", "args": {"url": "http://localhost/", "status": 200, "body_contains": "", "timeout": 30}},
    {"check": "tcp", "args": {"port": 80, "host": "127.0.0.1", "timeout": 30}}
  ],
  "r": [],
  "t": {"check": "free_space", "args": {"path": "/var", "at_least": {"size": "1GiB"}, "timeout": 5}}
}"#,
    );
}

/// `exec`: one command, runnable lists, names a shell accepts, absolute paths; its output
/// read only when captured. Each case is a whole program and the codes it gives.
#[test]
fn exec_nodes_are_checked_where_they_are_written() {
    let host = "let h = host(name = \"h\", address = \"192.0.2.1\")\n";
    let case = |body: &str, expected: &[&str]| {
        let src = format!("{host}{body}");
        check_errors(&[("main.env", &src)], &[], expected);
    };
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"])\n",
        &[],
    );
    case(
        "let e = exec(name = \"x\", target = h, shell = \"echo hi | wc -c\")\n",
        &[],
    );
    case(
        "let e = exec(name = \"x\", target = h)\n",
        &["eval::exec-command"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [])\n",
        &["eval::exec-command"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"\", \"a\"])\n",
        &["eval::exec-command"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], undo = [])\n",
        &["eval::exec-command"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], only_if = [])\n",
        &["eval::exec-command"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], env = { \"1A\" = \"x\" })\n",
        &["eval::exec-env"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], env = { A_1 = \"x\" })\n",
        &[],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], cwd = \"tmp\")\n",
        &["eval::exec-path"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], timeout = 0)\n",
        &["eval::out-of-range"],
    );
    case(
        "let e = exec(name = \"a b\", target = h, argv = [\"true\"])\n",
        &["eval::bad-node-name"],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"], capture = true)\nlet f = file(path = \"/t\", content = e.stdout, target = h)\n",
        &[],
    );
    case(
        "let e = exec(name = \"x\", target = h, argv = [\"true\"])\nlet f = file(path = \"/t\", content = e.stdout, target = h)\n",
        &["eval::not-captured"],
    );
    // A deferred value may stand anywhere in a command: it is checked once it is known.
    case(
        "let v = vm(name = \"m\", image = image(name = \"i\"))\nlet e = exec(name = \"x\", target = v, argv = [\"ping\", v.address], creates = \"/x/${v.address}\")\n",
        &[],
    );
}

/// `secret(name)`: a deferred string the compiler never sees; a file holding one is 0600
/// unless it says otherwise; a command takes one in `env` or `stdin` only.
#[test]
fn secrets_are_deferred_and_make_files_private() {
    let host = "let h = host(name = \"h\", address = \"192.0.2.1\")\n";
    let mode_of = |body: &str| -> String {
        let src = format!("{host}{body}");
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src.as_str()), ("t.j2", "{{ x }}")]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{src}\n{:#?}", c.diagnostics);
        let g = c.graph.unwrap();
        let f = g
            .nodes()
            .find(|n| n.kind == envc_compiler::types::NodeKind::File)
            .unwrap();
        value_json(&f.attrs["mode"]).to_string()
    };
    assert_eq!(
        mode_of("let f = file(path = \"/a\", content = \"pw=${secret(\"pw\")}\", target = h)\n"),
        r#"{"mode":"0o600"}"#
    );
    assert_eq!(mode_of("let f = file(path = \"/a\", template = path(\"t.j2\"), vars = { x = secret(\"pw\") }, target = h)\n"), r#"{"mode":"0o600"}"#);
    assert_eq!(
        mode_of(
            "let f = file(path = \"/a\", content = secret(\"pw\"), mode = 0o640, target = h)\n"
        ),
        r#"{"mode":"0o640"}"#
    );
    assert_eq!(
        mode_of("let f = file(path = \"/a\", content = \"plain\", target = h)\n"),
        r#"{"mode":"0o644"}"#
    );
    let case = |body: &str, expected: &[&str]| {
        let src = format!("{host}{body}");
        check_errors(&[("main.env", &src)], &[], expected);
    };
    case("let e = exec(name = \"x\", target = h, argv = [\"psql\"], env = { PGPASSWORD = secret(\"pw\") }, stdin = secret(\"sql\"))\n", &[]);
    case(
        "let e = exec(name = \"x\", target = h, shell = \"psql -W ${secret(\"pw\")}\")\n",
        &["eval::exposed-secret"],
    );
    case("let e = exec(name = \"x\", target = h, argv = [\"x\"], env = { P = secret(\"pw\") }, undo = [\"y\"])\n", &["eval::exposed-secret"]);
    // Known only at deploy time: nothing can compute with it, or name a node with it.
    case("let n = len(secret(\"pw\"))\n", &["type::deferred"]);
    case(
        "let f = file(path = secret(\"pw\"), content = \"x\", target = h)\n",
        &["type::deferred"],
    );
    case("let s = secret(\"1pw\")\n", &["eval::bad-secret-name"]);
    // Only as data on the target: not an address, an owner, a check's URL.
    case(
        "let g = host(name = \"g\", address = secret(\"addr\"))\n",
        &["eval::exposed-secret"],
    );
    case(
        "let f = file(path = \"/a\", content = \"x\", owner = secret(\"o\"), target = h)\n",
        &["eval::exposed-secret"],
    );
    case("let f = file(path = \"/a\", content = \"x\", target = h, expect = [tcp(22, host = secret(\"t\"))])\n", &["eval::exposed-secret"]);
    case("let f = file(path = \"/a\", content = \"x\", target = h, expect = [installed(secret(\"t\"))])\n", &["eval::exposed-secret"]);
    // A check's script, an http URL and the text looked for travel as data.
    case("let f = file(path = \"/a\", content = \"x\", target = h, expect = [command(\"test ${secret(\"t\")}\")])\n", &[]);
    case("let f = file(path = \"/a\", content = \"x\", target = h, expect = [http(\"http://u:${secret(\"t\")}@x/\", body_contains = secret(\"b\"))])\n", &[]);
}

/// `secret` is a type: what `secret(…)` gives and whatever is interpolated from one. It
/// stands where a string may; a string, even a deferred one, never stands where a secret is
/// wanted, so a component can insist that its password is not written in the source.
#[test]
fn secret_is_a_type_that_plain_strings_do_not_fit() {
    let host = "let h = host(name = \"h\", address = \"192.0.2.1\")\n";
    let db = "fn db(password: secret) -> file => file(path = \"/etc/db\", content = \"pw=${password}\", target = h)\n";
    let case = |body: &str, expected: &[&str]| {
        let src = format!("{host}{db}{body}");
        check_errors(&[("main.env", &src)], &[], expected);
    };
    case("let f = db(secret(\"pw\"))\n", &[]);
    case("let f = db(\"hunter2\")\n", &["type::mismatch"]);
    case("let f = db(h.address)\n", &["type::mismatch"]);
    // Interpolating, joining or converting a secret gives a secret.
    case("let f = db(\"prefix-${secret(\"pw\")}\")\n", &[]);
    case(
        "let f = db(join([secret(\"a\"), secret(\"b\")], \"-\"))\n",
        &[],
    );
    // A list of strings and secrets is a list of strings: what is joined from it may not be
    // secret, as far as types know.
    case(
        "let f = db(join([\"a\", secret(\"pw\")], \"-\"))\n",
        &["type::mismatch"],
    );
    case("let s: secret = secret(\"a\")\nlet f = db(str(s))\n", &[]);
    // Known only when the value flows: an untyped parameter is checked at evaluation.
    case(
        "fn pass(x) => db(x)\nlet f = pass(\"hunter2\")\n",
        &["type::mismatch"],
    );
    case("fn pass(x) => db(x)\nlet f = pass(secret(\"pw\"))\n", &[]);
    // A secret is still a string where one is wanted, and still deferred.
    case(
        "let f = file(path = \"/a\", content = secret(\"pw\"), target = h)\n",
        &[],
    );
    case(
        "let s: secret = secret(\"a\")\nlet n = if s == \"x\" { 1 } else { 2 }\n",
        &["type::deferred"],
    );
}

/// A secret parameter is set by naming a secret, never by its value, which the error does
/// not repeat.
#[test]
fn secret_parameters_take_a_secret_name_only() {
    let src = "param pw: secret = secret(\"pw\")\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet f = file(path = \"/etc/db\", content = pw, target = h)\n";
    check_errors(&[("main.env", src)], &[], &[]);
    check_errors(&[("main.env", src)], &[("pw", "secret(\"other\")")], &[]);
    check_errors(
        &[("main.env", src)],
        &[("pw", "hunter2")],
        &["param::secret-value"],
    );
    check_errors(
        &[("main.env", src)],
        &[("pw", "\"hunter2\"")],
        &["param::secret-value"],
    );
}

/// `manifest`: the object its attributes stand for, checked against the Kubernetes API
/// schema; each problem at the field written wrong, with "did you mean".
#[test]
fn manifests_are_checked_against_the_api_schema() {
    // Each diagnostic as `code line:col: title (help)`, the position its primary label's.
    let check = |src: &str, expected: &[&str]| {
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src)]),
            &CompileOptions::default(),
        );
        let got: Vec<String> = c
            .diagnostics
            .iter()
            .map(|d| {
                let l = &d.labels[0];
                let (line, col) = c.sources.line_col(l.file, l.span.start as usize);
                format!(
                    "{} {line}:{col}: {} ({})",
                    d.code,
                    d.title,
                    d.help.as_deref().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(got, expected, "{src}");
        c.graph
    };
    let deployment = |spec: &str| {
        format!(
            "let web = manifest(\n  api_version = \"apps/v1\",\n  kind = \"Deployment\",\n  name = \"web\",\n  body = {{ spec = {spec} }},\n)\n"
        )
    };
    let g = check(
        &deployment("{ replicas = 2, selector = { matchLabels = { app = \"web\" } }, template = { metadata = { labels = { app = \"web\" } }, spec = { containers = [{ name = \"web\", image = \"nginx:1.27\" }] } } }"),
        &[],
    )
    .unwrap();
    // Each field is the schema's, but the selector does not select the template's pods:
    // the API server refuses it, so `check` does, at the label selected.
    check(
        &deployment("{ replicas = 2, selector = { matchLabels = { app = \"web\" } }, template = { spec = { containers = [{ name = \"web\", image = \"nginx:1.27\" }] } } }"),
        &["eval::manifest-schema 5:70: Deployment `web`: selects `app` = \"web\", but the pod template's labels (`spec.template.metadata.labels`) have no `app` (Kubernetes refuses a Deployment whose selector does not select its own pods: give the pod template the label, or select on one it has)"],
    );
    let names: Vec<String> = g.nodes().map(|n| n.name.to_string()).collect();
    assert_eq!(names, ["default/Deployment/web"]);
    // Every problem, each where it was written.
    check(
        &deployment("{\n    replica = 2,\n    selector = { matchLabels = { app = 3 } },\n    template = { spec = { containers = [{ image = \"nginx\" }] } },\n  }"),
        &[
            "eval::manifest-schema 6:5: Deployment `web`: unknown field `replica` (did you mean `replicas`?)",
            "eval::manifest-schema 7:40: Deployment `web`: expected a string, found an int ()",
            "eval::manifest-schema 8:41: Deployment `web`: item 0 needs `name` (add `name = …`)",
        ],
    );
    // Through a function: the record is still where it was written.
    check(
        "fn app(spec) => manifest(api_version = \"v1\", kind = \"Service\", name = \"web\", body = { spec = spec })\nlet s = app({ ports = [{ port = 80, protocl = \"TCP\" }] })\n",
        &["eval::manifest-schema 2:37: Service `web`: unknown field `protocl` (did you mean `protocol`?)"],
    );
    // Kinds: a typo in one, a kind in another group, a cluster-wide one with a namespace.
    check(
        "let m = manifest(api_version = \"apps/v1\", kind = \"Deploymnet\", name = \"web\")\n",
        &["eval::manifest-schema 1:50: Deploymnet `web`: `apps/v1` has no kind `Deploymnet` (did you mean `Deployment`?)"],
    );
    check(
        "let m = manifest(api_version = \"v1\", kind = \"Namespace\", name = \"web\", namespace = \"x\")\n",
        &["eval::manifest-schema 1:84: Namespace `web` is cluster-wide: it has no namespace (drop `namespace`)"],
    );
    // A custom resource is written as given.
    let g = check(
        "let c = manifest(api_version = \"cert-manager.io/v1\", kind = \"Certificate\", name = \"web\", namespace = \"web\", body = { spec = { anything = 1 } })\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        g.nodes().next().unwrap().name.as_ref(),
        "web/Certificate/web"
    );
    // What an object cannot hold, and what the body cannot set.
    check(
        "let m = manifest(api_version = \"v1\", kind = \"ConfigMap\", name = \"c\", body = { metadata = {} })\n",
        &["eval::manifest-schema 1:77: ConfigMap `c`: `metadata` in its body (give it with the manifest's own attributes: name, namespace, labels and annotations)"],
    );
    check(
        "let m = manifest(api_version = \"v1\", kind = \"ConfigMap\", name = \"c\", body = { data = { pw = secret(\"pw\") } })\n",
        &["eval::exposed-secret 1:77: a secret in `body` of ConfigMap `c` (keep the secret out of the manifest: create the Kubernetes Secret from your secret store, and refer to it by name (`secretKeyRef`))"],
    );
    // A deferred value stands where a scalar may.
    check(
        "let v = vm(name = \"db\", image = image(name = \"i\"))\nlet m = manifest(api_version = \"v1\", kind = \"ConfigMap\", name = \"c\", body = { data = { db = v.address } })\n",
        &[],
    );
}

/// `std/k8s`: every constructor builds an object the API schema accepts, and its record
/// types catch a misspelt setting where it is written, before any schema is consulted.
#[test]
fn std_k8s_constructors_build_valid_objects() {
    let src = r#"import "std/k8s"
let shop = k8s.meta("shop", labels = { team = "shop" })
let objects = [
  k8s.namespace(shop),
  k8s.deployment(shop, "web", { image = "nginx:1.27", replicas = 2, port = 80, env = { A = "1" }, env_from = ["web"], limits = { memory = "256Mi" }, service_account = "web" }),
  k8s.stateful_set(shop, "db", { image = "postgres:16", port = 5432 }, 10GiB, "/var/lib/postgresql/data"),
  k8s.service(shop, "web", [{ port = 80, name = "http" }, { port = 443, target_port = 8443 }]),
  k8s.service(shop, "db", [{ port = 5432 }], headless = true),
  k8s.config_map(shop, "web", { "app.conf" = "listen 80;\n" }),
  k8s.ingress(shop, "web", "shop.example.com", "web", 80, class = "nginx"),
  k8s.service_account(shop, "web"),
  k8s.role(shop, "reader", [{ resources = ["pods"], verbs = ["get", "list"] }]),
  k8s.role_binding(shop, "reader", "reader", ["web"]),
  k8s.volume_claim(shop, "data", 1GiB, class = "fast"),
  k8s.cron_job(shop, "backup", "0 3 * * *", { image = "busybox", command = ["sh", "-c", "echo"] }),
  k8s.object(shop, "policy/v1", "PodDisruptionBudget", "web", body = { spec = { minAvailable = 1 } }),
]
"#;
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let names: Vec<String> = c
        .graph
        .unwrap()
        .nodes()
        .map(|n| n.name.to_string())
        .collect();
    assert_eq!(names.len(), 13, "{names:?}");
    assert!(
        names.contains(&"Namespace/shop".to_string())
            && names.contains(&"shop/Service/web".to_string()),
        "{names:?}"
    );
    check_errors(
        &[("main.env", "import \"std/k8s\"\nlet w = k8s.deployment(k8s.meta(\"shop\"), \"web\", { image = \"nginx\", replica = 2 })\n")],
        &[],
        &["type::unknown-field"],
    );
}

/// From a new user's ten mistakes (issue 18): the key of an unknown field, a missing
/// import named as such, keywords as field names.
#[test]
fn diagnostics_that_point_at_the_mistake() {
    let first = |src: &str| {
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src)]),
            &CompileOptions::default(),
        );
        let d = c
            .diagnostics
            .first()
            .unwrap_or_else(|| panic!("no diagnostic for {src}"));
        let l = &d.labels[0];
        (
            d.code,
            src[l.span.range()].to_string(),
            d.help.clone().unwrap_or_default(),
        )
    };
    // The unknown key, also inside a nested literal and in a function's argument.
    assert_eq!(
        first(
            "type Db = { name: str, port: int = 5432 }\nlet d: Db = { name = \"x\", prot = 1 }\n"
        ),
        (
            "type::unknown-field",
            "prot".into(),
            "did you mean `port`?".into()
        )
    );
    assert_eq!(
        first("type P = { port: int }\ntype S = { name: str, ports: list[P] }\nfn s(x: S) => x\nlet v = s({ name = \"a\", ports = [{ prot = 1 }] })\n").1,
        "prot"
    );
    // A module of the standard library used without its import.
    assert_eq!(
        first(
            "let h = host(name = \"h\", address = \"192.0.2.1\")\nlet f = files.lines([\"a\"])\n"
        )
        .2,
        "`files` is a module of the standard library: add `import \"std/files\"`"
    );
    // An item that did not parse is reported once: its uses are not unknown names too.
    check_errors(
        &[("main.env", "fn f(x: int -> int => x\nlet y = f(1)\n")],
        &[],
        &["parse::unexpected-token"],
    );
    // Keywords are field names where nothing else can stand.
    check(
        "let unit = { type = \"oneshot\", for = \"web\" }\noutput t = unit.type",
        r#"{"t": "oneshot"}"#,
    );
}

/// `stack("core.env")`: a record of the other environment's outputs that can cross (text,
/// numbers, booleans), each deferred to one `stack` node named by the file; what it reads
/// and their types are the node's attributes. Mistakes are named where they are written.
#[test]
fn stack_references_read_typed_outputs_of_another_environment() {
    let core = "param size: int = 3\nlet v = vm(name = \"db-0\", image = image(name = \"i\"))\noutput address = v.address\noutput port = v.port\noutput replicas = size\noutput tls = true\noutput names = [\"a\"]\n";
    let app = "let core = stack(\"core.env\")\nlet again = stack(\"./core.env\")\noutput url = \"pg://${core.address}:${again.port}\"\noutput n = core.replicas\n";
    let c = compile(
        "app.env",
        &MemoryLoader::new([("app.env", app), ("core.env", core)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let g = c.graph.unwrap();
    // One node for both references, none of core's own.
    let nodes: Vec<(&str, &str)> = g.nodes().map(|n| (n.kind.name(), &*n.name)).collect();
    assert_eq!(nodes, [("stack", "core.env")]);
    let node = g.nodes().next().unwrap();
    assert_eq!(
        value_json(&node.attrs["outputs"]),
        serde_json::json!({"address": "str", "names": ["str"], "port": "int", "replicas": "int", "tls": "bool"})
    );
    let id = node.id.hex();
    let deferred = |out: &str| serde_json::json!({"deferred": {"name": "core.env", "node": id, "output": out}});
    let outputs: BTreeMap<&str, serde_json::Value> = g
        .outputs
        .iter()
        .map(|(k, v)| (&**k, value_json(v)))
        .collect();
    assert_eq!(
        outputs["url"],
        serde_json::json!({"interpolate": ["pg://", deferred("address"), ":", deferred("port")]})
    );
    assert_eq!(outputs["n"], deferred("replicas"));

    let with_core = |main: &'static str| vec![("main.env", main), ("core.env", core)];
    // An output core does not have.
    check_errors(
        &with_core(
            "let core = stack(\"core.env\")\noutput a = core.adress\noutput b = core.names\n",
        ),
        &[],
        &["type::unknown-field"],
    );
    // Deferred: known only at deploy time.
    check_errors(
        &with_core("let core = stack(\"core.env\")\noutput a = if core.tls { 1 } else { 2 }\n"),
        &[],
        &["type::deferred"],
    );
    check_errors(
        &with_core("let f = \"core.env\"\nlet core = stack(f)\nfn g() => stack(\"core.env\")\n"),
        &[],
        &["type::stack-placement", "type::stack-placement"],
    );
    check_errors(
        &with_core("let c = stack(\"nope.env\")\nlet d = stack(\"../up.env\")\nlet e = stack(\"main.env\")\n"),
        &[],
        &["load::stack", "load::bad-stack-path", "load::stack"],
    );
    check_errors(
        &[
            ("main.env", "let core = stack(\"core.env\")\n"),
            ("core.env", "output a = 1 +\n"),
        ],
        &[],
        &["load::stack"],
    );
    // Environments that reference each other are typed: each reads the other's state.
    let c = compile(
        "a.env",
        &MemoryLoader::new([
            (
                "a.env",
                "let b = stack(\"b.env\")\noutput x = \"a\"\noutput y = b.z\n",
            ),
            ("b.env", "let a = stack(\"a.env\")\noutput z = a.x\n"),
        ]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
}

/// Lists and records are data: they cross a stack reference typed, a list whole (one
/// deferred list), a record field by field (`core.db.host` reads output `db.host`), nested
/// as deep as they are. What is not data (a node, a function) or is secret does not cross,
/// and reading it says why, not that there is no such field.
#[test]
fn lists_and_records_cross_a_stack_reference() {
    let core = "let v = vm(name = \"db-0\", image = image(name = \"i\"))\n\
        output subnets = [\"10.0.1.0/24\", \"10.0.2.0/24\"]\n\
        output db = { host = v.address, port = 5432, users = [{ name = \"app\", admin = false }] }\n\
        output machine = v\n\
        fn twice(x: int) -> int => x * 2\n\
        output double = twice\n";
    let app = "let core = stack(\"core.env\")\noutput s = core.subnets\noutput h = core.db.host\noutput u = core.db.users\noutput db = core.db\n";
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", app), ("core.env", core)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let g = c.graph.unwrap();
    let node = g.nodes().next().unwrap();
    assert_eq!(
        value_json(&node.attrs["outputs"]),
        serde_json::json!({
            "db": {"host": "str", "port": "int", "users": [{"admin": "bool", "name": "str"}]},
            "subnets": ["str"],
        })
    );
    let id = node.id.hex();
    let deferred = |out: &str| serde_json::json!({"deferred": {"name": "core.env", "node": id, "output": out}});
    let outputs: BTreeMap<&str, serde_json::Value> = g
        .outputs
        .iter()
        .map(|(k, v)| (&**k, value_json(v)))
        .collect();
    assert_eq!(outputs["s"], deferred("subnets"));
    assert_eq!(outputs["h"], deferred("db.host"));
    assert_eq!(outputs["u"], deferred("db.users"));
    assert_eq!(
        outputs["db"],
        serde_json::json!({"host": deferred("db.host"), "port": deferred("db.port"), "users": deferred("db.users")})
    );

    let with_core = |main: &'static str| vec![("main.env", main), ("core.env", core)];
    let cases: &[(&str, &[&str])] = &[
        // Typed: a list of text is not a number, a record's field is its own type.
        (
            "output a = core.subnets + 1\n",
            &["type::deferred", "type::bad-operands"],
        ),
        ("output a = core.db.nope\n", &["type::unknown-field"]),
        // Not data: said so, naming the output.
        ("output a = core.machine\n", &["type::stack-output"]),
        ("output a = core.double\n", &["type::stack-output"]),
        ("output a = core.nope\n", &["type::unknown-field"]),
    ];
    for (src, expected) in cases {
        let main = format!("let core = stack(\"core.env\")\n{src}");
        let files = with_core(Box::leak(main.into_boxed_str()));
        check_errors(&files, &[], expected);
    }
}

/// The project root bounds paths, not the root file's directory: with the root file in
/// `app/` below it, `../network/core.env` and `../lib/x.env` are files of the project, named
/// relative to the root file's directory (files under it as they always were); a path that
/// leaves the project root is refused.
#[test]
fn paths_go_up_to_the_project_root() {
    let project = envc_compiler::ProjectRoot {
        base: vec!["app".into()],
        shown: "/p".into(),
        found_by: envc_compiler::RootFoundBy::EnvcToml,
    };
    let compile_in = |files: &[(&str, &str)]| {
        let mut loader = MemoryLoader::new(files.iter().copied());
        loader.project = project.clone();
        compile("prod.env", &loader, &CompileOptions::default())
    };
    let c = compile_in(&[
        (
            "prod.env",
            "import \"../lib/x.env\"\nimport \"./local.env\"\nlet core = stack(\"../network/core.env\")\noutput a = core.port + 0\noutput b = x.name\noutput c = local.n\n",
        ),
        ("local.env", "let n = 1\n"),
        ("../lib/x.env", "import \"./y.env\"\nlet name = y.name\n"),
        ("../lib/y.env", "let name = \"y\"\n"),
        (
            "../network/core.env",
            "import \"../lib/x.env\"\noutput port = 5432\noutput name = x.name\n",
        ),
    ]);
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["type::deferred"], "{:#?}", c.diagnostics);
    let c = compile_in(&[
        (
            "prod.env",
            "import \"../lib/x.env\"\nlet core = stack(\"../network/core.env\")\noutput a = core.port\noutput b = x.name\n",
        ),
        ("../lib/x.env", "let name = \"x\"\n"),
        ("../network/core.env", "output port = 5432\n"),
    ]);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let g = c.graph.unwrap();
    let nodes: Vec<(&str, &str)> = g.nodes().map(|n| (n.kind.name(), &*n.name)).collect();
    assert_eq!(nodes, [("stack", "../network/core.env")]);
    let sources: Vec<&str> = c.sources.files.iter().map(|f| &*f.name).collect();
    assert_eq!(sources, ["prod.env", "../lib/x.env"]);

    // Leaving the project root, from the root file and from a file beside it; a reference
    // back to the root file through `..` is the root file.
    let cases: &[(&str, &[&str])] = &[
        ("import \"../../x.env\"\n", &["load::outside-project"]),
        (
            "let c = stack(\"../../x.env\")\n",
            &["load::bad-stack-path"],
        ),
        ("let c = stack(\"../app/prod.env\")\n", &["load::stack"]),
        ("import \"../lib/up.env\"\n", &["load::outside-project"]),
    ];
    for (src, expected) in cases {
        let c = compile_in(&[
            ("prod.env", src),
            ("../lib/up.env", "import \"../../x.env\"\n"),
        ]);
        let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(&codes, expected, "{src}\n{:#?}", c.diagnostics);
    }
    // Without a project root above it, the root file's directory bounds them, as before.
    let c = compile(
        "prod.env",
        &MemoryLoader::new([
            ("prod.env", "import \"../lib/x.env\"\n"),
            ("../lib/x.env", ""),
        ]),
        &CompileOptions::default(),
    );
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["load::outside-project"]);
}

/// `stack` names a constructor, not a type: what it gives is a record.
#[test]
fn stack_is_not_a_type() {
    check_errors(
        &[("main.env", "fn f(x: stack) -> int => 1\n")],
        &[],
        &["name::unknown-type"],
    );
}

/// Tags: the environment's defaults, then the module's, then the node's own; never part of
/// a node's id, except a manifest's, where they are its labels.
#[test]
fn tags_merge_defaults_and_stay_out_of_the_id_unless_materialized() {
    let lib = "default tags = { team = \"db\", tier = \"data\" }\nfn db(h: host) => package(name = \"postgresql\", target = h, tags = { tier = \"primary\" })\n";
    let main = |owner: &str| {
        format!(
            "import \"./lib.env\"\ndefault tags = {{ owner = \"{owner}\", team = \"platform\" }}\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet pg = lib.db(h)\nlet m = manifest(api_version = \"v1\", kind = \"ConfigMap\", name = \"app\", labels = {{ owner = \"app-team\" }})\noutput tags = [h.tags, pg.tags, m.tags]\noutput labels = m.labels\n"
        )
    };
    let build = |owner: &str| {
        let src = main(owner);
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src.as_str()), ("lib.env", lib)]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        c.graph.unwrap()
    };
    let (a, b) = (build("ops"), build("sre"));
    let out = |g: &envc_compiler::Graph, k: &str| {
        value_json(&g.outputs.iter().find(|(n, _)| &**n == k).unwrap().1)
    };
    assert_eq!(
        out(&a, "tags"),
        serde_json::json!([
            {"owner": "ops", "team": "platform"},
            {"owner": "ops", "team": "db", "tier": "primary"},
            {"owner": "ops", "team": "platform"},
        ])
    );
    // The manifest's own label wins over the tag of the same name.
    assert_eq!(
        out(&a, "labels"),
        serde_json::json!({"owner": "app-team", "team": "platform"})
    );
    let ids = |g: &envc_compiler::Graph| -> BTreeMap<String, String> {
        g.nodes()
            .map(|n| (format!("{}:{}", n.kind.name(), n.name), n.id.hex()))
            .collect()
    };
    let (ia, ib) = (ids(&a), ids(&b));
    assert_eq!(ia["host:h"], ib["host:h"]);
    assert_eq!(ia["package:postgresql"], ib["package:postgresql"]);
    // `owner` is not a tag the manifest materializes (its label wins): the same object.
    assert_eq!(
        ia["manifest:default/ConfigMap/app"],
        ib["manifest:default/ConfigMap/app"]
    );
    let json = a.to_json();
    assert!(
        json.contains(r#""tags":{"owner":"ops","team":"db","tier":"primary"}"#),
        "{json}"
    );

    // A tag the manifest does materialize moves its id, and only its.
    let lib2 = lib.replace("team = \"db\"", "team = \"dba\"");
    let src = main("ops");
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src.as_str()), ("lib.env", lib2.as_str())]),
        &CompileOptions::default(),
    );
    let ic = ids(&c.graph.unwrap());
    assert_eq!(ic["package:postgresql"], ia["package:postgresql"]);
    let src2 = src.replace("team = \"platform\"", "team = \"web\"");
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", src2.as_str()), ("lib.env", lib)]),
        &CompileOptions::default(),
    );
    let id2 = ids(&c.graph.unwrap());
    assert_ne!(
        id2["manifest:default/ConfigMap/app"],
        ia["manifest:default/ConfigMap/app"]
    );
    assert_eq!(id2["host:h"], ia["host:h"]);

    check_errors(
        &[(
            "main.env",
            "default tags = { a = \"1\" }\ndefault tags = { b = \"2\" }\n",
        )],
        &[],
        &["name::duplicate"],
    );
    check_errors(
        &[("main.env", "default tags = { a = 1 }\n")],
        &[],
        &["type::mismatch"],
    );
    check_errors(
        &[(
            "main.env",
            "let h = host(name = \"h\", address = \"192.0.2.1\")\ndefault tags = { a = h.name }\n",
        )],
        &[],
        &["eval::cycle"],
    );
}

/// Policies: over the evaluated graph, so nodes made anywhere (a component, the root, the
/// standard library) are judged alike; every node that breaks one is listed.
#[test]
fn policies_judge_every_node_of_the_graph() {
    let comp = "fn small(name: str) => vm(name = name, image = image(name = \"i\"), tags = { owner = \"db\" })\n";
    let policies = "policy \"vm-owner\": for n in nodes(\"vm\") => contains(n.tags, \"owner\") and n.memory <= 4GiB, \"${n.name} needs an owner and at most 4GiB\"\npolicy \"two-cpus\" advisory: for n in nodes(\"vm\") if n.cpus < 2 => false\n";
    let main = format!("import \"./comp.env\"\nlet a = comp.small(\"a\")\nlet rogue = vm(name = \"rogue\", image = image(name = \"i\"), memory = 16GiB)\n{policies}");
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", main.as_str()), ("comp.env", comp)]),
        &CompileOptions::default(),
    );
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["policy::violation"], "{:#?}", c.diagnostics);
    assert!(c.graph.is_none());
    let d = &c.diagnostics[0];
    assert_eq!(d.title, "vm `rogue` breaks policy \"vm-owner\"");
    let labels: Vec<&str> = d.labels.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        labels,
        [
            "mandatory policy",
            "vm `rogue`: rogue needs an owner and at most 4GiB"
        ]
    );
    // The advisory one warns, about both VMs.
    let warned: Vec<(&str, usize)> = c
        .warnings
        .iter()
        .map(|w| (w.title.as_str(), w.labels.len()))
        .collect();
    assert_eq!(warned, [("2 nodes break policy \"two-cpus\"", 3)]);

    // Kept: a graph, and no error.
    let fixed = main.replace(
        "memory = 16GiB",
        "memory = 2GiB, tags = { owner = \"ops\" }",
    );
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", fixed.as_str()), ("comp.env", comp)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    assert!(c.graph.is_some());

    // `nodes(…)` only in a policy; kinds are checked; a policy needs a `for`.
    check_errors(
        &[("main.env", "let all = nodes()\n")],
        &[],
        &["type::nodes-placement"],
    );
    check_errors(
        &[(
            "main.env",
            "policy \"p\": for n in nodes(\"vms\") => true\n",
        )],
        &[],
        &["type::unknown-kind"],
    );
    check_errors(
        &[("main.env", "policy \"p\": for n in nodes(\"vm\") => n.adress == \"\"\nlet v = vm(name = \"v\", image = image(name = \"i\"))\n")],
        &[],
        &["type::unknown-field"],
    );
    // A node made inside the standard library is shown at the user's call.
    let c = compile(
        "main.env",
        &MemoryLoader::new([(
            "main.env",
            "import \"std/debian\"\nlet m = debian.machine(\"db-0\")\npolicy \"no-vms\": for n in nodes(\"vm\") => false\n",
        )]),
        &CompileOptions::default(),
    );
    let d = &c.diagnostics[0];
    assert_eq!(d.code, "policy::violation");
    let main_file = 0;
    assert_eq!(d.labels[1].file, main_file, "{d:#?}");

    // A policy that binds no node is reported at its condition, with what it held.
    let c = compile(
        "main.env",
        &MemoryLoader::new([(
            "main.env",
            "let v = vm(name = \"v\", image = image(name = \"i\"), memory = 8GiB)\npolicy \"p\": for m in [for n in nodes(\"vm\") => n.memory] => m <= 4GiB\n",
        )]),
        &CompileOptions::default(),
    );
    let labels: Vec<&str> = c.diagnostics[0]
        .labels
        .iter()
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(labels, ["mandatory policy", "false for m = 8GiB"]);
    // A kind not written as a literal is checked when the policy runs; stack references
    // are not among `nodes()`.
    check_errors(
        &[(
            "main.env",
            "let k = \"vms\"\npolicy \"p\": for n in nodes(k) => true\n",
        )],
        &[],
        &["type::unknown-kind"],
    );
    check_errors(
        &[
            ("main.env", "let core = stack(\"core.env\")\npolicy \"owned\": for n in nodes() => contains(n.tags, \"owner\")\n"),
            ("core.env", "output x = 1\n"),
        ],
        &[],
        &[],
    );
}

#[test]
fn get_reads_a_field_or_its_default() {
    check(
        "let tags = { owner = \"ops\" }\noutput a = get(tags, \"owner\", \"\")\noutput b = get(tags, \"team\", \"none\")\noutput c = get({ n = 1 }, \"m\", 0) + 1\n",
        r#"{"a": "ops", "b": "none", "c": 1}"#,
    );
    // The issue's own policy, written with `get`: a node without an owner breaks it.
    check_errors(
        &[("main.env", "let v = vm(name = \"v\", image = image(name = \"i\"))\npolicy \"vm-owner\": for n in nodes(\"vm\") => get(n.tags, \"owner\", \"\") != \"\" and n.memory <= 4GiB\n")],
        &[],
        &["policy::violation"],
    );
}

/// A node the standard library makes takes the tags of the module that asked for it; a
/// tag is a known string; one node declared with two sets of tags is an error.
#[test]
fn tags_of_std_made_nodes_known_values_and_conflicts() {
    let comp = "import \"std/debian\"\ndefault tags = { owner = \"web\" }\nfn server(name: str) => debian.machine(name)\n";
    check_with(
        "import \"./comp.env\"\nlet s = comp.server(\"web-0\")\noutput tags = s.tags\n",
        &[("comp.env", comp)],
        r#"{"tags": {"owner": "web"}}"#,
    );
    check_errors(
        &[("main.env", "let v = vm(name = \"v\", image = image(name = \"i\"))\nlet h = host(name = \"h\", address = \"192.0.2.1\", tags = { at = v.address })\n")],
        &[],
        &["type::deferred"],
    );
    // Declared in two modules: the tags of both, whichever came first.
    for order in [
        "let a = image(name = \"i\")\nlet b = lib.img()\n",
        "let b = lib.img()\nlet a = image(name = \"i\")\n",
    ] {
        check_with(
            &format!("import \"./lib.env\"\ndefault tags = {{ env = \"prod\" }}\n{order}output t = [for n in [a, b] => n.tags]\npolicy \"p\": for n in nodes(\"image\") => n.tags[\"team\"] == \"web\"\n"),
            &[("lib.env", "default tags = { team = \"web\" }\nfn img() => image(name = \"i\")\n")],
            r#"{"t": [{"env": "prod"}, {"env": "prod", "team": "web"}]}"#,
        );
    }
    check_errors(
        &[
            ("main.env", "import \"./lib.env\"\ndefault tags = { owner = \"ops\" }\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet a = package(name = \"curl\", target = h)\nlet b = lib.curl(h)\n"),
            ("lib.env", "default tags = { owner = \"web\" }\nfn curl(h: host) => package(name = \"curl\", target = h)\n"),
        ],
        &[],
        &["graph::tag-conflict"],
    );
}

/// Every std constructor that builds a node takes `tags` and gives them to its nodes (the
/// docs say every node takes them; issue 35, item 8).
#[test]
fn std_constructors_pass_tags_through() {
    let t = "tags = { owner = \"data\" }";
    let want = r#"{"owner": "data"}"#;
    for (import, expr) in [
        ("std/debian", format!("debian.machine(\"db-0\", memory = 2GiB, {t})")),
        ("std/debian", format!("debian.os_image(\"img\", {t})")),
        ("std/debian", format!("debian.packages(host(name = \"h\", address = \"192.0.2.1\"), {{ curl = \"\" }}, {t})[0]")),
        ("std/debian", format!("debian.apt_source(host(name = \"h\", address = \"192.0.2.1\"), \"pg\", \"deb x y z\", {t})")),
        ("std/files", format!("files.template(host(name = \"h\", address = \"192.0.2.1\"), \"/etc/x\", path(\"x.j2\"), {t})")),
        ("std/k8s", format!("k8s.namespace(k8s.meta(\"shop\", {t}))")),
    ] {
        let src = format!("import \"{import}\"\noutput t = ({expr}).tags\n");
        check_with(&src, &[("x.j2", "x")], &format!(r#"{{"t": {want}}}"#));
    }
    let src = format!("import \"std/systemd\"\nlet u = systemd.unit(host(name = \"h\", address = \"192.0.2.1\"), {{ name = \"app\", description = \"d\", exec_start = \"/bin/app\" }}, {t})\noutput f = u.file.tags\noutput s = u.service.tags\n");
    check(&src, &format!(r#"{{"f": {want}, "s": {want}}}"#));
}
