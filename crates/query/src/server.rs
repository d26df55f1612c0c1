//! `trawl serve`: the HTTP face of a [`Searcher`].
//!
//! - `POST /v1/search` — a [`SearchRequest`] as JSON → a [`SearchResponse`].
//! - `GET /healthz` — 200 once a generation is served (503 before), with its number only.
//! - `GET /metrics` — Prometheus text: request counts, latency histograms, the generation.
//! - `GET /openapi.json` — the OpenAPI 3.1 description of the above.
//!
//! With tokens configured every search needs `Authorization: Bearer <token>`, and sees only
//! the repositories its token allows: filtering happens inside the search, a hidden repository
//! answers exactly like one that does not exist, and nothing the service exposes counts docs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::QueryError;
use crate::access::Tokens;
use crate::request::SearchRequest;
use crate::service::Searcher;

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct App {
    pub searcher: Arc<Searcher>,
    pub tokens: Arc<Tokens>,
}

/// The router of the service.
pub fn router(app: App) -> axum::Router {
    axum::Router::new()
        .route("/v1/search", post(search))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .with_state(app)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
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

async fn search(State(app): State<App>, req: Request) -> Response {
    let m = &app.searcher.metrics;
    let access = match app.tokens.check(bearer(req.headers())) {
        Ok(a) => a,
        Err(e) => {
            m.unauthorized.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    // The body is kept up to a bound derived from the query limit. Past it, the rest is read
    // and thrown away (up to DISCARD_BYTES) so that the client, still sending, gets the 413
    // instead of a broken pipe; a larger body is cut off.
    let limit = app.searcher.max_query_bytes * 2 + 64 * 1024;
    let Some(body) = read_bounded(req.into_body(), limit).await else {
        m.bad_requests.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is over {limit} bytes; queries are limited to {} bytes",
                app.searcher.max_query_bytes
            ),
        );
    };
    let request: SearchRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            m.bad_requests.fetch_add(1, Ordering::Relaxed);
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "invalid search request: {e}; expected {{\"query\": \"…\", \"k\": 10, \"repo\", \"lang\", \"path\", \"kind\", \"expand\", \"mode\"}}"
                ),
            );
        }
    };
    match app.searcher.search(&request, access).await {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => {
            match &e {
                QueryError::BadRequest(_) => m.bad_requests.fetch_add(1, Ordering::Relaxed),
                _ => m.errors.fetch_add(1, Ordering::Relaxed),
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

async fn metrics(State(app): State<App>) -> Response {
    use std::fmt::Write;
    let m = &app.searcher.metrics;
    let mut out = String::new();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let counters = [
        (
            "trawl_query_searches_total",
            "Searches answered.",
            &m.searches,
        ),
        (
            "trawl_query_bad_requests_total",
            "Requests refused as malformed or over a limit.",
            &m.bad_requests,
        ),
        (
            "trawl_query_unauthorized_total",
            "Requests without a valid bearer token.",
            &m.unauthorized,
        ),
        (
            "trawl_query_errors_total",
            "Searches that failed.",
            &m.errors,
        ),
        (
            "trawl_query_generation_swaps_total",
            "Index generations loaded.",
            &m.generation_swaps,
        ),
        (
            "trawl_query_rerank_failures_total",
            "Searches answered without the reranker because it failed.",
            &m.rerank_failures,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
            g(v)
        );
    }
    let generation = app.searcher.generation().map_or(0, |g| g.number);
    let _ = writeln!(
        out,
        "# HELP trawl_query_generation The index generation served.\n# TYPE trawl_query_generation gauge\ntrawl_query_generation {generation}"
    );
    m.search_seconds.render(
        "trawl_query_search_seconds",
        "Search latency, excluding the query embedding.",
        &mut out,
    );
    m.embed_seconds.render(
        "trawl_query_embed_seconds",
        "Query embedding latency.",
        &mut out,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn openapi() -> Response {
    axum::Json(openapi_document()).into_response()
}

/// The OpenAPI 3.1 document of the service.
pub fn openapi_document() -> serde_json::Value {
    let strings = serde_json::json!({
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 64}]
    });
    let context = serde_json::json!({
        "type": "object",
        "required": ["relation", "repo", "commit", "path", "start_line", "end_line", "kind", "text"],
        "properties": {
            "relation": {"type": "string", "enum": ["member", "container", "overlap", "parent", "sibling", "callee"]},
            "repo": {"type": "string"}, "commit": {"type": "string"}, "path": {"type": "string"},
            "start_line": {"type": "integer"}, "end_line": {"type": "integer"},
            "symbol": {"type": ["string", "null"]}, "kind": {"type": "string"}, "text": {"type": "string"}
        }
    });
    serde_json::json!({
        "openapi": "3.1.0",
        "info": {
            "title": "trawl query service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Hybrid (vector + BM25) code search over the live index generation. Filters and access control apply inside the search."
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "SearchRequest": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["query"],
                    "properties": {
                        "query": {"type": "string", "minLength": 1, "description": "Words, an identifier, a qualified name or an error message."},
                        "k": {"type": "integer", "minimum": 1, "default": 10},
                        "repo": strings.clone(),
                        "lang": strings.clone(),
                        "path": strings.clone(),
                        "kind": strings,
                        "expand": {"type": "boolean", "default": false, "description": "Attach parent, siblings and callees as context."},
                        "mode": {"type": "string", "enum": ["hybrid", "vector", "lexical"], "default": "hybrid"}
                    }
                },
                "Context": context,
                "Hit": {
                    "type": "object",
                    "required": ["repo", "commit", "path", "start_line", "end_line", "kind", "score", "text"],
                    "properties": {
                        "repo": {"type": "string"}, "commit": {"type": "string"}, "path": {"type": "string"},
                        "start_line": {"type": "integer"}, "end_line": {"type": "integer"},
                        "symbol": {"type": ["string", "null"]}, "kind": {"type": "string"},
                        "score": {"type": "number"}, "text": {"type": "string"},
                        "language": {"type": "string"}, "chunk_id": {"type": "string"},
                        "context": {"type": "array", "items": {"$ref": "#/components/schemas/Context"}}
                    }
                },
                "SearchResponse": {
                    "type": "object",
                    "required": ["generation", "mode", "results", "search_ms", "embed_ms"],
                    "properties": {
                        "generation": {"type": "integer"},
                        "mode": {"type": "string"},
                        "results": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                        "notes": {"type": "array", "items": {"type": "string"}},
                        "search_ms": {"type": "number"}, "embed_ms": {"type": "number"}
                    }
                },
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/search": {"post": {
                "summary": "Search the index",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SearchRequest"}}}},
                "responses": {
                    "200": {"description": "Ranked results", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SearchResponse"}}}},
                    "400": {"description": "Malformed request or a value out of range", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "401": {"description": "Missing or unknown bearer token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "413": {"description": "Request body too large", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "503": {"description": "No index generation loaded yet", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                }
            }},
            "/healthz": {"get": {"summary": "Readiness: a generation is loaded", "security": [], "responses": {"200": {"description": "Serving"}, "503": {"description": "No generation yet"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": [], "responses": {"200": {"description": "Text exposition format"}}}},
            "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3.1"}}}}
        }
    })
}

/// Serves until `shutdown` resolves; polls `CURRENT` every `poll`.
pub async fn serve(
    app: App,
    listener: tokio::net::TcpListener,
    poll: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let poller = tokio::spawn(app.searcher.clone().poll(poll));
    let r = axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await;
    poller.abort();
    r
}
