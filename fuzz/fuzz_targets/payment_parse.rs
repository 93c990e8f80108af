//! The payment body parser: never a panic; what it accepts is within the valid range and reads
//! back the same; an error is `bad_body` and never quotes the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqs_claim::ErrorKind;
use payments::Payment;

const CANARY: &str = "S3CR3T";

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
            // The canary stands for the body's content (seeds and the dictionary carry it):
            // no error wording contains it, so finding it in an error is a leak. (Checking for
            // the whole body instead finds bodies that are a piece of the error's own words.)
            let message = e.to_string();
            assert!(
                !message.contains(CANARY),
                "the body leaked into {message:?}"
            );
        }
    }
});
