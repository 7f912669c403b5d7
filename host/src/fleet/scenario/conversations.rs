//! `[workload.conversations]` of a scenario file as the core's [`ConversationSpec`]
//! (inference-perf's `data.conversation_replay`; docs/MODEL.md, "Conversation replay"). Every
//! error names the key.

use brokerlab_core::fleet::conversation::{ConversationSpec, Dist, DistKind, MAX_LEN_TOKENS, RESET_CONTEXT_TOKENS};
use brokerlab_core::fleet::loadgen::{LoadKind, LoadSpec};
use brokerlab_core::fleet::workload::{
    DocOrder, Layout, MAX_OUTPUT_CHOICES, MAX_STAGES, Popularity, Stage, SuffixScope, WorkloadSpec,
};

use super::schema::{ConversationsToml, DistToml, WorkloadToml};
use super::{milli_exact, num};
use crate::error::{CliError, CliResult};

type Bad<'a> = &'a dyn Fn(&str, &str, &str) -> CliError;

/// The [`WorkloadSpec`] a conversation scenario carries: its seed, nothing else used. The
/// synthetic workload's keys must be absent.
pub(super) fn placeholder(w: &WorkloadToml, _origin: &str, bad: Bad<'_>) -> CliResult<WorkloadSpec> {
    let set = [
        ("workload.requests", w.requests.is_some()),
        ("workload.tenants", w.tenants.is_some()),
        ("workload.prefix_tokens", w.prefix_tokens.is_some()),
        ("workload.suffix_tokens", w.suffix_tokens.is_some()),
        ("workload.output_tokens", w.output_tokens.is_some()),
        ("workload.output_tokens_choices", w.output_tokens_choices.is_some()),
        ("workload.rate_per_s", w.rate_per_s.is_some()),
        ("workload.stages", w.stages.is_some()),
        ("workload.rag", w.rag.is_some()),
        ("workload.burst", w.burst.is_some()),
        ("workload.suffix_scope", w.suffix_scope.is_some()),
    ];
    if let Some((key, _)) = set.iter().find(|(_, s)| *s) {
        return Err(bad(key, "absent with [workload.conversations] (the conversations are the data set)", "a value"));
    }
    Ok(WorkloadSpec {
        seed: w.seed,
        requests: 1,
        tenants: 1,
        users_per_tenant: 1,
        prefix_tokens: 0,
        suffix_min_tokens: 16,
        suffix_max_tokens: 16,
        output_min_tokens: 1,
        output_max_tokens: 1,
        output_choices: [0; MAX_OUTPUT_CHOICES],
        output_choices_len: 0,
        popularity: Popularity::Uniform,
        rate_milli_per_s: 0,
        layout: Layout::StablePrefixFirst,
        header_tokens: 0,
        rag_docs: 0,
        rag_doc_tokens: 0,
        rag_per_request: 0,
        rag_order: DocOrder::Random,
        burst_rate_milli_per_s: 0,
        burst_start_ms: 0,
        burst_ms: 0,
        suffix_scope: SuffixScope::Request,
        stages: [Stage::default(); MAX_STAGES],
        stages_len: 0,
    })
}

/// One distribution table, `key` its scenario key.
fn dist(d: &DistToml, key: &str, bad: Bad<'_>) -> CliResult<Dist> {
    let k = |f: &str| format!("{key}.{f}");
    let milli = |v: Option<f64>, f: &str| -> CliResult<u64> {
        let v = v.ok_or_else(|| bad(&k(f), "a number", "none"))?;
        milli_exact(v, MAX_LEN_TOKENS as f64).map_err(|e| bad(&k(f), &e, &num(v)))
    };
    let bound = |v: Option<u64>, f: &str| v.ok_or_else(|| bad(&k(f), "a whole number of tokens", "none"));
    let absent = |set: bool, f: &str, why: &str| if set { Err(bad(&k(f), why, "a value")) } else { Ok(()) };
    let out = match d.dist.as_str() {
        "fixed" => {
            absent(d.sd.is_some(), "sd", "absent with dist fixed")?;
            absent(d.min.is_some() || d.max.is_some(), "min", "absent with dist fixed (it is never clipped)")?;
            let m = milli(d.mean, "mean")?;
            Dist { kind: DistKind::Fixed, mean_milli: m, sd_milli: 0, min: m / 1000, max: m / 1000 }
        }
        "normal" | "lognormal" => Dist {
            kind: if d.dist == "normal" { DistKind::Normal } else { DistKind::Lognormal },
            mean_milli: milli(d.mean, "mean")?,
            sd_milli: milli(d.sd, "sd")?,
            min: bound(d.min, "min")?,
            max: bound(d.max, "max")?,
        },
        "uniform" => {
            absent(d.mean.is_some() || d.sd.is_some(), "mean", "absent with dist uniform (min and max only)")?;
            Dist {
                kind: DistKind::Uniform,
                mean_milli: 0,
                sd_milli: 0,
                min: bound(d.min, "min")?,
                max: bound(d.max, "max")?,
            }
        }
        other => return Err(bad(&k("dist"), "\"fixed\", \"normal\", \"lognormal\" or \"uniform\"", other)),
    };
    if out.min > out.max {
        return Err(bad(&k("min"), "at most max", &out.min.to_string()));
    }
    if out.kind == DistKind::Lognormal && out.mean_milli == 0 {
        return Err(bad(&k("mean"), "above 0 with dist lognormal", "0"));
    }
    Ok(out)
}

/// `[workload.conversations]` as the core's spec; `[load]` must be `concurrent`.
pub(super) fn spec(
    c: &ConversationsToml,
    seed: u64,
    max_model_len: Option<u64>,
    load: Option<&LoadSpec>,
    origin: &str,
    bad: Bad<'_>,
) -> CliResult<ConversationSpec> {
    match load {
        Some(l) if l.kind == LoadKind::Concurrent => {}
        Some(_) => return Err(bad("load.type", "\"concurrent\" with [workload.conversations]", "another type")),
        None => return Err(bad("load", "a [load] of type concurrent with [workload.conversations]", "none")),
    }
    let key = |f: &str| format!("workload.conversations.{f}");
    let mut s = ConversationSpec::defaults(seed, c.count);
    s.shared_system_tokens = c.shared_system_prompt_tokens;
    if let Some(d) = &c.dynamic_system_prompt_tokens {
        s.dynamic_system_tokens = dist(d, &key("dynamic_system_prompt_tokens"), bad)?;
    }
    if let Some(d) = &c.turns {
        s.turns = dist(d, &key("turns"), bad)?;
    }
    if let Some(d) = &c.input_tokens_per_turn {
        s.input_tokens = dist(d, &key("input_tokens_per_turn"), bad)?;
    }
    if let Some(d) = &c.output_tokens_per_turn {
        s.output_tokens = dist(d, &key("output_tokens_per_turn"), bad)?;
    }
    // the safety reset restarts a turn at the system prompt: a longer system prompt than the
    // reset's context would restart every turn (and outgrow the turn buffer)
    let system = s.shared_system_tokens.saturating_add(s.dynamic_system_tokens.upper());
    if system > RESET_CONTEXT_TOKENS {
        return Err(bad(
            &format!(
                "{} + {} (its largest value)",
                key("shared_system_prompt_tokens"),
                key("dynamic_system_prompt_tokens")
            ),
            &format!(
                "a system prompt of at most {RESET_CONTEXT_TOKENS} tokens (the context at which inference-perf's safety reset restarts a conversation at its system prompt)"
            ),
            &system.to_string(),
        ));
    }
    if let Some(m) = max_model_len {
        if m == 0 {
            return Err(bad("fleet.engine.max_model_len", "at least 1 token", "0"));
        }
        s.max_model_len = m;
    }
    s.validate().map_err(|e| super::key_error(origin, e))?;
    Ok(s)
}
