//! brokerlab host: binds the no_std core to files, SQLite, threads and the terminal.
#![deny(unsafe_code)]

/// `println!` that never panics: a closed pipe (`| head`, `| true`: EPIPE) ends the output
/// quietly, as Unix tools do; any other write error (ENOSPC, EIO: `> /dev/full`) is kept and
/// reported when the command ends ([`stdout_failure`]: exit 1 naming stdout), never success.
/// The one path to stdout for every command (declared before the modules, so all of them can
/// use it).
macro_rules! say {
    ($($t:tt)*) => {{
        $crate::write_stdout(format_args!($($t)*), true);
    }};
}

/// `print!` through the same path as [`say!`] (no newline added).
macro_rules! say_raw {
    ($($t:tt)*) => {{
        $crate::write_stdout(format_args!($($t)*), false);
    }};
}

pub mod agent;
pub mod audit;
pub mod error;
pub mod exit;
pub mod fleet;
pub mod mem;
pub mod outfile;
pub mod plot;
pub mod provenance;
pub mod sys;
pub mod task;

/// Writes `text` to stdout as is (see [`say!`]); for the binary.
pub fn print_stdout(text: &str) {
    say_raw!("{text}");
}

/// Set once a write to stdout failed: later writes are skipped (the output is cut either way).
static STDOUT_DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The first stdout write error other than a closed pipe.
static STDOUT_ERROR: std::sync::Mutex<Option<std::io::Error>> = std::sync::Mutex::new(None);

/// Writes `args` (and a newline) to stdout and flushes: the body of [`say!`] and [`say_raw!`].
pub fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write as _;
    use std::sync::atomic::Ordering;
    if STDOUT_DONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let r = out.write_fmt(args).and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) });
    if let Err(e) = r.and_then(|()| out.flush()) {
        STDOUT_DONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let mut first = STDOUT_ERROR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            first.get_or_insert(e);
        }
    }
}

/// The message of the first failed stdout write other than a closed pipe (EPIPE), after a last
/// flush: the command must then exit 1, whatever it computed (its output is incomplete).
pub fn stdout_failure() -> Option<String> {
    use std::io::Write as _;
    if !STDOUT_DONE.load(std::sync::atomic::Ordering::Relaxed) {
        let flushed = std::io::stdout().lock().flush();
        if let Err(e) = flushed
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            return Some(format!("cannot write to stdout: {e}"));
        }
    }
    let first = STDOUT_ERROR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    first.as_ref().map(|e| format!("cannot write to stdout: {e}"))
}

/// Writes one line to stderr, ignoring output errors (a closed stderr must not panic either).
pub fn print_stderr(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
