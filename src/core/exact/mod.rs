//! The real thing: the lesson's lazy settlement, exact, on a nanosecond clock.
//!
//! The course's bucket is a teaching toy, and says so: its clock is whatever number the caller
//! passes, growth is `elapsed * rate` in whatever arithmetic the numbers bring (floats round),
//! and a backwards clock is trusted to mean "no time passed". This module keeps the lesson's
//! idea (nothing runs between calls; each call settles the balance for the time elapsed, then
//! decides) and removes the toy's limits:
//!
//! * [`rate`]: a rate is an exact rational number of tokens per second, turned once, at
//!   configuration, into an integer number of *units* per nanosecond, a unit being an exact
//!   fraction of a token. After that no division and no float appear anywhere.
//! * [`settle`]: [`settle::settle`] is `compute_refill` in units and nanoseconds: integer
//!   addition, so a thousand small steps give exactly what one step of the same total gives.
//! * [`limiter`]: one or more bands (rate and burst each), consumed all-or-nothing, and a
//!   three-valued answer: allowed, denied with the exact wait, or never.
//! * [`limit`]: what every limiter answers (the one limiter, and both keyed tables), so that
//!   a caller is written once for all of them.
//! * [`quota`]: a rate as people write it (`"100/minute"`), read into a count and a period.
//! * [`config`]: a limit's configuration, decided in one place: its bands, their defaults and
//!   checks, and the one canonical encoding (with its fingerprint) every store reads.
//! * [`plans`]: one keyed limit whose bands depend on the client's plan, each plan a named
//!   configuration.
//! * [`clock_gap`]: a call's time more than ten years from a limiter's clock was read on
//!   another clock, and is refused.
//! * [`keyed`]: one limiter per key in bounded memory, forgetting a key only when it is
//!   indistinguishable from a new one, and refusing new keys rather than evicting anyone.
//! * [`shared`]: the same keyed table in memory that the processes of one host share, safe
//!   against a process killed at any instruction.
//! * [`home`]: every operation on a key of either keyed table, written once over the place
//!   the key is kept (the heap's shard, or the file's buckets), answering in [`answers`]' words.
//! * [`table_size`]: how many keys a keyed table holds, and how many locks it is split into.
//! * [`stack`]: one request under several limits at once (global, route, client), taken from
//!   all of them or from none.
//! * [`waiting`]: the deadline loop of a blocking acquire: reserve a turn, then wait for it.
//! * [`key`]: keys of mixed kinds (ints, floats, text, bytes, numbered objects) for such a table.

pub mod answers;
pub mod clock_gap;
pub mod config;
pub mod home;
pub mod key;
pub mod keyed;
pub mod limit;
pub mod limiter;
pub mod plans;
pub mod quota;
pub mod rate;
pub mod record;
pub mod settle;
pub mod shared;
pub mod stack;
pub mod table_size;
pub mod waiting;
