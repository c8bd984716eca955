/* nvfp4-mla bench without CUDA: the benchmark measures GPU kernels against GPU ceilings, so a
 * CPU-only build says so instead of printing CPU figures that nobody asked for. */
#include "cli.h"

int cli_bench_cmd(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("bench", "this build has no CUDA backend (configure with -Dcuda=enabled on a machine with nvcc)");
}
