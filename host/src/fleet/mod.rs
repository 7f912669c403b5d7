//! `brokerlab fleet ...`: the fleet simulator on the host.

pub mod bench;
pub mod engine;
pub mod experiments;
pub mod report;
pub mod run;
pub mod scenario;
pub mod sweep;
pub mod trace;

use std::path::PathBuf;

use brokerlab_core::fleet::{FleetConfig, IndexKind, RouterKind, ScalePolicy, TouchOrder};
use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};
use run::{TraceSource, render_table, simulate};

/// `brokerlab fleet` subcommands.
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Replay a Mooncake JSONL trace through N pods and a router; print the metrics.
    Replay(ReplayArgs),
    /// Measure core throughput (requests/s, block touches/s) and memory per cached block.
    Bench(BenchArgs),
    /// Run one scenario file (workload + fleet + router + timing).
    Run(RunArgs),
    /// Write a scenario's workload as a Mooncake JSONL trace (trace block size 16).
    GenTrace(GenTraceArgs),
    /// Sweep one parameter of a scenario for every router; write CSV, JSON and plots.
    Sweep(SweepArgs),
    /// Run the standard experiments on built-in scenarios; write an HTML report and a summary.
    Report(ReportArgs),
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
}

/// `fleet run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario TOML file.
    pub scenario: PathBuf,
    /// Override the scenario's router.
    #[arg(long, value_parser = parse_router)]
    pub router: Option<RouterKind>,
    #[command(flatten)]
    pub engine: engine::EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
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
    #[arg(long, value_delimiter = ',')]
    pub values: Vec<String>,
    /// First value of a range (capacity: fit, hot/K, hot*K or a number).
    #[arg(long)]
    pub from: Option<String>,
    /// Same as --from fit.
    #[arg(long)]
    pub from_fit: bool,
    /// Last value of a range.
    #[arg(long)]
    pub to: Option<String>,
    /// Points in the range (geometric for capacity, linear otherwise).
    #[arg(long, default_value_t = 12)]
    pub steps: usize,
    /// Worker threads (0 = all cores). Results do not depend on it.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Output directory.
    #[arg(long, default_value = "out/sweep")]
    pub out: PathBuf,
}

fn parse_router(s: &str) -> Result<RouterKind, String> {
    RouterKind::parse(s).ok_or_else(|| "expected one of round-robin, least-loaded, prefix-aware".to_string())
}

fn parse_index(s: &str) -> Result<IndexKind, String> {
    IndexKind::parse(s).ok_or_else(|| "expected global or pod-tables".to_string())
}

fn parse_order(s: &str) -> Result<TouchOrder, String> {
    TouchOrder::parse(s).ok_or_else(|| "expected tail-first or in-order".to_string())
}

/// The fleet and model parameters shared by replay and the scenario commands.
#[derive(Debug, Args, Clone)]
pub struct FleetArgs {
    /// Number of pods N (1..=64).
    #[arg(long)]
    pub pods: usize,
    /// Blocks (16 tokens each) per pod C.
    #[arg(long)]
    pub capacity: usize,
    /// round-robin | least-loaded | prefix-aware
    #[arg(long, value_parser = parse_router)]
    pub router: RouterKind,
    /// Load penalty of prefix-aware: blocks per queued request.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub alpha: f64,
    /// Stale-evict delay k, in requests (0 = exact index).
    #[arg(long, default_value_t = 0)]
    pub stale: u32,
    /// tail-first | in-order
    #[arg(long, default_value = "tail-first", value_parser = parse_order)]
    pub order: TouchOrder,
    /// Prefill cost, ns per uncached prompt token.
    #[arg(long, default_value_t = 50_000)]
    pub t_prefill_ns: u64,
    /// Decode cost, ns per output token.
    #[arg(long, default_value_t = 0)]
    pub t_decode_ns: u64,
    /// Prefix-aware index: pod-tables (ask the pods' own tables) | global (a key -> pod-mask
    /// table fed by insert/evict events). Same results; pod-tables is faster and smaller.
    #[arg(long, default_value = "pod-tables", value_parser = parse_index)]
    pub index: IndexKind,
    /// Blocks per pod in a second (CPU memory) tier; 0 = none.
    #[arg(long, default_value_t = 0)]
    pub cpu_capacity: usize,
    /// Cost of loading a CPU-tier block, ns per token.
    #[arg(long, default_value_t = 5_000)]
    pub t_cpu_ns: u64,
    #[command(flatten)]
    pub scale: ScaleArgs,
}

/// Autoscaling flags (docs/MODEL.md, "Autoscaling"); `--scale-min` turns it on and `--pods` is
/// then the most pods.
#[derive(Debug, Args, Clone)]
pub struct ScaleArgs {
    /// Autoscale between this many pods and --pods (off when absent).
    #[arg(long)]
    pub scale_min: Option<u32>,
    /// Routable pods at the start (default: --scale-min).
    #[arg(long)]
    pub scale_initial: Option<u32>,
    /// Seconds between autoscaler evaluations.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub scale_interval_s: f64,
    /// Scale out when the mean queue length of the routable pods exceeds this.
    #[arg(long, default_value_t = 4.0, allow_negative_numbers = true)]
    pub scale_up_queue: f64,
    /// Scale in when the mean queue length is below this.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub scale_down_queue: f64,
    /// Seconds from a scale-out decision until the new pod takes requests.
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
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
            CliError::bad_input(format!("--scale-{}: {got:?}: expected {expected}", field.replace('_', "-")))
        })?;
        Ok(Some(p))
    }

    /// Builds and checks a policy for `pods` pods from flag or scenario values; errors are
    /// (field, expected, got) with the scenario key's name (`interval_s`; the flag is
    /// `--scale-interval-s`).
    pub fn policy_from(
        pods: usize,
        min: u32,
        initial: Option<u32>,
        interval_s: f64,
        up_queue: f64,
        down_queue: f64,
        startup_s: f64,
    ) -> Result<ScalePolicy, (&'static str, &'static str, String)> {
        let ns = |v: f64, field| match v {
            v if (0.0..=1e9).contains(&v) => Ok((v * 1e9).round() as u64),
            v => Err((field, "seconds between 0 and 1e9", v.to_string())),
        };
        let milli = |v: f64, field| match v {
            v if (0.0..=1e6).contains(&v) => Ok((v * 1000.0).round() as u32),
            v => Err((field, "a mean queue length between 0 and 1e6", v.to_string())),
        };
        let p = ScalePolicy {
            min_pods: min,
            initial_pods: initial.unwrap_or(min),
            interval_ns: ns(interval_s, "interval_s")?,
            up_milli: milli(up_queue, "up_queue")?,
            down_milli: milli(down_queue, "down_queue")?,
            startup_ns: ns(startup_s, "startup_s")?,
        };
        p.validate(pods).map_err(|e| match e {
            brokerlab_core::fleet::Error::InvalidConfig { field, expected } => {
                let (name, got) = match field {
                    "scale-min" => ("min", min.to_string()),
                    "scale-initial" => ("initial", p.initial_pods.to_string()),
                    "scale-interval" => ("interval_s", interval_s.to_string()),
                    _ => ("down_queue", down_queue.to_string()),
                };
                (name, expected, got)
            }
            other => ("min", "a valid policy", other.to_string()),
        })?;
        Ok(p)
    }
}

impl FleetArgs {
    /// The core configuration.
    pub fn config(&self) -> CliResult<FleetConfig> {
        Ok(FleetConfig {
            pods: self.pods,
            capacity_blocks: self.capacity,
            router: self.router,
            alpha: self.alpha,
            stale_delay: self.stale,
            order: self.order,
            t_prefill_ns: self.t_prefill_ns,
            t_decode_ns: self.t_decode_ns,
            index: self.index,
            cpu_capacity_blocks: self.cpu_capacity,
            t_cpu_ns: self.t_cpu_ns,
            scale: self.scale.policy(self.pods)?,
        })
    }
}

/// `fleet replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Mooncake JSONL trace (timestamp ms, input_length, output_length, hash_ids).
    #[arg(long)]
    pub trace: PathBuf,
    /// Tokens per trace hash id S (a multiple of 16).
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub engine: engine::EngineArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `fleet bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Trace to replay.
    #[arg(long, default_value = "../shared/traces/conversation_trace.jsonl")]
    pub trace: PathBuf,
    /// Tokens per trace hash id S.
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// Pods.
    #[arg(long, default_value_t = 8)]
    pub pods: usize,
    /// Blocks per pod.
    #[arg(long, default_value_t = 16384)]
    pub capacity: usize,
    /// Repeats per router; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn check_trace_block(s: u32) -> CliResult<()> {
    brokerlab_core::fleet::keys::check_trace_block_tokens(s).map_err(|_| {
        CliError::bad_input(format!("--trace-block-size {s}: expected a non-zero multiple of 16, at most 1048576"))
    })
}

/// Runs one `fleet` subcommand; returns the exit code.
pub fn main(cmd: FleetCmd) -> CliResult<i32> {
    match cmd {
        FleetCmd::Replay(a) => {
            check_trace_block(a.trace_block_size)?;
            let cfg = a.fleet.config()?;
            cfg.validate().map_err(run::config_error)?;
            let mut src = TraceSource { path: a.trace.clone(), trace_block_tokens: a.trace_block_size };
            if let Some(e) = a.engine.resolve(None)? {
                return engine_main(cfg, e, &mut src, a.json, &format!("trace {}", a.trace.display()));
            }
            let res = simulate(cfg, &mut src, false)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&res.summary).expect("summary serializes"));
            } else {
                println!("trace {}", a.trace.display());
                print!("{}", render_table(&res.summary));
            }
            Ok(0)
        }
        FleetCmd::Run(a) => {
            let sc = scenario::Scenario::load(&a.scenario)?;
            let mut cfg = sc.fleet;
            if let Some(r) = a.router {
                cfg.router = r;
            }
            let g = scenario::Generated::new(sc.workload)?;
            if let Some(e) = a.engine.resolve(sc.engine.as_ref())? {
                let title = format!("scenario {} ({})", sc.name, a.scenario.display());
                return engine_main(cfg, e, &mut &g, a.json, &title);
            }
            let res = simulate(cfg, &mut &g, false)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&res.summary).expect("summary serializes"));
            } else {
                println!("scenario {} ({})", sc.name, a.scenario.display());
                print!("{}", render_table(&res.summary));
            }
            Ok(0)
        }
        FleetCmd::GenTrace(a) => {
            let sc = scenario::Scenario::load(&a.scenario)?;
            let g = scenario::Generated::new(sc.workload)?;
            let f = std::fs::File::create(&a.output)
                .map_err(|e| CliError::bad_input(format!("-o {}: cannot create: {e}", a.output.display())))?;
            let mut w = std::io::BufWriter::new(f);
            scenario::write_trace(&g, &mut w)
                .and_then(|_| std::io::Write::flush(&mut w))
                .map_err(|e| CliError::failure(format!("{}: cannot write: {e}", a.output.display())))?;
            eprintln!(
                "wrote {} requests to {} (replay with --trace-block-size 16)",
                g.requests.len(),
                a.output.display()
            );
            Ok(0)
        }
        FleetCmd::Sweep(a) => sweep_cmd(a),
        FleetCmd::Report(a) => {
            let ex = experiments::report(&a.out, a.threads, a.shrink)?;
            println!("{}\n", experiments::the_number(&ex));
            for (k, v) in experiments::headlines(&ex) {
                println!("{k:<52} {v}");
            }
            println!(
                "\nwrote {0}/index.html, {0}/summary.md, plots (.svg, .png), points.csv, experiments.json",
                a.out.display()
            );
            Ok(0)
        }
        FleetCmd::Bench(a) => {
            check_trace_block(a.trace_block_size)?;
            let r = bench::run(a.trace, a.trace_block_size, a.pods, a.capacity, a.repeats)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
            } else {
                print!("{}", bench::render(&r));
            }
            Ok(0)
        }
    }
}

/// Runs and prints the batched engine (`--engine batched`).
fn engine_main(
    cfg: FleetConfig,
    e: brokerlab_core::fleet::EngineConfig,
    src: &mut dyn run::RequestSource,
    json: bool,
    title: &str,
) -> CliResult<i32> {
    brokerlab_core::fleet::batched::validate(&cfg, &e).map_err(run::config_error)?;
    let res = engine::simulate_batched(cfg, e, src, false)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&res.summary).expect("summary serializes"));
    } else {
        println!("{title}");
        print!("{}", engine::render_batched(&res.summary));
    }
    Ok(0)
}

fn capacity_value(s: &str, fit: usize, hot: u64) -> CliResult<u64> {
    let bad = || CliError::bad_input(format!("capacity value `{s}`: expected a number of blocks, fit, hot/K or hot*K"));
    let v = if s == "fit" {
        fit as u64
    } else if let Some(k) = s.strip_prefix("hot/") {
        hot / k.parse::<u64>().map_err(|_| bad())?.max(1)
    } else if let Some(k) = s.strip_prefix("hot*") {
        hot * k.parse::<u64>().map_err(|_| bad())?
    } else if s == "hot" {
        hot
    } else {
        s.parse().map_err(|_| bad())?
    };
    Ok(v.max(1))
}

fn num_value(flag: &str, s: &str) -> CliResult<f64> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| CliError::bad_input(format!("{flag} `{s}`: expected a number")))
}

/// One sweep value: (parameter value, workload index, fleet configuration).
pub type SweepValue = (f64, usize, FleetConfig);

/// Parameter values of a sweep, as (value, workload index, config) with workloads generated here.
pub fn sweep_values(sc: &scenario::Scenario, a: &SweepArgs) -> CliResult<(Vec<scenario::Generated>, Vec<SweepValue>)> {
    let base = sc.fleet;
    let from = if a.from_fit { Some("fit".to_string()) } else { a.from.clone() };
    let range = |kind: &str| -> CliResult<Option<(String, String)>> {
        match (&from, &a.to) {
            (Some(f), Some(t)) => Ok(Some((f.clone(), t.clone()))),
            (None, None) if !a.values.is_empty() => Ok(None),
            _ => Err(CliError::bad_input(format!("--param {kind}: give --values, or both --from and --to"))),
        }
    };
    if a.param == "rate" {
        let vals: Vec<f64> = match range("rate")? {
            None => a.values.iter().map(|v| num_value("--values", v)).collect::<CliResult<_>>()?,
            Some((f, t)) => sweep::linear(num_value("--from", &f)?, num_value("--to", &t)?, a.steps),
        };
        let mut gens = Vec::new();
        let mut out = Vec::new();
        for (i, v) in vals.iter().enumerate() {
            let mut w = sc.workload;
            w.rate_milli_per_s = (v * 1000.0).round().max(0.0) as u64;
            gens.push(scenario::Generated::new(w)?);
            out.push((*v, i, base));
        }
        return Ok((gens, out));
    }
    let g = scenario::Generated::new(sc.workload)?;
    let vals: Vec<f64> = match a.param.as_str() {
        "capacity" => {
            let fit = g.distinct_blocks();
            let hot = sc.workload.hot_set_blocks();
            match range("capacity")? {
                None => {
                    a.values.iter().map(|v| capacity_value(v, fit, hot).map(|x| x as f64)).collect::<CliResult<_>>()?
                }
                Some((f, t)) => {
                    let (f, t) = (capacity_value(&f, fit, hot)?, capacity_value(&t, fit, hot)?);
                    sweep::geometric(f as f64, t as f64, a.steps).into_iter().map(|x| x as f64).collect()
                }
            }
        }
        "alpha" | "stale" | "pods" => match range(&a.param)? {
            None => a.values.iter().map(|v| num_value("--values", v)).collect::<CliResult<_>>()?,
            Some((f, t)) => {
                let v = sweep::linear(num_value("--from", &f)?, num_value("--to", &t)?, a.steps);
                if a.param == "alpha" { v } else { v.into_iter().map(f64::round).collect() }
            }
        },
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
            "stale" => cfg.stale_delay = v.max(0.0) as u32,
            _ => cfg.pods = v.max(0.0) as usize,
        }
        cfg.validate().map_err(|e| CliError::bad_input(format!("--param {} value {v}: {e}", a.param)))?;
        out.push((v, 0, cfg));
    }
    Ok((vec![g], out))
}

fn sweep_cmd(a: SweepArgs) -> CliResult<i32> {
    let sc = scenario::Scenario::load(&a.scenario)?;
    let (gens, values) = sweep_values(&sc, &a)?;
    let specs = sweep::for_each_router(&values);
    let points = sweep::run_points(&a.param, &gens, &specs, a.threads, &format!("sweep {}", a.param))?;
    sweep::write_file(&a.out, "points.csv", sweep::to_csv(&points).as_bytes())?;
    let json = serde_json::to_string_pretty(&points).expect("points serialize");
    sweep::write_file(&a.out, "points.json", json.as_bytes())?;
    let written = report::sweep_plots(&a.out, &sc.name, &a.param, &points)?;
    print!("{}", report::sweep_table(&a.param, &points));
    println!("wrote {}/points.csv, points.json{}", a.out.display(), written);
    Ok(0)
}
