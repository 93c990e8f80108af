//! Property tests (proptest) for everything that reads input from outside: the SQS event
//! decoding and key extraction (JSON pointers included). The payment parser's and the
//! processor's on random batches live with the example app (`examples/payments/tests/suite/test_properties.rs`).
//!
//! What must hold for any input: no panic; no body content in an error; the same input gives
//! the same answer.
//!
//! The case counts keep the file to a few seconds in a debug build. The fuzz targets in
//! `fuzz/` (cargo-fuzz) run the same entry points unbounded.

use proptest::prelude::*;
use serde_json::{Value, json};
use sqs_claim::events::SqsEvent;
use sqs_claim::{Envelope, ErrorKind, KeySource};
use sqs_claim_testkit::strategies::*;

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

    /// Parsing a `KeySource` never panics, and a JSON pointer is accepted exactly when it starts
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
        let parsed = s.parse::<KeySource>();
        prop_assert_eq!(s.parse::<KeySource>().is_ok(), parsed.is_ok(), "deterministic");
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
            let _ = parsed.map(|k| k.to_string());
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
            let first = source.extract(&msg, Envelope::None);
            let second = source.extract(&msg, Envelope::None);
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
        prop_assert!(KeySource::JsonPointer(ptr).extract(&msg, Envelope::None).is_err());
        prop_assert_eq!(
            KeySource::BodySha256.extract(&msg, Envelope::None).ok().flatten(),
            Some(sqs_claim::sha256_hex(b""))
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
            .extract(&message(Some(body.to_string())), Envelope::None)
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
            KeySource::BodySha256.extract(&message(Some(body.clone())), Envelope::None).ok().flatten(),
            Some(sqs_claim::sha256_hex(body.as_bytes()))
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
        ptr.extract(&message(Some(huge)), Envelope::None)
            .expect("huge but valid"),
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
                if let Err(e) = source.extract(&message(Some(body.clone())), Envelope::None) {
                    assert!(!e.to_string().contains(SECRET), "{e}");
                }
            }
            let _ = serde_json::from_str::<SqsEvent>(&body);
        }
    }
    // Within the limit, a deep pointer finds its value.
    let depth = 100;
    let body = format!("{}\"k\"{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    assert_eq!(
        KeySource::JsonPointer("/a".repeat(depth))
            .extract(&message(Some(body)), Envelope::None)
            .expect("within the limit"),
        Some("k".into())
    );
}
