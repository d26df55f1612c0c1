//! The behaviour every bus must have (tests only). Each implementation's tests call [`run`]
//! with a factory for fresh buses; the Kafka bus runs the same functions.

use bytes::Bytes;

use super::{Bus, Delivery, Subscription};
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

async fn recv(sub: &mut Box<dyn Subscription>) -> Delivery {
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
