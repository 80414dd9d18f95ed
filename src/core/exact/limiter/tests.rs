use super::*;
use crate::core::exact::rate::Rate;

const SECOND: i64 = 1_000_000_000;

fn band(per_second: u64, burst: u64) -> BandSpec {
    BandSpec::new(Rate::new(per_second, 1).unwrap(), burst).unwrap()
}

fn taken_after(ns: i64) -> Reservation {
    Reservation::Taken {
        after_ns: ns.unsigned_abs().into(),
    }
}

#[test]
fn a_reservation_takes_at_once_what_is_there() {
    let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
    assert_eq!(
        limiter.reserve(5, 0, u128::MAX),
        Reservation::Taken { after_ns: 0 }
    );
    assert_eq!(limiter.acquire(1, 0), Decision::Wait(SECOND as u128));
}

#[test]
fn a_reservation_books_the_moment_its_tokens_arrive_and_later_callers_queue_behind_it() {
    let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
    assert_eq!(
        limiter.reserve(3, 0, u128::MAX),
        Reservation::Taken {
            after_ns: 3 * 1_000_000_000
        }
    );
    // The next caller is answered from the reservation's end: 3 s, then 1 s for its token.
    assert_eq!(limiter.acquire(1, 0), Decision::Wait(4 * 1_000_000_000));
    assert_eq!(
        limiter.reserve(1, SECOND, u128::MAX),
        Reservation::Taken {
            after_ns: 3 * 1_000_000_000
        }
    );
    assert_eq!(
        limiter.acquire(1, 4 * SECOND),
        Decision::Wait(1_000_000_000)
    );
    assert_eq!(limiter.acquire(1, 5 * SECOND), Decision::Allowed);
}

#[test]
fn a_large_reservation_is_not_overtaken_by_small_requests() {
    let mut limiter = Limiter::new(&[band(1, 10)], Some(0), Some(0));
    assert_eq!(
        limiter.reserve(5, 0, u128::MAX),
        Reservation::Taken {
            after_ns: 5 * 1_000_000_000
        }
    );
    for t in 1..=5 {
        assert!(matches!(limiter.acquire(1, t * SECOND), Decision::Wait(_)));
    }
    assert_eq!(limiter.acquire(1, 6 * SECOND), Decision::Allowed);
}

#[test]
fn a_reservation_too_far_ahead_takes_nothing() {
    let mut limiter = Limiter::new(&[band(1, 5), band(2, 5)], Some(0), Some(0));
    let before = limiter.clone();
    assert_eq!(
        limiter.reserve(3, 0, 3 * 1_000_000_000 - 1),
        Reservation::TooLate(3 * 1_000_000_000)
    );
    assert_eq!(limiter, before);
    assert_eq!(limiter.reserve(6, 0, u128::MAX), Reservation::Never);
    assert_eq!(limiter, before);
}

#[test]
fn the_last_reservation_given_back_leaves_the_limiter_as_it_was() {
    for initial in [0, 2, 4] {
        let mut limiter = Limiter::new(&[band(1, 5)], Some(initial), Some(0));
        limiter.acquire(0, SECOND);
        let before = limiter.clone();
        let Reservation::Taken { after_ns } = limiter.reserve(5, SECOND, u128::MAX) else {
            panic!("a wait of at most 5 s is taken");
        };
        limiter.give_back(5, SECOND, SECOND + i64::try_from(after_ns).unwrap());
        assert_eq!(limiter, before, "initial {initial}");
    }
}

#[test]
fn a_reservation_given_back_partway_through_its_wait_keeps_what_had_accrued() {
    // 3 tokens a second, reserved empty at 0 for 1 s, given back at 0.5 s: what had
    // accrued by then (1.5 tokens) is there, as if nobody had reserved.
    let mut limiter = Limiter::new(&[band(3, 10)], Some(0), Some(0));
    assert_eq!(
        limiter.reserve(3, 0, u128::MAX),
        Reservation::Taken {
            after_ns: 1_000_000_000
        }
    );
    limiter.give_back(3, SECOND / 2, SECOND);
    assert_eq!(limiter.available_at(SECOND / 2), 1);
    // Half a token more comes in a sixth of a second, rounded up to the nanosecond.
    assert_eq!(limiter.acquire(2, SECOND / 2), Decision::Wait(166_666_667));
}

#[test]
fn a_reservation_given_back_lends_nothing_early_and_loses_nothing_by_its_end() {
    // The faster band fills up while the slower one is waited for: what its cap cut off
    // cannot be told apart afterwards, so it comes back later, never earlier.
    let mut limiter = Limiter::new(&[band(1, 5), band(3, 7)], Some(0), Some(0));
    let before = limiter.clone();
    assert_eq!(
        limiter.reserve(5, 0, u128::MAX),
        Reservation::Taken {
            after_ns: 5 * 1_000_000_000
        }
    );
    limiter.give_back(5, 0, 5 * SECOND);
    for t in 0..=20 {
        let now = t * SECOND / 2;
        let (mut got, mut want) = (limiter.clone(), before.clone());
        assert!(got.available_at(now) <= want.available_at(now), "at {now}");
        if now >= 5 * SECOND {
            assert_eq!(got.available_at(now), want.available_at(now), "at {now}");
        }
    }
}

#[test]
fn a_reservation_given_back_with_others_behind_it_is_forfeited() {
    // 2 tokens a second, burst 1, the token spent: A is booked at 0.5 s, B at 1 s. A gives
    // up. Were its half second handed back, C would be booked at 0.5 s while B still passes
    // at 1 s, and so on down the queue: two admissions in half a second where one is the
    // most a burst of 1 allows. A's turn is forfeited instead: C queues behind B.
    let mut limiter = Limiter::new(&[band(2, 1)], Some(0), Some(0));
    let half = SECOND / 2;
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(half));
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
    limiter.give_back(1, 0, half);
    assert_eq!(
        limiter.acquire(1, 0),
        Decision::Wait(3 * u128::from(half.unsigned_abs()))
    );
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(3 * half));
}

#[test]
fn a_last_reservation_given_back_lends_no_band_anything_early() {
    // The slow band sets the moment (0.5 s); the fast one is settled forward to it, full
    // again. Undone at 0, the fast band must not hold at 0 what it only gets by 0.5 s.
    let mut limiter = Limiter::new(&[band(10, 3), band(2, 4)], None, Some(0));
    assert_eq!(limiter.acquire(3, 0), Decision::Allowed);
    assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(SECOND / 2));
    limiter.give_back(2, 0, SECOND / 2);
    assert!(matches!(limiter.acquire(1, 0), Decision::Wait(_)));
    // What the fast band's cap cut off at 0.5 s comes back later, never earlier: its
    // token is there by 0.3 s (without the reservation, by 0.1 s).
    assert_eq!(limiter.acquire(1, 3 * SECOND / 10), Decision::Allowed);
}

#[test]
fn a_refund_is_forfeited_while_any_band_holds_a_waiter() {
    // Bands (1/s, burst 2) and (2/s, burst 1). A waiter at 0.5 s, one at 1 s who gives up:
    // its undo leaves the slow band settled at now and the fast one at 0.5 s. A refund then
    // must not go into the slow band, or two later waiters at 1 s and 1.5 s make four
    // admissions in 1.5 s, where a burst of 2 at 1/s allows 3.
    let mut limiter = Limiter::new(&[band(1, 2), band(2, 1)], None, Some(0));
    assert_eq!(limiter.on_the_clock(0), Ok(()));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND / 2));
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
    limiter.give_back(1, 0, SECOND);
    limiter.refund(1, 0);
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(2 * SECOND));
}

#[test]
fn the_earlier_waiter_is_undone_whole_once_the_later_one_is() {
    // After the later waiter's undo the bands stand at different points; the earlier one
    // is now the last, and giving it back restores the limiter as it was.
    let mut limiter = Limiter::new(&[band(1, 2), band(2, 1)], None, Some(0));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    let before = limiter.clone();
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND / 2));
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
    limiter.give_back(1, 0, SECOND);
    limiter.give_back(1, 0, SECOND / 2);
    assert_eq!(limiter.bands(), before.bands());
}

#[test]
fn a_refund_while_a_waiter_queues_is_forfeited() {
    // Rate 1/s, burst 1: X takes at 0, A is booked at 1 s, X refunds at 0.5 s. Had the
    // token gone back, Y could take it at 0.5 s and A still pass at 1 s.
    let mut limiter = Limiter::new(&[band(1, 1)], None, Some(0));
    assert_eq!(limiter.on_the_clock(0), Ok(()));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
    assert_eq!(limiter.on_the_clock(SECOND / 2), Ok(()));
    limiter.refund(1, SECOND / 2);
    assert!(matches!(limiter.acquire(1, SECOND / 2), Decision::Wait(_)));
    // With nobody waiting, a refund is tokens again.
    assert_eq!(limiter.on_the_clock(2 * SECOND), Ok(()));
    assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
    limiter.refund(1, 2 * SECOND);
    assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
}

#[test]
fn reservations_given_back_last_first_undo_each_other() {
    let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
    let before = limiter.clone();
    assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(2 * SECOND));
    assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(3 * SECOND));
    limiter.give_back(1, 0, 3 * SECOND);
    limiter.give_back(2, 0, 2 * SECOND);
    assert_eq!(limiter, before);
}

#[test]
fn a_reservation_given_back_after_its_turn_is_plain_tokens_again() {
    let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
    assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(2 * SECOND));
    // Its holder is woken at 3 s and gives up there: the 2 tokens, and the one that
    // accrued since, are there for whoever asks.
    limiter.give_back(2, 3 * SECOND, 2 * SECOND);
    assert_eq!(limiter.acquire(3, 3 * SECOND), Decision::Allowed);
}

#[test]
fn a_new_limiter_is_full_and_anchored_at_its_first_call() {
    let mut limiter = Limiter::new(&[band(1, 3)], None, None);
    for _ in 0..3 {
        assert_eq!(limiter.acquire(1, 5 * SECOND), Decision::Allowed);
    }
    assert_eq!(
        limiter.acquire(1, 5 * SECOND),
        Decision::Wait(1_000_000_000)
    );
}

#[test]
fn each_band_says_its_own_tokens_and_when_it_can_give_one_more() {
    // 10 per second, bursts of 3; and 1 per second, bursts of 5.
    let mut limiter = Limiter::new(&[band(10, 3), band(1, 5)], None, None);
    assert_eq!(limiter.acquire(2, 0), Decision::Allowed);
    let pairs = |levels: Vec<Level>| -> Vec<(u128, u128)> {
        levels.iter().map(|l| (l.tokens, l.next_ns)).collect()
    };
    // The fast band: 1 token and a half, the next whole one in 50 ms; the slow band: 3
    // tokens and a twentieth, the next in 950 ms.
    assert_eq!(
        pairs(limiter.levels_at(SECOND / 20)),
        [(1, 50_000_000), (3, 950_000_000)]
    );
    // A full band gives one more a whole token's time after it is spent from.
    assert_eq!(
        pairs(limiter.levels_at(10 * SECOND)),
        [(3, 100_000_000), (5, 1_000_000_000)]
    );
}

#[test]
fn the_wait_is_exact_to_the_nanosecond() {
    let rate = Rate::new(1, 3).unwrap(); // one token every 3 s
    let spec = BandSpec::new(rate, 1).unwrap();
    let mut limiter = Limiter::new(&[spec], Some(0), Some(0));
    let Decision::Wait(wait) = limiter.acquire(1, 0) else {
        panic!("an empty band must ask to wait");
    };
    assert_eq!(wait, 3_000_000_000);
    let wait = i64::try_from(wait).unwrap();
    assert_eq!(limiter.peek(1, wait - 1), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, wait), Decision::Allowed);
}

#[test]
fn bands_are_all_or_nothing_and_wait_for_the_slowest() {
    let mut limiter = Limiter::new(&[band(10, 10), band(1, 20)], Some(5), Some(0));
    assert_eq!(limiter.acquire(6, 0), Decision::Wait(1_000_000_000));
    assert_eq!(limiter.available(), 5, "a denied request took nothing");
    assert_eq!(limiter.acquire(11, 0), Decision::Never);
}

#[test]
fn a_first_peek_anchors_the_clock_like_any_call() {
    let mut limiter = Limiter::new(&[band(1, 1)], Some(0), None);
    assert_eq!(limiter.peek(1, 0), Decision::Wait(1_000_000_000));
    assert_eq!(limiter.acquire(1, SECOND), Decision::Allowed);
}

#[test]
fn a_wait_counts_from_now_even_when_the_clock_is_behind() {
    let mut limiter = Limiter::new(&[band(1, 1)], Some(0), Some(SECOND));
    assert_eq!(limiter.acquire(1, 0), Decision::Wait(2_000_000_000));
    assert_eq!(limiter.peek(1, 2 * SECOND - 1), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
}

#[test]
fn a_band_that_holds_the_tokens_does_not_overrule_one_that_says_wait() {
    // Half a second in: the slow band holds half a token, the fast one is full again.
    let slow = band(1, 10);
    let fast = band(100, 10);
    for specs in [[slow, fast], [fast, slow]] {
        let mut limiter = Limiter::new(&specs, Some(0), Some(0));
        assert_eq!(
            limiter.acquire(1, SECOND / 2),
            Decision::Wait(500_000_000),
            "{specs:?}"
        );
        assert_eq!(
            limiter.available(),
            0,
            "nothing was taken from the fast band"
        );
        assert_eq!(limiter.available_at(SECOND), 1);
        assert_eq!(limiter.available_at(3 * SECOND), 3);
        assert_eq!(limiter.acquire(10, SECOND), Decision::Wait(9_000_000_000));
        assert_eq!(limiter.acquire(1, SECOND), Decision::Allowed);
    }
}

#[test]
fn a_wait_is_rounded_up_to_the_next_whole_nanosecond() {
    // 3 tokens per second: 3 units a nanosecond, 10^9 units a token. An empty band needs
    // 333,333,333 1/3 ns for a token: 333,333,333 ns are one unit short, so the wait is
    // 333,333,334 ns (rounded down, the request would be denied at the end of its wait).
    let spec = BandSpec::new(Rate::new(3, 1).unwrap(), 1).unwrap();
    let mut limiter = Limiter::new(&[spec], Some(0), Some(0));
    assert_eq!(limiter.acquire(1, 0), Decision::Wait(333_333_334));
    assert_eq!(limiter.peek(1, 333_333_333), Decision::Wait(1));
    assert_eq!(limiter.acquire(1, 333_333_334), Decision::Allowed);
    // The same rounding for when a band is full again.
    let balances = Balances::new(&[spec], Some(0), Some(0));
    assert_eq!(balances.fresh_from(&[spec]), 333_333_334);
}

#[test]
fn fresh_from_is_when_the_slowest_band_is_full_again() {
    let specs = [band(1, 3), band(2, 2)];
    let mut balances = Balances::new(&specs, None, None);
    assert!(balances.is_full(&specs));
    assert_eq!(
        balances.fresh_from(&specs),
        i64::MIN,
        "full and never anchored: fresh from any time"
    );
    assert_eq!(
        Balances::new(&specs, Some(1), None).fresh_from(&specs),
        i64::MAX,
        "never anchored and not full: no time makes it full"
    );
    assert_eq!(balances.acquire(&specs, 2, 5 * SECOND), Decision::Allowed);
    assert!(!balances.is_full(&specs));
    // The first band lacks 2 tokens (2 s), the second 2 tokens at 2 a second (1 s).
    assert_eq!(balances.fresh_from(&specs), 7 * SECOND);
    assert!(!balances.is_fresh_at(&specs, 7 * SECOND - 1));
    assert!(balances.is_fresh_at(&specs, 7 * SECOND));
    assert_eq!(balances.available_at(&specs, 5 * SECOND + SECOND / 2), 1);
    assert_eq!(balances.available_at(&specs, 6 * SECOND), 2);
}

#[test]
fn bands_come_back_with_their_balances() {
    let specs = [band(1, 3), band(2, 5)];
    let mut limiter = Limiter::new(&specs, Some(2), Some(0));
    assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
    let bands = limiter.bands();
    assert_eq!(bands.iter().map(|b| b.spec).collect::<Vec<_>>(), specs);
    assert_eq!(
        bands.iter().map(|b| b.balance.units).collect::<Vec<_>>(),
        [1_000_000_000_u128, 1_000_000_000]
    );
    assert_eq!(Limiter::from_bands(&bands).bands(), limiter.bands());
}

#[test]
fn a_time_ten_years_from_the_clock_is_refused_and_changes_nothing() {
    use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
    let mut limiter = Limiter::new(&[band(1, 1)], Some(0), Some(0));
    assert_eq!(limiter.on_the_clock(MAX_CLOCK_GAP_NS), Ok(()));
    let before = limiter.clone();
    assert_eq!(
        limiter.on_the_clock(-1),
        Err(-i128::from(MAX_CLOCK_GAP_NS) - 1)
    );
    assert_eq!(
        limiter.on_the_clock(2 * MAX_CLOCK_GAP_NS + 1),
        Err(i128::from(MAX_CLOCK_GAP_NS) + 1)
    );
    assert_eq!(limiter, before);
    // start_ns is the clock before the first call: time.time_ns() against a monotonic one.
    let mut limiter = Limiter::new(&[band(1, 1)], None, Some(1_780_000_000 * SECOND));
    assert!(limiter.on_the_clock(1_000 * SECOND).is_err());
}

#[test]
fn a_restored_limiter_first_asked_before_its_settlement_takes_up_refilling_from_then() {
    let mut saved = Limiter::new(&[band(1, 5)], Some(5), Some(1_000_000 * SECOND));
    assert_eq!(saved.acquire(4, 1_000_000 * SECOND), Decision::Allowed);
    let mut restored = Limiter::from_bands(&saved.bands());
    assert_eq!(restored.on_the_clock(5), Ok(()));
    assert_eq!(restored.acquire(1, 5), Decision::Allowed);
    assert_eq!(restored.acquire(1, 5), Decision::Wait(1_000_000_000));
    // Only the first call re-anchors: later ones behind the clock are a clock going back.
    assert_eq!(restored.on_the_clock(4), Ok(()));
    assert_eq!(restored.acquire(1, 4), Decision::Wait(1_000_000_001));
}

#[test]
fn a_refused_first_call_leaves_a_restored_limiter_to_re_anchor_at_the_next() {
    use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
    let mut saved = Limiter::new(&[band(1, 5)], Some(5), Some(1_000_000 * SECOND));
    assert_eq!(saved.acquire(4, 1_000_000 * SECOND), Decision::Allowed);
    let mut restored = Limiter::from_bands(&saved.bands());
    assert!(restored
        .on_the_clock(1_000_000 * SECOND + MAX_CLOCK_GAP_NS + 1)
        .is_err());
    assert_eq!(restored.on_the_clock(5), Ok(()));
    assert_eq!(restored.acquire(2, 5), Decision::Wait(1_000_000_000));
}

#[test]
fn a_copy_made_while_a_waiter_waits_keeps_the_reservation() {
    let mut original = Limiter::new(&[band(1, 3)], Some(0), Some(100 * SECOND));
    assert_eq!(original.on_the_clock(100 * SECOND), Ok(()));
    assert_eq!(
        original.reserve(3, 100 * SECOND, u128::MAX),
        taken_after(3 * SECOND)
    );
    let mut copy = Limiter::from_bands(&original.bands()).with_clock(original.clock());
    assert_eq!(copy.on_the_clock(100 * SECOND), Ok(()));
    assert_eq!(
        copy.peek(3, 100 * SECOND),
        original.peek(3, 100 * SECOND),
        "the copy queues behind the same waiter"
    );
}

#[test]
fn a_restored_limiter_first_asked_after_its_settlement_refills_as_usual() {
    let mut saved = Limiter::new(&[band(1, 5)], Some(0), Some(0));
    let mut restored = Limiter::from_bands(&saved.bands());
    assert_eq!(restored.on_the_clock(3 * SECOND), Ok(()));
    assert_eq!(restored.acquire(3, 3 * SECOND), Decision::Allowed);
    assert_eq!(saved.acquire(3, 3 * SECOND), Decision::Allowed);
    assert_eq!(restored.bands(), saved.bands());
}

#[test]
fn refunds_are_capped_at_the_burst() {
    let mut limiter = Limiter::new(&[band(1, 3)], Some(2), Some(0));
    limiter.refund(5, 0);
    assert_eq!(limiter.available(), 3);
}

#[test]
fn saved_balances_come_back_only_for_the_bands_they_were_saved_from() {
    let specs = [band(1, 5), band(2, 4)];
    let unit = |tokens: u64| specs[0].units_of(tokens).unwrap();
    let balance = |units, settled_at| Balance { units, settled_at };
    let one = vec![balance(unit(1), Some(0))];
    assert_eq!(
        Limiter::saved(&specs, one, None).unwrap_err(),
        RestoreError::Bands
    );
    let over = vec![
        balance(specs[0].capacity_units() + 1, Some(0)),
        balance(0, None),
    ];
    assert_eq!(
        Limiter::saved(&specs, over, None).unwrap_err(),
        RestoreError::OverBurst
    );
    let saved = vec![balance(unit(1), Some(SECOND)), balance(0, None)];
    let mut limiter = Limiter::saved(&specs, saved, Some(3 * SECOND)).unwrap();
    assert_eq!(
        limiter.clock(),
        Some(3 * SECOND),
        "the saved clock, not the settlement"
    );
    assert_eq!(limiter.bands()[0].balance.units, unit(1));
    // A restored limiter's first call, earlier than its clock, re-anchors it there.
    assert_eq!(limiter.on_the_clock(0), Ok(()));
    assert_eq!(limiter.clock(), Some(0));
}

#[test]
fn a_saved_limiter_keeps_its_clock_or_else_its_latest_settlement() {
    let settled = |at| Balance::from((0, at));
    let saved = [settled(Some(3)), settled(None), settled(Some(7))];
    assert_eq!(Limiter::saved_clock(saved, Some(5)), Some(5));
    assert_eq!(Limiter::saved_clock(saved, None), Some(7));
    assert_eq!(Limiter::saved_clock([settled(None)], None), None);
    // Moved onto another clock, a balance keeps its units.
    let moved = Balance::from((4, Some(7))).shifted(-2);
    assert_eq!(<(u128, Option<i64>)>::from(moved), (4, Some(5)));
}

mod settle;
