//! Which bus a URL names, and the configured topic names over it.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::inproc::InProcBus;
use super::seam::{Bus, Subscription, Topic, check_name};
use super::spool::SpoolBus;
use crate::Error;
use crate::store::Store;

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

#[async_trait]
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
        Some("kafka") => Ok(Arc::new(super::kafka::from_url(url, store)?)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
