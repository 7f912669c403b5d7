//! Named limits of the fleet core. Every bound the core enforces is one of these.

/// Tokens per KV block (the model's B).
pub const BLOCK_TOKENS: usize = 16;
/// Most pods in one fleet: the block index stores the set of pods holding a key as a `u64` bitmask.
pub const MAX_PODS: usize = 64;
/// Most blocks one pod can cache: slot indices are `u32` and `u32::MAX` marks "none".
pub const MAX_POD_BLOCKS: usize = (u32::MAX - 1) as usize;
/// Most requests one generated workload may have (a scenario's `requests`); the host's memory
/// budget may allow fewer.
pub const MAX_REQUESTS: u64 = 1 << 32;
/// Longest prompt accepted, in tokens (2^24 = 16.7 M tokens, i.e. 1,048,576 blocks).
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;
/// Most full blocks of one prompt.
pub const MAX_REQUEST_BLOCKS: usize = (MAX_PROMPT_TOKENS as usize) / BLOCK_TOKENS;
/// Largest trace block size S accepted (tokens per trace hash id); must be a multiple of 16.
pub const MAX_TRACE_BLOCK_TOKENS: u32 = 1 << 20;
/// Largest vLLM block size accepted by `fleet::vllm` (`--block-size`), tokens.
pub const MAX_VLLM_BLOCK_TOKENS: usize = 1 << 20;
/// Largest stale-evict delay k, in requests.
pub const MAX_STALE_DELAY: u32 = 1 << 24;
/// Largest load penalty alpha accepted.
pub const MAX_ALPHA: f64 = 1.0e9;
/// Hash tables are sized so that at most `LOAD_NUM / LOAD_DEN` of their entries are used.
pub const LOAD_NUM: usize = 3;
/// See [`LOAD_NUM`].
pub const LOAD_DEN: usize = 4;
/// Largest step token budget `max_num_batched_tokens` of the batched engine.
pub const MAX_BATCHED_TOKENS: u32 = 1 << 24;
/// Most running requests per pod (`max_num_seqs`) of the batched engine.
pub const MAX_NUM_SEQS: u32 = 1 << 16;
/// Longest output accepted by the batched engine, in tokens.
pub const MAX_OUTPUT_TOKENS: u64 = 1 << 24;
