//! The SQLite binding through the library API: replay from SQLite equals the live state after
//! every checkpoint, and fencing refuses a stale epoch inside the append transaction.

use brokerlab::task::backend::{Access, AppendError, LeaseAsk, LeaseError, NewTask, fold_in};
use brokerlab::task::exec::{Chaos, HostJournal};
use brokerlab::task::ident::Me;
use brokerlab::task::spec::Spec;
use brokerlab::task::store::Store;
use brokerlab_core::runner::OpenCall;
use brokerlab_core::runner::{
    Effects, Event, Journal, Key, ModelReply, Record, ResultText, Stop, TaskId, TaskState, ToolCall, ToolOutput,
    drive_step,
};

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("brokerlab-task-replay-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SPEC: &str = r#"
[[step]]
model = "look"
tool = "lookup"
args = { q = 1 }
[[step]]
model = "pay"
tool = "payment"
args = { amount = 5 }
[[step]]
model = "think"
[[step]]
model = "mail"
tool = "send_email"
args = { to = "x" }
[[step]]
model = "pay again"
tool = "payment"
args = { amount = 6 }
"#;

struct Fx<'a>(&'a Spec, bool);

impl Effects for Fx<'_> {
    type Error = ();
    fn model(&mut self, _t: &TaskId, step: u16) -> Result<ModelReply, ()> {
        self.0.reply(step).ok_or(())
    }
    fn tool(&mut self, _t: &TaskId, _s: u16, _c: &ToolCall, _k: Option<&Key>, _f: u64) -> Result<ToolOutput, ()> {
        Ok(ToolOutput { ok: true, output: ResultText::try_from("ok").unwrap() })
    }
    fn suspend_requested(&mut self, _t: &TaskId, step: u16) -> Result<bool, ()> {
        Ok(self.1 && step == 2)
    }
}

fn create(store: &Store, id: &str, spec: &Spec) -> TaskState {
    let task = TaskId::try_from(id).unwrap();
    let created = Record::new(task, 0, Event::Created { spec_digest: spec.digest(), steps: spec.steps.len() as u16 });
    let new = NewTask {
        spec_json: spec.to_json(),
        digest: spec.digest(),
        parent: None,
        parent_seq: None,
        world: None,
        records: vec![created],
    };
    let st = fold_in(&store.path.display(), id, &new.records).unwrap();
    // create only; the caller takes the lease
    let (lease, rec) = store
        .acquire(&LeaseAsk {
            id,
            me: &Me::current(),
            ttl_ms: 60_000,
            state: &st,
            create: Some(&new),
            clear_suspend: true,
            open: OpenCall::None,
            witness: None,
        })
        .unwrap();
    store.release(&lease);
    let mut st = st;
    st.apply(&rec).unwrap();
    st
}

#[test]
fn replay_from_sqlite_equals_live_after_every_checkpoint() {
    let d = Dir::new("live");
    let store = Store::open(&d.0.join("log.sqlite"), Access::Create).unwrap();
    let spec = Spec::parse(SPEC).unwrap();
    let mut st = create(&store, "t", &spec);
    assert_eq!(store.replay("t").unwrap(), st);
    let (lease, rec) = store
        .acquire(&LeaseAsk {
            id: "t",
            me: &Me::current(),
            ttl_ms: 60_000,
            state: &st,
            create: None,
            clear_suspend: true,
            open: OpenCall::None,
            witness: None,
        })
        .unwrap();
    st.apply(&rec).unwrap();
    let chaos = Chaos::none();
    let mut j = HostJournal::new(&store, lease.clone(), &chaos);
    let mut suspend = true;
    let mut checkpoints = 0u32;
    loop {
        let stop = drive_step(&mut st, &mut j, &mut Fx(&spec, suspend)).unwrap();
        j.sync().unwrap();
        checkpoints += 1;
        assert_eq!(store.replay("t").unwrap(), st, "after checkpoint {checkpoints}");
        match stop {
            None => {}
            Some(Stop::Suspended) => {
                suspend = false;
                st = store.replay("t").unwrap();
            }
            Some(Stop::Completed) => break,
            other => panic!("{other:?}"),
        }
    }
    // every prefix of the stored log folds, and the full fold is the live state
    let recs = store.records("t").unwrap();
    for k in 0..=recs.len() {
        let p = fold_in(&store.path.display(), "t", &recs[..k]).unwrap();
        assert_eq!(p.next_seq as usize, k);
    }
    assert_eq!(fold_in(&store.path.display(), "t", &recs).unwrap(), st);
    assert_eq!(st.counters.suspends, 1);
}

#[test]
fn a_stale_epoch_is_refused_inside_the_append_transaction() {
    let d = Dir::new("fence");
    let store = Store::open(&d.0.join("log.sqlite"), Access::Create).unwrap();
    let spec = Spec::parse(SPEC).unwrap();
    let mut st = create(&store, "t", &spec);
    let me = Me::current();
    let (old, rec) = store
        .acquire(&LeaseAsk {
            id: "t",
            me: &me,
            ttl_ms: 60_000,
            state: &st,
            create: None,
            clear_suspend: true,
            open: OpenCall::None,
            witness: None,
        })
        .unwrap();
    st.apply(&rec).unwrap();
    // another owner cannot take a live lease...
    let other = Me { host: me.host.clone(), pid: me.pid, start: me.start + 1 };
    // (same pid, other start time: "our" holder looks dead to it only if we were gone; we are not)
    let other_store = Store::open(&d.0.join("log.sqlite"), Access::Write).unwrap();
    let live_other = Me { host: "elsewhere/0".into(), pid: 1, start: 1 };
    match other_store.acquire(&LeaseAsk {
        id: "t",
        me: &live_other,
        ttl_ms: 60_000,
        state: &st,
        create: None,
        clear_suspend: true,
        open: OpenCall::None,
        witness: None,
    }) {
        Err(LeaseError::Held { epoch, .. }) => assert_eq!(epoch, old.epoch),
        r => panic!("{r:?}"),
    }
    // ...until it expires: then it takes over with a higher epoch
    store.conn.execute("UPDATE leases SET expires_at_ms = 0", []).unwrap();
    let (new, rec2) = other_store
        .acquire(&LeaseAsk {
            id: "t",
            me: &other,
            ttl_ms: 60_000,
            state: &st,
            create: None,
            clear_suspend: true,
            open: OpenCall::None,
            witness: None,
        })
        .unwrap();
    assert_eq!(new.epoch, old.epoch + 1);
    let mut st2 = st.clone();
    st2.apply(&rec2).unwrap();
    // the old holder's append is refused and writes nothing
    let before = store.records("t").unwrap().len();
    let r = Record::new(st.task_id.clone(), st.next_seq, Event::Suspended { next_step: 0 });
    match store.append(&old, &[r]) {
        Err(AppendError::Fenced { epoch, holder }) => {
            assert_eq!(epoch, old.epoch);
            assert_eq!(holder.map(|h| h.1), Some(new.epoch));
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(store.records("t").unwrap().len(), before);
    // the new holder appends
    let r = Record::new(st2.task_id.clone(), st2.next_seq, Event::Suspended { next_step: 0 });
    store.append(&new, &[r]).unwrap();
    assert_eq!(store.replay("t").unwrap().counters.suspends, 1);
}
