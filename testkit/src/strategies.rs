//! [proptest](https://docs.rs/proptest) generators for a consumer's property tests: strings
//! with the characters that break parsers and logs, any JSON value, bodies (valid JSON, JSON cut
//! short, not JSON) that all carry a [`SECRET`] marker, SQS-shaped records, JSON pointers.
//!
//! The marker is the point: a consumer must never put a message body in an error, a log line or
//! a `Debug` output, so a property test feeds it marked bodies and asserts the marker never
//! comes back.
//!
//! ```
//! use proptest::prelude::*;
//! use sqs_claim_testkit::strategies::{SECRET, body, config};
//!
//! fn parse(body: &str) -> Result<serde_json::Value, String> {
//!     // Says where, never what.
//!     serde_json::from_str(body).map_err(|e| format!("not JSON at column {}", e.column()))
//! }
//!
//! proptest!(config(64), |(b in body())| {
//!     if let Err(e) = parse(&b) {
//!         prop_assert!(!e.contains(SECRET), "{}", e);
//!     }
//! });
//! ```

use aws_lambda_events::sqs::SqsMessage;
use proptest::prelude::*;
use serde_json::{Value, json};

/// `cases` cases, without a failure-persistence file (a failure prints its minimal input; it
/// becomes a plain regression test here).
pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A marker put into bodies; no error may ever contain it.
pub const SECRET: &str = "S3CR3T";

/// Strings with the characters that matter: JSON and pointer syntax, escapes, unicode (wide,
/// combining, astral, controls), and the marker.
pub fn text() -> impl Strategy<Value = String> {
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
pub fn json_value() -> impl Strategy<Value = Value> {
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
pub fn record_ish() -> impl Strategy<Value = Value> {
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
pub fn valid_record() -> impl Strategy<Value = Value> {
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

/// An `SqsMessage` with the id `m-1` and this body, nothing else set.
pub fn message(body: Option<String>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.body = body;
    m
}

/// `s` as one RFC 6901 reference token.
pub fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Bodies: valid JSON (objects most of all), JSON cut short, and text that is not JSON, all
/// carrying the marker somewhere.
pub fn body() -> impl Strategy<Value = String> {
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

/// JSON pointers (RFC 6901): the usual `/order_id`, paths of escaped tokens, and raw text after
/// a `/`. Never one containing [`SECRET`]: a pointer is configuration, which may appear in
/// errors.
pub fn pointer() -> impl Strategy<Value = String> {
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
