//! `envc test` end to end: the binary on a project in a temporary directory (a component
//! with a template, mocked VM addresses), passing and failing tests, `--filter`, `--json`,
//! `--junit` (the XML parsed back) and `--update` of snapshots. Nothing is built: no store,
//! no targets.

use std::path::Path;
use std::process::{Command, Output};

const ENV: &str = r#"default tags = { owner = "web" }

param members: int = 2

let vms = [for i in 0..members => vm(name = "web-${i}", image = image(name = "debian-12", packages = []))]
let conf = [for v in vms => file(
  path = "/etc/peers.conf",
  template = path("peers.conf.j2"),
  vars = { me = v.address, peers = [for p in vms => p.address] },
  target = v,
)]

output first = vms[0].address
"#;

const TEMPLATE: &str = "me = {{ me }}\n{% for p in peers %}peer = {{ p }}\n{% endfor %}";

const TESTS: &str = r#"test "two members know each other" {
  env = "./prod.env"
  mocks = { "vm:web-0" = { address = "10.0.0.1" }, "vm:web-1" = { address = "10.0.0.2" } }
  expect len(nodes("vm")) == 2
  expect files["web-1/file:/etc/peers.conf"] == "me = 10.0.0.2\npeer = 10.0.0.1\npeer = 10.0.0.2\n"
  expect files["web-0/file:/etc/peers.conf"] == snapshot("web-0.conf")
}

test "the first address is wrong on purpose" {
  env = "./prod.env"
  set = { members = 1 }
  mocks = { "vm:web-0" = { address = "10.0.0.1" } }
  expect outputs.first == "10.0.0.9", "the output is the first VM's address"
}
"#;

fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("envc-test-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("envc.toml"), "").unwrap();
    std::fs::write(dir.path().join("prod.env"), ENV).unwrap();
    std::fs::write(dir.path().join("peers.conf.j2"), TEMPLATE).unwrap();
    std::fs::write(dir.path().join("prod_test.env"), TESTS).unwrap();
    dir
}

fn envc(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn envc_test_runs_passes_fails_and_reports() {
    let p = project();
    let dir = p.path();

    // No snapshot yet: the first test fails on it, the second on its comparison.
    let out = envc(dir, &["test"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(
        stdout.lines().last(),
        Some("0 passed, 2 failed"),
        "{stdout}"
    );
    assert!(stderr.contains("test::snapshot-missing"), "{stderr}");
    // The failing comparison shows both sides and the line's message.
    assert!(
        stderr.contains("   left: \"10.0.0.1\"\n  right: \"10.0.0.9\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("the output is the first VM's address"),
        "{stderr}"
    );

    // --update writes the snapshot: the rendered template with the mocked addresses.
    let out = envc(dir, &["test", "--update", "--filter", "know each other"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().last(), Some("1 passed, 0 failed"));
    let snap = std::fs::read_to_string(dir.join("snapshots/web-0.conf")).unwrap();
    assert_eq!(snap, "me = 10.0.0.1\npeer = 10.0.0.1\npeer = 10.0.0.2\n");

    // Now only the deliberate failure fails; a changed template shows as a snapshot diff.
    let out = envc(dir, &["test", "prod_test.env"]);
    assert_eq!(text(&out.stdout).lines().last(), Some("1 passed, 1 failed"));
    std::fs::write(
        dir.join("peers.conf.j2"),
        TEMPLATE.replace("me =", "self ="),
    )
    .unwrap();
    let out = envc(dir, &["test", "--filter", "know each other"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("test::snapshot-differs"), "{stderr}");
    assert!(stderr.contains("line 1: + self = 10.0.0.1"), "{stderr}");
    std::fs::write(dir.join("peers.conf.j2"), TEMPLATE).unwrap();

    // --json: one object per test, then the summary; the summary line on stderr.
    let out = envc(dir, &["test", "--json"]);
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let failed = lines
        .iter()
        .find(|l| l["name"] == "the first address is wrong on purpose")
        .unwrap();
    assert_eq!(failed["type"], "test");
    assert_eq!(failed["passed"], false);
    assert_eq!(failed["file"], "prod_test.env");
    let f = &failed["failures"][0];
    assert_eq!(f["code"], "test::expect-failed");
    assert_eq!(f["op"], "==");
    assert_eq!(f["left"], "\"10.0.0.1\"");
    assert_eq!(f["right"], "\"10.0.0.9\"");
    assert_eq!(f["location"], "prod_test.env:13:10");
    assert_eq!(lines[2]["type"], "summary");
    assert_eq!(lines[2]["passed"], 1);
    assert_eq!(lines[2]["failed"], 1);
    assert_eq!(text(&out.stderr).trim_end(), "1 passed, 1 failed");

    // --junit: the XML as a CI system reads it.
    let out = envc(dir, &["test", "--junit", "results.xml"]);
    assert_eq!(out.status.code(), Some(1));
    let xml = std::fs::read_to_string(dir.join("results.xml")).unwrap();
    let suites = junit(&xml);
    assert_eq!(
        suites,
        vec![(
            "prod_test.env".to_string(),
            vec![
                ("two members know each other".to_string(), None),
                (
                    "the first address is wrong on purpose".to_string(),
                    Some("expected `outputs.first == &quot;10.0.0.9&quot;`".to_string())
                ),
            ]
        )]
    );
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
}

#[test]
fn envc_test_refuses_bad_input() {
    let p = project();
    let dir = p.path();
    std::fs::write(
        dir.join("broken_test.env"),
        "test \"t\" {\n  evn = \"./prod.env\"\n  expect true\n}\n",
    )
    .unwrap();
    let out = envc(dir, &["test"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("parse::test-field"), "{stderr}");
    assert!(stderr.contains("did you mean `env`?"), "{stderr}");
    // No test file: said, not an empty success.
    let empty = tempfile::tempdir().unwrap();
    let out = envc(empty.path(), &["test"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no test files"),
        "{}",
        text(&out.stderr)
    );
}

/// The suites of a JUnit document: each suite's name and its cases (name, the failure's
/// `message` attribute), read with a small tag reader (the XML envc writes is flat).
#[allow(clippy::type_complexity)]
fn junit(xml: &str) -> Vec<(String, Vec<(String, Option<String>)>)> {
    fn attr(tag: &str, name: &str) -> Option<String> {
        let key = format!(" {name}=\"");
        let start = tag.find(&key)? + key.len();
        let end = tag[start..].find('"')? + start;
        Some(tag[start..end].to_string())
    }
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    let mut suites: Vec<(String, Vec<(String, Option<String>)>)> = Vec::new();
    let mut depth = 0i32;
    let mut rest = xml;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').unwrap() + open;
        let tag = &rest[open..=close];
        rest = &rest[close + 1..];
        if tag.starts_with("<?") {
            continue;
        }
        let closing = tag.starts_with("</");
        let empty = tag.ends_with("/>");
        if tag.starts_with("<testsuite ") {
            suites.push((attr(tag, "name").unwrap(), Vec::new()));
        } else if tag.starts_with("<testcase ") {
            let name = attr(tag, "name").unwrap();
            suites.last_mut().unwrap().1.push((name, None));
        } else if tag.starts_with("<failure ") {
            let case = suites.last_mut().unwrap().1.last_mut().unwrap();
            case.1 = attr(tag, "message");
        }
        if closing {
            depth -= 1;
        } else if !empty {
            depth += 1;
        }
    }
    assert_eq!(depth, 0, "every element is closed: {xml}");
    suites
}

/// A test reads only its project (issue 59): an `env` that is absolute, goes up past the
/// project root, or is a link out of it is refused before anything is read, and the outside
/// file's lines appear nowhere in what envc prints. (Policy packs, as `--policy DIR`, may be
/// anywhere: `examples/postgres` tests with `../policies`.)
#[test]
fn envc_test_reads_nothing_outside_the_project() {
    let p = project();
    let dir = p.path();
    // A file outside the project, with a line that must never be shown.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.env");
    std::fs::write(&secret, "root:$y$j9T$not-to-be-shown:19000:0:99999:7:::\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("linked.env")).unwrap();
    let up = pathdiff(&secret, dir);
    for (field, value) in [
        ("env", secret.display().to_string()),
        ("env", up),
        ("env", "./linked.env".to_string()),
    ] {
        std::fs::write(
            dir.join("escape_test.env"),
            format!("test \"t\" {{\n  {field} = \"{value}\"\n  expect true\n}}\n"),
        )
        .unwrap();
        let out = envc(dir, &["test", "escape_test.env"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(1),
            "{field} = {value}: {stdout}{stderr}"
        );
        assert!(
            stderr.contains("test::outside-project")
                && stderr.contains(&format!("a test's `{field}` is outside the project")),
            "{field} = {value}: {stderr}"
        );
        assert!(
            !stdout.contains("not-to-be-shown") && !stderr.contains("not-to-be-shown"),
            "{field} = {value}: {stdout}{stderr}"
        );
        if value == "./linked.env" {
            insta::assert_snapshot!("test-outside-project", stderr);
        }
    }
}

/// Snapshots are read and written beneath the test's directory only (issue 59): through a
/// `snapshots` directory or a snapshot file linked out of it, nothing outside is shown in a
/// diff, and `--update` never writes there (a linked directory is refused, a linked file
/// replaced); the outside file stays as it was.
#[test]
fn envc_test_snapshots_never_follow_a_link_out() {
    for linked_dir in [true, false] {
        let p = project();
        let dir = p.path();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("web-0.conf");
        std::fs::write(&victim, "outside line not-to-be-shown\n").unwrap();
        if linked_dir {
            std::os::unix::fs::symlink(outside.path(), dir.join("snapshots")).unwrap();
        } else {
            std::fs::create_dir(dir.join("snapshots")).unwrap();
            std::os::unix::fs::symlink(&victim, dir.join("snapshots/web-0.conf")).unwrap();
        }
        let out = envc(dir, &["test", "--filter", "two members"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            !stdout.contains("not-to-be-shown") && !stderr.contains("not-to-be-shown"),
            "{stdout}{stderr}"
        );
        let out = envc(dir, &["test", "--update", "--filter", "two members"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if linked_dir {
            // A link on the way is refused, not followed.
            assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
            assert!(stderr.contains("cannot write the snapshot"), "{stderr}");
        } else {
            // A link at the snapshot's own name is replaced by the snapshot, as `render`
            // replaces one.
            assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
            let kept = dir.join("snapshots/web-0.conf");
            assert!(std::fs::symlink_metadata(&kept).unwrap().is_file());
            assert!(std::fs::read_to_string(&kept).unwrap().starts_with("me = "));
        }
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "outside line not-to-be-shown\n",
            "written through the link"
        );
    }
}

/// `to` as a path relative to `from` (a directory), up with `..` as far as needed.
fn pathdiff(to: &Path, from: &Path) -> String {
    let ups = from.components().count() - 1;
    let mut rel = "../".repeat(ups);
    rel.push_str(to.strip_prefix("/").unwrap().to_str().unwrap());
    rel
}
