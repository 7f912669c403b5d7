//! The linear step cost and its built-in profiles (docs/MODEL.md, "One step", "Step-cost
//! profiles"): `t_overhead + t_prefill_token P + t_decode_seq D + t_kv_token K` over a step's
//! [`BatchShape`] (BLIS's beta0, beta1, beta2 and a per-context-token term).

use super::shape::BatchShape;
use crate::fleet::base::error::{Error, Quantity};

/// The linear model's coefficients, integer ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LinearCost {
    /// Fixed cost of a step, ns (at least 1, so time always advances).
    pub t_overhead_ns: u64,
    /// Per prefill token computed, ns.
    pub t_prefill_token_ns: u64,
    /// Per request decoding in the step, ns.
    pub t_decode_seq_ns: u64,
    /// Per context token held by the step's scheduled requests (c + n each), ns.
    pub t_kv_token_ns: u64,
}

impl LinearCost {
    /// The time of a step of batch `s`, ns: P = its prefill tokens, D = its decoding requests,
    /// K = the context its requests hold after the step (cached + new tokens).
    pub fn step_ns(&self, s: &BatchShape) -> Result<u64, Error> {
        let over = Error::Overflow { what: Quantity::StepTime };
        let context = s
            .prefill_cached
            .checked_add(s.prefill_tokens)
            .and_then(|v| v.checked_add(s.decode_cached))
            .and_then(|v| v.checked_add(s.decode_requests))
            .ok_or(over)?;
        let a = self.t_prefill_token_ns.checked_mul(s.prefill_tokens).ok_or(over)?;
        let b = self.t_decode_seq_ns.checked_mul(s.decode_requests).ok_or(over)?;
        let k = self.t_kv_token_ns.checked_mul(context).ok_or(over)?;
        self.t_overhead_ns.checked_add(a).and_then(|v| v.checked_add(b)).and_then(|v| v.checked_add(k)).ok_or(over)
    }
}

/// Built-in linear profiles (sources in docs/MODEL.md, "Step-cost profiles").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Profile {
    /// Qwen3-32B on 2 x H100, TP=2: llm-d's prefill calibration (15,928 tok/s on one 8,192-token
    /// chunk); overhead and decode borrowed from BLIS's llama-3.3-70b H100 TP=4 fit (assumption).
    #[cfg_attr(feature = "serde", serde(rename = "qwen3-32b-h100x2"))]
    Qwen3_32bH100x2,
    /// BLIS v0.6.0 llama-3.1-8b-instruct, H100, TP=1.
    #[cfg_attr(feature = "serde", serde(rename = "llama-3.1-8b-h100"))]
    Llama31_8bH100,
    /// The FIFO engine's prefill cost (50 us per token), no decode cost, 1 ns per step.
    #[cfg_attr(feature = "serde", serde(rename = "seed"))]
    Seed,
}

impl core::fmt::Display for Profile {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl Profile {
    /// All profiles, default first.
    pub const ALL: [Profile; 3] = [Profile::Qwen3_32bH100x2, Profile::Llama31_8bH100, Profile::Seed];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            Profile::Qwen3_32bH100x2 => "qwen3-32b-h100x2",
            Profile::Llama31_8bH100 => "llama-3.1-8b-h100",
            Profile::Seed => "seed",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The profile's coefficients.
    pub const fn coefficients(self) -> LinearCost {
        match self {
            // 12,601,270 + 8,192 x 61,244 = 514,312,118 ns for one 8,192-token chunk, i.e.
            // 15,928 tok/s as llm-d calibrates it (8192 / 15928 s = 514,314,415 ns).
            Profile::Qwen3_32bH100x2 => LinearCost {
                t_overhead_ns: 12_601_270,
                t_prefill_token_ns: 61_244,
                t_decode_seq_ns: 66_844,
                t_kv_token_ns: 0,
            },
            Profile::Llama31_8bH100 => LinearCost {
                t_overhead_ns: 5_752_710,
                t_prefill_token_ns: 17_251,
                t_decode_seq_ns: 5_999,
                t_kv_token_ns: 0,
            },
            Profile::Seed => {
                LinearCost { t_overhead_ns: 1, t_prefill_token_ns: 50_000, t_decode_seq_ns: 0, t_kv_token_ns: 0 }
            }
        }
    }
}
