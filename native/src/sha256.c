/* sha256.c - SHA-256 of blobs against the manifest: the x86-64 SHA extensions where the CPU has
 * them (about 4x libsodium's portable code, which serves everywhere else). The rounds follow the
 * instructions' definition in Intel's SDM (SHA256RNDS2, SHA256MSG1, SHA256MSG2): state kept as
 * ABEF/CDGH, four rounds per K vector, the schedule W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]
 * built four words at a time. tests/test_sha256.c checks it against libsodium. */
#include <string.h>

#include <sodium.h>

#include "internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define OC_HAVE_SHA_NI 1

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

__attribute__((target("sha,sse4.1"))) static void blocks_sha_ni(uint32_t state[8], const uint8_t *data, size_t count) {
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL); /* big-endian words */
    __m128i abef, cdgh, tmp;
    tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[0]), 0xB1); /* CDAB */
    cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[4]), 0x1B); /* EFGH */
    abef = _mm_alignr_epi8(tmp, cdgh, 8);
    cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);
    while (count--) {
        __m128i w0, w1, w2, w3, saved_abef = abef, saved_cdgh = cdgh;
        /* four rounds on the words in W, then the next four words into W from the four before
         * (written out, so the schedule stays in registers) */
#define OC_ROUNDS(W, i)                                                                      \
    do {                                                                                     \
        __m128i m_ = _mm_add_epi32(W, _mm_loadu_si128((const __m128i *)&K[4 * (i)]));       \
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m_);                                        \
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m_, 0x0E));              \
    } while (0)
#define OC_NEXT(W0, W1, W2, W3) /* W0 = W[t-4..]: becomes W[t..t+3] */                       \
    W0 = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(W0, W1), _mm_alignr_epi8(W3, W2, 4)), W3)
        w0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 0)), swap);
        w1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16)), swap);
        w2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 32)), swap);
        w3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 48)), swap);
        OC_ROUNDS(w0, 0);
        OC_ROUNDS(w1, 1);
        OC_ROUNDS(w2, 2);
        OC_ROUNDS(w3, 3);
#define OC_SIXTEEN(i) /* rounds 4i..4i+15, the next sixteen words first */                   \
    OC_NEXT(w0, w1, w2, w3);                                                                 \
    OC_ROUNDS(w0, i);                                                                        \
    OC_NEXT(w1, w2, w3, w0);                                                                 \
    OC_ROUNDS(w1, (i) + 1);                                                                  \
    OC_NEXT(w2, w3, w0, w1);                                                                 \
    OC_ROUNDS(w2, (i) + 2);                                                                  \
    OC_NEXT(w3, w0, w1, w2);                                                                 \
    OC_ROUNDS(w3, (i) + 3)
        OC_SIXTEEN(4);
        OC_SIXTEEN(8);
        OC_SIXTEEN(12);
#undef OC_SIXTEEN
#undef OC_NEXT
#undef OC_ROUNDS
        abef = _mm_add_epi32(abef, saved_abef);
        cdgh = _mm_add_epi32(cdgh, saved_cdgh);
        data += 64;
    }
    tmp = _mm_shuffle_epi32(abef, 0x1B);  /* FEBA */
    cdgh = _mm_shuffle_epi32(cdgh, 0xB1); /* DCHG */
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(tmp, cdgh, 0xF0)); /* DCBA */
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(cdgh, tmp, 8));   /* HGFE */
}

static int cpu_has_sha_ni(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1)) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1; /* CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29] */
}

/* Asked once, when the library loads: CPUID traps to the hypervisor on virtual machines (measured
 * here: it was half the time of opening a small blob when asked on every hash). */
static int sha_ni;
__attribute__((constructor)) static void detect_sha_ni(void) { sha_ni = cpu_has_sha_ni(); }

static int has_sha_ni(void) { return sha_ni; }
#endif

int oc_sha256_accelerated(void) {
#ifdef OC_HAVE_SHA_NI
    return has_sha_ni();
#else
    return 0;
#endif
}

void oc_sha256(const uint8_t *data, size_t size, uint8_t digest[32]) { oc_sha256_pieces(data, size, digest, NULL, NULL); }

void oc_sha256_pieces(const uint8_t *data, size_t size, uint8_t digest[32], void (*before)(const void *, size_t),
                      void (*after)(const void *, size_t)) {
    size_t at, n;
#ifdef OC_HAVE_SHA_NI
    if (has_sha_ni()) {
        uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
        uint8_t tail[128];
        size_t full = size / 64 * 64, rest = size % 64, padded, i;
        uint64_t bits = (uint64_t)size * 8u;
        memset(tail, 0, sizeof tail);
        for (at = 0; at < size; at += n) { /* pieces are whole blocks but the last */
            n = size - at < OC_HASH_PIECE ? size - at : OC_HASH_PIECE;
            if (before != NULL) before(data + at, n);
            blocks_sha_ni(state, data + at, (at + n <= full ? n : full - at) / 64);
            if (at + n > full) memcpy(tail, data + full, rest); /* read before `after` lets it go */
            if (after != NULL) after(data + at, n);
        }
        tail[rest] = 0x80;
        padded = rest < 56 ? 64 : 128;
        for (i = 0; i < 8; ++i) tail[padded - 1 - i] = (uint8_t)(bits >> (8 * i));
        blocks_sha_ni(state, tail, padded / 64);
        for (i = 0; i < 8; ++i) {
            digest[4 * i] = (uint8_t)(state[i] >> 24);
            digest[4 * i + 1] = (uint8_t)(state[i] >> 16);
            digest[4 * i + 2] = (uint8_t)(state[i] >> 8);
            digest[4 * i + 3] = (uint8_t)state[i];
        }
        return;
    }
#endif
    {
        crypto_hash_sha256_state state;
        crypto_hash_sha256_init(&state);
        for (at = 0; at < size; at += n) {
            n = size - at < OC_HASH_PIECE ? size - at : OC_HASH_PIECE;
            if (before != NULL) before(data + at, n);
            crypto_hash_sha256_update(&state, data + at, n);
            if (after != NULL) after(data + at, n);
        }
        crypto_hash_sha256_final(&state, digest);
    }
}
