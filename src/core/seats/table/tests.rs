use super::*;

/// A waker that is just a name, so that a test can see who was told.
type Named = &'static str;

fn told() -> Told<Named> {
    Told::default()
}

/// Ask `table` for `n` seats of `key`, with `wake` as the waker, expecting to wait in line:
/// the place's ticket.
fn in_line<K: Hash + Eq + Clone>(
    table: &mut Table<K, Named>,
    key: Option<&K>,
    n: u64,
    wake: Named,
) -> Ticket {
    match table.ask(key, n, &mut Some(wake)) {
        Ok(Asked::InLine(ticket)) => ticket,
        other => panic!("{wake} asking for {n} is not in line: {other:?}"),
    }
}

#[test]
fn a_waiter_is_told_once_decided_and_takes_its_outcome() {
    let mut table: Table<(), Named> = Table::new(1, None).unwrap();
    let first = table.ask(None, 1, &mut None).unwrap();
    assert_eq!(first, Asked::Seated(Grant { n: 1, token: 1 }));
    let mut wake = Some("w");
    let Asked::InLine(ticket) = table.ask(None, 1, &mut wake).unwrap() else {
        panic!("seated with every seat held")
    };
    assert_eq!(wake, None); // kept in its place
    let mut t = told();
    assert_eq!(table.outcome(None, ticket, &mut t), None); // still in line
    table.release(None, 1, &mut t).unwrap();
    assert_eq!(t.wake, ["w"]);
    let seated = Some(Ok(Grant { n: 1, token: 2 }));
    assert_eq!(table.outcome(None, ticket, &mut t), seated);
    assert_eq!(table.outcome(None, ticket, &mut t), None); // taken once
    assert_eq!(table.counts(), (1, 0));
}

#[test]
fn a_waiter_that_leaves_lets_the_next_in_and_its_waker_goes() {
    let mut table: Table<(), Named> = Table::new(2, None).unwrap();
    table.ask(None, 1, &mut None).unwrap();
    let big = in_line(&mut table, None, 2, "big");
    let small = in_line(&mut table, None, 1, "small");
    let mut t = told();
    assert_eq!(table.leave(None, big, &mut t), None);
    assert_eq!(
        (t.wake.as_slice(), t.drop.as_slice()),
        (&["small"][..], &["big"][..])
    );
    // Seated meanwhile: leaving gives what was granted, for the caller to give back.
    assert_eq!(
        table.leave(None, small, &mut told()),
        Some(Ok(Grant { n: 1, token: 2 }))
    );
}

#[test]
fn a_smaller_limit_refuses_who_could_never_fit() {
    let mut table: Table<(), Named> = Table::new(3, None).unwrap();
    table.ask(None, 3, &mut None).unwrap();
    let ticket = in_line(&mut table, None, 3, "w");
    let mut t = told();
    assert_eq!(table.resize(0, &mut t), Err(SeatsError::Limit(0)));
    table.resize(2, &mut t).unwrap();
    assert_eq!(t.wake, ["w"]);
    let refused = Some(Err(SeatsError::MoreThanLimit { n: 3, limit: 2 }));
    assert_eq!(table.outcome(None, ticket, &mut t), refused);
    assert_eq!((table.limit(), table.counts()), (2, (3, 0))); // nobody evicted
}

#[test]
fn idle_keys_are_forgotten_and_their_tokens_go_on() {
    let mut table: Table<&str, Named> = Table::new(1, Some(1)).unwrap();
    let a = Asked::Seated(Grant { n: 1, token: 1 });
    assert_eq!(table.ask(Some(&"a"), 1, &mut None), Ok(a));
    assert_eq!(table.keys(), 1);
    // A new key in a full table: refused, its waker kept until a key is forgotten.
    let mut wake = Some("b");
    assert_eq!(table.ask(Some(&"b"), 1, &mut wake), Ok(Asked::NoRoom(0)));
    assert_eq!(wake, None);
    assert_eq!(table.ask(Some(&"b"), 1, &mut None), Ok(Asked::NoRoom(0)));
    let mut t = told();
    table.release(Some(&"a"), 1, &mut t).unwrap();
    assert_eq!(
        (t.wake.as_slice(), table.keys(), table.forgotten()),
        (&["b"][..], 0, 1)
    );
    // "b" now has room, and its first token comes after every token "a" gave.
    let b = Asked::Seated(Grant { n: 1, token: 2 });
    assert_eq!(table.ask(Some(&"b"), 1, &mut None), Ok(b));
    assert_eq!(
        table.release(Some(&"c"), 1, &mut told()),
        Err(SeatsError::NotHeld { n: 1, held: 0 })
    );
}

#[test]
fn a_key_with_a_waiter_still_to_be_told_is_kept() {
    let mut table: Table<&str, Named> = Table::new(2, Some(4)).unwrap();
    table.ask(Some(&"a"), 2, &mut None).unwrap();
    let ticket = in_line(&mut table, Some(&"a"), 2, "w");
    let mut t = told();
    table.resize(1, &mut t).unwrap(); // the waiter is refused, not yet told
    table.release(Some(&"a"), 2, &mut t).unwrap();
    assert_eq!(table.keys(), 1);
    assert!(matches!(
        table.outcome(Some(&"a"), ticket, &mut t),
        Some(Err(_))
    ));
    assert_eq!(table.keys(), 0); // told: forgotten
}
