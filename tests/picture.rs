//! The environment as a picture (`graph --format html|svg`, `plan --format html`), loaded in
//! a real browser: Debian's Chromium, headless, whose `--dump-dom` gives the page as its
//! script left it. A link's fragment names a node (`#node=KEY`) or a search (`#q=TEXT`), so
//! the details panel and the search are driven as a user's link would drive them. Each page
//! is also photographed into `target/test-artifacts/` for a person to look at.
//!
//! The nodes of the local environments are files on the machine envc runs on (`@local`).

use crate::support::{offline, output};

use std::fs;
use std::path::Path;
use std::process::Command;

use offline::envc;
use output::{stdout, text};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `envc ARGS` in `dir`, which must succeed; its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let o = envc(dir, args);
    assert_eq!(o.status.code(), Some(0), "envc {args:?}: {}", text(&o));
    stdout(&o)
}

/// Writes `page` beside the others of this test, loads it in Chromium at `fragment`, keeps
/// a screenshot, and returns the DOM as the page's script left it.
fn browse(dir: &Path, name: &str, page: &str, fragment: &str) -> String {
    let file = dir.join(format!("{name}.html"));
    fs::write(&file, page).unwrap();
    let url = format!("file://{}{fragment}", file.display());
    let chromium = |extra: &[&str]| {
        // A profile of its own each time: a second Chromium on a profile whose first one
        // has not quite exited hands it the URL and exits, printing nothing.
        let profile = tempfile::tempdir().unwrap();
        let out = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .arg("--no-first-run")
            // No calls to Google's hosts as it starts: the network here is closed.
            .args([
                "--disable-background-networking",
                "--disable-component-update",
            ])
            .args(["--disable-sync", "--disable-quic"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium runs (scripts/setup installs it)");
        assert!(
            out.status.success(),
            "chromium {extra:?} {url}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let artifacts = root().join("target/test-artifacts");
    fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join(format!("picture-{name}.png"));
    chromium(&[
        "--window-size=1400,900",
        &format!("--screenshot={}", shot.display()),
    ]);
    assert!(
        fs::metadata(&shot).unwrap().len() > 10_000,
        "a screenshot of something"
    );
    let dom = String::from_utf8(chromium(&["--dump-dom"]).stdout).unwrap();
    assert!(
        dom.contains("data-ready=\"yes\""),
        "the page's script ran to its end (no exception):\n{}",
        &dom[..dom.len().min(2000)]
    );
    dom
}

/// The value of `attr` on the first element that has it after `from` in `dom`.
fn attr<'a>(dom: &'a str, from: &str, attr: &str) -> &'a str {
    let at = dom
        .find(from)
        .unwrap_or_else(|| panic!("{from} in the page"));
    let rest = &dom[at..];
    let start = rest.find(&format!("{attr}=\"")).unwrap() + attr.len() + 2;
    &rest[start..start + rest[start..].find('"').unwrap()]
}

/// (key, status) of each node element the page drew, in order.
fn drawn(dom: &str) -> Vec<(String, String)> {
    dom.split("<li class=\"node")
        .skip(1)
        .map(|li| {
            let key = attr(li, "data-key", "data-key");
            let status = attr(li, "data-status", "data-status");
            (key.to_string(), status.to_string())
        })
        .collect()
}

/// How many nodes `envc graph --format json` has.
fn graph_nodes(dir: &Path, file: &str) -> usize {
    let json: serde_json::Value =
        serde_json::from_str(&ok(dir, &["graph", file, "--format", "json"])).unwrap();
    json["nodes"].as_array().unwrap().len()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn the_examples_pictures_show_every_node_by_machine_with_details_on_a_click() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    copy_dir(&root().join("examples"), &dir.join("examples"));
    let examples = dir.join("examples");

    // The quickstart: two VMs, each box holding what runs on it, and the image.
    let page = ok(&examples, &["graph", "quickstart.env", "--format", "html"]);
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "nothing from the network: one self-contained file"
    );
    let key = "web-0/file:/etc/nginx/conf.d/upstreams.conf";
    let dom = browse(dir, "quickstart", &page, &format!("#node={key}"));
    assert_eq!(attr(&dom, "<body", "data-nodes"), "11");
    assert_eq!(
        dom.matches("<section class=\"group\"").count(),
        3,
        "web-0, web-1 and the images"
    );
    let nodes = drawn(&dom);
    assert_eq!(nodes.len(), 11, "every node drawn: {nodes:?}");
    assert!(
        nodes.iter().all(|(_, s)| s == "create"),
        "never built: {nodes:?}"
    );
    // The details panel of the linked node: its derivation is the one `envc show` prints.
    assert_eq!(attr(&dom, "<aside", "data-key"), key);
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&examples, &["show", "quickstart.env", key])).unwrap();
    let id = shown["id"].as_str().unwrap();
    let panel = &dom[dom.find("<aside").unwrap()..];
    assert!(panel.contains(id), "the derivation id {id} in the details");
    assert!(
        panel.contains("vm:web-1") && panel.contains("reads its outputs"),
        "it reads web-1's address: an edge for a deferred value"
    );
    assert!(
        panel.contains("web-0/service:nginx"),
        "the service restarted by it uses it"
    );
    assert_eq!(
        attr(&dom, "<svg id=\"edges\"", "data-edges"),
        "2",
        "its edges are drawn: from web-1, to the service (web-0 is its box)"
    );

    // The README's picture is this one, drawn before anything is built.
    let svg = ok(&examples, &["graph", "quickstart.env", "--format", "svg"]);
    let committed = fs::read_to_string(root().join("docs/quickstart.svg")).unwrap();
    assert!(
        svg == committed,
        "docs/quickstart.svg is stale: write it again with \
         `envc graph examples/quickstart.env --format svg > docs/quickstart.svg` on an empty store"
    );

    // The PostgreSQL example: every node of its graph, whatever its kind.
    let postgres = examples.join("postgres");
    let page = ok(&postgres, &["graph", "prod.env", "--format", "html"]);
    let dom = browse(dir, "postgres", &page, "");
    let n = graph_nodes(&postgres, "prod.env");
    assert_eq!(attr(&dom, "<body", "data-nodes"), n.to_string());
    assert_eq!(drawn(&dom).len(), n);

    // Kubernetes objects go by namespace.
    let k8s = examples.join("k8s");
    let page = ok(&k8s, &["graph", "prod.env", "--format", "html"]);
    let dom = browse(dir, "k8s", &page, "");
    assert!(
        dom.contains("data-kind=\"namespace\""),
        "a box per namespace"
    );
    assert_eq!(
        drawn(&dom).len(),
        graph_nodes(&k8s, "prod.env"),
        "every object drawn"
    );
}

/// An environment of files in `dir` on this machine, one per name.
fn local_env(dir: &Path, files: &[(&str, &str)]) -> String {
    let mut s = String::from("let here = host(name = \"here\", address = \"@local\")\n");
    for (name, content) in files {
        s.push_str(&format!(
            "let f_{name} = file(path = \"{}/{name}\", content = \"{content}\\n\", target = here)\n",
            dir.display()
        ));
    }
    s
}

#[test]
fn the_picture_is_coloured_by_the_plan_after_a_change_in_html_and_svg() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let out = dir.join("out");
    fs::create_dir_all(&out).unwrap();
    let env = dir.join("prod.env");
    fs::write(&env, local_env(&out, &[("a", "1"), ("b", "1"), ("c", "1")])).unwrap();
    ok(dir, &["build", "prod.env"]);
    // a changes, c leaves the source, d is new.
    fs::write(&env, local_env(&out, &[("a", "2"), ("b", "1"), ("d", "1")])).unwrap();
    let key = |n: &str| format!("here/file:{}/{n}", out.display());
    let want = |dom: &str| {
        let mut nodes = drawn(dom);
        nodes.sort();
        let mut expected = vec![
            ("host:here".to_string(), "unchanged".to_string()),
            (key("a"), "update".into()),
            (key("b"), "unchanged".into()),
            (key("c"), "delete".into()),
            (key("d"), "create".into()),
        ];
        expected.sort();
        assert_eq!(nodes, expected);
    };
    let page = ok(dir, &["plan", "prod.env", "--format", "html"]);
    let dom = browse(dir, "plan", &page, &format!("#node={}", key("a")));
    want(&dom);
    let gone = &dom[dom.find(&format!("data-key=\"{}\"", key("c"))).unwrap()..];
    assert!(
        gone.starts_with(&format!(
            "data-key=\"{}\" data-status=\"delete\" title=\"{} — delete\"><i style=\"background: rgb(199, 54, 43);\"></i><span class=\"k\">file </span>{}/c</li>",
            key("c"),
            key("c"),
            out.display()
        )),
        "a record that left the source is drawn by its kind and name, red: {}",
        &gone[..gone.len().min(300)]
    );
    let panel = &dom[dom.find("<aside").unwrap()..];
    assert!(
        panel.contains("content_hash") || panel.contains("content"),
        "what changed is in the details: {panel}"
    );
    assert!(
        panel.contains("last record") && panel.contains("run"),
        "its last record"
    );
    // `graph --format html` colours as the plan does, offline.
    let page = ok(dir, &["graph", "prod.env", "--format", "html"]);
    want(&browse(dir, "graph", &page, ""));
    // A search draws only what it finds.
    let dom = browse(dir, "search", &page, "#q=/d");
    assert_eq!(drawn(&dom), vec![(key("d"), "create".to_string())]);

    // The SVG: the same statuses, for a document.
    let svg = ok(dir, &["graph", "prod.env", "--format", "svg"]);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let mut statuses: Vec<&str> = svg
        .split("<g class=\"node\" data-status=\"")
        .skip(1)
        .map(|g| &g[..g.find('"').unwrap()])
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        ["create", "delete", "unchanged", "unchanged", "update"]
    );
    let dom = browse(
        dir,
        "svg",
        &format!(
            "<!DOCTYPE html><body>{svg}<script>document.body.dataset.ready='yes'</script></body>"
        ),
        "",
    );
    assert!(dom.contains("<svg"), "Chromium draws it");
}

#[test]
fn ten_thousand_nodes_open_collapsed_and_search_draws_only_what_it_finds() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    // 100 hosts with 99 files each, plus the hosts: 10,000 nodes.
    fs::write(
        dir.join("big.env"),
        "let hosts = [for h in 0..100 => host(name = \"h-${h}\", address = \"192.0.2.${h + 1}\")]\n\
         let files = [for h in hosts => [for f in 0..99 => file(path = \"/srv/f-${f}\", content = \"${f}\\n\", target = h)]]\n",
    )
    .unwrap();
    assert_eq!(graph_nodes(dir, "big.env"), 10_000);
    let page = ok(dir, &["graph", "big.env", "--format", "html"]);
    let dom = browse(dir, "big", &page, "");
    assert_eq!(attr(&dom, "<body", "data-nodes"), "10000");
    assert_eq!(attr(&dom, "<body", "data-groups"), "100");
    assert_eq!(
        attr(&dom, "<body", "data-rendered"),
        "0",
        "every box starts collapsed, with its counts"
    );
    // One host's files, found by a search: its box opens, the other 99 stay closed.
    let dom = browse(dir, "big-search", &page, "#q=h-42/");
    let nodes = drawn(&dom);
    assert_eq!(nodes.len(), 99, "h-42's files");
    assert!(nodes
        .iter()
        .all(|(k, s)| k.starts_with("h-42/") && s == "create"));
    // A link to one node opens its box and shows it.
    let dom = browse(dir, "big-node", &page, "#node=h-7/file:/srv/f-3");
    assert_eq!(attr(&dom, "<aside", "data-key"), "h-7/file:/srv/f-3");
    assert_eq!(drawn(&dom).len(), 100, "only its box: h-7 and its files");
}
