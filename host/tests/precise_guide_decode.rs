//! A decode check on the deployment of the three published tables (Qwen3-32B on vLLM, 8 pods of
//! 2 x H100 at TP 2, the 150 x 5 shared-prefix ladder) from a run that is none of them: llm-d's
//! precise-prefix-cache guide, refreshed with llm-d v0.8.0 (llm-d/llm-d @ 6675e1b0, 2026-05-10;
//! the report moved to `guides/precise-prefix-cache-routing/benchmark-results/vllm-qwen3-32b-h100.md`
//! @ 80e1169c). Its chart `latency_vs_qps.png` plots the mean inter-token latency per ladder
//! stage for both arms; `fleet run --inference-perf` of the guide's own inference-perf config must
//! keep each stage's simulated mean TPOT within a stated band of it. Without the shared-prefix
//! read factor the bands state the uncalibrated model's error (docs/PUBLISHED.md, "Decode against
//! the precise guide's 2026 run (t26g)"); this run is also the one the factor the three tables use
//! (assumption A16, `shared_kv_read` in `scenarios/sticky-*.toml`) is fitted on, and the fit is
//! reproduced here (docs/PUBLISHED.md, "Shared-prefix reads as a calibrated factor (t26j)").

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");
const CONFIG: &str = "scenarios/inference-perf/llm-d-precise-guide-qwen3-32b.yml";

/// The guide's pods run `--gpu-memory-utilization=0.95` (its `patch-vllm.yaml` @ 6675e1b0): table
/// 1's 19,208 blocks (307,328 tokens at 0.9) plus 0.05 x 79.18 GiB per GPU over the 2 MiB a
/// 16-token block of Qwen3-32B takes on each of the two GPUs (64 layers x 4 KV heads x 128 x 2 x 2
/// B x 16): 2,027 blocks.
const CAPACITY: &str = "21235";

/// Output tokens per request (the config's `output_len`, `ignore_eos: true`).
const OUTPUT: f64 = 1000.0;

/// Mean ITL (ms) of ladder stages 3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60
/// req/s, read off `latency_vs_qps.png` (blob `ada07db1`, the same at 6675e1b0 and 80e1169c): each
/// marker's centre pixel row against the gridlines 15-55 ms (6.925 px per ms, so +-0.15 ms).
const PRECISE_ITL_MS: [f64; 16] =
    [16.0, 19.8, 22.7, 32.2, 29.6, 30.9, 32.8, 32.6, 49.8, 51.5, 52.7, 52.4, 54.6, 53.4, 55.0, 55.7];
const SERVICE_ITL_MS: [f64; 16] =
    [17.6, 27.1, 32.5, 42.6, 42.9, 43.0, 42.9, 43.0, 45.0, 45.0, 45.0, 44.7, 45.0, 44.9, 44.6, 44.6];

/// The ladder's requested rates, req/s.
const RATES: [u32; 16] = [3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60];

/// Requests per ladder stage (`int(rate x duration)`), for the report's request-weighted means.
const REQUESTS: [f64; 16] =
    [60., 200., 300., 760., 748., 750., 750., 735., 1520., 1548., 1518., 1470., 1508., 1485., 1482., 1500.];

/// (first stage, last stage, lowest, highest) of simulated / published - 1 per stage (0 = 3 req/s).
type Band = (usize, usize, f64, f64);
/// Without the factor (f = 1): +17%, +22%, +27%; +39% to +50%; +49% to +54% (the model preempts
/// 3,332 times).
const PRECISE_BANDS: [Band; 3] = [(0, 2, 0.10, 0.35), (3, 7, 0.30, 0.60), (8, 15, 0.40, 0.65)];
/// Without the factor: +16%, +8%, +13%; +14% to +17%.
const SERVICE_BANDS: [Band; 2] = [(0, 2, 0.0, 0.25), (3, 15, 0.05, 0.25)];
/// With the tables' factor (0.45): +17%, +16%, +16%; +12% to +18%; -2% to +1% (1,907 preemptions).
const FITTED_PRECISE_BANDS: [Band; 3] = [(0, 2, 0.10, 0.25), (3, 7, 0.05, 0.25), (8, 15, -0.07, 0.06)];
/// With the tables' factor: +16%, +7%, +11%; +12% to +14%.
const FITTED_SERVICE_BANDS: [Band; 2] = [(0, 2, 0.0, 0.25), (3, 15, 0.05, 0.20)];
/// The fit's grid step near its optimum (docs/PUBLISHED.md, t26j), parts per million.
const FIT_STEP_PPM: u32 = 25_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The shared-prefix read factor the three tables run (`[fleet.engine] shared_kv_read` of the
/// b2b-saas scenario, whose engine table 1 takes), in parts per million.
fn tables_factor_ppm() -> u32 {
    use brokerlab::fleet::report::published::run::{B2B_NAME, B2B_TEXT};
    use brokerlab::fleet::scenario::{Scenario, engine::parse_fraction_ppm};
    let b = Scenario::parse(B2B_TEXT, B2B_NAME, "sticky-b2b-saas").unwrap();
    let f =
        b.engine.as_ref().and_then(|e| e.shared_kv_read.clone()).expect("the b2b-saas scenario sets shared_kv_read");
    parse_fraction_ppm(&f).unwrap()
}

/// `--shared-kv-read` for a factor of `ppm` parts per million.
fn factor_arg(ppm: u32) -> String {
    format!("{}.{:06}", ppm / 1_000_000, ppm % 1_000_000)
}

/// Mean (E2E - TTFT) / (output - 1) per ladder stage of one arm, ms (stage 0, the warm-up, left
/// out), with the shared-prefix read factor `ppm` (None: the profile's own, off).
fn stage_tpot_ms(name: &str, router: &[&str], ppm: Option<u32>) -> Vec<f64> {
    let tag = ppm.map_or(String::new(), |p| format!("-{p}"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("precise-guide-{name}{tag}.jsonl"));
    let factor = ppm.map(|p| vec!["--shared-kv-read".to_string(), factor_arg(p)]).unwrap_or_default();
    let status = Command::new(BIN)
        .current_dir(repo())
        .args(["fleet", "run", "--inference-perf", CONFIG, "--pods", "8", "--capacity", CAPACITY])
        .args(router)
        .args(["--engine", "batched", "--profile", "qwen3-32b-h100-tp2"])
        .args(&factor)
        .arg("--outcomes")
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut sum = [0.0; 17];
    let mut n = [0.0; 17];
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["status"], "ok", "{line}");
        let stage = v["stage"].as_u64().unwrap() as usize;
        let decode_ns = v["e2e_ns"].as_f64().unwrap() - v["ttft_ns"].as_f64().unwrap();
        sum[stage] += decode_ns / (OUTPUT - 1.0) / 1e6;
        n[stage] += 1.0;
    }
    assert_eq!(n.iter().map(|&x| x as u64).collect::<Vec<_>>()[1..], REQUESTS.map(|x| x as u64));
    (1..17).map(|s| sum[s] / n[s]).collect()
}

fn violations(sim: &[f64], published: &[f64; 16], bands: &[Band]) -> Vec<String> {
    let mut v = Vec::new();
    for &(a, b, lo, hi) in bands {
        for s in a..=b {
            let e = sim[s] / published[s] - 1.0;
            if !(lo..=hi).contains(&e) {
                v.push(format!(
                    "{} req/s: {:.1} ms against {:.1} ({:+.1}%, band {:+.0}%..{:+.0}%)",
                    RATES[s],
                    sim[s],
                    published[s],
                    e * 100.0,
                    lo * 100.0,
                    hi * 100.0
                ));
            }
        }
    }
    v
}

#[test]
fn the_chart_reading_gives_the_reports_itl_means() {
    // The report's summary row: ITL mean 47.0 ms (precise) and 44.0 ms (k8s service), the
    // request-weighted mean of the stages (the plain mean would be 40.1 and 40.7).
    let mean = |x: &[f64; 16]| x.iter().zip(REQUESTS).map(|(a, n)| a * n).sum::<f64>() / REQUESTS.iter().sum::<f64>();
    assert!((mean(&PRECISE_ITL_MS) - 47.0).abs() < 0.15, "{}", mean(&PRECISE_ITL_MS));
    assert!((mean(&SERVICE_ITL_MS) - 44.0).abs() < 0.15, "{}", mean(&SERVICE_ITL_MS));
}

const PRECISE: [&str; 2] = ["--router-config", "docs/drafts/router-2025-precise-as-run.toml"];
const SERVICE: [&str; 2] = ["--router", "random"];

fn arms_within(ppm: Option<u32>, precise_bands: &[Band], service_bands: &[Band]) {
    let precise = stage_tpot_ms("precise", &PRECISE, ppm);
    let service = stage_tpot_ms("service", &SERVICE, ppm);
    let mut v = violations(&precise, &PRECISE_ITL_MS, precise_bands);
    v.extend(violations(&service, &SERVICE_ITL_MS, service_bands).into_iter().map(|s| format!("service {s}")));
    assert!(v.is_empty(), "stages outside their bands (factor {ppm:?} ppm):\n{}", v.join("\n"));
}

#[test]
fn each_stage_decodes_within_its_band_of_the_precise_guides_run() {
    arms_within(None, &PRECISE_BANDS, &SERVICE_BANDS);
}

#[test]
fn with_the_tables_factor_each_stage_decodes_within_its_band() {
    arms_within(Some(tables_factor_ppm()), &FITTED_PRECISE_BANDS, &FITTED_SERVICE_BANDS);
}

/// The fit's objective (written down before it ran): the median |error| of the precise arm's 16
/// stages. The tables' factor must beat its grid neighbours, so a factor edited by hand, or a
/// model change that moves the optimum, fails here.
#[test]
fn the_tables_factor_is_the_fits_optimum() {
    let f = tables_factor_ppm();
    let median_error = |ppm: u32| {
        let sim = stage_tpot_ms("precise-fit", &PRECISE, Some(ppm));
        let mut e: Vec<f64> = sim.iter().zip(PRECISE_ITL_MS).map(|(s, p)| (s / p - 1.0).abs()).collect();
        assert!(e.iter().all(|x| x.is_finite()), "{e:?}");
        e.sort_by(f64::total_cmp);
        (e[7] + e[8]) / 2.0
    };
    let (below, at, above) = (median_error(f - FIT_STEP_PPM), median_error(f), median_error(f + FIT_STEP_PPM));
    assert!(at < below && at < above, "median |error| {below:.4} / {at:.4} / {above:.4} around {}", factor_arg(f));
}
