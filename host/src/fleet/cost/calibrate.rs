//! `brokerlab fleet calibrate --steps FILE.csv`: fit a physics profile's calibration to a user's
//! own step log (docs/MODEL.md, "Fitting your own server").
//!
//! Each CSV row is one engine step: `prefill_tokens, decode_requests, context_tokens, step_ms`,
//! optionally `prefill_requests` (default 1 when there are prefill tokens) and
//! `prefill_context_tokens` (the part of `context_tokens` that the prefill chunks had cached;
//! default 0). The step is rebuilt as `prefill_requests` equal chunks with equal cached prefixes
//! and `decode_requests` decodes with equal contexts (the remainders spread one by one), and
//! predicted with [`Physics::step_ns`]. Every fifth row (rows 5, 10, ...) is held out: the factors
//! are fitted on the others and the error is reported on both.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::cost::{BatchShape, Calibration, Error as CostError, MAX_OVERHEAD_NS, PPM, Physics};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};
use sha2::Digest as _;

use super::describe::{gpu_toml, model_toml};
use super::fit::{Minimum, minimize, sq_rel};
use crate::error::{CliError, CliResult};
use crate::plot::{Chart, Series};

/// Rows per fitted factor the fit needs, at least (after holding out every fifth).
pub const MIN_ROWS_PER_FACTOR: usize = 5;
/// Every `HOLD_OUT`-th row is held out.
pub const HOLD_OUT: usize = 5;
/// Weight of the pull towards the start values (relative to one row's squared error): only enough
/// to hold a factor the rows do not inform where it started.
pub const PRIOR_WEIGHT: f64 = 1e-6;
/// A factor whose standard error (from the fit's residuals and sensitivities) exceeds this
/// relative value is reported as not identified by the data.
pub const IDENTIFIED_SE: f64 = 0.5;
/// Most requests one CSV row may describe (bounds the work of rebuilding a step).
pub const MAX_ROW_REQUESTS: u64 = 1 << 20;

/// One logged step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRow {
    /// 1-based line in the file.
    pub line: u64,
    pub prefill_tokens: u64,
    pub decode_requests: u64,
    pub context_tokens: u64,
    pub prefill_requests: u64,
    pub prefill_context_tokens: u64,
    /// Measured step, ns.
    pub measured_ns: f64,
}

const REQUIRED: [&str; 4] = ["prefill_tokens", "decode_requests", "context_tokens", "step_ms"];
const OPTIONAL: [&str; 2] = ["prefill_requests", "prefill_context_tokens"];

/// Reads a steps CSV; bad input names the file, line and column.
pub fn read_steps(path: &Path) -> CliResult<Vec<StepRow>> {
    let file = path.display();
    let bad = |m: String| CliError::bad_input(m);
    let mut rd = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_path(path)
        .map_err(|e| bad(format!("--steps {file}: cannot read: {e}")))?;
    let headers = rd.headers().map_err(|e| bad(format!("{file}: {e}")))?.clone();
    let col = |name: &str| headers.iter().position(|h| h.trim_start_matches('\u{feff}') == name);
    for h in headers.iter() {
        let h = h.trim_start_matches('\u{feff}');
        if !REQUIRED.contains(&h) && !OPTIONAL.contains(&h) {
            return Err(bad(format!(
                "{file}:1: unknown column `{h}`: expected {} (and optionally {})",
                REQUIRED.join(", "),
                OPTIONAL.join(", ")
            )));
        }
    }
    let need = |name: &str| {
        col(name).ok_or_else(|| {
            bad(format!("{file}:1: column `{name}` is missing (the header needs {})", REQUIRED.join(", ")))
        })
    };
    let idx = [need(REQUIRED[0])?, need(REQUIRED[1])?, need(REQUIRED[2])?, need(REQUIRED[3])?];
    let (opt_n, opt_kp) = (col(OPTIONAL[0]), col(OPTIONAL[1]));
    let mut rows = Vec::new();
    for rec in rd.records() {
        let rec = rec.map_err(|e| bad(format!("{file}: {e}")))?;
        let line = rec.position().map_or(0, |p| p.line());
        let at = |i: usize, name: &str| -> CliResult<&str> {
            rec.get(i).filter(|s| !s.is_empty()).ok_or_else(|| bad(format!("{file}:{line}: field `{name}`: empty")))
        };
        let int = |i: usize, name: &str| -> CliResult<u64> {
            let s = at(i, name)?;
            s.parse::<u64>()
                .map_err(|_| bad(format!("{file}:{line}: field `{name}`: `{s}` is not a whole number >= 0")))
        };
        let p = int(idx[0], REQUIRED[0])?;
        let d = int(idx[1], REQUIRED[1])?;
        let k = int(idx[2], REQUIRED[2])?;
        let ms_text = at(idx[3], REQUIRED[3])?;
        let ms: f64 =
            ms_text.parse().ok().filter(|v: &f64| v.is_finite() && *v > 0.0 && *v < 1e7).ok_or_else(|| {
                bad(format!("{file}:{line}: field `step_ms`: `{ms_text}` is not a number of milliseconds > 0"))
            })?;
        let n = match opt_n {
            Some(i) => int(i, OPTIONAL[0])?,
            None => u64::from(p > 0),
        };
        let kp = match opt_kp {
            Some(i) => int(i, OPTIONAL[1])?,
            None => 0,
        };
        let row = StepRow {
            line,
            prefill_tokens: p,
            decode_requests: d,
            context_tokens: k,
            prefill_requests: n,
            prefill_context_tokens: kp,
            measured_ns: ms * 1e6,
        };
        check_row(&row).map_err(|m| bad(format!("{file}:{line}: {m}")))?;
        rows.push(row);
    }
    Ok(rows)
}

fn check_row(r: &StepRow) -> Result<(), String> {
    if r.prefill_tokens + r.decode_requests == 0 {
        return Err(
            "field `prefill_tokens`: a step computes at least one token (prefill_tokens + decode_requests >= 1)".into(),
        );
    }
    if (r.prefill_requests == 0) != (r.prefill_tokens == 0) || r.prefill_requests > r.prefill_tokens {
        return Err(
            "field `prefill_requests`: between 1 and prefill_tokens when there are prefill tokens, else 0".into()
        );
    }
    if r.prefill_requests + r.decode_requests > MAX_ROW_REQUESTS {
        return Err(format!("field `decode_requests`: at most {MAX_ROW_REQUESTS} requests in a step"));
    }
    if r.prefill_context_tokens > r.context_tokens {
        return Err("field `prefill_context_tokens`: at most context_tokens".into());
    }
    if r.decode_requests == 0 && r.context_tokens > r.prefill_context_tokens {
        return Err(
            "field `context_tokens`: context beyond prefill_context_tokens belongs to decodes, and there are none"
                .into(),
        );
    }
    Ok(())
}

/// The step a row describes, for `p`'s model.
pub fn shape_of(p: &Physics, r: &StepRow) -> Result<BatchShape, CostError> {
    let mut s = p.shape();
    let n = r.prefill_requests;
    for i in 0..n {
        let t = r.prefill_tokens / n + u64::from(i < r.prefill_tokens % n);
        let c = r.prefill_context_tokens / n + u64::from(i < r.prefill_context_tokens % n);
        s.add_prefill(c, t)?;
    }
    let (d, k) = (r.decode_requests, r.context_tokens - r.prefill_context_tokens);
    if d > 0 {
        // d - k % d decodes with floor(k / d) cached tokens, k % d with one more
        s.add_decodes(d - k % d, k / d)?;
        s.add_decodes(k % d, k / d + 1)?;
    }
    Ok(s)
}

/// A factor of the calibration the user fit may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    Compute,
    Attention,
    Moe,
    Memory,
    Step,
    Request,
}

impl Factor {
    /// The calibration key.
    pub const fn key(self) -> &'static str {
        match self {
            Factor::Compute => "compute_ppm",
            Factor::Attention => "attention_ppm",
            Factor::Moe => "moe_ppm",
            Factor::Memory => "memory_ppm",
            Factor::Step => "step_ns",
            Factor::Request => "request_ns",
        }
    }

    const fn is_ppm(self) -> bool {
        !matches!(self, Factor::Step | Factor::Request)
    }

    /// The value as the search sees it: a fraction for efficiencies, ns for overheads.
    pub(crate) fn get(self, c: &Calibration) -> f64 {
        match self {
            Factor::Compute => c.compute_ppm as f64 / PPM as f64,
            Factor::Attention => c.attention_ppm as f64 / PPM as f64,
            Factor::Moe => c.moe_ppm as f64 / PPM as f64,
            Factor::Memory => c.memory_ppm as f64 / PPM as f64,
            Factor::Step => c.step_ns as f64,
            Factor::Request => c.request_ns.max(1) as f64,
        }
    }

    pub(crate) fn set(self, c: &mut Calibration, v: f64) {
        let ppm = (v * PPM as f64).round().clamp(1.0, PPM as f64) as u32;
        let ns = v.round().clamp(1.0, MAX_OVERHEAD_NS as f64) as u64;
        match self {
            Factor::Compute => c.compute_ppm = ppm,
            Factor::Attention => c.attention_ppm = ppm,
            Factor::Moe => c.moe_ppm = ppm,
            Factor::Memory => c.memory_ppm = ppm,
            Factor::Step => c.step_ns = ns,
            Factor::Request => c.request_ns = ns,
        }
    }

    /// The value in the calibration (ppm or ns).
    pub fn value(self, c: &Calibration) -> u64 {
        match self {
            Factor::Compute => c.compute_ppm as u64,
            Factor::Attention => c.attention_ppm as u64,
            Factor::Moe => c.moe_ppm as u64,
            Factor::Memory => c.memory_ppm as u64,
            Factor::Step => c.step_ns,
            Factor::Request => c.request_ns,
        }
    }

    pub(crate) fn bounds(self) -> (f64, f64) {
        if self.is_ppm() { (1e-3, 1.0) } else { (1.0, MAX_OVERHEAD_NS as f64) }
    }
}

/// Median and p90 (nearest rank) of relative errors |p - m| / m.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorStats {
    pub rows: usize,
    pub median: f64,
    pub p90: f64,
}

/// Nearest-rank percentile of sorted values (`q` in (0, 1]).
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1]
}

pub(crate) fn stats(errs: &mut [f64]) -> ErrorStats {
    errs.sort_by(f64::total_cmp);
    if errs.is_empty() {
        return ErrorStats { rows: 0, median: f64::NAN, p90: f64::NAN };
    }
    ErrorStats { rows: errs.len(), median: nearest_rank(errs, 0.5), p90: nearest_rank(errs, 0.9) }
}

/// The result of a steps fit.
#[derive(Clone, Debug)]
pub struct StepFit {
    pub physics: Physics,
    pub factors: Vec<Factor>,
    /// Relative standard error of each factor (same order).
    pub std_err: Vec<f64>,
    pub fit: ErrorStats,
    pub held_out: ErrorStats,
    /// (measured ms, predicted ms, held out) per row.
    pub points: Vec<(f64, f64, bool)>,
    pub search: Minimum,
}

/// Whether row `i` (0-based) is held out.
pub const fn held_out(i: usize) -> bool {
    i % HOLD_OUT == HOLD_OUT - 1
}

/// Fits `factors` of `start` on the rows that are not held out.
pub fn fit_steps(start: Physics, rows: &[StepRow], source: &str) -> CliResult<StepFit> {
    let mut factors = vec![Factor::Compute, Factor::Attention, Factor::Memory, Factor::Step, Factor::Request];
    if start.model().moe.is_some() {
        factors.insert(2, Factor::Moe);
    }
    let n_fit = (0..rows.len()).filter(|&i| !held_out(i)).count();
    let need = MIN_ROWS_PER_FACTOR * factors.len();
    if n_fit < need {
        let total = need + need.div_ceil(HOLD_OUT - 1);
        return Err(CliError::bad_input(format!(
            "{source}: {} steps are too few to fit {} factors: at least {total} are needed ({MIN_ROWS_PER_FACTOR} per factor \
             after every {HOLD_OUT}th row is held out to measure the error)",
            rows.len(),
            factors.len()
        )));
    }
    let shapes: Vec<BatchShape> = rows
        .iter()
        .map(|r| shape_of(&start, r).map_err(|e| CliError::bad_input(format!("{source}:{}: {e}", r.line))))
        .collect::<CliResult<_>>()?;
    let cal_of = |x: &[f64]| {
        let mut c = *start.calibration();
        for (f, &v) in factors.iter().zip(x) {
            f.set(&mut c, v);
        }
        c
    };
    let predict = |c: Calibration, s: &BatchShape| -> Option<f64> {
        start.with_calibration(c).ok()?.step_ns(s).ok().map(|v| v as f64)
    };
    let x0: Vec<f64> = factors.iter().map(|f| f.get(start.calibration())).collect();
    let fit_rows: Vec<usize> = (0..rows.len()).filter(|&i| !held_out(i)).collect();
    let loss = |x: &[f64]| {
        let c = cal_of(x);
        let mut l = 0.0;
        for &i in &fit_rows {
            l += predict(c, &shapes[i]).map_or(f64::NAN, |p| sq_rel(p, rows[i].measured_ns));
        }
        l + PRIOR_WEIGHT * x.iter().zip(&x0).map(|(&a, &b)| sq_rel(a, b)).sum::<f64>()
    };
    let (lo, hi): (Vec<f64>, Vec<f64>) = factors.iter().map(|f| f.bounds()).unzip();
    let search = minimize(&x0, &lo, &hi, loss);
    let cal = cal_of(&search.x);
    let physics = start.with_calibration(cal).map_err(|e| CliError::failure(format!("fitted calibration: {e}")))?;
    let mut points = Vec::with_capacity(rows.len());
    let (mut fit_err, mut held_err) = (Vec::new(), Vec::new());
    let mut sq = 0.0;
    for (i, (r, s)) in rows.iter().zip(&shapes).enumerate() {
        let p = predict(cal, s).unwrap_or(f64::NAN);
        let e = (p - r.measured_ns).abs() / r.measured_ns;
        points.push((r.measured_ns / 1e6, p / 1e6, held_out(i)));
        if held_out(i) {
            held_err.push(e);
        } else {
            fit_err.push(e);
            sq += sq_rel(p, r.measured_ns);
        }
    }
    // standard errors: the residual spread over the fit rows and the sensitivities
    // J[r][k] = d ln(step_r) / d ln(factor_k) (central differences of 1%), covariance
    // sigma^2 (J^T J)^-1, correlations between factors included
    let k = factors.len();
    let sigma2 = sq / (fit_rows.len() - k).max(1) as f64;
    let mut jtj = vec![vec![0.0; k]; k];
    for &i in &fit_rows {
        let sens: Vec<f64> = (0..k)
            .map(|j| {
                let at = |scale: f64| {
                    let mut x = search.x.clone();
                    x[j] *= scale;
                    predict(cal_of(&x), &shapes[i]).unwrap_or(f64::NAN)
                };
                let (up, down) = (at(1.01), at(1.0 / 1.01));
                (up - down) / ((up + down) / 2.0) / 0.0199
            })
            .collect();
        for a in 0..k {
            for b in 0..k {
                jtj[a][b] += sens[a] * sens[b];
            }
        }
    }
    let std_err = match invert(jtj) {
        Some(inv) => (0..k).map(|j| (sigma2 * inv[j][j]).max(0.0).sqrt()).collect(),
        None => vec![f64::INFINITY; k],
    };
    Ok(StepFit { physics, factors, std_err, fit: stats(&mut fit_err), held_out: stats(&mut held_err), points, search })
}

/// Whether a relative standard error says the factor is identified (a NaN or infinity is not).
pub fn identified(std_err: f64) -> bool {
    std_err.is_finite() && std_err <= IDENTIFIED_SE
}

/// The inverse of a small symmetric matrix by Gauss-Jordan elimination with partial pivoting
/// (`None` when singular: some factor does not change any prediction).
fn invert(mut m: Vec<Vec<f64>>) -> Option<Vec<Vec<f64>>> {
    let n = m.len();
    let scale = (0..n).map(|i| m[i][i].abs()).fold(0.0, f64::max);
    let mut inv: Vec<Vec<f64>> = (0..n).map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect()).collect();
    for c in 0..n {
        let p = (c..n).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()).then(b.cmp(&a)))?;
        // (a NaN pivot counts as singular)
        if m[p][c].abs().partial_cmp(&(1e-12 * scale)) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        m.swap(c, p);
        inv.swap(c, p);
        let d = m[c][c];
        for j in 0..n {
            m[c][j] /= d;
            inv[c][j] /= d;
        }
        for r in 0..n {
            if r != c {
                let f = m[r][c];
                for j in 0..n {
                    m[r][j] -= f * m[c][j];
                    inv[r][j] -= f * inv[c][j];
                }
            }
        }
    }
    Some(inv)
}

/// The start of a user fit: the published calibration with the per-layer overhead folded into the
/// per-step one (one model's layer count is a constant, so the two cannot be told apart).
pub fn start_calibration(layers: u32) -> Calibration {
    let p = Calibration::PUBLISHED;
    // one memory factor for weights and KV (kv_memory_ppm 0): a user's step log rarely separates them
    Calibration { step_ns: p.step_ns + layers as u64 * p.layer_ns, layer_ns: 0, kv_memory_ppm: 0, ..p }
}

/// A profile file's `tp`, `[model]`, `[gpu]` and `[calibration]` (what `--profile FILE.toml`
/// reads back), with a comment naming its source.
pub fn profile_head(p: &Physics, source: &str, sha256: &str) -> String {
    let c = p.calibration();
    let mut s = format!(
        "# brokerlab physics profile, fitted by `brokerlab fleet calibrate` (brokerlab {}) on {source}\n\
         # (sha256 {sha256}). Keys: docs/MODEL.md, \"The physics step cost\"; run it with\n\
         # `fleet replay --engine batched --profile FILE.toml`.\ntp = {}\n\n",
        env!("CARGO_PKG_VERSION"),
        p.tp()
    );
    s += &model_toml(p.model(), "model");
    s += "\n";
    s += &gpu_toml(p.hardware(), "gpu");
    let _ = write!(
        s,
        "\n[calibration]\ncompute_ppm = {}\nattention_ppm = {}\nmoe_ppm = {}\nmemory_ppm = {}\nlink_ppm = {}\n\
         step_ns = {}\nrequest_ns = {}\nlayer_ns = {}\nallreduce_ns = {}\nreserve_bytes = {}\n\
         gpu_memory_utilization_ppm = {}\n",
        c.compute_ppm,
        c.attention_ppm,
        c.moe_ppm,
        c.memory_ppm,
        c.link_ppm,
        c.step_ns,
        c.request_ns,
        c.layer_ns,
        c.allreduce_ns,
        c.reserve_bytes,
        c.gpu_memory_utilization_ppm
    );
    s
}

/// The profile TOML (reads back as a profile; the `[fit]` table records the fit).
pub fn profile_toml(f: &StepFit, source: &str, sha256: &str) -> String {
    let mut s = profile_head(&f.physics, source, sha256);
    let keys: Vec<String> = f.factors.iter().map(|k| format!("\"{}\"", k.key())).collect();
    let weak: Vec<String> = f
        .factors
        .iter()
        .zip(&f.std_err)
        .filter(|(_, e)| !identified(**e))
        .map(|(k, _)| format!("\"{}\"", k.key()))
        .collect();
    let se: Vec<String> = f.std_err.iter().map(|e| format!("{e:.4}")).collect();
    let _ = write!(
        s,
        "\n# Fitted on every row but each {HOLD_OUT}th; the errors are |predicted - measured| / measured of the step\n\
         # time. Not fitted here (kept from the published calibration): link_ppm, allreduce_ns, reserve_bytes,\n\
         # gpu_memory_utilization_ppm; layer_ns is folded into step_ns.\n\
         [fit]\nsource = \"{source}\"\nrows = {}\nfitted = [{}]\nrelative_std_err = [{}]\nnot_identified = [{}]\n\n\
         [fit.step]\nfit_rows = {}\nfit_median = {:.4}\nfit_p90 = {:.4}\nheld_out_rows = {}\nheld_out_median = {:.4}\n\
         held_out_p90 = {:.4}\n",
        f.points.len(),
        keys.join(", "),
        se.join(", "),
        weak.join(", "),
        f.fit.rows,
        f.fit.median,
        f.fit.p90,
        f.held_out.rows,
        f.held_out.median,
        f.held_out.p90
    );
    s
}

/// Predicted against measured, log axes, with the y = x line.
pub fn chart(f: &StepFit, source: &str) -> Chart {
    let scatter = |held: bool| {
        let mut v = Vec::new();
        for &(m, p, _) in f.points.iter().filter(|q| q.2 == held) {
            // a gap after every point: markers only
            v.push((m, p));
            v.push((m, f64::NAN));
        }
        v
    };
    let lo = f.points.iter().map(|q| q.0.min(q.1)).fold(f64::INFINITY, f64::min);
    let hi = f.points.iter().map(|q| q.0.max(q.1)).fold(0.0, f64::max);
    Chart {
        title: format!("Step time, predicted vs measured ({source})"),
        x_label: "measured step (ms)".into(),
        y_label: "predicted step (ms)".into(),
        x_log: true,
        y_log: true,
        series: vec![
            Series::new("y = x", vec![(lo, lo), (hi, hi)]),
            Series::new(format!("fit rows ({})", f.fit.rows), scatter(false)),
            Series::new(format!("held-out rows ({})", f.held_out.rows), scatter(true)),
        ],
        notes: vec![
            format!("fit: median {:.1}%", 100.0 * f.fit.median),
            format!("fit: p90 {:.1}%", 100.0 * f.fit.p90),
            format!("held out: median {:.1}%", 100.0 * f.held_out.median),
            format!("held out: p90 {:.1}%", 100.0 * f.held_out.p90),
        ],
        ..Chart::default()
    }
}

/// SHA-256 of a file's bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The plot paths next to the profile: `out` with `.svg` and `.png`.
pub fn plot_paths(out: &Path) -> (PathBuf, PathBuf) {
    (out.with_extension("svg"), out.with_extension("png"))
}

/// A steps CSV generated from `p` (the "known profile" of the tests and the checked-in sample):
/// `rows` steps of three kinds (prefill only, decode only, one chunk with decodes) drawn from a
/// ChaCha8 stream seeded with `seed`, each measured as the model's step time times
/// `1 + u / 10^6` with `u` uniform in `-noise_ppm ..= noise_ppm`. Integer arithmetic only: the
/// same bytes everywhere.
pub fn generate_steps(p: &Physics, rows: usize, seed: u64, noise_ppm: u32) -> Result<String, CostError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
    let mut s =
        String::from("prefill_tokens,decode_requests,context_tokens,step_ms,prefill_requests,prefill_context_tokens\n");
    for i in 0..rows {
        let (n, p_tok, kp, d, kd) = match i % 3 {
            0 => {
                let n = draw(1, 4);
                (n, draw(n.max(256), 8192), draw(0, 4) * draw(0, 16384), 0, 0)
            }
            1 => {
                let d = draw(1, 512);
                (0, 0, 0, d, d * draw(64, 16384))
            }
            _ => {
                let d = draw(1, 256);
                (1, draw(128, 4096), draw(0, 32768), d, d * draw(64, 16384))
            }
        };
        let row = StepRow {
            line: 0,
            prefill_tokens: p_tok,
            decode_requests: d,
            context_tokens: kp + kd,
            prefill_requests: n,
            prefill_context_tokens: kp,
            measured_ns: 0.0,
        };
        let ns = p.step_ns(&shape_of(p, &row)?)? as u128;
        let u = draw(0, 2 * noise_ppm as u64) as u128;
        let measured = (ns * (PPM as u128 - noise_ppm as u128 + u) + PPM as u128 / 2) / PPM as u128;
        let _ = writeln!(s, "{p_tok},{d},{},{}.{:06},{n},{kp}", kp + kd, measured / 1_000_000, measured % 1_000_000);
    }
    Ok(s)
}
