//! `brokerlab fleet ...`: the fleet simulator on the host.

pub mod bench;
pub mod dynamo;
pub mod engine;
pub mod engine_report;
pub mod experiments;
pub mod fields;
pub mod formats;
pub mod input;
pub mod llmd;
pub mod mooncake;
pub mod progress;
pub mod report;
pub mod route_bench;
pub mod router_config;
pub mod run;
pub mod scenario;
pub mod shard;
pub mod sweep;
pub mod sweep_batched;
pub mod trace;

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_TRACE_BLOCK_TOKENS};
use brokerlab_core::fleet::{CacheMode, Field, FleetConfig, IndexKind, RouterKind, ScalePolicy, TouchOrder, defaults};
use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};
use crate::provenance::Provenance;
use progress::{OutputArgs, Progress, Tracked, Unit};
use run::{TraceSource, render_table, simulate};

/// `brokerlab fleet` subcommands.
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
    /// Print each request's block keys (decimal u64, space-separated, one line per request) of a
    /// trace of token ids, e.g. to check them against a vLLM fleet's KV events.
    Keys(formats::KeysArgs),
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
    /// Scenario TOML file.
    pub scenario: PathBuf,
    /// Override the scenario's router (any `--router` name of `fleet replay`).
    #[arg(long, value_parser = kind(&RouterKind::NAMED, RouterKind::name, RouterKind::parse))]
    pub router: Option<RouterKind>,
    /// A shipped-router pipeline (TOML; docs/MODEL.md, "Router config files"); overrides the
    /// scenario's router and --router.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Option<PathBuf>,
    #[command(flatten)]
    pub engine: engine::EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// Run only the I-th of N disjoint slices of the points (0-based, e.g. $JOB_COMPLETION_INDEX)
    /// and write `partial.json` to --out; combine the N results with `fleet merge`.
    #[arg(long, value_name = "I/N", value_parser = shard::parse_shard)]
    pub shard: Option<shard::Shard>,
    #[command(flatten)]
    pub engine: engine::EngineArgs,
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

/// A whole number of type `T` for a flag; the message says the accepted range (clap names the
/// flag and the value). Negative numbers reach it (`allow_negative_numbers`) instead of being
/// taken for a flag.
fn whole<T: TryFrom<u64> + num_max::Max>(s: &str) -> Result<T, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| format!("expected a whole number between 0 and {}", T::MAX_STR))
}

mod num_max {
    /// The largest value of an integer type, for messages.
    pub trait Max {
        const MAX_STR: &'static str;
    }
    impl Max for u32 {
        const MAX_STR: &'static str = "4294967295";
    }
    impl Max for u64 {
        const MAX_STR: &'static str = "18446744073709551615";
    }
    impl Max for usize {
        const MAX_STR: &'static str = "18446744073709551615";
    }
}

fn parse_pods(s: &str) -> Result<usize, String> {
    let max = brokerlab_core::fleet::limits::MAX_PODS;
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 1 && v <= max as i128 => Ok(v as usize),
        _ => Err(format!("pods must be 1..={max} (the index stores pods as a 64-bit mask)")),
    }
}

fn parse_blocks(min: usize, s: &str) -> Result<usize, String> {
    let max = brokerlab_core::fleet::limits::MAX_POD_BLOCKS;
    match s.trim().parse::<i128>() {
        Ok(v) if v >= min as i128 && v <= max as i128 => Ok(v as usize),
        _ => Err(format!(
            "expected a number of 16-token blocks per pod, {min}..={max} (MAX_POD_BLOCKS: slot indices are u32)"
        )),
    }
}

fn parse_capacity(s: &str) -> Result<usize, String> {
    parse_blocks(1, s)
}

fn parse_cpu_capacity(s: &str) -> Result<usize, String> {
    parse_blocks(0, s)
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
    /// Number of pods N (1..=64).
    #[arg(long, allow_negative_numbers = true, value_parser = parse_pods)]
    pub pods: usize,
    /// Blocks (16 tokens each) per pod C (1..=4294967294).
    #[arg(long, allow_negative_numbers = true, value_parser = parse_capacity)]
    pub capacity: usize,
    /// round-robin | least-loaded | prefix-aware, or a shipped router's preset: llm-d-precise,
    /// llm-d-approximate, llm-d-load, random, gie-default, llm-d-affinity, dynamo-kv,
    /// sglang-cache-aware, vllm-loadaware (docs/MODEL.md, "Shipped routers").
    #[arg(long, value_parser = kind(&RouterKind::NAMED, RouterKind::name, RouterKind::parse), required_unless_present = "router_config")]
    pub router: Option<RouterKind>,
    /// A shipped-router pipeline or a preset with changed parameters (TOML; docs/MODEL.md,
    /// "Router config files"); overrides --router.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Option<PathBuf>,
    /// Load penalty of prefix-aware: blocks per queued request.
    #[arg(long, default_value_t = defaults::ALPHA, allow_negative_numbers = true)]
    pub alpha: f64,
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
    /// Prefill cost, ns per uncached prompt token.
    #[arg(long, default_value_t = defaults::T_PREFILL_NS, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_prefill_ns: u64,
    /// Decode cost, ns per output token.
    #[arg(long, default_value_t = defaults::T_DECODE_NS, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_decode_ns: u64,
    /// Prefix-aware index: pod-tables (ask the pods' own tables) | global (a key -> pod-mask
    /// table fed by insert/evict events). Same results; pod-tables is faster and smaller.
    #[arg(long, default_value = defaults::INDEX.name(), value_parser = kind(&IndexKind::ALL, IndexKind::name, IndexKind::parse))]
    pub index: IndexKind,
    /// Blocks per pod in a second (CPU memory) tier; 0 = none (at most 4294967294).
    #[arg(long, default_value_t = defaults::CPU_CAPACITY_BLOCKS, allow_negative_numbers = true, value_parser = parse_cpu_capacity)]
    pub cpu_capacity: usize,
    /// Cost of loading a CPU-tier block, ns per token.
    #[arg(long, default_value_t = defaults::T_CPU_NS, allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub t_cpu_ns: u64,
    /// local (each pod its own LRU of --capacity blocks) | global (one fleet-wide LRU of
    /// pods x capacity blocks every pod reads: Mooncake's global cache; docs/MODEL.md).
    #[arg(long, default_value = defaults::CACHE.name(), value_parser = kind(&CacheMode::ALL, CacheMode::name, CacheMode::parse))]
    pub cache: CacheMode,
    #[command(flatten)]
    pub scale: ScaleArgs,
}

/// Autoscaling flags (docs/MODEL.md, "Autoscaling"); `--scale-min` turns it on and `--pods` is
/// then the most pods.
#[derive(Debug, Args, Clone)]
pub struct ScaleArgs {
    /// Autoscale between this many pods and --pods (off when absent).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub scale_min: Option<u32>,
    /// Routable pods at the start (default: --scale-min).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub scale_initial: Option<u32>,
    /// Seconds between autoscaler evaluations.
    #[arg(long, default_value_t = defaults::SCALE_INTERVAL_NS as f64 / 1e9, allow_negative_numbers = true)]
    pub scale_interval_s: f64,
    /// Scale out when the mean queue length of the routable pods exceeds this.
    #[arg(long, default_value_t = defaults::SCALE_UP_MILLI as f64 / 1e3, allow_negative_numbers = true)]
    pub scale_up_queue: f64,
    /// Scale in when the mean queue length is below this.
    #[arg(long, default_value_t = defaults::SCALE_DOWN_MILLI as f64 / 1e3, allow_negative_numbers = true)]
    pub scale_down_queue: f64,
    /// Seconds from a scale-out decision until the new pod takes requests.
    #[arg(long, default_value_t = defaults::SCALE_STARTUP_NS as f64 / 1e9, allow_negative_numbers = true)]
    pub scale_startup_s: f64,
}

impl ScaleArgs {
    /// The policy for `pods` pods, or None without --scale-min; an error names the flag.
    pub fn policy(&self, pods: usize) -> CliResult<Option<ScalePolicy>> {
        let Some(min) = self.scale_min else {
            return Ok(None);
        };
        let p = Self::policy_from(
            pods,
            min,
            self.scale_initial,
            self.scale_interval_s,
            self.scale_up_queue,
            self.scale_down_queue,
            self.scale_startup_s,
        )
        .map_err(|(field, expected, got)| {
            CliError::bad_input(format!("{}: {got}: expected {expected}", fields::flag(field)))
        })?;
        Ok(Some(p))
    }

    /// Builds and checks a policy for `pods` pods from flag or scenario values; errors are
    /// (field, expected, got), named by the caller through [`fields`].
    pub fn policy_from(
        pods: usize,
        min: u32,
        initial: Option<u32>,
        interval_s: f64,
        up_queue: f64,
        down_queue: f64,
        startup_s: f64,
    ) -> Result<ScalePolicy, (Field, &'static str, String)> {
        let ns = |v: f64, field| match v {
            v if (0.0..=1e9).contains(&v) => Ok((v * 1e9).round() as u64),
            v => Err((field, "seconds between 0 and 1e9", scenario::num(v))),
        };
        let milli = |v: f64, field| match v {
            v if (0.0..=1e6).contains(&v) => Ok((v * 1000.0).round() as u32),
            v => Err((field, "a mean queue length between 0 and 1e6", scenario::num(v))),
        };
        let p = ScalePolicy {
            min_pods: min,
            initial_pods: initial.unwrap_or(min),
            interval_ns: ns(interval_s, Field::ScaleInterval)?,
            up_milli: milli(up_queue, Field::ScaleUpQueue)?,
            down_milli: milli(down_queue, Field::ScaleDownQueue)?,
            startup_ns: ns(startup_s, Field::ScaleStartup)?,
        };
        p.validate(pods).map_err(|e| match e {
            brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
                let got = match field {
                    Field::ScaleMin => min.to_string(),
                    Field::ScaleInitial => p.initial_pods.to_string(),
                    Field::ScaleInterval => scenario::num(interval_s),
                    Field::ScaleUpQueue => scenario::num(up_queue),
                    Field::ScaleStartup => scenario::num(startup_s),
                    _ => scenario::num(down_queue),
                };
                (field, expected, got)
            }
            other => (Field::ScaleMin, "a valid policy", other.to_string()),
        })?;
        Ok(p)
    }
}

fn ms_to_ns(ms: u64, flag: &str) -> CliResult<u64> {
    ms.checked_mul(1_000_000)
        .ok_or_else(|| CliError::bad_input(format!("{flag} {ms}: expected at most {} ms", u64::MAX / 1_000_000)))
}

impl FleetArgs {
    /// The core configuration.
    pub fn config(&self) -> CliResult<FleetConfig> {
        let mut cfg = FleetConfig {
            pods: self.pods,
            capacity_blocks: self.capacity,
            router: self.router.unwrap_or(RouterKind::Custom),
            alpha: self.alpha,
            stale_delay: self.stale,
            order: self.order,
            t_prefill_ns: self.t_prefill_ns,
            t_decode_ns: self.t_decode_ns,
            index: self.index,
            cpu_capacity_blocks: self.cpu_capacity,
            t_cpu_ns: self.t_cpu_ns,
            scale: self.scale.policy(self.pods)?,
            cache: self.cache,
            routing: None,
            event_delay_ns: ms_to_ns(self.event_delay_ms, "--event-delay-ms")?,
            speculative_ttl_ns: ms_to_ns(self.speculative_ttl_ms, "--speculative-ttl-ms")?,
        };
        // A trace replay has no scenario seed: the shipped routers' RNG starts from 0.
        router_config::apply(&mut cfg, self.router_config.as_deref(), 0)?;
        Ok(cfg)
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
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub engine: engine::EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// Tokens per trace hash id S.
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// Pods (1..=64).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = parse_pods)]
    pub pods: usize,
    /// Blocks per pod.
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true, value_parser = parse_capacity)]
    pub capacity: usize,
    /// Repeats per router; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Measure a sweep instead: workload generation, the points on 1 thread and on every core.
    #[arg(long)]
    pub sweep: bool,
    /// Measure one routing decision instead: a 240K-token prompt (15,000 blocks) over MAX_PODS
    /// pods, per router (time and heap allocations).
    #[arg(long, conflicts_with = "sweep")]
    pub route: bool,
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

/// Runs one `fleet` subcommand; returns the exit code.
pub fn main(cmd: FleetCmd) -> CliResult<i32> {
    match cmd {
        FleetCmd::Replay(a) => {
            crate::mem::set_budget(a.mem.max_memory);
            trace::set_max_line_bytes(a.max_line_bytes);
            if let Some(s) = a.trace_block_size {
                check_trace_block(s)?;
            }
            let cfg = a.fleet.config()?;
            cfg.validate().map_err(run::config_error)?;
            let format = formats::resolve_format(a.format, &a.trace)?;
            if format != formats::Format::Mooncake {
                if a.engine.resolve(None)?.is_some() {
                    return Err(CliError::bad_input(format!(
                        "--engine batched replays Mooncake traces only so far; {} is a {} trace (use the FIFO \
                         engine, or convert it to Mooncake lines)",
                        a.trace.display(),
                        format.name()
                    )));
                }
                return formats::replay(a, format, cfg);
            }
            formats::only_token_hash(&a.hash, format)?;
            let trace_block_size = a.trace_block_size.unwrap_or(512);
            let mut src = TraceSource { path: a.trace.clone(), trace_block_tokens: trace_block_size };
            let size = std::fs::metadata(&a.trace).ok().filter(|m| m.is_file()).map(|m| m.len());
            let progress = Progress::new(a.output.quiet, "replay", Unit::TraceBytes, size);
            let mut tracked = Tracked { inner: &mut src, progress: &progress, unit: Unit::TraceBytes };
            let mut prov = Provenance::of_this_run(a.output.no_date);
            prov.add_file("trace", &a.trace)?;
            if let Some(e) = a.engine.resolve(None)? {
                let title = format!("trace {}", a.trace.display());
                let res = engine_run(cfg, e, &mut tracked, a.engine.outcomes.as_deref());
                progress.finish();
                return engine_print(&res?, a.json.then_some(&prov), &title);
            }
            let res = simulate(cfg, &mut tracked, false);
            progress.finish();
            let res = res?;
            if a.json {
                say!("{}", prov.json_with(&res.summary));
            } else {
                say!("trace {}", a.trace.display());
                say_raw!("{}", render_table(&res.summary));
            }
            Ok(0)
        }
        FleetCmd::Run(a) => {
            crate::mem::set_budget(a.mem.max_memory);
            let sc = scenario::Scenario::load(&a.scenario)?;
            let mut cfg = sc.fleet;
            if let Some(r) = a.router {
                cfg.router = r;
                cfg.routing = None;
            }
            router_config::apply(&mut cfg, a.router_config.as_deref(), sc.workload.seed)?;
            // Streamed: the generator is seeded and sequential, so the workload is never held.
            let mut src = scenario::Streamed::new(sc.workload, &sc.origin)?;
            let progress = Progress::new(a.output.quiet, "run", Unit::Requests, Some(sc.workload.requests));
            let mut tracked = Tracked { inner: &mut src, progress: &progress, unit: Unit::Requests };
            let mut prov = Provenance::of_this_run(a.output.no_date);
            prov.add_file("scenario", &a.scenario)?;
            if let Some(e) = a.engine.resolve(sc.engine.as_ref())? {
                let title = format!("scenario {} ({})", sc.name, a.scenario.display());
                let res = engine_run(cfg, e, &mut tracked, a.engine.outcomes.as_deref());
                progress.finish();
                return engine_print(&res?, a.json.then_some(&prov), &title);
            }
            let res = simulate(cfg, &mut tracked, false);
            progress.finish();
            let res = res?;
            if a.json {
                say!("{}", prov.json_with(&res.summary));
            } else {
                say!("scenario {} ({})", sc.name, a.scenario.display());
                say_raw!("{}", render_table(&res.summary));
            }
            Ok(0)
        }
        FleetCmd::GenTrace(a) => {
            let sc = scenario::Scenario::load(&a.scenario)?;
            let mut src = scenario::Streamed::new(sc.workload, &sc.origin)?;
            let f = std::fs::File::create(&a.output)
                .map_err(|e| CliError::bad_input(format!("-o {}: cannot create: {e}", a.output.display())))?;
            let mut w = std::io::BufWriter::new(f);
            scenario::write_trace_from(&mut src, &mut w)
                .and_then(|_| std::io::Write::flush(&mut w))
                .map_err(|e| CliError::failure(format!("{}: cannot write: {e}", a.output.display())))?;
            crate::print_stderr(&format!(
                "wrote {} requests to {} (replay with --trace-block-size 16)",
                sc.workload.requests,
                a.output.display()
            ));
            Ok(0)
        }
        FleetCmd::Sweep(a) => sweep_cmd(a),
        FleetCmd::Merge(a) => merge_cmd(a),
        FleetCmd::Keys(a) => formats::keys_cmd(a),
        FleetCmd::Report(a) => {
            let progress = Progress::new(a.output.quiet, "report", Unit::Points, None);
            let prov = Provenance::of_this_run(a.output.no_date);
            let ex = experiments::report(&a.out, a.threads, a.shrink, &progress, prov)?;
            progress.finish();
            if ex.shrink > 1 {
                say!("shrunk run: every scenario ran its request count divided by {}\n", ex.shrink);
            }
            say!("{}\n", experiments::the_number(&ex));
            for (k, v) in experiments::headlines(&ex) {
                say!("{k:<52} {v}");
            }
            say!(
                "\nwrote {0}/index.html, {0}/summary.md, plots (.svg, .png), points.csv (+ points.provenance.json), \
                 experiments.json",
                a.out.display()
            );
            Ok(0)
        }
        FleetCmd::Bench(a) => {
            crate::mem::set_budget(a.mem.max_memory);
            check_trace_block(a.trace_block_size)?;
            if a.route {
                let r = route_bench::run(200, a.repeats)?;
                if a.json {
                    say!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
                } else {
                    say_raw!("{}", route_bench::render(&r));
                }
                return Ok(0);
            }
            if a.sweep {
                let s = bench::sweep_bench(a.repeats)?;
                if a.json {
                    say!("{}", serde_json::to_string_pretty(&s).expect("report serializes"));
                } else {
                    say_raw!("{}", bench::render_sweep(&s));
                }
                return Ok(0);
            }
            let py = bench::PythonModel { script: a.python_model, enabled: !a.no_python };
            let r = bench::run(a.trace, a.trace_block_size, a.pods, a.capacity, a.repeats, &py)?;
            if a.json {
                say!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
            } else {
                say_raw!("{}", bench::render(&r));
            }
            Ok(0)
        }
    }
}

/// Runs the batched engine (`--engine batched`); with `outcomes`, writes the per-request lines.
fn engine_run(
    cfg: FleetConfig,
    e: brokerlab_core::fleet::EngineConfig,
    src: &mut dyn run::RequestSource,
    outcomes: Option<&Path>,
) -> CliResult<engine::BatchedResult> {
    brokerlab_core::fleet::batched::validate(&cfg, &e).map_err(run::config_error)?;
    let res = engine::simulate_batched(cfg, e, src, outcomes.is_some())?;
    if let Some(path) = outcomes {
        engine::write_outcomes(path, &res.completions)?;
    }
    Ok(res)
}

/// Prints a batched run; `json` carries the provenance.
fn engine_print(res: &engine::BatchedResult, json: Option<&Provenance>, title: &str) -> CliResult<i32> {
    match json {
        Some(prov) => say!("{}", prov.json_with(&res.summary)),
        None => {
            say!("{title}");
            say_raw!("{}", engine::render_batched(&res.summary));
        }
    }
    Ok(0)
}

fn capacity_value(flag: &str, s: &str, fit: usize, hot: u64) -> CliResult<u64> {
    let bad = |why: &str| CliError::bad_input(format!("{flag}: capacity value `{s}`: {why}"));
    let form = "expected a number of blocks, fit, hot/K or hot*K (K a whole number >= 1)";
    let k = |t: &str| match t.parse::<u64>() {
        Ok(0) => Err(bad("K must be at least 1")),
        Ok(k) => Ok(k),
        Err(_) => Err(bad(form)),
    };
    let v = if s == "fit" {
        fit as u64
    } else if let Some(t) = s.strip_prefix("hot/") {
        hot / k(t)?
    } else if let Some(t) = s.strip_prefix("hot*") {
        hot.checked_mul(k(t)?).ok_or_else(|| bad("hot*K overflows 64 bits"))?
    } else if s == "hot" {
        hot
    } else {
        s.parse().map_err(|_| bad(form))?
    };
    let max = brokerlab_core::fleet::limits::MAX_POD_BLOCKS as u64;
    match v {
        0 => Err(bad(&format!("is 0 blocks (hot set {hot} blocks, fit {fit} blocks); expected at least 1 block"))),
        v if v > max => {
            Err(bad(&format!("is {v} blocks; expected at most {max} (MAX_POD_BLOCKS: slot indices are u32)")))
        }
        v => Ok(v),
    }
}

fn num_value(flag: &str, s: &str) -> CliResult<f64> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| CliError::bad_input(format!("{flag} `{s}`: expected a number")))
}

/// A whole, non-negative sweep value (stale, pods): never rounded or clamped silently.
fn whole_value(flag: &str, param: &str, v: f64) -> CliResult<f64> {
    if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
        Ok(v)
    } else {
        Err(CliError::bad_input(format!("{flag} {}: --param {param} takes whole numbers >= 0", scenario::num(v))))
    }
}

/// One sweep value: (parameter value, workload index, fleet configuration).
pub type SweepValue = (f64, usize, FleetConfig);

/// Parameter values of a sweep, as (value, workload index, config) with workloads generated here.
pub fn sweep_values(sc: &scenario::Scenario, a: &SweepArgs) -> CliResult<(Vec<scenario::Generated>, Vec<SweepValue>)> {
    let base = sc.fleet;
    let from = if a.from_fit { Some("fit".to_string()) } else { a.from.clone() };
    if a.steps < 2 {
        return Err(CliError::bad_input(format!("--steps {}: expected at least 2 points", a.steps)));
    }
    let range = |kind: &str| -> CliResult<Option<(String, String)>> {
        match (&from, &a.to) {
            (Some(f), Some(t)) if a.values.is_empty() => Ok(Some((f.clone(), t.clone()))),
            (None, None) if !a.values.is_empty() => Ok(None),
            _ => Err(CliError::bad_input(format!("--param {kind}: give --values, or both --from and --to"))),
        }
    };
    if a.param == "rate" {
        let milli = |flag: &str, v: f64| {
            scenario::rate_milli(v)
                .map_err(|e| CliError::bad_input(format!("{flag} {}: expected {e}", scenario::num(v))))
        };
        let millis: Vec<u64> = match range("rate")? {
            None => a
                .values
                .iter()
                .map(|v| num_value("--values", v).and_then(|x| milli("--values", x)))
                .collect::<CliResult<_>>()?,
            Some((f, t)) => {
                let (f, t) = (num_value("--from", &f)?, num_value("--to", &t)?);
                let (mf, mt) = (milli("--from", f)? as f64, milli("--to", t)? as f64);
                // Range points are rounded to the resolution (0.001 requests/s); the value
                // reported is the rate run.
                let mut v: Vec<u64> = sweep::linear(mf, mt, a.steps).into_iter().map(|x| x.round() as u64).collect();
                v.dedup();
                v
            }
        };
        let mut gens = Vec::new();
        let mut out = Vec::new();
        for (i, m) in millis.iter().enumerate() {
            let mut w = sc.workload;
            w.rate_milli_per_s = *m;
            w.validate().map_err(|e| CliError::bad_input(format!("--param rate value {}: {e}", *m as f64 / 1000.0)))?;
            gens.push(scenario::Generated::with_origin(w, &sc.origin)?);
            out.push((*m as f64 / 1000.0, i, base));
        }
        return Ok((gens, out));
    }
    let g = scenario::Generated::with_origin(sc.workload, &sc.origin)?;
    let vals: Vec<f64> = match a.param.as_str() {
        "capacity" => {
            let fit = g.distinct_blocks();
            let hot = sc.workload.hot_set_blocks();
            match range("capacity")? {
                None => a
                    .values
                    .iter()
                    .map(|v| capacity_value("--values", v, fit, hot).map(|x| x as f64))
                    .collect::<CliResult<_>>()?,
                Some((f, t)) => {
                    let (f, t) = (capacity_value("--from", &f, fit, hot)?, capacity_value("--to", &t, fit, hot)?);
                    sweep::geometric(f as f64, t as f64, a.steps).into_iter().map(|x| x as f64).collect()
                }
            }
        }
        "alpha" | "stale" | "pods" => {
            let p = a.param.as_str();
            match range(p)? {
                None => a
                    .values
                    .iter()
                    .map(|v| {
                        let x = num_value("--values", v)?;
                        if p == "alpha" { Ok(x) } else { whole_value("--values", p, x) }
                    })
                    .collect::<CliResult<_>>()?,
                Some((f, t)) => {
                    let (f, t) = (num_value("--from", &f)?, num_value("--to", &t)?);
                    if p == "alpha" {
                        sweep::linear(f, t, a.steps)
                    } else {
                        let (f, t) = (whole_value("--from", p, f)?, whole_value("--to", p, t)?);
                        let mut v: Vec<f64> = sweep::linear(f, t, a.steps).into_iter().map(f64::round).collect();
                        v.dedup();
                        v
                    }
                }
            }
        }
        other => {
            return Err(CliError::bad_input(format!("--param {other}: expected capacity, alpha, stale, pods or rate")));
        }
    };
    let mut out = Vec::new();
    for v in vals {
        let mut cfg = base;
        match a.param.as_str() {
            "capacity" => cfg.capacity_blocks = v as usize,
            "alpha" => cfg.alpha = v,
            "stale" => cfg.stale_delay = v as u32,
            _ => cfg.pods = v as usize,
        }
        cfg.validate()
            .map_err(|e| CliError::bad_input(format!("--param {} value {}: {e}", a.param, scenario::num(v))))?;
        out.push((v, 0, cfg));
    }
    Ok((vec![g], out))
}

/// Checks the memory budget of a sweep: its workloads plus one fleet per worker thread (the
/// largest point's).
fn check_sweep_memory(gens: &[scenario::Generated], specs: &[sweep::PointSpec], threads: usize) -> CliResult<()> {
    let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
    let workers = threads.min(specs.len()).max(1) as u64;
    let mut largest: Vec<crate::mem::Need> = Vec::new();
    let mut largest_total = 0u64;
    for p in specs {
        let queue = 4096;
        let pending = if p.cfg.stale_delay > 0 { ((p.cfg.stale_delay as usize + 1) * 256).min(1 << 20) } else { 0 };
        let l = brokerlab_core::fleet::FleetLayout::new(&p.cfg, queue, pending).map_err(run::config_error)?;
        let needs = crate::audit::fleet_needs(&p.cfg, &l);
        let total = needs.iter().map(|n| n.bytes).sum::<u64>();
        if total > largest_total {
            (largest, largest_total) = (needs, total);
        }
    }
    let mut needs: Vec<crate::mem::Need> = largest
        .into_iter()
        .map(|n| crate::mem::Need {
            what: format!("{} x {workers} threads", n.what),
            bytes: n.bytes.saturating_mul(workers),
            lowered_by: format!("{}, or --threads", n.lowered_by),
        })
        .collect();
    needs.push(crate::mem::Need {
        what: "generated workloads".into(),
        bytes: gens.iter().map(|g| g.bytes()).sum(),
        lowered_by: "workload.requests".into(),
    });
    crate::mem::check("the sweep", &needs)
}

fn merge_cmd(a: MergeArgs) -> CliResult<i32> {
    let parts = shard::read_all(&a.dirs)?;
    let text = if parts[0].1.engine == "batched" {
        let m = shard::merge::<sweep_batched::BatchedPoint>(parts, &a.out)?;
        shard::write_batched(&a.out, &m.scenario_name, &m.param, &m.points, &m.provenance)?
    } else {
        let m = shard::merge::<sweep::Point>(parts, &a.out)?;
        shard::write_fifo(&a.out, &m.scenario_name, &m.param, &m.points, &m.provenance)?
    };
    say_raw!("{text}");
    Ok(0)
}

fn sweep_cmd(a: SweepArgs) -> CliResult<i32> {
    crate::mem::set_budget(a.mem.max_memory);
    let sc = scenario::Scenario::load(&a.scenario)?;
    let (gens, values) = sweep_values(&sc, &a)?;
    let specs = sweep::for_each_router(&values);
    check_sweep_memory(&gens, &specs, a.threads)?;
    let mut prov = Provenance::of_this_run(a.output.no_date);
    prov.add_file("scenario", &a.scenario)?;
    let engine = a.engine.resolve(sc.engine.as_ref())?;
    if let Some(sh) = a.shard {
        // this shard's points, with their indices in the whole sweep
        let idx: Vec<usize> = (0..specs.len()).filter(|k| sh.owns(*k)).collect();
        let mine: Vec<sweep::PointSpec> = idx.iter().map(|&k| specs[k].clone()).collect();
        let p = Progress::new(
            a.output.quiet,
            &format!("sweep {} shard {}", a.param, sh.index),
            Unit::Points,
            Some(mine.len() as u64),
        );
        let kind = if engine.is_some() { "batched" } else { "fifo" };
        match engine {
            Some(e) => {
                let points = sweep_batched::run_points(&a.param, &gens, &mine, e, a.threads, &p);
                p.finish();
                let points: Vec<_> = idx.into_iter().zip(points?).collect();
                shard::write_partial(&a.out, sh, specs.len(), &prov, &sc.name, &a.param, kind, &points)?;
            }
            None => {
                let points = sweep::run_points(&a.param, &gens, &mine, a.threads, &p);
                p.finish();
                let points: Vec<_> = idx.into_iter().zip(points?).collect();
                shard::write_partial(&a.out, sh, specs.len(), &prov, &sc.name, &a.param, kind, &points)?;
            }
        }
        say!(
            "wrote {}/{} (shard {}/{}: {} of {} points); combine all shards with `brokerlab fleet merge DIR... --out OUT`",
            a.out.display(),
            shard::FILE,
            sh.index,
            sh.count,
            mine.len(),
            specs.len()
        );
        return Ok(0);
    }
    let progress = Progress::new(a.output.quiet, &format!("sweep {}", a.param), Unit::Points, Some(specs.len() as u64));
    let text = match engine {
        Some(e) => {
            let points = sweep_batched::run_points(&a.param, &gens, &specs, e, a.threads, &progress);
            progress.finish();
            shard::write_batched(&a.out, &sc.name, &a.param, &points?, &prov)?
        }
        None => {
            let points = sweep::run_points(&a.param, &gens, &specs, a.threads, &progress);
            progress.finish();
            shard::write_fifo(&a.out, &sc.name, &a.param, &points?, &prov)?
        }
    };
    say_raw!("{text}");
    Ok(0)
}
