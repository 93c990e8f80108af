//! Property tests of the example app: the payment body parser accepts exactly the valid range
//! and never echoes a body, and the processor on random batches over the memory ledger names
//! every failure once and applies no credit twice.
//!
//! What must hold for any input: no panic; no body content in an error; every record of a
//! batch is a success or named once in the partial batch response, by a non-empty id from the
//! batch; no credit is applied twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use payments::{Ledger, MemoryLedger, Payment, PaymentHandler};
use proptest::prelude::*;
use serde_json::json;
use sqs_claim::{ErrorKind, KeySource, Processor};
use sqs_claim_testkit::sqs;
use sqs_claim_testkit::strategies::*;

proptest! {
    #![proptest_config(config(256))]

    /// Deep and huge bodies: the parser answers without echoing them.
    #[test]
    fn payment_parse_is_quiet_on_deep_bodies(depth in prop::sample::select(vec![100usize, 128, 129, 10_000])) {
        let deep = format!("{}{SECRET}{}", "[".repeat(depth), "]".repeat(depth));
        if let Err(e) = Payment::parse(&deep) {
            prop_assert!(!e.to_string().contains(SECRET), "{}", e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The payment body

/// One field of a generated payment body: missing, or a JSON token written out as text (so an
/// integer can be as large as it likes).
#[derive(Debug, Clone)]
enum Field {
    Missing,
    /// A string value (`blank` says whether it is empty or whitespace).
    Str(String),
    /// An integer literal.
    Int(i128),
    /// Any other JSON token (float, bool, null, object, ...).
    Other(String),
}

impl Field {
    fn token(&self) -> Option<String> {
        match self {
            Field::Missing => None,
            Field::Str(s) => Some(json!(s).to_string()),
            Field::Int(n) => Some(n.to_string()),
            Field::Other(t) => Some(t.clone()),
        }
    }
}

fn string_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        1 => Just(Field::Missing),
        5 => text().prop_map(|t| Field::Str(format!("{t}{SECRET}"))),
        1 => prop::sample::select(vec!["", " ", "\t\n"]).prop_map(|s| Field::Str(s.into())),
        1 => json_value()
            .prop_filter("not a string", |v| !v.is_string())
            .prop_map(|v| Field::Other(v.to_string())),
    ]
}

fn amount_field() -> impl Strategy<Value = Field> {
    let max = i128::from(Payment::MAX_AMOUNT_CENTS);
    prop_oneof![
        1 => Just(Field::Missing),
        4 => (0..=max).prop_map(Field::Int),
        2 => prop::sample::select(vec![
            0, 1, max - 1, max, max + 1, -1, i128::from(i64::MAX), i128::from(i64::MIN),
            i128::from(u64::MAX), i128::from(u64::MAX) + 1, -i128::from(u64::MAX),
            i128::MAX, i128::MIN, i128::from(Payment::MAX_BALANCE_CENTS),
        ])
        .prop_map(Field::Int),
        2 => any::<i128>().prop_map(Field::Int),
        1 => any::<i64>().prop_map(|n| Field::Int(n.into())),
        1 => prop::sample::select(vec![
            "12.5", "1e3", "1.0", "-0", "-0.0", "0e0", "1E12", "1e400", "-1e400", "\"12\"", "true",
            "null", "[1]", "{}",
        ])
        .prop_map(|t| Field::Other(t.into())),
        1 => any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(|n| Field::Other(n.to_string()))),
    ]
}

/// What `Payment::parse` must answer for these fields: accepted exactly when both strings are
/// non-blank and the amount an integer literal within `0..=MAX_AMOUNT_CENTS`.
fn expected_payment(
    order: &Field,
    account: &Field,
    amount: &Field,
) -> Option<(String, String, i64)> {
    let text = |f: &Field| match f {
        Field::Str(s) if !s.trim().is_empty() => Some(s.clone()),
        _ => None,
    };
    let amount = match amount {
        Field::Int(n) if (0..=i128::from(Payment::MAX_AMOUNT_CENTS)).contains(n) => {
            i64::try_from(*n).ok()
        }
        _ => None,
    }?;
    Some((text(order)?, text(account)?, amount))
}

proptest! {
    #![proptest_config(config(1024))]

    /// Any text: no panic, and an error is `bad_body` without the body's content.
    #[test]
    fn payment_parse_never_panics(body in body()) {
        if let Err(e) = Payment::parse(&body) {
            prop_assert_eq!(e.kind(), ErrorKind::BadBody);
            prop_assert!(!e.to_string().contains(SECRET), "body leaked: {}", e);
        }
    }

    /// Generated payments: accepted exactly in the valid range, with the fields as sent; an
    /// error names a field and never a value.
    #[test]
    fn payment_parse_accepts_exactly_the_valid_range(
        order in string_field(),
        account in string_field(),
        amount in amount_field(),
        extra in prop::option::of((text(), json_value())),
        shuffle in any::<bool>(),
    ) {
        let mut fields: Vec<(String, String)> = [
            ("order_id", &order),
            ("account", &account),
            ("amount_cents", &amount),
        ]
        .into_iter()
        .filter_map(|(name, f)| f.token().map(|t| (json!(name).to_string(), t)))
        .collect();
        if let Some((name, value)) = &extra
            && !["order_id", "account", "amount_cents"].contains(&name.as_str()) {
                fields.push((json!(name).to_string(), value.to_string()));
            }
        if shuffle {
            fields.reverse();
        }
        let body = format!(
            "{{{}}}",
            fields.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",")
        );
        let got = Payment::parse(&body);
        match (expected_payment(&order, &account, &amount), got) {
            (Some((o, a, n)), Ok(p)) => {
                prop_assert_eq!(p.order_id, o);
                prop_assert_eq!(p.account, a);
                prop_assert_eq!(p.amount_cents, n);
            }
            (None, Err(e)) => {
                prop_assert_eq!(e.kind(), ErrorKind::BadBody);
                let text = e.to_string();
                prop_assert!(!text.contains(SECRET), "body leaked: {}", text);
                prop_assert!(
                    ["order_id", "account", "amount_cents", "not JSON"]
                        .iter()
                        .any(|f| text.contains(f)),
                    "the error names no field: {}", text
                );
            }
            (want, got) => prop_assert!(false, "{}: expected {:?}, got {:?}", body, want, got),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The processor on random batches

#[derive(Debug, Clone)]
struct RecordSpec {
    /// `None`: no `messageId` field; `Some("")`: an empty one.
    id: Option<String>,
    body: String,
    group: String,
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    let id = prop_oneof![
        20 => (0..8u8).prop_map(|i| Some(format!("m-{i}"))),
        1 => Just(None),
        1 => Just(Some(String::new())),
    ];
    let body = prop_oneof![
        6 => (0..6u8, 0..3u8, 0..2_000i64).prop_map(|(o, a, n)| {
            json!({"order_id": format!("o-{o}"), "account": format!("acct-{a}"), "amount_cents": n})
                .to_string()
        }),
        1 => (0..6u8, -5..5i64).prop_map(|(o, n)| {
            json!({"order_id": format!("o-{o}"), "account": "acct-neg", "amount_cents": n})
                .to_string()
        }),
        1 => (0..6u8).prop_map(|o| {
            json!({"order_id": format!("o-{o}"), "account": "acct-max",
                   "amount_cents": Payment::MAX_AMOUNT_CENTS + 1})
                .to_string()
        }),
        2 => body(),
    ];
    (id, body, prop::sample::select(vec!["g-1", "g-2", "g-3"])).prop_map(|(id, body, group)| {
        RecordSpec {
            id,
            body,
            group: group.to_owned(),
        }
    })
}

fn records(specs: &[RecordSpec], fifo_queue: bool) -> Vec<sqs::Record> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let id = s.id.clone().unwrap_or_default();
            let r = if fifo_queue {
                sqs::fifo(&id, &s.group, &s.body).dedup(&format!("d-{}", i % 4))
            } else {
                sqs::record(&id, &s.body)
            };
            if s.id.is_none() { r.no_id() } else { r }
        })
        .collect()
}

proptest! {
    #![proptest_config(config(96))]

    /// Random batches (bodies good and malformed, ids and keys duplicated, ids missing) on a
    /// standard or a FIFO queue, with each key source, run twice: no panic; a batch with a
    /// record it cannot name fails whole; otherwise every record is a success or named once in
    /// the response by a non-empty id from the batch, no key is processed twice, and the
    /// balances are exactly the credits of the messages reported processed (none applied
    /// twice, none lost).
    #[test]
    fn processor_on_random_batches(
        specs in prop::collection::vec(record_spec(), 0..12),
        fifo_queue in any::<bool>(),
        source in prop::sample::select(vec![
            KeySource::MessageId,
            KeySource::JsonPointer("/order_id".into()),
            KeySource::BodySha256,
            KeySource::DeduplicationId,
        ]),
        concurrency in 1..4usize,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let ledger = MemoryLedger::new();
        let processor = Processor::builder(ledger.store().clone(), PaymentHandler::new(ledger.clone()))
            .key(source)
            .namespace("prop")
            .concurrency(concurrency)
            .build();
        let recs = records(&specs, fifo_queue);
        let nameable = specs.iter().all(|s| s.id.as_deref().is_some_and(|id| !id.is_empty()));
        let batch_ids: HashSet<String> =
            specs.iter().filter_map(|s| s.id.clone()).collect();
        let mut credited: BTreeMap<String, i64> = BTreeMap::new();
        let mut processed_keys: HashSet<String> = HashSet::new();
        for _run in 0..2 {
            let result = runtime.block_on(processor.process(sqs::lambda_event(&recs)));
            let report = match result {
                Err(e) => {
                    prop_assert!(!nameable, "a nameable batch failed whole: {}", e);
                    prop_assert_eq!(e.kind(), ErrorKind::InvalidEvent);
                    prop_assert!(!e.to_string().contains(SECRET), "{}", e);
                    continue;
                }
                Ok(report) => report,
            };
            prop_assert!(nameable, "a batch with an unnamed record was answered");
            prop_assert_eq!(report.items().len(), specs.len());
            let failed = sqs::failed_ids(&report.response());
            let failed_set: HashSet<&String> = failed.iter().collect();
            prop_assert_eq!(failed_set.len(), failed.len(), "an id named twice: {:?}", failed);
            for id in &failed {
                prop_assert!(batch_ids.contains(id), "{} is not in the batch", id);
            }
            let mut unsuccessful: HashMap<&str, bool> = HashMap::new();
            for (item, spec) in report.items().iter().zip(&specs) {
                prop_assert_eq!(Some(item.message_id.as_str()), spec.id.as_deref());
                *unsuccessful.entry(item.message_id.as_str()).or_default() |=
                    !item.outcome.is_success();
                // The item's one-line explanation, as the report's JSON carries it.
                let reported = serde_json::to_value(item).expect("an item as JSON");
                if let Some(detail) = reported["detail"].as_str() {
                    prop_assert!(!detail.contains(SECRET), "body leaked: {}", detail);
                }
                if item.outcome == sqs_claim::Outcome::Processed {
                    let key = item.key.clone().expect("processed under a claim, so with a key");
                    prop_assert!(
                        processed_keys.insert(key.clone()),
                        "key {} processed twice", key
                    );
                    let p = Payment::parse(&spec.body).expect("processed means it parsed");
                    *credited.entry(p.account).or_default() += p.amount_cents;
                }
            }
            for (id, bad) in unsuccessful {
                prop_assert_eq!(failed_set.contains(&id.to_owned()), bad, "{}", id);
            }
        }
        let balances: BTreeMap<String, i64> = runtime
            .block_on(ledger.balances())
            .expect("balances")
            .into_iter()
            .collect();
        prop_assert_eq!(balances, credited, "credits applied twice or lost");
    }
}
