#!lua
-- The line above declares what the script does (Redis 7.0 and Valkey 7.2 read it): with no
-- flags, it writes; it is refused before it runs on a server out of memory and on a replica
-- that cannot be written; it reads no stale data; and its keys share one hash slot (no
-- allow-cross-slot-keys). Its writes replicate as effects, the only way from 7.0 on.
--
-- The exact settlement of src/core/exact, run by the server: one call decides one request on
-- each key in KEYS (a batch shares one hash slot), atomically, on the server's clock.
--
-- Every key is one hash: field "t" is its settlement point in whole microseconds, fields "1",
-- "2", ... the balances of its bands in units, field "w" the settlement point the last
-- reservation or give-back left (see below). A band of p/q tokens per second counts in units
-- of 1/(q * 10^6) token, so one microsecond brings exactly p units: accrual is one integer
-- product and no remainder ever arises. Lua's numbers are doubles, which hold every integer up
-- to 2^53 exactly; the client refuses any band whose capacity (burst * q * 10^6) plus p exceeds
-- 2^53, and every number below stays under that bound:
--
--   * a balance is at most the capacity C;
--   * the elapsed time is capped at the time to full, ceil((C - balance) / p), BEFORE it is
--     multiplied, so a product is at most C - balance + p - 1, and a sum at most C + p - 1;
--   * times are microseconds of at most 2^52 either side of 0, so differences stay below 2^53;
--     a settlement point is one of those times, or a reservation's moment, which is refused
--     (TOO LATE) beyond 2^52: so a settlement point too is within 2^52 of 0, and the wait until
--     it (at most 2^53) is exact. A reservation's refill is compared with 2^52 - settled (at
--     most 2^53) before it is added, and with the caller's longest wait (at most 2^52) less the
--     time the clock is behind, never summed with it first; only a key's expiry, its
--     settlement point plus its time to full, may pass 2^53, for a band whose time to full is
--     itself beyond 2^52 microseconds (142 years), and it is then off by a microsecond at most;
--   * a give-back runs a settlement backwards: it moves back floor(total / p) microseconds for
--     a total of at most C (a quotient), and takes back * p <= total units off;
--   * a double quotient a / b of integers with 0 <= a < 2^53 never rounds across an integer,
--     so floor and ceil of it are the exact integer quotients.
--
-- Redis writes a Lua number given to redis.call digit for digit (no exponent) below 2^53, so
-- the numbers are stored as they are.
--
-- ARGV[1] is the request, as big-endian doubles (8 bytes each, exact for every integer the
-- client sends: all are below 2^53), read by one struct.unpack: parsing numbers out of text cost
-- the server more than the rest of the arithmetic.
--   op      0 take, 1 many (take, on many keys), 2 peek, 3 refund, 4 available, 5 reserve,
--           6 give back (reserve and give back on one key), 7 together (a stack: take on every
--           key or on none), 8 peek together (a stack's keys peeked, taking nothing), 9 take
--           with levels (op 0 on one key, answered with each band's level too: see the reply)
--   n       tokens; the client passes at most the largest burst + 1, which is "more than any
--           band holds" just as well
--   now     in microseconds (ignored when the next number is 1)
--   server  1: use the server's TIME; 0: use now
--   least   the least TTL in ms
--   initial the tokens a new key holds in every band, or -1: full
--   extra   (reserve and give back only) reserve: the caller's longest wait in microseconds,
--           at most 2^52, or -1: none; give back: the moment the reservation was made for, or
--           -2^52 for one made with no wait (any time no later than the give-back's own)
--
-- Together (ops 7 and 8: stacked limits, each key a limit of its own). ARGV[1] is the request
-- above for the first key (n, least and initial its own), then three doubles for each further
-- key: its n, least TTL and initial tokens. ARGV[2], ARGV[3], ... are the keys' configurations,
-- one per key in order, and the call's record comes after them (ARGV[#KEYS + 2]; with one key,
-- ARGV[3] as for every other op). The keys are distinct (the client sums the n of a key named
-- twice). Op 7 takes n on every key if every key allows it, and on none otherwise: then every key
-- is read as a peek would read it (ALLOWED with what remains, DENIED with its wait, NEVER), and
-- nothing is written but what a peek writes (a new key's anchor). The general path decides it in
-- two passes over the keys, the first only reading (see below); on one key of one band the fast
-- path decides it as a take that is read as a peek when it is refused. A stack that took, sent
-- again (its record is there), takes nothing again and answers ALLOWED on every key, as it did.
-- Op 8 is op 7 refused: every key read as a peek.
--
-- Waiting (src/core/exact/limiter.rs, Balances::reserve and give_back). A reservation takes n
-- at once if every band holds it; otherwise at the first moment every band does, if that is at
-- most the longest wait away: every band is settled forward to that moment and n taken there,
-- so the key's settlement point lies ahead of the clock, and whoever asks next is answered from
-- it and queues behind (a take, too, is DENIED until then). A waiter that gives up hands back n
-- with the moment it was given: if the key is settled no later than that moment (or than now,
-- once it has passed), nobody queues behind it, and the settlement is run backwards, each band
-- losing p units a microsecond down to an empty band or to now, as if the reservation had never
-- been made; otherwise waiters behind it hold turns booked from its end, and its tokens are
-- forfeited, so that nobody is let in before a turn already promised. The bands of one key
-- share one settlement point here, where the in-process limiter keeps one per band: after a
-- give-back they stand at the latest band's point, the others settled forward to it, and the
-- bands at that point keep no part of a microsecond's accrual, so nothing is taken before it.
-- A refund while a reservation holds the settlement point ahead (field "w" equals it) is
-- forfeited as well, as in-process: its tokens could be taken at once, on top of the turns.
--
-- ARGV[2] is the limit's configuration in its canonical encoding (src/core/exact/config.rs):
-- a version byte (1), the number of fields per band (5), the number of bands (2 bytes), then
-- for each band five big-endian 64-bit integers: tokens per second p and q, the burst, and the
-- period as written (not needed here). The script refuses a version or a field count it does
-- not know, so a configuration is never misread.
--
-- ARGV[3] is the name of the call's record (a stack's comes after its configurations): a key
-- of the call's own, which the client names after a random token, with the prefix and hash tag
-- of the call's first key, so in its slot (see _keys.py). A client may send one call more than
-- once (redis-py re-sends a command that timed out, and the first sending still reaches the
-- server, and runs). So a call that changes a balance (a take that took, a batch of which a
-- request took, a refund, a reservation that took, a give-back, a stack that took) writes its
-- record, kept REMEMBERED_MS, and a sending that finds its record changes nothing again: a batch
-- answers with the record itself (its reply, as it was), a take or a stack ALLOWED on every key,
-- as it did; a refund or a give-back gives nothing more; and a reservation takes nothing more: it
-- is answered with the wait until the key's settlement point (its own moment or a later one,
-- never earlier) and no moment, so the client cannot give it back and forfeits it if it gives
-- up. However many calls run in between, a sending that runs within REMEMBERED_MS of the first
-- changes nothing; one later is a call of its own. A read (peek, available, peek together)
-- neither reads nor writes a record.
--
-- The record is not among KEYS: a cluster refuses a call whose keys it holds only in part while
-- their slot is being migrated (TRYAGAIN, until the migration ends), and a record never exists
-- before its call. So the script reads and writes it by name, in the slot of KEYS, where a
-- cluster lets it. Where the server refuses (on the node a slot is being migrated from, "non
-- local key"), the call is decided without a record, as a call with none is.

-- Reply. A reply costs the client more to read than most of this script costs the server (redis-py
-- reads a reply in Python, line by line), so it is as small as the answer allows:
--
--   * op "many" (a batch, which takes): one string of outcome digits, one per key in order
--     (0 allowed, 1 denied, 2 never);
--   * otherwise (one key): ALLOWED and NEVER as one integer, 4 * remaining + outcome (remaining
--     is at most a burst, far below 2^51); DENIED as {1, remaining, behind, wait}: the
--     microseconds the clock is behind the settlement point, and the longest band's refill
--     wait in microseconds (the client adds the two: their sum could pass 2^53 when a caller's
--     explicit time is far behind);
--   * op "reserve": taken at once as ALLOWED; NEVER as above; taken later as {0, remaining,
--     wait, moment} (the wait until the moment, in microseconds: at most 2^53, see above), or
--     {0, remaining, wait} when a re-sent reservation answers; TOO LATE as DENIED (nothing
--     taken, and the wait it would have had);
--   * ops "together" and "peek together": a list of one-key replies, one per key in order;
--   * op "take with levels": {answer, behind, tokens 1, next 1, tokens 2, next 2, ...}: the
--     answer of op "take", the microseconds the clock is behind the key's settlement point, and
--     each band's whole tokens after the call and the microseconds from that settlement point
--     until it holds one more (src/core/exact/limiter.rs, Band::level; the client adds behind,
--     as for a wait). It is op "take" in every other respect: the same settlement, the same
--     writes, the same replays; it costs the usual call two comparisons.

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
-- The latest settlement point a reservation may book: 2^52 microseconds (as far from 0 as an
-- explicit time may be).
local LAST = 4503599627370496

-- This call's record (see ARGV[3]); nil for a call with none, or once the server refused it.
local record = ARGV[3]
-- How long a call's record is kept, in milliseconds: a minute, longer than a client re-sends
-- (its retries times its socket timeout and backoff) and a server stalls.
local REMEMBERED_MS = 60000

-- A band's level: its whole tokens, and the microseconds until it holds one more (the part of a
-- token it lacks, unit - (units - whole * unit), at most a token's units: exact, see above).
local function level(units, unit, rate)
    local whole = floor(units / unit)
    return whole, ceil((unit - (units - whole * unit)) / rate)
end
-- What this call's record holds if the call ran before (a sending again), else false.
local function recorded()
    if not record then
        return false
    end
    local value = redis.pcall('GET', record)
    if type(value) == 'table' then -- refused (see ARGV[3]): decided without a record
        record = nil
        return false
    end
    return value
end

-- This call changed a balance: its record, holding `value` (a batch's reply, else '1').
local function remember(value)
    if record then
        redis.pcall('SET', record, value, 'PX', REMEMBERED_MS)
    end
end

local op, n, now, server, least_ttl_ms, initial_tokens = struct.unpack('>dddddd', ARGV[1])
-- Take with levels: a take, answered with each band's level as well (see the reply).
local levels = op == 9
if levels then
    op = 0
end
-- reserve: the caller's max wait in microseconds (-1: none); give back: the reservation's moment.
local extra = #ARGV[1] > 48 and struct.unpack('>d', ARGV[1], 49) or -1
-- Together (a stack): its record follows its keys' configurations.
local stack = op == 7 or op == 8
if stack then
    if #ARGV[1] ~= 24 + 24 * #KEYS or #ARGV < #KEYS + 1 then
        return redis.error_reply('ERR qos: a stack whose arguments do not match its keys')
    end
    record = ARGV[#KEYS + 2]
end
-- Whether this call ran before: its record's value, else false (a read has none). A batch sent
-- again answers as it did: its record is its reply.
local ran = (op <= 1 or op == 3 or op == 5 or op == 6 or op == 7) and recorded()
if ran and op == 1 then
    return ran
end
local config = ARGV[2]
local version, per_band, count = struct.unpack('>BBI2', config)
if version ~= 1 or per_band ~= 5 or #config ~= 4 + 40 * count then
    return redis.error_reply('ERR qos: a configuration of another version or shape')
end

-- The usual call, one band on one key, settled in plain locals: the general path below builds
-- a dozen small tables, which cost a decision about 3 us (10% of a round trip on loopback).
-- It is the general path's arithmetic, line for line, with each table cell a local; the
-- differential tests run both (every single-band trace here, batches and several bands there).
if count == 1 and #KEYS == 1 then
    local rate, q, burst = struct.unpack('>I8I8I8', config, 5)
    local unit = q * 1000000
    local initial = initial_tokens < 0 and burst * unit or initial_tokens * unit
    local key = KEYS[1]
    if server == 1 then
        local time = redis.call('TIME')
        now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    local capacity = burst * unit
    local stored = redis.call('HMGET', key, 't', '1', 'w')
    local exists = stored[1] ~= false
    local settled, balance = now, initial
    if exists then
        settled = tonumber(stored[1])
        balance = stored[2] and min(tonumber(stored[2]), capacity) or capacity
    end
    if now > settled then
        local to_full = ceil((capacity - balance) / rate)
        balance = min(balance + min(now - settled, to_full) * rate, capacity)
        settled = now
    end
    local behind = settled > now and settled - now or 0

    local outcome, wait, changed, at = 0, 0, false, nil
    if ran then
        -- Sent before and run: what it took stays taken, once (a take or a stack answers ALLOWED,
        -- a refund is given once). A reservation's moment is not recorded: it is answered with
        -- the wait until the key's settlement point (its own moment, or a later one), and no
        -- moment (see reply).
        if op == 5 then
            wait = behind
        end
    elseif op <= 2 or stack then -- take, many, peek, or together on one key
        if n > burst then
            outcome = 2
        else
            local deficit = n * unit - balance
            if deficit > 0 then
                outcome = 1
                wait = ceil(deficit / rate)
            elseif op <= 1 or op == 7 then
                balance = balance - n * unit
                changed = true
            end
        end
    elseif op == 3 then
        -- A refund while a reservation holds the settlement point ahead is forfeited.
        if not (behind > 0 and tonumber(stored[3]) == settled) then
            balance = n >= burst and capacity or min(balance + n * unit, capacity)
        end
        changed = true
    elseif op == 5 then -- reserve
        if n > burst then
            outcome = 2
        else
            local deficit = n * unit - balance
            if deficit <= 0 then
                balance = balance - n * unit
                changed = true
            else
                local refill = ceil(deficit / rate)
                if refill > LAST - settled or (extra >= 0 and (behind > extra or refill > extra - behind)) then
                    outcome = 1
                    wait = refill
                else
                    balance = min(balance + refill * rate, capacity) - n * unit
                    settled = settled + refill
                    at = settled
                    behind = settled - now
                    wait = behind
                    changed = true
                end
            end
        end
    elseif op == 6 then -- give back
        if not (settled > max(extra, now)) then
            local total = min(balance + n * unit, capacity)
            if settled <= now then
                balance = total
            else
                local ahead = settled - now
                local back = floor(total / rate)
                if back < ahead then
                    settled = settled - back
                    balance = total - back * rate
                else
                    settled = now
                    balance = total - ahead * rate
                end
                behind = settled > now and settled - now or 0
            end
        end
        changed = true
    end
    local remaining = floor(balance / unit)

    -- A read stores nothing but a new key's anchor; a stack refused is read as a peek.
    local reads = op == 2 or op == 4 or op == 8 or (op == 7 and outcome ~= 0)
    if not reads or (not exists and (initial ~= capacity or least_ttl_ms > 0)) then
        local to_full = ceil((capacity - balance) / rate)
        if max(ceil((behind + to_full) / 1000), least_ttl_ms) > 0 then
            if changed and (op == 5 or op == 6) then
                -- Field "w": the settlement point a reservation (or a give-back) left.
                redis.call('HSET', key, 't', settled, '1', balance, 'w', settled)
            else
                redis.call('HSET', key, 't', settled, '1', balance)
            end
            if server == 1 then
                local full_ms = ceil((now + behind + to_full) / 1000)
                redis.call('PEXPIREAT', key, max(full_ms, ceil(now / 1000) + least_ttl_ms))
            else
                redis.call('PEXPIRE', key, max(ceil((behind + to_full) / 1000), least_ttl_ms))
            end
        elseif exists then
            redis.call('DEL', key)
        end
    end
    if changed then
        remember(op == 1 and tostring(outcome) or '1')
    end

    if levels then
        local tokens, after = level(balance, unit, rate)
        local answer = outcome == 1 and {1, remaining, behind, wait} or 4 * remaining + outcome
        return {answer, behind, tokens, after}
    elseif op == 1 then
        return tostring(outcome)
    elseif outcome == 1 then
        if stack then
            return {{1, remaining, behind, wait}}
        end
        return {1, remaining, behind, wait}
    elseif op == 5 and wait > 0 then
        if at then
            return {0, remaining, wait, at}
        end
        return {0, remaining, wait}
    elseif stack then
        return {4 * remaining + outcome}
    end
    return 4 * remaining + outcome
end

local server_clock = server == 1
if server_clock then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local many = op == 1
local takes = many or op == 0
local decides = takes or op == 2 or stack
local waits = op == 5 or op == 6 -- reserve, give back (one key)
local writes = takes or op == 3 or waits

-- The configuration the keys are settled in: the call's, for every key; a stack's keys each
-- have their own (and their own initial tokens), read again for each key.
local rate, unit, burst, capacity, initial, fields, new_is_full
local function configure(encoding, initial_tokens)
    if type(encoding) ~= 'string' or #encoding < 4 then
        return false
    end
    local version, per_band, bands = struct.unpack('>BBI2', encoding)
    if version ~= 1 or per_band ~= 5 or #encoding ~= 4 + 40 * bands then
        return false
    end
    count = bands
    rate, unit, burst, capacity, initial = {}, {}, {}, {}, {}
    fields = {'t'}
    new_is_full = true
    for i = 1, count do
        local p, q, tokens = struct.unpack('>I8I8I8', encoding, 5 + 40 * (i - 1))
        rate[i] = p
        unit[i] = q * 1000000
        burst[i] = tokens
        capacity[i] = tokens * unit[i]
        initial[i] = initial_tokens < 0 and capacity[i] or initial_tokens * unit[i]
        new_is_full = new_is_full and initial[i] == capacity[i]
        fields[i + 1] = tostring(i)
    end
    fields[count + 2] = 'w'
    return true
end
configure(config, initial_tokens)

-- A stack's keys: each one's n, least TTL and initial tokens (the first key's are the request's).
local part_n, part_least, part_initial = {n}, {least_ttl_ms}, {initial_tokens}
if stack then
    for k = 2, #KEYS do
        part_n[k], part_least[k], part_initial[k] = struct.unpack('>ddd', ARGV[1], 24 * k + 1)
    end
end

-- Per key of this call (a batch may name a key twice): how many of the call's requests took
-- there when it ran before (a replay; nil if it did not), and how many take there now.
local replay_left, taken_here
-- Whether this call changed a balance: then its record is written before it answers.
local changes = false

local reply = {}
local balance = {}
-- Every op but "together" is one pass over its keys. "Together" (op 7) is two: the first reads
-- and decides every key as a peek, and writes and answers nothing; the second takes on every
-- key if the first found every one allowed (or if the call ran before: its record says it
-- took), else reads every key again as a peek. "Peek together" (op 8) is the
-- second pass of a refused stack alone. Each pass settles and decides each key below, the
-- same code as every other op. The loop runs over the steps of both passes: step k of the
-- first is key k, step #KEYS + k of the second is key k again.
local refused, replay = op == 8, ran ~= false
for step = op == 7 and 1 or #KEYS + 1, 2 * #KEYS do
    local dry = step <= #KEYS
    local k = dry and step or step - #KEYS
    if k == 1 then -- a pass begins
        if stack then
            takes = not dry and (replay or not refused)
            writes = takes
        end
        replay_left, taken_here = {}, {}
    end
    local key = KEYS[k]
    if stack then
        if taken_here[key] ~= nil then
            return redis.error_reply('ERR qos: a stack names a key twice')
        end
        n, least_ttl_ms = part_n[k], part_least[k]
        if not configure(ARGV[k + 1], part_initial[k]) then
            return redis.error_reply('ERR qos: a configuration of another version or shape')
        end
    end
    local stored = redis.call('HMGET', key, unpack(fields))
    local exists = stored[1] ~= false
    if taken_here[key] == nil then
        if (not stack and writes and ran) or (stack and replay and takes) then
            -- Sent before and run: it took (a stack, on every key), and takes nothing again. (A
            -- batch, the one op here of several requests, answered from its record above.)
            replay_left[key] = 1
        end
        taken_here[key] = 0
    end
    local settled
    if exists then
        settled = tonumber(stored[1])
        for i = 1, count do
            -- A band missing, or holding more than its burst (a key last used with other
            -- bands), reads as full: never more than the configuration allows.
            local units = stored[i + 1]
            balance[i] = units and min(tonumber(units), capacity[i]) or capacity[i]
        end
    else
        -- A new key: `initial` units, anchored now (nothing accrues before its first call).
        settled = now
        for i = 1, count do
            balance[i] = initial[i]
        end
    end

    -- Settle: accrue for the time since the settlement point; a clock that went backwards
    -- (now <= settled) adds nothing and leaves the settlement point where it is.
    if now > settled then
        local elapsed = now - settled
        for i = 1, count do
            local to_full = ceil((capacity[i] - balance[i]) / rate[i])
            balance[i] = min(balance[i] + min(elapsed, to_full) * rate[i], capacity[i])
        end
        settled = now
    end
    local behind = settled > now and settled - now or 0

    -- Decide: NEVER if n exceeds a band's burst, else ALLOWED if every band holds n, else
    -- DENIED with the longest wait.
    local outcome, wait, changed, at = 0, 0, false, nil
    local replayed = replay_left[key]
    if replayed then
        -- Sent before and run: its first `replayed` requests here took, the rest did not; none
        -- takes again, and a refund gives nothing again. A reservation is answered with the
        -- wait until the key's settlement point, and no moment (see the fast path).
        if op == 5 then
            wait = behind
        end
        if takes then
            outcome = replayed > 0 and 0 or 1
            replay_left[key] = max(replayed - 1, 0)
            if outcome == 1 then
                for i = 1, count do
                    local deficit = max(n * unit[i] - balance[i], 1)
                    wait = max(wait, ceil(deficit / rate[i]))
                end
            end
        end
    elseif decides then
        for i = 1, count do
            if n > burst[i] then
                outcome = 2
            elseif outcome ~= 2 then
                local deficit = n * unit[i] - balance[i]
                if deficit > 0 then
                    outcome = 1
                    wait = max(wait, ceil(deficit / rate[i]))
                end
            end
        end
        if outcome == 2 then
            wait = 0
        elseif outcome == 0 and takes then
            for i = 1, count do
                balance[i] = balance[i] - n * unit[i]
            end
            taken_here[key] = taken_here[key] + 1
        end
    elseif op == 3 then
        taken_here[key] = 1
        -- A refund while a reservation holds the settlement point ahead is forfeited.
        if not (behind > 0 and tonumber(stored[count + 2]) == settled) then
            for i = 1, count do
                if n >= burst[i] then
                    balance[i] = capacity[i]
                else
                    balance[i] = min(balance[i] + n * unit[i], capacity[i])
                end
            end
        end
    elseif op == 5 then
        -- Reserve: take n now if every band holds it, else at the first moment every band
        -- does, if that is within the caller's max wait: every band settled forward to it.
        local refill = 0
        for i = 1, count do
            if n > burst[i] then
                outcome = 2
            elseif outcome ~= 2 then
                local deficit = n * unit[i] - balance[i]
                if deficit > 0 then
                    refill = max(refill, ceil(deficit / rate[i]))
                end
            end
        end
        if outcome ~= 2 then
            if refill > 0 and (refill > LAST - settled
                    or (extra >= 0 and (behind > extra or refill > extra - behind))) then
                outcome = 1
                wait = refill
            else
                for i = 1, count do
                    local to_full = ceil((capacity[i] - balance[i]) / rate[i])
                    balance[i] = min(balance[i] + min(refill, to_full) * rate[i], capacity[i])
                        - n * unit[i]
                end
                if refill > 0 then
                    settled = settled + refill
                    at = settled
                    behind = settled - now
                    wait = behind
                end
                taken_here[key] = 1
                changed = true
            end
        end
    elseif op == 6 then
        -- Give back n reserved for `extra`: undone on every band if nobody queues behind it
        -- (the key is settled no later than max(extra, now)), else forfeited.
        taken_here[key] = 1
        changed = true
        if not (settled > max(extra, now)) then
            local at_band = {}
            local latest = now
            for i = 1, count do
                local total = min(balance[i] + n * unit[i], capacity[i])
                at_band[i] = now
                if settled <= now then
                    balance[i] = total
                else
                    -- Run the settlement backwards from `settled`: the band loses rate units a
                    -- microsecond, down to an empty band or to now.
                    local ahead = settled - now
                    local back = floor(total / rate[i])
                    if back < ahead then
                        at_band[i] = settled - back
                        balance[i] = total - back * rate[i]
                    else
                        balance[i] = total - ahead * rate[i]
                    end
                end
                latest = max(latest, at_band[i])
            end
            -- One settlement point for the key: the latest band's. A band undone to an earlier
            -- point is settled forward to it (what it accrues meanwhile); the bands already
            -- there keep no part of a microsecond's accrual, so nothing they hold can be taken
            -- before that point.
            local spread = false
            for i = 1, count do
                if at_band[i] < latest then
                    spread = true
                    local to_full = ceil((capacity[i] - balance[i]) / rate[i])
                    balance[i] = min(balance[i] + min(latest - at_band[i], to_full) * rate[i],
                        capacity[i])
                end
            end
            if spread then
                for i = 1, count do
                    if at_band[i] == latest then
                        balance[i] = 0
                    end
                end
            end
            settled = latest
            behind = settled > now and settled - now or 0
        end
    end

    local remaining = floor(balance[1] / unit[1])
    for i = 2, count do
        remaining = min(remaining, floor(balance[i] / unit[i]))
    end

    -- Store what changed, with a TTL of exactly the time until every band is full again: then
    -- the key is indistinguishable from a new one, and only then may it disappear. A read (peek,
    -- available) stores nothing, except that it anchors a new key that does not start full, or
    -- any new key when keys are kept at least least_ttl_ms (then every key touched is
    -- remembered, anchor included, exactly as an in-process limiter remembers it).
    if writes or (not dry and not exists and (not new_is_full or least_ttl_ms > 0)) then
        local to_full = 0
        for i = 1, count do
            to_full = max(to_full, ceil((capacity[i] - balance[i]) / rate[i]))
        end
        local ttl_ms = max(ceil((behind + to_full) / 1000), least_ttl_ms)
        if ttl_ms > 0 then
            local values = {'t', settled}
            for i = 1, count do
                values[2 * i + 1] = fields[i + 1]
                values[2 * i + 2] = balance[i]
            end
            if changed and waits then
                -- Field "w": the settlement point a reservation (or a give-back) left.
                values[#values + 1] = 'w'
                values[#values + 1] = settled
            end
            redis.call('HSET', key, unpack(values))
            if server_clock then
                -- On the server's clock the moment of "full" is known, and the key's expiry is
                -- set to it: a TTL counted from when PEXPIRE runs would drift by however long
                -- the script has already run (a batch of many keys takes milliseconds).
                local full_ms = ceil((now + behind + to_full) / 1000)
                redis.call('PEXPIREAT', key, max(full_ms, ceil(now / 1000) + least_ttl_ms))
            else
                redis.call('PEXPIRE', key, ttl_ms)
            end
        elseif exists then
            redis.call('DEL', key)
        end
    end
    changes = changes or taken_here[key] > 0

    if dry then
        refused = refused or outcome ~= 0
    elseif many then
        reply[k] = outcome
    else
        local answer
        if outcome == 1 then
            answer = {1, remaining, behind, wait}
        elseif op == 5 and wait > 0 then
            answer = at and {0, remaining, wait, at} or {0, remaining, wait}
        else
            answer = 4 * remaining + outcome
        end
        if changes and not stack then
            remember('1')
        end
        if levels then
            local leveled = {answer, behind}
            for i = 1, count do
                leveled[2 * i + 1], leveled[2 * i + 2] = level(balance[i], unit[i], rate[i])
            end
            return leveled
        elseif not stack then
            return answer
        end
        reply[k] = answer
    end
end
if stack then
    if changes then
        remember('1')
    end
    return reply
end
reply = table.concat(reply)
if changes then
    remember(reply)
end
return reply
