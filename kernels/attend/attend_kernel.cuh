/* The attention kernel: what every schedule's CTA does first (align the shared memory, initialise
 * the ring's barriers by the schedule's counts, the dependent-launch hand-over), then its roles,
 * producers above the consumers, each a line a schedule (the schedules' headers,
 * schedules/<name>/<name>.cuh, describe their CTAs); and the entries of the table of kernels
 * (attend_kernels.cuh) that each attend_kernels_<record bytes>.cu instantiates. Every number is the
 * schedule's row of attend_schedules (attend_plan.h); lib/attend_pipeline.cuh has the pipeline.
 * Why the roles are called from here and not from a function of each schedule: an inlined wrapper
 * between the kernel and the role functions changes the order in which nvcc inlines and simplifies
 * them, and with it the machine code of 18 sm_90a kernels (register numbering and a copy's place in
 * the producer's loop; tools/kernel-text-compare). */
#ifndef NVFP4_MLA_ATTEND_KERNEL_CUH
#define NVFP4_MLA_ATTEND_KERNEL_CUH

#include <stdint.h>

#include "attend_kernels.cuh"
#include "kernel_args.h"
#include "lib/attend_pipeline.cuh"
#include "schedules/narrow/narrow.cuh"
#include "schedules/wide_twobuf/wide_twobuf.cuh"
#include "schedules/wide_ring/wide_ring.cuh"

/* ONE_LAUNCH: VARIANT_MERGE_IN_LAUNCH; ROW_Q: VARIANT_ROW_Q (lib/attend_map.h). */
template <int KIND, int RB, bool ONE_LAUNCH, bool ROW_Q = false>
__global__ void __launch_bounds__(kind_threads(KIND, RB), 1)
    nvfp4_attend_kernel(const __grid_constant__ nvfp4_mla_attend_kernel_args_t a,
                        const __grid_constant__ attend_plan pl) {
    constexpr int SCHEDULE = schedule_of_kind(KIND, RB);
    constexpr attend_schedule_facts F = schedule_facts(SCHEDULE);
#if !NVFP4_HAVE_WGMMA
    if constexpr (F.wgmma) { /* the planner never picks wgmma schedules off sm_90a */
        __trap();
        return;
    }
#endif
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u); /* SW128 atoms: 1024-aligned */
    if (threadIdx.x == 0) {
        const attend_bars bars = bars_of(smem, pl);
        /* Every thread arrives on every barrier it signals (lib/attend_pipeline.cuh, release_block). */
        for (int s = 0; s < pl.stages; s++) mbar_init(&bars.raw_full[s], F.producers);
        for (int s = 0; s < pl.ring_blocks; s++) {
            mbar_init(&bars.block_full[s], F.producers);
            mbar_init(&bars.block_empty[s], F.empty_arrivals);
        }
        mbar_init_fence();
    }
    __syncthreads();
    pdl_wait();    /* the stream's previous grid: its writes of q, slots, the cache; its reads of out */
    pdl_release(); /* the merge (or the stream's next grid) may start launching */
    constexpr int CONSUMERS = F.consumers, PRODUCERS = F.producers;
    constexpr bool WIDE = SCHEDULE == SCHEDULE_WIDE_TWOBUF || SCHEDULE == SCHEDULE_WIDE_RING;
    if (threadIdx.x >= CONSUMERS) { /* the producers; the narrow ones release in ring order (IN_ORDER) */
#if NVFP4_HAVE_WGMMA
        if constexpr (F.producer_regs > 0) setmaxnreg_dec<F.producer_regs>();
#endif
        if constexpr (SCHEDULE == SCHEDULE_WIDE_TWOBUF)
            attend_producer_twobuf<RB, PRODUCERS, wide_twobuf_rope_f16<RB, ROW_Q>(), wide_twobuf_slot_ring<ROW_Q>()>(
                a, pl, smem, threadIdx.x - CONSUMERS);
        else
            attend_producer<RB, PRODUCERS, !WIDE, meta_of<WIDE>>(a, pl, smem, threadIdx.x - CONSUMERS);
        if constexpr (ONE_LAUNCH)
            merge_if_last(a, pl, smem, threadIdx.x - CONSUMERS, PRODUCERS, CONSUMERS, BAR_PRODUCER);
    } else {
#if NVFP4_HAVE_WGMMA
        if constexpr (!WIDE && F.consumer_regs > 0) setmaxnreg_inc<F.consumer_regs>();
#endif
        if constexpr (WIDE) {
#if NVFP4_HAVE_WGMMA
            if (threadIdx.x < ATT_WARPGROUP) {
                setmaxnreg_inc<F.consumer_regs>();
                if constexpr (SCHEDULE == SCHEDULE_WIDE_TWOBUF)
                    wide_twobuf_consumer<RB, 0, ROW_Q, wide_twobuf_rope_f16<RB, ROW_Q>()>(a, pl, smem, threadIdx.x);
                else
                    wide_ring_consumer<RB, 0, ROW_Q>(a, pl, smem, threadIdx.x);
            } else {
                if constexpr (F.value_regs > schedule_launch_regs(SCHEDULE)) setmaxnreg_inc<F.value_regs>();
                else setmaxnreg_dec<F.value_regs>();
                if constexpr (SCHEDULE == SCHEDULE_WIDE_TWOBUF)
                    wide_twobuf_consumer<RB, 1, ROW_Q, wide_twobuf_rope_f16<RB, ROW_Q>()>(a, pl, smem, threadIdx.x);
                else
                    wide_ring_consumer<RB, 1, ROW_Q>(a, pl, smem, threadIdx.x);
            }
#endif
        } else {
            attend_narrow<kind_heads(KIND), (bool)F.wgmma>(a, pl, smem, threadIdx.x);
        }
        if constexpr (ONE_LAUNCH) { /* hand the stored partials to the producers, which merge */
            __threadfence();
            named_arrive(BAR_MERGE, CONSUMERS + PRODUCERS);
        }
    }
}

/* The table's entry for (KIND, RB, VARIANT): its instantiation, or NULL where the kind has none. */
template <int KIND, int RB, int VARIANT>
constexpr attend_kernel_t attend_kernel_entry() {
    if constexpr (kind_has_variant(KIND, VARIANT))
        return nvfp4_attend_kernel<KIND, RB, VARIANT == VARIANT_MERGE_IN_LAUNCH, VARIANT == VARIANT_ROW_Q>;
    else
        return nullptr;
}
#define ATT_KIND_ENTRIES(KIND, RB)                                                                                     \
    {                                                                                                                  \
        attend_kernel_entry<KIND, RB, VARIANT_PLAIN>(), attend_kernel_entry<KIND, RB, VARIANT_MERGE_IN_LAUNCH>(),      \
            attend_kernel_entry<KIND, RB, VARIANT_ROW_Q>()                                                             \
    }
static_assert(KIND_COUNT == 5 && VARIANT_COUNT == 3, "ATTEND_KERNELS_OF lists every kind and variant");
/* The kernels of records of RB bytes, [kind][variant], in the order of KIND_*. */
#define ATTEND_KERNELS_OF(RB)                                                                                          \
    {                                                                                                                  \
        ATT_KIND_ENTRIES(KIND_N16_SYNC, RB), ATT_KIND_ENTRIES(KIND_N32_SYNC, RB),                                      \
            ATT_KIND_ENTRIES(KIND_N16_WGMMA, RB), ATT_KIND_ENTRIES(KIND_N32_WGMMA, RB),                                \
            ATT_KIND_ENTRIES(KIND_WIDE, RB)                                                                            \
    }

#endif
