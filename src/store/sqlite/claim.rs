//! The claim protocol in SQL: [`ClaimStore`] for [`SqliteStore`], the claim's upsert and the
//! completion's transaction, run on the connection thread.

use super::*;

/// The claim, in one statement. `?6` is the caller's `now`; the `WHERE` is the contract's
/// "expired, or in progress with a lapsed lease". A takeover clears the response of the record
/// it replaces (an expired completion's).
pub(super) const CLAIM_SQL: &str = "
INSERT INTO claims (id, status, token, lease_until_ms, expires_at_ms, fingerprint, response)
VALUES (?1, 'INPROGRESS', ?2, ?3, ?4, ?5, NULL)
ON CONFLICT (id) DO UPDATE SET
    status = 'INPROGRESS',
    token = excluded.token,
    lease_until_ms = excluded.lease_until_ms,
    expires_at_ms = excluded.expires_at_ms,
    fingerprint = excluded.fingerprint,
    response = NULL
WHERE claims.expires_at_ms <= ?6
   OR (claims.status = 'INPROGRESS' AND claims.lease_until_ms IS NOT NULL AND claims.lease_until_ms <= ?6)
";

pub(super) fn claim_blocking(
    conn: &mut Connection,
    key: &str,
    now_ms: i64,
    lease_until_ms: i64,
    expires_at_ms: i64,
    fingerprint: Option<&str>,
) -> Result<Claim, Error> {
    let fail = |e| classify(e, format!("claim of key {key:?} failed"));
    // Runs inside the group's transaction and this job's savepoint (see `run_group`).
    let token = ClaimToken::generate();
    let changed = conn
        .execute(
            CLAIM_SQL,
            params![
                key,
                token.as_str(),
                lease_until_ms,
                expires_at_ms,
                fingerprint,
                now_ms
            ],
        )
        .map_err(fail)?;
    let claim = if changed == 1 {
        Claim::Acquired(token)
    } else {
        let row = conn
            .query_row(
                "SELECT status, lease_until_ms, expires_at_ms, fingerprint, response \
                 FROM claims WHERE id = ?1",
                [key],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<i64>>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(fail)?;
        let Some((status, lease, expires, fingerprint, response)) = row else {
            // The upsert changed nothing, so the row existed, and the write lock kept anyone
            // from deleting it since. Not reachable unless the schema was altered.
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!("claim of key {key:?} changed nothing, yet no record exists"),
            ));
        };
        let lease_until = lease.map(from_epoch_millis);
        match Status::parse(&status) {
            Some(Status::Completed) => Claim::Completed {
                record: ClaimRecord {
                    status: Status::Completed,
                    expires_at: from_epoch_millis(expires),
                    lease_until,
                    fingerprint,
                    response: response.map(StoredResponse::new),
                },
                answered_by: AnsweredBy::Store,
            },
            Some(Status::InProgress) => Claim::HeldElsewhere { lease_until },
            None => {
                return Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!("record for key {key:?} has an unknown status {status:?}"),
                ));
            }
        }
    };
    Ok(claim)
}

pub(super) fn complete_blocking(
    conn: &mut Connection,
    key: &str,
    token: &str,
    expires_at_ms: i64,
    response: Option<&str>,
    effects: Vec<SqlEffect>,
) -> Result<(), Error> {
    let fail = |e| classify(e, format!("completion of key {key:?} failed"));
    // Runs inside the group's transaction and this job's savepoint (see `run_group`): an
    // early return with an error rolls back the effects already run.
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT status, token FROM claims WHERE id = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(fail)?;
    match row {
        Some((_, stored)) if stored != token => return Err(Error::lost_claim(key)),
        None => return Err(Error::lost_claim(key)),
        // A retry of a completion that already committed: nothing to do, effects included.
        Some((status, _)) if status == Status::Completed.as_str() => return Ok(()),
        Some(_) => {}
    }
    for (i, effect) in effects.into_iter().enumerate() {
        let params = effect.params.into_iter().map(SqlValue::into_sqlite);
        let changed = conn
            .execute(&effect.sql, rusqlite::params_from_iter(params))
            .map_err(|e| classify_effect(e, i))?;
        if let Some(want) = effect.expect_rows
            && changed != want
        {
            return Err(Error::new(
                ErrorKind::EffectRejected,
                format!("effect #{i} changed {changed} rows, expected {want}"),
            ));
        }
    }
    let changed = conn
        .execute(
            "UPDATE claims SET status = 'COMPLETED', lease_until_ms = NULL, expires_at_ms = ?2, \
             response = ?4 WHERE id = ?1 AND token = ?3 AND status = 'INPROGRESS'",
            params![key, expires_at_ms, token, response],
        )
        .map_err(fail)?;
    if changed != 1 {
        // Unreachable under the write lock (the row was checked above), but never commit
        // effects without the completion that guards them.
        return Err(Error::lost_claim(key));
    }
    Ok(())
}

impl ClaimStore for SqliteStore {
    type Effect = SqlEffect;

    /// 256 calls in flight: they queue for the one connection thread, which commits whatever
    /// is waiting as one group (one fsync), so more in flight means fewer commits per batch.
    /// The one-shot write is one SQL transaction.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_in_flight: 256,
            atomic_one_shot: true,
            extends_leases: true,
            ..Capabilities::new()
        }
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        let key = req.key.to_owned();
        let fingerprint = req.fingerprint.map(str::to_owned);
        let (now, lease, expires) = (
            epoch_millis(req.now),
            epoch_millis(req.lease_until),
            epoch_millis(req.record_expires_at()),
        );
        self.run(move |conn| {
            claim_blocking(conn, &key, now, lease, expires, fingerprint.as_deref())
        })
        .await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<SqlEffect>,
    ) -> Result<(), Error> {
        // Refused before the job is queued: nothing is written, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        let key = key.to_owned();
        let token = token.as_str().to_owned();
        let expires = epoch_millis(expires_at);
        let effects = effects.into_vec();
        self.run(move |conn| {
            let response = response.as_ref().map(StoredResponse::as_str);
            complete_blocking(conn, &key, &token, expires, response, effects)
        })
        .await
    }

    /// One job, so one savepoint of one transaction: the claim's upsert, the effects and the
    /// completion; a refused effect rolls the claim back with it.
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<SqlEffect>,
    ) -> Result<OneShotWrite, Error> {
        let key = req.key.to_owned();
        let fingerprint = req.fingerprint.map(str::to_owned);
        let (now, lease, expires) = (
            epoch_millis(req.now),
            epoch_millis(req.lease_until),
            epoch_millis(req.record_expires_at()),
        );
        let completed_expires = epoch_millis(req.expires_at);
        let effects = effects.into_vec();
        self.run(move |conn| {
            match claim_blocking(conn, &key, now, lease, expires, fingerprint.as_deref())?
                .acquired_or_refused()
            {
                Ok(token) => {
                    // A one-shot write stores no response.
                    complete_blocking(
                        conn,
                        &key,
                        token.as_str(),
                        completed_expires,
                        None,
                        effects,
                    )?;
                    Ok(OneShotWrite::Committed)
                }
                Err(refused) => Ok(refused),
            }
        })
        .await
    }

    /// One `UPDATE` of the lease and the expiry, fenced by the token and the status.
    async fn extend(&self, ext: Extension<'_>) -> Result<(), Error> {
        let key = ext.key.to_owned();
        let token = ext.token.as_str().to_owned();
        let (lease, expires) = (epoch_millis(ext.lease_until), epoch_millis(ext.expires_at));
        self.run(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE claims SET lease_until_ms = ?3, expires_at_ms = ?4 \
                     WHERE id = ?1 AND token = ?2 AND status = 'INPROGRESS'",
                    params![key, token, lease, expires],
                )
                .map_err(|e| classify(e, format!("extension of key {key:?} failed")))?;
            if changed == 1 {
                Ok(())
            } else {
                Err(Error::lost_claim(&key))
            }
        })
        .await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let key = key.to_owned();
        let token = token.as_str().to_owned();
        self.run(move |conn| {
            let changed = conn
                .execute(
                    "DELETE FROM claims WHERE id = ?1 AND token = ?2 AND status = 'INPROGRESS'",
                    params![key, token],
                )
                .map_err(|e| classify(e, format!("release of key {key:?} failed")))?;
            if changed == 1 {
                Ok(())
            } else {
                Err(Error::lost_claim(&key))
            }
        })
        .await
    }
}
