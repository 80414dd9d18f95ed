use super::*;

fn seated(woken: &Woken) -> Vec<(Ticket, u64)> {
    woken.seated.iter().map(|&(t, g)| (t, g.n)).collect()
}

fn in_line(asked: Asked) -> Ticket {
    match asked {
        Asked::InLine(ticket) => ticket,
        Asked::Seated(grant) => panic!("seated at once: {grant:?}"),
    }
}

/// Seats of `limit`, `held` of them taken.
fn holding(limit: u64, held: u64) -> Seats {
    let mut seats = Seats::new(limit).unwrap();
    seats.try_take(held).unwrap();
    seats
}

#[test]
fn arguments_are_refused_with_their_values() {
    assert_eq!(Seats::new(0).unwrap_err(), SeatsError::Limit(0));
    let mut seats = Seats::new(2).unwrap();
    assert_eq!(seats.try_take(0), Err(SeatsError::NoSeats));
    assert_eq!(
        seats.ask(3),
        Err(SeatsError::MoreThanLimit { n: 3, limit: 2 })
    );
    assert_eq!(seats.release(1), Err(SeatsError::NotHeld { n: 1, held: 0 }));
    assert_eq!(seats.resize(0), Err(SeatsError::Limit(0)));
    assert_eq!(
        SeatsError::MoreThanLimit { n: 3, limit: 2 }.to_string(),
        "n=3 is more than the limit of 2: it could never be held"
    );
}

#[test]
fn seats_are_taken_all_or_none_and_tokens_grow() {
    let mut seats = Seats::new(3).unwrap();
    assert_eq!(seats.try_take(2), Ok(Some(Grant { n: 2, token: 1 })));
    assert_eq!(seats.try_take(2), Ok(None)); // one free, two asked: none taken
    assert_eq!(seats.try_take(1), Ok(Some(Grant { n: 1, token: 2 })));
    assert_eq!(seats.in_flight(), 3);
    seats.release(3).unwrap();
    assert_eq!(seats.try_take(3), Ok(Some(Grant { n: 3, token: 3 })));
}

#[test]
fn seats_made_again_go_on_with_the_tokens() {
    let mut old = Seats::new(2).unwrap();
    old.try_take(1).unwrap();
    old.try_take(1).unwrap();
    assert_eq!(old.next_token(), 3);
    let mut again = Seats::with_tokens_from(2, old.next_token()).unwrap();
    assert_eq!(again.try_take(1), Ok(Some(Grant { n: 1, token: 3 })));
    assert_eq!(Seats::with_tokens_from(1, 0).unwrap().next_token(), 1);
    assert_eq!(
        Seats::with_tokens_from(0, 5).unwrap_err(),
        SeatsError::Limit(0)
    );
}

#[test]
fn nobody_overtakes_the_line() {
    let mut seats = holding(3, 2);
    let big = in_line(seats.ask(3).unwrap());
    // One seat is free, but the big waiter came first: a small caller waits behind it.
    assert_eq!(seats.try_take(1), Ok(None));
    let small = in_line(seats.ask(1).unwrap());
    let woken = seats.release(2).unwrap();
    assert_eq!(seated(&woken), vec![(big, 3)]);
    let woken = seats.release(3).unwrap();
    assert_eq!(seated(&woken), vec![(small, 1)]);
}

#[test]
fn a_head_that_leaves_lets_the_next_in() {
    let mut seats = holding(2, 1);
    let big = in_line(seats.ask(2).unwrap());
    let small = in_line(seats.ask(1).unwrap());
    let woken = seats.leave(big).unwrap();
    assert_eq!(seated(&woken), vec![(small, 1)]);
    assert_eq!(seats.leave(big), None); // already gone
    assert_eq!(seats.leave(small), None); // seated meanwhile: holds its seat
    assert_eq!(seats.in_flight(), 2);
}

#[test]
fn resizing_evicts_nobody_and_refuses_what_can_never_fit() {
    let mut seats = holding(4, 4);
    let three = in_line(seats.ask(3).unwrap());
    let one = in_line(seats.ask(1).unwrap());
    let woken = seats.resize(2).unwrap();
    assert_eq!(woken.refused, vec![three]);
    assert!(woken.seated.is_empty()); // 4 held, over the new limit: nobody seated
    assert_eq!(seats.in_flight(), 4);
    assert_eq!(seated(&seats.release(2).unwrap()), vec![]); // 2 held: still no room
    assert_eq!(seated(&seats.release(1).unwrap()), vec![(one, 1)]);
    let woken = seats.resize(10).unwrap();
    assert_eq!(woken, Woken::default());
    assert_eq!(seats.try_take(8), Ok(Some(Grant { n: 8, token: 3 })));
}

/// A small generator, so that the test needs no crate: xorshift64. (The shared table's tests
/// draw from it too.)
pub(super) struct Draw(pub(super) u64);

impl Draw {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// An index into a list of `len` items.
    pub(super) fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).expect("below len, which is a usize")
    }
}

/// Random schedules against the rules: the seats held are the grants not given back; a grant
/// never puts more than the limit in flight; waiters are seated in the order they came; the
/// head of a line never fits (seats are never left idle while someone waits for them); tokens
/// only grow.
#[test]
fn random_schedules_keep_the_rules() {
    for seed in 1..200u64 {
        let mut draw = Draw(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut seats = Seats::new(1 + draw.below(5)).unwrap();
        let mut holders: Vec<Grant> = Vec::new();
        let mut line: Vec<(Ticket, u64)> = Vec::new();
        let mut last_token = 0;
        for _ in 0..300 {
            let mut granted = Vec::new();
            let woken = match draw.below(4) {
                0 => {
                    let n = 1 + draw.below(seats.limit());
                    match seats.ask(n).unwrap() {
                        Asked::Seated(grant) => {
                            assert!(line.is_empty(), "seated past a line");
                            granted.push(grant);
                            Woken::default()
                        }
                        Asked::InLine(ticket) => {
                            line.push((ticket, n));
                            Woken::default()
                        }
                    }
                }
                1 if !holders.is_empty() => {
                    let grant = holders.swap_remove(draw.index(holders.len()));
                    seats.release(grant.n).unwrap()
                }
                2 if !line.is_empty() => {
                    let (ticket, _) = line.remove(draw.index(line.len()));
                    seats
                        .leave(ticket)
                        .expect("a waiter still in line can leave")
                }
                3 => seats.resize(1 + draw.below(6)).unwrap(),
                _ => Woken::default(),
            };
            // Those refused by a smaller limit leave first; then the line is seated.
            for ticket in &woken.refused {
                let place = line.iter().position(|(t, _)| t == ticket).unwrap();
                assert!(line.remove(place).1 > seats.limit());
            }
            for &(ticket, grant) in &woken.seated {
                assert_eq!(
                    line.first().map(|&(t, _)| t),
                    Some(ticket),
                    "seated out of order"
                );
                assert_eq!(line.remove(0).1, grant.n);
                granted.push(grant);
            }
            for grant in &granted {
                assert!(
                    grant.token > last_token,
                    "tokens must grow: {last_token}, then {grant:?}"
                );
                last_token = grant.token;
            }
            if !granted.is_empty() {
                assert!(
                    seats.in_flight() <= seats.limit(),
                    "seated beyond the limit"
                );
            }
            holders.extend(granted);
            let held: u64 = holders.iter().map(|g| g.n).sum();
            assert_eq!(seats.in_flight(), held);
            assert_eq!(seats.waiting(), line.len());
            if let Some(&(_, n)) = line.first() {
                assert!(held + n > seats.limit(), "seats idle while the head waits");
            }
        }
    }
}
