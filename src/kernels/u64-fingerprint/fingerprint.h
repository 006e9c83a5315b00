/* Constants shared by the fingerprint kernels (see u64-fingerprint-scalar.c). */
#ifndef KL_FINGERPRINT_H
#define KL_FINGERPRINT_H
#include <stdint.h>

static const uint64_t KL_FP_KEY[8] = {
    0x9E3779B185EBCA87ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x85EBCA77C2B2AE63ull,
    0x27D4EB2F165667C5ull, 0xD6E8FEB86659FD93ull, 0xFF51AFD7ED558CCDull, 0xC4CEB9FE1A85EC53ull};
#define KL_FP_STEP 0x9FB21C651E98DF25ull

#endif
