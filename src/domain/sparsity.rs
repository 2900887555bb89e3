//! Weight sparsity patterns and their spelling (`dense`, `N:M`, `unstructured:density=10%`,
//! `block:16x16:sparsity=75%`; in packs also `{unstructured: {sparsity: 90%}}`): the
//! vocabulary ingress parses, lowering decides on, the kernels and the simulator implement.
//!
//! Issue 24: the old bare fractions (`unstructured:0.9`, `block:16x16:0.25`) meant the kept
//! share, which readers took for the removed one; they are refused with their rewrite. The
//! value stays a density inside, so slice ids (`u0.1`, `b16x16-0.25`) and baselines keep
//! their keys.

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

impl Sparsity {
    /// A label for people (the memo): `dense`, `2:4 structured (50% kept)`,
    /// `unstructured, 90% sparse (10% kept)`, `block 16x16, 25% kept (75% sparse)`.
    /// Issue 24: a bare fraction was read as sparsity by some and as density by others, so
    /// the label always names both.
    pub fn describe(&self) -> String {
        match *self {
            Sparsity::Dense => "dense".into(),
            Sparsity::NOfM { n, m } => {
                format!("{n}:{m} structured ({} kept)", percent(self.density()))
            }
            Sparsity::Unstructured { density } => format!(
                "unstructured, {} sparse ({} kept)",
                percent(1.0 - density),
                percent(density)
            ),
            Sparsity::Block { rows, cols, density } => format!(
                "block {rows}x{cols}, {} kept ({} sparse)",
                percent(density),
                percent(1.0 - density)
            ),
        }
    }
}

/// The explicit, parseable spelling: `dense`, `2:4`, `unstructured:density=10%`,
/// `block:16x16:density=25%` (issue 24: never a bare fraction).
impl fmt::Display for Sparsity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Sparsity::Dense => f.write_str("dense"),
            Sparsity::NOfM { n, m } => write!(f, "{n}:{m}"),
            Sparsity::Unstructured { density } => {
                write!(f, "unstructured:density={}", percent(density))
            }
            Sparsity::Block { rows, cols, density } => {
                write!(f, "block:{rows}x{cols}:density={}", percent(density))
            }
        }
    }
}

/// A fraction as a percentage with no float noise: `0.1` → `10%`, `0.0999…98` → `10%`.
pub fn percent(fraction: f64) -> String {
    format!("{}%", round_fraction(fraction * 100.0))
}

/// Round to 10 decimals: enough for any percentage a person writes, and it removes the
/// noise of `1 − 0.9` so a sparsity and its density spell the same cell id.
fn round_fraction(v: f64) -> f64 {
    (v * 1e10).round() / 1e10
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

const SPARSITY_FORMS: &str = "write `dense`, `N:M` (e.g. `2:4`), `{unstructured: {sparsity: 90%}}` or \
     `{unstructured: {density: 10%}}`, or `{block: {size: 16x16, density: 25%}}` (on the command \
     line: `unstructured:sparsity=90%`, `block:16x16:density=25%`); density is the share of weights \
     kept, sparsity the share removed";

/// Which share of the weights a percentage in a sparsity spelling names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The share kept.
    Density,
    /// The share removed (1 − density).
    Sparsity,
}

impl Share {
    /// The key that names it in a pack: `density` or `sparsity`.
    pub fn key(self) -> &'static str {
        match self {
            Share::Density => "density",
            Share::Sparsity => "sparsity",
        }
    }
}

/// The density (kept fraction, in (0, 1]) that `text` (a percentage such as `90%`) means as
/// a `share`. `sparsity: 90%` and `density: 10%` give the same `0.1`, bit for bit.
pub fn density_of(share: Share, text: &str) -> Result<f64, SparsityError> {
    let t = text.trim();
    let key = share.key();
    let err = |message: String| SparsityError {
        message,
        hint: format!(
            "write the {key} as a percentage, e.g. `{key}: {}`",
            if share == Share::Density { "10%" } else { "90%" }
        ),
    };
    let Some(number) = t.strip_suffix('%') else {
        return Err(err(format!(
            "{key} `{t}` is not a percentage (issue 24: a bare fraction is ambiguous)"
        )));
    };
    let v: f64 = number
        .trim()
        .parse()
        .map_err(|_| err(format!("{key} `{t}` is not a percentage")))?;
    let kept = match share {
        Share::Density => v,
        Share::Sparsity => 100.0 - v,
    };
    let density = round_fraction(kept / 100.0);
    // `is_normal`: a subnormal density keeps no weight of any real matrix (issue 23).
    let ok = v.is_finite() && density.is_normal() && density > 0.0 && density <= 1.0;
    if !ok {
        let range = match share {
            Share::Density => "(0%, 100%]",
            Share::Sparsity => "[0%, 100%)",
        };
        return Err(err(format!("{key} {t} is outside {range}")));
    }
    Ok(density)
}

/// The rewrite hint for a bare-fraction form (`unstructured:0.9`, `block:16x16:0.25`):
/// what it meant, and the explicit spelling of the same cell.
fn ambiguous(s: &str, sp: Sparsity) -> SparsityError {
    let d = sp.density();
    let (yaml, cli) = match sp {
        Sparsity::Block { rows, cols, .. } => (
            format!("{{block: {{size: {rows}x{cols}, density: {}}}}}", percent(d)),
            format!("block:{rows}x{cols}:density={}", percent(d)),
        ),
        _ => (
            format!("{{unstructured: {{density: {}}}}}", percent(d)),
            format!("unstructured:density={}", percent(d)),
        ),
    };
    let what = if matches!(sp, Sparsity::Block { .. }) {
        "of blocks"
    } else {
        "of weights"
    };
    SparsityError {
        message: format!(
            "sparsity `{s}` is ambiguous: a bare fraction reads as sparsity to some and as density to others"
        ),
        hint: format!(
            "`{s}` keeps {} {what}; write `{yaml}` (= {} sparsity), or `{cli}` on the command line",
            percent(d),
            percent(1.0 - d)
        ),
    }
}

impl FromStr for Sparsity {
    type Err = SparsityError;

    /// Parse the string form: `dense`, `N:M` with 0 < N < M ≤ 32,
    /// `unstructured:density=P%` / `unstructured:sparsity=P%`, or
    /// `block:RxC:density=P%` / `block:RxC:sparsity=P%` with R, C ≥ 1. The old bare-fraction
    /// forms (`unstructured:0.1`, `block:16x16:0.25`) are refused with their explicit
    /// rewrite (issue 24).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let err = |message: String| SparsityError {
            message,
            hint: SPARSITY_FORMS.to_owned(),
        };
        if s == "dense" {
            return Ok(Sparsity::Dense);
        }
        let in_sparsity = |e: SparsityError| SparsityError {
            message: format!("in sparsity `{s}`: {}", e.message),
            hint: e.hint,
        };
        if let Some(d) = s.strip_prefix("unstructured:") {
            return match share_of(d) {
                Some((share, text)) => Ok(Sparsity::Unstructured {
                    density: density_of(share, text).map_err(in_sparsity)?,
                }),
                None => match parse_density(d) {
                    Ok(density) => Err(ambiguous(s, Sparsity::Unstructured { density })),
                    Err(m) => Err(err(format!("in sparsity `{s}`: {m}"))),
                },
            };
        }
        if let Some(rest) = s.strip_prefix("block:") {
            let Some((shape, d)) = rest.split_once(':') else {
                return Err(err(format!(
                    "block sparsity `{s}` needs a block shape and a density"
                )));
            };
            let (rows, cols) = block_shape(shape).map_err(|m| err(format!("{m} in `{s}`")))?;
            return match share_of(d) {
                Some((share, text)) => Ok(Sparsity::Block {
                    rows,
                    cols,
                    density: density_of(share, text).map_err(in_sparsity)?,
                }),
                None => match parse_density(d) {
                    Ok(density) => Err(ambiguous(s, Sparsity::Block { rows, cols, density })),
                    Err(m) => Err(err(format!("in sparsity `{s}`: {m}"))),
                },
            };
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

/// `density=10%` / `sparsity=90%` → which share and its text; `None` for anything else.
fn share_of(d: &str) -> Option<(Share, &str)> {
    let (key, value) = d.split_once('=')?;
    match key.trim() {
        "density" => Some((Share::Density, value)),
        "sparsity" => Some((Share::Sparsity, value)),
        _ => None,
    }
}

/// Why a block shape is not `RxC` with whole R, C ≥ 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockShapeError {
    /// No `x` between two numbers.
    #[error("block shape `{0}` is not of the form RxC")]
    NotRxC(String),
    /// A side that is not a whole number ≥ 1.
    #[error("block shape `{0}` needs whole numbers ≥ 1")]
    NotWhole(String),
}

/// A block shape `RxC` with whole R, C ≥ 1.
pub fn block_shape(shape: &str) -> Result<(u32, u32), BlockShapeError> {
    let Some((r, c)) = shape.trim().split_once('x') else {
        return Err(BlockShapeError::NotRxC(shape.to_owned()));
    };
    let dim = |v: &str| v.parse::<u32>().ok().filter(|&v| v >= 1);
    match (dim(r), dim(c)) {
        (Some(rows), Some(cols)) => Ok((rows, cols)),
        _ => Err(BlockShapeError::NotWhole(shape.to_owned())),
    }
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
            "unstructured:density=1e-310%",
            "block:4x4:density=5e-324%",
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
            message("block:4x4:density=200%"),
            "in sparsity `block:4x4:density=200%`: density 200% is outside (0%, 100%]"
        );
    }

    // Issue 24: `unstructured:0.9` keeps 90% of the weights, which readers took for 90% sparse.
    #[test]
    fn a_bare_fraction_is_refused_with_its_explicit_rewrite() {
        let e = "unstructured:0.9".parse::<Sparsity>().unwrap_err();
        assert!(e.message.contains("ambiguous"), "{e}");
        assert_eq!(
            e.hint,
            "`unstructured:0.9` keeps 90% of weights; write `{unstructured: {density: 90%}}` (= 10% sparsity), \
             or `unstructured:density=90%` on the command line"
        );
        let e = "block:16x16:0.25".parse::<Sparsity>().unwrap_err();
        assert!(
            e.hint.starts_with(
                "`block:16x16:0.25` keeps 25% of blocks; write `{block: {size: 16x16, density: 25%}}` (= 75% sparsity)"
            ),
            "{e}"
        );
    }

    // Issue 24: both explicit spellings name the same cell, so ids and baselines keep their keys.
    #[test]
    fn sparsity_and_density_spell_the_same_cell() {
        let a: Sparsity = "unstructured:sparsity=90%".parse().unwrap();
        let b: Sparsity = "unstructured:density=10%".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.tag(), "u0.1");
        let c: Sparsity = "block:16x16:sparsity=75%".parse().unwrap();
        assert_eq!(c.tag(), "b16x16-0.25");
        let d: Sparsity = "unstructured:sparsity=99.9%".parse().unwrap();
        assert_eq!(d.tag(), "u0.001");
    }

    #[test]
    fn describe_names_both_the_kept_and_the_removed_share() {
        let d = |s: &str| s.parse::<Sparsity>().unwrap().describe();
        assert_eq!(d("dense"), "dense");
        assert_eq!(d("2:4"), "2:4 structured (50% kept)");
        assert_eq!(
            d("unstructured:sparsity=90%"),
            "unstructured, 90% sparse (10% kept)"
        );
        assert_eq!(d("block:16x16:density=25%"), "block 16x16, 25% kept (75% sparse)");
    }
}
