//! The Lua scripts; each runs atomically on the server.

/// Shared helpers. `num` prints a Lua number (a double) as an integer without exponent, exact
/// below 2^53; `ours` never throws on foreign input.
const PRELUDE: &str = r#"
local function num(x) return string.format('%.0f', x) end
local function decode(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' then return rec end
  return nil
end
local function ours(rec, holder)
  return rec ~= nil and rec.v == 1 and type(rec.holder) == 'string' and rec.holder == holder
    and type(rec.term) == 'number'
end
local function encode(holder, term, lease, acquired, renewed)
  return '{"v":1,"holder":' .. cjson.encode(holder) .. ',"term":' .. term .. ',"lease_ms":' .. lease
    .. ',"acquired_ms":' .. acquired .. ',"renewed_ms":' .. renewed .. '}'
end
"#;

/// Acquire or renew.
///
/// KEYS: holder, term. ARGV: holder, lease_ms, now_ms (client clock, informational),
/// expected term ('' unless we believe we hold it), term floor, events channel.
/// Returns `{1, term}` (leader), `{2, value, pttl}` (held by another or foreign),
/// `{3}` (we held it but it is gone: step down), `{4, wait_ms}` (server restarted too recently).
const ACQUIRE_BODY: &str = r#"
local holder, lease, now, expect, floor, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('GET', KEYS[1])
if cur then
  local rec = decode(cur)
  if ours(rec, holder) and (expect == '' or num(rec.term) == expect) then
    local acquired = now
    if type(rec.acquired_ms) == 'number' then acquired = num(rec.acquired_ms) end
    local term = num(rec.term)
    redis.call('SET', KEYS[1], encode(holder, term, lease, acquired, now), 'PX', lease)
    return {1, term}
  end
  return {2, cur, redis.call('PTTL', KEYS[1])}
end
if expect ~= '' then
  return {3}
end
local info = redis.call('INFO', 'server')
local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
if up == nil then
  return redis.error_reply('GLUPTIME INFO server has no uptime_in_seconds')
end
-- uptime_in_seconds is the difference of two whole-second clocks: it may exceed the real uptime
-- by up to a second, so only up - 1 seconds are certain.
local wait = tonumber(lease) - (up - 1) * 1000
if wait > 0 then
  return {4, num(wait)}
end
local term
local floor_n = tonumber(floor) or 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  local r = redis.pcall('INCR', KEYS[2])
  if type(r) ~= 'number' then
    return redis.error_reply('GLBADTERM the term counter key ' .. KEYS[2] .. ' does not hold an integer')
  end
  term = r
  if term <= floor_n then
    term = floor_n + 1
    redis.call('SET', KEYS[2], num(term))
  end
else
  local t = redis.call('TIME')
  term = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if term <= floor_n then term = floor_n + 1 end
  redis.call('SET', KEYS[2], num(term))
end
local term_s = num(term)
local value = encode(holder, term_s, lease, now, now)
redis.call('SET', KEYS[1], value, 'PX', lease)
redis.call('PUBLISH', channel, value)
return {1, term_s}
"#;

/// Release: delete only if holder and term are ours, and tell the followers.
///
/// KEYS: holder. ARGV: holder, term, events channel. Returns 1 when released.
const RELEASE_BODY: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local rec = decode(cur)
if ours(rec, ARGV[1]) and num(rec.term) == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], '{"v":1,"released":true,"holder":' .. cjson.encode(ARGV[1]) .. ',"term":' .. ARGV[2] .. '}')
  return 1
end
return 0
"#;

/// Read the value and its remaining TTL in one step. KEYS: holder. Returns `{value|nil, pttl}`.
const GET_BODY: &str = r#"
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
"#;

pub(crate) fn acquire() -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{ACQUIRE_BODY}"))
}

pub(crate) fn release() -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{RELEASE_BODY}"))
}

pub(crate) fn get() -> redis::Script {
    redis::Script::new(GET_BODY)
}
