/* What every benchmark program shares: a monotonic clock and a comparator for sorting timings
 * (for medians). Included by bench/c/bench_*.c; header-only, so each program still builds from
 * its one .c file. */
#ifndef MTLS_BENCH_SUPPORT_H
#define MTLS_BENCH_SUPPORT_H

#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
