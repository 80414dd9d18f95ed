//! The pure core: QoS arithmetic and state, with no Python anywhere in sight.
//!
//! The files follow the course's layering, one idea each:
//!
//! * [`quantity`]: what the math needs from a number, so one algorithm serves `i64`, `f64` and,
//!   in the Python glue, any Python number with Python's own arithmetic.
//! * [`int_or_float`]: a Python `int` or `float` as machine numbers, computing as Python does
//!   wherever 64 bits give Python's exact answer, and saying so where they do not.
//! * [`scalar`]: such a number that remembers which input it was, so that a result passed
//!   through unchanged can be handed back as the very input.
//! * [`refill`]: the lazy-refill math. Plain scalars in, a pair out. It never names a bucket.
//! * [`token_bucket`]: the bucket, which is only where the refill math's answer gets stored, and
//!   the spend decision made right after storing it.
//! * [`leak`] and [`leaky_bucket`]: the same lazy settlement run the other way (time drains a
//!   level), and the bucket that drops what does not fit.
//! * [`classes`]: hierarchical shaping as a tree of parent pointers: validation and borrowing.
//! * [`exact`]: past the toy: the same lazy settlement exact in integers, on a nanosecond clock,
//!   for a real rate limiter.
//! * [`meter`]: the three-colour meters of RFC 2697, 2698 and 4115 on that exact settlement.
//! * [`seats`]: how many at once: seats taken and given back, and the line of those who wait.

// No `unsafe` anywhere in the core.
#![forbid(unsafe_code)]

pub mod classes;
pub mod exact;
pub mod int_or_float;
pub mod leak;
pub mod leaky_bucket;
pub mod meter;
pub mod quantity;
pub mod refill;
pub mod scalar;
pub mod seats;
pub mod token_bucket;
