//! The **store** seam: every stage's output is an object under one root, reached through
//! `object_store` and resolved from a URL (quickwit's `StorageResolver`).
//!
//! | URL | backend |
//! |---|---|
//! | `file://<dir>`, `file:///abs/dir`, or a plain path | local directory (created if missing) |
//! | `memory://` | in memory, for tests |
//! | `s3://bucket[/prefix]` | S3 or an S3-compatible store; credentials and endpoint from the standard `AWS_*` environment |
//!
//! Every `put` is atomic on every backend: readers see the old object or the new one, never a
//! torn write (the local backend stages to a temporary file and renames). Small control
//! objects (`state.json`, `CURRENT`) are replaced with [`Store::put`]; [`Store::create`] is a
//! conditional put that fails if the object exists.
//!
//! Keys are built only by the functions in [`keys`], from validated identities.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::Error;
use crate::error::StoreOp;

/// A handle on the store root. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    url: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.url)
    }
}

/// A local file that could not be read for an upload to `key`, or written from it.
fn local_io(op: StoreOp, key: &str, e: std::io::Error) -> Error {
    Error::Store {
        op,
        key: key.to_owned(),
        source: object_store::Error::Generic {
            store: "local file",
            source: Box::new(e),
        },
    }
}

/// Attempts of a conditional put whose outcome was unknown before giving up.
const CONDITIONAL_ATTEMPTS: u32 = 5;

/// What reading the object back after a failed conditional put found.
enum Settled {
    /// Written (`true`), or another writer's (`false`): done.
    Done(bool),
    /// Not applied, and nothing else there: try again (the error, for the log).
    Again(object_store::Error),
}

impl Store {
    /// Resolves a store URL (see the module docs).
    pub fn from_url(url: &str) -> Result<Self, Error> {
        Self::from_url_with(url, &[])
    }

    /// Resolves a store URL with S3 settings given here rather than in the environment:
    /// `(key, value)` pairs in object_store's names (`aws_endpoint`, `aws_access_key_id`,
    /// `aws_allow_http`, `aws_timeout`, …), applied over the `AWS_*` environment. Ignored for
    /// other schemes.
    pub fn from_url_with(url: &str, s3_options: &[(&str, &str)]) -> Result<Self, Error> {
        let bad = |reason: String| Error::StoreUrl {
            url: url.to_owned(),
            reason,
        };
        if url == "memory://" || url == "memory:" {
            return Ok(Self::memory());
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket: use s3://bucket[/prefix]".into()));
            }
            let mut builder = s3_builder().with_bucket_name(bucket);
            for (k, v) in s3_options {
                let key = k
                    .parse::<object_store::aws::AmazonS3ConfigKey>()
                    .map_err(|e| bad(e.to_string()))?;
                builder = builder.with_config(key, *v);
            }
            // Keys given here or in the environment are used as they are; otherwise the AWS
            // SDK's chain resolves them (profiles, SSO, credential_process, assume-role, web
            // identity, ECS, instance metadata).
            let static_keys = std::env::var_os("AWS_ACCESS_KEY_ID").is_some()
                || s3_options
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("aws_access_key_id"));
            if !static_keys {
                builder =
                    builder.with_credentials(Arc::new(crate::aws_credentials::AwsChain::default()));
            }
            let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
            return Ok(Self {
                inner: Arc::new(s3),
                prefix: Path::from(prefix.trim_matches('/')),
                url: url.to_owned(),
            });
        }
        if url.contains("://") && !url.starts_with("file://") {
            return Err(bad(
                "unsupported scheme: use file://<dir>, a path, memory:// or s3://bucket/prefix"
                    .into(),
            ));
        }
        let dir = url.strip_prefix("file://").unwrap_or(url);
        if dir.is_empty() {
            return Err(bad("no directory".into()));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| bad(format!("cannot create the directory: {e}")))?;
        let local = object_store::local::LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| bad(e.to_string()))?
            .with_automatic_cleanup(true);
        Ok(Self {
            inner: Arc::new(local),
            prefix: Path::default(),
            url: url.to_owned(),
        })
    }

    /// False when `url` names a local directory that does not exist yet (opening it would
    /// create it). Remote and memory stores always "exist".
    pub fn exists(url: &str) -> bool {
        if url.starts_with("memory:") || url.starts_with("s3://") {
            return true;
        }
        std::path::Path::new(url.strip_prefix("file://").unwrap_or(url)).is_dir()
    }

    /// A store over any object store (a cache, a throttle, another backend), named `url`
    /// in messages and logs.
    pub fn over(inner: Arc<dyn ObjectStore>, url: &str) -> Self {
        Self {
            inner,
            prefix: Path::default(),
            url: url.to_owned(),
        }
    }

    /// An empty in-memory store.
    pub fn memory() -> Self {
        Self {
            inner: Arc::new(object_store::memory::InMemory::new()),
            prefix: Path::default(),
            url: "memory://".into(),
        }
    }

    /// The URL this store was resolved from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory of a local store (`file://DIR` or a path); `None` for memory and S3.
    pub fn local_dir(&self) -> Option<std::path::PathBuf> {
        if self.url.starts_with("memory:")
            || self.url.contains("://") && !self.url.starts_with("file://")
        {
            return None;
        }
        Some(self.url.strip_prefix("file://").unwrap_or(&self.url).into())
    }

    /// The underlying object store and the root prefix, for readers such as DataFusion.
    pub fn object_store(&self) -> (Arc<dyn ObjectStore>, Path) {
        (self.inner.clone(), self.prefix.clone())
    }

    /// Where `key` lives in [`Store::object_store`]'s store, for readers that fetch
    /// byte ranges of an object (a Parquet file's footer and the columns they need).
    pub fn object_path(&self, key: &str) -> Path {
        self.path(key)
    }

    fn path(&self, key: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in key.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    fn err(op: StoreOp, key: &str) -> impl FnOnce(object_store::Error) -> Error + '_ {
        move |source| Error::Store {
            op,
            key: key.to_owned(),
            source,
        }
    }

    /// Writes `key` atomically, replacing any previous object. Objects over
    /// [`MULTIPART_THRESHOLD`] go to a remote store as a multipart upload of
    /// [`MULTIPART_PART`]-sized parts (S3 refuses single puts over 5 GB, and a failed part is
    /// retried alone).
    ///
    /// On a local directory, deleting the last object of a directory removes the directory,
    /// so a put racing a delete in the same directory can find its parent gone: such a put
    /// is retried (a few times, at once) instead of failing.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), Error> {
        if bytes.len() > MULTIPART_THRESHOLD && self.local_dir().is_none() {
            return self.put_multipart(key, &bytes[..]).await;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .inner
                .put(&self.path(key), PutPayload::from_bytes(bytes.clone()))
                .await
            {
                Ok(_) => return Ok(()),
                Err(object_store::Error::Generic { store, .. })
                    if store == "LocalFileSystem" && attempt < 5 =>
                {
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(Self::err(StoreOp::Put, key)(e)),
            }
        }
    }

    /// A multipart upload of what `src` reads, [`MULTIPART_PART`] bytes at a time.
    async fn put_multipart(
        &self,
        key: &str,
        mut src: impl tokio::io::AsyncRead + Unpin,
    ) -> Result<(), Error> {
        use tokio::io::AsyncReadExt;
        let upload = self
            .inner
            .put_multipart(&self.path(key))
            .await
            .map_err(Self::err(StoreOp::Put, key))?;
        let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, MULTIPART_PART);
        let mut piece = vec![0u8; MULTIPART_PART];
        loop {
            let mut filled = 0;
            while filled < piece.len() {
                match src.read(&mut piece[filled..]).await {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) => {
                        writer.abort().await.ok();
                        return Err(local_io(StoreOp::Put, key, e));
                    }
                }
            }
            if filled == 0 {
                break;
            }
            writer
                .wait_for_capacity(4)
                .await
                .map_err(Self::err(StoreOp::Put, key))?;
            writer.write(&piece[..filled]);
        }
        writer
            .finish()
            .await
            .map(|_| ())
            .map_err(Self::err(StoreOp::Put, key))
    }

    /// Writes `key` from a local file without holding it in memory: a file over
    /// [`MULTIPART_THRESHOLD`] goes as a multipart upload (on a local directory too: its
    /// parts are staged and renamed into place on completion), a smaller one as one put.
    pub async fn put_file(&self, key: &str, file: &std::path::Path) -> Result<(), Error> {
        let len = tokio::fs::metadata(file)
            .await
            .map_err(|e| local_io(StoreOp::Put, key, e))?
            .len();
        if len <= MULTIPART_THRESHOLD as u64 {
            let bytes = tokio::fs::read(file)
                .await
                .map_err(|e| local_io(StoreOp::Put, key, e))?;
            return self.put(key, Bytes::from(bytes)).await;
        }
        let src = tokio::fs::File::open(file)
            .await
            .map_err(|e| local_io(StoreOp::Put, key, e))?;
        self.put_multipart(key, src).await
    }

    /// Writes `key` only if it does not exist. Returns `false` when it already did.
    ///
    /// Like [`Store::swap`], a create whose answer was lost (a timeout, a throttled request)
    /// is resolved by reading the object back: our bytes there mean it was created, another
    /// writer's that it was not, nothing that it may be tried again. Give each writer unique
    /// bytes where that distinction matters.
    pub async fn create(&self, key: &str, bytes: Bytes) -> Result<bool, Error> {
        self.put_conditionally(key, &bytes, None).await
    }

    /// A put of `bytes` to `key` on the condition that it does not exist (`expected` `None`)
    /// or is still at `expected`, tried again while [`Store::settle`] finds that it may be.
    /// `true` when it was written.
    async fn put_conditionally(
        &self,
        key: &str,
        bytes: &Bytes,
        expected: Option<&Version>,
    ) -> Result<bool, Error> {
        let mode = match expected {
            None => PutMode::Create,
            Some(v) => PutMode::Update(object_store::UpdateVersion {
                e_tag: v.e_tag.clone(),
                version: v.version.clone(),
            }),
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Err(err) = self
                .inner
                .put_opts(
                    &self.path(key),
                    PutPayload::from_bytes(bytes.clone()),
                    opts.clone(),
                )
                .await
            else {
                return Ok(true);
            };
            match self.settle(key, bytes, expected, err, attempt).await? {
                Settled::Done(written) => return Ok(written),
                Settled::Again(err) => {
                    tracing::warn!(key, error = %err, attempt, "conditional put failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100 << attempt)).await;
                }
            }
        }
    }

    /// What became of a conditional put that failed with `err`. A conditional put is not
    /// idempotent, so the client does not retry it on a timeout or a throttled request: the
    /// object is read back. Our bytes there mean it was applied; the condition still holding
    /// (no object, the expected version) that it was not, and it may be tried again;
    /// anything else that another writer won.
    async fn settle(
        &self,
        key: &str,
        bytes: &Bytes,
        expected: Option<&Version>,
        err: object_store::Error,
        attempt: u32,
    ) -> Result<Settled, Error> {
        let again = attempt < CONDITIONAL_ATTEMPTS;
        let Some(expected) = expected else {
            return match err {
                object_store::Error::AlreadyExists { .. } => Ok(Settled::Done(false)),
                err => match self.get(key).await {
                    Ok(Some(now)) => Ok(Settled::Done(now == *bytes)),
                    Ok(None) | Err(_) if again => Ok(Settled::Again(err)),
                    _ => Err(Self::err(StoreOp::Put, key)(err)),
                },
            };
        };
        // A backend with no conditional update (a local directory): the version read again,
        // then an atomic write.
        if let object_store::Error::NotImplemented { .. } = err {
            let now = self.get_versioned(key).await?.map(|(_, v)| v);
            if now.as_ref() != Some(expected) {
                return Ok(Settled::Done(false));
            }
            self.put(key, bytes.clone()).await?;
            return Ok(Settled::Done(true));
        }
        let precondition = matches!(err, object_store::Error::Precondition { .. });
        match self.get_versioned(key).await? {
            Some((now, _)) if now == *bytes => Ok(Settled::Done(true)),
            Some((_, v)) if &v == expected && !precondition && again => Ok(Settled::Again(err)),
            _ if precondition => Ok(Settled::Done(false)),
            _ => Err(Self::err(StoreOp::Put, key)(err)),
        }
    }

    /// Reads `key` with its version (e-tag); `None` if it does not exist.
    pub async fn get_versioned(&self, key: &str) -> Result<Option<(Bytes, Version)>, Error> {
        match self.inner.get(&self.path(key)).await {
            Ok(r) => {
                let version = Version {
                    e_tag: r.meta.e_tag.clone(),
                    version: r.meta.version.clone(),
                };
                let bytes = r.bytes().await.map_err(Self::err(StoreOp::Get, key))?;
                Ok(Some((bytes, version)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Self::err(StoreOp::Get, key)(e)),
        }
    }

    /// Replaces `key` only if it is still at `expected` (`None`: only if it does not exist),
    /// as a conditional put. Where the backend has no conditional update (a local directory),
    /// it re-reads the version, then writes atomically (write and rename): safe against a
    /// crash, not against two writers racing. Returns `false` when someone else changed it.
    pub async fn swap(
        &self,
        key: &str,
        bytes: Bytes,
        expected: Option<&Version>,
    ) -> Result<bool, Error> {
        self.put_conditionally(key, &bytes, expected).await
    }

    /// Whether `key` exists (a metadata request, the object is not read).
    pub async fn exists_key(&self, key: &str) -> Result<bool, Error> {
        match self.inner.head(&self.path(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(Self::err(StoreOp::Get, key)(e)),
        }
    }

    /// Reads `key`; `None` if it does not exist.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, Error> {
        match self.inner.get(&self.path(key)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(Self::err(StoreOp::Get, key))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Self::err(StoreOp::Get, key)(e)),
        }
    }

    /// Copies `key` into the local file `file`, a piece at a time (never whole in memory).
    /// `false` when there is no such object.
    pub async fn get_file(&self, key: &str, file: &std::path::Path) -> Result<bool, Error> {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let got = match self.inner.get(&self.path(key)).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(Self::err(StoreOp::Get, key)(e)),
        };
        let mut out = tokio::fs::File::create(file)
            .await
            .map_err(|e| local_io(StoreOp::Get, key, e))?;
        let mut pieces = got.into_stream();
        while let Some(piece) = pieces.next().await {
            let piece = piece.map_err(Self::err(StoreOp::Get, key))?;
            out.write_all(&piece)
                .await
                .map_err(|e| local_io(StoreOp::Get, key, e))?;
        }
        out.flush()
            .await
            .map_err(|e| local_io(StoreOp::Get, key, e))?;
        Ok(true)
    }

    /// Deletes `key`; deleting a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        match self.inner.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::err(StoreOp::Delete, key)(e)),
        }
    }

    /// Keys under `prefix` with their last-modified times, sorted by key.
    pub async fn list_modified(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, std::time::SystemTime)>, Error> {
        Ok(self
            .list_objects(prefix)
            .await?
            .into_iter()
            .map(|o| (o.key, o.modified))
            .collect())
    }

    /// The objects under `prefix`, sorted by key.
    pub async fn list_objects(&self, prefix: &str) -> Result<Vec<ObjectInfo>, Error> {
        let root = self.path(prefix);
        let metas: Vec<_> = self
            .inner
            .list(Some(&root))
            .try_collect()
            .await
            .map_err(Self::err(StoreOp::List, prefix))?;
        let skip = self.prefix.parts().count();
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .map(|m| ObjectInfo {
                // Each part as it was written: the object store percent-encodes what a path
                // part may not hold (non-ASCII letters, `%`, `#`, `*`, …), and `path` encodes
                // a key's parts again, so a listed key reads back only decoded.
                key: m
                    .location
                    .parts()
                    .skip(skip)
                    .map(|p| {
                        percent_encoding::percent_decode_str(p.as_ref())
                            .decode_utf8_lossy()
                            .into_owned()
                    })
                    .collect::<Vec<_>>()
                    .join("/"),
                modified: std::time::SystemTime::from(m.last_modified),
                size: m.size,
                e_tag: m.e_tag,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Keys under `prefix` (relative to the store root), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, Error> {
        Ok(self
            .list_modified(prefix)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// Reads and parses a JSON object; `None` if missing.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, Error> {
        let Some(bytes) = self.get(key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Record {
                what: "json object",
                reason: format!("{key}: {e}"),
            })
    }

    /// Writes a JSON object atomically.
    pub async fn put_json<T: serde::Serialize>(&self, key: &str, value: &T) -> Result<(), Error> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Record {
            what: "json object",
            reason: e.to_string(),
        })?;
        self.put(key, Bytes::from(bytes)).await
    }
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Relative to the store root.
    pub key: String,
    pub modified: std::time::SystemTime,
    pub size: u64,
    /// The store's version tag (S3's ETag; a local file's inode, mtime and size): changes when
    /// the object is rewritten, even under the same key within the same second.
    pub e_tag: Option<String>,
}

/// Objects larger than this are written to a remote store as multipart uploads.
pub const MULTIPART_THRESHOLD: usize = 64 << 20;
/// The part size of multipart uploads (S3 allows 5 MiB to 5 GiB, at most 10,000 parts).
pub const MULTIPART_PART: usize = 16 << 20;

/// The S3 client for `s3://` URLs: the standard `AWS_*` environment (credentials by the
/// usual chain — keys, web identity token for IAM roles for service accounts, ECS, instance
/// metadata —, `AWS_REGION`, `AWS_ENDPOINT` for an S3-compatible store, `AWS_ALLOW_HTTP`,
/// `AWS_TIMEOUT`), path-style requests unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`, and
/// conditional puts by e-tag (`CURRENT` is swapped with `If-Match`, created with
/// `If-None-Match`), which S3 has supported since 2024. Requests that fail with 5xx, 429
/// (throttling) or a timeout are retried with exponential backoff, up to 10 times within
/// three minutes.
fn s3_builder() -> object_store::aws::AmazonS3Builder {
    use object_store::aws::{AmazonS3ConfigKey, S3ConditionalPut};
    let mut b =
        object_store::aws::AmazonS3Builder::from_env().with_retry(object_store::RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: std::time::Duration::from_millis(100),
                max_backoff: std::time::Duration::from_secs(15),
                base: 2.0,
            },
            max_retries: 10,
            retry_timeout: std::time::Duration::from_secs(180),
        });
    if std::env::var_os("AWS_CONDITIONAL_PUT").is_none() {
        b = b.with_conditional_put(S3ConditionalPut::ETagMatch);
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        b = b.with_config(AmazonS3ConfigKey::Region, "us-east-1");
    }
    b
}

/// The version of an object, for [`Store::swap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// The states of the repositories the index is made of: those on the repository list
/// (`repos/list.json`), or every recorded one in a store written before the list existed.
pub async fn listed_states(store: &Store) -> Result<Vec<crate::records::RepoState>, Error> {
    use crate::records::{RepoList, RepoState};
    let list: Option<std::collections::HashSet<crate::ids::RepoId>> = store
        .get_json::<RepoList>(keys::REPO_LIST)
        .await?
        .map(|l| l.repos.into_iter().collect());
    // With a list, only the listed repositories' states are read (those that left it are
    // not); without one, every state there is.
    let mut keys: Vec<String> = match &list {
        Some(list) => list.iter().map(keys::repo_state).collect(),
        None => store
            .list("repos/")
            .await?
            .into_iter()
            .filter(|k| k.ends_with("/state.json"))
            .collect(),
    };
    keys.sort();
    let read = read_all(&keys, |key| store.get_json::<RepoState>(key)).await?;
    Ok(read
        .into_iter()
        .flatten()
        .filter(|s| list.as_ref().is_none_or(|l| l.contains(&s.repo)))
        .collect())
}

/// Small objects read at once by [`listed_states`] and [`current_chunk_parts`]: an
/// organisation's thousand repositories are a thousand states and manifests, and a remote
/// store answers each after a round trip.
pub const CONCURRENT_READS: usize = 32;

/// `read` of every key, [`CONCURRENT_READS`] at a time, in the keys' order; the first error
/// ends it.
async fn read_all<'a, T, F>(
    keys: &'a [String],
    read: impl Fn(&'a str) -> F,
) -> Result<Vec<T>, Error>
where
    F: std::future::Future<Output = Result<T, Error>>,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(keys.iter().map(|k| read(k.as_str())))
        .buffered(CONCURRENT_READS)
        .try_collect()
        .await
}

/// Which chunk parts hold the files the listed repositories have now (see
/// [`current_chunk_parts`]).
#[derive(Debug, Default)]
pub struct CurrentParts {
    /// The parts of each listed repository's last manifest, for the chunker version its files
    /// were sent to.
    parts: std::collections::HashSet<String>,
    /// `chunks/repo=<key>/` of listed repositories whose state predates the chunker version
    /// being kept: any of their parts may be current.
    whole: Vec<String>,
}

impl CurrentParts {
    /// Whether the chunk part `key` holds a file version a listed repository has now.
    pub fn contains(&self, key: &str) -> bool {
        self.parts.contains(key) || self.whole.iter().any(|p| key.starts_with(p.as_str()))
    }
}

/// The chunk parts of the files the listed repositories hold now: each one's last manifest,
/// its indexed files, chunked by the version the fetcher sent them to. Parts of superseded
/// file versions, of an older chunker and of repositories that left the list stay in the
/// store until retention collects them; a backfill has no use for them. `None` when the
/// store records no repository (chunks written without the fetcher): then every part counts.
pub async fn current_chunk_parts(store: &Store) -> Result<Option<CurrentParts>, Error> {
    let states = listed_states(store).await?;
    if states.is_empty() {
        return Ok(None);
    }
    let mut current = CurrentParts::default();
    let mut versioned = Vec::new();
    for state in states {
        match state.chunker_version {
            Some(version) => {
                versioned.push((keys::manifest(&state.repo, &state.last_commit), version));
            }
            None => current
                .whole
                .push(format!("chunks/repo={}/", state.repo.key())),
        }
    }
    let manifests: Vec<String> = versioned.iter().map(|(k, _)| k.clone()).collect();
    let read = read_all(&manifests, |key| store.get(key)).await?;
    for (bytes, (_, version)) in read.into_iter().zip(&versioned) {
        let Some(bytes) = bytes else {
            continue;
        };
        let rows: Vec<crate::records::ManifestRow> = crate::records::from_parquet(bytes)?;
        for row in rows.iter().filter(|r| r.skip_reason.is_none()) {
            if let Some(blob) = &row.blob {
                current
                    .parts
                    .insert(keys::chunk_part(&row.repo_id, &row.path, blob, version));
            }
        }
    }
    Ok(Some(current))
}

/// The object layout of ARCHITECTURE.md, as functions of validated identities.
pub mod keys {
    use crate::ids::{CommitId, RepoId, RunId};

    /// `repos/<repo_id>/state.json`
    pub fn repo_state(repo: &RepoId) -> String {
        format!("repos/{repo}/state.json")
    }

    /// `repos/list.json`: see [`crate::records::RepoList`].
    pub const REPO_LIST: &str = "repos/list.json";

    /// `manifests/repo=<repo key>/<commit>.parquet` (the repo id as one segment, see
    /// [`RepoId::key`]).
    pub fn manifest(repo: &RepoId, commit: &CommitId) -> String {
        format!("manifests/repo={}/{commit}.parquet", repo.key())
    }

    /// `commits/repo=<repo key>/<head>.json`: the commits a fetch of `head` recorded (JSON
    /// array of [`crate::records::CommitRecord`]).
    pub fn commits(repo: &RepoId, head: &CommitId) -> String {
        format!("commits/repo={}/{head}.json", repo.key())
    }

    /// The commit records of one repository.
    pub fn commits_of(repo: &RepoId) -> String {
        format!("commits/repo={}/", repo.key())
    }

    /// `chunks/repo=<repo key>/<hash of path, blob and chunker version>.parquet`: one part per
    /// file version, so a replayed event rewrites the same object.
    pub fn chunk_part(
        repo: &RepoId,
        path: &str,
        blob: &crate::BlobId,
        chunker_version: &str,
    ) -> String {
        let h = blake3::Hasher::new_derive_key("trawl 2026-11-29 chunk part key v1")
            .update(repo.as_str().as_bytes())
            .update(&[0])
            .update(path.as_bytes())
            .update(&[0])
            .update(blob.as_str().as_bytes())
            .update(&[0])
            .update(chunker_version.as_bytes())
            .finalize();
        let id = crate::ContentHash::from_bytes(h.as_bytes()[..16].try_into().expect("16 bytes"));
        format!("chunks/repo={}/{}.parquet", repo.key(), id.to_hex())
    }

    /// `runs/<run_id>.json`
    /// `embeddings/space=<model>.<dims>.<dtype>/<hash>.parquet`: one vector space per
    /// directory (a part's vector column has one width), named by a hash of the part's
    /// content hashes so a replayed batch rewrites the same object.
    pub fn embedding_part(space: &str, content_hashes: &[crate::ContentHash]) -> String {
        let mut h = blake3::Hasher::new_derive_key("trawl 2026-11-30 embedding part key v1");
        h.update(space.as_bytes());
        for c in content_hashes {
            h.update(&[0]).update(c.to_string().as_bytes());
        }
        format!(
            "{}{}.parquet",
            embedding_space(space),
            &h.finalize().to_hex()[..32]
        )
    }

    /// The name of a vector space: `<model>.<dims>.<dtype>`, with every character of the
    /// model outside `[A-Za-z0-9._-]` replaced by `-`, so it is a safe directory name.
    pub fn space(model: &str, dims: u32, dtype: &str) -> String {
        let model: String = model
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        format!("{model}.{dims}.{dtype}")
    }

    /// `embeddings/space=<space>/`: every part of one vector space.
    pub fn embedding_space(space: &str) -> String {
        format!("embeddings/space={space}/")
    }

    pub fn run(run: &RunId) -> String {
        format!("runs/{run}.json")
    }

    /// `bus/<topic>/`: the spool bus's messages.
    pub fn spool(topic: &str) -> String {
        format!("bus/{topic}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(repo: &str) -> crate::records::RepoState {
        crate::records::RepoState {
            schema_version: crate::records::REPO_STATE_VERSION,
            repo: crate::ids::RepoId::parse(repo).unwrap(),
            url: format!("https://{repo}.git"),
            branch: "main".into(),
            last_commit: "a".repeat(40).parse().unwrap(),
            last_run: crate::ids::RunId::new(),
            indexed_at: "2026-12-06T00:00:00Z".into(),
            chunker_version: None,
        }
    }

    #[tokio::test]
    async fn the_listed_states_are_every_listed_repository_in_key_order() {
        let store = Store::memory();
        // More repositories than are read at once.
        let names: Vec<String> = (0..3 * CONCURRENT_READS + 5)
            .map(|i| format!("github.com/acme/r{i:03}"))
            .collect();
        for n in &names {
            let s = state(n);
            store
                .put_json(&keys::repo_state(&s.repo), &s)
                .await
                .unwrap();
        }
        let read: Vec<String> = listed_states(&store)
            .await
            .unwrap()
            .iter()
            .map(|s| s.repo.to_string())
            .collect();
        assert_eq!(read, names, "no list: every state, in key order");
        // A list names the repositories of the index: the others are left out.
        let listed: Vec<crate::ids::RepoId> = names
            .iter()
            .step_by(3)
            .map(|n| crate::ids::RepoId::parse(n).unwrap())
            .collect();
        let list = crate::records::RepoList {
            schema_version: crate::records::REPO_LIST_VERSION,
            run: crate::ids::RunId::new(),
            written_at: "2026-12-06T00:00:00Z".into(),
            repos: listed.clone(),
        };
        store.put_json(keys::REPO_LIST, &list).await.unwrap();
        let read: Vec<crate::ids::RepoId> = listed_states(&store)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.repo)
            .collect();
        assert_eq!(read, listed);
        // A state that is not one is an error that names it, not a repository left out.
        let bad = keys::repo_state(&listed[1]);
        store.put(&bad, Bytes::from_static(b"{")).await.unwrap();
        let e = listed_states(&store).await.unwrap_err().to_string();
        assert!(e.contains(&bad), "{e}");
    }

    async fn contract(store: Store) {
        assert_eq!(store.get("a/b.json").await.unwrap(), None);
        store
            .put("a/b.json", Bytes::from_static(b"1"))
            .await
            .unwrap();
        store
            .put("a/b.json", Bytes::from_static(b"2"))
            .await
            .unwrap();
        assert_eq!(store.get("a/b.json").await.unwrap().unwrap(), "2");
        assert!(store.create("a/c", Bytes::from_static(b"x")).await.unwrap());
        assert!(!store.create("a/c", Bytes::from_static(b"y")).await.unwrap());
        assert_eq!(store.get("a/c").await.unwrap().unwrap(), "x");
        store.put("z/q", Bytes::new()).await.unwrap();
        assert_eq!(store.list("a/").await.unwrap(), ["a/b.json", "a/c"]);
        store.delete("a/c").await.unwrap();
        store.delete("a/c").await.unwrap();
        assert_eq!(store.list("a").await.unwrap(), ["a/b.json"]);
        store
            .put_json("repos/x/state.json", &serde_json::json!({"k": 1}))
            .await
            .unwrap();
        let v: serde_json::Value = store.get_json("repos/x/state.json").await.unwrap().unwrap();
        assert_eq!(v["k"], 1);
        assert_eq!(store.list("nothing/").await.unwrap(), Vec::<String>::new());
        // A key with letters a path part must encode lists as written and reads back.
        let odd = "chunks/repo=local+home+zoë+src+a%b#c*/x [1].parquet";
        store.put(odd, Bytes::from_static(b"odd")).await.unwrap();
        assert_eq!(store.list("chunks/").await.unwrap(), [odd]);
        let listed = store.list("chunks/").await.unwrap().remove(0);
        assert_eq!(store.get(&listed).await.unwrap().unwrap(), "odd");
        store.delete(&listed).await.unwrap();

        // Compare-and-swap: create when absent, replace only from the version read.
        assert!(
            store
                .swap("cur", Bytes::from_static(b"1"), None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .swap("cur", Bytes::from_static(b"x"), None)
                .await
                .unwrap()
        );
        let (_, v1) = store.get_versioned("cur").await.unwrap().unwrap();
        assert!(
            store
                .swap("cur", Bytes::from_static(b"2"), Some(&v1))
                .await
                .unwrap()
        );
        let (_, v2) = store.get_versioned("cur").await.unwrap().unwrap();
        assert_ne!(v1, v2, "a write makes a new version");
        assert!(
            !store
                .swap("cur", Bytes::from_static(b"3"), Some(&v1))
                .await
                .unwrap()
        );
        assert_eq!(store.get("cur").await.unwrap().unwrap(), "2");
    }

    #[tokio::test]
    async fn memory_store_honours_the_contract() {
        contract(Store::from_url("memory://").unwrap()).await;
    }

    #[tokio::test]
    async fn file_store_honours_the_contract_and_writes_real_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let store = Store::from_url(&format!("file://{}", root.display())).unwrap();
        contract(store).await;
        assert_eq!(std::fs::read(root.join("a/b.json")).unwrap(), b"2");
        // A plain path works too.
        let again = Store::from_url(root.to_str().unwrap()).unwrap();
        assert_eq!(again.get("a/b.json").await.unwrap().unwrap(), "2");
    }

    #[test]
    fn bad_urls_say_what_to_use() {
        let e = Store::from_url("ftp://x").unwrap_err().to_string();
        assert!(e.contains("s3://"), "{e}");
        assert!(Store::from_url("s3://").is_err());
    }
}
