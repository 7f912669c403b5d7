//! Helpers shared by the core's integration tests: a fleet over Vec buffers.
#![allow(dead_code)]

use brokerlab_core::fleet::*;

pub struct Bufs {
    pub cfg: FleetConfig,
    slots: Vec<Slot>,
    tables: Vec<u32>,
    queues: Vec<u64>,
    index: Vec<IndexEntry>,
    pending: Vec<PendingRecord>,
    pending_table: Vec<PendingEntry>,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
}

impl Bufs {
    pub fn new(cfg: FleetConfig) -> Self {
        let l = FifoLayout::new(&cfg, 64, 4096).unwrap();
        Bufs {
            cfg,
            slots: vec![Slot::default(); l.pods * l.slots_per_pod],
            tables: vec![0; l.tables_len()],
            queues: vec![0; l.pods * l.queue_per_pod],
            index: vec![IndexEntry::default(); l.index],
            pending: vec![PendingRecord::default(); l.pending],
            pending_table: vec![PendingEntry::default(); l.pending_table],
            cpu_slots: vec![Slot::default(); l.pods * l.cpu_slots_per_pod],
            cpu_tables: vec![0; l.pods * l.cpu_table_per_pod],
        }
    }

    fn buffers(&mut self) -> FifoBuffers<'_> {
        FifoBuffers {
            slots: &mut self.slots,
            tables: &mut self.tables,
            queues: &mut self.queues,
            index: &mut self.index,
            pending: &mut self.pending,
            pending_table: &mut self.pending_table,
            cpu_slots: &mut self.cpu_slots,
            cpu_tables: &mut self.cpu_tables,
        }
    }

    /// A fleet over these buffers with a custom router.
    pub fn fleet_with<R: Router>(&mut self, router: R) -> Result<FifoFleet<'_, R>, Error> {
        FifoFleet::with_router(self.cfg, router, self.buffers())
    }

    /// A fleet over these buffers with the built-in router of `cfg` and its approximate index
    /// in `router`.
    pub fn fleet_router_buffers<'a>(&'a mut self, router: RouterBuffers<'a>) -> FifoFleet<'a> {
        FifoFleet::with_router_buffers(self.cfg, self.buffers(), router).unwrap()
    }

    pub fn fleet(&mut self) -> FifoFleet<'_> {
        FifoFleet::new(self.cfg, self.buffers()).unwrap()
    }
}

/// Keys for a prompt described by distinct "block ids": each id becomes one 16-token block.
pub fn keys_of(ids: &[u64]) -> Vec<u64> {
    let mut out = vec![0; ids.len()];
    keys::trace_keys(ids, ids.len() as u64 * 16, 16, &mut out).unwrap();
    out
}

/// A request at `ms` milliseconds with prompt blocks `ids` (+ `extra` tokens of a partial block).
pub fn req<'k>(ms: u64, keys: &'k [u64], extra: u64) -> Request<'k> {
    Request { arrival_ns: ms * 1_000_000, input_tokens: keys.len() as u64 * 16 + extra, output_tokens: 0, keys }
}

/// The FIFO engine's settings of `c` (a FIFO configuration).
pub fn fifo(c: &mut FleetConfig) -> &mut FifoConfig {
    c.fifo_mut().expect("a FIFO configuration")
}

/// The view of `c` (a FIFO configuration).
pub fn view(c: &mut FleetConfig) -> &mut ViewConfig {
    c.view_mut().expect("a FIFO configuration")
}

/// The autoscaling policy of `c` (a FIFO configuration).
pub fn scale(c: &mut FleetConfig) -> &mut Option<ScalePolicy> {
    c.scale_mut().expect("a FIFO configuration")
}

/// `c` changed by `f`.
pub fn with(mut c: FleetConfig, f: impl FnOnce(&mut FleetConfig)) -> FleetConfig {
    f(&mut c);
    c
}

/// Completions and ITL samples in order (the batched engine's events).
#[derive(Default)]
pub struct Sink {
    pub done: Vec<Completion>,
    pub itl: Vec<(u64, u64)>,
}

impl EngineEvents for Sink {
    fn completed(&mut self, c: &Completion) {
        self.done.push(*c);
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        self.itl.push((itl_ns, count));
    }
}

/// A batched fleet's buffers as its layout sizes them (no CPU tier, no P/D); the autoscaler's
/// buffer is the caller's, since the tests size it on purpose.
pub struct BatchedOwned {
    blocks: Vec<KvBlock>,
    tables: Vec<u32>,
    requests: Vec<ReqSlot>,
    waiting: Vec<u32>,
    running: Vec<u32>,
    keys: Vec<u64>,
    key_blocks: Vec<u32>,
}

impl BatchedOwned {
    pub fn new(l: &BatchedLayout) -> Self {
        BatchedOwned {
            blocks: vec![KvBlock::default(); l.blocks_len()],
            tables: vec![0; l.tables_len()],
            requests: vec![ReqSlot::default(); l.pods * l.requests_per_pod],
            waiting: vec![0; l.pods * l.requests_per_pod],
            running: vec![0; l.running_len()],
            keys: vec![0; l.pods * l.keys_per_pod],
            key_blocks: vec![0; l.key_blocks_len()],
        }
    }

    /// Without the block-per-key rings (the pods look their hit keys up and walk the own chains at release).
    pub fn without_key_blocks(mut self) -> Self {
        self.key_blocks = vec![];
        self
    }

    pub fn buffers<'a>(&'a mut self, scale: &'a mut [WvaPod]) -> BatchedBuffers<'a> {
        BatchedBuffers {
            blocks: &mut self.blocks,
            tables: &mut self.tables,
            requests: &mut self.requests,
            waiting: &mut self.waiting,
            running: &mut self.running,
            keys: &mut self.keys,
            key_blocks: &mut self.key_blocks,
            cpu_slots: &mut [],
            cpu_tables: &mut [],
            pd: Default::default(),
            scale,
        }
    }
}

/// A trace request: arrival gap (us), prompt ids, prompt length in tokens, output length.
#[derive(Clone, Debug)]
pub struct TraceReq {
    pub gap_us: u64,
    pub ids: Vec<u64>,
    pub tokens: u64,
    pub out: u64,
}

/// Up to `max_reqs - 1` requests sharing prefixes: a prefix of one of a few "documents", then
/// ids of its own, over ids of `group_blocks` blocks.
pub fn shared_prefix_trace(
    group_blocks: u32,
    max_reqs: usize,
) -> impl proptest::strategy::Strategy<Value = Vec<TraceReq>> {
    use proptest::prelude::*;
    let s = group_blocks as u64 * 16;
    let one = (0u64..4, 0usize..5, 0usize..3, 0u64..s, 0u64..3000, any::<u64>(), 0u64..70);
    proptest::collection::vec(one, 1..max_reqs).prop_map(move |v| {
        v.into_iter()
            .map(|(doc, shared, own, partial, gap_us, salt, out)| {
                let mut ids: Vec<u64> = (0..shared as u64).map(|j| doc * 100 + j).collect();
                ids.extend((0..own as u64).map(|j| 1_000_000 + (salt % 7) * 10 + j));
                ids.push(5_000 + salt % 3);
                let tokens = ((ids.len() as u64 - 1) * s + partial).max(1);
                TraceReq { gap_us, ids, tokens, out }
            })
            .collect()
    })
}

/// Every buffer of a batched fleet with a shipped router (engine, offload tier, router LRUs).
pub struct BatchedRouterOwned {
    engine: BatchedOwned,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
    slots: Vec<Slot>,
    tables: Vec<u32>,
    index: Vec<IndexEntry>,
}

impl BatchedRouterOwned {
    pub fn new(cfg: &FleetConfig) -> Self {
        let l = BatchedLayout::new(cfg, 256, 1 << 14).unwrap();
        let rl = cfg.router_layout().unwrap();
        BatchedRouterOwned {
            engine: BatchedOwned::new(&l),
            cpu_slots: vec![Slot::default(); l.cpu_slots_len()],
            cpu_tables: vec![0; l.cpu_tables_len()],
            slots: vec![Slot::default(); cfg.pods * rl.slots_per_pod],
            tables: vec![0; cfg.pods * rl.table_per_pod],
            index: vec![IndexEntry::default(); rl.index],
        }
    }

    /// Without the block-per-key rings ([`BatchedOwned::without_key_blocks`]).
    pub fn without_key_blocks(mut self) -> Self {
        self.engine = self.engine.without_key_blocks();
        self
    }

    pub fn fleet(&mut self, cfg: FleetConfig) -> BatchedFleet<'_> {
        let mut bufs = self.engine.buffers(&mut []);
        bufs.cpu_slots = &mut self.cpu_slots;
        bufs.cpu_tables = &mut self.cpu_tables;
        let router = RouterBuffers { slots: &mut self.slots, tables: &mut self.tables, index: &mut self.index };
        BatchedFleet::with_router_buffers(cfg, bufs, router).unwrap()
    }
}

/// Dispatches `reqs` (keys from ids of `group_blocks` blocks; requests too large for a pod are
/// skipped) and finishes; the routing of each dispatch.
pub fn feed_trace(f: &mut BatchedFleet<'_>, group_blocks: u32, reqs: &[TraceReq], sink: &mut Sink) -> Vec<Routed> {
    feed_trace_with(f, group_blocks, reqs, sink, |_, _| {})
}

/// [`feed_trace`], calling `after(fleet, keys)` after each dispatch with that request's keys.
pub fn feed_trace_with(
    f: &mut BatchedFleet<'_>,
    group_blocks: u32,
    reqs: &[TraceReq],
    sink: &mut Sink,
    mut after: impl FnMut(&BatchedFleet<'_>, &[u64]),
) -> Vec<Routed> {
    let mut routed = Vec::new();
    let mut at = 0u64;
    let cap_tokens = f.config().capacity_blocks as u64 * 16;
    for r in reqs {
        at += r.gap_us * 1000;
        if r.tokens + r.out.max(1) - 1 > cap_tokens {
            continue;
        }
        let mut k = vec![0; (r.tokens / 16) as usize];
        let n = keys::trace_keys(&r.ids, r.tokens, group_blocks * 16, &mut k).unwrap();
        let req = Request { arrival_ns: at, input_tokens: r.tokens, output_tokens: r.out, keys: &k[..n] };
        routed.push(f.dispatch(&req, sink).unwrap());
        after(f, &k[..n]);
    }
    f.finish(sink).unwrap();
    routed
}
