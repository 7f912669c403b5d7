//! Issue 21's reproductions on PostgreSQL, end to end through the real binary against a server
//! each test starts (support/pg.rs): a dropped session is not a dead holder (the dropped-session rule, with
//! `pg_terminate_backend` and with `restart -m immediate`), a fork of a live parent, a false
//! "log corruption" on a healthy running task, passwords in every form kept out of messages and
//! out of the log, the server's own words for a refused login, a server that is starting up, and
//! the fault hooks refused on a production database.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use brokerlab::sys::stop_or_continue;

mod support;
use support::pg::PgServer;
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

/// A scratch directory and a database, chosen through `$BROKERLAB_DB`.
struct Db {
    d: Dir,
    url: String,
    db: String,
}

impl Db {
    fn new(s: &PgServer, name: &str, faults: bool) -> Db {
        let db = name.replace('-', "_");
        let url = s.create_db(&db);
        let d = Db { d: Dir::new(&format!("pgp-{name}")), url, db };
        if faults {
            d.run(&["init", "--fault-injection"], &[]).expect(0);
        }
        d
    }
    fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut e = vec![("BROKERLAB_DB", self.url.as_str())];
        e.extend_from_slice(extra);
        e
    }
    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        self.d.run_env(args, &self.env(extra))
    }
    fn spawn(&self, args: &[&str], extra: &[(&str, &str)]) -> std::process::Child {
        self.d.spawn_env(args, &self.env(extra))
    }
}

/// Ends every session on database `db` but the caller's (`pg_terminate_backend`), as an operator
/// or a pooler might: the runner connected there (parked, alive) finds its connections closed.
/// Returns how many were ended.
fn terminate_sessions(s: &PgServer, db: &str) -> i64 {
    let mut c = s.client(db);
    let others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    let n: i64 = c.query_one(&format!("SELECT count(pg_terminate_backend(pid)) {others}"), &[]).unwrap().get(0);
    wait_for("the sessions to end", || {
        let left: i64 = c.query_one(&format!("SELECT count(*) {others}"), &[]).unwrap().get(0);
        left == 0
    });
    n
}

/// The lease row's expiry of `task`, ms.
fn expiry_ms(s: &PgServer, db: &str, task: &str) -> i64 {
    s.client(db).query_one("SELECT expires_at_ms FROM leases WHERE task_id=$1", &[&task]).unwrap().get(0)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Issue 21, section 1: the email tool cannot check a token; runner A parks right before the
/// email leaves (intent durable, margin checked); its session is then dropped. Before the fix B
/// took over at once ("a free session lock means a dead holder"), its review showed 0 calls,
/// `--retry` sent the email, and A, woken, sent it too. The dropped-session rule: B is refused until A's lease
/// expires; A, woken inside its lease, sends once; after the expiry B's review finds that call.
/// Checked for both ways a session drops: `pg_terminate_backend` and `restart -m immediate`.
#[test]
fn a_dropped_session_is_not_a_dead_holder() {
    let mut s = PgServer::start("rule1");
    for how in ["terminate", "immediate-restart"] {
        let p = Db::new(&s, &format!("rule1-{how}"), true);
        p.d.write("spec.toml", WW);
        let unfenced = ("BROKERLAB_UNFENCED_TOOLS", "send_email");
        let a = p.spawn(&["run", "spec.toml", "--lease-ms", "6000"], &[unfenced, ("BROKERLAB_PAUSE_AT", "calling:1")]);
        let pid = a.id();
        wait_for("runner A to park before its email", || is_stopped(pid));
        if how == "terminate" {
            assert!(terminate_sessions(&s, &p.db) >= 1);
        } else {
            s.stop_immediate();
            s.restart();
        }
        let expires = expiry_ms(&s, &p.db, "ww");
        // before the fix: exit 3 at once, "0 applied"; `--retry` then sent a second email
        let o = p.run(&["resume", "ww"], &[unfenced]);
        o.expect(1);
        assert!(
            o.stderr().contains("may still be run by") && o.stderr().contains("the dropped-session rule"),
            "{how}: {}",
            o.stderr()
        );
        assert!(now_ms() < expires, "{how}: B was refused inside A's lease");
        // A wakes inside its lease: it sends (that is its call), then finds its session gone
        assert!(stop_or_continue(pid, false));
        let oa = wait_child(a);
        oa.expect(1);
        assert_eq!(p.d.applied(EMAILS, "ww", 0), 1, "{how}");
        // once the expiry A wrote has passed, B takes over; its review finds A's call
        std::thread::sleep(Duration::from_millis(u64::try_from(expires - now_ms() + 50).unwrap_or(0)));
        let o = p.run(&["resume", "ww"], &[unfenced]);
        o.expect(3);
        assert!(o.stdout().contains("1 applied"), "{how}: {}", o.stdout());
        p.run(&["review", "ww", "--step", "0", "--mark-done"], &[unfenced]).expect(0);
        p.run(&["resume", "ww"], &[unfenced]).expect(0);
        assert_eq!(p.d.applied(EMAILS, "ww", 0), 1, "{how}: one email: {:?}", p.d.calls_full(EMAILS));
    }
    // where every call the holder could still make is fenced, a dropped session is taken over
    // at once: the woken holder's email is refused by the tool
    let p = Db::new(&s, "rule1-fenced", true);
    p.d.write("spec.toml", WW);
    let a = p.spawn(&["run", "spec.toml", "--lease-ms", "60000"], &[("BROKERLAB_PAUSE_AT", "calling:1")]);
    let pid = a.id();
    wait_for("runner A to park before its email", || is_stopped(pid));
    assert!(terminate_sessions(&s, &p.db) >= 1);
    let o = p.run(&["resume", "ww"], &[]);
    o.expect(3);
    assert!(o.stdout().contains("0 applied"), "{}", o.stdout());
    p.run(&["review", "ww", "--step", "0", "--retry"], &[]).expect(0);
    p.run(&["resume", "ww"], &[]).expect(0);
    assert!(stop_or_continue(pid, false));
    let oa = wait_child(a);
    oa.expect(1);
    assert!(oa.stderr().contains("fenced"), "{}", oa.stderr());
    assert_eq!(p.d.applied(EMAILS, "ww", 0), 1, "{:?}", p.d.calls_full(EMAILS));
}

/// Issue 21, section 2 on PostgreSQL: a fork of a parent parked at its email's intent is refused
/// while the parent may send it (before the fix: made, reviewed "0 applied", retried: two emails).
#[test]
fn a_fork_of_a_live_parent_is_refused_on_postgres() {
    let s = PgServer::start("livefork");
    let p = Db::new(&s, "livefork", true);
    p.d.write("spec.toml", WW);
    let a = p.spawn(&["run", "spec.toml", "--lease-ms", "60000"], &[("BROKERLAB_PAUSE_AT", "calling:1")]);
    let pid = a.id();
    wait_for("the parent to park", || is_stopped(pid));
    let at: i64 = s
        .client(&p.db)
        .query_one("SELECT min(seq) FROM log_records WHERE task_id='ww' AND kind='tool-intent'", &[])
        .unwrap()
        .get(0);
    let o = p.run(&["fork", "ww", "--at", &at.to_string()], &[("BROKERLAB_BUSY_MS", "300")]);
    o.expect(1);
    assert!(o.stderr().contains("cannot fork") && o.stderr().contains("send_email"), "{}", o.stderr());
    assert!(stop_or_continue(pid, false));
    wait_child(a).expect(0);
    let o = p.run(&["fork", "ww", "--at", &at.to_string()], &[]);
    o.expect(3);
    assert!(o.stdout().contains("1 applied"), "{}", o.stdout());
    assert_eq!(p.d.applied(EMAILS, "ww", 0) + p.d.applied(EMAILS, "ww.f1", 0), 1);
}

/// Issue 21, section 3 on PostgreSQL (before the fix: 51 of 108 tries reported corruption): a
/// `task resume` of a task another runner is running says it is held, never "log corruption".
#[test]
fn resuming_a_running_task_never_reports_a_false_corruption_on_postgres() {
    let s = PgServer::start("falsecorrupt");
    let p = Db::new(&s, "falsecorrupt", false);
    let mut spec = String::from("id = \"busy\"\n");
    // 1,000 steps: the runner outlives 20 resumes even on a loaded 2-core machine (300 steps
    // allowed only 17 there once); the loop stops as soon as 20 were refused as held
    for i in 0..1000 {
        let tool = if i % 2 == 0 { "payment" } else { "send_email" };
        spec.push_str(&format!("[[step]]\nmodel = \"s{i}\"\ntool = \"{tool}\"\nargs = {{ n = {i} }}\n"));
    }
    p.d.write("spec.toml", &spec);
    let mut runner = p.spawn(&["run", "spec.toml", "--lease-ms", "60000"], &[]);
    wait_for("the runner's first call", || !p.d.calls("payments.sqlite").is_empty());
    let (mut tries, mut held) = (0, 0);
    let t = Instant::now();
    while held < 20 && runner.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(60) {
        let o = p.run(&["resume", "busy"], &[]);
        tries += 1;
        match o.code() {
            1 if o.stderr().contains("already being run by") => held += 1,
            0 => {}
            c => panic!("try {tries}: exit {c}: {}{}", o.stdout(), o.stderr()),
        }
    }
    wait_child(runner).expect(0);
    eprintln!("{tries} resumes of a running task, {held} refused as held");
    assert!(held >= 20, "{held} of {tries}");
}

/// Issue 21, section 4: a password in the URL's userinfo, in a `password=` parameter or in
/// `$PGPASSWORD` never reaches a message or the log; a refused login says what the server said
/// (before the fix: "connecting: db error", and a `password=` parameter printed as given and
/// stored in the task's world URL).
#[test]
fn passwords_stay_out_of_messages_and_the_log() {
    let s = PgServer::start("secrets");
    s.require_password("pwuser", "Right-Pw-42");
    s.client("postgres").batch_execute("CREATE DATABASE sec OWNER pwuser").unwrap();
    let port = s.port();
    let d = Dir::new("pg-secrets");
    d.write("spec.toml", WW);
    let base = format!("postgres://pwuser@127.0.0.1:{port}/sec");
    // wrong passwords, each form: the server's words, never the password
    for (url, env) in [
        (format!("postgres://pwuser:Wrong-Pw-1@127.0.0.1:{port}/sec"), None),
        (format!("{base}?password=Wrong-Pw-2"), None),
        (base.clone(), Some("Wrong-Pw-3")),
    ] {
        let mut e = vec![];
        if let Some(pw) = env {
            e.push(("PGPASSWORD", pw));
        }
        let o = d.run_env(&["list", "--db", &url], &e);
        o.expect(2);
        let err = o.stderr();
        assert!(err.contains("password authentication failed for user \"pwuser\""), "{err}");
        assert!(!err.contains("Wrong-Pw"), "a password leaked: {err}");
    }
    // the right one, each form: it works, and is printed and stored nowhere
    let with_param = format!("{base}?password=Right-Pw-42");
    let o = d.run(&["run", "spec.toml", "--db", &with_param, "--world", &with_param]);
    o.expect(0);
    let userinfo = format!("postgres://pwuser:Right-Pw-42@127.0.0.1:{port}/sec");
    let outs = [
        o,
        d.run(&["list", "--db", &userinfo]),
        d.run_env(&["inspect", "ww", "--db", &base], &[("PGPASSWORD", "Right-Pw-42")]),
        d.run(&["resume", "nosuch", "--db", &with_param]),
        d.run(&["bench", "--steps", "5", "--json", "--db", &with_param]),
    ];
    for (i, o) in outs.iter().enumerate() {
        assert!(i == 3 || o.code() == 0, "{i}: {}{}", o.stdout(), o.stderr());
        let all = format!("{}{}", o.stdout(), o.stderr());
        assert!(!all.contains("Right-Pw-42"), "{i}: a password leaked: {all}");
    }
    assert!(outs[3].stderr().contains("password=***"), "{}", outs[3].stderr());
    let mut c = s.client("sec");
    let world: String = c.query_one("SELECT world FROM tasks WHERE task_id='ww'", &[]).unwrap().get(0);
    assert!(!world.contains("Right-Pw-42") && !world.contains("password"), "stored: {world}");
    let leaked: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT spec || coalesce(world, '') AS t FROM tasks UNION ALL SELECT array_to_string(summaries, ' ') FROM log) x WHERE t LIKE '%Right-Pw-42%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(leaked, 0);
}

/// A stand-in for a PostgreSQL server that is starting up: it answers every startup message
/// with SQLSTATE 57P03 ("the database system is starting up") for its first `refusals`
/// connections, then passes the bytes through to the real server at `real` (if any). Returns
/// its port and the count of connections it saw.
fn starting_up_server(refusals: usize, real: Option<u16>) -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let n = count.fetch_add(1, Ordering::SeqCst);
            if n >= refusals
                && let Some(real) = real
            {
                let Ok(up) = TcpStream::connect(("127.0.0.1", real)) else { continue };
                let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut c2, &mut up2));
                std::thread::spawn(move || {
                    let mut up = up;
                    std::io::copy(&mut up, &mut c)
                });
                continue;
            }
            let _ = refuse(&mut c);
        }
    });
    (port, seen)
}

/// Reads a startup message (answering an SSL request with 'N' first) and sends the error.
fn refuse(c: &mut TcpStream) -> std::io::Result<()> {
    loop {
        let mut len = [0u8; 4];
        c.read_exact(&mut len)?;
        let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
        c.read_exact(&mut body)?;
        if body.get(..4) == Some(&80877103u32.to_be_bytes()[..]) {
            c.write_all(b"N")?;
            continue;
        }
        break;
    }
    let mut f = Vec::new();
    for (k, v) in [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', "57P03"), (b'M', "the database system is starting up")] {
        f.push(k);
        f.extend_from_slice(v.as_bytes());
        f.push(0);
    }
    f.push(0);
    let mut msg = vec![b'E'];
    msg.extend_from_slice(&((f.len() + 4) as u32).to_be_bytes());
    msg.extend_from_slice(&f);
    c.write_all(&msg)
}

/// Issue 21, section 4: connecting while the server is starting up (or in crash recovery) is
/// retried while it says so, and a command started then succeeds once it accepts sessions; a
/// server that keeps refusing past the connect timeout is exit 1 (the same command succeeds
/// later: not bad input), in its own words. Before the fix: exit 1 at the first refusal.
#[test]
fn a_server_starting_up_is_waited_for() {
    let s = PgServer::start("startup");
    let _url = s.create_db("startup");
    let d = Dir::new("pg-startup");
    d.write("spec.toml", WW);
    let (port, seen) = starting_up_server(3, Some(s.port()));
    let url = format!("postgres://postgres@127.0.0.1:{port}/startup");
    let o = d.run(&["run", "spec.toml", "--db", &url]);
    o.expect(0);
    assert_eq!(seen.load(Ordering::SeqCst), 3 + 1, "three refusals, then the runner's session");
    let (port, seen) = starting_up_server(usize::MAX, None);
    let url = format!("postgres://postgres@127.0.0.1:{port}/startup?connect_timeout=1");
    let t = Instant::now();
    let o = d.run(&["list", "--db", &url]);
    o.expect(1);
    let e = o.stderr();
    assert!(e.contains("the database system is starting up") && e.contains("not accepting sessions"), "{e}");
    assert!(seen.load(Ordering::SeqCst) >= 5, "asked again while it said so: {}", seen.load(Ordering::SeqCst));
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// Issue 21, section 5 on PostgreSQL: a hook variable set against a database not created for
/// fault injection is exit 2 naming it, before the schema is created; an existing log cannot be
/// marked; a corrupt lease row is exit 2 naming the row.
#[test]
fn fault_hooks_and_corrupt_rows_on_postgres() {
    let s = PgServer::start("pghooks");
    let p = Db::new(&s, "pghooks", false);
    p.d.write("spec.toml", WW);
    let o = p.run(&["run", "spec.toml"], &[("BROKERLAB_AS_HOST", "elsewhere/")]);
    o.expect(2);
    assert!(o.stderr().contains("BROKERLAB_AS_HOST") && o.stderr().contains("not a fault-injection"), "{}", o.stderr());
    let tables: i64 =
        s.client(&p.db).query_one("SELECT count(*) FROM pg_tables WHERE schemaname='public'", &[]).unwrap().get(0);
    assert_eq!(tables, 0, "nothing was created");
    p.run(&["run", "spec.toml"], &[]).expect(0);
    p.run(&["init", "--fault-injection"], &[]).expect(2);
    let mut c = s.client(&p.db);
    c.batch_execute("UPDATE leases SET expires_at_ms = expires_at_ms + 43460588147400").unwrap();
    for args in [&["inspect", "ww"][..], &["list"][..]] {
        let o = p.run(args, &[]);
        o.expect(2);
        assert!(o.stderr().contains("corrupt leases row of task \"ww\""), "{}", o.stderr());
    }
}

/// `task bench --takeover-kills`: both series are measured and honest: the unfenced one never
/// takes over before the expiry the holder wrote, and neither applies a side effect twice (the
/// figures themselves come from the command, not from here: docs/RUNNER.md).
#[test]
fn the_takeover_bench_measures_both_series() {
    let s = PgServer::start("tbench");
    let url = s.create_db("tbench");
    let d = Dir::new("pg-tbench");
    let dir = d.path("b");
    let args = ["bench", "--steps", "5", "--json", "--db", &url, "--dir", dir.to_str().unwrap()];
    let o = d.run(
        &[&args[..], &["--takeover-kills", "3", "--takeover-unfenced-kills", "1"], &["--takeover-lease-ms", "800"]]
            .concat(),
    );
    o.expect(0);
    let v: serde_json::Value = serde_json::from_str(o.stdout().trim()).unwrap();
    let t = &v["takeover"];
    let n = |s: &str, k: &str| t[s][k].as_f64().unwrap_or_else(|| panic!("no {s}.{k} in {t}"));
    assert_eq!(n("fenced", "kills"), 3.0, "{t}");
    assert_eq!(n("unfenced", "kills"), 1.0, "{t}");
    for series in ["fenced", "unfenced"] {
        assert_eq!(n(series, "duplicates"), 0.0, "{t}");
        assert!(
            n(series, "lease_record_ms_min") >= 0.0 && n(series, "takeover_ms_min") >= n(series, "lease_record_ms_min"),
            "{t}"
        );
    }
    assert_eq!(n("unfenced", "before_expiry"), 0.0, "{t}");
    assert!(n("unfenced", "lease_after_expiry_ms_min") >= 0.0, "{t}");
    // an existing log is not marked for the bench's fault hooks
    let p = Db::new(&s, "tbench-existing", false);
    p.d.write("spec.toml", WW);
    p.run(&["run", "spec.toml"], &[]).expect(0);
    let o = d.run(&["bench", "--steps", "5", "--db", &p.url, "--takeover-kills", "1"]);
    o.expect(2);
    assert!(o.stderr().contains("cannot be marked"), "{}", o.stderr());
}
