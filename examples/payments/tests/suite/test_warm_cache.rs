//! `SQS_CLAIM_WARM_CACHE`: the example consumer with an in-process cache of completed keys in
//! front of its store. A batch delivered again to the same warm consumer is all duplicates and
//! costs the store nothing; without the setting every duplicate asks the store.

use payments::config::Settings;
use payments::{Consumer, MemoryLedger};
use sqs_claim::Outcome;
use sqs_claim::store::{BoxStore, CachedStore};
use sqs_claim_testkit::sqs::{lambda_event, record};

fn settings(pairs: &[(&str, &str)]) -> Settings {
    Settings::from_lookup(|name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    })
    .expect("valid settings")
}

fn batch() -> Vec<sqs_claim_testkit::sqs::Record> {
    (0..20)
        .map(|i| {
            let body = serde_json::json!({
                "order_id": format!("ord-{i}"),
                "account": "acct-alice",
                "amount_cents": 100,
            });
            record(&format!("m-{i}"), &body.to_string())
        })
        .collect()
}

/// The cache in front of the consumer's store, whichever mode it runs in.
fn cache(consumer: &Consumer) -> Option<&CachedStore<BoxStore>> {
    consumer.store().downcast_ref()
}

/// The cache's hits.
fn hits(consumer: &Consumer) -> u64 {
    cache(consumer).map_or(0, CachedStore::hits)
}

#[tokio::test]
async fn a_warm_duplicate_batch_is_answered_from_the_cache() {
    for mode in [&[][..], &[("SQS_CLAIM_STORE_UNAVAILABLE", "fail-open")][..]] {
        let mut pairs = vec![("SQS_CLAIM_WARM_CACHE", "1000")];
        pairs.extend_from_slice(mode);
        let consumer = payments::build(MemoryLedger::new(), &settings(&pairs))
            .await
            .expect("consumer");
        assert!(cache(&consumer).is_some(), "{consumer:?}");
        let first = consumer.process(lambda_event(&batch())).await.unwrap();
        assert_eq!(first.counts().processed, 20);
        assert_eq!(hits(&consumer), 0, "nothing was completed before");
        let again = consumer.process(lambda_event(&batch())).await.unwrap();
        assert!(
            again
                .items()
                .iter()
                .all(|i| i.outcome == Outcome::Duplicate),
            "{:?}",
            again.counts()
        );
        assert_eq!(
            hits(&consumer),
            20,
            "every duplicate answered from the cache"
        );
    }
}

#[tokio::test]
async fn without_the_setting_there_is_no_cache() {
    let consumer = payments::build(MemoryLedger::new(), &settings(&[]))
        .await
        .expect("consumer");
    assert!(cache(&consumer).is_none());
    let zero = payments::build(
        MemoryLedger::new(),
        &settings(&[("SQS_CLAIM_WARM_CACHE", "0")]),
    )
    .await
    .expect("consumer");
    assert!(cache(&zero).is_none(), "0 turns it off");
}
