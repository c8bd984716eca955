/* The C host loader (see nvfp4_mla_loader.h). */
#include "nvfp4_mla_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_digest.h"
#include "settings.h"

static int say(char *message, size_t size, int result, const char *fmt, ...) {
    if (message && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, size, fmt, ap);
        va_end(ap);
    }
    return result;
}

int nvfp4_mla_loader_writer_policy(const char *const *environ, uint32_t *policy, char *message,
                                    size_t message_size) {
    nvfp4_setting_value_t value = {0};
    char why[NVFP4_SETTING_MESSAGE_MAX];
    *policy = NVFP4_MLA_WRITER_POLICY_RTN;
    if (nvfp4_setting_read(NVFP4_SETTING_WRITER_POLICY, environ, &value, why, sizeof why)) {
        return say(message, message_size, -1, "%s", why);
    }
    *policy = (uint32_t)value.index; /* the row's names are the policies in id order */
    say(message, message_size, 0, "");
    return 0;
}

const char *nvfp4_mla_loader_cap_name(uint64_t bit) {
    return nvfp4_mla_capability_name(bit);
}

#define SELECTED -1 /* select_plugin's "go on": loader->path names the file to open */

/* Values a user may have meant as a switch; refused (when no such file exists) rather than reported
 * as a missing plugin file, because "none" alone disables the plugin. */
static int keyword_like(const char *s) {
    static const char *const words[] = {"none", "0",  "1",   "false",   "true",    "off",
                                        "on",   "no", "yes", "disable", "disabled"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strcasecmp(s, words[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int refuse(nvfp4_mla_loader_t *loader, const char *reason, int outcome, char *message, size_t size,
                  const char *text) {
    loader->reason = reason;
    return say(message, size, outcome, "%s", text);
}

/* The selection rule (plugin/settings.h for the whitespace part): unset or "" is no selection,
 * "none" disables, a folder means the plugin file inside it. */
static int select_plugin(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t size) {
    const char *name = selection ? "plugin selection" : NVFP4_MLA_PLUGIN_ENV;
    char text[NVFP4_SETTING_MESSAGE_MAX + 64], checked[sizeof loader->path - sizeof NVFP4_MLA_PLUGIN_FILE - 1];
    const int given = selection != NULL; /* the host's selection, not the variable: say which */
    selection = selection ? selection : nvfp4_setting_lookup(NULL, nvfp4_settings[NVFP4_SETTING_PLUGIN].name);
    if (!selection || !selection[0]) {
        snprintf(text, sizeof text, given ? "no nvfp4-mla plugin selected (the plugin selection is empty: give the "
                                            "plugin file or its folder)"
                                          : "no nvfp4-mla plugin selected (set %s to the plugin file or its folder)",
                 NVFP4_MLA_PLUGIN_ENV);
        return refuse(loader, NVFP4_MLA_REASON_NOT_SELECTED, NVFP4_MLA_LOAD_NOT_SELECTED, message, size, text);
    }
    if (strcmp(selection, "none") == 0) {
        snprintf(text, sizeof text, "nvfp4-mla plugin disabled (%s%s)", given ? "the plugin selection is " : "",
                 given ? "\"none\"" : NVFP4_MLA_PLUGIN_ENV "=none");
        return refuse(loader, NVFP4_MLA_REASON_DISABLED, NVFP4_MLA_LOAD_DISABLED, message, size, text);
    }
    if (nvfp4_setting_path(name, selection, checked, sizeof checked, text, sizeof text)) {
        return refuse(loader, NVFP4_MLA_REASON_INVALID_SELECTION, NVFP4_MLA_LOAD_FAILED, message, size, text);
    }
    struct stat st;
    int exists = stat(checked, &st) == 0;
    if (!exists && keyword_like(checked)) {
        char quoted[NVFP4_SETTING_QUOTED_MAX];
        nvfp4_setting_quote(checked, quoted, sizeof quoted);
        snprintf(text, sizeof text,
                 "%s=%s names no file and is not the keyword \"none\" (exactly, lower case), which disables the "
                 "plugin: give the plugin file or its folder",
                 name, quoted);
        return refuse(loader, NVFP4_MLA_REASON_INVALID_SELECTION, NVFP4_MLA_LOAD_FAILED, message, size, text);
    }
    /* A name without a slash is a file in the working folder: dlopen would search the loader's path
     * for it instead (LD_LIBRARY_PATH, ld.so.cache, /lib: "libc.so.6" loaded the system libc). */
    snprintf(loader->path, sizeof loader->path,
             exists && S_ISDIR(st.st_mode) ? "%s/" NVFP4_MLA_PLUGIN_FILE : strchr(checked, '/') ? "%s" : "./%s",
             checked);
    return SELECTED;
}

/* The first member the table's struct_size covers but leaves NULL, or NULL when all are set. A host
 * calls these without looking again, so a NULL one would crash it at address 0. */
static const char *null_member(const nvfp4_mla_plugin_t *t) {
#define NVFP4_NULL_IF_COVERED(member)                                                                    \
    if (NVFP4_MLA_TABLE_HAS(t, member) && !t->member) {                                                  \
        return #member;                                                                                  \
    }
    NVFP4_NULL_IF_COVERED(plugin_name)
    NVFP4_NULL_IF_COVERED(version)
    NVFP4_NULL_IF_COVERED(git_revision)
    NVFP4_NULL_IF_COVERED(cuda_archs)
    NVFP4_NULL_IF_COVERED(record_format)
    NVFP4_NULL_IF_COVERED(status_string)
    NVFP4_NULL_IF_COVERED(last_error)
    NVFP4_NULL_IF_COVERED(init)
    NVFP4_NULL_IF_COVERED(shutdown)
    NVFP4_NULL_IF_COVERED(context_info)
    NVFP4_NULL_IF_COVERED(config_create)
    NVFP4_NULL_IF_COVERED(config_info)
    NVFP4_NULL_IF_COVERED(config_layer_scale)
    NVFP4_NULL_IF_COVERED(config_destroy)
    NVFP4_NULL_IF_COVERED(write)
    NVFP4_NULL_IF_COVERED(gather)
    NVFP4_NULL_IF_COVERED(attend_workspace_bytes)
    NVFP4_NULL_IF_COVERED(attend)
    NVFP4_NULL_IF_COVERED(merge)
#undef NVFP4_NULL_IF_COVERED
    return t->capability_count && !t->capabilities ? "capabilities" : NULL;
}

/* Why the table is refused (and *reason, and words in `detail`), or NULL when it is usable. */
static const char *check_table(const nvfp4_mla_plugin_t *t, const char **reason, char *detail, size_t size) {
    const char *member;
    detail[0] = '\0';
    *reason = NVFP4_MLA_REASON_NOT_A_PLUGIN;
    if (!t) {
        return "its entry returned no table";
    }
    if (t->header.magic != NVFP4_MLA_ABI_MAGIC) {
        snprintf(detail, size, " (0x%08x, expected 0x%08x)", t->header.magic, NVFP4_MLA_ABI_MAGIC);
        return "wrong magic";
    }
    *reason = NVFP4_MLA_REASON_ABI_MISMATCH;
    if (t->header.abi_major != NVFP4_MLA_ABI_MAJOR) {
        snprintf(detail, size, " (plugin ABI %u.%u, host ABI %d.%d)", t->header.abi_major, t->header.abi_minor,
                 NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
        return "ABI major mismatch";
    }
    if (t->header.struct_size < NVFP4_MLA_TABLE_MIN_SIZE) {
        snprintf(detail, size, " (struct_size %u < %zu; plugin ABI %u.%u, host ABI %d.%d)", t->header.struct_size,
                 (size_t)NVFP4_MLA_TABLE_MIN_SIZE, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR,
                 NVFP4_MLA_ABI_MINOR);
        return "table too small";
    }
    if ((member = null_member(t))) {
        *reason = NVFP4_MLA_REASON_INCOMPLETE_TABLE;
        snprintf(detail, size, " \"%s\" is NULL (plugin ABI %u.%u, host ABI %d.%d; every member its struct_size %u "
                               "covers must be set)",
                 member, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                 t->header.struct_size);
        return "table member";
    }
    return NULL;
}

/* The ELF file shape of this host: dlopen maps only objects of its own class, byte order and machine. */
#if UINTPTR_MAX > 0xFFFFFFFFu
typedef Elf64_Ehdr elf_ehdr_t;
typedef Elf64_Phdr elf_phdr_t;
#define HOST_ELF_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr elf_ehdr_t;
typedef Elf32_Phdr elf_phdr_t;
#define HOST_ELF_CLASS ELFCLASS32
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_ELF_DATA ELFDATA2MSB
#else
#define HOST_ELF_DATA ELFDATA2LSB
#endif
#if defined(__x86_64__)
#define HOST_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_ELF_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_ELF_MACHINE EM_PPC64
#else
#define HOST_ELF_MACHINE EM_NONE /* another machine: not checked (dlopen still refuses a wrong one) */
#endif

#define CUT_SHORT "(cut short: an interrupted copy or a full disk?)"

/* Why `path` is not an ELF shared object dlopen can map whole, in `why`, or 0 when it is (or when it
 * cannot be opened: dlopen then says why, and the loader tells a missing file apart). dlopen maps a
 * file cut short (an interrupted copy, a full disk at install time) as if it were whole, and the first
 * touch of a page past its end raises SIGBUS inside dlopen: the host dies. So the file is read first:
 * a regular file; the ELF header of this host's class, byte order, machine and type ET_DYN; the
 * program headers, every loadable segment's bytes and the section header table inside the file. The
 * Python loader makes the same checks in the same words (nvfp4_mla/loader.py, _check_elf). */
static int check_elf(const char *path, char *why, size_t size) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* O_NONBLOCK: a FIFO must not block */
    struct stat st;
    if (fd < 0) {
        return 0;
    }
    elf_ehdr_t eh;
    int bad = 1;
    const long long file = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
    const unsigned long long end = (unsigned long long)file;
    if (file < 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, size, "it is not a regular file");
    } else if (file < (long long)sizeof eh || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) {
        snprintf(why, size, "the file is %lld bytes, less than the %zu of an ELF header " CUT_SHORT, file,
                 sizeof eh);
    } else if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        snprintf(why, size, "not an ELF file (it does not start with \\x7fELF)");
    } else if (eh.e_ident[EI_CLASS] != HOST_ELF_CLASS) {
        snprintf(why, size, "a %s ELF file; this host is %s", eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "64-bit",
                 HOST_ELF_CLASS == ELFCLASS32 ? "32-bit" : "64-bit");
    } else if (eh.e_ident[EI_DATA] != HOST_ELF_DATA) {
        snprintf(why, size, "an ELF file of the other byte order (EI_DATA %u; this host's is %u)", eh.e_ident[EI_DATA],
                 HOST_ELF_DATA);
    } else if (eh.e_type != ET_DYN) {
        snprintf(why, size, "an ELF file of type %u, not a shared object (ET_DYN, 3)", eh.e_type);
    } else if (HOST_ELF_MACHINE != EM_NONE && eh.e_machine != HOST_ELF_MACHINE) {
        snprintf(why, size, "an ELF file for machine %u; this host is machine %u", eh.e_machine, HOST_ELF_MACHINE);
    } else if (eh.e_phentsize != sizeof(elf_phdr_t)) {
        snprintf(why, size, "an ELF file whose program headers are %u bytes each, not %zu", eh.e_phentsize,
                 sizeof(elf_phdr_t));
    } else if (eh.e_phoff > end || (end - eh.e_phoff) / sizeof(elf_phdr_t) < eh.e_phnum) {
        snprintf(why, size, "its program headers end at byte %llu, past the end of the %lld-byte file " CUT_SHORT,
                 (unsigned long long)eh.e_phoff + (unsigned long long)eh.e_phnum * sizeof(elf_phdr_t), file);
    } else {
        bad = 0;
        for (unsigned i = 0; i < eh.e_phnum && !bad; i++) {
            elf_phdr_t ph;
            bad = pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph;
            if (bad) {
                snprintf(why, size, "its program header %u cannot be read", i);
            } else if (ph.p_type == PT_LOAD && (ph.p_offset > end || end - ph.p_offset < ph.p_filesz)) {
                bad = 1;
                snprintf(why, size, "its loadable segment (program header %u) ends at byte %llu, past the end of the "
                                    "%lld-byte file " CUT_SHORT,
                         i, (unsigned long long)ph.p_offset + (unsigned long long)ph.p_filesz, file);
            }
        }
        /* Not mapped by dlopen, but a table past the end is the same short file (it is written last). */
        if (!bad && eh.e_shoff &&
            (eh.e_shoff > end || (end - eh.e_shoff) / (eh.e_shentsize ? eh.e_shentsize : 1) < (eh.e_shnum ? eh.e_shnum : 1u))) {
            bad = 1;
            snprintf(why, size, "its section headers end at byte %llu, past the end of the %lld-byte file " CUT_SHORT,
                     (unsigned long long)eh.e_shoff + (unsigned long long)eh.e_shnum * eh.e_shentsize, file);
        }
    }
    close(fd);
    return bad;
}

/* Outcomes of check_digest. */
#define DIGEST_MATCHES 0
#define DIGEST_REFUSED 1
#define DIGEST_ABSENT 2

/* The 64 hex digits at the start of the digest file `sidecar` (sha256sum's line: digits, then blanks and
 * the file's name, which is not compared: a renamed copy keeps its digest) into `hex`; 0, else 1 with
 * the reason in `why`, or DIGEST_ABSENT when there is no such file. */
static int read_recorded_digest(const char *sidecar, char hex[NVFP4_SHA256_HEX + 1], char *why, size_t size) {
    char text[NVFP4_SHA256_HEX + 2] = "";
    struct stat st;
    const int fd = open(sidecar, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT ? DIGEST_ABSENT
                               : say(why, size, DIGEST_REFUSED, "cannot read its digest file %s: %s", sidecar, strerror(errno));
    }
    const int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const ssize_t got = regular ? pread(fd, text, sizeof text - 1, 0) : -1;
    close(fd);
    if (!regular) {
        return say(why, size, DIGEST_REFUSED, "its digest file %s is not a regular file", sidecar);
    }
    size_t digits = 0;
    while (digits < NVFP4_SHA256_HEX && text[digits] && strchr("0123456789abcdefABCDEF", text[digits])) {
        hex[digits] = (char)(text[digits] | 0x20); /* lower case */
        digits++;
    }
    hex[NVFP4_SHA256_HEX] = '\0';
    if (digits < NVFP4_SHA256_HEX || (got > NVFP4_SHA256_HEX && !strchr(" \t\r\n", text[NVFP4_SHA256_HEX]))) {
        return say(why, size, DIGEST_REFUSED,
                   "its digest file %s does not start with the file's SHA-256 (64 hex digits, as sha256sum writes it): "
                   "record it again with sha256sum, or remove the digest file",
                   sidecar);
    }
    return 0;
}

/* A corrupted plugin file (a damaged dynamic section, bogus relocations: bytes changed in place, not cut
 * short) crashes the host inside dlopen, which trusts what it maps. The build and `meson install`
 * record the file's SHA-256 beside it (libnvfp4_mla.so.sha256, sha256sum's format): when that file is
 * there, the plugin must match it before dlopen sees a byte; when it is not, trial_load loads it in a
 * child process first (docs/integration.md section 2 says why both). */
static int check_digest(const char *path, char *why, size_t size) {
    char sidecar[sizeof((nvfp4_mla_loader_t *)0)->path + 16], recorded[NVFP4_SHA256_HEX + 1], actual[NVFP4_SHA256_HEX + 1];
    snprintf(sidecar, sizeof sidecar, "%s.sha256", path);
    const int got = read_recorded_digest(sidecar, recorded, why, size);
    if (got != 0) {
        return got;
    }
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || nvfp4_sha256_file(fd, actual) != 0) {
        const int err = errno;
        if (fd >= 0) {
            close(fd);
        }
        return say(why, size, DIGEST_REFUSED, "cannot read it to check its digest: %s", strerror(err));
    }
    close(fd);
    if (strcmp(recorded, actual) != 0) {
        return say(why, size, DIGEST_REFUSED,
                   "its SHA-256 is %s, not the %s recorded in %s when it was built or installed: the file changed "
                   "since (damaged on disk or in a copy?); reinstall it, or, after a deliberate change such as "
                   "strip, record it again (sha256sum FILE > FILE.sha256)",
                   actual, recorded, sidecar);
    }
    return DIGEST_MATCHES;
}

/* A plugin without a digest file is dlopen()ed in a forked child first, which exits at once: a file
 * that kills the process that loads it (a signal, or the dynamic loader's own assertion, exit 127)
 * kills the child, and the host refuses it. glibc's fork resets the dynamic loader's and malloc's locks
 * in the child, so this is sound in a threaded host; the child resets the fatal signals to their
 * default actions (a host's handler, Python's faulthandler, must not catch the crash) and _exit()s
 * without running the host's exit handlers. 0 when the child loaded it or dlopen refused it (the host's
 * own dlopen then says why), else 1 and `why`. */
static int trial_load(const char *path, char *why, size_t size) {
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGALRM};
    const pid_t pid = fork();
    if (pid < 0) {
        return say(why, size, 1, "it has no digest file (%s.sha256), and it cannot be loaded in a child process first "
                                 "(fork: %s)", path, strerror(errno));
    }
    if (pid == 0) {
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
            signal(fatal[i], SIG_DFL);
        }
        alarm(60); /* a load that hangs ends the child, not the host's wait */
        _exit(dlopen(path, RTLD_NOW | RTLD_LOCAL) ? 0 : 3);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            return say(why, size, 1, "it has no digest file (%s.sha256), and the child process that loads it first "
                                     "cannot be waited for (waitpid: %s; is SIGCHLD ignored?)", path, strerror(errno));
        }
    }
    if (WIFSIGNALED(status)) {
        return say(why, size, 1, "loading it in a child process first (it has no digest file %s.sha256) killed that "
                                 "process with signal %d (%s): the file is damaged (its dynamic section or relocations?); "
                                 "the host did not load it",
                   path, WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3) {
        return say(why, size, 1, "loading it in a child process first (it has no digest file %s.sha256) ended that "
                                 "process with exit status %d (127: the dynamic loader stopped on an inconsistency): the "
                                 "file is damaged; the host did not load it",
                   path, WEXITSTATUS(status));
    }
    return 0;
}

int nvfp4_mla_loader_open(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t size) {
    memset(loader, 0, sizeof *loader);
    int selected = select_plugin(loader, selection, message, size);
    if (selected != SELECTED) {
        return selected;
    }
    char why[3 * sizeof loader->path];
    if (check_elf(loader->path, why, sizeof why)) {
        loader->reason = NVFP4_MLA_REASON_LOAD_ERROR;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "cannot load nvfp4-mla plugin %s: %s", loader->path, why);
    }
    const int digest = check_digest(loader->path, why, sizeof why);
    if (digest == DIGEST_REFUSED || (digest == DIGEST_ABSENT && access(loader->path, F_OK) == 0 && trial_load(loader->path, why, sizeof why))) {
        loader->reason = NVFP4_MLA_REASON_LOAD_ERROR;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "cannot load nvfp4-mla plugin %s: %s", loader->path, why);
    }
    void *handle = dlopen(loader->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        struct stat st;
        int missing = stat(loader->path, &st) != 0 && errno == ENOENT; /* loader->path always holds a '/' */
        loader->reason = missing ? NVFP4_MLA_REASON_NOT_FOUND : NVFP4_MLA_REASON_LOAD_ERROR;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "cannot load nvfp4-mla plugin %s: %s", loader->path,
                   why ? why : "unknown dlopen error");
    }
    void *symbol = dlsym(handle, NVFP4_MLA_ENTRY_SYMBOL);
    nvfp4_mla_entry_fn entry = NULL;
    memcpy(&entry, &symbol, sizeof entry); /* POSIX: a data pointer from dlsym names a function */
    if (!symbol) {
        int other_major = dlsym(handle, "nvfp4_mla_plugin_v2") != NULL;
        dlclose(handle);
        loader->reason = other_major ? NVFP4_MLA_REASON_ABI_MISMATCH : NVFP4_MLA_REASON_NOT_A_PLUGIN;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin %s does not export %s (host ABI %d.%d)%s",
                   loader->path, NVFP4_MLA_ENTRY_SYMBOL, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                   other_major ? "; it implements ABI major 2 only: upgrade the host"
                               : "; it is not an nvfp4-mla plugin");
    }
    const nvfp4_mla_plugin_t *t = entry();
    char detail[256];
    const char *reason, *refusal = check_table(t, &reason, detail, sizeof detail);
    if (refusal) {
        dlclose(handle);
        loader->reason = reason;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin %s refused: %s%s", loader->path, refusal,
                   detail);
    }
    loader->handle = handle;
    loader->table = t;
    loader->reason = NVFP4_MLA_REASON_NONE;
    return say(message, size, NVFP4_MLA_LOAD_OK, "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) loaded",
               loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
}

void nvfp4_mla_loader_close(nvfp4_mla_loader_t *loader) {
    if (loader->handle) {
        dlclose(loader->handle);
    }
    loader->handle = NULL;
    loader->table = NULL;
}

uint64_t nvfp4_mla_requirement_caps(const nvfp4_mla_requirement_t *want) {
    const uint64_t ops = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND;
    const uint64_t called = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | (want->extra_caps & ops);
    return nvfp4_mla_caps_needed(called, want->layout, want->scale_mode) | want->extra_caps;
}

uint64_t nvfp4_mla_loader_table_caps(const nvfp4_mla_loader_t *loader) {
    const nvfp4_mla_plugin_t *t = loader->table;
    if (!t) {
        return 0;
    }
    uint64_t bits = t->capability_bits;
    if (!NVFP4_MLA_TABLE_HAS(t, write)) {
        bits &= ~NVFP4_MLA_CAP_OP_WRITE;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, gather)) {
        bits &= ~NVFP4_MLA_CAP_OP_GATHER;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, attend)) {
        bits &= ~NVFP4_MLA_CAP_OP_ATTEND;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, merge)) {
        bits &= ~NVFP4_MLA_CAP_OP_MERGE_PARTIALS;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        bits &= ~NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY;
    }
    return bits;
}

/* What no plugin serves whatever its capability bits say (the record rule, nvfp4_mla_layout_has_mode):
 * a layout or scale mode with no NVFP4_MLA_* name, per-token scales on a record without the s_t field.
 * 1 and words in `why`, or 0 when the pair is one the record format has. */
static int unservable(const nvfp4_mla_requirement_t *want, char *why, size_t size) {
    if (!nvfp4_mla_record_bytes(want->layout)) {
        return say(why, size, 1, "cannot serve layout %u: no such layout (NVFP4_MLA_LAYOUT_*: 1 fp8_rope_368, "
                                 "2 bf16_rope_432, 3 fp8_ds_mla_656)", want->layout);
    }
    if (want->scale_mode != NVFP4_MLA_SCALE_STATIC && want->scale_mode != NVFP4_MLA_SCALE_PER_TOKEN) {
        return say(why, size, 1, "cannot serve scale mode %u on %s: no such mode (NVFP4_MLA_SCALE_*: 1 static, "
                                 "2 per-token)", want->scale_mode, nvfp4_mla_layout_name(want->layout));
    }
    if (!nvfp4_mla_layout_has_mode(want->layout, want->scale_mode)) {
        return say(why, size, 1, "cannot serve per-token scales on %s: only fp8_rope_368 records carry the "
                                 "per-token scale s_t (per-token needs KV_FP8_ROPE=1's layout)",
                   nvfp4_mla_layout_name(want->layout));
    }
    return 0;
}

int nvfp4_mla_loader_require(const nvfp4_mla_loader_t *loader, const nvfp4_mla_requirement_t *want, uint64_t available,
                             char *message, size_t size) {
    const nvfp4_mla_plugin_t *t = loader->table;
    char why[256];
    if (!t) {
        return say(message, size, -1, "no nvfp4-mla plugin is loaded");
    }
    if (unservable(want, why, sizeof why)) {
        return say(message, size, -1, "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) %s", loader->path,
                   t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR, why);
    }
    uint64_t missing = nvfp4_mla_requirement_caps(want) & ~available;
    const char *mode = want->scale_mode == NVFP4_MLA_SCALE_PER_TOKEN ? "per-token" : "static";
    const char *layout = nvfp4_mla_layout_name(want->layout);
    if (!missing) {
        return say(message, size, 0, "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) serves %s scales on %s",
                   loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                   mode, layout);
    }
    char names[512] = "";
    size_t used = 0;
    for (int b = 0; b < 64; b++) {
        uint64_t bit = UINT64_C(1) << b;
        if ((missing & bit) && used < sizeof names) {
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                                     nvfp4_mla_loader_cap_name(bit));
        }
    }
    return say(message, size, -1,
               "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) cannot serve %s scales on %s%s: missing %s",
               loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR, mode,
               layout, want->user_requested ? " (requested by the configuration)" : "", names);
}

int nvfp4_mla_loader_cache_identity(const nvfp4_mla_loader_t *loader, const char *cache_dtype, const char *model_dir,
                                    char *identity, size_t size) {
    const nvfp4_mla_plugin_t *t = loader->table;
    if (!t || !NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        return say(identity, size, -1, "no nvfp4-mla plugin with a cache configuration is loaded");
    }
    nvfp4_mla_config_request_t req = {sizeof req, 0, cache_dtype, model_dir, NULL, NULL, {0}};
    nvfp4_mla_config_t *cfg = NULL;
    if (t->config_create(&req, &cfg) != NVFP4_MLA_OK) {
        return say(identity, size, -1, "%s", t->last_error());
    }
    nvfp4_mla_config_info_t info = {.struct_size = sizeof info};
    int rc = t->config_info(cfg, &info) == NVFP4_MLA_OK ? say(identity, size, 0, "%s", info.identity)
                                                        : say(identity, size, -1, "%s", t->last_error());
    t->config_destroy(cfg);
    return rc;
}
