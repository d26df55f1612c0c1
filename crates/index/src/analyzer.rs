//! The identifier-aware analyzer of the text index.
//!
//! Code is searched by identifiers written in every convention. Each word (a run of letters,
//! digits, `_` and `-`) is emitted lowercased as it is, and, when it has parts, each part too:
//! camelCase, PascalCase, snake_case, kebab-case and letter/digit boundaries, with acronyms kept
//! whole (`parseHTTPResponse` → `parsehttpresponse`, `parse`, `http`, `response`). Parts take
//! consecutive positions, so the phrase "parse http response" matches the identifier, and so do
//! `parsehttpresponse` and `parseHTTPResponse` typed as a query.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// The analyzer's name in the tantivy index.
pub const NAME: &str = "code";

/// See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct CodeTokenizer;

pub use trawl_core::words::parts;

/// The tokens of `text`, as (text, byte from, byte to, position).
fn analyze(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut position = 0usize;
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let push = |tokens: &mut Vec<Token>, s: &str, from: usize, to: usize, pos: usize| {
        tokens.push(Token {
            offset_from: from,
            offset_to: to,
            position: pos,
            text: s.to_lowercase(),
            position_length: 1,
        });
    };
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().expect("in bounds");
        if !is_word(c) {
            i += c.len_utf8();
            continue;
        }
        let start = i;
        while i < text.len() {
            let c = text[i..].chars().next().expect("in bounds");
            if !is_word(c) {
                break;
            }
            i += c.len_utf8();
        }
        let word = text[start..i].trim_matches(|c| c == '_' || c == '-');
        if word.is_empty() {
            continue;
        }
        let offset = start + text[start..i].find(word).unwrap_or(0);
        let ps = parts(word);
        push(&mut tokens, word, offset, offset + word.len(), position);
        if ps.len() > 1 {
            for (k, (a, b)) in ps.iter().enumerate() {
                push(
                    &mut tokens,
                    &word[*a..*b],
                    offset + a,
                    offset + b,
                    position + k,
                );
            }
            position += ps.len();
        } else {
            position += 1;
        }
    }
    tokens
}

/// The token stream over precomputed tokens.
pub struct CodeTokenStream {
    tokens: Vec<Token>,
    index: usize,
}

impl TokenStream for CodeTokenStream {
    fn advance(&mut self) -> bool {
        if self.index < self.tokens.len() {
            self.index += 1;
            true
        } else {
            false
        }
    }
    fn token(&self) -> &Token {
        &self.tokens[self.index - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.index - 1]
    }
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream {
        CodeTokenStream {
            tokens: analyze(text),
            index: 0,
        }
    }
}

/// The words of `text` one per position, in order: for a split identifier its parts, not the
/// whole (`parseHTTPResponse now` → parse, http, response, now). Phrases are made of these.
pub fn word_sequence(text: &str) -> Vec<String> {
    words_of(analyze(text))
}

/// [`terms`] and [`word_sequence`] of `text` from one analysis.
pub fn terms_and_words(text: &str) -> (Vec<String>, Vec<String>) {
    let tokens = analyze(text);
    let terms = tokens.iter().map(|t| t.text.clone()).collect();
    (terms, words_of(tokens))
}

fn words_of(tokens: Vec<Token>) -> Vec<String> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for t in tokens {
        match out.last_mut() {
            Some((p, w)) if *p == t.position => *w = t.text,
            _ => out.push((t.position, t.text)),
        }
    }
    out.into_iter().map(|(_, w)| w).collect()
}

/// Other inflections of an English word, both ways (`swapped` → swap, swaps, swapping;
/// `retry` → retries, retried), for the query side only: the index keeps words as written, so
/// a question phrased in one tense still meets code and docstrings written in another. Only
/// for lowercase alphabetic words of 4 letters or more; never includes `word` itself.
pub fn inflections(word: &str) -> Vec<String> {
    if word.len() < 4 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return Vec::new();
    }
    let vowel = |c: u8| matches!(c, b'a' | b'e' | b'i' | b'o' | b'u');
    // Candidate stems: strip one inflection (undoing a doubled final consonant); after -ed
    // and -ing the stem may have lost an `e` (handled → handle).
    let mut stems = vec![word.to_owned()];
    for (suffix, replace) in [
        ("ies", "y"),
        ("ied", "y"),
        ("ing", ""),
        ("ed", ""),
        ("es", ""),
        ("s", ""),
    ] {
        let Some(base) = word.strip_suffix(suffix) else {
            continue;
        };
        if base.len() < 3 || word.ends_with("ss") {
            break;
        }
        let stem = format!("{base}{replace}");
        let b = stem.as_bytes();
        let n = b.len();
        if replace.is_empty()
            && n >= 3
            && b[n - 1] == b[n - 2]
            && !vowel(b[n - 1])
            && !matches!(b[n - 1], b's' | b'l' | b'z')
        {
            stems.push(stem[..n - 1].to_owned());
        }
        if matches!(suffix, "ing" | "ed") {
            stems.push(format!("{stem}e"));
        }
        stems.push(stem);
        break;
    }
    let mut out = Vec::new();
    for stem in &stems {
        let b = stem.as_bytes();
        let n = b.len();
        let last = b[n - 1];
        out.push(stem.clone());
        if let Some(base) = stem
            .strip_suffix('y')
            .filter(|_| n >= 2 && !vowel(b[n - 2]))
        {
            out.extend([
                format!("{base}ies"),
                format!("{base}ied"),
                format!("{stem}ing"),
            ]);
        } else if let Some(base) = stem.strip_suffix('e') {
            out.extend([format!("{stem}s"), format!("{stem}d"), format!("{base}ing")]);
        } else {
            // A short vowel before a final consonant doubles it: swap → swapped.
            let double = n >= 3
                && !vowel(last)
                && vowel(b[n - 2])
                && !vowel(b[n - 3])
                && !matches!(last, b'w' | b'x' | b'y');
            let ed = if double {
                format!("{stem}{}", last as char)
            } else {
                stem.clone()
            };
            let es = if matches!(last, b's' | b'x' | b'z' | b'h') {
                "es"
            } else {
                "s"
            };
            out.extend([format!("{stem}{es}"), format!("{ed}ed"), format!("{ed}ing")]);
            if double {
                out.extend([format!("{stem}ed"), format!("{stem}ing")]);
            }
        }
    }
    out.retain(|w| w != word);
    out.sort();
    out.dedup();
    out
}

/// The terms of `text`, in order (for tests and query explanation).
pub fn terms(text: &str) -> Vec<String> {
    analyze(text).into_iter().map(|t| t.text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_analysis_gives_both_terms_and_words() {
        let text = "parseHTTPResponse now, retry_count += 1";
        assert_eq!(terms_and_words(text), (terms(text), word_sequence(text)));
    }

    #[test]
    fn identifiers_split_in_every_convention_and_keep_the_whole() {
        assert_eq!(
            terms("parseHTTPResponse"),
            ["parsehttpresponse", "parse", "http", "response"]
        );
        assert_eq!(
            terms("ParseHttpResponse"),
            ["parsehttpresponse", "parse", "http", "response"]
        );
        assert_eq!(
            terms("parse_http_response"),
            ["parse_http_response", "parse", "http", "response"]
        );
        assert_eq!(
            terms("parse-http-response"),
            ["parse-http-response", "parse", "http", "response"]
        );
        assert_eq!(terms("utf8Decode"), ["utf8decode", "utf", "8", "decode"]);
        assert_eq!(terms("__init__"), ["init"]);
        assert_eq!(terms("HTTP"), ["http"]);
        assert_eq!(
            terms("self.max_retries = 3"),
            ["self", "max_retries", "max", "retries", "3"]
        );
        assert_eq!(terms("größe_ändern"), ["größe_ändern", "größe", "ändern"]);
    }

    #[test]
    fn inflections_go_both_ways() {
        let has = |w: &str, v: &str| inflections(w).contains(&v.to_owned());
        assert!(has("swapped", "swap") && has("swap", "swapped") && has("swap", "swapping"));
        assert!(has("retries", "retry") && has("retry", "retries") && has("retry", "retried"));
        assert!(has("handled", "handle") && has("handle", "handling") && has("handle", "handles"));
        assert!(has("parsing", "parse") || has("parsing", "pars"));
        assert!(has("matches", "match") && has("match", "matches"));
        assert!(has("connections", "connection"));
        assert!(inflections("http").iter().all(|w| w.starts_with("http")));
        assert!(
            inflections("class").iter().all(|w| w.starts_with("class")),
            "{:?}",
            inflections("class")
        );
        assert!(inflections("os").is_empty() && inflections("getLogger").is_empty());
    }

    #[test]
    fn word_sequences_keep_parts_and_drop_wholes() {
        assert_eq!(
            word_sequence("Invalid isoformat string: parseHTTPResponse"),
            [
                "invalid",
                "isoformat",
                "string",
                "parse",
                "http",
                "response"
            ]
        );
    }

    #[test]
    fn parts_take_consecutive_positions() {
        let t = analyze("a parseHTTPResponse b");
        let pos: Vec<(String, usize)> = t.into_iter().map(|t| (t.text, t.position)).collect();
        assert_eq!(
            pos,
            [
                ("a".into(), 0),
                ("parsehttpresponse".into(), 1),
                ("parse".into(), 1),
                ("http".into(), 2),
                ("response".into(), 3),
                ("b".into(), 4)
            ]
        );
    }
}
