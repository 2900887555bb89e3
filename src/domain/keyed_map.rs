//! A map keyed by a vocabulary enum ([`Metric`](super::Metric), [`Counter`](super::Counter),
//! [`Series`](super::Series)): lookups take anything that converts into the key, so call
//! sites say `counters.get(Counter::DenseFlops)` or `counters.get(Metric::FallbackRate)`,
//! never a string. It serializes exactly as the `BTreeMap` inside it, in key order; the
//! keys order by name, so files are what the string-keyed maps wrote.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut, Index};

/// A `BTreeMap` whose lookups convert their argument into the key type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyedMap<K: Ord, V>(BTreeMap<K, V>);

impl<K: Ord, V> KeyedMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        KeyedMap(BTreeMap::new())
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: impl Into<K>) -> Option<&V> {
        self.0.get(&key.into())
    }

    /// Whether `key` has a value.
    pub fn contains(&self, key: impl Into<K>) -> bool {
        self.0.contains_key(&key.into())
    }

    /// Sets `key`, returning the value it replaced.
    pub fn insert(&mut self, key: impl Into<K>, value: V) -> Option<V> {
        self.0.insert(key.into(), value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: impl Into<K>) -> Option<V> {
        self.0.remove(&key.into())
    }
}

impl<K: Ord + Copy, V: Copy> KeyedMap<K, V> {
    /// The value under `key`, copied.
    pub fn value(&self, key: impl Into<K>) -> Option<V> {
        self.get(key).copied()
    }
}

impl<K: Ord, V> Default for KeyedMap<K, V> {
    fn default() -> Self {
        KeyedMap::new()
    }
}

/// The map itself, for iteration and the rest of `BTreeMap`'s API; its keys are typed too.
impl<K: Ord, V> Deref for KeyedMap<K, V> {
    type Target = BTreeMap<K, V>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<K: Ord, V> DerefMut for KeyedMap<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<K: Ord, V, Q: Into<K>> Index<Q> for KeyedMap<K, V> {
    type Output = V;

    /// Panics when the key is absent, like `BTreeMap`'s index.
    fn index(&self, key: Q) -> &V {
        &self.0[&key.into()]
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for KeyedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        KeyedMap(iter.into_iter().collect())
    }
}

impl<K: Ord, V> Extend<(K, V)> for KeyedMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl<K: Ord, V> IntoIterator for KeyedMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::collections::btree_map::IntoIter<K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, K: Ord, V> IntoIterator for &'a KeyedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for KeyedMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        KeyedMap(BTreeMap::from(entries))
    }
}
