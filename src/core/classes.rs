//! Hierarchical shaping as a tree of parent pointers.
//!
//! Each traffic class names its parent (or none, for a root) and the rate it is guaranteed. The
//! tree is only a map from name to class: no child lists, no levels, nothing to keep in sync.
//! Everything else is computed when asked, which is why [`validate_tree`] runs three passes,
//! each catching what would make the next one meaningless:
//!
//! 1. **Unknown parent**: every parent must be a class in the map, or the walks below would fall
//!    off the tree.
//! 2. **Cycle**: walking up from any class must reach a root. A fresh visited set per start
//!    class finds the first name seen twice.
//! 3. **Over-subscription**: the direct children of a parent may not be guaranteed more, in
//!    total, than the parent itself.
//!
//! Children are never searched for. One pass over the classes adds each class's rate to its
//! parent's tally, under the parent's name as the child writes it ([`Claims`]); the tallies
//! come out in the order the parents were first named. Pass 3 reads them in that order, and
//! [`borrowable`] makes the same tallies, for the whole tree, before it walks from a class to
//! the root adding up, for each class on the way, the part of its own guarantee that its
//! children leave unclaimed.
//!
//! Names are any type with equality and hashing (strings, in the course); rates are any
//! [`Quantity`], added and compared in the order the course's Python does it.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::core::quantity::{python_max_with_zero, Quantity};

/// One class: its name, its guaranteed rate and its parent's name (`None` for a root).
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficClass<K, N> {
    pub name: K,
    pub guaranteed_rate: N,
    pub parent: Option<K>,
}

/// A map that remembers the order its keys were first inserted, as a Python dict does.
#[derive(Debug, Clone)]
struct InsertionOrdered<K, V> {
    entries: Vec<(K, V)>,
    index: HashMap<K, usize>,
}

impl<K: Eq + Hash + Clone, V> InsertionOrdered<K, V> {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// `map[key] = value`: a new key goes last, a known one keeps its place.
    fn set(&mut self, key: K, value: V) {
        if let Some(&i) = self.index.get(&key) {
            self.entries[i].1 = value;
        } else {
            self.index.insert(key.clone(), self.entries.len());
            self.entries.push((key, value));
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(K, V)> {
        self.entries.iter()
    }
}

/// Classes by name, in insertion order (the order the passes visit them).
#[derive(Debug, Clone)]
pub struct ClassTree<K, N> {
    classes: InsertionOrdered<K, TrafficClass<K, N>>,
}

impl<K, N> ClassTree<K, N> {
    /// The classes, in insertion order.
    pub fn classes(&self) -> impl Iterator<Item = &TrafficClass<K, N>> {
        self.classes.entries.iter().map(|(_, class)| class)
    }
}

impl<K: Eq + Hash + Clone, N> ClassTree<K, N> {
    /// A tree from `(key, class)` entries, as a dict is built: a repeated key keeps its first
    /// position and its last class.
    pub fn new(entries: impl IntoIterator<Item = (K, TrafficClass<K, N>)>) -> Self {
        let mut classes = InsertionOrdered::new();
        for (key, class) in entries {
            classes.set(key, class);
        }
        Self { classes }
    }

    /// The class stored under `key`.
    pub fn get(&self, key: &K) -> Option<&TrafficClass<K, N>> {
        self.classes.get(key)
    }

    fn class(&self, key: &K) -> Result<&TrafficClass<K, N>, MissingClass<K>> {
        self.get(key).ok_or_else(|| MissingClass(key.clone()))
    }
}

/// What the direct children of each parent are guaranteed together.
///
/// Made in one pass over the classes, in tree order: each class with a parent adds its rate to
/// that parent's tally, the first child to `0` (so the sum is `0 + r1 + r2 + ...`, as Python
/// adds it). A tally is kept under the parent's name as the children write it, whether or not
/// a class of that name exists, and tallies keep the order in which parents were first named.
#[derive(Debug, Clone)]
pub struct Claims<K, N> {
    by_parent: InsertionOrdered<K, N>,
}

impl<K: Eq + Hash + Clone, N: Quantity> Claims<K, N> {
    /// Tally every class's rate under its parent's name.
    ///
    /// # Errors
    ///
    /// The rates' arithmetic error, at the first addition that fails.
    pub fn of(tree: &ClassTree<K, N>) -> Result<Self, N::Error> {
        let mut by_parent = InsertionOrdered::new();
        for class in tree.classes() {
            if let Some(parent) = &class.parent {
                let rate = &class.guaranteed_rate;
                let so_far = by_parent.get(parent).cloned();
                let sum = so_far.unwrap_or_else(|| rate.zero()).plus(rate)?;
                by_parent.set(parent.clone(), sum);
            }
        }
        Ok(Self { by_parent })
    }

    /// What `parent`'s children claim together, if any class names it as its parent.
    pub fn of_parent(&self, parent: &K) -> Option<&N> {
        self.by_parent.get(parent)
    }

    /// Each parent named by some class, with its children's total, in the order first named.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &N)> {
        self.by_parent
            .iter()
            .map(|(parent, claimed)| (parent, claimed))
    }
}

/// A name that is not a class in the tree (a lookup that would raise `KeyError` in Python).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingClass<K>(pub K);

/// Why a tree question could not be answered.
#[derive(Debug, Clone, PartialEq)]
pub enum TreeError<K, E> {
    /// A name was looked up that is not in the tree.
    MissingClass(K),
    /// Walking up from a class came back to this name: the tree has a cycle.
    Cycle(K),
    /// The rates' arithmetic failed.
    Number(E),
}

impl<K, E> From<MissingClass<K>> for TreeError<K, E> {
    fn from(MissingClass(key): MissingClass<K>) -> Self {
        Self::MissingClass(key)
    }
}

/// What [`validate_tree`] found: the first problem, in pass order, or none.
#[derive(Debug, Clone, PartialEq)]
pub enum Validation<K, N> {
    Valid,
    /// `class` names a `parent` that is not in the tree.
    UnknownParent {
        class: K,
        parent: K,
    },
    /// Walking up from some class reached `at` a second time.
    Cycle {
        at: K,
    },
    /// The direct children of `parent` claim more than it is guaranteed.
    OverSubscribed {
        parent: K,
        claimed: N,
        guaranteed: N,
    },
}

/// Check the tree in three passes (unknown parents, then cycles, then over-subscription) and
/// report the first problem found.
///
/// Pass 3 tallies every parent's children first ([`Claims::of`]), then compares each tally
/// with its parent's guarantee, parents in the order the classes first named them. So with
/// `b1` (under `b`) listed before `a1` (under `a`), an over-subscribed `b` is reported even if
/// `a` is over-subscribed too.
///
/// # Errors
///
/// A rate's arithmetic failing, or a class whose own name is not a key of the tree.
pub fn validate_tree<K, N>(
    tree: &ClassTree<K, N>,
) -> Result<Validation<K, N>, TreeError<K, N::Error>>
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
        if let Some(at) = first_repeat_walking_up(tree, &class.name)? {
            return Ok(Validation::Cycle { at });
        }
    }
    let claims = Claims::of(tree).map_err(TreeError::Number)?;
    for (parent, claimed) in claims.iter() {
        // Pass 1 found every parent in the tree, so this lookup cannot miss.
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

/// The rate `class_name` could borrow: for each class from it up to the root,
/// `max(guaranteed_rate - what its direct children claim, 0)`, summed.
///
/// The children's claims are tallied for the whole tree first ([`Claims::of`]), so a rate that
/// cannot be added fails the question wherever it sits in the tree; then the walk starts.
///
/// # Errors
///
/// The rates' arithmetic error, [`TreeError::MissingClass`] for a name not in the tree (the
/// class itself or a parent on the way), or [`TreeError::Cycle`] if the walk comes back to a
/// class.
pub fn borrowable<K, N>(tree: &ClassTree<K, N>, class_name: &K) -> Result<N, TreeError<K, N::Error>>
where
    K: Eq + Hash + Clone,
    N: Quantity,
{
    let claims = Claims::of(tree).map_err(TreeError::Number)?;
    let mut total = tree.class(class_name)?.guaranteed_rate.zero();
    let mut visited = HashSet::new();
    let mut name = Some(class_name.clone());
    while let Some(current) = name.take() {
        let class = tree.class(&current)?;
        if !visited.insert(current.clone()) {
            return Err(TreeError::Cycle(current));
        }
        let rate = &class.guaranteed_rate;
        let zero = rate.zero();
        let claimed = claims.of_parent(&current).unwrap_or(&zero);
        let spare = python_max_with_zero(&rate.minus(claimed).map_err(TreeError::Number)?)
            .map_err(TreeError::Number)?;
        total = total.plus_in_place(&spare).map_err(TreeError::Number)?;
        name.clone_from(&class.parent);
    }
    Ok(total)
}

/// Walk up from `start` with a fresh visited set; the first name reached twice, if any.
fn first_repeat_walking_up<K, N, E>(
    tree: &ClassTree<K, N>,
    start: &K,
) -> Result<Option<K>, TreeError<K, E>>
where
    K: Eq + Hash + Clone,
{
    let mut visited = HashSet::new();
    let mut name = Some(start.clone());
    while let Some(current) = name.take() {
        if visited.contains(&current) {
            return Ok(Some(current));
        }
        name.clone_from(&tree.class(&current)?.parent);
        visited.insert(current);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
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
}
