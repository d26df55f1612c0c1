//! What every stage process shares: the `/healthz` + `/metrics` endpoint (`ops.listen`) and
//! the signals that stop it (SIGTERM from Kubernetes, Ctrl-C at a terminal).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use trawl_query::service::OPENMETRICS_TEXT;

type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A running endpoint; stops with the process.
pub struct Ops {
    stopping: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
    addr: Option<std::net::SocketAddr>,
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
                addr: None,
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
                    addr: None,
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
                    async move { ([("content-type", OPENMETRICS_TEXT)], render()) }
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
            addr: Some(addr),
        })
    }

    /// The address served, if any.
    #[cfg(test)]
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        self.addr
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
            tracing::debug!(addr = ?self.addr, "ops endpoint closed");
        }
    }
}

/// A stage's metrics at one scrape: the counters its library keeps, read when `/metrics` is
/// asked for and handed to `prometheus-client` as typed constant metrics (counters, gauges,
/// counters with a label) in a registry of their own, encoded as OpenMetrics text
/// ([`OPENMETRICS_TEXT`]). Names are given as exposed: a counter's `_total` is the encoder's
/// sample suffix, so `trawl_chunk_files_total` is the family `trawl_chunk_files`.
#[derive(Debug, Default)]
pub struct Text(Vec<Family>);

#[derive(Debug)]
enum Family {
    Counter(String, String, u64),
    Gauge(String, String, f64),
    Labelled(String, String, String, Vec<(String, u64)>),
}

/// The family name of a counter exposed as `name`.
fn counter_family(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

impl Text {
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> &mut Self {
        self.0
            .push(Family::Counter(name.to_owned(), help.to_owned(), value));
        self
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> &mut Self {
        self.0
            .push(Family::Gauge(name.to_owned(), help.to_owned(), value));
        self
    }

    /// A counter with one label, one sample per value.
    pub fn labelled<'a>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        values: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> &mut Self {
        let values = values.into_iter().map(|(v, n)| (v.to_owned(), n)).collect();
        self.0.push(Family::Labelled(
            name.to_owned(),
            help.to_owned(),
            label.to_owned(),
            values,
        ));
        self
    }

    /// The OpenMetrics text of what was added (and nothing when encoding fails).
    pub fn finish(&mut self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Text(std::mem::take(&mut self.0))));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
            out.clear();
        }
        out
    }
}

impl Collector for Text {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for family in &self.0 {
            match family {
                Family::Counter(name, help, value) => {
                    let c = ConstCounter::new(*value);
                    c.encode(encoder.encode_descriptor(
                        counter_family(name),
                        help,
                        None,
                        c.metric_type(),
                    )?)?;
                }
                Family::Gauge(name, help, value) => {
                    let g = ConstGauge::new(*value);
                    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
                }
                Family::Labelled(name, help, label, values) => {
                    let mut family = encoder.encode_descriptor(
                        counter_family(name),
                        help,
                        None,
                        MetricType::Counter,
                    )?;
                    for (v, n) in values {
                        let labels = [(label.as_str(), v.as_str())];
                        ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[tokio::test]
    async fn the_endpoint_serves_typed_metrics_under_their_names_and_they_move() {
        let files = Arc::new(AtomicU64::new(0));
        let render = {
            let files = files.clone();
            move || {
                let mut t = Text::default();
                t.counter(
                    "trawl_test_files_total",
                    "Files seen.",
                    files.load(Ordering::Relaxed),
                )
                .gauge("trawl_test_generation", "The last generation.", 7.0)
                .labelled(
                    "trawl_test_notes_total",
                    "Files by note.",
                    "note",
                    [("syntax_error", 2), ("no_grammar", 1)],
                );
                t.finish()
            }
        };
        let ops = Ops::start("127.0.0.1:0", "test", render).await.unwrap();
        let url = format!("http://{}/metrics", ops.addr().unwrap());
        let scrape = || async {
            let r = reqwest::get(&url).await.unwrap();
            assert_eq!(r.headers()["content-type"], OPENMETRICS_TEXT);
            r.text().await.unwrap()
        };
        let body = scrape().await;
        let expected = "\
# HELP trawl_test_files Files seen.
# TYPE trawl_test_files counter
trawl_test_files_total 0
# HELP trawl_test_generation The last generation.
# TYPE trawl_test_generation gauge
trawl_test_generation 7.0
# HELP trawl_test_notes Files by note.
# TYPE trawl_test_notes counter
trawl_test_notes_total{note=\"syntax_error\"} 2
trawl_test_notes_total{note=\"no_grammar\"} 1
# EOF
";
        assert_eq!(body, expected);
        files.fetch_add(3, Ordering::Relaxed);
        assert!(
            scrape().await.contains("\ntrawl_test_files_total 3\n"),
            "the counter did not move"
        );
        let health = reqwest::get(format!("http://{}/healthz", ops.addr().unwrap()))
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
    }
}
