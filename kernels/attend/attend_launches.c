/* The eager attend calls' launch table (attend_launches.h). */
#include "attend_launches.h"

#include <stddef.h>
#include <string.h>

/* Keys compare with memcmp, which reads padding bytes too: the struct must have none, or two equal calls
 * could differ in bytes no field owns. Its fields are 8 pointers and 14 int64 (8 bytes each), 8 four-byte
 * fields, 2 int16 and an int32. */
_Static_assert(sizeof(nvfp4_mla_attend_kernel_args_t) == 8 * 8 + 8 + 14 * 8 + 8 * 4 + 2 * 2 + 4,
               "nvfp4_mla_attend_kernel_args_t has padding: attend_launch_find's memcmp would compare it");

static int same_call(const nvfp4_mla_attend_kernel_args_t *a, const nvfp4_mla_attend_kernel_args_t *b) {
    /* The pointers that differ between a model's calls first: most misses end at one comparison. */
    return a->q == b->q && a->out == b->out && memcmp(a, b, sizeof *a) == 0;
}

attend_launch_entry *attend_launch_find(nvfp4_attend_launches_t *t, const nvfp4_mla_attend_kernel_args_t *key) {
    t->clock++;
    for (int32_t i = 0; i < t->used; i++) {
        attend_launch_entry *e = &t->entries[i];
        if (same_call(&e->key, key)) {
            /* Saturates: only counts up to ATT_LAUNCH_BUILD_AT matter, and a key called every step of a
             * server that runs for weeks would pass INT32_MAX (25 days at 1000 calls a second), an
             * overflow C leaves undefined. */
            if (e->calls < INT32_MAX) e->calls++;
            e->last_use = t->clock;
            return e;
        }
    }
    return NULL;
}

attend_launch_entry *attend_launch_add(nvfp4_attend_launches_t *t, const nvfp4_mla_attend_kernel_args_t *key,
                                       void (*release)(void *graph)) {
    attend_launch_entry *slot = NULL;
    if (t->used < ATT_LAUNCH_ENTRIES) {
        slot = &t->entries[t->used++];
    } else {
        slot = &t->entries[0];
        for (int32_t i = 1; i < ATT_LAUNCH_ENTRIES; i++)
            if (t->entries[i].last_use < slot->last_use) slot = &t->entries[i];
        if (slot->graph) release(slot->graph);
    }
    memset(slot, 0, sizeof *slot);
    memcpy(&slot->key, key, sizeof *key);
    slot->calls = 1;
    slot->last_use = t->clock; /* the clock of the call's find */
    return slot;
}

void attend_launch_clear(nvfp4_attend_launches_t *t, void (*release)(void *graph)) {
    for (int32_t i = 0; i < t->used; i++)
        if (t->entries[i].graph) release(t->entries[i].graph);
    memset(t->entries, 0, sizeof t->entries);
    t->used = 0;
}
