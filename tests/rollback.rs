//! Rollback end to end, on a namespace host running Debian's real nginx (the pinned `.deb`s,
//! installed by a locked build; scripts/testhosts/systemd-stand-in as systemctl): a config
//! change that makes nginx fail to restart, and one that makes its postcondition fail, are
//! each put back (the old files on the host, nginx serving again, the log saying so); a
//! good change builds; `envc rollback --to` the first run restores the first deployment.
//! Needs the network (Debian's archive, for the lock) and root, as tests/aws_example.rs.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

#[path = "support/nshosts.rs"]
mod nshosts;
#[path = "support/output.rs"]
mod output;
#[path = "support/project.rs"]
mod project;
#[path = "support/ssh_config.rs"]
mod ssh_config;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use nshosts::TestHosts;
use output::{stdout, summary, text};
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

const SITE: &str = "/etc/nginx/conf.d/envc.conf";
const PAGE: &str = "/var/www/html/index.html";

/// nginx, a site on port 8080 (its config `conf`), its page `body`, and the service,
/// restarted when either changes, done when it serves a page saying `v`.
fn source(hosts: &TestHosts, conf: &str, body: &str) -> String {
    format!(
        r#"let h = host(name = "{name}", address = "{addr}")
let nginx = package(name = "nginx", target = h)
let site = file(path = "{SITE}", content = "{conf}", target = h, after = [nginx])
let page = file(path = "{PAGE}", content = "{body}", target = h, after = [nginx])
let web = service(
  name = "nginx",
  target = h,
  after = [nginx],
  restart_on = [site, page],
  expect = [http("http://127.0.0.1:8080/", body_contains = "<h1>v", timeout = 5)],
)
"#,
        name = hosts.name(0),
        addr = hosts.addr(0),
    )
}

const GOOD: &str = "server {\\n  listen 8080;\\n  root /var/www/html;\\n}\\n";
/// nginx refuses it: `nginx -t` fails, so the init script does not restart.
const SYNTAX_ERROR: &str = "server {\\n  listen 8080;\\n  root /var/www/html;\\n  nonsense;\\n}\\n";
/// Valid, but serves from an empty directory: the postcondition does not hold.
const WRONG_ROOT: &str = "server {\\n  listen 8080;\\n  root /nonexistent;\\n}\\n";

/// Locks where Debian's archive is reachable (this test's own network namespace) and puts
/// the pinned `.deb`s into the project's store, which the build in the hosts' namespace
/// (with no route to the archive) installs from.
fn lock(p: &Project, env_file: &Path) {
    let locked = Command::new(env!("CARGO_BIN_EXE_envc"))
        .arg("lock")
        .arg(env_file)
        .env_remove("ENVC_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    ok(&locked);
    let pinned = std::fs::read_to_string(env_file.with_extension("lock")).unwrap();
    let parsed = envc_lockfiles::Lockfile::parse(&pinned).unwrap();
    let (debs, errors) = envc_lockfiles::environment::fetch_pinned(&parsed, &parsed.packages);
    assert!(errors.is_empty(), "{errors:?}");
    let store_debs = p.store_dir().join("debs");
    std::fs::create_dir_all(&store_debs).unwrap();
    for (sha256, bytes) in &debs {
        std::fs::write(store_debs.join(format!("{sha256}.deb")), bytes).unwrap();
    }
}

/// The ids of the environment's runs as `envc log` prints them, oldest first.
fn runs(p: &Project, hosts: &TestHosts) -> Vec<String> {
    let log = p.run(hosts, &["log", "--json"]);
    ok(&log);
    let mut ids: Vec<String> = stdout(&log)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["run"].as_str().unwrap().to_string()
        })
        .collect();
    ids.reverse();
    ids
}

#[test]
fn a_broken_nginx_config_is_rolled_back_and_rollback_to_restores_the_first_deployment() {
    let mut hosts = TestHosts::start_empty();
    hosts.set_boot_hook(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testhosts/systemd-stand-in"),
    );
    hosts.add_host(&["10.77.0.10".parse().unwrap()], None);
    let p = Project::new(&hosts, "envc-rollback-");
    let env_file = p.path("prod.env");

    // The first deployment: nginx serving v1.
    p.write(&source(&hosts, GOOD, "<h1>v1</h1>\\n"));
    lock(&p, &env_file);
    let first = p.run(&hosts, &["build", "--locked"]);
    ok(&first);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n", "{}", text(&first));
    let good_conf = remote(&hosts, &format!("cat {SITE}"));

    // A config nginx refuses, with a new page: the service does not restart, so the files
    // go back as the first run left them and nginx is restarted with them.
    p.write(&source(&hosts, SYNTAX_ERROR, "<h1>v2</h1>\\n"));
    let broken = p.run(&hosts, &["build", "--locked"]);
    assert_eq!(broken.status.code(), Some(4), "{}", text(&broken));
    let said = text(&broken);
    assert!(said.contains("rolled back"), "{said}");
    assert!(
        said.contains("3 rolled back"),
        "the site, the page and the service: {said}"
    );
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n");
    // The state kept the first run's records: the update is still to do.
    let plan = p.run(&hosts, &["plan"]);
    let planned = stdout(&plan);
    assert!(
        planned.contains(&format!("file:{SITE}")) && planned.contains("update"),
        "{planned}"
    );
    let log = p.run(&hosts, &["log"]);
    ok(&log);
    assert!(
        stdout(&log).contains(&format!("rolled back on `{}`: restored", hosts.name(0)))
            && stdout(&log).contains(&format!("restarted `{}/service:nginx`", hosts.name(0))),
        "{}",
        stdout(&log)
    );

    // Valid, but serving nothing: the postcondition fails, and the same happens.
    p.write(&source(&hosts, WRONG_ROOT, "<h1>v2</h1>\\n"));
    let wrong = p.run(&hosts, &["build", "--locked"]);
    assert_eq!(wrong.status.code(), Some(4), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("postcondition http("),
        "{}",
        text(&wrong)
    );
    assert!(text(&wrong).contains("rolled back"), "{}", text(&wrong));
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n");

    // --no-rollback leaves the broken change in place; the next good build mends it.
    let kept = p.run(&hosts, &["build", "--locked", "--no-rollback"]);
    assert_eq!(kept.status.code(), Some(4), "{}", text(&kept));
    assert!(!text(&kept).contains("rolled back"), "{}", text(&kept));
    assert!(remote(&hosts, &format!("cat {SITE}")).contains("/nonexistent"));

    // A good change builds.
    p.write(&source(&hosts, GOOD, "<h1>v3</h1>\\n"));
    let good = p.run(&hosts, &["build", "--locked"]);
    ok(&good);
    assert_eq!(page(&hosts), "<h1>v3</h1>\n");

    // Back to the first deployment, from the store: its files, nginx restarted.
    let ids = runs(&p, &hosts);
    let unknown = p.run(
        &hosts,
        &["rollback", "--to", &format!("{}x", &ids[0][..10])],
    );
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    assert!(
        text(&unknown).contains(&format!("did you mean `{}`", ids[0])),
        "{}",
        text(&unknown)
    );
    let dry = p.run(&hosts, &["rollback", "--to", &ids[0], "--dry-run"]);
    ok(&dry);
    assert!(
        stdout(&dry).contains(&format!("file:{PAGE}")),
        "{}",
        text(&dry)
    );
    assert_eq!(page(&hosts), "<h1>v3</h1>\n", "a dry run changes nothing");
    let back = p.run(&hosts, &["rollback", "--to", &ids[0]]);
    ok(&back);
    assert_eq!(page(&hosts), "<h1>v1</h1>\n", "{}", text(&back));
    assert_eq!(remote(&hosts, &format!("cat {SITE}")), good_conf);
    let ids_now = runs(&p, &hosts);
    let log = p.run(&hosts, &["log"]);
    assert!(
        stdout(&log).contains(&format!("run {}  rollback", ids_now.last().unwrap())),
        "{}",
        stdout(&log)
    );
    // The source still says v3: a build is an update again.
    assert_eq!(summary(&p.run(&hosts, &["build", "--locked"])).0, 2);
    assert_eq!(page(&hosts), "<h1>v3</h1>\n");
}
