//! `[[tool]] kind = "command"`: a tool that is a local program.
//!
//! Each attempt runs `program argv...` in its own process group, with the call's arguments (the
//! canonical JSON the intent recorded) on its stdin and, in its environment:
//!
//! | variable                    | value                                              |
//! |-----------------------------|----------------------------------------------------|
//! | `BROKERLAB_TASK`            | the task id                                        |
//! | `BROKERLAB_STEP`            | the step                                           |
//! | `BROKERLAB_TOOL`            | the tool's name                                    |
//! | `BROKERLAB_IDEMPOTENCY_KEY` | the key (idempotent tools only; unset otherwise)   |
//! | `BROKERLAB_FENCE`           | the fencing token, `task/epoch`                    |
//! | `BROKERLAB_FENCE_EPOCH`     | the epoch alone                                    |
//! | `BROKERLAB_ATTEMPT`         | 0 for the first attempt of the call in this run    |
//!
//! Its exit status is the answer ([`reply_of`]): **0** done, stdout is the result; **65**
//! (`EX_DATAERR`) refused, it did nothing, stdout (else stderr) says why; **75** (`EX_TEMPFAIL`)
//! not done now, try again later; **77** (`EX_NOPERM`) it refused the fencing token, stdout holds
//! the highest token it has seen; **anything else** (1, a crash, a signal, or the timeout, after
//! which the whole group is killed) means the outcome is unknown, and the tool's class decides
//! (re-run, re-call with the same key, or review). Only those explicit codes are trusted to say
//! "nothing happened": a program that dies half-way must not be taken for one that refused.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::defaults::MAX_BODY_BYTES;
use super::tool::{Tool, ToolReply, ToolRequest};
use crate::task::spec::CommandSpec;

/// Exit status: done.
pub const EXIT_DONE: i32 = 0;
/// Exit status: refused, nothing done (`EX_DATAERR`).
pub const EXIT_REFUSED: i32 = 65;
/// Exit status: not done now, try again later (`EX_TEMPFAIL`).
pub const EXIT_TRY_LATER: i32 = 75;
/// Exit status: the fencing token was refused (`EX_NOPERM`); stdout: the highest token seen.
pub const EXIT_FENCED: i32 = 77;

/// How often the runner looks whether the program has ended, ms.
const POLL_MS: u64 = 2;

/// A tool that is a local program.
#[derive(Debug)]
pub struct CommandTool {
    spec: CommandSpec,
}

/// What exit status `code` (None: killed by a signal or timed out) means, with the program's
/// stdout and stderr.
pub fn reply_of(code: Option<i32>, stdout: &str, stderr: &str) -> ToolReply {
    let why = || {
        let s = if stdout.trim().is_empty() { stderr.trim() } else { stdout.trim() };
        s.to_string()
    };
    match code {
        Some(EXIT_DONE) => ToolReply::Done(stdout.to_string()),
        Some(EXIT_REFUSED) => ToolReply::Refused(why()),
        Some(EXIT_TRY_LATER) => ToolReply::RateLimited { retry_after_ms: None },
        Some(EXIT_FENCED) => match stdout.trim().parse() {
            Ok(highest) => ToolReply::Fenced { highest },
            Err(_) => ToolReply::Unknown(format!(
                "exit {EXIT_FENCED} (fenced) without the highest token on stdout: {}",
                why()
            )),
        },
        Some(c) => ToolReply::Unknown(format!("exit {c}: {}", tail(stderr))),
        None => ToolReply::Unknown(format!("killed: {}", tail(stderr))),
    }
}

fn tail(s: &str) -> String {
    let s = s.trim();
    let start = s.char_indices().rev().nth(299).map_or(0, |(i, _)| i);
    s[start..].to_string()
}

fn read_all(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(r) = r {
            let _ = r.take(MAX_BODY_BYTES).read_to_end(&mut v);
        }
        String::from_utf8_lossy(&v).into_owned()
    })
}

impl CommandTool {
    /// A tool for `spec`.
    pub fn new(spec: &CommandSpec) -> CommandTool {
        CommandTool { spec: spec.clone() }
    }
}

impl Tool for CommandTool {
    fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply {
        let mut c = Command::new(&self.spec.program);
        c.args(&self.spec.argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .env("BROKERLAB_TASK", req.task)
            .env("BROKERLAB_STEP", req.step.to_string())
            .env("BROKERLAB_TOOL", req.tool)
            .env("BROKERLAB_FENCE", req.fence.to_string())
            .env("BROKERLAB_FENCE_EPOCH", req.fence.epoch.to_string())
            .env("BROKERLAB_ATTEMPT", req.attempt.to_string())
            .env_remove("BROKERLAB_IDEMPOTENCY_KEY");
        if let Some(k) = req.key {
            c.env("BROKERLAB_IDEMPOTENCY_KEY", k);
        }
        let mut child = match c.spawn() {
            Ok(ch) => ch,
            Err(e) => return ToolReply::Unreachable(format!("cannot start {}: {e}", self.spec.program)),
        };
        if let Some(mut stdin) = child.stdin.take() {
            // a program that does not read its arguments closes the pipe: not an error
            let _ = stdin.write_all(req.arguments.as_bytes());
        }
        let out = read_all(child.stdout.take());
        let err = read_all(child.stderr.take());
        let deadline = Instant::now() + Duration::from_millis(self.spec.patience.timeout_ms);
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if Instant::now() >= deadline => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(POLL_MS)),
                Err(_) => break None,
            }
        };
        let timed_out = status.is_none();
        if timed_out {
            crate::sys::kill_group(child.id());
            let _ = child.wait();
        }
        let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
        if timed_out {
            return ToolReply::Unknown(format!(
                "{}: no answer within timeout_ms = {} ms; its process group was killed",
                self.spec.program, self.spec.patience.timeout_ms
            ));
        }
        let code = status.and_then(|s| s.code().or_else(|| s.signal().map(|sig| 128 + sig)));
        reply_of(code, &stdout, &stderr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_map_to_replies() {
        assert_eq!(reply_of(Some(0), "r", ""), ToolReply::Done("r".into()));
        assert_eq!(reply_of(Some(65), "", "bad amount"), ToolReply::Refused("bad amount".into()));
        assert_eq!(reply_of(Some(75), "", ""), ToolReply::RateLimited { retry_after_ms: None });
        assert_eq!(reply_of(Some(77), "9\n", ""), ToolReply::Fenced { highest: 9 });
        assert!(matches!(reply_of(Some(77), "", ""), ToolReply::Unknown(_)));
        assert!(matches!(reply_of(Some(1), "", "boom"), ToolReply::Unknown(_)));
        assert!(matches!(reply_of(None, "", ""), ToolReply::Unknown(_)));
    }
}
