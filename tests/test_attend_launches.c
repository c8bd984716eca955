/* The eager attend calls' launch table (kernels/attend/attend_launches.h), on the CPU with fake graph
 * handles: a struct's first call gets a new entry, its repeats the same one, any byte of the key makes
 * another, a struct the table lacks is not added by looking for it, and a full table replaces its least
 * recently used entry, releasing that entry's graph. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attend/attend_launches.h"

static int released;      /* release() calls */
static void *last_freed;  /* release()'s last argument */

static void release(void *graph) {
    released++;
    last_freed = graph;
}

/* A decode call's arguments; `layer` tells the layers' calls apart by their cache and q, as a model's do. */
static nvfp4_mla_attend_kernel_args_t call_of(uintptr_t layer) {
    nvfp4_mla_attend_kernel_args_t a;
    memset(&a, 0, sizeof a);
    a.q = (const uint16_t *)(0x10000 + layer * 0x1000);
    a.out = (uint16_t *)(0x20000 + layer * 0x1000);
    a.cache = (const uint8_t *)(0x40000000 + layer * 0x100000);
    a.slots = (const int32_t *)0x30000;
    a.stream = (void *)0x77;
    a.num_queries = 8, a.num_heads = 128, a.topk = 2048, a.record_bytes = 368, a.sm_scale = 0.0417f;
    return a;
}

/* A call as attend_cuda.cu makes it when its checks pass: its entry, else a new one. */
static attend_launch_entry *lookup(nvfp4_attend_launches_t *t, const nvfp4_mla_attend_kernel_args_t *key) {
    attend_launch_entry *e = attend_launch_find(t, key);
    return e ? e : attend_launch_add(t, key, release);
}

static nvfp4_attend_launches_t *new_table(void) {
    released = 0, last_freed = NULL;
    nvfp4_attend_launches_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    return t;
}

static void lookup_should_count_the_calls_of_one_struct(void **state) {
    (void)state;
    nvfp4_attend_launches_t *t = new_table();
    const nvfp4_mla_attend_kernel_args_t a = call_of(0);
    attend_launch_entry *first = lookup(t, &a);
    assert_int_equal(first->calls, 1);
    assert_null(first->graph);
    assert_int_equal(first->no_graph, 0);
    first->graph = (void *)0xA1; /* what attend_cuda.cu does at call ATT_LAUNCH_BUILD_AT */
    nvfp4_mla_attend_kernel_args_t same = call_of(0);
    attend_launch_entry *again = lookup(t, &same);
    assert_ptr_equal(again, first);
    assert_int_equal(again->calls, 2);
    assert_ptr_equal(again->graph, (void *)0xA1);
    assert_int_equal(t->used, 1);
    attend_launch_clear(t, release);
    assert_int_equal(released, 1);
    assert_ptr_equal(last_freed, (void *)0xA1);
    assert_int_equal(t->used, 0);
    free(t);
}

/* A key called past INT32_MAX times keeps its count there (a signed overflow would be undefined) and its
 * graph. */
static void lookup_should_saturate_the_call_count(void **state) {
    (void)state;
    nvfp4_attend_launches_t *t = new_table();
    const nvfp4_mla_attend_kernel_args_t a = call_of(0);
    attend_launch_entry *e = lookup(t, &a);
    e->graph = (void *)0xC0;
    e->calls = INT32_MAX - 1;
    assert_int_equal(lookup(t, &a)->calls, INT32_MAX);
    attend_launch_entry *again = lookup(t, &a);
    assert_ptr_equal(again, e);
    assert_int_equal(again->calls, INT32_MAX);
    assert_ptr_equal(again->graph, (void *)0xC0);
    attend_launch_clear(t, release);
    free(t);
}

/* Every field is part of the key: a call that differs in any byte is another call (its graph would
 * launch the old pointers, rows or scale). */
static void lookup_should_tell_apart_structs_that_differ_in_any_byte(void **state) {
    (void)state;
    nvfp4_attend_launches_t *t = new_table();
    const nvfp4_mla_attend_kernel_args_t a = call_of(0);
    for (size_t byte = 0; byte < sizeof a; byte++) {
        attend_launch_clear(t, release);
        attend_launch_entry *base = lookup(t, &a);
        base->graph = (void *)0xB0;
        nvfp4_mla_attend_kernel_args_t b = a;
        ((unsigned char *)&b)[byte] ^= 0x01;
        attend_launch_entry *e = lookup(t, &b);
        assert_ptr_not_equal(e, base);
        assert_int_equal(e->calls, 1);
        assert_null(e->graph);
        assert_int_equal(t->used, 2);
    }
    assert_int_equal(released, (int)sizeof a - 1); /* each round's base graph, released by the next clear */
    attend_launch_entry *base = lookup(t, &a);
    assert_int_equal(base->calls, 2);
    /* The examples an engine meets: another stream, another out, another row count, another scale. */
    nvfp4_mla_attend_kernel_args_t b = a;
    b.stream = (void *)0x78;
    assert_ptr_not_equal(lookup(t, &b), base);
    b = a, b.num_queries = 7;
    assert_ptr_not_equal(lookup(t, &b), base);
    b = a, b.sm_scale = 0.05f;
    assert_ptr_not_equal(lookup(t, &b), base);
    attend_launch_clear(t, release);
    free(t);
}

/* A model's layers in turn: up to ATT_LAUNCH_ENTRIES structs keep their graphs; one more replaces the
 * least recently used (the first layer here), whose graph is released, not leaked. */
static void full_table_should_replace_the_least_recently_used_entry(void **state) {
    (void)state;
    nvfp4_attend_launches_t *t = new_table();
    for (uintptr_t layer = 0; layer < ATT_LAUNCH_ENTRIES; layer++) {
        const nvfp4_mla_attend_kernel_args_t a = call_of(layer);
        attend_launch_entry *e = lookup(t, &a);
        assert_int_equal(e->calls, 1);
        e->graph = (void *)(0x1000 + layer);
    }
    assert_int_equal(t->used, ATT_LAUNCH_ENTRIES);
    assert_int_equal(released, 0);
    /* Layer 0 called again: now layer 1 is the least recently used. */
    const nvfp4_mla_attend_kernel_args_t l0 = call_of(0);
    assert_int_equal(lookup(t, &l0)->calls, 2);
    const nvfp4_mla_attend_kernel_args_t extra = call_of(ATT_LAUNCH_ENTRIES);
    attend_launch_entry *e = lookup(t, &extra);
    assert_int_equal(released, 1);
    assert_ptr_equal(last_freed, (void *)0x1001);
    assert_int_equal(e->calls, 1);
    assert_null(e->graph);
    assert_int_equal(t->used, ATT_LAUNCH_ENTRIES);
    /* Layer 0 kept its entry and graph; layer 1 starts over. */
    attend_launch_entry *k0 = lookup(t, &l0);
    assert_int_equal(k0->calls, 3);
    assert_ptr_equal(k0->graph, (void *)0x1000);
    const nvfp4_mla_attend_kernel_args_t l1 = call_of(1);
    attend_launch_entry *k1 = lookup(t, &l1);
    assert_int_equal(k1->calls, 1);
    assert_null(k1->graph);
    assert_int_equal(released, 2); /* layer 2, now the least recent, made room for layer 1 */
    assert_ptr_equal(last_freed, (void *)0x1002);
    attend_launch_clear(t, release);
    assert_int_equal(released, 2 + ATT_LAUNCH_ENTRIES - 2); /* every graph still held: 128 less the new two */
    free(t);
}

/* Looking a struct up adds nothing: a call that fails the launcher's checks after its find (the find
 * comes first, so that a built graph launches before any check) leaves the table as it was, and no
 * entry is made room for. */
static void find_should_leave_the_table_alone_for_a_struct_it_lacks(void **state) {
    (void)state;
    nvfp4_attend_launches_t *t = new_table();
    for (uintptr_t layer = 0; layer < ATT_LAUNCH_ENTRIES; layer++) {
        const nvfp4_mla_attend_kernel_args_t a = call_of(layer);
        lookup(t, &a)->graph = (void *)(0x1000 + layer);
    }
    const nvfp4_mla_attend_kernel_args_t other = call_of(ATT_LAUNCH_ENTRIES);
    assert_null(attend_launch_find(t, &other));
    assert_null(attend_launch_find(t, &other));
    assert_int_equal(t->used, ATT_LAUNCH_ENTRIES);
    assert_int_equal(released, 0);
    const nvfp4_mla_attend_kernel_args_t l0 = call_of(0);
    attend_launch_entry *e = attend_launch_find(t, &l0);
    assert_non_null(e);
    assert_int_equal(e->calls, 2);
    assert_ptr_equal(e->graph, (void *)0x1000);
    attend_launch_clear(t, release);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lookup_should_count_the_calls_of_one_struct),
        cmocka_unit_test(lookup_should_saturate_the_call_count),
        cmocka_unit_test(lookup_should_tell_apart_structs_that_differ_in_any_byte),
        cmocka_unit_test(full_table_should_replace_the_least_recently_used_entry),
        cmocka_unit_test(find_should_leave_the_table_alone_for_a_struct_it_lacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
