//! SQS event decoding: any bytes either decode or are refused, never a panic; an event that
//! decodes survives a round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqs_claim::events::SqsEvent;

fuzz_target!(|data: &[u8]| {
    let Ok(event) = serde_json::from_slice::<SqsEvent>(data) else {
        return;
    };
    let text = serde_json::to_string(&event).expect("a decoded event serializes");
    let again: SqsEvent = serde_json::from_str(&text).expect("a serialized event decodes");
    assert_eq!(again, event, "round trip changed the event");
});
