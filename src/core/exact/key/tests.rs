use super::{
    big_int, digest_bytes, encode_item, first_item, float_key, huge_float_bytes, plain_int,
    Classified, Digested, Key, KeyRef, LONGEST_KEPT, SHORT,
};

fn encoded(items: &[KeyRef<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        encode_item(*item, &mut out);
    }
    out
}

fn decoded(mut items: &[u8]) -> Vec<KeyRef<'_>> {
    let mut keys = Vec::new();
    while let Some((key, rest)) = first_item(items) {
        keys.push(key);
        items = rest;
    }
    keys
}

#[test]
fn a_tuple_encoding_reads_back_item_by_item() {
    let inner = encoded(&[KeyRef::Str("é"), KeyRef::Int(-1)]);
    let huge = [0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let items = [
        plain_int(-(1 << 100)),
        KeyRef::Wide(u64::MAX),
        KeyRef::Float(0.5_f64.to_bits()),
        KeyRef::Bytes(b""),
        KeyRef::Tuple(&inner),
        KeyRef::Object(7),
        KeyRef::Huge(&huge),
        KeyRef::Digest(Digested::Bytes, 1, u64::MAX),
        KeyRef::Digest(Digested::Tuple, 0, 0),
    ];
    assert_eq!(decoded(&encoded(&items)), items);
    assert_eq!(decoded(&inner), [KeyRef::Str("é"), KeyRef::Int(-1)]);
}

#[test]
fn different_tuples_never_encode_alike() {
    // The length words keep item boundaries apart, the tags keep kinds apart.
    let pairs = [
        (
            encoded(&[KeyRef::Str("ab")]),
            encoded(&[KeyRef::Str("a"), KeyRef::Str("b")]),
        ),
        (
            encoded(&[KeyRef::Str("a")]),
            encoded(&[KeyRef::Bytes(b"a")]),
        ),
        (encoded(&[KeyRef::Int(1)]), encoded(&[KeyRef::Object(1)])),
        (encoded(&[]), encoded(&[KeyRef::Tuple(&[])])),
        (
            encoded(&[KeyRef::Huge(&[1; 17])]),
            encoded(&[KeyRef::Bytes(&[1; 17])]),
        ),
        (
            encoded(&[KeyRef::Digest(Digested::Str, 1, 2)]),
            encoded(&[KeyRef::Digest(Digested::Bytes, 1, 2)]),
        ),
    ];
    for (a, b) in pairs {
        assert_ne!(a, b);
    }
}

fn stored(key: KeyRef<'_>) -> Key {
    Key::from(&key)
}

#[test]
fn a_borrowed_key_finds_the_stored_key_it_equals_and_no_other() {
    use hashbrown::Equivalent;
    use std::hash::{BuildHasher, BuildHasherDefault};
    let hasher = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    let long = "a".repeat(SHORT + 1);
    let tuple = encoded(&[KeyRef::Int(1)]);
    let keys = [
        KeyRef::Int(1),
        KeyRef::Int(2),
        KeyRef::Str("a"),
        KeyRef::Bytes(b"a"),
        KeyRef::Tuple(&tuple),
        KeyRef::Huge(b"a"),
        KeyRef::Str(&long),
        KeyRef::Bytes(long.as_bytes()),
        KeyRef::Str(&long[1..]),
        KeyRef::Big(1, 1),
        KeyRef::Wide(1 << 63),
        KeyRef::Float(1),
        KeyRef::Digest(Digested::Str, 1, 1),
        KeyRef::Digest(Digested::Bytes, 1, 1),
        KeyRef::Object(1),
    ];
    let stored: Vec<Key> = keys.iter().copied().map(stored).collect();
    for (i, key) in stored.iter().enumerate() {
        let borrowed = key.as_ref();
        assert_eq!(borrowed, keys[i]);
        assert_eq!(Key::from(&borrowed), *key);
        assert!(borrowed.equivalent(key));
        assert_eq!(hasher.hash_one(key), hasher.hash_one(borrowed));
        for (j, other) in stored.iter().enumerate().filter(|&(j, _)| j != i) {
            assert!(!borrowed.equivalent(other), "{key:?} found {other:?}");
            assert_ne!(key, other, "{i} {j}");
        }
    }
    assert_ne!(hasher.hash_one(&stored[0]), hasher.hash_one(&stored[1]));
    assert_ne!(hasher.hash_one(&stored[2]), hasher.hash_one(&stored[3]));
}

#[test]
fn a_key_is_two_words_whatever_its_kind() {
    // Beside a one-band record of two words, an entry of four: what keeps an int key's
    // whole cost near two of governor's 17-byte entries.
    assert_eq!(std::mem::size_of::<Key>(), 16);
}

#[test]
fn keys_of_bytes_read_back_whole_at_every_size_a_form_ends() {
    for length in [
        0,
        1,
        SHORT,
        SHORT + 1,
        32,
        33,
        64,
        65,
        LONGEST_KEPT,
        LONGEST_KEPT + 1,
    ] {
        let text = "é".repeat(length / 2) + &"x".repeat(length % 2);
        assert_eq!(text.len(), length);
        for key in [
            KeyRef::Str(&text),
            KeyRef::Bytes(text.as_bytes()),
            KeyRef::Tuple(text.as_bytes()),
            KeyRef::Huge(text.as_bytes()),
        ] {
            assert_eq!(stored(key).as_ref(), key, "{length}");
        }
    }
}

#[test]
fn only_object_numbers_are_registered() {
    assert!(stored(KeyRef::Object(1)).is_registered());
    assert!(!stored(KeyRef::Int(1)).is_registered());
    assert!(!stored(KeyRef::Tuple(&[])).is_registered());
}

#[test]
fn ints_take_the_narrowest_kind() {
    assert_eq!(plain_int(-5), KeyRef::Int(-5));
    assert_eq!(plain_int(1 << 63), KeyRef::Wide(1 << 63));
    assert_eq!(
        plain_int(-(1 << 63) - 1),
        KeyRef::Big(u64::MAX >> 1, u64::MAX)
    );
    for value in [i128::MIN, -(1 << 63) - 1, 1 << 64, i128::MAX] {
        let KeyRef::Big(low, high) = plain_int(value) else {
            panic!("{value} is a Big");
        };
        assert_eq!(big_int(low, high), value);
    }
}

#[test]
fn a_float_is_the_key_of_the_int_it_equals_or_its_own() {
    assert_eq!(float_key(3.0), Classified::Plain(KeyRef::Int(3)));
    assert_eq!(float_key(-0.0), Classified::Plain(KeyRef::Int(0)));
    assert_eq!(
        float_key(2_f64.powi(64)),
        Classified::Plain(KeyRef::Big(0, 1))
    );
    assert_eq!(
        float_key(0.5),
        Classified::Plain(KeyRef::Float(0.5_f64.to_bits()))
    );
    let infinity = f64::INFINITY.to_bits();
    assert_eq!(
        float_key(f64::INFINITY),
        Classified::Plain(KeyRef::Float(infinity))
    );
    assert_eq!(float_key(f64::NAN), Classified::Object);
    // From 2**127 on, the bytes of the int: -(2**127) is still an i128, 2**127 is not.
    assert_eq!(
        float_key(-(2_f64.powi(127))),
        Classified::Plain(plain_int(i128::MIN))
    );
    let huge = huge_float_bytes(2_f64.powi(127)).unwrap();
    assert_eq!(float_key(2_f64.powi(127)), Classified::Huge(huge.clone()));
    // Its plain key borrows the bytes; an object has none.
    assert_eq!(
        Classified::Huge(huge.clone()).as_key(),
        Some(KeyRef::Huge(&huge))
    );
    assert_eq!(Classified::Object.into_key((1, 2)), None);
}

#[test]
fn a_digest_is_named_by_its_kind_and_its_sixteen_bytes() {
    for kind in Digested::ALL {
        assert_eq!(Digested::named(kind.name()), Some(kind));
    }
    assert_eq!(Digested::named("float"), None);
    let bytes = digest_bytes(1, 2);
    assert_eq!(bytes[0], 1);
    assert_eq!(bytes[8], 2);
    assert_eq!(
        KeyRef::digest_named("tuple", &bytes),
        Some(KeyRef::Digest(Digested::Tuple, 1, 2))
    );
    assert_eq!(KeyRef::digest_named("tuple", &bytes[..15]), None);
    assert_eq!(KeyRef::digest_named("list", &bytes), None);
}

/// The bytes Python's `int.to_bytes(v.bit_length() // 8 + 1, "little", signed=True)` gives,
/// for an int within `i128`.
fn python_bytes(value: i128) -> Vec<u8> {
    let bit_length = 128 - value.unsigned_abs().leading_zeros() as usize;
    value.to_le_bytes()[..=bit_length / 8].to_vec()
}

#[test]
fn an_integral_float_has_the_bytes_of_the_int_it_equals() {
    for value in [
        1_i128 << 100,
        -(1 << 100),
        3 << 70,
        -(3 << 70),
        (1 << 53) - 1,
        1 << 63,
        -(1 << 63),
        (1 << 64) - (1 << 11),
        -(1 << 126),
        255 << 60,
        -(255 << 60),
        -(1 << 60) - (1 << 59),
        1,
        -1,
        0,
    ] {
        #[allow(clippy::cast_precision_loss)] // each is exact in a float
        let float = value as f64;
        assert_eq!(
            huge_float_bytes(float),
            Some(python_bytes(value)),
            "{value}"
        );
    }
    // 2**200 and -(2**200): 201 bits, so 26 bytes.
    let mut expected = vec![0; 26];
    expected[25] = 1;
    assert_eq!(huge_float_bytes(2_f64.powi(200)), Some(expected.clone()));
    expected[25] = 0xff;
    assert_eq!(huge_float_bytes(-(2_f64.powi(200))), Some(expected));
    assert_eq!(huge_float_bytes(f64::MAX).map(|b| b.len()), Some(129));
    for value in [
        0.5,
        -1.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-300,
    ] {
        assert_eq!(huge_float_bytes(value), None, "{value}");
    }
}

#[test]
fn a_key_is_kept_as_it_is_up_to_the_longest_kept_and_digested_beyond() {
    let seed = || (1, 2);
    let at_most = "x".repeat(LONGEST_KEPT);
    let beyond = "x".repeat(LONGEST_KEPT + 1);
    let tuple = encoded(&[KeyRef::Str(&at_most)]);
    for short in [
        KeyRef::Str(&at_most),
        KeyRef::Bytes(at_most.as_bytes()),
        KeyRef::Huge(at_most.as_bytes()),
        KeyRef::Tuple(&tuple[..LONGEST_KEPT]),
        plain_int(-(1 << 100)),
        KeyRef::Float(0.5_f64.to_bits()),
        KeyRef::Object(3),
    ] {
        assert_eq!(short.kept(|| unreachable!("no digest")), short);
    }
    let digest = |key: KeyRef<'_>| match key.kept(seed) {
        KeyRef::Digest(kind, low, high) => (kind, low, high),
        other => panic!("{other:?} kept whole"),
    };
    let text = digest(KeyRef::Str(&beyond));
    let bytes = digest(KeyRef::Bytes(beyond.as_bytes()));
    assert_eq!(text.0, Digested::Str);
    assert_eq!(bytes.0, Digested::Bytes);
    // The same content: the same digest, kept apart by its kind.
    assert_eq!((text.1, text.2), (bytes.1, bytes.2));
    assert_ne!(
        Key::from(&KeyRef::Str(&beyond).kept(seed)),
        Key::from(&KeyRef::Bytes(beyond.as_bytes()).kept(seed))
    );
    assert_eq!(digest(KeyRef::Huge(beyond.as_bytes())).0, Digested::Int);
    assert_eq!(
        digest(KeyRef::Tuple(&encoded(&[KeyRef::Str(&beyond)]))).0,
        Digested::Tuple
    );
    // Any other content, or another seed: another digest.
    let mut other = beyond.clone();
    other.replace_range(LONGEST_KEPT.., "y");
    assert_ne!(digest(KeyRef::Str(&other)), text);
    assert_ne!(
        KeyRef::Str(&beyond).kept(|| (2, 1)),
        KeyRef::Str(&beyond).kept(seed)
    );
    // Not the table's hash under the same seed either.
    assert_ne!(
        (text.1, text.2),
        siphasher::sip128::SipHasher13::new_with_keys(1, 2)
            .hash(beyond.as_bytes())
            .as_u64()
    );
}
