//! A rate as people write it: `"100/minute"`, `"10 per second"`, `"1000/hour"`.
//!
//! A quota is a count of tokens per period. Users of other limiters write it as text, a count,
//! `/` or `per`, and a unit, with an optional number of units (`"300 per 5 minutes"`). This
//! module reads that text into the count (left as text, so the caller reads it exactly, as it
//! reads any rate) and the period in whole seconds; the rate is then `count / period`.
//!
//! One spelling is refused on purpose: two numbers around a slash. `"100/60"` could mean 100
//! tokens per 60 seconds (a burst of 100) or the fraction 5/3 per second (a burst of 2): the
//! same rate, two different limiters. Nobody should have to guess which one they got.
//!
//! Months and years are refused too: they have no fixed length, and a limiter's period must.

/// A count of tokens and the period, in seconds, it refills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota<'a> {
    /// The count exactly as written (`"100"`, `"2.5"`).
    pub count: &'a str,
    /// The period in whole seconds.
    pub per_seconds: u64,
}

/// Why a rate's text is not a quota the limiter can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaError {
    /// Two numbers around a slash: `count / seconds` and a fraction are both plausible.
    Ambiguous { count: String, divisor: String },
    /// A unit that is not a second, minute, hour or day.
    UnknownUnit(String),
    /// A month or a year: no fixed length.
    NoFixedLength(String),
    /// A period of zero units: nothing would ever refill.
    ZeroPeriod,
    /// More units than 64 bits of seconds can hold.
    TooLong,
}

impl QuotaError {
    /// What to write instead: the message for a rate text that is not a usable quota, shown as
    /// `text` (the caller's spelling of it, quotes included).
    #[must_use]
    pub fn advice(&self, text: &str) -> String {
        match self {
            Self::Ambiguous { count, divisor } => {
                let integers = [count, divisor]
                    .iter()
                    .all(|part| part.chars().all(|c| c.is_ascii_digit()));
                let fraction = if integers {
                    format!("Fraction({count}, {divisor})")
                } else {
                    format!("Fraction(\"{count}\") / Fraction(\"{divisor}\")")
                };
                format!(
                    "rate {text} could mean {count} tokens per {divisor} seconds or the fraction \
                     {count}/{divisor} per second, two limiters with different bursts: write \
                     rate={count}, per={divisor} (or a unit: \"{count}/minute\") for the first, \
                     {fraction} for the second"
                )
            }
            Self::UnknownUnit(unit) => format!(
                "rate {text}: '{unit}' is not a unit; write second, minute, hour or day, as in \
                 \"100/minute\" or \"300 per 5 minutes\""
            ),
            Self::NoFixedLength(unit) => format!(
                "rate {text}: a {unit} has no fixed length; give the period in days, as in \
                 \"1000 per 30 days\""
            ),
            Self::ZeroPeriod => format!("rate {text}: the period must be positive"),
            Self::TooLong => format!("rate {text}: the period exceeds 2**64 - 1 seconds"),
        }
    }
}

/// The units a period may be written in, with their lengths in seconds.
const UNITS: &[(&[&str], u64)] = &[
    (&["s", "sec", "secs", "second", "seconds"], 1),
    (&["m", "min", "mins", "minute", "minutes"], 60),
    (&["h", "hr", "hrs", "hour", "hours"], 3_600),
    (&["d", "day", "days"], 86_400),
];

/// Read `text` as a quota.
///
/// `Ok(None)`: the text has no `/` and no `per`, so it is a plain number for the caller to
/// read. `Ok(Some(quota))`: a count and a period. An error: text that looks like a quota but
/// is not one the limiter can use.
///
/// ```
/// use protocol_in_code_qos::core::exact::quota::{parse, Quota};
/// assert_eq!(parse("100/minute"), Ok(Some(Quota { count: "100", per_seconds: 60 })));
/// assert_eq!(parse("300 per 5 minutes"), Ok(Some(Quota { count: "300", per_seconds: 300 })));
/// assert_eq!(parse("2.5"), Ok(None));
/// assert!(parse("100/60").is_err());
/// ```
///
/// # Errors
///
/// [`QuotaError`], naming what is wrong.
pub fn parse(text: &str) -> Result<Option<Quota<'_>>, QuotaError> {
    let trimmed = text.trim();
    let Some((count, period)) = split_count(trimmed) else {
        return Ok(None);
    };
    let (how_many, unit) = split_multiplier(period);
    if unit.is_empty() {
        return Err(QuotaError::UnknownUnit(String::new()));
    }
    if unit.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(QuotaError::Ambiguous {
            count: count.to_owned(),
            divisor: period.to_owned(),
        });
    }
    let lower = unit.to_ascii_lowercase();
    if ["month", "months", "mo", "year", "years", "y", "yr"].contains(&lower.as_str()) {
        return Err(QuotaError::NoFixedLength(unit.to_owned()));
    }
    let Some(&(_, seconds)) = UNITS
        .iter()
        .find(|(names, _)| names.contains(&lower.as_str()))
    else {
        return Err(QuotaError::UnknownUnit(unit.to_owned()));
    };
    if how_many == 0 {
        return Err(QuotaError::ZeroPeriod);
    }
    let per_seconds = how_many.checked_mul(seconds).ok_or(QuotaError::TooLong)?;
    Ok(Some(Quota { count, per_seconds }))
}

/// `"100/minute"` or `"100 per minute"` as `("100", "minute")`; `None` if neither separator is
/// there.
fn split_count(text: &str) -> Option<(&str, &str)> {
    if let Some((count, period)) = text.split_once('/') {
        return Some((count.trim(), period.trim()));
    }
    let lower = text.to_ascii_lowercase();
    let at = lower.find(" per ")?;
    Some((text[..at].trim(), text[at + " per ".len()..].trim()))
}

/// `"5 minutes"` as `(5, "minutes")`, `"5minutes"` too, and `"minute"` as `(1, "minute")`.
fn split_multiplier(period: &str) -> (u64, &str) {
    let digits = period.len()
        - period
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    let unit = period[digits..].trim();
    if digits == 0 || unit.is_empty() || unit.starts_with('.') {
        return (1, period);
    }
    match period[..digits].parse() {
        Ok(how_many) => (how_many, unit),
        Err(_) => (u64::MAX, unit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_shows_both_readings_of_a_bare_slash() {
        let advice = parse("100/60").unwrap_err().advice("'100/60'");
        assert!(advice.starts_with("rate '100/60' could mean 100 tokens per 60 seconds"));
        assert!(advice.contains("write rate=100, per=60"));
        assert!(advice.ends_with("Fraction(100, 60) for the second"));
        let decimal = parse("1.5/2").unwrap_err().advice("'1.5/2'");
        assert!(decimal.ends_with("Fraction(\"1.5\") / Fraction(\"2\") for the second"));
        let month = parse("5/month").unwrap_err().advice("'5/month'");
        assert_eq!(
            month,
            "rate '5/month': a month has no fixed length; give the period in days, as in \
             \"1000 per 30 days\""
        );
    }

    /// What `parse` answers for a usable quota.
    type Parsed<'a> = Result<Option<Quota<'a>>, QuotaError>;

    #[allow(clippy::unnecessary_wraps)] // the expected answer, in `parse`'s own type
    fn quota(count: &str, per_seconds: u64) -> Parsed<'_> {
        Ok(Some(Quota { count, per_seconds }))
    }

    #[test]
    fn a_count_per_unit_in_either_spelling() {
        assert_eq!(parse("100/minute"), quota("100", 60));
        assert_eq!(parse("10/second"), quota("10", 1));
        assert_eq!(parse("1000/hour"), quota("1000", 3_600));
        assert_eq!(parse("5 per second"), quota("5", 1));
        assert_eq!(parse(" 7 PER Day "), quota("7", 86_400));
        assert_eq!(parse("10/s"), quota("10", 1));
        assert_eq!(parse("2.5/min"), quota("2.5", 60));
    }

    #[test]
    fn a_number_of_units() {
        assert_eq!(parse("300 per 5 minutes"), quota("300", 300));
        assert_eq!(parse("10/2h"), quota("10", 7_200));
    }

    #[test]
    fn plain_numbers_are_not_quotas() {
        assert_eq!(parse("2.5"), Ok(None));
        assert_eq!(parse("100"), Ok(None));
        assert_eq!(parse("1e3"), Ok(None));
    }

    #[test]
    fn two_numbers_around_a_slash_are_ambiguous() {
        let ambiguous = |count: &str, divisor: &str| QuotaError::Ambiguous {
            count: count.into(),
            divisor: divisor.into(),
        };
        assert_eq!(parse("100/60"), Err(ambiguous("100", "60")));
        assert_eq!(parse("1/3"), Err(ambiguous("1", "3")));
        assert_eq!(parse("5/"), Err(QuotaError::UnknownUnit(String::new())));
    }

    #[test]
    fn units_without_a_fixed_length_or_unknown_are_refused() {
        assert_eq!(
            parse("100/month"),
            Err(QuotaError::NoFixedLength("month".into()))
        );
        assert_eq!(
            parse("100 per fortnight"),
            Err(QuotaError::UnknownUnit("fortnight".into()))
        );
    }

    #[test]
    fn a_period_of_zero_or_beyond_64_bits_of_seconds_is_refused() {
        assert_eq!(
            parse("1 per 99999999999999999999 days"),
            Err(QuotaError::TooLong)
        );
        assert_eq!(parse("1 per 0 minutes"), Err(QuotaError::ZeroPeriod));
    }
}
