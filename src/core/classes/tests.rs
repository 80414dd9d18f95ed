use super::*;

type Entry = (&'static str, &'static str, i64, Option<&'static str>);

/// A tree from `(key, name, rate, parent)` entries: a key may differ from its class's name.
fn keyed_tree(entries: &[Entry]) -> ClassTree<&'static str, i64> {
    ClassTree::new(entries.iter().map(|&(key, name, guaranteed_rate, parent)| {
        (
            key,
            TrafficClass {
                name,
                guaranteed_rate,
                parent,
            },
        )
    }))
}

/// A tree whose keys are its classes' names.
fn tree(classes: &[(&'static str, i64, Option<&'static str>)]) -> ClassTree<&'static str, i64> {
    let entries: Vec<Entry> = classes
        .iter()
        .map(|&(name, rate, parent)| (name, name, rate, parent))
        .collect();
    keyed_tree(&entries)
}

#[test]
fn a_two_level_tree_is_valid_and_leaves_borrow_up_the_chain() {
    let t = tree(&[
        ("root", 100, None),
        ("video", 60, Some("root")),
        ("voice", 30, Some("root")),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Valid));
    // video keeps all 60 (no children), root has 100 - 90 = 10 unclaimed.
    assert_eq!(borrowable(&t, &"video"), Ok(70));
    assert_eq!(borrowable(&t, &"root"), Ok(10));
}

#[test]
fn passes_run_in_order() {
    let t = tree(&[
        ("a", 1, Some("b")),
        ("b", 1, Some("a")),
        ("c", 1, Some("ghost")),
    ]);
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::UnknownParent {
            class: "c",
            parent: "ghost"
        })
    );
    let t = tree(&[("a", 1, Some("b")), ("b", 1, Some("a"))]);
    assert_eq!(validate_tree(&t), Ok(Validation::Cycle { at: "a" }));
    let t = tree(&[
        ("default", 100, None),
        ("x", 70, Some("default")),
        ("y", 50, Some("default")),
    ]);
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::OverSubscribed {
            parent: "default",
            claimed: 120,
            guaranteed: 100
        })
    );
}

#[test]
fn children_claiming_exactly_the_guarantee_are_not_over_subscribed() {
    let t = tree(&[
        ("default", 100, None),
        ("x", 60, Some("default")),
        ("y", 40, Some("default")),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Valid));
    assert_eq!(borrowable(&t, &"x"), Ok(60));
}

#[test]
fn claims_are_tallied_by_the_parent_named_not_by_the_class_found() {
    // Key "a" holds a class named "e"; class "e" names "a" as its parent. The tally is
    // kept under "a", the name the child writes, and compared with the class at key "a".
    let t = keyed_tree(&[("a", "e", 1, None), ("e", "e", 10, Some("a"))]);
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::OverSubscribed {
            parent: "a",
            claimed: 10,
            guaranteed: 1
        })
    );
}

#[test]
fn over_subscription_is_reported_for_the_parent_named_first() {
    let t = tree(&[
        ("a", 10, None),
        ("b", 10, None),
        ("b1", 20, Some("b")),
        ("a1", 6, Some("a")),
        ("a2", 6, Some("a")),
    ]);
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::OverSubscribed {
            parent: "b",
            claimed: 20,
            guaranteed: 10
        })
    );
}

#[test]
fn borrowable_tallies_the_whole_tree_before_walking() {
    // An overflow in a tally off the walked path still fails the question.
    let t = tree(&[
        ("root", 10, None),
        ("leaf", 5, Some("root")),
        ("big", i64::MAX, None),
        ("x", i64::MAX, Some("big")),
        ("y", 1, Some("big")),
    ]);
    assert_eq!(
        borrowable(&t, &"leaf"),
        Err(TreeError::Number(crate::core::quantity::Overflow))
    );
}

#[test]
fn borrowable_reports_unknown_names_and_cycles() {
    let t = tree(&[("a", 1, Some("b")), ("b", 1, Some("a"))]);
    assert_eq!(borrowable(&t, &"zzz"), Err(TreeError::MissingClass("zzz")));
    assert_eq!(borrowable(&t, &"a"), Err(TreeError::Cycle("a")));
}

#[test]
fn a_walk_up_from_a_name_that_is_not_a_key_is_a_missing_class() {
    let t = keyed_tree(&[("a", "ghost", 1, None)]);
    assert_eq!(validate_tree(&t), Err(TreeError::MissingClass("ghost")));
}

// ----------------------------------------------------------------------------------------
// The linear passes against the course's own algorithm
// ----------------------------------------------------------------------------------------

/// The course's `validate_tree`, transcribed line for line: pass 2 walks up from every
/// class with a fresh visited set, all the way to a root (quadratic on a chain), and pass 3
/// looks each tallied parent up by name.
fn course_validate<K, N>(tree: &ClassTree<K, N>) -> Result<Validation<K, N>, TreeError<K, N::Error>>
where
    K: Eq + Hash + Clone,
    N: Quantity,
{
    for class in tree.classes() {
        if let Some(parent) = &class.parent {
            if tree.get(parent).is_none() {
                return Ok(Validation::UnknownParent {
                    class: class.name.clone(),
                    parent: parent.clone(),
                });
            }
        }
    }
    for class in tree.classes() {
        let mut visited = HashSet::new();
        let mut name = Some(class.name.clone());
        while let Some(current) = name.take() {
            if visited.contains(&current) {
                return Ok(Validation::Cycle { at: current });
            }
            name.clone_from(&tree.class(&current)?.parent);
            visited.insert(current);
        }
    }
    let claims = Claims::of(tree).map_err(TreeError::Number)?;
    for (parent, claimed) in claims.iter() {
        let guaranteed = &tree.class(parent)?.guaranteed_rate;
        if claimed
            .greater_than(guaranteed)
            .map_err(TreeError::Number)?
        {
            return Ok(Validation::OverSubscribed {
                parent: parent.clone(),
                claimed: claimed.clone(),
                guaranteed: guaranteed.clone(),
            });
        }
    }
    Ok(Validation::Valid)
}

/// A tree of owned names from `(key, name, rate, parent)` entries.
fn owned_tree(entries: Vec<(String, String, i64, Option<String>)>) -> ClassTree<String, i64> {
    ClassTree::new(
        entries
            .into_iter()
            .map(|(key, name, guaranteed_rate, parent)| {
                (
                    key,
                    TrafficClass {
                        name,
                        guaranteed_rate,
                        parent,
                    },
                )
            }),
    )
}

/// Pass 2 alone on a tree that passes pass 1.
fn cycle_search<K: Eq + Hash + Clone, N>(
    tree: &ClassTree<K, N>,
) -> Result<FirstCycle<K>, TreeError<K, ()>> {
    let Ok(up) = parent_positions(tree) else {
        panic!("pass 1 found an unknown parent")
    };
    first_cycle(tree, &up)
}

/// `c0` at the root, `c(i)` under `c(i-1)`; listed root first, or leaf first.
fn chain(depth: usize, root_first: bool) -> ClassTree<String, i64> {
    let mut entries: Vec<_> = (0..depth)
        .map(|i| {
            let parent = i.checked_sub(1).map(|p| format!("c{p}"));
            (format!("c{i}"), format!("c{i}"), 1, parent)
        })
        .collect();
    if !root_first {
        entries.reverse();
    }
    owned_tree(entries)
}

/// Every tree of up to five classes `a`..`e` with every choice of parents (none, any class,
/// itself included, or the unknown `ghost`), each also with one class's own name changed to
/// another key or to `ghost`: the linear validation answers exactly as the course's.
#[test]
fn every_small_tree_is_validated_as_the_course_does() {
    const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
    const RATES: [i64; 5] = [3, 1, 2, 4, 1];
    let mut checked = 0;
    for n in 0..=KEYS.len() {
        let keys = &KEYS[..n];
        // A parent choice per class: 0 for none, 1..=n for a key, n + 1 for "ghost".
        let choices = n + 2;
        for code in 0..choices.pow(u32::try_from(n).unwrap()) {
            let mut parents = Vec::with_capacity(n);
            let mut rest = code;
            for _ in 0..n {
                parents.push(match rest % choices {
                    0 => None,
                    c if c <= n => Some(keys[c - 1]),
                    _ => Some("ghost"),
                });
                rest /= choices;
            }
            // Variant 0: names are keys; then one class at a time takes another name.
            for variant in 0..=2 * n {
                let entries: Vec<Entry> = (0..n)
                    .map(|i| {
                        let name = match variant {
                            v if v == i + 1 => "ghost",
                            v if v == n + i + 1 => keys[(i + 1) % n],
                            _ => keys[i],
                        };
                        (keys[i], name, RATES[i], parents[i])
                    })
                    .collect();
                let t = keyed_tree(&entries);
                assert_eq!(validate_tree(&t), course_validate(&t), "{entries:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(
        checked,
        1 + 3 * 3 + 5 * 16 + 7 * 125 + 9 * 1296 + 11 * 16807
    );
}

/// Bigger trees from a fixed pseudo-random sequence: forests listed in any order, with now
/// and then a parent pointing down (which may close a cycle) or a name that is not a key.
#[test]
fn pseudo_random_trees_are_validated_as_the_course_does() {
    let mut state: u64 = 7;
    let mut next = |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(state >> 33).unwrap() % bound
    };
    let mut outcomes = [0; 4];
    for _ in 0..400 {
        let n = 1 + next(300);
        // Class i's parent is usually an earlier class (a forest), shuffled below.
        let mut entries: Vec<_> = (0..n)
            .map(|i| {
                let parent = match next(100) {
                    0 => Some(next(n)),
                    1..=9 => None,
                    _ if i == 0 => None,
                    _ => Some(next(i)),
                };
                let name = if next(500) == 0 { n + 1 } else { i };
                let rate = i64::try_from(1 + next(4)).unwrap();
                (
                    format!("k{i}"),
                    format!("k{name}"),
                    rate,
                    parent.map(|p| format!("k{p}")),
                )
            })
            .collect();
        for i in (1..n).rev() {
            entries.swap(i, next(i + 1));
        }
        let t = owned_tree(entries);
        let got = validate_tree(&t);
        assert_eq!(got, course_validate(&t));
        outcomes[match got {
            Ok(Validation::Valid) => 0,
            Ok(Validation::Cycle { .. }) => 1,
            Ok(Validation::OverSubscribed { .. }) => 2,
            _ => 3,
        }] += 1;
    }
    // The sequence makes every kind of answer, each more than once.
    assert!(outcomes.iter().all(|&count| count > 1), "{outcomes:?}");
}

#[test]
fn a_cycle_is_reported_where_the_first_walk_that_finds_it_enters_it() {
    // From "leaf": leaf, x, y, z, x: the walk enters the cycle at x.
    let t = tree(&[
        ("leaf", 1, Some("x")),
        ("x", 1, Some("y")),
        ("y", 1, Some("z")),
        ("z", 1, Some("x")),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Cycle { at: "x" }));
    // Listed from "z", the first walk enters at z itself.
    let t = tree(&[
        ("z", 1, Some("x")),
        ("x", 1, Some("y")),
        ("y", 1, Some("z")),
        ("leaf", 1, Some("x")),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Cycle { at: "z" }));
    // Walks that reached the root first do not hide a later cycle, and a walk that joins
    // an earlier one's path stops there.
    let t = tree(&[
        ("r", 1, None),
        ("a", 1, Some("r")),
        ("b", 1, Some("a")),
        ("p", 1, Some("q")),
        ("q", 1, Some("p")),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Cycle { at: "p" }));
}

#[test]
fn a_missing_start_name_is_reported_unless_an_earlier_class_found_a_cycle() {
    let t = keyed_tree(&[("a", "a", 1, Some("a")), ("b", "ghost", 1, None)]);
    assert_eq!(validate_tree(&t), Ok(Validation::Cycle { at: "a" }));
    let t = keyed_tree(&[("b", "ghost", 1, None), ("a", "a", 1, Some("a"))]);
    assert_eq!(validate_tree(&t), Err(TreeError::MissingClass("ghost")));
    // A name that is another class's key starts the walk from that class.
    let t = keyed_tree(&[
        ("a", "b", 1, None),
        ("b", "b", 1, Some("c")),
        ("c", "c", 1, None),
    ]);
    assert_eq!(validate_tree(&t), Ok(Validation::Valid));
}

/// Pass 2 steps through each class at most once in all: `d` steps for a chain of depth
/// `d`, listed either way round, where the course's walks take `d * (d + 1) / 2`.
#[test]
fn pass_two_steps_through_each_class_once() {
    for depth in [0, 1, 2, 10, 1_000, 10_000] {
        for root_first in [true, false] {
            let t = chain(depth, root_first);
            assert_eq!(
                cycle_search(&t),
                Ok(FirstCycle {
                    at: None,
                    steps: depth
                }),
                "depth {depth}, root first: {root_first}"
            );
        }
    }
    // A bushy tree: one root, 100 children, each with 100 children of its own.
    let mut entries = vec![("r".to_owned(), "r".to_owned(), 1, None)];
    for i in 0..100 {
        entries.push((format!("m{i}"), format!("m{i}"), 1, Some("r".to_owned())));
        for j in 0..100 {
            let leaf = format!("l{i}.{j}");
            entries.push((leaf.clone(), leaf, 1, Some(format!("m{i}"))));
        }
    }
    entries.reverse();
    let t = owned_tree(entries);
    assert_eq!(cycle_search(&t).map(|found| found.steps), Ok(10_101));
}

/// A chain whose root points back into it: the walk from the first class goes down the
/// whole chain once and stops at the first class it passes twice.
#[test]
fn a_cycle_at_the_top_of_a_deep_chain_costs_one_walk() {
    let depth = 10_000;
    let mut entries: Vec<_> = (0..depth)
        .map(|i| {
            let parent = if i == 0 { 5_000 } else { i - 1 };
            (
                format!("c{i}"),
                format!("c{i}"),
                1,
                Some(format!("c{parent}")),
            )
        })
        .collect();
    entries.reverse();
    let t = owned_tree(entries);
    assert_eq!(
        cycle_search(&t),
        Ok(FirstCycle {
            at: Some("c5000".to_owned()),
            steps: depth
        })
    );
}

/// Deep chains take no stack: every walk is a loop.
#[test]
fn a_chain_a_hundred_thousand_classes_deep_is_validated() {
    let depth = 100_000;
    assert_eq!(validate_tree(&chain(depth, false)), Ok(Validation::Valid));
    let mut t = chain(depth, true);
    t = owned_tree(
        t.classes()
            .map(|class| {
                let parent = class.parent.clone().or(Some(format!("c{}", depth - 1)));
                (class.name.clone(), class.name.clone(), 1, parent)
            })
            .collect(),
    );
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::Cycle {
            at: "c0".to_owned()
        })
    );
}

#[test]
fn over_subscription_tallies_follow_the_positions_pass_one_found() {
    // The sums and comparisons are the course's, in its order: b is named first.
    let t = tree(&[
        ("a", 10, None),
        ("b", 10, None),
        ("b1", 4, Some("b")),
        ("a1", 11, Some("a")),
        ("b2", 7, Some("b")),
    ]);
    assert_eq!(
        validate_tree(&t),
        Ok(Validation::OverSubscribed {
            parent: "b",
            claimed: 11,
            guaranteed: 10
        })
    );
    // An overflowing sum fails the check, even when an earlier parent is over-subscribed.
    let t = tree(&[
        ("a", 1, None),
        ("big", 1, None),
        ("a1", 5, Some("a")),
        ("x", i64::MAX, Some("big")),
        ("y", 1, Some("big")),
    ]);
    assert_eq!(
        validate_tree(&t),
        Err(TreeError::Number(crate::core::quantity::Overflow))
    );
}
