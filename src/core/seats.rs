//! How many at once: seats taken and given back, and the line of those who wait for them.
//!
//! A rate limit says how often; an in-flight limit says how many at once. Its state is three
//! numbers and a line: `limit` seats, `held` of them taken, the fencing token the next holder
//! gets, and the callers waiting, in the order they came. There is no clock here: a seat comes
//! free when its holder gives it back, not when time passes.
//!
//! The rules, each a function of [`rules`], written once for both homes of a limit:
//!
//! * **Weighted.** A caller asks for `n` seats at once and gets all `n` or none.
//! * **First come, first seated.** A caller is seated at once only if nobody is waiting and its
//!   `n` seats are free. Otherwise it joins the end of the line, and seats given back go to the
//!   head of the line first: a small request never overtakes a large one that came earlier, so
//!   the large one cannot starve.
//! * **A waiter that gives up passes its turn on.** Leaving the line may let the next waiters in
//!   (the one that left may have been the head, holding them back).
//! * **Fencing tokens.** Every grant carries a token, strictly increasing per limit, so that a
//!   store can refuse a late write from a holder whose seat has since been given to another.
//! * **Resizing evicts nobody.** A larger limit seats waiters at once; a smaller one lets the
//!   holders finish, and seats no one until `held` is under it. A waiter asking for more seats
//!   than the new limit could ever give is refused rather than left waiting for ever.
//!
//! This module owns the rules and nothing else: no threads, no waking. [`rules`] says them once,
//! over a [`SeatStore`](rules::SeatStore): what a home of the seats stores, and nothing more.
//! [`Seats`] (below) is the home in this process's heap; [`table`] keeps the places of its
//! waiters (and, for a keyed limit, a [`Seats`] per key in use); the glue keeps a table under a
//! lock, and wakes the waiters it says were decided. [`shared`] is the other home: one table
//! for every process of a host, in words they all map, seated by the same [`rules`].

use std::collections::VecDeque;
use std::fmt;

pub mod rules;
pub mod shared;
pub mod table;

use rules::SeatStore;

/// A place in the line, returned by [`Seats::ask`] when the seats are not free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// Seats taken: how many, and the fencing token of this holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub n: u64,
    pub token: u64,
}

/// The answer to [`Seats::ask`]: seated at once, or in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Seated(Grant),
    InLine(Ticket),
}

/// What a change to the seats decided for the waiters: those now seated, in line order, and
/// those refused because the limit became smaller than what they ask for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Woken {
    pub seated: Vec<(Ticket, Grant)>,
    pub refused: Vec<Ticket>,
}

/// Arguments an in-flight limit refuses, each naming the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeatsError {
    /// A limit must be at least one seat.
    Limit(u64),
    /// A caller must ask for at least one seat.
    NoSeats,
    /// A caller asked for more seats than the limit has: it could never be seated.
    MoreThanLimit { n: u64, limit: u64 },
    /// Seats given back that were not held: a lease released by someone else's count.
    NotHeld { n: u64, held: u64 },
}

impl fmt::Display for SeatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SeatsError::Limit(limit) => write!(f, "limit must be at least 1, not {limit}"),
            SeatsError::NoSeats => write!(f, "n must be at least 1, not 0"),
            SeatsError::MoreThanLimit { n, limit } => {
                write!(
                    f,
                    "n={n} is more than the limit of {limit}: it could never be held"
                )
            }
            SeatsError::NotHeld { n, held } => {
                write!(f, "{n} seats given back, but only {held} are held")
            }
        }
    }
}

impl std::error::Error for SeatsError {}

/// One in-flight limit in this process's heap: its seats, who holds how many, and who waits.
/// The rules are [`rules`]'; each change runs them on this, as a [`SeatStore`] (`Heap`).
#[derive(Debug)]
pub struct Seats {
    limit: u64,
    held: u64,
    /// The token the next grant gets: tokens start at 1 and only grow.
    next_token: u64,
    next_ticket: u64,
    /// The waiters, first come first, with the seats each asks for. Tickets are handed out in
    /// order and only ever join at the back, so the line is sorted by ticket: a place is found
    /// by binary search.
    line: VecDeque<(Ticket, u64)>,
}

impl Seats {
    /// `limit` seats, all free, nobody waiting.
    ///
    /// # Errors
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn new(limit: u64) -> Result<Self, SeatsError> {
        Self::with_tokens_from(limit, 1)
    }

    /// `limit` seats whose first grant gets `token`: the seats of a key forgotten and taken
    /// again go on from [`Seats::next_token`] of the old ones, so that its tokens still only
    /// grow (a 0 is read as 1).
    ///
    /// # Errors
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn with_tokens_from(limit: u64, token: u64) -> Result<Self, SeatsError> {
        if limit == 0 {
            return Err(SeatsError::Limit(limit));
        }
        Ok(Seats {
            limit,
            held: 0,
            next_token: token.max(1),
            next_ticket: 0,
            line: VecDeque::new(),
        })
    }

    /// The token the next grant will get.
    #[must_use]
    pub fn next_token(&self) -> u64 {
        self.next_token
    }

    /// How many seats there are.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How many seats are held now (more than [`Seats::limit`] just after it shrank).
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.held
    }

    /// How many callers are in line.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.line.len()
    }

    /// Where `ticket` stands in line, if it is still there.
    fn position(&self, ticket: Ticket) -> Option<usize> {
        self.line.binary_search_by_key(&ticket, |&(t, _)| t).ok()
    }

    /// Take `ticket`'s place out of the line (most often the head's).
    fn unlink(&mut self, ticket: Ticket) {
        if let Some(place) = self.position(ticket) {
            self.line.remove(place);
        }
    }

    /// `n` seats now, if nobody is waiting and they are free; never joins the line.
    ///
    /// # Errors
    /// [`SeatsError::NoSeats`] for `n` = 0, [`SeatsError::MoreThanLimit`] for more seats than
    /// the limit has.
    pub fn try_take(&mut self, n: u64) -> Result<Option<Grant>, SeatsError> {
        rules::try_take(&mut Heap::new(self, &mut Woken::default()), n)
    }

    /// `n` seats now (as [`Seats::try_take`]), or a place at the end of the line.
    ///
    /// # Errors
    /// As [`Seats::try_take`].
    pub fn ask(&mut self, n: u64) -> Result<Asked, SeatsError> {
        if let Some(grant) = self.try_take(n)? {
            return Ok(Asked::Seated(grant));
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.line.push_back((ticket, n));
        Ok(Asked::InLine(ticket))
    }

    /// `n` seats given back by a holder: the head of the line takes them first.
    ///
    /// # Errors
    /// [`SeatsError::NotHeld`] for more seats than are held.
    #[inline]
    pub fn release(&mut self, n: u64) -> Result<Woken, SeatsError> {
        let mut woken = Woken::default();
        rules::release(&mut Heap::new(self, &mut woken), n)?;
        Ok(woken)
    }

    /// The waiter with `ticket` gives up: `None` if it is no longer in line (it was seated,
    /// or refused, in the meantime: the caller then holds what [`Woken`] gave it, and must
    /// give that back). Otherwise its place is gone, and those behind it who now fit are
    /// seated.
    pub fn leave(&mut self, ticket: Ticket) -> Option<Woken> {
        self.position(ticket)?;
        let mut woken = Woken::default();
        rules::leave(&mut Heap::new(self, &mut woken), ticket);
        Some(woken)
    }

    /// A new limit, with no holder evicted: waiters that now fit are seated, and waiters
    /// asking for more than the new limit are refused (they could never be seated).
    ///
    /// # Errors
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn resize(&mut self, limit: u64) -> Result<Woken, SeatsError> {
        let mut woken = Woken::default();
        rules::resize(&mut Heap::new(self, &mut woken), limit)?;
        Ok(woken)
    }
}

/// The heap as a home for the rules, for one change: the [`Seats`] it changes, and what it
/// decided for the waiters that left the line seated or refused, for the caller to tell.
struct Heap<'s> {
    seats: &'s mut Seats,
    woken: &'s mut Woken,
}

impl<'s> Heap<'s> {
    fn new(seats: &'s mut Seats, woken: &'s mut Woken) -> Self {
        Heap { seats, woken }
    }
}

impl SeatStore for Heap<'_> {
    type Place = Ticket;

    fn limit(&self) -> u64 {
        self.seats.limit
    }

    fn set_limit(&mut self, limit: u64) {
        self.seats.limit = limit;
    }

    fn held(&self) -> u64 {
        self.seats.held
    }

    fn set_held(&mut self, held: u64) {
        self.seats.held = held;
    }

    fn take_token(&mut self) -> u64 {
        let token = self.seats.next_token;
        self.seats.next_token += 1;
        token
    }

    fn head(&self) -> Option<(Ticket, u64)> {
        self.seats.line.front().copied()
    }

    fn behind(&self, ticket: Ticket) -> Option<(Ticket, u64)> {
        let line = &self.seats.line;
        line.get(line.partition_point(|&(t, _)| t <= ticket))
            .copied()
    }

    fn seated(&mut self, ticket: Ticket, grant: Grant) {
        self.seats.unlink(ticket);
        self.woken.seated.push((ticket, grant));
    }

    fn refused(&mut self, ticket: Ticket) {
        self.seats.unlink(ticket);
        self.woken.refused.push(ticket);
    }

    fn gave_up(&mut self, ticket: Ticket) {
        self.seats.unlink(ticket);
    }
}

#[cfg(test)]
mod tests;
