/* The attention kernels of 656-byte records: their row of the table (attend_kernels.cuh). */
#include "attend_kernel.cuh"

extern const attend_kernel_row attend_kernels_656 = ATTEND_KERNELS_OF(NVFP4_MLA_RECORD_BYTES_656);
