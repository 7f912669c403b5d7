//! Issue 21's reproductions on SQLite, end to end through the real binary: a fork of a live
//! parent at an open intent, a false "log corruption" on a healthy running task, concurrent forks
//! (ids and reports), the fault hooks refused on a production database, corrupt lease and spec
//! rows, and a read-only file for the commands that only read. Each failed on the code before
//! the issue's fix (docs/RUNNER.md says how each was checked).

use std::process::Child;
use std::time::{Duration, Instant};

use brokerlab::sys::stop_or_continue;

mod support;
use support::{Dir, Out, is_stopped, wait_child, wait_for};

/// Step 0 sends an email, step 1 pays.
const WW: &str = r#"
id = "ww"
[[step]]
model = "Tell the customer"
tool = "send_email"
args = { to = "a@example.com" }
[[step]]
model = "Pay"
tool = "payment"
args = { amount = 5, to = "acct-1" }
"#;

const EMAILS: &str = "emails.sqlite";

/// The seq of `task`'s first record of `kind`.
fn seq_of(d: &Dir, task: &str, kind: &str) -> i64 {
    d.db().query_row("SELECT min(seq) FROM log WHERE task_id=?1 AND kind=?2", [task, kind], |r| r.get(0)).unwrap()
}

/// Issue 21, section 2: the parent parks right before its email leaves (inside its own 60 s
/// lease) and a fork is cut at that intent. Before the fix the fork paused for review showing
/// "0 applied", `--retry` sent it, and the woken parent sent it again: two emails for one intent.
/// Now the fork is refused while the parent's runner may still make the call, saying why; once
/// the parent has finished, the same fork is made, and its review shows the parent's call.
#[test]
fn a_fork_of_a_live_parent_at_an_open_intent_cannot_act_on_it() {
    let d = Dir::faults("live-fork");
    d.write("spec.toml", WW);
    let parent = d.spawn_env(&["run", "spec.toml", "--lease-ms", "60000"], &[("BROKERLAB_PAUSE_AT", "calling:1")]);
    let pid = parent.id();
    wait_for("the parent to park before its email", || is_stopped(pid));
    let at = seq_of(&d, "ww", "tool-intent").to_string();
    let o = d.run_env(&["fork", "ww", "--at", &at], &[("BROKERLAB_BUSY_MS", "300")]);
    // before the fix: exit 3, "0 applied"; a `--retry` then sent the email a second time
    o.expect(1);
    let e = o.stderr();
    assert!(e.contains("cannot fork") && e.contains("send_email") && e.contains("already being run by"), "{e}");
    assert_eq!(d.kinds("ww.f1"), Vec::<String>::new(), "no fork was created");
    assert_eq!(d.applied(EMAILS, "ww", 0), 0);
    // the parent wakes, sends (inside its lease) and finishes
    assert!(stop_or_continue(pid, false));
    wait_child(parent).expect(0);
    assert_eq!(d.applied(EMAILS, "ww", 0), 1);
    // now the fork is made; its review shows the parent's applied call and its result
    let o = d.run(&["fork", "ww", "--at", &at]);
    o.expect(3);
    let out = o.stdout();
    assert!(out.contains("task ww.f1: forked from ww") && out.contains("1 applied"), "{out}");
    assert!(out.contains("after the cut: tool-result"), "{out}");
    d.run(&["review", "ww.f1", "--step", "0", "--mark-done"]).expect(0);
    d.run(&["resume", "ww.f1"]).expect(0);
    assert_eq!(d.applied(EMAILS, "ww", 0) + d.applied(EMAILS, "ww.f1", 0), 1, "{:?}", d.calls_full(EMAILS));
    // the fork took the parent's lease for a moment: one `lease` record more, nothing else
    assert_eq!(d.kinds("ww").iter().filter(|k| *k == "lease").count(), 2, "{:?}", d.kinds("ww"));
}

/// Steps alternating payments and emails: every step a side effect in a tool's file.
fn busy_spec(id: &str, steps: usize) -> String {
    let mut s = format!("id = \"{id}\"\n");
    for i in 0..steps {
        let (tool, args) = if i % 2 == 0 {
            ("payment", format!("{{ amount = {i}, to = \"a\" }}"))
        } else {
            ("send_email", "{ to = \"b\" }".into())
        };
        s.push_str(&format!("[[step]]\nmodel = \"step {i}\"\ntool = \"{tool}\"\nargs = {args}\n"));
    }
    s
}

/// Issue 21, section 3: `task resume` of a task that another runner is running normally must say
/// so (exit 1), never "log corruption" (exit 2). Before the fix the witness compared a log read
/// before the lease with the tools' files read later, and a call made in between (its intent
/// committed after the read) looked like a lost log tail: 8 of 150 tries on SQLite.
#[test]
fn resuming_a_running_task_never_reports_a_false_corruption() {
    let d = Dir::new("false-corruption");
    d.write("spec.toml", &busy_spec("busy", 400));
    let mut runner = d.spawn(&["run", "spec.toml", "--lease-ms", "60000"]);
    wait_for("the runner's first call", || !d.calls(EMAILS).is_empty() || !d.calls("payments.sqlite").is_empty());
    let (mut tries, mut held) = (0, 0);
    let t = Instant::now();
    while runner.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(20) {
        let o = d.run(&["resume", "busy"]);
        tries += 1;
        match o.code() {
            1 if o.stderr().contains("already being run by") => held += 1,
            0 => {} // finished meanwhile
            c => panic!("try {tries}: exit {c}: {}{}", o.stdout(), o.stderr()),
        }
    }
    let o = wait_child(runner);
    o.expect(0);
    eprintln!("{tries} resumes of a running task, {held} refused as held, none reported corruption");
    assert!(held >= 20, "the resumes ran while the task did ({held} of {tries})");
}

/// Issue 21, section 4: eight `task fork P --at 4` at once used to make two forks, six commands
/// reporting a fork another process had made. Now each creates its own (the id is allocated in
/// the transaction that creates it) and reports that one.
#[test]
fn concurrent_forks_each_create_and_report_their_own() {
    let d = Dir::new("fork-race");
    d.write("spec.toml", WW);
    d.run(&["run", "spec.toml"]).expect(0);
    let kids: Vec<Child> = (0..8).map(|_| d.spawn(&["fork", "ww", "--at", "4"])).collect();
    let outs: Vec<Out> = kids.into_iter().map(wait_child).collect();
    let mut ids: Vec<String> = outs
        .iter()
        .map(|o| {
            o.expect(0);
            let line = o.stdout().lines().find(|l| l.contains("forked from")).unwrap_or_default().to_string();
            line.split_whitespace().nth(1).unwrap_or_default().trim_end_matches(':').to_string()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "each command reports a fork of its own: {ids:?}");
    let n: i64 = d.db().query_row("SELECT count(*) FROM tasks WHERE parent='ww'", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 8);
    for id in &ids {
        assert_eq!(d.kinds(id).last().map(String::as_str), Some("completed"), "{id}");
    }
}

/// Forks cut inside a dead parent's email call, taken while the parent is reviewed: neither the
/// forks nor the review meet a `UNIQUE constraint failed: log.task_id, log.seq` any more (the
/// lease re-reads a log that moved on under it).
#[test]
fn forks_and_a_review_at_once_never_collide_on_the_log() {
    let d = Dir::faults("fork-review");
    d.write("spec.toml", WW);
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "tool-applied:1")]).expect(137);
    d.run(&["resume", "ww"]).expect(3);
    let at = seq_of(&d, "ww", "tool-intent").to_string();
    let mut kids: Vec<Child> = (0..6).map(|_| d.spawn(&["fork", "ww", "--at", &at])).collect();
    kids.push(d.spawn(&["review", "ww", "--step", "0", "--mark-done"]));
    let outs: Vec<Out> = kids.into_iter().map(wait_child).collect();
    for o in &outs {
        assert!(!o.stderr().contains("UNIQUE"), "{}", o.stderr());
        assert!(matches!(o.code(), 0 | 3), "exit {}: {}{}", o.code(), o.stdout(), o.stderr());
    }
    let n: i64 = d.db().query_row("SELECT count(*) FROM tasks WHERE parent='ww'", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 6);
    assert_eq!(d.applied(EMAILS, "ww", 0), 1);
}

/// Issue 21, section 5: the fault hooks act only on a fault-injection database. On any other, a
/// set variable is refused (exit 2, naming it) before anything is written, by every command; an
/// existing log cannot be marked afterwards.
#[test]
fn fault_hooks_are_refused_on_a_production_database() {
    let d = Dir::new("hooks");
    d.write("spec.toml", WW);
    for (var, val) in [
        ("BROKERLAB_CRASH_AT", "calling:1"),
        ("BROKERLAB_PAUSE_AT", "calling:1"),
        ("BROKERLAB_AS_HOST", "elsewhere/"),
        ("BROKERLAB_UNFENCED_TOOLS", "send_email"),
    ] {
        let o = d.run_env(&["run", "spec.toml"], &[(var, val)]);
        o.expect(2);
        assert!(o.stderr().contains(var) && o.stderr().contains("not a fault-injection database"), "{}", o.stderr());
        assert!(!d.path("tasks.sqlite").exists(), "{var}: nothing was created");
    }
    d.run(&["run", "spec.toml"]).expect(0);
    for args in [&["list"][..], &["inspect", "ww"][..], &["resume", "ww"][..]] {
        let o = d.run_env(args, &[("BROKERLAB_AS_HOST", "elsewhere/")]);
        o.expect(2);
        assert!(o.stderr().contains("BROKERLAB_AS_HOST"), "{}", o.stderr());
    }
    let o = d.run(&["init", "--fault-injection"]);
    o.expect(2);
    assert!(o.stderr().contains("cannot be marked"), "{}", o.stderr());
    let marks: i64 =
        d.db().query_row("SELECT count(*) FROM meta WHERE key='fault_injection'", [], |r| r.get(0)).unwrap();
    assert_eq!(marks, 0);
    // a fault-injection database: the hook acts
    let f = Dir::faults("hooks-on");
    f.write("spec.toml", WW);
    f.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "calling:1")]).expect(137);
    f.run(&["init", "--fault-injection"]).expect(0);
}

/// Issue 21, section 4: a corrupt lease row (an expiry 1,400 years ahead; before the fix exit 1
/// "expires in 43460588147.4s") and a corrupt spec row (bytes that are not text; before: `list`
/// 0, `resume` 1 "invalid utf-8") are corruption: exit 2 naming the table and the task, and
/// nothing is written.
#[test]
fn corrupt_lease_and_spec_rows_exit_2_naming_the_row() {
    let d = Dir::faults("corrupt-rows");
    d.write("spec.toml", WW);
    // stopped after its first step's commit: a resume takes the lease
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "after-commit:2")]).expect(137);
    d.write("b.toml", &WW.replace("\"ww\"", "\"b\""));
    d.run(&["run", "b.toml"]).expect(0);
    let c = d.db();
    c.execute("UPDATE leases SET expires_at_ms = expires_at_ms + 43460588147400 WHERE task_id='ww'", []).unwrap();
    let rows = |c: &rusqlite::Connection| -> i64 { c.query_row("SELECT count(*) FROM log", [], |r| r.get(0)).unwrap() };
    let before = rows(&c);
    for args in [&["resume", "ww"][..], &["inspect", "ww"][..], &["list"][..], &["suspend", "ww"][..]] {
        let o = d.run(args);
        o.expect(2);
        assert!(o.stderr().contains("corrupt leases row of task \"ww\""), "{args:?}: {}", o.stderr());
    }
    c.execute("UPDATE leases SET epoch = -3, expires_at_ms = 0 WHERE task_id='ww'", []).unwrap();
    let o = d.run(&["resume", "ww"]);
    o.expect(2);
    assert!(o.stderr().contains("negative epoch"), "{}", o.stderr());
    c.execute("UPDATE leases SET epoch = 'many' WHERE task_id='ww'", []).unwrap();
    d.run(&["resume", "ww"]).expect(2);
    c.execute("UPDATE tasks SET spec = CAST(X'FFFE00' AS TEXT) WHERE task_id='b'", []).unwrap();
    for args in [&["resume", "b"][..], &["inspect", "b"][..]] {
        let o = d.run(args);
        o.expect(2);
        assert!(
            o.stderr().contains("corrupt tasks row of task \"b\"") && o.stderr().contains("spec"),
            "{}",
            o.stderr()
        );
    }
    let o = d.run(&["list"]);
    o.expect(2);
    assert!(o.stdout().contains("CORRUPT") && o.stderr().contains("tasks row of task \"b\""), "{}", o.stderr());
    // a spec that is text but not the one the log's digest names
    c.execute("UPDATE tasks SET spec = replace((SELECT spec FROM tasks WHERE task_id='ww'), 'Pay', 'Pay more')", [])
        .unwrap();
    let o = d.run(&["list"]);
    o.expect(2);
    assert!(o.stderr().contains("digest"), "{}", o.stderr());
    assert_eq!(rows(&c), before, "nothing was written");
}

/// Issue 21, section 4: a log file this user may read but not write, with no `-wal` beside it:
/// `list` and `inspect` read it (before the fix: exit 2 "cannot open for writing"); a command
/// that writes still says it cannot.
#[test]
fn a_read_only_file_serves_the_commands_that_only_read() {
    let d = Dir::new("read-only");
    d.write("spec.toml", WW);
    d.run(&["run", "spec.toml"]).expect(0);
    assert!(!d.path("tasks.sqlite-wal").exists(), "the last connection removed the -wal");
    let bytes = std::fs::read(d.path("tasks.sqlite")).unwrap();
    let as_reader = |args: &[&str]| -> Out {
        let mut c = d.cmd(args);
        if is_root() {
            // root ignores permissions: run as `nobody`, who may read the directory but not write
            use std::os::unix::process::CommandExt;
            c.uid(65534).gid(65534);
        }
        Out(c.output().unwrap())
    };
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &std::path::Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    set(&d.path("tasks.sqlite"), 0o444);
    set(&d.0, 0o555);
    let list = as_reader(&["list"]);
    let inspect = as_reader(&["inspect", "ww"]);
    let resume = as_reader(&["resume", "ww"]);
    set(&d.0, 0o755);
    set(&d.path("tasks.sqlite"), 0o644);
    list.expect(0);
    assert!(list.stdout().contains("ww") && list.stdout().contains("completed"), "{}", list.stdout());
    inspect.expect(0);
    assert!(inspect.stdout().contains("completed"), "{}", inspect.stdout());
    resume.expect(2);
    assert!(resume.stderr().contains("tasks.sqlite"), "{}", resume.stderr());
    assert_eq!(std::fs::read(d.path("tasks.sqlite")).unwrap(), bytes, "not a byte changed");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// The runner's cases of docs/BAD_INPUT.md, each tested in this file or in
/// task_pg_promises.rs.
const CASES: &[&str] = &[
    "task-hook-production",
    "task-mark-existing",
    "task-corrupt-lease",
    "task-corrupt-spec",
    "task-wrong-password",
    "task-starting-up",
    "task-fork-live-parent",
    "task-read-only-file",
];

#[test]
fn the_runner_table_in_bad_input_md_lists_exactly_these_cases() {
    let doc =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/BAD_INPUT.md")).unwrap();
    let rows: Vec<&str> =
        doc.lines().filter_map(|l| l.strip_prefix("| task-")).filter_map(|l| l.split(' ').next()).collect();
    let rows: Vec<String> = rows.iter().map(|r| format!("task-{r}")).collect();
    assert_eq!(rows, CASES, "docs/BAD_INPUT.md's task rows vs this list");
}
