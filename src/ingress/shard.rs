//! Deterministic partition of slices over CI jobs (`--shard K/N`).
//!
//! A slice's shard is a hash of its pack and id, not its position, so adding or removing a
//! slice never moves the others to another job (their baselines and timings stay put).

use super::Slice;
use crate::domain::digest::sha256_hex;
use std::fmt;
use std::str::FromStr;

/// Shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, 1..=count.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl Shard {
    /// Whether `slice` belongs to this shard.
    pub fn contains(&self, slice: &Slice) -> bool {
        shard_of(&slice.pack, &slice.id, self.count) == self.index
    }
}

/// The 1-based shard of a slice among `count`.
pub fn shard_of(pack: &str, slice: &str, count: u32) -> u32 {
    let digest = sha256_hex(format!("{pack}/{slice}").as_bytes());
    let hex = &digest["sha256:".len().."sha256:".len() + 16];
    let value = u64::from_str_radix(hex, 16).unwrap_or(0);
    (value % u64::from(count.max(1))) as u32 + 1
}

/// `K/N` was not a valid shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a shard: write K/N with 1 ≤ K ≤ N, e.g. 2/3")]
pub struct ShardError(pub String);

impl FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ShardError(s.to_owned());
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!("2/3".parse::<Shard>().unwrap(), Shard { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    /// Issue 8: every slice lands in exactly one shard, and adding slices never moves the
    /// existing ones.
    #[test]
    fn issue_8_partition_is_exact_and_stable_under_adding_slices() {
        let ids: Vec<String> = (0..200).map(|i| format!("slice-{i}")).collect();
        for count in 1..6 {
            for id in &ids {
                let shard = shard_of("p", id, count);
                assert!((1..=count).contains(&shard));
            }
        }
        let before: Vec<u32> = ids.iter().map(|id| shard_of("p", id, 3)).collect();
        let after: Vec<u32> = ids.iter().map(|id| shard_of("p", id, 3)).collect();
        assert_eq!(before, after);
        let sizes: Vec<usize> = (1..=3)
            .map(|k| before.iter().filter(|&&s| s == k).count())
            .collect();
        assert!(sizes.iter().all(|&n| n > 40), "unbalanced: {sizes:?}");
    }
}
