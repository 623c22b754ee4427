//! `envc store verify [--repair] FILE`: the printing side of `Session::verify_store` and
//! `Session::repair_store`.

use std::path::Path;

use envc_executor::{Holder, RepairError, StoreReport};

use super::{session, TargetArgs};
use crate::exit::{Exit, Failure, Outcome};
use crate::output::outln;

/// Exit 0 when the store is sound (or was repaired), 3 when verify found damage that repair
/// removes (like `drift`: the check found something), 8 when nothing is left to repair but
/// runs can no longer be rolled back to (repair cannot bring their objects back), 5 when an
/// environment is locked by a running envc.
pub fn verify(file: &Path, repair: bool) -> Outcome {
    let session = session(file, &TargetArgs::default())?;
    let report = if repair {
        match session.repair_store(&Holder::current("envc store verify --repair")) {
            Ok(r) => r,
            Err(e @ RepairError::Locked(_)) => {
                crate::output::errln!("error: {e}");
                return Ok(Exit::Locked);
            }
            Err(e) => return Err(Failure::Input(e.to_string())),
        }
    } else {
        session
            .verify_store()
            .map_err(|e| Failure::Input(e.to_string()))?
    };
    print(&report, repair, file);
    Ok(if report.needs_repair() && !repair {
        Exit::Drift
    } else if report.lost().next().is_some() {
        Exit::Unrestorable
    } else {
        Exit::Ok
    })
}

fn print(report: &StoreReport, repaired: bool, file: &Path) {
    let removed = if repaired { "; removed" } else { "" };
    for path in &report.corrupt {
        outln!("corrupt   {}{removed}", path.display());
    }
    for b in &report.bucket {
        let what = match (b.whole_here, repaired) {
            (true, true) => "; uploaded again from this store",
            (true, false) => " (this store has it whole: repair uploads it again)",
            (false, true) => "; removed",
            (false, false) => " (no store here has it: repair removes it)",
        };
        outln!("corrupt   {}{what}", b.url);
    }
    for env in &report.envs {
        let name = &env.env;
        if let Some(d) = &env.head {
            let at = &env.head_at;
            match &env.fallback {
                Some(f) => {
                    let what = if repaired {
                        "set back to"
                    } else {
                        "repair sets it back to"
                    };
                    let finished = f
                        .finished_unix
                        .map(|t| format!(", its run finished {}", crate::utc::rfc3339(t)))
                        .unwrap_or_default();
                    outln!(
                        "{name}: current state ({at}): {d}; {what} state {}, the newest of \
                         its states whose history reads ({} states{finished}); what a later run \
                         recorded, if the lost ref named one, is not in it: the next build runs \
                         those nodes again",
                        f.state,
                        f.states
                    );
                }
                None => {
                    let what = if repaired {
                        "no state of it reads, so it was forgotten: the next build runs every node, as a first build"
                    } else {
                        "no state of it reads: the whole state is lost"
                    };
                    outln!("{name}: current state ({at}): {d}; {what}");
                }
            }
        }
        for r in &env.records {
            let what = if repaired {
                "dropped from the state: the next build runs it again"
            } else {
                "the next build cannot start until it is repaired"
            };
            outln!(
                "{name}: record of {} ({}): {}; {what}",
                r.node,
                r.object,
                r.damage
            );
        }
        for r in &env.intents {
            let what = if repaired {
                "dropped: the next build decides afresh whether what it finds is envc's"
            } else {
                "the next build cannot start until it is repaired"
            };
            outln!(
                "{name}: intent of {} ({}): {}; {what}",
                r.node,
                r.object,
                r.damage
            );
        }
        for r in &env.runs {
            let what = if repaired {
                "removed from the history"
            } else {
                "`envc log` skips it"
            };
            outln!("{name}: run {}: {}; {what}", r.object, r.damage);
        }
        if let Some(c) = &env.cut {
            let what = if repaired {
                "was cut there"
            } else {
                "ends there"
            };
            outln!(
                "{name}: state {}: {}; the history {what}: the {} newest states remain, \
                 everything before is lost",
                c.state,
                c.damage,
                c.kept
            );
        }
    }
    for (env, lost) in report.lost() {
        outln!(
            "{env}: run {} ({}, finished {}) can no longer be rolled back to:",
            lost.run,
            lost.command,
            crate::utc::rfc3339(lost.finished_unix)
        );
        for (node, why) in &lost.why {
            outln!("  {node}: {why}");
        }
    }
    let damaged = report.corrupt.len() + report.bucket.len();
    let envs = (report.envs.iter()).filter(|e| e.needs_repair()).count();
    let lost = report.lost().count();
    let lost_line = || {
        outln!(
            "store: {lost} runs can no longer be rolled back to (`envc rollback --to` refuses \
             them; repair cannot bring their objects back: a backup of the store's `objects/` \
             and `debs/` can); the others can"
        )
    };
    if report.is_sound() {
        outln!("store: every object hashes to its name; every state reads");
    } else if repaired {
        outln!(
            "store: repaired: {damaged} corrupt objects removed, {envs} environments' states \
             made valid"
        );
        if lost > 0 {
            lost_line();
        }
    } else if !report.needs_repair() {
        outln!("store: every object hashes to its name; every state reads");
        lost_line();
    } else {
        outln!(
            "store: {damaged} corrupt objects, {envs} environments affected; `envc store verify \
             --repair {}` removes them and makes the states valid",
            file.display()
        );
        if lost > 0 {
            lost_line();
        }
    }
}
