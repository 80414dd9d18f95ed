//! RFC 2698, the two rate three colour marker.
//!
//! Two independent buckets, both starting full: P fills at the peak rate PIR up to PBS, C at
//! the committed rate CIR up to CBS. A packet beyond the peak is red and takes nothing; within
//! the peak but beyond the commitment it is yellow and takes from P; within both it is green
//! and takes from both.
//!
//! ```text
//! colour-blind:  Tp < B  -> red
//!                Tc < B  -> yellow, Tp -= B
//!                else    -> green,  Tp -= B, Tc -= B
//! colour-aware:  arrived red or Tp < B     -> red
//!                arrived yellow or Tc < B  -> yellow, Tp -= B
//!                else                      -> green,  Tp -= B, Tc -= B
//! ```

use crate::core::meter::bucket::{Bucket, ByteRate};
use crate::core::meter::{Color, Meter, MeterError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrTcm {
    pub peak: Bucket,
    pub committed: Bucket,
}

impl TrTcm {
    /// # Errors
    ///
    /// The RFC's rules: PIR >= CIR > 0, PBS > 0, CBS > 0.
    pub fn new(
        cir: ByteRate,
        cbs: u64,
        pir: ByteRate,
        pbs: u64,
        start_ns: Option<i64>,
    ) -> Result<Self, MeterError> {
        if cir.is_zero() {
            return Err(MeterError::Rule("CIR > 0"));
        }
        if !pir.at_least(&cir) {
            return Err(MeterError::Rule("PIR >= CIR"));
        }
        if pbs == 0 {
            return Err(MeterError::Rule("PBS > 0"));
        }
        if cbs == 0 {
            return Err(MeterError::Rule("CBS > 0"));
        }
        Ok(Self {
            peak: Bucket::new(pir, pbs, start_ns)?,
            committed: Bucket::new(cir, cbs, start_ns)?,
        })
    }
}

impl Meter for TrTcm {
    fn mark(&mut self, bytes: u64, now_ns: i64, arrived: Option<Color>) -> Color {
        self.peak.settle(now_ns);
        self.committed.settle(now_ns);
        if arrived == Some(Color::Red) || !self.peak.holds(bytes) {
            return Color::Red;
        }
        if arrived == Some(Color::Yellow) || !self.committed.holds(bytes) {
            self.peak.take(bytes);
            return Color::Yellow;
        }
        self.peak.take(bytes);
        self.committed.take(bytes);
        Color::Green
    }

    fn buckets(&self) -> [(&'static str, &Bucket); 2] {
        [("tp", &self.peak), ("tc", &self.committed)]
    }

    fn buckets_mut(&mut self) -> [&mut Bucket; 2] {
        [&mut self.peak, &mut self.committed]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(bytes_per_second: u64) -> ByteRate {
        ByteRate::new(bytes_per_second, 1).unwrap()
    }

    #[test]
    fn beyond_the_peak_is_red_and_takes_nothing() {
        let mut m = TrTcm::new(rate(100), 1000, rate(200), 1500, Some(0)).unwrap();
        assert_eq!(m.mark(1501, 0, None), Color::Red);
        assert_eq!(m.mark(1000, 0, None), Color::Green);
        assert_eq!(m.mark(500, 0, None), Color::Yellow);
        assert_eq!(m.mark(1, 0, None), Color::Red);
    }

    #[test]
    fn configuration_follows_the_rfc() {
        assert_eq!(
            TrTcm::new(rate(200), 1, rate(100), 1, None),
            Err(MeterError::Rule("PIR >= CIR"))
        );
        assert_eq!(
            TrTcm::new(rate(1), 1, rate(1), 0, None),
            Err(MeterError::Rule("PBS > 0"))
        );
    }
}
