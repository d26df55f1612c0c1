//! The **bus** seam: topics between stages, with at-least-once delivery.
//!
//! A consumer acknowledges a message only after what it produced from it is durable in the
//! store; a message that is not acknowledged — the consumer crashed, dropped it, or called
//! [`Delivery::nack`] — is delivered again, to the same group. Order is kept per key (stages
//! key by repo id), not across keys.
//!
//! Implementations, chosen by URL:
//! - `inproc://` — [`InProcBus`]: bounded channels inside one process. A topic holds at most
//!   `capacity` messages not yet acknowledged by every group; publishers wait beyond that,
//!   which is how a slow embedder slows the chunker instead of filling memory.
//! - `spool://` — [`SpoolBus`]: each message is an object under `bus/<topic>/` in the store,
//!   durable before `publish` returns. It lets stand-alone stages on one machine hand work to
//!   each other across process restarts (`trawl fetch`, then the in-process pipeline).
//! - `kafka://…` — comes with the cluster issue and must pass the same [`suite`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::Error;
use crate::store::{Store, keys};

/// Publishes to and subscribes from topics.
#[async_trait]
pub trait Bus: Send + Sync + std::fmt::Debug {
    /// Returns once the bus has durably accepted the message (or, in process, queued it).
    /// Waits while a bounded topic is full.
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error>;

    /// Joins consumer `group` on `topic`. Consumers in one group share the messages; each
    /// group sees every message published while it existed.
    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error>;

    /// Declares that nothing more will be published to `topic` for now: subscribers get
    /// `None` from `recv` once every message is acknowledged. Publishing reopens the topic.
    async fn close(&self, topic: &str) -> Result<(), Error>;

    /// Creates `topics` where the bus needs them created (Kafka: the admin API; nothing for
    /// the in-process and spool buses). Idempotent; the fetcher calls it at start.
    async fn create_topics(&self, topics: &[&str]) -> Result<(), Error> {
        let _ = topics;
        Ok(())
    }
}

/// A topic of the pipeline, by role. Code names topics by role; [`from_config`] maps each to
/// its configured name (`bus.topic_*`) in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// File events, fetcher → chunk worker.
    Files,
    /// Chunk-part events, chunk worker → embed worker.
    Chunks,
    /// Embedded events, embed worker → whoever waits for vectors.
    Embedded,
    /// Messages no stage could process, with the reason.
    DeadLetters,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 4] = [
        Topic::Files,
        Topic::Chunks,
        Topic::Embedded,
        Topic::DeadLetters,
    ];

    /// The role's name, as code passes it to [`Bus`].
    pub const fn name(self) -> &'static str {
        match self {
            Topic::Files => "files",
            Topic::Chunks => "chunks",
            Topic::Embedded => "embedded",
            Topic::DeadLetters => "dead-letters",
        }
    }

    /// Its configured name.
    pub fn configured(self, cfg: &crate::config::BusConfig) -> &str {
        match self {
            Topic::Files => &cfg.topic_files,
            Topic::Chunks => &cfg.topic_chunks,
            Topic::Embedded => &cfg.topic_embedded,
            Topic::DeadLetters => &cfg.topic_dead_letters,
        }
    }
}

/// Every topic of the pipeline, by role.
pub const TOPICS: [&str; 4] = [
    Topic::Files.name(),
    Topic::Chunks.name(),
    Topic::Embedded.name(),
    Topic::DeadLetters.name(),
];

/// A consumer's end of a topic.
#[async_trait]
pub trait Subscription: Send {
    /// The next message, or `None` once the topic is closed and fully acknowledged.
    ///
    /// Cancel-safe: dropping the future before it completes loses no message, so it can
    /// stand in a `select!`.
    async fn recv(&mut self) -> Result<Option<Delivery>, Error>;
}

/// Settles one delivery; implemented by each bus.
pub trait Settle: Send {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>>;
    fn nack(self: Box<Self>);
}

/// One delivered message. Dropping it without [`Delivery::ack`] is a negative
/// acknowledgement: the message comes back.
pub struct Delivery {
    pub key: String,
    pub payload: Bytes,
    /// 1 on first delivery, then 2, 3, … on redeliveries to the same consumer group. The
    /// spool and Kafka buses keep the count in the store, so it survives a restart of the
    /// consumer (see each bus for what exactly is counted).
    pub attempt: u32,
    settle: Option<Box<dyn Settle>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("key", &self.key)
            .field("bytes", &self.payload.len())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// A delivery that `settle` acknowledges or gives back (for bus implementations).
    pub fn new(key: String, payload: Bytes, attempt: u32, settle: Box<dyn Settle>) -> Self {
        Self {
            key,
            payload,
            attempt,
            settle: Some(settle),
        }
    }

    /// Acknowledges the message: call only once its output is durable.
    pub async fn ack(mut self) -> Result<(), Error> {
        match self.settle.take() {
            Some(s) => s.ack().await,
            None => Ok(()),
        }
    }

    /// Gives the message back for redelivery.
    pub fn nack(mut self) {
        if let Some(s) = self.settle.take() {
            s.nack();
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(s) = self.settle.take() {
            s.nack();
        }
    }
}

/// The configured bus, with the configured topic names: code names topics by their role
/// (`files`, `chunks`, `embedded`, `dead-letters`); the bus maps them to `bus.topic_*`.
pub fn from_config(cfg: &crate::config::BusConfig, store: &Store) -> Result<Arc<dyn Bus>, Error> {
    let inner = from_url(&cfg.url, store, cfg.capacity)?;
    let names: Vec<(&'static str, String)> = Topic::ALL
        .iter()
        .map(|t| (t.name(), t.configured(cfg).to_owned()))
        .collect();
    for (role, name) in &names {
        check_name(&format!("bus.topic_{}", role.replace('-', "_")), name)?;
    }
    if names.iter().all(|(role, name)| role == name) {
        return Ok(inner);
    }
    Ok(Arc::new(Renamed { inner, names }))
}

/// A bus whose topics go by other names underneath.
#[derive(Debug)]
struct Renamed {
    inner: Arc<dyn Bus>,
    names: Vec<(&'static str, String)>,
}

impl Renamed {
    fn name<'a>(&'a self, topic: &'a str) -> &'a str {
        self.names
            .iter()
            .find(|(role, _)| *role == topic)
            .map_or(topic, |(_, name)| name.as_str())
    }
}

#[async_trait::async_trait]
impl Bus for Renamed {
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error> {
        self.inner.publish(self.name(topic), key, payload).await
    }
    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error> {
        self.inner.subscribe(self.name(topic), group).await
    }
    async fn close(&self, topic: &str) -> Result<(), Error> {
        self.inner.close(self.name(topic)).await
    }
    async fn create_topics(&self, topics: &[&str]) -> Result<(), Error> {
        let names: Vec<&str> = topics.iter().map(|t| self.name(t)).collect();
        self.inner.create_topics(&names).await
    }
}

/// Resolves a bus URL: `inproc://` or `spool://` (over `store`).
pub fn from_url(url: &str, store: &Store, capacity: usize) -> Result<Arc<dyn Bus>, Error> {
    match url.split_once("://").map(|(s, _)| s) {
        Some("inproc") => Ok(Arc::new(InProcBus::new(capacity))),
        Some("spool") => Ok(Arc::new(SpoolBus::new(store.clone()))),
        #[cfg(feature = "kafka")]
        Some("kafka") => kafka_from_url(url, store),
        #[cfg(not(feature = "kafka"))]
        Some("kafka") => Err(Error::BusUrl {
            url: url.to_owned(),
            reason: "this trawl was built without the `kafka` feature: use spool:// or inproc://"
                .into(),
        }),
        _ => Err(Error::BusUrl {
            url: url.to_owned(),
            reason: "unsupported scheme: use spool:// or inproc://".into(),
        }),
    }
}

/// `kafka://host:port[,host:port…][?partitions=N&replication=R&tls=true]`: topics the bus
/// creates get N partitions (default 12) and replication factor R (default 3); `tls=true`
/// connects with TLS (MSK's TLS listener).
#[cfg(feature = "kafka")]
fn kafka_from_url(url: &str, store: &Store) -> Result<Arc<dyn Bus>, Error> {
    let bad = |reason: String| Error::BusUrl {
        url: url.to_owned(),
        reason,
    };
    let rest = url.strip_prefix("kafka://").unwrap_or_default();
    let (brokers, query) = rest.split_once('?').unwrap_or((rest, ""));
    if brokers.is_empty() {
        return Err(bad("no brokers: use kafka://host:port[,host:port]".into()));
    }
    let (mut partitions, mut replication) = (12, 3);
    let mut opts = crate::kafka::KafkaOptions::new(brokers);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            v.parse::<i32>()
                .map_err(|_| bad(format!("{k}={v:?} is not a number")))
        };
        match k {
            "partitions" => partitions = number()?,
            "replication" => replication = number()?,
            "tls" => {
                opts.tls = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad(format!("tls={v:?}: use true or false"))),
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown parameter {other:?}: use partitions, replication or tls"
                )));
            }
        }
    }
    let admin = Arc::new(crate::kafka::AdminApi::new(&opts, partitions, replication));
    let bus = crate::kafka::KafkaBus::new(opts, store.clone(), admin)?;
    Ok(Arc::new(bus))
}

// ---------------------------------------------------------------------------------------------
// In-process bus

/// Bounded in-process bus. See the module docs.
#[derive(Debug)]
pub struct InProcBus {
    capacity: usize,
    state: Arc<Mutex<HashMap<String, TopicState>>>,
    notify: Arc<Notify>,
}

#[derive(Debug, Default)]
struct TopicState {
    /// Messages from offset `base` on.
    log: VecDeque<(String, Bytes)>,
    base: u64,
    groups: HashMap<String, GroupState>,
    closed: bool,
}

#[derive(Debug, Default)]
struct GroupState {
    next: u64,
    /// Delivered, not yet settled: offset → attempt.
    inflight: BTreeMap<u64, u32>,
    /// Given back: offset → attempts so far.
    redeliver: BTreeMap<u64, u32>,
    /// Acknowledged above the low watermark.
    acked: BTreeSet<u64>,
    /// Everything below is acknowledged.
    low: u64,
}

impl TopicState {
    fn end(&self) -> u64 {
        self.base + self.log.len() as u64
    }

    /// Drops messages every group has acknowledged. With no group yet, keeps everything.
    fn trim(&mut self) {
        let Some(min_low) = self.groups.values().map(|g| g.low).min() else {
            return;
        };
        while self.base < min_low {
            self.log.pop_front();
            self.base += 1;
        }
    }
}

impl InProcBus {
    /// A bus whose topics each hold at most `capacity` unacknowledged messages (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Arc::default(),
            notify: Arc::new(Notify::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves consistent state here (every update is one
    // step), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl Bus for InProcBus {
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.state);
                let t = state.entry(topic.to_owned()).or_default();
                if t.log.len() < self.capacity {
                    t.log.push_back((key.to_owned(), payload));
                    t.closed = false;
                    drop(state);
                    self.notify.notify_waiters();
                    return Ok(());
                }
            }
            notified.await;
        }
    }

    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error> {
        {
            let mut state = lock(&self.state);
            let t = state.entry(topic.to_owned()).or_default();
            let base = t.base;
            t.groups
                .entry(group.to_owned())
                .or_insert_with(|| GroupState {
                    next: base,
                    low: base,
                    ..GroupState::default()
                });
        }
        Ok(Box::new(InProcSubscription {
            topic: topic.to_owned(),
            group: group.to_owned(),
            state: self.state.clone(),
            notify: self.notify.clone(),
            mine: Arc::default(),
        }))
    }

    async fn close(&self, topic: &str) -> Result<(), Error> {
        lock(&self.state)
            .entry(topic.to_owned())
            .or_default()
            .closed = true;
        self.notify.notify_waiters();
        Ok(())
    }
}

struct InProcSubscription {
    topic: String,
    group: String,
    state: Arc<Mutex<HashMap<String, TopicState>>>,
    notify: Arc<Notify>,
    /// Offsets this subscription holds, given back when it is dropped.
    mine: Arc<Mutex<BTreeSet<u64>>>,
}

struct InProcSettle {
    offset: u64,
    topic: String,
    group: String,
    state: Arc<Mutex<HashMap<String, TopicState>>>,
    notify: Arc<Notify>,
    mine: Arc<Mutex<BTreeSet<u64>>>,
}

impl InProcSettle {
    fn settle(&self, acked: bool) {
        lock(&self.mine).remove(&self.offset);
        let mut state = lock(&self.state);
        if let Some(t) = state.get_mut(&self.topic) {
            if let Some(g) = t.groups.get_mut(&self.group)
                && let Some(attempt) = g.inflight.remove(&self.offset)
            {
                if acked {
                    g.acked.insert(self.offset);
                    while g.acked.remove(&g.low) {
                        g.low += 1;
                    }
                } else {
                    g.redeliver.insert(self.offset, attempt);
                }
            }
            t.trim();
        }
        drop(state);
        self.notify.notify_waiters();
    }
}

impl Settle for InProcSettle {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        self.settle(true);
        Box::pin(async { Ok(()) })
    }

    fn nack(self: Box<Self>) {
        self.settle(false);
    }
}

#[async_trait]
impl Subscription for InProcSubscription {
    async fn recv(&mut self) -> Result<Option<Delivery>, Error> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.state);
                let t = state
                    .get_mut(&self.topic)
                    .ok_or_else(|| Error::Bus(format!("topic {} vanished", self.topic)))?;
                let end = t.end();
                let base = t.base;
                let closed = t.closed;
                let g = t
                    .groups
                    .get_mut(&self.group)
                    .ok_or_else(|| Error::Bus(format!("group {} vanished", self.group)))?;
                let next = if let Some((off, attempt)) = g.redeliver.pop_first() {
                    Some((off, attempt + 1))
                } else if g.next < end {
                    g.next += 1;
                    Some((g.next - 1, 1))
                } else {
                    None
                };
                if let Some((off, attempt)) = next {
                    g.inflight.insert(off, attempt);
                    let (key, payload) = t.log[(off - base) as usize].clone();
                    lock(&self.mine).insert(off);
                    return Ok(Some(Delivery {
                        key,
                        payload,
                        attempt,
                        settle: Some(Box::new(InProcSettle {
                            offset: off,
                            topic: self.topic.clone(),
                            group: self.group.clone(),
                            state: self.state.clone(),
                            notify: self.notify.clone(),
                            mine: self.mine.clone(),
                        })),
                    }));
                }
                if closed && g.inflight.is_empty() {
                    return Ok(None);
                }
            }
            notified.await;
        }
    }
}

impl Drop for InProcSubscription {
    fn drop(&mut self) {
        let mine = std::mem::take(&mut *lock(&self.mine));
        if mine.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        if let Some(g) = state
            .get_mut(&self.topic)
            .and_then(|t| t.groups.get_mut(&self.group))
        {
            for off in mine {
                if let Some(a) = g.inflight.remove(&off) {
                    g.redeliver.insert(off, a);
                }
            }
        }
        drop(state);
        self.notify.notify_waiters();
    }
}

// ---------------------------------------------------------------------------------------------
// Spool bus: messages as objects in the store

/// A durable bus over the store. See the module docs.
///
/// Layout under `bus/<topic>/`: `m/<stamp>-<seq>` holds one message (first line the key,
/// then the payload); `groups/<group>` registers a consumer group; `acks/<group>/<name>` marks
/// a message acknowledged by that group; `attempts/<group>/<name>` holds how many times the
/// group was handed the message, written before each delivery (so a process that dies on a
/// message still counts the attempt) and deleted on acknowledgement. A message acknowledged
/// by every registered group is deleted with its marks. `closed` marks a closed topic.
///
/// One subscription per group at a time is the intended use (two would both receive every
/// unacknowledged message: at-least-once still holds, but work is doubled).
#[derive(Debug)]
pub struct SpoolBus {
    store: Store,
    seq: AtomicU64,
    last_stamp: AtomicU64,
    closed: Arc<Mutex<BTreeSet<String>>>,
    poll: std::time::Duration,
}

impl SpoolBus {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            seq: AtomicU64::new(0),
            last_stamp: AtomicU64::new(0),
            closed: Arc::default(),
            poll: std::time::Duration::from_millis(50),
        }
    }

    fn stamp(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        // Monotonic within this process even if the clock steps back.
        let prev = self.last_stamp.fetch_max(now, Ordering::SeqCst);
        now.max(prev)
    }
}

fn check_name(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        || name.starts_with('.')
    {
        return Err(Error::Bus(format!(
            "{what} {name:?}: use letters, digits, '-', '_' and '.'"
        )));
    }
    Ok(())
}

#[async_trait]
impl Bus for SpoolBus {
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error> {
        check_name("topic", topic)?;
        if key.contains('\n') {
            return Err(Error::Bus("a message key cannot contain a newline".into()));
        }
        let root = keys::spool(topic);
        if lock(&self.closed).remove(topic) {
            self.store.delete(&format!("{root}closed")).await?;
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let name = format!(
            "{:020}-{:010}-{:08x}",
            self.stamp(),
            seq,
            std::process::id()
        );
        let mut body = Vec::with_capacity(key.len() + 1 + payload.len());
        body.extend_from_slice(key.as_bytes());
        body.push(b'\n');
        body.extend_from_slice(&payload);
        self.store
            .put(&format!("{root}m/{name}"), Bytes::from(body))
            .await
    }

    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error> {
        check_name("topic", topic)?;
        check_name("group", group)?;
        let root = keys::spool(topic);
        self.store
            .put(&format!("{root}groups/{group}"), Bytes::new())
            .await?;
        Ok(Box::new(SpoolSubscription {
            store: self.store.clone(),
            root,
            group: group.to_owned(),
            seen: BTreeSet::new(),
            counted: BTreeSet::new(),
            recorded: HashMap::new(),
            queue: VecDeque::new(),
            given_back: Arc::default(),
            inflight: Arc::default(),
            poll: self.poll,
        }))
    }

    async fn close(&self, topic: &str) -> Result<(), Error> {
        check_name("topic", topic)?;
        lock(&self.closed).insert(topic.to_owned());
        self.store
            .put(&format!("{}closed", keys::spool(topic)), Bytes::new())
            .await
    }
}

struct SpoolSubscription {
    store: Store,
    root: String,
    group: String,
    /// Message names delivered by this subscription (settled or not).
    seen: BTreeSet<String>,
    /// Names with an attempt count in the store (listed at refill, or written here).
    counted: BTreeSet<String>,
    /// Attempt counts written for the delivery about to be handed out: a `recv` cancelled
    /// after the write does not count the attempt twice.
    recorded: HashMap<String, u32>,
    queue: VecDeque<(String, u32)>,
    given_back: Arc<Mutex<Vec<(String, u32)>>>,
    /// Deliveries handed out and not yet settled.
    inflight: Arc<AtomicU64>,
    poll: std::time::Duration,
}

impl SpoolSubscription {
    fn attempts_key(&self, name: &str) -> String {
        format!("{}attempts/{}/{name}", self.root, self.group)
    }

    /// Writes the attempt number of the coming delivery of `name` before handing it out:
    /// one more than the stored count, or `given_back` for a message given back here.
    async fn record_attempt(&mut self, name: &str, given_back: u32) -> Result<u32, Error> {
        if let Some(&n) = self.recorded.get(name) {
            return Ok(n);
        }
        let mut n = given_back;
        if given_back <= 1 && self.counted.contains(name) {
            let stored = self.store.get(&self.attempts_key(name)).await?;
            let stored = stored
                .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<u32>().ok())
                .unwrap_or(0);
            n = n.max(stored.saturating_add(1));
        }
        self.store
            .put(&self.attempts_key(name), Bytes::from(n.to_string()))
            .await?;
        self.counted.insert(name.to_owned());
        self.recorded.insert(name.to_owned(), n);
        Ok(n)
    }

    async fn refill(&mut self) -> Result<(), Error> {
        let counted = format!("{}attempts/{}/", self.root, self.group);
        self.counted.extend(
            self.store
                .list(&counted)
                .await?
                .into_iter()
                .filter_map(|k| k.rsplit('/').next().map(str::to_owned)),
        );
        let acks = format!("{}acks/{}/", self.root, self.group);
        let acked: BTreeSet<String> = self
            .store
            .list(&acks)
            .await?
            .into_iter()
            .filter_map(|k| k.rsplit('/').next().map(str::to_owned))
            .collect();
        for k in self.store.list(&format!("{}m/", self.root)).await? {
            let name = k.rsplit('/').next().unwrap_or_default().to_owned();
            if !acked.contains(&name) && self.seen.insert(name.clone()) {
                self.queue.push_back((name, 1));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Subscription for SpoolSubscription {
    async fn recv(&mut self) -> Result<Option<Delivery>, Error> {
        let mut idle = self.poll;
        loop {
            {
                let mut back = lock(&self.given_back);
                back.sort();
                for (name, attempt) in back.drain(..).rev() {
                    self.queue.push_front((name, attempt + 1));
                }
            }
            if self.queue.is_empty() {
                self.refill().await?;
            }
            // Peek, fetch, then pop: a cancelled `recv` loses nothing (it is cancel-safe).
            while let Some((name, given_back)) = self.queue.front().cloned() {
                let body = self.store.get(&format!("{}m/{name}", self.root)).await?;
                let Some(body) = body else {
                    self.queue.pop_front();
                    continue; // collected after every group acknowledged it
                };
                let attempt = self.record_attempt(&name, given_back).await?;
                self.queue.pop_front();
                self.recorded.remove(&name);
                let split = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
                let key = String::from_utf8_lossy(&body[..split]).into_owned();
                let payload = body.slice((split + 1).min(body.len())..);
                self.inflight.fetch_add(1, Ordering::SeqCst);
                return Ok(Some(Delivery {
                    key,
                    payload,
                    attempt,
                    settle: Some(Box::new(SpoolSettle {
                        store: self.store.clone(),
                        root: self.root.clone(),
                        group: self.group.clone(),
                        name,
                        attempt,
                        given_back: self.given_back.clone(),
                        inflight: self.inflight.clone(),
                    })),
                }));
            }
            let settled =
                |s: &Self| s.inflight.load(Ordering::SeqCst) == 0 && lock(&s.given_back).is_empty();
            let closed = self
                .store
                .get(&format!("{}closed", self.root))
                .await?
                .is_some();
            if closed && settled(self) {
                // Anything published before the close is listed by now; check once more.
                self.refill().await?;
                if self.queue.is_empty() && settled(self) {
                    return Ok(None);
                }
                continue;
            }
            tokio::time::sleep(idle).await;
            idle = (idle * 2).min(std::time::Duration::from_secs(1));
        }
    }
}

struct SpoolSettle {
    store: Store,
    root: String,
    group: String,
    name: String,
    attempt: u32,
    given_back: Arc<Mutex<Vec<(String, u32)>>>,
    inflight: Arc<AtomicU64>,
}

impl Settle for SpoolSettle {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move {
            let mark = format!("{}acks/{}/{}", self.root, self.group, self.name);
            let written = self.store.put(&mark, Bytes::new()).await;
            if let Err(e) = written {
                lock(&self.given_back).push((self.name.clone(), self.attempt));
                self.inflight.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            let count = format!("{}attempts/{}/{}", self.root, self.group, self.name);
            self.store.delete(&count).await?;
            // Collect the message once every registered group has acknowledged it.
            let groups = self.store.list(&format!("{}groups/", self.root)).await?;
            let mut all = true;
            for g in &groups {
                let g = g.rsplit('/').next().unwrap_or_default();
                let k = format!("{}acks/{g}/{}", self.root, self.name);
                if self.store.get(&k).await?.is_none() {
                    all = false;
                    break;
                }
            }
            if all {
                self.store
                    .delete(&format!("{}m/{}", self.root, self.name))
                    .await?;
                for g in &groups {
                    let g = g.rsplit('/').next().unwrap_or_default();
                    self.store
                        .delete(&format!("{}acks/{g}/{}", self.root, self.name))
                        .await?;
                }
            }
            Ok(())
        })
    }

    fn nack(self: Box<Self>) {
        lock(&self.given_back).push((self.name, self.attempt));
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------

/// The behaviour every bus must have. Each implementation's tests call [`suite::run`] with a
/// factory for fresh buses; the Kafka bus will run the same functions.
pub mod suite {
    use super::{Bus, Bytes};
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    /// Every topic [`run`] publishes to, one per check: a backend whose topics must exist
    /// beforehand (a Kafka cluster without auto-creation) creates these.
    pub const TOPICS: [&str; 8] = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"];
    /// The topic of [`attempts_survive_a_restart`].
    pub const RESTART_TOPIC: &str = "t9";

    /// What a bus under test can do beyond the common contract.
    #[derive(Clone, Copy, Debug)]
    pub struct Capabilities {
        /// `Some(n)`: publishing blocks once `n` messages are unacknowledged.
        pub bounded: Option<usize>,
    }

    /// Runs every check, each on a fresh bus from `make`.
    pub async fn run<F, Fut>(make: F, caps: Capabilities)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Arc<dyn Bus>>,
    {
        delivers_everything_in_key_order(make().await).await;
        unacknowledged_messages_come_back_after_a_crash(make().await).await;
        nack_and_drop_redeliver(make().await).await;
        groups_are_independent(make().await).await;
        close_ends_the_stream_after_everything_is_acknowledged(make().await).await;
        late_subscribers_see_retained_messages(make().await).await;
        recv_is_cancel_safe(make().await).await;
        if let Some(n) = caps.bounded {
            publishers_wait_when_the_topic_is_full(make().await, n).await;
        }
    }

    fn msg(key: &str, i: usize) -> Bytes {
        Bytes::from(format!("{key}:{i}"))
    }

    async fn recv(sub: &mut Box<dyn super::Subscription>) -> super::Delivery {
        tokio::time::timeout(Duration::from_secs(20), sub.recv())
            .await
            .expect("a message within 20 s")
            .expect("recv succeeds")
            .expect("the stream is not over")
    }

    pub async fn delivers_everything_in_key_order(bus: Arc<dyn Bus>) {
        let mut sub = bus.subscribe(TOPICS[0], "g").await.unwrap();
        // Publish concurrently: a bounded bus holds fewer than 90 messages.
        let publisher = {
            let bus = bus.clone();
            tokio::spawn(async move {
                for i in 0..30 {
                    for key in ["a", "b", "c"] {
                        bus.publish(TOPICS[0], key, msg(key, i)).await.unwrap();
                    }
                }
            })
        };
        let mut seen: HashMap<String, Vec<Bytes>> = HashMap::new();
        for _ in 0..90 {
            let d = recv(&mut sub).await;
            assert_eq!(d.attempt, 1);
            seen.entry(d.key.clone())
                .or_default()
                .push(d.payload.clone());
            d.ack().await.unwrap();
        }
        for key in ["a", "b", "c"] {
            let want: Vec<Bytes> = (0..30).map(|i| msg(key, i)).collect();
            assert_eq!(seen[key], want, "order of key {key}");
        }
        publisher.await.unwrap();
    }

    pub async fn unacknowledged_messages_come_back_after_a_crash(bus: Arc<dyn Bus>) {
        let mut sub = bus.subscribe(TOPICS[1], "g").await.unwrap();
        for i in 0..4 {
            bus.publish(TOPICS[1], "k", msg("k", i)).await.unwrap();
        }
        let first = recv(&mut sub).await;
        assert_eq!(first.payload, msg("k", 0));
        first.ack().await.unwrap();
        let held1 = recv(&mut sub).await;
        let held2 = recv(&mut sub).await;
        // The consumer "crashes": its unacknowledged deliveries and subscription vanish.
        std::mem::forget(held1);
        std::mem::forget(held2);
        drop(sub);
        let mut again = bus.subscribe(TOPICS[1], "g").await.unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = recv(&mut again).await;
            got.push(d.payload.clone());
            d.ack().await.unwrap();
        }
        got.sort();
        let want: Vec<Bytes> = (1..4).map(|i| msg("k", i)).collect();
        assert_eq!(
            got, want,
            "the acknowledged message never returns, the others all do"
        );
    }

    pub async fn nack_and_drop_redeliver(bus: Arc<dyn Bus>) {
        let mut sub = bus.subscribe(TOPICS[2], "g").await.unwrap();
        bus.publish(TOPICS[2], "k", msg("k", 0)).await.unwrap();
        let d = recv(&mut sub).await;
        d.nack();
        let d = recv(&mut sub).await;
        assert_eq!(d.payload, msg("k", 0));
        assert_eq!(d.attempt, 2);
        drop(d);
        let d = recv(&mut sub).await;
        assert_eq!(d.payload, msg("k", 0));
        assert_eq!(d.attempt, 3);
        d.ack().await.unwrap();
    }

    /// The attempt count survives a give-back, a consumer that dies on the message (neither
    /// acknowledging nor giving it back) and a new bus over the same storage: `second` is a
    /// new bus over `first`'s storage (the same bus, for one that lives in process).
    pub async fn attempts_survive_a_restart(first: Arc<dyn Bus>, second: Arc<dyn Bus>) {
        let mut sub = first.subscribe(RESTART_TOPIC, "g").await.unwrap();
        first
            .publish(RESTART_TOPIC, "k", msg("k", 0))
            .await
            .unwrap();
        let d = recv(&mut sub).await;
        assert_eq!(d.attempt, 1);
        d.nack();
        let d = recv(&mut sub).await;
        assert_eq!(d.attempt, 2);
        std::mem::forget(d);
        drop(sub);
        let mut again = second.subscribe(RESTART_TOPIC, "g").await.unwrap();
        let d = recv(&mut again).await;
        assert_eq!(d.payload, msg("k", 0));
        assert_eq!(d.attempt, 3, "two attempts were made before the restart");
        d.nack();
        let d = recv(&mut again).await;
        assert_eq!(d.attempt, 4);
        d.ack().await.unwrap();
    }

    pub async fn groups_are_independent(bus: Arc<dyn Bus>) {
        let mut g1 = bus.subscribe(TOPICS[3], "g1").await.unwrap();
        let mut g2 = bus.subscribe(TOPICS[3], "g2").await.unwrap();
        for i in 0..3 {
            bus.publish(TOPICS[3], "k", msg("k", i)).await.unwrap();
        }
        for sub in [&mut g1, &mut g2] {
            for i in 0..3 {
                let d = recv(sub).await;
                assert_eq!(d.payload, msg("k", i));
                d.ack().await.unwrap();
            }
        }
    }

    pub async fn close_ends_the_stream_after_everything_is_acknowledged(bus: Arc<dyn Bus>) {
        let mut sub = bus.subscribe(TOPICS[4], "g").await.unwrap();
        bus.publish(TOPICS[4], "k", msg("k", 0)).await.unwrap();
        bus.publish(TOPICS[4], "k", msg("k", 1)).await.unwrap();
        bus.close(TOPICS[4]).await.unwrap();
        let a = recv(&mut sub).await;
        a.ack().await.unwrap();
        let b = recv(&mut sub).await;
        b.nack();
        let b = recv(&mut sub).await;
        assert_eq!(b.payload, msg("k", 1), "a closed topic still redelivers");
        b.ack().await.unwrap();
        let end = tokio::time::timeout(Duration::from_secs(20), sub.recv())
            .await
            .expect("the end within 20 s")
            .unwrap();
        assert!(end.is_none(), "closed and drained means end of stream");
    }

    pub async fn late_subscribers_see_retained_messages(bus: Arc<dyn Bus>) {
        bus.publish(TOPICS[5], "k", msg("k", 0)).await.unwrap();
        let mut sub = bus.subscribe(TOPICS[5], "g").await.unwrap();
        let d = recv(&mut sub).await;
        assert_eq!(d.payload, msg("k", 0));
        d.ack().await.unwrap();
    }

    pub async fn recv_is_cancel_safe(bus: Arc<dyn Bus>) {
        let mut sub = bus.subscribe(TOPICS[7], "g").await.unwrap();
        for i in 0..3 {
            bus.publish(TOPICS[7], "k", msg("k", i)).await.unwrap();
        }
        let mut got = Vec::new();
        let mut tries = 0;
        while got.len() < 3 {
            tries += 1;
            assert!(
                tries < 100_000,
                "messages lost to cancelled recv calls: got {got:?}"
            );
            // Cancel most calls part-way; a message is never lost to a cancelled call.
            let budget = if tries % 7 == 0 {
                Duration::from_secs(20)
            } else {
                Duration::from_micros(1)
            };
            if let Ok(r) = tokio::time::timeout(budget, sub.recv()).await {
                let d = r.unwrap().unwrap();
                got.push(d.payload.clone());
                d.ack().await.unwrap();
            }
        }
        got.sort();
        assert_eq!(got, (0..3).map(|i| msg("k", i)).collect::<Vec<_>>());
    }

    pub async fn publishers_wait_when_the_topic_is_full(bus: Arc<dyn Bus>, capacity: usize) {
        let mut sub = bus.subscribe(TOPICS[6], "g").await.unwrap();
        for i in 0..capacity {
            bus.publish(TOPICS[6], "k", msg("k", i)).await.unwrap();
        }
        let blocked = {
            let bus = bus.clone();
            tokio::spawn(async move { bus.publish(TOPICS[6], "k", msg("k", capacity)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !blocked.is_finished(),
            "publish must wait while the topic is full"
        );
        let d = recv(&mut sub).await;
        d.ack().await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), blocked)
            .await
            .expect("publish proceeds once there is room")
            .unwrap()
            .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_process_bus_passes_the_suite() {
        suite::run(
            || async { Arc::new(InProcBus::new(4)) as Arc<dyn Bus> },
            suite::Capabilities { bounded: Some(4) },
        )
        .await;
    }

    #[tokio::test]
    async fn spool_bus_passes_the_suite_on_memory_and_file_stores() {
        suite::run(
            || async { Arc::new(SpoolBus::new(Store::memory())) as Arc<dyn Bus> },
            suite::Capabilities { bounded: None },
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let n = AtomicU64::new(0);
        suite::run(
            || async {
                let i = n.fetch_add(1, Ordering::SeqCst);
                let store =
                    Store::from_url(dir.path().join(i.to_string()).to_str().unwrap()).unwrap();
                Arc::new(SpoolBus::new(store)) as Arc<dyn Bus>
            },
            suite::Capabilities { bounded: None },
        )
        .await;
    }

    #[tokio::test]
    async fn attempts_survive_a_restart_on_the_in_process_and_spool_buses() {
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(4));
        suite::attempts_survive_a_restart(bus.clone(), bus).await;
        let store = Store::memory();
        suite::attempts_survive_a_restart(
            Arc::new(SpoolBus::new(store.clone())),
            Arc::new(SpoolBus::new(store.clone())),
        )
        .await;
        assert!(
            store.list("bus/t9/attempts/").await.unwrap().is_empty(),
            "an acknowledged message leaves no count behind"
        );
        let dir = tempfile::tempdir().unwrap();
        let store = Store::from_url(dir.path().to_str().unwrap()).unwrap();
        suite::attempts_survive_a_restart(
            Arc::new(SpoolBus::new(store.clone())),
            Arc::new(SpoolBus::new(store)),
        )
        .await;
    }

    #[tokio::test]
    async fn spool_survives_a_process_restart_and_collects_acknowledged_messages() {
        let store = Store::memory();
        let bus = SpoolBus::new(store.clone());
        let mut sub = bus.subscribe("files", "chunker").await.unwrap();
        bus.publish("files", "repo", Bytes::from_static(b"x"))
            .await
            .unwrap();
        let d = sub.recv().await.unwrap().unwrap();
        std::mem::forget(d);
        drop((sub, bus));
        // A new process: same store, new bus.
        let bus = SpoolBus::new(store.clone());
        let mut sub = bus.subscribe("files", "chunker").await.unwrap();
        let d = sub.recv().await.unwrap().unwrap();
        assert_eq!(d.payload, "x");
        d.ack().await.unwrap();
        assert!(store.list("bus/files/m/").await.unwrap().is_empty());
        assert!(store.list("bus/files/acks/").await.unwrap().is_empty());
        assert!(store.list("bus/files/attempts/").await.unwrap().is_empty());
    }

    #[test]
    fn urls_resolve_or_say_what_to_use() {
        let s = Store::memory();
        assert!(from_url("inproc://", &s, 8).is_ok());
        assert!(from_url("spool://", &s, 8).is_ok());
        if cfg!(feature = "kafka") {
            assert!(from_url("kafka://localhost:9092?partitions=3&replication=1", &s, 8).is_ok());
            let e = from_url("kafka://localhost:9092?shards=3", &s, 8)
                .unwrap_err()
                .to_string();
            assert!(e.contains("partitions, replication or tls"), "{e}");
            assert!(from_url("kafka://h:9094?tls=true", &s, 8).is_ok());
            let e = from_url("kafka://h:9094?tls=yes", &s, 8)
                .unwrap_err()
                .to_string();
            assert!(e.contains("use true or false"), "{e}");
            assert!(from_url("kafka://", &s, 8).is_err());
        } else {
            let e = from_url("kafka://localhost:9092", &s, 8)
                .unwrap_err()
                .to_string();
            assert!(e.contains("spool://"), "{e}");
        }
        assert!(from_url("nats://x", &s, 8).is_err());
    }

    #[tokio::test]
    async fn configured_topic_names_are_what_the_bus_underneath_sees() {
        let store = Store::memory();
        let cfg = crate::config::BusConfig {
            topic_files: "prod.files".into(),
            ..crate::config::BusConfig::default()
        };
        let bus = from_config(&cfg, &store).unwrap();
        bus.publish("files", "k", Bytes::from_static(b"x"))
            .await
            .unwrap();
        bus.publish("chunks", "k", Bytes::from_static(b"y"))
            .await
            .unwrap();
        let keys = store.list("bus/").await.unwrap();
        assert!(
            keys.iter().any(|k| k.starts_with("bus/prod.files/")),
            "{keys:?}"
        );
        assert!(
            !keys.iter().any(|k| k.starts_with("bus/files/")),
            "{keys:?}"
        );
        assert!(
            keys.iter().any(|k| k.starts_with("bus/chunks/")),
            "{keys:?}"
        );
        let mut sub = bus.subscribe("files", "g").await.unwrap();
        let d = sub.recv().await.unwrap().unwrap();
        assert_eq!(&d.payload[..], b"x");
        d.ack().await.unwrap();

        let bad = crate::config::BusConfig {
            topic_embedded: "no spaces".into(),
            ..crate::config::BusConfig::default()
        };
        let e = from_config(&bad, &store).unwrap_err().to_string();
        assert!(e.contains("bus.topic_embedded"), "{e}");
    }
}
