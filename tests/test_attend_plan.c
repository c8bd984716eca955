/* The attention launch's plan (kernels/attend/attend_plan.c), on the host, without a GPU: the table
 * tests/data/attend_plan.tsv (kind, instantiation, heads a group, splits, tiles a split, grid, ring,
 * shared-memory map, cluster, workspace bytes for each device and call shape, computed by the plan
 * before it left attend_cuda.cu), the limits every plan keeps over a sweep of shapes, and the
 * refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attend/attend_plan.h"

static const char *const kind_names[KIND_COUNT] = {"n16_sync", "n32_sync", "n16_wgmma", "n32_wgmma", "wide"};
static const char *const variant_names[VARIANT_COUNT] = {"plain", "merge_in_launch", "row_q"};
static const char *const flow_names[] = {"streaming", "resident", "overlapped"};
static const char *const schedule_names[SCHEDULE_COUNT] = {"narrow_sync", "narrow_wgmma", "wide_twobuf", "wide_ring"};

/* A call of nq queries x h heads over top-k entries on a device, as the plugin lowers it. */
static nvfp4_mla_attend_kernel_args_t call_on(int arch, int sms, int smem, int sync, int quads, int rb, int64_t nq,
                                             int64_t h, int64_t topk) {
    nvfp4_mla_attend_kernel_args_t a = {0};
    a.num_queries = nq, a.num_heads = h, a.topk = topk;
    a.record_bytes = rb, a.block_size = 64, a.block_stride = 64 * rb;
    a.sm_count = sms, a.smem_per_block = smem, a.arch = arch;
    a.force_mma_sync = (int16_t)sync, a.merge_mode = NVFP4_ATTEND_MERGE_AUTO, a.quad_clusters = quads;
    return a;
}

/* The table's columns after the call's: the plan as the file spells it. */
static void plan_row(const nvfp4_mla_attend_kernel_args_t *a, char *out, size_t size) {
    const attend_plan p = attend_plan_for(a);
    if (!p.bytes) {
        snprintf(out, size, "no plan");
        return;
    }
    snprintf(out, size,
             "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%lld\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%llu",
             kind_names[attend_kind_of(&p)], variant_names[attend_variant_of(&p)], p.heads, p.groups, p.splits,
             p.tiles_per_split, p.grid, (long long)p.items, p.stages, p.ring_blocks, flow_names[p.flow],
             schedule_names[p.schedule], p.threads, p.bytes, p.one_launch, attend_placement_cluster(a, &p), p.off_q,
             p.off_p, p.off_ring, p.off_raw, p.off_valid, p.off_meta, p.off_red, p.off_bar,
             (unsigned long long)attend_workspace_of(a, &p));
}

/* Every row of the table for `device`, against the plan made now; returns the rows checked. */
static int check_table(const char *device) {
    char path[4096], line[1024], want[512], got[512];
    const char *data = getenv("NVFP4_MLA_TEST_DATA"); /* tests/data: meson test sets it */
    assert_non_null(data);
    snprintf(path, sizeof path, "%s/attend_plan.tsv", data);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    const char *out_path = getenv("NVFP4_MLA_PLAN_TABLE_OUT");
    FILE *out = out_path ? fopen(out_path, "a") : NULL;
    int rows = 0, wrong = 0;
    while (fgets(line, sizeof line, f)) {
        char name[32], merge[16];
        int arch, sms, smem, sync, quads, rb, used = 0;
        long long nq, h, topk;
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        assert_int_equal(sscanf(line, "%31s %d %d %d %d %d %d %lld %lld %lld %15s %n", name, &arch, &sms, &smem, &sync,
                                &quads, &rb, &nq, &h, &topk, merge, &used),
                         11);
        if (strcmp(name, device) != 0) continue;
        assert_string_equal(merge, "auto");
        const nvfp4_mla_attend_kernel_args_t a = call_on(arch, sms, smem, sync, quads, rb, nq, h, topk);
        snprintf(want, sizeof want, "%s", line + used);
        plan_row(&a, got, sizeof got);
        if (out) fprintf(out, "%.*s%s\n", used, line, got);
        if (strcmp(want, got) != 0 && wrong++ < 10)
            fprintf(stderr, "%s rb %d nq %lld h %lld:\n  table %s\n  now   %s\n", device, rb, nq, h, want, got);
        rows++;
    }
    fclose(f);
    if (out) fclose(out);
    assert_int_equal(wrong, 0);
    return rows;
}

static void attend_plan_should_match_its_table_on_the_h200(void **state) {
    (void)state;
    assert_int_equal(check_table("h200"), 3 * 15 * 4);
}

static void attend_plan_should_match_its_table_under_the_99_kb_cap(void **state) {
    (void)state;
    assert_int_equal(check_table("h200_cap99"), 3 * 15 * 4);
}

static void attend_plan_should_match_its_table_with_the_mma_sync_kinds(void **state) {
    (void)state;
    assert_int_equal(check_table("h200_sync"), 3 * 5 * 4);
    assert_int_equal(check_table("sm120_99"), 3 * 5 * 4);
}

/* Over a sweep of shapes and devices: the map fits the shared memory, the grid the SMs, the splits
 * cover the top-k once, the ring stays within two tiles (the metadata ring's bound), the kind's
 * threads and instantiation exist, and the workspace holds what the kernels address. */
static void check_limits(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan *p) {
    const int64_t tiles = (a->topk + ATT_KEYS - 1) / ATT_KEYS;
    const int kind = attend_kind_of(p), variant = attend_variant_of(p);
    assert_true(p->bytes > 0 && p->bytes <= a->smem_per_block);
    assert_true(p->off_bar + (p->stages + 2 * p->ring_blocks) * 8 + 1024 <= p->bytes);
    assert_true(p->grid >= 1 && p->grid <= a->sm_count && p->grid <= p->items);
    assert_int_equal(p->items, a->num_queries * p->groups * p->splits);
    assert_true(p->groups * p->heads >= a->num_heads && (p->groups - 1) * p->heads < a->num_heads);
    assert_true(p->splits >= 1 && p->splits <= 64);
    assert_true((int64_t)p->splits * p->tiles_per_split >= tiles);
    assert_true((int64_t)(p->splits - 1) * p->tiles_per_split < tiles || tiles == 0);
    assert_true(p->ring_blocks <= 2 * (plan_resident(p) ? ATT_TILE_BLOCKS : ATT_STREAM_BLOCKS));
    assert_true(p->ring_blocks >= (plan_resident(p) ? ATT_TILE_BLOCKS : 3));
    /* the kernel the table gives the plan runs the plan's schedule and obeys its flow */
    assert_int_equal(schedule_of_kind(kind, a->record_bytes), p->schedule);
    assert_int_equal(p->threads, schedule_threads(p->schedule));
    assert_true(p->flow >= ATT_FLOW_STREAMING && p->flow <= ATT_FLOW_OVERLAPPED);
    if (p->flow == ATT_FLOW_OVERLAPPED)
        assert_true(kind == KIND_N16_WGMMA && p->ring_blocks == ATT_RING_BLOCKS);
    else if (kind == KIND_N16_WGMMA && plan_resident(p))
        assert_true(p->ring_blocks < ATT_RING_BLOCKS);
    assert_true(p->schedule != SCHEDULE_WIDE_TWOBUF || (p->stages == 0 && p->ring_blocks == 2 * ATT_TILE_BLOCKS));
    assert_int_equal(p->threads, kind_threads(kind, a->record_bytes));
    assert_true(kind_has_variant(kind, variant));
    assert_true(!p->wgmma || a->arch == 90);
    const uint64_t need = attend_workspace_of(a, p);
    if (p->splits > 1)
        assert_true(need >= counters_offset(a, p->splits) + (uint64_t)a->num_queries * p->groups * 8);
    else
        assert_int_equal(need, 0);
}

static void attend_plan_should_keep_every_plan_inside_the_device_limits(void **state) {
    (void)state;
    static const int devices[][5] = {
        {90, 132, 232448, 0, 30}, {90, 132, 101376, 0, 30}, {90, 132, 232448, 1, 30}, {120, 170, 101376, 0, 0},
        {100, 148, 232448, 0, 0}, {90, 66, 232448, 0, 15},
    };
    static const int64_t topks[] = {1, 64, 65, 500, 2048, 4096, 16384};
    static const int rbs[] = {NVFP4_MLA_RECORD_BYTES_368, NVFP4_MLA_RECORD_BYTES_432, NVFP4_MLA_RECORD_BYTES_656};
    int plans = 0;
    for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++)
        for (size_t r = 0; r < 3; r++)
            for (size_t k = 0; k < sizeof topks / sizeof topks[0]; k++)
                for (int64_t nq = 1; nq <= 300; nq += nq < 8 ? 1 : 7)
                    for (int64_t h = 1; h <= 128; h += h < 16 ? 5 : 16) {
                        const int *v = devices[d];
                        const nvfp4_mla_attend_kernel_args_t a =
                            call_on(v[0], v[1], v[2], v[3], v[4], rbs[r], nq, h, topks[k]);
                        const attend_plan p = attend_plan_for(&a);
                        check_limits(&a, &p);
                        plans++;
                    }
    assert_true(plans > 10000);
}

/* The workspace is sized by the plan alone: the merge setting moves the merge, not the bytes. */
static void attend_plan_should_size_the_workspace_whatever_the_merge(void **state) {
    (void)state;
    nvfp4_mla_attend_kernel_args_t a = call_on(90, 132, 232448, 0, 30, NVFP4_MLA_RECORD_BYTES_368, 16, 16, 2048);
    const attend_plan in_launch = attend_plan_for(&a);
    a.merge_mode = NVFP4_ATTEND_MERGE_SEPARATE;
    const attend_plan separate = attend_plan_for(&a);
    assert_int_equal(in_launch.one_launch, 1);
    assert_int_equal(attend_variant_of(&in_launch), VARIANT_MERGE_IN_LAUNCH);
    assert_int_equal(separate.one_launch, 0);
    assert_int_equal(attend_variant_of(&separate), VARIANT_PLAIN);
    assert_int_equal(separate.splits, in_launch.splits);
    assert_true(separate.splits > 1);
    assert_int_equal(attend_workspace_of(&a, &separate), attend_workspace_of(&a, &in_launch));
}

/* Shared memory that holds no ring gives no plan (bytes 0, no workspace): the launcher refuses the
 * call with UNSUPPORTED. 80 KB holds a narrow streaming ring of 368-byte records, not of 656. */
static void attend_plan_should_refuse_shared_memory_that_holds_no_ring(void **state) {
    (void)state;
    for (int rb = 0; rb < 3; rb++) {
        const int bytes[] = {NVFP4_MLA_RECORD_BYTES_368, NVFP4_MLA_RECORD_BYTES_432, NVFP4_MLA_RECORD_BYTES_656};
        const nvfp4_mla_attend_kernel_args_t a = call_on(90, 132, 48 << 10, 0, 30, bytes[rb], 4, 64, 2048);
        const attend_plan p = attend_plan_for(&a);
        assert_int_equal(p.bytes, 0);
        assert_int_equal(attend_workspace_of(&a, &p), 0);
    }
    nvfp4_mla_attend_kernel_args_t a = call_on(120, 170, 80 << 10, 0, 0, NVFP4_MLA_RECORD_BYTES_368, 4, 64, 2048);
    assert_true(attend_plan_for(&a).bytes > 0);
    a.record_bytes = NVFP4_MLA_RECORD_BYTES_656, a.block_stride = 64 * NVFP4_MLA_RECORD_BYTES_656;
    assert_int_equal(attend_plan_for(&a).bytes, 0);
}

/* Clusters of 4 only for split grids whose clusters all run at once. */
static void attend_plan_should_cluster_only_split_grids_that_fit_at_once(void **state) {
    (void)state;
    nvfp4_mla_attend_kernel_args_t a = call_on(90, 132, 232448, 0, 30, NVFP4_MLA_RECORD_BYTES_368, 1, 64, 2048);
    attend_plan p = attend_plan_for(&a);
    assert_int_equal(p.grid, 32);
    assert_int_equal(attend_placement_cluster(&a, &p), ATT_QUAD);
    a.quad_clusters = 7; /* 8 clusters would wait a wave */
    assert_int_equal(attend_placement_cluster(&a, &p), 1);
    a.quad_clusters = 0;
    assert_int_equal(attend_placement_cluster(&a, &p), 1);
    a = call_on(90, 132, 232448, 0, 30, NVFP4_MLA_RECORD_BYTES_368, 128, 64, 2048); /* unsplit */
    p = attend_plan_for(&a);
    assert_int_equal(p.splits, 1);
    assert_int_equal(attend_placement_cluster(&a, &p), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attend_plan_should_match_its_table_on_the_h200),
        cmocka_unit_test(attend_plan_should_match_its_table_under_the_99_kb_cap),
        cmocka_unit_test(attend_plan_should_match_its_table_with_the_mma_sync_kinds),
        cmocka_unit_test(attend_plan_should_keep_every_plan_inside_the_device_limits),
        cmocka_unit_test(attend_plan_should_size_the_workspace_whatever_the_merge),
        cmocka_unit_test(attend_plan_should_refuse_shared_memory_that_holds_no_ring),
        cmocka_unit_test(attend_plan_should_cluster_only_split_grids_that_fit_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
