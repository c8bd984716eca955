/* The attention kernels of 432-byte records: their row of the table (attend_kernels.cuh). */
#include "attend_kernel.cuh"

extern const attend_kernel_row attend_kernels_432 = ATTEND_KERNELS_OF(NVFP4_MLA_RECORD_BYTES_432);
