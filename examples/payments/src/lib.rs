//! The reference consumer: a small payments example, shared by the Lambda binary
//! (`src/bin/consumer.rs`) and the app's command line (`payments invoke`).
//!
//! *Features `dynamodb` and `sqlite`.*
//!
//! Each message credits an account:
//!
//! ```json
//! {"order_id": "ord-1001", "account": "acct-alice", "amount_cents": 1250}
//! ```
//!
//! The credit is an *effect* ([`Ledger::credit`]): it commits in the same atomic step as the
//! claim's completion, so a message is either credited and completed, or neither. The key is
//! the body's `order_id` by default (`json:/order_id`), so a producer that sends the same order
//! twice under two message ids is caught too, not only SQS redeliveries.
//!
//! A body that is not such an object fails that message alone with a
//! [`BadBody`](sqs_claim::ErrorKind::BadBody) error naming the field (never its value): it is
//! retried, and reaches the dead-letter queue after the queue's `maxReceiveCount`.
//!
//! The pieces:
//!
//! | what | where |
//! |------|-------|
//! | the ledgers: one per store, each holding its store ([`Ledger`]), one file each | `memory.rs`, `sqlite.rs`, `dynamodb.rs`, `redis.rs`, `postgres.rs` |
//! | whichever ledger a store URL names, opened ([`open`]), as one type ([`BoxLedger`]) | `ledgers.rs` |
//! | the body, and its validation | [`Payment`] |
//! | the handler | [`PaymentHandler`] |
//! | settings from the environment (every consumer's, from [`sqs_claim::settings`], and the accounts table) | [`config`] |
//! | the same credits from Kinesis, DynamoDB Streams or Kafka (the `stream-consumer` binary) | [`stream`] |
//!
//! The app depends on the library alone. The operator's commands (`doctor`, `inspect`,
//! `release`, `forget`, `prune`) are `sqs-claim`'s (the `sqs-claim-cli` crate), run on the app's
//! store with `SQS_CLAIM_NAMESPACE=payments`.

use std::future::Future;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

use sqs_claim::store::{AnyEffect, BoxStore, ClaimStore, Effects, StoreAdmin};
use sqs_claim::{BoxError, Error, ErrorKind, Message, OneShot, Processor, ProcessorBuilder};

pub mod config;
pub mod dynamodb;
pub mod ledgers;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
pub mod sqlite;
pub mod stream;

pub use config::{AppStore, Settings, StoreUrl};
pub use dynamodb::DynamoDbLedger;
pub use ledgers::{BoxLedger, open, open_prepared};
pub use memory::MemoryLedger;
#[cfg(feature = "postgres")]
pub use postgres::PostgresLedger;
#[cfg(feature = "redis")]
pub use redis::{RedisLedger, TieredLedger};
pub use sqlite::SqliteLedger;

/// The example's accounts, kept beside the claims of one store: it holds that store (the
/// processor is built over [`Ledger::store`]) and credits an account as an effect of a
/// completion.
///
/// One implementation per store, each in its own file; [`open`] picks one from a
/// [`StoreUrl`].
pub trait Ledger: Clone + Send + Sync + 'static {
    /// The claim store the balances live beside.
    type Store: ClaimStore + StoreAdmin + Clone;

    /// The claim store, for the processor and for tests.
    fn store(&self) -> &Self::Store;

    /// An effect that credits `account` by `amount_cents`, committed with the completion.
    ///
    /// Every ledger keeps each balance within `0..=`[`Payment::MAX_BALANCE_CENTS`]: a credit
    /// that would take it outside (past the maximum, or below zero for a negative amount) is
    /// refused in the store, atomically with the completion, which then fails with
    /// [`ErrorKind::EffectRejected`] and writes nothing. [`Payment::parse`] already refuses an
    /// amount outside `0..=`[`Payment::MAX_AMOUNT_CENTS`] per message.
    fn credit(&self, account: &str, amount_cents: i64) -> <Self::Store as ClaimStore>::Effect;

    /// Current balances, sorted by account.
    fn balances(&self) -> impl Future<Output = Result<Vec<(String, i64)>, Error>> + Send;

    /// Creates what the store needs (tables, TTL), idempotently.
    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Makes the store ready for a run, or says clearly why it is not: embedded stores
    /// (memory, SQLite) create what they need here; networked stores only check that their
    /// tables exist and answer, so a run never creates cloud resources behind anyone's back.
    ///
    /// The default reads the balances, which fails if the store is unreachable or not
    /// initialized.
    fn prepare(&self) -> impl Future<Output = Result<(), Error>> + Send {
        async { self.balances().await.map(|_| ()) }
    }

    /// Whether [`prepare`](Ledger::prepare) may run beside a batch's first writes rather than
    /// before them (`payments invoke` saves its round trip): only where every write to a store
    /// the check would refuse either fails or is what a ready store would hold. The caller
    /// still lets the batch end, so a claim that landed is completed or released by its own
    /// message. The default, `false`, checks first.
    ///
    /// On DynamoDB with a partition key alone it holds: a claim or credit on a table that is
    /// missing or keyed otherwise fails (a claim that landed on the claims table is released
    /// when its credit fails on a missing accounts table); a table still `UPDATING` takes the
    /// writes as it will once `ACTIVE`. With a sort key configured it does not: on a table
    /// without one every write succeeds, each partition's claims on one item, and only the
    /// check sees it.
    fn check_may_overlap_writes(&self) -> bool {
        false
    }

    /// Deletes at most `limit` claim records that expired at `now`, for stores that do not
    /// expire records by themselves (SQLite, PostgreSQL). `Ok(None)` means there is nothing to
    /// do here: the store expires records on its own (DynamoDB TTL, Redis key TTL, memory).
    fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        let _ = (now, limit);
        async { Ok(None) }
    }
}

/// `error` with the store's `` `store_hint` `` (a `sqs-claim init ...` command) replaced by the
/// app's `` `app_hint` `` (its `payments init ...`), which creates the accounts table too:
/// `sqs-claim init` alone would leave the app one table short.
pub(crate) fn with_app_hint(error: Error, store_hint: &str, app_hint: &str) -> Error {
    let (from, to) = (format!("`{store_hint}"), format!("`{app_hint}"));
    let text = error.to_string();
    if from == to || !text.contains(&from) {
        return error;
    }
    Error::new(error.kind(), text.replace(&from, &to))
}

/// A validated message body: which order, which account, how much.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Payment {
    /// The producer's order id (the idempotency key with the default key source).
    pub order_id: String,
    /// The account to credit.
    pub account: String,
    /// The credit, in cents: an integer in `0..=`[`Payment::MAX_AMOUNT_CENTS`].
    pub amount_cents: i64,
}

impl Payment {
    /// The largest amount one message may credit: 10^12 cents (ten billion in the currency's
    /// main unit). It is far above any single payment, so an amount past it is almost
    /// certainly a unit mistake (micro-units, a timestamp in the wrong field) and is refused
    /// per message ([`ErrorKind::BadBody`]) rather than credited; and a maximal credit moves a
    /// balance by a nine-thousandth of its range, so no handful of bad messages can fill it.
    pub const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;

    /// The largest balance an account may reach: 2^53 - 1 cents (about 90 trillion in the main
    /// unit). Balances are never negative (credits are), so the range is
    /// `0..=MAX_BALANCE_CENTS`. It is the largest integer every reader of a balance holds
    /// exactly: an `f64` (JSON consumers such as JavaScript, and the Lua numbers of the Redis
    /// ledger's checks), DynamoDB's 38-digit numbers, SQLite's and PostgreSQL's 64-bit integers.
    /// Every ledger refuses a credit that would take a balance past it: the completion fails
    /// with [`ErrorKind::EffectRejected`], nothing is written, and the message is retried
    /// (and reaches the dead-letter queue), so `balances` always reads back what was credited.
    pub const MAX_BALANCE_CENTS: i64 = (1 << 53) - 1;

    /// The balance after crediting `amount_cents` to `balance`, if it stays within
    /// `0..=MAX_BALANCE_CENTS`: the rule every ledger's credit enforces in its store.
    pub fn balance_after(balance: i64, amount_cents: i64) -> Option<i64> {
        balance
            .checked_add(amount_cents)
            .filter(|b| (0..=Self::MAX_BALANCE_CENTS).contains(b))
    }

    /// Parses and validates a body. The error ([`ErrorKind::BadBody`]) names the field and
    /// what is wrong with it, never the body's content (bodies stay out of logs).
    pub fn parse(body: &str) -> Result<Payment, Error> {
        let bad = |why: String| Error::new(ErrorKind::BadBody, why);
        let value: serde_json::Value = serde_json::from_str(body).map_err(|e| {
            bad(format!(
                "body is not JSON (error at line {} column {})",
                e.line(),
                e.column()
            ))
        })?;
        let Some(object) = value.as_object() else {
            return Err(bad(format!(
                "body is a JSON {}, expected an object {{\"order_id\", \"account\", \"amount_cents\"}}",
                json_type(&value)
            )));
        };
        let text = |field: &str| -> Result<String, Error> {
            match object.get(field) {
                Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                Some(serde_json::Value::String(_)) => Err(bad(format!("field {field:?} is empty"))),
                Some(other) => Err(bad(format!(
                    "field {field:?} is a JSON {}, expected a string",
                    json_type(other)
                ))),
                None => Err(bad(format!("field {field:?} is missing"))),
            }
        };
        let too_large = || {
            bad(format!(
                "field \"amount_cents\" is too large (at most {} cents per message)",
                Self::MAX_AMOUNT_CENTS
            ))
        };
        let order_id = text("order_id")?;
        let account = text("account")?;
        let amount_cents = match object.get("amount_cents") {
            None => return Err(bad("field \"amount_cents\" is missing".into())),
            Some(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(a) if (0..=Self::MAX_AMOUNT_CENTS).contains(&a) => a,
                Some(a) if a < 0 => {
                    return Err(bad("field \"amount_cents\" is negative".into()));
                }
                Some(_) => return Err(too_large()),
                None if n.is_u64() => return Err(too_large()),
                // A float: say "too large" or "negative" when it is, whatever its notation.
                None if n
                    .as_f64()
                    .is_some_and(|f| f > Self::MAX_AMOUNT_CENTS as f64) =>
                {
                    return Err(too_large());
                }
                None if n.as_f64().is_some_and(|f| f < 0.0) => {
                    return Err(bad("field \"amount_cents\" is negative".into()));
                }
                None => {
                    return Err(bad(
                        "field \"amount_cents\" is not an integer (amounts are whole cents)".into(),
                    ));
                }
            },
            Some(other) => {
                return Err(bad(format!(
                    "field \"amount_cents\" is a JSON {}, expected an integer",
                    json_type(other)
                )));
            }
        };
        Ok(Payment {
            order_id,
            account,
            amount_cents,
        })
    }
}

/// Reads a stored balance written as decimal text (DynamoDB numbers, Redis hash fields). A value
/// that is not a 64-bit integer fails with an error naming `where_` (the table or key), the
/// account, the value (shortened) and what is wrong with it, so whoever runs `balances` can find
/// and fix the item. A value that is an integer but outside `0..=MAX_BALANCE_CENTS` is read as
/// it is: it was written before the range was enforced, or by something else.
pub(crate) fn read_balance(where_: &str, account: &str, text: &str) -> Result<i64, Error> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let problem = if let Ok(balance) = text.parse::<i64>() {
        return Ok(balance);
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        "an integer beyond the 64-bit range a balance is read into"
    } else if let Some(f) = text.parse::<f64>().ok().filter(|f| f.is_finite()) {
        if f.fract() != 0.0 {
            "not a whole number of cents"
        } else if f.abs() >= 9.2e18 {
            "an integer beyond the 64-bit range a balance is read into"
        } else {
            "a number not written as a plain integer"
        }
    } else {
        "not a number"
    };
    let mut shown: String = text.chars().take(40).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    Err(Error::new(
        ErrorKind::StoreRejected,
        format!(
            "the balance of account {account:?} in {where_} is {shown:?}, {problem} (balances \
             are whole cents within 0..={}); fix or remove that entry",
            Payment::MAX_BALANCE_CENTS
        ),
    ))
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// The handler: validates the body and answers the credit as an effect, which the processor
/// commits with the completion.
///
/// With an output queue ([`PaymentHandler::with_output`], feature `sqs`), it also publishes a
/// `credited` notice before returning, with a deduplication id derived from the message's key.
#[derive(Clone)]
pub struct PaymentHandler<L> {
    ledger: L,
    output: Option<sqs_claim::publish::Publisher>,
}

impl<L> PaymentHandler<L> {
    /// A handler that credits through `ledger`.
    pub fn new(ledger: L) -> Self {
        PaymentHandler {
            ledger,
            output: None,
        }
    }

    /// Also publishes, for every credit, `{"event": "credited", "order_id", "account",
    /// "amount_cents"}` to the publisher's queue (message group: the account). It is sent
    /// before the completion commits, so a notice can exist for a credit that a failed
    /// completion then cancelled, and a retry sends it again: on a FIFO queue the copy is
    /// dropped (same deduplication id), elsewhere consumers must deduplicate.
    pub fn with_output(mut self, publisher: sqs_claim::publish::Publisher) -> Self {
        self.output = Some(publisher);
        self
    }

    /// The ledger it credits through.
    pub fn ledger(&self) -> &L {
        &self.ledger
    }
}

impl<L> std::fmt::Debug for PaymentHandler<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PaymentHandler")
    }
}

/// The effect type of ledger `L`'s store.
type EffectOf<L> = <<L as Ledger>::Store as ClaimStore>::Effect;

impl<L: Ledger> Service<Message> for PaymentHandler<L> {
    type Response = Effects<EffectOf<L>>;
    type Error = Error;
    type Future = BoxFuture<'static, Result<Effects<EffectOf<L>>, Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, msg: Message) -> Self::Future {
        // The processor logs the failure with the message id; the error says what is wrong.
        // The payload: the body, or what SQS_CLAIM_ENVELOPE's envelope wraps.
        let payment = match msg.payload().and_then(Payment::parse) {
            Ok(p) => p,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let credit = self.ledger.credit(&payment.account, payment.amount_cents);
        if let Some(publisher) = self.output.clone() {
            return Box::pin(async move {
                let notice = serde_json::json!({
                    "event": "credited",
                    "order_id": payment.order_id,
                    "account": payment.account,
                    "amount_cents": payment.amount_cents,
                });
                let mut out = publisher.batch_for(&msg)?;
                let mut outgoing = sqs_claim::publish::Outgoing::new(notice.to_string());
                if publisher.is_fifo() {
                    // The account orders its notices. An account SQS would refuse as a group id
                    // (non-ASCII, over 128 characters) is hashed: same account, same group.
                    let group = if sqs_claim::publish::is_valid_group_id(&payment.account) {
                        payment.account.clone()
                    } else {
                        format!(
                            "sha256:{}",
                            sqs_claim::sha256_hex(payment.account.as_bytes())
                        )
                    };
                    outgoing = outgoing.group_id(group);
                }
                out.push(outgoing);
                // Retries stop before the processor would cancel the handler.
                match msg.stop_at() {
                    Some(stop_at) => out.send_by(stop_at).await?,
                    None => out.send().await?,
                };
                Ok(Effects::one(credit))
            });
        }
        Box::pin(async move { Ok(Effects::one(credit)) })
    }
}

/// The reference consumer's processor over `ledger`'s store, configured by `settings`,
/// without an output queue (see [`build`] for the full configuration).
pub fn processor<L: Ledger>(
    ledger: L,
    settings: &Settings,
) -> Processor<L::Store, PaymentHandler<L>> {
    processor_with_handler(PaymentHandler::new(ledger), settings)
}

/// The reference consumer's processor as `settings` describe it, output queue included
/// (`SQS_CLAIM_OUTPUT_QUEUE_URL`, whose SQS client is configured from the standard AWS
/// environment).
///
/// Without an output queue the only effect of a message is its credit, a write to the store:
/// the consumer then runs in one-shot mode ([`Processor::one_shot`]), one write per message
/// (on DynamoDB one `TransactWriteItems` of the claim, completed, and the credit). With an
/// output queue the notice is an external side effect and must run under a held claim, and
/// with `SQS_CLAIM_STORE_UNAVAILABLE=fail-open` a message may run without a claim at all:
/// both keep claim, handler, completion.
///
/// With `SQS_CLAIM_FAILURE_QUEUE_URL`, in either mode, a message that fails on its
/// `SQS_CLAIM_MAX_RECEIVES`-th receive goes to that queue with its reason
/// ([`sqs_claim::FailureDestination`]), through an SQS client like the output queue's, and
/// with `SQS_CLAIM_DEAD_LETTER_AT_ONCE` a permanent failure (a body that does not parse) on any
/// receive. With `SQS_CLAIM_BACKOFF=on` each message reported for retry gets its own visibility
/// timeout ([`sqs_claim::Redelivery`]) through the same client. With `SQS_CLAIM_WARM_CACHE` an
/// in-process cache of completed keys sits in front of the store
/// ([`Settings::with_warm_cache`](sqs_claim::settings::Settings::with_warm_cache)).
///
/// Whatever the ledger and the mode, the answer is one type, [`Consumer`]: the ledger's store
/// boxed ([`BoxStore`]) and the handler boxed ([`PaymentService`]).
pub async fn build<L: Ledger>(ledger: L, settings: &Settings) -> Result<Consumer, Error> {
    let ledger = BoxLedger::new(ledger);
    // Payments offloaded to S3 by the extended clients, and large notices offloaded the same
    // way: one S3 client for both. One AWS configuration (one HTTPS client, one TLS context)
    // for the SQS and S3 clients.
    let needs_s3 = settings.large_messages || settings.offload_bucket.is_some();
    let config = match settings.needs_sqs() || needs_s3 {
        false => None,
        true => Some(sqs_claim::aws::load_config().await),
    };
    let sqs = config
        .as_ref()
        .filter(|_| settings.needs_sqs())
        .map(sqs_claim::aws::sqs_client);
    let s3 = config
        .as_ref()
        .filter(|_| needs_s3)
        .map(sqs_claim::aws::s3_client);
    let store = settings.with_warm_cache(ledger.store().clone());
    let one_shot = settings.output_queue_url.is_none()
        && settings.store_unavailable == sqs_claim::StoreUnavailable::FailClosed;
    let builder = if one_shot {
        Processor::one_shot(store, credit_fn(ledger)).boxed_handler()
    } else {
        let mut handler = PaymentHandler::new(ledger);
        if let (Some(url), Some(client)) = (&settings.output_queue_url, &sqs) {
            let mut publisher = sqs_claim::publish::Publisher::new(client.clone(), url.clone());
            if let (Some(bucket), Some(s3)) = (&settings.offload_bucket, &s3) {
                // SQS_CLAIM_OFFLOAD_OVER_BYTES above the publisher's 256 KiB default says the
                // output queue takes that much (the template's takes 1 MiB): raise the
                // publisher's limit with it, or the threshold would be read as 256 KiB.
                publisher = publisher
                    .max_message_bytes(settings.offload_over_bytes.max(256 * 1024))
                    .offload_to(s3.clone(), bucket.clone(), settings.offload_over_bytes);
            }
            handler = handler.with_output(publisher);
        }
        Processor::builder(store, handler.map_err(BoxError::from)).boxed_handler()
    };
    let mut builder = configure(builder, settings);
    if let Some(large) = s3.as_ref().and_then(|c| settings.large_message_reader(c)) {
        builder = builder.large_messages(large);
    }
    if let Some(client) = &sqs {
        builder = settings.configure_sqs(builder, client);
    }
    Ok(builder.build())
}

/// The handler of either mode, boxed ([`PaymentHandler`] under a held claim, the credit alone
/// in one-shot mode): one processor type whichever mode the settings chose.
pub type PaymentService = BoxCloneSyncService<Message, Effects<AnyEffect>, BoxError>;

/// The reference consumer's processor, in the mode [`build`] chose
/// ([`Processor::is_one_shot`]), over the store of the ledger a URL named, its handler boxed
/// ([`ProcessorBuilder::boxed_handler`]).
pub type Consumer = Processor<BoxStore, PaymentService>;

/// The one-shot handler of the reference consumer: the credit, computed from the body.
pub type CreditFn<L> =
    Box<dyn Fn(&Message) -> Result<Effects<EffectOf<L>>, BoxError> + Send + Sync>;

/// [`CreditFn`] as the processor's handler.
pub type CreditHandler<L> = OneShot<CreditFn<L>, EffectOf<L>>;

/// The reference consumer in one-shot mode over `ledger`, as `settings` describe it.
pub fn one_shot<L: Ledger>(
    ledger: L,
    settings: &Settings,
) -> Processor<L::Store, CreditHandler<L>> {
    let store = ledger.store().clone();
    configure(Processor::one_shot(store, credit_fn(ledger)), settings).build()
}

/// The one-shot handler: the credit, computed from the payload.
fn credit_fn<L: Ledger>(ledger: L) -> CreditFn<L> {
    Box::new(move |msg: &Message| {
        let payment = Payment::parse(msg.payload()?)?;
        Ok(Effects::one(
            ledger.credit(&payment.account, payment.amount_cents),
        ))
    })
}

/// The processor over the store of `handler`'s ledger, configured by `settings`.
pub fn processor_with_handler<L: Ledger>(
    handler: PaymentHandler<L>,
    settings: &Settings,
) -> Processor<L::Store, PaymentHandler<L>> {
    let store = handler.ledger().store().clone();
    configure(Processor::builder(store, handler), settings).build()
}

/// The settings every mode shares: the app's defaults for the key and the namespace, then
/// whatever the `SQS_CLAIM_*` variables set ([`sqs_claim::settings::Settings::configure`]).
fn configure<S, H>(builder: ProcessorBuilder<S, H>, settings: &Settings) -> ProcessorBuilder<S, H> {
    let builder = builder.key(settings.key()).namespace(settings.namespace());
    settings.configure(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_payment() {
        let p = Payment::parse(r#"{"order_id":"o-1","account":"a","amount_cents":1250,"x":1}"#)
            .expect("valid");
        assert_eq!(
            p,
            Payment {
                order_id: "o-1".into(),
                account: "a".into(),
                amount_cents: 1250
            }
        );
        assert_eq!(
            Payment::parse(r#"{"order_id":"o","account":"a","amount_cents":0}"#)
                .expect("zero is fine")
                .amount_cents,
            0
        );
        let max = format!(
            r#"{{"order_id":"o","account":"a","amount_cents":{}}}"#,
            Payment::MAX_AMOUNT_CENTS
        );
        assert_eq!(
            Payment::parse(&max)
                .expect("the largest amount")
                .amount_cents,
            Payment::MAX_AMOUNT_CENTS
        );
    }

    #[test]
    fn balance_after_stays_in_range() {
        let max = Payment::MAX_BALANCE_CENTS;
        assert_eq!(max, 9_007_199_254_740_991);
        assert_eq!(max as f64 as i64, max, "exact as an f64");
        assert_eq!(Payment::balance_after(0, 0), Some(0));
        assert_eq!(Payment::balance_after(max - 5, 5), Some(max));
        assert_eq!(Payment::balance_after(max, 0), Some(max));
        assert_eq!(Payment::balance_after(max - 5, 6), None);
        assert_eq!(Payment::balance_after(max, 1), None);
        assert_eq!(Payment::balance_after(0, -1), None);
        assert_eq!(Payment::balance_after(5, -5), Some(0));
        assert_eq!(Payment::balance_after(i64::MAX, 0), None);
        assert_eq!(Payment::balance_after(i64::MAX, i64::MAX), None);
        assert_eq!(Payment::balance_after(i64::MIN, i64::MIN), None);
    }

    #[test]
    fn unreadable_balances_name_the_account_and_the_problem() {
        assert_eq!(read_balance("t", "a", "42").ok(), Some(42));
        assert_eq!(read_balance("t", "a", "-3").ok(), Some(-3));
        for (text, want) in [
            ("18446744073709551616", "beyond the 64-bit range"),
            ("-99999999999999999999", "beyond the 64-bit range"),
            ("12.5", "not a whole number of cents"),
            ("1E+19", "beyond the 64-bit range"),
            ("1e3", "not written as a plain integer"),
            ("", "not a number"),
            ("abc", "not a number"),
        ] {
            let err = read_balance("table accounts", "acct-9", text).expect_err(text);
            let msg = err.to_string();
            assert_eq!(err.kind(), ErrorKind::StoreRejected, "{text}");
            assert!(msg.contains("\"acct-9\""), "{text}: {msg}");
            assert!(msg.contains("table accounts"), "{text}: {msg}");
            assert!(msg.contains(want), "{text}: {msg} should say {want}");
        }
    }

    #[test]
    fn rejects_bad_bodies_naming_the_field_not_the_value() {
        let cases = [
            ("not json {secret", "not JSON"),
            ("[1,2]", "JSON array"),
            ("\"secret\"", "JSON string"),
            (
                r#"{"account":"secret","amount_cents":1}"#,
                "\"order_id\" is missing",
            ),
            (
                r#"{"order_id":7,"account":"secret","amount_cents":1}"#,
                "\"order_id\" is a JSON number",
            ),
            (
                r#"{"order_id":"o","account":"","amount_cents":1}"#,
                "\"account\" is empty",
            ),
            (
                r#"{"order_id":"o","account":"secret"}"#,
                "\"amount_cents\" is missing",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":-5}"#,
                "negative",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":12.5}"#,
                "not an integer",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":1e3}"#,
                "not an integer",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":"12"}"#,
                "JSON string",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":99999999999999999999}"#,
                "too large",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":1000000000001}"#,
                "too large (at most 1000000000000 cents",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":9223372036854775807}"#,
                "too large",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":-1e30}"#,
                "negative",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":-9223372036854775808}"#,
                "negative",
            ),
            (
                r#"{"order_id":"o","account":"secret","amount_cents":18446744073709551615}"#,
                "too large",
            ),
        ];
        for (body, want) in cases {
            let err = Payment::parse(body).expect_err(body);
            assert_eq!(err.kind(), ErrorKind::BadBody, "{body}");
            let text = err.to_string();
            assert!(
                text.contains(want),
                "{body}: {text:?} should contain {want:?}"
            );
            assert!(
                !text.contains("secret"),
                "{body}: body content leaked: {text}"
            );
        }
    }
}
