//! A limit's configuration, decided in one place: what a band is, its defaults, its checks,
//! and the one way it is written down for anyone else to read.
//!
//! A user writes a band as a rate, a burst and a period: `100 per 60 seconds, bursts of 20`.
//! [`BandConfig::new`] turns that into the exact numbers a limiter decides with (a [`BandSpec`]:
//! tokens per second as a fraction in lowest terms, and the burst), filling in the default burst
//! (the tokens one period brings, rounded up) and refusing anything a limiter cannot hold
//! exactly. It remembers the period as written, so the band can be shown as it was given:
//! `Band(rate=100, burst=20, per=60)`, not `5/3 tokens per second`.
//!
//! A [`Config`] is one or more bands. It has one canonical encoding, [`Config::encode`]: the
//! bytes that a pickle, the Redis script and any other store read, and that
//! [`Config::fingerprint`] hashes. Two limiters share state only if their fingerprints agree.

use std::fmt;

use super::quota::QuotaError;
use super::rate::{gcd, BandSpec, Rate, RateError};

/// A positive exact number whose numerator and denominator fit 64 bits, in lowest terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    numerator: u64,
    denominator: u64,
}

impl Ratio {
    /// `numerator / denominator`, reduced; `None` if either is zero.
    #[must_use]
    pub fn new(numerator: u64, denominator: u64) -> Option<Self> {
        if numerator == 0 || denominator == 0 {
            return None;
        }
        let divisor = gcd(numerator, denominator);
        Some(Self {
            numerator: numerator / divisor,
            denominator: denominator / divisor,
        })
    }

    /// A whole number.
    #[must_use]
    pub fn whole(value: u64) -> Option<Self> {
        Self::new(value, 1)
    }

    #[must_use]
    pub fn numerator(self) -> u64 {
        self.numerator
    }

    #[must_use]
    pub fn denominator(self) -> u64 {
        self.denominator
    }

    /// The smallest whole number at least this one.
    #[must_use]
    pub fn ceil(self) -> u64 {
        self.numerator.div_ceil(self.denominator)
    }

    /// `self / other`, if its numerator and denominator fit 64 bits. Each factor is reduced
    /// against the other first, so the products are already in lowest terms: when one does not
    /// fit, no smaller spelling of the quotient does either.
    fn over(self, other: Self) -> Option<Self> {
        let a = gcd(self.numerator, other.numerator);
        let b = gcd(other.denominator, self.denominator);
        let numerator = (self.numerator / a).checked_mul(other.denominator / b)?;
        let denominator = (self.denominator / b).checked_mul(other.numerator / a)?;
        Some(Self {
            numerator,
            denominator,
        })
    }

    /// `self * other`, if it fits 64 bits (reduced the same way as [`Self::over`]).
    fn times(self, other: Self) -> Option<Self> {
        self.over(Self {
            numerator: other.denominator,
            denominator: other.numerator,
        })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.denominator == 1 {
            write!(f, "{}", self.numerator)
        } else {
            write!(f, "{}/{}", self.numerator, self.denominator)
        }
    }
}

/// Which of a band's numbers an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Rate,
    Per,
    Burst,
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rate => "rate",
            Self::Per => "per",
            Self::Burst => "burst",
        })
    }
}

/// Why a configuration cannot be used. Each message names the number and what to write
/// instead; `shown` is the value as its writer spelled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A rate or period that is zero or negative.
    NotPositive { param: Param, shown: String },
    /// A rate or period whose numerator or denominator needs more than 64 bits.
    Beyond64Bits { param: Param, shown: String },
    /// A burst of zero: no request could ever pass.
    ZeroBurst,
    /// A burst that is no whole number of tokens from 1 to 2**64 - 1 (negative, or too large).
    BurstRange { shown: String },
    /// Tokens per second (`rate / per`) need more than 64 bits above or below the line.
    PerSecondBeyond64Bits { rate: Ratio, per: Ratio },
    /// The burst, counted in the rate's units, does not fit the integers a band holds.
    TooFine { per_second: Ratio, burst: u64 },
    /// Text that looks like a quota but is not one (see [`super::quota`]).
    Quota { error: QuotaError, shown: String },
    /// A quota's text says its period, and `per` says it again.
    PeriodTwice { shown: String, count: String },
    /// No bands at all.
    NoBands,
    /// More bands than the encoding counts (2**16 - 1).
    TooManyBands(usize),
    /// A starting balance larger than a band can hold.
    InitialAboveBurst { initial: u64, burst: u64 },
    /// An encoding this version cannot read.
    Unreadable(&'static str),
    /// Neither a rate nor bands given.
    NoLimit,
    /// Both a rate and bands given.
    RateAndBands,
    /// `burst` or `per` given beside `bands`, where each band says its own.
    BandOptionsBesideBands,
    /// `bands` that is no list of bands (a string, say).
    BandsNotAList { shown: String },
    /// A band given as a tuple of neither two nor three items.
    BandTuple { shown: String },
    /// An item of `bands` that is no band.
    NotABand { shown: String },
}

impl ConfigError {
    /// Whether the error is in how the call is written (two ways of saying one thing, a
    /// missing or misplaced argument, a value of the wrong kind) rather than in a value.
    #[must_use]
    pub fn is_in_the_call(&self) -> bool {
        matches!(
            self,
            Self::PeriodTwice { .. }
                | Self::NoLimit
                | Self::RateAndBands
                | Self::BandOptionsBesideBands
                | Self::BandsNotAList { .. }
                | Self::BandTuple { .. }
                | Self::NotABand { .. }
        )
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPositive { param, shown } => {
                write!(f, "{param} must be positive, not {shown}")
            }
            Self::Beyond64Bits { param, shown } => write!(
                f,
                "{param} {shown} needs a numerator or denominator beyond 64 bits"
            ),
            Self::ZeroBurst => f.write_str("burst must be an int from 1 to 2**64 - 1, not 0"),
            Self::BurstRange { shown } => {
                write!(f, "burst must be an int from 1 to 2**64 - 1, not {shown}")
            }
            Self::PerSecondBeyond64Bits { rate, per } => write!(
                f,
                "rate {rate} per {per} seconds is a rate per second whose numerator or \
                 denominator needs more than 64 bits"
            ),
            Self::TooFine { per_second, burst } => write!(
                f,
                "burst {burst} at {per_second} tokens per second is too fine to hold exactly: \
                 burst times the rate's denominator times 10**9 must stay below 2**120"
            ),
            Self::Quota { error, shown } => f.write_str(&error.advice(shown)),
            Self::PeriodTwice { shown, count } => write!(
                f,
                "rate {shown} already says its period: drop per=, or write rate={count}, per=..."
            ),
            Self::NoBands => f.write_str("bands must hold at least one band"),
            Self::TooManyBands(count) => {
                write!(f, "bands may hold at most 65535 bands, not {count}")
            }
            Self::InitialAboveBurst { initial, burst } => {
                write!(f, "initial={initial} is more than a band's burst ({burst})")
            }
            Self::Unreadable(why) => write!(f, "not a configuration this version reads: {why}"),
            Self::NoLimit => f.write_str("give a rate, or bands"),
            Self::RateAndBands => f.write_str("give a rate or bands, not both"),
            Self::BandOptionsBesideBands => {
                f.write_str("burst and per belong to each band when bands is given")
            }
            Self::BandsNotAList { shown } => write!(
                f,
                "bands must be a list of Band or (rate, burst[, per]) tuples, not {shown}"
            ),
            Self::BandTuple { shown } => write!(
                f,
                "a band tuple is (rate, burst) or (rate, burst, per), not {shown}"
            ),
            Self::NotABand { shown } => write!(
                f,
                "bands must hold Band objects or (rate, burst[, per]) tuples, not {shown}: for \
                 one limit write RateLimiter(rate), for several \
                 bands=[Band(10), Band(1000, per=3600)]"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One band: a rate of `rate` tokens per `per` seconds, holding at most `burst` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BandConfig {
    spec: BandSpec,
    per: Ratio,
}

impl BandConfig {
    /// The band of `rate` tokens per `per` seconds (default: one second), holding at most
    /// `burst` tokens (default: the rate rounded up, the tokens one period brings).
    ///
    /// ```
    /// use protocol_in_code_qos::core::exact::config::{BandConfig, Ratio};
    /// let band = BandConfig::new(Ratio::whole(100).unwrap(), None, Ratio::whole(60)).unwrap();
    /// assert_eq!((band.rate().to_string(), band.burst(), band.per().to_string()),
    ///            ("100".into(), 100, "60".into()));
    /// assert_eq!(band.spec().rate.numerator, 5); // 5/3 tokens per second
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroBurst`], [`ConfigError::PerSecondBeyond64Bits`] or
    /// [`ConfigError::TooFine`].
    ///
    /// # Panics
    ///
    /// Never: a quotient of two positive numbers is positive.
    pub fn new(rate: Ratio, burst: Option<u64>, per: Option<Ratio>) -> Result<Self, ConfigError> {
        let per = per.unwrap_or(Ratio {
            numerator: 1,
            denominator: 1,
        });
        let burst = burst.unwrap_or_else(|| rate.ceil());
        if burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        let per_second = rate
            .over(per)
            .ok_or(ConfigError::PerSecondBeyond64Bits { rate, per })?;
        let exact = Rate::new(per_second.numerator, per_second.denominator)
            .expect("a quotient of positive numbers is positive");
        let spec = BandSpec::new(exact, burst).map_err(|error| match error {
            RateError::ZeroBurst => ConfigError::ZeroBurst,
            RateError::Zero | RateError::TooFine => ConfigError::TooFine { per_second, burst },
        })?;
        Ok(Self { spec, per })
    }

    /// The numbers a limiter decides with.
    #[must_use]
    pub fn spec(&self) -> BandSpec {
        self.spec
    }

    /// Tokens per period, as written.
    ///
    /// # Panics
    ///
    /// Never: this is the rate the band was made from, which fit 64 bits.
    #[must_use]
    pub fn rate(&self) -> Ratio {
        self.per_second()
            .times(self.per)
            .expect("rate per period was given in 64 bits, and this is that number again")
    }

    /// Tokens per second.
    #[must_use]
    pub fn per_second(&self) -> Ratio {
        Ratio {
            numerator: self.spec.rate.numerator,
            denominator: self.spec.rate.denominator,
        }
    }

    /// The most tokens the band holds.
    #[must_use]
    pub fn burst(&self) -> u64 {
        self.spec.burst
    }

    /// The period, in seconds, the rate is counted over.
    #[must_use]
    pub fn per(&self) -> Ratio {
        self.per
    }
}

/// One or more bands, consumed all-or-nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    bands: Vec<BandConfig>,
}

/// The version of [`Config::encode`]'s layout.
pub const ENCODING_VERSION: u8 = 1;
/// The numbers each band carries in [`Config::encode`].
pub const FIELDS_PER_BAND: u8 = 5;
/// Bytes before the first band in [`Config::encode`].
const HEADER: usize = 4;

impl Config {
    /// # Errors
    ///
    /// [`ConfigError::NoBands`] for an empty list, [`ConfigError::TooManyBands`] for more
    /// than two bytes count.
    pub fn new(bands: Vec<BandConfig>) -> Result<Self, ConfigError> {
        if bands.is_empty() {
            return Err(ConfigError::NoBands);
        }
        if bands.len() > usize::from(u16::MAX) {
            return Err(ConfigError::TooManyBands(bands.len()));
        }
        Ok(Self { bands })
    }

    #[must_use]
    pub fn bands(&self) -> &[BandConfig] {
        &self.bands
    }

    /// `initial` tokens, if every band can hold them.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InitialAboveBurst`], naming the first band that cannot.
    pub fn check_initial(&self, initial: u64) -> Result<u64, ConfigError> {
        match self.bands.iter().find(|band| initial > band.burst()) {
            Some(band) => Err(ConfigError::InitialAboveBurst {
                initial,
                burst: band.burst(),
            }),
            None => Ok(initial),
        }
    }

    /// The numbers each band decides with, in order.
    #[must_use]
    pub fn specs(&self) -> Vec<BandSpec> {
        self.bands.iter().map(BandConfig::spec).collect()
    }

    /// The canonical encoding: a version byte, the number of fields per band, the number of
    /// bands (two bytes), then for each band its fields as big-endian 64-bit integers: tokens
    /// per second (numerator, denominator), burst, and the period as written (numerator,
    /// denominator). Every field is a whole number, so the bytes are the same on every
    /// platform and in every language that reads them; a reader checks the version and the
    /// field count before it reads a band, so a layout it does not know is never misread.
    ///
    /// ```
    /// use protocol_in_code_qos::core::exact::config::{BandConfig, Config, Ratio};
    /// let band = BandConfig::new(Ratio::whole(10).unwrap(), Some(20), None).unwrap();
    /// let config = Config::new(vec![band]).unwrap();
    /// let bytes = config.encode();
    /// assert_eq!(&bytes[..4], &[1, 5, 0, 1]);
    /// assert_eq!(Config::decode(&bytes), Ok(config));
    /// ```
    ///
    /// # Panics
    ///
    /// Never: [`Config::new`] keeps the number of bands within two bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let count = u16::try_from(self.bands.len()).expect("Config::new bounds the bands");
        let mut bytes = Vec::with_capacity(HEADER + self.bands.len() * 40);
        bytes.extend([ENCODING_VERSION, FIELDS_PER_BAND]);
        bytes.extend(count.to_be_bytes());
        for band in &self.bands {
            let fields = [
                band.spec.rate.numerator,
                band.spec.rate.denominator,
                band.spec.burst,
                band.per.numerator,
                band.per.denominator,
            ];
            for field in fields {
                bytes.extend(field.to_be_bytes());
            }
        }
        bytes
    }

    /// Read [`Self::encode`]'s bytes back, checking every band as [`BandConfig::new`] does.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unreadable`] for bytes of another layout; the band errors for numbers no
    /// band may hold.
    ///
    /// # Panics
    ///
    /// Never: each field is read from exactly eight bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, ConfigError> {
        let [version, fields, high, low, ..] = *bytes else {
            return Err(ConfigError::Unreadable("shorter than its header"));
        };
        if version != ENCODING_VERSION {
            return Err(ConfigError::Unreadable("an unknown version"));
        }
        if fields != FIELDS_PER_BAND {
            return Err(ConfigError::Unreadable(
                "an unknown number of fields per band",
            ));
        }
        let count = usize::from(u16::from_be_bytes([high, low]));
        let width = usize::from(fields) * 8;
        if bytes.len() != HEADER + count * width {
            return Err(ConfigError::Unreadable(
                "a length its band count does not give",
            ));
        }
        let bands = bytes[HEADER..]
            .chunks_exact(width)
            .map(|band| {
                let field = |i: usize| {
                    u64::from_be_bytes(band[8 * i..8 * i + 8].try_into().expect("8 bytes"))
                };
                // Each fraction as written, which must already be in lowest terms: one
                // configuration has one encoding.
                let fraction = |at: usize| {
                    Ratio::new(field(at), field(at + 1))
                        .filter(|ratio| {
                            (ratio.numerator, ratio.denominator) == (field(at), field(at + 1))
                        })
                        .ok_or(ConfigError::Unreadable(
                            "a fraction not positive or not in lowest terms",
                        ))
                };
                let per_second = fraction(0)?;
                let per = fraction(3)?;
                let rate = per_second
                    .times(per)
                    .ok_or(ConfigError::Unreadable("a rate per period beyond 64 bits"))?;
                BandConfig::new(rate, Some(field(2)), Some(per))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(bands)
    }

    /// A 64-bit fingerprint of [`Self::encode`]'s bytes (FNV-1a): equal configurations have
    /// equal fingerprints on every platform and in every version that keeps this encoding.
    /// It tells configurations apart; it is not a defence against someone who chooses them.
    ///
    /// ```
    /// use protocol_in_code_qos::core::exact::config::{BandConfig, Config, Ratio};
    /// let ten = |burst| {
    ///     let band = BandConfig::new(Ratio::whole(10).unwrap(), Some(burst), None).unwrap();
    ///     Config::new(vec![band]).unwrap().fingerprint()
    /// };
    /// assert_eq!(ten(20), ten(20));
    /// assert_ne!(ten(20), ten(21));
    /// ```
    #[must_use]
    pub fn fingerprint(&self) -> u64 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        self.encode().iter().fold(OFFSET, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        })
    }
}

#[cfg(test)]
mod tests;
