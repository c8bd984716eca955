/* SHA-256 of a file through OpenSSL's libcrypto (see file_digest.h). */
#include "file_digest.h"

#include <errno.h>
#include <unistd.h>

#include <openssl/evp.h>

/* Streams the file in chunks, so that a plugin of any size costs one buffer. */
static int digest_chunks(EVP_MD_CTX *md, int fd, unsigned char digest[NVFP4_SHA256_BYTES]) {
    unsigned char buffer[1 << 14];
    unsigned int length = 0;
    off_t at = 0;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        errno = EIO;
        return -1;
    }
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
        if (EVP_DigestUpdate(md, buffer, (size_t)got) != 1) {
            errno = EIO;
            return -1;
        }
        at += got;
    }
    if (EVP_DigestFinal_ex(md, digest, &length) != 1 || length != NVFP4_SHA256_BYTES) {
        errno = EIO;
        return -1;
    }
    return 0;
}

int nvfp4_sha256_file(int fd, char hex[NVFP4_SHA256_HEX + 1]) {
    static const char digits[] = "0123456789abcdef";
    unsigned char digest[NVFP4_SHA256_BYTES];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md) {
        errno = ENOMEM;
        return -1;
    }
    const int rc = digest_chunks(md, fd, digest);
    const int err = errno;
    EVP_MD_CTX_free(md);
    if (rc != 0) {
        errno = err;
        return -1;
    }
    for (int i = 0; i < NVFP4_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[NVFP4_SHA256_HEX] = '\0';
    return 0;
}
