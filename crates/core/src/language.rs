//! Language detection from the file name, the extension and a shebang line.
//!
//! Names are the lowercase identifiers the chunker uses (`python`, `rust`, `tsx`, …).
//! `text` is returned for known plain-text files; `None` means "not recognised": such a
//! file is still indexed, by the text chunker.
//!
//! trawl's own table decides first (it knows which names have compiled grammars, and that
//! `.h` is C); tree-sitter-language-pack's detection (path, extension, ambiguity lists,
//! shebang; 300+ languages, offline) names the long tail, whose grammars may load at run time.

/// Detects the language of `path`, looking at `head` (the start of the file) for a shebang
/// when the name alone does not tell.
pub fn detect(path: &str, head: &[u8]) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    if let Some(lang) = by_name(name) {
        return Some(lang);
    }
    if let Some((_, ext)) = name.rsplit_once('.')
        && !ext.is_empty()
        && let Some(lang) = by_extension(&ext.to_ascii_lowercase())
    {
        return Some(lang);
    }
    by_shebang(head)
        .or_else(|| tree_sitter_language_pack::detect_language(path))
        .or_else(|| {
            let head = std::str::from_utf8(head.get(..head.len().min(256))?).ok()?;
            tree_sitter_language_pack::detect_language_from_content(head)
        })
}

fn by_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "Makefile" | "makefile" | "GNUmakefile" => "make",
        "Dockerfile" | "Containerfile" => "dockerfile",
        "CMakeLists.txt" => "cmake",
        "Rakefile" | "Gemfile" | "Podfile" | "Vagrantfile" | "Guardfile" => "ruby",
        "BUILD" | "BUILD.bazel" | "WORKSPACE" | "SConstruct" | "SConscript" => "python",
        ".bashrc" | ".bash_profile" | ".profile" | ".zshrc" | "PKGBUILD" => "bash",
        "LICENSE" | "COPYING" | "NOTICE" | "AUTHORS" | "CHANGELOG" | "README" => "text",
        _ => return None,
    })
}

fn by_extension(ext: &str) -> Option<&'static str> {
    Some(match ext {
        "py" | "pyi" | "pyw" => "python",
        "rs" => "rust",
        "go" => "go",
        "java" => "java",
        "js" | "mjs" | "cjs" | "jsx" => "javascript",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "tsx",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "c++" | "hh" | "hpp" | "hxx" | "h++" | "ipp" | "inl" => "cpp",
        "cs" => "csharp",
        "rb" | "rake" | "gemspec" => "ruby",
        "php" | "phtml" => "php",
        "sh" | "bash" | "zsh" | "ksh" => "bash",
        "md" | "markdown" | "mdx" => "markdown",
        "kt" | "kts" => "kotlin",
        "scala" | "sc" => "scala",
        "swift" => "swift",
        "lua" => "lua",
        "m" => "objc",
        "ex" | "exs" => "elixir",
        "erl" | "hrl" => "erlang",
        "hs" => "haskell",
        "ml" | "mli" => "ocaml",
        "clj" | "cljs" | "cljc" => "clojure",
        "dart" => "dart",
        "zig" => "zig",
        "r" => "r",
        "jl" => "julia",
        "pl" | "pm" => "perl",
        "sql" => "sql",
        "proto" => "proto",
        "html" | "htm" => "html",
        "css" | "scss" | "less" => "css",
        "vue" => "vue",
        "svelte" => "svelte",
        "json" => "json",
        "yaml" | "yml" => "yaml",
        "toml" => "toml",
        "xml" => "xml",
        "tf" | "hcl" => "hcl",
        "cmake" => "cmake",
        "mk" => "make",
        "rst" => "rst",
        "txt" | "text" => "text",
        _ => return None,
    })
}

fn by_shebang(head: &[u8]) -> Option<&'static str> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let mut prog = words.next()?.rsplit('/').next()?;
    if prog == "env" {
        prog = words.find(|w| !w.starts_with('-'))?;
    }
    let prog = prog.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match prog {
        "python" | "pypy" => "python",
        "bash" | "sh" | "zsh" | "dash" | "ksh" => "bash",
        "node" | "nodejs" | "deno" | "bun" => "javascript",
        "ruby" => "ruby",
        "php" => "php",
        "perl" => "perl",
        "lua" | "luajit" => "lua",
        "ts-node" => "typescript",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::detect;

    #[test]
    fn extensions_names_and_shebangs() {
        for (path, head, want) in [
            ("src/app.py", "", Some("python")),
            ("lib.rs", "", Some("rust")),
            ("a/B.java", "", Some("java")),
            ("x.tsx", "", Some("tsx")),
            ("x.TS", "", Some("typescript")),
            ("x.jsx", "", Some("javascript")),
            ("x.hpp", "", Some("cpp")),
            ("x.h", "", Some("c")),
            ("x.cs", "", Some("csharp")),
            ("README.md", "", Some("markdown")),
            ("Makefile", "", Some("make")),
            ("Rakefile", "", Some("ruby")),
            ("bin/tool", "#!/usr/bin/env python3\n", Some("python")),
            ("bin/run", "#!/bin/bash -e\n", Some("bash")),
            (
                "bin/x",
                "#!/usr/bin/env -S node --harmony\n",
                Some("javascript"),
            ),
            ("bin/x", "no shebang", None),
            ("weird.xyz", "", None),
            // The long tail, named by tree-sitter-language-pack.
            ("src/Main.elm", "", Some("elm")),
            ("default.nix", "", Some("nix")),
            ("notes.txt", "", Some("text")),
        ] {
            assert_eq!(detect(path, head.as_bytes()), want, "{path}");
        }
    }
}
