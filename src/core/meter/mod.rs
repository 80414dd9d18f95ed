//! Three-colour meters (RFC 2697, RFC 2698, RFC 4115): token buckets that judge packets.
//!
//! A meter is two token buckets counted in bytes, and a rule that turns "which buckets hold
//! this packet's size" into a colour: green (within the committed rate), yellow (within the
//! excess or peak allowance) or red (beyond both). Each decision first settles both buckets to
//! the packet's time, lazily and exactly, with the same routine as the real-clock limiter
//! ([`settle`](crate::core::exact::settle)); no float and no division enter a decision, and
//! remainders are carried in the unit, as DPDK's `rte_meter` does with its periods.
//!
//! * [`srtcm`]: RFC 2697, one rate; the committed bucket's overflow fills the excess bucket.
//! * [`trtcm`]: RFC 2698, two rates; a peak bucket caps everything, a committed bucket greens.
//! * [`rfc4115`]: two rates filling two buckets independently, decided like RFC 2697.
//! * [`trace`]: a whole trace of packets through any of them, checked before it runs.
//!
//! A meter marks *colour-blind* (every packet judged afresh) or *colour-aware* (a packet
//! arrives pre-coloured by an upstream meter and can only keep or worsen its colour).

pub mod bucket;
pub mod rfc4115;
pub mod srtcm;
pub mod trace;
pub mod trtcm;

use std::fmt;

use crate::core::exact::settle::Balance;
use crate::core::meter::bucket::Bucket;

/// A packet's colour, best first; as a byte, 0, 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Color {
    Green = 0,
    Yellow = 1,
    Red = 2,
}

impl Color {
    /// Every colour, in the order of its code.
    pub const ALL: [Self; 3] = [Self::Green, Self::Yellow, Self::Red];

    /// The colour's code in a trace's arrays: 0 green, 1 yellow, 2 red.
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The colour of `code`, if it is one (0, 1 or 2).
    #[must_use]
    pub fn from_code(code: usize) -> Option<Self> {
        Self::ALL.get(code).copied()
    }
}

/// The colour of a code read from a trace's array: 0, 1 or 2, else nothing.
impl TryFrom<i128> for Color {
    type Error = ();

    fn try_from(code: i128) -> Result<Self, ()> {
        usize::try_from(code)
            .ok()
            .and_then(Self::from_code)
            .ok_or(())
    }
}

/// A meter: settle to `now_ns`, then colour a packet of `bytes`, colour-aware if `arrived` is
/// the colour it came with. Every meter here is two buckets, which are all its state: what a
/// saved meter keeps ([`Meter::balances`]) and puts back ([`Meter::restore`]).
pub trait Meter {
    fn mark(&mut self, bytes: u64, now_ns: i64, arrived: Option<Color>) -> Color;

    /// The RFC's names for the two buckets (`"tc"`, `"te"`, `"tp"`), with the buckets, in the
    /// order a saved meter lists them.
    fn buckets(&self) -> [(&'static str, &Bucket); 2];

    /// The two buckets, in the same order, to change.
    fn buckets_mut(&mut self) -> [&mut Bucket; 2];

    /// Each bucket's raw state, in [`Meter::buckets`]' order: what a saved meter keeps.
    fn balances(&self) -> [Balance; 2] {
        self.buckets().map(|(_, bucket)| bucket.balance())
    }

    /// Put back the `saved` balances, one per bucket in [`Meter::buckets`]' order, all or none.
    ///
    /// # Errors
    ///
    /// [`SavedStateError`] if `saved` does not hold two balances, or one holds more than its
    /// bucket's size (a meter saved with other sizes); the meter is then unchanged.
    fn restore(&mut self, saved: &[Balance]) -> Result<(), SavedStateError>
    where
        Self: Clone,
    {
        let &[first, second] = saved else {
            return Err(SavedStateError::Buckets);
        };
        // On a working copy: a bad second bucket leaves the first as it was too.
        let mut meter = self.clone();
        for (bucket, balance) in meter.buckets_mut().into_iter().zip([first, second]) {
            if !bucket.restore(balance) {
                return Err(SavedStateError::Overfull);
            }
        }
        *self = meter;
        Ok(())
    }
}

/// Why a saved meter's state cannot be put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedStateError {
    /// Not two balances: a meter has two buckets.
    Buckets,
    /// A balance holds more than its bucket can.
    Overfull,
}

impl fmt::Display for SavedStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Buckets => "a meter's saved state has two buckets",
            Self::Overfull => "a saved level exceeds its bucket's size",
        })
    }
}

/// Why a meter cannot be configured, in the RFCs' own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterError {
    /// A rule of the RFC the parameters break, as text (e.g. `"PIR >= CIR"`).
    Rule(&'static str),
    /// A bucket size in units of the rate's denominator does not fit the integer range.
    TooFine,
}

#[cfg(test)]
mod tests {
    use super::srtcm::SrTcm;
    use super::trtcm::TrTcm;
    use super::*;
    use crate::core::meter::bucket::ByteRate;

    #[test]
    fn a_colour_is_its_code_and_only_codes_are_colours() {
        for (code, color) in Color::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(color.code()), code);
            assert_eq!(Color::from_code(code), Some(color));
        }
        assert_eq!(Color::from_code(3), None);
    }

    #[test]
    fn a_meter_saved_is_restored_whole_or_not_at_all() {
        let rate = ByteRate::new(100, 1).unwrap();
        let mut meter = TrTcm::new(rate, 1000, rate, 2000, Some(0)).unwrap();
        assert_eq!(meter.buckets().map(|(name, _)| name), ["tp", "tc"]);
        meter.mark(300, 0, None);
        let saved = meter.balances();
        let mut fresh = TrTcm::new(rate, 1000, rate, 2000, Some(0)).unwrap();
        assert_ne!(fresh.balances(), saved);
        assert_eq!(fresh.restore(&saved), Ok(()));
        assert_eq!(fresh, meter);

        // A level beyond its bucket (the second: 700 bytes in a bucket of 500, after a first
        // that fits), or a count other than two: no change at all.
        let smaller = TrTcm::new(rate, 500, rate, 2000, Some(0)).unwrap();
        let mut target = smaller;
        let one_too_many = [saved[0], saved[1], saved[1]];
        assert_eq!(target.restore(&saved), Err(SavedStateError::Overfull));
        assert_eq!(target.restore(&one_too_many), Err(SavedStateError::Buckets));
        assert_eq!(target.restore(&saved[..1]), Err(SavedStateError::Buckets));
        assert_eq!(target, smaller);
        assert_eq!(
            SavedStateError::Overfull.to_string(),
            "a saved level exceeds its bucket's size"
        );
    }

    #[test]
    fn each_meter_names_its_buckets_as_its_rfc_does() {
        let rate = ByteRate::new(1, 1).unwrap();
        let sr = SrTcm::new(rate, 1, 1, None).unwrap();
        let excess = super::rfc4115::Rfc4115::new(rate, 1, rate, 1, None).unwrap();
        assert_eq!(sr.buckets().map(|(name, _)| name), ["tc", "te"]);
        assert_eq!(excess.buckets().map(|(name, _)| name), ["tc", "te"]);
    }
}
