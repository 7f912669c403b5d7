//! Models: what a model is asked ([`ModelRequest`]: the conversation so far, rebuilt from the log),
//! what it may answer ([`ModelTurn`]), and the trait a model implements ([`Model`]).

use brokerlab_core::runner::{Decision, Event, Record};

use super::tool::ToolDef;

/// The id this runner gives the tool call of `step` when it shows the conversation to a model:
/// `s` and the step in 8 digits (9 characters, letters and digits: what every server accepts,
/// Mistral's templates included). Never the model's own id: a model mints a new one each time it
/// is asked (and some servers return one id for every call), so the log cannot depend on it.
pub fn call_id(step: u16) -> String {
    format!("s{step:08}")
}

/// One finished step of the conversation, as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The step.
    pub step: u16,
    /// The model's text for the step.
    pub text: String,
    /// The tool call it made, if any, with its outcome.
    pub call: Option<TurnCall>,
}

/// A step's tool call and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCall {
    /// This runner's id for it ([`call_id`]).
    pub id: String,
    /// The tool.
    pub tool: String,
    /// The arguments, canonical JSON.
    pub arguments: String,
    /// The outcome.
    pub outcome: TurnOutcome,
}

/// What came of a step's tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The tool's result (`ok`: it reported success).
    Result {
        /// Whether it reported success.
        ok: bool,
        /// Its text (at most the log's `MAX_RESULT_TEXT` bytes).
        output: String,
    },
    /// The outcome was unknown and a human recorded that the call happened (`task review
    /// --mark-done`); the tool's text was never recorded.
    ConfirmedByReview,
}

impl TurnOutcome {
    /// The text a model is shown as the tool's answer.
    pub fn text(&self) -> String {
        match self {
            TurnOutcome::Result { ok: true, output } => output.clone(),
            TurnOutcome::Result { ok: false, output } => format!("error: {output}"),
            TurnOutcome::ConfirmedByReview => {
                "done (the answer was lost; a human review confirmed that the call was made)".to_string()
            }
        }
    }
}

/// The conversation so far, from a task's records: one [`Turn`] per step the log has finished
/// (a model response and, for a tool step, its result or a `mark-done` review). A step whose call
/// has no outcome yet is not included (the model is never asked while a call is open).
pub fn turns(records: &[Record]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    let mut open: Option<Turn> = None;
    for r in records {
        match &r.event {
            Event::ModelResponse { step, text, call } => {
                let t = Turn {
                    step: *step,
                    text: text.to_string(),
                    call: call.as_ref().map(|c| TurnCall {
                        id: call_id(*step),
                        tool: c.tool.to_string(),
                        arguments: String::from_utf8_lossy(&c.args).into_owned(),
                        outcome: TurnOutcome::ConfirmedByReview,
                    }),
                };
                if t.call.is_none() {
                    out.push(t);
                } else {
                    open = Some(t);
                }
            }
            Event::ToolResult { step, ok, output } => {
                if let Some(mut t) = open.take_if(|t| t.step == *step) {
                    if let Some(c) = t.call.as_mut() {
                        c.outcome = TurnOutcome::Result { ok: *ok, output: output.to_string() };
                    }
                    out.push(t);
                }
            }
            Event::ReviewDecision { step, decision: Decision::MarkDone } => {
                if let Some(t) = open.take_if(|t| t.step == *step) {
                    out.push(t);
                }
            }
            Event::Answer { step, text } => out.push(Turn { step: *step, text: text.to_string(), call: None }),
            _ => {}
        }
    }
    out
}

/// What a model is asked for one step.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The task.
    pub task: &'a str,
    /// The step asked for.
    pub step: u16,
    /// The most steps the task may take (the step `max_steps - 1` is its last).
    pub max_steps: u16,
    /// The system message, if any.
    pub system: Option<&'a str>,
    /// The user's request (the first user message).
    pub prompt: &'a str,
    /// The steps before this one, from the log.
    pub history: &'a [Turn],
    /// The tools it may call.
    pub tools: &'a [ToolDef],
}

/// A model's answer for one step.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelTurn {
    /// Call a tool (one per step).
    Call {
        /// Text beside the call (may be empty).
        text: String,
        /// The tool's name.
        tool: String,
        /// The arguments: a JSON object.
        arguments: serde_json::Value,
    },
    /// The final answer: the task completes.
    Answer {
        /// The answer.
        text: String,
    },
    /// A step without a call that does not end the task (the scripted model's plain steps).
    Text {
        /// The text.
        text: String,
    },
}

/// Why a model gave no usable answer. Nothing is recorded for the step: a later run asks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// It did not answer, or not usably, after the retries (exit 1: try again later).
    Unavailable(String),
    /// It refused the request as wrong: a bad key, an unknown model, a malformed request (exit 2:
    /// fix the spec or the environment).
    Refused(String),
}

/// A model the runner can ask. Implement it to plug your own model in
/// ([`crate::agent::RunnerBuilder::model`]).
///
/// It is asked only when the step's answer is not in the log yet. Asked again for the same step
/// (after a crash before its answer was recorded), a model may answer differently: that is safe,
/// since no tool call of the step exists before its answer is durable, and the log keeps the one
/// answer the run acted on.
pub trait Model {
    /// Answers one step.
    fn reply(&mut self, req: &ModelRequest<'_>) -> Result<ModelTurn, ModelError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use brokerlab_core::runner::{Args, ModelText, ResultText, TaskId, ToolCall, ToolClass, ToolName};

    #[test]
    fn the_conversation_is_the_logs_finished_steps() {
        let t = TaskId::try_from("t").unwrap();
        let call = ToolCall {
            tool: ToolName::try_from("pay").unwrap(),
            class: ToolClass::Idempotent,
            args: Args::from_slice(br#"{"a":1}"#).unwrap(),
        };
        let evs = [
            Event::Created { spec_digest: 0, steps: 4 },
            Event::ModelResponse { step: 0, text: ModelText::try_from("paying").unwrap(), call: Some(call.clone()) },
            Event::ToolIntent {
                step: 0,
                tool: call.tool.clone(),
                class: call.class,
                key: None,
                args: call.args.clone(),
            },
            Event::ToolResult { step: 0, ok: true, output: ResultText::try_from("paid").unwrap() },
            Event::ModelResponse { step: 1, text: ModelText::new(), call: Some(call.clone()) },
            Event::NeedsReview { step: 1 },
            Event::ReviewDecision { step: 1, decision: Decision::MarkDone },
            Event::ModelResponse { step: 2, text: ModelText::new(), call: Some(call) },
        ];
        let recs: Vec<Record> = evs.into_iter().enumerate().map(|(i, e)| Record::new(t.clone(), i as u32, e)).collect();
        let ts = turns(&recs);
        assert_eq!(ts.len(), 2, "step 2's call is open: not shown");
        assert_eq!(ts[0].call.as_ref().unwrap().id, "s00000000");
        assert_eq!(ts[0].call.as_ref().unwrap().outcome.text(), "paid");
        assert_eq!(ts[1].call.as_ref().unwrap().outcome, TurnOutcome::ConfirmedByReview);
    }
}
