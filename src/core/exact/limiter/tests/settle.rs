//! Settling a cost once it is known: a refund when less, a debt held as time when more.

use super::{band, SECOND};
use crate::core::exact::limiter::{Decision, Limiter, Reservation};
use crate::core::exact::rate::{BandSpec, Rate};
use crate::core::exact::settle::Balance;

#[test]
fn a_cost_less_than_reserved_is_refunded_capped_at_the_burst() {
    let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
    assert_eq!(limiter.acquire(4, 0), Decision::Allowed);
    limiter.settle_cost(4, 1, 0);
    assert_eq!(limiter.available(), 4);
    // Refunding more than was taken fills the band and no more.
    limiter.settle_cost(9, 0, 0);
    assert_eq!(limiter.available(), 5);
}

#[test]
fn a_cost_equal_to_reserved_changes_nothing() {
    let mut limiter = Limiter::new(&[band(1, 5), band(2, 3)], None, Some(0));
    assert_eq!(limiter.acquire(2, 0), Decision::Allowed);
    let before = limiter.bands();
    limiter.settle_cost(2, 2, SECOND / 2);
    assert_eq!(limiter.bands(), before);
}

#[test]
fn an_overage_within_the_balance_is_simply_taken() {
    let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    limiter.settle_cost(1, 3, 0);
    assert_eq!(limiter.available(), 2);
    assert_eq!(limiter.bands()[0].balance.settled_at, Some(0));
}

#[test]
fn a_debt_is_held_as_time_and_repaid_to_the_nanosecond() {
    // One token a second, a burst of 5: 5 reserved, 8 used. The 3 missing tokens take 3 s to
    // accrue, so the band is settled at 3 s, empty, and the next token is there at 4 s.
    let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
    assert_eq!(limiter.acquire(5, 0), Decision::Allowed);
    limiter.settle_cost(5, 8, 0);
    let debt = limiter.bands()[0].balance;
    assert_eq!(
        debt,
        Balance {
            units: 0,
            settled_at: Some(3 * SECOND)
        }
    );
    assert_eq!(limiter.acquire(1, 0), Decision::Wait(4_000_000_000));
    assert_eq!(limiter.acquire(1, 4 * SECOND - 1), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, 4 * SECOND), Decision::Allowed);
}

#[test]
fn a_debt_that_is_no_whole_number_of_nanoseconds_keeps_what_rounding_over_counts() {
    // 3 tokens a second accrue 3 units a nanosecond, 10^9 units to a token. A debt of one
    // token is 333_333_333.3 ns: the point moves 333_333_334 ns and keeps the 2 units over.
    // Together the next token is there at 666_666_667 ns, exactly when an account that went
    // 10^9 units below zero would hold one again.
    let three = BandSpec::new(Rate::new(3, 1).unwrap(), 1).unwrap();
    let mut limiter = Limiter::new(&[three], None, Some(0));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    limiter.settle_cost(1, 2, 0);
    assert_eq!(
        limiter.bands()[0].balance,
        Balance {
            units: 2,
            settled_at: Some(333_333_334)
        }
    );
    assert_eq!(limiter.acquire(1, 666_666_666), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, 666_666_667), Decision::Allowed);
}

#[test]
fn every_band_owes_its_own_debt() {
    // 1/s burst 4 and 2/s burst 2: 2 reserved, 5 used. The first band owes 1 token (1 s),
    // the second 3 (1.5 s); the slower repayment decides the wait.
    let mut limiter = Limiter::new(&[band(1, 4), band(2, 2)], None, Some(0));
    assert_eq!(limiter.acquire(2, 0), Decision::Allowed);
    limiter.settle_cost(2, 5, 0);
    let settled: Vec<_> = limiter.bands().iter().map(|b| b.balance).collect();
    assert_eq!(
        settled,
        [
            Balance {
                units: 0,
                settled_at: Some(SECOND)
            },
            Balance {
                units: 0,
                settled_at: Some(3 * SECOND / 2)
            },
        ]
    );
    assert_eq!(limiter.acquire(1, 2 * SECOND - 1), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
}

#[test]
fn an_overage_while_a_waiter_queues_is_owed_after_its_turn() {
    // A waiter booked at 2 s; an overage of 1 is then taken after its turn: 3 s.
    let mut limiter = Limiter::new(&[band(1, 2)], Some(0), Some(0));
    assert_eq!(
        limiter.reserve(2, 0, u128::MAX),
        Reservation::Taken {
            after_ns: 2_000_000_000
        }
    );
    limiter.settle_cost(0, 1, 0);
    assert_eq!(limiter.bands()[0].balance.settled_at, Some(3 * SECOND));
}

#[test]
fn a_refund_while_in_debt_is_forfeited_as_behind_a_waiter() {
    let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
    assert_eq!(limiter.acquire(5, 0), Decision::Allowed);
    limiter.settle_cost(5, 7, 0);
    let in_debt = limiter.bands();
    limiter.settle_cost(3, 1, SECOND);
    assert_eq!(limiter.bands(), in_debt, "the debt is not written off");
    assert_eq!(limiter.acquire(1, 3 * SECOND), Decision::Allowed);
}

#[test]
fn a_debt_beyond_the_clock_is_held_to_its_end() {
    let slow = BandSpec::new(Rate::new(1, u64::MAX >> 34).unwrap(), 1).unwrap();
    let mut limiter = Limiter::new(&[slow], None, Some(0));
    limiter.settle_cost(0, u64::MAX, 0);
    assert_eq!(
        limiter.bands()[0].balance,
        Balance {
            units: 0,
            settled_at: Some(i64::MAX)
        }
    );
    assert!(matches!(limiter.acquire(1, 0), Decision::Wait(_)));
}

#[test]
fn a_debt_on_a_band_faster_than_its_burst_per_nanosecond_leaves_no_more_than_the_burst() {
    // 10**12 tokens a second is 1,000 a nanosecond, with a burst of 1: rounding the debt up to
    // a whole nanosecond over-counts up to 999 tokens, of which the band keeps its burst. The
    // state is one a limiter could save and be restored from (a pickle).
    let specs = [band(1, 1), band(1_000_000_000_000, 1)];
    let mut limiter = Limiter::new(&specs, None, Some(0));
    limiter.settle_cost(1, 7, 0);
    for band in limiter.bands() {
        assert!(band.balance.units <= band.spec.capacity_units());
    }
    let saved = limiter.bands().iter().map(|band| band.balance).collect();
    assert!(Limiter::saved(&specs, saved, None).is_ok());
}
