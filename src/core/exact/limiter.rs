//! A rate limiter of one or more bands, each an exact lazily settled bucket.
//!
//! A band is a rate and a burst ("10 per second, at most 10 at once"); a limiter may hold several
//! ("... and 1000 per hour"). Every operation first settles each band up to `now` with
//! [`settle`](super::settle::settle), exactly as the lesson's bucket refills before deciding, and
//! then:
//!
//! * [`Limiter::acquire`] takes `n` tokens from **every** band or from none: a request is
//!   allowed only if each band holds `n`, and a denied request takes nothing anywhere.
//! * The answer is one of three, never confused: [`Decision::Allowed`]; [`Decision::Wait`] with
//!   the exact number of nanoseconds after which the same request would be allowed (one
//!   nanosecond earlier it is still denied), the longest of the bands' waits; or
//!   [`Decision::Never`] when `n` exceeds some band's burst, which no wait can fix.
//! * [`Limiter::reserve`] is how a caller that will wait gets its turn: the tokens are taken at
//!   the moment they will be there, so later callers queue behind it.
//!
//! The bands' state alone, without their specs, is [`Balances`] (`balances.rs`): what a keyed
//! table keeps per key, and what every decision here runs on.

use crate::core::exact::clock_gap::off_the_clock;
use crate::core::exact::rate::BandSpec;
use crate::core::exact::settle::{settle, Balance};

mod balances;

pub use balances::Balances;

/// Why a saved state (a pickle's) could not be restored; nothing is restored then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreError {
    /// The saved balances are not one per band.
    Bands,
    /// A saved balance holds more than its band's burst.
    OverBurst,
    /// A saved key is settled later than the saved table's clock allows.
    Ahead,
    /// A key appears twice.
    Duplicate,
    /// More keys than `max_keys`.
    Overfull,
    /// A table that has been used: only a new one takes a saved state.
    Used,
}

/// One band: its fixed numbers and its current balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Band {
    pub spec: BandSpec,
    pub balance: Balance,
}

impl Band {
    fn settle(&mut self, now_ns: i64) {
        self.balance = settle(
            self.balance,
            self.spec.rate.units_per_ns(),
            self.spec.capacity_units(),
            now_ns,
        );
    }

    /// What this band says about `n` tokens at `now_ns`, as it stands. A wait counts from
    /// `now_ns`: if the clock is behind the settlement point (it went backwards), the time
    /// until it catches up is part of the wait, since nothing accrues before then.
    fn decide(&self, n: u64, now_ns: i64) -> Decision {
        let Some(need) = self.spec.units_of(n) else {
            return Decision::Never;
        };
        match need.checked_sub(self.balance.units) {
            None | Some(0) => Decision::Allowed,
            Some(deficit) => {
                let behind = self.balance.settled_at.map_or(0, |settled_at| {
                    (i128::from(settled_at) - i128::from(now_ns))
                        .max(0)
                        .unsigned_abs()
                });
                Decision::Wait(behind + deficit.div_ceil(self.spec.rate.units_per_ns()))
            }
        }
    }

    /// [`Balances::acquire`] for a limiter of this one band.
    fn acquire(&mut self, n: u64, now_ns: i64) -> Decision {
        self.settle(now_ns);
        let decision = self.decide(n, now_ns);
        if decision == Decision::Allowed {
            // Allowed: `n` is within the burst, and the balance holds its units.
            self.balance.units -= u128::from(n) * self.spec.rate.units_per_token();
        }
        decision
    }

    /// When this band is full if nothing is taken: its settlement point plus the time its
    /// deficit takes to accrue.
    fn full_from(&self) -> i64 {
        let deficit = self.spec.capacity_units() - self.balance.units;
        let Some(settled_at) = self.balance.settled_at else {
            return if deficit == 0 { i64::MIN } else { i64::MAX };
        };
        let refill = deficit.div_ceil(self.spec.rate.units_per_ns());
        i64::try_from(i128::from(settled_at).saturating_add_unsigned(refill)).unwrap_or(i64::MAX)
    }

    /// Give back `n` tokens taken from this band, as if they had never been taken: see
    /// [`Balances::give_back`] for when that is safe.
    ///
    /// Settled at or before `now_ns`, they are plain tokens again, capped at the burst.
    /// Settled ahead of `now_ns` (a reservation took them there), the settlement is run
    /// backwards: the band as it stands there, with the units given back (capped at the
    /// burst), loses `per_ns` units for every nanosecond it moves back, down to an empty band
    /// or to `now_ns`. Whatever the band held there (a faster band of several, settled forward
    /// to the slowest one's moment, holds more than the reservation took), nothing is then held
    /// before it has accrued, and the cap can only have cut what comes back, never added to it.
    fn undo(&mut self, n: u64, now_ns: i64) {
        let returned = u128::from(n) * self.spec.rate.units_per_token();
        let per_ns = self.spec.rate.units_per_ns();
        let Some(settled_at) = self.balance.settled_at.filter(|&at| at > now_ns) else {
            self.settle(now_ns);
            self.balance.units = (self.balance.units + returned).min(self.spec.capacity_units());
            return;
        };
        let total = (self.balance.units + returned).min(self.spec.capacity_units());
        let ahead = u128::from(settled_at.abs_diff(now_ns));
        let (settled_at, units) = if total / per_ns < ahead {
            // Fewer nanoseconds back than `settled_at` is ahead of `now_ns`: within i64.
            let back = i64::try_from(total / per_ns).unwrap_or(i64::MAX);
            (settled_at - back, total % per_ns)
        } else {
            (now_ns, total - ahead * per_ns)
        };
        self.balance = Balance {
            units,
            settled_at: Some(settled_at),
        };
    }

    /// Take `tokens` even beyond what this band holds, at the point it is settled to (`now_ns`
    /// if it was never settled). What it lacks is a debt, and a debt is held as time: the
    /// units cannot go below zero, so the settlement point moves ahead by the nanoseconds the
    /// missing units take to accrue, exactly as a reservation settles a band ahead. Nothing
    /// accrues to anyone before that point, so later callers wait until the debt is repaid,
    /// to the nanosecond.
    ///
    /// The move is rounded up to whole nanoseconds, and what that rounding over-counts is
    /// left in the band as units, up to its burst: at the new point it holds exactly what an
    /// account allowed to go below zero, and capped at the burst as every refill is, would
    /// hold there. A call before that point is answered from it, as behind a reservation: it
    /// may be given what accrues within the debt's last nanosecond, the clock's grain. A debt
    /// that would carry the point beyond the clock's range (`i64::MAX` ns, in the year 2262)
    /// is held there instead, with nothing left in the band.
    fn take_beyond(&mut self, tokens: u64, now_ns: i64) {
        let need = u128::from(tokens).saturating_mul(self.spec.rate.units_per_token());
        if let Some(left) = self.balance.units.checked_sub(need) {
            self.balance.units = left;
            return;
        }
        let debt = need - self.balance.units;
        let per_ns = self.spec.rate.units_per_ns();
        let repaid_in = debt.div_ceil(per_ns);
        let settled_at = self.balance.settled_at.unwrap_or(now_ns);
        let moved = i64::try_from(i128::from(settled_at).saturating_add_unsigned(repaid_in));
        self.balance = match moved {
            // Rounding up to a whole nanosecond over-counts less than one nanosecond's units,
            // which for a band faster than its burst per nanosecond is more than the band
            // holds: it keeps its burst, as a refill would.
            Ok(at) => Balance {
                units: (repaid_in * per_ns - debt).min(self.spec.capacity_units()),
                settled_at: Some(at),
            },
            Err(_) => Balance {
                units: 0,
                settled_at: Some(i64::MAX),
            },
        };
    }

    /// Whole tokens held.
    fn whole_tokens(&self) -> u128 {
        self.balance.units / self.spec.rate.units_per_token()
    }

    /// Whole tokens held, and the nanoseconds from `now_ns` until this band could give one
    /// more: until the next whole token accrues, or, for a full band, the time one token
    /// takes to accrue once it is spent from. Until then, nobody can take more than the
    /// whole tokens held.
    fn level(&self, now_ns: i64) -> Level {
        let per_token = self.spec.rate.units_per_token();
        let whole = self.balance.units / per_token;
        let deficit = (whole + 1) * per_token - self.balance.units;
        let behind = self.balance.settled_at.map_or(0, |settled_at| {
            (i128::from(settled_at) - i128::from(now_ns))
                .max(0)
                .unsigned_abs()
        });
        Level {
            tokens: whole,
            next_ns: behind + deficit.div_ceil(self.spec.rate.units_per_ns()),
        }
    }
}

/// One band's whole tokens, and the nanoseconds until it can give one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Level {
    pub tokens: u128,
    pub next_ns: u128,
}

/// The answer to "may I take `n` tokens now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Yes (and, from [`Limiter::acquire`], they were taken).
    Allowed,
    /// Not yet: the same request is allowed after exactly this many nanoseconds, and not one
    /// nanosecond sooner (if nothing else takes tokens meanwhile).
    Wait(u128),
    /// Not ever: `n` is more than some band can hold.
    Never,
}

/// What [`Limiter::reserve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reservation {
    /// The tokens are taken, as of `after_ns` nanoseconds from the caller's time (0: now); the
    /// caller waits that long before it uses them.
    Taken { after_ns: u128 },
    /// Nothing is taken: the tokens would only be there after this many nanoseconds, longer
    /// than the caller will wait.
    TooLate(u128),
    /// Nothing is taken: `n` is more than some band can hold.
    Never,
}

impl Reservation {
    /// This reservation, made at a table's time, with its waits counted from a caller's time
    /// `behind` nanoseconds earlier (a keyed table decides a late caller at its own clock).
    #[must_use]
    pub fn from_caller(self, behind: u128) -> Self {
        match self {
            Self::Taken { after_ns: 0 } => Self::Taken { after_ns: 0 },
            Self::Taken { after_ns } => Self::Taken {
                after_ns: after_ns.saturating_add(behind),
            },
            Self::TooLate(wait) => Self::TooLate(wait.saturating_add(behind)),
            Self::Never => Self::Never,
        }
    }
}

impl Decision {
    /// The answer of several bands together: never if any says never, else the longest wait.
    fn and(self, other: Self) -> Self {
        match (self, other) {
            (Self::Never, _) | (_, Self::Never) => Self::Never,
            (Self::Wait(a), Self::Wait(b)) => Self::Wait(a.max(b)),
            (Self::Wait(a), Self::Allowed) | (Self::Allowed, Self::Wait(a)) => Self::Wait(a),
            (Self::Allowed, Self::Allowed) => Self::Allowed,
        }
    }
}

/// Bands consumed all-or-nothing: their specs, their [`Balances`], and the limiter's clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limiter {
    specs: Box<[BandSpec]>,
    balances: Balances,
    /// The limiter's clock: the latest time a call has used ([`Limiter::on_the_clock`]); before
    /// the first, `start_ns`, or a restored limiter's latest saved settlement.
    latest: Option<i64>,
    /// Restored from saved bands and not called since: its first call may re-anchor it.
    restored: bool,
}

impl Limiter {
    /// Bands holding `initial` tokens each (their full burst if `None`), settled from
    /// `start_ns`, or from the first call's `now` if `None`.
    ///
    /// # Panics
    ///
    /// If `initial` exceeds a band's burst (callers check that first).
    #[must_use]
    pub fn new(specs: &[BandSpec], initial: Option<u64>, start_ns: Option<i64>) -> Self {
        Self {
            specs: specs.into(),
            balances: Balances::new(specs, initial, start_ns),
            latest: start_ns,
            restored: false,
        }
    }

    /// A limiter with these exact bands and balances (to restore a saved one). Its clock is
    /// its latest settlement until its first call, which may re-anchor it (see
    /// [`Limiter::on_the_clock`]).
    #[must_use]
    pub fn from_bands(bands: &[Band]) -> Self {
        Self {
            specs: bands.iter().map(|band| band.spec).collect(),
            balances: bands
                .iter()
                .map(|band| band.balance)
                .collect::<Vec<_>>()
                .into(),
            latest: Self::saved_clock(bands.iter().map(|band| band.balance), None),
            restored: true,
        }
    }

    /// The clock of a limiter saved with `balances`: the `clock` saved with them, or, saved
    /// without one, their latest settlement.
    #[must_use]
    pub fn saved_clock(
        balances: impl IntoIterator<Item = Balance>,
        clock: Option<i64>,
    ) -> Option<i64> {
        clock.or_else(|| {
            balances
                .into_iter()
                .filter_map(|balance| balance.settled_at)
                .max()
        })
    }

    /// A limiter of `specs` restored from balances saved elsewhere (a pickle), and the clock
    /// saved with them, if any (see [`Limiter::with_clock`]); else its clock is its latest
    /// settlement. Its first call may re-anchor it (see [`Limiter::on_the_clock`]).
    ///
    /// # Errors
    ///
    /// Balances that are not one per band, or one above its band's burst (see
    /// [`Balances::saved`]).
    pub fn saved(
        specs: &[BandSpec],
        saved: Vec<Balance>,
        clock: Option<i64>,
    ) -> Result<Self, RestoreError> {
        let balances = Balances::saved(specs, saved)?;
        let bands: Vec<Band> = balances.bands(specs).collect();
        Ok(Self::from_bands(&bands).with_clock(clock))
    }

    /// Every call's time goes through here first, under the same lock as the call.
    ///
    /// * **A restored limiter's first call, earlier than its saved settlement, re-anchors
    ///   it.** Its times were read on a clock that is not this one (a limiter saved while
    ///   driven by `now_ns=10**15`, then asked at `now_ns=5`): every settlement point moves
    ///   back to this call's time, so the saved balances take up refilling from now. Taken as a
    ///   clock that ran backwards, they would wait until the old clock's time came round.
    /// * **A time more than [`MAX_CLOCK_GAP_NS`](super::clock_gap::MAX_CLOCK_GAP_NS) from the
    ///   clock, either way, is refused**: `Err` with how far it is (positive when ahead), and
    ///   nothing changes. It was read on another clock; see [`super::clock_gap`].
    /// * Otherwise the clock moves up to this time, if it is later.
    ///
    /// # Errors
    ///
    /// The gap, when `now_ns` is too far from the clock.
    pub fn on_the_clock(&mut self, now_ns: i64) -> Result<(), i128> {
        if self.restored {
            if let Some(latest) = self.latest.filter(|&latest| now_ns < latest) {
                self.balances.shift(now_ns.saturating_sub(latest));
                self.latest = Some(now_ns);
            }
        }
        if let Some(gap) = self.latest.and_then(|latest| off_the_clock(latest, now_ns)) {
            // Refused, changing nothing: a restored limiter may still re-anchor at the next.
            return Err(gap);
        }
        self.restored = false;
        self.latest = Some(self.latest.map_or(now_ns, |latest| latest.max(now_ns)));
        Ok(())
    }

    /// The limiter's clock: the latest time a call has used (see [`Limiter::on_the_clock`]),
    /// saved with its bands so that a copy keeps it.
    #[must_use]
    pub fn clock(&self) -> Option<i64> {
        self.latest
    }

    /// A restored limiter whose clock was saved too: its first call re-anchors it only if it
    /// is earlier than that clock. A waiter's reservation settles a band ahead of the clock, so
    /// the latest settlement alone would take a copy made while a waiter waits for one made
    /// on another clock, and re-anchor it, handing out the reserved turn again.
    #[must_use]
    pub fn with_clock(mut self, latest: Option<i64>) -> Self {
        if latest.is_some() {
            self.latest = latest;
        }
        self
    }

    /// The bands, in order, each with its balance.
    #[must_use]
    pub fn bands(&self) -> Vec<Band> {
        self.balances.bands(&self.specs).collect()
    }

    /// Settle to `now_ns`, then take `n` tokens from every band if each holds them.
    pub fn acquire(&mut self, n: u64, now_ns: i64) -> Decision {
        self.balances.acquire(&self.specs, n, now_ns)
    }

    /// See [`Balances::reserve`].
    pub fn reserve(&mut self, n: u64, now_ns: i64, max_wait_ns: u128) -> Reservation {
        self.balances.reserve(&self.specs, n, now_ns, max_wait_ns)
    }

    /// See [`Balances::give_back`].
    pub fn give_back(&mut self, n: u64, now_ns: i64, reserved_at: i64) {
        self.balances.give_back(&self.specs, n, now_ns, reserved_at);
    }

    /// See [`Balances::peek`].
    pub fn peek(&mut self, n: u64, now_ns: i64) -> Decision {
        self.balances.peek(&self.specs, n, now_ns)
    }

    /// See [`Balances::refund`], with the limiter's own clock.
    pub fn refund(&mut self, n: u64, now_ns: i64) {
        let clock = self.latest.map_or(now_ns, |latest| latest.max(now_ns));
        self.balances.refund(&self.specs, n, now_ns, clock);
    }

    /// See [`Balances::settle_cost`], with the limiter's own clock (as [`Limiter::refund`]).
    pub fn settle_cost(&mut self, reserved: u64, actual: u64, now_ns: i64) {
        let clock = self.latest.map_or(now_ns, |latest| latest.max(now_ns));
        self.balances
            .settle_cost(&self.specs, reserved, actual, now_ns, clock);
    }

    /// See [`Balances::available`].
    #[must_use]
    pub fn available(&self) -> u128 {
        self.balances.available(&self.specs)
    }

    /// See [`Balances::available_at`].
    pub fn available_at(&mut self, now_ns: i64) -> u128 {
        self.balances.available_at(&self.specs, now_ns)
    }

    /// See [`Balances::levels_at`].
    pub fn levels_at(&mut self, now_ns: i64) -> Vec<Level> {
        self.balances.levels_at(&self.specs, now_ns)
    }
}

#[cfg(test)]
mod tests;
