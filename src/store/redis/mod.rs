use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script, ServerErrorKind};

use super::{
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Extension, Inspected, Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::{Error, ErrorKind};

mod admin;
mod claim;
mod errors;
mod settings;

// The children's own items, for one another (each child reads the parent's scope).
use claim::*;
use errors::*;
use settings::*;

/// The default key prefix.
pub(crate) const DEFAULT_PREFIX: &str = "sqs-claim:";

/// How long a record outlives its `expires_at` on the server, by default (see the module docs).
pub(crate) const DEFAULT_EXPIRY_SLACK: Duration = Duration::from_secs(60);

/// A write committed atomically with a [`RedisStore`] completion, inside the same Lua script.
///
/// All effects of a completion are checked first and applied only if every check passes; a
/// refused effect fails the completion with [`ErrorKind::EffectRejected`] and writes nothing.
/// Keys are used as given (the store's prefix is not added).
///
/// ```
/// use sqs_claim::RedisEffect;
/// let effects = vec![
///     RedisEffect::hincr_by("balances", "acct-42", 1_500),
///     RedisEffect::set_nx("receipt:order-7", "paid"),
/// ];
/// # let _ = effects;
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisEffect {
    op: Op,
}

// By hand: values, amounts and hash fields are business data and `?effect` lands in logs;
// the command and the key (as the code names it) stay, to tell effects apart.
impl std::fmt::Debug for RedisEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (command, key) = match &self.op {
            Op::IncrBy { key, .. } => ("INCRBY", key),
            Op::HIncrBy { key, .. } => ("HINCRBY", key),
            Op::HIncrByWithin { key, .. } => ("HINCRBY within bounds", key),
            Op::Set { key, .. } => ("SET", key),
            Op::SetNx { key, .. } => ("SET NX", key),
        };
        f.debug_struct("RedisEffect")
            .field("command", &command)
            .field("key", key)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    IncrBy {
        key: String,
        by: i64,
    },
    HIncrBy {
        key: String,
        field: String,
        by: i64,
    },
    HIncrByWithin {
        key: String,
        field: String,
        by: i64,
        min: i64,
        max: i64,
    },
    Set {
        key: String,
        value: String,
    },
    SetNx {
        key: String,
        value: String,
    },
}

impl RedisEffect {
    /// `INCRBY key by`. Refused if the key holds something other than an integer, or if the
    /// sum would come close to overflowing a 64-bit integer.
    pub fn incr_by(key: impl Into<String>, by: i64) -> Self {
        RedisEffect {
            op: Op::IncrBy {
                key: key.into(),
                by,
            },
        }
    }

    /// `HINCRBY key field by`. Refused if the key is not a hash, or the field not an integer,
    /// or the sum would come close to overflowing.
    pub fn hincr_by(key: impl Into<String>, field: impl Into<String>, by: i64) -> Self {
        RedisEffect {
            op: Op::HIncrBy {
                key: key.into(),
                field: field.into(),
                by,
            },
        }
    }

    /// `HINCRBY key field by`, refused unless the field's value after the increment lies
    /// within `range` (a missing field counts as 0); several increments of one field in one
    /// completion are checked together. The script compares Lua numbers (doubles), which hold
    /// integers exactly up to 2^53 - 1: the decision is exact as long as `by` and both bounds
    /// lie within ±(2^53 - 1), and an effect with one beyond is refused. The reference
    /// consumer's balances use it to stay within `0..=Payment::MAX_BALANCE_CENTS`.
    pub fn hincr_by_within(
        key: impl Into<String>,
        field: impl Into<String>,
        by: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Self {
        RedisEffect {
            op: Op::HIncrByWithin {
                key: key.into(),
                field: field.into(),
                by,
                min: *range.start(),
                max: *range.end(),
            },
        }
    }

    /// `SET key value` (overwrites whatever the key held, of any type).
    pub fn set(key: impl Into<String>, value: impl Into<String>) -> Self {
        RedisEffect {
            op: Op::Set {
                key: key.into(),
                value: value.into(),
            },
        }
    }

    /// `SET key value`, but only if `key` does not exist; if it does, the whole completion is
    /// refused with [`ErrorKind::EffectRejected`]. A business uniqueness check ("one receipt per
    /// order") that commits with the claim.
    pub fn set_nx(key: impl Into<String>, value: impl Into<String>) -> Self {
        RedisEffect {
            op: Op::SetNx {
                key: key.into(),
                value: value.into(),
            },
        }
    }

    /// The key this effect writes.
    pub fn key(&self) -> &str {
        match &self.op {
            Op::IncrBy { key, .. }
            | Op::HIncrBy { key, .. }
            | Op::HIncrByWithin { key, .. }
            | Op::Set { key, .. }
            | Op::SetNx { key, .. } => key,
        }
    }

    fn kind(&self) -> &'static str {
        match self.op {
            Op::IncrBy { .. } => "incrby",
            // Combinable with plain `hincr_by` on the same key: the script checks them together.
            Op::HIncrBy { .. } | Op::HIncrByWithin { .. } => "hincrby",
            Op::Set { .. } => "set",
            Op::SetNx { .. } => "setnx",
        }
    }

    /// The five script arguments: op, a, b, c, d.
    fn args(&self) -> [String; 5] {
        let none = String::new;
        match &self.op {
            Op::IncrBy { by, .. } => ["incrby".into(), by.to_string(), none(), none(), none()],
            Op::HIncrBy { field, by, .. } => [
                "hincrby".into(),
                field.clone(),
                by.to_string(),
                none(),
                none(),
            ],
            Op::HIncrByWithin {
                field,
                by,
                min,
                max,
                ..
            } => [
                "hincrbyin".into(),
                field.clone(),
                by.to_string(),
                min.to_string(),
                max.to_string(),
            ],
            Op::Set { value, .. } => ["set".into(), value.clone(), none(), none(), none()],
            Op::SetNx { value, .. } => ["setnx".into(), value.clone(), none(), none(), none()],
        }
    }
}

/// A claim store in Redis. Cloning it is cheap and shares the connection.
///
/// The sections below give the record layout, the durability trade-offs and
/// the error mapping.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqs_claim::Error> {
/// use sqs_claim::RedisStore;
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?.with_prefix("payments:");
/// # let _ = store;
/// # Ok(()) }
/// ```
///
/// The contract as three Lua scripts, with atomic [`RedisEffect`]s
/// (feature `redis`).
///
/// # How a record is kept
///
/// One hash per key, at `{prefix}{key}` (default prefix `sqs-claim:`):
///
/// | field | meaning |
/// |-------|---------|
/// | `s`   | status, `INPROGRESS` or `COMPLETED` |
/// | `t`   | owner token |
/// | `l`   | lease end, epoch ms (in progress only) |
/// | `e`   | `expires_at`, epoch ms |
/// | `n`   | the claimant's `now` at claim time, epoch ms (to size the key's TTL, see below) |
/// | `f`   | payload fingerprint, if any |
/// | `r`   | the stored response, as given (completed only; absent for none, empty for an empty one) |
///
/// Records written before the stored response have no `r` field: they read as completed with
/// no response.
///
/// Claim, completion and release (and the operator's conditional deletes, `force_release` and
/// `forget`) are each **one** server-side Lua script (sent as `EVALSHA`, falling back to
/// `EVAL`/`SCRIPT LOAD` after a restart flushed the script cache), so no other command can run
/// between the read and the write: of 32 concurrent claimers exactly one wins
/// because Redis runs scripts one at a time. Every decision compares the caller's `now` with the
/// stored times, never the server clock.
///
/// Memory stays bounded without a cleanup job: every write sets the key's TTL. The TTL is the
/// caller-relative lifetime (`expires_at - now`) plus a slack (default 60 s), applied on the
/// server's own clock with `PEXPIRE`. Sizing it relative, rather than with `PEXPIREAT
/// expires_at`, means a Redis clock that runs ahead of the workers' cannot delete a record before
/// the workers consider it expired (which would let a duplicate through); a record that lingers
/// past `expires_at` is harmless, because the scripts treat it as absent. A claim's `expires_at`
/// is never before its lease (`ClaimRequest::record_expires_at`), so Redis never deletes an
/// in-progress record while its lease is live, whatever TTL the caller asked for.
///
/// # Effects
///
/// [`RedisEffect`]s (`INCRBY`, `HINCRBY`, `HINCRBY` within a range, `SET`, and `SET`
/// only-if-absent) run inside the completion script, so they commit with the completion or not
/// at all. Redis does not roll a script back when a command fails half-way, so the script first
/// checks every effect (key types, integer values, overflow, ranges, absence for
/// [`RedisEffect::set_nx`]), several increments of one key together, and only then writes
/// anything. Effect keys are used as given (the store's prefix is not added).
///
/// # Durability: read this before choosing Redis
///
/// The claim is only as durable as Redis is.
///
/// * **No persistence** (the way the tests run it: `--save "" --appendonly no`): a restart or
///   a crash forgets every claim and every completion. Any message redelivered within its
///   window after that runs its handler again.
/// * **AOF with `appendfsync everysec`**: a crash of the server (or its machine) can lose about
///   the last second of writes: claims and completions acknowledged in that second may be
///   forgotten, and their messages processed again if redelivered. `appendfsync always` closes
///   this at a large cost in write latency.
/// * **Replicas and failover** (Sentinel, ElastiCache/MemoryDB Multi-AZ): replication is
///   asynchronous, so a failover can promote a replica that has not yet seen acknowledged
///   claims and completions. `WAIT` narrows the gap but does not make Redis a consensus store.
///   (Amazon MemoryDB's transaction log does keep acknowledged writes across failover.)
/// * Redis Cluster is not supported: the completion script touches the record and the effect
///   keys in one call, which Cluster only allows within one hash slot.
///
/// If a duplicate run after a Redis restart is unacceptable, use a durable store (DynamoDB,
/// PostgreSQL), or the [tiered store](crate::TieredStore) with Redis only as a cache in front of one.
///
/// # TLS
///
/// `rediss://` URLs connect over TLS (rustls, via the `redis` crate's `tokio-rustls-comp`
/// feature, which this crate enables), verifying the server against the operating system's
/// root certificates, as ElastiCache with in-transit encryption requires.
///
/// # Errors
///
/// Connection refused, timeouts, dropped connections, `LOADING`, `BUSY`, `READONLY` (a failover
/// in progress) and `TRYAGAIN`/`CLUSTERDOWN`/`MASTERDOWN` are
/// [`ErrorKind::StoreUnavailable`]; anything else Redis refuses (a key of the wrong type under
/// the prefix, a script error, an ACL denial) is [`ErrorKind::StoreRejected`].
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    slack: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("slack", &self.slack)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on an existing connection, with the default prefix `sqs-claim:`.
    pub fn new(conn: ConnectionManager) -> Self {
        RedisStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            slack: DEFAULT_EXPIRY_SLACK,
        }
    }

    /// Connects to `url` (`redis://` or `rediss://` for TLS) and fails at once if the server
    /// does not answer: use this at start-up when Redis is the claim store.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = open_client(url)?;
        let conn = ConnectionManager::new_with_config(client, manager_config())
            .await
            .map_err(|e| map_err("connect to", url_host(url), e))?;
        Ok(RedisStore::new(conn))
    }

    /// Like [`connect`](Self::connect), but does not connect until the first request: start-up
    /// never fails because Redis is down, and every request fails with `StoreUnavailable` until
    /// it is back. Meant for a cache (the [tiered store](super::tiered::TieredStore)), which
    /// must not stop a consumer from starting.
    pub fn connect_lazy(url: &str) -> Result<Self, Error> {
        let client = open_client(url)?;
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config())
            .map_err(|e| map_err("connect to", url_host(url), e))?;
        Ok(RedisStore::new(conn))
    }

    /// Sets the prefix put in front of every key (one per consumer or environment sharing a
    /// Redis database, e.g. `payments:`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets how long a record outlives its `expires_at` on the server (default 60 s); see the
    /// module docs. It only costs memory; it never extends the dedup window.
    pub fn with_expiry_slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key under which `key`'s record is kept.
    pub(crate) fn record_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The underlying connection (to read what effects wrote, for example).
    pub fn connection(&self) -> &ConnectionManager {
        &self.conn
    }

    fn slack_ms(&self) -> i64 {
        i64::try_from(self.slack.as_millis()).unwrap_or(i64::MAX / 4)
    }
}
