//! `brokerlab task chaos`: real runner processes killed with SIGKILL at random times, restarted and
//! reviewed, then checked from the tools' own SQLite files. And the checker must be able to fail:
//! a world file with a duplicated, a missing or a foreign payment is reported.

use std::path::PathBuf;
use std::process::{Command, Output};

use rusqlite::Connection;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("brokerlab-chaos-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
    fn world(&self, file: &str) -> Connection {
        Connection::open(self.0.join("world").join(file)).unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn chaos(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["task", "chaos"])
        .args(args)
        .env_remove("BROKERLAB_CRASH_AT")
        .env_remove("BROKERLAB_PAUSE_AT")
        .env_remove("BROKERLAB_STEP_DELAY_MS")
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{s}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// The acceptance run: 200 iterations, no duplicate, nothing lost, the window hit. The
/// counts must also agree with each other, which checks that the window is counted exactly:
/// every payment call killed in the window is re-sent once with the same key (one deduplicated
/// row each), every email killed in the window is marked done by the reviewer, and every email
/// killed after its intent but before the call is retried.
#[test]
fn chaos_200_iterations_exactly_once() {
    let d = Dir::new("200");
    let out = chaos(&["--iterations", "200", "--seed", "1", "--json", "--dir", d.s()]);
    let v = json(&out);
    eprintln!("{v}");
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(n(&v, "iterations"), 200);
    assert_eq!(n(&v, "duplicates"), 0, "{v}");
    assert_eq!(n(&v, "lost"), 0, "{v}");
    assert_eq!(n(&v, "errors"), 0, "{v}");
    assert!(v["ok"].as_bool().unwrap());
    let kills = n(&v, "kills");
    let window = n(&v, "window_kills");
    assert!(kills >= 200, "{v}");
    assert!(window > 0, "{v}");
    assert!(n(&v, "kills_aimed") > 0 && n(&v, "kills_aimed") < kills, "both aimed and uniform kills: {v}");
    assert!(window * 4 >= kills, "the window should be hit often: {window} of {kills}");
    // Bookkeeping, equal by construction (each kill is put in exactly one class): these guard the
    // report's arithmetic, not the runner.
    assert_eq!(window, n(&v, "window_kills_payment") + n(&v, "window_kills_email"));
    assert_eq!(
        kills,
        window + n(&v, "kills_intent_no_call") + n(&v, "kills_lookup_in_flight") + n(&v, "kills_elsewhere")
    );
    assert_eq!(n(&v, "needs_review"), n(&v, "reviews_mark_done") + n(&v, "reviews_retry"), "{v}");
    // Checks: counts from independent sources agree. The deduplicated rows are read from the
    // payment tool's own file and the window kills from the logs at the kill; the reviews'
    // verdicts from the email tool's file.
    assert_eq!(n(&v, "deduplicated"), n(&v, "window_kills_payment"), "{v}");
    assert_eq!(n(&v, "reviews_mark_done"), n(&v, "window_kills_email"), "{v}");
    assert!(n(&v, "needs_review") > 0, "{v}");
    // the pause fault class happened, and every woken runner stopped without acting
    assert!(n(&v, "pauses") > 0, "{v}");
    // bookkeeping: each pause is parked at one of three points
    assert_eq!(n(&v, "pauses"), n(&v, "pauses_calling") + n(&v, "pauses_before_tool") + n(&v, "pauses_after_commit"));
    // check: every woken runner's exit status says fenced or idle (anything else is an error)
    assert_eq!(n(&v, "pauses"), n(&v, "paused_fenced") + n(&v, "paused_idle"), "{v}");
    assert!(n(&v, "fenced_calls") > 0, "a paused runner's call reached a tool and was refused: {v}");
    // the files it leaves verify on their own
    let again = chaos(&["--verify", d.s(), "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stdout));
    assert_eq!(n(&json(&again), "iterations"), 201, "200 tasks and the calibration task");
}

/// The checker catches a duplicated payment, a missing one, a payment under a foreign key, and a
/// duplicated email; a checker that cannot fail is worthless.
#[test]
fn checker_catches_violations() {
    let d = Dir::new("tamper");
    let out = chaos(&["--iterations", "3", "--seed", "7", "--json", "--dir", d.s(), "--steps", "6"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let verify = || {
        let o = chaos(&["--verify", d.s(), "--json"]);
        let v = json(&o);
        (o.status.code(), n(&v, "duplicates"), n(&v, "lost"), v)
    };
    assert_eq!(verify().0, Some(0));
    let pay = d.world("payments.sqlite");
    let (id, key, task, step): (i64, String, String, i64) = pay
        .query_row("SELECT id, key, task_id, step FROM calls WHERE applied=1 ORDER BY id LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    // 1. the same payment applied twice
    pay.execute(
        "INSERT INTO calls(key, task_id, step, applied, args, at_ms) VALUES(?1, ?2, ?3, 1, '{}', 0)",
        rusqlite::params![key, task, step],
    )
    .unwrap();
    let (code, dup, lost, v) = verify();
    assert_eq!((code, dup, lost), (Some(1), 1, 0), "{v}");
    assert!(v["problems"].to_string().contains(&format!("step {step}")), "{v}");
    // 2. the payment missing
    pay.execute("DELETE FROM calls WHERE task_id=?1 AND step=?2", rusqlite::params![task, step]).unwrap();
    let (code, dup, lost, v) = verify();
    assert_eq!((code, dup, lost), (Some(1), 0, 1), "{v}");
    // 3. a payment under a key the runner never derives for that step
    pay.execute(
        "INSERT INTO calls(id, key, task_id, step, applied, args, at_ms) VALUES(?1, 'not-the-key', ?2, ?3, 1, '{}', 0)",
        rusqlite::params![id, task, step],
    )
    .unwrap();
    let (code, dup, _, v) = verify();
    assert_eq!((code, dup), (Some(1), 1), "{v}");
    pay.execute("UPDATE calls SET key=?1 WHERE id=?2", rusqlite::params![key, id]).unwrap();
    assert_eq!(verify().0, Some(0), "restored");
    // 4. an email sent twice
    let mail = d.world("emails.sqlite");
    let n_mail: i64 = mail
        .query_row(
            "INSERT INTO calls(key, task_id, step, applied, args, at_ms) SELECT NULL, task_id, step, 1, args, 0 \
             FROM calls WHERE applied=1 ORDER BY id LIMIT 1 RETURNING id",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(n_mail > 0);
    let (code, dup, lost, v) = verify();
    assert_eq!((code, dup, lost), (Some(1), 1, 0), "{v}");
    // 5. a payment on a step that is not a payment step
    mail.execute("DELETE FROM calls WHERE id=?1", [n_mail]).unwrap();
    assert_eq!(verify().0, Some(0));
    pay.execute(
        "INSERT INTO calls(key, task_id, step, applied, args, at_ms) VALUES('k', ?1, 999, 1, '{}', 0)",
        rusqlite::params![task],
    )
    .unwrap();
    let (code, dup, _, v) = verify();
    assert_eq!((code, dup), (Some(1), 1), "{v}");
}

/// Without kills the window cannot be hit, and the output says so; bad flags are exit 2.
#[test]
fn says_when_the_window_was_not_hit_and_rejects_bad_flags() {
    let d = Dir::new("nokill");
    let out = chaos(&["--iterations", "2", "--max-kills", "0", "--steps", "4", "--dir", d.s()]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(s.contains("no kill landed in the window"), "{s}");
    assert!(s.contains("SIGKILLs                     0"), "{s}");
    // the directory now holds a log: refused, not mixed
    let again = chaos(&["--iterations", "1", "--dir", d.s()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--verify"));
    assert_eq!(chaos(&["--iterations", "0"]).status.code(), Some(2));
    assert_eq!(chaos(&["--steps", "2"]).status.code(), Some(2));
}
