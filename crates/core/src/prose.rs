//! A definition's prose view: what its code says in words — its kind and name spelled out,
//! its path, its comments and docstrings, the sentences in its string literals and the words
//! of the identifiers it uses. A small sentence model reads a question in words far better
//! against this than against the code itself (`all-MiniLM-L6-v2` was trained on sentences,
//! not on code), so each definition can get a second vector, of its prose view
//! (`embed.prose_view`, off by default), and the vector arm scores it by the nearer of its two.
//!
//! The view's vector is stored like any other, in the same vector space, under the key
//! [`key`] derives from the chunk's content hash: the same text has the same view, so the
//! same key, and the embedding cache and the compactor's join need no other column.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::ids::ContentHash;
use crate::kind::ChunkKind;
use crate::words;

/// Characters of comments and docstrings a view keeps.
const COMMENT_CHARS: usize = 600;
/// Characters of string literals a view keeps.
const STRING_CHARS: usize = 300;
/// Characters of identifier words a view keeps.
const IDENTIFIER_CHARS: usize = 400;

/// Hex digits of a content hash that [`key`] keeps in place: the compactor spreads vectors
/// over buckets by a hash's first two bytes, and a chunk's two vectors must meet in one.
const KEPT_HEX: usize = 4;

/// Words of code that say nothing of what a definition does.
const KEYWORDS: [&str; 49] = [
    "func",
    "function",
    "def",
    "return",
    "if",
    "else",
    "for",
    "while",
    "let",
    "const",
    "var",
    "self",
    "this",
    "true",
    "false",
    "none",
    "null",
    "nil",
    "new",
    "class",
    "struct",
    "impl",
    "pub",
    "fn",
    "mut",
    "use",
    "import",
    "from",
    "async",
    "await",
    "try",
    "catch",
    "except",
    "raise",
    "throw",
    "string",
    "int",
    "bool",
    "err",
    "error",
    "str",
    "type",
    "interface",
    "package",
    "module",
    "exports",
    "require",
    "in",
    "not",
];

static STRING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#""((?:[^"\\\n]|\\.){3,200})"|'((?:[^'\\\n]|\\.){3,200})'|`([^`]{3,200})`"#)
        .expect("a valid pattern")
});
static IDENTIFIER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]{2,}").expect("a valid pattern"));
static COMMENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(?://+!?|#+|/\*+!?|\*+)\s?(.*)$").expect("a valid pattern"));

/// Whether chunks of `kind` get a prose view: code, not prose, a table of contents or a
/// commit message (those are read as they are).
pub fn has_view(kind: ChunkKind) -> bool {
    !matches!(
        kind,
        ChunkKind::Section
            | ChunkKind::Text
            | ChunkKind::Window
            | ChunkKind::Toc
            | ChunkKind::Commit
    )
}

/// The prose view of a chunk of `kind` named `name` (its qualified name, else its symbol) at
/// `path`, whose code is `text`; `None` for a kind that has none ([`has_view`]).
pub fn view(kind: ChunkKind, name: Option<&str>, path: &str, text: &str) -> Option<String> {
    if !has_view(kind) {
        return None;
    }
    let comments: Vec<String> = lines(text)
        .filter_map(|l| match l {
            Line::Comment(c) => Some(c),
            Line::Code(_) => None,
        })
        .collect();
    let strings: Vec<&str> = STRING
        .captures_iter(text)
        .filter_map(|c| c.iter().skip(1).flatten().next())
        .map(|m| m.as_str())
        .filter(|s| s.contains(' ') && has_a_word(s))
        .collect();
    let mut seen: HashSet<String> = HashSet::new();
    let mut identifiers: Vec<String> = Vec::new();
    for m in IDENTIFIER.find_iter(text) {
        let w = spelled(m.as_str());
        if w.is_empty() || KEYWORDS.contains(&w.as_str()) || !seen.insert(w.clone()) {
            continue;
        }
        identifiers.push(w);
    }
    let name = spelled(name.unwrap_or(""));
    let head = if name.is_empty() {
        kind.as_str().to_string()
    } else {
        format!("{} {name}", kind.as_str())
    };
    Some(format!(
        "{head} ({path}). {} {} | {}",
        prefix(&comments.join(" "), COMMENT_CHARS),
        prefix(&strings.join(" "), STRING_CHARS),
        prefix(&identifiers.join(" "), IDENTIFIER_CHARS),
    ))
}

/// A line of a chunk's text, read as a comment (its words, without the marker) or as code.
enum Line<'a> {
    Comment(String),
    Code(&'a str),
}

/// `text`'s lines, each a comment (a line comment, a block comment's line, a docstring's;
/// a Rust attribute reads as one) or code; blank lines outside a docstring and empty
/// comment lines are left out.
fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    let mut in_docstring = false;
    text.lines().filter_map(move |line| {
        let s = line.trim();
        let quotes = s.matches("\"\"\"").count() + s.matches("'''").count();
        if quotes > 0 {
            if quotes == 1 {
                in_docstring = !in_docstring;
            }
            let inner = s.replace("\"\"\"", "").replace("'''", "");
            let inner = inner.trim();
            return (!inner.is_empty()).then(|| Line::Comment(inner.to_string()));
        }
        if in_docstring {
            return Some(Line::Comment(s.to_string()));
        }
        if let Some(c) = COMMENT.captures(line).and_then(|c| c.get(1)) {
            let c = c
                .as_str()
                .trim()
                .trim_end_matches('/')
                .trim_end_matches('*')
                .trim();
            return (!c.is_empty() && !c.starts_with('!')).then(|| Line::Comment(c.to_string()));
        }
        (!s.is_empty()).then_some(Line::Code(line))
    })
}

/// The lines of `text` that are code: neither blank nor comments nor docstrings, as a line
/// reads alone (a line that opens with `*` or `#` reads as a comment, one with `"""` as a
/// docstring's).
pub fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    lines(text).filter_map(|l| match l {
        Line::Code(c) => Some(c),
        Line::Comment(_) => None,
    })
}

/// The key a chunk's prose vector is stored under: its content hash with every hex digit
/// after the first [`KEPT_HEX`] in reverse order — a key no other text's hash takes (but by
/// a 2⁻¹²⁸ chance), computed in SQL by the compactor as [`key_sql`]. `None` when the
/// reversal gives the hash itself (a palindromic tail: that chunk has no prose vector).
pub fn key(content_hash: &ContentHash) -> Option<ContentHash> {
    let hex = content_hash.to_hex();
    let (kept, tail) = hex.split_at(KEPT_HEX);
    let reversed: String = tail.chars().rev().collect();
    if reversed == tail {
        return None;
    }
    ContentHash::try_from(format!("{kept}{reversed}")).ok()
}

/// [`key`] as a SQL expression over the hex column `column`.
pub fn key_sql(column: &str) -> String {
    format!(
        "concat(substr({column}, 1, {KEPT_HEX}), reverse(substr({column}, {})))",
        KEPT_HEX + 1
    )
}

/// `ident` spelled as lower-case words (`parseHTTPResponse` → `parse http response`).
fn spelled(ident: &str) -> String {
    let mut out = String::new();
    for token in ident.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        for (a, b) in words::parts(token) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&token[a..b].to_lowercase());
        }
    }
    out
}

/// Whether `s` holds a word of three letters or more.
fn has_a_word(s: &str) -> bool {
    let mut run = 0;
    for c in s.chars() {
        if c.is_ascii_alphabetic() {
            run += 1;
            if run >= 3 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// The first `n` characters of `s`.
fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash;

    #[test]
    fn a_function_is_read_as_its_name_comments_messages_and_words() {
        let text = "// SuggestionsFor provides suggestions for the typedName.\n\
                    func (c *Command) SuggestionsFor(typedName string) []string {\n\
                    \tlevenshteinDistance := ld(typedName, cmd.Name(), true)\n\
                    \tsb.WriteString(\"\\n\\nDid you mean this?\\n\")\n\
                    }";
        let v = view(
            ChunkKind::Method,
            Some("Command.SuggestionsFor"),
            "command.go",
            text,
        )
        .unwrap();
        assert!(
            v.starts_with("method command suggestions for (command.go). "),
            "{v}"
        );
        assert!(
            v.contains("SuggestionsFor provides suggestions for the typedName."),
            "{v}"
        );
        assert!(v.contains("Did you mean this?"), "{v}");
        assert!(v.contains("levenshtein distance"), "{v}");
        assert!(v.contains("typed name"), "{v}");
        // Words of the language are not the definition's words.
        assert!(!v.contains("| func "), "{v}");
        let words = v.split(" | ").nth(1).unwrap();
        assert!(!words.split(' ').any(|w| w == "true" || w == "func"), "{v}");
    }

    #[test]
    fn a_docstring_and_hash_comments_are_read() {
        let text = "def resolve(ctx):\n    \"\"\"Return the value from the environment,\n    then the default map.\n    \"\"\"\n    # a prompt comes last\n    return x\n";
        let v = view(ChunkKind::Function, Some("resolve"), "core.py", text).unwrap();
        assert!(v.contains("Return the value from the environment,"), "{v}");
        assert!(v.contains("then the default map."), "{v}");
        assert!(v.contains("a prompt comes last"), "{v}");
        // A one-line docstring opens and closes on its line.
        let one = "def f():\n    \"\"\"Do it.\"\"\"\n    return answer_value\n";
        let v = view(ChunkKind::Function, Some("f"), "a.py", one).unwrap();
        assert!(v.contains("Do it."), "{v}");
        assert!(v.contains("| answer value"), "{v}");
    }

    #[test]
    fn prose_and_commits_have_no_view() {
        for kind in [
            ChunkKind::Section,
            ChunkKind::Text,
            ChunkKind::Window,
            ChunkKind::Toc,
            ChunkKind::Commit,
        ] {
            assert_eq!(view(kind, None, "README.md", "# Title\n\nwords"), None);
        }
        assert!(view(ChunkKind::Code, None, "app.js", "module.exports = app;").is_some());
    }

    #[test]
    fn a_view_is_bounded_however_long_the_code() {
        let text =
            "// a comment line with words\nlet someIdentifierName = \"a string with words\";\n"
                .repeat(2_000);
        let v = view(ChunkKind::Function, Some("f"), "x.js", &text).unwrap();
        assert!(v.chars().count() < 1_400, "{}", v.len());
    }

    #[test]
    fn the_prose_key_is_another_hash_in_the_same_bucket_and_sql_computes_it() {
        let h = hash::content_hash("1", "h", "def run(): pass");
        let k = key(&h).unwrap();
        assert_ne!(k, h);
        assert_eq!(k.as_bytes()[..2], h.as_bytes()[..2]);
        // The reversal undone gives the hash back.
        assert_eq!(key(&k), Some(h));
        let palindrome = ContentHash::try_from(format!("abcd{}", "0".repeat(28))).unwrap();
        assert_eq!(key(&palindrome), None);
        assert_eq!(
            key_sql("c.content_hash"),
            "concat(substr(c.content_hash, 1, 4), reverse(substr(c.content_hash, 5)))"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_code_gives_a_view_that_names_its_kind(text in "\\PC{0,400}", name in "[A-Za-z_]{0,20}") {
            let v = view(ChunkKind::Function, Some(&name), "f.rs", &text).unwrap();
            proptest::prop_assert!(v.starts_with("function"));
            proptest::prop_assert!(v.chars().count() < 1_500);
        }
    }
}
