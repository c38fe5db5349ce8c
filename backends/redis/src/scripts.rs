//! The Lua scripts; each runs atomically on the server.

/// Shared helpers.
///
/// Terms are handled as decimal strings, never as Lua numbers: those are doubles, which stop
/// counting by one at 2^53 (a counter at 2^53 + 1 handed out 2^53 + 4 three times). `canon`,
/// `gt` and `inc` are exact integer arithmetic on strings of digits, and `term_of` reads a
/// record's term as written instead of through `cjson` (which yields a double). `ours` never
/// throws on foreign input.
const PRELUDE: &str = r#"
local function canon(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then return nil end
  s = (string.gsub(s, '^0+', ''))
  if s == '' then return '0' end
  return s
end
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function inc(a)
  local i = #a
  while i > 0 and string.sub(a, i, i) == '9' do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #a) end
  return string.sub(a, 1, i - 1) .. string.char(string.byte(a, i) + 1) .. string.rep('0', #a - i)
end
local function term_of(raw)
  return canon(string.match(raw, ',"term":(%d+),"lease_ms":'))
end
local function decode(raw)
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' then return rec end
  return nil
end
local function ours(rec, raw, holder)
  return rec ~= nil and rec.v == 1 and type(rec.holder) == 'string' and rec.holder == holder
    and type(rec.term) == 'number' and term_of(raw) ~= nil
end
local function num(x) return string.format('%.0f', x) end
local function encode(holder, term, lease, acquired, renewed)
  return '{"v":1,"holder":' .. cjson.encode(holder) .. ',"term":' .. term .. ',"lease_ms":' .. lease
    .. ',"acquired_ms":' .. acquired .. ',"renewed_ms":' .. renewed .. '}'
end
"#;

/// Acquire or renew.
///
/// KEYS: holder, term, state. ARGV: holder, lease_ms, now_ms (client clock, informational),
/// expected term ('' unless we believe we hold it), the lowest term to hand out, events channel,
/// the client's guard for a lock gone without a trace (`''`: free, `'<ms>'`: wait, `'?'`: unknown).
///
/// Returns `{1, term}` (leader), `{2, value, pttl}` (held by another or foreign),
/// `{3}` (we held it but it is gone: step down), `{4, wait_ms}` (server restarted too recently),
/// `{5, wait_ms}` (the record vanished without a release: its holder may still believe it is
/// valid for this long), `{6}` (gone without a trace, and the client asked: it counts a lease).
///
/// Every acquire and renew writes the state key (holder, term, lease, server time in µs) and
/// publishes the record; a release writes the state key as released and publishes that.
const ACQUIRE_BODY: &str = r#"
local holder, lease, now, expect, floor, channel, guard =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local t = redis.call('TIME')
local now_s = canon(t[1] .. string.format('%06d', tonumber(t[2])))
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function hold(term, value)
  redis.call('SET', KEYS[1], value, 'PX', lease)
  redis.call('SET', KEYS[3], '{"v":1,"holder":' .. cjson.encode(holder) .. ',"term":' .. term
    .. ',"lease_ms":' .. lease .. ',"renewed_us":' .. now_s .. '}')
  redis.call('PUBLISH', channel, value)
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local rec = decode(cur)
  if ours(rec, cur, holder) and (expect == '' or term_of(cur) == expect) then
    local acquired = string.match(cur, ',"acquired_ms":(%d+),') or now
    local term = term_of(cur)
    hold(term, encode(holder, term, lease, acquired, now))
    return {1, term}
  end
  return {2, cur, redis.call('PTTL', KEYS[1])}
end
if expect ~= '' then
  return {3}
end
-- The key is missing. Released, expired, or vanished (deleted, evicted) while its holder may
-- still believe it is valid? The state key knows when the holder last renewed, on the server's
-- clock; without it (flushed, failed over, lost) the client's own knowledge decides.
local st = redis.call('GET', KEYS[3])
local srec = st and decode(st)
local since
if srec and srec.v == 1 and type(srec.holder) == 'string' and type(srec.lease_ms) == 'number'
    and type(srec.renewed_us) == 'number' then
  since = now_us - srec.renewed_us
end
local wait = 0
if since ~= nil and since >= 0 then
  if srec.released ~= true and srec.holder ~= holder and since < srec.lease_ms * 1000 then
    wait = math.ceil((srec.lease_ms * 1000 - since) / 1000)
  end
else
  -- No usable trace (a server clock set back counts as none).
  if guard == '?' then
    return {6}
  end
  wait = tonumber(guard) or 0
end
if wait > 0 then
  return {5, num(wait)}
end
local info = redis.call('INFO', 'server')
local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
if up == nil then
  return redis.error_reply('GLUPTIME INFO server has no uptime_in_seconds')
end
-- uptime_in_seconds is the difference of two whole-second clocks: it may exceed the real uptime
-- by up to a second, so only up - 1 seconds are certain.
wait = tonumber(lease) - (up - 1) * 1000
if wait > 0 then
  return {4, num(wait)}
end
-- The term: max(counter + 1, server time in microseconds, the last term in the state key + 1,
-- the caller's floor), exactly. The clock part keeps a counter that was lost or set back from
-- handing out an old term again.
local term = now_s
if redis.call('EXISTS', KEYS[2]) == 1 then
  local r = redis.pcall('INCR', KEYS[2])
  if type(r) ~= 'number' then
    return redis.error_reply('GLBADTERM the term counter key ' .. KEYS[2] .. ' cannot count on: '
      .. tostring(r.err))
  end
  local c = canon(redis.call('GET', KEYS[2]))
  if c and gt(c, term) then term = c end
end
local last = st and canon(string.match(st, ',"term":(%d+),'))
if last and gt(inc(last), term) then term = inc(last) end
local floor_s = canon(floor)
if floor_s and gt(floor_s, term) then term = floor_s end
redis.call('SET', KEYS[2], term)
hold(term, encode(holder, term, lease, now, now))
return {1, term}
"#;

/// Release: delete only if holder and term are ours, mark the state released, and tell the
/// followers.
///
/// KEYS: holder, state. ARGV: holder, term, events channel. Returns 1 when released.
const RELEASE_BODY: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local rec = decode(cur)
if ours(rec, cur, ARGV[1]) and term_of(cur) == ARGV[2] then
  local t = redis.call('TIME')
  local lease = string.match(cur, ',"lease_ms":(%d+),') or '0'
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '{"v":1,"released":true,"holder":' .. cjson.encode(ARGV[1])
    .. ',"term":' .. ARGV[2] .. ',"lease_ms":' .. lease .. ',"renewed_us":'
    .. canon(t[1] .. string.format('%06d', tonumber(t[2]))) .. '}')
  redis.call('PUBLISH', ARGV[3], '{"v":1,"released":true,"holder":' .. cjson.encode(ARGV[1])
    .. ',"term":' .. ARGV[2] .. '}')
  return 1
end
return 0
"#;

/// Read the value and its remaining TTL in one step. KEYS: holder. Returns `{value|nil, pttl}`.
const GET_BODY: &str = r#"
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
"#;

/// The scripts of one lock, shared by its watch tasks (they read with `get`).
pub(crate) struct Scripts {
    /// Acquire or renew.
    pub(crate) acquire: redis::Script,
    /// Compare-and-delete that publishes the release.
    pub(crate) release: redis::Script,
    /// The record and its TTL in one round trip.
    pub(crate) get: redis::Script,
    /// Everything the server keeps of the lock, for `inspect` (`inspect.rs`).
    pub(crate) inspect: redis::Script,
}

pub(crate) fn acquire() -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{ACQUIRE_BODY}"))
}

pub(crate) fn release() -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{RELEASE_BODY}"))
}

pub(crate) fn get() -> redis::Script {
    redis::Script::new(GET_BODY)
}

pub(crate) fn inspect() -> redis::Script {
    redis::Script::new(crate::inspect::INSPECT_BODY)
}
