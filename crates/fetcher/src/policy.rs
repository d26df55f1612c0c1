//! Which files are indexed, and why the others are not.
//!
//! Every file of a commit gets a row in the manifest; a skipped file's row says why. The
//! checks run cheapest first: path rules (submodule, symlink, secret, lock file, vendored,
//! excluded) need no content; the size cap needs only the object header; the content rules
//! (LFS pointer, binary, encoding, generated, minified, then the [`secrets`] scan: private
//! keys skip the file, tokens are redacted in place) read the blob once.
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

use crate::secrets::{self, Finding, Verdict};

/// Why a file is not indexed. The string forms are stable: they land in manifests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    /// A git submodule: recorded, never followed.
    Submodule,
    /// A symbolic link: recorded, never followed.
    Symlink,
    /// Credentials or keys (`.env`, `*.pem`, `id_rsa`, a private key anywhere in the text, a
    /// service-account JSON; [`secrets`]): never published.
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
    /// `*.min.js` and the like, or most of its bytes in lines longer than `fetch.max_line_bytes`.
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

/// Compiled file rules for one repository.
#[derive(Debug)]
pub struct Policy {
    vendored: GlobSet,
    minified: GlobSet,
    lock_files: GlobSet,
    /// Paths exempt from the secret rules (`fetch.secrets_allow`).
    secrets_allow: Option<GlobSet>,
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
        /// With every secret found redacted in place ([`secrets`]).
        text: String,
        /// The source encoding when it was not UTF-8.
        encoding: Option<&'static str>,
        /// The secrets redacted, in line order.
        redactions: Vec<Finding>,
    },
    Skip(SkipReason),
    /// Skipped as [`SkipReason::Secret`] because of this finding.
    Secret(Finding),
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
            secrets_allow: None,
            include: if include.is_empty() {
                None
            } else {
                Some(set(include)?)
            },
            max_file_bytes,
            max_line_bytes,
        })
    }

    /// Exempts paths from the secret rules, path and content alike: their text is indexed as
    /// it is. For fixtures of fake keys, never for real ones.
    pub fn with_secrets_allow(mut self, globs: &[String]) -> Result<Self, GlobError> {
        self.secrets_allow = if globs.is_empty() {
            None
        } else {
            Some(set(globs)?)
        };
        Ok(self)
    }

    fn secrets_allowed(&self, path: &str) -> bool {
        self.secrets_allow
            .as_ref()
            .is_some_and(|a| a.is_match(path))
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
        self.secret_path_rule(path).is_some()
    }

    /// The id of the path rule that makes `path` a credentials file ([`secrets::PATH_RULES`]).
    pub fn secret_path_rule(&self, path: &str) -> Option<&'static str> {
        if self.secrets_allowed(path) {
            return None;
        }
        secrets::path_rule(path)
    }

    /// Rules that read the content. Returns the UTF-8 text to publish — secrets redacted —
    /// or the skip reason. `path` is only for `fetch.secrets_allow`.
    pub fn check_content(&self, path: &str, bytes: &[u8]) -> Content {
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
        // Minified: most of the file in lines too long to read. One long line in a file of
        // code (a test's string of 2,000 emoji) does not make it so.
        let long: usize = text
            .split('\n')
            .map(str::len)
            .filter(|&n| n > self.max_line_bytes)
            .sum();
        if 2 * long > text.len() {
            return Content::Skip(SkipReason::Minified);
        }
        if self.secrets_allowed(path) {
            return Content::Text {
                text,
                encoding,
                redactions: Vec::new(),
            };
        }
        match secrets::scan(&text) {
            Verdict::Clean(_) => Content::Text {
                text,
                encoding,
                redactions: Vec::new(),
            },
            Verdict::Redacted { text, findings } => Content::Text {
                text,
                encoding,
                redactions: findings,
            },
            Verdict::Skip(finding) => Content::Secret(finding),
        }
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
    // Text holds no NUL anywhere: a PDF (an Illustrator `.ai`) or an archive may hold its
    // first past git's 8,000-byte sniff.
    if bytes.contains(&0) {
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
    // A single-byte encoding decodes any bytes: compressed or encrypted data read as
    // Windows-1252 is one character in ten a control character, text next to none.
    let (mut chars, mut controls) = (0usize, 0usize);
    for c in text.chars() {
        chars += 1;
        controls +=
            usize::from(c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b'));
    }
    if controls * MAX_CONTROL_SHARE > chars {
        return Err(SkipReason::Binary);
    }
    Ok((text.into_owned(), Some(enc.name())))
}

/// Of this many characters of text in a legacy encoding, at most one is a control character
/// (tab, line breaks, form feed and escape aside); more, and the bytes are data.
const MAX_CONTROL_SHARE: usize = 100;

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
            (".ENV", Some(SkipReason::Secret)),
            ("deploy/prod.env", Some(SkipReason::Secret)),
            (".envrc", Some(SkipReason::Secret)),
            ("ops/.kube/config", Some(SkipReason::Secret)),
            ("infra/prod.auto.tfvars", Some(SkipReason::Secret)),
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
            redactions: Vec::new(),
        };
        let check = |b: &[u8]| p.check_content("a.py", b);
        assert_eq!(check(b"def f(): pass\n"), text("def f(): pass\n"));
        assert_eq!(check(b"\xEF\xBB\xBFx = 1\n"), text("x = 1\n"));
        assert_eq!(check(b"\x7fELF\x00\x01"), Content::Skip(SkipReason::Binary));
        // A PDF whose first NUL is past the first 8,000 bytes, and compressed data with none:
        // no single-byte encoding makes them text.
        let mut pdf = b"%PDF-1.6\n%\xe2\xe3\xcf\xd3\n".to_vec();
        pdf.extend(
            std::iter::repeat_n(b"1 0 obj << /Length 5 >> stream\n".as_slice(), 400).flatten(),
        );
        pdf.extend(b"\x00\x01\x02binary\n");
        assert!(pdf.len() > 8000);
        assert_eq!(check(&pdf), Content::Skip(SkipReason::Binary));
        let brotli: Vec<u8> = (0u32..400)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
            .collect();
        assert!(std::str::from_utf8(&brotli).is_err() && !brotli.contains(&0));
        assert_eq!(check(&brotli), Content::Skip(SkipReason::Binary));
        // Text in a legacy encoding is still text.
        assert!(matches!(
            check(b"# caf\xe9 cr\xe8me br\xfbl\xe9e\nprice = '5 \x80'\n"),
            Content::Text {
                encoding: Some(_),
                ..
            }
        ));
        assert_eq!(
            check(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"),
            Content::Skip(SkipReason::LfsPointer)
        );
        assert_eq!(
            check(b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage x\n"),
            Content::Skip(SkipReason::Generated)
        );
        assert_eq!(
            check(format!("var a={};\n", "1,".repeat(200)).as_bytes()),
            Content::Skip(SkipReason::Minified)
        );
        // One long line among many of code is not a minified file.
        let code = "test('a case', () => ok(1));\n".repeat(40);
        let with_long = format!("{code}const s = \"{}\";\n{code}", "x".repeat(300));
        assert!(matches!(check(with_long.as_bytes()), Content::Text { .. }));
        // Assembled at run time, so that this file holds no key.
        let marker = ["-----BEGIN RSA", " PRIVATE KEY-----"].concat();
        let key = format!(
            "k = '''\n{marker}\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt\n'''\n"
        );
        assert!(matches!(
            check(key.as_bytes()),
            Content::Secret(Finding {
                rule: "private-key",
                line: 2,
                ..
            })
        ));
        // Prose that mentions the marker is not a key.
        let prose = format!("Keys look like `{marker}` in a file.\n");
        assert_eq!(check(prose.as_bytes()), text(&prose));
        // A token is redacted in place.
        let token = ["ghp_", "0123456789abcdefghijABCDEFGHIJ012345"].concat();
        let Content::Text {
            text: out,
            redactions,
            ..
        } = check(format!("import os\nG = \"{token}\"\n").as_bytes())
        else {
            panic!("not indexed");
        };
        assert_eq!(out, "import os\nG = \"[REDACTED:github-pat]\"\n");
        assert_eq!(redactions.len(), 1);
    }

    #[test]
    fn secrets_allow_exempts_paths_from_the_secret_rules() {
        let p = policy()
            .with_secrets_allow(&["tests/fixtures/**".into()])
            .unwrap();
        let token = format!(
            "G = \"{}\"\n",
            ["ghp_", "0123456789abcdefghijABCDEFGHIJ012345"].concat()
        );
        assert!(p.is_secret_path("config/.env"));
        assert!(!p.is_secret_path("tests/fixtures/.env"));
        assert_eq!(
            p.check_path("tests/fixtures/.env", EntryKind::File, 10),
            None
        );
        assert!(matches!(
            p.check_content("tests/fixtures/t.py", token.as_bytes()),
            Content::Text { ref text, .. } if *text == token
        ));
        assert!(matches!(
            p.check_content("src/t.py", token.as_bytes()),
            Content::Text { ref redactions, .. } if redactions.len() == 1
        ));
        assert!(policy().with_secrets_allow(&["a[".into()]).is_err());
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
