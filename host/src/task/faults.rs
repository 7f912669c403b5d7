//! The fault hooks, and the databases they may act on.
//!
//! `BROKERLAB_CRASH_AT` and `BROKERLAB_PAUSE_AT` stop or park the process at a named point,
//! `BROKERLAB_AS_HOST` replaces the host identity that the same-host liveness rule trusts (so a
//! live holder could be taken over at once), and `BROKERLAB_UNFENCED_TOOLS` turns a tool's fence
//! off. They exist for the tests and `task chaos`; in a production database any of them would
//! break the runner's promise. So they act **only on a fault-injection database**: one whose
//! `meta` table holds the key [`META_KEY`], written when the database is created for it (`task
//! init --fault-injection`, or `task chaos` / `task bench --takeover-kills` creating their own)
//! and never afterwards: an existing log cannot be marked, and no variable marks anything. On any
//! other database a set variable is refused (exit 2, naming it) before anything is written.
//!
//! A command opens its log database first; the binding reads the mark in the same read-only look
//! that checks the format tag and calls [`arm`]. Until then, and in a process whose database is
//! not marked, [`var`] answers `None` for every hook: nothing reads the variables directly.

use std::sync::OnceLock;

use crate::task::error::{TaskError, TaskResult};

/// The fault hooks' environment variables.
pub const HOOKS: [&str; 4] =
    ["BROKERLAB_CRASH_AT", "BROKERLAB_PAUSE_AT", "BROKERLAB_AS_HOST", "BROKERLAB_UNFENCED_TOOLS"];

/// The `meta` key that marks a fault-injection database (its value says so in words).
pub const META_KEY: &str = "fault_injection";

/// The mark's value, for people reading `meta`.
pub const META_VALUE: &str = "created for fault injection (task init --fault-injection, task chaos or task bench): \
                              BROKERLAB_CRASH_AT, BROKERLAB_PAUSE_AT, BROKERLAB_AS_HOST and \
                              BROKERLAB_UNFENCED_TOOLS act on it";

/// Whether this process's database is a fault-injection database (set once, by [`arm`]).
static ARMED: OnceLock<bool> = OnceLock::new();

/// The hook variables set (non-empty) in this process's environment.
pub fn set_vars() -> Vec<&'static str> {
    HOOKS.into_iter().filter(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty())).collect()
}

/// Called by a binding once it has read whether database `db` (its name for messages) is
/// `marked`: arms the hooks for this process if it is, and refuses any set hook variable if it is
/// not (exit 2, naming the variable; nothing has been written yet). A process arms once: a later
/// call for a marked database changes nothing, and one for an unmarked database still refuses set
/// variables.
pub fn arm(db: &str, marked: bool) -> TaskResult<()> {
    if marked {
        let _ = ARMED.set(true);
        return Ok(());
    }
    match set_vars().as_slice() {
        [] => Ok(()),
        vars => Err(TaskError::bad_input(format!(
            "{} set, but {db} is not a fault-injection database: the fault hooks act only on a database created \
             for them (`brokerlab task init --fault-injection --db ...`, or by `task chaos`), never on a production \
             log; unset {}; nothing was written",
            vars.join(", "),
            if vars.len() == 1 { "it" } else { "them" }
        ))),
    }
}

/// The value of hook variable `name` (one of [`HOOKS`]) if this process's database is a
/// fault-injection database and the variable is set; `None` otherwise.
pub fn var(name: &str) -> Option<String> {
    debug_assert!(HOOKS.contains(&name), "{name} is not a fault hook");
    if ARMED.get() != Some(&true) {
        return None;
    }
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether the hooks act in this process.
pub fn armed() -> bool {
    ARMED.get() == Some(&true)
}
