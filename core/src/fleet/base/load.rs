//! Load signals: what an engine reports about a pod and what the routers' load scorers read
//! (docs/MODEL.md, "Load signals"). Here, below both, so that neither imports the other.

/// What routers may read about a pod's engine (docs/MODEL.md, "Load signals").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PodLoad {
    /// Requests in the waiting queue.
    pub waiting: u32,
    /// Running requests.
    pub running: u32,
    /// Pinned blocks (reference count > 0).
    pub kv_used_blocks: u32,
    /// KV capacity C, blocks.
    pub kv_capacity_blocks: u32,
    /// Tokens still to prefill: waiting requests whole, running ones with more than one token to go.
    pub pending_prefill_tokens: u64,
}
