-- How many at once, across hosts: one in-flight limit's seats, decided on the server.
--
-- One limit's state is six keys in one hash slot (they share a hash tag):
--   KEYS[1] state    hash:  limit, held (seats held now), token (the last fencing token)
--   KEYS[2] holders  zset:  lease id -> expiry (ms, server clock)
--   KEYS[3] seats    hash:  lease id -> "n token"
--   KEYS[4] line     list:  waiting ids, first come first
--   KEYS[5] waiters  hash:  waiting id -> "n ttl_ms" (seats asked, lease time once seated)
--   KEYS[6] alive    zset:  waiting id -> when its place lapses unless it asks again (ms)
-- Two keys more are named after a caller's id, in the same slot (ARGV[9] .. "g:" .. id ..
-- ARGV[10], and "r:" in place of "g:"):
--   grant     list:   a seated waiter finds its token there ("refused" if a smaller limit can
--                     never seat it), read with BLPOP by the waiter
--   released  string: a lease released, remembered RELEASED_MS, so that a release the client
--                     sends again (its reply lost, the call retried) is told it was released,
--                     not that it lapsed
--
-- ARGV: op, id, n, limit, set_limit (1: write limit; 0: only if none is stored), forget
-- (1: the state hash goes too when nobody holds or waits), ttl_ms, join (1: wait in line),
-- what comes before "g:" or "r:" in an id's keys, and what after the id.
--
-- Every call first forgets what lapsed by the server's clock (a holder past its expiry, a
-- waiter that stopped asking), seats the line, then does its op. Replies (integers):
--   acquire  {1, token, held, limit} seated; {0, wake_ms, held, limit} not (in line if join);
--            {-1, 0, held, limit} n is more than the limit
--   release  {1 (released now, or by this call's earlier sending), or 0 (not held: lapsed, or
--            released over RELEASED_MS ago), 0, held, limit}
--   leave    {0, 0, held, limit}: out of the line, and its seats given back if it was seated
--   extend   {1 or 0 (not held), held, limit}
--   look     {waiting, 0, held, limit}; resize: the same, after the new limit
-- wake_ms is how long until something lapses that nobody will announce (-1: nothing will).

local state, holders, seats, line, waiters, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local op, id = ARGV[1], ARGV[2]
local n, asked_limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local set_limit, forget = ARGV[5] == "1", ARGV[6] == "1"
local ttl, join = tonumber(ARGV[7]), ARGV[8] == "1"
local id_before, id_after = ARGV[9], ARGV[10]

-- How long a released lease is remembered, in milliseconds: a minute, longer than a client
-- takes to send a call again (as the rate limiters keep a call's record).
local RELEASED_MS = 60000

local function grant_key(who)
  return id_before .. "g:" .. who .. id_after
end

local function released_key(who)
  return id_before .. "r:" .. who .. id_after
end

local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

if set_limit or redis.call("HEXISTS", state, "limit") == 0 then
  redis.call("HSET", state, "limit", asked_limit)
end
local limit = tonumber(redis.call("HGET", state, "limit"))
local held = tonumber(redis.call("HGET", state, "held") or "0")
-- Holders' keys expire together, after the last holder's expiry: no holder, nothing held.
if redis.call("EXISTS", holders) == 0 then
  held = 0
end

-- A fencing token: one more than the last, and never below the server's clock in microseconds,
-- so tokens keep increasing after the state is forgotten (or lost in a failover).
local function next_token()
  local last = tonumber(redis.call("HGET", state, "token") or "0")
  local token = math.max(last + 1, now_us)
  redis.call("HSET", state, "token", string.format("%d", token))
  return token
end

local function seat(who, count, lease_ttl)
  local token = next_token()
  held = held + count
  redis.call("ZADD", holders, now + lease_ttl, who)
  redis.call("HSET", seats, who, count .. " " .. string.format("%d", token))
  return token
end

local function unseat(who)
  local entry = redis.call("HGET", seats, who)
  if not entry then
    return false
  end
  held = held - tonumber(string.match(entry, "^(%d+)"))
  redis.call("HDEL", seats, who)
  redis.call("ZREM", holders, who)
  return true
end

local function out_of_line(who)
  redis.call("LREM", line, 1, who)
  redis.call("HDEL", waiters, who)
  redis.call("ZREM", alive, who)
end

local function tell(who, what, keep_ms)
  local key = grant_key(who)
  redis.call("RPUSH", key, what)
  redis.call("PEXPIRE", key, keep_ms)
end

-- Seat the line's head while it fits; nobody overtakes it. One asking for more seats than the
-- limit could ever give is told so and leaves.
local function seat_the_line()
  while true do
    local head = redis.call("LINDEX", line, 0)
    if not head then
      return
    end
    local entry = redis.call("HGET", waiters, head)
    if not entry then
      redis.call("LPOP", line)
    else
      local count, lease_ttl = string.match(entry, "^(%d+) (%d+)$")
      count, lease_ttl = tonumber(count), tonumber(lease_ttl)
      if count > limit then
        out_of_line(head)
        tell(head, "refused", lease_ttl)
      elseif held + count <= limit then
        out_of_line(head)
        tell(head, string.format("%d", seat(head, count, lease_ttl)), lease_ttl)
      else
        return
      end
    end
  end
end

-- What lapsed: holders past their expiry, waiters that stopped asking.
for _, who in ipairs(redis.call("ZRANGEBYSCORE", holders, "-inf", now)) do
  unseat(who)
end
for _, who in ipairs(redis.call("ZRANGEBYSCORE", alive, "-inf", now)) do
  out_of_line(who)
end
seat_the_line()

-- How long until the next lapse nobody announces: the first holder's expiry, or another
-- waiter's place.
local function wake_ms()
  local soonest = -1
  local first = redis.call("ZRANGE", holders, 0, 0, "WITHSCORES")
  if first[2] then
    soonest = tonumber(first[2])
  end
  local others = redis.call("ZRANGE", alive, 0, 1, "WITHSCORES")
  for i = 1, #others, 2 do
    if others[i] ~= id then
      local at = tonumber(others[i + 1])
      if soonest < 0 or at < soonest then
        soonest = at
      end
      break
    end
  end
  if soonest < 0 then
    return -1
  end
  return math.max(soonest - now, 0) + 1
end

local reply
if op == "acquire" then
  local mine = redis.call("HGET", seats, id)
  if mine then -- seated already: a grant, or this call sent twice
    reply = {1, tonumber(string.match(mine, " (%d+)$")), held, limit}
  elseif redis.call("HEXISTS", waiters, id) == 1 then -- in line: its place kept a while more
    redis.call("ZADD", alive, now + ttl, id)
    reply = {0, wake_ms(), held, limit}
  elseif n > limit then
    reply = {-1, 0, held, limit}
  elseif redis.call("LLEN", line) == 0 and held + n <= limit then
    reply = {1, seat(id, n, ttl), held, limit}
  else
    if join then
      redis.call("RPUSH", line, id)
      redis.call("HSET", waiters, id, n .. " " .. ttl)
      redis.call("ZADD", alive, now + ttl, id)
    end
    reply = {0, wake_ms(), held, limit}
  end
elseif op == "release" then
  local was = unseat(id)
  if was then
    redis.call("SET", released_key(id), "1", "PX", RELEASED_MS)
  else -- a sending of a release that ran already finds it remembered
    was = redis.call("EXISTS", released_key(id)) == 1
  end
  seat_the_line()
  reply = {was and 1 or 0, 0, held, limit}
elseif op == "leave" then
  out_of_line(id)
  unseat(id)
  redis.call("DEL", grant_key(id))
  seat_the_line()
  reply = {0, 0, held, limit}
elseif op == "extend" then
  local was = redis.call("ZSCORE", holders, id)
  if was then
    redis.call("ZADD", holders, now + ttl, id)
  end
  reply = {was and 1 or 0, 0, held, limit}
elseif op == "look" or op == "resize" then
  reply = {redis.call("LLEN", line), 0, held, limit}
else
  return redis.error_reply("unknown op " .. tostring(op))
end

-- Keep the state only as long as something in it can matter: every key expires after the last
-- holder's expiry and the last waiter's place; the limit and the tokens stay unless forget.
redis.call("HSET", state, "held", held)
local last = 0
for _, zset in ipairs({holders, alive}) do
  local tail = redis.call("ZRANGE", zset, -1, -1, "WITHSCORES")
  if tail[2] and tonumber(tail[2]) > last then
    last = tonumber(tail[2])
  end
end
if last == 0 then
  redis.call("DEL", holders, seats, line, waiters, alive)
  if forget then
    redis.call("DEL", state)
  end
else
  local keep = math.max(last - now, 1) + 1000
  for _, key in ipairs({holders, seats, line, waiters, alive}) do
    redis.call("PEXPIRE", key, keep)
  end
  if forget then
    redis.call("PEXPIRE", state, keep)
  end
end
return reply
