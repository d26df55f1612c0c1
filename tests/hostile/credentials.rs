//! A git server that asks for credentials, as issue 15 found it answered: `TRAWL_GIT_TOKEN`
//! sent to any host over plain http, `GITHUB_TOKEN` to any URL that merely contains
//! `github.com`. Here a local server answers every request with a Basic challenge and records
//! what it is sent; `trawl fetch`, with every token variable set, never sends it a token —
//! nor after a redirect from a host the token is for to another.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::procs::trawl;

const TRAWL_GIT_TOKEN: &str = "trawl-git-token-7Qm2";
const GITHUB_TOKEN: &str = "github-token-9Xk4";

const CHALLENGE: &str = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\n\
                         Content-Length: 0\r\nConnection: close\r\n\r\n";

/// A server that answers every request with `reply` (by default a `401 WWW-Authenticate:
/// Basic` challenge), recording each request's head.
struct Challenger {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Challenger {
    async fn start() -> Self {
        Self::replying(CHALLENGE.to_owned()).await
    }

    async fn replying(reply: String) -> Self {
        let reply = Arc::new(reply);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (seen, reply) = (seen.clone(), reply.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Self { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// `trawl fetch` with every token variable set; returns its exit code and stderr.
async fn fetch(work: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = trawl();
    cmd.current_dir(work)
        .args(args)
        .env("TRAWL_GIT_TOKEN", TRAWL_GIT_TOKEN)
        .env("GITHUB_TOKEN", GITHUB_TOKEN)
        .env("GH_TOKEN", GITHUB_TOKEN)
        .env("TRAWL_LOG", "warn")
        .env_remove("TRAWL_GIT_USERNAME");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_no_credentials(heads: &[String]) {
    assert!(
        !heads.is_empty(),
        "the fetch never reached the server, so the test proves nothing"
    );
    for head in heads {
        assert!(
            !head.to_ascii_lowercase().contains("\nauthorization:"),
            "credentials were sent: {head}"
        );
        assert!(!head.contains(TRAWL_GIT_TOKEN) && !head.contains(GITHUB_TOKEN));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_server_that_asks_for_credentials_is_never_sent_a_token() {
    let work = tempfile::tempdir().unwrap();
    let server = Challenger::start().await;
    let p = server.port;

    // Another host than the tokens are for, with `github.com` in its path: nothing is sent.
    let url = format!("http://127.0.0.1:{p}/github.com/acme/api");
    let (code, stderr) = fetch(work.path(), &["fetch", "--repo", &url]).await;
    assert_eq!(code, Some(3), "the repository fails: {stderr}");
    assert!(
        stderr.contains("no token is configured for this host"),
        "{stderr}"
    );
    assert_no_credentials(&server.heads());

    // The host is one TRAWL_GIT_TOKEN is for, but the URL is plain http: still nothing, and
    // the failure says why.
    let url = format!("http://127.0.0.1:{p}/acme/api");
    let (code, stderr) = fetch(
        work.path(),
        &[
            "--set",
            r#"fetch.token_hosts=["127.0.0.1"]"#,
            "fetch",
            "--repo",
            &url,
        ],
    )
    .await;
    assert_eq!(code, Some(3), "the repository fails: {stderr}");
    assert!(stderr.contains("never sent over plain http"), "{stderr}");
    assert_no_credentials(&server.heads());
    assert!(!stderr.contains(TRAWL_GIT_TOKEN) && !stderr.contains(GITHUB_TOKEN));

    // A token written into a plain http URL is refused before anything is sent.
    let before = server.heads().len();
    let url = format!("http://user:{TRAWL_GIT_TOKEN}@127.0.0.1:{p}/acme/api");
    let (code, stderr) = fetch(work.path(), &["fetch", "--repo", &url]).await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("use https"), "{stderr}");
    assert!(!stderr.contains(TRAWL_GIT_TOKEN), "{stderr}");
    assert_eq!(server.heads().len(), before, "no request was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_host_is_not_sent_the_first_hosts_token() {
    let work = tempfile::tempdir().unwrap();
    // 127.0.0.1 has the token and redirects to `localhost`, another host name, which asks.
    let target = Challenger::start().await;
    let redirect = format!(
        "HTTP/1.1 302 Found\r\nLocation: http://localhost:{}/acme/api/info/refs?service=git-upload-pack\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n",
        target.port
    );
    let origin = Challenger::replying(redirect).await;
    let url = format!("http://127.0.0.1:{}/acme/api", origin.port);
    let (code, stderr) = fetch(
        work.path(),
        &[
            "--set",
            r#"fetch.token_hosts=["127.0.0.1"]"#,
            "fetch",
            "--repo",
            &url,
        ],
    )
    .await;
    assert_eq!(code, Some(3), "the repository fails: {stderr}");
    assert_eq!(origin.heads().len(), 1, "{:?}", origin.heads());
    assert_no_credentials(&target.heads());
    // libgit2 asks for credentials with the URL it was redirected to, and trawl judges that.
    assert!(
        stderr.contains("a redirect from 127.0.0.1") && stderr.contains("localhost"),
        "{stderr}"
    );
}
