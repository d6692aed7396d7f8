//! Real shared stores for the scale-out tests: Debian's `redis-server` and PostgreSQL
//! (installed by scripts/test.sh), each started on a free loopback port in its own temporary
//! folder as an unprivileged user, and stopped on drop.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

/// Who runs the servers when the tests run as root: `nobody` (PostgreSQL refuses root, and
/// neither server needs it).
const NOBODY: u32 = 65534;

/// `program`, as `nobody` when the tests run as root (set in the child before exec, so killing
/// the child kills the server itself).
pub fn command(program: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    // /proc/self belongs to the process' effective user.
    let root =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc")) == 0;
    if root {
        c.uid(NOBODY).gid(NOBODY);
    }
    c
}

/// A folder the unprivileged user may write.
pub fn open_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
}

pub fn find(program: &str, candidates: &[&str]) -> String {
    candidates
        .iter()
        .find(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .unwrap_or_else(|| panic!("{program} is missing: scripts/test.sh installs it"))
}

/// A redis-server of its own; `stop` and `start` keep its port.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    password: Option<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// A server that requires `password` (`requirepass`).
    pub fn start_with(password: Option<&str>) -> RedisServer {
        let dir = tempfile::tempdir().expect("redis dir");
        open_dir(dir.path());
        let mut r = RedisServer {
            child: None,
            port: super::free_port(),
            dir,
            password: password.map(str::to_owned),
        };
        r.resume();
        r
    }

    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Starts the server again on its port (after `stop`), and waits until it accepts.
    pub fn resume(&mut self) {
        let bin = find(
            "redis-server",
            &["/usr/bin/redis-server", "/usr/local/bin/redis-server"],
        );
        let mut child = command(&bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .args(["--logfile", ""])
            .args(
                self.password
                    .iter()
                    .flat_map(|p| ["--requirepass".to_owned(), p.clone()]),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let stdout = child.stdout.take().expect("redis stdout");
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = lines
                .next()
                .expect("redis-server exited before it was ready")
                .expect("redis stdout");
            if line.contains("Ready to accept connections") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        self.child = Some(child);
    }

    /// Kills the server (its clients see connection errors until `resume`).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A command on this server (`redis-cli`-like, through the crate the gateway uses).
    pub async fn query(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.url()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn).await.expect("redis command")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Debian's PostgreSQL binaries (`/usr/lib/postgresql/<version>/bin`).
fn pg_bin(name: &str) -> String {
    let mut found: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found
        .pop()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| panic!("PostgreSQL's {name} is missing: scripts/test.sh installs it"))
}

/// A PostgreSQL server of its own: a fresh cluster (`initdb`, trust auth for `fedgate` on
/// loopback) and the server process itself, stopped on drop.
pub struct PostgresServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl PostgresServer {
    pub fn start() -> PostgresServer {
        let dir = tempfile::tempdir().expect("postgres dir");
        open_dir(dir.path());
        let data = dir.path().join("data");
        let out = command(&pg_bin("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "fedgate", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = super::free_port();
        let mut child = command(&pg_bin("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start postgres");
        let stderr = child.stderr.take().expect("postgres stderr");
        let mut lines = BufReader::new(stderr).lines();
        loop {
            let line = lines
                .next()
                .expect("postgres exited before it was ready")
                .expect("postgres stderr");
            if line.contains("ready to accept connections") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        PostgresServer {
            child,
            port,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://fedgate@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Immediate shutdown: the backends go with the postmaster.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGQUIT,
        );
        let _ = self.child.wait();
    }
}
