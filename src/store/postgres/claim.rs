//! The claim protocol in SQL: [`ClaimStore`] for [`PostgresStore`], the claim's upsert and
//! the completion's transaction with its effects.

use super::*;

impl PostgresStore {
    /// Runs the effects in `txn`, in order; the first refused one fails the whole
    /// transaction (the caller drops it, which rolls it back).
    async fn run_effects(
        &self,
        txn: &deadpool_postgres::Transaction<'_>,
        key: &str,
        effects: &[PgEffect],
    ) -> Result<(), Error> {
        for (i, effect) in effects.iter().enumerate() {
            let stmt = self
                .answer("an effect", txn.prepare_cached(&effect.sql))
                .await?
                .map_err(|e| effect_err(i, e, key, &self.sql.table))?;
            let params: Vec<&(dyn ToSql + Sync)> = effect
                .params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let rows = self
                .answer("an effect", txn.execute(&stmt, &params))
                .await?
                .map_err(|e| effect_err(i, e, key, &self.sql.table))?;
            if let Some(expected) = effect.expect_rows
                && rows != expected
            {
                // Dropping the transaction rolls it back.
                return Err(Error::new(
                    ErrorKind::EffectRejected,
                    format!(
                        "effect #{i} affected {rows} rows, expected {expected}; the completion \
                             and every effect were rolled back and the claim is still held"
                    ),
                ));
            }
        }
        Ok(())
    }

    async fn complete_with_effects(
        &self,
        id: &str,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<&str>,
        effects: Vec<PgEffect>,
    ) -> Result<(), Error> {
        let mut client = self.client().await?;
        let err = |e| map_pg_err("completion of", key, &self.sql.table, e);
        let txn = self
            .answer("completion", client.transaction())
            .await?
            .map_err(err)?;
        let lock = self
            .answer("completion", txn.prepare_cached(&self.sql.lock))
            .await?
            .map_err(err)?;
        let row = self
            .answer("completion", txn.query_opt(&lock, &[&id, &token.as_str()]))
            .await?
            .map_err(err)?;
        let status: Option<String> = match row {
            Some(row) => row.try_get(0).map_err(err)?,
            None => None,
        };
        match status.as_deref() {
            Some("INPROGRESS") => {}
            // Our token, already completed: an earlier attempt committed. Apply nothing again.
            Some("COMPLETED") => return Ok(()),
            _ => return Err(Error::lost_claim(key)),
        }
        self.run_effects(&txn, key, &effects).await?;
        let complete = self
            .answer("completion", txn.prepare_cached(&self.sql.complete))
            .await?
            .map_err(err)?;
        let updated = self
            .answer(
                "completion",
                txn.execute(
                    &complete,
                    &[&id, &token.as_str(), &epoch_millis(expires_at), &response],
                ),
            )
            .await?
            .map_err(err)?;
        if updated != 1 {
            // Cannot happen while we hold the row lock; refuse rather than commit effects alone.
            return Err(Error::lost_claim(key));
        }
        self.answer("completion", txn.commit()).await?.map_err(err)
    }
}

impl ClaimStore for PostgresStore {
    type Effect = PgEffect;

    /// The pool's size in flight (more calls at once would only queue for a connection); the
    /// one-shot write is one SQL transaction.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_in_flight: self.pool.status().max_size.max(1),
            atomic_one_shot: true,
            extends_leases: true,
            ..Capabilities::new()
        }
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.claim_sql(req).await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<PgEffect>,
    ) -> Result<(), Error> {
        // Refused before a connection is taken: nothing is written, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        let response = response.as_ref().map(StoredResponse::as_str);
        self.complete_sql(key, token, expires_at, response, effects)
            .await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.release_sql(key, token).await
    }

    /// One `UPDATE` of the lease and the expiry, fenced by the token and the status.
    async fn extend(&self, ext: Extension<'_>) -> Result<(), Error> {
        self.extend_sql(ext).await
    }

    /// One SQL transaction on one connection: the claim written completed, the effects, the
    /// commit (see `claim_completed_sql`).
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<PgEffect>,
    ) -> Result<OneShotWrite, Error> {
        self.claim_completed_sql(req, effects).await
    }
}

impl PostgresStore {
    async fn claim_sql(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        let client = self.client().await?;
        self.claim_on(
            &client,
            req,
            &ClaimToken::generate(),
            req.record_expires_at(),
            Some(req.lease_until),
        )
        .await
    }

    /// The claim statement on `client` (a connection, or a transaction of one): in progress
    /// under `lease_until`, or, with `None`, already completed (the one-shot write).
    async fn claim_on<C: deadpool_postgres::GenericClient>(
        &self,
        client: &C,
        req: ClaimRequest<'_>,
        token: &ClaimToken,
        expires_at: SystemTime,
        lease_until: Option<SystemTime>,
    ) -> Result<Claim, Error> {
        let id = stored_id(req.key);
        let err = |e| self.pg_err("claim of", req.key, e);
        let sql = if lease_until.is_some() {
            &self.sql.claim
        } else {
            &self.sql.claim_completed
        };
        let stmt = self
            .answer("claim", client.prepare_cached(sql))
            .await?
            .map_err(err)?;
        let row = self
            .answer(
                "claim",
                client.query_one(
                    &stmt,
                    &[
                        &id.as_ref(),
                        &token.as_str(),
                        &lease_until.map(epoch_millis),
                        &epoch_millis(expires_at),
                        &req.fingerprint,
                        &epoch_millis(req.now),
                    ],
                ),
            )
            .await?
            .map_err(err)?;
        let bad = |e| bad_row(req.key, &self.sql.table, e);
        let won: bool = row.try_get(0).map_err(bad)?;
        if won {
            return Ok(Claim::Acquired(token.clone()));
        }
        let status: String = row.try_get(1).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let fingerprint: Option<String> = row.try_get(4).map_err(bad)?;
        let response: Option<String> = row.try_get(5).map_err(bad)?;
        match Status::parse(&status) {
            Some(Status::Completed) => Ok(Claim::Completed {
                record: ClaimRecord {
                    status: Status::Completed,
                    expires_at: from_epoch_millis(expires_at),
                    lease_until: lease_until.map(from_epoch_millis),
                    fingerprint,
                    response: response.map(StoredResponse::new),
                },
                answered_by: AnsweredBy::Store,
            }),
            Some(Status::InProgress) => Ok(Claim::HeldElsewhere {
                lease_until: lease_until.map(from_epoch_millis),
            }),
            None => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "unknown status {status:?} for key {:?} in table {:?}",
                    short(req.key),
                    self.sql.table
                ),
            )),
        }
    }

    /// One transaction: the claim written as completed, then the effects; committed only if
    /// every effect passed. A claim that finds the key taken writes nothing, and the
    /// transaction is dropped (rolled back) with it.
    async fn claim_completed_sql(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<PgEffect>,
    ) -> Result<OneShotWrite, Error> {
        let mut client = self.client().await?;
        let err = |e| map_pg_err("one-shot commit of", req.key, &self.sql.table, e);
        let txn = self
            .answer("one-shot commit", client.transaction())
            .await?
            .map_err(err)?;
        let token = ClaimToken::generate();
        let claimed = self
            .claim_on(&txn, req, &token, req.expires_at, None)
            .await?;
        if let Err(refused) = claimed.acquired_or_refused() {
            return Ok(refused);
        }
        self.run_effects(&txn, req.key, effects.as_slice()).await?;
        self.answer("one-shot commit", txn.commit())
            .await?
            .map_err(err)?;
        Ok(OneShotWrite::Committed)
    }

    async fn complete_sql(
        &self,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<&str>,
        effects: Effects<PgEffect>,
    ) -> Result<(), Error> {
        let id = stored_id(key);
        if !effects.is_empty() {
            return self
                .complete_with_effects(&id, key, token, expires_at, response, effects.into_vec())
                .await;
        }
        let client = self.client().await?;
        let err = |e| self.pg_err("completion of", key, e);
        let stmt = self
            .answer("completion", client.prepare_cached(&self.sql.complete))
            .await?
            .map_err(err)?;
        let updated = self
            .answer(
                "completion",
                client.execute(
                    &stmt,
                    &[
                        &id.as_ref(),
                        &token.as_str(),
                        &epoch_millis(expires_at),
                        &response,
                    ],
                ),
            )
            .await?
            .map_err(err)?;
        if updated == 1 {
            return Ok(());
        }
        // Nothing updated: either an earlier attempt of this completion already landed (a retry
        // after an ambiguous error), or the claim was lost. This second read is safe because
        // the token is unique to this claim and only its holder ever completes it: if a row
        // with our token is completed now, our earlier attempt did it, and no other writer can
        // turn a lost claim back into ours between the two statements.
        let stmt = self
            .answer("completion", client.prepare_cached(&self.sql.completed_by))
            .await?
            .map_err(err)?;
        let row = self
            .answer(
                "completion",
                client.query_opt(&stmt, &[&id.as_ref(), &token.as_str()]),
            )
            .await?
            .map_err(err)?;
        let status: Option<String> = match row {
            Some(row) => row
                .try_get(0)
                .map_err(|e| bad_row(key, &self.sql.table, e))?,
            None => None,
        };
        match status.as_deref() {
            Some("COMPLETED") => Ok(()),
            _ => Err(Error::lost_claim(key)),
        }
    }

    async fn extend_sql(&self, ext: Extension<'_>) -> Result<(), Error> {
        let id = stored_id(ext.key);
        let client = self.client().await?;
        let err = |e| self.pg_err("extension of", ext.key, e);
        let stmt = self
            .answer("extend", client.prepare_cached(&self.sql.extend))
            .await?
            .map_err(err)?;
        let updated = self
            .answer(
                "extend",
                client.execute(
                    &stmt,
                    &[
                        &id.as_ref(),
                        &ext.token.as_str(),
                        &epoch_millis(ext.lease_until),
                        &epoch_millis(ext.expires_at),
                    ],
                ),
            )
            .await?
            .map_err(err)?;
        if updated == 1 {
            Ok(())
        } else {
            Err(Error::lost_claim(ext.key))
        }
    }

    async fn release_sql(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("release of", key, e);
        let stmt = self
            .answer("release", client.prepare_cached(&self.sql.release))
            .await?
            .map_err(err)?;
        let deleted = self
            .answer(
                "release",
                client.execute(&stmt, &[&id.as_ref(), &token.as_str()]),
            )
            .await?
            .map_err(err)?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(Error::lost_claim(key))
        }
    }
}
