//! `envc verify`'s lab against real SSH hosts (tests/support/nshosts.rs): production on two
//! namespace hosts, the lab on two fresh ones standing in for them. A faithful production
//! verifies (what follows from the lab's own addresses and host keys is shown as
//! expected); a file changed by hand on a production host is named, node and fact; the lab
//! leaves nothing behind; a lab-hosts file that misses or misnames a host is refused.

use crate::support::{nshosts, output, project};

use std::process::Output;

use nshosts::TestHosts;
use output::text;
use project::Project;
use serde_json::Value;

/// A lab-hosts file in the project, its path.
fn lab_hosts(p: &Project, text: &str) -> String {
    let path = p.path("lab-hosts.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn code(o: &Output, expected: i32) {
    assert_eq!(o.status.code(), Some(expected), "{}", text(o));
}

/// The JSON lines of `verify --json`: each node's facts by name, and the summary.
fn nodes(o: &Output) -> (std::collections::BTreeMap<String, Value>, Value) {
    let mut nodes = std::collections::BTreeMap::new();
    let mut summary = Value::Null;
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(n) = v.get("node") {
            nodes.insert(n["node"].as_str().unwrap().to_string(), n.clone());
        } else if let Some(s) = v.get("summary") {
            summary = s.clone();
        }
    }
    (nodes, summary)
}

/// (verdict, production, lab) of `fact` of `node`.
fn fact(
    nodes: &std::collections::BTreeMap<String, Value>,
    node: &str,
    fact: &str,
) -> (String, String, String) {
    let n = nodes
        .get(node)
        .unwrap_or_else(|| panic!("no {node} in {nodes:#?}"));
    let f = n["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"] == fact)
        .unwrap_or_else(|| panic!("no {fact} in {n:#}"));
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    (s(&f["verdict"]), s(&f["production"]), s(&f["lab"]))
}

#[test]
fn a_lab_on_clean_hosts_verifies_production_and_names_a_hand_edit() {
    let hosts = TestHosts::start(4);
    let source = format!(
        r#"let web = host(name = "web", address = "{}")
let db = host(name = "db", address = "{}")
let peers = file(path = "/etc/app/peers.conf", content = "${{web.address}} ${{db.address}}\n", target = web)
let plain = file(
  path = "/etc/app/plain.conf",
  content = "the same everywhere\n",
  mode = 0o640,
  target = db,
  expect = [command("cat /etc/app/plain.conf", stdout_contains = "everywhere")],
)
"#,
        hosts.addr(0),
        hosts.addr(1)
    );
    let p = Project::new(&hosts, "envc-verify-");
    p.write(&source);
    code(&p.run(&hosts, &["lock"]), 0);
    code(&p.run(&hosts, &["build"]), 0);

    // A lab-hosts file that misses a host, or names one that does not exist, is refused
    // before anything runs.
    let only_web = lab_hosts(&p, &format!("web = \"{}\"\n", hosts.addr(2)));
    let o = p.run(&hosts, &["verify", "--lab-hosts", &only_web]);
    code(&o, 1);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("none is named for `db`"),
        "{}",
        text(&o)
    );
    let typo = lab_hosts(
        &p,
        &format!("web = \"{}\"\ndbb = \"{}\"\n", hosts.addr(2), hosts.addr(3)),
    );
    let o = p.run(&hosts, &["verify", "--lab-hosts", &typo]);
    code(&o, 1);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did you mean `db`?"),
        "{}",
        text(&o)
    );

    let lab = lab_hosts(
        &p,
        &format!(
            "web = \"{}\"\n[db]\naddress = \"{}\"\n",
            hosts.addr(2),
            hosts.addr(3)
        ),
    );
    let o = p.run(&hosts, &["verify", "--lab-hosts", &lab, "--json"]);
    code(&o, 0);
    let (found, summary) = nodes(&o);
    assert_eq!(summary["differs"], false, "{}", text(&o));
    assert_eq!(summary["lab_nodes"], 4, "{}", text(&o));
    // The peers file lists the lab's own addresses: expected to differ; the plain file is
    // the same bytes, mode and check.
    let (verdict, prod, lab_sha) = fact(&found, "web/file:/etc/app/peers.conf", "sha256");
    assert_eq!(verdict, "expected", "{}", text(&o));
    assert_ne!(prod, lab_sha);
    assert_eq!(
        fact(&found, "db/file:/etc/app/plain.conf", "sha256").0,
        "same"
    );
    assert_eq!(
        fact(&found, "db/file:/etc/app/plain.conf", "mode").0,
        "same"
    );
    let check = found["db/file:/etc/app/plain.conf"]["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact"].as_str().unwrap().starts_with("check prod.env:"))
        .cloned()
        .unwrap_or_else(|| panic!("no check compared: {}", text(&o)));
    assert_eq!(
        (check["verdict"].as_str(), check["lab"].as_str()),
        (Some("same"), Some("holds"))
    );
    assert_eq!(fact(&found, "host:db", "host_key").0, "expected");
    // The lab is gone: its store, and what it deployed on the stand-ins.
    assert_eq!(summary["lab_kept"], Value::Null);
    let labs = p.dir.path().join(".envc/labs");
    assert_eq!(std::fs::read_dir(&labs).map(|d| d.count()).unwrap_or(0), 0);
    for i in [2, 3] {
        let o = hosts.ssh(i, "ls /etc/app 2>/dev/null | wc -l");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0", "host {i}");
    }
    // Production was only read.
    assert!(
        String::from_utf8_lossy(&hosts.ssh(1, "cat /etc/app/plain.conf").stdout)
            .contains("everywhere")
    );

    // Someone edits the plain file on production's db: verify names that node and fact.
    hosts.ssh(1, "echo edited >> /etc/app/plain.conf");
    let o = p.run(&hosts, &["verify", "--lab-hosts", &lab, "--json"]);
    code(&o, 3);
    let (found, summary) = nodes(&o);
    assert_eq!(summary["differs"], true);
    let (verdict, prod, lab_sha) = fact(&found, "db/file:/etc/app/plain.conf", "sha256");
    assert_eq!(verdict, "differs", "{}", text(&o));
    assert_ne!(prod, lab_sha);
    let differing: Vec<&String> = found
        .iter()
        .filter(|(_, n)| n["status"] == "differs")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(differing, ["db/file:/etc/app/plain.conf"], "{}", text(&o));
    // The text says it in one line, for people.
    let o = p.run(&hosts, &["verify", "--lab-hosts", &lab]);
    code(&o, 3);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("lab       db/file:/etc/app/plain.conf: sha256 DIFFERS")),
        "{}",
        text(&o)
    );
    assert!(out.contains("verify: DIFFERS"), "{}", text(&o));

    // `--keep` leaves the lab for a look, and says how to see its run and remove it.
    let o = p.run(
        &hosts,
        &[
            "verify",
            "--lab-only",
            "--lab-hosts",
            &lab,
            "--keep",
            "--json",
        ],
    );
    code(&o, 3);
    let kept = nodes(&o).1["lab_kept"].as_str().unwrap().to_string();
    assert!(
        std::path::Path::new(&kept).join("refs/prod").exists(),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("envc destroy --yes"),
        "{}",
        text(&o)
    );
    // The lab's run record and production's are the same kind of evidence, field by field.
    let log = |store: Option<&str>| {
        let mut cmd = hosts.in_controller(env!("CARGO_BIN_EXE_envc"));
        cmd.arg("log")
            .arg(p.dir.path().join("prod.env"))
            .arg("--json");
        match store {
            Some(s) => cmd.env("ENVC_STORE", s),
            None => cmd.env_remove("ENVC_STORE"),
        };
        let o = cmd.output().unwrap();
        code(&o, 0);
        let first = String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap()
            .to_string();
        let v: Value = serde_json::from_str(&first).unwrap();
        (
            v["command"].clone(),
            v.as_object().unwrap().keys().cloned().collect::<Vec<_>>(),
        )
    };
    let (lab_command, lab_fields) = log(Some(&kept));
    let (_, production_fields) = log(None);
    assert_eq!(lab_command, "verify");
    assert_eq!(lab_fields, production_fields);
    assert_eq!(
        String::from_utf8_lossy(&hosts.ssh(3, "cat /etc/app/plain.conf").stdout),
        "the same everywhere\n"
    );
}
