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

/// Splits `word` at snake/kebab separators, case changes and letter/digit boundaries.
/// Returns byte ranges of the parts.
pub fn parts(word: &str) -> Vec<(usize, usize)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Class {
        Lower,
        Upper,
        Digit,
        Sep,
    }
    let class = |c: char| {
        if c == '_' || c == '-' {
            Class::Sep
        } else if c.is_numeric() {
            Class::Digit
        } else if c.is_uppercase() {
            Class::Upper
        } else {
            Class::Lower
        }
    };
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, &(at, c)) in chars.iter().enumerate() {
        let cls = class(c);
        if cls == Class::Sep {
            if let Some(s) = start.take() {
                out.push((s, at));
            }
            continue;
        }
        if let Some(s) = start {
            let prev = class(chars[i - 1].1);
            let next = chars.get(i + 1).map(|&(_, n)| class(n));
            let boundary = match (prev, cls) {
                (Class::Lower, Class::Upper)
                | (Class::Digit, Class::Lower | Class::Upper)
                | (Class::Lower | Class::Upper, Class::Digit) => true,
                // The last capital of an acronym starts the next word: HTTPResponse.
                (Class::Upper, Class::Upper) => next == Some(Class::Lower),
                _ => false,
            };
            if boundary {
                out.push((s, at));
                start = Some(at);
            }
        } else {
            start = Some(at);
        }
    }
    if let Some(s) = start {
        out.push((s, word.len()));
    }
    out
}

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
    let mut out: Vec<(usize, String)> = Vec::new();
    for t in analyze(text) {
        match out.last_mut() {
            Some((p, w)) if *p == t.position => *w = t.text,
            _ => out.push((t.position, t.text)),
        }
    }
    out.into_iter().map(|(_, w)| w).collect()
}

/// The terms of `text`, in order (for tests and query explanation).
pub fn terms(text: &str) -> Vec<String> {
    analyze(text).into_iter().map(|t| t.text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
