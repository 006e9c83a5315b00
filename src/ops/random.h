/* Counter-based random numbers (random.c): Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC 2011), the generator of Random123,
 * cuRAND and PyTorch's CUDA backend.
 *
 * A draw is named by (seed, stream): element i of it depends only on (seed,
 * stream, i), so results are identical for any thread count, any chunking and
 * any start offset. Element i comes from the Philox block with counter
 * (i / 4 low, i / 4 high, stream low, stream high) and key (seed low, seed high)
 * (32-bit words, least significant first), whose four output words w[0..3] give:
 *   uniform: u_i = (w[i % 4] >> 8) * 2^-24, exactly representable, in [0, 1);
 *   normal:  Box-Muller on the pair p = (i % 4) / 2 of words,
 *            a = ((w[2p] >> 8) + 1) * 2^-24 in (0, 1], b = (w[2p + 1] >> 8) * 2^-24,
 *            r = sqrt(-2 ln a), z_i = r cos(2 pi b) for even i, r sin(2 pi b) for odd i;
 *            computed in double and rounded once to float (|z| <= 5.77, never inf or NaN). */
#ifndef KL_RANDOM_H
#define KL_RANDOM_H

#include <stdint.h>

#include "kokoro_lstm.h"

/* One Philox4x32-10 block: out = philox(ctr, key). */
void kl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

enum { KL_RANDOM_UNIFORM = 0, KL_RANDOM_NORMAL = 1 };

/* y[k] = element start + k of the draw (seed, stream) of distribution dist, for
 * k in [0, n); y compact. start >= 0 and start + n <= 2^62. num_threads >= 1, or
 * 0 for kl_get_num_threads(). */
kl_status kl_f32_random(int dist, uint64_t seed, uint64_t stream, int64_t start, int64_t n,
                        float* y, int num_threads);

#endif
