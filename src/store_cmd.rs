//! `envc store verify [--repair] FILE`: the printing side of `envc_executor::repair`.

use std::path::Path;

use envc_executor::repair::{self, RepairError, StoreReport};
use envc_executor::Holder;

use crate::deploy::{exit, open_store};

/// Exit 0 when the store is sound (or was repaired), 3 when verify found damage (like
/// `drift`: the check found something), 5 when an environment is locked by a running envc.
pub fn verify(file: &Path, repair: bool) -> Result<u8, String> {
    let store = open_store(file)?;
    let report = if repair {
        match repair::repair(&store, &Holder::current("envc store verify --repair")) {
            Ok(r) => r,
            Err(e @ RepairError::Locked(_)) => {
                eprintln!("error: {e}");
                return Ok(exit::LOCKED);
            }
            Err(e) => return Err(e.to_string()),
        }
    } else {
        repair::verify(&store).map_err(|e| e.to_string())?
    };
    print(&report, repair, file);
    Ok(if report.is_sound() || repair {
        exit::OK
    } else {
        exit::DRIFT
    })
}

fn print(report: &StoreReport, repaired: bool, file: &Path) {
    let removed = if repaired { "; removed" } else { "" };
    for path in &report.corrupt {
        println!("corrupt   {}{removed}", path.display());
    }
    for env in &report.envs {
        let name = &env.env;
        if let Some(d) = &env.head {
            let what = if repaired {
                "its state was forgotten: the next build runs every node, as a first build"
            } else {
                "the whole state is lost"
            };
            println!("{name}: current state: {d}; {what}");
        }
        for r in &env.records {
            let what = if repaired {
                "dropped from the state: the next build runs it again"
            } else {
                "the next build cannot start until it is repaired"
            };
            println!(
                "{name}: record of {} ({}): {}; {what}",
                r.node, r.object, r.damage
            );
        }
        for r in &env.runs {
            let what = if repaired {
                "removed from the history"
            } else {
                "`envc log` skips it"
            };
            println!("{name}: run {}: {}; {what}", r.object, r.damage);
        }
        if let Some(c) = &env.cut {
            let what = if repaired {
                "was cut there"
            } else {
                "ends there"
            };
            println!(
                "{name}: state {}: {}; the history {what}: the {} newest states remain, \
                 everything before is lost",
                c.state, c.damage, c.kept
            );
        }
    }
    let damaged = report.corrupt.len();
    let envs = report.envs.len();
    if report.is_sound() {
        println!("store: every object hashes to its name; every state reads");
    } else if repaired {
        println!(
            "store: repaired: {damaged} corrupt objects removed, {envs} environments' states \
             made valid"
        );
    } else {
        println!(
            "store: {damaged} corrupt objects, {envs} environments affected; `envc store verify \
             --repair {}` removes them and makes the states valid",
            file.display()
        );
    }
}
