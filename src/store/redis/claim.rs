//! The claim protocol as Lua scripts: [`ClaimStore`] for [`RedisStore`], each call one
//! script the server runs atomically.

use super::*;

// ARGV: now_ms, lease_until_ms, expires_at_ms, token, slack_ms, [fingerprint]
// Returns {'ACQUIRED'} or {status, lease_until_ms|nil, expires_at_ms|nil, fingerprint|nil,
// response|nil}. (A missing field comes back from HMGET as `false`, which the reply turns into
// nil without cutting the array short as a Lua nil would.)
pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
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
pub(super) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
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
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
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

// ARGV: token, now_ms, lease_until_ms, expires_at_ms, slack_ms. Returns 1 if extended, 0
// otherwise (the record carries another token, or is no longer in progress).
pub(super) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local rec = redis.call('HMGET', KEYS[1], 's', 't')
if rec[1] == 'INPROGRESS' and rec[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'l', ARGV[3], 'e', ARGV[4])
  local ttl = tonumber(ARGV[4]) - tonumber(ARGV[2]) + tonumber(ARGV[5])
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
return 0
"#,
    )
});

/// Refuses effect lists whose checks could pass one by one and still fail when applied in
/// sequence (say `set` then `incr_by` on the same key), since the script cannot roll back.
pub(super) fn check_effects(effects: &[RedisEffect]) -> Result<(), Error> {
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

pub(super) fn parse_millis(v: Option<&String>) -> Option<i64> {
    v.and_then(|s| s.parse().ok())
}

impl ClaimStore for RedisStore {
    type Effect = RedisEffect;

    /// 256 calls in flight: one multiplexed connection pipelines the calls; the server runs
    /// each script atomically in turn.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_in_flight: 256,
            extends_leases: true,
            ..Capabilities::new()
        }
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
                Ok(Claim::Completed {
                    record: ClaimRecord {
                        status: Status::Completed,
                        expires_at: from_epoch_millis(expires_at),
                        lease_until: parse_millis(reply.get(1).and_then(Option::as_ref))
                            .map(from_epoch_millis),
                        fingerprint: reply.get(3).cloned().flatten(),
                        response: reply.get(4).cloned().flatten().map(StoredResponse::new),
                    },
                    answered_by: AnsweredBy::Store,
                })
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

    /// One script: the lease, the expiry and the key's own expiry, fenced by the token and the
    /// status.
    async fn extend(&self, ext: Extension<'_>) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let extended: i64 = EXTEND
            .key(self.record_key(ext.key))
            .arg(ext.token.as_str())
            .arg(epoch_millis(ext.now))
            .arg(epoch_millis(ext.lease_until))
            .arg(epoch_millis(ext.expires_at))
            .arg(self.slack_ms())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_err("extension of", ext.key, e))?;
        if extended == 1 {
            Ok(())
        } else {
            Err(Error::lost_claim(ext.key))
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
