//! Who holds a lease, and whether that process is provably gone (same host, same boot).
//!
//! A process is identified by (host, boot id, pid, start time): the start time (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot) tells a reused pid apart, and the boot id tells
//! a previous boot apart. No libc: everything comes from `/proc`.

use std::time::{SystemTime, UNIX_EPOCH};

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
        Me { host: host_id(), pid, start: start_time(pid).unwrap_or(0) }
    }
    /// The owner string recorded in the log: `host:pid:start`.
    pub fn owner(&self) -> String {
        format!("{}:{}:{}", self.host, self.pid, self.start)
    }
}

/// `hostname/first 8 chars of the boot id`.
pub fn host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let boot: String = boot.trim().chars().take(8).collect();
    format!("{}/{}", host.trim(), boot)
}

/// Start time of `pid` (field 22 of `/proc/<pid>/stat`), or None if it does not exist or is a
/// zombie (a killed child not yet reaped is gone for our purposes).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
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
/// missing, a zombie, or a different process (start time differs).
pub fn provably_dead(host: &str, pid: u32, start: u64) -> bool {
    if host != host_id() {
        return false;
    }
    match start_time(pid) {
        None => true,
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
}
