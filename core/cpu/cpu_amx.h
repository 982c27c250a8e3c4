/* cpu_amx.h — what the code on Intel's AMX tile unit shares (cpu_fp8_mm_amx.c: the FP8 GEMM; cpu_nn_attn_bf16.c:
 * bf16 attention; scripts/peak.h: the tile limit). fl_cpu_amx() (cpu_internal.h) says whether this process may use
 * the tiles; fl_amx_begin() loads the one configuration all use, palette 1 with tiles 0-7 all 16 rows of 64 bytes (C: 16 × 16
 * fp32; A: 16 rows × 16 bf16 pairs; B: 16 pairs × 16 columns), and fl_amx_end() releases the tiles. The
 * configuration is per thread (and oneDNN's GEMMs load their own), so a kernel loads it before its tile
 * instructions and releases it after. It is a constant object: GCC 12's _tile_loadconfig tells the compiler it
 * reads 8 bytes, so the stores that fill a local configuration past those may be dropped as dead (ldtilecfg then
 * faults, as a first version of the attention kernels did at -O2, or loads another shape). */
#ifndef FL_CPU_AMX_H
#define FL_CPU_AMX_H
#include <cpuid.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FL_CPU_AMX_TARGETS "avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,amx-tile,amx-bf16"
#define FL_CPU_AMX __attribute__((target(FL_CPU_AMX_TARGETS)))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} fl_amx_cfg;
static const fl_amx_cfg FL_AMX_CFG = { .palette = 1, .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
                                       .rows = { 16, 16, 16, 16, 16, 16, 16, 16 } };

static inline FL_CPU_AMX void fl_amx_begin(void) { _tile_loadconfig(&FL_AMX_CFG); }
static inline FL_CPU_AMX void fl_amx_end(void) { _tile_release(); }

/* Whether the CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22) and Linux lets this process use
 * the tile registers, which it must ask for (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA). Asks each call:
 * cpu_fp8_mm_amx.c keeps the answer (fl_cpu_amx), scripts/peak.h asks before it measures the tiles. */
static inline bool fl_amx_request(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx >> 24 & 1) || !(edx >> 22 & 1)) return false;
#ifdef SYS_arch_prctl
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}
#endif
