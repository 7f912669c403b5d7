//! The deployed worker: `task worker` started the way deploy/systemd/brokerlab-worker.service
//! starts it (its ExecStart's arguments, the database in $BROKERLAB_DB), running a task whose
//! tools are HTTP tools on the in-repo tool server, drains on SIGTERM: the call in flight is
//! finished and recorded, the task suspended and left queued, the worker exits 0; the next worker
//! finishes the task, every call applied once (the tool server's file).

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use rusqlite::Connection;
use support::pg::PgServer;
use support::{Dir, wait_child, wait_for};

/// The arguments the unit's `ExecStart=` gives the binary.
fn unit_args() -> Vec<String> {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd/brokerlab-worker.service");
    let text = std::fs::read_to_string(unit).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart line");
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/brokerlab"));
    words.map(str::to_string).collect()
}

/// Applied calls of `tool` for `task` in the tool server's file, by step.
fn applied(file: &Path, task: &str) -> Vec<(String, i64)> {
    let c = Connection::open(file).unwrap();
    let mut st = c.prepare("SELECT tool, step FROM calls WHERE task_id=?1 AND applied=1 ORDER BY id").unwrap();
    st.query_map([task], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect()
}

#[test]
fn sigterm_drains_a_worker_with_a_call_in_flight() {
    let s = PgServer::start("drain");
    let url = s.create_db("drain");
    let d = Dir::new("drain");
    let mut tools = d.cmd(&["serve-tools", "--db", "tool-server.sqlite", "--exit-with-parent"]);
    let mut tools = tools.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(tools.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_string();
    let mut spec = String::from("id = \"drain-1\"\n");
    spec.push_str(&format!(
        "[[tool]]\nname = \"pay\"\nkind = \"http\"\nclass = \"idempotent\"\nurl = \"{base}/tools/pay\"\n\
         checks_fence = true\nfence_url = \"{base}/fence\"\n"
    ));
    for i in 0..4 {
        spec.push_str(&format!("[[step]]\nmodel = \"pay {i}\"\ntool = \"pay\"\nargs = {{ n = {i} }}\n"));
    }
    d.write("spec.toml", &spec);
    let env = [("BROKERLAB_DB", url.as_str())];
    d.run_env(&["submit", "spec.toml"], &env).expect(0);
    let file = d.path("tool-server.sqlite");

    // the unit's worker; each call's result takes 400 ms to come back after the server applied it
    let mut args: Vec<String> = unit_args().into_iter().skip(1).collect(); // "task" is added by cmd
    args.extend(["--step-delay-ms".into(), "400".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let w = d.spawn_env(&args, &env);
    wait_for("the first call applied", || file.exists() && !applied(&file, "drain-1").is_empty());
    // SAFETY: sending a signal has no memory effects in this process.
    assert_eq!(unsafe { libc::kill(w.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let o = wait_child(w);
    o.expect(0);
    let kinds = |c: &mut postgres::Client| -> Vec<String> {
        c.query("SELECT kind FROM log_records WHERE task_id='drain-1' ORDER BY seq", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let mut c = s.client("drain");
    let k = kinds(&mut c);
    // the call in flight was finished and recorded before the marker
    assert_eq!(&k[k.len() - 2..], ["tool-result", "suspended"], "{k:?}\n{}", o.stderr());
    let queued: i64 = c.query_one("SELECT count(*) FROM queue", &[]).unwrap().get(0);
    assert_eq!(queued, 1, "a drained worker's task stays queued");
    let done_before = applied(&file, "drain-1").len();
    assert!((1..4).contains(&done_before), "{done_before} calls before the drain");

    d.run_env(&["worker", "--exit-when-idle"], &env).expect(0);
    let k = kinds(&mut c);
    assert_eq!(k.last().map(String::as_str), Some("completed"), "{k:?}");
    let calls = applied(&file, "drain-1");
    assert_eq!(calls, (0..4).map(|i| ("pay".to_string(), i)).collect::<Vec<_>>());
    let _ = tools.kill();
    let _ = tools.wait();
}
