//! The process's exit codes, below every error type that maps to them (the CLI's `CliError`, the
//! task runner's `TaskError`).

/// Exit code for bad input (a flag, a file, a line, a field).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code for any other failure.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code of `task run`/`task resume` when the task paused for review.
pub const EXIT_NEEDS_REVIEW: i32 = 3;
