//! Rolling builds end to end (issue 37): six namespace hosts run Debian's real nginx,
//! installed from the lockfile's pinned `.deb`s, with systemd stood in for by
//! scripts/testhosts/systemd-stand-in (as tests/aws_example.rs installs it). One lock and
//! one install, all hosts at once; then `rollout "web": webs, batch = 2, max_failures = 0`:
//! a good config goes out batch by batch, and a config that breaks nginx's restart stops
//! the rollout after its first batch, the four other hosts untouched.
//!
//! Needs root, the network (Debian's archive, for `envc lock`) and what
//! tests/support/nshosts.rs needs.

use crate::support::{nshosts, output, project};

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use nshosts::TestHosts;
use output::{stdout, text};
use project::Project;

const WEBS: usize = 6;
const CONF: &str = "/etc/nginx/conf.d/site.conf";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Six web hosts, nginx on each with `conf` as its site's config and restarted when it
/// changes, answering on the host's address once restarted; with `rollout` after them.
fn source(hosts: &TestHosts, conf: &str, rollout: &str) -> String {
    let webs: Vec<String> = (0..WEBS)
        .map(|i| {
            format!(
                "host(name = \"web-{i}\", address = \"{}\", updates = false)",
                hosts.addr(i)
            )
        })
        .collect();
    format!(
        r#"let webs = [{}]
let sites = [for w in webs => {{
  nginx = package(name = "nginx", target = w),
  conf = file(path = "{CONF}", content = {conf:?}, target = w),
}}]
let services = [for i, s in sites => service(
  name = "nginx",
  target = webs[i],
  after = [s.nginx],
  restart_on = [s.conf],
  expect = [http("http://${{webs[i].address}}/", body_contains = "nginx")],
)]
{rollout}
"#,
        webs.join(",\n  ")
    )
}

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", text(o));
}

/// The `--json` lines of `o` that are objects with `key`.
fn lines_with(o: &Output, key: &str) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get(key).is_some())
        .collect()
}

/// The host a node key (`web-3/file:/etc/…`, `host:web-3`) is on.
fn host_of(key: &str) -> &str {
    key.strip_prefix("host:")
        .unwrap_or_else(|| key.split('/').next().unwrap())
}

#[test]
fn a_rollout_goes_batch_by_batch_and_stops_after_a_batch_that_breaks_nginx() {
    let mut hosts = TestHosts::start_empty();
    hosts.set_boot_hook(&repo().join("scripts/testhosts/systemd-stand-in"));
    for i in 0..WEBS {
        let addr = std::net::Ipv4Addr::new(10, 77, 0, 10 + u8::try_from(i).unwrap());
        hosts.add_host(&[addr], None);
    }
    let p = Project::new(&hosts, "envc-rolling-");
    let rollout = "rollout \"web\": webs, batch = 2, max_failures = 0";
    let good = "# v1\n";

    // One lock, where Debian's archive is reachable (the machine's own namespace), and the
    // pinned closures fetched into the store the build reads, as a build beside the test
    // would: the hosts' namespace reaches no archive.
    p.write(&source(&hosts, good, ""));
    let env_file = p.root().join("prod.env");
    let lock = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("lock")
        .arg(&env_file)
        .env_remove("ENVC_STORE")
        .env_remove("CI")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ok(&lock);
    p.fetch_pinned_debs(&p.root().join("prod.lock"));

    // The install: no rollout yet, every host at once.
    ok(&p.run(&hosts, &["build", "--locked"]));
    let conf_on = |i: usize| {
        let o = hosts.ssh(i, &format!("cat {CONF}"));
        ok(&o);
        stdout(&o)
    };

    // The plan shows the batches; a good config then goes out two hosts at a time: no
    // node on a later batch's hosts finishes before every node of the batch before it.
    let v2 = "# v2\n";
    p.write(&source(&hosts, v2, rollout));
    let plan = p.run(&hosts, &["plan"]);
    ok(&plan);
    assert!(
        stdout(&plan).contains(
            "rollout web: batch 1 web-0 web-1, batch 2 web-2 web-3, batch 3 web-4 web-5 (max_failures 0)"
        ),
        "{}",
        text(&plan)
    );
    let rolled = p.run(&hosts, &["build", "--locked", "--json"]);
    ok(&rolled);
    let batch_of = |key: &str| {
        let host = host_of(key);
        let i: usize = host.strip_prefix("web-").unwrap().parse().unwrap();
        i / 2
    };
    let finished: Vec<(String, usize)> = lines_with(&rolled, "event")
        .iter()
        .filter(|e| e["outcome"] != "cached")
        .map(|e| {
            let key = e["node"].as_str().unwrap().to_string();
            let b = batch_of(&key);
            (key, b)
        })
        .collect();
    assert_eq!(
        finished.len(),
        2 * WEBS,
        "a file and a restart per host: {finished:?}"
    );
    assert!(
        finished.windows(2).all(|w| w[0].1 <= w[1].1),
        "batches out of order: {finished:?}"
    );
    let outcome = &lines_with(&rolled, "rollout")[0]["rollout"];
    assert_eq!(outcome["started"], 3, "{outcome}");
    assert!(outcome.get("stopped").is_none(), "{outcome}");
    for i in 0..WEBS {
        assert_eq!(conf_on(i), v2, "web-{i}");
    }

    // A config nginx refuses: its restart fails on the first batch's two hosts, more than
    // max_failures = 0, so no later batch starts and their hosts keep v2.
    let broken = "this is not an nginx directive;\n";
    p.write(&source(&hosts, broken, rollout));
    let stopped = p.run(&hosts, &["build", "--locked", "--json"]);
    assert_ne!(stopped.status.code(), Some(0), "{}", text(&stopped));
    let outcome = &lines_with(&stopped, "rollout")[0]["rollout"];
    assert_eq!(outcome["started"], 1, "{outcome}");
    assert_eq!(
        outcome["failed"],
        serde_json::json!(["web-0", "web-1"]),
        "{outcome}"
    );
    assert_eq!(
        outcome["untouched"],
        serde_json::json!(["web-2", "web-3", "web-4", "web-5"]),
        "{outcome}"
    );
    assert!(
        outcome["stopped"]
            .as_str()
            .unwrap()
            .contains("stopped after batch 1 of 3"),
        "{outcome}"
    );
    // Nothing ran on the later batches' hosts: their files were held and skipped, and
    // the restarts waiting for them with them.
    let events = lines_with(&stopped, "event");
    for e in events.iter().filter(|e| e["event"] == "node") {
        let key = e["node"].as_str().unwrap();
        let why = e["outcome"].as_str().unwrap();
        if batch_of(key) > 0 && key.contains("/file:") {
            assert!(
                why.starts_with("skipped: rollout `web` stopped after batch 1 of 3")
                    && why.ends_with(&format!("`{}` left untouched", host_of(key))),
                "{e}"
            );
        } else if batch_of(key) > 0 {
            assert!(why == "cached" || why.starts_with("skipped: "), "{e}");
        }
    }
    for i in 2..WEBS {
        assert_eq!(conf_on(i), v2, "web-{i} is untouched");
        let o = hosts.ssh(i, "pgrep -x nginx >/dev/null && echo running");
        assert_eq!(stdout(&o).trim(), "running", "web-{i}: {}", text(&o));
    }
    // Automatic rollback put the first batch back: v2 again, nginx serving it, and the
    // run says so for each of the two hosts' config and restart.
    for i in 0..2 {
        assert_eq!(conf_on(i), v2, "web-{i} is rolled back");
        let o = hosts.ssh(i, "pgrep -x nginx >/dev/null && echo running");
        assert_eq!(stdout(&o).trim(), "running", "web-{i}: {}", text(&o));
    }
    let mut rolled_back: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "rollback")
        .map(|e| e["node"].as_str().unwrap())
        .collect();
    rolled_back.sort();
    rolled_back.dedup();
    let hosts_rolled_back: Vec<&str> = rolled_back.iter().map(|k| host_of(k)).collect();
    assert!(
        hosts_rolled_back
            .iter()
            .all(|h| *h == "web-0" || *h == "web-1")
            && rolled_back.iter().any(|k| k.starts_with("web-0/file:"))
            && rolled_back.iter().any(|k| k.starts_with("web-1/file:")),
        "the first batch's configs, and nothing of the later batches, rolled back: {rolled_back:?}"
    );
    let summary = &lines_with(&stopped, "summary")[0]["summary"];
    assert!(summary["rolled_back"].as_u64().unwrap() >= 2, "{summary}");

    // The next plan still has the untouched hosts' changes to do.
    let plan = p.run(&hosts, &["plan"]);
    ok(&plan);
    // (web-0 and web-1 too: a rollback keeps the records from before the update.)
    for i in 0..WEBS {
        assert!(
            stdout(&plan).contains(&format!("update    web-{i}/file:{CONF}")),
            "{}",
            text(&plan)
        );
    }

    // The run record says the same.
    let log = p.run(&hosts, &["log", "--json"]);
    ok(&log);
    assert!(
        stdout(&log).contains("\"untouched\":[\"web-2\",\"web-3\",\"web-4\",\"web-5\"]"),
        "{}",
        text(&log)
    );
}
