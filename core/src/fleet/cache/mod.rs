//! The caches: a pod's LRU of block keys ([`lru`], and the same LRU as runs of trace ids,
//! [`runs`]), the exact block index and the pending events of a stale view ([`index`]), the
//! router-side approximate index ([`approx`]), the batched fleet's first-key index
//! ([`heads`]), and the open-addressed table they share ([`table`]). Below the routers and the engines; above `base` only.

pub mod approx;
pub mod fused;
pub mod heads;
pub mod index;
pub mod lru;
pub mod runs;
pub(crate) mod table;

/// Receives a pod's cache events (the block index is fed from these).
pub trait CacheEvents {
    /// `key` was inserted as most recent.
    fn inserted(&mut self, key: u64);
    /// `key` was evicted as least recent.
    fn evicted(&mut self, key: u64);
    /// True when every event would be ignored (so that a caller may touch with `()` instead and
    /// skip the per-event checks); false unless the sink says so.
    fn silent(&self) -> bool {
        false
    }
}

/// Ignores all events.
impl CacheEvents for () {
    fn inserted(&mut self, _: u64) {}
    fn evicted(&mut self, _: u64) {}
    fn silent(&self) -> bool {
        true
    }
}
