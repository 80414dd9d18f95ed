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

/// A packet's colour, best first; as a byte, 0, 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Color {
    Green = 0,
    Yellow = 1,
    Red = 2,
}

/// A meter: settle to `now_ns`, then colour a packet of `bytes`, colour-aware if `arrived` is
/// the colour it came with.
pub trait Meter {
    fn mark(&mut self, bytes: u64, now_ns: i64, arrived: Option<Color>) -> Color;
}

/// Why a meter cannot be configured, in the RFCs' own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterError {
    /// A rule of the RFC the parameters break, as text (e.g. `"PIR >= CIR"`).
    Rule(&'static str),
    /// A bucket size in units of the rate's denominator does not fit the integer range.
    TooFine,
}
