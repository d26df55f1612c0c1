//! The query library over a memory store (a remote store: segments go through the cache):
//! downloads, reuse of unchanged segments, pruning, tombstones, filters inside the vector arm.

use std::collections::HashSet;

use trawl_compactor::Quiet;
use trawl_compactor::build::{BuildOptions, LiveDoc, build};
use trawl_core::config::QueryConfig;
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_index::VectorData;

use crate::QueryError;
use crate::access::Access;
use crate::index::Generation;
use crate::rank;
use crate::request::{Hit, Mode, SearchRequest};
use crate::search::{self, Filter};

const DIMS: usize = 32;

fn unit(seed: u64) -> Vec<f32> {
    trawl_index::testing::unit(seed, DIMS)
}

fn live(i: u64, repo: &str, text: &str) -> LiveDoc {
    LiveDoc {
        doc: trawl_index::testing::function_doc(
            repo,
            &format!("src/m{i}.py"),
            &format!("handler_{i}"),
            text,
            (1, 3),
        ),
        vector: Some(VectorData::F32(unit(i))),
        prose: None,
    }
}

fn corpus(n: u64) -> Vec<LiveDoc> {
    (0..n)
        .map(|i| {
            let repo = if i % 2 == 0 {
                "github.com/a/even"
            } else {
                "github.com/b/odd"
            };
            live(
                i,
                repo,
                &format!("def handler_{i}(request):\n    return respond({i})\n"),
            )
        })
        .collect()
}

fn space() -> Space {
    Space {
        model: "test".into(),
        dims: DIMS as u32,
        dtype: Dtype::Float,
    }
}

/// Two shards, built on one thread.
fn two_shards() -> BuildOptions {
    BuildOptions {
        shards: trawl_core::config::Shards::Fixed(2),
        threads: 1,
        ..BuildOptions::default()
    }
}

/// Builds a generation of `docs` into `store` and opens it through `cache`.
async fn build_and_open(
    store: &Store,
    docs: Vec<LiveDoc>,
    opts: &BuildOptions,
    cache: &std::path::Path,
) -> Generation {
    build(store, docs, Some(space()), opts, &Quiet)
        .await
        .unwrap();
    Generation::open_current(store, cache)
        .await
        .unwrap()
        .unwrap()
}

fn files_under(dir: &std::path::Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn vector_search(
    g: &Generation,
    q: &[f32],
    req: &SearchRequest,
    access: &Access,
) -> Vec<(u32, u32, f64)> {
    let filter = Filter::new(req, access.clone()).unwrap();
    let v = VectorData::F32(q.to_vec());
    search::candidates(g, req, 10, filter, Some(&v), &QueryConfig::default())
        .unwrap()
        .candidates
}

#[tokio::test]
async fn a_remote_store_is_cached_new_generations_download_only_new_segments_and_old_ones_are_pruned()
 {
    let store = Store::memory();
    let cache = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(4),
        threads: 1,
        ..BuildOptions::default()
    };
    let docs = corpus(200);
    let g1 = build_and_open(&store, docs.clone(), &opts, cache.path()).await;
    assert_eq!(g1.live_docs(), 200);
    assert_eq!(g1.load.segments_downloaded, 4);
    let first_bytes = g1.load.bytes_downloaded;
    assert!(first_bytes > 0);
    // Opening again downloads nothing.
    let again = Generation::open_current(&store, cache.path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.load.segments_downloaded, 0);

    // One doc changes, one is deleted: delta segments and tombstones; unchanged shards reuse
    // their segments, already cached.
    let mut next = docs.clone();
    next.retain(|d| d.doc.symbol.as_deref() != Some("handler_7"));
    next[0] = live(
        0,
        "github.com/a/even",
        "def handler_0(request):\n    return rewritten()\n",
    );
    let g2 = build_and_open(&store, next, &opts, cache.path()).await;
    assert_eq!(g2.number, trawl_core::ids::Generation(2));
    assert_eq!(g2.live_docs(), 199);
    assert!(g2.load.segments_downloaded <= 2, "{:?}", g2.load);
    assert!(g2.load.bytes_downloaded < first_bytes);
    // The deleted doc is never found, even by its own vector; the rewritten one is.
    let req = SearchRequest {
        mode: Mode::Vector,
        ..SearchRequest::new("x")
    };
    let hits = vector_search(&g2, &unit(7), &req, &Access::all());
    let symbols: HashSet<String> = hits
        .iter()
        .map(|&(s, o, _)| {
            g2.segments[s as usize].docs[o as usize]
                .symbol
                .clone()
                .unwrap()
        })
        .collect();
    assert!(!symbols.contains("handler_7"));
    let mut lex = SearchRequest::new("rewritten");
    lex.mode = Mode::Lexical;
    let ranked = search::candidates(
        &g2,
        &lex,
        5,
        Filter::new(&lex, Access::all()).unwrap(),
        None,
        &QueryConfig::default(),
    )
    .unwrap();
    let top = &ranked.candidates[0];
    assert_eq!(
        g2.segments[top.0 as usize].docs[top.1 as usize]
            .symbol
            .as_deref(),
        Some("handler_0")
    );

    // A full rebuild writes all-new segments; pruning keeps what the served generation uses
    // and removes the rest.
    let full = BuildOptions {
        full: true,
        ..opts.clone()
    };
    let g3 = build_and_open(&store, corpus(200), &full, cache.path()).await;
    assert_eq!(g3.load.segments_downloaded, 4);
    let before = files_under(cache.path());
    let removed = crate::index::prune_cache(cache.path(), &[&g3]);
    assert!(removed >= 4, "removed {removed}");
    assert!(files_under(cache.path()) < before);
    let reopened = Generation::open_current(&store, cache.path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reopened.load.segments_downloaded, 0, "g3's segments stayed");
}

#[tokio::test]
async fn a_cached_segment_is_trusted_by_its_content_not_its_directory_name() {
    // Two stores whose first generations have the same directory names (a store recreated,
    // or restored from a backup) share one query node's cache.
    let cache = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(2),
        threads: 1,
        ..BuildOptions::default()
    };
    let old = Store::memory();
    let g_old = build_and_open(&old, corpus(40), &opts, cache.path()).await;
    let new = Store::memory();
    let mut docs = corpus(40);
    docs.truncate(25);
    let g_new = build_and_open(&new, docs, &opts, cache.path()).await;
    assert_eq!(g_old.number, g_new.number, "same number, same directories");
    assert_eq!(
        g_new.live_docs(),
        25,
        "the new store's docs, not the cached ones"
    );
    assert!(g_new.load.segments_downloaded > 0);

    // A manifest changed under a number CURRENT already names is refused, not served.
    let mut m = g_new.manifest.clone();
    m.created_at = "2000-01-01T00:00:00Z".into();
    new.put_json(&trawl_index::generation::manifest_key(m.generation), &m)
        .await
        .unwrap();
    let err = Generation::open_current(&new, cache.path())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not the one index/CURRENT"),
        "{err}"
    );
}

#[tokio::test]
async fn filters_and_access_apply_inside_the_vector_arm_before_top_k() {
    let store = Store::memory();
    let cache = tempfile::tempdir().unwrap();
    let opts = two_shards();
    let g = build_and_open(&store, corpus(400), &opts, cache.path()).await;
    let req = SearchRequest {
        mode: Mode::Vector,
        k: Some(10),
        ..SearchRequest::new("x")
    };
    // Doc 3 lives in the odd repo: an `even`-only caller asking with doc 3's own vector
    // still gets 10 hits, all even.
    let even_only = Access::repos("t", &["github.com/a/*".into()]).unwrap();
    let hits = vector_search(&g, &unit(3), &req, &even_only);
    let hits: Vec<_> = search::finish(&g, &hits, 10, false, &even_only, "");
    assert_eq!(hits.len(), 10);
    assert!(hits.iter().all(|h| h.repo == "github.com/a/even"));
    // Unfiltered, doc 3 is its own best hit.
    let all = vector_search(&g, &unit(3), &req, &Access::all());
    let top = &all[0];
    assert_eq!(
        g.segments[top.0 as usize].docs[top.1 as usize]
            .symbol
            .as_deref(),
        Some("handler_3")
    );
    // A path filter, inside too.
    let mut by_path = req.clone();
    by_path.path = vec!["src/m1*".into()];
    let hits = vector_search(&g, &unit(3), &by_path, &Access::all());
    let hits = search::finish(&g, &hits, 10, false, &Access::all(), "");
    assert_eq!(hits.len(), 10);
    assert!(hits.iter().all(|h| h.path.starts_with("src/m1")));
}

/// A chunk's prose view has a vector of its own beside the chunk's: the vector arm finds the
/// chunk by the nearer of the two, once, in an HNSW walk and in an exact scan alike; off
/// (`query.prose_vectors = false`), only the chunk's own vector counts. A prose vector
/// without the chunk's own is not indexed (the chunk still waits for its vector).
#[tokio::test]
async fn a_chunk_is_found_by_meaning_through_its_prose_view() {
    let store = Store::memory();
    let cache = tempfile::tempdir().unwrap();
    let opts = two_shards();
    let mut docs = corpus(400);
    docs[7].prose = Some(VectorData::F32(unit(1_000)));
    docs[8].vector = None;
    docs[8].prose = Some(VectorData::F32(unit(2_000)));
    let g = build_and_open(&store, docs, &opts, cache.path()).await;
    let req = SearchRequest {
        mode: Mode::Vector,
        k: Some(10),
        ..SearchRequest::new("where is a request handled and answered?")
    };
    let search_with = |q: u64, req: &SearchRequest, prose: bool| -> Vec<String> {
        let params = QueryConfig {
            prose_vectors: prose,
            ..QueryConfig::default()
        };
        let filter = Filter::new(req, Access::all()).unwrap();
        let v = VectorData::F32(unit(q));
        let ranked = search::candidates(&g, req, 10, filter, Some(&v), &params)
            .unwrap()
            .candidates;
        search::finish(&g, &ranked, 10, false, &Access::all(), "")
            .into_iter()
            .map(|h| h.symbol.clone().unwrap_or_default())
            .collect()
    };
    let found = search_with(1_000, &req, true);
    assert_eq!(found[0], "handler_7", "{found:?}");
    assert_eq!(found.len(), 10);
    assert_eq!(
        found.iter().filter(|s| *s == "handler_7").count(),
        1,
        "{found:?}"
    );
    // Its own vector still finds it.
    assert_eq!(search_with(7, &req, true)[0], "handler_7");
    // Off, the prose vector is not searched.
    assert!(!search_with(1_000, &req, false).contains(&"handler_7".to_string()));
    // A filter admitting a few docs is answered by an exact scan: the same.
    let mut few = req.clone();
    few.path = vec!["src/m7*".into()];
    let found = search_with(1_000, &few, true);
    assert_eq!(found[0], "handler_7", "{found:?}");
    assert_eq!(found.iter().filter(|s| *s == "handler_7").count(), 1);
    // No vector of its own: its prose vector was not indexed.
    assert!(!search_with(2_000, &req, true).contains(&"handler_8".to_string()));
}

fn doc_at(path: &str, kind: &str, symbol: &str, text: &str, lines: (u32, u32)) -> LiveDoc {
    let mut doc = trawl_index::testing::function_doc("github.com/a/svc", path, symbol, text, lines);
    doc.kind = kind.parse().unwrap();
    doc.chunk_id = trawl_core::hash::chunk_id(&doc.repo_id, path, kind, symbol, 0);
    LiveDoc {
        doc,
        vector: Some(VectorData::F32(unit(
            u64::from(lines.0) + path.len() as u64,
        ))),
        prose: None,
    }
}

async fn generation_of(docs: Vec<LiveDoc>) -> (Generation, tempfile::TempDir) {
    generation_in_shards(docs, 1).await
}

async fn generation_in_shards(docs: Vec<LiveDoc>, shards: u32) -> (Generation, tempfile::TempDir) {
    let store = Store::memory();
    let cache = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(shards),
        threads: 1,
        ..BuildOptions::default()
    };
    let g = build_and_open(&store, docs, &opts, cache.path()).await;
    (g, cache)
}

fn top_paths(g: &Generation, query: &str, params: &QueryConfig) -> Vec<(String, u32, u32)> {
    top_paths_in(g, query, params, Mode::Lexical)
}

/// The first five results for `query` searched in `mode` (no query vector).
fn top_hits_in(g: &Generation, query: &str, params: &QueryConfig, mode: Mode) -> Vec<Hit> {
    let mut req = SearchRequest::new(query);
    req.mode = mode;
    let ranked = search::candidates(
        g,
        &req,
        5,
        Filter::new(&req, Access::all()).unwrap(),
        None,
        params,
    )
    .unwrap();
    search::finish(g, &ranked.candidates, 5, false, &Access::all(), query)
}

/// The first five results' places for `query` searched in `mode` (no query vector).
fn top_paths_in(
    g: &Generation,
    query: &str,
    params: &QueryConfig,
    mode: Mode,
) -> Vec<(String, u32, u32)> {
    top_hits_in(g, query, params, mode)
        .into_iter()
        .map(|h| (h.chunk.path, h.chunk.start_line, h.chunk.end_line))
        .collect()
}

#[tokio::test]
async fn a_pasted_error_finds_the_format_string_that_produced_it_before_the_test_that_asserts_it() {
    let (g, _cache) = generation_of(vec![
        doc_at(
            "server_test.go",
            "function",
            "TestListenPort",
            "func TestListenPort(t *testing.T) {\n\terr := Listen(70000)\n\tassert.EqualError(t, err, \"invalid port 70000: must be between 1 and 65535\")\n}",
            (10, 14),
        ),
        doc_at(
            "server.go",
            "function",
            "Listen",
            "func Listen(p int) error {\n\tif p < 1 || p > 65535 {\n\t\treturn fmt.Errorf(\"invalid port %d: must be between %d and %d\", p, 1, 65535)\n\t}\n\treturn serve(p)\n}",
            (20, 26),
        ),
        doc_at(
            "server.go",
            "function",
            "serve",
            "func serve(p int) error {\n\t// the port must be open\n\treturn nil\n}",
            (30, 33),
        ),
    ])
    .await;
    let query = "invalid port 70000: must be between 1 and 65535";
    let top = top_paths(&g, query, &QueryConfig::default());
    assert_eq!(top[0], ("server.go".to_owned(), 20, 26), "{top:?}");
    // Without the message match and the role prior the test, which repeats the message
    // verbatim, comes first: the two changes are what put the code on top.
    let naive = crate::eval::naive(&QueryConfig::default());
    let top = top_paths(&g, query, &naive);
    assert_eq!(top[0].0, "server_test.go", "{top:?}");
}

#[tokio::test]
async fn a_question_is_answered_first_by_the_method_that_does_it_not_its_class() {
    let class = doc_at(
        "src/click/core.py",
        "class",
        "Group",
        "class Group(Command):\n    \"\"\"A group invokes its subcommands. In chain mode every subcommand is\n    invoked in a chain, one after another.\"\"\"",
        (10, 13),
    );
    // The question's vector is nearest the class's, as its words are: both arms put the
    // class first.
    let Some(VectorData::F32(near)) = class.vector.clone() else {
        unreachable!("doc_at gives every doc a vector")
    };
    let (g, _cache) = generation_of(vec![
        class,
        doc_at(
            "src/click/core.py",
            "method",
            "Group.invoke",
            "def invoke(self, ctx):\n    rv = []\n    for name in ctx.protected_args:\n        rv.append(self.get_command(ctx, name).invoke(ctx))  # chain\n    return rv",
            (40, 45),
        ),
    ])
    .await;
    let first = |query: &str, params: &QueryConfig| {
        let req = SearchRequest::new(query);
        let filter = Filter::new(&req, Access::all()).unwrap();
        let v = VectorData::F32(near.clone());
        let ranked = search::candidates(&g, &req, 5, filter, Some(&v), params).unwrap();
        let d = &g.segments[ranked.candidates[0].0 as usize].docs[ranked.candidates[0].1 as usize];
        d.symbol.clone().unwrap_or_default()
    };
    let question = "how does a group invoke its subcommands in a chain?";
    assert_eq!(first(question, &QueryConfig::default()), "Group.invoke");
    let off = QueryConfig {
        acts_first: false,
        ..QueryConfig::default()
    };
    assert_eq!(
        first(question, &off),
        "Group",
        "on its words and vector alone"
    );
    // The same words as a phrase, not a question, keep their order.
    assert_eq!(
        first(
            "group invokes subcommands in chain mode",
            &QueryConfig::default()
        ),
        "Group"
    );
}

#[tokio::test]
async fn the_repositorys_own_code_ranks_before_its_vendored_or_bundled_copy() {
    let code = "function retryDelay(attempt) {\n  return Math.min(1000 * 2 ** attempt, 30000);\n}";
    // The copies' file names match the query too: on words alone they come first.
    let (g, _cache) = generation_of(vec![
        doc_at(
            "dist/retry-delay.min.js",
            "function",
            "retryDelay",
            code,
            (1, 3),
        ),
        doc_at(
            "vendor/retry/delay.js",
            "function",
            "retryDelay",
            code,
            (1, 3),
        ),
        doc_at("lib/backoff.js", "function", "retryDelay", code, (1, 3)),
        doc_at(
            "lib/url.js",
            "function",
            "joinUrl",
            "function joinUrl(a, b) {\n  return a + '/' + b;\n}",
            (1, 3),
        ),
        doc_at(
            "lib/headers.js",
            "function",
            "merge",
            "function merge(a, b) {\n  return Object.assign({}, a, b);\n}",
            (1, 3),
        ),
    ])
    .await;
    let top = top_paths(&g, "retry delay attempt", &QueryConfig::default());
    assert_eq!(top[0].0, "lib/backoff.js", "{top:?}");
    assert!(
        top[1..3].iter().all(|t| t.0 != "lib/backoff.js"),
        "the copies are still found: {top:?}"
    );
    let off = QueryConfig {
        generated_prior: 1.0,
        ..QueryConfig::default()
    };
    let top = top_paths(&g, "retry delay attempt", &off);
    assert_ne!(
        top[0].0, "lib/backoff.js",
        "without the prior a copy wins: {top:?}"
    );
}

/// `doc_at`, in repository `repo`.
fn doc_in(repo: &str, path: &str, symbol: &str, text: &str) -> LiveDoc {
    let mut d = doc_at(path, "function", symbol, text, (1, 3));
    d.doc.repo_id = trawl_core::RepoId::parse(repo).unwrap();
    d.doc.chunk_id = trawl_core::hash::chunk_id(&d.doc.repo_id, path, "function", symbol, 0);
    d
}

#[tokio::test]
async fn a_question_that_names_a_repository_is_answered_from_it() {
    let (g, _cache) = generation_of(vec![
        doc_in(
            "github.com/acme/commander",
            "lib/options.js",
            "parseOptions",
            "function parseOptions(argv) {\n  // parse the flags of a command\n}",
        ),
        doc_in(
            "github.com/acme/cobra",
            "args.go",
            "parseFlags",
            "func parseFlags(args []string) {\n  // parse the flags of a subcommand\n}",
        ),
        doc_in(
            "github.com/acme/click",
            "src/parser.py",
            "parse_args",
            "def parse_args(args):\n    # parse the flags\n    pass",
        ),
    ])
    .await;
    let q = "how does commander parse the flags of a subcommand";
    let off = QueryConfig {
        named_repo_prior: 1.0,
        ..QueryConfig::default()
    };
    assert_eq!(top_paths(&g, q, &off)[0].0, "args.go", "on words alone");
    assert_eq!(
        top_paths(&g, q, &QueryConfig::default())[0].0,
        "lib/options.js"
    );
    // A question that names none keeps the order of its words.
    let q = "how are the flags of a subcommand parsed";
    assert_eq!(top_paths(&g, q, &QueryConfig::default())[0].0, "args.go");
}

#[test]
fn a_repository_is_named_by_a_whole_word_of_the_question() {
    let repos = [
        "github.com/pallets/click",
        "github.com/rust-cli/env_logger",
        "github.com/koajs/koa",
        "github.com/x/y",
    ];
    let named = |q: &str| {
        let mut v: Vec<&str> = rank::named_repositories(q, repos.iter().copied())
            .into_iter()
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        named("EDITOR env var for click.edit"),
        ["github.com/pallets/click"]
    );
    assert!(named("what happens when a user double-clicks the binary").is_empty());
    assert_eq!(
        named("panicked at src/env_logger-0.11.8/src/logger.rs"),
        ["github.com/rust-cli/env_logger"]
    );
    assert_eq!(named("KOA:APPLICATION listen"), ["github.com/koajs/koa"]);
    assert!(
        named("why is y not x").is_empty(),
        "one letter names nothing"
    );
}

#[tokio::test]
async fn a_types_name_finds_its_definition_before_the_blocks_that_implement_it() {
    let (g, _cache) = generation_of(vec![
        doc_at(
            "src/walk.rs",
            "impl",
            "Walker",
            "impl Walker {\n    pub fn new(root: &Path) -> Walker {\n        Walker { root: root.to_owned(), depth: 0 }\n    }\n    pub fn run(&mut self) -> Vec<PathBuf> {\n        walk(&self.root, self.depth)\n    }\n}",
            (20, 28),
        ),
        doc_at(
            "src/walk.rs",
            "impl",
            "Walker",
            "impl Iterator for Walker {\n    type Item = PathBuf;\n    fn next(&mut self) -> Option<PathBuf> { None }\n}",
            (30, 33),
        ),
        doc_at(
            "src/walk.rs",
            "struct",
            "Walker",
            "/// Visits a tree.\npub struct Walker {\n    root: PathBuf,\n    depth: usize,\n}",
            (10, 15),
        ),
    ])
    .await;
    let top: Vec<(u32, u32)> = top_paths_in(&g, "Walker", &QueryConfig::default(), Mode::Hybrid)
        .into_iter()
        .map(|(_, start, end)| (start, end))
        .collect();
    assert_eq!(top.first(), Some(&(10, 15)), "the struct first: {top:?}");
    assert_eq!(top.len(), 3, "the impl blocks follow: {top:?}");
}

#[tokio::test]
async fn a_name_written_with_its_case_finds_that_definition_before_its_namesake() {
    // Go: the exported `Handle` and its unexported helper `handle`, one name apart by case.
    let (g, _cache) = generation_of(vec![
        doc_at(
            "routergroup.go",
            "method",
            "RouterGroup.handle",
            "func (group *RouterGroup) handle(httpMethod, relativePath string, handlers HandlersChain) IRoutes {\n\tabsolutePath := group.calculateAbsolutePath(relativePath)\n\treturn group.returnObj()\n}",
            (86, 91),
        ),
        doc_at(
            "routergroup.go",
            "method",
            "RouterGroup.Handle",
            "// Handle registers a new request handle and middleware with the given path and method.\nfunc (group *RouterGroup) Handle(httpMethod, relativePath string, handlers ...HandlerFunc) IRoutes {\n\treturn group.handle(httpMethod, relativePath, handlers)\n}",
            (93, 108),
        ),
    ])
    .await;
    // Both arms, as a search with the query embedded runs them.
    let query = VectorData::F32(unit(3));
    let first = |q: &str| {
        let req = SearchRequest::new(q);
        let ranked = search::candidates(
            &g,
            &req,
            5,
            Filter::new(&req, Access::all()).unwrap(),
            Some(&query),
            &QueryConfig::default(),
        )
        .unwrap();
        search::finish(&g, &ranked.candidates, 5, false, &Access::all(), "")
            .first()
            .map(|h| h.chunk.start_line)
    };
    assert_eq!(first("RouterGroup.Handle"), Some(93));
    assert_eq!(first("RouterGroup.handle"), Some(86));
    assert_eq!(first("RouterGroup::handle()"), Some(86));
    // A Go method as Go's stack traces print it: with its receiver, and with its package.
    assert_eq!(first("(*RouterGroup).handle"), Some(86));
    assert_eq!(first("(*RouterGroup).Handle"), Some(93));
    assert_eq!(
        first("github.com/gin-gonic/gin.(*RouterGroup).handle(...)"),
        Some(86)
    );
}

/// Module code at lines 10.. with `text` and `members`: what [`search::cite_member`] reads.
fn module_code(path: &str, text: &str, members: &[&str]) -> trawl_index::docs::DocRow {
    let n = text.lines().count() as u32;
    let mut d = doc_at(path, "module_code", "", text, (10, 9 + n)).doc;
    d.symbol = None;
    d.qualified_name = None;
    d.members = members.iter().map(|m| (*m).to_owned()).collect();
    d
}

#[test]
fn a_constant_found_by_name_cites_its_own_lines() {
    // (path, text at line 10, members, the name asked, the lines cited)
    type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a str, (u32, u32));
    let cases: &[Case] = &[
        (
            "log.go",
            "import \"fmt\"\n\nconst (\n\t// PanicLevel is the highest.\n\tPanicLevel Level = iota\n\tFatalLevel\n)\n\n// AllLevels exposing all levels.\nvar AllLevels = []Level{\n\tPanicLevel,\n\tFatalLevel,\n}\n\nvar x = 1",
            &["PanicLevel", "FatalLevel", "AllLevels"],
            "alllevels",
            (18, 22),
        ),
        (
            "log.go",
            "const (\n\t// PanicLevel is the highest.\n\tPanicLevel Level = iota\n\tFatalLevel\n)",
            &["PanicLevel", "FatalLevel"],
            "fatallevel",
            (13, 13),
        ),
        (
            "log.go",
            "const (\n\t// PanicLevel is the highest.\n\tPanicLevel Level = iota\n\tFatalLevel\n)",
            &["PanicLevel", "FatalLevel"],
            "paniclevel",
            (11, 12),
        ),
        (
            "src/logger.rs",
            "use std::io;\n\n/// The default variable.\n#[doc(alias = \"env\")]\npub(crate) const DEFAULT_FILTER_ENV: &str = \"RUST_LOG\";\nstatic COUNT: AtomicUsize = AtomicUsize::new(0);",
            &["DEFAULT_FILTER_ENV", "COUNT"],
            "default_filter_env",
            (12, 14),
        ),
        (
            "click/_utils.py",
            "import enum\n\n# Sentinel for a flag.\nFLAG_NEEDS_VALUE = object()\nHELP = \"\"\"Show this\nmessage (and exit).\n\"\"\"\nUNSET = None",
            &["FLAG_NEEDS_VALUE", "HELP", "UNSET"],
            "help",
            (14, 16),
        ),
        (
            "lib/codes.js",
            "'use strict';\nexport const STATUS_CODES = {\n  200: 'OK',\n  404: 'Not Found',\n};\nconst MAX_AGE = 60;",
            &["STATUS_CODES", "MAX_AGE"],
            "status_codes",
            (11, 14),
        ),
    ];
    for (path, text, members, key, lines) in cases {
        let d = module_code(path, text, members);
        let c = search::cite_member(&d, key).unwrap_or_else(|| panic!("{path}: {key}"));
        assert_eq!(
            (c.start_line, c.end_line),
            *lines,
            "{path}: {key}\n{}",
            c.text
        );
        assert_eq!(c.kind, "constant");
        let want: Vec<&str> = text.lines().collect();
        assert_eq!(
            c.text,
            want[(lines.0 - 10) as usize..=(lines.1 - 10) as usize].join("\n")
        );
    }
    // A name it does not declare, a name that is only used, and text that does not map
    // line for line onto the span: the whole chunk stays the citation.
    let d = module_code("a.py", "LIMIT = 10\nprint(LIMIT)", &["LIMIT"]);
    assert!(search::cite_member(&d, "other").is_none());
    let d = module_code("a.py", "print(LIMIT)\nLIMIT = 10", &["LIMIT"]);
    assert_eq!(
        search::cite_member(&d, "limit").map(|c| (c.start_line, c.end_line)),
        Some((11, 11))
    );
    let mut d = module_code("a.py", "LIMIT = 10", &["LIMIT"]);
    d.end_line = 30;
    assert!(search::cite_member(&d, "limit").is_none());
}

/// A member of a container that stays one chunk, found by its name, is cited by its own
/// lines: a method, and a container nested in it (a Java static class, a Rust struct in a
/// module, a TypeScript interface in a namespace, a Python inner class) as what it is.
#[test]
fn a_member_of_a_container_that_stays_one_chunk_found_by_name_cites_its_own_lines() {
    // (path, language, kind, text at line 10, members, the name asked, the lines cited, the
    // kind cited)
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a str,
        (u32, u32),
        &'a str,
    );
    let cases: &[Case] = &[
        (
            "click/parser.py",
            "python",
            "class",
            "class _Option:\n    def __init__(self, action):\n        process(action)\n        self.action = action\n\n    @property\n    def takes_value(self) -> bool:\n        return self.action in (\"store\", \"append\")\n\n    def process(self, value, state):\n        if self.action == \"store\":\n\n            state.opts[self.dest] = value\n        return value",
            &["_Option.__init__", "_Option.takes_value", "_Option.process"],
            "_option.process",
            (19, 23),
            "method",
        ),
        (
            "click/parser.py",
            "python",
            "class",
            "class _Option:\n    def __init__(self, action):\n        process(action)\n        self.action = action\n\n    @property\n    def takes_value(self) -> bool:\n        return self.action in (\"store\", \"append\")\n\n    def process(self, value, state):\n        return value",
            &["_Option.__init__", "_Option.takes_value", "_Option.process"],
            "takes_value",
            (15, 17),
            "method",
        ),
        (
            "src/fmt/mod.rs",
            "rust",
            "impl",
            "impl Formatter {\n    /// The default style.\n    pub fn default_level_style<L>(&self, level: L) -> Style\n    where\n        L: Into<Level>,\n    {\n        match level.into() {\n            Level::Error => Style::Red,\n        }\n    }\n\n    fn flush(&self) {}\n}",
            &["Formatter.default_level_style", "Formatter.flush"],
            "formatter.default_level_style",
            (11, 19),
            "method",
        ),
        (
            "src/fmt/mod.rs",
            "rust",
            "impl",
            "impl Formatter {\n    /// The default style.\n    pub fn default_level_style(&self) -> Style {\n        Style::Red\n    }\n\n    fn flush(&self) {}\n}",
            &["Formatter.default_level_style", "Formatter.flush"],
            "flush",
            (16, 16),
            "method",
        ),
        (
            "lib/option.js",
            "javascript",
            "class",
            "class DualOptions {\n  constructor(options) {\n    this.options = options;\n  }\n\n  /**\n   * Did the value come from the option?\n   */\n  valueFromOption(value, option) {\n    if (option.negate) {\n      return value === false;\n    }\n    return true;\n  }\n}",
            &["DualOptions.constructor", "DualOptions.valueFromOption"],
            "valuefromoption",
            (15, 23),
            "method",
        ),
        (
            "hooks.go",
            "go",
            "interface",
            "type Hook interface {\n\t// Levels are the levels it fires for.\n\tLevels() []Level\n\tFire(*Entry) error\n}",
            &["Hook.Levels", "Hook.Fire"],
            "hook.levels",
            (11, 12),
            "method",
        ),
        (
            "src/Outer.java",
            "java",
            "class",
            "class Outer {\n  /** Where a scan stopped. */\n  static final class Inner {\n    int at;\n  }\n\n  void run() {}\n}",
            &["Outer.Inner", "Outer.run"],
            "outer.inner",
            (11, 14),
            "class",
        ),
        (
            "src/net.rs",
            "rust",
            "module",
            "mod wire {\n    /// A byte range.\n    pub(crate) struct Span {\n        start: usize,\n    }\n\n    fn read() {}\n}",
            &["wire.Span", "wire.read"],
            "span",
            (11, 14),
            "struct",
        ),
        (
            "src/api.ts",
            "typescript",
            "namespace",
            "namespace Api {\n  export interface Options {\n    retries: number;\n  }\n  export function call() {}\n}",
            &["Api.Options", "Api.call"],
            "api.options",
            (11, 13),
            "interface",
        ),
        (
            "src/shapes.py",
            "python",
            "class",
            "class Shape:\n    class Meta:\n        ordering = 1\n\n    def area(self):\n        return 0",
            &["Shape.Meta", "Shape.area"],
            "shape.meta",
            (11, 12),
            "class",
        ),
    ];
    for (path, language, kind, text, members, key, lines, cited) in cases {
        let n = text.lines().count() as u32;
        let mut d = doc_at(path, kind, "", text, (10, 9 + n)).doc;
        d.language = (*language).to_owned();
        d.members = members.iter().map(|m| (*m).to_owned()).collect();
        let c = search::cite_member(&d, key).unwrap_or_else(|| panic!("{path}: {key}"));
        assert_eq!(
            (c.start_line, c.end_line),
            *lines,
            "{path}: {key}\n{}",
            c.text
        );
        assert_eq!(c.kind, *cited, "{path}: {key}");
    }
}

#[tokio::test]
async fn a_constant_named_alone_finds_the_module_code_that_declares_it() {
    let mut consts = doc_at(
        "logrus.go",
        "module_code",
        "",
        "import \"fmt\"\n\n// AllLevels exposing all logging levels.\nvar AllLevels = []Level{\n\tPanicLevel,\n\tFatalLevel,\n}",
        (28, 34),
    );
    consts.doc.symbol = None;
    consts.doc.qualified_name = None;
    consts.doc.members = vec!["AllLevels".into()];
    let (g, _cache) = generation_of(vec![
        consts,
        doc_at(
            "hooks.go",
            "method",
            "LevelHooks.Levels",
            "// Levels returns all levels of all hooks, AllLevels when none is set.\nfunc (hooks LevelHooks) Levels() []Level {\n\treturn AllLevels\n}",
            (10, 14),
        ),
        doc_at(
            "entry.go",
            "method",
            "Entry.Levels",
            "func (entry *Entry) Levels() []Level { return AllLevels }",
            (50, 50),
        ),
    ])
    .await;
    // Found by its name, the constant is cited at its own lines, in the module code it
    // sits in.
    let top = top_paths_in(&g, "AllLevels", &QueryConfig::default(), Mode::Hybrid);
    assert_eq!(
        top.first(),
        Some(&("logrus.go".to_owned(), 30, 34)),
        "{top:?}"
    );
    let first = &top_hits_in(&g, "AllLevels", &QueryConfig::default(), Mode::Hybrid)[0];
    assert_eq!(
        (first.chunk.kind.as_str(), first.chunk.symbol.as_deref()),
        ("constant", Some("AllLevels"))
    );
    assert!(first.chunk.text.starts_with("// AllLevels exposing"));
    assert_eq!(
        first
            .context
            .iter()
            .map(|c| (c.relation.as_str(), c.chunk.start_line, c.chunk.end_line))
            .collect::<Vec<_>>(),
        [("container", 28, 34)]
    );
    // `--kind constant` keeps the module code that declares one, and nothing else.
    for (kinds, want) in [
        (vec!["constant"], vec!["logrus.go"]),
        (vec!["Method"], vec!["hooks.go", "entry.go"]),
        (
            vec!["module_code", "method"],
            vec!["logrus.go", "hooks.go", "entry.go"],
        ),
    ] {
        let mut req = SearchRequest::new("AllLevels");
        req.kind = kinds.iter().map(|k| (*k).to_owned()).collect();
        let filter = Filter::new(&req, Access::all()).unwrap();
        let ranked =
            search::candidates(&g, &req, 5, filter, None, &QueryConfig::default()).unwrap();
        let mut got: Vec<String> =
            search::finish(&g, &ranked.candidates, 5, false, &Access::all(), "")
                .into_iter()
                .map(|h| h.chunk.path)
                .collect();
        got.sort();
        let mut want: Vec<String> = want.into_iter().map(str::to_owned).collect();
        want.sort();
        assert_eq!(got, want, "--kind {kinds:?}");
    }
}

#[test]
fn a_misspelt_kind_is_refused_with_the_kinds_there_are() {
    let mut req = SearchRequest::new("parse");
    req.kind = vec!["function".into(), "functon".into()];
    let err = Filter::new(&req, Access::all()).unwrap_err();
    assert!(matches!(err, QueryError::BadRequest(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("\"functon\"") && msg.contains("module_code") && msg.contains("constant"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_language_the_index_does_not_hold_is_refused_with_the_nearest_name() {
    let mut go = doc_at("store.go", "function", "Get", "func Get() {}", (1, 1));
    go.doc.language = "go".into();
    let (g, _cache) = generation_of(vec![
        doc_at("a.py", "function", "get", "def get():\n    pass", (1, 2)),
        go,
    ])
    .await;
    assert_eq!(g.languages(), ["go", "python"]);
    let check = |langs: &[&str], access: Access| {
        let mut req = SearchRequest::new("get");
        req.lang = langs.iter().map(|l| (*l).to_owned()).collect();
        Filter::new(&req, access).unwrap().check_languages(&g)
    };
    // The languages it holds pass, in any letter case.
    check(&[], Access::all()).unwrap();
    check(&["Python", "go"], Access::all()).unwrap();
    for (lang, hint) in [
        ("pyhton", Some("python")),
        ("py", Some("python")),
        ("golang", None),
        ("rust", None),
    ] {
        let err = check(&["go", lang], Access::all()).unwrap_err();
        assert!(matches!(err, QueryError::BadRequest(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("{lang:?}")), "{msg}");
        assert_eq!(
            msg.contains("did you mean"),
            hint.is_some(),
            "{lang}: {msg}"
        );
        if let Some(h) = hint {
            assert!(msg.contains(&format!("did you mean {h:?}")), "{msg}");
        }
        assert!(msg.contains("the index holds go, python"), "{msg}");
    }
    // A caller who may see some repositories only is not told what the others are written in.
    let some = Access::repos("team", &["github.com/other/*".into()]).unwrap();
    let msg = check(&["cobol"], some).unwrap_err().to_string();
    assert!(!msg.contains("the index holds"), "{msg}");
}

#[test]
fn an_impl_counts_as_a_definition_of_its_members_not_of_its_type() {
    let mut small_impl = doc_at(
        "src/walk.rs",
        "impl",
        "Walker",
        "impl Walker {\n    pub fn run(&mut self) {}\n}",
        (20, 22),
    )
    .doc;
    small_impl.members = vec!["Walker.run".into()];
    let strukt = doc_at(
        "src/walk.rs",
        "struct",
        "Walker",
        "pub struct Walker;",
        (1, 1),
    )
    .doc;
    let run = doc_at("src/task.rs", "function", "run", "pub fn run() {}", (1, 1)).doc;
    let counts = |d: &trawl_index::docs::DocRow, key: &str| search::definition_first(d, key) > 0.0;
    for (d, key, expected) in [
        (&small_impl, "walker", false),
        (&strukt, "walker", true),
        (&small_impl, "run", true),
        (&small_impl, "walker.run", true),
        (&run, "run", true),
    ] {
        assert_eq!(
            counts(d, key),
            expected,
            "{} {} for {key:?}",
            d.kind,
            d.path
        );
    }
}

#[tokio::test]
async fn a_definition_written_with_its_keyword_is_found_as_that_kind() {
    let (g, _cache) = generation_of(vec![
        doc_at(
            "src/walk.rs",
            "struct",
            "Walker",
            "pub struct Walker {\n    depth: usize,\n}",
            (1, 3),
        ),
        doc_at(
            "src/walk.rs",
            "impl",
            "Walker",
            "impl Walker {\n    pub fn new() -> Self {\n        Walker { depth: 0 }\n    }\n\n    pub fn deeper(&mut self) -> usize {\n        self.depth += 1;\n        self.depth\n    }\n\n    pub fn reset(&mut self) {\n        self.depth = 0;\n    }\n}",
            (5, 18),
        ),
        doc_at(
            "src/walk.rs",
            "impl",
            "Default for Walker",
            "impl Default for Walker {\n    fn default() -> Self { Walker::new() }\n}",
            (20, 22),
        ),
        doc_at(
            "src/walk.rs",
            "impl",
            "Iterator for Walker",
            "impl Iterator for Walker {\n    type Item = u8;\n}",
            (11, 13),
        ),
        doc_at(
            "src/run.rs",
            "function",
            "walker",
            "pub fn walker() -> Walker {\n    Walker::new()\n}",
            (1, 3),
        ),
        // What mentions the words more often than the definitions do.
        doc_at(
            "docs/walk.md",
            "section",
            "",
            "# impl Walker, struct Walker\nThe struct Walker and the impl Walker: each impl Walker \
             method walks what the struct Walker holds; fn walker() makes a Walker.",
            (1, 2),
        ),
        doc_at(
            "src/debug.rs",
            "function",
            "describe",
            "// impl Walker, impl Iterator for Walker, struct Walker, fn walker\nfn describe() {}",
            (1, 2),
        ),
        doc_at(
            "tests/walk.rs",
            "function",
            "walks",
            "// impl Walker: struct Walker walks; fn walker\nfn walks() {\n    let w: Walker = walker(); // impl Walker\n}",
            (1, 4),
        ),
    ])
    .await;
    let first = |q: &str| {
        let top = &top_hits_in(&g, q, &QueryConfig::default(), Mode::Hybrid)[0];
        (top.chunk.path.clone(), top.chunk.start_line)
    };
    // A name alone: the type's definition before its impl blocks, as before.
    assert_eq!(first("Walker"), ("src/walk.rs".to_owned(), 1));
    assert_eq!(first("struct Walker"), ("src/walk.rs".to_owned(), 1));
    assert_eq!(first("pub struct Walker {"), ("src/walk.rs".to_owned(), 1));
    // The keyword asks for the impl block, or the trait's impl, or the function.
    assert_eq!(first("impl Walker"), ("src/walk.rs".to_owned(), 5));
    assert_eq!(
        first("impl Iterator for Walker"),
        ("src/walk.rs".to_owned(), 11)
    );
    assert_eq!(first("fn walker()"), ("src/run.rs".to_owned(), 1));
}

#[tokio::test]
async fn a_table_of_contents_gives_its_place_to_the_definition_inside_it() {
    let toc = "module shapes: class Circle, def area(radius), def perimeter(radius), def \
               describe(shape); area perimeter radius circle";
    let (g, _cache) = generation_of(vec![
        doc_at("shapes.py", "toc", "shapes", toc, (1, 300)),
        doc_at(
            "shapes.py",
            "function",
            "area",
            "def area(radius):\n    \"\"\"The area of a circle of this radius.\"\"\"\n    return 3.14159 * radius * radius",
            (40, 42),
        ),
        doc_at(
            "other.py",
            "function",
            "unrelated",
            "def unrelated():\n    return 1",
            (1, 2),
        ),
    ])
    .await;
    let top = top_paths(&g, "area of a circle radius", &QueryConfig::default());
    assert_eq!(top[0], ("shapes.py".to_owned(), 40, 42), "{top:?}");
    assert!(
        !top.iter().any(|t| t.1 == 1 && t.2 == 300),
        "the whole-file table of contents is not cited: {top:?}"
    );
    let off = QueryConfig {
        narrow: false,
        wide_prior: 1.0,
        ..QueryConfig::default()
    };
    let top = top_paths(&g, "area of a circle radius", &off);
    assert!(top.iter().any(|t| t.1 == 1 && t.2 == 300), "{top:?}");
}

/// Lexical scores by chunk id, for `query` in lexical mode as `access` sees it.
fn lexical_scores(g: &Generation, query: &str, access: &Access) -> Vec<(String, f64)> {
    let mut req = SearchRequest::new(query);
    req.mode = Mode::Lexical;
    let ranked = search::candidates(
        g,
        &req,
        50,
        Filter::new(&req, access.clone()).unwrap(),
        None,
        &QueryConfig::default(),
    )
    .unwrap();
    let mut out: Vec<(String, f64)> = ranked
        .candidates
        .iter()
        .map(|&(s, o, score)| {
            let id = g.segments[s as usize].docs[o as usize].chunk_id.to_string();
            (id, score)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn assert_same_scores(query: &str, a: &[(String, f64)], b: &[(String, f64)]) {
    assert_eq!(a.len(), b.len(), "{query}");
    for ((id_a, s_a), (id_b, s_b)) in a.iter().zip(b) {
        assert_eq!(id_a, id_b, "{query}");
        assert!((s_a - s_b).abs() < 1e-5, "{query}: {id_a} {s_a} != {s_b}");
    }
}

/// Words spread unevenly: `retry` is rare, `request` common, and each repository has its own.
fn skewed_corpus() -> Vec<LiveDoc> {
    (0..60u64)
        .map(|i| {
            let repo = if i % 3 == 0 {
                "github.com/a/even"
            } else {
                "github.com/b/odd"
            };
            let mut body = format!("def handler_{i}(request):\n    return respond(request)\n");
            if i % 7 == 0 {
                body.push_str("    # retry the request on a timeout\n");
            }
            if i % 3 == 0 {
                body.push_str("    # parse the header of the reply\n");
            }
            if i % 2 == 0 {
                body.push_str(&"    log(request)\n".repeat((i % 5) as usize));
            }
            live(i, repo, &body)
        })
        .collect()
}

#[tokio::test]
async fn a_chunks_lexical_score_does_not_depend_on_the_shard_it_was_built_into() {
    let (one, _one) = generation_in_shards(skewed_corpus(), 1).await;
    let (many, _many) = generation_in_shards(skewed_corpus(), 5).await;
    assert_eq!(many.segments.len(), 5);
    for query in [
        "retry the request",
        "parse reply header",
        "log request handler_12",
    ] {
        let (a, b) = (
            lexical_scores(&one, query, &Access::all()),
            lexical_scores(&many, query, &Access::all()),
        );
        assert!(a.len() > 5, "{query}: {a:?}");
        assert_same_scores(query, &a, &b);
    }

    // A token that sees one repository scores as an index of that repository alone would,
    // however the shards mix it with the hidden one.
    let even_docs: Vec<LiveDoc> = skewed_corpus()
        .into_iter()
        .filter(|d| d.doc.repo_id.as_str() == "github.com/a/even")
        .collect();
    let (alone, _alone) = generation_of(even_docs).await;
    let even_only = Access::repos("t", &["github.com/a/*".into()]).unwrap();
    for query in ["retry the request", "parse reply header"] {
        let (a, b) = (
            lexical_scores(&alone, query, &Access::all()),
            lexical_scores(&many, query, &even_only),
        );
        assert!(!a.is_empty(), "{query}");
        assert_same_scores(query, &a, &b);
    }
}

#[tokio::test]
async fn equal_scores_rank_the_same_however_the_chunks_are_sharded() {
    // Twelve chunks that score exactly alike in both arms: same words, same vector.
    let twins = || -> Vec<LiveDoc> {
        (0..12u64)
            .map(|i| {
                let repo = if i % 2 == 0 {
                    "github.com/a/even"
                } else {
                    "github.com/b/odd"
                };
                let mut d = live(
                    i,
                    repo,
                    "def handler(request):\n    return respond(request)\n",
                );
                d.vector = Some(VectorData::F32(unit(7)));
                d
            })
            .collect()
    };
    let order = |g: &Generation, mode: Mode| -> Vec<String> {
        let mut req = SearchRequest::new("respond to the request");
        req.mode = mode;
        let query = VectorData::F32(unit(7));
        let ranked = search::candidates(
            g,
            &req,
            12,
            Filter::new(&req, Access::all()).unwrap(),
            Some(&query),
            &QueryConfig::default(),
        )
        .unwrap();
        ranked
            .candidates
            .iter()
            .map(|&(s, o, _)| g.segments[s as usize].docs[o as usize].chunk_id.to_string())
            .collect()
    };
    let (one, _one) = generation_in_shards(twins(), 1).await;
    let (many, _many) = generation_in_shards(twins(), 4).await;
    assert_eq!(many.segments.len(), 4);
    for mode in [Mode::Hybrid, Mode::Lexical, Mode::Vector] {
        let (a, b) = (order(&one, mode), order(&many, mode));
        assert_eq!(a.len(), 12, "{mode:?}");
        assert_eq!(a, b, "{mode:?}: the order follows the sharding");
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(a, sorted, "{mode:?}: ties are in chunk id order");
    }
}

#[tokio::test]
async fn the_learned_ranking_reorders_a_questions_candidates_and_leaves_other_queries_alone() {
    let (g, _cache) = generation_of(vec![
        doc_at(
            "a.py",
            "function",
            "fetch_rows",
            "def fetch_rows(cursor):\n    # how rows are computed\n    return cursor.all()",
            (1, 3),
        ),
        doc_at(
            "b.py",
            "function",
            "next_delay",
            "def next_delay(attempt):\n    # retry backoff with jitter\n    return min(cap, base * 2 ** attempt) * random()",
            (10, 12),
        ),
        doc_at(
            "c.py",
            "function",
            "unrelated",
            "def unrelated():\n    return 1",
            (20, 21),
        ),
    ])
    .await;
    // The question's vector is a.py's own: with the vector arm weighted up, a.py leads the
    // fused order, though b.py holds the question's rare words.
    let near_a = VectorData::F32(unit(1 + "a.py".len() as u64));
    let rank = |query: &str, params: &QueryConfig| {
        let req = SearchRequest::new(query);
        search::candidates(
            &g,
            &req,
            5,
            Filter::new(&req, Access::all()).unwrap(),
            Some(&near_a),
            params,
        )
        .unwrap()
    };
    let paths = |r: &search::Ranked| -> Vec<String> {
        search::finish(&g, &r.candidates, 5, false, &Access::all(), "")
            .into_iter()
            .map(|h| h.chunk.path)
            .collect()
    };
    let fused = QueryConfig {
        weight_vector: 5.0,
        ranker_pool: 0,
        ..QueryConfig::default()
    };
    let question = "how is the retry backoff jitter computed";
    let off = rank(question, &fused);
    assert_eq!(paths(&off)[0], "a.py");
    assert!(off.pool.is_empty(), "no pool when the ranking is off");
    let mut words_only = [0.0; crate::learned::N];
    words_only[6] = 1.0;
    assert_eq!(trawl_core::config::RankerWeights::NAMES[6], "coverage");
    let learned = QueryConfig {
        ranker_pool: 50,
        ranker: trawl_core::config::RankerWeights::from_array(words_only),
        ..fused.clone()
    };
    let on = rank(question, &learned);
    assert_eq!(paths(&on)[0], "b.py", "{:?}", paths(&on));
    assert_eq!(on.pool.len(), on.candidates.len());
    assert!(
        on.candidates.windows(2).all(|w| w[0].2 >= w[1].2),
        "scores still fall down the list: {:?}",
        on.candidates
    );
    // The pool is in fused order with each candidate's features: b.py covers more of the
    // question than a.py.
    let coverage = |path: &str| {
        on.pool
            .iter()
            .find(|(c, _)| g.segments[c.0 as usize].docs[c.1 as usize].path == path)
            .unwrap()
            .1[6]
    };
    assert!(coverage("b.py") > coverage("a.py"));
    // An identifier is not a question in words: no pool, the fused order stands.
    let ident = rank("fetch_rows", &learned);
    assert!(ident.pool.is_empty());
    assert_eq!(paths(&ident)[0], "a.py");
}

#[tokio::test]
async fn a_longer_page_begins_with_the_shorter_pages_answers() {
    // Sixty chunks sharing the query's words unevenly, each with its own vector: each arm's
    // order differs, so what reaches a deeper cut of either arm can change the fused order.
    let words = [
        "retry", "request", "backoff", "timeout", "respond", "handler",
    ];
    let docs: Vec<LiveDoc> = (0..60u64)
        .map(|i| {
            let text: Vec<&str> = (0..6)
                .filter(|b| (i * 7 + b * 3) % (b + 2) == 0)
                .map(|b| words[b as usize])
                .collect();
            live(
                i,
                "github.com/a/app",
                &format!(
                    "def handler_{i}():\n    # {}\n    return {i}\n",
                    text.join(" ")
                ),
            )
        })
        .collect();
    let (g, _cache) = generation_of(docs).await;
    let params = QueryConfig {
        candidates: 4,
        ..QueryConfig::default()
    };
    let query = VectorData::F32(unit(3));
    for question in [
        "how does the handler retry a request after a timeout",
        "retry backoff",
    ] {
        let page = |k: usize| -> Vec<String> {
            let req = SearchRequest::new(question);
            let ranked = search::candidates(
                &g,
                &req,
                k,
                Filter::new(&req, Access::all()).unwrap(),
                Some(&query),
                &params,
            )
            .unwrap();
            search::finish(&g, &ranked.candidates, k, false, &Access::all(), "")
                .into_iter()
                .map(|h| h.chunk.path)
                .collect()
        };
        let longest = page(20);
        assert_eq!(longest.len(), 20, "{question}: a deep page is filled");
        for k in 1..20 {
            assert_eq!(
                page(k),
                longest[..k],
                "{question}: the first {k} answers change when more are asked for"
            );
        }
    }
}

#[test]
fn a_trait_impl_is_found_with_or_without_the_traits_arguments() {
    let keys = crate::index::symbol_keys(
        Some("From<std::io::Error> for Error"),
        Some("From<std::io::Error> for Error"),
    );
    for (typed, found) in [
        ("From<std::io::Error> for Error", true),
        ("From for Error", true),
        ("from<std.io.error> for error", true),
        ("From<std::fmt::Error> for Error", false),
    ] {
        assert_eq!(
            keys.contains(&crate::index::normalize_symbol(typed)),
            found,
            "{typed}: {keys:?}"
        );
    }
}
