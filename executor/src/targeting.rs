//! Targeted builds (`--only`, `--exclude`): which nodes of the graph a plan or build takes
//! up, and which records of nodes that left the graph it may delete.
//!
//! The selection is closed under needs: `--only` takes the named nodes and everything they
//! read (inputs, targets, what their checks read), transitively; `--exclude` leaves the
//! named nodes out and everything that reads them. Either way no kept node reads a node
//! left out, so the kept nodes form a graph of their own ([`restrict`]), which plan and
//! build work on unchanged; what was left out rides along on the spec
//! ([`Spec::targeted`]) so that deletions spare it and the run record names it.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::record::Targeted;
use crate::spec::{on_target, targetless, CheckDecl, Spec, Val};

/// A pattern that names no node of the graph nor any record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoMatch {
    /// `--only` or `--exclude`.
    pub flag: &'static str,
    pub pattern: String,
    /// The key closest to the pattern, if one is close enough to be what was meant.
    pub closest: Option<String>,
}

impl std::fmt::Display for NoMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}` matches no node", self.flag, self.pattern)?;
        if let Some(c) = &self.closest {
            write!(f, " (did you mean `{c}`?)")?;
        }
        Ok(())
    }
}

/// Why a selection cannot be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectError {
    NoMatch(NoMatch),
    /// The objects of one GitOps repository go in one commit, which lists them all: a
    /// selection keeping some and leaving others out would drop those from it.
    SplitRepository {
        repository: String,
        kept: String,
        left_out: String,
    },
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::NoMatch(m) => write!(f, "{m}"),
            SelectError::SplitRepository {
                repository,
                kept,
                left_out,
            } => write!(
                f,
                "the selection keeps `{kept}` but leaves out `{left_out}`: the objects of repository `{repository}` are delivered in one commit; select all of `{repository}/*` or none"
            ),
        }
    }
}

impl std::error::Error for SelectError {}

/// Whether `key` matches `pattern`: `*` stands for any run of characters (`/` included,
/// so `web-*/file:*` reaches every file of every `web-` machine), `?` for one; anything
/// else is itself.
pub fn matches(pattern: &str, key: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let k: Vec<char> = key.chars().collect();
    // Iterative wildcard matching with one backtrack point (the last `*`): linear space,
    // and no blow-up on patterns with many stars.
    let (mut pi, mut ki) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ki < k.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ki));
                pi += 1;
            }
            Some(&c) if c == '?' || c == k[ki] => {
                pi += 1;
                ki += 1;
            }
            _ => match star {
                Some((sp, sk)) => {
                    pi = sp + 1;
                    ki = sk + 1;
                    star = Some((sp, sk + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The nodes each node reads: its inputs, its target, and whatever its attributes and
/// checks name.
fn needs(spec: &Spec) -> Vec<BTreeSet<usize>> {
    spec.nodes
        .iter()
        .map(|n| {
            let mut out: BTreeSet<usize> = n.inputs.iter().copied().collect();
            out.extend(n.target);
            n.attrs.values().for_each(|v| refs(v, &mut out));
            for c in &n.checks {
                c.args.values().for_each(|v| refs(v, &mut out));
            }
            out
        })
        .collect()
}

fn refs(v: &Val, out: &mut BTreeSet<usize>) {
    match v {
        Val::Node(j) | Val::Output { node: j, .. } => {
            out.insert(*j);
        }
        Val::List(xs) | Val::Concat(xs) => xs.iter().for_each(|x| refs(x, out)),
        Val::Record(r) => r.values().for_each(|x| refs(x, out)),
        Val::Json(inner) => refs(inner, out),
        _ => {}
    }
}

/// Decides what `--only` / `--exclude` keep of `spec`. `recorded` holds the keys of the
/// environment's live records (and intents): a pattern may name a record whose node left
/// the graph (to delete it with `--only`, or to spare it with `--exclude`).
///
/// Returns, per node, whether it is kept, and what was left out. Every pattern must match
/// a node or a record.
pub fn select(
    spec: &Spec,
    recorded: &BTreeSet<String>,
    only: &[String],
    exclude: &[String],
) -> Result<(Vec<bool>, Targeted), SelectError> {
    let keys: Vec<&str> = spec.nodes.iter().map(|n| n.key.as_str()).collect();
    let in_graph: BTreeSet<&str> = keys.iter().copied().collect();
    let gone: Vec<&str> = (recorded.iter())
        .map(String::as_str)
        .filter(|k| !in_graph.contains(k))
        .collect();
    for (flag, patterns) in [("--only", only), ("--exclude", exclude)] {
        for p in patterns {
            if !keys.iter().chain(&gone).any(|k| matches(p, k)) {
                let closest = envc_lang::diag::closest(p, keys.iter().chain(&gone).copied());
                return Err(SelectError::NoMatch(NoMatch {
                    flag,
                    pattern: p.clone(),
                    closest: closest.map(str::to_string),
                }));
            }
        }
    }
    let hit = |patterns: &[String], k: &str| patterns.iter().any(|p| matches(p, k));
    let needs = needs(spec);
    let n = spec.nodes.len();
    // --only: the named nodes and, transitively, what they need. Inputs come before their
    // users in the graph's order, so one pass from the end closes it.
    let mut keep = vec![only.is_empty(); n];
    if !only.is_empty() {
        // A record named to be deleted needs its machine, to be reached.
        let machines_of_gone: BTreeSet<String> = (gone.iter())
            .filter(|k| hit(only, k))
            .filter_map(|k| on_target(k)?.target)
            .collect();
        for i in (0..n).rev() {
            let node = &spec.nodes[i];
            let reached = node.kind.is_target() && machines_of_gone.contains(&node.name);
            if keep[i] || reached || hit(only, keys[i]) {
                keep[i] = true;
                for &j in &needs[i] {
                    keep[j] = true;
                }
            }
        }
    }
    // --exclude: the named nodes and, transitively, what reads them; one pass forward.
    let mut excluded = vec![false; n];
    for i in 0..n {
        excluded[i] = hit(exclude, keys[i]) || needs[i].iter().any(|&j| excluded[j]);
        if excluded[i] {
            keep[i] = false;
        }
    }
    split_repositories(spec, &keep)?;
    let left_out: Vec<String> = (0..n)
        .filter(|&i| !keep[i])
        .map(|i| keys[i].to_string())
        .collect();
    // Targets left out: nothing recorded on them is touched.
    let targets_left_out: BTreeSet<&str> = (0..n)
        .filter(|&i| !keep[i] && spec.nodes[i].kind.is_target())
        .map(|i| spec.nodes[i].name.as_str())
        .collect();
    let chosen = |k: &str| (only.is_empty() || hit(only, k)) && !hit(exclude, k);
    // A machine with a record on it that is excluded stays, as that record does.
    let machines_spared: BTreeSet<String> = (gone.iter())
        .filter(|k| hit(exclude, k))
        .filter_map(|k| on_target(k)?.target)
        .collect();
    // Machines that leave and are deleted take what is recorded on them along.
    let machines_deleted: BTreeSet<String> = (gone.iter())
        .filter(|k| chosen(k))
        .filter_map(|k| targetless(k))
        .filter(|k| k.kind.is_target() && !machines_spared.contains(&k.name))
        .map(|k| k.name)
        .collect();
    let kept: Vec<String> = (gone.iter())
        .filter(|k| {
            let deleted = match on_target(k).and_then(|t| t.target) {
                Some(t) if targets_left_out.contains(t.as_str()) => false,
                Some(t) => !hit(exclude, k) && (chosen(k) || machines_deleted.contains(&t)),
                None => match targetless(k) {
                    Some(m) if m.kind.is_target() => machines_deleted.contains(&m.name),
                    _ => chosen(k),
                },
            };
            !deleted
        })
        .map(|k| k.to_string())
        .collect();
    let outputs_left_out = (spec.outputs.iter())
        .filter(|(_, v)| {
            let mut r = BTreeSet::new();
            refs(v, &mut r);
            r.iter().any(|&j| !keep[j])
        })
        .map(|(name, _)| name.clone())
        .collect();
    Ok((
        keep,
        Targeted {
            only: only.to_vec(),
            exclude: exclude.to_vec(),
            left_out,
            kept,
            outputs_left_out,
        },
    ))
}

/// A GitOps repository whose objects the selection splits.
fn split_repositories(spec: &Spec, keep: &[bool]) -> Result<(), SelectError> {
    let mut by_repo: BTreeMap<usize, (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, node) in spec.nodes.iter().enumerate() {
        let Some(t) = node.target else { continue };
        if crate::kinds::of(spec.nodes[t].kind).holds().is_none() {
            continue;
        }
        let e = by_repo.entry(t).or_default();
        match keep[i] {
            true => e.0 = e.0.or(Some(i)),
            false => e.1 = e.1.or(Some(i)),
        }
    }
    for (repo, seen) in by_repo {
        if let (Some(k), Some(l)) = seen {
            return Err(SelectError::SplitRepository {
                repository: spec.nodes[repo].name.clone(),
                kept: spec.nodes[k].key.clone(),
                left_out: spec.nodes[l].key.clone(),
            });
        }
    }
    Ok(())
}

/// The graph of the kept nodes (`keep`, as [`select`] decides it), renumbered, with what
/// was left out on it. Its `graph_hash` stays the source's: runs name the graph they were
/// made from.
pub fn restrict(spec: &Spec, keep: &[bool], targeted: Targeted) -> Spec {
    let mut at = vec![None; spec.nodes.len()];
    let mut next = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            at[i] = Some(next);
            next += 1;
        }
    }
    // Only kept nodes are renumbered, and they read only kept nodes.
    let ix = |j: usize| at.get(j).copied().flatten().unwrap_or(j);
    let nodes = (spec.nodes.iter().zip(keep))
        .filter(|(_, &k)| k)
        .map(|(n, _)| {
            let mut n = n.clone();
            n.inputs = n.inputs.iter().map(|&j| ix(j)).collect();
            n.target = n.target.map(ix);
            n.attrs = (n.attrs.iter())
                .map(|(k, v)| (k.clone(), renumber(v, &ix)))
                .collect();
            n.checks = (n.checks.iter())
                .map(|c| CheckDecl {
                    args: (c.args.iter())
                        .map(|(k, v)| (k.clone(), renumber(v, &ix)))
                        .collect(),
                    ..c.clone()
                })
                .collect();
            n
        })
        .collect();
    let outputs = (spec.outputs.iter())
        .filter(|(name, _)| !targeted.outputs_left_out.contains(name))
        .map(|(name, v)| (name.clone(), renumber(v, &ix)))
        .collect();
    Spec {
        nodes,
        outputs,
        targeted: Some(std::sync::Arc::new(targeted)),
        ..spec.clone()
    }
}

fn renumber(v: &Val, ix: &dyn Fn(usize) -> usize) -> Val {
    match v {
        Val::Node(j) => Val::Node(ix(*j)),
        Val::Output { node, output } => Val::Output {
            node: ix(*node),
            output: output.clone(),
        },
        Val::List(xs) => Val::List(xs.iter().map(|x| renumber(x, ix)).collect()),
        Val::Concat(xs) => Val::Concat(xs.iter().map(|x| renumber(x, ix)).collect()),
        Val::Record(r) => Val::Record(
            r.iter()
                .map(|(k, x)| (k.clone(), renumber(x, ix)))
                .collect(),
        ),
        Val::Json(inner) => Val::Json(Box::new(renumber(inner, ix))),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

    use super::*;
    use envc_compiler::{compile, CompileOptions, MemoryLoader};

    /// Two machines, each with nginx, its config and the service that reads both; a motd
    /// on the first; an output reading the second.
    const SRC: &str = "\
let web0 = host(name = \"web-0\", address = \"192.0.2.10\")
let web1 = host(name = \"web-1\", address = \"192.0.2.11\")
let pkg0 = package(name = \"nginx\", target = web0)
let conf0 = file(path = \"/etc/nginx/nginx.conf\", content = \"a\", target = web0)
let svc0 = service(name = \"nginx\", target = web0, after = [pkg0], restart_on = [conf0])
let motd = file(path = \"/etc/motd\", content = \"hi\", target = web0)
let pkg1 = package(name = \"nginx\", target = web1)
let conf1 = file(path = \"/etc/nginx/nginx.conf\", content = \"b\", target = web1)
let svc1 = service(name = \"nginx\", target = web1, after = [pkg1], restart_on = [conf1])
output second = conf1
";

    fn spec() -> Spec {
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", SRC)]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        Spec::from_graph(&c.graph.unwrap(), &c.sources)
    }

    /// Selects with `only` and `exclude` against records `recorded`: `kept` are the graph
    /// keys kept (sorted), `spared` the records of nodes gone from the graph not deleted.
    fn check(recorded: &[&str], only: &[&str], exclude: &[&str], kept: &[&str], spared: &[&str]) {
        let spec = spec();
        let recorded: BTreeSet<String> = recorded.iter().map(|s| s.to_string()).collect();
        let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (keep, t) = select(&spec, &recorded, &strings(only), &strings(exclude)).unwrap();
        let mut got: Vec<&str> = (spec.nodes.iter().zip(&keep))
            .filter(|(_, &k)| k)
            .map(|(n, _)| n.key.as_str())
            .collect();
        got.sort_unstable();
        let mut kept = kept.to_vec();
        kept.sort_unstable();
        assert_eq!(got, kept, "kept, for --only {only:?} --exclude {exclude:?}");
        assert_eq!(t.kept, spared, "spared records");
        // What is left out is exactly the rest, and the restricted graph is well formed.
        assert_eq!(t.left_out.len() + got.len(), spec.nodes.len());
        let sub = restrict(&spec, &keep, t);
        let mut sub_keys: Vec<&str> = sub.nodes.iter().map(|n| n.key.as_str()).collect();
        sub_keys.sort_unstable();
        assert_eq!(sub_keys, kept);
        for (i, n) in sub.nodes.iter().enumerate() {
            for &j in n.inputs.iter().chain(&n.target) {
                assert!(j < i, "{} reads node {j}, not before it", n.key);
            }
        }
    }

    fn no_match(only: &[&str], exclude: &[&str], expected: &str) {
        let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let recorded = BTreeSet::from(["web-0/file:/etc/old".to_string()]);
        let e = select(&spec(), &recorded, &strings(only), &strings(exclude)).unwrap_err();
        assert_eq!(e.to_string(), expected);
    }

    #[test]
    fn globs() {
        for (pattern, key, expected) in [
            ("web-0/file:/etc/motd", "web-0/file:/etc/motd", true),
            ("web-0/file:/etc/motd", "web-0/file:/etc/motdx", false),
            ("web-*/file:*", "web-1/file:/etc/nginx/nginx.conf", true),
            ("web-*/file:*", "web-1/package:nginx", false),
            ("*/service:nginx", "web-0/service:nginx", true),
            ("*/service:nginx", "host:web-0", false),
            ("host:web-?", "host:web-1", true),
            ("host:web-?", "host:web-10", false),
            ("*", "anything/at:all", true),
            ("*a*b*c", "xaxbxxc", true),
            ("*a*b*c", "xaxcxxb", false),
            ("", "", true),
            ("**", "", true),
        ] {
            assert_eq!(matches(pattern, key), expected, "{pattern} ~ {key}");
        }
    }

    #[test]
    fn only_takes_what_the_nodes_need_and_nothing_that_needs_them() {
        // A file: itself and its machine; not the service that restarts on it.
        check(
            &[],
            &["web-0/file:/etc/nginx/nginx.conf"],
            &[],
            &["host:web-0", "web-0/file:/etc/nginx/nginx.conf"],
            &[],
        );
        // A service: its package and config, transitively its machine.
        check(
            &[],
            &["web-1/service:nginx"],
            &[],
            &[
                "host:web-1",
                "web-1/file:/etc/nginx/nginx.conf",
                "web-1/package:nginx",
                "web-1/service:nginx",
            ],
            &[],
        );
        // Globs and repetition: their union.
        check(
            &[],
            &["*/package:nginx", "web-0/file:/etc/motd"],
            &[],
            &[
                "host:web-0",
                "host:web-1",
                "web-0/file:/etc/motd",
                "web-0/package:nginx",
                "web-1/package:nginx",
            ],
            &[],
        );
        // A machine alone.
        check(&[], &["host:web-1"], &[], &["host:web-1"], &[]);
    }

    #[test]
    fn exclude_leaves_out_the_nodes_and_what_needs_them() {
        check(
            &[],
            &[],
            &["web-0/package:nginx"],
            &[
                "host:web-0",
                "host:web-1",
                "web-0/file:/etc/motd",
                "web-0/file:/etc/nginx/nginx.conf",
                "web-1/file:/etc/nginx/nginx.conf",
                "web-1/package:nginx",
                "web-1/service:nginx",
            ],
            &[],
        );
        // A machine: all that is on it.
        check(
            &[],
            &[],
            &["host:web-1"],
            &[
                "host:web-0",
                "web-0/file:/etc/motd",
                "web-0/file:/etc/nginx/nginx.conf",
                "web-0/package:nginx",
                "web-0/service:nginx",
            ],
            &[],
        );
        // Only, then exclude: a need excluded takes its users out of the only.
        check(
            &[],
            &["web-0/service:nginx", "web-0/file:/etc/motd"],
            &["web-0/file:/etc/nginx/nginx.conf"],
            &["host:web-0", "web-0/file:/etc/motd", "web-0/package:nginx"],
            &[],
        );
    }

    #[test]
    fn records_of_nodes_gone_from_the_source() {
        let gone = [
            "web-0/file:/etc/old",
            "web-1/file:/etc/old",
            "host:web-9",
            "web-9/file:/x",
        ];
        // No selection touches them but a full build: all are deleted.
        check(&gone, &[], &[], &ALL, &[]);
        // --only deletes only those it names (and what is on a machine it deletes).
        check(
            &gone,
            &["web-0/file:/etc/old", "host:web-9"],
            &[],
            &["host:web-0"],
            &["web-1/file:/etc/old"],
        );
        // --exclude spares those it names, and what is on a machine it leaves out.
        check(
            &gone,
            &[],
            &["host:web-1", "web-9/file:/x"],
            &ALL[..5],
            &["host:web-9", "web-1/file:/etc/old", "web-9/file:/x"],
        );
    }

    const ALL: [&str; 9] = [
        "host:web-0",
        "web-0/file:/etc/motd",
        "web-0/file:/etc/nginx/nginx.conf",
        "web-0/package:nginx",
        "web-0/service:nginx",
        "host:web-1",
        "web-1/file:/etc/nginx/nginx.conf",
        "web-1/package:nginx",
        "web-1/service:nginx",
    ];

    #[test]
    fn patterns_that_match_nothing() {
        no_match(
            &["web-0/file:/etc/nginx/nginx.cnf"],
            &[],
            "--only `web-0/file:/etc/nginx/nginx.cnf` matches no node (did you mean `web-0/file:/etc/nginx/nginx.conf`?)",
        );
        no_match(
            &[],
            &["web-0/file:/etc/ol"],
            "--exclude `web-0/file:/etc/ol` matches no node (did you mean `web-0/file:/etc/old`?)",
        );
        no_match(&["db-*"], &[], "--only `db-*` matches no node");
    }

    #[test]
    fn the_objects_of_a_repository_go_together() {
        let src = "\
let git = host(name = \"git\", address = \"192.0.2.5\")
let fleet = gitops(name = \"fleet\", target = git, repo = \"/srv/fleet.git\", path = \"p\")
let ns = manifest(target = fleet, api_version = \"v1\", kind = \"Namespace\", name = \"shop\")
let cm = manifest(target = fleet, api_version = \"v1\", kind = \"ConfigMap\", name = \"web\", namespace = \"shop\")
";
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src)]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        let spec = Spec::from_graph(&c.graph.unwrap(), &c.sources);
        let sel = |only: &[&str], exclude: &[&str]| {
            let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            select(&spec, &BTreeSet::new(), &strings(only), &strings(exclude))
                .map(|(_, t)| t.left_out)
                .map_err(|e| e.to_string())
        };
        let split = |kept: &str, left: &str| {
            Err(format!("the selection keeps `{kept}` but leaves out `{left}`: the objects of repository `fleet` are delivered in one commit; select all of `fleet/*` or none"))
        };
        let cm = "fleet/manifest:shop/ConfigMap/web";
        let ns = "fleet/manifest:Namespace/shop";
        let keys: Vec<&str> = spec.nodes.iter().map(|n| n.key.as_str()).collect();
        assert!(keys.contains(&cm) && keys.contains(&ns), "{keys:?}");
        assert_eq!(sel(&["fleet/*"], &[]), Ok(vec![]));
        // The host alone: the repository and all its objects are left out together.
        assert_eq!(sel(&["host:git"], &[]).map(|l| l.len()), Ok(3));
        assert_eq!(sel(&[cm], &[]), split(cm, ns));
        assert_eq!(sel(&[], &[cm]), split(ns, cm));
    }

    #[test]
    fn outputs_that_read_what_was_left_out_keep_their_values() {
        let spec = spec();
        let (keep, t) = select(&spec, &BTreeSet::new(), &[], &["host:web-1".into()]).unwrap();
        assert_eq!(t.outputs_left_out, ["second"]);
        assert!(restrict(&spec, &keep, t).outputs.is_empty());
        let conf = "web-1/file:/etc/nginx/nginx.conf".to_string();
        let (keep, t) = select(&spec, &BTreeSet::new(), &[conf], &[]).unwrap();
        assert!(t.outputs_left_out.is_empty());
        assert_eq!(restrict(&spec, &keep, t).outputs.len(), 1);
    }
}
