//! Golden baselines: stored evidence under `golden/<pack>/<slice>.json`, written only by
//! `bless`, atomically, with an integrity digest so a hand edit is detected.

use crate::domain::digest::sha256_hex;
use crate::domain::{Counters, KeyedMap, Series, SliceKey};
use crate::execute::{MetricSamples, SliceEvidence};
use crate::files::FileError;
pub use crate::files::{write_atomic, write_atomic_with};
use crate::ingress::Environment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a golden baseline cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The file could not be read or is not JSON.
    #[error(transparent)]
    File(#[from] FileError),
    /// Its content does not match its recorded digest, or its format is unknown.
    #[error("golden baseline {} is not trustworthy: {reason}", path.display())]
    Corrupt {
        /// The baseline file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Its `expires_at` has passed.
    #[error("golden baseline {} for slice `{slice}` of pack `{pack}` expired at {at} (now {now})", path.display())]
    Expired {
        /// The baseline file.
        path: PathBuf,
        /// Its slice.
        slice: String,
        /// Its pack.
        pack: String,
        /// When it expired.
        at: String,
        /// The time of the check.
        now: String,
    },
}

type Result<T, E = GoldenError> = std::result::Result<T, E>;

/// Version of the baseline file format.
pub const BASELINE_SCHEMA_VERSION: u32 = 1;

/// Largest baseline file read.
pub const MAX_BASELINE_BYTES: u64 = 64 << 20;

/// The recorded evidence of one slice that later runs are compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Baseline {
    /// Format version.
    pub schema_version: u32,
    /// The pack's name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// `sha256:<hex>` of the pack file it was blessed from.
    pub pack_digest: String,
    /// When it was blessed (RFC 3339, UTC).
    pub blessed_at: String,
    /// Who blessed it (git user, else `$USER`).
    pub blessed_by: String,
    /// The environment it was measured under; its lock must match later runs.
    pub environment: Environment,
    /// Raw samples per metric.
    #[schemars(with = "BTreeMap<String, MetricSamples>")]
    pub metrics: KeyedMap<Series, MetricSamples>,
    /// Run counters (fallback rate, metadata overhead, …).
    #[schemars(with = "BTreeMap<String, f64>")]
    pub counters: Counters,
    /// When the baseline stops being trusted (RFC 3339, UTC), if ever: machines, drivers
    /// and toolchains drift, and a baseline nobody re-blessed for months compares today's
    /// code with a machine that no longer exists. `gate` refuses an expired baseline
    /// (exit 2) and says how to renew it. Absent in baselines without expiry, so their
    /// digests are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The artifact files (a checkpoint) the slice was measured from, with their digests: a
    /// later gate against another checkpoint is refused unless its pack allows it (issue
    /// 21). Absent for slices without artifacts, so older baselines' digests are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<crate::execute::ArtifactRecord>,
    /// `sha256:<hex>` over the canonical JSON of every other field.
    pub digest: String,
    /// How much this slice's timings drift between sessions, attached by the gate when it
    /// loads the baseline (from the run history, else assumed; issue 22). Never in the
    /// file: it is about the runner, not the baseline. `None`: not accounted for.
    #[serde(skip)]
    #[schemars(skip)]
    pub session_drift: Option<super::session_drift::SessionDrift>,
    /// The runner class whose directory it was loaded from (`golden/runners/<class>/`),
    /// attached by the gate; `None`: the class-less `golden/<pack>/`. Never in the file.
    #[serde(skip)]
    #[schemars(skip)]
    pub runner_class: Option<String>,
}

/// Baselines by (pack name, slice id).
pub type Baselines = BTreeMap<SliceKey, Baseline>;

impl Baseline {
    /// A baseline from fresh evidence; the digest is computed here.
    pub fn new(
        evidence: &SliceEvidence,
        environment: &Environment,
        pack_digest: &str,
        blessed_at: String,
        blessed_by: String,
    ) -> Baseline {
        let mut baseline = Baseline {
            schema_version: BASELINE_SCHEMA_VERSION,
            pack: evidence.pack.clone(),
            slice: evidence.slice.clone(),
            pack_digest: pack_digest.to_owned(),
            blessed_at,
            blessed_by,
            environment: environment.clone(),
            metrics: evidence.metrics.clone(),
            counters: evidence.counters.clone(),
            expires_at: None,
            artifacts: evidence.artifacts.clone(),
            digest: String::new(),
            session_drift: None,
            runner_class: None,
        };
        baseline.digest = baseline.compute_digest();
        baseline
    }

    /// `sha256:<hex>` over the canonical JSON (sorted keys) of every field but `digest`.
    pub fn compute_digest(&self) -> String {
        let mut unsigned = self.clone();
        unsigned.digest = String::new();
        let value = serde_json::to_value(&unsigned).expect("baselines serialize to JSON");
        sha256_hex(value.to_string().as_bytes())
    }

    /// The same baseline expiring at `expires_at` (RFC 3339, UTC), digest recomputed.
    pub fn with_expiry(mut self, expires_at: Option<String>) -> Baseline {
        self.expires_at = expires_at;
        self.digest = self.compute_digest();
        self
    }

    /// Refuse a baseline whose `expires_at` is at or before `now` (both RFC 3339 UTC as
    /// written by sparsegate, `YYYY-MM-DDTHH:MM:SSZ`, which order as strings). A malformed
    /// `expires_at` is refused too: an expiry nobody can read protects nothing.
    pub fn check_expiry(&self, path: &Path, now: &str) -> Result<()> {
        let Some(at) = &self.expires_at else {
            return Ok(());
        };
        if !is_rfc3339_utc(at) {
            return Err(GoldenError::Corrupt {
                path: path.to_owned(),
                reason: format!("expires_at `{at}` is not of the form YYYY-MM-DDTHH:MM:SSZ"),
            });
        }
        if at.as_str() <= now {
            return Err(GoldenError::Expired {
                path: path.to_owned(),
                slice: self.slice.clone(),
                pack: self.pack.clone(),
                at: at.clone(),
                now: now.to_owned(),
            });
        }
        Ok(())
    }

    /// The median of a metric's samples, if recorded.
    pub fn median(&self, metric: Series) -> Option<f64> {
        self.metrics
            .get(metric)
            .and_then(|m| crate::stats::median(&m.samples).ok())
    }
}

fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Where the baseline of `slice` in `pack` lives under `golden_dir`.
pub fn baseline_path(golden_dir: &Path, pack: &str, slice: &str) -> PathBuf {
    golden_dir.join(pack).join(format!("{slice}.json"))
}

/// The directory under the golden directory that holds one subdirectory per runner class.
pub const RUNNERS_DIR: &str = "runners";

/// Where the baseline of `slice` in `pack` lives for runner class `class` (`None`: the
/// class-less [`baseline_path`]).
pub fn class_baseline_path(golden_dir: &Path, class: Option<&str>, pack: &str, slice: &str) -> PathBuf {
    match class {
        Some(class) => baseline_path(&golden_dir.join(RUNNERS_DIR).join(class), pack, slice),
        None => baseline_path(golden_dir, pack, slice),
    }
}

/// The baseline a gate on runner class `class` uses: its class's file where one exists
/// (a repository keeping baselines per kind of runner), else the class-less one. Returns
/// the path and the class it belongs to.
pub fn resolve_baseline_path(
    golden_dir: &Path,
    class: &str,
    pack: &str,
    slice: &str,
) -> (PathBuf, Option<String>) {
    let own = class_baseline_path(golden_dir, Some(class), pack, slice);
    if std::fs::symlink_metadata(&own).is_ok_and(|m| m.is_file()) {
        (own, Some(class.to_owned()))
    } else {
        (baseline_path(golden_dir, pack, slice), None)
    }
}

/// Read and verify a baseline: `Ok(None)` when the file does not exist; an error when it
/// exists but is unreadable, malformed, of an unknown version, or fails its digest.
pub fn load_baseline(path: &Path) -> Result<Option<Baseline>> {
    // Bounded and non-blocking (issue 23); baselines are raw samples, a few MB at most.
    let Some(text) = crate::files::read_bounded_optional(path, MAX_BASELINE_BYTES)? else {
        return Ok(None);
    };
    let version: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| FileError::json(path, &e, "baselines are JSON written by `sparsegate bless`"))?;
    match version.get("schema_version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(BASELINE_SCHEMA_VERSION) => {}
        other => {
            return Err(GoldenError::Corrupt {
                path: path.to_owned(),
                reason: format!(
                    "schema_version is {}, this build reads {BASELINE_SCHEMA_VERSION}",
                    other.map_or_else(|| "missing".to_owned(), |v| v.to_string())
                ),
            });
        }
    }
    let baseline: Baseline = serde_json::from_value(version).map_err(|e| GoldenError::Corrupt {
        path: path.to_owned(),
        reason: format!("unexpected content: {e}"),
    })?;
    let actual = baseline.compute_digest();
    if actual != baseline.digest {
        return Err(GoldenError::Corrupt {
            path: path.to_owned(),
            reason: format!(
                "its content digest is {actual} but it records {}: it was edited by hand",
                baseline.digest
            ),
        });
    }
    Ok(Some(baseline))
}

/// How one metric's median moved between the old and the new baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetricChange {
    /// The metric name.
    pub metric: String,
    /// Median in the old baseline, if there was one.
    pub old: Option<f64>,
    /// Median in the new baseline.
    pub new: Option<f64>,
    /// 95% bootstrap interval (run-aware) of new/old medians, when both have positive
    /// samples: whether a change a reviewer sees in `bless` is real or noise.
    pub ratio_ci: Option<(f64, f64)>,
}

/// Confidence of the interval `bless` prints.
pub const BLESS_CONFIDENCE: f64 = 0.95;

impl MetricChange {
    /// Relative change new/old − 1, when both exist and old is non-zero.
    pub fn relative(&self) -> Option<f64> {
        match (self.old, self.new) {
            (Some(o), Some(n)) if o != 0.0 => Some(n / o - 1.0),
            _ => None,
        }
    }
}

/// What `bless` did to one slice's baseline: `bless --json` prints a list of them
/// (`schemas/bless-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlessChange {
    /// The pack name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The baseline file.
    pub path: PathBuf,
    /// The runner class it was blessed for (`bless --per-runner`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_class: Option<String>,
    /// Whether a baseline existed before.
    pub replaced: bool,
    /// Per metric, old and new medians.
    pub metrics: Vec<MetricChange>,
    /// The share of their cores the blessing runs' threads got (median over runs; built-in
    /// backends only). Below `1 - CONTENTION_TOLERANCE` the baseline was blessed contended,
    /// and a gate on a quiet runner will read it so (issue 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<f64>,
}

impl BlessChange {
    /// Whether other processes took enough of the cores while blessing that a gate on a
    /// quiet runner would see a contention difference.
    pub fn contended(&self) -> bool {
        self.cpu_share
            .is_some_and(|s| s < 1.0 - super::contention::CONTENTION_TOLERANCE)
    }
}

/// Run-aware bootstrap interval of median(new)/median(old) for one metric, seeded from the
/// metric name so the same two baselines always print the same interval.
fn ratio_interval(old: &Baseline, new: &Baseline, name: Series) -> Option<(f64, f64)> {
    use crate::stats::{Bootstrap, TwoSample, group_by_run};
    let groups = |m: &MetricSamples| -> Option<Vec<Vec<f64>>> {
        if m.samples.is_empty() || m.samples.iter().any(|&v| !(v.is_finite() && v > 0.0)) {
            return None;
        }
        if m.runs.len() == m.samples.len() {
            group_by_run("baseline", &m.samples, &m.runs).ok()
        } else {
            Some(vec![m.samples.clone()])
        }
    };
    let (a, b) = (groups(old.metrics.get(name)?)?, groups(new.metrics.get(name)?)?);
    let seed = name.name().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    });
    let dist = Bootstrap::new(2000, seed)
        .distribution(&a, &b, TwoSample::RatioOfQuantiles { q: 0.5 })
        .ok()?;
    Some(dist.percentile(BLESS_CONFIDENCE))
}

/// Compare a new baseline with the one it replaces, metric by metric.
pub fn describe_change(path: &Path, old: Option<&Baseline>, new: &Baseline) -> BlessChange {
    let mut names: Vec<Series> = new.metrics.keys().copied().collect();
    if let Some(old) = old {
        names.extend(old.metrics.keys().filter(|&&k| !new.metrics.contains(k)));
    }
    names.sort();
    BlessChange {
        pack: new.pack.clone(),
        slice: new.slice.clone(),
        path: path.to_owned(),
        runner_class: new.runner_class.clone(),
        replaced: old.is_some(),
        cpu_share: new.counters.get(crate::domain::Counter::CpuShare).copied(),
        metrics: names
            .into_iter()
            .map(|name| MetricChange {
                metric: name.name().to_owned(),
                old: old.and_then(|o| o.median(name)),
                new: new.median(name),
                ratio_ci: old.and_then(|o| ratio_interval(o, new, name)),
            })
            .collect(),
    }
}

crate::of_slice!(Baseline: pack, slice);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Metric;

    fn evidence(latency: Vec<f64>) -> SliceEvidence {
        SliceEvidence {
            sparsity: "2:4".into(),
            metrics: KeyedMap::from([(Metric::Latency.into(), MetricSamples::single_run("s", latency))]),
            counters: Counters::from([(Metric::FallbackRate.into(), 0.0)]),
            warmup_iterations: 3,
            wall_time_s: 0.1,
            ..SliceEvidence::named("p", "s")
        }
    }

    fn baseline(latency: Vec<f64>) -> Baseline {
        let env = Environment::capture(1, Path::new("/"));
        Baseline::new(
            &evidence(latency),
            &env,
            "sha256:00",
            "2026-11-29T00:00:00Z".into(),
            "t".into(),
        )
    }

    #[test]
    fn round_trip_verifies_its_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = baseline_path(dir.path(), "p", "s");
        let b = baseline(vec![1.0, 2.0, 3.0]);
        write_atomic(&path, serde_json::to_string_pretty(&b).unwrap().as_bytes()).unwrap();
        assert_eq!(load_baseline(&path).unwrap(), Some(b));
    }

    #[test]
    fn a_hand_edited_baseline_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = baseline_path(dir.path(), "p", "s");
        let text = serde_json::to_string_pretty(&baseline(vec![1.0, 2.0, 3.0])).unwrap();
        write_atomic(&path, text.replacen("2.0", "2.5", 1).as_bytes()).unwrap();
        let err = load_baseline(&path).unwrap_err();
        assert!(matches!(err, GoldenError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("edited by hand"), "{err}");
    }

    #[test]
    fn baselines_validate_against_the_committed_schema() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schemas/golden-baseline.schema.json")).unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let instance = serde_json::to_value(baseline(vec![1.0, 2.0])).unwrap();
        let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[cfg(unix)]
    #[test]
    fn written_files_are_world_readable_not_private_temp_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    #[test]
    fn a_missing_baseline_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_baseline(&dir.path().join("nope.json")).unwrap(), None);
    }

    /// Issue 2: bless is atomic; an interrupted write leaves the old baseline intact and no
    /// temporary file behind.
    #[test]
    fn issue_2_interrupted_write_keeps_the_old_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let path = baseline_path(dir.path(), "p", "s");
        let old = serde_json::to_string_pretty(&baseline(vec![1.0, 2.0, 3.0])).unwrap();
        write_atomic(&path, old.as_bytes()).unwrap();
        let result = write_atomic_with(&path, |f| {
            std::io::Write::write_all(f, b"{\"schema_version\": 1, \"pack\": \"p\", \"sli")?;
            Err(std::io::Error::other("simulated crash mid-write"))
        });
        assert!(result.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), old);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(leftovers, ["s.json"]);
        assert!(load_baseline(&path).unwrap().is_some());
    }

    #[test]
    fn describe_change_lists_old_and_new_medians() {
        let old = baseline(vec![1.0, 2.0, 3.0]);
        let new = baseline(vec![2.0, 4.0, 6.0]);
        let change = describe_change(Path::new("x"), Some(&old), &new);
        assert!(change.replaced);
        assert_eq!(change.metrics[0].metric, "latency");
        assert_eq!(change.metrics[0].relative(), Some(1.0));
        let (lo, hi) = change.metrics[0].ratio_ci.unwrap();
        assert!(lo <= 2.0 && 2.0 <= hi, "{lo} {hi}");
        assert_eq!(
            describe_change(Path::new("x"), None, &new).metrics[0].ratio_ci,
            None
        );
    }

    /// Issue 22: bless reports the share of the cores its runs got, and calls a baseline
    /// blessed with another process on one of two cores contended (a quiet machine reads
    /// 0.95–0.99).
    #[test]
    fn issue_22_bless_says_when_the_baseline_was_blessed_contended() {
        let with_share = |share: f64| {
            let mut b = baseline(vec![1.0, 2.0, 3.0]);
            b.counters.insert(crate::domain::Counter::CpuShare, share);
            describe_change(Path::new("x"), None, &b)
        };
        let busy = with_share(0.51);
        assert_eq!(busy.cpu_share, Some(0.51));
        assert!(busy.contended());
        assert!(!with_share(0.97).contended());
        // Commands and imports record no share: nothing to warn about.
        assert!(!describe_change(Path::new("x"), None, &baseline(vec![1.0])).contended());
    }

    /// Issue 5: an expired baseline is refused with a hint; the expiry is covered by the
    /// digest, and a baseline without expiry keeps its old digest.
    #[test]
    fn issue_5_expired_baselines_are_refused() {
        let b = baseline(vec![1.0, 2.0]);
        let digest = b.digest.clone();
        assert!(b.check_expiry(Path::new("x"), "2030-01-01T00:00:00Z").is_ok());
        let b = b.with_expiry(Some("2027-01-01T00:00:00Z".into()));
        assert_ne!(b.digest, digest);
        assert!(b.check_expiry(Path::new("x"), "2026-12-31T23:59:59Z").is_ok());
        let err = b
            .check_expiry(Path::new("x"), "2027-01-01T00:00:00Z")
            .unwrap_err();
        assert!(
            err.to_string().contains("expired at 2027-01-01T00:00:00Z"),
            "{err}"
        );
        assert!(matches!(err, GoldenError::Expired { .. }), "{err:?}");
        let bad = b.clone().with_expiry(Some("next year".into()));
        assert!(matches!(
            bad.check_expiry(Path::new("x"), "2026-01-01T00:00:00Z"),
            Err(GoldenError::Corrupt { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = baseline_path(dir.path(), "p", "s");
        write_atomic(&path, serde_json::to_string_pretty(&b).unwrap().as_bytes()).unwrap();
        assert_eq!(load_baseline(&path).unwrap(), Some(b));
    }
}
