//! Sending: batches cut into calls of at most 10 entries within the size limit, entries that
//! failed server-side retried under the publisher's policy, and every failure classified.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use tracing::{debug, warn};

use super::validate::Prepared;
use super::{FailedOutput, MAX_BATCH_ENTRIES, OutgoingBatch, OutputLabel, PublishFailure, Sent};
use crate::RetryPolicy;
use crate::{Error, ErrorKind};

impl OutgoingBatch {
    /// Sends every output with `SendMessageBatch`, at most 10 (and at most the size limit)
    /// per call, in push order; retries what can be retried; returns the accepted outputs.
    ///
    /// Every output is checked first (group id on FIFO queues, size, characters, names): if any
    /// check fails, nothing is sent. On failure the error is of kind [`ErrorKind::Publish`], its
    /// message names each failed output with SQS's code and message, and its source is a
    /// [`PublishFailure`]. Return it from the handler: the input fails, its claim is released,
    /// and the retry resends the same ids (dropped as copies by a FIFO queue).
    pub async fn send(self) -> Result<Vec<Sent>, Error> {
        self.send_until(None).await
    }

    /// [`send`](Self::send), retrying failed entries only while a retry's backoff ends before
    /// `stop_at` (the invocation's time budget: its deadline minus the time needed to answer).
    /// A call in flight is bounded by the SDK client's timeouts; race the whole send against
    /// the budget too if the client has none.
    pub async fn send_by(self, stop_at: tokio::time::Instant) -> Result<Vec<Sent>, Error> {
        self.send_until(Some(stop_at)).await
    }

    #[cfg_attr(not(feature = "s3"), allow(unused_mut))]
    async fn send_until(
        mut self,
        stop_at: Option<tokio::time::Instant>,
    ) -> Result<Vec<Sent>, Error> {
        #[cfg(feature = "s3")]
        self.offload().await?;
        let prepared = self.prepare()?;
        let p = &self.publisher.inner;
        let mut sent: Vec<Sent> = Vec::with_capacity(prepared.len());
        let mut failed: Vec<FailedOutput> = Vec::new();
        // FIFO: a group whose output failed sends nothing more, or its order would break.
        let mut broken_groups: HashSet<String> = HashSet::new();
        for chunk in chunks(&prepared, p.max_message_bytes) {
            let mut todo: Vec<&Prepared> = Vec::with_capacity(chunk.len());
            for item in chunk {
                match &item.group {
                    Some(g) if p.fifo && broken_groups.contains(g) => failed.push(FailedOutput {
                        output: item.label.clone(),
                        code: "NotSentAfterEarlierFailure".into(),
                        message: format!(
                            "not sent: an earlier output of message group {g:?} failed, and \
                             sending this one would break the group's order"
                        ),
                        sender_fault: false,
                    }),
                    _ => todo.push(item),
                }
            }
            let (ok, bad) = self.send_chunk(todo, stop_at).await;
            sent.extend(ok);
            for (item, f) in bad {
                if let (true, Some(g)) = (p.fifo, &item.group) {
                    broken_groups.insert(g.clone());
                }
                failed.push(f);
            }
        }
        if failed.is_empty() {
            debug!(queue_url = %p.queue_url, outputs = sent.len(), "outputs published");
            return Ok(sent);
        }
        failed.sort_by_key(|f| position_of(&prepared, &f.output));
        warn!(
            queue_url = %p.queue_url,
            sent = sent.len(),
            failed = failed.len(),
            "outputs not published"
        );
        Err(publish_error(PublishFailure {
            queue_url: p.queue_url.clone(),
            before_any_call: false,
            failed,
            sent,
        }))
    }

    /// Sends one chunk (at most 10 entries within the size limit). Entries failed server-side
    /// inside a `200` answer are sent again under the publisher's [`RetryPolicy`]; a whole call
    /// that failed was already retried by the SDK, and is reported as it is.
    async fn send_chunk<'a>(
        &self,
        todo: Vec<&'a Prepared>,
        stop_at: Option<tokio::time::Instant>,
    ) -> (Vec<Sent>, Vec<(&'a Prepared, FailedOutput)>) {
        let p = &self.publisher.inner;
        let state = std::sync::Mutex::new(Chunk {
            todo,
            sent: Vec::new(),
            failed: Vec::new(),
            retryable: Vec::new(),
        });
        let outcome = p
            .policy
            .retry(
                stop_at,
                |_| {
                    let todo = lock(&state).todo.clone();
                    let state = &state;
                    async move {
                        let call = p
                            .client
                            .send_message_batch()
                            .queue_url(&p.queue_url)
                            .set_entries(Some(todo.iter().map(|t| t.entry.clone()).collect()))
                            .send()
                            .await;
                        let mut st = lock(state);
                        st.answer(&todo, call);
                        if st.retryable.is_empty() {
                            Ok(())
                        } else {
                            Err(st.retryable.len())
                        }
                    }
                },
                |_| true,
                |retry, failed: &usize| {
                    warn!(
                        queue_url = %p.queue_url,
                        retry,
                        entries = *failed,
                        "entries failed server-side; retrying them"
                    );
                },
            )
            .await;
        let mut st = state.into_inner().unwrap_or_else(|e| e.into_inner());
        if outcome.is_err() {
            // Out of retries (or of time): the last failure of each entry is its report.
            let last = std::mem::take(&mut st.retryable);
            st.failed.extend(last);
        }
        (st.sent, st.failed)
    }
}

/// The state of one chunk across its attempts.
struct Chunk<'a> {
    /// What the next attempt sends.
    todo: Vec<&'a Prepared>,
    sent: Vec<Sent>,
    /// Final failures.
    failed: Vec<(&'a Prepared, FailedOutput)>,
    /// Entries failed server-side in the last answer, with that failure: retried, or reported
    /// when the policy gives up.
    retryable: Vec<(&'a Prepared, FailedOutput)>,
}

/// Only `send_chunk`'s own code runs under the lock, and never across an `await`; a poisoned
/// lock still holds consistent lists.
fn lock<'m, 'a>(m: &'m std::sync::Mutex<Chunk<'a>>) -> std::sync::MutexGuard<'m, Chunk<'a>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> Chunk<'a> {
    /// Sorts the answer to a call that sent `todo`.
    fn answer(
        &mut self,
        todo: &[&'a Prepared],
        call: Result<
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput,
            SdkError<SendMessageBatchError, HttpResponse>,
        >,
    ) {
        self.retryable.clear();
        let failure =
            |item: &Prepared, code: String, message: String, sender_fault: bool| FailedOutput {
                output: item.label.clone(),
                code,
                message,
                sender_fault,
            };
        match call {
            Ok(out) => {
                for ok in out.successful() {
                    if let Some(item) = todo.iter().find(|t| t.entry.id() == ok.id()) {
                        self.sent.push(Sent {
                            output: item.label.clone(),
                            message_id: ok.message_id().to_owned(),
                            sequence_number: ok.sequence_number().map(str::to_owned),
                            deduplication_id: item.dedup_id.clone(),
                        });
                    }
                }
                for bad in out.failed() {
                    let Some(item) = todo.iter().find(|t| t.entry.id() == bad.id()) else {
                        continue;
                    };
                    let f = failure(
                        item,
                        bad.code().to_owned(),
                        bad.message().unwrap_or("(no message)").to_owned(),
                        bad.sender_fault(),
                    );
                    if bad.sender_fault() {
                        self.failed.push((*item, f));
                    } else {
                        self.retryable.push((*item, f));
                    }
                }
                // An entry in neither list would be a protocol violation: we cannot know
                // whether it was sent, so it is reported failed (a retry of the handler
                // resends it, deduplicated on FIFO queues).
                for item in todo {
                    let id = item.entry.id();
                    let answered = out.successful().iter().any(|s| s.id() == id)
                        || out.failed().iter().any(|f| f.id() == id);
                    if !answered {
                        self.failed.push((
                            *item,
                            failure(
                                item,
                                "NoResult".into(),
                                "SQS answered neither success nor failure for this entry".into(),
                                false,
                            ),
                        ));
                    }
                }
            }
            Err(e) => {
                // The SDK already retried this call as its RetryConfig allows.
                let (code, message, transient) = classify(&e);
                for item in todo {
                    self.failed.push((
                        *item,
                        failure(item, code.clone(), message.clone(), !transient),
                    ));
                }
            }
        }
        self.todo = self.retryable.iter().map(|(item, _)| *item).collect();
    }
}
/// The publisher's default policy for entries failed server-side: 2 retries from 100 ms.
pub(super) fn default_policy() -> RetryPolicy {
    RetryPolicy::new(2, Duration::from_millis(100))
}

fn position_of(prepared: &[Prepared], label: &OutputLabel) -> usize {
    prepared
        .iter()
        .position(|p| &p.label == label)
        .unwrap_or(usize::MAX)
}

/// Cuts the outputs, in order, into chunks of at most 10 entries and at most `max_bytes`
/// in total (SQS caps a batch's total payload like a single message's).
fn chunks(prepared: &[Prepared], max_bytes: usize) -> Vec<&[Prepared]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, item) in prepared.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH_ENTRIES || bytes + item.size > max_bytes) {
            out.push(&prepared[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += item.size;
    }
    if start < prepared.len() {
        out.push(&prepared[start..]);
    }
    out
}

/// Code, message and transience of a failed call.
fn classify(e: &SdkError<SendMessageBatchError, HttpResponse>) -> (String, String, bool) {
    match e {
        SdkError::TimeoutError(_) => ("Timeout".into(), "the call timed out".into(), true),
        SdkError::DispatchFailure(d) => {
            let what = if d.is_io() {
                "connection error"
            } else if d.is_timeout() {
                "timeout"
            } else {
                "request could not be sent"
            };
            (
                "DispatchFailure".into(),
                format!("{what}: {}", error_chain(e)),
                true,
            )
        }
        SdkError::ResponseError(_) => (
            "ResponseError".into(),
            format!("unreadable response: {}", error_chain(e)),
            true,
        ),
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("Unknown").to_owned();
            let message = err.message().unwrap_or("(no message)").to_owned();
            let server_side = se.raw().status().is_server_error();
            let throttled = err.is_request_throttled()
                || err.is_kms_throttled()
                || matches!(
                    code.as_str(),
                    "ThrottlingException"
                        | "ServiceUnavailable"
                        | "InternalError"
                        | "InternalFailure"
                );
            (code, message, throttled || server_side)
        }
        _ => ("Unknown".into(), error_chain(e), false),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

pub(super) fn publish_error(failure: PublishFailure) -> Error {
    let what = if failure.before_any_call {
        "outputs refused before any call to SQS (nothing was sent); fix the handler's outputs"
    } else if failure.failed.iter().all(|f| !f.sender_fault) {
        "outputs not published (SQS or the network failed); the input is retried and the \
         published outputs are deduplicated on FIFO queues"
    } else {
        "outputs not published (SQS refused them); the input is retried and will fail the same \
         way until the outputs are fixed"
    };
    Error::with_source(ErrorKind::Publish, what, failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

    fn prepared(sizes: &[usize]) -> Vec<Prepared> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Prepared {
                label: OutputLabel::Position(i),
                dedup_id: String::new(),
                group: None,
                size,
                entry: SendMessageBatchRequestEntry::builder()
                    .id(format!("o{i}"))
                    .message_body("x")
                    .build()
                    .unwrap(),
            })
            .collect()
    }

    #[test]
    fn chunks_by_count_and_size() {
        let p = prepared(&[1; 23]);
        let lens: Vec<usize> = chunks(&p, 1000).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![10, 10, 3]);
        let p = prepared(&[400, 400, 400, 1000, 1]);
        let lens: Vec<usize> = chunks(&p, 1000).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![2, 1, 1, 1]);
        assert!(chunks(&prepared(&[]), 1000).is_empty());
    }
}
