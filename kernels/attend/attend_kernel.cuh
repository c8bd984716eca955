/* The attention kernel (kernels/attend/attend_pipeline.cuh has the pipeline; attend_plan.h the kinds
 * and their counts): a CTA's roles by kind, and the entries of the table of kernels
 * (attend_kernels.cuh) that each attend_kernels_<record bytes>.cu instantiates. */
#ifndef NVFP4_MLA_ATTEND_KERNEL_CUH
#define NVFP4_MLA_ATTEND_KERNEL_CUH

#include <stdint.h>

#include "attend_kernels.cuh"
#include "attend_narrow.cuh"
#include "attend_pipeline.cuh"
#include "attend_producer.cuh"
#include "attend_producer_paired.cuh"
#include "attend_split_merge.cuh"
#include "attend_wide.cuh"
#include "codec.h"

/* ONE_LAUNCH: VARIANT_MERGE_IN_LAUNCH; ROW_Q: VARIANT_ROW_Q (attend_plan.h). */
template <int KIND, int RB, bool ONE_LAUNCH, bool ROW_Q = false>
__global__ void __launch_bounds__(kind_threads(KIND, RB), 1)
    nvfp4_attend_kernel(const __grid_constant__ nvfp4_mla_attend_kernel_args_t a,
                        const __grid_constant__ attend_plan pl) {
    constexpr bool WG = KIND >= KIND_N16_WGMMA;
    constexpr int CONSUMERS = kind_consumers(KIND), PRODUCERS = kind_producers(KIND, RB);
    constexpr bool PAIRED = kind_paired(KIND, RB);
#if !NVFP4_HAVE_WGMMA
    if constexpr (WG) { /* the planner never picks wgmma kinds off sm_90a */
        __trap();
        return;
    }
#endif
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u); /* SW128 atoms: 1024-aligned */
    if (threadIdx.x == 0) {
        const attend_bars bars = bars_of(smem, pl);
        /* Every thread arrives on every barrier it signals (attend_pipeline.cuh, release_slot). */
        for (int s = 0; s < pl.stages; s++) mbar_init(&bars.raw_full[s], PRODUCERS);
        for (int s = 0; s < pl.slots; s++) {
            mbar_init(&bars.slot_full[s], PRODUCERS);
            /* the wide kind: each block is freed by the one warpgroup that reads it last */
            mbar_init(&bars.slot_empty[s], KIND == KIND_WIDE ? CONSUMERS / 2 : CONSUMERS);
        }
        mbar_init_fence();
    }
    __syncthreads();
    pdl_wait();    /* the stream's previous grid: its writes of q, slots, the cache; its reads of out */
    pdl_release(); /* the merge (or the stream's next grid) may start launching */
    if (threadIdx.x >= CONSUMERS) {
#if NVFP4_HAVE_WGMMA
        constexpr int PRODUCER_REGS = kind_producer_regs(KIND, RB);
        if constexpr (PRODUCER_REGS > 0) setmaxnreg_dec<PRODUCER_REGS>();
#endif
        if constexpr (PAIRED)
            attend_producer_paired<RB, PRODUCERS>(a, pl, smem, threadIdx.x - CONSUMERS);
        else
            attend_producer<RB, PRODUCERS, KIND != KIND_WIDE, meta_of<KIND == KIND_WIDE>>(a, pl, smem,
                                                                                         threadIdx.x - CONSUMERS);
        if constexpr (ONE_LAUNCH)
            merge_if_last(a, pl, smem, threadIdx.x - CONSUMERS, PRODUCERS, CONSUMERS, BAR_PRODUCER);
    } else {
#if NVFP4_HAVE_WGMMA
        if constexpr (WG && KIND != KIND_WIDE && PRODUCERS == 2 * ATT_WARPGROUP)
            setmaxnreg_inc<ATT_NARROW_CONSUMER_REGS>();
#endif
        if constexpr (KIND == KIND_WIDE) {
#if NVFP4_HAVE_WGMMA
            if (threadIdx.x < ATT_WARPGROUP) {
                setmaxnreg_inc<ATT_SCORE_REGS>();
                attend_wide<RB, PAIRED, 0, ROW_Q>(a, pl, smem, threadIdx.x);
            } else {
                if constexpr (PAIRED) setmaxnreg_inc<ATT_VALUE_REGS>();
                else setmaxnreg_dec<ATT_VALUE_REGS>();
                attend_wide<RB, PAIRED, 1, ROW_Q>(a, pl, smem, threadIdx.x);
            }
#endif
        } else {
            attend_narrow<(KIND == KIND_N16_SYNC || KIND == KIND_N16_WGMMA) ? 16 : 32, WG>(a, pl, smem, threadIdx.x);
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
