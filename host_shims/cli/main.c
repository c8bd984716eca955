/* nvfp4-mla: the command-line host of the plugin. Every subcommand reaches the plugin through the
 * C loader and the ABI table only, so whatever it shows, a runtime can call. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef NVFP4_MLA_VERSION
#define NVFP4_MLA_VERSION "0.0.0"
#endif

/* What `CMD --help` adds to a command's usage line: the input formats and every flag's meaning. */
#define CALIBRATE_HELP                                                                                           \
    "  CAPTURE  one file per rank of one capture run: lines \"layer,max_abs\" (layers 0..L-1, each once; '#'\n"  \
    "           starts a comment; blank lines allowed), or a JSON array of max_abs indexed by layer\n"           \
    "  --out FILE             the v1 scales file to write (replaced whole, only once the plugin accepts it)\n"   \
    "  --tolerance T          largest relative disagreement between ranks at any layer (default 0.05)\n"        \
    "  --envelope-with V1FILE fold an earlier v1 file in (its max_abs, else its scales x 2688)\n"               \
    "  --model M, --dataset D, --hook H, --created-utc T  printable text recorded in the file\n"               \
    "  --plugin P             the plugin that checks the file (else NVFP4_MLA_PLUGIN)\n"                        \
    "  --no-check             write the file without a plugin's check\n"
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
    const char *help; /* more for `CMD --help`, or NULL */
} commands[] = {
    {"probe", cli_probe, "probe [--plugin P] [--json] [--model-dir D] [--cache-dtype T]  load and describe a plugin", NULL},
    {"encode", cli_encode_cmd,
     "encode --layout 368|432 --mode per-token|static [--scale S] [--policy rtn|mse] [--force] IN OUT  bf16 [T,576] -> "
     "records (writer policy: rtn by default; NaN/Inf input refused unless --force)", NULL},
    {"decode", cli_decode_cmd,
     "decode --layout 368|432 --mode per-token|static [--scale S] [--force] IN OUT  records -> bf16 [T,576] (records "
     "whose s_t contradicts --mode refused unless --force; corrupt scale and RoPE fields decoded as 0, counted)", NULL},
    {"inspect", cli_inspect_cmd,
     "inspect --layout 368|432 [--tokens N] IN  scales, code statistics and corrupt fields of a record file", NULL},
    {"quality", cli_quality_cmd,
     "quality [--scales FILE] [--tokens N] [--seed S] [--policy rtn|mse] [--json FILE]  reconstruction error per layer "
     "and mode, rtn and the policy (mse by default; built-in GLM-5.2 profile by default)", NULL},
    {"calibrate", cli_calibrate_cmd,
     "calibrate --out FILE [--tolerance T] [--envelope-with V1FILE] [--model M] [--dataset D] [--hook H] "
     "[--created-utc T] [--plugin P] [--no-check] CAPTURE...  envelope of per-rank captures -> v1 scales file, "
     "checked by the plugin before it is written", CALIBRATE_HELP},
    {"demo", cli_demo_cmd,
     "demo [--scales FILE] [--policy rtn|mse]  the codec end to end on generated latents, rtn and the policy (mse by "
     "default; the README's main job; built-in profile by default)", NULL},
};

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: nvfp4-mla COMMAND [ARGS]   (nvfp4-mla --version; nvfp4-mla COMMAND --help)\n  (the plugin comes from "
        "--plugin P, else NVFP4_MLA_PLUGIN, else the one installed with this tool; each flag at most once; output "
        "files are replaced whole or not at all)\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(out, "  nvfp4-mla %s\n", commands[i].usage);
    }
}

/* What a command printed must reach its reader: a full disk (or /dev/full) under stdout is an error
 * with its cause, never exit 0 with the tables lost. */
static int check_stdout(int rc) {
    errno = 0;
    const int flush_failed = fflush(stdout) != 0;
    const int e = errno;
    if (flush_failed || ferror(stdout)) {
        fprintf(stderr, "nvfp4-mla: cannot write standard output: %s\n",
                flush_failed && e ? strerror(e) : "an earlier write to it failed");
        return rc ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : check_stdout(0);
    }
    if (strcmp(argv[1], "--version") == 0) {
        if (argc > 2) {
            fprintf(stderr, "nvfp4-mla: --version takes no argument (got \"%s\")\n", argv[2]);
            return 2;
        }
        printf("nvfp4-mla %s (host ABI %d.%d, record format %s)\n", NVFP4_MLA_VERSION, NVFP4_MLA_ABI_MAJOR,
               NVFP4_MLA_ABI_MINOR, NVFP4_MLA_RECORD_FORMAT);
        return check_stdout(0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            for (int a = 2; a < argc; a++) { /* "encode --help" asks for help, not for a value of --help */
                if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
                    printf("usage: nvfp4-mla %s\n%s", commands[i].usage, commands[i].help ? commands[i].help : "");
                    return check_stdout(0);
                }
            }
            for (int a = 2; a < argc; a++) { /* the --flag=value form, which no command reads */
                const char *eq = strncmp(argv[a], "--", 2) == 0 ? strchr(argv[a], '=') : NULL;
                if (eq && eq > argv[a] + 2) {
                    fprintf(stderr, "nvfp4-mla %s: %s: give a flag's value as the next argument: %.*s %s\n",
                            commands[i].name, argv[a], (int)(eq - argv[a]), argv[a], eq + 1);
                    return 1;
                }
            }
            return check_stdout(commands[i].run(argc - 1, argv + 1));
        }
    }
    fprintf(stderr, "nvfp4-mla: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
