//! A file the chunker panics on, as issue 15 found it handled: the panic surfaced as a join
//! error, was treated as transient and retried forever, nothing was dead-lettered and the
//! partition never moved past it. Here the chunker panics on one file of a repository (debug
//! builds read `TRAWL_TEST_PANIC_ON_PATH`; release builds have no such hook) and that file ends
//! as a dead letter carrying the panic message, while the rest of the repository is indexed
//! and searchable — in one process (`trawl index`) and with stand-alone stages over the spool
//! bus (`trawl fetch`, then `trawl chunk-worker`).

use std::path::Path;

use crate::search::{ok, search_json, trawl};
use crate::support::{SourceRepo, file};

const POISON: &str = "billing/poison.py";

fn repo() -> SourceRepo {
    let src = SourceRepo::named("billing");
    src.commit(
        &[
            (
                "billing/ledger.py",
                file(
                    "def reconcile_ledger_totals(entries):\n    \"\"\"Sum the ledger entries of a billing period.\"\"\"\n    return sum(e.amount for e in entries)\n",
                ),
            ),
            (
                POISON,
                file("def looks_harmless():\n    \"\"\"The chunker panics on this file.\"\"\"\n    return 1\n"),
            ),
            (
                "README.md",
                file("# billing\n\nReconciles the ledger every night.\n"),
            ),
        ],
        false,
    );
    src
}

/// `trawl <args>` in `work` with the chunker panicking on [`POISON`]; its stdout, once it
/// exits with `code` (3: a run with dead letters).
fn poisoned(work: &Path, args: &[&str], code: i32) -> String {
    let out = trawl(work)
        .env("TRAWL_TEST_PANIC_ON_PATH", POISON)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The dead letters `trawl dlq list --json` shows.
fn dead_letters(work: &Path) -> Vec<serde_json::Value> {
    ok(&trawl(work)
        .args(["dlq", "list", "--json"])
        .output()
        .unwrap())
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect()
}

fn assert_one_letter_for_the_poison_file(work: &Path) {
    let letters = dead_letters(work);
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter["topic"], "files");
    assert_eq!(letter["attempts"], 3, "bus.max_attempts deliveries");
    let error = letter["error"].as_str().unwrap();
    assert!(
        error.contains("panicked")
            && error.contains(&format!("injected chunker panic on {POISON}")),
        "the letter carries the panic message: {error}"
    );
    let event: serde_json::Value =
        serde_json::from_str(letter["payload"].as_str().unwrap()).unwrap();
    assert_eq!(event["path"], POISON);
}

#[test]
fn a_file_the_chunker_panics_on_is_a_dead_letter_and_the_rest_is_searchable() {
    let src = repo();
    let work = tempfile::tempdir().unwrap();
    let summary = poisoned(
        work.path(),
        &["index", src.path().to_str().unwrap(), "--embedder", "hash"],
        3,
    );
    assert!(summary.contains("1 dead letters"), "{summary}");
    assert!(summary.contains("generation 1 live"), "{summary}");
    assert_one_letter_for_the_poison_file(work.path());

    let hits = search_json(work.path(), &["reconcile_ledger_totals", "-k", "3"]);
    assert_eq!(hits[0]["path"], "billing/ledger.py", "{hits:?}");
    let hits = search_json(work.path(), &["looks_harmless", "-k", "10"]);
    assert!(
        hits.iter().all(|h| h["path"] != POISON),
        "the poison file was never chunked: {hits:?}"
    );
}

#[test]
fn a_stand_alone_chunk_worker_dead_letters_the_file_and_keeps_no_attempt_counts() {
    let src = repo();
    let work = tempfile::tempdir().unwrap();
    poisoned(
        work.path(),
        &["fetch", "--repo", src.path().to_str().unwrap()],
        0,
    );
    let summary = poisoned(
        work.path(),
        &["--set", "ops.listen=", "chunk-worker", "--once"],
        3,
    );
    assert!(
        summary.contains("2 files") && summary.contains("1 dead letters"),
        "{summary}"
    );
    assert_one_letter_for_the_poison_file(work.path());
    let counts = work.path().join(".trawl/bus/files/attempts");
    let left: Vec<_> = std::fs::read_dir(&counts)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        left.iter()
            .all(|p| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())),
        "every event was acknowledged, so no attempt count is left: {left:?}"
    );
}
