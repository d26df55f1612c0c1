//! Per-language knowledge, declared as data: which syntax nodes are definitions, which of
//! those hold members, which wrap a definition (decorators, `export`, `template<>`), which are
//! transparent (`#ifdef`, `extern "C"`), and which are comments, attributes, imports and
//! calls. The chunking algorithm in [`crate::ast`] is one walker for every language.

use tree_sitter::Language;

/// What a definition is, as the chunk's `kind` says it (core's [`ChunkKind`]).
pub use trawl_core::kind::ChunkKind as Kind;

/// One language's declarations.
pub struct Spec {
    pub name: &'static str,
    /// The statically compiled grammar; `None` for a grammar loaded at run time.
    pub language: Option<fn() -> Language>,
    /// Definition node kinds.
    pub defs: &'static [(&'static str, Kind)],
    /// Nodes that wrap a definition and belong to it (decorators, `export`, templates).
    pub wrappers: &'static [&'static str],
    /// Nodes whose children are treated as if they stood in the parent (`#ifdef`, `extern "C"`).
    pub transparent: &'static [&'static str],
    /// Body node kinds of containers, when the container has no `body` field.
    pub bodies: &'static [&'static str],
    pub comments: &'static [&'static str],
    /// Nodes before a definition that belong to it (Rust `#[…]`).
    pub attributes: &'static [&'static str],
    pub imports: &'static [&'static str],
    /// Call nodes and the field naming the callee.
    pub calls: &'static [(&'static str, &'static str)],
    /// The first string statement of a body is a docstring (Python).
    pub docstrings: bool,
    /// Functions defined by declaration or assignment count as definitions (JavaScript,
    /// TypeScript): `const f = () => …`, `res.status = function …`, `Foo.prototype.bar = …`,
    /// `module.exports = …`, and an object literal with function members
    /// (`const proto = module.exports = { get() {…} }`), which is a scope like a namespace.
    pub arrow_functions: bool,
    /// `name = lambda …` and `name = partial(…)` assignments count as functions (Python).
    pub lambdas: bool,
    /// Conditional statements whose blocks' definitions are the enclosing scope's own, their
    /// heads (`if _mswindows:`, `else:`) read with the definition that follows (Python).
    pub conditionals: &'static [&'static str],
    /// Item-level macro invocations whose braces hold items are read as those items (Rust:
    /// `cfg_rt! { pub fn spawn … }`, `quickcheck! { fn prop … }`).
    pub item_macros: bool,
    /// Declarations that group several definitions (Go `type ( Option struct {…}; Handler
    /// interface {…} )`): when one holds more than one, each is a definition of its own.
    pub groups: &'static [&'static str],
}

const C_LIKE_COMMENTS: &[&str] = &["line_comment", "block_comment"];

macro_rules! lang {
    ($e:expr) => {{
        fn f() -> Language {
            $e.into()
        }
        f
    }};
}

const JS_DEFS: &[(&str, Kind)] = &[
    ("function_declaration", Kind::Function),
    ("generator_function_declaration", Kind::Function),
    ("class_declaration", Kind::Class),
    ("class", Kind::Class),
    ("method_definition", Kind::Method),
];
const TS_DEFS: &[(&str, Kind)] = &[
    ("function_declaration", Kind::Function),
    ("generator_function_declaration", Kind::Function),
    ("class_declaration", Kind::Class),
    ("abstract_class_declaration", Kind::Class),
    ("class", Kind::Class),
    ("method_definition", Kind::Method),
    ("interface_declaration", Kind::Interface),
    // `export type Options = {…}`: where TypeScript code declares most of its shapes.
    ("type_alias_declaration", Kind::Type),
    ("enum_declaration", Kind::Enum),
    ("internal_module", Kind::Namespace),
    ("module", Kind::Namespace),
    ("function_signature", Kind::Function),
    ("abstract_method_signature", Kind::Method),
];
const JS_CALLS: &[(&str, &str)] = &[
    ("call_expression", "function"),
    ("new_expression", "constructor"),
];

/// What a language declares when it says nothing: `comment` nodes, nothing else.
const BASE: Spec = Spec {
    name: "",
    language: None,
    defs: &[],
    wrappers: &[],
    transparent: &[],
    bodies: &[],
    comments: &["comment"],
    attributes: &[],
    imports: &[],
    calls: &[],
    docstrings: false,
    arrow_functions: false,
    lambdas: false,
    conditionals: &[],
    item_macros: false,
    groups: &[],
};

/// Preprocessor conditionals and `extern "C"` blocks: their contents count as top level.
const C_TRANSPARENT: &[&str] = &[
    "preproc_ifdef",
    "preproc_if",
    "preproc_else",
    "preproc_elif",
    "linkage_specification",
];

/// TypeScript and TSX differ only in their grammar.
const fn ts_spec(name: &'static str, language: fn() -> Language) -> Spec {
    Spec {
        name,
        language: Some(language),
        defs: TS_DEFS,
        wrappers: &["export_statement", "ambient_declaration"],
        bodies: &[
            "class_body",
            "interface_body",
            "object_type",
            "enum_body",
            "statement_block",
        ],
        attributes: &["decorator"],
        imports: &["import_statement"],
        calls: JS_CALLS,
        arrow_functions: true,
        ..BASE
    }
}

/// Every statically compiled language.
pub static SPECS: &[Spec] = &[
    Spec {
        name: "python",
        language: Some(lang!(tree_sitter_python::LANGUAGE)),
        defs: &[
            ("function_definition", Kind::Function),
            ("class_definition", Kind::Class),
        ],
        wrappers: &["decorated_definition"],
        // What a module or class defines under a condition (`if _mswindows: class
        // STARTUPINFO`, `try: from _x import f` / `except ImportError: def f`) is its own.
        conditionals: &["if_statement", "try_statement"],
        bodies: &["block"],
        imports: &[
            "import_statement",
            "import_from_statement",
            "future_import_statement",
        ],
        calls: &[("call", "function")],
        docstrings: true,
        lambdas: true,
        ..BASE
    },
    Spec {
        name: "rust",
        language: Some(lang!(tree_sitter_rust::LANGUAGE)),
        defs: &[
            ("function_item", Kind::Function),
            ("function_signature_item", Kind::Function),
            ("struct_item", Kind::Struct),
            ("enum_item", Kind::Enum),
            ("union_item", Kind::Struct),
            // `pub type Result<T> = std::result::Result<T, Error>;`
            ("type_item", Kind::Type),
            ("trait_item", Kind::Trait),
            ("impl_item", Kind::Impl),
            ("mod_item", Kind::Module),
            ("macro_definition", Kind::Macro),
        ],
        bodies: &[
            "declaration_list",
            "field_declaration_list",
            "enum_variant_list",
        ],
        comments: C_LIKE_COMMENTS,
        attributes: &["attribute_item"],
        imports: &["use_declaration", "extern_crate_declaration"],
        // A struct built (`ParseError { .. }`) is a use of its type, as `new Foo()` is in
        // JavaScript: an error type's message is written by its `Display` impl and the
        // error happens where it is built.
        calls: &[
            ("call_expression", "function"),
            ("macro_invocation", "macro"),
            ("struct_expression", "name"),
        ],
        item_macros: true,
        ..BASE
    },
    Spec {
        name: "go",
        language: Some(lang!(tree_sitter_go::LANGUAGE)),
        defs: &[
            ("function_declaration", Kind::Function),
            ("method_declaration", Kind::Method),
            // Each a struct, an interface or a type, by the type it names (`go_type`).
            ("type_declaration", Kind::Struct),
            ("type_spec", Kind::Struct),
            ("type_alias", Kind::Type),
        ],
        groups: &["type_declaration"],
        imports: &["import_declaration"],
        // A composite literal of a named type (`&ConfigFileNotFoundError{…}`) is a use of
        // the type, as a constructor call is elsewhere.
        calls: &[
            ("call_expression", "function"),
            ("composite_literal", "type"),
        ],
        ..BASE
    },
    Spec {
        name: "java",
        language: Some(lang!(tree_sitter_java::LANGUAGE)),
        defs: &[
            ("class_declaration", Kind::Class),
            ("interface_declaration", Kind::Interface),
            ("enum_declaration", Kind::Enum),
            ("record_declaration", Kind::Class),
            ("annotation_type_declaration", Kind::Interface),
            ("method_declaration", Kind::Method),
            ("constructor_declaration", Kind::Method),
            ("compact_constructor_declaration", Kind::Method),
        ],
        bodies: &["class_body", "interface_body", "enum_body"],
        comments: C_LIKE_COMMENTS,
        // Held in a definition's `modifiers`.
        attributes: &["marker_annotation", "annotation"],
        imports: &["import_declaration"],
        calls: &[
            ("method_invocation", "name"),
            ("object_creation_expression", "type"),
        ],
        ..BASE
    },
    Spec {
        name: "javascript",
        language: Some(lang!(tree_sitter_javascript::LANGUAGE)),
        defs: JS_DEFS,
        wrappers: &["export_statement"],
        bodies: &["class_body", "statement_block"],
        attributes: &["decorator"],
        imports: &["import_statement"],
        calls: JS_CALLS,
        arrow_functions: true,
        ..BASE
    },
    ts_spec(
        "typescript",
        lang!(tree_sitter_typescript::LANGUAGE_TYPESCRIPT),
    ),
    ts_spec("tsx", lang!(tree_sitter_typescript::LANGUAGE_TSX)),
    Spec {
        name: "c",
        language: Some(lang!(tree_sitter_c::LANGUAGE)),
        defs: &[
            ("function_definition", Kind::Function),
            ("struct_specifier", Kind::Struct),
            ("union_specifier", Kind::Struct),
            ("enum_specifier", Kind::Enum),
            ("type_definition", Kind::Struct),
        ],
        transparent: C_TRANSPARENT,
        bodies: &["field_declaration_list", "enumerator_list"],
        imports: &["preproc_include"],
        calls: &[("call_expression", "function")],
        ..BASE
    },
    Spec {
        name: "cpp",
        language: Some(lang!(tree_sitter_cpp::LANGUAGE)),
        defs: &[
            ("function_definition", Kind::Function),
            ("class_specifier", Kind::Class),
            ("struct_specifier", Kind::Struct),
            ("union_specifier", Kind::Struct),
            ("enum_specifier", Kind::Enum),
            ("namespace_definition", Kind::Namespace),
            ("type_definition", Kind::Struct),
            ("concept_definition", Kind::Interface),
        ],
        wrappers: &["template_declaration"],
        transparent: C_TRANSPARENT,
        bodies: &[
            "field_declaration_list",
            "declaration_list",
            "enumerator_list",
        ],
        attributes: &["attribute_declaration"],
        imports: &["preproc_include", "using_declaration"],
        calls: &[("call_expression", "function"), ("new_expression", "type")],
        ..BASE
    },
    Spec {
        name: "csharp",
        language: Some(lang!(tree_sitter_c_sharp::LANGUAGE)),
        defs: &[
            ("class_declaration", Kind::Class),
            ("struct_declaration", Kind::Struct),
            ("record_declaration", Kind::Class),
            ("interface_declaration", Kind::Interface),
            ("enum_declaration", Kind::Enum),
            ("namespace_declaration", Kind::Namespace),
            ("method_declaration", Kind::Method),
            ("constructor_declaration", Kind::Method),
            ("destructor_declaration", Kind::Method),
            ("operator_declaration", Kind::Method),
            ("property_declaration", Kind::Method),
            ("local_function_statement", Kind::Function),
        ],
        bodies: &["declaration_list", "enum_member_declaration_list"],
        attributes: &["attribute_list"],
        imports: &["using_directive"],
        calls: &[
            ("invocation_expression", "function"),
            ("object_creation_expression", "type"),
        ],
        ..BASE
    },
    Spec {
        name: "ruby",
        language: Some(lang!(tree_sitter_ruby::LANGUAGE)),
        defs: &[
            ("method", Kind::Method),
            ("singleton_method", Kind::Method),
            ("class", Kind::Class),
            ("singleton_class", Kind::Class),
            ("module", Kind::Module),
        ],
        bodies: &["body_statement"],
        calls: &[("call", "method")],
        ..BASE
    },
    Spec {
        name: "php",
        language: Some(lang!(tree_sitter_php::LANGUAGE_PHP)),
        defs: &[
            ("function_definition", Kind::Function),
            ("class_declaration", Kind::Class),
            ("interface_declaration", Kind::Interface),
            ("trait_declaration", Kind::Trait),
            ("enum_declaration", Kind::Enum),
            ("method_declaration", Kind::Method),
            ("namespace_definition", Kind::Namespace),
        ],
        bodies: &[
            "declaration_list",
            "enum_declaration_list",
            "compound_statement",
        ],
        attributes: &["attribute_list"],
        imports: &[
            "namespace_use_declaration",
            "require_expression",
            "require_once_expression",
            "include_expression",
            "include_once_expression",
        ],
        calls: &[
            ("function_call_expression", "function"),
            ("member_call_expression", "name"),
            ("scoped_call_expression", "name"),
        ],
        ..BASE
    },
    Spec {
        name: "bash",
        language: Some(lang!(tree_sitter_bash::LANGUAGE)),
        defs: &[("function_definition", Kind::Function)],
        bodies: &["compound_statement"],
        calls: &[("command", "name")],
        ..BASE
    },
    Spec {
        name: "lua",
        language: Some(lang!(tree_sitter_lua::LANGUAGE)),
        defs: &[("function_declaration", Kind::Function)],
        bodies: &["block"],
        calls: &[("function_call", "name")],
        ..BASE
    },
];

/// The spec of a statically compiled language, by trawl's language name.
pub fn spec(language: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == language)
}

/// A grammar loaded at run time, with a spec derived from its node kinds.
pub struct Dynamic {
    pub spec: &'static Spec,
    pub language: Language,
}

/// The long tail: a grammar that tree-sitter-language-pack can load from the directory in
/// `TREE_SITTER_LANGUAGE_PACK_LIBS_DIR` (compiled grammar libraries), with a spec derived
/// from the grammar's own node kinds (`*_definition`/`*_declaration`/`*_item` nodes naming a
/// function, method, class, …; `*comment*`; `*import*` statements; `call*` nodes). Loaded once
/// per language and process; `None` when no such grammar is there.
pub fn dynamic(language: &str) -> Option<&'static Dynamic> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<&'static Dynamic>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let mut map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *map.entry(language.to_owned()).or_insert_with(|| {
        let lang = tree_sitter_language_pack::get_language(language).ok()?;
        let spec: &'static Spec = Box::leak(Box::new(derive_spec(language, &lang)));
        Some(&*Box::leak(Box::new(Dynamic {
            spec,
            language: lang,
        })))
    })
}

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

/// Declarations for a grammar trawl has no table for, guessed from its node kind names.
pub fn derive_spec(name: &str, lang: &Language) -> Spec {
    let kinds: Vec<&'static str> = (0..lang.node_kind_count())
        .filter_map(|id| {
            let id = u16::try_from(id).ok()?;
            (lang.node_kind_is_named(id) && lang.node_kind_is_visible(id))
                .then(|| lang.node_kind_for_id(id))
                .flatten()
        })
        .map(|k| &*Box::leak(k.to_owned().into_boxed_str()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut defs = Vec::new();
    for &k in &kinds {
        let definition = k.ends_with("_definition")
            || k.ends_with("_declaration")
            || k.ends_with("_item")
            || matches!(k, "function" | "method" | "class");
        if !definition {
            continue;
        }
        let has = |w: &str| k.split('_').any(|p| p == w);
        let kind = if has("method") {
            Kind::Method
        } else if has("function") || has("func") || has("fun") || has("fn") || has("procedure") {
            Kind::Function
        } else if has("class") || has("object") {
            Kind::Class
        } else if has("interface") || has("protocol") {
            Kind::Interface
        } else if has("struct") || has("record") {
            Kind::Struct
        } else if has("enum") {
            Kind::Enum
        } else if has("trait") {
            Kind::Trait
        } else if has("impl") {
            Kind::Impl
        } else if has("module") || has("namespace") {
            Kind::Namespace
        } else {
            continue;
        };
        if has("local") || has("anonymous") {
            continue;
        }
        defs.push((k, kind));
    }
    let calls: Vec<(&'static str, &'static str)> = kinds
        .iter()
        .filter(|k| {
            matches!(
                **k,
                "call"
                    | "call_expression"
                    | "function_call"
                    | "method_call"
                    | "method_invocation"
                    | "invocation_expression"
                    | "function_call_expression"
                    | "method_call_expression"
            )
        })
        .flat_map(|k| {
            ["function", "name", "method", "callee"]
                .into_iter()
                .filter(|f| lang.field_id_for_name(f).is_some())
                .map(move |f| (*k, f))
        })
        .collect();
    Spec {
        name: Box::leak(name.to_owned().into_boxed_str()),
        language: None,
        defs: leak(defs),
        wrappers: leak(
            kinds
                .iter()
                .copied()
                .filter(|k| k.starts_with("decorated_"))
                .collect(),
        ),
        transparent: &[],
        bodies: leak(
            kinds
                .iter()
                .copied()
                .filter(|k| {
                    k.ends_with("_body") || *k == "block" || k.ends_with("declaration_list")
                })
                .collect(),
        ),
        comments: leak(
            kinds
                .iter()
                .copied()
                .filter(|k| k.contains("comment"))
                .collect(),
        ),
        attributes: leak(
            kinds
                .iter()
                .copied()
                .filter(|k| matches!(*k, "decorator" | "annotation" | "attribute"))
                .collect(),
        ),
        imports: leak(
            kinds
                .iter()
                .copied()
                .filter(|k| {
                    (k.contains("import") || k.contains("include") || k.contains("using"))
                        && (k.ends_with("_statement")
                            || k.ends_with("_declaration")
                            || k.ends_with("_directive")
                            || k.ends_with("_header")
                            || k.ends_with("_list"))
                })
                .collect(),
        ),
        calls: leak(calls),
        docstrings: false,
        arrow_functions: false,
        lambdas: false,
        conditionals: &[],
        item_macros: false,
        groups: &[],
    }
}

impl Spec {
    pub fn def_kind(&self, node_kind: &str) -> Option<Kind> {
        self.defs
            .iter()
            .find(|(k, _)| *k == node_kind)
            .map(|(_, kind)| *kind)
    }
}

/// The markdown grammar (block structure), used by [`crate::markdown`].
pub fn markdown() -> Language {
    tree_sitter_md::LANGUAGE.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grammar_loads_and_every_declared_node_kind_exists() {
        for spec in SPECS {
            let lang = (spec.language.expect("static specs have a grammar"))();
            let mut parser = tree_sitter::Parser::new();
            parser.set_language(&lang).unwrap();
            let kinds = spec
                .defs
                .iter()
                .map(|(k, _)| *k)
                .chain(spec.wrappers.iter().copied())
                .chain(spec.transparent.iter().copied())
                .chain(spec.conditionals.iter().copied())
                .chain(spec.bodies.iter().copied())
                .chain(spec.comments.iter().copied())
                .chain(spec.attributes.iter().copied())
                .chain(spec.imports.iter().copied())
                .chain(spec.calls.iter().map(|(k, _)| *k));
            for kind in kinds {
                assert_ne!(
                    lang.id_for_node_kind(kind, true),
                    0,
                    "{}: no node kind {kind:?}",
                    spec.name
                );
            }
            for (call, field) in spec.calls {
                assert!(
                    lang.field_id_for_name(field).is_some(),
                    "{}: no field {field:?} for {call}",
                    spec.name
                );
            }
        }
        parser_for_markdown();
    }

    fn parser_for_markdown() {
        let mut p = tree_sitter::Parser::new();
        p.set_language(&markdown()).unwrap();
    }
}
