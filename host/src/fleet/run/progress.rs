//! Progress of long fleet commands, on stderr only (stdout is for results and `--json`).
//!
//! * stderr is a terminal: an `indicatif` bar with rate and ETA (replay: bytes of the trace read
//!   and requests replayed; run: requests; sweep and report: points done);
//! * stderr is not a terminal (a log, CI): one plain status line every 5 s
//!   (`BROKERLAB_PROGRESS_INTERVAL`, seconds, changes it), and a last line when at least one was
//!   printed;
//! * `--quiet`: nothing.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use brokerlab_core::fleet::{Error as CoreError, Request};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use crate::error::CliResult;
use crate::fleet::input::trace::BytesRead;
use crate::fleet::run::RequestSource;

/// Flags every long fleet command takes.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct OutputArgs {
    /// No progress on stderr (no bar on a terminal, no status lines in a log).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Leave the date out of the provenance, so two runs on the same inputs give identical bytes.
    #[arg(long)]
    pub no_date: bool,
}

/// What the bar counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Sweep or report points.
    Points,
    /// Requests of a generated workload.
    Requests,
    /// Bytes of a trace (the message counts requests).
    TraceBytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hidden,
    Bar,
    Lines,
}

/// A progress display; cheap to share between threads (`&Progress` is `Sync`).
pub struct Progress {
    bar: ProgressBar,
    mode: Mode,
    ticker: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Progress {
    /// Shows nothing.
    pub fn hidden() -> Self {
        Progress { bar: ProgressBar::hidden(), mode: Mode::Hidden, ticker: None }
    }

    /// A display of `label` counting `unit` up to `total` (None: unknown): a bar when stderr is a
    /// terminal, status lines when it is not, nothing when `quiet`.
    pub fn new(quiet: bool, label: &str, unit: Unit, total: Option<u64>) -> Self {
        if quiet {
            return Self::hidden();
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
            let tmpl = match unit {
                Unit::Points => {
                    "{prefix} [{elapsed_precise}] [{wide_bar}] {pos}/{len} points ({rate}/s, ETA {eta}) {msg}"
                }
                Unit::Requests => {
                    "{prefix} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} requests ({rate}/s, ETA {eta})"
                }
                Unit::TraceBytes => {
                    "{prefix} [{elapsed_precise}] [{wide_bar}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, ETA {eta}) {msg}"
                }
            };
            let style = ProgressStyle::with_template(tmpl)
                .expect("valid template")
                .with_key("rate", |st: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.1}", st.per_sec());
                })
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            return Progress { bar, mode: Mode::Bar, ticker: None };
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let every = std::env::var("BROKERLAB_PROGRESS_INTERVAL")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e6)
            .map_or(Duration::from_secs(5), Duration::from_secs_f64);
        let (tx, rx) = mpsc::channel::<()>();
        let (b, label) = (bar.clone(), label.to_string());
        let handle = std::thread::spawn(move || {
            let mut printed = false;
            loop {
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {
                        b.tick(); // records the rate estimate
                        status_line(&format!("{label}: {}", status(&b, unit)));
                        printed = true;
                    }
                    // Finished (or dropped on an error path: no last line then).
                    Ok(()) => {
                        if printed {
                            status_line(&format!("{label}: done, {} in {}", done(&b, unit), dur(b.elapsed())));
                        }
                        return;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        });
        Progress { bar, mode: Mode::Lines, ticker: Some((tx, handle)) }
    }

    /// Advances by `n`.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Sets the position.
    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    /// Sets the total.
    pub fn set_length(&self, len: u64) {
        self.bar.set_length(len);
    }

    /// Sets the text after the bar (the current stage, requests replayed).
    pub fn set_message(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// The position (for tests: a finished report has counted every point).
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// The total, if known.
    pub fn length(&self) -> Option<u64> {
        self.bar.length()
    }

    /// Ends the display: clears the bar, or prints the last status line; call before printing
    /// results.
    pub fn finish(mut self) {
        self.stop(true);
    }

    fn stop(&mut self, ok: bool) {
        match self.mode {
            Mode::Bar if ok => self.bar.finish_and_clear(),
            Mode::Bar => self.bar.abandon(),
            _ => {}
        }
        if let Some((tx, handle)) = self.ticker.take() {
            if ok {
                let _ = tx.send(());
            }
            drop(tx);
            let _ = handle.join();
        }
        self.mode = Mode::Hidden;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Not finished: an error is on its way; leave the bar where it stopped.
        self.stop(false);
    }
}

fn status_line(s: &str) {
    // A closed or full stderr must not stop the work.
    let _ = writeln!(std::io::stderr().lock(), "brokerlab: {s}");
}

fn dur(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {:02}m {:02}s", s / 3600, s % 3600 / 60, s % 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn status(b: &ProgressBar, unit: Unit) -> String {
    let (pos, len) = (b.position(), b.length());
    let pct = len.filter(|&l| l > 0).map_or(String::new(), |l| format!(" ({:.0}%)", pos as f64 * 100.0 / l as f64));
    let eta = if len.is_some() && b.per_sec() > 0.0 { format!(", ETA {}", dur(b.eta())) } else { String::new() };
    let msg = b.message();
    let msg = if msg.is_empty() { msg } else { format!(", {msg}") };
    match unit {
        Unit::Points | Unit::Requests => {
            let what = if unit == Unit::Points { "points" } else { "requests" };
            let of = len.map_or(String::new(), |l| format!("/{l}"));
            format!("{pos}{of} {what}{pct}, {:.1} {what}/s{eta}{msg}", b.per_sec())
        }
        Unit::TraceBytes => {
            let of = len.map_or(String::new(), |l| format!(" of {}", mib(l)));
            format!("{}{of} read{pct}, {}/s{eta}{msg}", mib(pos), mib(b.per_sec() as u64))
        }
    }
}

fn done(b: &ProgressBar, unit: Unit) -> String {
    match unit {
        Unit::Points => format!("{} points", b.position()),
        Unit::Requests => format!("{} requests", b.position()),
        Unit::TraceBytes => format!("{} read, {}", mib(b.position()), b.message()),
    }
}

/// A request source that moves a [`Progress`] as it feeds: requests, or for a trace the bytes
/// read (message: requests replayed). A restart (a buffer doubled) starts the display over.
pub struct Tracked<'a> {
    /// The source.
    pub inner: &'a mut dyn RequestSource,
    /// The display.
    pub progress: &'a Progress,
    /// What it counts ([`Unit::Requests`] or [`Unit::TraceBytes`]).
    pub unit: Unit,
}

impl RequestSource for Tracked<'_> {
    fn restart_error(&self) -> Option<String> {
        self.inner.restart_error()
    }

    // forwarded: the memory budget counts the latencies of every request the source will feed
    fn len_hint(&self) -> Option<u64> {
        self.inner.len_hint()
    }

    fn id_blocks(&self) -> u32 {
        self.inner.id_blocks()
    }

    fn bytes_read(&self) -> Option<BytesRead> {
        self.inner.bytes_read()
    }

    fn grow_into(&mut self, growth: &crate::mem::Growth) {
        self.inner.grow_into(growth);
    }

    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let (p, unit) = (self.progress, self.unit);
        // the source's own count of trace bytes (a restart reads the file again: shown from here)
        let read = self.inner.bytes_read();
        let bytes = || read.as_ref().map_or(0, BytesRead::get);
        let start = bytes();
        let show = |n: u64| match unit {
            Unit::TraceBytes => {
                // a compressed trace: its text read out of its text, not out of the file's size
                if let Some(total) = read.as_ref().and_then(BytesRead::total) {
                    p.set_length(total);
                }
                p.set_position(bytes().saturating_sub(start));
                p.set_message(format!("{n} requests replayed"));
            }
            _ => p.set_position(n),
        };
        let mut n = 0u64;
        show(0);
        let r = self.inner.feed(&mut |req| {
            n += 1;
            if n.is_multiple_of(512) {
                show(n);
            }
            sink(req)
        });
        show(n);
        r
    }
}
