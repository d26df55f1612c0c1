//! Secrets planted in a repository, as issue 15 found them indexed: `settings.py` with an AWS
//! key and a GitHub token, `.ENV`, `.envrc`, `prod.env`, a Go file with a PEM private key in a
//! backtick string, a service-account JSON with its private key in `\n` escapes. After
//! `trawl index` no secret is anywhere in the store, while `settings.py` is still found by its
//! other content; `trawl secrets scan` names each one without printing it.

use std::path::Path;

use crate::search::{index, ok, search_json, trawl};
use crate::support::{Node, SourceRepo, file, files_under};

/// The planted secrets, assembled at run time so that this file holds none of them.
struct Planted {
    aws: String,
    github: String,
    key_body: String,
    sa_key_body: String,
    env_upper: &'static str,
    envrc: &'static str,
    prod_env: &'static str,
}

impl Planted {
    fn new() -> Self {
        Self {
            aws: ["AKIA", "IOSFODNN7EXAMPLE"].concat(),
            github: ["ghp_", "0123456789abcdefghijABCDEFGHIJ012345"].concat(),
            key_body: [
                "MIIEowIBAAKCAQEAu1SU1LfVLPHC",
                "ozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt",
            ]
            .concat(),
            sa_key_body: [
                "MIIEvQIBADANBgkqhkiG9w0BAQEF",
                "AASCBKcwggSjAgEAAoIBAQC7VJTUt9Us",
            ]
            .concat(),
            env_upper: "ENVUPPER_pw_q8Zr3Kx",
            envrc: "ENVRC_tok_m2Vn7Lp",
            prod_env: "PRODENV_key_w5Hs9Tc",
        }
    }

    fn all(&self) -> Vec<&str> {
        vec![
            &self.aws,
            &self.github,
            &self.key_body,
            &self.sa_key_body,
            self.env_upper,
            self.envrc,
            self.prod_env,
        ]
    }

    fn files(&self) -> Vec<(&'static str, Node)> {
        let begin = |kind: &str| format!("-----BEGIN {kind}-----");
        let end = |kind: &str| format!("-----END {kind}-----");
        vec![
            (
                "billing/settings.py",
                file(format!(
                    "\"\"\"Settings of the billing service.\"\"\"\nA=\"{}\"\nG=\"{}\"\n\n\ndef reconcile_ledger_totals(entries):\n    \"\"\"Sum the ledger entries of a billing period.\"\"\"\n    return sum(e.amount for e in entries)\n",
                    self.aws, self.github
                )),
            ),
            (".ENV", file(format!("DB_PASSWORD={}\n", self.env_upper))),
            (".envrc", file(format!("export API_TOKEN={}\n", self.envrc))),
            (
                "deploy/prod.env",
                file(format!("STRIPE={}\n", self.prod_env)),
            ),
            (
                "certs/embed.go",
                file(format!(
                    "package certs\n\n// Key signs the session cookies.\nconst Key = `{}\n{}\n{}`\n",
                    begin("RSA PRIVATE KEY"),
                    self.key_body,
                    end("RSA PRIVATE KEY")
                )),
            ),
            (
                "gcp/deployer.json",
                file(format!(
                    "{{\n  \"type\": \"service_account\",\n  \"project_id\": \"acme\",\n  \"private_key\": \"{}\\n{}\\n{}\\n\"\n}}\n",
                    begin("PRIVATE KEY"),
                    self.sa_key_body,
                    end("PRIVATE KEY")
                )),
            ),
            (
                "README.md",
                file("# billing\n\nReconciles the ledger every night.\n"),
            ),
        ]
    }
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|p| {
            std::fs::read(p)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
        })
        .map(|p| p.display().to_string())
        .collect()
}

fn sql(work: &Path, query: &str) -> Vec<serde_json::Value> {
    let out = trawl(work).args(["sql", "--json", query]).output().unwrap();
    ok(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn no_planted_secret_reaches_the_store_and_the_redacted_file_is_still_found() {
    let planted = Planted::new();
    let src = SourceRepo::named("billing");
    src.commit(&planted.files(), false);
    let work = tempfile::tempdir().unwrap();
    let summary = index(work.path(), &[&src.path()], "hash");
    assert!(
        summary.contains("env-file 3") && summary.contains("github-pat 1"),
        "{summary}"
    );
    let store = work.path().join(".trawl");

    // The bytes of no secret in any file of the store: events, reports, manifests, parts,
    // shards. Parquet pages are compressed, so the chunk text is also read back by SQL; the
    // byte search does see text, as the function name of settings.py shows.
    assert!(!files_containing(&store, b"reconcile_ledger_totals").is_empty());
    for secret in planted.all() {
        assert_eq!(
            files_containing(&store, secret.as_bytes()),
            Vec::<String>::new(),
            "{secret} is in the store"
        );
    }
    let texts = sql(work.path(), "SELECT path, text FROM chunks");
    assert!(!texts.is_empty());
    // Every chunk ever written, not only the live ones.
    let history = sql(work.path(), "SELECT path, text FROM chunk_versions");
    assert!(!history.is_empty());
    for row in texts.iter().chain(&history) {
        let text = row["text"].as_str().unwrap();
        for secret in planted.all() {
            assert!(
                !text.contains(secret),
                "{secret} in a chunk of {}",
                row["path"]
            );
        }
    }
    // Only settings.py and the README are indexed; the others are `secret` in the manifest.
    let mut indexed: Vec<String> = texts
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    indexed.sort();
    indexed.dedup();
    assert_eq!(indexed, ["README.md", "billing/settings.py"]);
    let skipped = sql(
        work.path(),
        "SELECT path FROM manifests WHERE skip_reason = 'secret' ORDER BY path",
    );
    let skipped: Vec<&str> = skipped
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        skipped,
        [
            ".ENV",
            ".envrc",
            "certs/embed.go",
            "deploy/prod.env",
            "gcp/deployer.json"
        ]
    );

    // settings.py: redacted on the same lines, and found by what else it says.
    let settings: String = texts
        .iter()
        .filter(|r| r["path"] == "billing/settings.py")
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert!(
        settings.contains("A=\"[REDACTED:aws-access-token]\"")
            && settings.contains("G=\"[REDACTED:github-pat]\""),
        "{settings}"
    );
    let hits = search_json(
        work.path(),
        &["reconcile_ledger_totals", "--mode", "lexical", "-k", "3"],
    );
    let hit = hits
        .iter()
        .find(|h| h["path"] == "billing/settings.py")
        .unwrap_or_else(|| panic!("settings.py not found: {hits:?}"));
    assert_eq!(hit["start_line"], 6, "{hit}");
    // Searching for a secret finds nothing that holds it.
    for secret in [&planted.aws, &planted.github] {
        let hits = search_json(work.path(), &[secret, "--mode", "lexical", "-k", "5"]);
        assert!(
            hits.iter().all(|h| !h["text"]
                .as_str()
                .unwrap_or_default()
                .contains(secret.as_str())),
            "{hits:?}"
        );
    }

    // The run report counts both, by rule.
    let reports: Vec<serde_json::Value> = std::fs::read_dir(store.join("runs"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .filter(|r: &serde_json::Value| r["stage"] == "fetch")
        .collect();
    let repo = &reports[0]["repos"][0];
    assert_eq!(
        repo["secrets_skipped"],
        serde_json::json!({"env-file": 3, "private-key": 2}),
        "{repo}"
    );
    assert_eq!(
        repo["secrets_redacted"],
        serde_json::json!({"aws-access-token": 1, "github-pat": 1}),
        "{repo}"
    );
}

fn scan(dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = trawl(dir)
        .args(["secrets", "scan"])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn secrets_scan_names_rule_and_line_never_the_secret_and_exits_like_a_linter() {
    let planted = Planted::new();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    for (path, node) in planted.files() {
        let Node::File(bytes) = node else {
            unreachable!()
        };
        let p = tree.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    let (code, stdout, stderr) = scan(dir.path(), &["tree"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    for line in [
        "skip    .ENV  env-file",
        "skip    .envrc  env-file",
        "skip    deploy/prod.env  env-file",
        "skip    certs/embed.go:4  private-key",
        "skip    gcp/deployer.json:4  private-key",
        "redact  billing/settings.py:2  aws-access-token",
        "redact  billing/settings.py:3  github-pat",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    assert!(stdout.contains("7 files, 5 would be skipped"), "{stdout}");
    for secret in planted.all() {
        assert!(!stdout.contains(secret) && !stderr.contains(secret));
    }

    let (code, stdout, _) = scan(dir.path(), &["tree", "--json"]);
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["skipped_files"], 5);
    assert_eq!(doc["redacted_files"], 1);
    assert_eq!(
        doc["redacted"],
        serde_json::json!({"aws-access-token": 1, "github-pat": 1})
    );
    assert!(
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "billing/settings.py"
                && f["line"] == 3
                && f["rule"] == "github-pat")
    );

    // Nothing found: 0. A path that is not there: 2, with a message.
    let (code, stdout, _) = scan(dir.path(), &["tree/README.md"]);
    assert_eq!(code, Some(0), "{stdout}");
    let (code, _, stderr) = scan(dir.path(), &["missing"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("cannot scan"), "{stderr}");
    // The allow-list exempts a path.
    let (code, stdout, _) = scan(
        dir.path(),
        &[
            "tree/billing",
            "--set",
            "fetch.secrets_allow=[\"settings.py\"]",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
}

/// Whether a lexical search for `query` finds a chunk of `path`.
fn finds(work: &Path, query: &str, path: &str) -> bool {
    search_json(work, &[query, "--mode", "lexical", "-k", "10"])
        .iter()
        .any(|h| h["path"] == path)
}

/// The planted repository indexed as rules that knew none of its secrets would have: every
/// file whole (`fetch.secrets_allow = ["**"]`).
fn indexed_whole() -> (Planted, SourceRepo, tempfile::TempDir) {
    let planted = Planted::new();
    let src = SourceRepo::named("billing");
    src.commit(&planted.files(), false);
    let work = tempfile::tempdir().unwrap();
    let out = trawl(work.path())
        .args(["index", "--embedder", "hash"])
        .args(["--set", "fetch.secrets_allow=[\"**\"]"])
        .arg(src.path())
        .output()
        .unwrap();
    ok(&out);
    (planted, src, work)
}

#[test]
fn secrets_indexed_under_older_rules_leave_the_index_with_rescan_secrets() {
    let (planted, src, work) = indexed_whole();
    assert!(finds(work.path(), "DB_PASSWORD", ".ENV"));
    assert!(finds(work.path(), "session cookies", "certs/embed.go"));
    assert!(finds(work.path(), "service_account", "gcp/deployer.json"));
    let settings_text = |work: &Path| -> String {
        search_json(
            work,
            &[
                "Settings of the billing service",
                "--mode",
                "lexical",
                "-k",
                "10",
            ],
        )
        .iter()
        .filter(|h| h["path"] == "billing/settings.py")
        .filter_map(|h| h["text"].as_str().map(str::to_owned))
        .collect()
    };
    assert!(settings_text(work.path()).contains(planted.aws.as_str()));

    // The head did not move: a plain run has nothing to do, the secrets stay.
    let summary = index(work.path(), &[&src.path()], "hash");
    assert!(summary.contains("1 unchanged"), "{summary}");
    assert!(finds(work.path(), "DB_PASSWORD", ".ENV"));

    // --rescan-secrets reads every file again and publishes what the rules now decide.
    let out = trawl(work.path())
        .args(["index", "--embedder", "hash", "--rescan-secrets"])
        .arg(src.path())
        .output()
        .unwrap();
    let summary = ok(&out);
    assert!(
        summary.contains("env-file 3") && summary.contains("aws-access-token 1"),
        "{summary}"
    );
    assert!(!finds(work.path(), "DB_PASSWORD", ".ENV"));
    assert!(!finds(work.path(), "session cookies", "certs/embed.go"));
    assert!(!finds(work.path(), "service_account", "gcp/deployer.json"));
    let text = settings_text(work.path());
    assert!(text.contains("[REDACTED:aws-access-token]"), "{text}");
    assert!(
        !text.contains(planted.aws.as_str()) && !text.contains(planted.github.as_str()),
        "{text}"
    );
    // The README, clean under both, is still there.
    assert!(finds(work.path(), "Reconciles the ledger", "README.md"));
}

#[test]
fn a_secret_file_indexed_before_is_deleted_when_it_changes() {
    let (planted, src, work) = indexed_whole();
    assert!(finds(work.path(), "DB_PASSWORD", ".ENV"));

    // The next commit edits it; the rules now apply: its old chunks go, none is published.
    let mut files = planted.files();
    files.retain(|(p, _)| *p != ".ENV");
    files.push((".ENV", file("DB_PASSWORD=rotated_q8Zr3Kx9\n")));
    src.commit(&files, false);
    index(work.path(), &[&src.path()], "hash");
    assert!(!finds(work.path(), "DB_PASSWORD", ".ENV"));
    assert!(!finds(work.path(), "rotated_q8Zr3Kx9", ".ENV"));
}

#[test]
fn fetch_json_names_the_rule_of_each_secret_skip() {
    let planted = Planted::new();
    let src = SourceRepo::named("billing");
    src.commit(&planted.files(), false);
    let work = tempfile::tempdir().unwrap();
    let out = trawl(work.path())
        .args(["fetch", "--dry-run", "--json", "--repo"])
        .arg(src.path())
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = ok(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rule = |path: &str| {
        let line = lines.iter().find(|l| l["path"] == path).unwrap();
        (line["op"].clone(), line["rule"].clone())
    };
    let skip = |r: &str| (serde_json::json!("skip"), serde_json::json!(r));
    assert_eq!(rule(".ENV"), skip("env-file"));
    assert_eq!(rule("certs/embed.go"), skip("private-key"));
    assert_eq!(rule("gcp/deployer.json"), skip("private-key"));
    assert_eq!(
        rule("billing/settings.py"),
        (serde_json::json!("upsert"), serde_json::Value::Null)
    );
}
