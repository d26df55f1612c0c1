//! # trawl-chunker
//!
//! Splits a source file into the units a person or an LLM wants back from a search: one
//! definition per chunk — function, method, class, interface, impl — with its decorators,
//! docstring and leading comments. Never a character window (that baseline exists only for
//! comparisons, [`Strategy::Windows`]).
//!
//! The rules, all enforced by tests:
//! - a definition that fits the ceiling is one chunk; a container that fits (a small class or
//!   `impl`) lists its members' qualified names (`Walker.run`), so that they find it;
//! - a definition is named as its reader names it: a Go method by its receiver
//!   (`Store.Get`), a function defined by assignment by its target (`res.status = function
//!   …` → `res.status`, `Foo.prototype.bar` → `Foo.bar`), a C++ out-of-line method by its
//!   class; an object literal with methods (`const proto = module.exports = {…}`) is a scope
//!   of method chunks; Python `f = lambda …` and `f = partial(…)` are functions;
//! - an oversize container (class, impl, trait, interface, namespace) becomes one chunk per
//!   member, chunks for its own code (header, fields, closing lines), and a **skeleton**:
//!   signature, fields, every member's signature and docstring, bodies elided;
//! - an oversize function splits at statement boundaries; every part keeps the symbol, a
//!   `part i/n` and the signature; a part under the floor (`return rv`, a signature alone)
//!   joins a neighbour that has room, and a run of comment lines is cut where it fills a part;
//! - code between definitions (imports, constants, `if __name__ == …`) becomes its own chunks,
//!   however small, listing the named constants it declares as its members; only closers and comments under the floor (`}`, `#endif`, `end`) merge with
//!   a neighbouring definition, and tiny Markdown sections and text paragraphs merge with the
//!   next; nothing is dropped: every non-blank line is inside a chunk that is not a skeleton or
//!   a table of contents;
//! - each source file also gets a table-of-contents chunk (path, imports, symbols);
//! - Markdown splits on headings and keeps the heading trail; plain text splits on paragraphs;
//!   with a sentence model ([`Options::meaning`]), prose over the ceiling is cut where its topic
//!   changes;
//! - no chunk's text exceeds the ceiling (2,000 bytes by default).
//!
//! The key design decision is **one walker for every language**: what differs between
//! languages is declared as data in [`lang`] (node kinds for definitions, containers,
//! wrappers, comments, imports, calls), not written as a walker per language.
//!
//! Robustness is deliberate: a syntax error still yields chunks (tree-sitter recovers); a
//! parse that runs past its time budget, nesting deeper than the depth limit, a line longer
//! than the ceiling, or a language with no grammar falls back to simpler splitting, with a
//! [`Note`] saying so. Nothing here recurses on the syntax tree without a depth bound.

pub mod ast;
pub mod check;
pub mod corpus;
pub mod lang;
pub mod markdown;
pub mod meaning;
pub mod records;
pub mod text;

use std::time::Duration;

pub use lang::Kind;

/// The version of the chunking rules. Bump it when the chunks a file produces change: the
/// fetcher then sends every indexed file again (`RunOptions::chunker_version` of
/// trawl-fetcher), so that an upgrade reaches files that did not change. It is not part of
/// the content hash: a chunk whose header and text stay the same keeps its vector.
pub const CHUNKER_VERSION: &str = "25";

/// The version of what the embedder is given for a chunk (its header and text, and how they
/// are joined); part of every content hash. Bump it only when that changes: every chunk of
/// every repository is embedded again.
pub const EMBED_INPUT_VERSION: &str = "2";

/// Limits of the chunker.
#[derive(Clone, Debug)]
pub struct Options {
    /// Pieces smaller than this many bytes merge with a neighbour.
    pub floor: usize,
    /// No chunk's text is larger than this many bytes.
    pub ceiling: usize,
    /// A parse that takes longer falls back to text chunking.
    pub parse_timeout: Duration,
    /// Containers nested deeper than this are split as plain code.
    pub max_depth: usize,
    /// Prose over the ceiling (a Markdown section, a text file) is cut where its topic
    /// changes ([`meaning`]); `None`: at paragraphs, by size.
    pub meaning: Option<meaning::Meaning>,
}

impl Options {
    /// These options with prose cut by size only: for text that is not prose (data,
    /// configuration, code that could not be parsed), where a change of topic means nothing
    /// and a sentence model would read every line.
    #[must_use]
    pub fn by_size(&self) -> Self {
        Self {
            meaning: None,
            ..self.clone()
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            floor: 200,
            ceiling: 2000,
            parse_timeout: Duration::from_secs(5),
            max_depth: 48,
            meaning: None,
        }
    }
}

/// How to chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Definitions, sections, paragraphs: the product.
    #[default]
    Ast,
    /// Fixed windows of 1,000 characters with 100 of overlap: the naive baseline.
    Windows,
}

/// Something the chunker had to do on purpose, counted per file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Note {
    /// No grammar for the language: chunked as text.
    NoGrammar,
    /// The parse exceeded its time budget: chunked as text.
    ParseTimeout,
    /// The file has syntax errors (chunks still follow the recovered tree).
    SyntaxErrors,
    /// Nesting deeper than the depth limit was split as plain code.
    DepthLimit,
    /// A single line longer than the ceiling was cut inside the line.
    OversizeLine,
    /// Prose over the ceiling was cut where its topic changes.
    SplitByMeaning,
    /// The sentence model failed: prose over the ceiling was cut by size.
    MeaningUnavailable,
}

impl Note {
    pub fn as_str(self) -> &'static str {
        match self {
            Note::NoGrammar => "no-grammar",
            Note::ParseTimeout => "parse-timeout",
            Note::SyntaxErrors => "syntax-errors",
            Note::DepthLimit => "depth-limit",
            Note::OversizeLine => "oversize-line",
            Note::SplitByMeaning => "split-by-meaning",
            Note::MeaningUnavailable => "meaning-unavailable",
        }
    }
}

/// One step of a scope chain: `class QueueWorker`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub kind: Kind,
    pub name: String,
}

impl Scope {
    /// What the scope contributes to a qualified name: see [`qualifier`].
    pub fn qualifier(&self) -> &str {
        qualifier(self.kind, &self.name)
    }
}

/// What a container named `name` contributes to its members' qualified names: its name,
/// except that the members of a trait's `impl` are the type's (`impl Display for Walker`
/// qualifies `Walker.fmt`).
pub fn qualifier(kind: Kind, name: &str) -> &str {
    match name.rsplit_once(" for ") {
        Some((_, ty)) if kind == Kind::Impl => ty,
        _ => name,
    }
}

/// A definition inside a container small enough to stay one chunk: not a chunk of its own,
/// but addressable by its qualified name (`Walker.run`), which leads to the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub kind: Kind,
    pub qualified_name: String,
    /// Where the member starts in the file.
    pub start: usize,
}

/// A chunk before it becomes a record: byte range, text, symbol and graph metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub kind: Kind,
    pub symbol: Option<String>,
    /// Enclosing definitions, outermost first (not including this piece).
    pub scope: Vec<Scope>,
    /// The owner the definition itself names, outside any enclosing scope: a Go method's
    /// receiver type (`Store`), the object a JavaScript function is assigned to
    /// (`res.status = function …` → `res`), a C++ out-of-line method's class (`Foo::bar`).
    pub owner: Option<String>,
    pub start: usize,
    pub end: usize,
    /// The code as it is in the file (`src[start..end]`), or generated text for skeletons and
    /// tables of contents.
    pub text: String,
    /// `(i, n)` for part i of n of an oversize definition.
    pub part: Option<(u32, u32)>,
    /// The definition's signature, on parts of an oversize definition.
    pub signature: Option<String>,
    /// Index of the parent piece (a container's skeleton), if any.
    pub parent: Option<usize>,
    pub calls: Vec<String>,
    /// The imports this piece uses (else the file's).
    pub imports: Vec<String>,
    /// For Markdown: the heading trail.
    pub trail: Vec<String>,
    /// The definitions inside a container that stays one chunk.
    pub members: Vec<Member>,
}

impl Piece {
    fn new(kind: Kind, start: usize, end: usize, text: String) -> Self {
        Self {
            kind,
            symbol: None,
            scope: Vec::new(),
            owner: None,
            start,
            end,
            text,
            part: None,
            signature: None,
            parent: None,
            calls: Vec::new(),
            imports: Vec::new(),
            trail: Vec::new(),
            members: Vec::new(),
        }
    }

    /// `QueueWorker.drain`: the scope chain, the owner and the symbol.
    pub fn qualified_name(&self) -> Option<String> {
        let symbol = self.symbol.as_ref()?;
        let mut parts: Vec<&str> = self.scope.iter().map(Scope::qualifier).collect();
        parts.extend(self.owner.as_deref());
        parts.push(symbol);
        Some(parts.join("."))
    }

    /// True for pieces whose text is not a span of the file.
    pub fn is_generated(&self) -> bool {
        matches!(self.kind, Kind::ClassSkeleton | Kind::Toc)
    }
}

/// The chunks of one file.
#[derive(Clone, Debug, Default)]
pub struct Chunked {
    pub pieces: Vec<Piece>,
    pub notes: Vec<Note>,
    /// The file's import statements.
    pub imports: Vec<String>,
}

/// Chunks `src` (the file at `path`, in `language`) with `strategy`.
pub fn chunk(
    path: &str,
    language: Option<&str>,
    src: &str,
    strategy: Strategy,
    opts: &Options,
) -> Chunked {
    if strategy == Strategy::Windows {
        return Chunked {
            pieces: text::windows(src, 1000, 100),
            ..Chunked::default()
        };
    }
    // A test's fixture text (`tests/data/sherlock.txt`) is data to the suite: cut by size.
    let by_size;
    let opts = if opts.meaning.is_some() && trawl_core::role::in_tests(path) {
        by_size = opts.by_size();
        &by_size
    } else {
        opts
    };
    match language {
        Some("markdown") => markdown::chunk(src, opts),
        Some(l) => {
            if let Some((spec, Some(grammar))) = lang::spec(l).map(|s| (s, s.language)) {
                ast::chunk(spec, &grammar(), path, src, opts)
            } else if let Some(d) = lang::dynamic(l) {
                ast::chunk(d.spec, &d.language, path, src, opts)
            } else if matches!(l, "text" | "rst") {
                text::chunk(src, opts)
            } else {
                // CSV, YAML, TOML, logs…: paragraphs by size, not sentences by meaning.
                let mut c = text::chunk(src, &opts.by_size());
                c.notes.push(Note::NoGrammar);
                c
            }
        }
        None => {
            let mut c = text::chunk(src, opts);
            c.notes.push(Note::NoGrammar);
            c
        }
    }
}

/// Whether chunking this file may ask [`Options::meaning`]'s sentence model: prose (Markdown,
/// plain text, reStructuredText, a file of no known language) longer than the ceiling, outside
/// the tests, with the `ast` strategy. Every file [`chunk`] sends to the model passes it (a
/// test holds the two together), so a caller can chunk the others first when the model is
/// slow.
pub fn may_use_meaning(
    path: &str,
    language: Option<&str>,
    len: usize,
    strategy: Strategy,
    opts: &Options,
) -> bool {
    let prose = match language {
        Some("markdown") | None => true,
        Some(l) => {
            lang::spec(l).and_then(|s| s.language).is_none()
                && lang::dynamic(l).is_none()
                && matches!(l, "text" | "rst")
        }
    };
    strategy == Strategy::Ast
        && opts.meaning.is_some()
        && len > opts.ceiling
        && prose
        && !trawl_core::role::in_tests(path)
}

#[cfg(test)]
mod definition_tests;
#[cfg(test)]
mod tests;
