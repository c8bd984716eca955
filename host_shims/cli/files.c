/* Files the tool reads and writes (see cli.h).
 *
 * Reading: only regular files (a FIFO would block the open, /dev/zero would be read until memory
 * runs out), with the size checked against the caller's bound before a byte is read. Writing: never
 * in place. The bytes go to a temporary file in the target's folder (so that the rename cannot cross
 * a file system), which is flushed, fsync()ed and renamed over the target only when complete; on any
 * failure the temporary file is removed and the target is as it was. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *file_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

int cli_read_file(const char *cmd, const char *path, size_t max_bytes, uint8_t **data, size_t *len) {
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat can
     * refuse it. Regular files ignore the flag. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return cli_fail(cmd, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = cli_fail(cmd, "cannot read %s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cli_fail(cmd, "%s is %s: only regular files are read", path, file_kind(st.st_mode));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return cli_fail(cmd, "%s is %lld bytes, more than the %zu-byte limit for this input", path,
                        (long long)st.st_size, max_bytes);
    }
    size_t size = (size_t)st.st_size, n = 0;
    uint8_t *buf = malloc(size + 1); /* + 1: a NUL for text, and room to notice a file that grew */
    if (!buf) {
        close(fd);
        return cli_fail(cmd, "out of memory for the %zu bytes of %s", size, path);
    }
    while (n < size + 1) {
        ssize_t got = read(fd, buf + n, size + 1 - n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            if (got < 0) {
                int rc = cli_fail(cmd, "cannot read %s: %s", path, strerror(errno));
                free(buf);
                close(fd);
                return rc;
            }
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    if (n != size) {
        free(buf);
        return cli_fail(cmd, "%s changed size while being read (%zu bytes, then %zu)", path, size, n);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

int cli_check_distinct(const char *cmd, const char *out, const char *const *inputs, int count) {
    struct stat o, in;
    if (stat(out, &o) != 0) {
        return 0; /* a new file cannot be an input */
    }
    for (int i = 0; i < count; i++) {
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == o.st_dev && in.st_ino == o.st_ino) {
            return cli_fail(cmd, "the output %s is the input %s (same file): refusing to overwrite an input", out,
                            inputs[i]);
        }
    }
    return 0;
}

/* The file a write replaces: the path itself, or what it links to (the link stays a link). */
static int output_target(const char *cmd, const char *path, char *target, size_t size, mode_t *mode) {
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    *mode = 0666 & ~mask;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) {
            return cli_fail(cmd, "cannot write %s: %s", path, strerror(errno));
        }
        return (size_t)snprintf(target, size, "%s", path) < size ? 0 : cli_fail(cmd, "%s: path too long", path);
    }
    if (S_ISLNK(st.st_mode)) {
        char resolved[PATH_MAX];
        if (!realpath(path, resolved) || stat(resolved, &st) != 0) {
            return cli_fail(cmd, "cannot write %s: the link does not lead to a file (%s)", path, strerror(errno));
        }
        snprintf(target, size, "%s", resolved);
    } else {
        snprintf(target, size, "%s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        return cli_fail(cmd, "cannot write %s: it is %s, only regular files are replaced", path,
                        file_kind(st.st_mode));
    }
    if (access(target, W_OK) != 0) { /* a rename would replace a write-protected file; in place it could not */
        return cli_fail(cmd, "cannot write %s: %s", path, strerror(errno));
    }
    *mode = st.st_mode & 07777; /* a replaced file keeps its permissions */
    return 0;
}

int cli_out_open(const char *cmd, const char *path, cli_out_t *out) {
    memset(out, 0, sizeof *out);
    out->cmd = cmd;
    out->path = path;
    mode_t mode;
    if (output_target(cmd, path, out->target, sizeof out->target, &mode)) {
        return 1;
    }
    char dir_copy[sizeof out->target], base_copy[sizeof out->target];
    snprintf(dir_copy, sizeof dir_copy, "%s", out->target);
    snprintf(base_copy, sizeof base_copy, "%s", out->target);
    if ((size_t)snprintf(out->temp, sizeof out->temp, "%s/.%s.XXXXXX", dirname(dir_copy), basename(base_copy)) >=
        sizeof out->temp) {
        return cli_fail(cmd, "%s: path too long", path);
    }
    int fd = mkostemp(out->temp, O_CLOEXEC);
    if (fd < 0) {
        return cli_fail(cmd, "cannot create a temporary file beside %s: %s", path, strerror(errno));
    }
    if (fchmod(fd, mode) != 0 || !(out->f = fdopen(fd, "wb"))) {
        int rc = cli_fail(cmd, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        unlink(out->temp);
        return rc;
    }
    return 0;
}

int cli_out_sync(cli_out_t *out) {
    if (out->synced) {
        return 0;
    }
    errno = 0;
    if (ferror(out->f) || fflush(out->f) != 0 || fsync(fileno(out->f)) != 0) {
        int rc = cli_fail(out->cmd, "cannot write %s: %s (nothing was replaced)", out->path,
                          errno ? strerror(errno) : "write error");
        cli_out_abort(out);
        return rc;
    }
    out->synced = 1;
    return 0;
}

int cli_out_commit(cli_out_t *out) {
    if (cli_out_sync(out)) {
        return 1;
    }
    FILE *f = out->f;
    out->f = NULL;
    if (fclose(f) != 0 || rename(out->temp, out->target) != 0) {
        int rc = cli_fail(out->cmd, "cannot write %s: %s (nothing was replaced)", out->path, strerror(errno));
        unlink(out->temp);
        out->temp[0] = '\0';
        return rc;
    }
    out->temp[0] = '\0';
    /* The rename itself reaches the disk with the folder; best effort, the data is already there. */
    char dir_copy[sizeof out->target];
    snprintf(dir_copy, sizeof dir_copy, "%s", out->target);
    int dir = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        fsync(dir);
        close(dir);
    }
    return 0;
}

void cli_out_abort(cli_out_t *out) {
    if (out->f) {
        fclose(out->f);
        out->f = NULL;
    }
    if (out->temp[0]) {
        unlink(out->temp);
        out->temp[0] = '\0';
    }
}

int cli_write_file(const char *cmd, const char *path, const void *data, size_t len) {
    cli_out_t out;
    if (cli_out_open(cmd, path, &out)) {
        return 1;
    }
    if (fwrite(data, 1, len, out.f) != len) {
        int rc = cli_fail(cmd, "cannot write %s: %s (nothing was replaced)", path, strerror(errno));
        cli_out_abort(&out);
        return rc;
    }
    return cli_out_commit(&out);
}
