//! Secrets end to end on a real SSH host (tests/support/nshosts.rs): values from the
//! project's age file, an environment variable and a command reach the target as file
//! content, template variables, a command's environment and input, and a check's argument;
//! and no byte of them is in the store, in any command's output (text or JSON), or in an
//! error. A rotated secret re-runs exactly the nodes that use it; a missing one stops the
//! build before anything runs.

use crate::support::{nshosts, output, ssh_config};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nshosts::TestHosts;
use output::{node_outcomes, stderr, stdout, text};

const DB_PASSWORD: &str = "S3cret-db-pw-1";
const DB_PASSWORD_2: &str = "S3cret-db-pw-2";
const API_TOKEN: &str = "tok-API-7f3e9a";
const ADMIN_TOKEN: &str = "adm-TOKEN-c0ffee";

struct Project {
    dir: tempfile::TempDir,
    ssh_config: PathBuf,
}

impl Project {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn envc(&self, hosts: &TestHosts, args: &[&str]) -> Command {
        let mut cmd = hosts.in_controller(env!("CARGO_BIN_EXE_envc"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("ENVC_SSH_CONFIG", &self.ssh_config)
            .env("ENVC_AGE_IDENTITY", self.path("id.txt"))
            .env("TEST_API_TOKEN", API_TOKEN)
            .env_remove("ENVC_STORE")
            .env_remove("CI")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, hosts: &TestHosts, args: &[&str]) -> Output {
        self.envc(hosts, args).output().unwrap()
    }

    fn set_secret(&self, hosts: &TestHosts, name: &str, value: &str) {
        let mut child = self
            .envc(hosts, &["secret", "set", "prod.env", name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{value}\n").as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
}

fn source(addr: &str, with_conf: bool) -> String {
    let conf = if with_conf {
        r#"let conf = file(path = "/etc/app/db.conf", content = "password=${secret("db_password")}\n", target = h)
"#
    } else {
        ""
    };
    format!(
        r#"let h = host(name = "h", address = "{addr}")
{conf}let api = file(
  path = "/etc/app/api.conf",
  template = path("api.j2"),
  vars = {{ token = secret("api_token") }},
  target = h,
  expect = [http("http://envc:${{secret("api_token")}}@127.0.0.1:8081/", body_contains = "welcome ${{secret("admin_token")}}", timeout = 10)],
)
let plain = file(path = "/etc/app/plain.conf", content = "nothing secret\n", target = h)
let init = exec(
  name = "init",
  target = h,
  argv = ["sh", "-c", "printf '%s' \"$ADMIN\" > /srv/admin; ps -eo args > /srv/ps; cat > /srv/stdin; echo done"],
  env = {{ ADMIN = secret("admin_token") }},
  stdin = secret("db_password"),
)
let leak = exec(
  name = "leak",
  target = h,
  shell = "echo \"the password is $DB\"; echo \"$DB\" >&2",
  env = {{ DB = secret("db_password") }},
  require = [command("ps -eo args > /srv/ps-check; test \"$(printf %s '${{secret("admin_token")}}' | wc -c)\" -gt 3")],
)
output shown = "pw: ${{secret("db_password")}}"
"#
    )
}

const WEB_SERVER: &str = r#"import base64, http.server, os, subprocess
want = "Basic " + base64.b64encode(("envc:" + os.environ["TOKEN"]).encode()).decode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        with open("/srv/ps-http", "a") as f:
            f.write(ps)
        ok = self.headers.get("Authorization") == want
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(("welcome " + os.environ["WELCOME"]).encode() if ok else b"who are you")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", 8081), Handler).serve_forever()
"#;

/// Every regular file under `dir`, as bytes.
fn all_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            all_files(&e.path(), out);
        } else if t.is_file() {
            out.push((e.path(), std::fs::read(e.path()).unwrap()));
        }
    }
}

fn assert_no_plaintext(what: &str, bytes: &[u8], values: &[&str]) {
    let text = String::from_utf8_lossy(bytes);
    for v in values {
        assert!(!text.contains(v), "{what} holds the secret {v:?}:\n{text}");
    }
}

fn remote(hosts: &TestHosts, cmd: &str) -> String {
    String::from_utf8_lossy(&hosts.ssh(0, cmd).stdout).into_owned()
}

#[test]
fn secrets_reach_the_target_and_nothing_else() {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let dir = tempfile::Builder::new()
        .prefix("envc-secrets-")
        .tempdir()
        .unwrap();
    let ssh_config = ssh_config::write(dir.path(), hosts.key_path());
    let p = Project { dir, ssh_config };
    std::fs::write(p.path("admin-token"), format!("{ADMIN_TOKEN}\n")).unwrap();

    // An identity, and the project's file encrypted to it.
    let keygen = p.run(&hosts, &["secret", "keygen", "id.txt"]);
    assert_eq!(keygen.status.code(), Some(0), "{}", text(&keygen));
    let recipient = stdout(&keygen).trim().to_string();
    assert!(recipient.starts_with("age1"), "{recipient}");
    std::fs::write(
        p.path("envc.toml"),
        format!(
            "[secrets]\nrecipients = [\"{recipient}\"]\n[secrets.from]\napi_token = {{ env = \"TEST_API_TOKEN\" }}\nadmin_token = {{ command = [\"cat\", \"{}\"] }}\n",
            p.path("admin-token").display()
        ),
    )
    .unwrap();
    std::fs::write(p.path("api.j2"), "token = {{ token }}\n").unwrap();
    // A web server on the host that answers only to the API token, as HTTP basic auth,
    // and keeps the process list of the moment each request came.
    hosts.ssh(
        0,
        &format!(
            "mkdir -p /srv && cat > /srv/web.py <<'EOF'\n{WEB_SERVER}EOF\n\
             (TOKEN='{API_TOKEN}' WELCOME='{ADMIN_TOKEN}' setsid python3 /srv/web.py >/dev/null 2>&1 </dev/null &)"
        ),
    );
    std::fs::write(p.path("prod.env"), source(&addr, true)).unwrap();
    p.set_secret(&hosts, "db_password", DB_PASSWORD);
    let values = [DB_PASSWORD, API_TOKEN, ADMIN_TOKEN];
    assert_no_plaintext(
        "secrets.age",
        &std::fs::read(p.path("secrets.age")).unwrap(),
        &values,
    );

    let build = p.run(&hosts, &["build", "prod.env", "--json"]);
    assert_eq!(build.status.code(), Some(0), "{}", text(&build));
    assert_eq!(
        remote(&hosts, "cd /etc/app; for f in db.conf api.conf plain.conf; do stat -c '%n %a' $f; cat $f; done; cat /srv/admin; echo; cat /srv/stdin"),
        format!("db.conf 600\npassword={DB_PASSWORD}\napi.conf 600\ntoken = {API_TOKEN}\nplain.conf 644\nnothing secret\n{ADMIN_TOKEN}\n{DB_PASSWORD}")
    );
    assert_eq!(node_outcomes(&build)["h/exec:leak"], "ok: ran: exit 0");
    // While the command and the check ran, no process on the target had a secret on its
    // command line (envc passes them on stdin).
    let ps = remote(&hosts, "cat /srv/ps /srv/ps-check /srv/ps-http");
    assert!(ps.contains("envc http"), "the http check ran: {ps}");
    assert!(ps.contains("ps -eo args"), "{ps}");
    assert_no_plaintext("the target's process list", ps.as_bytes(), &values);

    // Everything envc prints or keeps: never a secret.
    let mut seen: Vec<(String, Vec<u8>)> = vec![("build --json".into(), build.stdout.clone())];
    let commands: &[&[&str]] = &[
        &["plan", "prod.env"],
        &["plan", "prod.env", "--json"],
        &["plan", "prod.env", "--format", "markdown"],
        &["graph", "prod.env", "--format", "json"],
        &["show", "prod.env", "h/file:/etc/app/db.conf"],
        &["show", "prod.env", "h/exec:init"],
        &["log", "prod.env"],
        &["log", "prod.env", "--json"],
        &["output", "prod.env"],
        &["output", "prod.env", "--json"],
        &["drift", "prod.env"],
        &["drift", "prod.env", "--json", "--checks"],
        &["secret", "list", "prod.env"],
    ];
    for args in commands {
        let o = p.run(&hosts, args);
        seen.push((args.join(" "), [o.stdout, o.stderr].concat()));
    }
    let log = p.run(&hosts, &["log", "prod.env"]);
    assert!(
        stdout(&log).contains("the password is <secret db_password>"),
        "the command's output is kept, redacted:\n{}",
        text(&log)
    );
    let output = p.run(&hosts, &["output", "prod.env"]);
    assert_eq!(
        stdout(&output),
        "shown = \"<secret>\"\n",
        "{}",
        text(&output)
    );
    let mut store = Vec::new();
    all_files(&p.path(".envc"), &mut store);
    assert!(store.len() > 5, "the store holds records: {}", store.len());
    for (path, bytes) in store {
        seen.push((path.display().to_string(), bytes));
    }
    for (what, bytes) in &seen {
        assert_no_plaintext(what, bytes, &values);
    }

    // A hand edit of a secret-bearing file is drift, found by its keyed hash.
    hosts.ssh(0, "echo tampered >> /etc/app/db.conf");
    let drift = p.run(&hosts, &["drift", "prod.env"]);
    assert!(
        stdout(&drift).contains("h/file:/etc/app/db.conf"),
        "{}",
        text(&drift)
    );
    assert_no_plaintext("drift", &[drift.stdout, drift.stderr].concat(), &values);
    let repair = p.run(&hosts, &["build", "prod.env", "--refresh"]);
    assert_eq!(repair.status.code(), Some(0), "{}", text(&repair));

    // Rotating one secret re-runs exactly the nodes that use it.
    p.set_secret(&hosts, "db_password", DB_PASSWORD_2);
    let rotated = p.run(&hosts, &["build", "prod.env", "--json"]);
    assert_eq!(rotated.status.code(), Some(0), "{}", text(&rotated));
    let ran: Vec<String> = node_outcomes(&rotated)
        .into_iter()
        .filter(|(_, o)| o != "cached")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        ran,
        ["h/exec:init", "h/exec:leak", "h/file:/etc/app/db.conf"],
        "{}",
        text(&rotated)
    );
    assert_eq!(remote(&hosts, "cat /srv/stdin"), DB_PASSWORD_2);

    // `secret edit`: the editor gets the decrypted file; what it writes is encrypted again,
    // and the plan re-runs the same three nodes.
    let edit = p
        .envc(&hosts, &["secret", "edit", "prod.env"])
        .env("EDITOR", format!("sed -i s/{DB_PASSWORD_2}/{DB_PASSWORD}/"))
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(edit.status.code(), Some(0), "{}", text(&edit));
    assert_no_plaintext("secret edit", &[edit.stdout, edit.stderr].concat(), &values);
    let plan = p.run(&hosts, &["plan", "prod.env", "--json"]);
    let planned: Vec<String> = stdout(&plan)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["action"] == "update")
        .map(|e| e["node"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        planned,
        ["h/file:/etc/app/db.conf", "h/exec:init", "h/exec:leak"],
        "{}",
        text(&plan)
    );
    assert!(std::fs::read_dir("/dev/shm").unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("envc-secrets-")));
    let back = p.run(&hosts, &["build", "prod.env"]);
    assert_eq!(back.status.code(), Some(0), "{}", text(&back));

    // Told to stop while the editor runs (SIGTERM, SIGHUP): the editor is stopped, the
    // plaintext is gone, nothing changed, exit 130. A SIGINT is the editor's to take (envc
    // waits on); an empty $VISUAL is no choice of editor.
    let editing = p.path("editing");
    let editor = p.path("slow-editor");
    std::fs::write(
        &editor,
        format!(
            "#!/bin/sh\necho \"$$ $1\" > {}\nexec sleep 60\n",
            editing.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .unwrap();
    let start_editing = || {
        let _ = std::fs::remove_file(&editing);
        let child = p
            .envc(&hosts, &["secret", "edit", "prod.env"])
            .env("VISUAL", "")
            .env("EDITOR", &editor)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let seen = loop {
            if let Some(line) = std::fs::read_to_string(&editing)
                .ok()
                .filter(|l| l.ends_with('\n'))
            {
                break line;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the editor never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let (editor_pid, file) = seen.trim().split_once(' ').unwrap();
        let file = PathBuf::from(file);
        assert!(
            file.exists() && file.starts_with("/dev/shm"),
            "{}",
            file.display()
        );
        (child, editor_pid.to_string(), file)
    };
    let kill = |signal: &str, pid: &str| {
        Command::new("kill").args([signal, pid]).status().unwrap();
    };
    let before = std::fs::read(p.path("secrets.age")).unwrap();
    for signal in ["TERM", "HUP"] {
        let (mut child, _, file) = start_editing();
        let pid = child.id().to_string();
        kill("-INT", &pid);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(child.try_wait().unwrap().is_none(), "a SIGINT ended envc");
        kill(&format!("-{signal}"), &pid);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(130), "{}", text(&o));
        assert!(
            stderr(&o).contains(&format!("stopped by SIG{signal}")),
            "{}",
            text(&o)
        );
        assert!(
            !file.exists() && !file.parent().unwrap().exists(),
            "{}",
            file.display()
        );
    }
    // Killed outright, envc cannot clean up: the next `secret edit` removes what it left.
    let (child, editor_pid, file) = start_editing();
    kill("-KILL", &child.id().to_string());
    let _ = child.wait_with_output();
    kill("-KILL", &editor_pid);
    assert!(
        file.exists(),
        "a SIGKILL leaves the file (and this test checks it goes)"
    );
    let next = p
        .envc(&hosts, &["secret", "edit", "prod.env"])
        .env("EDITOR", "true")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(next.status.code(), Some(0), "{}", text(&next));
    assert!(
        !file.exists() && !file.parent().unwrap().exists(),
        "{}",
        file.display()
    );
    assert_eq!(std::fs::read(p.path("secrets.age")).unwrap(), before);

    // A secret that cannot be read stops the build before anything runs.
    let missing = p
        .envc(&hosts, &["build", "prod.env"])
        .env_remove("TEST_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        stderr(&missing)
            .contains("`api_token`: the environment variable TEST_API_TOKEN is not set")
            && stderr(&missing).contains("nothing was run"),
        "{}",
        text(&missing)
    );
    let other = p.run(&hosts, &["secret", "keygen", "other.txt"]);
    assert_eq!(other.status.code(), Some(0), "{}", text(&other));
    // A reviewer without the secrets (a fork's pull request: no identity that decrypts
    // the file, no token in the environment; `admin_token`'s command still answers) still
    // plans: from the records, saying which values it did not have. Only the build needs
    // them.
    let fork = |args: &[&str]| {
        p.envc(&hosts, args)
            .env("ENVC_AGE_IDENTITY", p.path("other.txt"))
            .env_remove("TEST_API_TOKEN")
            .output()
            .unwrap()
    };
    let reviewed = fork(&["plan", "prod.env"]);
    assert_eq!(reviewed.status.code(), Some(0), "{}", text(&reviewed));
    let out = stdout(&reviewed);
    assert!(
        out.contains("plan: 0 to create, 0 to update, 0 to replace, 0 to delete")
            && out.contains("planned without the values of `api_token` (the environment variable TEST_API_TOKEN is not set")
            && !out.contains("`admin_token` (")
            && out.contains("`db_password` (")
            && out.contains("cannot decrypt"),
        "{}",
        text(&reviewed)
    );
    // A change to what uses a secret is planned as a change, its new hash left to the build.
    let changed_source = source(&addr, true).replace("password=${", "pw=${");
    std::fs::write(p.path("prod.env"), &changed_source).unwrap();
    let reviewed = fork(&["plan", "prod.env", "--json"]);
    assert_eq!(reviewed.status.code(), Some(0), "{}", text(&reviewed));
    let lines: Vec<serde_json::Value> = stdout(&reviewed)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let db = lines
        .iter()
        .find(|e| e["node"] == "h/file:/etc/app/db.conf")
        .unwrap();
    assert_eq!(db["action"], "update", "{}", text(&reviewed));
    let reasons = db["reasons"].to_string();
    assert!(
        reasons.contains("its source changed")
            && reasons.contains("secret `db_password` is not at hand"),
        "{reasons}"
    );
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["update"], 1, "{summary}");
    assert!(
        summary["unread_secrets"]["db_password"]
            .as_str()
            .is_some_and(|w| w.contains("cannot decrypt")),
        "{summary}"
    );
    let markdown = fork(&["plan", "prod.env", "--format", "markdown"]);
    assert!(
        stdout(&markdown).contains("**Secrets:** planned without the values of"),
        "{}",
        text(&markdown)
    );
    for o in [&reviewed, &markdown] {
        assert_no_plaintext(
            "a plan without secrets",
            &[o.stdout.clone(), o.stderr.clone()].concat(),
            &values,
        );
    }
    // The build does need them, and says so before anything runs.
    let undecryptable = fork(&["build", "prod.env"]);
    assert_eq!(
        undecryptable.status.code(),
        Some(1),
        "{}",
        text(&undecryptable)
    );
    assert!(
        stderr(&undecryptable).contains("cannot decrypt")
            && stderr(&undecryptable).contains("nothing was run"),
        "{}",
        text(&undecryptable)
    );

    // A secret-bearing file that leaves the source is removed: what is there is checked
    // against the keyed hash of what envc wrote.
    std::fs::write(p.path("prod.env"), source(&addr, false)).unwrap();
    let removed = p.run(&hosts, &["build", "prod.env", "--json"]);
    assert_eq!(removed.status.code(), Some(0), "{}", text(&removed));
    assert_eq!(
        node_outcomes(&removed)["h/file:/etc/app/db.conf"],
        "ok: deleted"
    );
    assert_eq!(
        remote(
            &hosts,
            "test -e /etc/app/db.conf && echo present || echo absent"
        ),
        "absent\n"
    );
}
