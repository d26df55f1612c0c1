//! Bare mirrors with git2: clone the first time, fetch afterwards, list trees.
//!
//! Only the branch being indexed is fetched (`+refs/heads/<b>:refs/heads/<b>`), and only when
//! the remote's advertised head differs from the mirror's: an unchanged repository costs one
//! reference advertisement, no pack.
//!
//! Credentials are never logged or stored. A token is bound to a host: it is sent only when
//! the server that asks for it (after any redirect) is that exact host, and only over https or
//! ssh (where a server asks for a password only after its host key matched `known_hosts`),
//! never plain http. See [`Credentials`]:
//! - https: a `user:token@` in the URL (to that URL's host only); else a token of
//!   `fetch.credentials` for the host; else `TRAWL_GIT_TOKEN` for the hosts of
//!   `fetch.token_hosts` (user `TRAWL_GIT_USERNAME`, default `x-access-token`); else
//!   `GITHUB_TOKEN` or `GH_TOKEN` for `github.com` exactly;
//! - ssh: the ssh agent; else the key file in `TRAWL_GIT_SSH_KEY` (passphrase in
//!   `TRAWL_GIT_SSH_PASSPHRASE`); else `~/.ssh/id_ed25519`, then `~/.ssh/id_rsa`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use git2::{Cred, CredentialType, Direction, ErrorClass, ErrorCode, Oid, Repository};
use serde::Serialize;
use trawl_core::config::FetchConfig;

use crate::policy::EntryKind;

/// Why a repository could not be synced. One repository's failure never stops a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureReason {
    /// The remote refused the credentials, or there were none.
    Auth,
    /// No such repository, branch or commit.
    NotFound,
    /// Could not reach the remote.
    Network,
    /// The remote or the mirror holds broken objects.
    Corrupt,
    /// Took longer than `fetch.timeout_secs`.
    Timeout,
    /// A bad repos-file entry or a bad glob.
    Config,
    /// The store or the bus failed.
    Output,
    Other,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Auth => "auth",
            FailureReason::NotFound => "not-found",
            FailureReason::Network => "network",
            FailureReason::Corrupt => "corrupt",
            FailureReason::Timeout => "timeout",
            FailureReason::Config => "config",
            FailureReason::Output => "output",
            FailureReason::Other => "other",
        }
    }
}

/// A failure with its reason and a message safe to log (no credentials).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{reason}: {message}", reason = reason.as_str())]
pub struct RepoFailure {
    pub reason: FailureReason,
    pub message: String,
}

impl RepoFailure {
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    fn from_git(e: &git2::Error, timed_out: bool, secret: &str) -> Self {
        let msg = e.message().to_owned();
        let lower = msg.to_ascii_lowercase();
        let reason = if timed_out {
            FailureReason::Timeout
        } else if e.code() == ErrorCode::Auth
            || lower.contains("authentication")
            || lower.contains("401")
            || lower.contains("403")
            || lower.contains("credentials")
        {
            FailureReason::Auth
        } else if e.code() == ErrorCode::NotFound
            || lower.contains("not found")
            || lower.contains("404")
            || lower.contains("does not appear to be a git repository")
            || lower.contains("could not find repository")
            || lower.contains("failed to resolve path")
        {
            FailureReason::NotFound
        } else if matches!(
            e.class(),
            ErrorClass::Net | ErrorClass::Ssh | ErrorClass::Http | ErrorClass::Ssl
        ) || lower.contains("failed to connect")
            || lower.contains("connection refused")
            || lower.contains("could not resolve")
            || lower.contains("timed out")
            || lower.contains("network")
        {
            FailureReason::Network
        } else if matches!(
            e.class(),
            ErrorClass::Odb | ErrorClass::Zlib | ErrorClass::Object | ErrorClass::Indexer
        ) {
            FailureReason::Corrupt
        } else {
            FailureReason::Other
        };
        let message = if secret.is_empty() {
            msg
        } else {
            msg.replace(secret, "***")
        };
        Self::new(reason, message)
    }
}

/// A synced mirror.
pub struct Synced {
    pub repo: Repository,
    pub branch: String,
    pub head: Oid,
}

/// One tree entry of a commit.
#[derive(Clone, Debug)]
pub struct Entry {
    pub path: String,
    pub oid: Oid,
    pub kind: EntryKind,
}

/// Where the mirror of a repository lives in the cache directory.
pub fn mirror_path(cache_dir: &Path, key: &str) -> PathBuf {
    cache_dir.join(format!("{key}.git"))
}

fn open_or_init(path: &Path) -> Result<Repository, RepoFailure> {
    if path.exists() {
        match Repository::open_bare(path) {
            Ok(r) => return Ok(r),
            Err(e) => {
                tracing::warn!(mirror = %path.display(), error = %e.message(), "mirror unreadable, cloning again");
                std::fs::remove_dir_all(path).map_err(|e| {
                    RepoFailure::new(
                        FailureReason::Corrupt,
                        format!("cannot remove broken mirror {}: {e}", path.display()),
                    )
                })?;
            }
        }
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            RepoFailure::new(
                FailureReason::Other,
                format!("cannot create cache dir {}: {e}", parent.display()),
            )
        })?;
    }
    Repository::init_bare(path).map_err(|e| RepoFailure::from_git(&e, false, ""))
}

fn url_password(url: &str) -> Option<(String, String)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (user, pass) = userinfo.split_once(':')?;
    Some((user.to_owned(), pass.to_owned()))
}

/// Whether `url` carries a password (`user:secret@host`).
pub fn url_has_password(url: &str) -> bool {
    url_password(url).is_some()
}

/// The scheme, host and port of a git URL (`https://…`, `ssh://…` or scp-style
/// `user@host:path`), host lowercased; `None` for local paths and what does not parse.
fn endpoint(url: &str) -> Option<(String, String, Option<u16>)> {
    if url.contains("://") {
        let u = url::Url::parse(url).ok()?;
        let host = u.host_str()?.to_ascii_lowercase();
        return Some((
            u.scheme().to_ascii_lowercase(),
            host,
            u.port_or_known_default(),
        ));
    }
    // scp-style: `[user@]host:path`; ssh takes the host after the last `@`.
    let (authority, _) = url.split_once(':')?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty() && !host.contains('/'))
        .then(|| ("ssh".into(), host.to_ascii_lowercase(), None))
}

/// Whether a token may travel over `scheme`: https, or ssh (whose server asks for a
/// password only after its host key checked out against `known_hosts`).
fn encrypted(scheme: &str) -> bool {
    matches!(scheme, "https" | "ssh")
}

/// A configured host: `name` or `name:port`, nothing else.
fn parse_host(host: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p.parse::<u16>().ok()?)),
        None => (host, None),
    };
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    ok.then(|| (name.to_ascii_lowercase(), port))
}

/// One token and the one host it may be sent to.
#[derive(Clone)]
struct HostToken {
    host: String,
    /// `None`: any port of the host.
    port: Option<u16>,
    username: String,
    token: String,
    /// Where the token came from (an environment variable's name), for messages.
    source: String,
}

/// Git tokens, each bound to one host. Built once per run from `fetch.credentials`,
/// `fetch.token_hosts` and the environment; `Debug` shows hosts and sources, never tokens.
#[derive(Clone, Default)]
pub struct Credentials {
    tokens: Vec<HostToken>,
    /// A configured credential that cannot be used: every repository fails with it.
    invalid: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.tokens
                    .iter()
                    .map(|t| format!("{} ({})", t.host, t.source)),
            )
            .finish()
    }
}

/// What the credential callback may answer for one request.
#[derive(Debug, PartialEq, Eq)]
enum TokenFor<'a> {
    /// Send this user and token.
    Send { username: &'a str, token: &'a str },
    /// A token exists for the host, but the request is not https: it is withheld.
    Insecure { host: String, source: &'a str },
    /// The request went to another host than the repository's (a redirect): nothing is sent.
    Redirected { from: String, to: String },
    /// No token for this host.
    None,
}

impl Credentials {
    /// The tokens `cfg` binds, read through `env` (usually `std::env::var`).
    pub fn from_config(cfg: &FetchConfig, env: impl Fn(&str) -> Option<String>) -> Self {
        let env = |k: &str| env(k).filter(|v| !v.is_empty());
        let mut out = Self::default();
        let mut bind = |host: &str, what: &str, username: &str, source: &str, token: String| {
            let Some((host, port)) = parse_host(host) else {
                out.invalid.get_or_insert_with(|| {
                    format!("{what}: {host:?} is not a host name: write it as git.example.com or git.example.com:8443, without scheme or path")
                });
                return;
            };
            out.tokens.push(HostToken {
                host,
                port,
                username: username.to_owned(),
                token,
                source: source.to_owned(),
            });
        };
        for (i, c) in cfg.credentials.iter().enumerate() {
            let what = format!("fetch.credentials[{i}].host");
            match env(&c.token_env) {
                Some(token) => bind(&c.host, &what, &c.username, &c.token_env, token),
                None => tracing::warn!(
                    host = %c.host,
                    token_env = %c.token_env,
                    "a git credential's variable is unset or empty: its host gets no token"
                ),
            }
        }
        if let Some(token) = env("TRAWL_GIT_TOKEN") {
            let user = env("TRAWL_GIT_USERNAME").unwrap_or_else(|| "x-access-token".into());
            for (i, h) in cfg.token_hosts.iter().enumerate() {
                let what = format!("fetch.token_hosts[{i}]");
                bind(h, &what, &user, "TRAWL_GIT_TOKEN", token.clone());
            }
        }
        for var in ["GITHUB_TOKEN", "GH_TOKEN"] {
            if let Some(token) = env(var) {
                bind("github.com:443", var, "x-access-token", var, token);
                break;
            }
        }
        out
    }

    /// The token for a request to `asked` (the URL libgit2 is talking to, after redirects)
    /// while syncing `repo_url`.
    fn token_for(&self, repo_url: &str, asked: &str) -> TokenFor<'_> {
        let Some((scheme, host, port)) = endpoint(asked) else {
            return TokenFor::None;
        };
        if let Some((_, repo_host, _)) = endpoint(repo_url)
            && repo_host != host
        {
            return TokenFor::Redirected {
                from: repo_host,
                to: host,
            };
        }
        if !encrypted(&scheme) {
            // Any port: a token for the host is withheld, and the error says why.
            return match self.tokens.iter().find(|t| t.host == host) {
                Some(t) => TokenFor::Insecure {
                    host,
                    source: &t.source,
                },
                None => TokenFor::None,
            };
        }
        let Some(t) = self
            .tokens
            .iter()
            .find(|t| t.host == host && (t.port.is_none() || t.port == port))
        else {
            return TokenFor::None;
        };
        TokenFor::Send {
            username: &t.username,
            token: &t.token,
        }
    }
}

fn callbacks<'a>(
    url: &'a str,
    creds: &'a Credentials,
    deadline: Instant,
    timed_out: &'a std::cell::Cell<bool>,
) -> git2::RemoteCallbacks<'a> {
    let mut cb = git2::RemoteCallbacks::new();
    let mut attempts = 0u32;
    cb.credentials(move |asked, username, allowed| {
        attempts += 1;
        if attempts > 4 {
            return Err(git2::Error::new(
                ErrorCode::Auth,
                ErrorClass::Http,
                "authentication failed: the remote refused every credential configured for its host",
            ));
        }
        credential(url, asked, creds, username, allowed, attempts)
    });
    cb.transfer_progress(move |_| {
        if Instant::now() > deadline {
            timed_out.set(true);
            return false;
        }
        true
    });
    cb.sideband_progress(move |_| {
        if Instant::now() > deadline {
            timed_out.set(true);
            return false;
        }
        true
    });
    cb
}

fn auth_error(class: ErrorClass, message: &str) -> git2::Error {
    git2::Error::new(ErrorCode::Auth, class, message)
}

/// Answers libgit2's request for credentials by `asked` (the URL it is talking to now, which
/// a redirect may have moved) while syncing `url`.
fn credential(
    url: &str,
    asked: &str,
    creds: &Credentials,
    username: Option<&str>,
    allowed: CredentialType,
    attempt: u32,
) -> Result<Cred, git2::Error> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        let token = match creds.token_for(url, asked) {
            TokenFor::Send { username, token } => Some((username, token)),
            TokenFor::Insecure { host, source } => {
                tracing::warn!(%host, %source, "a git token is configured for this host, but the URL is plain http: not sending it");
                return Err(auth_error(
                    ErrorClass::Http,
                    &format!(
                        "authentication required, and the token of {source} for {host} is never sent over plain http: use an https URL"
                    ),
                ));
            }
            TokenFor::Redirected { from, to } => {
                tracing::warn!(%from, %to, "the remote redirected to another host: no credentials sent");
                return Err(auth_error(
                    ErrorClass::Http,
                    &format!(
                        "authentication required by {to}, a redirect from {from}: credentials are never sent to another host than the repository's; use the final URL"
                    ),
                ));
            }
            TokenFor::None => None,
        };
        // Credentials written in the URL belong to the URL's host (a redirect was refused
        // above); libgit2 presents them once itself, this answers a second challenge.
        if let Some((user, pass)) = url_password(url)
            && endpoint(url).is_some_and(|(scheme, _, _)| encrypted(&scheme))
        {
            return Cred::userpass_plaintext(&user, &pass);
        }
        if let Some((user, token)) = token {
            return Cred::userpass_plaintext(user, token);
        }
        return Err(auth_error(
            ErrorClass::Http,
            "authentication required and no token is configured for this host: set fetch.credentials (or TRAWL_GIT_TOKEN with fetch.token_hosts) for it, over https",
        ));
    }
    if allowed.contains(CredentialType::USERNAME) {
        return Cred::username(username.unwrap_or("git"));
    }
    if allowed.contains(CredentialType::SSH_KEY) {
        let user = username.unwrap_or("git");
        if attempt == 1 && env("SSH_AUTH_SOCK").is_some() {
            return Cred::ssh_key_from_agent(user);
        }
        let key = env("TRAWL_GIT_SSH_KEY").map(PathBuf::from).or_else(|| {
            let home = PathBuf::from(env("HOME")?);
            ["id_ed25519", "id_rsa"]
                .iter()
                .map(|k| home.join(".ssh").join(k))
                .find(|p| p.exists())
        });
        if let Some(key) = key {
            let pass = env("TRAWL_GIT_SSH_PASSPHRASE");
            return Cred::ssh_key(user, None, &key, pass.as_deref());
        }
        return Err(auth_error(
            ErrorClass::Ssh,
            "ssh authentication: no agent and no key (set TRAWL_GIT_SSH_KEY)",
        ));
    }
    Cred::default()
}

/// Clones or fetches the mirror of `url` and resolves the branch head. `branch` `None` means
/// the remote's default branch.
pub fn sync(
    cache_dir: &Path,
    key: &str,
    url: &str,
    branch: Option<&str>,
    creds: &Credentials,
    deadline: Instant,
) -> Result<Synced, RepoFailure> {
    if let Some(why) = &creds.invalid {
        return Err(RepoFailure::new(FailureReason::Config, why.clone()));
    }
    let secret = url_password(url).map(|(_, p)| p).unwrap_or_default();
    let timed_out = std::cell::Cell::new(false);
    let git_err = |e: git2::Error| RepoFailure::from_git(&e, timed_out.get(), &secret);

    let path = mirror_path(cache_dir, key);
    let repo = open_or_init(&path)?;
    let (branch, advertised) = {
        let mut remote = repo.remote_anonymous(url).map_err(git_err)?;
        let conn = remote
            .connect_auth(
                Direction::Fetch,
                Some(callbacks(url, creds, deadline, &timed_out)),
                None,
            )
            .map_err(git_err)?;
        let branch = if let Some(b) = branch {
            b.to_owned()
        } else {
            let full = conn.default_branch().map_err(|e| {
                RepoFailure::new(
                    FailureReason::NotFound,
                    format!(
                        "the remote has no default branch (empty repository?): {}",
                        e.message()
                    ),
                )
            })?;
            let full = full.as_str().unwrap_or_default();
            full.strip_prefix("refs/heads/").unwrap_or(full).to_owned()
        };
        let want = format!("refs/heads/{branch}");
        let advertised = conn
            .list()
            .map_err(git_err)?
            .iter()
            .find(|h| h.name() == want)
            .map(git2::RemoteHead::oid)
            .ok_or_else(|| {
                RepoFailure::new(
                    FailureReason::NotFound,
                    format!("branch {branch:?} not found on the remote"),
                )
            })?;
        (branch, advertised)
    };
    let refname = format!("refs/heads/{branch}");
    let have = repo.refname_to_id(&refname).ok();
    if have != Some(advertised) || repo.find_commit(advertised).is_err() {
        let mut remote = repo.remote_anonymous(url).map_err(git_err)?;
        let mut fo = git2::FetchOptions::new();
        fo.remote_callbacks(callbacks(url, creds, deadline, &timed_out));
        fo.download_tags(git2::AutotagOption::None);
        remote
            .fetch(&[format!("+{refname}:{refname}")], Some(&mut fo), None)
            .map_err(git_err)?;
    }
    let head = repo.refname_to_id(&refname).map_err(git_err)?;
    repo.find_commit(head).map_err(git_err)?;
    Ok(Synced { repo, branch, head })
}

/// Every entry of the commit's tree (files, symlinks, submodules), sorted by path.
pub fn list_tree(repo: &Repository, commit: Oid) -> Result<Vec<Entry>, git2::Error> {
    let tree = repo.find_commit(commit)?.tree()?;
    let mut out = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |root, e| {
        let kind = match e.filemode() {
            0o120_000 => EntryKind::Symlink,
            0o160_000 => EntryKind::Submodule,
            _ if e.kind() == Some(git2::ObjectType::Blob) => EntryKind::File,
            _ => return git2::TreeWalkResult::Ok, // a sub-tree: walked into
        };
        let name = String::from_utf8_lossy(e.name_bytes());
        out.push(Entry {
            path: format!("{root}{name}"),
            oid: e.id(),
            kind,
        });
        git2::TreeWalkResult::Ok
    })?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Resolves a commit-ish (`HEAD~3`, a full or abbreviated id) in the mirror.
pub fn resolve_commit(repo: &Repository, spec: &str) -> Result<Oid, RepoFailure> {
    repo.revparse_single(spec)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|e| {
            RepoFailure::new(
                FailureReason::NotFound,
                format!(
                    "--since {spec}: no such commit in the mirror ({})",
                    e.message()
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::config::GitCredentialConfig;

    fn creds(cfg: &FetchConfig, vars: &[(&str, &str)]) -> Credentials {
        Credentials::from_config(cfg, |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    fn sends(c: &Credentials, url: &str) -> Option<String> {
        match c.token_for(url, url) {
            TokenFor::Send { token, .. } => Some(token.to_owned()),
            _ => None,
        }
    }

    /// A repository at `dir` with `n` commits a minute apart, each changing `f.txt`.
    fn repo_with_commits(dir: &std::path::Path, n: usize) {
        let repo = Repository::init(dir).unwrap();
        let mut parent: Option<Oid> = None;
        for i in 0..n {
            std::fs::write(dir.join("f.txt"), format!("line {i}\n")).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(std::path::Path::new("f.txt")).unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let parents: Vec<git2::Commit<'_>> = parent
                .iter()
                .map(|p| repo.find_commit(*p).unwrap())
                .collect();
            let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
            let when = git2::Time::new(1_700_000_000 + 60 * i as i64, 0);
            let sig = git2::Signature::new("t", "t@example.com", &when).unwrap();
            let msg = format!("change {i}");
            parent = Some(
                repo.commit(Some("HEAD"), &sig, &sig, &msg, &tree, &refs)
                    .unwrap(),
            );
        }
    }

    #[test]
    fn a_shallow_clone_keeps_the_history_it_has() {
        let tmp = tempfile::tempdir().unwrap();
        let full = tmp.path().join("full");
        repo_with_commits(&full, 5);
        let shallow = tmp.path().join("shallow");
        let out = std::process::Command::new("git")
            .args(["clone", "-q", "--depth", "2"])
            .arg(format!("file://{}", full.display()))
            .arg(&shallow)
            .output()
            .expect("git is installed");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let repo = Repository::open(&shallow).unwrap();
        let head = repo.head().unwrap().target().unwrap();
        let h = history(&repo, head, None, 100).expect("the history a shallow clone holds");
        let messages: Vec<&str> = h.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(messages, ["change 4", "change 3"]);
        assert_eq!(h[0].paths, ["f.txt"], "the newest commit's change");
        assert!(
            h[1].paths.is_empty(),
            "the edge commit's parent is not in the clone: no change is made up"
        );
        // The whole repository: every commit, the first one adding its file.
        let repo = Repository::open(&full).unwrap();
        let head = repo.head().unwrap().target().unwrap();
        let h = history(&repo, head, None, 100).unwrap();
        assert_eq!(h.len(), 5);
        assert_eq!(h[4].paths, ["f.txt"]);
        // A clone made from a shallow one is not marked shallow: the commits past its edge
        // are simply missing. The history stops there instead of failing.
        let second = h[3].id.to_string();
        std::fs::remove_file(
            full.join(".git/objects")
                .join(&second[..2])
                .join(&second[2..]),
        )
        .unwrap();
        let repo = Repository::open(&full).unwrap();
        let h = history(&repo, head, None, 100).expect("the history before the missing commit");
        let messages: Vec<&str> = h.iter().map(|c| c.message.as_str()).collect();
        assert!(
            messages.starts_with(&["change 4", "change 3"]) && !messages.contains(&"change 1"),
            "{messages:?}"
        );
    }

    #[test]
    fn github_token_goes_to_github_com_exactly() {
        let c = creds(&FetchConfig::default(), &[("GITHUB_TOKEN", "gh")]);
        assert_eq!(sends(&c, "https://github.com/o/r"), Some("gh".into()));
        assert_eq!(
            sends(&c, "https://GitHub.COM:443/o/r.git"),
            Some("gh".into())
        );
        for url in [
            "https://evil-github.com/o/r",
            "https://github.com.evil.io/o/r",
            "https://user@github.com@evil.io/o/r",
            "https://evil.io/github.com/o/r",
            "https://evil.io/o/r?github.com",
            "https://github.com:8443/o/r",
            "https://api.github.com/o/r",
            "git@github.com@evil.io:o/r",
        ] {
            assert_eq!(sends(&c, url), None, "{url}");
        }
    }

    #[test]
    fn trawl_git_token_goes_only_to_the_token_hosts() {
        let cfg = FetchConfig::default();
        let c = creds(&cfg, &[("TRAWL_GIT_TOKEN", "t")]);
        assert_eq!(sends(&c, "https://github.com/o/r"), Some("t".into()));
        assert_eq!(sends(&c, "https://127.0.0.1:8099/x/y"), None);
        assert_eq!(sends(&c, "https://gitlab.example.com/x/y"), None);
        let cfg = FetchConfig {
            token_hosts: vec!["gitlab.example.com".into()],
            ..FetchConfig::default()
        };
        let c = creds(&cfg, &[("TRAWL_GIT_TOKEN", "t")]);
        assert_eq!(
            sends(&c, "https://gitlab.example.com/x/y"),
            Some("t".into())
        );
        assert_eq!(sends(&c, "https://github.com/o/r"), None);
    }

    #[test]
    fn configured_credentials_bind_a_token_to_a_host_and_port() {
        let cfg = FetchConfig {
            credentials: vec![
                GitCredentialConfig {
                    host: "git.example.com".into(),
                    token_env: "TOK_A".into(),
                    username: "oauth2".into(),
                },
                GitCredentialConfig {
                    host: "other.example.com:8443".into(),
                    token_env: "TOK_B".into(),
                    username: "x".into(),
                },
            ],
            token_hosts: Vec::new(),
            ..FetchConfig::default()
        };
        let c = creds(
            &cfg,
            &[
                ("TOK_A", "secret-a"),
                ("TOK_B", "b"),
                ("TRAWL_GIT_TOKEN", "t"),
            ],
        );
        assert_eq!(
            c.token_for("https://git.example.com/g/p", "https://git.example.com/g/p"),
            TokenFor::Send {
                username: "oauth2",
                token: "secret-a"
            }
        );
        assert_eq!(
            sends(&c, "https://other.example.com:8443/g/p"),
            Some("b".into())
        );
        assert_eq!(sends(&c, "https://other.example.com/g/p"), None);
        assert_eq!(
            sends(&c, "https://github.com/o/r"),
            None,
            "token_hosts is empty"
        );
        let shown = format!("{c:?}");
        assert!(
            shown.contains("TOK_A") && !shown.contains("secret-a"),
            "{shown}"
        );
    }

    #[test]
    fn ssh_may_carry_a_token_to_its_host_plain_http_never() {
        let cfg = FetchConfig {
            token_hosts: vec!["git.example.com".into()],
            ..FetchConfig::default()
        };
        let c = creds(&cfg, &[("TRAWL_GIT_TOKEN", "t")]);
        assert_eq!(sends(&c, "ssh://git@git.example.com/g/p"), Some("t".into()));
        assert_eq!(sends(&c, "git@git.example.com:g/p"), Some("t".into()));
        assert_eq!(sends(&c, "git@other.example.com:g/p"), None);
        assert_eq!(sends(&c, "http://git.example.com/g/p"), None);
        assert_eq!(sends(&c, "git://git.example.com/g/p"), None);
    }

    #[test]
    fn plain_http_and_other_hosts_after_a_redirect_get_nothing() {
        let c = creds(&FetchConfig::default(), &[("GITHUB_TOKEN", "gh")]);
        assert_eq!(
            c.token_for("http://github.com/o/r", "http://github.com/o/r"),
            TokenFor::Insecure {
                host: "github.com".into(),
                source: "GITHUB_TOKEN"
            }
        );
        assert!(matches!(
            c.token_for("https://github.com/o/r", "https://evil.io/o/r"),
            TokenFor::Redirected { .. }
        ));
        // A redirect from elsewhere to github.com does not earn github.com's token either.
        assert!(matches!(
            c.token_for("https://evil.io/o/r", "https://github.com/o/r"),
            TokenFor::Redirected { .. }
        ));
    }

    #[test]
    fn a_configured_host_that_is_not_a_host_name_fails_every_sync() {
        let cfg = FetchConfig {
            token_hosts: vec!["https://github.com".into()],
            ..FetchConfig::default()
        };
        let c = creds(&cfg, &[("TRAWL_GIT_TOKEN", "t")]);
        let why = c.invalid.clone().unwrap();
        assert!(why.contains("fetch.token_hosts[0]"), "{why}");
        let dir = tempfile::tempdir().unwrap();
        let e = sync(
            dir.path(),
            "k",
            "https://github.com/o/r",
            None,
            &c,
            Instant::now() + std::time::Duration::from_secs(5),
        )
        .err()
        .unwrap();
        assert_eq!(e.reason, FailureReason::Config);
    }

    #[test]
    fn endpoints_of_every_url_form() {
        assert_eq!(
            endpoint("git@GitHub.com:o/r"),
            Some(("ssh".into(), "github.com".into(), None))
        );
        assert_eq!(
            endpoint("ssh://git@h.example:2222/o/r").map(|e| e.1),
            Some("h.example".into())
        );
        assert_eq!(endpoint("/srv/git/r"), None);
    }
}

/// One commit of the history: id, author time (seconds since the epoch), message and the
/// paths it changed against its first parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryCommit {
    pub id: Oid,
    pub time: i64,
    pub message: String,
    pub paths: Vec<String>,
    /// The changed lines of each text file among `paths`.
    pub hunks: Vec<trawl_core::records::FileHunks>,
}

/// Most paths recorded per commit.
pub const MAX_COMMIT_PATHS: usize = 100;
/// Files larger than this are recorded as changed, without their lines.
const MAX_HUNK_FILE_BYTES: i64 = 1 << 20;
/// A file with more hunks than this in one commit is recorded without its lines.
const MAX_FILE_HUNKS: usize = 200;

/// The commits reachable from `head` and not from `since` (all of them without `since`, or
/// when `since` is not in the mirror any more), newest first, at most `limit`.
pub fn history(
    repo: &Repository,
    head: Oid,
    since: Option<Oid>,
    limit: usize,
) -> Result<Vec<HistoryCommit>, git2::Error> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut walk = repo.revwalk()?;
    // Newest first, read as the walk goes: a topological or time sort reads the whole graph
    // first, and fails on a clone whose history's objects end (made from a shallow one).
    walk.set_sorting(git2::Sort::NONE)?;
    walk.push(head)?;
    if let Some(s) = since.filter(|s| repo.find_commit(*s).is_ok()) {
        walk.hide(s)?;
    }
    let shallow = repo.is_shallow();
    let mut out = Vec::new();
    for id in walk.take(limit) {
        let id = match id {
            Ok(id) => id,
            // A shallow clone (a CI checkout) has the history down to its depth: keep that.
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                tracing::info!(commits = out.len(), error = %e, "the commit history ends where the clone's objects end (a shallow clone?)");
                break;
            }
            Err(e) => return Err(e),
        };
        let commit = repo.find_commit(id)?;
        let tree = commit.tree()?;
        // At the edge of a shallow clone a commit's parent is not in the clone (git grafts
        // it away, or its object is missing): the message without its changes, rather than
        // every file read as added.
        let (paths, hunks) = match commit.parent_ids().next() {
            None if shallow => (Vec::new(), Vec::new()),
            None => changes(repo, None, &tree)?,
            Some(p) => match repo.find_commit(p) {
                Ok(p) => changes(repo, Some(&p.tree()?), &tree)?,
                Err(e) if e.code() == git2::ErrorCode::NotFound => (Vec::new(), Vec::new()),
                Err(e) => return Err(e),
            },
        };
        out.push(HistoryCommit {
            id: commit.id(),
            time: commit.author().when().seconds(),
            message: String::from_utf8_lossy(commit.message_bytes())
                .trim()
                .to_owned(),
            paths,
            hunks,
        });
    }
    Ok(out)
}

/// The paths a commit changed from `parent` (none: a root commit) to `tree`, at most
/// [`MAX_COMMIT_PATHS`], and the changed lines of its text files.
fn changes(
    repo: &Repository,
    parent: Option<&git2::Tree<'_>>,
    tree: &git2::Tree<'_>,
) -> Result<(Vec<String>, Vec<trawl_core::records::FileHunks>), git2::Error> {
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0).max_size(MAX_HUNK_FILE_BYTES);
    let diff = repo.diff_tree_to_tree(parent, Some(tree), Some(&mut opts))?;
    let mut paths = Vec::new();
    let mut hunks = Vec::new();
    for (i, d) in diff.deltas().enumerate().take(MAX_COMMIT_PATHS) {
        let Some(p) = d.new_file().path().or_else(|| d.old_file().path()) else {
            continue;
        };
        let path = p.to_string_lossy().into_owned();
        if let Some(file) = file_hunks(&diff, i, &path)? {
            hunks.push(file);
        }
        paths.push(path);
    }
    Ok((paths, hunks))
}

/// The hunks of delta `i` of `diff` (made with no context lines), or none for a binary or
/// deleted file, one over the size limit, or one with too many hunks to record.
fn file_hunks(
    diff: &git2::Diff<'_>,
    i: usize,
    path: &str,
) -> Result<Option<trawl_core::records::FileHunks>, git2::Error> {
    let delta = diff.get_delta(i);
    if delta.is_none_or(|d| d.status() == git2::Delta::Deleted || d.flags().is_binary()) {
        return Ok(None);
    }
    let Some(patch) = git2::Patch::from_diff(diff, i)? else {
        return Ok(None);
    };
    let n = patch.num_hunks();
    if n == 0 || n > MAX_FILE_HUNKS {
        return Ok(None);
    }
    let mut hunks = Vec::with_capacity(n);
    for h in 0..n {
        let (hunk, _) = patch.hunk(h)?;
        hunks.push(trawl_core::records::Hunk {
            old_start: hunk.old_start(),
            old_lines: hunk.old_lines(),
            new_start: hunk.new_start(),
            new_lines: hunk.new_lines(),
        });
    }
    Ok(Some(trawl_core::records::FileHunks {
        path: path.to_owned(),
        hunks,
    }))
}
