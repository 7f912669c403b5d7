//! The runner's journal (checkpoints fenced by the lease) and effects (the scripted model and
//! the world's tools, with the lease checked before each call) on the host.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The journal: buffers records and commits them in one transaction at each `sync`
/// (the core's drive syncs before every side effect), fenced by the lease.
pub struct HostJournal<'a> {
    store: &'a dyn TaskStore,
    lease: Lease,
    pending: Vec<Record>,
    chaos: &'a Chaos,
    /// When the lease was last renewed (ms; taken before the transaction, so the lease lasts at
    /// least `ttl` from it).
    pub(super) renewed_at_ms: Rc<Cell<i64>>,
    /// Transactions committed.
    pub commits: u64,
}

impl<'a> HostJournal<'a> {
    /// A journal appending to `store` under `lease`.
    pub fn new(store: &'a dyn TaskStore, lease: Lease, chaos: &'a Chaos) -> Self {
        let renewed_at_ms = Rc::new(Cell::new(lease.taken_at_ms));
        HostJournal { store, lease, pending: Vec::new(), chaos, renewed_at_ms, commits: 0 }
    }
}

impl Journal for HostJournal<'_> {
    type Error = AppendError<TaskError>;
    fn append(&mut self, rec: &Record) -> Result<(), AppendError<TaskError>> {
        self.pending.push(rec.clone());
        Ok(())
    }
    fn sync(&mut self) -> Result<(), AppendError<TaskError>> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let what = self.pending.last().map(|r| format!("seq {} {}", r.seq, r.kind().name())).unwrap_or_default();
        self.chaos.point(Point::BeforeCommit, &what);
        checkpoint(self.store, &self.lease, &self.renewed_at_ms, &self.pending)?;
        self.pending.clear();
        self.commits += 1;
        self.chaos.point(Point::AfterCommit, &what);
        Ok(())
    }
}

/// One checkpoint of `recs` under `lease`: renews the lease when the core's `renewal_due` says so
/// on the holder's record of its last renewal (`renewed_at_ms`: taken before the transaction,
/// so the lease lasts at least its time to live from it), which is updated when it renewed.
pub fn checkpoint(
    store: &dyn TaskStore,
    lease: &Lease,
    renewed_at_ms: &Cell<i64>,
    recs: &[Record],
) -> Result<(), AppendError<TaskError>> {
    let t = now_ms();
    let due = renewal_due(renewed_at_ms.get().saturating_add(lease.ttl_ms), t, lease.ttl_ms);
    if store.checkpoint(lease, recs, due)? == Renewal::Renewed {
        renewed_at_ms.set(t);
    }
    Ok(())
}

/// The scripted model, the world's tools and the suspend flag.
pub struct HostEffects<'a> {
    pub(super) spec: &'a Spec,
    pub(super) world: &'a mut World,
    pub(super) store: &'a dyn TaskStore,
    pub(super) chaos: &'a Chaos,
    pub(super) delay: Duration,
    pub(super) lease: Lease,
    pub(super) margin_ms: i64,
    pub(super) renewed_at_ms: Rc<Cell<i64>>,
    /// Set when a tool or a renewal found that another runner holds the lease.
    pub(super) fenced: bool,
    /// Suspend once SIGTERM arrived (`task worker`).
    pub(super) suspend_on_term: bool,
}

impl HostEffects<'_> {
    /// The margin rule (docs/RUNNER.md): a call is sent only while at least `margin_ms` of the
    /// lease is left; otherwise the lease is renewed first, in a fenced transaction, and a runner
    /// that lost it stops here without calling.
    fn check_lease(&mut self, task: &TaskId, step: u16, tool: &str) -> TaskResult<()> {
        let expires = self.renewed_at_ms.get().saturating_add(self.lease.ttl_ms);
        if may_call(expires, now_ms(), self.margin_ms) {
            return Ok(());
        }
        let t = now_ms();
        match self.store.renew(&self.lease) {
            Ok(()) => {
                self.renewed_at_ms.set(t);
                Ok(())
            }
            Err(AppendError::Fenced { epoch, holder }) => {
                self.fenced = true;
                Err(TaskError::RenewFenced {
                    task: task.to_string(),
                    step,
                    tool: tool.to_string(),
                    margin_ms: self.margin_ms,
                    epoch,
                    holder: holder.map(|(o, e)| (o.to_string(), e)),
                })
            }
            Err(AppendError::Sql(e)) => Err(e),
        }
    }
}

impl Effects for HostEffects<'_> {
    type Error = TaskError;

    fn model(&mut self, _task: &TaskId, step: u16) -> TaskResult<ModelReply> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.spec.reply(step).ok_or_else(|| TaskError::failure(format!("the spec has no step {step}")))
    }

    fn tool(
        &mut self,
        task: &TaskId,
        step: u16,
        call: &ToolCall,
        key: Option<&Key>,
        fence: u64,
    ) -> TaskResult<ToolOutput> {
        let what = format!("step {step} {}", call.tool);
        self.chaos.point(Point::BeforeTool, &what);
        self.check_lease(task, step, &call.tool)?;
        self.chaos.point(Point::Calling, &what);
        let out = match self.world.call(task, step, call, key, fence)? {
            CallOutcome::Done(out) => out,
            CallOutcome::Fenced { place, highest } => {
                self.fenced = true;
                return Err(TaskError::ToolFenced {
                    task: task.to_string(),
                    step,
                    tool: call.tool.to_string(),
                    place: place.to_string(),
                    fence,
                    highest,
                });
            }
        };
        // the call has been applied; a slow tool's result "has not arrived" during this delay
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.chaos.point(Point::ToolApplied, &what);
        Ok(out)
    }

    fn suspend_requested(&mut self, task: &TaskId, _step: u16) -> TaskResult<bool> {
        // a worker told to stop (SIGTERM) suspends its task like `task suspend` would: after
        // the current atomic step, with the marker, so another worker resumes it
        if self.suspend_on_term && crate::sys::term_requested() {
            return Ok(true);
        }
        self.store.suspend_requested(task)
    }
}
