//! Weight sparsity patterns and their pack spelling (`dense`, `N:M`, `unstructured:D`,
//! `block:RxC:D`): the vocabulary ingress parses, lowering decides on, the kernels and the
//! simulator implement.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A weight sparsity pattern, parsed from the pack's string form.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sparsity {
    /// Every weight kept.
    Dense,
    /// N of every M consecutive weights along K kept (N < M).
    NOfM {
        /// Kept per group.
        n: u32,
        /// Group size.
        m: u32,
    },
    /// A fraction `density` of weights kept, anywhere.
    Unstructured {
        /// Kept fraction in (0, 1].
        density: f64,
    },
    /// Blocks of `rows × cols` weights kept or dropped together.
    Block {
        /// Block height.
        rows: u32,
        /// Block width.
        cols: u32,
        /// Kept fraction of blocks in (0, 1].
        density: f64,
    },
}

impl Sparsity {
    /// Fraction of weights kept.
    pub fn density(&self) -> f64 {
        match *self {
            Sparsity::Dense => 1.0,
            Sparsity::NOfM { n, m } => f64::from(n) / f64::from(m),
            Sparsity::Unstructured { density } | Sparsity::Block { density, .. } => density,
        }
    }

    /// A file-name-safe tag used in slice ids: `dense`, `2of4`, `u0.1`, `b16x16-0.1`.
    pub fn tag(&self) -> String {
        match *self {
            Sparsity::Dense => "dense".into(),
            Sparsity::NOfM { n, m } => format!("{n}of{m}"),
            Sparsity::Unstructured { density } => format!("u{density}"),
            Sparsity::Block { rows, cols, density } => format!("b{rows}x{cols}-{density}"),
        }
    }
}

impl fmt::Display for Sparsity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Sparsity::Dense => f.write_str("dense"),
            Sparsity::NOfM { n, m } => write!(f, "{n}:{m}"),
            Sparsity::Unstructured { density } => write!(f, "unstructured:{density}"),
            Sparsity::Block { rows, cols, density } => write!(f, "block:{rows}x{cols}:{density}"),
        }
    }
}

/// Largest N:M group size accepted.
const MAX_GROUP: u32 = 32;

/// A sparsity string that does not parse; says what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparsityError {
    /// What is wrong.
    pub message: String,
    /// What would be accepted instead.
    pub hint: String,
}

impl fmt::Display for SparsityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.hint)
    }
}

impl std::error::Error for SparsityError {}

const SPARSITY_FORMS: &str = "write `dense`, `N:M` (e.g. `2:4`), `unstructured:D` (e.g. `unstructured:0.1`) or `block:RxC:D` \
     (e.g. `block:16x16:0.25`), where D is the kept fraction in (0, 1]";

impl FromStr for Sparsity {
    type Err = SparsityError;

    /// Parse the pack form: `dense`, `N:M` with 0 < N < M ≤ 32, `unstructured:D` or
    /// `block:RxC:D` with density D in (0, 1] and R, C ≥ 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let err = |message: String| SparsityError {
            message,
            hint: SPARSITY_FORMS.to_owned(),
        };
        if s == "dense" {
            return Ok(Sparsity::Dense);
        }
        if let Some(d) = s.strip_prefix("unstructured:") {
            let density = parse_density(d).map_err(|m| err(format!("in sparsity `{s}`: {m}")))?;
            return Ok(Sparsity::Unstructured { density });
        }
        if let Some(rest) = s.strip_prefix("block:") {
            let Some((shape, d)) = rest.split_once(':') else {
                return Err(err(format!(
                    "block sparsity `{s}` needs a block shape and a density"
                )));
            };
            let Some((r, c)) = shape.split_once('x') else {
                return Err(err(format!(
                    "block shape `{shape}` in `{s}` is not of the form RxC"
                )));
            };
            let dim = |v: &str| v.parse::<u32>().ok().filter(|&v| v >= 1);
            let (Some(rows), Some(cols)) = (dim(r), dim(c)) else {
                return Err(err(format!(
                    "block shape `{shape}` in `{s}` needs whole numbers ≥ 1"
                )));
            };
            let density = parse_density(d).map_err(|m| err(format!("in sparsity `{s}`: {m}")))?;
            return Ok(Sparsity::Block { rows, cols, density });
        }
        if let Some((n, m)) = s.split_once(':') {
            // Digits only: `2 :4` or `+2:4` is a typo, not a sparsity (issue 23).
            let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
            if !(digits(n) && digits(m)) {
                return Err(err(format!(
                    "unknown sparsity `{s}` (N:M takes digits only, no spaces or signs)"
                )));
            }
            let (Ok(n), Ok(m)) = (n.parse::<u32>(), m.parse::<u32>()) else {
                return Err(err(format!("unknown sparsity `{s}`")));
            };
            let nm = |message: String| SparsityError {
                message,
                hint: format!(
                    "N:M keeps N of every M weights: 0 < N < M ≤ {MAX_GROUP} (e.g. `2:4`); \
                     use `dense` to keep every weight"
                ),
            };
            if m == 0 || m > MAX_GROUP {
                return Err(nm(format!(
                    "group size M = {m} in `{s}` is outside 1..={MAX_GROUP}"
                )));
            }
            if n == 0 {
                return Err(nm(format!("`{s}` keeps no weights (N must be at least 1)")));
            }
            if n >= m {
                return Err(nm(format!("`{s}` is not sparse: N must be less than M")));
            }
            return Ok(Sparsity::NOfM { n, m });
        }
        Err(err(format!("unknown sparsity `{s}`")))
    }
}

/// Why a density in a sparsity form is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum DensityError {
    #[error("density `{0}` is not a number")]
    NotANumber(String),
    #[error("density {0} is outside (0, 1]")]
    OutOfRange(String),
}

fn parse_density(d: &str) -> Result<f64, DensityError> {
    let v: f64 = d
        .trim()
        .parse()
        .map_err(|_| DensityError::NotANumber(d.to_owned()))?;
    // `is_normal`: a subnormal density (1e-310) keeps no weight of any real matrix and
    // breaks the arithmetic downstream (issue 23).
    if !(v.is_normal() && v > 0.0 && v <= 1.0) {
        return Err(DensityError::OutOfRange(d.to_owned()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaced_signed_or_subnormal_sparsities_are_refused() {
        for bad in [
            "2 :4",
            "2: 4",
            "+2:4",
            "2:+4",
            "unstructured:1e-310",
            "block:4x4:5e-324",
        ] {
            assert!(bad.parse::<Sparsity>().is_err(), "{bad} was accepted");
        }
        assert_eq!("2:4".parse::<Sparsity>().unwrap(), Sparsity::NOfM { n: 2, m: 4 });
    }

    #[test]
    fn a_bad_density_says_which_sparsity_and_why() {
        let message = |s: &str| s.parse::<Sparsity>().unwrap_err().message;
        assert_eq!(
            message("unstructured:x"),
            "in sparsity `unstructured:x`: density `x` is not a number"
        );
        assert_eq!(
            message("block:4x4:2"),
            "in sparsity `block:4x4:2`: density 2 is outside (0, 1]"
        );
    }
}
