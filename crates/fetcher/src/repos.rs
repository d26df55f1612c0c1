//! The repos file: which repositories to index.
//!
//! ```toml
//! [[repo]]
//! url = "https://github.com/pallets/flask"   # https, ssh, scp-style, file:// or a path
//! branch = "main"                            # default: the remote's HEAD
//! include = ["src/**"]                       # default: everything
//! exclude = ["docs/generated/**"]            # on top of the built-in vendored list
//! ```
//!
//! Relative paths are resolved against the repos file's directory.

use std::path::Path;

use serde::Deserialize;
use trawl_core::RepoId;
use trawl_core::ids::redact;

/// One repository to index.
#[derive(Clone, Debug)]
pub struct RepoSpec {
    pub id: RepoId,
    /// What git connects to; may hold credentials: never log it, use `display_url`.
    pub url: String,
    /// `url` without credentials.
    pub display_url: String,
    pub branch: Option<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReposFile {
    #[serde(default)]
    repo: Vec<RepoEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepoEntry {
    url: String,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

/// A repos file or repository address that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ReposError {
    #[error("cannot read repos file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("repos file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Repo(String),
}

/// Reads and validates a repos file. Duplicate repositories (any two spellings of one
/// remote) are an error.
pub fn load(path: &Path) -> Result<Vec<RepoSpec>, ReposError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReposError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let file: ReposFile = toml::from_str(&text).map_err(|e| ReposError::Parse {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if file.repo.is_empty() {
        return Err(ReposError::Parse {
            path: path.display().to_string(),
            message: "no [[repo]] entries".into(),
        });
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<RepoSpec> = Vec::new();
    for e in file.repo {
        let mut spec = resolve(&e.url, base)?;
        spec.branch = e.branch;
        spec.include = e.include;
        spec.exclude = e.exclude;
        if let Some(prev) = out.iter().find(|s| s.id == spec.id) {
            return Err(ReposError::Parse {
                path: path.display().to_string(),
                message: format!(
                    "{} and {} are the same repository ({})",
                    prev.display_url, spec.display_url, spec.id
                ),
            });
        }
        out.push(spec);
    }
    Ok(out)
}

fn looks_local(s: &str) -> bool {
    s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || s == "." || s == ".."
}

/// Resolves one repository address: a remote URL, `file://`, or a local path (relative to
/// `base`).
pub fn resolve(address: &str, base: &Path) -> Result<RepoSpec, ReposError> {
    let address = address.trim();
    let local = if let Some(p) = address.strip_prefix("file://") {
        Some(Path::new(p).to_path_buf())
    } else if looks_local(address) || (!address.contains(':') && base.join(address).exists()) {
        Some(base.join(address))
    } else {
        None
    };
    if let Some(p) = local {
        let abs = std::fs::canonicalize(&p)
            .map_err(|e| ReposError::Repo(format!("repository path {}: {e}", p.display())))?;
        let id = RepoId::from_local_path(&abs).map_err(|e| ReposError::Repo(e.to_string()))?;
        let url = abs.to_string_lossy().into_owned();
        return Ok(RepoSpec {
            id,
            display_url: url.clone(),
            url,
            branch: None,
            include: Vec::new(),
            exclude: Vec::new(),
        });
    }
    let id = RepoId::parse(address).map_err(|e| ReposError::Repo(e.to_string()))?;
    if address
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && crate::git::url_has_password(address)
    {
        return Err(ReposError::Repo(format!(
            "{}: a password or token in a plain http URL would be sent in clear: use https",
            redact(address)
        )));
    }
    // An already canonical id (`github.com/o/r`) is fetched over https.
    let url = if address.contains("://") || address.contains('@') || address.contains(':') {
        address.to_owned()
    } else {
        format!("https://{address}")
    };
    Ok(RepoSpec {
        id,
        display_url: redact(&url),
        url,
        branch: None,
        include: Vec::new(),
        exclude: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repos_file_resolves_paths_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proj")).unwrap();
        let f = dir.path().join("repos.toml");
        std::fs::write(
            &f,
            r#"
[[repo]]
url = "https://tok:secret@github.com/pallets/flask.git"
branch = "main"
include = ["src/**"]

[[repo]]
url = "./proj"
"#,
        )
        .unwrap();
        let specs = load(&f).unwrap();
        assert_eq!(specs[0].id.as_str(), "github.com/pallets/flask");
        assert!(!specs[0].display_url.contains("secret"));
        assert_eq!(specs[0].branch.as_deref(), Some("main"));
        assert!(specs[1].id.is_local());
        std::fs::write(
            &f,
            "[[repo]]\nurl = \"git@github.com:pallets/flask\"\n[[repo]]\nurl = \"https://github.com/pallets/flask\"\n",
        )
        .unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("same repository"), "{e}");
        std::fs::write(&f, "[[repo]]\nurl = \"x\"\nbrnch = \"main\"\n").unwrap();
        assert!(load(&f).unwrap_err().to_string().contains("brnch"));
    }
}
