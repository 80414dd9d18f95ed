use super::*;

fn ratio(numerator: u64, denominator: u64) -> Ratio {
    Ratio::new(numerator, denominator).unwrap()
}

fn band(rate: Ratio, burst: Option<u64>, per: Option<Ratio>) -> BandConfig {
    BandConfig::new(rate, burst, per).unwrap()
}

#[test]
fn a_band_keeps_its_period_as_written_and_decides_per_second() {
    let hundred_a_minute = band(ratio(100, 1), Some(20), Some(ratio(60, 1)));
    assert_eq!(hundred_a_minute.rate(), ratio(100, 1));
    assert_eq!(hundred_a_minute.per(), ratio(60, 1));
    assert_eq!(hundred_a_minute.per_second(), ratio(5, 3));
    assert_eq!(hundred_a_minute.spec().rate, Rate::new(5, 3).unwrap());
    assert_eq!(hundred_a_minute.burst(), 20);
}

#[test]
fn the_default_burst_is_one_periods_tokens_rounded_up() {
    assert_eq!(band(ratio(5, 2), None, None).burst(), 3);
    assert_eq!(band(ratio(1, 3), None, None).burst(), 1);
    assert_eq!(band(ratio(100, 1), None, Some(ratio(60, 1))).burst(), 100);
    assert_eq!(band(ratio(u64::MAX, 1), None, None).burst(), u64::MAX);
}

#[test]
fn numbers_no_band_can_hold_are_refused_by_name() {
    assert_eq!(
        BandConfig::new(ratio(1, 1), Some(0), None),
        Err(ConfigError::ZeroBurst)
    );
    let fine = BandConfig::new(ratio(1, u64::MAX), Some(u64::MAX), None);
    assert!(matches!(
        fine,
        Err(ConfigError::TooFine {
            burst: u64::MAX,
            ..
        })
    ));
    // u64::MAX tokens per 1/u64::MAX seconds: u64::MAX**2 per second.
    let fast = BandConfig::new(ratio(u64::MAX, 1), Some(1), Some(ratio(1, u64::MAX)));
    assert!(matches!(
        fast,
        Err(ConfigError::PerSecondBeyond64Bits { .. })
    ));
    assert_eq!(Config::new(vec![]), Err(ConfigError::NoBands));
}

#[test]
fn a_quotient_is_reduced_before_it_is_checked() {
    // 2**63 per 2**63 seconds is one per second, though 2**63 * 2**63 overflows.
    let big = 1 << 63;
    let one = band(ratio(big, 1), Some(1), Some(ratio(big, 1)));
    assert_eq!(one.per_second(), ratio(1, 1));
    assert_eq!(one.rate(), ratio(big, 1));
}

#[test]
fn initial_must_fit_every_band() {
    let config = Config::new(vec![
        band(ratio(10, 1), Some(10), None),
        band(ratio(1, 1), Some(5), None),
    ])
    .unwrap();
    assert_eq!(config.check_initial(5), Ok(5));
    assert_eq!(
        config.check_initial(6),
        Err(ConfigError::InitialAboveBurst {
            initial: 6,
            burst: 5
        })
    );
}

#[test]
fn the_encoding_reads_back_and_says_its_shape() {
    let config = Config::new(vec![
        band(ratio(100, 1), Some(20), Some(ratio(60, 1))),
        band(ratio(1000, 1), None, Some(ratio(1, 3))),
    ])
    .unwrap();
    let bytes = config.encode();
    assert_eq!(bytes.len(), 4 + 2 * 40);
    assert_eq!(&bytes[..4], &[ENCODING_VERSION, FIELDS_PER_BAND, 0, 2]);
    // Band 1: 5/3 per second, burst 20, per 60/1.
    let first: Vec<u64> = bytes[4..44]
        .chunks_exact(8)
        .map(|field| u64::from_be_bytes(field.try_into().unwrap()))
        .collect();
    assert_eq!(first, [5, 3, 20, 60, 1]);
    assert_eq!(Config::decode(&bytes), Ok(config));
}

#[test]
fn an_encoding_of_another_shape_is_never_misread() {
    let config = Config::new(vec![band(ratio(10, 1), Some(10), None)]).unwrap();
    let bytes = config.encode();
    let unreadable =
        |bytes: &[u8]| matches!(Config::decode(bytes), Err(ConfigError::Unreadable(_)));
    let mut other_version = bytes.clone();
    other_version[0] = 2;
    assert!(unreadable(&other_version));
    let mut six_fields = bytes.clone();
    six_fields[1] = 6;
    six_fields.extend([0; 8]);
    assert!(unreadable(&six_fields));
    assert!(unreadable(&bytes[..bytes.len() - 1]));
    assert!(unreadable(&bytes[..3]));
    let mut unreduced = bytes.clone();
    unreduced[4 + 7] = 20; // 20/1 per second ...
    unreduced[4 + 15] = 2; // ... over 2: 20/2, not in lowest terms
    assert!(unreadable(&unreduced));
    let mut zero_burst = bytes;
    zero_burst[4 + 23] = 0;
    assert_eq!(Config::decode(&zero_burst), Err(ConfigError::ZeroBurst));
}

#[test]
fn the_fingerprint_is_fnv1a_of_the_encoding() {
    let config = Config::new(vec![band(ratio(10, 1), Some(20), None)]).unwrap();
    // FNV-1a 64 of [1, 5, 0, 1, then 10, 1, 20, 1, 1 as big-endian u64s], computed by hand
    // from its definition so that the constant below pins the encoding and the hash together.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [1u8, 5, 0, 1].into_iter().chain(
        [10u64, 1, 20, 1, 1]
            .iter()
            .flat_map(|field| field.to_be_bytes()),
    ) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
    }
    assert_eq!(config.fingerprint(), hash);
    // And the same number written out, so a change to either shows here.
    assert_eq!(config.fingerprint(), 0x9094_9290_ee04_18bd);
}

#[test]
fn errors_say_what_to_write() {
    assert_eq!(
        ConfigError::NotPositive {
            param: Param::Per,
            shown: "-1".into()
        }
        .to_string(),
        "per must be positive, not -1"
    );
    assert_eq!(
        ConfigError::InitialAboveBurst {
            initial: 6,
            burst: 5
        }
        .to_string(),
        "initial=6 is more than a band's burst (5)"
    );
}
