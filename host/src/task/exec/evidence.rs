//! What a finished, suspended or paused run prints: the outcome, and for a step waiting for
//! review the world's evidence about its call.

#[allow(clippy::wildcard_imports)]
use super::*;

/// What the world shows about a step waiting for review: the calls the tool's own file holds for
/// it (made by the task, or by the ancestors its in-flight intent was copied from) and, for a
/// fork, the parents' records for that step after the cut.
pub(super) struct Evidence {
    file: String,
    received: usize,
    applied: usize,
    lines: Vec<String>,
}

pub(super) fn evidence(
    store: &dyn TaskStore,
    tools: &mut Toolbox,
    id: &str,
    step: u16,
    tool: &str,
) -> TaskResult<Evidence> {
    let f = ToolFile::of_tool(tool).filter(|_| tools.is_builtin(tool));
    let world = &mut tools.world;
    let mut ev = Evidence {
        file: f.map_or_else(|| world.name(), |f| world.place(f)),
        received: 0,
        applied: 0,
        lines: Vec::new(),
    };
    let mut task = id.to_string();
    // the task itself, then each parent whose prefix (up to the cut) holds an intent for `step`
    for _depth in 0..64 {
        if let Some(f) = f {
            for c in world.calls(f, &task)?.into_iter().filter(|c| c.step == step) {
                ev.received += 1;
                ev.applied += usize::from(c.applied);
                ev.lines.push(format!(
                    "{}: call by {} (token {}): {}",
                    world.call_place(f),
                    c.task,
                    c.epoch,
                    if c.applied {
                        "applied".to_string()
                    } else {
                        format!("not applied ({})", c.reason.unwrap_or_default())
                    }
                ));
            }
        }
        let Some(row) = store.task(&task)? else { break };
        let (Some(parent), Some(cut)) = (row.parent, row.parent_seq) else { break };
        let precs = store.records(&parent)?;
        let copied = |r: &&Record| r.event.step() == Some(step) && matches!(r.event, Event::ToolIntent { .. });
        if !precs.iter().take_while(|r| i64::from(r.seq) <= cut).any(|r| copied(&r)) {
            break;
        }
        for r in precs.iter().filter(|r| i64::from(r.seq) > cut && r.event.step() == Some(step)) {
            ev.lines.push(format!("parent {parent} seq {} after the cut: {} {}", r.seq, r.kind().name(), r.event));
        }
        task = parent;
    }
    Ok(ev)
}

pub(super) fn report(
    store: &dyn TaskStore,
    id: &str,
    st: &TaskState,
    stop: Stop,
    tools: &mut Toolbox,
) -> TaskResult<i32> {
    match stop {
        Stop::Completed if st.answered => {
            let answer = store.records(id)?.iter().rev().find_map(|r| match &r.event {
                Event::Answer { text, .. } => Some(text.to_string()),
                _ => None,
            });
            say!(
                "task {id}: completed ({} steps, {} records); the model's answer: {:?}",
                st.step,
                st.next_seq,
                answer.unwrap_or_default()
            );
            Ok(0)
        }
        Stop::Completed => {
            say!("task {id}: completed ({} steps, {} records)", st.steps, st.next_seq);
            Ok(0)
        }
        Stop::Suspended => {
            say!("task {id}: suspended before step {} (resume with `brokerlab task resume {id}`)", st.step);
            Ok(0)
        }
        Stop::Failed => {
            say!("task {id}: failed");
            Ok(EXIT_FAILURE)
        }
        Stop::NeedsReview { step } => {
            let tool = tool_at(st);
            if !tools.is_builtin(&tool) {
                // a tool of the spec or of a program keeps its own records, which the runner
                // cannot read
                let key = match &st.phase {
                    Phase::Review { call } => {
                        brokerlab_core::runner::key_for(id, step, call).map(|k| format!(", key {k}"))
                    }
                    _ => None,
                };
                say!(
                    "task {id}: paused: step {step} ({tool}) has an intent in the log but no result: whether the call \
                     acted is unknown, and the runner will not repeat it on its own.\n  the runner cannot read the \
                     tool's own records: look there for the call of {id}/{step}{} (the Brokerlab-Call header or \
                     BROKERLAB_STEP), sent with fencing token(s) up to {}.",
                    key.unwrap_or_default(),
                    st.epoch()
                );
                say!(
                    "  decide: `brokerlab task review {id} --step {step} --mark-done` (it happened) or `--retry` (it \
                     did not; the call is sent again{}), then `brokerlab task resume {id}`",
                    if matches!(&st.phase, Phase::Review { call } if call.class == ToolClass::Idempotent) {
                        ", with the same key"
                    } else {
                        ""
                    }
                );
                return Ok(EXIT_NEEDS_REVIEW);
            }
            let ev = evidence(store, tools, id, step, &tool)?;
            let reading = match ev.applied {
                0 => "no applied call: it did not happen as far as the tool can tell (`--retry` sends it)".to_string(),
                1 => "one applied call: it happened (`--mark-done`)".to_string(),
                n => format!("{n} applied calls"),
            };
            say!(
                "task {id}: paused: step {step} ({tool}) has an intent in the log but no result: it may or may not \
                 have been sent, and it is not idempotent, so the runner will not repeat it on its own.\n  the \
                 tool's own file ({}) shows {} call(s) received and {} applied for this step: {reading}.",
                ev.file,
                ev.received,
                ev.applied
            );
            for l in &ev.lines {
                say!("    {l}");
            }
            say!(
                "  decide: `brokerlab task review {id} --step {step} --mark-done` (it happened) or `--retry` (it did \
                 not), then `brokerlab task resume {id}`"
            );
            Ok(EXIT_NEEDS_REVIEW)
        }
    }
}

/// The tool of the current step's call (`-` when none).
pub fn tool_at(st: &TaskState) -> String {
    match &st.phase {
        Phase::Review { call } | Phase::InFlight { call, .. } | Phase::Tool { call } => call.tool.to_string(),
        Phase::Model => "-".into(),
    }
}
