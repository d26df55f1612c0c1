//! The `trawl` binary as a user runs it.

use std::process::Command;

use crate::support::{SourceRepo, file};

/// Runs trawl in `dir`; asserts it succeeded; its stdout.
fn ok_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = trawl().current_dir(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn trawl() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trawl"));
    c.env_remove("TRAWL_CONFIG");
    for (k, _) in std::env::vars() {
        if k.starts_with("TRAWL_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn fetch_dry_run_json_prints_one_object_per_event_and_writes_nothing() {
    let src = SourceRepo::new();
    src.commit(
        &[
            ("a.py", file("def a():\n    pass\n")),
            ("b.bin", file(b"\x00\x01")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let out = trawl()
        .current_dir(work.path())
        .args(["fetch", "--dry-run", "--json", "--repo"])
        .arg(src.path())
        .args(["--set", "fetch.cache_dir=mirrors"])
        .output()
        .unwrap();
    let lines = crate::support::json_lines(&out);
    assert_eq!(lines.len(), 2);
    let a = lines.iter().find(|l| l["path"] == "a.py").unwrap();
    assert_eq!(a["op"], "upsert");
    assert_eq!(a["language"], "python");
    assert_eq!(a["size"], 18);
    assert_eq!(a["blob"].as_str().unwrap().len(), 40);
    assert!(a["repo"].as_str().unwrap().starts_with("local/"));
    let b = lines.iter().find(|l| l["path"] == "b.bin").unwrap();
    assert_eq!(b["op"], "skip");
    assert_eq!(b["reason"], "binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dry run"), "{stderr}");
    assert!(
        !work.path().join(".trawl").exists(),
        "a dry run writes no store"
    );
}

#[test]
fn fetch_writes_the_store_then_reports_unchanged() {
    let src = SourceRepo::new();
    src.commit(&[("a.py", file("def a():\n    pass\n"))], false);
    let work = tempfile::tempdir().unwrap();
    let run = || {
        trawl()
            .current_dir(work.path())
            .args(["fetch", "--repo"])
            .arg(src.path())
            .output()
            .unwrap()
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(text.contains("1 updated"), "{text}");
    assert!(work.path().join(".trawl/repos").is_dir());
    assert!(work.path().join(".trawl/manifests").is_dir());
    let second = run();
    let text = String::from_utf8_lossy(&second.stdout);
    assert!(
        text.contains("1 unchanged") && text.contains("0 upserts"),
        "{text}"
    );
}

#[test]
fn a_failed_repository_gives_a_distinct_exit_code_and_names_the_reason() {
    let work = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = trawl()
        .current_dir(work.path())
        .args(["fetch", "--repo"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAILED") && text.contains("not-found"),
        "{text}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let out = trawl()
        .current_dir(work.path())
        .args(["fetch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--repos"));
    let out = trawl()
        .current_dir(work.path())
        .env("TRAWL_FETCH_CONCURENCY", "2")
        .args(["config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TRAWL_FETCH_CONCURENCY"));
    let out = trawl().args(["fetch", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--repos", "--dry-run", "--since", "--json"] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn the_readme_documents_every_configuration_key() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    for key in trawl_core::config::Config::keys() {
        assert!(
            readme.contains(&format!("`{key}`")),
            "README does not document {key}"
        );
    }
}

#[test]
fn the_ci_script_runs_exactly_the_readme_test_command() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
    let readme = std::fs::read_to_string(format!("{root}README.md")).unwrap();
    let ci = std::fs::read_to_string(format!("{root}.ci/run")).unwrap();
    assert!(readme.contains("\nbash scripts/test.sh\n"));
    assert!(ci.contains("exec bash scripts/test.sh"));
}

#[test]
fn fetch_then_chunk_worker_then_sql_answers_questions_about_the_code() {
    let src = SourceRepo::new();
    src.commit(
        &[
            ("app.py", file("import os\n\n\ndef main():\n    return helper(os.getcwd())\n\n\ndef helper(x):\n    return x\n")),
            ("lib.rs", file("fn helper() {}\n\nfn run() {\n    helper();\n}\n")),
            ("blob.bin", file(b"\x00\x01")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| ok_in(work.path(), args);
    run(&["fetch", "--repo", src.path().to_str().unwrap()]);
    let summary = run(&["chunk-worker", "--once"]);
    assert!(summary.contains("2 files"), "{summary}");
    let rows: Vec<serde_json::Value> = run(&[
        "sql",
        "--json",
        "SELECT language, count(*) AS n FROM chunks WHERE kind = 'function' GROUP BY language ORDER BY language",
    ])
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    assert_eq!(
        rows,
        [
            serde_json::json!({"language": "python", "n": 2}),
            serde_json::json!({"language": "rust", "n": 2})
        ]
    );
    let csv = run(&[
        "sql",
        "--csv",
        "SELECT callee, count(*) AS n FROM (SELECT unnest(calls) AS callee FROM chunks WHERE kind <> 'toc') GROUP BY callee ORDER BY n DESC, callee LIMIT 1",
    ]);
    assert_eq!(csv, "callee,n\nhelper,2\n");
    let skips = run(&[
        "sql",
        "--csv",
        "SELECT path, skip_reason FROM manifests WHERE skip_reason IS NOT NULL",
    ]);
    assert_eq!(skips, "path,skip_reason\nblob.bin,binary\n");
    // A bad query says what is wrong.
    let out = trawl()
        .current_dir(work.path())
        .args(["sql", "SELECT nope FROM chunks"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    // SQL reads and never writes: no file written by COPY, no table created, no setting
    // changed; each refusal says why.
    let target = work.path().join("exfiltrated.csv");
    for statement in [
        format!(
            "COPY (SELECT path FROM chunks) TO '{}' STORED AS CSV",
            target.display()
        ),
        "CREATE TABLE t AS SELECT 1".to_owned(),
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'".to_owned(),
        "INSERT INTO chunks SELECT * FROM chunks".to_owned(),
        "SET datafusion.execution.batch_size = 1".to_owned(),
    ] {
        let out = trawl()
            .current_dir(work.path())
            .args(["sql", &statement])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{statement} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("read-only"), "{statement}: {err}");
    }
    assert!(!target.exists(), "COPY wrote a file");
}

#[test]
fn chunk_works_in_a_directory_whose_path_cannot_be_a_repository_id() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("c++");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("a.cpp"), "int main() {\n  return 0;\n}\n").unwrap();
    let out = trawl()
        .args(["chunk", "--json"])
        .arg(sub.join("a.cpp"))
        .output()
        .unwrap();
    let chunks = crate::support::json_lines(&out);
    assert!(chunks.iter().any(|c| c["symbol"] == "main"), "{chunks:?}");
}

#[test]
fn embed_works_on_the_local_model_with_no_key_and_a_rerun_sends_nothing() {
    let src = SourceRepo::new();
    src.commit(
        &[
            (
                "billing.py",
                file(
                    "import decimal\n\n\ndef refund(order, amount):\n    \"\"\"Refund part of an order.\"\"\"\n    return order.pay(-decimal.Decimal(amount))\n",
                ),
            ),
            ("README.md", file("# Billing\n\nRefunds and invoices.\n")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = trawl()
            .current_dir(work.path())
            .env_remove("VOYAGE_API_KEY")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let repo = src.path().to_string_lossy().into_owned();
    assert_eq!(run(&["fetch", "--repo", &repo]).0, Some(0));
    assert_eq!(run(&["chunk-worker", "--once"]).0, Some(0));

    let (code, out, err) = run(&["embed", "--once", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &report["embed"];
    assert_eq!(e["embedder"], "local");
    assert!(
        e["model"]
            .as_str()
            .unwrap()
            .starts_with("all-MiniLM-L6-v2@")
    );
    assert_eq!(e["dims"], 384);
    assert!(e["cache_misses"].as_u64().unwrap() >= 3, "{e}");
    assert!(e["tokens_sent"].as_u64().unwrap() > 0);
    assert_eq!(e["estimated_cost_usd"], 0.0);
    assert!(
        work.path()
            .join(".trawl/runs")
            .join(format!("{}.json", report["run"].as_str().unwrap()))
            .is_file()
    );

    // Everything is embedded: pricing the whole store again finds nothing to send.
    let (code, out, _) = run(&["embed", "--all", "--dry-run", "--json"]);
    assert_eq!(code, Some(0));
    let dry: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(dry["embed"]["tokens_sent"], 0);
    assert_eq!(dry["embed"]["cache_misses"], 0);

    // Pricing a Voyage re-embed needs no key and sends nothing; doing it needs the key.
    let (code, out, err) = run(&[
        "embed",
        "--all",
        "--dry-run",
        "--embedder",
        "voyage",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let priced: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(priced["embed"]["cache_misses"].as_u64().unwrap() >= 3);
    assert!(priced["embed"]["estimated_cost_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(priced["embed"]["http_requests"], 0);
    assert!(
        !work
            .path()
            .join(".trawl/embeddings/space=voyage-code-3.1024.float")
            .exists()
    );
    let (code, _, err) = run(&["embed", "--once", "--embedder", "voyage"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("VOYAGE_API_KEY"), "{err}");

    let (code, out, err) = run(&[
        "sql",
        "--csv",
        "SELECT count(*) AS n FROM chunks c JOIN embeddings e ON c.content_hash = e.content_hash",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_ne!(out.lines().nth(1), Some("0"), "{out}");
}

#[test]
fn compact_builds_generations_incrementally_and_rolls_back() {
    let src = SourceRepo::new();
    src.commit(
        &[
            (
                "shop/cart.py",
                file("def add_item(cart, item):\n    cart.append(item)\n"),
            ),
            (
                "shop/pay.py",
                file("def charge(card, amount):\n    return card.debit(amount)\n"),
            ),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = trawl()
            .current_dir(work.path())
            .args(args)
            .args(["--set", "embed.embedder=hash"])
            .output()
            .unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{args:?}: {e}");
        o
    };
    let repo = src.path().to_string_lossy().into_owned();
    run(&["fetch", "--repo", &repo]);
    run(&["chunk-worker", "--once"]);
    // Before embedding: everything is searchable by text, and reported as waiting.
    let out = run(&["compact"]);
    assert!(out.contains("generation 1 is live"), "{out}");
    assert!(out.contains("wait for a vector"), "{out}");
    run(&["embed", "--once"]);
    let m: serde_json::Value = serde_json::from_str(&run(&["compact", "--json"])).unwrap();
    assert_eq!(m["generation"], 2);
    assert_eq!(m["counts"]["text_only"], 0);
    assert_eq!(m["space"]["model"], "trawl-hash-v1");
    // Nothing changed: generation 2 stays live, nothing is built.
    let again: serde_json::Value = serde_json::from_str(&run(&["compact", "--json"])).unwrap();
    assert_eq!(again["generation"], 2, "nothing changed: no new generation");
    // A forced rebuild makes a generation 3 to roll back from.
    let full: serde_json::Value =
        serde_json::from_str(&run(&["compact", "--full", "--json"])).unwrap();
    assert_eq!(full["generation"], 3);
    let out = run(&["index", "rollback"]);
    assert!(out.contains("from generation 3 to 2"), "{out}");
    let current: serde_json::Value =
        serde_json::from_slice(&std::fs::read(work.path().join(".trawl/index/CURRENT")).unwrap())
            .unwrap();
    assert_eq!(current["generation"], 2);
    let out = run(&[
        "compact",
        "--gc",
        "--set",
        "compact.keep=1",
        "--set",
        "compact.gc_grace_secs=0",
    ]);
    assert!(out.contains("kept generations [2]"), "{out}");
    // What is left is CURRENT, generation 2's manifest, and the segments it lists (some
    // reused from generation 1); generation 3 (rolled back from) is gone.
    fn files(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                files(&e.path(), root, out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_owned();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let root = work.path().join(".trawl");
    let mut left = Vec::new();
    files(&root.join("index"), &root, &mut left);
    let m2: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("index/gen=2/manifest.json")).unwrap())
            .unwrap();
    let dirs: Vec<String> = m2["shards"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["segments"].as_array().unwrap().clone())
        .map(|seg| format!("{}/", seg["dir"].as_str().unwrap()))
        .collect();
    for f in &left {
        assert!(
            f == "index/CURRENT"
                || f.starts_with("index/claims/")
                || f.starts_with("index/lease/")
                || f == "index/gen=2/manifest.json"
                || f == "index/gen=2/chunks.parquet"
                || dirs.iter().any(|d| f.starts_with(d.as_str())),
            "{f} should have been collected"
        );
    }
    assert!(!left.iter().any(|f| f.starts_with("index/gen=3/")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_lists_dead_letters_and_replays_the_chosen_ones_to_their_topic() {
    use trawl_core::records::DeadLetter;
    let work = tempfile::tempdir().unwrap();
    let store =
        trawl_core::store::Store::from_url(&work.path().join(".trawl").to_string_lossy()).unwrap();
    let bus = trawl_core::bus::from_url("spool://", &store, 8).unwrap();
    for key in ["repo-a", "repo-b"] {
        let letter = DeadLetter {
            schema_version: trawl_core::records::DEAD_LETTER_VERSION,
            topic: "files".into(),
            key: key.into(),
            error: "poison: not a file event".into(),
            attempts: 3,
            payload: format!("{{\"payload of\":\"{key}\"}}"),
        };
        bus.publish("dead-letters", key, letter.to_json())
            .await
            .unwrap();
    }
    let run = |args: &[&str]| {
        trawl()
            .current_dir(work.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["dlq", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = crate::support::json_lines(&out);
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["error"], "poison: not a file event");
    let out = run(&["dlq", "replay", "--key", "repo-a"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 dead letters replayed"));
    // Back on its topic, as it was published the first time.
    let mut files = bus.subscribe("files", "chunk-worker").await.unwrap();
    let d = tokio::time::timeout(std::time::Duration::from_secs(10), files.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (d.key.as_str(), &d.payload[..]),
        ("repo-a", &b"{\"payload of\":\"repo-a\"}"[..])
    );
    d.ack().await.unwrap();
    // The other one stays.
    let listed = crate::support::json_lines(&run(&["dlq", "list", "--json"]));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["key"], "repo-b");
}

#[test]
fn sql_chunks_is_the_live_set_and_duckdb_reads_the_same_table() {
    let src = SourceRepo::new();
    src.commit(
        &[
            (
                "a.py",
                file("def alpha():\n    return 1\n\n\ndef beta():\n    return 2\n"),
            ),
            ("b.py", file("def gamma():\n    return 3\n")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| ok_in(work.path(), args);
    let repo = src.path().to_str().unwrap().to_owned();
    run(&["index", &repo, "--embedder", "hash"]);
    // A second version of a.py: its old chunks stay in the parts, not in the live table.
    src.commit(&[("a.py", file("def alpha():\n    return 10\n"))], false);
    let built = run(&["index", &repo, "--embedder", "hash"]);
    assert!(built.contains("generation 2"), "{built}");
    let csv = |q: &str| run(&["sql", "--csv", q]).lines().nth(1).unwrap().to_owned();
    let live = csv("SELECT count(*) FROM chunks");
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(work.path().join(".trawl/index/gen=2/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(live, manifest["counts"]["chunks"].to_string());
    let versions: u64 = csv("SELECT count(*) FROM chunk_versions").parse().unwrap();
    assert!(versions > live.parse().unwrap(), "{versions} vs {live}");
    assert_eq!(
        csv("SELECT count(*) FROM chunks WHERE symbol = 'beta'"),
        "0"
    );
    assert_eq!(csv("SELECT count(*) FROM live_vectors"), live);
    assert_eq!(
        csv("SELECT count(*) FROM runs WHERE stage = 'fetch'"),
        "2",
        "both fetch runs are in `runs`"
    );
    // The same file for other engines: DuckDB reads it as it is.
    let table = work.path().join(".trawl/index/gen=2/chunks.parquet");
    let duck = std::process::Command::new("python3")
        .args([
            "-c",
            "import duckdb, sys; print(duckdb.sql(f\"SELECT count(*), count(DISTINCT repo_id) FROM read_parquet('{sys.argv[1]}')\").fetchone())",
        ])
        .arg(&table)
        .output()
        .unwrap();
    assert!(
        duck.status.success(),
        "duckdb (pip install duckdb): {}",
        String::from_utf8_lossy(&duck.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&duck.stdout).trim(),
        format!("({live}, 1)")
    );
}
