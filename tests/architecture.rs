//! The shape of the house, kept by a test (as rust-analyzer's tidy tests keep theirs):
//! crates depend only on crates of a lower layer (docs/architecture.md), and inside each
//! crate no module imports, through any chain, a module that imports it back. A module's
//! floor is then well defined, and no import runs from a lower floor to a higher one.
//!
//! Imports are read from the source (`use crate::…`, `crate::…::` paths, `super::…`),
//! comments and `#[cfg(test)]` modules left out. A module may use its own folder's face
//! (`mod.rs`) and the crate root's re-exports, which are followed to the module that
//! defines the name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each workspace crate's folder and layer: a crate may depend only on crates of a
/// strictly lower layer.
const LAYERS: &[(&str, &str, u8)] = &[
    ("envc-ids", "ids", 0),
    ("envc-lang", "lang", 1),
    ("envc-aws", "aws", 1),
    ("envc-tfplugin", "tfplugin", 1),
    ("envc-k8s", "k8s", 2),
    ("envc-lockfiles", "lockfiles", 2),
    ("envc-compiler", "compiler", 3),
    ("envc-store", "store", 3),
    ("envc-ide", "ide", 4),
    ("envc-contract", "contract", 4),
    ("envc-kinds", "kinds", 5),
    ("envc-executor", "executor", 6),
    ("envc", ".", 7),
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

/// The leaves of a use tree (`a::{b, c::{D as E}, self}`): each as the path it names and
/// the name it is known by here.
fn use_leaves(tree: &str) -> Vec<(Vec<String>, String)> {
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let mut path = prefix.to_vec();
            path.extend(
                tree[..open]
                    .split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            let close = tree.rfind('}').unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let (mut depth, mut from) = (0usize, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&path, &inner[from..i], out);
                        from = i + 1;
                    }
                    _ => {}
                }
            }
            walk(&path, &inner[from..], out);
            return;
        }
        if tree.is_empty() {
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p, Some(a.trim())),
            None => (tree, None),
        };
        let mut full = prefix.to_vec();
        full.extend(path.split("::").map(str::trim).map(str::to_string));
        if full.last().is_some_and(|l| l == "self") {
            full.pop();
        }
        let name = alias.map(str::to_string).or_else(|| full.last().cloned());
        if let Some(name) = name {
            out.push((full, name));
        }
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

/// `pub use MODULE::…::Name` in the crate root: which module each re-exported name (by the
/// name it is exported as) comes from.
fn root_reexports(root: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code_of(root).split(';') {
        let Some(tree) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        for (path, name) in use_leaves(tree) {
            let module = match path.len() {
                0 => continue,
                1 => path[0].clone(),
                n => path[..n - 1].join("::"),
            };
            out.insert(name, module);
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
/// message is the type's `Display` (docs/architecture.md, "Errors are types").
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

/// Modules of `envc_executor` the CLI may name besides the crate root's re-exports, and
/// why each is better named whole than re-exported piece by piece.
const CLI_EXECUTOR_MODULES: &[(&str, &str)] = &[
    (
        "secrets",
        "`envc secret` edits the project's secret file: the file's codec (read, write, text, \
         keys, sources) is the module, and nothing else uses it",
    ),
    (
        "kustomize",
        "`envc render` writes a directory of objects as GitOps delivery does: one function \
         and the change it reports",
    ),
];

/// Each `envc_executor::…` path in `code` (use groups taken apart): `(line, path)`.
fn executor_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    const CRATE: &str = "envc_executor::";
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find(CRATE) {
        let at = from + k;
        from = at + CRATE.len();
        let preceded = code[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if preceded {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[from..];
        let tree = if rest.starts_with('{') {
            let mut depth = 0usize;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            &rest[..end]
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].trim_end_matches(':')
        };
        for (path, _) in use_leaves(tree) {
            out.push((line, path));
        }
    }
    out
}

/// The executor's public modules, from its crate root: its own `pub mod`s, and the modules
/// of the crates below it that it makes public under its name (`pub use envc_store::{…}`,
/// `pub use envc_kinds as kinds`).
fn executor_public_modules() -> Vec<String> {
    let root = std::fs::read_to_string(repo().join("executor/src/lib.rs")).unwrap();
    let code = code_of(&root);
    let mut modules: Vec<String> = code
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').trim().to_string())
        .collect();
    for item in code.split(';') {
        let Some(rest) = item.trim().strip_prefix("pub use envc_") else {
            continue;
        };
        if let Some((_, alias)) = rest.split_once(" as ") {
            modules.push(alias.trim().to_string());
        } else if let Some((_, list)) = rest.split_once("::{") {
            let names = list.trim_end_matches('}').split(',').map(str::trim);
            modules.extend(names.filter(|n| !n.is_empty()).map(str::to_string));
        }
    }
    modules
}

/// The CLI (`src/`) uses the executor through its curated API: the crate root's
/// re-exports (session, verify, reports, plain data), and the few modules named in
/// [`CLI_EXECUTOR_MODULES`]; not the scheduler, the transports or the node kinds.
#[test]
fn the_cli_uses_only_the_executors_curated_api() {
    let root = std::fs::read_to_string(repo().join("executor/src/lib.rs")).unwrap();
    let reexports = root_reexports(&root);
    let public = executor_public_modules();
    let mut wrong = Vec::new();
    for (module, why) in CLI_EXECUTOR_MODULES {
        assert!(!why.is_empty());
        if !public.contains(&module.to_string()) {
            wrong.push(format!(
                "CLI_EXECUTOR_MODULES names `{module}`, which executor/src/lib.rs does not make `pub`"
            ));
        }
    }
    for (file, code) in non_test_sources(&repo().join("src")) {
        for (line, path) in executor_paths(&code) {
            let Some(first) = path.first() else { continue };
            let allowed = reexports.contains_key(first)
                || CLI_EXECUTOR_MODULES.iter().any(|(m, _)| m == first);
            if !allowed {
                let rel = file
                    .strip_prefix(repo())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                wrong.push(format!("{rel}:{line}: envc_executor::{}", path.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the CLI reaches past the executor's API (re-export what it needs from executor/src/lib.rs, \
         or move the work into the session):\n{}",
        wrong.join("\n")
    );
}

/// Every `pub mod` of the executor is there for someone outside it: an integration test
/// (`tests/`, `executor/tests/`) that exercises it against real parts, or the CLI's short
/// list. Any other module is `pub(crate)`: `pub` is the boundary, not a default.
#[test]
fn the_executors_public_modules_have_users() {
    let mut used = BTreeSet::new();
    let mut stack = vec![repo().join("tests"), repo().join("executor/tests")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let code = without_comments_and_literals(&std::fs::read_to_string(&path).unwrap());
                for (_, p) in executor_paths(&code) {
                    used.extend(p.first().cloned());
                }
            }
        }
    }
    used.extend(CLI_EXECUTOR_MODULES.iter().map(|(m, _)| m.to_string()));
    let unused: Vec<String> = executor_public_modules()
        .into_iter()
        .filter(|m| !used.contains(m))
        .collect();
    assert!(
        unused.is_empty(),
        "`pub mod` with no user outside the executor (make it `pub(crate)`): {}",
        unused.join(", ")
    );
}

/// The path reader sees use groups, aliases and paths in expressions.
#[test]
fn executor_paths_are_read() {
    let code = "use envc_executor::{kustomize, verify::{compare::Verdict, self}, Spec as S};\n\
                let x = envc_executor::split_root(p);\nlet y = my_envc_executor::z;\n";
    let got: Vec<(usize, String)> = executor_paths(code)
        .into_iter()
        .map(|(l, p)| (l, p.join("::")))
        .collect();
    let want = [
        (1, "kustomize"),
        (1, "verify::compare::Verdict"),
        (1, "verify"),
        (1, "Spec"),
        (2, "split_root"),
    ];
    assert_eq!(
        got,
        want.map(|(l, p)| (l, p.to_string())).to_vec(),
        "{code}"
    );
    let exports = root_reexports(
        "pub use verify::stand_ins::{\n    complete as complete_stand_ins, read,\n};\npub use kinds::manifest::rendered as rendered_manifest;\n",
    );
    assert_eq!(exports["complete_stand_ins"], "verify::stand_ins");
    assert_eq!(exports["read"], "verify::stand_ins");
    assert_eq!(exports["rendered_manifest"], "kinds::manifest");
}

/// Every file in `tests/` is a module of the one integration-test binary (tests/main.rs,
/// `autotests = false`): a file not declared there would be neither compiled nor run, and
/// its tests would pass by not existing.
#[test]
fn every_test_file_is_a_module_of_the_test_binary() {
    let tests = repo().join("tests");
    let main = std::fs::read_to_string(tests.join("main.rs")).unwrap();
    let declared: BTreeSet<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .filter(|stem| stem != "main")
        .collect();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !declared.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "tests/{{{}}}.rs: not declared in tests/main.rs, so never compiled or run: add `mod NAME;` there",
        missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
    );
}

/// `cargo build` and `cargo test` resolve the same features for every dependency they share:
/// where a dev-dependency turns one more on, everything above that crate (the executor and
/// envc among them) is compiled twice in every CI run, minutes of it (issue 39). The fix is
/// to name the feature in envc's `[dependencies]`, as num-traits and zerocopy are.
#[test]
fn the_build_and_the_tests_resolve_the_same_features() {
    let tree = |edges: &str| -> BTreeMap<String, String> {
        let o = std::process::Command::new(env!("CARGO"))
            .current_dir(repo())
            .args([
                "tree",
                "--workspace",
                "--offline",
                "--locked",
                "--prefix",
                "none",
            ])
            .args(["--edges", edges, "--format", "{p}|{f}"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.trim_end_matches(" (*)").split_once('|'))
            .map(|(p, f)| (p.to_string(), f.to_string()))
            .collect()
    };
    let build = tree("no-dev");
    let tests = tree("normal,build,dev");
    let differing: Vec<String> = build
        .iter()
        .filter(|(p, f)| tests.get(*p).is_some_and(|t| t != *f))
        .map(|(p, f)| format!("{p}: built with [{f}], tested with [{}]", tests[p]))
        .collect();
    assert!(
        differing.is_empty(),
        "features the tests turn on and the build does not (name them in envc's [dependencies]):\n{}",
        differing.join("\n")
    );
}
