//! Vocabulary enums that files store by name ([`Metric`](super::Metric),
//! [`Series`](super::Series), [`Counter`](super::Counter)) share one set of impls: ordered,
//! printed and (de)serialized by their stable name.

/// The name is not one of the vocabulary's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{name}`")]
pub struct UnknownName {
    /// What was looked for (`metric`, `counter`).
    pub kind: &'static str,
    /// The name given.
    pub name: String,
}

/// For a `Copy` type with `fn name(self) -> &'static str` and `fn all()` listing every
/// value: `FromStr` by name (erring with [`UnknownName`] of `kind`), `Ord` by name (so
/// maps keyed by it serialize as string-keyed maps did), `Display` as the name, and serde
/// as the name string.
macro_rules! by_name {
    ($ty:ty, $kind:literal) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::domain::by_name::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty>::all()
                    .find(|v| v.name() == s)
                    .ok_or_else(|| $crate::domain::by_name::UnknownName {
                        kind: $kind,
                        name: s.to_owned(),
                    })
            }
        }

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

        $crate::domain::by_name::display_as!($ty, name);

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

/// `Display` as the `&'static str` that `$method` returns.
macro_rules! display_as {
    ($ty:ty, $method:ident) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.$method())
            }
        }
    };
}

pub(crate) use {by_name, display_as};
