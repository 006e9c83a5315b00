/* The C test's harness: the check counters and their PASS / FAIL lines, and the
 * helpers every group uses (allocation that cannot fail, the shared random
 * sequence). One program (test_core) links every group; main.c runs them in a
 * fixed order, so the shared random sequence gives the same inputs every run. */
#ifndef KL_TEST_HARNESS_H
#define KL_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Counts one check; prints "PASS ..." (not with KL_TEST_QUIET=1) or "FAIL ...". */
void check(int ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* "N passed, M failed", the line the Makefile and CI read; returns the exit status. */
int harness_summary(void);

/* calloc of at least one byte, exiting with status 2 when out of memory. */
void* xcalloc(size_t n, size_t sz);
/* xorshift64*: uniform doubles in [lo, hi), one sequence for the whole program. */
double urand(double lo, double hi);
/* A small LCG in [-1, 1) on the caller's state (the dense and interrupt tests). */
float frand(uint32_t* st);
/* Largest |a - b|; NaN or Inf gives Inf. */
double max_err(const double* a, const double* b, size_t n);

#endif
