//! Issue 24: the physics step cost from the command line. `fleet cost-check` against the stated
//! errors of docs/MODEL.md ("What the cost model says, and how wrong it is"), `fleet calibrate` on
//! the checked-in sample step log (generated from a known profile, re-generated here), and its bad
//! input.

use std::path::{Path, PathBuf};
use std::process::Command;

use brokerlab::fleet::cost::calibrate::generate_steps;
use brokerlab_core::fleet::cost::{Calibration, Physics, PhysicsProfile};
use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brokerlab"))
}

/// Runs the binary: (exit code, stdout, stderr); a signal (panic abort) fails.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let code = out.status.code().unwrap_or_else(|| panic!("killed by a signal: {args:?}\n{}", text(&out.stderr)));
    (code, text(&out.stdout), text(&out.stderr))
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-cost-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The stated error of each point on data it was not fitted on (docs/MODEL.md, the table's
/// "stated" column): the leave-one-out error for fitted points, the plain error for checks.
/// Measured values at this commit are in the comments; each bound leaves a little room.
const STATED: &[(&str, f64)] = &[
    ("llmd-qwen3-32b-h100-tp2", 0.15),           // -12.8%
    ("llmd-gpt-oss-120b-h100-tp1", 0.22),        // -19.6%
    ("llmd-qwen3-vl-32b-h200-tp2", 0.16),        // -14.2%
    ("infersim-qwen3-8b-fp8-h20-prefill", 0.40), // +36.3%
    ("infersim-qwen3-8b-fp8-h20-decode", 0.10),  // -7.3%
    ("sticky-ratio-k2", 0.03),                   // +1.8%
    ("sticky-ratio-k3", 0.05),
    ("sticky-ratio-k4", 0.06),
    ("sticky-ratio-k5", 0.07), // +5.8%
    ("sticky-ratio-k6", 0.08),
    ("sticky-ratio-k7", 0.09),
    ("sticky-ratio-k8", 0.10),
    ("sticky-ratio-k9", 0.11),
    ("sticky-ratio-k10", 0.12), // +10.0%
    ("sticky-ratio-k11", 0.12),
    ("sticky-ratio-k12", 0.13),
    ("sticky-ratio-k13", 0.13),
    ("sticky-ratio-k14", 0.14),
    ("sticky-ratio-k15", 0.14),
    ("sticky-ratio-k16", 0.15),
    ("sticky-ratio-k17", 0.15),
    ("sticky-ratio-k18", 0.16),
    ("sticky-ratio-k19", 0.16),          // +14.2%
    ("sglang-qwen3-32b-h100-tp2", 0.15), // -12.2%
    // CodeLlama-34B on 2 x H100 under vLLM (inference-sim/training): checks, the decode steps the
    // published calibration prices too slow (docs/MODEL.md, "The decode check")
    ("training-codellama-34b-codegen-5", 0.30),     // +27.4%
    ("training-codellama-34b-codegen-10", 0.38),    // +35.6%
    ("training-codellama-34b-roleplay-6", 0.39),    // +36.3%
    ("training-codellama-34b-general-8", 0.35),     // +32.3%
    ("training-codellama-34b-general-20", 0.55),    // +51.8%
    ("training-codellama-34b-reasoning-sat", 0.20), // +17.1%
    ("kv-llama-3.1-70b-h100-tp4", 0.01),            // -0.07% (reserve fitted on the Qwen3-32B pod)
    ("kv-qwen3-32b-h100-tp2", 0.05),                // +0.07%: issue 24 asks for 5%
    ("kv-qwen3-32b-h100-tp2-vllm-0.11", 0.10),      // +8.8%: another vLLM version's reserve
];

/// Rows outside the model: listed, never predicted.
const NOT_MODELLED: &[&str] = &["deepseek-v3-h800-prefill", "deepseek-v3-h800-decode"];

/// Every row is present, has a finite prediction and stays within its stated error; a missing
/// row, an extra row, a NaN or a drift past the bound fails.
fn check_rows(json: &Value) {
    let rows = json["rows"].as_array().expect("rows");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let want: Vec<&str> = STATED.iter().map(|r| r.0).chain(NOT_MODELLED.iter().copied()).collect();
    let (mut a, mut b) = (ids.clone(), want.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b, "the table's rows");
    for (id, bound) in STATED {
        let r = rows.iter().find(|r| r["id"] == *id).unwrap();
        let num = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{id}: `{k}` is {} (missing or NaN)", r[k]));
        for k in ["published", "predicted", "error", "held_out_error"] {
            assert!(num(k).is_finite(), "{id}: {k}");
        }
        assert!(num("predicted") > 0.0, "{id}");
        let e = num("held_out_error");
        assert!(e.abs() <= *bound, "{id}: held-out error {:+.2}% is past its stated {:.0}%", 100.0 * e, 100.0 * bound);
        if r["role"] == "fit" {
            assert!(num("left_out_predicted") > 0.0, "{id}: a fitted point is also predicted without it");
        }
    }
    for id in NOT_MODELLED {
        let r = rows.iter().find(|r| r["id"] == *id).unwrap();
        assert_eq!(r["role"], "not modelled");
        assert!(r["predicted"].is_null() && !r["note"].as_str().unwrap().is_empty(), "{id}: a reason, no number");
    }
}

#[test]
fn cost_check_holds_every_stated_error() {
    let (code, out, err) = run(&["fleet", "cost-check", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    check_rows(&json);
    // the printed calibration is the core's published one
    let c = &json["calibration"];
    let p = Calibration::PUBLISHED;
    assert_eq!(c["compute_ppm"], p.compute_ppm);
    assert_eq!(c["memory_ppm"], p.memory_ppm);
    assert_eq!(c["reserve_bytes"], p.reserve_bytes);
    // the Markdown table: the title and every shown row
    let (code, md, _) = run(&["fleet", "cost-check"]);
    assert_eq!(code, 0);
    assert!(md.contains("What the cost model says, and how wrong it is"));
    for r in json["rows"].as_array().unwrap().iter().filter(|r| r["shown"] == true) {
        assert!(md.contains(&format!("`{}`", r["id"].as_str().unwrap())), "{}", r["id"]);
    }
    assert!(!md.contains("NaN") && !md.contains("| inf") && !md.contains("| -inf"), "{md}");
}

#[test]
fn the_check_fails_on_a_missing_row_a_nan_or_a_drift() {
    // the assertions above cannot pass vacuously: tamper with a good result three ways
    let (_, out, _) = run(&["fleet", "cost-check", "--json"]);
    let good: Value = serde_json::from_str(&out).unwrap();
    let tamper = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        std::panic::catch_unwind(|| check_rows(&v)).is_err()
    };
    assert!(tamper(&|v| {
        v["rows"].as_array_mut().unwrap().retain(|r| r["id"] != "kv-qwen3-32b-h100-tp2");
    }));
    assert!(tamper(&|v| v["rows"][0]["held_out_error"] = Value::Null));
    assert!(tamper(&|v| v["rows"][0]["held_out_error"] = serde_json::json!(0.5)));
}

/// The profile the sample step log was generated from: Qwen3-32B on 2 x H100 with these factors.
fn known() -> Physics {
    let cal = Calibration {
        compute_ppm: 550_000,
        attention_ppm: 800_000,
        memory_ppm: 650_000,
        step_ns: 3_000_000,
        request_ns: 25_000,
        layer_ns: 0,
        kv_memory_ppm: 0,
        ..Calibration::PUBLISHED
    };
    PhysicsProfile::Qwen3_32bH100Tp2.physics().unwrap().with_calibration(cal).unwrap()
}

const SAMPLE: &str = "tests/data/calibrate/steps-qwen3-32b-h100-tp2.csv";
const SAMPLE_ROWS: usize = 400;
const SAMPLE_SEED: u64 = 24;
const SAMPLE_NOISE_PPM: u32 = 30_000;

#[test]
fn the_sample_step_log_is_generated_from_the_known_profile() {
    let text = generate_steps(&known(), SAMPLE_ROWS, SAMPLE_SEED, SAMPLE_NOISE_PPM).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SAMPLE);
    if std::env::var_os("BROKERLAB_WRITE_SAMPLES").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let checked_in =
        std::fs::read_to_string(&path).expect("the checked-in sample (BROKERLAB_WRITE_SAMPLES=1 writes it)");
    assert_eq!(checked_in, text, "{SAMPLE} is not what the generator gives");
    assert_eq!(text.lines().count(), SAMPLE_ROWS + 1);
}

/// `key = number` under `[table]` of a TOML text.
fn toml_num(text: &str, table: &str, key: &str) -> f64 {
    let v: toml::Table = toml::from_str(text).unwrap();
    let mut t = &v;
    for part in table.split('.') {
        t = t[part].as_table().unwrap();
    }
    t[key].as_float().or(t[key].as_integer().map(|i| i as f64)).unwrap()
}

#[test]
fn calibrate_recovers_the_known_profile_from_the_sample() {
    let d = dir("recover");
    let out = d.join("fitted.toml");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join(SAMPLE);
    let (code, stdout, err) = run(&[
        "fleet",
        "calibrate",
        "--model",
        "qwen3-32b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--steps",
        s(&sample),
        "-o",
        s(&out),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("held out"), "{stdout}");
    let text = std::fs::read_to_string(&out).unwrap();
    let want = *known().calibration();
    // the stated bounds (docs/MODEL.md, "Fitting your own server"): with noise of up to 3% on
    // 320 fitted steps, each efficiency within 2% of the truth, the per-step overhead within 5%,
    // the per-request one (a small share of every step) within 15%. Measured at this commit:
    // +0.10%, +0.10%, +0.55%, +0.08%, +8.2%.
    for (key, truth, bound) in [
        ("compute_ppm", want.compute_ppm as f64, 0.02),
        ("attention_ppm", want.attention_ppm as f64, 0.02),
        ("memory_ppm", want.memory_ppm as f64, 0.02),
        ("step_ns", want.step_ns as f64, 0.05),
        ("request_ns", want.request_ns as f64, 0.15),
    ] {
        let got = toml_num(&text, "calibration", key);
        assert!((got / truth - 1.0).abs() <= bound, "{key}: fitted {got}, truth {truth}");
    }
    // the noise is uniform within 3%: the errors are of that size, on the fit and held out
    for k in ["fit_median", "fit_p90", "held_out_median", "held_out_p90"] {
        let e = toml_num(&text, "fit.step", k);
        assert!(e.is_finite() && e < 0.035, "{k} = {e}");
    }
    assert_eq!(toml_num(&text, "fit", "rows"), SAMPLE_ROWS as f64);
    assert_eq!(toml_num(&text, "fit.step", "held_out_rows"), (SAMPLE_ROWS / 5) as f64);
    assert!(text.contains("not_identified = []"), "{text}");
    // the model and GPU tables read back as the descriptions
    assert_eq!(toml_num(&text, "model", "layers"), 64.0);
    assert_eq!(toml_num(&text, "gpu", "hbm_bytes_per_s"), 3.35e12);
    let svg = std::fs::read_to_string(d.join("fitted.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("held-out rows"));
    assert!(std::fs::read(d.join("fitted.png")).unwrap().starts_with(b"\x89PNG"));
    // the same input, the same bytes (on the first 100 steps, to keep the test short)
    let head: String = std::fs::read_to_string(&sample).unwrap().lines().take(101).map(|l| format!("{l}\n")).collect();
    let short = d.join("short.csv");
    std::fs::write(&short, head).unwrap();
    let fit = |name: &str| {
        let o = d.join(name);
        let (code, _, err) = run(&[
            "fleet",
            "calibrate",
            "--model",
            "qwen3-32b",
            "--gpu",
            "h100",
            "--tp",
            "2",
            "--steps",
            s(&short),
            "-o",
            s(&o),
        ]);
        assert_eq!(code, 0, "{err}");
        std::fs::read(o).unwrap()
    };
    assert_eq!(fit("a.toml"), fit("b.toml"));
}

fn calibrate_with(d: &Path, csv: &str, extra: &[&str]) -> (i32, String) {
    let steps = d.join("steps.csv");
    std::fs::write(&steps, csv).unwrap();
    let out = d.join("out.toml");
    let mut args = vec!["fleet", "calibrate", "--model", "qwen3-32b", "--gpu", "h100", "--steps", s(&steps)];
    if !extra.contains(&"--tp") {
        args.extend(["--tp", "2"]);
    }
    args.extend(["-o", s(&out)]);
    args.extend(extra);
    let (code, _, err) = run(&args);
    (code, err)
}

#[test]
fn calibrate_bad_input_is_exit_2_naming_the_problem() {
    let d = dir("bad");
    let good_row = "8192,0,0,400.5\n";
    let header = "prefill_tokens,decode_requests,context_tokens,step_ms\n";
    // calibrate-steps-column
    let (code, err) = calibrate_with(&d, &format!("prefill_tokens,decode_requests,step_ms\n{good_row}"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("column `context_tokens` is missing"), "{err}");
    let (code, err) =
        calibrate_with(&d, &format!("prefill_tokens,decode_requests,context_tokens,step_ms,gpu\n{good_row}"), &[]);
    assert!(code == 2 && err.contains("unknown column `gpu`"), "{err}");
    // calibrate-steps-field
    let (code, err) = calibrate_with(&d, &format!("{header}{good_row}100,2,50,-3\n"), &[]);
    assert!(code == 2 && err.contains("steps.csv:3: field `step_ms`"), "{err}");
    let (code, err) = calibrate_with(&d, &format!("{header}{good_row}1.5,2,50,3\n"), &[]);
    assert!(code == 2 && err.contains(":3: field `prefill_tokens`"), "{err}");
    let (code, err) = calibrate_with(&d, &format!("{header}0,0,0,3\n"), &[]);
    assert!(code == 2 && err.contains(":2: field `prefill_tokens`: a step computes at least one token"), "{err}");
    let (code, err) = calibrate_with(&d, &format!("{header}100,0,50,3\n"), &[]);
    assert!(code == 2 && err.contains("field `context_tokens`"), "{err}");
    // calibrate-too-few
    let (code, err) = calibrate_with(&d, &format!("{header}{}", good_row.repeat(12)), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("12 steps are too few to fit 5 factors: at least 32 are needed"), "{err}");
    // calibrate-model: an unknown name, a config.json without a required key, a bad TOML key
    let (code, _, err) =
        run(&["fleet", "calibrate", "--model", "qwen9", "--gpu", "h100", "--steps", "x.csv", "-o", "o.toml"]);
    assert!(code == 2 && err.contains("--model qwen9: expected a built-in model"), "{err}");
    let cfg = d.join("config.json");
    std::fs::write(&cfg, r#"{"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 1000}"#).unwrap();
    let (code, _, err) =
        run(&["fleet", "calibrate", "--model", s(&cfg), "--gpu", "h100", "--steps", "x.csv", "-o", "o.toml"]);
    assert!(code == 2 && err.contains("config.json: field `num_hidden_layers`: missing"), "{err}");
    std::fs::write(
        &cfg,
        r#"{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
        "intermediate_size": 128, "vocab_size": 1000}"#,
    )
    .unwrap();
    let (code, _, err) =
        run(&["fleet", "calibrate", "--model", s(&cfg), "--gpu", "h100", "--steps", "x.csv", "-o", "o.toml"]);
    assert!(code == 2 && err.contains("field `num_key_value_heads`: expected a divisor of heads"), "{err}");
    let m = d.join("model.toml");
    std::fs::write(&m, "layers = 2\nhidden = 64\nheads = 4\nvocab = 1000\nintermediate = 128\nlayer = 3\n").unwrap();
    let (code, _, err) =
        run(&["fleet", "calibrate", "--model", s(&m), "--gpu", "h100", "--steps", "x.csv", "-o", "o.toml"]);
    assert!(code == 2 && err.contains("model.toml") && err.contains("unknown field `layer`"), "{err}");
    // calibrate-tp
    let (code, err) = calibrate_with(&d, header, &["--tp", "3"]);
    assert!(code == 2 && err.contains("--tp: expected a divisor of heads"), "{err}");
    // calibrate-output: the profile would overwrite the step log
    let steps = d.join("steps.csv");
    let (code, _, err) = run(&[
        "fleet",
        "calibrate",
        "--model",
        "qwen3-32b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--steps",
        s(&steps),
        "-o",
        s(&steps),
    ]);
    assert!(code == 2 && err.contains("refusing to overwrite an input"), "{err}");
    // calibrate-gpu: a GPU description with a fractional byte rate
    let g = d.join("gpu.toml");
    std::fs::write(
        &g,
        "flops_bf16 = 989.5e12\nhbm_bytes_per_s = 3.5\nmemory_bytes = 80e9\nlink_bytes_per_s = 450e9\npcie_bytes_per_s = 64e9\n",
    )
    .unwrap();
    let (code, _, err) =
        run(&["fleet", "calibrate", "--model", "qwen3-8b", "--gpu", s(&g), "--steps", "x.csv", "-o", "o.toml"]);
    assert!(code == 2 && err.contains("gpu.toml") && err.contains("hbm_bytes_per_s"), "{err}");
}

const VLLM_SAMPLE: &str = "tests/data/calibrate/vllm-qwen3-32b-h100-tp2.json";
const VLLM_REQUESTS: usize = 200;
const VLLM_SEED: u64 = 2424;
const VLLM_RATE_MILLI: u64 = 2_000;
const VLLM_NOISE_PPM: u32 = 30_000;

#[test]
fn the_sample_vllm_result_is_generated_from_the_known_profile() {
    let text = brokerlab::fleet::cost::serve::generate_result(
        &known(),
        VLLM_REQUESTS,
        VLLM_SEED,
        VLLM_RATE_MILLI,
        VLLM_NOISE_PPM,
    )
    .unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(VLLM_SAMPLE);
    if std::env::var_os("BROKERLAB_WRITE_SAMPLES").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let checked_in =
        std::fs::read_to_string(&path).expect("the checked-in sample (BROKERLAB_WRITE_SAMPLES=1 writes it)");
    assert_eq!(checked_in, text, "{VLLM_SAMPLE} is not what the generator gives");
    let r = brokerlab::fleet::cost::vllm_result::parse(&text).unwrap();
    assert_eq!(r.requests.len(), VLLM_REQUESTS);
}

#[test]
fn calibrate_through_the_engine_recovers_the_known_profile_from_the_vllm_sample() {
    let d = dir("vllm");
    let out = d.join("fitted.toml");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join(VLLM_SAMPLE);
    let args = ["fleet", "calibrate", "--model", "qwen3-32b", "--gpu", "h100", "--tp", "2", "--vllm-result"];
    let mut all = args.to_vec();
    all.extend([s(&sample), "-o", s(&out)]);
    let (code, stdout, err) = run(&all);
    assert_eq!(code, 0, "{err}");
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(&out).unwrap();
    let want = *known().calibration();
    for (key, truth, bound) in VLLM_BOUNDS {
        let truth = truth(&want);
        let got = toml_num(&text, "calibration", key);
        assert!((got / truth - 1.0).abs() <= *bound, "{key}: fitted {got}, truth {truth}");
    }
    // the noise is uniform within 3%; TTFT's tail is wider (a step a little longer or shorter
    // moves a prompt's chunks into other steps). Measured: TTFT median 2.4% / 2.5% held out,
    // p90 8.4% / 8.3%; mean ITL 0.2% and 0.5%.
    for (table, k, bound) in [
        ("fit.ttft", "fit_median", 0.035),
        ("fit.ttft", "held_out_median", 0.035),
        ("fit.ttft", "fit_p90", 0.10),
        ("fit.ttft", "held_out_p90", 0.10),
        ("fit.itl", "fit_median", 0.01),
        ("fit.itl", "held_out_median", 0.01),
        ("fit.itl", "fit_p90", 0.01),
        ("fit.itl", "held_out_p90", 0.01),
    ] {
        let e = toml_num(&text, table, k);
        assert!(e.is_finite() && e < bound, "{table}.{k} = {e}");
    }
    assert_eq!(toml_num(&text, "fit.ttft", "held_out_requests"), (VLLM_REQUESTS / 5) as f64);
    let svg = std::fs::read_to_string(d.join("fitted.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("TTFT, held out"));
    assert!(std::fs::read(d.join("fitted.png")).unwrap().starts_with(b"\x89PNG"));
    // the fitted profile runs the batched engine
    let trace = d.join("t.jsonl");
    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 400, \"output_length\": 20, \"hash_ids\": [1]}\n")
        .unwrap();
    let (code, stdout, err) = run(&[
        "fleet",
        "replay",
        "--trace",
        s(&trace),
        "--pods",
        "1",
        "--router",
        "round-robin",
        "--engine",
        "batched",
        "--profile",
        s(&out),
        "--json",
        "--no-date",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["profile"], "file");
    assert_eq!(v["physics"]["step_ns"].as_u64().unwrap() as f64, toml_num(&text, "calibration", "step_ns"));
}

/// The stated bounds of the fit through the engine (docs/MODEL.md, "Fitting your own server"),
/// with the value each is measured against; measured at this commit: compute -2.0%, memory
/// -0.7%, step -0.2%. Not recovered from this sample, and stated so in the docs: attention
/// (+20%: prompts of at most 8,192 tokens leave attention a small share of a prefill) and the
/// per-request overhead (-83%: 25 us of a ~20 ms step).
type Truth = fn(&Calibration) -> f64;
const VLLM_BOUNDS: &[(&str, Truth, f64)] = &[
    ("compute_ppm", |c| c.compute_ppm as f64, 0.03),
    ("memory_ppm", |c| c.memory_ppm as f64, 0.02),
    ("step_ns", |c| c.step_ns as f64, 0.02),
];

#[test]
fn calibrate_from_a_vllm_result_refuses_missing_fields_and_too_few_requests() {
    let d = dir("vllm-bad");
    let sample = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(VLLM_SAMPLE)).unwrap();
    let calibrate = |name: &str, text: &str| {
        let f = d.join(name);
        std::fs::write(&f, text).unwrap();
        let out = d.join(format!("{name}.toml"));
        let (code, _, err) = run(&[
            "fleet",
            "calibrate",
            "--model",
            "qwen3-32b",
            "--gpu",
            "h100",
            "--tp",
            "2",
            "--vllm-result",
            s(&f),
            "-o",
            s(&out),
        ]);
        assert!(!out.exists(), "{name}: no profile on bad input");
        (code, err)
    };
    for key in ["input_lens", "output_lens", "ttfts", "itls", "start_times"] {
        let (code, err) = calibrate(&format!("no-{key}.json"), &sample.replacen(&format!("\"{key}\""), "\"x\"", 1));
        assert_eq!(code, 2, "{key}: {err}");
        assert!(err.contains(&format!("no-{key}.json")) && err.contains(&format!("field `{key}`")), "{err}");
    }
    // 20 requests: 16 fit rows for 5 factors need 25
    let few: String = {
        let v: Value = serde_json::from_str(&sample).unwrap();
        let mut o = v.as_object().unwrap().clone();
        for k in ["input_lens", "output_lens", "start_times", "ttfts", "itls", "errors"] {
            let a: Vec<Value> = o[k].as_array().unwrap().iter().take(20).cloned().collect();
            o.insert(k.into(), Value::Array(a));
        }
        serde_json::to_string(&o).unwrap()
    };
    let (code, err) = calibrate("few.json", &few);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("too few") && err.contains("few.json"), "{err}");
}
