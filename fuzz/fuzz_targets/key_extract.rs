//! Key sources and extraction: the input is `SOURCE\nBODY` (the first line a key source such
//! as `json:/order_id`, the rest the body). Never a panic, the same answer twice, and an error
//! never quotes the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqs_claim::KeySource;
use sqs_claim::events::SqsMessage;

const CANARY: &str = "S3CR3T";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (source, body) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(source) = KeySource::parse(source) else {
        return;
    };
    let mut msg = SqsMessage::default();
    msg.message_id = Some("m-1".into());
    msg.body = Some(body.to_owned());
    msg.attributes
        .insert("MessageDeduplicationId".into(), body.to_owned());
    let first = source.extract(&msg);
    let second = source.extract(&msg);
    match (&first, &second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "not deterministic"),
        (Err(a), Err(b)) => {
            let message = a.to_string();
            assert_eq!(message, b.to_string(), "not deterministic");
            // The canary stands for the body's content (seeds and the dictionary carry it):
            // no error wording contains it, so finding it in an error is a leak, unless the
            // key source (configuration, which errors may quote) has it too.
            if !source.describe().contains(CANARY) {
                assert!(
                    !message.contains(CANARY),
                    "the body leaked into {message:?}"
                );
            }
        }
        _ => panic!("not deterministic: {first:?} then {second:?}"),
    }
    if let Ok(Some(key)) = first {
        assert!(!key.is_empty(), "an empty key is a missing key");
    }
});
