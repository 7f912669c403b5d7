//! The published cells, as data with their source (docs/PUBLISHED.md has the reading of each).
//! Nothing here is derived from a simulated value.

use serde::Serialize;

/// Where a published figure was read.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Source {
    /// GitHub repository.
    pub repo: &'static str,
    /// File in it.
    pub path: &'static str,
    /// Commit read.
    pub commit: &'static str,
    /// Lines.
    pub lines: &'static str,
}

impl Source {
    /// `repo path @ commit, lines`.
    pub fn cite(&self) -> String {
        format!("{} `{}` @ `{}`, {}", self.repo, self.path, self.commit, self.lines)
    }
}

/// Table 1: the 2025 benchmark report's summary rows.
pub const TABLE1_SOURCE: Source = Source {
    repo: "llm-d/llm-d-kv-cache-manager",
    path: "benchmarking/73-capacity/README.md",
    commit: "d070ea60",
    lines: "L243-256 (summary, wait queue)",
};

/// Table 2: the "Sticky Until Saturated" blog's knee table.
pub const TABLE2_SOURCE: Source = Source {
    repo: "llm-d/llm-d.github.io",
    path: "blog/2026-08-17_sticky-until-saturated-token-aware-routing.mdx",
    commit: "b687f67b",
    lines: "L184-186",
};

/// The Sticky b2b-saas per-stage rows (also table 3's numbers).
pub const B2B_SOURCE: Source = Source {
    repo: "llm-d/llm-d",
    path: "llm-d-benchmarking/workloads/b2b-saas/analysis/results.txt",
    commit: "7c4b49aa",
    lines: "L3-18 (epp prefix-cache filter + token-load), L20-36 (baseline)",
};

/// Table 3: the optimized-baseline guide's summary.
pub const TABLE3_SOURCE: Source = Source {
    repo: "llm-d/llm-d",
    path: "guides/optimized-baseline/benchmark-results/vllm-qwen3-32b-h100/README.md",
    commit: "53c5b20a",
    lines: "L24-28",
};

/// One router's row of table 1.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Table1Row {
    /// llm-d's experiment name.
    pub experiment: &'static str,
    /// Output tok/s (mean over the 16 QPS rows).
    pub output_tok_s: f64,
    /// TTFT p90, s (success-weighted mean over the rows).
    pub ttft_p90_s: f64,
    /// TTFT mean, s.
    pub ttft_mean_s: f64,
    /// vLLM wait queue (mean over pods and samples).
    pub wait_queue: f64,
}

/// Table 1, precise / approximate (estimated) / load / random. Load's output tok/s is the
/// report's measured 4,266.4 (the blog repeats random's 4,428.7).
pub const TABLE1: [Table1Row; 4] = [
    Table1Row {
        experiment: "precise-scheduling",
        output_tok_s: 8730.0,
        ttft_p90_s: 0.542,
        ttft_mean_s: 0.298,
        wait_queue: 0.1,
    },
    Table1Row {
        experiment: "estimated-scheduling",
        output_tok_s: 6944.4,
        ttft_p90_s: 31.083,
        ttft_mean_s: 13.316,
        wait_queue: 8.1,
    },
    Table1Row {
        experiment: "load-scheduling",
        output_tok_s: 4266.4,
        ttft_p90_s: 94.865,
        ttft_mean_s: 46.987,
        wait_queue: 28.9,
    },
    Table1Row {
        experiment: "random-scheduling",
        output_tok_s: 4428.7,
        ttft_p90_s: 92.551,
        ttft_mean_s: 45.281,
        wait_queue: 27.3,
    },
];

/// Output tokens the 2025 run's client counted per request it sent (assumption A1, docs/PUBLISHED.md
/// "The 2025 run's counted output tokens"): the server generated 1,000 per request
/// (`ignore_eos`, `max_tokens` 1000), inference-perf counted what re-tokenizing the streamed text
/// gives, 12.42 M tokens over the run's 16,334 ladder requests. Read from the report's own chart
/// "Norm. Time per Output Token vs. QPS" (`latency_vs_qps.png` beside the table's README @
/// `d070ea60`): its report generator divides each row's send duration by the output tokens of the
/// run's one per-request file (read again for every stage), so row i plots
/// `(n_i / requests_per_s_i) / T` with T the run's total ([`TABLE1_NORM_TIME_LOAD`]). 760 is T /
/// 16,334 with T the mean over the 35 markers of the four series that other series do not hide
/// (per scheduler 760.0 precise, 753.8 estimated, 758.7 random, 763.1 load); the same reading of the 2025 Llama-70B report (`benchmarking/37-capacity`, 1,000
/// output tokens, 100% success) gives 1,000.6.
pub const TABLE1_COUNTED_PER_SENT: u64 = 760;

/// The 2025 report's counted output over counted prompt tokens per stage: 0.1237 on every row and
/// scheduler (+-1%), its "Total Throughput" chart minus the table's output tok/s (docs/PUBLISHED.md
/// "The 2025 run's counted output tokens", item 3), x 10^4.
pub const TABLE1_OUTPUT_PER_PROMPT_E4: u64 = 1_237;
/// Prompt tokens the 2025 client counted per request: inference-perf v0.2.0's shared_prefix
/// prompts are decoded random token ids, counted again by encoding; 6,000 + 1,200 random ids of
/// Qwen's BPE decode and re-encode to 7,580 +- 26 tokens (item 3: Qwen's ranks as the PyPI package
/// `dashscope` ships them, 150 prompts). The server tokenizes the same text with the same
/// tokenizer, so this is also the prompt vLLM prefilled and cached: [`TABLE1_SERVER_SYSTEM_PROMPT_TOKENS`]
/// + [`TABLE1_SERVER_QUESTION_TOKENS`], the prompt table 1's runs send (assumption A13).
pub const TABLE1_COUNTED_PROMPT_TOKENS: u64 = 7_580;
/// The group's system prompt as the server tokenized it (assumption A13, docs/PUBLISHED.md "The
/// 2025 prompts as the server tokenized them"): inference-perf v0.2.0's `shared_prefix` generator
/// (`datagen/shared_prefix_datagen.py` @ v0.2.0: `hf_tokenizer.decode` of `system_prompt_len`
/// random token ids, then `shared_prefix_text + " " + question_text`) sends text, and decoding
/// 6,000 random ids of Qwen's byte-level BPE and encoding the text again gives 6,315 tokens (the
/// 7,580-token prompt's shared part; an independent sample of 40 groups gives 6,319 +- 28, and
/// the five prompts of a group share that many leading tokens). The configured lengths became
/// exact only with kubernetes-sigs/inference-perf PR #383 (2026-05-01, "Fix `SharedPrefix`
/// Datagen Prompt Length", for issue #230 of 2025-09-22: "expected prompt tokens (128) does not
/// match the actual (~130-140)"), so tables 2-3 (inference-perf v0.5.0) send 6,000 + 1,200.
pub const TABLE1_SERVER_SYSTEM_PROMPT_TOKENS: u32 = 6_315;
/// The user's `" " + question` as the server tokenized it: 1,200 random ids decode and encode to
/// 1,265 tokens (A13; the independent sample gives 1,264.5).
pub const TABLE1_SERVER_QUESTION_TOKENS: u32 = 1_265;
/// Output tokens the 2025 client counted per successful request (assumption A1): the
/// per-stage ratio [`TABLE1_OUTPUT_PER_PROMPT_E4`] times the counted prompt,
/// 0.1237 x 7,580 = 937.6. The server generated 1,000 (`ignore_eos`, `max_tokens` 1000); the
/// client's re-tokenized count of the streamed text is lower. With the 2025 gateway's limit of
/// 1,024 requests in flight (the stages of about 1,500 requests lose about a third) this gives the
/// run's chart total within a few percent ([`TABLE1_COUNTED_PER_SENT`] x 16,334 = 12.4 M):
/// docs/PUBLISHED.md, "The 2025 gateway's 1,024 streams".
pub const TABLE1_COUNTED_OUTPUT_TOKENS: u64 =
    (TABLE1_COUNTED_PROMPT_TOKENS * TABLE1_OUTPUT_PER_PROMPT_E4 + 5_000) / 10_000;

/// The load-scheduling markers of that chart (the series drawn on top, every row visible): per
/// QPS row (requested rate, requests sent int(rate x duration), the README's Requests/s, the
/// plotted norm. time in us per token, read from the pixels: one pixel is 0.0065 us).
pub const TABLE1_NORM_TIME_LOAD: [(u32, u64, f64, f64); 16] = [
    (3, 60, 2.997, 1.6041),
    (10, 200, 10.469, 1.5325),
    (15, 300, 15.152, 1.5976),
    (20, 760, 22.157, 2.7491),
    (22, 748, 21.469, 2.7849),
    (25, 750, 25.597, 2.3522),
    (30, 750, 29.711, 2.0204),
    (35, 735, 35.167, 1.6984),
    (40, 1520, 39.019, 3.1264),
    (43, 1548, 40.143, 3.0809),
    (46, 1518, 46.688, 2.6059),
    (49, 1470, 49.162, 2.3978),
    (52, 1508, 54.050, 2.2351),
    (55, 1485, 54.779, 2.1701),
    (57, 1482, 55.837, 2.1245),
    (60, 1500, 59.971, 2.0074),
];

/// One inference-perf stage row of the Sticky b2b-saas results (client columns unless `v_`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct B2bRow {
    /// Achieved rate, req/s.
    pub ach_qps: f64,
    /// The 15 req/s x 50 s warmup.
    pub warmup: bool,
    /// Client TTFT p50, s.
    pub ttft_p50_s: f64,
    /// Client TTFT p90, s.
    pub ttft_p90_s: f64,
    /// Client E2E p50, s.
    pub e2e_p50_s: f64,
    /// vLLM-side TTFT p90, s (misaligned window).
    pub v_ttft_p90_s: f64,
    /// vLLM-side E2E p50, s (misaligned window; the guide's "NTPOT p50").
    pub v_e2e_p50_s: f64,
    /// Output tok/s.
    pub out_tok_s: f64,
    /// Input tok/s.
    pub in_tok_s: f64,
    /// Client TPOT p50, s.
    pub tpot_p50_s: f64,
}

const fn row(ach_qps: f64, warmup: bool, t: [f64; 8]) -> B2bRow {
    B2bRow {
        ach_qps,
        warmup,
        ttft_p50_s: t[0],
        ttft_p90_s: t[1],
        e2e_p50_s: t[2],
        v_ttft_p90_s: t[3],
        v_e2e_p50_s: t[4],
        out_tok_s: t[5],
        in_tok_s: t[6],
        tpot_p50_s: t[7] / 1000.0,
    }
}

/// The prefix+token arm ("llm-d optimized"), sorted by achieved rate as in the file (16 rows;
/// the warmup third). Columns: TTFT p50, TTFT p90, E2E p50, vTTFT p90, vE2E p50, out_t/s, in_t/s, TPOT p50 (ms).
pub const B2B_AFFINITY: [B2bRow; 16] = [
    row(2.82, false, [0.2, 0.3, 16.1, 0.0, 0.0, 1510.8, 11735.6, 16.0]),
    row(9.39, false, [0.5, 1.0, 20.6, 0.0, 0.0, 4596.6, 35092.4, 20.4]),
    row(14.21, true, [1.7, 3.4, 35.6, 0.0, 0.0, 8995.3, 64865.2, 34.1]),
    row(15.96, false, [0.7, 1.2, 23.4, 4.2, 0.0, 6655.8, 51135.5, 23.1]),
    row(20.31, false, [1.4, 2.5, 34.0, 1.4, 34.4, 10808.8, 77805.1, 33.0]),
    row(21.43, false, [1.4, 3.0, 32.6, 0.2, 19.1, 10451.9, 76015.3, 31.1]),
    row(30.41, false, [1.3, 2.2, 41.4, 0.2, 20.8, 10509.4, 76506.0, 40.8]),
    row(36.77, false, [1.1, 2.2, 34.7, 0.2, 24.5, 12289.8, 89787.2, 33.9]),
    row(39.62, false, [6.7, 20.2, 52.7, 0.3, 29.8, 14133.7, 102828.1, 44.5]),
    row(42.08, false, [2.5, 29.4, 53.7, 0.2, 31.5, 13522.4, 98840.1, 45.7]),
    row(45.63, false, [2.5, 32.3, 59.8, 0.2, 30.8, 14050.5, 102371.0, 45.0]),
    row(46.91, false, [2.3, 31.8, 58.1, 2.1, 0.0, 14940.7, 108255.1, 45.0]),
    row(52.45, false, [2.4, 33.0, 61.0, 1.3, 40.8, 14542.5, 105029.1, 44.8]),
    row(56.13, false, [2.4, 34.9, 61.1, 0.2, 34.7, 14607.4, 106015.2, 46.0]),
    row(56.52, false, [2.4, 34.1, 62.7, 19.9, 45.5, 13451.2, 96822.5, 45.6]),
    row(57.03, false, [2.5, 34.8, 60.9, 0.9, 43.9, 13528.3, 98150.8, 45.5]),
];

/// The Kubernetes Service arm ("baseline"), 17 rows, as [`B2B_AFFINITY`].
pub const B2B_SERVICE: [B2bRow; 17] = [
    row(3.26, false, [0.5, 0.5, 17.4, 0.0, 0.0, 1889.0, 12357.8, 17.1]),
    row(9.77, false, [0.5, 0.9, 25.6, 0.0, 0.0, 4944.5, 33537.9, 25.1]),
    row(14.62, true, [16.5, 41.4, 54.7, 0.0, 0.0, 6066.2, 41607.9, 44.0]),
    row(15.80, false, [0.8, 4.9, 36.2, 2.4, 0.0, 4555.3, 30550.3, 33.7]),
    row(20.55, false, [25.4, 56.8, 62.5, 46.1, 53.7, 6238.9, 42947.4, 43.4]),
    row(21.38, false, [30.0, 60.2, 68.3, 0.9, 23.4, 6350.3, 43549.0, 44.2]),
    row(25.33, false, [31.5, 67.6, 69.8, 4.9, 31.1, 6251.0, 42885.0, 44.0]),
    row(28.41, false, [34.4, 65.5, 74.9, 46.2, 57.3, 6543.9, 44982.4, 44.1]),
    row(35.80, false, [37.1, 69.2, 74.0, 37.9, 48.5, 6228.1, 42796.7, 43.5]),
    row(40.46, false, [79.4, 153.1, 123.3, 61.9, 76.1, 6859.5, 46970.9, 44.1]),
    row(44.00, false, [80.8, 158.1, 124.8, 66.8, 60.0, 6526.1, 44684.4, 44.1]),
    row(45.69, false, [80.8, 158.1, 124.7, 139.9, 89.1, 6955.6, 47804.2, 43.8]),
    row(50.13, false, [81.0, 129.9, 124.6, 143.8, 115.5, 7049.2, 48204.4, 43.6]),
    row(51.74, false, [83.2, 161.1, 126.7, 158.5, 150.9, 6402.4, 43786.6, 44.0]),
    row(55.12, false, [82.9, 134.3, 127.3, 153.3, 131.6, 6316.7, 43336.5, 44.2]),
    row(56.14, false, [82.2, 135.0, 125.8, 154.1, 135.5, 6764.5, 46393.2, 43.6]),
    row(57.64, false, [84.0, 161.3, 127.8, 259.1, 133.4, 6926.2, 47540.3, 43.9]),
];

/// The Sticky code-generation and reasoning per-concurrency rows (client columns).
pub const CONC_SOURCE: Source = Source {
    repo: "llm-d/llm-d",
    path: "llm-d-benchmarking/workloads/{code-generation,reasoning}/analysis/results.txt",
    commit: "7c4b49aa",
    lines: "code-generation L3-12 (k8), L14-23 (epp prefix-cache filter + modified token-load 286k); reasoning L3-7 (k8), L15-19 (epp run-req)",
};

/// One concurrency level of a Sticky closed-loop results file (client columns).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ConcRow {
    /// Concurrency level.
    pub conc: f64,
    /// Client TTFT p90, s.
    pub ttft_p90_s: f64,
    /// Client TPOT p90, s.
    pub tpot_p90_s: f64,
    /// Output tok/s.
    pub out_tok_s: f64,
    /// Input tok/s.
    pub in_tok_s: f64,
}

const fn conc(conc: f64, ttft_p90_s: f64, tpot_p90_ms: f64, out_tok_s: f64, in_tok_s: f64) -> ConcRow {
    ConcRow { conc, ttft_p90_s, tpot_p90_s: tpot_p90_ms / 1000.0, out_tok_s, in_tok_s }
}

/// Code-generation, "epp prefix-cache filter + modified token-load 286k" (prefix+token): conc,
/// TTFT p90 (s), TPOT p90 (ms), out_t/s, in_t/s.
pub const CODEGEN_AFFINITY: [ConcRow; 10] = [
    conc(10.0, 16.8, 676.7, 140.9, 19541.5),
    conc(20.0, 14.0, 261.8, 238.0, 26754.3),
    conc(30.0, 17.7, 845.6, 594.8, 31196.3),
    conc(40.0, 20.0, 892.3, 415.4, 41725.2),
    conc(50.0, 25.9, 1361.8, 422.1, 44570.4),
    conc(60.0, 35.8, 1226.5, 786.4, 46051.2),
    conc(70.0, 70.9, 492.0, 943.0, 45271.5),
    conc(80.0, 65.9, 927.9, 916.8, 45659.4),
    conc(90.0, 78.1, 719.8, 778.1, 47169.8),
    conc(100.0, 115.9, 2105.4, 622.6, 47765.5),
];

/// Code-generation, "k8" (the Kubernetes Service), as [`CODEGEN_AFFINITY`].
pub const CODEGEN_SERVICE: [ConcRow; 10] = [
    conc(10.0, 25.7, 413.2, 117.5, 15168.5),
    conc(20.0, 14.2, 52.6, 299.9, 29451.3),
    conc(30.0, 74.4, 60.8, 353.3, 16269.1),
    conc(40.0, 70.4, 78.4, 292.7, 26357.3),
    conc(50.0, 63.6, 92.6, 394.7, 34551.8),
    conc(60.0, 148.5, 90.8, 402.0, 22124.5),
    conc(70.0, 136.2, 106.9, 715.6, 32786.2),
    conc(80.0, 108.3, 105.3, 862.0, 40560.2),
    conc(90.0, 162.0, 99.2, 615.1, 34526.3),
    conc(100.0, 175.1, 117.1, 548.1, 37699.2),
];

/// (conc, TTFT p50 s, E2E p50 s, TPOT p50 ms, prefix%, q_wait s): one row of [`CODEGEN_P50`].
pub type CodegenP50 = (f64, f64, f64, f64, f64, f64);

/// Code-generation per level, the columns the knee cells do not use (same file and lines as
/// [`CONC_SOURCE`]): (conc, client TTFT p50 s, client E2E p50 s, client TPOT p50 ms, vLLM
/// `prefix%` (prefix-cache hits / queries), `q_wait` s (mean time in vLLM's waiting queue, from
/// inference-perf's own Prometheus report)), prefix+token arm then the Kubernetes Service.
pub const CODEGEN_P50: [[CodegenP50; 10]; 2] = [
    [
        (10.0, 5.0, 29.8, 42.1, 10.4, 0.9),
        (20.0, 7.0, 26.8, 36.8, 48.1, 0.6),
        (30.0, 6.4, 29.0, 38.8, 3.8, 1.1),
        (40.0, 9.0, 40.4, 47.6, 6.1, 2.1),
        (50.0, 10.7, 46.6, 66.4, 4.0, 4.4),
        (60.0, 20.4, 58.5, 62.3, 6.4, 12.3),
        (70.0, 47.7, 85.5, 63.7, 3.7, 35.8),
        (80.0, 44.1, 83.0, 62.9, 4.8, 34.6),
        (90.0, 56.7, 92.4, 61.0, 4.2, 45.7),
        (100.0, 84.8, 122.3, 71.2, 3.6, 71.7),
    ],
    [
        (10.0, 1.7, 23.1, 26.6, 36.3, 2.6),
        (20.0, 1.4, 22.6, 28.2, 23.0, 1.3),
        (30.0, 5.6, 28.3, 30.7, 9.5, 13.7),
        (40.0, 10.0, 36.8, 36.4, 11.4, 14.2),
        (50.0, 27.3, 61.1, 51.5, 10.4, 21.9),
        (60.0, 54.7, 102.0, 50.0, 5.3, 59.7),
        (70.0, 48.9, 87.7, 47.7, 6.0, 49.6),
        (80.0, 49.6, 86.7, 55.8, 5.7, 43.7),
        (90.0, 64.3, 113.3, 50.8, 5.2, 65.6),
        (100.0, 66.8, 105.3, 58.0, 5.3, 68.1),
    ],
];

/// Reasoning, "epp run-req", as [`CODEGEN_AFFINITY`].
pub const REASONING_RUN_REQ: [ConcRow; 5] = [
    conc(50.0, 0.3, 17.3, 1723.5, 310.4),
    conc(150.0, 1.0, 32.7, 3636.6, 687.7),
    conc(250.0, 1.7, 25.8, 5367.0, 975.8),
    conc(350.0, 2.1, 28.3, 7025.0, 1429.3),
    conc(450.0, 45.3, 42.6, 7879.6, 1587.1),
];

/// Reasoning, "k8", as [`CODEGEN_AFFINITY`].
pub const REASONING_SERVICE: [ConcRow; 5] = [
    conc(50.0, 0.2, 20.1, 1681.6, 320.6),
    conc(150.0, 0.6, 179.7, 3156.9, 654.3),
    conc(250.0, 1.0, 27.8, 5092.1, 958.9),
    conc(350.0, 1.6, 28.7, 6775.6, 1427.5),
    conc(450.0, 3.2, 45.3, 8259.6, 1681.6),
];

/// Table 3's row "@ rate 60" of each arm: the 16th row of the file in order (the guide drops the
/// Service's 17th): index into [`B2B_AFFINITY`] / [`B2B_SERVICE`].
pub const T3_RATE60_ROW: usize = 15;

/// One knee of table 2 as the blog states it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct KneeRow {
    /// Workload.
    pub workload: &'static str,
    /// Arm.
    pub arm: &'static str,
    /// The knee (concurrency or QPS).
    pub knee: f64,
    /// Its unit ("concurrent", "QPS").
    pub knee_unit: &'static str,
    /// Throughput at the knee.
    pub throughput: f64,
    /// Its unit ("input tok/s", "output tok/s").
    pub throughput_unit: &'static str,
    /// Why it is not simulated (None: simulated; every row is today).
    pub needs: Option<&'static str>,
}

/// Table 2's six rows.
pub const TABLE2: [KneeRow; 6] = [
    KneeRow {
        workload: "code-generation",
        arm: "prefix+token",
        knee: 60.0,
        knee_unit: "concurrent",
        throughput: 46_000.0,
        throughput_unit: "input tok/s",
        needs: None,
    },
    KneeRow {
        workload: "code-generation",
        arm: "k8s service",
        knee: 30.0,
        knee_unit: "concurrent",
        throughput: 16_000.0,
        throughput_unit: "input tok/s",
        needs: None,
    },
    KneeRow {
        workload: "reasoning",
        arm: "run-req",
        knee: 350.0,
        knee_unit: "concurrent",
        throughput: 7_000.0,
        throughput_unit: "output tok/s",
        needs: None,
    },
    KneeRow {
        workload: "reasoning",
        arm: "k8s service",
        knee: 250.0,
        knee_unit: "concurrent",
        throughput: 6_800.0,
        throughput_unit: "output tok/s",
        needs: None,
    },
    KneeRow {
        workload: "b2b-saas",
        arm: "prefix+token",
        knee: 38.0,
        knee_unit: "QPS",
        throughput: 90_000.0,
        throughput_unit: "input tok/s",
        needs: None,
    },
    KneeRow {
        workload: "b2b-saas",
        arm: "k8s service",
        knee: 18.0,
        knee_unit: "QPS",
        throughput: 45_000.0,
        throughput_unit: "input tok/s",
        needs: None,
    },
];

/// Relative error (sim - published) / published; absolute (sim - published) when `absolute`.
pub fn error(sim: f64, published: f64, absolute: bool) -> f64 {
    if absolute { sim - published } else { (sim - published) / published }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_prompt_is_the_counted_prompt() {
        // A13: what the client counted is what vLLM tokenized (the same text, the same tokenizer)
        let server = u64::from(TABLE1_SERVER_SYSTEM_PROMPT_TOKENS + TABLE1_SERVER_QUESTION_TOKENS);
        assert_eq!(server, TABLE1_COUNTED_PROMPT_TOKENS);
    }

    #[test]
    fn the_counted_output_per_success_is_the_ratio_times_the_counted_prompt() {
        // 0.1237 x 7,580 = 937.65, rounded
        assert_eq!(TABLE1_COUNTED_OUTPUT_TOKENS, 938);
    }

    #[test]
    fn the_counted_output_tokens_are_the_charts_run_total_over_the_requests_sent() {
        // Each row gives the run's total T = (n / requests_per_s) / norm. time: the same T on every
        // row (rows of 60 to 1,548 requests) is what says the chart divides by the run's total.
        let t: Vec<f64> = TABLE1_NORM_TIME_LOAD.iter().map(|&(_, n, rps, us)| n as f64 / rps / (us * 1e-6)).collect();
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        assert!(t.iter().all(|x| (x / mean - 1.0).abs() < 0.015), "{t:?}");
        assert!((12.40e6..12.50e6).contains(&mean), "{mean}");
        // int(rate x duration) of the ladder (the warmup is not in the report's rows: the 15 row
        // fits one 20 s stage), and T over them: the load row's 763 per request
        let sent: u64 = TABLE1_NORM_TIME_LOAD.iter().map(|r| r.1).sum();
        assert_eq!(sent, 16_334);
        let per = mean / sent as f64;
        assert!((per - 763.1).abs() < 0.5, "{per}");
        // the constant (the mean over all 35 unhidden markers) is within 1% of every scheduler's
        for per_scheduler in [760.0, 753.8, 758.7, 763.1] {
            assert!((TABLE1_COUNTED_PER_SENT as f64 / per_scheduler - 1.0).abs() < 0.01);
        }
    }
}
