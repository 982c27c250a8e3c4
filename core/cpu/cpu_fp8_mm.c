/* cpu_fp8_mm.c — the CPU device's own FP8 GEMM, the driver of its kernel families (cpu_fp8_mm.h): C is cut into
 * tiles (rows × columns), K into blocks; each B block is decoded and packed once per thread that uses it, A a
 * group of rows at a time; the scales (per tensor, or per row of a and per column of b: rowwise scaling) and the
 * bias are applied as C is stored. Each element is summed over K in a fixed order whichever thread makes it (a
 * split by rows hands row groups out with work stealing, K block by K block), so results do not depend on the
 * thread count; they do depend on the family (AVX512_BF16 sums pairs of products, the FMA families one product at
 * a time: AVX-512 and AVX2 give the same bits).
 * The same driver runs the FMA families on bf16, fp16 and fp32 operands (fl_cpu_fma_mm). */
#include "cpu_fp8_mm.h"
#include "par.h"
#include <omp.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

_Atomic bool fl_cpu_fp8_mm_allowed = true;

#ifdef __x86_64__
#include <immintrin.h>
#include <sched.h>

/* The family this CPU runs: AMX where it has it (and AMX and AVX-512 are allowed), else AVX512_BF16 or AVX-512 FMA
 * where it has them (and AVX-512 is allowed), else AVX2 + FMA. Between the two AVX-512 families the instruction's
 * rate decides, and it is the vendor's: vdpbf16ps does twice the fp32 FMA's FLOPs a cycle on AMD's Zen 4 and 5
 * (230 against 114 GFLOP/s a thread on Zen 4), half on Intel's cores (120 against 240 on the Xeon with AMX, its
 * tiles capped: the GPT's twelve GEMMs 49.7 ms on AVX512_BF16 against 31.3 on AVX-512 FMA; docs/performance.md,
 * "Intel without the tiles"). A fixed rule, not a timing, so a machine always runs the same family (the two give
 * different bits). */
#ifdef FL_MM_BF16_DOT_FAST
/* A build for measurement only (docs/performance.md, "Issue 16's Zen path on Intel"): every CPU takes the Zen rule,
 * so an Intel CPU capped at FP8LAB_CPU_ISA=avx512_bf16 runs the FP8 GEMMs on vdpbf16ps as Zen 4 and 5 do. */
static bool bf16_dot_fast(void) { return true; }
#else
static bool bf16_dot_fast(void) { return !__builtin_cpu_is("intel"); }
#endif

static const mm_kernel *mm_pick(void) {
    if (fl_mm_amx.usable()) return &fl_mm_amx;
    if (fl_mm_bf16.usable() && bf16_dot_fast()) return &fl_mm_bf16;
    if (fl_mm_fma512.usable()) return &fl_mm_fma512;
    if (fl_mm_bf16.usable()) return &fl_mm_bf16;
    if (fl_mm_fma.usable()) return &fl_mm_fma;
    return NULL;
}

const char *fl_cpu_fp8_mm_family(void) {
    const mm_kernel *F = mm_pick();
    return F ? F->name : NULL;
}

/* C[m0 .. m0+mb, n0 .. n0+nb) over all of K, in K blocks. */
static void run_tile(const mm_job *J, int64_t m0, int64_t mb, int64_t n0, int64_t nb, void *bpk, void *apk, void *tmp) {
    const mm_kernel *F = J->kern;
    for (int64_t k0 = 0; k0 < J->K; k0 += J->kc) {
        const int64_t kc = J->K - k0 < J->kc ? J->K - k0 : J->kc;
        F->pack_b(J, n0, nb, k0, kc, bpk, tmp);
        for (int64_t mg = 0; mg < mb; mg += F->ag)
            F->group(J, m0 + mg, mb - mg < F->ag ? mb - mg : F->ag, n0, nb, k0, kc, bpk, apk);
    }
}

/* The row split with work stealing. Each thread owns a contiguous run of A groups per (column block, K block)
 * step, as the static split gives it, and takes them from the front; a thread whose run is done takes the
 * others' remaining groups from the back. So the rows stay with the thread that had them (and their C rows in
 * its cache) except near the boundary, and a thread slowed for a while (this machine is shared) no longer
 * leaves the other waiting at the end. A run is one 64-bit word, front in the low half and back in the high,
 * changed by compare-and-swap. A group's next K block adds to what its previous one stored, so each group
 * counts the steps it has finished (done) and a group's step waits for its previous step, not every thread
 * for every group at a barrier: a thread whose run is done goes on to the next step while the other finishes
 * (or, descheduled for a while, holds) the group it is in. A thread reaches a step only once every group of
 * the step before has been taken, and the thread that took one runs it, so the wait ends. Results are those
 * of the static split: every C element is summed over the same K blocks in the same order, only by another
 * thread. */
typedef struct { _Alignas(64) _Atomic uint64_t v; } mm_run;

/* Until group g's counter reaches step s: spins, then yields its CPU (threads may outnumber the cores). */
static void wait_step(_Atomic int64_t *done, int64_t s) {
    for (int i = 0; atomic_load_explicit(done, memory_order_acquire) < s; i++) {
        if (i < 4096) _mm_pause();
        else sched_yield();
    }
}

/* Takes run r's first group (front) or its last (!front) into *g; false when the run is empty. */
static bool take(mm_run *r, bool front, int64_t *g) {
    uint64_t v = atomic_load_explicit(&r->v, memory_order_relaxed);
    for (;;) {
        const uint32_t f = (uint32_t)v, b = (uint32_t)(v >> 32);
        if (f >= b) return false;
        const uint64_t next = front ? v + 1 : v - ((uint64_t)1 << 32);
        if (atomic_compare_exchange_weak_explicit(&r->v, &v, next, memory_order_relaxed, memory_order_relaxed)) {
            *g = front ? f : b - 1;
            return true;
        }
    }
}
static void run_rows_stealing(const mm_job *J, mm_run *runs, _Atomic int64_t *done, int tid, int nthr, void *bpk,
                              void *apk, void *tmp) {
    const mm_kernel *F = J->kern;
    const int64_t nkb = (J->K + J->kc - 1) / J->kc, AG = F->ag;
    int64_t step = 0;
    for (int64_t n0 = 0; n0 < J->N; n0 += J->nb) {
        const int64_t nb = J->N - n0 < J->nb ? J->N - n0 : J->nb;
        for (int64_t kb = 0; kb < nkb; kb++, step++) {
            const int64_t k0 = kb * J->kc, kc = J->K - k0 < J->kc ? J->K - k0 : J->kc;
            mm_run *r = runs + step * nthr;
            bool packed = false;
            int64_t g;
            for (int v = 0; v < nthr; v++) {   /* own run first, then the next threads' from their backs */
                mm_run *rv = r + (tid + v) % nthr;
                while (take(rv, v == 0, &g)) {
                    if (!packed) { F->pack_b(J, n0, nb, k0, kc, bpk, tmp); packed = true; }
                    const int64_t m = g * AG;
                    wait_step(done + g, step);   /* (a new column block's first step waits too: no harm, one chain) */
                    F->group(J, m, J->M - m < AG ? J->M - m : AG, n0, nb, k0, kc, bpk, apk);
                    atomic_store_explicit(done + g, step + 1, memory_order_release);
                }
            }
        }
    }
}

/* Threads for an M × N × K GEMM: one below ~4 MFLOP (the fork would cost more than it saves). */
static int mm_threads(int64_t M, int64_t N, int64_t K) {
    return 2.0 * (double)M * (double)N * (double)K >= 4e6 ? omp_get_max_threads() : 1;
}

/* Where it measured faster than decode + oneDNN: the AVX512_BF16 family everywhere except a transposed b (fprop's
 * Wᵀ) with fewer than 512 rows of C per thread, where each thread's decode-and-transpose of all of B is shared by
 * too few rows (the MLP's fprop at batch 256: 1.00-1.03x the old time; docs/performance.md, "CPU FP8 GEMM"); the
 * AVX2 + FMA family everywhere (there decode + oneDNN is decode, widen to fp32, fp32 GEMM; section "CPUs without
 * AVX-512 (Zen 3)"). */
bool fl_cpu_fp8_mm_faster(const fl_tensor *a, const fl_tensor *b) {
    const mm_kernel *F = mm_pick();
    if (!F) return false;
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    const bool b_kcontig = !(b->stride[1] == 1 && (b->stride[0] == N || K == 1));
    return !b_kcontig || M / mm_threads(M, N, K) >= F->bt_min_rows;
}

/* t's scale_inv as fp32 scales: one, or (axis ≥ 0) n contiguous ones along view axis `axis`; NULL if it is
 * neither (the caller declines). *vec: whether they are a vector. */
static const float *mm_scales(const fl_tensor *t, int axis, int64_t n, bool *vec) {
    const fl_tensor *s = t->scale_inv;
    *vec = t->scale_axis >= 0;
    if (!s || s->dtype != FL_F32 || fl_tensor_numel(s) < 1) return NULL;
    if (!*vec) return fl_tensor_data(s);
    if (t->scale_axis != axis || fl_tensor_numel(s) != n || (n > 1 && s->stride[0] != 1)) return NULL;
    return fl_tensor_data(s);
}

/* J's layouts from the strides of a [M, K] and b [K, N] (as0, as1: a's row and column strides; bs0, bs1: b's):
 * K-contiguous rows, or the transposed view of a contiguous [K, M]; likewise b. With a dim of 1 both readings
 * fit and either is right (the other stride is never used). False: a layout the families do not read. */
static bool mm_layout(mm_job *J, int64_t as0, int64_t as1, int64_t bs0, int64_t bs1) {
    if (as1 == 1 && (as0 == J->K || J->M == 1)) J->lda = J->K;
    else if (as0 == 1 && (as1 == J->M || J->K == 1)) J->a_mcontig = true, J->lda = J->M;
    else return false;
    if (bs1 == 1 && (bs0 == J->N || J->K == 1)) J->ldb = J->N;
    else if (bs0 == 1 && (bs1 == J->K || J->N == 1)) J->b_kcontig = true, J->ldb = J->K;
    else return false;
    return true;
}

static fl_status mm_execute(const mm_job *jp);

fl_status fl_cpu_fp8_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const float *bias, const float *res,
                        bool *done) {
    *done = false;
    const mm_kernel *F = fl_cpu_fp8_mm_allowed ? mm_pick() : NULL;
    if (!F) return FL_OK;
    if (a->ndim != 2 || b->ndim != 2 || dst->ndim != 2 || dst->dtype != FL_F32 || !fl_tensor_is_contiguous(dst) ||
        !fl_format(a->dtype)->is_fp8 || !fl_format(b->dtype)->is_fp8 || a->device != FL_DEV_CPU || b->device != FL_DEV_CPU)
        return FL_OK;
    mm_job J = { .M = dst->shape[0], .N = dst->shape[1], .K = a->shape[1], .c = fl_tensor_data(dst), .bias = bias,
                 .res = res, .kern = F, .wide = FL_DTYPE_COUNT };
    if (a->shape[0] != J.M || b->shape[0] != J.K || b->shape[1] != J.N || J.K == 0) return FL_OK;
    bool ra, cb;
    const float *sa = mm_scales(a, 0, J.M, &ra), *sb = mm_scales(b, 1, J.N, &cb);
    if (!sa || !sb) return FL_OK;
    J.sa0 = sa[0];
    J.sb0 = sb[0];
    J.scale = sa[0] * sb[0];
    J.rs = ra ? sa : NULL;
    J.cs = cb ? sb : NULL;
    if (!mm_layout(&J, a->stride[0], a->stride[1], b->stride[0], b->stride[1])) return FL_OK;
    FL_TRY(fl_check_interrupt());
    J.a = fl_tensor_data(a);
    J.b = fl_tensor_data(b);
    J.e5_a = a->dtype == FL_E5M2;
    J.e5_b = b->dtype == FL_E5M2;
    FL_TRY(mm_execute(&J));
    *done = true;
    return FL_OK;
}

_Atomic bool fl_cpu_fma_mm_allowed = true;

bool fl_cpu_fma_mm_first(void) {
    const mm_kernel *F = mm_pick();
    return F == &fl_mm_fma512 || F == &fl_mm_fma;
}

fl_status fl_cpu_fma_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool *done) {
    *done = false;
    if (!fl_cpu_fma_mm_allowed || !fl_mm_fma.usable()) return FL_OK;
    if (a->ndim != 3 || b->ndim != 3 || dst->ndim != 3 || a->dtype != b->dtype ||
        (a->dtype != FL_BF16 && a->dtype != FL_F16 && a->dtype != FL_F32) || (dst->dtype != FL_F32 && dst->dtype != a->dtype) ||
        !fl_tensor_is_contiguous(dst) || a->device != FL_DEV_CPU || b->device != FL_DEV_CPU)
        return FL_OK;
    const int64_t B = dst->shape[0];
    mm_job J = { .M = dst->shape[1], .N = dst->shape[2], .K = a->shape[2], .scale = 1.0f, .sa0 = 1.0f, .sb0 = 1.0f,
                 .kern = fl_mm_fma512.usable() ? &fl_mm_fma512 : &fl_mm_fma, .wide = a->dtype };
    if (a->shape[1] != J.M || b->shape[1] != J.K || b->shape[2] != J.N || J.K == 0 ||
        (a->shape[0] != B && a->shape[0] != 1) || (b->shape[0] != B && b->shape[0] != 1) ||
        !mm_layout(&J, a->stride[1], a->stride[2], b->stride[1], b->stride[2]))
        return FL_OK;
    FL_TRY(fl_check_interrupt());
    /* fp32 C: dst itself, or one batch entry's scratch rounded into a 16-bit dst as fl_cpu_store rounds */
    const int64_t es = (int64_t)fl_format(a->dtype)->size;
    float *tmp = NULL;
    if (dst->dtype != FL_F32 && !(tmp = malloc(sizeof(float) * (size_t)(J.M * J.N))))
        return FL_ERR(FL_ENOMEM, "%s gemm: out of memory for a [%lld, %lld] fp32 result", fl_format(a->dtype)->name,
                      (long long)J.M, (long long)J.N);
    const int64_t sa = a->shape[0] == 1 ? 0 : a->stride[0], sb = b->shape[0] == 1 ? 0 : b->stride[0];
    fl_status st = FL_OK;
    for (int64_t i = 0; i < B && st == FL_OK; i++) {
        J.a = (const uint8_t *)fl_tensor_data(a) + i * sa * es;
        J.b = (const uint8_t *)fl_tensor_data(b) + i * sb * es;
        J.c = tmp ? tmp : (float *)fl_tensor_data(dst) + i * J.M * J.N;
        st = i ? fl_check_interrupt() : FL_OK;
        if (st == FL_OK) st = mm_execute(&J);
        if (st == FL_OK && tmp) fl_cpu_store(dst, i * J.M * J.N, 1, J.M * J.N, tmp);
    }
    free(tmp);
    if (st == FL_OK) *done = true;
    return st;
}

/* Runs the job J made by an entry: tiles, threads, K and column blocks, as the kernel family J->kern says. */
static fl_status mm_execute(const mm_job *jp) {
    mm_job J = *jp;
    const mm_kernel *F = J.kern;
    const int64_t NR = F->nr, AG = F->ag;
    /* K blocks of the family's kc; a balancing family cuts K into equal blocks (rounded up to 8) instead of
     * full ones and a remainder, so no block is a sliver that re-reads and re-writes C for little work
     * (the MLP's K = 784: 200, 200, 200, 184 instead of 256, 256, 256, 16); likewise B's column blocks below.
     * Sums run in the same order either way. */
    J.kc = F->kc;
    if (F->balance) {
        const int64_t nkb = (J.K + F->kc - 1) / F->kc;
        J.kc = ((J.K + nkb - 1) / nkb + 7) & ~(int64_t)7;
    }
    const int64_t KC = J.kc;

    /* Tiles: one block of rows or columns per thread, split along the longer side, since each thread packs
     * the whole other operand for its block (A: M × K; B: K × N, once per K block and nb_max columns). */
    const int nthr = mm_threads(J.M, J.N, J.K);
    const bool by_rows = !(J.N > J.M && nthr > 1);
    if (!by_rows) {
        J.mb = J.M;
        J.nb = (J.N + nthr - 1) / nthr;
        J.nb = (J.nb + NR - 1) / NR * NR;
    } else {
        J.mb = (J.M + nthr - 1) / nthr;
        J.mb = (J.mb + AG - 1) / AG * AG;
        J.nb = J.N;
    }
    if (J.nb > F->nb_max) {
        J.nb = F->nb_max;
        if (F->balance) {
            const int64_t nnb = (J.N + F->nb_max - 1) / F->nb_max;
            J.nb = ((J.N + nnb - 1) / nnb + NR - 1) / NR * NR;
        }
    }
    const int64_t nnb = (J.N + J.nb - 1) / J.nb;
    const int64_t nmb = (J.M + J.mb - 1) / J.mb, ntile = nmb * nnb;
    size_t bbytes, abytes, tbytes;
    F->sizes(J.K < KC ? J.K : KC, J.nb, &bbytes, &abytes, &tbytes);
    bool oom = false;
    /* Split by rows: work stealing (run_rows_stealing), each thread's run of A groups per step being its
     * static block of rows (docs/performance.md, "Where the GPT step's time goes": in the step, 1-2 ms off
     * the fastest te step and 3-12 ms off the median on this shared 2-core machine). */
    const bool steal = nthr > 1 && by_rows;
    const int64_t ngr = (J.M + AG - 1) / AG, per = J.mb / AG, nsteps = nnb * ((J.K + KC - 1) / KC);
    mm_run *runs = NULL;
    _Atomic int64_t *done = NULL;
    if (steal) {
        runs = aligned_alloc(64, sizeof *runs * (size_t)(nsteps * nthr));
        done = malloc(sizeof *done * (size_t)ngr);
        if (!runs || !done) {
            free(runs);
            free(done);
            return FL_ERR(FL_ENOMEM, "cpu gemm: out of memory for the row runs");
        }
        for (int64_t st = 0; st < nsteps; st++)
            for (int t = 0; t < nthr; t++) {
                const int64_t f = t * per < ngr ? t * per : ngr, b = (t + 1) * per < ngr ? (t + 1) * per : ngr;
                atomic_init(&runs[st * nthr + t].v, (uint64_t)f | (uint64_t)b << 32);
            }
        for (int64_t g = 0; g < ngr; g++) atomic_init(&done[g], 0);
    }
    FL_PARALLEL(nthr > 1, num_threads(nthr),
    {
        uint8_t *buf = aligned_alloc(64, (bbytes + abytes + tbytes + 191) / 64 * 64);
        if (!buf) {
            FL_PRAGMA(omp atomic write)
            oom = true;
        }
        if (steal) {   /* a thread without its buffer takes no group; the others do them all */
            if (buf)
                run_rows_stealing(&J, runs, done, omp_get_thread_num(), nthr, buf, buf + (bbytes + 63) / 64 * 64,
                                  buf + (bbytes + 63) / 64 * 64 + (abytes + 63) / 64 * 64);
        }
        else {
            FL_PRAGMA(omp for schedule(static))
            for (int64_t t = 0; t < ntile; t++) {
                if (!buf) continue;
                const int64_t m0 = (t / nnb) * J.mb, n0 = (t % nnb) * J.nb;
                run_tile(&J, m0, J.M - m0 < J.mb ? J.M - m0 : J.mb, n0, J.N - n0 < J.nb ? J.N - n0 : J.nb,
                         buf, buf + (bbytes + 63) / 64 * 64, buf + (bbytes + 63) / 64 * 64 + (abytes + 63) / 64 * 64);
            }
        }
        free(buf);
    });
    free(runs);
    free(done);
    if (oom) return FL_ERR(FL_ENOMEM, "cpu gemm: out of memory for the packing buffers");
    return FL_OK;
}
#else
const char *fl_cpu_fp8_mm_family(void) { return NULL; }
bool fl_cpu_fp8_mm_faster(const fl_tensor *a, const fl_tensor *b) { (void)a; (void)b; return false; }
fl_status fl_cpu_fp8_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const float *bias, const float *res,
                        bool *done) {
    (void)dst; (void)a; (void)b; (void)bias; (void)res;
    *done = false;
    return FL_OK;
}
_Atomic bool fl_cpu_fma_mm_allowed = true;
bool fl_cpu_fma_mm_first(void) { return false; }
fl_status fl_cpu_fma_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool *done) {
    (void)dst; (void)a; (void)b;
    *done = false;
    return FL_OK;
}
#endif
