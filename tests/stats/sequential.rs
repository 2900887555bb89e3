//! Issue 5: sequential sampling keeps the false-alarm rate valid. A/A comparisons on
//! lognormal noise (CV 7%) are looked at after 10, 20, 30, 40 and 50 samples per side and
//! stopped at the first look whose median-ratio interval lies wholly above 1 (a "fail" at
//! margin 0). Read at the full 95% at every look, the chance of a false failure grows with
//! the looks; read at the O'Brien–Fleming spending levels of `SequentialLook`, it stays at
//! or below the one-sided 2.5% of a single look. 200 bootstrap resamples per look (fast;
//! the Monte-Carlo noise of the interval ends only adds variance to the rates).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsegate::validate::stats::{Bootstrap, SequentialLook, TwoSample, wilson};

fn lognormal(rng: &mut ChaCha8Rng, n: usize, sigma: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (sigma * z).exp()
        })
        .collect()
}

/// Share of trials failed at some look, with the given per-look confidences.
fn false_alarms(trials: usize, looks: &[usize], confidences: &[f64], seed: u64) -> f64 {
    let sigma = (1.0f64 + 0.07 * 0.07).ln().sqrt();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n_max = *looks.last().unwrap();
    let mut failed = 0;
    for t in 0..trials {
        let a = lognormal(&mut rng, n_max, sigma);
        let b = lognormal(&mut rng, n_max, sigma);
        let hit = looks.iter().zip(confidences).any(|(&n, &c)| {
            let dist = Bootstrap::new(200, t as u64)
                .distribution(
                    &[a[..n].to_vec()],
                    &[b[..n].to_vec()],
                    TwoSample::RatioOfQuantiles { q: 0.5 },
                )
                .unwrap();
            dist.percentile(c).0 > 1.0
        });
        failed += usize::from(hit);
    }
    failed as f64 / trials as f64
}

#[test]
fn issue_5_alpha_spending_keeps_the_false_alarm_rate_under_repeated_looks() {
    let looks = [10, 20, 30, 40, 50];
    let trials = 1000;
    let spent: Vec<f64> = SequentialLook::schedule(0.05, &looks, 50)
        .unwrap()
        .iter()
        .map(|l| l.confidence)
        .collect();
    let naive = false_alarms(trials, &looks, &[0.95; 5], 1);
    let spending = false_alarms(trials, &looks, &spent, 1);
    let ci = |r: f64| wilson((r * trials as f64).round() as u64, trials as u64, 0.95).unwrap();
    eprintln!(
        "A/A with 5 looks: naive 95% at each look {naive:.3} {:?}, O'Brien–Fleming spending {spending:.3} {:?} \
         (nominal one-sided 0.025)",
        ci(naive),
        ci(spending)
    );
    assert!(ci(spending).0 <= 0.025, "spending {spending}");
    assert!(naive > spending, "naive {naive} spending {spending}");
}
