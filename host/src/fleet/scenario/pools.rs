//! `[[fleet.pool]]`: a heterogeneous fleet's pools (docs/MODEL.md, "Heterogeneous pools") as the
//! core's pool table. Each key a pool leaves out is the `[fleet]` / `[fleet.engine]` value, read
//! by the core when the fleet is built (so a flag that changes the fleet's value changes every
//! pool that does not set its own). A pool naming its own `profile` starts from that profile's
//! coefficients: the fleet's coefficient keys do not apply to it (as `--prefill-profile`).

use brokerlab_core::fleet::{Pool, PoolRole};

use super::engine::{EngineSettings, StepModel};
use super::schema::PoolToml;
use crate::error::{CliError, CliResult};

/// The pool table of `list` over the fleet's engine settings `fleet`, each pool's engine checked
/// (errors name `fleet.pool[i].key`, 1-based). The table lives for the rest of the process (the
/// core's configuration borrows it: a few hundred bytes per pool, once per scenario read).
pub fn table(list: &[PoolToml], fleet: &EngineSettings, origin: &str) -> CliResult<&'static [Pool]> {
    if list.is_empty() {
        return Err(CliError::bad_input(format!("{origin}: `fleet.pool`: expected at least one pool")));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let key = |k: &str| format!("{origin}: `fleet.pool[{}].{}`", i + 1, k.replace('-', "_"));
        let bad = |k: &str, expected: &str, got: &str| {
            CliError::bad_input(format!("{}: {got:?}: expected {expected}", key(k)))
        };
        if t.name.is_empty() {
            return Err(bad("name", "a non-empty name", &t.name));
        }
        if list[..i].iter().any(|o| o.name == t.name) {
            return Err(bad("name", "a name no other pool has", &t.name));
        }
        if t.pods == 0 {
            return Err(bad("pods", "at least 1 pod", "0"));
        }
        let role = match t.role.as_deref() {
            None => PoolRole::Aggregated,
            Some(r) => PoolRole::parse(r).ok_or_else(|| bad("role", "\"aggregated\", \"prefill\" or \"decode\"", r))?,
        };
        if t.capacity == Some(0) {
            return Err(bad("capacity", "at least 1 block", "0"));
        }
        let step_model = match t.step_model.as_deref() {
            None => None,
            Some(m) => Some(StepModel::parse(m).ok_or_else(|| bad("step_model", "\"linear\" or \"physics\"", m))?),
        };
        let coefficients = [t.t_overhead_ns, t.t_prefill_token_ns, t.t_decode_seq_ns, t.t_kv_token_ns];
        let own_cost = t.profile.is_some() || step_model.is_some() || coefficients.iter().any(Option::is_some);
        // The pool's settings: the fleet's without P/D, the pool's keys over them.
        let mut s = EngineSettings {
            prefill_pods: None,
            prefill_capacity: None,
            prefill_profile: None,
            pd_decider: None,
            pd_threshold_tokens: None,
            pd_link_bytes_per_s: None,
            pd_link_latency_ns: None,
            ..fleet.clone()
        };
        if t.profile.is_some() || step_model.is_some() {
            // its own profile's coefficients
            s.profile = None;
            s.step_model = None;
            s.t_overhead_ns = None;
            s.t_prefill_token_ns = None;
            s.t_decode_seq_ns = None;
            s.t_kv_token_ns = None;
        }
        let own = EngineSettings {
            profile: t.profile.clone(),
            step_model,
            max_num_seqs: t.max_num_seqs,
            max_num_batched_tokens: t.max_num_batched_tokens,
            t_overhead_ns: t.t_overhead_ns,
            t_prefill_token_ns: t.t_prefill_token_ns,
            t_decode_seq_ns: t.t_decode_seq_ns,
            t_kv_token_ns: t.t_kv_token_ns,
            cpu_capacity: t.cpu_capacity,
            pcie_bytes_per_s: t.pcie_bytes_per_s,
            kv_bytes_per_token: t.kv_bytes_per_token,
            ..EngineSettings::default()
        };
        let s = s.overridden_by(&own);
        let e = s.config(&key)?;
        // KV bytes per token: the pool's key, else the fleet's, else (a pool with its own
        // profile) that profile's
        let kv = t.kv_bytes_per_token.or_else(|| {
            (fleet.kv_bytes_per_token.is_none() && (t.profile.is_some() || step_model.is_some()))
                .then_some(e.offload.kv_bytes_per_token)
        });
        out.push(Pool {
            name: Box::leak(t.name.clone().into_boxed_str()),
            pods: t.pods,
            role,
            capacity_blocks: t.capacity,
            max_num_seqs: t.max_num_seqs,
            max_num_batched_tokens: t.max_num_batched_tokens,
            cost: own_cost.then_some((e.profile, e.cost)),
            cpu_capacity: t.cpu_capacity,
            pcie_bytes_per_s: t.pcie_bytes_per_s,
            kv_bytes_per_token: kv,
        });
    }
    Ok(Box::leak(out.into_boxed_slice()))
}
