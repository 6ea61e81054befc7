/* test_sha256.c - oc_sha256 (the CPU's SHA instructions where present) equals libsodium's SHA-256
 * on every length from 0 to 1,100 bytes (every padding case), on unaligned starts and on 32 MiB;
 * oc_sha256_pieces too, on lengths around its piece size, calling its hooks once per piece, in
 * order, over the whole data; prints one JSON line with which implementation ran and both speeds.
 * Exit 0 when all equal. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "internal.h"

static const unsigned char *hooked_start;
static size_t before_at, after_at, hook_errors;

static void before_piece(const void *p, size_t n) { /* pieces come in order, each before it is read */
    if ((const unsigned char *)p != hooked_start + before_at || before_at != after_at) hook_errors++;
    before_at += n;
}

static void after_piece(const void *p, size_t n) {
    if ((const unsigned char *)p != hooked_start + after_at || n > OC_HASH_PIECE) hook_errors++;
    after_at += n;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    size_t big = 32u << 20, n, i, failures = 0;
    unsigned char *data = malloc(big + 16), ours[32], theirs[32];
    unsigned long long x = 88172645463325252ULL;
    double t, ours_s, theirs_s;
    if (data == NULL || sodium_init() < 0) return 1;
    for (i = 0; i < big + 16; ++i) { /* xorshift: any bytes */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (unsigned char)x;
    }
    for (n = 0; n <= 1100; ++n) {
        for (i = 0; i < 3; ++i) { /* start at 0, 1 and 7: unaligned loads */
            size_t start = i == 0 ? 0 : i == 1 ? 1 : 7;
            oc_sha256(data + start, n, ours);
            crypto_hash_sha256(theirs, data + start, n);
            if (memcmp(ours, theirs, 32) != 0) {
                if (failures++ < 5) fprintf(stderr, "differs at length %zu, start %zu\n", n, start);
            }
        }
    }
    {
        const size_t lengths[] = {OC_HASH_PIECE - 1, OC_HASH_PIECE, OC_HASH_PIECE + 1, OC_HASH_PIECE + 63,
                                  OC_HASH_PIECE + 64, 2 * OC_HASH_PIECE + 100, 3 * OC_HASH_PIECE};
        for (i = 0; i < sizeof lengths / sizeof lengths[0]; ++i) {
            n = lengths[i];
            hooked_start = data + 3;
            before_at = after_at = 0;
            oc_sha256_pieces(data + 3, n, ours, before_piece, after_piece);
            crypto_hash_sha256(theirs, data + 3, n);
            if ((memcmp(ours, theirs, 32) != 0 || before_at != n || after_at != n) && failures++ < 5)
                fprintf(stderr, "oc_sha256_pieces differs at length %zu\n", n);
        }
        if (hook_errors && failures++ < 5) fprintf(stderr, "oc_sha256_pieces called its hooks out of order\n");
    }
    t = now();
    oc_sha256(data, big, ours);
    ours_s = now() - t;
    t = now();
    crypto_hash_sha256(theirs, data, big);
    theirs_s = now() - t;
    if (memcmp(ours, theirs, 32) != 0 && failures++ < 5) fprintf(stderr, "differs on 32 MiB\n");
    printf("{\"accelerated\": %s, \"failures\": %zu, \"ours_gb_s\": %.2f, \"libsodium_gb_s\": %.2f}\n",
           oc_sha256_accelerated() ? "true" : "false", failures, (double)big / ours_s / 1e9,
           (double)big / theirs_s / 1e9);
    free(data);
    return failures == 0 ? 0 : 1;
}
