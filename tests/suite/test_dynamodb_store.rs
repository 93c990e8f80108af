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
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::dynamodb::DynamoDbAttributes;
use sqs_claim::store::{Claim, ClaimRequest};
use sqs_claim::{ClaimStore, DynamoDbStore};
use sqs_claim_testkit::conformance::{self, EffectProbe};

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
    store.init().await.unwrap_or_else(|e| {
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

/// `check_ready` on a table nobody created names the `sqs-claim init` that creates it (with
/// the key layout's flags when it is not the default), then `init` is idempotent and makes it
/// pass; a store of another layout on that table is refused, naming both layouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_then_check_ready() {
    use sqs_claim::store::dynamodb::DynamoDbKeySchema;
    let table = format!("admin-init-{}", uuid::Uuid::new_v4());
    let store = DynamoDbStore::new(client(), &table);
    let err = store.check_ready().await.expect_err("no table yet");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreRejected, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "DynamoDB table {table} does not exist: create the tables with \
             `sqs-claim init --store dynamodb:{table}`, or in code with StoreAdmin::init() \
             on this store"
        )
    );
    conformance::run_admin(&store).await;

    let table = format!("admin-init-single-{}", uuid::Uuid::new_v4());
    let single = DynamoDbStore::new(client(), &table)
        .with_key_schema(DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM"))
        .expect("a valid layout");
    let err = single.check_ready().await.expect_err("no table yet");
    assert!(
        err.to_string().ends_with(&format!(
            "`sqs-claim init --store dynamodb:{table} --partition-key pk=CLAIM#{{key}} \
             --sort-key sk=CLAIM`, or in code with StoreAdmin::init() on this store"
        )),
        "{err}"
    );
    conformance::run_admin(&single).await;
    let default = DynamoDbStore::new(client(), &table);
    let err = default
        .check_ready()
        .await
        .expect_err("the default layout on a composite table");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::Config, "{err}");
    for needle in [
        "has the key schema pk (HASH, S) + sk (RANGE, S)",
        "configured for id (HASH, S) (the default layout id={key}",
    ] {
        assert!(err.to_string().contains(needle), "no {needle:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    conformance::run_admin(&fresh_store("admin").await).await;
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
    let mut attrs = DynamoDbAttributes::default();
    attrs.key = "pk".into();
    attrs.expiration = "ttl".into();
    attrs.token = "owner".into();
    let store = DynamoDbStore::new(client(), table).with_attributes(attrs);
    store.init().await.expect("create table");
    conformance::run_all(&store).await;
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
    store.init().await.expect("second create_table is a no-op");
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

/// Effects are puts of business items (into a side table, or into the claims table itself for
/// a single-table layout); a rejected effect is a condition check on an item that does not
/// exist.
struct Probe {
    client: Client,
    table: String,
    /// The business item's partition key name, and its sort key name and value if the table
    /// has one: a marker `m` is the item `{pk: "BIZ#m", sk: value}`.
    partition: String,
    sort: Option<(String, String)>,
}

impl Probe {
    /// Business items in a side table keyed by `id`.
    fn side(table: &str) -> Self {
        Probe {
            client: client(),
            table: table.to_owned(),
            partition: "id".into(),
            sort: None,
        }
    }

    /// Business items in the store's own table, under its key names.
    fn same_table(store: &DynamoDbStore) -> Self {
        let schema = store.key_schema();
        Probe {
            client: client(),
            table: store.table().to_owned(),
            partition: schema.partition_key().name().to_owned(),
            sort: schema
                .sort_key()
                .map(|s| (s.name().to_owned(), "ORDER".to_owned())),
        }
    }

    fn key(&self, marker: &str) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::from([(
            self.partition.clone(),
            AttributeValue::S(format!("BIZ#{marker}")),
        )]);
        if let Some((name, value)) = &self.sort {
            key.insert(name.clone(), AttributeValue::S(value.clone()));
        }
        key
    }
}

impl EffectProbe<DynamoDbStore> for Probe {
    fn write(&self, marker: &str) -> TransactWriteItem {
        let mut item = self.key(marker);
        item.insert("kind".into(), AttributeValue::S("order".into()));
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
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
                    .set_key(Some(self.key(marker)))
                    .condition_expression("attribute_exists(#pk)")
                    .expression_attribute_names("#pk", &self.partition)
                    .build()
                    .expect("condition check"),
            )
            .build()
    }

    async fn applied(&self, marker: &str) -> bool {
        self.client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key(marker)))
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
    let probe = Probe::side(side.table());
    conformance::run_effects(&store, &probe).await;
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
        .complete_with(
            "ns#retried",
            &token,
            Completion::new(now + Duration::from_secs(3600)),
        )
        .await
        .expect("the token is ours: it completes");
}

// ------------------------------------------------------------------ bounded client (issue 8)

use sqs_claim_testkit::silent;

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
        store.capabilities().retries_internally,
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
    let mut fast = DynamoDbSettings::default();
    fast.attempt_timeout = Duration::from_millis(300);
    fast.operation_timeout = Duration::from_secs(1);
    fast.max_attempts = 2;
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

// ------------------------------------------------------------------ stored response (issue 12)

use sqs_claim::ErrorKind;
use sqs_claim::store::dynamodb::DynamoDbKeySchema;
use sqs_claim::store::{Completion, Status, StoredResponse};

/// DynamoDB's item size limit (400 KB, names included).
const MAX_ITEM_BYTES: usize = 409_600;
/// The longest fingerprint the store keeps (the `validation` attribute).
const MAX_FINGERPRINT_BYTES: usize = 1024;

const HOUR: Duration = Duration::from_secs(3600);

/// The item as stored, read with the raw client.
async fn raw_item(store: &DynamoDbStore, key: &str) -> Option<HashMap<String, AttributeValue>> {
    store
        .client()
        .get_item()
        .table_name(store.table())
        .set_key(Some(store.key_schema().item_key(key)))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
}

fn request(key: &str, now: SystemTime) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(30),
        expires_at: now + HOUR,
        fingerprint: None,
    }
}

async fn acquire(store: &DynamoDbStore, req: ClaimRequest<'_>) -> sqs_claim::store::ClaimToken {
    match store.claim(req).await {
        Ok(Claim::Acquired(token)) => token,
        other => panic!("expected Acquired for {:?}, got {other:?}", req.key),
    }
}

/// The response is the `data` attribute (Powertools' name), an S holding the text exactly; an
/// empty response is an empty S (DynamoDB takes empty strings outside the key), and a
/// completion without a response writes no attribute at all.
#[tokio::test]
async fn the_response_is_the_data_attribute_as_written() {
    let store = fresh_store("data-attr").await;
    let now = SystemTime::now();
    for (key, response) in [
        ("data#json", Some("{\"ok\": true,  \"n\":1.50}")),
        ("data#empty", Some("")),
        ("data#none", None),
    ] {
        let token = acquire(&store, request(key, now)).await;
        let mut completion = Completion::new(now + HOUR);
        if let Some(r) = response {
            completion = completion.with_response(StoredResponse::new(r));
        }
        store
            .complete_with(key, &token, completion)
            .await
            .expect("complete");
        let item = raw_item(&store, key).await.expect("the completed item");
        assert_eq!(
            item.get("data")
                .map(|v| v.as_s().expect("data is an S").as_str()),
            response,
            "{key}: the data attribute"
        );
        let seen = store.inspect(key).await.expect("inspect").expect("record");
        assert_eq!(
            seen.record.response.as_ref().map(StoredResponse::as_str),
            response,
            "{key}: inspect returns the stored response"
        );
    }
}

/// `with_data` renames the attribute; a claim refused on a completed key returns the response
/// from the old item (`ALL_OLD`), and so does a one-shot write cancelled on it.
#[tokio::test]
async fn a_renamed_data_attribute_is_written_and_read_back() {
    let table = format!("data-renamed-{}", uuid::Uuid::new_v4());
    let store = DynamoDbStore::new(client(), table).with_attributes(attributes_with_data("result"));
    store.init().await.expect("create table");
    let now = SystemTime::now();
    let token = acquire(&store, request("renamed", now)).await;
    store
        .complete_with(
            "renamed",
            &token,
            Completion::new(now + HOUR).with_response(StoredResponse::new("\"paid\"")),
        )
        .await
        .expect("complete");
    let item = raw_item(&store, "renamed").await.expect("item");
    assert!(
        !item.contains_key("data"),
        "the default name is not written"
    );
    assert_eq!(
        item.get("result")
            .and_then(|v| v.as_s().ok())
            .map(String::as_str),
        Some("\"paid\"")
    );
    match store.claim(request("renamed", now)).await {
        Ok(Claim::Completed { record: r, .. }) => assert_eq!(
            r.response.as_ref().map(StoredResponse::as_str),
            Some("\"paid\"")
        ),
        other => panic!("expected Completed, got {other:?}"),
    }
    let side = fresh_store("data-renamed-side").await;
    let probe = Probe::side(side.table());
    match store
        .claim_completed(
            request("renamed", now),
            vec![probe.write("renamed-effect")].into(),
        )
        .await
    {
        Ok(sqs_claim::store::OneShotWrite::Completed { record: r, .. }) => assert_eq!(
            r.response.as_ref().map(StoredResponse::as_str),
            Some("\"paid\""),
            "a cancelled one-shot write reads the response from the old item"
        ),
        other => panic!("expected Completed, got {other:?}"),
    }
    assert!(!probe.applied("renamed-effect").await);
}

/// The figure documented on `max_response_bytes` for the default names and layout.
#[test]
fn the_default_response_limit_is_406_375_bytes() {
    let store = DynamoDbStore::new(client(), "t");
    assert_eq!(store.capabilities().max_response_bytes, 406_375);
    assert_eq!(
        MAX_ITEM_BYTES - store.capabilities().max_response_bytes,
        3_225
    );
    // Longer names leave less room, byte for byte.
    let renamed =
        DynamoDbStore::new(client(), "t").with_attributes(attributes_with_data("response_text"));
    assert_eq!(renamed.capabilities().max_response_bytes, 406_375 - 9);
}

/// The worst record the store writes, for each layout: every key attribute at its longest
/// (the key unhashed at exactly the limit), a fingerprint at its cap, long attribute names,
/// and a response of exactly `max_response_bytes`: DynamoDB Local stores it, and reads it back
/// whole, with effects (a transaction) and without.
#[tokio::test]
async fn the_largest_response_fits_the_worst_record_of_every_layout() {
    let mut attrs = DynamoDbAttributes::default();
    attrs.expiration = "expiration_attribute_with_a_long_name".into();
    attrs.lease = "lease_attribute_with_a_long_name".into();
    attrs.data = "response_attribute_with_a_long_name".into();
    let layouts: [(Option<DynamoDbKeySchema>, usize); 3] = [
        (None, 2048),
        (
            Some(DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM")),
            2048 - "CLAIM#".len(),
        ),
        (
            Some(
                DynamoDbKeySchema::partition("pk", "idempotency#function").with_sort("sk", "{key}"),
            ),
            1024,
        ),
    ];
    let side = fresh_store("worst-side").await;
    let probe = Probe::side(side.table());
    for (schema, key_len) in layouts {
        let table = format!("worst-{}", uuid::Uuid::new_v4());
        let mut store = DynamoDbStore::new(client(), table).with_attributes(attrs.clone());
        if let Some(schema) = schema {
            store = store.with_key_schema(schema).expect("valid schema");
        }
        store.init().await.expect("create table");
        let limit = store.capabilities().max_response_bytes;
        let now = SystemTime::now();
        let fingerprint = "f".repeat(MAX_FINGERPRINT_BYTES);
        for with_effect in [false, true] {
            let key = format!("{}#{}", u8::from(with_effect), "k".repeat(key_len - 2));
            assert_eq!(key.len(), key_len);
            let token = acquire(
                &store,
                ClaimRequest {
                    fingerprint: Some(&fingerprint),
                    ..request(&key, now)
                },
            )
            .await;
            // Multi-byte text: the limit is in bytes.
            let response = format!(
                "{}{}",
                "é".repeat(limit / 4),
                "r".repeat(limit - limit / 4 * 2)
            );
            assert_eq!(response.len(), limit);
            let effects = if with_effect {
                vec![probe.write(&format!("worst-{}", store.table()))].into()
            } else {
                sqs_claim::Effects::none()
            };
            store
                .complete_with(
                    &key,
                    &token,
                    Completion::new(now + HOUR)
                        .with_response(StoredResponse::new(response.clone()))
                        .with_effects(effects),
                )
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "{:?}: a response of {limit} bytes must fit: {e:#}",
                        store.key_schema()
                    )
                });
            let seen = store.inspect(&key).await.expect("inspect").expect("record");
            assert!(
                seen.record.response.as_ref().map(StoredResponse::as_str)
                    == Some(response.as_str()),
                "the largest response comes back whole"
            );
            assert_eq!(
                seen.record.fingerprint.as_deref(),
                Some(fingerprint.as_str())
            );
        }
    }
}

/// One byte over the limit is refused before anything is sent: the claim stays in progress
/// (the owner can still release it) and no effect is applied.
#[tokio::test]
async fn one_byte_over_the_limit_is_refused_before_sending() {
    let store = fresh_store("over-limit").await;
    let side = fresh_store("over-limit-side").await;
    let probe = Probe::side(side.table());
    let now = SystemTime::now();
    let token = acquire(&store, request("over", now)).await;
    let err = store
        .complete_with(
            "over",
            &token,
            Completion::new(now + HOUR)
                .with_response(StoredResponse::new(
                    "x".repeat(store.capabilities().max_response_bytes + 1),
                ))
                .with_effects(vec![probe.write("over")].into()),
        )
        .await
        .expect_err("over the limit");
    assert_eq!(err.kind(), ErrorKind::ResponseTooLarge, "{err}");
    assert!(err.to_string().contains("406375"), "names the limit: {err}");
    assert!(!probe.applied("over").await);
    let seen = store
        .inspect("over")
        .await
        .expect("inspect")
        .expect("record");
    assert_eq!(seen.record.status, Status::InProgress);
    store.release("over", &token).await.expect("release");
}

/// An item that already holds more than the store's own attributes (here a 300 KB attribute
/// written by something else) can pass 400 KB with a response under the limit: DynamoDB's own
/// "Item size has exceeded the maximum allowed size" comes back as `ResponseTooLarge`, with
/// and without effects, and nothing is committed.
#[tokio::test]
async fn dynamodb_s_item_size_refusal_is_response_too_large() {
    let store = fresh_store("item-size").await;
    let side = fresh_store("item-size-side").await;
    let probe = Probe::side(side.table());
    let now = SystemTime::now();
    for with_effect in [false, true] {
        let key = format!("item-size#{with_effect}");
        let token = acquire(&store, request(&key, now)).await;
        store
            .client()
            .update_item()
            .table_name(store.table())
            .set_key(Some(store.key_schema().item_key(&key)))
            .update_expression("SET extra = :extra")
            .expression_attribute_values(":extra", AttributeValue::S("e".repeat(300_000)))
            .send()
            .await
            .expect("add a foreign attribute");
        let effects = if with_effect {
            vec![probe.write(&key)].into()
        } else {
            sqs_claim::Effects::none()
        };
        let err = store
            .complete_with(
                &key,
                &token,
                Completion::new(now + HOUR)
                    .with_response(StoredResponse::new("r".repeat(200_000)))
                    .with_effects(effects),
            )
            .await
            .expect_err("the item would pass 400 KB");
        assert_eq!(err.kind(), ErrorKind::ResponseTooLarge, "{err:#}");
        assert!(err.to_string().contains("item limit"), "{err}");
        assert!(!probe.applied(&key).await, "nothing committed");
        let seen = store.inspect(&key).await.expect("inspect").expect("record");
        assert_eq!(seen.record.status, Status::InProgress, "still in progress");
        store.release(&key, &token).await.expect("release");
    }
}

/// A fingerprint past the cap the size budget assumes is refused before anything is sent.
#[tokio::test]
async fn a_fingerprint_past_its_cap_is_refused() {
    let store = fresh_store("fp-cap").await;
    let now = SystemTime::now();
    let long = "f".repeat(MAX_FINGERPRINT_BYTES + 1);
    let req = ClaimRequest {
        fingerprint: Some(&long),
        ..request("fp-cap", now)
    };
    let err = store.claim(req).await.expect_err("claim");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    let err = store
        .claim_completed(req, sqs_claim::Effects::none())
        .await
        .expect_err("one-shot");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(
        raw_item(&store, "fp-cap").await.is_none(),
        "nothing written"
    );
}

// ------------------------------------------------------------------ single-table (issue 12)

/// `pk = CLAIM#{key}, sk = CLAIM`: one partition per claim, beside business items.
fn single_table() -> DynamoDbKeySchema {
    DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM")
}

/// Powertools' sort-key layout: one fixed partition, the key in the sort key.
fn sorted_under_one_partition() -> DynamoDbKeySchema {
    DynamoDbKeySchema::partition("id", "idempotency#payments").with_sort("sort_key", "{key}")
}

async fn fresh_store_with(name: &str, schema: DynamoDbKeySchema) -> DynamoDbStore {
    let table = format!("{name}-{}", uuid::Uuid::new_v4());
    let store = DynamoDbStore::new(client(), table)
        .with_key_schema(schema)
        .expect("a valid key schema");
    store.init().await.expect("create table");
    store
}

async fn whole_contract(store: &DynamoDbStore) {
    conformance::run_all(store).await;
    conformance::run_admin(store).await;
    // Effects write business items into the claims table itself.
    let probe = Probe::same_table(store);
    conformance::run_effects(store, &probe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_single_table_claim_partition() {
    whole_contract(&fresh_store_with("single", single_table()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_single_table_fixed_partition_key_in_sort() {
    whole_contract(&fresh_store_with("sorted", sorted_under_one_partition()).await).await;
}

#[tokio::test]
async fn create_table_makes_the_composite_key_and_ttl() {
    let store = fresh_store_with("composite", single_table()).await;
    let described = store
        .client()
        .describe_table()
        .table_name(store.table())
        .send()
        .await
        .expect("describe");
    let keys: Vec<(String, String)> = described
        .table()
        .expect("table")
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())]
    );
    store.init().await.expect("idempotent");
    let ttl = store
        .client()
        .describe_time_to_live()
        .table_name(store.table())
        .send()
        .await
        .expect("ttl");
    assert_eq!(
        ttl.time_to_live_description()
            .and_then(|d| d.attribute_name()),
        Some("expiration")
    );
}

/// The item keys the templates make: the key in place of `{key}`, hashed when it would pass the
/// attribute's limit (2048 for a partition key, 1024 for a sort key, fixed text included).
#[test]
fn templates_make_the_item_key_and_hash_what_would_not_fit() {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let store = DynamoDbStore::new(client(), "t")
        .with_key_schema(single_table())
        .expect("valid");
    assert_eq!(
        store.key_schema().item_key("ns#order-1"),
        HashMap::from([
            ("pk".into(), s("CLAIM#ns#order-1")),
            ("sk".into(), s("CLAIM"))
        ])
    );
    let fits = "k".repeat(2048 - 6);
    assert_eq!(
        store.key_schema().item_key(&fits)["pk"],
        s(&format!("CLAIM#{fits}"))
    );
    let over = "k".repeat(2048 - 5);
    let hashed = format!("CLAIM#sha256:{}", sqs_claim::sha256_hex(over.as_bytes()));
    assert_eq!(store.key_schema().item_key(&over)["pk"], s(&hashed));

    let sorted = DynamoDbStore::new(client(), "t")
        .with_key_schema(sorted_under_one_partition())
        .expect("valid");
    let fits = "k".repeat(1024);
    assert_eq!(
        sorted.key_schema().item_key(&fits),
        HashMap::from([
            ("id".into(), s("idempotency#payments")),
            ("sort_key".into(), s(&fits))
        ])
    );
    let over = "k".repeat(1025);
    assert_eq!(
        sorted.key_schema().item_key(&over)["sort_key"],
        s(&format!(
            "sha256:{}",
            sqs_claim::sha256_hex(over.as_bytes())
        ))
    );

    // The default layout is the single `id` key, as before: the key, hashed past 2048 bytes.
    let stored = |key: &str| match key.len() {
        0..=2048 => key.to_owned(),
        _ => format!("sha256:{}", sqs_claim::sha256_hex(key.as_bytes())),
    };
    let default = DynamoDbStore::new(client(), "t");
    for key in ["ns#1".to_owned(), "k".repeat(2048), "k".repeat(2049)] {
        assert_eq!(
            default.key_schema().item_key(&key),
            HashMap::from([("id".into(), s(&stored(&key)))])
        );
    }
}

#[test]
fn key_templates_are_validated() {
    let config = |schema: DynamoDbKeySchema| {
        let err = DynamoDbStore::new(client(), "t")
            .with_key_schema(schema)
            .expect_err("invalid schema");
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        err.to_string()
    };
    let text = config(DynamoDbKeySchema::partition("pk", "CLAIM").with_sort("sk", "CLAIM"));
    assert!(
        text.contains("{key}") && text.contains("same item"),
        "{text}"
    );
    assert!(config(DynamoDbKeySchema::partition("pk", "CLAIM")).contains("same item"));
    let text = config(DynamoDbKeySchema::partition("pk", "{key}#{key}"));
    assert!(text.contains("at most once"), "{text}");
    let text = config(DynamoDbKeySchema::partition("pk", "CLAIM#{id}").with_sort("sk", "{key}"));
    assert!(text.contains("placeholder"), "{text}");
    let text = config(DynamoDbKeySchema::partition("pk", ""));
    assert!(text.contains("empty"), "{text}");
    let text = config(DynamoDbKeySchema::partition("", "{key}"));
    assert!(text.contains("name is empty"), "{text}");
    let text = config(DynamoDbKeySchema::partition("pk", "CLAIM").with_sort("pk", "{key}"));
    assert!(text.contains("both named"), "{text}");
    // No room left for a hashed key (71 bytes) beside the fixed text.
    let prefix = "p".repeat(1024 - 70);
    let text = config(
        DynamoDbKeySchema::partition("pk", "CLAIM").with_sort("sk", format!("{prefix}{{key}}")),
    );
    assert!(text.contains("1024-byte limit"), "{text}");
    let fine = "p".repeat(1024 - 71);
    DynamoDbStore::new(client(), "t")
        .with_key_schema(
            DynamoDbKeySchema::partition("pk", "CLAIM").with_sort("sk", format!("{fine}{{key}}")),
        )
        .expect("room for exactly a hashed key");
    let text =
        config(DynamoDbKeySchema::partition("pk", "p".repeat(2049)).with_sort("sk", "{key}"));
    assert!(text.contains("2048-byte limit"), "{text}");
    // A key attribute named like one of the record's attributes would overwrite it.
    let text = config(DynamoDbKeySchema::partition("pk", "{key}").with_sort("status", "CLAIM"));
    assert!(text.contains("status"), "{text}");
    let text = config(DynamoDbKeySchema::partition("data", "{key}"));
    assert!(text.contains("data"), "{text}");
}

/// Claims share the table with business items: an order under the same partition key as a
/// claim (another sort key), orders written by the claims' own effects, and an item that looks
/// like a claim's but is not one. Claims, `inspect`, `release`, `force_release` and `forget`
/// never touch or misread any of them.
#[tokio::test]
async fn claims_share_a_table_with_business_items() {
    let store = fresh_store_with("shared", single_table()).await;
    let client = store.client().clone();
    let table = store.table().to_owned();
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let now = SystemTime::now();
    let key = "orders#o-1";

    // A business item beside the claim: the same partition key, another sort key.
    let beside = HashMap::from([
        ("pk".to_owned(), s(&format!("CLAIM#{key}"))),
        ("sk".to_owned(), s("ORDER")),
        ("status".to_owned(), s("INPROGRESS")),
        ("claim_token".to_owned(), s("not-a-claim")),
        ("amount".to_owned(), AttributeValue::N("42".into())),
    ]);
    // An item of another type whose partition key is a claim key without the template.
    let other = HashMap::from([
        ("pk".to_owned(), s(key)),
        ("sk".to_owned(), s("CLAIM")),
        ("status".to_owned(), s("COMPLETED")),
    ]);
    for item in [&beside, &other] {
        client
            .put_item()
            .table_name(&table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .expect("put business item");
    }
    let get = |pk: String, sk: &'static str| {
        let (client, table) = (client.clone(), table.clone());
        async move {
            client
                .get_item()
                .table_name(&table)
                .key("pk", AttributeValue::S(pk))
                .key("sk", AttributeValue::S(sk.to_owned()))
                .consistent_read(true)
                .send()
                .await
                .expect("get")
                .item
        }
    };
    let untouched = || async {
        assert_eq!(
            get(format!("CLAIM#{key}"), "ORDER").await.as_ref(),
            Some(&beside)
        );
        assert_eq!(get(key.to_owned(), "CLAIM").await.as_ref(), Some(&other));
    };

    // Nothing claimed yet: the business items are not claims.
    assert_eq!(store.inspect(key).await.expect("inspect"), None);
    assert!(!store.force_release(key).await.expect("force_release"));
    assert!(!store.forget(key).await.expect("forget"));

    // Claim, release, claim again, complete with an effect that writes an order into the same
    // table: only the claim's own item changes.
    let token = acquire(&store, request(key, now)).await;
    untouched().await;
    store.release(key, &token).await.expect("release");
    untouched().await;
    let token = acquire(&store, request(key, now)).await;
    let probe = Probe::same_table(&store);
    store
        .complete_with(
            key,
            &token,
            Completion::new(now + HOUR)
                .with_response(StoredResponse::new("\"done\""))
                .with_effects(vec![probe.write("o-1")].into()),
        )
        .await
        .expect("complete with a business write");
    assert!(probe.applied("o-1").await);
    untouched().await;
    let claim_item = get(format!("CLAIM#{key}"), "CLAIM")
        .await
        .expect("the claim's item");
    assert_eq!(claim_item.get("data"), Some(&s("\"done\"")));
    let seen = store.inspect(key).await.expect("inspect").expect("record");
    assert_eq!(seen.record.status, Status::Completed);
    assert_eq!(seen.token, Some(token));
    match store.claim(request(key, now)).await {
        Ok(Claim::Completed { record: r, .. }) => assert_eq!(
            r.response.as_ref().map(StoredResponse::as_str),
            Some("\"done\"")
        ),
        other => panic!("a duplicate, got {other:?}"),
    }
    assert!(!store.force_release(key).await.expect("force_release"));
    assert!(store.forget(key).await.expect("forget"));
    assert!(get(format!("CLAIM#{key}"), "CLAIM").await.is_none());
    untouched().await;
    assert!(
        probe.applied("o-1").await,
        "forget leaves the business write"
    );
    // The business item at `BIZ#o-1` is not a claim of key `o-1`.
    assert_eq!(store.inspect("o-1").await.expect("inspect"), None);
}

/// The Powertools layout keeps every claim under one partition key: business items under other
/// partition keys, and a claim's neighbours in the same partition, are left alone.
#[tokio::test]
async fn claims_under_one_partition_leave_their_neighbours_alone() {
    let store = fresh_store_with("neighbours", sorted_under_one_partition()).await;
    let now = SystemTime::now();
    let a = acquire(&store, request("k#a", now)).await;
    let b = acquire(&store, request("k#b", now)).await;
    store
        .complete_with(
            "k#a",
            &a,
            Completion::new(now + HOUR).with_response(StoredResponse::new("a")),
        )
        .await
        .expect("complete a");
    assert!(store.forget("k#a").await.expect("forget a"));
    let seen = store.inspect("k#b").await.expect("inspect").expect("b");
    assert_eq!(seen.token, Some(b.clone()), "b is untouched by a's forget");
    assert!(store.force_release("k#b").await.expect("force release b"));
    assert_eq!(store.inspect("k#a").await.expect("inspect"), None);
    let item = raw_item(&store, "k#b").await;
    assert!(item.is_none());
}

/// The default attribute names with the response in `data`.
fn attributes_with_data(data: &str) -> DynamoDbAttributes {
    let mut attrs = DynamoDbAttributes::default();
    attrs.data = data.into();
    attrs
}
