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

    /// Whole tokens held.
    fn whole_tokens(&self) -> u128 {
        self.balance.units / self.spec.rate.units_per_token()
    }
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

    /// What [`Balances::acquire`] would answer at `now_ns`, taking nothing. Like every call,
    /// the first one anchors new balances' clock; otherwise nothing is stored.
    pub fn peek(&mut self, specs: &[BandSpec], n: u64, now_ns: i64) -> Decision {
        self.anchor(now_ns);
        let mut settled = self.clone();
        settled.settle(specs, now_ns);
        settled.decide(specs, n, now_ns)
    }

    /// Start counting time at `now_ns`, if nothing has been counted yet.
    fn anchor(&mut self, now_ns: i64) {
        for balance in self.iter_mut() {
            balance.settled_at.get_or_insert(now_ns);
        }
    }

    /// Settle to `now_ns`, then give `n` tokens back to every band, each capped at its burst.
    pub fn refund(&mut self, specs: &[BandSpec], n: u64, now_ns: i64) {
        self.settle(specs, now_ns);
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
}

/// Bands consumed all-or-nothing: their specs, and their [`Balances`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limiter {
    specs: Box<[BandSpec]>,
    balances: Balances,
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
        }
    }

    /// A limiter with these exact bands and balances (to restore a saved one).
    #[must_use]
    pub fn from_bands(bands: &[Band]) -> Self {
        Self {
            specs: bands.iter().map(|band| band.spec).collect(),
            balances: bands
                .iter()
                .map(|band| band.balance)
                .collect::<Vec<_>>()
                .into(),
        }
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

    /// See [`Balances::peek`].
    pub fn peek(&mut self, n: u64, now_ns: i64) -> Decision {
        self.balances.peek(&self.specs, n, now_ns)
    }

    /// See [`Balances::refund`].
    pub fn refund(&mut self, n: u64, now_ns: i64) {
        self.balances.refund(&self.specs, n, now_ns);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::rate::Rate;

    const SECOND: i64 = 1_000_000_000;

    fn band(per_second: u64, burst: u64) -> BandSpec {
        BandSpec::new(Rate::new(per_second, 1).unwrap(), burst).unwrap()
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
        assert_eq!(Limiter::from_bands(&bands), limiter);
    }

    #[test]
    fn refunds_are_capped_at_the_burst() {
        let mut limiter = Limiter::new(&[band(1, 3)], Some(2), Some(0));
        limiter.refund(5, 0);
        assert_eq!(limiter.available(), 3);
    }
}
