//! The embedded datasets and their stratified split.
//!
//! The digits file is compiled into the binary (`include_bytes!`), so a quality gate needs
//! no network and no Python; `data/digits/README.md` says where it comes from and how
//! `scripts/export_digits.py` made it.

use crate::domain::digest::sha256_hex;
use crate::execute::error::ModelError;
use crate::ingress::model::{DatasetInfo, holdout_per_class};
use crate::ingress::pack::DatasetName;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

static DIGITS_BIN: &[u8] = include_bytes!("../../../data/digits/digits.bin");

/// Largest pixel value of the digits (4×4 blocks of on-pixels counted: 0..=16).
const DIGITS_MAX_PIXEL: f32 = 16.0;

/// A dataset in memory: features scaled to [0, 1], row-major `samples × features`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dataset {
    pub(crate) info: DatasetInfo,
    pub(crate) x: Vec<f32>,
    pub(crate) y: Vec<u8>,
    /// `sha256:<hex>` of the embedded file.
    pub(crate) digest: String,
}

/// Sample indices of each split, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) train: Vec<usize>,
    pub(crate) validation: Vec<usize>,
    pub(crate) test: Vec<usize>,
}

/// Decode an embedded dataset, checking it against the shape facts ingress relies on.
pub(crate) fn load(name: DatasetName) -> Result<Dataset, ModelError> {
    let info = name.info();
    let bytes = match name {
        DatasetName::Digits => DIGITS_BIN,
    };
    let record = info.features + 1;
    if bytes.len() != info.samples * record {
        return Err(ModelError::DatasetSize {
            dataset: name,
            bytes: bytes.len(),
            samples: info.samples,
            record,
        });
    }
    let mut x = Vec::with_capacity(info.samples * info.features);
    let mut y = Vec::with_capacity(info.samples);
    let mut counts = vec![0usize; info.classes];
    for r in bytes.chunks_exact(record) {
        let (pixels, label) = r.split_at(info.features);
        let label = label[0];
        if usize::from(label) >= info.classes || pixels.iter().any(|&p| f32::from(p) > DIGITS_MAX_PIXEL) {
            return Err(ModelError::DatasetRecord(name));
        }
        counts[usize::from(label)] += 1;
        x.extend(pixels.iter().map(|&p| f32::from(p) / DIGITS_MAX_PIXEL));
        y.push(label);
    }
    if counts != info.class_counts {
        return Err(ModelError::DatasetClasses {
            dataset: name,
            counts,
            expected: info.class_counts,
        });
    }
    Ok(Dataset {
        info,
        x,
        y,
        digest: sha256_hex(bytes),
    })
}

/// Stratified split: each class's samples are shuffled with `seed` (classes in label
/// order, one generator), then 20% go to test, 20% to validation and the rest to train.
/// The sizes depend only on the class counts; which samples land where depends only on
/// the seed.
pub(crate) fn split(data: &Dataset, seed: u64) -> Split {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut train, mut validation, mut test) = (Vec::new(), Vec::new(), Vec::new());
    for class in 0..data.info.classes {
        let mut members: Vec<usize> = (0..data.y.len())
            .filter(|&i| usize::from(data.y[i]) == class)
            .collect();
        members.shuffle(&mut rng);
        let held = holdout_per_class(members.len());
        test.extend_from_slice(&members[..held]);
        validation.extend_from_slice(&members[held..2 * held]);
        train.extend_from_slice(&members[2 * held..]);
    }
    train.sort_unstable();
    validation.sort_unstable();
    test.sort_unstable();
    Split {
        train,
        validation,
        test,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_file_is_the_committed_export() {
        let d = load(DatasetName::Digits).unwrap();
        // Recorded in data/digits/README.md by scripts/export_digits.py.
        assert_eq!(
            d.digest,
            "sha256:68aea062d35a127749050fa0e52dca09d6569ac08092c925610e0954e172dde2"
        );
        assert_eq!(d.y.len(), 1797);
        assert_eq!(&d.y[..10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert!(d.x.iter().all(|&v| (0.0..=1.0).contains(&v)));
    }

    #[test]
    fn split_is_stratified_disjoint_and_seeded() {
        let d = load(DatasetName::Digits).unwrap();
        let s = split(&d, 7);
        assert_eq!(
            (s.train.len(), s.validation.len(), s.test.len()),
            d.info.split_sizes()
        );
        let mut all: Vec<usize> = s
            .train
            .iter()
            .chain(&s.validation)
            .chain(&s.test)
            .copied()
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..1797).collect::<Vec<_>>());
        for class in 0..10u8 {
            let in_test = s.test.iter().filter(|&&i| d.y[i] == class).count();
            assert_eq!(
                in_test,
                holdout_per_class(d.info.class_counts[usize::from(class)])
            );
        }
        assert_eq!(split(&d, 7), s);
        assert_ne!(split(&d, 8).test, s.test);
    }
}
