//! The section as Markdown tables and prose, and one chart per table.

use std::fmt::Write as _;

use super::cells::{B2B_SOURCE, CONC_SOURCE, TABLE1_SOURCE, TABLE2_SOURCE, TABLE3_SOURCE};
use super::compare::{Cell, cells, median_error};
use super::run::Tables;
use crate::fleet::cli::compare::page;
use crate::plot::{Chart, Series};

/// Section title.
pub const TITLE: &str = "The published tables: simulated, published, error per cell";

/// The command that runs the tables at full size (README's table).
pub const FULL_COMMAND: &str = "cargo run --release -p brokerlab -- fleet tables --out out/tables";

/// A value as printed: thousands with one decimal, small values with three.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v.abs() >= 100.0 {
        let s = format!("{:.1}", v.abs());
        let (int, frac) = s.split_once('.').unwrap_or((&s, "0"));
        let mut g = String::new();
        for (i, ch) in int.chars().enumerate() {
            if i > 0 && (int.len() - i) % 3 == 0 {
                g.push(',');
            }
            g.push(ch);
        }
        format!("{}{g}.{frac}", if v < 0.0 { "-" } else { "" })
    } else {
        format!("{v:.3}")
    }
}

/// A cell's error as printed.
pub fn err(c: &Cell) -> String {
    match c.error() {
        None => "-".into(),
        Some(e) if c.absolute => format!("{e:+.1} (abs)"),
        Some(e) => format!("{:+.1}%", e * 100.0),
    }
}

/// The Markdown table of `table`'s cells (with the note column when `notes`).
pub fn cell_table(all: &[Cell], table: u8, notes: bool) -> String {
    let mut o = String::from("| cell | simulated | published | error |");
    o += if notes { " note |\n|---|---:|---:|---:|---|\n" } else { "\n|---|---:|---:|---:|\n" };
    for c in all.iter().filter(|c| c.table == table) {
        let sim = c.simulated.map_or_else(|| "not simulated".into(), num);
        let _ = write!(o, "| {} {} | {sim} | {} | {} |", c.row, c.metric, num(c.published), err(c));
        if notes {
            let flag = if c.within_25() == Some(false) || (c.absolute && c.simulated.is_some()) { "off: " } else { "" };
            let _ = write!(o, " {flag}{} |", c.note);
        }
        o.push('\n');
    }
    o
}

/// "median |error| X over N relative cells (M within 25%)" for `table` (0: all).
pub fn median_line(all: &[Cell], table: u8) -> String {
    let sel: Vec<Cell> = all.iter().filter(|c| table == 0 || c.table == table).cloned().collect();
    let rel: Vec<&Cell> = sel.iter().filter(|c| !c.absolute && c.simulated.is_some()).collect();
    let within = rel.iter().filter(|c| c.within_25() == Some(true)).count();
    let not_sim = sel.iter().filter(|c| c.simulated.is_none()).count();
    let med = median_error(&sel).map_or("n/a".into(), |m| format!("{:.1}%", m * 100.0));
    format!(
        "median |error| {med} over {} relative cells ({within} within 25%); {} of {} cells simulated",
        rel.len(),
        sel.len() - not_sim,
        sel.len()
    )
}

/// What the section ran.
pub fn ran(t: &Tables) -> String {
    let scale = if t.stage_divisor == 1 {
        "at full size (every stage as published)".to_string()
    } else {
        format!(
            "with every stage 1/{} as long as published (fewer requests per stage, so the cells are not the full-size ones; `{FULL_COMMAND}` runs them as published, as the README's table does)",
            t.stage_divisor
        )
    };
    let reqs = |v: &[super::run::StagedRun]| v.iter().map(|r| r.requests.to_string()).collect::<Vec<_>>().join(" / ");
    let refused = t.table1.iter().map(|r| r.refused.to_string()).collect::<Vec<_>>().join(" / ");
    format!(
        "Ran {scale}: table 1 on `scenarios/llm-d-ramp.toml` with the engine of `scenarios/sticky-b2b-saas.toml` (one step cost for the three tables: the physics profile qwen3-32b-h100-tp2, S = 1024, M = 8192) behind the 2025 gateway's limit of 1,024 requests in flight (A12: a request sent while 1,024 are in flight fails at once; {} requests sent per scheduler, of which {} refused), its prompts 6,315 + 1,265 tokens, the workload file's 6,000 + 1,200 random token ids as the server tokenized their decoded text (A13: inference-perf v0.2.0's generator), 938 counted output tokens per successful request (A1), tables 2 and 3 on `scenarios/sticky-b2b-saas.toml` ({} requests per arm), seed 13, batched engine. Figures computed per stage the inference-perf way (total time = latest end - earliest send; linear percentiles) and, for table 1, aggregated as the 2025 report generator did (rows by requested rate, mean of tok/s over rows, success-weighted TTFT; the wait queue as its EPP logged it: the waiting count each routing decision read, mean over decisions and pods); each request's stage as the load generator ran it (inference-perf's drained stages, interval and per-stage prompt order, docs/MODEL.md \"The load generator\"). Schedulers: precise = llm-d's precise-prefix 3 / kv-cache 2 / queue 2; approximate = prefix 1 / kv-cache 1 / queue 1 with the benchmark's approximate index as GIE v0.5.1 ran it (the first 256 blocks of 64 bytes = 168 16-token keys per prompt at 6.12 bytes per token, LRU 31,250 blocks = 20,420 keys per pod); load = queue 1 + kv-cache 1 (llm-d-load); the queue and kv-cache scorers read vLLM's waiting count and KV usage as GIE's EPP does (published at the end of a pod's last step that emitted a token, scraped every 50 ms: the b2b-saas engine's `metrics_scrape_ms`); random = a seeded uniform pick per request; the Kubernetes Service of tables 2-3 = the same random pick (A6). vLLM's full-sequence admission gate (`reserve_full_isl`) on for tables 2 and 3, off for table 1 (A14: the 2026 runs' vLLM is >= v0.19.0, the 2025 run's predates it). {} Assumptions A1-A16 of docs/PUBLISHED.md. Table 2's code-generation and reasoning rows: `scenarios/sticky-code-generation.toml` and `scenarios/sticky-reasoning.toml` at every published concurrency level (conversations = seed = concurrency; {}), each level a separate run on a cold fleet, conversation replay behind the closed-loop load generator with generated tokens cached (docs/MODEL.md \"Conversation replay\"); arms prefix+token (code-generation) and run-req (reasoning) from their router configs, the Kubernetes Service the random pick.",
        reqs(&t.table1),
        refused,
        reqs(&t.b2b),
        match &t.shared_kv_read {
            Some(f) => format!(
                "Decode steps read a KV block several running requests of a pod hold at {f} of a full read for every holder after the first, in every run of the three tables (A16: an empirical factor fitted on the precise guide's 2026 run, not on these tables)."
            ),
            None => "Decode steps read every request's whole context at full price (the shared-prefix read factor off; A16 runs 0.45).".to_string(),
        },
        if t.conversation_divisor == 1 {
            "6 and 3 requests per slot as published".to_string()
        } else {
            {
                let per = |n: u64| (n / t.conversation_divisor).max(1);
                format!(
                    "{} and {} requests per slot, the published 6 and 3 divided by {} (at least 1; not the full-size cells)",
                    per(super::run::CODEGEN_PER_SLOT),
                    per(super::run::REASONING_PER_SLOT),
                    t.conversation_divisor
                )
            }
        }
    )
}

/// The section as Markdown (heading level 3 for each table).
pub fn markdown(t: &Tables) -> String {
    let all = cells(t);
    let mut o = format!("{}\n\n", ran(t));
    let heads = [
        (1, "Table 1: llm-d \"KV-Cache Wins You Can See\" (2025)", TABLE1_SOURCE.cite()),
        (
            2,
            "Table 2: \"Sticky Until Saturated\" knees (2026, knee rule A9)",
            format!("{}; rows {}; {}", TABLE2_SOURCE.cite(), B2B_SOURCE.cite(), CONC_SOURCE.cite()),
        ),
        (
            3,
            "Table 3: optimized baseline (the Sticky b2b-saas run)",
            format!("{}; rows {}", TABLE3_SOURCE.cite(), B2B_SOURCE.cite()),
        ),
    ];
    for (n, title, src) in heads {
        let _ = write!(
            o,
            "### {title}\n\nPublished: {src}.\n\n{}\n{}.\n\n",
            cell_table(&all, n, true),
            median_line(&all, n)
        );
    }
    let _ = writeln!(o, "All three tables: {}.", median_line(&all, 0));
    o
}

/// A metric's short name on a chart axis ("TTFT p90 (s) @ ..." -> "TTFT p90").
fn short(metric: &str) -> String {
    let m = metric.split(" (").next().unwrap_or(metric);
    m.split(" @")
        .next()
        .unwrap_or(m)
        .replace("output tok/s", "out tok/s")
        .replace("input tok/s at knee", "in tok/s at knee")
}

/// One chart per table: grouped bars of log10(simulated / published), one group per metric, one
/// colour per row (router or arm); 0 = exact, +-0.1 is about +-25%.
pub fn charts(t: &Tables) -> Vec<(String, Chart)> {
    let all = cells(t);
    (1..=3u8)
        .map(|n| {
            let sel: Vec<&Cell> = all.iter().filter(|c| c.table == n && c.simulated.is_some()).collect();
            let mut metrics: Vec<String> = Vec::new();
            let mut rows: Vec<String> = Vec::new();
            for c in &sel {
                if !metrics.contains(&short(c.metric)) {
                    metrics.push(short(c.metric));
                }
                if !rows.contains(&c.row) {
                    rows.push(c.row.clone());
                }
            }
            let series = rows
                .iter()
                .map(|row| {
                    let pts = sel
                        .iter()
                        .filter(|c| &c.row == row)
                        .map(|c| {
                            let x = metrics.iter().position(|m| *m == short(c.metric)).unwrap_or(0) as f64;
                            (x, c.simulated.map_or(f64::NAN, |s| (s / c.published).log10()))
                        })
                        .collect();
                    Series::new(row.clone(), pts)
                })
                .collect();
            let chart = Chart {
                title: format!("table {n}: simulated vs published"),
                x_label: "published cell".into(),
                y_label: "log10(simulated / published)".into(),
                series,
                bars: true,
                x_categories: metrics,
                notes: vec![
                    "0 = exact; +-0.1 = about +-25%".into(),
                    median_error(&all.iter().filter(|c| c.table == n).cloned().collect::<Vec<_>>())
                        .map_or("median |error| n/a".into(), |m| format!("median |error| {:.0}%", m * 100.0)),
                ],
                ..Chart::default()
            };
            (format!("published_table{n}"), chart)
        })
        .collect()
}

/// The section of `fleet report` as page blocks (heading first, its number 12); `svgs` are the
/// report's (section, stem, svg) charts. One source for the Markdown and the HTML page.
pub fn page_blocks(t: &Tables, svgs: &[(String, String, String)]) -> Vec<page::Block> {
    let mut v = vec![page::Block::Heading(format!("12. {TITLE}"))];
    let md = markdown(t);
    let mut table = String::new();
    for line in md.lines().chain(std::iter::once("")) {
        if line.starts_with('|') {
            table += line;
            table.push('\n');
            continue;
        }
        if !table.is_empty() {
            v.push(page::table_from_md(&std::mem::take(&mut table)));
        }
        if let Some(h) = line.strip_prefix("### ") {
            v.push(page::Block::Sub(h.into()));
        } else if !line.is_empty() {
            v.push(page::Block::Para(line.into()));
        }
    }
    for (_, stem, svg) in svgs.iter().filter(|s| s.0 == SECTION) {
        v.push(page::Block::Figure(stem.clone(), svg.clone()));
    }
    v
}

/// The report's section key of the charts.
pub const SECTION: &str = "published";

/// [`charts`] as the report's (section, stem, chart).
pub fn report_charts(t: &Tables) -> Vec<(&'static str, String, Chart)> {
    charts(t).into_iter().map(|(stem, c)| (SECTION, stem, c)).collect()
}
