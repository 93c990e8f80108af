//! The stream rules: pure functions of one stream mapping's [`StreamFacts`] (and the claim
//! TTL and the lease), six lines per mapping, after the SQS rules. They are printed only for a function
//! that has stream mappings (or a template with stream events), so an SQS consumer's report
//! keeps its 14 lines. `docs/operating.md` ("sqs-claim doctor") gives each rule's why.

use super::facts::{KINESIS_DEFAULT_RETENTION_SECS, StreamFacts, StreamSource};
use super::{Facts, Finding, Status};

/// The stream rules, in the order the report prints them for each mapping.
pub const STREAM_RULES: [&str; 6] = [
    "stream-claim-ttl",
    "stream-report-batch-item-failures",
    "stream-bisect",
    "stream-on-failure",
    "stream-retry-limit",
    "stream-lease",
];

/// Every stream rule over every stream mapping of `facts`, mapping by mapping.
pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut findings = Vec::new();
    for s in &facts.function.streams {
        findings.push(claim_ttl(s, facts.claim_ttl_secs));
        findings.push(report_batch_item_failures(s));
        findings.push(bisect(s));
        findings.push(on_failure(s));
        findings.push(retry_limit(s));
        findings.push(lease(s, facts.lease_at_least_secs));
    }
    findings
}

const HOW_RETENTION: &str = "give --stream-retention-hours HOURS";

/// The stream's retention and where it came from (or that it is assumed).
fn retention(s: &StreamFacts) -> Option<(u64, String)> {
    match (&s.retention_secs, s.source) {
        (Some(k), _) => Some((k.value, k.source.clone())),
        (None, StreamSource::Kinesis) => Some((
            KINESIS_DEFAULT_RETENTION_SECS,
            format!(
                "assumed: Kinesis's default 24 h, the stream's own is not read; {HOW_RETENTION} \
                 if it was changed"
            ),
        )),
        (None, _) => None,
    }
}

/// The claim must outlive every delivery of a record it completed. The mapping itself sends a
/// record again (a batch retried whole after a crash or a timeout, bisected, or resent from
/// a checkpoint before it) for as long as it retries, `MaximumRecordAgeInSeconds` (or the
/// retention, when unlimited): a claim gone by then lets that retry apply the record again,
/// with no one doing anything wrong, so it fails. Past that, the stream still holds the record
/// until its retention ends, and a replay (a mapping re-created at `TRIM_HORIZON`, a batch
/// given up on read back by hand) sends it again: a warning, as the doctor cannot know
/// whether anyone replays. The TTL counts from the claim, which comes after the record was
/// written, so the retention is enough to cover both.
fn claim_ttl(s: &StreamFacts, ttl: u64) -> Finding {
    const RULE: &str = "stream-claim-ttl";
    let Some((retention, from)) = retention(s) else {
        return Finding::new(
            RULE,
            Status::Skip,
            format!("{}: the topic's retention unknown: {HOW_RETENTION}", s.name),
        );
    };
    let (window, window_from) = match &s.maximum_record_age_secs {
        Some(k) if k.value >= 0 => {
            let age = u64::try_from(k.value).unwrap_or(0);
            (
                age.min(retention),
                format!("MaximumRecordAgeInSeconds {age} ({})", k.source),
            )
        }
        Some(k) => (
            retention,
            format!(
                "MaximumRecordAgeInSeconds -1 ({}): retried until the record expires",
                k.source
            ),
        ),
        None => (
            retention,
            "MaximumRecordAgeInSeconds unknown: retried until the record expires, at most"
                .to_owned(),
        ),
    };
    let detail = format!(
        "{}: claim TTL {ttl} s (SQS_CLAIM_TTL_SECS), retention {retention} s ({from}), the \
         mapping retries a record for up to {window} s ({window_from})",
        s.name
    );
    let fix = format!(
        "raise SQS_CLAIM_TTL_SECS (the template's IdempotencyTtlSeconds) to at least {retention}"
    );
    if ttl < window {
        return Finding::new(
            RULE,
            Status::Fail,
            format!(
                "{detail}: a completed record the mapping sends again after its claim expired \
                 runs again"
            ),
        )
        .fix(fix);
    }
    if ttl < retention {
        return Finding::new(
            RULE,
            Status::Warn,
            format!(
                "{detail}: a replay while the stream still holds a record (a mapping re-created \
                 at TRIM_HORIZON, a batch given up on read back) runs it again"
            ),
        )
        .fix(fix);
    }
    Finding::new(RULE, Status::Ok, detail)
}

fn report_batch_item_failures(s: &StreamFacts) -> Finding {
    const RULE: &str = "stream-report-batch-item-failures";
    match &s.report_batch_item_failures {
        None => Finding::new(
            RULE,
            Status::Skip,
            format!("{}: FunctionResponseTypes unknown", s.name),
        ),
        Some(k) if k.value => Finding::new(
            RULE,
            Status::Ok,
            format!(
                "{}: FunctionResponseTypes has ReportBatchItemFailures ({})",
                s.name, k.source
            ),
        ),
        Some(k) => Finding::new(
            RULE,
            Status::Warn,
            format!(
                "{}: FunctionResponseTypes lacks ReportBatchItemFailures ({}): Lambda ignores \
                 the consumer's checkpoint, so one failed record retries the whole batch (the \
                 records that completed are skipped as duplicates, but the shard waits and a \
                 poison record takes the whole batch to the on-failure destination)",
                s.name, k.source
            ),
        )
        .fix("add ReportBatchItemFailures to the mapping's FunctionResponseTypes"),
    }
}

/// docs/streams.md advises bisection: an invocation that fails as a whole (a crash, a
/// timeout, a record that cannot be named) is split until the record behind it is alone.
fn bisect(s: &StreamFacts) -> Finding {
    const RULE: &str = "stream-bisect";
    match &s.bisect_on_error {
        None if s.source == StreamSource::Kafka => Finding::new(
            RULE,
            Status::Skip,
            format!(
                "{}: BisectBatchOnFunctionError not set: a Kafka mapping splits a batch on \
                 error only in provisioned mode (ProvisionedPollerConfig), where docs/streams.md \
                 advises it",
                s.name
            ),
        ),
        None => Finding::new(
            RULE,
            Status::Skip,
            format!("{}: BisectBatchOnFunctionError unknown", s.name),
        ),
        Some(k) if k.value => Finding::new(
            RULE,
            Status::Ok,
            format!("{}: BisectBatchOnFunctionError true ({})", s.name, k.source),
        ),
        Some(k) => Finding::new(
            RULE,
            Status::Warn,
            format!(
                "{}: BisectBatchOnFunctionError false ({}): an invocation that fails as a whole \
                 (a crash, a timeout) retries the same batch until the mapping gives up on all \
                 of it, where a split would isolate the record behind it",
                s.name, k.source
            ),
        )
        .fix("set BisectBatchOnFunctionError true on the mapping (docs/streams.md)"),
    }
}

fn on_failure(s: &StreamFacts) -> Finding {
    const RULE: &str = "stream-on-failure";
    match &s.on_failure {
        None => Finding::new(
            RULE,
            Status::Skip,
            format!("{}: DestinationConfig.OnFailure unknown", s.name),
        ),
        Some(k) => match &k.value {
            Some(destination) => Finding::new(
                RULE,
                Status::Ok,
                format!(
                    "{}: on-failure destination {destination} ({})",
                    s.name, k.source
                ),
            ),
            None => Finding::new(
                RULE,
                Status::Warn,
                format!(
                    "{}: no on-failure destination ({}): a batch the mapping gives up on is \
                     skipped without a trace (no shard, no sequence numbers to read it back by)",
                    s.name, k.source
                ),
            )
            .fix(
                "set the mapping's DestinationConfig.OnFailure.Destination to an SQS queue or \
                 SNS topic",
            ),
        },
    }
}

/// With neither limit (`-1` both), the mapping retries a record that always fails until the
/// stream drops it: its shard makes no progress for up to the retention.
fn retry_limit(s: &StreamFacts) -> Finding {
    const RULE: &str = "stream-retry-limit";
    let (Some(age), Some(attempts)) = (&s.maximum_record_age_secs, &s.maximum_retry_attempts)
    else {
        return Finding::new(
            RULE,
            Status::Skip,
            format!(
                "{}: MaximumRetryAttempts or MaximumRecordAgeInSeconds unknown",
                s.name
            ),
        );
    };
    let detail = format!(
        "{}: MaximumRetryAttempts {} ({}), MaximumRecordAgeInSeconds {} ({})",
        s.name, attempts.value, attempts.source, age.value, age.source
    );
    if attempts.value >= 0 || age.value >= 0 {
        return Finding::new(RULE, Status::Ok, detail);
    }
    let until = match retention(s) {
        Some((secs, _)) => format!("{secs} s"),
        None => "its retention".to_owned(),
    };
    Finding::new(
        RULE,
        Status::Warn,
        format!(
            "{detail}: a record that always fails is retried until the stream drops it, and its \
             shard makes no progress meanwhile (up to {until})"
        ),
    )
    .fix(
        "set MaximumRetryAttempts (e.g. 10) or MaximumRecordAgeInSeconds (e.g. 21600), with an \
         on-failure destination",
    )
}

/// After a crash the mapping retries at once. Under the default lease (short, extended by a
/// live owner) the retry waits out the crashed claim's few seconds and takes it over: one
/// retry. An `at least` lease (`SQS_CLAIM_LEASE_AT_LEAST_SECS`) holds the crashed claim that
/// long: every retry before then fails the record, the shard waits, and the retries may run
/// out (`MaximumRetryAttempts`) and give the batch up.
fn lease(s: &StreamFacts, at_least: Option<u64>) -> Finding {
    const RULE: &str = "stream-lease";
    let Some(secs) = at_least else {
        return Finding::new(
            RULE,
            Status::Ok,
            format!(
                "{}: claims are leased short and extended while the handler runs \
                 (SQS_CLAIM_LEASE_AT_LEAST_SECS unset): a crash costs one retry",
                s.name
            ),
        );
    };
    let attempts = match &s.maximum_retry_attempts {
        Some(k) if k.value >= 0 => format!(
            "; MaximumRetryAttempts {} may run out first and give the batch up",
            k.value
        ),
        _ => String::new(),
    };
    Finding::new(
        RULE,
        Status::Warn,
        format!(
            "{}: SQS_CLAIM_LEASE_AT_LEAST_SECS={secs}: a crashed invocation's claims are held \
             {secs} s, the mapping retries at once, and every retry before then fails the \
             record while its shard waits{attempts}",
            s.name
        ),
    )
    .fix(
        "unset SQS_CLAIM_LEASE_AT_LEAST_SECS for a stream consumer (the default lease is \
         extended while the handler runs), or accept that a crash stops the shard that long",
    )
}

#[cfg(test)]
mod tests {
    use super::super::facts::Known;
    use super::*;

    /// A Kinesis mapping as docs/streams.md advises it (examples/streams/template.yaml).
    fn good(source: StreamSource) -> StreamFacts {
        let mut s = StreamFacts::new(source, "test mapping");
        s.maximum_record_age_secs = Some(Known::new(21_600, "test"));
        s.maximum_retry_attempts = Some(Known::new(10, "test"));
        s.bisect_on_error = Some(Known::new(true, "test"));
        s.report_batch_item_failures = Some(Known::new(true, "test"));
        s.on_failure = Some(Known::new(Some("arn:aws:sqs:us-east-1:1:f".into()), "test"));
        s.parallelization_factor = Some(Known::new(1, "test"));
        s
    }

    const DAY: u64 = 86_400;

    #[test]
    fn a_mapping_as_the_docs_advise_passes_every_stream_rule() {
        for source in [StreamSource::Kinesis, StreamSource::DynamoDbStreams] {
            let s = good(source);
            for f in [
                claim_ttl(&s, 2 * DAY),
                report_batch_item_failures(&s),
                bisect(&s),
                on_failure(&s),
                retry_limit(&s),
                lease(&s, None),
            ] {
                assert_eq!(f.status, Status::Ok, "{f}");
            }
        }
    }

    #[test]
    fn an_at_least_lease_warns_that_a_crash_stops_the_shard() {
        let s = good(StreamSource::Kinesis);
        let f = lease(&s, Some(3600));
        assert_eq!(f.status, Status::Warn, "{f}");
        let text = f.to_string();
        assert!(
            text.contains("SQS_CLAIM_LEASE_AT_LEAST_SECS=3600")
                && text.contains("3600 s")
                && text.contains("MaximumRetryAttempts 10"),
            "{text}"
        );
        assert!(lease(&s, None).to_string().contains("one retry"));
    }

    #[test]
    fn the_claim_ttl_covers_the_mapping_s_retries_and_warns_below_the_retention() {
        let mut s = good(StreamSource::DynamoDbStreams);
        // Retention 24 h, retries for 6 h.
        assert_eq!(claim_ttl(&s, DAY).status, Status::Ok);
        let f = claim_ttl(&s, DAY - 1);
        assert_eq!(f.status, Status::Warn, "{f}");
        assert!(f.detail.contains("TRIM_HORIZON") && f.fix.is_some(), "{f}");
        assert_eq!(claim_ttl(&s, 21_600).status, Status::Warn);
        let f = claim_ttl(&s, 21_599);
        assert_eq!(f.status, Status::Fail, "{f}");
        assert!(f.fix.as_deref().unwrap_or("").contains("86400"), "{f}");
        // Retried until the record expires: the retention is the mapping's own window.
        s.maximum_record_age_secs = Some(Known::new(-1, "test"));
        assert_eq!(claim_ttl(&s, DAY - 1).status, Status::Fail);
        assert_eq!(claim_ttl(&s, DAY).status, Status::Ok);
        // An age above the retention is capped by it.
        s.maximum_record_age_secs = Some(Known::new(604_800, "test"));
        assert_eq!(claim_ttl(&s, DAY).status, Status::Ok);
    }

    #[test]
    fn a_kinesis_retention_is_given_or_assumed_and_said() {
        let mut s = good(StreamSource::Kinesis);
        let f = claim_ttl(&s, DAY);
        assert_eq!(f.status, Status::Ok);
        assert!(f.detail.contains("assumed"), "{f}");
        s.retention_secs = Some(Known::new(7 * DAY, "--stream-retention-hours"));
        let f = claim_ttl(&s, 2 * DAY);
        assert_eq!(f.status, Status::Warn, "{f}");
        assert!(f.detail.contains("--stream-retention-hours"), "{f}");
        // Kafka: no assumption, a skip that says how to give it.
        let kafka = good(StreamSource::Kafka);
        let f = claim_ttl(&kafka, DAY);
        assert_eq!(f.status, Status::Skip);
        assert!(f.detail.contains("--stream-retention-hours"), "{f}");
    }

    #[test]
    fn without_report_batch_item_failures_bisection_or_a_destination_it_warns() {
        let mut s = good(StreamSource::Kinesis);
        s.report_batch_item_failures = Some(Known::new(false, "test"));
        assert_eq!(report_batch_item_failures(&s).status, Status::Warn);
        s.bisect_on_error = Some(Known::new(false, "test"));
        assert_eq!(bisect(&s).status, Status::Warn);
        s.on_failure = Some(Known::new(None, "test"));
        let f = on_failure(&s);
        assert_eq!(f.status, Status::Warn);
        assert!(f.fix.is_some(), "{f}");
        // Unknown values skip; so does a Kafka mapping without the setting (it has one only in
        // provisioned mode).
        let unknown = StreamFacts::new(StreamSource::Kinesis, "x");
        for f in [
            report_batch_item_failures(&unknown),
            bisect(&unknown),
            on_failure(&unknown),
            retry_limit(&unknown),
        ] {
            assert_eq!(f.status, Status::Skip, "{f}");
        }
        assert_eq!(
            bisect(&StreamFacts::new(StreamSource::Kafka, "x")).status,
            Status::Skip
        );
    }

    #[test]
    fn unlimited_retries_and_age_warn_that_a_poison_record_blocks_the_shard() {
        let mut s = good(StreamSource::DynamoDbStreams);
        s.maximum_retry_attempts = Some(Known::new(-1, "test"));
        assert_eq!(retry_limit(&s).status, Status::Ok, "the age still limits");
        s.maximum_record_age_secs = Some(Known::new(-1, "test"));
        let f = retry_limit(&s);
        assert_eq!(f.status, Status::Warn);
        assert!(f.detail.contains("up to 86400 s"), "{f}");
        s.maximum_retry_attempts = Some(Known::new(0, "test"));
        assert_eq!(retry_limit(&s).status, Status::Ok);
    }

    #[test]
    fn stream_arns_name_their_source() {
        assert_eq!(
            StreamSource::of_arn("arn:aws:kinesis:us-east-1:1:stream/orders"),
            Some(StreamSource::Kinesis)
        );
        assert_eq!(
            StreamSource::of_arn(
                "arn:aws:dynamodb:us-east-1:1:table/orders/stream/2024-01-01T00:00:00.000"
            ),
            Some(StreamSource::DynamoDbStreams)
        );
        assert_eq!(
            StreamSource::of_arn("arn:aws:kafka:us-east-1:1:cluster/c/abc"),
            Some(StreamSource::Kafka)
        );
        assert_eq!(StreamSource::of_arn("arn:aws:sqs:us-east-1:1:q"), None);
        assert_eq!(
            StreamSource::of_arn("arn:aws:dynamodb:us-east-1:1:table/orders"),
            None
        );
    }
}
