//! The in-process bus (`inproc://`): bounded, with backpressure, and redelivery of what a
//! dropped subscription held.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use super::seam::{Bus, Delivery, Settle, Subscription, lock};
use crate::Error;

/// Bounded in-process bus. See the [module docs](super).
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
                    return Ok(Some(Delivery::new(
                        key,
                        payload,
                        attempt,
                        Box::new(InProcSettle {
                            offset: off,
                            topic: self.topic.clone(),
                            group: self.group.clone(),
                            state: self.state.clone(),
                            notify: self.notify.clone(),
                            mine: self.mine.clone(),
                        }),
                    )));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::suite;

    #[tokio::test]
    async fn in_process_bus_passes_the_suite() {
        suite::run(
            || async { Arc::new(InProcBus::new(4)) as Arc<dyn Bus> },
            suite::Capabilities { bounded: Some(4) },
        )
        .await;
    }

    #[tokio::test]
    async fn attempts_survive_a_restart_on_the_in_process_bus() {
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(4));
        suite::attempts_survive_a_restart(bus.clone(), bus).await;
    }
}
