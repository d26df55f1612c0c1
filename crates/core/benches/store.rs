//! Store benchmark: reading an organisation's repository states, which every compaction and
//! every `trawl embed --all` does first (`trawl_core::store::listed_states`). On a remote
//! store each small object costs a round trip; the store here is an in-memory one that
//! waits `W` before answering each list and each get (object_store's `ThrottledStore`), as
//! S3 does before its first byte.
//!
//! One table: for `N` repositories and a wait `W`, the reads one after another (as
//! `listed_states` did before it read [`CONCURRENT_READS`] at a time), `listed_states`,
//! and the physical limit at that concurrency (one list, then ⌈N / reads at once⌉ waits).
//!
//! `cargo bench -p trawl-core --bench store` (`TRAWL_BENCH_WAIT_MS`, default 10). Prints a
//! table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use trawl_core::ids::{RepoId, RunId};
use trawl_core::records::{REPO_STATE_VERSION, RepoState};
use trawl_core::store::{CONCURRENT_READS, Store, keys, listed_states};

fn state(i: usize) -> RepoState {
    RepoState {
        schema_version: REPO_STATE_VERSION,
        repo: RepoId::parse(&format!("github.com/acme/service-{i:05}")).expect("a repo id"),
        url: format!("https://github.com/acme/service-{i:05}.git"),
        branch: "main".into(),
        last_commit: "a".repeat(40).parse().expect("a commit id"),
        last_run: RunId::new(),
        indexed_at: "2026-12-06T00:00:00Z".into(),
        chunker_version: Some("1".into()),
    }
}

/// The reads one after another: what `listed_states` did before.
async fn one_after_another(store: &Store) -> usize {
    let mut n = 0;
    for key in store.list("repos/").await.expect("list") {
        if key.ends_with("/state.json")
            && store
                .get_json::<RepoState>(&key)
                .await
                .expect("get")
                .is_some()
        {
            n += 1;
        }
    }
    n
}

fn main() {
    let wait_ms: u64 = std::env::var("TRAWL_BENCH_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let wait = Duration::from_millis(wait_ms);
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    println!(
        "| repositories | wait per request | one after another | listed_states ({CONCURRENT_READS} at once) | limit at {CONCURRENT_READS} at once | speed-up | of the limit |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for n in [100usize, 1000] {
        let memory = Arc::new(InMemory::new());
        let plain = Store::over(memory.clone(), "memory://bench");
        rt.block_on(async {
            for i in 0..n {
                let s = state(i);
                plain
                    .put_json(&keys::repo_state(&s.repo), &s)
                    .await
                    .expect("put");
            }
        });
        let throttled = ThrottledStore::new(
            memory,
            ThrottleConfig {
                wait_get_per_call: wait,
                wait_list_per_call: wait,
                ..ThrottleConfig::default()
            },
        );
        let store = Store::over(Arc::new(throttled), "memory://bench-throttled");
        let t = Instant::now();
        let old = rt.block_on(one_after_another(&store));
        let sequential = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let new = rt
            .block_on(listed_states(&store))
            .expect("listed_states")
            .len();
        let concurrent = t.elapsed().as_secs_f64();
        assert_eq!(old, n);
        assert_eq!(new, n);
        let limit = wait.as_secs_f64() * (1 + n.div_ceil(CONCURRENT_READS)) as f64;
        println!(
            "| {n} | {wait_ms} ms | {sequential:.2} s | {concurrent:.2} s | {limit:.2} s | {:.1}× | {:.0} % |",
            sequential / concurrent,
            100.0 * limit / concurrent
        );
    }
}
