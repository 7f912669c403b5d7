//! Crash and pause injection: `BROKERLAB_CRASH_AT` and `BROKERLAB_PAUSE_AT` name a point (or
//! a count of commits) where the process stops as if killed, or parks itself with SIGSTOP.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Exit status of a process stopped by an injected crash (as if killed by SIGKILL: 128 + 9).
pub const CRASH_EXIT: i32 = 137;

/// A named place where `BROKERLAB_CRASH_AT` can stop the process, or `BROKERLAB_PAUSE_AT` park
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Before a checkpoint transaction commits (its records are lost).
    BeforeCommit,
    /// Right after a checkpoint committed.
    AfterCommit,
    /// The intent is durable, the tool has not been called (before the lease margin check).
    BeforeTool,
    /// The tool applied the call; its result has not reached the log (the window).
    ToolApplied,
    /// The lease margin check passed; the call is about to be sent to the tool.
    Calling,
}

impl Point {
    const ALL: [Point; 5] =
        [Point::BeforeCommit, Point::AfterCommit, Point::BeforeTool, Point::ToolApplied, Point::Calling];
    /// Its name in `BROKERLAB_CRASH_AT` / `BROKERLAB_PAUSE_AT`.
    pub fn name(self) -> &'static str {
        match self {
            Point::BeforeCommit => "before-commit",
            Point::AfterCommit => "after-commit",
            Point::BeforeTool => "before-tool",
            Point::ToolApplied => "tool-applied",
            Point::Calling => "calling",
        }
    }
}

/// One `POINT[:N]` or `N` target.
pub(super) type Target = (Option<Point>, u32);

/// Parses `POINT[:N]` or `N`, the value of `var` (`None`: not set).
pub(super) fn parse_target(var: &str, value: Option<String>) -> TaskResult<Option<Target>> {
    let Some(v) = value else { return Ok(None) };
    let bad = || {
        TaskError::bad_input(format!(
            "{var}={v:?}: expected N or POINT[:N] with POINT one of before-commit, after-commit, before-tool, \
             calling, tool-applied and N >= 1"
        ))
    };
    let (name, n) = match v.split_once(':') {
        Some((a, b)) => (Some(a), b.parse::<u32>().map_err(|_| bad())?),
        None => match v.parse::<u32>() {
            Ok(n) => (None, n),
            Err(_) => (Some(v.as_str()), 1),
        },
    };
    if n == 0 {
        return Err(bad());
    }
    let point = match name {
        Some(s) => Some(Point::ALL.into_iter().find(|p| p.name() == s).ok_or_else(bad)?),
        None => None,
    };
    Ok(Some((point, n)))
}

/// Crash and pause injection from the environment. `BROKERLAB_CRASH_AT=<point>[:<n>]` stops the
/// process (exit status 137, no cleanup, like `kill -9`) the n-th time (1-based, default 1) it
/// passes the named point; `BROKERLAB_CRASH_AT=<n>` at the n-th point of any kind.
/// `BROKERLAB_PAUSE_AT` (same syntax) parks the process there with `SIGSTOP` to itself, as a
/// paused VM or a long GC pause would, until someone sends `SIGCONT`. Points: `before-commit`,
/// `after-commit`, `before-tool`, `calling`, `tool-applied`.
#[derive(Debug, Default)]
pub struct Chaos {
    crash: Option<Target>,
    pause: Option<Target>,
    passed: Cell<u32>,
    passed_kind: Cell<[u32; 5]>,
}

impl Chaos {
    /// No crashes, no pauses.
    pub fn none() -> Chaos {
        Chaos::default()
    }

    /// Reads `BROKERLAB_CRASH_AT` and `BROKERLAB_PAUSE_AT`, which act only on a fault-injection
    /// database ([`crate::task::faults`]: unarmed, this is [`Chaos::none`]); a malformed value is
    /// bad input.
    pub fn from_env() -> TaskResult<Chaos> {
        let var = |v: &str| parse_target(v, crate::task::faults::var(v));
        Ok(Chaos { crash: var("BROKERLAB_CRASH_AT")?, pause: var("BROKERLAB_PAUSE_AT")?, ..Chaos::default() })
    }

    /// Checks the syntax of `BROKERLAB_CRASH_AT` and `BROKERLAB_PAUSE_AT` as set, before any
    /// database is opened (whether they may act is decided once it is).
    pub fn check_env() -> TaskResult<()> {
        for v in ["BROKERLAB_CRASH_AT", "BROKERLAB_PAUSE_AT"] {
            parse_target(v, std::env::var(v).ok())?;
        }
        Ok(())
    }

    /// Passes `p`; crashes or parks the process if it is a chosen point.
    pub fn point(&self, p: Point, what: &str) {
        let total = self.passed.get() + 1;
        self.passed.set(total);
        let mut kinds = self.passed_kind.get();
        let i = Point::ALL.iter().position(|q| *q == p).unwrap_or(0);
        kinds[i] += 1;
        self.passed_kind.set(kinds);
        let hit = |t: Option<Target>| match t {
            Some((None, n)) => total == n,
            Some((Some(q), n)) => q == p && kinds[i] == n,
            None => false,
        };
        if hit(self.crash) {
            eprintln!("brokerlab: crash injected at {} (point #{total}: {what})", p.name());
            std::process::exit(CRASH_EXIT);
        }
        if hit(self.pause) {
            eprintln!("brokerlab: paused at {} (point #{total}: {what}); waiting for SIGCONT", p.name());
            crate::sys::stop_self();
        }
    }
}
