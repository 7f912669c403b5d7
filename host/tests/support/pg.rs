//! A real PostgreSQL server for the tests: `initdb` in a fresh temporary directory, `postgres` on a
//! free loopback port (127.0.0.1 only, its Unix socket in the same directory, fsync on), ready
//! when `pg_isready` says so, stopped (fast shutdown) and removed on drop. PostgreSQL refuses to
//! run as root: as root the server runs as the unprivileged `postgres` user (the Debian package's),
//! which owns the directory; otherwise as the current user. No mock.
//!
//! The server's binaries: `$BROKERLAB_PG_BIN` if set, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian), else `initdb` and `postgres` on `PATH`. `scripts/test.sh` installs the `postgresql`
//! package where it is missing.
#![allow(dead_code)]
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static N: AtomicU32 = AtomicU32::new(0);

/// The server's settings: durable commits (the journal contract is tested, not assumed), and a
/// small WAL (the tests' clusters must fit a CI machine's nearly full disk).
const SERVER_OPTS: &[&str] = &[
    "-c",
    "fsync=on",
    "-c",
    "synchronous_commit=on",
    "-c",
    "max_connections=60",
    "-c",
    "min_wal_size=4MB",
    "-c",
    "max_wal_size=32MB",
];

/// A running server; stopped and its directory removed on drop.
pub struct PgServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    bin: PathBuf,
}

/// The directory holding `initdb`, `postgres` and `pg_isready`.
fn bin_dir() -> PathBuf {
    if let Ok(b) = std::env::var("BROKERLAB_PG_BIN") {
        return PathBuf::from(b);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p): &(u32, PathBuf)| p.join("postgres").exists())
        .collect();
    versions.sort();
    if let Some((_, p)) = versions.pop() {
        return p;
    }
    for d in std::env::var("PATH").unwrap_or_default().split(':') {
        if Path::new(d).join("initdb").exists() && Path::new(d).join("postgres").exists() {
            return PathBuf::from(d);
        }
    }
    panic!(
        "no PostgreSQL server binaries (initdb, postgres): install the `postgresql` package (scripts/test.sh does) \
         or set BROKERLAB_PG_BIN"
    );
}

/// The uid and gid the server runs as: `postgres` when we are root, else ourselves.
fn server_ids() -> Option<(u32, u32)> {
    // SAFETY: getuid has no side effects.
    if unsafe { libc::getuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line = passwd.lines().find(|l| l.starts_with("postgres:")).expect(
        "running as root and there is no `postgres` user to run the server as (PostgreSQL refuses root): install \
         the `postgresql` package (scripts/test.sh does)",
    );
    let f: Vec<&str> = line.split(':').collect();
    Some((f[2].parse().unwrap(), f[3].parse().unwrap()))
}

fn as_server_user(c: &mut Command, ids: Option<(u32, u32)>) -> &mut Command {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = ids {
        c.uid(uid).gid(gid);
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PgServer {
    /// Initializes and starts a server; panics (naming the log) if it does not come up.
    pub fn start(name: &str) -> PgServer {
        let bin = bin_dir();
        let ids = server_ids();
        // the server's user must reach the directory: as root, /tmp (a $TMPDIR under /root
        // would not be traversable by `postgres`)
        let base = if ids.is_some() { PathBuf::from("/tmp") } else { std::env::temp_dir() };
        let dir =
            base.join(format!("brokerlab-pg-{}-{name}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        let data = dir.join("data");
        let out = as_server_user(&mut Command::new(bin.join("initdb")), ids)
            .current_dir(&dir)
            .args(["-D"])
            .arg(&data)
            // 1 MB WAL segments: a cluster takes about 25 MB of disk instead of 40
            .args(["-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync", "--wal-segsize=1"])
            .output()
            .expect("running initdb");
        if !out.status.success() {
            // the usual cause on a CI machine is a full disk: say how full
            let df = Command::new("df").arg("-h").arg(&dir).output().map(|o| o.stdout).unwrap_or_default();
            panic!(
                "initdb failed: {}{}\ndisk: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&df)
            );
        }
        // a port found free can be taken before the server binds it: try a few
        for _ in 0..5 {
            let mut s = PgServer { dir: dir.clone(), port: free_port(), child: None, bin: bin.clone() };
            if s.launch() {
                return s;
            }
            s.stop();
            let log = s.log();
            assert!(log.contains("could not bind") || log.contains("in use"), "postgres did not start:\n{log}");
        }
        panic!("postgres: no free port after 5 tries");
    }

    /// Starts `postgres` on the data directory and port; true once it accepts connections.
    fn launch(&mut self) -> bool {
        let ids = server_ids();
        let logf = self.dir.join("server.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&logf).unwrap();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&logf, Some(uid), Some(gid)).unwrap();
        }
        let mut c = Command::new(self.bin.join("postgres"));
        as_server_user(&mut c, ids)
            .current_dir(&self.dir)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1", "-k"])
            .arg(&self.dir)
            .args(SERVER_OPTS)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // if the test process dies without dropping us, the server goes too (immediate
        // shutdown), instead of outliving the test run
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                Ok(())
            });
        }
        self.child = Some(c.spawn().expect("starting postgres"));
        self.wait_ready()
    }

    /// Starts the stopped server again (same data, same port), as after a restart.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop it first");
        assert!(self.launch(), "postgres did not restart: {}", self.log());
    }

    /// Waits (up to 30 s) until `pg_isready` accepts; false if the server exited.
    fn wait_ready(&mut self) -> bool {
        let t = Instant::now();
        loop {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            let ok = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-t", "1"])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return true;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "postgres not ready after 30 s: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Its TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A client on database `db`.
    pub fn client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.url(db), postgres::NoTls).unwrap_or_else(|e| panic!("{}: {e}", self.url(db)))
    }

    /// Creates database `db` (empty) and returns its URL.
    pub fn create_db(&self, db: &str) -> String {
        self.client("postgres").batch_execute(&format!("CREATE DATABASE \"{db}\"")).unwrap();
        self.url(db)
    }

    /// Shell commands that stop (fast shutdown) and start this server with `pg_ctl`, as the
    /// server's user (`runuser -u postgres --` when we are root): what `task chaos
    /// --pg-stop-cmd/--pg-start-cmd` runs to restart it. A server started by them is not our
    /// child; [`PgServer::stop`] stops it too (through `pg_ctl`).
    pub fn ctl_cmds(&self) -> (String, String) {
        let pre = if server_ids().is_some() { "runuser -u postgres -- " } else { "" };
        let (bin, dir) = (self.bin.display(), self.dir.display());
        let stop = format!("{pre}{bin}/pg_ctl -D {dir}/data -m fast -w -t 30 stop");
        let start = format!(
            "{pre}{bin}/pg_ctl -D {dir}/data -l {dir}/server.log -w -t 30 -o '-p {} -c listen_addresses=127.0.0.1 \
             -k {dir} {}' start",
            self.port,
            SERVER_OPTS.join(" ")
        );
        (stop, start)
    }

    /// Fast shutdown (SIGINT: open sessions are ended, their transactions rolled back); SIGKILL
    /// after 20 s. A server started by [`PgServer::ctl_cmds`]' start command is stopped with
    /// `pg_ctl`.
    pub fn stop(&mut self) {
        self.stop_child();
        if self.dir.join("data/postmaster.pid").exists() {
            let mut c = Command::new(self.bin.join("pg_ctl"));
            as_server_user(&mut c, server_ids())
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "fast", "-w", "-t", "30", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = c.status();
        }
    }

    /// Immediate shutdown (SIGQUIT: every session ends at once, no checkpoint; the next start
    /// runs crash recovery), as `pg_ctl stop -m immediate` does. Start it again with
    /// [`PgServer::restart`].
    pub fn stop_immediate(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGQUIT);
        }
        let _ = c.wait();
    }

    /// Creates login role `user` with `password` and makes the server ask for it
    /// (`scram-sha-256`) on TCP connections of that role; the others stay `trust`.
    pub fn require_password(&self, user: &str, password: &str) {
        self.client("postgres").batch_execute(&format!("CREATE ROLE {user} LOGIN PASSWORD '{password}'")).unwrap();
        let hba = self.dir.join("data/pg_hba.conf");
        let old = std::fs::read_to_string(&hba).unwrap();
        // first match wins: this line before the trust lines (written in place: same owner)
        std::fs::write(&hba, format!("host all {user} 127.0.0.1/32 scram-sha-256\n{old}")).unwrap();
        self.client("postgres").batch_execute("SELECT pg_reload_conf()").unwrap();
        std::thread::sleep(Duration::from_millis(300)); // the postmaster reads it on SIGHUP
    }

    fn stop_child(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: sending a signal has no memory effects in this process.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGINT);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A loopback port nothing listens on (found free a moment ago).
pub fn unused_port() -> u16 {
    free_port()
}
