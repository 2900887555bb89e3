//! `stats compare`: the statistics engine on two sample files, without a pack.

use crate::validate::compare::{CompareOptions, Comparison, InputError, compare, read_samples};
use std::path::Path;

/// Read both sample files and compare `candidate` with `baseline`. Input problems come
/// back located (file and line), as the statistics engine reports them.
pub fn compare_samples(
    baseline: &Path,
    candidate: &Path,
    options: &CompareOptions,
) -> Result<Comparison, InputError> {
    let baseline = read_samples(baseline)?;
    let candidate = read_samples(candidate)?;
    compare(&baseline, &candidate, options)
}
