//! Identifiers as words: where a compound name (`parseHTTPResponse`, `max_retries`,
//! `no-color`) splits into the words it is made of. The text index's analyzer emits the parts
//! beside the whole; the local embedding model reads them spelled out, as the prose it was
//! trained on.

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

/// `text` with every compound identifier spelled as its words, separated by spaces
/// (`def parse_args(argv)` → `def parse args(argv)`, `res.statusCode` → `res.status Code`);
/// everything else, punctuation and line breaks included, is kept as it is. A general-purpose
/// model's word-piece vocabulary splits `parseArgs` into meaningless pieces (`parse`, `##ar`,
/// `##gs`), and `parse args` into the words a question uses.
pub fn spell_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut rest = text;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    while let Some(start) = rest.find(is_ident) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        let ps = parts(word);
        if ps.len() > 1 {
            for (k, (a, b)) in ps.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                out.push_str(&word[*a..*b]);
            }
        } else if let [(a, b)] = ps.as_slice() {
            // `_private` and `__init__` read as their word.
            out.push_str(&word[*a..*b]);
        } else {
            out.push_str(word);
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    out
}

/// The words of `text`, identifiers spelled as words ([`spell_identifiers`]), one space
/// between words on a line and the line breaks kept; every other character (brackets,
/// operators, quotes, punctuation) dropped.
pub fn plain_words(text: &str) -> String {
    let spelled = spell_identifiers(text);
    let mut out = String::with_capacity(spelled.len());
    for line in spelled.lines() {
        let mut first = true;
        for word in line
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            if !first {
                out.push(' ');
            }
            out.push_str(word);
            first = false;
        }
        if !first {
            out.push('\n');
        }
    }
    out
}

/// A name without its generic arguments: `QueueWorker<W>` → `QueueWorker`; `From<u8> for
/// Id<T>` → `From for Id`. Whitespace runs become one space.
pub fn strip_generics(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    squeeze(&out)
}

/// `text` on one line, each run of whitespace one space.
pub fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_spelled_as_words_and_the_rest_is_kept() {
        assert_eq!(
            spell_identifiers("def parse_args(argv):\n    return self._cmdName"),
            "def parse args(argv):\n    return self.cmd Name"
        );
        assert_eq!(
            spell_identifiers("func (s *Store) GetHTTPResponse() error"),
            "func (s *Store) Get HTTP Response() error"
        );
        assert_eq!(
            spell_identifiers("__init__ MAX_RETRIES base64"),
            "init MAX RETRIES base 64"
        );
        assert_eq!(
            spell_identifiers("“quoted” — ünïcode_wörds ok"),
            "“quoted” — ünïcode wörds ok"
        );
        assert_eq!(spell_identifiers(""), "");
        assert_eq!(spell_identifiers("___"), "___");
    }

    #[test]
    fn plain_words_keep_the_words_and_the_lines() {
        assert_eq!(
            plain_words("if (err) { return next(err); }\n\n  ctx.statusCode = 404;"),
            "if err return next err\nctx status Code 404\n"
        );
        assert_eq!(plain_words("{}();"), "");
    }

    proptest::proptest! {
        #[test]
        fn spelling_keeps_every_character_that_is_not_an_underscore(s in "\\PC{0,80}") {
            let spelled = spell_identifiers(&s);
            let keep = |t: &str| t.chars().filter(|c| *c != '_' && !c.is_whitespace()).collect::<String>();
            proptest::prop_assert_eq!(keep(&spelled), keep(&s));
        }
    }
}
