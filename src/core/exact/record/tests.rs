use std::sync::atomic::AtomicU64;

use super::*;
use crate::core::exact::rate::Rate;

fn balances(units: &[u128], at: Option<i64>) -> Balances {
    units
        .iter()
        .map(|&units| Balance {
            units,
            settled_at: at,
        })
        .collect::<Vec<_>>()
        .into()
}

/// `state` as a record of `shape`, in the heap.
fn record(shape: Shape, state: &Balances) -> Vec<u64> {
    let mut words = vec![0; shape.words()];
    shape.write(&mut words[..], state);
    words
}

#[test]
fn a_narrow_record_is_two_words_per_band_units_first() {
    let shape = Shape::new(2, false);
    assert_eq!(shape.words(), 4);
    let mut words = [0_u64; 4];
    let state = balances(&[u128::from(u64::MAX), 7], Some(-3));
    shape.write(&mut words[..], &state);
    #[allow(clippy::cast_sign_loss)]
    let minus_three = -3_i64 as u64;
    assert_eq!(words, [u64::MAX, minus_three, 7, minus_three]);
    assert_eq!(shape.read(&words[..]), state);
}

#[test]
fn a_wide_record_keeps_units_beyond_64_bits() {
    let shape = Shape::new(1, true);
    let state = balances(&[(5 << 64) | 9], Some(11));
    let words = record(shape, &state);
    assert_eq!(&words[..], [9, 5, 11]);
    assert_eq!(shape.read(&words[..]), state);
}

#[test]
fn a_balance_never_anchored_reads_back_so() {
    let shape = Shape::new(1, false);
    let state = balances(&[3], None);
    let words = record(shape, &state);
    assert_eq!(shape.read(&words[..]), state);
    // The same as a balance settled at i64::MIN would be: that instant is never a call's.
    #[allow(clippy::cast_sign_loss)]
    let never = i64::MIN as u64;
    assert_eq!(words[1], never);
}

#[test]
fn heap_words_and_mapped_words_hold_the_same_record() {
    let shape = Shape::new(3, true);
    let state = balances(&[1, 1 << 100, 0], Some(42));
    let heap = record(shape, &state);
    let atomics: Vec<AtomicU64> = (0..shape.words()).map(|_| AtomicU64::new(0)).collect();
    let mut mapped = &atomics[..];
    shape.write(&mut mapped, &state);
    let mapped_words: Vec<u64> = atomics.iter().map(|word| word.load(Relaxed)).collect();
    assert_eq!(&heap[..], &mapped_words[..]);
    assert_eq!(shape.read(&mapped), state);
}

#[test]
fn a_table_s_records_are_wide_only_if_some_capacity_needs_it() {
    // A token is 10^9 units at one per second: a burst of 10 is 10^10 units, and one of
    // 2^64 - 1 tokens needs about 94 bits.
    let narrow = BandSpec::new(Rate::new(1, 1).unwrap(), 10).unwrap();
    let huge = BandSpec::new(Rate::new(1, 1).unwrap(), u64::MAX).unwrap();
    assert_eq!(Shape::of(&[narrow, narrow]), Shape::new(2, false));
    assert_eq!(Shape::of(&[narrow, huge]), Shape::new(2, true));
    assert!(Shape::of(&[huge]).is_wide());
}
