//! [`RedisStore`]: the contract as three Lua scripts, with atomic [`RedisEffect`]s
//! (feature `redis`).
//!
//! # How a record is kept
//!
//! One hash per key, at `{prefix}{key}` (default prefix `sqs-claim:`):
//!
//! | field | meaning |
//! |-------|---------|
//! | `s`   | status, `INPROGRESS` or `COMPLETED` |
//! | `t`   | owner token |
//! | `l`   | lease end, epoch ms (in progress only) |
//! | `e`   | `expires_at`, epoch ms |
//! | `n`   | the claimant's `now` at claim time, epoch ms (to size the key's TTL, see below) |
//! | `f`   | payload fingerprint, if any |
//! | `r`   | the stored response, as given (completed only; absent for none, empty for an empty one) |
//!
//! Records written before the stored response have no `r` field: they read as completed with
//! no response.
//!
//! Claim, completion and release (and the operator's conditional deletes, `force_release` and
//! `forget`) are each **one** server-side Lua script (sent as `EVALSHA`, falling back to
//! `EVAL`/`SCRIPT LOAD` after a restart flushed the script cache), so no other command can run
//! between the read and the write: of 32 concurrent claimers exactly one wins
//! because Redis runs scripts one at a time. Every decision compares the caller's `now` with the
//! stored times, never the server clock.
//!
//! Memory stays bounded without a cleanup job: every write sets the key's TTL. The TTL is the
//! caller-relative lifetime (`expires_at - now`) plus a slack (default 60 s), applied on the
//! server's own clock with `PEXPIRE`. Sizing it relative, rather than with `PEXPIREAT
//! expires_at`, means a Redis clock that runs ahead of the workers' cannot delete a record before
//! the workers consider it expired (which would let a duplicate through); a record that lingers
//! past `expires_at` is harmless, because the scripts treat it as absent. A claim's `expires_at`
//! is never before its lease ([`ClaimRequest::record_expires_at`]), so Redis never deletes an
//! in-progress record while its lease is live, whatever TTL the caller asked for.
//!
//! # Effects
//!
//! [`RedisEffect`]s (`INCRBY`, `HINCRBY`, `HINCRBY` within a range, `SET`, and `SET`
//! only-if-absent) run inside the completion script, so they commit with the completion or not
//! at all. Redis does not roll a script back when a command fails half-way, so the script first
//! checks every effect (key types, integer values, overflow, ranges, absence for
//! [`RedisEffect::set_nx`]), several increments of one key together, and only then writes
//! anything. Effect keys are used as given (the store's prefix is not added).
//!
//! # Durability: read this before choosing Redis
//!
//! The claim is only as durable as Redis is.
//!
//! * **No persistence** (the way the tests run it: `--save "" --appendonly no`): a restart or
//!   a crash forgets every claim and every completion. Any message redelivered within its
//!   window after that runs its handler again.
//! * **AOF with `appendfsync everysec`**: a crash of the server (or its machine) can lose about
//!   the last second of writes: claims and completions acknowledged in that second may be
//!   forgotten, and their messages processed again if redelivered. `appendfsync always` closes
//!   this at a large cost in write latency.
//! * **Replicas and failover** (Sentinel, ElastiCache/MemoryDB Multi-AZ): replication is
//!   asynchronous, so a failover can promote a replica that has not yet seen acknowledged
//!   claims and completions. `WAIT` narrows the gap but does not make Redis a consensus store.
//!   (Amazon MemoryDB's transaction log does keep acknowledged writes across failover.)
//! * Redis Cluster is not supported: the completion script touches the record and the effect
//!   keys in one call, which Cluster only allows within one hash slot.
//!
//! If a duplicate run after a Redis restart is unacceptable, use a durable store (DynamoDB,
//! PostgreSQL), or the [tiered store](super::tiered) with Redis only as a cache in front of one.
//!
//! # TLS
//!
//! `rediss://` URLs connect over TLS (rustls, via the `redis` crate's `tokio-rustls-comp`
//! feature, which this crate enables), verifying the server against the operating system's
//! root certificates, as ElastiCache with in-transit encryption requires.
//!
//! # Errors
//!
//! Connection refused, timeouts, dropped connections, `LOADING`, `BUSY`, `READONLY` (a failover
//! in progress) and `TRYAGAIN`/`CLUSTERDOWN`/`MASTERDOWN` are
//! [`ErrorKind::StoreUnavailable`]; anything else Redis refuses (a key of the wrong type under
//! the prefix, a script error, an ACL denial) is [`ErrorKind::StoreRejected`].

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script, ServerErrorKind};

use super::{
    Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Inspected,
    Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::{Error, ErrorKind};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "sqs-claim:";

/// How long a record outlives its `expires_at` on the server, by default (see the module docs).
pub const DEFAULT_EXPIRY_SLACK: Duration = Duration::from_secs(60);

// ARGV: now_ms, lease_until_ms, expires_at_ms, token, slack_ms, [fingerprint]
// Returns {'ACQUIRED'} or {status, lease_until_ms|nil, expires_at_ms|nil, fingerprint|nil,
// response|nil}. (A missing field comes back from HMGET as `false`, which the reply turns into
// nil without cutting the array short as a Lua nil would.)
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local now = tonumber(ARGV[1])
local rec = redis.call('HMGET', KEYS[1], 's', 'l', 'e', 'f', 'r')
if rec[1] then
  local lease = tonumber(rec[2])
  local expires = tonumber(rec[3])
  local expired = expires ~= nil and expires <= now
  local lapsed = rec[1] == 'INPROGRESS' and lease ~= nil and lease <= now
  if not expired and not lapsed then
    return {rec[1], rec[2], rec[3], rec[4], rec[5]}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'INPROGRESS', 't', ARGV[4], 'l', ARGV[2], 'e', ARGV[3], 'n', ARGV[1])
if ARGV[6] then
  redis.call('HSET', KEYS[1], 'f', ARGV[6])
end
local ttl = tonumber(ARGV[3]) - now + tonumber(ARGV[5])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
return {'ACQUIRED'}
"#,
    )
});

// KEYS: record, then one key per effect. ARGV: token, expires_at_ms, slack_ms, has_response
// ('1' or '0'), response ('' if none), then five arguments per effect (op, a, b, c, d). Returns {'OK'}, {'DONE'} (already completed by this token),
// {'LOST'}, or {'REJECTED', index, reason}.
static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'n')
if rec[2] ~= ARGV[1] then return {'LOST'} end
if rec[1] == 'COMPLETED' then return {'DONE'} end
if rec[1] ~= 'INPROGRESS' then return {'LOST'} end

local function is_int(v)
  return v == '0' or (#v <= 20 and string.match(v, '^%-?[1-9]%d*$') ~= nil)
end
local function fits(sum)
  return sum < 9.2e18 and sum > -9.2e18
end
-- Lua numbers are doubles: integers are exact up to 2^53 - 1, so bounded checks stay there.
local EXACT = 9007199254740991
-- The value each incremented key (or hash field) will hold after the effects checked so far,
-- so that several increments of one key in one completion are checked together.
local after = {}

-- Pass 1: prove every effect will succeed before writing anything (no rollback in Redis).
local n = #KEYS - 1
for i = 1, n do
  local k = KEYS[i + 1]
  local base = 5 * i + 1
  local op, a, b, c, d = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  if op == 'incrby' then
    local t = redis.call('TYPE', k)['ok']
    local v = nil
    if t == 'string' then
      v = redis.call('GET', k)
      if not is_int(v) then return {'REJECTED', tostring(i - 1), 'value is not an integer'} end
    elseif t ~= 'none' then
      return {'REJECTED', tostring(i - 1), 'key holds a ' .. t .. ', not a string'}
    end
    local sum = (after[k] or tonumber(v) or 0) + tonumber(a)
    if (v or after[k]) and not fits(sum) then
      return {'REJECTED', tostring(i - 1), 'increment would overflow'}
    end
    after[k] = sum
  elseif op == 'hincrby' or op == 'hincrbyin' then
    local t = redis.call('TYPE', k)['ok']
    local v = nil
    if t == 'hash' then
      v = redis.call('HGET', k, a)
      if v and not is_int(v) then
        return {'REJECTED', tostring(i - 1), 'field is not an integer'}
      end
    elseif t ~= 'none' then
      return {'REJECTED', tostring(i - 1), 'key holds a ' .. t .. ', not a hash'}
    end
    local slot = #k .. ':' .. k .. a
    local by = tonumber(b)
    local sum = (after[slot] or tonumber(v) or 0) + by
    if op == 'hincrby' then
      if (v or after[slot]) and not fits(sum) then
        return {'REJECTED', tostring(i - 1), 'increment would overflow'}
      end
    else
      local lo, hi = tonumber(c), tonumber(d)
      if math.abs(by) > EXACT or math.abs(lo) > EXACT or math.abs(hi) > EXACT then
        return {'REJECTED', tostring(i - 1), 'increment or bounds beyond 2^53 - 1'}
      end
      if sum < lo or sum > hi then
        return {'REJECTED', tostring(i - 1), 'the field would leave its range ' .. c .. '..=' .. d}
      end
    end
    after[slot] = sum
  elseif op == 'setnx' then
    if redis.call('EXISTS', k) == 1 then
      return {'REJECTED', tostring(i - 1), 'key already exists'}
    end
  elseif op ~= 'set' then
    return {'REJECTED', tostring(i - 1), 'unknown effect ' .. op}
  end
end

-- Pass 2: apply, then complete.
for i = 1, n do
  local k = KEYS[i + 1]
  local base = 5 * i + 1
  local op, a, b = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  if op == 'incrby' then
    redis.call('INCRBY', k, a)
  elseif op == 'hincrby' or op == 'hincrbyin' then
    redis.call('HINCRBY', k, a, b)
  else
    redis.call('SET', k, a)
  end
end
redis.call('HSET', KEYS[1], 's', 'COMPLETED', 'e', ARGV[2])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'r', ARGV[5])
end
redis.call('HDEL', KEYS[1], 'l')
local claimed_at = tonumber(rec[3]) or tonumber(ARGV[2])
local ttl = tonumber(ARGV[2]) - claimed_at + tonumber(ARGV[3])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
return {'OK'}
"#,
    )
});

// ARGV: token. Returns 1 if released, 0 otherwise.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local rec = redis.call('HMGET', KEYS[1], 's', 't')
if rec[1] == 'INPROGRESS' and rec[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#,
    )
});

// The operator's conditional delete (force_release, forget). ARGV: the status the record must
// have. Returns 1 if deleted, 0 otherwise: the check and the delete run as one script.
static DELETE_IF: LazyLock<Script> = LazyLock::new(|| {
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

/// A write committed atomically with a [`RedisStore`] completion, inside the same Lua script.
///
/// All effects of a completion are checked first and applied only if every check passes; a
/// refused effect fails the completion with [`ErrorKind::EffectRejected`] and writes nothing.
/// Keys are used as given (the store's prefix is not added).
///
/// ```
/// use sqs_claim::store::redis::RedisEffect;
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

/// Refuses effect lists whose checks could pass one by one and still fail when applied in
/// sequence (say `set` then `incr_by` on the same key), since the script cannot roll back.
fn check_effects(effects: &[RedisEffect]) -> Result<(), Error> {
    let mut seen: HashMap<&str, &'static str> = HashMap::new();
    for (i, effect) in effects.iter().enumerate() {
        let kind = effect.kind();
        if let Some(prev) = seen.insert(effect.key(), kind) {
            let combinable = prev == kind && (kind == "incrby" || kind == "hincrby");
            if !combinable {
                return Err(Error::new(
                    ErrorKind::EffectRejected,
                    format!(
                        "effect #{i} ({kind}) writes key {:?} that an earlier effect ({prev}) of \
                         the same completion also writes; only several incr_by or several \
                         hincr_by on one key can be combined",
                        effect.key()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A claim store in Redis. Cloning it is cheap and shares the connection.
///
/// See the [module documentation](self) for the record layout, the durability trade-offs and
/// the error mapping.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqs_claim::Error> {
/// use sqs_claim::RedisStore;
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?.with_prefix("payments:");
/// # let _ = store;
/// # Ok(()) }
/// ```
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

/// Timeouts and retries for the connections the `connect*` constructors make: short enough that
/// a dead server surfaces as `StoreUnavailable` well within a Lambda invocation, long enough
/// that a busy one is not abandoned. An ambiguous timeout is safe: a claim that did land is seen
/// as held until its lease lapses, and a repeated completion is a no-op.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

fn open_client(url: &str) -> Result<redis::Client, Error> {
    redis::Client::open(url).map_err(|e| {
        Error::with_source(
            ErrorKind::Config,
            "invalid Redis URL (expected redis://[user:password@]host[:port][/db] or rediss://... \
             for TLS)",
            e,
        )
    })
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
    pub fn record_key(&self, key: &str) -> String {
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

/// The host part of a URL, for error messages (a URL may carry a password).
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// Classifies a Redis error: transient (`StoreUnavailable`) or refused (`StoreRejected`).
fn map_err(op: &str, key: &str, e: RedisError) -> Error {
    let transient = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || e.code() == Some("BUSY");
    let key = short(key);
    if transient {
        Error::with_source(
            ErrorKind::StoreUnavailable,
            format!("Redis unavailable during {op} {key:?}; check the server and the network"),
            e,
        )
    } else {
        Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "Redis refused {op} {key:?}; check that nothing else writes keys under this \
                 store's prefix and that the user may run EVALSHA/SCRIPT LOAD"
            ),
            e,
        )
    }
}

/// Keys can be many kilobytes; error messages need only their start.
fn short(key: &str) -> &str {
    match key.char_indices().nth(120) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

/// The reply is described, not printed: a record's fields include the stored response, which
/// never goes into error text.
fn bad_reply(op: &str, key: &str, reply: &[Option<String>]) -> Error {
    let first = reply.first().cloned().flatten();
    Error::new(
        ErrorKind::StoreRejected,
        format!(
            "unexpected Redis reply to {op} {:?} (first field {:?}, {} fields); the record \
             under this key is not one this store wrote (check the prefix)",
            short(key),
            first.as_deref().map(short),
            reply.len()
        ),
    )
}

fn parse_millis(v: Option<&String>) -> Option<i64> {
    v.and_then(|s| s.parse().ok())
}

impl ClaimStore for RedisStore {
    type Effect = RedisEffect;

    /// 256 calls in flight: one multiplexed connection pipelines the calls; the server runs
    /// each script atomically in turn.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_max_in_flight(256)
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        let token = ClaimToken::generate();
        let mut invocation = CLAIM.key(self.record_key(req.key));
        invocation
            .arg(epoch_millis(req.now))
            .arg(epoch_millis(req.lease_until))
            .arg(epoch_millis(req.record_expires_at()))
            .arg(token.as_str())
            .arg(self.slack_ms());
        if let Some(fp) = req.fingerprint {
            invocation.arg(fp);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<Option<String>> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_err("claim of", req.key, e))?;
        let status = reply.first().and_then(|s| s.as_deref());
        match status {
            Some("ACQUIRED") => Ok(Claim::Acquired(token)),
            Some("INPROGRESS") => Ok(Claim::HeldElsewhere {
                lease_until: parse_millis(reply.get(1).and_then(Option::as_ref))
                    .map(from_epoch_millis),
            }),
            Some("COMPLETED") => {
                let expires_at = parse_millis(reply.get(2).and_then(Option::as_ref))
                    .ok_or_else(|| bad_reply("claim of", req.key, &reply))?;
                Ok(Claim::Completed(ClaimRecord {
                    status: Status::Completed,
                    expires_at: from_epoch_millis(expires_at),
                    lease_until: parse_millis(reply.get(1).and_then(Option::as_ref))
                        .map(from_epoch_millis),
                    fingerprint: reply.get(3).cloned().flatten(),
                    response: reply.get(4).cloned().flatten().map(StoredResponse::new),
                }))
            }
            _ => Err(bad_reply("claim of", req.key, &reply)),
        }
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<RedisEffect>,
    ) -> Result<(), Error> {
        // Refused before the script is sent: nothing is written, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        let effects = effects.into_vec();
        check_effects(&effects)?;
        let mut invocation = COMPLETE.key(self.record_key(key));
        invocation
            .arg(token.as_str())
            .arg(epoch_millis(expires_at))
            .arg(self.slack_ms())
            .arg(if response.is_some() { "1" } else { "0" })
            .arg(response.as_ref().map_or("", StoredResponse::as_str));
        for effect in &effects {
            invocation.key(effect.key()).arg(&effect.args()[..]);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<Option<String>> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_err("completion of", key, e))?;
        match reply.first().and_then(|s| s.as_deref()) {
            Some("OK" | "DONE") => Ok(()),
            Some("LOST") => Err(Error::lost_claim(key)),
            Some("REJECTED") => {
                let index = reply.get(1).cloned().flatten().unwrap_or_default();
                let reason = reply.get(2).cloned().flatten().unwrap_or_default();
                let effect_key = index
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| effects.get(i))
                    .map_or("?", RedisEffect::key);
                Err(Error::new(
                    ErrorKind::EffectRejected,
                    format!(
                        "effect #{index} on key {:?} rejected: {reason}; nothing was written and \
                         the claim is still held",
                        short(effect_key)
                    ),
                ))
            }
            _ => Err(bad_reply("completion of", key, &reply)),
        }
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let released: i64 = RELEASE
            .key(self.record_key(key))
            .arg(token.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_err("release of", key, e))?;
        if released == 1 {
            Ok(())
        } else {
            Err(Error::lost_claim(key))
        }
    }
}

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
