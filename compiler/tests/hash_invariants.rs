//! The hash invariants the product rests on:
//! - formatting, comments, record field order, item order and refactoring into `let`s or
//!   functions change no node id;
//! - changing any input of a node changes its id and the ids of everything downstream of it,
//!   and nothing else;
//! - ids are the same on every machine (a golden id guards the encoding).

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::{BTreeMap, BTreeSet};

use envc_compiler::{compile, CompileOptions, Graph, MemoryLoader, StandIn};
use petgraph::visit::Dfs;

fn examples_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// Every file under `dir`, as a project.
fn project(dir: &std::path::Path) -> MemoryLoader {
    fn walk(base: &std::path::Path, dir: &std::path::Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files);
    MemoryLoader {
        files,
        ..MemoryLoader::default()
    }
}

fn graph_of(loader: &MemoryLoader, root: &str, set: &[(&str, &str)]) -> Graph {
    let options = CompileOptions {
        params: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let c = compile(root, loader, &options);
    assert!(
        c.diagnostics.is_empty(),
        "{root} does not compile: {:#?}",
        c.diagnostics
    );
    c.graph.unwrap()
}

fn key(n: &envc_compiler::value::Node) -> String {
    let on = n
        .target
        .as_ref()
        .map_or(String::new(), |t| format!("{}/", t.name));
    format!("{on}{}:{}", n.kind.name(), n.name)
}

/// Node key → id.
fn ids(g: &Graph) -> BTreeMap<String, String> {
    g.nodes().map(|n| (key(n), n.id.hex())).collect()
}

fn with_files(loader: &MemoryLoader, edits: &[(&str, &str)]) -> MemoryLoader {
    let mut l = loader.clone();
    for (p, text) in edits {
        l.files.insert(p.to_string(), text.as_bytes().to_vec());
    }
    l
}

fn text(l: &MemoryLoader, p: &str) -> String {
    String::from_utf8(l.files[p].clone()).unwrap()
}

/// The nodes `seeds` and everything that depends on them, by key.
fn downstream(g: &Graph, seeds: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for ix in g.dag.node_indices() {
        if seeds.contains(&key(&g.dag[ix]).as_str()) {
            let mut dfs = Dfs::new(&g.dag, ix);
            while let Some(d) = dfs.next(&g.dag) {
                out.insert(key(&g.dag[d]));
            }
        }
    }
    out
}

/// Applies an edit and checks that exactly `seeds` and their dependents changed id.
fn check_change(loader: &MemoryLoader, root: &str, edits: &[(&str, &str)], seeds: &[&str]) {
    let before = graph_of(loader, root, &[]);
    let after = graph_of(&with_files(loader, edits), root, &[]);
    let (a, b) = (ids(&before), ids(&after));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the edit changed the set of nodes"
    );
    let changed: BTreeSet<String> = a
        .iter()
        .filter(|(k, id)| b[*k] != **id)
        .map(|(k, _)| k.clone())
        .collect();
    let expected = downstream(&before, seeds);
    assert!(!expected.is_empty(), "seeds {seeds:?} name no node");
    assert_eq!(
        changed, expected,
        "changed ids differ from the seeds and their dependents"
    );
}

fn replset() -> MemoryLoader {
    project(&examples_dir("replset"))
}

#[test]
fn formatting_and_comments_change_no_id() {
    for (dir, root) in [
        ("", "quickstart.env"),
        ("replset", "prod.env"),
        ("component", "prod.env"),
    ] {
        let loader = project(&examples_dir(dir));
        let base = ids(&graph_of(&loader, root, &[]));
        let mut edited = loader.clone();
        for (path, bytes) in loader
            .files
            .iter()
            .filter(|(p, _)| p.ends_with(".env") && !p.contains("templates"))
        {
            let src = String::from_utf8(bytes.clone()).unwrap();
            // Comments and blank lines before every top-level item, then a squeeze of spaces
            // after `=` (outside strings only, so only in item heads).
            let mut noisy = String::new();
            for line in src.lines() {
                if [
                    "let ", "fn ", "type ", "param ", "output ", "assert ", "import ",
                ]
                .iter()
                .any(|k| line.starts_with(k))
                {
                    noisy.push_str("\n# a comment that changes nothing\n\n");
                }
                noisy.push_str(line);
                noisy.push('\n');
            }
            edited.files.insert(path.clone(), noisy.into_bytes());
        }
        assert_eq!(
            ids(&graph_of(&edited, root, &[])),
            base,
            "{root}: comments changed ids"
        );
        let mut formatted = loader.clone();
        for (path, bytes) in loader.files.iter().filter(|(p, _)| p.ends_with(".env")) {
            let src = String::from_utf8(bytes.clone()).unwrap();
            let out = envc_lang::format::format(&src).unwrap();
            let squeezed = out.replace("\n\n", "\n");
            formatted.files.insert(path.clone(), squeezed.into_bytes());
        }
        assert_eq!(
            ids(&graph_of(&formatted, root, &[])),
            base,
            "{root}: formatting changed ids"
        );
    }
}

#[test]
fn field_order_item_order_and_refactoring_change_no_id() {
    let inline = r#"
let h = host(name = "app-1", address = "192.0.2.7")
let conf = file(path = "/etc/app.conf", content = "port=8080\nworkers=4\n", mode = 0o640, target = h)
let svc = service(name = "app", target = h, restart_on = [conf])
let m = manifest(name = "app", api_version = "v1", kind = "ConfigMap", body = { data = { replicas = "2", image = "app:1" } })
"#;
    // Same values: fields reordered, items reordered, built through lets, a typed record
    // with defaults, a function and a comprehension.
    let refactored = r#"
type App = { port: int = 8080, workers: int = 4, name: str = "app" }

let svc = [for a in [app] => service(restart_on = [conf], target = h, name = a.name)][0]

fn render(a: App) -> str {
  let lines = ["port=${a.port}", "workers=${a.workers}"]
  join(lines, "\n") + "\n"
}

let app: App = {}
let conf = file(target = h, mode = 0o640, content = render(app), path = "/etc/${app.name}.conf")
let h = host(address = "192.0.2.7", name = "app-1")
let m = manifest(body = { data = { image = "app:1", replicas = "2" } }, kind = "ConfigMap", name = "app", api_version = "v1")
"#;
    let a = ids(&graph_of(
        &MemoryLoader::new([("main.env", inline)]),
        "main.env",
        &[],
    ));
    let b = ids(&graph_of(
        &MemoryLoader::new([("main.env", refactored)]),
        "main.env",
        &[],
    ));
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
}

#[test]
fn a_template_edit_changes_the_files_that_use_it_and_their_dependents() {
    let l = replset();
    let edited = text(&l, "etcd.conf.j2").replace(
        "ETCD_INITIAL_CLUSTER_STATE=\"new\"",
        "ETCD_INITIAL_CLUSTER_STATE=\"existing\"",
    );
    check_change(
        &l,
        "prod.env",
        &[("etcd.conf.j2", &edited)],
        &[
            "db-0/file:/etc/default/etcd",
            "db-1/file:/etc/default/etcd",
            "db-2/file:/etc/default/etcd",
        ],
    );
}

#[test]
fn a_vm_change_reaches_everything_on_it_and_everything_using_its_outputs() {
    let l = replset();
    let src = text(&l, "prod.env");
    // Give the first VM more memory: the VM is replaced, so everything on it and every
    // config that lists its address changes; the other VMs do not.
    let edited = src.replace(
        "debian.machine(\"db-${m.index}\", memory = 768MiB, image = image)",
        "debian.machine(\"db-${m.index}\", memory = if m.index == 0 { 1GiB } else { 768MiB }, image = image)",
    );
    assert_ne!(src, edited, "the example changed: update this test's edit");
    check_change(&l, "prod.env", &[("prod.env", &edited)], &["vm:db-0"]);
    let changed_ids = ids(&graph_of(
        &with_files(&l, &[("prod.env", &edited)]),
        "prod.env",
        &[],
    ));
    let base = ids(&graph_of(&l, "prod.env", &[]));
    assert_eq!(changed_ids["vm:db-1"], base["vm:db-1"]);
    assert_ne!(
        changed_ids["db-1/file:/etc/default/etcd"], base["db-1/file:/etc/default/etcd"],
        "db-1's config lists db-0"
    );
}

#[test]
fn a_package_pin_changes_that_package_and_its_dependents_only() {
    let l = replset();
    let src = text(&l, "prod.env");
    let edited = src.replace(
        "{ \"etcd-server\" = \"\" }",
        "{ \"etcd-server\" = \"3.4.23-4+b4\" }",
    );
    assert_ne!(src, edited, "the example changed: update this test's edit");
    check_change(
        &l,
        "prod.env",
        &[("prod.env", &edited)],
        &[
            "db-0/package:etcd-server",
            "db-1/package:etcd-server",
            "db-2/package:etcd-server",
        ],
    );
}

#[test]
fn parameters_are_inputs() {
    let l = replset();
    let base = ids(&graph_of(&l, "prod.env", &[]));
    let same = ids(&graph_of(&l, "prod.env", &[("cluster", "\"envc-demo\"")]));
    assert_eq!(
        base, same,
        "setting a parameter to its default changes nothing"
    );
    let renamed = ids(&graph_of(&l, "prod.env", &[("cluster", "\"other\"")]));
    let changed: BTreeSet<&String> = base.keys().filter(|k| base[*k] != renamed[*k]).collect();
    // The cluster's name is in every config, and so in what comes after the configs (the
    // packages, then the daemons); the VMs and their image do not use it.
    assert!(
        changed.iter().all(|k| k.contains("/file:/etc/default/etcd")
            || k.contains("/package:etcd-server")
            || k.contains("/service:etcd")),
        "{changed:?}"
    );
    assert_eq!(changed.len(), 9, "{changed:?}");
    assert!(!changed
        .iter()
        .any(|k| k.starts_with("vm:") || k.starts_with("image:")));
    let five = ids(&graph_of(&l, "prod.env", &[("members", "5")]));
    assert_eq!(five.keys().filter(|k| k.starts_with("vm:")).count(), 5);
}

#[test]
fn compiling_twice_gives_identical_output() {
    let l = replset();
    let a = graph_of(&l, "prod.env", &[]).to_json();
    let b = graph_of(&l, "prod.env", &[]).to_json();
    assert_eq!(a, b);
}

/// The id of a fixed derivation. If this changes, every user's cache is invalidated: bump
/// `ENCODING_VERSION` deliberately and update the value here, never by accident.
#[test]
fn golden_ids() {
    let src = r#"
let h = host(name = "h1", address = "192.0.2.1")
let f = file(path = "/etc/motd", content = "hello\n", target = h)
"#;
    let g = graph_of(&MemoryLoader::new([("main.env", src)]), "main.env", &[]);
    let got = ids(&g);
    let expected: BTreeMap<String, String> = [
        (
            "host:h1",
            "93f4c1511e77e933b8a1d185712d2582a73f9a03ee4850a2cce6bcd7dd0377d6",
        ),
        (
            "h1/file:/etc/motd",
            "f60de5f862a4748fbc35464ca1cd190041730ecf4a8bdc14e19a5a539168f14c",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, expected);
}

/// The host's encoding rebuilt by hand from the format documented in docs/architecture.md,
/// independently of the encoder.
#[test]
fn encoding_matches_its_specification() {
    fn str(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut e = b"envc-derivation\0".to_vec();
    e.extend_from_slice(&1u32.to_le_bytes()); // encoding version
    str(&mut e, "host"); // kind
    str(&mut e, "h1"); // name
    e.push(0); // no target
    e.extend_from_slice(&4u64.to_le_bytes()); // attrs: 4 entries, sorted by key
    str(&mut e, "address");
    e.push(b's');
    str(&mut e, "192.0.2.1");
    str(&mut e, "after");
    e.push(b'l');
    e.extend_from_slice(&0u64.to_le_bytes());
    str(&mut e, "port");
    e.push(b'i');
    e.extend_from_slice(&22i64.to_le_bytes());
    str(&mut e, "user");
    e.push(b's');
    str(&mut e, "root");
    e.extend_from_slice(&0u64.to_le_bytes()); // inputs
    e.extend_from_slice(&0u64.to_le_bytes()); // pins
    let src = "let h = host(name = \"h1\", address = \"192.0.2.1\")";
    let g = graph_of(&MemoryLoader::new([("main.env", src)]), "main.env", &[]);
    assert_eq!(
        g.nodes().next().unwrap().id.hex(),
        blake3::hash(&e).to_hex().as_str()
    );
    // A secret is encoded by its name ('e'): the same bytes whatever its value. A file
    // that holds one is 0600 unless it says.
    let host_id = g.nodes().next().unwrap().id;
    let mut f = b"envc-derivation\0".to_vec();
    f.extend_from_slice(&1u32.to_le_bytes());
    str(&mut f, "file");
    str(&mut f, "/etc/pw");
    f.push(1);
    f.extend_from_slice(&host_id.0);
    f.extend_from_slice(&5u64.to_le_bytes()); // after, content, group, mode, owner
    str(&mut f, "after");
    f.push(b'l');
    f.extend_from_slice(&0u64.to_le_bytes());
    str(&mut f, "content");
    f.push(b'e');
    str(&mut f, "login");
    str(&mut f, "group");
    f.push(b's');
    str(&mut f, "root");
    str(&mut f, "mode");
    f.push(b'm');
    f.extend_from_slice(&0o600u32.to_le_bytes());
    str(&mut f, "owner");
    f.push(b's');
    str(&mut f, "root");
    f.extend_from_slice(&1u64.to_le_bytes()); // inputs: the host
    f.extend_from_slice(&host_id.0);
    f.extend_from_slice(&0u64.to_le_bytes()); // pins
    let src = "let h = host(name = \"h1\", address = \"192.0.2.1\")\nlet f = file(path = \"/etc/pw\", content = secret(\"login\"), target = h)";
    let g = graph_of(&MemoryLoader::new([("main.env", src)]), "main.env", &[]);
    let file = g.nodes().find(|n| &*n.name == "/etc/pw").unwrap();
    assert_eq!(file.id.hex(), blake3::hash(&f).to_hex().as_str());
}

/// Checks are not part of what a node is: adding, changing or reading deferred values in
/// them changes no id (the golden file above keeps its id with a postcondition), but the
/// nodes they read are ordered before the node, and they are kept beside the derivation.
#[test]
fn checks_change_no_id() {
    let base = r#"
let h = host(name = "h1", address = "192.0.2.1")
let v = vm(name = "db-0", image = image(name = "i"))
let f = file(path = "/etc/motd", content = "hello\n", target = h)
"#;
    let with = r#"
let h = host(name = "h1", address = "192.0.2.1")
let v = vm(name = "db-0", image = image(name = "i"))
let f = file(
  path = "/etc/motd",
  content = "hello\n",
  target = h,
  expect = [command("grep -q hello /etc/motd"), tcp(5432, host = v.address)],
  require = [free_space("/etc", 1MiB)],
)
"#;
    let a = graph_of(&MemoryLoader::new([("main.env", base)]), "main.env", &[]);
    let b = graph_of(&MemoryLoader::new([("main.env", with)]), "main.env", &[]);
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(
        ids(&b)["h1/file:/etc/motd"],
        "f60de5f862a4748fbc35464ca1cd190041730ecf4a8bdc14e19a5a539168f14c"
    );
    let f = b.nodes().find(|n| n.kind.name() == "file").unwrap();
    assert_eq!((f.expect.len(), f.require.len()), (2, 1));
    // The VM its check reads comes first, though it is no input of the file.
    assert!(f.inputs.iter().all(|i| i.kind.name() == "host"));
    assert_eq!(f.check_inputs.len(), 1);
    let order: Vec<String> = b.nodes().map(|n| key(n)).collect();
    let pos = |k: &str| order.iter().position(|x| x == k).unwrap();
    assert!(pos("vm:db-0") < pos("h1/file:/etc/motd"));
}

/// `src` compiled as `envc verify`'s lab does when a fresh VM stands in for host `h1`.
fn in_the_lab(src: &str) -> envc_compiler::Compiled {
    let options = CompileOptions {
        stand_ins: BTreeMap::from([("h1".to_string(), StandIn::Vm)]),
        ..Default::default()
    };
    compile(
        "main.env",
        &MemoryLoader::new([("main.env", src)]),
        &options,
    )
}

#[test]
fn a_hosts_base_is_locked_not_built_and_changes_no_id() {
    let without = r#"
let h = host(name = "h1", address = "192.0.2.1", user = "admin")
let f = file(path = "/etc/motd", content = "at ${h.address}\n", target = h)
"#;
    let with = r#"
let h = host(name = "h1", address = "192.0.2.1", user = "admin", base = image(name = "i"))
let f = file(path = "/etc/motd", content = "at ${h.address}\n", target = h)
output base = h.base.name
"#;
    let a = graph_of(&MemoryLoader::new([("main.env", without)]), "main.env", &[]);
    let b = graph_of(&MemoryLoader::new([("main.env", with)]), "main.env", &[]);
    // A new base does not change the machine that exists, nor what is on it.
    assert_eq!(ids(&a), ids(&b));
    // Not built: no node of the graph; locked: the graph names it for the lockfile.
    assert!(b.nodes().all(|n| n.kind.name() != "image"));
    let lab_images: Vec<String> = b.lab_images.iter().map(|n| key(n)).collect();
    assert_eq!(lab_images, ["image:i"]);

    // The lab's compile: the host is a fresh VM from its base, with a VM's defaults, and
    // what was on the host is on the VM, reading its address.
    let c = in_the_lab(with);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    let lab = c.graph.unwrap();
    let keys: BTreeSet<String> = lab.nodes().map(|n| key(n)).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["image:i", "vm:h1", "h1/file:/etc/motd"].map(String::from))
    );
    let vm = lab.nodes().find(|n| key(n) == "vm:h1").unwrap();
    assert!(vm.stands_in);
    let attrs: Vec<&str> = vm.attrs.keys().map(|k| &**k).collect();
    assert_eq!(attrs, ["after", "cpus", "disk", "image", "memory", "user"]);
    assert_eq!(
        envc_compiler::derivation::value_json(&vm.attrs["user"]),
        "root"
    );
    let f = lab.nodes().find(|n| key(n) == "h1/file:/etc/motd").unwrap();
    assert!(f.inputs.iter().any(|i| i.id == vm.id));
    assert_ne!(ids(&b)["h1/file:/etc/motd"], f.id.hex());

    // A base and an image the graph builds share the lockfile's names: the same name is
    // the same image, or an error.
    let clash = format!(
        "{with}let v = vm(name = \"v\", image = image(name = \"i\", packages = [\"curl\"]))\n"
    );
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", &*clash)]),
        &CompileOptions::default(),
    );
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["graph::conflict"]);
    let same = format!("{with}let v = vm(name = \"v\", image = image(name = \"i\"))\n");
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", &*same)]),
        &CompileOptions::default(),
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    assert!(
        c.graph.unwrap().lab_images.is_empty(),
        "the graph builds it already"
    );

    // A host without a base has nothing to boot: the lab's compile says so.
    let c = in_the_lab(without);
    let codes: Vec<&str> = c.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["eval::no-base"]);
}
