//! Which files are indexed, and why the others are not.
//!
//! Every file of a commit gets a row in the manifest; a skipped file's row says why. The
//! checks run cheapest first: path rules (submodule, symlink, secret, lock file, vendored,
//! excluded) need no content; the size cap needs only the object header; the content rules
//! (LFS pointer, binary, encoding, generated, minified, private key) read the blob once.
//!
//! **Non-UTF-8 text** is decoded losslessly where the encoding can be known: a UTF-16 byte-order
//! mark, or a legacy encoding (Latin-1/Windows-125x, Shift_JIS, GBK, EUC-KR, …) detected by
//! `chardetng` and decoded by `encoding_rs` without a single replacement character. The event
//! then carries UTF-8 text and names the original encoding. Bytes that decode under no
//! encoding without loss are skipped as `undecodable`: indexing replacement characters would
//! cite text that is not in the file.

use std::fmt;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

/// Why a file is not indexed. The string forms are stable: they land in manifests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    /// A git submodule: recorded, never followed.
    Submodule,
    /// A symbolic link: recorded, never followed.
    Symlink,
    /// Credentials or keys (`.env`, `*.pem`, `id_rsa`, a private key block): never published.
    Secret,
    /// Package-manager lock files.
    LockFile,
    /// Under `vendor/`, `node_modules/`, `third_party/`, `dist/`, … or a configured exclude.
    Vendored,
    /// Outside the repository's `include` globs.
    NotIncluded,
    /// Larger than `fetch.max_file_bytes`.
    TooLarge,
    /// A Git LFS pointer: recorded, the object is not fetched.
    LfsPointer,
    /// NUL bytes in the first 8,000 bytes (git's own test).
    Binary,
    /// Not UTF-8, and no encoding decodes it without loss.
    Undecodable,
    /// Declares itself generated ("Code generated … DO NOT EDIT", `@generated`).
    Generated,
    /// `*.min.js` and the like, or a line longer than `fetch.max_line_bytes`.
    Minified,
    /// No content.
    Empty,
}

impl SkipReason {
    pub const ALL: [SkipReason; 13] = [
        SkipReason::Submodule,
        SkipReason::Symlink,
        SkipReason::Secret,
        SkipReason::LockFile,
        SkipReason::Vendored,
        SkipReason::NotIncluded,
        SkipReason::TooLarge,
        SkipReason::LfsPointer,
        SkipReason::Binary,
        SkipReason::Undecodable,
        SkipReason::Generated,
        SkipReason::Minified,
        SkipReason::Empty,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Submodule => "submodule",
            SkipReason::Symlink => "symlink",
            SkipReason::Secret => "secret",
            SkipReason::LockFile => "lock-file",
            SkipReason::Vendored => "vendored",
            SkipReason::NotIncluded => "not-included",
            SkipReason::TooLarge => "too-large",
            SkipReason::LfsPointer => "lfs-pointer",
            SkipReason::Binary => "binary",
            SkipReason::Undecodable => "undecodable",
            SkipReason::Generated => "generated",
            SkipReason::Minified => "minified",
            SkipReason::Empty => "empty",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a tree entry, from its git file mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Symlink,
    Submodule,
}

const VENDORED: &[&str] = &[
    "**/vendor/**",
    "**/vendors/**",
    "**/node_modules/**",
    "**/bower_components/**",
    "**/third_party/**",
    "**/third-party/**",
    "**/thirdparty/**",
    "**/external/**",
    "**/dist/**",
    "**/.yarn/**",
    "**/__pycache__/**",
    "**/site-packages/**",
    "**/Pods/**",
    "**/*.pb.go",
    "**/*_pb2.py",
    "**/*_pb2_grpc.py",
];

const MINIFIED: &[&str] = &["**/*.min.js", "**/*.min.css", "**/*.min.mjs", "**/*.map"];

const LOCK_FILES: &[&str] = &[
    "**/Cargo.lock",
    "**/package-lock.json",
    "**/npm-shrinkwrap.json",
    "**/yarn.lock",
    "**/pnpm-lock.yaml",
    "**/bun.lockb",
    "**/bun.lock",
    "**/poetry.lock",
    "**/Pipfile.lock",
    "**/uv.lock",
    "**/pdm.lock",
    "**/composer.lock",
    "**/Gemfile.lock",
    "**/go.sum",
    "**/flake.lock",
    "**/Package.resolved",
    "**/packages.lock.json",
    "**/mix.lock",
    "**/pubspec.lock",
];

const SECRETS: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/*.kdbx",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/.netrc",
    "**/_netrc",
    "**/.npmrc",
    "**/.pypirc",
    "**/.htpasswd",
    "**/.git-credentials",
    "**/credentials",
    "**/credentials.json",
    "**/credentials.yml",
    "**/credentials.yaml",
    "**/*.tfvars",
    "**/*.tfstate",
    "**/*.tfstate.backup",
];

/// `.env.example` and friends document variables without holding them.
const SECRET_EXCEPTIONS: &[&str] = &[
    "**/.env.example",
    "**/.env.sample",
    "**/.env.template",
    "**/.env.dist",
    "**/*.pub",
];

/// Compiled file rules for one repository.
#[derive(Debug)]
pub struct Policy {
    vendored: GlobSet,
    minified: GlobSet,
    lock_files: GlobSet,
    secrets: GlobSet,
    secret_exceptions: GlobSet,
    include: Option<GlobSet>,
    max_file_bytes: u64,
    max_line_bytes: usize,
}

/// A bad glob in the configuration or the repos file.
#[derive(Debug, thiserror::Error)]
#[error("bad glob {glob:?}: {reason}")]
pub struct GlobError {
    pub glob: String,
    pub reason: String,
}

fn set(globs: impl IntoIterator<Item = impl AsRef<str>>) -> Result<GlobSet, GlobError> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let g = g.as_ref();
        b.add(Glob::new(g).map_err(|e| GlobError {
            glob: g.to_owned(),
            reason: e.kind().to_string(),
        })?);
    }
    b.build().map_err(|e| GlobError {
        glob: String::new(),
        reason: e.to_string(),
    })
}

/// What the content check decided: the text to publish, or why not.
#[derive(Debug, PartialEq, Eq)]
pub enum Content {
    Text {
        text: String,
        /// The source encoding when it was not UTF-8.
        encoding: Option<&'static str>,
    },
    Skip(SkipReason),
}

impl Policy {
    /// Builds the rules: the built-in lists, plus `exclude` (skipped as vendored) and
    /// `include` (when non-empty, everything else is `not-included`).
    pub fn new(
        include: &[String],
        exclude: &[String],
        max_file_bytes: u64,
        max_line_bytes: usize,
    ) -> Result<Self, GlobError> {
        Ok(Self {
            vendored: set(VENDORED
                .iter()
                .copied()
                .map(str::to_owned)
                .chain(exclude.iter().cloned()))?,
            minified: set(MINIFIED)?,
            lock_files: set(LOCK_FILES)?,
            secrets: set(SECRETS)?,
            secret_exceptions: set(SECRET_EXCEPTIONS)?,
            include: if include.is_empty() {
                None
            } else {
                Some(set(include)?)
            },
            max_file_bytes,
            max_line_bytes,
        })
    }

    /// Rules that need only the path, the entry kind and the size.
    pub fn check_path(&self, path: &str, kind: EntryKind, size: u64) -> Option<SkipReason> {
        match kind {
            EntryKind::Submodule => return Some(SkipReason::Submodule),
            EntryKind::Symlink => return Some(SkipReason::Symlink),
            EntryKind::File => {}
        }
        if self.is_secret_path(path) {
            return Some(SkipReason::Secret);
        }
        if self.lock_files.is_match(path) {
            return Some(SkipReason::LockFile);
        }
        if self.minified.is_match(path) {
            return Some(SkipReason::Minified);
        }
        if self.vendored.is_match(path) {
            return Some(SkipReason::Vendored);
        }
        if let Some(include) = &self.include
            && !include.is_match(path)
        {
            return Some(SkipReason::NotIncluded);
        }
        if size > self.max_file_bytes {
            return Some(SkipReason::TooLarge);
        }
        if size == 0 {
            return Some(SkipReason::Empty);
        }
        None
    }

    /// True for paths that may hold credentials: such a path is never published, not even
    /// in a delete event.
    pub fn is_secret_path(&self, path: &str) -> bool {
        self.secrets.is_match(path) && !self.secret_exceptions.is_match(path)
    }

    /// Rules that read the content. Returns the UTF-8 text to publish, or the skip reason.
    pub fn check_content(&self, bytes: &[u8]) -> Content {
        if bytes.is_empty() {
            return Content::Skip(SkipReason::Empty);
        }
        if bytes.starts_with(b"version https://git-lfs.github.com/spec/") && bytes.len() < 1024 {
            return Content::Skip(SkipReason::LfsPointer);
        }
        let (text, encoding) = match decode(bytes) {
            Ok(t) => t,
            Err(reason) => return Content::Skip(reason),
        };
        let head = &text[..floor_char_boundary(&text, 2048)];
        let head_lower = head.to_ascii_lowercase();
        if head.contains("@generated")
            || (head_lower.contains("generated") && head_lower.contains("do not edit"))
        {
            return Content::Skip(SkipReason::Generated);
        }
        if text.split('\n').any(|l| l.len() > self.max_line_bytes) {
            return Content::Skip(SkipReason::Minified);
        }
        if contains_private_key(&text) {
            return Content::Skip(SkipReason::Secret);
        }
        Content::Text { text, encoding }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A PEM private key: a line that is exactly `-----BEGIN … PRIVATE KEY-----` (quotes allowed
/// around it), followed by a line of base64. Prose that merely mentions the marker is not one.
fn contains_private_key(text: &str) -> bool {
    let mut lines = text
        .lines()
        .map(|l| l.trim().trim_matches(|c| c == '"' || c == '\'' || c == ','));
    while let Some(line) = lines.next() {
        if line.starts_with("-----BEGIN ") && line.ends_with("PRIVATE KEY-----") {
            let next = lines
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches(|c| c == '"' || c == '\'');
            let next = next.strip_suffix("\\n").unwrap_or(next);
            if next.len() >= 16
                && next
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            {
                return true;
            }
        }
    }
    false
}

/// Bytes → UTF-8 text and the source encoding (when not UTF-8). See the module docs.
pub fn decode(bytes: &[u8]) -> Result<(String, Option<&'static str>), SkipReason> {
    // A UTF-16 byte-order mark: decode whatever NULs the text holds.
    if let Some((enc, bom_len)) = encoding_rs::Encoding::for_bom(bytes)
        && enc != encoding_rs::UTF_8
    {
        let (text, had_errors) = enc.decode_without_bom_handling(&bytes[bom_len..]);
        return if had_errors {
            Err(SkipReason::Undecodable)
        } else {
            Ok((text.into_owned(), Some(enc.name())))
        };
    }
    let head = &bytes[..bytes.len().min(8000)];
    if head.contains(&0) {
        return Err(SkipReason::Binary);
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Ok(s) = std::str::from_utf8(body) {
        return Ok((s.to_owned(), None));
    }
    let mut det = chardetng::EncodingDetector::new();
    det.feed(body, true);
    let enc = det.guess(None, false);
    let (text, had_errors) = enc.decode_without_bom_handling(body);
    if had_errors || text.contains('\u{FFFD}') {
        return Err(SkipReason::Undecodable);
    }
    Ok((text.into_owned(), Some(enc.name())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::new(&[], &["gen/**".into()], 1000, 200).unwrap()
    }

    #[test]
    fn path_rules() {
        let p = policy();
        let f = EntryKind::File;
        for (path, want) in [
            ("src/main.py", None),
            ("vendor/x/y.go", Some(SkipReason::Vendored)),
            ("web/node_modules/a/index.js", Some(SkipReason::Vendored)),
            ("a/third_party/b.c", Some(SkipReason::Vendored)),
            ("gen/api.rs", Some(SkipReason::Vendored)),
            ("static/app.min.js", Some(SkipReason::Minified)),
            ("Cargo.lock", Some(SkipReason::LockFile)),
            ("web/package-lock.json", Some(SkipReason::LockFile)),
            (".env", Some(SkipReason::Secret)),
            ("config/.env.production", Some(SkipReason::Secret)),
            (".env.example", None),
            ("certs/server.pem", Some(SkipReason::Secret)),
            ("deploy/id_rsa", Some(SkipReason::Secret)),
            ("deploy/id_rsa.pub", None),
            (".aws/credentials", Some(SkipReason::Secret)),
        ] {
            assert_eq!(p.check_path(path, f, 10), want, "{path}");
        }
        assert_eq!(p.check_path("big.py", f, 1001), Some(SkipReason::TooLarge));
        assert_eq!(p.check_path("empty.py", f, 0), Some(SkipReason::Empty));
        assert_eq!(
            p.check_path("l", EntryKind::Symlink, 3),
            Some(SkipReason::Symlink)
        );
        assert_eq!(
            p.check_path("m", EntryKind::Submodule, 0),
            Some(SkipReason::Submodule)
        );
        let only_src = Policy::new(&["src/**".into()], &[], 1000, 200).unwrap();
        assert_eq!(only_src.check_path("src/a.py", f, 1), None);
        assert_eq!(
            only_src.check_path("docs/a.md", f, 1),
            Some(SkipReason::NotIncluded)
        );
        assert!(Policy::new(&["a[".into()], &[], 1, 1).is_err());
    }

    #[test]
    fn content_rules() {
        let p = policy();
        let text = |s: &str| Content::Text {
            text: s.to_owned(),
            encoding: None,
        };
        assert_eq!(p.check_content(b"def f(): pass\n"), text("def f(): pass\n"));
        assert_eq!(p.check_content(b"\xEF\xBB\xBFx = 1\n"), text("x = 1\n"));
        assert_eq!(
            p.check_content(b"\x7fELF\x00\x01"),
            Content::Skip(SkipReason::Binary)
        );
        assert_eq!(
            p.check_content(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"),
            Content::Skip(SkipReason::LfsPointer)
        );
        assert_eq!(
            p.check_content(b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage x\n"),
            Content::Skip(SkipReason::Generated)
        );
        assert_eq!(
            p.check_content(format!("var a={};\n", "1,".repeat(200)).as_bytes()),
            Content::Skip(SkipReason::Minified)
        );
        assert_eq!(
            p.check_content(
                b"k = '''\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt\n'''\n"
            ),
            Content::Skip(SkipReason::Secret)
        );
        // Prose that mentions the marker is not a key.
        let prose = "Keys look like `-----BEGIN RSA PRIVATE KEY-----` in a file.\n";
        assert!(matches!(
            p.check_content(prose.as_bytes()),
            Content::Text { .. }
        ));
    }

    #[test]
    fn non_utf8_text_is_decoded_losslessly_or_refused() {
        // UTF-16LE with BOM: "hé\n"
        let utf16: Vec<u8> = [0xFF, 0xFE, b'h', 0, 0xE9, 0, b'\n', 0].to_vec();
        assert_eq!(
            decode(&utf16).unwrap(),
            ("hé\n".to_owned(), Some("UTF-16LE"))
        );
        // Latin-1 / Windows-1252 French.
        let latin = b"# r\xe9sum\xe9 des donn\xe9es, cha\xeene de caract\xe8res\nx = 1\n";
        let (text, enc) = decode(latin).unwrap();
        assert!(text.contains("résumé") && text.contains("chaîne"), "{text}");
        assert_eq!(enc, Some("windows-1252"));
        // Shift_JIS Japanese comment.
        let (sjis, _, _) =
            encoding_rs::SHIFT_JIS.encode("# 日本語のコメントです。設定ファイル\nx = 1\n");
        let (text, enc) = decode(&sjis).unwrap();
        assert!(text.contains("日本語"), "{text}");
        assert_eq!(enc, Some("Shift_JIS"));
    }
}
