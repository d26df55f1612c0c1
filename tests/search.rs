//! Search as users meet it: `trawl index` then `trawl search` / `trawl eval` on fixture
//! repositories, and the query service over HTTP — access control, bad requests, generation
//! swaps under load, reranking.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use trawl_core::config::{Config, TokenConfig};
use trawl_core::store::Store;
use trawl_query::access::Tokens;
use trawl_query::server::App;
use trawl_query::{Access, SearchRequest, Searcher};

use crate::support::{SourceRepo, file};

pub(crate) fn trawl(work: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trawl"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TRAWL_") {
            c.env_remove(k);
        }
    }
    // A small ceiling, so the fixtures' small classes split into members like big ones do.
    c.current_dir(work).args([
        "--set",
        "fetch.cache_dir=mirrors",
        "--set",
        "chunk.ceiling=400",
    ]);
    c
}

pub(crate) fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

const CLIENT_PY: &str = r#""""HTTP client helpers."""
import json


class RetryPolicy:
    """How often and how long to retry a failed request."""

    def __init__(self, attempts=3, backoff=0.5):
        self.attempts = attempts
        self.backoff = backoff

    def delay(self, attempt):
        """Exponential backoff delay before the given attempt."""
        return self.backoff * (2 ** attempt)

    def exhausted(self, attempt):
        """Whether no attempt is left after this one."""
        return attempt + 1 >= self.attempts


def parse_http_response(raw):
    """Parse the status line and headers of a raw HTTP response."""
    head, _, body = raw.partition("\r\n\r\n")
    status = int(head.split()[1])
    return status, body


def fetch_with_retries(url, policy):
    """Fetch a URL, retrying on connection errors according to the policy."""
    for attempt in range(policy.attempts):
        try:
            return parse_http_response(download(url))
        except ConnectionError:
            sleep(policy.delay(attempt))
    raise TimeoutError("gave up fetching after all retries")
"#;

const POOL_RS: &str = r"/// A pool of database connections.
pub struct ConnectionPool {
    size: usize,
}

impl ConnectionPool {
    /// Opens a pool with `size` connections to the database.
    pub fn open(size: usize) -> Self {
        Self { size }
    }

    /// Borrows a connection, waiting while every connection is busy.
    pub fn checkout(&self) -> usize {
        self.size
    }

    /// Gives a connection back to the pool so that another caller can borrow it.
    pub fn checkin(&self, connection: usize) {
        let _ = connection;
    }

    /// How many connections the pool holds.
    pub fn capacity(&self) -> usize {
        self.size
    }
}
";

const README_MD: &str = "# acme api\n\nThe API client of acme.\n\n## Configuration\n\n### Retries\n\nSet `retry.attempts` in `acme.toml` to change how often a failed request is retried.\n";

fn acme() -> SourceRepo {
    let src = SourceRepo::named("acme-api");
    src.commit(
        &[
            ("http/client.py", file(CLIENT_PY)),
            ("db/pool.rs", file(POOL_RS)),
            ("README.md", file(README_MD)),
        ],
        false,
    );
    src
}

const VAULT_PY: &str = r#"def rotate_master_key(vault):
    """Rotate the vault's master encryption key with the zebracorn protocol, retrying on conflicts."""
    for attempt in range(5):
        if vault.try_rotate():
            return True
    return False


def fetch_with_retries(url, policy):
    """The vault's own fetch with retries: zebracorn tokens are attached to every retry."""
    return vault_fetch(url, policy)
"#;

fn vault() -> SourceRepo {
    let src = SourceRepo::named("secret-vault");
    src.commit(&[("vault/keys.py", file(VAULT_PY))], false);
    src
}

pub(crate) fn search_json(work: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = trawl(work)
        .arg("search")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let text = ok(&out);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(crate) fn index(work: &Path, targets: &[&Path], embedder: &str) -> String {
    let out = trawl(work)
        .arg("index")
        .args(targets)
        .args(["--embedder", embedder])
        .output()
        .unwrap();
    ok(&out)
}

#[test]
fn index_then_search_cites_definitions_filters_expands_and_reindexes_incrementally() {
    let src = acme();
    let work = tempfile::tempdir().unwrap();
    let summary = index(work.path(), &[&src.path()], "hash");
    assert!(summary.contains("1 updated"), "{summary}");
    assert!(summary.contains("generation 1 live"), "{summary}");
    assert!(work.path().join(".trawl/index/CURRENT").exists());

    // A symbol ranks its definition first, with a full citation.
    let hits = search_json(work.path(), &["parse_http_response", "-k", "3"]);
    let top = &hits[0];
    assert_eq!(top["symbol"], "parse_http_response");
    assert_eq!(top["kind"], "function");
    assert_eq!(top["path"], "http/client.py");
    assert_eq!(
        (top["start_line"].as_u64(), top["end_line"].as_u64()),
        (Some(21), Some(25))
    );
    assert!(top["repo"].as_str().unwrap().ends_with("/acme-api"));
    assert_eq!(top["commit"].as_str().unwrap().len(), 40);
    assert!(
        top["text"]
            .as_str()
            .unwrap()
            .starts_with("def parse_http_response")
    );
    assert!(top["score"].as_f64().unwrap() > 0.0);
    // A qualified name, typed with either separator.
    for q in ["RetryPolicy.delay", "RetryPolicy::delay"] {
        let hits = search_json(work.path(), &[q, "-k", "1"]);
        assert_eq!(hits[0]["symbol"], "RetryPolicy.delay", "{q}");
    }

    // Filters apply inside the search: every result passes them, and there still are k.
    let methods = search_json(work.path(), &["connection", "--kind", "method"]);
    assert!(!methods.is_empty());
    assert!(methods.iter().all(|h| h["kind"] == "method"), "{methods:?}");
    let rust = search_json(work.path(), &["connection pool", "--lang", "rust"]);
    assert!(!rust.is_empty());
    assert!(rust.iter().all(|h| h["path"] == "db/pool.rs"));
    // A language written as its extension, or misspelt, is refused with the name to use,
    // not answered with nothing.
    let out = trawl(work.path())
        .args(["search", "connection pool", "--lang", "rs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("did you mean \"rust\""),
        "{err}"
    );
    let db = search_json(work.path(), &["retry", "--path", "db"]);
    assert!(
        db.iter()
            .all(|h| h["path"].as_str().unwrap().starts_with("db/"))
    );
    let none = search_json(work.path(), &["retry", "--repo", "github.com/nobody/*"]);
    assert!(none.is_empty());

    // Expansion attaches the parent, siblings, callees and callers as context, never as hits.
    let hits = search_json(work.path(), &["RetryPolicy.delay", "-k", "1", "--expand"]);
    let rel = |h: &serde_json::Value, r: &str| -> Vec<String> {
        h["context"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter(|x| x["relation"] == r)
                    .map(|x| x["symbol"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(hits.len(), 1);
    assert!(
        rel(&hits[0], "parent").iter().any(|s| s == "RetryPolicy")
            || rel(&hits[0], "container")
                .iter()
                .any(|s| s == "RetryPolicy"),
        "{:?}",
        hits[0]["context"]
    );
    assert!(
        rel(&hits[0], "sibling")
            .iter()
            .any(|s| s.ends_with("__init__")),
        "{:?}",
        hits[0]["context"]
    );
    let hits = search_json(work.path(), &["fetch_with_retries", "-k", "1", "--expand"]);
    assert!(
        rel(&hits[0], "callee")
            .iter()
            .any(|s| s == "parse_http_response"),
        "{:?}",
        hits[0]["context"]
    );
    // And the other way: who calls it.
    let hits = search_json(work.path(), &["parse_http_response", "-k", "1", "--expand"]);
    assert!(
        rel(&hits[0], "caller")
            .iter()
            .any(|s| s == "fetch_with_retries"),
        "{:?}",
        hits[0]["context"]
    );

    // Asked who calls it, the callers come first: found through the call graph, not by
    // the words, which the definition itself matches best.
    let hits = search_json(work.path(), &["who calls parse_http_response?", "-k", "3"]);
    assert_eq!(hits[0]["symbol"], "fetch_with_retries", "{hits:?}");
    assert!(
        hits.iter().any(|h| h["symbol"] == "parse_http_response"),
        "{hits:?}"
    );
    let words_only = search_json(
        work.path(),
        &[
            "who calls parse_http_response?",
            "-k",
            "1",
            "--set",
            "query.callers_boost=0",
        ],
    );
    assert_eq!(
        words_only[0]["symbol"], "parse_http_response",
        "{words_only:?}"
    );

    // The human format: citation · symbol · kind · score, then the snippet with line numbers.
    let human = ok(&trawl(work.path())
        .args(["search", "parse_http_response", "-k", "1"])
        .output()
        .unwrap());
    let first = human.lines().next().unwrap();
    assert!(first.contains("/acme-api@"), "{first}");
    assert!(
        first.contains(":http/client.py#L21-L25 · parse_http_response · function · "),
        "{first}"
    );
    assert!(
        human.contains("   21 │ def parse_http_response(raw):"),
        "{human}"
    );

    // Again: nothing changed, every shard reused.
    let again = index(work.path(), &[&src.path()], "hash");
    assert!(again.contains("1 unchanged"), "{again}");
    assert!(again.contains("0 changed files"), "{again}");
    // A change is picked up incrementally.
    src.commit(
        &[
            ("http/client.py", file(CLIENT_PY)),
            ("db/pool.rs", file(POOL_RS)),
            ("README.md", file(README_MD)),
            ("http/cookies.py", file("def parse_cookie_header(value):\n    \"\"\"Split a Cookie header into name/value pairs.\"\"\"\n    return dict(p.split('=', 1) for p in value.split('; '))\n")),
        ],
        false,
    );
    let third = index(work.path(), &[&src.path()], "hash");
    assert!(third.contains("1 changed files"), "{third}");
    let hits = search_json(work.path(), &["parse_cookie_header", "-k", "1"]);
    assert_eq!(hits[0]["path"], "http/cookies.py");
    let rolled = ok(&trawl(work.path())
        .args(["index", "rollback"])
        .output()
        .unwrap());
    assert!(rolled.contains("rolled back"), "{rolled}");
}

/// A runbook section of two topics, one sentence a line, in one paragraph: backups (lines
/// 5–8), then alerts (lines 9–13).
const RUNBOOK_MD: &str = "# Runbook\n\n## Operations\n\n\
The nightly backup writes a snapshot of every volume to the bucket.\n\
The nightly backup keeps each volume snapshot in the bucket for a month.\n\
To restore a volume, copy its nightly snapshot back from the bucket.\n\
A failed nightly backup retries the volume snapshot to the bucket.\n\
Alerts page the oncall engineer when latency passes its threshold.\n\
Alerts page the oncall engineer when errors pass their threshold.\n\
Alerts page the oncall engineer again after ten quiet minutes.\n\
Alerts that page the oncall engineer are listed on the dashboard.\n\
Alerts page the oncall engineer's phone, then the whole team.\n";

#[test]
fn the_callers_of_a_definition_cut_in_parts_are_found() {
    // `load_settings` is longer than the ceiling (400 bytes here): it is cut at statements
    // into parts that share its name. Asked who calls it, its caller comes first.
    let mut body = String::from(
        "def load_settings(path):\n    \"\"\"Read the settings file and fill in every default.\"\"\"\n",
    );
    for i in 0..24 {
        body.push_str(&format!(
            "    value_{i} = read_value(path, 'section_{i}', default_{i}())\n"
        ));
    }
    body.push_str("    return locals()\n");
    let src = SourceRepo::named("settings");
    src.commit(
        &[
            ("conf/loader.py", file(&body)),
            (
                "app/main.py",
                file(
                    "from conf.loader import load_settings\n\n\ndef start_server(argv):\n    \"\"\"Boot the HTTP server.\"\"\"\n    settings = load_settings(argv[1])\n    return serve_forever(settings)\n",
                ),
            ),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    let parts = search_json(work.path(), &["load_settings", "-k", "10"]);
    assert!(
        parts
            .iter()
            .filter(|h| h["symbol"] == "load_settings")
            .count()
            > 1,
        "the fixture's function is cut in parts: {parts:?}"
    );
    let hits = search_json(work.path(), &["who calls load_settings?", "-k", "3"]);
    assert_eq!(hits[0]["symbol"], "start_server", "{hits:?}");
}

/// Go and Rust raise an error by building a value of its type. Asked who calls the type,
/// the code that builds it comes first, in either language; and a pasted message finds the
/// method that writes it, then the code that builds the error.
#[test]
fn the_code_that_builds_an_error_type_is_its_caller() {
    let src = SourceRepo::named("builders");
    src.commit(
        &[
            (
                "errors.go",
                file(
                    "package conf\n\nimport \"fmt\"\n\n// MissingFileError says no config file was found.\ntype MissingFileError struct {\n\tname      string\n\tlocations []string\n}\n\n// Error returns the formatted error.\nfunc (e MissingFileError) Error() string {\n\treturn fmt.Sprintf(\"Config File %q Not Found in %q\", e.name, e.locations)\n}\n",
                ),
            ),
            (
                "search.go",
                file(
                    "package conf\n\n// lookFor searches every directory for the named file.\nfunc lookFor(name string, dirs []string) (string, error) {\n\tfor _, d := range dirs {\n\t\tif present(d, name) {\n\t\t\treturn d, nil\n\t\t}\n\t}\n\treturn \"\", &MissingFileError{name: name, locations: dirs}\n}\n",
                ),
            ),
            (
                "src/spec.rs",
                file(
                    "use std::fmt;\n\n/// A logging spec that could not be read.\npub struct SpecError {\n    at: usize,\n}\n\nimpl fmt::Display for SpecError {\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {\n        write!(f, \"invalid logging spec at byte {}\", self.at)\n    }\n}\n\n/// Reads a spec of comma-separated directives.\npub fn read_spec(s: &str) -> Result<Vec<String>, SpecError> {\n    if s.starts_with(',') {\n        return Err(SpecError { at: 0 });\n    }\n    Ok(s.split(',').map(String::from).collect())\n}\n",
                ),
            ),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    let hits = search_json(work.path(), &["who calls MissingFileError?", "-k", "3"]);
    assert_eq!(hits[0]["symbol"], "lookFor", "{hits:?}");
    let hits = search_json(work.path(), &["who calls SpecError?", "-k", "3"]);
    assert_eq!(hits[0]["symbol"], "read_spec", "{hits:?}");
    let hits = search_json(
        work.path(),
        &["Config File \"app\" Not Found in [\"/etc/app\"]", "-k", "3"],
    );
    assert_eq!(hits[0]["symbol"], "MissingFileError.Error", "{hits:?}");
    assert_eq!(
        hits[1]["symbol"], "lookFor",
        "where it is raised, next: {hits:?}"
    );
}

/// A thin wrapper that only forwards to a definition of its name (viper's package-level
/// functions calling the global `Viper`'s methods, a builder method calling its `tls_`
/// namesake) shares its delegate's doc comment and, being shorter, outranked it: the
/// delegate, where the work is done, now comes first, and the wrapper next. A convenience
/// function that specialises a shorter-named one is no wrapper, and "who calls" still finds
/// the wrappers.
#[test]
fn a_thin_wrapper_gives_its_place_to_the_definition_it_forwards_to() {
    let src = SourceRepo::named("settings");
    src.commit(
        &[
            (
                "settings.go",
                file(
                    "package settings\n\nvar v = New()\n\n// Settings holds the prefix.\ntype Settings struct {\n\tenvPrefix string\n}\n\n// New returns empty settings.\nfunc New() *Settings { return &Settings{} }\n\n// SetEnvPrefix defines a prefix that ENVIRONMENT variables will use.\n// E.g. if your prefix is \"spf\", the env registry will look for env\n// variables that start with \"SPF_\".\nfunc SetEnvPrefix(in string) { v.SetEnvPrefix(in) }\n\n// SetEnvPrefix defines a prefix that ENVIRONMENT variables will use.\n// E.g. if your prefix is \"spf\", the env registry will look for env\n// variables that start with \"SPF_\".\nfunc (s *Settings) SetEnvPrefix(in string) {\n\tif in != \"\" {\n\t\ts.envPrefix = in\n\t}\n}\n",
                ),
            ),
            (
                "src/builder.rs",
                file(
                    "/// Builds clients.\npub struct ClientBuilder {\n    accept_invalid: bool,\n    millis: bool,\n}\n\nimpl ClientBuilder {\n    /// Controls the use of certificate validation: accept invalid certificates.\n    pub fn danger_accept_invalid_certs(self, accept: bool) -> ClientBuilder {\n        self.tls_danger_accept_invalid_certs(accept)\n    }\n\n    /// Controls the use of certificate validation: accept invalid certificates.\n    pub fn tls_danger_accept_invalid_certs(mut self, accept: bool) -> ClientBuilder {\n        if accept {\n            tracing::warn!(\"certificate validation is off\");\n        }\n        self.accept_invalid = accept;\n        self\n    }\n\n    /// Configures the timestamp precision of the log lines: milliseconds.\n    pub fn timestamp_millis(self) -> ClientBuilder {\n        self.timestamp(true)\n    }\n\n    /// Configures the timestamp precision of the log lines.\n    pub fn timestamp(mut self, millis: bool) -> ClientBuilder {\n        if millis {\n            tracing::debug!(\"timestamps in milliseconds\");\n        }\n        self.millis = millis;\n        self\n    }\n}\n",
                ),
            ),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    let symbols = |args: &[&str]| -> Vec<String> {
        search_json(work.path(), args)
            .iter()
            .map(|h| h["symbol"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let prefix = [
        "SetEnvPrefix(\"spf\") ENVIRONMENT variables prefix",
        "-k",
        "2",
    ];
    assert_eq!(
        symbols(&prefix),
        ["Settings.SetEnvPrefix", "SetEnvPrefix"],
        "the method first, its wrapper next"
    );
    let off = [&prefix[..], &["--set", "query.delegates=false"]].concat();
    assert_eq!(
        symbols(&off)[0],
        "SetEnvPrefix",
        "without the rule, the shorter wrapper ranks first"
    );
    let certs = ["accept invalid certificates", "-k", "2"];
    assert_eq!(
        symbols(&certs),
        [
            "ClientBuilder.tls_danger_accept_invalid_certs",
            "ClientBuilder.danger_accept_invalid_certs"
        ]
    );
    // Asked for by its name, the wrapper is what is asked for.
    let named = symbols(&["danger_accept_invalid_certs", "-k", "1"]);
    assert_eq!(named, ["ClientBuilder.danger_accept_invalid_certs"]);
    // `timestamp_millis` specialises `timestamp`: it keeps its place.
    let millis = symbols(&["timestamp precision milliseconds", "-k", "1"]);
    assert_eq!(millis, ["ClientBuilder.timestamp_millis"]);
    let callers = symbols(&["who calls tls_danger_accept_invalid_certs?", "-k", "1"]);
    assert_eq!(callers, ["ClientBuilder.danger_accept_invalid_certs"]);
}

#[test]
fn a_name_or_a_key_shows_its_documentation_among_the_first_answers() {
    let src = SourceRepo::named("logger");
    let code = |name: &str, use_: &str| {
        format!(
            "function {name} (obj, opts) {{\n  const depthLimit = opts.depthLimit\n  {use_}\n  return depthLimit\n}}\n\n"
        )
    };
    let js: String = [
        code("serialize", "if (depth > depthLimit) return '[Object]'"),
        code("redact", "walk(obj, depthLimit)"),
        code("format", "print(obj, { depthLimit })"),
        code("child", "copy(opts.depthLimit)"),
    ]
    .concat();
    src.commit(
        &[
            ("lib/tools.js", file(&js)),
            (
                "docs/api.md",
                file(
                    "# API\n\n## Options\n\nThe logger takes an options object.\n\n### `depthLimit` (Number)\n\nDefault: `5`. Option to limit the depth of nested objects when they are logged; deeper ones print as `[Object]`.\n",
                ),
            ),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    let kinds = |args: &[&str]| -> Vec<String> {
        search_json(work.path(), args)
            .iter()
            .map(|h| h["kind"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    for key in ["depthLimit", "depthLimit: 5"] {
        let on = kinds(&[key, "-k", "3"]);
        assert_eq!(on.len(), 3, "{key}: {on:?}");
        assert!(
            on.iter().any(|k| k == "section"),
            "{key}: the section among the first three: {on:?}"
        );
        let off = kinds(&[key, "-k", "3", "--set", "query.doc_place=0"]);
        assert!(
            !off.iter().any(|k| k == "section"),
            "{key}: without the rule, the code that reads it fills the first three: {off:?}"
        );
    }
    // A question in words is ranked as it is.
    let question = "how deep are nested objects logged before they print as [Object]?";
    assert_eq!(
        search_json(work.path(), &[question, "-k", "5"]),
        search_json(
            work.path(),
            &[question, "-k", "5", "--set", "query.doc_place=0"]
        )
    );
}

#[test]
fn every_name_a_chain_of_assignments_gives_a_function_finds_it() {
    let src = SourceRepo::named("web");
    // Beside them, definitions that say `header` and `type` more often than the aliased ones.
    let handlers: String = ["status", "send", "json", "location"]
        .iter()
        .map(|n| {
            format!("res.{n} = function {n}(value) {{\n  this.header('{n}', value);\n  return this;\n}};\n\n")
        })
        .chain([
            "res.header = function header(field, value) {\n  // header: set the response header field\n  this.headers[field] = value;\n  return this.header;\n};\n\n".to_owned(),
            "res.format = function format(obj) {\n  // the type of the response: res type negotiation\n  var type = req.accepts(Object.keys(obj));\n  this.type(type);\n  return obj[type];\n};\n\n".to_owned(),
        ])
        .collect();
    src.commit(
        &[
            (
                "lib/request.js",
                file("/**\n * Return request header.\n */\n\nreq.get =\nreq.header = function header(name) {\n  if (!name) throw new TypeError('name argument is required to req.get');\n  return this.headers[name.toLowerCase()];\n};\n"),
            ),
            ("lib/response.js", file(format!("{handlers}res.contentType =\nres.type = function contentType(type) {{\n  return this.set('Content-Type', type);\n}};\n"))),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    for (query, symbol, path) in [
        ("req.get", "req.get", "lib/request.js"),
        ("req.header", "req.get", "lib/request.js"),
        ("res.type", "res.contentType", "lib/response.js"),
    ] {
        let hits = search_json(work.path(), &[query, "-k", "3"]);
        let first = &hits[0];
        assert_eq!(first["symbol"], symbol, "{query}: {hits:#?}");
        assert_eq!(first["path"], path, "{query}");
        assert_eq!(first["kind"], "method", "{query}");
        // Ranked as the definition of the name, as its own name is: not by the words alone.
        assert!(
            first["score"].as_f64().unwrap() >= 1.0,
            "{query}: {hits:#?}"
        );
    }
}

#[test]
fn a_long_prose_section_is_cut_where_its_topic_changes() {
    let src = SourceRepo::named("runbook");
    src.commit(&[("RUNBOOK.md", file(RUNBOOK_MD))], false);
    // The section is 640 bytes against a 400-byte ceiling (`trawl` sets it).
    let spans = |work: &Path| -> Vec<(u64, u64)> {
        let out = trawl(work)
            .args([
                "sql",
                "--json",
                "SELECT start_line, end_line FROM chunks WHERE path = 'RUNBOOK.md' ORDER BY start_line",
            ])
            .output()
            .unwrap();
        ok(&out)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["start_line"].as_u64().unwrap(),
                    v["end_line"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let on = tempfile::tempdir().unwrap();
    index(on.path(), &[&src.path()], "hash");
    assert_eq!(
        spans(on.path()),
        [(1, 8), (9, 13)],
        "the backups and the alerts apart"
    );
    let hits = search_json(
        on.path(),
        &["restore a volume from its snapshot", "-k", "1"],
    );
    let text = hits[0]["text"].as_str().unwrap();
    assert!(
        text.contains("To restore a volume") && !text.contains("Alerts"),
        "{text}"
    );

    // The spans of the file indexed into a fresh store with one setting changed.
    let spans_with = |setting: &str| {
        let work = tempfile::tempdir().unwrap();
        let out = trawl(work.path())
            .args(["--set", setting, "index"])
            .arg(src.path())
            .args(["--embedder", "hash"])
            .output()
            .unwrap();
        ok(&out);
        spans(work.path())
    };

    // Told apart by the words the sentences share, without a model: the same cut.
    assert_eq!(spans_with("chunk.meaning_model=words"), [(1, 8), (9, 13)]);

    // Off, the same section is cut where the ceiling falls: inside the alerts.
    let cut = spans_with("chunk.meaning=false");
    assert_eq!(cut.len(), 2, "{cut:?}");
    assert!(
        cut[0].1 > 8,
        "the size cut puts an alert with the backups: {cut:?}"
    );
}

#[test]
fn index_uses_the_local_model_by_default_and_search_embeds_the_query_with_it() {
    let src = acme();
    let work = tempfile::tempdir().unwrap();
    let out = trawl(work.path())
        .arg("index")
        .arg(src.path())
        .output()
        .unwrap();
    let summary = ok(&out);
    assert!(summary.contains("all-MiniLM-L6-v2"), "{summary}");
    // A paraphrase with none of the function's identifiers: the vector arm finds it.
    let hits = search_json(
        work.path(),
        &[
            "borrow a database connection when all of them are in use",
            "--mode",
            "vector",
            "-k",
            "3",
        ],
    );
    assert!(
        hits.iter()
            .any(|h| h["symbol"] == "ConnectionPool.checkout"),
        "{hits:?}"
    );
}

#[test]
fn eval_reports_recall_and_mrr_and_names_a_bad_line() {
    let src = acme();
    let work = tempfile::tempdir().unwrap();
    index(work.path(), &[&src.path()], "hash");
    let q = work.path().join("q.jsonl");
    std::fs::write(
        &q,
        [
            r#"{"id":"s1","query":"parse_http_response","kind":"symbol","targets":[{"repo":"*","path":"http/client.py","start_line":21,"end_line":25}]}"#,
            r#"{"id":"n1","query":"how long to wait before retrying","kind":"natural","targets":[{"repo":"*/acme-api","path":"http/client.py","start_line":12,"end_line":14}]}"#,
            r#"{"id":"c1","query":"retry.attempts","kind":"config","targets":[{"repo":"*","path":"README.md","start_line":7,"end_line":9}]}"#,
            r#"{"id":"x1","query":"parse_http_response","kind":"symbol","targets":[{"repo":"*","path":"nowhere.py","start_line":1,"end_line":2}]}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let out = ok(&trawl(work.path())
        .args([
            "eval",
            "q.jsonl",
            "--mode",
            "lexical,hybrid",
            "--missed",
            "--ablate",
        ])
        .output()
        .unwrap());
    let row = out
        .lines()
        .find(|l| l.starts_with("| trawl · hybrid |"))
        .unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<f64> = row
        .split('|')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    // R@1, R@5, R@10, Hit@1, Hit@10, MRR@10, mean span, then MRR per kind (config, natural,
    // symbol): the symbol query is found first, the bogus target never.
    assert!(out.contains("split: all (4 queries)"), "{out}");
    assert!(cells[0] >= 0.25 && cells[2] <= 0.75, "{row}");
    assert!(cells[3] >= 0.25 && cells[4] <= 0.75, "{row}");
    assert!(cells[6] >= 1.0, "a result spans at least one line: {row}");
    assert!((cells[9] - 0.5).abs() < 1e-9, "{row}");
    assert!(
        out.contains("missed (trawl · hybrid, all): ") && out.contains("x1"),
        "{out}"
    );
    // Each ranking change switched off in turn is a row of its own.
    for what in [
        "intent weights",
        "message match",
        "role prior",
        "narrow citations",
    ] {
        assert!(out.contains(&format!("| trawl without {what} |")), "{out}");
    }

    // The learned ranking's weights, fitted on the questions in words: one question is too
    // few, and the error says so; three are fitted, and the table printed is a configuration
    // that `trawl eval` takes back.
    let few = trawl(work.path())
        .args(["eval", "q.jsonl", "--train-ranker"])
        .output()
        .unwrap();
    assert!(!few.status.success());
    let err = String::from_utf8_lossy(&few.stderr);
    assert!(err.contains("too few to fit on"), "{err}");
    std::fs::write(
        work.path().join("questions.jsonl"),
        [
            r#"{"id":"n1","query":"how long to wait before retrying","kind":"natural","targets":[{"repo":"*","path":"http/client.py","start_line":12,"end_line":14}]}"#,
            r#"{"id":"n2","query":"give a borrowed connection back to the pool","kind":"natural","targets":[{"repo":"*","path":"db/pool.rs","start_line":17,"end_line":20}]}"#,
            r#"{"id":"n3","query":"what happens when every fetch attempt fails","kind":"natural","targets":[{"repo":"*","path":"http/client.py","start_line":28,"end_line":35}]}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let fitted = ok(&trawl(work.path())
        .args([
            "eval",
            "questions.jsonl",
            "--train-ranker",
            "--save-pool",
            "pool.jsonl",
        ])
        .output()
        .unwrap());
    assert!(
        fitted.contains("3 of 3 queries are questions in words"),
        "{fitted}"
    );
    // The pools written for other tools: one line a question, each candidate with its
    // features (as many as their names) and whether it answers.
    let pools: Vec<serde_json::Value> = std::fs::read_to_string(work.path().join("pool.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(pools.len(), 3);
    let names = pools[0]["features"].as_array().unwrap().len();
    assert!(names > 10, "{}", pools[0]);
    for p in &pools {
        let cands = p["candidates"].as_array().unwrap();
        assert!(!cands.is_empty(), "{p}");
        for c in cands {
            assert_eq!(c["f"].as_array().unwrap().len(), names, "{c}");
            assert!(c["doc"]["path"].is_string(), "{c}");
        }
    }
    let answered = pools
        .iter()
        .filter(|p| {
            p["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["hit"] == true)
        })
        .count();
    assert!(answered >= 2, "{pools:?}");
    // Saved pools join another fit (questions about repositories another store holds): one
    // question, too few alone, is fitted on with them.
    std::fs::write(
        work.path().join("one.jsonl"),
        r#"{"id":"n9","query":"which connection is handed out next","kind":"natural","targets":[{"repo":"*","path":"db/pool.rs","start_line":17,"end_line":20}]}"#,
    )
    .unwrap();
    let joined = ok(&trawl(work.path())
        .args([
            "eval",
            "one.jsonl",
            "--train-ranker",
            "--add-pool",
            "pool.jsonl",
        ])
        .output()
        .unwrap());
    assert!(
        joined.contains("3 questions' pools added from 1 file(s) to this index's 1."),
        "{joined}"
    );
    assert!(joined.contains("[query.ranker]"), "{joined}");
    // A question twice would count twice: the same pool added again, or a question of this
    // set already in it, is refused; so is a file that is not there, before any pool is made.
    for args in [
        &[
            "one.jsonl",
            "--add-pool",
            "pool.jsonl",
            "--add-pool",
            "pool.jsonl",
        ][..],
        &["questions.jsonl", "--add-pool", "pool.jsonl"][..],
    ] {
        let twice = trawl(work.path())
            .args(["eval", "--train-ranker"])
            .args(args)
            .output()
            .unwrap();
        assert!(!twice.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&twice.stderr);
        assert!(err.contains("is in the pool already"), "{err}");
    }
    let missing = trawl(work.path())
        .args([
            "eval",
            "one.jsonl",
            "--train-ranker",
            "--add-pool",
            "nowhere.jsonl",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("cannot open --add-pool file nowhere.jsonl"),
        "{err}"
    );
    // With `--split`, a saved question of another split is left out as the set's own are.
    let saved = std::fs::read_to_string(work.path().join("pool.jsonl")).unwrap();
    let mut tune_lines: Vec<serde_json::Value> = saved
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in &mut tune_lines {
        l["split"] = "tune".into();
    }
    let mut other = tune_lines[0].clone();
    other["id"] = "n1-other".into();
    other["split"] = "other".into();
    tune_lines.push(other);
    std::fs::write(
        work.path().join("split-pool.jsonl"),
        tune_lines
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    std::fs::write(
        work.path().join("one-tune.jsonl"),
        r#"{"id":"n9","query":"which connection is handed out next","kind":"natural","split":"tune","targets":[{"repo":"*","path":"db/pool.rs","start_line":17,"end_line":20}]}"#,
    )
    .unwrap();
    let split = ok(&trawl(work.path())
        .args([
            "eval",
            "one-tune.jsonl",
            "--split",
            "tune",
            "--train-ranker",
            "--add-pool",
            "split-pool.jsonl",
        ])
        .output()
        .unwrap());
    assert!(
        split.contains("1 question(s) of split-pool.jsonl left out: not of split \"tune\".")
            && split.contains("3 questions' pools added from 1 file(s) to this index's 1."),
        "{split}"
    );
    // A pool of a test question is never fitted on; one of other features is stale.
    let first = saved.lines().next().unwrap();
    let mut test_line: serde_json::Value = serde_json::from_str(first).unwrap();
    test_line["split"] = "test".into();
    let mut stale: serde_json::Value = serde_json::from_str(first).unwrap();
    stale["features"][0] = "retired_feature".into();
    for (file, line, says) in [
        ("test-pool.jsonl", test_line, "never fitted on"),
        ("stale-pool.jsonl", stale, "other features"),
    ] {
        std::fs::write(
            work.path().join(file),
            format!("{}\n{line}\n", saved.trim_end()),
        )
        .unwrap();
        let refused = trawl(work.path())
            .args(["eval", "one.jsonl", "--train-ranker", "--add-pool", file])
            .output()
            .unwrap();
        assert!(!refused.status.success(), "{file}");
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(err.contains(says) && err.contains("line 4"), "{err}");
    }
    let table = &fitted[fitted.find("[query.ranker]").expect("a weight table")..];
    assert!(table.contains("\ncoverage = "), "{table}");
    std::fs::write(work.path().join("fitted.toml"), table).unwrap();
    let out = ok(&trawl(work.path())
        .args(["--config", "fitted.toml", "eval", "questions.jsonl"])
        .output()
        .unwrap());
    assert!(out.contains("| trawl |"), "{out}");
    std::fs::write(
        work.path().join("typo.toml"),
        "[query.ranker]\ncoverag = 1.0\n",
    )
    .unwrap();
    let typo = trawl(work.path())
        .args(["--config", "typo.toml", "eval", "questions.jsonl"])
        .output()
        .unwrap();
    assert!(
        !typo.status.success(),
        "a weight that names no feature is an error"
    );
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains("coverag"),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );

    // The naive baseline: the same repository as windows in another store, evaluated with
    // every ranking change off and printed beside the default.
    ok(&trawl(work.path())
        .args([
            "--store",
            "naive",
            "--set",
            "chunk.strategy=windows",
            "index",
        ])
        .arg(src.path())
        .args(["--embedder", "hash"])
        .output()
        .unwrap());
    let out = ok(&trawl(work.path())
        .args(["eval", "q.jsonl", "--baseline", "naive"])
        .output()
        .unwrap());
    let span = |prefix: &str| -> f64 {
        let row = out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{out}"));
        let cells: Vec<f64> = row
            .split('|')
            .filter_map(|c| c.trim().parse().ok())
            .collect();
        cells[6]
    };
    assert!(
        span("| naive RAG") > span("| trawl |"),
        "a 1,000-character window cites more lines than a definition: {out}"
    );

    // A split the set does not have is an error that says so.
    let none = trawl(work.path())
        .args(["eval", "q.jsonl", "--split", "test"])
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("split \"test\""),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );

    std::fs::write(
        &q,
        "{\"id\":\"a\",\"query\":\"x\",\"kind\":\"k\",\"targets\":[]}\n",
    )
    .unwrap();
    let bad = trawl(work.path())
        .args(["eval", "q.jsonl"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("q.jsonl:1") && err.contains("no targets"),
        "{err}"
    );
}

/// Two repositories indexed into one store; the searcher over it.
async fn two_repos(work: &Path) -> (SourceRepo, SourceRepo, Config) {
    let (a, b) = (acme(), vault());
    let w = work.to_path_buf();
    let (pa, pb) = (a.path(), b.path());
    tokio::task::spawn_blocking(move || index(&w, &[&pa, &pb], "hash"))
        .await
        .unwrap();
    let mut cfg = Config::default();
    cfg.store.url = work.join(".trawl").to_string_lossy().into_owned();
    cfg.embed.embedder = trawl_core::config::EmbedderKind::Hash;
    (a, b, cfg)
}

struct Served {
    url: String,
    searcher: Arc<Searcher>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(cfg: &Config, tokens: Vec<TokenConfig>) -> Served {
    let store = Store::from_url(&cfg.store.url).unwrap();
    let searcher = Arc::new(
        Searcher::open(store, cfg, Some(trawl_core::config::EmbedderKind::Hash))
            .await
            .unwrap(),
    );
    let app = App::new(
        searcher.clone(),
        Tokens::from_config(&tokens).unwrap(),
        &trawl_core::config::ServeConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, trawl_query::server::router(app)).await;
    });
    Served {
        url,
        searcher,
        task,
    }
}

fn token(name: &str, secret: &str, repos: &[&str]) -> TokenConfig {
    TokenConfig {
        name: name.into(),
        token: secret.into(),
        token_env: String::new(),
        repos: repos.iter().map(|s| (*s).to_owned()).collect(),
    }
}

const ACME_TOKEN: &str = "acme-team-token-0123456789";
const VAULT_TOKEN: &str = "vault-team-token-0123456789";

async fn post(url: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{url}/v1/search"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// A response with its timings removed, for comparisons.
fn shape(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("search_ms");
        o.remove("embed_ms");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_never_sees_another_repository_not_even_through_counts_or_errors() {
    let work = tempfile::tempdir().unwrap();
    let (_a, b, cfg) = two_repos(work.path()).await;
    let s = serve(
        &cfg,
        vec![
            token("acme", ACME_TOKEN, &["*/acme-api"]),
            token("vault", VAULT_TOKEN, &["*/secret-vault"]),
        ],
    )
    .await;

    // The vault's own word finds the vault for its team...
    let (st, v) = post(&s.url, Some(VAULT_TOKEN), r#"{"query":"zebracorn"}"#).await;
    assert_eq!(st, 200);
    assert!(
        v["results"][0]["repo"]
            .as_str()
            .unwrap()
            .ends_with("/secret-vault")
    );
    // ...and nothing of it for acme: not its text, ids or a count.
    let (st, v) = post(
        &s.url,
        Some(ACME_TOKEN),
        r#"{"query":"zebracorn master key rotation"}"#,
    )
    .await;
    assert_eq!(st, 200);
    let body = v.to_string();
    assert!(
        !body.contains("zebracorn")
            && !body.contains("secret-vault")
            && !body.contains("rotate_master_key"),
        "{body}"
    );
    // Filtering happens before top-k: with k=1 acme still gets its own best hit, although
    // the vault's `fetch_with_retries` matches the query better.
    let (_, v) = post(
        &s.url,
        Some(ACME_TOKEN),
        r#"{"query":"fetch_with_retries zebracorn","k":1}"#,
    )
    .await;
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    assert!(
        v["results"][0]["repo"]
            .as_str()
            .unwrap()
            .ends_with("/acme-api"),
        "{v}"
    );
    // Asking for the hidden repository by name answers exactly like a repository that does
    // not exist.
    let hidden = b
        .path()
        .to_string_lossy()
        .trim_end_matches(".git")
        .to_owned();
    let hidden_id = format!("local{hidden}");
    let (s1, v1) = post(
        &s.url,
        Some(ACME_TOKEN),
        &format!(r#"{{"query":"retries","repo":"{hidden_id}"}}"#),
    )
    .await;
    let (s2, v2) = post(
        &s.url,
        Some(ACME_TOKEN),
        r#"{"query":"retries","repo":"local/no/such/repo"}"#,
    )
    .await;
    assert_eq!((s1, shape(v1.clone())), (s2, shape(v2)), "{v1}");
    assert_eq!(v1["results"].as_array().unwrap().len(), 0);
    // Expansion never reaches across.
    let (_, v) = post(
        &s.url,
        Some(ACME_TOKEN),
        r#"{"query":"fetch_with_retries","expand":true,"k":5}"#,
    )
    .await;
    assert!(!v.to_string().contains("secret-vault"));
    // Health and metrics carry no counts of docs or repositories.
    let health = reqwest::get(format!("{}/healthz", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let h: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(h["status"], "ok");
    assert_eq!(h.as_object().unwrap().len(), 2, "{health}");
    let metrics = reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("trawl_query_searches_total"), "{metrics}");
    assert!(!metrics.contains("vault") && !metrics.contains("acme"));
    // No token, or a wrong one: 401 with what to send.
    let (st, v) = post(&s.url, None, r#"{"query":"x"}"#).await;
    assert_eq!(st, 401);
    assert!(v["error"].as_str().unwrap().contains("Bearer"), "{v}");
    let (st, _) = post(&s.url, Some("not-a-known-token-at-all"), r#"{"query":"x"}"#).await;
    assert_eq!(st, 401);
    let openapi: serde_json::Value = reqwest::get(format!("{}/openapi.json", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(openapi["openapi"], "3.1.0");
    assert!(openapi["paths"]["/v1/search"]["post"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_4xx_that_says_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let (_a, _b, cfg) = two_repos(work.path()).await;
    let s = serve(&cfg, vec![]).await;
    let ten_mb = format!(r#"{{"query":"{}"}}"#, "x".repeat(10 * 1024 * 1024));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("empty query", r#"{"query":"   "}"#.into(), 400, "empty"),
        ("10 MB query", ten_mb, 413, "limited to"),
        (
            "over-long query",
            format!(r#"{{"query":"{}"}}"#, "y".repeat(9000)),
            400,
            "at most 8192",
        ),
        (
            "unknown filter",
            r#"{"query":"x","colour":"red"}"#.into(),
            400,
            "unknown field `colour`",
        ),
        (
            "huge k",
            r#"{"query":"x","k":1000000000}"#.into(),
            400,
            "k must be between 1 and 100",
        ),
        (
            "zero k",
            r#"{"query":"x","k":0}"#.into(),
            400,
            "k must be between",
        ),
        (
            "invalid JSON",
            r#"{"query": "x""#.into(),
            400,
            "invalid search request",
        ),
        ("wrong type", r#"{"query": 5}"#.into(), 400, "invalid type"),
        (
            "unknown mode",
            r#"{"query":"x","mode":"psychic"}"#.into(),
            400,
            "unknown variant",
        ),
        (
            "bad path glob",
            r#"{"query":"x","path":"[oops"}"#.into(),
            400,
            "path pattern",
        ),
    ];
    for (what, body, status, needle) in cases {
        let (st, v) = post(&s.url, None, &body).await;
        assert_eq!(st, status, "{what}: {v}");
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("{what}: {v}"));
        assert!(msg.contains(needle), "{what}: {msg}");
    }
    // The service is still fine.
    let (st, _) = post(&s.url, None, r#"{"query":"retry"}"#).await;
    assert_eq!(st, 200);
    let m = &s.searcher.metrics;
    assert_eq!(m.bad_requests.get(), 10);
}

/// `/metrics` keeps the names, types and help texts dashboards and alerts read, and its
/// values move with the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_keep_their_names_types_and_help_and_count_what_happens() {
    let work = tempfile::tempdir().unwrap();
    let (_a, _b, cfg) = two_repos(work.path()).await;
    let s = serve(&cfg, vec![]).await;
    let scrape = || async {
        let r = reqwest::get(format!("{}/metrics", s.url)).await.unwrap();
        assert_eq!(r.status(), 200);
        let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(
            content_type.starts_with("application/openmetrics-text; version=1.0.0"),
            "{content_type}"
        );
        r.text().await.unwrap()
    };
    let before = scrape().await;
    let families = [
        ("trawl_query_searches", "counter", "Searches answered."),
        (
            "trawl_query_bad_requests",
            "counter",
            "Requests refused as malformed or over a limit.",
        ),
        (
            "trawl_query_unauthorized",
            "counter",
            "Requests without a valid bearer token.",
        ),
        ("trawl_query_errors", "counter", "Searches that failed."),
        (
            "trawl_query_generation_swaps",
            "counter",
            "Index generations loaded.",
        ),
        (
            "trawl_query_refused",
            "counter",
            "Requests refused for their Host or Content-Type (DNS rebinding, cross-site posts).",
        ),
        (
            "trawl_query_saturated",
            "counter",
            "Searches answered 503 because every search slot was taken.",
        ),
        (
            "trawl_query_timeouts",
            "counter",
            "Requests cut by the body or the whole-request timeout.",
        ),
        (
            "trawl_query_rerank_failures",
            "counter",
            "Searches answered without the reranker because it failed.",
        ),
        (
            "trawl_query_generation",
            "gauge",
            "The index generation served.",
        ),
        (
            "trawl_query_search_seconds",
            "histogram",
            "Search latency, excluding the query embedding.",
        ),
        (
            "trawl_query_embed_seconds",
            "histogram",
            "Query embedding latency.",
        ),
    ];
    for (family, kind, help) in families {
        assert!(
            before.contains(&format!("# HELP {family} {help}\n# TYPE {family} {kind}\n")),
            "{family}:\n{before}"
        );
    }
    let types = before.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(types, families.len(), "{before}");
    // A counter's samples end in `_total`, as they always did.
    let sample = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| Some(l.strip_prefix(name)?.strip_prefix(' ')?.to_owned()))
            .unwrap_or_else(|| panic!("no sample {name}:\n{text}"))
    };
    assert_eq!(sample(&before, "trawl_query_searches_total"), "0");
    assert_eq!(sample(&before, "trawl_query_bad_requests_total"), "0");
    assert_eq!(sample(&before, "trawl_query_generation_swaps_total"), "1");
    let generation = s.searcher.generation().unwrap().number;
    assert_eq!(
        sample(&before, "trawl_query_generation"),
        generation.to_string()
    );
    assert_eq!(sample(&before, "trawl_query_search_seconds_count"), "0");
    assert_eq!(
        sample(&before, "trawl_query_search_seconds_bucket{le=\"+Inf\"}"),
        "0"
    );
    assert!(before.contains("trawl_query_search_seconds_bucket{le=\"0.001\"} 0\n"));

    let (st, _) = post(&s.url, None, r#"{"query":"retry"}"#).await;
    assert_eq!(st, 200);
    let (st, _) = post(&s.url, None, r#"{"query":"   "}"#).await;
    assert_eq!(st, 400);
    let after = scrape().await;
    assert_eq!(sample(&after, "trawl_query_searches_total"), "1");
    assert_eq!(sample(&after, "trawl_query_bad_requests_total"), "1");
    assert_eq!(sample(&after, "trawl_query_search_seconds_count"), "1");
    assert_eq!(
        sample(&after, "trawl_query_search_seconds_bucket{le=\"+Inf\"}"),
        "1"
    );
    assert_eq!(sample(&after, "trawl_query_embed_seconds_count"), "1");
    assert!(
        sample(&after, "trawl_query_search_seconds_sum")
            .parse::<f64>()
            .unwrap()
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_generation_is_swapped_in_while_queries_run_and_none_fails() {
    let work = tempfile::tempdir().unwrap();
    let (a, _b, cfg) = two_repos(work.path()).await;
    let s = serve(&cfg, vec![]).await;
    let first = s.searcher.generation().unwrap().number;
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (url, stop, done, failed) = (s.url.clone(), stop.clone(), done.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (st, v) = post(&url, None, r#"{"query":"fetch_with_retries","k":3}"#).await;
                if st == 200 && !v["results"].as_array().unwrap().is_empty() {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // A change lands and is indexed while the clients query; the service loads it and swaps.
    a.commit(
        &[
            ("http/client.py", file(CLIENT_PY)),
            ("db/pool.rs", file(POOL_RS)),
            ("http/proxy.py", file("def resolve_proxy_for(url):\n    \"\"\"Pick the proxy configured for a URL's host.\"\"\"\n    return PROXIES.get(host_of(url))\n")),
        ],
        false,
    );
    let (w, pa) = (work.path().to_path_buf(), a.path());
    tokio::task::spawn_blocking(move || index(&w, &[&pa], "hash"))
        .await
        .unwrap();
    let swapped = s.searcher.refresh().await.unwrap();
    assert_eq!(swapped, Some(first.next()));
    let (st, v) = post(&s.url, None, r#"{"query":"resolve_proxy_for","k":1}"#).await;
    assert_eq!(st, 200);
    assert_eq!(v["generation"], first.next().0);
    assert_eq!(v["results"][0]["path"], "http/proxy.py");
    // Deleted in the new generation: README.md is gone from search.
    let (_, v) = post(
        &s.url,
        None,
        r#"{"query":"retry.attempts acme.toml","path":"README.md"}"#,
    )
    .await;
    assert!(v["results"].as_array().unwrap().is_empty(), "{v}");
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(done.load(Ordering::Relaxed) > 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reranker_reorders_the_fused_top_and_its_failure_only_adds_a_note() {
    use trawl_embed::fake::{FakeConfig, FakeVoyage};
    let work = tempfile::tempdir().unwrap();
    let (_a, _b, cfg) = two_repos(work.path()).await;
    let fake = FakeVoyage::start(FakeConfig {
        api_key: "fake-key".into(),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let store = Store::from_url(&cfg.store.url).unwrap();
    let reranker =
        trawl_query::rerank::Reranker::new(&fake.base_url(), "fake-key", "rerank-2.5", 20).unwrap();
    let searcher = Searcher::open(
        store.clone(),
        &cfg,
        Some(trawl_core::config::EmbedderKind::Hash),
    )
    .await
    .unwrap()
    .with_reranker(reranker);
    // Every word of this query is in the pool's docstring only: the fake reranker (share of
    // query words in the document) puts it first whatever the fusion said.
    let mut req = SearchRequest::new("borrows a connection waiting while every connection is busy");
    req.k = Some(3);
    let r = searcher.search(&req, Access::all()).await.unwrap();
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    assert!(
        r.results[0].text.contains("Borrows a connection"),
        "{:?}",
        r.results[0]
    );
    assert!(
        (r.results[0].score - 1.0).abs() < 1e-9,
        "relevance {}",
        r.results[0].score
    );
    assert!(fake.stats().outcomes.get("rerank").copied().unwrap_or(0) >= 1);

    let broken =
        trawl_query::rerank::Reranker::new(&fake.base_url(), "wrong-key", "rerank-2.5", 20)
            .unwrap();
    let searcher = Searcher::open(store, &cfg, Some(trawl_core::config::EmbedderKind::Hash))
        .await
        .unwrap()
        .with_reranker(broken);
    let r = searcher.search(&req, Access::all()).await.unwrap();
    assert!(!r.results.is_empty());
    // The provider's answer (it can name the account) stays in the server's log.
    assert_eq!(
        r.notes,
        [trawl_query::service::RERANK_FAILED],
        "{:?}",
        r.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_serve_reads_tokens_from_the_config_and_trawl_search_asks_it() {
    use std::io::{BufRead, BufReader};
    let work = tempfile::tempdir().unwrap();
    let (_a, _b, _cfg) = two_repos(work.path()).await;
    let config = work.path().join("trawl.toml");
    std::fs::write(
        &config,
        "[query]\nlisten = \"127.0.0.1:0\"\npoll_secs = 1\n\n[[query.tokens]]\nname = \"acme\"\ntoken_env = \"ACME_QUERY_TOKEN\"\nrepos = [\"*/acme-api\"]\n",
    )
    .unwrap();
    let mut server = trawl(work.path())
        .args([
            "--config",
            "trawl.toml",
            "--set",
            "embed.embedder=hash",
            "serve",
        ])
        .env("ACME_QUERY_TOKEN", ACME_TOKEN)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = server.stderr.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                l.split("listening on ")
                    .nth(1)
                    .map(|r| r.split(' ').next().unwrap().to_owned())
            })
            .expect("the server says where it listens");
        // Keep draining so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        url
    })
    .await
    .unwrap();
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let w = work.path().to_path_buf();
    let u = url.clone();
    let (with_token, without) = tokio::task::spawn_blocking(move || {
        let run = |token: Option<&str>| {
            let mut c = trawl(&w);
            c.args(["search", "retries zebracorn", "--json", "--server", &u]);
            if let Some(t) = token {
                c.env("TRAWL_TOKEN", t);
            }
            c.output().unwrap()
        };
        (run(Some(ACME_TOKEN)), run(None))
    })
    .await
    .unwrap();
    let text = ok(&with_token);
    assert!(!text.is_empty());
    assert!(text.lines().all(|l| l.contains("/acme-api")), "{text}");
    assert!(!without.status.success());
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(err.contains("401") && err.contains("bearer token"), "{err}");
    // SIGTERM: a graceful stop.
    let pid = server.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = tokio::task::spawn_blocking(move || server.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn an_interrupted_index_run_is_resumed_and_nothing_chunked_stays_unembedded() {
    let src = acme();
    let work = tempfile::tempdir().unwrap();
    // What a run killed after chunking leaves: chunks written and the repository's state
    // recorded, nothing embedded, the run's marker still there.
    ok(&trawl(work.path())
        .args(["fetch", "--repo"])
        .arg(src.path())
        .output()
        .unwrap());
    ok(&trawl(work.path())
        .args(["chunk-worker", "--once"])
        .output()
        .unwrap());
    std::fs::create_dir_all(work.path().join(".trawl/pipeline")).unwrap();
    std::fs::write(
        work.path().join(".trawl/pipeline/index-in-progress.json"),
        "{}",
    )
    .unwrap();
    let summary = index(work.path(), &[&src.path()], "hash");
    assert!(summary.contains("resumed an interrupted run"), "{summary}");
    assert!(summary.contains("1 unchanged"), "{summary}");
    let line = summary
        .lines()
        .find(|l| l.contains("generation 1 live"))
        .unwrap();
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // generation, chunks, repositories, with vectors, …
    assert!(
        nums[1] > 0 && nums[1] == nums[3],
        "every chunk has its vector: {line}"
    );
    assert!(
        !work
            .path()
            .join(".trawl/pipeline/index-in-progress.json")
            .exists()
    );
    // The next run is a plain incremental one.
    let again = index(work.path(), &[&src.path()], "hash");
    assert!(!again.contains("resumed"), "{again}");
}

#[tokio::test]
async fn a_deferred_fetch_records_the_state_only_when_told() {
    use trawl_core::bus::InProcBus;
    use trawl_fetcher::{Fetcher, RunOptions};
    let src = acme();
    let store = Store::memory();
    let cache = tempfile::tempdir().unwrap();
    let cfg = trawl_core::config::FetchConfig {
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    };
    let fetcher = Fetcher::new(cfg, store.clone(), Arc::new(InProcBus::new(64)));
    let spec = trawl_fetcher::repos::resolve(&src.path().to_string_lossy(), cache.path()).unwrap();
    let opts = RunOptions {
        defer_state: true,
        ..RunOptions::default()
    };
    let report = fetcher
        .run(
            std::slice::from_ref(&spec),
            &opts,
            Arc::new(trawl_fetcher::Quiet),
        )
        .await;
    let state = trawl_core::store::keys::repo_state(&spec.id);
    assert!(
        !store.exists_key(&state).await.unwrap(),
        "not before the events are processed"
    );
    fetcher.commit_states(&report).await.unwrap();
    assert!(store.exists_key(&state).await.unwrap());
}

/// A fake OpenAI-compatible chat-completions endpoint: answers every question with `code`
/// (in a Markdown fence, as models do) after `delay`, counting the requests and keeping the
/// last body; a bearer key other than `key` is refused.
async fn fake_chat(
    code: &'static str,
    delay: std::time::Duration,
    key: String,
) -> (
    String,
    Arc<AtomicU64>,
    Arc<std::sync::Mutex<serde_json::Value>>,
    tokio::task::JoinHandle<()>,
) {
    use axum::http::{HeaderMap, StatusCode};
    let requests = Arc::new(AtomicU64::new(0));
    let last = Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    let (n, l) = (requests.clone(), last.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(
            move |headers: HeaderMap, axum::Json(body): axum::Json<serde_json::Value>| {
                let (n, l, want) = (n.clone(), l.clone(), format!("Bearer {key}"));
                async move {
                    n.fetch_add(1, Ordering::Relaxed);
                    *l.lock().unwrap() = body;
                    tokio::time::sleep(delay).await;
                    if headers.get("authorization").and_then(|v| v.to_str().ok())
                        != Some(want.as_str())
                    {
                        return (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({})));
                    }
                    let content = format!("```python\n{code}\n```");
                    (
                        StatusCode::OK,
                        axum::Json(serde_json::json!({
                            "choices": [{"message": {"role": "assistant", "content": content}}]
                        })),
                    )
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, requests, last, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyde_searches_the_hypothetical_code_beside_the_question_and_a_slow_generator_only_adds_a_note()
 {
    let work = tempfile::tempdir().unwrap();
    let (_a, _b, mut cfg) = two_repos(work.path()).await;
    let store = Store::from_url(&cfg.store.url).unwrap();
    // No word of the question is in the code that answers it; the generated code is.
    let question = "what turns the reply that came back over the wire into something we can use?";
    let code = "def parse_http_response(raw):\n    head, _, body = raw.partition(\"\\r\\n\\r\\n\")\n    status = int(head.split()[1])\n    return status, body";
    // The key comes from the environment variable `query.hyde_key_env` names: one every
    // process has stands in for it.
    let key = std::env::var("PATH").unwrap();
    let (url, requests, last, server) =
        fake_chat(code, std::time::Duration::ZERO, key.clone()).await;
    let mut req = SearchRequest::new(question);
    req.k = Some(3);
    let top =
        |r: &trawl_query::request::SearchResponse| r.results.first().and_then(|h| h.symbol.clone());

    let plain = Searcher::open(store.clone(), &cfg, None).await.unwrap();
    let without = plain.search(&req, Access::all()).await.unwrap();
    assert_ne!(top(&without).as_deref(), Some("parse_http_response"));

    cfg.query.hyde = true;
    cfg.query.hyde_url = url;
    cfg.query.hyde_model = "fake-coder".into();
    cfg.query.hyde_key_env = "PATH".into();
    // The hash embedder's vectors are crude: the arm's weight makes its effect plain.
    cfg.query.hyde_weight = 1.5;
    let hyde = Searcher::open(store.clone(), &cfg, None).await.unwrap();
    let with = hyde.search(&req, Access::all()).await.unwrap();
    assert!(with.notes.is_empty(), "{:?}", with.notes);
    assert_eq!(
        top(&with).as_deref(),
        Some("parse_http_response"),
        "{:?}",
        with.results
    );
    let body = last.lock().unwrap().clone();
    assert_eq!(body["model"], "fake-coder");
    assert_eq!(body["messages"][1]["content"], question);
    // The same question again is answered from the cache; a symbol never asks.
    hyde.search(&req, Access::all()).await.unwrap();
    hyde.search(&SearchRequest::new("parse_http_response"), Access::all())
        .await
        .unwrap();
    assert_eq!(requests.load(Ordering::Relaxed), 1);
    server.abort();

    // A generator slower than the timeout: the plain search answers, with a note.
    let (url, _, _, slow) = fake_chat(code, std::time::Duration::from_secs(5), key.clone()).await;
    cfg.query.hyde_url = url;
    cfg.query.hyde_timeout_ms = 200;
    let slow_searcher = Searcher::open(store.clone(), &cfg, None).await.unwrap();
    let r = slow_searcher.search(&req, Access::all()).await.unwrap();
    assert_eq!(top(&r), top(&without));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("did not answer within 200 ms")),
        "{:?}",
        r.notes
    );
    slow.abort();

    // A refused key: a note that says where to look.
    let (url, _, _, refusing) = fake_chat(code, std::time::Duration::ZERO, key).await;
    cfg.query.hyde_url = url;
    cfg.query.hyde_key_env = "TRAWL_TEST_HYDE_NO_KEY".into();
    let refused = Searcher::open(store, &cfg, None).await.unwrap();
    let r = refused.search(&req, Access::all()).await.unwrap();
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("401") && n.contains("$TRAWL_TEST_HYDE_NO_KEY")),
        "{:?}",
        r.notes
    );
    refusing.abort();
}

/// `trawl index` of `src` into `work` with the hash embedder, recording its last `commits`
/// commit messages.
fn index_recording_commits(work: &std::path::Path, src: &SourceRepo, commits: u32) {
    let out = trawl(work)
        .args(["--set", &format!("fetch.commit_history={commits}"), "index"])
        .arg(src.path())
        .args(["--embedder", "hash"])
        .output()
        .unwrap();
    ok(&out);
}

#[test]
fn a_change_told_in_other_words_is_found_through_the_code_it_changed() {
    let src = SourceRepo::named("acme-body");
    let encode_v1 = "def encode_json(data):\n    \"\"\"The request body for a JSON payload.\"\"\"\n    body = json.dumps(data)\n    return {\"Content-Type\": \"application/json\"}, body.encode()\n";
    let encode_v2 = "def encode_json(data):\n    \"\"\"The request body for a JSON payload: no spaces after commas and colons.\"\"\"\n    body = json.dumps(data, separators=(\",\", \":\"), ensure_ascii=False)\n    return {\"Content-Type\": \"application/json\"}, body.encode()\n";
    let parts_v1 = "def iter_parts(parts):\n    for part in parts:\n        yield part\n";
    let parts_v2 = "def iter_parts(parts):\n    for part in parts:\n        if part:\n            yield part\n";
    src.commit_saying(
        &[
            ("content.py", file(encode_v1)),
            ("streams.py", file(parts_v1)),
        ],
        false,
        "First version",
    );
    let compact = src.commit_saying(
        &[
            ("content.py", file(encode_v2)),
            ("streams.py", file(parts_v1)),
        ],
        false,
        "Ensure the representation is compact (#3367)",
    );
    let other = src.commit_saying(
        &[
            ("content.py", file(encode_v2)),
            ("streams.py", file(parts_v2)),
        ],
        false,
        "Request bodies sent in chunks skip empty chunks now",
    );
    let work = tempfile::tempdir().unwrap();
    index_recording_commits(work.path(), &src, 2);
    // The fused ranking, before the learned ranking orders its first candidates again.
    let first_commit = |lend: &str| {
        let set = format!("query.history_lend={lend}");
        let hits = search_json(
            work.path(),
            &[
                "why are JSON request bodies now sent without spaces after commas?",
                "--set",
                "query.ranker_pool=0",
                "--set",
                &set,
            ],
        );
        hits.iter()
            .find(|h| h["kind"] == "commit")
            .map(|h| h["commit"].as_str().unwrap().to_owned())
    };
    // The message shares no word with the question; the code it changed does, and lends it
    // its score.
    assert_eq!(first_commit("1"), Some(compact.to_string()));
    // By its words alone, the commit that says "request bodies" comes first.
    assert_eq!(first_commit("0"), Some(other.to_string()));
}

#[test]
fn why_code_changed_is_answered_by_the_commit_that_changed_it() {
    let src = SourceRepo::named("acme-history");
    let v1 = "def fetch(url):\n    for attempt in range(3):\n        try:\n            return download(url)\n        except ConnectionError:\n            pass\n";
    let v2 = "def fetch(url):\n    return download(url)\n";
    src.commit_saying(
        &[("client.py", file(v1))],
        false,
        "Add the HTTP client with three attempts",
    );
    src.commit_saying(
        &[("client.py", file(v1)), ("README.md", file("# acme\n"))],
        false,
        "Document the client",
    );
    let removal = src.commit_saying(
        &[("client.py", file(v2)), ("README.md", file("# acme\n"))],
        false,
        "Remove the retry loop from fetch\n\nRetrying hid outages from the callers: fail fast and let them decide.",
    );
    let work = tempfile::tempdir().unwrap();
    // The first run records the last two commits only.
    index_recording_commits(work.path(), &src, 2);
    let hits = search_json(work.path(), &["why was the retry removed", "-k", "3"]);
    let top = &hits[0];
    assert_eq!(top["kind"], "commit", "{hits:?}");
    assert_eq!(top["commit"], removal.to_string());
    assert!(
        top["text"]
            .as_str()
            .unwrap()
            .starts_with("Remove the retry loop from fetch"),
        "{top}"
    );
    assert!(top["text"].as_str().unwrap().contains("changed: client.py"));
    // The definitions whose lines it changed, as the file reads now.
    assert!(
        top["text"].as_str().unwrap().contains("touched: fetch"),
        "{top}"
    );
    let human = ok(&trawl(work.path())
        .args(["search", "why was the retry removed", "-k", "1"])
        .output()
        .unwrap());
    let short = &removal.to_string()[..12];
    assert!(
        human
            .lines()
            .next()
            .unwrap()
            .contains(&format!("acme-history@{short} · ")),
        "{human}"
    );
    // Older than the first run's bound: not recorded.
    let commits = search_json(work.path(), &["client attempts", "--kind", "commit"]);
    assert_eq!(commits.len(), 2, "{commits:?}");
    assert!(
        commits
            .iter()
            .all(|h| !h["text"].as_str().unwrap().contains("three attempts")),
        "{commits:?}"
    );
    // Commit messages switched off: they never answer.
    let off = search_json(
        work.path(),
        &["why was the retry removed", "--set", "query.commits=false"],
    );
    assert!(off.iter().all(|h| h["kind"] != "commit"), "{off:?}");
    // A code question does not get commits first.
    let code = search_json(work.path(), &["fetch", "-k", "1"]);
    assert_eq!(code[0]["kind"], "function", "{code:?}");
    // Expanded, the code shows the commit that last changed its lines: why it reads so.
    let expanded = search_json(work.path(), &["fetch", "-k", "1", "--expand"]);
    let why: Vec<&serde_json::Value> = expanded[0]["context"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["relation"] == "commit")
        .collect();
    assert_eq!(why.len(), 1, "{expanded:?}");
    assert_eq!(why[0]["commit"], removal.to_string());
    assert!(
        why[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Remove the retry loop"),
        "{why:?}"
    );
    let human = ok(&trawl(work.path())
        .args(["search", "fetch", "-k", "1", "--expand"])
        .output()
        .unwrap());
    assert!(
        human.contains(&format!(
            "↳ commit    {}@{} · Remove the retry loop from fetch",
            why[0]["repo"].as_str().unwrap(),
            &removal.to_string()[..12]
        )),
        "{human}"
    );

    // Every new commit after: both are found, a secret in a message is not.
    src.commit_saying(
        &[
            ("client.py", file(v2)),
            ("README.md", file("# acme\n\nfail fast\n")),
        ],
        false,
        "Explain failing fast in the README",
    );
    src.commit_saying(
        &[("client.py", file(v2)), ("README.md", file("# acme\n\nfail fast\n\nno retries\n"))],
        false,
        "Say that there are no retries\n\nThe key for the staging bucket was AKIAIOSFODNN7EXAMPL2 (rotated).",
    );
    let out = trawl(work.path())
        .args(["index"])
        .arg(src.path())
        .args(["--embedder", "hash"])
        .output()
        .unwrap();
    ok(&out);
    for q in ["explain failing fast", "say that there are no retries"] {
        let hits = search_json(work.path(), &[q, "--kind", "commit", "-k", "1"]);
        assert_eq!(hits.len(), 1, "{q}: {hits:?}");
    }
    let mut stored = String::new();
    for e in crate::support::files_under(&work.path().join(".trawl/commits")) {
        stored.push_str(&std::fs::read_to_string(e).unwrap());
    }
    assert!(stored.contains("Say that there are no retries"));
    assert!(!stored.contains("AKIAIOSFODNN7EXAMPL2"), "{stored}");
}
