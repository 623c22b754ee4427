//! End-to-end tests of the `envc` binary: exit codes, output shapes, determinism across
//! processes, and that no input makes it panic.

use crate::support::output;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use output::{stderr, stdout};

fn envc(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("envc runs")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const EXAMPLES: &[&str] = &[
    "examples/quickstart.env",
    "examples/replset/prod.env",
    "examples/component/prod.env",
    "examples/k8s/prod.env",
    "examples/stacks/core.env",
    "examples/stacks/app.env",
];

#[test]
fn examples_check_format_and_graph() {
    for ex in EXAMPLES {
        let o = envc(&["check", ex], &repo());
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        let o = envc(&["fmt", "--check", ex], &repo());
        assert!(o.status.success(), "{ex} is not formatted: {}", stderr(&o));
        // Each example's committed lockfile covers it (offline: no mirror is asked).
        let o = envc(&["lock", "--check", ex], &repo());
        assert!(
            o.status.success(),
            "{ex}: its lockfile is stale; run `envc lock {ex}`: {}",
            stderr(&o)
        );
        let o = envc(&["graph", ex, "--format", "json"], &repo());
        assert!(o.status.success());
        let g: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("graph JSON");
        let nodes = g["nodes"].as_array().unwrap();
        assert!(!nodes.is_empty());
        let ids: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
        for n in nodes {
            let id = n["id"].as_str().unwrap();
            assert_eq!(id.len(), 64, "a blake3 id in hex");
            assert!([
                "vm", "host", "package", "file", "service", "manifest", "image", "exec", "gitops",
                "stack"
            ]
            .contains(&n["kind"].as_str().unwrap()));
            // Inputs come first: the order is topological.
            let pos = ids.iter().position(|i| *i == id).unwrap();
            for input in n["inputs"].as_array().unwrap() {
                let ip = ids
                    .iter()
                    .position(|i| *i == input.as_str().unwrap())
                    .expect("inputs are nodes of the graph");
                assert!(ip < pos, "{ex}: input listed after its user");
            }
        }
        let o = envc(&["graph", ex, "--format", "dot"], &repo());
        assert!(stdout(&o).starts_with("digraph envc {"));
        let o = envc(&["graph", ex], &repo());
        assert_eq!(
            stdout(&o)
                .lines()
                .filter(|l| !l.starts_with(' ') && !l.starts_with("output"))
                .count(),
            nodes.len()
        );
    }
}

#[test]
fn text_graph_shows_deferred_outputs_for_what_they_are() {
    let o = envc(&["graph", "examples/replset/prod.env"], &repo());
    let out = stdout(&o);
    assert!(
        out.contains("output clients = [\"http://${db-0.address}:2379\" (known after deploy)"),
        "{out}"
    );
    assert!(
        out.contains("\"db-1=http://${db-1.address}:2380\" (known after deploy)"),
        "{out}"
    );
}

#[test]
fn graphs_are_identical_across_processes_and_environments() {
    let ex = "examples/replset/prod.env";
    let a = envc(&["graph", ex, "--format", "json"], &repo());
    // Another working directory, a different environment, a different hash seed: nothing
    // of it may reach an id.
    let b = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["graph", "prod.env", "--format", "json"])
        .current_dir(repo().join("examples/replset"))
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("TZ", "Pacific/Kiritimati")
        .env("LANG", "tr_TR.UTF-8")
        .env("SOURCE_DATE_EPOCH", "1")
        .output()
        .unwrap();
    assert!(a.status.success() && b.status.success());
    assert_eq!(stdout(&a), stdout(&b));
}

#[test]
fn a_user_error_exits_1_with_file_line_col() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.env"),
        "let a = 1\nlet b = a +\nlet c = hots\n",
    )
    .unwrap();
    let o = envc(&["check", "bad.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("error: bad.env:3:1: expected an expression, found `let`"),
        "{err}"
    );
    assert!(
        err.contains("bad.env:3:9"),
        "both problems are reported: {err}"
    );
    assert!(stdout(&o).is_empty());
    let o = envc(&["check", "missing.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot read `missing.env`"),
        "{}",
        stderr(&o)
    );
}

/// A file with thousands of mistakes: the first hundred are shown in reading order, with
/// their place, source and suggestion; the rest are counted; lines far down are placed right
/// (each is found in the file's line index, not by a scan from the top).
#[test]
fn many_errors_show_the_first_hundred_and_count_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("let hosts = 1\n");
    for i in 0..3000 {
        text.push_str(&format!("let y{i} = nope{i}\n"));
    }
    text.push_str("let last = hots\n");
    std::fs::write(dir.path().join("many.env"), &text).unwrap();
    let o = envc(&["check", "--color", "never", "many.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let shown = err
        .lines()
        .filter(|l| l.starts_with("error: many.env:"))
        .count();
    assert_eq!(shown, 100, "{}", &err[..err.len().min(3000)]);
    assert!(
        err.contains("error: many.env:2:10: unknown name `nope0`"),
        "{err}"
    );
    assert!(
        err.contains("error: many.env:101:11: unknown name `nope99`"),
        "{err}"
    );
    assert!(!err.contains("unknown name `nope100`"), "{err}");
    assert!(
        err.contains("error: 2901 more errors not shown (the first 100 are above, in reading order: fix those and check again)"),
        "{err}"
    );
    // The source around a place is the file's own, with its line numbers.
    assert!(err.contains(" 101 │ let y99 = nope99"), "{err}");

    // Near the end of a long file: the right line, and a suggestion.
    let mut text = "let hosts = 1\n".to_string();
    for i in 0..50_000 {
        text.push_str(&format!("let z{i} = 1\n"));
    }
    text.push_str("let last = hots\n");
    std::fs::write(dir.path().join("long.env"), &text).unwrap();
    let o = envc(&["check", "--color", "never", "long.env"], dir.path());
    let err = stderr(&o);
    assert!(
        err.contains("error: long.env:50002:12: unknown name `hots`"),
        "{}",
        &err[err.len().saturating_sub(3000)..]
    );
    assert!(
        err.contains("50002 │ let last = hots"),
        "{}",
        &err[err.len().saturating_sub(3000)..]
    );
    assert!(
        err.contains("did you mean `hosts`?"),
        "{}",
        &err[err.len().saturating_sub(3000)..]
    );
}

#[test]
fn bad_usage_exits_2() {
    let o = envc(&["frobnicate"], &repo());
    assert_eq!(o.status.code(), Some(2));
    let o = envc(&["check"], &repo());
    assert_eq!(o.status.code(), Some(2));
    let o = envc(
        &["check", "examples/quickstart.env", "--set", "novalue"],
        &repo(),
    );
    assert_eq!(o.status.code(), Some(2));
    // No steps at once would build nothing, forever: refused before anything starts.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("e.env"), "output x = 1\n").unwrap();
    for j in ["0", "-1", "x"] {
        let o = envc(&["build", "e.env", "-j", j], dir.path());
        assert_eq!(o.status.code(), Some(2), "-j {j}: {}", stderr(&o));
        assert!(!dir.path().join(".envc").exists(), "-j {j}");
    }
    let o = envc(&["build", "e.env", "--jobs=0"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("0"), "{}", stderr(&o));
}

#[test]
fn lock_update_takes_its_value_after_equals_and_never_a_file() {
    let ex = "examples/quickstart.env";
    // `--update` before the file: the file is the file, not `--update`'s value (offline:
    // with `--check` nothing is resolved).
    let o = envc(&["lock", "--update", ex, "--check"], &repo());
    assert!(o.status.success(), "{}", stderr(&o));
    // A value without `=` is a second word: refused, saying how to write it.
    let o = envc(&["lock", ex, "--update", "security"], &repo());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "hint: `--update` takes its value after `=`: `envc lock {ex} --update=security`"
        )),
        "{}",
        stderr(&o)
    );
    let o = envc(&["lock", "--update", "package:nginx", ex], &repo());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("`envc lock {ex} --update=package:nginx`")),
        "{}",
        stderr(&o)
    );
    // The file given as the value: a usage error that names the fix.
    let o = envc(&["lock", &format!("--update={ex}")], &repo());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("`{ex}` is a file, not a pin key"))
            && stderr(&o).contains(&format!("`envc lock {ex} --update`")),
        "{}",
        stderr(&o)
    );
    // Two files: one at a time.
    let o = envc(&["lock", ex, "examples/k8s/prod.env"], &repo());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("lock one environment at a time"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_parameter_set_twice_is_refused() {
    let o = envc(
        &[
            "check",
            "examples/quickstart.env",
            "--set",
            "vms=1",
            "--set",
            "vms=2",
        ],
        &repo(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--set vms is given twice (`1`, then `2`)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn parameters_from_the_command_line() {
    let ex = "examples/replset/prod.env";
    let count = |set: &[&str]| {
        let mut args = vec!["graph", ex, "--format", "json"];
        for s in set {
            args.extend(["--set", s]);
        }
        let o = envc(&args, &repo());
        assert!(o.status.success(), "{}", stderr(&o));
        let g: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        g["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "vm")
            .count()
    };
    assert_eq!(count(&[]), 3);
    assert_eq!(count(&["members=5", "cluster=\"prod\""]), 5);
    let o = envc(&["check", ex, "--set", "members=4"], &repo());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("odd number of members"));
    let o = envc(&["check", ex, "--set", "members=9"], &repo());
    assert!(stderr(&o).contains("9 is out of range"), "{}", stderr(&o));
}

#[test]
fn show_prints_the_canonical_content() {
    let ex = "examples/quickstart.env";
    let o = envc(
        &["show", ex, "web-1/file:/var/www/html/index.html"],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(d["kind"], "file");
    assert_eq!(d["attrs"]["content"], "<h1>web-1</h1>\n");
    assert_eq!(d["attrs"]["mode"]["mode"], "0o644");
    let id = d["id"].as_str().unwrap();
    let by_prefix = envc(&["show", ex, &id[..10]], &repo());
    assert_eq!(stdout(&by_prefix), stdout(&o));
    let o = envc(&["show", ex, "file:/var/www/html/index.html"], &repo());
    assert_eq!(o.status.code(), Some(1), "ambiguous: one per VM");
    assert!(stderr(&o).contains("matches 2 nodes"));
}

#[test]
fn fmt_rewrites_safely() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.env");
    std::fs::write(&f, "let  x=[1,2]  # keep me\n").unwrap();
    let o = envc(&["fmt", "--check", "a.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "let  x=[1,2]  # keep me\n",
        "--check changes nothing"
    );
    let o = envc(&["fmt", "a.env"], dir.path());
    assert!(o.status.success());
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "let x = [1, 2]  # keep me\n"
    );
    let o = envc(&["fmt", "--check", "a.env"], dir.path());
    assert!(o.status.success());
    std::fs::write(&f, "let x = [1,\n").unwrap();
    let o = envc(&["fmt", "a.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "let x = [1,\n",
        "a file with errors is left alone"
    );
}

#[test]
fn imports_cannot_leave_the_project_even_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.env"), "let s = 1\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.env"),
        dir.path().join("link.env"),
    )
    .unwrap();
    std::fs::write(dir.path().join("main.env"), "import \"./link.env\"\n").unwrap();
    let o = envc(&["check", "main.env"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("outside the project directory"),
        "{}",
        stderr(&o)
    );
}

/// Arbitrary bytes end in exit 0 or 1, never a panic (exit 101) or a signal.
#[test]
fn no_input_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: &[u8] = b"let fn if else for in import type param output assert ([{}]) , . .. ..= : = == => -> + - * / % < > \" ${ } \"\"\" # \n 0o7 512MiB 1 x y vm host file true";
    for _ in 0..40 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                let r = next();
                if r % 7 == 0 {
                    (r >> 8) as u8
                } else {
                    alphabet[(r >> 8) as usize % alphabet.len()]
                }
            })
            .collect();
        std::fs::write(dir.path().join("fuzz.env"), &bytes).unwrap();
        for cmd in [
            &["check", "fuzz.env"][..],
            &["fmt", "--check", "fuzz.env"],
            &["graph", "fuzz.env"],
        ] {
            let o = envc(cmd, dir.path());
            let code = o.status.code();
            assert!(
                matches!(code, Some(0) | Some(1)),
                "{cmd:?} on {bytes:?} exited {code:?}: {}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn a_plan_waits_on_images_and_exits_1_when_a_node_cannot_be_built() {
    let store = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["plan", "examples/quickstart.env"])
        .current_dir(repo())
        .env("ENVC_STORE", store.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("create    image:debian-12"), "{out}");
    assert!(out.contains("create    vm:web-0"), "{out}");
    // Nodes on the VMs wait for them rather than fail on their own.
    assert!(
        out.contains("create    web-0/file:/var/www/html/index.html"),
        "{out}"
    );
    // A template that cannot render: the plan says so at the node, and exits 1.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.env");
    std::fs::write(dir.path().join("t.j2"), "{{ nope.deeper }}\n").unwrap();
    std::fs::write(
        &file,
        "let h = host(name = \"h\", address = \"192.0.2.1\")\nlet f = file(path = \"/x\", template = path(\"t.j2\"), vars = {}, target = h)\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("plan")
        .arg(&file)
        .env("ENVC_STORE", store.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("error: `h/file:/x`: template `t.j2:1`: `nope` is undefined"),
        "{}",
        stdout(&o)
    );
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["output", "examples/quickstart.env"])
        .current_dir(repo())
        .env("ENVC_STORE", store.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("was never built"), "{}", stderr(&o));
}

/// A machine's `adopt` line (a QEMU VM by its disk and port) whose image is not built yet:
/// the plan cannot look for the VM before it knows what it is made of, and says the build
/// looks (the look itself, and each way it fails, is `tests/machines.rs`'s, with a VM up).
#[test]
fn adopting_a_machine_is_planned_before_its_image_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prod.env");
    std::fs::write(
        &file,
        "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\" from { disk = \"/var/lib/vms/legacy.qcow2\", port = 2222 }\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("plan")
        .arg(&file)
        .env("ENVC_STORE", dir.path().join("store"))
        .env_remove("CI")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "adopt     vm:legacy\n          compared with what is there when the build reaches it"
        ),
        "{out}"
    );
}

/// The EC2 example (`examples/aws`, no lockfile committed: its AMI id is one the user's own
/// `envc lock` reads from AWS) checks, formats, graphs and plans with no AWS credentials
/// anywhere and EC2 and Debian's archive unreachable: none of these asks a cloud.
#[test]
fn the_aws_example_checks_and_plans_without_credentials_or_network() {
    let ex = "examples/aws/prod.env";
    let scratch = tempfile::tempdir().unwrap();
    // A port nothing listens on: any request to it fails at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let run = |args: &[&str]| -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_envc"));
        cmd.args(args)
            .current_dir(repo())
            .env("NO_COLOR", "1")
            .env("ENVC_STORE", scratch.path().join("store"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HOME", scratch.path())
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                scratch.path().join("no-credentials"),
            )
            .env("AWS_CONFIG_FILE", scratch.path().join("no-config"))
            .env("AWS_ENDPOINT_URL", &closed)
            .env("ENVC_DEBIAN_MIRROR", &closed)
            .output()
            .unwrap()
    };
    for args in [&["check", ex][..], &["fmt", "--check", ex]] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["graph", ex, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let g: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("graph JSON");
    let mut kinds: Vec<&str> = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["file", "file", "file", "file", "package", "package", "service", "service", "vm", "vm"]
    );
    let o = run(&["plan", ex]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for node in [
        "vm:web-0",
        "vm:web-1",
        "web-0/package:nginx",
        "web-1/file:/etc/nginx/conf.d/upstreams.conf",
        "web-1/service:nginx",
    ] {
        assert!(
            out.contains(&format!("create    {node}\n")),
            "{node}: {out}"
        );
    }
    assert!(out.contains("plan: 10 to create, 0 to update"), "{out}");
    // The machines' count is a parameter.
    let o = run(&["plan", ex, "--set", "web_count=3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("create    vm:web-2\n"),
        "{}",
        stdout(&o)
    );
}

/// `envc ARGS` in `dir` with at most 2 GiB of address space (a regression that reads without
/// bound then fails instead of exhausting the machine), killed when it does not finish within
/// `limit` (a regression that blocks then fails instead of hanging the test).
fn envc_bounded(args: &[&str], dir: &Path, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    use std::time::Instant;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_envc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("envc runs");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "envc {args:?} did not finish within {limit:?}; stderr: {}",
                stderr(&o)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let o = Command::new("mkfifo").arg(path).output().unwrap();
    assert!(o.status.success(), "mkfifo: {}", stderr(&o));
}

#[test]
fn devices_and_fifos_are_refused_not_read() {
    let limit = std::time::Duration::from_secs(60);
    let o = envc_bounded(&["check", "/dev/zero"], &repo(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("zero") && stderr(&o).contains("not a regular file"),
        "{}",
        stderr(&o)
    );

    let dir = tempfile::tempdir().unwrap();
    // The environment file itself.
    mkfifo(&dir.path().join("fifo.env"));
    let o = envc_bounded(&["check", "fifo.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("fifo.env") && stderr(&o).contains("not a regular file"),
        "{}",
        stderr(&o)
    );
    // A file's `source`, and an import.
    mkfifo(&dir.path().join("data"));
    std::fs::write(
        dir.path().join("prod.env"),
        "let h = host(name = \"h\", address = \"@local\")\n\
         let f = file(path = \"/tmp/envc-fifo-test\", source = path(\"data\"), target = h)\n",
    )
    .unwrap();
    let o = envc_bounded(&["check", "prod.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`data`") && stderr(&o).contains("not a regular file"),
        "{}",
        stderr(&o)
    );
    std::fs::write(dir.path().join("imp.env"), "import \"./fifo.env\"\n").unwrap();
    let o = envc_bounded(&["check", "imp.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    // The lockfile beside the environment.
    std::fs::write(dir.path().join("ok.env"), "let x = 1\n").unwrap();
    mkfifo(&dir.path().join("ok.lock"));
    let o = envc_bounded(&["check", "ok.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ok.lock") && stderr(&o).contains("not a regular file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn size_limits_hold_while_reading() {
    let limit = std::time::Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    // Sparse: 100 GiB that takes no disk, and zeros as fast as memory can take them.
    let huge = |name: &str| {
        std::fs::File::create(dir.path().join(name))
            .unwrap()
            .set_len(100 << 30)
            .unwrap();
    };
    huge("big.env");
    let o = envc_bounded(&["check", "big.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("big.env") && stderr(&o).contains("too large"),
        "{}",
        stderr(&o)
    );
    huge("blob");
    std::fs::write(
        dir.path().join("prod.env"),
        "let h = host(name = \"h\", address = \"@local\")\n\
         let f = file(path = \"/tmp/envc-big-test\", source = path(\"blob\"), target = h)\n",
    )
    .unwrap();
    let o = envc_bounded(&["check", "prod.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`blob`") && stderr(&o).contains("too large"),
        "{}",
        stderr(&o)
    );
    std::fs::write(dir.path().join("ok.env"), "let x = 1\n").unwrap();
    huge("ok.lock");
    let o = envc_bounded(&["check", "ok.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ok.lock") && stderr(&o).contains("too large"),
        "{}",
        stderr(&o)
    );
    huge("fmt.env");
    let o = envc_bounded(&["fmt", "--check", "fmt.env"], dir.path(), limit);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("too large"), "{}", stderr(&o));
}

/// The tools a build needs are checked before anything runs: with QEMU and mmdebstrap
/// missing (an empty PATH), a VM's build is one error naming each tool and its Debian
/// package, exit 4, and the store shows that nothing ran.
#[test]
fn a_missing_tool_is_one_error_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("vm.env"),
        "import \"std/debian\"\n\nlet vm = debian.machine(\"t-0\")\n",
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(["build", "vm.env", "--locked=false"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("PATH", empty.path())
        .output()
        .expect("envc runs");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    for (tool, package) in [
        ("qemu-img", "qemu-utils"),
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("mmdebstrap", "mmdebstrap"),
    ] {
        assert!(
            err.contains(&format!("`{tool}` is needed"))
                && err.contains(&format!("Debian's `{package}`")),
            "{tool}: {err}"
        );
    }
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(
        !stdout(&o).contains("build:"),
        "no run summary: {}",
        stdout(&o)
    );
    // Nothing ran: no VM directory, no run in the history.
    assert!(!dir.path().join(".envc/machines").exists());
    let log = envc(&["log", "vm.env"], dir.path());
    assert!(log.status.success(), "{}", stderr(&log));
    assert_eq!(stdout(&log), "", "no run was recorded");
}

/// `envc ARGS` in `dir` with stdout and/or stderr a pipe whose read end is already closed
/// (as `envc … | head -1` is once `head` has its line): every write fails with EPIPE.
fn envc_closed(args: &[&str], dir: &Path, close_stdout: bool, close_stderr: bool) -> Output {
    use std::process::Stdio;
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    Command::new(env!("CARGO_BIN_EXE_envc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdout(if close_stdout {
            closed()
        } else {
            Stdio::piped()
        })
        .stderr(if close_stderr {
            closed()
        } else {
            Stdio::piped()
        })
        .output()
        .expect("envc runs")
}

#[test]
fn a_closed_stdout_or_stderr_is_not_a_panic() {
    let ex = "examples/replset/prod.env";
    for args in [
        &["graph", ex][..],
        &["graph", ex, "--format", "json"],
        &["check", ex],
    ] {
        for (out, err) in [(true, false), (false, true), (true, true)] {
            let o = envc_closed(args, &repo(), out, err);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{args:?} {out} {err}: {}",
                stderr(&o)
            );
        }
    }
    // Diagnostics and an error message go to stderr: a closed one keeps the exit code.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.env"), "let a = hots\n").unwrap();
    for args in [
        &["check", "bad.env"][..],
        &["graph", "bad.env"],
        &["check", "missing.env"],
    ] {
        let o = envc_closed(args, dir.path(), true, true);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
    }
}

/// The company's policy pack (`examples/policies`) judges every example, and each keeps it:
/// each machine names an owner, no VM is over the size limit, every object has an owner
/// label (from its environment's tags).
#[test]
fn every_example_keeps_the_company_policy_pack() {
    for ex in EXAMPLES
        .iter()
        .chain(&["examples/postgres/prod.env", "examples/aws/prod.env"])
    {
        let o = envc(&["check", "--policy", "examples/policies", ex], &repo());
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(", 3 policies kept"),
            "{ex}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("warning"), "{ex}: {}", stderr(&o));
    }
}

/// A pack named in envc.toml holds every command that compiles: a broken mandatory policy
/// stops `check` and `build` (exit 1, nothing built, every offender listed at its place); an
/// advisory one warns and stops nothing.
#[test]
fn a_policy_pack_in_envc_toml_stops_a_build_that_breaks_it() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    std::fs::create_dir_all(pack.join("lib")).unwrap();
    std::fs::write(
        pack.join("vms.env"),
        "import \"./lib/max.env\"\npolicy \"vm-size\": for v in nodes(\"vm\") => v.memory <= max.memory, \"${v.name} has ${v.memory}\"\npolicy \"owner\" advisory: for n in nodes() => contains(n.tags, \"owner\")\n",
    )
    .unwrap();
    std::fs::write(pack.join("lib/max.env"), "let memory = 2GiB\n").unwrap();
    let env = dir.path().join("env");
    std::fs::create_dir_all(&env).unwrap();
    std::fs::write(env.join("envc.toml"), "[policy]\npacks = [\"../pack\"]\n").unwrap();
    let src = "let i = image(name = \"i\")\nlet a = vm(name = \"a\", image = i, memory = 8GiB)\nlet b = vm(name = \"b\", image = i, memory = 1GiB, tags = { owner = \"ops\" })\nlet c = vm(name = \"c\", image = i, memory = 3GiB, tags = { owner = \"ops\" })\n";
    std::fs::write(env.join("prod.env"), src).unwrap();

    let o = envc(&["check", "prod.env"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("2 nodes break policy \"vm-size\""), "{err}");
    assert!(
        err.contains("prod.env:2:9") || err.contains("[prod.env:2:"),
        "{err}"
    );
    assert!(
        err.contains("vm `a`: a has 8GiB") && err.contains("vm `c`: c has 3GiB"),
        "{err}"
    );
    // The pack's files are named as the project's envc.toml names them.
    assert!(err.contains("../pack/vms.env"), "{err}");
    // The advisory one warns about the nodes without an owner, among them the image.
    assert!(
        err.contains("warning:") && err.contains("break policy \"owner\""),
        "{err}"
    );

    let o = envc(&["build", "prod.env"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!env.join(".envc").exists(), "nothing was built or recorded");

    // Within the limit: the check passes, with the warning.
    std::fs::write(
        env.join("prod.env"),
        src.replace("8GiB", "2GiB").replace("3GiB", "1GiB"),
    )
    .unwrap();
    let o = envc(&["check", "prod.env"], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 policies kept"), "{}", stderr(&o));
    // Tags show beside the derivation, and in the graph.
    let o = envc(&["show", "prod.env", "vm:b"], &env);
    let shown: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        shown["tags"],
        serde_json::json!({"owner": "ops"}),
        "{shown}"
    );
    assert!(
        shown["attrs"].get("tags").is_none(),
        "not part of the derivation"
    );
    let o = envc(&["graph", "prod.env", "--format", "json"], &env);
    assert!(
        stdout(&o).contains(r#""tags":{"owner":"ops"}"#),
        "{}",
        stdout(&o)
    );

    // One directory named twice (envc.toml, and the flag by another path) is one pack.
    let o = envc(&["check", "--policy", "../pack/", "prod.env"], &env);
    assert!(stderr(&o).contains("2 policies kept"), "{}", stderr(&o));
    // The environment's own directory is not a pack.
    let o = envc(&["check", "--policy", ".", "prod.env"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the environment's own directory"),
        "{}",
        stderr(&o)
    );

    // A pack that is not a directory of policies is an input error naming it.
    let o = envc(&["check", "--policy", "nowhere", "prod.env"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("policy pack `nowhere`"),
        "{}",
        stderr(&o)
    );
}

/// The summary of a failed check names where the problems are: a policy pack's own error
/// is the pack's, not the environment's (issue 35, item 20).
#[test]
fn a_broken_policy_pack_is_named_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    std::fs::create_dir_all(&pack).unwrap();
    std::fs::write(
        pack.join("vms.env"),
        "policy \"vm-size\": for v in nodes(\"vm\") => v.memroy <= 2GiB\n",
    )
    .unwrap();
    let env = dir.path().join("env");
    std::fs::create_dir_all(&env).unwrap();
    std::fs::write(
        env.join("prod.env"),
        "let v = vm(name = \"a\", image = image(name = \"i\"))\n",
    )
    .unwrap();
    let summary = |args: &[&str]| {
        let o = envc(args, &env);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        err.lines()
            .rfind(|l| l.starts_with("error: envc found"))
            .unwrap_or_else(|| panic!("no summary: {err}"))
            .to_string()
    };
    assert_eq!(
        summary(&["check", "--policy", "../pack", "prod.env"]),
        "error: envc found 1 problem in the policy pack (../pack/vms.env)"
    );
    // With an error of the environment's own too, both are named.
    std::fs::write(env.join("prod.env"), "let v = vm(name = 1)\n").unwrap();
    let both = summary(&["check", "--policy", "../pack", "prod.env"]);
    assert!(
        both.ends_with("in prod.env and the policy pack (../pack/vms.env)"),
        "{both}"
    );
}

/// A secret that is not set says how to set it, with the environment file as typed
/// (issue 35, item 14).
#[test]
fn a_missing_secret_names_the_command_that_sets_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("envs")).unwrap();
    std::fs::write(
        dir.path().join("envs/prod.env"),
        "let h = host(name = \"h\", address = \"192.0.2.1\")\nlet f = file(path = \"/etc/pw\", content = secret(\"db_password\"), target = h)\n",
    )
    .unwrap();
    // `plan` goes on without it, and its summary says how to set it.
    let o = envc(&["plan", "envs/prod.env"], dir.path());
    let all = stdout(&o) + &stderr(&o);
    assert!(
        all.contains("(run `envc secret set envs/prod.env db_password`)"),
        "{all}"
    );
    // `build` stops before anything runs, with the same command in its hint. (Unlocked: CI
    // sets CI, which makes a build locked, and this environment has no lockfile.)
    let o = envc(&["build", "envs/prod.env", "--locked=false"], dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("(run `envc secret set envs/prod.env db_password`)")
            && err.contains("hint: set each secret with `envc secret set envs/prod.env NAME`"),
        "{err}"
    );
    assert!(
        !all.contains("ENV_FILE") && !err.contains("ENV_FILE"),
        "{err}"
    );
}

/// `[params]` of the project's envc.toml give the environment's parameters as `--set` does
/// (the region of a cloud, kept out of the env file's text), and `--set` overrides them.
#[test]
fn envc_toml_params_are_set_like_the_command_line_and_under_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prod.env"),
        "param region: str = \"us-east-1\"\nparam count: int(1..=4) = 1\n\
         let h = host(name = \"h\", address = \"192.0.2.1\")\n\
         let f = file(path = \"/etc/region\", content = \"${region} ${count}\\n\", target = h)\n",
    )
    .unwrap();
    let id = |args: &[&str]| {
        let mut all = vec!["graph", "prod.env", "--format", "json"];
        all.extend(args);
        let o = envc(&all, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        let g: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        g["nodes"][1]["id"].as_str().unwrap().to_string()
    };
    let default = id(&[]);
    let set = id(&["--set", "region=eu-west-1", "--set", "count=2"]);
    std::fs::write(
        dir.path().join("envc.toml"),
        "[params]\nregion = \"eu-west-1\"\ncount = 2\n",
    )
    .unwrap();
    assert_eq!(
        id(&[]),
        set,
        "envc.toml's params are the same inputs as --set"
    );
    assert_ne!(set, default);
    assert_eq!(
        id(&["--set", "region=us-east-1", "--set", "count=1"]),
        default,
        "--set wins"
    );
    // A value of a type --set cannot give, and a value the parameter refuses.
    std::fs::write(dir.path().join("envc.toml"), "[params]\nregion = [\"a\"]\n").unwrap();
    let o = envc(&["check", "prod.env"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("[params] region is an array, not a string"),
        "{}",
        stderr(&o)
    );
    std::fs::write(dir.path().join("envc.toml"), "[params]\ncount = 9\n").unwrap();
    let o = envc(&["check", "prod.env"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("count"), "{}", stderr(&o));
}

/// `envc init` starts a project that checks, formats and plans on the first try, with the
/// CI workflow asked for, and never overwrites: one file there, and nothing is written.
#[test]
fn init_starts_a_project_that_checks_and_plans_and_overwrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("new");
    let o = envc(&["init", "new", "--ci", "gitlab"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["prod.env", "envc.toml", ".gitignore", ".gitlab-ci.yml"] {
        assert!(project.join(f).is_file(), "no {f}: {}", stdout(&o));
    }
    let ci = std::fs::read_to_string(project.join(".gitlab-ci.yml")).unwrap();
    assert!(ci.contains("ENV_FILE: prod.env"), "{ci}");
    assert!(std::fs::read_to_string(project.join(".gitignore"))
        .unwrap()
        .contains(".envc/"));
    for args in [
        &["check", "prod.env"][..],
        &["fmt", "--check", "prod.env"],
        &["plan", "prod.env"],
    ] {
        let o = envc(args, &project);
        assert!(o.status.success(), "{args:?}: {}{}", stdout(&o), stderr(&o));
    }
    let plan = envc(&["plan", "prod.env"], &project);
    assert!(stdout(&plan).contains("5 to create"), "{}", stdout(&plan));

    // Again, over it: refused, every file as it was.
    std::fs::write(project.join("prod.env"), "# mine\n").unwrap();
    let o = envc(&["init", "new", "--ci", "github"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("envc init writes nothing"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(project.join("prod.env")).unwrap(),
        "# mine\n"
    );
    assert!(
        !project.join(".github").exists(),
        "the github workflow was written anyway"
    );
}

/// `envc init` writes only inside DIR (issue 59, item 7): a `.github` linked elsewhere is
/// refused with nothing written there; a DIR that is a file, a device or a dangling link is
/// bad input (exit 1), said before anything is written.
#[test]
fn init_writes_nothing_through_a_link_and_refuses_a_dir_that_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let project = dir.path().join("new");
    std::fs::create_dir(&project).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), project.join(".github")).unwrap();
    let o = envc(&["init", "new", "--ci", "github"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(".github is a link, and envc init writes only inside"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    assert!(!project.join("prod.env").exists(), "written anyway");

    std::fs::write(dir.path().join("a-file"), "mine\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("dangling")).unwrap();
    for (target, says) in [
        ("a-file", "is not a directory"),
        ("/dev/null", "is not a directory"),
        ("dangling", "is a link to nothing"),
    ] {
        let o = envc(&["init", target], dir.path());
        assert_eq!(o.status.code(), Some(1), "{target}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{target}: {}", stderr(&o));
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a-file")).unwrap(),
        "mine\n"
    );
    assert!(!dir.path().join("gone").exists());
}

/// Completions and man pages come from the command line's own definitions: every
/// subcommand is in them, and bash reads its script without a syntax error.
#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = envc(&["completions", shell], dir.path());
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        for sub in ["build", "init", "lock", "man", "completions"] {
            assert!(stdout(&o).contains(sub), "{shell} completes no `{sub}`");
        }
        if shell == "bash" {
            let script = dir.path().join("envc.bash");
            std::fs::write(&script, o.stdout).unwrap();
            let syntax = Command::new("bash")
                .arg("-n")
                .arg(&script)
                .output()
                .unwrap();
            assert!(syntax.status.success(), "{}", stderr(&syntax));
        }
    }
    let o = envc(&["completions", "tcsh"], dir.path());
    assert_eq!(
        o.status.code(),
        Some(2),
        "a shell it does not know is a usage error"
    );

    let o = envc(&["man", "pages"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let pages = dir.path().join("pages");
    for (page, says) in [
        ("envc.1", "envc\\-build(1)"),
        ("envc-build.1", "\\-\\-keep\\-going"),
        ("envc-store-verify.1", "\\-\\-repair"),
        ("envc-init.1", "\\-\\-ci"),
    ] {
        let text =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(
            text.starts_with(".ie \\n(.g .ds Aq") || text.contains(".TH"),
            "{page} is no man page"
        );
        assert!(text.contains(says), "{page} does not say {says}:\n{text}");
    }
}

/// `git ARGS` in the checkout the tests are built from, or None outside one (a tarball).
fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(repo())
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[test]
fn version_names_the_commit_its_date_and_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let o = envc(&["version", "--json"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["format_version"], "1.0");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let target = v["target"].as_str().unwrap();
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains(std::env::consts::OS),
        "{target}"
    );
    let top = git(&["rev-parse", "--show-toplevel"]);
    let in_checkout = top
        .is_some_and(|t| Path::new(&t).canonicalize().unwrap() == repo().canonicalize().unwrap());
    if in_checkout {
        let head = git(&["rev-parse", "--short=12", "HEAD"]).unwrap();
        assert_eq!(v["commit"], head.as_str(), "{v}");
        // `-dirty` is of what the binary is built from (build.rs's SOURCES): a clean tree
        // is never dirty, a changed `src/` always is; docs and tests do not count.
        let changed = |paths: &[&str]| {
            let status = ["status", "--porcelain", "--untracked-files=no", "--"];
            !git(&[&status[..], paths].concat()).unwrap().is_empty()
        };
        if !changed(&[]) {
            assert_eq!(v["dirty"], false, "a clean tree: {v}");
        }
        if changed(&["src"]) {
            assert_eq!(v["dirty"], true, "src/ changed: {v}");
        }
        if std::env::var_os("SOURCE_DATE_EPOCH").is_none() {
            let unix: u64 = git(&["log", "-1", "--format=%ct", "HEAD"])
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                v["commit_unix"], unix,
                "the commit's date, not the build's: {v}"
            );
        }
    } else {
        assert!(v["commit"].is_null(), "{v}");
    }
    let date = v["commit_date"].as_str().unwrap_or("date unknown");

    // --version says the same in a line, as `envc version` does.
    let line = format!(
        "envc {} (commit {}{}, {date}, {target})",
        v["version"].as_str().unwrap(),
        v["commit"].as_str().unwrap_or("unknown"),
        if v["dirty"] == true { "-dirty" } else { "" },
    );
    for args in [&["--version"][..], &["-V"], &["version"]] {
        let o = envc(args, dir.path());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), line, "{args:?}");
    }
    if let Some(date) = v["commit_date"].as_str() {
        // RFC 3339 in UTC, to the second.
        let shape: String = date
            .chars()
            .map(|c| if c.is_ascii_digit() { 'D' } else { c })
            .collect();
        assert_eq!(shape, "DDDD-DD-DDTDD:DD:DDZ", "{date}");
    }
}

/// The exit codes docs/cli.md's table lists.
fn documented_exit_codes() -> Vec<u8> {
    let doc = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let table = doc.split("## Exit codes").nth(1).unwrap();
    table
        .lines()
        .skip_while(|l| !l.starts_with("| code"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn help_and_man_pages_give_the_exit_codes_and_the_environment() {
    let codes: Vec<u8> = envc::exit::Exit::ALL.iter().map(|e| e.code()).collect();
    assert_eq!(
        codes,
        documented_exit_codes(),
        "docs/cli.md's table and exit.rs"
    );

    let dir = tempfile::tempdir().unwrap();
    let o = envc(&["--help"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    let status = help
        .split("Exit status:")
        .nth(1)
        .expect("an exit status section");
    for e in envc::exit::Exit::ALL {
        let line = format!("  {:<5}{}", e.code(), e.meaning());
        assert!(status.contains(&line), "--help lacks `{line}`:\n{help}");
    }
    let environment = help
        .split("Environment:")
        .nth(1)
        .expect("an environment section");
    for v in envc::environment::VARIABLES {
        assert!(
            environment.contains(v.name),
            "--help lacks {}:\n{help}",
            v.name
        );
    }
    let short = envc(&["-h"], dir.path());
    assert!(stdout(&short).contains("envc --help"), "{}", stdout(&short));

    let o = envc(&["man", "pages"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    for page in ["envc.1", "envc-build.1", "envc-store-verify.1"] {
        let text = std::fs::read_to_string(dir.path().join("pages").join(page)).unwrap();
        let status = text.find(".SH \"EXIT STATUS\"").expect(page);
        let environment = text.find(".SH ENVIRONMENT").expect(page);
        assert!(status < environment, "{page}");
        if let Some(version) = text.find(".SH VERSION") {
            assert!(
                environment < version,
                "{page}: the sections go before VERSION"
            );
        }
        for e in envc::exit::Exit::ALL {
            assert!(
                text.contains(&format!(".TP\n\\fB{}\\fR\n", e.code())),
                "{page}"
            );
        }
        for v in envc::environment::VARIABLES {
            let name = v.name.replace('-', "\\-");
            assert!(
                text.contains(&format!("\\fB{name}\\fR")),
                "{page} lacks {}",
                v.name
            );
        }
        assert!(
            !text.contains("Exit status:"),
            "{page} has the --help text as well"
        );
    }
    // man(1) reads them without a warning.
    let man = Command::new("man")
        .args(["--warnings", "-l", "-Tutf8"])
        .arg(dir.path().join("pages/envc.1"))
        .env("MANWIDTH", "100")
        .output();
    if let Some(man) = man.ok().filter(|m| m.status.success()) {
        // Without the overstrikes of bold (`X\x08X`).
        let mut shown = String::new();
        for c in String::from_utf8_lossy(&man.stdout).chars() {
            if c == '\x08' {
                shown.pop();
            } else {
                shown.push(c);
            }
        }
        assert!(
            shown.contains("EXIT STATUS") && shown.contains("ENVC_STORE"),
            "{shown}"
        );
        assert!(
            man.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&man.stderr)
        );
    }
}

/// `ENVC_*` names in `text`.
fn envc_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("ENVC_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if end > "ENVC_".len() {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_envc_variable_envc_reads_is_in_the_one_list() {
    // What envc sets for its own scripts, never a user.
    const INTERNAL: &[&str] = &["ENVC_PINNED_DEBS", "ENVC_URL", "ENVC_STATUS", "ENVC_NEEDLE"];
    // The sources of the binary: its crate and the workspace's member crates (read from
    // the manifest, so that a new crate is searched without this test being told).
    let mut found = std::collections::BTreeSet::new();
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .and_then(|l| l.split_once('[')?.1.split_once(']').map(|(list, _)| list))
        .unwrap();
    let mut dirs: Vec<PathBuf> = vec![repo().join("src")];
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if !member.is_empty() {
            dirs.push(repo().join(member).join("src"));
        }
    }
    assert!(dirs.len() > 10, "the workspace's members: {dirs:?}");
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                found.extend(envc_names(&text));
            }
        }
    }
    let listed: std::collections::BTreeSet<String> = (envc::environment::VARIABLES.iter())
        .map(|v| v.name.to_string())
        .collect();
    assert_eq!(
        listed.len(),
        envc::environment::VARIABLES.len(),
        "a variable listed twice"
    );
    let unlisted: Vec<&String> = (found.iter())
        .filter(|n| !listed.contains(*n) && !INTERNAL.contains(&n.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "read by envc, missing from src/environment.rs: {unlisted:?}"
    );
}

/// Each line of `o`'s stdout as a JSON object carrying the format version.
fn versioned_lines(args: &[&str], o: &Output) -> Vec<serde_json::Value> {
    let lines: Vec<serde_json::Value> = stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "{args:?} printed nothing: {}", stderr(o));
    for l in &lines {
        assert_eq!(l["format_version"], "1.0", "{args:?}: {l}");
    }
    lines
}

#[test]
fn check_json_gives_each_problem_then_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.env"),
        "let h = host(name = \"h\", address = \"@local\")\noutput a = nope\noutput b = 1 +\n",
    )
    .unwrap();
    let args = ["check", "bad.env", "--json"];
    let o = envc(&args, dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text_of(&o));
    let lines = versioned_lines(&args, &o);
    let (summary, problems) = lines.split_last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["ok"], false);
    assert_eq!(summary["errors"], problems.len() as u64);
    assert!(!problems.is_empty());
    for p in problems {
        assert_eq!(p["type"], "diagnostic", "{p}");
        assert_eq!(p["severity"], "error", "{p}");
        assert!(p["code"].as_str().is_some_and(|c| c.contains("::")), "{p}");
        let at = p["location"].as_str().unwrap();
        assert!(at.starts_with("bad.env:"), "{p}");
    }
    assert!(
        problems
            .iter()
            .any(|p| p["location"] == "bad.env:2:12" && p["code"] == "name::unknown"),
        "{lines:?}"
    );
    assert!(
        stderr(&o).is_empty(),
        "the problems are on stdout only: {}",
        stderr(&o)
    );

    std::fs::write(
        dir.path().join("good.env"),
        "let h = host(name = \"h\", address = \"@local\")\noutput a = 1\n",
    )
    .unwrap();
    let args = ["check", "good.env", "--json"];
    let o = envc(&args, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text_of(&o));
    let lines = versioned_lines(&args, &o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "summary");
    assert_eq!(lines[0]["ok"], true);
    assert_eq!(lines[0]["errors"], 0);
    assert_eq!(lines[0]["outputs"], 1);
}

fn text_of(o: &Output) -> String {
    format!("stdout: {}\nstderr: {}", stdout(o), stderr(o))
}

#[test]
fn every_json_object_carries_the_format_version_and_log_shows_utc_times() {
    use crate::support::offline;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("here.env"),
        format!(
            "let h = host(name = \"h\", address = \"@local\")\n\
             let f = file(path = \"{}/out.txt\", content = \"hi\\n\", target = h)\n\
             output a = 1\n",
            d.display()
        ),
    )
    .unwrap();
    std::fs::write(d.join("envc.toml"), "").unwrap();
    std::fs::write(
        d.join("here_test.env"),
        "test \"one file\" {\n  env = \"./here.env\"\n  expect len(nodes(\"file\")) == 1\n}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let o = offline::envc(d, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text_of(&o));
        versioned_lines(args, &o)
    };
    run(&["version", "--json"]);
    run(&["check", "here.env", "--json"]);
    run(&["test", "--json"]);
    let plan = run(&["plan", "here.env", "--json"]);
    run(&["plan", "here.env", "--format", "json"]);
    let file = (plan.iter())
        .filter_map(|l| l["node"].as_str())
        .find(|n| n.contains("file:"))
        .unwrap()
        .to_string();
    run(&["build", "here.env", "--json"]);
    run(&["why", "here.env", &file, "--json"]);
    run(&["drift", "here.env", "--json"]);
    run(&["drift", "here.env", "--checks", "--json"]);
    let runs = run(&["log", "here.env", "--json"]);
    let started = runs[0]["started_unix"]
        .as_u64()
        .expect("the raw number in --json");

    // The human log says when in UTC, RFC 3339.
    let o = offline::envc(d, &["log", "here.env"]);
    assert!(o.status.success(), "{}", text_of(&o));
    let log = stdout(&o);
    let when = log
        .split(" started ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap_or_else(|| panic!("{log}"));
    let shape: String = when
        .chars()
        .map(|c| if c.is_ascii_digit() { 'D' } else { c })
        .collect();
    assert_eq!(shape, "DDDD-DD-DDTDD:DD:DDZ", "{log}");
    let date = Command::new("date")
        .args(["-u", "-d", &format!("@{started}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    assert_eq!(when, String::from_utf8_lossy(&date.stdout).trim(), "{log}");
    run(&["destroy", "here.env", "--yes", "--json"]);
}
