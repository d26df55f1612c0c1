//! A generation opened for search. Segments are read in place from a local store, or pulled
//! from a remote one into a local cache first (segment directories are immutable and shared
//! between generations, so a new generation only downloads its new segments).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use trawl_core::store::Store;
use trawl_core::{ChunkId, ChunkKind};
use trawl_index::docs::DocStore;
use trawl_index::generation::{self, Manifest, SegmentEntry, Tombstones};
use trawl_index::segment;

use crate::QueryError;

/// One segment, open.
pub struct Segment {
    pub dir: String,
    /// Docs by ord, each decoded the first time it is read.
    pub docs: DocStore,
    /// False for tombstoned ords.
    pub alive: Vec<bool>,
    /// No ord is tombstoned.
    pub all_alive: bool,
    /// Each doc's repository, as an index into `repos`.
    pub repo_of: Vec<u32>,
    pub repos: Vec<String>,
    pub vectors: Option<usearch::Index>,
    /// Whether `vectors` may hold prose views' vectors ([`segment::prose_key`]): without
    /// any, every key is a doc's own and no search needs to tell them apart.
    pub prose_vectors: bool,
    pub text: tantivy::Index,
    pub reader: tantivy::IndexReader,
    /// Lowercased symbols and qualified names → ords of definitions.
    pub symbols: HashMap<String, Vec<u32>>,
    /// The languages of its docs, from the text index's terms (tombstoned docs' included).
    pub languages: Vec<String>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("dir", &self.dir)
            .field("docs", &self.docs.len())
            .finish_non_exhaustive()
    }
}

/// The forms under which a symbol is looked up: the name, the qualified name, and the
/// qualified name with `.`/`::`/`#`/`->` separators made one (`a.b` = `a::b`); a name with
/// generic arguments also without them.
pub fn symbol_keys(symbol: Option<&str>, qualified: Option<&str>) -> Vec<String> {
    let mut keys = Vec::new();
    for s in [symbol, qualified].into_iter().flatten() {
        let s = s.trim().to_lowercase();
        if s.is_empty() {
            continue;
        }
        keys.push(normalize_symbol(&s));
        if s.contains('<') {
            // `From<io::Error> for Error` is found by `From for Error` too.
            let bare = trawl_core::words::strip_generics(&s);
            keys.push(normalize_symbol(&bare));
            keys.push(bare);
        }
        keys.push(s);
    }
    keys.sort();
    keys.dedup();
    keys
}

/// `a::b`, `a#b`, `a->b` → `a.b`; a trailing `()` dropped; lowercased.
pub fn normalize_symbol(s: &str) -> String {
    spell_symbol(s).to_lowercase()
}

/// A symbol as written, with one separator: `Walker::run()` → `Walker.run`. A Go method
/// written with its receiver, as Go prints it in a stack trace (`(*Engine).ServeHTTP`,
/// `github.com/gin-gonic/gin.(*Engine).ServeHTTP`), is `Engine.ServeHTTP`.
pub fn spell_symbol(s: &str) -> String {
    let mut s = s.trim().trim_end_matches("()");
    if let Some(at) = s.find("(*") {
        s = &s[at..];
        // A trace's frame ends with the call's arguments: `.ServeHTTP(0xc0001, …)`.
        let name = s.rfind(").").map_or(0, |i| i + 2);
        if let Some(args) = s[name..].find('(') {
            s = &s[..name + args];
        }
    }
    let s: String = if s.starts_with('(') {
        s.chars()
            .filter(|c| !matches!(c, '(' | ')' | '*'))
            .collect()
    } else {
        s.to_owned()
    };
    s.replace("::", ".").replace("->", ".").replace('#', ".")
}

/// A query that names one definition: the name as written (`Walker::run`, `ExecuteC`), and
/// the kinds its declaration keyword asks for, if it was written with one.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub name: String,
    pub kinds: &'static [ChunkKind],
}

/// The kinds a declaration keyword declares (`class`, `def`, `fn`, `func`, `struct`, …),
/// the kind it writes first and then those a search for it also finds.
pub(crate) fn declared_kinds(keyword: &str) -> Option<&'static [ChunkKind]> {
    use ChunkKind as K;
    Some(match keyword {
        "def" | "fn" | "func" | "function" | "fun" | "sub" | "proc" => &[K::Function, K::Method],
        "class" | "record" | "object" => &[K::Class],
        "struct" | "union" => &[K::Struct],
        "enum" => &[K::Enum],
        "interface" | "protocol" => &[K::Interface],
        "trait" => &[K::Trait],
        "impl" => &[K::Impl],
        "type" | "typedef" => &[K::Type, K::Struct, K::Interface],
        "mod" | "module" => &[K::Module],
        "namespace" | "package" => &[K::Namespace, K::Module],
        "macro_rules!" | "macro" => &[K::Macro],
        "const" | "static" | "var" | "let" => &[K::Constant],
        _ => return None,
    })
}

/// The definition a query names, if it names one: one word (`ExecuteC`, `Walker::run`,
/// `(*Command).ExecuteC`), or a declaration as code writes it — modifiers, a keyword and the
/// name (`class Context`, `pub fn parse_spec`, `export function suggestSimilar`, `impl
/// Builder`), with what follows the name left out (`def get(self, key)`, `fn run() {`), and a
/// Go method with its receiver (`func (c *Command) ExecuteC`, named `(*Command).ExecuteC`).
pub fn named_definition(query: &str) -> Option<Named> {
    const MODIFIERS: &[&str] = &[
        "pub",
        "async",
        "export",
        "default",
        "static",
        "abstract",
        "public",
        "private",
        "protected",
        "internal",
        "final",
        "unsafe",
        "extern",
        "declare",
        "override",
        "inline",
        "virtual",
        "const",
    ];
    let q = query.trim();
    if q.is_empty() {
        return None;
    }
    if !q.contains(char::is_whitespace) {
        return Some(Named {
            name: q.to_owned(),
            kinds: &[],
        });
    }
    let words: Vec<&str> = q.split_whitespace().collect();
    // The keyword is the last word before the name that declares something; what comes
    // before it must be modifiers (`pub`, `pub(crate)`, `export default`).
    let at = words.iter().position(|w| declared_kinds(w).is_some())?;
    let modifier = |w: &&str| MODIFIERS.contains(w) || (w.starts_with("pub(") && w.ends_with(')'));
    if !words[..at].iter().all(modifier) {
        return None;
    }
    let mut keyword = words[at];
    let mut rest = &words[at + 1..];
    // `pub const fn`, `export async function`, `static def`: the last keyword counts.
    while let Some((w, more)) = rest.split_first() {
        if declared_kinds(w).is_some() && !more.is_empty() {
            keyword = w;
            rest = more;
        } else if modifier(w) && !more.is_empty() {
            rest = more;
        } else {
            break;
        }
    }
    let kinds = declared_kinds(keyword)?;
    // A Go receiver: `(c *Command)` or `(Command)` before the name.
    let mut receiver = None;
    if keyword == "func"
        && rest.first().is_some_and(|w| w.starts_with('('))
        && let Some(close) = rest.iter().position(|w| w.ends_with(')'))
    {
        let inside = rest[..=close].join(" ");
        let ty = inside
            .trim_matches(['(', ')'])
            .split_whitespace()
            .last()
            .map(|t| t.trim_start_matches('*').to_owned());
        receiver = ty;
        rest = &rest[close + 1..];
    }
    let first = *rest.first()?;
    // The name ends where its parameters, generics, body or annotation begin.
    let end = first
        .find(['(', '<', '{', ':', '[', '=', ';'])
        .unwrap_or(first.len());
    let name = &first[..end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | ':'))
    {
        return None;
    }
    // What follows the name is its signature (`(self, key)`, `= string`, `{`, `extends
    // Base`); a word there makes the query a sentence, not a declaration.
    let after = &rest[1..];
    let signature = end < first.len()
        || after.first().is_none_or(|w| {
            !w.starts_with(char::is_alphabetic)
                || matches!(*w, "extends" | "implements" | "where")
                || (*w == "for" && keyword == "impl")
        });
    if !signature {
        return None;
    }
    // Keywords that are English words too (`static files`, `class names`, `function
    // names`): with nothing after the name, the name must look like an identifier.
    let english = matches!(
        keyword,
        "static"
            | "const"
            | "var"
            | "let"
            | "type"
            | "module"
            | "package"
            | "interface"
            | "class"
            | "function"
            | "macro"
            | "protocol"
            | "union"
            | "enum"
            | "sub"
            | "proc"
            | "fun"
    );
    let plain_word = name.chars().all(|c| c.is_ascii_lowercase());
    if english && plain_word && end == first.len() && after.is_empty() && words.len() == at + 2 {
        return None;
    }
    // `impl Display for Walker` is named as the chunker names it.
    if keyword == "impl"
        && after.first() == Some(&"for")
        && let Some(ty) = after.get(1)
    {
        let ty = &ty[..ty.find(['<', '{']).unwrap_or(ty.len())];
        return Some(Named {
            name: format!("{name} for {ty}"),
            kinds,
        });
    }
    let name = match receiver {
        Some(ty) if !ty.is_empty() => format!("{ty}.{name}"),
        _ => name.to_owned(),
    };
    Some(Named { name, kinds })
}

/// Kinds that are definitions (an exact symbol match ranks them first).
pub fn is_definition(kind: ChunkKind) -> bool {
    !matches!(
        kind,
        ChunkKind::Toc
            | ChunkKind::Code
            | ChunkKind::Text
            | ChunkKind::Section
            | ChunkKind::ClassSkeleton
            | ChunkKind::Window
    )
}

/// An open generation.
#[derive(Debug)]
pub struct Generation {
    pub number: trawl_core::ids::Generation,
    /// The fingerprint of the manifest's bytes: with `number`, the generation's identity.
    pub manifest_hash: String,
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    /// Chunk id → (segment, ord) of live docs.
    by_id: HashMap<ChunkId, (u32, u32)>,
    /// Callee chunk id → the live docs that call it (the reverse of `call_ids`), computed
    /// when the generation opens, so a new caller in a changed file shows at once on a callee
    /// whose own file did not change.
    callers: HashMap<ChunkId, Vec<(u32, u32)>>,
    /// (repository, path) → the commit docs whose changed lines that file still holds: their
    /// lines, author time and (segment, ord), newest first.
    commits_by_file: HashMap<(trawl_core::ids::RepoId, String), Vec<FileCommit>>,
    /// How long opening took, and how much was downloaded.
    pub load: LoadStats,
}

/// A commit that changed lines of a file, as the file reads now.
#[derive(Clone, Debug)]
pub struct FileCommit {
    pub start_line: u32,
    pub end_line: u32,
    /// RFC 3339.
    pub authored_at: String,
    pub doc: (u32, u32),
}

/// What opening a generation cost.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LoadStats {
    pub seconds: f64,
    pub segments: usize,
    pub segments_downloaded: usize,
    pub bytes_downloaded: u64,
}

impl Generation {
    /// The live doc of a chunk id.
    pub fn doc(&self, id: &ChunkId) -> Option<(u32, u32)> {
        self.by_id.get(id).copied()
    }

    /// The live docs whose resolved calls name `id`, in (segment, ord) order.
    pub fn callers(&self, id: &ChunkId) -> &[(u32, u32)] {
        self.callers.get(id).map_or(&[], Vec::as_slice)
    }

    /// The commits whose changes to `path` of `repo` meet lines `start..=end`, newest first,
    /// each once.
    pub fn commits_touching(
        &self,
        repo: &trawl_core::ids::RepoId,
        path: &str,
        start: u32,
        end: u32,
    ) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::new();
        let Some(list) = self.commits_by_file.get(&(repo.clone(), path.to_owned())) else {
            return out;
        };
        for c in list {
            if c.start_line <= end && start <= c.end_line && !out.contains(&c.doc) {
                out.push(c.doc);
            }
        }
        out
    }

    /// The languages its docs are in, sorted, each once (commit messages have none).
    pub fn languages(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .segments
            .iter()
            .flat_map(|s| s.languages.iter().map(String::as_str))
            .filter(|l| !l.is_empty())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Live docs.
    pub fn live_docs(&self) -> usize {
        self.by_id.len()
    }

    /// Opens the live generation (`CURRENT`), or `None` when there is none.
    pub async fn open_current(store: &Store, cache: &Path) -> Result<Option<Self>, QueryError> {
        match generation::current(store).await? {
            Some((cur, _)) => Ok(Some(Self::open_pointed(store, cache, &cur).await?)),
            None => Ok(None),
        }
    }

    /// Opens the generation `cur` names, checking that its manifest is the one `cur` was
    /// written for (number and content: a number reused by an older store, or a manifest
    /// rewritten in place, is refused rather than served).
    pub async fn open_pointed(
        store: &Store,
        cache: &Path,
        cur: &generation::Current,
    ) -> Result<Self, QueryError> {
        let g = Self::open(store, cache, cur.generation).await?;
        if let Some(want) = &cur.manifest_hash
            && *want != g.manifest_hash
        {
            return Err(QueryError::Index(format!(
                "generation {}'s manifest is not the one index/CURRENT was written for (its content changed): run `trawl compact` to write a new generation",
                cur.generation
            )));
        }
        Ok(g)
    }

    /// Opens generation `number`: downloads what the cache lacks (unless the store is a local
    /// directory, read in place), then opens every segment, in parallel.
    pub async fn open(
        store: &Store,
        cache: &Path,
        number: trawl_core::ids::Generation,
    ) -> Result<Self, QueryError> {
        let t0 = Instant::now();
        let (manifest, manifest_hash) = generation::manifest_with_hash(store, number).await?;
        let root = match store.local_dir() {
            Some(dir) => dir,
            None => cache.to_path_buf(),
        };
        let in_place = store.local_dir().is_some();
        let mut load = LoadStats::default();
        let mut work: Vec<(SegmentEntry, HashSet<u64>)> = Vec::new();
        for shard in &manifest.shards {
            let tomb: Tombstones = match &shard.tombstones {
                Some(key) => store.get_json(key).await?.unwrap_or_default(),
                None => Tombstones::default(),
            };
            for seg in &shard.segments {
                let deleted: HashSet<u64> = tomb
                    .deleted
                    .get(&seg.dir)
                    .map(|v| v.iter().copied().collect())
                    .unwrap_or_default();
                work.push((seg.clone(), deleted));
            }
        }
        load.segments = work.len();
        if !in_place {
            let segs: Vec<SegmentEntry> = work.iter().map(|(s, _)| s.clone()).collect();
            let downloads: Vec<Result<u64, QueryError>> = futures::stream::iter(segs)
                .map(|seg| {
                    let (store, root) = (store.clone(), root.clone());
                    async move { download(&store, &root, &seg).await }
                })
                .buffer_unordered(8)
                .collect()
                .await;
            for d in downloads {
                let bytes = d?;
                if bytes > 0 {
                    load.segments_downloaded += 1;
                    load.bytes_downloaded += bytes;
                }
            }
        }
        let segments = tokio::task::spawn_blocking(move || {
            use rayon::prelude::*;
            work.into_par_iter()
                .map(|(seg, deleted)| {
                    open_segment(&root, &seg, &deleted).map(|(s, k)| (Arc::new(s), k))
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| QueryError::Index(format!("opening segments: {e}")))??;
        let mut by_id = HashMap::new();
        let mut callers: HashMap<ChunkId, Vec<(u32, u32)>> = HashMap::new();
        let mut commits_by_file: HashMap<(trawl_core::ids::RepoId, String), Vec<FileCommit>> =
            HashMap::new();
        let (segments, linked): (Vec<Arc<Segment>>, Vec<Vec<Linked>>) =
            segments.into_iter().unzip();
        for (s, (seg, keys)) in segments.iter().zip(linked).enumerate() {
            for (o, k) in keys.into_iter().enumerate() {
                if seg.alive[o] {
                    by_id.insert(k.chunk_id, (s as u32, o as u32));
                    for callee in k.call_ids {
                        callers
                            .entry(callee)
                            .or_default()
                            .push((s as u32, o as u32));
                    }
                    if !k.commit {
                        continue;
                    }
                    // A commit's doc: the lines it changed, for history by file.
                    let d = seg.docs.get(o);
                    let at = trawl_index::docs::commit_authored_at(&d.header);
                    for span in d.touched.iter().filter(|_| at.is_some()) {
                        if let Some((path, a, b)) = trawl_index::docs::parse_touched_span(span) {
                            commits_by_file
                                .entry((d.repo_id.clone(), path.to_owned()))
                                .or_default()
                                .push(FileCommit {
                                    start_line: a,
                                    end_line: b,
                                    authored_at: at.unwrap_or_default().to_owned(),
                                    doc: (s as u32, o as u32),
                                });
                        }
                    }
                }
            }
        }
        for list in commits_by_file.values_mut() {
            list.sort_by(|a, b| b.authored_at.cmp(&a.authored_at).then(a.doc.cmp(&b.doc)));
        }
        load.seconds = t0.elapsed().as_secs_f64();
        tracing::debug!(
            generation = number.0,
            segments = segments.len(),
            docs = by_id.len(),
            seconds = load.seconds,
            "generation opened"
        );
        Ok(Self {
            number,
            manifest_hash,
            manifest,
            segments,
            by_id,
            callers,
            commits_by_file,
            load,
        })
    }
}

/// The local directory of a segment.
fn local(root: &Path, seg: &SegmentEntry) -> PathBuf {
    seg.dir
        .split('/')
        .fold(root.to_path_buf(), |p, part| p.join(part))
}

/// The marker of a complete cached segment; it holds [`segment_identity`].
const COMPLETE: &str = ".complete";

/// What a cached segment must match to be reused: its manifest entry (files, sizes, counts),
/// not its directory's name.
fn segment_identity(seg: &SegmentEntry) -> String {
    generation::fingerprint(&serde_json::to_vec(seg).expect("serialisable"))
}

/// Pulls a segment into the cache unless it is there (with the same identity); returns the
/// bytes downloaded.
async fn download(store: &Store, root: &Path, seg: &SegmentEntry) -> Result<u64, QueryError> {
    let dir = local(root, seg);
    let identity = segment_identity(seg);
    if tokio::fs::read_to_string(dir.join(COMPLETE))
        .await
        .is_ok_and(|found| found == identity)
    {
        return Ok(0);
    }
    let io = |e: std::io::Error| QueryError::Index(format!("cache {}: {e}", dir.display()));
    let tmp = dir.with_extension("partial");
    let _ = tokio::fs::remove_dir_all(&tmp).await;
    tokio::fs::create_dir_all(tmp.join("text"))
        .await
        .map_err(io)?;
    let mut names = vec!["docs.parquet".to_owned()];
    if seg.vectors > 0 {
        names.push("vectors.usearch".into());
    }
    names.extend(seg.text_files.iter().map(|f| format!("text/{f}")));
    let mut bytes = 0;
    for name in names {
        let key = format!("{}/{name}", seg.dir);
        let data = store.get(&key).await?.ok_or_else(|| {
            QueryError::Index(format!(
                "{key} is missing from the store: was the generation garbage-collected? the service will load the next one"
            ))
        })?;
        bytes += data.len() as u64;
        tokio::fs::write(tmp.join(&name), &data).await.map_err(io)?;
    }
    tokio::fs::write(tmp.join(COMPLETE), identity.as_bytes())
        .await
        .map_err(io)?;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io)?;
    }
    tokio::fs::rename(&tmp, &dir).await.map_err(io)?;
    Ok(bytes)
}

/// Every term of a raw (`STRING`) field of the text index: a short list for a field such as
/// `language`, read from the term dictionaries without touching a document.
fn terms_of(reader: &tantivy::IndexReader, field: &str) -> tantivy::Result<Vec<String>> {
    let searcher = reader.searcher();
    let field = searcher.schema().get_field(field)?;
    let mut out = std::collections::BTreeSet::new();
    for seg in searcher.segment_readers() {
        let inverted = seg.inverted_index(field)?;
        let mut terms = inverted.terms().stream()?;
        while terms.advance() {
            out.insert(String::from_utf8_lossy(terms.key()).into_owned());
        }
    }
    Ok(out.into_iter().collect())
}

fn open_segment(
    root: &Path,
    seg: &SegmentEntry,
    deleted: &HashSet<u64>,
) -> Result<(Segment, Vec<Linked>), QueryError> {
    let dir = local(root, seg);
    let idx = |m: String| QueryError::Index(format!("segment {}: {m}", seg.dir));
    let bytes = std::fs::read(dir.join("docs.parquet")).map_err(|e| idx(e.to_string()))?;
    let (docs, keys) = DocStore::open(bytes.into()).map_err(|e| idx(e.to_string()))?;
    let vectors = if seg.vectors > 0 {
        let path = dir.join("vectors.usearch");
        // Memory-mapped, not read in: opening costs nothing and the pages are the kernel's to
        // share and evict. A segment's files are written once and never rewritten in place (a
        // generation writes new directories; the cache downloads into a temporary one and
        // renames it), so a mapping stays valid even after a collection unlinks them.
        let index = usearch::Index::restore_view(&path.to_string_lossy())
            .map_err(|e| idx(format!("vector index: {e}")))?;
        Some(index)
    } else {
        None
    };
    let text = segment::open_text(&dir.join("text"))?;
    let reader = text
        .reader_builder()
        .reload_policy(tantivy::ReloadPolicy::Manual)
        .try_into()
        .map_err(|e| idx(format!("text index: {e}")))?;
    let languages = terms_of(&reader, "language").map_err(|e| idx(format!("text index: {e}")))?;
    let mut repos: Vec<String> = Vec::new();
    let mut repo_ix: HashMap<&str, u32> = HashMap::new();
    let mut repo_of = Vec::with_capacity(docs.len());
    let mut symbols: HashMap<String, Vec<u32>> = HashMap::new();
    let mut alive = Vec::with_capacity(docs.len());
    for (o, d) in keys.iter().enumerate() {
        let n = repo_ix.len() as u32;
        let r = *repo_ix.entry(d.repo_id.as_str()).or_insert_with(|| {
            repos.push(d.repo_id.as_str().to_owned());
            n
        });
        repo_of.push(r);
        let live = !deleted.contains(&(o as u64));
        alive.push(live);
        if live && (is_definition(d.kind) || !d.members.is_empty()) {
            // A member of a container that stays one chunk (`Walker.run`) finds the container,
            // and a named constant (`AllLevels`) the module code that holds it.
            let members = d
                .members
                .iter()
                .map(|m| (m.rsplit(['.', ':']).next(), Some(m.as_str())));
            for (symbol, qualified) in
                std::iter::once((d.symbol.as_deref(), d.qualified_name.as_deref())).chain(members)
            {
                for k in symbol_keys(symbol, qualified) {
                    let ords = symbols.entry(k).or_default();
                    if ords.last() != Some(&(o as u32)) {
                        ords.push(o as u32);
                    }
                }
            }
        }
    }
    // The names went into the symbol map: only the ids stay for the generation's maps.
    let linked = keys
        .into_iter()
        .map(|k| Linked {
            chunk_id: k.chunk_id,
            call_ids: k.call_ids,
            commit: k.kind == ChunkKind::Commit,
        })
        .collect();
    Ok((
        Segment {
            dir: seg.dir.clone(),
            docs,
            all_alive: alive.iter().all(|&a| a),
            alive,
            repo_of,
            repos,
            vectors,
            prose_vectors: seg.prose_vectors != Some(0),
            text,
            reader,
            symbols,
            languages,
        },
        linked,
    ))
}

/// What a generation needs of each doc of a segment once the segment is open: its id and its
/// resolved callees (the call graph), and whether it is a commit's (history by file).
struct Linked {
    chunk_id: ChunkId,
    call_ids: Vec<ChunkId>,
    commit: bool,
}

/// Removes cached segments no generation in `keep` uses (after a swap).
pub fn prune_cache(cache: &Path, keep: &[&Generation]) -> usize {
    let wanted: HashSet<PathBuf> = keep
        .iter()
        .flat_map(|g| {
            g.segments.iter().map(|s| {
                s.dir
                    .split('/')
                    .fold(cache.to_path_buf(), |p, part| p.join(part))
            })
        })
        .collect();
    let mut removed = 0;
    let Ok(gens) = std::fs::read_dir(cache.join("index")) else {
        return 0;
    };
    for g in gens.flatten() {
        let Ok(shards) = std::fs::read_dir(g.path()) else {
            continue;
        };
        for s in shards.flatten() {
            let Ok(segs) = std::fs::read_dir(s.path()) else {
                continue;
            };
            for seg in segs.flatten() {
                let p = seg.path();
                if !wanted.contains(&p) && std::fs::remove_dir_all(&p).is_ok() {
                    removed += 1;
                }
            }
        }
    }
    removed
}

/// Shared handle of an open generation.
pub type Shared = Arc<Generation>;

#[cfg(test)]
mod tests {
    use super::{ChunkKind as K, Named, named_definition};

    fn named(name: &str, kinds: &'static [K]) -> Named {
        Named {
            name: name.to_owned(),
            kinds,
        }
    }

    #[test]
    fn a_declaration_as_code_writes_it_names_its_definition() {
        let f: &[K] = &[K::Function, K::Method];
        for (query, want) in [
            ("ExecuteC", Some(named("ExecuteC", &[]))),
            ("  Walker::run ", Some(named("Walker::run", &[]))),
            ("class Context", Some(named("Context", &[K::Class]))),
            (
                "class Context(object):",
                Some(named("Context", &[K::Class])),
            ),
            (
                "class Router extends Base",
                Some(named("Router", &[K::Class])),
            ),
            ("def get(self, key)", Some(named("get", f))),
            ("async def fetch(url):", Some(named("fetch", f))),
            ("pub fn parse_spec", Some(named("parse_spec", f))),
            ("pub(crate) const fn new() -> Self {", Some(named("new", f))),
            (
                "export default function suggestSimilar(word, candidates) {",
                Some(named("suggestSimilar", f)),
            ),
            (
                "func (c *Command) ExecuteC() (cmd *Command, err error)",
                Some(named("Command.ExecuteC", f)),
            ),
            (
                "func (Level) String() string",
                Some(named("Level.String", f)),
            ),
            ("func NewRouter() *Mux", Some(named("NewRouter", f))),
            ("struct Builder {", Some(named("Builder", &[K::Struct]))),
            (
                "pub struct Builder<W: Write>",
                Some(named("Builder", &[K::Struct])),
            ),
            ("impl Builder", Some(named("Builder", &[K::Impl]))),
            (
                "impl Default for Builder",
                Some(named("Default for Builder", &[K::Impl])),
            ),
            ("interface Options", Some(named("Options", &[K::Interface]))),
            (
                "type RetryOptions = {",
                Some(named("RetryOptions", &[K::Type, K::Struct, K::Interface])),
            ),
            (
                "const DEFAULT_FILTER_ENV: &str",
                Some(named("DEFAULT_FILTER_ENV", &[K::Constant])),
            ),
            ("macro_rules! cfg_net", Some(named("cfg_net", &[K::Macro]))),
            // Questions and sentences are not declarations.
            ("how does the parser handle --", None),
            ("function that parses dates", None),
            ("type hints for callbacks", None),
            ("class names in the output", None),
            ("static files", None),
            ("function names", None),
            ("type alias", None),
            ("class context", None),
            ("function parse(", Some(named("parse", f))),
            ("def get", Some(named("get", f))),
            ("static MAX_AGE", Some(named("MAX_AGE", &[K::Constant]))),
            ("where is Context created", None),
            // One word is a name, whatever it is; nothing is none.
            ("impl", Some(named("impl", &[]))),
            ("", None),
            ("def ", Some(named("def", &[]))),
            ("pub fn", None),
        ] {
            assert_eq!(named_definition(query), want, "{query:?}");
        }
    }

    proptest::proptest! {
        /// Any query is read without a panic; a declaration's name is one of its words (or a
        /// receiver's type and a word), never empty.
        #[test]
        fn any_query_is_read_and_a_name_is_in_it(q in "[ -~]{0,60}") {
            if let Some(n) = named_definition(&q) {
                proptest::prop_assert!(!n.name.is_empty());
                let last = n.name.rsplit(['.', ' ']).next().unwrap();
                proptest::prop_assert!(q.contains(last), "{:?} from {:?}", n.name, q);
            }
        }
    }
}
