//! The example's stream consumer: the same credits as the SQS consumer, read from a Kinesis
//! data stream, a DynamoDB table's stream or a Kafka topic (`sqs_claim::stream`), each record
//! effectively once. The `stream-consumer` binary serves it; examples/streams/template.yaml
//! deploys it three times (one function per source).
//!
//! Each record carries one payment, `{"order_id", "account", "amount_cents"}` ([`Payment`]):
//!
//! | source | where the payment is | the key (`order_id`) |
//! |--------|----------------------|----------------------|
//! | Kinesis | the record's `data`, base64 of the JSON | `json:/order_id` |
//! | Kafka | the record's `value`, base64 of the JSON | `json:/order_id` |
//! | DynamoDB Streams | the new item of an `INSERT` (`NewImage`: `order_id` and `account` strings, `amount_cents` a number) | `json:/dynamodb/NewImage/order_id/S` |
//!
//! The credit is a one-shot effect ([`sqs_claim::Processor::one_shot`]): it commits in the same
//! write as the claim's completion (on DynamoDB one `TransactWriteItems`), so a record is either
//! credited and completed, or neither; a record the mapping sends again, or an order the
//! producer wrote twice, finds its claim completed and is skipped.
//!
//! Only `INSERT` records credit (a new order). The template's DynamoDB mapping filters the
//! others out (`FilterCriteria`, `eventName` = `INSERT`); one that arrives anyway (a mapping
//! without the filter) fails with a reason naming its `eventName`, which stops its shard:
//! add the filter.
//!
//! Settings, by the names the template sets ([`VARIABLES`]):
//!
//! | variable | default | meaning |
//! |----------|---------|---------|
//! | `STREAM_SOURCE` | (required) | `kinesis`, `dynamodb` or `kafka`: which event the function receives |
//! | `CLAIMS_TABLE` | (required) | the DynamoDB claims table |
//! | `ACCOUNTS_TABLE` | `<claims table>-accounts` | the DynamoDB accounts table (as `SQS_CLAIM_ACCOUNTS_TABLE` for the SQS consumer) |
//! | `NAMESPACE` | `payments` | the key namespace (as `SQS_CLAIM_NAMESPACE`) |
//! | `CLAIM_TTL_SECS` | `172800` (48 h) | how long a completed record's claim is kept: at least the stream's retention (docs/streams.md) |

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use sqs_claim::settings::{Variable, read};
use sqs_claim::store::Effects;
use sqs_claim::{Error, ErrorKind, KeySource, Message, Processor, ProcessorBuilder};

use crate::config::{AppStore, DEFAULT_NAMESPACE, StoreUrl};
use crate::{CreditFn, CreditHandler, Ledger, Payment};

/// The variable naming the source.
pub const SOURCE_VAR: &str = "STREAM_SOURCE";
/// The variable naming the DynamoDB claims table.
pub const CLAIMS_TABLE_VAR: &str = "CLAIMS_TABLE";
/// The variable naming the DynamoDB accounts table.
pub const ACCOUNTS_TABLE_VAR: &str = "ACCOUNTS_TABLE";
/// The variable naming the key namespace.
pub const NAMESPACE_VAR: &str = "NAMESPACE";
/// The variable giving the claims' TTL in seconds.
pub const TTL_VAR: &str = "CLAIM_TTL_SECS";

/// The claims' TTL when `CLAIM_TTL_SECS` is unset: 48 hours, at least a Kinesis stream's
/// default retention and a DynamoDB stream's (24 h each).
pub const DEFAULT_TTL: Duration = Duration::from_secs(48 * 3600);

/// The stream consumer's variables (the template's `Environment`).
pub const VARIABLES: &[Variable] = &[
    Variable::new(
        SOURCE_VAR,
        "(required)",
        "`kinesis`, `dynamodb` or `kafka`: the event the function receives",
    ),
    Variable::new(CLAIMS_TABLE_VAR, "(required)", "DynamoDB claims table"),
    Variable::new(
        ACCOUNTS_TABLE_VAR,
        "`<claims table>-accounts`",
        "DynamoDB accounts table",
    ),
    Variable::new(NAMESPACE_VAR, "`payments`", "key namespace"),
    Variable::new(
        TTL_VAR,
        "`172800`",
        "seconds a completed record's claim is kept (at least the stream's retention)",
    ),
];

/// Which stream the function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Amazon Kinesis Data Streams (`sqs_claim::stream::Kinesis`).
    Kinesis,
    /// Amazon DynamoDB Streams (`sqs_claim::stream::DynamoDbStreams`).
    DynamoDb,
    /// Amazon MSK or self-managed Apache Kafka (`sqs_claim::stream::Kafka`).
    Kafka,
}

impl Source {
    /// The key of a record from this source: its payment's `order_id`.
    pub fn key(self) -> KeySource {
        match self {
            Source::Kinesis | Source::Kafka => KeySource::JsonPointer("/order_id".into()),
            Source::DynamoDb => KeySource::JsonPointer("/dynamodb/NewImage/order_id/S".into()),
        }
    }

    /// The payment `msg` carries (see the [module docs](self)). The error
    /// ([`ErrorKind::BadBody`]) names what is wrong, never a value.
    pub fn payment(self, msg: &Message) -> Result<Payment, Error> {
        match self {
            Source::Kinesis | Source::Kafka => Payment::parse(msg.payload()?),
            Source::DynamoDb => inserted_payment(msg.body()),
        }
    }
}

/// `kinesis`, `dynamodb`, `kafka`.
impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "kinesis" => Ok(Source::Kinesis),
            "dynamodb" => Ok(Source::DynamoDb),
            "kafka" => Ok(Source::Kafka),
            _ => Err("expected kinesis, dynamodb or kafka".into()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Kinesis => "kinesis",
            Source::DynamoDb => "dynamodb",
            Source::Kafka => "kafka",
        })
    }
}

/// The payment of a DynamoDB Streams record: an `INSERT`'s new image, read from DynamoDB JSON
/// (`{"order_id": {"S": ..}, "account": {"S": ..}, "amount_cents": {"N": ".."}}`) and
/// validated as [`Payment::parse`] validates a body.
fn inserted_payment(record: &str) -> Result<Payment, Error> {
    let bad = |why: String| Error::new(ErrorKind::BadBody, why);
    let record: Value =
        serde_json::from_str(record).map_err(|_| bad("the stream record is not JSON".into()))?;
    match record.pointer("/eventName").and_then(Value::as_str) {
        Some("INSERT") => {}
        Some(name @ ("MODIFY" | "REMOVE")) => {
            return Err(bad(format!(
                "a {name} record: this consumer credits INSERT records only (give the mapping \
                 the filter {{\"eventName\": [\"INSERT\"]}})"
            )));
        }
        _ => return Err(bad("the stream record has no eventName INSERT".into())),
    }
    let Some(image) = record
        .pointer("/dynamodb/NewImage")
        .and_then(Value::as_object)
    else {
        return Err(bad(
            "the INSERT record has no NewImage (the stream's view type must include new images)"
                .into(),
        ));
    };
    let typed = |field: &str, ty: &str| -> Result<Value, Error> {
        match image.get(field).and_then(|v| v.get(ty)) {
            Some(Value::String(s)) => Ok(Value::String(s.clone())),
            _ if image.contains_key(field) => {
                Err(bad(format!("NewImage field {field:?} is not of type {ty}")))
            }
            _ => Err(bad(format!("NewImage field {field:?} is missing"))),
        }
    };
    let order_id = typed("order_id", "S")?;
    let account = typed("account", "S")?;
    // A DynamoDB number is decimal text: read it as a JSON number, so that Payment::parse says
    // "not an integer", "negative" or "too large" as it does for a body.
    let amount = match typed("amount_cents", "N")? {
        Value::String(n) => serde_json::from_str::<serde_json::Number>(n.trim())
            .map(Value::Number)
            .map_err(|_| bad("NewImage field \"amount_cents\" is not a number".into()))?,
        other => other,
    };
    let body = serde_json::json!({
        "order_id": order_id,
        "account": account,
        "amount_cents": amount,
    });
    Payment::parse(&body.to_string())
}

/// The stream consumer's settings ([`VARIABLES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSettings {
    /// `STREAM_SOURCE`.
    pub source: Source,
    /// `CLAIMS_TABLE`.
    pub claims_table: String,
    /// `ACCOUNTS_TABLE`; `None` for `<claims table>-accounts`.
    pub accounts_table: Option<String>,
    /// `NAMESPACE`; `None` for [`DEFAULT_NAMESPACE`].
    pub namespace: Option<String>,
    /// `CLAIM_TTL_SECS`, else [`DEFAULT_TTL`].
    pub ttl: Duration,
}

impl StreamSettings {
    /// Reads [`VARIABLES`] from the process environment.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads [`VARIABLES`] through `lookup`. An empty value counts as unset; a value that does
    /// not parse, or a required one unset, fails naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let required = |var: &str, what: &str| {
            Error::new(
                ErrorKind::Config,
                format!("{var} is not set: it names {what}"),
            )
        };
        let source = read::<Source>(&lookup, SOURCE_VAR)?.ok_or_else(|| {
            required(
                SOURCE_VAR,
                "the stream the function reads (kinesis, dynamodb or kafka)",
            )
        })?;
        let claims_table = read::<String>(&lookup, CLAIMS_TABLE_VAR)?
            .ok_or_else(|| required(CLAIMS_TABLE_VAR, "the DynamoDB claims table"))?;
        let secs = read::<u64>(&lookup, TTL_VAR)?;
        if secs == Some(0) {
            return Err(Error::new(
                ErrorKind::Config,
                format!("{TTL_VAR} is 0: a claim must outlast the stream's retention"),
            ));
        }
        Ok(StreamSettings {
            source,
            claims_table,
            accounts_table: read::<String>(&lookup, ACCOUNTS_TABLE_VAR)?,
            namespace: read::<String>(&lookup, NAMESPACE_VAR)?,
            ttl: secs.map_or(DEFAULT_TTL, Duration::from_secs),
        })
    }

    /// `NAMESPACE`, else [`DEFAULT_NAMESPACE`].
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }

    /// The store: the DynamoDB claims table, the accounts table beside it.
    pub fn store(&self) -> AppStore {
        AppStore {
            claims: StoreUrl::DynamoDb {
                table: self.claims_table.clone(),
                key_schema: None,
            },
            accounts_table: self.accounts_table.clone(),
        }
    }
}

/// The stream consumer's processor over `ledger`'s store, before its source is chosen: one-shot
/// (the credit committed with the completion), keyed by the order id where `source` carries it,
/// under the settings' namespace and TTL. Hand it to `sqs_claim::stream::Kinesis::new`,
/// `DynamoDbStreams::new` or `Kafka::new`.
pub fn builder<L: Ledger>(
    ledger: L,
    settings: &StreamSettings,
) -> ProcessorBuilder<L::Store, CreditHandler<L>> {
    let store = ledger.store().clone();
    Processor::one_shot(store, credit_fn(ledger, settings.source))
        .key(settings.source.key())
        .namespace(settings.namespace())
        .ttl(settings.ttl)
}

/// The one-shot handler: the credit of the payment the record carries.
fn credit_fn<L: Ledger>(ledger: L, source: Source) -> CreditFn<L> {
    Box::new(move |msg: &Message| {
        let payment = source.payment(msg)?;
        Ok(Effects::one(
            ledger.credit(&payment.account, payment.amount_cents),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLedger;
    use lambda_runtime::{Context, LambdaEvent};
    use serde_json::json;
    use sqs_claim::stream::{DynamoDbStreams, Kafka, Kinesis};
    use sqs_claim_testkit::stream::{Mapping, Stream};

    fn settings(source: Source) -> StreamSettings {
        StreamSettings {
            source,
            claims_table: "claims".into(),
            accounts_table: None,
            namespace: Some(format!("test-{source}")),
            ttl: DEFAULT_TTL,
        }
    }

    fn event(payload: Value) -> LambdaEvent<Value> {
        LambdaEvent::new(payload, Context::default())
    }

    /// Invokes the consumer `source` over `ledger` once per batch of `stream`, through the
    /// kit's stand-in for the mapping.
    async fn drain(
        source: Source,
        ledger: &MemoryLedger,
        stream: &Stream,
        mapping: &Mapping,
    ) -> sqs_claim_testkit::stream::Drained {
        let builder = builder(ledger.clone(), &settings(source));
        match source {
            Source::Kinesis => {
                let c = Kinesis::new(builder).expect("a Kinesis consumer");
                mapping
                    .drain(stream, |e| {
                        let c = c.clone();
                        async move {
                            let r = c.process(event(e)).await.map_err(|e| e.to_string())?;
                            serde_json::to_value(r).map_err(|e| e.to_string())
                        }
                    })
                    .await
            }
            Source::DynamoDb => {
                let c = DynamoDbStreams::new(builder).expect("a DynamoDB Streams consumer");
                mapping
                    .drain(stream, |e| {
                        let c = c.clone();
                        async move {
                            let r = c.process(event(e)).await.map_err(|e| e.to_string())?;
                            serde_json::to_value(r).map_err(|e| e.to_string())
                        }
                    })
                    .await
            }
            Source::Kafka => {
                let c = Kafka::new(builder).expect("a Kafka consumer");
                mapping
                    .drain(stream, |e| {
                        let c = c.clone();
                        async move {
                            let r = c.process(event(e)).await.map_err(|e| e.to_string())?;
                            serde_json::to_value(r).map_err(|e| e.to_string())
                        }
                    })
                    .await
            }
        }
    }

    fn payment(order: &str, account: &str, cents: i64) -> Value {
        json!({"order_id": order, "account": account, "amount_cents": cents})
    }

    /// A payment as a DynamoDB item's new image.
    fn item(order: &str, account: &str, cents: i64) -> Value {
        json!({
            "order_id": {"S": order},
            "account": {"S": account},
            "amount_cents": {"N": cents.to_string()},
        })
    }

    fn stream_of(source: Source, shards: &[&str], payments: &[(&str, &str, i64)]) -> Stream {
        let mut stream = match source {
            Source::Kinesis => Stream::kinesis("orders"),
            Source::DynamoDb => Stream::dynamodb("orders"),
            Source::Kafka => Stream::kafka("orders"),
        };
        for (i, (order, account, cents)) in payments.iter().enumerate() {
            let shard = shards[i % shards.len()];
            let payload = match source {
                Source::DynamoDb => item(order, account, *cents),
                _ => payment(order, account, *cents),
            };
            stream.put(shard, &payload);
        }
        stream
    }

    fn shards(source: Source) -> Vec<&'static str> {
        match source {
            Source::Kinesis => vec!["shardId-000000000000", "shardId-000000000001"],
            // One DynamoDB stream shard per batch: the stand-in's records name none.
            Source::DynamoDb => vec!["shard-0"],
            Source::Kafka => vec!["orders-0", "orders-1"],
        }
    }

    const SOURCES: [Source; 3] = [Source::Kinesis, Source::DynamoDb, Source::Kafka];

    /// Every record credited once, with its completion: a mapping that sends a whole stream
    /// again (a replay from `TRIM_HORIZON`, a retried batch) credits nothing more.
    #[tokio::test]
    async fn each_record_is_credited_once_even_when_the_stream_is_read_again() {
        for source in SOURCES {
            let ledger = MemoryLedger::new();
            let stream = stream_of(
                source,
                &shards(source),
                &[
                    ("o-1", "acct-a", 100),
                    ("o-2", "acct-b", 20),
                    ("o-3", "acct-a", 3),
                    ("o-4", "acct-c", 7),
                ],
            );
            let mapping = Mapping {
                batch_size: 2,
                ..Mapping::default()
            };
            for round in 0..2 {
                let drained = drain(source, &ledger, &stream, &mapping).await;
                assert!(drained.on_failure.is_empty(), "{source} round {round}");
                assert!(!drained.stopped_early, "{source} round {round}");
                let balances = ledger.balances().await.expect("balances");
                assert_eq!(
                    balances,
                    vec![
                        ("acct-a".to_owned(), 103),
                        ("acct-b".to_owned(), 20),
                        ("acct-c".to_owned(), 7)
                    ],
                    "{source} round {round}: each record credited once"
                );
            }
            // Every record's claim is completed: the credit was committed with it.
            let keys = ["o-1", "o-2", "o-3", "o-4"];
            for key in keys {
                let id = format!("test-{source}#{key}");
                assert_eq!(
                    ledger.store().status(&id),
                    Some(sqs_claim::store::Status::Completed),
                    "{source}: {id} completed"
                );
            }
        }
    }

    /// A producer that writes the same payment twice (two records, one order): the second is
    /// a duplicate, skipped, and its shard goes on; nothing is given up.
    #[tokio::test]
    async fn a_payment_the_producer_wrote_twice_is_credited_once_and_the_shard_goes_on() {
        for source in SOURCES {
            let ledger = MemoryLedger::new();
            let stream = stream_of(
                source,
                &shards(source)[..1],
                &[
                    ("o-1", "acct-a", 100),
                    ("o-2", "acct-b", 20),
                    ("o-1", "acct-a", 100),
                    ("o-3", "acct-a", 3),
                    ("o-2", "acct-b", 20),
                ],
            );
            let mapping = Mapping {
                batch_size: 10,
                max_retry_attempts: Some(2),
                ..Mapping::default()
            };
            let drained = drain(source, &ledger, &stream, &mapping).await;
            assert!(drained.on_failure.is_empty(), "{source}: nothing given up");
            assert_eq!(drained.invocations, 1, "{source}: one batch, no retry");
            assert_eq!(
                ledger.balances().await.expect("balances"),
                vec![("acct-a".to_owned(), 103), ("acct-b".to_owned(), 20)],
                "{source}: each order credited once"
            );
        }
    }

    /// A record whose payment does not parse stops its shard (the records after it wait), and
    /// credits nothing; the mapping gives the batch up after its retries.
    #[tokio::test]
    async fn a_bad_payment_credits_nothing_and_stops_its_shard() {
        for source in SOURCES {
            let ledger = MemoryLedger::new();
            let bad = match source {
                Source::DynamoDb => json!({"order_id": {"S": "o-bad"}, "account": {"S": "acct-a"},
                                            "amount_cents": {"N": "-5"}}),
                _ => payment("o-bad", "acct-a", -5),
            };
            let mut stream = stream_of(source, &shards(source)[..1], &[]);
            let shard = shards(source)[0];
            stream.put(
                shard,
                &match source {
                    Source::DynamoDb => item("o-1", "acct-a", 1),
                    _ => payment("o-1", "acct-a", 1),
                },
            );
            stream.put(shard, &bad);
            stream.put(
                shard,
                &match source {
                    Source::DynamoDb => item("o-2", "acct-a", 2),
                    _ => payment("o-2", "acct-a", 2),
                },
            );
            let mapping = Mapping {
                batch_size: 10,
                max_retry_attempts: Some(2),
                ..Mapping::default()
            };
            let drained = drain(source, &ledger, &stream, &mapping).await;
            assert_eq!(drained.on_failure.len(), 1, "{source}: the batch given up");
            let balances = ledger.balances().await.expect("balances");
            assert_eq!(
                balances,
                vec![("acct-a".to_owned(), 1)],
                "{source}: only the record before the bad one credited (once)"
            );
        }
    }

    #[test]
    fn a_dynamodb_record_credits_only_an_insert_and_says_why_not() {
        let record = |name: &str, image: Value| {
            json!({"eventName": name, "dynamodb": {"NewImage": image}}).to_string()
        };
        let ok = inserted_payment(&record("INSERT", item("o-1", "a", 12))).expect("an INSERT");
        assert_eq!((ok.order_id.as_str(), ok.amount_cents), ("o-1", 12));
        for (body, want) in [
            (record("MODIFY", item("o-1", "a", 12)), "a MODIFY record"),
            (record("REMOVE", json!({})), "a REMOVE record"),
            (json!({"dynamodb": {}}).to_string(), "no eventName INSERT"),
            ("not json".into(), "not JSON"),
            (
                json!({"eventName": "INSERT", "dynamodb": {}}).to_string(),
                "no NewImage",
            ),
            (
                record(
                    "INSERT",
                    json!({"order_id": {"S": "o"}, "account": {"S": "secret"}}),
                ),
                "\"amount_cents\" is missing",
            ),
            (
                record(
                    "INSERT",
                    json!({"order_id": {"S": "o"}, "account": {"N": "1"},
                           "amount_cents": {"N": "1"}}),
                ),
                "\"account\" is not of type S",
            ),
            (
                record(
                    "INSERT",
                    json!({"order_id": {"S": "o"}, "account": {"S": "secret"},
                           "amount_cents": {"N": "12.5"}}),
                ),
                "not an integer",
            ),
            (
                record(
                    "INSERT",
                    json!({"order_id": {"S": "o"}, "account": {"S": "secret"},
                           "amount_cents": {"N": "secret"}}),
                ),
                "\"amount_cents\" is not a number",
            ),
        ] {
            let err = inserted_payment(&body).expect_err(&body);
            assert_eq!(err.kind(), ErrorKind::BadBody, "{body}");
            let text = err.to_string();
            assert!(text.contains(want), "{body}: {text:?} should say {want:?}");
            assert!(!text.contains("secret"), "{body}: a value leaked: {text}");
        }
    }

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn settings_by_the_names_the_template_sets() {
        let s = StreamSettings::from_lookup(lookup(&[
            ("STREAM_SOURCE", "dynamodb"),
            ("CLAIMS_TABLE", "claims"),
            ("NAMESPACE", "orders-table-stream"),
            ("CLAIM_TTL_SECS", "172800"),
        ]))
        .expect("the template's settings");
        assert_eq!(s.source, Source::DynamoDb);
        assert_eq!(s.namespace(), "orders-table-stream");
        assert_eq!(s.ttl, Duration::from_secs(172_800));
        assert_eq!(
            s.store().to_string(),
            "dynamodb:claims (accounts: claims-accounts)"
        );
        let s = StreamSettings::from_lookup(lookup(&[
            ("STREAM_SOURCE", " Kafka "),
            ("CLAIMS_TABLE", "c"),
            ("ACCOUNTS_TABLE", "acc"),
        ]))
        .expect("defaults");
        assert_eq!(
            (s.source, s.namespace(), s.ttl),
            (Source::Kafka, "payments", DEFAULT_TTL)
        );
        assert_eq!(s.store().to_string(), "dynamodb:c (accounts: acc)");
        for (vars, want) in [
            (vec![("CLAIMS_TABLE", "c")], "STREAM_SOURCE is not set"),
            (
                vec![("STREAM_SOURCE", "sqs"), ("CLAIMS_TABLE", "c")],
                "STREAM_SOURCE",
            ),
            (
                vec![("STREAM_SOURCE", "kinesis")],
                "CLAIMS_TABLE is not set",
            ),
            (
                vec![
                    ("STREAM_SOURCE", "kinesis"),
                    ("CLAIMS_TABLE", "c"),
                    ("CLAIM_TTL_SECS", "2d"),
                ],
                "CLAIM_TTL_SECS",
            ),
            (
                vec![
                    ("STREAM_SOURCE", "kinesis"),
                    ("CLAIMS_TABLE", "c"),
                    ("CLAIM_TTL_SECS", "0"),
                ],
                "CLAIM_TTL_SECS is 0",
            ),
        ] {
            let err = StreamSettings::from_lookup(lookup(&vars)).expect_err(want);
            assert!(err.to_string().contains(want), "{err} should say {want}");
        }
    }
}
