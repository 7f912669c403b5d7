//! Everything that can go wrong in the fleet core, and the names an error carries: the
//! configuration field ([`Field`]), the caller buffer ([`Buffer`]), the request field
//! ([`RequestField`]), the fixed capacity ([`Limit`]) or the quantity ([`Quantity`]).

use core::fmt;

/// Everything that can go wrong in the fleet core. Small on purpose: each variant names the field,
/// buffer or limit involved so the host can turn it into a message that says what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of range.
    InvalidConfig {
        /// The configuration field (the host maps it to its flag and scenario key).
        field: Field,
        /// What is accepted.
        expected: &'static str,
    },
    /// A configuration value refused because of another setting ([`Rule`]); the core names the
    /// settings in its own words, the host names them as the user gave them (flags, keys).
    Conflict {
        /// The field refused.
        field: Field,
        /// The rule it breaks.
        rule: Rule,
    },
    /// A caller-provided buffer has the wrong length.
    BufferSize {
        /// Which buffer.
        buffer: Buffer,
        /// The length required by [`FleetLayout`].
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A fixed capacity was exhausted while running (the caller may retry with a larger buffer).
    CapacityExceeded {
        /// The named limit that was hit.
        limit: Limit,
        /// Its capacity.
        capacity: usize,
    },
    /// A request is inconsistent with the model.
    InvalidRequest {
        /// The request field.
        field: RequestField,
        /// What is accepted.
        expected: &'static str,
    },
    /// A trace line has fewer hash ids than its full blocks need.
    TooFewHashIds {
        /// Hash ids needed to cover `floor(input_length / 16)` blocks.
        needed: usize,
        /// Hash ids present.
        got: usize,
    },
    /// Requests must arrive in non-decreasing time order.
    ArrivalOutOfOrder {
        /// Arrival of the previous request, ns.
        previous_ns: u64,
        /// Arrival of this request, ns.
        arrival_ns: u64,
    },
    /// An integer computation would overflow `u64` (absurd lengths or times).
    Overflow {
        /// The quantity that overflowed.
        what: Quantity,
    },
    /// An internal invariant did not hold (a bug): the call stops before it could index out of
    /// bounds or report a wrong result, and the fleet is poisoned.
    Invariant {
        /// The invariant.
        what: Invariant,
    },
    /// A previous call failed half-way; this fleet's state is no longer meaningful.
    Poisoned,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::InvalidConfig { field, expected } => write!(f, "invalid {field}: expected {expected}"),
            Error::Conflict { field, rule } => write!(f, "invalid {field}: expected {rule}"),
            Error::BufferSize { buffer, expected, got } => {
                write!(f, "buffer `{buffer}` has length {got}, expected {expected}")
            }
            Error::CapacityExceeded { limit, capacity } => {
                write!(f, "limit `{limit}` exceeded (capacity {capacity})")
            }
            Error::InvalidRequest { field, expected } => write!(f, "request field `{field}`: expected {expected}"),
            Error::TooFewHashIds { needed, got } => write!(
                f,
                "field `hash_ids`: has {got} ids but input_length needs at least {needed} (one per trace block)"
            ),
            Error::ArrivalOutOfOrder { previous_ns, arrival_ns } => write!(
                f,
                "field `timestamp`: arrival {arrival_ns} ns is before the previous request's {previous_ns} ns (must not decrease)"
            ),
            Error::Overflow { what } => write!(f, "{what} overflows 64-bit integers"),
            Error::Invariant { what } => write!(f, "internal invariant broken: {what} (a bug; please report it)"),
            Error::Poisoned => f.write_str("the fleet failed earlier and must be rebuilt"),
        }
    }
}

impl core::error::Error for Error {}

/// Declares a fieldless enum with `name()` (its spelling in messages: the CLI's for configuration
/// fields, the TOML key's for the cost model's), `ALL`, `parse` and `Display`; the fleet's and the
/// cost model's named enums all come from here.
macro_rules! named_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        $vis enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// Its spelling (in messages; the CLI's or a TOML key's).
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }

            /// The variant spelled `s`.
            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.name() == s)
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use named_enum;

named_enum! {
    /// A configuration field the core checks ([`Error::InvalidConfig`]). The host maps each one to
    /// its CLI flag and its scenario key in one table (`host/src/fleet/fields.rs`); the name here is
    /// the flag without its dashes, as the core's own messages print it.
    pub enum Field {
        /// N, [`FleetConfig::pods`].
        Pods => "pods",
        /// C, [`FleetConfig::capacity_blocks`].
        Capacity => "capacity",
        /// [`FleetConfig::alpha`].
        Alpha => "alpha",
        /// [`FleetConfig::cpu_capacity_blocks`].
        CpuCapacity => "cpu-capacity",
        /// P/D: the prefill pool's size.
        PrefillPods => "prefill-pods",
        /// P/D: KV blocks of each prefill pod.
        PrefillCapacity => "prefill-capacity",
        /// P/D: the prefix-threshold decider's N_T.
        PdThresholdTokens => "pd-threshold-tokens",
        /// P/D: each decode pod's incoming link.
        PdLinkBytesPerS => "pd-link-bytes-per-s",
        /// P/D: latency added to each transfer.
        PdLinkLatencyNs => "pd-link-latency-ns",
        /// The offload tier's host-to-device bandwidth (`Offload::pcie_bytes_per_s`).
        PcieBytesPerS => "pcie-bytes-per-s",
        /// The offload tier's load latency (`Offload::pcie_latency_ns`).
        PcieLatencyNs => "pcie-latency-ns",
        /// The tiered prefix score's CPU weight (`Offload::cpu_tier_weight_milli`).
        CpuTierWeight => "cpu-tier-weight",
        /// KV bytes of one token of a pod (`Offload::kv_bytes_per_token`).
        KvBytesPerToken => "kv-bytes-per-token",
        /// Heterogeneous pools ([`FleetConfig::pools`], `[[fleet.pool]]`).
        Pools => "pools",
        /// [`FleetConfig::stale_delay`].
        Stale => "stale",
        /// [`FleetConfig::event_delay_ns`].
        EventDelay => "event-delay-ms",
        /// [`FleetConfig::speculative_ttl_ns`].
        SpeculativeTtl => "speculative-ttl-ms",
        /// The approximate prefix index's LRU size per pod ([`RouterParams::approx_lru_blocks`]).
        ApproxLruBlocks => "approx-lru-blocks",
        /// A scorer's weight in a router config.
        ScorerWeight => "weight",
        /// The scorers of a router config.
        Scorers => "scorers",
        /// [`RouterParams::load_aware_threshold`].
        LoadAwareThreshold => "load-aware-threshold",
        /// [`RouterParams::token_load_threshold`].
        TokenLoadThreshold => "token-load-threshold",
        /// [`RouterParams::no_hit_lru_size`].
        NoHitLruSize => "no-hit-lru-size",
        /// [`RouterParams::affinity_threshold`].
        AffinityThreshold => "affinity-threshold",
        /// [`RouterParams::max_ttft_penalty_ms`].
        MaxTtftPenaltyMs => "max-ttft-penalty-ms",
        /// [`RouterParams::peak_prefill_tokens_per_s`].
        PeakPrefillTokensPerS => "peak-prefill-tokens-per-s",
        /// [`RouterParams::overlap_score_weight`].
        OverlapScoreWeight => "overlap-score-weight",
        /// [`RouterParams::router_temperature`].
        RouterTemperature => "router-temperature",
        /// [`RouterParams::cache_threshold`].
        CacheThreshold => "cache-threshold",
        /// [`RouterParams::balance_rel_threshold`].
        BalanceRelThreshold => "balance-rel-threshold",
        /// [`RouterParams::vllm_beta`].
        VllmBeta => "vllm-beta",
        /// Which engine the pods run (a fleet built for another engine's configuration).
        Engine => "engine",
        /// [`FleetConfig::index`].
        Index => "index",
        /// [`FleetConfig::cache`].
        Cache => "cache",
        /// The router's choice (a custom router picked a pod that does not exist).
        Router => "router",
        /// [`ScalePolicy::min_pods`].
        ScaleMin => "scale-min",
        /// [`ScalePolicy::initial_pods`].
        ScaleInitial => "scale-initial",
        /// [`ScalePolicy::interval_ns`].
        ScaleInterval => "scale-interval",
        /// [`ScalePolicy::up_milli`].
        ScaleUpQueue => "scale-up-queue",
        /// [`ScalePolicy::down_milli`] (must be below `up_milli`).
        ScaleDownQueue => "scale-down-queue",
        /// [`ScalePolicy::startup_ns`].
        ScaleStartup => "scale-startup",
        /// The scaling rule (queue-target: the FIFO engine's; wva-saturation: the batched engine's).
        ScalePolicy => "scale-policy",
        /// [`WvaThresholds::window_ns`].
        ScaleWindow => "scale-window",
        /// [`WvaThresholds::kv_threshold_ppm`].
        ScaleKvThreshold => "scale-kv-threshold",
        /// [`WvaThresholds::queue_threshold_milli`].
        ScaleQueueThreshold => "scale-queue-threshold",
        /// [`WvaThresholds::kv_spare_ppm`].
        ScaleKvSpare => "scale-kv-spare",
        /// [`WvaThresholds::queue_spare_milli`].
        ScaleQueueSpare => "scale-queue-spare",
        /// The vLLM block size (tokens per hashed block).
        BlockSize => "block-size",
        /// S, tokens per trace hash id.
        TraceBlockSize => "trace-block-size",
        /// [`EngineConfig::max_num_batched_tokens`].
        MaxNumBatchedTokens => "max-num-batched-tokens",
        /// [`EngineConfig::max_num_seqs`].
        MaxNumSeqs => "max-num-seqs",
        /// The batched engine's fixed step cost.
        TOverheadNs => "t-overhead-ns",
        /// The generated workload as a whole.
        Workload => "workload",
        /// [`workload::WorkloadSpec::requests`].
        WorkloadRequests => "workload.requests",
        /// [`workload::WorkloadSpec::tenants`].
        WorkloadTenants => "workload.tenants",
        /// [`workload::WorkloadSpec::users_per_tenant`].
        WorkloadUsersPerTenant => "workload.users_per_tenant",
        /// The suffix length range.
        WorkloadSuffixTokens => "workload.suffix_tokens",
        /// The output length range.
        WorkloadOutputTokens => "workload.output_tokens",
        /// The output length choices.
        WorkloadOutputTokensChoices => "workload.output_tokens_choices",
        /// The RAG documents.
        WorkloadRag => "workload.rag",
        /// The burst.
        WorkloadBurst => "workload.burst",
        /// The popularity law ([`workload::Popularity`]).
        WorkloadPopularity => "workload.popularity",
        /// The rate stages ([`workload::Stage`]).
        WorkloadStages => "workload.stages",
        /// The load generator ([`crate::fleet::loadgen::LoadSpec`]).
        Load => "load",
        /// The conversation-replay workload ([`crate::fleet::conversation::ConversationSpec`]).
        WorkloadConversations => "workload.conversations",
    }
}

named_enum! {
    /// A fixed capacity a run can exhaust ([`Error::CapacityExceeded`]); the host grows the
    /// buffer behind it and retries, or reports it.
    pub enum Limit {
        /// Queued requests tracked per pod ([`FifoServer`]).
        QueuePerPod => "queue per pod",
        /// Evictions waiting out the stale delay ([`PendingEvicts`]).
        PendingEvictions => "pending evictions",
        /// Distinct keys of the global block index ([`BlockIndex`]).
        IndexKeys => "index keys",
        /// Running requests per pod of the batched engine.
        RequestsPerPod => "requests per pod",
        /// Prompt keys of the tracked requests per pod of the batched engine.
        KeysPerPod => "keys per pod",
        /// The caller's own storage (a sink that cannot grow its vectors).
        CallerMemory => "host memory",
        /// KV transfers in flight (P/D: joins, transfers on one decode pod's link, deliveries).
        PdTransfers => "kv transfers in flight",
    }
}

named_enum! {
    /// A quantity whose computation would overflow `u64` ([`Error::Overflow`]).
    pub enum Quantity {
        /// A FIFO request's service time (prefill, CPU-tier loads and decode).
        ServiceTime => "service time",
        /// A FIFO request's finish time.
        FinishTime => "finish time",
        /// A batched step's duration.
        StepTime => "step time",
        /// A batched step's token and attention sums.
        BatchShape => "batch shape",
        /// A batched step's end time.
        StepEndTime => "step end time",
        /// The autoscaler's next evaluation.
        AutoscalerEvaluationTime => "autoscaler evaluation time",
        /// A booting pod's ready time.
        PodReadyTime => "pod ready time",
        /// The global index's key count (pods x capacity).
        IndexSize => "index size",
    }
}

named_enum! {
    /// A caller-provided buffer whose length is wrong ([`Error::BufferSize`]); the name is the
    /// one its messages print.
    pub enum Buffer {
        /// The LRU pods' slots (FIFO fleet).
        Slots => "slots",
        /// The load generator's client slots.
        ClientSlots => "client slots",
        /// The LRU pods' key tables (FIFO fleet).
        Tables => "tables",
        /// One LRU pod's key table.
        PodTable => "pod table",
        /// The FIFO servers' queues.
        Queues => "queues",
        /// One FIFO server's queue.
        Queue => "queue",
        /// The CPU tier's slots.
        CpuSlots => "cpu slots",
        /// P/D: the decode pods' links.
        PdLinks => "pd links",
        /// The CPU tier's key tables.
        CpuTables => "cpu tables",
        /// The global block index.
        Index => "index",
        /// The batched fleet's first-key index.
        HeadIndex => "head index",
        /// The batched engines' changed-key logs.
        KeyLogs => "key logs",
        /// The stale view's pending-evict rings.
        Pending => "pending",
        /// The stale view's pending-evict tables.
        PendingTable => "pending table",
        /// One pending-evict FIFO's table.
        PendingEvictTable => "pending-evict table",
        /// The run-length replay's runs.
        Runs => "runs",
        /// The run-length replay's group tables.
        RunTables => "run tables",
        /// One run-length pod's group table.
        RunTable => "run table",
        /// The approximate router's LRU slots.
        RouterSlots => "router slots",
        /// The approximate router's key tables.
        RouterTables => "router tables",
        /// The approximate router's index.
        RouterIndex => "router index",
        /// The batched engines' KV blocks.
        EngineBlocks => "engine blocks",
        /// The batched engines' cache maps.
        EngineTables => "engine tables",
        /// One batched engine's cache map.
        EngineTable => "engine table",
        /// The batched engines' cache maps kept per trace id (group tables, records, slots).
        EngineGroups => "engine groups",
        /// The batched engines' group keys (one per record).
        EngineGroupKeys => "engine group keys",
        /// The batched engines' request slots.
        EngineRequests => "engine requests",
        /// The batched engines' waiting rings.
        EngineWaiting => "engine waiting",
        /// The batched engines' running slots.
        EngineRunning => "engine running",
        /// The batched engines' prompt keys.
        EngineKeys => "engine keys",
        /// The batched engines' blocks per prompt key (parallel to their prompt keys, or empty).
        EngineKeyBlocks => "engine key blocks",
        /// The WVA autoscaler's per-pod state (one entry per pod with autoscaling, none without).
        ScalePods => "autoscaler pods",
        /// A request's block keys.
        Keys => "keys",
        /// The workload generator's Zipf CDF.
        ZipfCdf => "zipf cdf",
        /// The workload generator's prompt tokens.
        Tokens => "tokens",
    }
}

named_enum! {
    /// A field of a request the core refuses ([`Error::InvalidRequest`]), as trace formats name it.
    pub enum RequestField {
        /// The prompt length L.
        InputLength => "input_length",
        /// The output length O.
        OutputLength => "output_length",
        /// The request's block keys.
        Keys => "keys",
    }
}

named_enum! {
    /// An invariant the core keeps in every build ([`Error::Invariant`]), checked where breaking
    /// it would index out of bounds or corrupt a result.
    pub enum Invariant {
        /// A batched step that schedules nothing waits for a load of the offload tier.
        EmptyStep => "a step that schedules nothing has a request loading",
        /// P/D: a prefill job's request waits parked on its decode pod.
        ParkedRequest => "a prefill job's request is parked on its decode pod",
        /// A batched engine's pinned and free blocks add up to its capacity C.
        PinnedPlusFree => "pinned + free blocks = capacity",
        /// A batched engine caches at most C blocks.
        CachedBlocks => "cached blocks <= capacity",
        /// A batched engine's block references are the blocks its running requests hold.
        HeldReferences => "references = blocks held by running requests",
        /// A batched engine runs at most max_num_seqs requests.
        RunningSlots => "running requests <= max_num_seqs",
        /// A running request's hit blocks stay cached while it holds them.
        HitBlockCached => "a held hit block stays cached",
        /// A cached block's key is in the engine's cache map.
        MappedKey => "a cached block's key is in the cache map",
        /// A run-length cache holds at most C + 1 runs (C between requests, one more while a
        /// group is pushed).
        RunSlots => "runs held <= capacity + 1",
        /// A held run's group is in the run-length cache's table.
        RunGroupMapped => "a held run's group is in the run table",
        /// The least recent run is its group's last (oldest) run.
        RunLastOfGroup => "the least recent run is its group's last",
        /// A grouped batched pod's cached sub-blocks of each group are a prefix, the free ones a
        /// suffix of it, the higher nearer the free queue's head (docs/MODEL.md, "Run-length KV
        /// blocks", Invariant (I)).
        GroupPrefix => "a group's cached sub-blocks are a prefix, its free ones a suffix (I)",
        /// A batched engine's unfinished request is in its waiting queue or running batch.
        TrackedRequest => "an unfinished request is waiting or running",
    }
}

named_enum! {
    /// A rule between two settings ([`Error::Conflict`]): what the refused field must be given
    /// the other setting, in the core's words (the host has its own, naming its flags and keys).
    pub enum Rule {
        /// A shipped router needs its preset or a pipeline.
        PresetOrPipeline => "a preset name, or a pipeline from a router config",
        /// A custom router needs a pipeline.
        Pipeline => "a pipeline from a router config",
        /// A custom router's configuration needs its pipeline.
        PipelineFile => "a pipeline (a router config file)",
        /// A global cache is one pool of pods x capacity blocks.
        GlobalPool => "pods x capacity at most 4294967294 blocks with a global cache (one pool)",
        /// A global cache has no CPU tier.
        GlobalCpuTier => "0 with a global cache",
        /// A global cache has no stale view.
        GlobalStale => "no stale index (a delay in requests or in time, or speculative entries) with a global cache",
        /// A global cache needs no index.
        GlobalIndex => "pod-tables with a global cache",
        /// A global cache does not autoscale.
        GlobalScale => "no autoscaling with a global cache",
        /// A stale view delays in requests or in time.
        OneStaleDelay => "0 with a stale delay in requests (a delay in requests or in time, not both)",
    }
}

// The pool's limit, quoted in GlobalPool's words.
const _: () = assert!(
    crate::fleet::base::limits::mentions(Rule::GlobalPool.name(), crate::fleet::base::limits::MAX_POD_BLOCKS as u64),
    "Rule::GlobalPool does not quote MAX_POD_BLOCKS"
);
