//! Stack references end to end: one environment reads another's outputs from its state
//! (local, then shared), re-runs only what reads an output that moved, names the run it
//! read, and says what to do when the other was never built or lacks an output. The nodes
//! are files on the machine envc runs on (`@local`): what is under test is the state.

use crate::support::{offline, output};

use std::path::Path;
use std::process::Output;

use offline::envc;
use output::{stdout, summary, text};

fn core(dir: &Path, extra: &str) -> String {
    format!(
        r#"param greeting: str = "hello"
let here = host(name = "here", address = "@local")
let marker = file(path = "{d}/core.marker", content = "core\n", target = here)
output greeting = greeting
output port = 5432
{extra}"#,
        d = dir.display()
    )
}

fn app(dir: &Path, extra: &str) -> String {
    format!(
        r#"let core = stack("core.env")
default tags = {{ team = "app" }}
let here = host(name = "here", address = "@local")
let conf = file(path = "{d}/app.conf", content = "greeting=${{core.greeting}} port=${{core.port}}\n", target = here)
let other = file(path = "{d}/other.conf", content = "static\n", target = here)
output url = "db:${{core.port}}"
{extra}"#,
        d = dir.display()
    )
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = envc(dir, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    o
}

/// `envc plan --json`: (node key, action, reasons) of each node.
fn plan(dir: &Path, args: &[&str]) -> Vec<(String, String, Vec<String>)> {
    let o = ok(dir, &[&["plan", "app.env", "--json"], args].concat());
    stdout(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("node").is_some())
        .map(|v| {
            let reasons = v["reasons"].as_array().unwrap().iter();
            (
                v["node"].as_str().unwrap().to_string(),
                v["action"].as_str().unwrap().to_string(),
                reasons.map(|r| r.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect()
}

fn changed(p: &[(String, String, Vec<String>)]) -> Vec<(&str, &str)> {
    p.iter()
        .filter(|n| n.1 != "unchanged")
        .map(|n| (n.0.as_str(), n.1.as_str()))
        .collect()
}

/// The run ids of `envc log FILE --json`, newest first, with what each read.
fn runs(dir: &Path, file: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let o = ok(dir, &[&["log", file, "--json"], args].concat());
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A directory for two environments, and `out/` in it for the files they write.
fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("envc-stacks-")
        .tempdir()
        .unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    (tmp, out)
}

#[test]
fn an_environment_reads_another_ones_outputs_from_its_state() {
    let (tmp, out) = project();
    let dir = tmp.path();
    std::fs::write(dir.join("core.env"), core(&out, "")).unwrap();
    std::fs::write(dir.join("app.env"), app(&out, "")).unwrap();
    ok(dir, &["check", "app.env"]);

    // Never built: the plan shows what reads it waiting for it (as Terraform and Pulumi
    // plan with outputs not known yet); the build refuses, saying what to do.
    let conf_key = format!("here/file:{}/app.conf", out.display());
    let p = plan(dir, &[]);
    let conf = p.iter().find(|n| n.0 == conf_key);
    assert_eq!(conf.unwrap_or_else(|| panic!("{p:?}")).1, "create", "{p:?}");
    let o = ok(dir, &["plan", "app.env"]);
    assert!(
        text(&o).contains(
            "`core.env` was never built: what this environment reads of it is not known yet"
        ),
        "{}",
        text(&o)
    );
    let o = ok(dir, &["why", "app.env", &conf_key]);
    assert!(
        stdout(&o).contains("resolved   not yet: needs the output of `stack:core.env`"),
        "{}",
        text(&o)
    );
    let o = envc(dir, &["build", "app.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("core.env` was never built") && text(&o).contains("envc build"),
        "{}",
        text(&o)
    );

    ok(dir, &["build", "core.env"]);
    let o = ok(dir, &["build", "app.env"]);
    assert_eq!(summary(&o), (4, 0, 0), "{}", text(&o));
    // Each node of the run record carries its tags (app's `default tags`).
    let ran = runs(dir, "app.env", &[])[0]["nodes"].clone();
    let tagged: Vec<&serde_json::Value> =
        ran.as_array().unwrap().iter().map(|n| &n["tags"]).collect();
    assert!(
        tagged.iter().filter(|t| t["team"] == "app").count() == 3,
        "{ran}"
    );
    let conf = || std::fs::read_to_string(out.join("app.conf")).unwrap();
    assert_eq!(conf(), "greeting=hello port=5432\n");
    let o = ok(dir, &["output", "app.env", "--json"]);
    assert!(stdout(&o).contains(r#""url":"db:5432""#), "{}", text(&o));
    // app owns none of core's nodes.
    assert!(plan(dir, &[]).iter().all(|n| !n.0.contains("marker")));

    // core built again, the same outputs: nothing of app changes.
    ok(dir, &["build", "core.env"]);
    assert_eq!(changed(&plan(dir, &[])), []);
    assert_eq!(summary(&ok(dir, &["build", "app.env"])), (0, 4, 0));

    // An output moves: the plan says which, and re-runs what reads it, nothing else.
    ok(dir, &["build", "core.env", "--set", "greeting=bye"]);
    let p = plan(dir, &[]);
    let stack = p.iter().find(|n| n.0 == "stack:core.env").unwrap();
    assert_eq!(stack.1, "update");
    assert_eq!(stack.2, [r#"output greeting: "hello" → "bye""#], "{p:?}");
    let conf_key = format!("here/file:{}/app.conf", out.display());
    assert_eq!(
        changed(&p),
        [("stack:core.env", "update"), (conf_key.as_str(), "update")]
    );
    let o = ok(dir, &["build", "app.env"]);
    assert_eq!(summary(&o), (2, 2, 0), "{}", text(&o));
    assert_eq!(conf(), "greeting=bye port=5432\n");
    // The run names the run of core it read.
    let core_run = runs(dir, "core.env", &[])[0]["run"].clone();
    assert_eq!(runs(dir, "app.env", &[])[0]["stacks"]["core.env"], core_run);

    // An output core's source no longer has: a check error at its use.
    std::fs::write(
        dir.join("core.env"),
        core(&out, "").replace("output port = 5432\n", ""),
    )
    .unwrap();
    let o = envc(dir, &["check", "app.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("port"), "{}", text(&o));
    // One its source has, but its last build did not publish.
    std::fs::write(dir.join("core.env"), core(&out, "output extra = \"x\"\n")).unwrap();
    std::fs::write(
        dir.join("app.env"),
        app(&out, "output extra = core.extra\n"),
    )
    .unwrap();
    let o = envc(dir, &["plan", "app.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("declares output `extra`, but its last build")
            && text(&o).contains("build"),
        "{}",
        text(&o)
    );

    // Through a shared state, both environments in it: read from there, not from the
    // local store.
    let state = format!("file://{}", dir.join("shared-state").display());
    let shared = ["--state", state.as_str()];
    let o = envc(dir, &[&["build", "app.env"], &shared[..]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("never built"), "{}", text(&o));
    ok(
        dir,
        &[
            &["build", "core.env", "--set", "greeting=shared"],
            &shared[..],
        ]
        .concat(),
    );
    ok(dir, &[&["build", "app.env"], &shared[..]].concat());
    assert_eq!(conf(), "greeting=shared port=5432\n");
}

/// Two environments that read each other's outputs: the first built reads the other's
/// `defaults` (it was never built), and a round of builds each way converges, after which
/// nothing runs. An output without a default of an environment never built is refused,
/// naming it.
#[test]
fn two_environments_read_each_other_through_their_states() {
    let (tmp, out) = project();
    let dir = tmp.path();
    let core = format!(
        r#"let app = stack("app.env", defaults = {{ source = "*" }})
let here = host(name = "here", address = "@local")
let relay = file(path = "{d}/relay.conf", content = "accept ${{app.source}}\n", target = here)
output port = 5514
"#,
        d = out.display()
    );
    let app = format!(
        r#"let core = stack("core.env")
let here = host(name = "here", address = "@local")
let conf = file(path = "{d}/app.conf", content = "port ${{core.port}}\n", target = here)
output source = "app-web"
"#,
        d = out.display()
    );
    std::fs::write(dir.join("core.env"), &core).unwrap();
    std::fs::write(dir.join("app.env"), &app).unwrap();
    ok(dir, &["check", "core.env"]);
    ok(dir, &["check", "app.env"]);
    // A default must name an output of the other environment, of its type.
    std::fs::write(
        dir.join("core.env"),
        core.replace("source = \"*\"", "sorce = 1"),
    )
    .unwrap();
    let o = envc(dir, &["check", "core.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("no output `sorce`") && text(&o).contains("did you mean `source`"),
        "{}",
        text(&o)
    );
    std::fs::write(dir.join("core.env"), &core).unwrap();

    // app has no defaults: it cannot be built first.
    let o = envc(dir, &["build", "app.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("`core.env` was never built"),
        "{}",
        text(&o)
    );

    let relay = || std::fs::read_to_string(out.join("relay.conf")).unwrap();
    ok(dir, &["build", "core.env"]);
    assert_eq!(relay(), "accept *\n");
    // It read no run of app.
    assert_eq!(runs(dir, "core.env", &[])[0]["stacks"].get("app.env"), None);
    ok(dir, &["build", "app.env"]);
    assert_eq!(
        std::fs::read_to_string(out.join("app.conf")).unwrap(),
        "port 5514\n"
    );
    // core now reads what app published, not its default.
    let o = ok(dir, &["build", "core.env"]);
    assert_eq!(relay(), "accept app-web\n");
    assert_eq!(summary(&o), (2, 1, 0), "{}", text(&o));
    let app_run = runs(dir, "app.env", &[])[0]["run"].clone();
    assert_eq!(runs(dir, "core.env", &[])[0]["stacks"]["app.env"], app_run);
    // Converged: nothing runs either way.
    assert_eq!(summary(&ok(dir, &["build", "app.env"])), (0, 3, 0));
    assert_eq!(summary(&ok(dir, &["build", "core.env"])), (0, 3, 0));

    // A default for one output does not stand in for another that is read.
    let fresh = dir.join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(
        fresh.join("core.env"),
        core.replace("accept ${app.source}", "accept ${app.source} ${app.level}"),
    )
    .unwrap();
    std::fs::write(
        fresh.join("app.env"),
        app.clone() + "output level = \"info\"\n",
    )
    .unwrap();
    let o = envc(&fresh, &["build", "core.env"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("has no `level` to read") && text(&o).contains("default"),
        "{}",
        text(&o)
    );
}

/// The usual layout: `network/` and `app/` side by side under a project root (marked by an
/// `envc.toml` above both). `app/prod.env` reads `../network/core.env` from the state that
/// `envc build network/core.env` keeps beside it, and imports `../lib/x.env`. Lists and
/// records cross typed; a plan of the reference shows only what app reads, in its type.
#[test]
fn environments_side_by_side_under_a_project_root() {
    let (tmp, out) = project();
    let dir = tmp.path();
    for d in ["network", "app", "lib"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("envc.toml"), "").unwrap();
    let core = |port: u16, greeting: &str| {
        format!(
            r#"let here = host(name = "here", address = "@local")
let marker = file(path = "{d}/core.marker", content = "core\n", target = here)
output port = {port}
output greeting = "{greeting}"
output subnets = ["10.0.1.0/24", "10.0.2.0/24"]
output db = {{ host = "db.internal", users = [{{ name = "app", admin = false }}] }}
"#,
            d = out.display()
        )
    };
    std::fs::write(dir.join("network/core.env"), core(5514, "hello")).unwrap();
    std::fs::write(dir.join("lib/x.env"), "let motd = \"from lib\"\n").unwrap();
    std::fs::write(
        dir.join("app/prod.env"),
        format!(
            r#"import "../lib/x.env"
let core = stack("../network/core.env")
let here = host(name = "here", address = "@local")
let conf = file(path = "{d}/app.conf", content = "${{x.motd}} ${{core.db.host}}:${{core.port}}\n", target = here)
output subnets = core.subnets
output users = core.db.users
"#,
            d = out.display()
        ),
    )
    .unwrap();
    ok(dir, &["check", "app/prod.env"]);
    // Never built: planned, not known yet; a build refuses.
    let o = ok(dir, &["plan", "app/prod.env"]);
    assert!(
        text(&o).contains("`network/core.env` was never built"),
        "{}",
        text(&o)
    );
    let o = envc(dir, &["build", "app/prod.env"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("never built"), "{}", text(&o));

    ok(dir, &["build", "network/core.env"]);
    assert!(dir.join("network/.envc").is_dir());
    let o = ok(dir, &["build", "app/prod.env"]);
    assert_eq!(summary(&o), (3, 0, 0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(out.join("app.conf")).unwrap(),
        "from lib db.internal:5514\n"
    );
    let o = ok(dir, &["output", "app/prod.env", "--json"]);
    let outputs: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        outputs["subnets"],
        serde_json::json!(["10.0.1.0/24", "10.0.2.0/24"]),
        "{}",
        text(&o)
    );
    assert_eq!(
        outputs["users"],
        serde_json::json!([{"admin": false, "name": "app"}]),
        "{}",
        text(&o)
    );

    // The port moves and an output app does not read: the plan shows the port, a number.
    std::fs::write(dir.join("network/core.env"), core(6000, "bye")).unwrap();
    ok(dir, &["build", "network/core.env"]);
    let o = ok(dir, &["plan", "app/prod.env", "--json"]);
    let stack: serde_json::Value = stdout(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["node"] == "stack:../network/core.env")
        .unwrap_or_else(|| panic!("{}", text(&o)));
    assert_eq!(
        stack["reasons"],
        serde_json::json!(["output port: 5514 → 6000"]),
        "{}",
        text(&o)
    );
    ok(dir, &["build", "app/prod.env"]);
    assert_eq!(
        std::fs::read_to_string(out.join("app.conf")).unwrap(),
        "from lib db.internal:6000\n"
    );
    // Run from inside app/, the same environment and the same state.
    let o = ok(&dir.join("app"), &["plan", "prod.env", "--json"]);
    assert!(
        stdout(&o).contains(r#""action":"unchanged""#)
            && !stdout(&o).contains(r#""action":"update""#),
        "{}",
        text(&o)
    );
}

/// Without an envc.toml or .git above it, the project root is the root file's directory:
/// `..` is refused, saying where the root is and how to mark one higher up.
#[test]
fn without_a_project_root_above_paths_stay_under_the_root_file() {
    let (tmp, _out) = project();
    let dir = tmp.path();
    for d in ["network", "app", "lib"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("network/core.env"), "output port = 1\n").unwrap();
    std::fs::write(dir.join("lib/x.env"), "let a = 1\n").unwrap();
    for (src, code) in [
        (
            "let core = stack(\"../network/core.env\")\n",
            "load::bad-stack-path",
        ),
        ("import \"../lib/x.env\"\n", "load::outside-project"),
    ] {
        std::fs::write(dir.join("app/prod.env"), src).unwrap();
        let o = envc(dir, &["check", "app/prod.env"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains(code)
                && text(&o).contains("is outside the project")
                && text(&o).contains("no envc.toml or .git")
                && text(&o).contains("envc.toml"),
            "{}",
            text(&o)
        );
    }
}
