/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"

static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n) {
        return (x >> n) | (x << (32 - n));
}

static void compress(Sha256 *s, const uint8_t *p) {
        uint32_t w[64], a, b, c, d, e, f, g, h;

        for (unsigned i = 0; i < 16; i++)
                w[i] = (uint32_t) p[4 * i] << 24 | (uint32_t) p[4 * i + 1] << 16 | (uint32_t) p[4 * i + 2] << 8 |
                       (uint32_t) p[4 * i + 3];
        for (unsigned i = 16; i < 64; i++) {
                uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
                uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
                w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }

        a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
        e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
        for (unsigned i = 0; i < 64; i++) {
                uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
                uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
                h = g, g = f, f = e, e = d + t1;
                d = c, c = b, b = a, a = t1 + t2;
        }
        s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
        s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

/*
 * The same compression with the CPU's SHA extensions, blocks at a time: some five times as fast, which a script
 * of 16 MiB (its hash is logged with every run, in the event loop) notices. The state is kept as the instructions
 * want it, {A,B,E,F} and {C,D,G,H}; each round pair takes two words of the schedule plus their constants; each group
 * of four words after the first four comes from the four groups before it (msg1: W[t-16] + s0(W[t-15]); plus
 * W[t-7]; msg2: + s1(W[t-2])).
 */
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_blocks_x86(uint32_t h[8], const uint8_t *p, size_t n) {
        const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
        __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &h[0]), 0xB1);   /* B A D C */
        __m128i st1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &h[4]), 0x1B); /* H G F E */
        __m128i st0 = _mm_alignr_epi8(t, st1, 8);                                         /* F E B A */
        st1 = _mm_blend_epi16(st1, t, 0xF0);                                              /* H G D C */

        for (; n > 0; n--, p += 64) {
                const __m128i abef = st0, cdgh = st1;
                __m128i w[4];

                for (unsigned g = 0; g < 16; g++) {
                        __m128i m;

                        if (g < 4)
                                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (p + 16 * g)), swap);
                        else {
                                m = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
                                m = _mm_add_epi32(m, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
                                w[g & 3] = _mm_sha256msg2_epu32(m, w[(g + 3) & 3]);
                        }
                        m = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *) &K[4 * g]));
                        st1 = _mm_sha256rnds2_epu32(st1, st0, m);
                        st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(m, 0x0E));
                }
                st0 = _mm_add_epi32(st0, abef);
                st1 = _mm_add_epi32(st1, cdgh);
        }

        t = _mm_shuffle_epi32(st0, 0x1B);                                                 /* A B E F */
        st1 = _mm_shuffle_epi32(st1, 0xB1);                                               /* G H C D */
        _mm_storeu_si128((__m128i *) &h[0], _mm_blend_epi16(t, st1, 0xF0));               /* A B C D */
        _mm_storeu_si128((__m128i *) &h[4], _mm_alignr_epi8(st1, t, 8));                  /* E F G H */
}

/* CPUID's own bits (every compiler has <cpuid.h>; not all know "sha" for __builtin_cpu_supports()): SHA in leaf 7,
 * SSSE3 and SSE4.1 in leaf 1. Valgrind's CPUID does not show SHA, so the portable code runs there. */
static bool have_sha_x86(void) {
        static int have = -1;
        unsigned a, b, c, d;

        if (have < 0)
                have = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSSE3) && (c & bit_SSE4_1) &&
                       __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29)) &&
                       !getenv("MCP_SHA256_PORTABLE");
        return have;
}
#endif

/* n whole blocks. */
static void compress_blocks(Sha256 *s, const uint8_t *p, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (have_sha_x86())
                return compress_blocks_x86(s->h, p, n);
#endif
        for (; n > 0; n--, p += 64)
                compress(s, p);
}

void sha256_init(Sha256 *s) {
        static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
        memcpy(s->h, iv, sizeof(iv));
        s->length = 0;
        s->used = 0;
}

void sha256_update(Sha256 *s, const void *data, size_t n) {
        const uint8_t *p = data;

        s->length += n;
        while (n > 0) {
                if (s->used == 0 && n >= 64) {
                        size_t whole = n / 64;
                        compress_blocks(s, p, whole);
                        p += whole * 64;
                        n -= whole * 64;
                        continue;
                }
                size_t take = 64 - s->used;
                if (take > n)
                        take = n;
                memcpy(s->block + s->used, p, take);
                s->used += take;
                p += take;
                n -= take;
                if (s->used == 64) {
                        compress_blocks(s, s->block, 1);
                        s->used = 0;
                }
        }
}

static void sha256_final(Sha256 *s, uint8_t ret[32]) {
        uint64_t bits = s->length * 8;
        uint8_t pad = 0x80, zero = 0, len[8];

        sha256_update(s, &pad, 1);
        while (s->used != 56)
                sha256_update(s, &zero, 1);
        for (unsigned i = 0; i < 8; i++)
                len[i] = (uint8_t) (bits >> (56 - 8 * i));
        sha256_update(s, len, 8);
        for (unsigned i = 0; i < 8; i++) {
                ret[4 * i] = (uint8_t) (s->h[i] >> 24);
                ret[4 * i + 1] = (uint8_t) (s->h[i] >> 16);
                ret[4 * i + 2] = (uint8_t) (s->h[i] >> 8);
                ret[4 * i + 3] = (uint8_t) s->h[i];
        }
}

void sha256_final_hex(Sha256 *s, char ret[65]) {
        static const char hex[] = "0123456789abcdef";
        uint8_t d[32];

        sha256_final(s, d);
        for (unsigned i = 0; i < 32; i++) {
                ret[2 * i] = hex[d[i] >> 4];
                ret[2 * i + 1] = hex[d[i] & 15];
        }
        ret[64] = 0;
}

void sha256_hex(const void *data, size_t n, char ret[65]) {
        Sha256 s;

        sha256_init(&s);
        sha256_update(&s, data, n);
        sha256_final_hex(&s, ret);
}
