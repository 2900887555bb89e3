//! Kernel workers kept awake between products, as OpenMP runtimes keep theirs (issue 20).
//!
//! Rayon parks a worker that finds no work within microseconds. On a VM a parked vCPU
//! halts, and waking it lands on the next product's clock: on a 2-vCPU Emerald Rapids a
//! one-token int8 4096² product in a 2-thread pool ran 287–394 µs (median of 400, in each
//! of three rounds) with the worker parked between products, 285–295 µs with it kept
//! awake. MKL's OpenMP
//! threads spin for 200 ms after a parallel region by default (`KMP_BLOCKTIME`), so a
//! dense comparator measured against it must not pay the wake-up either. After each
//! product the other workers spin until the next product starts or [`LINGER`] passes:
//! model layers run back to back, and between them nothing else wants those CPUs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a worker waits, spinning, for the next product: longer than the gaps between a
/// timed pair's products and their bookkeeping, short enough that a worker never spins
/// through anything but those gaps.
pub(crate) const LINGER: Duration = Duration::from_micros(200);

/// Products started so far, in this process: a lingering worker stops when it moves.
static PRODUCTS: AtomicU64 = AtomicU64::new(0);

/// A product is starting: lingering workers stop spinning and take its tasks.
pub(crate) fn product_starts() {
    PRODUCTS.fetch_add(1, Ordering::Relaxed);
}

/// A product on `threads` workers has finished: keep the others awake for the next one.
/// Nothing where it ran on one thread or outside a rayon pool.
pub(crate) fn product_done(threads: usize) {
    if threads < 2 || rayon::current_thread_index().is_none() {
        return;
    }
    let started = PRODUCTS.load(Ordering::Relaxed);
    for _ in 1..threads.min(rayon::current_num_threads()) {
        rayon::spawn(move || {
            spin_until_moved(&PRODUCTS, started, LINGER);
        });
    }
}

/// Spin until `counter` leaves `from` (true) or `limit` passes (false).
fn spin_until_moved(counter: &AtomicU64, from: u64, limit: Duration) -> bool {
    let since = Instant::now();
    loop {
        if counter.load(Ordering::Relaxed) != from {
            return true;
        }
        if since.elapsed() >= limit {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lingering worker lets go as soon as the next product starts, long before its
    /// limit, and on its own only once the limit has passed.
    #[test]
    fn a_lingering_worker_stops_when_the_next_product_starts_or_its_time_is_up() {
        let counter = std::sync::Arc::new(AtomicU64::new(7));
        let limit = Duration::from_secs(5);
        let spinning = {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let since = Instant::now();
                (spin_until_moved(&counter, 7, limit), since.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        counter.fetch_add(1, Ordering::Relaxed);
        let (moved, spun) = spinning.join().unwrap();
        assert!(moved);
        assert!(spun < limit / 2, "{spun:?}");
        let since = Instant::now();
        assert!(!spin_until_moved(&counter, 8, Duration::from_millis(10)));
        assert!(since.elapsed() >= Duration::from_millis(10));
    }
}
