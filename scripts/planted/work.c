/* The planted-regression workload of scripts/planted-regression.sh (issue 22): a
 * stand-in for a user's benchmark whose work can be made a few percent slower.
 *
 *   work LOOP_SIZE [SLOWDOWN_PCT] [REPEATS]
 *
 * Runs a dependent integer loop of LOOP_SIZE x (100 + SLOWDOWN_PCT) / 100 iterations
 * REPEATS times (default 3), timing each with CLOCK_MONOTONIC, and prints one `latency`
 * record (command contract version 1) per repetition. SLOWDOWN_PCT defaults to
 * $PLANTED_SLOWDOWN_PCT, else 0. Compiled, not a shell loop: a shell forks `date` around
 * its loop, and on a loaded machine those forks are most of the noise. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long arg(int argc, char **argv, int i, const char *env, long fallback) {
    const char *s = i < argc ? argv[i] : (env ? getenv(env) : NULL);
    if (!s) return fallback;
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "work: '%s' is not a whole number\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    long n = arg(argc, argv, 1, NULL, -1);
    if (n < 0) {
        fprintf(stderr, "usage: work LOOP_SIZE [SLOWDOWN_PCT] [REPEATS]\n");
        return 2;
    }
    long pct = arg(argc, argv, 2, "PLANTED_SLOWDOWN_PCT", 0);
    long reps = arg(argc, argv, 3, NULL, 3);
    long m = n * (100 + pct) / 100;
    volatile unsigned long sink = 0;
    for (long r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        unsigned long x = 88172645463325252UL;
        for (long i = 0; i < m; i++) { /* xorshift: each step depends on the last */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sink += x;
        long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
        printf("{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"ns\", \"value\": %ld}\n", ns);
    }
    return sink == 42; /* keeps the loop; never 42 in practice */
}
