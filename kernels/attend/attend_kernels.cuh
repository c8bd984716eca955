/* The rows of the table of attention kernels, record size x kind x variant (attend_plan.h names the
 * kinds and variants and which kind has which; kernels/attend/attend_cuda.cu holds the table, which
 * every chooser reads: the launch, the shared-memory attribute of every kernel, the occupancy count
 * of clusters). One translation unit a record size instantiates its row (attend_kernels_368.cu,
 * _432.cu, _656.cu: ATTEND_KERNELS_OF, attend_kernel.cuh), so that the three compile in parallel. */
#ifndef NVFP4_MLA_ATTEND_KERNELS_CUH
#define NVFP4_MLA_ATTEND_KERNELS_CUH

#include "attend_plan.h"
#include "kernel_args.h"

/* An attention kernel: the call's arguments and its plan, both __grid_constant__. */
typedef void (*attend_kernel_t)(nvfp4_mla_attend_kernel_args_t, attend_plan);
/* The kernels of one record size, [kind][variant]; NULL where the kind has no such variant. */
typedef attend_kernel_t attend_kernel_row[KIND_COUNT][VARIANT_COUNT];

extern const attend_kernel_row attend_kernels_368, attend_kernels_432, attend_kernels_656;

#endif
