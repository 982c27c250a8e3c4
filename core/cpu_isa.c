/* cpu_isa.c — the cap on the CPU's instruction sets (cpu_isa.h). */
#include "cpu_isa.h"
#include <stdatomic.h>
#include <string.h>
#include <strings.h>

static const char *const NAMES[FL_ISA_COUNT] = { "avx2", "avx512", "avx512_bf16", "amx" };
const char fl_cpu_isa_words[] = "avx2, avx512, avx512_bf16, amx";

static _Atomic int cap = FL_ISA_AMX;
static _Atomic bool frozen;

fl_status fl_cpu_isa_limit(const char *name) {
    int isa = -1;
    for (int i = 0; i < FL_ISA_COUNT; i++)
        if (name && strcasecmp(name, NAMES[i]) == 0) isa = i;   /* AVX2 as ONEDNN_MAX_CPU_ISA writes it, too */
    if (isa < 0)
        return FL_ERR(FL_EINVAL, "CPU instruction sets: expected one of %s, got \"%s\"", fl_cpu_isa_words,
                      name ? name : "(null)");
    if (atomic_load(&frozen) && isa != atomic_load(&cap))
        return FL_ERR(FL_EUNSUPPORTED, "CPU instruction sets: oneDNN already runs capped at %s; the cap is set once, "
                      "before the first GEMM (FP8LAB_CPU_ISA)", NAMES[atomic_load(&cap)]);
    atomic_store(&cap, isa);
    return FL_OK;
}

bool fl_cpu_isa_allows(fl_isa isa) { return (int)isa <= atomic_load(&cap); }

const char *fl_cpu_isa_limit_name(void) { return NAMES[atomic_load(&cap)]; }

fl_isa fl_cpu_isa_freeze(void) {
    atomic_store(&frozen, true);
    return (fl_isa)atomic_load(&cap);
}
