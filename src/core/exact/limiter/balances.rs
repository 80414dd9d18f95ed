//! A limiter's state, kept apart from its bands' specs: what a keyed table stores per key.

use super::{Band, Decision, Level, Reservation, RestoreError};
use crate::core::exact::rate::BandSpec;
use crate::core::exact::settle::{settle, Balance};

/// A limiter's state: one balance per band, in the order of the bands' specs.
///
/// The specs are fixed and are kept apart, as DPDK keeps a meter's profile apart from its
/// run-time state: a [`Limiter`](super::Limiter) owns one set, and a keyed table keeps one set
/// for all its keys and only these balances per key. One band, as there usually is, is stored
/// inline, so such a table allocates nothing per key.
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

#[cfg(test)]
impl Balances {
    /// Balances to test with: one band per entry of `units`, holding that many units, each
    /// settled at `at`.
    pub(crate) fn settled(units: &[u128], at: i64) -> Self {
        units
            .iter()
            .map(|&units| Balance {
                units,
                settled_at: Some(at),
            })
            .collect::<Vec<_>>()
            .into()
    }
}

/// Every operation takes the bands' specs, in the order the balances were made for.
impl Balances {
    /// Balances saved elsewhere (a pickle), put back for `specs`: one per band, none above its
    /// band's burst.
    ///
    /// # Errors
    ///
    /// [`RestoreError::Bands`] or [`RestoreError::OverBurst`]: a state these bands could not
    /// have saved.
    pub fn saved(specs: &[BandSpec], saved: Vec<Balance>) -> Result<Self, RestoreError> {
        if saved.len() != specs.len() {
            return Err(RestoreError::Bands);
        }
        let over = |(spec, balance): (&BandSpec, &Balance)| balance.units > spec.capacity_units();
        if specs.iter().zip(&saved).any(over) {
            return Err(RestoreError::OverBurst);
        }
        Ok(saved.into())
    }

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
    pub(super) fn bands<'a>(&'a self, specs: &'a [BandSpec]) -> impl Iterator<Item = Band> + 'a {
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

    /// Settle a cost taken as `reserved` tokens and now known to be `actual`, with `clock`
    /// the latest time any call has used (as for [`Balances::refund`]):
    ///
    /// * **Less than reserved:** the difference is refunded, under [`Balances::refund`]'s
    ///   rules (capped at each burst, forfeited while a band is settled ahead of `clock`).
    /// * **More:** settled to `now_ns`, the difference is taken from every band even beyond its
    ///   balance. What a band lacks becomes a debt held as time: its settlement point moves
    ///   ahead until the missing units have accrued (see [`Band::take_beyond`]), so whoever
    ///   asks next waits exactly until the debt is repaid, as behind a reservation.
    /// * **The same:** nothing changes.
    ///
    /// Over any span of time, the tokens a band lets through are then at most its burst plus
    /// what accrues in that span, plus the largest single overage: the one taken last may
    /// still be unpaid when the span ends.
    pub fn settle_cost(
        &mut self,
        specs: &[BandSpec],
        reserved: u64,
        actual: u64,
        now_ns: i64,
        clock: i64,
    ) {
        match actual.checked_sub(reserved) {
            None => self.refund(specs, reserved - actual, now_ns, clock),
            Some(0) => {}
            Some(over) => {
                self.settle(specs, now_ns);
                self.update(specs, |band| band.take_beyond(over, now_ns));
            }
        }
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
