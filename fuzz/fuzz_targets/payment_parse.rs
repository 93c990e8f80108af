//! The payment body parser: never a panic; what it accepts is within the valid range and reads
//! back the same; an error is `bad_body` and never quotes the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqs_claim::ErrorKind;
use sqs_claim::reference::Payment;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match Payment::parse(body) {
        Ok(p) => {
            assert!((0..=Payment::MAX_AMOUNT_CENTS).contains(&p.amount_cents));
            assert!(!p.order_id.trim().is_empty() && !p.account.trim().is_empty());
            let again = Payment::parse(
                &serde_json::json!({
                    "order_id": p.order_id,
                    "account": p.account,
                    "amount_cents": p.amount_cents,
                })
                .to_string(),
            )
            .expect("a valid payment, written back, parses");
            assert_eq!(again, p);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::BadBody);
            let message = e.to_string();
            if body.len() >= 16 {
                assert!(!message.contains(body), "the body leaked into {message:?}");
            }
            // Nor any string value of it, when it is JSON.
            if let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(body) {
                for value in fields.values() {
                    if let Some(s) = value.as_str().filter(|s| s.len() >= 16) {
                        assert!(!message.contains(s), "a value leaked into {message:?}");
                    }
                }
            }
        }
    }
});
