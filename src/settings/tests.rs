//! The settings reader's tests: every variable read, each bad value named, the store URLs.

use super::*;
#[cfg(feature = "powertools")]
use crate::powertools::{HashFunction, RecordPayload};
use std::collections::HashMap;

/// The settings read from `vars` alone (the other settings tests use it too).
pub(super) fn settings(vars: &[(&str, &str)]) -> Result<Settings, Error> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Settings::from_lookup(|k| map.get(k).cloned())
}

#[test]
fn defaults() {
    let s = settings(&[]).expect("empty env is valid");
    assert_eq!(s.key, None);
    assert_eq!(s.namespace, None);
    assert_eq!(
        s.metrics_namespace.as_deref(),
        Some(DEFAULT_METRICS_NAMESPACE)
    );
    assert!(s.lambda_store().is_err(), "Lambda needs a table or a store");
    let s = settings(&[("SQS_CLAIM_TABLE", "claims")]).expect("valid");
    assert_eq!(
        s.lambda_store().expect("dynamodb"),
        StoreUrl::DynamoDb {
            table: "claims".into(),
            key_schema: None,
        }
    );
}

#[test]
fn every_variable_is_read() {
    let mut vars = vec![
        ("SQS_CLAIM_STORE", "memory:"),
        ("SQS_CLAIM_KEY", "message-id"),
        ("SQS_CLAIM_ENVELOPE", "eventbridge"),
        ("SQS_CLAIM_NAMESPACE", "ns"),
        ("SQS_CLAIM_TTL_SECS", "60"),
        ("SQS_CLAIM_LEASE_SECS", "30"),
        ("SQS_CLAIM_CONCURRENCY", "3"),
        ("SQS_CLAIM_WARM_CACHE", "500"),
        ("SQS_CLAIM_FIFO_MODE", "whole-batch"),
        ("SQS_CLAIM_STORE_UNAVAILABLE", "fail-open"),
        ("SQS_CLAIM_DEADLINE_MARGIN_MS", "0"),
        ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "1500"),
        ("SQS_CLAIM_ANSWER_RESERVE_MS", "400"),
        ("SQS_CLAIM_HANDLER_TIMEOUT_MS", "5000"),
        ("SQS_CLAIM_LEASE_AT_LEAST_SECS", "3600"),
    ];
    // The failure queue's settings need the `sqs` feature (else they are refused).
    if cfg!(feature = "sqs") {
        vars.extend([
            (
                "SQS_CLAIM_FAILURE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/failures",
            ),
            ("SQS_CLAIM_MAX_RECEIVES", "3"),
        ]);
    }
    let s = settings(&vars).expect("valid");
    assert_eq!(s.store, Some(StoreUrl::Memory));
    assert_eq!(s.key, Some(KeySource::MessageId));
    assert_eq!(s.envelope, Envelope::EventBridge);
    assert_eq!(s.namespace.as_deref(), Some("ns"));
    assert_eq!(s.ttl, Duration::from_secs(60));
    assert_eq!(s.lease, Duration::from_secs(30));
    assert_eq!(s.lease_at_least, Some(Duration::from_secs(3600)));
    assert_eq!(s.concurrency, Some(3));
    assert_eq!(s.warm_cache, Some(500));
    assert_eq!(s.fifo, FifoMode::WholeBatch);
    assert_eq!(s.store_unavailable, StoreUnavailable::FailOpen);
    assert_eq!(s.deadline_margin, Duration::ZERO);
    assert_eq!(s.startup_timeout, Duration::from_millis(1500));
    assert_eq!(s.answer_reserve, Duration::from_millis(400));
    assert_eq!(s.handler_timeout, Some(Duration::from_secs(5)));
    if cfg!(feature = "sqs") {
        assert!(s.failure_queue_url.is_some());
        assert_eq!(s.max_receives, 3);
    }
    assert_eq!(s.backoff, None, "off unless asked");
    #[cfg(feature = "sqs")]
    assert!(s.dead_letter_at_once.is_none(), "off unless asked");
    let metrics = |v: &str| {
        settings(&[("SQS_CLAIM_METRICS_NAMESPACE", v)])
            .expect("valid")
            .metrics_namespace
    };
    assert_eq!(metrics("payments/prod").as_deref(), Some("payments/prod"));
    assert_eq!(metrics("off"), None);
    assert_eq!(metrics("OFF"), None);
}

#[test]
fn invalid_values_name_the_variable() {
    for (var, value) in [
        ("SQS_CLAIM_STORE", "ftp://x"),
        ("SQS_CLAIM_KEY", "json:order_id"),
        ("SQS_CLAIM_ENVELOPE", "kinesis"),
        ("SQS_CLAIM_KEY", "envelope-id"),
        ("SQS_CLAIM_TTL_SECS", "0"),
        ("SQS_CLAIM_TTL_SECS", "1h"),
        ("SQS_CLAIM_LEASE_SECS", "-1"),
        ("SQS_CLAIM_CONCURRENCY", "0"),
        ("SQS_CLAIM_FIFO_MODE", "strict"),
        ("SQS_CLAIM_STORE_UNAVAILABLE", "open"),
        ("SQS_CLAIM_DEADLINE_MARGIN_MS", "2s"),
        ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "0"),
        ("SQS_CLAIM_HANDLER_TIMEOUT_MS", "0"),
        ("SQS_CLAIM_ANSWER_RESERVE_MS", "-1"),
        ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "5s"),
        ("SQS_CLAIM_FAILURE_QUEUE_URL", "failures"),
        ("SQS_CLAIM_MAX_RECEIVES", "0"),
        ("SQS_CLAIM_MAX_RECEIVES", "5x"),
        ("SQS_CLAIM_METRICS_NAMESPACE", "AWS/Lambda"),
        ("SQS_CLAIM_METRICS_NAMESPACE", "naïve"),
    ] {
        let err = settings(&[(var, value)]).expect_err(var);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains(var), "{var}: {err}");
    }
    for envelope in ["none", "s3"] {
        let err = settings(&[
            ("SQS_CLAIM_KEY", "envelope-id"),
            ("SQS_CLAIM_ENVELOPE", envelope),
        ])
        .expect_err(envelope);
        assert!(err.to_string().contains("SQS_CLAIM_ENVELOPE"), "{err}");
    }
    for envelope in ["sns", "eventbridge"] {
        let s = settings(&[
            ("SQS_CLAIM_KEY", "envelope-id"),
            ("SQS_CLAIM_ENVELOPE", envelope),
        ])
        .expect(envelope);
        assert_eq!(s.key, Some(KeySource::EnvelopeId));
    }
    let err = settings(&[("SQS_CLAIM_TABLE", "a b")])
        .expect("read")
        .lambda_store()
        .expect_err("bad table");
    assert!(err.to_string().contains("SQS_CLAIM_TABLE"), "{err}");
}

/// `SQS_CLAIM_DYNAMODB_PARTITION_KEY` and `SQS_CLAIM_DYNAMODB_SORT_KEY` give the claims
/// table's layout, applied to a `dynamodb:` store and to a tiered store's DynamoDB tier
/// (and ignored by stores without one); unset, the store's default.
#[test]
fn the_key_layout_comes_from_its_two_variables() {
    let single_table = DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM");
    let s = settings(&[
        ("SQS_CLAIM_TABLE", "app"),
        (PARTITION_KEY_VAR, " pk=CLAIM#{key} "),
        (SORT_KEY_VAR, "sk=CLAIM"),
    ])
    .expect("valid");
    assert_eq!(s.dynamodb_keys.as_ref(), Some(&single_table));
    for url in [
        s.lambda_store().expect("lambda"),
        s.cli_store().expect("cli"),
    ] {
        assert_eq!(
            url,
            StoreUrl::DynamoDb {
                table: "app".into(),
                key_schema: Some(single_table.clone()),
            }
        );
        assert_eq!(
            url.to_string(),
            "dynamodb:app (keys: pk=CLAIM#{key}, sk=CLAIM)"
        );
    }
    // A tiered store needs the `redis` feature, an SQLite one `sqlite` (else refused).
    if cfg!(feature = "redis") {
        let s = settings(&[
            ("SQS_CLAIM_STORE", "tiered:redis://h/|dynamodb:app"),
            (PARTITION_KEY_VAR, "pk=CLAIM#{key}"),
            (SORT_KEY_VAR, "sk=CLAIM"),
        ])
        .expect("valid");
        let StoreUrl::Tiered { durable, .. } = s.lambda_store().expect("tiered") else {
            panic!("not tiered");
        };
        assert!(
            matches!(
                *durable,
                StoreUrl::DynamoDb { key_schema: Some(ref k), .. } if *k == single_table
            ),
            "{durable:?}"
        );
    }
    let s = settings(&[
        ("SQS_CLAIM_STORE", "memory:"),
        (PARTITION_KEY_VAR, "pk=CLAIM#{key}"),
    ])
    .expect("valid");
    assert_eq!(s.cli_store().expect("memory"), StoreUrl::Memory);
    // A partition key alone; a fixed partition with the key in the sort key.
    let s = settings(&[(PARTITION_KEY_VAR, "pk=CLAIM#{key}")]).expect("valid");
    assert_eq!(
        s.dynamodb_keys,
        Some(DynamoDbKeySchema::partition("pk", "CLAIM#{key}"))
    );
    let s =
        settings(&[(PARTITION_KEY_VAR, "pk=CLAIMS"), (SORT_KEY_VAR, "sk={key}")]).expect("valid");
    assert_eq!(
        s.dynamodb_keys,
        Some(DynamoDbKeySchema::partition("pk", "CLAIMS").with_sort("sk", "{key}"))
    );
    // Unset or empty: the default layout.
    for vars in [&[][..], &[(PARTITION_KEY_VAR, " "), (SORT_KEY_VAR, "")]] {
        let s = settings(vars).expect("valid");
        assert_eq!(s.dynamodb_keys, None);
        let s = settings(&[&[("SQS_CLAIM_TABLE", "app")], vars].concat()).expect("valid");
        assert!(matches!(
            s.lambda_store().expect("dynamodb"),
            StoreUrl::DynamoDb {
                key_schema: None,
                ..
            }
        ));
    }
}

/// A bad layout is one `Config` error that names the variable(s) it came from and says
/// what is wrong, in the library's words where the library checks it.
#[test]
fn a_bad_key_layout_names_its_variable_and_the_fault() {
    for (vars, names, says) in [
        (
            &[(PARTITION_KEY_VAR, "pk")][..],
            &[PARTITION_KEY_VAR][..],
            "is not NAME=TEMPLATE",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, "CLAIM")],
            &[SORT_KEY_VAR],
            "is not NAME=TEMPLATE",
        ),
        (
            &[(PARTITION_KEY_VAR, "=CLAIM#{key}")],
            &[PARTITION_KEY_VAR],
            "the attribute name is empty",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, " =CLAIM")],
            &[PARTITION_KEY_VAR, SORT_KEY_VAR],
            "the attribute name is empty",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk=CLAIM"), (SORT_KEY_VAR, "sk=CLAIM")],
            &[PARTITION_KEY_VAR, SORT_KEY_VAR],
            "no template contains {key}",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk=CLAIM")],
            &[PARTITION_KEY_VAR],
            "no template contains {key}",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk=")],
            &[PARTITION_KEY_VAR],
            "the template is empty",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, "pk=CLAIM")],
            &[PARTITION_KEY_VAR, SORT_KEY_VAR],
            "both named",
        ),
        (
            &[(PARTITION_KEY_VAR, "pk={key}#{key}")],
            &[PARTITION_KEY_VAR],
            "at most once",
        ),
        (
            &[(PARTITION_KEY_VAR, "status={key}")],
            &[PARTITION_KEY_VAR],
            "also the record's status attribute",
        ),
        (
            &[(SORT_KEY_VAR, "sk={key}")],
            &[SORT_KEY_VAR],
            "needs a partition key",
        ),
    ] {
        let err = settings(vars).expect_err(&format!("{vars:?}"));
        assert_eq!(err.kind(), ErrorKind::Config, "{vars:?}");
        let text = err.to_string();
        assert!(text.contains(says), "{vars:?}: {text}");
        for name in names {
            assert!(text.contains(name), "{vars:?}: {text}");
        }
    }
}

/// The interop is on with a handler (or a key prefix), its function name read as
/// Powertools reads it: the variable, else `AWS_LAMBDA_FUNCTION_NAME` (empty kept), else
/// `test-func`.
#[cfg(feature = "powertools")]
#[test]
fn powertools_keys_come_from_their_variables() {
    use serde_json::json;
    assert_eq!(settings(&[]).expect("valid").powertools, None);
    let handler = (POWERTOOLS_HANDLER_VAR, " app.record_handler ");
    let with = |vars: &[(&str, &str)]| {
        settings(vars)
            .expect("valid")
            .powertools
            .expect("interop on")
    };
    assert_eq!(
        with(&[handler]),
        PowertoolsFormat::new("test-func", "app.record_handler")
    );
    assert_eq!(
        with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")]).prefix(),
        "orders-fn.app.record_handler"
    );
    assert_eq!(
        with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "")]).prefix(),
        ".app.record_handler",
        "Powertools keeps an empty function name"
    );
    assert_eq!(
        with(&[
            handler,
            ("AWS_LAMBDA_FUNCTION_NAME", "sqs-claim-fn"),
            (POWERTOOLS_FUNCTION_VAR, "orders-fn"),
        ])
        .prefix(),
        "orders-fn.app.record_handler"
    );
    assert_eq!(
        with(&[handler, (POWERTOOLS_KEY_PREFIX_VAR, "orders")]).prefix(),
        "orders"
    );
    assert_eq!(
        with(&[(POWERTOOLS_KEY_PREFIX_VAR, "orders")]),
        PowertoolsFormat::with_key_prefix("orders")
    );
    assert_eq!(
        with(&[handler, (POWERTOOLS_HASH_VAR, "sha256")]).hash_function(),
        HashFunction::Sha256
    );
    assert_eq!(
        with(&[handler, (POWERTOOLS_HASH_VAR, "md5")]).hash_function(),
        HashFunction::Md5
    );
    for (value, payload) in [
        ("body", RecordPayload::Body),
        ("json:/amount", RecordPayload::BodyJson("/amount".into())),
        ("json:", RecordPayload::BodyJson(String::new())),
    ] {
        assert_eq!(
            with(&[handler, (POWERTOOLS_VALIDATION_VAR, value)]),
            PowertoolsFormat::new("test-func", "app.record_handler")
                .with_record_validation(payload),
            "{value}"
        );
    }
    // The record handler of the app's default key, `powertools_json(body).order_id`.
    let format = with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")]);
    assert_eq!(
        format.key(&json!("ord-1001")),
        PowertoolsFormat::new("orders-fn", "app.record_handler").key(&json!("ord-1001"))
    );
}

#[cfg(feature = "powertools")]
#[test]
fn bad_powertools_settings_name_the_variable() {
    let handler = (POWERTOOLS_HANDLER_VAR, "app.record_handler");
    for vars in [
        &[(POWERTOOLS_HANDLER_VAR, "record_handler")][..],
        &[(POWERTOOLS_HANDLER_VAR, "app.record handler")],
        &[(POWERTOOLS_HANDLER_VAR, "app.h#1")],
        &[(POWERTOOLS_HANDLER_VAR, ".record_handler")],
        &[handler, (POWERTOOLS_HASH_VAR, "sha1")],
        &[handler, (POWERTOOLS_HASH_VAR, "MD5")],
        &[handler, (POWERTOOLS_VALIDATION_VAR, "json:amount")],
        &[
            handler,
            (POWERTOOLS_VALIDATION_VAR, "powertools_json(body)"),
        ],
        // Set while the interop is off: a typo in the switch must not pass silently.
        &[(POWERTOOLS_FUNCTION_VAR, "orders-fn")],
        &[(POWERTOOLS_HASH_VAR, "sha256")],
        &[(POWERTOOLS_VALIDATION_VAR, "body")],
    ] {
        let err = settings(vars).expect_err(&format!("{vars:?}"));
        assert_eq!(err.kind(), ErrorKind::Config, "{vars:?}");
        let named = vars.last().expect("a variable").0;
        assert!(err.to_string().contains(named), "{vars:?}: {err}");
    }
}

#[test]
fn cli_store_prefers_the_store_then_the_table() {
    let s = settings(&[]).expect("empty env");
    assert_eq!(
        s.cli_store().expect("default"),
        StoreUrl::Sqlite(DEFAULT_CLI_STORE.into())
    );
    let s = settings(&[("SQS_CLAIM_TABLE", "claims")]).expect("valid");
    assert_eq!(
        s.cli_store().expect("dynamodb"),
        StoreUrl::DynamoDb {
            table: "claims".into(),
            key_schema: None,
        }
    );
    let s = settings(&[
        ("SQS_CLAIM_STORE", "memory:"),
        ("SQS_CLAIM_TABLE", "claims"),
    ])
    .expect("valid");
    assert_eq!(s.cli_store().expect("memory"), StoreUrl::Memory);
    let s = settings(&[("SQS_CLAIM_TABLE", "a b")]).expect("read");
    assert!(s.cli_store().is_err(), "an invalid table name");
}

#[test]
fn store_urls() {
    assert_eq!(
        StoreUrl::parse("memory:").expect("memory"),
        StoreUrl::Memory
    );
    assert_eq!(
        StoreUrl::parse("sqlite:///tmp/a.db").expect("sqlite"),
        StoreUrl::Sqlite("/tmp/a.db".into())
    );
    assert_eq!(
        StoreUrl::parse("sqlite:a.db").expect("sqlite"),
        StoreUrl::Sqlite("a.db".into())
    );
    assert!(StoreUrl::parse("sqlite:").is_err());
    assert!(StoreUrl::parse("dynamodb:").is_err());
    let url = StoreUrl::parse("tiered:redis://h/|postgres://user:hunter2@db/x").expect("tiered");
    for shown in [url.to_string(), format!("{url:?}")] {
        assert!(
            !shown.contains("hunter2") && shown.contains("user:***@db"),
            "{shown}"
        );
    }
    // A password in the query string is hidden too; the rest of the URL is shown as it is.
    let url = StoreUrl::parse("postgres://u@db:5432/x?sslmode=require&password=hunter2&a=b")
        .expect("postgres");
    for shown in [url.to_string(), format!("{url:?}")] {
        assert!(
            !shown.contains("hunter2")
                && shown.contains("postgres://u@db:5432/x?sslmode=require&password=***&a=b"),
            "{shown}"
        );
    }
    assert!(
        StoreUrl::parse("tiered:postgres://db/x|memory:").is_err(),
        "cache must be Redis"
    );
    assert!(
        StoreUrl::parse("tiered:redis://h/").is_err(),
        "needs a durable URL"
    );
    assert!(StoreUrl::parse("nope").is_err());
}

#[cfg(feature = "sqs")]
#[test]
fn backoff_and_dead_letter_at_once_settings() {
    let s = settings(&[
        ("SQS_CLAIM_BACKOFF", "on"),
        ("SQS_CLAIM_BACKOFF_FIRST_SECS", "10"),
        ("SQS_CLAIM_BACKOFF_CAP_SECS", "600"),
        ("SQS_CLAIM_BACKOFF_FOR", "store_unavailable=5, contention=0"),
        (
            "SQS_CLAIM_FAILURE_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/1/dlq",
        ),
        ("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "default"),
        (
            "SQS_CLAIM_SOURCE_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/1/in",
        ),
    ])
    .expect("valid");
    assert_eq!(
        s.backoff,
        Some(Backoff::exponential(
            Duration::from_secs(10),
            Duration::from_secs(600)
        ))
    );
    assert_eq!(
        s.backoff_for,
        [
            (
                FailureKind::StoreUnavailable,
                Backoff::fixed(Duration::from_secs(5))
            ),
            (FailureKind::Contention, Backoff::fixed(Duration::ZERO)),
        ]
    );
    assert_eq!(s.dead_letter_at_once, Permanent::default());
    assert!(s.source_queue_url.is_some());
    let on = settings(&[("SQS_CLAIM_BACKOFF", "on")]).expect("valid");
    assert_eq!(on.backoff, Some(Backoff::default()));
    for (vars, names) in [
        (vec![("SQS_CLAIM_BACKOFF", "yes")], "SQS_CLAIM_BACKOFF"),
        (
            vec![("SQS_CLAIM_BACKOFF_CAP_SECS", "43201")],
            "SQS_CLAIM_BACKOFF_CAP_SECS",
        ),
        (
            vec![
                ("SQS_CLAIM_BACKOFF_FIRST_SECS", "100"),
                ("SQS_CLAIM_BACKOFF_CAP_SECS", "50"),
            ],
            "SQS_CLAIM_BACKOFF_FIRST_SECS",
        ),
        (
            vec![("SQS_CLAIM_BACKOFF_FOR", "slow=5")],
            "SQS_CLAIM_BACKOFF_FOR",
        ),
        (
            vec![("SQS_CLAIM_BACKOFF_FOR", "contention")],
            "SQS_CLAIM_BACKOFF_FOR",
        ),
        (
            vec![("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "default")],
            "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
        ),
        (
            vec![
                ("SQS_CLAIM_FAILURE_QUEUE_URL", "https://x/1/q"),
                ("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "bad_bodies"),
            ],
            "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
        ),
    ] {
        let e = settings(&vars).expect_err("invalid");
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.to_string().contains(names), "{e}");
    }
}

/// Every variable the reader asks for is in [`VARIABLES`], and every `SQS_CLAIM_*` there but
/// the AWS clients' own is asked for: the table is the reader's.
#[test]
fn the_reader_reads_the_table() {
    use std::cell::RefCell;
    let asked = RefCell::new(Vec::<String>::new());
    // The interop on (in a build that has it), so its variables are all asked for.
    Settings::from_lookup(|name| {
        asked.borrow_mut().push(name.to_owned());
        (cfg!(feature = "powertools") && name == POWERTOOLS_HANDLER_VAR)
            .then(|| "app.record_handler".to_owned())
    })
    .expect("valid");
    let asked = asked.into_inner();
    for name in &asked {
        assert!(
            name == "AWS_LAMBDA_FUNCTION_NAME" || Variable::find(VARIABLES, name).is_some(),
            "{name} is read but not in VARIABLES"
        );
    }
    for v in VARIABLES
        .iter()
        .filter(|v| v.name.starts_with("SQS_CLAIM_") && v.name != "SQS_CLAIM_TLS_ROOTS")
        // A variable this build cannot honour is only checked unset, not read.
        .filter(|v| v.missing_feature().is_none())
    {
        assert!(
            asked.iter().any(|n| n == v.name),
            "{} is never read",
            v.name
        );
    }
}

/// A value that does not parse is one `Config` error: the variable, the value (not a store
/// URL's, which can carry a password) and the accepted forms.
#[test]
fn one_error_names_the_variable_the_value_and_the_forms() {
    for (var, value, forms) in [
        ("SQS_CLAIM_FIFO_MODE", "strict", "per-group or whole-batch"),
        (
            "SQS_CLAIM_STORE_UNAVAILABLE",
            "open",
            "fail-closed or fail-open",
        ),
        (
            "SQS_CLAIM_ENVELOPE",
            "kinesis",
            "none, sns, eventbridge or s3",
        ),
        (
            "SQS_CLAIM_TTL_SECS",
            "1h",
            "whole number of seconds of at least 1",
        ),
        ("SQS_CLAIM_BACKOFF", "yes", "`on` or `off`"),
        ("SQS_CLAIM_FAILURE_QUEUE_URL", "my-queue", "a queue URL"),
    ]
    .into_iter()
    // A variable this build lacks the feature of is refused as such (tested below).
    .filter(|(var, _, _)| {
        Variable::find(VARIABLES, var).is_some_and(|v| v.missing_feature().is_none())
    }) {
        let err = settings(&[(var, value)]).expect_err(var);
        assert_eq!(err.kind(), ErrorKind::Config);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("environment variable {var} is invalid: ")),
            "{text}"
        );
        assert!(text.contains(&format!("{value:?}")), "{text}");
        assert!(text.contains(forms), "{text}");
    }
    let err = settings(&[("SQS_CLAIM_STORE", "ftp://user:hunter2@h/")]).expect_err("scheme");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[cfg(feature = "s3")]
#[test]
fn large_message_settings() {
    let s = settings(&[]).expect("valid");
    assert!(!s.large_messages && !s.large_message_delete);
    assert_eq!(s.large_message_max_bytes, 32 * 1024 * 1024);
    assert_eq!(s.offload_bucket, None);
    assert_eq!(s.offload_over_bytes, 256 * 1024);
    let mut vars = vec![
        ("SQS_CLAIM_LARGE_MESSAGES", "on"),
        ("SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES", "1048576"),
        ("SQS_CLAIM_LARGE_MESSAGE_DELETE", "on"),
        (
            "SQS_CLAIM_LARGE_MESSAGE_BUCKETS",
            " payloads-a , payloads-b,",
        ),
    ];
    // The publisher's offload needs `sqs` too (else refused, naming it).
    if cfg!(feature = "sqs") {
        vars.extend([
            ("SQS_CLAIM_OFFLOAD_BUCKET", "payloads"),
            ("SQS_CLAIM_OFFLOAD_OVER_BYTES", "100000"),
        ]);
    }
    let s = settings(&vars).expect("valid");
    assert!(s.large_messages && s.large_message_delete);
    assert_eq!(s.large_message_buckets, ["payloads-a", "payloads-b"]);
    assert!(
        settings(&[])
            .expect("valid")
            .large_message_buckets
            .is_empty()
    );
    // An allowlist for pointers that are not read: refused, naming the variable.
    let e = settings(&[("SQS_CLAIM_LARGE_MESSAGE_BUCKETS", "b")]).unwrap_err();
    assert!(
        e.to_string().contains("SQS_CLAIM_LARGE_MESSAGE_BUCKETS"),
        "{e}"
    );
    assert_eq!(s.large_message_max_bytes, 1_048_576);
    if cfg!(feature = "sqs") {
        assert_eq!(s.offload_bucket.as_deref(), Some("payloads"));
        assert_eq!(s.offload_over_bytes, 100_000);
    }
    // Deleting what is not read: refused, naming the variable.
    let e = settings(&[("SQS_CLAIM_LARGE_MESSAGE_DELETE", "on")]).unwrap_err();
    assert!(
        e.to_string().contains("SQS_CLAIM_LARGE_MESSAGE_DELETE"),
        "{e}"
    );
    let e = settings(&[("SQS_CLAIM_LARGE_MESSAGES", "yes")]).unwrap_err();
    assert!(e.to_string().contains("SQS_CLAIM_LARGE_MESSAGES"), "{e}");
    let e = settings(&[("SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES", "0")]).unwrap_err();
    assert!(
        e.to_string().contains("SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES"),
        "{e}"
    );
}

/// Which features each setting needs: the table says so, and the refusal below reads it.
/// (Removing a `needs` from the table fails this test in every build, and the refusal test
/// in each build lacking the feature.)
#[test]
fn each_setting_needs_the_features_that_honour_it() {
    let sqs = [
        "SQS_CLAIM_FAILURE_QUEUE_URL",
        "SQS_CLAIM_MAX_RECEIVES",
        "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
        "SQS_CLAIM_BACKOFF",
        "SQS_CLAIM_BACKOFF_FIRST_SECS",
        "SQS_CLAIM_BACKOFF_CAP_SECS",
        "SQS_CLAIM_BACKOFF_FOR",
        "SQS_CLAIM_SOURCE_QUEUE_URL",
    ];
    let s3 = [
        "SQS_CLAIM_LARGE_MESSAGES",
        "SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES",
        "SQS_CLAIM_LARGE_MESSAGE_DELETE",
        "SQS_CLAIM_LARGE_MESSAGE_BUCKETS",
    ];
    let offload = ["SQS_CLAIM_OFFLOAD_BUCKET", "SQS_CLAIM_OFFLOAD_OVER_BYTES"];
    let powertools = [
        POWERTOOLS_HANDLER_VAR,
        POWERTOOLS_FUNCTION_VAR,
        POWERTOOLS_KEY_PREFIX_VAR,
        POWERTOOLS_HASH_VAR,
        POWERTOOLS_VALIDATION_VAR,
    ];
    for (names, features) in [
        (&sqs[..], &["sqs"][..]),
        (&s3, &["s3"]),
        (&offload, &["sqs", "s3"]),
        (&powertools, &["powertools"]),
    ] {
        for name in names {
            let v = Variable::find(VARIABLES, name).expect(name);
            assert_eq!(v.features, features, "{name}");
        }
    }
    for v in VARIABLES {
        for feature in v.features {
            assert!(
                ["sqs", "s3", "powertools"].contains(feature),
                "{}: {feature}",
                v.name
            );
        }
    }
}

/// In a build lacking a feature, a setting that needs it is a start-up error naming the
/// variable and the feature, whatever its value but `off` (which asks for nothing); in a
/// build with it, the setting is read. Run it per build:
/// `cargo test -p sqs-claim --no-default-features --features settings[,sqs,s3,powertools] --lib settings`.
#[test]
fn a_setting_this_build_cannot_honour_is_refused_naming_its_feature() {
    let mut refused = 0;
    for v in VARIABLES
        .iter()
        .filter(|v| v.name.starts_with("SQS_CLAIM_"))
    {
        let Some(feature) = v.missing_feature() else {
            continue;
        };
        refused += 1;
        for value in [
            "1",
            "on",
            "https://sqs.us-east-1.amazonaws.com/1/q",
            "app.handler",
        ] {
            let err = settings(&[(v.name, value)]).expect_err(v.name);
            assert_eq!(err.kind(), ErrorKind::Config, "{}", v.name);
            let text = err.to_string();
            assert!(
                text.contains(v.name) && text.contains(&format!("`{feature}` feature")),
                "{}={value}: {text}",
                v.name
            );
        }
        // Blank is unset; `off` asks for nothing the build lacks.
        settings(&[(v.name, " ")]).expect("blank is unset");
        if v.default == "`off`" {
            settings(&[(v.name, "off")]).expect("off asks for nothing");
        }
    }
    let lacking = ["sqs", "s3", "powertools"]
        .iter()
        .filter(|f| !feature_enabled(f))
        .count();
    assert_eq!(
        refused > 0,
        lacking > 0,
        "a build lacking {lacking} of sqs, s3, powertools refuses {refused} settings"
    );
    // The cases, by name.
    if !cfg!(feature = "sqs") {
        for (var, value) in [
            (
                "SQS_CLAIM_FAILURE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/f",
            ),
            ("SQS_CLAIM_BACKOFF", "on"),
            ("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "default"),
        ] {
            let err = settings(&[(var, value)]).expect_err(var);
            assert!(err.to_string().contains("`sqs` feature"), "{err}");
        }
        settings(&[("SQS_CLAIM_BACKOFF", "off")]).expect("off");
    }
}

/// A store URL whose store this build lacks is refused when the settings are read, naming
/// `SQS_CLAIM_STORE` and the feature (never the password); one this build has is read.
#[test]
fn a_store_this_build_lacks_is_refused_naming_the_variable_and_the_feature() {
    for (url, feature) in [
        ("sqlite:claims.db", "sqlite"),
        ("redis://127.0.0.1:6379/", "redis"),
        ("rediss://u:hunter2@cache:6380/", "redis"),
        ("postgres://u:hunter2@db:5432/x", "postgres"),
        ("postgresql://db/x", "postgres"),
        ("tiered:redis://h/|memory:", "redis"),
        ("tiered:redis://h/|postgres://u:hunter2@db/x", "redis"),
        ("dynamodb:claims", "dynamodb"),
    ] {
        let parsed: StoreUrl = url.parse().expect(url);
        let missing = parsed.missing_feature();
        let result = settings(&[("SQS_CLAIM_STORE", url)]);
        if feature_enabled(feature) && missing.is_none() {
            assert_eq!(result.expect(url).store, Some(parsed));
            continue;
        }
        let err = result.expect_err(url);
        assert_eq!(err.kind(), ErrorKind::Config);
        let text = err.to_string();
        let feature = missing.expect("a feature is missing");
        assert!(
            text.contains("SQS_CLAIM_STORE") && text.contains(&format!("`{feature}` feature")),
            "{url}: {text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }
    assert_eq!(StoreUrl::Memory.missing_feature(), None);
    let tiered: StoreUrl = "tiered:redis://h/|postgres://db/x".parse().expect("tiered");
    let want = if !cfg!(feature = "redis") {
        Some("redis")
    } else if !cfg!(feature = "postgres") {
        Some("postgres")
    } else {
        None
    };
    assert_eq!(
        tiered.missing_feature(),
        want,
        "the cache's, then the durable store's"
    );
}
