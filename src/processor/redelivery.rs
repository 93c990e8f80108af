//! When a message reported for retry comes back: after the batch, each one gets a visibility
//! timeout of its own through `ChangeMessageVisibilityBatch`, instead of the queue's.
//!
//! *Feature `sqs`.*
//!
//! Without this step a reported message comes back when the queue's visibility timeout
//! (6x the function's timeout, as AWS advises) lapses, every time, whatever went wrong. With
//! it, each message reported for retry gets, in one `ChangeMessageVisibilityBatch` call per
//! 10 messages (sent at once, inside the invocation's time budget, with the receipt handle
//! from the event record):
//!
//! | outcome | comes back after |
//! |---------|------------------|
//! | `failed`, the handler returned [`Retry::after`](crate::Retry::after) | that delay |
//! | `failed`, `handler_timeout` under a claim (the claim is kept) | just after the claim's lease lapses (the lease policy's end, plus [`Redelivery::lease_slack`]); without a claim (one-shot, no key), the backoff |
//! | `failed`, any other kind | the [`Backoff`] for its kind ([`Redelivery::backoff_for`]), else [`Redelivery::backoff`], from its `ApproximateReceiveCount` |
//! | `held_elsewhere` with its `lease_until` | just after that lease lapses (`lease_until` + slack) |
//! | `cut_off` (a claim that landed is kept) | just after the claim's lease lapses |
//! | `not_started` after an earlier failure in its FIFO group (or batch) | with the longest delay given in its group (batch), so the lane comes back together |
//! | `not_started` at the deadline, `held_elsewhere` without `lease_until` | the queue's visibility timeout (unchanged) |
//!
//! Every delay is at most 12 hours (SQS's limit, counted from the receive) less the time the
//! invocation has run and a minute of margin. A message whose change fails (the call refused,
//! throttled, the queue unreachable, the time budget spent) is still reported for retry, and
//! comes back after the queue's visibility timeout, as without this step: nothing is lost.
//!
//! How Lambda's event source mapping treats it: the mapping deletes the messages the partial
//! batch response does not name, and does nothing to those it names ("after your queue's
//! visibility timeout runs out, the message will again reappear in the queue", AWS Lambda
//! developer guide, *Handling errors for an SQS event source*). A visibility set during the
//! invocation with the record's receipt handle therefore stands: SQS counts it from the
//! `ChangeMessageVisibility` call, not from the receive, and the next receive raises
//! `ApproximateReceiveCount`, so the queue's `maxReceiveCount` still bounds the retries. The
//! function's role needs `sqs:ChangeMessageVisibility` (which also authorizes the batch call).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tracing::{error, warn};

use super::after::{AfterBatch, Finished, Received};
use crate::Backoff;
use crate::outcome::{FailureKind, ItemReport, NotStarted, Outcome};

/// How many entries SQS takes per `ChangeMessageVisibilityBatch` call.
const PER_CALL: usize = 10;

/// How many of a batch's calls are in flight at once.
const CALLS_AT_ONCE: usize = 8;

/// Kept under SQS's 12 hours: the receive happened a little before the invocation started.
const RECEIVE_MARGIN: Duration = Duration::from_secs(60);

/// When each message reported for retry comes back (see the module docs). Set it with
/// [`ProcessorBuilder::redelivery`](crate::ProcessorBuilder::redelivery).
///
/// *Feature `sqs`.*
///
/// ```no_run
/// # async fn demo() {
/// use std::time::Duration;
/// use sqs_claim::{Backoff, FailureKind, MemoryStore, Message, Processor, Redelivery};
/// let config = sqs_claim::aws::load_config().await;
/// let redelivery = Redelivery::sqs(aws_sdk_sqs::Client::new(&config))
///     .backoff(Backoff::exponential(Duration::from_secs(30), Duration::from_secs(900)))
///     // a store outage: come back soon, it is usually short
///     .backoff_for(FailureKind::StoreUnavailable, Backoff::fixed(Duration::from_secs(10)));
/// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
/// let processor = Processor::builder(MemoryStore::new(), handler)
///     .redelivery(redelivery)
///     .build();
/// # let _ = processor;
/// # }
/// ```
#[derive(Clone)]
pub struct Redelivery {
    client: aws_sdk_sqs::Client,
    queue_url: Option<String>,
    backoff: Backoff,
    per_kind: Vec<(FailureKind, Backoff)>,
    lease_slack: Duration,
    /// Queue URLs found by `GetQueueUrl`, by queue ARN: one call per queue and process.
    urls: Arc<Mutex<HashMap<String, String>>>,
}

impl fmt::Debug for Redelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redelivery")
            .field("queue_url", &self.queue_url)
            .field("backoff", &self.backoff)
            .field("per_kind", &self.per_kind)
            .field("lease_slack", &self.lease_slack)
            .finish()
    }
}

/// One visibility change: the item's index in the batch, and the new timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    index: usize,
    seconds: i32,
}

/// The last step after the batch ([`AfterBatch`]): it sees the outcomes the report carries,
/// once the failure destination (and any step of the user's) settled them.
impl AfterBatch for Redelivery {
    fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let now = batch.now();
            let elapsed = now.duration_since(batch.started()).unwrap_or_default();
            let changes = self.plan(
                batch.items(),
                batch.received(),
                now,
                batch.lease_until(now),
                longest(elapsed),
            );
            if !changes.is_empty() {
                batch.counts.visibility_changed += self.apply(changes, batch).await;
            }
        })
    }
}

impl Redelivery {
    /// Changes visibilities with `client`, on the queue the records came from (its URL found
    /// once per process with `GetQueueUrl`, from the records' `eventSourceARN`). Default
    /// policy: [`Backoff::default`] (30 s, doubling, at most 15 minutes, with jitter).
    pub fn sqs(client: aws_sdk_sqs::Client) -> Self {
        Redelivery {
            client,
            queue_url: None,
            backoff: Backoff::default(),
            per_kind: Vec::new(),
            lease_slack: Duration::from_secs(1),
            urls: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The source queue's URL, instead of asking SQS for it (saves the one `GetQueueUrl` call
    /// per process; a batch from another queue then fails its changes, and comes back as
    /// without this step).
    pub fn queue_url(mut self, url: impl Into<String>) -> Self {
        self.queue_url = Some(url.into());
        self
    }

    /// The backoff of failures without a policy of their own. Default: [`Backoff::default`].
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The backoff of failures of `kind` (replacing an earlier one for that kind).
    pub fn backoff_for(mut self, kind: FailureKind, backoff: Backoff) -> Self {
        self.per_kind.retain(|(k, _)| *k != kind);
        self.per_kind.push((kind, backoff));
        self
    }

    /// How long after a claim's lease lapses a message held by it comes back. Default: 1 s
    /// (clocks of the store, SQS and Lambda are not exactly one).
    pub fn lease_slack(mut self, slack: Duration) -> Self {
        self.lease_slack = slack;
        self
    }

    /// The backoff failures of `kind` get.
    pub(crate) fn policy(&self, kind: FailureKind) -> &Backoff {
        self.per_kind
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(&self.backoff, |(_, b)| b)
    }

    /// The changes for the batch's outcomes (the table of the module docs). `lease_end` is
    /// when a claim this invocation kept lapses; `longest` the longest delay SQS still takes.
    fn plan(
        &self,
        items: &[ItemReport],
        targets: &[Received],
        now: SystemTime,
        lease_end: SystemTime,
        longest: Duration,
    ) -> Vec<Change> {
        let after_lease = |until: SystemTime| {
            until
                .duration_since(now)
                .unwrap_or(Duration::ZERO)
                .saturating_add(self.lease_slack)
        };
        let mut delays: Vec<Option<Duration>> = items
            .iter()
            .zip(targets)
            .map(|(item, t)| match &item.outcome {
                Outcome::Failed(f) => Some(match f.retry_after {
                    Some(d) => d,
                    None if f.claim_kept => after_lease(lease_end),
                    None => self
                        .policy(f.kind)
                        .delay(t.receive_count.unwrap_or(1), &item.message_id),
                }),
                Outcome::HeldElsewhere {
                    lease_until: Some(until),
                } => Some(after_lease(*until)),
                Outcome::CutOff(_) => Some(after_lease(lease_end)),
                _ => None,
            })
            .collect();
        // A FIFO lane stopped by a failure comes back with it: SQS holds a group's later
        // messages while an earlier one is invisible anyway, and the longest delay keeps the
        // lane's messages together.
        let mut by_group: HashMap<Option<&str>, Duration> = HashMap::new();
        let mut batch_longest: Option<Duration> = None;
        for ((item, t), d) in items.iter().zip(targets).zip(&delays) {
            if let (Some(d), Outcome::Failed(_) | Outcome::CutOff(_)) = (d, &item.outcome) {
                let slot = by_group.entry(t.group_id.as_deref()).or_default();
                *slot = (*slot).max(*d);
                batch_longest = Some(batch_longest.unwrap_or_default().max(*d));
            }
        }
        for ((item, t), d) in items.iter().zip(targets).zip(delays.iter_mut()) {
            match item.outcome {
                Outcome::NotStarted(NotStarted::EarlierFailureInGroup) => {
                    *d = by_group.get(&t.group_id.as_deref()).copied();
                }
                Outcome::NotStarted(NotStarted::EarlierFailureInBatch) => *d = batch_longest,
                _ => {}
            }
        }
        items
            .iter()
            .zip(targets)
            .zip(delays)
            .enumerate()
            .filter_map(|(index, ((item, t), d))| {
                let d = d?;
                if item.outcome.is_success() || t.receipt_handle.is_none() {
                    return None;
                }
                let d = d.min(longest);
                // Whole seconds, rounded up: "just after" a lease means not before it.
                let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                Some(Change {
                    index,
                    seconds: i32::try_from(secs).unwrap_or(i32::MAX),
                })
            })
            .collect()
    }

    /// After the batch: sends `changes` (one call per 10, a few calls at once), inside the
    /// budget. Returns how many SQS confirmed; a change not confirmed only means its message
    /// comes back after the queue's visibility timeout.
    async fn apply(&self, changes: Vec<Change>, batch: &Finished<'_>) -> usize {
        if changes.is_empty() {
            return 0;
        }
        let (items, targets) = (batch.items(), batch.received());
        let work = async {
            let url = match self.url(batch.source_arn()).await {
                Ok(url) => url,
                Err(why) => {
                    error!(
                        messages = changes.len(),
                        error = %why,
                        "could not find the source queue's URL to change visibilities; the \
                         messages come back after the queue's visibility timeout"
                    );
                    return 0;
                }
            };
            let mut calls: Vec<futures::future::BoxFuture<'_, usize>> = Vec::new();
            for chunk in changes.chunks(PER_CALL) {
                let mut call = self
                    .client
                    .change_message_visibility_batch()
                    .queue_url(&url);
                for c in chunk {
                    // Ids are unique in the call and safe for SQS (`A-Za-z0-9_-`, 80 at most).
                    let handle = targets[c.index].receipt_handle.clone().unwrap_or_default();
                    let entry =
                        aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                            .id(format!("m{}", c.index))
                            .receipt_handle(handle)
                            .visibility_timeout(c.seconds)
                            .build();
                    if let Ok(entry) = entry {
                        call = call.entries(entry);
                    }
                }
                let n = chunk.len();
                calls.push(Box::pin(async move {
                    match call.send().await {
                        Ok(out) => {
                            for f in out.failed() {
                                warn!(
                                    entry = f.id(),
                                    code = f.code(),
                                    reason = f.message().unwrap_or(""),
                                    "visibility change refused; the message comes back after \
                                     the queue's visibility timeout"
                                );
                            }
                            out.successful().len()
                        }
                        Err(e) => {
                            error!(
                                messages = n,
                                error = %aws_sdk_sqs::error::DisplayErrorContext(&e),
                                "ChangeMessageVisibilityBatch failed; the messages come back \
                                 after the queue's visibility timeout"
                            );
                            0
                        }
                    }
                }));
            }
            stream::iter(calls)
                .buffer_unordered(CALLS_AT_ONCE)
                .collect::<Vec<usize>>()
                .await
                .into_iter()
                .sum::<usize>()
        };
        match batch.bounded(work).await {
            Some(n) => n,
            None => {
                error!(
                    messages = changes.len(),
                    first = items
                        .get(changes[0].index)
                        .map_or("", |i| i.message_id.as_str()),
                    "the time budget ran out while changing visibilities; the messages not yet \
                     changed come back after the queue's visibility timeout"
                );
                0
            }
        }
    }

    /// The source queue's URL: the one set, else found from the ARN (once per process).
    async fn url(&self, arn: Option<&str>) -> Result<String, String> {
        if let Some(url) = &self.queue_url {
            return Ok(url.clone());
        }
        let arn = arn.ok_or("the records carry no eventSourceARN")?;
        if let Ok(urls) = self.urls.lock()
            && let Some(url) = urls.get(arn)
        {
            return Ok(url.clone());
        }
        // arn:PARTITION:sqs:REGION:ACCOUNT:NAME
        let parts: Vec<&str> = arn.split(':').collect();
        let (Some(account), Some(name)) = (parts.get(4), parts.get(5)) else {
            return Err(format!("{arn:?} is not an SQS queue ARN"));
        };
        let out = self
            .client
            .get_queue_url()
            .queue_name(*name)
            .queue_owner_aws_account_id(*account)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "GetQueueUrl: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(&e)
                )
            })?;
        let url = out
            .queue_url()
            .ok_or("GetQueueUrl answered no URL")?
            .to_owned();
        if let Ok(mut urls) = self.urls.lock() {
            urls.insert(arn.to_owned(), url.clone());
        }
        Ok(url)
    }
}

/// The longest delay SQS still takes, `elapsed` into the invocation.
fn longest(elapsed: Duration) -> Duration {
    Backoff::MAX
        .saturating_sub(elapsed)
        .saturating_sub(RECEIVE_MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Failure, Step};

    fn redelivery() -> Redelivery {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .build();
        Redelivery::sqs(aws_sdk_sqs::Client::from_conf(config))
            .backoff(
                Backoff::exponential(Duration::from_secs(10), Duration::from_secs(600))
                    .jitter(false),
            )
            .backoff_for(
                FailureKind::StoreUnavailable,
                Backoff::fixed(Duration::from_secs(3)),
            )
    }

    fn item(id: &str, outcome: Outcome) -> ItemReport {
        ItemReport {
            message_id: id.into(),
            key: None,
            outcome,
        }
    }

    fn target(receives: u32, group: Option<&str>) -> Received {
        super::super::after::received(receives, group)
    }

    #[test]
    fn each_outcome_comes_back_when_the_table_says() {
        let r = redelivery();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let lease_end = now + Duration::from_millis(1500);
        let mut kept = Failure::new(FailureKind::HandlerTimeout, "x");
        kept.claim_kept = true;
        let mut hinted = Failure::new(FailureKind::Handler, "429");
        hinted.retry_after = Some(Duration::from_secs(120));
        let items = vec![
            item("ok", Outcome::Processed),
            item(
                "h1",
                Outcome::Failed(Failure::new(FailureKind::Handler, "x")),
            ),
            item(
                "h3",
                Outcome::Failed(Failure::new(FailureKind::Handler, "x")),
            ),
            item(
                "store",
                Outcome::Failed(Failure::new(FailureKind::StoreUnavailable, "x")),
            ),
            item("hint", Outcome::Failed(hinted)),
            item(
                "held",
                Outcome::HeldElsewhere {
                    lease_until: Some(now + Duration::from_millis(2200)),
                },
            ),
            item("held?", Outcome::HeldElsewhere { lease_until: None }),
            item("cut", Outcome::CutOff(Step::Handler)),
            item("late", Outcome::NotStarted(NotStarted::Deadline)),
            item("timeout", Outcome::Failed(kept)),
            item(
                "one-shot timeout",
                Outcome::Failed(Failure::new(FailureKind::HandlerTimeout, "x")),
            ),
            item(
                "dead",
                Outcome::DeadLettered(Failure::new(FailureKind::Handler, "x")),
            ),
            item(
                "huge",
                Outcome::Failed(Failure::new(FailureKind::Handler, "x")),
            ),
        ];
        let mut targets: Vec<Received> = (0..items.len()).map(|_| target(1, None)).collect();
        targets[2].receive_count = Some(3);
        targets[12].receive_count = Some(40);
        let longest = Duration::from_secs(500);
        let changes = r.plan(&items, &targets, now, lease_end, longest);
        let got: Vec<(&str, i32)> = changes
            .iter()
            .map(|c| (items[c.index].message_id.as_str(), c.seconds))
            .collect();
        assert_eq!(
            got,
            [
                ("h1", 10),
                ("h3", 40),
                ("store", 3),
                ("hint", 120),
                ("held", 4), // 2.2 s + 1 s of slack, rounded up
                ("cut", 3),  // 1.5 s + 1 s
                ("timeout", 3),
                ("one-shot timeout", 10),
                ("huge", 500), // the cap (600), then what SQS still takes
            ]
        );
    }

    #[test]
    fn a_stopped_fifo_lane_comes_back_with_its_failure() {
        let r = redelivery();
        let now = SystemTime::UNIX_EPOCH;
        let items = vec![
            item(
                "a1",
                Outcome::Failed(Failure::new(FailureKind::Handler, "x")),
            ),
            item("b1", Outcome::Processed),
            item("a2", Outcome::NotStarted(NotStarted::EarlierFailureInGroup)),
            item("c1", Outcome::NotStarted(NotStarted::EarlierFailureInGroup)),
        ];
        let targets = vec![
            target(2, Some("a")),
            target(1, Some("b")),
            target(1, Some("a")),
            target(1, Some("c")),
        ];
        let changes = r.plan(&items, &targets, now, now, Backoff::MAX);
        assert_eq!(
            changes,
            [
                Change {
                    index: 0,
                    seconds: 20
                },
                Change {
                    index: 2,
                    seconds: 20
                }
            ]
        );
        let whole = vec![
            items[0].clone(),
            item("x", Outcome::NotStarted(NotStarted::EarlierFailureInBatch)),
        ];
        let changes = r.plan(&whole, &targets[..2], now, now, Backoff::MAX);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[1].seconds, 20);
    }

    #[test]
    fn a_record_without_receipt_handle_is_left_alone() {
        let r = redelivery();
        let items = vec![item(
            "a",
            Outcome::Failed(Failure::new(FailureKind::Handler, "x")),
        )];
        let mut t = target(1, None);
        t.receipt_handle = None;
        let now = SystemTime::UNIX_EPOCH;
        assert!(r.plan(&items, &[t], now, now, Backoff::MAX).is_empty());
    }

    #[test]
    fn the_longest_delay_keeps_under_twelve_hours_from_the_receive() {
        assert_eq!(longest(Duration::ZERO), Duration::from_secs(12 * 3600 - 60));
        assert_eq!(
            longest(Duration::from_secs(900)),
            Duration::from_secs(12 * 3600 - 960)
        );
    }
}
