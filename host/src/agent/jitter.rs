//! The deterministic "jitter" of retry pauses: a hash of what the pause belongs to, so two runs
//! of the same task wait the same and no random source is read. Its own file so that the tools,
//! the model and the runner's executor can use it without importing the library facade
//! (`agent/mod.rs`), which imports them.

/// A 64-bit FNV-1a of `parts` (each length-prefixed): the deterministic "jitter" of retry
/// pauses, so two runs of the same task wait the same and no random source is read.
pub fn salt(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in (p.len() as u32).to_le_bytes().iter().chain(p.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}
