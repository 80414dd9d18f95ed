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

use crate::core::exact::clock_gap::off_the_clock;
use crate::core::exact::rate::BandSpec;
use crate::core::exact::settle::{settle, Balance};

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

/// A limiter's state: one balance per band, in the order of the bands' specs.
///
/// The specs are fixed and are kept apart, as DPDK keeps a meter's profile apart from its
/// run-time state: a [`Limiter`] owns one set, and a keyed table keeps one set for all its
/// keys and only these balances per key. One band, as there usually is, is stored inline, so
/// such a table allocates nothing per key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Balances {
    One(Balance),
    Many(Box<[Balance]>),
}

impl std::ops::Deref for Balances {
    type Target = [Balance];

    fn deref(&self) -> &[Balance] {
        match self {
            Self::One(one) => std::slice::from_ref(one),
            Self::Many(many) => many,
        }
    }
}

impl std::ops::DerefMut for Balances {
    fn deref_mut(&mut self) -> &mut [Balance] {
        match self {
            Self::One(one) => std::slice::from_mut(one),
            Self::Many(many) => many,
        }
    }
}

impl From<Vec<Balance>> for Balances {
    fn from(balances: Vec<Balance>) -> Self {
        match <[Balance; 1]>::try_from(balances) {
            Ok([one]) => Self::One(one),
            Err(many) => Self::Many(many.into()),
        }
    }
}

/// Every operation takes the bands' specs, in the order the balances were made for.
impl Balances {
    /// Balances for `specs` holding `initial` tokens each (their full burst if `None`),
    /// settled from `start_ns`, or from the first call's `now` if `None`.
    ///
    /// # Panics
    ///
    /// If `initial` exceeds a band's burst (callers check that first).
    #[must_use]
    pub fn new(specs: &[BandSpec], initial: Option<u64>, start_ns: Option<i64>) -> Self {
        specs
            .iter()
            .map(|spec| Balance {
                units: initial.map_or(spec.capacity_units(), |tokens| {
                    spec.units_of(tokens)
                        .expect("initial fill within the burst")
                }),
                settled_at: start_ns,
            })
            .collect::<Vec<_>>()
            .into()
    }

    /// Each band as a spec and its balance.
    fn bands<'a>(&'a self, specs: &'a [BandSpec]) -> impl Iterator<Item = Band> + 'a {
        debug_assert_eq!(specs.len(), self.len(), "one balance per spec");
        specs
            .iter()
            .zip(self.iter())
            .map(|(&spec, &balance)| Band { spec, balance })
    }

    /// Run `change` on each band, keeping the balances it leaves.
    fn update(&mut self, specs: &[BandSpec], mut change: impl FnMut(&mut Band)) {
        debug_assert_eq!(specs.len(), self.len(), "one balance per spec");
        for (&spec, balance) in specs.iter().zip(self.iter_mut()) {
            let mut band = Band {
                spec,
                balance: *balance,
            };
            change(&mut band);
            *balance = band.balance;
        }
    }

    fn settle(&mut self, specs: &[BandSpec], now_ns: i64) {
        self.update(specs, |band| band.settle(now_ns));
    }

    fn decide(&self, specs: &[BandSpec], n: u64, now_ns: i64) -> Decision {
        self.bands(specs).fold(Decision::Allowed, |decision, band| {
            decision.and(band.decide(n, now_ns))
        })
    }

    /// Settle to `now_ns`, then take `n` tokens from every band if each holds them.
    pub fn acquire(&mut self, specs: &[BandSpec], n: u64, now_ns: i64) -> Decision {
        if let (Self::One(balance), [spec]) = (&mut *self, specs) {
            // The usual limiter, and the per-call path: one band, decided without the folds.
            let mut band = Band {
                spec: *spec,
                balance: *balance,
            };
            let decision = band.acquire(n, now_ns);
            *balance = band.balance;
            return decision;
        }
        self.settle(specs, now_ns);
        let decision = self.decide(specs, n, now_ns);
        if decision == Decision::Allowed {
            self.update(specs, |band| {
                // Allowed: every band holds at least the units of `n`.
                let need = band.spec.units_of(n).unwrap_or(0);
                band.balance.units = band.balance.units.saturating_sub(need);
            });
        }
        decision
    }

    /// Take `n` tokens at the first moment every band holds them: now if they do, otherwise
    /// (if that moment is at most `max_wait_ns` away) at that moment, as GCRA books a request
    /// at its theoretical arrival time.
    ///
    /// Taking them in the future means settling every band forward to that moment and taking
    /// them there, so the settlement point then lies ahead of `now_ns`. Nothing accrues to
    /// anyone before it: whoever asks next is answered from the reservation's end and queues
    /// behind it. That is what makes waiting fair: waiters are served in the order they
    /// reserved, and a large request is never overtaken by a stream of small ones. A waiter
    /// that gives up hands its tokens back with [`Balances::refund`].
    pub fn reserve(
        &mut self,
        specs: &[BandSpec],
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> Reservation {
        self.settle(specs, now_ns);
        match self.decide(specs, n, now_ns) {
            Decision::Never => Reservation::Never,
            Decision::Allowed => {
                self.acquire(specs, n, now_ns);
                Reservation::Taken { after_ns: 0 }
            }
            Decision::Wait(wait) => {
                let at = i128::from(now_ns).saturating_add_unsigned(wait);
                match i64::try_from(at) {
                    Ok(at) if wait <= max_wait_ns => {
                        let taken = self.acquire(specs, n, at);
                        debug_assert_eq!(taken, Decision::Allowed, "every band holds n by then");
                        Reservation::Taken { after_ns: wait }
                    }
                    _ => Reservation::TooLate(wait),
                }
            }
        }
    }

    /// A waiter that stops waiting hands back the `n` tokens it reserved for `reserved_at`
    /// (the moment [`Balances::reserve`] booked them at). Decided for the limiter as a whole,
    /// since its bands may stand at different points once a reservation has been undone:
    ///
    /// * **Nobody queues behind it** (no band is settled beyond `reserved_at`, or beyond
    ///   `now_ns` once its turn has come): every band is undone (see [`Band::undo`]). Before
    ///   its turn, the tokens are nobody's before they would have accrued; giving back the last
    ///   reservation made restores the limiter as it was, or leaves it with less.
    /// * **Others queue behind it.** Their turns were booked from this one's end. Handing its
    ///   time or its tokens out again would let a newcomer in while those waiters are still
    ///   admitted at their own turns, and together they would exceed the burst. So the tokens
    ///   are forfeited: the waiters behind keep their turns, and nobody is let through early.
    ///   Never over-admitting is worth more than giving back exactly.
    pub fn give_back(&mut self, specs: &[BandSpec], n: u64, now_ns: i64, reserved_at: i64) {
        if self.settled_beyond(reserved_at.max(now_ns)) {
            return;
        }
        self.update(specs, |band| band.undo(n, now_ns));
    }

    /// Whether some band is settled beyond `time`: a waiter's reservation ends there.
    fn settled_beyond(&self, time: i64) -> bool {
        self.iter()
            .any(|balance| balance.settled_at.is_some_and(|at| at > time))
    }

    /// What [`Balances::acquire`] would answer at `now_ns`, taking nothing. Like every call,
    /// the first one anchors new balances' clock; otherwise nothing is stored.
    pub fn peek(&mut self, specs: &[BandSpec], n: u64, now_ns: i64) -> Decision {
        self.anchor(now_ns);
        let mut settled = self.clone();
        settled.settle(specs, now_ns);
        settled.decide(specs, n, now_ns)
    }

    /// Move every settlement point by `by` nanoseconds (within the clock's range): balances
    /// read on one clock, carried over to another.
    pub fn shift(&mut self, by: i64) {
        for balance in self.iter_mut() {
            balance.settled_at = balance.settled_at.map(|at| at.saturating_add(by));
        }
    }

    /// Start counting time at `now_ns`, if nothing has been counted yet.
    fn anchor(&mut self, now_ns: i64) {
        for balance in self.iter_mut() {
            balance.settled_at.get_or_insert(now_ns);
        }
    }

    /// Settle to `now_ns`, then give `n` tokens back to every band, each capped at its burst.
    ///
    /// A band settled ahead of `clock` (the latest time any call has used) holds a waiter's
    /// reservation: tokens given back now could be taken at once, ahead of the waiters and on
    /// top of their turns. While one does, the refund is forfeited on every band, as a
    /// waiter's give-back is (see [`Balances::give_back`]).
    pub fn refund(&mut self, specs: &[BandSpec], n: u64, now_ns: i64, clock: i64) {
        self.settle(specs, now_ns);
        if self.settled_beyond(clock) {
            return;
        }
        self.update(specs, |band| {
            let capacity = band.spec.capacity_units();
            let returned = u128::from(n).saturating_mul(band.spec.rate.units_per_token());
            band.balance.units = band.balance.units.saturating_add(returned).min(capacity);
        });
    }

    /// Whether these balances, settled at `now_ns`, are indistinguishable from new ones: every
    /// band full, and no band settled later than `now_ns` (a later settlement point would make
    /// refills start later than a new limiter's).
    #[must_use]
    pub fn is_fresh_at(&self, specs: &[BandSpec], now_ns: i64) -> bool {
        // The same as `fresh_from() <= now_ns`, without a division: this runs on every call.
        self.bands(specs).all(|band| {
            band.balance.settled_at.is_none_or(|at| at <= now_ns)
                && settle(
                    band.balance,
                    band.spec.rate.units_per_ns(),
                    band.spec.capacity_units(),
                    now_ns,
                )
                .units
                    == band.spec.capacity_units()
        })
    }

    /// Whether every band is full as last settled: after a call at `now_ns` that is the same
    /// as [`Balances::is_fresh_at`]`(now_ns)` when the clock did not go backwards, and cheaper.
    #[must_use]
    pub fn is_full(&self, specs: &[BandSpec]) -> bool {
        self.bands(specs)
            .all(|band| band.balance.units == band.spec.capacity_units())
    }

    /// The first nanosecond from which [`Balances::is_fresh_at`] holds, if nothing is taken
    /// meanwhile: when the slowest band is full again (`i64::MAX` if never within the clock's
    /// range). A band never anchored is fresh from any time, if full.
    #[must_use]
    pub fn fresh_from(&self, specs: &[BandSpec]) -> i64 {
        self.bands(specs)
            .map(|band| band.full_from())
            .max()
            .unwrap_or(i64::MIN)
    }

    /// Whole tokens every band holds as last settled: how many more 1-token requests would be
    /// allowed right now.
    #[must_use]
    pub fn available(&self, specs: &[BandSpec]) -> u128 {
        self.bands(specs)
            .map(|band| band.whole_tokens())
            .min()
            .unwrap_or(0)
    }

    /// Whole tokens every band would hold if settled at `now_ns` (anchoring new balances, as
    /// [`Balances::peek`] does).
    pub fn available_at(&mut self, specs: &[BandSpec], now_ns: i64) -> u128 {
        self.anchor(now_ns);
        let mut settled = self.clone();
        settled.settle(specs, now_ns);
        settled.available(specs)
    }

    /// Each band's [`Level`] if settled at `now_ns` (anchoring new balances, as
    /// [`Balances::peek`] does), in the order of the specs.
    pub fn levels_at(&mut self, specs: &[BandSpec], now_ns: i64) -> Vec<Level> {
        self.anchor(now_ns);
        let mut settled = self.clone();
        settled.settle(specs, now_ns);
        settled
            .bands(specs)
            .map(|band| band.level(now_ns))
            .collect()
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
            latest: bands
                .iter()
                .filter_map(|band| band.balance.settled_at)
                .max(),
            restored: true,
        }
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
mod tests {
    use super::*;
    use crate::core::exact::rate::Rate;

    const SECOND: i64 = 1_000_000_000;

    fn band(per_second: u64, burst: u64) -> BandSpec {
        BandSpec::new(Rate::new(per_second, 1).unwrap(), burst).unwrap()
    }

    fn taken_after(ns: i64) -> Reservation {
        Reservation::Taken {
            after_ns: ns.unsigned_abs().into(),
        }
    }

    #[test]
    fn a_reservation_takes_at_once_what_is_there() {
        let mut limiter = Limiter::new(&[band(1, 5)], None, Some(0));
        assert_eq!(
            limiter.reserve(5, 0, u128::MAX),
            Reservation::Taken { after_ns: 0 }
        );
        assert_eq!(limiter.acquire(1, 0), Decision::Wait(SECOND as u128));
    }

    #[test]
    fn a_reservation_books_the_moment_its_tokens_arrive_and_later_callers_queue_behind_it() {
        let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
        assert_eq!(
            limiter.reserve(3, 0, u128::MAX),
            Reservation::Taken {
                after_ns: 3 * 1_000_000_000
            }
        );
        // The next caller is answered from the reservation's end: 3 s, then 1 s for its token.
        assert_eq!(limiter.acquire(1, 0), Decision::Wait(4 * 1_000_000_000));
        assert_eq!(
            limiter.reserve(1, SECOND, u128::MAX),
            Reservation::Taken {
                after_ns: 3 * 1_000_000_000
            }
        );
        assert_eq!(
            limiter.acquire(1, 4 * SECOND),
            Decision::Wait(1_000_000_000)
        );
        assert_eq!(limiter.acquire(1, 5 * SECOND), Decision::Allowed);
    }

    #[test]
    fn a_large_reservation_is_not_overtaken_by_small_requests() {
        let mut limiter = Limiter::new(&[band(1, 10)], Some(0), Some(0));
        assert_eq!(
            limiter.reserve(5, 0, u128::MAX),
            Reservation::Taken {
                after_ns: 5 * 1_000_000_000
            }
        );
        for t in 1..=5 {
            assert!(matches!(limiter.acquire(1, t * SECOND), Decision::Wait(_)));
        }
        assert_eq!(limiter.acquire(1, 6 * SECOND), Decision::Allowed);
    }

    #[test]
    fn a_reservation_too_far_ahead_takes_nothing() {
        let mut limiter = Limiter::new(&[band(1, 5), band(2, 5)], Some(0), Some(0));
        let before = limiter.clone();
        assert_eq!(
            limiter.reserve(3, 0, 3 * 1_000_000_000 - 1),
            Reservation::TooLate(3 * 1_000_000_000)
        );
        assert_eq!(limiter, before);
        assert_eq!(limiter.reserve(6, 0, u128::MAX), Reservation::Never);
        assert_eq!(limiter, before);
    }

    #[test]
    fn the_last_reservation_given_back_leaves_the_limiter_as_it_was() {
        for initial in [0, 2, 4] {
            let mut limiter = Limiter::new(&[band(1, 5)], Some(initial), Some(0));
            limiter.acquire(0, SECOND);
            let before = limiter.clone();
            let Reservation::Taken { after_ns } = limiter.reserve(5, SECOND, u128::MAX) else {
                panic!("a wait of at most 5 s is taken");
            };
            limiter.give_back(5, SECOND, SECOND + i64::try_from(after_ns).unwrap());
            assert_eq!(limiter, before, "initial {initial}");
        }
    }

    #[test]
    fn a_reservation_given_back_partway_through_its_wait_keeps_what_had_accrued() {
        // 3 tokens a second, reserved empty at 0 for 1 s, given back at 0.5 s: what had
        // accrued by then (1.5 tokens) is there, as if nobody had reserved.
        let mut limiter = Limiter::new(&[band(3, 10)], Some(0), Some(0));
        assert_eq!(
            limiter.reserve(3, 0, u128::MAX),
            Reservation::Taken {
                after_ns: 1_000_000_000
            }
        );
        limiter.give_back(3, SECOND / 2, SECOND);
        assert_eq!(limiter.available_at(SECOND / 2), 1);
        // Half a token more comes in a sixth of a second, rounded up to the nanosecond.
        assert_eq!(limiter.acquire(2, SECOND / 2), Decision::Wait(166_666_667));
    }

    #[test]
    fn a_reservation_given_back_lends_nothing_early_and_loses_nothing_by_its_end() {
        // The faster band fills up while the slower one is waited for: what its cap cut off
        // cannot be told apart afterwards, so it comes back later, never earlier.
        let mut limiter = Limiter::new(&[band(1, 5), band(3, 7)], Some(0), Some(0));
        let before = limiter.clone();
        assert_eq!(
            limiter.reserve(5, 0, u128::MAX),
            Reservation::Taken {
                after_ns: 5 * 1_000_000_000
            }
        );
        limiter.give_back(5, 0, 5 * SECOND);
        for t in 0..=20 {
            let now = t * SECOND / 2;
            let (mut got, mut want) = (limiter.clone(), before.clone());
            assert!(got.available_at(now) <= want.available_at(now), "at {now}");
            if now >= 5 * SECOND {
                assert_eq!(got.available_at(now), want.available_at(now), "at {now}");
            }
        }
    }

    #[test]
    fn a_reservation_given_back_with_others_behind_it_is_forfeited() {
        // 2 tokens a second, burst 1, the token spent: A is booked at 0.5 s, B at 1 s. A gives
        // up. Were its half second handed back, C would be booked at 0.5 s while B still passes
        // at 1 s, and so on down the queue: two admissions in half a second where one is the
        // most a burst of 1 allows. A's turn is forfeited instead: C queues behind B.
        let mut limiter = Limiter::new(&[band(2, 1)], Some(0), Some(0));
        let half = SECOND / 2;
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(half));
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
        limiter.give_back(1, 0, half);
        assert_eq!(
            limiter.acquire(1, 0),
            Decision::Wait(3 * u128::from(half.unsigned_abs()))
        );
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(3 * half));
    }

    #[test]
    fn a_last_reservation_given_back_lends_no_band_anything_early() {
        // The slow band sets the moment (0.5 s); the fast one is settled forward to it, full
        // again. Undone at 0, the fast band must not hold at 0 what it only gets by 0.5 s.
        let mut limiter = Limiter::new(&[band(10, 3), band(2, 4)], None, Some(0));
        assert_eq!(limiter.acquire(3, 0), Decision::Allowed);
        assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(SECOND / 2));
        limiter.give_back(2, 0, SECOND / 2);
        assert!(matches!(limiter.acquire(1, 0), Decision::Wait(_)));
        // What the fast band's cap cut off at 0.5 s comes back later, never earlier: its
        // token is there by 0.3 s (without the reservation, by 0.1 s).
        assert_eq!(limiter.acquire(1, 3 * SECOND / 10), Decision::Allowed);
    }

    #[test]
    fn a_refund_is_forfeited_while_any_band_holds_a_waiter() {
        // Bands (1/s, burst 2) and (2/s, burst 1). A waiter at 0.5 s, one at 1 s who gives up:
        // its undo leaves the slow band settled at now and the fast one at 0.5 s. A refund then
        // must not go into the slow band, or two later waiters at 1 s and 1.5 s make four
        // admissions in 1.5 s, where a burst of 2 at 1/s allows 3.
        let mut limiter = Limiter::new(&[band(1, 2), band(2, 1)], None, Some(0));
        assert_eq!(limiter.on_the_clock(0), Ok(()));
        assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND / 2));
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
        limiter.give_back(1, 0, SECOND);
        limiter.refund(1, 0);
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(2 * SECOND));
    }

    #[test]
    fn the_earlier_waiter_is_undone_whole_once_the_later_one_is() {
        // After the later waiter's undo the bands stand at different points; the earlier one
        // is now the last, and giving it back restores the limiter as it was.
        let mut limiter = Limiter::new(&[band(1, 2), band(2, 1)], None, Some(0));
        assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
        let before = limiter.clone();
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND / 2));
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
        limiter.give_back(1, 0, SECOND);
        limiter.give_back(1, 0, SECOND / 2);
        assert_eq!(limiter.bands(), before.bands());
    }

    #[test]
    fn a_refund_while_a_waiter_queues_is_forfeited() {
        // Rate 1/s, burst 1: X takes at 0, A is booked at 1 s, X refunds at 0.5 s. Had the
        // token gone back, Y could take it at 0.5 s and A still pass at 1 s.
        let mut limiter = Limiter::new(&[band(1, 1)], None, Some(0));
        assert_eq!(limiter.on_the_clock(0), Ok(()));
        assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(SECOND));
        assert_eq!(limiter.on_the_clock(SECOND / 2), Ok(()));
        limiter.refund(1, SECOND / 2);
        assert!(matches!(limiter.acquire(1, SECOND / 2), Decision::Wait(_)));
        // With nobody waiting, a refund is tokens again.
        assert_eq!(limiter.on_the_clock(2 * SECOND), Ok(()));
        assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
        limiter.refund(1, 2 * SECOND);
        assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
    }

    #[test]
    fn reservations_given_back_last_first_undo_each_other() {
        let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
        let before = limiter.clone();
        assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(2 * SECOND));
        assert_eq!(limiter.reserve(1, 0, u128::MAX), taken_after(3 * SECOND));
        limiter.give_back(1, 0, 3 * SECOND);
        limiter.give_back(2, 0, 2 * SECOND);
        assert_eq!(limiter, before);
    }

    #[test]
    fn a_reservation_given_back_after_its_turn_is_plain_tokens_again() {
        let mut limiter = Limiter::new(&[band(1, 5)], Some(0), Some(0));
        assert_eq!(limiter.reserve(2, 0, u128::MAX), taken_after(2 * SECOND));
        // Its holder is woken at 3 s and gives up there: the 2 tokens, and the one that
        // accrued since, are there for whoever asks.
        limiter.give_back(2, 3 * SECOND, 2 * SECOND);
        assert_eq!(limiter.acquire(3, 3 * SECOND), Decision::Allowed);
    }

    #[test]
    fn a_new_limiter_is_full_and_anchored_at_its_first_call() {
        let mut limiter = Limiter::new(&[band(1, 3)], None, None);
        for _ in 0..3 {
            assert_eq!(limiter.acquire(1, 5 * SECOND), Decision::Allowed);
        }
        assert_eq!(
            limiter.acquire(1, 5 * SECOND),
            Decision::Wait(1_000_000_000)
        );
    }

    #[test]
    fn each_band_says_its_own_tokens_and_when_it_can_give_one_more() {
        // 10 per second, bursts of 3; and 1 per second, bursts of 5.
        let mut limiter = Limiter::new(&[band(10, 3), band(1, 5)], None, None);
        assert_eq!(limiter.acquire(2, 0), Decision::Allowed);
        let pairs = |levels: Vec<Level>| -> Vec<(u128, u128)> {
            levels.iter().map(|l| (l.tokens, l.next_ns)).collect()
        };
        // The fast band: 1 token and a half, the next whole one in 50 ms; the slow band: 3
        // tokens and a twentieth, the next in 950 ms.
        assert_eq!(
            pairs(limiter.levels_at(SECOND / 20)),
            [(1, 50_000_000), (3, 950_000_000)]
        );
        // A full band gives one more a whole token's time after it is spent from.
        assert_eq!(
            pairs(limiter.levels_at(10 * SECOND)),
            [(3, 100_000_000), (5, 1_000_000_000)]
        );
    }

    #[test]
    fn the_wait_is_exact_to_the_nanosecond() {
        let rate = Rate::new(1, 3).unwrap(); // one token every 3 s
        let spec = BandSpec::new(rate, 1).unwrap();
        let mut limiter = Limiter::new(&[spec], Some(0), Some(0));
        let Decision::Wait(wait) = limiter.acquire(1, 0) else {
            panic!("an empty band must ask to wait");
        };
        assert_eq!(wait, 3_000_000_000);
        let wait = i64::try_from(wait).unwrap();
        assert_eq!(limiter.peek(1, wait - 1), Decision::Wait(1));
        assert_eq!(limiter.acquire(1, wait), Decision::Allowed);
    }

    #[test]
    fn bands_are_all_or_nothing_and_wait_for_the_slowest() {
        let mut limiter = Limiter::new(&[band(10, 10), band(1, 20)], Some(5), Some(0));
        assert_eq!(limiter.acquire(6, 0), Decision::Wait(1_000_000_000));
        assert_eq!(limiter.available(), 5, "a denied request took nothing");
        assert_eq!(limiter.acquire(11, 0), Decision::Never);
    }

    #[test]
    fn a_first_peek_anchors_the_clock_like_any_call() {
        let mut limiter = Limiter::new(&[band(1, 1)], Some(0), None);
        assert_eq!(limiter.peek(1, 0), Decision::Wait(1_000_000_000));
        assert_eq!(limiter.acquire(1, SECOND), Decision::Allowed);
    }

    #[test]
    fn a_wait_counts_from_now_even_when_the_clock_is_behind() {
        let mut limiter = Limiter::new(&[band(1, 1)], Some(0), Some(SECOND));
        assert_eq!(limiter.acquire(1, 0), Decision::Wait(2_000_000_000));
        assert_eq!(limiter.peek(1, 2 * SECOND - 1), Decision::Wait(1));
        assert_eq!(limiter.acquire(1, 2 * SECOND), Decision::Allowed);
    }

    #[test]
    fn a_band_that_holds_the_tokens_does_not_overrule_one_that_says_wait() {
        // Half a second in: the slow band holds half a token, the fast one is full again.
        let slow = band(1, 10);
        let fast = band(100, 10);
        for specs in [[slow, fast], [fast, slow]] {
            let mut limiter = Limiter::new(&specs, Some(0), Some(0));
            assert_eq!(
                limiter.acquire(1, SECOND / 2),
                Decision::Wait(500_000_000),
                "{specs:?}"
            );
            assert_eq!(
                limiter.available(),
                0,
                "nothing was taken from the fast band"
            );
            assert_eq!(limiter.available_at(SECOND), 1);
            assert_eq!(limiter.available_at(3 * SECOND), 3);
            assert_eq!(limiter.acquire(10, SECOND), Decision::Wait(9_000_000_000));
            assert_eq!(limiter.acquire(1, SECOND), Decision::Allowed);
        }
    }

    #[test]
    fn a_wait_is_rounded_up_to_the_next_whole_nanosecond() {
        // 3 tokens per second: 3 units a nanosecond, 10^9 units a token. An empty band needs
        // 333,333,333 1/3 ns for a token: 333,333,333 ns are one unit short, so the wait is
        // 333,333,334 ns (rounded down, the request would be denied at the end of its wait).
        let spec = BandSpec::new(Rate::new(3, 1).unwrap(), 1).unwrap();
        let mut limiter = Limiter::new(&[spec], Some(0), Some(0));
        assert_eq!(limiter.acquire(1, 0), Decision::Wait(333_333_334));
        assert_eq!(limiter.peek(1, 333_333_333), Decision::Wait(1));
        assert_eq!(limiter.acquire(1, 333_333_334), Decision::Allowed);
        // The same rounding for when a band is full again.
        let balances = Balances::new(&[spec], Some(0), Some(0));
        assert_eq!(balances.fresh_from(&[spec]), 333_333_334);
    }

    #[test]
    fn fresh_from_is_when_the_slowest_band_is_full_again() {
        let specs = [band(1, 3), band(2, 2)];
        let mut balances = Balances::new(&specs, None, None);
        assert!(balances.is_full(&specs));
        assert_eq!(
            balances.fresh_from(&specs),
            i64::MIN,
            "full and never anchored: fresh from any time"
        );
        assert_eq!(
            Balances::new(&specs, Some(1), None).fresh_from(&specs),
            i64::MAX,
            "never anchored and not full: no time makes it full"
        );
        assert_eq!(balances.acquire(&specs, 2, 5 * SECOND), Decision::Allowed);
        assert!(!balances.is_full(&specs));
        // The first band lacks 2 tokens (2 s), the second 2 tokens at 2 a second (1 s).
        assert_eq!(balances.fresh_from(&specs), 7 * SECOND);
        assert!(!balances.is_fresh_at(&specs, 7 * SECOND - 1));
        assert!(balances.is_fresh_at(&specs, 7 * SECOND));
        assert_eq!(balances.available_at(&specs, 5 * SECOND + SECOND / 2), 1);
        assert_eq!(balances.available_at(&specs, 6 * SECOND), 2);
    }

    #[test]
    fn bands_come_back_with_their_balances() {
        let specs = [band(1, 3), band(2, 5)];
        let mut limiter = Limiter::new(&specs, Some(2), Some(0));
        assert_eq!(limiter.acquire(1, 0), Decision::Allowed);
        let bands = limiter.bands();
        assert_eq!(bands.iter().map(|b| b.spec).collect::<Vec<_>>(), specs);
        assert_eq!(
            bands.iter().map(|b| b.balance.units).collect::<Vec<_>>(),
            [1_000_000_000_u128, 1_000_000_000]
        );
        assert_eq!(Limiter::from_bands(&bands).bands(), limiter.bands());
    }

    #[test]
    fn a_time_ten_years_from_the_clock_is_refused_and_changes_nothing() {
        use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
        let mut limiter = Limiter::new(&[band(1, 1)], Some(0), Some(0));
        assert_eq!(limiter.on_the_clock(MAX_CLOCK_GAP_NS), Ok(()));
        let before = limiter.clone();
        assert_eq!(
            limiter.on_the_clock(-1),
            Err(-i128::from(MAX_CLOCK_GAP_NS) - 1)
        );
        assert_eq!(
            limiter.on_the_clock(2 * MAX_CLOCK_GAP_NS + 1),
            Err(i128::from(MAX_CLOCK_GAP_NS) + 1)
        );
        assert_eq!(limiter, before);
        // start_ns is the clock before the first call: time.time_ns() against a monotonic one.
        let mut limiter = Limiter::new(&[band(1, 1)], None, Some(1_780_000_000 * SECOND));
        assert!(limiter.on_the_clock(1_000 * SECOND).is_err());
    }

    #[test]
    fn a_restored_limiter_first_asked_before_its_settlement_takes_up_refilling_from_then() {
        let mut saved = Limiter::new(&[band(1, 5)], Some(5), Some(1_000_000 * SECOND));
        assert_eq!(saved.acquire(4, 1_000_000 * SECOND), Decision::Allowed);
        let mut restored = Limiter::from_bands(&saved.bands());
        assert_eq!(restored.on_the_clock(5), Ok(()));
        assert_eq!(restored.acquire(1, 5), Decision::Allowed);
        assert_eq!(restored.acquire(1, 5), Decision::Wait(1_000_000_000));
        // Only the first call re-anchors: later ones behind the clock are a clock going back.
        assert_eq!(restored.on_the_clock(4), Ok(()));
        assert_eq!(restored.acquire(1, 4), Decision::Wait(1_000_000_001));
    }

    #[test]
    fn a_refused_first_call_leaves_a_restored_limiter_to_re_anchor_at_the_next() {
        use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
        let mut saved = Limiter::new(&[band(1, 5)], Some(5), Some(1_000_000 * SECOND));
        assert_eq!(saved.acquire(4, 1_000_000 * SECOND), Decision::Allowed);
        let mut restored = Limiter::from_bands(&saved.bands());
        assert!(restored
            .on_the_clock(1_000_000 * SECOND + MAX_CLOCK_GAP_NS + 1)
            .is_err());
        assert_eq!(restored.on_the_clock(5), Ok(()));
        assert_eq!(restored.acquire(2, 5), Decision::Wait(1_000_000_000));
    }

    #[test]
    fn a_copy_made_while_a_waiter_waits_keeps_the_reservation() {
        let mut original = Limiter::new(&[band(1, 3)], Some(0), Some(100 * SECOND));
        assert_eq!(original.on_the_clock(100 * SECOND), Ok(()));
        assert_eq!(
            original.reserve(3, 100 * SECOND, u128::MAX),
            taken_after(3 * SECOND)
        );
        let mut copy = Limiter::from_bands(&original.bands()).with_clock(original.clock());
        assert_eq!(copy.on_the_clock(100 * SECOND), Ok(()));
        assert_eq!(
            copy.peek(3, 100 * SECOND),
            original.peek(3, 100 * SECOND),
            "the copy queues behind the same waiter"
        );
    }

    #[test]
    fn a_restored_limiter_first_asked_after_its_settlement_refills_as_usual() {
        let mut saved = Limiter::new(&[band(1, 5)], Some(0), Some(0));
        let mut restored = Limiter::from_bands(&saved.bands());
        assert_eq!(restored.on_the_clock(3 * SECOND), Ok(()));
        assert_eq!(restored.acquire(3, 3 * SECOND), Decision::Allowed);
        assert_eq!(saved.acquire(3, 3 * SECOND), Decision::Allowed);
        assert_eq!(restored.bands(), saved.bands());
    }

    #[test]
    fn refunds_are_capped_at_the_burst() {
        let mut limiter = Limiter::new(&[band(1, 3)], Some(2), Some(0));
        limiter.refund(5, 0);
        assert_eq!(limiter.available(), 3);
    }
}
