//! Robustness and property tests: every case finishes, is counted, and keeps the invariants.

#![allow(clippy::format_collect)] // building test inputs

use proptest::prelude::*;

use crate::check::invariants;
use crate::{Kind, Note, Options, Strategy, chunk};

fn run(lang: &str, src: &str, opts: &Options) -> crate::Chunked {
    let c = chunk("x", Some(lang), src, Strategy::Ast, opts);
    invariants(src, &c, opts.ceiling).unwrap_or_else(|e| panic!("{lang}: {e}"));
    c
}

#[test]
fn syntax_errors_still_yield_definitions() {
    let src = "def ok():\n    return 1\n\ndef broken(:\n    return (\n\nclass C:\n    def m(self): pass\n";
    let c = run("python", src, &Options::default());
    assert!(c.notes.contains(&Note::SyntaxErrors));
    assert!(c.pieces.iter().any(|p| p.symbol.as_deref() == Some("ok")));
}

#[test]
fn nesting_ten_thousand_levels_deep_never_overflows_the_stack() {
    let depth = 10_000;
    let c_src = format!(
        "void f(void) {{ {} x = 1; {} }}\n",
        "{".repeat(depth),
        "}".repeat(depth)
    );
    let opts = Options::default();
    let c = run("c", &c_src, &opts);
    assert!(!c.pieces.is_empty());
    let py = format!("x = {}1{}\n", "(".repeat(depth), ")".repeat(depth));
    run("python", &py, &opts);
    let js = format!("const a = {}0{};\n", "[".repeat(depth), "]".repeat(depth));
    run("javascript", &js, &opts);
    // Classes nested deeper than the depth limit are split as plain code, and counted.
    let mut nested = String::new();
    for i in 0..200 {
        nested.push_str(&format!("{}class C{i}:\n", "  ".repeat(i)));
    }
    nested.push_str(&format!("{}pass\n", "  ".repeat(200)));
    let opts = Options {
        ceiling: 300,
        ..Options::default()
    };
    let c = run("python", &nested, &opts);
    assert!(c.notes.contains(&Note::DepthLimit), "{:?}", c.notes);
}

#[test]
fn a_five_megabyte_line_finishes_and_is_cut() {
    let line = "var a=1;".repeat(5 * 1024 * 1024 / 8);
    let c = run("javascript", &line, &Options::default());
    assert!(c.pieces.len() > 2000);
    let text = "x".repeat(5 * 1024 * 1024);
    let c = run("text", &text, &Options::default());
    assert!(c.notes.contains(&Note::OversizeLine));
}

#[test]
fn a_hundred_thousand_tiny_functions_finish() {
    let src: String = (0..100_000)
        .map(|i| format!("def f{i}(): pass\n"))
        .collect();
    let c = run("python", &src, &Options::default());
    let functions = c.pieces.iter().filter(|p| p.kind == Kind::Function).count();
    assert_eq!(functions, 100_000);
}

#[test]
fn a_parse_over_its_time_budget_falls_back_to_text_with_a_reason() {
    let src: String = (0..20_000)
        .map(|i| format!("def f{i}(x):\n    return x + {i}\n"))
        .collect();
    let opts = Options {
        parse_timeout: std::time::Duration::ZERO,
        ..Options::default()
    };
    let c = run("python", &src, &opts);
    assert_eq!(c.notes, [Note::ParseTimeout]);
    assert!(c.pieces.iter().all(|p| p.kind == Kind::Text));
}

#[test]
fn unknown_languages_fall_back_to_paragraphs_with_a_reason() {
    let c = chunk(
        "x.zig",
        Some("zig"),
        "const a = 1;\n\nconst b = 2;\n",
        Strategy::Ast,
        &Options::default(),
    );
    assert_eq!(c.notes, [Note::NoGrammar]);
    assert_eq!(c.pieces[0].kind, Kind::Text);
}

#[test]
fn a_long_go_function_is_cut_between_statements_with_its_signature_in_the_first_part() {
    // Go's grammar holds a block's statements in one `statement_list` node: cut at that
    // node's start, the first part was the comment and signature alone and the rest was cut
    // at line ends.
    let body: String = (0..120)
        .map(|i| format!("\tif n > {i} {{\n\t\tfmt.Fprintf(w, \"step {i} of %s\", name)\n\t}}\n"))
        .collect();
    let src = format!(
        "package main\n\n// run writes every step.\nfunc run(w io.Writer, n int) error {{\n{body}\treturn nil\n}}\n"
    );
    let c = run("go", &src, &Options::default());
    let parts: Vec<&crate::Piece> = c
        .pieces
        .iter()
        .filter(|p| p.symbol.as_deref() == Some("run"))
        .collect();
    assert!(parts.len() > 1, "{parts:?}");
    let first = &parts[0].text;
    assert!(
        first.starts_with("// run writes every step.\nfunc run(") && first.contains("step 0 of"),
        "the first part holds the comment, the signature and the first statements: {first}"
    );
    for p in &parts {
        let t = p.text.trim_end();
        assert!(
            t.ends_with('}') || t.ends_with("return nil"),
            "each part ends where a statement does: {t}"
        );
    }
    for p in &parts[..parts.len() - 1] {
        assert!(
            p.text.len() > Options::default().ceiling / 2,
            "parts are packed, not cut line by line: {}",
            p.text.len()
        );
    }
}

#[test]
fn an_oversize_docstring_is_cut_between_its_paragraphs() {
    // One statement with no place to cut inside it: the lines are chosen, not filled.
    let para = |i: usize| {
        (0..6)
            .map(|j| {
                format!("    Paragraph {i} line {j} explains one more thing about the call.\n")
            })
            .collect::<String>()
    };
    let doc: String = (0..12).map(|i| para(i) + "\n").collect();
    let src = format!("def run(x):\n    \"\"\"Runs.\n\n{doc}    \"\"\"\n    return x\n");
    let c = run("python", &src, &Options::default());
    let parts: Vec<&crate::Piece> = c.pieces.iter().filter(|p| p.part.is_some()).collect();
    assert!(parts.len() > 1, "{parts:?}");
    assert!(
        parts[0].text.starts_with("def run(x):\n    \"\"\"Runs.\n"),
        "the signature is not a part of its own: {}",
        parts[0].text
    );
    for p in parts[1..].iter().filter(|p| p.text.contains("Paragraph")) {
        let first = p.text.lines().next().unwrap_or("");
        assert!(
            first.starts_with("Paragraph ") && first.contains(" line 0 "),
            "each part begins a paragraph: {}",
            p.text
        );
    }
}

#[test]
fn an_oversize_literal_is_cut_between_its_entries() {
    let entry = |i: usize| {
        format!(
            "    'key{i}': {{\n        'name': 'entry number {i}',\n        'value': {i},\n        'help': 'what entry {i} is for',\n    }},\n"
        )
    };
    let body: String = (0..60).map(entry).collect();
    let src = format!("TABLE = {{\n{body}}}\n");
    let c = run("python", &src, &Options::default());
    let pieces: Vec<&crate::Piece> = c.pieces.iter().filter(|p| p.kind == Kind::Code).collect();
    assert!(pieces.len() > 1, "{pieces:?}");
    for p in &pieces[1..] {
        assert!(
            p.text.starts_with("'key"),
            "each piece begins an entry: {}",
            p.text
        );
    }
}

#[test]
fn a_comment_above_a_statement_stays_with_it_when_a_function_is_cut() {
    // Statements of ~100 bytes, each with a comment right above it (and a Rust attribute):
    // wherever the function is cut, no part ends with the comment meant for the next one.
    let step = |i: usize| {
        format!(
            "    // Step {i}: fold the running total into the sink, then report it.\n    #[allow(unused)]\n    let total_{i} = sink.fold(total, |acc, item| acc + item * {i});\n\n"
        )
    };
    let body: String = (0..40).map(step).collect();
    let src = format!("fn run(sink: &Sink) -> u64 {{\n    let total = 0;\n\n{body}    total\n}}\n");
    let c = run("rust", &src, &Options::default());
    let parts: Vec<&crate::Piece> = c
        .pieces
        .iter()
        .filter(|p| p.kind == Kind::Function)
        .collect();
    assert!(parts.len() > 1, "{parts:?}");
    for p in &parts {
        let last = p.text.trim_end().lines().last().unwrap_or("").trim();
        assert!(
            !last.starts_with("//") && !last.starts_with("#["),
            "a part ends with what belongs to the next: {last:?}"
        );
    }
    for p in &parts[1..] {
        assert!(p.text.starts_with("// Step"), "{}", p.text);
    }
}

#[test]
fn a_long_struct_is_cut_before_a_field_not_before_its_comma() {
    // Wherever the ceiling falls (names of every length), a part begins with a field.
    for pad in 0..40 {
        let field = |i: usize| format!("    pub s{i}_{}: Option<u64>,\n", "x".repeat(pad));
        let fields: String = (0..120).map(field).collect();
        let src = format!("pub struct Settings {{\n{fields}}}\n");
        let c = run("rust", &src, &Options::default());
        let parts: Vec<&crate::Piece> = c
            .pieces
            .iter()
            .filter(|p| p.symbol.as_deref() == Some("Settings"))
            .collect();
        assert!(parts.len() > 1, "{parts:?}");
        for p in &parts[1..] {
            assert!(
                p.text.starts_with("pub s"),
                "pad {pad}: {:?}",
                &p.text[..20]
            );
        }
    }
}

#[test]
fn the_windows_baseline_is_windows() {
    let src = "a".repeat(2500);
    let c = chunk(
        "x.py",
        Some("python"),
        &src,
        Strategy::Windows,
        &Options::default(),
    );
    assert_eq!(c.pieces.len(), 3);
    assert!(c.pieces.iter().all(|p| p.kind == Kind::Window));
}

/// A Python module from a recipe: functions, classes with methods, assignments, comments.
fn python(items: &[(u8, u8)]) -> String {
    let mut s = String::from("import os\n\n");
    for (i, (kind, size)) in items.iter().enumerate() {
        let body: String = (0..*size)
            .map(|j| format!("    v{j} = os.getenv('K{j}')\n"))
            .collect();
        match kind % 4 {
            0 => s.push_str(&format!("def f{i}(a, b):\n{body}    return a\n\n")),
            1 => s.push_str(&format!(
                "class C{i}:\n    \"\"\"Doc.\"\"\"\n    x = 1\n\n    def m(self):\n    {}\n        return 1\n\n    def n(self):\n        return 2\n\n",
                body.replace('\n', "\n    ")
            )),
            2 => s.push_str(&format!("X{i} = {}\n\n", *size as usize * 7)),
            _ => s.push_str(&format!("# comment {i}\n@decorator\ndef g{i}():\n{body}    pass\n\n")),
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn chunking_is_deterministic_and_keeps_the_invariants(
        items in proptest::collection::vec((0u8..4, 0u8..40), 1..20),
        ceiling in 150usize..2500,
    ) {
        let src = python(&items);
        let opts = Options { ceiling, floor: ceiling / 10, ..Options::default() };
        let a = run("python", &src, &opts);
        let b = run("python", &src, &opts);
        prop_assert_eq!(a.pieces, b.pieces);
    }

    #[test]
    fn ids_are_stable_when_a_line_is_inserted_elsewhere(
        items in proptest::collection::vec((0u8..4, 0u8..10), 2..12),
        at in 0usize..12,
    ) {
        use crate::records::{Source, to_records};
        let repo = trawl_core::RepoId::parse("github.com/a/b").unwrap();
        let blob: trawl_core::BlobId = "0".repeat(40).parse().unwrap();
        let src_a = python(&items);
        // Insert a comment line before the item at `at`.
        let mut tops: Vec<usize> = src_a.match_indices("\n\n").map(|(i, _)| i + 2).collect();
        tops.retain(|&i| i < src_a.len());
        let pos = tops[at % tops.len()];
        let src_b = format!("{}# an inserted line\n{}", &src_a[..pos], &src_a[pos..]);
        let ids = |src: &str| {
            let c = run("python", src, &Options::default());
            let s = Source { repo: &repo, path: "m.py", blob: &blob, language: "python" };
            to_records(&s, &c, src)
                .into_iter()
                .filter(|r| r.symbol.is_some() && r.kind != crate::Kind::Toc)
                .map(|r| (r.qualified_name.clone().unwrap(), r.kind, r.chunk_id))
                .collect::<std::collections::BTreeSet<_>>()
        };
        prop_assert_eq!(ids(&src_a), ids(&src_b));
    }

    #[test]
    fn arbitrary_text_in_any_language_never_breaks_the_invariants(
        src in "[ -~\n\t\u{e9}\u{4e2d}{}()\\[\\];:#]{0,600}",
        lang in proptest::sample::select(vec![
            "python", "rust", "go", "java", "javascript", "typescript", "tsx", "c", "cpp",
            "csharp", "ruby", "php", "bash", "lua", "markdown", "text",
        ]),
        ceiling in 64usize..400,
    ) {
        let opts = Options { ceiling, floor: ceiling / 8, ..Options::default() };
        let c = chunk("x", Some(lang), &src, Strategy::Ast, &opts);
        if let Err(e) = invariants(&src, &c, ceiling) {
            prop_assert!(false, "{}: {}", lang, e);
        }
    }
}

/// Replays every input the fuzzer ever found (`fuzz/regressions/`), as the fuzz target does.
#[test]
fn fuzz_regressions_keep_the_invariants() {
    const LANGUAGES: &[&str] = &[
        "python",
        "rust",
        "go",
        "java",
        "javascript",
        "typescript",
        "tsx",
        "c",
        "cpp",
        "csharp",
        "ruby",
        "php",
        "bash",
        "lua",
        "markdown",
        "text",
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let data = std::fs::read(entry.path()).unwrap();
        let Some((&selector, rest)) = data.split_first() else {
            continue;
        };
        let language = LANGUAGES[selector as usize % LANGUAGES.len()];
        let ceiling = 64 + (selector as usize / LANGUAGES.len()) * 64;
        let src = String::from_utf8_lossy(rest);
        let opts = Options {
            ceiling,
            floor: ceiling / 8,
            ..Options::default()
        };
        let c = chunk("fuzz", Some(language), &src, Strategy::Ast, &opts);
        if let Err(e) = invariants(&src, &c, ceiling) {
            for p in &c.pieces {
                eprintln!("{:?} {}..{} {:?}", p.kind, p.start, p.end, p.trail);
            }
            panic!("{}: {language} @ {ceiling}: {e}", entry.path().display());
        }
        n += 1;
    }
    assert!(n > 0);
}
