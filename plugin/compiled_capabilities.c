/* Build step: prints the entries of the plugin's table of compiled capabilities (entry.c includes
 * the output), one per capability of NVFP4_CAPS_COMPILED, in bit order, with the header's name
 * (NVFP4_MLA_FOR_EACH_CAPABILITY) and this build's revision. Generated rather than written out so
 * that no capability name is spelled a second time, and so that a build without CUDA lists no CUDA
 * capability (a static initializer cannot leave entries out). */
#include <stdio.h>

#include "capabilities.h"

int main(void) {
    printf("/* Generated at build time by plugin/compiled_capabilities.c: do not edit. */\n");
#define NVFP4_PRINT_IF_COMPILED(bit, name)                                                               \
    if (NVFP4_CAPS_COMPILED & (bit)) {                                                                   \
        printf("    {\"%s\", %uu, 0u, UINT64_C(0x%llx)},\n", name, NVFP4_CAP_REVISION(bit),                 \
               (unsigned long long)(bit));                                                               \
    }
    NVFP4_MLA_FOR_EACH_CAPABILITY(NVFP4_PRINT_IF_COMPILED)
#undef NVFP4_PRINT_IF_COMPILED
    return 0;
}
