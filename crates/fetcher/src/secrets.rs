//! Secrets: which files are never published, and which are published with the secret cut out.
//!
//! An org-wide index is a security boundary — whatever it indexes, every token that can see the
//! repository can search — so the fetcher looks for secrets before any text reaches the bus.
//! Two kinds of rule, each with a stable id (the ids of gitleaks, the field's reference, where
//! it has one):
//!
//! - **path rules** ([`PATH_RULES`]): files whose very name says they hold credentials (env
//!   files of every spelling, cloud and cluster credentials, SSH keys, keystores, Terraform
//!   variables and state). Matched case-insensitively; always [`Action::Skip`].
//! - **content rules** ([`RULES`]): a private key anywhere in the text (PEM, PKCS#8, encrypted
//!   PEM, OpenSSH, PGP — also inside a string literal, with `\n` escapes), a service-account
//!   JSON, provider token formats (AWS, GitHub, GitLab, Slack, Stripe, Google, Azure, OpenAI,
//!   JWTs, …) and generic high-entropy assignments to names such as `password` or `api_key`.
//!
//! **The decision is per rule.** A private key or a credentials file makes the whole file
//! [`Action::Skip`]: nothing else in it is worth the risk. A token is [`Action::Redact`]ed in
//! place — `[REDACTED:github-pat]` replaces the secret on the same line — because a
//! `settings.py` with one key in it is still worth finding by its other content. Redaction
//! never adds or removes a line, so line numbers cited downstream stay true.
//!
//! **Why not a crate.** The Rust crates that carry a gitleaks-derived ruleset are young
//! single-maintainer releases that need a newer compiler than the workspace's; a table of
//! `regex` patterns is small enough to own. It is compiled once per process. Each rule names
//! keywords (gitleaks' model: `ghp_`, `-----begin`, `password`, …); one [`RegexSet`] of those
//! literals, case-insensitive, is a single fast pass that says which rules can match at all,
//! and only those run their own regex. The regexes are ASCII-mode (`(?-u:\b)`, explicit
//! whitespace) so that the lazy DFA never falls back to a slower engine on non-ASCII text:
//! together, 0.20 s for the Python standard library's 102 MB in a debug build, against 0.26 s
//! for the line-by-line private-key check this replaced (`benches/secrets.rs`).
//!
//! **False positives.** Generic assignments must look random: at least 3.5 bits of entropy per
//! character, or 85 % of the most a value of that length can hold, and not a code reference
//! (`os.environ`, `settings.SECRET_KEY`, `get_token()`, `str`, `AtomicU64`), nor words
//! (`changeme`, `my-app-secret`, `Incorrect`). Provider formats have no entropy gate: a
//! documentation key such as `AKIAIOSFODNN7EXAMPLE` is redacted too, since a fake key and a real
//! one look alike.

use std::sync::LazyLock;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use regex::{Regex, RegexSet};
use serde::Serialize;

/// What a rule does to a file it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The file is not published at all (`secret` in the manifest).
    Skip,
    /// The file is published with each secret replaced by `[REDACTED:<rule id>]`.
    Redact,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Skip => "skip",
            Action::Redact => "redact",
        }
    }
}

/// The filters a match of a loosely defined rule must pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// None: the format is the evidence.
    Format,
    /// Random-looking: entropy, and not lowercase words.
    Random,
    /// Random-looking, and not code (`os.environ`, `get_token()`, `AtomicU64`): a value
    /// assigned to a secret-sounding name.
    Assignment,
}

/// A content rule: the secret is capture group 1 when the regex has one, else the whole match.
#[derive(Debug)]
pub struct Rule {
    pub id: &'static str,
    /// Lowercase literals, matched case-insensitively, of which the text must hold one for
    /// the regex to run (gitleaks' keywords): the prefilter.
    keywords: &'static [&'static str],
    pub action: Action,
    pub description: &'static str,
    regex: &'static str,
    /// What a match must also pass to count.
    gate: Gate,
    /// A string that must also occur in the file.
    requires: Option<&'static str>,
}

const fn rule(
    id: &'static str,
    keywords: &'static [&'static str],
    action: Action,
    description: &'static str,
    regex: &'static str,
) -> Rule {
    Rule {
        id,
        keywords,
        action,
        description,
        regex,
        gate: Gate::Format,
        requires: None,
    }
}

const fn gated(
    gate: Gate,
    id: &'static str,
    keywords: &'static [&'static str],
    description: &'static str,
    regex: &'static str,
) -> Rule {
    Rule {
        id,
        keywords,
        action: Action::Redact,
        description,
        regex,
        gate,
        requires: None,
    }
}

/// The content rules, most specific first: when two rules cover the same text, the earlier
/// one names it.
pub static RULES: &[Rule] = &[
    rule(
        "private-key",
        &["-----begin"],
        Action::Skip,
        "a PEM, PKCS#8, encrypted PEM, OpenSSH or PGP private key, also inside a string",
        // The marker, then (across quotes, concatenation, `\n` escapes and PEM headers such
        // as `Proc-Type:`) a run of base64: prose that merely names the marker is not a key.
        r#"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----(?:\\[nr]|[ \t\n\r\x0B\x0C"'`+,;]|[A-Za-z][A-Za-z-]{1,30}:[^\n\\"]*)*[A-Za-z0-9+/=]{20,}"#,
    ),
    Rule {
        requires: Some(r#""private_key""#),
        ..rule(
            "gcp-service-account",
            &["service_account"],
            Action::Skip,
            "a Google Cloud service-account key file (type service_account with a private_key)",
            r#""type"[ \t]*:[ \t]*"service_account""#,
        )
    },
    rule(
        "aws-access-token",
        &["a3t", "akia", "asia", "abia", "acca"],
        Action::Redact,
        "an AWS access key id",
        r"(?-u:\b)((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})(?-u:\b)",
    ),
    gated(
        Gate::Random,
        "aws-secret-access-key",
        &["aws"],
        "an AWS secret access key assigned to an aws…secret… name",
        r#"(?i-u:aws)[A-Za-z0-9_.-]{0,20}(?i-u:secret)[A-Za-z0-9_.-]{0,20}["']?[ \t]*(?::=|=>|=|:)[ \t]*["'`]?([A-Za-z0-9/+=]{40})(?:["'`;,) \t\n\r\x0B\x0C]|\\[nrt]|$)"#,
    ),
    rule(
        "github-pat",
        &["ghp_"],
        Action::Redact,
        "a GitHub personal access token (classic)",
        r"(?-u:\b)ghp_[0-9A-Za-z]{36}(?-u:\b)",
    ),
    rule(
        "github-fine-grained-pat",
        &["github_pat_"],
        Action::Redact,
        "a GitHub fine-grained personal access token",
        r"(?-u:\b)github_pat_[0-9A-Za-z_]{82}(?-u:\b)",
    ),
    rule(
        "github-oauth",
        &["gho_"],
        Action::Redact,
        "a GitHub OAuth access token",
        r"(?-u:\b)gho_[0-9A-Za-z]{36}(?-u:\b)",
    ),
    rule(
        "github-app-token",
        &["ghu_", "ghs_"],
        Action::Redact,
        "a GitHub App user or installation token",
        r"(?-u:\b)(?:ghu|ghs)_[0-9A-Za-z]{36}(?-u:\b)",
    ),
    rule(
        "github-refresh-token",
        &["ghr_"],
        Action::Redact,
        "a GitHub refresh token",
        r"(?-u:\b)ghr_[0-9A-Za-z]{36}(?-u:\b)",
    ),
    rule(
        "gitlab-pat",
        &["glpat-"],
        Action::Redact,
        "a GitLab personal access token",
        r"(?-u:\b)glpat-[0-9A-Za-z_-]{20,}",
    ),
    rule(
        "gitlab-ptt",
        &["glptt-"],
        Action::Redact,
        "a GitLab pipeline trigger token",
        r"(?-u:\b)glptt-[0-9a-f]{40}(?-u:\b)",
    ),
    rule(
        "slack-bot-token",
        &["xoxb-"],
        Action::Redact,
        "a Slack bot token",
        r"(?-u:\b)xoxb-[0-9]{10,13}-[0-9]{10,13}[A-Za-z0-9-]*",
    ),
    rule(
        "slack-user-token",
        &["xoxp-", "xoxe-"],
        Action::Redact,
        "a Slack user token",
        r"(?-u:\b)xox[pe](?:-[0-9]{10,13}){3}-[A-Za-z0-9-]{28,34}",
    ),
    rule(
        "slack-legacy-token",
        &["xoxa-", "xoxo-", "xoxr-", "xoxs-"],
        Action::Redact,
        "a Slack legacy, workspace, refresh or configuration token",
        r"(?-u:\b)xox[aors]-(?:[0-9]+-)*[0-9A-Za-z]{8,48}",
    ),
    rule(
        "slack-app-token",
        &["xapp-"],
        Action::Redact,
        "a Slack app-level token",
        r"(?i-u:(?-u:\b)xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+)",
    ),
    rule(
        "slack-webhook-url",
        &["hooks.slack.com"],
        Action::Redact,
        "a Slack incoming-webhook URL",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
    ),
    rule(
        "stripe-access-token",
        &[
            "sk_test_", "sk_live_", "sk_prod_", "rk_test_", "rk_live_", "rk_prod_",
        ],
        Action::Redact,
        "a Stripe secret or restricted key",
        r"(?-u:\b)(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}(?-u:\b)",
    ),
    rule(
        "gcp-api-key",
        &["aiza"],
        Action::Redact,
        "a Google API key",
        r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
    ),
    rule(
        "azure-storage-account-key",
        &["accountkey=", "sharedaccesskey="],
        Action::Redact,
        "an Azure storage account key or shared access key (connection strings)",
        r"(?i-u:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{40,88}={0,2})",
    ),
    rule(
        "azure-ad-client-secret",
        &["q~"],
        Action::Redact,
        "an Azure AD (Entra ID) client secret",
        r#"(?:^|[\\'"` \t\n\r\x0B\x0C>=:(,])([A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34})(?:$|[\\'"` \t\n\r\x0B\x0C<),])"#,
    ),
    rule(
        "openai-api-key",
        &["sk-"],
        Action::Redact,
        "an OpenAI API key (legacy or project/service-account/admin)",
        r"(?-u:\b)sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
    ),
    rule(
        "anthropic-api-key",
        &["sk-ant-"],
        Action::Redact,
        "an Anthropic API key",
        r"(?-u:\b)sk-ant-(?:api03|admin01)-[A-Za-z0-9_-]{80,}",
    ),
    rule(
        "huggingface-access-token",
        &["hf_"],
        Action::Redact,
        "a Hugging Face access token",
        r"(?-u:\b)hf_[A-Za-z]{34}(?-u:\b)",
    ),
    rule(
        "npm-access-token",
        &["npm_"],
        Action::Redact,
        "an npm access token",
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
    ),
    rule(
        "pypi-upload-token",
        &["pypi-ageichlwas5vcmc"],
        Action::Redact,
        "a PyPI upload token",
        r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
    ),
    rule(
        "sendgrid-api-token",
        &["sg."],
        Action::Redact,
        "a SendGrid API key",
        r"(?-u:\b)SG\.[A-Za-z0-9=_.-]{66}",
    ),
    rule(
        "digitalocean-pat",
        &["dop_v1_"],
        Action::Redact,
        "a DigitalOcean personal access token",
        r"(?-u:\b)dop_v1_[a-f0-9]{64}(?-u:\b)",
    ),
    rule(
        "shopify-access-token",
        &["shpat_", "shpca_", "shppa_", "shpss_"],
        Action::Redact,
        "a Shopify access token",
        r"(?-u:\b)shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}(?-u:\b)",
    ),
    rule(
        "jwt",
        &["eyj"],
        Action::Redact,
        "a JSON Web Token",
        r"(?-u:\b)eyJ[A-Za-z0-9]{16,}\.eyJ[A-Za-z0-9/_-]{16,}\.(?:[A-Za-z0-9/_-]{10,}={0,2})?",
    ),
    gated(
        Gate::Random,
        "url-credentials",
        &["://"],
        "a password in a URL (scheme://user:password@host)",
        r#"(?-u:\b)[A-Za-z][A-Za-z0-9+.-]{1,20}://[^ \t\n\r\x0B\x0C:/@"'`]{1,64}:([^ \t\n\r\x0B\x0C:/@"'`$%{}<>]{8,128})@[A-Za-z0-9.-]+"#,
    ),
    gated(
        Gate::Random,
        "http-bearer-token",
        &["bearer"],
        "a bearer token after `Bearer`",
        r"(?-u:\b)(?i-u:bearer)[ \t]+([A-Za-z0-9._~+/-]{20,}=*)",
    ),
    gated(
        Gate::Assignment,
        "generic-api-key",
        &["passw", "pwd", "secret", "token", "key", "credential"],
        "a random-looking value assigned to a name such as password, secret, token or api_key",
        r#"(?i-u:passw(?:or)?d|pwd|secret|token|(?:api|access|secret|private|signing|encryption|master|client|auth|app)[_.-]?key|apikey|credentials?)[A-Za-z0-9_.-]{0,20}["']?[ \t]*(?::=|=>|\|\|=|\?=|=|:)[ \t]*["'`]?([A-Za-z0-9_/+][A-Za-z0-9_.+/~!@#%^&*=$-]{7,149})(?:["'`;,) \t\n\r\x0B\x0C\]}]|\\[nrt]|$)"#,
    ),
];

/// A path rule: files whose name says they hold credentials.
#[derive(Debug)]
pub struct PathRule {
    pub id: &'static str,
    pub description: &'static str,
    globs: &'static [&'static str],
}

/// The path rules. Globs are matched case-insensitively against the path in the repository.
pub static PATH_RULES: &[PathRule] = &[
    PathRule {
        id: "env-file",
        description: "environment files: .env, .env.*, *.env, .envrc",
        globs: &["**/.env", "**/.env.*", "**/*.env", "**/.envrc"],
    },
    PathRule {
        id: "private-key-file",
        description: "key files: *.pem, *.key, *.p8, *.pk8, *.ppk",
        globs: &["**/*.pem", "**/*.key", "**/*.p8", "**/*.pk8", "**/*.ppk"],
    },
    PathRule {
        id: "ssh-key-file",
        description: "SSH keys: id_rsa, id_dsa, id_ecdsa, id_ed25519 (not *.pub), .ssh/",
        globs: &[
            "**/id_rsa*",
            "**/id_dsa*",
            "**/id_ecdsa*",
            "**/id_ed25519*",
            "**/.ssh/**",
        ],
    },
    PathRule {
        id: "keystore-file",
        description: "keystores and password databases: *.jks, *.p12, *.pfx, *.keystore, *.bks, *.kdbx",
        globs: &[
            "**/*.jks",
            "**/*.p12",
            "**/*.pfx",
            "**/*.keystore",
            "**/*.bks",
            "**/*.kdbx",
        ],
    },
    PathRule {
        id: "cloud-credentials-file",
        description: "cloud credentials: .aws/credentials, gcloud's credentials.db, access_tokens.db and application_default_credentials.json, credentials{,.json,.yml,.yaml,.toml}, .s3cfg, .boto",
        globs: &[
            "**/.aws/credentials",
            "**/credentials",
            "**/credentials.json",
            "**/credentials.yml",
            "**/credentials.yaml",
            "**/credentials.toml",
            "**/credentials.db",
            "**/access_tokens.db",
            "**/application_default_credentials.json",
            "**/.config/gcloud/**",
            "**/.s3cfg",
            "**/.boto",
        ],
    },
    PathRule {
        id: "kube-config",
        description: "Kubernetes client configuration: .kube/config, kubeconfig, *.kubeconfig",
        globs: &[
            "**/.kube/config",
            "**/kubeconfig",
            "**/kubeconfig.yaml",
            "**/kubeconfig.yml",
            "**/*.kubeconfig",
        ],
    },
    PathRule {
        id: "docker-config",
        description: "Docker registry credentials: .docker/config.json, .dockercfg",
        globs: &["**/.docker/config.json", "**/.dockercfg"],
    },
    PathRule {
        id: "package-registry-credentials",
        description: "package-registry credentials: .npmrc, .pypirc, .gem/credentials",
        globs: &["**/.npmrc", "**/.pypirc", "**/.gem/credentials"],
    },
    PathRule {
        id: "netrc-file",
        description: "login files: .netrc, _netrc, .git-credentials, .htpasswd, .pgpass, .my.cnf",
        globs: &[
            "**/.netrc",
            "**/_netrc",
            "**/.git-credentials",
            "**/.htpasswd",
            "**/.pgpass",
            "**/.my.cnf",
        ],
    },
    PathRule {
        id: "terraform-secrets",
        description: "Terraform variables and state: *.tfvars*, *.tfstate*, .terraformrc, terraform.rc",
        globs: &[
            "**/*.tfvars",
            "**/*.tfvars.*",
            "**/*.tfstate",
            "**/*.tfstate.*",
            "**/.terraformrc",
            "**/terraform.rc",
        ],
    },
];

/// Paths that document secrets without holding them: templates, samples, public keys. Their
/// content is still scanned.
const PATH_EXCEPTIONS: &[&str] = &[
    "**/*.example",
    "**/*.sample",
    "**/*.template",
    "**/*.dist",
    "**/*.pub",
];

/// One secret found: the rule, the 1-based line, what is done. Never the secret itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    /// 1-based; 0 for a path rule (the whole file), left out of JSON.
    #[serde(skip_serializing_if = "is_zero")]
    pub line: usize,
    pub action: Action,
}

/// What the content rules decided for a text.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Nothing found: the text as it was.
    Clean(&'a str),
    /// Publish this text instead: every finding was redacted in place.
    Redacted {
        text: String,
        findings: Vec<Finding>,
    },
    /// Do not publish the file; the first finding that says so.
    Skip(Finding),
}

/// A glob of the path rules or exceptions; the tables are constants, so a bad one is a bug.
pub(crate) fn glob_set<'a>(globs: impl IntoIterator<Item = &'a str>) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(
            GlobBuilder::new(g)
                .case_insensitive(true)
                .literal_separator(true)
                .build()
                .expect("the built-in secret globs are valid"),
        );
    }
    b.build().expect("the built-in secret globs compile")
}

struct Compiled {
    set: RegexSet,
    regexes: Vec<Regex>,
    paths: GlobSet,
    /// Index in [`PATH_RULES`] of each glob of `paths`.
    path_rule_of: Vec<usize>,
    exceptions: GlobSet,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let keywords = RULES.iter().map(|r| {
        let words: Vec<String> = r.keywords.iter().map(|k| regex::escape(k)).collect();
        format!("(?i-u:{})", words.join("|"))
    });
    let patterns: Vec<String> = RULES.iter().map(|r| format!("(?m){}", r.regex)).collect();
    Compiled {
        set: RegexSet::new(keywords).expect("the built-in secret keywords compile"),
        regexes: patterns
            .iter()
            .map(|p| Regex::new(p).expect("the built-in secret rules compile"))
            .collect(),
        paths: glob_set(PATH_RULES.iter().flat_map(|r| r.globs.iter().copied())),
        path_rule_of: PATH_RULES
            .iter()
            .enumerate()
            .flat_map(|(i, r)| std::iter::repeat_n(i, r.globs.len()))
            .collect(),
        exceptions: glob_set(PATH_EXCEPTIONS.iter().copied()),
    }
});

/// The id of the path rule that makes this path a credentials file, if any.
pub fn path_rule(path: &str) -> Option<&'static str> {
    let c = &*COMPILED;
    if c.exceptions.is_match(path) {
        return None;
    }
    c.paths
        .matches(path)
        .first()
        .map(|&g| PATH_RULES[c.path_rule_of[g]].id)
}

/// A secret's place in the text, before it is cut out.
struct Span {
    start: usize,
    end: usize,
    rule: usize,
}

/// Runs the content rules over a text: skip it, redact it, or leave it.
pub fn scan(text: &str) -> Verdict<'_> {
    let c = &*COMPILED;
    let matched = c.set.matches(text);
    if !matched.matched_any() {
        return Verdict::Clean(text);
    }
    let mut spans: Vec<Span> = Vec::new();
    for i in &matched {
        let rule = &RULES[i];
        if rule.requires.is_some_and(|s| !text.contains(s)) {
            continue;
        }
        for caps in c.regexes[i].captures_iter(text) {
            let Some(m) = caps.get(1).or_else(|| caps.get(0)) else {
                continue;
            };
            let passes = match rule.gate {
                Gate::Format => true,
                Gate::Random => looks_random(m.as_str()),
                Gate::Assignment => {
                    !looks_like_code(m.as_str(), text[..m.start()].ends_with(is_quote))
                        && looks_random(m.as_str())
                }
            };
            if !passes {
                continue;
            }
            if rule.action == Action::Skip {
                return Verdict::Skip(Finding {
                    rule: rule.id,
                    line: line_of(text, m.start()),
                    action: Action::Skip,
                });
            }
            spans.push(Span {
                start: m.start(),
                end: m.end(),
                rule: i,
            });
        }
    }
    if spans.is_empty() {
        return Verdict::Clean(text);
    }
    // Earliest first; at one position the more specific (earlier) rule names it.
    spans.sort_by_key(|s| (s.start, s.rule, std::cmp::Reverse(s.end)));
    let mut out = String::with_capacity(text.len());
    let mut findings = Vec::new();
    let (mut pos, mut line) = (0, 1);
    for s in spans {
        if s.start < pos {
            continue; // inside a secret already cut out
        }
        line += text[pos..s.start].matches('\n').count();
        out.push_str(&text[pos..s.start]);
        let id = RULES[s.rule].id;
        out.push_str("[REDACTED:");
        out.push_str(id);
        out.push(']');
        // Keep every line: a secret with a newline in it leaves its newlines behind.
        let newlines = text[s.start..s.end].matches('\n').count();
        out.extend(std::iter::repeat_n('\n', newlines));
        findings.push(Finding {
            rule: id,
            line,
            action: Action::Redact,
        });
        line += newlines;
        pos = s.end;
    }
    out.push_str(&text[pos..]);
    Verdict::Redacted {
        text: out,
        findings,
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '`')
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Shannon entropy of the bytes of `s`, in bits per byte.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[usize::from(b)] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// A value that is code rather than a secret: a dotted reference (`os.environ`,
/// `settings.SECRET_KEY`), a bare name or type (`API_KEY_FROM_ENV`, `AtomicU64`), an address
/// (`user@host.example`).
fn looks_like_code(value: &str, quoted: bool) -> bool {
    let value = value.trim_end_matches(['.', ',']);
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let name = |part: &str| {
        !part.is_empty() && part.bytes().all(ident) && !part.as_bytes()[0].is_ascii_digit()
    };
    if value.contains('.') && value.split('.').all(name) {
        return true;
    }
    // Long unquoted names with digits are kept: unquoted keys in YAML or INI files.
    if !quoted
        && value.bytes().all(ident)
        && (value.len() < 16 || !value.bytes().any(|b| b.is_ascii_digit()))
    {
        return true;
    }
    // A password in a URL is `url-credentials`' business.
    value.rsplit_once('@').is_some_and(|(_, host)| {
        host.contains('.') && host.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
    })
}

/// Random-looking: at least 8 characters, not words (lowercase, uppercase, or letters only and
/// short: `Incorrect`, `DefaultToken`), and at least
/// 3.5 bits of entropy per character or 85 % of the most a value of its length can have.
fn looks_random(value: &str) -> bool {
    let value = value.trim_end_matches(['.', ',']);
    if value.len() < 8 {
        return false;
    }
    let sep = |b: u8| matches!(b, b'_' | b'-' | b'.');
    if value.bytes().all(|b| b.is_ascii_lowercase() || sep(b))
        || value.bytes().all(|b| b.is_ascii_uppercase() || sep(b))
        || (value.len() < 20 && value.bytes().all(|b| b.is_ascii_alphabetic() || sep(b)))
    {
        return false;
    }
    let max = (value.len() as f64).log2();
    entropy(value) >= 3.5_f64.min(0.85 * max)
}

/// The rules for `trawl secrets rules` and the docs: `(kind, id, action, description)`.
pub fn describe() -> impl Iterator<Item = (&'static str, &'static str, Action, &'static str)> {
    PATH_RULES
        .iter()
        .map(|r| ("path", r.id, Action::Skip, r.description))
        .chain(
            RULES
                .iter()
                .map(|r| ("content", r.id, r.action, r.description)),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fixtures are assembled at run time, so that this file is not itself a secret to scanners
    // (nor skipped when trawl indexes its own repository).
    fn begin(kind: &str) -> String {
        format!("-----BEGIN {kind}-----")
    }

    const B64: &str = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAtvrYqpG";

    fn gh() -> String {
        format!("ghp_{}", "0123456789abcdefghijABCDEFGHIJ012345")
    }

    fn rule_of(text: &str) -> Option<(&'static str, Action)> {
        match scan(text) {
            Verdict::Clean(_) => None,
            Verdict::Skip(f) => Some((f.rule, f.action)),
            Verdict::Redacted { findings, .. } => Some((findings[0].rule, Action::Redact)),
        }
    }

    fn redacted(text: &str) -> String {
        match scan(text) {
            Verdict::Redacted { text, .. } => text,
            other => panic!("not redacted: {other:?}"),
        }
    }

    #[test]
    fn private_keys_skip_the_file_wherever_they_are() {
        let skip = Some(("private-key", Action::Skip));
        for kind in [
            "RSA PRIVATE KEY",
            "PRIVATE KEY",
            "EC PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "DSA PRIVATE KEY",
        ] {
            let b = begin(kind);
            // Alone on its line.
            assert_eq!(rule_of(&format!("{b}\n{B64}\n")), skip, "{kind}");
            // Inside a Go backtick string.
            assert_eq!(
                rule_of(&format!("var key = `{b}\n{B64}\n-----END-----`\n")),
                skip
            );
            // In JSON with \n escapes.
            assert_eq!(
                rule_of(&format!("{{\"private_key\": \"{b}\\n{B64}\\n\"}}\n")),
                skip
            );
            // Python string concatenation.
            assert_eq!(
                rule_of(&format!("KEY = (\n    \"{b}\\n\"\n    \"{B64}\\n\"\n)\n")),
                skip
            );
        }
        // Encrypted PEM: headers before the base64.
        let enc = format!(
            "{}\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n{B64}\n",
            begin("RSA PRIVATE KEY")
        );
        assert_eq!(rule_of(&enc), skip);
        // PGP, with a version header.
        let pgp = format!(
            "{}\nVersion: GnuPG v2\n\nlQOYBF2oBd0BCADGtf2u8hLq3Mz9xW4nR7pK0sT\n",
            begin("PGP PRIVATE KEY BLOCK")
        );
        assert_eq!(rule_of(&pgp), skip);
        // Prose naming the marker, a public key and a certificate are not private keys.
        let prose = format!("Keys look like `{}` in a file.\n", begin("RSA PRIVATE KEY"));
        assert_eq!(rule_of(&prose), None);
        assert_eq!(rule_of(&format!("{}\n{B64}\n", begin("PUBLIC KEY"))), None);
        assert_eq!(rule_of(&format!("{}\n{B64}\n", begin("CERTIFICATE"))), None);
        assert_eq!(
            rule_of(&format!(
                "if line.startswith(\"{}\"):\n",
                begin("PRIVATE KEY")
            )),
            None
        );
    }

    #[test]
    fn service_account_json_is_skipped() {
        let sa = "{\n  \"type\": \"service_account\",\n  \"project_id\": \"p\",\n  \"private_key_id\": \"abc\",\n  \"private_key\": \"x\"\n}\n";
        assert_eq!(rule_of(sa), Some(("gcp-service-account", Action::Skip)));
        // Documentation of the field without a key is not one.
        assert_eq!(
            rule_of("Set \"type\": \"service_account\" in the file.\n"),
            None
        );
    }

    #[test]
    fn provider_tokens_are_redacted_by_rule() {
        let aws = ["AKIA", "IOSFODNN7EXAMPLE"].concat();
        let cases: Vec<(String, &str)> = vec![
            (format!("A=\"{aws}\""), "aws-access-token"),
            (format!("aws_secret_access_key = {}", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"), "aws-secret-access-key"),
            (format!("G=\"{}\"", gh()), "github-pat"),
            (format!("t = '{}'", ["github_pat_", &"A1b2C3d4E5".repeat(8), "zz"].concat()), "github-fine-grained-pat"),
            (["gho_", "0123456789abcdefghijABCDEFGHIJ012345"].concat(), "github-oauth"),
            (["ghs_", "0123456789abcdefghijABCDEFGHIJ012345"].concat(), "github-app-token"),
            (["ghr_", "0123456789abcdefghijABCDEFGHIJ012345"].concat(), "github-refresh-token"),
            (["x = glpat-", "xY9zAb12Cd34Ef56Gh78"].concat(), "gitlab-pat"),
            (["SLACK=xoxb-", "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"].concat(), "slack-bot-token"),
            (["k: xoxp-", "1234567890-1234567890-1234567890-", "0123456789abcdef0123456789abcdef"].concat(), "slack-user-token"),
            (["u = 'https://hooks.slack.com/services/", "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX'"].concat(), "slack-webhook-url"),
            (["stripe.api_key = \"sk_live_", "4eC39HqLyjWDarjtT1zdp7dc\""].concat(), "stripe-access-token"),
            (["key=AIza", "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"].concat(), "gcp-api-key"),
            (format!("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={}==;EndpointSuffix=core.windows.net", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw".get(..86).unwrap()), "azure-storage-account-key"),
            (["OPENAI_API_KEY = \"sk-proj-", &"Ab3dE6gH9jK2mN5pQ8sT".repeat(3), "\""].concat(), "openai-api-key"),
            (["k = 'sk-", "Ab3dE6gH9jK2mN5pQ8sT", "T3BlbkFJ", "Ab3dE6gH9jK2mN5pQ8sT'"].concat(), "openai-api-key"),
            (["auth = \"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ", ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\""].concat(), "jwt"),
            (["REGISTRY=npm_", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"].concat(), "npm-access-token"),
            ("DATABASE_URL=postgres://app:Xk9mP2vL7qR4@db.internal:5432/app".to_owned(), "url-credentials"),
            ("curl -H 'Authorization: Bearer 8f3Kq9ZpX2mV7wLr4tYb6NcJ'".to_owned(), "http-bearer-token"),
            ("password = \"Xk9#mP2&vL7qR4\"".to_owned(), "generic-api-key"),
            ("DB_PASSWORD=Sup3rS3cret!x".to_owned(), "generic-api-key"),
            ("\"client_secret\": \"a8Zk3Q9mW2pX7vB4nL6t\",".to_owned(), "generic-api-key"),
            ("api_key: 9f8e7d6c5b4a39281706f5e4d3c2b1a0".to_owned(), "generic-api-key"),
            ("token := \"Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5\"".to_owned(), "generic-api-key"),
            (["trigger glptt-", &"0a1b2c3d4e".repeat(4)].concat(), "gitlab-ptt"),
            (["x = 'xoxs-", "1234567890-1234567890-abcdef012345'"].concat(), "slack-legacy-token"),
            (["x = xapp-1-", "A0123BCDE-1234567890123-0a1b2c3d4e5f"].concat(), "slack-app-token"),
            (["c = \"Ab1", "8Q~", "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF2\""].concat(), "azure-ad-client-secret"),
            (["k = 'sk-ant-api03-", &"Ab3dE6gH9jK2mN5pQ8sT".repeat(5), "'"].concat(), "anthropic-api-key"),
            (["HF = 'hf_", "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh'"].concat(), "huggingface-access-token"),
            (["p = pypi-AgEIcHlwaS5vcmc", &"Ab3dE6gH9jK2mN5pQ8sT".repeat(3)].concat(), "pypi-upload-token"),
            (["m = 'SG.", &"Ab3dE6gH9jK".repeat(6), "'"].concat(), "sendgrid-api-token"),
            (["d = dop_v1_", &"0a1b2c3d4e5f6a7b".repeat(4)].concat(), "digitalocean-pat"),
            (["s = shpat_", "0a1b2c3d4e5f6a7b0a1b2c3d4e5f6a7b"].concat(), "shopify-access-token"),
        ];
        for (line, want) in &cases {
            let text = format!("# before\n{line}\n# after\n");
            assert_eq!(rule_of(&text), Some((*want, Action::Redact)), "{line}");
            let out = redacted(&text);
            assert!(out.contains(&format!("[REDACTED:{want}]")), "{out}");
            assert_eq!(out.lines().count(), 3, "{out}");
            assert!(
                out.starts_with("# before\n") && out.ends_with("\n# after\n"),
                "{out}"
            );
            match scan(&text) {
                Verdict::Redacted { findings, .. } => assert_eq!(findings[0].line, 2, "{line}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn redaction_keeps_the_rest_of_the_line() {
        let aws = ["AKIA", "IOSFODNN7EXAMPLE"].concat();
        let text = format!("import os\nA=\"{aws}\"\nG=\"{}\"\nDEBUG = True\n", gh());
        let Verdict::Redacted {
            text: out,
            findings,
        } = scan(&text)
        else {
            panic!("not redacted");
        };
        assert_eq!(
            out,
            "import os\nA=\"[REDACTED:aws-access-token]\"\nG=\"[REDACTED:github-pat]\"\nDEBUG = True\n"
        );
        assert_eq!(
            findings
                .iter()
                .map(|f| (f.rule, f.line))
                .collect::<Vec<_>>(),
            [("aws-access-token", 2), ("github-pat", 3)]
        );
        // A provider token assigned to a generic name is named by the provider rule.
        let text = format!("GITHUB_TOKEN = \"{}\"\n", gh());
        assert_eq!(
            redacted(&text),
            "GITHUB_TOKEN = \"[REDACTED:github-pat]\"\n"
        );
    }

    #[test]
    fn code_and_placeholders_are_not_secrets() {
        for clean in [
            "password = os.environ[\"X\"]",
            "password = os.environ.get(\"DB_PASSWORD\")",
            "token = get_token()",
            "token: str",
            "token: Optional[str] = None",
            "def check_password(password: str) -> bool:",
            "password = \"changeme\"",
            "password: ${DB_PASSWORD}",
            "secret_key = settings.SECRET_KEY",
            "const token = req.headers.authorization;",
            "secret_name = \"my-app-secret-credentials\"",
            "api_key = API_KEY_FROM_ENVIRONMENT",
            "tokens = tokenizer.tokenize(text)",
            "max_tokens = 4096",
            "TOKEN_URL = \"https://oauth2.googleapis.com/token\"",
            "if password == \"\":",
            "password = \"xxxxxxxxxxxx\"",
            "author = \"Jonathan Livingston\"",
            "Authorization: Bearer $TOKEN",
            "DATABASE_URL=postgres://postgres:postgres@localhost/app",
            "the key is AKIA followed by sixteen characters",
            "ghp_ tokens are 40 characters long",
            // Near misses of the formats: too short, wrong alphabet.
            "t = ghp_0123456789abcdef",
            "k = AKIAIOSFODNN7EXAMPL",
            "k = akiaiosfodnn7example",
            "s = sk_live_short",
            "g = glpat-short",
            "x = xoxb-123-456",
            "j = eyJhbGciOiJIUzI1NiJ9",
            "    pub tokens_sent: AtomicU64,",
            "            token: &t.token,",
            "    token_env = %c.token_env,",
            "    description: \"cloud credentials: .aws/credentials, credentials.db\",",
            "    \"https://x-access-token:ghp_secret@github.com/pallets/flask.git\",",
            "    \"email_password\": \"j.doe+test@example.com\",",
            "    INCORRECT_PASSWD = \"Incorrect\"",
            "    api_key = \"DefaultApiKeyName\"",
        ] {
            assert_eq!(rule_of(&format!("{clean}\n")), None, "{clean}");
        }
    }

    #[test]
    fn path_rules_are_case_insensitive_and_cover_the_families() {
        for (path, want) in [
            (".env", Some("env-file")),
            (".ENV", Some("env-file")),
            ("config/.env.local", Some("env-file")),
            ("deploy/prod.env", Some("env-file")),
            (".envrc", Some("env-file")),
            (".env.example", None),
            ("src/env.py", None),
            ("src/.env.d/readme.md", None),
            ("home/.aws/credentials", Some("cloud-credentials-file")),
            ("gcloud/credentials.db", Some("cloud-credentials-file")),
            (
                "x/application_default_credentials.json",
                Some("cloud-credentials-file"),
            ),
            ("ops/.kube/config", Some("kube-config")),
            (".docker/config.json", Some("docker-config")),
            ("docker/config.json", None),
            (".netrc", Some("netrc-file")),
            (".pgpass", Some("netrc-file")),
            (".npmrc", Some("package-registry-credentials")),
            ("keys/ID_RSA", Some("ssh-key-file")),
            ("keys/id_ed25519", Some("ssh-key-file")),
            ("keys/id_rsa.pub", None),
            ("android/release.JKS", Some("keystore-file")),
            ("certs/client.p12", Some("keystore-file")),
            ("certs/server.pem", Some("private-key-file")),
            ("tls/server.key", Some("private-key-file")),
            ("infra/prod.tfvars", Some("terraform-secrets")),
            ("infra/prod.tfvars.json", Some("terraform-secrets")),
            ("infra/terraform.tfstate", Some("terraform-secrets")),
            ("infra/terraform.tfstate.backup", Some("terraform-secrets")),
            ("infra/terraform.tfvars.example", None),
            ("infra/main.tf", None),
            ("src/main.rs", None),
        ] {
            assert_eq!(path_rule(path), want, "{path}");
        }
    }

    #[test]
    fn entropy_is_bits_per_byte() {
        assert!(entropy("aaaaaaaa").abs() < 1e-9);
        assert!((entropy("abcdefgh") - 3.0).abs() < 1e-9);
    }

    proptest::proptest! {
        /// Redaction never adds or removes a line, whatever the text around the secrets.
        #[test]
        fn redaction_keeps_the_number_of_lines(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[ -~]{0,40}",
                    "\n",
                    "\r\n",
                    proptest::strategy::Just("A=\"AKIAIOSFODNN7EXAMPLE\"".to_owned()),
                    proptest::strategy::Just(format!("G={}", ["ghp_", "0123456789abcdefghijABCDEFGHIJ012345"].concat())),
                    proptest::strategy::Just("password = \"Xk9#mP2&vL7qR4\"".to_owned()),
                    proptest::strategy::Just("Bearer 8f3Kq9ZpX2mV7wLr4tYb6NcJ\n".to_owned()),
                    "(password|token|secret)[ =:\"']{1,3}[A-Za-z0-9+/=\n]{0,30}",
                ],
                0..20,
            )
        ) {
            let text: String = parts.concat();
            let out = match scan(&text) {
                Verdict::Clean(t) => t.to_owned(),
                Verdict::Redacted { text, .. } => text,
                Verdict::Skip(_) => return Ok(()),
            };
            proptest::prop_assert_eq!(out.matches('\n').count(), text.matches('\n').count());
            proptest::prop_assert_eq!(out.lines().count(), text.lines().count());
        }
    }
}
