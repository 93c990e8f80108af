//! The error a user reads: `Display` is the error's own message and `source()` the chain (so a
//! chain reporter names each cause once), and a handler's own error kind survives into the
//! reported failure and the JSON report.

mod common;

use std::fmt;

use common::*;
use sqs_claim::{
    BoxError, Error, ErrorKind, FailureKind, KeySource, MemoryStore, Message, Processor,
};
use tower::service_fn;

/// A handler's own error type wrapping ours, as an application error enum would.
#[derive(Debug)]
struct AppError(Error);

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("order handler failed")
    }
}

impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Every link's `Display`, joined as `anyhow`'s `{:#}` joins them.
fn chain_report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut links = Vec::new();
    let mut next = Some(e);
    while let Some(link) = next {
        links.push(link.to_string());
        next = link.source();
    }
    links.join(": ")
}

#[test]
fn a_chain_reporter_names_every_cause_once() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    let inner = Error::with_source(ErrorKind::StoreUnavailable, "claim failed", io);
    let outer = Error::with_source(ErrorKind::Publish, "outputs not published", inner);
    assert_eq!(outer.to_string(), "outputs not published");
    let report = chain_report(&outer);
    assert_eq!(
        report,
        "outputs not published: claim failed: connection refused"
    );
    for text in [
        "outputs not published",
        "claim failed",
        "connection refused",
    ] {
        assert_eq!(report.matches(text).count(), 1, "{report}");
    }
    // The one-line forms still name the root cause.
    assert_eq!(format!("{outer:#}"), report);
    assert_eq!(format!("{outer:?}"), format!("[publish] {report}"));
}

#[tokio::test]
async fn a_handler_error_kind_survives_into_the_failure_and_the_report() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Order {
        amount: u64,
    }
    let handler = service_fn(|msg: Message| async move {
        match msg.body() {
            // Ours, returned as is: `Message::json` fails with `BadBody`.
            "not json" => msg.json::<Order>().map(drop).map_err(BoxError::from),
            // Ours, behind the handler's own error type.
            "wrapped" => Err(AppError(Error::new(ErrorKind::Config, "no price list")).into()),
            // Not ours at all.
            _ => Err(BoxError::from("downstream said no")),
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .key(KeySource::MessageAttribute("key".into()))
        .build();
    let report = p
        .process(event(&[
            rec("m1", "not json").attr("key", "k1"),
            rec("m2", "wrapped").attr("key", "k2"),
            rec("m3", "plain").attr("key", "k3"),
            // A later copy of m1's key follows m1's failure, kind included.
            rec("m4", "not json").attr("key", "k1"),
        ]))
        .await
        .unwrap();

    let bad = failure_of(&report, "m1");
    assert_eq!(bad.kind, FailureKind::Handler);
    assert_eq!(bad.error_kind, Some(ErrorKind::BadBody));
    let wrapped = failure_of(&report, "m2");
    assert_eq!(wrapped.kind, FailureKind::Handler);
    assert_eq!(wrapped.error_kind, Some(ErrorKind::Config));
    // The failure's message keeps the chain: the wrapper's text and the cause's.
    assert_eq!(wrapped.message, "order handler failed: no price list");
    let plain = failure_of(&report, "m3");
    assert_eq!(plain.kind, FailureKind::Handler);
    assert_eq!(plain.error_kind, None);
    let copy = failure_of(&report, "m4");
    assert_eq!(copy.kind, FailureKind::Handler);
    assert_eq!(copy.error_kind, Some(ErrorKind::BadBody));

    let json = report.to_json();
    let details: Vec<&str> = json["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["detail"].as_str().unwrap())
        .collect();
    // The category stays first (`handler_error:`), so scripts reading it see no change.
    assert!(
        details[0].starts_with("handler_error: [bad_body] "),
        "{details:?}"
    );
    assert_eq!(
        details[1],
        "handler_error: [config] order handler failed: no price list"
    );
    assert_eq!(details[2], "handler_error: downstream said no");
    assert!(
        details[3].starts_with("handler_error: [bad_body] same key as message"),
        "{details:?}"
    );
}
