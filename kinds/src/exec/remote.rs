//! `exec` nodes: a command run on the target when the node's inputs change, unless one of
//! its guards (`creates`, `unless`, `only_if`) finds it unnecessary there; its `undo`
//! when the node leaves the source.
//!
//! The command, its guards, its environment and its input reach the target as arguments
//! and stdin of one fixed script (`run_exec.sh`): nothing is spliced into script text, and a
//! command given as `argv` runs with no shell at all. One round trip per run.

use std::time::Duration;

use crate::error::StepError;
use crate::record::{Applied, Facts};
use crate::script::{no_record, run_script_within, tail};
use crate::transport::{CommandOutput, Transport};

const RUN: &str = include_str!("run_exec.sh");

/// How much of a command's standard output `capture` keeps (the `stdout` output).
pub const MAX_CAPTURE: usize = 64 << 10;
/// How much of a command's output its run record keeps, from the end.
const LOG_TAIL: usize = 4 << 10;
/// Seconds the transport waits beyond the command's own timeout (guards, the kill).
const SLACK: Duration = Duration::from_secs(60);

pub use crate::record::{CommandLine, CommandLog};

impl std::fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("stdin_bytes", &self.stdin.len())
            .field("creates", &self.creates)
            .field("unless", &self.unless)
            .field("only_if", &self.only_if)
            .field("capture", &self.capture)
            .field("undo", &self.undo)
            .finish()
    }
}

/// What an `exec` node needs to run.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecSpec {
    pub name: String,
    pub command: CommandLine,
    pub stdin: Vec<u8>,
    pub creates: Option<String>,
    pub unless: Option<Vec<String>>,
    pub only_if: Option<Vec<String>>,
    pub capture: bool,
    pub undo: Option<Vec<String>>,
    /// The resolved hash it runs for (set when it is launched): a fact, so that nodes
    /// after it run again when it ran again with other inputs.
    pub inputs: String,
    /// The facts of its record on this target (set when it is launched): a guard that
    /// skips it changes nothing there, so it keeps them, and what comes after it does not
    /// run again (`stdout` included).
    pub previous: Option<Facts>,
}

impl ExecSpec {
    /// Its `undo` as a command line: the same user, directory, environment and timeout.
    pub fn undo_command(&self) -> Option<CommandLine> {
        self.undo.as_ref().map(|argv| CommandLine {
            argv: argv.clone(),
            ..self.command.clone()
        })
    }

    /// Why the target could not run it as written, before anything is sent.
    pub fn validate(&self) -> Result<(), Unrunnable> {
        let lists = [
            ("argv", Some(&self.command.argv)),
            ("unless", self.unless.as_ref()),
            ("only_if", self.only_if.as_ref()),
            ("undo", self.undo.as_ref()),
        ];
        // What Linux's execve takes: each argument and each `NAME=VALUE` at most
        // MAX_ARG_STRLEN, and all of them together (with a pointer each) at most ARG_MAX
        // (2 MiB with the usual 8 MiB stack). Said here, by name, rather than as the
        // target's "Argument list too long" or nothing at all.
        const ONE: usize = 128 << 10;
        const ALL: usize = 2 << 20;
        let too_large = |what: String, bytes: usize| Unrunnable::TooLarge { what, bytes };
        for (what, argv) in lists {
            let argv = argv.map_or(&[][..], Vec::as_slice);
            if let Some((i, a)) = argv.iter().enumerate().find(|(_, a)| a.len() >= ONE) {
                return Err(too_large(format!("`{what}[{i}]`"), a.len()));
            }
        }
        if let Some((k, v)) = (self.command.env.iter()).find(|(k, v)| k.len() + v.len() + 1 >= ONE)
        {
            return Err(too_large(format!("`env.{k}`"), k.len() + v.len() + 1));
        }
        // Each string with its NUL and its pointer.
        let env: usize = (self.command.env.iter())
            .map(|(k, v)| k.len() + v.len() + 2 + 8)
            .sum();
        for (what, argv) in lists {
            let argv = argv.map_or(&[][..], Vec::as_slice);
            let total = env + argv.iter().map(|a| a.len() + 1 + 8).sum::<usize>();
            if total > ALL {
                return Err(too_large(format!("`{what}` with `env`"), total));
            }
        }
        for (what, argv) in lists {
            let Some(program) = argv.and_then(|a| a.first()) else {
                continue;
            };
            // `env NAME=VALUE… PROGRAM` would take such a program for one more variable.
            if program.is_empty() || program.contains('=') {
                return Err(Unrunnable::BadProgram {
                    list: what,
                    program: program.clone(),
                });
            }
        }
        if let Some(c) = self
            .creates
            .as_ref()
            .filter(|c| c.chars().any(char::is_control))
        {
            return Err(Unrunnable::ControlInCreates(c.clone()));
        }
        Ok(())
    }
}

/// A size as people read it.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / f64::from(1 << 10)),
        b => format!("{b} bytes"),
    }
}

/// Why an `exec` cannot be sent as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrunnable {
    /// `env NAME=VALUE… PROGRAM` would take such a program for one more variable.
    BadProgram {
        list: &'static str,
        program: String,
    },
    ControlInCreates(String),
    /// More than execve takes: an argument or `env` entry, or all of them together.
    TooLarge {
        what: String,
        bytes: usize,
    },
}

impl std::fmt::Display for Unrunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrunnable::BadProgram { list, program } => write!(
                f,
                "the program of `{list}` is {program:?}: a program name is not empty and has no `=`"
            ),
            Unrunnable::ControlInCreates(c) => {
                write!(f, "`creates` holds a control character: {c:?}")
            }
            Unrunnable::TooLarge { what, bytes } => write!(
                f,
                "{what} is {}; a program on Linux takes at most 128 KiB in one argument or environment variable, and 2 MiB in all: pass large values on `stdin`, or write them to a file with a `file` node and pass its path",
                size(*bytes)
            ),
        }
    }
}

/// Why a command's standard output cannot be its `stdout` output.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Uncapturable {
    /// Its whole size, more than [`MAX_CAPTURE`].
    TooLarge(u64),
    NotUtf8,
}

impl std::fmt::Display for Uncapturable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Uncapturable::TooLarge(size) => write!(
                f,
                "its standard output is {size} bytes; a captured output is at most {} KiB (write a large result to a file instead)",
                MAX_CAPTURE >> 10
            ),
            Uncapturable::NotUtf8 => {
                f.write_str("its standard output is not UTF-8 text, which `capture` needs")
            }
        }
    }
}

/// What one run of the script found.
#[derive(Debug, PartialEq, Eq)]
enum Ran {
    /// A guard said the command is not needed.
    Skipped(String),
    Finished {
        status: i32,
        timed_out: bool,
        stdout: Vec<u8>,
        /// The whole output's size; more than `stdout` when it was cut.
        stdout_size: u64,
        stderr: Vec<u8>,
    },
}

/// Runs the node's command unless a guard finds it unnecessary. Facts: `ran` (`yes` or
/// `no`); when it ran, `inputs` (the resolved hash it ran for, so that what comes after it
/// runs again whenever it does) and `stdout` when captured; when a guard skipped it, its
/// record's facts if it has one on this target (nothing changed there), else the guard's
/// `reason`.
pub async fn apply_exec(t: &Transport, spec: &ExecSpec) -> Result<Applied, StepError> {
    let subject = format!("exec `{}` on host `{}`", spec.name, t.host());
    spec.validate()
        .map_err(|e| StepError::new(e.to_string()).of(&subject))?;
    let ran = run(
        t,
        &spec.command,
        &spec.stdin,
        spec.creates.as_deref(),
        spec.unless.as_deref(),
        spec.only_if.as_deref(),
    )
    .await
    .map_err(|e| e.of(&subject))?;
    let mut facts = Facts::new();
    match ran {
        Ran::Skipped(reason) => {
            let note = format!("did not run: {reason}");
            match &spec.previous {
                // Its record keeps what it reported when it ran (or was last skipped).
                Some(previous) if !spec.capture || previous.contains_key("stdout") => {
                    facts = previous.clone();
                }
                _ if spec.capture => {
                    return Err(StepError::with_hint(
                        format!("{subject}: {reason}, so it did not run, and it never ran here before: its captured `stdout` is unknown"),
                        "a command whose output other nodes read needs to run once: remove what its guard finds, or drop the guard",
                    ));
                }
                _ => {
                    facts.insert("ran".into(), "no".into());
                    facts.insert("reason".into(), reason);
                }
            }
            Ok(Applied {
                facts,
                created: false,
                note: Some(note),
                log: None,
            })
        }
        Ran::Finished {
            status,
            timed_out,
            stdout,
            stdout_size,
            stderr,
        } => {
            let log = log_of(status, &stdout, &stderr);
            let program = &spec.command.argv[0];
            if timed_out {
                return Err(StepError::with_hint(
                    format!(
                        "{subject}: `{program}` did not finish within {} s and was stopped{}",
                        spec.command.timeout_secs,
                        shown(&log)
                    ),
                    "raise the exec's `timeout`, or find what it waits for",
                ));
            }
            if status != 0 {
                return Err(StepError::with_hint(
                    format!("{subject}: `{program}` exited with status {status}{}", shown(&log)),
                    "the command failed on the target: nothing is recorded, so the next build runs it again; fix the command or what it needs",
                ));
            }
            facts.insert("ran".into(), "yes".into());
            facts.insert("inputs".into(), spec.inputs.clone());
            if spec.capture {
                facts.insert(
                    "stdout".into(),
                    captured(stdout, stdout_size)
                        .map_err(|e| StepError::new(e.to_string()).of(&subject))?,
                );
            }
            Ok(Applied {
                facts,
                created: true,
                note: Some("ran: exit 0".into()),
                log: Some(log),
            })
        }
    }
}

/// Runs a recorded `undo` (no guards, no input).
pub async fn undo_exec(t: &Transport, undo: &CommandLine) -> Result<CommandLog, StepError> {
    match run(t, undo, b"", None, None, None).await? {
        Ran::Finished {
            status: 0,
            timed_out: false,
            stdout,
            stderr,
            ..
        } => Ok(log_of(0, &stdout, &stderr)),
        Ran::Finished {
            status,
            timed_out,
            stdout,
            stderr,
            ..
        } => {
            let log = log_of(status, &stdout, &stderr);
            let how = if timed_out {
                format!("did not finish within {} s", undo.timeout_secs)
            } else {
                format!("exited with status {status}")
            };
            Err(StepError::with_hint(
                format!("undo `{}` {how}{}", undo.argv[0], shown(&log)),
                "its record stays until an undo succeeds: fix what the undo needs and build again",
            ))
        }
        Ran::Skipped(reason) => Err(StepError::new(format!(
            "undo was skipped without a guard ({reason}); this is a bug in envc"
        ))),
    }
}

async fn run(
    t: &Transport,
    c: &CommandLine,
    stdin: &[u8],
    creates: Option<&str>,
    unless: Option<&[String]>,
    only_if: Option<&[String]>,
) -> Result<Ran, StepError> {
    let limit = c.timeout_secs.to_string();
    let args: Vec<&str> = vec![
        c.user.as_deref().unwrap_or(""),
        &c.cwd,
        &limit,
        creates.unwrap_or(""),
    ];
    let counts = [
        unless.map_or(0, <[_]>::len).to_string(),
        only_if.map_or(0, <[_]>::len).to_string(),
    ];
    let mut listed: Vec<&str> = vec![&counts[0]];
    listed.extend(unless.unwrap_or_default().iter().map(String::as_str));
    listed.push(&counts[1]);
    listed.extend(only_if.unwrap_or_default().iter().map(String::as_str));
    listed.extend(c.argv.iter().map(String::as_str));
    // The environment and the arguments go ahead of the command's input, never on a
    // command line.
    let mut input =
        crate::script::stdin_block(c.env.iter().map(|(k, v)| (Some(k.as_str()), v.as_str())));
    input.extend(crate::script::stdin_block(
        listed.into_iter().map(|a| (None, a)),
    ));
    input.extend_from_slice(stdin);
    // Each guard and the command may take the whole limit, and 10 s more to be killed.
    let phases = 1 + u32::from(unless.is_some()) + u32::from(only_if.is_some());
    let wait = (Duration::from_secs(c.timeout_secs) + Duration::from_secs(10)) * phases + SLACK;
    let out = run_script_within(t, RUN, &args, &input, Some(wait)).await?;
    parse(&out)
}

fn parse(out: &CommandOutput) -> Result<Ran, StepError> {
    let text = &out.stdout;
    let end = text.iter().position(|b| *b == b'\n').unwrap_or(text.len());
    let head = String::from_utf8_lossy(&text[..end]);
    let body = text.get(end + 1..).unwrap_or_default();
    let fields: Vec<&str> = head.split('\t').collect();
    match fields.as_slice() {
        ["K", reason] => Ok(Ran::Skipped(reason.to_string())),
        ["E", message] => Err(StepError::new(message.replace('\u{1e}', "\n"))),
        ["X", status, timed_out, size, out_sent, err_sent] => {
            let num = |s: &str| s.trim().parse::<usize>().ok();
            let (Ok(status), Some(size), Some(o), Some(e)) = (
                status.parse::<i32>(),
                num(size),
                num(out_sent),
                num(err_sent),
            ) else {
                return Err(StepError::new(no_record(out)));
            };
            if body.len() != o + e {
                return Err(StepError::new(format!(
                    "the command's output arrived cut short ({} of {} bytes)",
                    body.len(),
                    o + e
                )));
            }
            Ok(Ran::Finished {
                status,
                timed_out: *timed_out == "yes",
                stdout: body[..o].to_vec(),
                stdout_size: size as u64,
                stderr: body[o..].to_vec(),
            })
        }
        _ => Err(StepError::new(no_record(out))),
    }
}

/// The captured output as the `stdout` output: UTF-8, bounded, one trailing newline off
/// (as `$(…)` does in a shell), so that a token reads as the token.
fn captured(stdout: Vec<u8>, size: u64) -> Result<String, Uncapturable> {
    if size > MAX_CAPTURE as u64 {
        return Err(Uncapturable::TooLarge(size));
    }
    let mut s = String::from_utf8(stdout).map_err(|_| Uncapturable::NotUtf8)?;
    if s.ends_with('\n') {
        s.pop();
        if s.ends_with('\r') {
            s.pop();
        }
    }
    Ok(s)
}

fn log_of(exit: i32, stdout: &[u8], stderr: &[u8]) -> CommandLog {
    // Whole lines only: a secret the cut went through would not be redacted later.
    let end = |b: &[u8]| {
        let mut cut = b.len().saturating_sub(LOG_TAIL);
        if cut > 0 {
            cut += b[cut..]
                .iter()
                .position(|c| *c == b'\n')
                .map_or(b.len() - cut, |i| i + 1);
        }
        String::from_utf8_lossy(&b[cut..]).into_owned()
    };
    CommandLog {
        exit,
        stdout: end(stdout),
        stderr: end(stderr),
    }
}

/// The last lines of a failed command's output, for its error.
fn shown(log: &CommandLog) -> String {
    let mut s = String::new();
    for (name, text) in [("stderr", &log.stderr), ("stdout", &log.stdout)] {
        let t = tail(text, 10);
        if !t.is_empty() {
            s.push_str(&format!("\n  {name}:\n    {}", t.replace('\n', "\n    ")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn out(stdout: &[u8]) -> CommandOutput {
        CommandOutput {
            status: Some(0),
            stdout: stdout.to_vec(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn the_script_reply_is_parsed_by_its_sizes() {
        let check = |reply: &[u8], expected: Result<Ran, &str>| {
            assert_eq!(
                parse(&out(reply)).map_err(|e| e.cause),
                expected.map_err(str::to_string)
            );
        };
        check(
            b"X\t0\tno\t6\t6\t4\nhello\nwarn",
            Ok(Ran::Finished {
                status: 0,
                timed_out: false,
                stdout: b"hello\n".to_vec(),
                stdout_size: 6,
                stderr: b"warn".to_vec(),
            }),
        );
        check(
            b"X\t124\tyes\t0\t0\t0\n",
            Ok(Ran::Finished {
                status: 124,
                timed_out: true,
                stdout: vec![],
                stdout_size: 0,
                stderr: vec![],
            }),
        );
        check(
            b"K\tcreates: /x exists\n",
            Ok(Ran::Skipped("creates: /x exists".into())),
        );
        check(b"E\tno user\x1ebob\n", Err("no user\nbob"));
        check(
            b"X\t0\tno\t9\t9\t0\nshort",
            Err("the command's output arrived cut short (5 of 9 bytes)"),
        );
    }

    #[test]
    fn a_capture_is_text_without_its_last_newline_and_bounded() {
        assert_eq!(captured(b"tok\n".to_vec(), 4), Ok("tok".into()));
        assert_eq!(captured(b"a\r\n".to_vec(), 3), Ok("a".into()));
        assert_eq!(captured(b"a\n\n".to_vec(), 3), Ok("a\n".into()));
        assert!(captured(vec![0xff], 1).is_err());
        assert!(captured(vec![b'x'; 10], MAX_CAPTURE as u64 + 1).is_err());
    }

    /// A command of `argv` with `env`, as validation sees it.
    fn command(argv: Vec<String>, env: BTreeMap<String, String>) -> ExecSpec {
        ExecSpec {
            name: "x".into(),
            command: CommandLine {
                argv,
                env,
                user: None,
                cwd: "/".into(),
                timeout_secs: 1,
            },
            stdin: vec![],
            creates: None,
            unless: None,
            only_if: None,
            capture: false,
            undo: None,
            inputs: String::new(),
            previous: None,
        }
    }

    #[test]
    fn programs_that_env_would_misread_are_refused() {
        let spec = |argv: &[&str]| {
            command(
                argv.iter().map(|s| s.to_string()).collect(),
                BTreeMap::new(),
            )
        };
        assert!(spec(&["true"]).validate().is_ok());
        assert!(spec(&["A=b"]).validate().is_err());
        assert!(spec(&[""]).validate().is_err());
    }

    /// What execve would refuse is refused before anything is sent, naming what is too
    /// large; what it takes (big, within the limits) is sent, on stdin.
    #[test]
    fn values_too_large_for_a_program_are_named() {
        let spec = |argv: Vec<String>, env: &[(&str, usize)]| {
            let env = env.iter().map(|(k, n)| (k.to_string(), "v".repeat(*n)));
            command(argv, env.collect())
        };
        let echo = |n: usize| vec!["echo".to_string(), "a".repeat(n)];
        assert_eq!(
            spec(echo(100 << 10), &[("BIG", 100 << 10)]).validate(),
            Ok(())
        );
        let e = spec(echo(3 << 20), &[]).validate().unwrap_err().to_string();
        assert!(
            e.starts_with("`argv[1]` is 3.0 MiB; a program on Linux takes at most 128 KiB"),
            "{e}"
        );
        let e = spec(echo(1), &[("BIG", 3 << 20)])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("`env.BIG` is 3.0 MiB"), "{e}");
        let many: Vec<String> = (0..30).map(|_| "a".repeat(100 << 10)).collect();
        let e = spec(many, &[]).validate().unwrap_err().to_string();
        assert!(e.starts_with("`argv` with `env` is 2.9 MiB"), "{e}");
    }
}
