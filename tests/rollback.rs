//! Rollback end to end, on a namespace host running Debian's real nginx (the pinned `.deb`s,
//! installed by a locked build; scripts/testhosts/systemd-stand-in as systemctl), beside a
//! package the update moves: `envc-demo`, pinned at 1.0 and then at 2.0 by two locks from a
//! vendor's archive served here (Debian's archive offers one nginx per suite, and its old
//! versions only on snapshot.debian.org; a vendor's archive keeps both, as the test rootfs's
//! repository does), and `hello`, from Debian's archive, which the update adds.
//!
//! - A config change that makes nginx fail to restart, with the package moved and added, is
//!   put back whole: the old files, envc-demo 1.0 again from the store (the lock pins 2.0
//!   now, and no mirror is reachable), hello purged, nginx serving again, the log saying so.
//! - The same rollback, SIGKILLed while it runs dpkg (a dpkg hook on the host holds it there):
//!   the store verifies, and the next build converges (the update again, rolled back again,
//!   hello purged by the intent the killed rollback committed).
//! - With `--keep-going`, a command built on the site that had not started when the site was
//!   put back does not start (it would run on what the rollback took away).
//! - A change whose postcondition fails, with `rollback = false` on the site's file: the rest
//!   goes back, the site stays, and the output says why.
//! - `--no-rollback`: nothing goes back, and the output and the run record say so.
//! - A good change builds; `envc rollback --to` the first run restores the first deployment,
//!   packages too.
//!
//! Needs the network (Debian's archive, for the locks) and root, as tests/aws_example.rs.

use crate::support::{nshosts, output, project, signing_key};

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nshosts::TestHosts;
use output::{stderr, stdout, text};
use project::Project;

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

fn remote(hosts: &TestHosts, cmd: &str) -> String {
    String::from_utf8_lossy(&hosts.ssh(0, cmd).stdout).into_owned()
}

/// What nginx on the host answers on port 8080 (empty when nothing does).
fn page(hosts: &TestHosts) -> String {
    remote(
        hosts,
        "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && sed '1,/^\\r$/d' <&3",
    )
}

/// `installed VERSION` when dpkg has the package installed, else `absent`.
fn package(hosts: &TestHosts, name: &str) -> String {
    remote(
        hosts,
        &format!(
            "v=$(dpkg-query -W -f '${{db:Status-Status}} ${{Version}}' {name} 2>/dev/null); \
             case $v in installed*) echo \"$v\" ;; *) echo absent ;; esac"
        ),
    )
    .trim()
    .to_string()
}

const SITE: &str = "/etc/nginx/conf.d/envc.conf";
const PAGE: &str = "/var/www/html/index.html";

/// One state of the source.
struct Source<'a> {
    conf: &'a str,
    body: &'a str,
    /// The version of envc-demo.
    demo: &'a str,
    /// Whether hello is installed too.
    hello: bool,
    /// More attributes of the site's file.
    site: &'a str,
    /// More nodes.
    extra: &'a str,
}

/// The vendor's archive: its URL and its key's fingerprint (the key is `keys/acme.asc`).
struct Acme {
    url: String,
    fingerprint: String,
}

/// nginx, envc-demo (and hello), a site on port 8080 and its page, both written after the
/// packages, and the service, after the packages and restarted when either file changes,
/// done when it serves a page saying `v`.
fn source(hosts: &TestHosts, acme: &Acme, s: &Source) -> String {
    let (hello, packages) = if s.hello {
        (
            "let hello = package(name = \"hello\", target = h)\n",
            "[nginx, demo, hello]",
        )
    } else {
        ("", "[nginx, demo]")
    };
    format!(
        r#"import "std/debian"
let h = host(name = "{name}", address = "{addr}")
let acme = debian.vendor_archive(name = "acme", url = "{url}", suite = "bookworm-acme", key = path("keys/acme.asc"), fingerprint = "{fingerprint}")
let nginx = package(name = "nginx", target = h)
let demo = package(name = "envc-demo", version = "{demo}", archive = acme, target = h)
{hello}let site = file(path = "{SITE}", content = "{conf}", target = h, after = {packages}{site})
let page = file(path = "{PAGE}", content = "{body}", target = h, after = {packages})
let web = service(
  name = "nginx",
  target = h,
  after = {packages},
  restart_on = [site, page],
  expect = [http("http://127.0.0.1:8080/", body_contains = "<h1>v", timeout = 5)],
)
{extra}"#,
        name = hosts.name(0),
        addr = hosts.addr(0),
        url = acme.url,
        fingerprint = acme.fingerprint,
        demo = s.demo,
        conf = s.conf,
        body = s.body,
        site = s.site,
        extra = s.extra,
    )
}

const GOOD: &str = "server {\\n  listen 8080;\\n  root /var/www/html;\\n}\\n";
/// nginx refuses it: `nginx -t` fails, so the init script does not restart.
const SYNTAX_ERROR: &str = "server {\\n  listen 8080;\\n  root /var/www/html;\\n  nonsense;\\n}\\n";
/// Valid, but serves from an empty directory: the postcondition does not hold.
const WRONG_ROOT: &str = "server {\\n  listen 8080;\\n  root /nonexistent;\\n}\\n";

/// A vendor's archive holding envc-demo 1.0 and 2.0 (the test rootfs's own `.deb`s),
/// signed with a key made here, served on loopback in this test's network namespace
/// (where `envc lock` runs): `DIR/acme`. The key goes to `keys/acme.asc` of the project.
fn vendor_archive(
    hosts: &TestHosts,
    p: &Project,
    dir: &Path,
) -> (Acme, signing_key::TestKey, Child) {
    let repo = hosts.rootfs().join("srv/envc-repo");
    let index = std::fs::read_to_string(repo.join("Packages")).unwrap();
    let demo: Vec<&str> = index
        .split("\n\n")
        .filter(|s| s.contains("Package: envc-demo\n"))
        .collect();
    assert_eq!(demo.len(), 2, "{index}");
    let root = dir.join("acme");
    let pool = "pool/main/e/envc-demo/";
    std::fs::create_dir_all(root.join(pool)).unwrap();
    for stanza in &demo {
        let deb = stanza
            .lines()
            .find_map(|l| l.strip_prefix("Filename: ./"))
            .unwrap();
        std::fs::copy(repo.join(deb), root.join(pool).join(deb)).unwrap();
    }
    let packages: String = demo
        .iter()
        .map(|s| {
            let stanza = s
                .trim_end()
                .replace("Filename: ./", &format!("Filename: {pool}"));
            format!("{stanza}\n\n")
        })
        .collect();
    let dists = root.join("dists/bookworm-acme");
    std::fs::create_dir_all(dists.join("main/binary-amd64")).unwrap();
    std::fs::write(dists.join("main/binary-amd64/Packages"), &packages).unwrap();
    std::fs::write(
        dists.join("Release"),
        format!(
            "Origin: Acme\nSuite: bookworm-acme\nCodename: bookworm-acme\n\
             Date: Sat, 11 Jul 2026 10:16:37 UTC\nArchitectures: amd64\nComponents: main\n\
             SHA256:\n {} {} main/binary-amd64/Packages\n",
            envc_lockfiles::fetch::sha256_hex(packages.as_bytes()),
            packages.len()
        ),
    )
    .unwrap();
    let key = signing_key::TestKey::new("Acme Archive <apt@acme.test>");
    key.sign(&dists);
    std::fs::create_dir_all(p.path("keys")).unwrap();
    std::fs::write(p.path("keys/acme.asc"), key.public()).unwrap();
    // The server binds a port of the kernel's choosing and says which: a port picked here
    // and released could be taken by another test before it binds, and then answered by
    // that test's server.
    let mut server = Command::new("python3")
        .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
        .arg("--directory")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut said,
    )
    .unwrap();
    // "Serving HTTP on 127.0.0.1 port 38215 (http://127.0.0.1:38215/) ..."
    let port: u16 = said
        .split(" port ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the archive's server said {said:?}"));
    wait_until(Duration::from_secs(20), "the archive's server", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let acme = Acme {
        url: format!("http://127.0.0.1:{port}/acme"),
        fingerprint: key.fingerprint.clone(),
    };
    (acme, key, server)
}

/// Locks where the archives are reachable (this test's own network namespace) and puts
/// the pinned `.deb`s into the project's store, which the build in the hosts' namespace
/// (with no route to any archive) installs from.
fn lock(p: &Project, env_file: &Path) {
    let locked = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("lock")
        .arg(env_file)
        .env_remove("ENVC_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ok(&locked);
    p.fetch_pinned_debs(&env_file.with_extension("lock"));
}

/// The environment's runs as `envc log --json` prints them, oldest first.
fn runs(p: &Project, hosts: &TestHosts) -> Vec<serde_json::Value> {
    let log = p.run(hosts, &["log", "--json"]);
    ok(&log);
    let mut runs: Vec<serde_json::Value> = stdout(&log)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    runs.reverse();
    runs
}

fn ids(p: &Project, hosts: &TestHosts) -> Vec<String> {
    (runs(p, hosts).iter())
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect()
}

/// The step of `node` in the newest run, as `envc log --json` gives it.
fn last_step(p: &Project, hosts: &TestHosts, node: &str) -> serde_json::Value {
    let runs = runs(p, hosts);
    let newest = runs.last().unwrap();
    (newest["nodes"].as_array().unwrap().iter())
        .find(|n| n["node"] == node)
        .unwrap_or_else(|| panic!("no step of {node} in {newest}"))
        .clone()
}

fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Two commands built on the site: one waits until the site is rolled back, so that the
/// other, which copies the site, is still waiting for it then.
const WATCH: &str = r#"let slow = exec(name = "wait-for-rollback", target = h, after = [site], shell = "timeout 30 sh -c 'while grep -q nonsense /etc/nginx/conf.d/envc.conf; do sleep 0.1; done'")
let saw = exec(name = "saw-the-site", target = h, after = [site, slow], shell = "cp /etc/nginx/conf.d/envc.conf /root/saw-the-site")
"#;

/// A dpkg hook on the host that holds every dpkg run while the broken site is in place
/// (only a rollback runs dpkg then: the site is written after the packages), saying so in
/// `/run/envc-held` (the pid of its sleep).
const HOLD: &str = "cat >/usr/local/sbin/envc-hold <<'EOF'\n\
    #!/bin/sh\n\
    grep -q nonsense /etc/nginx/conf.d/envc.conf 2>/dev/null || exit 0\n\
    echo $$ >/run/envc-held\n\
    exec sleep 600\n\
    EOF\n\
    chmod +x /usr/local/sbin/envc-hold && \
    echo 'pre-invoke=/usr/local/sbin/envc-hold' >/etc/dpkg/dpkg.cfg.d/99envc-hold";

#[test]
fn a_broken_nginx_config_is_rolled_back_with_its_packages_and_rollback_to_restores_the_first_deployment(
) {
    let mut hosts = TestHosts::start_empty();
    hosts.set_boot_hook(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testhosts/systemd-stand-in"),
    );
    hosts.add_host(&["10.77.0.10".parse().unwrap()], None);
    let p = Project::new(&hosts, "envc-rollback-");
    let env_file = p.path("prod.env");
    let served = tempfile::tempdir().unwrap();
    let (acme, _key, mut server) = vendor_archive(&hosts, &p, served.path());
    let name = hosts.name(0).to_string();
    let node = |k: &str| format!("{name}/{k}");
    let v1 = Source {
        conf: GOOD,
        body: "<h1>v1</h1>\\n",
        demo: "1.0",
        hello: false,
        site: "",
        extra: "",
    };

    // The first deployment: nginx serving v1, envc-demo 1.0.
    p.write(&source(&hosts, &acme, &v1));
    lock(&p, &env_file);
    let first = p.run(&hosts, &["build", "--locked"]);
    ok(&first);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n", "{}", text(&first));
    assert_eq!(package(&hosts, "envc-demo"), "installed 1.0");
    assert_eq!(package(&hosts, "hello"), "absent");
    let good_conf = remote(&hosts, &format!("cat {SITE}"));

    // A config nginx refuses, with a new page, envc-demo moved to 2.0 and hello added, all
    // locked again: the service does not restart, so everything goes back as the first run
    // left it, from the store alone (the lock pins envc-demo 2.0 now, and the archive is
    // gone), and nginx is restarted with the old files.
    let broken = Source {
        conf: SYNTAX_ERROR,
        body: "<h1>v2</h1>\\n",
        demo: "2.0",
        hello: true,
        ..v1
    };
    p.write(&source(&hosts, &acme, &broken));
    lock(&p, &env_file);
    let _ = server.kill();
    let _ = server.wait();
    let lock_text = std::fs::read_to_string(env_file.with_extension("lock")).unwrap();
    assert!(
        lock_text.contains("name = \"envc-demo\"\narchive = \"acme\"\nversion = \"2.0\"")
            && !lock_text.contains("envc-demo_1.0"),
        "{lock_text}"
    );
    let failed = p.run(&hosts, &["build", "--locked"]);
    assert_eq!(failed.status.code(), Some(4), "{}", text(&failed));
    let said = text(&failed);
    assert!(
        said.contains("5 rolled back"),
        "the site, the page, the two packages and the service: {said}"
    );
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n");
    assert_eq!(package(&hosts, "envc-demo"), "installed 1.0", "{said}");
    assert_eq!(remote(&hosts, "cat /usr/share/envc-demo/version"), "1.0\n");
    assert_eq!(package(&hosts, "hello"), "absent", "{said}");
    // The state kept the first run's records: the updates are still to do.
    let plan = p.run(&hosts, &["plan"]);
    let planned = stdout(&plan);
    assert!(
        planned.contains(&format!("file:{SITE}"))
            && planned.contains("package:envc-demo")
            && planned.contains("package:hello"),
        "{planned}"
    );
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    let logged = stdout(&log);
    assert!(
        logged.contains(&format!("rolled back on `{name}`: "))
            && logged.contains(&format!(
                "reinstalled at 1.0 from the store `{}`",
                node("package:envc-demo")
            ))
            && logged.contains(&format!(
                "purged (it was not installed before) `{}`",
                node("package:hello")
            ))
            && logged.contains(&format!("restarted `{}`", node("service:nginx"))),
        "{logged}"
    );

    // The same update, its rollback SIGKILLed while it waits for dpkg (the hook holds it).
    // The state went back first and was committed: the store verifies, and the next build
    // converges from it.
    let hooked = hosts.ssh(0, HOLD);
    assert!(hooked.status.success(), "{hooked:?}");
    let mut child = p
        .command(&hosts, &["build", "--locked"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(120),
        "the rollback to reach dpkg",
        || {
            assert_eq!(
                child.try_wait().unwrap(),
                None,
                "envc ended before it was killed"
            );
            !remote(&hosts, "cat /run/envc-held 2>/dev/null").is_empty()
        },
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let released = hosts.ssh(
        0,
        "rm /etc/dpkg/dpkg.cfg.d/99envc-hold && kill $(cat /run/envc-held) && rm /run/envc-held",
    );
    assert!(released.status.success(), "{released:?}");
    let verify = hosts
        .in_controller(env!("CARGO_BIN_EXE_envc"))
        .args(["store", "verify"])
        .arg(&env_file)
        .env_remove("ENVC_STORE")
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify));
    let killed = runs(&p, &hosts).last().unwrap().clone();
    assert_eq!(killed["result"], "unfinished", "{killed}");
    let web = last_step(&p, &hosts, &node("service:nginx"));
    assert!(
        web["outcome"].as_str().unwrap().starts_with("failed: ")
            && web["rollback"]
                .as_str()
                .unwrap()
                .starts_with("rolling back: "),
        "the log says the rollback was under way: {web}"
    );
    // Killed after the update had run: envc-demo 2.0 and hello are on the host, the broken
    // site too, while the state holds the first run's records (and an intent for hello).
    assert_eq!(package(&hosts, "envc-demo"), "installed 2.0");
    assert_eq!(package(&hosts, "hello"), "installed 2.10-3");
    assert!(remote(&hosts, &format!("cat {SITE}")).contains("nonsense"));
    let again = p.run(&hosts, &["build", "--locked"]);
    assert_eq!(again.status.code(), Some(4), "{}", text(&again));
    assert!(text(&again).contains("5 rolled back"), "{}", text(&again));
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n");
    assert_eq!(package(&hosts, "envc-demo"), "installed 1.0");
    assert_eq!(
        package(&hosts, "hello"),
        "absent",
        "the intent says envc made it"
    );

    // With --keep-going, what was built on a node the rollback put back and has not started
    // yet does not start: it would run on what the rollback just took away.
    let watched = Source {
        extra: WATCH,
        ..broken
    };
    p.write(&source(&hosts, &acme, &watched));
    let going = p.run(&hosts, &["build", "--locked", "--keep-going"]);
    assert_eq!(going.status.code(), Some(4), "{}", text(&going));
    assert!(
        text(&going).contains("5 rolled back")
            && stderr(&going).contains(&format!(
                "{}: skipped: its input `{}` was rolled back",
                node("exec:saw-the-site"),
                node(&format!("file:{SITE}"))
            )),
        "{}",
        text(&going)
    );
    assert_eq!(
        remote(
            &hosts,
            "test -e /root/saw-the-site && echo ran || echo absent"
        ),
        "absent\n"
    );
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);

    // Valid, but serving nothing, and the site says `rollback = false`: the postcondition
    // fails, the rest goes back, the site stays as the update made it, and nginx is
    // restarted with it (so it still serves nothing).
    let kept_site = Source {
        conf: WRONG_ROOT,
        site: ", rollback = false",
        ..broken
    };
    p.write(&source(&hosts, &acme, &kept_site));
    let wrong = p.run(&hosts, &["build", "--locked"]);
    assert_eq!(wrong.status.code(), Some(4), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("postcondition http("),
        "{}",
        text(&wrong)
    );
    assert!(
        stderr(&wrong).contains(&format!(
            "rollback  {}: not rolled back: it says `rollback = false`",
            node(&format!("file:{SITE}"))
        )) && text(&wrong).contains("4 rolled back"),
        "{}",
        text(&wrong)
    );
    assert!(remote(&hosts, &format!("cat {SITE}")).contains("/nonexistent"));
    assert_eq!(remote(&hosts, &format!("cat {PAGE}")), "<h1>v1</h1>\n");
    assert_eq!(package(&hosts, "envc-demo"), "installed 1.0");
    assert_eq!(package(&hosts, "hello"), "absent");
    let site_step = last_step(&p, &hosts, &node(&format!("file:{SITE}")));
    assert_eq!(
        site_step["rollback"], "not rolled back: it says `rollback = false`",
        "{site_step}"
    );

    // --no-rollback leaves the whole broken change in place, the node failed, and says so;
    // the next good build mends it.
    let kept = p.run(&hosts, &["build", "--locked", "--no-rollback"]);
    assert_eq!(kept.status.code(), Some(4), "{}", text(&kept));
    let no_rollback =
        format!("not rolled back (`--no-rollback`): what this run changed on `{name}` stays");
    let line = (stdout(&kept).lines())
        .find(|l| l.contains(" ran, "))
        .unwrap_or_default()
        .to_string();
    assert!(
        !text(&kept).contains("rolled back on") && !line.contains("rolled back"),
        "{}",
        text(&kept)
    );
    assert!(
        stderr(&kept).contains(&format!("error: {}: ", node("service:nginx")))
            && stderr(&kept).contains(&format!("  {no_rollback}")),
        "{}",
        text(&kept)
    );
    assert!(remote(&hosts, &format!("cat {SITE}")).contains("/nonexistent"));
    assert_eq!(remote(&hosts, &format!("cat {PAGE}")), "<h1>v2</h1>\n");
    assert_eq!(package(&hosts, "envc-demo"), "installed 2.0");
    assert_eq!(package(&hosts, "hello"), "installed 2.10-3");
    let web = last_step(&p, &hosts, &node("service:nginx"));
    assert!(
        web["outcome"].as_str().unwrap().starts_with("failed: ") && web["rollback"] == no_rollback,
        "{web}"
    );

    // A good change builds.
    let v3 = Source {
        conf: GOOD,
        body: "<h1>v3</h1>\\n",
        ..broken
    };
    p.write(&source(&hosts, &acme, &v3));
    let good = p.run(&hosts, &["build", "--locked"]);
    ok(&good);
    assert_eq!(page(&hosts), "<h1>v3</h1>\n");

    // Back to the first deployment, from the store: its files, envc-demo 1.0, no hello,
    // nginx restarted.
    let run_ids = ids(&p, &hosts);
    let unknown = p.run(
        &hosts,
        &["rollback", "--to", &format!("{}x", &run_ids[0][..10])],
    );
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(
        text(&unknown).contains(&format!("did you mean `{}`", run_ids[0])),
        "{}",
        text(&unknown)
    );
    let dry = p.run(&hosts, &["rollback", "--to", &run_ids[0], "--dry-run"]);
    ok(&dry);
    let planned = stdout(&dry);
    assert!(
        planned.contains(&format!("restore   {}", node(&format!("file:{PAGE}"))))
            && planned.contains(&format!("restore   {}", node("package:envc-demo")))
            && planned.contains(&format!("remove    {}", node("package:hello"))),
        "{}",
        text(&dry)
    );
    assert_eq!(page(&hosts), "<h1>v3</h1>\n", "a dry run changes nothing");
    let back = p.run(&hosts, &["rollback", "--to", &run_ids[0]]);
    ok(&back);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n", "{}", text(&back));
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    assert_eq!(package(&hosts, "envc-demo"), "installed 1.0");
    assert_eq!(package(&hosts, "hello"), "absent");
    let ids_now = ids(&p, &hosts);
    let log = p.run(&hosts, &["log"]);
    assert!(
        stdout(&log).contains(&format!("run {}  rollback", ids_now.last().unwrap())),
        "{}",
        stdout(&log)
    );
    // The source still says v3: a build is an update again (the page, envc-demo, hello, the
    // site, which now comes after hello too, and the service's restart).
    let rebuilt = p.run(&hosts, &["build", "--locked", "--json"]);
    ok(&rebuilt);
    let ran: Vec<String> = (output::node_outcomes(&rebuilt).into_iter())
        .filter(|(_, o)| o.starts_with("ok"))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        ran,
        [
            node(&format!("file:{SITE}")),
            node(&format!("file:{PAGE}")),
            node("package:envc-demo"),
            node("package:hello"),
            node("service:nginx"),
        ],
        "{}",
        text(&rebuilt)
    );
    assert_eq!(page(&hosts), "<h1>v3</h1>\n");
    assert_eq!(package(&hosts, "envc-demo"), "installed 2.0");
}

/// Two files on a host, their contents `a` and `b`, and `extra` after; the host is `name`.
fn files_source(hosts: &TestHosts, name: &str, a: &str, b: &str, extra: &str) -> String {
    format!(
        "let web = host(name = \"{name}\", address = \"{}\")\n\
         let a = file(path = \"/etc/envc-a\", content = \"{a}\\n\", target = web)\n\
         let b = file(path = \"/etc/envc-b\", content = \"{b}\\n\", target = web)\n{extra}",
        hosts.addr(0)
    )
}

/// The object file of the store holding exactly `bytes` (a file's content object).
fn object_holding(p: &Project, bytes: &[u8]) -> std::path::PathBuf {
    let objects = p.store_dir().join("objects");
    for shard in std::fs::read_dir(&objects).unwrap() {
        for entry in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let path = entry.unwrap().path();
            if std::fs::read(&path).unwrap() == bytes {
                return path;
            }
        }
    }
    panic!("no object holds {:?}", String::from_utf8_lossy(bytes));
}

/// `envc store verify prod.env`.
fn verify_store(p: &Project, hosts: &TestHosts) -> Output {
    hosts
        .in_controller(env!("CARGO_BIN_EXE_envc"))
        .args(["store", "verify"])
        .arg(p.store_dir().with_file_name("prod.env"))
        .env_remove("ENVC_STORE")
        .output()
        .unwrap()
}

/// Its object id, as envc prints it: the shard and the file name.
fn object_id(path: &Path) -> String {
    let shard = path
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    format!("{shard}{}", path.file_name().unwrap().to_string_lossy())
}

/// Issue 59, item 4: a content object an earlier run needs is gone (then replaced by other
/// bytes): `rollback --to` that run changes nothing, on any target, and names the object,
/// its node and the fix; `store verify` says the run can no longer be rolled back to, with
/// its own exit code. With the object back, the rollback goes through.
#[test]
fn a_rollback_whose_objects_are_not_all_sound_changes_nothing_and_verify_names_the_run() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts, "envc-rollback-objects-");
    let name = hosts.name(0).to_string();
    p.write(&files_source(&hosts, &name, "a1", "b1", ""));
    ok(&p.run(&hosts, &["build"]));
    p.write(&files_source(&hosts, &name, "a2", "b2", ""));
    ok(&p.run(&hosts, &["build"]));
    let first = ids(&p, &hosts)[0].clone();
    let object = object_holding(&p, b"b1\n");
    let id = object_id(&object);
    let node_b = format!("{name}/file:/etc/envc-b");
    let unchanged = |what: &str| {
        assert_eq!(
            remote(&hosts, "cat /etc/envc-a /etc/envc-b"),
            "a2\nb2\n",
            "{what}"
        );
    };

    std::fs::remove_file(&object).unwrap();
    let verify = verify_store(&p, &hosts);
    assert_eq!(verify.status.code(), Some(8), "{}", text(&verify));
    assert!(
        stdout(&verify).contains(&format!("run {first}"))
            && stdout(&verify).contains("can no longer be rolled back to")
            && stdout(&verify).contains(&node_b)
            && stdout(&verify).contains(&id),
        "{}",
        text(&verify)
    );
    for args in [
        &["rollback", "--to", &first, "--dry-run"][..],
        &["rollback", "--to", &first],
    ] {
        let back = p.run(&hosts, args);
        assert_eq!(back.status.code(), Some(1), "{}", text(&back));
        let said = stderr(&back);
        assert!(
            said.contains(&format!("{node_b}: its content (object {id}) is missing"))
                && said.contains("nothing was changed")
                && said.contains("hint: "),
            "{}",
            text(&back)
        );
        unchanged(&text(&back));
    }
    assert_eq!(ids(&p, &hosts).len(), 2, "a refused rollback is no run");

    // Other bytes under its name: the same.
    std::fs::write(&object, b"b9\n").unwrap();
    let back = p.run(&hosts, &["rollback", "--to", &first]);
    assert_eq!(back.status.code(), Some(1), "{}", text(&back));
    assert!(
        stderr(&back).contains(&format!("{node_b}: its content (object {id}) is corrupt")),
        "{}",
        text(&back)
    );
    unchanged(&text(&back));

    // Sound again: it goes back, and verify is content.
    std::fs::write(&object, b"b1\n").unwrap();
    let verify = verify_store(&p, &hosts);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify));
    ok(&p.run(&hosts, &["rollback", "--to", &first]));
    assert_eq!(remote(&hosts, "cat /etc/envc-a /etc/envc-b"), "a1\nb1\n");
}

/// Issue 60, item 1: a run from before the host was renamed (`moved`) is the same host's:
/// `rollback --to` it puts its files back under their new keys, removes nothing, and leaves
/// no record under the old name.
#[test]
fn a_rollback_follows_the_moves_recorded_since_the_run() {
    let hosts = TestHosts::start(1);
    let p = Project::new(&hosts, "envc-rollback-moved-");
    p.write(&files_source(&hosts, "web-1", "a1", "b1", ""));
    ok(&p.run(&hosts, &["build"]));
    let first = ids(&p, &hosts)[0].clone();
    let moved = "moved \"host:web-1\" -> \"host:web-b\"\n";
    p.write(&files_source(&hosts, "web-b", "a1", "b1", moved));
    ok(&p.run(&hosts, &["build"]));
    p.write(&files_source(&hosts, "web-b", "a2", "b1", moved));
    ok(&p.run(&hosts, &["build"]));
    assert_eq!(remote(&hosts, "cat /etc/envc-a"), "a2\n");

    let dry = p.run(&hosts, &["rollback", "--to", &first, "--dry-run", "--json"]);
    ok(&dry);
    let items: Vec<(String, String)> = stdout(&dry)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["node"].as_str().unwrap().to_string(),
                v["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [("web-b/file:/etc/envc-a".to_string(), "update".to_string())],
        "{}",
        text(&dry)
    );
    let back = p.run(&hosts, &["rollback", "--to", &first]);
    ok(&back);
    assert_eq!(remote(&hosts, "cat /etc/envc-a /etc/envc-b"), "a1\nb1\n");
    // Nothing is left under the old name, nothing removed, and the source as it is now
    // (renamed, a2) is one update away.
    let plan = p.run(&hosts, &["plan", "--json"]);
    ok(&plan);
    let planned: Vec<(String, String)> = stdout(&plan)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("node").is_some())
        .filter(|v| v["action"] != "unchanged" && v["action"] != "moved")
        .map(|v| {
            (
                v["node"].as_str().unwrap().to_string(),
                v["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        planned,
        [("web-b/file:/etc/envc-a".to_string(), "update".to_string())],
        "{}",
        text(&plan)
    );
}
