//! Vocabulary enums that files store by name ([`Metric`](super::Metric),
//! [`Series`](super::Series), [`Counter`](super::Counter)) share one set of impls: ordered,
//! printed and (de)serialized by their stable name.

/// For a `Copy` type with `fn name(self) -> &'static str` and a `FromStr` whose error
/// displays: `Ord` by name (so maps keyed by it serialize as string-keyed maps did),
/// `Display` as the name, and serde as the name string.
macro_rules! by_name {
    ($ty:ty) => {
        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.name().cmp(other.name())
            }
        }

        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use by_name;
