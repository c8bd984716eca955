// Compiled with -std=c++17 -Wall -Wextra -pedantic -Werror: the public header stands alone in C++.
#include "nvfp4_mla.h"

static_assert(sizeof(nvfp4_mla_header_t) == 16, "frozen header is 16 bytes");

int main() {
    nvfp4_mla_write_args_t args{};
    args.struct_size = sizeof args;
    return args.struct_size > 0 ? 0 : 1;
}
