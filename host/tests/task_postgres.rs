//! The runner on PostgreSQL (issue 17), end to end through the real binary against a real server
//! that each test starts (support/pg.rs: initdb in a temp dir, postgres on a loopback port, fsync
//! on), each scenario in its own database. The tools' own files stay SQLite in the test's
//! directory: exactly-once is counted there, from outside the log.

use std::process::Child;
use std::time::{Duration, Instant};

use brokerlab::sys::stop_or_continue;
use brokerlab::task::pg::session_key;

mod support;
use support::pg::PgServer;
use support::{Dir, Out, is_stopped, wait_child, wait_for};

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

const PAY_STEPS: [i64; 2] = [1, 3];
const MAIL_STEP: i64 = 2;

/// A scratch directory (spec, the tools' files) and a database on the server, selected through
/// `$BROKERLAB_DB` (the `--db` flag is tested on its own).
struct PgDir<'a> {
    d: Dir,
    url: String,
    db: String,
    server: &'a PgServer,
}

impl<'a> PgDir<'a> {
    fn new(server: &'a PgServer, name: &str) -> PgDir<'a> {
        let db = name.replace('-', "_");
        let url = server.create_db(&db);
        PgDir { d: Dir::new(&format!("pg-{name}")), url, db, server }
    }
    /// A fault-injection database (`task init --fault-injection`): the fault hooks act on it.
    fn faults(server: &'a PgServer, name: &str) -> PgDir<'a> {
        let p = PgDir::new(server, name);
        p.run(&["init", "--fault-injection"]).expect(0);
        p
    }
    fn env<'b>(&'b self, extra: &[(&'b str, &'b str)]) -> Vec<(&'b str, &'b str)> {
        let mut e = vec![("BROKERLAB_DB", self.url.as_str())];
        e.extend_from_slice(extra);
        e
    }
    fn run(&self, args: &[&str]) -> Out {
        self.d.run_env(args, &self.env(&[]))
    }
    fn run_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        self.d.run_env(args, &self.env(extra))
    }
    fn spawn_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Child {
        self.d.spawn_env(args, &self.env(extra))
    }
    fn client(&self) -> postgres::Client {
        self.server.client(&self.db)
    }
    fn kinds(&self, id: &str) -> Vec<String> {
        let mut c = self.client();
        match c.query("SELECT kind FROM log_records WHERE task_id=$1 ORDER BY seq", &[&id]) {
            Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
            Err(_) => vec![], // no schema yet
        }
    }
    fn count(&self, sql: &str) -> i64 {
        self.client().query_one(sql, &[]).unwrap().get(0)
    }

    #[track_caller]
    fn assert_exactly_once(&self, id: &str) {
        let pays = self.d.calls("payments.sqlite");
        for step in PAY_STEPS {
            let applied = pays.iter().filter(|c| c.1 == id && c.2 == step && c.3 == 1).count();
            assert_eq!(applied, 1, "payment step {step} applied {applied} times: {pays:?}");
            let keys: std::collections::BTreeSet<_> =
                pays.iter().filter(|c| c.1 == id && c.2 == step).map(|c| &c.0).collect();
            assert_eq!(keys.len(), 1, "{pays:?}");
        }
        let mails = self.d.calls("emails.sqlite");
        let sent = mails.iter().filter(|c| c.1 == id && c.2 == MAIL_STEP && c.3 == 1).count();
        assert_eq!(sent, 1, "email sent {sent} times: {mails:?}");
        assert_eq!(self.kinds(id).last().map(String::as_str), Some("completed"));
        assert!(!self.d.path("tasks.sqlite").exists(), "the log went to PostgreSQL, not the SQLite default");
    }

    /// Resumes until done, reviewing a paused email step honestly from emails.sqlite.
    fn finish(&self, id: &str) {
        for _ in 0..5 {
            let o = self.run(&["resume", id]);
            match o.code() {
                0 => return,
                3 => {
                    let sent = self.d.calls("emails.sqlite").iter().any(|c| c.1 == id && c.2 == MAIL_STEP && c.3 == 1);
                    let decision = if sent { "--mark-done" } else { "--retry" };
                    self.run(&["review", id, "--step", &MAIL_STEP.to_string(), decision]).expect(0);
                }
                _ => panic!("resume failed: {} {}", o.stdout(), o.stderr()),
            }
        }
        panic!("task {id} did not finish");
    }
}

#[test]
fn the_fixture_starts_a_real_server_and_stops_it() {
    let mut s = PgServer::start("fixture");
    let url = s.create_db("fx");
    let mut c = s.client("fx");
    let v: String = c.query_one("SHOW server_version", &[]).unwrap().get(0);
    assert!(v.starts_with(char::is_numeric), "{v}");
    let fsync: String = c.query_one("SHOW fsync", &[]).unwrap().get(0);
    assert_eq!(fsync, "on");
    let listen: String = c.query_one("SHOW listen_addresses", &[]).unwrap().get(0);
    assert_eq!(listen, "127.0.0.1");
    drop(c);
    let pid = s.pid();
    s.stop();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the server process is gone");
    assert!(postgres::Client::connect(&url, postgres::NoTls).is_err(), "nothing listens any more");
}

#[test]
fn run_resume_inspect_and_list_on_postgres() {
    let s = PgServer::start("run");
    let p = PgDir::new(&s, "run");
    p.d.write("spec.toml", SPEC);
    // the flag (no $BROKERLAB_DB): the schema is created on first use
    let o = p.d.run(&["run", "spec.toml", "--db", &p.url]);
    o.expect(0);
    assert!(o.stdout().contains("task inv: completed"), "{}", o.stdout());
    assert!(!p.d.path("tasks.sqlite").exists(), "nothing went to the SQLite default");
    p.assert_exactly_once("inv");
    let fmt: String = p.client().query_one("SELECT value FROM meta WHERE key='format'", &[]).unwrap().get(0);
    assert_eq!(fmt, "brokerlab-task-log-pg/2");
    // every record committed under epoch 1, in order, from seq 0
    assert_eq!(p.count("SELECT count(*) FROM log_records WHERE task_id='inv' AND epoch NOT IN (0, 1)"), 0);
    assert_eq!(p.count("SELECT max(seq) + 1 - count(*) FROM log_records WHERE task_id='inv'"), 0);
    // a checkpoint is one row: the rows cover the seqs back to back, and the steps' checkpoints
    // (a result, the next model response and its intent) hold three records each
    let rows = p.count("SELECT count(*) FROM log WHERE task_id='inv'");
    let next = "SELECT count(*) FROM log a JOIN log b ON b.task_id = a.task_id AND b.seq = a.last_seq + 1 \
                WHERE a.task_id='inv'";
    assert_eq!(p.count(next), rows - 1, "each row but the last is followed by the next seq");
    assert!(p.count("SELECT count(*) FROM log WHERE task_id='inv' AND last_seq = seq + 2") >= 3, "packed rows");
    assert!(rows < p.count("SELECT count(*) FROM log_records WHERE task_id='inv'"));
    let o = p.run(&["run", "spec.toml"]);
    o.expect(0);
    assert!(o.stdout().contains("already completed"), "{}", o.stdout());
    assert_eq!(p.d.calls("payments.sqlite").len(), 2, "no second copy ran");
    let o = p.run(&["inspect", "inv"]);
    o.expect(0);
    for k in ["created", "lease", "model", "tool-intent", "tool-result", "completed", "free (last epoch 1)"] {
        assert!(o.stdout().contains(k), "{k}: {}", o.stdout());
    }
    let o = p.run(&["list"]);
    o.expect(0);
    assert!(o.stdout().contains("inv") && o.stdout().contains("completed"), "{}", o.stdout());
    // a different spec under the same id is refused, nothing changes
    p.d.write("other.toml", &SPEC.replace("All done", "All done!"));
    let before = p.kinds("inv");
    p.run(&["run", "other.toml"]).expect(2);
    assert_eq!(p.kinds("inv"), before);
    let o = p.run(&["resume", "nope"]);
    o.expect(2);
    assert!(o.stderr().contains("\"nope\"") && o.stderr().contains(&p.url), "{}", o.stderr());
}

#[test]
fn bad_urls_and_foreign_databases_exit_2_and_change_nothing() {
    let s = PgServer::start("bad");
    let port = s.port().to_string();
    let d = Dir::new("pg-bad");
    d.write("spec.toml", SPEC);
    let nobody = format!("postgres://postgres@127.0.0.1:{}/x", support::pg::unused_port());
    let missing = s.url("no_such_db");
    let secret = format!("postgres://postgres:hunter2@127.0.0.1:{port}/no_such_db");
    for (url, says) in [
        ("postgres://postgres@127.0.0.1:notaport/x", "not a valid PostgreSQL URL"),
        ("postgres://postgres@127.0.0.1:1/", "names no database"),
        (nobody.as_str(), "cannot connect"),
        (missing.as_str(), "no_such_db"),
        (secret.as_str(), "postgres:***@"),
    ] {
        for args in [vec!["run", "spec.toml"], vec!["list"], vec!["resume", "inv"]] {
            let mut a = args.clone();
            a.extend(["--db", url]);
            let o = d.run(&a);
            o.expect(2);
            assert!(o.stderr().contains(says), "{url} {args:?}: {}", o.stderr());
            assert!(!o.stderr().contains("hunter2"), "the password is never printed: {}", o.stderr());
            assert!(!o.stderr().contains("panicked"), "{}", o.stderr());
        }
    }
    assert!(!d.path("tasks.sqlite").exists());
    // an empty database is not a log for a command that only reads
    let empty = s.create_db("empty");
    let o = d.run(&["list", "--db", &empty]);
    o.expect(2);
    assert!(o.stderr().contains("no brokerlab task log"), "{}", o.stderr());
    // another application's database: refused, left as it was (no meta, no table added)
    let other = s.create_db("other");
    s.client("other")
        .batch_execute("CREATE TABLE accounts(id INT PRIMARY KEY); INSERT INTO accounts VALUES (1)")
        .unwrap();
    for args in [vec!["run", "spec.toml"], vec!["list"], vec!["inspect", "inv"]] {
        let mut a = args.clone();
        a.extend(["--db", other.as_str()]);
        let o = d.run(&a);
        o.expect(2);
        assert!(
            o.stderr().contains("not a brokerlab task log") && o.stderr().contains("public.accounts"),
            "{}",
            o.stderr()
        );
    }
    let tables: i64 =
        s.client("other").query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[]).unwrap().get(0);
    assert_eq!(tables, 1, "nothing was created in another application's database");
    assert!(d.calls("payments.sqlite").is_empty() && d.calls("emails.sqlite").is_empty(), "no tool was called");
}

/// Crash (exit 137, no cleanup) at every crash point of the task, each run in a fresh database,
/// resume, and count from the tools' own files: each payment key applied once, the email once.
#[test]
fn crash_at_every_point_then_resume_exactly_once_on_postgres() {
    let s = PgServer::start("crash");
    let (mut covered, mut window, mut reviews) = (0, 0, 0);
    for n in 1.. {
        let p = PgDir::faults(&s, &format!("crash{n}"));
        p.d.write("spec.toml", SPEC);
        let o = p.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", &n.to_string())]);
        if o.code() == 0 {
            assert!(n >= 20, "only {n} crash points?");
            break;
        }
        assert_eq!(o.code(), 137, "{} {}", o.stdout(), o.stderr());
        covered += 1;
        if o.stderr().contains("tool-applied") {
            window += 1;
        }
        if p.run(&["resume", "inv"]).code() == 3 {
            reviews += 1;
        }
        p.finish("inv");
        p.assert_exactly_once("inv");
    }
    eprintln!("postgres: covered {covered} crash points, {window} in the tool window, {reviews} went to review");
    assert!(window >= 4, "every tool call has a window point");
    assert!(reviews >= 2, "a crash around the email sends it to review");
}

#[test]
fn needs_review_flow_on_postgres() {
    let s = PgServer::start("review");
    let p = PgDir::faults(&s, "review");
    p.d.write("spec.toml", SPEC);
    p.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "tool-applied:3")]).expect(137);
    let o = p.run(&["resume", "inv"]);
    o.expect(3);
    assert!(o.stdout().contains("--step 2") && o.stdout().contains("emails.sqlite"), "{}", o.stdout());
    p.run(&["resume", "inv"]).expect(3);
    assert_eq!(p.d.calls("emails.sqlite").len(), 1, "resume never re-sends");
    assert!(p.run(&["inspect", "inv"]).stdout().contains("needs-review"));
    p.run(&["review", "inv", "--step", "2", "--mark-done"]).expect(0);
    p.run(&["resume", "inv"]).expect(0);
    p.assert_exactly_once("inv");

    let p = PgDir::faults(&s, "review-retry");
    p.d.write("spec.toml", SPEC);
    p.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "before-tool:3")]).expect(137);
    p.run(&["resume", "inv"]).expect(3);
    assert!(p.d.calls("emails.sqlite").is_empty());
    p.run(&["review", "inv", "--step", "2", "--retry"]).expect(0);
    p.run(&["resume", "inv"]).expect(0);
    p.assert_exactly_once("inv");
}

#[test]
fn a_second_runner_is_refused_and_a_stale_epoch_is_fenced_on_postgres() {
    let s = PgServer::start("lease");
    let p = PgDir::faults(&s, "lease");
    p.d.write("spec.toml", SPEC);
    let child = p.spawn_env(&["run", "spec.toml", "--step-delay-ms", "150"], &[]);
    wait_for("the first runner's lease", || p.kinds("inv").len() >= 2);
    let o = p.run(&["resume", "inv"]);
    o.expect(1);
    assert!(o.stderr().contains("already being run by"), "{}", o.stderr());
    p.run(&["run", "spec.toml"]).expect(1);
    wait_child(child).expect(0);
    p.assert_exactly_once("inv");

    // another host takes the lease (a new epoch): the old runner's next checkpoint is refused
    // inside its transaction (the FOR UPDATE read of the lease row), and it writes nothing more
    let p = PgDir::faults(&s, "fence");
    p.d.write("spec.toml", SPEC);
    let child = p.spawn_env(&["run", "spec.toml", "--step-delay-ms", "300"], &[]);
    wait_for("the first payment", || p.d.calls("payments.sqlite").len() == 1);
    // the other host's runner is alive: its session holds the lease's advisory lock (the session
    // rule), taken before its lease commits
    let mut holder = p.client();
    let epoch: i64 = holder.query_one("SELECT epoch FROM leases WHERE task_id='inv'", &[]).unwrap().get(0);
    holder.execute("SELECT pg_advisory_lock($1)", &[&session_key("inv", epoch as u64 + 1)]).unwrap();
    holder
        .execute(
            "UPDATE leases SET epoch = epoch + 1, owner = 'otherhost/x:1:1', host = 'otherhost/x' WHERE task_id='inv'",
            &[],
        )
        .unwrap();
    let rows = p.count("SELECT count(*) FROM log WHERE task_id='inv'");
    let o = wait_child(child);
    o.expect(1);
    assert!(o.stderr().contains("lost the lease"), "{}", o.stderr());
    assert_eq!(p.count("SELECT count(*) FROM log WHERE task_id='inv'"), rows, "the fenced runner wrote nothing");
    p.run(&["resume", "inv"]).expect(1); // the other host's lease is live, and so is its session
    // its session ends (the process died): the lease is taken at once, long before it expires
    drop(holder);
    wait_for("the holder's session gone", || p.count("SELECT count(*) FROM pg_locks WHERE locktype='advisory'") == 0);
    p.run(&["resume", "inv"]).expect(0);
    p.assert_exactly_once("inv");

    // a killed holder with a 60 s lease: taken over at once (same host, its pid is gone)
    let p = PgDir::faults(&s, "dead");
    p.d.write("spec.toml", SPEC);
    p.run_env(&["run", "spec.toml", "--lease-ms", "60000"], &[("BROKERLAB_CRASH_AT", "tool-applied:2")]).expect(137);
    let t = Instant::now();
    let o = p.run(&["resume", "inv", "--lease-ms", "60000"]);
    assert!(o.code() == 0 || o.code() == 3, "{}", o.stderr());
    assert!(t.elapsed() < Duration::from_secs(10), "no waiting for the 60 s lease");
    p.finish("inv");
    p.assert_exactly_once("inv");
}

/// Issue 10's reproduction (host/tests/task_fencing.rs) on PostgreSQL: step 0 sends an email.
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

/// Runner 1 parks at `point` of step 0 with a 300 ms lease; once its lease has expired runner 2
/// takes over, pauses for review, the reviewer retries from the tool's file, `resume` finishes;
/// then runner 1 continues. Returns runner 1's output; checks it wrote nothing more.
fn pause_takeover_continue(p: &PgDir, point: &str, env: &[(&str, &str)]) -> Out {
    p.d.write("spec.toml", WW);
    let mut env1 = env.to_vec();
    env1.push(("BROKERLAB_PAUSE_AT", point));
    let first = p.spawn_env(&["run", "spec.toml", "--lease-ms", "300"], &env1);
    let pid = first.id();
    wait_for("runner 1 to park", || is_stopped(pid));
    std::thread::sleep(Duration::from_millis(400)); // past its lease
    let o = p.run_env(&["run", "spec.toml", "--lease-ms", "300"], env);
    o.expect(3);
    assert!(o.stdout().contains("0 applied"), "{}", o.stdout());
    p.run_env(&["review", "ww", "--step", "0", "--retry"], env).expect(0);
    p.run_env(&["resume", "ww"], env).expect(0);
    assert_eq!(p.d.applied("emails.sqlite", "ww", 0), 1);
    let epoch1 = "SELECT count(*) FROM log WHERE epoch = 1";
    let before = p.count(epoch1);
    assert!(stop_or_continue(pid, false), "SIGCONT");
    let out = wait_child(first);
    assert_eq!(p.count(epoch1), before, "the fenced runner wrote nothing more");
    assert_eq!(p.d.applied("payments.sqlite", "ww", 1), 1);
    out
}

#[test]
fn a_paused_runner_is_refused_by_the_tool_after_a_takeover_on_postgres() {
    let s = PgServer::start("fencing");
    let p = PgDir::faults(&s, "fencing");
    let o = pause_takeover_continue(&p, "calling:1", &[]);
    o.expect(1);
    assert!(o.stderr().contains("fenced") && o.stderr().contains("send_email"), "{}", o.stderr());
    let mails = p.d.calls_full("emails.sqlite");
    assert_eq!(p.d.applied("emails.sqlite", "ww", 0), 1, "sent exactly once: {mails:?}");
    let refused: Vec<_> = mails.iter().filter(|c| c.2 == 0).collect();
    assert_eq!(refused.len(), 1, "{mails:?}");
    assert_eq!(refused[0].3, 1, "the refused call carried the first runner's token");
}

/// The margin rule on PostgreSQL: the email tool ignores tokens; runner 1 parks after its intent
/// commit, before the margin check; on waking, its renewal (a fenced transaction: the FOR UPDATE
/// read of the lease row sees runner 2's epoch) is refused and the call is never sent.
#[test]
fn the_margin_rule_stops_a_paused_runner_on_postgres() {
    let s = PgServer::start("margin");
    let p = PgDir::faults(&s, "margin");
    let o = pause_takeover_continue(&p, "before-tool:1", &[("BROKERLAB_UNFENCED_TOOLS", "send_email")]);
    o.expect(1);
    assert!(o.stderr().contains("fenced") && o.stderr().contains("was not sent"), "{}", o.stderr());
    let mails = p.d.calls_full("emails.sqlite");
    assert_eq!(mails.len(), 1, "the paused runner never reached the tool: {mails:?}");
}

#[test]
fn suspend_then_resume_on_postgres() {
    let s = PgServer::start("suspend");
    let p = PgDir::new(&s, "suspend");
    p.d.write("spec.toml", SPEC);
    let child = p.spawn_env(&["run", "spec.toml", "--step-delay-ms", "150"], &[]);
    wait_for("the first payment", || p.d.calls("payments.sqlite").len() == 1);
    let o = p.run(&["suspend", "inv"]);
    o.expect(0);
    assert!(o.stdout().contains("suspend requested"), "{}", o.stdout());
    let o = wait_child(child);
    o.expect(0);
    assert!(o.stdout().contains("suspended before step"), "{}", o.stdout());
    assert_eq!(p.kinds("inv").last().map(String::as_str), Some("suspended"));
    assert_eq!(p.count("SELECT count(*) FROM suspend_requests"), 0, "the marker's transaction deleted the request");
    p.run(&["suspend", "inv"]).expect(0); // idle: already suspended
    p.run(&["resume", "inv"]).expect(0);
    p.assert_exactly_once("inv");
}

/// The server goes away under a running runner (fast shutdown: its session is ended, an open
/// transaction rolled back): the runner exits 1 naming the database; after the restart, `resume`
/// continues from what the log holds, exactly once.
#[test]
fn a_server_restart_mid_run_loses_nothing_and_repeats_nothing() {
    let mut s = PgServer::start("restart");
    let url = s.create_db("restart");
    let d = Dir::new("pg-restart");
    d.write("spec.toml", SPEC);
    let env = [("BROKERLAB_DB", url.as_str())];
    let child = d.spawn_env(&["run", "spec.toml", "--step-delay-ms", "300"], &env);
    wait_for("the first payment", || d.calls("payments.sqlite").len() == 1);
    s.stop();
    let o = wait_child(child);
    o.expect(1);
    assert!(o.stderr().contains(&url) && o.stderr().contains("connection"), "{}", o.stderr());
    s.restart();
    let p = PgDir { d, url, db: "restart".into(), server: &s };
    p.finish("inv");
    p.assert_exactly_once("inv");
}

/// Eight runners started together on an empty database: the schema is created once (advisory
/// lock), the task once (`ON CONFLICT`), one runner holds the lease at a time, and the tools see
/// each side effect once. The others exit 0 (found it completed) or 1 (a live runner holds it: a
/// runner that finds the task created since it looked resumes it like any other), never anything
/// else.
#[test]
fn eight_runners_started_together_on_an_empty_database() {
    let s = PgServer::start("eight");
    let p = PgDir::new(&s, "eight");
    p.d.write("spec.toml", SPEC);
    let kids: Vec<Child> = (0..8).map(|_| p.spawn_env(&["run", "spec.toml", "--step-delay-ms", "20"], &[])).collect();
    let outs: Vec<Out> = kids.into_iter().map(wait_child).collect();
    let ok = outs.iter().filter(|o| o.code() == 0).count();
    for o in &outs {
        assert!(matches!(o.code(), 0 | 1), "{} {}", o.stdout(), o.stderr());
        if o.code() == 1 {
            let e = o.stderr();
            assert!(e.contains("already being run by"), "{e}");
        }
    }
    assert!(ok >= 1, "one of them ran it");
    if p.kinds("inv").last().map(String::as_str) != Some("completed") {
        p.finish("inv");
    }
    p.assert_exactly_once("inv");
    assert_eq!(p.count("SELECT count(*) FROM meta"), 1, "the schema was created once");
    assert_eq!(p.count("SELECT count(*) FROM log_records WHERE kind = 'created'"), 1);
}

/// SPEC under id `id`.
fn spec_with_id(id: &str) -> String {
    SPEC.replace("id = \"inv\"", &format!("id = \"{id}\""))
}

#[test]
fn workers_claim_each_submitted_task_once_and_run_it_once() {
    let s = PgServer::start("workers");
    let p = PgDir::new(&s, "workers");
    let ids: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    for id in &ids {
        p.d.write(&format!("{id}.toml"), &spec_with_id(id));
        let o = p.run(&["submit", &format!("{id}.toml")]);
        o.expect(0);
        assert!(o.stdout().contains("submitted"), "{}", o.stdout());
    }
    // submitting again queues, never duplicates
    assert!(p.run(&["submit", "w0.toml"]).expect(0).stdout().contains("exists, queued again"));
    assert_eq!(p.count("SELECT count(*) FROM queue"), 6);
    assert_eq!(p.count("SELECT count(*) FROM log_records WHERE kind = 'created'"), 6);
    let args = ["worker", "--concurrency", "2", "--exit-when-idle", "--step-delay-ms", "20"];
    let workers: Vec<Child> = (0..2).map(|_| p.spawn_env(&args, &[])).collect();
    for w in workers {
        let o = wait_child(w);
        o.expect(0);
        assert!(o.stdout().contains("worker: stopped"), "{}", o.stdout());
    }
    for id in &ids {
        p.assert_exactly_once(id);
        // one runner ever held it: a claimed task is not claimed by a second worker
        let leases = p.kinds(id).iter().filter(|k| *k == "lease").count();
        assert_eq!(leases, 1, "task {id}: {:?}", p.kinds(id));
    }
    assert_eq!(p.count("SELECT count(*) FROM queue"), 0, "every finished task left the queue");
}

#[test]
fn sigterm_suspends_the_task_and_another_worker_finishes_it() {
    let s = PgServer::start("sigterm");
    let p = PgDir::new(&s, "sigterm");
    p.d.write("spec.toml", SPEC);
    p.run(&["submit", "spec.toml"]).expect(0);
    let w = p.spawn_env(&["worker", "--step-delay-ms", "150"], &[]);
    wait_for("the first payment", || p.d.calls("payments.sqlite").len() == 1);
    // SAFETY: sending a signal has no memory effects in this process.
    assert_eq!(unsafe { libc::kill(w.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let o = wait_child(w);
    o.expect(0);
    assert!(o.stdout().contains("suspended before step"), "{}", o.stdout());
    assert_eq!(p.kinds("inv").last().map(String::as_str), Some("suspended"));
    assert_eq!(p.count("SELECT count(*) FROM queue"), 1, "a stopped worker's task stays queued");
    p.run(&["worker", "--exit-when-idle"]).expect(0);
    p.assert_exactly_once("inv");
    assert!(p.kinds("inv").contains(&"resumed".to_string()));
    assert_eq!(p.count("SELECT count(*) FROM queue"), 0);
}

/// A worker killed with SIGKILL while it holds a task with a 60 s lease: its session ends (the
/// claim is free at once) and it is provably dead (same host), so another worker takes the task
/// over without waiting for the lease, and every side effect happens once.
#[test]
fn a_killed_workers_task_is_taken_over_at_once() {
    let s = PgServer::start("killed");
    let p = PgDir::new(&s, "killed");
    p.d.write("spec.toml", SPEC);
    p.run(&["submit", "spec.toml"]).expect(0);
    let mut w = p.spawn_env(&["worker", "--step-delay-ms", "200", "--lease-ms", "60000"], &[]);
    wait_for("the first payment", || p.d.calls("payments.sqlite").len() == 1);
    w.kill().unwrap();
    let _ = w.wait();
    let t = Instant::now();
    p.run(&["worker", "--exit-when-idle", "--lease-ms", "60000"]).expect(0);
    assert!(t.elapsed() < Duration::from_secs(10), "no waiting for the 60 s lease");
    if p.kinds("inv").last().map(String::as_str) != Some("completed") {
        p.finish("inv"); // paused for review if the kill hit the email's window
    }
    p.assert_exactly_once("inv");
    assert_eq!(p.count("SELECT count(*) FROM queue"), 0);
}

#[test]
fn submit_and_worker_refuse_bad_input() {
    let s = PgServer::start("workbad");
    let p = PgDir::new(&s, "workbad");
    p.d.write("spec.toml", SPEC);
    let o = p.d.run(&["submit", "spec.toml", "--db", "tasks.sqlite"]);
    o.expect(2);
    assert!(o.stderr().contains("needs a PostgreSQL database"), "{}", o.stderr());
    p.d.run(&["worker", "--db", "tasks.sqlite", "--exit-when-idle"]).expect(2);
    assert!(!p.d.path("tasks.sqlite").exists());
    for bad in [["--concurrency", "0"], ["--concurrency", "65"], ["--poll-ms", "0"]] {
        let o = p.run(&["worker", bad[0], bad[1], "--exit-when-idle"]);
        o.expect(2);
        assert!(o.stderr().contains(bad[0]), "{}", o.stderr());
    }
    p.run(&["submit", "spec.toml"]).expect(0);
    p.d.write("other.toml", &SPEC.replace("All done", "All done!"));
    let o = p.run(&["submit", "other.toml"]);
    o.expect(2);
    assert!(o.stderr().contains("different spec"), "{}", o.stderr());
    p.run(&["submit", "missing.toml"]).expect(2);
    assert_eq!(p.count("SELECT count(*) FROM queue"), 1);
}

/// Issue 17's chaos run on PostgreSQL, at CI size: runners killed with SIGKILL (half aimed at the
/// tool window), runners parked with SIGSTOP past their lease and woken after a takeover, and the
/// server itself restarted every 5 to 20 s (down 0 to 5 s) through `pg_ctl`, by the chaos command
/// (`--pg-stop-cmd`/`--pg-start-cmd`). Exactly once, checked from the tools' own files.
#[test]
fn chaos_on_postgres_with_kills_pauses_and_server_restarts() {
    let mut server = PgServer::start("chaos");
    let url = server.create_db("chaos");
    let d = Dir::new("pg-chaos");
    let (stop, start) = server.ctl_cmds();
    let t = Instant::now();
    let out = Out(d
        .cmd(&[
            "chaos",
            "--db",
            &url,
            "--dir",
            d.0.to_str().unwrap(),
            "--iterations",
            "40",
            "--steps",
            "8",
            "--seed",
            "17",
            "--json",
            "--pg-stop-cmd",
            &stop,
            "--pg-start-cmd",
            &start,
        ])
        .output()
        .unwrap());
    let secs = t.elapsed().as_secs_f64();
    let s = out.stdout();
    let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap_or_else(|e| {
        panic!("not one JSON object ({e}):\n{s}\nstderr: {}\nserver: {}", out.stderr(), server.log())
    });
    eprintln!("{v}\n({secs:.1} s)");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!(v["backend"], "postgres");
    assert_eq!(n("duplicates"), 0, "{v}");
    assert_eq!(n("lost"), 0, "{v}");
    assert_eq!(n("errors"), 0, "{v}");
    assert!(v["ok"].as_bool().unwrap(), "{v}");
    assert_eq!(out.code(), 0);
    assert!(n("kills") >= 40, "{v}");
    assert!(n("window_kills") > 0, "{v}");
    // not `==` as on SQLite: the server finishes a COMMIT its killed client had sent, possibly
    // after the chaos parent read the log and counted the kill in the window; and a server restart
    // that aborts a runner between the payment and its result leaves one more replay (at most one
    // per aborted run), which no kill count sees
    assert!(n("deduplicated") <= n("window_kills_payment") + n("server_aborts") && n("deduplicated") > 0, "{v}");
    assert!(n("pauses") >= 1, "{v}");
    assert_eq!(n("pauses"), n("paused_fenced") + n("paused_idle") + n("paused_conn_lost"), "{v}");
    assert!(n("pg_restarts") >= 1, "{v}");
    assert_eq!(n("false_corruption"), 0, "{v}");
    server.stop();
}

/// The cross-host takeover rule: a holder whose PostgreSQL session is gone (its process was
/// killed) is taken over at once, without waiting for its 60 s lease, even where its death cannot
/// be proven from /proc (`BROKERLAB_AS_HOST` makes every runner look like one on a host without a
/// boot id). A holder that is stopped but whose session lives is not: the second runner is refused.
#[test]
fn a_holder_whose_session_is_gone_is_taken_over_at_once_and_a_live_session_is_not() {
    let s = PgServer::start("session");
    let p = PgDir::faults(&s, "session");
    p.d.write("spec.toml", SPEC);
    let other = [("BROKERLAB_AS_HOST", "elsewhere/")];
    let lease = ["--lease-ms", "60000"];
    let first = p.spawn_env(&["run", "spec.toml", "--step-delay-ms", "300", lease[0], lease[1]], &other);
    wait_for("the first runner's lease", || p.kinds("inv").len() >= 3);
    // stopped, session alive: refused
    assert!(stop_or_continue(first.id(), true));
    wait_for("the runner stopped", || is_stopped(first.id()));
    let o = p.run_env(&["resume", "inv", lease[0], lease[1]], &other);
    o.expect(1);
    assert!(o.stderr().contains("already being run by"), "{}", o.stderr());
    // killed: its session ends, the lease is taken at once
    let mut first = first;
    first.kill().unwrap();
    let _ = first.wait();
    let t = Instant::now();
    loop {
        let o = p.run_env(&["resume", "inv", lease[0], lease[1]], &other);
        match o.code() {
            0 | 3 => break,
            // the server notices the closed connection within moments
            1 if o.stderr().contains("already being run by") && t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => panic!("resume: {} {}", o.code(), o.stderr()),
        }
    }
    assert!(t.elapsed() < Duration::from_secs(5), "no waiting for the 60 s lease");
    p.finish("inv");
    p.assert_exactly_once("inv");
}

/// Calls in the PostgreSQL world: (tool, key, task, step, applied, epoch, reason).
type PgCall = (String, Option<String>, String, i32, bool, i64, Option<String>);

fn pg_calls(p: &PgDir, task: &str) -> Vec<PgCall> {
    let mut c = p.client();
    c.query(
        "SELECT tool, key, task_id, step, applied, epoch, reason FROM world_calls WHERE task_id=$1 ORDER BY id",
        &[&task],
    )
    .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6))).collect())
    .unwrap_or_default()
}

fn pg_applied(p: &PgDir, task: &str, tool: &str, step: i32) -> usize {
    pg_calls(p, task).iter().filter(|c| c.0 == tool && c.3 == step && c.4).count()
}

/// `--world postgres://...`: the tools record their calls in the log's database (tables
/// `world_calls`, `world_fences`), no file is written; a crash in the window and a resume leave
/// each side effect applied once there, and a runner parked past its lease is refused by the
/// tool's fence in that table after a takeover.
#[test]
fn the_world_in_postgres_counts_exactly_once_and_fences() {
    let s = PgServer::start("pgworld");
    let p = PgDir::faults(&s, "pgworld");
    p.d.write("spec.toml", SPEC);
    let world = ["--world", p.url.as_str()];
    let o = p.run_env(&["run", "spec.toml", world[0], world[1]], &[("BROKERLAB_CRASH_AT", "tool-applied:2")]);
    o.expect(137);
    // the recorded world is the URL: resume finds it without --world
    let o = p.run(&["resume", "inv"]);
    assert!(matches!(o.code(), 0 | 3), "{} {}", o.stdout(), o.stderr());
    if o.code() == 3 {
        assert!(o.stdout().contains("world_calls"), "{}", o.stdout());
        let sent = pg_applied(&p, "inv", "send_email", MAIL_STEP as i32) == 1;
        p.run(&["review", "inv", "--step", "2", if sent { "--mark-done" } else { "--retry" }]).expect(0);
        p.run(&["resume", "inv"]).expect(0);
    }
    for step in PAY_STEPS {
        assert_eq!(pg_applied(&p, "inv", "payment", step as i32), 1, "{:?}", pg_calls(&p, "inv"));
    }
    assert_eq!(pg_applied(&p, "inv", "send_email", MAIL_STEP as i32), 1, "{:?}", pg_calls(&p, "inv"));
    assert!(pg_calls(&p, "inv").iter().any(|c| c.0 == "payment" && !c.4), "the replay was deduplicated by key");
    assert!(!p.d.path("world").exists(), "no world file was written");
    assert_eq!(p.kinds("inv").last().map(String::as_str), Some("completed"));

    // the fencing rule through the table: runner 1 parks right before its email leaves
    let p = PgDir::faults(&s, "pgworld_fence");
    p.d.write("spec.toml", WW);
    let env1 = [("BROKERLAB_PAUSE_AT", "calling:1")];
    let w = ["--world", p.url.as_str()];
    let first = p.spawn_env(&["run", "spec.toml", "--lease-ms", "300", w[0], w[1]], &env1);
    let pid = first.id();
    wait_for("runner 1 to park", || is_stopped(pid));
    std::thread::sleep(Duration::from_millis(400));
    let o = p.run(&["run", "spec.toml", "--lease-ms", "300"]);
    o.expect(3);
    assert!(o.stdout().contains("0 applied"), "{}", o.stdout());
    p.run(&["review", "ww", "--step", "0", "--retry"]).expect(0);
    p.run(&["resume", "ww"]).expect(0);
    assert!(stop_or_continue(pid, false));
    let out = wait_child(first);
    out.expect(1);
    assert!(out.stderr().contains("fenced") && out.stderr().contains("world_calls"), "{}", out.stderr());
    let mails: Vec<PgCall> = pg_calls(&p, "ww").into_iter().filter(|c| c.0 == "send_email").collect();
    assert_eq!(mails.iter().filter(|c| c.4).count(), 1, "sent exactly once: {mails:?}");
    let refused: Vec<&PgCall> =
        mails.iter().filter(|c| c.6.as_deref().is_some_and(|r| r.starts_with("fenced"))).collect();
    assert_eq!(refused.len(), 1, "{mails:?}");
    assert_eq!(refused[0].5, 1, "the refused call carried runner 1's token");
}

/// A worker outlives a server restart: its run in progress is cut (as a crash would cut it), it
/// reconnects with backoff, claims the task again (its old session's advisory lock went with the
/// server) and every task finishes with each side effect applied once.
#[test]
fn a_worker_survives_a_server_restart() {
    let mut s = PgServer::start("wrestart");
    let url = s.create_db("wrestart");
    let d = Dir::new("pg-wrestart");
    let env = [("BROKERLAB_DB", url.as_str())];
    let ids = ["r0", "r1", "r2"];
    for id in ids {
        d.write(&format!("{id}.toml"), &spec_with_id(id));
        d.run_env(&["submit", &format!("{id}.toml")], &env).expect(0);
    }
    let w = d.spawn_env(&["worker", "--exit-when-idle", "--step-delay-ms", "100", "--lease-ms", "60000"], &env);
    wait_for("the first payment", || d.calls("payments.sqlite").len() == 1);
    s.stop();
    std::thread::sleep(Duration::from_millis(1500));
    s.restart();
    let o = wait_child(w);
    o.expect(0);
    assert!(o.stderr().contains("reconnected"), "{}", o.stderr());
    let p = PgDir { d, url, db: "wrestart".into(), server: &s };
    for id in ids {
        if p.kinds(id).last().map(String::as_str) != Some("completed") {
            p.finish(id); // the restart may have cut the email's window: review
        }
        p.assert_exactly_once(id);
    }
}

/// Issue 17's chaos run with real `task worker` processes (CI size): workers killed with SIGKILL
/// (half aimed at the tool window), one parked with SIGSTOP past its lease and woken after a
/// takeover, the server restarted every 5 to 20 s, the tools' records in the same database.
/// Exactly once, counted from the `world_calls` table; every worker exits 0 on SIGTERM at the end.
#[test]
fn chaos_with_workers_on_postgres() {
    let mut server = PgServer::start("wchaos");
    let url = server.create_db("wchaos");
    let d = Dir::new("pg-wchaos");
    let (stop, start) = server.ctl_cmds();
    let t = Instant::now();
    let out = Out(d
        .cmd(&[
            "chaos",
            "--db",
            &url,
            "--world",
            &url,
            "--workers",
            "3",
            "--dir",
            d.0.to_str().unwrap(),
            "--iterations",
            "40",
            "--steps",
            "8",
            "--seed",
            WORKER_CHAOS_SEED,
            "--step-delay-ms",
            "40",
            "--json",
            "--pg-stop-cmd",
            &stop,
            "--pg-start-cmd",
            &start,
        ])
        .output()
        .unwrap());
    let secs = t.elapsed().as_secs_f64();
    let s = out.stdout();
    let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap_or_else(|e| {
        panic!("not one JSON object ({e}):\n{s}\nstderr: {}\nserver: {}", out.stderr(), server.log())
    });
    eprintln!("{v}\n({secs:.1} s)");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!(v["backend"], "postgres");
    assert_eq!(v["world"], "postgres");
    assert_eq!(n("workers"), 3);
    assert_eq!(n("duplicates"), 0, "{v}");
    assert_eq!(n("lost"), 0, "{v}");
    assert_eq!(n("errors"), 0, "{v}");
    assert!(v["ok"].as_bool().unwrap(), "{v}");
    assert_eq!(out.code(), 0);
    assert!(n("kills") >= 5, "{v}");
    assert!(n("pauses") >= 1, "{v}");
    assert!(n("pg_restarts") >= 1, "{v}");
    // issue 21's fault classes occurred, and no healthy task was reported corrupt
    assert!(n("session_drops") > 0, "{v}");
    assert!(n("live_forks") > 0, "{v}");
    // (a fork cut short by a server restart is neither)
    assert!(n("live_forks_refused") + n("live_forks_made") <= n("live_forks"), "{v}");
    assert_eq!(n("false_corruption"), 0, "{v}");
    assert!(!d.path("world").exists(), "the tools wrote to the database, not to files");
    server.stop();
}

/// A seed whose first server restart comes early in the run (5.1 s: the restart delays are drawn
/// from it), so the CI-size run sees one: with a 40 ms step delay the 40 tasks take at least
/// about 8 s on three workers even on a fast machine.
const WORKER_CHAOS_SEED: &str = "172";

/// `task bench --db`: the throughput figures come with the checkpoints-alone ceiling, which
/// writes exactly one runner's checkpoints (per round: one per step and one for `completed`) to
/// the log through the fenced append.
#[test]
fn bench_times_the_checkpoints_alone_next_to_the_runners() {
    let s = PgServer::start("bench");
    let p = PgDir::new(&s, "bench");
    let dir = p.d.path("bench");
    let o = p.run(&["bench", "--steps", "10", "--json", "--db", &p.url, "--dir", &dir.to_string_lossy()]);
    o.expect(0);
    let v: serde_json::Value = serde_json::from_str(o.stdout().trim()).unwrap();
    let pg = &v["postgres"];
    // 10 steps in 5 rounds: 2 steps and `completed` per round, three checkpoints
    assert_eq!(pg["checkpoints_alone"], 15, "{pg}");
    let alone_recs = p.count(
        "SELECT count(*) FROM log_records WHERE task_id LIKE '%-alone' AND kind <> 'created' AND kind <> 'lease'",
    );
    assert_eq!(alone_recs, 5 * (3 * 2 + 1), "model, intent and result per step, and completed, per round");
    // one row per checkpoint
    let alone_rows =
        p.count("SELECT count(*) FROM log WHERE task_id LIKE '%-alone' AND epoch > 0 AND kinds[1] <> 'lease'");
    assert_eq!(alone_rows, 15);
    for k in ["checkpoints_alone_per_s", "raw_commits_per_s", "steps_per_s_1"] {
        assert!(pg[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {pg}");
    }
}

/// The first PostgreSQL layout (`brokerlab-task-log-pg/1`: one `log` row per record), as pg.rs
/// created it before the checkpoint's records were packed into one row.
const V1_SCHEMA: &str = "
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tasks(
  task_id TEXT PRIMARY KEY, spec TEXT NOT NULL, digest BIGINT NOT NULL,
  parent TEXT, parent_seq BIGINT, world TEXT, created_at_ms BIGINT NOT NULL);
CREATE TABLE log(
  task_id TEXT NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
  payload BYTEA NOT NULL, summary TEXT NOT NULL, epoch BIGINT NOT NULL, at_ms BIGINT NOT NULL,
  PRIMARY KEY(task_id, seq));
CREATE TABLE leases(
  task_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL, pid_start BIGINT NOT NULL);
CREATE TABLE suspend_requests(task_id TEXT PRIMARY KEY, at_ms BIGINT NOT NULL);
CREATE TABLE queue(task_id TEXT PRIMARY KEY, submitted_at_ms BIGINT NOT NULL);
INSERT INTO meta VALUES('format', 'brokerlab-task-log-pg/1');
";

/// The record lines of `task inspect` (after its header line).
fn inspect_records(o: &Out) -> Vec<String> {
    o.stdout().lines().skip_while(|l| !l.contains("payload")).skip(1).map(str::to_string).collect()
}

/// A log of the first layout is migrated in place by the first command that opens it (even
/// `inspect`): one transaction, each old row a one-record row of the new layout, the records
/// unchanged; the crashed run then resumes and finishes with every side effect once. A layout
/// this build does not know is refused (exit 2, naming it) and left as it was.
#[test]
fn a_first_layout_log_is_migrated_in_place_and_an_unknown_layout_refused() {
    let s = PgServer::start("migrate");
    let p = PgDir::new(&s, "migrate");
    p.d.write("spec.toml", SPEC);
    // an unfinished task's records, made by the SQLite binding, whose rows are the first
    // layout's column for column; copied into a database of that layout
    let sq = p.d.path("old.sqlite").to_string_lossy().into_owned();
    p.d.run(&["init", "--fault-injection", "--db", &sq]).expect(0);
    p.d.run_env(&["run", "spec.toml", "--db", &sq], &[("BROKERLAB_CRASH_AT", "tool-applied:2")]).expect(137);
    let old = p.d.run(&["inspect", "inv", "--db", &sq]);
    old.expect(0);
    let lite = rusqlite::Connection::open(&sq).unwrap();
    let mut c = p.client();
    c.batch_execute(V1_SCHEMA).unwrap();
    let mut st =
        lite.prepare("SELECT task_id, spec, digest, parent, parent_seq, world, created_at_ms FROM tasks").unwrap();
    for r in st
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })
        .unwrap()
    {
        let r = r.unwrap();
        c.execute("INSERT INTO tasks VALUES($1, $2, $3, $4, $5, $6, $7)", &[&r.0, &r.1, &r.2, &r.3, &r.4, &r.5, &r.6])
            .unwrap();
    }
    let mut st = lite.prepare("SELECT task_id, seq, kind, status, payload, summary, epoch, at_ms FROM log").unwrap();
    let mut n = 0;
    for r in st
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Vec<u8>>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, i64>(7)?,
            ))
        })
        .unwrap()
    {
        let r = r.unwrap();
        c.execute(
            "INSERT INTO log VALUES($1, $2, $3, $4, $5, $6, $7, $8)",
            &[&r.0, &r.1, &r.2, &r.3, &r.4, &r.5, &r.6, &r.7],
        )
        .unwrap();
        n += 1;
    }
    let mut st = lite.prepare("SELECT task_id, owner, epoch, expires_at_ms, host, pid, pid_start FROM leases").unwrap();
    for r in st
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })
        .unwrap()
    {
        let r = r.unwrap();
        c.execute("INSERT INTO leases VALUES($1, $2, $3, $4, $5, $6, $7)", &[&r.0, &r.1, &r.2, &r.3, &r.4, &r.5, &r.6])
            .unwrap();
    }
    assert!(n >= 6, "the crashed run left a few records ({n})");

    // the first command to open it migrates it, and reads the same records
    let o = p.run(&["inspect", "inv"]);
    o.expect(0);
    assert!(
        o.stderr().contains("migrated the task log from brokerlab-task-log-pg/1 to brokerlab-task-log-pg/2"),
        "{}",
        o.stderr()
    );
    assert!(o.stderr().contains(&format!("({n} records")), "{}", o.stderr());
    assert_eq!(inspect_records(&o), inspect_records(&old), "the same records, in the same order");
    let fmt: String = c.query_one("SELECT value FROM meta WHERE key='format'", &[]).unwrap().get(0);
    assert_eq!(fmt, "brokerlab-task-log-pg/2");
    assert_eq!(p.count("SELECT count(*) FROM pg_tables WHERE tablename = 'log_v1'"), 0, "the old table is gone");
    assert_eq!(p.count("SELECT count(*) FROM log WHERE last_seq = seq"), n, "one row per old row");
    // migrated once: the next command says nothing about it
    let o = p.run(&["list"]);
    o.expect(0);
    assert!(!o.stderr().contains("migrated"), "{}", o.stderr());
    // the crashed run continues on the new layout (its holder is gone: taken over at once)
    p.finish("inv");
    p.assert_exactly_once("inv");
    assert!(p.count("SELECT count(*) FROM log WHERE task_id='inv' AND last_seq > seq") > 0, "new rows are packed");

    // a layout this build does not know: refused, unchanged
    let q = PgDir::new(&s, "future");
    let mut c = q.client();
    c.batch_execute(&V1_SCHEMA.replace("brokerlab-task-log-pg/1", "brokerlab-task-log-pg/9")).unwrap();
    for args in [&["list"][..], &["run", "spec.toml"][..]] {
        q.d.write("spec.toml", SPEC);
        let o = q.run(args);
        o.expect(2);
        assert!(o.stderr().contains("\"brokerlab-task-log-pg/9\""), "{}", o.stderr());
        assert!(o.stderr().contains("does not know"), "{}", o.stderr());
    }
    let fmt: String = c.query_one("SELECT value FROM meta WHERE key='format'", &[]).unwrap().get(0);
    assert_eq!(fmt, "brokerlab-task-log-pg/9");
    assert_eq!(q.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), 6, "nothing created");
}

/// The fence-only checkpoint (`pg::APPEND_SQL`, the lease row locked `FOR SHARE`, no renewal)
/// and a takeover are ordered by the row lock, both ways: a takeover's `UPDATE` of the epoch (even
/// a bare one, without the `FOR UPDATE` that `acquire` takes first) waits for a checkpoint in
/// flight to commit, so the taker reads the log after it; and a checkpoint that starts while a
/// takeover holds the row waits for it, then sees the new epoch and writes nothing.
#[test]
fn a_fence_only_checkpoint_and_a_takeover_wait_for_each_other() {
    use brokerlab::task::pg::{APPEND_SQL, PgStore};
    use postgres::types::ToSql;
    let s = PgServer::start("share");
    let p = PgDir::new(&s, "share");
    drop(PgStore::open(&p.url, true).unwrap()); // the schema
    let mut a = p.client();
    a.batch_execute("INSERT INTO leases VALUES('t', 'me', 1, 9000000000000, 'h', 1, 1)").unwrap();
    // whether the checkpoint's row went in
    let checkpoint = |c: &mut postgres::Transaction<'_>, seq: i64| -> bool {
        let (kinds, statuses, summaries) = (vec!["model"], vec!["done"], vec!["s"]);
        let frames = vec![0u8; 4];
        let params: [&(dyn ToSql + Sync); 10] =
            [&"t", &"me", &1i64, &seq, &seq, &kinds, &statuses, &frames, &summaries, &0i64];
        c.execute(APPEND_SQL, &params).unwrap() == 1
    };
    // a checkpoint in flight (not yet committed) holds the row: the taker's UPDATE waits
    let mut tx = a.transaction().unwrap();
    assert!(checkpoint(&mut tx, 0), "our epoch: the row went in");
    let mut b = p.client();
    b.batch_execute("SET lock_timeout = 300").unwrap();
    let e = b.execute("UPDATE leases SET epoch = 2, owner = 'other' WHERE task_id='t'", &[]).unwrap_err();
    assert_eq!(e.code(), Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE), "{e}");
    tx.commit().unwrap();
    // committed: the taker goes ahead, and its read of the log sees the checkpoint
    let mut tb = b.transaction().unwrap();
    tb.execute("UPDATE leases SET epoch = 2, owner = 'other' WHERE task_id='t'", &[]).unwrap();
    assert_eq!(tb.query_one("SELECT count(*) FROM log WHERE task_id='t'", &[]).unwrap().get::<_, i64>(0), 1);
    // the takeover in flight holds the row: the old holder's next checkpoint waits for it, then
    // reads the new epoch and inserts nothing
    let url = p.url.clone();
    let late = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tx = c.transaction().unwrap();
        let t = Instant::now();
        let r = checkpoint(&mut tx, 1);
        tx.commit().unwrap();
        (r, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    tb.commit().unwrap();
    let (inserted, waited) = late.join().unwrap();
    assert!(!inserted, "fenced by the committed takeover");
    assert!(waited >= Duration::from_millis(200), "it waited for the takeover ({waited:?})");
    assert_eq!(p.count("SELECT count(*) FROM log"), 1, "the fenced checkpoint wrote nothing");
}

/// The live expiries a running task's lease row shows while its runner works (polled every
/// 10 ms until the runner exits; a released lease, expiry 0, is not counted).
fn expiries_while_running(p: &PgDir, args: &[&str]) -> std::collections::BTreeSet<i64> {
    let mut child = p.spawn_env(args, &[]);
    let mut c = p.client();
    let mut seen = std::collections::BTreeSet::new();
    while child.try_wait().unwrap().is_none() {
        if let Ok(Some(r)) = c.query_opt("SELECT expires_at_ms FROM leases WHERE task_id='inv' AND owner <> ''", &[]) {
            let e: i64 = r.get(0);
            if e > 0 {
                seen.insert(e);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_child(child).expect(0);
    seen
}

/// A checkpoint renews the lease only once an eighth of it has passed (the core's
/// `renewal_due`): with a 60 s lease a run of about 2 s keeps the expiry its lease was taken
/// with; with a 400 ms lease and steps of about 200 ms every checkpoint renews, so the expiry
/// moves on with the run and the lease never lapses under a working runner.
#[test]
fn checkpoints_renew_the_lease_only_when_due() {
    let s = PgServer::start("renew");
    let p = PgDir::new(&s, "long");
    p.d.write("spec.toml", SPEC);
    let seen = expiries_while_running(&p, &["run", "spec.toml", "--lease-ms", "60000", "--step-delay-ms", "100"]);
    assert_eq!(seen.len(), 1, "no renewal within the first eighth of a 60 s lease: {seen:?}");
    p.assert_exactly_once("inv");

    let p = PgDir::new(&s, "short");
    p.d.write("spec.toml", SPEC);
    let seen = expiries_while_running(&p, &["run", "spec.toml", "--lease-ms", "400", "--step-delay-ms", "100"]);
    assert!(seen.len() >= 4, "renewed as the run went on: {seen:?}");
    let (first, last) = (seen.first().unwrap(), seen.last().unwrap());
    assert!(last - first >= 600, "the expiry moved on with the run (about 2 s): {seen:?}");
    p.assert_exactly_once("inv");
}
