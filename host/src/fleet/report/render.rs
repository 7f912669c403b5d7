//! The report's Markdown and HTML: tables from the results, prose from the scenarios' values.

use super::*;

/// The built-in scenarios whose values the prose quotes, so editing a scenario file changes the
/// text with the figures (nothing in the prose repeats a number from a scenario by hand).
pub struct Quoted {
    /// `scenarios/multi-tenant.toml` (sections 1-3 and 7).
    pub multi_tenant: Scenario,
    /// `scenarios/llm-d.toml` as section 9 ran it (its request count after `--shrink`).
    pub llmd: Scenario,
    /// `scenarios/rag.toml`.
    pub rag: Scenario,
    /// `scenarios/autoscale.toml`.
    pub autoscale: Scenario,
}

impl Quoted {
    /// The built-in scenarios, for the report of `ex`.
    pub fn new(ex: &Experiments) -> CliResult<Self> {
        let mut llmd = builtin("llm-d")?;
        llmd.workload.requests = ex.engines.llmd_requests_run;
        Ok(Quoted {
            multi_tenant: builtin("multi-tenant")?,
            llmd,
            rag: builtin("rag")?,
            autoscale: builtin("autoscale")?,
        })
    }
}

/// `ns` in seconds, as the prose prints it (`30`, `0.36`).
pub(super) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `ns` in microseconds.
pub(super) fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// A thousandths value (a rate in milli-requests per second, a queue length in thousandths).
fn milli(v: u64) -> f64 {
    v as f64 / 1e3
}

/// Section 5's paragraph: the llm-d shape and what drives the gap, from `scenarios/llm-d.toml`.
pub fn llmd_text(sc: &Scenario) -> String {
    let (w, f) = (&sc.workload, &sc.fleet);
    let suffix = if w.suffix_min_tokens == w.suffix_max_tokens {
        engine::thousands(w.suffix_min_tokens.into())
    } else {
        format!("{}-{}", engine::thousands(w.suffix_min_tokens.into()), engine::thousands(w.suffix_max_tokens.into()))
    };
    let prompt = u64::from(w.prefix_tokens) + u64::from(w.suffix_max_tokens);
    let demand = w.hot_set_blocks() as f64 / f.capacity_blocks as f64;
    // All-miss service time of one request: every prompt token prefilled, the longest output decoded.
    let fifo = sc.fifo();
    let miss_ns = prompt * fifo.t_prefill_ns + u64::from(w.output_max_tokens) * fifo.t_decode_ns;
    format!(
        "{} groups x {} users, {}-token system prompt, {suffix}-token questions, {} pods, cache demand about {}x one pod. \
         The simulator's latency is prefill x {} us + FIFO queueing: compare orderings and ratios, not seconds. The gap \
         is driven by (a) the share of prompt tokens that is a shared prefix ({} of {prompt}), (b) the hot set over one \
         pod's cache ({}x: round-robin thrashes, prefix-aware partitions the groups), and (c) the arrival rate against \
         the fleet's all-miss capacity ({} pods / {} s = {:.0} req/s): above it, cache-blind routers queue without \
         bound while prefix-aware stays far below saturation.",
        w.tenants,
        w.users_per_tenant,
        engine::thousands(w.prefix_tokens.into()),
        f.pods,
        (demand * 10.0).round() / 10.0,
        us(fifo.t_prefill_ns),
        w.prefix_tokens,
        (demand * 10.0).round() / 10.0,
        f.pods,
        secs(miss_ns),
        f.pods as f64 / secs(miss_ns),
    )
}

/// Section 6's paragraph, from `scenarios/rag.toml`.
pub fn rag_text(sc: &Scenario) -> String {
    format!(
        "Each request retrieves {} of its tenant's {} documents. Retrieval order (0) vs sorted by document id (1).",
        sc.workload.rag_per_request, sc.workload.rag_docs
    )
}

/// Section 7's paragraph, from `scenarios/multi-tenant.toml` (the CPU tier runs on its fleet).
pub fn cpu_text(sc: &Scenario) -> String {
    format!(
        "Each pod gets a second LRU tier in CPU memory: blocks evicted from the GPU tier are demoted into it, and a \
         request's prefix hit continues there at {} us per token instead of {} us of prefill. GPU capacity is held at \
         hot/6. The prefix-aware router still matches on the GPU tier only.",
        us(sc.fifo().t_cpu_ns),
        us(sc.fifo().t_prefill_ns)
    )
}

/// Section 8's paragraph, from `scenarios/autoscale.toml`.
pub fn autoscale_text(sc: &Scenario) -> String {
    let (w, f) = (&sc.workload, &sc.fleet);
    let scaler = match f.scale() {
        Some(p) => format!(
            "The fleet starts with {} pods and may grow to {}. Every {} s the scaler looks at the mean queue length of \
             the routable pods: above {} it boots a pod (routable {} s later, cold: empty cache and queue), below {} it \
             drops the newest pod and its cache.",
            p.initial_pods,
            f.pods,
            secs(p.interval_ns),
            milli(p.up_milli.into()),
            secs(p.startup_ns),
            milli(p.down_milli.into()),
        ),
        None => format!("The scenario does not autoscale: {} pods throughout.", f.pods),
    };
    let burst = if w.burst_ms > 0 {
        format!(
            ", {} req/s from {} s to {} s",
            milli(w.burst_rate_milli_per_s),
            milli(w.burst_start_ms),
            milli(w.burst_start_ms + w.burst_ms)
        )
    } else {
        String::new()
    };
    format!(
        "{scaler} Base load {} req/s{burst}. <i>Added pods' traffic vs fair share</i> is 1 when the router spreads \
         requests onto the new pods like round-robin; below 1 the router keeps traffic on the warm pods. Pod-seconds \
         count each pod from its boot decision to its drop (plus the drain of its queue). The rule: docs/MODEL.md, \
         Autoscaling.",
        milli(w.rate_milli_per_s)
    )
}

fn plain(name: &str, value: impl std::fmt::Display) -> String {
    format!("| {name} | {value} |\n")
}

fn llmd_table(ex: &Experiments) -> String {
    let mut o = String::from(
        "| router | simulated hit rate | simulated p90 latency (s) | published TTFT p90 (s) |\n|---|---|---|---|\n",
    );
    for ((label, h, p90, published), (name, _)) in llmd_rows(ex).into_iter().zip(LLMD_PUBLISHED) {
        let _ = writeln!(o, "| {label} | {:.1}% | {p90:.3} | {published} ({name}) |", h * 100.0);
    }
    o
}

fn points_table(pts: &[Point], value_name: &str) -> String {
    let mut o = format!(
        "| {value_name} | router | hit rate | prefill tokens | p50 (s) | p90 (s) | p99 (s) | chased |\n|---|---|---|---|---|---|---|---|\n"
    );
    for p in pts {
        let s = &p.summary;
        let _ = writeln!(
            o,
            "| {} | {} | {:.2}% | {} | {:.3} | {:.3} | {:.3} | {} |",
            p.value,
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.prefill_tokens,
            s.latency_p50.unwrap_or(f64::NAN),
            s.latency_p90.unwrap_or(f64::NAN),
            s.latency_p99.unwrap_or(f64::NAN),
            s.chased_requests
        );
    }
    o
}

/// What ran, in Markdown: the shrink factor and every scenario's request count.
pub fn scale_note(ex: &Experiments) -> String {
    if ex.shrink <= 1 {
        return "Full size: every scenario ran the request count in its file (`--shrink 1`).".into();
    }
    let counts: Vec<String> =
        ex.scenarios.iter().map(|s| format!("{} {} of {}", s.name, s.requests_run, s.requests_in_file)).collect();
    format!(
        "**Shrunk run (`--shrink {k}`):** every scenario ran its request count divided by {k} ({} requests). \
         The headlines, tables and plots below come from these smaller runs and differ from the full-size \
         report (`brokerlab fleet report`).",
        counts.join(", "),
        k = ex.shrink
    )
}

fn runs_table(ex: &Experiments) -> String {
    let mut o = String::from("| scenario | requests in the file | requests run |\n|---|---|---|\n");
    for s in &ex.scenarios {
        let _ = writeln!(o, "| scenarios/{}.toml | {} | {} |", s.name, s.requests_in_file, s.requests_run);
    }
    o
}

/// The Markdown summary.
pub fn render_markdown(ex: &Experiments, q: &Quoted, prov: &Provenance) -> String {
    let mut o = String::from("# brokerlab fleet report\n\n");
    let _ = writeln!(o, "{}\n", scale_note(ex));
    o += &prov.markdown();
    let _ = writeln!(o, "\n**The one number:** {}\n", the_number(ex));
    o += "| headline | value |\n|---|---|\n";
    for (k, v) in headlines(ex) {
        o += &plain(&k, v);
    }
    let _ = writeln!(
        o,
        "\nThe multi-tenant workload: hot set {} blocks, {} distinct blocks in all (\"fit\").\n",
        ex.hot_set_blocks, ex.fit_blocks
    );
    o += "## llm-d benchmark shape\n\n";
    o += &llmd_table(ex);
    let _ = writeln!(
        o,
        "\nThe simulator has no GPU model: latency is prefill tokens x {} us plus FIFO queueing, so absolute seconds are not comparable; what transfers is the ordering and which parameters open the gap (see below).\n",
        us(q.llmd.fifo().t_prefill_ns)
    );
    o += "## Stale index\n\n| k | gain kept | chased requests | phantom blocks |\n|---|---|---|---|\n";
    for (p, (k, g)) in ex.stale.iter().zip(ex.stale_gain_kept()) {
        let _ =
            writeln!(o, "| {k} | {:.1}% | {} | {} |", g * 100.0, p.summary.chased_requests, p.summary.phantom_blocks);
    }
    o += "\n## RAG documents: retrieval order (0) vs sorted by id (1)\n\n";
    o += &points_table(&ex.rag, "sorted");
    o += "\n## CPU tier (GPU capacity hot/6; value = CPU-tier blocks per pod)\n\n";
    o += &cpu_table(ex);
    o += "\n## Autoscaling (scenarios/autoscale.toml)\n\n";
    o += &autoscale_table(ex, q.autoscale.fleet.pods);
    o += "\n## The batched engine: llm-d shape and conversation trace, beside the FIFO engine\n\n";
    o += &engines_intro(ex);
    o += "\n\n";
    o += &engine::table(&ex.engines);
    for p in engine::prose(&ex.engines, &q.llmd) {
        let _ = write!(o, "\n{p}\n");
    }
    o += "\n## What the cost model says, and how wrong it is\n\n";
    o += &super::cost::markdown();
    o += "\n";
    o += &crate::fleet::report::mooncake::markdown(&ex.mooncake);
    o += "\n";
    o += &crate::fleet::report::llmd::markdown(&ex.llmd_bench);
    o += &super::published::section_markdown(&ex.published);
    o += "\n## Capacity sweep (stable prefix first)\n\n";
    o += &points_table(&ex.capacity, "capacity");
    o += "\n## Capacity sweep (timestamp first)\n\n";
    o += &points_table(&ex.timestamp_first, "capacity");
    o += "\n## Alpha\n\n";
    o += &points_table(&ex.alpha, "alpha");
    o += "\n## Parameters actually run\n\n";
    o += &runs_table(ex);
    o += "\nEverything else as in the scenario files (`scenarios/`); the experiments vary capacity, layout, stale delay, alpha, document order, CPU tier and autoscaling as each section says.\n";
    o
}

fn autoscale_table(ex: &Experiments, pods: usize) -> String {
    let mut o = String::from(
        "| run | pod-seconds | mean pods | out / in | max pods | added pods' traffic vs fair share | hit rate | p90 (s) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (i, p) in ex.autoscale.iter().enumerate() {
        let s = &p.summary;
        let (cost, mean, moves, max, ratio) = match &s.autoscale {
            Some(a) => (
                a.pod_seconds,
                a.mean_pods.unwrap_or(f64::NAN),
                format!("{} / {}", a.scale_outs, a.scale_ins),
                a.max_active_pods,
                a.new_pod_traffic_ratio.map_or("n/a".into(), |r| format!("{r:.2}")),
            ),
            None => (s.pods as f64 * s.makespan_s, s.pods as f64, "-".into(), s.pods as u32, "-".into()),
        };
        let _ = writeln!(
            o,
            "| {} | {cost:.0} | {mean:.2} | {moves} | {max} | {ratio} | {:.1}% | {:.3} |",
            autoscale_label(i, pods, false),
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.latency_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

fn cpu_table(ex: &Experiments) -> String {
    let mut o = String::from(
        "| CPU blocks | router | GPU hit | CPU hit | prefill tokens | p90 (s) |\n|---|---|---|---|---|---|\n",
    );
    for p in &ex.cpu_tier {
        let s = &p.summary;
        let _ = writeln!(
            o,
            "| {} | {} | {:.1}% | {:.1}% | {} | {:.3} |",
            p.value,
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.cpu_hit_rate.unwrap_or(0.0) * 100.0,
            s.prefill_tokens,
            s.latency_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

pub(super) fn md_table_to_html(md: &str) -> String {
    let mut o = String::from("<table>");
    for (i, line) in md.lines().filter(|l| l.starts_with('|')).enumerate() {
        if i == 1 {
            continue;
        }
        let tag = if i == 0 { "th" } else { "td" };
        o += "<tr>";
        for cell in line.trim_matches('|').split('|') {
            let _ = write!(o, "<{tag}>{}</{tag}>", html_escape(cell.trim()));
        }
        o += "</tr>";
    }
    o + "</table>"
}

pub(super) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn figures(svgs: &[(String, String, String)], section: &str) -> String {
    let mut o = String::new();
    for (sec, stem, svg) in svgs {
        if sec == section {
            let _ = write!(
                o,
                "<figure>{svg}<figcaption><a href=\"{stem}.svg\">{stem}.svg</a> / <a href=\"{stem}.png\">{stem}.png</a></figcaption></figure>"
            );
        }
    }
    o
}

/// Markdown emphasis and code of [`scale_note`] as HTML.
pub(super) fn md_inline_to_html(md: &str) -> String {
    let mut o = String::new();
    let mut code = false;
    for (i, part) in md.split("**").enumerate() {
        if i > 0 {
            o += if i % 2 == 1 { "<b>" } else { "</b>" };
        }
        for (j, piece) in part.split('`').enumerate() {
            if j > 0 {
                o += if code { "</code>" } else { "<code>" };
                code = !code;
            }
            o += &html_escape(piece);
        }
    }
    o
}

/// Section 10 (the Mooncake local vs global cache) as HTML.
fn mooncake_html(ex: &Experiments) -> String {
    use crate::fleet::report::mooncake as mc;
    let mut o = String::new();
    let _ = write!(o, "<h2>10. {}</h2><p>{}</p>", html_escape(mc::TITLE), md_inline_to_html(&mc::intro()));
    o += &md_table_to_html(&mc::ratio_table(&ex.mooncake));
    o += &md_table_to_html(&mc::runs_table(&ex.mooncake));
    let _ = write!(o, "<p>{}</p><p>{}</p>", md_inline_to_html(&mc::verdict(&ex.mooncake)), md_inline_to_html(mc::WHY));
    o
}

/// Section 11 (the llm-d benchmark reproduced) as HTML, with its scenario file.
fn llmd_bench_html(ex: &Experiments) -> String {
    use crate::fleet::report::llmd::{self, Block};
    let mut o = String::new();
    let _ = write!(o, "<h2>11. {}</h2>", html_escape(llmd::TITLE));
    for b in llmd::blocks(&ex.llmd_bench) {
        match b {
            Block::Para(p) => {
                let _ = write!(o, "<p>{}</p>", md_inline_to_html(&p));
            }
            Block::Table(t) => o += &md_table_to_html(&t),
        }
    }
    let _ = write!(o, "<h3>{}</h3><pre>{}</pre>", html_escape(llmd::SCENARIO_NAME), html_escape(llmd::SCENARIO_TEXT));
    o
}

/// The built-in scenarios as run (the request counts after `--shrink`), as HTML.
fn parameters_html(ex: &Experiments) -> String {
    let mut o = String::from("<h2>Parameters</h2>");
    for ((name, text), run) in BUILTIN.iter().zip(&ex.scenarios) {
        let ran = if run.requests_run == run.requests_in_file {
            format!("Ran as written: {} requests.", run.requests_run)
        } else {
            format!(
                "Ran <b>{} requests</b>, not the {} below (<code>--shrink {}</code>).",
                run.requests_run, run.requests_in_file, ex.shrink
            )
        };
        let _ = write!(o, "<h3>scenarios/{name}.toml</h3><p>{ran}</p><pre>{}</pre>", html_escape(text));
    }
    o
}

pub(super) fn render_html(
    ex: &Experiments,
    q: &Quoted,
    svgs: &[(String, String, String)],
    prov: &Provenance,
) -> String {
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>brokerlab fleet report</title><style>\
         body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}\
         td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}pre{background:#f7f7f7;padding:8px;overflow:auto}\
         .num{font-size:1.3em;background:#fffbe6;padding:12px;border-left:4px solid #e69f00}\
         .warn{background:#fdecea;padding:12px;border-left:4px solid #d55e00}.scale{color:#555}\
         table.prov{font-size:.8em;color:#444;margin:.5em 0}table.prov th,table.prov td{border:none;padding:1px 8px 1px 0}\
         table.prov th{background:none;font-weight:normal;color:#777}</style></head><body>\
         <h1>brokerlab fleet report</h1>",
    );
    let class = if ex.shrink > 1 { "warn" } else { "scale" };
    let _ = write!(o, "<p class=\"{class}\">{}</p>", md_inline_to_html(&scale_note(ex)));
    o += &prov.html();
    let _ = write!(o, "<p class=\"num\"><b>The one number:</b> {}</p>", html_escape(&the_number(ex)));
    let mut head = String::from("| headline | value |\n|---|---|\n");
    for (k, v) in headlines(ex) {
        head += &plain(&k, v);
    }
    o += &md_table_to_html(&head);
    let sections = [
        (
            "capacity",
            "1. Capacity: where the routers part",
            "Hold the workload fixed and shrink each pod's cache from \"everything fits on every pod\" to \"each pod holds one-sixth of the hot set\".",
        ),
        (
            "layout",
            "2. Prompt layout: a timestamp on line one",
            "The same sweep with a per-request timestamp and user id before the shared prefix: the first block differs, so every chained key differs.",
        ),
        (
            "stale",
            "3. Stale index",
            "Evictions reach the router's index k requests late. The router then believes in blocks that are gone: a miss, never an error.",
        ),
        (
            "alpha",
            "4. Load penalty alpha",
            "score = match - alpha x queue length. Too low: hits are chased into queues; too high: round-robin again.",
        ),
    ];
    for (key, title, text) in sections {
        let _ = write!(o, "<h2>{title}</h2><p>{text}</p>");
        o += &figures(svgs, key);
        if key == "stale" {
            let mut t = String::from("| k | gain kept | chased requests | phantom blocks |\n|---|---|---|---|\n");
            for (p, (k, g)) in ex.stale.iter().zip(ex.stale_gain_kept()) {
                let _ = writeln!(
                    t,
                    "| {k} | {:.1}% | {} | {} |",
                    g * 100.0,
                    p.summary.chased_requests,
                    p.summary.phantom_blocks
                );
            }
            o += &md_table_to_html(&t);
        }
    }
    let _ = write!(o, "<h2>5. The llm-d benchmark's shape</h2><p>{}</p>", llmd_text(&q.llmd));
    o += &md_table_to_html(&llmd_table(ex));
    o += &figures(svgs, "llmd");
    let _ = write!(o, "<h2>6. RAG-shaped tenants</h2><p>{}</p>", rag_text(&q.rag));
    o += &figures(svgs, "rag");
    o += &md_table_to_html(&points_table(&ex.rag, "sorted"));
    let _ = write!(o, "<h2>7. A CPU tier</h2><p>{}</p>", cpu_text(&q.multi_tenant));
    o += &figures(svgs, "cpu");
    o += &md_table_to_html(&cpu_table(ex));
    let _ =
        write!(o, "<h2>8. Autoscaling: does the router fight the scaler?</h2><p>{}</p>", autoscale_text(&q.autoscale));
    o += &figures(svgs, "autoscale");
    o += &md_table_to_html(&autoscale_table(ex, q.autoscale.fleet.pods));
    let _ = write!(
        o,
        "<h2>9. The batched engine: llm-d shape and conversation trace</h2><p>{}</p>",
        md_inline_to_html(&engines_intro(ex))
    );
    o += &md_table_to_html(&engine::table(&ex.engines));
    for p in engine::prose(&ex.engines, &q.llmd) {
        let _ = write!(o, "<p>{}</p>", md_inline_to_html(&p));
    }
    o += &super::cost::html();
    o += &mooncake_html(ex);
    o += &llmd_bench_html(ex);
    o += &super::published::section_html(&ex.published, svgs);
    o += &parameters_html(ex);
    o += "<p>Model: docs/MODEL.md. Latencies are exact integer-ns simulations reported in seconds; the latency model is approximate by design (no decode batching, no GPU model).</p></body></html>";
    o
}

/// Section 9's first paragraph (Markdown).
fn engines_intro(ex: &Experiments) -> String {
    let c = &ex.engines;
    let e = engine::engine_config();
    let mut o = format!(
        "The same runs under both engine models: the FIFO engine (prefill tokens x {} us, FIFO queueing, no decode) \
         and the batched engine (vLLM-style continuous batching, docs/MODEL.md \"The batched engine\": profile `{}`, \
         max_num_seqs {}, max_num_batched_tokens {}). Workloads: `scenarios/llm-d.toml` ({} requests) and the \
         Mooncake conversation trace (`traces/conversation_trace.jsonl.zst`, built in; {} of its {} requests) on {} \
         pods x {} blocks. FIFO's p90 latency is finish - arrival; the batched engine reports TTFT and E2E apart. \
         Output tok/s = output tokens / makespan; KV utilization = pinned blocks / capacity, time-weighted mean of \
         the pods and the highest pod's peak.",
        c.runs.first().map_or(f64::NAN, |r| r.fifo.t_prefill_ns as f64 / 1e3),
        e.profile.name(),
        e.max_num_seqs,
        e.max_num_batched_tokens,
        engine::thousands(c.llmd_requests_run),
        engine::thousands(c.conversation_requests_run),
        engine::thousands(c.conversation_requests_in_trace),
        engine::CONVERSATION_PODS,
        engine::thousands(engine::CONVERSATION_CAPACITY as u64),
    );
    if let Some(n) = engine::cut_note(c) {
        let _ = write!(o, " {n}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::scenario::builtin::BUILTIN;

    /// The built-in scenario `name` with `edits` (old, new) applied to its file's text.
    fn edited(name: &str, edits: &[(&str, &str)]) -> Scenario {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name).unwrap();
        let mut text = text.to_string();
        for (old, new) in edits {
            assert!(text.contains(old), "{name}: {old}");
            text = text.replacen(old, new, 1);
        }
        Scenario::parse(&text, name, name).unwrap()
    }

    /// The prose quotes the scenario file, not a copy of it: edit the autoscale scenario and the
    /// text and the labels follow.
    #[test]
    fn autoscale_prose_follows_the_scenario() {
        let sc = edited("autoscale", &[]);
        let t = autoscale_text(&sc);
        assert!(t.starts_with("The fleet starts with 2 pods and may grow to 8. Every 10 s"), "{t}");
        assert!(t.contains("above 2 it boots a pod (routable 30 s later"), "{t}");
        assert!(t.contains("below 0.5 it drops") && t.contains("Base load 10 req/s, 40 req/s from 60 s to 240 s."));
        assert_eq!(autoscale_label(7, sc.fleet.pods, false), "prefix-aware alpha=1, fixed 8 pods");

        let sc = edited(
            "autoscale",
            &[
                ("pods = 8", "pods = 6"),
                ("min = 2", "min = 3"),
                ("interval_s = 10.0", "interval_s = 5.0"),
                ("up_queue = 2.0", "up_queue = 3.5"),
                ("down_queue = 0.5", "down_queue = 0.25"),
                ("startup_s = 30.0", "startup_s = 45.0"),
                ("rate_per_s = 10.0", "rate_per_s = 12.0"),
                ("start_s = 60.0", "start_s = 30.0"),
            ],
        );
        let t = autoscale_text(&sc);
        assert!(t.starts_with("The fleet starts with 3 pods and may grow to 6. Every 5 s"), "{t}");
        assert!(t.contains("above 3.5 it boots a pod (routable 45 s later"), "{t}");
        assert!(t.contains("below 0.25 it drops") && t.contains("Base load 12 req/s, 40 req/s from 30 s to 210 s."));
        assert_eq!(autoscale_label(7, sc.fleet.pods, false), "prefix-aware alpha=1, fixed 6 pods");
        assert_eq!(autoscale_label(3, sc.fleet.pods, true), "PA alpha=1");
    }

    /// The same for the llm-d, RAG and CPU-tier paragraphs.
    #[test]
    fn other_prose_follows_the_scenarios() {
        let t = llmd_text(&edited("llm-d", &[]));
        assert!(t.starts_with("150 groups x 5 users, 6,000-token system prompt, 1,200-token questions, 8 pods"), "{t}");
        assert!(t.contains("(6000 of 7200)") && t.contains("(8 pods / 0.36 s = 22 req/s)"), "{t}");
        let t =
            llmd_text(&edited("llm-d", &[("pods = 8", "pods = 4"), ("t_prefill_ns = 50000", "t_prefill_ns = 25000")]));
        assert!(t.contains("prefill x 25 us") && t.contains("(4 pods / 0.18 s = 22 req/s)"), "{t}");
        let t = rag_text(&edited("rag", &[("per_request = 4", "per_request = 3")]));
        assert!(t.starts_with("Each request retrieves 3 of its tenant's 24 documents."), "{t}");
        let mt = edited("multi-tenant", &[]);
        assert!(cpu_text(&mt).contains("at 5 us per token instead of 50 us of prefill"));
    }
}
