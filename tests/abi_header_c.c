/* Compiled with -std=c11 -Wall -Wextra -pedantic -Werror: the public header stands alone in C11. */
#include "nvfp4_mla.h"

_Static_assert(sizeof(nvfp4_mla_header_t) == 16, "frozen header is 16 bytes");
_Static_assert(offsetof(nvfp4_mla_plugin_t, header) == 0, "the header leads the table");
_Static_assert(sizeof(nvfp4_mla_tensor_t) == 88, "tensor descriptor layout");

int main(void) {
    return NVFP4_MLA_TABLE_MIN_SIZE > 0 ? 0 : 1;
}
