//! [`StoreAdmin`] for [`SqliteStore`]: the table, pruning, and the operator's reads and
//! conditional deletes.

use super::*;

/// The database is local: [`init`](StoreAdmin::init) and [`check_ready`](StoreAdmin::check_ready)
/// both create the `claims` table if it is missing (as [`SqliteStore::open`] does) and add the
/// `response` column to a table of an older version. SQLite has no TTL: expired rows stay until
/// [`prune_expired`](StoreAdmin::prune_expired) deletes them.
impl StoreAdmin for SqliteStore {
    async fn init(&self) -> Result<(), Error> {
        let location = self.inner.location.clone();
        self.run_direct(move |conn| {
            while_busy(|| create_schema(conn))
                .map_err(|e| classify(e, format!("cannot create the claims table in {location}")))
        })
        .await
    }

    async fn check_ready(&self) -> Result<(), Error> {
        self.init().await
    }

    /// Deletes at most `limit` records that expired at `now`, oldest first. Bounded, so a
    /// scheduled run (`sqs-claim prune`) never holds the write lock for long.
    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        let now_ms = epoch_millis(now);
        self.run(move |conn| {
            conn.execute(
                "DELETE FROM claims WHERE id IN (SELECT id FROM claims \
                 WHERE expires_at_ms <= ?1 ORDER BY expires_at_ms LIMIT ?2)",
                rusqlite::params![now_ms, i64::from(limit)],
            )
            .map(|n| Some(n as u64))
            .map_err(|e| classify(e, "pruning expired claims failed"))
        })
        .await
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let key = key.to_owned();
        self.run_direct(move |conn| {
            let fail = |e| classify(e, format!("inspect of key {key:?} failed"));
            let row = conn
                .query_row(
                    "SELECT status, token, lease_until_ms, expires_at_ms, fingerprint, response \
                     FROM claims WHERE id = ?1",
                    [&key],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<i64>>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, Option<String>>(5)?,
                        ))
                    },
                )
                .optional()
                .map_err(fail)?;
            let Some((status, token, lease, expires, fingerprint, response)) = row else {
                return Ok(None);
            };
            let Some(status) = Status::parse(&status) else {
                return Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!("record for key {key:?} has an unknown status {status:?}"),
                ));
            };
            Ok(Some(Inspected::new(
                ClaimRecord {
                    status,
                    expires_at: from_epoch_millis(expires),
                    lease_until: lease.map(from_epoch_millis),
                    fingerprint,
                    response: response.map(StoredResponse::new),
                },
                Some(ClaimToken::from_string(token)),
            )))
        })
        .await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::InProgress).await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::Completed).await
    }
}

impl SqliteStore {
    /// Deletes `key`'s row only if its status is `status`, in one statement.
    async fn delete_if(&self, key: &str, status: Status) -> Result<bool, Error> {
        let key = key.to_owned();
        self.run(move |conn| {
            conn.execute(
                "DELETE FROM claims WHERE id = ?1 AND status = ?2",
                params![key, status.as_str()],
            )
            .map(|changed| changed == 1)
            .map_err(|e| classify(e, format!("delete of key {key:?} failed")))
        })
        .await
    }
}
