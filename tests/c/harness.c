/* The check counters, the PASS / FAIL lines and the shared helpers (harness.h). */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_passed = 0, g_failed = 0;

/* KL_TEST_QUIET=1 (`make test`): FAIL lines only, then the summary; KL_TEST_VERBOSE=1
 * prints every PASS line again. */
static int quiet(void) {
  static int q = -1;
  if (q < 0) {
    const char* qe = getenv("KL_TEST_QUIET");
    const char* ve = getenv("KL_TEST_VERBOSE");
    q = qe && *qe && strcmp(qe, "0") != 0 && !(ve && *ve && strcmp(ve, "0") != 0);
  }
  return q;
}

void check(int ok, const char* fmt, ...) {
  if (ok) g_passed++;
  else g_failed++;
  if (ok && quiet()) return;
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "PASS" : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

void* xcalloc(size_t n, size_t sz) {
  void* p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) {
    fprintf(stderr, "test_core: out of memory\n");
    exit(2);
  }
  return p;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
double urand(double lo, double hi) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  const uint64_t r = g_rng * 0x2545F4914F6CDD1Dull;
  return lo + (hi - lo) * ((double)(r >> 11) * (1.0 / 9007199254740992.0));
}

float frand(uint32_t* st) {
  *st = *st * 1664525u + 1013904223u;
  return (float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f;
}

double max_err(const double* a, const double* b, size_t n) {
  double e = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs(a[i] - b[i]);
    if (!(d <= e)) e = isfinite(d) ? d : INFINITY;
  }
  return e;
}

int harness_summary(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
