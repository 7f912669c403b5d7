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

/// Keys of the full blocks of a prompt given as token ids; the trailing partial block is ignored.
/// Returns the number of keys written.
pub fn token_keys(tokens: &[u32], out: &mut [u64]) -> Result<usize, Error> {
    let m = tokens.len() / BLOCK_TOKENS;
    let Some(out) = out.get_mut(..m) else {
        return Err(Error::BufferSize { buffer: Buffer::Keys, expected: m, got: out.len() });
    };
    let mut parent = ROOT_KEY;
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
    fn partial_block_is_never_keyed() {
        let tokens = [5u32; 47];
        let mut out = [0u64; 4];
        assert_eq!(token_keys(&tokens, &mut out), Ok(2));
    }
}
