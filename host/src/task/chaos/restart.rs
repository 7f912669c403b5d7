//! The PostgreSQL server's restarts during a chaos run: the restarter thread (`--pg-stop-cmd`,
//! `--pg-start-cmd`), and recognizing and waiting out a restart a runner ran into.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A runner's stderr that says the database server went away or is not (yet) accepting
/// connections: a server restart, not a runner error. The runner classified its error from the
/// driver's (`TaskError::server_gone`) and said so with [`SERVER_GONE_NOTE`]; a child process's
/// stderr is the only thing the supervisor sees of it.
pub(super) fn server_down(err: &str) -> bool {
    err.contains(SERVER_GONE_NOTE)
}

/// Waits (up to 60 s) until the database accepts a session again.
pub(super) fn wait_for_server(ctx: &Ctx) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if PgStore::open(&ctx.db.to_string_lossy(), false).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Restarts of the PostgreSQL server, driven by a thread for the whole run.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    pub(super) n: u64,
    pub(super) down_ms: u64,
    pub(super) problems: Vec<String>,
}

pub(super) fn sh(cmd: &str) -> Result<(), String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{cmd}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd}` exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Every 5 to 20 s (drawn): the stop command, 0 to 5 s down (drawn), the start command; until
/// `stop` is set (a cycle under way is completed, so the server is up at the end).
pub(super) fn restarter(stop_cmd: &str, start_cmd: &str, seed: u64, stop: &AtomicBool) -> Restarts {
    let mut r = Restarts::default();
    let mut rng = Draws::new(seed ^ 0x5E57_A127);
    loop {
        let until = Instant::now() + Duration::from_millis(5000 + rng.below(15_001));
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let down = rng.below(5001);
        let t = Instant::now();
        if let Err(e) = sh(stop_cmd) {
            r.problems.push(format!("stopping the server: {e}"));
        }
        std::thread::sleep(Duration::from_millis(down));
        if let Err(e) = sh(start_cmd) {
            r.problems.push(format!("starting the server: {e}"));
            return r;
        }
        r.n += 1;
        r.down_ms += t.elapsed().as_millis() as u64;
    }
}
