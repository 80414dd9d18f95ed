//! What a keyed table answers for a key: a decision or a refusal (a new key the full table
//! cannot take), a reservation or a refusal, and the whole tokens left.
//!
//! Both keyed tables answer in these words (the in-process [`keyed`](super::keyed) and the
//! shared [`shared`](super::shared)), and the one decision of [`home`](super::home) makes them:
//! they are their own module so that the decision and the tables depend on them, not on each
//! other.

use crate::core::exact::limiter::{Decision, Reservation};

/// What a keyed limiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedDecision {
    /// The key's own limiter decided.
    Decided(Decision),
    /// The key is new and the table is full of keys that cannot be forgotten: refused, without
    /// evicting anyone. The first of those keys can be forgotten `retry_in` nanoseconds from
    /// the caller's time (a hint: someone else may take the room first, and a shard that was
    /// busy when the table was swept is not counted).
    Refused { retry_in: u128 },
}

impl KeyedDecision {
    /// This decision, made at a table's time, with its waits counted from a caller's time
    /// `behind` nanoseconds earlier.
    #[must_use]
    pub fn from_caller(self, behind: u128) -> Self {
        match self {
            Self::Decided(Decision::Wait(ns)) => {
                Self::Decided(Decision::Wait(ns.saturating_add(behind)))
            }
            Self::Refused { retry_in } => Self::Refused {
                retry_in: retry_in.saturating_add(behind),
            },
            decided @ Self::Decided(_) => decided,
        }
    }

    /// The decision's outcome code, as a whole trace's answers carry it (and `LimitOutcome`
    /// numbers it): 0 allowed, 1 denied, 2 never, 3 refused.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Self::Decided(Decision::Allowed) => 0,
            Self::Decided(Decision::Wait(_)) => 1,
            Self::Decided(Decision::Never) => 2,
            Self::Refused { .. } => 3,
        }
    }

    /// How long until the same request would pass, as an answer says it: 0 when allowed, the
    /// wait when denied, the hint when refused, and `None` when no wait is ever enough.
    #[must_use]
    pub fn wait_ns(self) -> Option<u128> {
        match self {
            Self::Decided(Decision::Allowed) => Some(0),
            Self::Decided(Decision::Wait(ns)) | Self::Refused { retry_in: ns } => Some(ns),
            Self::Decided(Decision::Never) => None,
        }
    }

    /// The decision of outcome `code` (see [`KeyedDecision::code`]; any code past 2 is a
    /// refusal), read back from its two parts; `wait_ns` is asked for only where the outcome
    /// has a wait (denied, refused).
    ///
    /// # Errors
    ///
    /// What `wait_ns` fails with.
    pub fn from_code<E>(code: u8, wait_ns: impl FnOnce() -> Result<u128, E>) -> Result<Self, E> {
        Ok(match code {
            0 => Self::Decided(Decision::Allowed),
            1 => Self::Decided(Decision::Wait(wait_ns()?)),
            2 => Self::Decided(Decision::Never),
            _ => Self::Refused {
                retry_in: wait_ns()?,
            },
        })
    }
}

/// What [`KeyedLimiter::reserve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedReservation {
    /// The key's own limiter decided, its waits counted from the caller's time.
    Decided(Reservation),
    /// The key is new and the table is full: nothing is taken, as for
    /// [`KeyedDecision::Refused`].
    Refused { retry_in: u128 },
}

/// A decision, and the whole tokens the key holds after it (every band's least).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Answer {
    pub decision: KeyedDecision,
    pub remaining: u128,
}

impl Answer {
    /// The whole tokens the answer says are left: none for a refused key, which the table does
    /// not hold, whatever a caller put beside the refusal.
    #[must_use]
    pub fn left(&self) -> u128 {
        match self.decision {
            KeyedDecision::Refused { .. } => 0,
            KeyedDecision::Decided(_) => self.remaining,
        }
    }
}
