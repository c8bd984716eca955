/* The narrow schedule (narrow_map.h: threads, registers, the fixed area, the fit), what the kernel
 * (attend_kernel.cuh) includes of it. Its CTA: consumer warpgroup 0 (attend_narrow,
 * narrow_consumer.cuh) over N = 16 or 32 heads, raising its registers to 232 in the wgmma form;
 * then the producers (lib/attend_producer.cuh, in ring order: IN_ORDER), one warpgroup with mma.sync
 * consumers, two at 136 registers with wgmma, which also run the in-launch merge of the
 * MERGE_IN_LAUNCH instantiation (lib/attend_split_merge.cuh) once the consumers have stored their
 * partials. */
#ifndef NVFP4_MLA_NARROW_CUH
#define NVFP4_MLA_NARROW_CUH

#include "lib/attend_producer.cuh"
#include "lib/attend_split_merge.cuh"
#include "narrow_consumer.cuh"

#endif
