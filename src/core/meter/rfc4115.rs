//! RFC 4115, a differentiated-service two-rate three-colour marker with efficient handling of
//! in-profile traffic.
//!
//! Like RFC 2697 in its decisions (green from C, else yellow from E, else red), but with two
//! rates: C fills at CIR up to CBS and E at EIR up to EBS, independently, with no overflow from
//! C into E. Either rate may be zero (a bucket that never refills), not both.

use crate::core::meter::bucket::{Bucket, ByteRate};
use crate::core::meter::srtcm::excess_decision;
use crate::core::meter::{Color, Meter, MeterError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rfc4115 {
    pub committed: Bucket,
    pub excess: Bucket,
}

impl Rfc4115 {
    /// # Errors
    ///
    /// The rules: CIR > 0 or EIR > 0, and CBS > 0 or EBS > 0.
    pub fn new(
        cir: ByteRate,
        cbs: u64,
        eir: ByteRate,
        ebs: u64,
        start_ns: Option<i64>,
    ) -> Result<Self, MeterError> {
        if cir.is_zero() && eir.is_zero() {
            return Err(MeterError::Rule("CIR > 0 or EIR > 0"));
        }
        if cbs == 0 && ebs == 0 {
            return Err(MeterError::Rule("CBS > 0 or EBS > 0"));
        }
        Ok(Self {
            committed: Bucket::new(cir, cbs, start_ns)?,
            excess: Bucket::new(eir, ebs, start_ns)?,
        })
    }
}

impl Meter for Rfc4115 {
    fn mark(&mut self, bytes: u64, now_ns: i64, arrived: Option<Color>) -> Color {
        self.committed.settle(now_ns);
        self.excess.settle(now_ns);
        excess_decision(&mut self.committed, &mut self.excess, bytes, arrived)
    }

    fn buckets(&self) -> [(&'static str, &Bucket); 2] {
        [("tc", &self.committed), ("te", &self.excess)]
    }

    fn buckets_mut(&mut self) -> [&mut Bucket; 2] {
        [&mut self.committed, &mut self.excess]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn the_buckets_fill_independently() {
        let cir = ByteRate::new(100, 1).unwrap();
        let eir = ByteRate::new(0, 1).unwrap();
        let mut m = Rfc4115::new(cir, 1000, eir, 500, Some(0)).unwrap();
        assert_eq!(m.mark(1000, 0, None), Color::Green);
        assert_eq!(m.mark(500, 0, None), Color::Yellow);
        // C refills; E (EIR = 0) never does, and C's overflow does not reach it.
        assert_eq!(m.mark(1, 100 * SECOND, None), Color::Green);
        assert_eq!(m.mark(1000, 100 * SECOND, None), Color::Red);
    }
}
