//! The flow of one event: key → claim → handler → complete (or release), or a replay, or a
//! refusal; every store step and the handler raced against the invocation's time budget.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use tower::{Service, ServiceExt};
use tracing::{error, warn};

use super::answers::{Answers, Refusal};
use super::response::{HandlerResponse, IdempotentResponse};
use super::{Config, Idempotency};
use super::{KeyExtractor, Payload};
use crate::RetryPolicy;
use crate::claim::{Attempt, Claimed, HandlerEnd, MissingKey, PayloadVerdict, Recorded, guarded};
use crate::deadline::Budget;
use crate::store::{ClaimRecord, ClaimStore, ClaimToken, Completion, Effects, StoredResponse};
use crate::{BoxError, Error, ErrorKind};

impl<St, X> Idempotency<St, X>
where
    St: ClaimStore,
{
    /// Runs `handler` for `event` at most once per key: the function form of the layer.
    ///
    /// The first call for a key runs `handler`, stores its response with the completion and
    /// answers it; every later call for the key answers the stored response, byte for byte,
    /// without running `handler`; a call while the first still runs, for a key used with
    /// another request, or without a key is refused ([`Answers`]). See the
    /// [module documentation](super) for every answer.
    ///
    /// Errors are boxed: the handler's own error comes back as it is (after its claim was
    /// released); the layer's are [`sqs_claim::Error`](crate::Error)s, whose
    /// [`kind`](crate::Error::kind) says what happened.
    pub async fn call<T, F, Fut, R, E>(
        &self,
        event: LambdaEvent<T>,
        handler: F,
    ) -> Result<IdempotentResponse, BoxError>
    where
        T: Payload,
        X: KeyExtractor<T>,
        F: FnOnce(LambdaEvent<T>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
        R: HandlerResponse<St::Effect>,
        E: Into<BoxError>,
    {
        let config: &Config<St, X> = &self.inner;
        let (payload, context) = event.into_parts();
        // One request: nothing new starts within the answer reserve of the deadline, which is
        // also where every step still in flight is cut off.
        let budget = Budget::new(
            config.clock.clone(),
            context.deadline,
            config.answer_reserve,
            config.answer_reserve,
        );
        if !budget.may_start() {
            return Err(out_of_time(
                "the invocation's deadline has (nearly) passed: nothing ran",
            ));
        }
        let answers: &dyn Answers = match &config.answers {
            Some(answers) => answers.as_ref(),
            None => T::default_answers(),
        };
        let request = payload.request()?;
        let Some(datum) = config.extractor.key(&payload, &request)? else {
            return match config.missing_key {
                MissingKey::Fail => answer(
                    answers,
                    Refusal::new(
                        ErrorKind::MissingKey,
                        format!(
                            "the request has no idempotency key ({})",
                            config.extractor.describe()
                        ),
                    ),
                ),
                MissingKey::ProcessWithoutDedup => {
                    drop(request);
                    self.run_unclaimed(LambdaEvent::new(payload, context), handler, &budget)
                        .await
                }
            };
        };
        let key = config
            .format
            .stored_key(&config.namespace.resolve(&context), &datum);
        let fingerprint = config.terms.payload_check.fingerprints().then(|| {
            config
                .format
                .route_fingerprint(payload.route().as_ref(), &request)
        });
        drop((request, datum));

        let attempt = Attempt::new(
            &config.store,
            &config.terms,
            &budget,
            &key,
            fingerprint.as_deref(),
        )
        .with_locks(&config.locks);
        let mut claimed = attempt.claim().await;
        if let (Claimed::HeldElsewhere { .. }, Some(max)) = (&claimed, config.wait) {
            claimed = wait_out(&attempt, &budget, max, claimed).await;
        }
        let token = match claimed {
            Claimed::Won(token) => token,
            Claimed::CutOff => {
                return Err(out_of_time(
                    "the claim was cut off by the time budget: the handler did not run",
                ));
            }
            Claimed::Failed(e) => {
                // Fail closed: without a claim nothing may run, or a duplicate would run too.
                return Err(Error::with_source(
                    e.kind(),
                    "claim failed, the handler did not run",
                    e,
                )
                .into());
            }
            Claimed::Completed { record, payload } => {
                return replay(&key, payload, record, answers);
            }
            Claimed::HeldElsewhere { lease_until } => {
                let mut refusal = Refusal::new(
                    ErrorKind::InProgress,
                    "a request with this idempotency key is in progress; retry later",
                );
                refusal.retry_after = lease_until
                    .map(|until| until.duration_since(budget.now()).unwrap_or(Duration::ZERO));
                return answer(answers, refusal);
            }
        };

        let event = LambdaEvent::new(payload, context);
        let call = async move { handler(event).await.map_err(Into::into) };
        // The claim is kept while the handler runs (its lease extended); one that could not be
        // kept stops the handler, and nothing of it is committed. It is still kept while the
        // completion is sent (contention and retries can outlast what is left of the lease),
        // which is never stopped: it is fenced by the token.
        let (attempt, token, key) = (&attempt, &token, key.as_str());
        let finish = |end: HandlerEnd<R>| async move {
            let response = match end {
                HandlerEnd::Returned(response) => response,
                HandlerEnd::Failed(e) => {
                    attempt.release(token).await;
                    return Err(e);
                }
                HandlerEnd::Panicked(what) => {
                    attempt.release(token).await;
                    return Err(Error::new(
                        ErrorKind::Panicked,
                        format!("the handler panicked: {what} (the claim was released)"),
                    )
                    .into());
                }
                // Only the budget stops the layer's handler: it has no timeout of its own.
                HandlerEnd::OutOfTime | HandlerEnd::TimedOut(_) => {
                    // The handler may have reached an external service: the claim is kept until
                    // its lease lapses, so a retry cannot race a call still in flight.
                    warn!(
                        key,
                        "handler cut off by the time budget; the claim is kept until its lease lapses"
                    );
                    return Err(out_of_time(
                        "the handler was cut off by the time budget; its claim is kept until its \
                         lease lapses",
                    ));
                }
            };
            // Serialised once: these bytes are stored, and answered to this caller and every
            // duplicate.
            let (text, effects) = {
                let (body, effects) = response.into_parts();
                (serde_json::to_string(&body), effects)
            };
            let response = match text
                .map_err(|e| {
                    Error::with_source(
                        ErrorKind::Other,
                        "the handler's response cannot be serialised as JSON (the claim was \
                         released, nothing was committed)",
                        e,
                    )
                })
                .and_then(|text| IdempotentResponse::from_text(text, false))
            {
                Ok(response) => response,
                Err(e) => {
                    attempt.release(token).await;
                    return Err(e.into());
                }
            };
            let limit = config.store.capabilities().max_response_bytes;
            let len = response.json().len();
            if len > limit {
                // Refused before anything is written: the effects are not committed and the key
                // is free again, so the request can be retried (and will be refused again until
                // the response shrinks).
                attempt.release(token).await;
                return Err(Completion::<St::Effect>::too_large(key, len, limit).into());
            }
            complete(attempt, token, response, effects).await
        };
        match attempt
            .holding_then(token, guarded(call, None, &budget), finish)
            .await
        {
            Ok(answered) => answered,
            Err(lost) => {
                warn!(key, error = %format_args!("{lost:#}"), "claim lost while the handler ran: handler stopped, its result discarded");
                Err(Error::with_source(
                    lost.kind(),
                    "the handler was stopped and its result discarded, nothing was committed",
                    lost,
                )
                .into())
            }
        }
    }

    /// Runs the handler without a claim (no key, [`MissingKey::ProcessWithoutDedup`]).
    async fn run_unclaimed<T, F, Fut, R, E>(
        &self,
        event: LambdaEvent<T>,
        handler: F,
        budget: &Budget,
    ) -> Result<IdempotentResponse, BoxError>
    where
        F: FnOnce(LambdaEvent<T>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
        R: HandlerResponse<St::Effect>,
        E: Into<BoxError>,
    {
        let call = async move { handler(event).await.map_err(Into::into) };
        let response = match guarded(call, None, budget).await {
            HandlerEnd::Returned(response) => response,
            HandlerEnd::Failed(e) => return Err(e),
            HandlerEnd::Panicked(what) => {
                return Err(Error::new(
                    ErrorKind::Panicked,
                    format!("the handler panicked: {what}"),
                )
                .into());
            }
            HandlerEnd::OutOfTime | HandlerEnd::TimedOut(_) => {
                return Err(out_of_time("the handler was cut off by the time budget"));
            }
        };
        let (body, effects) = response.into_parts();
        if !effects.is_empty() {
            return Err(Error::new(
                ErrorKind::MissingKey,
                "the request has no idempotency key and ran without deduplication \
                 (MissingKey::ProcessWithoutDedup), but the handler returned effects, which \
                 commit only with a claim's completion: nothing was committed",
            )
            .into());
        }
        Ok(IdempotentResponse::new(&body)?)
    }
}

/// A key found completed: the stored response, unless the payload check refuses the request
/// as another one.
/// Polls the key held by another request until it is no longer held (completed, released or
/// lapsed), the wait `max` runs out, or the budget would: the first poll 50 ms after the
/// refusal, then twice as long apart up to 1 s, with jitter (the one [`RetryPolicy`]
/// schedule). Returns the last poll's answer.
async fn wait_out<S: ClaimStore>(
    attempt: &Attempt<'_, S>,
    budget: &Budget,
    max: Duration,
    first: Claimed<ClaimToken>,
) -> Claimed<ClaimToken> {
    let schedule =
        RetryPolicy::new(u32::MAX, Duration::from_millis(50)).with_cap(Duration::from_secs(1));
    let now = tokio::time::Instant::now();
    let give_up = now
        .checked_add(max)
        .unwrap_or(now + Duration::from_secs(86_400));
    let mut claimed = first;
    let mut polls = 0u32;
    while let Claimed::HeldElsewhere { .. } = claimed {
        let wake = tokio::time::Instant::now() + schedule.delay(polls);
        // Never a poll after the wait, nor one whose answer could not be sent in time.
        if wake >= give_up || budget.hard_stop().is_some_and(|stop| wake >= stop) {
            break;
        }
        Box::pin(tokio::time::sleep_until(wake)).await;
        if !budget.may_start() {
            break;
        }
        polls += 1;
        claimed = attempt.claim().await;
    }
    tracing::debug!(
        key = attempt.key(),
        polls,
        still_held = matches!(claimed, Claimed::HeldElsewhere { .. }),
        "waited for a request in progress with the same key"
    );
    claimed
}

fn replay(
    key: &str,
    payload: PayloadVerdict,
    record: ClaimRecord,
    answers: &dyn Answers,
) -> Result<IdempotentResponse, BoxError> {
    match payload {
        PayloadVerdict::Same => {}
        PayloadVerdict::Refused => {
            return answer(
                answers,
                Refusal::new(
                    ErrorKind::PayloadMismatch,
                    "this idempotency key was already used for a different request",
                ),
            );
        }
        PayloadVerdict::Tolerated => warn!(
            key,
            "same key as a completed request, with a different payload; replaying its \
             response (PayloadCheck::Warn)"
        ),
    }
    match record.response {
        Some(stored) => Ok(IdempotentResponse::from_text(stored.into_string(), true)?),
        None => Err(Error::new(
            ErrorKind::NotReplayable,
            format!(
                "key {key:?} was completed by a writer that stores no response (the SQS \
                 processor or a one-shot write): there is nothing to replay, and the handler \
                 did not run"
            ),
        )
        .into()),
    }
}

/// Records the completion with the response and the effects ([`Attempt::complete`]: retried
/// under the one retry policy, under the budget, released when nothing stands), and says what
/// it means for the caller.
async fn complete<St: ClaimStore>(
    attempt: &Attempt<'_, St>,
    token: &ClaimToken,
    response: IdempotentResponse,
    effects: Effects<St::Effect>,
) -> Result<IdempotentResponse, BoxError> {
    let stored = StoredResponse::new(response.json());
    let e = match attempt.complete(token, Some(stored), effects).await {
        Recorded::Committed => return Ok(response),
        Recorded::CutOff { had_effects: true } => {
            return Err(out_of_time(
                "the completion was cut off by the time budget: its effects may or may not \
                 have committed (a retry after the lease lapses finds out); the claim is kept \
                 until its lease lapses",
            ));
        }
        Recorded::CutOff { had_effects: false } => {
            // As for a completion that failed (below): the side effect already happened.
            error!(
                key = attempt.key(),
                "handler succeeded but its completion was cut off by the time budget; \
                 answering its response, a retry of this key after the lease lapses could run \
                 the handler again"
            );
            return Ok(response);
        }
        Recorded::Unrecorded(e) => {
            // The handler's side effect already happened: an error would make the caller
            // retry and run it again. Answer its response and shout; the claim stays in
            // progress until its lease lapses (a retry meanwhile is answered "in progress").
            // After a lapsed lease (LostClaim) another invocation's record stands, and this
            // caller still gets the response its own call produced.
            error!(
                key = attempt.key(), error = %format_args!("{e:#}"),
                "handler succeeded but its completion could not be recorded; answering its \
                 response, a retry of this key after the lease lapses could run the handler again"
            );
            return Ok(response);
        }
        Recorded::Failed(e) => e,
    };
    if e.kind() == ErrorKind::ResponseTooLarge {
        // The store's own limit: refused before anything was written (the claim released).
        return Err(e.into());
    }
    // With effects, nothing of the handler's work is done unless the completion committed:
    // answer an error.
    let what = if e.kind() == ErrorKind::Contention {
        "the completion with effects was not committed (contention), the claim released: a \
         retry runs the handler again"
    } else if e.is_transient() {
        "the completion with effects could not be confirmed, it may or may not have \
         committed (a retry finds out: replayed if it did, run again if it did not)"
    } else if e.kind() == ErrorKind::LostClaim {
        "the claim's lease lapsed and another invocation took the key over: this \
         invocation's effects were not committed"
    } else {
        "the completion with effects failed, nothing was committed"
    };
    Err(Error::with_source(e.kind(), what, e).into())
}

fn answer(answers: &dyn Answers, refusal: Refusal) -> Result<IdempotentResponse, BoxError> {
    Ok(answers.answer(&refusal)?)
}

fn out_of_time(what: &str) -> BoxError {
    Error::new(ErrorKind::OutOfTime, what).into()
}

/// A handler wrapped by the idempotency layer: a `tower::Service<LambdaEvent<T>>` answering an
/// [`IdempotentResponse`] ([`Idempotency::layer`], [`Idempotency::service`]). Cheap to clone
/// when the inner service is.
pub struct IdempotencyService<Svc, St, X> {
    idempotency: Idempotency<St, X>,
    inner: Svc,
}

impl<Svc, St, X> IdempotencyService<Svc, St, X> {
    /// `inner` under `idempotency`.
    pub(crate) fn new(idempotency: Idempotency<St, X>, inner: Svc) -> Self {
        IdempotencyService { idempotency, inner }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &Svc {
        &self.inner
    }

    /// The inner service, by value.
    pub fn into_inner(self) -> Svc {
        self.inner
    }
}

impl<Svc: Clone, St, X> Clone for IdempotencyService<Svc, St, X> {
    fn clone(&self) -> Self {
        IdempotencyService {
            idempotency: self.idempotency.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<Svc, St, X> std::fmt::Debug for IdempotencyService<Svc, St, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("idempotency", &self.idempotency)
            .finish_non_exhaustive()
    }
}

impl<T, Svc, St, X> Service<LambdaEvent<T>> for IdempotencyService<Svc, St, X>
where
    T: Payload + Send + 'static,
    St: ClaimStore,
    X: KeyExtractor<T>,
    Svc: Service<LambdaEvent<T>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Response: HandlerResponse<St::Effect> + Send + 'static,
    Svc::Error: Into<BoxError> + Send + 'static,
{
    type Response = IdempotentResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<IdempotentResponse, BoxError>> + Send>>;

    /// Always ready: the inner service is made ready inside the call, only when it runs (a
    /// duplicate never needs it).
    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<T>) -> Self::Future {
        let idempotency = self.idempotency.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            idempotency
                .call(event, move |event| inner.oneshot(event))
                .await
        })
    }
}
