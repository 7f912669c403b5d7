//! The `fleet` command line: clap arguments of every subcommand and their value parsers.

use std::path::PathBuf;

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_TRACE_BLOCK_TOKENS};
use brokerlab_core::fleet::{
    CacheMode, EngineConfig, FifoConfig, FleetConfig, IndexKind, RouterKind, TouchOrder, ViewConfig, defaults,
};
use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};
use crate::fleet::cli::engine_args::EngineArgs;
use crate::fleet::cli::flag::{parse_capacity, parse_cpu_capacity, whole};
use crate::fleet::cli::router_config;
pub use crate::fleet::cli::scale_args::ScaleArgs;
use crate::fleet::input::{formats, trace};
use crate::fleet::run::progress::OutputArgs;
use crate::fleet::sweep::shard;

/// `brokerlab fleet` subcommands.
// parsed once per process: the size of the replay variant (its many flags) does not matter
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Replay a trace (Mooncake, Bailian, Dynamo sessions or token ids) through N pods and a
    /// router; print the metrics.
    Replay(ReplayArgs),
    /// Measure core throughput (requests/s, block touches/s) and memory per cached block.
    Bench(BenchArgs),
    /// Run one scenario file (workload + fleet + router + timing).
    Run(RunArgs),
    /// Write a scenario's workload as a Mooncake JSONL trace (trace block size 16).
    GenTrace(GenTraceArgs),
    /// Sweep one parameter of a scenario for every router; write CSV, JSON and plots.
    Sweep(SweepArgs),
    /// Combine the partial results of `fleet sweep --shard I/N` runs into the files one sweep
    /// writes.
    Merge(MergeArgs),
    /// Run the standard experiments on built-in scenarios; write an HTML report and a summary.
    Report(ReportArgs),
    /// The published llm-d tables reproduced at full size: every cell simulated / published /
    /// error, the medians, a chart per table (docs/PUBLISHED.md).
    Tables(super::tables::TablesArgs),
    /// Print each request's block keys (decimal u64, space-separated, one line per request) of a
    /// trace of token ids, e.g. to check them against a vLLM fleet's KV events.
    Keys(formats::KeysArgs),
    /// Fit a physics step-cost profile to a step log (CSV) of your own server.
    Calibrate(crate::fleet::cost::CalibrateArgs),
    /// The physics step cost against published measurements: "What the cost model says, and how
    /// wrong it is".
    CostCheck(crate::fleet::cost::CostCheckArgs),
    /// Every router (presets and router config files) on one workload (a trace, a scenario or an
    /// inference-perf config), in parallel; writes a page (HTML + Markdown), plots and JSON.
    Compare(super::compare::CompareArgs),
    /// Write another tool's workload configuration as a scenario file (inference-perf).
    #[command(subcommand)]
    Import(super::import::ImportCmd),
}

/// `fleet report` arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Output directory.
    #[arg(long, default_value = "out/report")]
    pub out: PathBuf,
    /// Worker threads (0 = all cores). Results do not depend on it.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Divide every scenario's request count by this (quick look; default 1 = full size).
    #[arg(long, default_value_t = 1)]
    pub shrink: u64,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The memory budget flag (host/src/mem.rs).
#[derive(Debug, Args, Clone)]
pub struct MemArgs {
    /// Most bytes a run may allocate, checked before allocating (e.g. 500000000, 512M, 4G);
    /// default: the available memory (or `ulimit -v`) less 1/8, at least 256 MiB less.
    #[arg(long, value_name = "BYTES", value_parser = crate::mem::parse_size)]
    pub max_memory: Option<u64>,
}

/// `fleet run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario TOML file (or --inference-perf).
    #[arg(required_unless_present = "inference_perf")]
    pub scenario: Option<PathBuf>,
    /// An inference-perf config (YAML) instead of a scenario, imported as `fleet import
    /// inference-perf` does (with --pods and --capacity; --engine batched --profile P for the
    /// batched engine).
    #[arg(long, value_name = "FILE.yml", conflicts_with = "scenario", requires_all = ["pods", "capacity"])]
    pub inference_perf: Option<PathBuf>,
    /// Override the scenario's pods.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_pods)]
    pub pods: Option<usize>,
    /// Override the scenario's KV blocks (16 tokens) per pod.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_capacity)]
    pub capacity: Option<usize>,
    /// Multiply every arrival rate (the workload's rate, burst and stages, `[load]`'s stages) by
    /// X, a decimal; each scaled rate must be a whole number of milli-requests/s.
    #[arg(long, value_name = "X")]
    pub rate_scale: Option<String>,
    /// Override the scenario's router (any `--router` name of `fleet replay`).
    #[arg(long, value_parser = kind(&RouterKind::NAMED, RouterKind::name, RouterKind::parse))]
    pub router: Option<RouterKind>,
    /// A shipped-router pipeline (TOML; docs/MODEL.md, "Router config files"); overrides the
    /// scenario's router and --router.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the results under `vllm bench serve`'s key names and units (JSON; batched
    /// engine; docs/MODEL.md, "--report-json").
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Also write the results as llm-d-benchmark's benchmark report, schema v0.1 (JSON;
    /// batched engine; docs/MODEL.md, "--report-llmd").
    #[arg(long, value_name = "FILE")]
    pub report_llmd: Option<PathBuf>,
    /// Also plot the per-stage results of a `[load]` scenario into DIR: `stages_ttft` (TTFT p50
    /// and p90 per stage) and `stages_tok_s` (output and input tok/s per stage), SVG and PNG.
    #[arg(long, value_name = "DIR")]
    pub stages_plot: Option<PathBuf>,
    /// Threads (0 = all cores): with 2 or more, the workload is generated and hashed on a thread
    /// of its own while the fleet replays it on this one (open-loop workloads without `[load]`);
    /// 1 does both on one thread. Results do not depend on it.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<usize>)]
    pub threads: usize,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fleet gen-trace` arguments.
#[derive(Debug, Args)]
pub struct GenTraceArgs {
    /// Scenario TOML file.
    pub scenario: PathBuf,
    /// Output JSONL file.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

/// `fleet sweep` arguments.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Scenario TOML file.
    pub scenario: PathBuf,
    /// capacity | alpha | stale | pods | rate
    #[arg(long)]
    pub param: String,
    /// Explicit values, comma separated (capacity also accepts fit, hot/K, hot*K).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub values: Vec<String>,
    /// First value of a range (capacity: fit, hot/K, hot*K or a number).
    #[arg(long, allow_negative_numbers = true)]
    pub from: Option<String>,
    /// Same as --from fit.
    #[arg(long)]
    pub from_fit: bool,
    /// Last value of a range.
    #[arg(long, allow_negative_numbers = true)]
    pub to: Option<String>,
    /// Points in the range, at least 2 (geometric for capacity, linear otherwise).
    #[arg(long, default_value_t = 12, allow_negative_numbers = true, value_parser = parse_steps)]
    pub steps: usize,
    /// Worker threads (0 = all cores). Results do not depend on it.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<usize>)]
    pub threads: usize,
    /// Output directory.
    #[arg(long, default_value = "out/sweep")]
    pub out: PathBuf,
    /// Routers to sweep, comma separated: any `--router` name of `fleet replay`, shipped presets
    /// included (default: round-robin, least-loaded, prefix-aware). The points' `router` names it.
    #[arg(long, value_delimiter = ',', value_parser = kind(&RouterKind::NAMED, RouterKind::name, RouterKind::parse))]
    pub router: Vec<RouterKind>,
    /// Router config files (TOML; docs/MODEL.md, "Router config files") swept after the
    /// routers, repeatable; a point is named by its router kind (`custom` for a changed
    /// pipeline), so two runs of one name are refused.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Vec<PathBuf>,
    /// Run only the I-th of N disjoint slices of the points (0-based, e.g. $JOB_COMPLETION_INDEX)
    /// and write `partial.json` to --out; combine the N results with `fleet merge`.
    #[arg(long, value_name = "I/N", value_parser = shard::parse_shard)]
    pub shard: Option<shard::Shard>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fleet merge` arguments.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' output directories (each holds a `partial.json`), in any order.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Output directory: the files a one-machine sweep with this `--out` writes.
    #[arg(long, default_value = "out/sweep")]
    pub out: PathBuf,
}

fn parse_pods(s: &str) -> Result<usize, String> {
    let max = brokerlab_core::fleet::limits::MAX_PODS;
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 1 && v <= max as i128 => Ok(v as usize),
        _ => Err(format!("pods must be 1..={max} (MAX_PODS)")),
    }
}

/// Most repeats of a benchmark (`fleet bench --repeats`).
pub const MAX_REPEATS: usize = 1000;

fn parse_repeats(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 1 && v <= MAX_REPEATS as i128 => Ok(v as usize),
        _ => Err(format!("expected 1 to {MAX_REPEATS} repeats (the best of them is reported)")),
    }
}

/// Most points of a `--from`/`--to` range.
pub const MAX_SWEEP_STEPS: usize = 10_000;

fn parse_steps(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 2 && v <= MAX_SWEEP_STEPS as i128 => Ok(v as usize),
        _ => Err(format!("expected at least 2 points (a range has two ends), at most {MAX_SWEEP_STEPS}")),
    }
}

/// A clap parser for one of the core's kinds (router, index, cache, order): the core's names are
/// the possible values (listed in `--help` and in the error), the core's `parse` turns one into
/// the enum. One place parses each kind; no name is compared here.
fn kind<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
    parse: fn(&str) -> Option<T>,
) -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(all.iter().map(|&k| name(k)))
        .try_map(move |s| parse(&s).ok_or("a possible value the core does not parse"))
}

/// The fleet and model parameters shared by replay and the scenario commands.
#[derive(Debug, Args, Clone)]
pub struct FleetArgs {
    /// Number of pods N (1..=1024, MAX_PODS); with --pools, the pools' sum (when given it must
    /// equal it).
    #[arg(long, allow_negative_numbers = true, value_parser = parse_pods, required_unless_present = "pools")]
    pub pods: Option<usize>,
    /// Heterogeneous pools (batched engine): a TOML file of `[[fleet.pool]]` tables with a
    /// scenario's pool keys (name, pods, role, capacity, profile, max_num_seqs, ...; docs/MODEL.md,
    /// "Heterogeneous pools"); each key a pool leaves out is the flags' value.
    #[arg(long, value_name = "FILE.toml")]
    pub pools: Option<PathBuf>,
    /// Blocks (16 tokens each) per pod C (1..=4294967294); with --engine batched and a physics
    /// --profile, derived from the profile when absent (vLLM's rule, docs/MODEL.md).
    #[arg(long, allow_negative_numbers = true, value_parser = parse_capacity)]
    pub capacity: Option<usize>,
    /// round-robin | least-loaded | prefix-aware, or a shipped router's preset: llm-d-precise,
    /// llm-d-approximate, llm-d-load, random, gie-default, llm-d-affinity, dynamo-kv,
    /// sglang-cache-aware, vllm-loadaware (docs/MODEL.md, "Shipped routers").
    #[arg(long, value_parser = kind(&RouterKind::NAMED, RouterKind::name, RouterKind::parse), required_unless_present_any = ["router_config", "routing_scorers"])]
    pub router: Option<RouterKind>,
    /// A shipped-router pipeline or a preset with changed parameters (TOML; docs/MODEL.md,
    /// "Router config files"); overrides --router.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Option<PathBuf>,
    /// Inline scorers, BLIS-style: "precise-prefix-cache:2,kv-cache-utilization:1,queue:1" is
    /// the router config file of those `[[scorers]]` (docs/MODEL.md, "Router config files").
    #[arg(long, value_name = "NAME:W,...", conflicts_with = "router_config")]
    pub routing_scorers: Option<String>,
    /// Load penalty of prefix-aware: blocks per queued request (default 1; prefix-aware only:
    /// any other router is exit 2).
    #[arg(long, allow_negative_numbers = true)]
    pub alpha: Option<f64>,
    /// Stale-evict delay k, in requests (0 = exact index).
    #[arg(long, default_value_t = defaults::STALE_DELAY, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub stale: u32,
    /// Staleness in time: the exact index learns of each store and eviction D ms after it
    /// happens (KV events in flight; 0 = at once; not with --stale).
    #[arg(long, value_name = "D", default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub event_delay_ms: u64,
    /// llm-d's speculative entries: a routed request's blocks count as held by its pod for T ms
    /// unless a real store confirms them (0 = off).
    #[arg(long, value_name = "T", default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub speculative_ttl_ms: u64,
    /// tail-first | in-order
    #[arg(long, default_value = defaults::ORDER.name(), value_parser = kind(&TouchOrder::ALL, TouchOrder::name, TouchOrder::parse))]
    pub order: TouchOrder,
    /// FIFO engine: prefill cost, ns per uncached prompt token (default 50000; the batched engine
    /// costs steps by --profile, so there it is exit 2).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_prefill_ns: Option<u64>,
    /// FIFO engine: decode cost, ns per output token (default 0; exit 2 with --engine
    /// batched).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_decode_ns: Option<u64>,
    /// Prefix-aware index: pod-tables (ask the pods' own tables) | global (a key -> pod-mask
    /// table fed by insert/evict events). Same results; pod-tables is faster and smaller.
    #[arg(long, default_value = defaults::INDEX.name(), value_parser = kind(&IndexKind::ALL, IndexKind::name, IndexKind::parse))]
    pub index: IndexKind,
    /// Blocks per pod in a second (CPU memory) tier; 0 = none (at most 4294967294).
    #[arg(long, default_value_t = defaults::CPU_CAPACITY_BLOCKS, allow_negative_numbers = true, value_parser = parse_cpu_capacity)]
    pub cpu_capacity: usize,
    /// FIFO engine: cost of loading a CPU-tier block, ns per token (default 5000; the batched
    /// engine's offload tier is costed by --pcie-bytes-per-s and --pcie-latency-ns).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_cpu_ns: Option<u64>,
    /// local (each pod its own LRU of --capacity blocks) | global (one fleet-wide LRU of
    /// pods x capacity blocks every pod reads: Mooncake's global cache; docs/MODEL.md).
    #[arg(long, default_value = defaults::CACHE.name(), value_parser = kind(&CacheMode::ALL, CacheMode::name, CacheMode::parse))]
    pub cache: CacheMode,
    #[command(flatten)]
    pub scale: ScaleArgs,
}

fn ms_to_ns(ms: u64, flag: &str) -> CliResult<u64> {
    ms.checked_mul(1_000_000)
        .ok_or_else(|| CliError::bad_input(format!("{flag} {ms}: expected at most {} ms", u64::MAX / 1_000_000)))
}

impl FleetArgs {
    /// Refuses a flag the chosen router or engine would ignore (exit 2 naming the flag and
    /// why); `batched` is `--engine batched`. docs/BAD_INPUT.md, "Flags that do not apply".
    pub fn check_applies(&self, batched: bool) -> CliResult<()> {
        self.scale.check_rule(batched)?;
        if self.alpha.is_some() && self.router != Some(RouterKind::PrefixAware) {
            let router = if self.router_config.is_some() {
                "a --router-config pipeline".to_string()
            } else if self.routing_scorers.is_some() {
                "a --routing-scorers pipeline".to_string()
            } else {
                format!("--router {}", self.router.map_or("custom", RouterKind::name))
            };
            return Err(CliError::bad_input(format!(
                "--alpha: applies to --router prefix-aware only (its load penalty, blocks per queued request); {router} does not read it"
            )));
        }
        if batched {
            for (flag, given) in [
                ("--t-prefill-ns", self.t_prefill_ns.is_some()),
                ("--t-decode-ns", self.t_decode_ns.is_some()),
                ("--t-cpu-ns", self.t_cpu_ns.is_some()),
            ] {
                if given {
                    return Err(CliError::bad_input(format!(
                        "{flag}: a FIFO-engine cost; --engine batched costs its steps by --profile (and the offload tier by --pcie-bytes-per-s / --pcie-latency-ns)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The core configuration; `derived` is the capacity a physics profile gives when
    /// --capacity is absent; `pools` the --pools table (read from `pools_file`).
    pub fn config(
        &self,
        derived: Option<usize>,
        pools: Option<(&'static [brokerlab_core::fleet::Pool], &str)>,
    ) -> CliResult<FleetConfig> {
        let sum = pools.map(|(t, _)| t.iter().map(|p| p.pods as usize).sum::<usize>());
        let pods = match (self.pods, sum) {
            (Some(n), Some(s)) if n != s => {
                let file = pools.map_or("", |p| p.1);
                return Err(CliError::bad_input(format!(
                    "--pods {n}: expected {s}, the pods of the pools in --pools {file} (or leave --pods out)"
                )));
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => return Err(CliError::bad_input("--pods: required (or --pools FILE)")),
        };
        // with every pool setting its own capacity, the fleet's (which no pod then uses) is the
        // smallest pool's
        let all_set = pools.and_then(|(t, _)| t.iter().map(|p| p.capacity_blocks).collect::<Option<Vec<_>>>());
        let capacity = self.capacity.or(derived).or_else(|| all_set.and_then(|c| c.into_iter().min())).ok_or_else(|| {
            CliError::bad_input(if pools.is_some() {
                "--capacity: required (blocks per pod) for the pools that set no `capacity`, unless a physics --profile derives it"
            } else {
                "--capacity: required (blocks per pod), unless --engine batched with a physics --profile derives it"
            })
        })?;
        let engine = FifoConfig {
            t_prefill_ns: self.t_prefill_ns.unwrap_or(defaults::T_PREFILL_NS),
            t_decode_ns: self.t_decode_ns.unwrap_or(defaults::T_DECODE_NS),
            order: self.order,
            cpu_capacity_blocks: self.cpu_capacity,
            t_cpu_ns: self.t_cpu_ns.unwrap_or(defaults::T_CPU_NS),
            cache: self.cache,
        };
        let view = ViewConfig {
            index: self.index,
            stale_delay: self.stale,
            event_delay_ns: ms_to_ns(self.event_delay_ms, "--event-delay-ms")?,
            speculative_ttl_ns: ms_to_ns(self.speculative_ttl_ms, "--speculative-ttl-ms")?,
        };
        let scale = self.scale.policy(pods)?;
        let mut cfg = FleetConfig {
            pods,
            capacity_blocks: capacity,
            router: self.router.unwrap_or(RouterKind::Custom),
            alpha: self.alpha.unwrap_or(defaults::ALPHA),
            routing: None,
            pools: pools.map(|p| p.0).unwrap_or_default(),
            engine: EngineConfig::Fifo { engine, view, scale },
        };
        // A trace replay has no scenario seed: the shipped routers' RNG starts from 0.
        match &self.routing_scorers {
            Some(list) => router_config::apply_scorers(&mut cfg, list, 0)?,
            None => router_config::apply(&mut cfg, self.router_config.as_deref(), 0)?,
        }
        Ok(cfg)
    }

    /// Refuses a flag of the routers' view of the caches (`--stale`, `--event-delay-ms`,
    /// `--speculative-ttl-ms`, `--index global`) when the router of `cfg` reads no index of the
    /// pods' caches: the view is never built, so the flag would change nothing (exit 2 naming
    /// the flag and why). docs/BAD_INPUT.md, "Flags that do not apply". Under `--engine
    /// batched` (`batched`) the engine refuses them itself (its index is exact).
    pub fn check_index_applies(&self, cfg: &FleetConfig, batched: bool) -> CliResult<()> {
        if batched || cfg.uses_exact_index() {
            return Ok(());
        }
        let router = if self.router_config.is_some() {
            "a --router-config pipeline without a precise prefix scorer".to_string()
        } else if self.routing_scorers.is_some() {
            "a --routing-scorers pipeline without a precise prefix scorer".to_string()
        } else {
            format!("--router {}", cfg.router.name())
        };
        for (flag, given) in [
            (format!("--stale {}", self.stale), self.stale > 0),
            (format!("--event-delay-ms {}", self.event_delay_ms), self.event_delay_ms > 0),
            (format!("--speculative-ttl-ms {}", self.speculative_ttl_ms), self.speculative_ttl_ms > 0),
            ("--index global".to_string(), self.index != IndexKind::PodTables),
        ] {
            if given {
                return Err(CliError::bad_input(format!(
                    "{flag}: applies to a router that reads the index of the pods' caches (prefix-aware, a precise-prefix-cache scorer, dynamo-kv); {router} reads none, so it would change nothing"
                )));
            }
        }
        Ok(())
    }
}

/// `fleet replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// JSONL trace, plain or gzip/zstd-compressed (detected from the first bytes).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format (docs/MODEL.md, "Trace formats"); detected from the first line when omitted.
    #[arg(long, value_enum)]
    pub format: Option<formats::Format>,
    /// Tokens per trace hash id S (a multiple of 16; default 512, bailian 16).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub trace_block_size: Option<u32>,
    #[command(flatten)]
    pub hash: formats::HashArgs,
    /// Longest trace line accepted, bytes (the longest valid line is about 23 MB: 1,048,576 ids
    /// of up to 20 digits).
    #[arg(long, value_name = "BYTES", default_value_t = trace::DEFAULT_MAX_LINE_BYTES, value_parser = crate::mem::parse_size)]
    pub max_line_bytes: u64,
    /// Most blank lines accepted in the trace; one more is exit 2 (a trace of little but empty
    /// lines is likely damaged, and reading it costs time for nothing).
    #[arg(long, value_name = "N", default_value_t = trace::DEFAULT_MAX_BLANK_LINES, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub max_blank_lines: u64,
    /// Replay the arrivals X times faster (0.5: twice slower), exactly in integer ns:
    /// floor((t - start) / X) (Dynamo's `arrival_speedup_ratio`; Mooncake traces).
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub speedup: Option<String>,
    /// Skip the requests that arrive before S seconds; the replay's time 0 is there.
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub start_at: Option<String>,
    /// Replay at most N requests (from --start-at).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub max_requests: Option<u64>,
    /// Threads (0 = all cores): with 2 or more, a Mooncake trace is read, parsed and hashed on a
    /// thread of its own while the fleet replays it on this one; 1 does both on one thread.
    /// Results do not depend on it.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = whole::<usize>)]
    pub threads: usize,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the results under `vllm bench serve`'s key names and units (JSON; batched
    /// engine; docs/MODEL.md, "--report-json").
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Also write the results as llm-d-benchmark's benchmark report, schema v0.1 (JSON;
    /// batched engine; docs/MODEL.md, "--report-llmd").
    #[arg(long, value_name = "FILE")]
    pub report_llmd: Option<PathBuf>,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fleet bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Trace to replay (plain, gzip or zstd; the default is the vendored copy, relative to the
    /// repository root).
    #[arg(long, default_value = "traces/conversation_trace.jsonl.zst")]
    pub trace: PathBuf,
    /// A second trace on which every batched replay is checked equal with and without
    /// fast-forward (the default is the other vendored trace).
    #[arg(long, default_value = "traces/synthetic_trace.jsonl.zst")]
    pub identity_trace: PathBuf,
    /// Tokens per trace hash id S.
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// Pods (1..=1024, MAX_PODS).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = parse_pods)]
    pub pods: usize,
    /// Blocks per pod.
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true, value_parser = parse_capacity)]
    pub capacity: usize,
    /// Repeats per router (1..=1000); the best is reported.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = parse_repeats)]
    pub repeats: usize,
    /// Measure a sweep instead: workload generation, the points on 1 thread and on every core.
    #[arg(long)]
    pub sweep: bool,
    /// Measure one routing decision instead: a 240K-token prompt (15,000 blocks) over 64 and
    /// over MAX_PODS (1,024) pods, per router (time and heap allocations).
    #[arg(long, conflicts_with = "sweep")]
    pub route: bool,
    /// Measure the scale instead: a generated trace (--scale-requests, streamed) on --scale-pods
    /// pods with llm-d-precise under the batched engine: wall time, simulated requests/s, peak
    /// RSS at 1/8, 1/4, 1/2 and all of the trace.
    #[arg(long, conflicts_with_all = ["sweep", "route", "sweep_configs"])]
    pub scale: bool,
    /// Requests of the --scale trace.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(8..=100_000_000))]
    pub scale_requests: u64,
    /// Pods of the --scale fleet (1..=1024, MAX_PODS).
    #[arg(long, default_value_t = brokerlab_core::fleet::limits::MAX_PODS, allow_negative_numbers = true, value_parser = parse_pods)]
    pub scale_pods: usize,
    /// Measure a capacity-planning sweep instead: N batched configurations of --trace (evenly
    /// spaced over a 1,000-point grid of routers x pods x rates x KV sizes), the trace parsed
    /// once and shared, on 1 thread and on every core.
    #[arg(long, value_name = "N", conflicts_with_all = ["sweep", "route"], value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub sweep_configs: Option<u64>,
    /// Which thread counts --sweep-configs runs.
    #[arg(long, value_enum, default_value_t = crate::fleet::bench::sweep_configs::ThreadSplit::Split)]
    pub sweep_threads: crate::fleet::bench::sweep_configs::ThreadSplit,
    /// The Python model the replays are compared with (run only when python3 is present).
    #[arg(long, default_value = "tests/reference/fleet_model.py")]
    pub python_model: PathBuf,
    /// Do not run the Python model.
    #[arg(long)]
    pub no_python: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub mem: MemArgs,
}

pub(crate) fn check_trace_block(s: u32) -> CliResult<()> {
    brokerlab_core::fleet::keys::check_trace_block_tokens(s).map_err(|_| {
        CliError::bad_input(format!(
            "--trace-block-size {s}: expected a non-zero multiple of {BLOCK_TOKENS}, at most {MAX_TRACE_BLOCK_TOKENS}"
        ))
    })
}
