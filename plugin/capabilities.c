/* Capability names for messages (see capabilities.h); the table of compiled capabilities with
 * their revisions lives beside the table in entry.c. */
#include "capabilities.h"

const char *nvfp4_capability_name(uint64_t bit) {
    return nvfp4_mla_capability_name(bit);
}
