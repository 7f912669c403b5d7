//! What the fleet commands write besides their numbers: provenance on every page and JSON/CSV
//! output, the shrink factor stated, byte-identical reports apart from the date line, and
//! progress on stderr only (never on stdout), silenced by `--quiet`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use brokerlab::fleet::report;
use brokerlab::fleet::run::progress::Progress;
use sha2::{Digest, Sha256};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_brokerlab"));
    // Status lines every millisecond: any run is long enough to print some when not quiet.
    c.env("BROKERLAB_PROGRESS_INTERVAL", "0.001");
    c
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-output-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> Output {
    let out = bin().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn files(d: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn repo_file(rel: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)).unwrap()
}

/// The multi-tenant scenario with `requests` requests, in a directory of the test's own (tests run
/// in parallel).
fn small_scenario(test: &str, requests: u64) -> PathBuf {
    let text = String::from_utf8(repo_file("scenarios/multi-tenant.toml"))
        .unwrap()
        .replace("requests = 24000", &format!("requests = {requests}"));
    assert!(text.contains(&format!("requests = {requests}")));
    let p = dir(test).join("small.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn is_date_line(line: &str) -> bool {
    // JSON `"date": "...",`, Markdown `- date: ...`, HTML `<tr><th>date</th>...`.
    let l = line.trim_start();
    l.starts_with("\"date\":") || l.starts_with("- date:") || l.starts_with("<tr><th>date</th>")
}

#[test]
fn report_is_byte_identical_apart_from_the_date_line_and_says_what_it_ran() {
    let d = dir("report");
    let out = d.to_str().unwrap();
    let args = ["fleet", "report", "--shrink", "20", "--threads", "2", "--quiet", "--out", out];
    let first = run(&args);
    assert!(first.stderr.is_empty(), "--quiet: {}", String::from_utf8_lossy(&first.stderr));
    let a = files(&d);
    run(&args);
    let b = files(&d);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        let (x, y) = (String::from_utf8_lossy(bytes), String::from_utf8_lossy(&b[name]));
        let dates = x.lines().filter(|l| is_date_line(l)).count();
        let pages = ["index.html", "summary.md", "experiments.json", "points.provenance.json"];
        assert_eq!(dates, usize::from(pages.contains(&name.as_str())), "{name}: date lines");
        let strip = |s: &str| s.lines().filter(|l| !is_date_line(l)).collect::<Vec<_>>().join("\n");
        assert!(strip(&x) == strip(&y), "{name} differs beyond the date line");
    }

    // --no-date: no date line at all, and the same bytes twice.
    let mut undated = args.to_vec();
    undated.push("--no-date");
    run(&undated);
    let c = files(&d);
    run(&undated);
    assert!(c == files(&d), "two --no-date reports differ");
    for (name, bytes) in &c {
        assert!(!String::from_utf8_lossy(bytes).lines().any(is_date_line), "{name} has a date with --no-date");
    }

    // The pages say what ran: the shrink factor, the requests run, the command, the build and
    // the digest of each built-in scenario (the same as sha256sum of the file in scenarios/).
    let html = String::from_utf8(c["index.html"].clone()).unwrap();
    let md = String::from_utf8(c["summary.md"].clone()).unwrap();
    for page in [&html, &md] {
        assert!(page.contains("--shrink 20"), "no shrink factor");
        assert!(page.contains("multi-tenant 1,200 of 24,000"), "no request counts");
        assert!(page.contains("brokerlab fleet report --shrink 20 --threads 2 --quiet --out"), "no command line");
        assert!(page.contains(brokerlab::provenance::GIT_COMMIT), "no commit");
        for name in ["multi-tenant", "alpha", "llm-d", "rag", "autoscale"] {
            let digest = hex_sha256(&repo_file(&format!("scenarios/{name}.toml")));
            assert!(page.contains(&digest), "no sha256 of {name}");
        }
        // Section 9 replays the built-in conversation trace, cut by the shrink factor.
        assert!(page.contains(&hex_sha256(&repo_file("traces/conversation_trace.jsonl.zst"))), "no trace sha256");
        assert!(page.contains("first 601 of 12,031 requests"), "no note on the cut trace");
    }
    assert!(html.contains("Ran <b>1,200 requests</b>, not the 24,000 below"), "parameters section");
    let ex: serde_json::Value = serde_json::from_slice(&c["experiments.json"]).unwrap();
    assert_eq!(ex["shrink"], 20);
    assert_eq!(ex["scenarios"][0]["requests_run"], 1200);
    // The 5 built-in scenarios, the llm-d section's scenarios/llm-d-ramp.toml, the pools section's
    // scenarios/mixed-h100-a100.toml and the 2 built-in Mooncake traces (the batched engine's
    // section and the local-vs-global section; the conversation trace listed once).
    assert_eq!(ex["provenance"]["inputs"].as_array().unwrap().len(), 9);
    for sc in ["llm-d-ramp", "mixed-h100-a100"] {
        let digest = hex_sha256(&repo_file(&format!("scenarios/{sc}.toml")));
        assert!(md.contains(&digest) && html.contains(&digest), "no sha256 of scenarios/{sc}.toml");
    }
    assert!(html.contains("16. Heterogeneous pools") && ex["pools"]["runs"].as_array().unwrap().len() == 5);
    for t in ["conversation", "synthetic"] {
        let digest = hex_sha256(&repo_file(&format!("traces/{t}_trace.jsonl.zst")));
        assert!(md.contains(&digest) && html.contains(&digest), "no sha256 of the {t} trace");
    }
    assert_eq!(ex["engines"]["conversation_requests_run"], 601);
    assert!(ex["provenance"]["command"].as_str().unwrap().contains("--shrink 20"));
    let side: serde_json::Value = serde_json::from_slice(&c["points.provenance.json"]).unwrap();
    assert_eq!(side["provenance"], ex["provenance"]);

    // The RAG table is in section 6, between its heading and section 7's.
    let (s6, s7) = (html.find("<h2 id=\"6-").unwrap(), html.find("<h2 id=\"7-").unwrap());
    let rag = html.find("<th>sorted</th>").unwrap();
    assert!(s6 < rag && rag < s7, "RAG table at {rag}, section 6 at {s6}, section 7 at {s7}");
    assert_eq!(html.matches("<th>sorted</th>").count(), 1);

    // ... and never claims to be full size.
    assert!(!md.contains("Full size"));

    // One block list renders both pages: the same sections in the same order, each page with a
    // table of contents linking every section.
    let md_heads: Vec<&str> = md.lines().filter_map(|l| l.strip_prefix("## ")).filter(|h| *h != "Provenance").collect();
    let html_heads: Vec<&str> = html
        .split("<h2 id=\"")
        .skip(1)
        .filter_map(|h| h.split_once("\">").and_then(|(_, rest)| rest.split_once("</h2>")).map(|(t, _)| t))
        .filter(|h| *h != "Provenance")
        .collect();
    assert!(md_heads.len() >= 14, "{md_heads:?}");
    assert_eq!(md_heads, html_heads);
    for h in &md_heads {
        assert!(md.contains(&format!("[{h}](#")), "summary.md contents lack {h}");
    }
    assert!(html.contains("<nav>Contents: "));
    // Section 11's per-stage plots are on both pages; every scenario's share of its file is said,
    // section 11's included; the footer names both engines.
    for stem in ["llmd_ramp_tok_s", "llmd_ramp_ttft_p90", "llmd_p90", "stale_gain"] {
        assert!(md.contains(&format!("({stem}.png)")) && html.contains(&format!("{stem}.svg")), "{stem}");
        assert!(d.join(format!("{stem}.png")).exists(), "{stem}.png");
    }
    for page in [&html, &md] {
        assert!(
            page.contains("Section 11 runs `scenarios/llm-d-ramp.toml`") || page.contains("Section 11 runs <code>")
        );
        assert!(page.contains("every stage 1/80 of its published duration"), "section 11's divisor");
        assert!(!page.contains("no decode batching, no GPU model"));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn report_progress_counts_every_point() {
    let p = Progress::hidden();
    let ex = report::run_all(0, 40, &p).unwrap();
    let (max, _) = ex.capacity_ends();
    assert!(max > 0.0);
    let caps = ex.capacity.len() / 3;
    assert_eq!(p.length(), Some(report::total_points(caps)));
    assert_eq!(p.position(), report::total_points(caps));
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn piped_replay_and_run_print_only_json_on_stdout_and_progress_on_stderr() {
    // Long enough (tens of ms) for a status line every millisecond even on a busy machine.
    let sc = small_scenario("replay", 8000);
    let trace = sc.with_file_name("t.jsonl");
    let g = bin().args(["fleet", "gen-trace"]).arg(&sc).arg("-o").arg(&trace).output().unwrap();
    assert!(g.status.success(), "{}", text(&g.stderr));
    let replay = |extra: &[&str]| {
        let mut c = bin();
        c.args(["fleet", "replay", "--trace"]).arg(&trace);
        c.args(["--trace-block-size", "16", "--pods", "4", "--capacity", "512", "--router", "prefix-aware"]);
        c.args(extra).output().unwrap()
    };
    for (out, kind, path) in [
        (replay(&["--json"]), "trace", trace.clone()),
        (bin().args(["fleet", "run", "--json"]).arg(&sc).output().unwrap(), "scenario", sc.clone()),
    ] {
        assert!(out.status.success(), "{}", text(&out.stderr));
        // stdout is exactly one JSON object: results and provenance, nothing else.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON value");
        assert_eq!(v["requests"], 8000);
        let prov = &v["provenance"];
        assert_eq!(prov["inputs"][0]["kind"], kind);
        assert_eq!(prov["inputs"][0]["sha256"].as_str().unwrap(), hex_sha256(&std::fs::read(&path).unwrap()));
        assert!(prov["date"].is_string());
        assert_eq!(prov["git_commit"], brokerlab::provenance::GIT_COMMIT);
        // Progress went to stderr, as plain status lines (not a terminal), ending with a summary.
        let err = text(&out.stderr);
        assert!(err.lines().count() >= 2 && err.lines().all(|l| l.starts_with("brokerlab: ")), "{err}");
        assert!(err.contains(": done, "), "{err}");
    }
    let err = text(&replay(&["--json"]).stderr);
    assert!(err.contains("requests replayed") && err.contains("MiB"), "{err}");

    // --quiet: nothing on stderr; --no-date: no date.
    let q = replay(&["--json", "--quiet", "--no-date"]);
    assert!(q.status.success() && q.stderr.is_empty(), "{}", text(&q.stderr));
    let v: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    assert!(v["provenance"].get("date").is_none());
    let q = replay(&["-q"]);
    assert!(q.status.success() && q.stderr.is_empty());
    assert!(text(&q.stdout).starts_with("trace "));
    let q = bin().args(["fleet", "run", "--quiet", "--json"]).arg(&sc).output().unwrap();
    assert!(q.status.success() && q.stderr.is_empty(), "{}", text(&q.stderr));
}

#[test]
fn piped_sweep_prints_its_table_on_stdout_and_writes_provenance() {
    let sc = small_scenario("sweep-scenario", 1500);
    let d = dir("sweep");
    let args = |quiet: bool| {
        let mut a: Vec<String> =
            ["fleet", "sweep", sc.to_str().unwrap(), "--param", "alpha", "--values", "1,16"].map(String::from).to_vec();
        a.extend(["--threads", "2", "--out", d.to_str().unwrap()].map(String::from));
        if quiet {
            a.push("--quiet".into());
        }
        a
    };
    let out = bin().args(args(false)).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    // stdout: the table and the "wrote" line only; no carriage return, no status line.
    assert!(o.starts_with("       alpha |") && o.lines().count() == 4, "{o}");
    assert!(!o.contains('\r') && !o.contains("brokerlab: "), "{o}");
    assert!(e.contains("points") && e.contains(": done, 6 points"), "{e}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("points.json")).unwrap()).unwrap();
    assert_eq!(json["points"].as_array().unwrap().len(), 6);
    let digest = hex_sha256(&std::fs::read(&sc).unwrap());
    assert_eq!(json["provenance"]["inputs"][0]["sha256"].as_str().unwrap(), digest);
    let side: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("points.provenance.json")).unwrap()).unwrap();
    assert_eq!(side["provenance"], json["provenance"]);
    // The CSV stays plain CSV: a header row, then data.
    let csv = std::fs::read_to_string(d.join("points.csv")).unwrap();
    assert!(csv.starts_with("param,value,router,") && csv.lines().count() == 7, "{csv}");

    let before = files(&d);
    let q = bin().args(args(true)).output().unwrap();
    assert!(q.status.success() && q.stderr.is_empty(), "{}", text(&q.stderr));
    assert_eq!(text(&q.stdout), o);
    // Same inputs, same numbers: the CSV and plots are byte-identical, the JSON's points equal
    // (its provenance names the other command line).
    let after = files(&d);
    for name in ["points.csv", "hit_rate.svg", "hit_rate.png", "prefill.svg", "p90.svg", "p90.png"] {
        assert!(before[name] == after[name], "{name} differs");
    }
    let points = |m: &BTreeMap<String, Vec<u8>>| {
        serde_json::from_slice::<serde_json::Value>(&m["points.json"]).unwrap()["points"].clone()
    };
    assert_eq!(points(&before), points(&after));
}

/// On a terminal (a pseudo-terminal from util-linux `script`), replay draws an indicatif bar on
/// stderr with bytes, rate, ETA and requests; stdout, redirected, still holds only the JSON.
#[test]
fn on_a_terminal_replay_draws_a_bar_and_quiet_draws_nothing() {
    // util-linux `script` gives the binary a terminal; scripts/test.sh installs it (bsdutils)
    let script = Command::new("script").arg("--version").output();
    assert!(
        script.is_ok_and(|o| o.status.success()),
        "util-linux `script` is not installed (scripts/test.sh installs it)"
    );
    let sc = small_scenario("tty", 8000);
    let trace = sc.with_file_name("t.jsonl");
    let g = bin().args(["fleet", "gen-trace"]).arg(&sc).arg("-o").arg(&trace).output().unwrap();
    assert!(g.status.success(), "{}", text(&g.stderr));
    let json = sc.with_file_name("out.json");
    let q = |p: &Path| brokerlab::provenance::shell_quote(p.to_str().unwrap());
    let on_tty = |extra: &str| {
        let cmd = format!(
            "stty cols 120; {} fleet replay --trace {} --trace-block-size 16 --pods 4 --capacity 512 --router prefix-aware --json {extra} > {}",
            q(Path::new(env!("CARGO_BIN_EXE_brokerlab"))),
            q(&trace),
            q(&json)
        );
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["requests"], 8000);
        text(&out.stdout)
    };
    let tty = on_tty("");
    assert!(tty.contains("replay [") && tty.contains("MiB") && tty.contains("ETA"), "{tty}");
    assert!(tty.contains(" requests replayed") && tty.contains('\r'), "{tty}");
    assert!(!tty.contains("brokerlab: "), "status lines on a terminal: {tty}");
    let quiet = on_tty("--quiet");
    assert!(quiet.trim().is_empty(), "{quiet}");
}
