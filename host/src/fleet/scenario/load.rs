//! `[load]` of a scenario file as the core's [`LoadSpec`]: the client as inference-perf's load
//! generator (docs/MODEL.md, "The load generator"). Every error names the key.

use brokerlab_core::fleet::loadgen::{
    LoadKind, LoadSpec, LoadStage, MAX_CLIENT_SLOTS, MAX_LOAD_STAGES, MAX_STAGE_MS, MAX_STAGE_REQUESTS,
};
use brokerlab_core::fleet::workload::WorkloadSpec;

use super::schema::LoadToml;
use super::{milli_exact, num, rate_milli};
use crate::error::{CliError, CliResult};

/// `[load]` checked against the workload it draws from (which must have no arrival process of
/// its own: its requests are the data set).
pub(super) fn load_spec(
    l: &LoadToml,
    w: &WorkloadSpec,
    origin: &str,
    bad: &dyn Fn(&str, &str, &str) -> CliError,
) -> CliResult<LoadSpec> {
    let kind = match l.kind.as_str() {
        "poisson" => LoadKind::Poisson,
        "constant" => LoadKind::Constant,
        "concurrent" => LoadKind::Concurrent,
        other => return Err(bad("load.type", "\"poisson\", \"constant\" or \"concurrent\"", other)),
    };
    if w.rate_milli_per_s > 0 || w.stages_len > 0 || w.burst_rate_milli_per_s > 0 {
        return Err(bad(
            "workload.rate_per_s",
            "absent (with [load] the workload is the data set; [[load.stages]] set the arrivals)",
            "a rate",
        ));
    }
    if l.stages.is_empty() || l.stages.len() > MAX_LOAD_STAGES {
        return Err(bad("load.stages", "1 to 32 stages", &format!("{} stages", l.stages.len())));
    }
    let mut stages = [LoadStage::default(); MAX_LOAD_STAGES];
    for (i, (st, slot)) in l.stages.iter().zip(stages.iter_mut()).enumerate() {
        let key = |k: &str| format!("load.stages[{}].{k}", i + 1);
        *slot = match kind {
            LoadKind::Concurrent => {
                if let Some(r) = st.rate_per_s {
                    return Err(bad(&key("rate_per_s"), "absent with type concurrent", &num(r)));
                }
                let c =
                    st.concurrency_level.ok_or_else(|| bad(&key("concurrency_level"), "a positive count", "none"))?;
                let n = st.num_requests.ok_or_else(|| bad(&key("num_requests"), "a positive count", "none"))?;
                if c == 0 || c > MAX_CLIENT_SLOTS {
                    return Err(bad(&key("concurrency_level"), "1 to 1048576 clients", &c.to_string()));
                }
                if n == 0 || n > MAX_STAGE_REQUESTS {
                    return Err(bad(&key("num_requests"), "1 to 4294967296 requests per stage", &n.to_string()));
                }
                LoadStage { concurrency: c, num_requests: n, ..LoadStage::default() }
            }
            _ => {
                if let Some(c) = st.concurrency_level.or(st.num_requests) {
                    return Err(bad(&key("concurrency_level"), "absent unless type is concurrent", &c.to_string()));
                }
                let r = st.rate_per_s.ok_or_else(|| bad(&key("rate_per_s"), "a rate in requests/s", "none"))?;
                let d = st.duration_s.ok_or_else(|| bad(&key("duration_s"), "seconds", "none"))?;
                let rate = rate_milli(r).map_err(|e| bad(&key("rate_per_s"), &e, &num(r)))?;
                let ms = milli_exact(d, 1e9).map_err(|e| bad(&key("duration_s"), &format!("seconds: {e}"), &num(d)))?;
                if rate == 0 {
                    return Err(bad(&key("rate_per_s"), "a rate > 0 requests/s", &num(r)));
                }
                if ms == 0 || ms > MAX_STAGE_MS {
                    return Err(bad(&key("duration_s"), "more than 0 s, at most 2^40 ms", &num(d)));
                }
                let stage = LoadStage { rate_milli_per_s: rate, duration_ms: ms, ..LoadStage::default() };
                // int(rate x duration), the core's count, in integers: it never overflows, but a
                // stage of more than 2^32 requests is refused naming the stage
                let n = stage.requests(kind);
                if n > MAX_STAGE_REQUESTS {
                    return Err(bad(
                        &format!("load.stages[{}]", i + 1),
                        "at most 4294967296 requests per stage (rate_per_s x duration_s)",
                        &format!("{} x {} s = {n} requests", num(r), num(d)),
                    ));
                }
                stage
            }
        };
    }
    let ms = |v: f64, key: &str| milli_exact(v, 1e9).map_err(|e| bad(key, &format!("seconds: {e}"), &num(v)));
    let max_in_flight = match l.num_workers {
        None => 0,
        Some(0) => return Err(bad("load.num_workers", "at least 1", "0")),
        Some(n) => n.saturating_mul(l.worker_max_concurrency),
    };
    if l.worker_max_concurrency == 0 {
        return Err(bad("load.worker_max_concurrency", "at least 1", "0"));
    }
    if max_in_flight > MAX_CLIENT_SLOTS {
        return Err(bad(
            "load.num_workers",
            "num_workers x worker_max_concurrency at most 1048576 requests in flight",
            &format!("{} x {}", l.num_workers.unwrap_or(0), l.worker_max_concurrency),
        ));
    }
    let spec = LoadSpec {
        kind,
        stages,
        stages_len: l.stages.len() as u32,
        interval_ms: ms(l.interval_s, "load.interval_s")?,
        max_in_flight,
        think_ms: ms(l.think_time_s, "load.think_time_s")?,
        timeout_ms: match l.request_timeout_s {
            None => 0,
            Some(t) => match ms(t, "load.request_timeout_s")? {
                0 => return Err(bad("load.request_timeout_s", "a positive number of seconds", &num(t))),
                v => v,
            },
        },
        gateway_max_in_flight: match l.gateway_max_in_flight {
            None => 0,
            Some(0) => return Err(bad("load.gateway_max_in_flight", "at least 1 request (absent: no limit)", "0")),
            Some(n) => n,
        },
        seed: w.seed,
        restart_data: match l.data_order.as_str() {
            "restart" => true,
            "continue" => false,
            other => return Err(bad("load.data_order", "\"restart\" or \"continue\"", other)),
        },
    };
    spec.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
    Ok(spec)
}
