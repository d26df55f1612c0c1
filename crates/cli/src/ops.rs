//! What every stage process shares: the `/healthz` + `/metrics` endpoint (`ops.listen`) and
//! the signals that stop it (SIGTERM from Kubernetes, Ctrl-C at a terminal).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;

type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A running endpoint; stops with the process.
pub struct Ops {
    stopping: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Ops {
    /// Serves `/healthz` (200 `ok` while running, 503 `stopping` once a shutdown began) and
    /// `/metrics` (Prometheus text from `render`) on `listen`; nothing when `listen` is empty.
    /// The bound address is printed on stderr (`listen` may use port 0). An address in use
    /// is reported and the stage runs without the endpoint.
    pub async fn start(
        listen: &str,
        stage: &'static str,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let stopping = Arc::new(AtomicBool::new(false));
        if listen.is_empty() {
            return Ok(Self {
                stopping,
                task: None,
            });
        }
        // A busy address (another stage on this machine) costs the endpoint, not the work.
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "{stage}: no /healthz or /metrics: cannot listen on {listen} ({e}); set ops.listen to another address, port 0 for any, or empty for none"
                );
                tracing::warn!(%listen, error = %e, "ops endpoint disabled");
                return Ok(Self {
                    stopping,
                    task: None,
                });
            }
        };
        let addr = listener.local_addr()?;
        eprintln!("{stage}: /healthz and /metrics on http://{addr}");
        let render: Render = Arc::new(render);
        let s = stopping.clone();
        let app = axum::Router::new()
            .route(
                "/healthz",
                axum::routing::get(move || {
                    let s = s.clone();
                    async move {
                        if s.load(Ordering::Relaxed) {
                            (StatusCode::SERVICE_UNAVAILABLE, "stopping\n")
                        } else {
                            (StatusCode::OK, "ok\n")
                        }
                    }
                }),
            )
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let render = render.clone();
                    async move { ([("content-type", "text/plain; version=0.0.4")], render()) }
                }),
            );
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "ops endpoint stopped");
            }
        });
        Ok(Self {
            stopping,
            task: Some(task),
        })
    }

    /// From now on `/healthz` answers 503.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Prometheus text for counters and gauges.
#[derive(Default)]
pub struct Text(String);

impl Text {
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> &mut Self {
        self.metric(name, help, "counter", &value.to_string())
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> &mut Self {
        self.metric(name, help, "gauge", &value.to_string())
    }

    /// A counter with one label, one sample per value.
    pub fn labelled<'a>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        values: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> &mut Self {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} counter");
        for (v, n) in values {
            let _ = writeln!(self.0, "{name}{{{label}=\"{v}\"}} {n}");
        }
        self
    }

    fn metric(&mut self, name: &str, help: &str, kind: &str, value: &str) -> &mut Self {
        let _ = writeln!(
            self.0,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
        self
    }

    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.0)
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn terminated() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            () = term => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs `work` (which stops when `trigger` is requested) until it returns. The first signal
/// requests the shutdown (in-flight work is finished and acknowledged); a second one gives
/// up at once (`None`: what was not acknowledged is delivered again).
pub async fn until_finished<T>(
    work: impl std::future::Future<Output = T>,
    trigger: &trawl_core::shutdown::Trigger,
    ops: &Ops,
    stage: &str,
) -> Option<T> {
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => return Some(r),
        () = terminated() => {}
    }
    ops.stopping();
    trigger.request();
    eprintln!(
        "{stage}: stopping — finishing and acknowledging the work in flight (signal again to quit now)"
    );
    tokio::select! {
        r = &mut work => Some(r),
        () = terminated() => {
            eprintln!("{stage}: quitting now: unacknowledged messages will be delivered again");
            None
        }
    }
}
