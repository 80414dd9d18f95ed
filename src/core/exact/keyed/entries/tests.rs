use super::*;
use crate::core::exact::key::Key;

fn form<K>(entries: &Entries<K>) -> &'static str {
    match entries.records {
        Records::Two(_) => "two inline",
        Records::Three(_) => "three inline",
        Records::Boxed(_) => "boxed",
    }
}

#[test]
fn one_band_keeps_its_record_inline_and_several_box_it() {
    assert_eq!(
        form(&Entries::<u64>::new(Shape::new(1, false))),
        "two inline"
    );
    assert_eq!(
        form(&Entries::<u64>::new(Shape::new(1, true))),
        "three inline"
    );
    assert_eq!(form(&Entries::<u64>::new(Shape::new(2, false))), "boxed");
    // An int key and a one-band record: 32 bytes an entry, nothing allocated beside it.
    assert_eq!(std::mem::size_of::<(Key, [u64; 2])>(), 32);
}

#[test]
fn a_key_s_balances_are_found_changed_and_let_go_of_in_every_form() {
    for (shape, first, second) in [
        (
            Shape::new(1, false),
            Balances::settled(&[5], 1),
            Balances::settled(&[7], 2),
        ),
        (
            Shape::new(1, true),
            Balances::settled(&[1 << 80], 1),
            Balances::settled(&[3], 2),
        ),
        (
            Shape::new(3, false),
            Balances::settled(&[1, 2, 3], 1),
            Balances::settled(&[4, 5, 6], 2),
        ),
    ] {
        let mut entries: Entries<u64> = Entries::new(shape);
        // The hash is the caller's: one for every key here, so equality alone tells them apart.
        entries.insert(9, 10, &first, |_| 9);
        entries.insert(9, 11, &second, |_| 9);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries.find(9, |&key| key == 10).unwrap().balances(), first);
        entries.find(9, |&key| key == 10).unwrap().store(&second);
        assert_eq!(
            entries.find(9, |&key| key == 10).unwrap().balances(),
            second
        );
        assert!(entries.find(9, |&key| key == 12).is_none());
        let mut seen = Vec::new();
        entries.each(|&key, balances| seen.push((key, balances)));
        seen.sort_by_key(|&(key, _)| key);
        assert_eq!(seen, [(10, second.clone()), (11, second.clone())]);
        assert_eq!(entries.remove(9, |&key| key == 11), Some(11));
        assert_eq!(entries.remove(9, |&key| key == 11), None);
        entries.retain(|_, balances| *balances != second);
        assert_eq!(entries.len(), 0);
        entries.insert(9, 10, &first, |_| 9);
        entries.clear();
        assert_eq!(entries.len(), 0);
    }
}
