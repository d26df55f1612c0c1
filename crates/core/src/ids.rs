//! Identity newtypes. Nothing that identifies a repository, commit, blob, chunk or generation
//! crosses a function boundary as a bare string.
//!
//! The key design decision is that [`RepoId`] is *canonical* and *key-safe*: every spelling of
//! the same remote (https, ssh, scp-style, with or without credentials or `.git`) maps to one
//! id, and the id can be embedded in an object key without escaping its prefix.

use std::fmt;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use crate::Error;

/// Canonical repository id: host and path of the remote without scheme, credentials, default
/// port or `.git` suffix (`github.com/pallets/flask`), or `local/<absolute path>` for a
/// repository on this machine.
///
/// Invariants, checked on every construction (including deserialisation):
/// - one or more `/`-separated segments, none empty, none `.` or `..`;
/// - no control characters, no backslash, no `+` (reserved by [`RepoId::key`]), no leading `/`;
/// - at most 512 bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoId(String);

impl RepoId {
    /// Parses a remote URL (`https://`, `http://`, `ssh://`, `git://`, `file://`), an scp-style
    /// address (`git@host:owner/repo.git`), or an already canonical id (`host/owner/repo`).
    /// Credentials are dropped; the host is lowercased; default ports are dropped and other
    /// ports become `host_port` (an underscore is never part of a host name).
    pub fn parse(input: &str) -> Result<Self, Error> {
        let s = input.trim();
        let bad = |why: &str| Error::InvalidRepoId {
            input: redact(s),
            reason: why.to_owned(),
        };
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if s.chars().any(char::is_control) {
            return Err(bad("contains control characters"));
        }
        if let Some((scheme, rest)) = s.split_once("://") {
            let scheme = scheme.to_ascii_lowercase();
            if scheme == "file" {
                let path = percent_decode(rest).ok_or_else(|| bad("bad percent-encoding"))?;
                return Self::from_local_path(Path::new(&path));
            }
            if !matches!(
                scheme.as_str(),
                "https" | "http" | "ssh" | "git" | "git+ssh"
            ) {
                return Err(bad(
                    "unsupported scheme (use https, ssh, git, file or a path)",
                ));
            }
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let (host, port) = split_port(host_port);
            let default_port = match scheme.as_str() {
                "https" => "443",
                "http" => "80",
                "git" => "9418",
                _ => "22",
            };
            let host = match port {
                Some(p) if p != default_port => format!("{}_{p}", host.to_ascii_lowercase()),
                _ => host.to_ascii_lowercase(),
            };
            let path = path.split(['?', '#']).next().unwrap_or("");
            let path = percent_decode(path).ok_or_else(|| bad("bad percent-encoding"))?;
            return Self::from_parts(&host, &path).map_err(|e| bad(&e));
        }
        if s.starts_with('/') || s.starts_with('.') || s.starts_with('~') {
            return Err(bad(
                "looks like a local path: resolve it and use RepoId::from_local_path",
            ));
        }
        // scp-style: [user@]host:path, where the host part has no slash.
        if let Some((left, path)) = s.split_once(':')
            && !left.contains('/')
        {
            let host = left.rsplit_once('@').map_or(left, |(_, h)| h);
            return Self::from_parts(&host.to_ascii_lowercase(), path).map_err(|e| bad(&e));
        }
        // Already canonical: host/owner/repo.
        let (host, path) = s
            .split_once('/')
            .ok_or_else(|| bad("no path after the host"))?;
        if !host.contains('.') && host != "localhost" {
            return Err(bad("the first segment is not a host name"));
        }
        Self::from_parts(&host.to_ascii_lowercase(), path).map_err(|e| bad(&e))
    }

    /// The id of a repository on this machine: `local/<absolute path>`. The path must be
    /// absolute and normalised (no `.` or `..`), as `std::fs::canonicalize` returns it.
    pub fn from_local_path(path: &Path) -> Result<Self, Error> {
        let bad = |why: &str| Error::InvalidRepoId {
            input: path.display().to_string(),
            reason: why.to_owned(),
        };
        if !path.is_absolute() {
            return Err(bad("a local repository path must be absolute"));
        }
        let mut segments = vec!["local".to_owned()];
        for c in path.components() {
            match c {
                Component::RootDir | Component::Prefix(_) => {}
                Component::Normal(s) => segments.push(
                    s.to_str()
                        .ok_or_else(|| bad("path is not valid UTF-8"))?
                        .to_owned(),
                ),
                Component::CurDir | Component::ParentDir => {
                    return Err(bad("path is not normalised ('.' or '..')"));
                }
            }
        }
        let joined = segments.join("/");
        let joined = joined.strip_suffix(".git").unwrap_or(&joined).to_owned();
        validate(&joined).map_err(|e| bad(&e))?;
        Ok(Self(joined))
    }

    fn from_parts(host: &str, path: &str) -> Result<Self, String> {
        if host.is_empty() {
            return Err("no host".into());
        }
        let path = path.trim_matches('/');
        let path = path
            .strip_suffix(".git")
            .unwrap_or(path)
            .trim_end_matches('/');
        if path.is_empty() {
            return Err("no repository path".into());
        }
        let id = format!("{host}/{path}");
        validate(&id)?;
        Ok(Self(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as one object-key segment (`github.com+pallets+flask`): used for hive
    /// partitions such as `manifests/repo=<key>/`, where a `/` would start a new directory.
    /// `+` is never part of an id, and object stores keep it as it is.
    pub fn key(&self) -> String {
        self.0.replace('/', "+")
    }

    /// Inverse of [`RepoId::key`].
    pub fn from_key(key: &str) -> Result<Self, Error> {
        Self::try_from(key.replace('+', "/"))
    }

    /// True for repositories on this machine (`local/...`).
    pub fn is_local(&self) -> bool {
        self.0.starts_with("local/")
    }
}

fn split_port(host_port: &str) -> (&str, Option<&str>) {
    // [v6]:port or host:port
    if let Some(rest) = host_port.strip_prefix('[')
        && let Some((h, tail)) = rest.split_once(']')
    {
        return (h, tail.strip_prefix(':'));
    }
    match host_port.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
        Some((h, "")) => (h, None),
        _ => (host_port, None),
    }
}

fn validate(id: &str) -> Result<(), String> {
    if id.len() > 512 {
        return Err("longer than 512 bytes".into());
    }
    if id.starts_with('/') {
        return Err("absolute".into());
    }
    for seg in id.split('/') {
        if seg.is_empty() {
            return Err("empty path segment".into());
        }
        if seg == "." || seg == ".." {
            return Err("'.' or '..' segment".into());
        }
        if let Some(c) = seg
            .chars()
            .find(|c| c.is_control() || matches!(c, '\\' | '+'))
        {
            return Err(format!("forbidden character {c:?}"));
        }
    }
    if id.split('/').count() < 2 {
        return Err("needs a host and a path".into());
    }
    Ok(())
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Removes `user:password@` from anything URL-like, for messages and logs.
pub fn redact(s: &str) -> String {
    if let Some((scheme, rest)) = s.split_once("://") {
        let (authority, path) = rest
            .split_once('/')
            .map_or((rest, None), |(a, p)| (a, Some(p)));
        if let Some((_, host)) = authority.rsplit_once('@') {
            return match path {
                Some(p) => format!("{scheme}://***@{host}/{p}"),
                None => format!("{scheme}://***@{host}"),
            };
        }
    }
    s.to_owned()
}

impl TryFrom<String> for RepoId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        validate(&s).map_err(|reason| Error::InvalidRepoId {
            input: s.clone(),
            reason,
        })?;
        Ok(Self(s))
    }
}

impl From<RepoId> for String {
    fn from(r: RepoId) -> String {
        r.0
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($t), self.as_str())
            }
        }
    )*};
}

/// A git object id in lowercase hex: 40 digits (SHA-1) or 64 (SHA-256).
macro_rules! git_oid {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Self::try_from(s.to_owned())
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self, Error> {
                let s = s.to_ascii_lowercase();
                if (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(Self(s))
                } else {
                    Err(Error::InvalidId { kind: stringify!($name), input: s })
                }
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }
    };
}

git_oid!(
    /// A commit id.
    CommitId
);
git_oid!(
    /// A blob id: git's content hash of a file version.
    BlobId
);

/// A 128-bit id or hash from [`crate::hash`], shown as 32 lowercase hex digits.
macro_rules! hash128 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name([u8; 16]);

        impl $name {
            pub const fn from_bytes(b: [u8; 16]) -> Self {
                Self(b)
            }
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }
            pub fn to_hex(&self) -> String {
                use std::fmt::Write as _;
                let mut s = String::with_capacity(32);
                for b in self.0 {
                    let _ = write!(s, "{b:02x}");
                }
                s
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self, Error> {
                let err = || Error::InvalidId { kind: stringify!($name), input: s.clone() };
                if s.len() != 32 {
                    return Err(err());
                }
                let mut out = [0u8; 16];
                for (i, o) in out.iter_mut().enumerate() {
                    *o = u8::from_str_radix(s.get(2 * i..2 * i + 2).ok_or_else(err)?, 16)
                        .map_err(|_| err())?;
                }
                Ok(Self(out))
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.to_hex()
            }
        }
    };
}

hash128!(
    /// Stable id of a chunk: see [`crate::hash::chunk_id`].
    ChunkId
);
hash128!(
    /// Hash of what is embedded (header + text + chunker version): see
    /// [`crate::hash::content_hash`].
    ContentHash
);

/// An index generation number (`index/gen=<n>/`); written as the bare number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The first generation of a store.
    pub const FIRST: Generation = Generation(1);

    /// The generation after this one.
    #[must_use]
    pub fn next(self) -> Generation {
        Generation(self.0 + 1)
    }
}

impl From<u64> for Generation {
    fn from(n: u64) -> Self {
        Generation(n)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One run of a stage (`runs/<run_id>.json`): UTC time to the millisecond plus 32 random bits,
/// so ids sort by start time and two hosts starting at once do not collide.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    pub fn new() -> Self {
        let now = std::time::SystemTime::now();
        let stamp = humantime::format_rfc3339_millis(now)
            .to_string()
            .replace([':', '.', '-'], "");
        let entropy = blake3::hash(format!("{now:?}{}{:p}", std::process::id(), &now).as_bytes());
        let b = entropy.as_bytes();
        Self(format!(
            "{stamp}-{:02x}{:02x}{:02x}{:02x}",
            b[0], b[1], b[2], b[3]
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl TryFrom<String> for RunId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        if !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Ok(Self(s))
        } else {
            Err(Error::InvalidId {
                kind: "RunId",
                input: s,
            })
        }
    }
}

impl From<RunId> for String {
    fn from(v: RunId) -> String {
        v.0
    }
}

display_as_str!(RepoId, CommitId, BlobId, RunId);

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> String {
        RepoId::parse(s).unwrap().to_string()
    }

    #[test]
    fn every_spelling_of_a_remote_is_one_id() {
        for s in [
            "https://github.com/pallets/flask",
            "https://github.com/pallets/flask.git",
            "https://github.com/pallets/flask/",
            "https://x-access-token:ghp_secret@github.com/pallets/flask.git",
            "HTTPS://GitHub.com/pallets/flask",
            "https://github.com:443/pallets/flask",
            "ssh://git@github.com/pallets/flask.git",
            "ssh://git@github.com:22/pallets/flask.git",
            "git@github.com:pallets/flask.git",
            "github.com:pallets/flask",
            "github.com/pallets/flask",
            "git://github.com/pallets/flask",
        ] {
            assert_eq!(id(s), "github.com/pallets/flask", "{s}");
        }
    }

    #[test]
    fn non_default_ports_and_nested_groups_are_kept() {
        assert_eq!(
            id("ssh://git@git.corp.example:7999/team/sub/repo.git"),
            "git.corp.example_7999/team/sub/repo"
        );
        assert_eq!(id("https://gitlab.com/a/b/c/d"), "gitlab.com/a/b/c/d");
    }

    #[test]
    fn credentials_never_survive() {
        let r = id("https://user:hunter2@example.com/o/r");
        assert!(!r.contains("hunter2") && !r.contains("user"), "{r}");
        let e = RepoId::parse("https://user:hunter2@example.com/../x").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn hostile_ids_are_refused() {
        for s in [
            "",
            "https://github.com/../../etc/passwd",
            "https://github.com/a/%2e%2e/b",
            "https://github.com/a/..",
            "https://github.com/a//b",
            "https://github.com/a\u{0}b/c",
            "https://github.com/a\nb/c",
            "https://github.com/a\\b/c",
            "https://github.com/",
            "https://github.com",
            "ftp://github.com/a/b",
            "/etc/passwd",
            "../x",
            "~/x",
            "github.com/a/../../b",
            "noslash",
            "foo/bar",
        ] {
            assert!(RepoId::parse(s).is_err(), "{s:?} should be refused");
        }
        for s in ["/../etc", "../a", "a/../b", "local/../etc"] {
            assert!(RepoId::try_from(s.to_owned()).is_err(), "{s} escapes");
        }
        // A bare two-part name is an id as it is (the forms `parse` refuses are URLs).
        assert_eq!(RepoId::try_from("a/b".to_owned()).unwrap().as_str(), "a/b");
        assert!(RepoId::try_from("/abs/x".to_owned()).is_err());
        assert!(serde_json::from_str::<RepoId>("\"a/../b\"").is_err());
    }

    #[test]
    fn local_paths() {
        let r = RepoId::from_local_path(Path::new("/home/me/src/proj")).unwrap();
        assert_eq!(r.as_str(), "local/home/me/src/proj");
        assert!(r.is_local());
        assert!(RepoId::from_local_path(Path::new("rel/path")).is_err());
        assert!(RepoId::from_local_path(Path::new("/a/../b")).is_err());
        assert_eq!(id("file:///srv/git/proj.git"), "local/srv/git/proj");
    }

    #[test]
    fn key_round_trips_and_is_one_segment() {
        let r = RepoId::parse("https://github.com/pallets/flask").unwrap();
        assert_eq!(r.key(), "github.com+pallets+flask");
        assert!(!r.key().contains('/'));
        assert_eq!(RepoId::from_key(&r.key()).unwrap(), r);
        assert!(RepoId::parse("https://host/a+b/repo").is_err());
        assert!(RepoId::parse("https://host/~user/repo").is_ok());
    }

    #[test]
    fn oids_and_hashes_validate() {
        let c: CommitId = "A".repeat(40).parse().unwrap();
        assert_eq!(c.as_str(), "a".repeat(40));
        assert!("abc".parse::<CommitId>().is_err());
        assert!(ChunkId::try_from("zz".repeat(16)).is_err());
        let h = ChunkId::from_bytes([7; 16]);
        assert_eq!(ChunkId::try_from(h.to_hex()).unwrap(), h);
        let run = RunId::new();
        assert!(RunId::try_from(run.to_string()).is_ok());
    }
}
