//! The seating rules, written once, over where one limit's seats are kept.
//!
//! An in-flight limit lives in two homes: [`Seats`](super::Seats), in this process's heap, and
//! a key of [`SharedSeats`](super::shared::SharedSeats), in words every process of a host maps
//! from one file. Both keep the same four things: the limit, the seats held, the fencing token
//! the next holder gets, and a line of waiters, each asking for some seats. [`SeatStore`] is
//! what a home says about them, and nothing more: how it reads and writes each, and what
//! becomes of a waiter that leaves the line. The functions of this file are the rules,
//! generic over the home, so both homes seat their waiters by the same lines of code.
//!
//! * **Weighted.** A caller asks for `n` seats and gets all `n` or none ([`check`], [`grant`]).
//! * **First come, first seated.** A caller is seated at once only if nobody waits and its
//!   seats are free ([`free_now`]); seats that come back go to the head of the line, and a head
//!   that does not fit holds back those behind it ([`seat_the_line`]).
//! * **A waiter that gives up passes its turn on** ([`leave`]).
//! * **Fencing tokens** grow by one with every grant ([`grant`]).
//! * **Resizing evicts nobody** ([`resize`]): holders keep their seats, waiters that now fit
//!   are seated, and waiters asking for more than the new limit are refused.

use super::{Grant, SeatsError};

/// Where one limit's seats are kept: its limit, the seats held, the next fencing token, and a
/// line of places, each a waiter asking for some seats, first come first.
///
/// A home only stores; every decision is one of the functions of this module. A waiter leaves
/// the line in one of three ways, and the home says what each means to it (the heap notes the
/// news for the waiter's thread; the shared table writes it in the waiter's record, where the
/// waiter finds it).
pub trait SeatStore {
    /// How the home finds a waiter again: a ticket in the heap, a record's index in the file.
    type Place: Copy;

    /// How many seats there are.
    fn limit(&self) -> u64;
    fn set_limit(&mut self, limit: u64);

    /// How many seats are held (more than the limit just after it shrank).
    fn held(&self) -> u64;
    fn set_held(&mut self, held: u64);

    /// The fencing token of a new grant; the next grant gets the one after.
    fn take_token(&mut self) -> u64;

    /// The first place in line, and how many seats its waiter asks for.
    fn head(&self) -> Option<(Self::Place, u64)>;
    /// The place just behind `place` in line, and how many seats its waiter asks for.
    fn behind(&self, place: Self::Place) -> Option<(Self::Place, u64)>;

    /// The waiter of `place` leaves the line seated, with `grant` (already counted as held).
    fn seated(&mut self, place: Self::Place, grant: Grant);
    /// The waiter of `place` leaves the line refused: it asks for more than the limit.
    fn refused(&mut self, place: Self::Place);
    /// The waiter of `place` leaves the line: it gave up.
    fn gave_up(&mut self, place: Self::Place);
}

/// Whether `n` seats may be asked for at all, under a limit of `limit`.
///
/// # Errors
/// [`SeatsError::NoSeats`] for `n` = 0, [`SeatsError::MoreThanLimit`] for more seats than the
/// limit has: such a caller could never be seated.
pub fn check(limit: u64, n: u64) -> Result<(), SeatsError> {
    match n {
        0 => Err(SeatsError::NoSeats),
        n if n > limit => Err(SeatsError::MoreThanLimit { n, limit }),
        _ => Ok(()),
    }
}

/// Whether `n` more seats fit now, line or no line.
fn fits(seats: &impl SeatStore, n: u64) -> bool {
    seats.held() + n <= seats.limit()
}

/// Whether a caller asking for `n` seats is seated at once: nobody waits, and they are free.
/// (Otherwise it waits at the end of the line, or does not wait at all.)
pub fn free_now(seats: &impl SeatStore, n: u64) -> bool {
    seats.head().is_none() && fits(seats, n)
}

/// `n` seats taken, with the next fencing token. Only once they were found free.
pub fn grant(seats: &mut impl SeatStore, n: u64) -> Grant {
    seats.set_held(seats.held() + n);
    Grant {
        n,
        token: seats.take_token(),
    }
}

/// `n` seats now, if nobody waits and they are free; never joins the line.
///
/// # Errors
/// As [`check`].
pub fn try_take(seats: &mut impl SeatStore, n: u64) -> Result<Option<Grant>, SeatsError> {
    check(seats.limit(), n)?;
    Ok(free_now(seats, n).then(|| grant(seats, n)))
}

/// Seat the waiters at the head of the line, in order, while their seats are free: a head that
/// does not fit holds back those behind it, so a large request is never overtaken.
pub fn seat_the_line<S: SeatStore>(seats: &mut S) {
    while let Some((place, n)) = seats.head() {
        if !fits(seats, n) {
            break;
        }
        let grant = grant(seats, n);
        seats.seated(place, grant);
    }
}

/// `n` seats given back by a holder: the head of the line takes them first.
///
/// # Errors
/// [`SeatsError::NotHeld`] for more seats than are held.
pub fn release(seats: &mut impl SeatStore, n: u64) -> Result<(), SeatsError> {
    let held = seats.held();
    if n > held {
        return Err(SeatsError::NotHeld { n, held });
    }
    seats.set_held(held - n);
    seat_the_line(seats);
    Ok(())
}

/// The waiter of `place`, still in line, gives up: those behind it who now fit are seated (it
/// may have been the head that held them back).
pub fn leave<S: SeatStore>(seats: &mut S, place: S::Place) {
    seats.gave_up(place);
    seat_the_line(seats);
}

/// A new limit, with no holder evicted: waiters asking for more than it are refused (they
/// could never be seated), then those that now fit are seated.
///
/// # Errors
/// [`SeatsError::Limit`] for a limit of 0.
pub fn resize(seats: &mut impl SeatStore, limit: u64) -> Result<(), SeatsError> {
    if limit == 0 {
        return Err(SeatsError::Limit(limit));
    }
    seats.set_limit(limit);
    let mut next = seats.head();
    while let Some((place, n)) = next {
        next = seats.behind(place);
        if n > limit {
            seats.refused(place);
        }
    }
    seat_the_line(seats);
    Ok(())
}
