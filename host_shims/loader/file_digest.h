/* SHA-256 of a whole file, for the loader's check of a plugin against the digest recorded when it was
 * built or installed (docs/integration.md section 2). OpenSSL's libcrypto computes it (EVP_sha256),
 * linked statically as the plugin links it (the root meson.build's crypto_dep): a host linking the
 * static loader gets no libcrypto.so among its NEEDED entries. Private to the loader library. */
#ifndef NVFP4_FILE_DIGEST_H
#define NVFP4_FILE_DIGEST_H

#define NVFP4_SHA256_BYTES 32
#define NVFP4_SHA256_HEX (2 * NVFP4_SHA256_BYTES)

/* The digest of everything `fd` holds from byte 0 (pread: the file offset is left alone), as 64 lower-case
 * hex digits and a NUL in `hex`. 0, or -1 with errno when a read fails (EIO when libcrypto fails). */
int nvfp4_sha256_file(int fd, char hex[NVFP4_SHA256_HEX + 1]);

#endif
