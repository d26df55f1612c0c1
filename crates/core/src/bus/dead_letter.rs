//! Setting a message aside: what a worker does with a message it can never process (it cannot
//! be decoded, or it failed too many times). The chunk and embed workers share it.

use super::seam::{Bus, Delivery, Topic};
use crate::records::{DEAD_LETTER_VERSION, DeadLetter};

/// Publishes `d` on the dead-letter topic — the topic it came `from`, its key, `error` and its
/// attempts, its payload as text — and then acknowledges it. Returns whether it was set aside:
/// when the publish fails, the message is given back instead, to come again.
pub async fn dead_letter(bus: &dyn Bus, from: Topic, d: Delivery, error: String) -> bool {
    tracing::warn!(topic = from.name(), key = %d.key, %error, attempts = d.attempt, "dead-lettering a message");
    let letter = DeadLetter {
        schema_version: DEAD_LETTER_VERSION,
        topic: from.name().into(),
        key: d.key.clone(),
        error,
        attempts: d.attempt,
        payload: String::from_utf8_lossy(&d.payload).into_owned(),
    };
    match bus
        .publish(Topic::DeadLetters.name(), &d.key, letter.to_json())
        .await
    {
        Ok(()) => {
            if let Err(e) = d.ack().await {
                tracing::warn!(error = %e, "a dead-lettered message was not acknowledged; it comes again");
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "dead-letter publish failed; the message goes back");
            d.nack();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::bus::InProcBus;

    #[tokio::test]
    async fn a_dead_letter_carries_the_message_and_the_original_is_acknowledged() {
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(8));
        let mut letters = bus.subscribe(Topic::DeadLetters.name(), "t").await.unwrap();
        let mut files = bus.subscribe(Topic::Files.name(), "w").await.unwrap();
        bus.publish(Topic::Files.name(), "repo", Bytes::from_static(b"\xffbad"))
            .await
            .unwrap();
        bus.close(Topic::Files.name()).await.unwrap();
        let d = files.recv().await.unwrap().unwrap();
        assert!(dead_letter(bus.as_ref(), Topic::Files, d, "undecodable".into()).await);
        let l = letters.recv().await.unwrap().unwrap();
        let letter = DeadLetter::from_json(&l.payload).unwrap();
        assert_eq!(
            (
                letter.topic.as_str(),
                letter.key.as_str(),
                letter.error.as_str()
            ),
            ("files", "repo", "undecodable")
        );
        assert_eq!(
            (letter.attempts, letter.payload.as_str()),
            (1, "\u{fffd}bad")
        );
        assert!(
            files.recv().await.unwrap().is_none(),
            "acknowledged: the closed topic ends instead of redelivering"
        );
    }
}
