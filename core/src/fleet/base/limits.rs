//! Named limits of the fleet core. Every bound the core enforces is one of these.

/// Tokens per KV block (the model's B).
pub const BLOCK_TOKENS: usize = 16;
/// Most pods in one fleet: 1,024 with the `large-fleets` feature (the host's), 64 without (the
/// firmware's: the fleet value holds its pods inline, and a 64-pod bound keeps it and the routers'
/// per-decision scratch small in RAM). Sets of pods are bitsets of `MAX_PODS / 64` words
/// (`base::mask::PodSet`); a fleet of at most 64 pods is routed with one word whatever the bound.
#[cfg(feature = "large-fleets")]
pub const MAX_PODS: usize = 1024;
/// See above: without the `large-fleets` feature.
#[cfg(not(feature = "large-fleets"))]
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
/// Fastest link the model accepts (a PCIe or KV-transfer link), bytes/s (10 TB/s).
pub const MAX_LINK_BYTES_PER_S: u64 = 10_000_000_000_000;
/// Longest fixed latency of one transfer or load, ns (1,000 s).
pub const MAX_LINK_LATENCY_NS: u64 = 1_000_000_000_000;
/// Largest KV size of one token of a pod, bytes (2^24).
pub const MAX_KV_BYTES_PER_TOKEN: u64 = 1 << 24;

/// Whether `text` quotes `n` in decimal as a whole number (not inside a longer one). The core's
/// error messages are `&'static str` (it cannot format), so each one that quotes a limit is
/// checked against the limit at compile time with [`quoting!`]: change a limit and the build
/// names the message to change with it.
pub const fn mentions(text: &str, n: u64) -> bool {
    let mut digits = [0u8; 20];
    let (mut len, mut v) = (0, n);
    loop {
        digits[19 - len] = b'0' + (v % 10) as u8;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let t = text.as_bytes();
    let mut i = 0;
    while i + len <= t.len() {
        let mut j = 0;
        while j < len && t[i + j] == digits[20 - len + j] {
            j += 1;
        }
        let before = i == 0 || !t[i - 1].is_ascii_digit();
        let after = i + len == t.len() || !t[i + len].is_ascii_digit();
        if j == len && before && after {
            return true;
        }
        i += 1;
    }
    false
}

/// A message literal that quotes the values of the given constants, checked at compile time
/// ([`mentions`]).
macro_rules! quoting {
    ($text:literal, $($n:expr),+ $(,)?) => {{
        const TEXT: &str = $text;
        $(const _: () = assert!($crate::fleet::base::limits::mentions(TEXT, $n as u64), "message does not quote the limit");)+
        TEXT
    }};
}
pub(crate) use quoting;

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn mentions_finds_whole_numbers_only() {
        assert!(mentions("between 1 and 65536", 65536));
        assert!(mentions("16 values", 16));
        assert!(!mentions("between 1 and 165536", 65536));
        assert!(!mentions("at most 160", 16));
        assert!(mentions("0", 0));
    }
}
