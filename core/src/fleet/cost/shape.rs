//! What a step's cost depends on, summed over the requests the scheduler gave tokens: the engine
//! feeds each scheduled request once ([`BatchShape::add_prefill`] or [`BatchShape::add_decode`]),
//! in any order, without allocating.
//!
//! A request with `c` tokens already in the KV cache that computes `t` new tokens attends, in a
//! full-attention layer, from its i-th new token (i = 0 .. t-1) to the `c + i + 1` keys up to and
//! including itself (causal): `t c + t (t + 1) / 2` query-key pairs. In a sliding-window layer of
//! window W it attends to `min(c + i + 1, W)` keys. A decode is `t = 1`.

use super::{CostQuantity, Error};

/// The aggregate of one step's batch. Build it with [`super::Physics::shape`] (which knows the
/// model's window) and the `add_*` methods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchShape {
    /// The model's sliding window, tokens (0 = no sliding layers).
    pub window: u32,
    /// Requests computing a prefill chunk (any request with more than one token scheduled, and a
    /// prompt's single-token chunk).
    pub prefill_requests: u64,
    /// New tokens of the prefill chunks, `sum t`.
    pub prefill_tokens: u64,
    /// Query-key pairs of the prefill chunks in a full-attention layer, `sum t c + t (t + 1) / 2`.
    pub prefill_pairs: u64,
    /// The same in a sliding-window layer, `sum sum_i min(c + i + 1, W)`.
    pub prefill_pairs_window: u64,
    /// Cached tokens the prefill chunks read, `sum c` (full layers).
    pub prefill_cached: u64,
    /// The same in a sliding-window layer, `sum min(c, W)`.
    pub prefill_cached_window: u64,
    /// Requests decoding one token.
    pub decode_requests: u64,
    /// Tokens in the KV cache of the decoding requests, `sum c` (each reads them and attends to
    /// `c + 1` keys).
    pub decode_cached: u64,
    /// The same in a sliding-window layer, `sum min(c, W)`.
    pub decode_cached_window: u64,
    /// Keys the decodes attend to in a sliding-window layer, `sum min(c + 1, W)`.
    pub decode_pairs_window: u64,
    /// Of `decode_cached`, the tokens in KV blocks that another running request of the pod also
    /// holds, counted once per extra holder: `16 x sum over blocks (holders - 1)`, at most
    /// `decode_cached` (the engine's count, docs/MODEL.md "Shared-prefix reads"). Priced at
    /// [`super::Calibration::shared_kv_read_ppm`] of a full read in the full-attention layers;
    /// 0 when that factor is off (the engine does not count them then).
    pub decode_shared: u64,
}

/// `sum_{i=0}^{t-1} min(c + i + 1, w)`: query-key pairs of `t` new tokens after `c` cached ones
/// under a window of `w` keys (`w = 0`: no window). Closed form: the keys grow from `c + 1` until
/// they reach `w`, then stay at `w`.
pub fn window_pairs(c: u64, t: u64, w: u64) -> Option<u128> {
    let (c, t) = (c as u128, t as u128);
    let full = t.checked_mul(c)?.checked_add(t.checked_mul(t + 1)? / 2)?;
    if w == 0 {
        return Some(full);
    }
    let w = w as u128;
    if c + t <= w {
        Some(full)
    } else if c + 1 >= w {
        t.checked_mul(w)
    } else {
        // positions c+1 ..= w, then (c + t - w) more at w
        Some((w * (w + 1) - c * (c + 1)) / 2 + (c + t - w) * w)
    }
}

fn add(acc: &mut u64, v: u128) -> Result<(), Error> {
    let over = Error::Overflow { what: CostQuantity::BatchShape };
    let v = u64::try_from(v).map_err(|_| over)?;
    *acc = acc.checked_add(v).ok_or(over)?;
    Ok(())
}

impl BatchShape {
    /// An empty batch of a model whose sliding window is `window` tokens (0 = none).
    pub const fn new(window: u32) -> Self {
        BatchShape {
            window,
            prefill_requests: 0,
            prefill_tokens: 0,
            prefill_pairs: 0,
            prefill_pairs_window: 0,
            prefill_cached: 0,
            prefill_cached_window: 0,
            decode_requests: 0,
            decode_cached: 0,
            decode_cached_window: 0,
            decode_pairs_window: 0,
            decode_shared: 0,
        }
    }

    /// A request computing `t >= 1` prompt (or recompute) tokens after `c` cached ones.
    pub fn add_prefill(&mut self, c: u64, t: u64) -> Result<(), Error> {
        let over = Error::Overflow { what: CostQuantity::BatchShape };
        let w = self.window as u64;
        add(&mut self.prefill_requests, 1)?;
        add(&mut self.prefill_tokens, t as u128)?;
        add(&mut self.prefill_pairs, window_pairs(c, t, 0).ok_or(over)?)?;
        add(&mut self.prefill_pairs_window, window_pairs(c, t, w).ok_or(over)?)?;
        add(&mut self.prefill_cached, c as u128)?;
        add(&mut self.prefill_cached_window, if w == 0 { c } else { c.min(w) } as u128)
    }

    /// A request decoding one token with `c` tokens in its KV cache.
    pub fn add_decode(&mut self, c: u64) -> Result<(), Error> {
        let w = self.window as u64;
        add(&mut self.decode_requests, 1)?;
        add(&mut self.decode_cached, c as u128)?;
        add(&mut self.decode_cached_window, if w == 0 { c } else { c.min(w) } as u128)?;
        let keys = c as u128 + 1;
        add(&mut self.decode_pairs_window, if w == 0 { keys } else { keys.min(w as u128) })
    }

    /// `n` requests each decoding one token with `c` tokens in its KV cache (the same as `n` calls
    /// of [`Self::add_decode`]).
    pub fn add_decodes(&mut self, n: u64, c: u64) -> Result<(), Error> {
        let w = self.window as u64;
        let (n, c) = (n as u128, c as u128);
        let over = Error::Overflow { what: CostQuantity::BatchShape };
        let cw = if w == 0 { c } else { c.min(w as u128) };
        let keys = if w == 0 { c + 1 } else { (c + 1).min(w as u128) };
        add(&mut self.decode_requests, n)?;
        add(&mut self.decode_cached, n.checked_mul(c).ok_or(over)?)?;
        add(&mut self.decode_cached_window, n.checked_mul(cw).ok_or(over)?)?;
        add(&mut self.decode_pairs_window, n.checked_mul(keys).ok_or(over)?)
    }

    /// Requests in the step.
    pub const fn requests(&self) -> u64 {
        self.prefill_requests + self.decode_requests
    }

    /// New tokens computed in the step (prefill tokens + one per decode).
    pub const fn tokens(&self) -> u64 {
        self.prefill_tokens + self.decode_requests
    }
}
