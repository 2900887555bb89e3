//! A slice's identity across stages and files: its pack's name and its id. Evidence,
//! baselines, outcomes and diagnoses of one slice are joined by this key, never by a pair
//! of loose strings.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which slice of which pack.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SliceKey {
    /// The pack's name.
    pub pack: String,
    /// The slice id within the pack.
    pub slice: String,
}

impl SliceKey {
    /// The key of slice `slice` of pack `pack`.
    pub fn new(pack: &str, slice: &str) -> SliceKey {
        SliceKey {
            pack: pack.to_owned(),
            slice: slice.to_owned(),
        }
    }
}

impl fmt::Display for SliceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pack, self.slice)
    }
}

/// Anything that belongs to one slice.
pub trait OfSlice {
    /// Its pack's name.
    fn pack_name(&self) -> &str;
    /// Its slice id.
    fn slice_id(&self) -> &str;

    /// The slice it belongs to, as an owned key (for maps).
    fn slice_key(&self) -> SliceKey {
        SliceKey::new(self.pack_name(), self.slice_id())
    }

    /// Whether it belongs to the same slice as `other` (compared in place, no key built).
    fn same_slice(&self, other: &impl OfSlice) -> bool {
        self.pack_name() == other.pack_name() && self.slice_id() == other.slice_id()
    }
}

/// `impl OfSlice for Type` from the fields that hold its pack name and slice id:
/// `of_slice!(SliceEvidence: pack, slice);`.
#[macro_export]
macro_rules! of_slice {
    ($ty:ty: $pack:ident, $slice:ident) => {
        impl $crate::domain::OfSlice for $ty {
            fn pack_name(&self) -> &str {
                &self.$pack
            }
            fn slice_id(&self) -> &str {
                &self.$slice
            }
        }
    };
}

impl<T: OfSlice> OfSlice for &T {
    fn pack_name(&self) -> &str {
        (**self).pack_name()
    }
    fn slice_id(&self) -> &str {
        (**self).slice_id()
    }
}
