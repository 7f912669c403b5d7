//! The one table from the core's configuration fields to their CLI flags and scenario keys, so a
//! message names what the user wrote: `--scale-interval-s` on the command line,
//! `fleet.autoscale.interval_s` in a scenario file. The match is exhaustive: a field added to the
//! core does not compile here until it is named.

use brokerlab_core::fleet::engine::batched::OVER_KV_CAPACITY;
use brokerlab_core::fleet::{Error, Field, Rule};

/// Where a field is set: its flag and its scenario key (None where there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    /// The flag, with its dashes (`--cpu-capacity`).
    pub flag: Option<&'static str>,
    /// The scenario key, dotted from the file's root (`fleet.cpu_capacity`).
    pub key: Option<&'static str>,
}

/// The flag and scenario key of `field`.
pub const fn names(field: Field) -> Names {
    let (flag, key) = match field {
        Field::Pods => (Some("--pods"), Some("fleet.pods")),
        Field::Capacity => (Some("--capacity"), Some("fleet.capacity")),
        Field::Alpha => (Some("--alpha"), Some("fleet.alpha")),
        Field::CpuCapacity => (Some("--cpu-capacity"), Some("fleet.cpu_capacity")),
        Field::PcieBytesPerS => (Some("--pcie-bytes-per-s"), Some("fleet.engine.pcie_bytes_per_s")),
        Field::PcieLatencyNs => (Some("--pcie-latency-ns"), Some("fleet.engine.pcie_latency_ns")),
        Field::CpuTierWeight => (Some("--cpu-tier-weight"), Some("fleet.engine.cpu_tier_weight")),
        Field::KvBytesPerToken => (Some("--kv-bytes-per-token"), Some("fleet.engine.kv_bytes_per_token")),
        // set by [[fleet.pool]] tables, a scenario's or those of `fleet replay --pools FILE`:
        // [`flag`] names both
        Field::Pools => (Some("--pools"), Some("fleet.pool")),
        Field::PrefillPods => (Some("--prefill-pods"), Some("fleet.pd.prefill_pods")),
        Field::PrefillCapacity => (Some("--prefill-capacity"), Some("fleet.pd.prefill_capacity")),
        Field::PdThresholdTokens => (Some("--pd-threshold-tokens"), Some("fleet.pd.threshold_tokens")),
        Field::PdLinkBytesPerS => (Some("--pd-link-bytes-per-s"), Some("fleet.pd.link_bytes_per_s")),
        Field::PdLinkLatencyNs => (Some("--pd-link-latency-ns"), Some("fleet.pd.link_latency_ns")),
        Field::Stale => (Some("--stale"), Some("fleet.stale")),
        Field::EventDelay => (Some("--event-delay-ms"), None),
        Field::SpeculativeTtl => (Some("--speculative-ttl-ms"), None),
        // set in a --router-config file, section [params]
        Field::ApproxLruBlocks => (None, Some("params.approx_lru_blocks")),
        Field::ScorerWeight => (None, Some("scorers.weight")),
        Field::Scorers => (None, Some("scorers")),
        Field::LoadAwareThreshold => (None, Some("params.load_aware_threshold")),
        Field::TokenLoadThreshold => (None, Some("params.token_load_threshold")),
        Field::NoHitLruSize => (None, Some("params.no_hit_lru_size")),
        Field::AffinityThreshold => (None, Some("params.affinity_threshold")),
        Field::MaxTtftPenaltyMs => (None, Some("params.max_ttft_penalty_ms")),
        Field::PeakPrefillTokensPerS => (None, Some("params.peak_prefill_tokens_per_s")),
        Field::OverlapScoreWeight => (None, Some("params.overlap_score_weight")),
        Field::RouterTemperature => (None, Some("params.router_temperature")),
        Field::CacheThreshold => (None, Some("params.cache_threshold")),
        Field::BalanceRelThreshold => (None, Some("params.balance_rel_threshold")),
        Field::VllmBeta => (None, Some("params.vllm_beta")),
        Field::Index => (Some("--index"), Some("fleet.index")),
        Field::Cache => (Some("--cache"), Some("fleet.cache")),
        Field::Engine => (Some("--engine"), Some("fleet.engine.model")),
        Field::Router => (Some("--router"), Some("fleet.router")),
        Field::ScaleMin => (Some("--scale-min"), Some("fleet.autoscale.min")),
        Field::ScaleInitial => (Some("--scale-initial"), Some("fleet.autoscale.initial")),
        Field::ScaleInterval => (Some("--scale-interval-s"), Some("fleet.autoscale.interval_s")),
        Field::ScaleUpQueue => (Some("--scale-up-queue"), Some("fleet.autoscale.up_queue")),
        Field::ScaleDownQueue => (Some("--scale-down-queue"), Some("fleet.autoscale.down_queue")),
        Field::ScaleStartup => (Some("--scale-startup-s"), Some("fleet.autoscale.startup_s")),
        Field::ScalePolicy => (Some("--scale-policy"), Some("fleet.autoscale.policy")),
        Field::ScaleWindow => (Some("--scale-window-s"), Some("fleet.autoscale.window_s")),
        Field::ScaleKvThreshold => (Some("--scale-kv-threshold"), Some("fleet.autoscale.kv_threshold")),
        Field::ScaleQueueThreshold => (Some("--scale-queue-threshold"), Some("fleet.autoscale.queue_threshold")),
        Field::ScaleKvSpare => (Some("--scale-kv-spare"), Some("fleet.autoscale.kv_spare")),
        Field::ScaleQueueSpare => (Some("--scale-queue-spare"), Some("fleet.autoscale.queue_spare")),
        Field::BlockSize => (Some("--block-size"), None),
        Field::TraceBlockSize => (Some("--trace-block-size"), None),
        Field::MaxNumBatchedTokens => (Some("--max-num-batched-tokens"), Some("fleet.engine.max_num_batched_tokens")),
        Field::MaxNumSeqs => (Some("--max-num-seqs"), Some("fleet.engine.max_num_seqs")),
        Field::TOverheadNs => (Some("--t-overhead-ns"), Some("fleet.engine.t_overhead_ns")),
        Field::Workload => (None, Some("workload")),
        Field::WorkloadRequests => (None, Some("workload.requests")),
        Field::WorkloadTenants => (None, Some("workload.tenants")),
        Field::WorkloadUsersPerTenant => (None, Some("workload.users_per_tenant")),
        Field::WorkloadSuffixTokens => (None, Some("workload.suffix_tokens")),
        Field::WorkloadOutputTokens => (None, Some("workload.output_tokens")),
        Field::WorkloadOutputTokensChoices => (None, Some("workload.output_tokens_choices")),
        Field::WorkloadRag => (None, Some("workload.rag")),
        Field::WorkloadBurst => (None, Some("workload.burst")),
        Field::WorkloadPopularity => (None, Some("workload.popularity")),
        Field::WorkloadStages => (None, Some("workload.stages")),
        Field::Load => (None, Some("load")),
        Field::WorkloadConversations => (None, Some("workload.conversations")),
    };
    Names { flag, key }
}

/// The flag of `field` for a message about a command line (its core name as a flag if none).
pub fn flag(field: Field) -> String {
    if field == Field::Pools {
        // a run's flags (e.g. --engine fifo) met [[fleet.pool]] tables, a scenario's or --pools'
        return "`fleet.pool` (the [[fleet.pool]] tables of the scenario or of --pools)".to_string();
    }
    names(field).flag.map_or_else(|| format!("--{field}"), str::to_string)
}

/// The scenario key of `field` for a message about a scenario file (its core name if none).
pub fn key(field: Field) -> String {
    names(field).key.map_or_else(|| field.name().to_string(), str::to_string)
}

/// What a [`Rule`] expects, naming the other setting by its flag (the core's words name it by
/// the model's). The match is exhaustive: a rule added to the core does not compile here until it
/// is worded.
pub const fn rule(r: Rule) -> &'static str {
    match r {
        Rule::PresetOrPipeline => "a preset name, or a pipeline from --router-config",
        Rule::Pipeline => "a pipeline from --router-config",
        Rule::PipelineFile => "a pipeline (--router-config FILE)",
        Rule::GlobalPool => "pods x capacity at most 4294967294 blocks with --cache global (one pool)",
        Rule::GlobalCpuTier => "0 with --cache global",
        Rule::GlobalStale => "no stale index (--stale, --event-delay-ms, --speculative-ttl-ms) with --cache global",
        Rule::GlobalIndex => "pod-tables with --cache global",
        Rule::GlobalScale => "no autoscaling with --cache global",
        Rule::OneStaleDelay => "0 with --stale (a delay in requests or in time, not both)",
    }
}

/// A configuration error's field and what it expects, in the host's words ([`rule`] for a
/// conflict between settings); any other error back.
pub fn refused(e: Error) -> Result<(Field, &'static str), Error> {
    match e {
        Error::InvalidConfig { field, expected } => Ok((field, expected)),
        Error::Conflict { field, rule: r } => Ok((field, rule(r))),
        other => Err(other),
    }
}

/// What a request over one pod's KV capacity must be, in the host's words: the core's
/// ([`OVER_KV_CAPACITY`]) names no flag; this names the one that sets the capacity.
const OVER_KV_CAPACITY_FLAG: &str =
    "input_length + output_length - 1 at most one pod's KV capacity (--capacity x 16 tokens)";

/// What a request field must be, in the host's words (the core's where it names no setting).
pub fn request_expected(expected: &'static str) -> &'static str {
    if expected == OVER_KV_CAPACITY { OVER_KV_CAPACITY_FLAG } else { expected }
}

/// A core error about one request, in the host's words ([`request_expected`]).
pub fn request_message(e: &Error) -> String {
    match *e {
        Error::InvalidRequest { field, expected } => {
            Error::InvalidRequest { field, expected: request_expected(expected) }.to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field is named somewhere, and each flag and key is spelled the way the parsers take
    /// it (flags are kebab-case, keys snake_case).
    #[test]
    fn every_field_has_a_flag_or_a_key() {
        for &f in Field::ALL {
            let n = names(f);
            assert!(n.flag.is_some() || n.key.is_some(), "{f:?}");
            if let Some(flag) = n.flag {
                assert!(flag.starts_with("--") && !flag.contains('_'), "{flag}");
            }
            if let Some(key) = n.key {
                assert!(!key.contains('-'), "{key}");
            }
        }
        assert_eq!(key(Field::CpuCapacity), "fleet.cpu_capacity");
        assert_eq!(flag(Field::ScaleInterval), "--scale-interval-s");
    }

    /// The core's refusal of a request over a pod's KV capacity names no flag; the host's says
    /// which flag sets the capacity. Other errors pass through.
    #[test]
    fn the_host_names_the_capacity_flag() {
        use brokerlab_core::fleet::RequestField;
        let e = Error::InvalidRequest { field: RequestField::InputLength, expected: OVER_KV_CAPACITY };
        assert!(!e.to_string().contains("--"), "{e}");
        assert!(request_message(&e).ends_with("(--capacity x 16 tokens)"), "{}", request_message(&e));
        let other = Error::InvalidRequest { field: RequestField::InputLength, expected: "at least 1 token" };
        assert_eq!(request_message(&other), other.to_string());
    }
}
