/* Capability names for messages (see capabilities.h); the table of compiled capabilities with
 * their revisions lives beside the table in entry.c. */
#include "capabilities.h"

const char *nvfp4_capability_name(uint64_t bit) {
#define NVFP4_NAME_OF(b, name)                                                                                 \
    if (bit == (b)) {                                                                                          \
        return name;                                                                                           \
    }
    NVFP4_MLA_FOR_EACH_CAPABILITY(NVFP4_NAME_OF)
#undef NVFP4_NAME_OF
    return "unknown";
}
