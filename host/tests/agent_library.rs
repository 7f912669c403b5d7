//! The library API (`brokerlab::agent::Runner`) as a program uses it: the example
//! `examples/agent_library.rs` is compiled into this test and run, and a tool whose answer is
//! lost is re-called with the same key, never paid twice.

#[allow(dead_code)]
#[path = "../../examples/agent_library.rs"]
mod example;

use std::sync::{Arc, Mutex};

use brokerlab::agent::{Outcome, Runner, Task, Tool, ToolClass, ToolDef, ToolReply, ToolRequest};
use example::{Clerk, Ledger, Refund};

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("brokerlab-agent-library-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The example runs to completion; run again on the same log it resumes the finished task and
/// calls nothing.
#[test]
fn the_library_example_runs_and_resumes_without_repeating() {
    let d = scratch("example");
    let (answer, ledger) = example::run_in(&d).unwrap();
    assert_eq!(answer, "Done: refunded 4999 cents on o-42.");
    let l = ledger.lock().unwrap();
    assert_eq!(l.applied.len(), 1);
    assert_eq!(l.applied[0].0.len(), 32, "the key: {:?}", l.applied[0]);
    let (again, ledger2) = example::run_in(&d).unwrap();
    assert_eq!(again, answer);
    assert_eq!(ledger2.lock().unwrap().applied.len(), 0, "a finished task called its tool again");
    let _ = std::fs::remove_dir_all(&d);
}

/// Applies the refund, then loses the first answer (as a timeout after the server committed).
struct LosesFirstAnswer(Refund, u32);

impl Tool for LosesFirstAnswer {
    fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply {
        let r = self.0.call(req);
        self.1 += 1;
        if self.1 == 1 { ToolReply::Unknown("the answer was lost".into()) } else { r }
    }
}

/// Sends an email (no key to dedupe by), then loses the first answer.
struct Mailer(Arc<Mutex<u32>>);

impl Tool for Mailer {
    fn call(&mut self, _req: &ToolRequest<'_>) -> ToolReply {
        let mut sent = self.0.lock().unwrap();
        *sent += 1;
        if *sent == 1 { ToolReply::Unknown("the answer was lost".into()) } else { ToolReply::Done("sent".into()) }
    }
}

/// An idempotent tool whose outcome is unknown is re-called with the same key (the ledger
/// dedupes: one refund, one replay); on a non-idempotent tool it pauses for review, and after a
/// human's `mark-done` the task completes without a second email.
#[test]
fn an_unknown_outcome_follows_the_class_rule() {
    let d = scratch("class");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let def = ToolDef::new("refund", ToolClass::Idempotent);
    let mut runner = Runner::builder()
        .db(d.join("tasks.sqlite"))
        .world(d.join("world"))
        .model(Clerk)
        .tool(def, LosesFirstAnswer(Refund(ledger.clone()), 0))
        .build()
        .unwrap();
    let out = runner.run(&Task::new("refund-o-7", "refund o-7")).unwrap();
    assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
    let l = ledger.lock().unwrap();
    assert_eq!((l.applied.len(), l.replays), (1, 1));
    drop(l);

    let sent = Arc::new(Mutex::new(0u32));
    let def = ToolDef::new("refund", ToolClass::NonIdempotent);
    let mut runner = Runner::builder()
        .db(d.join("tasks2.sqlite"))
        .world(d.join("world"))
        .model(Clerk)
        .tool(def, Mailer(sent.clone()))
        .build()
        .unwrap();
    let out = runner.run(&Task::new("refund-o-8", "refund o-8")).unwrap();
    assert!(matches!(out, Outcome::NeedsReview { step: 0, .. }), "{out:?}");
    // resumed: still waiting for a human, the tool not called again
    let out = runner.resume("refund-o-8").unwrap();
    assert!(matches!(out, Outcome::NeedsReview { step: 0, .. }), "{out:?}");
    assert_eq!(*sent.lock().unwrap(), 1);
    runner.review("refund-o-8", 0, brokerlab::agent::Decision::MarkDone).unwrap();
    let out = runner.resume("refund-o-8").unwrap();
    assert!(matches!(out, Outcome::Completed { .. }), "{out:?}");
    assert_eq!(*sent.lock().unwrap(), 1);
    let _ = std::fs::remove_dir_all(&d);
}
