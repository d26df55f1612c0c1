//! The call graph across files: each call name a chunk makes is resolved to the definition it
//! means, or left unresolved. Precision over recall — a wrong edge sends a reader (or an
//! agent) to code that has nothing to do with the question, a missing one only says less.
//!
//! A call name (the last identifier of the callee, as the chunker records it) resolves, within
//! the caller's repository, to:
//!
//! 1. **the same file's** definition of that name — the one in the caller's own container
//!    when the file has several (`self.run()` in `class A` → `A.run`);
//! 2. else **an imported module's**: the definition whose module — its package directory in
//!    Go, else its file's stem (`bar` for `bar.py`, `./bar.js`, `bar.rs`; the directory for
//!    `mod.rs`, `__init__.py`, `index.js`) — is named by one of the caller's imports;
//! 3. else **the repository's only** definition of that name — unless one of the caller's
//!    imports binds the name from somewhere else (`const request = require('supertest')`:
//!    the repository's own `request` is not the one called).
//!
//! Anything else — several candidates left at every step, or none — stays unresolved.
//! Members of a container that stays one chunk (`impl Walker { fn run }`) resolve to the
//! container.

use std::collections::HashMap;

use trawl_core::{ChunkId, ChunkKind};

use crate::build::LiveDoc;

/// How the calls of a live set were resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    pub same_file: u64,
    pub imported: u64,
    pub unique: u64,
    /// Names defined in the repository more than once with no rule to choose.
    pub ambiguous: u64,
    /// Names with no definition in the repository (library and built-in calls).
    pub external: u64,
}

impl std::ops::AddAssign for CallStats {
    fn add_assign(&mut self, o: Self) {
        self.same_file += o.same_file;
        self.imported += o.imported;
        self.unique += o.unique;
        self.ambiguous += o.ambiguous;
        self.external += o.external;
    }
}

/// The kinds whose symbol a call can name.
fn callable(kind: ChunkKind) -> bool {
    kind.is_code_definition() && kind != ChunkKind::Impl
}

/// File stems that name their directory's module rather than themselves.
const DIRECTORY_STEMS: [&str; 6] = ["mod", "__init__", "index", "lib", "main", "init"];

/// The module a definition in `path` is imported by: the package directory in Go, else the
/// file's stem, or its directory for the stems above.
fn module_of<'a>(path: &'a str, language: &str) -> Option<&'a str> {
    let (dir, file) = match path.rsplit_once('/') {
        Some((d, f)) => (Some(d), f),
        None => (None, path),
    };
    let dir_name = dir.map(|d| d.rsplit('/').next().unwrap_or(d));
    if language == "go" {
        return dir_name;
    }
    let stem = file.split('.').next().unwrap_or(file);
    if stem.is_empty() || DIRECTORY_STEMS.contains(&stem) {
        dir_name
    } else {
        Some(stem)
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty())
}

/// The part of an import statement that names where it imports from, not what it binds:
/// the quoted path (`import {setTimeout as delay} from 'node:timers/promises'`, Go,
/// `require('./bar')`), Python's `from X import …` and `import X as …`, Rust's path before
/// the last `::`.
fn source_of(import: &str) -> &str {
    let t = import.trim();
    if let Some(start) = t.find(['\'', '"', '`']) {
        let quote = t[start..].chars().next().unwrap_or('"');
        let rest = &t[start + 1..];
        return rest.find(quote).map_or(rest, |end| &rest[..end]);
    }
    if let Some(rest) = t.strip_prefix("from ") {
        return rest.split(" import ").next().unwrap_or(rest);
    }
    if let Some(rest) = t
        .strip_prefix("use ")
        .or_else(|| t.strip_prefix("pub use "))
    {
        let path = rest.split('{').next().unwrap_or(rest);
        return path.rsplit_once("::").map_or(path, |(module, _)| module);
    }
    if let Some(rest) = t.strip_prefix("import ") {
        return rest.split(" as ").next().unwrap_or(rest);
    }
    t
}

/// Whether an import statement imports `module` for a call of `name`: from it (`from .bar
/// import load`), or the module itself (`from app import conf`, then `conf.parse()`) — but
/// not a binding that only shares the called name (`import {setTimeout as delay}` is not
/// `delay.ts`).
fn imports_module(import: &str, module: &str, name: &str) -> bool {
    words(source_of(import)).any(|w| w == module) || (module != name && binds(import, module))
}

/// Whether an import statement binds `name` (as written after its source: `from x import
/// name`, `const name = require(…)`, `import {a as name} from …`).
fn binds(import: &str, name: &str) -> bool {
    words(import).any(|w| w == name) && !words(source_of(import)).any(|w| w == name)
}

/// The container part of a qualified name (`A` for `A.run`, `a::B` for `a::B::run`).
fn owner(qualified: &str) -> Option<&str> {
    let cut = qualified.rfind(['.', ':'])?;
    Some(qualified[..cut].trim_end_matches(':'))
}

/// One definition a name may mean.
struct Def<'a> {
    id: ChunkId,
    path: &'a str,
    language: &'a str,
    /// The qualified name it is known by under this name (a member's own).
    qualified: Option<&'a str>,
}

/// Fills each doc's `call_ids` from its `calls` by the rules of the module documentation.
pub fn resolve_calls(docs: &mut [LiveDoc]) -> CallStats {
    let mut by_name: HashMap<(&str, &str), Vec<Def<'_>>> = HashMap::new();
    for d in docs.iter() {
        let d = &d.doc;
        // A definition split at statements is called through its first part (its signature):
        // the later parts are the same definition, not namesakes that make a call ambiguous.
        if trawl_core::records::is_later_part(&d.header) {
            continue;
        }
        let own = d
            .symbol
            .as_deref()
            .filter(|_| callable(d.kind))
            .map(|s| (s, d.qualified_name.as_deref()));
        let members = d
            .members
            .iter()
            .map(|m| (m.rsplit(['.', ':']).next().unwrap_or(m), Some(m.as_str())));
        for (name, qualified) in own.into_iter().chain(members) {
            let defs = by_name.entry((d.repo_id.as_str(), name)).or_default();
            if defs.iter().all(|x| x.id != d.chunk_id) {
                defs.push(Def {
                    id: d.chunk_id,
                    path: &d.path,
                    language: &d.language,
                    qualified,
                });
            }
        }
    }
    let mut stats = CallStats::default();
    let resolved: Vec<Vec<ChunkId>> = docs
        .iter()
        .map(|caller| {
            let c = &caller.doc;
            let caller_owner = c.qualified_name.as_deref().and_then(owner);
            let mut ids = Vec::new();
            for name in &c.calls {
                let candidates: Vec<&Def<'_>> = by_name
                    .get(&(c.repo_id.as_str(), name.as_str()))
                    .map(|v| v.iter().filter(|d| d.id != c.chunk_id).collect())
                    .unwrap_or_default();
                if candidates.is_empty() {
                    stats.external += 1;
                    continue;
                }
                let same_file: Vec<&Def<'_>> = candidates
                    .iter()
                    .copied()
                    .filter(|d| d.path == c.path)
                    .collect();
                let pick = if same_file.is_empty() {
                    let imported: Vec<&Def<'_>> = candidates
                        .iter()
                        .copied()
                        .filter(|d| {
                            module_of(d.path, d.language).is_some_and(|m| {
                                c.imports.iter().any(|i| imports_module(i, m, name))
                            })
                        })
                        .collect();
                    let bound_elsewhere = || c.imports.iter().any(|i| binds(i, name));
                    match (imported.as_slice(), candidates.as_slice()) {
                        ([one], _) => {
                            stats.imported += 1;
                            Some(one.id)
                        }
                        ([], [_]) if bound_elsewhere() => {
                            stats.external += 1;
                            continue;
                        }
                        ([], [only]) => {
                            stats.unique += 1;
                            Some(only.id)
                        }
                        _ => None,
                    }
                } else {
                    let chosen = match same_file.as_slice() {
                        [one] => Some(one.id),
                        many => {
                            let mine: Vec<_> = many
                                .iter()
                                .filter(|d| {
                                    caller_owner.is_some()
                                        && d.qualified.and_then(owner) == caller_owner
                                })
                                .collect();
                            (mine.len() == 1).then(|| mine[0].id)
                        }
                    };
                    chosen.inspect(|_| stats.same_file += 1)
                };
                match pick {
                    Some(id) => ids.push(id),
                    None => stats.ambiguous += 1,
                }
            }
            ids.sort();
            ids.dedup();
            ids
        })
        .collect();
    for (d, ids) in docs.iter_mut().zip(resolved) {
        d.doc.call_ids = ids;
    }
    stats
}

#[cfg(test)]
mod tests {
    use trawl_index::docs::DocRow;

    use super::*;

    fn def(path: &str, language: &str, kind: &str, qualified: &str) -> DocRow {
        let symbol = qualified.rsplit(['.', ':']).next().unwrap_or(qualified);
        DocRow {
            language: language.into(),
            kind: kind.parse().expect("a chunk kind"),
            symbol: Some(symbol.into()),
            ..trawl_index::testing::function_doc(
                "github.com/acme/shop",
                path,
                qualified,
                "",
                (1, 5),
            )
        }
    }

    fn caller(path: &str, qualified: &str, calls: &[&str], imports: &[&str]) -> DocRow {
        DocRow {
            calls: calls.iter().map(|s| (*s).to_owned()).collect(),
            imports: imports.iter().map(|s| (*s).to_owned()).collect(),
            ..def(path, "python", "function", qualified)
        }
    }

    fn resolve(rows: Vec<DocRow>) -> (Vec<Vec<ChunkId>>, CallStats) {
        let mut docs: Vec<LiveDoc> = rows
            .into_iter()
            .map(|doc| LiveDoc {
                doc,
                vector: None,
                prose: None,
            })
            .collect();
        let stats = resolve_calls(&mut docs);
        (docs.into_iter().map(|d| d.doc.call_ids).collect(), stats)
    }

    #[test]
    fn the_same_file_wins_then_the_callers_own_container() {
        let here = def("pkg/a.py", "python", "function", "helper");
        let there = def("pkg/b.py", "python", "function", "helper");
        let a_run = def("pkg/a.py", "python", "method", "A.run");
        let b_run = def("pkg/a.py", "python", "method", "B.run");
        let me = caller("pkg/a.py", "A.go", &["helper", "run"], &[]);
        let (ids, stats) = resolve(vec![here.clone(), there, a_run.clone(), b_run, me]);
        let mut want = vec![here.chunk_id, a_run.chunk_id];
        want.sort();
        assert_eq!(ids[4], want);
        assert_eq!(stats.same_file, 2);
    }

    #[test]
    fn a_definition_split_in_parts_is_called_through_its_first_part() {
        // `load` is long enough to be cut at statements: three chunks share its name. They
        // are one definition, so a call to it is not ambiguous.
        let part = |i: u32, lines: (u32, u32)| DocRow {
            chunk_id: trawl_core::hash::chunk_id(
                &trawl_core::RepoId::parse("github.com/acme/shop").unwrap(),
                "pkg/load.py",
                "function",
                "load",
                i,
            ),
            header: format!(
                "pkg/load.py · function load{}\nlanguage: python",
                trawl_core::records::part_label(i, 3)
            ),
            start_line: lines.0,
            end_line: lines.1,
            ..def("pkg/load.py", "python", "function", "load")
        };
        let parts = [part(1, (1, 40)), part(2, (41, 80)), part(3, (81, 99))];
        let with_caller = |c: DocRow| {
            let mut rows = parts.to_vec();
            rows.push(c);
            resolve(rows)
        };
        let me = caller(
            "pkg/main.py",
            "main",
            &["load"],
            &["from .load import load"],
        );
        let (ids, stats) = with_caller(me);
        assert_eq!(ids[3], vec![parts[0].chunk_id]);
        assert_eq!((stats.imported, stats.ambiguous), (1, 0));
        // In the same file too.
        let (ids, stats) = with_caller(caller("pkg/load.py", "reload", &["load"], &[]));
        assert_eq!(ids[3], vec![parts[0].chunk_id]);
        assert_eq!((stats.same_file, stats.ambiguous), (1, 0));
    }

    #[test]
    fn an_imported_module_chooses_among_files() {
        let bar = def("src/app/bar.py", "python", "function", "load");
        let baz = def("src/app/baz.py", "python", "function", "load");
        let pkg = def("src/app/conf/__init__.py", "python", "function", "parse");
        let other = def("src/app/other.py", "python", "function", "parse");
        let me = caller(
            "src/app/main.py",
            "main",
            &["load", "parse"],
            &["from .bar import load", "from app import conf"],
        );
        let (ids, stats) = resolve(vec![bar.clone(), baz, pkg.clone(), other, me]);
        let mut want = vec![bar.chunk_id, pkg.chunk_id];
        want.sort();
        assert_eq!(ids[4], want);
        assert_eq!(stats.imported, 2);
    }

    #[test]
    fn go_packages_are_directories() {
        let get = def("internal/store/store.go", "go", "method", "Store.Get");
        let other = def("internal/cache/cache.go", "go", "method", "Cache.Get");
        let me = DocRow {
            language: "go".into(),
            ..caller(
                "cmd/main.go",
                "main",
                &["Get"],
                &["import \"example.com/x/internal/store\""],
            )
        };
        let (ids, _) = resolve(vec![get.clone(), other, me]);
        assert_eq!(ids[2], [get.chunk_id]);
    }

    #[test]
    fn a_unique_name_resolves_and_an_ambiguous_one_does_not() {
        let only = def("lib/x.py", "python", "function", "only_here");
        let one = def("lib/y.py", "python", "function", "twice");
        let two = def("lib/z.py", "python", "function", "twice");
        let me = caller("app.py", "main", &["only_here", "twice", "print"], &[]);
        let (ids, stats) = resolve(vec![only.clone(), one, two, me]);
        assert_eq!(ids[3], [only.chunk_id], "no guessing between y and z");
        assert_eq!(
            (stats.unique, stats.ambiguous, stats.external),
            (1, 1, 1),
            "{stats:?}"
        );
    }

    #[test]
    fn a_call_to_a_member_of_a_one_chunk_container_resolves_to_the_container() {
        let walker = DocRow {
            kind: ChunkKind::Impl,
            symbol: Some("Walker".into()),
            qualified_name: Some("Walker".into()),
            members: vec!["Walker.run".into(), "Walker.skip".into()],
            ..def("src/walk.rs", "rust", "impl", "Walker")
        };
        let main = DocRow {
            calls: vec!["run".into()],
            ..def("src/main.rs", "rust", "function", "main")
        };
        let (ids, _) = resolve(vec![walker.clone(), main]);
        assert_eq!(ids[1], [walker.chunk_id]);
    }

    #[test]
    fn modules_by_language() {
        assert_eq!(module_of("a/b/bar.py", "python"), Some("bar"));
        assert_eq!(module_of("a/conf/__init__.py", "python"), Some("conf"));
        assert_eq!(module_of("src/walk/mod.rs", "rust"), Some("walk"));
        assert_eq!(module_of("lib/index.js", "javascript"), Some("lib"));
        assert_eq!(module_of("internal/store/get.go", "go"), Some("store"));
        assert_eq!(module_of("main.go", "go"), None);
        assert!(imports_module("use crate::walk::Walker", "walk", "Walker"));
        assert!(imports_module(
            "use crate::walk::{Walker, Step}",
            "walk",
            "Step"
        ));
        assert!(!imports_module(
            "use crate::walker::Walker",
            "walk",
            "Walker"
        ));
        assert!(!imports_module("use crate::walker::walk", "walk", "walk"));
        assert!(imports_module("from .bar import load", "bar", "load"));
        assert!(!imports_module("from .bar import load", "load", "load"));
        assert!(imports_module(
            "const { load } = require('./lib/bar')",
            "bar",
            "load"
        ));
        assert!(!imports_module(
            "import {setTimeout as delay} from 'node:timers/promises'",
            "delay",
            "delay"
        ));
        assert!(imports_module("from app import conf", "conf", "parse"));
        assert!(binds("const request = require('supertest')", "request"));
        assert!(!binds("const request = require('supertest')", "supertest"));
    }

    #[test]
    fn a_name_imported_from_elsewhere_is_not_the_repositorys_own() {
        let helper = def(
            "test-helpers/context.js",
            "javascript",
            "function",
            "request",
        );
        let delay = def("source/utils/delay.ts", "typescript", "function", "delay");
        let me = caller(
            "test/app.test.js",
            "main",
            &["request", "delay"],
            &[
                "const request = require('supertest')",
                "import {setTimeout as delay} from 'node:timers/promises'",
            ],
        );
        let (ids, stats) = resolve(vec![helper, delay, me]);
        assert!(ids[2].is_empty(), "{:?}", ids[2]);
        assert_eq!(stats.external, 2);
    }
}
