//! `moved` end to end (issue 37) on a real SSH host (tests/support/nshosts.rs): a host
//! renamed in the source keeps everything on it. The plan says `moved` for the host and
//! what is on it, the build changes nothing on the host and re-keys the records, the next
//! plan is all unchanged and says the `moved` line can go, and the log shows the moves.

use crate::support::{nshosts, output, project};

use std::collections::BTreeMap;
use std::process::Output;

use nshosts::TestHosts;
use output::{stderr, stdout, summary, text};
use project::Project;

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
}

/// A host named `name` with a file and a package on it, and `extra` after.
fn source(hosts: &TestHosts, name: &str, extra: &str) -> String {
    format!(
        "import \"std/debian\"\n\
         let web = host(name = \"{name}\", address = \"{}\")\n\
         let motd = file(path = \"/etc/motd\", content = \"managed by envc\\n\", target = web)\n\
         let pkgs = debian.packages(web, {{ hello = \"\" }})\n{extra}",
        hosts.addr(0)
    )
}

/// `plan --json`'s node lines: key → (action, moved_from).
fn planned(o: &Output) -> BTreeMap<String, (String, Option<String>)> {
    stdout(o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("node").is_some())
        .map(|v| {
            (
                v["node"].as_str().unwrap().to_string(),
                (
                    v["action"].as_str().unwrap().to_string(),
                    v["moved_from"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

/// What on the host shows a change: the file's inode and change time, and how many times
/// apt or dpkg ran.
fn host_state(hosts: &TestHosts) -> String {
    let o = hosts.ssh(
        0,
        "stat -c '%i %Z' /etc/motd; cat /var/log/apt/history.log 2>/dev/null | grep -c Commandline; wc -l < /var/log/dpkg.log",
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_renamed_host_keeps_everything_on_it_and_nothing_runs() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts, "envc-moved-");
    p.write(&source(&hosts, "web-0", ""));
    ok(&p.run(&hosts, &["build"]));
    let before = host_state(&hosts);

    // Renamed without `moved`: everything on it would be deleted and created again.
    p.write(&source(&hosts, "web-a", ""));
    let naive = p.run(&hosts, &["plan", "--json"]);
    ok(&naive);
    let actions: Vec<String> = planned(&naive).into_values().map(|(a, _)| a).collect();
    assert!(
        actions.iter().all(|a| a == "create" || a == "delete")
            && actions.contains(&"delete".into()),
        "{}",
        text(&naive)
    );

    // With `moved`, each of them moves, named by its old key.
    p.write(&source(
        &hosts,
        "web-a",
        "moved \"host:web-0\" -> \"host:web-a\"\n",
    ));
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let nodes = planned(&plan);
    let expected: BTreeMap<String, (String, Option<String>)> = [
        ("host:web-a", "host:web-0"),
        ("web-a/file:/etc/motd", "web-0/file:/etc/motd"),
        ("web-a/package:hello", "web-0/package:hello"),
    ]
    .into_iter()
    .map(|(k, from)| (k.to_string(), ("moved".to_string(), Some(from.to_string()))))
    .collect();
    assert_eq!(nodes, expected, "{}", text(&plan));
    let text_plan = p.run(&hosts, &["plan"]);
    assert!(
        stdout(&text_plan).contains(
            "moved     web-a/file:/etc/motd\n          moved from `web-0/file:/etc/motd`"
        ),
        "{}",
        text(&text_plan)
    );

    // The build re-keys the records and touches nothing on the host.
    let build = p.run(&hosts, &["build"]);
    ok(&build);
    assert_eq!(summary(&build), (0, 0, 0), "{}", text(&build));
    assert!(stdout(&build).contains(", 3 moved,"), "{}", text(&build));
    assert_eq!(
        host_state(&hosts),
        before,
        "the host changed: {}",
        text(&build)
    );

    // Nothing is left to do, and the `moved` line can go.
    let again = p.run(&hosts, &["plan", "--json"]);
    ok(&again);
    let actions: Vec<(String, String)> = planned(&again)
        .into_iter()
        .map(|(k, (a, _))| (k, a))
        .collect();
    assert!(
        actions.iter().all(|(_, a)| a == "unchanged"),
        "{}",
        text(&again)
    );
    assert_eq!(actions.len(), 3, "{}", text(&again));
    assert!(
        stderr(&again).contains(
            "warning: moved host:web-0 -> host:web-a: nothing recorded under host:web-0; this line can go"
        ),
        "{}",
        text(&again)
    );
    let rebuild = p.run(&hosts, &["build"]);
    ok(&rebuild);
    assert_eq!(summary(&rebuild), (0, 3, 0), "{}", text(&rebuild));

    // Without the line, nothing changes either.
    p.write(&source(&hosts, "web-a", ""));
    let without = p.run(&hosts, &["plan"]);
    ok(&without);
    assert!(
        stdout(&without)
            .contains("plan: 0 to create, 0 to update, 0 to replace, 0 to delete, 3 unchanged"),
        "{}",
        text(&without)
    );

    // The log names each move.
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    assert!(
        stdout(&log)
            .contains("moved     web-a/package:hello: from web-0/package:hello, nothing ran"),
        "{}",
        text(&log)
    );
}

/// Issue 59, item 3: `moved "host:r" -> "host:s"` while a file and a command on it leave the
/// source. Their records follow the host (`r/...` to `s/...`), as `terraform state mv`
/// carries a resource's children: the build deletes the file and runs the command's undo on
/// the host by its new name, and later builds and `destroy` work. Before, every build and
/// destroy exited 4 ("no address is known for `r`"), leaving both on the host.
#[test]
fn what_leaves_the_source_with_a_rename_is_removed_on_the_renamed_host() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts, "envc-moved-carry-");
    let source = |name: &str, extra: &str| {
        format!(
            "let web = host(name = \"{name}\", address = \"{}\")\n\
             let motd = file(path = \"/etc/envc-motd\", content = \"managed by envc\\n\", target = web)\n{extra}",
            hosts.addr(0)
        )
    };
    p.write(&source(
        "r",
        "let issue = file(path = \"/etc/envc-issue\", content = \"leaves\\n\", target = web)\n\
         let join = exec(name = \"join\", target = web, argv = [\"touch\", \"/srv/joined\"], undo = [\"rm\", \"-f\", \"/srv/joined\"])\n",
    ));
    ok(&p.run(&hosts, &["build"]));
    let on_host = |path: &str| hosts.ssh(0, &format!("test -e {path}")).status.success();
    assert!(on_host("/etc/envc-issue") && on_host("/srv/joined"));

    p.write(&source("s", "moved \"host:r\" -> \"host:s\"\n"));
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let nodes = planned(&plan);
    let actions: BTreeMap<&str, &str> = (nodes.iter())
        .map(|(k, (a, _))| (k.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        actions,
        BTreeMap::from([
            ("host:s", "moved"),
            ("s/exec:join", "delete"),
            ("s/file:/etc/envc-issue", "delete"),
            ("s/file:/etc/envc-motd", "moved"),
        ]),
        "{}",
        text(&plan)
    );

    let build = p.run(&hosts, &["build"]);
    ok(&build);
    assert!(
        !on_host("/etc/envc-issue") && !on_host("/srv/joined"),
        "{}",
        text(&build)
    );
    assert!(on_host("/etc/envc-motd"), "{}", text(&build));
    let again = p.run(&hosts, &["build"]);
    ok(&again);
    assert_eq!(summary(&again), (0, 2, 0), "{}", text(&again));
    let destroy = p.run(&hosts, &["destroy", "--yes"]);
    ok(&destroy);
    assert!(!on_host("/etc/envc-motd"), "{}", text(&destroy));
}

/// Issue 60, item 2 (and 59, item 10): `moved` onto a key that has records of its own.
/// Before, the plan carried what the new key lacked and deleted the old machine's records
/// (for a VM, the VM and its disk) without a word. Now `plan` and `build` refuse the line
/// with `moved::target-exists` at the line, and change nothing.
#[test]
fn a_move_onto_a_key_with_records_of_its_own_is_refused() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts, "envc-moved-onto-");
    let host = |name: &str, path: &str| {
        format!(
            "let {v} = host(name = \"{name}\", address = \"{}\")\n\
             let {v}_f = file(path = \"{path}\", content = \"{name}\\n\", target = {v})\n",
            hosts.addr(0),
            v = name.replace('-', "_"),
        )
    };
    p.write(&format!(
        "{}{}",
        host("web-0", "/etc/envc-a"),
        host("web-b", "/etc/envc-b")
    ));
    ok(&p.run(&hosts, &["build"]));

    p.write(&format!(
        "{}moved \"host:web-0\" -> \"host:web-b\"\n",
        host("web-b", "/etc/envc-b")
    ));
    for cmd in ["plan", "build"] {
        let o = p.run(&hosts, &[cmd]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", text(&o));
        let err = stderr(&o).replace(&p.root().display().to_string(), "[project]");
        assert!(err.contains("moved::target-exists"), "{cmd}: {err}");
        if cmd == "plan" {
            insta::assert_snapshot!("moved-target-exists", err);
        }
    }
    // Nothing changed: both hosts' files are there and recorded.
    for path in ["/etc/envc-a", "/etc/envc-b"] {
        assert!(hosts.ssh(0, &format!("test -e {path}")).status.success());
    }
    p.write(&format!(
        "{}{}",
        host("web-0", "/etc/envc-a"),
        host("web-b", "/etc/envc-b")
    ));
    let plan = p.run(&hosts, &["plan"]);
    ok(&plan);
    assert!(
        stdout(&plan).contains("0 to delete, 4 unchanged"),
        "{}",
        text(&plan)
    );
}
