//! The fleet's view of the pods' caches, as the routers see it (docs/MODEL.md, "Stale index",
//! "Staleness in time"): exact by default (the pods' own tables answer), or through a global
//! key -> pods table ([`IndexKind::Global`]); and stale by k requests or by D ns, with llm-d's
//! speculative entries. Fed by the pods' cache events ([`Feed`]); a fleet-level feature.

use crate::fleet::base::carve::chunks;
use crate::fleet::base::error::{Buffer, Error, Field, Quantity, Rule};
use crate::fleet::base::limits::MAX_STALE_DELAY;
use crate::fleet::cache::CacheEvents;
use crate::fleet::cache::index::{BlockIndex, IndexEntry, PendingEntry, PendingEvicts, PendingRecord};

/// Where the prefix-aware router reads "which pods hold this key" from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum IndexKind {
    /// A global key -> pod-mask table ([`BlockIndex`]) fed by the pods' insert and evict events,
    /// as llm-d's KV-cache indexer does. Costs 21..43 bytes per indexed key and two table updates
    /// per miss.
    Global,
    /// The pods' own key tables answer directly (the union of N exact views is the same set as
    /// the global index), plus the same stale-evict queue. No extra memory; a match costs up to
    /// N lookups per block. Results are identical to [`IndexKind::Global`] (tested).
    PodTables,
}

impl core::fmt::Display for IndexKind {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl IndexKind {
    /// Both kinds.
    pub const ALL: [IndexKind; 2] = [IndexKind::Global, IndexKind::PodTables];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            IndexKind::Global => "global",
            IndexKind::PodTables => "pod-tables",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// How the routers' view of the caches is kept and how far it lags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewConfig {
    /// How the exact view is kept (results do not depend on it).
    pub index: IndexKind,
    /// Stale-evict delay k, in requests (0: exact).
    pub stale_delay: u32,
    /// Staleness in time: the view learns of each store and eviction this long after it
    /// happens, ns (0: at once). Exclusive with `stale_delay`.
    pub event_delay_ns: u64,
    /// llm-d's speculative entries: a routed request's keys count as held by its pod for this
    /// long, ns (0: off).
    pub speculative_ttl_ns: u64,
}

impl ViewConfig {
    /// An exact view from the pods' own tables (the batched engine's, always).
    pub const EXACT: ViewConfig =
        ViewConfig { index: IndexKind::PodTables, stale_delay: 0, event_delay_ns: 0, speculative_ttl_ns: 0 };

    /// True when the view lags (by requests or in time) or holds speculative entries.
    pub fn is_stale(&self) -> bool {
        self.stale_delay > 0 || self.event_delay_ns > 0 || self.speculative_ttl_ns > 0
    }

    /// Pending-event queues the view needs when the router reads it: evictions (delay k or
    /// event delay), stores (event delay), speculative entries (TTL).
    pub fn queues(&self) -> usize {
        let evicts = self.stale_delay > 0 || self.event_delay_ns > 0;
        usize::from(evicts) + usize::from(self.event_delay_ns > 0) + usize::from(self.speculative_ttl_ns > 0)
    }

    /// Checks the delays.
    pub fn validate(&self) -> Result<(), Error> {
        if self.stale_delay > MAX_STALE_DELAY {
            return Err(Error::InvalidConfig { field: Field::Stale, expected: "at most 16777216 requests" });
        }
        if self.event_delay_ns > 0 && self.stale_delay > 0 {
            return Err(Error::Conflict { field: Field::EventDelay, rule: Rule::OneStaleDelay });
        }
        Ok(())
    }
}

/// Buffer lengths of a view (all 0 for an exact view from the pods' tables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewLayout {
    /// Block index entries (0 unless the router reads a global index).
    pub index: usize,
    /// Pending-event records: one equal share per queue ([`ViewConfig::queues`]).
    pub pending: usize,
    /// Pending-event table entries (one equal share per queue).
    pub pending_table: usize,
}

impl ViewLayout {
    /// The layout of `view` for `pods` pods of `capacity_blocks` blocks, with `pending` records
    /// per queue, when the router reads the exact view (`reads_index`).
    pub fn new(
        view: &ViewConfig,
        reads_index: bool,
        pods: usize,
        capacity_blocks: usize,
        pending: usize,
    ) -> Result<Self, Error> {
        if !reads_index {
            return Ok(ViewLayout::default());
        }
        let index = if view.index == IndexKind::Global {
            let keys = pods.checked_mul(capacity_blocks).ok_or(Error::Overflow { what: Quantity::IndexSize })?;
            BlockIndex::table_len_for_pods(keys, pods)
        } else {
            0
        };
        let queues = view.queues();
        let per_queue = if queues > 0 { pending.max(1) } else { 0 };
        Ok(ViewLayout {
            index,
            pending: per_queue * queues,
            pending_table: if queues > 0 { PendingEvicts::table_len(per_queue) * queues } else { 0 },
        })
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.index * size_of::<IndexEntry>()
            + self.pending * size_of::<PendingRecord>()
            + self.pending_table * size_of::<PendingEntry>()
    }
}

/// Caller storage of a view, lengths from [`ViewLayout`] (all empty for an exact view).
#[derive(Debug, Default)]
pub struct ViewBuffers<'a> {
    /// `index` entries.
    pub index: &'a mut [IndexEntry],
    /// `pending` records.
    pub pending: &'a mut [PendingRecord],
    /// `pending_table` entries.
    pub pending_table: &'a mut [PendingEntry],
}

/// The view at run time.
pub struct View<'a> {
    cfg: ViewConfig,
    /// The global index (`IndexKind::Global`, when the router reads it).
    pub index: Option<BlockIndex<'a>>,
    /// Evictions not yet delivered.
    pub pending: Option<PendingEvicts<'a>>,
    /// Stores not yet delivered (event delay).
    pub stores: Option<PendingEvicts<'a>>,
    /// Speculative entries not yet expired.
    pub speculative: Option<PendingEvicts<'a>>,
}

impl<'a> View<'a> {
    /// The view of `cfg` over `b`; with `reads_index` false (the router reads no cache), an
    /// exact view that keeps nothing.
    pub fn new(
        cfg: ViewConfig,
        reads_index: bool,
        pods: usize,
        capacity_blocks: usize,
        b: ViewBuffers<'a>,
    ) -> Result<Self, Error> {
        if !reads_index {
            return Ok(View { cfg, index: None, pending: None, stores: None, speculative: None });
        }
        let index = if cfg.index == IndexKind::Global {
            if b.index.is_empty() {
                return Err(Error::BufferSize {
                    buffer: Buffer::Index,
                    expected: BlockIndex::table_len_for_pods(pods.saturating_mul(capacity_blocks), pods),
                    got: 0,
                });
            }
            Some(BlockIndex::with_pods(b.index, pods)?)
        } else {
            None
        };
        let (pending, stores, speculative) = pending_queues(&cfg, b.pending, b.pending_table)?;
        Ok(View { cfg, index, pending, stores, speculative })
    }

    /// The view's configuration.
    pub fn config(&self) -> &ViewConfig {
        &self.cfg
    }

    /// Step 1 of a dispatch of request `i` at `t_ns`: evictions made while dispatching requests
    /// <= i-k-1 reach the router now (or, with an event delay D, the stores and evictions made at
    /// or before t - D); speculative entries made at or before t - TTL expire.
    pub fn deliver(&mut self, i: u64, t_ns: u64) {
        if self.cfg.event_delay_ns > 0 {
            if let Some(upto) = t_ns.checked_sub(self.cfg.event_delay_ns) {
                self.pending.iter_mut().chain(self.stores.iter_mut()).for_each(|p| p.deliver_through(upto));
            }
        } else if let Some(p) = self.pending.as_mut()
            && let Some(upto) = i.checked_sub(self.cfg.stale_delay as u64 + 1)
        {
            p.deliver_through(upto);
        }
        if let Some(s) = self.speculative.as_mut()
            && let Some(upto) = t_ns.checked_sub(self.cfg.speculative_ttl_ns)
        {
            s.deliver_through(upto);
        }
    }

    /// The stamp of events of the dispatch of request `i` at `t_ns`: the dispatch number (delay
    /// in requests) or the arrival (in time).
    pub fn stamp(&self, i: u64, t_ns: u64) -> u64 {
        if self.cfg.event_delay_ns > 0 { t_ns } else { i }
    }

    /// Records that `keys` were routed to `pod` at `t_ns` (speculative entries).
    pub fn routed(&mut self, pod: usize, keys: &[u64], t_ns: u64) -> Result<(), Error> {
        if let Some(s) = self.speculative.as_mut() {
            for &k in keys {
                s.record(k, pod, t_ns)?;
            }
        }
        Ok(())
    }

    /// The cache events of pod `pod`, stamped `stamp`, as they feed this view.
    pub fn feed(&mut self, pod: usize, stamp: u64) -> Feed<'_, 'a> {
        Feed {
            index: self.index.as_mut(),
            pending: self.pending.as_mut(),
            stores: self.stores.as_mut(),
            pod,
            stamp,
            error: None,
        }
    }
}

/// Feeds one pod's cache events to the view during one dispatch; the first error is kept for
/// [`Feed::finish`] (a cache's event sink cannot fail).
pub struct Feed<'x, 'a> {
    index: Option<&'x mut BlockIndex<'a>>,
    pending: Option<&'x mut PendingEvicts<'a>>,
    stores: Option<&'x mut PendingEvicts<'a>>,
    pod: usize,
    stamp: u64,
    error: Option<Error>,
}

impl Feed<'_, '_> {
    /// The first error an event met (a full pending queue or index), if any.
    pub fn finish(self) -> Result<(), Error> {
        self.error.map_or(Ok(()), Err)
    }
}

impl CacheEvents for Feed<'_, '_> {
    #[inline]
    fn inserted(&mut self, key: u64) {
        if let Some(ix) = self.index.as_deref_mut()
            && let Err(e) = ix.insert(key, self.pod)
        {
            self.error.get_or_insert(e);
        }
        if let Some(s) = self.stores.as_deref_mut()
            && let Err(e) = s.record(key, self.pod, self.stamp)
        {
            self.error.get_or_insert(e);
        }
    }
    #[inline]
    fn evicted(&mut self, key: u64) {
        if let Some(ix) = self.index.as_deref_mut() {
            ix.remove(key, self.pod);
        }
        if let Some(p) = self.pending.as_deref_mut()
            && let Err(e) = p.record(key, self.pod, self.stamp)
        {
            self.error.get_or_insert(e);
        }
    }
    #[inline]
    fn silent(&self) -> bool {
        self.index.is_none() && self.pending.is_none() && self.stores.is_none()
    }
}

/// The pending-event queues of `cfg` (evictions, stores, speculative entries) over equal shares
/// of the caller's buffers.
#[allow(clippy::type_complexity)]
fn pending_queues<'a>(
    cfg: &ViewConfig,
    ring: &'a mut [PendingRecord],
    table: &'a mut [PendingEntry],
) -> Result<(Option<PendingEvicts<'a>>, Option<PendingEvicts<'a>>, Option<PendingEvicts<'a>>), Error> {
    let n = cfg.queues();
    if n == 0 {
        return Ok((None, None, None));
    }
    let (ring_each, table_each) = (ring.len() / n, table.len() / n);
    let mut rings = chunks(ring, n, ring_each, Buffer::Pending)?;
    let mut tables = chunks(table, n, table_each, Buffer::PendingTable)?;
    let mut next = || -> Result<Option<PendingEvicts<'a>>, Error> {
        match (rings.next(), tables.next()) {
            (Some(r), Some(t)) => Ok(Some(PendingEvicts::new(r, t)?)),
            _ => Err(Error::BufferSize { buffer: Buffer::Pending, expected: n, got: 0 }),
        }
    };
    let evicts = if cfg.stale_delay > 0 || cfg.event_delay_ns > 0 { next()? } else { None };
    let stores = if cfg.event_delay_ns > 0 { next()? } else { None };
    let speculative = if cfg.speculative_ttl_ns > 0 { next()? } else { None };
    Ok((evicts, stores, speculative))
}
