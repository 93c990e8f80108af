//! [`StoreAdmin`] for [`PostgresStore`]: the migration, the start-up check, pruning, and the
//! operator's reads and conditional deletes.

use super::*;

impl PostgresStore {
    async fn migrate_sql(&self) -> Result<(), Error> {
        let mut client = self.client().await?;
        let txn = self
            .answer("migrate", client.transaction())
            .await?
            .map_err(|e| self.pg_err("migrate", "", e))?;
        self.answer("migrate", txn.batch_execute(&self.sql.migrate))
            .await?
            .map_err(|e| self.pg_err("migrate", "", e))?;
        self.answer("migrate", txn.commit())
            .await?
            .map_err(|e| self.pg_err("migrate", "", e))
    }

    async fn prune_sql(&self, now: SystemTime, limit: u32) -> Result<u64, Error> {
        let client = self.client().await?;
        let stmt = self
            .answer("prune", client.prepare_cached(&self.sql.prune))
            .await?
            .map_err(|e| self.pg_err("prune", "", e))?;
        self.answer(
            "prune",
            client.execute(&stmt, &[&epoch_millis(now), &i64::from(limit)]),
        )
        .await?
        .map_err(|e| self.pg_err("prune", "", e))
    }
}

/// Every call bounded by the call timeout, as the claim's are.
impl StoreAdmin for PostgresStore {
    /// Creates the table and its `expires_at` index if they do not exist, and adds the
    /// `response` column to a table of an older version. Safe to run on every start and from
    /// several processes at once.
    async fn init(&self) -> Result<(), Error> {
        self.migrate_sql().await
    }

    /// One `SELECT` of the newest column, `LIMIT 0`: a missing table, or one of an older
    /// version, fails with what to run; a lost connection, a timeout or a permission says what
    /// it is.
    async fn check_ready(&self) -> Result<(), Error> {
        self.check_sql().await
    }

    /// Deletes up to `limit` records that expired at or before `now`, oldest first, and says
    /// how many it deleted. Rows locked by a running claim are skipped. Call it repeatedly
    /// until it returns less than `limit` to drain a backlog.
    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        self.prune_sql(now, limit).await.map(Some)
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        self.inspect_sql(key).await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::InProgress).await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::Completed).await
    }
}

impl PostgresStore {
    async fn check_sql(&self) -> Result<(), Error> {
        let client = self.client().await?;
        // Names the newest column, so a table of an older version is caught here, with the fix,
        // and not at the first claim.
        let sql = format!(
            "SELECT response FROM {} LIMIT 0",
            quote_table(&self.sql.table)
        );
        self.answer("the start-up check", client.batch_execute(&sql))
            .await?
            .map_err(|e| check_error(&self.sql.table, e))
    }

    async fn inspect_sql(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("inspect of", key, e);
        let stmt = self
            .answer("inspect", client.prepare_cached(&self.sql.inspect))
            .await?
            .map_err(err)?;
        let Some(row) = self
            .answer("inspect", client.query_opt(&stmt, &[&id.as_ref()]))
            .await?
            .map_err(err)?
        else {
            return Ok(None);
        };
        let bad = |e| bad_row(key, &self.sql.table, e);
        let status: String = row.try_get(0).map_err(bad)?;
        let token: String = row.try_get(1).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let fingerprint: Option<String> = row.try_get(4).map_err(bad)?;
        let response: Option<String> = row.try_get(5).map_err(bad)?;
        let Some(status) = Status::parse(&status) else {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "unknown status {status:?} for key {:?} in table {:?}",
                    short(key),
                    self.sql.table
                ),
            ));
        };
        Ok(Some(Inspected::new(
            ClaimRecord {
                status,
                expires_at: from_epoch_millis(expires_at),
                lease_until: lease_until.map(from_epoch_millis),
                fingerprint,
                response: response.map(StoredResponse::new),
            },
            Some(ClaimToken::from_string(token)),
        )))
    }

    /// Deletes `key`'s row only if its status is `status`, in one statement.
    async fn delete_if(&self, key: &str, status: Status) -> Result<bool, Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("delete of", key, e);
        let stmt = self
            .answer(
                "a conditional delete",
                client.prepare_cached(&self.sql.delete_if),
            )
            .await?
            .map_err(err)?;
        let deleted = self
            .answer(
                "a conditional delete",
                client.execute(&stmt, &[&id.as_ref(), &status.as_str()]),
            )
            .await?
            .map_err(err)?;
        Ok(deleted == 1)
    }
}
