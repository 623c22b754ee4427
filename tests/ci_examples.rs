//! The CI examples (examples/ci/*.yml, and the commands in docs/ci.md) use only commands and
//! flags that envc has: every shell line that runs `envc` is parsed by envc's own command
//! line (`envc::cli::Cli`), with the workflow's variables substituted. A renamed flag or
//! subcommand fails here, listing every line that no longer parses, not in a user's CI.
//! The scheduled security update (examples/ci/*-security-updates.yml and the script they
//! share) is also run, against the project's local test archive, in a git repository.

use crate::support::{archive, output};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use clap::Parser as _;
use serde_yaml_ng::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// What a variable the workflow does not define (a CI runner's `$RUNNER_TEMP`, a secret)
/// stands for: any value parses where envc takes a path or a URL.
const UNKNOWN_VARIABLE: &str = "/tmp/ci-value";

/// One `envc` invocation found in a file.
struct Invocation {
    /// Where: the file and the shell line as written.
    origin: String,
    /// The words after substitution, `envc` first.
    args: Vec<String>,
}

#[test]
fn github_actions_example_uses_real_envc_commands() {
    let invocations = workflow_invocations("examples/ci/github-actions.yml");
    check_covers_the_workflow(&invocations, "github-actions.yml");
    assert_all_parse(&invocations);
}

#[test]
fn gitlab_ci_example_uses_real_envc_commands() {
    let invocations = workflow_invocations("examples/ci/gitlab-ci.yml");
    check_covers_the_workflow(&invocations, "gitlab-ci.yml");
    assert_all_parse(&invocations);
}

/// The scheduled security update: both workflows run on a schedule, run the shared script
/// (whose envc lines parse too), and open the pull request with the markdown lock diff.
#[test]
fn security_update_workflows_are_scheduled_and_use_real_envc_commands() {
    let script = std::fs::read_to_string(Path::new(ROOT).join(SECURITY_SCRIPT)).unwrap();
    for (rel, scheduled, opens) in [
        (
            "examples/ci/github-security-updates.yml",
            "cron:",
            "--body-file \"$BODY\"",
        ),
        (
            "examples/ci/gitlab-security-updates.yml",
            "$CI_PIPELINE_SOURCE == \"schedule\"",
            "description@$BODY",
        ),
    ] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap();
        let doc: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(text.contains(scheduled), "{rel}: not scheduled");
        assert!(
            text.contains(opens),
            "{rel}: the pull request's body is not $BODY"
        );
        let mut scripts = Vec::new();
        collect_scripts(&doc, &mut scripts);
        assert!(
            scripts
                .iter()
                .any(|s| s.contains(&format!("sh {SECURITY_SCRIPT}"))),
            "{rel}: does not run {SECURITY_SCRIPT}"
        );
        let mut vars = workflow_variables(&doc);
        // What the script derives from ENV_FILE (`${ENV_FILE%.env}.lock`).
        vars.insert("LOCK".into(), "examples/quickstart.lock".into());
        let mut invocations = workflow_invocations(rel);
        invocations.extend(envc_invocations(&script, &vars, SECURITY_SCRIPT));
        let has = |words: &[&str]| {
            invocations
                .iter()
                .any(|i| words.iter().all(|w| i.args.iter().any(|a| a == w)))
        };
        for words in [
            &["lock", "--outdated", "--refresh", "examples/quickstart.env"][..],
            &["lock", "--update=security", "examples/quickstart.env"][..],
            &[
                "diff",
                "HEAD:examples/quickstart.lock",
                "examples/quickstart.lock",
                "markdown",
            ][..],
        ] {
            assert!(has(words), "{rel}: no `envc {}`", words.join(" "));
        }
        assert_all_parse(&invocations);
    }
}

const SECURITY_SCRIPT: &str = "examples/ci/security-updates.sh";

/// The security update's job, run as the workflows run it (the shared script, with envc on
/// PATH) in a git repository whose environment is locked against the local test archive:
/// nothing to do until the security suite moves; then the lockfile moves on a branch, with
/// the markdown lock diff as the commit's and the pull request's body.
#[test]
fn the_security_update_job_runs_against_the_test_archive() {
    const ENV: &str = r#"
let h = host(name = "h", address = "192.0.2.1")
let hello = package(name = "hello", target = h)
let jq = package(name = "jq", target = h)
"#;
    const DATE: &str = "Sat, 10 Jan 2026 10:14:31 UTC";
    let main = archive::TinyArchive::new("bookworm");
    main.write(
        &[
            archive::with_changelog(archive::pkg("hello", "2.10-3", "")),
            archive::pkg("jq", "1.6-2.1", ""),
        ],
        DATE,
        true,
    );
    let [_updates, security] = main.companions(DATE);
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    std::fs::write(dir.join("prod.env"), ENV).unwrap();
    std::fs::write(dir.join(".gitignore"), ".envc/\n").unwrap();
    let envc = Path::new(env!("CARGO_BIN_EXE_envc"));
    let path = format!(
        "{}:{}",
        envc.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |program: &str, args: &[&str]| -> Output {
        Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("PATH", &path)
            .env("ENVC_DEBIAN_MIRROR", &main.mirror)
            // The tiny archive's signature is not a real one.
            .env("ENVC_ARCHIVE_KEYRING", "")
            .env("ENV_FILE", "prod.env")
            .env("GITHUB_OUTPUT", dir.join("github-output"))
            .env("GIT_AUTHOR_NAME", "envc test")
            .env("GIT_AUTHOR_EMAIL", "test@envc.invalid")
            .env("GIT_COMMITTER_NAME", "envc test")
            .env("GIT_COMMITTER_EMAIL", "test@envc.invalid")
            .env_remove("ENVC_STORE")
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let ok = |o: Output| -> String {
        assert!(o.status.success(), "{}", output::text(&o));
        output::stdout(&o)
    };
    ok(run("envc", &["lock", "prod.env"]));
    ok(run("git", &["init", "--quiet", "--initial-branch=main"]));
    ok(run("git", &["add", "prod.env", "prod.lock", ".gitignore"]));
    ok(run("git", &["commit", "--quiet", "--message", "lock"]));
    let script = Path::new(ROOT).join(SECURITY_SCRIPT);
    let script = script.to_str().unwrap();

    // No security update: nothing is committed.
    let out = ok(run("sh", &[script]));
    assert!(
        out.contains("no security update pending for prod.lock"),
        "{out}"
    );
    let result = || std::fs::read_to_string(dir.join("envc-security-updates.env")).unwrap();
    assert_eq!(result(), "changed=false\n");
    let branches = ok(run(
        "git",
        &["branch", "--list", "--format=%(refname:short)"],
    ));
    assert_eq!(branches, "main\n");

    // The security suite fixes hello: the lockfile moves on the branch, and the body says
    // what the move fixes.
    security.write(
        &[archive::with_changelog(archive::pkg(
            "hello",
            "2.10-3+deb12u2",
            "",
        ))],
        DATE,
        true,
    );
    let out = ok(run("sh", &[script]));
    assert!(
        out.contains("committed the security updates of prod.lock on envc/security-updates"),
        "{out}"
    );
    assert_eq!(result(), "changed=true\n");
    let github = std::fs::read_to_string(dir.join("github-output")).unwrap();
    assert!(github.ends_with("changed=true\n"), "{github}");
    let body = std::fs::read_to_string(dir.join("envc-security-updates.md")).unwrap();
    assert!(
        body.starts_with(
            "### envc lock: 2 pins changed, 1 package moved: 3 CVEs and 2 bugs fixed\n"
        ) && body.contains("| `hello` | 2.10-3 | 2.10-3+deb12u2 | 3 CVEs, 2 bugs |\n"),
        "{body}"
    );
    assert_eq!(
        ok(run("git", &["rev-parse", "--abbrev-ref", "HEAD"])),
        "envc/security-updates\n"
    );
    let files = ok(run("git", &["show", "--name-only", "--format=", "HEAD"]));
    assert_eq!(files, "prod.lock\n");
    let message = ok(run("git", &["log", "-1", "--format=%B"]));
    assert!(
        message.starts_with("envc: security updates of prod.lock\n\n### envc lock: ")
            && message.contains("| `hello` | 2.10-3 | 2.10-3+deb12u2 |"),
        "{message}"
    );
    assert!(ok(run("git", &["show", "HEAD:prod.lock"])).contains("version = \"2.10-3+deb12u2\""));
    // The next week, nothing new: nothing to do.
    let out = ok(run("sh", &[script]));
    assert!(out.contains("no security update pending"), "{out}");
    assert_eq!(result(), "changed=false\n");
}

/// The commands docs/ci.md tells a user to run (its ```sh blocks).
#[test]
fn ci_doc_uses_real_envc_commands() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/ci.md")).unwrap();
    let vars = BTreeMap::from([(
        "ENV_FILE".to_string(),
        "examples/quickstart.env".to_string(),
    )]);
    let mut invocations = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_start()) {
            (None, "```sh") => block = Some(String::new()),
            (Some(b), "```") => {
                invocations.extend(envc_invocations(b, &vars, "docs/ci.md"));
                block = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    assert!(
        invocations.len() >= 5,
        "docs/ci.md: expected its ```sh blocks to show envc's commands, found {}",
        invocations.len()
    );
    assert_all_parse(&invocations);
}

/// Every `envc` invocation in the shell scripts of a GitHub Actions or GitLab CI file: the
/// strings under `run`, `script`, `before_script` and `after_script`, anywhere in it.
fn workflow_invocations(rel: &str) -> Vec<Invocation> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap();
    let doc: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let vars = workflow_variables(&doc);
    let env_file = vars
        .get("ENV_FILE")
        .unwrap_or_else(|| panic!("{rel}: no ENV_FILE variable at the top level"));
    assert!(
        Path::new(ROOT).join(env_file).is_file(),
        "{rel}: ENV_FILE={env_file} is not a file of the repository"
    );
    let mut scripts = Vec::new();
    collect_scripts(&doc, &mut scripts);
    assert!(!scripts.is_empty(), "{rel}: no run/script entries");
    scripts
        .iter()
        .flat_map(|s| envc_invocations(s, &vars, rel))
        .collect()
}

/// The top-level `env` (GitHub) or `variables` (GitLab) mapping.
fn workflow_variables(doc: &Value) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for key in ["env", "variables"] {
        if let Some(Value::Mapping(map)) = doc.get(key) {
            for (k, v) in map {
                if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                    vars.insert(k.to_string(), v.to_string());
                }
            }
        }
    }
    vars
}

fn collect_scripts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Mapping(map) => {
            for (k, v) in map {
                let is_script = matches!(
                    k.as_str(),
                    Some("run" | "script" | "before_script" | "after_script")
                );
                if is_script {
                    // GitLab's may be a list of lines (nested lists come from !reference).
                    flatten_strings(v, out);
                } else {
                    collect_scripts(v, out);
                }
            }
        }
        Value::Sequence(items) => items.iter().for_each(|v| collect_scripts(v, out)),
        Value::Tagged(t) => collect_scripts(&t.value, out),
        _ => {}
    }
}

fn flatten_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Sequence(items) => items.iter().for_each(|v| flatten_strings(v, out)),
        _ => {}
    }
}

/// The `envc` invocations of a shell script: each simple command (split at `|`, `||`,
/// `&&`, `;`, braces and parentheses; redirections dropped) whose program is `envc` or a
/// path ending in `/envc`, after leading `VAR=value` assignments.
fn envc_invocations(script: &str, vars: &BTreeMap<String, String>, file: &str) -> Vec<Invocation> {
    let script = substitute_expressions(&script.replace("\\\n", " "), vars);
    let mut found = Vec::new();
    for line in script.lines() {
        for command in simple_commands(line, vars) {
            let mut words = command.into_iter().skip_while(|w| is_assignment(w));
            let Some(program) = words.next() else {
                continue;
            };
            if program == "envc" || program.ends_with("/envc") {
                found.push(Invocation {
                    origin: format!("{file}: {}", line.trim()),
                    args: std::iter::once("envc".to_string()).chain(words).collect(),
                });
            }
        }
    }
    found
}

/// GitHub's `${{ env.NAME }}` and `${{ secrets.NAME }}` expressions.
fn substitute_expressions(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        let expr = rest[start + 3..start + len].trim();
        let value = expr
            .strip_prefix("env.")
            .and_then(|name| vars.get(name))
            .map(String::as_str)
            .unwrap_or(UNKNOWN_VARIABLE);
        out.push_str(value);
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The simple commands of one shell line, as words after quote removal and substitution of
/// `$NAME` and `${NAME}`. Enough shell for CI scripts; not a shell.
fn simple_commands(line: &str, vars: &BTreeMap<String, String>) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut skip_next_word = false; // the target of a redirection
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut Option<String>, cmds: &mut Vec<Vec<String>>, skip: &mut bool| {
        if let Some(w) = word.take() {
            if *skip {
                *skip = false;
            } else if let Some(last) = cmds.last_mut() {
                last.push(w);
            }
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '#' if word.is_none() => break,
            ' ' | '\t' => end_word(&mut word, &mut commands, &mut skip_next_word),
            // Braces group commands only as words of their own.
            '|' | '&' | ';' | '(' | ')' => {
                end_word(&mut word, &mut commands, &mut skip_next_word);
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                commands.push(Vec::new());
            }
            '{' | '}' if word.is_none() => commands.push(Vec::new()),
            '>' | '<' => {
                // `2>`: the descriptor before it is not a word.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
                {
                    word = None;
                } else {
                    end_word(&mut word, &mut commands, &mut skip_next_word);
                }
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                skip_next_word = true;
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                w.push(n);
                            }
                        }
                        '$' => w.push_str(&variable(&mut chars, vars)),
                        c => w.push(c),
                    }
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    word.get_or_insert_with(String::new).push(n);
                }
            }
            '$' => {
                let value = variable(&mut chars, vars);
                word.get_or_insert_with(String::new).push_str(&value);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut commands, &mut skip_next_word);
    commands.retain(|c| !c.is_empty());
    commands
}

/// The value of `NAME` or `{NAME}` after a `$`.
fn variable(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    vars: &BTreeMap<String, String>,
) -> String {
    let braced = chars.peek() == Some(&'{');
    if braced {
        chars.next();
    }
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '_' {
            name.push(c);
            chars.next();
        } else {
            break;
        }
    }
    if braced {
        // `${NAME:-default}` and the like: the default does not matter here.
        for c in chars.by_ref() {
            if c == '}' {
                break;
            }
        }
    }
    if name.is_empty() {
        return "$".to_string();
    }
    vars.get(&name)
        .cloned()
        .unwrap_or_else(|| UNKNOWN_VARIABLE.to_string())
}

/// The workflow does the three things docs/ci.md promises.
fn check_covers_the_workflow(invocations: &[Invocation], file: &str) {
    let has = |words: &[&str]| {
        invocations
            .iter()
            .any(|i| words.iter().all(|w| i.args.iter().any(|a| a == w)))
    };
    for (what, words) in [
        ("a lockfile check", &["lock", "--check"][..]),
        ("a markdown plan", &["plan", "--format", "markdown"][..]),
        (
            "a locked build that pushes",
            &["build", "--locked", "--push"][..],
        ),
    ] {
        assert!(has(words), "{file}: no {what} ({})", words.join(" "));
    }
    for i in invocations {
        assert!(
            i.args.iter().any(|a| a == "examples/quickstart.env"),
            "{}: does not name the environment file through $ENV_FILE",
            i.origin
        );
    }
}

fn assert_all_parse(invocations: &[Invocation]) {
    assert!(!invocations.is_empty(), "no envc invocation found");
    let mut unknown = Vec::new();
    for i in invocations {
        if let Err(e) = envc::cli::Cli::try_parse_from(&i.args) {
            let message = e.render().to_string();
            let first = message.lines().next().unwrap_or_default().to_string();
            unknown.push(format!(
                "  {}\n    args: {:?}\n    {:?}: {first}",
                i.origin,
                i.args,
                e.kind()
            ));
        }
    }
    assert!(
        unknown.is_empty(),
        "{} of {} envc invocations use a command or flag envc does not have:\n{}",
        unknown.len(),
        invocations.len(),
        unknown.join("\n")
    );
}

/// The extraction itself: a shell line is cut and expanded as a shell would, so that a
/// workflow line is checked with the arguments CI would really pass.
#[test]
fn envc_lines_are_read_as_a_shell_would() {
    let vars = BTreeMap::from([(
        "ENV_FILE".to_string(),
        "examples/quickstart.env".to_string(),
    )]);
    let script = "set -e\n\
        FOO=1 envc plan --format markdown \"$ENV_FILE\" > plan.md 2>&1 | tee x # comment\n\
        { echo hi; ./target/release/envc lock --check ${ENV_FILE}; } || exit 1\n\
        envc build \\\n  --locked '${{ env.ENV_FILE }}'\n\
        echo envc is not run here\n";
    let found: Vec<Vec<String>> = envc_invocations(script, &vars, "t")
        .into_iter()
        .map(|i| i.args)
        .collect();
    let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        found,
        [
            words("envc plan --format markdown examples/quickstart.env"),
            words("envc lock --check examples/quickstart.env"),
            words("envc build --locked examples/quickstart.env"),
        ]
    );
}
