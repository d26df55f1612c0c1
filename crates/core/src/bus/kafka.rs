//! The Kafka bus (`kafka://host:port[,host:port…]`, feature `kafka`): the same contract as the
//! in-process and spool buses, over rdkafka.
//!
//! - **Publish**: an idempotent producer with `acks=all`, keyed by the stage's key (the
//!   repository id), so a repository's messages keep their order in one partition. A payload
//!   over `max_inline` bytes travels by reference: it is written to the store under
//!   `bus/large/<hash>` first and the message carries the key in a `trawl-ref` header.
//! - **Topics** are created through a [`TopicAdmin`] seam: the admin API against a real
//!   broker; tests use the mock cluster's own call, because the mock does not implement
//!   CreateTopics.
//! - **Consume**: a consumer group with auto-commit off. Each partition commits its low
//!   watermark — the offset below which every message is acknowledged — so an
//!   acknowledgement never commits past an unacknowledged message. A nack (or a dropped
//!   delivery) redelivers the message to the same subscription; a crash leaves the offsets
//!   uncommitted and the group redelivers them. Commits refused during a rebalance are kept
//!   and retried on the next `recv`, never spun on; transient broker errors are logged and
//!   polling continues.
//! - **Attempts** survive a restart: before a redelivery (attempt 2 on) is handed out, and
//!   before the first message a partition assignment starts from (the committed offset, where
//!   a consumer that died on a message resumes), the attempt number is written to the store
//!   under `bus/<topic>/attempts/<group>/<partition>/<offset>`; a consumer loads a partition's
//!   counts when it first reads from it, and deletes a count when the message is acknowledged.
//!   That is one small write per retry and per assignment, not per message.
//! - **Close**: a marker message on every partition; a subscriber ends its stream once every
//!   assigned partition has reached a marker and everything before is acknowledged. A later
//!   publish reopens the topic.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use rdkafka::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::seam::{Bus, Delivery, Settle, Subscription, lock};
use crate::Error;
use crate::store::{Store, keys};

const REF_HEADER: &str = "trawl-ref";
const CLOSE_HEADER: &str = "trawl-close";

/// `kafka://host:port[,host:port…][?partitions=N&replication=R&tls=true]`: topics the bus
/// creates get N partitions (default 12) and replication factor R (default 3); `tls=true`
/// connects with TLS (MSK's TLS listener).
pub(super) fn from_url(url: &str, store: &Store) -> Result<KafkaBus, Error> {
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
    let mut opts = KafkaOptions::new(brokers);
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
    let admin = Arc::new(AdminApi::new(&opts, partitions, replication));
    KafkaBus::new(opts, store.clone(), admin)
}

/// Creates topics (a seam: the mock cluster has no CreateTopics).
#[async_trait]
pub trait TopicAdmin: Send + Sync + std::fmt::Debug {
    /// Makes sure `topic` exists with at least one partition.
    async fn ensure(&self, topic: &str) -> Result<(), Error>;
}

/// Topic creation through Kafka's admin API.
#[derive(Debug)]
pub struct AdminApi {
    opts: KafkaOptions,
    partitions: i32,
    replication: i32,
}

impl AdminApi {
    pub fn new(opts: &KafkaOptions, partitions: i32, replication: i32) -> Self {
        Self {
            opts: opts.clone(),
            partitions,
            replication,
        }
    }
}

#[async_trait]
impl TopicAdmin for AdminApi {
    async fn ensure(&self, topic: &str) -> Result<(), Error> {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            self.opts.client().create().map_err(bus_err)?;
        let new = NewTopic::new(
            topic,
            self.partitions,
            TopicReplication::Fixed(self.replication),
        );
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin.create_topics([&new], &opts).await.map_err(bus_err)?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => {
                    return Err(Error::Bus(format!("creating topic {t}: {code}")));
                }
            }
        }
        Ok(())
    }
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(bus_err)`
fn bus_err(e: KafkaError) -> Error {
    Error::Bus(format!("kafka: {e}"))
}

/// How the Kafka bus is set up.
#[derive(Clone, Debug)]
pub struct KafkaOptions {
    pub brokers: String,
    /// Payloads larger than this travel by reference through the store.
    pub max_inline: usize,
    /// librdkafka's group session timeout.
    pub session_timeout_ms: u32,
    /// Connect with TLS (`security.protocol=ssl`; the system's CA roots), as MSK's TLS
    /// listener wants.
    pub tls: bool,
}

impl KafkaOptions {
    pub fn new(brokers: &str) -> Self {
        Self {
            brokers: brokers.to_owned(),
            max_inline: 900 * 1024,
            session_timeout_ms: 10_000,
            tls: false,
        }
    }

    /// A client configuration with the brokers and the security protocol.
    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        if self.tls {
            c.set("security.protocol", "ssl");
        }
        c
    }
}

/// The Kafka bus. See the module docs.
pub struct KafkaBus {
    opts: KafkaOptions,
    store: Store,
    admin: Arc<dyn TopicAdmin>,
    producer: FutureProducer,
    ensured: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for KafkaBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KafkaBus({})", self.opts.brokers)
    }
}

impl KafkaBus {
    pub fn new(
        opts: KafkaOptions,
        store: Store,
        admin: Arc<dyn TopicAdmin>,
    ) -> Result<Self, Error> {
        let producer: FutureProducer = opts
            .client()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", "60000")
            .create()
            .map_err(bus_err)?;
        Ok(Self {
            opts,
            store,
            admin,
            producer,
            ensured: Mutex::new(HashSet::new()),
        })
    }

    async fn ensure(&self, topic: &str) -> Result<(), Error> {
        if lock(&self.ensured).contains(topic) {
            return Ok(());
        }
        self.admin.ensure(topic).await?;
        lock(&self.ensured).insert(topic.to_owned());
        Ok(())
    }

    async fn send(
        &self,
        topic: &str,
        key: &str,
        payload: &[u8],
        headers: Option<OwnedHeaders>,
        partition: Option<i32>,
    ) -> Result<(), Error> {
        let mut record = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(h) = headers {
            record = record.headers(h);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        self.producer
            .send(record, Duration::from_secs(60))
            .await
            .map(|_| ())
            .map_err(|(e, _)| bus_err(e))
    }

    fn partitions(&self, topic: &str) -> Result<Vec<i32>, Error> {
        let md = self
            .producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(bus_err)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| {
                t.partitions()
                    .iter()
                    .map(rdkafka::metadata::MetadataPartition::id)
            })
            .collect())
    }
}

fn attempts_key(topic: &str, group: &str, partition: i32, offset: i64) -> String {
    format!(
        "{}attempts/{group}/{partition}/{offset}",
        keys::spool(topic)
    )
}

fn header<'a, M: Message>(m: &'a M, name: &str) -> Option<&'a [u8]> {
    let h = m.headers()?;
    h.iter().find(|x| x.key == name).and_then(|x| x.value)
}

#[async_trait]
impl Bus for KafkaBus {
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error> {
        self.ensure(topic).await?;
        if payload.len() > self.opts.max_inline {
            let object = format!("bus/large/{}", blake3::hash(&payload).to_hex());
            self.store.put(&object, payload).await?;
            let headers = OwnedHeaders::new().insert(Header {
                key: REF_HEADER,
                value: Some(object.as_bytes()),
            });
            return self.send(topic, key, &[], Some(headers), None).await;
        }
        self.send(topic, key, &payload, None, None).await
    }

    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error> {
        self.ensure(topic).await?;
        let consumer: StreamConsumer = self
            .opts
            .client()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set(
                "session.timeout.ms",
                self.opts.session_timeout_ms.to_string(),
            )
            .create()
            .map_err(bus_err)?;
        consumer.subscribe(&[topic]).map_err(bus_err)?;
        Ok(Box::new(KafkaSubscription {
            topic: topic.to_owned(),
            group: group.to_owned(),
            consumer: Arc::new(consumer),
            store: self.store.clone(),
            state: Arc::new(Mutex::new(SubState::default())),
        }))
    }

    async fn close(&self, topic: &str) -> Result<(), Error> {
        self.ensure(topic).await?;
        for p in self.partitions(topic)? {
            let headers = OwnedHeaders::new().insert(Header {
                key: CLOSE_HEADER,
                value: Some(b"1".as_slice()),
            });
            self.send(topic, "", &[], Some(headers), Some(p)).await?;
        }
        Ok(())
    }

    async fn create_topics(&self, topics: &[&str]) -> Result<(), Error> {
        for t in topics {
            self.ensure(t).await?;
        }
        Ok(())
    }
}

/// One received message kept for (re)delivery.
#[derive(Clone, Debug)]
struct Held {
    partition: i32,
    offset: i64,
    key: String,
    payload: Bytes,
    /// A payload that travelled by reference, not fetched yet.
    reference: Option<String>,
    attempt: u32,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Next offset to commit: everything below is acknowledged.
    low: Option<i64>,
    acked: BTreeSet<i64>,
    inflight: BTreeSet<i64>,
    /// The offset of the close marker this partition reached, if it is the last thing read.
    closed_at: Option<i64>,
}

#[derive(Debug, Default)]
struct SubState {
    partitions: BTreeMap<i32, PartitionState>,
    /// Given back, waiting to be delivered again.
    redeliver: VecDeque<Held>,
    attempts: HashMap<(i32, i64), u32>,
    /// Offsets to commit that a rebalance refused: retried on the next `recv`.
    pending_commit: BTreeMap<i32, i64>,
    /// Partitions whose stored attempt counts are loaded (since their assignment).
    loaded: BTreeSet<i32>,
    /// Messages with an attempt count in the store, deleted when they are acknowledged.
    recorded: BTreeSet<(i32, i64)>,
}

impl SubState {
    fn part(&mut self, p: i32, offset: i64) -> &mut PartitionState {
        let s = self.partitions.entry(p).or_default();
        if s.low.is_none() {
            s.low = Some(offset);
        }
        s
    }

    /// Acknowledges `offset`; returns the new commit point if it moved.
    fn ack(&mut self, p: i32, offset: i64) -> Option<i64> {
        let s = self.partitions.get_mut(&p)?;
        s.inflight.remove(&offset);
        s.acked.insert(offset);
        let low = s.low.as_mut()?;
        let before = *low;
        while s.acked.remove(low) {
            *low += 1;
        }
        (*low != before).then_some(*low)
    }
}

struct KafkaSubscription {
    topic: String,
    group: String,
    consumer: Arc<StreamConsumer>,
    store: Store,
    state: Arc<Mutex<SubState>>,
}

struct KafkaSettle {
    held: Held,
    topic: String,
    store: Store,
    group: String,
    consumer: Arc<StreamConsumer>,
    state: Arc<Mutex<SubState>>,
}

/// Commits `offsets` (partition → next offset) synchronously, off the async threads. A
/// refused commit (a rebalance in progress, a lost assignment, a timeout) is kept and retried
/// on the next `recv` — the rebalance only progresses inside `recv`, so spinning here would
/// never succeed; if the partition moved meanwhile, its new owner redelivers (at least once).
async fn commit(
    consumer: Arc<StreamConsumer>,
    topic: String,
    state: Arc<Mutex<SubState>>,
    offsets: BTreeMap<i32, i64>,
) {
    if offsets.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for (p, o) in &offsets {
        let _ = tpl.add_partition_offset(&topic, *p, Offset::Offset(*o));
    }
    let c = consumer.clone();
    let r = tokio::task::spawn_blocking(move || c.commit(&tpl, CommitMode::Sync)).await;
    if !matches!(r, Ok(Ok(()))) {
        tracing::debug!(?r, "kafka: commit deferred to the next recv");
        let mut st = lock(&state);
        for (p, o) in offsets {
            let e = st.pending_commit.entry(p).or_insert(o);
            *e = (*e).max(o);
        }
    }
}

impl Settle for KafkaSettle {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        let (moved, recorded) = {
            let mut st = lock(&self.state);
            let at = (self.held.partition, self.held.offset);
            st.attempts.remove(&at);
            (st.ack(at.0, at.1), st.recorded.remove(&at))
        };
        Box::pin(async move {
            if recorded {
                let key = attempts_key(
                    &self.topic,
                    &self.group,
                    self.held.partition,
                    self.held.offset,
                );
                if let Err(e) = self.store.delete(&key).await {
                    tracing::warn!(error = %e, "kafka: an attempt count outlives its message");
                }
            }
            if let Some(low) = moved {
                commit(
                    self.consumer.clone(),
                    self.topic.clone(),
                    self.state.clone(),
                    BTreeMap::from([(self.held.partition, low)]),
                )
                .await;
            }
            Ok(())
        })
    }

    fn nack(self: Box<Self>) {
        let mut st = lock(&self.state);
        if let Some(p) = st.partitions.get_mut(&self.held.partition) {
            p.inflight.remove(&self.held.offset);
        }
        st.redeliver.push_back(self.held.clone());
    }
}

impl KafkaSubscription {
    fn deliver(&self, mut held: Held) -> Delivery {
        {
            let mut st = lock(&self.state);
            let n = st
                .attempts
                .entry((held.partition, held.offset))
                .or_insert(0);
            *n += 1;
            held.attempt = *n;
            st.part(held.partition, held.offset)
                .inflight
                .insert(held.offset);
        }
        let settle = KafkaSettle {
            held: held.clone(),
            topic: self.topic.clone(),
            store: self.store.clone(),
            group: self.group.clone(),
            consumer: self.consumer.clone(),
            state: self.state.clone(),
        };
        Delivery::new(held.key, held.payload, held.attempt, Box::new(settle))
    }

    /// Loads partition `p`'s stored attempt counts the first time it delivers from it in
    /// this assignment, starting at `first` (the committed offset): counts below it belong
    /// to acknowledged messages and are deleted. Returns whether this was that first time.
    async fn load_attempts(&self, p: i32, first: i64) -> Result<bool, Error> {
        if lock(&self.state).loaded.contains(&p) {
            return Ok(false);
        }
        let prefix = format!("{}attempts/{}/{p}/", keys::spool(&self.topic), self.group);
        let mut found = Vec::new();
        for key in self.store.list(&prefix).await? {
            let Some(offset) = key.rsplit('/').next().and_then(|o| o.parse::<i64>().ok()) else {
                continue;
            };
            if offset < first {
                self.store.delete(&key).await?;
                continue;
            }
            let n = self.store.get(&key).await?;
            let n = n
                .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<u32>().ok())
                .unwrap_or(0);
            found.push((offset, n));
        }
        let mut st = lock(&self.state);
        for (offset, n) in found {
            let a = st.attempts.entry((p, offset)).or_insert(0);
            *a = (*a).max(n);
            st.recorded.insert((p, offset));
        }
        Ok(st.loaded.insert(p))
    }

    /// Writes the attempt number `h` is about to be delivered with, when it is a retry or
    /// the first message of an assignment (see the module docs).
    async fn record_attempt(&self, h: &Held) -> Result<(), Error> {
        let first = self.load_attempts(h.partition, h.offset).await?;
        let at = (h.partition, h.offset);
        let n = lock(&self.state).attempts.get(&at).copied().unwrap_or(0) + 1;
        if n >= 2 || first {
            let key = attempts_key(&self.topic, &self.group, h.partition, h.offset);
            self.store.put(&key, Bytes::from(n.to_string())).await?;
            lock(&self.state).recorded.insert(at);
        }
        Ok(())
    }

    /// Every assigned partition is at a close marker with nothing outstanding.
    fn drained(&self) -> bool {
        let Some(assigned) = self.assigned() else {
            return false;
        };
        if assigned.is_empty() {
            return false;
        }
        let st = lock(&self.state);
        st.redeliver.is_empty()
            && assigned.iter().all(|p| {
                st.partitions.get(p).is_some_and(|s| {
                    s.closed_at.is_some() && s.inflight.is_empty() && s.low >= s.closed_at
                })
            })
    }

    /// The partitions of the topic assigned to this consumer now.
    fn assigned(&self) -> Option<HashSet<i32>> {
        let a = self.consumer.assignment().ok()?;
        Some(
            a.elements_for_topic(&self.topic)
                .iter()
                .map(rdkafka::topic_partition_list::TopicPartitionListElem::partition)
                .collect(),
        )
    }

    /// Retries deferred commits of partitions still assigned, and forgets what belongs to
    /// partitions a rebalance took away (their new owner starts from the committed offset).
    async fn after_rebalance(&self) {
        let Some(assigned) = self.assigned() else {
            return;
        };
        let pending = {
            let mut st = lock(&self.state);
            if !assigned.is_empty() {
                st.partitions.retain(|p, _| assigned.contains(p));
                st.redeliver.retain(|h| assigned.contains(&h.partition));
                st.attempts.retain(|(p, _), _| assigned.contains(p));
                st.recorded.retain(|(p, _)| assigned.contains(p));
                st.loaded.retain(|p| assigned.contains(p));
            }
            let mut pending = std::mem::take(&mut st.pending_commit);
            pending.retain(|p, _| assigned.contains(p));
            pending
        };
        commit(
            self.consumer.clone(),
            self.topic.clone(),
            self.state.clone(),
            pending,
        )
        .await;
    }
}

#[async_trait]
impl Subscription for KafkaSubscription {
    async fn recv(&mut self) -> Result<Option<Delivery>, Error> {
        self.after_rebalance().await;
        loop {
            // Everything received waits in the queue until delivered: a cancelled call (or a
            // failed fetch of a payload sent by reference) loses nothing.
            let front = lock(&self.state).redeliver.front().cloned();
            if let Some(mut h) = front {
                if let Some(object) = h.reference.take() {
                    h.payload = self.store.get(&object).await?.ok_or_else(|| {
                        Error::Bus(format!(
                            "message {}/{} refers to {object}, which is missing from the store",
                            h.partition, h.offset
                        ))
                    })?;
                }
                self.record_attempt(&h).await?;
                lock(&self.state).redeliver.pop_front();
                return Ok(Some(self.deliver(h)));
            }
            if self.drained() {
                return Ok(None);
            }
            // Wake up now and then to notice a drained stream (its last ack may come from
            // another task).
            let m = match tokio::time::timeout(Duration::from_millis(200), self.consumer.recv())
                .await
            {
                Err(_) => continue,
                Ok(Ok(m)) => m,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "kafka: transient consumer error; polling on");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (p, o) = (m.partition(), m.offset());
            if header(&m, CLOSE_HEADER).is_some() {
                let moved = {
                    let mut st = lock(&self.state);
                    st.part(p, o).closed_at = Some(o);
                    st.ack(p, o)
                };
                if let Some(low) = moved {
                    commit(
                        self.consumer.clone(),
                        self.topic.clone(),
                        self.state.clone(),
                        BTreeMap::from([(p, low)]),
                    )
                    .await;
                }
                continue;
            }
            let mut st = lock(&self.state);
            st.part(p, o).closed_at = None;
            let key = m
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .unwrap_or_default();
            let reference = header(&m, REF_HEADER).map(|r| String::from_utf8_lossy(r).into_owned());
            st.redeliver.push_back(Held {
                partition: p,
                offset: o,
                key,
                payload: Bytes::copy_from_slice(m.payload().unwrap_or_default()),
                reference,
                attempt: 0,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::suite;
    use rdkafka::mocking::MockCluster;

    /// Topics made beforehand with the mock cluster's own call (it has no CreateTopics).
    #[derive(Debug)]
    struct Precreated;

    #[async_trait]
    impl TopicAdmin for Precreated {
        async fn ensure(&self, _topic: &str) -> Result<(), Error> {
            Ok(())
        }
    }

    fn bus(brokers: &str, store: &Store) -> Arc<dyn Bus> {
        let mut opts = KafkaOptions::new(brokers);
        opts.max_inline = 64;
        Arc::new(KafkaBus::new(opts, store.clone(), Arc::new(Precreated)).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kafka_bus_passes_the_suite_on_the_mock_cluster() {
        let cluster = MockCluster::new(3).unwrap();
        for t in suite::TOPICS {
            cluster.create_topic(t, 3, 1).unwrap();
        }
        let brokers = cluster.bootstrap_servers();
        let store = Store::memory();
        suite::run(
            || {
                let b = bus(&brokers, &store);
                async move { b }
            },
            suite::Capabilities { bounded: None },
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn attempts_survive_a_restart_on_the_mock_cluster() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic(suite::RESTART_TOPIC, 2, 1).unwrap();
        let brokers = cluster.bootstrap_servers();
        let store = Store::memory();
        suite::attempts_survive_a_restart(bus(&brokers, &store), bus(&brokers, &store)).await;
        assert!(
            store
                .list(&format!("bus/{}/attempts/", suite::RESTART_TOPIC))
                .await
                .unwrap()
                .is_empty(),
            "an acknowledged message leaves no count behind"
        );
    }

    /// An admin that records what it was asked to create.
    #[derive(Debug, Default)]
    struct Recording(Mutex<Vec<String>>);

    #[async_trait]
    impl TopicAdmin for Recording {
        async fn ensure(&self, topic: &str) -> Result<(), Error> {
            lock(&self.0).push(topic.to_owned());
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pipeline_topics_are_created_once_each() {
        let cluster = MockCluster::new(1).unwrap();
        let admin = Arc::new(Recording::default());
        let b = KafkaBus::new(
            KafkaOptions::new(&cluster.bootstrap_servers()),
            Store::memory(),
            admin.clone(),
        )
        .unwrap();
        b.create_topics(&super::super::TOPICS).await.unwrap();
        b.create_topics(&super::super::TOPICS).await.unwrap();
        assert_eq!(*lock(&admin.0), super::super::TOPICS);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_payloads_travel_by_reference_through_the_store() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("big", 1, 1).unwrap();
        let store = Store::memory();
        let b = bus(&cluster.bootstrap_servers(), &store);
        let mut sub = b.subscribe("big", "g").await.unwrap();
        let payload = Bytes::from(vec![7u8; 10_000]);
        b.publish("big", "k", payload.clone()).await.unwrap();
        let d = tokio::time::timeout(Duration::from_secs(30), sub.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(d.payload, payload);
        assert_eq!(store.list("bus/large/").await.unwrap().len(), 1);
        d.ack().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injected_broker_errors_and_leader_moves_lose_and_reorder_nothing() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let cluster = MockCluster::new(3).unwrap();
        cluster.create_topic("moves", 2, 3).unwrap();
        let store = Store::memory();
        let b = bus(&cluster.bootstrap_servers(), &store);
        let mut sub = b.subscribe("moves", "g").await.unwrap();
        // Produce requests fail with retriable errors, and leaders move, while publishing.
        cluster.request_errors(
            RDKafkaApiKey::Produce,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            ],
        );
        for i in 0..40 {
            if i % 10 == 5 {
                for p in 0..2 {
                    cluster
                        .partition_leader("moves", p, Some(1 + (i / 10 + p) % 3))
                        .unwrap();
                }
            }
            for key in ["a", "b"] {
                b.publish("moves", key, Bytes::from(format!("{key}:{i}")))
                    .await
                    .unwrap();
            }
        }
        let mut seen: HashMap<String, Vec<String>> = HashMap::new();
        for _ in 0..80 {
            let d = tokio::time::timeout(Duration::from_secs(30), sub.recv())
                .await
                .expect("a message within 30 s")
                .unwrap()
                .unwrap();
            seen.entry(d.key.clone())
                .or_default()
                .push(String::from_utf8(d.payload.to_vec()).unwrap());
            d.ack().await.unwrap();
        }
        for key in ["a", "b"] {
            let want: Vec<String> = (0..40).map(|i| format!("{key}:{i}")).collect();
            assert_eq!(seen[key], want, "every message of {key}, once, in order");
        }
    }
}
