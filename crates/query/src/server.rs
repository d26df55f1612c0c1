//! `trawl serve`: the HTTP face of a [`Searcher`].
//!
//! - `POST /v1/search` — a [`SearchRequest`] as JSON → a [`SearchResponse`].
//! - `GET /healthz` — 200 once a generation is served (503 before), with its number only.
//! - `GET /metrics` — OpenMetrics text: request counts, latency histograms, the generation.
//! - `GET /openapi.json` — the OpenAPI 3.1 description of the above.
//!
//! With tokens configured every search needs `Authorization: Bearer <token>`, and sees only
//! the repositories its token allows: filtering happens inside the search, a hidden repository
//! answers exactly like one that does not exist, and nothing the service exposes counts docs.
//!
//! Every bound is written down (`[serve]`): a connection must send its headers (and finish
//! its TLS handshake) within `header_timeout_secs`, its body within `body_timeout_secs`, and
//! the whole request is cut at `request_timeout_secs`; at most `max_connections` are open and
//! `max_concurrent_searches` search, the next ones wait `queue_ms` and then get 503 with
//! `Retry-After` rather than a queue without end. A web page must not be able to drive a
//! server on a laptop: a POST needs `Content-Type: application/json` (a cross-origin page can
//! only send that after a CORS preflight, which this server never grants), and the `Host`
//! must be an IP address, `localhost` or a name of `serve.allowed_hosts` (a DNS-rebinding page
//! sends its own name).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use trawl_core::config::ServeConfig;

use crate::QueryError;
use crate::access::Tokens;
use crate::request::{Cited, Context, ErrorBody, Hit, Mode, SearchRequest, SearchResponse};
use crate::service::{OPENMETRICS_TEXT, Searcher};

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct App {
    pub searcher: Arc<Searcher>,
    pub tokens: Arc<Tokens>,
    pub guard: Arc<Guard>,
}

impl App {
    /// The service of `searcher` for `tokens`, bounded as `serve` says.
    pub fn new(searcher: Arc<Searcher>, tokens: Tokens, serve: &ServeConfig) -> Self {
        Self {
            searcher,
            tokens: Arc::new(tokens),
            guard: Arc::new(Guard::new(serve)),
        }
    }
}

/// The per-request defences: the names served, the search slots, the timeouts.
#[derive(Debug)]
pub struct Guard {
    hosts: Hosts,
    searches: Arc<tokio::sync::Semaphore>,
    queue: Duration,
    body_timeout: Duration,
    request_timeout: Duration,
    max_body_bytes: usize,
}

/// Seconds a client is told to wait (`Retry-After`) when every search slot is taken.
pub const RETRY_AFTER_SECS: u64 = 1;

impl Guard {
    pub fn new(cfg: &ServeConfig) -> Self {
        Self {
            hosts: Hosts::new(&cfg.allowed_hosts),
            searches: Arc::new(tokio::sync::Semaphore::new(
                cfg.max_concurrent_searches.max(1),
            )),
            queue: Duration::from_millis(cfg.queue_ms),
            body_timeout: Duration::from_secs(cfg.body_timeout_secs.max(1)),
            request_timeout: Duration::from_secs(cfg.request_timeout_secs.max(1)),
            max_body_bytes: cfg.max_body_bytes.max(1024),
        }
    }
}

/// The `Host` names a server answers to.
#[derive(Debug)]
struct Hosts {
    /// `None`: any (`"*"` configured).
    names: Option<Vec<String>>,
}

impl Hosts {
    fn new(allowed: &[String]) -> Self {
        let names: Vec<String> = allowed.iter().map(|h| normalize_host(h)).collect();
        Self {
            names: (!names.iter().any(|n| n == "*")).then_some(names),
        }
    }

    /// Whether `host` (a `Host` header value, port included or not) is served. An IP
    /// address always is: a DNS-rebinding page reaches the server through a name of its own.
    fn allows(&self, host: &str) -> bool {
        let Some(names) = &self.names else {
            return true;
        };
        let h = normalize_host(host);
        h == "localhost"
            || h.parse::<std::net::Ipv4Addr>().is_ok()
            || h.strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
            || names.contains(&h)
    }
}

/// A host name without its port, lowercase, without a trailing dot.
fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = if h.starts_with('[') {
        h.split_inclusive(']').next().unwrap_or(h)
    } else {
        match h.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        }
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// The router of the service.
pub fn router(app: App) -> axum::Router {
    let guard = app.guard.clone();
    axum::Router::new()
        .route("/v1/search", post(search))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .layer(axum::middleware::from_fn_with_state(
            (guard, app.searcher.clone()),
            defend,
        ))
        .with_state(app)
}

/// Host and content type checked, then the request run within its time.
async fn defend(
    State((guard, searcher)): State<(Arc<Guard>, Arc<Searcher>)>,
    req: Request,
    next: Next,
) -> Response {
    let m = &searcher.metrics;
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(ToString::to_string));
    if let Some(host) = host
        && !guard.hosts.allows(&host)
    {
        m.refused.inc();
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            &format!(
                "host {:?} is not served here: add it to serve.allowed_hosts (IP addresses and localhost are always served)",
                normalize_host(&host)
            ),
        );
    }
    if req.method() == Method::POST && !is_json(req.headers()) {
        m.refused.inc();
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request with `Content-Type: application/json`",
        );
    }
    match tokio::time::timeout(guard.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            m.timeouts.inc();
            busy(&format!(
                "the request took over {} s (serve.request_timeout_secs): try again, or narrow the query",
                guard.request_timeout.as_secs()
            ))
        }
    }
}

/// Whether the body is declared JSON (`application/json`, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// 503 with `Retry-After`.
fn busy(message: &str) -> Response {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, message);
    r.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(RETRY_AFTER_SECS),
    );
    r
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = ErrorBody {
        error: message.to_owned(),
    };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for QueryError {
    fn into_response(self) -> Response {
        let status = match &self {
            QueryError::BadRequest(_) => StatusCode::BAD_REQUEST,
            QueryError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            QueryError::NoIndex => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut r = error(status, &self.to_string());
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

#[utoipa::path(
    post,
    path = "/v1/search",
    summary = "Search the index",
    request_body(content = SearchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Ranked results", body = SearchResponse),
        (status = 400, description = "Malformed request or a value out of range", body = ErrorBody),
        (status = 401, description = "Missing or unknown bearer token", body = ErrorBody),
        (status = 408, description = "The body did not arrive in time", body = ErrorBody),
        (status = 413, description = "Request body too large", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 421, description = "The Host is not one this server answers to", body = ErrorBody),
        (status = 503, description = "No index generation loaded yet, every search slot taken (with Retry-After), or the request took too long", body = ErrorBody),
    )
)]
async fn search(State(app): State<App>, req: Request) -> Response {
    let m = &app.searcher.metrics;
    let access = match app.tokens.check(bearer(req.headers())) {
        Ok(a) => a,
        Err(e) => {
            m.unauthorized.inc();
            return e.into_response();
        }
    };
    // The body is kept up to `serve.max_body_bytes`. Past it, the rest is read and thrown
    // away (up to DISCARD_BYTES) so that the client, still sending, gets the 413 instead of a
    // broken pipe; a larger body is cut off.
    let limit = app.guard.max_body_bytes;
    let body = match tokio::time::timeout(
        app.guard.body_timeout,
        read_bounded(req.into_body(), limit),
    )
    .await
    {
        Ok(Some(body)) => body,
        Ok(None) => {
            m.bad_requests.inc();
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the request body is over {limit} bytes (serve.max_body_bytes); queries are limited to {} bytes",
                    app.searcher.max_query_bytes
                ),
            );
        }
        Err(_) => {
            m.timeouts.inc();
            return error(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request body did not arrive within {} s (serve.body_timeout_secs)",
                    app.guard.body_timeout.as_secs()
                ),
            );
        }
    };
    let request: SearchRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            m.bad_requests.inc();
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "invalid search request: {e}; expected {{\"query\": \"…\", \"k\": 10, \"repo\", \"lang\", \"path\", \"kind\", \"expand\", \"mode\"}}"
                ),
            );
        }
    };
    // A slot to search in: waiting is bounded, past it the client is told to come back.
    let Ok(Ok(_slot)) =
        tokio::time::timeout(app.guard.queue, app.guard.searches.clone().acquire_owned()).await
    else {
        m.saturated.inc();
        return busy(
            "every search slot is taken (serve.max_concurrent_searches): retry after the Retry-After seconds",
        );
    };
    match app.searcher.search(&request, access).await {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => {
            match &e {
                QueryError::BadRequest(_) => m.bad_requests.inc(),
                _ => m.errors.inc(),
            };
            if !matches!(e, QueryError::BadRequest(_)) {
                tracing::error!(error = %e, "search failed");
            }
            e.into_response()
        }
    }
}

/// Bytes of an oversized body read and discarded before answering 413.
const DISCARD_BYTES: usize = 32 * 1024 * 1024;

/// The body if it is at most `limit` bytes; `None` (after draining up to [`DISCARD_BYTES`])
/// when it is larger or broken.
async fn read_bounded(body: axum::body::Body, limit: usize) -> Option<bytes::Bytes> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.ok()?;
        seen += chunk.len();
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        } else if seen > DISCARD_BYTES {
            return None;
        }
    }
    (seen <= limit).then(|| bytes::Bytes::from(kept))
}

#[utoipa::path(
    get,
    path = "/healthz",
    summary = "Readiness: a generation is loaded",
    security(()),
    responses(
        (status = 200, description = "Serving"),
        (status = 503, description = "No generation yet")
    )
)]
async fn healthz(State(app): State<App>) -> Response {
    match app.searcher.generation() {
        Some(g) => {
            axum::Json(serde_json::json!({"status": "ok", "generation": g.number})).into_response()
        }
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no index generation loaded yet",
        ),
    }
}

#[utoipa::path(
    get,
    path = "/metrics",
    summary = "Prometheus metrics",
    security(()),
    responses((status = 200, description = "Text exposition format"))
)]
async fn metrics(State(app): State<App>) -> Response {
    let m = &app.searcher.metrics;
    m.generation
        .set(app.searcher.generation().map_or(0, |g| g.number.0 as i64));
    match m.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_TEXT)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode the metrics");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the metrics could not be encoded",
            )
        }
    }
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    summary = "This document",
    security(()),
    responses((status = 200, description = "OpenAPI 3.1"))
)]
async fn openapi() -> Response {
    axum::Json(openapi_document()).into_response()
}

/// The OpenAPI 3.1 document of the service, derived from the request and response types and
/// the handlers' annotations.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "trawl query service",
        description = "Hybrid (vector + BM25) code search over the live index generation. Filters and access control apply inside the search."
    ),
    paths(search, healthz, metrics, openapi),
    components(schemas(SearchRequest, Context, Cited, Hit, SearchResponse, Mode, ErrorBody)),
    modifiers(&BearerScheme),
    security(("bearer" = []))
)]
struct Document;

/// The `bearer` security scheme of `/v1/search`.
struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
    }
}

/// The OpenAPI 3.1 document of the service.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    <Document as utoipa::OpenApi>::openapi()
}

/// How connections are accepted: TLS or not, their number, the time to send headers.
#[derive(Clone)]
pub struct Transport {
    tls: Option<tokio_rustls::TlsAcceptor>,
    max_connections: usize,
    header_timeout: Duration,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .finish()
    }
}

impl Transport {
    /// The transport `serve` configures: HTTPS when `tls_cert` and `tls_key` are set.
    pub fn new(cfg: &ServeConfig) -> Result<Self, QueryError> {
        let tls = match (
            cfg.tls_cert.as_os_str().is_empty(),
            cfg.tls_key.as_os_str().is_empty(),
        ) {
            (true, true) => None,
            (false, false) => Some(tls_acceptor(&cfg.tls_cert, &cfg.tls_key)?),
            _ => {
                return Err(QueryError::Config(
                    "set both serve.tls_cert and serve.tls_key (PEM files), or neither".into(),
                ));
            }
        };
        Ok(Self {
            tls,
            max_connections: cfg.max_connections.max(1),
            header_timeout: Duration::from_secs(cfg.header_timeout_secs.max(1)),
        })
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// A rustls acceptor of the PEM certificate chain and key (HTTP/1.1 by ALPN).
fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsAcceptor, QueryError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        QueryError::Config(format!(
            "serve.{what} {}: {e}: give a PEM file",
            path.display()
        ))
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("tls_cert", cert, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad("tls_cert", cert, &e))?;
    if chain.is_empty() {
        return Err(bad("tls_cert", cert, &"no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls_key", key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| QueryError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            QueryError::Config(format!(
                "serve.tls_cert and serve.tls_key do not make a usable pair: {e}"
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves until `shutdown` resolves; polls `CURRENT` every `poll`. Connections in flight get
/// up to 10 s to finish after it.
pub async fn serve(
    app: App,
    listener: tokio::net::TcpListener,
    transport: Transport,
    poll: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let poller = tokio::spawn(app.searcher.clone().poll(poll));
    let service = TowerToHyperService::new(router(app));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(transport.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(transport.max_connections));
    tokio::pin!(shutdown);
    loop {
        // A connection slot first: past `max_connections`, clients wait in the backlog.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let service = service.clone();
        let http = http.clone();
        let watcher = graceful.watcher();
        let tls = transport.tls.clone();
        let handshake = transport.header_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let r = match tls {
                None => {
                    let conn = http.serve_connection(TokioIo::new(tcp), service);
                    watcher.watch(conn).await
                }
                Some(acceptor) => {
                    let stream = match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
            };
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open 10 s after the stop signal: closing them");
    }
    poller.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_addresses_localhost_or_configured_names() {
        let h = Hosts::new(&[]);
        for ok in [
            "localhost",
            "localhost:7700",
            "LOCALHOST.",
            "127.0.0.1:7700",
            "[::1]:7700",
            "[::1]",
            "10.1.2.3",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for no in [
            "evil.example",
            "evil.example:7700",
            "127.0.0.1.nip.io",
            "[evil]",
        ] {
            assert!(!h.allows(no), "{no}");
        }
        let h = Hosts::new(&["Search.Acme.Internal".into()]);
        assert!(h.allows("search.acme.internal:443"));
        assert!(!h.allows("evil.example"));
        assert!(Hosts::new(&["*".into()]).allows("evil.example"));
    }

    #[test]
    fn only_json_is_a_json_body() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("application/jsonp"));
        assert!(!is_json(&HeaderMap::new()));
    }

    /// The property names of component `name`, through `allOf` and `$ref`.
    fn properties(doc: &serde_json::Value, name: &str) -> std::collections::BTreeSet<String> {
        let schema = &doc["components"]["schemas"][name];
        assert!(schema.is_object(), "no schema {name}");
        let mut out: std::collections::BTreeSet<String> = schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        for part in schema["allOf"].as_array().into_iter().flatten() {
            if let Some(r) = part["$ref"].as_str() {
                out.extend(properties(
                    doc,
                    r.trim_start_matches("#/components/schemas/"),
                ));
            }
            if let Some(p) = part["properties"].as_object() {
                out.extend(p.keys().cloned());
            }
        }
        out
    }

    /// Every key of `value` (a JSON object) is a property of schema `name`.
    fn covered(doc: &serde_json::Value, name: &str, value: &serde_json::Value) {
        let props = properties(doc, name);
        let keys: std::collections::BTreeSet<String> =
            value.as_object().unwrap().keys().cloned().collect();
        let missing: Vec<_> = keys.difference(&props).collect();
        assert!(missing.is_empty(), "{name} lacks {missing:?}");
        assert_eq!(
            keys, props,
            "{name}: the document has properties the type has not"
        );
    }

    #[test]
    fn the_openapi_document_covers_every_field_of_the_request_and_response_types() {
        use crate::request::{Cited, Context, ErrorBody, Hit, Mode, SearchResponse};
        let doc = serde_json::to_value(openapi_document()).unwrap();
        let cited = Cited {
            repo: "r".into(),
            commit: "c".into(),
            path: "p".into(),
            start_line: 1,
            end_line: 2,
            symbol: Some("s".into()),
            kind: "function".into(),
            text: "t".into(),
        };
        let response = SearchResponse {
            generation: serde_json::from_value(serde_json::json!(3)).unwrap(),
            mode: Mode::Lexical,
            results: vec![Hit {
                chunk: cited.clone(),
                score: 0.5,
                language: "python".into(),
                chunk_id: "id".into(),
                context: vec![Context {
                    relation: "caller".into(),
                    chunk: cited,
                }],
            }],
            notes: vec!["n".into()],
            search_ms: 1.0,
            embed_ms: 2.0,
        };
        let v = serde_json::to_value(&response).unwrap();
        covered(&doc, "SearchResponse", &v);
        covered(&doc, "Hit", &v["results"][0]);
        covered(&doc, "Context", &v["results"][0]["context"][0]);
        let request = SearchRequest {
            query: "q".into(),
            k: Some(5),
            repo: vec!["a".into()],
            lang: vec!["rust".into()],
            path: vec!["src/".into()],
            kind: vec!["function".into()],
            expand: true,
            mode: Mode::Vector,
        };
        covered(
            &doc,
            "SearchRequest",
            &serde_json::to_value(&request).unwrap(),
        );
        let error = ErrorBody { error: "e".into() };
        covered(&doc, "Error", &serde_json::to_value(&error).unwrap());
    }

    #[test]
    fn the_openapi_document_says_what_the_service_does() {
        let doc = serde_json::to_value(openapi_document()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"],
            serde_json::json!({"type": "http", "scheme": "bearer"})
        );
        assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
        let schemas = &doc["components"]["schemas"];
        let request = &schemas["SearchRequest"];
        assert_eq!(request["additionalProperties"], false);
        assert_eq!(request["required"], serde_json::json!(["query"]));
        let p = &request["properties"];
        assert_eq!(p["query"]["minLength"], 1);
        assert_eq!(
            (&p["k"]["minimum"], &p["k"]["default"]),
            (&1.into(), &10.into())
        );
        assert_eq!(p["expand"]["default"], false);
        assert_eq!(p["mode"]["default"], "hybrid");
        assert_eq!(p["repo"]["oneOf"][1]["maxItems"], 64);
        let modes = serde_json::json!(["hybrid", "vector", "lexical"]);
        assert_eq!(p["mode"]["oneOf"][0]["enum"], modes);
        assert_eq!(schemas["Mode"]["enum"], modes);
        let relation = &schemas["Context"]["allOf"][1]["properties"]["relation"];
        assert_eq!(
            relation["enum"],
            serde_json::json!(crate::request::RELATIONS)
        );
        assert_eq!(crate::request::RELATIONS.len(), 8);
        let search = &doc["paths"]["/v1/search"]["post"];
        let statuses: Vec<&String> = search["responses"].as_object().unwrap().keys().collect();
        assert_eq!(
            statuses,
            ["200", "400", "401", "408", "413", "415", "421", "503"]
        );
        assert_eq!(
            search["responses"]["413"]["description"],
            "Request body too large"
        );
        assert_eq!(
            search["responses"]["400"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/Error"
        );
        for path in ["/healthz", "/metrics", "/openapi.json"] {
            assert_eq!(
                doc["paths"][path]["get"]["security"],
                serde_json::json!([{}]),
                "{path}"
            );
        }
    }
}
