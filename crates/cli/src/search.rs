//! `trawl search`, `trawl serve` and `trawl eval`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use trawl_core::config::{Config, EmbedderKind};
use trawl_query::access::Tokens;
use trawl_query::{Access, Hit, Mode, SearchRequest, SearchResponse, Searcher};

#[derive(clap::Args)]
pub struct Args {
    /// What to look for: words ("where are retries handled"), an identifier (`parse_args`,
    /// `HTTPConnection.request`) or an error message.
    query: String,

    /// Results to print.
    #[arg(short, default_value_t = 10)]
    k: usize,

    /// Only these repositories (ids or patterns such as `github.com/acme/*`). Repeatable.
    #[arg(long)]
    repo: Vec<String>,

    /// Only these languages (`python`, `rust`, `typescript`, …). Repeatable; a language the
    /// index holds no chunk of (`pyhton`, or an extension such as `py`) is an error that
    /// offers the nearest name and lists the index's languages.
    #[arg(long)]
    lang: Vec<String>,

    /// Only paths matching these globs (`src/**/*.py`); a plain path is a prefix. Repeatable.
    #[arg(long)]
    path: Vec<String>,

    /// Only these chunk kinds (`function`, `method`, `class`, `module_code`, `section`,
    /// `commit`, …; `constant`: the module code that declares a named constant). Repeatable;
    /// a kind that does not exist is an error that lists them.
    #[arg(long)]
    kind: Vec<String>,

    /// Show each result's parent, siblings and callees as context.
    #[arg(long)]
    expand: bool,

    /// `hybrid` (default), `vector` or `lexical`.
    #[arg(long, default_value = "hybrid", value_parser = ["hybrid", "vector", "lexical"])]
    mode: String,

    /// One JSON object per result line (repo, commit, path, start_line, end_line, symbol,
    /// kind, score, text, context).
    #[arg(long)]
    json: bool,

    /// Ask a `trawl serve` at this URL instead of reading the local store.
    #[arg(long, value_name = "URL")]
    server: Option<String>,

    /// Bearer token for `--server`.
    #[arg(long, env = "TRAWL_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Which embedder embeds the query (default: the one whose vector space the index uses).
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,
}

fn request(args: &Args) -> anyhow::Result<SearchRequest> {
    Ok(SearchRequest {
        query: args.query.clone(),
        k: Some(args.k),
        repo: args.repo.clone(),
        lang: args.lang.clone(),
        path: args.path.clone(),
        kind: args.kind.clone(),
        expand: args.expand,
        mode: args.mode.parse()?,
    })
}

/// A searcher over the configured local store, with its live generation open.
pub async fn local_searcher(
    cfg: &Config,
    embedder: Option<EmbedderKind>,
) -> anyhow::Result<Searcher> {
    let store = crate::existing_store(cfg).map_err(|_| {
        anyhow::anyhow!(
            "no index at {}: run `trawl index <path>` first",
            cfg.store.url
        )
    })?;
    let searcher = Searcher::open(store, cfg, embedder).await?;
    anyhow::ensure!(
        searcher.generation().is_some(),
        "{} holds no index generation yet: run `trawl index <path>` (or `trawl compact`)",
        cfg.store.url
    );
    Ok(searcher)
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let req = request(&args)?;
    let resp = match &args.server {
        Some(url) => remote(url, args.token.as_deref(), &req).await?,
        None => {
            let searcher = local_searcher(cfg, args.embedder).await?;
            searcher.search(&req, Access::all()).await?
        }
    };
    for n in &resp.notes {
        eprintln!("note: {n}");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        for h in &resp.results {
            writeln!(out, "{}", serde_json::to_string(h)?)?;
        }
    } else {
        print_hits(&mut out, &resp)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn remote(
    url: &str,
    token: Option<&str>,
    req: &SearchRequest,
) -> anyhow::Result<SearchResponse> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let mut r = client
        .post(format!("{}/v1/search", url.trim_end_matches('/')))
        .json(req);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r
        .send()
        .await
        .with_context(|| format!("cannot reach the query service at {url}"))?;
    let status = resp.status();
    let body = resp.text().await?;
    if !status.is_success() {
        let msg = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(body);
        anyhow::bail!("the query service answered {status}: {msg}");
    }
    serde_json::from_str(&body).context("the query service's answer is not a search response")
}

/// Lines of a result's text shown as its snippet.
const SNIPPET_LINES: usize = 8;

fn print_hits(out: &mut impl Write, resp: &SearchResponse) -> std::io::Result<()> {
    if resp.results.is_empty() {
        writeln!(out, "no results")?;
    }
    for (i, h) in resp.results.iter().enumerate() {
        writeln!(
            out,
            "{:>2}. {} · {} · {} · {:.4}",
            i + 1,
            h.citation(),
            h.symbol.as_deref().unwrap_or("-"),
            h.kind,
            h.score
        )?;
        snippet(out, h)?;
        for c in &h.context {
            if c.kind == "commit" {
                // A commit: where to read it, and its summary line.
                writeln!(
                    out,
                    "      ↳ {:<9} {} · {}",
                    c.relation,
                    c.citation(),
                    c.text.lines().next().unwrap_or_default()
                )?;
                continue;
            }
            writeln!(
                out,
                "      ↳ {:<9} {}:{}#L{}-L{} · {} · {}",
                c.relation,
                c.repo,
                c.path,
                c.start_line,
                c.end_line,
                c.symbol.as_deref().unwrap_or("-"),
                c.kind
            )?;
        }
    }
    writeln!(
        out,
        "generation {} · {} · search {:.1} ms · query embedding {:.1} ms",
        resp.generation,
        resp.mode.as_str(),
        resp.search_ms,
        resp.embed_ms
    )
}

fn snippet(out: &mut impl Write, h: &Hit) -> std::io::Result<()> {
    let lines: Vec<&str> = h.text.lines().collect();
    for (n, line) in lines.iter().take(SNIPPET_LINES).enumerate() {
        let mut line = (*line).to_owned();
        if line.len() > 160 {
            let mut end = 157;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
            line.push('…');
        }
        writeln!(out, "    {:>5} │ {line}", h.start_line as usize + n)?;
    }
    if lines.len() > SNIPPET_LINES {
        writeln!(
            out,
            "          │ … {} more lines",
            lines.len() - SNIPPET_LINES
        )?;
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (default `query.listen`).
    #[arg(long)]
    listen: Option<String>,
}

pub async fn serve(cfg: &Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let store = trawl_core::store::Store::from_url(&cfg.store.url)?;
    let tokens = Tokens::from_config(&cfg.query.tokens)?;
    if tokens.open() {
        tracing::warn!("no query.tokens configured: every client sees every repository");
    }
    let transport = trawl_query::server::Transport::new(&cfg.serve)?;
    // A generation whose vectors this process cannot search (a Voyage space without
    // VOYAGE_API_KEY) stops the start: a silently lexical-only service is worse than none.
    let searcher = Arc::new(
        Searcher::open_serving(store, cfg)
            .await
            .context("cannot serve the live generation")?,
    );
    if searcher.generation().is_none() {
        tracing::warn!("no index generation yet: /healthz answers 503 until one appears");
    }
    let addr = args.listen.unwrap_or_else(|| cfg.query.listen.clone());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() && cfg.serve.allowed_hosts.is_empty() {
        tracing::warn!(
            "listening beyond loopback with serve.allowed_hosts empty: only IP addresses and localhost are accepted as Host; list the names clients use"
        );
    }
    let scheme = if transport.is_tls() { "https" } else { "http" };
    eprintln!(
        "serve: listening on {scheme}://{local} (POST /v1/search, GET /healthz /metrics /openapi.json)"
    );
    let app = trawl_query::server::App::new(searcher, tokens, &cfg.serve);
    trawl_query::server::serve(
        app,
        listener,
        transport,
        Duration::from_secs(cfg.query.poll_secs.max(1)),
        async {
            crate::ops::terminated().await;
        },
    )
    .await?;
    eprintln!("serve: stopped");
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct EvalArgs {
    /// The query set: JSON lines `{"id","query","kind","targets":[{"repo","path",
    /// "start_line","end_line"}],"split"}` (a target's repo may be a pattern; `*` matches any;
    /// `split`, optional, is `tune` or `test`: a table is printed per split).
    queries: PathBuf,

    /// Modes to evaluate, comma-separated: hybrid, vector, lexical.
    #[arg(long, default_value = "hybrid", value_delimiter = ',')]
    mode: Vec<String>,

    /// A name for this run in the table (e.g. "ast · local").
    #[arg(long)]
    label: Option<String>,

    /// Only the queries of this split (`tune`, `test`).
    #[arg(long)]
    split: Option<String>,

    /// Also evaluate the default with each ranking change switched off in turn (hybrid).
    #[arg(long)]
    ablate: bool,

    /// The store of a naive index of the same repositories (`--set chunk.strategy=windows`):
    /// evaluated as naive RAG — its windows, plain BM25 and the vector arm, RRF k=60 — and
    /// printed beside this one.
    #[arg(long, value_name = "STORE")]
    baseline: Option<String>,

    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,

    /// List the queries with no target in the top 10.
    #[arg(long)]
    missed: bool,

    /// Results fetched per query. The scores count the top 10 only; a deeper fetch shows,
    /// in `--json`'s `ranks`, how far down each query's first hit is.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(10..=100))]
    depth: u16,

    /// Which embedder embeds the queries (default: the one the index's space needs).
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,

    /// Fit the learned ranking's weights (`query.ranker`) on these queries (use
    /// `--split tune`) instead of scoring them: prints the pool's MRR@10 in fused and in
    /// learned order, cross-validated over five folds of the questions, and the fitted
    /// weights as a `[query.ranker]` table to put in the configuration.
    #[arg(long, conflicts_with_all = ["baseline", "ablate", "json", "missed", "label", "mode", "depth"])]
    train_ranker: bool,

    /// The L2 penalty of `--train-ranker`'s fit (larger: weights nearer zero; the default
    /// weights were fitted with 0.1).
    #[arg(long, default_value_t = 0.1, requires = "train_ranker")]
    ranker_l2: f64,

    /// With `--train-ranker`, also write each question's pool to FILE as JSON lines (its id,
    /// kind and split, and each candidate's features and whether it answers), to study or fit
    /// the ranking with other tools.
    #[arg(long, value_name = "FILE", requires = "train_ranker")]
    save_pool: Option<std::path::PathBuf>,

    /// With `--train-ranker`, also fit on the pools FILE holds, written by `--save-pool` on
    /// another index: questions about repositories indexed in other stores are fitted on with
    /// these as one pool. Repeatable. With `--split`, a saved question of another split (or
    /// of none) is left out, as the set's own are; a pool of a `test` question is refused.
    #[arg(long, value_name = "FILE", requires = "train_ranker")]
    add_pool: Vec<std::path::PathBuf>,
}

/// One evaluated configuration: a searcher, its knobs, a mode.
struct Run {
    name: String,
    mode: Mode,
    results: Vec<Vec<trawl_query::Hit>>,
}

async fn run_queries(
    searcher: &trawl_query::Searcher,
    queries: &[trawl_query::eval::EvalQuery],
    params: &trawl_core::config::QueryConfig,
    mode: Mode,
    name: &str,
    depth: usize,
) -> anyhow::Result<Vec<Vec<trawl_query::Hit>>> {
    let bar = indicatif::ProgressBar::new(queries.len() as u64).with_message(name.to_owned());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::with_capacity(queries.len());
    let mut notes = std::collections::BTreeSet::new();
    for q in queries {
        let mut req = SearchRequest::new(q.query.clone());
        req.k = Some(depth);
        req.mode = mode;
        let r = searcher.search_with(&req, Access::all(), params).await?;
        notes.extend(r.notes);
        results.push(r.results);
        bar.inc(1);
    }
    bar.finish_and_clear();
    for n in notes {
        eprintln!("note ({name}): {n}");
    }
    Ok(results)
}

/// `trawl eval --train-ranker`: the learned ranking's pool of every question in words,
/// labelled by the targets, fitted.
async fn train_ranker(
    searcher: &trawl_query::Searcher,
    queries: &[trawl_query::eval::EvalQuery],
    l2: f64,
    save_pool: Option<&std::path::Path>,
    add_pool: &[std::path::PathBuf],
    split: Option<&str>,
) -> anyhow::Result<ExitCode> {
    use trawl_query::learned;
    anyhow::ensure!(
        l2.is_finite() && l2 >= 0.0,
        "--ranker-l2 must be a number ≥ 0, not {l2}"
    );
    let params = searcher.params();
    anyhow::ensure!(
        params.ranker_pool > 0,
        "query.ranker_pool is 0: there is no pool to fit on (set it, e.g. `--set query.ranker_pool=50`)"
    );
    // A wrong path fails before the pools are computed, not after.
    for path in add_pool {
        std::fs::metadata(path)
            .with_context(|| format!("cannot open --add-pool file {}", path.display()))?;
    }
    // Each question once: a pool added twice (or the file --save-pool writes) would count its
    // questions twice, in folds of their own, and flatter the cross-validation.
    let mut seen: std::collections::HashSet<(String, String)> = std::collections::HashSet::new();
    let bar = indicatif::ProgressBar::new(queries.len() as u64).with_message("pools");
    let mut samples: Vec<learned::Sample> = Vec::new();
    let mut answered = 0usize;
    let mut saved = match save_pool {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .with_context(|| format!("cannot create {} for --save-pool", p.display()))?,
        )),
        None => None,
    };
    for q in queries {
        let req = SearchRequest::new(q.query.clone());
        let pool = searcher.ranker_pool(&req, Access::all(), params).await?;
        bar.inc(1);
        if pool.is_empty() {
            continue;
        }
        // Each candidate labelled once; kept whole for --save-pool.
        let mut sample: learned::Sample = Vec::with_capacity(pool.len());
        let mut candidates = Vec::new();
        for (h, f) in pool {
            let hit = q
                .targets
                .iter()
                .any(|t| trawl_query::eval::hits_precisely(&h, t));
            if saved.is_some() {
                candidates.push(SavedCandidate {
                    f: f.to_vec(),
                    hit,
                    doc: serde_json::to_value(&h)?,
                });
            }
            sample.push((f, hit));
        }
        answered += usize::from(sample.iter().any(|c| c.1));
        seen.insert((q.id.clone(), q.query.clone()));
        if let Some(w) = saved.as_mut() {
            let line = SavedPool {
                id: q.id.clone(),
                kind: q.kind.clone(),
                split: q.split.clone(),
                features: trawl_core::config::RankerWeights::NAMES
                    .map(str::to_owned)
                    .to_vec(),
                query: q.query.clone(),
                candidates,
            };
            writeln!(w, "{}", serde_json::to_string(&line)?)?;
        }
        samples.push(sample);
    }
    bar.finish_and_clear();
    if let Some(mut w) = saved {
        w.flush().context("cannot write --save-pool's file")?;
    }
    let here = samples.len();
    println!(
        "{here} of {} queries are questions in words.",
        queries.len()
    );
    for path in add_pool {
        let (added, other_split) = read_pool(path, &mut seen, split)?;
        if other_split > 0 {
            println!(
                "{other_split} question(s) of {} left out: not of split {:?}.",
                path.display(),
                split.unwrap_or_default()
            );
        }
        answered += added.iter().filter(|s| s.iter().any(|c| c.1)).count();
        samples.extend(added);
    }
    if !add_pool.is_empty() {
        println!(
            "{} questions' pools added from {} file(s) to this index's {here}.",
            samples.len() - here,
            add_pool.len()
        );
    }
    anyhow::ensure!(
        answered >= 2,
        "{} questions in words to fit on, {answered} with an answer among the first {} candidates: too few to fit on",
        samples.len(),
        params.ranker_pool
    );
    let (cv_learned, cv_fused) = learned::cross_validate(&samples, 5, l2);
    let w = learned::fit(&samples, l2);
    println!(
        "{} questions in words fitted on; {answered} have an answer among the first {} candidates.",
        samples.len(),
        params.ranker_pool
    );
    println!(
        "MRR@10 of those questions, 5-fold cross-validated: {cv_learned:.3} in learned order, {cv_fused:.3} in fused order."
    );
    println!(
        "MRR@10 in learned order with weights fitted on all of them: {:.3}.\n",
        learned::mrr(&samples, Some(&w))
    );
    println!("[query.ranker]");
    for (name, v) in trawl_core::config::RankerWeights::NAMES
        .iter()
        .zip(w.to_array())
    {
        println!("{name} = {v:.4}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One question's pool, one JSON line of the file `--save-pool` writes and `--add-pool` reads.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedPool {
    id: String,
    kind: String,
    split: Option<String>,
    /// The features' names, in the order of each candidate's `f`.
    features: Vec<String>,
    query: String,
    candidates: Vec<SavedCandidate>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SavedCandidate {
    f: Vec<f64>,
    /// Whether it answers the question.
    hit: bool,
    /// The result as `--json` prints it.
    #[serde(default)]
    doc: serde_json::Value,
}

/// The pools `--save-pool` wrote to `path`, as samples to fit on, and how many questions
/// were left out for not being of `split` (when one is given). Refused when they were saved
/// with other features, hold a question of the `test` split, or a question `seen` already
/// holds (by id and text; each one read is added to it).
fn read_pool(
    path: &std::path::Path,
    seen: &mut std::collections::HashSet<(String, String)>,
    split: Option<&str>,
) -> anyhow::Result<(Vec<trawl_query::learned::Sample>, usize)> {
    use std::io::BufRead;
    let names = trawl_core::config::RankerWeights::NAMES;
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open --add-pool file {}", path.display()))?;
    let mut out = Vec::new();
    let mut other_split = 0;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), n + 1);
        let l: SavedPool = serde_json::from_str(&line).with_context(|| {
            format!(
                "{} is not a pool `--save-pool` wrote: write it again with `trawl eval --train-ranker --save-pool`",
                at()
            )
        })?;
        anyhow::ensure!(
            l.features
                .iter()
                .map(String::as_str)
                .eq(names.iter().copied()),
            "{}: its pool was saved with other features ({}) than this trawl's ({}): save it again with this trawl",
            at(),
            l.features.join(", "),
            names.join(", ")
        );
        anyhow::ensure!(
            l.split.as_deref() != Some("test"),
            "{}: question {} is of the test split, which is never fitted on: save the pool with `--split tune`",
            at(),
            l.id
        );
        if split.is_some_and(|s| l.split.as_deref() != Some(s)) {
            other_split += 1;
            continue;
        }
        anyhow::ensure!(
            seen.insert((l.id.clone(), l.query.clone())),
            "{}: question {} is in the pool already (from this index or a file added before): add each saved pool once",
            at(),
            l.id
        );
        let mut sample = Vec::with_capacity(l.candidates.len());
        for c in l.candidates {
            let f: trawl_query::learned::Features = c.f.try_into().map_err(|f: Vec<f64>| {
                anyhow::anyhow!(
                    "{}: a candidate has {} features, not {}",
                    at(),
                    f.len(),
                    names.len()
                )
            })?;
            sample.push((f, c.hit));
        }
        if !sample.is_empty() {
            out.push(sample);
        }
    }
    Ok((out, other_split))
}

pub async fn eval(cfg: &Config, args: EvalArgs) -> anyhow::Result<ExitCode> {
    use trawl_query::eval;
    let mut queries = eval::load(&args.queries)?;
    if let Some(split) = &args.split {
        queries.retain(|q| q.split.as_deref() == Some(split.as_str()));
        anyhow::ensure!(
            !queries.is_empty(),
            "no query of {} is in split {split:?}",
            args.queries.display()
        );
    }
    let searcher = local_searcher(cfg, args.embedder).await?;
    if args.train_ranker {
        return train_ranker(
            &searcher,
            &queries,
            args.ranker_l2,
            args.save_pool.as_deref(),
            &args.add_pool,
            args.split.as_deref(),
        )
        .await;
    }
    let label = args.label.clone().unwrap_or_else(|| "trawl".to_owned());
    let depth = usize::from(args.depth);
    let mut runs = Vec::new();
    for mode in &args.mode {
        let mode: Mode = mode.parse()?;
        let name = if args.mode.len() > 1 || mode != Mode::Hybrid {
            format!("{label} · {}", mode.as_str())
        } else {
            label.clone()
        };
        let results =
            run_queries(&searcher, &queries, searcher.params(), mode, &name, depth).await?;
        runs.push(Run {
            name,
            mode,
            results,
        });
    }
    if let Some(store) = &args.baseline {
        let mut bcfg = cfg.clone();
        bcfg.store.url.clone_from(store);
        let base = local_searcher(&bcfg, args.embedder).await?;
        let params = eval::naive(&cfg.query);
        let name = "naive RAG (windows, BM25 + vector, RRF)".to_owned();
        let results = run_queries(&base, &queries, &params, Mode::Hybrid, &name, depth).await?;
        runs.push(Run {
            name,
            mode: Mode::Hybrid,
            results,
        });
    }
    if args.ablate {
        for (what, off) in eval::ablations() {
            let mut params = searcher.params().clone();
            off(&mut params);
            let name = format!("{label} without {what}");
            let results =
                run_queries(&searcher, &queries, &params, Mode::Hybrid, &name, depth).await?;
            runs.push(Run {
                name,
                mode: Mode::Hybrid,
                results,
            });
        }
    }
    // One table per split (a set without splits is one table).
    let mut splits: Vec<Option<String>> = queries.iter().map(|q| q.split.clone()).collect();
    splits.sort();
    splits.dedup();
    let mut json = Vec::new();
    let mut out = String::new();
    let mut missed = Vec::new();
    for split in &splits {
        let idx: Vec<usize> = (0..queries.len())
            .filter(|&i| &queries[i].split == split)
            .collect();
        let qs: Vec<eval::EvalQuery> = idx.iter().map(|&i| queries[i].clone()).collect();
        let kinds: std::collections::BTreeSet<&str> = qs.iter().map(|q| q.kind.as_str()).collect();
        let title = split.as_deref().unwrap_or("all");
        out.push_str(&format!("\nsplit: {title} ({} queries)\n\n", qs.len()));
        out.push_str("| run | R@1 | R@5 | R@10 | Hit@1 | Hit@10 | MRR@10 | mean span |");
        for k in &kinds {
            out.push_str(&format!(" {k} MRR |"));
        }
        out.push_str("\n|---|---:|---:|---:|---:|---:|---:|---:|");
        out.push_str(&"---:|".repeat(kinds.len()));
        out.push('\n');
        for run in &runs {
            let results: Vec<Vec<trawl_query::Hit>> =
                idx.iter().map(|&i| run.results[i].clone()).collect();
            let r = eval::score(&qs, &results);
            let s = &r.overall;
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} |",
                run.name,
                s.recall_1,
                s.recall_5,
                s.recall_10,
                s.hit_1,
                s.hit_10,
                s.mrr_10,
                s.mean_span
            ));
            for k in &kinds {
                out.push_str(&format!(" {:.3} |", r.by_kind[*k].mrr_10));
            }
            out.push('\n');
            if args.missed {
                missed.push(format!(
                    "missed ({}, {title}): {}\n",
                    run.name,
                    r.missed.join(", ")
                ));
            }
            json.push(serde_json::json!({
                "run": run.name, "mode": run.mode.as_str(), "split": title, "report": r,
            }));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{out}\n{}", missed.concat());
    }
    Ok(ExitCode::SUCCESS)
}
