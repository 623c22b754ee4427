//! The decision at the heart of the executor, without targets: compile a source, plan it
//! against records, "realize" the plan by writing the records a successful run would
//! write (with the facts a correct step observes), then change the source and check that
//! exactly the expected nodes change, for the expected reason.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::BTreeMap;

use envc_compiler::{compile, CompileOptions, MemoryLoader};
use envc_executor::plan::{plan, Action, Plan};
use envc_executor::record::Applied;
use envc_executor::record::DriftFacts;
use envc_executor::record::{Facts, RealizationRecord};
use envc_executor::run::realization_record;
use envc_executor::spec::Spec;
use envc_executor::substitute::Known;

type Records = BTreeMap<String, RealizationRecord>;

fn spec_of(files: &[(&str, &str)]) -> (Spec, MemoryLoader) {
    let loader = MemoryLoader::new(files.iter().copied());
    let c = compile("main.env", &loader, &CompileOptions::default());
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    (
        Spec::from_graph(c.graph.as_ref().unwrap(), &c.sources),
        loader,
    )
}

/// What a successful build writes: every changed node realized with the facts a correct
/// step observes (hosts present `SHA256:<name>` unless `keys` says otherwise).
fn realize(
    spec: &Spec,
    loader: &MemoryLoader,
    records: &Records,
    keys: &BTreeMap<&str, &str>,
) -> Records {
    let mut out = records.clone();
    let p = plan(spec, records, &BTreeMap::new(), &BTreeMap::new(), loader);
    let mut known: Vec<Option<Known>> = vec![None; spec.nodes.len()];
    for n in &p.nodes {
        let i = n.index;
        let node = &spec.nodes[i];
        if n.assessment.action == Action::Unchanged {
            let r = &records[&node.key];
            known[i] = Some(Known::of_record(r));
            continue;
        }
        // Re-resolve with what this simulated run knows (as the scheduler does).
        let lookup = |j: usize| known[j].as_ref();
        let resolved = envc_executor::resolve::resolve(spec, i, &lookup, loader).expect("resolves");
        let host = node
            .target
            .map_or(node.name.as_str(), |t| spec.nodes[t].name.as_str());
        let fp = keys
            .get(host)
            .map_or(format!("SHA256:{host}"), |k| k.to_string());
        let facts = resolved
            .predicted_facts()
            .unwrap_or_else(|| match node.kind.name() {
                "host" => Facts::from([
                    ("fingerprint".into(), fp.clone()),
                    ("host_key".into(), format!("ssh-ed25519 {fp}")),
                ]),
                "package" => Facts::from([("version".into(), "1.0-1".into())]),
                _ => Facts::from([
                    ("active".into(), "active".into()),
                    ("enabled".into(), "enabled".into()),
                ]),
            });
        let applied = Applied {
            facts: facts.clone(),
            created: true,
            note: None,
            log: None,
        };
        let rec = realization_record(
            spec,
            i,
            &resolved,
            &applied,
            fp.into(),
            records.get(&node.key),
            "test",
        );
        known[i] = Some(Known::of_record(&rec));
        out.insert(node.key.clone(), rec);
    }
    for (k, _) in &p.deletions {
        out.remove(k);
    }
    out
}

/// `action node` lines for every node that is not unchanged, then deletions.
fn changes(spec: &Spec, p: &Plan) -> Vec<String> {
    let mut v: Vec<String> = p
        .nodes
        .iter()
        .filter(|n| n.assessment.action != Action::Unchanged)
        .map(|n| format!("{} {}", n.assessment.action.name(), spec.nodes[n.index].key))
        .collect();
    v.extend(p.deletions.iter().map(|(k, _)| format!("delete {k}")));
    v
}

fn reasons_of(spec: &Spec, p: &Plan, key: &str) -> Vec<String> {
    let i = spec.find(key).unwrap();
    p.nodes[i].assessment.reasons.clone()
}

const BASE: &str = r#"
let web = host(name = "web", address = "10.0.0.1")
let db = host(name = "db", address = "10.0.0.2")
let conf = file(path = "/etc/app.conf", template = path("app.j2"), vars = { port = 8080, db = db.host_key }, target = web)
let motd = file(path = "/etc/motd", content = "hello\n", target = web)
let motd_db = file(path = "/etc/motd", content = "hello\n", target = db)
let pkg = package(name = "nginx", version = "1.22.1-9", target = web)
let svc = service(name = "app", target = web, after = [pkg], restart_on = [conf])
"#;
const TEMPLATE: &str = "port={{ port }}\ndb={{ db }}\n";

/// (source edit, template, expected changes) after a full build of BASE.
fn check(edit: &dyn Fn(&str) -> String, template: &str, expected: &[&str]) {
    let (spec, loader) = spec_of(&[("main.env", BASE), ("app.j2", TEMPLATE)]);
    let records = realize(&spec, &loader, &Records::new(), &BTreeMap::new());
    let again = plan(&spec, &records, &BTreeMap::new(), &BTreeMap::new(), &loader);
    assert_eq!(
        changes(&spec, &again),
        Vec::<String>::new(),
        "a second plan changes nothing"
    );

    let source = edit(BASE);
    let (spec2, loader2) = spec_of(&[("main.env", &source), ("app.j2", template)]);
    let p = plan(
        &spec2,
        &records,
        &BTreeMap::new(),
        &BTreeMap::new(),
        &loader2,
    );
    assert_eq!(changes(&spec2, &p), expected, "source:\n{source}");
    // Realizing the change converges: the plan after it is empty.
    let after = realize(&spec2, &loader2, &records, &BTreeMap::new());
    let p = plan(&spec2, &after, &BTreeMap::new(), &BTreeMap::new(), &loader2);
    assert_eq!(changes(&spec2, &p), Vec::<String>::new());
}

#[test]
fn a_fresh_environment_creates_everything_in_order() {
    let (spec, loader) = spec_of(&[("main.env", BASE), ("app.j2", TEMPLATE)]);
    let p = plan(
        &spec,
        &Records::new(),
        &BTreeMap::new(),
        &BTreeMap::new(),
        &loader,
    );
    assert!(p
        .nodes
        .iter()
        .all(|n| n.assessment.action == Action::Create));
    // The template reads db's key, unknown before db is first contacted: it waits.
    let conf = spec.find("web/file:/etc/app.conf").unwrap();
    assert!(p.nodes[conf].assessment.resolved.is_err());
    // A pinned package and inline files resolve before anything ran.
    let motd = spec.find("web/file:/etc/motd").unwrap();
    assert!(p.nodes[motd].assessment.resolved.is_ok());
}

#[test]
fn changes_rerun_exactly_what_they_reach() {
    let same = |s: &str| s.to_string();
    // Nothing changed.
    check(&same, TEMPLATE, &[]);
    // A template edit re-runs that file and the service restarted by it, nothing else.
    check(
        &same,
        "port={{ port }}\ndb={{ db }}\nextra=1\n",
        &["update web/file:/etc/app.conf", "update web/service:app"],
    );
    // A template edit that renders the same bytes changes nothing (early cutoff at render).
    check(&same, "port={{ port }}{# a comment #}\ndb={{ db }}\n", &[]);
    // A var that changes the rendering: the same two.
    check(
        &|s| s.replace("port = 8080", "port = 9090"),
        TEMPLATE,
        &["update web/file:/etc/app.conf", "update web/service:app"],
    );
    // One host's motd: only that one file.
    check(
        &|s| {
            s.replace(
                r#"content = "hello\n", target = db"#,
                r#"content = "bye\n", target = db"#,
            )
        },
        TEMPLATE,
        &["update db/file:/etc/motd"],
    );
    // A mode change: the file only (the service restarts on conf, not motd).
    check(
        &|s| {
            s.replace(
                r#"content = "hello\n", target = web"#,
                r#"content = "hello\n", mode = 0o600, target = web"#,
            )
        },
        TEMPLATE,
        &["update web/file:/etc/motd"],
    );
    // A package version moves: the package, and the service that runs after it.
    check(
        &|s| s.replace("1.22.1-9", "1.22.1-10"),
        TEMPLATE,
        &["update web/package:nginx", "update web/service:app"],
    );
    // A removed node is deleted, and nothing else moves.
    check(
        &|s| {
            s.replace(
                "let motd_db = file(path = \"/etc/motd\", content = \"hello\\n\", target = db)\n",
                "",
            )
        },
        TEMPLATE,
        &["delete db/file:/etc/motd"],
    );
    // A host's address changes: the host is updated (reconnect, key checked); what is on
    // it is not, because the machine (its key) is the same.
    check(
        &|s| s.replace("10.0.0.2", "10.0.0.3"),
        TEMPLATE,
        &["update host:db"],
    );
}

#[test]
fn reasons_name_the_input_that_changed() {
    let (spec, loader) = spec_of(&[("main.env", BASE), ("app.j2", TEMPLATE)]);
    let records = realize(&spec, &loader, &Records::new(), &BTreeMap::new());
    let (spec2, loader2) = spec_of(&[
        (
            "main.env",
            &BASE.replace(
                "content = \"hello\\n\", target = web",
                "content = \"hello\\n\", mode = 0o600, target = web",
            ),
        ),
        ("app.j2", TEMPLATE),
    ]);
    let p = plan(
        &spec2,
        &records,
        &BTreeMap::new(),
        &BTreeMap::new(),
        &loader2,
    );
    assert_eq!(
        reasons_of(&spec2, &p, "web/file:/etc/motd"),
        vec![r#"mode: "0o644" → "0o600""#]
    );

    let (spec3, loader3) = spec_of(&[("main.env", BASE), ("app.j2", "changed\n")]);
    let p = plan(
        &spec3,
        &records,
        &BTreeMap::new(),
        &BTreeMap::new(),
        &loader3,
    );
    // The content changed, and the template explains why.
    let r = reasons_of(&spec3, &p, "web/file:/etc/app.conf");
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r[0].starts_with("content: blake3:"), "{r:?}");
    assert!(
        r[1].starts_with("template: ") && r[1].contains("app.j2"),
        "{r:?}"
    );
    let r = reasons_of(&spec3, &p, "web/service:app");
    assert!(r[0].starts_with("restart_on: "), "{r:?}");
}

#[test]
fn a_new_target_identity_rebuilds_everything_on_it() {
    let (spec, loader) = spec_of(&[("main.env", BASE), ("app.j2", TEMPLATE)]);
    let records = realize(&spec, &loader, &Records::new(), &BTreeMap::new());
    // The db machine was rebuilt: its host record now names a new key.
    let rebuilt = realize(
        &spec,
        &loader,
        &{
            let mut r = records.clone();
            r.remove("host:db");
            r
        },
        &BTreeMap::from([("db", "SHA256:reinstalled")]),
    );
    let p = plan(&spec, &rebuilt, &BTreeMap::new(), &BTreeMap::new(), &loader);
    assert_eq!(changes(&spec, &p), Vec::<String>::new());
    assert_eq!(
        rebuilt["db/file:/etc/motd"].target_identity,
        "SHA256:reinstalled"
    );
    // The db key feeds web's template: web's conf re-rendered with the new key, and the
    // service restarted; nothing else on web.
    assert_ne!(
        rebuilt["web/file:/etc/app.conf"].resolved_hash,
        records["web/file:/etc/app.conf"].resolved_hash
    );
    assert_eq!(rebuilt["web/file:/etc/motd"], records["web/file:/etc/motd"]);
}

#[test]
fn drift_turns_an_unchanged_node_into_an_update() {
    let (spec, loader) = spec_of(&[("main.env", BASE), ("app.j2", TEMPLATE)]);
    let records = realize(&spec, &loader, &Records::new(), &BTreeMap::new());
    let drift: BTreeMap<String, DriftFacts> = BTreeMap::from([(
        "web/file:/etc/motd".to_string(),
        vec![("sha256".to_string(), "aaa".to_string(), "bbb".to_string())],
    )]);
    let p = plan(&spec, &records, &BTreeMap::new(), &drift, &loader);
    assert_eq!(changes(&spec, &p), vec!["update web/file:/etc/motd"]);
    assert_eq!(
        reasons_of(&spec, &p, "web/file:/etc/motd"),
        vec!["drift: sha256 was aaa, found bbb"]
    );
}

#[test]
fn nodes_that_cannot_run_yet_say_why() {
    let (spec, loader) = spec_of(&[
        (
            "main.env",
            r#"
let h = host(name = "h", address = "10.0.0.1")
let bad = file(path = "/etc/x", template = path("t.j2"), vars = {}, target = h)
let vm1 = vm(name = "v", image = image(name = "i"))
"#,
        ),
        ("t.j2", "{{ missing }}\n"),
    ]);
    let p = plan(
        &spec,
        &Records::new(),
        &BTreeMap::new(),
        &BTreeMap::new(),
        &loader,
    );
    let err = |key: &str| match &p.nodes[spec.find(key).unwrap()].assessment.resolved {
        Err(envc_executor::substitute::Resolution::Failed(m)) => m.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        err("h/file:/etc/x").contains("t.j2"),
        "{}",
        err("h/file:/etc/x")
    );
    assert!(
        err("h/file:/etc/x").contains("missing"),
        "{}",
        err("h/file:/etc/x")
    );
    // A VM waits for its image, which has to be built first.
    let vm = &p.nodes[spec.find("vm:v").unwrap()].assessment;
    assert_eq!(
        vm.resolved.as_ref().err(),
        Some(&envc_executor::substitute::Resolution::Pending(
            spec.find("image:i").unwrap()
        ))
    );
    assert_eq!(
        p.nodes[spec.find("image:i").unwrap()].assessment.action,
        envc_executor::plan::Action::Create
    );
}

/// A rendered template keeps its text's line endings, the last newline included (minijinja
/// drops a final newline unless told otherwise).
#[test]
fn templates_keep_their_trailing_newline() {
    use envc_executor::substitute::render_template;
    let vars = serde_json::json!({"x": 1, "ps": ["a", "b"]});
    for (template, rendered) in [
        ("x={{ x }}\n", "x=1\n"),
        ("x={{ x }}", "x=1"),
        ("x={{ x }}\n\n", "x=1\n\n"),
        ("{% for p in ps %}{{ p }}\n{% endfor %}", "a\nb\n"),
        ("{% for p in ps %}{{ p }}\n{% endfor %}\n", "a\nb\n\n"),
        ("{# note #}\n", "\n"),
        ("\n", "\n"),
    ] {
        let out = render_template("t.j2", template, &vars).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), rendered, "{template:?}");
    }
}

/// What leaves the graph is planned as `build` deletes it: a record plus an intent on the
/// same target is envc's to remove; a thing only an intent knows of (a step killed before
/// its record) is listed too; an intent for another target identity does not make a record
/// envc's. So `destroy` without `--yes` shows what `--yes` removes.
#[test]
fn deletions_follow_intents_as_build_does() {
    use envc_executor::record::Intent;
    let record = |node: &str, identity: &str, created: bool| RealizationRecord {
        resolved_hash: "r".into(),
        target_identity: identity.into(),
        node: node.into(),
        derivation: "d".into(),
        attrs: BTreeMap::new(),
        facts: Facts::new(),
        output_hash: "o".into(),
        created,
        run: "run".into(),
        at_unix: 1,
        checks_hash: None,
        undo: None,
        adopted: false,
        content: None,
    };
    let intent = |node: &str, identity: &str| Intent {
        node: node.into(),
        target_identity: identity.into(),
        facts: Facts::new(),
        run: "run".into(),
        at_unix: 1,
    };
    let records: Records = [
        record("h/file:/a", "SHA256:h", false),
        record("h/file:/b", "SHA256:h", false),
        record("h/file:/c", "SHA256:h", true),
    ]
    .into_iter()
    .map(|r| (r.node.clone(), r))
    .collect();
    let intents: BTreeMap<String, Intent> = [
        intent("h/file:/a", "SHA256:h"),
        intent("h/file:/b", "SHA256:other"),
        intent("h/file:/d", "SHA256:h"),
    ]
    .into_iter()
    .map(|i| (i.node.clone(), i))
    .collect();
    let (spec, loader) = spec_of(&[("main.env", "")]);
    let p = plan(&spec, &records, &intents, &BTreeMap::new(), &loader);
    let got: Vec<(&str, bool)> = p
        .deletions
        .iter()
        .map(|(k, r)| (k.as_str(), r.created))
        .collect();
    assert_eq!(
        got,
        [
            ("h/file:/a", true),
            ("h/file:/b", false),
            ("h/file:/c", true),
            ("h/file:/d", true)
        ]
    );
}

/// Checks are not part of a node's resolved hash: adding or changing a postcondition plans
/// the node `check` (its postconditions run again, nothing is redeployed, dependents are
/// untouched); a precondition alone changes nothing (it guards changes, and there are none).
#[test]
fn changed_postconditions_are_checked_again_not_redeployed() {
    let step = |records: &Records, source: &str| {
        let (spec, loader) = spec_of(&[("main.env", source), ("app.j2", TEMPLATE)]);
        let p = plan(&spec, records, &BTreeMap::new(), &BTreeMap::new(), &loader);
        let after = realize(&spec, &loader, records, &BTreeMap::new());
        (
            changes(&spec, &p),
            reasons_of(&spec, &p, "web/package:nginx"),
            after,
        )
    };
    let (_, _, built) = step(&Records::new(), BASE);
    let pkg = r#"package(name = "nginx", version = "1.22.1-9", target = web)"#;
    let with = |checks: &str| {
        BASE.replace(
            pkg,
            &pkg.replace("target = web", &format!("target = web, {checks}")),
        )
    };

    let expect = with(r#"expect = [http("http://${db.host_key}/")]"#);
    let (c, reasons, built) = step(&built, &expect);
    assert_eq!(c, ["check web/package:nginx"]);
    assert_eq!(
        reasons,
        [r#"expect: (none) → ["http(\"http://ssh-ed25519 SHA256:db/\")"]"#]
    );
    // Once they held (and were recorded), nothing is left to do.
    let (c, _, built) = step(&built, &expect);
    assert!(c.is_empty(), "{c:?}");
    // Another postcondition: checked again.
    let (c, _, built) = step(&built, &with(r#"expect = [tcp(80)]"#));
    assert_eq!(c, ["check web/package:nginx"]);
    // Moved in the file, or given a precondition: nothing to do.
    let (c, _, _) = step(
        &built,
        &with("\n  expect = [tcp(80)],\n  require = [os_release(\"debian\")]"),
    );
    assert!(c.is_empty(), "{c:?}");
}
