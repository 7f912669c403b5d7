//! The report's Markdown and HTML: tables from the results, prose from the scenarios' values.

use super::*;
use crate::fleet::cli::compare::page::{self, Block};

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
        "{scaler} Base load {} req/s{burst}. **Added pods' traffic vs fair share** is 1 when the router spreads \
         requests onto the new pods like round-robin; below 1 the router keeps traffic on the warm pods. Pod-seconds \
         count each pod from its boot decision to its drop (plus the drain of its queue). The rule: docs/MODEL.md, \
         Autoscaling.",
        milli(w.rate_milli_per_s)
    )
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

/// `n` with thousands separators.
fn th(n: u64) -> String {
    engine::thousands(n)
}

/// A swept value: whole numbers with separators (capacities), fractions as they are (alphas).
fn value(v: f64) -> String {
    if v.fract() == 0.0 && (0.0..1e15).contains(&v) { th(v as u64) } else { v.to_string() }
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
            value(p.value),
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            th(s.prefill_tokens),
            s.latency_p50.unwrap_or(f64::NAN),
            s.latency_p90.unwrap_or(f64::NAN),
            s.latency_p99.unwrap_or(f64::NAN),
            th(s.chased_requests)
        );
    }
    o
}

/// What ran, in Markdown: the shrink factor, every scenario's request count, and the parts of
/// the report that run less than their file even at full size (section 11).
pub fn scale_note(ex: &Experiments) -> String {
    let b = &ex.llmd_bench;
    let eleven = format!(
        "Section 11 runs `scenarios/llm-d-ramp.toml` with every stage 1/{} of its published duration ({} requests) and \
         the conversation trace's first {} of {} requests; the full ramp is `brokerlab fleet run scenarios/llm-d-ramp.toml \
         --router NAME`. Section 10 always replays the full Mooncake traces.",
        b.stage_divisor,
        th(b.ramp_requests),
        th(b.trace_requests),
        th(b.trace_requests_in_file),
    );
    if ex.shrink <= 1 {
        return format!("Full size (`--shrink 1`): sections 1-9 ran the request count in each scenario file. {eleven}");
    }
    let counts: Vec<String> = ex
        .scenarios
        .iter()
        .map(|s| format!("{} {} of {}", s.name, th(s.requests_run), th(s.requests_in_file)))
        .collect();
    format!(
        "**Shrunk run (`--shrink {k}`):** sections 1-9 ran each scenario's request count divided by {k} ({} requests). \
         {eleven} The headlines, tables and plots below come from these smaller runs and differ from the full-size \
         report (`brokerlab fleet report`).",
        counts.join(", "),
        k = ex.shrink
    )
}

fn runs_table(ex: &Experiments) -> String {
    let mut o = String::from("| scenario | requests in the file | requests run |\n|---|---|---|\n");
    for s in &ex.scenarios {
        let _ = writeln!(o, "| scenarios/{}.toml | {} | {} |", s.name, th(s.requests_in_file), th(s.requests_run));
    }
    let b = &ex.llmd_bench;
    let _ = writeln!(
        o,
        "| scenarios/llm-d-ramp.toml (section 11, stages 1/{}) | as published | {} |",
        b.stage_divisor,
        th(b.ramp_requests)
    );
    let _ = writeln!(
        o,
        "| {} (section 16) | {} | {} |",
        super::pools::SCENARIO_NAME,
        th(ex.pools.requests_in_file),
        th(ex.pools.requests)
    );
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
            "| {} | {} | {mean:.2} | {moves} | {max} | {ratio} | {:.1}% | {:.3} |",
            autoscale_label(i, pods, false),
            th(cost.round() as u64),
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
            th(p.value as u64),
            s.router,
            s.hit_rate.unwrap_or(0.0) * 100.0,
            s.cpu_hit_rate.unwrap_or(0.0) * 100.0,
            th(s.prefill_tokens),
            s.latency_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

fn stale_table(ex: &Experiments) -> String {
    let mut t = String::from("| k | gain kept | chased requests | phantom blocks |\n|---|---|---|---|\n");
    for (p, (k, g)) in ex.stale.iter().zip(ex.stale_gain_kept()) {
        let _ = writeln!(
            t,
            "| {k} | {:.1}% | {} | {} |",
            g * 100.0,
            th(p.summary.chased_requests),
            th(p.summary.phantom_blocks)
        );
    }
    t
}

/// Section 4's caption, read from the data: where prefix-aware's p90 is lowest, and what the
/// ends of the sweep do against the cache-blind references.
pub fn alpha_text(ex: &Experiments) -> String {
    let flat = |r: RouterKind| {
        ex.alpha.iter().find(|p| p.summary.router == r).and_then(|p| p.summary.latency_p90).unwrap_or(f64::NAN)
    };
    alpha_caption(&ex.alpha_p90(), flat(RouterKind::RoundRobin), flat(RouterKind::LeastLoaded))
}

/// [`alpha_text`] from prefix-aware's (alpha, p90 s) in ascending alpha and the references' p90.
/// A claim about either end is made only when the data shows it (more than 5% above the best).
pub fn alpha_caption(pa: &[(f64, f64)], rr: f64, ll: f64) -> String {
    let best = pa.iter().copied().fold((f64::NAN, f64::INFINITY), |b, (a, p)| if p < b.1 { (a, p) } else { b });
    let (Some(&(lo_a, lo)), Some(&(hi_a, hi)), (best_a, best)) = (pa.first(), pa.last(), best) else {
        return "score = match - alpha x queue length.".into();
    };
    let end = |a: f64, p: f64, why: &str| {
        if p > best * 1.05 {
            format!("at alpha = {a} it is {p:.3} s, {:.1}x the best ({why})", p / best)
        } else {
            format!("at alpha = {a} it is {p:.3} s, within 5% of the best")
        }
    };
    let blind = rr.min(ll);
    let vs_blind = if hi < blind * 0.95 {
        format!(", still {:.1}x below the better cache-blind router's {blind:.3} s", blind / hi)
    } else {
        format!(", as slow as a cache-blind router ({blind:.3} s)")
    };
    format!(
        "score = match - alpha x queue length. Prefix-aware's p90 is lowest at alpha = {best_a} ({best:.3} s); {}; \
         {}{vs_blind}. Round-robin ({rr:.3} s) and least-loaded ({ll:.3} s) ignore alpha: flat references.",
        end(lo_a, lo, "hits are chased into queues"),
        end(hi_a, hi, "load outweighs the match"),
    )
}

/// Figures of `section` as blocks.
fn figures(svgs: &[(String, String, String)], section: &str) -> Vec<Block> {
    svgs.iter()
        .filter(|(sec, _, _)| sec == section)
        .map(|(_, stem, svg)| Block::Figure(stem.clone(), svg.clone()))
        .collect()
}

/// A cost-check or other Markdown body (paragraphs, `|` tables, "Notes:" lists) as blocks.
fn md_body(md: &str) -> Vec<Block> {
    let mut v = Vec::new();
    for block in md.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        if block.starts_with('|') {
            v.push(page::table_from_md(block));
        } else if let Some(rest) = block.strip_prefix("Notes:") {
            v.push(Block::Para("Notes:".into()));
            v.push(Block::List(rest.lines().filter_map(|l| l.strip_prefix("- ")).map(String::from).collect()));
        } else {
            v.push(Block::Para(block.replace('\n', " ")));
        }
    }
    v
}

/// Everything the report's pages need besides the experiments.
pub struct PageInputs<'a> {
    /// The scenarios the prose quotes.
    pub quoted: &'a Quoted,
    /// (section key, file stem, inline SVG) of every plot.
    pub svgs: &'a [(String, String, String)],
}

/// A section: its blocks (the heading first), from the experiments and the page inputs.
type Section = fn(&Experiments, &PageInputs) -> Vec<Block>;

/// The report's sections in page order (one list for both pages: add a section here).
pub const SECTIONS: [Section; 21] = [
    sec_top,
    sec_capacity,
    sec_layout,
    sec_stale,
    sec_alpha,
    sec_llmd_shape,
    sec_rag,
    sec_cpu,
    sec_autoscale,
    sec_engines,
    sec_cost,
    sec_mooncake,
    sec_llmd_bench,
    sec_published,
    sec_pd,
    sec_tier,
    sec_scaling,
    sec_pools,
    sec_large,
    sec_parameters,
    sec_model,
];

/// Every block of the report, in order.
pub fn blocks(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    SECTIONS.iter().flat_map(|s| s(ex, inp)).collect()
}

fn sec_top(ex: &Experiments, _: &PageInputs) -> Vec<Block> {
    let mut head = String::from("| headline | value |\n|---|---|\n");
    for (k, v) in headlines(ex) {
        let _ = writeln!(head, "| {k} | {v} |");
    }
    vec![
        Block::Callout(scale_note(ex)),
        Block::Callout(format!("**The one number:** {}", the_number(ex))),
        Block::Heading("Headlines".into()),
        page::table_from_md(&head),
        Block::Para(format!(
            "The multi-tenant workload: hot set {} blocks, {} distinct blocks in all (\"fit\").",
            th(ex.hot_set_blocks),
            th(ex.fit_blocks as u64)
        )),
    ]
}

fn sec_capacity(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![
        Block::Heading("1. Capacity: where the routers part".into()),
        Block::Para("Hold the workload fixed and shrink each pod's cache from \"everything fits on every pod\" to \"each pod holds one-sixth of the hot set\".".into()),
    ];
    v.extend(figures(inp.svgs, "capacity"));
    v.push(page::table_from_md(&points_table(&ex.capacity, "capacity")));
    v
}

fn sec_layout(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![
        Block::Heading("2. Prompt layout: a timestamp on line one".into()),
        Block::Para("The same sweep with a per-request timestamp and user id before the shared prefix: the first block differs, so every chained key differs.".into()),
    ];
    v.extend(figures(inp.svgs, "layout"));
    v.push(page::table_from_md(&points_table(&ex.timestamp_first, "capacity")));
    v
}

fn sec_stale(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![
        Block::Heading("3. Stale index".into()),
        Block::Para("Evictions reach the router's index k requests late. The router then believes in blocks that are gone: a miss, never an error.".into()),
    ];
    v.extend(figures(inp.svgs, "stale"));
    v.push(page::table_from_md(&stale_table(ex)));
    v
}

fn sec_alpha(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![Block::Heading("4. Load penalty alpha".into()), Block::Para(alpha_text(ex))];
    v.extend(figures(inp.svgs, "alpha"));
    v.push(page::table_from_md(&points_table(&ex.alpha, "alpha")));
    v
}

fn sec_llmd_shape(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let q = inp.quoted;
    let mut v = vec![
        Block::Heading("5. The llm-d benchmark's shape".into()),
        Block::Para(llmd_text(&q.llmd)),
        page::table_from_md(&llmd_table(ex)),
        Block::Para(format!(
            "This section runs the FIFO engine: latency is prefill tokens x {} us plus FIFO queueing, no decode and no \
             step-cost model, so absolute seconds are not comparable; what transfers is the ordering and which \
             parameters open the gap. Sections 9 and 11 run the batched engine and its step-cost model.",
            us(q.llmd.fifo().t_prefill_ns)
        )),
    ];
    v.extend(figures(inp.svgs, "llmd"));
    v
}

fn sec_rag(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![Block::Heading("6. RAG-shaped tenants".into()), Block::Para(rag_text(&inp.quoted.rag))];
    v.extend(figures(inp.svgs, "rag"));
    v.push(page::table_from_md(&points_table(&ex.rag, "sorted")));
    v
}

fn sec_cpu(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![Block::Heading("7. A CPU tier".into()), Block::Para(cpu_text(&inp.quoted.multi_tenant))];
    v.extend(figures(inp.svgs, "cpu"));
    v.push(page::table_from_md(&cpu_table(ex)));
    v
}

fn sec_autoscale(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let q = inp.quoted;
    let mut v = vec![
        Block::Heading("8. Autoscaling: does the router fight the scaler?".into()),
        Block::Para(autoscale_text(&q.autoscale)),
    ];
    v.extend(figures(inp.svgs, "autoscale"));
    v.push(page::table_from_md(&autoscale_table(ex, q.autoscale.fleet.pods)));
    v
}

fn sec_engines(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    let mut v = vec![
        Block::Heading("9. The batched engine: llm-d shape and conversation trace".into()),
        Block::Para(engines_intro(ex)),
        page::table_from_md(&engine::table(&ex.engines)),
    ];
    v.extend(engine::prose(&ex.engines, &inp.quoted.llmd).into_iter().map(Block::Para));
    v
}

fn sec_cost(_: &Experiments, _: &PageInputs) -> Vec<Block> {
    let mut v = vec![Block::Heading("9b. What the cost model says, and how wrong it is".into())];
    v.extend(md_body(&super::cost::markdown()));
    v
}

fn sec_mooncake(ex: &Experiments, _: &PageInputs) -> Vec<Block> {
    use crate::fleet::report::mooncake as mc;
    vec![
        Block::Heading(format!("10. {}", mc::TITLE)),
        Block::Para(mc::intro()),
        page::table_from_md(&mc::ratio_table(&ex.mooncake)),
        page::table_from_md(&mc::runs_table(&ex.mooncake)),
        Block::Para(mc::verdict(&ex.mooncake)),
        Block::Para(mc::WHY.into()),
    ]
}

fn sec_llmd_bench(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    use crate::fleet::report::llmd;
    let mut v = vec![Block::Heading(format!("11. {}", llmd::TITLE))];
    for b in llmd::blocks(&ex.llmd_bench) {
        match b {
            llmd::Block::Para(p) => v.push(Block::Para(p)),
            llmd::Block::Table(t) => v.push(page::table_from_md(&t)),
            llmd::Block::Figures => v.extend(figures(inp.svgs, "llmd_stages")),
        }
    }
    v.push(Block::Sub(llmd::SCENARIO_NAME.into()));
    v.push(Block::Pre(llmd::SCENARIO_TEXT.into()));
    v
}

fn sec_published(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::published::page_blocks(&ex.published, inp.svgs)
}

fn sec_pd(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::deploy::pd_page_blocks(&ex.deploy, inp.svgs)
}

fn sec_tier(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::deploy::tier_page_blocks(&ex.deploy, inp.svgs)
}

fn sec_scaling(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::scaling::page_blocks(&ex.scaling, inp.svgs)
}

fn sec_pools(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::pools::page_blocks(&ex.pools, inp.svgs)
}

fn sec_large(ex: &Experiments, inp: &PageInputs) -> Vec<Block> {
    super::large::page_blocks(&ex.large, inp.svgs)
}

/// The built-in scenarios as run (the request counts after `--shrink`).
fn sec_parameters(ex: &Experiments, _: &PageInputs) -> Vec<Block> {
    let mut v = vec![
        Block::Heading("Parameters actually run".into()),
        page::table_from_md(&runs_table(ex)),
        Block::Para("Everything else as in the scenario files (`scenarios/`); the experiments vary capacity, layout, stale delay, alpha, document order, CPU tier and autoscaling as each section says.".into()),
    ];
    for ((name, text), run) in BUILTIN.iter().zip(&ex.scenarios) {
        let ran = if run.requests_run == run.requests_in_file {
            format!("Ran as written: {} requests.", th(run.requests_run))
        } else {
            format!(
                "Ran **{} requests**, not the {} below (`--shrink {}`).",
                th(run.requests_run),
                th(run.requests_in_file),
                ex.shrink
            )
        };
        v.push(Block::Sub(format!("scenarios/{name}.toml")));
        v.push(Block::Para(ran));
        v.push(Block::Pre((*text).into()));
    }
    v
}

fn sec_model(_: &Experiments, _: &PageInputs) -> Vec<Block> {
    vec![
        Block::Heading("The model".into()),
        Block::Para(
            "docs/MODEL.md. Latencies are exact integer-ns simulations reported in seconds. Two engine models: the FIFO \
             engine (prefill tokens x a fixed cost, FIFO queueing, no decode batching) in sections 1-8 and 10, and the \
             batched engine (vLLM-style continuous batching with a step-cost model fitted on published calibration \
             points; section 9b says how far off it is) in sections 9 and 11 to 17, whose sections list what it leaves out. \
             Compare orderings and ratios, not seconds."
                .into(),
        ),
    ]
}

/// The Markdown summary.
pub fn render_markdown(blocks: &[Block], prov: &Provenance) -> String {
    page::markdown(TITLE, blocks, &prov.markdown())
}

/// The HTML page.
pub(super) fn render_html(blocks: &[Block], prov: &Provenance) -> String {
    page::html(TITLE, blocks, &prov.html())
}

/// The report's title.
pub const TITLE: &str = "brokerlab fleet report";

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

    /// Section 4's caption says what the data shows, and no claim the data does not.
    #[test]
    fn alpha_caption_follows_the_data() {
        // A valley: both ends above the best.
        let t = alpha_caption(&[(0.125, 2.0), (1.0, 0.5), (4096.0, 1.5)], 3.0, 2.5);
        assert!(t.contains("lowest at alpha = 1 (0.500 s)"), "{t}");
        assert!(t.contains("at alpha = 0.125 it is 2.000 s, 4.0x the best (hits are chased"), "{t}");
        assert!(t.contains("at alpha = 4096 it is 1.500 s, 3.0x the best (load outweighs the match), still 1.7x below the better cache-blind router's 2.500 s"), "{t}");
        assert!(t.contains("Round-robin (3.000 s) and least-loaded (2.500 s)"), "{t}");
        // Monotone: the lowest alpha is best, so nothing is said about chasing hits.
        let t = alpha_caption(&[(0.125, 0.5), (1.0, 0.51), (4096.0, 2.5)], 3.0, 2.5);
        assert!(t.contains("as slow as a cache-blind router (2.500 s)"), "{t}");
        assert!(
            t.contains("lowest at alpha = 0.125") && t.contains("0.125 it is 0.500 s, within 5% of the best"),
            "{t}"
        );
        assert!(!t.contains("chased"), "{t}");
        assert_eq!(alpha_caption(&[], 1.0, 1.0), "score = match - alpha x queue length.");
    }

    /// One block list renders both pages: the Markdown table parsed back is the same table, and
    /// inline Markdown becomes HTML.
    #[test]
    fn a_markdown_table_becomes_one_block() {
        let md = "| a | b |\n|---|---|\n| 1,234 | `x` |\n| 2 | **y** |\n";
        let Block::Table(head, rows) = page::table_from_md(md) else { panic!("not a table") };
        assert_eq!(head, ["a", "b"]);
        assert_eq!(rows, [["1,234", "`x`"], ["2", "**y**"]]);
        let html = page::html("t", &[page::table_from_md(md)], "");
        assert!(html.contains("<td>1,234</td><td class=\"t\"><code>x</code></td>"), "{html}");
        let out = page::markdown("t", &[page::table_from_md(md)], "");
        assert!(out.contains(md), "{out}");
    }

    /// Counts carry thousands separators.
    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(th(41_326_392), "41,326,392");
        assert_eq!(th(999), "999");
        assert_eq!(crate::plot::bar_value(0.3621), "0.362");
        assert_eq!(crate::plot::bar_value(94.9), "94.9");
        assert_eq!(crate::plot::bar_value(12_345.0), "12,345");
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
