//! `envc plan FILE` and `envc why FILE NODE`: what `build` would do, and why.

use std::path::Path;

use clap::ValueEnum;
use envc_executor::{
    describe_decl, on_target, Action, Assessment, Plan, PlanReport, RealizationRecord, Resolution,
    RolloutPlan, Spec,
};
use serde_json::json;

use crate::output::versioned;

use super::{compile_env, select, session, Params, TargetArgs, Ui};
use crate::exit::{Exit, Outcome};
use crate::output;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum PlanFormat {
    Text,
    Json,
    /// A table fit for a pull-request comment.
    Markdown,
    /// One self-contained page: the environment laid out by target, coloured by the plan
    /// (a CI artifact beside the markdown comment).
    Html,
}

pub fn plan_command(
    file: &Path,
    format: PlanFormat,
    refresh: bool,
    targeted: &super::targeted::TargetedArgs,
    params: &Params,
    target: &TargetArgs,
    ui: Ui,
) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let session = session(file, target)?;
    super::refuse_moved_onto_records(&session, &env, file, ui)?;
    targeted.narrow(&session, &mut env.spec, ui)?;
    super::prepare(&session, &mut env.spec, file, &target.shared, false)?;
    let report = session.plan(&env.spec, &env.files, refresh)?;
    warn_unreachable(&report);
    for note in &report.notes {
        crate::output::errln!("warning: {note}");
    }
    let p = &report.plan;
    output::print(&match format {
        PlanFormat::Json => plan_text(&env.spec, &report, true),
        PlanFormat::Markdown => plan_markdown(&env.spec, &report, &session.env),
        PlanFormat::Text => plan_text(&env.spec, &report, false),
        PlanFormat::Html => super::picture::of(&session, &env, &report, "plan")?.to_html(),
    });
    // A node that cannot be built makes the plan fail, as the build would.
    let broken = p
        .nodes
        .iter()
        .any(|n| matches!(n.assessment.resolved, Err(Resolution::Failed(_))));
    if broken {
        crate::output::errln!("error: some nodes cannot be built (see `error:` above)");
        return Ok(Exit::Input);
    }
    Ok(Exit::Ok)
}

/// "N nodes could not be checked: a, b" for the nodes a probe could not reach.
pub fn unchecked_note(report: &PlanReport) -> String {
    let n = report.unreachable.len();
    let keys: Vec<&str> = report.unreachable.keys().map(String::as_str).collect();
    format!(
        "{n} node{} could not be checked: {}",
        if n == 1 { "" } else { "s" },
        keys.join(", ")
    )
}

/// The secrets a plan was made without (their values not at hand here: a fork's pull
/// request, a reviewer's laptop), each with why, as one line; `None` when it had them all.
pub fn unread_note(spec: &Spec) -> Option<String> {
    let unread = spec.secrets.as_ref()?.unread();
    if unread.is_empty() {
        return None;
    }
    let each: Vec<String> = (unread.iter())
        .map(|(name, why)| format!("`{name}` ({why})"))
        .collect();
    Some(format!(
        "planned without the values of {}: a node that uses one is taken as unchanged where its source and inputs are; `envc build` needs them",
        each.join(", ")
    ))
}

/// Nodes a probe could not reach, one warning each; `adopt` lines that can go.
pub fn warn_unreachable(report: &PlanReport) {
    for (key, e) in &report.unreachable {
        crate::output::errln!("warning: could not probe `{key}`: {e}");
    }
    for w in &report.adopt_warnings {
        crate::output::errln!("warning: {w}");
    }
}

/// A node's `adopt` in `--json`: the line, and what the look found (`null` for other
/// nodes).
fn adopt_json(spec: &Spec, report: &PlanReport, i: usize, action: Action) -> serde_json::Value {
    let node = &spec.nodes[i];
    let Some(line) = spec
        .adoptions
        .get(&node.key)
        .filter(|_| action == Action::Adopt)
    else {
        return serde_json::Value::Null;
    };
    let mut v = json!({"line": line.location, "from": line.from, "found": "at-build"});
    if let Some(found) = report.adoptions.get(&node.key) {
        if let (Some(o), Ok(serde_json::Value::Object(f))) =
            (v.as_object_mut(), serde_json::to_value(found))
        {
            o.extend(f);
        }
    }
    v
}

pub fn why(file: &Path, node: &str, json_out: bool, params: &Params, ui: Ui) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let index = select(&env, node, ui, file)?;
    let target = TargetArgs::default();
    let session = session(file, &target)?;
    super::refuse_moved_onto_records(&session, &env, file, ui)?;
    super::prepare(&session, &mut env.spec, file, &target.shared, false)?;
    let report = session.plan(&env.spec, &env.files, false)?;
    let (records, _) = session.live()?;
    let record = records.get(&env.spec.nodes[index].key);
    output::print(&why_text(&env.spec, &report.plan, index, record, json_out));
    Ok(Exit::Ok)
}

/// A node's checks as a plan shows them: (phase, check, `FILE:LINE:COL`), preconditions
/// first; deferred values substituted where known, named (`${web-0.address}`) where not.
pub fn checks_of(spec: &Spec, a: &Assessment, index: usize) -> Vec<(&'static str, String, String)> {
    let node = &spec.nodes[index];
    match a.resolved.as_ref().map(|r| &r.checks) {
        Ok(Ok(cs)) => cs
            .iter()
            .map(|c| (c.phase.name(), c.describe(), c.location.clone()))
            .collect(),
        _ => node
            .checks
            .iter()
            .map(|c| (c.phase.name(), describe_decl(spec, c), c.location.clone()))
            .collect(),
    }
}

/// How many nodes a `moved` declaration renames, nothing else changed.
fn moved(p: &Plan) -> usize {
    p.counts().get(&Action::Moved).copied().unwrap_or(0)
}

/// ", N moved" when some are.
fn moved_part(p: &Plan) -> String {
    match moved(p) {
        0 => String::new(),
        n => format!(", {n} moved"),
    }
}

/// How many nodes only run their postconditions again.
fn to_check(p: &Plan) -> usize {
    p.counts().get(&Action::Check).copied().unwrap_or(0)
}

/// How many nodes an `adopt` line takes over.
fn to_adopt(p: &Plan) -> usize {
    p.counts().get(&Action::Adopt).copied().unwrap_or(0)
}

/// ", N to adopt" when some are.
fn adopt_part(p: &Plan) -> String {
    match to_adopt(p) {
        0 => String::new(),
        n => format!(", {n} to adopt"),
    }
}

fn counts_line(p: &Plan) -> [usize; 5] {
    let c = p.counts();
    [
        Action::Create,
        Action::Update,
        Action::Replace,
        Action::Delete,
        Action::Unchanged,
    ]
    .map(|a| c.get(&a).copied().unwrap_or(0))
}

/// Why a record that left the graph is deleted, or left in place.
fn deletion_note(key: &str, r: &RealizationRecord, in_table: bool) -> String {
    let is_exec = envc_executor::on_target(key)
        .is_some_and(|k| k.kind == envc_compiler::types::NodeKind::Exec);
    if is_exec {
        return match (&r.undo, r.created) {
            (_, false) => {
                "no longer in the source; it never ran here, so it is only forgotten".into()
            }
            (None, true) => {
                "no longer in the source; it has no `undo`, so it is only forgotten".into()
            }
            (Some(u), true) => format!(
                "no longer in the source; its undo runs: {}",
                shell_words(&u.argv)
            ),
        };
    }
    let targetless = on_target(key).is_none();
    if r.adopted && !targetless {
        return "no longer in the source; adopted, so it stays as it was found (`destroy --adopted` removes it)".into();
    }
    match (r.created || targetless, in_table) {
        (true, _) => "no longer in the source",
        (false, false) => {
            "no longer in the source; envc did not create it, so it stays on the target"
        }
        (false, true) => "no longer in the source; envc did not create it, so it stays",
    }
    .into()
}

/// A command line as a reader would type it: words quoted only where a shell needs it.
fn shell_words(argv: &[String]) -> String {
    let plain = |a: &str| {
        !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./=:@%+-,".contains(c))
    };
    argv.iter()
        .map(|a| {
            if plain(a) {
                a.clone()
            } else {
                envc_executor::shell_quote(a)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The plan as text (one line per change, with its reasons), or as JSON lines. The plan of
/// a node whose target could not be probed assumes the target matches its record: the
/// summary counts (and the text names) those nodes, as not checked.
pub fn plan_text(spec: &Spec, report: &PlanReport, json_out: bool) -> String {
    let p = &report.plan;
    let unchecked = report.unreachable.len();
    let mut out = String::new();
    let [create, update, replace, delete, unchanged] = counts_line(p);
    if json_out {
        for n in &p.nodes {
            let node = &spec.nodes[n.index];
            let a = &n.assessment;
            out.push_str(
                &versioned(json!({
                    "node": node.key,
                    "id": node.id,
                    "action": a.action,
                    "reasons": a.reasons,
                    "moved_from": a.moved_from,
                    "resolved": a.resolved.as_ref().ok().map(|r| &r.hash),
                    "error": match &a.resolved {
                        Err(Resolution::Failed(m)) => Some(m.clone()),
                        _ => None,
                    },
                    "checks": checks_of(spec, a, n.index)
                        .into_iter()
                        .map(|(phase, check, location)| json!({"phase": phase, "check": check, "location": location}))
                        .collect::<Vec<_>>(),
                    "adopt": adopt_json(spec, report, n.index, a.action),
                }))
                .to_string(),
            );
            out.push('\n');
        }
        for (key, r) in &p.deletions {
            out.push_str(
                &versioned(json!({"node": key, "id": r.derivation, "action": Action::Delete, "reasons": [deletion_note(key, r, false)], "resolved": null, "error": null}))
                    .to_string(),
            );
            out.push('\n');
        }
        for ro in envc_executor::rollout_plan(spec, p) {
            out.push_str(&versioned(json!({"rollout": rollout_json(&ro)})).to_string());
            out.push('\n');
        }
        let unread = spec.secrets.as_ref().map(|s| s.unread().clone());
        out.push_str(
            &versioned(json!({"summary": {"create": create, "update": update, "replace": replace, "delete": delete, "check": to_check(p), "moved": moved(p), "adopt": to_adopt(p), "unchanged": unchanged, "unchecked": unchecked, "unread_secrets": unread.unwrap_or_default(), "warnings": report.notes, "targeted": spec.targeted.as_deref()}}))
                .to_string(),
        );
        out.push('\n');
        return out;
    }
    for n in &p.nodes {
        let a = &n.assessment;
        if a.action == Action::Unchanged {
            continue;
        }
        out.push_str(&format!(
            "{:<9} {}\n",
            a.action.name(),
            spec.nodes[n.index].key
        ));
        for r in &a.reasons {
            out.push_str(&format!("          {r}\n"));
        }
        if let Err(Resolution::Failed(m)) = &a.resolved {
            out.push_str(&format!("          error: {m}\n"));
        }
        for (phase, check, location) in checks_of(spec, a, n.index) {
            out.push_str(&format!("          {phase:<7} {check}  ({location})\n"));
        }
    }
    for (key, r) in &p.deletions {
        let note = deletion_note(key, r, false);
        out.push_str(&format!("{:<9} {key}\n          {note}\n", "delete"));
    }
    for ro in envc_executor::rollout_plan(spec, p) {
        out.push_str(&ro.describe());
        out.push('\n');
    }
    let check = match to_check(p) {
        0 => String::new(),
        n => format!(", {n} to check"),
    };
    let moved = moved_part(p);
    let adopt = adopt_part(p);
    out.push_str(&format!(
        "plan: {create} to create, {update} to update, {replace} to replace, {delete} to delete{check}{moved}{adopt}, {unchanged} unchanged\n"
    ));

    if unchecked > 0 {
        out.push_str(&format!(
            "plan: {} (unreachable; planned from their records)\n",
            unchecked_note(report)
        ));
    }
    if let Some(note) = unread_note(spec) {
        out.push_str(&format!("plan: {note}\n"));
    }
    for line in super::targeted::left_out_lines("plan", spec.targeted.as_deref()) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `envc plan --format markdown`: the changes as a table for a pull-request comment, the
/// unchanged nodes only counted. Table cells escape `|` and keep to one line.
pub fn plan_markdown(spec: &Spec, report: &PlanReport, env: &str) -> String {
    let p = &report.plan;
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let [create, update, replace, delete, unchanged] = counts_line(p);
    let check = match to_check(p) {
        0 => String::new(),
        n => format!(", {n} to check"),
    };
    let moved = moved_part(p);
    let mut out = format!(
        "### envc plan: `{env}`\n\n**{create} to create, {update} to update, {replace} to replace, {delete} to delete{check}{moved}{}**, {unchanged} unchanged\n",
        adopt_part(p)
    );
    for note in &report.notes {
        out.push_str(&format!("\n**Warning:** {}\n", cell(note)));
    }
    if !report.unreachable.is_empty() {
        out.push_str(&format!(
            "\n**{}** (unreachable; planned from their records)\n",
            cell(&unchecked_note(report))
        ));
    }
    if let Some(note) = unread_note(spec) {
        out.push_str(&format!("\n**Secrets:** {}\n", cell(&note)));
    }
    if let Some(t) = &spec.targeted {
        let keys = |ks: &[String]| {
            ks.iter()
                .map(|k| format!("`{}`", cell(k)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "\n**Targeted** (`{}`): {} left out",
            cell(&t.flags()),
            t.left_out.len()
        ));
        if !t.left_out.is_empty() {
            out.push_str(&format!(": {}", keys(&t.left_out)));
        }
        out.push('\n');
        if !t.kept.is_empty() {
            out.push_str(&format!(
                "\n**Not deleted** (no longer in the source, not selected): {}\n",
                keys(&t.kept)
            ));
        }
    }
    for ro in envc_executor::rollout_plan(spec, p) {
        let each: Vec<String> = (ro.batches.iter().enumerate())
            .map(|(k, ms)| {
                let names: Vec<String> = ms.iter().map(|m| format!("`{}`", cell(m))).collect();
                format!("batch {}: {}", k + 1, names.join(", "))
            })
            .collect();
        let batches = if each.is_empty() {
            "nothing to do".to_string()
        } else {
            each.join("; ")
        };
        out.push_str(&format!(
            "\n**Rollout `{}`** (max_failures {}): {batches}\n",
            cell(&ro.name),
            ro.max_failures
        ));
    }
    if !p.has_changes() {
        out.push_str("\nNo changes.\n");
        return out;
    }
    out.push_str("\n| action | node | why |\n|---|---|---|\n");
    for n in &p.nodes {
        let a = &n.assessment;
        if a.action == Action::Unchanged {
            continue;
        }
        let mut why: Vec<String> = a.reasons.iter().map(|r| cell(r)).collect();
        if let Err(Resolution::Failed(m)) = &a.resolved {
            why.push(format!("**error:** {}", cell(m)));
        }
        for (phase, check, location) in checks_of(spec, a, n.index) {
            why.push(format!(
                "{phase} `{}` ({})",
                cell(&check).replace('`', "'"),
                cell(&location)
            ));
        }
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            a.action.name(),
            cell(&spec.nodes[n.index].key),
            why.join("<br>")
        ));
    }
    for (key, r) in &p.deletions {
        let why = cell(&deletion_note(key, r, true));
        out.push_str(&format!("| delete | `{}` | {why} |\n", cell(key)));
    }
    out
}

/// A rollout's batches in `plan --json`.
fn rollout_json(ro: &RolloutPlan) -> serde_json::Value {
    json!({
        "name": ro.name,
        "batch": ro.batch.to_string(),
        "max_failures": ro.max_failures.to_string(),
        "tolerated": ro.tolerated,
        "batches": ro.batches,
        "unchanged": ro.unchanged,
    })
}

fn why_text(
    spec: &Spec,
    p: &Plan,
    index: usize,
    record: Option<&RealizationRecord>,
    json_out: bool,
) -> String {
    let node = &spec.nodes[index];
    let a = &p.nodes[index].assessment;
    if json_out {
        let inputs: Vec<serde_json::Value> = node
            .inputs
            .iter()
            .map(|j| json!({"node": spec.nodes[*j].key, "action": p.nodes[*j].assessment.action}))
            .collect();
        return versioned(json!({
            "node": node.key,
            "id": node.id,
            "action": a.action,
            "reasons": a.reasons,
            "resolved": a.resolved.as_ref().ok().map(|r| &r.hash),
            "attrs": a.resolved.as_ref().ok().map(|r| &r.display),
            "inputs": inputs,
            "record": record.map(|r| json!({"resolved": r.resolved_hash, "run": r.run, "at_unix": r.at_unix, "facts": r.facts})),
        }))
        .to_string()
            + "\n";
    }
    let mut s = format!("{}\n  derivation {}\n", node.key, node.id);
    match &a.resolved {
        Ok(r) => {
            s.push_str(&format!("  resolved   {}\n", r.hash));
            for (k, v) in &r.display {
                s.push_str(&format!("    {k} = {v}\n"));
            }
        }
        Err(Resolution::Pending(j)) => s.push_str(&format!(
            "  resolved   not yet: needs the output of `{}`\n",
            spec.nodes[*j].key
        )),
        Err(Resolution::Failed(m)) => s.push_str(&format!("  error      {m}\n")),
        Err(Resolution::Unread(secret)) => s.push_str(&format!(
            "  resolved   not here: secret `{secret}` is not at hand\n"
        )),
    }
    s.push_str(&format!("  action     {}\n", a.action.name()));
    for r in &a.reasons {
        s.push_str(&format!("    because  {r}\n"));
    }
    if a.action == Action::Unchanged {
        s.push_str("    because  a record of this resolved hash exists for this target\n");
    }
    for i in &node.inputs {
        s.push_str(&format!(
            "  input      {} ({})\n",
            spec.nodes[*i].key,
            p.nodes[*i].assessment.action.name()
        ));
    }
    if let Some(r) = record {
        s.push_str(&format!(
            "  record     of {} by run {}\n",
            r.resolved_hash, r.run
        ));
        for (k, v) in &r.facts {
            s.push_str(&format!("    {k} = {v}\n"));
        }
    }
    s
}
