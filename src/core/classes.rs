//! Hierarchical shaping as a tree of parent pointers.
//!
//! Each traffic class names its parent (or none, for a root) and the rate it is guaranteed. The
//! tree is only a map from name to class: no child lists, no levels, nothing to keep in sync.
//! Everything else is computed by walking parent pointers when asked, which is why
//! [`validate_tree`] runs three passes, each catching what would make the next one meaningless:
//!
//! 1. **Unknown parent**: every parent must be a class in the map, or the walks below would fall
//!    off the tree.
//! 2. **Cycle**: walking up from any class must reach a root. A fresh visited set per start
//!    class finds the first name seen twice.
//! 3. **Over-subscription**: the direct children of a class may not be guaranteed more, in
//!    total, than the class itself.
//!
//! [`borrowable`] answers what a class could borrow: walking from it to the root, each class on
//! the way contributes the part of its own guarantee that its direct children do not claim.
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

/// Classes by name, in insertion order (the order the passes visit them).
#[derive(Debug, Clone)]
pub struct ClassTree<K, N> {
    classes: Vec<TrafficClass<K, N>>,
    index: HashMap<K, usize>,
}

impl<K, N> ClassTree<K, N> {
    /// The classes, in insertion order.
    pub fn classes(&self) -> impl Iterator<Item = &TrafficClass<K, N>> {
        self.classes.iter()
    }
}

impl<K: Eq + Hash + Clone, N> ClassTree<K, N> {
    /// A tree from `(key, class)` entries, as a dict is built: a repeated key keeps its first
    /// position and its last class.
    pub fn new(entries: impl IntoIterator<Item = (K, TrafficClass<K, N>)>) -> Self {
        let mut tree = Self {
            classes: Vec::new(),
            index: HashMap::new(),
        };
        for (key, class) in entries {
            if let Some(&i) = tree.index.get(&key) {
                tree.classes[i] = class;
            } else {
                tree.index.insert(key, tree.classes.len());
                tree.classes.push(class);
            }
        }
        tree
    }

    /// The class stored under `key`.
    pub fn get(&self, key: &K) -> Option<&TrafficClass<K, N>> {
        self.index.get(key).map(|&i| &self.classes[i])
    }

    fn class(&self, key: &K) -> Result<&TrafficClass<K, N>, MissingClass<K>> {
        self.get(key).ok_or_else(|| MissingClass(key.clone()))
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
    for class in tree.classes() {
        if let Some(claimed) = children_claim(tree, &class.name).map_err(TreeError::Number)? {
            if claimed
                .greater_than(&class.guaranteed_rate)
                .map_err(TreeError::Number)?
            {
                return Ok(Validation::OverSubscribed {
                    parent: class.name.clone(),
                    claimed,
                    guaranteed: class.guaranteed_rate.clone(),
                });
            }
        }
    }
    Ok(Validation::Valid)
}

/// The rate `class_name` could borrow: for each class from it up to the root,
/// `max(guaranteed_rate - what its direct children claim, 0)`, summed.
///
/// # Errors
///
/// [`TreeError::MissingClass`] for a name not in the tree (the class itself or a parent on the
/// way), [`TreeError::Cycle`] if the walk comes back to a class, or the rates' arithmetic error.
pub fn borrowable<K, N>(tree: &ClassTree<K, N>, class_name: &K) -> Result<N, TreeError<K, N::Error>>
where
    K: Eq + Hash + Clone,
    N: Quantity,
{
    let mut total = tree.class(class_name)?.guaranteed_rate.zero();
    let mut visited = HashSet::new();
    let mut name = Some(class_name.clone());
    while let Some(current) = name.take() {
        let class = tree.class(&current)?;
        if !visited.insert(current.clone()) {
            return Err(TreeError::Cycle(current));
        }
        let rate = &class.guaranteed_rate;
        let claimed = children_claim(tree, &current)
            .map_err(TreeError::Number)?
            .unwrap_or_else(|| rate.zero());
        let spare = python_max_with_zero(&rate.minus(&claimed).map_err(TreeError::Number)?)
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

/// The sum of the guaranteed rates of `parent`'s direct children, added from `0` in tree
/// order; `None` if it has no children.
fn children_claim<K, N>(tree: &ClassTree<K, N>, parent: &K) -> Result<Option<N>, N::Error>
where
    K: Eq,
    N: Quantity,
{
    let mut claimed: Option<N> = None;
    for child in tree.classes().filter(|c| c.parent.as_ref() == Some(parent)) {
        let sum = claimed.unwrap_or_else(|| child.guaranteed_rate.zero());
        claimed = Some(sum.plus(&child.guaranteed_rate)?);
    }
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(classes: &[(&'static str, i64, Option<&'static str>)]) -> ClassTree<&'static str, i64> {
        ClassTree::new(classes.iter().map(|&(name, guaranteed_rate, parent)| {
            (
                name,
                TrafficClass {
                    name,
                    guaranteed_rate,
                    parent,
                },
            )
        }))
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
    fn borrowable_reports_unknown_names_and_cycles() {
        let t = tree(&[("a", 1, Some("b")), ("b", 1, Some("a"))]);
        assert_eq!(borrowable(&t, &"zzz"), Err(TreeError::MissingClass("zzz")));
        assert_eq!(borrowable(&t, &"a"), Err(TreeError::Cycle("a")));
    }
}
