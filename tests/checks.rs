//! Checks end to end, against a real SSH host (tests/support/nshosts.rs): preconditions that
//! fail leave the target untouched, postconditions that never hold fail after their timeout
//! with their output, a failed node is retried by the next build, passing checks are in the
//! run record, a changed postcondition is checked without redeploying, and `drift --checks`
//! runs them on demand.

use crate::support::{nshosts, output, project};

use std::time::{Duration, Instant};

use envc_executor::record::{NodeOutcome, RunRecord};
use envc_executor::{State, Store};
use nshosts::TestHosts;
use output::{stdout, summary, text};
use project::Project;

/// The outcomes of the newest run, by node key.
fn last_run(p: &Project) -> Vec<NodeOutcome> {
    let store = Store::open(&p.store_dir()).unwrap();
    let (_, state) = State::current(&store, "prod").unwrap();
    store
        .get_json::<RunRecord>(&state.run.unwrap())
        .unwrap()
        .nodes
}

fn outcome<'a>(run: &'a [NodeOutcome], key: &str) -> &'a NodeOutcome {
    run.iter()
        .find(|n| n.node.ends_with(key))
        .unwrap_or_else(|| panic!("no {key} in {run:#?}"))
}

fn remote(hosts: &TestHosts, cmd: &str) -> String {
    String::from_utf8_lossy(&hosts.ssh(0, cmd).stdout).into_owned()
}

/// The line and column of `needle` in `source`, as `prod.env:LINE:COL`.
fn location(source: &str, needle: &str) -> String {
    let at = source.find(needle).unwrap();
    let line = source[..at].matches('\n').count() + 1;
    let col = at - source[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("prod.env:{line}:{col}")
}

#[test]
fn checks_guard_and_prove_what_a_build_did() {
    let hosts = TestHosts::start(1);
    let p = Project::in_subdir(&hosts, "envc-checks-", "env");
    // A web server on the host, serving /srv/www, for the http postcondition.
    hosts.ssh(
        0,
        "mkdir -p /srv/www /srv/full && touch /srv/full/x && \
         (setsid python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv/www \
          >/dev/null 2>&1 </dev/null &)",
    );
    let source = format!(
        r#"let h = host(name = "{name}", address = "{addr}")
let page = file(
  path = "/srv/www/index.html",
  content = "<h1>hello</h1>\n",
  target = h,
  require = [free_space("/srv", 1MiB), os_release("debian")],
  expect = [
    http("http://127.0.0.1:8080/index.html", body_contains = "hello", timeout = 3),
    tcp(22),
    command("test -n '${{h.host_key}}'"),
  ],
)
let guarded = file(path = "/srv/full/new", content = "x\n", target = h, require = [empty_dir("/srv/full")])
let flag = file(path = "/srv/flag", content = "x\n", target = h, expect = [command("cat /srv/ready", timeout = 2)])
let after_flag = file(path = "/srv/after", content = "x\n", target = h, after = [flag])
"#,
        name = hosts.name(0),
        addr = hosts.addr(0),
    );
    p.write(&source);

    // Plan lists every node's checks with where they are written.
    let plan = p.run(&hosts, &["plan"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
    let planned = stdout(&plan);
    assert!(
        planned.contains(&format!(
            "require empty_dir(\"/srv/full\")  ({})",
            location(&source, "empty_dir")
        )),
        "{planned}"
    );
    assert!(
        planned.contains("expect  command(\"test -n '${") && planned.contains(".host_key}'\")"),
        "deferred values are named before they are known: {planned}"
    );

    let started = Instant::now();
    let first = p.run(&hosts, &["build"]);
    let took = started.elapsed();
    assert_eq!(first.status.code(), Some(4), "{}", text(&first));
    let out = text(&first);
    // A precondition that fails leaves the target untouched, and says where and why.
    assert!(
        out.contains(&format!(
            "precondition empty_dir(\"/srv/full\") at {} does not hold",
            location(&source, "empty_dir")
        )) && out.contains("/srv/full is not empty"),
        "{out}"
    );
    assert_eq!(remote(&hosts, "ls /srv/full"), "x\n");
    // A postcondition that never holds fails after its timeout, with its output; what
    // depends on it does not run.
    assert!(
        out.contains(&format!(
            "postcondition command(\"cat /srv/ready\", timeout = 2) at {} does not hold after",
            location(&source, "command(\"cat")
        )) && out.contains("No such file or directory"),
        "{out}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_eq!(
        remote(&hosts, "ls /srv/flag /srv/after 2>&1"),
        "ls: cannot access '/srv/after': No such file or directory\n/srv/flag\n"
    );
    let run = last_run(&p);
    let flag = outcome(&run, "file:/srv/flag");
    assert!(flag.outcome.failure().is_some());
    assert!(
        flag.checks[0].attempts >= 2 && !flag.checks[0].ok,
        "{flag:?}"
    );
    assert!(outcome(&run, "file:/srv/after")
        .outcome
        .to_string()
        .starts_with("skipped"));
    // Passing checks are evidence in the run record: each with its location and output.
    let page = outcome(&run, "file:/srv/www/index.html");
    assert!(page.outcome.ran(), "{page:?}");
    let checks: Vec<(&str, bool)> = page
        .checks
        .iter()
        .map(|c| (c.check.as_str(), c.ok))
        .collect();
    assert_eq!(
        checks,
        [
            ("free_space(\"/srv\", at_least = 1MiB)", true),
            ("os_release(\"debian\")", true),
            (
                "http(\"http://127.0.0.1:8080/index.html\", body_contains = \"hello\", timeout = 3)",
                true
            ),
            ("tcp(22)", true),
            (page.checks[4].check.as_str(), true),
        ]
    );
    assert!(
        page.checks[2].output.contains("200"),
        "{:?}",
        page.checks[2]
    );
    assert_eq!(page.checks[2].location, location(&source, "http("));

    // The failed nodes are not recorded: the next build runs them again, and once their
    // checks hold they are done.
    hosts.ssh(0, "rm /srv/full/x && touch /srv/ready");
    let second = p.run(&hosts, &["build"]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    assert_eq!(summary(&second), (3, 2, 0), "{}", text(&second));
    assert_eq!(remote(&hosts, "cat /srv/full/new"), "x\n");

    // A changed postcondition is checked, not redeployed.
    let edited = source.replace("tcp(22)", "tcp(22, timeout = 5)");
    p.write(&edited);
    let plan = stdout(&p.run(&hosts, &["plan"]));
    assert!(plan.contains("check     "), "{plan}");
    hosts.ssh(0, "echo mine > /srv/www/index.html");
    let third = p.run(&hosts, &["build"]);
    assert_eq!(summary(&third), (0, 4, 1), "{}", text(&third));
    assert!(
        text(&third).contains("does not contain \"hello\""),
        "{}",
        text(&third)
    );
    assert_eq!(
        remote(&hosts, "cat /srv/www/index.html"),
        "mine\n",
        "nothing redeployed"
    );

    // drift --checks runs them on demand: the page's no longer holds.
    let drift = p.run(&hosts, &["drift", "--checks"]);
    assert_eq!(drift.status.code(), Some(3), "{}", text(&drift));
    assert!(
        stdout(&drift).contains("1 postcondition do not hold")
            || stdout(&drift).contains("postcondition"),
        "{}",
        text(&drift)
    );
}
