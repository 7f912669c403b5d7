//! SLO goodput (docs/MODEL.md, "SLO goodput"): whether a finished request met a TTFT and a TPOT
//! service-level objective, vLLM's `--goodput` rule (`vllm/benchmarks/serve.py`) multiplied out
//! so that it is exact in integers.

use crate::fleet::engine::Completion;

/// The SLOs of a run; a request is good when every one given holds (inclusive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Slo {
    /// Most time to first token, ns.
    pub ttft_ns: Option<u64>,
    /// Most time per output token after the first, ns.
    pub tpot_ns: Option<u64>,
}

impl Slo {
    /// Whether a request with this TTFT and E2E producing `output_tokens` tokens is good:
    /// ttft <= SLO_ttft, and, with two tokens or more, e2e - ttft <= SLO_tpot x (tokens - 1)
    /// (vLLM: a one-token request's TPOT is 0).
    pub fn good(&self, ttft_ns: u64, e2e_ns: u64, output_tokens: u64) -> bool {
        let ttft_ok = self.ttft_ns.is_none_or(|s| ttft_ns <= s);
        let tpot_ok = match self.tpot_ns {
            Some(s) if output_tokens >= 2 => {
                (e2e_ns.saturating_sub(ttft_ns) as u128) <= s as u128 * (output_tokens - 1) as u128
            }
            _ => true,
        };
        ttft_ok && tpot_ok
    }

    /// [`Self::good`] for a completion. The batched engine's completions carry their first token;
    /// the FIFO server's first token is the end of the prefill part of its service, its finish
    /// less `fifo_t_decode_ns` per output token (pass it for FIFO completions, None otherwise).
    pub fn good_completion(&self, c: &Completion, fifo_t_decode_ns: Option<u64>) -> bool {
        let (ttft, out) = match fifo_t_decode_ns {
            None => (c.ttft_ns(), c.output_tokens),
            Some(t) => {
                let decode = c.output_tokens.saturating_mul(t);
                (c.e2e_ns().saturating_sub(decode), c.output_tokens.max(1))
            }
        };
        self.good(ttft, c.e2e_ns(), out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_one_token_has_no_tpot() {
        let s = Slo { ttft_ns: Some(100), tpot_ns: Some(10) };
        assert!(s.good(100, 120, 3));
        assert!(!s.good(101, 120, 3));
        assert!(!s.good(100, 121, 3));
        assert!(s.good(100, 1_000_000, 1));
        let ttft_only = Slo { ttft_ns: Some(5), tpot_ns: None };
        assert!(ttft_only.good(5, u64::MAX, 9));
        let tpot_only = Slo { ttft_ns: None, tpot_ns: Some(0) };
        assert!(tpot_only.good(u64::MAX, u64::MAX, 2));
        assert!(!tpot_only.good(1, 2, 2));
    }
}
