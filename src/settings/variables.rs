//! [`VARIABLES`]: every variable the library reads, as data: docs/configuration.md's table is
//! checked against it (a test fails when the two disagree), and [`markdown_table`] writes that
//! table.

/// One environment variable: its name, its default and what it means, in Markdown (as
/// docs/configuration.md shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Variable {
    /// The variable's name (`SQS_CLAIM_TTL_SECS`).
    pub name: &'static str,
    /// What an unset (or empty) variable means (`` `86400` ``, `none`).
    pub default: &'static str,
    /// What the variable sets, and its accepted forms.
    pub meaning: &'static str,
    /// The features of sqs-claim a build needs to honour the variable (`["sqs"]` for the
    /// failure queue): in a build without one of them, setting the variable (to anything but
    /// `off`) is a start-up error naming the feature ([`Variable::missing_feature`]), never a
    /// setting silently ignored. Empty for a variable every build honours.
    pub features: &'static [&'static str],
}

impl Variable {
    /// A variable of an app's own, documented beside these (the example app's
    /// `SQS_CLAIM_ACCOUNTS_TABLE`).
    pub const fn new(name: &'static str, default: &'static str, meaning: &'static str) -> Self {
        Variable {
            name,
            default,
            meaning,
            features: &[],
        }
    }

    /// The same variable, honoured only by a build with every one of `features`.
    pub const fn needs(self, features: &'static [&'static str]) -> Self {
        Variable { features, ..self }
    }

    /// The first of [`features`](Self::features) this build of sqs-claim lacks, if any: a
    /// variable set in such a build is refused by [`Settings::from_env`](super::Settings::from_env).
    pub fn missing_feature(&self) -> Option<&'static str> {
        self.features
            .iter()
            .copied()
            .find(|feature| !super::feature_enabled(feature))
    }

    /// The variable named `name` among `variables`. With feature `admin`.
    #[cfg(any(feature = "admin", test))]
    #[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
    pub fn find(variables: &[Variable], name: &str) -> Option<Variable> {
        variables.iter().copied().find(|v| v.name == name)
    }
}

/// The table of `variables` in Markdown, one row each, in their order, with its header: what
/// docs/configuration.md holds between its `<!-- BEGIN ... -->` and `<!-- END ... -->` lines.
/// With feature `admin`.
#[cfg(any(feature = "admin", test))]
pub fn markdown_table(variables: &[Variable]) -> String {
    let mut table =
        String::from("| variable | default | meaning |\n|----------|---------|---------|\n");
    for v in variables {
        let needs = match v.features {
            [] => String::new(),
            features => {
                let names: Vec<String> = features.iter().map(|f| format!("`{f}`")).collect();
                let word = if names.len() == 1 {
                    "feature"
                } else {
                    "features"
                };
                format!(" ({word} {})", names.join(" and "))
            }
        };
        table.push_str(&format!(
            "| `{}` | {} | {}{needs} |\n",
            v.name, v.default, v.meaning
        ));
    }
    table
}

/// Every variable the library reads: the settings of [`Settings`](super::Settings) (all
/// `SQS_CLAIM_*` but `SQS_CLAIM_TLS_ROOTS`), the AWS clients' `SQS_CLAIM_TLS_ROOTS`
/// ([`crate::aws`], feature `aws`) and the logging set-up's ([`crate::logging`], feature
/// `logging`). All are optional; an empty value counts as unset.
pub const VARIABLES: &[Variable] = &[
    Variable::new(
        "SQS_CLAIM_STORE",
        "Lambda: `dynamodb:$SQS_CLAIM_TABLE`; CLI: `sqlite:.sqs-claim/claims.db`",
        "store URL: `dynamodb:TABLE`, `sqlite:PATH`, `memory:`, `redis://HOST[:PORT][/DB][?prefix=P]`, `rediss://…`, `postgres://…`, `tiered:REDIS_URL\\|DURABLE_URL` (`--store` overrides it in the CLI)",
    ),
    Variable::new(
        "SQS_CLAIM_TABLE",
        "none (Lambda: required unless `SQS_CLAIM_STORE` is set)",
        "DynamoDB claims table",
    ),
    Variable::new(
        "SQS_CLAIM_DYNAMODB_PARTITION_KEY",
        "`id={key}`",
        "the DynamoDB claims table's partition key as `NAME=TEMPLATE`, for a table shared with business items (single-table design): `pk=CLAIM#{key}` keeps each claim under `CLAIM#<key>`. `{key}` is the full claim key (`namespace#key`, hashed to `sha256:<hex>` past DynamoDB's key limit). Applies to `dynamodb:` and to a `tiered:` store's DynamoDB tier; other stores ignore it (`--partition-key` overrides it in the CLI)",
    ),
    Variable::new(
        "SQS_CLAIM_DYNAMODB_SORT_KEY",
        "none",
        "the claims table's sort key as `NAME=TEMPLATE`, e.g. `sk=CLAIM`; needs `SQS_CLAIM_DYNAMODB_PARTITION_KEY`, and one of the two templates must contain `{key}` (`--sort-key` overrides it in the CLI). `sqs-claim init` creates the table with this key (HASH + RANGE, both S, TTL on `expiration`); at start-up both binaries check that the table's key schema is the configured one and stop with one line saying both if not (a table's key cannot be changed). See [stores.md](stores.md#dynamodb-the-default)",
    ),
    Variable::new(
        "SQS_CLAIM_KEY",
        "the consumer's (the example app: `json:/order_id`)",
        "where the idempotency key comes from: `message-id`, `json:/pointer`, `attribute:NAME`, `body-sha256`, `dedup-id`, `envelope-id`. A pointer reads through a string holding JSON with the token `~json` (`json:/Message/~json/order_id`); under `SQS_CLAIM_ENVELOPE` it reads the payload and `body-sha256` hashes the payload; `envelope-id` is the envelope's own id and needs `SQS_CLAIM_ENVELOPE=sns` or `eventbridge` ([events.md](events.md))",
    ),
    Variable::new(
        "SQS_CLAIM_ENVELOPE",
        "`none`",
        "the envelope AWS wraps each payload in: `sns` (an SNS topic delivering to the queue, raw message delivery off: the payment is the JSON in the notification's `Message`), `eventbridge` (an EventBridge rule: the payment is the event's `detail`), `s3` (S3 event notifications: the one record of `Records`) or `none`. The key, the payload check and the handler read the payload; a body that is not that envelope (an SNS `SubscriptionConfirmation`, the `s3:TestEvent`) fails alone as `missing_key`. See [events.md](events.md)",
    ),
    Variable::new(
        "SQS_CLAIM_NAMESPACE",
        "the consumer's (the example app: `payments`)",
        "key prefix (`namespace#key`); two consumers of one table need two namespaces, and neither should contain `#` (`a#b` + key `c` and `a` + key `b#c` would meet)",
    ),
    Variable::new(
        "SQS_CLAIM_TTL_SECS",
        "`86400`",
        "how long a completed key is remembered; keep it above visibility timeout x `maxReceiveCount`",
    ),
    Variable::new(
        "SQS_CLAIM_LEASE_SECS",
        "`300`",
        "lease of a claim when the invocation has no deadline (the CLI); in Lambda a quarter of the time left (at least 2 s, never past the deadline). Either way the owner extends it while its handler runs (`Lease::extended`), so a crashed invocation's claims lapse within seconds and a stream's retry takes them over. See [library.md](library.md#the-lease)",
    ),
    Variable::new(
        "SQS_CLAIM_LEASE_AT_LEAST_SECS",
        "none",
        "hold every claim at least this long, inside Lambda too (`Lease::at_least`), never extended: a message whose invocation died or timed out is not run again before then. Keep visibility timeout × `maxReceiveCount` above it, or the message reaches the DLQ while still held. On a stream it costs retries: every retry before then fails the record and the shard waits (`sqs-claim doctor` says so). See [library.md](library.md#the-lease)",
    ),
    Variable::new(
        "SQS_CLAIM_CONCURRENCY",
        "what the store carries (256 for DynamoDB, Redis, SQLite; the pool size for PostgreSQL)",
        "messages of a standard-queue batch processed at once (at least 1)",
    ),
    Variable::new(
        "SQS_CLAIM_WARM_CACHE",
        "unset (no cache)",
        "entries of an in-process cache of completed keys in front of the store ([`CachedStore`](stores.md)): a warm Lambda environment answers a duplicate it completed or saw completed without a request. Only completed records are cached, never longer than the record lives (at most 15 minutes). After `sqs-claim forget KEY`, a warm environment may still skip that key until its entry expires or the environment ends. `0` turns it off",
    ),
    Variable::new(
        "SQS_CLAIM_FIFO_MODE",
        "`per-group`",
        "FIFO queues: `per-group` (after a failure, the rest of that message group waits) or `whole-batch` (one at a time; after a failure nothing else starts)",
    ),
    Variable::new(
        "SQS_CLAIM_STORE_UNAVAILABLE",
        "`fail-closed`",
        "store unreachable at claim time: `fail-closed` (report the message failed, run nothing) or `fail-open` (run unclaimed; the credit, an atomic effect, still fails)",
    ),
    Variable::new(
        "SQS_CLAIM_DEADLINE_MARGIN_MS",
        "`2000`",
        "no message starts later than this before the Lambda deadline; the rest are reported for retry",
    ),
    Variable::new(
        "SQS_CLAIM_ANSWER_RESERVE_MS",
        "`250`",
        "every step still in flight (claim, handler, completion, release) is cut off this long before the Lambda deadline, so the partial batch response is always sent in time; cut-off messages are reported `cut_off`",
    ),
    Variable::new(
        "SQS_CLAIM_HANDLER_TIMEOUT_MS",
        "none",
        "the longest one handler call may take; past it the call is cancelled, the message fails `handler_timeout`, and its claim is kept until its lease lapses",
    ),
    Variable::new(
        "SQS_CLAIM_STARTUP_TIMEOUT_MS",
        "`15000`",
        "how long connecting to the store and checking its tables may take at start-up, in all (both binaries; the checks of several tables run at once). Each round trip is also bounded by the store's own timeout (no answer in 4-5 s), so a dark store fails sooner; a slow one, answering each round trip seconds late, still starts. A store that does not answer in time (down, partitioned, a port that accepts and never replies) stops the start with one error line and a non-zero exit, instead of hanging until Lambda's init timeout",
    ),
    Variable::new(
        "SQS_CLAIM_FAILURE_QUEUE_URL",
        "none",
        "a message that fails on its last allowed receive (its `ApproximateReceiveCount` at least `SQS_CLAIM_MAX_RECEIVES`) is sent to this SQS queue, body as the body, with its own message attributes and its failure as one more, `sqs-claim.failure` (JSON: `kind`, `error_kind`, `reason`, `receive_count`, `key`, `message_id`; left off, and logged, when the message already has the 10 attributes SQS allows), and reported handled (`dead_lettered`); if the send fails it is reported for retry as without the setting. FIFO queue: the group is kept, the deduplication id derives from the message id. See [operating.md](operating.md#poison-messages)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_MAX_RECEIVES",
        "`5`",
        "the receive count from which a failed message goes to `SQS_CLAIM_FAILURE_QUEUE_URL`: set it to the source queue's redrive `maxReceiveCount` (at least 1)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
        "`off`",
        "failures sent to `SQS_CLAIM_FAILURE_QUEUE_URL` on any receive, their first included, as permanent (retrying cannot fix them): a comma-separated list of failure kinds (`missing_key`, `payload_mismatch`, any kind of the reports), error kinds (`bad_body`, ...), `permanent` (an error the handler marks with `Retry::permanent`), `default` (`bad_body,missing_key,payload_mismatch,permanent`), or `off`. Reported handled (`dead_lettered`, detail `sent to the failure destination at once`); if the send fails, reported for retry as without it. Needs `SQS_CLAIM_FAILURE_QUEUE_URL` (else a start-up error). See [retries.md](retries.md#poison-out-at-once)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_BACKOFF",
        "`off`",
        "`on`: after each batch, every message reported for retry gets its own visibility timeout (`ChangeMessageVisibilityBatch`, one call per 10): a backoff from its receive count, the delay its handler asked for, or just past the lease of the claim that holds it; the function's role needs `sqs:ChangeMessageVisibility` on the input queue. `off`: a reported message comes back after the queue's visibility timeout. A failed change loses nothing (the message comes back as with `off`). See [retries.md](retries.md)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_BACKOFF_FIRST_SECS",
        "`30`",
        "the delay after a first failed receive; doubled per receive, with jitter (from half the step to the step)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_BACKOFF_CAP_SECS",
        "`900`",
        "the longest delay (at least `SQS_CLAIM_BACKOFF_FIRST_SECS`, at most `43200`, SQS's 12 h); keep it well below the queue's retention (`sqs-claim doctor`: `backoff-retention`) and `maxReceiveCount` high enough to reach it (`backoff-receives`)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_BACKOFF_FOR",
        "none",
        "fixed delays per failure kind, replacing the backoff for that kind: `KIND=SECS,...` (`store_unavailable=10,contention=5`; at most 43200 each)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_SOURCE_QUEUE_URL",
        "none",
        "the input queue's URL, for the visibility changes; unset, it is found once per process with `GetQueueUrl` from the records' `eventSourceARN` (the role then needs `sqs:GetQueueUrl`)",
    )
    .needs(&["sqs"]),
    Variable::new(
        "SQS_CLAIM_LARGE_MESSAGES",
        "`off`",
        "`on`: read the payloads the SQS and SNS extended clients offload to S3 (feature `s3`): a body that is their pointer (`[\"software.amazon.payloadoffloading.PayloadS3Pointer\",{\"s3BucketName\":…,\"s3Key\":…}]` with the attribute `ExtendedPayloadSize` or `SQSLargePayloadSize`; under `SQS_CLAIM_ENVELOPE=sns`, the attribute in the notification's `MessageAttributes`) has its object fetched, and the key, the payload check and the handler read the object. A missing object or one over the limit fails its message alone as a permanent `large_payload`; S3 not answering fails it for retry. The role needs `s3:GetObject` on the bucket ([large-messages.md](large-messages.md))",
    )
    .needs(&["s3"]),
    Variable::new(
        "SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES",
        "`33554432` (32 MiB)",
        "the largest payload fetched from S3 (at least 1); a larger one (by its attribute or by S3's answer) fails its message as a permanent `large_payload` without being read",
    )
    .needs(&["s3"]),
    Variable::new(
        "SQS_CLAIM_LARGE_MESSAGE_DELETE",
        "`off`",
        "`on`: delete each object once its message's completion committed, or once its message was skipped as a duplicate (a producer's resend uploads an object of its own); never for a failed message, once per object; needs `SQS_CLAIM_LARGE_MESSAGES=on` and `s3:DeleteObject`. Key on something the record carries (`message-id`, `attribute:NAME`, `envelope-id`) so a redelivery finds its key done without its object",
    )
    .needs(&["s3"]),
    Variable::new(
        "SQS_CLAIM_LARGE_MESSAGE_BUCKETS",
        "none (any bucket)",
        "the only buckets a pointer may name, separated by commas (`payments-large,payments-large-eu`); needs `SQS_CLAIM_LARGE_MESSAGES=on`. The sender chooses the bucket a pointer names: a pointer to another bucket is not fetched and fails its message as a permanent `large_payload` whose reason names the bucket. Unset, any bucket the role may read",
    )
    .needs(&["s3"]),
    Variable::new(
        "SQS_CLAIM_OFFLOAD_BUCKET",
        "none",
        "the publisher's bucket for large outputs (feature `s3`): an output over `SQS_CLAIM_OFFLOAD_OVER_BYTES` goes to S3 and is sent as the extended clients' pointer with `ExtendedPayloadSize`; the role needs `s3:PutObject`",
    )
    .needs(&["sqs", "s3"]),
    Variable::new(
        "SQS_CLAIM_OFFLOAD_OVER_BYTES",
        "`262144` (256 KiB)",
        "the size (body plus attributes) over which an output goes to `SQS_CLAIM_OFFLOAD_BUCKET`. Above 256 KiB it also raises the reference consumer's publisher limit to it: set it so only when the output queue takes that much (`template.yaml`'s takes 1 MiB and sets `1048576`); the default stays 256 KiB because SNS topics, and consumers a message may be forwarded to, stay at 256 KiB ([large-messages.md](large-messages.md))",
    )
    .needs(&["sqs", "s3"]),
    Variable::new(
        "SQS_CLAIM_METRICS_NAMESPACE",
        "`sqs-claim`",
        "the CloudWatch namespace of the metrics line the Lambda binary writes to stdout after every batch (Embedded Metric Format, dimensions `FunctionName` and `QueueName`; the metrics are in [operating.md](operating.md#metrics-and-logs)); `off` writes none. A namespace CloudWatch refuses (`AWS/...`, characters other than letters, digits, spaces and `. - _ / # :`) stops the start. The CLI never writes metrics: its stdout is its report",
    ),
    Variable::new(
        "SQS_CLAIM_POWERTOOLS_HANDLER",
        "none",
        "share a table a Powertools-Python consumer writes ([below](#a-table-powertools-writes)): the `module.qualname` of its `@idempotent_function` record handler, e.g. `app.record_handler` (`record_handler` in `app.py`). Setting it (or `SQS_CLAIM_POWERTOOLS_KEY_PREFIX`) turns the interop on",
    )
    .needs(&["powertools"]),
    Variable::new(
        "SQS_CLAIM_POWERTOOLS_FUNCTION",
        "`$AWS_LAMBDA_FUNCTION_NAME`, else `test-func`",
        "the Lambda function name in Powertools' keys, defaulted as Powertools defaults it (an empty `AWS_LAMBDA_FUNCTION_NAME` is kept). Set it to the Powertools function's name when this consumer is a new function beside it",
    )
    .needs(&["powertools"]),
    Variable::new(
        "SQS_CLAIM_POWERTOOLS_KEY_PREFIX",
        "none",
        "Powertools 3.x `key_prefix`: the keys are `{prefix}#{hash}`, without function or handler",
    )
    .needs(&["powertools"]),
    Variable::new(
        "SQS_CLAIM_POWERTOOLS_HASH",
        "`md5`",
        "Powertools' `hash_function`: `md5` or `sha256`",
    )
    .needs(&["powertools"]),
    Variable::new(
        "SQS_CLAIM_POWERTOOLS_VALIDATION",
        "none",
        "Powertools' `payload_validation_jmespath`: `body`, or `json:/pointer` for `powertools_json(body).a.b` (`json:/a/b`; `json:` for the whole body). Unset: no payload check, as Powertools without it",
    )
    .needs(&["powertools"]),
    Variable::new(
        "SQS_CLAIM_TLS_ROOTS",
        "the bundled Mozilla roots",
        "`native`: the AWS clients built by `sqs_claim::aws` (the DynamoDB store, the SQS publisher and queues) trust the operating system's root certificates instead of the ones compiled into the binary, for endpoints signed by a private CA (a TLS-inspecting proxy, an on-premises endpoint). Read by the `aws` module, not by `Settings`",
    ),
    Variable::new(
        "AWS_LAMBDA_LOG_FORMAT",
        "set by Lambda (`LoggingConfig.LogFormat`; `template.yaml`: `JSON`)",
        "`JSON`: one flat JSON object per line (`timestamp`, `level`, `message` at the top, then the fields of the event and its spans); `Text`: plain lines. Unset: JSON for the Lambda binary, text for the CLI",
    ),
    Variable::new(
        "AWS_LAMBDA_LOG_LEVEL",
        "set by Lambda (`LoggingConfig.ApplicationLogLevel`; `template.yaml`: `INFO`)",
        "the most verbose level written (`TRACE` ... `ERROR`, `FATAL`); `RUST_LOG` can narrow it, never widen it",
    ),
    Variable::new(
        "RUST_LOG",
        "`AWS_LAMBDA_LOG_LEVEL`, else `info` (Lambda); off (CLI)",
        "log filter (`tracing` `EnvFilter` syntax) under `AWS_LAMBDA_LOG_LEVEL`. Lambda logs go to stdout, the CLI's to stderr; message bodies are never logged (`lambda_runtime`'s own TRACE events are dropped whatever `RUST_LOG` says: they carry raw events, bodies included). An invalid value is ignored with a warning",
    ),
];

/// The doc whose table is [`VARIABLES`], and the lines around the table.
#[cfg(test)]
pub(crate) const DOC: (&str, &str, &str) = (
    include_str!("../../docs/configuration.md"),
    "<!-- BEGIN sqs_claim::settings::VARIABLES (src/settings/variables.rs) -->",
    "<!-- END sqs_claim::settings::VARIABLES -->",
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of `doc` between the `begin` and `end` lines.
    fn between<'a>(doc: &'a str, begin: &str, end: &str) -> &'a str {
        let start = doc.find(begin).map(|i| i + begin.len() + 1);
        let stop = doc.find(end);
        match (start, stop) {
            (Some(start), Some(stop)) if start <= stop => &doc[start..stop],
            _ => panic!("docs/configuration.md has no {begin:?} ... {end:?} block"),
        }
    }

    /// docs/configuration.md shows exactly this table: edit the table here, then paste the
    /// printed block there.
    #[test]
    fn docs_configuration_md_shows_this_table() {
        let (doc, begin, end) = DOC;
        let want = markdown_table(VARIABLES);
        assert!(
            between(doc, begin, end) == want,
            "docs/configuration.md's table is not VARIABLES'; the block should read:\n{want}"
        );
    }

    #[test]
    fn each_variable_once() {
        for (i, v) in VARIABLES.iter().enumerate() {
            assert!(
                VARIABLES[..i].iter().all(|w| w.name != v.name),
                "{} twice",
                v.name
            );
            assert!(!v.default.is_empty() && !v.meaning.is_empty(), "{}", v.name);
            assert!(!v.meaning.contains('\n'), "{}: one line", v.name);
        }
    }
}
