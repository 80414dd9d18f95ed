//! Whole traces: a packet list through a meter, in order, checked before anything runs.
//!
//! Marking a trace gives exactly the colours that marking its packets one by one would give.
//! A trace whose times go backwards, or whose colours do not line up with its packets, is
//! refused whole, naming the first bad index, and the meter is left untouched.

use crate::core::meter::{Color, Meter};

/// What is wrong with a trace, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceError {
    /// The sizes, times and colours do not all have the same length.
    Lengths {
        sizes: usize,
        times: usize,
        colors: Option<usize>,
    },
    /// `times[index]` is earlier than `times[index - 1]`.
    Backwards { index: usize },
}

/// Whether a trace's `sizes`, `times` and `colors` (if any) have one length, as these are
/// counted: what a caller reading the trace in parts checks before it reads.
///
/// # Errors
///
/// [`TraceError::Lengths`], with every length, if not.
pub fn same_lengths(sizes: usize, times: usize, colors: Option<usize>) -> Result<(), TraceError> {
    if times == sizes && colors.is_none_or(|colors| colors == sizes) {
        Ok(())
    } else {
        Err(TraceError::Lengths {
            sizes,
            times,
            colors,
        })
    }
}

/// Mark every packet `(sizes[i], times[i], colors[i])` in order, on a copy of `meter` that
/// replaces it only if the whole trace is valid.
///
/// # Errors
///
/// [`TraceError`] for a trace that cannot be marked; `meter` is then unchanged.
pub fn mark_trace<M: Meter + Clone>(
    meter: &mut M,
    sizes: &[u64],
    times: &[i64],
    colors: Option<&[Color]>,
) -> Result<Vec<Color>, TraceError> {
    same_lengths(sizes.len(), times.len(), colors.map(<[Color]>::len))?;
    let mut trace = TraceMarker::new(meter.clone());
    let mut colored = vec![Color::Green; sizes.len()];
    trace.mark(sizes, times, colors, &mut colored)?;
    *meter = trace.finish();
    Ok(colored)
}

/// Marks a trace in one or more pieces (a caller may read a long trace in parts), carrying the
/// meter, the last time seen and the packet count from one piece to the next, so the indices in
/// its errors are those of the whole trace.
#[derive(Debug, Clone)]
pub struct TraceMarker<M> {
    meter: M,
    last_time: Option<i64>,
    marked: usize,
}

impl<M: Meter> TraceMarker<M> {
    /// Start marking on `meter` (a working copy: keep it with [`TraceMarker::finish`] only if
    /// every piece was valid).
    pub fn new(meter: M) -> Self {
        Self {
            meter,
            last_time: None,
            marked: 0,
        }
    }

    /// Mark the next piece of the trace into `out` (one colour per packet).
    ///
    /// # Errors
    ///
    /// [`TraceError::Backwards`] naming the packet's index in the whole trace.
    ///
    /// # Panics
    ///
    /// If the slices' lengths differ (the caller checks the whole trace's lengths first).
    pub fn mark(
        &mut self,
        sizes: &[u64],
        times: &[i64],
        colors: Option<&[Color]>,
        out: &mut [Color],
    ) -> Result<(), TraceError> {
        assert!(
            sizes.len() == times.len()
                && out.len() == sizes.len()
                && colors.is_none_or(|c| c.len() == sizes.len())
        );
        // A loop each for colour-blind and colour-aware traces: a colour-blind packet is not
        // asked for a colour it has not got.
        match colors {
            None => self.mark_each(sizes, times, out, |_| None),
            Some(colors) => self.mark_each(sizes, times, out, |i| Some(colors[i])),
        }
    }

    fn mark_each(
        &mut self,
        sizes: &[u64],
        times: &[i64],
        out: &mut [Color],
        arrived: impl Fn(usize) -> Option<Color>,
    ) -> Result<(), TraceError> {
        for (i, ((&size, &time), out)) in sizes.iter().zip(times).zip(out).enumerate() {
            if self.last_time.is_some_and(|last| time < last) {
                return Err(TraceError::Backwards {
                    index: self.marked + i,
                });
            }
            self.last_time = Some(time);
            *out = self.meter.mark(size, time, arrived(i));
        }
        self.marked += sizes.len();
        Ok(())
    }

    /// The meter after every piece marked so far.
    pub fn finish(self) -> M {
        self.meter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::meter::bucket::ByteRate;
    use crate::core::meter::srtcm::SrTcm;

    fn meter() -> SrTcm {
        SrTcm::new(ByteRate::new(100, 1).unwrap(), 1000, 500, None).unwrap()
    }

    #[test]
    fn a_trace_marks_as_its_packets_would_one_by_one() {
        let sizes = [600, 600, 600, 100];
        let times = [0, 1_000_000, 2_000_000_000, 2_000_000_000];
        let mut one_by_one = meter();
        let expected: Vec<_> = sizes
            .iter()
            .zip(times)
            .map(|(&size, time)| one_by_one.mark(size, time, None))
            .collect();
        let mut traced = meter();
        assert_eq!(mark_trace(&mut traced, &sizes, &times, None), Ok(expected));
        assert_eq!(traced, one_by_one);
    }

    #[test]
    fn a_trace_in_pieces_marks_as_one_and_names_indices_of_the_whole() {
        let (sizes, times) = ([600, 400, 600, 100], [0, 10, 20, 30]);
        let colors = [Color::Green, Color::Yellow, Color::Green, Color::Red];
        let mut whole = meter();
        let expected = mark_trace(&mut whole, &sizes, &times, Some(&colors)).unwrap();
        assert_eq!(
            expected,
            [Color::Green, Color::Yellow, Color::Red, Color::Red]
        );
        let mut pieces = TraceMarker::new(meter());
        let mut out = [Color::Green; 4];
        let (first, rest) = out.split_at_mut(2);
        pieces
            .mark(&sizes[..2], &times[..2], Some(&colors[..2]), first)
            .unwrap();
        pieces
            .mark(&sizes[2..], &times[2..], Some(&colors[2..]), rest)
            .unwrap();
        assert_eq!(out.to_vec(), expected);
        assert_eq!(pieces.clone().finish(), whole);
        assert_eq!(
            pieces.mark(&[1, 1, 1], &[30, 31, 29], None, &mut [Color::Green; 3]),
            Err(TraceError::Backwards { index: 6 }),
            "the seventh packet of the whole trace"
        );
    }

    #[test]
    fn colours_must_line_up_with_the_packets() {
        let mut m = meter();
        let lengths = |colors| TraceError::Lengths {
            sizes: 2,
            times: 2,
            colors,
        };
        assert_eq!(
            mark_trace(&mut m, &[1, 1], &[0, 0], Some(&[Color::Green])),
            Err(lengths(Some(1)))
        );
        assert_eq!(
            mark_trace(&mut m, &[1, 1], &[0], None),
            Err(TraceError::Lengths {
                sizes: 2,
                times: 1,
                colors: None
            })
        );
        assert_eq!(
            mark_trace(&mut m, &[1, 1], &[0, 0], Some(&[Color::Red; 2])),
            Ok(vec![Color::Red; 2])
        );
        let full = meter();
        assert_eq!(
            (m.committed.level(), m.excess.level()),
            (full.committed.level(), full.excess.level()),
            "red packets take nothing"
        );
    }

    #[test]
    fn a_bad_trace_is_refused_whole() {
        let mut m = meter();
        let before = m;
        assert_eq!(
            mark_trace(&mut m, &[1, 1, 1], &[0, 5, 4], None),
            Err(TraceError::Backwards { index: 2 })
        );
        assert_eq!(m, before);
    }

    #[test]
    fn a_trace_read_in_parts_checks_its_lengths_first_and_its_colour_codes_as_read() {
        assert_eq!(same_lengths(3, 3, None), Ok(()));
        assert_eq!(same_lengths(3, 3, Some(3)), Ok(()));
        assert_eq!(
            same_lengths(3, 3, Some(2)),
            Err(TraceError::Lengths {
                sizes: 3,
                times: 3,
                colors: Some(2)
            })
        );
        assert_eq!(Color::try_from(2_i128), Ok(Color::Red));
        assert_eq!(Color::try_from(3_i128), Err(()));
        assert_eq!(Color::try_from(-1_i128), Err(()));
    }
}
