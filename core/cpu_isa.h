/* cpu_isa.h — the most of this CPU's instruction sets fp8lab's CPU code may use, as oneDNN's ONEDNN_MAX_CPU_ISA
 * caps oneDNN's: FP8LAB_CPU_ISA (lua/main.c sets it at start). It lets a CPU with AMX run, and be measured on, what
 * a CPU without it runs (the AVX512_BF16 GEMMs and attention, the AVX-512 or the AVX2 + FMA kernels), bit for bit
 * each family's own results. Every run-time choice of a kernel family asks fl_cpu_isa_allows() besides the CPU's
 * flags (core/cpu/cpu_internal.h's fl_cpu_avx512() and fl_cpu_avx512_bf16(), fl_cpu_amx(), core/format.c's casts,
 * core/bf16_x86.h), and the CPU device hands the cap to oneDNN before its first GEMM (core/cpu/cpu_matmul.c). The
 * build's floor is x86-64-v3 (AVX2, FMA), so there is nothing below avx2. */
#ifndef FL_CPU_ISA_H
#define FL_CPU_ISA_H
#include <stdbool.h>
#include "error.h"

typedef enum { FL_ISA_AVX2 = 0, FL_ISA_AVX512, FL_ISA_AVX512_BF16, FL_ISA_AMX, FL_ISA_COUNT } fl_isa;

/* The names FP8LAB_CPU_ISA takes, lowest first ("avx2", "avx512", "avx512_bf16", "amx"), as one string. */
extern const char fl_cpu_isa_words[];
/* Cap at `name` (one of fl_cpu_isa_words; "amx", the default, caps nothing). FL_EINVAL names the choices for
 * another word; FL_EUNSUPPORTED once oneDNN was handed a different cap (it takes one, before its first kernel). */
fl_status fl_cpu_isa_limit(const char *name);
/* Whether the cap allows `isa` (the CPU's own flags are asked separately). */
bool fl_cpu_isa_allows(fl_isa isa);
/* The cap's name ("amx" when nothing is capped). */
const char *fl_cpu_isa_limit_name(void);
/* The cap, fixed from now on: what the CPU device hands oneDNN before its first GEMM. */
fl_isa fl_cpu_isa_freeze(void);

#endif
