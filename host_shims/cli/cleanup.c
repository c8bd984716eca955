/* Temporary files and folders removed when a signal ends the tool (see cli.h).
 *
 * An interrupted `encode` used to leave its 40 MB `.OUT.XXXXXX` beside the target, and an interrupted
 * `quality` its private copy of the built-in profile in $TMPDIR. The handler of each fatal signal
 * the tool can catch removes what is registered here (files first, then folders) with unlink/rmdir
 * only, both async-signal-safe, then restores the default action and raises the signal again, so the
 * process still ends by that signal (a shell sees 130 for ^C, `timeout` its TERM). A signal the
 * process ignored when it started (nohup's HUP, a shell's `trap '' XFSZ`) stays ignored.
 *
 * Races: a path is registered with the signals held from before its creation (mkostemp, mkdtemp)
 * and forgotten with them held across its rename or removal, so the handler never sees a path
 * half-written, nor one that already names someone else's file. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* SIGKILL and SIGSTOP cannot be caught; the others end the process by default. */
static const int fatal_signals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE,
                                    SIGALRM, SIGXCPU, SIGXFSZ, SIGUSR1, SIGUSR2};
#define FATAL_COUNT (int)(sizeof fatal_signals / sizeof fatal_signals[0])

/* At most: quality's JSON output, the profile folder, its file and that file's own temporary one. */
#define CLEANUP_SLOTS 8

static struct {
    char path[CLI_CLEANUP_PATH_MAX];
    volatile sig_atomic_t state; /* 0 free, 1 file, 2 folder */
} slots[CLEANUP_SLOTS];
static int installed;

static void remove_registered(void) {
    for (int pass = 1; pass <= 2; pass++) { /* files, then the folders that held them */
        for (int i = 0; i < CLEANUP_SLOTS; i++) {
            if (slots[i].state == pass) {
                if (pass == 1) {
                    unlink(slots[i].path);
                } else {
                    rmdir(slots[i].path);
                }
                slots[i].state = 0;
            }
        }
    }
}

static void on_fatal_signal(int sig) {
    remove_registered();
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

static void install_handlers(void) {
    installed = 1;
    for (int i = 0; i < FATAL_COUNT; i++) {
        struct sigaction old, sa;
        if (sigaction(fatal_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) {
            continue; /* ignored (or handled) when we started: left as it is */
        }
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigfillset(&sa.sa_mask); /* one handler at a time */
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

void cli_signals_hold(sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < FATAL_COUNT; i++) {
        sigaddset(&set, fatal_signals[i]);
    }
    sigprocmask(SIG_BLOCK, &set, old);
}

void cli_signals_release(const sigset_t *old) {
    sigprocmask(SIG_SETMASK, old, NULL);
}

int cli_cleanup_add(const char *path, int is_folder) {
    if (!installed) {
        install_handlers();
    }
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        if (slots[i].state == 0) {
            if ((size_t)snprintf(slots[i].path, sizeof slots[i].path, "%s", path) >= sizeof slots[i].path) {
                return -1;
            }
            slots[i].state = is_folder ? 2 : 1;
            return i;
        }
    }
    return -1;
}

void cli_cleanup_forget(int slot) {
    if (slot >= 0 && slot < CLEANUP_SLOTS) {
        slots[slot].state = 0;
    }
}
