//! `brokerlab fleet calibrate --vllm-result FILE.json`: fit a physics profile to what a user's own
//! `vllm bench serve --save-result --save-detailed` measured, through the batched engine
//! (docs/MODEL.md, "Fitting your own server").
//!
//! The benchmark's requests are replayed on one pod of the batched engine (vLLM's scheduler rules,
//! KV capacity derived from the profile) at their `start_times`, with prompts that share no prefix
//! (vllm bench's random prompts); each request's predicted TTFT and mean ITL are compared with the
//! measured ones. Every fifth request (5, 10, ...) is held out of the loss; it still runs in the
//! replay (it shares the batches), so the held-out error is that of requests the fit did not see,
//! not of an independent run.

use std::fmt::Write as _;

use brokerlab_core::fleet::cost::{Calibration, Physics};
use brokerlab_core::fleet::hash::fmix64;
use brokerlab_core::fleet::{
    BatchedConfig, Error as CoreError, FleetConfig, Request, RouterKind, StepProfile, limits::BLOCK_TOKENS,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};

use super::calibrate::{ErrorStats, Factor, HOLD_OUT, MIN_ROWS_PER_FACTOR, PRIOR_WEIGHT, held_out, stats};
use super::fit::{Minimum, minimize, sq_rel};
use super::vllm_result::{Measured, VllmResult};
use crate::error::{CliError, CliResult};
use crate::fleet::run::{Batched, RequestSource, simulate};
use crate::plot::{Chart, Series};

/// The vLLM server settings the replay uses (vLLM's defaults; the result file does not record them).
#[derive(Clone, Copy, Debug)]
pub struct Server {
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: u32,
}

/// vLLM's defaults on an H100-class GPU (1024 sequences, 8192 tokens per step).
pub const VLLM_DEFAULT_SERVER: Server = Server { max_num_seqs: 1024, max_num_batched_tokens: 8192 };

/// One request of the replay.
#[derive(Clone, Copy, Debug)]
struct Replayed {
    arrival_ns: u64,
    input_tokens: u64,
    output_tokens: u64,
}

/// The requests, in arrival order, fed to the engine with prompts that share no block.
struct Requests<'a>(&'a [Replayed]);

impl RequestSource for Requests<'_> {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let mut keys = Vec::new();
        for (i, r) in self.0.iter().enumerate() {
            keys.clear();
            let blocks = r.input_tokens / BLOCK_TOKENS as u64;
            keys.extend((0..blocks).map(|j| fmix64(((i as u64 + 1) << 32) ^ (j + 1))));
            let req = Request {
                arrival_ns: r.arrival_ns,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                keys: &keys,
            };
            sink(&req).map_err(|e| {
                CliError::bad_input(format!("request {i}: {}", crate::fleet::run::fields::request_message(&e)))
            })?;
        }
        Ok(())
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.0.len() as u64)
    }
}

/// Predicted (TTFT s, mean ITL s) of each request, in file order.
pub type Predicted = Vec<(f64, Option<f64>)>;

/// Replays `reqs` (arrivals from `start_s`) on one pod of the batched engine under `p`.
pub fn replay(p: &Physics, server: Server, reqs: &[Measured]) -> CliResult<Predicted> {
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    let start = |i: usize| reqs[i].start_s.unwrap_or(0.0);
    order.sort_by(|&a, &b| start(a).total_cmp(&start(b)));
    let replayed: Vec<Replayed> = order
        .iter()
        .map(|&i| Replayed {
            arrival_ns: (start(i) * 1e9).round() as u64,
            input_tokens: reqs[i].input_tokens.max(1),
            output_tokens: reqs[i].output_tokens.max(1),
        })
        .collect();
    let capacity = p.kv_capacity_blocks().map_err(|e| CliError::bad_input(format!("the profile: {e}")))?;
    let engine = BatchedConfig {
        max_num_seqs: server.max_num_seqs,
        max_num_batched_tokens: server.max_num_batched_tokens,
        ..BatchedConfig::with_physics(StepProfile::PhysicsFile, *p)
    };
    let cfg = FleetConfig::batched(1, capacity as usize, RouterKind::RoundRobin, engine);
    let ran = simulate::<Batched>(cfg, &mut Requests(&replayed), true)?;
    let mut out = vec![(f64::NAN, None); reqs.len()];
    for c in &ran.completions {
        let i = order[c.request as usize];
        let itl = (c.output_tokens >= 2)
            .then(|| (c.finish_ns - c.first_token_ns) as f64 / 1e9 / (c.output_tokens - 1) as f64);
        out[i] = (c.ttft_ns() as f64 / 1e9, itl);
    }
    Ok(out)
}

/// The measured mean ITL of a request (None without gaps).
fn mean_itl(m: &Measured) -> Option<f64> {
    (!m.itls_s.is_empty()).then(|| m.itls_s.iter().sum::<f64>() / m.itls_s.len() as f64)
}

/// The result of a fit on a vLLM result file.
#[derive(Clone, Debug)]
pub struct ServeFit {
    /// The fitted profile.
    pub physics: Physics,
    /// The factors fitted.
    pub factors: Vec<Factor>,
    /// TTFT and ITL errors on the fit requests.
    pub fit_ttft: ErrorStats,
    pub fit_itl: ErrorStats,
    /// TTFT and ITL errors on the held-out fifth.
    pub held_ttft: ErrorStats,
    pub held_itl: ErrorStats,
    /// (metric "ttft" | "itl", measured s, predicted s, held out) per request and metric.
    pub points: Vec<(&'static str, f64, f64, bool)>,
    /// The search.
    pub search: Minimum,
}

/// Fits compute, attention, (MoE,) memory, step and request overheads of `start` on the requests
/// of `r` that are not held out.
pub fn fit_serve(start: Physics, server: Server, r: &VllmResult, source: &str) -> CliResult<ServeFit> {
    let mut factors = vec![Factor::Compute, Factor::Attention, Factor::Memory, Factor::Step, Factor::Request];
    if start.model().moe.is_some() {
        factors.insert(2, Factor::Moe);
    }
    if r.requests.iter().any(|m| m.start_s.is_none()) {
        return Err(CliError::bad_input(format!(
            "{source}: field `start_times`: missing (the replay needs each request's start; vLLM writes it with \
             --save-detailed since 0.11)"
        )));
    }
    let n = r.requests.len();
    let fit_n = (0..n).filter(|&i| !held_out(i)).count();
    let need = MIN_ROWS_PER_FACTOR * factors.len();
    if fit_n < need {
        let total = need + need.div_ceil(HOLD_OUT - 1);
        return Err(CliError::bad_input(format!(
            "{source}: {n} successful requests are too few to fit {} factors: at least {total} are needed \
             ({MIN_ROWS_PER_FACTOR} per factor after every {HOLD_OUT}th request is held out to measure the error)",
            factors.len()
        )));
    }
    let cal_of = |x: &[f64]| {
        let mut c = *start.calibration();
        for (f, &v) in factors.iter().zip(x) {
            f.set(&mut c, v);
        }
        c
    };
    let predict =
        |c: Calibration| -> Option<Predicted> { replay(&start.with_calibration(c).ok()?, server, &r.requests).ok() };
    // the start must replay: a request that does not fit the pod is the user's input
    replay(&start, server, &r.requests).map_err(|e| CliError::bad_input(format!("{source}: {e}")))?;
    let x0: Vec<f64> = factors.iter().map(|f| f.get(start.calibration())).collect();
    let loss = |x: &[f64]| {
        let Some(p) = predict(cal_of(x)) else {
            return f64::NAN;
        };
        let mut l = 0.0;
        for (i, (m, (ttft, itl))) in r.requests.iter().zip(&p).enumerate().filter(|(i, _)| !held_out(*i)) {
            let _ = i;
            l += sq_rel(*ttft, m.ttft_s.max(1e-6));
            if let (Some(pi), Some(mi)) = (itl, mean_itl(m)) {
                l += sq_rel(*pi, mi.max(1e-6));
            }
        }
        l + PRIOR_WEIGHT * x.iter().zip(&x0).map(|(&a, &b)| sq_rel(a, b)).sum::<f64>()
    };
    let (lo, hi): (Vec<f64>, Vec<f64>) = factors.iter().map(|f| f.bounds()).unzip();
    let search = minimize(&x0, &lo, &hi, loss);
    let cal = cal_of(&search.x);
    let physics = start.with_calibration(cal).map_err(|e| CliError::failure(format!("fitted calibration: {e}")))?;
    let p = replay(&physics, server, &r.requests)?;
    let mut points = Vec::new();
    let (mut ft, mut fi, mut ht, mut hi_) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (m, (ttft, itl))) in r.requests.iter().zip(&p).enumerate() {
        let held = held_out(i);
        points.push(("ttft", m.ttft_s, *ttft, held));
        let e = (ttft - m.ttft_s).abs() / m.ttft_s.max(1e-9);
        if held {
            ht.push(e)
        } else {
            ft.push(e)
        }
        if let (Some(pi), Some(mi)) = (itl, mean_itl(m)) {
            points.push(("itl", mi, *pi, held));
            let e = (pi - mi).abs() / mi.max(1e-9);
            if held { hi_.push(e) } else { fi.push(e) }
        }
    }
    Ok(ServeFit {
        physics,
        factors,
        fit_ttft: stats(&mut ft),
        fit_itl: stats(&mut fi),
        held_ttft: stats(&mut ht),
        held_itl: stats(&mut hi_),
        points,
        search,
    })
}

/// The `[fit]` tables of a profile fitted on a vLLM result.
pub fn fit_toml(f: &ServeFit, source: &str, requests: usize) -> String {
    let keys: Vec<String> = f.factors.iter().map(|k| format!("\"{}\"", k.key())).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "\n# Fitted through the batched engine (one pod, vLLM's default limits) on every request but each \
         {HOLD_OUT}th;\n# the errors are |predicted - measured| / measured of each request's TTFT and mean ITL. \
         Not fitted here\n# (kept from the published calibration): link_ppm, allreduce_ns, reserve_bytes, \
         gpu_memory_utilization_ppm;\n# layer_ns is folded into step_ns.\n\
         [fit]\nsource = \"{source}\"\nrequests = {requests}\nfitted = [{}]\n",
        keys.join(", ")
    );
    for (name, fit, held) in [("ttft", &f.fit_ttft, &f.held_ttft), ("itl", &f.fit_itl, &f.held_itl)] {
        let _ = write!(
            s,
            "\n[fit.{name}]\nfit_requests = {}\nfit_median = {:.4}\nfit_p90 = {:.4}\nheld_out_requests = {}\n\
             held_out_median = {:.4}\nheld_out_p90 = {:.4}\n",
            fit.rows, fit.median, fit.p90, held.rows, held.median, held.p90
        );
    }
    s
}

/// TTFT and mean ITL, predicted against measured, log axes, with the y = x line.
pub fn chart(f: &ServeFit, source: &str) -> Chart {
    let scatter = |metric: &str, held: bool| {
        let mut v = Vec::new();
        for &(_, m, p, _) in f.points.iter().filter(|q| q.0 == metric && q.3 == held) {
            v.push((m * 1e3, p * 1e3));
            v.push((m * 1e3, f64::NAN));
        }
        v
    };
    let lo = f.points.iter().map(|q| q.1.min(q.2) * 1e3).fold(f64::INFINITY, f64::min);
    let hi = f.points.iter().map(|q| q.1.max(q.2) * 1e3).fold(0.0, f64::max);
    let pct = |e: &ErrorStats| format!("median {:.1}%, p90 {:.1}%", 100.0 * e.median, 100.0 * e.p90);
    Chart {
        title: format!("TTFT and mean ITL per request, predicted vs measured ({source})"),
        x_label: "measured (ms)".into(),
        y_label: "predicted (ms)".into(),
        x_log: true,
        y_log: true,
        series: vec![
            Series::new("y = x", vec![(lo, lo), (hi, hi)]),
            Series::new(format!("TTFT, fit ({})", f.fit_ttft.rows), scatter("ttft", false)),
            Series::new(format!("TTFT, held out ({})", f.held_ttft.rows), scatter("ttft", true)),
            Series::new(format!("mean ITL, fit ({})", f.fit_itl.rows), scatter("itl", false)),
            Series::new(format!("mean ITL, held out ({})", f.held_itl.rows), scatter("itl", true)),
        ],
        notes: vec![
            format!("TTFT fit: {}", pct(&f.fit_ttft)),
            format!("TTFT held out: {}", pct(&f.held_ttft)),
            format!("ITL fit: {}", pct(&f.fit_itl)),
            format!("ITL held out: {}", pct(&f.held_itl)),
        ],
        ..Chart::default()
    }
}

/// A `vllm bench serve --save-result --save-detailed` file generated from `p` (the "known profile"
/// of the tests and the checked-in sample): `n` requests with prompts of 128 to 8,192 tokens and
/// 16 to 256 output tokens, gaps between arrivals uniform in [0, 2 / rate] for a mean rate of
/// `rate_milli` / 1000 requests/s (ChaCha8 seeded with `seed`), replayed through the batched engine under `p`; each request's TTFT is the replay's
/// times `1 + u`, each of its ITL gaps the replay's mean ITL times its own `1 + u`, `u` uniform in
/// ±`noise_ppm` / 10^6. Printed with fixed decimals: the same bytes everywhere.
pub fn generate_result(p: &Physics, n: usize, seed: u64, rate_milli: u64, noise_ppm: u32) -> CliResult<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = move |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
    let mut t_us = 0u64;
    let mut reqs = Vec::with_capacity(n);
    for _ in 0..n {
        // gaps uniform in [0, 2 / rate] s, integer microseconds (no transcendental function:
        // the same bytes on every platform)
        t_us += draw(0, 2_000_000_000 / rate_milli.max(1));
        reqs.push(Measured {
            input_tokens: draw(128, 8192),
            output_tokens: draw(16, 256),
            start_s: Some(t_us as f64 / 1e6),
            ttft_s: 0.0,
            itls_s: Vec::new(),
        });
    }
    let pred = replay(p, VLLM_DEFAULT_SERVER, &reqs)?;
    let mut noisy = |v: f64| v * (1.0 + (draw(0, 2 * noise_ppm as u64) as f64 - noise_ppm as f64) / 1e6);
    let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    for (m, (ttft, itl)) in reqs.iter().zip(&pred) {
        ttfts.push(format!("{:.6}", noisy(*ttft)));
        let gaps: Vec<String> = (1..m.output_tokens).map(|_| format!("{:.6}", noisy(itl.unwrap_or(0.0)))).collect();
        itls.push(format!("[{}]", gaps.join(", ")));
    }
    let mut s = String::from(
        "{\n  \"backend\": \"vllm\",\n  \"generated_by\": \"brokerlab (host/tests/fleet_cost.rs, generate_result)\",\n",
    );
    let _ = writeln!(
        s,
        "  \"request_rate\": {:.3},\n  \"max_concurrency\": null,\n  \"completed\": {n},",
        rate_milli as f64 / 1e3
    );
    let _ = writeln!(s, "  \"input_lens\": [{}],", list(&mut reqs.iter().map(|m| m.input_tokens.to_string())));
    let _ = writeln!(s, "  \"output_lens\": [{}],", list(&mut reqs.iter().map(|m| m.output_tokens.to_string())));
    let _ = writeln!(
        s,
        "  \"start_times\": [{}],",
        list(&mut reqs.iter().map(|m| format!("{:.6}", m.start_s.unwrap_or(0.0))))
    );
    let _ = writeln!(s, "  \"ttfts\": [{}],", ttfts.join(", "));
    let _ = writeln!(s, "  \"itls\": [{}],", itls.join(", "));
    let _ = writeln!(s, "  \"errors\": [{}]\n}}", list(&mut (0..n).map(|_| "\"\"".to_string())));
    Ok(s)
}
