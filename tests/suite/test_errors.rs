//! The error a user reads: `Display` is the error's own message and `source()` the chain (so a
//! chain reporter names each cause once), and a handler's own error kind survives into the
//! reported failure and the JSON report.

use crate::support;

use std::fmt;

use sqs_claim::{
    BoxError, Error, ErrorKind, FailureKind, KeySource, MemoryStore, Message, Processor,
};
use support::batch::*;
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

/// A start-up error is printed once, with `{}` (a `main` returning it, a Lambda init error):
/// that line names the store (password hidden), a server's `host:port`, and the whole chain
/// of causes, down to the server's own words.
#[cfg(all(feature = "settings", feature = "postgres", feature = "redis"))]
mod start_up {
    use std::time::Duration;

    use sqs_claim::ErrorKind;
    use sqs_claim::settings::StoreUrl;
    use sqs_claim_testkit::local::pg_url;

    async fn start_up_error(url: &str) -> sqs_claim::Error {
        let url: StoreUrl = url.parse().expect("a store URL");
        match url.open_checked(Duration::from_secs(20)).await {
            Ok(_) => panic!("{url} started"),
            Err(e) => e,
        }
    }

    /// PostgreSQL answers that the database does not exist: its words are on the `{}` line.
    #[tokio::test]
    async fn a_database_that_does_not_exist_is_named_on_the_line() {
        let base = pg_url();
        let (server, _) = base.rsplit_once('/').expect("postgres://.../DB");
        let err = start_up_error(&format!("{server}/sqs_claim_nosuchdb")).await;
        let text = err.to_string();
        assert!(
            text.contains("database \"sqs_claim_nosuchdb\" does not exist"),
            "{text}"
        );
        assert!(
            text.starts_with("cannot start on store postgres://"),
            "{text}"
        );
        assert_eq!(format!("{err:#}"), text, "nothing more hides under {{:#}}");
    }

    /// Nothing listens: the line names the host and port tried, never the password.
    #[tokio::test]
    async fn an_unreachable_server_is_named_by_host_and_port() {
        for (url, server) in [
            ("redis://127.0.0.1:1/", "127.0.0.1:1"),
            (
                "postgres://postgres:hunter2@127.0.0.1:1/test",
                "127.0.0.1:1",
            ),
        ] {
            let err = start_up_error(url).await;
            let text = err.to_string();
            assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{url}: {text}");
            assert!(
                text.contains(&format!("(server {server})")),
                "{url}: {text}"
            );
            assert!(
                text.to_lowercase().contains("refused"),
                "{url}: the cause is on the line: {text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}
