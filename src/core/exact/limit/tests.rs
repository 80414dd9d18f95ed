use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use super::{Counts, KeyedLimit, Limit, TraceLengths};

// The tables' own methods of the same names decide without the clock step: these tests ask
// through the traits, as a caller outside the core does.
use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
use crate::core::exact::config::{BandConfig, Config, Ratio};
use crate::core::exact::key::{plain_int, Key, KeyRef};
use crate::core::exact::keyed::{Answer, KeyedDecision, KeyedLimiter, KeyedReservation};
use crate::core::exact::limiter::{Decision, Limiter, Reservation};
use crate::core::exact::shared::{Table, THE_KEY};

const SECOND: i64 = 1_000_000_000;

/// 2 tokens a second, a burst of 4; and 10 a minute, a burst of 6.
fn config() -> Config {
    let band = |rate, per, burst| {
        BandConfig::new(
            Ratio::new(rate, 1).unwrap(),
            Some(burst),
            Some(Ratio::new(per, 1).unwrap()),
        )
        .unwrap()
    };
    Config::new(vec![band(2, 1, 4), band(10, 60, 6)]).unwrap()
}

fn table(config: &Config, max_keys: Option<u64>) -> Table<Box<[AtomicU64]>> {
    let words = (0..Table::<Box<[AtomicU64]>>::layout(config, max_keys).words())
        .map(|_| AtomicU64::new(0))
        .collect();
    Table::create(words, config, max_keys, (1, 2), 3).unwrap()
}

/// Every answer of one script of calls, asked through [`Limit`] of the one key `key`.
fn script<L: Limit + ?Sized>(limit: &L, key: L::Key<'_>) -> Vec<String> {
    let mut said = Vec::new();
    for step in 0..60_i64 {
        let now = step * SECOND / 3;
        let n = u64::try_from(step % 5).unwrap();
        let answer = match step % 9 {
            0 | 1 => format!("{:?}", limit.check(key, n, now)),
            8 => format!("{:?}", limit.settle_cost(key, 2, n * 2, now)),
            2 => format!("{:?}", limit.acquire(key, n, now)),
            3 => format!("{:?}", limit.peek(key, n, now)),
            4 => format!("{:?}", limit.refund(key, 1, now)),
            5 => format!("{:?}", limit.reserve(key, n, now, u128::MAX)),
            6 => format!("{:?}", limit.available(key, now)),
            _ => format!("{:?}", limit.levels(key, now)),
        };
        said.push(answer);
    }
    said
}

#[test]
fn the_three_limiters_answer_one_script_alike() {
    let config = config();
    let one = Mutex::new(Limiter::new(&config.specs(), None, None));
    let keyed = KeyedLimiter::<Key>::new(&config.specs(), 10, 2);
    let shared = table(&config, Some(10));
    let one_key = table(&config, None);
    let key = KeyRef::Str("client");
    let digest = shared.digest_of(key);
    let expected = script(&one, ());
    assert_eq!(script(&keyed, &key), expected);
    assert_eq!(script(&shared, digest), expected);
    assert_eq!(script(&one_key, THE_KEY), expected);
}

#[test]
fn a_time_off_the_clock_is_refused_by_every_limiter_and_changes_nothing() {
    let config = config();
    let far = MAX_CLOCK_GAP_NS + SECOND;
    let one = Mutex::new(Limiter::new(&config.specs(), None, None));
    let keyed = KeyedLimiter::<Key>::new(&config.specs(), 10, 2);
    let shared = table(&config, Some(10));
    let key = KeyRef::Int(7);
    let digest = shared.digest_of(key);
    let spent = Answer {
        decision: KeyedDecision::Decided(Decision::Allowed),
        remaining: 0,
    };
    assert_eq!(Limit::check(&one, (), 4, 0), Ok(spent));
    assert_eq!(Limit::check(&keyed, &key, 4, 0), Ok(spent));
    assert_eq!(Limit::check(&shared, digest, 4, 0), Ok(spent));
    let gap = i128::from(far);
    assert_eq!(Limit::acquire(&one, (), 1, far), Err(gap));
    assert_eq!(Limit::acquire(&keyed, &key, 1, far), Err(gap));
    assert_eq!(Limit::acquire(&shared, digest, 1, far), Err(gap));
    assert_eq!(Limit::refund(&one, (), 4, -far), Err(-gap));
    assert_eq!(Limit::give_back(&keyed, &key, 4, -far, 0), Err(-gap));
    assert_eq!(Limit::reserve(&shared, digest, 1, far, 0), Err(gap));
    assert_eq!(Limit::settle_cost(&one, (), 1, 3, far), Err(gap));
    assert_eq!(Limit::settle_cost(&keyed, &key, 1, 3, -far), Err(-gap));
    assert_eq!(Limit::settle_cost(&shared, digest, 3, 1, far), Err(gap));
    // Nothing changed: each is still spent at the time of its last call.
    assert_eq!(Limit::available(&one, (), 0), Ok(0));
    assert_eq!(Limit::available(&keyed, &key, 0), Ok(0));
    assert_eq!(Limit::available(&shared, digest, 0), Ok(0));
}

#[test]
fn a_reservation_is_answered_alike() {
    let config = config();
    let one = Mutex::new(Limiter::new(&config.specs(), Some(0), Some(0)));
    let taken = Limit::reserve(&one, (), 1, 0, u128::MAX);
    assert_eq!(
        taken,
        Ok(KeyedReservation::Decided(Reservation::Taken {
            after_ns: 6_000_000_000
        }))
    );
    assert_eq!(
        Limit::reserve(&one, (), 1, 0, 1),
        Ok(KeyedReservation::Decided(Reservation::TooLate(
            12_000_000_000
        )))
    );
}

#[test]
fn a_trace_is_checked_against_the_clock_as_it_moves_before_anything_is_decided() {
    let config = config();
    let keyed = KeyedLimiter::<Key>::new(&config.specs(), 10, 2);
    let shared = table(&config, Some(10));
    let step = MAX_CLOCK_GAP_NS;
    let keys = [1, 2, 3];
    let times = [0, step, 2 * step];
    let mut answers = Vec::new();
    keyed
        .acquire_trace(&keys, &Counts::Each(1), &times, |answer| {
            answers.push(answer);
        })
        .unwrap();
    assert_eq!(answers.len(), 3);
    let far = [0, 0, 2 * step + 1];
    let refused = shared.acquire_trace(&keys, &Counts::Items(vec![1, 2, 3]), &far, |_| {
        panic!("nothing is decided")
    });
    assert_eq!(refused, Err((2, i128::from(2 * step + 1))));
    assert_eq!(shared.held(), 0);
    shared
        .acquire_trace(&keys, &Counts::Items(vec![1, 2, 3]), &times, |_| {})
        .unwrap();
    assert_eq!(shared.held(), 3);
    assert!(shared.contains(shared.digest_of(plain_int(3))));
    assert_eq!(keyed.stats(), shared.stats());
    assert_eq!(keyed.latest(), shared.latest());
}

#[test]
fn a_decisions_code_and_wait_read_back_to_the_same_decision() {
    let decisions = [
        KeyedDecision::Decided(Decision::Allowed),
        KeyedDecision::Decided(Decision::Wait(7)),
        KeyedDecision::Decided(Decision::Never),
        KeyedDecision::Refused { retry_in: 9 },
    ];
    for (code, decision) in (0..).zip(decisions) {
        assert_eq!(decision.code(), code);
        let wait = decision.wait_ns();
        let back = KeyedDecision::from_code(code, || wait.ok_or("no wait"));
        assert_eq!(back, Ok(decision));
    }
    assert_eq!(
        decisions.map(KeyedDecision::wait_ns),
        [Some(0), Some(7), None, Some(9)]
    );
    // The wait is asked for only where the outcome has one.
    let never = KeyedDecision::from_code(2, || Err("asked"));
    assert_eq!(never, Ok(KeyedDecision::Decided(Decision::Never)));
}

#[test]
fn a_refused_answer_leaves_nothing_whatever_it_carries() {
    let answer = |decision| Answer {
        decision,
        remaining: 5,
    };
    assert_eq!(answer(KeyedDecision::Decided(Decision::Wait(1))).left(), 5);
    assert_eq!(answer(KeyedDecision::Refused { retry_in: 1 }).left(), 0);
}

#[test]
fn a_trace_is_one_length_or_its_lengths_are_said() {
    assert_eq!(TraceLengths::check(3, 3, None), Ok(()));
    assert_eq!(TraceLengths::check(3, 3, Some(3)), Ok(()));
    let short = TraceLengths::check(3, 3, Some(2)).unwrap_err();
    assert_eq!(
        short.to_string(),
        "keys (3), now_ns (3) and n (2) must have the same length"
    );
    let times = TraceLengths::check(3, 4, None).unwrap_err();
    assert_eq!(
        times.to_string(),
        "keys (3), now_ns (4) must have the same length"
    );
}
