//! The one syntax-tree walker. See the crate docs for the rules and [`crate::lang`] for what
//! each language declares.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Instant;

use tree_sitter::{Node, Parser, Tree};

use crate::lang::{Kind, Spec};
use crate::text::{split_lines, trim};
use crate::{Chunked, Member, Note, Options, Piece, Scope};
use trawl_core::words::{squeeze, strip_generics};

/// Parses `src`, giving up after the time budget.
pub fn parse(language: &tree_sitter::Language, src: &str, opts: &Options) -> Option<Tree> {
    parse_in(language, src, opts, None)
}

/// `src` parsed within `opts.parse_timeout`; with a `range`, as if only that part of it
/// were there (node positions stay the file's).
fn parse_in(
    language: &tree_sitter::Language,
    src: &str,
    opts: &Options,
    range: Option<tree_sitter::Range>,
) -> Option<Tree> {
    let mut parser = Parser::new();
    parser.set_language(language).ok()?;
    if let Some(r) = range {
        parser.set_included_ranges(&[r]).ok()?;
    }
    let t0 = Instant::now();
    let budget = opts.parse_timeout;
    let mut progress = |_: &tree_sitter::ParseState| {
        if t0.elapsed() > budget {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let bytes = src.as_bytes();
    parser.parse_with_options(
        &mut |i, _| bytes.get(i..).unwrap_or_default(),
        None,
        Some(tree_sitter::ParseOptions::new().progress_callback(&mut progress)),
    )
}

/// Macro invocations that hold items.
const ITEM_MACRO_NESTING: usize = 3;

/// Rust: the item-level macro invocations of `tree` whose braces hold items
/// (`cfg_rt! { pub fn spawn … }`, `quickcheck! { fn prop … }`), each with the same source
/// parsed again inside its braces alone (tree-sitter reads a macro's body as tokens), keyed
/// by the invocation's byte range. A body that does not parse cleanly as items, or defines
/// nothing, is left as the tokens it is; invocations inside those bodies are found too, a
/// few levels deep.
fn item_macros(
    language: &tree_sitter::Language,
    tree: &Tree,
    src: &str,
    opts: &Options,
) -> Vec<((usize, usize), Tree)> {
    let mut out: Vec<((usize, usize), Tree)> = Vec::new();
    let mut found: Vec<((usize, usize), tree_sitter::Range)> = Vec::new();
    // Item-level invocations reachable through items (modules, impls) in one tree.
    let scan = |root: Node, found: &mut Vec<((usize, usize), tree_sitter::Range)>| {
        let mut stack = vec![(root, 0usize)];
        while let Some((n, d)) = stack.pop() {
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                match child.kind() {
                    "macro_invocation" => {
                        let Some(tt) =
                            child.named_child((child.named_child_count() as u32).saturating_sub(1))
                        else {
                            continue;
                        };
                        let (s, e) = (tt.start_byte(), tt.end_byte());
                        let body = &src[s..e];
                        if tt.kind() != "token_tree"
                            || tt.has_error()
                            || body.len() < 3
                            || !body.starts_with('{')
                            || !body.ends_with('}')
                        {
                            continue;
                        }
                        let (mut sp, mut ep) = (tt.start_position(), tt.end_position());
                        sp.column += 1;
                        ep.column = ep.column.saturating_sub(1);
                        found.push((
                            (child.start_byte(), child.end_byte()),
                            tree_sitter::Range {
                                start_byte: s + 1,
                                end_byte: e - 1,
                                start_point: sp,
                                end_point: ep,
                            },
                        ));
                    }
                    "mod_item" | "impl_item" | "trait_item" | "declaration_list" if d < 4 => {
                        stack.push((child, d + 1));
                    }
                    _ => {}
                }
            }
        }
    };
    scan(tree.root_node(), &mut found);
    let mut level = 0;
    while !found.is_empty() && level < ITEM_MACRO_NESTING {
        let mut next = Vec::new();
        for (key, range) in found.drain(..) {
            let Some(t) = parse_in(language, src, opts, Some(range)) else {
                continue;
            };
            let keep = {
                let root = t.root_node();
                let mut c = root.walk();
                let defines = root.named_children(&mut c).any(|n| {
                    !matches!(
                        n.kind(),
                        "line_comment" | "block_comment" | "macro_invocation" | "attribute_item"
                    )
                });
                let keep = !root.has_error() && defines;
                if keep {
                    scan(root, &mut next);
                }
                keep
            };
            if keep {
                out.push((key, t));
            }
        }
        found = next;
        level += 1;
    }
    out
}

/// Chunks a source file in a language with a grammar.
pub fn chunk(
    spec: &'static Spec,
    language: &tree_sitter::Language,
    path: &str,
    src: &str,
    opts: &Options,
) -> Chunked {
    let Some(tree) = parse(language, src, opts) else {
        let mut c = crate::text::chunk(src, &opts.by_size());
        c.notes.push(Note::ParseTimeout);
        return c;
    };
    let root = tree.root_node();
    let inner = if spec.item_macros {
        item_macros(language, &tree, src, opts)
    } else {
        Vec::new()
    };
    let mut expansions = HashMap::new();
    for (range, t) in &inner {
        let r = t.root_node();
        let mut c = r.walk();
        expansions.insert(*range, r.named_children(&mut c).collect());
    }
    let mut w = Walker {
        spec,
        src,
        opts,
        out: Vec::new(),
        notes: Vec::new(),
        expansions,
        stem: import_name(module_name(path)),
    };
    if root.has_error() {
        w.notes.push(Note::SyntaxErrors);
    }
    let children = w.children(root, 0);
    w.block(&children, (0, src.len()), &[], None, None, None, 0);

    // Calls and imports: one pass over the whole tree.
    let (calls, imports) = w.calls_and_imports(root);
    // Which imports bind which names: one pass over each piece's identifiers finds the
    // imports it uses.
    let mut by_name: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (i, import) in imports.iter().enumerate() {
        for name in import_names(import) {
            by_name.entry(name).or_default().push(i);
        }
    }
    let mut pieces = w.out;
    for p in &mut pieces {
        if p.is_generated() {
            p.imports.clone_from(&imports);
            continue;
        }
        let lo = calls.partition_point(|(pos, _)| *pos < p.start);
        let hi = calls.partition_point(|(pos, _)| *pos < p.end);
        for (_, name) in &calls[lo..hi] {
            if !p.calls.contains(name) && p.calls.len() < 64 {
                p.calls.push(name.clone());
            }
        }
        let mut used = vec![false; imports.len()];
        if !by_name.is_empty() {
            for word in identifiers(&p.text) {
                for &i in by_name.get(word).map_or(&[][..], Vec::as_slice) {
                    used[i] = true;
                }
            }
        }
        p.imports = imports
            .iter()
            .zip(&used)
            .filter(|(_, u)| **u)
            .map(|(i, _)| i.clone())
            .collect();
        if p.imports.is_empty() {
            p.imports = imports.iter().take(12).cloned().collect();
        }
    }
    let toc = toc(path, &pieces, &imports, src, opts.ceiling);
    pieces.extend(toc);
    let mut notes = w.notes;
    notes.sort();
    notes.dedup();
    Chunked {
        pieces,
        notes,
        imports,
    }
}

/// One item of a block: a definition (with its attached comments and attributes), or code.
#[derive(Clone, Copy)]
struct Item<'t> {
    start: usize,
    end: usize,
    node: Node<'t>,
    /// `Some` for definitions: the definition node inside any wrapper, and its kind.
    def: Option<(Node<'t>, Kind)>,
}

struct Walker<'s> {
    spec: &'static Spec,
    src: &'s str,
    opts: &'s Options,
    out: Vec<Piece>,
    notes: Vec<Note>,
    /// The items an item-level macro invocation holds, by the invocation's byte range
    /// ([`item_macros`]).
    expansions: HashMap<(usize, usize), Vec<Node<'s>>>,
    /// The name a module's anonymous default export (`export default function (…)`,
    /// `module.exports = (…) => …`) is imported by: the file's name without its extension,
    /// a kebab-case name in camelCase (`bind` for `lib/helpers/bind.js`, `isStream` for
    /// `lib/is-stream.js`).
    stem: String,
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// Closers and preprocessor ends: a few short lines with nothing worth finding on their own.
fn is_trivial(code: &str) -> bool {
    let lines: Vec<&str> = code
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.len() <= 2
        && lines.iter().all(|l| {
            !l.chars().any(char::is_alphanumeric)
                || (l.len() <= 60
                    && ["#endif", "#else", "end", "//", "/*", "*", "# ", "--"]
                        .iter()
                        .any(|c| l.starts_with(c))
                    && !l.starts_with("#end "))
        })
}

/// One line that opens a block whose definitions follow: a Python conditional (`if …:`,
/// `elif …:`, `else:`, `try:`, `except …:`, `finally:`, a trailing comment allowed) or a
/// Rust item macro (`cfg_rt! {`).
fn is_block_head(code: &str) -> bool {
    let code = code.trim();
    if code.contains('\n') || code.len() > 160 {
        return false;
    }
    if let Some(name) = code
        .strip_suffix('{')
        .map(str::trim_end)
        .and_then(|c| c.strip_suffix('!'))
    {
        return !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    }
    let line = code.split(" #").next().unwrap_or(code).trim_end();
    // Ruby's `class << self`, whose methods are read as the class's own.
    if line.split_whitespace().eq(["class", "<<", "self"]) {
        return true;
    }
    let word = line
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    line.ends_with(':') && matches!(word, "if" | "elif" | "else" | "try" | "except" | "finally")
}

fn is_doc_comment(comment: &str) -> bool {
    comment.starts_with("/**") && !comment.starts_with("/**/") && comment.ends_with("*/")
}

/// How good a place the comment line at `at` is to cut a run of comment lines (lower is
/// better): before a Markdown heading (`//! ## Proxies`) best, then after a comment marker
/// alone (`//!`, `///`, `#`) or a blank line, then anywhere.
fn comment_break(src: &str, at: usize) -> u8 {
    let words = |line: &str| {
        let l = line.trim_start();
        let l = ["//!", "///", "//", "#", "--", "*"]
            .iter()
            .find_map(|m| l.strip_prefix(m))
            .unwrap_or(l);
        l.trim().to_owned()
    };
    let before = src[..at].strip_suffix('\n').unwrap_or(&src[..at]);
    let prev = &before[before.rfind('\n').map_or(0, |i| i + 1)..];
    let line = src[at..].lines().next().unwrap_or("");
    // A heading, not a doctest's hidden line (`# Ok(())`, `# use std::io;`).
    let heading = |w: &str| {
        let title = w.trim_start_matches('#');
        title.len() < w.len()
            && title.starts_with(' ')
            && title.trim_start().starts_with(|c: char| c.is_uppercase())
            && !title.trim_end().ends_with([';', '{', '}', '(', ')'])
    };
    if heading(&words(line)) {
        0
    } else if words(prev).is_empty() {
        1
    } else {
        2
    }
}

fn has_blank_line(gap: &str) -> bool {
    gap.matches('\n').count() >= 2
}

impl<'s> Walker<'s> {
    fn text(&self, n: Node) -> &'s str {
        &self.src[n.byte_range()]
    }

    fn note(&mut self, n: Note) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// The children of `node`, with transparent nodes (`#ifdef`, `extern "C"`) replaced by
    /// their own children, to a bounded depth; in JavaScript, an immediately invoked function
    /// at this level by the statements of the functions it runs ([`iife_bodies`]).
    fn children(&self, node: Node<'s>, depth: usize) -> Vec<Node<'s>> {
        let mut out = Vec::new();
        let mut cursor = node.walk();
        for c in node.children(&mut cursor) {
            if self.spec.transparent.contains(&c.kind()) && depth < self.opts.max_depth {
                out.extend(self.children(c, depth + 1));
            } else if let Some(body) = self.class_methods_block(c)
                && depth < self.opts.max_depth
            {
                // Ruby's `class << self … end`: its methods are the class's own (`Store.shared`),
                // read as if written with `def self.shared`; its opening and `end` are code.
                let mut inner = c.walk();
                for part in c.children(&mut inner) {
                    if part == body {
                        out.extend(self.children(body, depth + 1));
                    } else {
                        out.push(part);
                    }
                }
            } else {
                out.extend(self.children_of_one(c, depth));
            }
        }
        out
    }

    /// Ruby: the body of `class << self … end`, the block of a class's own methods.
    fn class_methods_block<'t>(&self, node: Node<'t>) -> Option<Node<'t>> {
        if node.kind() != "singleton_class"
            || node
                .child_by_field_name("value")
                .is_none_or(|v| self.text(v) != "self")
        {
            return None;
        }
        let mut c = node.walk();
        let body = node
            .named_children(&mut c)
            .find(|n| self.spec.bodies.contains(&n.kind()))?;
        let mut c = body.walk();
        let has_methods = body
            .named_children(&mut c)
            .any(|n| self.as_def(n).is_some());
        has_methods.then_some(body)
    }

    /// `node` as [`Walker::children`] lists it: itself, or what replaces it.
    fn children_of_one(&self, node: Node<'s>, depth: usize) -> Vec<Node<'s>> {
        if depth < self.opts.max_depth
            && self.spec.conditionals.contains(&node.kind())
            && let Some(statements) = self.conditional_statements(node, depth)
        {
            return statements;
        }
        if depth < self.opts.max_depth
            && let Some(items) = self.expansions.get(&(node.start_byte(), node.end_byte()))
            && node.kind() == "macro_invocation"
        {
            return items
                .iter()
                .flat_map(|&n| self.children_of_one(n, depth + 1))
                .collect();
        }
        if depth < self.opts.max_depth
            && self.spec.arrow_functions
            && let bodies = iife_bodies(node, |n| self.text(n))
            && !bodies.is_empty()
        {
            return bodies
                .into_iter()
                .flat_map(|b| self.statements_of(b, depth))
                .collect();
        }
        if self.spec.groups.contains(&node.kind()) {
            let mut c = node.walk();
            let parts: Vec<Node<'s>> = node.named_children(&mut c).collect();
            let defs = parts.iter().filter(|n| self.as_def(**n).is_some()).count();
            if defs > 1 {
                return parts;
            }
        }
        vec![node]
    }

    /// The statements of `block`, each as [`Walker::children_of_one`] lists it.
    fn statements_of(&self, block: Node<'s>, depth: usize) -> Vec<Node<'s>> {
        let mut w = block.walk();
        let named: Vec<Node<'s>> = block.named_children(&mut w).collect();
        named
            .into_iter()
            .flat_map(|n| self.children_of_one(n, depth + 1))
            .collect()
    }

    /// The statements of a conditional's blocks (`if`, `elif`, `else`, `try`, `except`,
    /// `finally`), as [`Walker::children`] lists them, when one of them is a definition; the
    /// heads between them (`if _mswindows:`, `else:`) are left to the code around the
    /// statements. `None` when the conditional defines nothing: it stays one statement.
    fn conditional_statements(&self, node: Node<'s>, depth: usize) -> Option<Vec<Node<'s>>> {
        // Blocks and the comments before them (a comment under `except ImportError:` belongs
        // to the clause, not to its block), in order.
        let mut parts = Vec::new();
        let mut c = node.walk();
        for child in node.named_children(&mut c) {
            if child.kind().ends_with("_clause") {
                let mut cc = child.walk();
                parts.extend(child.named_children(&mut cc));
            } else {
                parts.push(child);
            }
        }
        let mut out = Vec::new();
        for p in parts {
            if self.spec.comments.contains(&p.kind()) {
                out.push(p);
            } else if p.kind() == "block" {
                out.extend(self.statements_of(p, depth));
            }
        }
        out.iter().any(|n| self.as_def(*n).is_some()).then_some(out)
    }

    fn as_def<'t>(&self, node: Node<'t>) -> Option<(Node<'t>, Kind)> {
        let spec = self.spec;
        // A keyword is no definition, though a grammar may name its node kind alike (Ruby's
        // `class` token of `class << self`).
        if !node.is_named() {
            return None;
        }
        if spec.wrappers.contains(&node.kind()) {
            // `export default function (config) {…}`, `export default (config) => {…}`,
            // `export default isSupported && function (config) {…}`: the module's function,
            // known by the file's name.
            if spec.arrow_functions
                && let Some(value) = node.child_by_field_name("value")
                && is_js_function(exported_function(value))
            {
                return Some((node, Kind::Function));
            }
            // `export default { getAdapter: (adapters) => {…} }`: the module's object of
            // functions, known by the file's name as it is imported (`adapters.getAdapter`).
            if self.js_default_object(node).is_some() {
                return Some((node, Kind::Module));
            }
            let inner = node
                .child_by_field_name("definition")
                .or_else(|| node.child_by_field_name("declaration"))
                .or_else(|| {
                    let mut c = node.walk();
                    node.named_children(&mut c)
                        .filter(|n| {
                            !spec.attributes.contains(&n.kind())
                                && !spec.comments.contains(&n.kind())
                        })
                        .last()
                })?;
            return self.as_def(inner);
        }
        if let Some(kind) = spec.def_kind(node.kind()) {
            // `namespace X;` without a body is a statement, not a definition.
            if matches!(kind, Kind::Namespace | Kind::Module) && self.body_of(node).is_none() {
                return None;
            }
            return Some((node, go_type(node).unwrap_or(kind)));
        }
        if spec.arrow_functions {
            if let Some((target, value)) = self.js_assignment(node) {
                if is_js_function(value)
                    || self.js_made_function(self.text(target), value).is_some()
                {
                    return Some((node, Kind::Function));
                }
                // `module.exports = class Application extends Emitter { … }`,
                // `const Foo = class { … }`: a class, with its methods.
                if value.kind() == "class" {
                    return Some((node, Kind::Class));
                }
                // An object literal with function members is a scope, as a namespace is.
                if value.kind() == "object" && has_function_member(value) {
                    return Some((node, Kind::Module));
                }
            }
            // `{ get: function () {…} }`, and a class field holding a function
            // (`static create = (issues) => {…}`).
            if matches!(
                node.kind(),
                "pair" | "public_field_definition" | "field_definition"
            ) && node
                .child_by_field_name("value")
                .is_some_and(is_js_function)
            {
                return Some((node, Kind::Method));
            }
            if self.js_call_definition(node).is_some() {
                return Some((node, Kind::Function));
            }
            if self.js_mixin(node).is_some() {
                return Some((node, Kind::Module));
            }
        }
        if spec.lambdas
            && let Some((_, value)) = py_assignment(node)
            && self.is_py_function(value)
        {
            return Some((node, Kind::Function));
        }
        if go_func_var(node).is_some() || lua_function_value(node).is_some() {
            return Some((node, Kind::Function));
        }
        None
    }

    /// The named constants a top-level statement declares, with where each starts: Rust's
    /// `const` and `static` items, Go's `const` and `var` declarations (each name of a group),
    /// and in Python, JavaScript and TypeScript an assignment or `const` to a name written in
    /// capitals (`DEFAULT_TIMEOUT = 5`, `export const MAX_RETRIES = 2`). Functions are
    /// definitions already, and other variables are too many to name.
    fn constant_names(&self, node: Node) -> Vec<(String, usize)> {
        let capitals = |n: &str| {
            n.len() > 1
                && n.starts_with(|c: char| c.is_ascii_uppercase())
                && n.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        };
        let mut out = Vec::new();
        let mut c = node.walk();
        match node.kind() {
            "const_item" | "static_item" => {
                if let Some(n) = node.child_by_field_name("name") {
                    out.push((self.text(n).to_owned(), node.start_byte()));
                }
            }
            "const_declaration" | "var_declaration" => {
                let mut specs: Vec<Node> = node.named_children(&mut c).collect();
                // `var ( … )` holds its specs in a `var_spec_list`.
                if let Some(list) = specs.iter().find(|n| n.kind().ends_with("_spec_list")) {
                    let mut lc = list.walk();
                    specs = list.named_children(&mut lc).collect();
                }
                for spec in specs.iter().filter(|n| n.kind().ends_with("_spec")) {
                    let mut sc = spec.walk();
                    for n in spec.children_by_field_name("name", &mut sc) {
                        let name = self.text(n);
                        if name != "_" {
                            out.push((name.to_owned(), spec.start_byte()));
                        }
                    }
                }
            }
            "expression_statement" => {
                if let Some((target, value)) = py_assignment(node)
                    && capitals(self.text(target))
                    && !self.is_py_function(value)
                {
                    out.push((self.text(target).to_owned(), node.start_byte()));
                }
            }
            "export_statement" => {
                if let Some(d) = node.child_by_field_name("declaration") {
                    out = self.constant_names(d);
                }
            }
            "lexical_declaration" | "variable_declaration" => {
                for d in node.named_children(&mut c) {
                    if d.kind() == "variable_declarator"
                        && let Some(n) = d.child_by_field_name("name")
                        && n.kind() == "identifier"
                        && capitals(self.text(n))
                        && !d.child_by_field_name("value").is_some_and(is_js_function)
                    {
                        out.push((self.text(n).to_owned(), d.start_byte()));
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// The name a TypeScript overload signature declares (`function f(a: string): X;`, in a
    /// class `f(a: string): X;`), exported or not, or a Python `@overload` stub.
    fn overload_name(&self, node: Node) -> Option<String> {
        let inner = if node.kind() == "export_statement" {
            node.child_by_field_name("declaration")?
        } else {
            node
        };
        // Python: `@overload` (`@typing.overload`) over a stub `def f(x: int) -> int: ...`.
        if inner.kind() == "decorated_definition" {
            let mut c = inner.walk();
            let overload = inner.named_children(&mut c).any(|d| {
                d.kind() == "decorator" && {
                    let t = self.text(d).trim_start_matches('@').trim();
                    t == "overload" || t.ends_with(".overload")
                }
            });
            return overload
                .then(|| inner.child_by_field_name("definition"))
                .flatten()
                .and_then(|d| self.name_of(d));
        }
        matches!(inner.kind(), "function_signature" | "method_signature")
            .then(|| self.name_of(inner))
            .flatten()
    }

    /// JavaScript and TypeScript: the target and the value of a declaration or assignment
    /// statement that may define something (`const f = …`, `res.status = …`,
    /// `const proto = module.exports = …`: the outermost target, the innermost value), when
    /// the target is a plain name or a dotted path.
    fn js_assignment<'t>(&self, node: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
        let (target, mut value) = match node.kind() {
            "expression_statement" => {
                let e = node.named_child(0)?;
                if e.kind() != "assignment_expression" {
                    return None;
                }
                (
                    e.child_by_field_name("left")?,
                    e.child_by_field_name("right")?,
                )
            }
            "lexical_declaration" | "variable_declaration" => {
                let mut c = node.walk();
                let d = only(
                    node.named_children(&mut c)
                        .filter(|n| n.kind() == "variable_declarator"),
                )?;
                (
                    d.child_by_field_name("name")?,
                    d.child_by_field_name("value")?,
                )
            }
            _ => return None,
        };
        // `a = b = …`, `(function runInContext(context) { … })`: the innermost value.
        for _ in 0..8 {
            value = match value.kind() {
                "assignment_expression" => value.child_by_field_name("right")?,
                "parenthesized_expression" => value.named_child(0)?,
                _ => break,
            };
        }
        js_path(self.text(target)).map(|_| (target, value))
    }

    /// JavaScript: the names a chain of assignments gives its definition, each with where it
    /// is written (`req.get = req.header = function header(…)`: `req.get`, `req.header`;
    /// `var mount = exports.mount = …`: `mount`, `exports.mount`), qualified as a definition's
    /// own name is. `exports` and `module.exports` alone (`module.exports = exports = …`) name
    /// nothing. The caller leaves out the one the definition is named by.
    fn js_aliases(&self, node: Node, kind: Kind) -> Vec<(String, usize)> {
        let Some((outer, _)) = self.js_assignment(node) else {
            return Vec::new();
        };
        let mut targets = vec![outer];
        let mut at = match node.kind() {
            "expression_statement" => node
                .named_child(0)
                .and_then(|e| e.child_by_field_name("right")),
            _ => outer.parent().and_then(|d| d.child_by_field_name("value")),
        };
        while let Some(e) = at {
            at = match e.kind() {
                "assignment_expression" => {
                    targets.extend(e.child_by_field_name("left"));
                    e.child_by_field_name("right")
                }
                "parenthesized_expression" => e.named_child(0),
                _ => None,
            };
        }
        targets
            .into_iter()
            .filter(|t| {
                js_path(self.text(*t))
                    .is_some_and(|p| !matches!(p.as_slice(), ["exports"] | ["module", "exports"]))
            })
            .map(|t| {
                // Named by the target itself: a class's own name is the definition's.
                let (owner, name, _) = js_naming(self.text(t), None, kind, &self.stem);
                let q = owner.map_or_else(|| name.clone(), |o| format!("{o}.{name}"));
                (q, t.start_byte())
            })
            .collect()
    }

    /// JavaScript: the object of `export default { … }` when it has function members, in a
    /// file whose name can name it.
    fn js_default_object<'t>(&self, node: Node<'t>) -> Option<Node<'t>> {
        let value = node.child_by_field_name("value")?;
        (self.spec.arrow_functions
            && node.kind() == "export_statement"
            && !self.stem.is_empty()
            && value.kind() == "object"
            && has_function_member(value))
        .then_some(value)
    }

    /// A call that is a whole statement (`f(a, b);`): the function called and its arguments,
    /// comments aside.
    fn statement_call<'t>(&self, node: Node<'t>) -> Option<(Node<'t>, Vec<Node<'t>>)> {
        if node.kind() != "expression_statement" {
            return None;
        }
        let call = node.named_child(0)?;
        if call.kind() != "call_expression" {
            return None;
        }
        let args = call.child_by_field_name("arguments")?;
        let mut c = args.walk();
        let args = args
            .named_children(&mut c)
            .filter(|n| !self.spec.comments.contains(&n.kind()))
            .collect();
        Some((call.child_by_field_name("function")?, args))
    }

    /// JavaScript: functions mixed into an owner at statement level, `Object.assign(
    /// Foo.prototype, { bar() {…} })`: the owner's text and the object, which has function
    /// members.
    fn js_mixin<'t>(&self, node: Node<'t>) -> Option<(&'s str, Node<'t>)> {
        let (function, args) = self.statement_call(node)?;
        if self.text(function) != "Object.assign" {
            return None;
        }
        let [owner, object] = args.as_slice() else {
            return None;
        };
        (matches!(owner.kind(), "identifier" | "member_expression")
            && object.kind() == "object"
            && has_function_member(*object)
            && js_path(self.text(*owner)).is_some())
        .then(|| (self.text(*owner), *object))
    }

    /// JavaScript: a property defined by a call at statement level, `f(owner, 'name', value)`
    /// where the value is a function or a descriptor with function members —
    /// `defineGetter(req, 'query', function query() {…})`, `Object.defineProperty(
    /// Foo.prototype, 'size', { get() {…} })`: the property's path (`req.query`) and the value.
    /// A call of any other shape (`app.get('/', handler)`, `it('works', () => {…})`) is code.
    fn js_call_definition<'t>(&self, node: Node<'t>) -> Option<(String, Node<'t>)> {
        let (_, args) = self.statement_call(node)?;
        let [owner, key, value] = args.as_slice() else {
            return None;
        };
        if !matches!(owner.kind(), "identifier" | "member_expression") || key.kind() != "string" {
            return None;
        }
        let key = self
            .text(*key)
            .trim_matches(|c| matches!(c, '"' | '\'' | '`'));
        let path = format!("{}.{key}", self.text(*owner));
        // A function named otherwise is handed over, not defined (`on(conn, 'close', function
        // onClose() {…})`).
        let own = value.child_by_field_name("name").map(|n| self.text(n));
        let defines = is_js_function(*value) && own.is_none_or(|own| own == key)
            || value.kind() == "object" && has_function_member(*value);
        (defines && js_path(&path).is_some()).then_some((path, *value))
    }

    /// JavaScript: the function a call is given to make a value bound to `target` —
    /// `const Button = forwardRef((props, ref) => {…})`, zod's `const $ZodString =
    /// core.$constructor("$ZodString", (inst, def) => {…})`, `exports.handle =
    /// deprecate.function(function handle() {…}, '…')`: the call's one argument that is a
    /// function whose body is a block of three lines or more, when the name reads as a
    /// definition's — capitalised as a component, class or schema is (`$` aside), or the
    /// function's own name. A value a call computes with a callback (`const server =
    /// http.createServer((req, res) => {…})`, `const total = list.reduce(…)`, `const timer =
    /// setTimeout(…)`) is code.
    fn js_made_function<'t>(&self, target: &str, value: Node<'t>) -> Option<Node<'t>> {
        if value.kind() != "call_expression" {
            return None;
        }
        let args = value.child_by_field_name("arguments")?;
        let mut c = args.walk();
        let mut made = args.named_children(&mut c).filter(|a| {
            is_js_function(*a)
                && a.child_by_field_name("body").is_some_and(|b| {
                    b.kind() == "statement_block"
                        && b.end_position().row >= b.start_position().row + 2
                })
        });
        let f = made.next()?;
        if made.next().is_some() {
            return None;
        }
        let name = target.rsplit('.').next().unwrap_or(target);
        let capitalised = name
            .trim_start_matches('$')
            .starts_with(|c: char| c.is_uppercase());
        let own = f.child_by_field_name("name").map(|n| self.text(n));
        (capitalised || own == Some(name)).then_some(f)
    }

    /// `lambda …`, `partial(…)`, `functools.partial(…)`, `partialmethod(…)`.
    fn is_py_function(&self, value: Node) -> bool {
        match value.kind() {
            "lambda" => true,
            "call" => value.child_by_field_name("function").is_some_and(|f| {
                let name = self.text(f);
                let last = name.rsplit('.').next().unwrap_or(name);
                matches!(last, "partial" | "partialmethod")
            }),
            _ => false,
        }
    }

    /// The owner, symbol and kind of a definition: what its syntax names beyond `name_of`
    /// (a Go receiver, a JavaScript assignment target, a C++ `Class::method`).
    fn naming(&self, node: Node, kind: Kind) -> (Option<String>, String, Kind) {
        if self.spec.arrow_functions
            && let Some((target, value)) = self.js_assignment(node)
        {
            let own = value.child_by_field_name("name").map(|n| self.text(n));
            return js_naming(self.text(target), own, kind, &self.stem);
        }
        if self.spec.arrow_functions
            && let Some((owner, _)) = self.js_mixin(node)
        {
            return js_naming(owner, None, kind, &self.stem);
        }
        if self.spec.arrow_functions
            && let Some((path, value)) = self.js_call_definition(node)
        {
            let own = value.child_by_field_name("name").map(|n| self.text(n));
            return js_naming(&path, own, kind, &self.stem);
        }
        if self.spec.arrow_functions
            && node.kind() == "pair"
            && let Some(key) = node.child_by_field_name("key")
        {
            let key = self
                .text(key)
                .trim_matches(|c| matches!(c, '"' | '\'' | '`'));
            return (None, key.to_owned(), kind);
        }
        if self.spec.lambdas
            && let Some((target, _)) = py_assignment(node)
        {
            return (None, self.text(target).to_owned(), kind);
        }
        if let Some((name, _)) = go_func_var(node) {
            return (None, self.text(name).to_owned(), kind);
        }
        // Lua: `M.sub = function(a, b) … end` is named as `function M.sub(a, b)` is.
        if let Some((target, _)) = lua_function_value(node) {
            let name = self.text(target);
            return match split_qualified(name) {
                Some((owner, symbol, _)) => (Some(owner.to_owned()), symbol.to_owned(), kind),
                None => (None, name.to_owned(), kind),
            };
        }
        // What `export default` makes without a name (a function, a class) is known by the
        // file's name, as it is imported.
        let name = self.name_of(node).unwrap_or_else(|| {
            let default_export = node.kind() == "export_statement"
                || node
                    .parent()
                    .is_some_and(|p| p.kind() == "export_statement");
            if self.spec.arrow_functions && default_export && !self.stem.is_empty() {
                self.stem.clone()
            } else {
                "<anonymous>".to_owned()
            }
        });
        // Go: `func (s *Store) Get(…)` → `Store.Get`.
        if let Some(receiver) = node.child_by_field_name("receiver") {
            let mut c = receiver.walk();
            let owner = receiver
                .named_children(&mut c)
                .find_map(|p| p.child_by_field_name("type"))
                .map(|t| {
                    let t = self.text(t).trim_start_matches(['*', ' ', '(']);
                    strip_generics(&t[..t.find('[').unwrap_or(t.len())])
                })
                .filter(|t| !t.is_empty());
            return (owner, name, kind);
        }
        // C++ `void Foo::bar()`, Lua `function M:update()` / `function M.new()`.
        if matches!(kind, Kind::Function | Kind::Method)
            && let Some((owner, symbol, sep)) = split_qualified(&name)
        {
            // `Foo::bar` is a member function where there are classes (C++), a namespaced
            // function where there are none (Bash); `M:update` is a Lua method.
            let classes = self.spec.defs.iter().any(|(_, k)| *k == Kind::Class);
            let kind = if sep == ":" || sep == "::" && classes {
                Kind::Method
            } else {
                kind
            };
            return (Some(owner.to_owned()), symbol.to_owned(), kind);
        }
        (None, name, kind)
    }

    /// The definitions inside a container that stays one chunk, qualified under `prefix`,
    /// nested containers' members included.
    fn members(
        &self,
        body: Node,
        prefix: &str,
        container: Kind,
        depth: usize,
        out: &mut Vec<Member>,
    ) {
        if depth >= self.opts.max_depth {
            return;
        }
        let children = self.children(body, depth);
        for item in self.items(&children) {
            if out.len() >= MAX_MEMBERS {
                return;
            }
            let Some((node, kind)) = item.def else {
                // A TypeScript interface's method signatures (`get(id: string): Item;`), as
                // Java's, C#'s and Go's interfaces list theirs.
                if container == Kind::Interface
                    && item.node.kind() == "method_signature"
                    && let Some(name) = item.node.child_by_field_name("name")
                {
                    out.push(Member {
                        kind: Kind::Method,
                        qualified_name: format!("{prefix}.{}", self.text(name)),
                        start: item.node.start_byte(),
                    });
                }
                continue;
            };
            let (owner, name, kind) = self.naming(node, kind);
            let kind = member_kind(kind, container);
            let mut q = prefix.to_owned();
            for part in owner.iter().chain([&name]) {
                q.push('.');
                q.push_str(part);
            }
            out.push(Member {
                kind,
                qualified_name: q.clone(),
                start: item.node.start_byte(),
            });
            if kind.is_container()
                && let Some(b) = self.body_of(node)
            {
                self.members(b, &q, kind, depth + 1, out);
            }
        }
    }

    /// Groups a block's children into items, attaching comments and attributes that stand
    /// directly above a definition to it.
    fn items<'t>(&self, children: &[Node<'t>]) -> Vec<Item<'t>> {
        let spec = self.spec;
        let mut items: Vec<Item<'t>> = Vec::with_capacity(children.len());
        let mut pending: Vec<Node<'t>> = Vec::new();
        let code = |n: Node<'t>| Item {
            start: n.start_byte(),
            end: n.end_byte(),
            node: n,
            def: None,
        };
        // TypeScript overloads (`function f(a: string): X;` above `function f(a) {…}`) are
        // read with the definition they declare, as attributes are.
        let mut overloads: Vec<usize> = Vec::new();
        for (at, &node) in children.iter().enumerate() {
            let k = node.kind();
            // The `,` or `;` after a member on its line (`toJSON () {…},` in an object of
            // functions) ends it, rather than beginning the code that follows.
            if !node.is_named()
                && matches!(self.text(node), "," | ";")
                && pending.is_empty()
                && let Some(last) = items.last_mut()
                && last.end <= node.start_byte()
                && !self.src[last.end..node.start_byte()].contains('\n')
            {
                last.end = node.end_byte();
                continue;
            }
            // A comment after code on the same line (`type Key = string; // or a pattern`)
            // ends that code: it is not the next definition's leading comment.
            if spec.comments.contains(&k) && pending.is_empty() && !self.text(node).contains('\n') {
                // `}; // end a`: the `;` reads with what it ends, and the comment with both.
                while let [.., a, b] = items.as_slice()
                    && b.def.is_none()
                    && b.node.is_named()
                    && !self.src[b.start..b.end].contains(char::is_alphanumeric)
                    && !self.src[a.end..b.start].contains('\n')
                {
                    let end = b.end;
                    items.pop();
                    if let Some(a) = items.last_mut() {
                        a.end = end;
                    }
                }
                // Not after an opening bracket (`class A { // note`): that line reads with
                // the first member.
                if let Some(last) = items.last_mut()
                    && last.node.is_named()
                    && last.end <= node.start_byte()
                    && !self.src[last.end..node.start_byte()].contains('\n')
                {
                    last.end = node.end_byte();
                    continue;
                }
            }
            if spec.comments.contains(&k) || spec.attributes.contains(&k) {
                pending.push(node);
                continue;
            }
            // The `;` that ends an overload in a class body.
            if !node.is_named() && pending.last().is_some_and(|p| overloads.contains(&p.id())) {
                overloads.push(node.id());
                pending.push(node);
                continue;
            }
            if let Some(name) = self.overload_name(node)
                && children[at + 1..]
                    .iter()
                    .find(|n| n.is_named() && !spec.comments.contains(&n.kind()))
                    .is_some_and(|next| {
                        self.overload_name(*next).as_deref() == Some(name.as_str())
                            || self
                                .as_def(*next)
                                .is_some_and(|(d, _)| self.name_of(d).as_deref() == Some(&name))
                    })
            {
                overloads.push(node.id());
                pending.push(node);
                continue;
            }
            if let Some(def) = self.as_def(node) {
                let mut attach_from = pending.len();
                let mut next_start = node.start_byte();
                for i in (0..pending.len()).rev() {
                    let p = pending[i];
                    let gap = &self.src[p.end_byte()..next_start];
                    // A doc comment (`/** … */`) right above, even a blank line away, as
                    // JSDoc is written in CommonJS code (`*/`, blank line, `res.status = …`).
                    let doc = i + 1 == pending.len()
                        && is_doc_comment(self.text(p))
                        && gap.matches('\n').count() == 2;
                    if spec.attributes.contains(&p.kind())
                        || overloads.contains(&p.id())
                        || doc
                        || !has_blank_line(gap)
                    {
                        attach_from = i;
                        next_start = p.start_byte();
                    } else {
                        break;
                    }
                }
                items.extend(pending[..attach_from].iter().map(|&p| code(p)));
                items.push(Item {
                    start: next_start,
                    end: node.end_byte(),
                    node,
                    def: Some(def),
                });
                pending.clear();
            } else {
                items.extend(pending.drain(..).map(code));
                items.push(code(node));
            }
        }
        items.extend(pending.into_iter().map(code));
        items
    }

    /// [`Walker::block`] of a definition's `children` as the scope `me`, inside `scope`.
    #[allow(clippy::too_many_arguments)]
    fn block_in(
        &mut self,
        children: &[Node],
        region: (usize, usize),
        scope: &[Scope],
        me: &Scope,
        parent: Option<usize>,
        table: Option<(usize, usize)>,
        depth: usize,
    ) {
        let mut inner = scope.to_vec();
        inner.push(me.clone());
        self.block(children, region, &inner, parent, Some(me), table, depth + 1);
    }

    /// Emits the chunks of one block: definitions, and the code between them.
    ///
    /// `container` is the kind and name of the enclosing oversize definition, whose own
    /// code (header, fields, closing lines) is emitted under its kind and name; `table`, its
    /// [`Walker::decorator_table`], where its own text begins after a table of decorators.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        children: &[Node],
        (region_start, region_end): (usize, usize),
        scope: &[Scope],
        parent: Option<usize>,
        container: Option<&Scope>,
        table: Option<(usize, usize)>,
        depth: usize,
    ) {
        let items = self.items(children);
        // Segments: maximal runs of code, and definitions, covering the whole region.
        enum Seg<'t> {
            Code {
                start: usize,
                end: usize,
                nodes: Vec<Node<'t>>,
            },
            Def {
                start: usize,
                end: usize,
                item: Item<'t>,
            },
        }
        let mut segs: Vec<Seg> = Vec::new();
        let mut cursor = region_start;
        let mut run: Option<(usize, Vec<Node>)> = None;
        for item in &items {
            if item.def.is_some() {
                if let Some((s, nodes)) = run.take() {
                    segs.push(Seg::Code {
                        start: s,
                        end: item.start,
                        nodes,
                    });
                } else if !is_blank(&self.src[cursor..item.start]) {
                    segs.push(Seg::Code {
                        start: cursor,
                        end: item.start,
                        nodes: Vec::new(),
                    });
                }
                segs.push(Seg::Def {
                    start: item.start,
                    end: item.end,
                    item: *item,
                });
                cursor = item.end;
            } else {
                run.get_or_insert_with(|| (cursor, Vec::new()))
                    .1
                    .push(item.node);
            }
        }
        let tail_start = run.as_ref().map_or(cursor, |(s, _)| *s);
        let tail_nodes = run.map(|(_, n)| n).unwrap_or_default();
        if !is_blank(&self.src[tail_start..region_end]) {
            segs.push(Seg::Code {
                start: tail_start,
                end: region_end,
                nodes: tail_nodes,
            });
        }
        // A table of decorators over the container is code of its own: the container's own
        // line after it reads as any split container's opening does.
        let table = table.filter(|&(_, own)| region_start < own && own < region_end);
        if let Some((_, own)) = table
            && let Some(Seg::Code { start, end, nodes }) = segs.first()
            && *start < own
            && own < *end
        {
            let (start, end, nodes) = (*start, *end, nodes.clone());
            segs[0] = Seg::Code {
                start: own,
                end,
                nodes,
            };
            segs.insert(
                0,
                Seg::Code {
                    start,
                    end: own,
                    nodes: Vec::new(),
                },
            );
        }
        let own_line = table.map(|(_, own)| own);
        // Normalise code ranges to their non-blank text.
        let mut segs: Vec<Seg> = segs
            .into_iter()
            .filter_map(|s| match s {
                Seg::Code { start, end, nodes } => {
                    let (start, end) = trim(self.src, start, end);
                    (end > start).then_some(Seg::Code { start, end, nodes })
                }
                d @ Seg::Def { .. } => Some(d),
            })
            .collect();

        // Module-level code is its own chunk, however small: imports and constants are worth
        // finding. Only trivial closers (`}`, `#endif`, `end`) under the floor merge into the
        // neighbouring definition — the one before them when it has room, else the next.
        let floor = self.opts.floor;
        let ceiling = self.opts.ceiling;
        let mut i = 0;
        while i < segs.len() {
            let Seg::Code {
                start,
                end,
                ref nodes,
            } = segs[i]
            else {
                i += 1;
                continue;
            };
            // The head of the condition a definition is made under (`if os.name == "nt":`,
            // `except ImportError:`), and the opening of a group its definition is the first
            // of (Go's `type (`, with the comments above it), read with that definition: the
            // next one.
            let opens_group = matches!(segs.get(i + 1), Some(Seg::Def { item, .. })
            if item.node.parent().is_some_and(|g| {
                self.spec.groups.contains(&g.kind()) && g.start_byte() >= start
            })) && nodes.iter().all(|n| self.spec.comments.contains(&n.kind()));
            // A split container's opening line alone (`impl Walker {`, `export class Foo {`)
            // reads with its first member, as its closing brace with its last: the skeleton
            // has the container whole, and a chunk of one brace answers nothing. A function
            // that is the scope of the functions it defines has no skeleton: its opening
            // (`function createStore(reducer) {`) is its own first part, where a search for its
            // name cites its signature and a call resolves.
            let function_scope =
                container.is_some_and(|c| matches!(c.kind, Kind::Function | Kind::Method));
            let opening = container.is_some()
                && !function_scope
                && (i == 0 || own_line == Some(start))
                && !self.src[start..end].contains('\n')
                && self.src[start..end].trim_end().ends_with('{');
            let head = opens_group || opening || is_block_head(&self.src[start..end]);
            let scope_code =
                container.is_some_and(|c| matches!(c.kind, Kind::Namespace | Kind::Module));
            let small = end - start < floor && (scope_code || is_trivial(&self.src[start..end]));
            if !head && !small {
                i += 1;
                continue;
            }
            // A definition cut into parts anyway takes a short neighbour into its first or
            // last part.
            let closer = container.is_some() && small && i + 1 == segs.len();
            if !head
                && i > 0
                && let Some(Seg::Def {
                    start: dstart,
                    end: dend,
                    ..
                }) = segs.get_mut(i - 1)
                && (end - *dstart <= ceiling || closer && *dend - *dstart > ceiling)
            {
                *dend = end;
                segs.remove(i);
                continue;
            }
            if let Some(Seg::Def {
                end: dend,
                start: dstart,
                ..
            }) = segs.get_mut(i + 1)
                && (*dend - start <= ceiling || opening && *dend - *dstart > ceiling)
            {
                *dstart = start;
                segs.remove(i);
                continue;
            }
            i += 1;
        }

        for seg in segs {
            match seg {
                Seg::Code { start, end, nodes } => {
                    let (kind, symbol) = match container {
                        Some(c) => (c.kind, Some(c.name.clone())),
                        None => (Kind::Code, None),
                    };
                    let outer_scope: &[Scope] = match container {
                        Some(_) => &scope[..scope.len().saturating_sub(1)],
                        None => scope,
                    };
                    let ranges = if end - start <= ceiling {
                        vec![(start, end)]
                    } else {
                        // Cut before a statement or a field, never before the `,` or `;`
                        // that ends the one before.
                        let points: Vec<(usize, Option<Node>)> = nodes
                            .iter()
                            .filter(|n| n.is_named())
                            .map(|n| (n.start_byte(), Some(*n)))
                            .collect();
                        self.pack(start, end, &points, depth)
                    };
                    let first = self.out.len();
                    self.emit_parts(&ranges, kind, symbol.as_deref(), outer_scope, parent, None);
                    // The file's named constants are members of the part that holds them.
                    if container.is_none() {
                        for node in &nodes {
                            for (name, at) in self.constant_names(*node) {
                                if let Some(p) = self.out[first..]
                                    .iter_mut()
                                    .find(|p| p.start <= at && at < p.end)
                                    && p.members.len() < MAX_MEMBERS
                                {
                                    p.members.push(Member {
                                        kind: Kind::Constant,
                                        qualified_name: name,
                                        start: at,
                                    });
                                }
                            }
                        }
                    }
                }
                Seg::Def { start, end, item } => {
                    self.definition(item, start, end, scope, parent, depth);
                }
            }
        }
    }

    fn definition(
        &mut self,
        item: Item,
        start: usize,
        end: usize,
        scope: &[Scope],
        parent: Option<usize>,
        depth: usize,
    ) {
        let (node, kind) = item.def.expect("a definition item");
        let (owner, name, mut kind) = self.naming(node, kind);
        if let Some(s) = scope.last() {
            kind = member_kind(kind, s.kind);
        }
        let ceiling = self.opts.ceiling;
        let body = self.body_of(node);
        // Namespaces and modules are scopes, not units: their members are the chunks. An object
        // literal of functions that fits under the ceiling (`const api = { get(id) {…}, remove:
        // (id) => … }`) is one unit, as a class of that size is, listing its members: cut, it
        // was a crumb per member.
        let small_object = kind == Kind::Module
            && end - start <= ceiling
            && body.is_some_and(|b| b.kind() == "object");
        if matches!(kind, Kind::Namespace | Kind::Module)
            && !small_object
            && let Some(body) = body
            && depth < self.opts.max_depth
        {
            let me = Scope { kind, name };
            let children = self.children(body, depth);
            self.block_in(&children, (start, end), scope, &me, parent, None, depth);
            return;
        }
        if end - start <= ceiling {
            let mut p = Piece::new(kind, start, end, self.src[start..end].to_owned());
            p.scope = scope.to_vec();
            p.owner = owner;
            p.parent = parent;
            // Members of `impl Display for Walker` are `Walker.fmt`.
            let qualified = || {
                let mut q: Vec<&str> = scope.iter().map(Scope::qualifier).collect();
                q.extend(p.owner.as_deref());
                q.push(crate::qualifier(kind, &name));
                q.join(".")
            };
            if kind.is_container()
                && let Some(body) = body
            {
                let mut members = Vec::new();
                self.members(body, &qualified(), kind, depth, &mut members);
                p.members = members;
            } else if let Some(methods) = go_interface_type(node) {
                // A Go interface's methods (`Hook.Fire`), declared without bodies.
                let mut c = methods.walk();
                let q = qualified();
                p.members = methods
                    .named_children(&mut c)
                    .filter(|m| m.kind() == "method_elem")
                    .filter_map(|m| {
                        Some(Member {
                            kind: Kind::Method,
                            qualified_name: format!(
                                "{q}.{}",
                                self.text(m.child_by_field_name("name")?)
                            ),
                            start: m.start_byte(),
                        })
                    })
                    .take(MAX_MEMBERS)
                    .collect();
            }
            // Its other names (`exports.Base = exports.Store = class Store {…}`) come first, then
            // what it holds.
            if self.spec.arrow_functions {
                let mut names = self.alias_members(node, kind, scope, p.owner.as_deref(), &name);
                names.append(&mut p.members);
                p.members = names;
            }
            p.symbol = Some(name);
            self.out.push(p);
            return;
        }
        if kind.is_container()
            && let Some(body) = body
        {
            if depth >= self.opts.max_depth {
                self.note(crate::Note::DepthLimit);
            } else {
                let me = Scope {
                    kind,
                    name: name.clone(),
                };
                let children = self.children(body, depth);
                // A container of fields alone (a long struct or enum) is cut into its parts;
                // an outline of it would repeat them.
                let decorated = self.decorator_table(node, start);
                let table = decorated.as_ref().map(|t| (t.start, t.own));
                if !self.items(&children).iter().any(|i| i.def.is_some()) {
                    self.block_in(&children, (start, end), scope, &me, parent, table, depth);
                    return;
                }
                let head =
                    decorated.map(|t| (t.start, t.own, self.outline_decorators(&t.decorators)));
                let (skeleton, lines) = self.skeleton(start, body, &children, head);
                let mut p = Piece::new(Kind::ClassSkeleton, start, end, String::new());
                p.symbol = Some(name.clone());
                p.scope = scope.to_vec();
                p.parent = parent;
                // Cut between members, never between a member's decorators and its
                // signature: each member is outlined in one part, and cited by it alone.
                let skel_ranges = {
                    let mut notes = Vec::new();
                    let members: Vec<usize> = lines.iter().map(|l| l.0).collect();
                    let mut ranges = pack_at(&skeleton, &members, ceiling, &mut notes);
                    // An entry of nothing but its indent (a member the parser could not
                    // read) outlines nothing: no part of it alone.
                    ranges.retain(|&(s, e)| !skeleton[s..e].trim().is_empty());
                    ranges
                };
                let n = skel_ranges.len();
                let skel_index = self.out.len();
                for (i, (s, e)) in skel_ranges.into_iter().enumerate() {
                    let mut q = p.clone();
                    skeleton[s..e].trim_end().clone_into(&mut q.text);
                    if n > 1 {
                        q.part = Some((i as u32 + 1, n as u32));
                        // A part cites the members it outlines, from the container's start
                        // (the first part) to its end (the last).
                        let listed = lines.iter().filter(|l| l.0 < e && l.1 > s);
                        let (lo, hi) =
                            listed.fold((usize::MAX, 0), |(lo, hi), l| (lo.min(l.2), hi.max(l.3)));
                        if lo < hi {
                            q.start = if i == 0 { start } else { lo };
                            q.end = if i + 1 == n { end } else { hi };
                        }
                    }
                    self.out.push(q);
                }
                self.block_in(
                    &children,
                    (start, end),
                    scope,
                    &me,
                    Some(skel_index),
                    table,
                    depth,
                );
                return;
            }
        }
        // A function that is mostly the functions it defines (a JavaScript module pattern,
        // `var runInContext = (function runInContext(context) { function flatMap … })`, a
        // Python factory of closures) is their scope, as a namespace is: each is a chunk of
        // its own, and its own code is cut around them. A function with a small helper
        // inside is cut at its statements, the helper with them.
        if let Some(b) = body
            && depth < self.opts.max_depth
        {
            let children = self.children(b, depth);
            let defined: usize = self
                .items(&children)
                .iter()
                .filter(|i| i.def.is_some())
                .map(|i| i.end - i.start)
                .sum();
            if 2 * defined >= b.end_byte() - b.start_byte() {
                let me = Scope {
                    kind,
                    name: name.clone(),
                };
                let first = self.out.len();
                self.block_in(&children, (start, end), scope, &me, parent, None, depth);
                // Its own code around them is one definition cut in parts: numbered as such, so
                // that a call resolves to its first part and a reader sees the pieces belong.
                let own: Vec<usize> = (first..self.out.len())
                    .filter(|&i| {
                        let p = &self.out[i];
                        p.kind == kind
                            && p.symbol.as_deref() == Some(name.as_str())
                            && p.scope.as_slice() == scope
                    })
                    .collect();
                let n = own.len() as u32;
                let signature = self.signature(node, b);
                for (k, &i) in own.iter().enumerate() {
                    let p = &mut self.out[i];
                    p.owner.clone_from(&owner);
                    if n > 1 {
                        p.part = Some((k as u32 + 1, n));
                        p.signature = Some(signature.clone());
                    } else {
                        p.part = None;
                        p.signature = None;
                    }
                }
                return;
            }
        }
        // A function (or anything without members): parts at statement boundaries.
        let signature = body.map(|b| self.signature(node, b));
        let mut points: Vec<(usize, Option<Node>)> = match body {
            Some(b) => self
                .cut_points(b, node)
                .into_iter()
                .map(|n| (n.start_byte(), Some(n)))
                .collect(),
            None => self
                .cut_points(node, node)
                .into_iter()
                .map(|n| (n.start_byte(), Some(n)))
                .collect(),
        };
        // A docstring stays with the signature it documents: the first part holds both, cut
        // inside the docstring (between its paragraphs) only when together they are over the
        // ceiling. A part of a signature alone (or of overload stubs and a signature) answers
        // nothing.
        if let Some(doc) = body.and_then(|b| self.docstring(b)) {
            points.retain(|&(p, _)| p != doc.start_byte());
        }
        // Overload stubs read with their implementation (Python's `@overload`, TypeScript's
        // signatures) are declarations: the implementation's own start is a cut point too, so
        // that, cut, its signature and docstring start a part rather than follow the stubs.
        let outer = self.wrapper(node, start);
        let mut before = outer.prev_named_sibling();
        while let Some(p) = before.filter(|p| p.start_byte() >= start) {
            if self.overload_name(p).is_some() {
                points.push((outer.start_byte(), Some(outer)));
                break;
            }
            before = p.prev_named_sibling();
        }
        // Decorators are the definition's, but one can hold a table of data (pytest's
        // `parametrize`) larger than the ceiling: then its own line is a cut point too, so that
        // the signature starts a part with its docstring and body instead of following the
        // table's tail. Decorators that fit stay with it.
        let table = self.decorator_table(node, start).map(|t| (t.start, t.own));
        if let Some((_, own)) = table {
            points.push((own, (own == node.start_byte()).then_some(node)));
        }
        points.sort_by_key(|&(p, _)| p);
        points.dedup_by_key(|(p, _)| *p);
        let mut ranges = self.pack(start, end, &points, depth);
        if let Some((d, own)) = table {
            self.apart_from_table(&mut ranges, d, own);
        }
        let first = self.out.len();
        self.emit_parts(
            &ranges,
            kind,
            Some(&name),
            scope,
            parent,
            signature.as_deref(),
        );
        for p in &mut self.out[first..] {
            p.owner.clone_from(&owner);
        }
        // The other names of a definition cut in parts find its first part, as its own does.
        if self.spec.arrow_functions && first < self.out.len() {
            self.out[first].members =
                self.alias_members(node, kind, scope, owner.as_deref(), &name);
        }
    }

    /// [`Walker::js_aliases`] as the members a definition's chunk lists: its other names,
    /// qualified under its scope as its own name is.
    fn alias_members(
        &self,
        node: Node,
        kind: Kind,
        scope: &[Scope],
        owner: Option<&str>,
        own: &str,
    ) -> Vec<Member> {
        let me = owner.map_or_else(|| own.to_owned(), |o| format!("{o}.{own}"));
        self.js_aliases(node, kind)
            .into_iter()
            .filter(|(name, _)| *name != me)
            .map(|(name, start)| {
                let mut q: Vec<&str> = scope.iter().map(Scope::qualifier).collect();
                q.push(&name);
                Member {
                    kind,
                    qualified_name: q.join("."),
                    start,
                }
            })
            .collect()
    }

    /// What a definition's parts carry as its signature: its text up to its body, at most
    /// 300 bytes.
    fn signature(&self, node: Node, body: Node) -> String {
        // Past the decorators that open it (Java's annotations, C#'s attributes), as Python's
        // wrapper leaves them out.
        let from = self
            .opening_decorators(node)
            .last()
            .map_or(node.start_byte(), |last| Self::own_start(node, *last));
        let sig = self.src[from.min(body.start_byte())..body.start_byte()].trim();
        sig[..crate::text::floor_boundary(sig, 300)].to_owned()
    }

    /// The decorators or attributes of the definition `node`, in order: those inside its
    /// wrapper `outer` (what Python's `decorated_definition` holds before the definition),
    /// else those right before it at or after `start` (Rust's `#[…]` items); and those that
    /// open `node` itself (TypeScript's `@Component(…) class`, a decorated method).
    fn decorators<'t>(&self, outer: Node<'t>, node: Node<'t>, start: usize) -> Vec<Node<'t>> {
        let is_attr = |n: &Node| self.is_decorator(n);
        let mut out = self.wrapped_decorators(outer, node);
        if out.is_empty() {
            let mut before = outer.prev_named_sibling();
            while let Some(p) = before.filter(|p| p.start_byte() >= start) {
                if is_attr(&p) {
                    out.insert(0, p);
                } else if !self.spec.comments.contains(&p.kind()) {
                    break;
                }
                before = p.prev_named_sibling();
            }
        }
        out.extend(self.opening_decorators(node));
        out
    }

    /// The decorators or attributes that open `node` itself: TypeScript's `@Component(…)
    /// class`, C#'s `[Theory]` lists, and Java's annotations, which its grammar holds in the
    /// definition's `modifiers`.
    fn opening_decorators<'t>(&self, node: Node<'t>) -> Vec<Node<'t>> {
        let lead = |n: Node<'t>| {
            let mut c = n.walk();
            n.named_children(&mut c)
                .take_while(|n| self.is_decorator(n) || self.spec.comments.contains(&n.kind()))
                .filter(|n| self.is_decorator(n))
                .collect::<Vec<_>>()
        };
        match node.named_child(0) {
            Some(m) if m.kind() == "modifiers" => lead(m),
            _ => lead(node),
        }
    }

    /// Where the definition `node` starts after its last decorator `last`: the first token
    /// after it (a keyword, `export`, a type, the definition itself), comments aside, looked
    /// for in what holds the decorator and then up to the definition (Java's annotations end
    /// its `modifiers`, and its type follows them).
    fn own_start(node: Node, last: Node) -> usize {
        let mut host = last.parent();
        while let Some(h) = host {
            let mut c = h.walk();
            if let Some(n) = h
                .children(&mut c)
                .find(|n| n.start_byte() >= last.end_byte() && !n.is_extra())
            {
                return n.start_byte();
            }
            if h.start_byte() <= node.start_byte() && h.end_byte() >= node.end_byte() {
                break;
            }
            host = h.parent();
        }
        node.start_byte()
    }

    /// The decorators or attributes the wrapper `outer` holds before the definition `node`
    /// (Python's `decorated_definition`); none when `outer` is `node`.
    fn wrapped_decorators<'t>(&self, outer: Node<'t>, node: Node<'t>) -> Vec<Node<'t>> {
        if outer == node {
            return Vec::new();
        }
        let mut c = outer.walk();
        outer
            .named_children(&mut c)
            .take_while(|n| n.start_byte() < node.start_byte())
            .filter(|n| self.is_decorator(n))
            .collect()
    }

    fn is_decorator(&self, n: &Node) -> bool {
        self.spec.attributes.contains(&n.kind()) || n.kind() == "decorator"
    }

    /// Decorators outlined, one a line: each whole, or by its first line when over
    /// [`OUTLINE_BYTES`] (`@pytest.mark.parametrize( …`).
    ///
    /// A run of three or more small decorators of one name that is over the ceiling (C#'s
    /// `[InlineData(…)]`, a line for each case) is a table too: it is outlined by its first,
    /// with how many follow.
    fn outline_decorators(&self, decorators: &[Node]) -> String {
        let indent = decorators
            .first()
            .map(|d| line_indent(self.src, d.start_byte()))
            .unwrap_or_default();
        let name = |d: &Node| {
            let t = self.text(*d);
            t[..t.find(['(', ' ', '\n']).unwrap_or(t.len())].to_owned()
        };
        let mut lines = Vec::new();
        let mut i = 0;
        while i < decorators.len() {
            let run = decorators[i..]
                .iter()
                .take_while(|d| name(d) == name(&decorators[i]))
                .count();
            let rows = &decorators[i..i + run];
            let mut line = outlined(self.text(decorators[i]));
            if run >= 3
                && rows.iter().all(|d| d.byte_range().len() <= OUTLINE_BYTES)
                && rows[run - 1].end_byte() - rows[0].start_byte() > self.opts.ceiling
            {
                line.push_str(&format!(" … ({} more)", run - 1));
                i += run;
            } else {
                i += 1;
            }
            lines.push(line);
        }
        lines.join(&format!("\n{indent}"))
    }

    /// A table of data in the decorators of the definition `node` (pytest's `parametrize`,
    /// an Angular component's inline template): where its decorators begin and where the
    /// definition's own text does (its keyword), when the decorators alone are over the
    /// ceiling. Decorators that fit are the definition's and read with it.
    fn decorator_table<'t>(&self, node: Node<'t>, start: usize) -> Option<DecoratorTable<'t>> {
        let outer = self.wrapper(node, start);
        let decorators = self.decorators(outer, node, start);
        let first = decorators.first()?.start_byte();
        let last = decorators.last()?;
        let own = Self::own_start(node, *last);
        (own > first && own - first > self.opts.ceiling).then_some(DecoratorTable {
            start: first,
            own,
            decorators,
        })
    }

    /// What wraps `node` and ends with it, from `start` on (Python's `decorated_definition`,
    /// an `export` statement), up to the block it is in.
    fn wrapper<'t>(&self, node: Node<'t>, start: usize) -> Node<'t> {
        let mut outer = node;
        while let Some(up) = outer.parent()
            && up.start_byte() >= start
            && up.end_byte() == node.end_byte()
            && !self.spec.bodies.contains(&up.kind())
            && !up.kind().ends_with("block")
            && !up.kind().ends_with("body")
        {
            outer = up;
        }
        outer
    }

    /// Keeps a definition's own text (from `own`) out of the last part of its decorator
    /// table (from `table`): a short signature and body, or class line, are not merged into
    /// the table's tail, however short.
    fn apart_from_table(&self, ranges: &mut Vec<(usize, usize)>, table: usize, own: usize) {
        if let Some(k) = ranges
            .iter()
            .position(|&(s, e)| s > table && s < own && own < e)
        {
            let (s, e) = ranges[k];
            ranges[k] = crate::text::trim(self.src, s, own);
            ranges.insert(k + 1, crate::text::trim(self.src, own, e));
        }
    }

    fn emit_parts(
        &mut self,
        ranges: &[(usize, usize)],
        kind: Kind,
        symbol: Option<&str>,
        scope: &[Scope],
        parent: Option<usize>,
        signature: Option<&str>,
    ) {
        let n = ranges.len() as u32;
        for (i, &(s, e)) in ranges.iter().enumerate() {
            let mut p = Piece::new(kind, s, e, self.src[s..e].to_owned());
            p.symbol = symbol.map(str::to_owned);
            p.scope = scope.to_vec();
            p.parent = parent;
            if n > 1 {
                p.part = Some((i as u32 + 1, n));
                p.signature = signature.map(str::to_owned);
            }
            self.out.push(p);
        }
    }

    /// Where a node may be cut: the starts of the statements in its blocks, and of the
    /// clauses that follow a block (`else`, `except`, `case`).
    fn cut_points<'t>(&self, node: Node<'t>, def: Node<'t>) -> Vec<Node<'t>> {
        let mut out = Vec::new();
        let mut c = node.walk();
        let is_body = self.spec.bodies.contains(&node.kind())
            || node.kind().ends_with("block")
            || node.kind().ends_with("body")
            || node.kind().ends_with("_statement") && node.kind().starts_with("compound")
            || node.kind() == "body_statement";
        if is_body || node != def && node.parent() == Some(def) {
            out.extend(statements(node));
            return out;
        }
        let mut after_block = false;
        for child in node.named_children(&mut c) {
            let k = child.kind();
            let blockish = self.spec.bodies.contains(&k)
                || k.ends_with("block")
                || k.ends_with("body")
                || k == "compound_statement"
                || k == "body_statement"
                || node.child_by_field_name("body") == Some(child);
            if blockish {
                out.extend(statements(child));
                after_block = true;
            } else if after_block {
                out.push(child);
            }
        }
        out
    }

    /// Greedily packs `[start, end)` into ranges under the ceiling, cutting only at `points`;
    /// a span between two points that is still too large is cut inside, recursively, then at
    /// line ends.
    fn pack(
        &mut self,
        start: usize,
        end: usize,
        points: &[(usize, Option<Node>)],
        depth: usize,
    ) -> Vec<(usize, usize)> {
        let ceiling = self.opts.ceiling;
        let mut bounds: Vec<(usize, Option<Node>)> = vec![(start, None)];
        bounds.extend(
            points
                .iter()
                .copied()
                .filter(|(p, _)| *p > start && *p < end),
        );
        bounds.push((end, None));
        bounds.dedup_by_key(|(p, _)| *p);
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut cur = start;
        for (at, w) in bounds.windows(2).enumerate() {
            let ((s, node), (e, _)) = (w[0], w[1]);
            if e - cur <= ceiling {
                continue; // still fits: extend the current range
            }
            let oversize = e - s > ceiling;
            // The comments and attributes directly above a statement go with it, not at the
            // end of the part before. A comment is no statement to gather them: a run of
            // comment lines is cut between its paragraphs (`//!` alone, or before a `# heading`),
            // not a line at a time.
            let anchor = node.is_some_and(|n| !self.spec.comments.contains(&n.kind()));
            let mut cut = if anchor {
                s
            } else {
                bounds[1..=at]
                    .iter()
                    .map(|b| b.0)
                    .filter(|&p| p > cur + ceiling / 3)
                    .min_by_key(|&p| (comment_break(self.src, p), std::cmp::Reverse(p)))
                    .unwrap_or(s)
            };
            for &(p, n) in bounds[..at].iter().rev().take_while(|_| anchor) {
                let lead = n.is_some_and(|n| {
                    let k = n.kind();
                    (self.spec.comments.contains(&k) || self.spec.attributes.contains(&k))
                        && !has_blank_line(&self.src[n.end_byte()..cut])
                });
                if !lead || p <= cur || !oversize && e - p > ceiling {
                    break;
                }
                cut = p;
            }
            // What comes before a statement that is cut inside (a signature, a comment) goes
            // with its first part when it is small, not in a part of its own.
            if cut > cur && !(oversize && cut - cur <= ceiling / 4) {
                self.push_range(cur, cut, &mut out);
                cur = cut;
            }
            if oversize {
                // One statement too large on its own: cut inside it.
                let inner = match node {
                    Some(n) if depth < self.opts.max_depth => {
                        let pts: Vec<(usize, Option<Node>)> = self
                            .cut_points(n, n)
                            .into_iter()
                            .map(|c| (c.start_byte(), Some(c)))
                            .collect();
                        if pts.iter().any(|(p, _)| *p > cur && *p < e) {
                            self.pack(cur, e, &pts, depth + 1)
                        } else {
                            split_lines(self.src, cur, e, ceiling, &mut self.notes)
                        }
                    }
                    _ => {
                        if depth >= self.opts.max_depth {
                            self.note(Note::DepthLimit);
                        }
                        split_lines(self.src, cur, e, ceiling, &mut self.notes)
                    }
                };
                out.extend(inner);
                cur = e;
            }
        }
        if end > cur {
            self.push_range(cur, end, &mut out);
        }
        crate::text::merge_small(&mut out, self.opts.floor, ceiling);
        out
    }

    fn push_range(&mut self, s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
        let (s, e) = trim(self.src, s, e);
        if e > s {
            if e - s > self.opts.ceiling {
                out.extend(split_lines(
                    self.src,
                    s,
                    e,
                    self.opts.ceiling,
                    &mut self.notes,
                ));
            } else {
                out.push((s, e));
            }
        }
    }

    fn body_of<'t>(&self, node: Node<'t>) -> Option<Node<'t>> {
        // `const proto = module.exports = { … }`: the object is the body.
        if self.spec.arrow_functions
            && let Some((target, value)) = self.js_assignment(node)
        {
            match value.kind() {
                "object" => return Some(value),
                "class" => return value.child_by_field_name("body"),
                _ => {}
            }
            if let Some(f) = self.js_made_function(self.text(target), value) {
                return f.child_by_field_name("body");
            }
        }
        if let Some((_, f)) = go_func_var(node).or_else(|| lua_function_value(node)) {
            return f.child_by_field_name("body");
        }
        if self.spec.arrow_functions
            && let Some(object) = self
                .js_default_object(node)
                .or_else(|| self.js_mixin(node).map(|m| m.1))
        {
            return Some(object);
        }
        if let Some(b) = node.child_by_field_name("body") {
            return Some(b);
        }
        // A bounded breadth-first search for a declared body kind (Go's `type X struct {…}`).
        let mut frontier = vec![node];
        for _ in 0..4 {
            let mut next = Vec::new();
            for n in frontier {
                let mut c = n.walk();
                for child in n.named_children(&mut c) {
                    if self.spec.bodies.contains(&child.kind()) {
                        return Some(child);
                    }
                    next.push(child);
                }
            }
            frontier = next;
        }
        None
    }

    fn name_of(&self, node: Node) -> Option<String> {
        if node.kind() == "impl_item" {
            let ty = strip_generics(self.text(node.child_by_field_name("type")?));
            // A trait impl keeps the trait's arguments: `From<io::Error> for Error` and
            // `From<fmt::Error> for Error` are two impls, and a reader tells them apart.
            return Some(match node.child_by_field_name("trait") {
                Some(t) => format!("{} for {ty}", squeeze(self.text(t))),
                None => ty,
            });
        }
        self.raw_name(node).map(|n| strip_generics(&n))
    }

    fn raw_name(&self, node: Node) -> Option<String> {
        if let Some(n) = node.child_by_field_name("name") {
            return Some(self.text(n).to_owned());
        }
        // A JavaScript class field: `handle = () => {…}`.
        if node.kind() == "field_definition"
            && let Some(n) = node.child_by_field_name("property")
        {
            return Some(self.text(n).to_owned());
        }
        if let Some(mut d) = node.child_by_field_name("declarator") {
            for _ in 0..16 {
                match d.child_by_field_name("declarator") {
                    Some(inner) => d = inner,
                    None => break,
                }
            }
            let t = self.text(d);
            return Some(t[..t.find('(').unwrap_or(t.len())].trim().to_owned());
        }
        let mut c = node.walk();
        for child in node.named_children(&mut c) {
            if let Some(n) = child.child_by_field_name("name") {
                return Some(self.text(n).to_owned());
            }
            if matches!(
                child.kind(),
                "identifier" | "type_identifier" | "constant" | "name"
            ) {
                return Some(self.text(child).to_owned());
            }
        }
        None
    }

    /// The skeleton of an oversize container: its header, then each member — definitions
    /// as signature (+ docstring) with the body elided, everything else as it is; and where
    /// each member is, `(start, end)` in the skeleton and in the source.
    fn skeleton(
        &self,
        start: usize,
        body: Node,
        children: &[Node],
        head: Option<(usize, usize, String)>,
    ) -> (String, Vec<(usize, usize, usize, usize)>) {
        let items = self.items(children);
        // The header runs to the first member: opening braces stay with it.
        let lead = items
            .iter()
            .take_while(|i| i.def.is_none() && !i.node.is_named())
            .count();
        let first = items.get(lead).map_or(body.end_byte(), |i| i.start);
        let outlined_head = head.filter(|&(d, own, _)| start <= d && own <= first);
        let plain_head = outlined_head.is_none();
        let mut out = match outlined_head {
            // A table of decorators is outlined (the container's own code has it whole).
            Some((d, own, outline)) => format!(
                "{}{outline}\n{}{}",
                &self.src[start..d],
                line_indent(self.src, own),
                self.src[own..first].trim_start()
            ),
            None => self.src[start..first].to_owned(),
        };
        out.truncate(out.trim_end().len());
        // Where the source of the last line written ends, while that line is the source's
        // own text: code on the same line after it joins it (Ruby's `class << self`, three
        // tokens).
        let mut written = plain_head.then_some(start + out.len());
        let mut lines: Vec<(usize, usize, usize, usize)> = Vec::new();
        for item in &items[lead..] {
            let one_line = !self.src[item.start..item.end].contains('\n');
            if item.def.is_none()
                && one_line
                && let Some(e) = written
                && e <= item.start
                && !self.src[e..item.start].contains('\n')
            {
                out.push_str(self.src[e..item.end].trim_end());
                if let Some(l) = lines.last_mut() {
                    l.1 = out.len();
                    l.3 = item.end;
                }
                written = Some(item.end);
                continue;
            }
            written = (item.def.is_none() && one_line).then_some(item.end);
            let indent = line_indent(self.src, item.start);
            let text = match item.def {
                Some((node, _)) => {
                    let body = self.body_of(node);
                    let sig_end = body.map_or(item.end, |b| b.start_byte());
                    let mut s = self.skeleton_lead(item);
                    // Decorators its wrapper holds (Python's `decorated_definition`), outlined
                    // as those above it are.
                    let mut from = item.node.start_byte();
                    let wrapped = self.wrapped_decorators(item.node, node);
                    // Those that open it (Java's annotations, C#'s attributes), when one is
                    // a table to outline.
                    let opening = self.opening_decorators(node);
                    if !wrapped.is_empty() {
                        s.push_str(&self.outline_decorators(&wrapped));
                        s.push('\n');
                        s.push_str(&line_indent(self.src, node.start_byte()));
                        from = node.start_byte();
                    } else if let (Some(first), Some(last)) = (opening.first(), opening.last())
                        && (opening.iter().any(|d| d.byte_range().len() > OUTLINE_BYTES)
                            || last.end_byte() - first.start_byte() > self.opts.ceiling)
                    {
                        // Keywords before them stay (`public @ParameterizedTest …`).
                        s.push_str(&self.src[from..first.start_byte().max(from)]);
                        s.push_str(&self.outline_decorators(&opening));
                        s.push('\n');
                        s.push_str(&line_indent(self.src, node.start_byte()));
                        from = Self::own_start(node, *last);
                    }
                    s.push_str(self.src[from..sig_end].trim_end());
                    if let Some(doc) = body.and_then(|b| self.docstring(b)) {
                        s.push('\n');
                        s.push_str(&line_indent(self.src, doc.start_byte()));
                        s.push_str(&first_line(self.text(doc)));
                    }
                    if body.is_some() {
                        s.push_str(" …");
                    }
                    s
                }
                None => outlined(self.src[item.start..item.end].trim_end()),
            };
            out.push('\n');
            let at = out.len();
            out.push_str(&indent);
            out.push_str(&text);
            lines.push((at, out.len(), item.start, item.end));
        }
        (out, lines)
    }

    /// What stands above a member in a skeleton: its attributes and decorators whole (by
    /// their first line when over [`OUTLINE_BYTES`]: a table of data), its comments by their
    /// first line of words (the member's own chunk has them whole), each on its own line.
    fn skeleton_lead(&self, item: &Item) -> String {
        let mut above = Vec::new();
        let mut n = item.node.prev_sibling();
        while let Some(p) = n.filter(|p| p.start_byte() >= item.start) {
            above.push(p);
            n = p.prev_sibling();
        }
        let mut out = String::new();
        let mut commented = false;
        for p in above.into_iter().rev() {
            let text = if self.spec.comments.contains(&p.kind()) {
                if commented {
                    continue;
                }
                commented = true;
                first_line(self.text(p))
            } else {
                outlined(self.text(p))
            };
            out.push_str(text.trim_start());
            out.push('\n');
            out.push_str(&line_indent(self.src, item.node.start_byte()));
        }
        out
    }

    fn docstring<'t>(&self, body: Node<'t>) -> Option<Node<'t>> {
        if !self.spec.docstrings {
            return None;
        }
        let first = body.named_child(0)?;
        (first.kind() == "expression_statement"
            && first.named_child(0).is_some_and(|s| s.kind() == "string"))
        .then_some(first)
    }

    /// `(byte, callee)` for every call, sorted by position; the file's import statements.
    fn calls_and_imports(&self, root: Node) -> (Vec<(usize, String)>, Vec<String>) {
        // Compare numeric kind and field ids on the hot path, not strings.
        let lang = root.language();
        let import_ids: Vec<u16> = self
            .spec
            .imports
            .iter()
            .map(|k| lang.id_for_node_kind(k, true))
            .filter(|id| *id != 0)
            .collect();
        let call_ids: Vec<(u16, std::num::NonZeroU16)> = self
            .spec
            .calls
            .iter()
            .filter_map(|(k, f)| Some((lang.id_for_node_kind(k, true), lang.field_id_for_name(f)?)))
            .filter(|(id, _)| *id != 0)
            .collect();
        let mut calls = Vec::new();
        let mut imports = Vec::new();
        let mut cursor = root.walk();
        'walk: loop {
            let node = cursor.node();
            let kind = node.kind_id();
            let mut descend = true;
            if import_ids.contains(&kind) {
                let t = self
                    .text(node)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                let t = t.trim_end_matches(';');
                let t = &t[..crate::text::floor_boundary(t, 200)];
                imports.push(t.to_owned());
                descend = false;
            } else if let Some(callee) = call_ids
                .iter()
                .filter(|(k, _)| *k == kind)
                .find_map(|(_, field)| node.child_by_field_id(field.get()))
                // A literal of a slice, map or anonymous struct names no type of its own.
                .filter(|c| !UNNAMED_TYPES.contains(&c.kind()))
            {
                let text = self.text(callee);
                // `Self { .. }` names the type it is in, not one to resolve.
                if let Some(name) = callee_name(text).filter(|n| n != "Self") {
                    calls.push((node.start_byte(), name));
                }
                // `Error::new(…)`, `Config::default()`: a call of a type's function uses
                // the type too.
                if let Some(owner) = path_owner(text) {
                    calls.push((node.start_byte(), owner));
                }
            }
            if descend && cursor.goto_first_child() {
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    continue 'walk;
                }
                if !cursor.goto_parent() {
                    break 'walk;
                }
            }
        }
        calls.sort_by_key(|(p, _)| *p);
        (calls, imports)
    }
}

/// How many members of one container are kept addressable.
const MAX_MEMBERS: usize = 256;

/// A function directly inside a class-like container is a method.
fn member_kind(kind: Kind, container: Kind) -> Kind {
    if kind == Kind::Function
        && container.is_container()
        && !matches!(container, Kind::Namespace | Kind::Module)
    {
        Kind::Method
    } else {
        kind
    }
}

/// Python: the target and value of `name = …` (a plain name).
fn py_assignment(node: Node<'_>) -> Option<(Node<'_>, Node<'_>)> {
    let a = (node.kind() == "expression_statement")
        .then(|| node.named_child(0))
        .flatten()?;
    let target = a.child_by_field_name("left")?;
    (a.kind() == "assignment" && target.kind() == "identifier")
        .then(|| Some((target, a.child_by_field_name("right")?)))
        .flatten()
}

/// Go: what a `type` declaration defines, by the type it names: `type Router interface { … }`
/// an interface, `type Entry struct { … }` a struct, anything else (`type HandlerFunc
/// func(…)`, `type Level uint32`, an alias `type L = Level`) a type; alone or in a group.
fn go_type(node: Node) -> Option<Kind> {
    let spec = go_type_spec(node)?;
    if spec.kind() == "type_alias" {
        return Some(Kind::Type);
    }
    Some(match spec.child_by_field_name("type")?.kind() {
        "interface_type" => Kind::Interface,
        "struct_type" => Kind::Struct,
        _ => Kind::Type,
    })
}

/// The one node of `nodes`, when there is exactly one.
fn only<'t>(mut nodes: impl Iterator<Item = Node<'t>>) -> Option<Node<'t>> {
    let first = nodes.next()?;
    nodes.next().is_none().then_some(first)
}

/// Go: the one `type_spec` or `type_alias` of a `type` declaration, or the node itself.
fn go_type_spec(node: Node) -> Option<Node> {
    match node.kind() {
        "type_spec" | "type_alias" => Some(node),
        "type_declaration" => {
            let mut c = node.walk();
            only(
                node.named_children(&mut c)
                    .filter(|n| matches!(n.kind(), "type_spec" | "type_alias")),
            )
        }
        _ => None,
    }
}

/// Go: the name and function of `var defaultLogFormatter = func(param LogFormatterParams)
/// string {…}`, a declaration of one variable whose value is a function literal: a function
/// defined as a value, found by its name as `func defaultLogFormatter(…)` would be.
fn go_func_var(node: Node) -> Option<(Node, Node)> {
    if node.kind() != "var_declaration" {
        return None;
    }
    let mut c = node.walk();
    let spec = only(
        node.named_children(&mut c)
            .filter(|n| n.kind() == "var_spec"),
    )?;
    let mut c = spec.walk();
    let name = only(spec.children_by_field_name("name", &mut c))?;
    let value = spec.child_by_field_name("value")?;
    let mut c = value.walk();
    let f = only(value.named_children(&mut c))?;
    (f.kind() == "func_literal").then_some((name, f))
}

/// Lua: the target and function of `M.sub = function(a, b) … end` or `local sub =
/// function(a) … end`, an assignment of one function to one name.
fn lua_function_value(node: Node) -> Option<(Node, Node)> {
    let assignment = match node.kind() {
        "assignment_statement" => node,
        "variable_declaration" => {
            let mut c = node.walk();
            node.named_children(&mut c)
                .find(|n| n.kind() == "assignment_statement")?
        }
        _ => return None,
    };
    let one = |kind: &str| {
        let list = {
            let mut c = assignment.walk();
            assignment
                .named_children(&mut c)
                .find(|n| n.kind() == kind)?
        };
        let mut c = list.walk();
        only(list.named_children(&mut c))
    };
    let target = one("variable_list")?;
    let value = one("expression_list")?;
    (value.kind() == "function_definition"
        && matches!(target.kind(), "identifier" | "dot_index_expression"))
    .then_some((target, value))
}

/// Go: the `interface { … }` of `type Router interface { … }`, alone or in a group.
fn go_interface_type(node: Node) -> Option<Node> {
    go_type_spec(node)?
        .child_by_field_name("type")
        .filter(|t| t.kind() == "interface_type")
}

/// The first line of a comment or docstring that holds words (`/**` alone does not), with
/// ` …` when more follows.
fn first_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(first) = lines.next() else {
        return String::new();
    };
    // `/**` or `"""` alone: the opener, then the next line without its `*`.
    let (line, more) = if first.chars().any(char::is_alphanumeric) {
        (first.to_owned(), lines.next().is_some())
    } else {
        match lines.next() {
            Some(l) => (
                format!("{first} {}", l.trim_start_matches('*').trim_start()),
                lines.next().is_some(),
            ),
            None => return first.to_owned(),
        }
    };
    if more { format!("{line} …") } else { line }
}

/// The function a default export's value holds: the value itself, or what a guard
/// (`isSupported && function …`) or parentheses (`(async (config) => {…})`) wrap.
fn exported_function(mut value: Node) -> Node {
    for _ in 0..4 {
        value = match value.kind() {
            "parenthesized_expression" => match value.named_child(0) {
                Some(v) => v,
                None => break,
            },
            "binary_expression"
                if value
                    .child_by_field_name("operator")
                    .is_some_and(|o| matches!(o.kind(), "&&" | "||")) =>
            {
                match value.child_by_field_name("right") {
                    Some(v) => v,
                    None => break,
                }
            }
            _ => break,
        };
    }
    value
}

/// `lib/helpers/bind.js` → `bind`; `src/index.ts` → `index`.
/// `is-stream` → `isStream`: the name a kebab-case module is imported by in JavaScript.
fn import_name(stem: &str) -> String {
    let mut out = String::with_capacity(stem.len());
    let mut upper = false;
    for c in stem.chars() {
        if c == '-' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn file_stem(path: &str) -> &str {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

/// The name a file is imported by: its stem, or for an `index` file its directory's name
/// (`lib/router/index.js` is `require('./router')`).
fn module_name(path: &str) -> &str {
    let stem = file_stem(path);
    if stem != "index" {
        return stem;
    }
    let mut dirs = path.rsplit(['/', '\\']).skip(1);
    dirs.next().filter(|d| !d.is_empty()).unwrap_or(stem)
}

fn is_js_function(n: Node) -> bool {
    matches!(
        n.kind(),
        "arrow_function" | "function_expression" | "function" | "generator_function"
    )
}

/// `[0, text.len())` cut into ranges under `ceiling` at `points` (byte offsets, ascending)
/// only: each range runs to the last point that fits; a stretch between two points that is
/// over the ceiling alone is cut by [`split_lines`].
fn pack_at(
    text: &str,
    points: &[usize],
    ceiling: usize,
    notes: &mut Vec<crate::Note>,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut cur, mut fits) = (0, 0);
    let ends = points.iter().copied().filter(|&p| p > 0 && p < text.len());
    for p in ends.chain([text.len()]) {
        if p - cur <= ceiling {
            fits = p;
            continue;
        }
        if fits > cur {
            out.push((cur, fits));
            cur = fits;
        }
        if p - cur > ceiling {
            out.extend(split_lines(text, cur, p, ceiling, notes));
            cur = p;
        }
        fits = p;
    }
    if cur < text.len() {
        out.push((cur, text.len()));
    }
    out
}

/// JavaScript: the bodies of the functions an immediately invoked function expression
/// statement runs, whose definitions are the file's own: `(function () { … })()`,
/// `(function () { … }.call(this))`, `!function () { … }()`, `(() => { … })()`, and a UMD
/// wrapper's factory passed as an argument (`(function (global, factory) { … }(this,
/// function (moment) { … }))`). Empty for any other node.
fn iife_bodies<'t, 's>(node: Node<'t>, text: impl Fn(Node<'t>) -> &'s str) -> Vec<Node<'t>> {
    let unwrap = |mut n: Node<'t>| {
        while matches!(n.kind(), "parenthesized_expression" | "unary_expression") {
            let Some(inner) = n
                .child_by_field_name("argument")
                .or_else(|| n.named_child(0))
            else {
                break;
            };
            n = inner;
        }
        n
    };
    if node.kind() != "expression_statement" {
        return Vec::new();
    }
    let Some(call) = node.named_child(0).map(unwrap) else {
        return Vec::new();
    };
    if call.kind() != "call_expression" {
        return Vec::new();
    }
    let Some(mut callee) = call.child_by_field_name("function").map(unwrap) else {
        return Vec::new();
    };
    if callee.kind() == "member_expression"
        && callee
            .child_by_field_name("property")
            .is_some_and(|p| matches!(text(p), "call" | "apply"))
        && let Some(object) = callee.child_by_field_name("object")
    {
        callee = unwrap(object);
    }
    if !is_js_function(callee) {
        return Vec::new();
    }
    let block = |f: Node<'t>| {
        f.child_by_field_name("body")
            .filter(|b| b.kind() == "statement_block")
    };
    let mut out: Vec<Node<'t>> = block(callee).into_iter().collect();
    if let Some(args) = call.child_by_field_name("arguments") {
        let mut w = args.walk();
        for a in args.named_children(&mut w) {
            let a = unwrap(a);
            if is_js_function(a) {
                out.extend(block(a));
            }
        }
    }
    out
}

/// An object literal with at least one method, or `key: function …` pair.
fn has_function_member(object: Node) -> bool {
    let mut c = object.walk();
    object.named_children(&mut c).any(|m| {
        m.kind() == "method_definition"
            || m.kind() == "pair" && m.child_by_field_name("value").is_some_and(is_js_function)
    })
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

/// The segments of a plain dotted path (`Foo.prototype.bar`), or `None` for anything else.
fn js_path(target: &str) -> Option<Vec<&str>> {
    let segs: Vec<&str> = target.split('.').map(str::trim).collect();
    segs.iter().all(|s| is_identifier(s)).then_some(segs)
}

/// Owner, symbol and kind of a JavaScript definition by assignment to `target`, whose value
/// is a function named `own` (if it has a name) or, for [`Kind::Module`], an object.
/// `prototype` segments are dropped: `Foo.prototype.bar` is `Foo.bar`, a method. What is
/// assigned to `exports` or `module.exports` is a function of the module.
/// What an assignment or a call defines, named: its owner, its name and its kind. `stem` is
/// the name the file is imported by, which names an anonymous `module.exports = (…) => …`.
fn js_naming(
    target: &str,
    own: Option<&str>,
    kind: Kind,
    stem: &str,
) -> (Option<String>, String, Kind) {
    let segs: Vec<&str> = js_path(target)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| *s != "prototype")
        .collect();
    let Some((last, owner)) = segs.split_last() else {
        return (None, target.to_owned(), kind);
    };
    if kind == Kind::Module {
        return (None, segs.join("."), kind);
    }
    let exports = segs[0] == "exports" || segs.starts_with(&["module", "exports"]);
    if kind == Kind::Class {
        // A class is known by its own name (`module.exports = class Application`), else by
        // what it is assigned to; what exports it is no owner.
        let name = own.unwrap_or(last);
        let owner = (!exports && !owner.is_empty()).then(|| owner.join("."));
        return (owner, name.to_owned(), kind);
    }
    match (segs.as_slice(), own) {
        (["module", "exports"], Some(own)) => (None, own.to_owned(), Kind::Function),
        (["module", "exports"], None) if !stem.is_empty() => {
            (None, stem.to_owned(), Kind::Function)
        }
        ([_], _) => (None, (*last).to_owned(), kind),
        _ => (
            Some(owner.join(".")),
            (*last).to_owned(),
            if exports {
                Kind::Function
            } else {
                Kind::Method
            },
        ),
    }
}

/// `Foo::bar` → (`Foo`, `bar`, `::`); Lua's `M:update` and `M.new` likewise; `None` unless
/// both sides are names.
/// The statements of a block: its named children, with a statement list (Go's block holds
/// its statements in one `statement_list` node) opened into its own, so that a long body is
/// cut between statements, not at line ends.
fn statements(block: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    let mut c = block.walk();
    for child in block.named_children(&mut c) {
        if child.kind() == "statement_list" {
            let mut cc = child.walk();
            out.extend(child.named_children(&mut cc));
        } else {
            out.push(child);
        }
    }
    out
}

fn split_qualified(name: &str) -> Option<(&str, &str, &'static str)> {
    let (i, sep) = ["::", ":", "."]
        .into_iter()
        .find_map(|sep| name.rfind(sep).map(|i| (i, sep)))?;
    let (owner, symbol) = (&name[..i], &name[i + sep.len()..]);
    let owner_ok = owner
        .split(sep)
        .flat_map(|s| s.split(['.', ':']))
        .all(|s| s.is_empty() || is_identifier(s));
    (!owner.is_empty() && owner_ok && is_identifier(symbol)).then_some((owner, symbol, sep))
}

/// Decorators over the ceiling above a definition ([`Walker::decorator_table`]).
struct DecoratorTable<'t> {
    /// Where the first decorator begins.
    start: usize,
    /// Where the definition's own text begins after them.
    own: usize,
    decorators: Vec<Node<'t>>,
}

/// A text longer than this is outlined in a skeleton by its first line.
const OUTLINE_BYTES: usize = 200;

/// `t` in a skeleton: whole, or by its first line and ` …` when it is over
/// [`OUTLINE_BYTES`] on several lines (a long field, a decorator holding a table).
fn outlined(t: &str) -> String {
    match t.find('\n') {
        Some(i) if t.len() > OUTLINE_BYTES => format!("{} …", t[..i].trim_end()),
        _ => t.to_owned(),
    }
}

fn line_indent(src: &str, at: usize) -> String {
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    src[line_start..at]
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect()
}

/// Type nodes a literal can build that name no type: `[]string{…}`, `map[string]int{…}`,
/// `struct{ a int }{…}`, `[...]int{…}`.
const UNNAMED_TYPES: &[&str] = &[
    "slice_type",
    "map_type",
    "array_type",
    "implicit_length_array_type",
    "struct_type",
];

/// The type a `::` path calls a function of (`Error` for `Error::new` and for
/// `crate::error::Error::from`): the segment before the last, when it is written as a type
/// is (capitalised), is not `Self`, and is the path's first segment or the path starts at
/// `crate`, `self` or `super` (`io::Error::new` is another crate's `Error`, not this one's).
fn path_owner(text: &str) -> Option<String> {
    let text = strip_generics(text);
    let (path, _) = text.rsplit_once("::")?;
    let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
    let owner = segments.pop()?;
    let local = segments
        .first()
        .is_none_or(|s| matches!(*s, "crate" | "self" | "super"));
    let ok = local
        && owner.starts_with(|c: char| c.is_ascii_uppercase())
        && owner != "Self"
        && owner.len() <= 80
        && owner.chars().all(|c| c.is_alphanumeric() || c == '_');
    ok.then(|| owner.to_owned())
}

/// The last identifier of a callee expression: `self.queue.put` → `put`, `Vec::<T>::new` →
/// `new`, `new Worker(q).drain` → `drain`.
fn callee_name(text: &str) -> Option<String> {
    let text = strip_generics(text);
    let name = identifiers(&text).last()?;
    (name.len() <= 80).then(|| name.to_owned())
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty() && !w.starts_with(|c: char| c.is_ascii_digit()))
}

const IMPORT_KEYWORDS: &[&str] = &[
    "import",
    "from",
    "as",
    "use",
    "crate",
    "self",
    "super",
    "pub",
    "package",
    "using",
    "static",
    "require",
    "require_once",
    "include",
    "include_once",
    "extern",
    "std",
    "namespace",
    "type",
    "typeof",
    "default",
    "h",
    "hpp",
    "java",
    "lang",
];

/// The names an import statement binds, roughly: the last identifier of each imported item
/// (`from a.b import c, d as e` → `c`, `e`; `use std::io::{Read, Write}` → `Read`, `Write`;
/// `import { x } from "m"` → `x`; Go's `"net/http"` → `http`).
fn import_names(import: &str) -> Vec<&str> {
    let mut t = import;
    if t.starts_with("import")
        && let Some(i) = t.find(" from ")
    {
        t = &t[..i];
    }
    if let Some(i) = t.find(" import ") {
        t = &t[i + " import ".len()..];
    }
    t.split([',', '{', '}', '(', ')', '"', '\'', ';', '`'])
        .filter_map(|el| {
            identifiers(el)
                .filter(|w| w.len() > 1 && !IMPORT_KEYWORDS.contains(w))
                .last()
        })
        .collect()
}

/// The table-of-contents chunk(s) of a file: path, imports, and every symbol with its line.
fn toc(path: &str, pieces: &[Piece], imports: &[String], src: &str, ceiling: usize) -> Vec<Piece> {
    let mut text = format!("{path}\n");
    if !imports.is_empty() {
        text.push_str("imports:\n");
        for i in imports {
            text.push_str("  ");
            text.push_str(i);
            text.push('\n');
        }
    }
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(src.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut defs = String::new();
    for p in pieces {
        if p.kind == Kind::ClassSkeleton {
            continue;
        }
        // Module code is listed by the constants it names.
        let own = p
            .qualified_name()
            .filter(|_| p.kind != Kind::Code)
            .map(|q| (p.kind, q, p.start));
        let members = p
            .members
            .iter()
            .map(|m| (m.kind, m.qualified_name.clone(), m.start));
        for (kind, q, start) in own.into_iter().chain(members) {
            if seen.insert((kind, q.clone())) {
                let line = line_starts.partition_point(|&s| s <= start);
                defs.push_str(&format!("  {} {q} (line {line})\n", kind.as_str()));
            }
        }
    }
    if !defs.is_empty() {
        text.push_str("defines:\n");
        text.push_str(&defs);
    }
    let mut notes = Vec::new();
    let ranges = split_lines(&text, 0, text.len(), ceiling, &mut notes);
    let n = ranges.len() as u32;
    ranges
        .into_iter()
        .enumerate()
        .map(|(i, (s, e))| {
            let mut p = Piece::new(Kind::Toc, 0, src.len(), text[s..e].to_owned());
            p.imports = imports.to_vec();
            if n > 1 {
                p.part = Some((i as u32 + 1, n));
            }
            p
        })
        .collect()
}
