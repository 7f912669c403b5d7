//! brokerlab host: binds the no_std core to files, SQLite, threads and the terminal.
#![deny(unsafe_code)]

/// `println!` that never panics: an output error (a closed pipe: `| head`, `| true`) is ignored,
/// so every command ends quietly on EPIPE, as Unix tools do. The one path to stdout for every
/// command (declared before the modules, so all of them can use it).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` through the same path as [`say!`] (no newline added).
macro_rules! say_raw {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = write!(out, $($t)*).and_then(|_| out.flush());
    }};
}

pub mod audit;
pub mod error;
pub mod fleet;
pub mod mem;
pub mod plot;
pub mod provenance;
pub mod sys;
pub mod task;

/// Writes `text` to stdout as is, ignoring output errors (see [`say!`]); for the binary.
pub fn print_stdout(text: &str) {
    say_raw!("{text}");
}

/// Writes one line to stderr, ignoring output errors (a closed stderr must not panic either).
pub fn print_stderr(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
