//! `brokerlab fleet compare`: every router on one workload (a trace, a scenario or an
//! inference-perf config), in parallel, written as one page (HTML and Markdown from one source),
//! plots, and a JSON file.

pub mod page;

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::{EngineConfig, FleetConfig, RouterKind, defaults};
use clap::Args;
use serde::Serialize;

use self::page::Block;
use super::router_config;
use crate::error::{CliError, CliResult};
use crate::fleet::report::llmd;
use crate::fleet::run::progress::{OutputArgs, Progress, Unit};
use crate::fleet::run::{self, RunSummary, TraceSource};
use crate::fleet::scenario::engine::{self, EngineKind};
use crate::fleet::scenario::{self, inference_perf};
use crate::plot::{Chart, Series};
use crate::provenance::Provenance;

/// Blocks per pod of a trace compare without `--capacity` and without a physics profile: llm-d's
/// pod (Qwen3-32B on 2 x H100, 307,328 KV tokens), the pod the default step-cost profile
/// `qwen3-32b-h100x2` was calibrated on.
pub const DEFAULT_CAPACITY_BLOCKS: usize = 19_208;

/// Output tok/s is plotted per router only when the best is this many times the worst (else
/// the page says the spread in words).
const TOK_S_PLOT_SPREAD: f64 = 1.01;

/// Pixels per router in a bar chart, so the routers' names (up to 18 characters) fit side by side.
const BAR_GROUP_PX: u32 = 125;

/// Most runs (routers x pod counts) one compare makes.
pub const MAX_RUNS: usize = 512;

/// `fleet compare` arguments.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A scenario TOML file (or use --trace / --inference-perf).
    pub scenario: Option<PathBuf>,
    /// A Mooncake JSONL trace (plain, gzip or zstd).
    #[arg(long, conflicts_with_all = ["scenario", "inference_perf"])]
    pub trace: Option<PathBuf>,
    /// Tokens per trace hash id S (with --trace).
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// An inference-perf config (YAML), imported as `fleet import inference-perf` does.
    #[arg(long, value_name = "FILE.yml", conflicts_with = "scenario")]
    pub inference_perf: Option<PathBuf>,
    /// Routers: `all` (every named router) or a comma-separated list of `--router` names.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub routers: Vec<String>,
    /// A router config file (TOML; docs/MODEL.md, "Router config files"), run beside the
    /// routers; repeatable.
    #[arg(long, value_name = "FILE.toml")]
    pub router_config: Vec<PathBuf>,
    /// Pod counts, comma separated (several: plots against pods). Default: the scenario's.
    #[arg(long, value_delimiter = ',')]
    pub pods: Vec<usize>,
    /// KV blocks (16 tokens) per pod. Default: the scenario's; for a trace, a physics profile's
    /// derived capacity, else 19208 (llm-d's Qwen3-32B pod).
    #[arg(long)]
    pub capacity: Option<usize>,
    /// Load penalty alpha of prefix-aware.
    #[arg(long, default_value_t = defaults::ALPHA)]
    pub alpha: f64,
    /// CPU-tier blocks per pod: the batched engine's offload tier (docs/MODEL.md, "The KV offload
    /// tier"), the FIFO engine's CPU tier; 0 = none. Default: the scenario's (none for a trace).
    #[arg(long, allow_negative_numbers = true, value_parser = crate::fleet::cli::flag::parse_cpu_capacity)]
    pub cpu_capacity: Option<usize>,
    /// With --trace: heterogeneous pools, `[[fleet.pool]]` tables as `fleet replay --pools`
    /// reads them (batched engine; the pods are the pools'). A scenario has its own.
    #[arg(long, value_name = "FILE.toml", requires = "trace")]
    pub pools: Option<PathBuf>,
    /// With --trace: autoscaling, as `fleet replay` takes it (`--scale-min` turns it on, each
    /// pod count is then the most pods). A scenario has its own `[fleet.autoscale]`.
    #[command(flatten)]
    pub scale: crate::fleet::cli::scale_args::ScaleArgs,
    #[command(flatten)]
    pub engine: crate::fleet::cli::engine_args::EngineArgs,
    /// Worker threads (0 = all cores). Results do not depend on it.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Output directory (index.html, summary.md, plots, compare.json).
    #[arg(long, default_value = "out/compare")]
    pub out: PathBuf,
    /// Also write every run's results under `vllm bench serve`'s key names (JSON; batched engine).
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Also write every run as llm-d-benchmark's benchmark report v0.1: a JSON array of one
    /// report per run (batched engine; docs/MODEL.md, "--report-llmd").
    #[arg(long, value_name = "FILE")]
    pub report_llmd: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What the runs share.
enum Workload {
    /// A trace file and its S; parsed and hashed once when every run can share it in memory
    /// (else each run reads the file).
    Trace(PathBuf, u32, Option<Box<run::ParsedTrace>>),
    Scenario(Box<scenario::Scenario>),
    /// A scenario with `[load]`: its data set (generated once, shared by every run) sent by the
    /// load generator, as `fleet run` does.
    Load(Box<(scenario::Generated, brokerlab_core::fleet::loadgen::LoadSpec)>),
}

/// One run's configuration.
struct Spec {
    label: String,
    pods: usize,
    cfg: FleetConfig,
}

/// One run's figures (None: the engine does not measure it).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Router (preset name or the config file's pipeline).
    pub router: String,
    /// Pods.
    pub pods: usize,
    /// TTFT percentiles, s (batched engine).
    pub ttft_p50_s: Option<f64>,
    /// p90.
    pub ttft_p90_s: Option<f64>,
    /// p99.
    pub ttft_p99_s: Option<f64>,
    /// ITL p50, s.
    pub itl_p50_s: Option<f64>,
    /// ITL p90, s.
    pub itl_p90_s: Option<f64>,
    /// End-to-end (the FIFO engine's latency) p90, s.
    pub e2e_p90_s: Option<f64>,
    /// Output tokens / makespan.
    pub output_tok_per_s: Option<f64>,
    /// Hit tokens / input tokens.
    pub hit_rate: Option<f64>,
    /// Preemptions (batched engine).
    pub preemptions: Option<u64>,
    /// SLO goodput, requests/s meeting every `--slo-*` given (absent without one).
    pub goodput_req_per_s: Option<f64>,
    /// Requests per pod.
    pub per_pod_requests: Vec<u64>,
    /// Busiest pod's requests / a fair share.
    pub max_share: f64,
    /// "pinned", "skewed" or "no" (the death-spiral check).
    pub spiral: &'static str,
    /// Requests.
    pub requests: u64,
    /// Makespan, s.
    pub makespan_s: f64,
    /// The batched engine's autoscaling (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<crate::fleet::run::summary::BatchedAutoscale>,
    /// P/D's keys, as `fleet run --json` writes them (absent without P/D).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub pd: Option<crate::fleet::run::deploy::PdKeys>,
    /// The offload tier's keys (absent without a tier).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub offload: Option<crate::fleet::run::deploy::OffloadKeys>,
    /// The SLO goodput keys, as an object (absent without an SLO; `goodput_req_per_s` above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<crate::fleet::run::deploy::SloKeys>,
    /// Heterogeneous pools: one entry per pool (absent without pools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_pool: Option<Vec<crate::fleet::run::deploy::PoolKeys>>,
}

fn row(label: &str, pods: usize, s: &RunSummary) -> Row {
    match s {
        RunSummary::Batched(b) => Row {
            router: label.into(),
            pods,
            ttft_p50_s: b.ttft_p50,
            ttft_p90_s: b.ttft_p90,
            ttft_p99_s: b.ttft_p99,
            itl_p50_s: b.itl_p50,
            itl_p90_s: b.itl_p90,
            e2e_p90_s: b.e2e_p90,
            output_tok_per_s: b.output_tok_per_s,
            hit_rate: b.hit_rate,
            preemptions: Some(b.preemptions),
            goodput_req_per_s: b.slo.as_ref().and_then(|g| g.goodput_req_per_s),
            max_share: llmd::max_share(&b.per_pod_requests),
            spiral: llmd::spiral(&b.per_pod_requests),
            per_pod_requests: b.per_pod_requests.clone(),
            requests: b.requests,
            makespan_s: b.makespan_s,
            autoscale: b.autoscale.clone(),
            pd: b.pd.clone(),
            offload: b.offload.clone(),
            slo: b.slo.clone(),
            per_pool: b.per_pool.clone(),
        },
        RunSummary::Fifo(f) => Row {
            router: label.into(),
            pods,
            ttft_p50_s: None,
            ttft_p90_s: None,
            ttft_p99_s: None,
            itl_p50_s: None,
            itl_p90_s: None,
            e2e_p90_s: f.latency_p90,
            output_tok_per_s: (f.makespan_s > 0.0).then(|| f.output_tokens as f64 / f.makespan_s),
            hit_rate: f.hit_rate,
            preemptions: None,
            goodput_req_per_s: f.slo.as_ref().and_then(|g| g.goodput_req_per_s),
            max_share: llmd::max_share(&f.per_pod_requests),
            spiral: llmd::spiral(&f.per_pod_requests),
            per_pod_requests: f.per_pod_requests.clone(),
            requests: f.requests,
            makespan_s: f.makespan_s,
            autoscale: None,
            pd: None,
            offload: None,
            slo: f.slo.clone(),
            per_pool: None,
        },
    }
}

/// The routers `--routers` names (`all`: every named router), in the core's order.
fn routers(names: &[String]) -> CliResult<Vec<RouterKind>> {
    if names.iter().any(|n| n == "all") {
        if names.len() > 1 {
            return Err(CliError::bad_input("--routers: `all` or a list of names, not both"));
        }
        return Ok(RouterKind::NAMED.to_vec());
    }
    let mut out = Vec::new();
    for n in names.iter().filter(|n| !n.is_empty()) {
        let r = RouterKind::parse(n.trim()).ok_or_else(|| {
            CliError::bad_input(format!(
                "--routers {n}: expected `all` or names of {}",
                RouterKind::NAMED.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Runs `fleet compare`; returns the exit code.
pub fn main(a: CompareArgs) -> CliResult<i32> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(p) = &a.scenario {
        inputs.push(("the scenario", p));
    }
    if let Some(p) = &a.trace {
        inputs.push(("--trace", p));
    }
    if let Some(p) = &a.inference_perf {
        inputs.push(("--inference-perf", p));
    }
    for p in &a.router_config {
        inputs.push(("--router-config", p));
    }
    crate::outfile::check_output_dir("--out", &a.out, &inputs)?;
    if let Some(j) = &a.report_json {
        crate::outfile::check_output("--report-json", j, &inputs)?;
    }
    if let Some(j) = &a.report_llmd {
        crate::outfile::check_output("--report-llmd", j, &inputs)?;
    }
    if a.engine.outcomes.is_some() {
        return Err(CliError::bad_input("--outcomes: not with fleet compare (one file per run; use fleet replay)"));
    }
    brokerlab_core::fleet::keys::check_trace_block_tokens(a.trace_block_size).map_err(|_| {
        CliError::bad_input(format!(
            "--trace-block-size {}: expected a non-zero multiple of {}, at most {}",
            a.trace_block_size,
            brokerlab_core::fleet::limits::BLOCK_TOKENS,
            brokerlab_core::fleet::limits::MAX_TRACE_BLOCK_TOKENS
        ))
    })?;
    let mut prov = Provenance::of_this_run(a.output.no_date);

    // the workload and the fleet it comes with (and a scenario's [slo])
    let mut scenario_slo = None;
    let mut scenario_scale: Option<scenario::Scenario> = None;
    let (workload, base, scenario_engine, name) = if let Some(t) = &a.trace {
        prov.add_file("trace", t)?;
        if let Some(p) = &a.pools {
            prov.add_file("pools", p)?;
        }
        (Workload::Trace(t.clone(), a.trace_block_size, None), None, None, format!("trace {}", t.display()))
    } else if let Some(ip) = &a.inference_perf {
        prov.add_file("inference-perf config", ip)?;
        let text = std::fs::read_to_string(ip)
            .map_err(|e| CliError::bad_input(format!("{}: cannot read: {e}", ip.display())))?;
        let pods = *a.pods.first().ok_or_else(|| CliError::bad_input("--pods: required with --inference-perf"))?;
        let capacity = a.capacity.ok_or_else(|| CliError::bad_input("--capacity: required with --inference-perf"))?;
        let flags = inference_perf::FleetFlags {
            pods,
            capacity,
            router: defaults::ROUTER.name().into(),
            alpha: a.alpha,
            profile: None,
            seed: defaults::WORKLOAD_SEED,
            requests: None,
            name: None,
        };
        let imp = inference_perf::import(&text, &ip.display().to_string(), &flags)?;
        for n in &imp.notes {
            crate::print_stderr(&format!("note: {n}"));
        }
        let sc = imp.scenario.without_conversations("fleet compare")?;
        let name = format!("inference-perf {}", ip.display());
        (workload_of(&sc)?, Some(sc.fleet), sc.engine.clone(), name)
    } else if let Some(p) = &a.scenario {
        prov.add_file("scenario", p)?;
        let sc = scenario::Scenario::load(p)?;
        let name = format!("scenario {} ({})", sc.name, p.display());
        scenario_slo = sc.slo;
        scenario_scale = Some(sc.clone());
        (workload_of(&sc)?, Some(sc.fleet), sc.engine.clone(), name)
    } else {
        return Err(CliError::bad_input("a workload: a SCENARIO file, --trace FILE or --inference-perf FILE"));
    };
    let seed = match &workload {
        Workload::Scenario(sc) => sc.workload.seed,
        Workload::Load(l) => l.0.spec.seed,
        Workload::Trace(..) => llmd::TRACE_ROUTER_SEED,
    };

    // the engine: batched unless --engine fifo (TTFT, ITL and preemptions need it)
    let mut eargs = a.engine.clone();
    eargs.engine = Some(eargs.engine.unwrap_or(EngineKind::Batched));
    // --pools (a trace's; the flags fill what a pool leaves out, as in fleet replay)
    let pools_file = a.pools.as_deref().map(scenario::pools::PoolsFile::read).transpose()?;
    let (batched, pool_table) = match &pools_file {
        None => (eargs.resolve(scenario_engine.as_ref())?, None),
        Some(f) => {
            if eargs.engine != Some(EngineKind::Batched) {
                return Err(CliError::bad_input(format!(
                    "--pools {}: only with the batched engine (the FIFO engine has no pools)",
                    f.origin
                )));
            }
            let (t, s) = scenario::pools::with_flags(f, eargs.settings())?;
            (Some(s.config(&|k| format!("--{}", k.replace('_', "-")))?), Some(t))
        }
    };
    if let Some(sc) = &scenario_scale {
        sc.check_scale_engine(batched.is_some())?;
    }
    a.scale.check_rule(batched.is_some())?;
    if a.scale.scale_min.is_some() && base.is_some() {
        return Err(CliError::bad_input(
            "--scale-min: with --trace only (a scenario autoscales by its [fleet.autoscale])",
        ));
    }
    let batched = match batched {
        Some(mut e) => {
            if let Some(c) = a.cpu_capacity {
                // (parse_cpu_capacity bounds it to u32)
                e.offload.cpu_capacity = c as u32;
            }
            a.scale.apply_wva(&mut e)?;
            Some(e)
        }
        None => None,
    };
    let derived = match &batched {
        Some(e) => engine::derived_capacity(e, "--profile")?,
        None => None,
    };
    let capacity = match (a.capacity, &base) {
        (Some(c), _) => c,
        (None, Some(b)) => b.capacity_blocks,
        (None, None) => derived.unwrap_or(DEFAULT_CAPACITY_BLOCKS),
    };
    let pool_pods = pool_table.map(|t| t.iter().map(|p| p.pods as usize).sum::<usize>());
    let pods_list: Vec<usize> = match (&a.pods[..], &base) {
        ([], Some(b)) => vec![b.pods],
        ([], None) => match pool_pods {
            Some(n) => vec![n],
            None => {
                return Err(CliError::bad_input("--pods: required with --trace (e.g. --pods 8 or --pods 4,8,16)"));
            }
        },
        (l, _) => l.to_vec(),
    };
    let kinds = routers(&a.routers)?;
    if kinds.is_empty() && a.router_config.is_empty() {
        return Err(CliError::bad_input("--routers: at least one router (or a --router-config)"));
    }

    // every (pods, router) configuration
    let mut specs = Vec::new();
    let mut pipelines: Vec<(String, String)> = Vec::new();
    for &pods in &pods_list {
        let mut base_cfg = base.unwrap_or(FleetConfig {
            pods,
            capacity_blocks: capacity,
            router: defaults::ROUTER,
            alpha: a.alpha,
            routing: None,
            pools: &[],
            engine: EngineConfig::fifo(),
        });
        base_cfg.pods = pods;
        base_cfg.capacity_blocks = capacity;
        if let (Some(t), Some(n)) = (pool_table, pool_pods) {
            if pods != n {
                return Err(CliError::bad_input(format!(
                    "--pods {pods}: expected {n}, the pods of the pools in --pools {} (or leave --pods out)",
                    a.pools.as_deref().map_or(String::new(), |p| p.display().to_string())
                )));
            }
            base_cfg.pools = t;
        }
        if let Some(s) = base_cfg.scale_mut()
            && a.scale.scale_min.is_some()
        {
            *s = a.scale.policy(pods)?;
        }
        if let Some(c) = a.cpu_capacity {
            // the FIFO engine's tier; the batched engine's is set above (0 included)
            base_cfg = run::with_fifo(base_cfg, |f| f.cpu_capacity_blocks = if batched.is_some() { 0 } else { c });
        }
        if base.is_some() && a.alpha != defaults::ALPHA {
            base_cfg.alpha = a.alpha;
        }
        let mut runs: Vec<(String, FleetConfig)> = Vec::new();
        for &k in &kinds {
            let mut c = base_cfg;
            c.router = k;
            c.routing = None;
            router_config::apply(&mut c, None, seed)?;
            runs.push((k.name().to_string(), c));
        }
        for p in &a.router_config {
            let mut c = base_cfg;
            router_config::apply(&mut c, Some(p), seed)?;
            // the file's name in tables and plots; its pipeline listed under the tables
            let name = p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
            let pipeline = router_config::describe(&c).unwrap_or_else(|| "custom".into());
            if !pipelines.iter().any(|(n, _): &(String, String)| *n == name) {
                pipelines.push((name.clone(), pipeline));
            }
            runs.push((name, c));
        }
        for (label, c) in runs {
            c.validate().map_err(run::config_error)?;
            let cfg = match &batched {
                Some(e) => engine::batched(c, *e).map_err(run::config_error)?,
                None => c,
            };
            specs.push(Spec { label, pods, cfg });
        }
    }
    for p in &a.router_config {
        prov.add_file("router config", p)?;
    }
    if specs.len() > MAX_RUNS {
        return Err(CliError::bad_input(format!(
            "{} runs (routers x pod counts): at most {MAX_RUNS}; name fewer --routers or --pods",
            specs.len()
        )));
    }

    // a trace is parsed and hashed once for all the runs when it fits in a quarter of the
    // memory budget (the runs' own buffers need the rest)
    let mut workload = workload;
    if let Workload::Trace(path, tbs, parsed) = &mut workload
        && specs.len() > 1
    {
        let src = TraceSource::new(path.clone(), *tbs);
        *parsed = run::ParsedTrace::load(&src, crate::mem::budget().bytes / 4)?.map(Box::new);
    }
    // the runs, in parallel; results in spec order whatever the thread count
    let keep = a.report_json.is_some() || a.report_llmd.is_some();
    let progress = Progress::new(a.output.quiet, "compare", Unit::Points, Some(specs.len() as u64));
    let slo = crate::fleet::scenario::deploy::slo_with(
        a.engine.slo_ttft_ms.as_deref(),
        a.engine.slo_tpot_ms.as_deref(),
        scenario_slo,
    )?;
    let results = run_all(&specs, &workload, a.threads, keep, slo, &progress);
    progress.finish();
    let results = results?;

    let rows: Vec<Row> = specs.iter().zip(&results).map(|(s, r)| row(&s.label, s.pods, &r.summary)).collect();
    if let Some(j) = &a.report_json {
        write_report_json(j, &specs, &results, &prov)?;
    }
    if let Some(j) = &a.report_llmd {
        let (kind, key, file, load) = match (&workload, &a.trace, &a.scenario, &a.inference_perf) {
            (Workload::Load(l), _, s, i) => ("load", "scenario", s.as_ref().or(i.as_ref()), Some(l.1)),
            (_, Some(t), _, _) => ("trace", "trace", Some(t), None),
            (_, _, s, i) => ("scenario", "scenario", s.as_ref().or(i.as_ref()), None),
        };
        let file = file.map_or_else(PathBuf::new, PathBuf::clone);
        let mut reports = Vec::new();
        for (s, r) in specs.iter().zip(&results) {
            let b = r.summary.batched().ok_or_else(run::llmd_report::fifo_refused)?;
            let load = crate::fleet::run::llmd_report::load_of(kind, key, &file, load.as_ref());
            reports.push(run::llmd_report::report(&r.completions, b, load, &s.label, 0));
        }
        run::llmd_report::write(j, &reports)?;
    }
    let loaded = matches!(workload, Workload::Load(..));
    let text = write_page(&a.out, &name, &rows, &pods_list, (batched.is_some(), capacity, loaded), &pipelines, &prov)?;
    crate::fleet::sweep::commit_files()?;
    say_raw!("{text}");
    Ok(0)
}

/// The runs' shared workload of scenario `sc`: its data set and load generator when it has
/// `[load]`, else its own arrivals, streamed per run.
fn workload_of(sc: &scenario::Scenario) -> CliResult<Workload> {
    Ok(match sc.load {
        Some(spec) => Workload::Load(Box::new((scenario::Generated::with_origin(sc.workload, &sc.origin)?, spec))),
        None => Workload::Scenario(Box::new(sc.clone())),
    })
}

fn run_all(
    specs: &[Spec],
    workload: &Workload,
    threads: usize,
    keep: bool,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    progress: &Progress,
) -> CliResult<Vec<run::RunResult>> {
    use rayon::prelude::*;
    // the sweep's stack per thread: a fleet value is large (1,024 pod slots) and a debug build
    // copies it on the stack, which overflowed rayon's default 2 MiB
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .stack_size(crate::fleet::sweep::POINT_STACK_BYTES)
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the compare's threads: {e}")))?;
    pool.install(|| {
        specs
            .par_iter()
            .map(|s| {
                let r = match workload {
                    Workload::Trace(_, _, Some(parsed)) => run::simulate_any(s.cfg, &mut &**parsed, keep, slo),
                    Workload::Trace(path, tbs, None) => {
                        let mut src = TraceSource::new(path.clone(), *tbs);
                        run::simulate_any(s.cfg, &mut src, keep, slo)
                    }
                    Workload::Scenario(sc) => {
                        let mut src = scenario::Streamed::new(sc.workload, &sc.origin)?;
                        run::simulate_any(s.cfg, &mut src, keep, slo)
                    }
                    Workload::Load(l) => run::loadgen::simulate_load_any(s.cfg, &l.0, l.1, keep, slo),
                };
                progress.inc(1);
                r
            })
            .collect()
    })
}

fn write_report_json(path: &Path, specs: &[Spec], results: &[run::RunResult], prov: &Provenance) -> CliResult<()> {
    let mut runs = Vec::new();
    for (s, r) in specs.iter().zip(results) {
        let Some(b) = r.summary.batched() else {
            return Err(CliError::bad_input(
                "--report-json: only with --engine batched (the FIFO engine has no tokens)",
            ));
        };
        let mut o = crate::fleet::run::bench_json::vllm_result(&r.completions, b);
        o.insert("router".into(), serde_json::json!(s.label));
        o.insert("pods".into(), serde_json::json!(s.pods));
        runs.push(serde_json::Value::Object(o));
    }
    #[derive(Serialize)]
    struct Runs {
        runs: Vec<serde_json::Value>,
    }
    let text = prov.json_with(&Runs { runs });
    crate::outfile::write(path, text.as_bytes())
        .map_err(|e| CliError::failure(format!("--report-json {}: cannot write: {e}", path.display())))
}

fn f3(v: Option<f64>) -> String {
    match v {
        None => "n/a".into(),
        Some(x) if x >= 100.0 => format!("{x:.1}"),
        Some(x) if x >= 1.0 => format!("{x:.2}"),
        Some(x) => format!("{x:.4}"),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| format!("{:.1}%", x * 100.0))
}

fn tok(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |x| crate::fleet::report::engine::thousands(x.round() as u64))
}

/// The winner(s) of one metric: the best value and every router that reaches it.
fn winner(rows: &[&Row], get: impl Fn(&Row) -> Option<f64>, lower: bool) -> Option<(f64, Vec<String>)> {
    let vals: Vec<(f64, &str)> = rows.iter().filter_map(|r| get(r).map(|v| (v, r.router.as_str()))).collect();
    let best = vals.iter().map(|v| v.0).fold(None, |acc: Option<f64>, v| {
        Some(match acc {
            None => v,
            Some(a) if lower => a.min(v),
            Some(a) => a.max(v),
        })
    })?;
    Some((best, vals.iter().filter(|v| v.0 == best).map(|v| v.1.to_string()).collect()))
}

fn write_page(
    out: &Path,
    name: &str,
    rows: &[Row],
    pods_list: &[usize],
    (batched, capacity, loaded): (bool, usize, bool),
    pipelines: &[(String, String)],
    prov: &Provenance,
) -> CliResult<String> {
    let mut blocks = Vec::new();
    let engine =
        if batched { "batched (vLLM-style continuous batching)" } else { "FIFO (one request at a time per pod)" };
    blocks.push(Block::Para(format!(
        "Workload: {name}. Engine: {engine}. {} pods x {} blocks of 16 tokens per pod ({} tokens). {} routers, {} runs.",
        pods_list.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "),
        crate::fleet::report::engine::thousands(capacity as u64),
        crate::fleet::report::engine::thousands(capacity as u64 * 16),
        rows.len() / pods_list.len().max(1),
        rows.len()
    )));
    if !pipelines.is_empty() {
        blocks.push(Block::Para("Router config files run (each as its pipeline):".into()));
        blocks.push(Block::List(pipelines.iter().map(|(n, p)| format!("{n}: {p}")).collect()));
    }

    for &pods in pods_list {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.pods == pods).collect();
        blocks.push(Block::Heading(format!("Routers at {pods} pods")));
        let goodput = rs.iter().any(|r| r.goodput_req_per_s.is_some());
        let mut head = vec![
            "router",
            "TTFT p50 (s)",
            "TTFT p90 (s)",
            "TTFT p99 (s)",
            "ITL p50 (ms)",
            "ITL p90 (ms)",
            "E2E p90 (s)",
            "output tok/s",
            "hit rate",
            "preemptions",
            "busiest pod / fair share",
            "death spiral",
        ];
        if goodput {
            head.insert(8, "SLO goodput (req/s)");
        }
        let table = rs
            .iter()
            .map(|r| {
                let mut cells = vec![
                    r.router.clone(),
                    f3(r.ttft_p50_s),
                    f3(r.ttft_p90_s),
                    f3(r.ttft_p99_s),
                    f3(r.itl_p50_s.map(|x| x * 1e3)),
                    f3(r.itl_p90_s.map(|x| x * 1e3)),
                    f3(r.e2e_p90_s),
                    tok(r.output_tok_per_s),
                    pct(r.hit_rate),
                    r.preemptions.map_or("n/a".into(), crate::fleet::report::engine::thousands),
                    format!("{:.2}x", r.max_share),
                    r.spiral.to_string(),
                ];
                if goodput {
                    cells.insert(8, f3(r.goodput_req_per_s));
                }
                cells
            })
            .collect();
        blocks.push(Block::Table(head.iter().map(|s| s.to_string()).collect(), table));

        // the winner of each metric
        type Get = fn(&Row) -> Option<f64>;
        let metrics: [(&str, Get, bool); 9] = [
            ("TTFT p50", |r| r.ttft_p50_s, true),
            ("TTFT p90", |r| r.ttft_p90_s, true),
            ("TTFT p99", |r| r.ttft_p99_s, true),
            ("ITL p90", |r| r.itl_p90_s, true),
            ("E2E p90", |r| r.e2e_p90_s, true),
            ("output tok/s", |r| r.output_tok_per_s, false),
            ("hit rate", |r| r.hit_rate, false),
            ("SLO goodput", |r| r.goodput_req_per_s, false),
            ("busiest pod / fair share", |r| Some(r.max_share), true),
        ];
        let mut wins = Vec::new();
        for (m, get, lower) in metrics {
            if let Some((v, who)) = winner(&rs, get, lower) {
                let shown = match m {
                    "hit rate" => pct(Some(v)),
                    "output tok/s" => tok(Some(v)),
                    "SLO goodput" => format!("{} req/s", f3(Some(v))),
                    "ITL p90" => format!("{} ms", f3(Some(v * 1e3))),
                    "busiest pod / fair share" => format!("{v:.2}x"),
                    _ => format!("{} s", f3(Some(v))),
                };
                let who = if who.len() > 3 {
                    format!("{} routers tie ({}, ...)", who.len(), who[..3].join(", "))
                } else {
                    who.join(", ")
                };
                wins.push(vec![m.to_string(), who, shown]);
            }
        }
        blocks.push(Block::Para(format!("Winner per metric at {pods} pods (ties listed):")));
        blocks.push(Block::Table(vec!["metric".into(), "best".into(), "value".into()], wins));

        let spirals: Vec<String> =
            rs.iter().filter(|r| r.spiral != "no").map(|r| format!("{} ({})", r.router, r.spiral)).collect();
        blocks.push(Block::Callout(if spirals.is_empty() {
            format!("Death-spiral check at {pods} pods: no router pinned or skewed its load.")
        } else {
            format!("Death-spiral check at {pods} pods: {}.", spirals.join("; "))
        }));

        // per-pod load
        let mut head = vec!["router".to_string()];
        head.extend((0..pods).map(|p| format!("pod {p}")));
        let table = rs
            .iter()
            .map(|r| {
                let mut v = vec![r.router.clone()];
                v.extend(r.per_pod_requests.iter().map(|n| crate::fleet::report::engine::thousands(*n)));
                v
            })
            .collect();
        blocks.push(Block::Para(format!("Requests per pod at {pods} pods:")));
        blocks.push(Block::Table(head, table));
    }

    // plots
    blocks.push(Block::Heading("Plots".into()));
    let mut charts: Vec<(String, Chart)> = Vec::new();
    if pods_list.len() > 1 {
        let labels: Vec<String> = {
            let mut l: Vec<String> = Vec::new();
            for r in rows {
                if !l.contains(&r.router) {
                    l.push(r.router.clone());
                }
            }
            l
        };
        let series = |get: &dyn Fn(&Row) -> Option<f64>| -> Vec<Series> {
            labels
                .iter()
                .map(|l| {
                    Series::new(
                        l.clone(),
                        rows.iter()
                            .filter(|r| &r.router == l)
                            .map(|r| (r.pods as f64, get(r).unwrap_or(f64::NAN)))
                            .collect(),
                    )
                })
                .collect()
        };
        let y: fn(&Row) -> Option<f64> = if batched { |r| r.ttft_p90_s } else { |r| r.e2e_p90_s };
        let what = if batched { "TTFT p90 (s, log)" } else { "latency p90 (s, log)" };
        charts.push((
            "p90_vs_pods".into(),
            Chart {
                title: format!("{} vs pods", what.trim_end_matches(", log)").trim_end_matches(" (s")),
                x_label: "pods".into(),
                y_label: what.into(),
                series: series(&y),
                y_log: true,
                ..Chart::default()
            },
        ));
        charts.push((
            "tok_s_vs_pods".into(),
            Chart {
                title: "Output tokens/s vs pods".into(),
                x_label: "pods".into(),
                y_label: "output tokens/s".into(),
                series: series(&|r: &Row| r.output_tok_per_s),
                // from 0: a zoomed axis would blow a 0.1% difference up to the whole height
                y_min: Some(0.0),
                ..Chart::default()
            },
        ));
    }
    let last = *pods_list.last().expect("at least one pod count");
    let rs: Vec<&Row> = rows.iter().filter(|r| r.pods == last).collect();
    let cats: Vec<String> = rs.iter().map(|r| r.router.clone()).collect();
    let bars = |label: &str, get: &dyn Fn(&Row) -> Option<f64>| {
        Series::new(label, rs.iter().enumerate().map(|(i, r)| (i as f64, get(r).unwrap_or(f64::NAN))).collect())
    };
    let (lat_series, lat_label) = if batched {
        (
            vec![
                bars("TTFT p50", &|r| r.ttft_p50_s),
                bars("TTFT p90", &|r| r.ttft_p90_s),
                bars("TTFT p99", &|r| r.ttft_p99_s),
            ],
            "TTFT (s)",
        )
    } else {
        (vec![bars("latency p90", &|r| r.e2e_p90_s)], "latency (s)")
    };
    charts.push((
        "latency_per_router".into(),
        Chart {
            title: format!("{lat_label} per router at {last} pods"),
            x_label: "router".into(),
            y_label: lat_label.into(),
            series: lat_series,
            bars: true,
            x_categories: cats.clone(),
            ..Chart::default()
        },
    ));
    charts.push((
        "hit_rate_per_router".into(),
        Chart {
            title: format!("Prefix-cache hit rate per router at {last} pods"),
            x_label: "router".into(),
            y_label: "hit rate (% of prompt tokens)".into(),
            series: vec![bars("hit rate", &|r| r.hit_rate.map(|h| h * 100.0))],
            bars: true,
            x_categories: cats.clone(),
            ..Chart::default()
        },
    ));
    // output tok/s is bounded by the arrivals: when every router keeps up the bars are equal,
    // and the chart says nothing the table does not
    let toks: Vec<f64> = rs.iter().filter_map(|r| r.output_tok_per_s).collect();
    let (lo, hi) = toks.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    if hi > lo * TOK_S_PLOT_SPREAD {
        charts.push((
            "tok_s_per_router".into(),
            Chart {
                title: format!("Output tokens/s per router at {last} pods"),
                x_label: "router".into(),
                y_label: "output tokens/s".into(),
                series: vec![bars("output tok/s", &|r| r.output_tok_per_s)],
                bars: true,
                x_categories: cats,
                ..Chart::default()
            },
        ));
    } else if hi > 0.0 {
        blocks.push(Block::Para(format!(
            "Output tokens/s is within {:.1}% across routers at {last} pods ({} to {}): the workload's arrivals, not the \
             routers, set it here, so it has no plot.",
            (hi / lo - 1.0) * 100.0,
            tok(Some(lo)),
            tok(Some(hi))
        )));
    }
    for (stem, chart) in &charts {
        // a bar per router: wide enough for the routers' names side by side
        let width = if chart.bars { (chart.x_categories.len() as u32 * BAR_GROUP_PX + 260).max(900) } else { 900 };
        let svg = crate::plot::svg(chart, width, 520);
        crate::fleet::sweep::write_file(out, &format!("{stem}.svg"), svg.as_bytes())?;
        crate::fleet::sweep::write_file(out, &format!("{stem}.png"), &crate::plot::png(chart, width, 520))?;
        blocks.push(Block::Figure(stem.clone(), svg));
    }

    blocks.push(Block::Heading("What the model leaves out".into()));
    blocks.push(Block::List(vec![
        "Tokens and text: requests are block keys and lengths; nothing is tokenized or generated.".into(),
        "The network and the router's own latency: a routing decision takes no time, a response arrives as its last token is made.".into(),
        if loaded {
            "Clients: the scenario's load generator ([load], docs/MODEL.md \"The load generator\") as inference-perf sends; every router gets the same send plan, a request over the in-flight cap waits for its router's completions.".into()
        } else {
            "Clients: arrivals are open-loop (a trace's timestamps or Poisson); no in-flight cap, no time-outs, every request completes.".into()
        },
        "GPU time: the batched engine's step cost is a profile (linear, or a physics model; docs/MODEL.md, \"The physics step cost\"), not a measured GPU; the FIFO engine has no batching at all.".into(),
        "KV events: under the batched engine every router sees the pods' caches exactly and at once (no event lag).".into(),
        "A trace's hash ids stand for whole blocks of --trace-block-size tokens; a partial last block is not modelled.".into(),
    ]));

    let md = page::markdown("brokerlab fleet compare", &blocks, &prov.markdown());
    let html = page::html("brokerlab fleet compare", &blocks, &prov.html());
    crate::fleet::sweep::write_file(out, "index.html", html.as_bytes())?;
    crate::fleet::sweep::write_file(out, "summary.md", md.as_bytes())?;
    #[derive(Serialize)]
    struct Json<'a> {
        workload: &'a str,
        runs: &'a [Row],
    }
    crate::fleet::sweep::write_file(
        out,
        "compare.json",
        prov.json_with(&Json { workload: name, runs: rows }).as_bytes(),
    )?;

    // the terminal's summary
    let mut t = format!("{name}\n");
    for &pods in pods_list {
        t += &format!(
            "\n{pods} pods\n{:<44} {:>10} {:>10} {:>12} {:>9} {:>7} {:>8}\n",
            "router", "TTFT p90 s", "E2E p90 s", "output tok/s", "hit rate", "preempt", "spiral"
        );
        for r in rows.iter().filter(|r| r.pods == pods) {
            t += &format!(
                "{:<44} {:>10} {:>10} {:>12} {:>9} {:>7} {:>8}\n",
                r.router,
                f3(r.ttft_p90_s),
                f3(r.e2e_p90_s),
                tok(r.output_tok_per_s),
                pct(r.hit_rate),
                r.preemptions.map_or("n/a".into(), |p| p.to_string()),
                r.spiral
            );
        }
    }
    t += &format!("\nwrote {0}/index.html, {0}/summary.md, {0}/compare.json, plots (.svg, .png)\n", out.display());
    Ok(t)
}
