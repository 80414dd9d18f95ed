//! Exact lazy settlement: `compute_refill` in integer units and nanoseconds.
//!
//! [`settle`] has the lesson's shape (state and `now` in, new state out, no bucket in sight) and
//! its two branches, with what the toy left out added:
//!
//! * **Exact accrual.** Growth is `elapsed_ns * units_per_ns`, an integer; the unit is chosen
//!   (see [`rate`](super::rate)) so that no fraction of a unit ever arises. Splitting a span of
//!   time into any number of steps settles to exactly the same balance as one step.
//! * **A clock that goes backwards** adds nothing and does not move the settlement point back:
//!   the next forward step measures from the latest time seen, never from the past.
//! * **A new balance is anchored, not back-dated.** Until the first `now`, a balance has no
//!   settlement time; the first call anchors it there without accruing anything, so a clock that
//!   starts at 0, or at a monotonic reading of days, behaves the same.
//! * **No overflow, ever.** A difference of two 64-bit times fits 64 bits unsigned, its product
//!   with a 64-bit rate fits 128, and growth saturates before the cap is applied, so a balance
//!   idle for centuries is simply full.

/// A balance in units, and the nanosecond it was settled at (`None` until first anchored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Balance {
    pub units: u128,
    pub settled_at: Option<i64>,
}

impl Balance {
    /// The same balance on a clock that reads `by` nanoseconds more (see
    /// [`shifted`](super::clock_gap::shifted)): a saved balance taken up on another clock.
    #[must_use]
    pub fn shifted(self, by: i64) -> Self {
        Self {
            units: self.units,
            settled_at: super::clock_gap::shifted(self.settled_at, by),
        }
    }
}

/// A balance as a saved state keeps it: its units, and when it was settled.
impl From<(u128, Option<i64>)> for Balance {
    fn from((units, settled_at): (u128, Option<i64>)) -> Self {
        Self { units, settled_at }
    }
}

impl From<Balance> for (u128, Option<i64>) {
    fn from(balance: Balance) -> Self {
        (balance.units, balance.settled_at)
    }
}

/// Settle `balance` up to `now_ns`, accruing `units_per_ns` each nanosecond, capped at
/// `capacity_units`.
///
/// ```text
/// never settled  -> anchored: (units, now), nothing accrues
/// now <= settled -> untouched: (units, settled), also when the clock went backwards
/// otherwise      -> (min(units + (now - settled) * units_per_ns, capacity), now)
/// ```
#[must_use]
pub fn settle(balance: Balance, units_per_ns: u128, capacity_units: u128, now_ns: i64) -> Balance {
    settle_with_overflow(balance, units_per_ns, capacity_units, now_ns).0
}

/// [`settle`], also returning what the cap cut off: the units that arrived while the balance
/// was full. A meter that pours one bucket's overflow into another (RFC 2697) needs them; a
/// plain limiter throws them away.
#[must_use]
pub fn settle_with_overflow(
    balance: Balance,
    units_per_ns: u128,
    capacity_units: u128,
    now_ns: i64,
) -> (Balance, u128) {
    let Some(settled_at) = balance.settled_at else {
        let anchored = Balance {
            units: balance.units,
            settled_at: Some(now_ns),
        };
        return (anchored, 0);
    };
    if now_ns <= settled_at {
        return (balance, 0);
    }
    // Positive, since now_ns > settled_at, and below 2^64: any difference of two i64s.
    let elapsed = now_ns.abs_diff(settled_at);
    let grown = balance.units.saturating_add(accrued(elapsed, units_per_ns));
    let units = grown.min(capacity_units);
    let settled = Balance {
        units,
        settled_at: Some(now_ns),
    };
    (settled, grown - units)
}

/// `elapsed_ns * units_per_ns`. Every rate's units per nanosecond fit in 64 bits, and the product
/// of two 64-bit numbers always fits in 128: one multiplication, no check. (The saturating
/// branch only guards the signature, which takes 128 bits.)
fn accrued(elapsed_ns: u64, units_per_ns: u128) -> u128 {
    match u64::try_from(units_per_ns) {
        Ok(per_ns) => u128::from(elapsed_ns) * u128::from(per_ns),
        Err(_) => u128::from(elapsed_ns).saturating_mul(units_per_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPACITY: u128 = 1_000_000;

    fn at(units: u128, settled_at: i64) -> Balance {
        Balance {
            units,
            settled_at: Some(settled_at),
        }
    }

    #[test]
    fn the_first_call_anchors_without_accruing() {
        let fresh = Balance {
            units: 7,
            settled_at: None,
        };
        assert_eq!(settle(fresh, 3, CAPACITY, 1_000), at(7, 1_000));
    }

    #[test]
    fn accrues_exactly_and_caps() {
        assert_eq!(settle(at(0, 0), 3, CAPACITY, 10), at(30, 10));
        assert_eq!(
            settle(at(0, 0), 3, CAPACITY, 1_000_000),
            at(CAPACITY, 1_000_000)
        );
    }

    #[test]
    fn many_steps_equal_one_step() {
        let mut stepped = at(0, 0);
        for now in (7..=700).step_by(7) {
            stepped = settle(stepped, 3, CAPACITY, now);
        }
        assert_eq!(stepped, settle(at(0, 0), 3, CAPACITY, 700));
    }

    #[test]
    fn a_backwards_clock_adds_nothing_and_does_not_rewind() {
        let settled = at(5, 100);
        assert_eq!(settle(settled, 3, CAPACITY, 40), settled);
        assert_eq!(
            settle(settle(settled, 3, CAPACITY, 40), 3, CAPACITY, 110),
            at(35, 110)
        );
    }

    #[test]
    fn no_time_is_no_settlement_and_the_cap_is_reached_exactly() {
        // Zero elapsed leaves the balance as it is, even one above the cap; one nanosecond
        // settles it.
        assert_eq!(settle(at(150, 10), 3, 100, 10), at(150, 10));
        assert_eq!(settle(at(150, 10), 3, 100, 11), at(100, 11));
        assert_eq!(
            settle_with_overflow(at(150, 10), 3, 100, 10),
            (at(150, 10), 0)
        );
        // 90 + 10 * 1 lands on the cap: nothing cut off; one more nanosecond cuts off 1.
        assert_eq!(settle_with_overflow(at(90, 0), 1, 100, 9), (at(99, 9), 0));
        assert_eq!(
            settle_with_overflow(at(90, 0), 1, 100, 10),
            (at(100, 10), 0)
        );
        assert_eq!(
            settle_with_overflow(at(90, 0), 1, 100, 11),
            (at(100, 11), 1)
        );
    }

    #[test]
    fn the_overflow_is_what_the_cap_cut_off() {
        let (settled, overflow) = settle_with_overflow(at(90, 0), 3, 100, 10);
        assert_eq!((settled, overflow), (at(100, 10), 20));
    }

    #[test]
    fn centuries_of_idleness_neither_overflow_nor_wrap() {
        let full = settle(
            at(0, i64::MIN),
            u128::from(u64::MAX),
            u128::MAX >> 8,
            i64::MAX,
        );
        assert_eq!(full, at(u128::MAX >> 8, i64::MAX));
    }
}
