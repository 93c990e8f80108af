//! [`StoreAdmin`] for [`RedisStore`]: the start-up check, and the operator's reads and
//! conditional deletes (records expire by themselves).

use super::*;

// The operator's conditional delete (force_release, forget). ARGV: the status the record must
// have. Returns 1 if deleted, 0 otherwise: the check and the delete run as one script.
pub(super) static DELETE_IF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('HGET', KEYS[1], 's') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#,
    )
});

/// Nothing to create or prune: records are hashes that Redis expires by itself.
/// [`check_ready`](StoreAdmin::check_ready) checks that the server answers (a `PING`).
impl StoreAdmin for RedisStore {
    async fn init(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| map_err("the start-up check of prefix", &self.prefix, e))
    }

    async fn prune_expired(
        &self,
        _now: std::time::SystemTime,
        _limit: u32,
    ) -> Result<Option<u64>, Error> {
        Ok(None)
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let mut conn = self.conn.clone();
        let reply: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.record_key(key))
            .arg(&["s", "t", "l", "e", "f", "r"][..])
            .query_async(&mut conn)
            .await
            .map_err(|e| map_err("inspect of", key, e))?;
        let field = |i: usize| reply.get(i).cloned().flatten();
        let Some(status) = field(0) else {
            return Ok(None);
        };
        let (Some(status), Some(expires)) = (
            Status::parse(&status),
            parse_millis(reply.get(3).and_then(Option::as_ref)),
        ) else {
            return Err(bad_reply("inspect of", key, &reply));
        };
        Ok(Some(Inspected::new(
            ClaimRecord {
                status,
                expires_at: from_epoch_millis(expires),
                lease_until: parse_millis(reply.get(2).and_then(Option::as_ref))
                    .map(from_epoch_millis),
                fingerprint: field(4),
                response: field(5).map(StoredResponse::new),
            },
            field(1).map(ClaimToken::from_string),
        )))
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::InProgress).await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::Completed).await
    }
}

impl RedisStore {
    async fn delete_if(&self, key: &str, status: Status) -> Result<bool, Error> {
        let mut conn = self.conn.clone();
        let deleted: i64 = DELETE_IF
            .key(self.record_key(key))
            .arg(status.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_err("delete of", key, e))?;
        Ok(deleted == 1)
    }
}
