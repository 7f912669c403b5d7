//! Who holds a lease, and whether that process is provably gone (same host, same boot).
//!
//! A process is identified by (host, boot id, pid, start time): the start time (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot) tells a reused pid apart, and the boot id tells
//! a previous boot apart. Where `/proc` is missing (macOS, BSDs) there is no boot id and no start
//! time: a holder is then never *provably* dead (its pid may have been reused, or it may be
//! another machine with the same name), and its lease is taken only when it expires.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where process facts come from.
const PROC: &str = "/proc";

/// This process as a lease holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// `hostname/boot-id-prefix`.
    pub host: String,
    /// Our pid.
    pub pid: u32,
    /// Our start time (clock ticks since boot), 0 if unknown.
    pub start: u64,
}

impl Me {
    /// Reads our identity from `/proc`.
    pub fn current() -> Me {
        let pid = std::process::id();
        let proc = Path::new(PROC);
        Me { host: host_id_in(proc), pid, start: start_time_in(proc, pid).unwrap_or(0) }
    }
    /// The owner string recorded in the log: `host:pid:start`.
    pub fn owner(&self) -> String {
        format!("{}:{}:{}", self.host, self.pid, self.start)
    }
}

/// `hostname/first 8 chars of the boot id` (`hostname/` when the boot id is unknown).
pub fn host_id() -> String {
    host_id_in(Path::new(PROC))
}

fn host_id_in(proc: &Path) -> String {
    // (fault hook, only on a fault-injection database) pretend to be another host: with a
    // trailing `/` (no boot id) nothing this process sees is provably dead, as on a host
    // without /proc (`task bench --takeover-kills`)
    if let Some(h) = super::faults::var("BROKERLAB_AS_HOST") {
        return h;
    }
    let host = std::fs::read_to_string(proc.join("sys/kernel/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    let boot = std::fs::read_to_string(proc.join("sys/kernel/random/boot_id")).unwrap_or_default();
    let boot: String = boot.trim().chars().take(8).collect();
    format!("{}/{}", host.trim(), boot)
}

/// Start time of `pid` in `proc` (field 22 of `<proc>/<pid>/stat`), or None if it does not
/// exist, is a zombie (a killed child not yet reaped is gone for our purposes), or `/proc` is
/// missing.
fn start_time_in(proc: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(proc.join(format!("{pid}/stat"))).ok()?;
    // the command name is in parentheses and may contain spaces: split after the last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?; // field 3
    if state == "Z" || state == "X" {
        return None;
    }
    // fields 4..=21 are 18 fields; field 22 is the 19th after the state
    fields.nth(18)?.parse().ok()
}

/// Whether the holder `(host, pid, start)` is provably gone: same host and boot, and the pid is
/// missing, a zombie, or a different process (start time differs). Without a boot id (no
/// `/proc`) nothing is provable: the caller waits for the lease to expire.
pub fn provably_dead(host: &str, pid: u32, start: u64) -> bool {
    provably_dead_in(Path::new(PROC), host, pid, start)
}

fn provably_dead_in(proc: &Path, host: &str, pid: u32, start: u64) -> bool {
    let here = host_id_in(proc);
    if host != here || here.ends_with('/') {
        return false;
    }
    // /proc works here (the boot id came from it)
    if std::fs::metadata(proc.join(format!("{pid}/stat"))).is_err() {
        // no entry: gone, unless /proc hides other users' processes (hidepid): ask the kernel
        return crate::sys::process_exists(pid) == Some(false);
    }
    match start_time_in(proc, pid) {
        None => true, // a zombie, or gone since the check above
        Some(s) => start != 0 && s != start,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_is_alive_and_reuse_is_detected() {
        let me = Me::current();
        assert!(me.start > 0);
        assert!(!provably_dead(&me.host, me.pid, me.start));
        assert!(provably_dead(&me.host, me.pid, me.start + 1), "same pid, other start time");
        assert!(provably_dead(&me.host, u32::MAX - 1, 1));
        assert!(!provably_dead("elsewhere/1234", u32::MAX - 1, 1), "another host is never provably dead");
    }

    #[test]
    fn without_proc_nothing_is_provably_dead() {
        // a machine without /proc (macOS): no boot id, no start times
        let none = Path::new("/nonexistent-proc-for-test");
        let host = host_id_in(none);
        assert!(host.ends_with('/'), "no boot id: {host}");
        let me = std::process::id();
        assert!(!provably_dead_in(none, &host, me, 0), "a live holder's lease is not taken");
        assert!(!provably_dead_in(none, &host, u32::MAX - 1, 1), "an unknown pid is not proof either");
    }
}
