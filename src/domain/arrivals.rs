//! How requests arrive at a system under load: the seeded arrival process the simulator's
//! queue model and the CPU backend's serving loop share, so both see the same requests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Arrivals {
    /// Evenly spaced at `rate_per_s`.
    Steady {
        /// Requests per second.
        rate_per_s: f64,
    },
    /// A Poisson process at `rate_per_s` (exponential gaps, seeded).
    Poisson {
        /// Requests per second.
        rate_per_s: f64,
    },
    /// Groups of `size` requests arriving together, groups evenly spaced so the mean rate is
    /// `rate_per_s`.
    Bursts {
        /// Mean requests per second.
        rate_per_s: f64,
        /// Requests per burst.
        size: u32,
    },
}

impl Arrivals {
    /// The pattern's name, as a pack spells it (`steady`, `poisson`, `bursts`): the
    /// suffix of a load matrix cell's id (issue 24).
    pub fn pattern(self) -> &'static str {
        match self {
            Arrivals::Steady { .. } => "steady",
            Arrivals::Poisson { .. } => "poisson",
            Arrivals::Bursts { .. } => "bursts",
        }
    }

    /// The mean arrival rate, requests per second.
    pub fn rate_per_s(self) -> f64 {
        match self {
            Arrivals::Steady { rate_per_s }
            | Arrivals::Poisson { rate_per_s }
            | Arrivals::Bursts { rate_per_s, .. } => rate_per_s,
        }
    }

    /// Requests per burst (`bursts` only).
    pub fn burst(self) -> Option<u32> {
        match self {
            Arrivals::Bursts { size, .. } => Some(size),
            _ => None,
        }
    }
}

/// Parse `steady:RATE`, `poisson:RATE` or `bursts:RATE:SIZE` (RATE in requests/s).
pub fn parse_arrivals(text: &str) -> Option<Arrivals> {
    let mut parts = text.split(':');
    let kind = parts.next()?;
    let rate: f64 = parts
        .next()?
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && *r > 0.0)?;
    let a = match kind {
        "steady" => Arrivals::Steady { rate_per_s: rate },
        "poisson" => Arrivals::Poisson { rate_per_s: rate },
        "bursts" => Arrivals::Bursts {
            rate_per_s: rate,
            size: parts.next()?.parse().ok().filter(|&s: &u32| s > 0)?,
        },
        _ => return None,
    };
    parts.next().is_none().then_some(a)
}

/// When each of `requests` requests arrives (seconds from the first, which arrives at 0):
/// seeded, so the same arrivals drive the simulated accelerator's queue and the CPU
/// backend's serving loop (`execute/load.rs`).
pub fn arrival_times(arrivals: Arrivals, requests: u64, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(usize::try_from(requests).unwrap_or(0));
    let mut t_arrival = 0.0f64;
    for i in 0..requests {
        if i > 0 {
            t_arrival += match arrivals {
                Arrivals::Steady { rate_per_s } => 1.0 / rate_per_s,
                Arrivals::Poisson { rate_per_s } => {
                    let u: f64 = rng.random();
                    -(1.0 - u).ln() / rate_per_s
                }
                Arrivals::Bursts { rate_per_s, size } => {
                    if i % u64::from(size.max(1)) == 0 {
                        f64::from(size.max(1)) / rate_per_s
                    } else {
                        0.0
                    }
                }
            };
        }
        out.push(t_arrival);
    }
    out
}
