//! Planning: the batch's records become owned items, each with what to do, before anything runs.
//!
//! Everything that can be decided from the event alone is decided here: the key, the payload
//! fingerprint, whether a record is FIFO, which records are later copies of a key that appears
//! earlier in the batch (they wait for that leader instead of claiming), and which fail at once
//! (no key). The run step then only executes the plan: it never has to ask whether a message
//! is still there or whether a leader exists, because those states cannot be written.

use std::collections::HashMap;

use tracing::warn;

use super::config::{Config, Fetched, FifoMode};
use crate::claim::{MissingKey, differs};
use crate::message::Message;
use crate::outcome::{Failure, FailureKind};
use crate::record::Record;
use crate::{Error, ErrorKind};

/// What the report needs of an item, kept while its action runs.
#[derive(Debug)]
pub(super) struct Meta {
    /// The SQS message id (never empty: the plan refuses a batch otherwise).
    pub(super) id: String,
    /// The namespaced idempotency key, if the message has one.
    pub(super) key: Option<String>,
    /// The producer's trace (`AWSTraceHeader`), for the outcome's log line.
    pub(super) trace_header: Option<String>,
}

/// What to do with one record.
#[derive(Debug)]
pub(super) enum Action {
    /// Its own work.
    Do(Work),
    /// A later copy of a key that an earlier record of this batch (the leader) carries: its
    /// outcome follows the leader's, and it never claims.
    Follow {
        /// The leader's index in the batch (always lower than this item's).
        leader: usize,
        /// The leader as reports and logs name it: `ID (#index)`.
        leader_name: String,
        /// Whether this copy's body differs from the leader's (same key, other payload).
        payload_differs: bool,
    },
}

/// The work of a record that is not a later copy. The message is boxed: it passes through
/// several layers of each message's future before the handler gets it, and a copy of its
/// 360 bytes in each made that future kilobytes larger.
#[derive(Debug)]
pub(super) enum Work {
    /// Claim the key, run the handler, then complete or release.
    Claim {
        message: Box<Message>,
        key: String,
        fingerprint: Option<String>,
    },
    /// Run the handler without a claim (no key, and [`MissingKey::ProcessWithoutDedup`]).
    Unclaimed { message: Box<Message> },
    /// Fail at once, without running anything.
    Fail(Failure),
}

/// The batch, planned.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) metas: Vec<Meta>,
    pub(super) actions: Vec<Action>,
    /// FIFO: the lanes, each a list of indexes in batch order. `None` for a standard queue.
    pub(super) lanes: Option<Vec<Vec<usize>>>,
}

impl Plan {
    /// Plans `records`. Fails only if a record has no message id: it could not be named in a
    /// partial batch response, and an empty identifier would fail the batch anyway, less
    /// clearly.
    /// `stop_at` is the budget's hard stop, which every message tells its handler. `fetched`
    /// is what each record's S3 pointer led to (feature `s3`), one per record, or empty when
    /// no record is a pointer.
    pub(super) fn new(
        records: Vec<Record>,
        config: &Config,
        namespace: &str,
        stop_at: Option<tokio::time::Instant>,
        fetched: Vec<Option<Fetched>>,
    ) -> Result<Plan, Error> {
        for (i, r) in records.iter().enumerate() {
            if r.id().is_empty() {
                return Err(Error::new(
                    ErrorKind::InvalidEvent,
                    format!(
                        "record #{i} of the batch has no messageId: it cannot be reported as a \
                         failure, so the whole invocation fails and Lambda redelivers the batch"
                    ),
                ));
            }
        }
        // A stream's batch is always ordered, per shard (`crate::stream`).
        let lanes = (config.stream || is_fifo(&records)).then(|| lanes(&records, config.fifo));

        // First copy of each key: its index and its fingerprint.
        let mut leaders: HashMap<String, (usize, Option<String>)> = HashMap::new();
        let mut metas: Vec<Meta> = Vec::with_capacity(records.len());
        let mut actions = Vec::with_capacity(records.len());
        let mut fetched = fetched.into_iter();
        for (i, record) in records.into_iter().enumerate() {
            let id = record.id().to_owned();
            let trace_header = record.message.attributes.get("AWSTraceHeader").cloned();
            let read = config.read(&record.message, namespace, fetched.next().flatten());
            let fail_now = if let Some(why) = &record.unreadable {
                // Its adapter could not read the payload: it fails alone (a stream record, as
                // its shard's first failure, stops its shard).
                // Permanent: the same bytes never read on a retry.
                let mut failure = Failure::new(FailureKind::Handler, why.clone())
                    .with_error_kind(Some(ErrorKind::BadBody));
                failure.permanent = true;
                Some(failure)
            } else {
                read.fail_now
            };
            if let Some(failure) = fail_now {
                metas.push(Meta {
                    id,
                    key: None,
                    trace_header,
                });
                actions.push(Action::Do(Work::Fail(failure)));
                continue;
            }
            let payload = read.payload;
            let (key, action) = match read.key {
                Ok(Some(key)) => {
                    let fingerprint = read.fingerprint;
                    let action = match leaders.get(&key) {
                        Some((leader, leader_fingerprint)) => Action::Follow {
                            leader: *leader,
                            // Named only when a copy appears: most keys have none.
                            leader_name: format!("{} (#{leader})", metas[*leader].id),
                            payload_differs: differs(
                                fingerprint.as_deref(),
                                leader_fingerprint.as_deref(),
                            ),
                        },
                        None => {
                            leaders.insert(key.clone(), (i, fingerprint.clone()));
                            Action::Do(Work::Claim {
                                message: Box::new(
                                    Message::of_record(record, Some(key.clone()))
                                        .with_payload(payload)
                                        .with_stop_at(stop_at),
                                ),
                                key: key.clone(),
                                fingerprint,
                            })
                        }
                    };
                    (Some(key), action)
                }
                Ok(None) => {
                    let why = format!("message has no idempotency key ({})", config.key);
                    let message = Message::of_record(record, None).with_payload(payload);
                    (None, no_key(message, &id, why, config.missing_key, stop_at))
                }
                Err(e) => {
                    let message = Message::of_record(record, None).with_payload(payload);
                    let why = e.message().to_owned();
                    (None, no_key(message, &id, why, config.missing_key, stop_at))
                }
            };
            metas.push(Meta {
                id,
                key,
                trace_header,
            });
            actions.push(action);
        }
        Ok(Plan {
            metas,
            actions,
            lanes,
        })
    }
}

fn no_key(
    message: Message,
    id: &str,
    why: String,
    policy: MissingKey,
    stop_at: Option<tokio::time::Instant>,
) -> Action {
    match policy {
        MissingKey::Fail => Action::Do(Work::Fail(Failure::new(FailureKind::MissingKey, why))),
        MissingKey::ProcessWithoutDedup => {
            warn!(message_id = %id, reason = %why, "processing without deduplication");
            Action::Do(Work::Unclaimed {
                message: Box::new(message.with_stop_at(stop_at)),
            })
        }
    }
}

/// Whether the batch comes from a FIFO queue.
fn is_fifo(records: &[Record]) -> bool {
    let by_arn = records.iter().any(|r| {
        r.message
            .event_source_arn
            .as_deref()
            .is_some_and(|a| a.ends_with(".fifo"))
    });
    if by_arn {
        return true;
    }
    // Lambda always sends the ARN. Without one (a hand-made event), a `SequenceNumber`, which
    // only FIFO queues assign, still marks the batch as FIFO: losing order silently is worse
    // than keeping it needlessly. (`MessageGroupId` proves nothing: standard queues carry it
    // too, for fair queues.)
    let by_sequence = records.iter().all(|r| r.message.event_source_arn.is_none())
        && records
            .iter()
            .any(|r| r.message.attributes.contains_key("SequenceNumber"));
    if by_sequence {
        warn!("batch without eventSourceARN carries SequenceNumber: processing it as FIFO");
    }
    by_sequence
}

/// FIFO lanes: one per message group (or one for the whole batch), in batch order.
fn lanes(records: &[Record], mode: FifoMode) -> Vec<Vec<usize>> {
    match mode {
        FifoMode::WholeBatch => vec![(0..records.len()).collect()],
        FifoMode::PerGroup => {
            let mut lanes: Vec<Vec<usize>> = Vec::new();
            let mut by_group: HashMap<Option<&str>, usize> = HashMap::new();
            for (i, r) in records.iter().enumerate() {
                let group = r.group.as_deref();
                let lane = *by_group.entry(group).or_insert_with(|| {
                    lanes.push(Vec::new());
                    lanes.len() - 1
                });
                lanes[lane].push(i);
            }
            lanes
        }
    }
}
