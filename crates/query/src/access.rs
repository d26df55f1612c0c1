//! Who may see what: a bearer token maps to repository patterns; a search only ever touches
//! the docs of repositories its caller may see.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use trawl_core::config::TokenConfig;
use trawl_core::secret::Secret;

use crate::QueryError;

/// The repositories a caller may see.
#[derive(Clone, Debug)]
pub struct Access {
    /// `None`: every repository.
    patterns: Option<GlobSet>,
    /// The token's name, for logs and metrics.
    pub name: String,
}

/// A repository pattern: `*` does not stop at `/` (`github.com/acme/*` covers every repo of
/// the org, `*` every repo).
pub fn glob(pattern: &str) -> Result<Glob, QueryError> {
    GlobBuilder::new(pattern.trim())
        .literal_separator(false)
        .build()
        .map_err(|e| QueryError::BadRequest(format!("repository pattern {pattern:?}: {e}")))
}

/// A set of repository patterns.
pub fn globset(patterns: &[String]) -> Result<GlobSet, QueryError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(p)?);
    }
    b.build()
        .map_err(|e| QueryError::BadRequest(format!("repository patterns: {e}")))
}

impl Access {
    /// Everything (the local CLI, an open server).
    pub fn all() -> Self {
        Self {
            patterns: None,
            name: "local".into(),
        }
    }

    /// The repositories matching `patterns`.
    pub fn repos(name: &str, patterns: &[String]) -> Result<Self, QueryError> {
        Ok(Self {
            patterns: Some(globset(patterns)?),
            name: name.to_owned(),
        })
    }

    /// Whether the caller may see every repository.
    pub fn allows_all(&self) -> bool {
        self.patterns.is_none()
    }

    /// Whether the caller may see `repo`.
    pub fn allows(&self, repo: &str) -> bool {
        self.patterns.as_ref().is_none_or(|g| g.is_match(repo))
    }
}

/// The configured tokens, resolved (inline or from the environment).
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<(Secret, Access)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(_, a)| &a.name))
            .finish()
    }
}

impl Tokens {
    /// Resolves `[[query.tokens]]`. A token whose environment variable is unset is an error:
    /// a server must not start with a hole in its access list.
    pub fn from_config(tokens: &[TokenConfig]) -> Result<Self, QueryError> {
        let mut entries = Vec::new();
        for t in tokens {
            let secret = match (t.token.is_empty(), t.token_env.is_empty()) {
                (false, true) => t.token.expose().to_owned(),
                (true, false) => std::env::var(&t.token_env).map_err(|_| {
                    QueryError::BadRequest(format!(
                        "query token {:?}: environment variable {} is not set",
                        t.name, t.token_env
                    ))
                })?,
                _ => {
                    return Err(QueryError::BadRequest(format!(
                        "query token {:?}: give exactly one of `token` or `token_env`",
                        t.name
                    )));
                }
            };
            if secret.len() < 16 {
                return Err(QueryError::BadRequest(format!(
                    "query token {:?} is shorter than 16 characters: use a random secret",
                    t.name
                )));
            }
            if t.repos.is_empty() {
                return Err(QueryError::BadRequest(format!(
                    "query token {:?} has no `repos`: list the patterns it may see (\"*\" for all)",
                    t.name
                )));
            }
            entries.push((Secret::new(secret), Access::repos(&t.name, &t.repos)?));
        }
        Ok(Self { entries })
    }

    /// Whether the server is open (no tokens configured).
    pub fn open(&self) -> bool {
        self.entries.is_empty()
    }

    /// The access of a bearer token (compared in constant time per entry).
    pub fn check(&self, bearer: Option<&str>) -> Result<Access, QueryError> {
        if self.open() {
            return Ok(Access::all());
        }
        let Some(given) = bearer else {
            return Err(QueryError::Unauthorized(
                "missing bearer token: send `Authorization: Bearer <token>`".into(),
            ));
        };
        let mut found = None;
        for (secret, access) in &self.entries {
            if constant_time_eq(secret.expose().as_bytes(), given.as_bytes()) && found.is_none() {
                found = Some(access.clone());
            }
        }
        found.ok_or_else(|| QueryError::Unauthorized("unknown bearer token".into()))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_whole_orgs_and_nothing_else() {
        let a = Access::repos("t", &["github.com/acme/*".into()]).unwrap();
        assert!(a.allows("github.com/acme/api"));
        assert!(a.allows("github.com/acme/deep/nested"));
        assert!(!a.allows("github.com/acmecorp/api"));
        assert!(!a.allows("github.com/other/api"));
        assert!(Access::all().allows("anything"));
    }

    #[test]
    fn tokens_need_a_secret_and_patterns() {
        let t = |token: &str, repos: &[&str]| TokenConfig {
            name: "n".into(),
            token: token.into(),
            token_env: String::new(),
            repos: repos.iter().map(|s| (*s).to_owned()).collect(),
        };
        assert!(Tokens::from_config(&[t("short", &["*"])]).is_err());
        assert!(Tokens::from_config(&[t("a-long-enough-secret", &[])]).is_err());
        let tokens = Tokens::from_config(&[t("a-long-enough-secret", &["x/*"])]).unwrap();
        assert!(tokens.check(None).is_err());
        assert!(tokens.check(Some("wrong-secret-of-same-len")).is_err());
        let a = tokens.check(Some("a-long-enough-secret")).unwrap();
        assert!(a.allows("x/y") && !a.allows("z/y"));
        assert!(Tokens::default().check(None).unwrap().allows("z/y"));
        // Neither the config nor the resolved tokens show the secret.
        let shown = format!("{:?} {tokens:?}", t("a-long-enough-secret", &["x/*"]));
        assert!(!shown.contains("a-long-enough-secret"), "{shown}");
    }
}
