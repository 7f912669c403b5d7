//! Every published cell beside its simulated value and the error (relative; absolute for the
//! wait queue below 1).

use serde::Serialize;

use super::cells::{
    self, B2B_AFFINITY, B2B_SERVICE, B2bRow, CODEGEN_AFFINITY, CODEGEN_SERVICE, ConcRow, REASONING_RUN_REQ,
    REASONING_SERVICE, T3_RATE60_ROW, TABLE1, TABLE2,
};
use super::knee::{Knee, LoadPoint, knee};
use super::run::{LevelRun, StagedRun, Tables};
use crate::fleet::report::engine::thousands;

/// One cell: simulated, published, error.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// 1, 2 or 3.
    pub table: u8,
    /// Row (router, workload and arm).
    pub row: String,
    /// Metric and unit.
    pub metric: &'static str,
    /// Simulated (None: not simulated or a missing stage).
    pub simulated: Option<f64>,
    /// Published.
    pub published: f64,
    /// The error is absolute (sim - published), not relative.
    pub absolute: bool,
    /// What the simulated and published values are, and why the cell is off where known.
    pub note: String,
}

impl Cell {
    /// `table row metric`, the cell's name in tests.
    pub fn id(&self) -> String {
        format!("t{} {} {}", self.table, self.row, self.metric)
    }

    /// Relative (or absolute) error; None when not simulated.
    pub fn error(&self) -> Option<f64> {
        self.simulated.map(|s| cells::error(s, self.published, self.absolute))
    }

    /// Within 25% (relative cells only).
    pub fn within_25(&self) -> Option<bool> {
        if self.absolute { None } else { self.error().map(|e| e.abs() <= 0.25) }
    }
}

/// Median of |relative error| over the simulated relative cells of `cells`; None if there is none.
pub fn median_error(cells: &[Cell]) -> Option<f64> {
    let mut v: Vec<f64> = cells.iter().filter(|c| !c.absolute).filter_map(|c| c.error().map(f64::abs)).collect();
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

const WHY_TOK: &str = "938 counted of the 1,000 generated tokens per successful request (A1: the 2025 report's 0.1237 counted output per counted prompt token x 7,580 counted prompt tokens); the 2025 gateway fails a request sent while 1,024 are in flight at once (A12: 1,024 of each stage of about 1,500 requests succeed, 3,839 of the 16,334 ladder requests fail, so the run counts 11.7 M tokens against the 12.4 M its chart gives); the physics step cost of tables 2-3 (decode steps priced by their context, a shared prefix block's extra reads at A16's 0.45 of a full read)";
const WHY_TTFT: &str = "client TTFT over drained stages; the model has no request path outside vLLM (A7: gateway, router, HTTP, tokenization: zero here, no measurement of it found)";
const WHY_TTFT_APPROX: &str = "client TTFT over drained stages; the approximate index as GIE v0.5.1 ran it (the first 256 blocks of 64 bytes of a prompt, 168 16-token keys: every user of a group looks alike), the queue and kv-cache scorers reading vLLM's gauges as GIE scrapes them, and the prompts as the server tokenized them (A13: 6,315 + 1,265 tokens, the 6,000 + 1,200 random token ids of the workload file decoded and encoded again): the groups stay on their pods up to 35 req/s (TTFT p90 per ladder stage 0.10-0.96 s; published 0.40-2.46 s) and the pods queue from 40 req/s as published (TTFT p90 38.1-45.8 s at 40-60 req/s against 43.0-50.2 s); measured before A16 (every read of a shared block at full price): with the configured 6,000 + 1,200 the same run kept its groups up to 46 req/s (TTFT p90 0.35-0.58 s at 40-46 req/s); the row is bistable at this load: over workload seeds 1-20 (prompt order and send times; A10 runs seed 13) this cell ranges 0.5-30.9 s (median 21.6 s, -30%; 0.3-23.7 s, median 9.9 s, with the configured lengths), as the pods first queue at 40 req/s or later, where the load, random and precise TTFT p90 cells stay within 79.2-84.8 s, 81.1-83.6 s and 0.24-0.29 s over seeds 1-8";
const WHY_TTFT_BLIND: &str = "client TTFT over drained stages; with the prompts as the server tokenized them (A13) the stages of about 750 requests at 20-30 req/s give TTFT p90 62.0-78.7 s against the published 70.3-86.2 s (35-46 s with the configured 6,000 + 1,200, before A16); the 35 req/s stage (735 requests in 21 s) stays low for random (48.9 s; load 77.2 s; published 88.1-91.5 s, not found why), and 40-60 req/s are 4-15% lower (91.6-101.1 s against 100.9-113.3 s, the gateway's 1,024 in flight bounding both, A12)";
const WHY_WAIT_PRECISE: &str = " times, almost all from the 40 req/s stage on (vLLM's recompute rule; before A16's shared reads 3,098, and 2,357 of those with the configured 6,000 + 1,200-token prompts, 9,416 before the gateway's limit): with the gateway's 1,024 requests in flight (128 per pod) the groups' cached prompts and the output blocks still exceed 19,208 blocks at the peak, where the published run's KV usage peaks at 85-89% per stage (its per-pod chart) and shows no waiting queue; the simulated decode step (client TPOT p50 at 40-60 req/s) is";
const WHY_WAIT: &str = "the published figure's definition: the mean over the EPP's scheduling decisions and the 8 candidate pods of the `WaitingQueueSize` each decision read (vLLM's `num_requests_waiting` as the EPP last scraped it, every 50 ms; GIE v0.5.1 logs its candidates twice per cycle, `scheduler_profile.go` L127, L146, and the report generator averages the pods of every such line, so the published 206,912-209,104 data points are 2 x 8 x the requests the EPP scheduled); simulated the same way at every routing decision (`mean_waiting_routed`)";

fn table1(t: &Tables) -> Vec<Cell> {
    let names = ["precise", "approximate", "load", "random"];
    let mut out = Vec::new();
    for (i, p) in TABLE1.iter().enumerate() {
        let r = t.table1.get(i);
        let s = r.and_then(StagedRun::summary_2025);
        let row = names[i].to_string();
        let mk = |metric, sim: Option<f64>, published: f64, absolute, why: &str| Cell {
            table: 1,
            row: row.clone(),
            metric,
            simulated: sim,
            published,
            absolute,
            note: why.into(),
        };
        let load = if i == 2 { "; the blog prints random's 4,428.7 for load" } else { "" };
        out.push(mk("output tok/s", s.map(|s| s.output_tok_s), p.output_tok_s, false, &format!("{WHY_TOK}{load}")));
        let why_ttft = match i {
            0 => WHY_TTFT,
            1 => WHY_TTFT_APPROX,
            _ => WHY_TTFT_BLIND,
        };
        out.push(mk("TTFT p90 (s)", s.map(|s| s.ttft_p90_s), p.ttft_p90_s, false, why_ttft));
        out.push(mk("TTFT mean (s)", s.map(|s| s.ttft_mean_s), p.ttft_mean_s, false, why_ttft));
        let wait = r.and_then(|r| r.mean_waiting_routed);
        let decisions = r.map(|r| r.requests - r.refused);
        let timed = match (r.and_then(|r| r.mean_waiting), decisions) {
            (Some(w), Some(n)) => format!(
                "; {} decisions, i.e. {} data points as the report counts them; time-weighted over the whole run instead: {w:.3}",
                thousands(n),
                thousands(2 * 8 * n)
            ),
            _ => String::new(),
        };
        let why_wait = match r {
            Some(r) if i == 0 => format!(
                "{WHY_WAIT}{timed}; precise preempts {}{WHY_WAIT_PRECISE} {} against the published run's 54-58 ms (2 x ITL mean)",
                thousands(r.preemptions),
                heavy_tpot_ms(r)
            ),
            _ => format!("{WHY_WAIT}{timed}"),
        };
        out.push(mk("wait queue (mean)", wait, p.wait_queue, p.wait_queue < 1.0, &why_wait));
    }
    out
}

/// The range of a table 1 run's client TPOT p50 over its ladder stages at 40 req/s and above, ms
/// ("n/a" when no such stage ran).
fn heavy_tpot_ms(r: &StagedRun) -> String {
    let heavy: Vec<f64> = r
        .rates
        .iter()
        .zip(&r.stages)
        .filter(|(rate, _)| **rate >= 40.0)
        .filter_map(|(_, s)| s.as_ref().map(|s| s.tpot_p50_s * 1e3))
        .collect();
    if heavy.is_empty() {
        return "n/a".into();
    }
    let lo = heavy.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = heavy.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.1}-{hi:.1} ms")
}

/// A9's load points of the published b2b rows (warmup left out).
pub fn published_points(rows: &[B2bRow]) -> Vec<LoadPoint> {
    rows.iter().filter(|r| !r.warmup).map(|r| (r.ach_qps, r.ttft_p90_s, r.in_tok_s)).collect()
}

/// A9's load points of a simulated b2b run (warmup left out); None if a stage is missing.
pub fn simulated_points(r: &StagedRun) -> Option<Vec<LoadPoint>> {
    Some(r.ladder_by_rate()?.iter().map(|s| (s.achieved_rate, s.ttft_p90_s, s.input_tok_s)).collect())
}

/// A9's load points of published concurrency rows: (conc, TTFT p90, input tok/s) for
/// code-generation (prefill-bound), (conc, TPOT p90, output tok/s) for reasoning (decode-bound).
pub fn published_conc_points(rows: &[ConcRow], decode: bool) -> Vec<LoadPoint> {
    rows.iter()
        .map(|r| if decode { (r.conc, r.tpot_p90_s, r.out_tok_s) } else { (r.conc, r.ttft_p90_s, r.in_tok_s) })
        .collect()
}

/// A9's load points of a simulated level run, as [`published_conc_points`]; None if a level is
/// missing.
pub fn simulated_conc_points(r: &LevelRun, decode: bool) -> Option<Vec<LoadPoint>> {
    r.levels
        .iter()
        .map(|l| {
            l.map(|l| {
                let f = l.figures;
                if decode {
                    (l.conc as f64, l.tpot_p90_s, f.output_tok_s)
                } else {
                    (l.conc as f64, f.ttft_p90_s, f.input_tok_s)
                }
            })
        })
        .collect()
}

fn table2(t: &Tables) -> Vec<Cell> {
    let mut out = Vec::new();
    for row in TABLE2 {
        let name = format!("{} {}", row.workload, row.arm);
        if let Some(needs) = row.needs {
            for (metric, v) in [("knee", row.knee), ("throughput at knee", row.throughput)] {
                out.push(Cell {
                    table: 2,
                    row: name.clone(),
                    metric,
                    simulated: None,
                    published: v,
                    absolute: false,
                    note: format!("not simulated: needs {needs}"),
                });
            }
            continue;
        }
        if row.workload != "b2b-saas" {
            let decode = row.workload == "reasoning";
            let arm = usize::from(row.arm == "k8s service");
            let (runs, rows): (&[LevelRun], &[ConcRow]) = match (decode, arm) {
                (false, 0) => (&t.codegen, &CODEGEN_AFFINITY),
                (false, _) => (&t.codegen, &CODEGEN_SERVICE),
                (true, 0) => (&t.reasoning, &REASONING_RUN_REQ),
                (true, _) => (&t.reasoning, &REASONING_SERVICE),
            };
            let sim: Option<Knee> =
                runs.get(arm).and_then(|r| simulated_conc_points(r, decode)).and_then(|p| knee(&p, false));
            let Some(pubk) = knee(&published_conc_points(rows, decode), false) else { continue };
            let latency = if decode { "client TPOT p90" } else { "client TTFT p90" };
            let note = |by_eye: f64, unit: &str| {
                format!("published: A9 ({latency}) on the published rows; the blog reads {by_eye} {unit} by eye")
            };
            out.push(Cell {
                table: 2,
                row: name.clone(),
                metric: "knee (concurrency)",
                simulated: sim.map(|k| k.load),
                published: pubk.load,
                absolute: false,
                note: note(row.knee, row.knee_unit),
            });
            out.push(Cell {
                table: 2,
                row: name,
                metric: if decode { "output tok/s at knee" } else { "input tok/s at knee" },
                simulated: sim.map(|k| k.throughput),
                published: pubk.throughput,
                absolute: false,
                note: note(row.throughput, row.throughput_unit),
            });
            continue;
        }
        let (arm, rows): (usize, &[B2bRow]) =
            if row.arm == "prefix+token" { (0, &B2B_AFFINITY) } else { (1, &B2B_SERVICE) };
        let sim: Option<Knee> = t.b2b.get(arm).and_then(simulated_points).and_then(|p| knee(&p, true));
        let Some(pubk) = knee(&published_points(rows), true) else { continue };
        let note = |by_eye: f64, unit: &str| {
            format!("published: A9 on the published rows; the blog reads {by_eye} {unit} by eye")
        };
        out.push(Cell {
            table: 2,
            row: name.clone(),
            metric: "knee (QPS)",
            simulated: sim.map(|k| k.load),
            published: pubk.load,
            absolute: false,
            note: note(row.knee, row.knee_unit),
        });
        out.push(Cell {
            table: 2,
            row: name,
            metric: "input tok/s at knee",
            simulated: sim.map(|k| k.throughput),
            published: pubk.throughput,
            absolute: false,
            note: note(row.throughput, row.throughput_unit),
        });
    }
    out
}

fn table3(t: &Tables) -> Vec<Cell> {
    let mut out = Vec::new();
    let arms: [(&str, &[B2bRow], f64); 2] =
        [("llm-d optimized (prefix+token)", &B2B_AFFINITY, 14_941.0), ("k8s service", &B2B_SERVICE, 7_049.0)];
    for (i, (name, rows, peak)) in arms.into_iter().enumerate() {
        let run = t.b2b.get(i);
        let all = run.and_then(StagedRun::all_by_rate);
        let at = all.as_ref().and_then(|v| v.get(T3_RATE60_ROW).copied());
        let p = rows[T3_RATE60_ROW];
        let mk = |metric, sim: Option<f64>, published: f64, note: String| Cell {
            table: 3,
            row: name.to_string(),
            metric,
            simulated: sim,
            published,
            absolute: false,
            note,
        };
        let peak_sim = all.as_ref().map(|v| v.iter().map(|s| s.output_tok_s).fold(f64::NAN, f64::max));
        out.push(mk("peak output tok/s", peak_sim, peak, "largest per-stage output tok/s".into()));
        let row16 = "the 16th stage by achieved rate (the guide's \"rate 60\" row)";
        out.push(mk(
            "req/s @ \"rate 60\"",
            at.map(|s| s.achieved_rate),
            p.ach_qps,
            format!("achieved rate of {row16}"),
        ));
        out.push(mk(
            "TTFT p90 (s) @ \"rate 60\"",
            at.map(|s| s.ttft_p90_s),
            p.ttft_p90_s,
            format!("client TTFT (A8); the guide's server-side cell is {} s (misaligned window)", p.v_ttft_p90_s),
        ));
        out.push(mk(
            "TTFT p50 (s) @ \"rate 60\"",
            at.map(|s| s.ttft_p50_s),
            p.ttft_p50_s,
            "client TTFT p50 (A8)".into(),
        ));
        out.push(mk(
            "E2E p50 (s) @ \"rate 60\"",
            at.map(|s| s.e2e_p50_s),
            p.e2e_p50_s,
            format!("client E2E p50; the guide's \"NTPOT p50\" is the server-side E2E p50 {} s", p.v_e2e_p50_s),
        ));
    }
    out
}

/// Every cell of the three tables, in table order.
pub fn cells(t: &Tables) -> Vec<Cell> {
    let mut v = table1(t);
    v.extend(table2(t));
    v.extend(table3(t));
    v
}
