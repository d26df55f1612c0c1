//! `trawl serve` tried as an attacker would: a web page posting to a laptop server (CSRF, DNS
//! rebinding), clients that send half a request, a flood of searches, a token probing hidden
//! repositories through scores, a plain-text client against TLS; and the operator's mistakes:
//! `trawl config` on a screen share, a Voyage index served without its key.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use trawl_core::config::Config;
use trawl_core::store::Store;
use trawl_query::{Access, Mode, SearchRequest, Searcher};

use crate::support::procs::{Proc, index_in_process, trawl};
use crate::support::{SourceRepo, file};

const CLIENT_PY: &str = r#"def fetch_with_retries(url, attempts=3):
    """Fetch a URL, retrying with the zebracorn backoff."""
    for attempt in range(attempts):
        try:
            return get(url)
        except IOError:
            sleep(2 ** attempt)


def parse_config(path):
    """Read the client's configuration file."""
    return load(path)
"#;

fn visible_repo() -> SourceRepo {
    let r = SourceRepo::named("acme-api");
    r.commit(&[("http/client.py", file(CLIENT_PY))], false);
    r
}

/// The hidden repository: with `term` written many times in many files, or not at all.
fn hidden_repo(term: Option<&str>) -> SourceRepo {
    let r = SourceRepo::named("secret-vault");
    let files: Vec<(String, String)> = (0..12)
        .map(|i| {
            let word = term.unwrap_or("rotation");
            (
                format!("vault/keys{i}.py"),
                format!(
                    "def rotate_{i}(vault):\n    \"\"\"Rotate key {i}: {word} {word} {word}.\"\"\"\n    return vault.rotate({i})\n"
                ),
            )
        })
        .collect();
    let nodes: Vec<(&str, crate::support::Node)> =
        files.iter().map(|(p, t)| (p.as_str(), file(t))).collect();
    r.commit(&nodes, false);
    r
}

/// A store in `work/.trawl` holding `repos`, indexed with the hash embedder.
fn indexed(work: &Path, repos: impl IntoIterator<Item = PathBuf>) -> PathBuf {
    let store = work.join(".trawl");
    index_in_process(work, &store, &work.join("mirrors"), repos);
    store
}

/// A work directory with the visible repository indexed in it, and its store.
fn visible_index() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let store = indexed(work.path(), [visible_repo().path()]);
    (work, store)
}

/// `trawl` without the caller's `TRAWL_*` settings or Voyage key.
fn clean_trawl() -> std::process::Command {
    let mut c = trawl();
    for (k, _) in std::env::vars() {
        if k.starts_with("TRAWL_") || k == "VOYAGE_API_KEY" {
            c.env_remove(k);
        }
    }
    c
}

/// `trawl serve` on a free loopback port, with `config` (TOML) and `env`.
struct Server {
    proc: Proc,
    /// `host:port`.
    addr: String,
}

/// `trawl serve` with the hash embedder, `config` (TOML, without `[query]` or `[embed]`),
/// `sets` (`section.key=value`) and `env`.
fn serve_command(
    work: &Path,
    store: &Path,
    config: &str,
    sets: &[String],
    env: &[(&str, &str)],
) -> Proc {
    let path = work.join("serve.toml");
    std::fs::write(
        &path,
        format!("[query]\nlisten = \"127.0.0.1:0\"\n\n[embed]\nembedder = \"hash\"\n\n{config}"),
    )
    .unwrap();
    let mut c = clean_trawl();
    c.current_dir(work).arg("--config").arg(&path);
    for kv in sets {
        c.args(["--set", kv]);
    }
    c.arg("--store")
        .arg(store)
        .arg("serve")
        .env("TRAWL_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, *v)));
    Proc::spawn("serve", c)
}

impl Server {
    fn start(work: &Path, store: &Path, config: &str) -> Self {
        Self::start_with(work, store, config, &[], &[])
    }

    fn start_with(
        work: &Path,
        store: &Path,
        config: &str,
        sets: &[String],
        env: &[(&str, &str)],
    ) -> Self {
        let proc = serve_command(work, store, config, sets, env);
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = loop {
            let out = proc.output();
            if let Some(a) = out
                .lines()
                .find_map(|l| l.split("listening on ").nth(1))
                .and_then(|r| r.split(' ').next())
                .and_then(|u| u.split("://").nth(1))
            {
                break a.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "trawl serve did not start:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Self { proc, addr }
    }
}

/// One HTTP/1.1 exchange over a fresh connection: status, head, body.
fn exchange(addr: &str, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn post(addr: &str, host: &str, content_type: &str, body: &str) -> (u16, String, String) {
    exchange(
        addr,
        &format!(
            "POST /v1/search HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

const QUERY: &str = r#"{"query": "fetch with retries", "k": 3}"#;

#[test]
fn a_web_page_cannot_drive_a_laptop_server_csrf_or_dns_rebinding() {
    let (work, store) = visible_index();
    let s = Server::start(work.path(), &store, "");
    let port = s.addr.rsplit(':').next().unwrap();

    // The form a page can post without a preflight, to a name that resolves to the laptop.
    let (status, _, body) = post(&s.addr, "evil.example", "text/plain", QUERY);
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("serve.allowed_hosts"), "{body}");
    // After a DNS rebinding the page can send JSON, but under its own name.
    let (status, _, body) = post(
        &s.addr,
        &format!("evil.example:{port}"),
        "application/json",
        QUERY,
    );
    assert_eq!(status, 421, "{body}");
    // A cross-site form post from a page that guessed the address.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, _, body) = post(&s.addr, &s.addr, ct, QUERY);
        assert_eq!(status, 415, "{ct}: {body}");
        assert!(body.contains("application/json"), "{body}");
    }
    // The laptop's own clients are served, under every loopback name.
    for host in [
        s.addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, _, body) = post(&s.addr, &host, "application/json", QUERY);
        assert_eq!(status, 200, "{host}: {body}");
        assert!(body.contains("client.py"), "{body}");
    }

    // A deployment lists the names its clients use.
    drop(s);
    let s = Server::start(
        work.path(),
        &store,
        "[serve]\nallowed_hosts = [\"search.acme.internal\"]\n",
    );
    let (status, _, body) = post(&s.addr, "search.acme.internal", "application/json", QUERY);
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = post(&s.addr, "evil.example", "application/json", QUERY);
    assert_eq!(status, 421);
}

#[test]
fn connections_that_send_half_a_header_or_body_are_cut_off_after_their_timeout() {
    let (work, store) = visible_index();
    let s = Server::start(
        work.path(),
        &store,
        "[serve]\nheader_timeout_secs = 1\nbody_timeout_secs = 1\n",
    );
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
                .unwrap();
            c
        })
        .collect();
    // An idle connection that never sends a byte is closed too.
    slow.push(TcpStream::connect(&s.addr).unwrap());
    for (i, c) in slow.iter_mut().enumerate() {
        // The read waits for the server to close the connection; a server that keeps it
        // open makes it fail with a timeout instead (60 s: far beyond the configured 1 s).
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut rest = Vec::new();
        match c.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connection {i} is still open: {e}"),
        }
    }
    // A body that stops half way is answered 408 when its time is up.
    let (status, _, body) = exchange(
        &s.addr,
        &format!(
            "POST /v1/search HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{{\"query\": \"fet",
            s.addr
        ),
    );
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("serve.body_timeout_secs"), "{body}");
    // The server is still there for well-behaved clients.
    let (status, _, body) = post(&s.addr, &s.addr, "application/json", QUERY);
    assert_eq!(status, 200, "{body}");
}

/// A reranker that takes the first request and answers only when told, with an error whose
/// body names the account: it holds one search in its slot for as long as the test needs.
struct StuckReranker {
    base_url: String,
    taken: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
}

impl StuckReranker {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let (taken_tx, taken) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            taken_tx.send(()).unwrap();
            let _ = release_rx.recv();
            let body = "invalid key pa-LEAKED-KEY for account acme-billing";
            let _ = write!(
                c,
                "HTTP/1.1 400 Bad Request\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        Self {
            base_url,
            taken,
            release,
        }
    }
}

/// `trawl serve` with `config` and a reranker that hangs on its first request.
fn with_stuck_reranker(config: &str) -> (tempfile::TempDir, StuckReranker, Server) {
    let (work, store) = visible_index();
    let reranker = StuckReranker::start();
    let s = Server::start_with(
        work.path(),
        &store,
        config,
        &[
            "query.rerank_model=rerank-2.5".into(),
            format!("embed.base_url={}", reranker.base_url),
        ],
        &[("VOYAGE_API_KEY", "test-key")],
    );
    (work, reranker, s)
}

#[test]
fn a_saturated_server_answers_503_with_retry_after_and_keeps_the_reranker_s_words_to_itself() {
    let (_work, reranker, s) =
        with_stuck_reranker("[serve]\nmax_concurrent_searches = 1\nqueue_ms = 0\n");
    let addr = s.addr.clone();
    let first = std::thread::spawn(move || post(&addr, &addr, "application/json", QUERY));
    // The first search now holds the only slot, waiting on the reranker.
    reranker.taken.recv().unwrap();
    let (status, head, body) = post(&s.addr, &s.addr, "application/json", QUERY);
    assert_eq!(status, 503, "{head}\n{body}");
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case("retry-after: 1")),
        "{head}"
    );
    assert!(body.contains("max_concurrent_searches"), "{body}");
    reranker.release.send(()).unwrap();
    let (status, _, body) = first.join().unwrap();
    assert_eq!(status, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        r["notes"],
        serde_json::json!([trawl_query::service::RERANK_FAILED]),
        "{body}"
    );
    assert!(
        !body.contains("LEAKED") && !body.contains("acme-billing"),
        "{body}"
    );
    // The slot is free again.
    let (status, _, body) = post(&s.addr, &s.addr, "application/json", QUERY);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_request_that_outlives_its_time_is_answered_503() {
    let (_work, reranker, s) = with_stuck_reranker("[serve]\nrequest_timeout_secs = 1\n");
    // The reranker never answers within the test: the request is cut at its second.
    let (status, head, body) = post(&s.addr, &s.addr, "application/json", QUERY);
    assert_eq!(status, 503, "{head}\n{body}");
    assert!(body.contains("serve.request_timeout_secs"), "{body}");
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case("retry-after: 1")),
        "{head}"
    );
    drop(reranker);
}

/// The lexical scores of `query` for the caller, by path.
async fn scores(store: &Path, access: Access, query: &str) -> Vec<(String, f64)> {
    let mut cfg = Config::default();
    cfg.store.url = store.to_string_lossy().into_owned();
    cfg.embed.embedder = trawl_core::config::EmbedderKind::Hash;
    let searcher = Searcher::open(
        Store::from_url(&cfg.store.url).unwrap(),
        &cfg,
        Some(trawl_core::config::EmbedderKind::Hash),
    )
    .await
    .unwrap();
    let mut req = SearchRequest::new(query);
    req.mode = Mode::Lexical;
    req.k = Some(20);
    let r = searcher.search(&req, access).await.unwrap();
    r.results
        .into_iter()
        .map(|h| (format!("{}:{}", h.repo, h.path), h.score))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_token_s_scores_say_nothing_about_hidden_repositories() {
    let visible = visible_repo();
    let quiet = hidden_repo(None);
    let loud = hidden_repo(Some("zebracorn"));
    let (w1, w2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (p1, p2) = (w1.path().to_path_buf(), w2.path().to_path_buf());
    let (v, q, l) = (visible.path(), quiet.path(), loud.path());
    let (s1, s2) =
        tokio::task::spawn_blocking(move || (indexed(&p1, [v.clone(), q]), indexed(&p2, [v, l])))
            .await
            .unwrap();
    let token = || Access::repos("acme", &["*/acme-api".into()]).unwrap();
    let query = "zebracorn backoff";
    let quiet_scores = scores(&s1, token(), query).await;
    let loud_scores = scores(&s2, token(), query).await;
    assert!(!quiet_scores.is_empty());
    assert!(
        quiet_scores.iter().all(|(p, _)| p.contains("acme-api")),
        "{quiet_scores:?}"
    );
    // Bit for bit: the hidden repository's twelve files saying "zebracorn" change nothing.
    assert_eq!(quiet_scores, loud_scores);
    // They do change an unrestricted caller's scores: the probe would have worked.
    let open_quiet = scores(&s1, Access::all(), query).await;
    let open_loud = scores(&s2, Access::all(), query).await;
    let of = |v: &[(String, f64)]| {
        v.iter()
            .find(|(p, _)| p.ends_with("http/client.py"))
            .map(|(_, s)| *s)
            .unwrap()
    };
    assert!(
        (of(&open_quiet) - of(&open_loud)).abs() > 1e-6,
        "{open_quiet:?} {open_loud:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_https_to_a_client_that_trusts_the_certificate_and_nothing_in_clear() {
    let (work, store) = tokio::task::spawn_blocking(visible_index).await.unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::write(work.path().join("tls.crt"), &cert_pem).unwrap();
    std::fs::write(work.path().join("tls.key"), &key_pem).unwrap();
    let w = work.path().to_path_buf();
    let s = tokio::task::spawn_blocking(move || {
        Server::start(
            &w,
            &store,
            "[serve]\ntls_cert = \"tls.crt\"\ntls_key = \"tls.key\"\n",
        )
    })
    .await
    .unwrap();
    assert!(s.proc.output().contains("https://"), "{}", s.proc.output());
    let port = s.addr.rsplit(':').next().unwrap().to_owned();
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let r = client
        .post(format!("https://localhost:{port}/v1/search"))
        .header("content-type", "application/json")
        .body(QUERY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("client.py"));
    // A client that does not trust the certificate is refused by its own TLS.
    assert!(
        reqwest::get(format!("https://localhost:{port}/healthz"))
            .await
            .is_err()
    );
    // Plain HTTP gets no answer from a TLS port.
    let addr = s.addr.clone();
    let plain = tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap();
    assert!(
        !plain.contains("200 OK") && !plain.contains("generation"),
        "{plain}"
    );

    // A certificate without its key is a configuration error, said at start.
    let mut p = serve_command(
        work.path(),
        &work.path().join(".trawl"),
        "[serve]\ntls_cert = \"tls.crt\"\n",
        &[],
        &[],
    );
    let code = tokio::task::spawn_blocking(move || {
        let code = p.wait(Duration::from_secs(60));
        (code, p.output())
    })
    .await
    .unwrap();
    assert_ne!(code.0, 0);
    assert!(code.1.contains("serve.tls_key"), "{}", code.1);
}

#[test]
fn trawl_config_masks_every_inline_secret() {
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("trawl.toml");
    std::fs::write(
        &path,
        "[store]\nurl = \"s3://bucket/prefix\"\n\n[embed]\nbase_url = \"https://svc:pa-PROXY-SECRET@proxy.acme.internal/v1\"\n\n[bus]\nurl = \"kafka://ghp_TOKENASUSER0123@broker:9092\"\n\n[[query.tokens]]\nname = \"acme\"\ntoken = \"inline-QUERY-SECRET-0123456789\"\nrepos = [\"*\"]\n",
    )
    .unwrap();
    let out = clean_trawl()
        .current_dir(work.path())
        .arg("--config")
        .arg(&path)
        .arg("config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in ["QUERY-SECRET", "PROXY-SECRET", "TOKENASUSER"] {
        assert!(!text.contains(secret), "{secret} printed:\n{text}");
    }
    assert!(text.contains("token = \"***\""), "{text}");
    assert!(text.contains("svc:***@proxy.acme.internal"), "{text}");
    assert!(text.contains("name = \"acme\""), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voyage_index_without_its_key_is_not_served_lexical_only() {
    use trawl_embed::fake::{FakeConfig, FakeVoyage};
    let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    let repo = visible_repo();
    let (w, base) = (work.path().to_path_buf(), fake.base_url());
    let store = tokio::task::spawn_blocking(move || {
        let store = w.join(".trawl");
        let mut c = clean_trawl();
        c.current_dir(&w)
            .arg("--store")
            .arg(&store)
            .args(["--set", "fetch.cache_dir=mirrors"])
            .args(["--set", &format!("embed.base_url={base}")])
            .args(["--set", "embed.dims=256"])
            .args(["index", "--embedder", "voyage"])
            .arg(repo.path())
            .env("VOYAGE_API_KEY", "test-key");
        Proc::spawn("index", c).succeeds(Duration::from_secs(120));
        store
    })
    .await
    .unwrap();
    // The query side configured as the deployment would be, but without the key.
    let w = work.path().to_path_buf();
    let sets = vec![
        format!("embed.base_url={}", fake.base_url()),
        "embed.dims=256".to_owned(),
    ];
    let (code, out) = tokio::task::spawn_blocking(move || {
        let mut p = serve_command(&w, &store, "", &sets, &[]);
        let code = p.wait(Duration::from_secs(60));
        (code, p.output())
    })
    .await
    .unwrap();
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("VOYAGE_API_KEY"), "{out}");
    assert!(out.contains("lexical-only"), "{out}");
}
