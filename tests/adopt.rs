//! `adopt` end to end, on a namespace host prepared by hand (tests/support/nshosts.rs, with
//! scripts/testhosts/systemd-stand-in as its systemctl): a file, a package and a service
//! that exist before envc are declared with `adopt` lines; the plan shows `adopt` with
//! nothing different, the build changes nothing on the host (its state compared before and
//! after), the next plan says the lines can go, and `destroy` leaves them as they were
//! found. A file that differs is listed by the plan and updated in place by the build; one
//! that is not there fails, naming the line; `destroy --adopted` removes what was adopted.

use crate::support::{nshosts, output, project};

use std::net::Ipv4Addr;
use std::path::PathBuf;

use envc_executor::{State, Store};
use nshosts::TestHosts;
use output::{stderr, stdout, text};
use project::Project;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn remote(hosts: &TestHosts, cmd: &str) -> String {
    let o = hosts.ssh(0, cmd);
    assert!(o.status.success(), "{cmd}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the adopted things are on the host, to the inode and the second: a file rewritten
/// with the same bytes, a package reinstalled or a service restarted would show.
const STATE: &str = "stat -c '%n %U %G %a %i %Y' /etc/envc/app.conf /etc/envc/other.conf; \
    sha256sum /etc/envc/app.conf /etc/envc/other.conf; \
    dpkg-query -W -f '${Package} ${Version} ${Status}\\n' envc-demo; stat -c '%Y' /var/lib/dpkg/status; \
    systemctl is-enabled envc-adopted; systemctl is-active envc-adopted; cat /run/envc-adopted.pid";

/// An init script (the stand-in's systemctl drives /etc/init.d/NAME): a sleeping daemon.
const INIT: &str = r#"#!/bin/sh
pid=/run/envc-adopted.pid
case "$1" in
start) setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! >$pid ;;
stop) [ -f $pid ] && kill "$(cat $pid)"; rm -f $pid ;;
restart) "$0" stop; "$0" start ;;
status) [ -f $pid ] && kill -0 "$(cat $pid)" ;;
esac
"#;

/// The line and column of `needle` in `source`, as `prod.env:LINE:COL`.
fn location(source: &str, needle: &str) -> String {
    let at = source.find(needle).unwrap();
    let line = source[..at].matches('\n').count() + 1;
    let col = at - source[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("prod.env:{line}:{col}")
}

fn records_adopted(p: &Project) -> Vec<(String, bool, bool)> {
    let store = Store::open(&p.store_dir()).unwrap();
    let (_, state) = State::current(&store, "prod").unwrap();
    let records = state.load_records(&store).unwrap();
    records
        .into_iter()
        .filter(|(k, _)| !k.starts_with("host:"))
        .map(|(k, r)| (k, r.adopted, r.created))
        .collect()
}

#[test]
fn a_host_prepared_by_hand_is_adopted_with_zero_changes_and_left_as_found() {
    let mut hosts = TestHosts::start_empty();
    hosts.set_boot_hook(&repo().join("scripts/testhosts/systemd-stand-in"));
    hosts.add_host(&[Ipv4Addr::new(10, 77, 0, 10)], None);
    let p = Project::new(&hosts, "envc-adopt-");
    let name = hosts.name(0).to_string();

    // Prepared by hand, as a machine envc never saw would be.
    remote(
        &hosts,
        &format!(
            "mkdir -p /etc/envc && printf 'hello\\n' >/etc/envc/app.conf && chmod 0640 /etc/envc/app.conf && \
             printf 'old\\n' >/etc/envc/other.conf && \
             DEBIAN_FRONTEND=noninteractive apt-get -q -y install envc-demo=1.0 >/dev/null && \
             printf '%s' {init} >/etc/init.d/envc-adopted && chmod 755 /etc/init.d/envc-adopted && \
             systemctl enable envc-adopted && systemctl start envc-adopted",
            init = envc_executor::shell_quote(INIT)
        ),
    );
    let head = format!(
        r#"let h = host(name = "{name}", address = "{addr}")
let app = file(path = "/etc/envc/app.conf", content = "hello\n", mode = 0o640, target = h)
let demo = package(name = "envc-demo", version = "1.0", target = h)
let svc = service(name = "envc-adopted", target = h)
adopt "{name}/file:/etc/envc/app.conf"
adopt "{name}/package:envc-demo"
adopt "{name}/service:envc-adopted"
"#,
        addr = hosts.addr(0)
    );
    p.write(&head);

    // The plan looks, and finds each as the source declares it.
    let plan = p.run(&hosts, &["plan"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
    let out = stdout(&plan);
    for node in [
        "file:/etc/envc/app.conf",
        "package:envc-demo",
        "service:envc-adopted",
    ] {
        assert!(
            out.contains(&format!(
                "adopt     {name}/{node}\n          found as the source declares it"
            )),
            "{node}: {out}"
        );
    }
    assert!(out.contains("3 to adopt"), "{out}");
    let json = p.run(&hosts, &["plan", "--json"]);
    let line = stdout(&json)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["node"] == format!("{name}/file:/etc/envc/app.conf"))
        .unwrap();
    assert_eq!(line["action"], "adopt", "{line}");
    assert_eq!(line["adopt"]["found"], "same", "{line}");
    assert_eq!(
        line["adopt"]["line"],
        location(&head, "adopt \"").as_str(),
        "{line}"
    );

    // The build records them and changes nothing on the host.
    let before = remote(&hosts, STATE);
    let build = p.run(&hosts, &["build"]);
    assert_eq!(build.status.code(), Some(0), "{}", text(&build));
    assert_eq!(
        stderr(&build)
            .matches("adopted as found: nothing changed on the target")
            .count(),
        3,
        "{}",
        text(&build)
    );
    assert_eq!(remote(&hosts, STATE), before, "{}", text(&build));
    for (key, adopted, created) in records_adopted(&p) {
        assert!(
            adopted && !created,
            "{key}: adopted {adopted}, created {created}"
        );
    }

    // Once recorded, the lines have done their work: nothing to do, and the plan says so.
    let again = p.run(&hosts, &["plan"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        stdout(&again).contains("0 to create, 0 to update"),
        "{}",
        text(&again)
    );
    assert!(
        stderr(&again).contains(&format!(
            "warning: `{name}/file:/etc/envc/app.conf` is already managed; the `adopt` line at {} can go",
            location(&head, &format!("adopt \"{name}/file"))
        )),
        "{}",
        text(&again)
    );

    // A file that differs: listed by the plan, updated in place by the build.
    let with_other = format!(
        "{head}let other = file(path = \"/etc/envc/other.conf\", content = \"new\\n\", target = h)\nadopt \"{name}/file:/etc/envc/other.conf\"\n"
    );
    p.write(&with_other);
    let plan = p.run(&hosts, &["plan"]);
    let out = stdout(&plan);
    assert!(
        out.contains(&format!("adopt     {name}/file:/etc/envc/other.conf\n"))
            && out.contains("sha256: found ")
            && out.contains("updated in place to what the source says (not created)"),
        "{}",
        text(&plan)
    );
    let build = p.run(&hosts, &["build"]);
    assert_eq!(build.status.code(), Some(0), "{}", text(&build));
    assert!(
        stderr(&build).contains("adopted, and updated in place"),
        "{}",
        text(&build)
    );
    assert_eq!(remote(&hosts, "cat /etc/envc/other.conf"), "new\n");

    // One that is not there: the build fails, naming the line and the fix.
    let with_ghost = format!(
        "{with_other}let ghost = file(path = \"/etc/envc/ghost.conf\", content = \"x\\n\", target = h)\nadopt \"{name}/file:/etc/envc/ghost.conf\"\n"
    );
    p.write(&with_ghost);
    let build = p.run(&hosts, &["build"]);
    assert_eq!(build.status.code(), Some(4), "{}", text(&build));
    assert!(
        text(&build).contains(&format!(
            "is adopted (line {}), but there is no such file on `{name}`: create it there first, or remove the `adopt` line",
            location(&with_ghost, &format!("adopt \"{name}/file:/etc/envc/ghost"))
        )),
        "{}",
        text(&build)
    );
    assert_eq!(remote(&hosts, "ls /etc/envc"), "app.conf\nother.conf\n");
    p.write(&with_other);

    // Destroy leaves what was adopted as it was found.
    let before = remote(&hosts, STATE);
    let destroy = p.run(&hosts, &["destroy", "--yes"]);
    assert_eq!(destroy.status.code(), Some(0), "{}", text(&destroy));
    assert!(
        text(&destroy).contains("left as it was found"),
        "{}",
        text(&destroy)
    );
    assert_eq!(remote(&hosts, STATE), before);

    // Adopted again (the records are gone, the lines are still there), then removed with
    // `destroy --adopted`, as if envc had made them.
    let build = p.run(&hosts, &["build"]);
    assert_eq!(build.status.code(), Some(0), "{}", text(&build));
    assert_eq!(remote(&hosts, STATE), before, "{}", text(&build));
    let destroy = p.run(&hosts, &["destroy", "--yes", "--adopted"]);
    assert_eq!(destroy.status.code(), Some(0), "{}", text(&destroy));
    let after = remote(
        &hosts,
        "ls /etc/envc; dpkg-query -W -f '${Status}' envc-demo 2>/dev/null; echo; systemctl is-enabled envc-adopted || true",
    );
    assert!(
        !after.contains(".conf")
            && !after.contains("install ok installed")
            && after.ends_with("disabled\n"),
        "{after}\n{}",
        text(&destroy)
    );
}
