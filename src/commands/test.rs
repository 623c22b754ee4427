//! `envc test [PATH…]`: the `test` items of every `*_test.env` under the paths, each run in
//! isolation (its own compile of the environment it names, with its parameters and mocks)
//! and in parallel (rayon's pool). No store, no targets, no network: the compiler's
//! `testing` module does the work, this module finds the files, renders templates with the
//! executor's engine, keeps snapshots and reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use envc_compiler::testing::{self, RenderFailure, TestRequest, TestWorld};
use envc_executor::{split_root, Beneath, FsLoader};

use super::Ui;
use crate::exit::{Exit, Failure, Outcome};

/// What a test file is called.
pub const SUFFIX: &str = "_test.env";
/// Where a test file's snapshots are, beside it.
pub const SNAPSHOTS: &str = "snapshots";

/// How deep, and through how many directories, the search goes.
const MAX_DEPTH: usize = 32;
const MAX_FILES: usize = 10_000;

pub struct TestArgs {
    pub paths: Vec<PathBuf>,
    pub filter: Option<String>,
    pub json: bool,
    pub junit: Option<PathBuf>,
    pub update: bool,
}

/// One test found: its file and place in it.
struct Case {
    file: PathBuf,
    text: String,
    index: usize,
    name: String,
    /// `env`, resolved against the test file's directory (the test file when not given).
    env: PathBuf,
    policies: Vec<PathBuf>,
}

/// What a test came to, in plain data (the compiler's values stay on the worker).
struct Outcome1 {
    file: String,
    name: String,
    held: usize,
    failures: Vec<Shown>,
    /// Snapshots to write: the test file's directory, the snapshot's path beneath it
    /// (`snapshots/NAME`) and its content.
    snapshots: Vec<(PathBuf, String, String)>,
    duration: Duration,
}

struct Shown {
    code: String,
    title: String,
    message: String,
    location: Option<String>,
    left: Option<String>,
    right: Option<String>,
    op: Option<String>,
    /// The diagnostic as the terminal shows it.
    rendered: String,
}

pub fn test(args: &TestArgs, ui: Ui) -> Outcome {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for p in &paths {
        find(p, &mut files)?;
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Failure::Input(format!(
            "no test files (`*{SUFFIX}`) under {}\n  hint: a test file holds `test \"NAME\" {{ … }}` items (see docs/language.md, \"Tests\")",
            paths
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut cases = Vec::new();
    for f in &files {
        cases.extend(cases_of(f, ui)?);
    }
    if let Some(filter) = &args.filter {
        cases.retain(|c| {
            c.name.contains(filter.as_str()) || shown_file(&c.file).contains(filter.as_str())
        });
    }

    let results: Vec<Mutex<Option<Outcome1>>> = cases.iter().map(|_| Mutex::new(None)).collect();
    let pool = rayon_core::ThreadPoolBuilder::new()
        // As the main thread's: nesting is bounded by the parser and evaluator, not the stack.
        .stack_size(512 << 20)
        .build()
        .map_err(|e| Failure::Input(format!("cannot start the test threads: {e}")))?;
    pool.scope(|s| {
        for (case, slot) in cases.iter().zip(&results) {
            s.spawn(move |_| {
                let out = run_one(case, args.update, ui);
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(out);
                }
            });
        }
    });
    let outcomes: Vec<Outcome1> = results
        .into_iter()
        .filter_map(|m| m.into_inner().ok().flatten())
        .collect();
    if outcomes.len() != cases.len() {
        return Err(Failure::Input(
            "a test stopped without a result (a bug in envc)".into(),
        ));
    }

    let mut written = 0;
    for o in &outcomes {
        for (dir, rel, text) in &o.snapshots {
            // Whole or not at all, and never through a link out of the test's directory.
            Beneath::open(dir, false)
                .and_then(|tests| tests.write(rel, text.as_bytes()))
                .map_err(|e| {
                    Failure::Input(format!(
                        "cannot write the snapshot `{}`: {e}",
                        dir.join(rel).display()
                    ))
                })?;
            written += 1;
        }
    }

    let passed = outcomes.iter().filter(|o| o.failures.is_empty()).count();
    let failed = outcomes.len() - passed;
    if args.json {
        for o in &outcomes {
            crate::output::json_line(json_of(o));
        }
        crate::output::json_line(serde_json::json!({
            "type": "summary",
            "passed": passed,
            "failed": failed,
            "snapshots_written": written,
        }));
    } else {
        for o in &outcomes {
            let verdict = if o.failures.is_empty() {
                "ok  "
            } else {
                "FAIL"
            };
            crate::output::line(format!("{verdict} {} :: {}", o.file, o.name));
        }
        for o in outcomes.iter().filter(|o| !o.failures.is_empty()) {
            crate::output::errln!("\n---- {} :: {} ----", o.file, o.name);
            for f in &o.failures {
                crate::output::eprint_rendered(&f.rendered);
            }
        }
        if written > 0 {
            crate::output::line(format!(
                "wrote {written} snapshot{}",
                if written == 1 { "" } else { "s" }
            ));
        }
    }
    let summary = format!("{passed} passed, {failed} failed");
    if args.json {
        crate::output::errln!("{summary}");
    } else {
        crate::output::line(&summary);
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, junit(&outcomes))
            .map_err(|e| Failure::Input(format!("cannot write `{}`: {e}", path.display())))?;
    }
    if failed > 0 {
        // Failed tests are the input's problem, as a failed `check` is: exit 1.
        return Err(Failure::Reported(Exit::Input));
    }
    Ok(Exit::Ok)
}

/// `*_test.env` files at or under `p` (a file named directly is taken whatever its name).
fn find(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), Failure> {
    let meta = std::fs::metadata(p)
        .map_err(|e| Failure::Input(format!("cannot read `{}`: {e}", p.display())))?;
    if meta.is_file() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut dirs = vec![(p.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Failure::Input(format!("cannot read `{}`: {e}", dir.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            // Hidden directories (`.git`, `.envc`) and build output hold no tests.
            if kind.is_dir() && !name.starts_with('.') && name != "target" && depth < MAX_DEPTH {
                dirs.push((entry.path(), depth + 1));
            } else if kind.is_file() && name.ends_with(SUFFIX) {
                out.push(entry.path());
                if out.len() > MAX_FILES {
                    return Err(Failure::Input(format!(
                        "more than {MAX_FILES} test files under `{}`",
                        p.display()
                    )));
                }
            }
        }
    }
    Ok(())
}

fn shown_file(p: &Path) -> String {
    let s = p.display().to_string();
    s.strip_prefix("./").map_or(s.clone(), str::to_string)
}

/// The directory a test file is in (`.` for a bare file name).
fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A snapshot's path beneath its test file's directory.
fn snapshot_path(name: &str) -> String {
    format!("{SNAPSHOTS}/{name}")
}

/// Whether `path` (a test's `env`, as written) lies under the project root
/// `root` (canonical), links resolved: a test reads only its project, as imports and
/// `path()` do. One that does not exist is judged by its words.
fn inside_project(root: &Path, dir: &Path, path: &str) -> bool {
    if Path::new(path).is_absolute() {
        return false;
    }
    let joined = dir.join(path);
    match joined.canonicalize() {
        Ok(c) => c.starts_with(root),
        Err(_) => {
            let Ok(mut at) = dir.canonicalize() else {
                return false;
            };
            for c in Path::new(path).components() {
                match c {
                    std::path::Component::ParentDir => {
                        at.pop();
                    }
                    std::path::Component::Normal(n) => at.push(n),
                    _ => {}
                }
            }
            at.starts_with(root)
        }
    }
}

/// The tests of a file; its syntax errors (and a test's `env` or `policies` that is not a
/// plain string) are bad input, reported as `check` reports them.
fn cases_of(file: &Path, ui: Ui) -> Result<Vec<Case>, Failure> {
    let bytes =
        envc_lockfiles::file::read_bounded(file, envc_compiler::program::MAX_SOURCE_BYTES as u64)
            .map_err(|e| Failure::Input(format!("cannot read `{}`: {e}", file.display())))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::Input(format!("`{}` is not UTF-8 text", file.display())))?;
    let mut sources = envc_compiler::SourceMap::default();
    let id = sources.add_verbatim(shown_file(file), text.as_str().into());
    let parsed = envc_lang::parse(&text, id);
    let mut problems = parsed.errors.clone();
    let dir = dir_of(file);
    let root = FsLoader::new(&dir).canonical_root().map(Path::to_path_buf);
    // A test's `env` is the project's file: a path out of it (absolute, `../` past the
    // root, a link) would show another file's lines in the errors.
    let outside = |what: &str, span: envc_lang::Span, path: &str| {
        let found = root
            .as_deref()
            .is_some_and(|r| inside_project(r, &dir, path));
        (!found).then(|| {
            envc_lang::Diagnostic::new(
                "test::outside-project",
                format!("a test's `{what}` is outside the project"),
            )
            .label(id, span, format!("`{path}` leaves the project"))
            .message(
                "A test reads only its project's files, as imports and `path()` do; the \
                 project root is the nearest directory above the test that holds an envc.toml \
                 or is a git work tree, else the test's own directory.",
            )
            .help("name a file under the project root, relative to the test file")
        })
    };
    let mut cases = Vec::new();
    for (index, t) in testing::tests_of(&parsed.module).into_iter().enumerate() {
        let env = match t.field("env") {
            Some(f) => match testing::plain_strings(&f.value, id, "env") {
                Ok(v) if v.len() == 1 => match outside("env", f.value.span, &v[0]) {
                    Some(d) => {
                        problems.push(d);
                        continue;
                    }
                    None => dir.join(&v[0]),
                },
                Ok(_) => {
                    problems.push(
                        envc_lang::Diagnostic::new("test::field", "a test's `env` is one path")
                            .label(id, f.value.span, "not one string")
                            .help("write `env = \"./prod.env\"`"),
                    );
                    continue;
                }
                Err(d) => {
                    problems.push(d);
                    continue;
                }
            },
            None => file.to_path_buf(),
        };
        let policies = match t.field("policies") {
            Some(f) => match testing::plain_strings(&f.value, id, "policies") {
                // Like `--policy DIR`, a pack may be anywhere (an organisation's shared
                // packs): it is a tree of its own, whose `.env` files alone are read.
                Ok(v) => v.iter().map(|p| dir.join(p)).collect(),
                Err(d) => {
                    problems.push(d);
                    continue;
                }
            },
            None => Vec::new(),
        };
        cases.push(Case {
            file: file.to_path_buf(),
            text: text.clone(),
            index,
            name: t.name.to_string(),
            env,
            policies,
        });
    }
    if !problems.is_empty() {
        return Err(super::report_problems(&problems, &sources, "", file, ui));
    }
    Ok(cases)
}

/// Templates rendered by the executor's engine (the one a build uses), snapshots read from
/// `snapshots/` beside the test file: beneath its directory, never through a link (a
/// `snapshots` linked to `/etc` would show `/etc`'s files in a diff). `None` where the
/// directory cannot be opened: every snapshot is then missing.
struct World {
    tests: Option<Beneath>,
}

impl TestWorld for World {
    fn render(
        &self,
        path: &str,
        text: &str,
        vars: &serde_json::Value,
    ) -> Result<String, RenderFailure> {
        envc_executor::render_template(path, text, vars)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| RenderFailure(e.to_string()))
    }

    fn snapshot(&self, name: &str) -> Option<String> {
        let bytes = self.tests.as_ref()?.read(&snapshot_path(name)).ok()??;
        String::from_utf8(bytes).ok()
    }
}

fn run_one(case: &Case, update: bool, ui: Ui) -> Outcome1 {
    let started = Instant::now();
    let file = shown_file(&case.file);
    let mut outcome = Outcome1 {
        file: file.clone(),
        name: case.name.clone(),
        held: 0,
        failures: Vec::new(),
        snapshots: Vec::new(),
        duration: Duration::ZERO,
    };
    let plain = |title: String| Shown {
        code: "test::input".into(),
        rendered: format!("error: {title}\n"),
        title,
        message: String::new(),
        location: None,
        left: None,
        right: None,
        op: None,
    };
    let mut packs = Vec::new();
    for p in &case.policies {
        match super::read_policy_pack(p) {
            Ok(pack) => packs.push(pack),
            Err(Failure::Input(e)) => outcome.failures.push(plain(e)),
            Err(_) => outcome
                .failures
                .push(plain(format!("cannot read policy pack `{}`", p.display()))),
        }
    }
    let pins = match envc_lockfiles::read_lock(&case.env) {
        Ok(lock) => lock.map(|l| l.lock.pins()).unwrap_or_default(),
        Err(e) => {
            outcome.failures.push(plain(e.to_string()));
            BTreeMap::new()
        }
    };
    if !outcome.failures.is_empty() {
        outcome.duration = started.elapsed();
        return outcome;
    }
    let (dir, root) = split_root(&case.env);
    let loader = FsLoader::new(&dir);
    let test_dir = dir_of(&case.file);
    let world = World {
        tests: Beneath::open(&test_dir, false).ok(),
    };
    let run = testing::run(&TestRequest {
        file_name: file,
        text: &case.text,
        index: case.index,
        root: &root,
        loader: &loader,
        pins,
        packs,
        world: &world,
        update,
    });
    let renderer = ui.renderer(&run.sources, &super::prefix(&case.env));
    outcome.held = run.held;
    for f in &run.failures {
        let d = &f.diagnostic;
        outcome.failures.push(Shown {
            code: d.code.to_string(),
            title: d.title.clone(),
            message: d.message.clone(),
            location: d.primary().map(|l| {
                let src = run.sources.get(l.file);
                let (line, col) = run.sources.line_col(l.file, l.span.start as usize);
                format!("{}:{line}:{col}", renderer.display_name(src))
            }),
            left: f.compared.as_ref().map(|c| c.left.clone()),
            right: f.compared.as_ref().map(|c| c.right.clone()),
            op: f.compared.as_ref().map(|c| c.op.to_string()),
            rendered: format!(
                "{}{}",
                renderer.render(d),
                f.compared.as_ref().map_or(String::new(), compared_text)
            ),
        });
    }
    outcome.snapshots = run
        .snapshots
        .into_iter()
        .map(|(name, text)| (test_dir.clone(), snapshot_path(&name), text))
        .collect();
    outcome.duration = started.elapsed();
    outcome
}

/// Both sides of a failed comparison, as `assert_eq!` shows them; texts of several lines
/// (a file's content) in full, then the lines that differ.
fn compared_text(c: &testing::Compared) -> String {
    if !c.left.contains('\n') && !c.right.contains('\n') {
        return format!("   left: {}\n  right: {}\n\n", c.left, c.right);
    }
    let block = |t: &str| {
        t.lines()
            .map(|l| format!("    | {l}\n"))
            .collect::<String>()
    };
    format!(
        "   left:\n{}  right:\n{}  differs:\n{}\n\n",
        block(&c.left),
        block(&c.right),
        testing::line_diff(&c.right, &c.left)
            .lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

fn json_of(o: &Outcome1) -> serde_json::Value {
    serde_json::json!({
        "type": "test",
        "file": o.file,
        "name": o.name,
        "passed": o.failures.is_empty(),
        "held": o.held,
        "failures": o.failures.iter().map(|f| serde_json::json!({
            "code": f.code,
            "title": f.title,
            "message": f.message,
            "location": f.location,
            "op": f.op,
            "left": f.left,
            "right": f.right,
        })).collect::<Vec<_>>(),
    })
}

/// JUnit XML, as CI systems read it: one suite per test file.
fn junit(outcomes: &[Outcome1]) -> String {
    let mut by_file: BTreeMap<&str, Vec<&Outcome1>> = BTreeMap::new();
    for o in outcomes {
        by_file.entry(&o.file).or_default().push(o);
    }
    let failed = outcomes.iter().filter(|o| !o.failures.is_empty()).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x.push_str(&format!(
        "<testsuites name=\"envc test\" tests=\"{}\" failures=\"{failed}\">\n",
        outcomes.len()
    ));
    for (file, tests) in by_file {
        let f = tests.iter().filter(|o| !o.failures.is_empty()).count();
        let time: f64 = tests.iter().map(|o| o.duration.as_secs_f64()).sum();
        x.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{f}\" errors=\"0\" time=\"{time:.3}\">\n",
            xml(file),
            tests.len()
        ));
        for o in tests {
            x.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                xml(file),
                xml(&o.name),
                o.duration.as_secs_f64()
            ));
            if o.failures.is_empty() {
                x.push_str("/>\n");
                continue;
            }
            x.push_str(">\n");
            for f in &o.failures {
                let mut body = String::new();
                if let Some(l) = &f.location {
                    body.push_str(&format!("{l}: "));
                }
                body.push_str(&f.title);
                if !f.message.is_empty() {
                    body.push('\n');
                    body.push_str(&f.message);
                }
                x.push_str(&format!(
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                    xml(&f.code),
                    xml(&f.title),
                    xml(&body)
                ));
            }
            x.push_str("    </testcase>\n");
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

/// Text as XML attribute or element content; characters XML 1.0 cannot hold are dropped.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes() {
        for (input, want) in [
            ("a<b>&\"c\"", "a&lt;b&gt;&amp;&quot;c&quot;"),
            ("it's", "it&apos;s"),
            ("bell\u{7}", "bell"),
            ("two\nlines", "two\nlines"),
        ] {
            assert_eq!(xml(input), want);
        }
    }
}
