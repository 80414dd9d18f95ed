//! One in-flight limit for every process of a host: the seats, the leases and the line, in
//! words that every process maps from one file.
//!
//! The rules are [`rules`](super::rules)', the same functions that seat the waiters of
//! [`Seats`](super::Seats) (weighted, first come first seated, a waiter that gives up passes
//! its turn on, fencing tokens, resizing evicts nobody), run here on a key's words
//! (`line.rs`: how a key keeps its seats, its line and its waiters' news). What sharing adds
//! is that every lease and every waiter is a *record* in the table, owned by a process:
//!
//! * **Records.** A caller seated at once gets a record in state held; a caller that waits gets
//!   one in state waiting, linked at the end of its key's line. Seats given back seat the head
//!   of the line at once, in the giver's process: the waiter's record turns held, with its
//!   token, and the waiter, which looks at its record now and then, finds it so. A lease is
//!   released by its record and token, so a release that comes late (its lease reclaimed, its
//!   record reused) changes nothing.
//! * **Owners.** Each process using the table holds one of [`OWNERS`] owner slots, and a byte
//!   of the file locked with a lock the kernel drops when the process dies or `exec`s (the glue
//!   does that, `owner_lock.rs`). A slot found in use whose byte anyone can lock belongs to a
//!   dead process: [`SharedSeats::reclaim`] gives back its leases and takes its waiters out of
//!   line, exactly as their own release and leave would have.
//! * **One lock, and an undo log.** Every change runs under the table's one robust mutex and
//!   writes through [`undo::Change`], so a holder killed halfway leaves a change undone, never
//!   torn.
//! * **Keys.** A key has seats only while someone holds or waits for them (at most `max_keys`
//!   at once), found by its 128-bit digest; a key's line and seats go when they are idle. The
//!   one-key form is a table of one key. Tokens come from one counter for the whole table, so
//!   they strictly increase per limit and per key, a forgotten key's included.
//! * **Room.** A table has a fixed number of records: a caller that finds none free is told
//!   [`Asked::NoRoom`], as one whose new key finds `max_keys` keys in use, and asks again later.

mod layout;
mod line;
mod undo;

use std::hash::Hasher;
use std::sync::atomic::AtomicU64;

use siphasher::sip128::{Hasher128, SipHasher13};

use layout::{at, key, record, LOG, OWNERS_AT};
pub use layout::{Layout, LOG_ENTRIES, OWNERS, VERSION};
use line::{free_record, linked, KeyLine};
use undo::{roll_back, Change};

use super::rules;
use super::{Grant, SeatsError};
use crate::core::exact::key::{encode_item, KeyRef};
use crate::core::exact::shared::layout::LayoutError;
use crate::core::exact::shared::lock::{self, Park};
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::shared::Words;

/// The digest of the one-key form's one key.
pub const THE_KEY: Digest = (0, 0);

/// Seats held under a record of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub record: usize,
    pub grant: Grant,
}

/// What asking for seats found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Seated(Held),
    /// In line, in this record.
    InLine(usize),
    /// Not free, and the caller would not wait.
    Busy,
    /// No record free, or a new key and `max_keys` keys in use: nothing taken; ask again later.
    NoRoom,
}

/// An in-flight table on `words`.
pub struct SharedSeats<W> {
    words: W,
    layout: Layout,
    park: Park,
}

impl<W: Words> SharedSeats<W> {
    /// Write a new table of `limit` seats into `words` (all zero, [`Layout::words`] long).
    ///
    /// # Errors
    ///
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn create(
        words: W,
        layout: Layout,
        limit: u64,
        seed: (u64, u64),
    ) -> Result<Self, SeatsError> {
        if limit == 0 {
            return Err(SeatsError::Limit(limit));
        }
        layout.write(&words, limit, seed);
        Ok(SharedSeats {
            words,
            layout,
            park: lock::park_here,
        })
    }

    /// Open the table in `words`, checked to be one of `layout`.
    ///
    /// # Errors
    ///
    /// What is wrong with it.
    pub fn open(words: W, layout: Layout) -> Result<Self, LayoutError> {
        layout.check(&words)?;
        Ok(SharedSeats {
            words,
            layout,
            park: lock::park_here,
        })
    }

    /// The same table, waiting for its lock through `park`.
    #[must_use]
    pub fn with_park(self, park: Park) -> Self {
        SharedSeats { park, ..self }
    }

    /// The words it lives in.
    pub fn words(&self) -> &W {
        &self.words
    }

    /// Its shape.
    #[must_use]
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The digest of a key, under the table's seed.
    #[must_use]
    pub fn digest_of(&self, key: KeyRef<'_>) -> Digest {
        let mut encoded = Vec::with_capacity(32);
        encode_item(key, &mut encoded);
        let mut hasher = SipHasher13::new_with_keys(self.word(at::SEED), self.word(at::SEED + 1));
        hasher.write(&encoded);
        let hash = hasher.finish128();
        (hash.h1, hash.h2)
    }

    fn word(&self, index: usize) -> u64 {
        self.words[index].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The limit (every key's).
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.word(at::LIMIT)
    }

    /// Seats held over every key.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.word(at::HELD)
    }

    /// Callers waiting over every key.
    #[must_use]
    pub fn waiting(&self) -> u64 {
        self.word(at::WAITING)
    }

    /// Keys in use.
    #[must_use]
    pub fn keys(&self) -> u64 {
        self.word(at::KEYS)
    }

    /// Run `change` holding the table's lock, after undoing what a dead holder left half done.
    fn locked<R>(&self, change: impl FnOnce(&mut Change<'_>) -> R) -> R {
        let words: &[AtomicU64] = &self.words;
        let _held = lock::lock(&words[at::LOCK..], self.park);
        if self.word(at::LOG_LEN) != 0 {
            roll_back(words, LOG);
        }
        let mut writes = Change::new(words, LOG);
        let result = change(&mut writes);
        writes.done();
        result
    }

    /// The slot of the key of `digest`, or the empty slot where it would go.
    fn find(&self, c: &Change<'_>, digest: Digest) -> Result<usize, usize> {
        let mask = self.layout.key_slots - 1;
        #[allow(clippy::cast_possible_truncation)] // the low bits pick the slot
        let mut slot = digest.0 as usize & mask;
        loop {
            let at = self.layout.key(slot);
            if c.get(at + key::USED) == 0 {
                return Err(slot);
            }
            if (c.get(at + key::D0), c.get(at + key::D1)) == digest {
                return Ok(slot);
            }
            slot = (slot + 1) & mask;
        }
    }

    fn record_of(&self, c: &Change<'_>, index: usize) -> (u64, u64, Digest, u64, u64) {
        let at = self.layout.record(index);
        (
            c.get(at + record::STATE),
            c.get(at + record::OWNER),
            (c.get(at + record::D0), c.get(at + record::D1)),
            c.get(at + record::N),
            c.get(at + record::TOKEN),
        )
    }

    /// A free record, taken off the free list and given `owner`, `digest` and `n`.
    fn take_record(
        &self,
        c: &mut Change<'_>,
        owner: usize,
        digest: Digest,
        n: u64,
    ) -> Option<usize> {
        let index = linked(c.get(at::FREE))?;
        let at = self.layout.record(index);
        c.set(at::FREE, c.get(at + record::NEXT));
        c.set(at + record::NEXT, 0);
        c.add(at::IN_USE, 1);
        c.set(at + record::OWNER, owner as u64 + 1);
        c.set(at + record::D0, digest.0);
        c.set(at + record::D1, digest.1);
        c.set(at + record::N, n);
        Some(index)
    }

    /// The seats and line of the key in `slot`, as the rules see them.
    fn line<'c, 'w>(&self, c: &'c mut Change<'w>, slot: usize) -> KeyLine<'c, 'w> {
        KeyLine::new(c, self.layout, slot)
    }

    /// Forget the key in `slot` if nobody holds or waits for it (after a change that may have
    /// left it so).
    fn forget_if_idle(&self, c: &mut Change<'_>, slot: usize) {
        if self.line(c, slot).idle() {
            self.forget(c, slot);
        }
    }

    /// Free the key in `slot`, moving back the keys after it that probed past it (deletion in
    /// linear probing, without tombstones).
    fn forget(&self, c: &mut Change<'_>, mut hole: usize) {
        let mask = self.layout.key_slots - 1;
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let at = self.layout.key(next);
            if c.get(at + key::USED) == 0 {
                break;
            }
            #[allow(clippy::cast_possible_truncation)] // the low bits pick the slot
            let first = c.get(at + key::D0) as usize & mask;
            // Does its first slot lie cyclically in (hole, next]? Then the key stays there.
            let stays = if hole <= next {
                hole < first && first <= next
            } else {
                hole < first || first <= next
            };
            if !stays {
                let to = self.layout.key(hole);
                for word in 0..key::WORDS {
                    c.set(to + word, c.get(at + word));
                }
                hole = next;
            }
        }
        let at = self.layout.key(hole);
        for word in 0..key::WORDS {
            c.set(at + word, 0);
        }
        c.add(at::KEYS, u64::MAX);
        c.done();
    }

    /// `n` seats of the key of `digest` for `owner`: seated now if nobody waits and they are
    /// free; else, if `wait`, in line; else busy.
    ///
    /// # Errors
    ///
    /// [`SeatsError::NoSeats`] for `n` = 0, [`SeatsError::MoreThanLimit`] for more seats than
    /// the limit has.
    pub fn ask(
        &self,
        owner: usize,
        digest: Digest,
        n: u64,
        wait: bool,
    ) -> Result<Asked, SeatsError> {
        self.locked(|c| {
            rules::check(c.get(at::LIMIT), n)?;
            let slot = match self.find(c, digest) {
                Ok(slot) => slot,
                Err(_) if c.get(at::KEYS) >= self.layout.max_keys => return Ok(Asked::NoRoom),
                Err(empty) => empty,
            };
            // An unused slot reads as a key with no seat held and nobody in line.
            let free = rules::free_now(&self.line(c, slot), n);
            if !free && !wait {
                return Ok(Asked::Busy);
            }
            let Some(index) = self.take_record(c, owner, digest, n) else {
                return Ok(Asked::NoRoom);
            };
            let key = self.layout.key(slot);
            if c.get(key + key::USED) == 0 {
                c.set(key + key::USED, 1);
                c.set(key + key::D0, digest.0);
                c.set(key + key::D1, digest.1);
                c.add(at::KEYS, 1);
            }
            let mut line = self.line(c, slot);
            if free {
                let grant = rules::grant(&mut line, n);
                line.hold(index, grant);
                return Ok(Asked::Seated(Held {
                    record: index,
                    grant,
                }));
            }
            line.join(index);
            Ok(Asked::InLine(index))
        })
    }

    /// What was decided for `owner`'s waiter in record `index`: None while it waits; its seats
    /// once seated; a refusal (its record freed) if a smaller limit refused it.
    pub fn outcome(&self, owner: usize, index: usize) -> Option<Result<Held, SeatsError>> {
        self.locked(|c| self.decided(c, owner, index))
    }

    fn decided(
        &self,
        c: &mut Change<'_>,
        owner: usize,
        index: usize,
    ) -> Option<Result<Held, SeatsError>> {
        let (state, of, _, n, token) = self.record_of(c, index);
        if of != owner as u64 + 1 {
            return None;
        }
        match state {
            record::HELD => Some(Ok(Held {
                record: index,
                grant: Grant { n, token },
            })),
            record::REFUSED => {
                free_record(c, &self.layout, index);
                let limit = c.get(at::LIMIT);
                Some(Err(SeatsError::MoreThanLimit { n, limit }))
            }
            _ => None,
        }
    }

    /// `owner`'s waiter in record `index` gives up: None if it left the line (those behind it
    /// who now fit are seated), else what was decided for it meanwhile.
    pub fn leave(&self, owner: usize, index: usize) -> Option<Result<Held, SeatsError>> {
        self.locked(|c| {
            let (state, of, digest, _, _) = self.record_of(c, index);
            if state != record::WAITING || of != owner as u64 + 1 {
                return self.decided(c, owner, index);
            }
            self.drop_waiter(c, index, digest);
            None
        })
    }

    /// The waiter in record `index` leaves the line of the key of `digest`, its record freed.
    fn drop_waiter(&self, c: &mut Change<'_>, index: usize, digest: Digest) {
        if let Ok(slot) = self.find(c, digest) {
            rules::leave(&mut self.line(c, slot), index);
            self.forget_if_idle(c, slot);
        }
    }

    /// Give back the seats of `owner`'s lease in record `index` with `token`: false if they
    /// were given back already (a release that comes late changes nothing).
    pub fn release(&self, owner: usize, index: usize, token: u64) -> bool {
        self.locked(|c| {
            let (state, of, digest, _, held_token) = self.record_of(c, index);
            if state != record::HELD || of != owner as u64 + 1 || held_token != token {
                return false;
            }
            self.give_back(c, index, digest);
            true
        })
    }

    /// The lease in record `index` gives its seats back to the key of `digest`. Its record is
    /// freed first: the first waiter seated makes a consistent point, and the lease must be
    /// gone by then, with its seats.
    fn give_back(&self, c: &mut Change<'_>, index: usize, digest: Digest) {
        let n = c.get(self.layout.record(index) + record::N);
        if let Ok(slot) = self.find(c, digest) {
            free_record(c, &self.layout, index);
            // A lease's seats are counted among its key's: giving them back is never refused.
            let released = rules::release(&mut self.line(c, slot), n);
            debug_assert!(released.is_ok(), "a lease's seats are held");
            self.forget_if_idle(c, slot);
        }
    }

    /// A new limit for every key, evicting nobody: waiters that now fit are seated, those
    /// asking for more than it are refused (told by [`SharedSeats::outcome`]).
    ///
    /// # Errors
    ///
    /// [`SeatsError::Limit`] for a limit of 0.
    pub fn resize(&self, limit: u64) -> Result<(), SeatsError> {
        if limit == 0 {
            return Err(SeatsError::Limit(limit));
        }
        self.locked(|c| {
            // Every key's limit is this one word: set here once, for a table with no key too.
            c.set(at::LIMIT, limit);
            c.done();
            let digests: Vec<Digest> = (0..self.layout.key_slots)
                .map(|slot| self.layout.key(slot))
                .filter(|&at| c.get(at + key::USED) != 0)
                .map(|at| (c.get(at + key::D0), c.get(at + key::D1)))
                .collect();
            for digest in digests {
                // Forgetting a key may move another back a slot: each is found again.
                let Ok(slot) = self.find(c, digest) else {
                    continue;
                };
                rules::resize(&mut self.line(c, slot), limit)?;
                self.forget_if_idle(c, slot);
            }
            Ok(())
        })
    }

    /// The owner slots in use.
    #[must_use]
    pub fn owners_in_use(&self) -> Vec<usize> {
        (0..OWNERS)
            .filter(|&owner| self.word(OWNERS_AT + owner) != 0)
            .collect()
    }

    /// Take owner slot `owner` for a process that has just locked its byte: what a dead
    /// process left in it is reclaimed first.
    pub fn claim(&self, owner: usize) {
        if self.word(OWNERS_AT + owner) != 0 {
            self.reclaim(owner);
        }
        self.locked(|c| c.set(OWNERS_AT + owner, 1));
    }

    /// Give back every lease of owner slot `owner` and take its waiters out of line, as their
    /// own calls would have, then free the slot: for a process that is gone (its byte could be
    /// locked), or one that lets go of the table. Returns how many records it had.
    pub fn reclaim(&self, owner: usize) -> usize {
        let mine = owner as u64 + 1;
        let mut found = 0;
        // No record in use, anyone's: nothing to look for.
        let records = if self.word(at::IN_USE) == 0 {
            0
        } else {
            self.layout.records
        };
        for index in 0..records {
            self.locked(|c| {
                let (state, of, digest, _, _) = self.record_of(c, index);
                if of != mine {
                    return;
                }
                found += 1;
                match state {
                    record::HELD => self.give_back(c, index, digest),
                    record::WAITING => self.drop_waiter(c, index, digest),
                    _ => free_record(c, &self.layout, index),
                }
            });
        }
        self.locked(|c| c.set(OWNERS_AT + owner, 0));
        found
    }
}

#[cfg(test)]
mod tests;
