//! End-to-end tests of `brokerlab task ...` through the real binary: exit codes, errors, crash at
//! every checkpoint then resume (exactly once, counted in the tools' own files), suspend, lease
//! refusal and fencing, the review flow, fork, bench.

use std::time::{Duration, Instant};

use rusqlite::Connection;

mod support;
use support::Dir;

const SPEC: &str = r#"
id = "inv"
[[step]]
model = "Look up the customer"
tool = "lookup"
args = { q = "acct-1" }
[[step]]
model = "Pay the first invoice"
tool = "payment"
args = { amount = 10, to = "acct-1" }
[[step]]
model = "Tell the customer"
tool = "send_email"
args = { to = "a@example.com" }
[[step]]
model = "Pay the second invoice"
tool = "payment"
args = { amount = 20, to = "acct-1" }
[[step]]
model = "All done"
"#;

/// Payment steps of SPEC and the email step.
const PAY_STEPS: [i64; 2] = [1, 3];
const MAIL_STEP: i64 = 2;

#[track_caller]
fn assert_exactly_once(d: &Dir, id: &str) {
    let pays = d.calls("payments.sqlite");
    for step in PAY_STEPS {
        let applied: Vec<_> = pays.iter().filter(|c| c.1 == id && c.2 == step && c.3 == 1).collect();
        assert_eq!(applied.len(), 1, "payment step {step} applied {} times: {pays:?}", applied.len());
        // every call of this step carried the same key
        let keys: std::collections::BTreeSet<_> =
            pays.iter().filter(|c| c.1 == id && c.2 == step).map(|c| &c.0).collect();
        assert_eq!(keys.len(), 1, "{pays:?}");
    }
    let mails = d.calls("emails.sqlite");
    let sent = mails.iter().filter(|c| c.1 == id && c.2 == MAIL_STEP && c.3 == 1).count();
    assert_eq!(sent, 1, "email sent {sent} times: {mails:?}");
}

/// Resumes until done, reviewing a paused email step honestly from emails.sqlite.
fn finish(d: &Dir, id: &str) {
    for _ in 0..5 {
        let o = d.run(&["resume", id]);
        match o.code() {
            0 => return,
            3 => {
                let step = MAIL_STEP.to_string();
                let sent = d.calls("emails.sqlite").iter().any(|c| c.1 == id && c.2 == MAIL_STEP && c.3 == 1);
                let decision = if sent { "--mark-done" } else { "--retry" };
                d.run(&["review", id, "--step", &step, decision]).expect(0);
            }
            _ => panic!("resume failed: {} {}", o.stdout(), o.stderr()),
        }
    }
    panic!("task {id} did not finish");
}

#[test]
fn run_completes_and_running_again_resumes_instead_of_restarting() {
    let d = Dir::new("run");
    d.write("spec.toml", SPEC);
    let o = d.run(&["run", "spec.toml"]);
    o.expect(0);
    assert!(o.stdout().contains("task inv: completed"), "{}", o.stdout());
    assert_exactly_once(&d, "inv");
    let o = d.run(&["run", "spec.toml"]);
    o.expect(0);
    assert!(o.stdout().contains("already completed"), "{}", o.stdout());
    assert_exactly_once(&d, "inv");
    assert_eq!(d.calls("payments.sqlite").len(), 2, "no second copy ran");
    let o = d.run(&["inspect", "inv"]);
    o.expect(0);
    for k in ["created", "lease", "model", "tool-intent", "tool-result", "completed"] {
        assert!(o.stdout().contains(k), "{k}: {}", o.stdout());
    }
    let o = d.run(&["list"]);
    o.expect(0);
    assert!(o.stdout().contains("inv") && o.stdout().contains("completed"), "{}", o.stdout());
    // a different spec under the same id is refused, nothing changes
    d.write("other.toml", &SPEC.replace("All done", "All done!"));
    let before = d.kinds("inv");
    let o = d.run(&["run", "other.toml"]);
    o.expect(2);
    assert!(o.stderr().contains("already exists with a different spec"), "{}", o.stderr());
    assert_eq!(d.kinds("inv"), before);
}

#[test]
fn bad_specs_unknown_ids_and_bad_flags_exit_2() {
    let d = Dir::new("bad");
    d.write("typo.toml", "id = \"x\"\n[[step]]\nmodel = \"m\"\ntoool = \"payment\"\n");
    let o = d.run(&["run", "typo.toml"]);
    o.expect(2);
    assert!(o.stderr().contains("toool") && o.stderr().contains("typo.toml"), "{}", o.stderr());
    assert!(!d.path("tasks.sqlite").exists(), "a bad spec creates nothing");
    d.write("tool.toml", "[[step]]\nmodel = \"m\"\ntool = \"rm_rf\"\n");
    let o = d.run(&["run", "tool.toml"]);
    o.expect(2);
    assert!(o.stderr().contains("step[0].tool"), "{}", o.stderr());
    let o = d.run(&["run", "missing.toml"]);
    o.expect(2);
    assert!(o.stderr().contains("missing.toml"), "{}", o.stderr());

    d.write("spec.toml", SPEC);
    d.run(&["run", "spec.toml"]).expect(0);
    for args in [
        vec!["resume", "nope"],
        vec!["inspect", "nope"],
        vec!["suspend", "nope"],
        vec!["review", "nope", "--step", "1", "--retry"],
        vec!["fork", "nope", "--at", "1"],
    ] {
        let o = d.run(&args);
        o.expect(2);
        assert!(o.stderr().contains("\"nope\""), "{args:?}: {}", o.stderr());
    }
    d.run(&["review", "inv", "--step", "1"]).expect(2); // neither --mark-done nor --retry
    d.run(&["review", "inv", "--step", "1", "--mark-done", "--retry"]).expect(2);
    let o = d.run(&["review", "inv", "--step", "1", "--mark-done"]);
    o.expect(2);
    assert!(o.stderr().contains("not waiting for review"), "{}", o.stderr());
    let o = d.run(&["fork", "inv", "--at", "999"]);
    o.expect(2);
    let o = d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "sometimes")]);
    o.expect(2);
    assert!(o.stderr().contains("BROKERLAB_CRASH_AT"), "{}", o.stderr());
    let o = d.run(&["list", "--db", "absent.sqlite"]);
    o.expect(2);
    assert!(o.stderr().contains("absent.sqlite"), "{}", o.stderr());
}

#[test]
fn corrupt_and_locked_databases_exit_2_and_lose_nothing() {
    let d = Dir::new("corrupt");
    d.write("spec.toml", SPEC);
    let junk: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(d.path("junk.sqlite"), &junk).unwrap();
    let o = d.run(&["run", "spec.toml", "--db", "junk.sqlite"]);
    o.expect(2);
    assert!(o.stderr().contains("junk.sqlite"), "{}", o.stderr());
    assert_eq!(std::fs::read(d.path("junk.sqlite")).unwrap(), junk, "the file is untouched");
    // another SQLite database is not taken over either
    Connection::open(d.path("other.sqlite")).unwrap().execute_batch("CREATE TABLE mine(x)").unwrap();
    let o = d.run(&["run", "spec.toml", "--db", "other.sqlite"]);
    o.expect(2);
    assert!(o.stderr().contains("not a brokerlab task log"), "{}", o.stderr());

    // a record whose bytes were damaged is reported with its task and seq
    d.run(&["run", "spec.toml"]).expect(0);
    let before = d.kinds("inv");
    d.db().execute("UPDATE log SET payload = x'B70105000000000000' WHERE task_id='inv' AND seq=3", []).unwrap();
    let o = d.run(&["inspect", "inv"]);
    o.expect(2);
    assert!(o.stderr().contains("seq 3") && o.stderr().contains("corrupt"), "{}", o.stderr());
    assert_eq!(d.kinds("inv"), before);

    // locked: another process holds the write lock
    let d2 = Dir::new("locked");
    d2.write("spec.toml", SPEC);
    d2.run(&["run", "spec.toml"]).expect(0);
    d2.write("b.toml", &SPEC.replace("id = \"inv\"", "id = \"b\""));
    let holder = d2.db();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let o = d2.run_env(&["run", "b.toml"], &[("BROKERLAB_BUSY_MS", "200")]);
    o.expect(2);
    assert!(o.stderr().contains("tasks.sqlite") && o.stderr().contains("locked"), "{}", o.stderr());
    holder.execute_batch("COMMIT").unwrap();
    drop(holder);
    d2.run(&["run", "b.toml"]).expect(0);
    assert_eq!(d2.kinds("inv").last().map(String::as_str), Some("completed"));
}

/// Kill (in-process crash injection: exit 137, no cleanup) at every crash point of the task,
/// resume, and check from the tools' own files that each payment key applied exactly once and the
/// email went out exactly once.
#[test]
fn crash_at_every_point_then_resume_applies_each_payment_exactly_once() {
    let mut covered = 0;
    let mut window = 0;
    let mut reviews = 0;
    for n in 1.. {
        let d = Dir::faults(&format!("crash{n}"));
        d.write("spec.toml", SPEC);
        let o = d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", &n.to_string())]);
        if o.code() == 0 {
            assert!(n >= 20, "only {n} crash points?");
            break;
        }
        assert_eq!(o.code(), 137, "{} {}", o.stdout(), o.stderr());
        assert!(o.stderr().contains("crash injected"), "{}", o.stderr());
        covered += 1;
        if o.stderr().contains("tool-applied") {
            window += 1;
        }
        let o = d.run(&["resume", "inv"]);
        if o.code() == 3 {
            reviews += 1;
        }
        finish(&d, "inv");
        assert_exactly_once(&d, "inv");
        assert_eq!(d.kinds("inv").last().map(String::as_str), Some("completed"));
    }
    eprintln!("covered {covered} crash points, {window} in the tool window, {reviews} went to review");
    assert!(window >= 4, "every tool call has a window point");
    assert!(reviews >= 2, "a crash around the email sends it to review");
}

use support::{wait_child, wait_for};

#[test]
fn suspend_then_resume_end_to_end() {
    let d = Dir::faults("suspend");
    d.write("spec.toml", SPEC);
    let child = d.spawn(&["run", "spec.toml", "--step-delay-ms", "150"]);
    wait_for("the first payment", || d.calls("payments.sqlite").len() == 1);
    let o = d.run(&["suspend", "inv"]);
    o.expect(0);
    assert!(o.stdout().contains("suspend requested"), "{}", o.stdout());
    let o = wait_child(child);
    o.expect(0);
    assert!(o.stdout().contains("suspended before step"), "{}", o.stdout());
    let kinds = d.kinds("inv");
    assert_eq!(kinds.last().map(String::as_str), Some("suspended"));
    assert!(d.run(&["list"]).stdout().contains("suspended"));
    // suspending an idle task twice is fine; resume finishes
    d.run(&["suspend", "inv"]).expect(0);
    let o = d.run(&["resume", "inv"]);
    o.expect(0);
    assert!(o.stdout().contains("completed"), "{}", o.stdout());
    assert_exactly_once(&d, "inv");
    let kinds = d.kinds("inv");
    assert_eq!(kinds.iter().filter(|k| *k == "suspended").count(), 1);
    assert_eq!(kinds.iter().filter(|k| *k == "resumed").count(), 1);
    // an idle task is suspended directly
    d.write("b.toml", &SPEC.replace("id = \"inv\"", "id = \"b\""));
    // after the email's result was committed: no call in flight
    d.run_env(&["run", "b.toml"], &[("BROKERLAB_CRASH_AT", "after-commit:4")]).expect(137);
    d.run(&["suspend", "b"]).expect(0);
    assert_eq!(d.kinds("b").last().map(String::as_str), Some("suspended"));
    d.run(&["resume", "b"]).expect(0);
}

/// The rule for a step whose tool result has not arrived: the runner does not abandon the call;
/// it waits for the result, records it, and only then writes the suspended marker.
#[test]
fn suspend_during_a_tool_call_waits_for_its_result() {
    let d = Dir::new("suspend-inflight");
    d.write("spec.toml", SPEC);
    let child = d.spawn(&["run", "spec.toml", "--step-delay-ms", "700"]);
    // the payment tool has applied the call and is "still working" for 700 ms
    wait_for("the payment", || d.calls("payments.sqlite").len() == 1);
    let t = Instant::now();
    d.run(&["suspend", "inv"]).expect(0);
    let o = wait_child(child);
    o.expect(0);
    assert!(t.elapsed() >= Duration::from_millis(200), "the runner waited for the result");
    let kinds = d.kinds("inv");
    let n = kinds.len();
    assert_eq!(&kinds[n - 3..], ["tool-intent", "tool-result", "suspended"], "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "needs-review"));
    d.run(&["resume", "inv"]).expect(0);
    assert_exactly_once(&d, "inv");
    assert_eq!(d.calls("payments.sqlite").len(), 2, "no payment repeated: {:?}", d.calls("payments.sqlite"));
}

#[test]
fn second_runner_is_refused_and_a_dead_runner_is_taken_over_at_once() {
    let d = Dir::faults("lease");
    d.write("spec.toml", SPEC);
    let child = d.spawn(&["run", "spec.toml", "--step-delay-ms", "150"]);
    wait_for("the first runner's lease", || d.kinds("inv").len() >= 2);
    let o = d.run(&["resume", "inv"]);
    o.expect(1);
    assert!(o.stderr().contains("already being run by"), "{}", o.stderr());
    let o = d.run(&["run", "spec.toml"]);
    o.expect(1);
    wait_child(child).expect(0);
    assert_exactly_once(&d, "inv");

    // killed holder with a long lease: the next runner takes over at once (same host, pid gone)
    d.write("b.toml", &SPEC.replace("id = \"inv\"", "id = \"b\""));
    d.run_env(&["run", "b.toml", "--lease-ms", "60000"], &[("BROKERLAB_CRASH_AT", "tool-applied:2")]).expect(137);
    let t = Instant::now();
    let o = d.run(&["resume", "b", "--lease-ms", "60000"]);
    assert!(o.code() == 0 || o.code() == 3, "{}", o.stderr());
    assert!(t.elapsed() < Duration::from_secs(10), "no waiting for the 60 s lease");
}

/// Fencing: when another runner takes the lease (here: the lease row is moved to a new epoch, as a
/// runner on another host would after expiry), the old runner's next append is refused inside the
/// append transaction, and it writes nothing more.
#[test]
fn stale_epoch_appends_are_refused() {
    let d = Dir::new("fence");
    d.write("spec.toml", SPEC);
    let child = d.spawn(&["run", "spec.toml", "--step-delay-ms", "300"]);
    wait_for("the first payment", || d.calls("payments.sqlite").len() == 1);
    let c = d.db();
    c.execute(
        "UPDATE leases SET epoch = epoch + 1, owner = 'otherhost/x:1:1', host = 'otherhost/x' WHERE task_id='inv'",
        [],
    )
    .unwrap();
    let rows_at_bump: i64 = c.query_row("SELECT count(*) FROM log WHERE task_id='inv'", [], |r| r.get(0)).unwrap();
    let o = wait_child(child);
    o.expect(1);
    assert!(o.stderr().contains("lost the lease"), "{}", o.stderr());
    let rows: i64 = c.query_row("SELECT count(*) FROM log WHERE task_id='inv'", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, rows_at_bump, "the fenced runner wrote nothing");
    // the lease is held by the other (live, unexpired, other host): a new runner here is refused
    let o = d.run(&["resume", "inv"]);
    o.expect(1);
    // once it expires, a new runner takes over and finishes with the same keys
    c.execute("UPDATE leases SET expires_at_ms = 0 WHERE task_id='inv'", []).unwrap();
    d.run(&["resume", "inv"]).expect(0);
    assert_exactly_once(&d, "inv");
}

#[test]
fn needs_review_flow_end_to_end() {
    let d = Dir::faults("review");
    d.write("spec.toml", SPEC);
    // crash after the email was sent, before its result was recorded
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "tool-applied:3")]).expect(137);
    let o = d.run(&["resume", "inv"]);
    o.expect(3);
    assert!(o.stdout().contains("--step 2") && o.stdout().contains("emails.sqlite"), "{}", o.stdout());
    // still paused: resume does not re-send, exit 3 again
    d.run(&["resume", "inv"]).expect(3);
    assert_eq!(d.calls("emails.sqlite").len(), 1);
    let o = d.run(&["inspect", "inv"]);
    assert!(o.stdout().contains("needs-review"), "{}", o.stdout());
    d.run(&["review", "inv", "--step", "2", "--mark-done"]).expect(0);
    d.run(&["resume", "inv"]).expect(0);
    assert_exactly_once(&d, "inv");

    // crash after the intent, before the email left: the human says retry, it is sent once
    let d = Dir::faults("review-retry");
    d.write("spec.toml", SPEC);
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "before-tool:3")]).expect(137);
    d.run(&["resume", "inv"]).expect(3);
    assert!(d.calls("emails.sqlite").is_empty());
    d.run(&["review", "inv", "--step", "2", "--retry"]).expect(0);
    d.run(&["resume", "inv"]).expect(0);
    assert_exactly_once(&d, "inv");
}

#[test]
fn fork_runs_a_different_continuation_with_its_own_keys() {
    let d = Dir::new("fork");
    d.write("spec.toml", SPEC);
    d.run(&["run", "spec.toml"]).expect(0);
    let parent_keys: Vec<_> = d.calls("payments.sqlite").into_iter().map(|c| c.0).collect();
    // seq 5 is the model response of step 1 (0 created, 1 lease, 2-4 step 0)
    let alt = SPEC.replace("id = \"inv\"", "id = \"inv-alt\"").replace("amount = 20", "amount = 99");
    d.write("alt.toml", &alt);
    let o = d.run(&["fork", "inv", "--at", "5", "--spec", "alt.toml"]);
    o.expect(0);
    assert!(o.stdout().contains("task inv-alt: forked from inv at seq 5"), "{}", o.stdout());
    let kinds = d.kinds("inv-alt");
    assert_eq!(&kinds[..6], ["created", "forked-from", "model", "tool-intent", "tool-result", "model"], "{kinds:?}");
    let pays = d.calls("payments.sqlite");
    let fork_pays: Vec<_> = pays.iter().filter(|c| c.1 == "inv-alt").collect();
    assert_eq!(fork_pays.len(), 2, "{pays:?}");
    assert!(fork_pays.iter().all(|c| c.3 == 1 && !parent_keys.contains(&c.0)), "new keys: {pays:?}");
    let c = d.db();
    let args: String = c
        .query_row(
            "SELECT summary FROM log WHERE task_id='inv-alt' AND kind='tool-intent' ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(args.contains("99"), "the new continuation ran: {args}");
    // a default fork id; a cut right after step 1's payment intent copies the intent: the fork
    // re-calls it with the parent's key, so the tool dedupes it (the fork rule)
    let o = d.run(&["fork", "inv", "--at", "6"]);
    o.expect(0);
    assert!(o.stdout().contains("task inv.f1") && o.stdout().contains("parent's key"), "{}", o.stdout());
    let kinds = d.kinds("inv.f1");
    assert_eq!(
        &kinds[..7],
        ["created", "forked-from", "model", "tool-intent", "tool-result", "model", "tool-intent"],
        "{kinds:?}"
    );
    let pays = d.calls("payments.sqlite");
    let step1: Vec<_> = pays.iter().filter(|c| c.1 == "inv.f1" && c.2 == 1).collect();
    assert_eq!(step1.len(), 1, "{pays:?}");
    assert!(step1[0].3 == 0 && Some(&step1[0].0) == parent_keys.first(), "parent's key, deduplicated: {pays:?}");
    let o = d.run(&["inspect", "inv.f1"]);
    assert!(o.stdout().contains("forked from: inv"), "{}", o.stdout());
}

#[test]
fn bench_reports_json() {
    let d = Dir::new("bench");
    let dir = d.path("b");
    let o = d.run(&["bench", "--steps", "60", "--tasks", "3", "--json", "--dir", dir.to_str().unwrap()]);
    o.expect(0);
    let v: serde_json::Value = serde_json::from_str(o.stdout().trim()).unwrap();
    for k in ["steps_per_s", "raw_commits_per_s", "ratio", "group_steps_per_s", "checkpoints_per_commit"] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    assert_eq!(v["commits"].as_u64().unwrap(), 61, "one commit per step + the completion: {v}");
    d.run(&["bench", "--steps", "0"]).expect(2);
}

/// A real SIGKILL (`Child::kill`), with the killed runner left unreaped (a zombie): the next
/// runner takes over at once despite a 60 s lease, and the task finishes exactly once.
#[test]
fn sigkill_then_immediate_takeover() {
    let d = Dir::new("sigkill");
    d.write("spec.toml", SPEC);
    let mut child = d.spawn(&["run", "spec.toml", "--step-delay-ms", "200", "--lease-ms", "60000"]);
    wait_for("the first payment", || d.calls("payments.sqlite").len() == 1);
    child.kill().unwrap(); // SIGKILL; not waited for yet: the pid stays as a zombie
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    let o = d.run(&["resume", "inv", "--lease-ms", "60000"]);
    assert!(o.code() == 0 || o.code() == 3, "{} {}", o.stdout(), o.stderr());
    assert!(t.elapsed() < Duration::from_secs(10), "took over without waiting for the lease");
    let _ = child.wait();
    finish(&d, "inv");
    assert_exactly_once(&d, "inv");
}
