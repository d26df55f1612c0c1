//! Garbage collection of index generations: what neither the live generation nor a rollback
//! (nor a query node still serving the generation before a swap) needs is deleted, under the
//! compactor lease.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use trawl_core::ids::Generation;
use trawl_core::store::Store;
use trawl_index::generation::{CURRENT, current, generations, manifest, manifest_key};

use crate::CompactError;
use crate::lease::{self, Lease};

/// What [`gc`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub kept: Vec<Generation>,
    pub collected: Vec<Generation>,
    pub objects_deleted: u64,
}

/// Keeps the live generation and the `keep - 1` before it (for rollback) and deletes every
/// other object under `index/`: older generations, generations a crashed build left behind
/// `CURRENT`, and ones rolled back from. Segments that kept generations reuse from collected
/// ones stay.
///
/// Safe beside a running compactor: it takes the compactor lease, so it waits for no build
/// and no build starts while it deletes ([`CompactError::Busy`] when one is running). A
/// generation that was live, or was built, less than `grace` ago is kept too, so a query node
/// still serving the generation before a swap keeps its files.
pub async fn gc(store: &Store, keep: usize, grace: Duration) -> Result<GcReport, CompactError> {
    let lease = Lease::acquire(store, &lease::holder("gc"), Duration::from_secs(120)).await?;
    let report = gc_leased(store, keep, grace).await;
    if let Err(e) = lease.release().await {
        tracing::warn!(error = %e, "releasing the compactor lease (it expires by itself)");
    }
    report
}

/// When `created_at` (RFC 3339) is less than `grace` ago; unreadable times count as recent.
fn recent(created_at: &str, grace: Duration) -> bool {
    match humantime::parse_rfc3339_weak(created_at) {
        Ok(t) => t.elapsed().map_or(true, |age| age < grace),
        Err(_) => true,
    }
}

async fn gc_leased(store: &Store, keep: usize, grace: Duration) -> Result<GcReport, CompactError> {
    let Some((cur, _)) = current(store).await? else {
        return Ok(GcReport::default());
    };
    let all = generations(store).await?;
    let mut kept: Vec<Generation> = all
        .iter()
        .copied()
        .filter(|&g| g <= cur.generation)
        .rev()
        .take(keep.max(1))
        .collect();
    // The grace period: a generation built within it, or one whose successor was (it was
    // live until then, at most).
    let mut created: BTreeMap<Generation, String> = BTreeMap::new();
    for &g in &all {
        // An unreadable manifest counts as recent: gc never deletes what it cannot date.
        let at = manifest(store, g).await.map(|m| m.created_at);
        created.insert(g, at.unwrap_or_default());
    }
    for (i, &g) in all.iter().enumerate() {
        let successor_recent = all
            .get(i + 1)
            .is_some_and(|next| recent(&created[next], grace));
        if !kept.contains(&g) && (recent(&created[&g], grace) || successor_recent) {
            kept.push(g);
        }
    }
    kept.sort_unstable_by(|a, b| b.cmp(a));
    let mut live_prefixes: Vec<String> = Vec::new();
    for &g in &kept {
        let m = manifest(store, g).await?;
        live_prefixes.push(manifest_key(g));
        live_prefixes.extend(m.chunks_table.clone());
        for s in &m.shards {
            live_prefixes.extend(s.segments.iter().map(|seg| format!("{}/", seg.dir)));
            live_prefixes.extend(s.tombstones.clone());
        }
    }
    let mut report = GcReport {
        kept: kept.clone(),
        ..GcReport::default()
    };
    let mut collected = std::collections::BTreeSet::new();
    for key in store.list("index/").await? {
        if key == CURRENT
            || key.starts_with(lease::LEASE_PREFIX)
            || key.starts_with(lease::CLAIMS_PREFIX)
            || live_prefixes.iter().any(|p| key.starts_with(p.as_str()))
        {
            continue;
        }
        if let Some(g) = key
            .strip_prefix("index/gen=")
            .and_then(|r| r.split_once('/'))
            .and_then(|(n, _)| n.parse::<u64>().ok())
            .map(Generation)
        {
            collected.insert(g);
        }
        store.delete(&key).await?;
        report.objects_deleted += 1;
    }
    report.objects_deleted += lease::prune_claims(store).await?;
    report.collected = collected
        .into_iter()
        .filter(|g| !kept.contains(g))
        .collect();
    Ok(report)
}
