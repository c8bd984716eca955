/* SHA-256 (FIPS 180-4) of a file (see file_digest.h). */
#include "file_digest.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes (FIPS 180-4, 4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n) {
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t s[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) {
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    }
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s[0] += a, s[1] += b, s[2] += c, s[3] += d, s[4] += e, s[5] += f, s[6] += g, s[7] += h;
}

void nvfp4_sha256_begin(nvfp4_sha256_t *h) {
    /* The first 32 bits of the fractional parts of the square roots of the first 8 primes (5.3.3). */
    static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h->state, initial, sizeof initial);
    h->length = 0;
    h->used = 0;
}

void nvfp4_sha256_add(nvfp4_sha256_t *h, const void *data, size_t len) {
    const unsigned char *p = data;
    h->length += len;
    while (len) {
        if (h->used == 0 && len >= sizeof h->block) { /* whole blocks straight from the input */
            compress(h->state, p);
            p += sizeof h->block;
            len -= sizeof h->block;
            continue;
        }
        size_t take = sizeof h->block - h->used < len ? sizeof h->block - h->used : len;
        memcpy(h->block + h->used, p, take);
        h->used += take;
        p += take;
        len -= take;
        if (h->used == sizeof h->block) {
            compress(h->state, h->block);
            h->used = 0;
        }
    }
}

void nvfp4_sha256_end(nvfp4_sha256_t *h, unsigned char digest[NVFP4_SHA256_BYTES]) {
    const uint64_t bits = h->length * 8;
    unsigned char pad[72] = {0x80}, tail[8];
    const size_t pad_len = (h->used < 56 ? 56 : 120) - h->used; /* to 8 bytes short of a block */
    for (int i = 0; i < 8; i++) {
        tail[i] = (unsigned char)(bits >> (56 - 8 * i));
    }
    nvfp4_sha256_add(h, pad, pad_len);
    nvfp4_sha256_add(h, tail, sizeof tail);
    for (int i = 0; i < 8; i++) {
        for (int b = 0; b < 4; b++) {
            digest[4 * i + b] = (unsigned char)(h->state[i] >> (24 - 8 * b));
        }
    }
}

int nvfp4_sha256_file(int fd, char hex[NVFP4_SHA256_HEX + 1]) {
    static const char digits[] = "0123456789abcdef";
    unsigned char buffer[1 << 14], digest[NVFP4_SHA256_BYTES];
    nvfp4_sha256_t h;
    off_t at = 0;
    nvfp4_sha256_begin(&h);
    for (;;) {
        const ssize_t got = pread(fd, buffer, sizeof buffer, at);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return -1;
        }
        if (got == 0) {
            break;
        }
        nvfp4_sha256_add(&h, buffer, (size_t)got);
        at += got;
    }
    nvfp4_sha256_end(&h, digest);
    for (int i = 0; i < NVFP4_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[NVFP4_SHA256_HEX] = '\0';
    return 0;
}
