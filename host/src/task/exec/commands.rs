//! The commands that change a task without running it first: `review`, `suspend`, `fork`.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `task review ID --step N --mark-done|--retry`.
pub fn review_cmd(db: &DbTarget, id: &str, step: u16, decision: Decision, lease_ms: i64) -> TaskResult<i32> {
    let store = open(db, false)?;
    let store = &*store;
    store.task_or_err(id)?;
    let mut st = store.replay(id)?;
    match &st.phase {
        Phase::Review { .. } if st.step == step && st.end.is_none() => {}
        _ => {
            return Err(TaskError::NotInReview { task: id.to_string(), step, status: status_of(&st) });
        }
    }
    let me = Me::current();
    let (lease, rec) = match store.acquire(&LeaseAsk {
        id,
        me: &me,
        ttl_ms: lease_ms,
        state: &st,
        create: None,
        clear_suspend: false,
    }) {
        Ok(x) => x,
        Err(LeaseError::Held { owner, .. }) => {
            return Err(TaskError::failure(format!("task {id:?} is held by a running runner ({owner}); try later")));
        }
        Err(LeaseError::Sql(e)) => return Err(e),
        Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
        Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
    };
    st.apply(&rec).map_err(|e| TaskError::failure(e.to_string()))?;
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
    let store = open(db, false)?;
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
    let (lease, rec) =
        match store.acquire(&LeaseAsk { id, me: &me, ttl_ms: lease_ms, state: &st, create: None, clear_suspend: true })
        {
            Ok(x) => x,
            Err(LeaseError::Held { .. }) => {
                store.request_suspend(id)?;
                say!("task {id}: suspend requested (a runner just started)");
                return Ok(0);
            }
            Err(LeaseError::Sql(e)) => return Err(e),
            Err(LeaseError::Exists) => return Err(TaskError::failure("unexpected create")),
            Err(LeaseError::Stale) => return Err(TaskError::LogChanged { task: id.to_string() }),
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
pub fn fork(db: &DbTarget, id: &str, at: u32, spec_path: Option<&Path>, opts: &RunOpts) -> TaskResult<i32> {
    let store = open(db, false)?;
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
    let new_id = match spec_path.and(spec.id.clone()) {
        Some(i) => i,
        None => {
            let base: String = id.chars().take(40).collect();
            let mut n = 1;
            loop {
                let cand = format!("{base}.f{n}");
                if store.task(&cand)?.is_none() {
                    break cand;
                }
                n += 1;
            }
        }
    };
    check_id(&new_id).map_err(|m| TaskError::bad_input(format!("fork id {new_id:?}: {m}")))?;
    if store.task(&new_id)?.is_some() {
        return Err(TaskError::bad_input(format!("task {new_id:?} already exists; give the new spec another id")));
    }
    let task = TaskId::try_from(new_id.as_str()).map_err(|_| TaskError::bad_input("fork id too long"))?;
    let parent_id = TaskId::try_from(id).map_err(|_| TaskError::bad_input("id too long"))?;
    let digest = spec.digest();
    let mut recs = vec![
        Record::new(task.clone(), 0, Event::Created { spec_digest: digest, steps: spec.steps.len() as u16 }),
        Record::new(task.clone(), 1, Event::ForkedFrom { task: parent_id, seq: at }),
    ];
    let mut st = fold_in(&store.name(), &new_id, &recs)?;
    // The fork rule (core::runner::fork): copy what happened in the steps, never shorten the
    // prefix: a call whose intent precedes the cut is the parent's and is never made anew.
    for r in parent.iter().take(at as usize + 1).filter(|r| copied_by_fork(&r.event)) {
        let rec = Record::new(task.clone(), recs.len() as u32, r.event.clone());
        st.apply(&rec).map_err(|e| {
            TaskError::bad_input(format!(
                "--at {at}: the parent's record seq {} does not fit the fork's spec ({} steps): {e}",
                r.seq,
                spec.steps.len()
            ))
        })?;
        recs.push(rec);
    }
    let start = match fork_start(&st) {
        ForkStart::Clean => String::new(),
        ForkStart::ReRun { step } => format!("; the cut is inside step {step}'s read-only call: it is re-run"),
        ForkStart::ReCallWithParentKey { step } => {
            format!("; the cut is inside step {step}'s idempotent call: it is re-called with the parent's key")
        }
        ForkStart::Review { step } => format!(
            "; the cut is inside step {step}'s non-idempotent call (the parent's): the fork pauses for review, it \
             never sends it on its own"
        ),
    };
    let world = world_dir(opts, row.world.as_deref());
    let new = NewTask {
        spec_json: spec.to_json(),
        digest,
        parent: Some(id.to_string()),
        parent_seq: Some(at as i64),
        world: Some(abs(&world).display().to_string()),
        records: recs,
    };
    say!("task {new_id}: forked from {id} at seq {at} ({} records copied){start}", new.records.len() - 2);
    execute(store, &new_id, &spec, world, opts, Some(new))
}
