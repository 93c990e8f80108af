//! The claim protocol on DynamoDB: [`ClaimStore`] for [`DynamoDbStore`], the conditional
//! writes and how a refused one is read back.

use super::*;

impl DynamoDbStore {
    /// Refuses a fingerprint past 1,024 bytes (`MAX_FINGERPRINT_BYTES`) before anything is sent.
    pub(super) fn check_fingerprint(req: &ClaimRequest<'_>) -> Result<(), Error> {
        match req.fingerprint {
            Some(fp) if fp.len() > MAX_FINGERPRINT_BYTES => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "the payload fingerprint for key {:?} is {} bytes: the DynamoDB store keeps at most {MAX_FINGERPRINT_BYTES} (a fingerprint is a hash); nothing was sent",
                    req.key,
                    fp.len()
                ),
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn parse_record(&self, item: &HashMap<String, AttributeValue>) -> Option<Parsed> {
        let status = item
            .get(&self.attrs.status)
            .and_then(|v| v.as_s().ok())
            .and_then(|s| Status::parse(s))?;
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<i64>().ok())
        };
        Some(Parsed {
            record: ClaimRecord {
                status,
                expires_at: number(&self.attrs.expiration)
                    .map(from_epoch_seconds)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                lease_until: number(&self.attrs.lease).map(from_epoch_millis),
                fingerprint: item
                    .get(&self.attrs.fingerprint)
                    .and_then(|v| v.as_s().ok())
                    .cloned(),
                // A completed record's response; an in-progress record has none.
                response: (status == Status::Completed)
                    .then(|| item.get(&self.attrs.data).and_then(|v| v.as_s().ok()))
                    .flatten()
                    .map(|text| StoredResponse::new(text.as_str())),
            },
            token: item
                .get(&self.attrs.token)
                .and_then(|v| v.as_s().ok())
                .cloned(),
        })
    }

    /// Classifies the item returned with a refused claim.
    ///
    /// The item may be our own: the SDK retries a `PutItem` whose answer was lost (a timeout, a
    /// 500 after the write), and the retry is refused by the record its first attempt wrote.
    /// That record carries this claim's token, so the claim is ours; calling it "held
    /// elsewhere" would fail the message until the lease lapsed (and stall a FIFO group).
    fn refused_claim(
        &self,
        token: ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Claim {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::InProgress
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                Claim::Acquired(token)
            }
            Some(p) if p.record.status == Status::Completed => Claim::Completed {
                record: p.record,
                answered_by: AnsweredBy::Store,
            },
            Some(p) => Claim::HeldElsewhere {
                lease_until: p.record.lease_until,
            },
            // An item we cannot read (written by something else, or gone between the write and
            // the answer): never run the handler on it; the message is retried later.
            None => Claim::HeldElsewhere { lease_until: None },
        }
    }

    /// After a refused completion: the same token already completed it (a retry after an
    /// ambiguous error) is a success; anything else means the claim was lost.
    fn refused_completion(
        &self,
        key: &str,
        token: &ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<(), Error> {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::Completed
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                Ok(())
            }
            _ => Err(Error::lost_claim(key)),
        }
    }

    /// The completion's update, fenced by the token and the in-progress status; it stores the
    /// response, if any, in the same write.
    fn completion_update(
        &self,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<StoredResponse>,
    ) -> Result<Update, Error> {
        let mut names = self.attrs.names();
        names.remove("#id");
        let mut values = HashMap::from([
            (":completed".to_owned(), s(Status::Completed.as_str())),
            (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            (":exp".to_owned(), n(expiry_seconds(expires_at))),
            (":token".to_owned(), s(token.as_str())),
        ]);
        let update = match response {
            Some(response) => {
                names.insert("#data".to_owned(), self.attrs.data.clone());
                values.insert(
                    ":data".to_owned(),
                    AttributeValue::S(response.into_string()),
                );
                "SET #status = :completed, #exp = :exp, #data = :data REMOVE #lease"
            }
            None => "SET #status = :completed, #exp = :exp REMOVE #lease",
        };
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .update_expression(update)
            .condition_expression("#token = :token AND #status = :inprogress")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)
    }
}

pub(super) struct Parsed {
    pub(super) record: ClaimRecord,
    pub(super) token: Option<String>,
}

impl ClaimStore for DynamoDbStore {
    type Effect = TransactWriteItem;

    /// The SDK retries throttling, server errors and lost connections by itself (with the
    /// `RetryConfig` of [`DynamoDbSettings`] when built by `from_env`): a loop of ours on top
    /// would multiply the attempts. 256 calls in flight: one HTTP/1.1 connection per call,
    /// kept in the SDK client's pool across invocations; well under Lambda's 1,024 file
    /// descriptors; an on-demand table takes it, a provisioned one may throttle (the SDK then
    /// backs off and retries). The one-shot write is one `TransactWriteItems`.
    ///
    /// The longest response: DynamoDB's item limit (409,600 bytes) less the most the record's other
    /// attributes can take, so a response of this length fits for every key the store
    /// accepts: each key attribute at DynamoDB's limit (2048 bytes for the partition key, 1024
    /// for the sort key; a fixed template at its own length) with its name, the expiry and the
    /// lease at 21 bytes each (DynamoDB's bound for a number), the status at 10 (`INPROGRESS`),
    /// the fingerprint at 1,024 bytes (`MAX_FINGERPRINT_BYTES`), the token at 36 (a UUID), and every
    /// attribute name as configured, the response's own (`data`) included.
    ///
    /// With the default names and layout: 409,600 − 3,225 = **406,375 bytes** (the key 2 +
    /// 2048, `expiration` 10 + 21, `in_progress_expiration` 22 + 21, `status` 6 + 10,
    /// `validation` 10 + 1024, `claim_token` 11 + 36, `data` 4).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_in_flight: 256,
            max_response_bytes: MAX_ITEM_BYTES.saturating_sub(self.record_overhead_bytes()),
            retries_internally: true,
            atomic_one_shot: true,
            max_pack_actions: MAX_TRANSACTION_ACTIONS,
            extends_leases: true,
        }
    }

    /// One `TransactWriteItems` of every write's claim (a conditional `Put` of the record as
    /// completed) and effects, with a `ClientRequestToken` so that the SDK's own retries of it
    /// stay idempotent; see `pack.rs` for how a cancellation is read per write.
    fn claim_completed_packed(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&TransactWriteItem>)>,
    ) -> impl std::future::Future<Output = Vec<crate::store::Packed>> + Send {
        self.pack(writes)
    }

    /// The table and key of an `Update`, `Delete` or `ConditionCheck` (a condition check takes
    /// part in the transaction's conflicts like a write). A `Put` names no key apart from its
    /// item: on the claims table its key attributes are known; on another table the whole item
    /// stands for it, so identical puts are serialized and two different puts of one key are
    /// not (a conflict between them is retried as contention).
    fn effect_item(&self, effect: &TransactWriteItem) -> Option<u64> {
        if let Some(u) = effect.update() {
            return Some(item_hash(u.table_name(), u.key(), None));
        }
        if let Some(d) = effect.delete() {
            return Some(item_hash(d.table_name(), d.key(), None));
        }
        if let Some(c) = effect.condition_check() {
            return Some(item_hash(c.table_name(), c.key(), None));
        }
        let p = effect.put()?;
        if p.table_name() == self.table {
            let key = self.key_value("");
            let names: Vec<&str> = key.keys().map(String::as_str).collect();
            return Some(item_hash(p.table_name(), p.item(), Some(&names)));
        }
        Some(item_hash(p.table_name(), p.item(), None))
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        Self::check_fingerprint(&req)?;
        let token = ClaimToken::generate();
        let item = self.claim_item(&req, &token, Status::InProgress);
        let (condition, names, values) = self.claim_condition(req.now);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Acquired(token)),
            Err(SdkError::ServiceError(e)) => match e.err() {
                PutItemError::ConditionalCheckFailedException(ccf) => {
                    Ok(self.refused_claim(token, ccf.item()))
                }
                _ => Err(classify("PutItem (claim)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify("PutItem (claim)", e)),
        }
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<TransactWriteItem>,
    ) -> Result<(), Error> {
        // Refused before anything is sent: nothing committed, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        if effects.len() > MAX_EFFECTS {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "{} effects in one completion: DynamoDB transactions take at most {MAX_EFFECTS} \
                     besides the completion",
                    effects.len()
                ),
            ));
        }
        let update = self.completion_update(key, token, expires_at, response)?;
        if effects.is_empty() {
            // Moved out of the `Update`: the response is sent once, not copied.
            let (names, values) = (
                update.expression_attribute_names,
                update.expression_attribute_values,
            );
            let result = self
                .client
                .update_item()
                .table_name(update.table_name)
                .set_key(Some(update.key))
                .update_expression(update.update_expression)
                .set_condition_expression(update.condition_expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return match result {
                Ok(_) => Ok(()),
                Err(SdkError::ServiceError(e)) => match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(ccf) => {
                        self.refused_completion(key, token, ccf.item())
                    }
                    other if item_too_large(other.code(), other.message()) => {
                        Err(Self::item_refused_as_too_large(key, other.message()))
                    }
                    _ => Err(classify("UpdateItem (complete)", SdkError::ServiceError(e))),
                },
                Err(e) => Err(classify("UpdateItem (complete)", e)),
            };
        }

        let mut items = Vec::with_capacity(effects.len() + 1);
        items.push(TransactWriteItem::builder().update(update).build());
        items.extend(effects.into_vec());
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(tc) => {
                    self.cancelled(key, token, tc.cancellation_reasons())
                }
                other if item_too_large(other.code(), other.message()) => {
                    Err(Self::item_refused_as_too_large(key, other.message()))
                }
                _ => Err(classify(
                    "TransactWriteItems (complete)",
                    SdkError::ServiceError(e),
                )),
            },
            Err(e) => Err(classify("TransactWriteItems (complete)", e)),
        }
    }

    /// One request: a `PutItem` of the record as completed under the claim's condition, or,
    /// with effects, one `TransactWriteItems` of that `Put` and the effects. A refusal comes
    /// back with the old item (`ALL_OLD`), so a duplicate costs one request too.
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<TransactWriteItem>,
    ) -> Result<OneShotWrite, Error> {
        Self::check_fingerprint(&req)?;
        let token = ClaimToken::generate();
        let item = self.claim_item(&req, &token, Status::Completed);
        let (condition, names, values) = self.claim_condition(req.now);
        if effects.is_empty() {
            let result = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return match result {
                Ok(_) => Ok(OneShotWrite::Committed),
                Err(SdkError::ServiceError(e)) => match e.err() {
                    PutItemError::ConditionalCheckFailedException(ccf) => {
                        Ok(self.refused_one_shot(&token, ccf.item()))
                    }
                    _ => Err(classify("PutItem (one-shot)", SdkError::ServiceError(e))),
                },
                Err(e) => Err(classify("PutItem (one-shot)", e)),
            };
        }
        if effects.len() > MAX_EFFECTS {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "{} effects in one completion: DynamoDB transactions take at most {MAX_EFFECTS} \
                     besides the completion",
                    effects.len()
                ),
            ));
        }
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let mut items = Vec::with_capacity(effects.len() + 1);
        items.push(TransactWriteItem::builder().put(put).build());
        items.extend(effects.into_vec());
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(OneShotWrite::Committed),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(tc) => {
                    let reasons = tc.cancellation_reasons();
                    let first = reasons.first();
                    if first.and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
                        Ok(self.refused_one_shot(&token, first.and_then(|r| r.item())))
                    } else {
                        Err(Self::cancelled_by_effects(reasons))
                    }
                }
                _ => Err(classify(
                    "TransactWriteItems (one-shot)",
                    SdkError::ServiceError(e),
                )),
            },
            Err(e) => Err(classify("TransactWriteItems (one-shot)", e)),
        }
    }

    /// One `UpdateItem` of the lease and the expiry, fenced by the token and the in-progress
    /// status, as the completion is.
    async fn extend(&self, ext: Extension<'_>) -> Result<(), Error> {
        let mut names = self.attrs.names();
        names.retain(|k, _| matches!(k.as_str(), "#token" | "#status" | "#lease" | "#exp"));
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(ext.key)))
            .update_expression("SET #lease = :lease, #exp = :exp")
            .condition_expression("#token = :token AND #status = :inprogress")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(HashMap::from([
                (":token".to_owned(), s(ext.token.as_str())),
                (":inprogress".to_owned(), s(Status::InProgress.as_str())),
                (":lease".to_owned(), n(epoch_millis(ext.lease_until))),
                (":exp".to_owned(), n(expiry_seconds(ext.expires_at))),
            ])))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                UpdateItemError::ConditionalCheckFailedException(_) => {
                    Err(Error::lost_claim(ext.key))
                }
                _ => Err(classify("UpdateItem (extend)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify("UpdateItem (extend)", e)),
        }
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let mut names = self.attrs.names();
        names.retain(|k, _| k == "#token" || k == "#status");
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .condition_expression("#token = :token AND #status = :inprogress")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(HashMap::from([
                (":token".to_owned(), s(token.as_str())),
                (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            ])))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                DeleteItemError::ConditionalCheckFailedException(_) => Err(Error::lost_claim(key)),
                _ => Err(classify("DeleteItem (release)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify("DeleteItem (release)", e)),
        }
    }
}

impl DynamoDbStore {
    /// The error of a completion DynamoDB refused because the completed item would pass its
    /// 400 KB limit. [`max_response_bytes`](Capabilities::max_response_bytes) rules this out for
    /// the records this store writes; an item that carries attributes of someone else's gets
    /// here.
    fn item_refused_as_too_large(key: &str, message: Option<&str>) -> Error {
        let what = format!(
            "DynamoDB refused the completion of key {key:?}: the completed item would pass \
             DynamoDB's item limit of {MAX_ITEM_BYTES} bytes (names and values), with the \
             response and the attributes the item already holds; nothing was committed"
        );
        match message {
            Some(m) if !m.is_empty() => {
                Error::with_source(ErrorKind::ResponseTooLarge, what, m.to_owned())
            }
            _ => Error::new(ErrorKind::ResponseTooLarge, what),
        }
    }

    /// Interprets a cancelled completion transaction. Action 0 is the completion; the rest are
    /// the handler's effects.
    fn cancelled(
        &self,
        key: &str,
        token: &ClaimToken,
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> Result<(), Error> {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            // Either this token completed already (a retry after an ambiguous error: its
            // effects committed then, and must not be applied again) or the claim was lost.
            return self.refused_completion(key, token, reasons.first().and_then(|r| r.item()));
        }
        if let Some(first) = reasons.first()
            && item_too_large(first.code(), first.message())
        {
            return Err(Self::item_refused_as_too_large(key, first.message()));
        }
        Err(Self::cancelled_by_effects(reasons))
    }

    /// The error of a transaction whose first action (the claim or the completion) passed and
    /// which was cancelled anyway: an effect refused (its condition, a validation), or a
    /// transient conflict or throttle.
    pub(super) fn cancelled_by_effects(
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> Error {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        let contention = is_contention(reasons);
        let refused: Vec<String> = reasons
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, r)| r.code().is_some_and(|c| c != "None"))
            .map(|(i, r)| {
                format!(
                    "effect #{}: {}{}",
                    i - 1,
                    r.code().unwrap_or("?"),
                    r.message().map(|m| format!(" ({m})")).unwrap_or_default()
                )
            })
            .collect();
        let summary = if refused.is_empty() {
            format!("completion action: {}", code(0))
        } else {
            refused.join("; ")
        };
        if contention {
            return Error::new(
                ErrorKind::Contention,
                format!(
                    "transaction cancelled on contention (another transaction in flight on one \
                     of its items, or throttled), nothing was written: {summary}"
                ),
            );
        }
        Error::new(
            ErrorKind::EffectRejected,
            format!("transaction cancelled, nothing was written: {summary}"),
        )
    }

    /// Classifies the item returned with a refused one-shot write, as [`refused_claim`]
    /// does for a claim: our own token on a completed record is the SDK's retry of a write
    /// that committed (`Committed`, never a duplicate of itself).
    ///
    /// [`refused_claim`]: Self::refused_claim
    pub(super) fn refused_one_shot(
        &self,
        token: &ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> OneShotWrite {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::Completed
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                OneShotWrite::Committed
            }
            Some(p) if p.record.status == Status::Completed => OneShotWrite::Completed {
                record: p.record,
                answered_by: AnsweredBy::Store,
            },
            Some(p) => OneShotWrite::HeldElsewhere {
                lease_until: p.record.lease_until,
            },
            None => OneShotWrite::HeldElsewhere { lease_until: None },
        }
    }

    /// The item a claim writes: in progress under its lease (expiring at the later of the TTL
    /// and the lease), or, for a one-shot write, completed at once (expiring at the TTL, no
    /// lease).
    pub(super) fn claim_item(
        &self,
        req: &ClaimRequest<'_>,
        token: &ClaimToken,
        status: Status,
    ) -> HashMap<String, AttributeValue> {
        let mut item = self.key_value(req.key);
        let expires = match status {
            Status::InProgress => {
                item.insert(self.attrs.lease.clone(), n(epoch_millis(req.lease_until)));
                req.record_expires_at()
            }
            Status::Completed => req.expires_at,
        };
        item.insert(self.attrs.expiration.clone(), n(expiry_seconds(expires)));
        item.insert(self.attrs.status.clone(), s(status.as_str()));
        item.insert(self.attrs.token.clone(), s(token.as_str()));
        if let Some(fp) = req.fingerprint {
            item.insert(self.attrs.fingerprint.clone(), s(fp));
        }
        item
    }

    /// The claim's condition, its names and values, for a claim or a one-shot write at `now`.
    pub(super) fn claim_condition(
        &self,
        now: SystemTime,
    ) -> (
        &'static str,
        HashMap<String, String>,
        HashMap<String, AttributeValue>,
    ) {
        let mut names = self.attrs.names();
        names.remove("#token");
        (
            "attribute_not_exists(#id) OR #exp <= :now_s \
             OR (#status = :inprogress AND #lease <= :now_ms)",
            names,
            HashMap::from([
                (":now_s".to_owned(), n(crate::store::epoch_seconds(now))),
                (":now_ms".to_owned(), n(epoch_millis(now))),
                (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            ]),
        )
    }
}

/// A hash of an item's identity: its table and its key attributes (`only`: these of `item`'s
/// attributes; `None`: all of them), in name order, so the same item always hashes alike.
fn item_hash(table: &str, item: &HashMap<String, AttributeValue>, only: Option<&[&str]>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut names: Vec<&String> = item
        .keys()
        .filter(|name| only.is_none_or(|keep| keep.contains(&name.as_str())))
        .collect();
    names.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    table.hash(&mut h);
    for name in names {
        name.hash(&mut h);
        match &item[name] {
            AttributeValue::S(v) => (0u8, v).hash(&mut h),
            AttributeValue::N(v) => (1u8, v).hash(&mut h),
            AttributeValue::B(v) => (2u8, v.as_ref()).hash(&mut h),
            // Key attributes are strings, numbers or binaries; anything else (a whole item's
            // maps and lists) by its debug form, which is deterministic for equal values
            // but for map order, which only costs a missed match.
            other => (3u8, format!("{other:?}")).hash(&mut h),
        }
    }
    h.finish()
}

/// Whether a cancelled transaction met contention only: at least one action was cancelled
/// for a conflict with a transaction in flight or for throttling, and none was refused for
/// itself (a failed condition, a validation error). Such a transaction wrote nothing and can
/// be sent again as it is; one with a refusal would be refused again.
fn is_contention(reasons: &[aws_sdk_dynamodb::types::CancellationReason]) -> bool {
    let mut contended = false;
    for r in reasons {
        match r.code() {
            None | Some("None") => {}
            Some("TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded") => {
                contended = true;
            }
            Some(_) => return false,
        }
    }
    contended
}

/// Record expiry in whole seconds, rounded up: a record may outlive its TTL by under a second,
/// never fall short of it.
pub(super) fn expiry_seconds(t: SystemTime) -> i64 {
    let ms = epoch_millis(t);
    ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0)
}

/// Whether DynamoDB refused a write because the item would pass its 400 KB limit: a
/// `ValidationException` (or, inside a transaction, a `ValidationError` reason) saying "Item
/// size has exceeded the maximum allowed size" ("Item size to update has ..." for an update).
fn item_too_large(code: Option<&str>, message: Option<&str>) -> bool {
    matches!(code, Some("ValidationException" | "ValidationError"))
        && message.is_some_and(|m| m.contains("Item size") && m.contains("exceeded the maximum"))
}

pub(super) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::CancellationReason;

    use super::*;

    fn reasons(codes: &[&str]) -> Vec<CancellationReason> {
        codes
            .iter()
            .map(|c| CancellationReason::builder().code(*c).build())
            .collect()
    }

    #[test]
    fn a_cancellation_is_contention_only_when_nothing_was_refused_for_itself() {
        assert!(is_contention(&reasons(&["None", "TransactionConflict"])));
        assert!(is_contention(&reasons(&["ThrottlingError", "None"])));
        assert!(is_contention(&reasons(&[
            "None",
            "ProvisionedThroughputExceeded"
        ])));
        // A refused condition would be refused again: not contention.
        assert!(!is_contention(&reasons(&[
            "TransactionConflict",
            "ConditionalCheckFailed"
        ])));
        assert!(!is_contention(&reasons(&["None", "ValidationError"])));
        assert!(!is_contention(&reasons(&["None", "None"])));
        assert!(!is_contention(&[]));
    }

    #[test]
    fn a_contended_transaction_is_reported_as_contention_a_refused_one_as_rejected() {
        let e = DynamoDbStore::cancelled_by_effects(&reasons(&["None", "TransactionConflict"]));
        assert_eq!(e.kind(), ErrorKind::Contention);
        assert!(e.message().contains("nothing was written"), "{e:#}");
        let e = DynamoDbStore::cancelled_by_effects(&reasons(&[
            "TransactionConflict",
            "ConditionalCheckFailed",
        ]));
        assert_eq!(e.kind(), ErrorKind::EffectRejected);
    }

    #[test]
    fn effects_on_one_item_share_a_hash_and_others_do_not() {
        let key = |account: &str| {
            HashMap::from([("account".to_owned(), AttributeValue::S(account.to_owned()))])
        };
        let a1 = item_hash("accounts", &key("alice"), None);
        let a2 = item_hash("accounts", &key("alice"), None);
        let b = item_hash("accounts", &key("bob"), None);
        let other_table = item_hash("ledger", &key("alice"), None);
        assert_eq!(a1, a2);
        assert_ne!(a1, b);
        assert_ne!(a1, other_table);
        // A put on the claims table is its key, whatever else the item holds.
        let mut item = key("alice");
        item.insert("balance".to_owned(), AttributeValue::N("5".to_owned()));
        assert_eq!(
            item_hash("accounts", &item, Some(&["account"])),
            item_hash("accounts", &key("alice"), Some(&["account"]))
        );
    }
}
