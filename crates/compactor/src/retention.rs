//! Retention for what grows with every run beside the index generations (which [`crate::gc()`]
//! collects): run reports, large bus payloads, superseded repository manifests, and every
//! object of a repository that left the list.
//!
//! Nothing younger than the grace period is touched, so a fetch or chunk run in flight (whose
//! new manifest is written before its state) never loses what it just wrote. Chunk parts of
//! repositories still on the list, and embedding parts of the live vector space, are collected
//! by [`crate::parts`], from the live `chunks` table.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, SystemTime};

use trawl_core::ids::RepoId;
use trawl_core::records::{RepoList, RepoState, Stage};
use trawl_core::store::{Store, keys};

use crate::CompactError;

/// How long things are kept.
#[derive(Clone, Debug)]
pub struct RetentionOptions {
    /// Run reports older than this are deleted (the newest of each stage always stays);
    /// `None` keeps them all.
    pub run_reports: Option<Duration>,
    /// Large Kafka payloads (`bus/large/`) older than this are deleted: a message that still
    /// refers to one has outlived the topic's own retention. `None` keeps them.
    pub large_payloads: Option<Duration>,
    /// Nothing modified more recently than this is deleted.
    pub grace: Duration,
}

/// What [`retain`] deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RetentionReport {
    pub run_reports: u64,
    pub large_payloads: u64,
    pub manifests: u64,
    /// Repositories no longer on the list whose objects were deleted.
    pub removed_repos: Vec<String>,
    /// Their objects: state, manifests, chunk parts.
    pub removed_repo_objects: u64,
}

fn older_than(t: SystemTime, age: Duration) -> bool {
    t.elapsed().is_ok_and(|a| a >= age)
}

/// Applies retention to the store.
pub async fn retain(
    store: &Store,
    opts: &RetentionOptions,
) -> Result<RetentionReport, CompactError> {
    let mut report = RetentionReport::default();
    if let Some(age) = opts.run_reports {
        report.run_reports = run_reports(store, age.max(opts.grace)).await?;
    }
    if let Some(age) = opts.large_payloads {
        for (key, modified) in store.list_modified("bus/large/").await? {
            if older_than(modified, age.max(opts.grace)) {
                store.delete(&key).await?;
                report.large_payloads += 1;
            }
        }
    }

    let list: Option<HashSet<RepoId>> = store
        .get_json::<RepoList>(keys::REPO_LIST)
        .await?
        .map(|l| l.repos.into_iter().collect());
    let mut states: BTreeMap<RepoId, (RepoState, SystemTime)> = BTreeMap::new();
    for (key, modified) in store.list_modified("repos/").await? {
        if key.ends_with("/state.json")
            && let Some(s) = store.get_json::<RepoState>(&key).await?
        {
            states.insert(s.repo.clone(), (s, modified));
        }
    }

    // Manifests: only each repository's last one is read by anyone.
    let last: HashSet<String> = states
        .values()
        .map(|(s, _)| keys::manifest(&s.repo, &s.last_commit))
        .collect();
    let listed_keys: BTreeSet<String> = states.keys().map(RepoId::key).collect();
    for (key, modified) in store.list_modified("manifests/").await? {
        let repo_key = key
            .strip_prefix("manifests/repo=")
            .and_then(|r| r.split_once('/'))
            .map(|(k, _)| k.to_owned());
        let known = repo_key.as_ref().is_some_and(|k| listed_keys.contains(k));
        if known && !last.contains(&key) && older_than(modified, opts.grace) {
            store.delete(&key).await?;
            report.manifests += 1;
        }
    }

    // Repositories that left the list: everything of theirs, once the grace has passed.
    if let Some(list) = list {
        for (repo, (state, modified)) in &states {
            if list.contains(repo) || !older_than(*modified, opts.grace) {
                continue;
            }
            let k = repo.key();
            let mut n = 0;
            for prefix in [
                format!("manifests/repo={k}/"),
                format!("chunks/repo={k}/"),
                format!("commits/repo={k}/"),
            ] {
                for key in store.list(&prefix).await? {
                    store.delete(&key).await?;
                    n += 1;
                }
            }
            store.delete(&keys::repo_state(&state.repo)).await?;
            report.removed_repo_objects += n + 1;
            report.removed_repos.push(repo.to_string());
        }
    }
    Ok(report)
}

/// Deletes run reports older than `age`, keeping the newest of each stage.
async fn run_reports(store: &Store, age: Duration) -> Result<u64, CompactError> {
    let mut reports = store.list_modified("runs/").await?;
    // Run ids begin with their start time: newest last.
    reports.sort();
    let mut newest_seen: HashSet<Option<Stage>> = HashSet::new();
    let mut deleted = 0;
    for (key, modified) in reports.into_iter().rev() {
        // The stage only: a report of a stage this release does not know counts as one more.
        #[derive(serde::Deserialize)]
        struct Tagged {
            stage: Stage,
        }
        let stage = store
            .get_json::<Tagged>(&key)
            .await
            .ok()
            .flatten()
            .map(|t| t.stage);
        if newest_seen.insert(stage) {
            continue;
        }
        if older_than(modified, age) {
            store.delete(&key).await?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use trawl_core::ids::{CommitId, RunId};
    use trawl_core::records::{REPO_LIST_VERSION, REPO_STATE_VERSION};

    use super::*;

    fn commit(n: u8) -> CommitId {
        format!("{n:02x}").repeat(20).parse().unwrap()
    }

    async fn state(store: &Store, repo: &RepoId, last: u8) {
        let s = RepoState {
            schema_version: REPO_STATE_VERSION,
            repo: repo.clone(),
            url: format!("https://{repo}"),
            branch: "main".into(),
            last_commit: commit(last),
            last_run: RunId::new(),
            indexed_at: "2026-11-30T00:00:00Z".into(),
            chunker_version: None,
        };
        store.put_json(&keys::repo_state(repo), &s).await.unwrap();
        for c in 1..=last {
            store
                .put(&keys::manifest(repo, &commit(c)), Bytes::from_static(b"m"))
                .await
                .unwrap();
        }
        store
            .put(
                &format!("chunks/repo={}/part.parquet", repo.key()),
                Bytes::from_static(b"c"),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn superseded_manifests_and_unlisted_repositories_go_the_listed_ones_stay() {
        let store = Store::memory();
        let kept = RepoId::parse("github.com/acme/kept").unwrap();
        let gone = RepoId::parse("github.com/acme/gone").unwrap();
        state(&store, &kept, 3).await;
        state(&store, &gone, 1).await;
        let list = RepoList {
            schema_version: REPO_LIST_VERSION,
            run: RunId::new(),
            written_at: "2026-11-30T00:00:00Z".into(),
            repos: vec![kept.clone()],
        };
        store.put_json(keys::REPO_LIST, &list).await.unwrap();

        // Within the grace period nothing goes.
        let hour = RetentionOptions {
            run_reports: None,
            large_payloads: None,
            grace: Duration::from_secs(3600),
        };
        assert_eq!(
            retain(&store, &hour).await.unwrap(),
            RetentionReport::default()
        );

        let now = RetentionOptions {
            run_reports: None,
            large_payloads: None,
            grace: Duration::ZERO,
        };
        let r = retain(&store, &now).await.unwrap();
        assert_eq!(r.manifests, 2, "{r:?}");
        assert_eq!(r.removed_repos, [gone.to_string()]);
        assert_eq!(r.removed_repo_objects, 3);
        assert!(
            store
                .exists_key(&keys::manifest(&kept, &commit(3)))
                .await
                .unwrap()
        );
        assert!(
            !store
                .exists_key(&keys::manifest(&kept, &commit(2)))
                .await
                .unwrap()
        );
        assert!(store.exists_key(&keys::repo_state(&kept)).await.unwrap());
        assert!(!store.exists_key(&keys::repo_state(&gone)).await.unwrap());
        assert!(
            store
                .list(&format!("chunks/repo={}/", gone.key()))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            !store
                .list(&format!("chunks/repo={}/", kept.key()))
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn old_run_reports_and_large_payloads_go_but_the_newest_report_of_each_stage_stays() {
        let store = Store::memory();
        for (run, stage) in [
            ("r1", "fetch"),
            ("r2", "compact"),
            ("r3", "fetch"),
            ("r4", "fetch"),
        ] {
            store
                .put_json(
                    &format!("runs/{run}.json"),
                    &serde_json::json!({ "stage": stage }),
                )
                .await
                .unwrap();
        }
        store
            .put("bus/large/abc", Bytes::from_static(b"payload"))
            .await
            .unwrap();
        let keep_large = RetentionOptions {
            run_reports: Some(Duration::ZERO),
            large_payloads: Some(Duration::from_secs(86_400)),
            grace: Duration::ZERO,
        };
        let r = retain(&store, &keep_large).await.unwrap();
        assert_eq!((r.run_reports, r.large_payloads), (2, 0));
        let opts = RetentionOptions {
            large_payloads: Some(Duration::ZERO),
            ..keep_large
        };
        assert_eq!(retain(&store, &opts).await.unwrap().large_payloads, 1);
        assert_eq!(
            store.list("runs/").await.unwrap(),
            ["runs/r2.json", "runs/r4.json"]
        );
    }
}
