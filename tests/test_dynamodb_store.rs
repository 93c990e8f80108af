//! The store contract against DynamoDB Local (AWS's own implementation), started by
//! `scripts/standins.sh up` (`make test` does it).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem};
use sqs_claim::store::conformance::{self, EffectProbe};
use sqs_claim::store::dynamodb::DynamoDbAttributes;
use sqs_claim::store::{Claim, ClaimRequest};
use sqs_claim::{ClaimStore, DynamoDbStore, Effects};

fn endpoint() -> String {
    std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

fn client() -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    Client::from_conf(config)
}

async fn fresh_store(name: &str) -> DynamoDbStore {
    let table = format!("{name}-{}", uuid::Uuid::new_v4());
    let store = DynamoDbStore::new(client(), table);
    store.create_table().await.unwrap_or_else(|e| {
        panic!(
            "cannot create a table on DynamoDB Local at {}: {e}\n\
             run `make test`, or `scripts/standins.sh up` first",
            endpoint()
        )
    });
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite() {
    let store = fresh_store("conformance").await;
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    conformance::admin_operations(&fresh_store("admin").await).await;
}

/// The races alone, timed (`-- --nocapture` prints the figures quoted in docs/stores.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_timings() {
    let store = fresh_store("race").await;
    let started = std::time::Instant::now();
    conformance::race(&store, 200, 32).await;
    let race = started.elapsed();
    let started = std::time::Instant::now();
    conformance::takeover_race(&store, 50, 32).await;
    eprintln!(
        "dynamodb-local: race(200 keys x 32 claimers) {race:?}, takeover_race(50 x 32) {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_with_custom_attribute_names() {
    let table = format!("custom-{}", uuid::Uuid::new_v4());
    let attrs = DynamoDbAttributes::new()
        .with_key("pk")
        .with_expiration("ttl")
        .with_token("owner");
    let store = DynamoDbStore::new(client(), table).with_attributes(attrs);
    store.create_table().await.expect("create table");
    conformance::fresh_claim_is_acquired(&store).await;
    conformance::completed_key_is_a_duplicate(&store).await;
    conformance::stale_token_cannot_complete(&store).await;
    conformance::expired_record_counts_as_absent(&store).await;
    conformance::short_ttl_never_ends_a_live_lease(&store).await;
    conformance::expiry_boundary_is_inclusive(&store).await;
    conformance::lease_boundary_is_inclusive(&store).await;
}

/// A claim whose TTL is shorter than its lease writes the TTL attribute at the lease (in whole
/// seconds, rounded up), so DynamoDB's TTL deletion cannot remove the item, and let a second
/// claimer in, while the lease is live.
#[tokio::test]
async fn a_short_ttl_item_is_not_deleted_before_its_lease() {
    let store = fresh_store("short-ttl").await;
    let now = SystemTime::now();
    let lease_until = now + Duration::from_millis(60_500);
    let claim = store
        .claim(ClaimRequest {
            key: "short-ttl",
            now,
            lease_until,
            expires_at: now + Duration::from_secs(1),
            fingerprint: None,
        })
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    let item = store
        .client()
        .get_item()
        .table_name(store.table())
        .key("id", AttributeValue::S("short-ttl".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
        .expect("the claimed item");
    let expiration: i64 = item
        .get("expiration")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .expect("a numeric expiration");
    let lease_ms = sqs_claim::store::epoch_millis(lease_until);
    assert_eq!(
        expiration,
        lease_ms.div_euclid(1000) + i64::from(lease_ms.rem_euclid(1000) != 0),
        "the TTL attribute must be the lease's end rounded up to a second, not the 1 s TTL asked for"
    );
}

#[tokio::test]
async fn create_table_is_idempotent_and_enables_ttl() {
    let store = fresh_store("init").await;
    store
        .create_table()
        .await
        .expect("second create_table is a no-op");
    let ttl = store
        .client()
        .describe_time_to_live()
        .table_name(store.table())
        .send()
        .await
        .expect("describe ttl");
    let d = ttl.time_to_live_description().expect("ttl description");
    assert_eq!(d.attribute_name(), Some("expiration"));
}

/// Effects are puts into a side table; a rejected effect is a condition check on an item that
/// does not exist.
struct Probe {
    client: Client,
    table: String,
}

impl Probe {
    fn key(marker: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("id".to_owned(), AttributeValue::S(marker.to_owned()))])
    }
}

impl EffectProbe<DynamoDbStore> for Probe {
    fn write(&self, marker: &str) -> TransactWriteItem {
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(Self::key(marker)))
                    .build()
                    .expect("put"),
            )
            .build()
    }

    fn rejected(&self, marker: &str) -> TransactWriteItem {
        TransactWriteItem::builder()
            .condition_check(
                ConditionCheck::builder()
                    .table_name(&self.table)
                    .set_key(Some(Self::key(marker)))
                    .condition_expression("attribute_exists(id)")
                    .build()
                    .expect("condition check"),
            )
            .build()
    }

    async fn applied(&self, marker: &str) -> bool {
        self.client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(marker)))
            .consistent_read(true)
            .send()
            .await
            .expect("get item")
            .item()
            .is_some()
    }
}

#[tokio::test]
async fn atomic_effects_in_one_transaction() {
    let store = fresh_store("effects").await;
    let side = fresh_store("effects-side").await;
    let probe = Probe {
        client: client(),
        table: side.table().to_owned(),
    };
    conformance::atomic_effects(&store, &probe).await;
    conformance::one_shot_effects(&store, &probe).await;
}

#[tokio::test]
async fn missing_table_is_rejected_not_unavailable() {
    let store = DynamoDbStore::new(client(), format!("no-such-table-{}", uuid::Uuid::new_v4()));
    let now = std::time::SystemTime::now();
    let err = store
        .claim(sqs_claim::store::ClaimRequest {
            key: "k",
            now,
            lease_until: now,
            expires_at: now,
            fingerprint: None,
        })
        .await
        .expect_err("claim on a missing table must fail");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreRejected, "{err}");
    assert!(err.to_string().contains("ResourceNotFound"), "{err}");
}

#[tokio::test]
async fn unreachable_endpoint_is_unavailable() {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url("http://127.0.0.1:1")
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    let store = DynamoDbStore::new(Client::from_conf(config), "t");
    let now = std::time::SystemTime::now();
    let err = store
        .claim(sqs_claim::store::ClaimRequest {
            key: "k",
            now,
            lease_until: now,
            expires_at: now,
            fingerprint: None,
        })
        .await
        .expect_err("claim on a closed port must fail");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreUnavailable, "{err}");
}

/// Turns the answer of the first request it sees into an HTTP 500, after DynamoDB has done the
/// work: what a lost answer looks like to the SDK, which then retries the request. The flag is
/// shared with the test, to see that it fired.
#[derive(Debug)]
struct LoseFirstAnswer(Arc<AtomicBool>);

impl aws_sdk_dynamodb::config::Intercept for LoseFirstAnswer {
    fn name(&self) -> &'static str {
        "LoseFirstAnswer"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if self.0.swap(false, Ordering::SeqCst) {
            *context.response_mut().status_mut() = 500.try_into()?;
        }
        Ok(())
    }
}

/// The SDK retries a claim whose answer was lost; the retry is refused by the record the first
/// attempt wrote, with this claim's own token. That is our claim, not "held elsewhere" (which
/// would fail the message until the lease lapsed, and stall a FIFO group).
#[tokio::test]
async fn a_claim_retried_by_the_sdk_after_a_lost_answer_is_acquired() {
    let table = fresh_store("sdk-retry").await.table().to_owned();
    let armed = Arc::new(AtomicBool::new(true));
    let config = client()
        .config()
        .to_builder()
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .interceptor(LoseFirstAnswer(Arc::clone(&armed)))
        .build();
    let store = DynamoDbStore::new(Client::from_conf(config), table);
    let now = SystemTime::now();
    let claim = store
        .claim(ClaimRequest {
            key: "ns#retried",
            now,
            lease_until: now + Duration::from_secs(60),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .expect("claim");
    assert!(
        !armed.load(Ordering::SeqCst),
        "the first answer was lost, so the SDK retried"
    );
    let Claim::Acquired(token) = claim else {
        panic!("our own retried claim must be acquired, got {claim:?}");
    };
    store
        .complete(
            "ns#retried",
            &token,
            now + Duration::from_secs(3600),
            Effects::none(),
        )
        .await
        .expect("the token is ours: it completes");
}

// ------------------------------------------------------------------ bounded client (issue 8)

#[path = "support/silent.rs"]
mod silent;

use sqs_claim::DynamoDbSettings;
use sqs_claim::aws_config;

/// A store on `endpoint` built the way `from_env` builds it: the crate's client settings.
async fn bounded_store(endpoint: &str, settings: DynamoDbSettings) -> DynamoDbStore {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .endpoint_url(endpoint)
        .load()
        .await;
    DynamoDbStore::from_sdk_config(&config, "silent-table", settings)
}

fn some_claim(now: SystemTime) -> ClaimRequest<'static> {
    ClaimRequest {
        key: "ns#silent",
        now,
        lease_until: now + Duration::from_secs(60),
        expires_at: now + Duration::from_secs(3600),
        fingerprint: None,
    }
}

/// A port that accepts the connection and never answers (a partition, a security group that
/// drops the replies): the default settings give up within the operation timeout (4 s) with
/// `StoreUnavailable`, saying the request was sent and may have been applied.
#[tokio::test]
async fn a_silent_endpoint_is_unavailable_within_the_operation_timeout() {
    let endpoint = silent::silent().await;
    let settings = DynamoDbSettings::default();
    let store = bounded_store(&endpoint.http_url(), settings).await;
    assert!(
        store.retries_internally(),
        "the SDK retries; the processor must not"
    );
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        store.claim(some_claim(SystemTime::now())),
    )
    .await
    .expect("the claim must not hang on a silent endpoint");
    let elapsed = started.elapsed();
    let err = result.expect_err("no answer, no claim");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreUnavailable, "{err}");
    assert!(
        elapsed < settings.operation_timeout + Duration::from_secs(2),
        "bounded by the operation timeout ({:?}), took {elapsed:?}",
        settings.operation_timeout
    );
    let text = err.to_string();
    assert!(
        text.contains("no answer") && text.contains("may or may not have been applied"),
        "{text}"
    );
    assert!(!text.contains("could not reach"), "it was reached: {text}");
}

/// The three stages are told apart: refused (nothing sent), closed after the request went
/// out (maybe applied), silent (maybe applied).
#[tokio::test]
async fn errors_say_how_far_the_request_got() {
    let fast = DynamoDbSettings::default()
        .with_attempt_timeout(Duration::from_millis(300))
        .with_operation_timeout(Duration::from_secs(1))
        .with_max_attempts(2);
    let now = SystemTime::now();

    // A closed port: the connection is refused.
    let refused = bounded_store("http://127.0.0.1:1", fast).await;
    let err = refused.claim(some_claim(now)).await.expect_err("refused");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreUnavailable, "{err}");
    assert!(
        err.to_string().contains("could not reach") && err.to_string().contains("nothing was sent"),
        "{err}"
    );

    // Accepted, the request read, then the connection closed without an answer.
    let closing = silent::closing().await;
    let store = bounded_store(&closing.http_url(), fast).await;
    let err = store.claim(some_claim(now)).await.expect_err("closed");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreUnavailable, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("sent, but no answer") && !text.contains("could not reach"),
        "{text}"
    );
}
