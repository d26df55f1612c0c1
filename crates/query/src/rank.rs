//! Ranking that knows what is asked: the query's intent picks the arms' weights, a pasted
//! error message meets the format string that produced it, a file's role (implementation,
//! test, example, docs) is a prior, prose lends its evidence to the definitions it names, and
//! a chunk that covers a whole file or class gives way to the member that answers.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use trawl_core::ChunkKind;
use trawl_core::config::QueryConfig;
use trawl_core::ids::RepoId;
pub use trawl_core::role::{Role, role};
use trawl_index::docs::DocRow;

use crate::index::{is_definition, normalize_symbol};

/// What a query asks for, judged from its text alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// One identifier: `parse_args`, `HTTPConnection.request`, `os::path`.
    Identifier,
    /// A pasted error, log or panic line: `error: unknown option '--verbos'`.
    Error,
    /// A configuration key, flag or environment variable, maybe with a few words:
    /// `RUST_LOG_STYLE`, `--no-color`, `auto_envvar_prefix option`.
    Config,
    /// A question or description in words.
    Natural,
}

impl Intent {
    pub fn as_str(self) -> &'static str {
        match self {
            Intent::Identifier => "identifier",
            Intent::Error => "error",
            Intent::Config => "config",
            Intent::Natural => "natural",
        }
    }

    /// What the query asks for: docs when a question names them, code or docs alike when a
    /// question is asked as a user of the code, code otherwise.
    pub fn wants(self, query: &str) -> Wants {
        if self != Intent::Natural {
            Wants::Code
        } else if asks_for_docs(query) {
            Wants::Docs
        } else if asks_as_user(query) {
            Wants::Usage
        } else {
            Wants::Code
        }
    }
}

/// What a query asks for, which sets the role prior.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    /// The implementation: tests, examples and docs weigh less.
    Code,
    /// Documentation (`where is the install guide`): the rest weighs less.
    Docs,
    /// How to use the code (`how can I …`, `my command …`): the implementation and the docs
    /// both answer; docs weigh `usage_docs_prior`.
    Usage,
}

/// Whether a query looks like an identifier: one token with a separator or a case change
/// (`parse_args`, `HTTPConnection.request`, `os::path`, `getLogger()`).
pub fn identifier_like(q: &str) -> bool {
    let t = q.trim();
    if t.is_empty()
        || t.contains(char::is_whitespace)
        || !t
            .chars()
            .all(|c| c.is_alphanumeric() || "_.:#->()$".contains(c))
    {
        return false;
    }
    let b = t.as_bytes();
    let case_change = b
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
        || (b[0].is_ascii_uppercase() && b.iter().skip(1).any(u8::is_ascii_lowercase));
    t.contains('_') || t.contains("::") || t.contains('.') || t.ends_with("()") || case_change
}

/// `RUST_LOG`, `NODE_ENV`, `COBRA_ENABLE_COLOR`: capitals and digits with an underscore.
fn env_var_like(t: &str) -> bool {
    let t = t.trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
    t.len() >= 4
        && t.contains('_')
        && t.starts_with(|c: char| c.is_ascii_uppercase())
        && t.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `--no-color`, `-v`.
fn flag_like(t: &str) -> bool {
    t.strip_prefix("--")
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_alphabetic()))
}

const QUESTION_WORDS: [&str; 14] = [
    "how", "where", "what", "which", "why", "when", "who", "is", "are", "does", "do", "can",
    "should", "find",
];

const ERROR_OPENINGS: [&str; 12] = [
    "error",
    "err",
    "fatal",
    "panic",
    "warning",
    "warn",
    "exception",
    "traceback",
    "thread '",
    "uncaught",
    "typeerror",
    "failed",
];

/// The intent of a query.
/// Whether a query is a question: it opens with a question word (`how`, `why`, `does`) or
/// ends with a question mark.
pub fn is_question(query: &str) -> bool {
    let t = query.trim();
    let words: Vec<&str> = t.split_whitespace().collect();
    opens_with_question_word(&words) || t.ends_with('?')
}

fn opens_with_question_word(words: &[&str]) -> bool {
    words.first().is_some_and(|w| {
        let first = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        QUESTION_WORDS.contains(&first.as_str())
    })
}

pub fn classify(query: &str) -> Intent {
    let t = query.trim();
    let words: Vec<&str> = t.split_whitespace().collect();
    if words.is_empty() {
        return Intent::Natural;
    }
    if words.len() == 1 {
        // `RUST_LOG_STYLE=always`, `--color=never`: a setting with its value.
        let w = words[0].split_once('=').map_or(words[0], |(k, _)| k);
        if env_var_like(w) || flag_like(w) || (w.len() < words[0].len() && identifier_like(w)) {
            return Intent::Config;
        }
        if identifier_like(w) {
            return Intent::Identifier;
        }
    }
    let lower = t.to_lowercase();
    let asks = opens_with_question_word(&words);
    let question = asks || t.ends_with('?');
    // `errorKey: 'error'`, `maxRate: [100 * 1024]`, `timeout: 5000`: a setting written as
    // in a configuration file, with its value.
    if words.len() <= 4
        && let Some(key) = words[0].strip_suffix(':')
        && !exception_name(key)
        && !ERROR_OPENINGS.contains(&key.to_lowercase().as_str())
        && (identifier_like(key) || (key.len() >= 3 && key.chars().all(|c| c.is_ascii_lowercase())))
        && literal_value(words[1])
    {
        return Intent::Config;
    }
    let opens_as_error = ERROR_OPENINGS.iter().any(|o| lower.starts_with(o))
        || words[0].ends_with("Error:")
        || words[0].ends_with("Exception:")
        // `requests.exceptions.MissingSchema: Invalid URL …`, `AssertionError [ERR_…]: …`
        || (words[0].strip_suffix(':').is_some_and(exception_name) && words.len() >= 2)
        || (exception_name(words[0]) && t.contains(": "))
        // A program's name before its message: `rg: unrecognized flag --colour`.
        || (words.len() >= 3
            && !literal_value(words[1])
            && !QUESTION_WORDS.contains(&words[1].to_lowercase().as_str())
            && words[0].len() <= 21
            && words[0].strip_suffix(':').is_some_and(|p| {
                p.len() >= 2
                    && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            }));
    // A message may end in a question of its own: `Error: No such option '--verbos'. Did
    // you mean '--verbose'?`.
    if !asks && opens_as_error && (words[0].ends_with(':') || t.contains(['\'', '"', '`'])) {
        return Intent::Error;
    }
    if !question {
        let says_error = lower.contains("error:")
            || lower.contains("exception:")
            || lower.contains("panicked at")
            || lower.contains("traceback (most recent call last)");
        // A sentence with a colon and a concrete value (a number or a quoted string) reads
        // as a message: `invalid port 70000: must be between 1 and 65535`.
        let quoted = words.iter().any(|w| {
            let w = w.trim_end_matches([',', '.', ':', ';']);
            w.len() >= 3
                && ['"', '\'', '`']
                    .iter()
                    .any(|&q| w.starts_with(q) && w.ends_with(q))
        });
        let valued = (t.contains(':')
            && (t.chars().any(|c| c.is_ascii_digit()) || t.contains(['"', '\'', '`']))
            && words.len() >= 3)
            || (quoted && words.len() >= 4);
        if opens_as_error || says_error || valued {
            return Intent::Error;
        }
    }
    if words.len() <= 4
        && !question
        && words
            .iter()
            .any(|w| env_var_like(w) || flag_like(w) || identifier_like(w))
    {
        return Intent::Config;
    }
    if words.len() == 1 {
        // One plain word (`retry`): as good as a name.
        return Intent::Identifier;
    }
    Intent::Natural
}

/// Whether `w` names an exception or error type as a traceback prints it: `KeyError`,
/// `TemplateNotFound`, `requests.exceptions.MissingSchema` (a name in PascalCase, dotted, or
/// ending in `Error`, `Exception`, `Warning`).
fn exception_name(w: &str) -> bool {
    let last = w.rsplit('.').next().unwrap_or(w);
    let pascal = last.starts_with(|c: char| c.is_ascii_uppercase())
        && last.chars().all(|c| c.is_ascii_alphanumeric())
        && last.chars().any(|c| c.is_ascii_lowercase());
    let typed = ["Error", "Exception", "Warning"]
        .iter()
        .any(|s| last.len() > s.len() && last.ends_with(s));
    let dotted = w.contains('.')
        && w.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    pascal && (typed || dotted)
}

/// Whether a word is a literal value as a configuration writes one: a number, a quoted
/// string, a list or a map, `true`, `false`, `null`.
fn literal_value(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_digit() || "'\"`[{".contains(c))
        || w.strip_prefix('-')
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        || matches!(
            w.trim_end_matches([',', ';']),
            "true" | "false" | "null" | "None" | "True" | "False" | "nil"
        )
}

/// The words the lexical arm searches for a pasted message: its concrete numbers dropped
/// (`port 70000` was `port %d` in the code that printed it; a test asserting the message
/// is the only place the number is written).
pub fn lexical_text(query: &str, intent: Intent) -> std::borrow::Cow<'_, str> {
    if intent != Intent::Error {
        return query.into();
    }
    query
        .split_whitespace()
        .filter(|w| {
            let t = w.trim_matches(|c: char| !c.is_alphanumeric());
            t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
        .collect::<Vec<_>>()
        .join(" ")
        .into()
}

/// Whether a question asks for documentation rather than code.
pub fn asks_for_docs(query: &str) -> bool {
    const WORDS: [&str; 11] = [
        "docs",
        "doc",
        "documentation",
        "documented",
        "readme",
        "guide",
        "tutorial",
        "changelog",
        "faq",
        "install",
        "installation",
    ];
    query
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| WORDS.contains(&w.to_lowercase().as_str()))
}

/// Whether a question is asked as a user of the code rather than about how it works: it
/// speaks in the first person (`how can I …`, `my command ignores …`, `as a user, …`).
pub fn asks_as_user(query: &str) -> bool {
    const WORDS: [&str; 8] = ["i", "my", "me", "mine", "myself", "we", "our", "us"];
    let lower = query.to_lowercase();
    lower.contains("as a user")
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| WORDS.contains(&w))
}

/// Whether a question asks why or when code changed (`why was the retry removed`, `when was
/// the pool added`, `which commit changed the parser`): commit messages then compete with
/// code on equal terms instead of as prose.
pub fn asks_for_history(query: &str) -> bool {
    const WORDS: [&str; 6] = [
        "commit",
        "commits",
        "history",
        "changelog",
        "regression",
        "reverted",
    ];
    const PHRASES: [&str; 16] = [
        "when was",
        "when were",
        "which change",
        "what change",
        "which pull request",
        "which release",
        "which version",
        "since when",
        "since which",
        "who changed",
        "was removed",
        "were removed",
        "was added",
        "was changed",
        "was introduced",
        "got removed",
    ];
    let lower = query.trim().to_lowercase();
    lower.starts_with("why ")
        || PHRASES.iter().any(|p| lower.contains(p))
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| WORDS.contains(&w))
}

/// Whether a question asks about a change itself (`why does the error now list the extra
/// arguments`, `which commit added the example`, `when was the pool added`), not only why
/// code behaves as it does (`why aren't my debug logs reaching the transport`): a question
/// that [`asks_for_history`] other than by its first word, or a "why" that says something
/// changed.
pub fn asks_about_a_change(query: &str) -> bool {
    const CHANGED: [&str; 16] = [
        "now",
        "no longer",
        "anymore",
        "any more",
        "stop",
        "stopped",
        "started",
        "changed",
        "used to",
        "since",
        "removed",
        "renamed",
        "dropped",
        "deprecated",
        "switched",
        "introduced",
    ];
    let lower = query.trim().to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let says_changed = CHANGED.iter().any(|c| {
        let c: Vec<&str> = c.split(' ').collect();
        words.windows(c.len()).any(|w| w == c.as_slice())
    });
    let without_why = lower.strip_prefix("why ").unwrap_or(&lower);
    asks_for_history(without_why) || (lower.starts_with("why ") && says_changed)
}

/// Whether a question asks who calls a definition (`who calls parse_args`, `where is
/// Client.retry used`, `callers of retry`): the definition's callers then join the answers.
pub fn asks_for_callers(query: &str) -> bool {
    const PHRASES: [&str; 12] = [
        "who calls",
        "what calls",
        "which functions call",
        "which function calls",
        "which methods call",
        "which method calls",
        "callers of",
        "call sites of",
        "call site of",
        "usages of",
        "uses of",
        "who uses",
    ];
    let lower = query.trim().to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .collect();
    PHRASES.iter().any(|p| lower.contains(p))
        || (matches!(words.first(), Some(&"where"))
            && words
                .iter()
                .any(|w| matches!(*w, "called" | "used" | "invoked")))
}

/// The identifiers a question names (`_build_prompt`, `Client.retry`, `mergeHeaders()`),
/// with backticks, quotes and trailing punctuation taken off, in the order written.
pub fn named_identifiers(query: &str) -> Vec<String> {
    query
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| "`'\"“”‘’".contains(c))
                .trim_end_matches(['?', ',', ';', '!', ':'])
                .trim_end_matches('.')
                .trim_matches(|c: char| "`'\"".contains(c))
        })
        .filter(|w| identifier_like(w))
        .map(str::to_owned)
        .collect()
}

/// Whether a definition's name says it is a test: a member of a `tests` module (Rust's
/// `#[cfg(test)] mod tests`), `test_*` (Python, Rust), `Test*` (Go).
fn test_name(qualified: Option<&str>) -> bool {
    let Some(q) = qualified else {
        return false;
    };
    let q = q.replace("::", ".");
    let last = q.rsplit('.').next().unwrap_or(&q);
    q.starts_with("tests.")
        || q.contains(".tests.")
        || last.starts_with("test_")
        || (last.starts_with("Test") && last[4..].starts_with(|c: char| c.is_ascii_uppercase()))
}

/// The role of a chunk: from its file's path, its kind and its name.
pub fn chunk_role(d: &DocRow) -> Role {
    match role(&d.path, d.kind) {
        Role::Implementation if test_name(d.qualified_name.as_deref()) => Role::Test,
        r => r,
    }
}

/// The prior of a chunk for a query of `intent`: below 1 for what the query does not ask
/// for. A config query weighs documentation (and commit messages) by its own prior.
pub fn prior(d: &DocRow, intent: Intent, wants: Wants, history: bool, params: &QueryConfig) -> f64 {
    let docs_prior = if intent == Intent::Config {
        params.config_docs_prior
    } else {
        params.docs_prior
    };
    let role = chunk_role(d);
    let mut p = match (role, wants) {
        // Commit messages are prose: they compete as docs unless the question asks why or
        // when something changed.
        (Role::Generated, _) => params.generated_prior,
        (Role::History, _) if history => params.history_prior,
        (Role::History | Role::Docs, Wants::Docs)
        | (Role::Implementation, Wants::Code | Wants::Usage) => 1.0,
        (Role::History, _) | (Role::Docs, Wants::Code) => docs_prior,
        (Role::Test | Role::Example, Wants::Code | Wants::Usage) => params.test_prior,
        (Role::Docs, Wants::Usage) => params.usage_docs_prior,
        (_, Wants::Docs) => docs_prior.max(params.test_prior).sqrt(),
    };
    if is_wide(d.kind) {
        p *= params.wide_prior;
    } else if d.kind == ChunkKind::Code && wants != Wants::Docs {
        p *= params.module_prior;
    }
    p
}

/// Chunks that cover a whole file or a whole container's outline.
pub fn is_wide(kind: ChunkKind) -> bool {
    matches!(kind, ChunkKind::Toc | ChunkKind::ClassSkeleton)
}

/// The placeholders of format strings, in every language's spelling: `%d`, `%-5.2f`, `%q`,
/// `%ld`, `%(name)s`, `{}`, `{0}`, `{name!r}`, `{:?}`, `${x}`, `#{x}`. A literal is cut into
/// the fixed parts between them (each collapsed, with two letters or digits at least).
fn fixed_parts(lit: &str) -> Vec<String> {
    let (pieces, _) = format_pieces(lit);
    pieces
        .split(|p| *p == Piece::Any)
        .map(|run| {
            collapse(
                &run.iter()
                    .map(|p| match p {
                        Piece::Text(c) => *c,
                        Piece::Any => ' ',
                    })
                    .collect::<String>(),
            )
        })
        .filter(|t| t.chars().filter(|c| c.is_alphanumeric()).count() >= 2)
        .collect()
}

/// Lowercased, whitespace runs made one space, trimmed.
fn collapse(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The string literals of a chunk's text (`'…'`, `"…"` on one line; `` `…` `` across
/// lines), their escapes undone (`\'` is `'`): the messages it can produce. A message built
/// of several literals is one more: `'option ' + name + ' is unknown'` (JavaScript, Java)
/// reads as `option {} is unknown`, and literals side by side (`"expected a value "
/// "for the option"`, Python and C across lines) as one.
fn literals(text: &str) -> Vec<Cow<'_, str>> {
    let bytes = text.as_bytes();
    // Each literal's text and its byte range, quotes included.
    let mut found: Vec<(Cow<'_, str>, usize, usize)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let q = bytes[at];
        if !matches!(q, b'"' | b'\'' | b'`') {
            at += 1;
            continue;
        }
        let mut end = at + 1;
        let mut closed = false;
        while end < bytes.len() && end - at < 400 {
            match bytes[end] {
                b'\\' => end += 1,
                b'\n' if q != b'`' => break,
                c if c == q => {
                    closed = true;
                    break;
                }
                _ => {}
            }
            end += 1;
        }
        if closed {
            found.push((unescape(&text[at + 1..end]), at, end + 1));
            at = end + 1;
        } else {
            at += 1;
        }
    }
    let mut out: Vec<Cow<'_, str>> = Vec::new();
    for i in 0..found.len() {
        // The message this literal starts, joined with the ones that continue it (built only
        // when one does).
        let mut joined: Option<String> = None;
        for k in i + 1..(i + MAX_JOINED).min(found.len()) {
            let Some(glue) = concatenation(&text[found[k - 1].2..found[k].1]) else {
                break;
            };
            let j = joined.get_or_insert_with(|| found[i].0.to_string());
            j.push_str(glue);
            j.push_str(&found[k].0);
        }
        out.extend(joined.filter(|j| j.len() >= 6).map(Cow::Owned));
    }
    out.extend(found.into_iter().map(|f| f.0).filter(|l| l.len() >= 6));
    out
}

/// Literals one message may be joined from.
const MAX_JOINED: usize = 6;

/// What stands between two literals of one message, as it reads in a format string: `""`
/// for literals side by side or joined by a bare `+`, `{}` for `+ expression +`; `None` when
/// the gap is anything else (a comma, a statement, a line of code).
fn concatenation(gap: &str) -> Option<&'static str> {
    // A prefix of the next literal (Python's `f"…"`, `r"…"`, `b"…"`) is part of it.
    let g = gap.trim_end_matches(['f', 'F', 'r', 'R', 'b', 'B', 'u', 'U']);
    if gap.len() - g.len() > 2 || !g.ends_with(char::is_whitespace) && g.len() < gap.len() {
        return None;
    }
    let g = g.trim();
    if g.is_empty() || g == "+" {
        return Some("");
    }
    let inner = g.strip_prefix('+')?.strip_suffix('+')?.trim();
    let plain = !inner.is_empty()
        && inner.len() <= 60
        && !inner.contains([';', '\n', '{', '}', '+', '"', '\'', '`']);
    plain.then_some("{}")
}

/// A literal's text with its escapes undone: `\'`, `\"`, `` \` ``, `\\` are the character;
/// `\n`, `\t` a space.
fn unescape(lit: &str) -> Cow<'_, str> {
    if !lit.contains('\\') {
        return Cow::Borrowed(lit);
    }
    let mut out = String::with_capacity(lit.len());
    let mut chars = lit.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n' | 't' | 'r') => out.push(' '),
            Some(e) => out.push(e),
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// How much of a pasted message (lowercased, collapsed) one of the chunk's string literals
/// explains: the characters of its fixed parts found in the message in order, when every
/// fixed part is found and they amount to at least 10 characters. 0 if none does.
pub fn message_match(message: &str, text: &str) -> usize {
    let mut best = 0;
    for lit in literals(text) {
        let parts = fixed_parts(&lit);
        if parts.is_empty() {
            continue;
        }
        let mut at = 0;
        let mut matched = 0;
        let mut all = true;
        for p in &parts {
            match message[at..].find(p.as_str()) {
                Some(pos) => {
                    at += pos + p.len();
                    matched += p.chars().filter(|c| c.is_alphanumeric()).count();
                }
                None => {
                    all = false;
                    break;
                }
            }
        }
        if all && matched >= 10 {
            best = best.max(matched);
        }
    }
    best
}

/// The identifiers a piece of prose names in code spans: `` `Client.retry_policy` ``,
/// `` `parse_args()` ``.
fn named_symbols(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 0 || span.len() > 80 || span.is_empty() {
            continue;
        }
        let s = span.trim();
        let s = s.split('(').next().unwrap_or(s);
        if identifier_like(s) || (s.len() >= 4 && s.chars().all(char::is_alphanumeric)) {
            let key = normalize_symbol(s);
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// A candidate's place: segment and ord.
pub type Key = (u32, u32);

/// The candidates `keep` admits with their fused scores, best first; ties in chunk id order,
/// as the fused ranking (not in shard order).
pub fn in_fused_order<'a, S: std::hash::BuildHasher>(
    fused: &HashMap<Key, f64, S>,
    doc: impl Fn(Key) -> &'a DocRow,
    keep: impl Fn(&DocRow) -> bool,
) -> Vec<(Key, f64)> {
    let mut ranked: Vec<(Key, f64)> = fused
        .iter()
        .filter(|(k, _)| keep(doc(**k)))
        .map(|(k, v)| (*k, *v))
        .collect();
    ranked.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| doc(a.0).chunk_id.cmp(&doc(b.0).chunk_id))
    });
    ranked
}

/// Applies the message match, the prose lending and the priors to fused scores. `doc`
/// finds a candidate's row; `definitions` finds the live definitions a symbol key names
/// (those the request may see); `callers` the chunks that call a definition (those the
/// request may see).
pub fn adjust<'a, S: std::hash::BuildHasher>(
    fused: &mut HashMap<Key, f64, S>,
    query: &str,
    intent: Intent,
    params: &QueryConfig,
    doc: impl Fn(Key) -> &'a DocRow,
    definitions: impl Fn(&str) -> Vec<Key>,
    callers: impl Fn(Key) -> Vec<Key>,
) {
    if !params.commits {
        fused.retain(|key, _| doc(*key).kind != ChunkKind::Commit);
    }
    if params.message_boost > 0.0 && intent == Intent::Error {
        let top = fused.values().copied().fold(0.0, f64::max);
        let message = collapse(query);
        let len = message
            .chars()
            .filter(|c| c.is_alphanumeric())
            .count()
            .max(1);
        let mut producers = HashSet::new();
        for (&key, v) in fused.iter_mut() {
            let m = message_match(&message, &doc(key).text);
            if m > 0 {
                let share = (m as f64 / len as f64).min(1.0);
                *v += params.message_boost * share * top;
                producers.insert(key);
            }
        }
        if params.raise_lend > 0.0 {
            lend_to_raisers(
                fused,
                &producers,
                params.raise_lend,
                &doc,
                &definitions,
                &callers,
            );
        }
    }
    if params.key_boost > 0.0 && intent == Intent::Config {
        let keys = config_keys(query);
        if !keys.is_empty() {
            let top = fused.values().copied().fold(0.0, f64::max);
            for (&key, v) in fused.iter_mut() {
                let text = &doc(key).text;
                let unspelled: Vec<&String> = keys.iter().filter(|k| !spells(text, k)).collect();
                let mut spelled = keys.len() - unspelled.len();
                if !unspelled.is_empty() && text.contains(['{', '%']) {
                    let templates: Vec<Vec<Piece>> = literals(text)
                        .iter()
                        .filter_map(|l| key_template(l))
                        .collect();
                    spelled += unspelled
                        .iter()
                        .filter(|k| templates.iter().any(|t| builds_key(t, k)))
                        .count();
                }
                *v += params.key_boost * top * spelled as f64 / keys.len() as f64;
            }
        }
    }
    if params.prose_lend > 0.0 && matches!(intent, Intent::Natural | Intent::Config) {
        let ranked = in_fused_order(fused, &doc, |_| true);
        for &(key, score) in ranked.iter().take(LEND_POOL) {
            let d = doc(key);
            if role(&d.path, d.kind) != Role::Docs {
                continue;
            }
            let names = named_symbols(&d.text);
            lend(
                fused,
                &d.repo_id,
                names,
                params.prose_lend * score,
                &doc,
                &definitions,
            );
        }
    }
    let history = asks_for_history(query);
    let wants = intent.wants(query);
    // A commit message says in words what the code it changed does: for a question in words
    // about code (a plain "why does my …" among them, not a question about a change), the
    // first commits lend their score to the definitions they touched.
    if params.commit_lend > 0.0
        && intent == Intent::Natural
        && wants == Wants::Code
        && !asks_about_a_change(query)
    {
        let ranked = in_fused_order(fused, &doc, |d| d.kind == ChunkKind::Commit);
        for &(key, score) in ranked.iter().take(COMMIT_LEND_POOL) {
            let d = doc(key);
            let names = trawl_index::docs::touched_names(&d.text).map(normalize_symbol);
            lend(
                fused,
                &d.repo_id,
                names,
                params.commit_lend * score,
                &doc,
                &definitions,
            );
        }
    }
    for (key, v) in fused.iter_mut() {
        *v *= prior(doc(*key), intent, wants, history, params);
    }
    if params.named_repo_prior < 1.0 {
        let named = named_repositories(query, fused.keys().map(|k| doc(*k).repo_id.as_str()));
        if !named.is_empty() {
            for (key, v) in fused.iter_mut() {
                if !named.contains(doc(*key).repo_id.as_str()) {
                    *v *= params.named_repo_prior;
                }
            }
        }
    }
}

/// A message is often built in one place and raised in another: a constructor or a function
/// formats it (`HTTPError`'s constructor, `get_invalid_choice_message`), and the code that
/// calls it is where the error happens. The first few chunks whose literals produce the
/// message (in fused order) lend `share` of their score to their callers, up to just below
/// their own; a constructor's callers are its class's (`new HTTPError(…)`, `raise
/// NoSuchOption(…)`), and so are those of what writes a type's message (a Go `Error()`
/// method, a Rust `Display` impl, a Python `__str__`): the code that builds the value
/// (`ConfigFileNotFoundError{…}`, `ParseError { .. }`, `Error::new(…)`). A producer called
/// from many places says little about any of them: it lends nothing.
fn lend_to_raisers<'a, S: std::hash::BuildHasher>(
    fused: &mut HashMap<Key, f64, S>,
    producers: &HashSet<Key>,
    share: f64,
    doc: &impl Fn(Key) -> &'a DocRow,
    definitions: &impl Fn(&str) -> Vec<Key>,
    callers: &impl Fn(Key) -> Vec<Key>,
) {
    let ranked = in_fused_order(fused, doc, |_| true);
    let first: Vec<(Key, f64)> = ranked
        .into_iter()
        .filter(|(k, _)| producers.contains(k))
        .take(RAISE_POOL)
        .collect();
    for (key, score) in first {
        let d = doc(key);
        let mut raisers = callers(key);
        if let Some(owner) = message_owner(d) {
            for class in definitions(&normalize_symbol(owner)) {
                let c = doc(class);
                if c.repo_id == d.repo_id && c.path == d.path && c.kind.is_container() {
                    raisers.extend(callers(class));
                }
            }
        }
        raisers.sort_unstable();
        raisers.dedup();
        raisers.retain(|&k| k != key);
        if raisers.is_empty() || raisers.len() > MAX_RAISERS {
            continue;
        }
        // A raiser comes after the producer that lent to it, unless it ranked above it on
        // its own.
        for k in raisers {
            let v = fused.entry(k).or_default();
            *v = v.max((*v + share * score).min(score * RAISE_CAP));
        }
    }
}

/// A thin wrapper, a few lines that call a definition of its own name — Go's package-level
/// `func SetEnvPrefix(in string) { v.SetEnvPrefix(in) }`, a blocking client's method calling
/// the async one, a builder's `danger_accept_invalid_certs` calling its `tls_` namesake —
/// often shares its delegate's doc comment and ranks beside or above it, but the delegate is
/// where the work is done. Among the first candidates, each wrapper's delegate is raised just
/// above it in the fused order (a delegate already above stays where it is; the wrapper keeps
/// its score). A wrapper the query named (scored at `named` or more) keeps its place: a
/// delegate below that tier is not raised into it. The learned ranking, where it runs, orders
/// its pool afterwards.
pub fn give_way_to_delegates<'a, S: std::hash::BuildHasher>(
    fused: &mut HashMap<Key, f64, S>,
    named: f64,
    doc: impl Fn(Key) -> &'a DocRow,
    callees: impl Fn(Key) -> Vec<Key>,
) {
    let ranked = in_fused_order(fused, &doc, |_| true);
    for (key, _) in ranked.into_iter().take(DELEGATE_POOL) {
        let Some(delegate) = delegate(key, &doc, &callees) else {
            continue;
        };
        let score = fused.get(&key).copied().unwrap_or_default();
        let v = fused.entry(delegate).or_default();
        if *v <= score && (score < named || *v >= named) {
            *v = score.next_up();
        }
    }
}

/// The one definition `key` forwards to, if it is a thin wrapper: a whole function or method
/// (not a part of one split at statements) of at most [`WRAPPER_LINES`] lines of code
/// (comments, docstrings and lines that only close a block aside) whose resolved callees
/// include exactly one function or method whose name holds its own, word for word
/// (`SetEnvPrefix`, `tls_danger_accept_invalid_certs`; not `widget` for `get`). A shorter name
/// (`format_timestamp` called by `format_timestamp_millis`, `BindEnv` by `MustBindEnv`) is a
/// general case the caller specialises, not its delegate.
fn delegate<'a>(
    key: Key,
    doc: &impl Fn(Key) -> &'a DocRow,
    callees: &impl Fn(Key) -> Vec<Key>,
) -> Option<Key> {
    let d = doc(key);
    if !matches!(d.kind, ChunkKind::Function | ChunkKind::Method)
        || trawl_core::records::header_part(&d.header).is_some()
    {
        return None;
    }
    let name = name_words(d)?;
    let mut found = callees(key).into_iter().filter(|&k| {
        let c = doc(k);
        k != key
            && matches!(c.kind, ChunkKind::Function | ChunkKind::Method)
            && name_words(c).is_some_and(|n| n.windows(name.len()).any(|w| w == name))
    });
    let first = found.next()?;
    if !found.all(|k| k == first) {
        return None;
    }
    let code = trawl_core::prose::code_lines(&d.text)
        .filter(|l| {
            l.trim()
                .chars()
                .any(|c| !matches!(c, '}' | ')' | ']' | ';' | ','))
        })
        .take(WRAPPER_LINES + 1)
        .count();
    (code <= WRAPPER_LINES).then_some(first)
}

/// The words of a definition's own name, without its owners, in lower case (`Viper.SetEnvPrefix`
/// → `set env prefix`, `_match_long_opt` → `match long opt`); `None` when it has none.
fn name_words(d: &DocRow) -> Option<Vec<String>> {
    let q = d.qualified_name.as_deref().or(d.symbol.as_deref())?;
    let name = q.rsplit(['.', ':']).next()?;
    let words: Vec<String> = trawl_core::words::parts(name)
        .into_iter()
        .map(|(a, b)| name[a..b].to_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    (!words.is_empty()).then_some(words)
}

/// The type whose values a chunk builds or describes, whose callers are the chunk's: the
/// class a constructor builds (`HTTPError` for `HTTPError.constructor`, `NoSuchOption` for
/// `NoSuchOption.__init__`), and the type whose message a member writes (`Error()` in Go,
/// `fmt`, `__str__`, `toString`) or a formatting impl is for (`Display for ParseError`,
/// `fmt::Display for Error<T>`).
fn message_owner(d: &DocRow) -> Option<&str> {
    let q = d.qualified_name.as_deref().or(d.symbol.as_deref())?;
    if d.kind == ChunkKind::Impl {
        let (tr, ty) = q.split_once(" for ")?;
        let tr = tr.rsplit("::").next()?;
        let ty = ty.split('<').next()?.rsplit("::").next()?.trim();
        return (matches!(tr, "Display" | "Debug") && !ty.is_empty()).then_some(ty);
    }
    let (owner, member) = q.rsplit_once('.')?;
    matches!(
        member,
        "constructor" | "__init__" | "__str__" | "Error" | "fmt" | "toString"
    )
    .then_some(owner)
}

/// Adds `score` to the definitions of `repo` that `names` name. A name that many
/// definitions share says little about any of them: it lends nothing.
fn lend<'a, S: std::hash::BuildHasher>(
    fused: &mut HashMap<Key, f64, S>,
    repo: &RepoId,
    names: impl IntoIterator<Item = String>,
    score: f64,
    doc: &impl Fn(Key) -> &'a DocRow,
    definitions: &impl Fn(&str) -> Vec<Key>,
) {
    for name in names {
        let defs: Vec<Key> = definitions(&name)
            .into_iter()
            .filter(|k| doc(*k).repo_id == *repo && is_definition(doc(*k).kind))
            .collect();
        if defs.is_empty() || defs.len() > MAX_LENT_DEFINITIONS {
            continue;
        }
        for k in defs {
            *fused.entry(k).or_default() += score;
        }
    }
}

/// The keys a config query spells (`REQUESTS_CA_BUNDLE`, `--no-ignore-vcs`,
/// `z.config({ jitless: true })`, `show_default=True`): environment variables, long flags
/// (without their dashes: code often declares `"no-ignore-vcs"`) and compound identifiers
/// (with `_`, `.` or a case change), each without a value after `=` or `:`; at least four
/// characters.
pub fn config_keys(query: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for w in query.split_whitespace() {
        // The key ends where its value or arguments begin; `::` is inside a path.
        let end = w
            .char_indices()
            .find(|&(i, c)| {
                "=({,".contains(c)
                    || (c == ':' && !w[..i].ends_with(':') && !w[i + 1..].starts_with(':'))
            })
            .map_or(w.len(), |(i, _)| i);
        let w = &w[..end];
        let w = w.trim_matches(|c: char| !c.is_alphanumeric() && !"_-.".contains(c));
        let key = if flag_like(w) {
            w.trim_start_matches('-')
        } else if env_var_like(w) || identifier_like(w) {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
        } else {
            continue;
        };
        if key.chars().count() >= 4 && !keys.iter().any(|k| k == key) {
            keys.push(key.to_owned());
        }
    }
    keys
}

/// One piece of a format string: a character as written (lowercased), or a placeholder.
#[derive(Debug, PartialEq)]
enum Piece {
    Text(char),
    Any,
}

/// A brace placeholder longer than this is read as text: code, not a format string.
const MAX_PLACEHOLDER_CHARS: usize = 64;

/// A format string's pieces, each placeholder (`{name}`, `{}`, `${name}`, `#{name}`, `%s`,
/// `%-8s`, `%ld`, `%(name)s`) one [`Piece::Any`]; `%%`, `{{` and `}}` are their one
/// character. A placeholder that does not close (`{name`, `%(name`) is its characters as
/// written, and the flag returned says there was one.
fn format_pieces(lit: &str) -> (Vec<Piece>, bool) {
    let chars: Vec<char> = lit.chars().collect();
    let mut out = Vec::new();
    let mut unclosed = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match (c, next) {
            ('%', Some('%')) | ('{', Some('{')) | ('}', Some('}')) => {
                out.push(Piece::Text(c));
                i += 2;
                continue;
            }
            ('{', _) | ('$' | '#', Some('{')) => {
                let open = if c == '{' { i + 1 } else { i + 2 };
                match chars[open..].iter().position(|&c| c == '}') {
                    Some(len) if len <= MAX_PLACEHOLDER_CHARS => {
                        out.push(Piece::Any);
                        i = open + len + 1;
                        continue;
                    }
                    _ => unclosed = true,
                }
            }
            ('%', Some(_)) => {
                // A name in parentheses, flags, width and precision, a length, then the verb.
                let mut j = i + 1;
                let mut named = true;
                if chars[j] == '(' {
                    match chars[j..].iter().position(|&c| c == ')') {
                        Some(p) => j += p + 1,
                        None => named = false,
                    }
                }
                while j < chars.len() && (chars[j].is_ascii_digit() || "-+ #0.*".contains(chars[j]))
                {
                    j += 1;
                }
                while j + 1 < chars.len()
                    && "hlLqjzt".contains(chars[j])
                    && chars[j + 1].is_ascii_alphabetic()
                {
                    j += 1;
                }
                if !named {
                    unclosed = true;
                } else if chars.get(j).is_some_and(char::is_ascii_alphabetic) {
                    out.push(Piece::Any);
                    i = j + 1;
                    continue;
                }
            }
            _ => {}
        }
        out.push(Piece::Text(c.to_ascii_lowercase()));
        i += 1;
    }
    (out, unclosed)
}

/// A literal's [`format_pieces`], `None` when a placeholder does not close.
fn template_pieces(lit: &str) -> Option<Vec<Piece>> {
    let (pieces, unclosed) = format_pieces(lit);
    (!unclosed).then_some(pieces)
}

/// The pieces of a literal that builds a key from parts (`_{prog_name}_COMPLETE`,
/// `%s_CONFIG_PATH`, `${prefix}.timeout`): one word with a placeholder and at least
/// [`MIN_TEMPLATE_CHARS`] letters or digits of its own, at most [`MAX_TEMPLATE_BYTES`] long.
fn key_template(lit: &str) -> Option<Vec<Piece>> {
    if lit.len() > MAX_TEMPLATE_BYTES
        || !lit.contains(['{', '%'])
        || lit.contains(char::is_whitespace)
    {
        return None;
    }
    let pieces = template_pieces(lit)?;
    (pieces.contains(&Piece::Any) && own_chars(&pieces) >= MIN_TEMPLATE_CHARS).then_some(pieces)
}

/// The letters and digits of a template's own text.
fn own_chars(pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .filter(|p| matches!(p, Piece::Text(c) if c.is_alphanumeric()))
        .count()
}

/// Whether `key` (`_FOO_BAR_COMPLETE`) is a value the key template `pieces`
/// (`_{prog_name}_COMPLETE`) builds, and the template's own text is at least half of the
/// key's letters and digits (`%s_HOME` says little of `MYAPP_HOME`): its text in place, in
/// any case, and each placeholder a name of one or more letters, digits, `_` or `-`. In
/// time linear in the pieces times the key's length.
fn builds_key(pieces: &[Piece], key: &str) -> bool {
    let key: Vec<char> = key.chars().map(|c| c.to_ascii_lowercase()).collect();
    let alnum = key.iter().filter(|c| c.is_alphanumeric()).count();
    if 2 * own_chars(pieces) < alnum {
        return false;
    }
    let name = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-');
    // fits[j]: the pieces read so far build key[..j].
    let mut fits = vec![false; key.len() + 1];
    fits[0] = true;
    for p in pieces {
        let mut next = vec![false; key.len() + 1];
        match p {
            Piece::Text(c) => {
                for j in 0..key.len() {
                    next[j + 1] = fits[j] && key[j] == *c;
                }
            }
            // One or more name characters: reachable from a fit just before a run of them.
            Piece::Any => {
                for j in 1..=key.len() {
                    next[j] = name(key[j - 1]) && (fits[j - 1] || next[j - 1]);
                }
            }
        }
        fits = next;
    }
    fits[key.len()]
}

/// Whether `text` spells `key` as a whole: not inside a longer name (`_`, `-` and letters
/// or digits on either side make it part of one), though it may follow a flag's dashes
/// (`--no-ignore-vcs` spells `no-ignore-vcs`).
pub fn spells(text: &str, key: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    text.match_indices(key).any(|(at, m)| {
        let before = text[..at].trim_end_matches('-');
        !part(before.chars().next_back()) && !part(text[at + m.len()..].chars().next())
    })
}

/// The repositories among `repos` that the query names by their own name, as a word of it
/// (`what does commander do …`, `env_logger-0.11.8/src/…`, `click.edit`): case aside, not
/// inside a longer word (`clicks`, `sky`). Names shorter than two characters are never
/// read.
pub fn named_repositories<'r>(
    query: &str,
    repos: impl Iterator<Item = &'r str>,
) -> HashSet<&'r str> {
    let q = query.to_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    repos
        .filter(|repo| {
            let name = repo.rsplit('/').next().unwrap_or(repo).to_lowercase();
            name.chars().count() >= 2
                && q.match_indices(name.as_str()).any(|(at, m)| {
                    !word(q[..at].chars().next_back()) && !word(q[at + m.len()..].chars().next())
                })
        })
        .collect()
}

/// How many times deeper the arms look for a pasted message.
pub const ERROR_DEPTH: usize = 4;
/// Prose candidates whose named symbols borrow their score.
const LEND_POOL: usize = 30;
/// The first commits of a question in words that lend their score to what they touched;
/// chosen on the tune halves (2: development 0.779, words 0.506; 5: 0.784, 0.516; 10: 0.779,
/// 0.516).
const COMMIT_LEND_POOL: usize = 5;
/// The chunks that best explain a pasted message whose callers are lent their score.
const RAISE_POOL: usize = 3;
/// The most of its producer's score a raiser is lent up to.
const RAISE_CAP: f64 = 0.99;
/// Callers a message's producer may have and still lend them its score.
const MAX_RAISERS: usize = 4;
/// Definitions a name may have and still be lent a score.
const MAX_LENT_DEFINITIONS: usize = 3;
/// Candidates after a wide one searched for a narrower chunk inside it.
const NARROW_POOL: usize = 100;
/// Letters and digits a key template holds of its own at least.
const MIN_TEMPLATE_CHARS: usize = 4;
/// Bytes of a key template at most.
const MAX_TEMPLATE_BYTES: usize = 60;
/// Candidates, best first, read for thin wrappers whose delegates come before them.
const DELEGATE_POOL: usize = 20;
/// Lines of code a thin wrapper holds at most, its signature among them.
const WRAPPER_LINES: usize = 3;

/// Candidates, best first, read for a documentation section to place among the first results.
const DOC_PLACE_POOL: usize = 50;

/// Whether `d` is documentation written as prose: a Markdown or reST section, a text file's
/// piece.
fn is_prose_doc(d: &DocRow) -> bool {
    matches!(d.kind, ChunkKind::Section | ChunkKind::Text)
}

/// A name or a key is answered by its definition or the code that reads it, and as often by
/// the documentation that explains it. When none of the first `place` results is a
/// documentation section and one is among the first candidates, the best such section takes
/// the `place`-th result's place and the results from there move down one. Results are
/// counted as the answer shows them: a candidate that `overlaps` a better one is shown as its
/// context, not as a result of its own. The scores stay with their places, so they still fall
/// down the list. A place scored at `pinned` or more (a definition the query names) is not
/// taken: the section would inherit that tier.
pub fn give_docs_a_place<'a>(
    ranked: &mut [(u32, u32, f64)],
    place: usize,
    pinned: f64,
    doc: impl Fn(u32, u32) -> &'a DocRow,
    overlaps: impl Fn(&DocRow, &DocRow) -> bool,
) {
    if place == 0 {
        return;
    }
    let row = |c: &(u32, u32, f64)| doc(c.0, c.1);
    // The places in `ranked` of the results the answer shows, within the pool.
    let mut shown: Vec<usize> = Vec::new();
    for i in 0..ranked.len().min(DOC_PLACE_POOL) {
        let d = row(&ranked[i]);
        if !shown.iter().any(|&j| overlaps(row(&ranked[j]), d)) {
            shown.push(i);
        }
    }
    if shown
        .iter()
        .take(place)
        .any(|&i| is_prose_doc(row(&ranked[i])))
    {
        return;
    }
    let Some(&from) = shown
        .iter()
        .skip(place)
        .find(|&&i| is_prose_doc(row(&ranked[i])))
    else {
        return;
    };
    let to = shown[place - 1];
    if ranked[to].2 >= pinned {
        return;
    }
    let scores: Vec<f64> = ranked[to..=from].iter().map(|c| c.2).collect();
    ranked[to..=from].rotate_right(1);
    for (c, score) in ranked[to..=from].iter_mut().zip(scores) {
        c.2 = score;
    }
}

/// A question (asked in words, [`is_question`]) asks how, why or where code does something,
/// which a function or a method answers; a container (a class with its docstring, a type, an `impl`, a skeleton)
/// declares what exists. When the first of `ranked[from..]` is a container, the first
/// candidate after it that is not one takes its place, and the container comes second; the
/// scores stay with the places, so they still fall down the list.
pub fn acts_first<'a>(
    ranked: &mut [(u32, u32, f64)],
    from: usize,
    doc: impl Fn(u32, u32) -> &'a DocRow,
) {
    // A module or namespace chunk (an object of functions, one chunk) holds its functions'
    // code: it acts.
    let container = |c: &(u32, u32, f64)| {
        let k = doc(c.0, c.1).kind;
        (k.is_container() && !matches!(k, ChunkKind::Module | ChunkKind::Namespace))
            || matches!(k, ChunkKind::ClassSkeleton | ChunkKind::Type)
    };
    if !ranked.get(from).is_some_and(container) {
        return;
    }
    let Some(at) = ranked[from..].iter().position(|c| !container(c)) else {
        return;
    };
    let scores: Vec<f64> = ranked[from..=from + at].iter().map(|c| c.2).collect();
    ranked[from..=from + at].rotate_right(1);
    for (c, s) in ranked[from..=from + at].iter_mut().zip(scores) {
        c.2 = s;
    }
}

/// A wide chunk (a file's table of contents, a class skeleton) gives its place to the best
/// narrower candidate of the same file inside its lines, when there is one, and leaves the
/// results: a citation points at the lines that answer, and the skeleton is that result's
/// parent (`--expand` attaches it). A wide chunk with a narrower one of its own above it
/// leaves likewise. A wide chunk with nothing narrower among the candidates stays.
pub fn narrow<'a>(ranked: &mut Vec<(u32, u32, f64)>, doc: impl Fn(u32, u32) -> &'a DocRow) {
    let mut at = 0;
    while at < ranked.len() {
        let (seg, ord, score) = ranked[at];
        let w = doc(seg, ord);
        if !is_wide(w.kind) {
            at += 1;
            continue;
        }
        let within = |j: usize| {
            let n = doc(ranked[j].0, ranked[j].1);
            n.repo_id == w.repo_id
                && n.path == w.path
                && !is_wide(n.kind)
                && n.start_line >= w.start_line
                && n.end_line <= w.end_line
        };
        if (0..at).any(within) {
            ranked.remove(at);
            continue;
        }
        if let Some(j) = (at + 1..ranked.len().min(at + 1 + NARROW_POOL)).find(|&j| within(j)) {
            let (ns, no, _) = ranked.remove(j);
            ranked[at] = (ns, no, score);
        }
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scores of `fused` (ords of `docs`, segment 0) after [`adjust`] for `query`.
    fn adjusted(
        docs: &[DocRow],
        fused: &[(u32, f64)],
        query: &str,
        params: &QueryConfig,
        definitions: impl Fn(&str) -> Vec<Key>,
    ) -> HashMap<Key, f64> {
        adjusted_with_callers(docs, fused, query, params, definitions, |_| Vec::new())
    }

    /// [`adjusted`], with the call graph `callers`.
    fn adjusted_with_callers(
        docs: &[DocRow],
        fused: &[(u32, f64)],
        query: &str,
        params: &QueryConfig,
        definitions: impl Fn(&str) -> Vec<Key>,
        callers: impl Fn(Key) -> Vec<Key>,
    ) -> HashMap<Key, f64> {
        let mut fused: HashMap<Key, f64> = fused.iter().map(|&(o, v)| ((0, o), v)).collect();
        adjust(
            &mut fused,
            query,
            classify(query),
            params,
            |k| &docs[k.1 as usize],
            definitions,
            callers,
        );
        fused
    }

    #[test]
    fn intents() {
        for (q, want) in [
            ("parse_args", Intent::Identifier),
            ("HTTPConnection.request", Intent::Identifier),
            ("Builder::parse_filters", Intent::Identifier),
            ("retry", Intent::Identifier),
            ("RUST_LOG_STYLE", Intent::Config),
            ("--no-color", Intent::Config),
            ("RUST_LOG_STYLE=always", Intent::Config),
            ("--color=never", Intent::Config),
            ("write_style=never", Intent::Config),
            ("auto_envvar_prefix option", Intent::Config),
            ("write_style never", Intent::Config),
            ("error: unknown option '--verbos'", Intent::Error),
            (
                "Error: unknown command \"serv\" for \"hugo\"",
                Intent::Error,
            ),
            (
                "invalid port 70000: must be between 1 and 65535",
                Intent::Error,
            ),
            ("ValueError: too many values to unpack", Intent::Error),
            (
                "Command \"sync\" is deprecated, use \"pull\" instead",
                Intent::Error,
            ),
            ("how is a 'did you mean' hint made", Intent::Natural),
            (
                "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value'",
                Intent::Error,
            ),
            ("how are unknown options reported?", Intent::Natural),
            // A message that ends in a question of its own is still a message.
            (
                "Error: No such option '--verbos'. Did you mean '--verbose'?",
                Intent::Error,
            ),
            (
                "error: unknown command 'serv'. Did you mean 'serve'?",
                Intent::Error,
            ),
            ("error handling when the file is missing?", Intent::Natural),
            ("where is the help text wrapped", Intent::Natural),
            ("retry delay after rate limiting", Intent::Natural),
            // An exception as a traceback prints it, dotted or not.
            (
                "requests.exceptions.MissingSchema: Invalid URL 'x': No scheme supplied. Perhaps you meant https://x?",
                Intent::Error,
            ),
            (
                "jinja2.exceptions.TemplateNotFound: index.html",
                Intent::Error,
            ),
            (
                "AssertionError [ERR_ASSERTION]: status code must be a number",
                Intent::Error,
            ),
            // A program's name before its message.
            ("rg: unrecognized file type: rustt", Intent::Error),
            (
                "open config.yaml: no such file or directory",
                Intent::Natural,
            ),
            // A setting as a configuration file writes it, with its value.
            ("errorKey: 'error'", Intent::Config),
            ("maxRate: [100 * 1024]", Intent::Config),
            ("timeout: 5000", Intent::Config),
            ("KeyError: 'SECRET_KEY'", Intent::Error),
            ("error: '--verbos'", Intent::Error),
            ("warning: 'x' ignored", Intent::Error),
            ("base: null to drop pid and hostname", Intent::Natural),
            ("note: how are hooks ordered?", Intent::Natural),
        ] {
            assert_eq!(classify(q), want, "{q}");
        }
    }

    #[test]
    fn questions_asked_as_a_user_want_docs_as_much_as_code() {
        for q in [
            "How can I pass a value that starts with a dash?",
            "why does my route keep answering 404",
            "As a user, how do you switch off active help?",
        ] {
            assert!(asks_as_user(q), "{q}");
            assert_eq!(classify(q).wants(q), Wants::Usage, "{q}");
        }
        for q in [
            "how is the retry delay computed",
            "where is the default usage text written",
            "what does --id imply",
        ] {
            assert!(!asks_as_user(q), "{q}");
            assert_eq!(classify(q).wants(q), Wants::Code, "{q}");
        }
        assert_eq!(
            classify("where is the install guide").wants("where is the install guide"),
            Wants::Docs
        );
    }

    #[test]
    fn questions_about_callers() {
        for q in [
            "who calls parse_args?",
            "What calls `Client.retry`",
            "callers of mergeHeaders",
            "where is _build_prompt used",
            "where is HasAlias called from?",
            "which functions call try_init_from_env",
        ] {
            assert!(asks_for_callers(q), "{q}");
        }
        for q in [
            "how is the retry delay computed",
            "where is the config file read",
            "parse_args",
            "what is called when the pool is empty",
        ] {
            assert!(!asks_for_callers(q), "{q}");
        }
        assert_eq!(
            named_identifiers("who calls `Client.retry`, or _build_prompt()?"),
            ["Client.retry", "_build_prompt()"]
        );
        assert_eq!(named_identifiers("who calls HasAlias?"), ["HasAlias"]);
        assert!(named_identifiers("who calls the parser?").is_empty());
    }

    #[test]
    fn roles_from_paths() {
        assert_eq!(
            role("src/click/core.py", ChunkKind::Function),
            Role::Implementation
        );
        assert_eq!(role("tests/test_core.py", ChunkKind::Function), Role::Test);
        assert_eq!(role("lib/foo_test.go", ChunkKind::Function), Role::Test);
        assert_eq!(role("command_test.go", ChunkKind::Function), Role::Test);
        assert_eq!(
            role("test/command.test.js", ChunkKind::Function),
            Role::Test
        );
        assert_eq!(role("src/ky.spec.ts", ChunkKind::Function), Role::Test);
        assert_eq!(role("typings/index.test-d.ts", ChunkKind::Code), Role::Test);
        assert_eq!(role("typings/index.d.ts", ChunkKind::Class), Role::Docs);
        assert_eq!(role("stubs/os.pyi", ChunkKind::Function), Role::Docs);
        assert_eq!(
            role("examples/hello.rs", ChunkKind::Function),
            Role::Example
        );
        assert_eq!(role("README.md", ChunkKind::Section), Role::Docs);
        assert_eq!(role("docs/conf.py", ChunkKind::Code), Role::Docs);
        assert_eq!(
            role("src/latest.rs", ChunkKind::Function),
            Role::Implementation
        );
        assert_eq!(
            role("src/contest.rs", ChunkKind::Function),
            Role::Implementation
        );
        assert_eq!(role("", ChunkKind::Commit), Role::History);
        assert!(asks_for_history("why was the retry removed"));
        assert!(asks_for_history("which commit changed the parser?"));
        assert!(asks_for_history("when was the connection pool added"));
        assert!(asks_for_history(
            "which change made the timeout configurable?"
        ));
        assert!(asks_for_history("in which version did --quiet appear"));
        assert!(!asks_for_history("which option changes the timeout?"));
        assert!(!asks_for_history("how do I remove a handler"));
        assert!(!asks_for_history("retry policy"));
        // A change itself, not only why code behaves as it does.
        for q in [
            "why does the too-many-arguments error now list the extra arguments?",
            "why do requests with no body no longer get a 415?",
            "why was the retry removed",
            "which commit added the example",
            "when was the connection pool added",
            "since when can I cap the depth?",
            "why did the parser stop accepting tabs",
        ] {
            assert!(asks_about_a_change(q), "{q}");
        }
        for q in [
            "why aren't my debug logs reaching the transport?",
            "why does a 0 port fail to bind",
            "how do I remove a handler",
            "knowledge of the nowhere land",
        ] {
            assert!(!asks_about_a_change(q), "{q}");
        }
        for (name, test) in [
            ("tests.parse_spec_global", true),
            ("filter::tests::matches", true),
            ("test_parse", true),
            ("TestListen", true),
            ("Parser.parse", false),
            ("Testament", false),
            ("latest_test_run", false),
        ] {
            assert_eq!(test_name(Some(name)), test, "{name}");
        }
    }

    #[test]
    fn placeholders_in_every_spelling() {
        assert_eq!(
            fixed_parts("invalid port %d: must be between %d and %d"),
            ["invalid port", ": must be between", "and"]
        );
        assert_eq!(
            fixed_parts("unknown command %q for %q"),
            ["unknown command", "for"]
        );
        assert_eq!(
            fixed_parts("error: unknown option '${flag}'"),
            ["error: unknown option '"]
        );
        assert_eq!(
            fixed_parts("Invalid value for {param_hint}: {message}"),
            ["invalid value for"]
        );
        assert_eq!(
            fixed_parts("got {:?} items, 100%% done"),
            ["got", "items, 100% done"]
        );
        assert_eq!(fixed_parts("%(prog)s: error: %(message)s"), [": error:"]);
        assert_eq!(fixed_parts("no #{thing} here"), ["no", "here"]);
        assert_eq!(fixed_parts("read %ld bytes of %-8s"), ["read", "bytes of"]);
        // A brace that does not close is text, as a key template it is no template.
        assert_eq!(fixed_parts("expected {name here"), ["expected {name here"]);
        assert!(template_pieces("_{prog_name_COMPLETE").is_none());
    }

    #[test]
    fn a_pasted_message_meets_its_format_string() {
        let go = "if p > 65535 {\n\treturn fmt.Errorf(\"invalid port %d: must be between %d and %d\", p, 1, 65535)\n}";
        let msg = collapse("invalid port 70000: must be between 1 and 65535");
        assert!(message_match(&msg, go) >= 25);
        let js = "throw new Error(`error: unknown option '${flag}'`);";
        assert!(message_match(&collapse("error: unknown option '--verbos'"), js) > 0);
        // Words in another order, or only some of the parts: no match.
        assert_eq!(
            message_match(
                &collapse("must be between 1 and 65535: invalid port 70000"),
                go
            ),
            0
        );
        assert_eq!(
            message_match(&msg, "x = 'invalid'; y = 'nothing else'"),
            0,
            "a short fragment is not evidence"
        );
        // A message joined from several literals, with escaped quotes, meets them whole.
        let concat =
            "throw new TypeError('option \\'' + name + '\\' needs a value, got ' + typeof value);";
        let msg = collapse("TypeError: option '--port' needs a value, got undefined");
        assert!(
            message_match(&msg, concat) > message_match(&msg, "x = 'needs a value, got '"),
            "the joined message explains more than its longest literal"
        );
        let py = "raise BadParameter(\n    \"expected a value for \"\n    f\"{name}, found none in the environment\"\n)";
        let msg =
            collapse("BadParameter: expected a value for --user, found none in the environment");
        assert!(message_match(&msg, py) >= 40, "{}", message_match(&msg, py));
        // Literals apart in code (arguments of a call) are not one message.
        assert_eq!(
            literals("f('alpha beta', 'gamma delta')"),
            ["alpha beta", "gamma delta"]
        );
        // Apostrophes in comments are not literals that match by accident.
        let rust = "// don't panic here, it's fine\nlet x = 1;";
        assert_eq!(message_match(&msg, rust), 0);
    }

    #[test]
    fn a_pasted_message_finds_where_it_is_raised_after_where_it_is_written() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let repo = "github.com/sindresorhus/ky";
        let mut class = function_doc(
            repo,
            "source/errors/HTTPError.ts",
            "HTTPError",
            "export class HTTPError extends Error {\n\tresponse: Response;\n}",
            (6, 20),
        );
        class.kind = ChunkKind::Class;
        let mut constructor = function_doc(
            repo,
            "source/errors/HTTPError.ts",
            "constructor",
            "constructor(response: Response, request: Request) {\n\tconst status = `${response.status} ${response.statusText}`;\n\tsuper(`Request failed with status code ${status}: ${request.method} ${request.url}`);\n}",
            (22, 33),
        );
        constructor.kind = ChunkKind::Method;
        constructor.qualified_name = Some("HTTPError.constructor".into());
        let fetch = function_doc(
            repo,
            "source/core/Ky.ts",
            "fetch",
            "if (!response.ok && throwHttpErrors) {\n\tthrow new HTTPError(response, request);\n}",
            (209, 223),
        );
        let retry = function_doc(
            repo,
            "source/core/Ky.ts",
            "retry",
            "// a request that failed is retried when its status code allows it\nif (retryStatusCodes.includes(response.status)) { return retry(); }",
            (300, 310),
        );
        let docs = [class, constructor, fetch, retry];
        let query = "HTTPError: Request failed with status code 404 Not Found: GET https://api.example.com/users/42";
        let fused = [(0, 0.2), (1, 0.3), (2, 0.1), (3, 0.25)];
        let definitions = |name: &str| match name {
            "httperror" => vec![(0, 0)],
            _ => Vec::new(),
        };
        let order = |params: &QueryConfig, callers: &dyn Fn(Key) -> Vec<Key>| {
            let fused = adjusted_with_callers(&docs, &fused, query, params, definitions, callers);
            let mut ranked: Vec<(u32, f64)> = fused.into_iter().map(|(k, v)| (k.1, v)).collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            ranked.into_iter().map(|(o, _)| o).collect::<Vec<_>>()
        };
        // `new HTTPError(…)` calls the class; its constructor writes the message.
        let graph = |k: Key| {
            if k == (0, 0) {
                vec![(0, 2)]
            } else {
                Vec::new()
            }
        };
        let params = QueryConfig::default();
        assert_eq!(order(&params, &graph)[..2], [1, 2], "the raise site second");
        let off = QueryConfig {
            raise_lend: 0.0,
            ..QueryConfig::default()
        };
        assert_ne!(order(&off, &graph)[1], 2, "without the lending it is not");
        // A producer called from everywhere lends to none of its callers.
        let everywhere = |k: Key| {
            if k == (0, 0) {
                (2..4).chain(10..20).map(|o| (0, o)).collect()
            } else {
                Vec::new()
            }
        };
        assert_ne!(order(&params, &everywhere)[1], 2);
    }

    #[test]
    fn a_name_shows_its_documentation_among_its_first_answers() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let repo = "github.com/pinojs/pino";
        let row = |path: &str, kind: ChunkKind, lines: (u32, u32)| {
            let mut d = function_doc(repo, path, path, "text", lines);
            d.kind = kind;
            d
        };
        let docs = [
            row("lib/proto.js", ChunkKind::Function, (10, 40)),
            // Inside the first result: shown as its context, not as a result.
            row("lib/proto.js", ChunkKind::Function, (12, 20)),
            row("lib/tools.js", ChunkKind::Function, (1, 9)),
            row("test/basic.test.js", ChunkKind::Function, (1, 9)),
            row("docs/api.md", ChunkKind::Section, (100, 120)),
            row("README.md", ChunkKind::Section, (1, 20)),
        ];
        let doc = |_: u32, o: u32| &docs[o as usize];
        let overlaps = |a: &DocRow, b: &DocRow| {
            a.path == b.path && a.start_line <= b.end_line && b.start_line <= a.end_line
        };
        let ranked = || -> Vec<(u32, u32, f64)> {
            (0..docs.len() as u32)
                .map(|o| (0, o, 1.0 - f64::from(o) / 10.0))
                .collect()
        };
        let order = |r: &[(u32, u32, f64)]| r.iter().map(|c| c.1).collect::<Vec<_>>();
        // The third result shown is the fourth candidate: the best section takes its place,
        // and the scores stay with the places.
        let mut r = ranked();
        give_docs_a_place(&mut r, 3, 10.0, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 4, 3, 5]);
        assert!(r.windows(2).all(|w| w[0].2 >= w[1].2), "{r:?}");
        // A section already among the first results shown: nothing moves.
        let mut r = ranked();
        give_docs_a_place(&mut r, 4, 10.0, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 3, 4, 5]);
        // Off, nothing moves; with no section among the candidates, nothing moves.
        let mut r = ranked();
        give_docs_a_place(&mut r, 0, 10.0, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 3, 4, 5]);
        let mut r = ranked();
        r.truncate(4);
        give_docs_a_place(&mut r, 1, 10.0, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 3]);
        // At the first place.
        let mut r = ranked();
        give_docs_a_place(&mut r, 1, 10.0, doc, overlaps);
        assert_eq!(order(&r), [4, 0, 1, 2, 3, 5]);
        // Not into the tier of a definition the query names.
        let mut r = ranked();
        give_docs_a_place(&mut r, 3, 0.7, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 3, 4, 5], "the third place scores 0.7");
        let mut r = ranked();
        give_docs_a_place(&mut r, 3, 0.8, doc, overlaps);
        assert_eq!(order(&r), [0, 1, 2, 4, 3, 5]);
    }

    #[test]
    fn a_question_is_answered_first_by_code_that_acts_not_by_a_container() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let doc = |symbol: &str, kind: ChunkKind| {
            let mut d = function_doc("github.com/a/b", "core.py", symbol, "pass", (1, 9));
            d.kind = kind;
            d
        };
        let docs = [
            doc("Group", ChunkKind::Class),
            doc("RetryOptions", ChunkKind::Type),
            doc("Group.invoke", ChunkKind::Method),
            doc("Group.main", ChunkKind::Method),
            doc("Group", ChunkKind::ClassSkeleton),
            doc("adapters", ChunkKind::Module),
        ];
        let at = |_: u32, o: u32| &docs[o as usize];
        let ords = |r: &[(u32, u32, f64)]| r.iter().map(|c| c.1).collect::<Vec<_>>();
        // Two containers first: the first function goes before them, the scores stay with the
        // places.
        let mut ranked = vec![(0, 0, 0.9), (0, 1, 0.8), (0, 2, 0.7), (0, 3, 0.6)];
        acts_first(&mut ranked, 0, at);
        assert_eq!(ords(&ranked), [2, 0, 1, 3]);
        assert_eq!(
            ranked.iter().map(|c| c.2).collect::<Vec<_>>(),
            [0.9, 0.8, 0.7, 0.6]
        );
        // A function already first, or nothing but containers: unchanged.
        let mut ranked = vec![(0, 3, 0.9), (0, 0, 0.8), (0, 2, 0.7)];
        acts_first(&mut ranked, 0, at);
        assert_eq!(ords(&ranked), [3, 0, 2]);
        let mut ranked = vec![(0, 0, 0.9), (0, 4, 0.8)];
        acts_first(&mut ranked, 0, at);
        assert_eq!(ords(&ranked), [0, 4]);
        // A module of functions acts.
        let mut ranked = vec![(0, 5, 0.9), (0, 2, 0.8)];
        acts_first(&mut ranked, 0, at);
        assert_eq!(ords(&ranked), [5, 2]);
        // What stands before `from` (a definition the query named) keeps its place.
        let mut ranked = vec![(0, 0, 1.9), (0, 1, 0.8), (0, 2, 0.7)];
        acts_first(&mut ranked, 1, at);
        assert_eq!(ords(&ranked), [0, 2, 1]);
        // Only a question is one: a phrase is not.
        assert!(is_question("how does a group run several subcommands?"));
        assert!(is_question("Why does the pager strip colors"));
        assert!(!is_question(
            "regex feature disabled, filter falls back to substring match"
        ));
    }

    #[test]
    fn a_thin_wrapper_is_one_that_only_forwards_to_its_namesake() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let repo = "github.com/spf13/viper";
        let doc = |symbol: &str, text: &str, kind: ChunkKind| {
            let mut d = function_doc(repo, "viper.go", symbol, text, (1, 9));
            d.kind = kind;
            d
        };
        let docs = [
            doc(
                "SetEnvPrefix",
                "// SetEnvPrefix defines a prefix.\nfunc SetEnvPrefix(in string) { v.SetEnvPrefix(in) }",
                ChunkKind::Function,
            ),
            doc(
                "Viper.SetEnvPrefix",
                "func (v *Viper) SetEnvPrefix(in string) {\n\tif in != \"\" {\n\t\tv.envPrefix = in\n\t}\n}",
                ChunkKind::Method,
            ),
            // Calls its namesake, but does more than forward.
            doc(
                "Get",
                "func Get(key string) any {\n\tlock.Lock()\n\tdefer lock.Unlock()\n\tlog(key)\n\treturn v.Get(key)\n}",
                ChunkKind::Function,
            ),
            doc(
                "Viper.Get",
                "func (v *Viper) Get(key string) any {\n\treturn v.find(key)\n}",
                ChunkKind::Method,
            ),
            // Forwards to a shorter name: it specialises it.
            doc(
                "MustBindEnv",
                "func MustBindEnv(in ...string) { v.BindEnv(in...) }",
                ChunkKind::Function,
            ),
            doc(
                "Viper.BindEnv",
                "func (v *Viper) BindEnv(in ...string) error {\n\treturn nil\n}",
                ChunkKind::Method,
            ),
            // A struct is no wrapper, whatever it names.
            doc(
                "SetEnvPrefixes",
                "type SetEnvPrefixes struct{}",
                ChunkKind::Struct,
            ),
            // `Get` is not a word of `Widget`.
            doc(
                "Get",
                "func Get(key string) any { return w.Widget(key) }",
                ChunkKind::Function,
            ),
            doc(
                "Viper.Widget",
                "func (v *Viper) Widget(key string) any {\n\treturn nil\n}",
                ChunkKind::Method,
            ),
            // The last part of a function split at statements: short, and calling on.
            {
                let mut d = doc("Get", "\treturn v.Get(key)\n}", ChunkKind::Function);
                d.header = "function Get (part 3/3)\nlanguage: go".into();
                d
            },
        ];
        let callees = |k: Key| match k.1 {
            // The compactor never resolves a call to its caller; the rule does not count on it.
            0 => vec![(0, 0), (0, 1)],
            2 => vec![(0, 2), (0, 3)],
            4 => vec![(0, 5)],
            6 => vec![(0, 1)],
            7 => vec![(0, 8)],
            9 => vec![(0, 3)],
            _ => Vec::new(),
        };
        let at = |k: Key| &docs[k.1 as usize];
        assert_eq!(delegate((0, 0), &at, &callees), Some((0, 1)));
        assert_eq!(delegate((0, 2), &at, &callees), None, "more than a forward");
        assert_eq!(delegate((0, 4), &at, &callees), None, "a specialisation");
        assert_eq!(delegate((0, 6), &at, &callees), None, "not a function");
        assert_eq!(delegate((0, 7), &at, &callees), None, "not its word");
        assert_eq!(delegate((0, 9), &at, &callees), None, "a part");
        // In the ranking: the delegate comes just above its wrapper, the rest keep their order.
        let mut fused: HashMap<Key, f64> =
            [((0, 0), 0.5), ((0, 1), 0.1), ((0, 2), 0.4), ((0, 3), 0.3)].into();
        give_way_to_delegates(&mut fused, 1.0, at, callees);
        let order: Vec<u32> = in_fused_order(&fused, at, |_| true)
            .into_iter()
            .map(|(k, _)| k.1)
            .collect();
        assert_eq!(order, [1, 0, 2, 3]);
        assert!(
            (fused[&(0, 0)] - 0.5).abs() < 1e-12,
            "the wrapper keeps its score"
        );
        // A wrapper the query named keeps its place above a delegate it did not name.
        let mut fused: HashMap<Key, f64> = [((0, 0), 1.5), ((0, 1), 0.1)].into();
        give_way_to_delegates(&mut fused, 1.0, at, callees);
        assert!(fused[&(0, 0)] > fused[&(0, 1)]);
    }

    /// Go and Rust raise an error by building a value of its type; the message is written by
    /// the type's `Error()` method or `Display` impl. The code that builds it is found next.
    #[test]
    fn a_pasted_message_finds_where_its_error_type_is_built() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let repo = "github.com/spf13/viper";
        let mut ty = function_doc(
            repo,
            "errors.go",
            "ConfigFileNotFoundError",
            "type ConfigFileNotFoundError struct {\n\tname, locations string\n}",
            (40, 43),
        );
        ty.kind = ChunkKind::Struct;
        let mut error = function_doc(
            repo,
            "errors.go",
            "Error",
            "func (fnfe ConfigFileNotFoundError) Error() string {\n\treturn fmt.Sprintf(\"Config File %q Not Found in %q\", fnfe.name, fnfe.locations)\n}",
            (44, 53),
        );
        error.kind = ChunkKind::Method;
        error.qualified_name = Some("ConfigFileNotFoundError.Error".into());
        let find = function_doc(
            repo,
            "file.go",
            "findConfigFile",
            "for _, cp := range v.configPaths {\n\tif file := v.searchInPath(cp); file != \"\" {\n\t\treturn file, nil\n\t}\n}\nreturn \"\", ConfigFileNotFoundError{v.configName, fmt.Sprintf(\"%s\", v.configPaths)}",
            (60, 72),
        );
        let other = function_doc(
            repo,
            "viper.go",
            "ReadInConfig",
            "// ReadInConfig will discover and load the configuration file from disk\nfile, err := v.getConfigFile()",
            (1600, 1630),
        );
        let docs = [ty, error, find, other];
        let query = "Config File \"config\" Not Found in \"[/etc/myapp /home/deploy/.myapp]\"";
        let fused = [(0, 0.2), (1, 0.3), (2, 0.1), (3, 0.25)];
        let definitions = |name: &str| match name {
            "configfilenotfounderror" => vec![(0, 0)],
            _ => Vec::new(),
        };
        // `ConfigFileNotFoundError{…}` in findConfigFile calls the type.
        let graph = |k: Key| {
            if k == (0, 0) {
                vec![(0, 2)]
            } else {
                Vec::new()
            }
        };
        let fused = adjusted_with_callers(
            &docs,
            &fused,
            query,
            &QueryConfig::default(),
            definitions,
            graph,
        );
        let mut ranked: Vec<(u32, f64)> = fused.into_iter().map(|(k, v)| (k.1, v)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let order: Vec<u32> = ranked.into_iter().map(|(o, _)| o).collect();
        assert_eq!(
            order[..2],
            [1, 2],
            "the message, then where the error is built"
        );

        // The types whose message a chunk writes.
        let named = |kind: ChunkKind, q: &str| {
            let mut d = function_doc(repo, "src/error.rs", "x", "", (1, 2));
            d.kind = kind;
            d.qualified_name = Some(q.into());
            message_owner(&d).map(str::to_owned)
        };
        assert_eq!(
            named(ChunkKind::Impl, "Display for ParseError").as_deref(),
            Some("ParseError")
        );
        assert_eq!(
            named(ChunkKind::Impl, "fmt::Display for Error<T>").as_deref(),
            Some("Error")
        );
        assert_eq!(
            named(ChunkKind::Impl, "From for Error"),
            None,
            "not a message"
        );
        assert_eq!(
            named(ChunkKind::Method, "Error.fmt").as_deref(),
            Some("Error")
        );
        assert_eq!(
            named(ChunkKind::Method, "BadParameter.__str__").as_deref(),
            Some("BadParameter")
        );
        assert_eq!(named(ChunkKind::Method, "Store.Get"), None);
    }

    #[test]
    fn a_config_query_names_its_keys() {
        for (query, keys) in [
            ("REQUESTS_CA_BUNDLE", vec!["REQUESTS_CA_BUNDLE"]),
            ("--no-ignore-vcs flag", vec!["no-ignore-vcs"]),
            ("show_default=True in option help", vec!["show_default"]),
            ("z.config({ jitless: true })", vec!["z.config"]),
            ("RUST_LOG_STYLE=always", vec!["RUST_LOG_STYLE"]),
            ("hooks.init", vec!["hooks.init"]),
            (
                "grep_pcre2 RegexMatcherBuilder::build_many",
                vec!["grep_pcre2", "RegexMatcherBuilder::build_many"],
            ),
            // Plain words and short flags name no key.
            ("PAGER environment variable", vec![]),
            ("rg -z search compressed files", vec![]),
        ] {
            assert_eq!(config_keys(query), keys, "{query}");
        }
    }

    #[test]
    fn a_key_is_spelled_only_as_a_whole() {
        assert!(spells(
            "os.environ.get(\"REQUESTS_CA_BUNDLE\")",
            "REQUESTS_CA_BUNDLE"
        ));
        assert!(spells("long: \"no-ignore-vcs\",", "no-ignore-vcs"));
        assert!(spells("Pass `--no-ignore-vcs` to", "no-ignore-vcs"));
        assert!(!spells("--yes-no-ignore-vcs", "no-ignore-vcs"));
        assert!(!spells("MY_REQUESTS_CA_BUNDLE_PATH", "REQUESTS_CA_BUNDLE"));
        assert!(!spells("--no-ignore-vcs-parent", "no-ignore-vcs"));
        assert!(!spells("requests_ca_bundle", "REQUESTS_CA_BUNDLE"));
    }

    #[test]
    fn a_config_query_weighs_docs_by_its_own_prior() {
        use trawl_core::kind::ChunkKind;
        use trawl_index::testing::function_doc;
        let repo = "github.com/pinojs/pino";
        let mut section = function_doc(
            repo,
            "docs/api.md",
            "depthLimit",
            "#### `depthLimit` (Number)\n\nOption to limit the depth of nested objects.",
            (136, 141),
        );
        section.kind = ChunkKind::Section;
        section.symbol = None;
        section.qualified_name = None;
        let code = function_doc(
            repo,
            "pino.js",
            "pino",
            "const { depthLimit, edgeLimit } = opts",
            (114, 123),
        );
        let docs = [section, code];
        let params = QueryConfig {
            docs_prior: 0.5,
            config_docs_prior: 0.8,
            ..QueryConfig::default()
        };
        let fused = [(0, 0.1), (1, 0.1)];
        let ratio = |query: &str| {
            let f = adjusted(&docs, &fused, query, &params, |_| Vec::new());
            f[&(0, 0)] / f[&(0, 1)]
        };
        assert_eq!(classify("depthLimit: 5"), Intent::Config);
        assert!((ratio("depthLimit: 5") - 0.8).abs() < 1e-9);
        assert!((ratio("how deep are nested objects logged?") - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_key_with_concrete_parts_meets_the_template_that_builds_it() {
        let builds = |lit: &str, key: &str| key_template(lit).is_some_and(|t| builds_key(&t, key));
        // Python, Go, JavaScript, Ruby and Rust placeholders.
        assert!(builds("_{prog_name}_COMPLETE", "_FOO_BAR_COMPLETE"));
        assert!(builds("%s_CONFIG_PATH", "MYAPP_CONFIG_PATH"));
        assert!(builds("%-8s_CONFIG_PATH", "MYAPP_CONFIG_PATH"));
        assert!(builds("%(prefix)s_CONFIG_PATH", "MYAPP_CONFIG_PATH"));
        assert!(builds("${prefix}.timeout", "server.timeout"));
        assert!(builds("#{app}_LOG_LEVEL", "web_log_level"));
        assert!(builds("{}_COMPLETE", "_FOO_COMPLETE"));
        assert!(
            builds("{{{}}}_COMPLETE", "{x}_COMPLETE"),
            "escaped braces are text"
        );
        assert!(
            builds("100%%_{name}_RATE", "100%_cpu_rate"),
            "so is an escaped percent"
        );
        // The template's own text must be there, in its place; a placeholder is a name.
        assert!(!builds("_{prog_name}_COMPLETE", "_FOO_BAR_COMPLETION"));
        assert!(!builds("_{prog_name}_COMPLETE", "FOO_COMPLETE"));
        assert!(!builds("%s_CONFIG_PATH", "_CONFIG_PATH"));
        assert!(!builds("%s_CONFIG_PATH", "MY APP_CONFIG_PATH"));
        // And at least half of the key: `%s_HOME` says little of `MYAPP_HOME`.
        assert!(!builds("%s_HOME", "MYAPP_HOME"));
        // What reads as a key template: one word, a placeholder that closes, four letters of
        // its own.
        assert!(key_template("_{prog_name}_COMPLETE").is_some());
        assert!(key_template("{}_{}").is_none(), "too little of its own");
        assert!(key_template("_COMPLETE").is_none(), "no placeholder");
        assert!(
            key_template("invalid value for {name}").is_none(),
            "a sentence"
        );
        assert!(key_template("_{prog_name_COMPLETE").is_none(), "unclosed");
        assert!(key_template("%(prefix_CONFIG_PATH").is_none(), "unclosed");
        assert!(key_template("ünïcödé_{ñame}_ÇØMPLÉTE").is_some());
        // Many placeholders, each able to take many of the key's characters: matched in one
        // pass, not by trying every way to share the key out.
        let many = template_pieces(&"{}a".repeat(20)).unwrap();
        assert!(builds_key(&many, &"a".repeat(40)));
        assert!(!builds_key(&many, &"a".repeat(39)));
        let text = "complete_var = f\"_{complete_name}_COMPLETE\".upper()";
        let other = "complete_var = os.environ.get(\"COMPLETE\")";
        let docs = [
            trawl_index::testing::function_doc(
                "github.com/pallets/click",
                "core.py",
                "main",
                text,
                (1, 3),
            ),
            trawl_index::testing::function_doc(
                "github.com/pallets/click",
                "env.py",
                "env",
                other,
                (1, 3),
            ),
        ];
        let query = "_FOO_BAR_COMPLETE=bash_source";
        assert_eq!(classify(query), Intent::Config);
        let fused = adjusted(
            &docs,
            &[(0, 0.15), (1, 0.2)],
            query,
            &QueryConfig::default(),
            |_| Vec::new(),
        );
        assert!(fused[&(0, 0)] > fused[&(0, 1)], "{fused:?}");
    }

    #[test]
    fn a_chunk_that_spells_the_key_asked_for_ranks_before_one_that_shares_its_words() {
        use trawl_index::testing::function_doc;
        let repo = "github.com/psf/requests";
        let docs = [
            function_doc(
                repo,
                "src/certs.py",
                "where",
                "def where():\n    # the CA bundle requests trusts\n    return certifi.where()",
                (1, 3),
            ),
            function_doc(
                repo,
                "src/sessions.py",
                "merge_environment_settings",
                "def merge_environment_settings(self, verify):\n    if verify is True:\n        verify = os.environ.get(\"REQUESTS_CA_BUNDLE\")\n    return verify",
                (10, 14),
            ),
            function_doc(
                repo,
                "src/retry.ts",
                "delay",
                "// retry on a timeout after a delay\nconst delay = (attempt) => 0.3 * 2 ** (attempt - 1) * 1000;",
                (20, 21),
            ),
            function_doc(
                repo,
                "src/Ky.ts",
                "shouldRetry",
                "if (error instanceof TimeoutError && !this.#options.retry.retryOnTimeout) {\n    return false;\n}",
                (30, 32),
            ),
        ];
        // The second chunk of a pair ranks before the first, as fused, for `query`.
        let ranked = |query: &str, pair: u32, key_boost: f64| {
            let params = QueryConfig {
                key_boost,
                ..QueryConfig::default()
            };
            let fused = [(pair, 0.09), (pair + 1, 0.07)];
            let scores = adjusted(&docs, &fused, query, &params, |_| Vec::new());
            scores[&(0, pair + 1)] > scores[&(0, pair)]
        };
        assert_eq!(classify("REQUESTS_CA_BUNDLE"), Intent::Config);
        assert!(
            ranked("REQUESTS_CA_BUNDLE", 0, 0.5),
            "the chunk reading the variable comes first"
        );
        assert!(
            !ranked("REQUESTS_CA_BUNDLE", 0, 0.0),
            "without the key match the fused order stands"
        );
        // A setting with its value: the key is what is spelled.
        assert_eq!(classify("retryOnTimeout=false"), Intent::Config);
        assert!(
            ranked("retryOnTimeout=false", 2, 0.5),
            "the chunk reading the option comes first"
        );
        assert!(!ranked("retryOnTimeout=false", 2, 0.0));
        // A name asked alone is a symbol, not a key: its definition is looked up instead.
        assert_eq!(classify("retryOnTimeout"), Intent::Identifier);
        assert!(!ranked("retryOnTimeout", 2, 0.5));
    }

    #[test]
    fn a_commit_message_lends_its_words_to_the_code_it_touched() {
        use trawl_index::testing::function_doc;
        let repo = "github.com/acme/cli";
        let commit = DocRow {
            kind: ChunkKind::Commit,
            ..function_doc(
                repo,
                "",
                "",
                &format!(
                    "Run the root's persistent pre-run hook for child commands\n\nchanged: command.go\n{}",
                    trawl_index::docs::touched_line(&["Command.execute".into()])
                ),
                (1, 4),
            )
        };
        let docs = [
            commit,
            function_doc(
                repo,
                "command.go",
                "Command.execute",
                "func (c *Command) execute(a []string) error {",
                (800, 900),
            ),
            function_doc(
                repo,
                "hooks.go",
                "Hooks.add",
                "func (h *Hooks) add(f func()) {",
                (10, 20),
            ),
        ];
        // Whether `Command.execute`, fused behind `Hooks.add`, ends ahead of it.
        let execute_first = |query: &str, commit_lend: f64| {
            let params = QueryConfig {
                commit_lend,
                ..QueryConfig::default()
            };
            let fused = [(0, 0.05), (1, 0.03), (2, 0.06)];
            let scores = adjusted(&docs, &fused, query, &params, |name| {
                (0..docs.len() as u32)
                    .filter(|&o| {
                        docs[o as usize]
                            .qualified_name
                            .as_deref()
                            .map(normalize_symbol)
                            .as_deref()
                            == Some(name)
                    })
                    .map(|o| (0, o))
                    .collect()
            });
            scores[&(0, 1)] > scores[&(0, 2)]
        };
        let question = "how does the root's pre-run hook get called for a subcommand?";
        assert!(execute_first(question, 1.0));
        assert!(!execute_first(question, 0.0), "without the lending");
        // A question about the change asks for the commit: it lends nothing to the code.
        assert!(!execute_first(
            "why does the root's pre-run hook now run for a subcommand?",
            1.0
        ));
    }

    #[test]
    fn a_citation_is_the_member_not_the_skeleton_around_it() {
        use trawl_index::testing::function_doc;
        let doc = |kind: ChunkKind, path: &str, lines: (u32, u32)| DocRow {
            kind,
            ..function_doc("github.com/acme/shop", path, "x", "x", lines)
        };
        let docs = [
            doc(ChunkKind::ClassSkeleton, "cart.py", (1, 400)),
            doc(ChunkKind::Function, "pay.py", (1, 20)),
            doc(ChunkKind::Method, "cart.py", (120, 140)),
            doc(ChunkKind::ClassSkeleton, "pay.py", (1, 300)),
            doc(ChunkKind::Toc, "cart.py", (1, 500)),
            doc(ChunkKind::ClassSkeleton, "tax.py", (1, 200)),
        ];
        let mut ranked: Vec<(u32, u32, f64)> = (0..docs.len() as u32)
            .map(|o| (0, o, 1.0 - f64::from(o) / 10.0))
            .collect();
        narrow(&mut ranked, |_, o| &docs[o as usize]);
        let order: Vec<u32> = ranked.iter().map(|r| r.1).collect();
        // The method takes the skeleton's place and score, and the skeleton leaves (it is the
        // method's parent: `--expand` attaches it). The skeleton and the table of contents
        // with a narrower chunk of theirs above them leave. Nothing narrower: it stays.
        assert_eq!(order, [2, 1, 5]);
        assert!((ranked[0].2 - 1.0).abs() < 1e-9, "{ranked:?}");
    }

    #[test]
    fn prose_names_symbols_in_code_spans() {
        let text = "Call `Client.retry_policy` or `parse_args()`; see `the docs` and `x`.";
        assert_eq!(named_symbols(text), ["client.retry_policy", "parse_args"]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..proptest::prelude::ProptestConfig::default() })]

        /// Any text, quotes, backslashes and multi-byte characters included, is read without
        /// a panic, and no literal shorter than six bytes counts as a message.
        #[test]
        fn literals_of_any_text(text in r#"(\PC|['"`\\+\n ]){0,300}"#) {
            for lit in literals(&text) {
                proptest::prop_assert!(lit.len() >= 6);
            }
            let _ = message_match(&collapse(&text), &text);
        }

        /// Any query yields keys without a panic, each at least four characters, spelled in
        /// the query itself; any text is read for them without a panic.
        #[test]
        fn keys_of_any_query(query in r#"(\PC|[=:({,"'`_.-]){0,80}"#, text in r"(\PC|[_-]){0,200}") {
            for key in config_keys(&query) {
                proptest::prop_assert!(key.chars().count() >= 4);
                proptest::prop_assert!(query.contains(key.as_str()));
                let _ = spells(&text, &key);
                let wrapped = format!("({key})");
                proptest::prop_assert!(spells(&wrapped, &key));
            }
            let _ = crate::index::spell_symbol(&query);
        }

        /// A message printed from a format string meets the code that holds it, whatever
        /// values fill the placeholders and whichever spelling the language uses.
        #[test]
        fn a_printed_message_meets_its_format_string(
            words in proptest::collection::vec("[a-z]{3,9}", 3..8),
            values in proptest::collection::vec("[A-Za-z0-9_./-]{1,12}", 3..8),
            spelling in 0usize..4,
        ) {
            let hole = ["%s", "{}", "${x}", "%d"][spelling];
            let mut fmt = String::new();
            let mut msg = String::new();
            for (i, w) in words.iter().enumerate() {
                fmt.push_str(w);
                msg.push_str(w);
                if i % 2 == 1 && i + 1 < words.len() {
                    fmt.push_str(&format!(" {hole} "));
                    msg.push_str(&format!(" {} ", values[i % values.len()]));
                } else {
                    fmt.push(' ');
                    msg.push(' ');
                }
            }
            let code = format!("throw new Error(`{}`);", fmt.trim());
            let matched = message_match(&collapse(&msg), &code);
            let letters: usize = words.iter().map(String::len).sum();
            proptest::prop_assert!(letters < 10 || matched > 0, "{msg} / {code}");
        }
    }
}
