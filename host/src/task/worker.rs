//! `task submit` and `task worker` (PostgreSQL only): a queue of tasks that long-running workers
//! claim with `SELECT ... FOR UPDATE SKIP LOCKED` and run under the usual lease and fencing.
//!
//! The claim only keeps workers from picking the same task at once; what makes one runner at a
//! time a guarantee is the lease, taken in its own fenced transaction as for `task run`. A worker
//! that claims a task another runner holds is refused the lease, leaves the task queued and
//! tries another. SIGTERM (or SIGINT): each slot finishes its current atomic step, records the
//! `suspended` marker (the suspend rule), leaves the task queued for another worker, and the
//! worker exits 0. The claim protocol (a short `SKIP LOCKED` pick plus a claim lock keyed by the
//! lease epoch) is [`Claimer`]'s; when the server goes away each slot abandons its run as a crash
//! would and reconnects with backoff ([`RECONNECT_FIRST_MS`] to [`RECONNECT_MAX_MS`]). An idle
//! slot does not poll blindly: it waits ([`Claimer::wait`]) for a NOTIFY (a task queued, a lease
//! released), for the session of a queued task's holder to end (its session lock), or for the
//! earliest live lease's expiry, whichever comes first, and at most `--poll-ms`.

use std::path::Path;
use std::time::Duration;

use brokerlab_core::runner::Phase;

use super::backend::{DbTarget, TaskStore};
use super::exec::{RunOpts, new_task, resume_row, task_id_of, world_dir};
use super::pg::{Claimer, PgStore};
use super::spec::Spec;
use crate::task::error::{TaskError, TaskResult};

fn url_of(db: &DbTarget, cmd: &str) -> TaskResult<String> {
    match db {
        DbTarget::Postgres(u) => Ok(u.clone()),
        DbTarget::Sqlite(p) => Err(TaskError::bad_input(format!(
            "--db {}: `task {cmd}` needs a PostgreSQL database (--db postgres://USER@HOST:PORT/DB or $BROKERLAB_DB); \
             a SQLite file serves one runner at a time, use `task run`",
            p.display()
        ))),
    }
}

/// `task submit SPEC`: creates the task (unless its id exists with the same spec) and queues it.
pub fn submit(db: &DbTarget, spec_path: &Path, opts: &RunOpts) -> TaskResult<i32> {
    let url = url_of(db, "submit")?;
    let spec = Spec::load(spec_path)?;
    let store = PgStore::open(&url, true)?;
    let id = task_id_of(&spec);
    if let Some(row) = store.task(&id)? {
        let stored = Spec::stored(&row.spec, &store.name(), &id)?;
        if stored.digest() != spec.digest() {
            return Err(TaskError::bad_input(format!(
                "{}: task {id:?} already exists with a different spec; nothing was queued",
                spec_path.display()
            )));
        }
    }
    let new = new_task(&spec, &id, &world_dir(opts, None))?;
    if store.submit(&id, &new)? {
        say!("task {id}: submitted ({} steps)", spec.steps.len());
    } else {
        say!("task {id}: exists, queued again");
    }
    Ok(0)
}

/// Options of `task worker`.
#[derive(Debug, Clone)]
pub struct WorkerOpts {
    /// Tasks run at once (one thread and two sessions each).
    pub concurrency: u32,
    /// Pause between claims when nothing is claimable, ms.
    pub poll_ms: u64,
    /// Exit once a claim finds nothing (instead of waiting for more).
    pub exit_when_idle: bool,
    /// The runners' options.
    pub run: RunOpts,
}

/// `task worker`: runs queued tasks until SIGTERM (or, with `--exit-when-idle`, until the queue
/// has nothing claimable). Exit 0 after a clean stop.
pub fn worker(db: &DbTarget, opts: &WorkerOpts) -> TaskResult<i32> {
    let url = url_of(db, "worker")?;
    crate::sys::catch_term();
    // the schema, once, before the slots start (a worker may be the first user of the database);
    // a server that is restarting is waited for as the slots would wait
    let mut pause = RECONNECT_FIRST_MS;
    loop {
        match PgStore::open(&url, true) {
            Ok(_) => break,
            Err(e) if e.server_gone() && !crate::sys::term_requested() => {
                if pause == RECONNECT_FIRST_MS {
                    eprintln!("brokerlab: worker: the database is unreachable, retrying (SIGTERM stops): {e}");
                }
                std::thread::sleep(Duration::from_millis(pause));
                pause = (pause * 2).min(RECONNECT_MAX_MS);
            }
            Err(e) => return Err(e),
        }
    }
    let mut run = opts.run.clone();
    run.suspend_on_term = true;
    let slots: Vec<_> = (0..opts.concurrency)
        .map(|slot| {
            let (url, run, o) = (url.clone(), run.clone(), opts.clone());
            std::thread::spawn(move || slot_loop(slot, &url, &run, &o))
        })
        .collect();
    let mut ran = 0;
    let mut failed = None;
    for h in slots {
        match h.join() {
            Ok(Ok(n)) => ran += n,
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(TaskError::failure("a worker slot panicked")),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    say!("worker: stopped ({ran} task runs)");
    Ok(0)
}

/// First pause before reconnecting after the database went away, ms; doubled after each failed
/// attempt up to [`RECONNECT_MAX_MS`].
pub const RECONNECT_FIRST_MS: u64 = 100;
/// Longest pause between reconnection attempts, ms.
pub const RECONNECT_MAX_MS: u64 = 5000;

/// A slot's two sessions: the runner's log and the claims.
struct Sessions {
    store: PgStore,
    claimer: Claimer,
}

impl Sessions {
    fn open(url: &str) -> TaskResult<Sessions> {
        Ok(Sessions { store: PgStore::open(url, false)?, claimer: Claimer::connect(url)? })
    }
}

/// Opens the slot's sessions, retrying with exponential backoff (from [`RECONNECT_FIRST_MS`] to
/// [`RECONNECT_MAX_MS`]) while the server does not answer (restarting, or down); `None` once
/// SIGTERM arrives. Bad input (a refused login, a missing database) is not retried.
fn reconnect(slot: u32, url: &str) -> TaskResult<Option<Sessions>> {
    let mut pause = RECONNECT_FIRST_MS;
    let mut said = false;
    loop {
        if crate::sys::term_requested() {
            return Ok(None);
        }
        match Sessions::open(url) {
            Ok(s) => {
                if said {
                    eprintln!("brokerlab: worker slot {slot}: reconnected");
                }
                return Ok(Some(s));
            }
            Err(e) if !e.server_gone() => return Err(e),
            Err(e) => {
                if !said {
                    eprintln!("brokerlab: worker slot {slot}: the database is unreachable, retrying: {e}");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(pause));
                pause = (pause * 2).min(RECONNECT_MAX_MS);
            }
        }
    }
}

/// One slot: claim, run, settle; until SIGTERM or (with `exit_when_idle`) nothing is claimable.
/// A task whose run failed (held by another runner, lost lease, a tool error) stays queued and is
/// passed over by this slot until the queue next looks empty to it. When the server goes away
/// (a restart), the run in progress is abandoned as a crash would leave it (what its last commit
/// made durable is the task's state; its session advisory lock is gone, so any worker takes the
/// task over at once) and the slot reconnects with backoff.
fn slot_loop(slot: u32, url: &str, run: &RunOpts, opts: &WorkerOpts) -> TaskResult<u64> {
    let mut skip: Vec<String> = Vec::new();
    let mut ran = 0;
    let mut s: Option<Sessions> = None;
    while !crate::sys::term_requested() {
        if s.is_none() {
            match reconnect(slot, url)? {
                Some(x) => s = Some(x),
                None => break,
            }
        }
        let Some(sess) = s.as_mut() else { break };
        let id = match sess.claimer.claim(&skip) {
            Ok(Some(id)) => id,
            Ok(None) => {
                if opts.exit_when_idle {
                    break;
                }
                skip.clear();
                // event-driven: back at once when a task is queued or released, a holder's
                // session ends, or a live lease expires; at most --poll-ms otherwise
                if let Err(e) = sess.claimer.wait(Duration::from_millis(opts.poll_ms)) {
                    if !e.server_gone() {
                        return Err(e);
                    }
                    s = None;
                }
                continue;
            }
            Err(e) if e.server_gone() => {
                s = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        let r = run_one(&sess.store, &id, run);
        ran += 1;
        let settled = match sess.store.replay(&id) {
            Ok(st) => {
                st.end.is_some()
                    || matches!(st.phase, Phase::Review { .. })
                    || (st.suspended && !crate::sys::term_requested())
            }
            Err(_) => false,
        };
        let done = if settled { sess.claimer.done(&id) } else { sess.claimer.keep() };
        if !settled {
            skip.push(id.clone());
        }
        let lost = [r.as_ref().err(), done.as_ref().err()].into_iter().flatten().any(TaskError::server_gone);
        if let Err(e) = r {
            eprintln!("brokerlab: worker slot {slot}: task {id}: {e}");
        }
        if lost {
            s = None;
        } else {
            done?;
        }
    }
    Ok(ran)
}

fn run_one(store: &PgStore, id: &str, run: &RunOpts) -> TaskResult<i32> {
    let row = store.task_or_err(id)?;
    let spec = Spec::stored(&row.spec, &store.name(), id)?;
    resume_row(store, id, &spec, row.world.as_deref(), run)
}
