//! What a file is for — implementation, test, example, docs — from its path: the ranking's
//! prior, and the chunker's choice of how to cut prose (a test's fixture text is not read by
//! the sentence model).

use crate::kind::ChunkKind;

/// What a file is for, from its path and the chunk's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Implementation,
    Test,
    Example,
    Docs,
    /// A commit message: why code changed.
    History,
    /// Code the repository carries but nobody writes here: vendored dependencies
    /// (`vendor/`, `third_party/`, `node_modules/`), built bundles (`dist/`, `*.min.js`) and
    /// generated sources (`*.pb.go`, `*_pb2.py`, `*_generated.rs`). It repeats or derives
    /// from code that lives elsewhere.
    Generated,
}

const TEST_DIRS: [&str; 9] = [
    "test",
    "tests",
    "__tests__",
    "testing",
    "spec",
    "specs",
    "testdata",
    "fixtures",
    "e2e",
];
const EXAMPLE_DIRS: [&str; 9] = [
    "example",
    "examples",
    "demo",
    "demos",
    "sample",
    "samples",
    "bench",
    "benches",
    "benchmarks",
];
const DOC_DIRS: [&str; 3] = ["docs", "doc", "documentation"];
const GENERATED_DIRS: [&str; 7] = [
    "vendor",
    "vendored",
    "third_party",
    "third-party",
    "node_modules",
    "bower_components",
    "__generated__",
];
/// What a bundler writes into `dist/` (Go's `src/cmd/dist` is source: only these count).
const BUNDLE_EXTS: [&str; 7] = ["js", "mjs", "cjs", "jsx", "ts", "css", "map"];
const PROSE_EXTS: [&str; 7] = ["md", "markdown", "mdx", "rst", "txt", "adoc", "org"];

/// The role of a file.
pub fn role(path: &str, kind: ChunkKind) -> Role {
    if kind == ChunkKind::Commit {
        return Role::History;
    }
    let lower = path.to_lowercase();
    let (parts, stem, ext) = split(&lower);
    if !tests(&parts, stem, ext) && generated(&parts, stem, ext) {
        return Role::Generated;
    }
    // Type declarations (`index.d.ts`, `.pyi` stubs) describe an API the code implements.
    let declarations =
        ext == "pyi" || (ext == "ts" && matches!(stem.rsplit_once('.'), Some((_, "d"))));
    if matches!(kind, ChunkKind::Section | ChunkKind::Text)
        || PROSE_EXTS.contains(&ext)
        || declarations
    {
        return Role::Docs;
    }
    if tests(&parts, stem, ext) {
        return Role::Test;
    }
    if parts.iter().any(|p| EXAMPLE_DIRS.contains(p)) {
        return Role::Example;
    }
    if parts.iter().any(|p| DOC_DIRS.contains(p)) {
        return Role::Docs;
    }
    Role::Implementation
}

/// Whether a file is vendored, built or generated: under such a directory, or named as
/// the output of a bundler or a code generator.
fn generated(dirs: &[&str], stem: &str, ext: &str) -> bool {
    dirs.iter().any(|p| GENERATED_DIRS.contains(p))
        || (dirs.contains(&"dist") && BUNDLE_EXTS.contains(&ext))
        || [
            ".min",
            ".bundle",
            ".pb",
            "_pb2",
            "_pb2_grpc",
            ".pb.gw",
            "_generated",
            ".generated",
        ]
        .iter()
        .any(|s| stem.ends_with(s))
}

/// Whether a file's name says it holds tests (`test_x.py`, `x_test.go`, `x.spec.ts`,
/// `conftest.py`, `XTest.java`).
fn test_file(stem: &str, ext: &str) -> bool {
    stem.starts_with("test_")
        || stem.ends_with("_test")
        || stem.ends_with("_tests")
        || matches!(
            stem.rsplit_once('.'),
            Some((_, "test" | "spec" | "test-d" | "tests"))
        )
        || stem == "conftest"
        || stem == "tests"
        || (ext == "java" && (stem.ends_with("test") || stem.ends_with("tests")))
}

/// Whether `path` is part of a test suite — under a test or fixture directory
/// (`tests/data/sherlock.txt`, `testdata/`, `__tests__/`) or named as a test — whatever its
/// kind: prose there is fixture text, not documentation.
pub fn in_tests(path: &str) -> bool {
    let lower = path.to_lowercase();
    let (parts, stem, ext) = split(&lower);
    tests(&parts, stem, ext)
}

/// A lowercased path's directories, its file's stem and its extension (`""` when none).
fn split(lower: &str) -> (Vec<&str>, &str, &str) {
    let mut parts: Vec<&str> = lower.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    let (stem, ext) = file.rsplit_once('.').unwrap_or((file, ""));
    (parts, stem, ext)
}

/// Whether a file is part of a test suite: under a test directory, or named as a test.
fn tests(dirs: &[&str], stem: &str, ext: &str) -> bool {
    test_file(stem, ext) || dirs.iter().any(|p| TEST_DIRS.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendored_built_and_generated_code_is_told_from_the_repositorys_own() {
        for path in [
            "vendor/github.com/spf13/pflag/flag.go",
            "third_party/zlib/inflate.c",
            "node_modules/koa/lib/application.js",
            "dist/axios.js",
            "packages/ui/dist/index.mjs",
            "static/js/jquery.min.js",
            "api/v1/service.pb.go",
            "proto/service_pb2.py",
            "src/schema_generated.rs",
            "vendor/README.md",
        ] {
            assert_eq!(role(path, ChunkKind::Function), Role::Generated, "{path}");
        }
        for path in [
            "lib/distance.js",
            "src/vendors.rs",
            "cmd/generate.go",
            "pkg/distribute/dist_test.go",
            "src/cmd/dist/build.go",
            "tests/test_generated.py",
        ] {
            assert_ne!(role(path, ChunkKind::Function), Role::Generated, "{path}");
        }
        assert_eq!(
            role("pkg/distribute/dist_test.go", ChunkKind::Function),
            Role::Test
        );
    }

    #[test]
    fn fixture_text_is_in_tests_and_documentation_is_not() {
        assert!(in_tests("tests/data/sherlock-nul.txt"));
        assert!(in_tests("pkg/testdata/golden.md"));
        assert!(in_tests("src/__tests__/notes.txt"));
        assert!(in_tests("src/parser_test.go"));
        assert!(!in_tests("README.md"));
        assert!(!in_tests("docs/guide/testing.md"));
        assert!(!in_tests("src/contest.txt"));
        // The ranking still takes fixture prose for docs.
        assert_eq!(
            role("tests/data/sherlock-nul.txt", ChunkKind::Text),
            Role::Docs
        );
    }
}
