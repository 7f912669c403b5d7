//! The in-repo servers of a chaos run with `--tools http` or `--model openai`: the HTTP tool
//! server (`task serve-tools`, its own SQLite file DIR/tool-server.sqlite, the witness of every
//! call) and the OpenAI-compatible model server (`task serve-model`), both child processes of
//! this one on loopback, with injected faults drawn from the run's seed. The tool server is also
//! killed with SIGKILL and restarted on the same port every 1 to 4 s (down 0 to 300 ms): a call
//! in flight then loses its answer after the server may have committed it, which is the window
//! the runner's class rule must get right.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::spec::{Draws, Endpoints, ModelMode, ToolsMode};
use crate::task::error::{TaskError, TaskResult};

/// Shortest time between two tool-server restarts, ms.
const RESTART_EVERY_MIN_MS: u64 = 1000;
/// Longest time between two tool-server restarts, ms.
const RESTART_EVERY_MAX_MS: u64 = 4000;
/// Longest time the tool server stays down, ms (well inside the HTTP tools' retry budget of
/// about 3 s in the chaos specs, so no call gives up on a restart).
const DOWN_MAX_MS: u64 = 300;
/// How long a server may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The tool server's file in a chaos directory.
pub fn tool_file(dir: &Path) -> PathBuf {
    dir.join("tool-server.sqlite")
}

/// One server child and its port.
struct Server {
    child: Child,
    port: u16,
    /// Its stdout, kept open so a later line never meets a closed pipe.
    _out: Option<BufReader<std::process::ChildStdout>>,
}

/// Starts `exe task <args> --port PORT --exit-with-parent` and reads its port from its first
/// stdout line (`listening on http://127.0.0.1:PORT`); retried while the port is still taken.
fn start(exe: &Path, args: &[String], port: u16) -> TaskResult<Server> {
    let t = Instant::now();
    loop {
        let mut c = Command::new(exe);
        c.arg("task").args(args).arg("--port").arg(port.to_string()).arg("--exit-with-parent");
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child =
            c.spawn().map_err(|e| TaskError::failure(format!("{}: cannot start {}: {e}", exe.display(), args[0])))?;
        let mut line = String::new();
        let mut out = child.stdout.take().map(BufReader::new);
        if let Some(o) = out.as_mut() {
            let _ = o.read_line(&mut line);
        }
        let got = line.trim().strip_prefix("listening on http://127.0.0.1:").and_then(|p| p.parse::<u16>().ok());
        match got {
            Some(p) => return Ok(Server { child, port: p, _out: out }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                if t.elapsed() > START_TIMEOUT {
                    return Err(TaskError::failure(format!("task {}: did not start on port {port}", args[0])));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The servers of one chaos run; dropped, they are killed.
pub(super) struct Servers {
    exe: PathBuf,
    tool_args: Vec<String>,
    tools: Option<Arc<Mutex<Server>>>,
    model: Option<Server>,
}

impl Servers {
    /// Starts the servers the modes need (none for the built-in tools and the scripted model).
    pub(super) fn start(exe: &Path, dir: &Path, tools: ToolsMode, model: ModelMode, seed: u64) -> TaskResult<Servers> {
        let tool_args: Vec<String> = vec![
            "serve-tools".into(),
            "--db".into(),
            tool_file(dir).display().to_string(),
            "--faults".into(),
            seed.to_string(),
        ];
        let tools = match tools {
            ToolsMode::Http => Some(Arc::new(Mutex::new(start(exe, &tool_args, 0)?))),
            ToolsMode::Builtin => None,
        };
        let model = match model {
            ModelMode::Openai => {
                let log = dir.join("model-server.log").display().to_string();
                let args: Vec<String> =
                    vec!["serve-model".into(), "--faults".into(), (seed ^ 0x0DE1).to_string(), "--log".into(), log];
                Some(start(exe, &args, 0)?)
            }
            ModelMode::Script => None,
        };
        Ok(Servers { exe: exe.to_path_buf(), tool_args, tools, model })
    }

    /// Where they listen.
    pub(super) fn endpoints(&self) -> Endpoints {
        let tools = self.tools.as_ref().map(|s| s.lock().map_or(0, |s| s.port));
        Endpoints {
            tools: tools.map(|p| format!("http://127.0.0.1:{p}")).unwrap_or_default(),
            model: self.model.as_ref().map(|s| format!("http://127.0.0.1:{}/v1", s.port)).unwrap_or_default(),
        }
    }

    /// A thread that kills (SIGKILL) and restarts the tool server on its port every 1 to 4 s
    /// (drawn from `seed`) until `stop`; it returns how many times. None without a tool server.
    pub(super) fn restart_tools_every(&self, seed: u64, stop: Arc<AtomicBool>) -> Option<JoinHandle<u64>> {
        let server = self.tools.clone()?;
        let (exe, args) = (self.exe.clone(), self.tool_args.clone());
        Some(std::thread::spawn(move || {
            let mut rng = Draws::new(seed ^ 0x5E4E_4E57);
            let mut n = 0;
            loop {
                let wait = RESTART_EVERY_MIN_MS + rng.below(RESTART_EVERY_MAX_MS - RESTART_EVERY_MIN_MS);
                let until = Instant::now() + Duration::from_millis(wait);
                while Instant::now() < until {
                    if stop.load(Ordering::Relaxed) {
                        return n;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let down = Duration::from_millis(rng.below(DOWN_MAX_MS + 1));
                let Ok(mut s) = server.lock() else { return n };
                let _ = s.child.kill();
                let _ = s.child.wait();
                std::thread::sleep(down);
                match start(&exe, &args, s.port) {
                    Ok(new) => *s = new,
                    Err(e) => {
                        eprintln!("brokerlab: chaos: the tool server did not come back: {e}");
                        return n;
                    }
                }
                n += 1;
            }
        }))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(t) = self.tools.take()
            && let Ok(mut s) = t.lock()
        {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        if let Some(mut s) = self.model.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}
