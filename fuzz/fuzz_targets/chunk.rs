//! Arbitrary bytes in every language: the chunker never panics and every invariant holds
//! (no chunk over the ceiling, every non-blank line covered, text equals its byte range).
//! The first byte picks the language and the ceiling; the rest is the file, decoded lossily.

#![no_main]

use libfuzzer_sys::fuzz_target;
use trawl_chunker::{Options, Strategy, check, chunk};

const LANGUAGES: &[&str] = &[
    "python", "rust", "go", "java", "javascript", "typescript", "tsx", "c", "cpp", "csharp",
    "ruby", "php", "bash", "lua", "markdown", "text",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let language = LANGUAGES[selector as usize % LANGUAGES.len()];
    let ceiling = 64 + (selector as usize / LANGUAGES.len()) * 64;
    let src = String::from_utf8_lossy(rest);
    let opts = Options { ceiling, floor: ceiling / 8, ..Options::default() };
    let chunked = chunk("fuzz", Some(language), &src, Strategy::Ast, &opts);
    if let Err(e) = check::invariants(&src, &chunked, ceiling) {
        panic!("{language} @ {ceiling}: {e}");
    }
});
