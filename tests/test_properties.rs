//! Property tests (proptest) for everything that reads input from outside: the SQS event
//! decoding, key extraction (JSON pointers included), the payment body parser, and the
//! processor on random batches over the memory ledger.
//!
//! What must hold for any input: no panic; no body content in an error; the same input gives
//! the same answer; the payment parser accepts exactly the valid range; every record of a
//! batch is a success or named once in the partial batch response, by a non-empty id from the
//! batch; no credit is applied twice.
//!
//! The case counts keep the file to a few seconds in a debug build. The fuzz targets in
//! `fuzz/` (cargo-fuzz) run the same entry points unbounded.
#![cfg(all(feature = "dynamodb", feature = "sqlite"))]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;
use serde_json::{Value, json};
use sqs_claim::events::{SqsEvent, SqsMessage};
use sqs_claim::reference::{Ledger, MemoryLedger, Payment, PaymentHandler};
use sqs_claim::{ErrorKind, KeySource, Processor};

/// `cases` cases, without a failure-persistence file (a failure prints its minimal input; it
/// becomes a plain regression test here).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A marker put into bodies; no error may ever contain it.
const SECRET: &str = "S3CR3T";

// ---------------------------------------------------------------------------------------------
// Generators

/// Strings with the characters that matter: JSON and pointer syntax, escapes, unicode (wide,
/// combining, astral, controls), and the marker.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::char::range('a', 'z').prop_map(String::from),
            2 => prop::sample::select(vec![
                "~", "~0", "~1", "/", "\\", "\"", "{", "}", "[", "]", ":", ",", " ", "\n", "\t",
                "\u{0}", "\u{7f}", "é", "ß", "日本", "\u{301}", "🦀", "\u{10FFFF}", "\u{FEFF}",
                "-", "0", "9", "e", ".", SECRET,
            ])
            .prop_map(str::to_owned),
            1 => any::<char>().prop_map(String::from),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object that looks like an SQS record: the real field names (and some others), each with
/// any JSON value.
fn record_ish() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        4 => prop::sample::select(vec![
            "messageId", "receiptHandle", "body", "md5OfBody", "md5OfMessageAttributes",
            "attributes", "messageAttributes", "eventSource", "eventSourceARN", "awsRegion",
        ])
        .prop_map(str::to_owned),
        1 => text(),
    ];
    prop::collection::vec((name, json_value()), 0..10)
        .prop_map(|fields| Value::Object(fields.into_iter().collect()))
}

/// A well-formed record: every field of the right type, any content.
fn valid_record() -> impl Strategy<Value = Value> {
    (
        prop::option::of(text()),
        prop::option::of(text()),
        prop::collection::btree_map(text(), text(), 0..4),
        prop::collection::btree_map(text(), text(), 0..3),
    )
        .prop_map(|(id, body, attributes, message_attributes)| {
            let mut r = json!({
                "receiptHandle": "rh",
                "attributes": attributes,
                "messageAttributes": message_attributes
                    .into_iter()
                    .map(|(k, v)| (k, json!({
                        "stringValue": v,
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": "String"
                    })))
                    .collect::<serde_json::Map<_, _>>(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
                "awsRegion": "us-east-1"
            });
            if let Some(id) = id {
                r["messageId"] = json!(id);
            }
            if let Some(body) = body {
                r["body"] = json!(body);
            }
            r
        })
}

fn message(body: Option<String>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.body = body;
    m
}

/// `s` as one RFC 6901 reference token.
fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Bodies: valid JSON (objects most of all), JSON cut short, and text that is not JSON, all
/// carrying the marker somewhere.
fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => json_value().prop_map(|v| v.to_string()),
        2 => (json_value(), text()).prop_map(|(v, k)| {
            json!({ k: v, "secret": SECRET, "order_id": SECRET }).to_string()
        }),
        2 => (json_value(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let text = json!({"secret": SECRET, "v": v}).to_string();
            let mut at = cut.index(text.len().max(1));
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text[..at].to_owned()
        }),
        1 => text().prop_map(|t| format!("{SECRET} {t}")),
    ]
}

fn pointer() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/order_id".to_owned()),
        Just("/secret".to_owned()),
        prop::collection::vec(text(), 1..4).prop_map(|tokens| {
            tokens
                .iter()
                .map(|t| format!("/{}", escape(t)))
                .collect::<String>()
        }),
        text().prop_map(|t| format!("/{t}")),
    ]
    // The pointer is configuration (it may appear in errors); the marker stands for the body.
    .prop_filter("the marker is the body's", |p| !p.contains(SECRET))
}

// ---------------------------------------------------------------------------------------------
// SQS event decoding

proptest! {
    #![proptest_config(config(384))]

    /// Any JSON, or anything shaped like an event: decoding never panics, and what decodes
    /// survives a round trip unchanged.
    #[test]
    fn event_decoding_never_panics(v in prop_oneof![
        json_value(),
        prop::collection::vec(prop_oneof![record_ish(), json_value()], 0..4)
            .prop_map(|records| json!({ "Records": records })),
    ]) {
        let decoded = serde_json::from_value::<SqsEvent>(v.clone());
        let from_text = serde_json::from_str::<SqsEvent>(&v.to_string());
        prop_assert_eq!(decoded.is_ok(), from_text.is_ok());
        if let Ok(event) = decoded {
            let again: SqsEvent = serde_json::from_value(
                serde_json::to_value(&event).expect("a decoded event serializes"),
            )
            .expect("a serialized event decodes");
            prop_assert_eq!(again, event);
        }
    }

    /// Any text: decoding never panics.
    #[test]
    fn event_text_never_panics(s in prop_oneof![
        text(),
        json_value().prop_map(|v| format!("{{\"Records\":[{v}")),
    ]) {
        let _ = serde_json::from_str::<SqsEvent>(&s);
    }

    /// A well-formed event decodes, and keeps every field as sent.
    #[test]
    fn valid_events_round_trip(records in prop::collection::vec(valid_record(), 0..5)) {
        let v = json!({ "Records": records });
        let event: SqsEvent = serde_json::from_value(v.clone()).expect("a valid event");
        prop_assert_eq!(event.records.len(), records.len());
        for (decoded, sent) in event.records.iter().zip(&records) {
            prop_assert_eq!(decoded.message_id.as_deref(), sent["messageId"].as_str());
            prop_assert_eq!(decoded.body.as_deref(), sent["body"].as_str());
            for (k, val) in sent["attributes"].as_object().expect("object") {
                prop_assert_eq!(decoded.attributes.get(k).map(String::as_str), val.as_str());
            }
            for (k, val) in sent["messageAttributes"].as_object().expect("object") {
                prop_assert_eq!(
                    decoded.message_attributes.get(k).and_then(|a| a.string_value.as_deref()),
                    val["stringValue"].as_str()
                );
            }
        }
        let again: SqsEvent =
            serde_json::from_value(serde_json::to_value(&event).expect("serialize"))
                .expect("decode");
        prop_assert_eq!(again, event);
    }
}

// ---------------------------------------------------------------------------------------------
// Key sources and extraction

proptest! {
    #![proptest_config(config(512))]

    /// `KeySource::parse` never panics, and a JSON pointer is accepted exactly when it starts
    /// with '/'.
    #[test]
    fn key_source_parsing(s in prop_oneof![
        text(),
        text().prop_map(|t| format!("json:{t}")),
        text().prop_map(|t| format!("json:/{t}")),
        text().prop_map(|t| format!("attribute:{t}")),
        prop::sample::select(vec![
            "message-id", "message_id", "body-sha256", "body_sha256", "dedup-id",
            "deduplication-id", " message-id ", "json:", "attribute:",
        ]).prop_map(str::to_owned),
    ]) {
        let parsed = KeySource::parse(&s);
        prop_assert_eq!(KeySource::parse(&s).is_ok(), parsed.is_ok(), "deterministic");
        let trimmed = s.trim();
        if let Some(ptr) = trimmed.strip_prefix("json:") {
            prop_assert_eq!(parsed.is_ok(), ptr.starts_with('/'), "{:?}", s);
            if let Ok(KeySource::JsonPointer(p)) = &parsed {
                prop_assert_eq!(p.as_str(), ptr);
            }
        }
        if let Err(e) = parsed {
            prop_assert_eq!(e.kind(), ErrorKind::Config);
        } else {
            let _ = parsed.map(|k| k.describe());
        }
    }

    /// Extraction with any pointer from any body: no panic, the same answer every time, and
    /// an error never quotes the body.
    #[test]
    fn key_extraction_is_total_and_quiet(ptr in pointer(), body in body()) {
        for source in [
            KeySource::JsonPointer(ptr.clone()),
            KeySource::BodySha256,
            KeySource::MessageId,
            KeySource::MessageAttribute(ptr.clone()),
            KeySource::DeduplicationId,
        ] {
            let msg = message(Some(body.clone()));
            let first = source.extract(&msg);
            let second = source.extract(&msg);
            match (&first, &second) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => {
                    prop_assert_eq!(a.to_string(), b.to_string());
                    prop_assert_eq!(a.kind(), ErrorKind::MissingKey);
                    let text = a.to_string();
                    prop_assert!(!text.contains(SECRET), "body leaked: {}", text);
                    prop_assert!(text.len() <= 200 + 12 * ptr.len(), "{}", text);
                }
                _ => prop_assert!(false, "not deterministic: {:?} then {:?}", first, second),
            }
            if let Ok(Some(key)) = &first {
                prop_assert!(!key.is_empty(), "an empty key is a missing key");
            }
        }
        // Without a body, a pointer finds nothing to read and the hash is the empty string's.
        let msg = message(None);
        prop_assert!(KeySource::JsonPointer(ptr).extract(&msg).is_err());
        prop_assert_eq!(
            KeySource::BodySha256.extract(&msg).ok().flatten(),
            Some(sqs_claim::key::sha256_hex(b""))
        );
    }

    /// RFC 6901 escapes: a member of any name (with '~', '/', unicode) is found by its escaped
    /// pointer, at any depth; strings as they are, other values as their JSON text.
    #[test]
    fn json_pointer_escapes(
        names in prop::collection::vec(text(), 1..4),
        value in json_value(),
    ) {
        let mut body = value.clone();
        for name in names.iter().rev() {
            // Neighbours with the escaped characters as names; the member itself wins a clash.
            let mut object = serde_json::Map::new();
            object.insert("~".into(), json!(1));
            object.insert("/".into(), json!(2));
            object.insert(name.clone(), body);
            body = Value::Object(object);
        }
        let ptr: String = names.iter().map(|n| format!("/{}", escape(n))).collect();
        let got = KeySource::JsonPointer(ptr)
            .extract(&message(Some(body.to_string())))
            .expect("valid JSON");
        // serde_json's float parsing is not always the exact inverse of its printing, so the
        // value as the body's text reads back is the reference (the key is still a pure
        // function of the body).
        let value: Value = serde_json::from_str(&value.to_string()).expect("JSON");
        let want = match &value {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        prop_assert_eq!(got, want);
    }

    /// The body's SHA-256: a pure function of the body.
    #[test]
    fn body_sha256_is_the_body_hash(body in body()) {
        prop_assert_eq!(
            KeySource::BodySha256.extract(&message(Some(body.clone()))).ok().flatten(),
            Some(sqs_claim::key::sha256_hex(body.as_bytes()))
        );
    }
}

/// Bodies at the edges: huge, deeply nested (past serde_json's recursion limit), and a long
/// pointer. No panic, no stack overflow, no body in the error.
#[test]
fn huge_and_deep_bodies() {
    let huge = json!({"order_id": "o-1", "pad": SECRET.repeat(200_000)}).to_string();
    let ptr = KeySource::JsonPointer("/order_id".into());
    assert_eq!(
        ptr.extract(&message(Some(huge))).expect("huge but valid"),
        Some("o-1".into())
    );
    for depth in [100, 127, 128, 129, 10_000, 1_000_000] {
        let deep = format!("{}{SECRET}{}", "[".repeat(depth), "]".repeat(depth));
        let deep_obj = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        for body in [deep, deep_obj] {
            for source in [
                KeySource::JsonPointer("/0".into()),
                KeySource::JsonPointer("/a".repeat(depth.min(200))),
            ] {
                if let Err(e) = source.extract(&message(Some(body.clone()))) {
                    assert!(!e.to_string().contains(SECRET), "{e}");
                }
            }
            if let Err(e) = Payment::parse(&body) {
                assert!(!e.to_string().contains(SECRET), "{e}");
            }
            let _ = serde_json::from_str::<SqsEvent>(&body);
        }
    }
    // Within the limit, a deep pointer finds its value.
    let depth = 100;
    let body = format!("{}\"k\"{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    assert_eq!(
        KeySource::JsonPointer("/a".repeat(depth))
            .extract(&message(Some(body)))
            .expect("within the limit"),
        Some("k".into())
    );
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
        if let Some((name, value)) = &extra {
            if !["order_id", "account", "amount_cents"].contains(&name.as_str()) {
                fields.push((json!(name).to_string(), value.to_string()));
            }
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

fn records(specs: &[RecordSpec], fifo_queue: bool) -> Vec<common::Rec> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let id = s.id.clone().unwrap_or_default();
            let r = if fifo_queue {
                common::fifo(&id, &s.group, &s.body).dedup(&format!("d-{}", i % 4))
            } else {
                common::rec(&id, &s.body)
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
        let processor = Processor::builder(ledger.clone(), PaymentHandler::new(ledger.clone()))
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
            let result = runtime.block_on(processor.process(common::event(&recs)));
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
            let failed = common::failed_ids(&report.response());
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
                if let Some(detail) = item.outcome.detail() {
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
