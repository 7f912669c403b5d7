//! Runs each `fleet` subcommand: reads its arguments, calls the simulator, prints or writes the
//! results.

use std::path::Path;

use brokerlab_core::fleet::FleetConfig;

use crate::error::{CliError, CliResult};
use crate::fleet::bench::{self, route};
use crate::fleet::cli::args::{
    BenchArgs, FleetCmd, GenTraceArgs, MergeArgs, ReplayArgs, ReportArgs, RunArgs, SweepArgs, check_trace_block,
};
use crate::fleet::cli::router_config;
use crate::fleet::input::formats;
use crate::fleet::report;
use crate::fleet::run::progress::{Progress, Tracked, Unit};
use crate::fleet::run::{self, Batched, Fifo, RunSummary, TraceSource};
use crate::fleet::scenario::{self, engine};
use crate::fleet::sweep::values::{Values, sweep_values};
use crate::fleet::sweep::{self, shard};
use crate::provenance::Provenance;

/// Runs one `fleet` subcommand; returns the exit code.
pub fn main(cmd: FleetCmd) -> CliResult<i32> {
    match cmd {
        FleetCmd::Replay(a) => replay_cmd(a),
        FleetCmd::Run(a) => run_cmd(a),
        FleetCmd::GenTrace(a) => gen_trace_cmd(a),
        FleetCmd::Sweep(a) => sweep_cmd(a),
        FleetCmd::Merge(a) => merge_cmd(a),
        FleetCmd::Keys(a) => formats::keys_cmd(a),
        FleetCmd::Calibrate(a) => crate::fleet::cost::calibrate_cmd(a),
        FleetCmd::CostCheck(a) => crate::fleet::cost::cost_check_cmd(a),
        FleetCmd::Compare(a) => super::compare::main(a),
        FleetCmd::Import(c) => super::import::main(c),
        FleetCmd::Report(a) => report_cmd(a),
        FleetCmd::Tables(a) => super::tables::main(a),
        FleetCmd::Bench(a) => bench_cmd(a),
    }
}

/// `fleet replay`: a Mooncake trace here; the other formats in [`super::replay`].
fn replay_cmd(a: ReplayArgs) -> CliResult<i32> {
    crate::mem::set_budget(a.mem.max_memory);
    let mut inputs = vec![("--trace", a.trace.as_path())];
    inputs.extend(a.fleet.router_config.as_deref().map(|p| ("--router-config", p)));
    inputs.extend(a.fleet.pools.as_deref().map(|p| ("--pools", p)));
    if let Some(o) = &a.engine.outcomes {
        crate::outfile::check_output("--outcomes", o, &inputs)?;
    }
    if let Some(o) = &a.report_json {
        crate::outfile::check_output("--report-json", o, &inputs)?;
    }
    if let Some(o) = &a.report_llmd {
        crate::outfile::check_output("--report-llmd", o, &inputs)?;
    }
    if let Some(s) = a.trace_block_size {
        check_trace_block(s)?;
    }
    // --pools: heterogeneous pools, batched engine only (docs/MODEL.md, "Heterogeneous pools")
    let pools_file = a.fleet.pools.as_deref().map(scenario::pools::PoolsFile::read).transpose()?;
    let (mut engine, pool_table) = match &pools_file {
        None => (a.engine.resolve(None)?, None),
        Some(f) => {
            if a.engine.engine != Some(engine::EngineKind::Batched) {
                return Err(CliError::bad_input(format!(
                    "--pools {}: only with --engine batched (the FIFO engine has no pools)",
                    f.origin
                )));
            }
            let (t, s) = scenario::pools::with_flags(f, a.engine.settings())?;
            (Some(s.config(&|k| format!("--{}", k.replace('_', "-")))?), Some(t))
        }
    };
    a.fleet.check_applies(engine.is_some())?;
    if let Some(e) = engine.as_mut() {
        a.fleet.scale.apply_wva(e)?;
    }
    let derived = match &engine {
        Some(e) => engine::derived_capacity(e, "--profile")?,
        None => None,
    };
    let cfg = a.fleet.config(derived, pool_table.zip(pools_file.as_ref().map(|f| f.origin.as_str())))?;
    cfg.validate().map_err(run::config_error)?;
    if let (Some(f), Some(e)) = (&pools_file, engine) {
        // the pools' checks, an error about them naming the file and line
        engine::batched(cfg, e).map_err(|err| {
            let on_pools = matches!(run::fields::refused(err), Ok((brokerlab_core::fleet::Field::Pools, _)));
            if on_pools { scenario::pool_key_error(&f.origin, &f.lines, err) } else { run::config_error(err) }
        })?;
    }
    a.fleet.check_index_applies(&cfg, engine.is_some())?;
    let format = formats::resolve_format(a.format, &a.trace, a.max_line_bytes, a.max_blank_lines)?;
    let retime = retime_of(&a)?;
    if format != formats::Format::Mooncake {
        if retime != crate::fleet::run::retime::Retime::NONE {
            return Err(CliError::bad_input(format!(
                "--speedup, --start-at, --max-requests: Mooncake traces only (this one is {})",
                format.name()
            )));
        }
        return crate::fleet::cli::replay::format(a, format, cfg, engine);
    }
    formats::only_token_hash(&a.hash, format)?;
    let trace_block_size = a.trace_block_size.unwrap_or(512);
    let mut src = TraceSource {
        max_line_bytes: a.max_line_bytes,
        max_blank_lines: a.max_blank_lines,
        pipelined: run::pipeline::wanted(a.threads),
        ..TraceSource::new(a.trace.clone(), trace_block_size)
    };
    let size = std::fs::metadata(&a.trace).ok().filter(|m| m.is_file()).map(|m| m.len());
    let progress = Progress::new(a.output.quiet, "replay", Unit::TraceBytes, size);
    let mut prov = Provenance::of_this_run(a.output.no_date);
    prov.add_file("trace", &a.trace)?;
    if let Some(p) = &a.fleet.pools {
        prov.add_file("pools", p)?;
    }
    router_config::record(&mut prov, a.fleet.router_config.as_deref(), &cfg)?;
    let out = Output {
        json: a.json.then_some(&prov),
        title: &format!("trace {}", a.trace.display()),
        pipeline: if a.fleet.routing_scorers.is_some() {
            router_config::describe(&cfg)
        } else {
            pipeline(&a.fleet.router_config, &cfg)
        },
        outcomes: a.engine.outcomes.as_deref(),
        format: None,
        report_json: a.report_json.as_deref(),
        stages: None,
        aborted: Vec::new(),
        refused: 0,
        llmd: a.report_llmd.as_deref().map(|p| (p, run::llmd_report::load_of("trace", "trace", &a.trace, None))),
    };
    let cfg = match engine {
        Some(e) => engine::batched(cfg, e).map_err(run::config_error)?,
        None => cfg,
    };
    let slo = crate::fleet::scenario::deploy::slo(a.engine.slo_ttft_ms.as_deref(), a.engine.slo_tpot_ms.as_deref())?;
    let mut retimed = crate::fleet::run::retime::Retimed { inner: &mut src, retime };
    run_print(cfg, (&mut retimed, Unit::TraceBytes), progress, out, slo)
}

/// `fleet run`: one scenario file, its workload streamed.
fn run_cmd(a: RunArgs) -> CliResult<i32> {
    crate::mem::set_budget(a.mem.max_memory);
    let (input_kind, input) = match (&a.scenario, &a.inference_perf) {
        (Some(p), _) => ("the scenario", p.as_path()),
        (None, Some(p)) => ("--inference-perf", p.as_path()),
        (None, None) => return Err(CliError::bad_input("a SCENARIO file or --inference-perf FILE")),
    };
    let mut inputs = vec![(input_kind, input)];
    inputs.extend(a.router_config.as_deref().map(|p| ("--router-config", p)));
    if let Some(o) = &a.engine.outcomes {
        crate::outfile::check_output("--outcomes", o, &inputs)?;
    }
    if let Some(o) = &a.report_json {
        crate::outfile::check_output("--report-json", o, &inputs)?;
    }
    if let Some(o) = &a.report_llmd {
        crate::outfile::check_output("--report-llmd", o, &inputs)?;
    }
    let mut sc = match &a.inference_perf {
        None => scenario::Scenario::load_any(input)?,
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::bad_input(format!("{}: cannot read: {e}", p.display())))?;
            let flags = scenario::inference_perf::FleetFlags {
                pods: a.pods.unwrap_or(1),
                capacity: a.capacity.unwrap_or(1),
                router: brokerlab_core::fleet::defaults::ROUTER.name().into(),
                alpha: brokerlab_core::fleet::defaults::ALPHA,
                profile: None,
                seed: brokerlab_core::fleet::defaults::WORKLOAD_SEED,
                requests: None,
                name: None,
            };
            let imp = scenario::inference_perf::import(&text, &p.display().to_string(), &flags)?;
            for n in &imp.notes {
                crate::print_stderr(&format!("note: {n}"));
            }
            imp.scenario
        }
    };
    // --pods and --capacity override the file's (checked with the rest of the fleet below)
    if let Some(p) = a.pods {
        sc.fleet.pods = p;
    }
    if let Some(c) = a.capacity {
        sc.fleet.capacity_blocks = c;
    }
    if a.pods.is_some() || a.capacity.is_some() {
        sc.fleet.validate().map_err(run::config_error)?;
    }
    if let Some(x) = &a.rate_scale {
        let scale = crate::fleet::run::retime::parse_decimal(x, "--rate-scale", true)?;
        scenario::rate_scale::apply(&mut sc, scale, x)?;
    }
    let mut cfg = sc.fleet;
    if let Some(r) = a.router {
        cfg.router = r;
        cfg.routing = None;
    }
    router_config::apply(&mut cfg, a.router_config.as_deref(), sc.workload.seed)?;
    // Streamed: the generator is seeded and sequential, so the workload is never held.
    let mut src = scenario::Streamed::new(sc.workload, &sc.origin)?;
    src.set_pipelined(run::pipeline::wanted(a.threads));
    // A ramp ends with its last stage, usually before `requests` (a cap): count what it generates.
    let total = src.count_requests()?;
    let progress = Progress::new(a.output.quiet, "run", Unit::Requests, Some(total));
    let mut prov = Provenance::of_this_run(a.output.no_date);
    prov.add_file(if a.inference_perf.is_some() { "inference-perf config" } else { "scenario" }, input)?;
    router_config::record(&mut prov, a.router_config.as_deref(), &cfg)?;
    let out = Output {
        json: a.json.then_some(&prov),
        title: &format!("scenario {} ({})", sc.name, input.display()),
        pipeline: pipeline(&a.router_config, &cfg),
        outcomes: a.engine.outcomes.as_deref(),
        format: None,
        report_json: a.report_json.as_deref(),
        stages: None,
        aborted: Vec::new(),
        refused: 0,
        llmd: a
            .report_llmd
            .as_deref()
            .map(|p| (p, run::llmd_report::load_of("scenario", "scenario", input, sc.load.as_ref()))),
    };
    let resolved = a.engine.resolve(sc.engine.as_ref())?;
    sc.check_scale_engine(resolved.is_some())?;
    let cfg = match resolved {
        // the fleet's keys come from the file (`fleet.cache`, `fleet.index`, ...)
        Some(e) => engine::batched(cfg, e).map_err(|e| scenario::key_error(&sc.origin, e))?,
        None => cfg,
    };
    let slo = crate::fleet::scenario::deploy::slo_with(
        a.engine.slo_ttft_ms.as_deref(),
        a.engine.slo_tpot_ms.as_deref(),
        sc.slo,
    )?;
    if let Some(spec) = sc.load {
        progress.finish();
        return run_load(cfg, &sc, spec, out, slo, a.stages_plot.as_deref());
    }
    if a.stages_plot.is_some() {
        return Err(CliError::bad_input(format!(
            "--stages-plot: {} has no [load] (per-stage results come from the load generator)",
            input.display()
        )));
    }
    run_print(cfg, (&mut src, Unit::Requests), progress, out, slo)
}

/// `fleet run` of a scenario with `[load]`: the workload is the data set the load generator
/// sends from; prints the per-stage rows beside the summary.
fn run_load(
    cfg: FleetConfig,
    sc: &scenario::Scenario,
    spec: brokerlab_core::fleet::loadgen::LoadSpec,
    mut out: Output<'_>,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    stages_plot: Option<&Path>,
) -> CliResult<i32> {
    let keep = out.outcomes.is_some() || out.report_json.is_some() || out.llmd.is_some();
    let (mut res, sent) = match sc.conversations {
        Some(conv) => run::conversation::simulate_conversations_sent(cfg, conv, spec, keep, slo, &sc.origin)?,
        None => {
            let data = scenario::Generated::with_origin(sc.workload, &sc.origin)?;
            run::loadgen::simulate_load_sent(cfg, &data, spec, keep, slo)?
        }
    };
    let rows = run::stages::rows(&spec, &sent);
    if let Some(dir) = stages_plot {
        for (stem, chart) in run::stages::charts(&rows, &sc.name) {
            crate::fleet::sweep::write_file(
                dir,
                &format!("{stem}.svg"),
                crate::plot::svg(&chart, 900, 520).as_bytes(),
            )?;
            crate::fleet::sweep::write_file(dir, &format!("{stem}.png"), &crate::plot::png(&chart, 900, 520))?;
        }
        crate::fleet::sweep::commit_files()?;
    }
    out.stages = Some(rows);
    out.aborted = run::loadgen::aborted_lines(&sent, &spec);
    // the turns the server refused for their length (conversation replay), after every request
    out.aborted.extend(run::loadgen::refused_lines(&sent));
    out.refused =
        sent.iter().filter(|s| s.status == Some(brokerlab_core::fleet::loadgen::Status::Refused)).count() as u64;
    let more = |seq| run::loadgen::outcome_fields(&sent, seq);
    out.print::<()>(&mut res, Some(&more), None)
}

/// `fleet gen-trace`: a scenario's workload written as a 16-token Mooncake trace.
fn gen_trace_cmd(a: GenTraceArgs) -> CliResult<i32> {
    crate::outfile::check_output("-o", &a.output, &[("the scenario", a.scenario.as_path())])?;
    let sc = scenario::Scenario::load(&a.scenario)?.without_load("fleet gen-trace")?;
    let mut src = scenario::Streamed::new(sc.workload, &sc.origin)?;
    // a ramp stops at its last stage, before `requests` (a cap): say what was written
    let written = src.count_requests()?;
    crate::outfile::write_with(&a.output, |w| scenario::write_trace_from(&mut src, w))
        .map_err(|e| CliError::failure(format!("-o {}: cannot write: {e}", a.output.display())))?;
    crate::print_stderr(&format!(
        "wrote {written} requests to {} (replay with --trace-block-size 16)",
        a.output.display()
    ));
    Ok(0)
}

/// `fleet report`.
fn report_cmd(a: ReportArgs) -> CliResult<i32> {
    let progress = Progress::new(a.output.quiet, "report", Unit::Points, None);
    let prov = Provenance::of_this_run(a.output.no_date);
    let ex = report::report(&a.out, a.threads, a.shrink, &progress, prov)?;
    progress.finish();
    sweep::commit_files()?;
    if ex.shrink > 1 {
        say!("shrunk run: every scenario ran its request count divided by {}\n", ex.shrink);
    }
    say!("{}\n", report::the_number(&ex));
    for (k, v) in report::headlines(&ex) {
        say!("{k:<52} {v}");
    }
    say!(
        "\nwrote {0}/index.html, {0}/summary.md, plots (.svg, .png), points.csv (+ points.provenance.json), \
         experiments.json",
        a.out.display()
    );
    Ok(0)
}

/// `fleet bench`: the replay throughput, or `--route` (one decision), or `--sweep`.
fn bench_cmd(a: BenchArgs) -> CliResult<i32> {
    crate::mem::set_budget(a.mem.max_memory);
    check_trace_block(a.trace_block_size)?;
    if a.route {
        let mut reports = Vec::new();
        for pods in route::pod_counts() {
            reports.push(route::run(pods, 200, a.repeats)?);
        }
        if a.json {
            say!("{}", serde_json::to_string_pretty(&reports).expect("report serializes"));
        } else {
            let text: Vec<String> = reports.iter().map(route::render).collect();
            say_raw!("{}", text.join("\n"));
        }
        return Ok(0);
    }
    if a.scale {
        let s = bench::scale::run(a.scale_requests, a.scale_pods)?;
        if a.json {
            say!("{}", serde_json::to_string_pretty(&s).expect("report serializes"));
        } else {
            say_raw!("{}", bench::scale::render(&s));
        }
        return Ok(0);
    }
    if let Some(n) = a.sweep_configs {
        let s = bench::sweep_configs::run(&a.trace, a.trace_block_size, n as usize, a.sweep_threads)?;
        if a.json {
            say!("{}", serde_json::to_string_pretty(&s).expect("report serializes"));
        } else {
            say_raw!("{}", bench::sweep_configs::render(&s));
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
    let r = bench::run(a.trace, a.identity_trace, a.trace_block_size, a.pods, a.capacity, a.repeats, &py)?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
    } else {
        say_raw!("{}", bench::render(&r));
    }
    Ok(0)
}

/// The retiming flags of `fleet replay` (exact fractions; docs/MODEL.md, "Trace speed").
fn retime_of(a: &super::args::ReplayArgs) -> CliResult<crate::fleet::run::retime::Retime> {
    use crate::fleet::run::retime::{Retime, parse_decimal};
    let (num, den) = match &a.speedup {
        Some(x) => parse_decimal(x, "--speedup", true)?,
        None => (1, 1),
    };
    let start_at_ns = match &a.start_at {
        Some(x) => {
            let (n, d) = parse_decimal(x, "--start-at", false)?;
            let ns = n as u128 * 1_000_000_000 / d as u128;
            u64::try_from(ns).map_err(|_| CliError::bad_input(format!("--start-at {x}: too large")))?
        }
        None => 0,
    };
    Ok(Retime { num, den, start_at_ns, max_requests: a.max_requests })
}

/// How a run's result is printed: one JSON object with the provenance `json`, or a table under
/// `title`; `pipeline` describes a `--router-config` router; `outcomes`: the file for the batched
/// engine's per-request lines.
pub(super) struct Output<'a> {
    pub(super) json: Option<&'a Provenance>,
    pub(super) title: &'a str,
    pub(super) pipeline: Option<String>,
    pub(super) outcomes: Option<&'a Path>,
    /// The trace format, named first in JSON (formats other than Mooncake).
    pub(super) format: Option<&'static str>,
    /// `--report-json`: the file for vLLM's result keys (needs the completions kept).
    pub(super) report_json: Option<&'a Path>,
    /// A load-generator run's per-stage rows (`stages` in JSON, a table in text).
    pub(super) stages: Option<Vec<run::stages::StageRow>>,
    /// `--outcomes` lines of the requests the server aborted (no completion), by request; then
    /// those of the turns it refused (conversation replay).
    pub(super) aborted: Vec<(u64, String)>,
    /// Turns the server refused for their length, never dispatched (conversation replay):
    /// failures in `--report-json` and `--report-llmd`.
    pub(super) refused: u64,
    /// `--report-llmd`: the file for llm-d-benchmark's report, and what it says of the load.
    pub(super) llmd: Option<(&'a Path, run::llmd_report::Load)>,
}

impl Output<'_> {
    /// Writes the per-request lines when asked (`more`: a request's extra fields), then prints
    /// `summary` (with `extra` beside it in JSON, under it in a table).
    pub(super) fn print<X: serde::Serialize>(
        self,
        res: &mut run::RunResult,
        more: Option<&dyn Fn(u64) -> String>,
        extra: Option<(&X, String)>,
    ) -> CliResult<i32> {
        if let Some(path) = self.outcomes {
            let offload = res.summary.batched().is_some_and(|b| b.offload.is_some());
            let pd = res.summary.batched().is_some_and(|b| b.pd.is_some());
            run::outcomes::write_outcomes(path, &res.completions, more, offload, pd, &self.aborted)?;
        }
        if let Some((path, load)) = self.llmd {
            let b = res.summary.batched().ok_or_else(run::llmd_report::fifo_refused)?;
            let router = self.pipeline.clone().unwrap_or_else(|| b.router.name().to_string());
            let r = run::llmd_report::report(&res.completions, b, load, &router, self.refused);
            run::llmd_report::write(path, &[r])?;
        }
        res.summary.set_pipeline(self.pipeline);
        if let Some(path) = self.report_json {
            crate::fleet::run::bench_json::write(path, res, self.json, self.refused)?;
        }
        match self.json {
            Some(prov) => {
                /// The JSON of a run: the format (other formats than Mooncake), the summary, the
                /// breakdown (Bailian).
                #[derive(serde::Serialize)]
                struct With<'a, X> {
                    #[serde(skip_serializing_if = "Option::is_none")]
                    format: Option<&'static str>,
                    #[serde(flatten)]
                    summary: &'a RunSummary,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    breakdown: Option<&'a X>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    stages: Option<&'a [run::stages::StageRow]>,
                }
                let with = With {
                    format: self.format,
                    summary: &res.summary,
                    breakdown: extra.as_ref().map(|e| e.0),
                    stages: self.stages.as_deref(),
                };
                say!("{}", prov.json_with(&with))
            }
            None => {
                say!("{}", self.title);
                say_raw!("{}", res.summary.render());
                if let Some((_, text)) = extra {
                    say_raw!("{text}");
                }
                if let Some(rows) = &self.stages {
                    say_raw!("{}", run::stages::render(rows));
                }
            }
        }
        Ok(0)
    }
}

/// The one-line description of the router of a `--router-config` run (None without one).
fn pipeline(router_config: &Option<std::path::PathBuf>, cfg: &FleetConfig) -> Option<String> {
    router_config.as_ref().and_then(|_| router_config::describe(cfg))
}

/// Runs `src` (counted in `unit` on `progress`) through a fleet of `cfg`'s engine and prints the
/// result as `out` says. Shared by `fleet replay` and `fleet run`.
fn run_print(
    cfg: FleetConfig,
    (src, unit): (&mut dyn run::RequestSource, Unit),
    progress: Progress,
    out: Output<'_>,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> CliResult<i32> {
    let mut tracked = Tracked { inner: src, progress: &progress, unit };
    let keep = out.outcomes.is_some() || out.report_json.is_some() || out.llmd.is_some();
    let res = run::simulate_any(cfg, &mut tracked, keep, slo);
    progress.finish();
    out.print::<()>(&mut res?, None, None)
}

/// Checks the memory budget of a sweep: its workloads plus one fleet per worker thread (the
/// largest point's).
fn check_sweep_memory(gens: &[scenario::Generated], specs: &[sweep::PointSpec], threads: usize) -> CliResult<()> {
    let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
    let workers = threads.min(specs.len()).max(1) as u64;
    let mut largest: Vec<crate::mem::Need> = Vec::new();
    let mut largest_total = 0u64;
    for p in specs {
        // the batched engine's buffers grow from small; the FIFO engine's are counted at the start
        let Some(_) = p.cfg.fifo() else { continue };
        let s = run::FifoSizes::of(&p.cfg);
        let l =
            brokerlab_core::fleet::FifoLayout::new(&p.cfg, s.queue_per_pod, s.pending).map_err(run::config_error)?;
        let needs = crate::fleet::run::sizes::fleet_needs(&p.cfg, &l);
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
    crate::mem::check("the sweep", &needs).map(|_| ())
}

fn merge_cmd(a: MergeArgs) -> CliResult<i32> {
    let parts = shard::read_all(&a.dirs)?;
    let text = if parts[0].1.engine == <run::BatchedSummary as sweep::SweepSummary>::ENGINE {
        merge_write::<run::BatchedSummary>(parts, &a.out)?
    } else {
        merge_write::<run::Summary>(parts, &a.out)?
    };
    sweep::commit_files()?;
    say_raw!("{text}");
    Ok(0)
}

/// Puts the shards' points back in order and writes the files one sweep writes.
fn merge_write<S: sweep::SweepSummary>(
    parts: Vec<(std::path::PathBuf, shard::Partial)>,
    out: &Path,
) -> CliResult<String> {
    let m = shard::merge::<sweep::Point<S>>(parts, out)?;
    shard::write_points(out, &m.scenario_name, m.param, &m.points, &m.provenance)
}

fn sweep_cmd(a: SweepArgs) -> CliResult<i32> {
    crate::mem::set_budget(a.mem.max_memory);
    let mut inputs = vec![("the scenario", a.scenario.as_path())];
    inputs.extend(a.router_config.iter().map(|p| ("--router-config", p.as_path())));
    crate::outfile::check_output_dir("--out", &a.out, &inputs)?;
    let sc = scenario::Scenario::load(&a.scenario)?.without_load("fleet sweep")?;
    let engine = a.engine.resolve(sc.engine.as_ref())?;
    sc.check_scale_engine(engine.is_some())?;
    if let Some(e) = engine {
        // the scenario's keys (`fleet.cache`, `fleet.index`, ...) named as in the file
        engine::batched(sc.fleet, e).map_err(|e| scenario::key_error(&sc.origin, e))?;
    }
    let Values { gens, values, param } = sweep_values(&sc, &a)?;
    let mut specs = if a.router.is_empty() {
        sweep::for_each_router(&values)
    } else {
        if param == sweep::SweepParam::Alpha
            && let Some(r) = a.router.iter().find(|&&r| r != brokerlab_core::fleet::RouterKind::PrefixAware)
        {
            return Err(CliError::bad_input(format!(
                "--param alpha: alpha is prefix-aware's load penalty; --router {r} does not read it"
            )));
        }
        sweep::for_routers(&values, &a.router, sc.workload.seed)?
    };
    add_router_configs(&mut specs, &a, &values, param, sc.workload.seed)?;
    if param == sweep::SweepParam::PrefillPods {
        if engine.is_none() {
            return Err(CliError::bad_input(
                "--param prefill-pods: prefill/decode disaggregation runs under the batched engine (--engine batched or [fleet.engine])",
            ));
        }
        if !sc.fleet.pools.is_empty() {
            return Err(CliError::bad_input(format!(
                "--param prefill-pods: {} has [[fleet.pool]] tables, whose prefill pods are its prefill pools' `pods` (fleet.pool[i].pods)",
                sc.origin
            )));
        }
    }
    if let Some(e) = engine {
        // each point's values (`--param stale` ...) named as flags
        for p in &mut specs {
            let mut e = e;
            match param {
                // exactly the point's tier, 0 included (over the scenario's own)
                sweep::SweepParam::CpuCapacity => e.offload.cpu_capacity = p.value as u32,
                // NP prefill pods, 0: aggregated; the scenario's decider and link, else the defaults
                sweep::SweepParam::PrefillPods => {
                    let np = p.value as u32;
                    e.pd = (np > 0).then(|| {
                        let mut pd = e.pd.unwrap_or(brokerlab_core::fleet::engine::pd::PdConfig::new(np, 0));
                        pd.prefill_pods = np;
                        pd
                    });
                }
                _ => {}
            }
            p.cfg = engine::batched(p.cfg, e).map_err(run::config_error)?;
        }
    }
    check_sweep_memory(&gens, &specs, a.threads)?;
    // the flags override the scenario's [slo] keys
    let slo_of_sweep = crate::fleet::scenario::deploy::slo_with(
        a.engine.slo_ttft_ms.as_deref(),
        a.engine.slo_tpot_ms.as_deref(),
        sc.slo,
    )?;
    let mut prov = Provenance::of_this_run(a.output.no_date);
    prov.add_file("scenario", &a.scenario)?;
    for p in &a.router_config {
        prov.add_file("router config", p)?;
    }
    if let Some(sh) = a.shard {
        // each point carries its SLO keys as an unsharded sweep's does; the SLO is part of the
        // sweep's digest, so shards of different SLOs do not merge
        let slo = slo_of_sweep;
        // this shard's points, with their indices in the whole sweep
        let idx: Vec<usize> = (0..specs.len()).filter(|k| sh.owns(*k)).collect();
        let mine: Vec<sweep::PointSpec> = idx.iter().map(|&k| specs[k].clone()).collect();
        let p = Progress::new(
            a.output.quiet,
            &format!("sweep {param} shard {}", sh.index),
            Unit::Points,
            Some(mine.len() as u64),
        );
        let id = shard::sweep_id(&prov.inputs, param, engine.as_ref(), &specs, slo);
        let args =
            ShardArgs { out: &a.out, shard: sh, id, prov: &prov, name: &sc.name, param, threads: a.threads, slo };
        match engine {
            Some(_) => run_shard::<Batched>(&args, &gens, &idx, &mine, p)?,
            None => run_shard::<Fifo>(&args, &gens, &idx, &mine, p)?,
        }
        sweep::commit_files()?;
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
    let progress = Progress::new(a.output.quiet, &format!("sweep {param}"), Unit::Points, Some(specs.len() as u64));
    let text = match engine {
        Some(_) => run_sweep::<Batched>(&a, param, &sc.name, (&gens, &specs), &prov, slo_of_sweep, progress)?,
        None => run_sweep::<Fifo>(&a, param, &sc.name, (&gens, &specs), &prov, slo_of_sweep, progress)?,
    };
    sweep::commit_files()?;
    say_raw!("{text}");
    Ok(0)
}

/// `fleet sweep --router-config FILE...`: each file's points after the routers', every value
/// once per file, named by the file's stem (a changed pipeline's kind is `custom`, which would
/// name them all alike). A file whose name another router of the sweep already has is refused,
/// as is a file whose router does not read alpha under `--param alpha`.
fn add_router_configs(
    specs: &mut Vec<sweep::PointSpec>,
    a: &SweepArgs,
    values: &[(f64, usize, FleetConfig)],
    param: sweep::SweepParam,
    seed: u64,
) -> CliResult<()> {
    use brokerlab_core::fleet::RouterKind;
    let mut named: Vec<String> = Vec::new();
    for p in specs.iter() {
        let n = p.label.clone().unwrap_or_else(|| p.cfg.router.name().to_string());
        if !named.contains(&n) {
            named.push(n);
        }
    }
    for p in &a.router_config {
        let label = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string());
        let mut kind = None;
        for &(value, workload, cfg) in values {
            let mut cfg = cfg;
            router_config::apply(&mut cfg, Some(p), seed)?;
            kind = Some(cfg.router);
            specs.push(sweep::PointSpec { value, workload, cfg, label: Some(label.clone()) });
        }
        let Some(k) = kind else { continue };
        if named.contains(&label) {
            return Err(CliError::bad_input(format!(
                "--router-config {}: its points would be named `{label}` (the file's stem), as another router's of this sweep; rename the file, or use fleet compare",
                p.display(),
            )));
        }
        if param == sweep::SweepParam::Alpha && k != RouterKind::PrefixAware {
            return Err(CliError::bad_input(format!(
                "--param alpha: alpha is prefix-aware's load penalty; --router-config {} ({}) does not read it",
                p.display(),
                k.name()
            )));
        }
        named.push(label);
    }
    Ok(())
}

/// A sweep's points under engine `K`, written as one sweep writes them.
fn run_sweep<K: run::HostEngine>(
    a: &SweepArgs,
    param: sweep::SweepParam,
    name: &str,
    (gens, specs): (&[scenario::Generated], &[sweep::PointSpec]),
    prov: &Provenance,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
    progress: Progress,
) -> CliResult<String>
where
    K::Summary: sweep::SweepSummary,
{
    let points = sweep::run_points_slo::<K>(param, gens, specs, a.threads, &progress, slo);
    progress.finish();
    shard::write_points(&a.out, name, param, &points?, prov)
}

/// Where a shard's results go and what names it.
struct ShardArgs<'a> {
    out: &'a Path,
    shard: shard::Shard,
    id: shard::SweepId,
    prov: &'a Provenance,
    name: &'a str,
    param: sweep::SweepParam,
    threads: usize,
    slo: Option<brokerlab_core::fleet::slo::Slo>,
}

/// This shard's points (`mine`, at `idx` in the whole sweep) under engine `K`, written to its
/// `partial.json`.
fn run_shard<K: run::HostEngine>(
    a: &ShardArgs<'_>,
    gens: &[scenario::Generated],
    idx: &[usize],
    mine: &[sweep::PointSpec],
    progress: Progress,
) -> CliResult<()>
where
    K::Summary: sweep::SweepSummary,
{
    let points = sweep::run_points_slo::<K>(a.param, gens, mine, a.threads, &progress, a.slo);
    progress.finish();
    let points: Vec<_> = idx.iter().copied().zip(points?).collect();
    let kind = <K::Summary as sweep::SweepSummary>::ENGINE;
    shard::write_partial(a.out, a.shard, a.id.clone(), a.prov, a.name, a.param, kind, &points)
}
