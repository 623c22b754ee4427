//! `envc verify FILE`: rebuild every image and deploy the environment onto clean
//! stand-ins, from the lockfile, and compare both with production. Exit 0 when everything
//! matches, 3 when something differs, 6 when nothing differs but some production target
//! could not be looked at.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use envc_executor::{
    complete_stand_ins, locked_problems, read_stand_ins, NodeStatus, Rebuild, RebuildOutcome,
    Reference, Verdict, VerifyReport, VerifyRequest,
};
use serde_json::json;

use super::build::SigInt;
use super::progress::Progress;
use super::{compile_env, compile_with, session, Params, TargetArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;
use clap::ValueEnum;

/// How `verify` reports: as `plan` does, but without a picture.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum VerifyFormat {
    Text,
    Json,
    /// A table fit for a pull-request comment.
    Markdown,
}

pub struct VerifyArgs {
    pub rebuild: bool,
    pub lab: bool,
    pub lab_hosts: Option<PathBuf>,
    pub against: Option<String>,
    pub keep: bool,
    pub jobs: usize,
    pub format: VerifyFormat,
}

pub fn verify(
    file: &Path,
    args: &VerifyArgs,
    params: &Params,
    target: &TargetArgs,
    ui: Ui,
) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    // The lab is built from the lockfile: without one that covers everything, a match
    // would prove nothing about the next rebuild.
    let check = locked_problems(env.lock.as_ref().map(|l| &l.lock), &env.spec, file);
    for n in &check.notes {
        crate::output::errln!("note: {n}");
    }
    if !check.problems.is_empty() {
        for p in &check.problems {
            crate::output::errln!("error: {p}");
        }
        crate::output::errln!("error: verify rebuilds from the lockfile, and it does not cover the environment; nothing was run");
        return Ok(Exit::Input);
    }
    let stand_ins = match (args.lab, &args.lab_hosts) {
        (false, _) => Default::default(),
        (true, named) => {
            let named = match named {
                Some(path) => read_stand_ins(path).map_err(|e| Failure::Input(e.to_string()))?,
                None => Default::default(),
            };
            complete_stand_ins(&env.spec, named).map_err(|e| Failure::Input(e.to_string()))?
        }
    };
    let mut lab_env = match stand_ins.is_empty() {
        true => None,
        false => Some(compile_with(file, params, true, stand_ins, ui)?),
    };
    let session = session(file, target)?;
    // The lab hashes secrets with production's key: its records are compared with
    // production's.
    super::prepare(&session, &mut env.spec, file, &target.shared, true)?;
    if let Some(lab) = &mut lab_env {
        lab.spec.secrets = env.spec.secrets.clone();
        lab.spec.stacks = env.spec.stacks.clone();
    }
    let lab_spec = lab_env.as_ref().map_or(&env.spec, |e| &e.spec);
    let request = VerifyRequest {
        rebuild: args.rebuild,
        lab: args.lab,
        against: args.against.clone(),
        keep: args.keep,
        jobs: args.jobs,
        lock_hash: env.lock.as_ref().map(|l| l.hash.clone()),
    };
    // The lab's steps go to stderr as a build's do; stdout is the verdict.
    let progress = Progress::new(false, lab_spec);
    let result = session.verify(
        &env.spec, lab_spec, &env.files, &request, &progress, &SigInt,
    );
    progress.finish();
    let report = result?;
    output::print(&match args.format {
        VerifyFormat::Text => text(&report),
        VerifyFormat::Json => json_lines(&report),
        VerifyFormat::Markdown => markdown(&report, &session.env),
    });
    if let Some(lab) = &report.lab {
        if let Some(e) = &lab.teardown_error {
            crate::output::errln!("warning: the lab could not be torn down completely: {e}");
        }
        if let Some(dir) = &lab.kept {
            crate::output::errln!(
                "the lab is kept in {0}: `ENVC_STORE={0} envc log --json {1}` shows its run; `ENVC_STORE={0} envc destroy --yes {1}` removes it",
                dir.display(),
                file.display()
            );
        }
    }
    Ok(if report.differs() {
        Exit::Drift
    } else if report.unchecked().next().is_some() {
        Exit::Unchecked
    } else {
        Exit::Ok
    })
}

fn reference(r: &Reference) -> String {
    match r {
        Reference::Record { run } => format!("production's record (run {run})"),
        Reference::Cache { url } => format!("the binary cache's entry ({url})"),
        Reference::SecondBuild => "a second build".into(),
    }
}

fn short(v: Option<&str>) -> String {
    match v {
        None => "(none)".into(),
        Some(v) if v.len() > 20 => format!("{}…", &v[..16]),
        Some(v) => v.to_string(),
    }
}

fn rebuild_text(r: &Rebuild, out: &mut String) {
    let against = reference(&r.reference);
    let _ = match &r.outcome {
        RebuildOutcome::Same => writeln!(
            out,
            "rebuild   {}: bit for bit the same as {against} ({:.0} s)",
            r.node, r.seconds
        ),
        RebuildOutcome::Failed { error } => {
            writeln!(out, "rebuild   {}: FAILED: {error}", r.node)
        }
        RebuildOutcome::Differs {
            outputs,
            paths,
            paths_total,
            disk_offset,
            note,
        } => {
            let _ = writeln!(out, "rebuild   {}: DIFFERS from {against}", r.node);
            for (output, want, got) in outputs {
                let _ = writeln!(
                    out,
                    "            {output}: {} → {}",
                    short(want.as_deref()),
                    short(got.as_deref())
                );
            }
            for p in paths {
                let _ = writeln!(out, "            /{}: {}", p.path, p.what);
                let _ = writeln!(
                    out,
                    "              was: {}",
                    p.expected.as_deref().unwrap_or("(absent)")
                );
                let _ = writeln!(
                    out,
                    "              now: {}",
                    p.found.as_deref().unwrap_or("(absent)")
                );
            }
            if *paths_total > paths.len() {
                let _ = writeln!(
                    out,
                    "            … and {} more paths",
                    paths_total - paths.len()
                );
            }
            if let Some(at) = disk_offset {
                let _ = writeln!(
                    out,
                    "            the file trees are the same; the disks first differ at byte {at} (the ext4 layout)"
                );
            }
            match note {
                Some(n) => writeln!(out, "            {n}"),
                None => Ok(()),
            }
        }
    };
}

fn text(report: &VerifyReport) -> String {
    let mut out = String::new();
    for (key, reasons) in &report.not_at_source {
        let _ = writeln!(
            out,
            "source    {key}: production is not built from this source: {}",
            reasons.join("; ")
        );
    }
    for r in &report.rebuilds {
        rebuild_text(r, &mut out);
    }
    let (mut matched, mut differs, mut unchecked) = (0, 0, 0);
    if let Some(lab) = &report.lab {
        for n in &lab.nodes {
            match &n.status {
                NodeStatus::Matches => matched += 1,
                NodeStatus::Differs => differs += 1,
                NodeStatus::Unchecked(why) => {
                    unchecked += 1;
                    let _ = writeln!(
                        out,
                        "unchecked {}: production could not be probed: {why}",
                        n.node
                    );
                }
            }
            for f in &n.facts {
                let (word, why) = match &f.verdict {
                    Verdict::Same => continue,
                    Verdict::Expected(why) => ("expected", why),
                    Verdict::Differs(why) => ("DIFFERS", why),
                };
                let _ = writeln!(
                    out,
                    "lab       {}: {} {word}: production {}, lab {} ({why})",
                    n.node,
                    f.fact,
                    short(f.production.as_deref()),
                    short(f.lab.as_deref())
                );
            }
        }
    }
    let rebuilt = report.rebuilds.len();
    let rebuilds_differ = report.rebuilds.iter().filter(|r| r.differs()).count();
    let t = &report.timings;
    let mut parts = Vec::new();
    if !report.not_at_source.is_empty() {
        parts.push(format!(
            "{} nodes of production are not this source's",
            report.not_at_source.len()
        ));
    }
    if rebuilt > 0 {
        parts.push(match rebuilds_differ {
            0 => format!("{rebuilt} image{} rebuilt bit for bit", plural(rebuilt)),
            n => format!("{n} of {rebuilt} rebuilt images differ"),
        });
    }
    if report.lab.is_some() {
        let mut s = format!("lab: {matched} nodes match, {differs} differ");
        if unchecked > 0 {
            let _ = write!(s, ", {unchecked} not checked");
        }
        parts.push(s);
    }
    let verdict = if report.differs() {
        "DIFFERS"
    } else if unchecked > 0 {
        "incomplete"
    } else {
        "reproducible"
    };
    let _ = writeln!(
        out,
        "verify: {verdict}; {} (rebuild {:.0} s, lab boot {:.0} s, deploy {:.0} s, compare {:.0} s, teardown {:.0} s)",
        parts.join("; "),
        t.rebuild,
        t.lab_boot,
        t.deploy,
        t.compare,
        t.teardown
    );
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One object per line: `not_at_source`, `rebuild`, `node` (every node of the lab, with
/// every fact), then `summary`.
fn json_lines(report: &VerifyReport) -> String {
    let mut lines = Vec::new();
    for (key, reasons) in &report.not_at_source {
        lines.push(json!({"not_at_source": {"node": key, "reasons": reasons}}));
    }
    for r in &report.rebuilds {
        lines.push(json!({ "rebuild": r }));
    }
    if let Some(lab) = &report.lab {
        for n in &lab.nodes {
            lines.push(json!({ "node": n }));
        }
    }
    let lab = report.lab.as_ref();
    lines.push(json!({"summary": {
        "differs": report.differs(),
        "unchecked": report.unchecked().count(),
        "production_run": report.production_run,
        "rebuilt": report.rebuilds.len(),
        "rebuilds_differing": report.rebuilds.iter().filter(|r| r.differs()).count(),
        "lab_nodes": lab.map(|l| l.nodes.len()),
        "lab_nodes_differing": lab.map(|l| l.nodes.iter().filter(|n| n.status == NodeStatus::Differs).count()),
        "lab_run": lab.and_then(|l| l.run.clone()),
        "lab_kept": lab.and_then(|l| l.kept.clone()),
        "seconds": report.timings,
    }}));
    (lines.into_iter())
        .map(|l| format!("{}\n", crate::output::versioned(l)))
        .collect()
}

/// For a pull request: the verdict, then a table of what differs (and what is expected to).
fn markdown(report: &VerifyReport, env: &str) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::new();
    let verdict = if report.differs() {
        "❌ differs"
    } else if report.unchecked().next().is_some() {
        "⚠️ incomplete"
    } else {
        "✅ reproducible"
    };
    let _ = writeln!(out, "### envc verify `{env}`: {verdict}\n");
    let mut rows = Vec::new();
    for (key, reasons) in &report.not_at_source {
        rows.push((
            "❌",
            key.clone(),
            "source".to_string(),
            "—".into(),
            "—".into(),
            reasons.join("; "),
        ));
    }
    for r in &report.rebuilds {
        match &r.outcome {
            RebuildOutcome::Same => rows.push((
                "✅",
                r.node.clone(),
                "rebuild".into(),
                "same".into(),
                "same".into(),
                reference(&r.reference),
            )),
            RebuildOutcome::Failed { error } => rows.push((
                "❌",
                r.node.clone(),
                "rebuild".into(),
                "—".into(),
                "failed".into(),
                error.clone(),
            )),
            RebuildOutcome::Differs { outputs, paths, .. } => {
                for (o, want, got) in outputs {
                    rows.push((
                        "❌",
                        r.node.clone(),
                        o.clone(),
                        short(want.as_deref()),
                        short(got.as_deref()),
                        reference(&r.reference),
                    ));
                }
                for p in paths {
                    rows.push((
                        "❌",
                        r.node.clone(),
                        format!("/{}", p.path),
                        p.expected.clone().unwrap_or_default(),
                        p.found.clone().unwrap_or_default(),
                        p.what.clone(),
                    ));
                }
            }
        }
    }
    if let Some(lab) = &report.lab {
        for n in &lab.nodes {
            if let NodeStatus::Unchecked(why) = &n.status {
                rows.push((
                    "⚠️",
                    n.node.clone(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    format!("not checked: {why}"),
                ));
            }
            for f in &n.facts {
                let (mark, why) = match &f.verdict {
                    Verdict::Same => continue,
                    Verdict::Expected(w) => ("➖", w),
                    Verdict::Differs(w) => ("❌", w),
                };
                rows.push((
                    mark,
                    n.node.clone(),
                    f.fact.clone(),
                    short(f.production.as_deref()),
                    short(f.lab.as_deref()),
                    why.clone(),
                ));
            }
        }
    }
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "Every rebuilt artefact and every compared fact is the same."
        );
        return out;
    }
    let _ = writeln!(
        out,
        "| | node | what | production | rebuild / lab | why |\n|---|---|---|---|---|---|"
    );
    for (mark, node, what, prod, lab, why) in rows {
        let _ = writeln!(
            out,
            "| {mark} | `{}` | {} | {} | {} | {} |",
            cell(&node),
            cell(&what),
            cell(&prod),
            cell(&lab),
            cell(&why)
        );
    }
    let _ = writeln!(out, "\n➖ expected: follows from the lab's own machines.");
    out
}
