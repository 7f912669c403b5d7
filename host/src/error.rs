//! The CLI's error type: a message that says what to fix, and an exit code.

use std::fmt;

/// Exit code for bad input (a flag, a file, a line, a field).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code for any other failure.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code of `task run`/`task resume` when the task paused for review.
pub const EXIT_NEEDS_REVIEW: i32 = 3;

/// An error the CLI prints on stderr before exiting with `code`.
#[derive(Debug)]
pub struct CliError {
    /// Process exit code.
    pub code: i32,
    /// Human-readable message: names the file/line/field/flag and what was expected.
    pub msg: String,
}

impl CliError {
    /// Bad input: exit code 2.
    pub fn bad_input(msg: impl Into<String>) -> Self {
        CliError { code: EXIT_BAD_INPUT, msg: msg.into() }
    }
    /// Any other failure: exit code 1.
    pub fn failure(msg: impl Into<String>) -> Self {
        CliError { code: EXIT_FAILURE, msg: msg.into() }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for CliError {}

/// Result alias used across the host crate.
pub type CliResult<T> = Result<T, CliError>;
