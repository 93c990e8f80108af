//! The rules: pure functions of the [`Facts`], one [`Finding`] each, in a fixed order.
//! `docs/operating.md` ("sqs-claim doctor") gives each rule's why.

use super::facts::{TableFacts, TableShape};
use super::{Facts, Finding, Status};

/// The least visibility timeout, in function timeouts (AWS's advice): a batch still running,
/// or retried after throttling, must not be handed to a second worker meanwhile.
pub const VISIBILITY_FACTOR: u64 = 6;
/// The least `maxReceiveCount` (AWS's advice): throttling, or a claim held by a worker that
/// died, costs receives without the message being at fault.
pub const MIN_MAX_RECEIVE_COUNT: u64 = 5;
/// The least claim TTL, in redelivery windows (visibility timeout x `maxReceiveCount`):
/// receives are at least a visibility timeout apart, but can be further apart (throttling,
/// batching windows), and a completed key must outlive the last one.
pub const TTL_WINDOW_FACTOR: u64 = 2;
/// The largest batch size Lambda accepts without a batching window (and the largest on FIFO).
pub const MAX_BATCH_WITHOUT_WINDOW: u64 = 10;

const HOW_QUEUE: &str = "give --queue-url URL";
const HOW_TABLE: &str = "give --store dynamodb:TABLE, --table TABLE or SQS_CLAIM_TABLE";

/// Every rule over `facts`, in the order the report prints them: the SQS rules, then the
/// stream rules for each stream mapping (none for an SQS consumer).
pub fn check(facts: &Facts) -> Vec<Finding> {
    vec![
        visibility_timeout(facts),
        redrive_policy(facts),
        report_batch_item_failures(facts),
        table_ttl(facts),
        claim_ttl_window(facts),
        claim_ttl_retention(facts),
        key_schema(facts),
        fifo_settings(facts),
        batching_window(facts),
        lease_window(facts),
        backoff_retention(facts),
        backoff_receives(facts),
        large_message_key(facts),
        large_message_buckets(facts),
    ]
    .into_iter()
    .chain(super::stream_rules::check(facts))
    .collect()
}

fn skip(rule: &'static str, detail: impl Into<String>) -> Finding {
    Finding::new(rule, Status::Skip, detail)
}

/// How to give a function value, and why the sources given did not tell it.
fn how_function(facts: &Facts, flag: &str) -> String {
    let mut how = format!("give --function NAME (Lambda API), --{flag} or --template FILE");
    for note in &facts.function.notes {
        how.push_str(" (");
        how.push_str(note);
        how.push(')');
    }
    how
}

fn visibility_timeout(facts: &Facts) -> Finding {
    const RULE: &str = "visibility-timeout";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let Some(t) = &facts.function.timeout_secs else {
        return skip(
            RULE,
            format!(
                "function timeout unknown: {}",
                how_function(facts, "function-timeout SECS")
            ),
        );
    };
    let need = t.value.saturating_mul(VISIBILITY_FACTOR);
    let vis = q.visibility_timeout_secs;
    let detail = format!(
        "visibility timeout {vis} s, function timeout {} s ({}): needs at least \
         {VISIBILITY_FACTOR} x {} = {need} s",
        t.value, t.source, t.value
    );
    if vis >= need {
        return Finding::new(RULE, Status::Ok, detail);
    }
    let mut fix = format!("raise the queue's VisibilityTimeout to at least {need} s");
    if vis / VISIBILITY_FACTOR >= 1 {
        fix.push_str(&format!(
            ", or lower the function timeout to at most {} s",
            vis / VISIBILITY_FACTOR
        ));
    }
    Finding::new(RULE, Status::Fail, detail).fix(fix)
}

fn redrive_policy(facts: &Facts) -> Finding {
    const RULE: &str = "redrive-policy";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let fix = format!(
        "give the queue a RedrivePolicy with a deadLetterTargetArn and a maxReceiveCount of at \
         least {MIN_MAX_RECEIVE_COUNT}"
    );
    match &q.redrive {
        None => Finding::new(
            RULE,
            Status::Fail,
            format!(
                "queue {} has no redrive policy: a message that always fails is received again \
                 until its retention ({} s) ends, then lost without a trace",
                q.name, q.retention_secs
            ),
        )
        .fix(fix),
        Some(r) if r.max_receive_count < MIN_MAX_RECEIVE_COUNT => Finding::new(
            RULE,
            Status::Fail,
            format!(
                "maxReceiveCount {} < {MIN_MAX_RECEIVE_COUNT} (dead-letter queue {}): throttling \
                 or a claim held by a worker that died can send a good message to the DLQ",
                r.max_receive_count, r.dead_letter_target_arn
            ),
        )
        .fix(format!(
            "set the RedrivePolicy's maxReceiveCount to at least {MIN_MAX_RECEIVE_COUNT}"
        )),
        Some(r) => Finding::new(
            RULE,
            Status::Ok,
            format!(
                "maxReceiveCount {} >= {MIN_MAX_RECEIVE_COUNT}, dead-letter queue {}",
                r.max_receive_count, r.dead_letter_target_arn
            ),
        ),
    }
}

fn report_batch_item_failures(facts: &Facts) -> Finding {
    const RULE: &str = "report-batch-item-failures";
    let fix = "add ReportBatchItemFailures to the event source mapping's FunctionResponseTypes";
    if let Some(why) = &facts.function.no_mapping {
        return Finding::new(RULE, Status::Fail, why.clone()).fix(format!(
            "create the SQS event source mapping with FunctionResponseTypes \
             [ReportBatchItemFailures] (or {fix})"
        ));
    }
    match &facts.function.report_batch_item_failures {
        None => skip(
            RULE,
            format!(
                "the mapping's FunctionResponseTypes unknown: {}",
                how_function(facts, "report-batch-item-failures yes|no")
            ),
        ),
        Some(k) if !k.value => Finding::new(
            RULE,
            Status::Fail,
            format!(
                "FunctionResponseTypes lacks ReportBatchItemFailures ({}): Lambda ignores the \
                 batch response, so one failed message redelivers the whole batch",
                k.source
            ),
        )
        .fix(fix),
        Some(k) => Finding::new(
            RULE,
            Status::Ok,
            format!(
                "FunctionResponseTypes has ReportBatchItemFailures ({})",
                k.source
            ),
        ),
    }
}

/// The table rules' answer when there is no table to look at.
fn no_table<'a>(rule: &'static str, facts: &'a Facts) -> Result<&'a TableShape, Finding> {
    match &facts.table {
        TableFacts::NotDynamoDb(store) => Err(skip(
            rule,
            format!("the store is {store}, not DynamoDB: {HOW_TABLE}"),
        )),
        TableFacts::Missing { table } => Err(Finding::new(
            rule,
            Status::Fail,
            format!("DynamoDB table {table} does not exist"),
        )
        .fix(format!(
            "create it with `sqs-claim init --store dynamodb:{table}`"
        ))),
        TableFacts::Found(shape) => Ok(shape),
    }
}

fn table_ttl(facts: &Facts) -> Finding {
    const RULE: &str = "table-ttl";
    let t = match no_table(RULE, facts) {
        Ok(t) => t,
        Err(finding) => return finding,
    };
    let want = &t.expected_ttl_attribute;
    let seen = t.ttl.attribute.as_deref().unwrap_or("no attribute");
    let on = matches!(t.ttl.status.as_str(), "ENABLED" | "ENABLING");
    let detail = format!("table {} TTL {} on {seen}", t.table, t.ttl.status);
    if on && t.ttl.attribute.as_deref() == Some(want.as_str()) {
        return Finding::new(RULE, Status::Ok, detail);
    }
    if on {
        return Finding::new(
            RULE,
            Status::Fail,
            format!("{detail}, but the store writes each record's expiry to {want}"),
        )
        .fix(format!(
            "disable TTL and enable it on {want} (a table has one TTL attribute)"
        ));
    }
    Finding::new(
        RULE,
        Status::Fail,
        format!(
            "{detail}: expired claim records are never deleted and the table grows without end"
        ),
    )
    .fix(format!(
        "enable TTL on {want}: `sqs-claim init --store dynamodb:{}` does it",
        t.table
    ))
}

fn claim_ttl_window(facts: &Facts) -> Finding {
    const RULE: &str = "claim-ttl-window";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let ttl = facts.claim_ttl_secs;
    let retention = q.retention_secs;
    // No message is delivered after its retention ends, so no key needs to outlive it.
    let (need, mut detail) = match &q.redrive {
        Some(r) => {
            let window = q
                .visibility_timeout_secs
                .saturating_mul(r.max_receive_count);
            let need = window.saturating_mul(TTL_WINDOW_FACTOR);
            let detail = format!(
                "claim TTL {ttl} s (SQS_CLAIM_TTL_SECS), redelivery window {} s x \
                 maxReceiveCount {} = {window} s: needs at least {TTL_WINDOW_FACTOR} x {window} \
                 = {need} s",
                q.visibility_timeout_secs, r.max_receive_count
            );
            (need, detail)
        }
        None => (
            retention,
            format!(
                "claim TTL {ttl} s (SQS_CLAIM_TTL_SECS); no redrive policy, so a message may be \
                 redelivered until its retention ({retention} s) ends"
            ),
        ),
    };
    let need = if need > retention {
        detail.push_str(&format!(
            ", capped at the retention period {retention} s (nothing is delivered after it)"
        ));
        retention
    } else {
        need
    };
    if ttl >= need {
        return Finding::new(RULE, Status::Ok, detail);
    }
    Finding::new(
        RULE,
        Status::Fail,
        format!("{detail}: a completed message redelivered after its key expired runs again"),
    )
    .fix(format!(
        "raise SQS_CLAIM_TTL_SECS (template parameter IdempotencyTtlSeconds) to at least {need}"
    ))
}

/// An `at least` lease (`SQS_CLAIM_LEASE_AT_LEAST_SECS`) holds a dead worker's claim past the
/// deadline; every delivery meanwhile is `held_elsewhere` and uses up a receive. If the
/// redelivery window is shorter than the lease, the message reaches the DLQ while still held.
fn lease_window(facts: &Facts) -> Finding {
    const RULE: &str = "lease-window";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let Some(lease) = facts.lease_at_least_secs else {
        return Finding::new(
            RULE,
            Status::Ok,
            "claims are leased short and extended while the handler runs \
             (SQS_CLAIM_LEASE_AT_LEAST_SECS unset)",
        );
    };
    let Some(r) = &q.redrive else {
        return Finding::new(
            RULE,
            Status::Ok,
            format!(
                "lease at least {lease} s (SQS_CLAIM_LEASE_AT_LEAST_SECS); no redrive policy, \
                 so a held message is retried until its retention ({} s) ends",
                q.retention_secs
            ),
        );
    };
    let window = q
        .visibility_timeout_secs
        .saturating_mul(r.max_receive_count);
    let detail = format!(
        "lease at least {lease} s (SQS_CLAIM_LEASE_AT_LEAST_SECS), redelivery window {} s x \
         maxReceiveCount {} = {window} s",
        q.visibility_timeout_secs, r.max_receive_count
    );
    if window > lease {
        return Finding::new(RULE, Status::Ok, detail);
    }
    Finding::new(
        RULE,
        Status::Warn,
        format!(
            "{detail}: a message whose invocation died is received {} times while its claim is \
             still held, then goes to the dead-letter queue unprocessed",
            r.max_receive_count
        ),
    )
    .fix(format!(
        "raise visibility timeout x maxReceiveCount above {lease} s, lower \
         SQS_CLAIM_LEASE_AT_LEAST_SECS, or plan to redrive the DLQ after the lease"
    ))
}

/// The backoff must fit in the queue's retention: a message invisible past its retention is
/// deleted by SQS, never received again, never dead-lettered.
fn backoff_retention(facts: &Facts) -> Finding {
    const RULE: &str = "backoff-retention";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let Some(b) = &facts.backoff else {
        return Finding::new(
            RULE,
            Status::Ok,
            "backoff off (SQS_CLAIM_BACKOFF): a reported message comes back after the queue's \
             visibility timeout",
        );
    };
    let cap = b.cap().as_secs();
    let retention = q.retention_secs;
    if cap >= retention {
        return Finding::new(
            RULE,
            Status::Fail,
            format!(
                "backoff cap {cap} s (SQS_CLAIM_BACKOFF_CAP_SECS) >= the queue's retention \
                 {retention} s: a message that keeps failing is deleted by SQS while invisible, \
                 never dead-lettered"
            ),
        )
        .fix(format!(
            "lower SQS_CLAIM_BACKOFF_CAP_SECS well below {retention} s, or raise the queue's \
             MessageRetentionPeriod"
        ));
    }
    // The longest a message failing every time waits before its last receive.
    let Some(r) = &q.redrive else {
        return Finding::new(
            RULE,
            Status::Ok,
            format!("backoff cap {cap} s < retention {retention} s"),
        );
    };
    let receives = u32::try_from(r.max_receive_count).unwrap_or(u32::MAX);
    let longest: u64 = (1..receives).map(|n| b.step(n).as_secs()).sum();
    let detail = format!(
        "backoff cap {cap} s; a message failing on each of its {receives} receives waits up to \
         {longest} s in all, retention {retention} s"
    );
    if longest < retention {
        return Finding::new(RULE, Status::Ok, detail);
    }
    Finding::new(
        RULE,
        Status::Warn,
        format!("{detail}: it can expire before it reaches the dead-letter queue"),
    )
    .fix(
        "lower SQS_CLAIM_BACKOFF_CAP_SECS or maxReceiveCount, or raise the queue's \
         MessageRetentionPeriod",
    )
}

/// A backoff that never reaches its cap before `maxReceiveCount` runs out spends a message's
/// receives in quick retries: a provider down for longer than the sum of the delays sends
/// every message of that window to the DLQ.
fn backoff_receives(facts: &Facts) -> Finding {
    const RULE: &str = "backoff-receives";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let Some(b) = &facts.backoff else {
        return Finding::new(RULE, Status::Ok, "backoff off (SQS_CLAIM_BACKOFF)");
    };
    let Some(r) = &q.redrive else {
        return Finding::new(
            RULE,
            Status::Ok,
            "no redrive policy: the backoff reaches its cap before the receives run out",
        );
    };
    let receives = u32::try_from(r.max_receive_count).unwrap_or(u32::MAX);
    let Some(to_cap) = b.receives_to_cap() else {
        return Finding::new(RULE, Status::Ok, "the backoff does not grow (factor 1)");
    };
    // A retry after a capped wait needs a failed receive `to_cap` and one more receive.
    let need = u64::from(to_cap) + 1;
    let floor = b.least_wait_before(receives).as_secs();
    let detail = format!(
        "backoff {} s doubling to {} s reaches its cap after receive {to_cap}; maxReceiveCount \
         {receives} (a message failing every time is retried for at least {floor} s)",
        b.first().as_secs(),
        b.cap().as_secs()
    );
    if r.max_receive_count >= need {
        return Finding::new(RULE, Status::Ok, detail);
    }
    Finding::new(
        RULE,
        Status::Warn,
        format!("{detail}: the receives run out before the backoff reaches its cap"),
    )
    .fix(format!(
        "raise maxReceiveCount to at least {need}, or raise SQS_CLAIM_BACKOFF_FIRST_SECS / \
         lower SQS_CLAIM_BACKOFF_CAP_SECS"
    ))
}

fn claim_ttl_retention(facts: &Facts) -> Finding {
    const RULE: &str = "claim-ttl-retention";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let (ttl, retention) = (facts.claim_ttl_secs, q.retention_secs);
    if ttl >= retention {
        return Finding::new(
            RULE,
            Status::Ok,
            format!(
                "claim TTL {ttl} s >= queue retention {retention} s: a producer's resend within \
                 the retention period is still caught"
            ),
        );
    }
    Finding::new(
        RULE,
        Status::Warn,
        format!(
            "claim TTL {ttl} s < queue retention {retention} s: a message a producer resends \
             more than {ttl} s after the first copy runs again"
        ),
    )
    .fix(format!(
        "if producers may resend that late, raise SQS_CLAIM_TTL_SECS to at least {retention}"
    ))
}

/// The sender of a large message names the bucket its pointer points at: without an
/// allowlist, a sender can make the consumer read (and, with deletion on, delete) objects of
/// any bucket its role reaches.
fn large_message_buckets(facts: &Facts) -> Finding {
    const RULE: &str = "large-message-buckets";
    if !facts.large_messages {
        return Finding::new(
            RULE,
            Status::Ok,
            "pointers to S3 not read (SQS_CLAIM_LARGE_MESSAGES off)",
        );
    }
    if facts.large_message_buckets.is_empty() {
        let deletes = if facts.large_message_delete {
            ", and deleted once done"
        } else {
            ""
        };
        return Finding::new(
            RULE,
            Status::Warn,
            format!(
                "pointers to S3 read from any bucket the sender names: objects of every bucket \
                 the function's role may read are fetched{deletes}"
            ),
        )
        .fix(
            "set SQS_CLAIM_LARGE_MESSAGE_BUCKETS to the producers' bucket(s), comma-separated \
             (LargeMessages::allowed_buckets), and grant the role s3:GetObject on those alone",
        );
    }
    Finding::new(
        RULE,
        Status::Ok,
        format!(
            "pointers read from {} only (SQS_CLAIM_LARGE_MESSAGE_BUCKETS); others fail as \
             large_payload for good",
            facts.large_message_buckets.join(", ")
        ),
    )
}

/// With the objects of large messages deleted once done, a redelivery of a message already
/// done has no object: only a key the record carries recognises it as a duplicate.
fn large_message_key(facts: &Facts) -> Finding {
    const RULE: &str = "large-message-key";
    if !facts.large_message_delete {
        return Finding::new(
            RULE,
            Status::Ok,
            "objects of large messages kept (SQS_CLAIM_LARGE_MESSAGE_DELETE off)",
        );
    }
    let fix = "key on something the record carries (SQS_CLAIM_KEY=message-id, attribute:NAME or \
               envelope-id), or keep the objects (SQS_CLAIM_LARGE_MESSAGE_DELETE=off) and let an \
               S3 lifecycle rule expire them";
    match &facts.key {
        Some(sqs_claim::KeySource::JsonPointer(_) | sqs_claim::KeySource::BodySha256) => {
            Finding::new(
                RULE,
                Status::Warn,
                "objects deleted once done, and the key is read from the payload: a redelivery \
                 of a message already done (a lost answer) finds no object, cannot read its key, \
                 and fails as large_payload for good instead of being skipped as a duplicate",
            )
            .fix(fix)
        }
        None => Finding::new(
            RULE,
            Status::Warn,
            "objects deleted once done, and SQS_CLAIM_KEY unset: if the consumer's own default \
             key is read from the payload (the example app's json:/order_id), a redelivery of a \
             message already done fails as large_payload instead of being skipped",
        )
        .fix(fix),
        Some(key) => Finding::new(
            RULE,
            Status::Ok,
            format!(
                "objects deleted once done, key {key} carried by the record: a redelivery whose \
                 object went is skipped as a duplicate"
            ),
        ),
    }
}

fn key_schema(facts: &Facts) -> Finding {
    const RULE: &str = "key-schema";
    let t = match no_table(RULE, facts) {
        Ok(t) => t,
        Err(finding) => return finding,
    };
    let key = &t.expected_key;
    let sort = t.expected_sort_key.as_deref();
    let seen = t
        .key_schema
        .iter()
        .map(|(name, kind, ty)| format!("{name} ({kind}, {})", ty.as_deref().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(", ");
    let string_key = |(name, kind, ty): &(String, String, Option<String>), want: &str, of: &str| {
        name == want && kind == of && ty.as_deref() == Some("S")
    };
    let (good, expected) = match (t.key_schema.as_slice(), sort) {
        ([pk], None) => (
            string_key(pk, key, "HASH"),
            format!("a single HASH key {key}"),
        ),
        ([pk, sk], Some(sort)) => (
            string_key(pk, key, "HASH") && string_key(sk, sort, "RANGE"),
            format!("the HASH key {key} and the RANGE key {sort}"),
        ),
        (_, None) => (false, format!("a single HASH key {key}")),
        (_, Some(sort)) => (
            false,
            format!("the HASH key {key} and the RANGE key {sort}"),
        ),
    };
    if good {
        return Finding::new(
            RULE,
            Status::Ok,
            format!("table {} has {expected}: {seen}", t.table),
        );
    }
    Finding::new(
        RULE,
        Status::Fail,
        format!(
            "table {} has the key schema {seen}; the store writes {expected} of type S, so \
             every claim would be refused",
            t.table
        ),
    )
    .fix(
        "point the store at the claims table, or set SQS_CLAIM_DYNAMODB_PARTITION_KEY and \
         SQS_CLAIM_DYNAMODB_SORT_KEY to this table's keys, or create one with `sqs-claim init \
         --store dynamodb:NEW_TABLE` and the same key flags (a table's key cannot be changed)",
    )
}

fn fifo_settings(facts: &Facts) -> Finding {
    const RULE: &str = "fifo-settings";
    let Some(q) = &facts.queue else {
        return skip(RULE, format!("queue unknown: {HOW_QUEUE}"));
    };
    let named_fifo = q.name.ends_with(".fifo");
    match (named_fifo, q.fifo_queue) {
        (false, false) => Finding::new(
            RULE,
            Status::Ok,
            format!("standard queue {} (FifoQueue false)", q.name),
        ),
        (true, false) => Finding::new(
            RULE,
            Status::Fail,
            format!(
                "queue {} is named .fifo but FifoQueue is false: the processor reads the .fifo \
                 suffix and runs batches in order, while SQS keeps none",
                q.name
            ),
        )
        .fix("recreate the queue with FifoQueue true (SQS cannot change it), or without the .fifo suffix"),
        (false, true) => Finding::new(
            RULE,
            Status::Fail,
            format!(
                "queue {} has FifoQueue true but its name lacks .fifo: the processor would run \
                 its batches as a standard queue's, out of order",
                q.name
            ),
        )
        .fix("name a FIFO queue NAME.fifo"),
        (true, true) if facts.content_based_dedup_expected && !q.content_based_dedup => {
            Finding::new(
                RULE,
                Status::Fail,
                format!(
                    "FIFO queue {}: producers rely on content-based deduplication \
                     (--content-based-dedup yes) but ContentBasedDeduplication is false, so a \
                     send without a MessageDeduplicationId is refused",
                    q.name
                ),
            )
            .fix("set ContentBasedDeduplication true on the queue")
        }
        (true, true) => Finding::new(
            RULE,
            Status::Ok,
            format!(
                "FIFO queue {}: FifoQueue true, ContentBasedDeduplication {}",
                q.name, q.content_based_dedup
            ),
        ),
    }
}

fn batching_window(facts: &Facts) -> Finding {
    const RULE: &str = "batching-window";
    let Some(b) = &facts.function.batch_size else {
        return skip(
            RULE,
            format!(
                "batch size unknown: {}",
                how_function(facts, "batch-size N")
            ),
        );
    };
    if b.value <= MAX_BATCH_WITHOUT_WINDOW {
        return Finding::new(
            RULE,
            Status::Ok,
            format!(
                "batch size {} ({}) <= {MAX_BATCH_WITHOUT_WINDOW}: no batching window needed",
                b.value, b.source
            ),
        );
    }
    let Some(q) = &facts.queue else {
        return skip(
            RULE,
            format!(
                "batch size {} > {MAX_BATCH_WITHOUT_WINDOW}: what it needs depends on the queue \
                 type: {HOW_QUEUE}",
                b.value
            ),
        );
    };
    if q.fifo_queue || q.name.ends_with(".fifo") {
        return Finding::new(
            RULE,
            Status::Fail,
            format!(
                "batch size {} ({}) on FIFO queue {}: Lambda allows at most \
                 {MAX_BATCH_WITHOUT_WINDOW}",
                b.value, b.source, q.name
            ),
        )
        .fix(format!(
            "set BatchSize to at most {MAX_BATCH_WITHOUT_WINDOW}"
        ));
    }
    let Some(w) = &facts.function.batching_window_secs else {
        return skip(
            RULE,
            format!(
                "batch size {} > {MAX_BATCH_WITHOUT_WINDOW} but the batching window unknown: {}",
                b.value,
                how_function(facts, "batching-window SECS")
            ),
        );
    };
    let detail = format!(
        "batch size {} ({}), MaximumBatchingWindowInSeconds {} ({})",
        b.value, b.source, w.value, w.source
    );
    if w.value >= 1 {
        return Finding::new(RULE, Status::Ok, detail);
    }
    Finding::new(
        RULE,
        Status::Fail,
        format!(
            "{detail}: above {MAX_BATCH_WITHOUT_WINDOW} messages AWS requires a window of at \
             least 1 s"
        ),
    )
    .fix(format!(
        "set MaximumBatchingWindowInSeconds to at least 1, or BatchSize to at most \
         {MAX_BATCH_WITHOUT_WINDOW}"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::facts::{FunctionFacts, Known, QueueFacts, Redrive, Ttl};
    use super::*;

    /// A configuration every rule accepts: the template's defaults with a 1-day retention.
    fn good() -> Facts {
        let mut queue = QueueFacts::new("input");
        queue.visibility_timeout_secs = 180;
        queue.retention_secs = 86_400;
        queue.redrive = Some(Redrive::new(5, "arn:aws:sqs:us-east-1:1:dlq"));
        Facts {
            queue: Some(queue),
            function: FunctionFacts {
                timeout_secs: Some(Known::new(30, "test")),
                report_batch_item_failures: Some(Known::new(true, "test")),
                batch_size: Some(Known::new(10, "test")),
                batching_window_secs: Some(Known::new(0, "test")),
                ..FunctionFacts::default()
            },
            table: TableFacts::Found(TableShape {
                table: "claims".into(),
                expected_key: "id".into(),
                expected_sort_key: None,
                expected_ttl_attribute: "expiration".into(),
                key_schema: vec![("id".into(), "HASH".into(), Some("S".into()))],
                ttl: Ttl::new("ENABLED", Some("expiration".into())),
            }),
            claim_ttl_secs: 86_400,
            lease_at_least_secs: None,
            content_based_dedup_expected: false,
            backoff: None,
            large_message_delete: false,
            large_messages: false,
            large_message_buckets: Vec::new(),
            key: None,
        }
    }

    #[test]
    fn reading_large_payloads_wants_a_bucket_allowlist() {
        let mut f = good();
        assert_eq!(status_of(&f, "large-message-buckets"), Status::Ok);
        f.large_messages = true;
        assert_eq!(status_of(&f, "large-message-buckets"), Status::Warn);
        f.large_message_buckets = vec!["payloads".into()];
        assert_eq!(status_of(&f, "large-message-buckets"), Status::Ok);
    }

    #[test]
    fn deleting_large_payloads_wants_a_key_the_record_carries() {
        let mut f = good();
        assert_eq!(status_of(&f, "large-message-key"), Status::Ok);
        f.large_message_delete = true;
        assert_eq!(status_of(&f, "large-message-key"), Status::Warn);
        f.key = Some(sqs_claim::KeySource::JsonPointer("/order_id".into()));
        assert_eq!(status_of(&f, "large-message-key"), Status::Warn);
        f.key = Some(sqs_claim::KeySource::MessageId);
        assert_eq!(status_of(&f, "large-message-key"), Status::Ok);
    }

    #[test]
    fn a_backoff_must_fit_the_retention_and_reach_its_cap_before_the_receives_run_out() {
        use std::time::Duration;
        let mut f = good();
        assert_eq!(status_of(&f, "backoff-retention"), Status::Ok);
        assert_eq!(status_of(&f, "backoff-receives"), Status::Ok);
        // The default: 30 s doubling to 900 s, capped from receive 6; retention 1 day.
        f.backoff = Some(sqs_claim::Backoff::default());
        assert_eq!(status_of(&f, "backoff-retention"), Status::Ok);
        assert_eq!(
            status_of(&f, "backoff-receives"),
            Status::Warn,
            "maxReceiveCount 5"
        );
        f.queue.as_mut().expect("queue").redrive =
            Some(Redrive::new(7, "arn:aws:sqs:us-east-1:1:dlq"));
        assert_eq!(status_of(&f, "backoff-receives"), Status::Ok);
        f.queue.as_mut().expect("queue").redrive =
            Some(Redrive::new(6, "arn:aws:sqs:us-east-1:1:dlq"));
        assert_eq!(status_of(&f, "backoff-receives"), Status::Warn);
        // A cap beyond the retention.
        f.backoff = Some(sqs_claim::Backoff::exponential(
            Duration::from_secs(60),
            Duration::from_secs(12 * 3600),
        ));
        f.queue.as_mut().expect("queue").retention_secs = 3600;
        assert_eq!(status_of(&f, "backoff-retention"), Status::Fail);
        // Under it, but the waits of all the receives add up past it.
        f.backoff = Some(sqs_claim::Backoff::fixed(Duration::from_secs(900)));
        assert_eq!(status_of(&f, "backoff-retention"), Status::Warn);
        assert_eq!(status_of(&f, "backoff-receives"), Status::Ok);
        f.queue = None;
        assert_eq!(status_of(&f, "backoff-retention"), Status::Skip);
        assert_eq!(status_of(&f, "backoff-receives"), Status::Skip);
    }

    #[test]
    fn an_at_least_lease_must_fit_in_the_redelivery_window() {
        let mut f = good();
        assert_eq!(status_of(&f, "lease-window"), Status::Ok);
        // 180 s visibility x 5 receives = 900 s.
        f.lease_at_least_secs = Some(3600);
        assert_eq!(status_of(&f, "lease-window"), Status::Warn);
        f.lease_at_least_secs = Some(900);
        assert_eq!(status_of(&f, "lease-window"), Status::Warn);
        f.lease_at_least_secs = Some(899);
        assert_eq!(status_of(&f, "lease-window"), Status::Ok);
        f.queue = None;
        f.lease_at_least_secs = Some(3600);
        assert_eq!(status_of(&f, "lease-window"), Status::Skip);
    }

    fn status_of(facts: &Facts, rule: &str) -> Status {
        let findings = check(facts);
        let f = findings
            .iter()
            .find(|f| f.rule == rule)
            .unwrap_or_else(|| panic!("no rule {rule}"));
        // A line that asks for a change says which; ok and skip lines ask for none.
        assert_eq!(
            matches!(f.status, Status::Fail | Status::Warn),
            f.fix.is_some(),
            "{f}"
        );
        f.status
    }

    fn queue(facts: &mut Facts) -> &mut QueueFacts {
        facts.queue.as_mut().expect("a queue")
    }

    #[test]
    fn a_good_configuration_passes_every_rule() {
        let findings = check(&good());
        assert_eq!(findings.len(), 14);
        for f in &findings {
            assert_eq!(f.status, Status::Ok, "{f}");
        }
    }

    #[test]
    fn each_stream_mapping_adds_the_stream_rules_after_the_sqs_ones() {
        use super::super::facts::{StreamFacts, StreamSource};
        let mut f = good();
        f.function.streams = vec![
            StreamFacts::new(StreamSource::Kinesis, "k"),
            StreamFacts::new(StreamSource::DynamoDbStreams, "d"),
        ];
        let rules: Vec<&str> = check(&f).iter().map(|f| f.rule).collect();
        let sqs: Vec<&str> = check(&good()).iter().map(|f| f.rule).collect();
        assert_eq!(rules[..sqs.len()], sqs[..]);
        let streams: Vec<&str> = super::super::STREAM_RULES
            .iter()
            .chain(super::super::STREAM_RULES.iter())
            .copied()
            .collect();
        assert_eq!(rules[sqs.len()..], streams[..]);
    }

    #[test]
    fn visibility_needs_six_function_timeouts() {
        let mut f = good();
        queue(&mut f).visibility_timeout_secs = 179;
        assert_eq!(status_of(&f, "visibility-timeout"), Status::Fail);
        queue(&mut f).visibility_timeout_secs = 180;
        assert_eq!(status_of(&f, "visibility-timeout"), Status::Ok);
        f.function.timeout_secs = None;
        assert_eq!(status_of(&f, "visibility-timeout"), Status::Skip);
    }

    #[test]
    fn the_redrive_policy_needs_five_receives() {
        let mut f = good();
        queue(&mut f).redrive = Some(Redrive::new(4, "dlq"));
        assert_eq!(status_of(&f, "redrive-policy"), Status::Fail);
        queue(&mut f).redrive = None;
        assert_eq!(status_of(&f, "redrive-policy"), Status::Fail);
    }

    #[test]
    fn the_claim_ttl_covers_twice_the_redelivery_window_up_to_the_retention() {
        let mut f = good();
        // 180 s x 5 = 900 s; twice that is 1800 s.
        f.claim_ttl_secs = 1799;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Fail);
        f.claim_ttl_secs = 1800;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Ok);
        // A retention shorter than twice the window caps what is needed.
        queue(&mut f).retention_secs = 1000;
        f.claim_ttl_secs = 1000;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Ok);
        f.claim_ttl_secs = 999;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Fail);
        // Without a redrive policy a message lives until its retention ends.
        queue(&mut f).redrive = None;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Fail);
        f.claim_ttl_secs = 1000;
        assert_eq!(status_of(&f, "claim-ttl-window"), Status::Ok);
    }

    #[test]
    fn a_claim_ttl_shorter_than_the_retention_warns() {
        let mut f = good();
        queue(&mut f).retention_secs = 86_401;
        assert_eq!(status_of(&f, "claim-ttl-retention"), Status::Warn);
    }

    #[test]
    fn the_table_needs_ttl_on_the_expiry_and_the_store_s_key() {
        let mut f = good();
        let TableFacts::Found(t) = &mut f.table else {
            unreachable!()
        };
        t.ttl = Ttl::new("DISABLED", None);
        t.key_schema = vec![("pk".into(), "HASH".into(), Some("S".into()))];
        assert_eq!(status_of(&f, "table-ttl"), Status::Fail);
        assert_eq!(status_of(&f, "key-schema"), Status::Fail);
        let TableFacts::Found(t) = &mut f.table else {
            unreachable!()
        };
        t.ttl = Ttl::new("ENABLED", Some("ttl".into()));
        t.key_schema = vec![
            ("id".into(), "HASH".into(), Some("S".into())),
            ("sk".into(), "RANGE".into(), Some("S".into())),
        ];
        assert_eq!(status_of(&f, "table-ttl"), Status::Fail);
        assert_eq!(status_of(&f, "key-schema"), Status::Fail);
        f.table = TableFacts::Missing {
            table: "claims".into(),
        };
        assert_eq!(status_of(&f, "key-schema"), Status::Fail);
        f.table = TableFacts::NotDynamoDb("sqlite:x.db".into());
        assert_eq!(status_of(&f, "table-ttl"), Status::Skip);
    }

    /// A single-table layout: the composite key the store's schema names passes; the same
    /// table fails a store expecting the single `id` key, and a composite key with another sort
    /// key, a numeric one, or the keys swapped fails the single-table store.
    #[test]
    fn a_composite_key_passes_when_the_store_writes_it() {
        let mut f = good();
        let composite = vec![
            ("pk".into(), "HASH".into(), Some("S".into())),
            ("sk".into(), "RANGE".into(), Some("S".into())),
        ];
        let TableFacts::Found(t) = &mut f.table else {
            unreachable!()
        };
        t.key_schema = composite.clone();
        t.expected_key = "pk".into();
        assert_eq!(
            status_of(&f, "key-schema"),
            Status::Fail,
            "store expects no sort key"
        );
        let set = |f: &mut Facts, schema: Vec<(String, String, Option<String>)>| {
            let TableFacts::Found(t) = &mut f.table else {
                unreachable!()
            };
            t.expected_sort_key = Some("sk".into());
            t.key_schema = schema;
        };
        set(&mut f, composite.clone());
        assert_eq!(status_of(&f, "key-schema"), Status::Ok);
        for wrong in [
            vec![("pk".into(), "HASH".into(), Some("S".into()))],
            vec![
                ("pk".into(), "HASH".into(), Some("S".into())),
                ("sort".into(), "RANGE".into(), Some("S".into())),
            ],
            vec![
                ("pk".into(), "HASH".into(), Some("S".into())),
                ("sk".into(), "RANGE".into(), Some("N".into())),
            ],
            vec![
                ("sk".into(), "HASH".into(), Some("S".into())),
                ("pk".into(), "RANGE".into(), Some("S".into())),
            ],
        ] {
            set(&mut f, wrong.clone());
            assert_eq!(status_of(&f, "key-schema"), Status::Fail, "{wrong:?}");
        }
    }

    #[test]
    fn a_fifo_queue_is_named_and_flagged_as_one() {
        let mut f = good();
        queue(&mut f).name = "input.fifo".into();
        assert_eq!(status_of(&f, "fifo-settings"), Status::Fail);
        queue(&mut f).fifo_queue = true;
        assert_eq!(status_of(&f, "fifo-settings"), Status::Ok);
        f.content_based_dedup_expected = true;
        assert_eq!(status_of(&f, "fifo-settings"), Status::Fail);
        queue(&mut f).content_based_dedup = true;
        assert_eq!(status_of(&f, "fifo-settings"), Status::Ok);
        queue(&mut f).name = "input".into();
        assert_eq!(status_of(&f, "fifo-settings"), Status::Fail);
    }

    #[test]
    fn a_large_batch_needs_a_window_and_a_standard_queue() {
        let mut f = good();
        f.function.batch_size = Some(Known::new(11, "test"));
        assert_eq!(status_of(&f, "batching-window"), Status::Fail);
        f.function.batching_window_secs = Some(Known::new(1, "test"));
        assert_eq!(status_of(&f, "batching-window"), Status::Ok);
        queue(&mut f).fifo_queue = true;
        assert_eq!(status_of(&f, "batching-window"), Status::Fail);
    }

    #[test]
    fn mapping_rules_fail_without_report_batch_item_failures_or_a_mapping() {
        let mut f = good();
        f.function.report_batch_item_failures = Some(Known::new(false, "test"));
        assert_eq!(status_of(&f, "report-batch-item-failures"), Status::Fail);
        f.function.report_batch_item_failures = None;
        assert_eq!(status_of(&f, "report-batch-item-failures"), Status::Skip);
        f.function.no_mapping = Some("no mapping".into());
        assert_eq!(status_of(&f, "report-batch-item-failures"), Status::Fail);
    }

    #[test]
    fn unknown_values_skip_and_say_how_to_give_them() {
        let f = Facts {
            queue: None,
            function: FunctionFacts::default(),
            table: TableFacts::NotDynamoDb("sqlite:x.db".into()),
            claim_ttl_secs: 86_400,
            lease_at_least_secs: Some(3600),
            content_based_dedup_expected: false,
            backoff: Some(sqs_claim::Backoff::default()),
            large_message_delete: false,
            large_messages: false,
            large_message_buckets: Vec::new(),
            key: None,
        };
        // Every rule that reads the queue, the function or the table; `large-message-key`
        // and `large-message-buckets` read the settings alone.
        for finding in check(&f)
            .into_iter()
            .filter(|f| !f.rule.starts_with("large-message-"))
        {
            assert_eq!(finding.status, Status::Skip, "{finding}");
            assert!(finding.detail.contains("give --"), "{finding}");
        }
    }
}
