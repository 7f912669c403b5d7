//! The two engines as the host runs them ([`HostEngine`]): their heap buffers (the core borrows
//! them), the sizes a run may fill and how they start, and what the memory budget counts.

use brokerlab_core::fleet::{
    BatchedBuffers, BatchedEngine, BatchedFleet, BatchedLayout, Error as CoreError, FifoBuffers, FifoEngine, FifoFleet,
    FifoLayout, FleetConfig, FusedSlot, HeadIndex, IndexEntry, KEY_LOG_PER_POD, KvBlock, Limit, Outcome, PendingEntry,
    PendingRecord, ReqSlot, Routed, RouterBuffers, Run, Slot, WvaPod,
};

use brokerlab_core::fleet::sim::pd::{Delivery, Join, PdBuffers, Transfer};

use super::collect::{Kind, Samples};
use super::drive::{HostEngine, Shape};
use super::summary::{BatchedSummary, Summary, summarize_batched, summarize_fifo};
use super::{config_error, run_context};
use crate::error::CliResult;
use crate::mem::{Need, try_vec, try_vec_zeroed};

/// `T { a: &mut owner.a, b: &mut owner.b, .. }`: an engine's core buffer struct over the owned
/// vectors of the same names (each engine names its buffers once, here and in its struct).
macro_rules! borrow_buffers {
    ($owner:expr => $T:ident { $($f:ident),* $(,)? } $(+ { $($g:ident : $e:expr),* $(,)? })?) => {
        $T { $($f: &mut $owner.$f,)* $($($g: $e),*)? }
    };
}

/// The FIFO engine on the host.
pub struct Fifo;

/// The batched engine on the host.
pub struct Batched;

/// Queued requests tracked per pod at the start of a FIFO run (doubled when full).
pub const INITIAL_QUEUE_PER_POD: usize = 4096;
/// Pending-event records per request of stale delay at the start (the evictions of k + 1
/// dispatches, about 256 each), at most [`MAX_INITIAL_PENDING`] (doubled when full).
pub const PENDING_PER_DELAYED_REQUEST: usize = 256;
/// Most pending-event records a FIFO run starts with.
pub const MAX_INITIAL_PENDING: usize = 1 << 20;
/// Fewest pending-event records after the first growth.
pub const MIN_GROWN_PENDING: usize = 1024;
/// Requests tracked per pod at the start of a batched run (doubled when full).
pub const INITIAL_REQUESTS_PER_POD: usize = 1024;
/// Prompt keys per pod at the start of a batched run (doubled when full: start small so a small
/// `--max-memory` still fits).
pub const INITIAL_KEYS_PER_POD: usize = 1 << 16;

/// A FIFO run's growable sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoSizes {
    /// Queued requests tracked per pod.
    pub queue_per_pod: usize,
    /// Pending-event records per queue of a stale view.
    pub pending: usize,
}

impl FifoSizes {
    /// The sizes a run of `cfg` starts with.
    pub fn of(cfg: &FleetConfig) -> Self {
        let stale = cfg.view().stale_delay as usize;
        let pending = if stale > 0 { ((stale + 1) * PENDING_PER_DELAYED_REQUEST).min(MAX_INITIAL_PENDING) } else { 0 };
        FifoSizes { queue_per_pod: INITIAL_QUEUE_PER_POD, pending }
    }
}

/// A batched run's growable sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchedSizes {
    /// Requests tracked at once per pod.
    pub requests_per_pod: usize,
    /// Prompt keys kept per pod.
    pub keys_per_pod: usize,
}

/// Heap buffers of a shipped router's approximate index (empty for the other routers).
pub struct OwnedRouter {
    slots: Vec<Slot>,
    tables: Vec<u32>,
    index: Vec<IndexEntry>,
}

impl OwnedRouter {
    /// Allocates what `cfg`'s router needs ([`FleetConfig::router_layout`]).
    pub fn new(cfg: &FleetConfig) -> CliResult<Self> {
        let l = cfg.router_layout().map_err(config_error)?;
        let n = |per_pod: usize| cfg.pods.saturating_mul(per_pod);
        Ok(OwnedRouter {
            slots: try_vec(n(l.slots_per_pod), Slot::default(), "the router's approximate-index LRUs")?,
            tables: try_vec(n(l.table_per_pod), 0, "the router's approximate-index key tables")?,
            index: try_vec(l.index, IndexEntry::default(), "the router's approximate index")?,
        })
    }

    /// The core's view of them.
    pub fn buffers(&mut self) -> RouterBuffers<'_> {
        RouterBuffers { slots: &mut self.slots, tables: &mut self.tables, index: &mut self.index }
    }
}

/// Heap buffers for one FIFO fleet.
pub struct OwnedFifo {
    cfg: FleetConfig,
    layout: FifoLayout,
    slots: Vec<Slot>,
    tables: Vec<u32>,
    queues: Vec<u64>,
    index: Vec<IndexEntry>,
    pending: Vec<PendingRecord>,
    pending_table: Vec<PendingEntry>,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
    router: OwnedRouter,
    /// Blocks per trace id of the run-length replay (1: per block, and the run buffers are empty).
    group_blocks: u32,
    runs: Vec<Run>,
    run_tables: Vec<u32>,
    /// The fused pod + router tables of a per-block replay that can keep them
    /// ([`FifoFleet::attach_fused`]; empty otherwise).
    fused_slots: Vec<FusedSlot>,
    fused_tables: Vec<u32>,
}

impl OwnedFifo {
    /// Allocates the buffers [`FifoLayout`] asks for (an allocation failure is an error naming
    /// the buffer, never an abort). The caller checks the memory budget first. With requests
    /// keyed from trace ids of `group_blocks` > 1 blocks and a configuration that supports it,
    /// the fleet replays per run of blocks ([`FifoFleet::attach_runs`]: the same results, less
    /// work).
    pub fn new(cfg: FleetConfig, sizes: FifoSizes, group_blocks: u32) -> CliResult<Self> {
        Self::with_fused(cfg, sizes, group_blocks, true)
    }

    /// [`Self::new`]; with `fused` false a per-block replay keeps the pods' caches and the
    /// router's index apart even where it could fuse them (the same results: for measuring).
    pub fn with_fused(cfg: FleetConfig, sizes: FifoSizes, group_blocks: u32, fused: bool) -> CliResult<Self> {
        let l = FifoLayout::new(&cfg, sizes.queue_per_pod, sizes.pending).map_err(config_error)?;
        let n = |per_pod: usize| l.pods.saturating_mul(per_pod);
        let (runs_len, run_tables_len) = runs_layout(&cfg, group_blocks).unwrap_or((0, 0));
        let (fused_len, fused_tables_len) =
            if runs_len == 0 && fused { fused_layout(&cfg).unwrap_or((0, 0)) } else { (0, 0) };
        Ok(OwnedFifo {
            cfg,
            layout: l,
            slots: try_vec(n(l.slots_per_pod), Slot::default(), "the pods' LRU slots")?,
            tables: try_vec(l.tables_len(), 0, "the pods' key tables")?,
            queues: try_vec(n(l.queue_per_pod), 0, "the pods' queues")?,
            index: try_vec(l.index, IndexEntry::default(), "the block index")?,
            pending: try_vec(l.pending, PendingRecord::default(), "the stale-evict FIFO")?,
            pending_table: try_vec(l.pending_table, PendingEntry::default(), "the stale-evict table")?,
            cpu_slots: try_vec(n(l.cpu_slots_per_pod), Slot::default(), "the CPU tier's slots")?,
            cpu_tables: try_vec(n(l.cpu_table_per_pod), 0, "the CPU tier's key tables")?,
            router: OwnedRouter::new(&cfg)?,
            // Last: a failed allocation names the per-block buffers first, as without runs.
            group_blocks,
            // zeroed, not written here (`RunLru` writes a run before reading it and clears its
            // table when set up)
            runs: try_vec_zeroed(runs_len, "the pods' runs (run-length replay)")?,
            run_tables: try_vec_zeroed(run_tables_len, "the pods' run tables (run-length replay)")?,
            fused_slots: try_vec(fused_len, FusedSlot::default(), "the fused pod and router tables' slots")?,
            fused_tables: try_vec(fused_tables_len, 0, "the fused pod and router key tables")?,
        })
    }

    /// The buffer layout.
    pub fn layout(&self) -> &FifoLayout {
        &self.layout
    }

    /// A fresh fleet over these buffers (replaying per run when they were allocated for it).
    pub fn fleet(&mut self) -> Result<FifoFleet<'_>, CoreError> {
        let buffers = borrow_buffers!(self => FifoBuffers {
            slots, tables, queues, index, pending, pending_table, cpu_slots, cpu_tables
        });
        let mut fleet = FifoFleet::with_router_buffers(self.cfg, buffers, self.router.buffers())?;
        if !self.runs.is_empty() {
            fleet.attach_runs(self.group_blocks, &mut self.runs, &mut self.run_tables)?;
        } else if !self.fused_slots.is_empty() {
            fleet.attach_fused(&mut self.fused_slots, &mut self.fused_tables)?;
        }
        Ok(fleet)
    }
}

/// Run buffer lengths when `cfg` replays per run with ids of `group_blocks` blocks (None: per
/// block; one block per id gains nothing).
pub fn runs_layout(cfg: &FleetConfig, group_blocks: u32) -> Option<(usize, usize)> {
    if group_blocks <= 1 {
        return None;
    }
    FifoFleet::runs_layout(cfg)
}

/// Fused-table buffer lengths (slots, tables) when `cfg`'s per-block replay keeps the pods'
/// caches with the router's index ([`FifoFleet::fused_layout`]).
pub fn fused_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
    FifoFleet::fused_layout(cfg)
}

/// Run buffer lengths of a batched fleet's router-side approximate index kept as runs of ids of
/// `group_blocks` blocks ([`BatchedFleet::index_runs_layout`]; None: per block, as with one
/// block per id or a router without such an index).
pub fn index_runs_layout(cfg: &FleetConfig, group_blocks: u32) -> Option<(usize, usize)> {
    if group_blocks <= 1 {
        return None;
    }
    BatchedFleet::index_runs_layout(cfg)
}

/// What a FIFO run of `cfg` with these sizes needs (the audit's formulas), with its router's
/// index, the run-length replay's buffers, and the per-request vectors when the requests are
/// known. Returns the needs and what the budget's message calls the run.
pub fn fifo_needs(cfg: &FleetConfig, sizes: FifoSizes, run: &Shape<'_>) -> CliResult<(String, Vec<Need>)> {
    let l = FifoLayout::new(cfg, sizes.queue_per_pod, sizes.pending).map_err(config_error)?;
    let mut needs = crate::fleet::run::sizes::fleet_needs(cfg, &l);
    let router_bytes = cfg.router_layout().map_err(config_error)?.bytes(cfg.pods) as u64;
    if router_bytes > 0 {
        needs.push(Need {
            what: "the router's approximate index".into(),
            bytes: router_bytes,
            lowered_by: "--capacity, or [params] approx_lru_blocks in --router-config".into(),
        });
    }
    if let Some((runs, tables)) = runs_layout(cfg, run.group_blocks) {
        needs.push(Need {
            what: "run-length replay (runs and run tables)".into(),
            bytes: (runs * std::mem::size_of::<Run>() + tables * 4) as u64,
            lowered_by: "--capacity".into(),
        });
    }
    if runs_layout(cfg, run.group_blocks).is_none()
        && let Some((slots, tables)) = fused_layout(cfg)
    {
        needs.push(Need {
            what: "the fused pod and router tables (per-block replay)".into(),
            bytes: (slots * std::mem::size_of::<FusedSlot>() + tables * 4) as u64,
            lowered_by: "--capacity".into(),
        });
    }
    if let Some(n) = run.requests {
        let per = 8 + if run.keep { std::mem::size_of::<Outcome>() as u64 } else { 0 };
        needs.push(Need {
            what: "latencies (exact percentiles)".into(),
            bytes: n.saturating_mul(per),
            lowered_by: "workload.requests".into(),
        });
    }
    needs.extend_from_slice(run.held);
    Ok((run_context(cfg), needs))
}

impl HostEngine for Fifo {
    type Engine<'a> = FifoEngine<'a>;
    type Summary = Summary;
    type Sizes = FifoSizes;
    type Owned = OwnedFifo;
    const KIND: Kind = Kind::Latency;

    fn sizes(cfg: &FleetConfig) -> FifoSizes {
        FifoSizes::of(cfg)
    }

    fn grown(s: FifoSizes, limit: Limit) -> Option<FifoSizes> {
        match limit {
            Limit::QueuePerPod => Some(FifoSizes { queue_per_pod: s.queue_per_pod * 2, ..s }),
            Limit::PendingEvictions => Some(FifoSizes { pending: (s.pending * 2).max(MIN_GROWN_PENDING), ..s }),
            _ => None,
        }
    }

    fn needs(cfg: &FleetConfig, sizes: FifoSizes, run: &Shape<'_>) -> CliResult<(String, Vec<Need>)> {
        fifo_needs(cfg, sizes, run)
    }

    fn alloc(cfg: &FleetConfig, sizes: FifoSizes, group_blocks: u32) -> CliResult<OwnedFifo> {
        OwnedFifo::new(*cfg, sizes, group_blocks)
    }

    fn fleet(owned: &mut OwnedFifo) -> Result<FifoFleet<'_>, CoreError> {
        owned.fleet()
    }

    fn outcome(out: &Outcome) -> Option<Outcome> {
        Some(*out)
    }

    fn summarize(fleet: &FifoFleet<'_>, samples: &mut Samples) -> Summary {
        let mut s = summarize_fifo(fleet, std::mem::take(&mut samples.e2e));
        let t = fleet.totals();
        s.slo = samples.slo.map(|(slo, good)| super::deploy::SloKeys::of(&slo, good, t.requests, t.makespan_ns));
        s
    }
}

/// Heap buffers for one batched fleet.
pub struct OwnedBatched {
    cfg: FleetConfig,
    blocks: Vec<KvBlock>,
    tables: Vec<u32>,
    requests: Vec<ReqSlot>,
    waiting: Vec<u32>,
    running: Vec<u32>,
    keys: Vec<u64>,
    /// The requests' blocks at their prompt keys' positions, parallel to `keys` (empty: not kept; [`key_blocks_len`]).
    key_blocks: Vec<u32>,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
    pd_transfers: Vec<Transfer>,
    pd_joins: Vec<Join>,
    pd_deliveries: Vec<Delivery>,
    scale: Vec<WvaPod>,
    router: OwnedRouter,
    /// Blocks per trace id when the router's approximate index is kept as runs (the run
    /// buffers below are then non-empty; [`BatchedFleet::attach_index_runs`]).
    group_blocks: u32,
    index_runs: Vec<Run>,
    index_run_tables: Vec<u32>,
    /// The pods' cache maps kept per trace id (empty: per block;
    /// [`BatchedFleet::attach_pool_groups`]).
    pool_words: Vec<u32>,
    pool_keys: Vec<u64>,
    /// The first-key index (empty: the pods' maps answer; [`BatchedFleet::attach_heads`]).
    head_keys: Vec<u64>,
    head_stamps: Vec<u64>,
    head_bits: Vec<u64>,
    key_logs: Vec<u64>,
}

/// Slots of the first-key index: first prompt keys whose holders the fleet keeps (the scale
/// bench's 4,096 tenants' prefixes fit with room; more distinct first keys in use at once only
/// make some decisions ask every pod, as without the index).
pub const HEAD_SLOTS: usize = 16_384;

/// Whether a batched run of `cfg` keeps the first-key index (docs/MODEL.md, "The first-key
/// index"): above 64 pods, where asking every pod's map for a request's first key costs more
/// than keeping the index, when the router reads the exact view from per-block maps.
pub fn keeps_heads(cfg: &FleetConfig, group_blocks: u32) -> bool {
    cfg.pods > 64 && brokerlab_core::fleet::head_index_possible(cfg, group_blocks)
}

/// Lengths of the first-key index's buffers for `cfg` (slots, pod-bit words, log entries).
fn heads_layout(cfg: &FleetConfig, group_blocks: u32) -> (usize, usize, usize) {
    if !keeps_heads(cfg, group_blocks) {
        return (0, 0, 0);
    }
    let words = HeadIndex::words(cfg.pods);
    (HEAD_SLOTS, HEAD_SLOTS * words, cfg.pods * KEY_LOG_PER_POD)
}

/// Entries of the pods' block-per-key rings ([`BatchedBuffers::key_blocks`]): one per prompt
/// key kept where the pods' releases read them (the run pool on a per-block map), else none.
fn key_blocks_len(cfg: &FleetConfig, l: &BatchedLayout, group_blocks: u32) -> usize {
    let runs = cfg.batched_config().is_some_and(|e| e.block_runs());
    if runs && BatchedFleet::pool_groups_layout(cfg, group_blocks).is_none() { l.key_blocks_len() } else { 0 }
}

/// What a batched run of `l` is called in a memory-budget message.
fn batched_context(l: &BatchedLayout) -> String {
    format!("a batched run of {} pods x {} blocks", l.pods, l.blocks_per_pod)
}

impl HostEngine for Batched {
    type Engine<'a> = BatchedEngine<'a>;
    type Summary = BatchedSummary;
    type Sizes = BatchedSizes;
    type Owned = OwnedBatched;
    const KIND: Kind = Kind::Tokens;

    fn sizes(_cfg: &FleetConfig) -> BatchedSizes {
        BatchedSizes { requests_per_pod: INITIAL_REQUESTS_PER_POD, keys_per_pod: INITIAL_KEYS_PER_POD }
    }

    fn grown(s: BatchedSizes, limit: Limit) -> Option<BatchedSizes> {
        match limit {
            Limit::RequestsPerPod => Some(BatchedSizes { requests_per_pod: s.requests_per_pod * 2, ..s }),
            Limit::KeysPerPod => Some(BatchedSizes { keys_per_pod: s.keys_per_pod * 2, ..s }),
            // the P/D buffers are sized from the request slots
            Limit::PdTransfers => Some(BatchedSizes { requests_per_pod: s.requests_per_pod * 2, ..s }),
            _ => None,
        }
    }

    /// The engines' buffers (the caller's held structures beside them); the per-request samples
    /// grow within the budget as they come.
    fn needs(cfg: &FleetConfig, s: BatchedSizes, run: &Shape<'_>) -> CliResult<(String, Vec<Need>)> {
        let l = BatchedLayout::new(cfg, s.requests_per_pod, s.keys_per_pod).map_err(config_error)?;
        let bytes = |n: usize, per: usize| (n as u64).saturating_mul(l.pods as u64).saturating_mul(per as u64);
        let pods = "--capacity or --pods (fleet.capacity, fleet.pods)";
        let need = |what: &str, bytes: u64, by: &str| Need { what: what.into(), bytes, lowered_by: by.into() };
        let mut needs = vec![
            need("pod KV blocks", l.blocks_len() as u64 * std::mem::size_of::<KvBlock>() as u64, pods),
            need("pod KV key tables", l.tables_len() as u64 * 4, pods),
            need(
                "request slots and queues",
                bytes(l.requests_per_pod, std::mem::size_of::<ReqSlot>() + 4),
                "fewer requests in flight per pod",
            ),
            need("running sets", l.running_len() as u64 * 4, "--max-num-seqs"),
            need("prompt keys in flight", bytes(l.keys_per_pod, 8), "shorter prompts or fewer in flight"),
        ];
        let key_blocks = key_blocks_len(cfg, &l, run.group_blocks);
        if key_blocks > 0 {
            needs.push(need(
                "blocks of the prompt keys in flight",
                key_blocks as u64 * 4,
                "shorter prompts or fewer in flight",
            ));
        }
        if l.prefill_pods > 0 {
            let per = std::mem::size_of::<Join>() + std::mem::size_of::<Delivery>();
            let bytes = (l.pd_transfers_len() * std::mem::size_of::<Transfer>() + l.pd_in_flight * per) as u64;
            needs.push(need("KV transfers in flight", bytes, "fewer requests in flight"));
        }
        if l.cpu_slots_len() > 0 {
            let b = (l.cpu_slots_len() * std::mem::size_of::<Slot>() + l.cpu_tables_len() * 4) as u64;
            needs.push(need("offload tiers", b, "--cpu-capacity"));
        }
        if l.scale_len() > 0 {
            let b = (l.scale_len() * std::mem::size_of::<WvaPod>()) as u64;
            needs.push(need("autoscaler state", b, "--pods"));
        }
        if let Some((runs, tables)) = index_runs_layout(cfg, run.group_blocks) {
            let b = (runs * std::mem::size_of::<Run>() + tables * 4) as u64;
            needs.push(need(
                "the router's approximate index as runs",
                b,
                "--capacity, or [params] approx_lru_blocks in --router-config",
            ));
        }
        if let Some((words, keys)) = BatchedFleet::pool_groups_layout(cfg, run.group_blocks) {
            needs.push(need("the pods' cache maps per trace id", (words * 4 + keys * 8) as u64, pods));
        }
        let (slots, words, logs) = heads_layout(cfg, run.group_blocks);
        if slots > 0 {
            needs.push(need("the first-key index and key logs", ((2 * slots + words + logs) * 8) as u64, pods));
        }
        needs.extend_from_slice(run.held);
        Ok((batched_context(&l), needs))
    }

    fn alloc(cfg: &FleetConfig, s: BatchedSizes, group_blocks: u32) -> CliResult<OwnedBatched> {
        let l = BatchedLayout::new(cfg, s.requests_per_pod, s.keys_per_pod).map_err(config_error)?;
        let (runs_len, run_tables_len) = index_runs_layout(cfg, group_blocks).unwrap_or((0, 0));
        let (pool_words, pool_keys) = BatchedFleet::pool_groups_layout(cfg, group_blocks).unwrap_or((0, 0));
        let (head_slots, head_words, key_logs) = heads_layout(cfg, group_blocks);
        Ok(OwnedBatched {
            cfg: *cfg,
            blocks: try_vec(l.blocks_len(), KvBlock::default(), "the pods' KV blocks")?,
            tables: try_vec(l.tables_len(), 0u32, "the pods' KV key tables")?,
            requests: try_vec(l.pods * l.requests_per_pod, ReqSlot::default(), "the request slots")?,
            // zeroed and untouched until used: a pod writes its key ring from the start (back to
            // it whenever the pod empties), its queue as requests come, so a short run clears and
            // holds only what its pods reached (the engine writes every element before reading it)
            waiting: try_vec_zeroed(l.pods * l.requests_per_pod, "the waiting queues")?,
            running: try_vec_zeroed(l.running_len(), "the running sets")?,
            keys: try_vec_zeroed(l.pods * l.keys_per_pod, "the prompt keys in flight")?,
            // zeroed and untouched until used, as the keys (an admission writes its hits' entries
            // before any is read)
            key_blocks: try_vec_zeroed(
                key_blocks_len(cfg, &l, group_blocks),
                "the blocks of the prompt keys in flight",
            )?,
            cpu_slots: try_vec(l.cpu_slots_len(), Slot::default(), "the offload tiers")?,
            cpu_tables: try_vec(l.cpu_tables_len(), 0u32, "the offload tiers' key tables")?,
            pd_transfers: try_vec(l.pd_transfers_len(), Transfer::default(), "the KV transfers in flight")?,
            pd_joins: try_vec(l.pd_in_flight, Join::default(), "the KV transfers waiting to start")?,
            pd_deliveries: try_vec(l.pd_in_flight, Delivery::default(), "the KV transfers waiting for delivery")?,
            scale: try_vec(l.scale_len(), WvaPod::default(), "the autoscaler's per-pod state")?,
            router: OwnedRouter::new(cfg)?,
            // Last: a failed allocation names the per-block buffers first, as without runs.
            group_blocks,
            // zeroed, not written here: a run is written when first used (`RunLru` reads no run
            // before), and each run table is cleared when the index is set up (`RunLru::new`)
            index_runs: try_vec_zeroed(runs_len, "the router's approximate-index runs")?,
            index_run_tables: try_vec_zeroed(run_tables_len, "the router's approximate-index run tables")?,
            // zeroed and untouched until used: the map's record slots (most of it) are written
            // only for the records a run reaches (`PoolGroups` clears a record's at its first use)
            pool_words: try_vec_zeroed(pool_words, "the pods' cache maps per trace id")?,
            pool_keys: try_vec_zeroed(pool_keys, "the pods' group keys")?,
            // zeroed: a slot's key and bits are written when it is first used, a log from its
            // start at each of the pod's events
            head_keys: try_vec_zeroed(head_slots, "the first-key index")?,
            head_stamps: try_vec_zeroed(head_slots, "the first-key index")?,
            head_bits: try_vec_zeroed(head_words, "the first-key index")?,
            key_logs: try_vec_zeroed(key_logs, "the pods' changed-key logs")?,
        })
    }

    fn fleet(o: &mut OwnedBatched) -> Result<BatchedFleet<'_>, CoreError> {
        let buffers = borrow_buffers!(o => BatchedBuffers {
            blocks, tables, requests, waiting, running, keys, key_blocks, cpu_slots, cpu_tables
        } + {
            pd: PdBuffers { transfers: &mut o.pd_transfers, joins: &mut o.pd_joins, deliveries: &mut o.pd_deliveries },
            scale: &mut o.scale
        });
        let mut fleet = BatchedFleet::with_router_buffers(o.cfg, buffers, o.router.buffers())?;
        if !o.index_runs.is_empty() {
            fleet.attach_index_runs(o.group_blocks, &mut o.index_runs, &mut o.index_run_tables)?;
        }
        if !o.pool_words.is_empty() {
            fleet.attach_pool_groups(o.group_blocks, &mut o.pool_words, &mut o.pool_keys)?;
        }
        if !o.head_keys.is_empty() {
            fleet.attach_heads(&mut o.head_keys, &mut o.head_stamps, &mut o.head_bits, &mut o.key_logs)?;
        }
        Ok(fleet)
    }

    fn outcome(_: &Routed) -> Option<Outcome> {
        None
    }

    fn summarize(fleet: &BatchedFleet<'_>, samples: &mut Samples) -> BatchedSummary {
        summarize_batched(fleet, samples)
    }
}
