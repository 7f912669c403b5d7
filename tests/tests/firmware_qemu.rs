//! Issue 5: the firmware demo under QEMU must report exactly what the host build of the same
//! scenario computes, and fit the machine's RAM with a margin.
//!
//! Needs the `thumbv7m-none-eabi` target and `qemu-system-arm` (see firmware-demo/README.md).
//! `BROKERLAB_SKIP_QEMU=1` skips these tests (for machines without QEMU); CI never sets it.

use brokerlab_fw_tools as firmware;

use std::sync::OnceLock;

use brokerlab::fleet::run::{Batched, simulate};
use brokerlab::fleet::scenario::Generated;
use brokerlab_core::fleet::sim::pd::{Delivery, Join, Transfer};
use brokerlab_core::fleet::stats::{LogHistogram, REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::{FleetConfig, IndexEntry, KvBlock, PendingEntry, PendingRecord, ReqSlot, Slot};
use brokerlab_core::runner::harness::SimWorld;
use brokerlab_firmware::FW_MEASUREMENTS;
use brokerlab_firmware::scenario::{self, Storage};
use firmware::{FirmwareRun, Metric};

/// Headroom the stack and the statics must leave in the machine's RAM.
const MIN_RAM_MARGIN_BYTES: u64 = 64 * 1024;

fn skipped() -> bool {
    let skip = std::env::var_os("BROKERLAB_SKIP_QEMU").is_some_and(|v| v == "1");
    if skip {
        eprintln!("BROKERLAB_SKIP_QEMU=1: skipping the QEMU firmware comparison");
    }
    skip
}

/// The same scenario through the host build of core, with heap buffers of the same lengths.
fn host_metrics() -> Vec<Metric> {
    let mut slots = vec![Slot::default(); scenario::SLOTS_LEN];
    let mut tables = vec![0u32; scenario::TABLES_LEN];
    let mut queues = vec![0u64; scenario::QUEUES_LEN];
    let mut index = vec![IndexEntry::default(); scenario::INDEX_LEN];
    let mut pending = vec![PendingRecord::default(); scenario::PENDING_LEN];
    let mut pending_table = vec![PendingEntry::default(); scenario::PENDING_TABLE_LEN];
    let mut tokens = vec![0u32; scenario::TOKENS_LEN];
    let mut zipf_cdf = vec![0u64; scenario::ZIPF_CDF_LEN];
    let mut latencies = vec![0u64; scenario::LATENCIES_LEN];
    let mut histograms = vec![LogHistogram::default(); scenario::HISTOGRAMS_LEN];
    let mut runner_log = vec![0u8; scenario::RUNNER_LOG_BYTES];
    let mut world = Box::new(SimWorld::new());
    let mut flash = vec![0u8; scenario::FLASH_LOG_BYTES];
    let mut kv_blocks = vec![KvBlock::default(); scenario::KV_BLOCKS_LEN];
    let mut kv_tables = vec![0u32; scenario::KV_TABLES_LEN];
    let mut engine_requests = vec![ReqSlot::default(); scenario::ENGINE_REQUESTS_LEN];
    let mut engine_waiting = vec![0u32; scenario::ENGINE_REQUESTS_LEN];
    let mut engine_running = vec![0u32; scenario::ENGINE_RUNNING_LEN];
    let mut engine_keys = vec![0u64; scenario::ENGINE_KEYS_LEN];
    let mut cpu_slots = vec![Slot::default(); scenario::CPU_SLOTS_LEN];
    let mut cpu_tables = vec![0u32; scenario::CPU_TABLES_LEN];
    let mut pd_transfers = vec![Transfer::default(); scenario::PD_TRANSFERS_LEN];
    let mut pd_joins = vec![Join::default(); scenario::PD_IN_FLIGHT];
    let mut pd_deliveries = vec![Delivery::default(); scenario::PD_IN_FLIGHT];
    let mut storage = Storage {
        slots: &mut slots,
        tables: &mut tables,
        queues: &mut queues,
        index: &mut index,
        pending: &mut pending,
        pending_table: &mut pending_table,
        tokens: &mut tokens,
        zipf_cdf: &mut zipf_cdf,
        latencies: &mut latencies,
        histograms: &mut histograms,
        runner_log: &mut runner_log,
        world: &mut world,
        flash: &mut flash,
        kv_blocks: &mut kv_blocks,
        kv_tables: &mut kv_tables,
        engine_requests: &mut engine_requests,
        engine_waiting: &mut engine_waiting,
        engine_running: &mut engine_running,
        engine_keys: &mut engine_keys,
        cpu_slots: &mut cpu_slots,
        cpu_tables: &mut cpu_tables,
        pd_transfers: &mut pd_transfers,
        pd_joins: &mut pd_joins,
        pd_deliveries: &mut pd_deliveries,
    };
    let mut out = Vec::new();
    let mut sink = |g: &'static str, n: &'static str, i: u32, v: u64| out.push((g.to_string(), n.to_string(), i, v));
    if let Err(e) = scenario::run(&mut storage, &mut sink) {
        panic!("host scenario failed: run {}, request {}: {}", e.run, e.request, e.error);
    }
    out
}

/// The host's scenario metrics, computed once.
fn host() -> &'static [Metric] {
    static HOST: OnceLock<Vec<Metric>> = OnceLock::new();
    HOST.get_or_init(host_metrics)
}

/// One build and one QEMU run shared by every test of this file.
fn run() -> &'static FirmwareRun {
    static RUN: OnceLock<Result<FirmwareRun, String>> = OnceLock::new();
    match RUN.get_or_init(firmware::run_firmware) {
        Ok(run) => run,
        Err(e) => panic!("firmware run failed: {e}"),
    }
}

#[test]
fn firmware_exits_successfully() {
    if skipped() {
        return;
    }
    let run = run();
    for f in &run.frames {
        eprintln!("{:<5} {}", f.level.unwrap_or(""), f.message);
    }
    let errors: Vec<_> = run.frames.iter().filter(|f| f.level == Some("error")).collect();
    assert!(errors.is_empty(), "firmware logged errors: {errors:?}");
    assert_eq!(run.end.map(|(_, ok)| ok), Some(true), "no `BL end .. true` frame; stderr: {}", run.stderr);
    assert_eq!(run.exit_code, Some(0), "semihosting exit status; stderr: {}", run.stderr);
}

#[test]
fn firmware_metrics_are_bit_identical_with_the_host() {
    if skipped() {
        return;
    }
    let run = run();
    let host = host();
    assert!(host.len() > 100, "the scenario reports every run's metrics");
    for (f, h) in run.metrics.iter().zip(host) {
        assert_eq!(f, h, "firmware (left) vs host (right)");
    }
    assert_eq!(run.metrics.len(), host.len(), "metric count, firmware vs host");
    // Each run's digest covers every field of every per-request outcome.
    let digests = host.iter().filter(|m| m.1 == "outcome_digest").count();
    assert_eq!(digests, scenario::RUNS.len());
    // The autoscaled run did scale, both ways (so the comparison covers the autoscaler).
    let scaled = |name: &str| host.iter().find(|m| m.0 == "prefix-aware-autoscale" && m.1 == name).map(|m| m.3);
    assert!(scaled("scale_outs").is_some_and(|n| n > 0), "autoscaled run: {:?}", scaled("scale_outs"));
    assert!(scaled("scale_ins").is_some_and(|n| n > 0), "autoscaled run: {:?}", scaled("scale_ins"));
    // The runner's crash enumeration ran on both sides, with no violation.
    for (group, _) in scenario::RUNNER_RUNS {
        let get = |name: &str| host.iter().find(|m| m.0 == group && m.1 == name).map(|m| m.3);
        assert!(get("crash_points").is_some_and(|p| p > 0), "{group}: crash points");
        assert_eq!(get("violations"), Some(0), "{group}: violations");
    }
    // The batched runs reached the engine's interesting paths: chunked prefill is not needed for
    // these prompts, but preemption is (both routers), and prefix hits are (prefix-aware).
    for (group, ..) in scenario::BATCHED_RUNS {
        let get = |name: &str| host.iter().find(|m| m.0 == group && m.1 == name).map(|m| m.3);
        assert_eq!(get("finished"), Some(u64::from(scenario::BATCHED_REQUESTS)), "{group}: finished");
        assert!(get("preemptions").is_some_and(|p| p > 0), "{group}: preemptions {:?}", get("preemptions"));
        assert!(get("hit_tokens").is_some_and(|h| h > 0), "{group}: hit tokens {:?}", get("hit_tokens"));
        assert_eq!(get("kv_peak_blocks"), Some(scenario::BATCHED_CAPACITY_BLOCKS as u64), "{group}: KV full at peak");
    }
    // One batched run prices its steps with the physics model (issue 24), bit-identical too.
    let physics = scenario::BATCHED_RUNS.iter().filter(|r| matches!(r.2, scenario::BatchedCost::Physics(_))).count();
    assert_eq!(physics, 1, "one batched run with the physics step cost");
    assert_eq!(run.end.map(|(n, _)| n), Some(host.len() as u64), "metric count in the end frame");
}

/// The shared scenario's batched runs (the code the firmware runs, built for the host) agree with
/// the host CLI's own batched engine (`brokerlab fleet run --engine batched`'s path, with its
/// buffers grown on demand and its summary): the same completions, percentiles and counters.
/// Needs no QEMU.
#[test]
fn batched_runs_equal_the_host_cli() {
    let host = host();
    let workload = Generated::new(scenario::BATCHED_WORKLOAD).expect("batched workload");
    for (group, router, cost, deploy) in scenario::BATCHED_RUNS {
        let get = |name: &str, index: u32| {
            host.iter()
                .find(|m| m.0 == group && m.1 == name && m.2 == index)
                .map(|m| m.3)
                .unwrap_or_else(|| panic!("{group}: no metric {name} {index}"))
        };
        let engine = scenario::deploy_engine(cost, deploy).expect("the batched runs' engines are valid");
        let cfg = FleetConfig::batched(scenario::PODS, scenario::BATCHED_CAPACITY_BLOCKS, router, engine);
        let cli = simulate::<Batched>(cfg, &mut &workload, true).expect("host CLI batched run");
        let s = &cli.summary;
        let digest = cli.completions.iter().fold(scenario::completion_digest_seed(), scenario::mix_completion);
        assert_eq!(digest, get("completion_digest", 0), "{group}: completions (every field, completion order)");
        assert_eq!(s.requests, get("requests", 0), "{group}");
        assert_eq!(s.input_tokens, get("input_tokens", 0), "{group}");
        assert_eq!(s.output_tokens, get("output_tokens", 0), "{group}");
        assert_eq!(s.hit_tokens, get("hit_tokens", 0), "{group}");
        assert_eq!(s.prefill_tokens, get("prefill_tokens", 0), "{group}");
        assert_eq!(s.steps, get("steps", 0), "{group}");
        assert_eq!(s.preemptions, get("preemptions", 0), "{group}");
        assert_eq!(s.itl_samples, get("itl_samples", 0), "{group}");
        assert_eq!(s.ttft_ns_p90, Some(get("ttft_ns_pct", 90)), "{group}");
        assert_eq!(s.e2e_ns_p90, Some(get("e2e_ns_pct", 90)), "{group}");
        assert_eq!(s.makespan_s, get("makespan_ns", 0) as f64 / 1e9, "{group}");
        let mut ttft: Vec<u64> = cli.completions.iter().map(|c| c.ttft_ns()).collect();
        let mut e2e: Vec<u64> = cli.completions.iter().map(|c| c.e2e_ns()).collect();
        ttft.sort_unstable();
        e2e.sort_unstable();
        for (num, den) in REPORTED_PERCENTILES {
            let at = |v: &[u64]| nearest_rank_index(v.len(), num, den).map(|k| v[k]);
            assert_eq!(at(&ttft), Some(get("ttft_ns_pct", num as u32)), "{group}: TTFT p{num}");
            assert_eq!(at(&e2e), Some(get("e2e_ns_pct", num as u32)), "{group}: E2E p{num}");
        }
        let c = scenario::BATCHED_CAPACITY_BLOCKS as f64;
        for p in 0..scenario::PODS {
            let i = p as u32;
            assert_eq!(s.per_pod_requests[p], get("pod_requests", i), "{group} pod {p}");
            assert_eq!(s.per_pod_steps[p], get("pod_steps", i), "{group} pod {p}");
            assert_eq!(s.per_pod_preemptions[p], get("pod_preemptions", i), "{group} pod {p}");
            assert_eq!(s.per_pod_kv_util_peak[p], get("pod_kv_peak_blocks", i) as f64 / c, "{group} pod {p}");
            assert_eq!(u64::from(s.per_pod_max_queue[p]), get("pod_max_queue_len", i), "{group} pod {p}");
        }
    }
}

#[test]
fn firmware_fits_the_machine_with_margin() {
    if skipped() {
        return;
    }
    let run = run();
    let m = |name: &str| -> u64 { *run.measurements.get(name).unwrap_or_else(|| panic!("no `BL fw {name}` frame")) };
    for name in FW_MEASUREMENTS {
        m(name);
    }
    let (peak, region, statics, ram) =
        (m("stack_peak_bytes"), m("stack_region_bytes"), m("static_ram_bytes"), m("ram_bytes"));
    let s = run.sizes;
    eprintln!(
        "firmware {}: .text {} B, .data {} B, .bss {} B; stack peak {peak} B of {region} B; RAM {ram} B",
        run.elf.display(),
        s.text,
        s.data,
        s.bss
    );
    // No heap: nothing in the firmware links a global allocator.
    assert!(run.allocator_symbols.is_empty(), "allocator symbols in the firmware: {:?}", run.allocator_symbols);
    // The firmware's own view of its statics agrees with the ELF (.data + .bss + .uninit).
    assert_eq!(statics, s.data + s.bss, "static RAM from the linker symbols vs the ELF sections");
    assert!(peak > 0 && peak < region, "stack peak {peak} outside the painted region {region}");
    assert!(
        statics + peak + MIN_RAM_MARGIN_BYTES <= ram,
        "statics {statics} B + stack {peak} B leave under {MIN_RAM_MARGIN_BYTES} B of the {ram} B of RAM"
    );
}
