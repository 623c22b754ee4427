//! The shape of the house, kept by a test (as rust-analyzer's tidy tests keep theirs):
//! crates depend only on crates of a lower layer (docs/architecture.md), and inside each
//! crate no module imports, through any chain, a module that imports it back. A module's
//! floor is then well defined, and no import runs from a lower floor to a higher one.
//!
//! Imports are read from the source (`use crate::…`, `crate::…::` paths, `super::…`),
//! comments and `#[cfg(test)]` modules left out. A module may use its own folder's face
//! (`mod.rs`) and the crate root's re-exports, which are followed to the module that
//! defines the name.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each workspace crate's folder and layer: a crate may depend only on crates of a
/// strictly lower layer.
const LAYERS: &[(&str, &str, u8)] = &[
    ("envc-ids", "ids", 0),
    ("envc-lang", "lang", 1),
    ("envc-k8s", "k8s", 2),
    ("envc-lockfiles", "lockfiles", 2),
    ("envc-compiler", "compiler", 3),
    ("envc-ide", "ide", 4),
    ("envc-executor", "executor", 4),
    ("envc", ".", 5),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `envc-*` crates a manifest's `[dependencies]` names.
fn internal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some(name) = line.split(['=', '.', ' ']).next() {
                if name.starts_with("envc") {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let layer: BTreeMap<&str, u8> = LAYERS.iter().map(|(n, _, l)| (*n, *l)).collect();
    let mut wrong = Vec::new();
    for (name, dir, own) in LAYERS {
        let manifest = std::fs::read_to_string(repo().join(dir).join("Cargo.toml")).unwrap();
        for dep in internal_dependencies(&manifest) {
            match layer.get(dep.as_str()) {
                Some(l) if l < own => {}
                Some(l) => wrong.push(format!("{name} (layer {own}) depends on {dep} (layer {l})")),
                None => wrong.push(format!("{name} depends on {dep}, which has no layer here")),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_manifest_reader_sees_dependencies() {
    let deps = internal_dependencies(
        "[package]\nname = \"x\"\n[dependencies]\nenvc-ids.workspace = true\nenvc-lang = { path = \"../lang\" }\nserde = \"1\"\n[dev-dependencies]\nenvc-compiler.workspace = true\n",
    );
    assert_eq!(deps, ["envc-ids", "envc-lang"]);
}

/// Module path (`ops::exec`) → file, for every module of the crate at `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            let name = parts.join("::");
            if !matches!(name.as_str(), "lib" | "main") {
                out.insert(name, path);
            }
        }
    }
    out
}

/// The source with comments and a trailing `#[cfg(test)] mod …` left out.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths (`a::b::c`) a module names under `crate::`, `super::` resolved.
fn crate_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let parent: Vec<&str> = {
        let mut p: Vec<&str> = module.split("::").collect();
        p.pop();
        p
    };
    let ident = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| {
                p.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p| !p.is_empty())
            .collect()
    };
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let preceded = rest[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            let after = &rest[i + prefix.len()..];
            rest = after;
            if preceded {
                continue;
            }
            let mut base: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            if let Some(group) = after.strip_prefix('{') {
                // `use crate::{a::b, c}`: the first segment of each item.
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let p = ident(item.trim());
                    if !p.is_empty() {
                        paths.push(base.iter().cloned().chain(p).collect());
                    }
                }
            } else {
                base.extend(ident(after));
                paths.push(base);
            }
        }
    }
    paths
}

/// `pub use MODULE::…::{Names}` in the crate root: which module a re-exported name is from.
fn root_reexports(root: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in code_of(root).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let names = names.trim_end_matches(';');
        let names = names.rsplit("::").next().unwrap_or(names);
        for n in names.trim_matches(['{', '}']).split(',') {
            let n = n.split(" as ").last().unwrap_or(n).trim();
            if !n.is_empty() {
                out.insert(n.to_string(), module.to_string());
            }
        }
    }
    out
}

/// Module → the modules of the same crate it imports.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let root = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|f| std::fs::read_to_string(src.join(f)).ok())
        .unwrap_or_default();
    let reexports = root_reexports(&root);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let edges = graph.entry(module.clone()).or_default();
        for path in crate_paths(module, &code) {
            // The longest prefix of the path that is a module; a root re-export otherwise.
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|p| modules.contains_key(p))
                .or_else(|| path.first().and_then(|n| reexports.get(n)).cloned());
            let Some(target) = target else { continue };
            // A module may use its own folder's face and itself.
            let own_folder = module == &target || module.starts_with(&format!("{target}::"));
            if !own_folder {
                edges.insert(target);
            }
        }
    }
    graph
}

/// The import circles of a graph: strongly connected sets of more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn visit<'a>(
        g: &'a BTreeMap<String, BTreeSet<String>>,
        n: &'a str,
        seen: &mut BTreeSet<&'a str>,
        order: &mut Vec<&'a str>,
    ) {
        if !seen.insert(n) {
            return;
        }
        for m in g.get(n).into_iter().flatten() {
            visit(g, m, seen, order);
        }
        order.push(n);
    }
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for n in graph.keys() {
        visit(graph, n, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, bs) in graph {
        for b in bs {
            reversed.entry(b.clone()).or_default().insert(a.clone());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for n in order.into_iter().rev() {
        let mut component = Vec::new();
        visit(&reversed, n, &mut seen, &mut component);
        if component.len() > 1 {
            let mut c: Vec<String> = component.into_iter().map(str::to_string).collect();
            c.sort();
            out.push(c);
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    for (name, dir, _) in LAYERS {
        let graph = import_graph(&repo().join(dir).join("src"));
        for c in circles(&graph) {
            let ties: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            found.push(format!("{name}: {}", ties.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "import circles (move what ties them to a lower module):\n{}",
        found.join("\n")
    );
}

/// The reader and the circle finder themselves, on a crate made for the purpose: a test
/// that could not see a circle would keep nothing.
#[test]
fn a_circle_in_a_crate_is_found() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path();
    std::fs::create_dir_all(src.join("ops")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod store;\npub mod record;\npub use record::Facts;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("store.rs"),
        "// crate::plan is only a comment\nuse crate::{record::State, ops};\n",
    )
    .unwrap();
    std::fs::write(
        src.join("record.rs"),
        "pub struct Facts;\nfn f() { crate::plan::Action::Create; }\n",
    )
    .unwrap();
    std::fs::write(src.join("plan.rs"), "use crate::Facts;\n").unwrap();
    std::fs::write(src.join("ops/mod.rs"), "mod exec;\n").unwrap();
    std::fs::write(
        src.join("ops/exec.rs"),
        "use super::Applied;\n#[cfg(test)]\nmod tests { use crate::store::Store; }\n",
    )
    .unwrap();
    let graph = import_graph(src);
    let edges = |m: &str| graph[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(edges("store"), ["ops", "record"]);
    assert_eq!(edges("record"), ["plan"]);
    assert_eq!(
        edges("plan"),
        ["record"],
        "a root re-export leads to its module"
    );
    assert!(
        edges("ops::exec").is_empty(),
        "its folder's face, and tests, are not edges"
    );
    assert_eq!(
        circles(&graph),
        [vec!["plan".to_string(), "record".to_string()]]
    );
}

/// Rust source with comments and the text of string and char literals blanked (their
/// quotes kept), line breaks kept, so positions and line numbers stay those of the file.
fn without_comments_and_literals(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            out.push('"');
            i = j + 1;
            while i < b.len() {
                if b[i] == '"' && (0..hashes).all(|k| b.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(b[i]));
                i += 1;
            }
            out.push('"');
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&x) = b.get(i) {
                    out.push(blank(x));
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (b.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime.
            out.push_str("' '");
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The index just past the item starting at `from`: its `;`, or the `}` closing its body.
fn item_end(code: &[char], from: usize) -> usize {
    let mut depth = 0usize;
    let mut i = from;
    while i < code.len() {
        match code[i] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ';' if depth == 0 => return i + 1,
            '{' => {
                let mut braces = 0usize;
                while i < code.len() {
                    match code[i] {
                        '{' => braces += 1,
                        '}' => {
                            braces -= 1;
                            if braces == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The code of a file without its `#[cfg(test)]` items (blanked, lines kept), and the
/// names of the modules it declares test-only (`#[cfg(test)] mod tests;`).
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let mut chars: Vec<char> = code.chars().collect();
    let mut test_modules = Vec::new();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= chars.len() {
        if chars[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let end = item_end(&chars, i + marker.len());
        let item: String = chars[i + marker.len()..end].iter().collect();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        if item.trim_end().ends_with(';') {
            if let Some(k) = words.iter().position(|w| *w == "mod") {
                if let Some(name) = words.get(k + 1) {
                    test_modules.push(name.to_string());
                }
            }
        }
        for c in &mut chars[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    (chars.into_iter().collect(), test_modules)
}

/// The generic arguments of each `Result<…>` in a type, split at their top-level commas.
fn result_arguments(ty: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = ty.chars().collect();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = ty[from..].find("Result<") {
        let start = from + k;
        from = start + "Result<".len();
        let preceded = ty[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if preceded {
            continue;
        }
        let mut depth = 1usize;
        let mut args = vec![String::new()];
        let open = ty[..from].chars().count();
        for (n, &c) in chars[open..].iter().enumerate() {
            let prev = if open + n > 0 {
                chars[open + n - 1]
            } else {
                ' '
            };
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if prev == '-' => {}
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 1 => {
                    args.push(String::new());
                    continue;
                }
                _ => {}
            }
            if depth == 0 {
                break;
            }
            if let Some(a) = args.last_mut() {
                a.push(c);
            }
        }
        out.push(args.into_iter().map(|a| a.trim().to_string()).collect());
    }
    out
}

/// `(line, fn name)` of each function in `code` whose return type holds a
/// `Result<_, String>`, and of each `type Error = String` (a `TryFrom`'s error).
fn string_errors(code: &str) -> Vec<(usize, String)> {
    let text = code;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_of = |byte: usize| text[..byte].matches('\n').count() + 1;
    let is_string = |t: &str| matches!(t, "String" | "std::string::String" | "string::String");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = text[from..].find("fn ") {
        let at = from + k;
        from = at + 3;
        if text[..at].chars().last().is_some_and(is_ident) {
            continue;
        }
        let name: String = text[from..]
            .trim_start()
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        // The signature: up to the body or the `;` outside any brackets.
        let mut depth = 0usize;
        let mut end = from;
        let mut arrow = None;
        let rest: Vec<char> = text[from..].chars().collect();
        let mut byte = from;
        for (n, &c) in rest.iter().enumerate() {
            let next = rest.get(n + 1).copied();
            match c {
                '(' | '[' | '<' => depth += 1,
                '-' if next == Some('>') && depth == 0 && arrow.is_none() => {
                    arrow = Some(byte + 2);
                }
                '>' if n > 0 && rest[n - 1] == '-' => {}
                ')' | ']' | '>' => depth = depth.saturating_sub(1),
                '{' | ';' if depth == 0 => {
                    end = byte;
                    break;
                }
                _ => {}
            }
            byte += c.len_utf8();
            end = byte;
        }
        let Some(arrow) = arrow.filter(|a| *a <= end) else {
            continue;
        };
        let ret = &text[arrow..end];
        let ret = match ret.find(" where ").or_else(|| ret.find("\nwhere")) {
            Some(w) => &ret[..w],
            None => ret,
        };
        if result_arguments(ret)
            .iter()
            .any(|args| args.len() == 2 && is_string(&args[1]))
        {
            out.push((line_of(at), name));
        }
    }
    let mut from = 0;
    while let Some(k) = text[from..].find("type Error") {
        let at = from + k;
        from = at + 1;
        let rest = text[at + "type Error".len()..].trim_start();
        if let Some(ty) = rest.strip_prefix('=') {
            let ty = ty.split(';').next().unwrap_or("").trim();
            if is_string(ty) {
                out.push((line_of(at), "type Error".to_string()));
            }
        }
    }
    out
}

/// Every `.rs` file of a crate's `src` that is not a test module: `(path, code without
/// comments, literals and test items)`.
fn non_test_sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files: Vec<PathBuf> = modules(src).into_values().collect();
    for root in ["lib.rs", "main.rs"] {
        if src.join(root).is_file() {
            files.push(src.join(root));
        }
    }
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut out = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (code, tests) = without_test_items(&without_comments_and_literals(&text));
        // `foo.rs`'s modules live in `foo/`; `mod.rs`', `lib.rs`' and `main.rs`' beside it.
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = file.parent().unwrap();
        let children = match stem.as_str() {
            "mod" | "lib" | "main" => dir.to_path_buf(),
            _ => dir.join(&stem),
        };
        for t in tests {
            test_files.insert(children.join(format!("{t}.rs")));
            test_files.insert(children.join(&t).join("mod.rs"));
        }
        out.push((file.clone(), code));
    }
    out.retain(|(f, _)| {
        !test_files.iter().any(|t| {
            f == t
                || t.parent()
                    .is_some_and(|d| t.ends_with("mod.rs") && f.starts_with(d))
        })
    });
    out
}

/// Errors are types: a caller decides from a kind, not by reading a message, and the
/// message is the type's `Display` (docs/architecture.md, "Errors").
#[test]
fn no_function_returns_a_string_error() {
    let mut found = Vec::new();
    for (name, dir, _) in LAYERS {
        let src = repo().join(dir).join("src");
        for (file, code) in non_test_sources(&src) {
            for (line, f) in string_errors(&code) {
                let rel = file
                    .strip_prefix(repo())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                found.push(format!("{name}: {rel}:{line}: {f}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`Result<_, String>` outside tests (give each an error type whose Display is the message):\n{}",
        found.join("\n")
    );
}

/// The reader sees string errors where they are, and nothing else: not a map of strings,
/// not a comment, a literal or a test.
#[test]
fn string_errors_are_found() {
    let code = r##"
fn a() -> Result<(), String> { todo!() }
// fn comment() -> Result<(), String>
fn b(x: &str) -> Result<BTreeMap<String, String>, Error> { let s = "fn c() -> Result<u8, String>"; }
pub async fn d<T: Into<u8>>(x: Vec<(u8, u8)>) -> BoxFuture<'static, Result<Option<Vec<u8>>, String>>
where
    T: Copy;
fn e() -> Result<Box<dyn Fn() -> u8>, std::string::String> { let c = '{'; }
fn f() -> io::Result<String> {}
impl TryFrom<String> for X {
    type Error = String;
}
#[cfg(test)]
mod tests {
    fn g() -> Result<(), String> {}
}
#[cfg(test)]
mod more;
fn h() -> Result<(), Box<dyn std::error::Error>> { r#"fn i() -> Result<(), String>"# }
"##;
    let clean = without_comments_and_literals(code);
    let (code, tests) = without_test_items(&clean);
    let found: Vec<String> = string_errors(&code)
        .into_iter()
        .map(|(line, name)| format!("{line} {name}"))
        .collect();
    assert_eq!(found, ["2 a", "5 d", "8 e", "11 type Error"]);
    assert_eq!(tests, ["more"]);
}
