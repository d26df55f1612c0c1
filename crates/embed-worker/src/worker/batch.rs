//! `trawl embed --all --batch`: the backfill through the Voyage Batch API.
//!
//! - The chunk parts are read as by the synchronous backfill, with the same cache and dedupe:
//!   a content hash with a vector in the space, or seen earlier in the run, is a hit. Misses are
//!   cut to the model's input limit as the synchronous path cuts them, and gathered into input
//!   files of at most `batch_max_inputs` lines and `batch_max_file_bytes` bytes; each full file
//!   is submitted as one batch (`custom_id` = the content hash).
//! - Durability: a batch takes hours. Its id and its inputs (hash, token estimate) are written
//!   to `pipeline/embed-batches/space=<space>.json` as soon as it is created. A later run of the
//!   same space (after a crash or Ctrl-C) reads that list first, does not submit those hashes
//!   again, and polls the batches it names instead of paying twice.
//! - The running batches are polled in rounds, `batch_poll_ms` apart at first, the wait doubling
//!   up to `batch_max_poll_ms`. A completed batch's vectors are written as embedding parts of at
//!   most one request's inputs, exactly as the synchronous path writes them, and only then is
//!   the batch dropped from the list.
//! - An input the batch returned an error for (or no line at all) is logged with its hash,
//!   counted as `failed_inputs` and left for the next run (nothing records it as embedded). A
//!   batch that ended `failed`, `expired` or `cancelled` is dropped from the list, whatever
//!   vectors it has are kept, and the run ends with an error naming it and what to do.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use trawl_core::ids::ContentHash;
use trawl_core::records::{self, ChunkRecord};
use trawl_embed::batch::{BatchStatus, VoyageBatches};
use trawl_embed::embedder::EmbedError;

use super::{BatchReport, EmbedWorker, RunReport, WorkerError, lock, record};

/// Version of the list of submitted batches.
const STATE_VERSION: u32 = 1;

/// Where the batches submitted for `space` and not collected yet are listed.
pub fn state_key(space: &str) -> String {
    format!("pipeline/embed-batches/space={space}.json")
}

/// The batches submitted and not collected yet.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    schema_version: u32,
    batches: Vec<Submitted>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Submitted {
    id: String,
    /// Each input's content hash (its `custom_id`) and token estimate.
    inputs: Vec<(ContentHash, u64)>,
}

/// An input file being filled.
#[derive(Default)]
struct Gather {
    jsonl: Vec<u8>,
    inputs: Vec<(ContentHash, u64)>,
}

/// What to do after a Batch API call failed: the key's problem stops the worker as in the
/// synchronous path; anything else names the call and says that the submitted batches are kept.
fn call_failed(what: &str, e: EmbedError) -> WorkerError {
    match e {
        EmbedError::Auth(_) => WorkerError::Auth(e),
        e => WorkerError::Batch(format!(
            "{what}: {e}; the batches already submitted are kept: run `trawl embed --all \
             --batch` again to resume them"
        )),
    }
}

impl EmbedWorker {
    /// See the module documentation.
    pub(super) async fn backfill_batch(
        &self,
        batches: Arc<VoyageBatches>,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<RunReport, WorkerError> {
        let started = Instant::now();
        let inner = &self.inner;
        let m = &inner.metrics;
        inner.cache.refresh().await?;
        let key = state_key(&inner.embedder.space().key());
        let mut state: State = inner.store.get_json(&key).await?.unwrap_or_default();
        if state.schema_version > STATE_VERSION {
            return Err(trawl_core::Error::Config(format!(
                "{key} was written by a newer trawl (version {}): upgrade trawl",
                state.schema_version
            ))
            .into());
        }
        state.schema_version = STATE_VERSION;
        let resumed: HashSet<String> = state.batches.iter().map(|b| b.id.clone()).collect();
        let submitted: HashSet<ContentHash> = state
            .batches
            .iter()
            .flat_map(|b| b.inputs.iter().map(|(h, _)| *h))
            .collect();
        if !resumed.is_empty() {
            tracing::info!(
                batches = resumed.len(),
                inputs = submitted.len(),
                "resuming the batches an earlier run submitted"
            );
        }

        let parts = inner.chunk_parts().await?;
        let cfg = batches.config().clone();
        let mut seen = HashSet::new();
        // The keys of prose views among the inputs, this run's and the resumed batches':
        // their vectors are counted apart when written.
        let mut prose_keys = HashSet::new();
        let mut gather = Gather::default();
        for (i, part) in parts.iter().enumerate() {
            progress(i as u64, parts.len() as u64);
            let Some(bytes) = inner.store.get(part).await? else {
                continue;
            };
            let rows: Vec<ChunkRecord> = records::from_parquet(bytes)?;
            m.parts.fetch_add(1, Ordering::Relaxed);
            m.chunks.fetch_add(rows.len() as u64, Ordering::Relaxed);
            for r in rows {
                for (h, input) in inner.inputs(&r) {
                    let prose = input == super::Input::Prose;
                    if prose {
                        prose_keys.insert(h);
                    }
                    if inner.cache.contains(&h) || !seen.insert(h) {
                        if !prose {
                            m.cache_hits.fetch_add(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                    if prose {
                        m.prose_views.fetch_add(1, Ordering::Relaxed);
                    } else {
                        m.cache_misses.fetch_add(1, Ordering::Relaxed);
                    }
                    if submitted.contains(&h) {
                        continue;
                    }
                    let text = inner.input_text(&r, input);
                    let tokens = inner.embedder.count_tokens(&text);
                    let line = VoyageBatches::line(&h.to_hex(), &text);
                    let full = gather.inputs.len() >= cfg.max_inputs
                        || (gather.jsonl.len() + line.len()) as u64 > cfg.max_file_bytes;
                    if full && !gather.inputs.is_empty() {
                        self.submit(&batches, &mut state, &key, std::mem::take(&mut gather))
                            .await?;
                    }
                    gather.jsonl.extend_from_slice(&line);
                    gather.inputs.push((h, tokens));
                }
            }
        }
        if !gather.inputs.is_empty() {
            self.submit(&batches, &mut state, &key, gather).await?;
        }
        progress(parts.len() as u64, parts.len() as u64);

        let ended = self
            .wait(&batches, &mut state, &key, &resumed, &prose_keys)
            .await?;
        let report = self.report(started).await?;
        if ended.is_empty() {
            Ok(report)
        } else {
            Err(WorkerError::Batch(ended.join("; ")))
        }
    }

    /// Uploads `g` as one batch and lists it in the state before anything else happens.
    async fn submit(
        &self,
        batches: &VoyageBatches,
        state: &mut State,
        key: &str,
        g: Gather,
    ) -> Result<(), WorkerError> {
        let inner = &self.inner;
        let metadata = serde_json::json!({
            "trawl_run": inner.run.to_string(),
            "space": inner.embedder.space().key(),
        });
        let b = batches
            .submit(g.jsonl.into(), metadata)
            .await
            .map_err(|e| call_failed("submitting a batch", e))?;
        tracing::info!(batch = %b.id, inputs = g.inputs.len(), "submitted a batch");
        let m = &inner.metrics;
        m.requests.fetch_add(1, Ordering::Relaxed);
        m.tokens_estimated
            .fetch_add(g.inputs.iter().map(|(_, t)| t).sum(), Ordering::Relaxed);
        state.batches.push(Submitted {
            id: b.id,
            inputs: g.inputs,
        });
        inner.store.put_json(key, state).await?;
        Ok(())
    }

    /// Polls the listed batches until none is left; collects each as it ends. Returns what to
    /// tell about the batches that ended without completing.
    async fn wait(
        &self,
        batches: &VoyageBatches,
        state: &mut State,
        key: &str,
        resumed: &HashSet<String>,
        prose_keys: &HashSet<ContentHash>,
    ) -> Result<Vec<String>, WorkerError> {
        let mut delay = batches.config().poll;
        let mut ended = Vec::new();
        loop {
            let mut i = 0;
            while i < state.batches.len() {
                let id = state.batches[i].id.clone();
                let status = batches
                    .status(&id)
                    .await
                    .map_err(|e| call_failed(&format!("polling batch {id}"), e))?;
                if !status.is_terminal() {
                    i += 1;
                    continue;
                }
                let sub = state.batches.remove(i);
                let mut report = self.collect(batches, &status, &sub, prose_keys).await?;
                report.resumed = resumed.contains(&id);
                if !status.is_completed() {
                    let why = status
                        .errors
                        .as_ref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default();
                    tracing::error!(batch = %id, status = %status.status, "a batch ended without completing");
                    ended.push(format!(
                        "Voyage batch {id} ended {}{why}: {} of its {} inputs were not \
                         embedded; run `trawl embed --all --batch` again to submit them in a \
                         new batch",
                        status.status, report.failed, report.inputs
                    ));
                }
                lock(&self.batch_log).push(report);
                if state.batches.is_empty() {
                    self.inner.store.delete(key).await?;
                } else {
                    self.inner.store.put_json(key, state).await?;
                }
            }
            if state.batches.is_empty() {
                return Ok(ended);
            }
            tracing::debug!(running = state.batches.len(), ?delay, "waiting for batches");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(batches.config().max_poll.max(delay));
        }
    }

    /// Writes the vectors of an ended batch as embedding parts; reports and leaves for the next
    /// run every input without one.
    async fn collect(
        &self,
        batches: &VoyageBatches,
        status: &BatchStatus,
        sub: &Submitted,
        prose_keys: &HashSet<ContentHash>,
    ) -> Result<BatchReport, WorkerError> {
        let inner = &self.inner;
        let m = &inner.metrics;
        let id = &status.id;
        let mut results = if status.output_file_id.is_some() || status.error_file_id.is_some() {
            batches
                .results(status)
                .await
                .map_err(|e| call_failed(&format!("downloading the results of batch {id}"), e))?
        } else {
            std::collections::HashMap::new()
        };
        let space = inner.embedder.space().clone();
        let per_part = inner.embedder.limits().max_inputs.max(1);
        let mut report = BatchReport {
            id: id.clone(),
            status: status.status.clone(),
            inputs: sub.inputs.len() as u64,
            ..BatchReport::default()
        };
        let mut rows = Vec::new();
        for &(h, tokens) in &sub.inputs {
            match results.remove(&h.to_hex()) {
                Some(Ok((vector, billed))) => {
                    m.tokens_sent.fetch_add(billed, Ordering::Relaxed);
                    rows.push(record(&space, h, vector, tokens));
                }
                Some(Err(why)) if status.is_completed() => {
                    report.failed += 1;
                    tracing::warn!(batch = %id, content_hash = %h, error = %why, "the batch returned an error for this input; it is left for the next run");
                }
                _ if status.is_completed() => {
                    report.failed += 1;
                    tracing::warn!(batch = %id, content_hash = %h, "the batch's output has no line for this input; it is left for the next run");
                }
                _ => report.failed += 1,
            }
            if rows.len() >= per_part {
                self.write(&space, std::mem::take(&mut rows), prose_keys, id)
                    .await?;
            }
        }
        self.write(&space, rows, prose_keys, id).await?;
        report.embedded = report.inputs - report.failed;
        m.failed_inputs.fetch_add(report.failed, Ordering::Relaxed);
        Ok(report)
    }

    async fn write(
        &self,
        space: &trawl_embed::Space,
        rows: Vec<trawl_core::records::EmbeddingRecord>,
        prose_keys: &HashSet<ContentHash>,
        id: &str,
    ) -> Result<(), WorkerError> {
        let prose = rows
            .iter()
            .filter(|r| prose_keys.contains(&r.content_hash))
            .count() as u64;
        self.inner
            .write_part(space, rows, prose)
            .await
            .map(|_| ())
            .map_err(|e| {
                WorkerError::Batch(format!(
                    "writing the vectors of batch {id}: {e}; the batch stays listed: run `trawl \
                     embed --all --batch` again to collect it"
                ))
            })
    }
}
