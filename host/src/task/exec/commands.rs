//! The commands that change a task without running it first: `review`, `suspend`, `fork`.

#[allow(clippy::wildcard_imports)]
use super::*;

/// How many times a command that takes a lease reads the log again when it moved on under it
/// (`LeaseError::Stale`: a runner appended between the read and the lease) before it gives up.
const STALE_RETRIES: u32 = 20;

/// `task review ID --step N --mark-done|--retry`.
pub fn review_cmd(db: &DbTarget, id: &str, step: u16, decision: Decision, lease_ms: i64) -> TaskResult<i32> {
    let store = open(db, Access::Write)?;
    let store = &*store;
    store.task_or_err(id)?;
    let me = Me::current();
    let mut tries = 0;
    // a lease held for a moment (a fork of this task, another review) is waited for
    let patience = std::time::Instant::now() + Duration::from_millis(super::super::backend::busy_ms()?);
    let (mut st, lease) = loop {
        let mut st = store.replay(id)?;
        match &st.phase {
            Phase::Review { .. } if st.step == step && st.end.is_none() => {}
            _ => {
                return Err(TaskError::NotInReview { task: id.to_string(), step, status: status_of(&st) });
            }
        }
        let ask = LeaseAsk {
            id,
            me: &me,
            ttl_ms: lease_ms,
            state: &st,
            create: None,
            clear_suspend: false,
            open: OpenCall::None,
            witness: None,
        };
        match store.acquire(&ask) {
            Ok((lease, rec)) => {
                st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
                break (st, lease);
            }
            Err(LeaseError::Held { .. }) if std::time::Instant::now() < patience => {
                std::thread::sleep(Duration::from_millis(PARENT_POLL_MS));
            }
            Err(LeaseError::Held { owner, .. }) => {
                return Err(TaskError::failure(format!(
                    "task {id:?} is held by a running runner ({owner}); try later"
                )));
            }
            Err(LeaseError::Sql(e) | LeaseError::Witness(e)) => return Err(e),
            Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
            // the log moved on since we read it (a runner appended): read it again and re-check
            Err(LeaseError::Stale) if tries < STALE_RETRIES => tries += 1,
            Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
        }
    };
    // the reviewer read the tool's file: from now on no older lease holder may add to it
    let row = store.task_or_err(id)?;
    let mut world = World::new(&world_dir(&RunOpts::default(), row.world.as_deref()));
    if let Err(e) = fence_in_flight(&mut world, id, &st) {
        store.release(&lease);
        return Err(e);
    }
    let chaos = Chaos::none();
    let mut journal = HostJournal::new(store, lease.clone(), &chaos);
    let r = review(&mut st, &mut journal, step, decision);
    store.release(&lease);
    match r {
        Ok(()) => {
            let what = match decision {
                Decision::MarkDone => "marked done",
                Decision::Retry => "will be retried (a new call)",
            };
            say!("task {id}: step {step} {what}; continue with `brokerlab task resume {id}`");
            Ok(0)
        }
        Err(e) => Err(TaskError::failure(format!("task {id:?}: review not recorded: {e}"))),
    }
}

/// `task suspend ID`.
pub fn suspend(db: &DbTarget, id: &str, lease_ms: i64) -> TaskResult<i32> {
    let store = open(db, Access::Write)?;
    let store = &*store;
    store.task_or_err(id)?;
    let mut st = store.replay(id)?;
    if st.end.is_some() {
        return Err(TaskError::bad_input(format!("task {id:?} has already {}; nothing to suspend", status_of(&st))));
    }
    if st.suspended {
        say!("task {id}: already suspended before step {}", st.step);
        return Ok(0);
    }
    let now = now_ms();
    if let Some(l) = store.lease(id)?
        && l.live(now)
    {
        store.request_suspend(id)?;
        say!(
            "task {id}: suspend requested; the runner ({}) stops after its current step and records the marker",
            l.owner
        );
        return Ok(0);
    }
    // No live runner: write the marker ourselves, if no call is in flight.
    if let Phase::Review { .. } = st.phase {
        return Err(TaskError::bad_input(format!(
            "task {id:?} cannot be suspended now: it is {}; it is already stopped and waits for a human: answer \
             with `brokerlab task review {id} --step {} --mark-done` or `--retry`",
            status_of(&st),
            st.step
        )));
    }
    if !st.can_suspend() {
        return Err(TaskError::bad_input(format!(
            "task {id:?} cannot be suspended now: it is {}; run `brokerlab task resume {id}` to resolve the step",
            status_of(&st)
        )));
    }
    let me = Me::current();
    let ask = LeaseAsk {
        id,
        me: &me,
        ttl_ms: lease_ms,
        state: &st,
        create: None,
        clear_suspend: true,
        open: OpenCall::None,
        witness: None,
    };
    let (lease, rec) = match store.acquire(&ask) {
        Ok(x) => x,
        Err(LeaseError::Held { .. }) => {
            store.request_suspend(id)?;
            say!("task {id}: suspend requested (a runner just started)");
            return Ok(0);
        }
        Err(LeaseError::Sql(e) | LeaseError::Witness(e)) => return Err(e),
        Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
        // a runner appended since we read the log: it is live, ask it
        Err(LeaseError::Stale) => {
            store.request_suspend(id)?;
            say!("task {id}: suspend requested (a runner is appending)");
            return Ok(0);
        }
    };
    st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
    let marker = Record::new(st.task_id.clone(), st.next_seq, Event::Suspended { next_step: st.step });
    st.apply(&marker).map_err(|e| TaskError::failure(e.to_string()))?;
    let r = store.append(&lease, &[marker]);
    store.release(&lease);
    match r {
        Ok(()) => {
            say!("task {id}: suspended before step {} (no runner was active)", st.step);
            Ok(0)
        }
        Err(AppendError::Sql(e)) => Err(e),
        Err(AppendError::Fenced { .. }) => Err(TaskError::failure(format!("task {id:?}: a runner took over"))),
    }
}

/// `task fork ID --at SEQ [--spec NEW]`.
///
/// Ids: the new spec's own `id`, else the first free `ID.fN`, allocated atomically: the fork's
/// rows are created with the candidate id in the same transaction that takes its lease (`INSERT
/// ... ON CONFLICT DO NOTHING` / `INSERT OR IGNORE`), and a candidate another fork took meanwhile
/// moves on to the next (its records carry their task id, so they are built per candidate). Each
/// command reports the fork it created, never one another process made.
pub fn fork(db: &DbTarget, id: &str, at: u32, spec_path: Option<&Path>, opts: &RunOpts) -> TaskResult<i32> {
    let store = open(db, Access::Write)?;
    let store = &*store;
    let row = store.task_or_err(id)?;
    let parent = store.records(id)?;
    if at as usize >= parent.len() {
        return Err(TaskError::bad_input(format!(
            "--at {at}: task {id:?} has records 0..={}",
            parent.len().saturating_sub(1)
        )));
    }
    let spec = match spec_path {
        Some(p) => Spec::load(p)?,
        None => Spec::stored(&row.spec, &store.name(), id)?,
    };
    let own_id = spec_path.and(spec.id.clone());
    if let Some(i) = &own_id {
        check_id(i).map_err(|m| TaskError::bad_input(format!("fork id {i:?}: {m}")))?;
        if store.task(i)?.is_some() {
            return Err(TaskError::TaskExists { task: i.clone() });
        }
    }
    let world = world_dir(opts, row.world.as_deref());
    // what the cut leaves open, decided on the prefix (the fork's id does not change it)
    let probe = fork_records(store, id, &parent, at, &spec, own_id.as_deref().unwrap_or(id))?;
    let start = fork_start(&probe);
    let guard = match parent_guard(start) {
        ParentGuard::Nothing => None,
        ParentGuard::ParentLease { step } => Some(hold_parent(store, id, at, step, &world, opts.lease_ms)?),
    };
    let start_text = match start {
        ForkStart::Clean => String::new(),
        ForkStart::ReRun { step } => format!("; the cut is inside step {step}'s read-only call: it is re-run"),
        ForkStart::ReCallWithParentKey { step } => {
            format!("; the cut is inside step {step}'s idempotent call: it is re-called with the parent's key")
        }
        ForkStart::Review { step } => format!(
            "; the cut is inside step {step}'s non-idempotent call (the parent's): the fork pauses for review, it \
             never sends it on its own (the parent's lease was taken and its fence in the tool raised first, so the \
             parent's runner cannot send it either)"
        ),
    };
    let base: String = id.chars().take(40).collect();
    let mut n = 1u32;
    let r = loop {
        let new_id = own_id.clone().unwrap_or_else(|| format!("{base}.f{n}"));
        check_id(&new_id).map_err(|m| TaskError::bad_input(format!("fork id {new_id:?}: {m}")))?;
        if own_id.is_none() && store.task(&new_id)?.is_some() {
            n += 1;
            continue;
        }
        let st = fork_records(store, id, &parent, at, &spec, &new_id)?;
        let recs = fork_copy(&new_id, id, at, &spec, &parent)?;
        debug_assert_eq!(st.next_seq as usize, recs.len());
        let new = NewTask {
            spec_json: spec.to_json(),
            digest: spec.digest(),
            parent: Some(id.to_string()),
            parent_seq: Some(at as i64),
            world: Some(abs(&world).display().to_string()),
            records: recs,
        };
        let copied = new.records.len() - 2;
        // said (and the parent's lease given back) once the fork exists, before it runs
        let created = || {
            if let Some(l) = &guard {
                store.release(l);
            }
            say!("task {new_id}: forked from {id} at seq {at} ({copied} records copied){start_text}");
        };
        let start = Start { create: Some(new), resume_if_exists: false, on_start: Some(&created) };
        match execute(store, &new_id, &spec, world.clone(), opts, start) {
            // taken by another fork since we looked: the next id
            Err(TaskError::TaskExists { .. }) if own_id.is_none() && n < MAX_FORK_IDS => n += 1,
            r => break r,
        }
    };
    if let Some(l) = &guard {
        store.release(l); // not yet given back if the fork was not created
    }
    r
}

/// How often a fork (or a review) asks again for a lease that someone holds, ms.
const PARENT_POLL_MS: u64 = 20;

/// Most `ID.fN` ids a fork tries.
const MAX_FORK_IDS: u32 = 100_000;

/// The fork's records for id `new_id`: `created`, `forked-from`, and the parent's records up to
/// `at` that the fork rule copies, renumbered. The prefix is never shortened: a call whose intent
/// precedes the cut is the parent's and is never made anew (core::runner::fork).
fn fork_copy(new_id: &str, parent_id: &str, at: u32, spec: &Spec, parent: &[Record]) -> TaskResult<Vec<Record>> {
    let task = TaskId::try_from(new_id).map_err(|_| TaskError::bad_input("fork id too long"))?;
    let parent_task = TaskId::try_from(parent_id).map_err(|_| TaskError::bad_input("id too long"))?;
    let mut recs = vec![
        Record::new(task.clone(), 0, Event::Created { spec_digest: spec.digest(), steps: spec.steps.len() as u16 }),
        Record::new(task.clone(), 1, Event::ForkedFrom { task: parent_task, seq: at }),
    ];
    for r in parent.iter().take(at as usize + 1).filter(|r| copied_by_fork(&r.event)) {
        recs.push(Record::new(task.clone(), recs.len() as u32, r.event.clone()));
    }
    Ok(recs)
}

/// The fork's state after its copied prefix ([`fork_copy`]), each record checked against the
/// fork's spec.
fn fork_records(
    store: &dyn TaskStore,
    parent_id: &str,
    parent: &[Record],
    at: u32,
    spec: &Spec,
    new_id: &str,
) -> TaskResult<TaskState> {
    let recs = fork_copy(new_id, parent_id, at, spec, parent)?;
    let mut st = fold_in(&store.name(), new_id, &recs[..2])?;
    for (rec, src) in recs[2..].iter().zip(parent.iter().take(at as usize + 1).filter(|r| copied_by_fork(&r.event))) {
        st.apply(rec).map_err(|e| {
            TaskError::bad_input(format!(
                "--at {at}: the parent's record seq {} does not fit the fork's spec ({} steps): {e}",
                src.seq,
                spec.steps.len()
            ))
        })?;
    }
    Ok(st)
}

/// The fork's guard ([`ParentGuard::ParentLease`]): takes the parent's lease as a runner taking
/// it over would (the lease rules, the dropped-session rule included: refused while the parent's runner may still
/// make its open call), then raises the parent's fence in the open call's tool to the new epoch,
/// so a parent runner parked before that call is refused by the tool if it wakes. Returns the
/// lease, to be released once the fork exists. A lease held by someone who may still act is
/// waited for up to `BROKERLAB_BUSY_MS` (another fork, or a review, holds it for a moment), then
/// the fork is refused, saying why.
fn hold_parent(store: &dyn TaskStore, id: &str, at: u32, step: u16, world: &Path, lease_ms: i64) -> TaskResult<Lease> {
    let me = Me::current();
    let mut w = World::new(world);
    let mut tries = 0;
    let patience = std::time::Instant::now() + Duration::from_millis(super::super::backend::busy_ms()?);
    loop {
        let recs = store.records(id)?;
        let mut st = fold_in(&store.name(), id, &recs)?;
        let open = open_call_of(&st, &w);
        let ask = LeaseAsk {
            id,
            me: &me,
            ttl_ms: lease_ms,
            state: &st,
            create: None,
            clear_suspend: false,
            open,
            witness: None,
        };
        match store.acquire(&ask) {
            Ok((lease, rec)) => {
                st.apply(&rec).map_err(|e| TaskError::failure(format!("lease record: {e}")))?;
                if let Err(e) = fence_in_flight(&mut w, id, &st) {
                    store.release(&lease);
                    return Err(e);
                }
                return Ok(lease);
            }
            Err(LeaseError::Held { .. }) if std::time::Instant::now() < patience => {
                std::thread::sleep(Duration::from_millis(PARENT_POLL_MS));
            }
            Err(LeaseError::Held { owner, epoch, expires_in_ms, why }) => {
                let intent = recs
                    .iter()
                    .take(at as usize + 1)
                    .rev()
                    .find(|r| matches!(r.event, Event::ToolIntent { step: s, .. } if s == step));
                let tool = match intent.map(|r| &r.event) {
                    Some(Event::ToolIntent { tool, .. }) => tool.to_string(),
                    _ => "-".to_string(),
                };
                let held = TaskError::Held { task: id.to_string(), owner, epoch, expires_in_ms, why }.to_string();
                return Err(TaskError::ParentLive {
                    parent: id.to_string(),
                    at,
                    step,
                    tool,
                    intent_seq: intent.map_or(at, |r| r.seq),
                    held,
                });
            }
            Err(LeaseError::Stale) if tries < STALE_RETRIES => tries += 1,
            Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
            Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
            Err(LeaseError::Sql(e) | LeaseError::Witness(e)) => return Err(e),
        }
    }
}
