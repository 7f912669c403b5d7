//! The exactly-once checker: a task's spec, its log and the tools' own files, compared.

use brokerlab_core::runner::{Decision, End, Event, Record, idempotency_key};
use serde::Serialize;

use super::super::backend::TaskStore;
use super::super::backend::fold_in;
use super::super::spec::Spec;
use super::super::world::{ToolFile, World};
use crate::task::error::TaskResult;

/// What [`check_task`] found for one task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskCheck {
    /// The log ends with `completed` after all steps.
    pub completed: bool,
    /// Side effects applied more than once, or outside the spec (must be 0).
    pub duplicates: u64,
    /// Steps whose effect or record is missing (must be 0).
    pub lost: u64,
    /// Payment calls the tool received again and deduplicated by key.
    pub deduplicated: u64,
    /// Calls a tool refused because they carried an old fencing token.
    pub fenced_calls: u64,
    /// `needs-review` records (non-idempotent steps sent to review).
    pub needs_review: u64,
    /// Reviews recorded `mark-done`.
    pub reviews_mark_done: u64,
    /// Reviews recorded `retry`.
    pub reviews_retry: u64,
    /// What was wrong, one line each.
    pub problems: Vec<String>,
}

/// The steps whose tool intent a fork copied from its parent (the records between `forked-from`
/// and the fork's first `lease`): their calls are the parent's, never the fork's (the fork rule).
/// Empty for a task that is not a fork.
pub fn copied_intent_steps(recs: &[Record]) -> Vec<u16> {
    if !recs.iter().any(|r| matches!(r.event, Event::ForkedFrom { .. })) {
        return Vec::new();
    }
    recs.iter()
        .take_while(|r| !matches!(r.event, Event::LeaseAcquired { .. }))
        .filter_map(|r| match r.event {
            Event::ToolIntent { step, .. } => Some(step),
            _ => None,
        })
        .collect()
}

/// Checks task `id` against its spec (stored in the log database), its log and the tools' own
/// files: every payment key applied exactly once (the key the core derives for that step), every
/// email step applied exactly once, each step has a model response and a result (or a
/// `mark-done` review of the email), the task completed, and no call outside the spec's tool
/// steps.
pub fn check_task(store: &dyn TaskStore, world: &mut World, id: &str) -> TaskResult<TaskCheck> {
    let mut c = TaskCheck::default();
    let row = store.task_or_err(id)?;
    let spec = Spec::stored(&row.spec, &store.name(), id)?;
    let recs = store.records(id)?;
    let st = fold_in(&store.name(), id, &recs)?;
    let n = spec.steps.len();
    c.completed = st.end == Some(End::Completed) && st.step as usize == n;
    if !c.completed {
        c.problems.push(format!("{id}: not completed (at step {} of {n})", st.step));
    }
    let (mut model, mut result, mut mark_done) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
    for r in &recs {
        let bump = |v: &mut Vec<u32>, s: u16| {
            if let Some(x) = v.get_mut(s as usize) {
                *x += 1;
            }
        };
        match &r.event {
            Event::ModelResponse { step, .. } => bump(&mut model, *step),
            Event::ToolResult { step, .. } => bump(&mut result, *step),
            Event::NeedsReview { .. } => c.needs_review += 1,
            Event::ReviewDecision { step, decision: Decision::MarkDone } => {
                c.reviews_mark_done += 1;
                bump(&mut mark_done, *step);
            }
            Event::ReviewDecision { decision: Decision::Retry, .. } => c.reviews_retry += 1,
            _ => {}
        }
    }
    // a fork's copied intents are its parent's calls: the parent's own check counts them once,
    // and the fork must not have made them
    let copied = copied_intent_steps(&recs);
    let payments = world.calls(ToolFile::Payments, id)?;
    let emails = world.calls(ToolFile::Emails, id)?;
    c.deduplicated = payments.iter().filter(|r| !r.applied && !r.fenced()).count() as u64;
    c.fenced_calls = payments.iter().chain(emails.iter()).filter(|r| r.fenced()).count() as u64;
    for (i, s) in spec.steps.iter().enumerate() {
        let step = i as u16;
        if model[i] != 1 {
            c.lost += u64::from(model[i] == 0);
            c.problems.push(format!("{id} step {i}: {} model responses in the log, expected 1", model[i]));
        }
        let tool = s.tool.as_deref();
        if tool.is_some() && result[i] + mark_done[i] == 0 {
            c.lost += 1;
            c.problems.push(format!("{id} step {i}: no result (and no mark-done review) in the log"));
        }
        let (file, rows) = match tool {
            Some("payment") => (ToolFile::Payments, &payments),
            Some("send_email") => (ToolFile::Emails, &emails),
            _ => continue,
        };
        let file_name = file.file();
        let applied = rows.iter().filter(|r| r.step == step && r.applied).count() as u64;
        if copied.contains(&step) {
            if applied > 0 {
                c.duplicates += applied;
                c.problems.push(format!(
                    "{id} step {i}: {file_name} applied {applied} call(s) by the fork for its parent's intent"
                ));
            }
            continue;
        }
        match applied {
            0 => {
                c.lost += 1;
                c.problems.push(format!("{id} step {i}: {file_name} has no applied call"));
            }
            1 => {}
            k => {
                c.duplicates += k - 1;
                c.problems.push(format!("{id} step {i}: {file_name} applied {k} calls"));
            }
        }
        if file == ToolFile::Payments {
            let key = idempotency_key(id, i as u16);
            let bad = rows.iter().filter(|r| r.step == step && r.key.as_deref() != Some(key.as_str())).count();
            if bad > 0 {
                c.duplicates += bad as u64;
                c.problems.push(format!("{id} step {i}: {bad} payment call(s) with a key other than {key}"));
            }
        }
    }
    // a side effect on a step that has no such tool in the spec
    for (f, rows) in [(ToolFile::Payments, &payments), (ToolFile::Emails, &emails)] {
        let (file, tool) = (f.file(), f.tool());
        for r in rows.iter().filter(|r| r.applied) {
            let expected = spec.steps.get(usize::from(r.step)).is_some_and(|s| s.tool.as_deref() == Some(tool));
            if !expected {
                c.duplicates += 1;
                c.problems.push(format!("{id}: {file} applied a call for step {}, which is not a {tool} step", r.step));
            }
        }
    }
    Ok(c)
}
