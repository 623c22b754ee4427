//! `exec` nodes end to end on a real SSH host (tests/support/nshosts.rs): a command runs
//! once per change of its inputs, its guards decide on the target, its captured output
//! flows into other nodes, values reach it only as data, a failure or a timeout is an error
//! that leaves no record, and leaving the source runs its undo or forgets it.

use crate::support::{nshosts, output, project};

use nshosts::TestHosts;
use output::{node_outcomes, stdout, summary, text};
use project::Project;

fn remote(hosts: &TestHosts, cmd: &str) -> String {
    String::from_utf8_lossy(&hosts.ssh(0, cmd).stdout).into_owned()
}

/// As the language spells it, and as the command must receive it.
const HOSTILE: &str = r#"it's \"q\" $(touch /tmp/pwned-1) `touch /tmp/pwned-2`; \${HOME} 'x'"#;
const HOSTILE_BYTES: &str = r#"it's "q" $(touch /tmp/pwned-1) `touch /tmp/pwned-2`; ${HOME} 'x'"#;

fn source(addr: &str, count_script: &str, seed_data: &str, keep: bool) -> String {
    let mut s = format!(
        r#"let h = host(name = "h", address = "{addr}")
let count = exec(name = "count", target = h, shell = "{count_script}", capture = true)
let token = file(path = "/etc/token", content = "token=${{count.stdout}}\n", target = h)
let stamp = file(path = "/etc/stamp", content = "after count\n", after = [count], target = h)
let seed = exec(name = "seed", target = h, argv = ["sh", "-c", "cat > /srv/seed"], stdin = "{seed_data}\n", creates = "/srv/seed")
let present = exec(name = "present", target = h, argv = ["touch", "/tmp/pwned-present"], creates = "/etc/hostname")
let unless = exec(name = "unless", target = h, argv = ["touch", "/tmp/pwned-unless"], unless = ["test", "-e", "/srv/seed"], after = [seed])
let only_if = exec(name = "only-if", target = h, argv = ["touch", "/tmp/pwned-only-if"], only_if = ["false"])
let who = exec(
  name = "who",
  target = h,
  argv = ["sh", "-c", "id -un; pwd; printf '%s' \"$GREETING\"", "{HOSTILE}"],
  user = "nobody",
  cwd = "/tmp",
  env = {{ GREETING = "{HOSTILE}" }},
  capture = true,
)
let greeting = file(path = "/etc/greeting", content = who.stdout, target = h)
"#
    );
    if keep {
        s.push_str(
            r#"let undoable = exec(name = "undoable", target = h, argv = ["touch", "/srv/undo-me"], undo = ["rm", "-f", "/srv/undo-me"])
let forgettable = exec(name = "forgettable", target = h, argv = ["touch", "/srv/forget-me"])
"#,
        );
    }
    s
}

#[test]
fn a_command_runs_once_per_change_as_its_guards_decide_and_is_undone_when_it_leaves() {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let p = Project::new(&hosts, "envc-exec-");
    p.write(&source(
        &addr,
        "echo run >> /var/tmp/count; echo counted",
        "data",
        true,
    ));

    let cold = p.run(&hosts, &["build", "--json"]);
    assert_eq!(cold.status.code(), Some(0), "{}", text(&cold));
    let o = node_outcomes(&cold);
    assert_eq!(o["h/exec:count"], "ok: ran: exit 0");
    assert_eq!(
        o["h/exec:present"],
        "ok: did not run: creates: /etc/hostname exists"
    );
    assert_eq!(
        o["h/exec:unless"],
        "ok: did not run: unless: its command succeeded"
    );
    assert_eq!(
        o["h/exec:only-if"],
        "ok: did not run: only_if: its command exited with status 1"
    );
    assert_eq!(
        remote(
            &hosts,
            "cat /var/tmp/count /etc/token /srv/seed; ls /tmp | grep -c pwned || true"
        ),
        "run\ntoken=counted\ndata\n0\n"
    );
    // As `nobody`, in /tmp, with the value as one argument and one variable, both intact.
    assert_eq!(
        remote(&hosts, "cat /etc/greeting"),
        format!("nobody\n/tmp\n{HOSTILE_BYTES}")
    );

    // Nothing changed: nothing runs, not even a guard.
    let noop = p.run(&hosts, &["build"]);
    assert_eq!(summary(&noop), (0, 12, 0), "{}", text(&noop));
    assert_eq!(remote(&hosts, "wc -l < /var/tmp/count"), "1\n");

    // The command changed: it runs again. Its output did not, so the file made from it
    // stays (early cutoff); the node ordered after it runs again, since the command did.
    // `seed`'s input changed too, but its guard skips it: nothing changed on the target,
    // so it keeps its record's facts and what comes after it stays.
    p.write(&source(
        &addr,
        "echo run >> /var/tmp/count; echo counted # v2",
        "data v2",
        true,
    ));
    let changed = p.run(&hosts, &["build", "--json"]);
    assert_eq!(changed.status.code(), Some(0), "{}", text(&changed));
    let o = node_outcomes(&changed);
    assert_eq!(o["h/exec:count"], "ok: ran: exit 0");
    assert_eq!(
        o["h/exec:seed"],
        "ok: did not run: creates: /srv/seed exists"
    );
    assert_eq!(o["h/exec:unless"], "cached");
    assert_eq!(remote(&hosts, "cat /srv/seed"), "data\n");
    assert_eq!(o["h/file:/etc/token"], "cached");
    assert!(o["h/file:/etc/stamp"].starts_with("ok"), "{o:?}");
    assert_eq!(remote(&hosts, "wc -l < /var/tmp/count"), "2\n");

    // What it printed is in the run record.
    let log = p.run(&hosts, &["log"]);
    assert!(
        stdout(&log).contains("h/exec:count: ok: ran: exit 0"),
        "{}",
        text(&log)
    );
    assert!(stdout(&log).contains("counted"), "{}", text(&log));

    // Leaving the source: the plan says which commands are undone and which forgotten.
    p.write(&source(
        &addr,
        "echo run >> /var/tmp/count; echo counted # v2",
        "data v2",
        false,
    ));
    let plan = p.run(&hosts, &["plan"]);
    let plan_text = stdout(&plan);
    assert!(
        plan_text.contains("its undo runs: rm -f /srv/undo-me"),
        "{plan_text}"
    );
    assert!(
        plan_text.contains("it has no `undo`, so it is only forgotten"),
        "{plan_text}"
    );
    let removed = p.run(&hosts, &["build", "--json"]);
    assert_eq!(removed.status.code(), Some(0), "{}", text(&removed));
    let o = node_outcomes(&removed);
    assert_eq!(o["h/exec:undoable"], "ok: undone: exit 0");
    assert_eq!(o["h/exec:forgettable"], "ok: forgotten: it has no undo");
    assert_eq!(
        remote(&hosts, "ls /srv"),
        "envc-repo\nforget-me\nseed\n",
        "the undo removed its file; the forgotten command's file stays"
    );
}

#[test]
fn a_failing_or_hanging_command_is_an_error_with_its_output_and_runs_again_next_time() {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let p = Project::new(&hosts, "envc-exec-");
    let src = |fail: bool| {
        format!(
            r#"let h = host(name = "h", address = "{addr}")
let flaky = exec(name = "flaky", target = h, shell = "echo try >> /var/tmp/tries; echo 'disk full' >&2; exit {code}")
let after = file(path = "/etc/after-flaky", content = "x\n", after = [flaky], target = h)
let hang = exec(name = "hang", target = h, argv = ["sleep", "300"], timeout = 2)
let unknown = exec(name = "unknown", target = h, argv = ["hostname"], capture = true, creates = "/etc/hostname")
let slow_guard = exec(name = "slow-guard", target = h, argv = ["touch", "/var/tmp/slow-guard-ran"], unless = ["sleep", "30"], timeout = 1)
let killed_guard = exec(name = "killed-guard", target = h, argv = ["touch", "/var/tmp/killed-guard-ran"], only_if = ["sh", "-c", "kill -9 $$"])
let loud = exec(name = "loud", target = h, shell = "printf '\\033]0;pwned\\007\\033[2Jgone' >&2; exit 5")
"#,
            code = if fail { 3 } else { 0 }
        )
    };
    p.write(&src(true));
    let o = p.run(&hosts, &["build", "--keep-going"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = output::stderr(&o);
    assert!(
        err.contains("exec `flaky` on host `h`: `sh` exited with status 3")
            && err.contains("disk full"),
        "{err}"
    );
    assert!(
        err.contains("`sleep` did not finish within 2 s and was stopped"),
        "{err}"
    );
    // Skipped by its guard before it ever ran: what it would print is unknown.
    assert!(
        err.contains(
            "creates: /etc/hostname exists, so it did not run, and it never ran here before"
        ),
        "{err}"
    );
    // A target's output cannot drive the user's terminal: its escapes are shown, not sent.
    assert!(
        !err.contains('\x1b') && !err.contains('\x07'),
        "raw terminal controls reached stderr: {err:?}"
    );
    assert!(err.contains("\\x1b]0;pwned\\x07\\x1b[2Jgone"), "{err}");
    let history = p.run(&hosts, &["log"]);
    assert!(
        !output::stdout(&history).contains('\x1b'),
        "{:?}",
        output::stdout(&history)
    );
    // A guard that cannot answer (it timed out, or was killed) decides nothing: the node
    // fails, and its command does not run.
    assert!(
        err.contains("the unless command did not finish within 1 s and was stopped (status 124)"),
        "{err}"
    );
    assert!(
        err.contains("the only_if command was killed by signal 9 (status 137)"),
        "{err}"
    );
    assert_eq!(
        remote(
            &hosts,
            "ls /var/tmp/slow-guard-ran /var/tmp/killed-guard-ran 2>/dev/null | wc -l"
        ),
        "0\n"
    );
    // The timeout stopped the command on the target, not only envc's wait for it.
    assert_eq!(remote(&hosts, "pgrep -x sleep || echo none"), "none\n");
    assert_eq!(
        remote(
            &hosts,
            "test -e /etc/after-flaky && echo present || echo absent"
        ),
        "absent\n"
    );
    // No record: it runs again, and once it succeeds it is done.
    p.write(&src(false));
    let o = p.run(&hosts, &["build", "--json", "--keep-going"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert_eq!(node_outcomes(&o)["h/exec:flaky"], "ok: ran: exit 0");
    assert_eq!(
        remote(&hosts, "wc -l < /var/tmp/tries; cat /etc/after-flaky"),
        "2\nx\n"
    );
}

/// Large values reach the command whole (on the script's stdin, not on a command line that
/// ssh's connection sharing refuses past 256 KiB), and a value no program can take is named
/// before anything is sent.
#[test]
fn large_values_reach_the_command_and_too_large_ones_are_named() {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let p = Project::new(&hosts, "envc-exec-");
    let chunk = "a".repeat(100 << 10);
    let args: Vec<String> = (0..10).map(|_| format!("\"{chunk}\"")).collect();
    p.write(&format!(
        r#"let h = host(name = "h", address = "{addr}")
let big = exec(name = "big", target = h, argv = ["sh", "-c", "echo $# \${{#BIG}} \${{#1}} $(wc -c)", "sh", {args}], env = {{ BIG = "{chunk}" }}, stdin = "{stdin}", capture = true)
let seen = file(path = "/etc/big-seen", content = big.stdout, target = h)
let huge = exec(name = "huge", target = h, argv = ["echo", "{huge}"])
"#,
        args = args.join(", "),
        stdin = "x".repeat(1 << 20),
        huge = "b".repeat(3 << 20),
    ));
    let o = p.run(&hosts, &["build", "--keep-going"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = output::stderr(&o);
    assert!(
        err.contains(
            "`argv[1]` is 3.0 MiB; a program on Linux takes at most 128 KiB in one argument"
        ),
        "{err}"
    );
    assert_eq!(
        remote(&hosts, "cat /etc/big-seen"),
        "10 102400 102400 1048576"
    );
}
