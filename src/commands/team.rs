//! Working as a team: `envc key generate`, `envc cache push|pull|verify`, `envc unlock`
//! and `envc state migrate` — the printing side of `envc_executor::sharing` and `cache`.

use std::path::Path;
use std::time::Instant;

use envc_executor::{
    entry_key, CacheError, ConfigError, Direction, LockObject, SecretKey, SessionError,
    StateSettings,
};

use super::progress::TransferBar;
use super::{compile_env, store_session, Params, SharedArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output::{errln, outln};

/// `envc key generate NAME [--out DIR]`.
pub fn key_generate(name: &str, out: &Path) -> Outcome {
    let key = SecretKey::generate(name).map_err(|e| Failure::Input(e.to_string()))?;
    let (secret, public) = key.write(out).map_err(|e| Failure::Input(e.to_string()))?;
    outln!("{}", key.public());
    errln!(
        "wrote {} (keep it secret: it is what CI signs with, via ENVC_SIGNING_KEY) and {}",
        secret.display(),
        public.display()
    );
    errln!(
        "trust it: add \"{}\" to trusted-public-keys under [cache] in envc.toml",
        key.public()
    );
    Ok(Exit::Ok)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// `envc cache push FILE`: every image the environment's state records that a build of
/// this source and lockfile takes from the cache, with the chunks the cache lacks; the
/// others are named with why. Exit 4 if one could not be pushed.
pub fn cache_push(file: &Path, params: &Params, shared: &SharedArgs, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    let session = store_session(file, shared)?;
    let cache = session.cache()?;
    if !cache.can_push() {
        return Err(Failure::Session(SessionError::Config(
            ConfigError::NoSigningKey,
        )));
    }
    let pushable = session.pushable_outputs(&env.spec, &env.files)?;
    for (node, why) in &pushable.left_out {
        outln!("left out {node}: {why}");
    }
    if pushable.outputs.is_empty() {
        outln!(
            "nothing to push: `{}` has no built image a build would take from the cache",
            session.env
        );
        return Ok(Exit::Ok);
    }
    let mut failed = 0;
    for out in pushable.outputs {
        let missing = session.missing_objects(&out);
        if !missing.is_empty() {
            errln!(
                "error: {}: {} of its objects are not in this store ({:?}…); build it here first",
                out.node,
                missing.len(),
                missing[0]
            );
            failed += 1;
            continue;
        }
        let bar = TransferBar::alone(&out.node, Direction::Push, cache.url());
        let started = Instant::now();
        // Chunks the cache has are read back and replaced if damaged: `cache push` is
        // what mends a cache (a build's push only checks that they are there).
        let pushed = session.push_output(&cache, &out, true, &bar);
        bar.clear();
        match pushed {
            Ok(moved) => outln!(
                "pushed {} to {}: {} objects, {} sent in {:.1} s",
                out.node,
                cache.url(),
                moved.objects,
                mib(moved.bytes),
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                errln!("error: {}: {e}", out.node);
                failed += 1;
            }
        }
    }
    Ok(if failed > 0 { Exit::Failed } else { Exit::Ok })
}

/// `envc cache pull FILE`: fetches the graph's images into the local store, so a build
/// finds them there. Exit 4 if an entry was refused or could not be fetched.
pub fn cache_pull(file: &Path, params: &Params, shared: &SharedArgs, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    let session = store_session(file, shared)?;
    let cache = session.cache()?;
    let mut failed = 0;
    for out in session.build_outputs(&env.spec, &env.files)? {
        let bar = TransferBar::alone(&out.node, Direction::Fetch, cache.url());
        let started = Instant::now();
        let pulled = session.pull_output(&cache, &out, &bar);
        bar.clear();
        match pulled {
            Ok(Some((entry, moved))) => {
                outln!(
                    "fetched {}: {} objects, {} in {:.1} s (signed by {})",
                    out.node,
                    moved.objects,
                    mib(moved.bytes),
                    started.elapsed().as_secs_f64(),
                    entry.signer.unwrap_or_default()
                );
            }
            Ok(None) => outln!("not in the cache: {}", out.node),
            Err(e) => {
                errln!("error: {}: {e}", out.node);
                failed += 1;
            }
        }
    }
    Ok(if failed > 0 { Exit::Failed } else { Exit::Ok })
}

/// `envc cache verify FILE [--all]`: checks entries deeply (signature, every chunk, every
/// object). Exit 3 when one is damaged or untrusted, like `store verify`.
pub fn cache_verify(
    file: &Path,
    all: bool,
    params: &Params,
    shared: &SharedArgs,
    ui: Ui,
) -> Outcome {
    let session = store_session(file, shared)?;
    let cache = session.cache()?;
    let keys: Vec<(String, String)> = if all {
        match cache.remote().block(cache.entry_keys()) {
            Ok(keys) => keys,
            Err(e) => {
                errln!("error: {e}");
                return Ok(Exit::Failed);
            }
        }
        .into_iter()
        .map(|k| (k.clone(), k))
        .collect()
    } else {
        let env = compile_env(file, params, true, ui)?;
        session
            .build_outputs(&env.spec, &env.files)?
            .into_iter()
            .map(|o| (entry_key(&o.resolved_hash), o.node))
            .collect()
    };
    let (mut damaged, mut unreachable) = (0, 0);
    for (key, name) in keys {
        match cache.remote().block(cache.verify_entry(&key)) {
            Ok(entry) => outln!(
                "ok        {} ({}, {} objects, signed by {})",
                name,
                entry.body.node,
                entry.body.objects.len(),
                entry.signer.unwrap_or_default()
            ),
            Err(CacheError::Vanished { .. }) => {
                outln!("missing   {name}")
            }
            // Not a verdict on the entry: the check could not run.
            Err(e @ CacheError::Remote(_)) => {
                unreachable += 1;
                errln!("error: {name}: {e}");
            }
            Err(e) => {
                damaged += 1;
                outln!("damaged   {name}: {e}");
            }
        }
    }
    Ok(if damaged > 0 {
        Exit::Drift
    } else if unreachable > 0 {
        Exit::Failed
    } else {
        Exit::Ok
    })
}

/// `envc unlock --force FILE`.
pub fn unlock(file: &Path, shared: &SharedArgs) -> Outcome {
    let session = store_session(file, shared)?;
    match session.force_unlock()? {
        None => outln!("`{}` was not locked", session.env),
        Some(LockObject::Lease(lease)) => {
            let h = &lease.holder;
            outln!(
                "removed the lock of `{}` held by `{}` (pid {} on {}, since {}, a lease of {} s renewed {} times)",
                session.env,
                h.command,
                h.pid,
                h.host,
                crate::utc::rfc3339(h.since_unix),
                lease.lease_seconds,
                lease.renewals
            );
            errln!(
                "warning: if that run is still alive, its next commit fails (its lease renewal finds the lock gone) and what it changes after that is not recorded; run `envc build --refresh FILE` to reconcile"
            );
        }
        Some(LockObject::Unreadable { object, content }) => {
            outln!(
                "removed the lock object {object}, which held {content:?}, not a lease envc wrote"
            );
        }
    }
    Ok(Exit::Ok)
}

/// `envc state migrate --to URL FILE`.
pub fn migrate(file: &Path, to: &str, shared: &SharedArgs) -> Outcome {
    let session = store_session(file, shared)?;
    let lease = session
        .shared
        .state
        .as_ref()
        .map_or(envc_executor::DEFAULT_LEASE, |s| s.lease);
    let current = session
        .shared
        .state
        .as_ref()
        .map(|s| s.url.trim_end_matches('/'));
    if current == Some(to.trim_end_matches('/')) {
        return Err(Failure::Input(format!(
            "`{}` already keeps its state at {to}\n  hint: --to names where the state should go",
            session.env
        )));
    }
    let to = StateSettings {
        url: to.to_string(),
        lease,
    };
    let migrated = session.migrate_state(&to)?;
    outln!(
        "copied the state of `{}` to {}: {} states, {} objects; its head is {}",
        session.env,
        to.url,
        migrated.states,
        migrated.objects,
        migrated.head
    );
    errln!(
        "next: set url = \"{}\" under [state] in envc.toml (or ENVC_STATE); the old state is left as it was",
        to.url
    );
    Ok(Exit::Ok)
}
