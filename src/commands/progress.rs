//! Progress on stderr as work goes: a bar per target and per transfer to or from the
//! binary cache on a terminal, `verify`'s phase above them; a line per step that ran
//! otherwise; JSON lines with `--json`. One reporter for `build`, `destroy`, `rollback` and
//! `verify`.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use envc_executor::{
    Direction, DriftFacts, Event, ObjectId, Reporter, Spec, StepOutcome, Transfer, Transfers,
    VerifyPhase, VerifyReporter,
};
use serde_json::json;

use crate::output;

/// Progress: one bar per host on a terminal, one line per step otherwise, JSON lines
/// with `--json`; a bar per transfer to or from the binary cache, and `verify`'s phases.
pub struct Progress {
    json: bool,
    bars: Option<(
        indicatif::MultiProgress,
        Mutex<BTreeMap<String, indicatif::ProgressBar>>,
    )>,
    /// Nodes per target, for the bars' lengths.
    totals: BTreeMap<String, u64>,
    lines: Mutex<()>,
    /// `verify`'s phase, above the hosts' bars.
    phase: Mutex<Option<indicatif::ProgressBar>>,
}

impl Progress {
    pub fn new(json: bool, spec: &Spec) -> Progress {
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        for n in &spec.nodes {
            let t = n.target.map_or(&n.name, |t| &spec.nodes[t].name);
            *totals.entry(t.clone()).or_default() += 1;
        }
        let bars = (!json && std::io::stderr().is_terminal())
            .then(|| (indicatif::MultiProgress::new(), Mutex::new(BTreeMap::new())));
        Progress {
            json,
            bars,
            totals,
            lines: Mutex::new(()),
            phase: Mutex::new(None),
        }
    }

    fn multi(&self) -> Option<&indicatif::MultiProgress> {
        self.bars.as_ref().map(|(multi, _)| multi)
    }

    fn bar(&self, target: &str) -> Option<indicatif::ProgressBar> {
        let (multi, bars) = self.bars.as_ref()?;
        let mut bars = bars.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            bars.entry(target.to_string())
                .or_insert_with(|| {
                    let b = multi.add(indicatif::ProgressBar::new(
                        self.totals.get(target).copied().unwrap_or(0),
                    ));
                    b.set_style(style("{prefix:>16} {bar:24} {pos}/{len} {wide_msg}"));
                    b.set_prefix(target.to_string());
                    b
                })
                .clone(),
        )
    }

    pub fn finish(&self) {
        if let Some((_, bars)) = &self.bars {
            for b in bars.lock().unwrap_or_else(|e| e.into_inner()).values() {
                b.finish();
            }
        }
        if let Some(b) = self.phase.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.finish_and_clear();
        }
    }
}

fn style(template: &str) -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
}

/// `verify`'s phases: a spinner above the hosts' bars with the phase's time on a terminal,
/// a line each otherwise (stdout is the verdict).
impl VerifyReporter for Progress {
    fn phase(&self, phase: VerifyPhase<'_>) {
        let Some(multi) = self.multi() else {
            crate::output::errln!("verify: {phase}");
            return;
        };
        let mut shown = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let bar = shown.get_or_insert_with(|| {
            let b = multi.insert(0, indicatif::ProgressBar::new_spinner());
            b.set_style(style("{spinner} verify: {wide_msg} {elapsed}"));
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        bar.reset_elapsed();
        bar.set_message(phase.to_string());
    }
}

/// The binary cache's transfers inside a build: on a terminal a bar each, left standing
/// when done with what it moved; with `--json` a `transfer` line each. Nothing otherwise:
/// the node's own line says what was fetched or pushed.
struct TransferBars {
    multi: Option<indicatif::MultiProgress>,
    json: bool,
}

impl Transfers for TransferBars {
    fn begin(
        &self,
        node: &str,
        direction: Direction,
        url: &str,
    ) -> Box<dyn envc_executor::Progress> {
        let bar = (self.multi.as_ref()).map(|multi| multi.add(indicatif::ProgressBar::new(0)));
        Box::new(TransferBar::new(bar, self.json, node, direction, url))
    }
}

pub struct TransferBar {
    bar: Option<indicatif::ProgressBar>,
    json: bool,
    node: String,
    direction: Direction,
    url: String,
    started: Instant,
}

impl TransferBar {
    fn new(
        bar: Option<indicatif::ProgressBar>,
        json: bool,
        node: &str,
        direction: Direction,
        url: &str,
    ) -> TransferBar {
        if let Some(b) = &bar {
            b.set_style(style(
                "{prefix:>16} {bar:24} {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}",
            ));
            b.set_prefix(match direction {
                Direction::Fetch => "fetch",
                Direction::Push => "push",
            });
            b.set_message(output::terminal_safe(&format!("{node} ({url})")).into_owned());
        }
        TransferBar {
            bar,
            json,
            node: node.to_string(),
            direction,
            url: url.to_string(),
            started: Instant::now(),
        }
    }

    /// A bar by itself on a terminal (`envc cache push|pull`, which print what moved on
    /// stdout and then [`clear`](Self::clear) it); nothing elsewhere.
    pub fn alone(node: &str, direction: Direction, url: &str) -> TransferBar {
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| indicatif::ProgressBar::new(0));
        TransferBar::new(bar, false, node, direction, url)
    }

    pub fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl envc_executor::Progress for TransferBar {
    fn object(&self, _id: &ObjectId, size: u64) {
        if let Some(b) = &self.bar {
            b.inc_length(size);
        }
    }

    fn bytes(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn finished(&self, moved: Option<&Transfer>) {
        if let Some(b) = &self.bar {
            match moved {
                Some(m) => b.finish_with_message(
                    output::terminal_safe(&format!(
                        "{} {}: {} objects, {:.1} MiB",
                        self.direction.done(),
                        self.node,
                        m.objects,
                        m.bytes as f64 / f64::from(1 << 20)
                    ))
                    .into_owned(),
                ),
                None => b.finish_and_clear(),
            }
        }
        if let (true, Some(m)) = (self.json, moved) {
            output::json_line(json!({
                "event": "transfer",
                "node": self.node,
                "direction": self.direction,
                "url": self.url,
                "objects": m.objects,
                "bytes": m.bytes,
                "duration_ms": self.started.elapsed().as_millis() as u64,
            }));
        }
    }
}

impl Reporter for Progress {
    fn event(&self, e: Event<'_>) {
        match e {
            Event::Started { key, target, .. } => {
                if let Some(b) = self.bar(target) {
                    b.set_message(key.to_string());
                }
            }
            Event::Finished {
                key,
                target,
                action,
                outcome,
                duration,
            } => {
                let _guard = self.lines.lock().unwrap_or_else(|e| e.into_inner());
                if self.json {
                    output::json_line(
                        json!({"event": "node", "node": key, "action": action, "outcome": outcome, "duration_ms": duration.as_millis() as u64}),
                    );
                    return;
                }
                let line = format!(
                    "{:<9} {key}: {outcome} ({} ms)",
                    action.name(),
                    duration.as_millis()
                );
                match self.bar(target) {
                    Some(b) => {
                        b.inc(1);
                        if *outcome != StepOutcome::Cached {
                            b.set_message(output::terminal_safe(&line).into_owned());
                        }
                    }
                    None if *outcome == StepOutcome::Cached => {}
                    None => crate::output::errln!("{line}"),
                }
            }
        }
    }

    fn probed(&self, drift: &BTreeMap<String, DriftFacts>, unreachable: &BTreeMap<String, String>) {
        for (key, d) in drift {
            for (fact, was, now) in d {
                crate::output::errln!("drift     {key}: {fact} was {was}, found {now}");
            }
        }
        for (key, e) in unreachable {
            crate::output::errln!("warning: could not probe `{key}`: {e}");
        }
    }

    fn took_over(&self, what: &envc_executor::TakenOver) {
        crate::output::errln!("warning: {what}");
    }

    fn transfers(&self) -> Arc<dyn Transfers> {
        Arc::new(TransferBars {
            multi: self.multi().cloned(),
            json: self.json,
        })
    }

    fn rolled_back(&self, key: &str, _target: &str, note: &str) {
        let _guard = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if self.json {
            output::json_line(json!({"event": "rollback", "node": key, "note": note}));
        } else {
            crate::output::errln!("rollback  {key}: {note}");
        }
    }
}
