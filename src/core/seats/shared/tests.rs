use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::*;

fn table(limit: u64, max_keys: u64, records: u64) -> SharedSeats<Box<[AtomicU64]>> {
    let layout = Layout::new(max_keys, records);
    let words: Box<[AtomicU64]> = (0..layout.words()).map(|_| AtomicU64::new(0)).collect();
    SharedSeats::create(words, layout, limit, (1, 2)).unwrap()
}

fn seated(asked: Asked) -> Held {
    match asked {
        Asked::Seated(held) => held,
        other => panic!("not seated: {other:?}"),
    }
}

#[test]
fn seats_are_taken_given_back_and_go_to_the_head_of_the_line_first() {
    let t = table(3, 1, 8);
    let a = seated(t.ask(0, THE_KEY, 2, false).unwrap());
    assert_eq!(a.grant, Grant { n: 2, token: 1 });
    let Asked::InLine(big) = t.ask(1, THE_KEY, 3, true).unwrap() else {
        panic!()
    };
    // One seat is free, but the line is not empty: nobody overtakes its head.
    assert_eq!(t.ask(0, THE_KEY, 1, false).unwrap(), Asked::Busy);
    let Asked::InLine(small) = t.ask(0, THE_KEY, 1, true).unwrap() else {
        panic!()
    };
    assert_eq!(t.outcome(1, big), None);
    assert!(t.release(0, a.record, a.grant.token));
    assert!(!t.release(0, a.record, a.grant.token), "twice is harmless");
    let big = t.outcome(1, big).unwrap().unwrap();
    assert_eq!(big.grant, Grant { n: 3, token: 2 });
    assert_eq!((t.in_flight(), t.waiting()), (3, 1));
    // The small waiter gives up: it holds nothing, and the table forgets nothing it needs.
    assert_eq!(t.leave(0, small), None);
    assert!(t.release(1, big.record, big.grant.token));
    assert_eq!((t.in_flight(), t.waiting(), t.keys()), (0, 0, 0));
    assert_eq!(t.word(at::IN_USE), 0, "every record back on the free list");
}

#[test]
fn a_dead_owners_leases_and_places_are_reclaimed() {
    let t = table(2, 4, 8);
    let held = seated(t.ask(5, (9, 9), 2, false).unwrap());
    let Asked::InLine(waiter) = t.ask(5, (9, 9), 1, true).unwrap() else {
        panic!()
    };
    let Asked::InLine(other) = t.ask(6, (9, 9), 2, true).unwrap() else {
        panic!()
    };
    assert_eq!(t.reclaim(5), 2);
    // Owner 6's waiter is seated by the dead owner's seats; the dead one's waiter is gone.
    let seated = t.outcome(6, other).unwrap().unwrap();
    assert_eq!(seated.grant.n, 2);
    assert_eq!(t.outcome(5, waiter), None);
    assert!(
        !t.release(5, held.record, held.grant.token),
        "a late release changes nothing"
    );
    assert_eq!((t.in_flight(), t.waiting()), (2, 0));
}

#[test]
fn a_change_cut_short_is_undone_by_the_next_holder() {
    let t = table(2, 1, 4);
    let before: Vec<u64> = t.words().iter().map(|w| w.load(Relaxed)).collect();
    {
        let words: &[AtomicU64] = t.words();
        let mut change = Change::new(words, LOG);
        change.set(at::HELD, 7);
        change.set(at::NEXT_TOKEN, 9);
        // The holder dies here: no `done`.
    }
    assert_eq!(t.in_flight(), 7);
    assert_eq!(
        t.ask(0, THE_KEY, 1, false).unwrap(),
        Asked::Seated(Held {
            record: 0,
            grant: Grant { n: 1, token: 1 },
        })
    );
    let after: Vec<u64> = t.words().iter().map(|w| w.load(Relaxed)).collect();
    assert_ne!(before, after);
    assert_eq!(t.in_flight(), 1);
}

#[test]
fn keys_are_forgotten_when_idle_and_their_tokens_still_grow() {
    let t = table(1, 2, 8);
    let a = seated(t.ask(0, (1, 0), 1, false).unwrap());
    let b = seated(t.ask(0, (3, 0), 1, false).unwrap());
    // Both keys probe from the same slot: forgetting the first moves the second back.
    assert_eq!(t.ask(0, (5, 0), 1, false).unwrap(), Asked::NoRoom);
    assert!(t.release(0, a.record, a.grant.token));
    assert_eq!(
        t.ask(0, (3, 0), 1, false).unwrap(),
        Asked::Busy,
        "still found"
    );
    let c = seated(t.ask(0, (1, 0), 1, false).unwrap());
    assert!(c.grant.token > b.grant.token);
    assert_eq!(t.keys(), 2);
}

#[test]
fn a_smaller_limit_refuses_waiters_it_could_never_seat() {
    let t = table(3, 1, 4);
    let a = seated(t.ask(0, THE_KEY, 3, false).unwrap());
    let Asked::InLine(w) = t.ask(0, THE_KEY, 3, true).unwrap() else {
        panic!()
    };
    t.resize(2).unwrap();
    assert_eq!(
        t.outcome(0, w),
        Some(Err(SeatsError::MoreThanLimit { n: 3, limit: 2 }))
    );
    assert_eq!(t.in_flight(), 3, "the holder keeps its seats");
    assert!(t.release(0, a.record, a.grant.token));
    assert_eq!(
        t.ask(0, THE_KEY, 3, false),
        Err(SeatsError::MoreThanLimit { n: 3, limit: 2 })
    );
}

/// The two homes of the rules, given the same calls, give the same answers: the same callers
/// seated at once or put in line, the same waiters seated (in line order, with the same
/// tokens) or refused, and the same counts. The heap's [`Seats`](crate::core::seats::Seats) is
/// the reference: each grant of the table is the heap's, and each waiter the heap has not
/// decided is still waiting in the table.
#[test]
fn the_shared_table_seats_as_the_heap_does() {
    use crate::core::seats::tests::Draw;
    use crate::core::seats::{Asked as HeapAsked, Seats, Ticket, Woken};

    for seed in 1..100u64 {
        let mut draw = Draw(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let limit = 1 + draw.below(5);
        let mut heap = Seats::new(limit).unwrap();
        let t = table(limit, 1, 256);
        let mut holders: Vec<Held> = Vec::new();
        // The heap's ticket and the table's record of each waiter, in line order.
        let mut line: Vec<(Ticket, usize, u64)> = Vec::new();
        for _ in 0..200 {
            let woken = match draw.below(4) {
                0 => {
                    let n = 1 + draw.below(heap.limit());
                    match (heap.ask(n).unwrap(), t.ask(0, THE_KEY, n, true).unwrap()) {
                        (HeapAsked::Seated(grant), Asked::Seated(held)) => {
                            assert_eq!(held.grant, grant);
                            holders.push(held);
                        }
                        (HeapAsked::InLine(ticket), Asked::InLine(index)) => {
                            line.push((ticket, index, n));
                        }
                        other => panic!("the homes disagree: {other:?}"),
                    }
                    Woken::default()
                }
                1 if !holders.is_empty() => {
                    let held = holders.swap_remove(draw.index(holders.len()));
                    assert!(t.release(0, held.record, held.grant.token));
                    heap.release(held.grant.n).unwrap()
                }
                2 if !line.is_empty() => {
                    let (ticket, index, _) = line.remove(draw.index(line.len()));
                    assert_eq!(t.leave(0, index), None);
                    heap.leave(ticket)
                        .expect("a waiter still in line can leave")
                }
                3 => {
                    let limit = 1 + draw.below(6);
                    t.resize(limit).unwrap();
                    heap.resize(limit).unwrap()
                }
                _ => Woken::default(),
            };
            let place = |line: &[(Ticket, usize, u64)], ticket: Ticket| {
                line.iter().position(|&(t, _, _)| t == ticket).unwrap()
            };
            for &(ticket, grant) in &woken.seated {
                let (_, index, _) = line.remove(place(&line, ticket));
                let held = t
                    .outcome(0, index)
                    .expect("seated in the table too")
                    .unwrap();
                assert_eq!(held.grant, grant);
                holders.push(held);
            }
            for &ticket in &woken.refused {
                let (_, index, n) = line.remove(place(&line, ticket));
                assert_eq!(
                    t.outcome(0, index),
                    Some(Err(SeatsError::MoreThanLimit {
                        n,
                        limit: heap.limit()
                    }))
                );
            }
            for &(_, index, _) in &line {
                assert_eq!(t.outcome(0, index), None, "still waiting in the table");
            }
            assert_eq!(
                (t.limit(), t.in_flight(), t.waiting()),
                (heap.limit(), heap.in_flight(), heap.waiting() as u64)
            );
        }
    }
}
