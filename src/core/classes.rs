//! Hierarchical shaping as a tree of parent pointers.
//!
//! Each traffic class names its parent (or none, for a root) and the rate it is guaranteed. The
//! tree is only a map from name to class: no child lists, no levels, nothing to keep in sync.
//! Everything else is computed when asked, which is why [`validate_tree`] runs three passes,
//! each catching what would make the next one meaningless:
//!
//! 1. **Unknown parent**: every parent must be a class in the map, or the walks below would fall
//!    off the tree.
//! 2. **Cycle**: walking up from any class must reach a root. The course walks up from each
//!    class with a fresh visited set and reports the first name seen twice; here no class is
//!    walked through twice, and the same name is reported.
//! 3. **Over-subscription**: the direct children of a parent may not be guaranteed more, in
//!    total, than the parent itself.
//!
//! Each pass visits every class a bounded number of times, so validating a chain thousands of
//! classes deep costs about what validating as many siblings does: time linear in the number
//! of classes, where the course's walks are quadratic on a chain. The walks are loops, not
//! recursion, at any depth.
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

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
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
        Self::with_capacity(0)
    }

    /// Room for `capacity` keys before the index has to grow (and hash every key again).
    fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// `map[key] = value`: a new key goes last, a known one keeps its place. The key is hashed
    /// once.
    fn set(&mut self, key: K, value: V) {
        match self.index.entry(key) {
            Entry::Occupied(known) => self.entries[*known.get()].1 = value,
            Entry::Vacant(new) => {
                self.entries.push((new.key().clone(), value));
                new.insert(self.entries.len() - 1);
            }
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

    /// The key at `position` in insertion order.
    fn key(&self, position: usize) -> &K {
        &self.classes.entries[position].0
    }

    /// The class at `position` in insertion order.
    fn class_at(&self, position: usize) -> &TrafficClass<K, N> {
        &self.classes.entries[position].1
    }
}

impl<K: Eq + Hash + Clone, N> ClassTree<K, N> {
    /// A tree from `(key, class)` entries, as a dict is built: a repeated key keeps its first
    /// position and its last class.
    pub fn new(entries: impl IntoIterator<Item = (K, TrafficClass<K, N>)>) -> Self {
        match Self::try_new(entries.into_iter().map(Ok::<_, Infallible>)) {
            Ok(tree) => tree,
            Err(never) => match never {},
        }
    }

    /// [`ClassTree::new`] from entries each made by something that can fail: the first
    /// failure, if any. The entries are stored as they come, with no list of them made first.
    ///
    /// # Errors
    ///
    /// The first entry that is an `Err`.
    pub fn try_new<E>(
        entries: impl IntoIterator<Item = Result<(K, TrafficClass<K, N>), E>>,
    ) -> Result<Self, E> {
        let entries = entries.into_iter();
        let mut classes = InsertionOrdered::with_capacity(entries.size_hint().0);
        for entry in entries {
            let (key, class) = entry?;
            classes.set(key, class);
        }
        Ok(Self { classes })
    }

    /// The class stored under `key`.
    pub fn get(&self, key: &K) -> Option<&TrafficClass<K, N>> {
        self.classes.get(key)
    }

    fn class(&self, key: &K) -> Result<&TrafficClass<K, N>, MissingClass<K>> {
        self.get(key).ok_or_else(|| MissingClass(key.clone()))
    }

    /// Where `key` is in insertion order, if it is a key.
    fn position(&self, key: &K) -> Option<usize> {
        self.classes.index.get(key).copied()
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
/// Each pass is linear in the number of classes, so the whole check is too:
///
/// 1. Pass 1 looks every parent up once, in class order, and keeps where it found it
///    ([`parent_positions`]). The first parent that is not found is reported; nothing else
///    is looked at, as in the course.
/// 2. Pass 2 walks up from each class in class order, as the course does, but never walks the
///    same class twice ([`first_cycle`]); it reports the name the course's walk would report.
/// 3. Pass 3 tallies every parent's children first, then compares each tally with its parent's
///    guarantee, parents in the order the classes first named them. So with `b1` (under `b`)
///    listed before `a1` (under `a`), an over-subscribed `b` is reported even if `a` is
///    over-subscribed too. The tallies are kept by the positions pass 1 found (each named
///    parent is a class by then), so the sums and comparisons are exactly [`Claims::of`]'s,
///    in the same order, without looking any name up again.
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
    let up = match parent_positions(tree) {
        Ok(up) => up,
        Err(UnknownParent { class, parent }) => {
            return Ok(Validation::UnknownParent {
                class: class.clone(),
                parent: parent.clone(),
            })
        }
    };
    if let Some(at) = first_cycle(tree, &up)?.at {
        return Ok(Validation::Cycle { at });
    }
    over_subscribed(tree, &up).map_err(TreeError::Number)
}

/// The first class, in tree order, whose parent is not a key of the tree.
struct UnknownParent<'t, K> {
    class: &'t K,
    parent: &'t K,
}

/// Pass 1: where each class's parent sits in the tree (by position, in tree order), or the
/// first class whose parent is not there.
///
/// One lookup per class. The later passes follow these positions and never look a parent's
/// name up again.
fn parent_positions<K, N>(
    tree: &ClassTree<K, N>,
) -> Result<Vec<Option<usize>>, UnknownParent<'_, K>>
where
    K: Eq + Hash + Clone,
{
    tree.classes()
        .map(|class| match &class.parent {
            None => Ok(None),
            Some(parent) => tree.position(parent).map(Some).ok_or(UnknownParent {
                class: &class.name,
                parent,
            }),
        })
        .collect()
}

/// What pass 2 found: where the first cycle was reached, if anywhere, and how many classes the
/// walks stepped through to find out (at most one step per class in the tree).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FirstCycle<K> {
    at: Option<K>,
    steps: usize,
}

/// What the walks of pass 2 know about a class so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// No walk has reached it yet.
    Not,
    /// The walk under way has passed it: reaching it again closes a cycle.
    OnThisWalk,
    /// An earlier walk passed it and then reached a root: so does any walk from it.
    ReachesRoot,
}

/// Pass 2: walk up from each class in tree order; the first name some walk reaches twice.
///
/// The course walks up from every class with a fresh visited set, all the way to a root, so a
/// chain of `d` classes costs `1 + 2 + ... + d` steps: quadratic. This walk keeps one mark per
/// class for the whole pass instead ([`Seen`]):
///
/// * A walk stops as soon as it reaches a class an earlier walk marked
///   [`Seen::ReachesRoot`]; when a walk reaches a root, every class it passed gets that mark.
/// * A walk that reaches a class it has already passed ([`Seen::OnThisWalk`]) has found a
///   cycle, and the pass ends there.
///
/// So each class is stepped through at most once in the whole pass: linear.
///
/// It reports what the course reports. Classes are started from in the course's order, and the
/// start is looked up by the class's own name, as the course does, so a name that is not a key
/// is the same [`TreeError::MissingClass`] at the same point. For each start:
///
/// * A walk marks its classes `ReachesRoot` only once it has reached a root or a marked class,
///   so every class above a marked class is marked too, and walking up from a marked class
///   reaches a root. A walk stopped at a marked class would, in the course, go on through
///   marked classes only, none of them passed by this walk (those were unmarked when it
///   passed them): no repeat, so the course's walk from this start reaches a root too, and
///   the pass goes on.
/// * A walk that meets a class it passed has met no marked class before (it would have stopped
///   there), so up to that step it is exactly the course's walk, and the class it meets is the
///   first name that walk sees twice: the course's `cycle reached at` name.
///
/// `up` holds each class's parent position from pass 1.
///
/// # Errors
///
/// [`TreeError::MissingClass`] for the first start class, in tree order, whose name is not a
/// key, unless a cycle was found from an earlier one.
fn first_cycle<K, N, E>(
    tree: &ClassTree<K, N>,
    up: &[Option<usize>],
) -> Result<FirstCycle<K>, TreeError<K, E>>
where
    K: Eq + Hash + Clone,
{
    let mut seen = vec![Seen::Not; up.len()];
    let mut walk = Vec::new();
    let mut steps = 0;
    for (position, class) in tree.classes().enumerate() {
        // A class is usually filed under its own name: then the walk starts where it is, with
        // no lookup (each key appears once, so no other position holds that name).
        let start = if class.name == *tree.key(position) {
            position
        } else {
            tree.position(&class.name)
                .ok_or_else(|| MissingClass(class.name.clone()))?
        };
        let mut at = Some(start);
        while let Some(i) = at {
            match seen[i] {
                Seen::ReachesRoot => break,
                Seen::OnThisWalk => {
                    return Ok(FirstCycle {
                        at: Some(tree.key(i).clone()),
                        steps,
                    })
                }
                Seen::Not => {
                    seen[i] = Seen::OnThisWalk;
                    walk.push(i);
                    steps += 1;
                    at = up[i];
                }
            }
        }
        for i in walk.drain(..) {
            seen[i] = Seen::ReachesRoot;
        }
    }
    Ok(FirstCycle { at: None, steps })
}

/// Pass 3: the children's rates summed per parent, in tree order, then each parent, in the
/// order first named, checked against its own guarantee; the first over-subscribed one.
///
/// The tallies are [`Claims::of`]'s (the first child's rate added to `0`, each next one added
/// to the tally), kept by the parent positions pass 1 found instead of by name.
fn over_subscribed<K, N>(
    tree: &ClassTree<K, N>,
    up: &[Option<usize>],
) -> Result<Validation<K, N>, N::Error>
where
    K: Clone,
    N: Quantity,
{
    // Where each parent's tally is in `tallies` (kept in the order parents are first named).
    let mut tally_of: Vec<Option<usize>> = vec![None; up.len()];
    let mut tallies: Vec<(usize, N)> = Vec::new();
    for (class, &parent) in tree.classes().zip(up) {
        let Some(p) = parent else { continue };
        let rate = &class.guaranteed_rate;
        if let Some(t) = tally_of[p] {
            tallies[t].1 = tallies[t].1.plus(rate)?;
        } else {
            let first = rate.zero().plus(rate)?;
            tally_of[p] = Some(tallies.len());
            tallies.push((p, first));
        }
    }
    for (p, claimed) in tallies {
        let guaranteed = &tree.class_at(p).guaranteed_rate;
        if claimed.greater_than(guaranteed)? {
            return Ok(Validation::OverSubscribed {
                parent: tree.key(p).clone(),
                claimed,
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

#[cfg(test)]
mod tests;
