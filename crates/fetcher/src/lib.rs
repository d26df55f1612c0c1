//! # trawl-fetcher
//!
//! Turns "thousands of repositories, every night" into a small stream of changed files.
//!
//! For each repository of a run, concurrently up to `fetch.concurrency`:
//! 1. **sync** its bare mirror in the cache directory ([`git`]): one reference advertisement,
//!    and a fetch of the indexed branch only when its head moved;
//! 2. **diff** the new head's tree against the last indexed commit (`repos/<id>/state.json`):
//!    from the mirror's copy of that commit's tree when it has one, else from that commit's
//!    manifest in the store — so a force-push, a lost cache or a new machine still diff
//!    correctly, and an unchanged head publishes nothing;
//! 3. **classify** each changed file ([`policy`]): indexed, or skipped with a reason; the
//!    text of an indexed file has its secrets redacted here ([`secrets`]), before it reaches
//!    the bus — the one path every file takes to the chunk worker, inline or (on Kafka, when
//!    large) through `bus/large/`;
//! 4. **publish** one event per changed file on the `files` topic, content inline, then write
//!    the commit's manifest (every file, with skip reasons), and only then `state.json`. A
//!    crash before `state.json` re-sends the commit on the next run; it never skips it.
//!
//! Renames are exact (same blob at a new path): one `upsert` of the new path with
//! `renamed_from`. A rename with edits is an `upsert` of the new path and a `delete` of the old.
//!
//! Git work is blocking and runs on tokio's blocking pool; events stream to the async
//! publisher through a bounded channel, so memory stays bounded on a first run of a large
//! repository.

pub mod git;
pub mod policy;
pub mod repos;
pub mod secrets;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use git2::Oid;
use serde::Serialize;
use tokio::sync::mpsc;
use trawl_core::bus::Bus;
use trawl_core::config::FetchConfig;
use trawl_core::records::{
    self, CommitRecord, FILE_EVENT_VERSION, FileEvent, FileOp, MANIFEST_VERSION, ManifestRow,
    REPO_LIST_VERSION, REPO_STATE_VERSION, RepoList, RepoState,
};
use trawl_core::store::{Store, keys};
use trawl_core::{BlobId, CommitId, RepoId, RunId, language};

pub use git::{FailureReason, RepoFailure};
pub use policy::SkipReason;
pub use repos::RepoSpec;

/// The topic file events are published on.
pub const FILES_TOPIC: &str = trawl_core::bus::Topic::Files.name();

/// What the fetcher emits for one changed file: an event (published, or that would be in a
/// dry run), or a skip.
#[derive(Clone, Debug)]
pub enum Emitted {
    Event(FileEvent),
    Skip {
        repo: RepoId,
        path: String,
        blob: Option<BlobId>,
        language: Option<String>,
        size: u64,
        reason: SkipReason,
        /// For [`SkipReason::Secret`]: the id of the secret rule that skipped it.
        rule: Option<&'static str>,
    },
}

/// One line of `trawl fetch --json`.
#[derive(Serialize)]
pub struct JsonLine<'a> {
    pub op: &'static str,
    pub repo: &'a RepoId,
    pub path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<&'a str>,
    pub blob: Option<&'a BlobId>,
    pub language: Option<&'a str>,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The secret rule of a `secret` skip (`env-file`, `private-key`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<&'static str>,
}

impl Emitted {
    pub fn json_line(&self) -> JsonLine<'_> {
        match self {
            Emitted::Event(e) => JsonLine {
                op: match e.op {
                    FileOp::Upsert => "upsert",
                    FileOp::Delete => "delete",
                },
                repo: &e.repo,
                path: &e.path,
                renamed_from: e.renamed_from.as_deref(),
                blob: e.blob.as_ref(),
                language: e.language.as_deref(),
                size: e.size,
                reason: None,
                rule: None,
            },
            Emitted::Skip {
                repo,
                path,
                blob,
                language,
                size,
                reason,
                rule,
            } => JsonLine {
                op: "skip",
                repo,
                path,
                renamed_from: None,
                blob: blob.as_ref(),
                language: language.as_deref(),
                size: *size,
                reason: Some(reason.as_str()),
                rule: *rule,
            },
        }
    }
}

/// What happened to one repository in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepoReport {
    pub repo: Option<RepoId>,
    pub url: String,
    pub branch: Option<String>,
    pub old_commit: Option<String>,
    pub new_commit: Option<String>,
    /// `updated`, `unchanged` or `failed`.
    pub status: &'static str,
    pub failure: Option<RepoFailure>,
    pub files: u64,
    pub upserts: u64,
    pub deletes: u64,
    pub renames: u64,
    pub skips: BTreeMap<SkipReason, u64>,
    /// Files not published because of a secret rule (part of `skips["secret"]`), by rule id.
    pub secrets_skipped: BTreeMap<&'static str, u64>,
    /// Files published with secrets redacted, by rule id (a file counts once per rule).
    pub secrets_redacted: BTreeMap<&'static str, u64>,
    /// Content bytes published.
    pub bytes: u64,
    /// Commits whose messages were recorded (`fetch.commit_history`).
    pub commits: u64,
    pub millis: u64,
    /// Every indexed file was sent again because the chunker version changed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rechunked: bool,
    /// With [`RunOptions::defer_state`]: the state to record once what was published is
    /// durable downstream ([`Fetcher::commit_states`]).
    #[serde(skip)]
    pub pending_state: Option<RepoState>,
}

/// `runs/<run_id>.json`.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub run: RunId,
    pub stage: records::Stage,
    pub dry_run: bool,
    pub started_at: String,
    pub finished_at: String,
    pub repos: Vec<RepoReport>,
}

impl RunReport {
    pub fn failed(&self) -> usize {
        self.repos.iter().filter(|r| r.failure.is_some()).count()
    }
}

/// Receives progress as a run goes; every method has a no-op default.
pub trait Observer: Send + Sync {
    fn repo_started(&self, _url: &str) {}
    fn emitted(&self, _item: &Emitted) {}
    fn repo_finished(&self, _report: &RepoReport) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// Options of one run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Sync and diff, but write nothing to the store and publish nothing.
    pub dry_run: bool,
    /// Diff from this commit-ish instead of the stored state.
    pub since: Option<String>,
    /// Do not record the repositories' new state: the caller does, with
    /// [`Fetcher::commit_states`], once the published events are processed. For a bus that
    /// is not durable (in-process), so that a crash re-sends the commit instead of losing it.
    pub defer_state: bool,
    /// The repositories given are not the whole list: add them to the index and keep every
    /// other one. Without it (the default) the repositories of the run are the organisation's
    /// list (`repos/list.json`), and any indexed before that is not among them leaves the
    /// index at the next compaction.
    pub keep_others: bool,
    /// Read every file of each repository's head again, unchanged ones too (even when the
    /// head did not move), and publish what the secret rules now judge otherwise than when
    /// the file was indexed: a delete for a file that now holds a secret (path or private key),
    /// an upsert with the secrets redacted for one that holds tokens, an upsert for one no
    /// longer taken for a secret. Run once after the rules changed (an upgrade of trawl).
    pub rescan_secrets: bool,
    /// The chunker version the chunk workers write (their part version). A repository whose
    /// files were last sent for another version (or before the version was recorded) has every
    /// indexed file of its head sent again, even when the head did not move: the new chunker's
    /// chunks then replace the old ones, and chunks whose text did not change keep their
    /// vectors (the embedding cache is keyed by content). `None`: the version is not known
    /// here and the recorded one is kept.
    pub chunker_version: Option<String>,
}

/// The fetch stage.
pub struct Fetcher {
    cfg: FetchConfig,
    store: Store,
    bus: Arc<dyn Bus>,
    creds: Arc<git::Credentials>,
}

/// Bounded queue between the git thread and the publisher of one repository.
const EVENT_QUEUE: usize = 64;

impl Fetcher {
    pub fn new(cfg: FetchConfig, store: Store, bus: Arc<dyn Bus>) -> Self {
        let creds = Arc::new(git::Credentials::from_config(&cfg, |k| {
            std::env::var(k).ok()
        }));
        Self {
            cfg,
            store,
            bus,
            creds,
        }
    }

    /// Runs over every repository; one repository's failure is reported, never fatal.
    pub async fn run(
        &self,
        specs: &[RepoSpec],
        opts: &RunOptions,
        observer: Arc<dyn Observer>,
    ) -> RunReport {
        let run = RunId::new();
        let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let reports: Vec<RepoReport> = futures::stream::iter(specs.iter().cloned())
            .map(|spec| {
                let observer = observer.clone();
                let run = run.clone();
                async move {
                    observer.repo_started(&spec.display_url);
                    let t0 = Instant::now();
                    let mut report = RepoReport {
                        repo: Some(spec.id.clone()),
                        url: spec.display_url.clone(),
                        ..RepoReport::default()
                    };
                    if let Err(f) = self
                        .one(&spec, opts, &run, &mut report, observer.as_ref())
                        .await
                    {
                        tracing::warn!(repo = %spec.id, reason = f.reason.as_str(), error = %f.message, "repository failed");
                        report.status = "failed";
                        report.failure = Some(f);
                    }
                    report.millis = t0.elapsed().as_millis() as u64;
                    observer.repo_finished(&report);
                    report
                }
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
        let mut reports = reports;
        reports.sort_by(|a, b| a.url.cmp(&b.url));
        let report = RunReport {
            run,
            stage: records::Stage::Fetch,
            dry_run: opts.dry_run,
            started_at: started_at.to_string(),
            finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
            repos: reports,
        };
        if !opts.dry_run {
            if let Err(e) = self.record_list(specs, &report.run, opts.keep_others).await {
                tracing::error!(error = %e, "cannot write the repository list");
            }
            if let Err(e) = self.store.put_json(&keys::run(&report.run), &report).await {
                tracing::error!(error = %e, "cannot write the run report");
            }
        }
        report
    }

    /// Writes `repos/list.json`: the run's repositories, or (with `keep_others`) those added
    /// to the list already recorded.
    async fn record_list(
        &self,
        specs: &[RepoSpec],
        run: &RunId,
        keep_others: bool,
    ) -> Result<(), trawl_core::Error> {
        let mut repos: Vec<RepoId> = specs.iter().map(|s| s.id.clone()).collect();
        if keep_others {
            let Some(old) = self.store.get_json::<RepoList>(keys::REPO_LIST).await? else {
                // No list yet: every recorded repository counts, the new ones among them.
                return Ok(());
            };
            repos.extend(old.repos);
        }
        repos.sort();
        repos.dedup();
        let list = RepoList {
            schema_version: REPO_LIST_VERSION,
            run: run.clone(),
            written_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            repos,
        };
        self.store.put_json(keys::REPO_LIST, &list).await
    }

    async fn one(
        &self,
        spec: &RepoSpec,
        opts: &RunOptions,
        run: &RunId,
        report: &mut RepoReport,
        observer: &dyn Observer,
    ) -> Result<(), RepoFailure> {
        let output = |e: trawl_core::Error| RepoFailure::new(FailureReason::Output, e.to_string());
        let policy = policy::Policy::new(
            &spec.include,
            &[spec.exclude.clone(), self.cfg.exclude.clone()].concat(),
            self.cfg.max_file_bytes,
            self.cfg.max_line_bytes,
        )
        .and_then(|p| p.with_secrets_allow(&self.cfg.secrets_allow))
        .map_err(|e| RepoFailure::new(FailureReason::Config, e.to_string()))?;
        let state: Option<RepoState> = self
            .store
            .get_json(&keys::repo_state(&spec.id))
            .await
            .map_err(output)?;

        // 1. sync, and resolve the commit to diff from.
        let cache = self.cfg.cache_dir.clone();
        let deadline = Instant::now() + Duration::from_secs(self.cfg.timeout_secs);
        let (sync_spec, since, creds) = (spec.clone(), opts.since.clone(), self.creds.clone());
        let (synced, old) = tokio::task::spawn_blocking(move || {
            let synced = git::sync(
                &cache,
                &sync_spec.id.key(),
                &sync_spec.url,
                sync_spec.branch.as_deref(),
                &creds,
                deadline,
            )?;
            let old = match since {
                Some(s) => Some(git::resolve_commit(&synced.repo, &s)?.to_string()),
                None => None,
            };
            Ok::<_, RepoFailure>((synced, old))
        })
        .await
        .map_err(|e| RepoFailure::new(FailureReason::Other, format!("sync task: {e}")))??;
        let old = old.or_else(|| state.as_ref().map(|s| s.last_commit.to_string()));
        report.branch = Some(synced.branch.clone());
        report.old_commit.clone_from(&old);
        report.new_commit = Some(synced.head.to_string());
        let head = commit_id(synced.head);
        // Files chunked by another chunker version are sent again, whatever moved.
        let rechunk = match (&opts.chunker_version, &state) {
            (Some(now), Some(s)) => s.chunker_version.as_ref() != Some(now),
            _ => false,
        };
        report.rechunked = rechunk;
        if opts.since.is_none()
            && !opts.rescan_secrets
            && !rechunk
            && old.as_deref() == Some(head.as_str())
        {
            report.status = "unchanged";
            return Ok(());
        }

        // The commits since the last indexed one (the last `fetch.commit_history` on a first
        // run), for their messages: why the code changed.
        let limit = match (self.cfg.commit_history, &old) {
            (0, _) => 0,
            (n, None) => n,
            (_, Some(_)) => MAX_NEW_COMMITS,
        };
        let since = old.as_deref().and_then(|c| Oid::from_str(c).ok());
        let (synced, history) = tokio::task::spawn_blocking(move || {
            let h = git::history(&synced.repo, synced.head, since, limit);
            (synced, h)
        })
        .await
        .map_err(|e| RepoFailure::new(FailureReason::Other, format!("history task: {e}")))?;
        let commits = match history {
            Ok(h) => commit_records(&spec.id, h),
            Err(e) => {
                tracing::warn!(repo = %spec.id, error = %e, "cannot read the commit history; indexing the files without it");
                Vec::new()
            }
        };
        report.commits = commits.len() as u64;

        // 2. the previous manifest, when the store has it.
        let prev_rows: HashMap<String, ManifestRow> = match &old {
            Some(c) => match c.parse::<CommitId>() {
                Ok(c) => match self.store.get(&keys::manifest(&spec.id, &c)).await {
                    Ok(Some(bytes)) => records::from_parquet::<ManifestRow>(bytes)
                        .map_err(output)?
                        .into_iter()
                        .map(|r| (r.path.clone(), r))
                        .collect(),
                    Ok(None) => HashMap::new(),
                    Err(e) => return Err(output(e)),
                },
                Err(_) => HashMap::new(),
            },
            None => HashMap::new(),
        };

        // 3. diff and classify on the blocking pool, streaming what it finds.
        let (tx, mut rx) = mpsc::channel::<Emitted>(EVENT_QUEUE);
        let job = DiffJob {
            synced,
            old,
            prev_rows,
            policy,
            repo: spec.id.clone(),
            run: run.clone(),
            rescan_secrets: opts.rescan_secrets,
            rechunk,
        };
        let worker = tokio::task::spawn_blocking(move || job.run(&tx));
        while let Some(item) = rx.recv().await {
            match &item {
                Emitted::Event(ev) => {
                    match ev.op {
                        FileOp::Upsert => report.upserts += 1,
                        FileOp::Delete => report.deletes += 1,
                    }
                    if ev.renamed_from.is_some() {
                        report.renames += 1;
                    }
                    report.bytes += ev.content.as_ref().map_or(0, |c| c.len() as u64);
                    if !opts.dry_run {
                        self.bus
                            .publish(FILES_TOPIC, spec.id.as_str(), ev.to_json())
                            .await
                            .map_err(output)?;
                    }
                }
                Emitted::Skip { reason, .. } => *report.skips.entry(*reason).or_default() += 1,
            }
            observer.emitted(&item);
        }
        let (rows, tally) = worker
            .await
            .map_err(|e| RepoFailure::new(FailureReason::Other, format!("diff task: {e}")))??;
        report.files = rows.len() as u64;
        report.secrets_skipped = tally.skipped;
        report.secrets_redacted = tally.redacted;
        report.status = "updated";
        if opts.dry_run {
            return Ok(());
        }

        // 4. manifest and commit messages, then state: only now is the commit indexed.
        let parquet = records::to_parquet(&rows).map_err(output)?;
        self.store
            .put(&keys::manifest(&spec.id, &head), parquet)
            .await
            .map_err(output)?;
        if !commits.is_empty() {
            self.store
                .put_json(&keys::commits(&spec.id, &head), &commits)
                .await
                .map_err(output)?;
        }
        let state = RepoState {
            schema_version: REPO_STATE_VERSION,
            repo: spec.id.clone(),
            url: spec.display_url.clone(),
            branch: report.branch.clone().unwrap_or_default(),
            last_commit: head,
            last_run: run.clone(),
            indexed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            chunker_version: opts
                .chunker_version
                .clone()
                .or_else(|| state.as_ref().and_then(|s| s.chunker_version.clone())),
        };
        if opts.defer_state {
            report.pending_state = Some(state);
            return Ok(());
        }
        self.store
            .put_json(&keys::repo_state(&spec.id), &state)
            .await
            .map_err(output)?;
        Ok(())
    }

    /// Records the states a run with [`RunOptions::defer_state`] left pending.
    pub async fn commit_states(&self, report: &RunReport) -> Result<(), trawl_core::Error> {
        self.commit_states_unfinished(report, &std::collections::BTreeSet::new())
            .await
    }

    /// [`Fetcher::commit_states`], but the repositories in `unfinished` (files of the run not
    /// chunked yet) are recorded without a chunker version: a run that stops before they are
    /// chunked leaves them to be sent whole again by the next one, as for a new chunker (what
    /// is chunked already keeps its vectors). Their state is recorded again, complete, when
    /// the rest is chunked.
    pub async fn commit_states_unfinished(
        &self,
        report: &RunReport,
        unfinished: &std::collections::BTreeSet<RepoId>,
    ) -> Result<(), trawl_core::Error> {
        for r in &report.repos {
            if let (Some(state), Some(repo)) = (&r.pending_state, &r.repo) {
                if unfinished.contains(repo) {
                    let mut state = state.clone();
                    state.chunker_version = None;
                    self.store.put_json(&keys::repo_state(repo), &state).await?;
                } else {
                    self.store.put_json(&keys::repo_state(repo), state).await?;
                }
            }
        }
        Ok(())
    }
}

/// Most commits recorded by one run of a repository after its first.
const MAX_NEW_COMMITS: usize = 1000;

/// The records of `history`, messages redacted by the secret rules (a commit whose message
/// a rule says not to publish at all is left out).
fn commit_records(repo: &RepoId, history: Vec<git::HistoryCommit>) -> Vec<CommitRecord> {
    history
        .into_iter()
        .filter_map(|c| {
            let message = match secrets::scan(&c.message) {
                secrets::Verdict::Clean(t) => t.to_owned(),
                secrets::Verdict::Redacted { text, .. } => text,
                secrets::Verdict::Skip(_) => return None,
            };
            let at = std::time::UNIX_EPOCH + Duration::from_secs(c.time.max(0) as u64);
            Some(CommitRecord {
                repo_id: repo.clone(),
                commit: commit_id(c.id),
                authored_at: humantime::format_rfc3339_seconds(at).to_string(),
                message,
                paths: c.paths,
                hunks: c.hunks,
            })
        })
        .collect()
}

fn commit_id(oid: Oid) -> CommitId {
    oid.to_string().parse().expect("git oids are hex")
}

fn blob_id(oid: Oid) -> BlobId {
    oid.to_string().parse().expect("git oids are hex")
}

/// How a path changed between the old listing and the new tree.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    Renamed { from: String },
}

struct DiffJob {
    synced: git::Synced,
    old: Option<String>,
    prev_rows: HashMap<String, ManifestRow>,
    policy: policy::Policy,
    repo: RepoId,
    run: RunId,
    /// [`RunOptions::rescan_secrets`].
    rescan_secrets: bool,
    /// Send every indexed file again, unchanged ones too ([`RunOptions::chunker_version`]).
    rechunk: bool,
}

/// What the policy decided for one file of the new tree.
struct Classified {
    row: ManifestRow,
    /// The text to publish, or why not.
    outcome: Result<String, SkipReason>,
    /// The secret rule that skipped the file, or the rules whose secrets were redacted.
    secrets: Vec<&'static str>,
}

/// Files skipped or redacted by secret rules in one repository's run, by rule id.
#[derive(Default)]
struct SecretTally {
    skipped: BTreeMap<&'static str, u64>,
    redacted: BTreeMap<&'static str, u64>,
}

impl SecretTally {
    fn add(&mut self, c: &Classified) {
        let by_rule = match c.outcome {
            Ok(_) => &mut self.redacted,
            Err(_) => &mut self.skipped,
        };
        for rule in &c.secrets {
            *by_rule.entry(rule).or_default() += 1;
        }
    }
}

impl DiffJob {
    fn run(
        self,
        tx: &mpsc::Sender<Emitted>,
    ) -> Result<(Vec<ManifestRow>, SecretTally), RepoFailure> {
        let corrupt = |e: git2::Error| RepoFailure::new(FailureReason::Corrupt, e.message());
        let repo = &self.synced.repo;
        let head = commit_id(self.synced.head);
        let new = git::list_tree(repo, self.synced.head).map_err(corrupt)?;

        // The old listing: the mirror's tree of the old commit, else the old manifest.
        let old_listing: HashMap<String, Oid> = match self
            .old
            .as_deref()
            .and_then(|c| Oid::from_str(c).ok())
            .filter(|oid| repo.find_commit(*oid).is_ok())
        {
            Some(oid) => git::list_tree(repo, oid)
                .map_err(corrupt)?
                .into_iter()
                .map(|e| (e.path, e.oid))
                .collect(),
            None => self
                .prev_rows
                .values()
                .filter_map(|r| {
                    Some((
                        r.path.clone(),
                        Oid::from_str(r.blob.as_ref()?.as_str()).ok()?,
                    ))
                })
                .collect(),
        };

        // Exact renames: a vanished path whose blob appears at a new path.
        let new_paths: HashMap<&str, Oid> = new.iter().map(|e| (e.path.as_str(), e.oid)).collect();
        let mut vanished_by_blob: HashMap<Oid, Vec<&str>> = HashMap::new();
        let mut vanished: Vec<&str> = old_listing
            .keys()
            .map(String::as_str)
            .filter(|p| !new_paths.contains_key(p))
            .collect();
        vanished.sort_unstable();
        for p in &vanished {
            vanished_by_blob.entry(old_listing[*p]).or_default().push(p);
        }
        for v in vanished_by_blob.values_mut() {
            v.reverse(); // pop() takes the first path in order
        }

        let send = |item: Emitted| {
            tx.blocking_send(item)
                .map_err(|_| RepoFailure::new(FailureReason::Output, "the publisher stopped"))
        };
        let mut rows = Vec::with_capacity(new.len());
        let mut tally = SecretTally::default();
        let mut renamed_away: std::collections::HashSet<String> = std::collections::HashSet::new();
        for entry in &new {
            let change = match old_listing.get(&entry.path) {
                Some(oid) if *oid == entry.oid => None,
                Some(_) => Some(Change::Modified),
                None => match vanished_by_blob.get_mut(&entry.oid).and_then(Vec::pop) {
                    Some(from) => Some(Change::Renamed {
                        from: from.to_owned(),
                    }),
                    None => Some(Change::Added),
                },
            };
            let Some(change) = change else {
                if self.rescan_secrets || self.rechunk {
                    let c = self.classify(entry, &head)?;
                    tally.add(&c);
                    let item = match &c.outcome {
                        Ok(text) if self.rechunk => Some(self.upsert(&c, &head, text, None)),
                        _ => self.rescanned(entry, &head, &c),
                    };
                    if let Some(item) = item {
                        send(item)?;
                    }
                    rows.push(c.row);
                    continue;
                }
                // Unchanged: reuse the previous row when there is one.
                let row = match self.prev_rows.get(&entry.path) {
                    Some(prev) => ManifestRow {
                        commit: head.clone(),
                        ..prev.clone()
                    },
                    None => self.classify(entry, &head)?.row,
                };
                rows.push(row);
                continue;
            };
            let c = self.classify(entry, &head)?;
            tally.add(&c);
            match (&c.outcome, &change) {
                (Ok(text), _) => {
                    let renamed_from = match &change {
                        Change::Renamed { from } => {
                            renamed_away.insert(from.clone());
                            Some(from.clone())
                        }
                        _ => None,
                    };
                    send(self.upsert(&c, &head, text, renamed_from))?;
                }
                (Err(_), Change::Modified) if self.was_indexed(&entry.path) => {
                    // No longer indexable: its chunks must go. A secret path is not named on
                    // the bus, unless it was indexed before (under older rules): its name is
                    // out already, and its chunks must go most of all.
                    if !self.policy.is_secret_path(&entry.path) || self.indexed_before(&entry.path)
                    {
                        send(self.delete(&entry.path, &head))?;
                    }
                }
                (Err(reason), _) => {
                    let reason = *reason;
                    send(Emitted::Skip {
                        repo: self.repo.clone(),
                        path: entry.path.clone(),
                        blob: c.row.blob.clone(),
                        language: c.row.language.clone(),
                        size: c.row.size,
                        reason,
                        rule: c.secrets.first().copied(),
                    })?;
                }
            }
            rows.push(c.row);
        }
        for path in vanished {
            if renamed_away.contains(path) || !self.was_indexed(path) {
                continue;
            }
            if self.policy.is_secret_path(path) && !self.indexed_before(path) {
                continue;
            }
            send(self.delete(path, &head))?;
        }
        Ok((rows, tally))
    }

    /// True unless the previous manifest says the path was skipped.
    fn was_indexed(&self, path: &str) -> bool {
        self.prev_rows
            .get(path)
            .is_none_or(|r| r.skip_reason.is_none())
    }

    /// True when the previous manifest says the path was indexed (not merely unknown).
    fn indexed_before(&self, path: &str) -> bool {
        self.prev_rows
            .get(path)
            .is_some_and(|r| r.skip_reason.is_none())
    }

    /// With [`RunOptions::rescan_secrets`]: what an unchanged file needs now that the secret
    /// rules may judge it otherwise than when it was indexed.
    fn rescanned(&self, entry: &git::Entry, head: &CommitId, c: &Classified) -> Option<Emitted> {
        let prev = self.prev_rows.get(&entry.path);
        let was_secret =
            prev.is_some_and(|r| r.skip_reason.as_deref() == Some(SkipReason::Secret.as_str()));
        match &c.outcome {
            // Redacted now (perhaps published whole before), or no longer taken for a secret.
            Ok(text) if !c.secrets.is_empty() || was_secret => {
                Some(self.upsert(c, head, text, None))
            }
            Err(SkipReason::Secret) if self.indexed_before(&entry.path) => {
                Some(self.delete(&entry.path, head))
            }
            _ => None,
        }
    }

    fn upsert(
        &self,
        c: &Classified,
        head: &CommitId,
        text: &str,
        renamed_from: Option<String>,
    ) -> Emitted {
        Emitted::Event(FileEvent {
            schema_version: FILE_EVENT_VERSION,
            op: FileOp::Upsert,
            repo: self.repo.clone(),
            commit: head.clone(),
            path: c.row.path.clone(),
            renamed_from,
            blob: c.row.blob.clone(),
            language: c.row.language.clone(),
            size: c.row.size,
            encoding: c.row.encoding.clone(),
            content: Some(text.to_owned()),
            run: self.run.clone(),
        })
    }

    fn delete(&self, path: &str, head: &CommitId) -> Emitted {
        Emitted::Event(FileEvent {
            schema_version: FILE_EVENT_VERSION,
            op: FileOp::Delete,
            repo: self.repo.clone(),
            commit: head.clone(),
            path: path.to_owned(),
            renamed_from: None,
            blob: None,
            language: self.prev_rows.get(path).and_then(|r| r.language.clone()),
            size: 0,
            encoding: None,
            content: None,
            run: self.run.clone(),
        })
    }

    fn classify(&self, entry: &git::Entry, head: &CommitId) -> Result<Classified, RepoFailure> {
        let repo = &self.synced.repo;
        let corrupt = |e: git2::Error| {
            RepoFailure::new(
                FailureReason::Corrupt,
                format!("{}: {}", entry.path, e.message()),
            )
        };
        let size = match entry.kind {
            policy::EntryKind::File => {
                repo.odb()
                    .map_err(corrupt)?
                    .read_header(entry.oid)
                    .map_err(corrupt)?
                    .0 as u64
            }
            _ => 0,
        };
        let mut row = ManifestRow {
            schema_version: MANIFEST_VERSION,
            repo_id: self.repo.clone(),
            commit: head.clone(),
            path: entry.path.clone(),
            blob: Some(blob_id(entry.oid)),
            language: language::detect(&entry.path, b"").map(str::to_owned),
            size,
            skip_reason: None,
            encoding: None,
        };
        if let Some(reason) = self.policy.check_path(&entry.path, entry.kind, size) {
            row.skip_reason = Some(reason.as_str().to_owned());
            let secrets = match reason {
                SkipReason::Secret => self.policy.secret_path_rule(&entry.path),
                _ => None,
            };
            return Ok(Classified {
                row,
                outcome: Err(reason),
                secrets: secrets.into_iter().collect(),
            });
        }
        let blob = repo.find_blob(entry.oid).map_err(corrupt)?;
        let content = blob.content();
        if row.language.is_none() {
            row.language = language::detect(&entry.path, &content[..content.len().min(256)])
                .map(str::to_owned);
        }
        match self.policy.check_content(&entry.path, content) {
            policy::Content::Text {
                text,
                encoding,
                redactions,
            } => {
                row.encoding = encoding.map(str::to_owned);
                let mut secrets: Vec<&'static str> = redactions.iter().map(|f| f.rule).collect();
                secrets.sort_unstable();
                secrets.dedup();
                if !secrets.is_empty() {
                    tracing::debug!(repo = %self.repo, path = %entry.path, rules = ?secrets, "secrets redacted");
                }
                Ok(Classified {
                    row,
                    outcome: Ok(text),
                    secrets,
                })
            }
            policy::Content::Skip(reason) => {
                row.skip_reason = Some(reason.as_str().to_owned());
                Ok(Classified {
                    row,
                    outcome: Err(reason),
                    secrets: Vec::new(),
                })
            }
            policy::Content::Secret(finding) => {
                row.skip_reason = Some(SkipReason::Secret.as_str().to_owned());
                Ok(Classified {
                    row,
                    outcome: Err(SkipReason::Secret),
                    secrets: vec![finding.rule],
                })
            }
        }
    }
}
