//! The few process calls std does not offer, in one place (the only `unsafe` in the host): signal
//! dispositions, signals to a pid, and "does this pid exist".

#![allow(unsafe_code)]

static TERM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_term(_sig: libc::c_int) {
    // only an atomic store: async-signal-safe
    TERM.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// From now on `SIGTERM` (and `SIGINT`) only sets a flag ([`term_requested`]) instead of ending
/// the process: a worker finishes its current atomic step and stops cleanly.
pub fn catch_term() {
    #[cfg(unix)]
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
}

/// Whether `SIGTERM` or `SIGINT` arrived since [`catch_term`].
pub fn term_requested() -> bool {
    TERM.load(std::sync::atomic::Ordering::SeqCst)
}

/// Ignores `SIGXFSZ`, so a write past the file-size limit (`ulimit -f`) fails with `EFBIG` and
/// is reported as an error instead of killing the process without a word.
pub fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Asks the kernel to back the `bytes` bytes at `ptr` (an allocation not touched yet) with huge
/// pages: Linux `madvise(MADV_HUGEPAGE)`, for the fleet's large buffers (the pods' KV blocks and
/// key tables, hundreds of MB read at random: with 4 KiB pages nearly every lookup also missed the
/// TLB). Only a hint: ignored where it is refused, has no effect on contents, and does nothing on
/// other systems.
pub fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = (ptr as usize).div_ceil(PAGE) * PAGE;
        let end = (ptr as usize).saturating_add(bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range lies within one live allocation of the caller's (page-aligned
            // inward); MADV_HUGEPAGE changes how pages are backed, never their contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Whether process `pid` exists, from `kill(pid, 0)`: `Some(false)` when there is no such
/// process (`ESRCH`), `Some(true)` when there is one (ours or, `EPERM`, another user's), `None`
/// when it cannot be told.
pub fn process_exists(pid: u32) -> Option<bool> {
    #[cfg(unix)]
    {
        // a pid no pid_t can hold names no process
        let Ok(pid) = libc::pid_t::try_from(pid) else { return Some(false) };
        if pid <= 0 {
            return None;
        }
        // SAFETY: signal 0 performs only the existence and permission check.
        let r = unsafe { libc::kill(pid, 0) };
        if r == 0 {
            return Some(true);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(false),
            Some(libc::EPERM) => Some(true),
            _ => None,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        None
    }
}

/// Sends `SIGSTOP` (`stop = true`) or `SIGCONT` to `pid`; false if it failed.
pub fn stop_or_continue(pid: u32, stop: bool) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe { libc::kill(pid, sig) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, stop);
        false
    }
}

/// Sends `SIGKILL` to every process of group `pgid` (a command tool run in its own group, timed
/// out: the program and whatever it started); false if it failed.
pub fn kill_group(pgid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pgid) = libc::pid_t::try_from(pgid) else { return false };
        if pgid <= 1 {
            return false;
        }
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe { libc::kill(-pgid, libc::SIGKILL) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = pgid;
        false
    }
}

/// Sends `SIGKILL` to `pid`; false if it failed.
pub fn kill(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Sends `SIGTERM` to `pid`; false if it failed.
pub fn terminate(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe { libc::kill(pid, libc::SIGTERM) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Stops this process (`SIGSTOP` to itself) until someone sends `SIGCONT`.
pub fn stop_self() {
    stop_or_continue(std::process::id(), true);
}

/// Whether child `pid` is stopped (by a signal), without reaping it or consuming its status.
pub fn child_is_stopped(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let pid: libc::id_t = pid;
        // SAFETY: `info` is a plain C struct that waitid fills; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with WNOWAIT only reads the child's state and leaves it waitable.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT) };
        // SAFETY: si_pid is valid to read after a successful waitid.
        r == 0 && unsafe { info.si_pid() } != 0 && info.si_code == libc::CLD_STOPPED
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// This process's peak resident set so far, bytes (`getrusage(RUSAGE_SELF).ru_maxrss`, which
/// Linux counts in KiB); None when it cannot be read (or off unix).
pub fn peak_rss_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: `ru` is a plain C struct that getrusage fills; zeroed is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage only writes the struct it is given.
        let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        // ru_maxrss is in KiB on Linux, in bytes on macOS.
        let unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
        (r == 0).then(|| (ru.ru_maxrss.max(0) as u64).saturating_mul(unit))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The calling thread's CPU time so far, s (`CLOCK_THREAD_CPUTIME_ID`); None when it cannot be
/// read (or off unix).
pub fn thread_cpu_s() -> Option<f64> {
    cpu_clock_s(
        #[cfg(unix)]
        libc::CLOCK_THREAD_CPUTIME_ID,
    )
}

/// This process's CPU time so far (every thread, user and system), s
/// (`CLOCK_PROCESS_CPUTIME_ID`); None when it cannot be read (or off unix).
pub fn process_cpu_s() -> Option<f64> {
    cpu_clock_s(
        #[cfg(unix)]
        libc::CLOCK_PROCESS_CPUTIME_ID,
    )
}

#[cfg(unix)]
fn cpu_clock_s(clock: libc::clockid_t) -> Option<f64> {
    // SAFETY: `ts` is a plain C struct that clock_gettime fills; zeroed is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime only writes the struct it is given.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    (r == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

#[cfg(not(unix))]
fn cpu_clock_s() -> Option<f64> {
    None
}
