//! `envc build --only / --exclude` end to end on two namespace SSH hosts
//! (tests/support/nshosts.rs): a targeted build runs exactly the named nodes and what they
//! need, says what it left out (summary, run record, `envc log`), spares records of nodes
//! it left out, and the next full plan shows what is still to do.

use crate::support::{nshosts, output, project};

use std::collections::BTreeMap;
use std::process::Output;

use nshosts::TestHosts;
use output::{node_outcomes, stdout, text};
use project::Project;
use serde_json::Value;

/// Per host an app config; on the first also an `exec` that reads the config (so it
/// depends on it) and a marker file (when `marker`).
fn source(hosts: &TestHosts, conf: &str, marker: bool) -> String {
    let mut s = String::new();
    for i in 0..2 {
        s.push_str(&format!(
            "let h{i} = host(name = \"{}\", address = \"{}\")\n\
             let conf{i} = file(path = \"/etc/app.conf\", content = \"{conf}\\n\", target = h{i})\n",
            hosts.name(i),
            hosts.addr(i)
        ));
    }
    s.push_str(
        "let use = exec(name = \"use\", target = h0, argv = [\"sh\", \"-c\", \"mkdir -p /srv && cat /etc/app.conf >> /srv/uses\"], after = [conf0])\n",
    );
    if marker {
        s.push_str("let marker = file(path = \"/etc/marker\", content = \"m\\n\", target = h0)\n");
    }
    s
}

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
}

fn remote(hosts: &TestHosts, i: usize, path: &str) -> String {
    let o = hosts.ssh(i, &format!("cat {path} 2>/dev/null || echo absent"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The last JSON line (the summary) of a `--json` command.
fn summary_json(o: &Output) -> Value {
    let out = stdout(o);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str::<Value>(last).unwrap_or_else(|e| panic!("{e}: {}", text(o)))["summary"]
        .clone()
}

/// Node key → action, from `plan --json`, for the nodes that change.
fn plan_actions(o: &Output) -> BTreeMap<String, String> {
    stdout(o)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["node"].is_string() && v["action"] != "unchanged")
        .map(|v| {
            let key = v["node"].as_str().unwrap().to_string();
            (key, v["action"].as_str().unwrap().to_string())
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    (v.as_array().unwrap().iter())
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn only_and_exclude_on_two_hosts() {
    let hosts = TestHosts::start(2);
    let p = Project::new(&hosts, "envc-targeted-");
    let (a, b) = (hosts.name(0).to_string(), hosts.name(1).to_string());
    let conf0 = format!("{a}/file:/etc/app.conf");
    let key = |s: &str| s.replace("A", &a).replace("B", &b);
    p.write(&source(&hosts, "v1", true));

    // --only a file: it and its machine, not the exec that reads it, nothing on the other.
    let only = p.run(&hosts, &["build", "--json", "--only", &conf0]);
    ok(&only);
    let ran: Vec<String> = node_outcomes(&only).into_keys().collect();
    let mut expected = vec![format!("host:{a}"), conf0.clone()];
    expected.sort();
    assert_eq!(ran, expected, "{}", text(&only));
    let s = summary_json(&only);
    assert_eq!(s["ran"], 2, "{}", text(&only));
    assert_eq!(strings(&s["targeted"]["only"]), vec![conf0.clone()]);
    let left_out = [
        "A/exec:use",
        "A/file:/etc/marker",
        "host:B",
        "B/file:/etc/app.conf",
    ]
    .map(key);
    let mut expected = left_out.to_vec();
    expected.sort();
    let mut got = strings(&s["targeted"]["left_out"]);
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(remote(&hosts, 0, "/etc/app.conf"), "v1\n");
    assert_eq!(remote(&hosts, 0, "/srv/uses"), "absent\n");
    assert_eq!(remote(&hosts, 0, "/etc/marker"), "absent\n");
    assert_eq!(remote(&hosts, 1, "/etc/app.conf"), "absent\n");

    // The run record keeps what was left out; `envc log` shows it.
    let log = p.run(&hosts, &["log", "--json"]);
    ok(&log);
    let run: Value = serde_json::from_str(stdout(&log).lines().next().unwrap()).unwrap();
    assert_eq!(strings(&run["targeted"]["only"]), vec![conf0.clone()]);
    assert_eq!(run["targeted"]["left_out"].as_array().unwrap().len(), 4);
    let log = p.run(&hosts, &["log"]);
    assert!(
        stdout(&log).contains(&format!("left out: 4 nodes (--only {conf0})")),
        "{}",
        text(&log)
    );

    // The next full plan shows what was left out as still to do.
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let creates: BTreeMap<String, String> = left_out
        .iter()
        .map(|k| (k.clone(), "create".to_string()))
        .collect();
    assert_eq!(plan_actions(&plan), creates, "{}", text(&plan));
    assert_eq!(summary_json(&plan)["targeted"], Value::Null);

    // --exclude the config, which changes: it and the exec that reads it are left out,
    // the rest is built.
    p.write(&source(&hosts, "v2", true));
    let excluded = p.run(&hosts, &["build", "--exclude", &conf0]);
    ok(&excluded);
    let out = stdout(&excluded);
    assert!(
        out.contains(&format!(
            "build: left out: 2 nodes (--exclude {conf0}): {conf0}, {a}/exec:use"
        )),
        "{}",
        text(&excluded)
    );
    assert_eq!(remote(&hosts, 0, "/etc/app.conf"), "v1\n");
    assert_eq!(remote(&hosts, 0, "/srv/uses"), "absent\n");
    assert_eq!(remote(&hosts, 0, "/etc/marker"), "m\n");
    assert_eq!(remote(&hosts, 1, "/etc/app.conf"), "v2\n");

    // A node gone from the source is deleted by a targeted build only when it is named.
    p.write(&source(&hosts, "v2", false));
    let other = p.run(&hosts, &["build", "--only", &format!("{b}/*")]);
    ok(&other);
    assert!(stdout(&other).contains(" 0 deleted"), "{}", text(&other));
    assert!(
        stdout(&other).contains(&format!(
            "not deleted (no longer in the source, not selected): {a}/file:/etc/marker"
        )),
        "{}",
        text(&other)
    );
    assert_eq!(remote(&hosts, 0, "/etc/marker"), "m\n");
    let plan = p.run(&hosts, &["plan", "--json"]);
    let expected: BTreeMap<String, String> = [
        (key("A/file:/etc/marker"), "delete"),
        (conf0.clone(), "update"),
        (key("A/exec:use"), "create"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    assert_eq!(plan_actions(&plan), expected, "{}", text(&plan));
    let delete = p.run(&hosts, &["build", "--only", &key("A/file:/etc/marker")]);
    ok(&delete);
    assert!(stdout(&delete).contains(" 1 deleted"), "{}", text(&delete));
    assert_eq!(remote(&hosts, 0, "/etc/marker"), "absent\n");

    // The rest, in full: the exec runs once, after the new config.
    let full = p.run(&hosts, &["build"]);
    ok(&full);
    assert_eq!(remote(&hosts, 0, "/srv/uses"), "v2\n");
    let plan = p.run(&hosts, &["plan", "--json"]);
    assert_eq!(plan_actions(&plan), BTreeMap::new(), "{}", text(&plan));

    // A pattern that matches nothing is an error, with the closest key.
    let bad = p.run(
        &hosts,
        &["build", "--only", &format!("{a}/file:/etc/app.cnf")],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    let err = output::stderr(&bad);
    assert!(err.contains("matches no node"), "{err}");
    assert!(err.contains(&format!("did you mean `{conf0}`?")), "{err}");
}
