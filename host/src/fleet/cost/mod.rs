//! The physics step cost on the host: model and GPU descriptions from files, the calibration on
//! published measurements and its check (`fleet cost-check`), and the fit of a user's own step log
//! (`fleet calibrate`). The model itself is `brokerlab_core::fleet::cost` (docs/MODEL.md, "The
//! physics step cost").

pub mod calibrate;
pub mod check;
pub mod describe;
pub mod fit;
pub mod published;
pub mod serve;
pub mod vllm_result;

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::cost::{CostField, Error as CostError, Physics};
use clap::Args;

use crate::error::{CliError, CliResult, FleetError};

/// `fleet calibrate` arguments.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// The model: a built-in name (llama-3.1-8b, llama-3.1-70b, qwen3-8b, qwen3-8b-fp8, qwen3-32b, codellama-34b,
    /// gpt-oss-120b, deepseek-v3), a TOML description, or a Hugging Face config.json.
    #[arg(long)]
    pub model: String,
    /// The GPU: a built-in name (h100, h200, a100, b200, l40s, h20, h800) or a TOML description.
    #[arg(long)]
    pub gpu: String,
    /// Tensor-parallel size.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Step log, CSV: prefill_tokens, decode_requests, context_tokens, step_ms [, prefill_requests,
    /// prefill_context_tokens], one row per engine step.
    #[arg(long, value_name = "FILE.csv", required_unless_present = "vllm_result", conflicts_with = "vllm_result")]
    pub steps: Option<PathBuf>,
    /// A `vllm bench serve --save-result --save-detailed` JSON: its requests are replayed through
    /// the batched engine and the profile fitted to their TTFT and mean ITL.
    #[arg(long, value_name = "FILE.json")]
    pub vllm_result: Option<PathBuf>,
    /// With --vllm-result: the server's --max-num-seqs (vLLM's default 1024).
    #[arg(long, default_value_t = serve::VLLM_DEFAULT_SERVER.max_num_seqs)]
    pub max_num_seqs: u32,
    /// With --vllm-result: the server's --max-num-batched-tokens (vLLM's default 8192).
    #[arg(long, default_value_t = serve::VLLM_DEFAULT_SERVER.max_num_batched_tokens)]
    pub max_num_batched_tokens: u32,
    /// The fitted profile (TOML); the plot of predicted vs measured is written beside it (.svg, .png).
    #[arg(short = 'o', long = "out", value_name = "FILE.toml")]
    pub out: PathBuf,
}

/// `fleet cost-check` arguments.
#[derive(Debug, Args)]
pub struct CostCheckArgs {
    /// Print one JSON object (every row, the calibration) instead of the Markdown table.
    #[arg(long)]
    pub json: bool,
}

fn physics_error(e: CostError) -> CliError {
    match e {
        CostError::Invalid { field: CostField::Tp, expected } => {
            CliError::bad_input(format!("--tp: expected {expected}"))
        }
        other => CliError::bad_input(format!("the profile: {other}")),
    }
}

/// Stages an output file; [`crate::outfile::commit`] writes the set whole or not at all.
fn stage(path: &std::path::Path, bytes: &[u8]) -> CliResult<()> {
    crate::outfile::stage(path, bytes).map_err(|source| FleetError::Write { path: path.to_path_buf(), source }.into())
}

/// `brokerlab fleet calibrate`.
pub fn calibrate_cmd(a: CalibrateArgs) -> CliResult<i32> {
    // the profile and its plots never overwrite an input
    let (svg, png) = calibrate::plot_paths(&a.out);
    let (flag, input) = match (&a.steps, &a.vllm_result) {
        (Some(s), _) => ("--steps", s.clone()),
        (None, Some(v)) => ("--vllm-result", v.clone()),
        (None, None) => return Err(CliError::bad_input("--steps or --vllm-result: one is required")),
    };
    let inputs = [(flag, input.as_path()), ("--model", Path::new(&a.model)), ("--gpu", Path::new(&a.gpu))];
    for (flag, out) in [("-o", &a.out), ("-o (its .svg plot)", &svg), ("-o (its .png plot)", &png)] {
        crate::outfile::check_output(flag, out, &inputs)?;
    }
    let model = describe::load_model(&a.model)?;
    let gpu = describe::load_gpu(&a.gpu)?;
    let start = Physics::new(model, gpu, a.tp, calibrate::start_calibration(model.layers)).map_err(physics_error)?;
    let bytes = std::fs::read(&input)
        .map_err(|e| CliError::bad_input(format!("{flag} {}: cannot read: {e}", input.display())))?;
    let source = input.display().to_string();
    if a.vllm_result.is_some() {
        return calibrate_serve(&a, start, &bytes, &source, (&svg, &png));
    }
    let rows = calibrate::read_steps(&input)?;
    let fit = calibrate::fit_steps(start, &rows, &source)?;
    stage(&a.out, calibrate::profile_toml(&fit, &source, &calibrate::sha256_hex(&bytes)).as_bytes())?;
    let chart = calibrate::chart(&fit, &source);
    stage(&svg, crate::plot::svg(&chart, 900, 620).as_bytes())?;
    stage(&png, &crate::plot::png(&chart, 900, 620))?;
    crate::outfile::commit().map_err(|(path, source)| FleetError::Write { path, source })?;
    say!(
        "fitted {} steps ({} held out) of {} x {}: step time error median {:.1}%, p90 {:.1}% on the fit rows; \
         median {:.1}%, p90 {:.1}% held out",
        fit.points.len(),
        fit.held_out.rows,
        a.tp,
        a.gpu,
        100.0 * fit.fit.median,
        100.0 * fit.fit.p90,
        100.0 * fit.held_out.median,
        100.0 * fit.held_out.p90
    );
    for (f, se) in fit.factors.iter().zip(&fit.std_err) {
        let v = f.value(fit.physics.calibration());
        let weak = if calibrate::identified(*se) { "" } else { "  (not identified by these steps)" };
        say!("  {:<14} {v:>12}  +-{:.1}%{weak}", f.key(), 100.0 * se);
    }
    say!("  ({} loss evaluations)", fit.search.evals);
    say!("wrote {}, {}, {}", a.out.display(), svg.display(), png.display());
    Ok(0)
}

/// `fleet calibrate --vllm-result`: the fit through the batched engine.
fn calibrate_serve(
    a: &CalibrateArgs,
    start: Physics,
    bytes: &[u8],
    source: &str,
    (svg, png): (&Path, &Path),
) -> CliResult<i32> {
    let text = std::str::from_utf8(bytes).map_err(|_| CliError::bad_input(format!("{source}: not UTF-8 text")))?;
    let result = vllm_result::parse(text).map_err(|e| CliError::bad_input(format!("{source}: {e}")))?;
    let server = serve::Server { max_num_seqs: a.max_num_seqs, max_num_batched_tokens: a.max_num_batched_tokens };
    let fit = serve::fit_serve(start, server, &result, source)?;
    let toml = calibrate::profile_head(&fit.physics, source, &calibrate::sha256_hex(bytes))
        + &serve::fit_toml(&fit, source, result.requests.len());
    stage(&a.out, toml.as_bytes())?;
    let chart = serve::chart(&fit, source);
    stage(svg, crate::plot::svg(&chart, 900, 620).as_bytes())?;
    stage(png, &crate::plot::png(&chart, 900, 620))?;
    crate::outfile::commit().map_err(|(path, source)| FleetError::Write { path, source })?;
    let pct = |e: &calibrate::ErrorStats| format!("median {:.1}%, p90 {:.1}%", 100.0 * e.median, 100.0 * e.p90);
    say!(
        "fitted {} requests ({} failed, left out) of {} x {} through the batched engine:",
        result.requests.len(),
        result.failed,
        a.tp,
        a.gpu
    );
    say!(
        "  TTFT      fit {} ({} requests); held out {} ({})",
        pct(&fit.fit_ttft),
        fit.fit_ttft.rows,
        pct(&fit.held_ttft),
        fit.held_ttft.rows
    );
    say!(
        "  mean ITL  fit {} ({} requests); held out {} ({})",
        pct(&fit.fit_itl),
        fit.fit_itl.rows,
        pct(&fit.held_itl),
        fit.held_itl.rows
    );
    for f in &fit.factors {
        say!("  {:<14} {:>12}", f.key(), f.value(fit.physics.calibration()));
    }
    say!("  ({} loss evaluations, each a replay)", fit.search.evals);
    say!("wrote {}, {}, {}", a.out.display(), svg.display(), png.display());
    Ok(0)
}

/// `brokerlab fleet cost-check`.
pub fn cost_check_cmd(a: CostCheckArgs) -> CliResult<i32> {
    let c = check::run();
    if a.json {
        say!("{}", serde_json::to_string_pretty(&c).expect("the check serializes"));
    } else {
        say!("## What the cost model says, and how wrong it is\n");
        say_raw!("{}", check::markdown(&c));
    }
    Ok(0)
}
