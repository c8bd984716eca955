/* Files the tool reads and writes (see cli.h).
 *
 * Reading: only regular files (a FIFO would block the open, /dev/zero would be read until memory
 * runs out), with the size checked against the caller's bound before a byte is read. Writing: never
 * in place. The bytes go to a temporary file in the target's folder (so that the rename cannot cross
 * a file system), which is flushed, fsync()ed and renamed over the target only when complete; on any
 * failure, and on a fatal signal (cleanup.c), the temporary file is removed and the target is as it
 * was. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
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

/* "-" is many tools' standard output: never a file named "-" without a word (issue 58, N18). */
static int dash_output(const char *cmd) {
    return cli_fail(cmd, "the output \"-\" would be a file named \"-\": this tool does not write standard output; "
                         "give a file name (./- for a file of that name)");
}

int cli_check_distinct(const char *cmd, const char *out, const char *const *inputs, int count) {
    struct stat o, in;
    if (strcmp(out, "-") == 0) {
        return dash_output(cmd);
    }
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
    /* A replaced file keeps its permission bits, not its setuid, setgid or sticky bit: the new file
     * belongs to whoever runs the tool, and a setuid root file made from user data is a hole. */
    *mode = st.st_mode & 0777;
    return 0;
}

int cli_out_open(const char *cmd, const char *path, cli_out_t *out) {
    memset(out, 0, sizeof *out);
    if (strcmp(path, "-") == 0) {
        return dash_output(cmd);
    }
    out->cleanup = -1;
    out->cmd = cmd;
    out->path = path;
    mode_t mode;
    if (output_target(cmd, path, out->target, sizeof out->target, &mode)) {
        return 1;
    }
    char dir_copy[sizeof out->target], base_copy[sizeof out->target];
    snprintf(dir_copy, sizeof dir_copy, "%s", out->target);
    snprintf(base_copy, sizeof base_copy, "%s", out->target);
    /* ".NAME.XXXXXX" is 8 bytes longer than NAME: a name of 248..255 bytes (NAME_MAX) would make one the
     * folder cannot hold, so the temporary name keeps only as much of it as fits. */
    const char *base = basename(base_copy);
    const int kept = (int)strnlen(base, NAME_MAX - 8);
    if ((size_t)snprintf(out->temp, sizeof out->temp, "%s/.%.*s.XXXXXX", dirname(dir_copy), kept, base) >=
        sizeof out->temp) {
        return cli_fail(cmd, "%s: path too long", path);
    }
    /* Held from before the file exists until it is registered: a signal in between would leave it. */
    sigset_t held;
    cli_signals_hold(&held);
    int fd = mkostemp(out->temp, O_CLOEXEC);
    int e = errno;
    out->cleanup = fd >= 0 ? cli_cleanup_add(out->temp, 0) : -1;
    cli_signals_release(&held);
    if (fd < 0) {
        out->temp[0] = '\0';
        return cli_fail(cmd, "cannot create a temporary file beside %s: %s", path, strerror(e));
    }
    if (out->cleanup < 0 || fchmod(fd, mode) != 0 || !(out->f = fdopen(fd, "wb"))) {
        int rc = cli_fail(cmd, "cannot write %s: %s", path,
                          out->cleanup < 0 ? "too many temporary files to clean up on a signal" : strerror(errno));
        close(fd);
        cli_out_abort(out);
        return rc;
    }
    return 0;
}

/* The first failure's errno is kept: errno itself is long gone (or another call's) by the time the
 * stream's error flag is read at the end. */
static void note_error(cli_out_t *out) {
    if (!out->error) {
        out->error = errno ? errno : EIO;
    }
}

void cli_out_write(cli_out_t *out, const void *data, size_t len) {
    errno = 0;
    if (fwrite(data, 1, len, out->f) != len) {
        note_error(out);
    }
}

void cli_out_printf(cli_out_t *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    if (vfprintf(out->f, fmt, ap) < 0) {
        note_error(out);
    }
    va_end(ap);
}

int cli_out_sync(cli_out_t *out) {
    if (out->synced) {
        return 0;
    }
    errno = 0;
    if (out->error || ferror(out->f) || fflush(out->f) != 0 || fsync(fileno(out->f)) != 0) {
        note_error(out); /* a write's errno when one failed before, else this flush's or fsync's */
        int rc = cli_fail(out->cmd, "cannot write %s: %s (nothing was replaced)", out->path, strerror(out->error));
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
    sigset_t held; /* renamed and forgotten as one step: the handler never unlinks the new target's name */
    cli_signals_hold(&held);
    int failed = fclose(f) != 0 || rename(out->temp, out->target) != 0, e = errno;
    if (!failed) {
        cli_cleanup_forget(out->cleanup);
        out->temp[0] = '\0';
    }
    cli_signals_release(&held);
    if (failed) {
        int rc = cli_fail(out->cmd, "cannot write %s: %s (nothing was replaced)", out->path, strerror(e));
        cli_out_abort(out);
        return rc;
    }
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
        sigset_t held;
        cli_signals_hold(&held);
        unlink(out->temp);
        cli_cleanup_forget(out->cleanup);
        out->temp[0] = '\0';
        cli_signals_release(&held);
    }
}

int cli_write_file(const char *cmd, const char *path, const void *data, size_t len) {
    cli_out_t out;
    if (cli_out_open(cmd, path, &out)) {
        return 1;
    }
    cli_out_write(&out, data, len); /* a failure is reported by the commit, with its errno */
    return cli_out_commit(&out);
}
