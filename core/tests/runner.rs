//! Tests of the runner core: the format, the storage backends under torn writes, the state machine
//! and the every-crash-point enumeration.

use embedded_storage::nor_flash::NorFlash;
use proptest::prelude::*;

use brokerlab_core::runner::harness::{
    self, CrashPlan, DEMO_LOG_BYTES, DEMO_SCRIPT, ScriptStep, ScriptTool, SimEffects, SimWorld,
};
use brokerlab_core::runner::*;

fn tid(s: &str) -> TaskId {
    TaskId::try_from(s).unwrap()
}

fn max_string<const N: usize>(c: char) -> heapless::String<N> {
    let mut s = heapless::String::new();
    while s.push(c).is_ok() {}
    s
}

fn max_call() -> ToolCall {
    let mut args = Args::new();
    while args.push(0xFF).is_ok() {}
    ToolCall { tool: max_string('t'), class: ToolClass::NonIdempotent, args }
}

/// The largest record of each kind must fit MAX_RECORD_BYTES.
#[test]
fn largest_records_fit() {
    let task: TaskId = max_string('x');
    let events = [
        Event::Created { spec_digest: u32::MAX, steps: u16::MAX },
        Event::LeaseAcquired { owner: max_string('o'), epoch: u64::MAX },
        Event::ModelResponse { step: u16::MAX, text: max_string('é'), call: Some(max_call()) },
        Event::ToolIntent {
            step: u16::MAX,
            tool: max_string('t'),
            class: ToolClass::Idempotent,
            key: Some(max_string('k')),
            args: max_call().args,
        },
        Event::ToolResult { step: u16::MAX, ok: true, output: max_string('r') },
        Event::ForkedFrom { task: max_string('p'), seq: u32::MAX },
        Event::Failed { reason: max_string('f') },
    ];
    for ev in events {
        let rec = Record::new(task.clone(), u32::MAX, ev);
        let mut buf = [0u8; 4096];
        let used = postcard::to_slice(&rec, &mut buf).unwrap().len();
        assert!(used <= MAX_RECORD_BYTES, "{:?} takes {used} bytes", rec.kind());
        let mut fb = [0u8; MAX_FRAME_LEN];
        let n = emit(&rec, &mut fb).unwrap();
        assert_eq!(parse(&fb[..n]).unwrap().0, rec);
    }
}

#[test]
fn sizes_stay_small() {
    let (st, rec) = (core::mem::size_of::<TaskState>(), core::mem::size_of::<Record>());
    println!("TaskState {st} B, Record {rec} B, Event {} B", core::mem::size_of::<Event>());
    assert!(st <= 1024 && rec <= 1024, "TaskState {st}, Record {rec}");
}

#[test]
fn keys_are_deterministic_and_distinct() {
    let a = idempotency_key("t1", 3);
    assert_eq!(a, idempotency_key("t1", 3));
    assert_eq!(a.len(), KEY_LEN);
    assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(a, idempotency_key("t1", 4));
    assert_ne!(a, idempotency_key("t2", 3));
    assert_ne!(idempotency_key("t1", 0x0100), idempotency_key("t1\u{1}", 0));
}

// ------------------------------------------------------------------------------------------
// State machine

fn created(steps: u16) -> (TaskState, Vec<Record>) {
    let mut st = TaskState::new(tid("t"));
    let mut log = Vec::new();
    let mut j = VecJournal(&mut log);
    commit(&mut st, &mut j, Event::Created { spec_digest: 1, steps }).unwrap();
    (st, log)
}

struct VecJournal<'a>(&'a mut Vec<Record>);
impl Journal for VecJournal<'_> {
    type Error = ();
    fn append(&mut self, rec: &Record) -> Result<(), ()> {
        self.0.push(rec.clone());
        Ok(())
    }
}

fn call(class: ToolClass) -> ToolCall {
    ToolCall { tool: ToolName::try_from("x").unwrap(), class, args: Args::from_slice(b"{}").unwrap() }
}

fn in_flight(class: ToolClass) -> TaskState {
    let (mut st, mut log) = created(2);
    let mut j = VecJournal(&mut log);
    let c = call(class);
    commit(&mut st, &mut j, Event::ModelResponse { step: 0, text: ModelText::new(), call: Some(c.clone()) }).unwrap();
    let key = key_for("t", 0, class);
    commit(&mut st, &mut j, Event::ToolIntent { step: 0, tool: c.tool.clone(), class, key, args: c.args.clone() })
        .unwrap();
    st
}

#[test]
fn resume_rule_per_class() {
    let st = in_flight(ToolClass::ReadOnly);
    assert!(matches!(next_action(&st), Action::CallTool { key: None, intent_recorded: true, .. }));
    let st = in_flight(ToolClass::Idempotent);
    match next_action(&st) {
        Action::CallTool { key: Some(k), intent_recorded: true, .. } => {
            assert_eq!(k, idempotency_key("t", 0))
        }
        a => panic!("{a:?}"),
    }
    let st = in_flight(ToolClass::NonIdempotent);
    assert_eq!(next_action(&st), Action::MarkNeedsReview { step: 0 });
    assert!(!st.can_suspend(), "no suspension with a call in flight");
}

#[test]
fn review_flow_and_rejections() {
    let mut st = in_flight(ToolClass::NonIdempotent);
    let mut log = Vec::new();
    let mut j = VecJournal(&mut log);
    // a result-less in-flight step cannot be suspended, reviewed or completed
    assert!(commit(&mut st, &mut j, Event::Suspended { next_step: 0 }).is_err());
    assert!(review(&mut st, &mut j, 0, Decision::MarkDone).is_err());
    assert!(commit(&mut st, &mut j, Event::Completed).is_err());
    commit(&mut st, &mut j, Event::NeedsReview { step: 0 }).unwrap();
    assert_eq!(next_action(&st), Action::AwaitReview { step: 0 });
    assert!(review(&mut st, &mut j, 1, Decision::MarkDone).is_err(), "wrong step");
    review(&mut st, &mut j, 0, Decision::Retry).unwrap();
    assert!(matches!(next_action(&st), Action::CallTool { intent_recorded: false, key: None, .. }));
    assert!(log.is_empty() || log.len() == 2);
}

#[test]
fn fencing_and_suspend_rules() {
    let (mut st, mut log) = created(1);
    let mut j = VecJournal(&mut log);
    let owner = Owner::try_from("a").unwrap();
    commit(&mut st, &mut j, Event::LeaseAcquired { owner: owner.clone(), epoch: 2 }).unwrap();
    assert_eq!(
        commit(&mut st, &mut j, Event::LeaseAcquired { owner, epoch: 2 }),
        Err(CommitError::Runner(RunnerError::StaleEpoch { current: 2, got: 2 }))
    );
    commit(&mut st, &mut j, Event::Suspended { next_step: 0 }).unwrap();
    assert_eq!(next_action(&st), Action::Resume);
    assert!(commit(&mut st, &mut j, Event::ModelResponse { step: 0, text: ModelText::new(), call: None }).is_err());
    commit(&mut st, &mut j, Event::Resumed).unwrap();
    assert_eq!(next_action(&st), Action::CallModel { step: 0 });
    // a bad seq / another task / wrong status never folds
    let mut bad = Record::new(tid("t"), 99, Event::Resumed);
    assert!(st.clone().apply(&bad).is_err());
    bad.seq = st.next_seq;
    bad.task_id = tid("u");
    assert!(st.clone().apply(&bad).is_err());
    let mut bad = Record::new(tid("t"), st.next_seq, Event::Completed);
    bad.status = Status::Pending;
    assert_eq!(st.clone().apply(&bad), Err(RunnerError::BadStatus { seq: st.next_seq }));
}

/// Live state == replayed state after every atomic step, and every prefix of the log folds to the
/// state the live run had when it wrote that record.
#[test]
fn replay_equals_live_for_every_prefix() {
    let mut buf = [0u8; DEMO_LOG_BYTES];
    let task = tid("live");
    let mut live_states: Vec<TaskState> = Vec::new();
    let mut world = SimWorld::<64>::new();
    {
        let plan = CrashPlan::never();
        let mut journal = LogJournal(RamLog::format(&mut buf));
        let mut st = TaskState::new(task.clone());
        live_states.push(st.clone());
        let digest = harness::script_digest(&DEMO_SCRIPT);
        commit(&mut st, &mut journal, Event::Created { spec_digest: digest, steps: 20 }).unwrap();
        live_states.push(st.clone());
        let mut suspend_at = Some(7);
        loop {
            let mut fx =
                SimEffects { script: &DEMO_SCRIPT, world: &mut world, plan: &plan, suspend_before_step: suspend_at };
            let before = st.next_seq;
            let stop = drive_step(&mut st, &mut journal, &mut fx).unwrap();
            // intermediate record (the intent) of a tool step: rebuild its live state by folding
            if st.next_seq > before + 1 {
                assert_eq!(st.next_seq, before + 2);
            }
            assert_eq!(replay(&mut journal.0, &task).unwrap(), st, "replay != live at seq {}", st.next_seq);
            live_states.resize(st.next_seq as usize + 1, st.clone());
            match stop {
                None => {}
                Some(Stop::Suspended) => {
                    // resume by a "new runner": replay and continue
                    assert_eq!(st.step, 7);
                    st = replay(&mut journal.0, &task).unwrap();
                    suspend_at = None;
                }
                Some(Stop::NeedsReview { .. }) => panic!("no crash, no review"),
                Some(Stop::Completed) => break,
                Some(Stop::Failed) => panic!("failed"),
            }
        }
        assert_eq!(st.end, Some(End::Completed));
        assert_eq!(st.counters.suspends, 1);
    }
    let mut log = RamLog::open(&mut buf);
    let n = harness::count_records(&mut log).unwrap();
    assert_eq!(n + 1, live_states.len());
    for (k, live) in live_states.iter().enumerate() {
        let p = replay_prefix(&mut log, &task, k).unwrap();
        assert_eq!(p.next_seq as usize, k);
        // states of steps that wrote one record are exact; for the intent of a tool step compare
        // with an independent fold of the records
        let mut fold = TaskState::new(task.clone());
        for_each_record(&mut log, |r| {
            if (r.seq as usize) < k {
                fold.apply(r).unwrap();
            }
        })
        .unwrap();
        assert_eq!(p, fold);
        if live.next_seq as usize == k {
            assert_eq!(&p, live, "prefix {k}");
        }
    }
    harness::check_world(&task, &DEMO_SCRIPT, &world).unwrap();
}

// ------------------------------------------------------------------------------------------
// Every crash point

#[test]
fn every_crash_point_of_the_demo_task() {
    let mut buf = [0u8; DEMO_LOG_BYTES];
    let mut world = SimWorld::<128>::new();
    let rep = harness::enumerate_crash_points(&mut buf, &tid("demo"), &DEMO_SCRIPT, &mut world, false, false);
    println!("{rep:?}");
    assert_eq!(rep.violations, 0, "{:?}", rep.first_violation);
    let tools = DEMO_SCRIPT.iter().filter(|s| s.tool.is_some()).count() as u32;
    assert_eq!(tools, 16);
    // created + 20 model + 16 x (intent, result) + completed = 54 records, 2 points each,
    // + 2 points per tool call
    assert_eq!(rep.points, (1 + 20 + 2 * tools + 1) * 2 + 2 * tools);
    assert_eq!(rep.runs, rep.points);
    assert_eq!(rep.window, 2 * tools, "two window points per tool call");
    // an email intent without a result (after the intent, before the call, after the call, before
    // the result) goes to review: 4 points x 2 emails
    assert_eq!(rep.reviews, 8);
    assert!(rep.deduplicated >= 9, "payment replays deduplicated: {}", rep.deduplicated);
}

/// The crash points of a crash-free run of `script`, listed independently of the harness from the
/// issue's definition: before and after every log append (created, then per step the model
/// response, and for a tool step its intent, the call and its result, then completed), and before
/// and after every tool call ("tool applied, result not recorded"). Unbuffered order.
fn expected_crash_points(script: &[ScriptStep<'_>]) -> Vec<harness::CrashPoint> {
    use harness::CrashPoint as P;
    let mut v = Vec::new();
    let mut seq = 0u32;
    let mut append = |v: &mut Vec<P>, kind: Kind| {
        v.push(P::BeforeAppend { seq, kind });
        v.push(P::AfterAppend { seq, kind });
        seq += 1;
    };
    append(&mut v, Kind::Created);
    for (i, s) in script.iter().enumerate() {
        let step = i as u16;
        append(&mut v, Kind::ModelResponse);
        if s.tool.is_some() {
            append(&mut v, Kind::ToolIntent);
            v.push(P::BeforeTool { step });
            v.push(P::ToolApplied { step });
            append(&mut v, Kind::ToolResult);
        }
    }
    append(&mut v, Kind::Completed);
    v
}

/// Every listed crash point of the 20-step task is really crashed at, in order, and nothing else
/// is: boot `k` (fresh log and world, crash at the k-th point) stops exactly at the k-th listed
/// point, and with a crash index past the list the run completes. With batched commits the
/// points are the same set (appends reach the log at each sync), in another order. Then the
/// enumeration (crash, recover, finish, check exactly-once) covers that many points with 0
/// violations, unbuffered and batched.
#[test]
fn every_listed_crash_point_is_crashed_at() {
    let task = tid("listed");
    let expected = expected_crash_points(&DEMO_SCRIPT);
    assert_eq!(expected.len(), 140, "54 records x 2 + 16 tool calls x 2");
    let key = |p: &harness::CrashPoint| std::format!("{p:?}");
    let mut buf = [0u8; DEMO_LOG_BYTES];
    for batch in [false, true] {
        let mut seen = Vec::new();
        for k in 0..=expected.len() as u32 {
            let _ = RamLog::format(&mut buf);
            let mut world = SimWorld::<128>::new();
            let plan = CrashPlan::at(k);
            let mut reviews = 0;
            match harness::boot(&mut buf, &task, &DEMO_SCRIPT, &mut world, &plan, &mut reviews, batch) {
                Err(harness::BootError::Crashed(c)) => {
                    assert_eq!(c.index, k);
                    seen.push(c.point);
                }
                Ok((Stop::Completed, _)) => assert_eq!(k as usize, expected.len(), "batch={batch}: no crash at {k}"),
                other => panic!("batch={batch} k={k}: {other:?}"),
            }
        }
        if batch {
            let mut a: Vec<_> = seen.iter().map(key).collect();
            let mut b: Vec<_> = expected.iter().map(key).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b, "batched: the same points");
        } else {
            assert_eq!(seen, expected, "unbuffered: the same points in the same order");
        }
        let in_window = seen.iter().filter(|p| p.in_window()).count();
        assert_eq!(in_window, 32, "tool applied + result not yet appended, for each of the 16 calls");
        let mut world = SimWorld::<128>::new();
        let rep = harness::enumerate_crash_points(&mut buf, &task, &DEMO_SCRIPT, &mut world, false, batch);
        println!("batch={batch}: {} crash points covered, {} violations: {rep:?}", rep.points, rep.violations);
        assert_eq!(rep.points as usize, expected.len());
        assert_eq!(rep.runs as usize, expected.len());
        assert_eq!(rep.violations, 0, "{:?}", rep.first_violation);
    }
}

#[test]
fn every_pair_of_crash_points_of_a_small_task() {
    let script = &DEMO_SCRIPT[..6];
    let mut buf = [0u8; DEMO_LOG_BYTES];
    let mut world = SimWorld::<64>::new();
    for batch in [false, true] {
        let rep = harness::enumerate_crash_points(&mut buf, &tid("pairs"), script, &mut world, true, batch);
        assert_eq!(rep.violations, 0, "batch={batch} {:?}", rep.first_violation);
        assert!(rep.runs > rep.points * rep.points);
    }
}

/// The same with the records buffered until the runner syncs (as the SQLite binding commits):
/// still exactly once. (In time the window is wider: an idempotent result waits for the next
/// sync; in crash points it is the same two per call, since points sit at durable writes.)
#[test]
fn every_crash_point_with_batched_commits() {
    let mut buf = [0u8; DEMO_LOG_BYTES];
    let mut world = SimWorld::<128>::new();
    let rep = harness::enumerate_crash_points(&mut buf, &tid("batch"), &DEMO_SCRIPT, &mut world, false, true);
    println!("{rep:?}");
    assert_eq!(rep.violations, 0, "{:?}", rep.first_violation);
    assert_eq!(rep.points, (1 + 20 + 2 * 16 + 1) * 2 + 2 * 16);
    assert_eq!(rep.window, 32);
    assert_eq!(rep.reviews, 8, "non-idempotent results are synced at once");
}

/// The harness must be able to fail: a runner that re-calls a non-idempotent tool (ignoring the
/// rule) is caught as a duplicate.
#[test]
fn harness_catches_a_duplicate() {
    let task = tid("dup");
    let mut world = SimWorld::<8>::new();
    let t = ScriptTool { name: "send_email", class: ToolClass::NonIdempotent, args: "{}" };
    let script = [ScriptStep { text: "x", tool: Some(t) }];
    world.receive(&task, 0, ToolClass::NonIdempotent, None);
    world.receive(&task, 0, ToolClass::NonIdempotent, None);
    assert_eq!(harness::check_world(&task, &script, &world), Err(harness::Violation::Duplicate { step: 0 }));
    let empty = SimWorld::<8>::new();
    assert_eq!(harness::check_world(&task, &script, &empty), Err(harness::Violation::Missing { step: 0 }));
}

// ------------------------------------------------------------------------------------------
// Storage under torn writes

fn sample_records(task: &str, n: u32) -> Vec<Record> {
    let t = tid(task);
    (0..n)
        .map(|i| {
            let ev = match i % 3 {
                0 => Event::ModelResponse {
                    step: i as u16,
                    text: ModelText::try_from("hello ÿÿ world").unwrap(),
                    call: if i % 2 == 0 { Some(call(ToolClass::Idempotent)) } else { None },
                },
                1 => Event::ToolResult {
                    step: i as u16,
                    ok: true,
                    output: ResultText::try_from("\u{ff}\u{ff}").unwrap(),
                },
                _ => Event::Resumed,
            };
            Record::new(t.clone(), i, ev)
        })
        .collect()
}

fn read_all<S: LogStorage>(log: &mut S) -> Vec<Record> {
    let mut v = Vec::new();
    for_each_record(log, |r| v.push(r.clone())).unwrap();
    v
}

fn torn_at_every_byte<const W: usize, const E: usize>() -> usize {
    const SIZE: usize = 8192;
    let recs = sample_records("torn", 16);
    // total bytes written for the whole sequence
    let mut mem = std::vec![0u8; SIZE];
    let total = {
        let mut log = FlashLog::format(MockFlash::<W, E>::new(&mut mem), 0, SIZE as u32).unwrap();
        for r in &recs {
            append_record(&mut log, r).unwrap();
        }
        assert_eq!(read_all(&mut log), recs);
        log.into_inner().written
    };
    let mut cases = 0;
    for n in 0..=total {
        let mut mem = std::vec![0u8; SIZE];
        let mut durable = 0;
        {
            let mut flash = MockFlash::<W, E>::new(&mut mem);
            flash.erase(0, SIZE as u32).unwrap();
            flash.cut_after(n);
            let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
            for r in &recs {
                if append_record(&mut log, r).is_err() {
                    break;
                }
                durable += 1;
            }
            assert_eq!(log.into_inner().overwrites, 0);
        }
        // reboot: recovery reads only whole records, a prefix, losing at most the torn one
        let mut flash = MockFlash::<W, E>::new(&mut mem);
        flash.power_on();
        let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
        let got = read_all(&mut log);
        assert!(got.len() >= durable && got.len() <= durable + 1, "n={n}: {} vs {durable}", got.len());
        assert_eq!(got[..], recs[..got.len()], "n={n}: recovered records must be a prefix");
        // continue after recovery with *different* records (after a crash the runner may write
        // something else than the torn record); then all are there exactly once, in order
        let alt = sample_records("other-task", 4);
        for r in &alt {
            append_record(&mut log, r).unwrap();
        }
        let flash = log.into_inner();
        assert_eq!(flash.overwrites, 0, "n={n}: wrote over non-erased bytes");
        let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
        let mut want = got.clone();
        want.extend(alt);
        assert_eq!(read_all(&mut log), want, "n={n}");
        cases += 1;
    }
    cases
}

#[test]
fn flash_torn_write_at_every_byte_w1() {
    let n = torn_at_every_byte::<1, 256>();
    println!("{n} cut points");
    assert!(n > 400, "{n}");
}

#[test]
fn flash_torn_write_at_every_byte_w4() {
    let n = torn_at_every_byte::<4, 128>();
    println!("{n} cut points");
    assert!(n > 400, "{n}");
}

#[test]
fn flash_torn_write_at_every_byte_w8_small_pages() {
    // frames larger than a page: torn garbage spans page boundaries
    let n = torn_at_every_byte::<8, 64>();
    println!("{n} cut points");
    assert!(n > 400, "{n}");
}

/// The reusable, allocation-free sweep (the firmware demo and the chaos work call it).
#[test]
fn harness_power_cut_sweep_every_byte() {
    let recs = sample_records("sweep", 20);
    let make = |i: u32| recs[i as usize].clone();
    let mut mem = [0u8; 4096];
    let rep = harness::power_cut_sweep::<4, 128, _>(&mut mem, 14, make);
    println!("{rep:?}");
    assert_eq!(rep.violations, 0, "{:?}", rep.first_violation);
    assert_eq!(rep.cuts, rep.bytes + 1);
    assert!(rep.bytes > 350);
    let rep = harness::power_cut_sweep::<1, 64, _>(&mut mem, 14, |i| recs[i as usize].clone());
    assert_eq!(rep.violations, 0, "{:?}", rep.first_violation);
}

#[test]
fn flash_two_torn_writes_in_a_row() {
    const SIZE: usize = 8192;
    let recs = sample_records("torn2", 6);
    for n1 in (0..60).step_by(3) {
        for n2 in (0..90).step_by(7) {
            let mut mem = std::vec![0xFFu8; SIZE];
            let mut flash = MockFlash::<4, 128>::new(&mut mem);
            flash.cut_after(n1);
            let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
            for r in &recs {
                if append_record(&mut log, r).is_err() {
                    break;
                }
            }
            let mut flash = log.into_inner();
            flash.power_on();
            flash.cut_after(n2);
            let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
            let have = read_all(&mut log).len();
            for r in &recs[have..] {
                if append_record(&mut log, r).is_err() {
                    break;
                }
            }
            let mut flash = log.into_inner();
            flash.power_on();
            let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
            let got = read_all(&mut log);
            assert_eq!(got[..], recs[..got.len()]);
            for r in &recs[got.len()..] {
                append_record(&mut log, r).unwrap();
            }
            let flash = log.into_inner();
            assert_eq!(flash.overwrites, 0);
            let mut log = FlashLog::open(flash, 0, SIZE as u32).unwrap();
            assert_eq!(read_all(&mut log), recs, "n1={n1} n2={n2}");
        }
    }
}

#[test]
fn ram_torn_write_at_every_byte() {
    let recs = sample_records("ram", 8);
    let mut frame = [0u8; MAX_FRAME_LEN];
    for k in 0..recs.len() {
        let n = emit(&recs[k], &mut frame).unwrap();
        for cut in 0..n {
            let mut buf = [0u8; 4096];
            let mut log = RamLog::format(&mut buf);
            for r in &recs[..k] {
                append_record(&mut log, r).unwrap();
            }
            log.append_torn(&frame[..n], cut);
            let mut log = RamLog::open(log.into_inner());
            assert_eq!(read_all(&mut log), recs[..k]);
            for r in &recs[k..] {
                append_record(&mut log, r).unwrap();
            }
            let mut log = RamLog::open(log.into_inner());
            assert_eq!(read_all(&mut log), recs);
        }
    }
}

#[test]
fn flash_full_and_geometry_errors() {
    let mut mem = std::vec![0u8; 512];
    let flash = MockFlash::<4, 256>::new(&mut mem);
    assert!(matches!(FlashLog::format(flash, 4, 256), Err(StorageError::Config(_))));
    let mut mem = std::vec![0u8; 512];
    let flash = MockFlash::<4, 256>::new(&mut mem);
    let mut log = FlashLog::format(flash, 256, 256).unwrap();
    let recs = sample_records("full", 20);
    let mut ok = 0;
    for r in &recs {
        match append_record(&mut log, r) {
            Ok(()) => ok += 1,
            Err(StorageError::Full { .. }) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(ok > 0 && ok < recs.len());
    let flash = log.into_inner();
    let mut log = FlashLog::open(flash, 256, 256).unwrap();
    assert_eq!(read_all(&mut log), recs[..ok]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The frame decoder never panics, whatever the bytes.
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        let _ = parse(&bytes);
        let _ = frame::parse_header(&bytes);
    }

    /// Valid headers with random bodies: still no panic, and a CRC-valid garbage body is an error.
    #[test]
    fn parse_valid_header_random_body(body in proptest::collection::vec(any::<u8>(), 1..MAX_RECORD_BYTES)) {
        let mut f = std::vec![frame::MAGIC, FORMAT_VERSION];
        f.extend_from_slice(&(body.len() as u16).to_le_bytes());
        let crc = crc::Crc32c::new().update(&f).update(&body).finish();
        f.extend_from_slice(&crc.to_le_bytes());
        f.extend_from_slice(&body);
        // the header and the CRC are valid: the body is the only thing that can be wrong, and the
        // error says so; a body that decodes is exactly the canonical encoding of its record
        match parse(&f) {
            Ok((rec, n)) => {
                prop_assert_eq!(n, f.len());
                let mut again = [0u8; MAX_FRAME_LEN];
                let k = emit(&rec, &mut again).unwrap();
                prop_assert_eq!(&again[..k], &f[..], "decoded {:?}", rec);
            }
            Err(e) => prop_assert_eq!(e, frame::FrameError::BadRecord),
        }
    }

    /// A CRC-valid frame whose body is not a record (a record with a byte appended, or cut
    /// short) is `BadRecord`, whatever record it started from.
    #[test]
    fn crc_valid_garbage_body_is_bad_record(which in 0usize..12, extra in any::<u8>(), cut in 1usize..4) {
        let rec = &sample_records("garbage", 12)[which];
        let mut fb = [0u8; MAX_FRAME_LEN];
        let n = emit(rec, &mut fb).unwrap();
        let body = &fb[frame::HEADER_LEN..n];
        let mut appended = body.to_vec();
        appended.push(extra);
        let short = &body[..body.len().saturating_sub(cut).max(1)];
        for bad in [&appended[..], short] {
            if bad == body {
                continue;
            }
            let mut f = std::vec![frame::MAGIC, FORMAT_VERSION];
            f.extend_from_slice(&(bad.len() as u16).to_le_bytes());
            let crc = crc::Crc32c::new().update(&f).update(bad).finish();
            f.extend_from_slice(&crc.to_le_bytes());
            f.extend_from_slice(bad);
            prop_assert_eq!(parse(&f), Err(frame::FrameError::BadRecord), "body {:?}", bad);
        }
    }

    /// The fuzz target's property on structured input: a valid frame of a sample record with body
    /// bytes overwritten (and the CRC fixed up, so the decoder goes past the checksum) either is
    /// rejected or decodes to a record that re-encodes to exactly the bytes it was read from.
    #[test]
    fn mutated_bodies_decode_canonically_or_not_at_all(
        which in 0usize..12,
        edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..4),
        grow in 0usize..3,
    ) {
        let rec = &sample_records("mut", 12)[which];
        let mut fb = [0u8; MAX_FRAME_LEN];
        let n = emit(rec, &mut fb).unwrap();
        let mut f = fb[..n].to_vec();
        f.extend(std::iter::repeat_n(0u8, grow));
        let body_len = f.len() - frame::HEADER_LEN;
        for (at, b) in edits {
            let i = frame::HEADER_LEN + at as usize % body_len;
            f[i] = b;
        }
        f[2..4].copy_from_slice(&(body_len as u16).to_le_bytes());
        let crc = crc::Crc32c::new().update(&f[..4]).update(&f[frame::HEADER_LEN..]).finish();
        f[4..8].copy_from_slice(&crc.to_le_bytes());
        if let Ok((r, m)) = parse(&f) {
            prop_assert_eq!(m, f.len());
            let mut again = [0u8; MAX_FRAME_LEN];
            let k = emit(&r, &mut again).unwrap();
            prop_assert_eq!(&again[..k], &f[..], "decoded {:?}", r);
        }
    }

    /// Random flash images: opening and reading never panics, and whatever is read folds or errs.
    #[test]
    fn random_flash_images_never_panic(mut mem in proptest::collection::vec(any::<u8>(), 1024..=1024), seed in any::<u8>()) {
        // half the images look like a used flash: noise, then an erased tail
        if seed % 2 == 0 {
            let from = 256 + (seed as usize) * 2;
            mem[from..].fill(0xFF);
        }
        // sprinkle valid frames into the noise so the walker goes deeper
        let recs = sample_records("img", 3);
        let mut off = (seed as usize) % 200;
        for r in &recs {
            let mut fb = [0u8; MAX_FRAME_LEN];
            let n = emit(r, &mut fb).unwrap();
            if off + n < mem.len() {
                mem[off..off + n].copy_from_slice(&fb[..n]);
            }
            off += n + (seed as usize % 7);
        }
        // every write size and page geometry the sweeps use
        walk_image::<1, 256>(&mut mem.clone())?;
        walk_image::<4, 128>(&mut mem.clone())?;
        walk_image::<8, 64>(&mut mem.clone())?;
        let mut ram = mem.clone();
        let mut r = RamLog::open(&mut ram);
        let _ = replay(&mut r, &tid("img"));
    }

    /// Random records roundtrip through a frame.
    #[test]
    fn records_roundtrip(
        step in any::<u16>(),
        seq in any::<u32>(),
        text in "[a-zé ]{0,80}",
        tool_result in any::<bool>(),
        ok in any::<bool>(),
    ) {
        // the variant and a tool result's `ok` flag are drawn apart: both flags of both variants
        let ev = if tool_result {
            let output: std::string::String = text.chars().take(40).collect();
            Event::ToolResult { step, ok, output: ResultText::try_from(output.as_str()).unwrap() }
        } else {
            Event::ModelResponse { step, text: ModelText::try_from(text.as_str()).unwrap(), call: ok.then(|| call(ToolClass::ReadOnly)) }
        };
        let rec = Record::new(tid("p"), seq, ev);
        let mut fb = [0u8; MAX_FRAME_LEN];
        let n = emit(&rec, &mut fb).unwrap();
        prop_assert_eq!(parse(&fb[..n]).unwrap(), (rec, n));
    }

    /// Random event sequences: folding never panics, a rejected record leaves the state unchanged,
    /// next_action never panics, and the fold is deterministic.
    #[test]
    fn random_event_sequences_fold_safely(evs in proptest::collection::vec(arb_event(), 0..40)) {
        let mut st = TaskState::new(tid("t"));
        let mut accepted = Vec::new();
        for ev in evs {
            let rec = Record::new(tid("t"), st.next_seq, ev);
            let before = st.clone();
            match st.apply(&rec) {
                Ok(()) => accepted.push(rec),
                Err(_) => prop_assert_eq!(&st, &before),
            }
            let _ = next_action(&st);
            let _ = st.can_suspend();
        }
        let mut again = TaskState::new(tid("t"));
        for r in &accepted {
            again.apply(r).unwrap();
        }
        prop_assert_eq!(again, st);
    }
}

/// Opens a random image as a flash log and walks it: no panic, every record read is whole (the
/// walk only moves forward, at most one record per 8 bytes), and whatever is read replays or errs.
fn walk_image<const W: usize, const E: usize>(mem: &mut [u8]) -> Result<(), TestCaseError> {
    let size = mem.len() as u32;
    let flash = MockFlash::<W, E>::new(mem);
    let mut log = FlashLog::open(flash, 0, size).unwrap();
    let mut cur = log.first();
    let mut n = 0;
    while let Ok(Some((rec, next))) = log.read_record(cur) {
        prop_assert!(next > cur);
        // a record is returned only if it re-encodes (it was a whole, CRC-valid frame)
        let mut fb = [0u8; MAX_FRAME_LEN];
        prop_assert!(emit(&rec, &mut fb).is_ok());
        cur = next;
        n += 1;
    }
    prop_assert!(n <= size as usize / 8);
    let _ = replay(&mut log, &tid("img"));
    Ok(())
}

fn arb_event() -> impl Strategy<Value = Event> {
    let class = prop_oneof![Just(ToolClass::ReadOnly), Just(ToolClass::Idempotent), Just(ToolClass::NonIdempotent)];
    let step = 0u16..4;
    prop_oneof![
        (any::<u32>(), 0u16..4).prop_map(|(d, s)| Event::Created { spec_digest: d, steps: s }),
        (1u64..5).prop_map(|e| Event::LeaseAcquired { owner: Owner::try_from("o").unwrap(), epoch: e }),
        (step.clone(), proptest::option::of(class.clone())).prop_map(|(s, c)| Event::ModelResponse {
            step: s,
            text: ModelText::new(),
            call: c.map(call),
        }),
        (step.clone(), class, any::<bool>()).prop_map(|(s, c, k)| Event::ToolIntent {
            step: s,
            tool: ToolName::try_from("x").unwrap(),
            class: c,
            key: if k { Some(idempotency_key("t", s)) } else { None },
            args: Args::from_slice(b"{}").unwrap(),
        }),
        step.clone().prop_map(|s| Event::ToolResult { step: s, ok: true, output: ResultText::new() }),
        step.clone().prop_map(|s| Event::NeedsReview { step: s }),
        (step.clone(), any::<bool>()).prop_map(|(s, d)| Event::ReviewDecision {
            step: s,
            decision: if d { Decision::MarkDone } else { Decision::Retry },
        }),
        step.prop_map(|s| Event::Suspended { next_step: s }),
        Just(Event::Resumed),
        Just(Event::Completed),
        Just(Event::ForkedFrom { task: tid("p"), seq: 3 }),
    ]
}

/// The fork rule, by hand: which events a fork copies, and what a fork cut inside each kind of
/// call does first (the copied intent keeps the parent's key).
#[test]
fn fork_rule_copies_intents_and_starts_from_them() {
    let call = |class| ToolCall { tool: ToolName::try_from("t").unwrap(), class, args: Args::new() };
    assert!(copied_by_fork(&Event::ToolIntent {
        step: 0,
        tool: ToolName::try_from("t").unwrap(),
        class: ToolClass::ReadOnly,
        key: None,
        args: Args::new()
    }));
    assert!(copied_by_fork(&Event::NeedsReview { step: 0 }));
    assert!(!copied_by_fork(&Event::LeaseAcquired { owner: Owner::new(), epoch: 1 }));
    assert!(!copied_by_fork(&Event::Completed));
    assert!(!copied_by_fork(&Event::Suspended { next_step: 0 }));
    for (class, expect) in [
        (ToolClass::ReadOnly, ForkStart::ReRun { step: 0 }),
        (ToolClass::Idempotent, ForkStart::ReCallWithParentKey { step: 0 }),
        (ToolClass::NonIdempotent, ForkStart::Review { step: 0 }),
    ] {
        let fork = tid("fork");
        let mut st = TaskState::new(fork.clone());
        let parent_key = key_for("parent", 0, class);
        let events = [
            Event::Created { spec_digest: 1, steps: 1 },
            Event::ForkedFrom { task: tid("parent"), seq: 3 },
            Event::ModelResponse { step: 0, text: ModelText::new(), call: Some(call(class)) },
        ];
        for (i, e) in events.into_iter().enumerate() {
            st.apply(&Record::new(fork.clone(), i as u32, e)).unwrap();
        }
        assert_eq!(fork_start(&st), ForkStart::Clean, "cut before the intent: the fork's own call");
        let intent =
            Event::ToolIntent { step: 0, tool: call(class).tool, class, key: parent_key.clone(), args: Args::new() };
        st.apply(&Record::new(fork.clone(), 3, intent)).unwrap();
        assert_eq!(fork_start(&st), expect);
        match next_action(&st) {
            Action::CallTool { key, intent_recorded: true, .. } => {
                assert_eq!(key, parent_key, "re-called with the parent's key");
                if class == ToolClass::Idempotent {
                    assert_ne!(key, key_for("fork", 0, class), "not the fork's own key");
                }
            }
            Action::MarkNeedsReview { step: 0 } => assert_eq!(class, ToolClass::NonIdempotent),
            other => panic!("{other:?}"),
        }
    }
}

/// The core's error types are `core::error::Error`s (a host can box them, `?` them, chain them).
#[test]
fn errors_implement_core_error() {
    fn is_error<E: core::error::Error>() {}
    is_error::<RunnerError>();
    is_error::<FrameError>();
    is_error::<StorageError<RamError>>();
    is_error::<DriveError<RamError, ()>>();
    is_error::<CommitError<RamError>>();
    is_error::<brokerlab_core::fleet::Error>();
}
