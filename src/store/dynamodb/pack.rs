//! Packed one-shot writes: several messages' claims and effects in one `TransactWriteItems`.
//!
//! A one-shot write with effects is a transaction already (twice the write units of a plain
//! write, whatever it holds), so putting several into one request costs no more capacity and
//! saves the SDK's per-request work and a round trip each: most of a one-shot message's client
//! CPU is the SDK's cost per request. DynamoDB takes up to 100 actions and 4 MB per request,
//! never one item twice (the processor's item locks keep two writes on one item out of a
//! pack).
//!
//! A transaction is all or nothing, so when it is cancelled the reasons say, per action, whose
//! fault it was:
//!
//! | a write's actions | its answer |
//! |---|---|
//! | the claim `ConditionalCheckFailed` (with the old item) | a duplicate, or held elsewhere, or ours already (an SDK retry of a pack that committed) |
//! | only `TransactionConflict` / throttling, besides `None` | `Contention`: the claim core sends it again with backoff |
//! | an effect refused (`ConditionalCheckFailed`, `ValidationError`, ...) | `EffectRejected`, that message alone |
//! | all `None` | [`Packed::Unsent`]: innocent, sent again at once in the next pack |
//!
//! A request refused as a whole (not a cancellation: a validation error such as two actions on
//! one item that the item locks could not see, a pack over 4 MB) is sent again as single
//! writes, so one odd message cannot fail the others.
//!
//! The effects are the caller's, borrowed: the request gets its own copy of them (the SDK's
//! input owns its items), which lives until the SDK has serialized the request, and the
//! single writes of the fallback get theirs only if it happens. Nothing here holds a second
//! copy of a pack's effects for the whole round trip.

use aws_sdk_dynamodb::types::CancellationReason;

use super::*;
use crate::store::{Packed, owned};

/// The most bytes one `TransactWriteItems` may carry (DynamoDB's limit is 4 MB).
const MAX_REQUEST_BYTES: usize = 4_000_000;

impl DynamoDbStore {
    /// See [`ClaimStore::claim_completed_packed`] and the [module documentation](self).
    pub(super) async fn pack(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&TransactWriteItem>)>,
    ) -> Vec<Packed> {
        let actions: usize = writes.iter().map(|(_, e)| e.len() + 1).sum();
        let bytes: usize = writes
            .iter()
            .flat_map(|(_, e)| e.iter().copied())
            .map(action_bytes)
            .sum();
        if writes.len() < 2 || actions > MAX_TRANSACTION_ACTIONS || bytes > MAX_REQUEST_BYTES {
            return self.alone(writes).await;
        }
        // Each write's claim, built as `claim_completed` builds it; a write refused before
        // anything is sent (a fingerprint too long) answers for itself.
        let mut answers: Vec<Option<Packed>> = Vec::with_capacity(writes.len());
        let mut sent: Vec<(usize, ClaimToken, usize)> = Vec::with_capacity(writes.len());
        let mut items: Vec<TransactWriteItem> = Vec::with_capacity(actions);
        for (i, (req, effects)) in writes.iter().enumerate() {
            if let Err(e) = Self::check_fingerprint(req) {
                answers.push(Some(Packed::Answered(Err(e))));
                continue;
            }
            answers.push(None);
            let token = ClaimToken::generate();
            let (condition, names, values) = self.claim_condition(req.now);
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(self.claim_item(req, &token, Status::Completed)))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build();
            let put = match put {
                Ok(put) => put,
                Err(e) => {
                    answers[i] = Some(Packed::Answered(Err(build_error(e))));
                    continue;
                }
            };
            sent.push((i, token, effects.len() + 1));
            items.push(TransactWriteItem::builder().put(put).build());
            items.extend(effects.iter().map(|&e| e.clone()));
        }
        if sent.len() < 2 {
            // Nothing left to pack with: what was built goes alone.
            let alone: Vec<_> = writes
                .into_iter()
                .enumerate()
                .filter(|(i, _)| answers[*i].is_none())
                .map(|(_, w)| w)
                .collect();
            let mut rest = self.alone(alone).await.into_iter();
            return answers
                .into_iter()
                .map(|a| a.or_else(|| rest.next()).unwrap_or(Packed::Unsent))
                .collect();
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(uuid::Uuid::new_v4().to_string())
            .send()
            .await;
        match result {
            Ok(_) => {
                for (i, _, _) in &sent {
                    answers[*i] = Some(Packed::Answered(Ok(OneShotWrite::Committed)));
                }
            }
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(tc) => {
                    self.read_cancellation(&sent, tc.cancellation_reasons(), &mut answers);
                }
                // Refused as a whole (a validation error, two actions on one item): each
                // write again, alone, so one cannot fail the others.
                _ if e.err().code() == Some("ValidationException") => {
                    return self.alone(writes).await;
                }
                _ => {
                    let e = classify(
                        "TransactWriteItems (packed one-shot)",
                        SdkError::ServiceError(e),
                    );
                    for (i, _, _) in &sent {
                        answers[*i] = Some(Packed::Answered(Err(copy(&e))));
                    }
                }
            },
            Err(e) => {
                let e = classify("TransactWriteItems (packed one-shot)", e);
                for (i, _, _) in &sent {
                    answers[*i] = Some(Packed::Answered(Err(copy(&e))));
                }
            }
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or(Packed::Unsent))
            .collect()
    }

    /// Each write through [`ClaimStore::claim_completed`], all at once, each with its own
    /// copy of its effects.
    async fn alone(&self, writes: Vec<(ClaimRequest<'_>, Vec<&TransactWriteItem>)>) -> Vec<Packed> {
        let sent: Vec<_> = writes
            .into_iter()
            .map(|(req, effects)| self.claim_completed(req, owned(&effects)))
            .collect();
        futures::future::join_all(sent)
            .await
            .into_iter()
            .map(Packed::Answered)
            .collect()
    }

    /// Reads a cancelled pack's reasons: each write's own answer, or `Unsent` (left `None`)
    /// when none of its actions was at fault.
    fn read_cancellation(
        &self,
        sent: &[(usize, ClaimToken, usize)],
        reasons: &[CancellationReason],
        answers: &mut [Option<Packed>],
    ) {
        let mut at = 0;
        let mut any_answered = false;
        for (i, token, actions) in sent {
            let own = reasons.get(at..at + actions).unwrap_or(&[]);
            at += actions;
            let code = |r: &CancellationReason| r.code().unwrap_or("None").to_owned();
            if own.iter().all(|r| code(r) == "None") {
                continue;
            }
            any_answered = true;
            let first = own.first();
            let answer = if first.and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
                Ok(self.refused_one_shot(token, first.and_then(|r| r.item())))
            } else {
                Err(Self::cancelled_by_effects(own))
            };
            answers[*i] = Some(Packed::Answered(answer));
        }
        if !any_answered {
            // Cancelled with no reason at any write (reasons missing or short): nothing says
            // who to blame, so nobody is resent blindly; each is told the store failed.
            for (i, _, _) in sent {
                answers[*i] = Some(Packed::Answered(Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    "DynamoDB cancelled a packed transaction without a reason for any of its \
                     writes; nothing was written",
                ))));
            }
        }
    }
}

/// The same error again, for each write of a pack that failed as a whole.
fn copy(e: &Error) -> Error {
    Error::new(e.kind(), format!("{e:#}"))
}

/// About how many bytes an action takes in a request: its attribute names and values.
fn action_bytes(action: &TransactWriteItem) -> usize {
    let map = |m: &HashMap<String, AttributeValue>| -> usize {
        m.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
    };
    let values = |m: Option<&HashMap<String, AttributeValue>>| m.map_or(0, map);
    // The fixed part of an action (its table name, expressions, JSON around them).
    let fixed = 256;
    if let Some(p) = action.put() {
        return fixed + map(p.item()) + values(p.expression_attribute_values());
    }
    if let Some(u) = action.update() {
        return fixed
            + map(u.key())
            + u.update_expression().len()
            + values(u.expression_attribute_values());
    }
    if let Some(d) = action.delete() {
        return fixed + map(d.key()) + values(d.expression_attribute_values());
    }
    if let Some(c) = action.condition_check() {
        return fixed + map(c.key()) + values(c.expression_attribute_values());
    }
    fixed
}

fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(l) | AttributeValue::Ns(l) => l.iter().map(String::len).sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::M(m) => m.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
        AttributeValue::L(l) => l.iter().map(value_bytes).sum(),
        _ => 1,
    }
}
