//! The spool bus (`spool://`): messages as objects in the store, durable before `publish`
//! returns.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;

use super::seam::{Bus, Delivery, Settle, Subscription, check_name, lock};
use crate::Error;
use crate::store::{Store, keys};

/// A durable bus over the store. See the [module docs](super).
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
                return Ok(Some(Delivery::new(
                    key,
                    payload,
                    attempt,
                    Box::new(SpoolSettle {
                        store: self.store.clone(),
                        root: self.root.clone(),
                        group: self.group.clone(),
                        name,
                        attempt,
                        given_back: self.given_back.clone(),
                        inflight: self.inflight.clone(),
                    }),
                )));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::suite;

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
    async fn attempts_survive_a_restart_on_the_spool_bus() {
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
}
