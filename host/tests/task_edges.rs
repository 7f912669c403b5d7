//! The runner's edges found by a hostile tester (issue 10, section 3): each is exit 2 (or a
//! reported failure) with a message naming the flag, file or row, and nothing is lost.

use std::process::Command;

use rusqlite::Connection;

mod support;
use support::{BIN, Dir, wait_child};

const SPEC: &str = r#"
id = "e"
[[step]]
model = "pay"
tool = "payment"
args = { amount = 10, to = "acct-1" }
[[step]]
model = "tell"
tool = "send_email"
args = { to = "a@example.com" }
[[step]]
model = "done"
"#;

#[test]
fn lease_flags_are_bounded() {
    let d = Dir::new("lease-bounds");
    d.write("spec.toml", SPEC);
    for bad in ["18446744073709551615", "0", "9", "86400001"] {
        let o = d.run(&["run", "spec.toml", "--lease-ms", bad]);
        o.expect(2);
        assert!(o.stderr().contains("--lease-ms") && o.stderr().contains("86400000"), "{}", o.stderr());
    }
    let o = d.run_env(&["run", "spec.toml"], &[("BROKERLAB_LEASE_MS", "0")]);
    o.expect(2);
    assert!(o.stderr().contains("BROKERLAB_LEASE_MS"), "{}", o.stderr());
    let o = d.run(&["run", "spec.toml", "--lease-ms", "1000", "--lease-margin-ms", "1000"]);
    o.expect(2);
    assert!(o.stderr().contains("--lease-margin-ms"), "{}", o.stderr());
    assert!(!d.path("tasks.sqlite").exists(), "nothing was created");
    d.run(&["run", "spec.toml", "--lease-ms", "10"]).expect(0);
}

#[test]
fn another_applications_database_is_left_byte_for_byte() {
    let d = Dir::new("foreign-db");
    d.write("spec.toml", SPEC);
    let p = d.path("other.sqlite");
    {
        let c = Connection::open(&p).unwrap();
        c.execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE mine(x); INSERT INTO mine VALUES (1);").unwrap();
    }
    let before = std::fs::read(&p).unwrap();
    for args in
        [vec!["list"], vec!["inspect", "e"], vec!["run", "spec.toml"], vec!["resume", "e"], vec!["suspend", "e"]]
    {
        let mut a = args.clone();
        a.extend(["--db", "other.sqlite"]);
        let o = d.run(&a);
        o.expect(2);
        assert!(
            o.stderr().contains("other.sqlite") && o.stderr().contains("not a brokerlab task log"),
            "{}",
            o.stderr()
        );
        assert_eq!(std::fs::read(&p).unwrap(), before, "{args:?} changed the file");
        assert!(!d.path("other.sqlite-wal").exists(), "{args:?} switched it to WAL");
    }
}

#[test]
fn list_shows_the_healthy_tasks_and_marks_a_corrupt_one() {
    let d = Dir::new("list-corrupt");
    d.write("a.toml", &SPEC.replace("id = \"e\"", "id = \"a\""));
    d.write("b.toml", &SPEC.replace("id = \"e\"", "id = \"b\""));
    d.run(&["run", "a.toml"]).expect(0);
    d.run(&["run", "b.toml"]).expect(0);
    d.db().execute("UPDATE log SET payload = x'00' WHERE task_id='b' AND seq=2", []).unwrap();
    let o = d.run(&["list"]);
    o.expect(2);
    let out = o.stdout();
    assert!(out.lines().any(|l| l.starts_with("a ") && l.contains("completed")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("b ") && l.contains("CORRUPT")), "{out}");
    assert!(o.stderr().contains("\"b\" seq 2"), "{}", o.stderr());
}

#[test]
fn a_text_payload_is_bad_input_naming_the_row() {
    let d = Dir::new("text-payload");
    d.write("spec.toml", SPEC);
    d.run(&["run", "spec.toml"]).expect(0);
    d.db().execute("UPDATE log SET payload = 'hello' WHERE task_id='e' AND seq=2", []).unwrap();
    let o = d.run(&["resume", "e"]);
    o.expect(2);
    assert!(o.stderr().contains("seq 2") && o.stderr().contains("not a blob"), "{}", o.stderr());
}

#[test]
fn a_malformed_busy_timeout_is_rejected() {
    let d = Dir::new("busy-env");
    d.write("spec.toml", SPEC);
    for bad in ["abc", "-1", "99999999999"] {
        let o = d.run_env(&["run", "spec.toml"], &[("BROKERLAB_BUSY_MS", bad)]);
        o.expect(2);
        assert!(o.stderr().contains("BROKERLAB_BUSY_MS"), "{}", o.stderr());
    }
    let o = d.run_env(&["list", "--db", "spec.toml"], &[("BROKERLAB_BUSY_MS", "abc")]);
    o.expect(2);
}

#[test]
fn the_review_prompt_says_what_the_file_shows_and_suspend_advises_review() {
    let d = Dir::faults("review-words");
    d.write("spec.toml", SPEC);
    // the runner dies after the email's intent, before the tool: the file has no call
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "before-tool:2")]).expect(137);
    let o = d.run(&["resume", "e"]);
    o.expect(3);
    let out = o.stdout();
    assert!(out.contains("0 call(s) received and 0 applied") && out.contains("did not happen"), "{out}");
    assert!(!out.contains("was sent"), "{out}");
    let o = d.run(&["suspend", "e"]);
    o.expect(2);
    assert!(o.stderr().contains("task review e --step 1"), "{}", o.stderr());
    // after the tool applied: the file shows one applied call
    let d = Dir::faults("review-words2");
    d.write("spec.toml", SPEC);
    d.run_env(&["run", "spec.toml"], &[("BROKERLAB_CRASH_AT", "tool-applied:2")]).expect(137);
    let o = d.run(&["resume", "e"]);
    o.expect(3);
    assert!(o.stdout().contains("1 applied") && o.stdout().contains("it happened"), "{}", o.stdout());
}

#[test]
fn runners_starting_together_on_a_fresh_database_all_open_it() {
    let d = Dir::new("fresh-race");
    let kids: Vec<_> = (0..8)
        .map(|i| {
            d.write(&format!("s{i}.toml"), &SPEC.replace("id = \"e\"", &format!("id = \"r{i}\"")));
            d.spawn(&["run", &format!("s{i}.toml")])
        })
        .collect();
    for k in kids {
        let o = wait_child(k);
        o.expect(0);
    }
}

#[test]
fn a_file_size_limit_is_reported_and_resume_loses_nothing() {
    let d = Dir::new("fsize");
    let mut spec = String::from("id = \"big\"\n");
    for i in 0..80 {
        let text = format!("step {i}: {}", "x".repeat(200));
        if i % 4 == 1 {
            spec.push_str(&format!(
                "[[step]]\nmodel = \"{text}\"\ntool = \"payment\"\nargs = {{ amount = {i}, to = \"acct\" }}\n"
            ));
        } else {
            spec.push_str(&format!("[[step]]\nmodel = \"{text}\"\n"));
        }
    }
    d.write("big.toml", &spec);
    // 256 blocks of 512 B (dash) or 1 KiB (bash): the WAL outgrows it long before 80 steps
    let out = Command::new("sh")
        .current_dir(&d.0)
        .arg("-c")
        .arg(format!("ulimit -f 256 && exec {BIN} task run big.toml"))
        .output()
        .unwrap();
    let o = support::Out(out);
    assert!(o.0.status.code().is_some(), "killed by a signal: {:?} {}", o.0.status, o.stderr());
    assert_ne!(o.code(), 0, "the limit was hit: {}", o.stdout());
    assert!(o.stderr().contains("brokerlab: error:") && o.stderr().contains(".sqlite"), "{}", o.stderr());
    d.run(&["resume", "big"]).expect(0);
    let pays = d.calls("payments.sqlite");
    for step in (1..80).step_by(4) {
        let n = pays.iter().filter(|c| c.1 == "big" && c.2 == step && c.3 == 1).count();
        assert_eq!(n, 1, "step {step}: {pays:?}");
    }
    assert_eq!(d.kinds("big").last().map(String::as_str), Some("completed"));
}
