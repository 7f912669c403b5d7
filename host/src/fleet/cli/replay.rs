//! `fleet replay` of a bailian, dynamo or tokens trace: the trace's request source
//! ([`crate::fleet::input::formats`] reads the lines) driven by either engine, and what it prints.

use brokerlab_core::fleet::FleetConfig;
use brokerlab_core::fleet::limits::BLOCK_TOKENS;

use crate::error::{CliError, CliResult};
use crate::fleet::cli::args::ReplayArgs;
use crate::fleet::input::formats::{Format, FormatSource, Keyer, only_token_hash, render_breakdown};

/// `fleet replay` of a bailian, dynamo or tokens trace (`cfg` already checked), under the FIFO
/// engine or `--engine batched`.
pub fn format(
    a: ReplayArgs,
    format: Format,
    cfg: FleetConfig,
    engine: Option<brokerlab_core::fleet::BatchedConfig>,
) -> CliResult<i32> {
    use crate::fleet::run::progress::{Progress, Tracked, Unit};
    use crate::fleet::run::{self, Batched, Fifo, RunResult, RunSummary};
    only_token_hash(&a.hash, format)?;
    let outcomes = a.engine.outcomes.as_deref();
    let slo = crate::fleet::scenario::deploy::slo(a.engine.slo_ttft_ms.as_deref(), a.engine.slo_tpot_ms.as_deref())?;
    let run_cfg = match engine {
        Some(e) => crate::fleet::scenario::engine::batched(cfg, e).map_err(run::config_error)?,
        None => cfg,
    };
    let size = std::fs::metadata(&a.trace).ok().filter(|m| m.is_file()).map(|m| m.len());
    let progress = Progress::new(a.output.quiet, "replay", Unit::TraceBytes, size);
    let mut breakdown = None;
    let mut turns = None;
    let res = match format {
        Format::Tokens | Format::Bailian => {
            let mut src = format_source(&a, format)?;
            let bailian = format == Format::Bailian;
            let mut tracked = Tracked { inner: &mut src, progress: &progress, unit: Unit::TraceBytes };
            let keep = bailian || outcomes.is_some() || a.report_json.is_some() || a.report_llmd.is_some();
            let res = run::simulate_any(run_cfg, &mut tracked, keep, slo)?;
            if bailian {
                // (request, L, hit tokens) of each request, from what its engine kept
                let fifo = res.outcomes.iter().map(|o| {
                    let cpu = o.cpu_hit_blocks as u64 * BLOCK_TOKENS as u64;
                    (o.request, o.hit_tokens + o.prefill_tokens + cpu, o.hit_tokens)
                });
                let batched = res.completions.iter().map(|c| (c.request, c.input_tokens, c.hit_tokens));
                breakdown = Some(src.breakdown(fifo.chain(batched)));
            }
            res
        }
        Format::Dynamo | Format::Mooncake => {
            let s = a.trace_block_size.unwrap_or(512);
            let trace = crate::fleet::input::dynamo::load(&a.trace, s, a.max_line_bytes, a.max_blank_lines)?;
            let keep = outcomes.is_some() || a.report_json.is_some() || a.report_llmd.is_some();
            let (res, turn_of) = match run_cfg.engine {
                brokerlab_core::fleet::EngineConfig::Fifo { .. } => {
                    let (r, t) =
                        crate::fleet::input::dynamo::simulate::<Fifo>(run_cfg, &trace, &a.trace, s, keep, slo)?;
                    (
                        RunResult {
                            summary: RunSummary::Fifo(Box::new(r.summary)),
                            outcomes: r.outcomes,
                            completions: r.completions,
                        },
                        t,
                    )
                }
                brokerlab_core::fleet::EngineConfig::Batched(_) => {
                    let (r, t) =
                        crate::fleet::input::dynamo::simulate::<Batched>(run_cfg, &trace, &a.trace, s, keep, slo)?;
                    let summary = RunSummary::Batched(Box::new(r.summary));
                    (RunResult { summary, outcomes: r.outcomes, completions: r.completions }, t)
                }
            };
            turns = Some((trace, turn_of));
            res
        }
    };
    progress.finish();
    let json = a.json.then(|| {
        let mut prov = crate::provenance::Provenance::of_this_run(a.output.no_date);
        prov.add_file("trace", &a.trace)?;
        if let Some(p) = &a.fleet.pools {
            prov.add_file("pools", p)?;
        }
        crate::fleet::cli::router_config::record(&mut prov, a.fleet.router_config.as_deref(), &cfg)?;
        Ok::<_, CliError>(prov)
    });
    let prov = json.transpose()?;
    let out = crate::fleet::cli::commands::Output {
        json: prov.as_ref(),
        title: &format!("trace {} (format {})", a.trace.display(), format.name()),
        pipeline: (a.fleet.router_config.is_some() || a.fleet.routing_scorers.is_some())
            .then(|| crate::fleet::cli::router_config::describe(&cfg))
            .flatten(),
        outcomes,
        format: Some(format.name()),
        report_json: a.report_json.as_deref(),
        stages: None,
        aborted: Vec::new(),
        refused: 0,
        llmd: a
            .report_llmd
            .as_deref()
            .map(|p| (p, crate::fleet::run::llmd_report::load_of("trace", "trace", &a.trace, None))),
    };
    let more = turns
        .as_ref()
        .map(|(trace, turn_of)| move |request| crate::fleet::input::dynamo::outcome_fields(trace, turn_of, request));
    let more = more.as_ref().map(|f| f as &dyn Fn(u64) -> String);
    let extra = breakdown.as_ref().map(|b| (b, render_breakdown(b)));
    out.print(&mut { res }, more, extra)
}

/// The request source of a tokens or bailian trace, its flags checked.
fn format_source(a: &ReplayArgs, format: Format) -> CliResult<FormatSource> {
    let keyer = Keyer::new(&a.hash)?;
    keyer.check_replay()?;
    if format == Format::Tokens && a.trace_block_size.is_some() {
        return Err(CliError::bad_input(
            "--trace-block-size: a tokens trace has no hash ids (its keys' block size is --block-size)",
        ));
    }
    Ok(FormatSource {
        path: a.trace.clone(),
        format,
        keyer,
        trace_block_tokens: a.trace_block_size.unwrap_or(BLOCK_TOKENS as u32),
        labels: Vec::new(),
        types: Vec::new(),
        max_line_bytes: a.max_line_bytes,
        max_blank_lines: a.max_blank_lines,
        read: Default::default(),
        growth: None,
    })
}
