//! Bare mirrors with git2: clone the first time, fetch afterwards, list trees.
//!
//! Only the branch being indexed is fetched (`+refs/heads/<b>:refs/heads/<b>`), and only when
//! the remote's advertised head differs from the mirror's: an unchanged repository costs one
//! reference advertisement, no pack.
//!
//! Credentials come from the environment, in this order, and are never logged or stored:
//! - https: a `user:token@` in the URL; else `TRAWL_GIT_TOKEN` (user `TRAWL_GIT_USERNAME`,
//!   default `x-access-token`); else `GITHUB_TOKEN` or `GH_TOKEN` for github.com;
//! - ssh: the ssh agent; else the key file in `TRAWL_GIT_SSH_KEY` (passphrase in
//!   `TRAWL_GIT_SSH_PASSPHRASE`); else `~/.ssh/id_ed25519`, then `~/.ssh/id_rsa`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use git2::{Cred, CredentialType, Direction, ErrorClass, ErrorCode, Oid, Repository};
use serde::Serialize;

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

fn callbacks<'a>(
    url: &'a str,
    deadline: Instant,
    timed_out: &'a std::cell::Cell<bool>,
) -> git2::RemoteCallbacks<'a> {
    let mut cb = git2::RemoteCallbacks::new();
    let mut attempts = 0u32;
    cb.credentials(move |_url, username, allowed| {
        attempts += 1;
        if attempts > 4 {
            return Err(git2::Error::new(
                ErrorCode::Auth,
                ErrorClass::Http,
                "authentication failed: the remote refused every credential in the environment",
            ));
        }
        credential(url, username, allowed, attempts)
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

fn credential(
    url: &str,
    username: Option<&str>,
    allowed: CredentialType,
    attempt: u32,
) -> Result<Cred, git2::Error> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        if let Some((user, pass)) = url_password(url) {
            return Cred::userpass_plaintext(&user, &pass);
        }
        let token = env("TRAWL_GIT_TOKEN").or_else(|| {
            url.contains("github.com")
                .then(|| env("GITHUB_TOKEN").or_else(|| env("GH_TOKEN")))
                .flatten()
        });
        if let Some(token) = token {
            let user = env("TRAWL_GIT_USERNAME").unwrap_or_else(|| "x-access-token".into());
            return Cred::userpass_plaintext(&user, &token);
        }
        return Err(git2::Error::new(
            ErrorCode::Auth,
            ErrorClass::Http,
            "authentication required: set TRAWL_GIT_TOKEN (or put a token in the repos file URL)",
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
        return Err(git2::Error::new(
            ErrorCode::Auth,
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
    deadline: Instant,
) -> Result<Synced, RepoFailure> {
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
                Some(callbacks(url, deadline, &timed_out)),
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
        fo.remote_callbacks(callbacks(url, deadline, &timed_out));
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
