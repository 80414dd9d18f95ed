#!lua
-- The line above declares what the script does (Redis 7.0 and Valkey 7.2 read it): with no
-- flags, it writes; it is refused before it runs on a server out of memory and on a replica
-- that cannot be written; it reads no stale data; and its keys share one hash slot (no
-- allow-cross-slot-keys). Its writes replicate as effects, the only way from 7.0 on.
--
-- The exact settlement of src/core/exact, run by the server: one call decides one request on
-- each key in KEYS (a batch shares one hash slot), atomically, on the server's clock. It is the
-- core's arithmetic on a clock of whole microseconds; tests/vectors/settle.json holds cases
-- worked out by the core, which this script and `cargo test` both replay.
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
--           with levels (op 0 on one key, answered with each band's level too: see the reply),
--           10 settle (a cost known after: see Settlement below)
--   n       tokens; the client passes at most the largest burst + 1, which is "more than any
--           band holds" just as well; for op 10, the actual cost less the reserved one, which
--           may be negative (then the op is a refund of -n) and is at most 2^53 either way
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
-- nothing is written but what a peek writes (a new key's anchor). It is decided in two passes
-- over the keys, the first only reading (see the loop below). A stack that took, sent again (its
-- record is there), takes nothing again and answers ALLOWED on every key, as it did. Op 8 is op 7
-- refused: every key read as a peek.
--
-- Waiting (src/core/exact/limiter/balances.rs, reserve and give_back). A reservation takes n
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
-- Settlement (src/core/exact/limiter/balances.rs, settle_cost). A cost taken as reserved and
-- now known to be actual: less is a refund of the difference (op 3, with its rules), more is
-- taken from every band even beyond its balance. A band's units cannot go below zero: what it
-- lacks is a debt, held as time. Its settlement point moves ahead by the microseconds the
-- missing units take to accrue, rounded up, and it keeps what the rounding over-counts, as the
-- core does; the key's one settlement point is then the latest band's, as after a give-back.
-- Whoever asks next waits until the debt is repaid, exactly, and field "w" marks the point as
-- a reservation's: a refund meanwhile is forfeited, as in-process. A debt beyond the exact
-- range (units of 2^53 or more, or a point beyond LAST) holds the key at LAST, empty.
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
--
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
--     writes, the same replays.

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max

-- The encoding, each number named once ----------------------------------------------------------

-- Microseconds in a second: the clock's grain, and the scale of a unit, 1/(q * 10^6) token.
local MICROS_PER_SECOND = 1000000
-- Microseconds in a millisecond, the grain of a key's expiry.
local MICROS_PER_MS = 1000
-- The latest settlement point a reservation may book: 2^52 microseconds (as far from 0 as an
-- explicit time may be).
local LAST = 4503599627370496
-- The configuration (ARGV[2]): a header of a version byte, a field count byte and a two-byte
-- band count, then each band's fields, 64-bit integers. Only this version and shape are read.
local CONFIG_VERSION, FIELDS_PER_BAND = 1, 5
local CONFIG_HEADER_BYTES, BAND_BYTES = 4, 8 * FIELDS_PER_BAND
-- The request (ARGV[1]): six doubles, then a reservation's or give-back's one more; a stack's
-- further keys three doubles each.
local REQUEST_BYTES, PART_BYTES = 6 * 8, 3 * 8
-- A key's hash: its settlement point, and the point the last reservation or give-back left.
-- The bands' balances are the fields 1, 2, ..., written as numbers.
local SETTLED, BOOKED = 't', 'w'
-- The ops (see ARGV[1]).
local TAKE, MANY, PEEK, REFUND, AVAILABLE = 0, 1, 2, 3, 4
local RESERVE, GIVE_BACK, TOGETHER, PEEK_TOGETHER, TAKE_WITH_LEVELS = 5, 6, 7, 8, 9
local SETTLE = 10
-- The integers a double holds exactly: every number below stays under it (see above).
local EXACT = 9007199254740992
-- The outcomes, and how many an integer reply makes room for (4 * remaining + outcome).
local ALLOWED, DENIED, NEVER = 0, 1, 2
local OUTCOMES = 4
-- How long a call's record is kept, in milliseconds: a minute, longer than a client re-sends
-- (its retries times its socket timeout and backoff) and a server stalls.
local REMEMBERED_MS = 60000

-- The call's record ------------------------------------------------------------------------------

-- This call's record (see ARGV[3]); nil for a call with none, or once the server refused it.
local record = ARGV[3]

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

-- The bands ------------------------------------------------------------------------------------
--
-- One key's configuration, read into one array per number (index i is band i), and the
-- balances it is settled in. A call reads its configuration once, a stack each key's own (see
-- the loop below). Only four functions are defined here: each call runs the script anew and
-- builds every closure again, which costs the usual one-band call more than its arithmetic.

local count, rate, unit, burst, capacity, fields
local balance = {}

-- The microseconds band i takes to fill up from its balance.
local function time_to_full(i)
    return ceil((capacity[i] - balance[i]) / rate[i])
end

-- Band i settled `elapsed` microseconds forward: p units a microsecond, up to its capacity. The
-- time is capped at the time to full before it is multiplied (see the bounds above).
local function accrue(i, elapsed)
    balance[i] = min(balance[i] + min(elapsed, time_to_full(i)) * rate[i], capacity[i])
end

-- The request ----------------------------------------------------------------------------------

local op, n, now, server, least_ttl_ms, initial_tokens = struct.unpack('>dddddd', ARGV[1])
-- Take with levels: a take, answered with each band's level as well (see the reply).
local levels = op == TAKE_WITH_LEVELS
if levels then
    op = TAKE
end
-- Settle for less than reserved: a refund of the difference.
if op == SETTLE and n < 0 then
    op, n = REFUND, -n
end
-- reserve: the caller's max wait in microseconds (-1: none); give back: the reservation's moment.
local extra = #ARGV[1] > REQUEST_BYTES and struct.unpack('>d', ARGV[1], REQUEST_BYTES + 1) or -1
-- Together (a stack): its record follows its keys' configurations.
local stack = op == TOGETHER or op == PEEK_TOGETHER
if stack then
    if #ARGV[1] ~= REQUEST_BYTES + PART_BYTES * (#KEYS - 1) or #ARGV < #KEYS + 1 then
        return redis.error_reply('ERR qos: a stack whose arguments do not match its keys')
    end
    record = ARGV[#KEYS + 2]
end
local many = op == MANY
local waits = op == RESERVE or op == GIVE_BACK -- one key
-- Whether this call ran before: its record's value, else false (a read has none). A batch sent
-- again answers as it did: its record is its reply.
local ran = (op <= MANY or op == REFUND or op == SETTLE or waits or op == TOGETHER) and recorded()
if ran and many then
    return ran
end
local server_clock = server == 1
if server_clock then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * MICROS_PER_SECOND + tonumber(time[2])
end

-- A stack's keys: each one's n, least TTL and initial tokens (the first key's are the request's).
local part_n, part_least, part_initial
if stack then
    part_n, part_least, part_initial = {n}, {least_ttl_ms}, {initial_tokens}
    for k = 2, #KEYS do
        part_n[k], part_least[k], part_initial[k] =
            struct.unpack('>ddd', ARGV[1], REQUEST_BYTES + PART_BYTES * (k - 2) + 1)
    end
end

-- The keys -------------------------------------------------------------------------------------
--
-- Every op but "together" is one pass over its keys. "Together" (op 7) is two: the first reads
-- and decides every key as a peek, and writes and answers nothing; the second takes on every
-- key if the first found every one allowed (or if the call ran before: its record says it
-- took), else reads every key again as a peek. "Peek together" (op 8) is the second pass of a
-- refused stack alone. The loop runs over the steps of both passes: step k of the first is key
-- k, step #KEYS + k of the second is key k again.

local takes = many or op == TAKE
local decides = takes or op == PEEK or stack
local writes = takes or op == REFUND or op == SETTLE or waits
-- Whether this call changed a balance: then its record is written before it answers.
local changes = false
local refused, seen = op == PEEK_TOGETHER, nil
local reply = (many or stack) and {} or nil
local first = op == TOGETHER and 1 or #KEYS + 1
for step = first, 2 * #KEYS do
    local dry = step <= #KEYS
    local k = dry and step or step - #KEYS
    local key = KEYS[k]
    if stack then
        if k == 1 then -- a pass begins: the second takes if the first allowed every key
            takes = not dry and (ran ~= false or not refused)
            writes = takes
            seen = {}
        end
        if seen[key] then
            return redis.error_reply('ERR qos: a stack names a key twice')
        end
        seen[key] = true
        n, least_ttl_ms, initial_tokens = part_n[k], part_least[k], part_initial[k]
    end

    -- Read the configuration: the call's, once; a stack's key's own. The header first, refused
    -- unless it is of the version and shape this script reads; then each band's p, q and burst.
    if step == first or stack then
        local encoding = ARGV[stack and k + 1 or 2]
        local version, per_band, bands = 0, 0, 0
        if type(encoding) == 'string' and #encoding >= CONFIG_HEADER_BYTES then
            version, per_band, bands = struct.unpack('>BBI2', encoding)
        end
        if version ~= CONFIG_VERSION or per_band ~= FIELDS_PER_BAND
                or #encoding ~= CONFIG_HEADER_BYTES + BAND_BYTES * bands then
            return redis.error_reply('ERR qos: a configuration of another version or shape')
        end
        count, rate, unit, burst, capacity, fields = bands, {}, {}, {}, {}, {SETTLED}
        for i = 1, count do
            local p, q, tokens = struct.unpack('>I8I8I8', encoding,
                CONFIG_HEADER_BYTES + 1 + BAND_BYTES * (i - 1))
            rate[i], unit[i], burst[i] = p, q * MICROS_PER_SECOND, tokens
            capacity[i] = tokens * unit[i]
            fields[i + 1] = i
        end
        fields[count + 2] = BOOKED
    end

    -- Read the key. A band missing, or holding more than its burst (a key last used with other
    -- bands), reads as full: never more than the configuration allows. A new key holds the
    -- initial tokens (-1: full), anchored now: nothing accrues before its first call.
    local stored = redis.call('HMGET', key, unpack(fields))
    local exists = stored[1] ~= false
    local settled = exists and tonumber(stored[1]) or now
    for i = 1, count do
        if exists then
            local units = stored[i + 1]
            balance[i] = units and min(tonumber(units), capacity[i]) or capacity[i]
        else
            balance[i] = initial_tokens < 0 and capacity[i] or initial_tokens * unit[i]
        end
    end

    -- Settle: accrue for the time since the settlement point. A clock that went backwards
    -- (now <= settled) adds nothing and leaves the settlement point where it is; the time it is
    -- behind is part of every wait.
    if now > settled then
        for i = 1, count do
            accrue(i, now - settled)
        end
        settled = now
    end
    local behind = settled - now

    -- Decide, by op. `wait` is in microseconds from the settlement point; `at` a reservation's
    -- moment; `booked` says the key's settlement point is the one a reservation or a give-back
    -- left (field "w").
    local outcome, wait, booked, at = ALLOWED, 0, false, nil
    -- A give-back or a settlement: each band's own settlement point, brought to one below.
    local at_band = nil
    if ran and (not stack or takes) then
        -- Sent before and run: what it took stays taken, once (a take or a stack answers
        -- ALLOWED, a refund or a give-back gives nothing again). A reservation is answered with
        -- the wait until the key's settlement point, its own moment or a later one, and no
        -- moment (see the reply).
        if op == RESERVE then
            wait = behind
        end
    elseif decides or op == RESERVE then
        -- When would every band hold n? NEVER if n is more than some band's burst; else after
        -- `refill` microseconds (0: now), the longest of the bands' waits.
        local refill = 0
        for i = 1, count do
            if n > burst[i] then
                outcome, refill = NEVER, 0
                break
            end
            local deficit = n * unit[i] - balance[i]
            if deficit > 0 then
                refill = max(refill, ceil(deficit / rate[i]))
            end
        end
        -- A take (or a peek) does not wait: DENIED, with the wait. A reservation books that
        -- moment if it is within the caller's longest wait (and no later than LAST); else it
        -- is TOO LATE, answered as DENIED with the wait it would have had.
        if outcome ~= NEVER and refill > 0 and (op ~= RESERVE or refill > LAST - settled
                or (extra >= 0 and (behind > extra or refill > extra - behind))) then
            outcome, wait = DENIED, refill
        elseif outcome == ALLOWED and (takes or op == RESERVE) then
            -- n taken at the first moment every band holds it: now, or `refill` ahead, with
            -- every band settled forward to it. Whoever asks next queues behind that moment.
            for i = 1, count do
                if refill > 0 then
                    accrue(i, refill)
                end
                balance[i] = balance[i] - n * unit[i]
            end
            if refill > 0 then
                settled = settled + refill
                at, behind, wait = settled, settled - now, settled - now
            end
            booked, changes = op == RESERVE, true
        end
    elseif op == REFUND then
        -- Forfeited while a reservation holds the settlement point ahead.
        if not (behind > 0 and tonumber(stored[count + 2]) == settled) then
            for i = 1, count do
                balance[i] = min(balance[i] + n * unit[i], capacity[i])
            end
        end
        changes = true
    elseif op == GIVE_BACK then
        -- Settled no later than now: n are plain tokens again. Settled ahead, and no later than
        -- the reservation's moment (nobody queues behind it): each band's settlement is run
        -- backwards from `settled`, losing p units a microsecond, down to an empty band or to
        -- now; the key's settlement point is then the latest band's. A band undone to an
        -- earlier point is settled forward to it; if the bands stood at different points,
        -- those already at the latest keep no part of a microsecond's accrual, so nothing they
        -- hold is taken before it (see below). Settled beyond the moment: others queue behind
        -- it, and the tokens are forfeited.
        if settled <= max(extra, now) then
            at_band = {}
            for i = 1, count do
                local total = min(balance[i] + n * unit[i], capacity[i])
                local back = floor(total / rate[i])
                if back < behind then
                    at_band[i], balance[i] = settled - back, total - back * rate[i]
                else
                    at_band[i], balance[i] = now, total - behind * rate[i]
                end
            end
        end
        booked, changes = true, true
    elseif op == SETTLE then
        -- n more than reserved, taken from every band even beyond its balance: a band that
        -- lacks units owes them as time, from the key's settlement point (see Settlement).
        at_band = {}
        for i = 1, count do
            local need = n * unit[i]
            local debt = need - balance[i]
            local repaid = ceil(debt / rate[i])
            if debt <= 0 then
                at_band[i], balance[i] = settled, -debt
            elseif need >= EXACT - rate[i] or repaid > LAST - settled then
                at_band[i], balance[i] = LAST, 0
            else
                -- The microsecond's rounding over-counts less than one microsecond's units, of
                -- which a band faster than its burst a microsecond keeps its capacity.
                at_band[i], balance[i] = settled + repaid, min(repaid * rate[i] - debt, capacity[i])
            end
        end
        booked, changes = n > 0, true
    end
    if at_band then
        -- The bands at their own points, brought to one, the latest: the others settled
        -- forward to it; if the points differed, the bands already there keep no part of a
        -- microsecond's accrual, so nothing they hold is taken before it.
        local latest = now
        for i = 1, count do
            latest = max(latest, at_band[i])
        end
        local spread = false
        for i = 1, count do
            if at_band[i] < latest then
                spread = true
                accrue(i, latest - at_band[i])
            end
        end
        for i = 1, spread and count or 0 do
            if at_band[i] == latest then
                balance[i] = 0
            end
        end
        settled, behind = latest, latest - now
    end
    local remaining = floor(balance[1] / unit[1])
    for i = 2, count do
        remaining = min(remaining, floor(balance[i] / unit[i]))
    end

    -- Store what changed, with a TTL of exactly the time until every band is full again: then
    -- the key is indistinguishable from a new one, and only then may it disappear. A read (peek,
    -- available, a stack's first pass) stores nothing, except a new key's anchor when the key
    -- is to be kept: when it does not start full, or when keys are kept at least least_ttl_ms
    -- (then every key touched is remembered, anchor included, as an in-process limiter
    -- remembers it). Either way its TTL is above 0.
    if writes or (not dry and not exists) then
        local to_full = 0
        for i = 1, count do
            to_full = max(to_full, time_to_full(i))
        end
        local ttl_ms = max(ceil((behind + to_full) / MICROS_PER_MS), least_ttl_ms)
        if ttl_ms > 0 then
            local values = {SETTLED, settled}
            for i = 1, count do
                values[2 * i + 1], values[2 * i + 2] = i, balance[i]
            end
            if booked then
                values[#values + 1], values[#values + 2] = BOOKED, settled
            end
            redis.call('HSET', key, unpack(values))
            if server_clock then
                -- On the server's clock the moment of "full" is known, and the key's expiry is
                -- set to it: a TTL counted from when PEXPIRE runs would drift by however long
                -- the script has already run (a batch of many keys takes milliseconds).
                local full_ms = ceil((now + behind + to_full) / MICROS_PER_MS)
                redis.call('PEXPIREAT', key, max(full_ms, ceil(now / MICROS_PER_MS) + least_ttl_ms))
            else
                redis.call('PEXPIRE', key, ttl_ms)
            end
        elseif exists then
            redis.call('DEL', key)
        end
    end

    -- Answer.
    if dry then
        refused = refused or outcome ~= ALLOWED
    elseif many then
        reply[k] = outcome
    else
        local answer
        if outcome == DENIED then
            answer = {DENIED, remaining, behind, wait}
        elseif op == RESERVE and wait > 0 then
            answer = at and {ALLOWED, remaining, wait, at} or {ALLOWED, remaining, wait}
        else
            answer = OUTCOMES * remaining + outcome
        end
        if not stack then
            if changes then
                remember('1')
            end
            if levels then
                -- Each band's level: its whole tokens, and the microseconds until it holds one
                -- more (the part of a token it lacks, at most a token's units: exact).
                local leveled = {answer, behind}
                for i = 1, count do
                    local whole = floor(balance[i] / unit[i])
                    leveled[2 * i + 1] = whole
                    leveled[2 * i + 2] = ceil((unit[i] - (balance[i] - whole * unit[i])) / rate[i])
                end
                return leveled
            end
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
