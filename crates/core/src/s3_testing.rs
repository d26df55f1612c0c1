//! A local S3-API server for tests: [s3s-fs](https://crates.io/crates/s3s-fs) (SigV4
//! signatures checked, conditional puts, multipart uploads, objects on disk) served on
//! loopback, behind a fault injector that answers some requests with `503 SlowDown` and
//! stalls others past the client's timeout without applying them.
//!
//! Enabled by the `s3-testing` feature, which only dev-dependencies turn on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "trawl-test";
/// The secret key the server accepts.
pub const SECRET_KEY: &str = "trawl-test-secret";

/// Which requests fail. Counting is over every request the server receives, in order;
/// 0 turns a fault off. Changed while the server runs.
#[derive(Debug, Default)]
pub struct Faults {
    /// Every n-th request is answered `503 SlowDown` (throttling) without being applied.
    pub unavailable_every: AtomicU64,
    /// Every n-th request is held for [`Faults::stall_ms`], then answered 503, never applied:
    /// a client with a shorter timeout sees a timeout.
    pub stall_every: AtomicU64,
    pub stall_ms: AtomicU64,
    /// Requests received, 503s injected, stalls injected.
    pub requests: AtomicU64,
    pub unavailable: AtomicU64,
    pub stalled: AtomicU64,
}

impl Faults {
    fn decide(&self) -> Option<Duration> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let every = |a: &AtomicU64| {
            let k = a.load(Ordering::Relaxed);
            k > 0 && n.is_multiple_of(k)
        };
        if every(&self.stall_every) {
            self.stalled.fetch_add(1, Ordering::Relaxed);
            Some(Duration::from_millis(self.stall_ms.load(Ordering::Relaxed)))
        } else if every(&self.unavailable_every) {
            self.unavailable.fetch_add(1, Ordering::Relaxed);
            Some(Duration::ZERO)
        } else {
            None
        }
    }
}

/// A running server; stops when dropped.
pub struct S3Server {
    /// `http://127.0.0.1:<port>`
    pub endpoint: String,
    pub faults: Arc<Faults>,
    root: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Server({})", self.endpoint)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl S3Server {
    /// Starts a server on 127.0.0.1 (an ephemeral port) with the buckets named, on the
    /// current tokio runtime.
    pub async fn start(buckets: &[&str]) -> std::io::Result<Self> {
        let root = tempfile::tempdir()?;
        for b in buckets {
            std::fs::create_dir_all(root.path().join(b))?;
        }
        let fs = s3s_fs::FileSystem::new(root.path())
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let mut builder = s3s::service::S3ServiceBuilder::new(fs);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let faults = Arc::new(Faults::default());
        let f = faults.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                // Without it, a body sent after its headers waits for the client's delayed
                // ACK: 40 ms per GET, which real S3 does not cost.
                let _ = socket.set_nodelay(true);
                let (service, faults) = (service.clone(), f.clone());
                let svc = hyper::service::service_fn(move |req| {
                    let (service, faults) = (service.clone(), faults.clone());
                    async move {
                        match faults.decide() {
                            None => hyper::service::Service::call(&service, req).await,
                            Some(stall) => {
                                tokio::time::sleep(stall).await;
                                Ok(slow_down())
                            }
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(socket), svc)
                        .await;
                });
            }
        });
        Ok(Self {
            endpoint,
            faults,
            root,
            task,
        })
    }

    /// The directory holding the buckets.
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// The settings a `s3://` store needs to reach this server, in object_store's names, for
    /// [`crate::store::Store::from_url_with`].
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_access_key_id", ACCESS_KEY.into()),
            ("aws_secret_access_key", SECRET_KEY.into()),
            ("aws_region", "us-east-1".into()),
            ("aws_endpoint", self.endpoint.clone()),
            ("aws_allow_http", "true".into()),
        ]
    }

    /// The same as the `AWS_*` environment of a process.
    pub fn env(&self) -> Vec<(String, String)> {
        self.options()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_uppercase(), v))
            .collect()
    }
}

fn slow_down() -> s3s::HttpResponse {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                <Message>Please reduce your request rate.</Message></Error>";
    let mut resp = http::Response::new(s3s::Body::from(body.to_owned()));
    *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    resp
}
