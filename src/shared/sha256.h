/* SPDX-License-Identifier: MIT */
#pragma once

/* SHA-256 (FIPS 180-4), for content-addressed keys. Not for secrets. */

#include <stddef.h>
#include <stdint.h>

typedef struct Sha256 {
        uint32_t h[8];
        uint64_t length;        /* bytes hashed so far */
        uint8_t block[64];
        size_t used;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
/* Lower-case hex of the digest of data; ret must hold 65 bytes. */
void sha256_hex(const void *data, size_t n, char ret[65]);
void sha256_final_hex(Sha256 *s, char ret[65]);
