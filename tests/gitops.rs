//! GitOps delivery end to end: `manifest`s committed to a bare git repository on a real SSH
//! host (tests/support/nshosts.rs), reached through envc's own connection. The first build
//! commits every object with a kustomization; a build with nothing changed commits
//! nothing; one changed field is one file in one commit; an object that leaves the source
//! has its file pruned; someone else pushing while envc pushes makes envc land on top of
//! their commit, never over it; a kustomization envc did not write is refused; and with the
//! host down the build exits 4 and the state still knows what is not delivered.

use crate::support::{nshosts, output, project};

use nshosts::TestHosts;
use output::{node_outcomes, stderr, stdout, text};
use project::Project;

const REPO: &str = "/srv/fleet.git";

/// An environment delivering a Namespace, a ConfigMap (with `level`) and, when
/// `with_deployment`, a Deployment to `clusters/prod` of the repository on host 0.
fn source(addr: &str, level: &str, with_deployment: bool) -> String {
    let deployment = if with_deployment {
        r#"let web = manifest(
  target = fleet,
  api_version = "apps/v1",
  kind = "Deployment",
  name = "web",
  namespace = "shop",
  body = { spec = {
    selector = { matchLabels = { app = "web" } },
    template = {
      metadata = { labels = { app = "web" } },
      spec = { containers = [{ name = "web", image = "nginx:1.27" }] },
    },
  } },
)
"#
    } else {
        ""
    };
    format!(
        r#"let git = host(name = "git", address = "{addr}")
let fleet = gitops(name = "fleet", target = git, repo = "{REPO}", path = "clusters/prod")
let ns = manifest(target = fleet, api_version = "v1", kind = "Namespace", name = "shop")
let conf = manifest(
  target = fleet,
  api_version = "v1",
  kind = "ConfigMap",
  name = "web",
  namespace = "shop",
  body = {{ data = {{ level = "{level}", upstream = "${{git.address}}:8080" }} }},
)
{deployment}"#
    )
}

/// `git --git-dir=REPO ARGS` on host 0, its standard output.
fn git(hosts: &TestHosts, args: &str) -> String {
    let out = hosts.ssh(0, &format!("git --git-dir={REPO} {args}"));
    assert!(out.status.success(), "git {args}: {}", text(&out));
    stdout(&out)
}

fn commits(hosts: &TestHosts) -> usize {
    git(hosts, "rev-list --count main").trim().parse().unwrap()
}

/// One host with an empty bare repository at `REPO`, its address, and a project.
fn repository_host(prefix: &str) -> (TestHosts, String, Project) {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let p = Project::new(&hosts, prefix);
    let init = hosts.ssh(0, &format!("git init -q --bare -b main {REPO}"));
    assert!(init.status.success(), "{}", text(&init));
    (hosts, addr, p)
}

#[test]
fn objects_are_committed_pruned_and_land_on_top_of_others() {
    let (hosts, addr, p) = repository_host("envc-gitops-");

    // First build: one commit with every object and the kustomization.
    p.write(&source(&addr, "info", true));
    let first = p.run(&hosts, &["build", "--json"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let outcomes = node_outcomes(&first);
    let head = git(&hosts, "rev-parse main").trim().to_string();
    assert_eq!(
        outcomes["fleet/manifest:shop/ConfigMap/web"],
        format!("ok: committed {}", &head[..12]),
        "{outcomes:?}"
    );
    assert_eq!(commits(&hosts), 1);
    assert_eq!(
        git(&hosts, "ls-tree -r --name-only main"),
        "clusters/prod/_cluster/namespace-shop.yaml\nclusters/prod/kustomization.yaml\n\
         clusters/prod/shop/configmap-web.yaml\nclusters/prod/shop/deployment-web.yaml\n"
    );
    assert_eq!(
        git(&hosts, "show main:clusters/prod/shop/configmap-web.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\ndata:\n  level: info\n  upstream: \"{addr}:8080\"\n"
        )
    );
    let message = git(&hosts, "log -1 --format=%B main");
    assert!(
        message.starts_with("envc: prod (run ")
            && message.contains("Source: not a git work tree\n")
            && message.contains("Wrote: clusters/prod/shop/deployment-web.yaml\n"),
        "{message}"
    );
    // Its record is the commit that carries it.
    let shown = p.run(&hosts, &["why", "fleet/manifest:shop/ConfigMap/web"]);
    assert!(stdout(&shown).contains(&head), "{}", text(&shown));

    // Nothing changed: nothing runs, nothing is committed.
    let again = p.run(&hosts, &["build", "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        node_outcomes(&again).values().all(|o| o == "cached"),
        "{}",
        text(&again)
    );
    assert_eq!(commits(&hosts), 1);

    // One changed field: one object's file in one commit, and the kustomization's record
    // of what envc wrote there (its hash line) with it.
    p.write(&source(&addr, "debug", true));
    let changed = p.run(&hosts, &["build", "--json"]);
    assert_eq!(changed.status.code(), Some(0), "{}", text(&changed));
    assert_eq!(commits(&hosts), 2);
    assert_eq!(
        git(&hosts, "diff --name-only main~1 main"),
        "clusters/prod/kustomization.yaml\nclusters/prod/shop/configmap-web.yaml\n"
    );
    let kustomization_diff = git(
        &hosts,
        "diff -U0 main~1 main -- clusters/prod/kustomization.yaml",
    );
    let changed_lines: Vec<&str> = kustomization_diff
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert!(
        changed_lines.len() == 2
            && changed_lines.iter().all(
                |l| l[1..].starts_with("# blake3: ") && l.ends_with(" shop/configmap-web.yaml")
            ),
        "{kustomization_diff}"
    );

    // An object that left the source: its file and its line in the kustomization go.
    p.write(&source(&addr, "debug", false));
    let pruned = p.run(&hosts, &["build", "--json"]);
    assert_eq!(pruned.status.code(), Some(0), "{}", text(&pruned));
    assert!(
        node_outcomes(&pruned)["fleet/manifest:shop/Deployment/web"]
            .starts_with("ok: removed in commit "),
        "{}",
        text(&pruned)
    );
    assert_eq!(commits(&hosts), 3);
    assert_eq!(
        git(&hosts, "diff --name-only main~1 main"),
        "clusters/prod/kustomization.yaml\nclusters/prod/shop/deployment-web.yaml\n"
    );

    // Someone else pushes while envc pushes: the repository's pre-receive hook pushes a
    // commit of theirs first, once. envc's push is refused, and it starts again on top.
    let theirs = "cd /tmp && rm -rf other && git clone -q /srv/fleet.git other && cd other \
        && echo 'team docs' > README.md && git add README.md \
        && git -c user.name=someone -c user.email=someone@example.com commit -q -m 'docs: theirs' \
        && git push -q origin main";
    let hook = format!(
        "#!/bin/sh\ncat >/dev/null\n[ -e /srv/raced ] && exit 0\ntouch /srv/raced\n\
         env -i PATH=/usr/bin:/bin HOME=/root sh -c \"{theirs}\" >/srv/race.log 2>&1\nexit 0\n"
    );
    let installed = hosts.ssh(
        0,
        &format!(
            "cat > {REPO}/hooks/pre-receive <<'EOF'\n{hook}EOF\nchmod +x {REPO}/hooks/pre-receive"
        ),
    );
    assert!(installed.status.success(), "{}", text(&installed));
    p.write(&source(&addr, "warn", false));
    let raced = p.run(&hosts, &["build", "--json"]);
    assert_eq!(raced.status.code(), Some(0), "{}", text(&raced));
    assert!(
        node_outcomes(&raced)["fleet/manifest:shop/ConfigMap/web"]
            .contains("(the branch moved 1× while envc pushed; it landed on top)"),
        "{}\nhook: {}",
        text(&raced),
        stdout(&hosts.ssh(0, "cat /srv/race.log"))
    );
    assert_eq!(git(&hosts, "log -1 --format=%s main~1"), "docs: theirs\n");
    assert_eq!(git(&hosts, "show main:README.md"), "team docs\n");
    assert!(
        git(&hosts, "show main:clusters/prod/shop/configmap-web.yaml").contains("level: warn\n")
    );

    // A kustomization someone else wrote there: refused, nothing pushed, the object stays
    // undelivered in the state (the next build tries again).
    let foreign = "cd /tmp/other && git pull -q && printf 'resources:\\n- app.yaml\\n' > clusters/prod/kustomization.yaml \
        && git -c user.name=someone -c user.email=someone@example.com commit -qam 'take over' && git push -q origin main";
    let taken = hosts.ssh(0, foreign);
    assert!(taken.status.success(), "{}", text(&taken));
    let before = commits(&hosts);
    p.write(&source(&addr, "error", false));
    let refused = p.run(&hosts, &["build", "--json"]);
    assert_eq!(refused.status.code(), Some(4), "{}", text(&refused));
    assert!(
        node_outcomes(&refused)["fleet/manifest:shop/ConfigMap/web"]
            .contains("kustomization.yaml was not written by envc"),
        "{}",
        text(&refused)
    );
    assert_eq!(commits(&hosts), before);
    let plan = p.run(&hosts, &["plan"]);
    assert!(
        stdout(&plan).contains("update")
            && stdout(&plan).contains("fleet/manifest:shop/ConfigMap/web"),
        "{}",
        text(&plan)
    );
}

#[test]
fn with_the_host_down_the_build_fails_and_nothing_is_lost() {
    let (hosts, addr, p) = repository_host("envc-gitops-down-");
    p.write(&source(&addr, "info", false));
    let first = p.run(&hosts, &["build"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));

    hosts.kill_host(0);
    p.write(&source(&addr, "debug", false));
    let down = p.run(&hosts, &["build", "--json"]);
    assert_eq!(down.status.code(), Some(4), "{}", text(&down));
    assert!(
        node_outcomes(&down)["fleet/manifest:shop/ConfigMap/web"]
            .contains("cannot reach host `git`"),
        "{}",
        text(&down)
    );
    assert!(
        stderr(&down).contains("1 failed") || stdout(&down).contains("\"failed\":1"),
        "{}",
        text(&down)
    );
    // The state is whole and still holds the delivered commit: the change is pending, the
    // rest is as it was.
    let plan = p.run(&hosts, &["plan"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
    assert!(
        stdout(&plan).contains("fleet/manifest:shop/ConfigMap/web"),
        "{}",
        text(&plan)
    );
    let history = p.run(&hosts, &["log"]);
    assert!(stdout(&history).contains("failed"), "{}", text(&history));
}

#[test]
fn a_link_in_the_repository_never_leads_a_build_onto_the_controller() {
    let (hosts, addr, p) = repository_host("envc-gitops-link-");
    // A directory on the machine that runs envc, with a file someone cares about.
    let victims = p.path("victims");
    std::fs::create_dir_all(&victims).unwrap();
    std::fs::write(victims.join("victim.yaml"), "precious\n").unwrap();
    // Someone with push access commits `clusters/prod/shop` as a link to it, and a
    // kustomization that carries envc's header and lists a file through the link.
    let evil = format!(
        "cd /tmp && rm -rf evil && git init -q -b main evil && cd evil && mkdir -p clusters/prod \
         && ln -s {victims} clusters/prod/shop \
         && cat > clusters/prod/kustomization.yaml <<'EOK'\n\
         # Written by envc: objects listed here that leave the environment are removed.\n\
         # environment: prod\nresources:\n- shop/victim.yaml\nEOK\n\
         git add -A && git -c user.name=someone -c user.email=someone@example.com commit -q -m links \
         && git push -q {REPO} main",
        victims = victims.display()
    );
    let pushed = hosts.ssh(0, &evil);
    assert!(pushed.status.success(), "{}", text(&pushed));
    let before = git(&hosts, "rev-parse main");

    p.write(&source(&addr, "info", false));
    let refused = p.run(&hosts, &["build", "--json"]);
    assert_eq!(refused.status.code(), Some(4), "{}", text(&refused));
    let outcome = &node_outcomes(&refused)["fleet/manifest:shop/ConfigMap/web"];
    assert!(
        outcome.contains("`clusters/prod/shop` is a symbolic link")
            && outcome.contains("nothing was committed"),
        "{}",
        text(&refused)
    );
    // Nothing on the controller was removed or written, and nothing was pushed.
    assert_eq!(
        std::fs::read_to_string(victims.join("victim.yaml")).unwrap(),
        "precious\n"
    );
    assert_eq!(std::fs::read_dir(&victims).unwrap().count(), 1);
    assert_eq!(git(&hosts, "rev-parse main"), before);

    // The link goes, but an ignore rule hides the namespace's directory from `git add`:
    // what envc would report committed is not in the commit, so nothing is pushed.
    let ignore = "cd /tmp/evil && git rm -q clusters/prod/shop && echo 'shop/' > clusters/prod/.gitignore \
        && git add -A && git -c user.name=someone -c user.email=someone@example.com commit -q -m ignore \
        && git push -q /srv/fleet.git main";
    let pushed = hosts.ssh(0, ignore);
    assert!(pushed.status.success(), "{}", text(&pushed));
    let before = git(&hosts, "rev-parse main");
    let hidden = p.run(&hosts, &["build", "--json"]);
    assert_eq!(hidden.status.code(), Some(4), "{}", text(&hidden));
    assert!(
        node_outcomes(&hidden)["fleet/manifest:shop/ConfigMap/web"].contains(
            "the commit does not hold what envc wrote (not committed as plain files: clusters/prod/shop/configmap-web.yaml)"
        ),
        "{}",
        text(&hidden)
    );
    assert_eq!(git(&hosts, "rev-parse main"), before);
}

/// The lines of a text `envc drift` that name a difference, sorted.
fn drift_lines(o: &std::process::Output) -> Vec<String> {
    let mut lines: Vec<String> = stdout(o)
        .lines()
        .filter(|l| l.starts_with("drift     "))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// `git show main:PATH | sha256sum` on host 0: what a file on the branch hashes to, as an
/// object's record keeps it.
fn sha256_on_branch(hosts: &TestHosts, path: &str) -> String {
    let out = hosts.ssh(
        0,
        &format!("git --git-dir={REPO} show main:{path} | sha256sum"),
    );
    assert!(out.status.success(), "{}", text(&out));
    stdout(&out).split_whitespace().next().unwrap().to_string()
}

/// Commits on host 0 as someone else, in a clone at /tmp/stranger: `change` runs in the
/// clone's top, then everything is committed and pushed (forced when `force`).
fn stranger_pushes(hosts: &TestHosts, change: &str, force: bool) {
    let push = if force { "push -q -f" } else { "push -q" };
    let script = format!(
        "cd /tmp && rm -rf stranger && git clone -q {REPO} stranger && cd stranger && {change} \
         && git add -A && git -c user.name=someone -c user.email=someone@example.com commit -q -m stranger \
         && git {push} origin HEAD:main"
    );
    let out = hosts.ssh(0, &script);
    assert!(out.status.success(), "{}", text(&out));
}

const OBJECTS: [&str; 3] = [
    "fleet/manifest:Namespace/shop",
    "fleet/manifest:shop/ConfigMap/web",
    "fleet/manifest:shop/Deployment/web",
];

#[test]
fn drift_reads_the_repository_back_and_build_repairs_a_force_push() {
    let (hosts, addr, p) = repository_host("envc-gitops-drift-");
    p.write(&source(&addr, "info", true));
    let first = p.run(&hosts, &["build"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let listing = git(&hosts, "show main:clusters/prod/kustomization.yaml");

    // The repository as envc left it: no drift, and a build runs nothing and commits
    // nothing (one read of the repository, no delivery).
    let none = p.run(&hosts, &["drift"]);
    assert_eq!(none.status.code(), Some(0), "{}", text(&none));
    assert!(
        stdout(&none).contains("drift: none; every target matches its records"),
        "{}",
        text(&none)
    );
    let again = p.run(&hosts, &["build"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(output::summary(&again), (0, 5, 0), "{}", text(&again));
    assert_eq!(commits(&hosts), 1);

    // Someone force-pushes a history of their own without envc's files.
    stranger_pushes(
        &hosts,
        "git checkout -q --orphan theirs && git rm -rqf . && echo 'team docs' > README.md",
        true,
    );
    assert_eq!(git(&hosts, "ls-tree -r --name-only main"), "README.md\n");
    let dropped = p.run(&hosts, &["drift"]);
    assert_eq!(dropped.status.code(), Some(3), "{}", text(&dropped));
    assert_eq!(
        drift_lines(&dropped),
        OBJECTS.map(|o| format!("drift     {o}: exists was yes, found no")),
        "{}",
        text(&dropped)
    );
    assert!(
        stdout(&dropped).contains("drift: 3 nodes differ from their records"),
        "{}",
        text(&dropped)
    );
    let json = p.run(&hosts, &["drift", "--json"]);
    assert_eq!(json.status.code(), Some(3), "{}", text(&json));
    let expected = serde_json::json!({
        "fact": "exists", "found": "no", "node": "fleet/manifest:shop/ConfigMap/web",
        "recorded": "yes", "format_version": "1.0",
    });
    assert!(
        stdout(&json)
            .lines()
            .any(|l| serde_json::from_str::<serde_json::Value>(l).ok().as_ref() == Some(&expected)),
        "{}",
        text(&json)
    );

    // The next build (one object changed in the source too) notices: every object is
    // committed again, on top of their history, and the kustomization lists them all.
    p.write(&source(&addr, "debug", true));
    let repaired = p.run(&hosts, &["build", "--json"]);
    assert_eq!(repaired.status.code(), Some(0), "{}", text(&repaired));
    let outcomes = node_outcomes(&repaired);
    for o in OBJECTS {
        assert!(
            outcomes[o].starts_with("ok: committed "),
            "{o}: {outcomes:?}"
        );
    }
    assert!(
        stderr(&repaired)
            .contains("drift     fleet/manifest:shop/Deployment/web: exists was yes, found no"),
        "{}",
        text(&repaired)
    );
    assert_eq!(commits(&hosts), 2);
    assert_eq!(git(&hosts, "log -1 --format=%s main~1"), "stranger\n");
    assert_eq!(
        git(&hosts, "ls-tree -r --name-only main"),
        "README.md\nclusters/prod/_cluster/namespace-shop.yaml\nclusters/prod/kustomization.yaml\n\
         clusters/prod/shop/configmap-web.yaml\nclusters/prod/shop/deployment-web.yaml\n"
    );
    let listed = git(&hosts, "show main:clusters/prod/kustomization.yaml");
    assert!(
        listed.ends_with(
            "resources:\n- _cluster/namespace-shop.yaml\n- shop/configmap-web.yaml\n- shop/deployment-web.yaml\n"
        ),
        "{listed}"
    );
    // The same objects as before but the ConfigMap: only its hash line differs.
    assert_eq!(
        listing.lines().filter(|l| !listed.contains(l)).count(),
        1,
        "{listing}\n{listed}"
    );
    let clean = p.run(&hosts, &["drift"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));

    // Someone edits an object and takes another out of the kustomization (keeping envc's
    // header): the first has changed, the second would not be deployed.
    stranger_pushes(
        &hosts,
        "sed -i 's/level: debug/level: trace/' clusters/prod/shop/configmap-web.yaml \
         && sed -i '/^- shop\\/deployment-web.yaml$/d' clusters/prod/kustomization.yaml",
        false,
    );
    let theirs = sha256_on_branch(&hosts, "clusters/prod/shop/configmap-web.yaml");
    let ours = {
        let shown = p.run(
            &hosts,
            &["why", "--json", "fleet/manifest:shop/ConfigMap/web"],
        );
        let v: serde_json::Value = serde_json::from_str(stdout(&shown).trim()).unwrap();
        v["record"]["facts"]["sha256"].as_str().unwrap().to_string()
    };
    assert_ne!(ours, theirs);
    let edited = p.run(&hosts, &["drift"]);
    assert_eq!(edited.status.code(), Some(3), "{}", text(&edited));
    assert_eq!(
        drift_lines(&edited),
        [
            "drift     fleet/manifest:shop/ConfigMap/web: sha256 was {ours}, found {theirs}"
                .replace("{ours}", &ours)
                .replace("{theirs}", &theirs),
            "drift     fleet/manifest:shop/Deployment/web: file was shop/deployment-web.yaml, \
             found shop/deployment-web.yaml, but clusters/prod/kustomization.yaml does not list it"
                .to_string(),
        ],
        "{}",
        text(&edited)
    );

    // A build repairs both in one commit (the source did not change), and the build after
    // it runs nothing again.
    let before = commits(&hosts);
    let healed = p.run(&hosts, &["build"]);
    assert_eq!(healed.status.code(), Some(0), "{}", text(&healed));
    assert_eq!(output::summary(&healed), (2, 3, 0), "{}", text(&healed));
    assert_eq!(commits(&hosts), before + 1);
    assert!(
        git(&hosts, "show main:clusters/prod/shop/configmap-web.yaml").contains("level: debug\n")
    );
    assert_eq!(
        git(&hosts, "show main:clusters/prod/kustomization.yaml"),
        listed
    );
    let settled = p.run(&hosts, &["build"]);
    assert_eq!(output::summary(&settled), (0, 5, 0), "{}", text(&settled));
    assert_eq!(commits(&hosts), before + 1);
    let none = p.run(&hosts, &["drift"]);
    assert_eq!(none.status.code(), Some(0), "{}", text(&none));
}
