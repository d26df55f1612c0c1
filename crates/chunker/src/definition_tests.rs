//! Definitions a reader names but the syntax spells in other ways: JavaScript functions
//! defined by assignment, Go methods with their receivers, Python lambdas and partials, and
//! the members of containers small enough to stay one chunk. Snapshots list each chunk as
//! `lines kind qualified-name` with its header line and its members.

#![allow(clippy::format_collect)] // building test inputs

use std::fmt::Write as _;

use crate::check::invariants;
use crate::records::{Source, to_records};
use crate::{Options, Strategy, chunk};
use trawl_core::records::ChunkRecord;

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/fixtures")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The chunks of `src` as records: `(kind, qualified name, members)`.
fn records(path: &str, lang: &str, src: &str) -> Vec<ChunkRecord> {
    let opts = Options::default();
    let c = chunk(path, Some(lang), src, Strategy::Ast, &opts);
    invariants(src, &c, opts.ceiling).unwrap();
    let repo = trawl_core::RepoId::parse("github.com/a/b").unwrap();
    let blob: trawl_core::BlobId = "0".repeat(40).parse().unwrap();
    let s = Source {
        repo: &repo,
        path,
        blob: &blob,
        language: lang,
    };
    to_records(&s, &c, src)
}

/// One line per chunk, its header's first line, its members and its first line of code.
fn outline(path: &str, lang: &str, src: &str) -> String {
    let mut out = String::new();
    for r in records(path, lang, src) {
        let _ = writeln!(
            out,
            "{}-{} {} {}",
            r.start_line,
            r.end_line,
            r.kind,
            r.qualified_name.as_deref().unwrap_or("")
        );
        let _ = writeln!(out, "   # {}", r.header.lines().next().unwrap_or(""));
        if !r.members.is_empty() {
            let _ = writeln!(out, "   members: {}", r.members.join(", "));
        }
        if r.kind == crate::Kind::Toc {
            for l in r.text.lines().skip_while(|l| *l != "defines:") {
                let _ = writeln!(out, "   │ {l}");
            }
        } else {
            let _ = writeln!(out, "   │ {}", r.text.lines().next().unwrap_or(""));
        }
    }
    out
}

/// `(kind, qualified name)` of every definition chunk.
fn definitions(lang: &str, src: &str) -> Vec<(String, String)> {
    records("x", lang, src)
        .into_iter()
        .filter(|r| !matches!(r.kind, crate::Kind::Toc | crate::Kind::Code))
        .map(|r| (r.kind.to_string(), r.qualified_name.unwrap_or_default()))
        .collect()
}

/// The first chunk of `symbol`.
fn by_symbol<'r>(recs: &'r [ChunkRecord], symbol: &str) -> &'r ChunkRecord {
    recs.iter()
        .find(|r| r.symbol.as_deref() == Some(symbol))
        .unwrap_or_else(|| panic!("no chunk of {symbol}"))
}

/// The first chunk of the qualified name `q`.
fn by_qualified<'r>(recs: &'r [ChunkRecord], q: &str) -> &'r ChunkRecord {
    recs.iter()
        .find(|r| r.qualified_name.as_deref() == Some(q))
        .unwrap_or_else(|| panic!("no chunk of {q}"))
}

/// Fixture `name` chunked as `path`, after checking that its definitions are `expected`:
/// its outline (for a snapshot) and its records.
fn fixture_case(
    name: &str,
    path: &str,
    lang: &str,
    expected: &[(&str, &str)],
) -> (String, Vec<ChunkRecord>) {
    let src = fixture(name);
    assert_eq!(definitions(lang, &src), pairs(expected), "{name}");
    (outline(path, lang, &src), records(path, lang, &src))
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, q)| ((*k).to_owned(), (*q).to_owned()))
        .collect()
}

#[test]
fn an_anonymous_default_export_is_known_by_its_file_name() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "lib/helpers/resolveConfig.js",
            "javascript",
            "import mergeConfig from './mergeConfig.js';\n\n/** Resolves the request's config. */\nexport default (config) => {\n  const newConfig = mergeConfig({}, config);\n  return newConfig;\n};\n",
            "function",
        ),
        (
            "src/utils/is-network-error.ts",
            "typescript",
            "export default function (error: unknown): boolean {\n  return error instanceof TypeError && error.message === 'Failed to fetch';\n}\n",
            "function",
        ),
        (
            "lib/adapters/xhr.js",
            "javascript",
            "const isXHRAdapterSupported = typeof XMLHttpRequest !== 'undefined';\n\nexport default isXHRAdapterSupported && function (config) {\n  return new Promise((resolve) => resolve(config));\n};\n",
            "function",
        ),
        (
            "lib/adapters/fetch.js",
            "javascript",
            "export default isFetchSupported && (async (config) => {\n  const response = await fetch(config.url);\n  return response;\n});\n",
            "function",
        ),
        (
            "lib/core/Store.js",
            "javascript",
            "export default class {\n  get(key) {\n    return this.map.get(key);\n  }\n}\n",
            "class",
        ),
        // CommonJS: what `module.exports` is given without a name.
        (
            "lib/is-stream.js",
            "javascript",
            "'use strict';\n\n/** Whether `stream` is a readable stream. */\nmodule.exports = (stream) => {\n  return stream !== null && typeof stream.pipe === 'function';\n};\n",
            "function",
        ),
        (
            "lib/router/index.js",
            "javascript",
            "module.exports = function (options) {\n  const router = { stack: [] };\n  return router;\n};\n",
            "function",
        ),
    ];
    for (path, lang, src, kind) in cases {
        // The name the module is imported by: a kebab-case file in camelCase, an index file
        // by its directory.
        let stem = match *path {
            "src/utils/is-network-error.ts" => "isNetworkError",
            "lib/is-stream.js" => "isStream",
            "lib/router/index.js" => "router",
            _ => path.rsplit('/').next().unwrap().split('.').next().unwrap(),
        };
        let recs = records(path, lang, src);
        let def = recs
            .iter()
            .find(|r| r.kind.to_string() == *kind)
            .unwrap_or_else(|| panic!("{path}: no {kind} in {recs:?}"));
        assert_eq!(def.symbol.as_deref(), Some(stem), "{path}");
        assert!(
            def.header.starts_with(&format!("{path} · {kind} {stem}\n")),
            "{}",
            def.header
        );
    }
    // A default export that is no function stays code; a named one keeps its name.
    let recs = records(
        "lib/defaults.js",
        "javascript",
        "export default { timeout: 0 };\n",
    );
    assert!(recs.iter().all(|r| r.symbol.as_deref() != Some("defaults")));
    let recs = records(
        "lib/helpers/bind.js",
        "javascript",
        "export default function bind(fn, thisArg) {\n  return function wrap() {\n    return fn.apply(thisArg, arguments);\n  };\n}\n",
    );
    assert!(recs.iter().any(|r| r.symbol.as_deref() == Some("bind")));
}

#[test]
fn javascript_properties_defined_by_a_call_are_definitions() {
    let (outline, recs) = fixture_case(
        "getters.js",
        "lib/connection.js",
        "javascript",
        &[
            ("method", "conn.port"),
            ("method", "conn.open"),
            ("method", "Session.target"),
            ("function", "defineGetter"),
        ],
    );
    insta::assert_snapshot!(outline);
    let port = by_qualified(&recs, "conn.port");
    assert!(
        port.text.starts_with("/**\n * The remote port"),
        "{}",
        port.text
    );
    assert!(
        port.header
            .starts_with("lib/connection.js · method conn.port\n"),
        "{}",
        port.header
    );
    // A route handler, a flag without a function and a listener named otherwise stay code.
    let code: String = recs
        .iter()
        .filter(|r| r.kind == crate::Kind::Code)
        .map(|r| r.text.as_str())
        .collect();
    for stays in ["__esModule", "app.get('/health'", "function onClose"] {
        assert!(code.contains(stays), "{stays} is code: {code}");
    }
}

#[test]
fn a_skeleton_outlines_its_members_without_repeating_their_docs() {
    let mut src = String::from("/// A store of settings.\npub struct Settings {\n");
    for i in 0..40 {
        let _ = writeln!(
            src,
            "    /// Field {i}, read at start.\n    pub field_{i}: u32,"
        );
    }
    src.push_str("}\n\nimpl Settings {\n");
    for i in 0..12 {
        let _ = writeln!(
            src,
            "    /// Reads value {i}.\n    ///\n    /// It is cached after the first read, and the cache is\n    /// dropped when the settings change.\n    #[inline]\n    pub fn value_{i}(&self) -> u32 {{\n        let v = self.field_{i} * {i};\n        v + 1\n    }}\n"
        );
    }
    src.push_str("}\n");
    let recs = records("src/settings.rs", "rust", &src);
    let skeleton: String = recs
        .iter()
        .filter(|r| r.kind == crate::Kind::ClassSkeleton && r.symbol.as_deref() == Some("Settings"))
        .map(|r| r.text.as_str())
        .collect();
    assert!(
        skeleton
            .contains("    /// Reads value 3.\n    #[inline]\n    pub fn value_3(&self) -> u32 …"),
        "a member: its first line of doc, its attributes and its signature: {skeleton}"
    );
    assert!(
        !skeleton.contains("cache is"),
        "the rest of its doc is in its own chunk"
    );
    let method = by_symbol(&recs, "value_3");
    assert!(
        method
            .text
            .contains("/// dropped when the settings change."),
        "{}",
        method.text
    );
    // The struct, fields alone, is cut into its parts with no outline to repeat them.
    assert!(skeleton.starts_with("impl Settings {"), "{skeleton}");
    let parts = recs
        .iter()
        .filter(|r| r.kind == crate::Kind::Struct)
        .count();
    assert!(parts >= 2, "{parts}");
}

#[test]
fn each_part_of_a_long_skeleton_cites_the_members_it_outlines() {
    let mut src = String::from("class Router:\n    \"\"\"Routes requests.\"\"\"\n\n");
    for i in 0..60 {
        let _ = writeln!(
            src,
            "    @cached(\"/path/{i}\")\n    def route_{i:02}(self, request):\n        \"\"\"Handle route {i}, the one for the {i}th path.\"\"\"\n        return self.dispatch(request, {i})\n"
        );
    }
    let lines = src.trim_end().lines().count() as u32;
    let recs = records("router.py", "python", &src);
    let parts: Vec<&ChunkRecord> = recs
        .iter()
        .filter(|r| r.kind == crate::Kind::ClassSkeleton)
        .collect();
    assert!(parts.len() >= 2, "{}", parts.len());
    assert_eq!(parts[0].start_line, 1);
    assert_eq!(parts.last().unwrap().end_line, lines);
    for (i, part) in parts.iter().enumerate() {
        assert!(
            part.end_line - part.start_line < lines - 1,
            "part {i} cites the whole class: {}-{}",
            part.start_line,
            part.end_line
        );
        if i > 0 {
            assert!(
                part.start_line > parts[i - 1].end_line,
                "parts {} and {i} overlap: {}-{} and {}-{}",
                i - 1,
                parts[i - 1].start_line,
                parts[i - 1].end_line,
                part.start_line,
                part.end_line
            );
        }
        // A member's decorator is outlined with its signature, in the same part.
        assert!(
            !part
                .text
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .trim_start()
                .starts_with('@'),
            "part {i} ends with a decorator: {}",
            part.text
        );
        // Every member it lists lies in the lines it cites.
        for l in part
            .text
            .lines()
            .filter(|l| l.trim_start().starts_with("def "))
        {
            let name = &l.trim_start()[4..l.trim_start().find('(').unwrap()];
            let m = by_symbol(&recs, name);
            assert!(
                m.start_line >= part.start_line && m.end_line <= part.end_line,
                "{name} {}-{} outside part {i} {}-{}",
                m.start_line,
                m.end_line,
                part.start_line,
                part.end_line
            );
        }
    }
}

#[test]
fn commonjs_functions_defined_by_assignment_are_definitions() {
    let (outline, recs) = fixture_case(
        "response.js",
        "lib/response.js",
        "javascript",
        &[
            ("method", "res.status"),
            ("method", "res.json"),
            ("function", "exports.helper"),
            ("function", "module.exports.format"),
            ("function", "Router"),
            ("method", "Router.use"),
            ("method", "Router.handle"),
            ("function", "createServer"),
            ("function", "noop"),
        ],
    );
    insta::assert_snapshot!(outline);
    let status = by_qualified(&recs, "res.status");
    assert_eq!(status.symbol.as_deref(), Some("status"));
    assert_eq!(status.kind, crate::Kind::Method);
    assert!(status.text.starts_with("/**\n * Set the HTTP status code"));
    assert!(
        status
            .header
            .starts_with("lib/response.js · method res.status\n")
    );
}

#[test]
fn definitions_inside_an_immediately_invoked_wrapper_are_the_files_own() {
    let (outline, recs) = fixture_case(
        "wrapped.js",
        "dist/tiny.js",
        "javascript",
        &[
            ("function", "arrayEvery"),
            ("function", "chunkSize"),
            ("function", "plural"),
            ("function", "translate"),
            ("function", "onReady"),
        ],
    );
    insta::assert_snapshot!(outline);
    let every = by_symbol(&recs, "arrayEvery");
    assert!(
        every
            .text
            .starts_with("/**\n   * Checks whether `predicate` holds"),
        "its JSDoc comes with it: {}",
        every.text
    );
    assert!(
        every.text.trim_end().ends_with("return true;\n  }"),
        "{}",
        every.text
    );
    let translate = by_symbol(&recs, "translate");
    assert!(
        translate.text.starts_with("// Picks the word"),
        "{}",
        translate.text
    );
}

#[test]
fn python_definitions_under_a_condition_are_the_modules_own() {
    let (outline, recs) = fixture_case(
        "conditional.py",
        "lib/proc.py",
        "python",
        &[
            ("function", "fast_join"),
            ("class", "StartupInfo"),
            ("function", "_close_fds"),
            ("class", "Process"),
        ],
    );
    insta::assert_snapshot!(outline);
    let fallback = by_symbol(&recs, "fast_join");
    assert!(
        fallback.text.starts_with("# Pure-Python fallback"),
        "its comment comes with it: {}",
        fallback.text
    );
    let process = by_symbol(&recs, "Process");
    assert_eq!(
        process.members,
        ["Process._spawn", "Process._spawn", "Process.wait"],
        "both spellings of a method defined per platform are members"
    );
}

#[test]
fn an_oversize_function_is_the_scope_of_the_functions_it_defines() {
    let mut expected = vec![("function", "createStore".to_owned())];
    expected.extend((0..6).map(|i| ("function", format!("createStore.step{i}"))));
    expected.push(("function", "createStore.subscribe".to_owned()));
    expected.push(("function", "createStore".to_owned()));
    let expected: Vec<(&str, &str)> = expected.iter().map(|(k, q)| (*k, q.as_str())).collect();
    let (outline, recs) = fixture_case("factory.js", "src/store.js", "javascript", &expected);
    insta::assert_snapshot!(outline);
    let step = by_symbol(&recs, "step3");
    assert!(step.text.starts_with("/**\n   * Step 3"), "{}", step.text);
    assert!(
        step.header
            .starts_with("src/store.js · function createStore › function step3\n"),
        "{}",
        step.header
    );
    let own = recs
        .iter()
        .filter(|r| r.symbol.as_deref() == Some("createStore"))
        .collect::<Vec<_>>();
    assert!(
        own[0].text.contains("var listeners = [];"),
        "{}",
        own[0].text
    );
    assert!(
        own.last().unwrap().text.contains("return { subscribe"),
        "{}",
        own.last().unwrap().text
    );
    // Its own code around them is one definition in parts, numbered as such (a call
    // resolves to the first).
    assert!(
        own[0]
            .header
            .starts_with("src/store.js · function createStore (part 1/2)\n"),
        "{}",
        own[0].header
    );
    assert!(
        own.last()
            .unwrap()
            .header
            .starts_with("src/store.js · function createStore (part 2/2)\n"),
        "{}",
        own.last().unwrap().header
    );
    // Small, it stays one chunk, its functions inside it.
    let small = "function outer() {\n  function inner() { return 1; }\n  return inner();\n}\n";
    assert_eq!(
        definitions("javascript", small),
        pairs(&[("function", "outer")])
    );
    // Oversize but mostly its own statements: cut at them, the small helper with them.
    let mut statements = String::new();
    for i in 0..80 {
        let _ = writeln!(statements, "  total += weigh(items[{i}], {i}) * factor;");
    }
    let big = format!(
        "function score(items, factor) {{\n  let total = 0;\n  function weigh(x, i) {{ return x * i; }}\n{statements}  return total;\n}}\n"
    );
    let defs = definitions("javascript", &big);
    assert!(
        defs.len() > 1
            && defs
                .iter()
                .all(|d| *d == ("function".to_owned(), "score".to_owned())),
        "{defs:?}"
    );
}

#[test]
fn rust_items_inside_an_item_macro_are_definitions() {
    let (outline, recs) = fixture_case(
        "macros.rs",
        "src/net.rs",
        "rust",
        &[
            ("macro", "cfg_net"),
            ("function", "connect"),
            ("struct", "Stream"),
            ("impl", "Stream"),
            ("function", "resolve"),
            ("function", "plain"),
        ],
    );
    insta::assert_snapshot!(outline);
    let connect = by_symbol(&recs, "connect");
    assert!(
        connect
            .text
            .starts_with("cfg_net! {\n    /// Opens a connection"),
        "{}",
        connect.text
    );
    let stream = recs
        .iter()
        .find(|r| r.kind == crate::Kind::Impl)
        .expect("the impl");
    assert_eq!(stream.members, ["Stream.close"]);
    // `lazy_static!`'s body is not Rust items: it stays code.
    assert!(
        recs.iter()
            .any(|r| r.kind == crate::Kind::Code && r.text.contains("static ref TABLE"))
    );
}

#[test]
fn members_of_an_object_assigned_to_module_exports_are_methods_of_it() {
    // An object of functions that fits under the ceiling is one chunk listing its members,
    // as a class of that size is.
    let (outline, recs) = fixture_case(
        "context.js",
        "lib/context.js",
        "javascript",
        &[("module", "proto")],
    );
    insta::assert_snapshot!(outline);
    let proto = by_symbol(&recs, "proto");
    assert_eq!(
        proto.members,
        [
            "proto.inspect",
            "proto.toJSON",
            "proto.throw",
            "proto.cookies",
            "proto.cookies"
        ]
    );
    assert!(proto.text.contains("util.inspect() implementation"));
    let small = "module.exports = {\n  get(key) { return this.map[key]; },\n  size: 3,\n};\n";
    assert_eq!(
        definitions("javascript", small),
        pairs(&[("module", "module.exports")])
    );
    // Over the ceiling, the object is a scope: each member is a chunk of its own.
    let methods: String = (0..40)
        .map(|i| format!("  /** Step {i}. */\n  step{i}(x) {{\n    return x + {i};\n  }},\n"))
        .collect();
    let big = format!("const proto = module.exports = {{\n{methods}  name: 'context',\n}};\n");
    let defs = definitions("javascript", &big);
    assert_eq!(defs.len(), 40, "{defs:?}");
    assert!(defs.iter().all(|(k, _)| k == "method"), "{defs:?}");
    assert_eq!(defs[7].1, "proto.step7");
    // An object without functions is module code, as is any other assignment.
    let data = "module.exports = { a: 1, b: [2] };\nexports.x = 1;\n";
    assert_eq!(definitions("javascript", data), []);
}

#[test]
fn module_exports_of_a_named_function_is_that_function() {
    let recs = records("lib/express.js", "javascript", &fixture("application.js"));
    let app = &recs[0];
    assert_eq!(
        (app.kind.as_str(), app.symbol.as_deref()),
        ("function", Some("createApplication"))
    );
    assert!(app.text.starts_with("/**\n * Create an application."));
    assert_eq!(
        definitions("javascript", "module.exports = () => 1;\n"),
        pairs(&[("function", "x")])
    );
}

#[test]
fn a_class_assigned_to_module_exports_is_a_class_with_its_methods() {
    let src = "const Emitter = require('events');\n\n/**\n * The application.\n */\nmodule.exports = class Application extends Emitter {\n  /**\n   * Return a request handler callback.\n   */\n  callback () {\n    const fn = this.compose(this.middleware);\n    return (req, res) => this.handleRequest(req, res, fn);\n  }\n\n  listen (...args) {\n    return this.callback();\n  }\n};\n\nconst Store = class {\n  get (k) { return k; }\n};\n\nns.Walker = class Walker {\n  run () {}\n};\n";
    for lang in ["javascript", "typescript"] {
        let recs = records("lib/application.js", lang, src);
        let app = by_symbol(&recs, "Application");
        assert_eq!(app.kind, crate::Kind::Class, "{lang}");
        assert_eq!(app.qualified_name.as_deref(), Some("Application"));
        assert!(
            app.text.starts_with("/**\n * The application."),
            "{lang}: {}",
            app.text
        );
        assert_eq!(
            app.members,
            ["Application.callback", "Application.listen"],
            "{lang}"
        );
        let store = by_symbol(&recs, "Store");
        assert_eq!(
            (store.kind, store.members.as_slice()),
            (crate::Kind::Class, &["Store.get".to_owned()][..])
        );
        let walker = by_symbol(&recs, "Walker");
        assert_eq!(
            walker.qualified_name.as_deref(),
            Some("ns.Walker"),
            "{lang}"
        );
        assert_eq!(walker.members, ["ns.Walker.run"], "{lang}");
    }
}

#[test]
fn typescript_assignments_are_definitions_too() {
    let src = "import x from 'y';\n\n/** Status. */\nres.status = function (code: number): Res {\n  return this;\n};\n\nFoo.prototype.bar = async (a: string) => {\n  return a;\n};\n\nexport const api = {\n  get(id: string) {\n    return id;\n  },\n};\n";
    for lang in ["typescript", "tsx"] {
        assert_eq!(
            definitions(lang, src),
            pairs(&[
                ("method", "res.status"),
                ("method", "Foo.bar"),
                ("module", "api"),
            ]),
            "{lang}"
        );
    }
}

#[test]
fn go_methods_keep_their_receiver() {
    let (outline, recs) = fixture_case(
        "store.go",
        "store/store.go",
        "go",
        &[
            ("struct", "Store"),
            ("method", "Store.Get"),
            ("method", "Store.Len"),
            ("struct", "Cache"),
            ("method", "Cache.Put"),
            ("function", "New"),
            ("interface", "Getter"),
            // Each type of a `type ( … )` group is a definition of its own.
            ("type", "Option"),
            ("interface", "Hook"),
        ],
    );
    insta::assert_snapshot!(outline);
    let get = by_symbol(&recs, "Get");
    assert!(
        get.header
            .starts_with("store/store.go · method Store.Get\n")
    );
    let hook = by_symbol(&recs, "Hook");
    assert!(hook.text.starts_with("// Hook runs after a write.\n"));
    assert!(!hook.text.contains("Option"));
}

#[test]
fn an_object_of_functions_exported_by_default_or_mixed_in_is_a_module_of_them() {
    // axios's lib/adapters/adapters.js: imported as `adapters`, called as
    // `adapters.getAdapter(…)`.
    let src = "const known = {};\n\nexport default {\n  getAdapter: (adapters) => {\n    return known[adapters];\n  },\n  adapters: known\n}\n";
    let recs = records("lib/adapters/adapters.js", "javascript", src);
    let m = by_qualified(&recs, "adapters");
    assert_eq!(m.kind, crate::Kind::Module);
    assert_eq!(m.members, ["adapters.getAdapter"]);
    assert_eq!((m.start_line, m.end_line), (3, 8));
    let mixin = "function Foo() {}\n\nObject.assign(Foo.prototype, {\n  /** Bar it. */\n  bar(x) { return x; },\n  size: 3,\n});\n";
    let recs = records("foo.js", "javascript", mixin);
    let m = recs
        .iter()
        .find(|r| r.kind == crate::Kind::Module)
        .expect("the mixed-in object");
    assert_eq!(m.qualified_name.as_deref(), Some("Foo"));
    assert_eq!(m.members, ["Foo.bar"]);
    assert!(m.text.starts_with("Object.assign(Foo.prototype, {"));
    // An object of data, exported or mixed in, is module code.
    let data = "export default { a: 1 };\nObject.assign(target, { b: 2 });\nObject.assign(a, b, { c() {} });\n";
    assert_eq!(definitions("javascript", data), []);
}

#[test]
fn ruby_methods_in_class_self_are_the_class_own() {
    // `class << self … end` holds the class's own methods, as `def self.open` does.
    let small = "class Store\n  class << self\n    # The shared store.\n    def shared\n      @shared ||= new\n    end\n\n    def open(path)\n      new(path)\n    end\n  end\n\n  def get(id)\n    @items[id]\n  end\nend\n";
    let recs = records("store.rb", "ruby", small);
    assert_eq!(
        by_symbol(&recs, "Store").members,
        ["Store.shared", "Store.open", "Store.get"]
    );
    // In a module, which is cut into its members, the block's opening reads with its first
    // method and its `end` with its last.
    let module = "module Store\n  def self.open(path)\n    new(path)\n  end\n\n  class << self\n    def shared\n      @shared ||= new\n    end\n  end\nend\n";
    assert_eq!(
        definitions("ruby", module),
        pairs(&[("method", "Store.open"), ("method", "Store.shared")])
    );
    let recs = records("store.rb", "ruby", module);
    let shared = by_qualified(&recs, "Store.shared");
    assert!(
        shared.text.starts_with("class << self\n    def shared"),
        "{}",
        shared.text
    );
    // Another object's singleton class is a definition of its own, as before, and so is a
    // `class << self` of no methods.
    let other = "class << obj\n  def hi\n    1\n  end\nend\n";
    assert_eq!(definitions("ruby", other).len(), 1);
    // A class over the ceiling outlines the block on its own line, its methods under it.
    let methods: String = (0..60)
        .map(|i| format!("    def cls{i}(a, b)\n      a + b + {i}\n    end\n"))
        .collect();
    let big = format!(
        "class Store\n  class << self\n{methods}  end\n\n  def get(id)\n    @items[id]\n  end\nend\n"
    );
    let recs = records("store.rb", "ruby", &big);
    let skeleton = recs
        .iter()
        .find(|r| r.kind == crate::Kind::ClassSkeleton)
        .expect("a skeleton");
    assert!(
        skeleton.text.starts_with("class Store\n  class << self\n"),
        "{}",
        skeleton.text
    );
    assert!(
        recs.iter()
            .any(|r| r.qualified_name.as_deref() == Some("Store.cls7"))
    );
}

#[test]
fn a_lua_function_assigned_to_a_name_is_a_function() {
    let src = "local M = {}\n\n--- Subtracts.\nM.sub = function(a, b)\n  return a - b\nend\n\nlocal clamp = function(x)\n  return x\nend\n\nlocal a, b = function() end, function() end\nM.n = 3\n\nreturn M\n";
    assert_eq!(
        definitions("lua", src),
        pairs(&[("function", "M.sub"), ("function", "clamp")])
    );
    let recs = records("m.lua", "lua", src);
    assert!(
        by_qualified(&recs, "M.sub")
            .text
            .starts_with("--- Subtracts.\nM.sub = function")
    );
}

#[test]
fn a_go_function_assigned_to_a_package_variable_is_a_function() {
    let src = "package gin\n\n// defaultLogFormatter is the default log format function Logger middleware uses.\nvar defaultLogFormatter = func(param LogFormatterParams) string {\n\treturn param.Path\n}\n\nvar (\n\tone = func() {}\n\ttwo = 2\n)\n\nvar a, b = func() {}, func() {}\n";
    let recs = records("logger.go", "go", src);
    let f = by_symbol(&recs, "defaultLogFormatter");
    assert_eq!(f.kind, crate::Kind::Function);
    assert!(
        f.text.starts_with("// defaultLogFormatter is the default"),
        "{}",
        f.text
    );
    assert_eq!((f.start_line, f.end_line), (3, 6));
    // A group, or one declaration of several names, is module code naming its variables.
    assert_eq!(
        definitions("go", src),
        pairs(&[("function", "defaultLogFormatter")])
    );
}

#[test]
fn members_of_a_small_rust_impl_are_addressable() {
    let (outline, recs) = fixture_case(
        "walker.rs",
        "src/walker.rs",
        "rust",
        &[
            ("struct", "Walker"),
            ("impl", "Walker"),
            ("impl", "std::fmt::Display for Walker"),
        ],
    );
    insta::assert_snapshot!(outline);
    let imp = recs
        .iter()
        .find(|r| r.kind == crate::Kind::Impl && r.symbol.as_deref() == Some("Walker"))
        .unwrap();
    assert_eq!(imp.members, ["Walker.run", "Walker.skip"]);
    let display = by_symbol(&recs, "std::fmt::Display for Walker");
    assert_eq!(display.members, ["Walker.fmt"]);
}

#[test]
fn a_type_that_is_not_a_struct_has_kind_type() {
    let go = "package log\n\n// Entry is one line.\ntype Entry struct {\n\tMsg string\n}\n\n// Hook runs on each entry.\ntype Hook interface {\n\tFire(*Entry) error\n}\n\n// HandlerFunc handles an entry.\ntype HandlerFunc func(*Entry) error\n\n// Level is a severity.\ntype Level uint32\n\n// L is Level.\ntype L = Level\n\ntype (\n\tFields map[string]any\n\tPair struct{ K, V string }\n)\n";
    assert_eq!(
        definitions("go", go),
        pairs(&[
            ("struct", "Entry"),
            ("interface", "Hook"),
            ("type", "HandlerFunc"),
            ("type", "Level"),
            ("type", "L"),
            ("type", "Fields"),
            ("struct", "Pair"),
        ])
    );
    let rust = "/// What every call returns.\npub type Result<T> = std::result::Result<T, Error>;\n\nmacro_rules! bail {\n    ($e:expr) => {\n        return Err($e.into())\n    };\n}\n";
    assert_eq!(
        definitions("rust", rust),
        pairs(&[("type", "Result"), ("macro", "bail")])
    );
}

#[test]
fn a_typescript_type_alias_is_a_definition_with_its_doc_comment() {
    let ts = "import type {Hooks} from './hooks.js';\n\nexport type Input = string | URL | Request;\n\n/**\nHow long to wait, in milliseconds.\n*/\nexport type Timeout<T = number> = T | false;\n\ndeclare type Mapper<T> = (value: T) => T;\n\nexport type {RetryOptions} from './retry.js';\n\nexport interface Options {\n\thooks?: Hooks;\n}\n";
    assert_eq!(
        definitions("typescript", ts),
        pairs(&[
            ("type", "Input"),
            ("type", "Timeout"),
            ("type", "Mapper"),
            ("interface", "Options"),
        ])
    );
    let recs = records("source/types/options.ts", "typescript", ts);
    let timeout = by_symbol(&recs, "Timeout");
    assert_eq!((timeout.start_line, timeout.end_line), (5, 8));
    assert!(timeout.text.starts_with("/**\nHow long to wait"));
    // A re-export names no type of this file: it stays module code.
    assert!(
        recs.iter()
            .any(|r| r.kind == crate::Kind::Code && r.text.contains("export type {RetryOptions}"))
    );
}

#[test]
fn trait_impls_are_named_with_the_traits_arguments() {
    let src = "pub struct Error;\n\nimpl From<std::io::Error> for Error {\n    fn from(_: std::io::Error) -> Self {\n        Error\n    }\n}\n\nimpl From<std::fmt::Error> for Error {\n    fn from(_: std::fmt::Error) -> Self {\n        Error\n    }\n}\n\nimpl<T: Clone> AsRef<[T]>\n    for Holder<T>\n{\n    fn as_ref(&self) -> &[T] {\n        &self.0\n    }\n}\n\nimpl<T> Holder<T> {\n    fn get(&self) {}\n}\n";
    assert_eq!(
        definitions("rust", src),
        pairs(&[
            ("struct", "Error"),
            ("impl", "From<std::io::Error> for Error"),
            ("impl", "From<std::fmt::Error> for Error"),
            ("impl", "AsRef<[T]> for Holder"),
            ("impl", "Holder"),
        ])
    );
    // The members are still the type's.
    let recs = records("src/error.rs", "rust", src);
    assert_eq!(
        by_symbol(&recs, "From<std::fmt::Error> for Error").members,
        ["Error.from"]
    );
    assert_eq!(
        by_symbol(&recs, "AsRef<[T]> for Holder").members,
        ["Holder.as_ref"]
    );
}

#[test]
fn members_of_small_classes_are_addressable_in_every_language() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "python",
            "class Walker:\n    def run(self):\n        pass\n\n    class Inner:\n        def go(self): pass\n",
            &["Walker.run", "Walker.Inner", "Walker.Inner.go"],
        ),
        (
            "javascript",
            "class Walker {\n  run() {}\n  static of() {}\n}\n",
            &["Walker.run", "Walker.of"],
        ),
        (
            "typescript",
            "export class Walker {\n  run(): void {}\n}\n",
            &["Walker.run"],
        ),
        (
            "typescript",
            "export interface Walker {\n  /** Runs. */\n  run(): void;\n  steps: number;\n}\n",
            &["Walker.run"],
        ),
        (
            "java",
            "class Walker {\n  void run() {}\n  Walker() {}\n}\n",
            &["Walker.run", "Walker.Walker"],
        ),
        (
            "java",
            "interface Walker {\n  void run();\n}\n",
            &["Walker.run"],
        ),
        (
            "cpp",
            "class Walker {\n public:\n  void run() {}\n};\n",
            &["Walker.run"],
        ),
        (
            "csharp",
            "class Walker {\n  void Run() {}\n}\n",
            &["Walker.Run"],
        ),
        (
            "ruby",
            "class Walker\n  def run\n  end\nend\n",
            &["Walker.run"],
        ),
        (
            "php",
            "<?php\nclass Walker {\n  function run() {}\n}\n",
            &["Walker.run"],
        ),
    ];
    for (lang, src, members) in cases {
        let recs = records("x", lang, src);
        let class = recs
            .iter()
            .find(|r| r.symbol.as_deref() == Some("Walker"))
            .unwrap_or_else(|| panic!("{lang}: no Walker"));
        assert_eq!(class.members, *members, "{lang}");
        let toc = recs.iter().find(|r| r.kind == crate::Kind::Toc).unwrap();
        assert!(
            toc.text.contains(&format!(" {} (line", members[0])),
            "{lang}: {}",
            toc.text
        );
    }
}

#[test]
fn python_lambdas_and_partials_are_functions() {
    let (outline, recs) = fixture_case(
        "funcs.py",
        "funcs.py",
        "python",
        &[
            ("function", "square"),
            ("function", "int2"),
            ("function", "hex_int"),
            ("class", "Shape"),
        ],
    );
    insta::assert_snapshot!(outline);
    assert!(
        recs[1]
            .text
            .starts_with("# Square a number.\nsquare = lambda")
    );
    let shape = recs.iter().find(|r| r.kind == crate::Kind::Class).unwrap();
    assert_eq!(shape.members, ["Shape.area", "Shape.scaled", "Shape.name"]);
}

#[test]
fn cpp_out_of_line_methods_and_lua_methods_name_their_owner() {
    assert_eq!(
        definitions(
            "cpp",
            "void Walker::run() {}\nint ns::Walker::size() const { return 0; }\n"
        ),
        pairs(&[("method", "Walker.run"), ("method", "ns::Walker.size")])
    );
    assert_eq!(
        definitions(
            "lua",
            "function M:update(dt)\nend\n\nfunction M.new()\nend\n\nfunction helper()\nend\n"
        ),
        pairs(&[
            ("method", "M.update"),
            ("function", "M.new"),
            ("function", "helper"),
        ])
    );
}

#[test]
fn typescript_overloads_read_with_their_implementation() {
    let src = "/** Parses a value. */\nexport function parse(v: string): number;\nexport function parse(v: number): number;\nexport function parse(v: string | number): number {\n  return Number(v);\n}\n\nexport type Options = {\n  retries: number;\n  timeout?: number;\n};\n\nexport class Formatter {\n  static create = (opts: Options) => {\n    return new Formatter(opts);\n  };\n\n  format(): string;\n  format(mapper: (x: number) => string): string;\n  format(mapper?: (x: number) => string): string {\n    return mapper ? mapper(1) : '1';\n  }\n}\n";
    for lang in ["typescript", "tsx"] {
        let recs = records("src/parse.ts", lang, src);
        assert_eq!(
            definitions(lang, src),
            pairs(&[
                ("function", "parse"),
                ("type", "Options"),
                ("class", "Formatter")
            ]),
            "{lang}"
        );
        let parse = by_qualified(&recs, "parse");
        assert!(
            parse
                .text
                .starts_with("/** Parses a value. */\nexport function parse(v: string): number;\n"),
            "{lang}: {}",
            parse.text
        );
        assert!(parse.text.ends_with("return Number(v);\n}"), "{lang}");
        let formatter = by_qualified(&recs, "Formatter");
        assert_eq!(
            formatter.members,
            ["Formatter.create", "Formatter.format"],
            "{lang}"
        );
    }
    // Split (a low ceiling), each overloaded method is one chunk with its signatures.
    let opts = Options {
        ceiling: 120,
        floor: 20,
        ..Options::default()
    };
    let c = chunk(
        "src/parse.ts",
        Some("typescript"),
        src,
        Strategy::Ast,
        &opts,
    );
    invariants(src, &c, opts.ceiling).unwrap();
    let format: Vec<_> = c
        .pieces
        .iter()
        .filter(|p| p.qualified_name().as_deref() == Some("Formatter.format"))
        .collect();
    assert!(!format.is_empty());
    assert!(
        src[format[0].start..].starts_with("format(): string;"),
        "{:?}",
        &src[format[0].start..format[0].end]
    );
    let create = c
        .pieces
        .iter()
        .find(|p| p.qualified_name().as_deref() == Some("Formatter.create"))
        .expect("the class field holding a function is a method");
    assert_eq!(create.kind, crate::Kind::Method);
}

#[test]
fn python_overload_stubs_read_with_their_implementation() {
    let src = "from typing import overload\nimport typing as t\n\n\n@overload\ndef reverse(value: str) -> str: ...\n\n\n@overload\ndef reverse(value: list) -> list: ...\n\n\ndef reverse(value):\n    \"\"\"Reverse a string or a list.\"\"\"\n    return value[::-1]\n\n\nclass Config:\n    @t.overload\n    def get(self, key: str) -> str: ...\n    @t.overload\n    def get(self, key: str, default: int) -> int: ...\n    def get(self, key, default=None):\n        return self.values.get(key, default)\n\n\n@overload\ndef orphan(x: int) -> int: ...\n";
    assert_eq!(
        definitions("python", src),
        pairs(&[
            ("function", "reverse"),
            ("class", "Config"),
            ("function", "orphan")
        ])
    );
    let recs = records("conf.py", "python", src);
    let reverse = by_qualified(&recs, "reverse");
    assert!(
        reverse
            .text
            .starts_with("@overload\ndef reverse(value: str)")
            && reverse.text.ends_with("return value[::-1]"),
        "{}",
        reverse.text
    );
    assert_eq!(by_qualified(&recs, "Config").members, ["Config.get"]);
}

#[test]
fn a_scope_function_that_opens_with_a_definition_cites_its_signature_as_its_first_part() {
    let steps: String = (0..8)
        .map(|i| format!("  function step{i}(action) {{\n    // step {i}: checks the action, then updates the state\n    if (!action || typeof action.type !== 'string') throw new Error('bad action {i}');\n    state = reducer(state, action);\n    return state;\n  }}\n\n"))
        .collect();
    let methods: String = (0..16)
        .map(|i| format!("    listen{i}(fn) {{\n      // listener {i} of the hub, called with the state after each action\n      this.listeners.push([{i}, fn]);\n      return () => this.listeners.splice({i}, 1);\n    }}\n\n"))
        .collect();
    let src = format!(
        "function createStore(reducer, preloaded) {{\n{steps}  class Hub {{\n{methods}  }}\n\n  let state = preloaded;\n  return {{ step0, step1, hub: new Hub() }};\n}}\n"
    );
    let opts = Options::default();
    let c = chunk(
        "src/store.js",
        Some("javascript"),
        &src,
        Strategy::Ast,
        &opts,
    );
    invariants(&src, &c, opts.ceiling).unwrap();
    let own: Vec<&crate::Piece> = c
        .pieces
        .iter()
        .filter(|p| p.symbol.as_deref() == Some("createStore"))
        .collect();
    assert_eq!(own.len(), 2, "{own:#?}");
    assert_eq!(
        &src[own[0].start..own[0].end],
        "function createStore(reducer, preloaded) {"
    );
    assert_eq!(own[0].part, Some((1, 2)));
    assert!(src[own[1].start..own[1].end].starts_with("let state = preloaded;"));
    let step0 = c
        .pieces
        .iter()
        .find(|p| p.symbol.as_deref() == Some("step0"))
        .unwrap();
    assert!(src[step0.start..step0.end].starts_with("function step0(action) {"));
    // A container split inside it still names its own skeleton as its members' parent.
    let listen = c
        .pieces
        .iter()
        .find(|p| p.symbol.as_deref() == Some("listen3"))
        .unwrap();
    let parent = &c.pieces[listen.parent.expect("a parent")];
    assert_eq!(parent.kind, crate::Kind::ClassSkeleton, "{parent:#?}");
    assert_eq!(parent.symbol.as_deref(), Some("Hub"));
}

/// The members of the piece named `q`.
fn names_of(c: &crate::Chunked, q: &str) -> Vec<String> {
    let p = c
        .pieces
        .iter()
        .find(|p| p.qualified_name().as_deref() == Some(q))
        .unwrap_or_else(|| panic!("no {q}: {:#?}", c.pieces));
    p.members.iter().map(|m| m.qualified_name.clone()).collect()
}

#[test]
fn each_name_a_chain_of_assignments_gives_a_function_finds_it() {
    let src = "/**\n * Return request header.\n */\n\nreq.get =\nreq.header = function header(name) {\n  return this.headers[name.toLowerCase()];\n};\n\nres.contentType =\nres.type = function contentType(type) {\n  return this.set('Content-Type', type);\n};\n\nmodule.exports = exports = function createApplication() {\n  return {};\n};\n\nvar mount = exports.mount = function mount(path) {\n  return path;\n};\n";
    let opts = Options::default();
    let c = chunk(
        "lib/request.js",
        Some("javascript"),
        src,
        Strategy::Ast,
        &opts,
    );
    invariants(src, &c, opts.ceiling).unwrap();
    let named = |q: &str| {
        c.pieces
            .iter()
            .find(|p| p.qualified_name().as_deref() == Some(q))
            .unwrap_or_else(|| panic!("no {q}: {:#?}", c.pieces))
    };
    let aliases = |p: &crate::Piece| -> Vec<String> {
        p.members.iter().map(|m| m.qualified_name.clone()).collect()
    };
    // Named by the outermost target, found by every other.
    let get = named("req.get");
    assert_eq!(aliases(get), ["req.header"]);
    assert_eq!(get.members[0].kind, get.kind);
    assert_eq!(&src[get.members[0].start..][..10], "req.header");
    assert_eq!(aliases(named("res.contentType")), ["res.type"]);
    // A class is named by its own name; every target of the chain finds it.
    let src = "a.B = a.C = class Foo {\n  static x = 1;\n};\nvar x = (y.z = function w() {\n  return 1;\n});\n";
    let c = chunk("lib/a.js", Some("javascript"), src, Strategy::Ast, &opts);
    let of = |q: &str| names_of(&c, q);
    assert_eq!(of("a.Foo"), ["a.B", "a.C"]);
    assert_eq!(of("x"), ["y.z"]);
    // A class or an object that lists its methods is found by its other names too, first.
    let src = "exports.Store = exports.Base = class Store {\n  get(id) { return id; }\n};\nconst api = module.exports.api = {\n  put(x) { return x; },\n};\n";
    let c = chunk("lib/s.js", Some("javascript"), src, Strategy::Ast, &opts);
    assert_eq!(names_of(&c, "Store"), ["Base", "Store.get"]);
    assert_eq!(names_of(&c, "api"), ["module.exports.api", "api.put"]);
    // `exports` is no other name of what the module exports; `exports.mount` is.
    assert!(aliases(named("createApplication")).is_empty());
    assert_eq!(aliases(named("mount")), ["exports.mount"]);
}

#[test]
fn a_function_a_call_is_given_to_make_a_named_value_is_that_definition() {
    let src = "import { forwardRef } from 'react';\n\nexport const Button = forwardRef((props, ref) => {\n  const label = props.label.trim();\n  return render(ref, label);\n});\n\nexport const $ZodString: core.$constructor<$ZodString> = /*@__PURE__*/ core.$constructor(\"$ZodString\", (inst, def) => {\n  $ZodType.init(inst, def);\n  inst._zod.parse = (payload) => payload;\n});\n\nexports.handle = deprecate.function(function handle(req) {\n  req.handled = true;\n  return req;\n}, 'handle: use route()');\n\nconst doubled = items.map((x) => x * 2);\nconst short = wrap(() => { return 1; });\nconst both = pair(\n  () => {\n    one();\n  },\n  () => {\n    two();\n  },\n);\nconst server = http.createServer((req, res) => {\n  res.end('ok');\n});\nconst total = list.reduce((acc, x) => {\n  acc += x;\n  return acc;\n}, 0);\nconst timer = setTimeout(() => {\n  done();\n}, 1000);\nconst rows = items.map((item) => {\n  const row = render(item);\n  return row;\n});\nmodule.exports = router.get('/', (req, res) => {\n  res.send('hi');\n});\n";
    assert_eq!(
        definitions("typescript", src),
        pairs(&[
            ("function", "Button"),
            ("function", "$ZodString"),
            ("function", "exports.handle"),
        ])
    );
    let recs = records("src/schemas.ts", "typescript", src);
    let zod = by_symbol(&recs, "$ZodString");
    assert!(
        zod.text.starts_with("export const $ZodString") && zod.text.ends_with("});"),
        "{}",
        zod.text
    );
}

#[test]
fn a_comment_after_code_on_its_line_ends_that_code_not_the_next_definition() {
    let ts = "export type Key = string | number; // or a pattern\nexport interface Def {\n  key: Key;\n}\n";
    let py = "TIMEOUT = 5  # seconds\ndef fetch(url):\n    return get(url, TIMEOUT)\n";
    let go = "package x\n\ntype Level uint32 // the lowest first\n// Logger writes lines.\ntype Logger struct {\n\tlevel Level\n}\n";
    for (lang, src, name, starts, before) in [
        (
            "typescript",
            ts,
            "Def",
            "export interface Def",
            "// or a pattern",
        ),
        ("python", py, "fetch", "def fetch(url):", "# seconds"),
        (
            "go",
            go,
            "Logger",
            "// Logger writes lines.",
            "// the lowest first",
        ),
    ] {
        let recs = records("x", lang, src);
        let def = by_symbol(&recs, name);
        assert!(def.text.starts_with(starts), "{lang}: {:?}", def.text);
        assert!(
            recs.iter()
                .any(|r| r.text.ends_with(before) && r.start_line == def.start_line - 1),
            "{lang}: the comment stays with the line it ends: {recs:#?}"
        );
    }
}

#[test]
fn a_comment_after_an_opening_or_a_closing_bracket_starts_no_chunk_mid_line() {
    let opts = Options {
        ceiling: 300,
        floor: 20,
        ..Options::default()
    };
    let methods: String = (0..12)
        .map(|i| format!("  method{i}(a) {{\n    return a + {i};\n  }}\n"))
        .collect();
    // A comment after the opening brace reads with the first member, as the line does.
    let class = format!("export class Foo {{ // eslint-disable-line\n{methods}}}\n");
    // `}; // end a`: the `;` and the comment end `a`; `b` keeps its doc.
    let ends = "function a() {\n  return 1;\n}; // end a\n/** Docs of b. */\nfunction b() {\n  return 2;\n}\n";
    for (path, lang, src) in [
        ("foo.ts", "typescript", class.as_str()),
        ("ends.js", "javascript", ends),
    ] {
        let c = chunk(path, Some(lang), src, Strategy::Ast, &opts);
        invariants(src, &c, opts.ceiling).unwrap();
        for p in c.pieces.iter().filter(|p| !p.is_generated()) {
            let line = src[..p.start].rsplit('\n').next().unwrap_or("");
            assert!(
                line.trim().is_empty(),
                "{path}: a chunk begins mid-line: {:?}",
                &src[p.start..p.end]
            );
            assert!(
                p.symbol.as_deref() != Some("Foo") || src[p.start..p.end].contains('\n'),
                "{path}: the opening line alone: {:?}",
                &src[p.start..p.end]
            );
        }
    }
    // The comma after a member of an object of functions ends that member.
    let object = "const proto = module.exports = {\n  inspect () {\n    return this.toJSON()\n  },\n\n  toJSON () {\n    return { a: 1 }\n  },\n\n  /** Asserts. */\n  assert: httpAssert,\n\n  throw (...args) {\n    throw createError(...args)\n  }\n}\n";
    let c = chunk(
        "context.js",
        Some("javascript"),
        object,
        Strategy::Ast,
        &opts,
    );
    invariants(object, &c, opts.ceiling).unwrap();
    for p in c.pieces.iter().filter(|p| !p.is_generated()) {
        let text = object[p.start..p.end].trim_start();
        assert!(
            !text.starts_with(','),
            "a chunk begins with a comma: {text:?}"
        );
    }
    let recs = records("ends.js", "javascript", ends);
    assert!(by_symbol(&recs, "a").text.ends_with("}; // end a"));
    assert!(by_symbol(&recs, "b").text.starts_with("/** Docs of b. */"));
    // A block comment opened after code and running on to the lines below is the next
    // definition's doc, not the end of that line.
    let block = "int x = 1; /* Docs of f:\n * adds one.\n */\nint f(int a) {\n  return a + 1;\n}\n";
    let recs = records("f.c", "c", block);
    assert!(
        by_symbol(&recs, "f").text.starts_with("/* Docs of f:"),
        "{recs:#?}"
    );
}

#[test]
fn a_cut_python_function_keeps_its_docstring_with_its_signature() {
    let paragraphs = |n: usize| -> String {
        (0..n)
            .map(|i| format!("    Paragraph {i} explains how the generator keeps the request context alive.\n    It runs inside the current context until the response is sent.\n\n"))
            .collect()
    };
    let body: String = (0..14)
        .map(|i| format!("    step_{i} = run_step({i}, generator_or_function)\n"))
        .collect();
    let parts = |src: &str| -> Vec<String> {
        let opts = Options::default();
        let c = chunk("helpers.py", Some("python"), src, Strategy::Ast, &opts);
        invariants(src, &c, opts.ceiling).unwrap();
        c.pieces
            .iter()
            .filter(|p| p.symbol.as_deref() == Some("stream"))
            .map(|p| src[p.start..p.end].to_owned())
            .collect()
    };
    // A docstring that fits under the ceiling alone but not with its signature: the first
    // part holds the signature and the docstring's start, cut between its paragraphs; it is
    // never the signature alone.
    let src = format!(
        "def stream(\n    generator_or_function,\n    *,\n    buffer_size: int = 8192,\n    keep_context: bool = True,\n    on_close: t.Callable[[], None] | None = None,\n    encoding: str = \"utf-8\",\n):\n    \"\"\"Wrap a response generator.\n\n{}    \"\"\"\n{body}    return generator_or_function\n",
        paragraphs(13)
    );
    let cut = parts(&src);
    assert!(cut.len() >= 2, "{cut:#?}");
    assert!(
        cut[0].starts_with("def stream(") && cut[0].contains("Paragraph 0 explains"),
        "the first part holds the signature and the docstring's start: {:?}",
        cut[0]
    );
    assert!(
        cut[1].trim_start().starts_with("Paragraph"),
        "the docstring is cut between its paragraphs: {:?}",
        cut[1]
    );
    assert!(
        cut.last()
            .unwrap()
            .ends_with("return generator_or_function")
    );
    // Overload stubs read with their implementation are declarations: cut, they are a part of
    // their own, and the implementation's signature and docstring start the next.
    let src = format!(
        "import typing as t\n\n\n@t.overload\ndef stream(generator_or_function: t.Iterator[t.AnyStr]) -> t.Iterator[t.AnyStr]: ...\n\n\n@t.overload\ndef stream(\n    generator_or_function: t.Callable[..., t.Iterator[t.AnyStr]],\n) -> t.Callable[[t.Iterator[t.AnyStr]], t.Iterator[t.AnyStr]]: ...\n\n\ndef stream(generator_or_function):\n    \"\"\"Wrap a response generator.\n\n{}    \"\"\"\n{body}    return generator_or_function\n",
        paragraphs(12)
    );
    let cut = parts(&src);
    assert!(cut.len() >= 3, "{cut:#?}");
    assert!(
        cut[0].starts_with("@t.overload") && !cut[0].contains("def stream(generator_or_function):"),
        "the stubs alone: {:?}",
        cut[0]
    );
    assert!(
        cut[1].starts_with("def stream(generator_or_function):\n    \"\"\"Wrap")
            && cut[1].contains("Paragraph 0 explains"),
        "the implementation's signature and docstring: {:?}",
        cut[1]
    );
    assert!(
        cut.last()
            .unwrap()
            .ends_with("return generator_or_function")
    );
    // The same as a class's first members: the body's block is no outer node of the method.
    let indented: String = src
        .lines()
        .skip(3)
        .map(|l| {
            if l.is_empty() {
                "\n".to_owned()
            } else {
                format!("    {l}\n")
            }
        })
        .collect();
    let class = format!("import typing as t\n\n\nclass S:\n{indented}");
    let cut = parts(&class);
    assert!(cut.len() >= 3, "{cut:#?}");
    assert!(
        !cut[0].contains("def stream(generator_or_function):"),
        "the stubs alone: {:?}",
        cut[0]
    );
}

#[test]
fn a_decorator_table_over_the_ceiling_leaves_the_signature_to_start_its_own_part() {
    let rows: String = (0..40)
        .map(|i| format!("        (\"--opt-{i}\", \"value number {i}\", {{\"key_{i}\": {i}}}),\n"))
        .collect();
    let test = |body: &str| {
        format!(
            "import pytest\n\n\n@pytest.mark.parametrize(\n    (\"args\", \"expect\", \"extra\"),\n    [\n{rows}    ],\n)\ndef test_options_parse(runner, args, expect, extra):\n    \"\"\"Each option is parsed to its value.\"\"\"\n{body}"
        )
    };
    let opts = Options::default();
    let parts = |src: &str| -> Vec<String> {
        let c = chunk(
            "tests/test_opts.py",
            Some("python"),
            src,
            Strategy::Ast,
            &opts,
        );
        invariants(src, &c, opts.ceiling).unwrap();
        c.pieces
            .iter()
            .filter(|p| p.symbol.as_deref() == Some("test_options_parse"))
            .map(|p| src[p.start..p.end].to_owned())
            .collect()
    };
    // A short body: it is not merged into the table's tail, however short.
    let src =
        test("    result = runner.invoke(cli, [args, expect])\n    assert result.exit_code == 0\n");
    let cut = parts(&src);
    assert!(cut.len() >= 2, "{cut:#?}");
    let last = cut.last().unwrap();
    assert!(
        last.starts_with("def test_options_parse(")
            && last.ends_with("assert result.exit_code == 0"),
        "the signature starts the part of the body: {last:?}"
    );
    assert!(
        cut[..cut.len() - 1]
            .iter()
            .all(|p| !p.contains("def test_options_parse")),
        "no part of the table holds the signature: {cut:#?}"
    );
    // A long body: cut at its statements, the first of its parts starting at the signature.
    let long: String = (0..60)
        .map(|i| format!("    assert runner.invoke(cli, [args, \"{i}\"]).exit_code == 0\n"))
        .collect();
    let src = test(&long);
    let cut = parts(&src);
    let at = cut
        .iter()
        .position(|p| p.contains("def test_options_parse("))
        .expect("a part holds the signature");
    assert!(
        cut[at].starts_with("def test_options_parse(") && cut[at].contains("Each option is parsed"),
        "{:?}",
        cut[at]
    );
    assert!(cut[..at].iter().all(|p| p.contains("--opt-")), "{cut:#?}");
    // A small decorator stays with its definition when the definition is cut: after overload
    // stubs, and before a docstring that fills the part.
    let small = |src: &str, ceiling: usize, decorator: &str, def: &str| {
        let opts = Options {
            ceiling,
            floor: ceiling / 8,
            ..Options::default()
        };
        let c = chunk("src/convert.py", Some("python"), src, Strategy::Ast, &opts);
        invariants(src, &c, ceiling).unwrap();
        let texts: Vec<&str> = c.pieces.iter().map(|p| &src[p.start..p.end]).collect();
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with(&format!("{decorator}\n{def}"))),
            "{texts:#?}"
        );
        assert!(!texts.iter().any(|t| t.trim() == decorator), "{texts:#?}");
    };
    let stubs: String = ["int", "str", "bytes"]
        .iter()
        .map(|t| format!("@overload\ndef convert(value: {t}, *, strict: bool = ..., context: Optional[Context] = None) -> {t}: ...\n"))
        .collect();
    let src = format!(
        "from typing import overload\n\n\n{stubs}@functools.cache\ndef convert(value, *, strict=False, context=None):\n    \"\"\"Convert a value.\"\"\"\n    if isinstance(value, (int, str, bytes)):\n        return type(value)(value)\n    raise TypeError(value)\n"
    );
    small(&src, 300, "@functools.cache", "def convert(value, *");
    let lines: String = (0..5)
        .map(|i| format!("    line {i} of the docstring explaining what this does in detail.\n"))
        .collect();
    let src = format!(
        "@pytest.mark.slow\ndef test_thing(runner):\n    \"\"\"Checks the thing.\n\n{lines}    \"\"\"\n    assert runner.invoke(cli).exit_code == 0\n    assert runner.invoke(cli).output == \"\"\n"
    );
    small(&src, 390, "@pytest.mark.slow", "def test_thing(runner):");
    // A small decorator stays with its definition, as before.
    let src = "import pytest\n\n\n@pytest.fixture\ndef runner():\n    return CliRunner()\n";
    let c = chunk(
        "tests/conftest.py",
        Some("python"),
        src,
        Strategy::Ast,
        &opts,
    );
    let runner = c
        .pieces
        .iter()
        .find(|p| p.symbol.as_deref() == Some("runner"))
        .unwrap();
    assert!(src[runner.start..runner.end].starts_with("@pytest.fixture\ndef runner():"));
}

#[test]
fn java_and_csharp_test_tables_in_annotations_are_outlined_and_leave_the_signature_its_own_part() {
    // JUnit's `@CsvSource` table, in the method's `modifiers`, and xUnit's `[InlineData]`, an
    // attribute list a case: pytest's `parametrize` in other languages.
    let java_rows: String = (0..80)
        .map(|i| format!("        \"case{i}, {i}, expected value number {i}\",\n"))
        .collect();
    let java = format!(
        "package x;\n\nclass CalcTest {{\n    @ParameterizedTest\n    @CsvSource({{\n{java_rows}    }})\n    void adds(String name, int n, String expected) {{\n        assertEquals(expected, calc(name, n));\n    }}\n\n    @Test\n    void other() {{\n        assertTrue(true);\n    }}\n}}\n"
    );
    let cs_rows: String = (0..80)
        .map(|i| format!("    [InlineData(\"case{i}\", {i}, \"expected value number {i}\")]\n"))
        .collect();
    let cs = format!(
        "public class CalcTest {{\n    [Theory]\n{cs_rows}    public void Adds(string name, int n, string expected) {{\n        Assert.Equal(expected, Calc(name, n));\n    }}\n\n    [Fact]\n    public void Other() {{\n        Assert.True(true);\n    }}\n}}\n"
    );
    let cases = [
        (
            "java",
            java.as_str(),
            "adds",
            "void adds(String name",
            "@CsvSource({ …",
            "@Test\n    void other()",
        ),
        (
            "csharp",
            cs.as_str(),
            "Adds",
            "public void Adds(string name",
            "[InlineData(\"case0\", 0, \"expected value number 0\")] … (79 more)",
            "[Fact]\n    public void Other()",
        ),
    ];
    let opts = Options::default();
    for (lang, src, method, signature, outline, small) in cases {
        let c = chunk("CalcTest", Some(lang), src, Strategy::Ast, &opts);
        invariants(src, &c, opts.ceiling).unwrap();
        let parts: Vec<&str> = c
            .pieces
            .iter()
            .filter(|p| p.symbol.as_deref() == Some(method))
            .map(|p| &src[p.start..p.end])
            .collect();
        let last = parts.last().unwrap();
        assert!(
            last.starts_with(signature) && last.trim_end().ends_with('}'),
            "{lang}: the signature starts the part of the body: {parts:#?}"
        );
        assert!(
            parts[..parts.len() - 1]
                .iter()
                .all(|p| !p.contains(signature)),
            "{lang}: no part of the table holds the signature: {parts:#?}"
        );
        let skeletons: Vec<&str> = c
            .pieces
            .iter()
            .filter(|p| p.kind == crate::Kind::ClassSkeleton)
            .map(|p| p.text.as_str())
            .collect();
        assert_eq!(skeletons.len(), 1, "{lang}: {skeletons:#?}");
        assert!(
            skeletons[0].contains(outline) && skeletons[0].contains(signature),
            "{lang}: {}",
            skeletons[0]
        );
        assert!(
            c.pieces
                .iter()
                .any(|p| src[p.start..p.end].starts_with(small)),
            "{lang}: a small annotation stays with its method"
        );
        // Every part names the method's own signature, not its first annotation.
        for p in c
            .pieces
            .iter()
            .filter(|p| p.symbol.as_deref() == Some(method))
        {
            let sig = p.signature.as_deref().unwrap_or_default();
            assert!(sig.starts_with(signature), "{lang}: {sig:?}");
        }
    }
    // A keyword before the table stays in the outline.
    let java = java.replace(
        "    @ParameterizedTest\n",
        "    public @ParameterizedTest\n",
    );
    let skeleton = skeleton_of("CalcTest", "java", &java);
    assert!(
        skeleton.contains("public @ParameterizedTest\n    @CsvSource({ …\n    void adds("),
        "{skeleton}"
    );
    // Small decorators of one name are each outlined, beside a table or not: only a run over
    // the ceiling is one.
    let rows: String = (0..70)
        .map(|i| format!("        (\"case{i}\", {i}, {}),\n", i * 7))
        .collect();
    let py = format!(
        "class TestCalc:\n    @pytest.mark.parametrize(\"name,inp,expected\", [\n{rows}    ])\n    @pytest.mark.parametrize(\"mode\", [\"fast\", \"slow\"])\n    @pytest.mark.parametrize(\"backend\", [\"sqlite\", \"pg\"])\n    @mock.patch(\"app.db.connect\")\n    @mock.patch(\"app.cache.get\")\n    @mock.patch(\"app.clock.now\")\n    def test_table(self, now, get, connect, backend, mode, name, inp, expected):\n        assert calc(inp) == expected\n\n    def test_other(self):\n        assert True\n"
    );
    let skeleton = skeleton_of("tests/test_calc.py", "python", &py);
    for line in [
        "@pytest.mark.parametrize(\"name,inp,expected\", [ …\n",
        "@pytest.mark.parametrize(\"mode\", [\"fast\", \"slow\"])\n",
        "@pytest.mark.parametrize(\"backend\", [\"sqlite\", \"pg\"])\n",
        "@mock.patch(\"app.cache.get\")\n",
        "@mock.patch(\"app.clock.now\")\n",
    ] {
        assert!(skeleton.contains(line), "{line}: {skeleton}");
    }
    assert!(!skeleton.contains("more)"), "{skeleton}");
}

/// The text of the first skeleton of `src`, chunked with the default options.
fn skeleton_of(path: &str, lang: &str, src: &str) -> String {
    let opts = Options::default();
    let c = chunk(path, Some(lang), src, Strategy::Ast, &opts);
    invariants(src, &c, opts.ceiling).unwrap();
    c.pieces
        .iter()
        .find(|p| p.kind == crate::Kind::ClassSkeleton)
        .map(|p| p.text.clone())
        .expect("a skeleton")
}

#[test]
fn a_container_under_a_decorator_table_outlines_the_table_and_starts_a_part_at_its_own_line() {
    let opts = Options::default();
    // Each file, the container's own first line, the decorator's first line, and a row.
    let py_rows: String = (0..60)
        .map(|i| {
            format!("        ({i}, \"value{i}\", \"expected result number {i} of the table\"),\n")
        })
        .collect();
    let ts_rows: String = (0..60)
        .map(|i| {
            format!("      <li>item {i}: {{{{ items[{i}] }}}} and more text for its line</li>\n")
        })
        .collect();
    let method_rows: String = (0..60)
        .map(|i| format!("    [{i}, 'value {i}', 'expected result number {i} of the table'],\n"))
        .collect();
    let cases = [
        (
            "tests/test_table.py",
            "python",
            format!(
                "import pytest\n\n\n@pytest.mark.slow\n@pytest.mark.parametrize(\n    \"a, b, c\",\n    [\n{py_rows}    ],\n)\nclass TestTable:\n    \"\"\"Checks the table.\"\"\"\n\n    def test_one(self, a, b, c):\n        assert b.startswith(\"value\")\n\n    def test_two(self, a, b, c):\n        assert a >= 0\n"
            ),
            "class TestTable:",
            vec!["@pytest.mark.slow\n@pytest.mark.parametrize( …"],
        ),
        (
            "src/list.component.ts",
            "typescript",
            format!(
                "import {{ Component, Input }} from '@angular/core';\n\n@Component({{\n  selector: 'app-list',\n  template: `\n    <ul>\n{ts_rows}    </ul>\n  `,\n}})\nexport class ListComponent {{\n  @Input() items: string[] = [];\n\n  count(): number {{\n    return this.items.length;\n  }}\n}}\n"
            ),
            "export class ListComponent {",
            vec!["@Component({ …"],
        ),
        // Decorators that open the class itself, with no `export` between.
        (
            "src/plain.component.ts",
            "typescript",
            format!(
                "@Component({{\n  template: `\n{ts_rows}  `,\n}})\nclass PlainComponent {{\n  count(): number {{\n    return 1;\n  }}\n}}\n"
            ),
            "class PlainComponent {",
            vec!["@Component({ …"],
        ),
        // A container of fields alone has no skeleton; its own line still starts a part.
        (
            "src/fields.component.ts",
            "typescript",
            format!(
                "@Component({{\n  template: `\n{ts_rows}  `,\n}})\nexport class FieldsComponent {{\n  @Input() items: string[] = [];\n  @Input() title = '';\n}}\n"
            ),
            "export class FieldsComponent {",
            vec![],
        ),
        (
            "src/runner.ts",
            "typescript",
            format!(
                "export class Runner {{\n  /** Runs the table. */\n  @Cases([\n{method_rows}  ])\n  run(a: number, b: string): string {{\n    return b + a;\n  }}\n\n  other(): number {{\n    return 1;\n  }}\n}}\n"
            ),
            "run(a: number, b: string): string {",
            vec!["@Cases([ …"],
        ),
        // A member's table in a Python class: its wrapper's decorators are outlined too.
        (
            "tests/test_members.py",
            "python",
            format!(
                "class TestThing:\n    \"\"\"Thing.\"\"\"\n\n    @pytest.mark.parametrize(\n        \"a, b, c\",\n        [\n{py_rows}        ],\n    )\n    def test_one(self, a, b, c):\n        assert b.startswith(\"value\")\n\n    def other(self):\n        return 1\n"
            ),
            "def test_one(self, a, b, c):",
            vec!["    @pytest.mark.parametrize( …\n    def test_one(self, a, b, c): …"],
        ),
    ];
    for (path, lang, src, own, outlines) in &cases {
        let c = chunk(path, Some(lang), src, Strategy::Ast, &opts);
        invariants(src, &c, opts.ceiling).unwrap();
        // The lines the chunks cite (a skeleton's and a table of contents' text is made).
        let texts: Vec<&str> = c
            .pieces
            .iter()
            .filter(|p| !matches!(p.kind, crate::Kind::ClassSkeleton | crate::Kind::Toc))
            .map(|p| &src[p.start..p.end])
            .collect();
        // The definition's own line starts a part, and no part of the table holds it.
        assert!(
            texts.iter().any(|t| t.trim_start().starts_with(own)),
            "{path}: {texts:#?}"
        );
        assert!(
            !texts
                .iter()
                .any(|t| t.contains(own) && !t.trim_start().starts_with(own) && t.contains("59")),
            "{path}: the table's tail holds the definition's line: {texts:#?}"
        );
        // The skeleton outlines the table by its first line: one part, no rows.
        let skeletons: Vec<&crate::Piece> = c
            .pieces
            .iter()
            .filter(|p| p.kind == crate::Kind::ClassSkeleton)
            .collect();
        assert_eq!(
            skeletons.len(),
            usize::from(!outlines.is_empty()),
            "{path}: {skeletons:#?}"
        );
        for s in &skeletons {
            assert!(
                outlines.iter().all(|o| s.text.contains(o)) && !s.text.contains("number 30"),
                "{path}: {}",
                s.text
            );
        }
    }
}

#[test]
fn a_split_rust_impl_names_members_by_their_type_and_leaves_no_brace_alone() {
    let src = "pub type Result<T> = std::result::Result<T, Error>;\n\npub struct Walker {\n    depth: usize,\n}\n\nimpl std::fmt::Display for Walker {\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {\n        write!(f, \"walker at depth {}\", self.depth)?;\n        write!(f, \" and more\")\n    }\n\n    /// Not a real method of Display, but long enough to split the impl.\n    fn describe(&self) -> String {\n        format!(\"a walker that is {} levels deep\", self.depth)\n    }\n}\n";
    let opts = Options {
        ceiling: 200,
        floor: 20,
        ..Options::default()
    };
    let c = chunk("src/walker.rs", Some("rust"), src, Strategy::Ast, &opts);
    invariants(src, &c, opts.ceiling).unwrap();
    let names: Vec<String> = c
        .pieces
        .iter()
        .filter_map(crate::Piece::qualified_name)
        .collect();
    assert!(names.contains(&"Result".to_owned()), "{names:?}");
    assert!(names.contains(&"Walker.fmt".to_owned()), "{names:?}");
    assert!(names.contains(&"Walker.describe".to_owned()), "{names:?}");
    let result = c
        .pieces
        .iter()
        .find(|p| p.symbol.as_deref() == Some("Result"))
        .unwrap();
    assert_eq!(result.kind, crate::Kind::Type);
    for p in c.pieces.iter().filter(|p| !p.is_generated()) {
        let text = src[p.start..p.end].trim();
        assert!(
            text != "}"
                && !(text.starts_with("impl") && text.ends_with('{') && !text.contains('\n')),
            "a chunk of a brace or an opening line alone: {text:?}"
        );
    }
    let fmt = c
        .pieces
        .iter()
        .find(|p| p.qualified_name().as_deref() == Some("Walker.fmt"))
        .unwrap();
    assert!(src[fmt.start..].starts_with("impl std::fmt::Display for Walker {"));
}

#[test]
fn parts_of_a_cut_definition_or_comment_are_never_crumbs() {
    let opts = Options::default();
    let sizes = |lang: &str, src: &str| -> Vec<(usize, usize, usize)> {
        let c = chunk("x", Some(lang), src, Strategy::Ast, &opts);
        invariants(src, &c, opts.ceiling).unwrap();
        c.pieces
            .iter()
            .filter(|p| !p.is_generated())
            .map(|p| {
                let line = |b: usize| src[..b].matches('\n').count() + 1;
                (line(p.start), line(p.end), p.end - p.start)
            })
            .collect()
    };
    // 40 lines of crate docs (2.9 KB): two parts, not thirteen parts of one line and a rest.
    let docs: String = (0..40)
        .map(|i| format!("//! Crate documentation, line {i:02} of a long introduction here.\n"))
        .collect();
    let rust = format!("{docs}\nuse std::fmt;\n\npub fn foo() -> u32 {{\n    1\n}}\n");
    let parts = sizes("rust", &rust);
    let code: Vec<_> = parts.iter().filter(|p| p.1 <= 43).collect();
    assert_eq!(code.len(), 2, "{parts:?}");
    assert!(code.iter().all(|p| p.2 >= opts.floor), "{parts:?}");
    // Crate docs are cut before a heading where one is in reach, not at a doctest's hidden
    // `# Ok(())` line.
    let section = |title: &str, n: usize| -> String {
        let body: String = (0..n)
            .map(|i| format!("//! {title} line {i:02} says one thing about {title} here.\n"))
            .collect();
        format!("//!\n//! ## {title}\n//!\n{body}")
    };
    let rust = format!(
        "//! Intro.\n//!\n//! ```\n//! # fn main() {{\n//! # Ok(())\n//! ```\n{}{}{}\nuse std::fmt;\n",
        section("Redirects", 14),
        section("Proxies", 14),
        section("Cookies", 14)
    );
    let c = chunk("lib.rs", Some("rust"), &rust, Strategy::Ast, &opts);
    let firsts: Vec<&str> = c
        .pieces
        .iter()
        .filter(|p| !p.is_generated())
        .map(|p| p.text.lines().next().unwrap())
        .collect();
    assert!(
        firsts.iter().skip(1).all(|l| l.starts_with("//! ## ")),
        "{firsts:?}"
    );
    // A function over the ceiling whose last statements are short: no part of one line.
    let arms: String = (0..40)
        .map(|i| format!("        elif k == 'key{i:02}':\n            rv[k] = convert_{i:02}(v)\n"))
        .collect();
    let py = format!(
        "def asdict(inst):\n    rv = {{}}\n    for k, v in inst.items():\n        if k is None:\n            continue\n{arms}        else:\n            rv[k] = v\n    return rv\n"
    );
    let parts = sizes("python", &py);
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(parts.iter().all(|p| p.2 >= opts.floor), "{parts:?}");
    assert!(py.trim_end().ends_with("return rv"));
}

#[test]
fn named_constants_are_members_of_the_module_code_that_holds_them() {
    let members = |lang: &str, src: &str| -> Vec<(String, Vec<String>)> {
        records("x", lang, src)
            .into_iter()
            .filter(|r| !r.members.is_empty() || r.kind == crate::Kind::Toc)
            .map(|r| {
                let listed = if r.kind == crate::Kind::Toc {
                    r.text
                        .lines()
                        .filter(|l| l.trim_start().starts_with("constant "))
                        .map(|l| l.trim().to_owned())
                        .collect()
                } else {
                    r.members.clone()
                };
                (r.kind.to_string(), listed)
            })
            .collect()
    };
    let go = "package logrus\n\n// AllLevels exposing all logging levels.\nvar AllLevels = []Level{PanicLevel}\n\nconst (\n\tErrorCode Code = iota\n\tWarnCode\n)\n\nvar _ = fmt.Sprintf\n\nfunc Use() {}\n";
    assert_eq!(
        members("go", go),
        [
            (
                "module_code".to_owned(),
                vec!["AllLevels".into(), "ErrorCode".into(), "WarnCode".into()]
            ),
            (
                "toc".to_owned(),
                vec![
                    "constant AllLevels (line 4)".into(),
                    "constant ErrorCode (line 7)".into(),
                    "constant WarnCode (line 8)".into()
                ]
            ),
        ]
    );
    let rust = "use std::fmt;\n\n/// The most widgets.\npub const MAX_WIDGETS: usize = 10;\nstatic REGISTRY: u8 = 0;\n\npub fn f() {}\n";
    assert_eq!(
        members("rust", rust)[0],
        (
            "module_code".to_owned(),
            vec!["MAX_WIDGETS".into(), "REGISTRY".into()]
        )
    );
    // In Python and JavaScript, names in capitals only; a function is a definition already.
    let py = "import os\n\nDEFAULT_TIMEOUT = 5.0\n__all__ = ['f']\nlimit = 3\nHANDLER = lambda x: x\n\ndef f():\n    pass\n";
    assert_eq!(
        members("python", py)[0],
        ("module_code".to_owned(), vec!["DEFAULT_TIMEOUT".into()])
    );
    let ts = "export const MAX_RETRIES = 2;\nconst DEFAULTS = { a: 1 }, other = 3;\nconst FN = () => 1;\n\nexport function g() {}\n";
    assert_eq!(
        members("typescript", ts)[0],
        (
            "module_code".to_owned(),
            vec!["MAX_RETRIES".into(), "DEFAULTS".into()]
        )
    );
}

#[test]
fn go_interface_methods_are_members_of_the_interface() {
    let src = "package logrus\n\n// Hook fires on levels.\ntype Hook interface {\n\tLevels() []Level\n\tFire(*Entry) error\n\tio.Writer\n}\n\ntype (\n\tGetter interface{ Get() int }\n\tBox    struct{}\n)\n";
    let recs = records("hooks.go", "go", src);
    assert_eq!(
        by_qualified(&recs, "Hook").members,
        ["Hook.Levels", "Hook.Fire"]
    );
    assert_eq!(by_qualified(&recs, "Getter").members, ["Getter.Get"]);
    assert!(by_qualified(&recs, "Box").members.is_empty());
}

/// Building a value of a named type is a use of the type, as `new Foo()` is: a Go composite
/// literal and a Rust struct expression name their type among the chunk's calls, and so does
/// a call of a type's own function (`Error::new`). A literal of a slice or a map names no
/// type, and another crate's type (`io::Error::new`) is not this one's.
#[test]
fn building_a_value_of_a_named_type_calls_the_type() {
    let go = "package viper\n\n\
              func find(name string) (string, error) {\n\
              \tpaths := []string{\"a\", \"b\"}\n\
              \tseen := map[string]int{}\n\
              \t_ = struct{ n int }{1}\n\
              \tif len(paths) == len(seen) {\n\
              \t\treturn \"\", ConfigFileNotFoundError{name, paths}\n\
              \t}\n\
              \treturn \"\", &remote.ProviderError{Name: name}\n\
              }\n";
    let recs = records("file.go", "go", go);
    let find = by_symbol(&recs, "find");
    assert_eq!(
        find.calls,
        ["len", "ConfigFileNotFoundError", "ProviderError"],
        "{:?}",
        find.calls
    );

    let rust = "fn parse(s: &str) -> Result<Spec, ParseError> {\n\
                \x20   if s.is_empty() {\n\
                \x20       return Err(ParseError { at: 0 });\n\
                \x20   }\n\
                \x20   let _ = std::io::Error::new(std::io::ErrorKind::Other, \"x\");\n\
                \x20   let _ = io::Error::other(\"y\");\n\
                \x20   let spec = Spec::new(s);\n\
                \x20   let _ = crate::error::Kind::from(1);\n\
                \x20   Self::check(Self { spec })\n\
                }\n";
    let recs = records("src/parse.rs", "rust", rust);
    let parse = by_symbol(&recs, "parse");
    assert_eq!(
        parse.calls,
        [
            "is_empty",
            "Err",
            "ParseError",
            "new",
            "other",
            "Spec",
            "from",
            "Kind",
            "check"
        ],
        "{:?}",
        parse.calls
    );
}
