/* SHA-256 of a whole file, for the loader's check of a plugin against the digest recorded when it was
 * built or installed (docs/integration.md section 2). The loader carries its own SHA-256 (FIPS 180-4)
 * instead of libcrypto so that a host linking the static loader needs nothing beyond the C library
 * and libdl (`pkg-config --libs nvfp4-mla` stays what it was). Private to the loader library. */
#ifndef NVFP4_FILE_DIGEST_H
#define NVFP4_FILE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define NVFP4_SHA256_BYTES 32
#define NVFP4_SHA256_HEX (2 * NVFP4_SHA256_BYTES)

typedef struct nvfp4_sha256 {
    uint32_t state[8];
    uint64_t length;        /* bytes hashed so far */
    unsigned char block[64]; /* the partial block */
    size_t used;            /* bytes of `block` in use */
} nvfp4_sha256_t;

void nvfp4_sha256_begin(nvfp4_sha256_t *h);
void nvfp4_sha256_add(nvfp4_sha256_t *h, const void *data, size_t len);
void nvfp4_sha256_end(nvfp4_sha256_t *h, unsigned char digest[NVFP4_SHA256_BYTES]);

/* The digest of everything `fd` holds from byte 0 (pread: the file offset is left alone), as 64 lower-case
 * hex digits and a NUL in `hex`. 0, or -1 with errno when a read fails. */
int nvfp4_sha256_file(int fd, char hex[NVFP4_SHA256_HEX + 1]);

#endif
