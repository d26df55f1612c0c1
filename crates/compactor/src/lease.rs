//! One compactor at a time, on a directory and on S3 alike: a lease taken by creating an
//! object that does not exist yet, and generation numbers claimed the same way.
//!
//! Both rest on one primitive every backend has: a put that succeeds only when the key is new
//! (S3 `If-None-Match: *`, `O_EXCL` on a directory). Updating an object in place is never
//! needed to decide who wins:
//!
//! - the lease is a sequence of epochs, `index/lease/<epoch>.json`; whoever creates epoch
//!   `e + 1` holds it. Epoch `e + 1` may be created only once epoch `e` has expired or been
//!   released. The holder renews by rewriting its own epoch (nobody else writes it) and then
//!   checks that no later epoch exists: a holder that stalled past its expiry finds out at
//!   its next renewal or before it swaps `CURRENT`, and stops.
//! - generation `n` is claimed by creating `index/claims/<n>`; the next number is one above
//!   every claim, generation and `CURRENT` seen, and a lost race moves on to the next. `gc`
//!   keeps the highest claim, so a number is never handed out twice, even after the
//!   generations above the live one are collected.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use trawl_core::ids::Generation;
use trawl_core::store::Store;

use crate::CompactError;

/// Where lease epochs live.
pub const LEASE_PREFIX: &str = "index/lease/";
/// Where generation claims live.
pub const CLAIMS_PREFIX: &str = "index/claims/";

/// `index/lease/<epoch>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Who holds it: host, process and what it is doing.
    pub holder: String,
    /// Seconds since the Unix epoch; 0 once released.
    pub expires_unix: u64,
    /// Makes each write's bytes unique, so a create whose answer was lost can be resolved by
    /// reading the object back.
    #[serde(default)]
    pub nonce: String,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lease_key(epoch: u64) -> String {
    format!("{LEASE_PREFIX}{epoch:020}.json")
}

fn claim_key(generation: Generation) -> String {
    format!("{CLAIMS_PREFIX}{:020}", generation.0)
}

/// The numbers after `prefix` of the keys under it, ascending.
async fn numbered(store: &Store, prefix: &str) -> Result<Vec<u64>, CompactError> {
    let mut out: Vec<u64> = store
        .list(prefix)
        .await?
        .iter()
        .filter_map(|k| {
            let rest = k.strip_prefix(prefix)?;
            rest.trim_end_matches(".json").parse().ok()
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// A description of this process for the lease: host, pid and what it does.
pub fn holder(what: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{what} on {host} (pid {})", std::process::id())
}

/// The compactor lease, held until [`Lease::release`] (or dropped: then it expires).
pub struct Lease {
    store: Store,
    epoch: u64,
    holder: String,
    ttl: Duration,
    lost: Arc<AtomicBool>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("epoch", &self.epoch)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("lost", &self.lost.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Takes the lease for `ttl` (renewed in the background every third of it), or fails
    /// with [`CompactError::Busy`] naming the holder when another process has it.
    pub async fn acquire(store: &Store, holder: &str, ttl: Duration) -> Result<Self, CompactError> {
        let ttl = ttl.max(Duration::from_secs(2));
        let epochs = numbered(store, LEASE_PREFIX).await?;
        let last = epochs.last().copied();
        if let Some(e) = last
            && let Some(rec) = store.get_json::<LeaseRecord>(&lease_key(e)).await?
            && rec.expires_unix > now_unix()
        {
            return Err(busy(&rec));
        }
        let epoch = last.map_or(1, |e| e + 1);
        let record = LeaseRecord {
            holder: holder.to_owned(),
            expires_unix: now_unix() + ttl.as_secs(),
            nonce: unique(holder),
        };
        if !store.create(&lease_key(epoch), json(&record)).await? {
            // Someone else took this epoch between our look and our put.
            let rec = store
                .get_json::<LeaseRecord>(&lease_key(epoch))
                .await?
                .unwrap_or(record);
            return Err(busy(&rec));
        }
        for old in epochs {
            store.delete(&lease_key(old)).await?;
        }
        tracing::debug!(epoch, holder, "compactor lease taken");
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (store, holder, lost) = (store.clone(), holder.to_owned(), lost.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    match renew(&store, epoch, &holder, ttl).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::error!(epoch, "the compactor lease was taken over: stopping");
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "renewing the compactor lease"),
                    }
                }
            })
        };
        Ok(Self {
            store: store.clone(),
            epoch,
            holder: holder.to_owned(),
            ttl,
            lost,
            renewer: Some(renewer),
        })
    }

    /// Fails when the lease has been lost (it expired and another process took it), checked
    /// in the store now: call it before any step that must not happen twice.
    pub async fn check(&self) -> Result<(), CompactError> {
        if self.lost.load(Ordering::SeqCst)
            || !renew(&self.store, self.epoch, &self.holder, self.ttl).await?
        {
            self.lost.store(true, Ordering::SeqCst);
            return Err(CompactError::Conflict(format!(
                "the compactor lease (epoch {}) expired and another compactor took it over: this build stops; the other one's result stands",
                self.epoch
            )));
        }
        Ok(())
    }

    /// Gives the lease back (it stays as a released epoch, so epochs keep increasing).
    pub async fn release(mut self) -> Result<(), CompactError> {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        if self.lost.load(Ordering::SeqCst) || !still_ours(&self.store, self.epoch).await? {
            return Ok(());
        }
        let record = LeaseRecord {
            holder: self.holder.clone(),
            expires_unix: 0,
            nonce: unique(&self.holder),
        };
        put_retrying(&self.store, &lease_key(self.epoch), json(&record)).await?;
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
    }
}

/// No epoch after `epoch` exists.
async fn still_ours(store: &Store, epoch: u64) -> Result<bool, CompactError> {
    Ok(numbered(store, LEASE_PREFIX)
        .await?
        .last()
        .is_none_or(|&e| e <= epoch))
}

/// Extends `epoch` to now + `ttl`; `false` when a later epoch exists (the lease was lost).
async fn renew(
    store: &Store,
    epoch: u64,
    holder: &str,
    ttl: Duration,
) -> Result<bool, CompactError> {
    if !still_ours(store, epoch).await? {
        return Ok(false);
    }
    let record = LeaseRecord {
        holder: holder.to_owned(),
        expires_unix: now_unix() + ttl.as_secs(),
        nonce: unique(holder),
    };
    put_retrying(store, &lease_key(epoch), json(&record)).await?;
    // A taker that read the old expiry may have created the next epoch meanwhile.
    still_ours(store, epoch).await
}

/// A plain put, tried again on a store error (a stalled or throttled request): lease writes
/// are small and idempotent, and a lease must not be lost to one slow request.
async fn put_retrying(store: &Store, key: &str, bytes: Bytes) -> Result<(), CompactError> {
    let mut delays =
        trawl_core::retry::delays(Duration::from_millis(400), Duration::from_secs(4), 4);
    loop {
        match store.put(key, bytes.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) => match delays.next() {
                Some(delay) => {
                    tracing::warn!(key, error = %e, ?delay, "lease write failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(e.into()),
            },
        }
    }
}

/// Bytes no other writer produces: the holder, the time and a per-process counter.
fn unique(holder: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{holder} {nanos} {}", N.fetch_add(1, Ordering::Relaxed))
}

fn busy(rec: &LeaseRecord) -> CompactError {
    let left = rec.expires_unix.saturating_sub(now_unix());
    CompactError::Busy(format!(
        "another compactor holds the index lease ({}; it expires in {left} s unless renewed): wait for it to finish, or stop it; a second compactor never builds at the same time",
        rec.holder
    ))
}

fn json<T: Serialize>(v: &T) -> Bytes {
    Bytes::from(serde_json::to_vec_pretty(v).expect("serialisable"))
}

/// Claims the next generation number: one above every claim, every generation listed and
/// `at_least - 1`. Never returns a number returned before on this store.
pub async fn claim_generation(
    store: &Store,
    at_least: Generation,
) -> Result<Generation, CompactError> {
    let highest_claim = numbered(store, CLAIMS_PREFIX)
        .await?
        .last()
        .copied()
        .map(Generation);
    let highest_gen = trawl_index::generation::generations(store)
        .await?
        .last()
        .copied();
    let mut next = highest_claim
        .max(highest_gen)
        .map_or(Generation::FIRST, Generation::next)
        .max(at_least);
    loop {
        let mine = Bytes::from(unique("claim"));
        if store.create(&claim_key(next), mine).await? {
            return Ok(next);
        }
        next = next.next();
    }
}

/// Deletes every claim below the highest (the highest is the high-water mark).
pub async fn prune_claims(store: &Store) -> Result<u64, CompactError> {
    let claims = numbered(store, CLAIMS_PREFIX).await?;
    let mut deleted = 0;
    if let Some((_, older)) = claims.split_last() {
        for &c in older {
            store.delete(&claim_key(Generation(c))).await?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::from_url(dir.path().to_str().unwrap()).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn a_second_holder_is_refused_until_the_first_releases() {
        let (_d, store) = dir_store();
        let a = Lease::acquire(&store, "a", Duration::from_secs(60))
            .await
            .unwrap();
        let err = Lease::acquire(&store, "b", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CompactError::Busy(ref m) if m.contains("(a;")),
            "{err}"
        );
        a.check().await.unwrap();
        a.release().await.unwrap();
        let b = Lease::acquire(&store, "b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(b.epoch, 2, "epochs increase across holders");
        b.release().await.unwrap();
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_its_holder_finds_out() {
        let (_d, store) = dir_store();
        let a = Lease::acquire(&store, "a", Duration::from_secs(60))
            .await
            .unwrap();
        // a stalls: its expiry passes (written back in time here).
        let stale = LeaseRecord {
            holder: "a".into(),
            expires_unix: now_unix() - 1,
            nonce: String::new(),
        };
        store.put(&lease_key(a.epoch), json(&stale)).await.unwrap();
        let b = Lease::acquire(&store, "b", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(a.check().await.is_err(), "a must learn it lost the lease");
        b.check().await.unwrap();
        a.release().await.unwrap();
        b.check().await.unwrap();
    }

    #[tokio::test]
    async fn claimed_numbers_are_never_handed_out_twice() {
        let (_d, store) = dir_store();
        let a = claim_generation(&store, Generation(1)).await.unwrap();
        let b = claim_generation(&store, Generation(1)).await.unwrap();
        assert_eq!((a, b), (Generation(1), Generation(2)));
        assert_eq!(prune_claims(&store).await.unwrap(), 1);
        assert_eq!(
            claim_generation(&store, Generation(1)).await.unwrap(),
            Generation(3)
        );
        // Concurrent claims all differ.
        let claims: Vec<Generation> = futures::future::join_all((0..8).map(|_| {
            let s = store.clone();
            async move { claim_generation(&s, Generation(1)).await.unwrap() }
        }))
        .await;
        let unique: std::collections::BTreeSet<Generation> = claims.iter().copied().collect();
        assert_eq!(unique.len(), 8, "{claims:?}");
    }
}
