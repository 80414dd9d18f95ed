//! A limiter's seats and its waiters' places: one [`Seats`], or one per key in a bounded table.
//!
//! [`Seats`] decides who is seated; a limiter with waiters also has to tell them. Each waiter
//! gets a place, found by its ticket, holding how to wake it (a `W` of the caller's: a thread
//! to unpark, a task's callback) and, once decided, what was decided for it: seated with a
//! grant, or refused by a smaller limit. A change records that in the place and hands the
//! waiter's `W` back in [`Told`], for the caller to wake once it has let go of its lock; the
//! waiter then takes its outcome from its place.
//!
//! With keys, a key has seats only while someone holds or waits for them: as soon as nobody
//! does, the key is forgotten, and a key seen again starts with fresh seats whose tokens go on
//! past every forgotten key's, so that a key's tokens only grow. At most `max_keys` keys are
//! kept; a new key finding the table full is refused, evicting nobody, and may leave a `W` to
//! be told when a key is forgotten (room may then have appeared).

use std::collections::HashMap;
use std::hash::Hash;

use super::{Asked as SeatsAsked, Grant, Seats, SeatsError, Ticket, Woken};

/// What a change leaves the caller to do once unlocked: waiters to wake, and wakers no longer
/// needed, to let go of (letting go of one may itself run code that must not run locked).
#[derive(Debug)]
pub struct Told<W> {
    pub wake: Vec<W>,
    pub drop: Vec<W>,
}

impl<W> Default for Told<W> {
    fn default() -> Self {
        Told {
            wake: Vec::new(),
            drop: Vec::new(),
        }
    }
}

/// What asking for seats found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Seated(Grant),
    /// In line, with this ticket; the waker was kept in its place.
    InLine(Ticket),
    /// Not free, and the caller would not wait (no waker given).
    Busy,
    /// A new key and a full table: nothing taken. Room may come once [`Table::forgotten`] has
    /// moved past this count; the waker, if given, is told when a key is forgotten.
    NoRoom(u64),
}

/// A waiter's place: how to wake it, and, once decided, what was decided.
struct Place<W> {
    n: u64,
    wake: Option<W>,
    outcome: Option<Result<Grant, SeatsError>>,
}

/// One limit's seats, and the places of its waiters (in line, or decided and not yet told).
struct Line<W> {
    seats: Seats,
    places: HashMap<Ticket, Place<W>>,
}

impl<W> Line<W> {
    fn new(limit: u64, tokens_from: u64) -> Result<Self, SeatsError> {
        Ok(Line {
            seats: Seats::with_tokens_from(limit, tokens_from)?,
            places: HashMap::new(),
        })
    }

    /// Record in their places what a change decided, handing their wakers to `told`.
    fn decided(&mut self, woken: Woken, told: &mut Told<W>) {
        let limit = self.seats.limit();
        let seated = woken.seated.into_iter().map(|(t, grant)| (t, Some(grant)));
        let refused = woken.refused.into_iter().map(|t| (t, None));
        for (ticket, grant) in seated.chain(refused) {
            if let Some(place) = self.places.get_mut(&ticket) {
                let n = place.n;
                place.outcome = Some(grant.ok_or(SeatsError::MoreThanLimit { n, limit }));
                told.wake.extend(place.wake.take());
            }
        }
    }

    /// Nobody holds a seat, and nobody waits or is still to be told.
    fn idle(&self) -> bool {
        self.seats.in_flight() == 0 && self.places.is_empty()
    }
}

/// The lines of a limiter: one, or one per key.
enum Lines<K, W> {
    One(Line<W>),
    PerKey {
        lines: HashMap<K, Line<W>>,
        max_keys: usize,
        /// Where the tokens of a key seen again start: past every forgotten key's.
        tokens_from: u64,
        /// Wakers of callers refused for want of room, told when a key is forgotten.
        room: Vec<W>,
        /// How many keys were forgotten so far.
        forgotten: u64,
    },
}

/// One in-flight limit (`max_keys` None) or one per key, and the places of their waiters.
pub struct Table<K, W> {
    limit: u64,
    lines: Lines<K, W>,
}

impl<K: Hash + Eq + Clone, W> Table<K, W> {
    /// `limit` seats; per key, at most `max_keys` keys at once, if given.
    ///
    /// # Errors
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn new(limit: u64, max_keys: Option<usize>) -> Result<Self, SeatsError> {
        let lines = match max_keys {
            None => Lines::One(Line::new(limit, 1)?),
            Some(max_keys) => {
                Seats::new(limit)?; // the limit checked before any key has seats
                Lines::PerKey {
                    lines: HashMap::new(),
                    max_keys,
                    tokens_from: 1,
                    room: Vec::new(),
                    forgotten: 0,
                }
            }
        };
        Ok(Table { limit, lines })
    }

    /// How many seats each line has.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How many seats are held, and how many callers are in line, over every line.
    #[must_use]
    pub fn counts(&self) -> (u64, usize) {
        let count = |(held, waiting): (u64, usize), line: &Line<W>| {
            (
                held + line.seats.in_flight(),
                waiting + line.seats.waiting(),
            )
        };
        match &self.lines {
            Lines::One(line) => count((0, 0), line),
            Lines::PerKey { lines, .. } => lines.values().fold((0, 0), count),
        }
    }

    /// How many keys have seats now (1 for a limiter of one line).
    #[must_use]
    pub fn keys(&self) -> usize {
        match &self.lines {
            Lines::One(_) => 1,
            Lines::PerKey { lines, .. } => lines.len(),
        }
    }

    /// How many keys were forgotten so far.
    #[must_use]
    pub fn forgotten(&self) -> u64 {
        match self.lines {
            Lines::One(_) => 0,
            Lines::PerKey { forgotten, .. } => forgotten,
        }
    }

    fn line(&mut self, key: Option<&K>) -> Option<&mut Line<W>> {
        match (&mut self.lines, key) {
            (Lines::One(line), _) => Some(line),
            (Lines::PerKey { lines, .. }, Some(key)) => lines.get_mut(key),
            (Lines::PerKey { .. }, None) => None,
        }
    }

    /// `n` seats of `key`'s line (`key` is None for a limiter of one line): seated now; or,
    /// given a waker, in line; or for a new key in a full table, refused for now. A waker kept
    /// (in a place, or until room comes) is taken out of `wake`: one left there was not kept.
    ///
    /// # Errors
    /// As [`Seats::try_take`].
    pub fn ask(
        &mut self,
        key: Option<&K>,
        n: u64,
        wake: &mut Option<W>,
    ) -> Result<Asked, SeatsError> {
        let limit = self.limit;
        if let (
            Lines::PerKey {
                lines,
                max_keys,
                tokens_from,
                room,
                forgotten,
            },
            Some(key),
        ) = (&mut self.lines, key)
        {
            if !lines.contains_key(key) {
                // A new key: fresh seats, where the request always fits, kept only if there
                // is room for them.
                let mut line = Line::new(limit, *tokens_from)?;
                let grant = line.seats.try_take(n)?;
                if lines.len() >= *max_keys {
                    room.extend(wake.take());
                    return Ok(Asked::NoRoom(*forgotten));
                }
                lines.insert(key.clone(), line);
                return Ok(grant.map_or(Asked::Busy, Asked::Seated));
            }
        }
        let Some(line) = self.line(key) else {
            return Ok(Asked::Busy); // a keyed table asked without a key: nothing to take
        };
        if wake.is_none() {
            return Ok(line.seats.try_take(n)?.map_or(Asked::Busy, Asked::Seated));
        }
        Ok(match line.seats.ask(n)? {
            SeatsAsked::Seated(grant) => Asked::Seated(grant),
            SeatsAsked::InLine(ticket) => {
                let wake = wake.take();
                line.places.insert(
                    ticket,
                    Place {
                        n,
                        wake,
                        outcome: None,
                    },
                );
                Asked::InLine(ticket)
            }
        })
    }

    /// Run `change` on `key`'s line, then forget the key if it became idle.
    fn change<R>(
        &mut self,
        key: Option<&K>,
        told: &mut Told<W>,
        change: impl FnOnce(&mut Line<W>, &mut Told<W>) -> R,
    ) -> Option<R> {
        let result = self.line(key).map(|line| change(line, told));
        if let (
            Lines::PerKey {
                lines,
                tokens_from,
                room,
                forgotten,
                ..
            },
            Some(key),
        ) = (&mut self.lines, key)
        {
            if lines.get(key).is_some_and(Line::idle) {
                if let Some(line) = lines.remove(key) {
                    *tokens_from = (*tokens_from).max(line.seats.next_token());
                    *forgotten += 1;
                    told.wake.append(room);
                }
            }
        }
        result
    }

    /// `n` seats of `key` given back: waiters now seated are told.
    ///
    /// # Errors
    /// [`SeatsError::NotHeld`] for more seats than are held.
    pub fn release(
        &mut self,
        key: Option<&K>,
        n: u64,
        told: &mut Told<W>,
    ) -> Result<(), SeatsError> {
        self.change(key, told, |line, told| {
            let woken = line.seats.release(n)?;
            line.decided(woken, told);
            Ok(())
        })
        .unwrap_or(Err(SeatsError::NotHeld { n, held: 0 }))
    }

    /// What was decided for the waiter of `ticket`, taken out of its place; None while it is
    /// still in line.
    pub fn outcome(
        &mut self,
        key: Option<&K>,
        ticket: Ticket,
        told: &mut Told<W>,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(key, told, |line, _| {
            line.places.get(&ticket)?.outcome.as_ref()?;
            line.places.remove(&ticket)?.outcome
        })
        .flatten()
    }

    /// The waiter of `ticket` gives up: None if it left the line (those behind it who now fit
    /// are told), else what was decided for it meanwhile (seats it now holds, or a refusal).
    pub fn leave(
        &mut self,
        key: Option<&K>,
        ticket: Ticket,
        told: &mut Told<W>,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(key, told, |line, told| {
            let place = line.places.remove(&ticket)?;
            let Some(woken) = line.seats.leave(ticket) else {
                return place.outcome;
            };
            told.drop.extend(place.wake);
            line.decided(woken, told);
            None
        })
        .flatten()
    }

    /// A new limit for every line, evicting nobody: waiters seated or refused are told.
    ///
    /// # Errors
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn resize(&mut self, limit: u64, told: &mut Told<W>) -> Result<(), SeatsError> {
        Seats::new(limit)?;
        self.limit = limit;
        let lines: Vec<&mut Line<W>> = match &mut self.lines {
            Lines::One(line) => vec![line],
            Lines::PerKey { lines, .. } => lines.values_mut().collect(),
        };
        for line in lines {
            let woken = line.seats.resize(limit)?;
            line.decided(woken, told);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
