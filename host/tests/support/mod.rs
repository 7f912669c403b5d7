//! Helpers shared by the task runner's end-to-end tests: a scratch directory, the binary, and
//! readers of the log and the tools' own files.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

pub mod pg;

pub const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("brokerlab-task-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    /// A scratch directory whose log (`tasks.sqlite`) is a fault-injection database (`task init
    /// --fault-injection`): the fault hooks act on it.
    pub fn faults(name: &str) -> Dir {
        let d = Dir::new(name);
        d.run(&["init", "--fault-injection"]).expect(0);
        d
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    pub fn write(&self, f: &str, s: &str) -> PathBuf {
        let p = self.path(f);
        std::fs::write(&p, s).unwrap();
        p
    }
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(&self.0).args(["task"]).args(args);
        c.env_remove("BROKERLAB_CRASH_AT").env_remove("BROKERLAB_STEP_DELAY_MS").env_remove("BROKERLAB_LEASE_MS");
        c.env_remove("BROKERLAB_PAUSE_AT").env_remove("BROKERLAB_UNFENCED_TOOLS").env_remove("BROKERLAB_BUSY_MS");
        c.env_remove("BROKERLAB_DB").env_remove("BROKERLAB_AS_HOST").env_remove("PGPASSWORD");
        c
    }
    pub fn run(&self, args: &[&str]) -> Out {
        Out(self.cmd(args).output().unwrap())
    }
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Out(c.output().unwrap())
    }
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }
    pub fn db(&self) -> Connection {
        Connection::open(self.path("tasks.sqlite")).unwrap()
    }
    /// (key, task, step, applied) rows of a world file.
    pub fn calls(&self, file: &str) -> Vec<(Option<String>, String, i64, i64)> {
        let p = self.path("world").join(file);
        if !p.exists() {
            return vec![];
        }
        let c = Connection::open(p).unwrap();
        // the file may exist before its table (the tool is creating it)
        let Ok(mut st) = c.prepare("SELECT key, task_id, step, applied FROM calls ORDER BY id") else { return vec![] };
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(|r| r.unwrap()).collect()
    }
    pub fn kinds(&self, id: &str) -> Vec<String> {
        if !self.path("tasks.sqlite").exists() {
            return vec![];
        }
        let c = self.db();
        let Ok(mut st) = c.prepare("SELECT kind FROM log WHERE task_id=?1 ORDER BY seq") else { return vec![] };
        st.query_map([id], |r| r.get(0)).unwrap().map(|r| r.unwrap()).collect()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub struct Out(pub Output);

impl Out {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    #[track_caller]
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code(), code, "stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
        self
    }
}

pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn wait_child(c: Child) -> Out {
    Out(c.wait_with_output().unwrap())
}

/// One row of a tool's `calls`: task, step, applied, fencing token, reason.
pub type CallRow = (String, i64, i64, i64, Option<String>);

impl Dir {
    /// Every call in a tool's file, with its token and reason.
    pub fn calls_full(&self, file: &str) -> Vec<CallRow> {
        let p = self.path("world").join(file);
        if !p.exists() {
            return vec![];
        }
        let c = Connection::open(p).unwrap();
        let Ok(mut st) = c.prepare("SELECT task_id, step, applied, epoch, reason FROM calls ORDER BY id") else {
            return vec![];
        };
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }
    /// Applied calls of (task, step) in a tool's file.
    pub fn applied(&self, file: &str, task: &str, step: i64) -> usize {
        self.calls_full(file).iter().filter(|c| c.0 == task && c.1 == step && c.2 == 1).count()
    }
    /// Starts `task ARGS` with extra environment.
    pub fn spawn_env(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`).
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('T')))
        .unwrap_or(false)
}
