//! Prefill/decode disaggregation (docs/MODEL.md, "Prefill/decode disaggregation"): its parameters
//! and what a request's completion says about its remote prefill. The fleet runs the flow
//! ([`crate::fleet::sim::pd`]); the batched engine parks a request on its decode pod until its KV
//! is delivered and admits it as "transferred".

use crate::fleet::base::error::{Error, Field};
use crate::fleet::base::limits::{
    BLOCK_TOKENS, MAX_LINK_BYTES_PER_S, MAX_LINK_LATENCY_NS, MAX_POD_BLOCKS, MAX_PROMPT_TOKENS, quoting,
};
use crate::fleet::cost::step::{StepCost, StepProfile};

/// Default N_T of the prefix-threshold decider, tokens (llm-d-router `pd-epp-config.yaml`).
pub const THRESHOLD_TOKENS: u64 = 16;
/// Default bandwidth of a decode pod's incoming link, bytes/s (BLIS `--pd-transfer-bandwidth`).
pub const LINK_BYTES_PER_S: u64 = 25_000_000_000;
/// Default latency added to each transfer, ns (BLIS `--pd-transfer-base-latency` 0.05 ms).
pub const LINK_LATENCY_NS: u64 = 50_000;
/// "None" in the pod fields of [`PdOutcome`].
pub const NO_POD: u32 = u32::MAX;

/// Whether a request is prefilled remotely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decider {
    /// llm-d's `prefix-based-pd-decider`: iff N_T > 0 and L - 16 x match_d >= N_T.
    PrefixThreshold,
    /// llm-d's `always-disagg-pd-decider`.
    Always,
    /// No request (BLIS `--pd-decider never`): a control.
    Never,
}

impl Decider {
    /// Every decider, in the order messages list them.
    pub const ALL: [Decider; 3] = [Decider::PrefixThreshold, Decider::Always, Decider::Never];

    /// Its name (`--pd-decider`).
    pub const fn name(self) -> &'static str {
        match self {
            Decider::PrefixThreshold => "prefix-threshold",
            Decider::Always => "always",
            Decider::Never => "never",
        }
    }

    /// The decider spelled `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// P/D parameters of a batched fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PdConfig {
    /// NP: pods 0 .. NP - 1 form the prefill pool (1 ..= N - 1).
    pub prefill_pods: u32,
    /// KV blocks of each prefill pod C_P.
    pub prefill_capacity_blocks: usize,
    /// The prefill pool's step cost (None: the decode pool's).
    pub prefill_cost: Option<(StepProfile, StepCost)>,
    /// The decider.
    pub decider: Decider,
    /// N_T of the prefix-threshold decider, tokens (0: never disaggregate).
    pub threshold_tokens: u64,
    /// Each decode pod's incoming link, bytes/s.
    pub link_bytes_per_s: u64,
    /// Added to each transfer, ns.
    pub link_latency_ns: u64,
}

impl PdConfig {
    /// NP prefill pods with every other parameter at its default (C_P = `capacity_blocks`).
    pub const fn new(prefill_pods: u32, capacity_blocks: usize) -> Self {
        PdConfig {
            prefill_pods,
            prefill_capacity_blocks: capacity_blocks,
            prefill_cost: None,
            decider: Decider::PrefixThreshold,
            threshold_tokens: THRESHOLD_TOKENS,
            link_bytes_per_s: LINK_BYTES_PER_S,
            link_latency_ns: LINK_LATENCY_NS,
        }
    }

    /// Checks every field against its limit for a fleet of `pods` pods.
    pub fn validate(&self, pods: usize) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.prefill_pods == 0 || self.prefill_pods as usize >= pods {
            return bad(Field::PrefillPods, "between 1 and --pods - 1 (0: no disaggregation)");
        }
        if self.prefill_capacity_blocks == 0 || self.prefill_capacity_blocks > MAX_POD_BLOCKS {
            return bad(Field::PrefillCapacity, quoting!("between 1 and 4294967294 blocks", MAX_POD_BLOCKS));
        }
        if self.threshold_tokens > MAX_PROMPT_TOKENS {
            return bad(Field::PdThresholdTokens, quoting!("between 0 and 16777216 tokens", MAX_PROMPT_TOKENS));
        }
        if self.link_bytes_per_s == 0 || self.link_bytes_per_s > MAX_LINK_BYTES_PER_S {
            return bad(
                Field::PdLinkBytesPerS,
                quoting!("between 1 and 10000000000000 bytes per second", MAX_LINK_BYTES_PER_S),
            );
        }
        if self.link_latency_ns > MAX_LINK_LATENCY_NS {
            return bad(Field::PdLinkLatencyNs, quoting!("at most 1000000000000 ns", MAX_LINK_LATENCY_NS));
        }
        if let Some((_, c)) = &self.prefill_cost {
            c.validate()?;
        }
        Ok(())
    }

    /// Whether a request with `input_tokens` tokens and `matched_blocks` blocks held by its
    /// decode pod is prefilled remotely.
    pub fn disaggregates(&self, input_tokens: u64, matched_blocks: u64) -> bool {
        match self.decider {
            Decider::Always => true,
            Decider::Never => false,
            Decider::PrefixThreshold => {
                let uncached = input_tokens.saturating_sub(BLOCK_TOKENS as u64 * matched_blocks);
                self.threshold_tokens > 0 && uncached >= self.threshold_tokens
            }
        }
    }
}

/// What a request's completion says about P/D (all "none" without it). For a prefill job's
/// completion (on a prefill pod), `decode_pod` and `decode_slot` say where its request waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PdOutcome {
    /// The prefill pod ([`NO_POD`]: not disaggregated).
    pub prefill_pod: u32,
    /// queue_len of the prefill pod when the request was routed.
    pub prefill_queue_len: u32,
    /// The decode pod's GPU hit at the transferred admission, tokens.
    pub decode_hit_tokens: u64,
    /// Bytes transferred.
    pub transfer_bytes: u64,
    /// Delivery - end of the prefill, ns.
    pub transfer_ns: u64,
    /// A prefill job's decode pod ([`NO_POD`] otherwise).
    pub decode_pod: u32,
    /// A prefill job's request slot on its decode pod.
    pub decode_slot: u32,
}

impl PdOutcome {
    /// Not disaggregated.
    pub const NONE: PdOutcome = PdOutcome {
        prefill_pod: NO_POD,
        prefill_queue_len: 0,
        decode_hit_tokens: 0,
        transfer_bytes: 0,
        transfer_ns: 0,
        decode_pod: NO_POD,
        decode_slot: 0,
    };

    /// Whether the request was prefilled remotely.
    pub const fn disaggregated(&self) -> bool {
        self.prefill_pod != NO_POD
    }
}

impl Default for PdOutcome {
    fn default() -> Self {
        PdOutcome::NONE
    }
}
