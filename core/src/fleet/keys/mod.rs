//! Turning a prompt into its chained block keys.

pub mod hash;
pub mod vllm;

use self::hash::{ROOT_KEY, chain_tokens, chain_trace_mixed, trace_id_mix};
use crate::fleet::base::error::{Buffer, Error, Field, RequestField};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS, MAX_TRACE_BLOCK_TOKENS, quoting};

/// Checks a trace block size S: a non-zero multiple of 16, at most [`MAX_TRACE_BLOCK_TOKENS`].
pub fn check_trace_block_tokens(s: u32) -> Result<(), Error> {
    if s == 0 || !(s as usize).is_multiple_of(BLOCK_TOKENS) || s > MAX_TRACE_BLOCK_TOKENS {
        return Err(Error::InvalidConfig {
            field: Field::TraceBlockSize,
            expected: quoting!("a non-zero multiple of 16, at most 1048576", BLOCK_TOKENS, MAX_TRACE_BLOCK_TOKENS),
        });
    }
    Ok(())
}

/// Number of full 16-token blocks of a prompt of `input_tokens` tokens.
pub fn full_blocks(input_tokens: u64) -> Result<usize, Error> {
    if input_tokens > MAX_PROMPT_TOKENS {
        return Err(Error::InvalidRequest {
            field: RequestField::InputLength,
            expected: quoting!("at most 16777216 tokens", MAX_PROMPT_TOKENS),
        });
    }
    Ok((input_tokens / BLOCK_TOKENS as u64) as usize)
}

/// Keys of the full blocks of a Mooncake trace request: block j is (`hash_ids[16j / S]`,
/// `(16j mod S) / 16`), chained from [`ROOT_KEY`]. Writes `floor(input_tokens / 16)` keys into
/// `out` and returns that count. Extra hash ids are ignored.
pub fn trace_keys(
    hash_ids: &[u64],
    input_tokens: u64,
    trace_block_tokens: u32,
    out: &mut [u64],
) -> Result<usize, Error> {
    check_trace_block_tokens(trace_block_tokens)?;
    let m = full_blocks(input_tokens)?;
    let subs = trace_block_tokens as usize / BLOCK_TOKENS;
    let needed = m.div_ceil(subs);
    if hash_ids.len() < needed {
        return Err(Error::TooFewHashIds { needed, got: hash_ids.len() });
    }
    let Some(out) = out.get_mut(..m) else {
        return Err(Error::BufferSize { buffer: Buffer::Keys, expected: m, got: out.len() });
    };
    // Per id, then per sub-block: no division per block, and the id's own mix computed once
    // (the keys are those of `chain_trace`; `fleet bench` times this loop as "hash").
    let mut parent = ROOT_KEY;
    for (chunk, &id) in out.chunks_mut(subs).zip(hash_ids) {
        let mix = trace_id_mix(id);
        for (sub, key) in chunk.iter_mut().enumerate() {
            parent = chain_trace_mixed(parent, mix, sub as u32);
            *key = parent;
        }
    }
    Ok(m)
}

/// Keys of a prompt's floor(L/16) 16-token blocks from `coarse`, the keys of its full B-token
/// blocks (vLLM's block keys with `--block-size` B, a multiple of 16, see
/// [`check_trace_block_tokens`]): block j is sub-block `(16j mod B) / 16` of coarse block
/// `16j / B`, keyed as a trace's hash id (so a coarse block is cached and evicted in 16-token
/// pieces, as a Mooncake trace's ids are). The 16-token blocks after the last full B-token block
/// take `tail_id` as their id: vLLM hashes no partial block, so no later request may hit them;
/// the caller passes an id unique to the request. Returns the number of keys written.
pub fn coarse_keys(
    coarse: &[u64],
    input_tokens: u64,
    block_tokens: u32,
    tail_id: u64,
    out: &mut [u64],
) -> Result<usize, Error> {
    check_trace_block_tokens(block_tokens)?;
    let m = full_blocks(input_tokens)?;
    let full = (input_tokens / u64::from(block_tokens)) as usize;
    if coarse.len() < full {
        return Err(Error::TooFewHashIds { needed: full, got: coarse.len() });
    }
    let Some(out) = out.get_mut(..m) else {
        return Err(Error::BufferSize { buffer: Buffer::Keys, expected: m, got: out.len() });
    };
    let subs = block_tokens as usize / BLOCK_TOKENS;
    let ids = coarse[..full].iter().copied().chain(core::iter::once(tail_id));
    let mut parent = ROOT_KEY;
    for (chunk, id) in out.chunks_mut(subs).zip(ids) {
        let mix = trace_id_mix(id);
        for (sub, key) in chunk.iter_mut().enumerate() {
            parent = chain_trace_mixed(parent, mix, sub as u32);
            *key = parent;
        }
    }
    Ok(m)
}

/// Keys of the full blocks of a prompt given as token ids; the trailing partial block is ignored.
/// Returns the number of keys written.
pub fn token_keys(tokens: &[u32], out: &mut [u64]) -> Result<usize, Error> {
    token_keys_from(ROOT_KEY, tokens, out)
}

/// [`token_keys`] of the blocks that follow a block of key `parent`: the keys of blocks
/// `j..` of a prompt are `token_keys_from(key j - 1, its tokens from block j)` (a caller that
/// kept a shared prefix's keys hashes only the rest).
pub fn token_keys_from(parent: u64, tokens: &[u32], out: &mut [u64]) -> Result<usize, Error> {
    let m = tokens.len() / BLOCK_TOKENS;
    let Some(out) = out.get_mut(..m) else {
        return Err(Error::BufferSize { buffer: Buffer::Keys, expected: m, got: out.len() });
    };
    let mut parent = parent;
    for (key, block) in out.iter_mut().zip(tokens.chunks_exact(BLOCK_TOKENS)) {
        let mut b = [0u32; BLOCK_TOKENS];
        b.copy_from_slice(block);
        parent = chain_tokens(parent, &b);
        *key = parent;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::keys::hash::chain_trace;

    #[test]
    fn block_j_maps_to_hash_id_and_sub_block() {
        // S = 32: two 16-token blocks per hash id; L = 80 -> 5 full blocks need 3 ids.
        let mut out = [0u64; 8];
        assert_eq!(trace_keys(&[10, 11, 12, 99], 80, 32, &mut out), Ok(5));
        let mut p = ROOT_KEY;
        for (j, (id, sub)) in [(10, 0), (10, 1), (11, 0), (11, 1), (12, 0)].into_iter().enumerate() {
            p = chain_trace(p, id, sub);
            assert_eq!(out[j], p, "block {j}");
        }
    }

    #[test]
    fn too_few_hash_ids_is_an_error_not_a_panic() {
        let mut out = [0u64; 64];
        // L = 1025 with S = 512: 64 full blocks, needs ids for tokens 0..1024 = 2 ids.
        assert_eq!(trace_keys(&[1], 1025, 512, &mut out), Err(Error::TooFewHashIds { needed: 2, got: 1 }));
        // A partial trailing block needs no id of its own.
        assert_eq!(trace_keys(&[1, 2], 1025, 512, &mut out), Ok(64));
        assert!(trace_keys(&[1], 10, 24, &mut out).is_err());
    }

    #[test]
    fn coarse_blocks_split_into_16_token_blocks_and_the_tail_takes_its_own_id() {
        // B = 64: L = 150 -> 9 blocks of 16; 2 full coarse blocks (128 tokens), 1 tail block.
        let mut out = [0u64; 12];
        assert_eq!(coarse_keys(&[7, 8], 150, 64, 99, &mut out), Ok(9));
        let mut p = ROOT_KEY;
        let want = [(7, 0), (7, 1), (7, 2), (7, 3), (8, 0), (8, 1), (8, 2), (8, 3), (99, 0)];
        for (j, (id, sub)) in want.into_iter().enumerate() {
            p = chain_trace(p, id, sub);
            assert_eq!(out[j], p, "block {j}");
        }
        // the same prefix with another tail id: the full blocks agree, the tail does not
        let mut other = [0u64; 12];
        assert_eq!(coarse_keys(&[7, 8], 150, 64, 100, &mut other), Ok(9));
        assert_eq!(out[..8], other[..8]);
        assert_ne!(out[8], other[8]);
        assert_eq!(coarse_keys(&[7], 150, 64, 99, &mut out), Err(Error::TooFewHashIds { needed: 2, got: 1 }));
        assert!(coarse_keys(&[7, 8], 150, 24, 99, &mut out).is_err(), "B must be a multiple of 16");
    }

    #[test]
    fn partial_block_is_never_keyed() {
        let tokens = [5u32; 47];
        let mut out = [0u64; 4];
        assert_eq!(token_keys(&tokens, &mut out), Ok(2));
    }
}
