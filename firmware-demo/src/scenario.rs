//! The deterministic scenario run on both sides.
//!
//! Phase 1 (this file): 2,000 synthetic Mooncake-style requests built from an integer formula,
//! turned into chained block keys by the core (`fleet::keys::trace_keys`), and summarised.
//! TODO(phase 2): run the same requests through the fleet simulator (all three routers) once the
//! fleet API and the seeded workload generator (`core/src/fleet/workload.rs`) land.

use brokerlab_core::fleet::hash::fmix64;
use brokerlab_core::fleet::keys::trace_keys;

use crate::Metrics;

/// Seed of the demo scenario.
pub const SEED: u64 = 0x6272_6f6b_6572_5eed;
/// Requests in the demo scenario.
pub const REQUESTS: u32 = 2_000;
/// Tokens per trace hash id (the trace block size S).
pub const TRACE_BLOCK_TOKENS: u32 = 512;
/// Shared prompt prefixes ("documents") the requests draw from.
pub const DOCUMENTS: u64 = 16;
/// Most trace hash ids in one request.
pub const MAX_HASH_IDS: usize = 10;
/// Most 16-token blocks in one request.
pub const MAX_REQUEST_BLOCKS: usize = MAX_HASH_IDS * (TRACE_BLOCK_TOKENS as usize / 16);

/// One synthetic request: its trace hash ids and prompt length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticRequest {
    /// Trace hash ids (only the first `ids` are used).
    pub hash_ids: [u64; MAX_HASH_IDS],
    /// Number of hash ids.
    pub ids: usize,
    /// Prompt length in tokens.
    pub input_tokens: u64,
}

/// Request `i` of the scenario seeded with `seed`: a shared prefix of 1..=6 hash ids from one of
/// [`DOCUMENTS`] documents, then 1..=4 hash ids unique to the request; the last hash id is cut
/// short by 0..=511 tokens.
pub fn request(seed: u64, i: u32) -> SyntheticRequest {
    let r = fmix64(seed ^ fmix64(u64::from(i).wrapping_add(1)));
    let doc = r % DOCUMENTS;
    let prefix = 1 + ((r >> 8) % 6) as usize;
    let unique = 1 + ((r >> 16) % 4) as usize;
    let mut hash_ids = [0u64; MAX_HASH_IDS];
    for (j, id) in hash_ids.iter_mut().enumerate().take(prefix) {
        *id = doc * 1_000 + j as u64;
    }
    for (j, id) in hash_ids.iter_mut().enumerate().skip(prefix).take(unique) {
        *id = 1_000_000 + u64::from(i) * 16 + j as u64;
    }
    let ids = prefix + unique;
    let input_tokens = ids as u64 * u64::from(TRACE_BLOCK_TOKENS) - (r >> 24) % u64::from(TRACE_BLOCK_TOKENS);
    SyntheticRequest { hash_ids, ids, input_tokens }
}

/// Runs the scenario and returns its metrics. `Err` carries the failing request's index.
pub fn run(seed: u64) -> Result<Metrics, u32> {
    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let mut first_keys = [0u64; DOCUMENTS as usize];
    let mut distinct_first = 0usize;
    let (mut total_blocks, mut total_tokens, mut max_blocks) = (0u64, 0u64, 0u64);
    let mut digest = seed;
    for i in 0..REQUESTS {
        let req = request(seed, i);
        let n = trace_keys(&req.hash_ids[..req.ids], req.input_tokens, TRACE_BLOCK_TOKENS, &mut keys).map_err(|_| i)?;
        total_blocks += n as u64;
        total_tokens += req.input_tokens;
        max_blocks = max_blocks.max(n as u64);
        for &k in &keys[..n] {
            digest = fmix64(digest ^ k);
        }
        if n > 0 && !first_keys[..distinct_first].contains(&keys[0]) {
            if distinct_first == first_keys.len() {
                return Err(i);
            }
            first_keys[distinct_first] = keys[0];
            distinct_first += 1;
        }
    }
    let mut m = Metrics::new();
    m.push("seed", seed);
    m.push("requests", u64::from(REQUESTS));
    m.push("total_tokens", total_tokens);
    m.push("total_blocks", total_blocks);
    m.push("max_request_blocks", max_blocks);
    m.push("distinct_first_keys", distinct_first as u64);
    m.push("key_digest", digest);
    Ok(m)
}
