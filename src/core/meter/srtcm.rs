//! RFC 2697, the single rate three colour marker.
//!
//! One rate, CIR, fills the committed bucket C (size CBS); only when C is full do tokens go to
//! the excess bucket E (size EBS); when both are full they are lost. Both start full.
//!
//! ```text
//! colour-blind:  Tc >= B -> green,  Tc -= B
//!                Te >= B -> yellow, Te -= B
//!                else    -> red (nothing taken)
//! colour-aware:  arrived green and Tc >= B           -> green,  Tc -= B
//!                arrived green or yellow and Te >= B -> yellow, Te -= B
//!                else                                -> red
//! ```

use crate::core::meter::bucket::{Bucket, ByteRate};
use crate::core::meter::{Color, Meter, MeterError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrTcm {
    pub committed: Bucket,
    pub excess: Bucket,
}

impl SrTcm {
    /// # Errors
    ///
    /// The RFC's rules: CIR > 0, and CBS or EBS > 0 (both are sizes, so never negative).
    pub fn new(
        cir: ByteRate,
        cbs: u64,
        ebs: u64,
        start_ns: Option<i64>,
    ) -> Result<Self, MeterError> {
        if cir.is_zero() {
            return Err(MeterError::Rule("CIR > 0"));
        }
        if cbs == 0 && ebs == 0 {
            return Err(MeterError::Rule("CBS > 0 or EBS > 0"));
        }
        Ok(Self {
            committed: Bucket::new(cir, cbs, start_ns)?,
            excess: Bucket::new(cir, ebs, start_ns)?,
        })
    }
}

impl Meter for SrTcm {
    fn mark(&mut self, bytes: u64, now_ns: i64, arrived: Option<Color>) -> Color {
        let overflow = self.committed.settle(now_ns);
        self.excess.settle_and_pour(now_ns, overflow);
        excess_decision(&mut self.committed, &mut self.excess, bytes, arrived)
    }

    fn buckets(&self) -> [(&'static str, &Bucket); 2] {
        [("tc", &self.committed), ("te", &self.excess)]
    }

    fn buckets_mut(&mut self) -> [&mut Bucket; 2] {
        [&mut self.committed, &mut self.excess]
    }
}

/// RFC 2697's decision, shared with RFC 4115: green from C, else yellow from E, else red; a
/// packet that arrived coloured can keep or worsen its colour, never improve it.
pub fn excess_decision(
    committed: &mut Bucket,
    excess: &mut Bucket,
    bytes: u64,
    arrived: Option<Color>,
) -> Color {
    let may_be_green = arrived.is_none_or(|color| color == Color::Green);
    let may_be_yellow = arrived.is_none_or(|color| color != Color::Red);
    if may_be_green && committed.holds(bytes) {
        committed.take(bytes);
        Color::Green
    } else if may_be_yellow && excess.holds(bytes) {
        excess.take(bytes);
        Color::Yellow
    } else {
        Color::Red
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    fn meter(cir: u64, cbs: u64, ebs: u64) -> SrTcm {
        SrTcm::new(ByteRate::new(cir, 1).unwrap(), cbs, ebs, Some(0)).unwrap()
    }

    #[test]
    fn a_fresh_meter_greens_up_to_cbs_then_yellows_up_to_ebs() {
        let mut m = meter(100, 1000, 500);
        assert_eq!(m.mark(1000, 0, None), Color::Green);
        assert_eq!(m.mark(1, 0, None), Color::Yellow);
        assert_eq!(m.mark(500, 0, None), Color::Red);
        assert_eq!(m.mark(499, 0, None), Color::Yellow);
    }

    #[test]
    fn only_the_overflow_of_c_reaches_e() {
        let mut m = meter(100, 1000, 500);
        assert_eq!(m.mark(1000, 0, None), Color::Green); // C empty, E full
        assert_eq!(m.mark(500, 0, None), Color::Yellow); // E empty
                                                         // 15 s at 100 B/s: 1000 refill C, the other 500 spill into E.
        assert_eq!(m.mark(1000, 15 * SECOND, None), Color::Green);
        assert_eq!(m.mark(500, 15 * SECOND, None), Color::Yellow);
        assert_eq!(m.mark(1, 15 * SECOND, None), Color::Red);
    }

    #[test]
    fn colour_aware_marking_never_improves_a_colour() {
        let mut m = meter(100, 1000, 500);
        assert_eq!(m.mark(10, 0, Some(Color::Yellow)), Color::Yellow);
        assert_eq!(m.mark(10, 0, Some(Color::Red)), Color::Red);
        assert_eq!(m.mark(10, 0, Some(Color::Green)), Color::Green);
    }

    #[test]
    fn a_green_packet_that_c_cannot_hold_is_yellow_if_e_can() {
        let mut m = meter(100, 1000, 500);
        assert_eq!(m.mark(990, 0, Some(Color::Green)), Color::Green); // Tc = 10
        assert_eq!(m.mark(20, 0, Some(Color::Green)), Color::Yellow); // Te = 480
        assert_eq!(m.mark(480, 0, Some(Color::Yellow)), Color::Yellow); // Te = 0
        assert_eq!(m.mark(10, 0, Some(Color::Green)), Color::Green);
        assert_eq!(m.mark(1, 0, Some(Color::Green)), Color::Red);
    }

    #[test]
    fn configuration_follows_the_rfc() {
        let zero = ByteRate::new(0, 1).unwrap();
        assert_eq!(
            SrTcm::new(zero, 1, 1, None),
            Err(MeterError::Rule("CIR > 0"))
        );
        let one = ByteRate::new(1, 1).unwrap();
        assert_eq!(
            SrTcm::new(one, 0, 0, None),
            Err(MeterError::Rule("CBS > 0 or EBS > 0"))
        );
    }
}
