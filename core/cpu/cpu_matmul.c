/* cpu_matmul.c — batched GEMM through oneDNN's matmul primitive (fp32, bf16, fp16 inputs; fp32
 * accumulation; fp32 or input-dtype output). Each operand is row-major or column-major per batch
 * entry (stride[2] != 1 marks a transposed operand, e.g. a linear layer's Wᵀ), so no copies are made
 * for transposes. Primitives are created once per shape and kept in a
 * small LRU cache. One engine and stream for the process, made on first use. */
#include "cpu_internal.h"
#include "par.h"
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What a primitive is made for. Leading dims and batch strides in elements; the contiguous defaults
 * (lda = k or m when ta, ldb = n or k when tb, ldc = n; batch strides m·k, k·n, m·n) unless a raw
 * GEMM (fl_cpu_gemm_f32) asks for views into larger buffers. */
typedef struct {
    int64_t ba, bb, m, n, k;   /* ba/bb: batch of a and b (1 = broadcast) */
    int64_t lda, ldb, ldc, sa, sb, sc;
    int da, db, dd;            /* dnnl data types */
    int ta, tb;                /* operand stored column-major (transposed) */
    int post;                  /* epilogue: 0 none, 1 dst = acc·s, 2 dst = acc·s + bias[n] (s: one fp32 value) */
} mm_key;

typedef struct {
    mm_key key;
    dnnl_primitive_t prim;     /* NULL with `unimpl` set: oneDNN has no kernel, remembered */
    bool unimpl;
    dnnl_memory_desc_t md[5];  /* src, weights, dst; the epilogue's scale {1,1,1} and bias {1,1,n} */
    uint64_t used;
} mm_entry;

static mm_key mm_dense_key(int64_t ba, int64_t bb, int64_t m, int64_t n, int64_t k, dnnl_data_type_t da,
                           dnnl_data_type_t db, dnnl_data_type_t dd, int ta, int tb) {
    return (mm_key){ ba, bb, m, n, k, ta ? m : k, tb ? k : n, n, m * k, k * n, m * n, (int)da, (int)db, (int)dd, ta, tb, 0 };
}

static bool mm_key_eq(const mm_key *x, const mm_key *y) {
    return x->ba == y->ba && x->bb == y->bb && x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda &&
           x->ldb == y->ldb && x->ldc == y->ldc && x->sa == y->sa && x->sb == y->sb && x->sc == y->sc &&
           x->da == y->da && x->db == y->db && x->dd == y->dd && x->ta == y->ta && x->tb == y->tb && x->post == y->post;
}

/* Every linear layer shape x 3 GEMMs, x 2 dtypes under autocast, plus the row-block GEMMs of attention. */
#define MM_CACHE 128
static struct {
    pthread_mutex_t lock;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mm_entry e[MM_CACHE];
    uint64_t tick;
} mm = { .lock = PTHREAD_MUTEX_INITIALIZER };

#define DNNL_CHECK(call)                                                                       \
    do { dnnl_status_t s_ = (call);                                                            \
         if (s_ != dnnl_success) return fl_cpu_dnnl_status(s_, "matmul", #call); } while (0)

static dnnl_data_type_t dnnl_dt(fl_dtype t) {
    return t == FL_F32 ? dnnl_f32 : t == FL_BF16 ? dnnl_bf16 : dnnl_f16;
}

static fl_status mm_init(void) {
    if (mm.engine) return FL_OK;
    /* FP8LAB_CPU_ISA's cap (cpu_isa.h), handed over before oneDNN picks its kernels; nothing for "amx". */
    static const dnnl_cpu_isa_t DNNL_ISA[FL_ISA_COUNT] = { dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core,
                                                           dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_all };
    const fl_isa isa = fl_cpu_isa_freeze();
    if (isa != FL_ISA_AMX) DNNL_CHECK(dnnl_set_max_cpu_isa(DNNL_ISA[isa]));
    DNNL_CHECK(dnnl_engine_create(&mm.engine, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&mm.stream, mm.engine, dnnl_stream_default_flags));
    return FL_OK;
}

fl_status fl_cpu_dnnl_acquire(void **engine, void **stream) {
    pthread_mutex_lock(&mm.lock);
    fl_status st = mm_init();
    if (st != FL_OK) { pthread_mutex_unlock(&mm.lock); return st; }
    *engine = mm.engine;
    *stream = mm.stream;
    return FL_OK;
}
void fl_cpu_dnnl_release(void) { pthread_mutex_unlock(&mm.lock); }

/* oneDNN 2.6's AMX bf16 matmul (brg:avx512_core_amx_bf16) dies of SIGILL on a tile instruction for K = 63 with two
 * threads, every M and N tried (1-34 and 1-200 rows and columns; one thread, or the kernels capped below AMX, run
 * it; upstream oneDNN issue 1661 on 2.7). A 2026-12-05 sweep of K = 1-140 and of 31 + 32j up to 1023 found no other
 * K. So bf16 GEMMs with K under 64 and not a multiple of 32 — small GEMMs, where the tiles buy little — are
 * declined here where oneDNN runs AMX, and the callers take their fp32 path (every bf16 value is exact in fp32, and
 * both accumulate in fp32). docs/robustness.md, "Audited by hand, fourth round". */
static bool amx_k_tail(const mm_key *key) {
    return (key->da == dnnl_bf16 || key->db == dnnl_bf16) && key->k < 64 && key->k % 32 != 0 && fl_cpu_amx();
}

/* Find or create the primitive. Sets *unimpl instead of failing when oneDNN has no
 * implementation for this combination (or amx_k_tail declines it), so the caller can fall back. */
bool fl_cpu_matmul_drop_oldest(void) {
    mm_entry *old = NULL;
    for (int i = 0; i < MM_CACHE; i++)
        if (mm.e[i].prim && (!old || mm.e[i].used < old->used)) old = &mm.e[i];
    if (!old) return false;
    dnnl_primitive_destroy(old->prim);
    *old = (mm_entry){ 0 };   /* an empty slot (used 0): mm_get takes it first */
    return true;
}

static fl_status mm_get(mm_entry **out, const mm_key *key, bool *unimpl) {
    *unimpl = false;
    if (amx_k_tail(key)) {
        *unimpl = true;
        *out = NULL;
        return FL_OK;
    }
    mm_entry *lru = &mm.e[0];
    for (int i = 0; i < MM_CACHE; i++) {
        mm_entry *e = &mm.e[i];
        if ((e->prim || e->unimpl) && mm_key_eq(&e->key, key)) {
            e->used = ++mm.tick;
            *out = e;
            *unimpl = e->unimpl;
            return FL_OK;
        }
        if (e->used < lru->used) lru = e;   /* empty slots have used == 0 */
    }
    const mm_key *q = key;
    int64_t bd = q->ba > q->bb ? q->ba : q->bb;
    dnnl_dims_t ad = { q->ba, q->m, q->k }, as = { q->sa, q->lda, 1 }, ast = { q->sa, 1, q->lda };
    dnnl_dims_t wd = { q->bb, q->k, q->n }, ws = { q->sb, q->ldb, 1 }, wst = { q->sb, 1, q->ldb };
    dnnl_dims_t dd3 = { bd, q->m, q->n }, ds = { q->sc, q->ldc, 1 };
    dnnl_memory_desc_t md[5];
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md[0], 3, ad, (dnnl_data_type_t)q->da, q->ta ? ast : as));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md[1], 3, wd, (dnnl_data_type_t)q->db, q->tb ? wst : ws));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&md[2], 3, dd3, (dnnl_data_type_t)q->dd, ds));
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]));
    /* The epilogue as binary post-ops read at run time (a changing scale needs no new primitive), so
     * the JIT brgemm kernel stays: oneDNN 2.6's run-time output scales select a slower kernel here.
     * The bias is a post-op too, after the scale: a matmul bias would be added before it. */
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    const dnnl_dims_t one = { 1, 1, 1 }, row = { 1, 1, q->n };
    memset(&md[3], 0, 2 * sizeof md[3]);
    if (q->post) {
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[3], 3, one, dnnl_f32, dnnl_abc));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[4], 3, row, dnnl_f32, dnnl_abc));
        DNNL_CHECK(dnnl_primitive_attr_create(&attr));
        dnnl_status_t ps = dnnl_post_ops_create(&po);
        if (ps == dnnl_success) ps = dnnl_post_ops_append_binary(po, dnnl_binary_mul, &md[3]);
        if (ps == dnnl_success && q->post == 2) ps = dnnl_post_ops_append_binary(po, dnnl_binary_add, &md[4]);
        if (ps == dnnl_success) ps = dnnl_primitive_attr_set_post_ops(attr, po);
        if (po) dnnl_post_ops_destroy(po);
        if (ps != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            return fl_cpu_dnnl_status(ps, "matmul", "post-ops (the epilogue)");
        }
    }
    dnnl_primitive_desc_t pd;
    /* the descriptor may JIT kernels too: the room for them first (fl_cpu_dnnl_room) */
    fl_status rs = fl_cpu_dnnl_room("matmul", 0);
    dnnl_status_t s = rs == FL_OK ? dnnl_primitive_desc_create(&pd, &desc, attr, mm.engine, NULL) : dnnl_out_of_memory;
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rs != FL_OK) return rs;
    if (s == dnnl_out_of_memory) return FL_ERR(FL_ENOMEM, "matmul: out of memory making oneDNN's descriptor");
    if (s == dnnl_success && q->post) {
        /* Only the JIT kernels are worth fusing into: a reference kernel is answered as missing. */
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
            strncmp(impl, "ref", 3) == 0) {
            dnnl_primitive_desc_destroy(pd);
            s = dnnl_unimplemented;
        }
    }
    if (s == dnnl_unimplemented) {
        if (lru->prim) dnnl_primitive_destroy(lru->prim);
        *lru = (mm_entry){ *key, NULL, true, { md[0], md[1], md[2], md[3], md[4] }, ++mm.tick };
        *unimpl = true;
        return FL_OK;
    }
    if (s != dnnl_success) return FL_ERR(FL_EDEVICE, "oneDNN dnnl_primitive_desc_create(matmul) failed (status %d)", (int)s);
    dnnl_primitive_t prim;
    fl_status cs = fl_cpu_dnnl_create(&prim, pd, "matmul");
    dnnl_primitive_desc_destroy(pd);
    if (cs != FL_OK) return cs;
    if (lru->prim) dnnl_primitive_destroy(lru->prim);
    *lru = (mm_entry){ *key, prim, false, { md[0], md[1], md[2], md[3], md[4] }, ++mm.tick };
    *out = lru;
    return FL_OK;
}

/* Runs e on a, b → d; with an epilogue, `scale` (one fp32 value) and `bias` (n values, post == 2). */
static fl_status mm_exec_post(mm_entry *e, const void *a, const void *b, void *d, const float *scale, const float *bias) {
    int nmem = e->key.post == 0 ? 3 : e->key.post == 1 ? 4 : 5;
    dnnl_memory_t mem[5] = { NULL, NULL, NULL, NULL, NULL };
    void *ptr[5] = { (void *)a, (void *)b, d, (void *)scale, (void *)bias };
    fl_status st = FL_OK;
    for (int i = 0; i < nmem && st == FL_OK; i++) {
        /* out of memory here is FL_ENOMEM, which the binding collects and retries (until stop 101 a device error) */
        dnnl_status_t s = fl_cpu_dnnl_fail_injected("memory_create") ? dnnl_out_of_memory
                                                                     : dnnl_memory_create(&mem[i], &e->md[i], mm.engine, ptr[i]);
        if (s != dnnl_success) mem[i] = NULL;
        st = fl_cpu_dnnl_status(s, "matmul", "dnnl_memory_create");
    }
    if (st == FL_OK) {
        dnnl_exec_arg_t args[5] = { { DNNL_ARG_SRC, mem[0] }, { DNNL_ARG_WEIGHTS, mem[1] }, { DNNL_ARG_DST, mem[2] },
                                    { DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mem[3] },
                                    { DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, mem[4] } };
        dnnl_status_t s = fl_cpu_dnnl_fail_injected("execute") ? dnnl_out_of_memory
                                                               : dnnl_primitive_execute(e->prim, mm.stream, nmem, args);
        if (s == dnnl_success) s = dnnl_stream_wait(mm.stream);
        st = fl_cpu_dnnl_status(s, "matmul", "dnnl_primitive_execute");
    }
    for (int i = 0; i < nmem; i++) if (mem[i]) dnnl_memory_destroy(mem[i]);
    return st;
}

static fl_status mm_exec(mm_entry *e, const void *a, const void *b, void *d) { return mm_exec_post(e, a, b, d, NULL, NULL); }

/* Under the lock: find or make key's primitive and run it; *ran = false (nothing done) when oneDNN has none. */
static fl_status mm_run(const mm_key *key, const void *a, const void *b, void *d, const float *scale, const float *bias,
                        bool *ran) {
    *ran = false;
    pthread_mutex_lock(&mm.lock);
    mm_entry *e = NULL;
    bool unimpl = false;
    fl_status st = mm_init();
    if (st == FL_OK) st = mm_get(&e, key, &unimpl);
    if (st == FL_OK && !unimpl) {
        st = mm_exec_post(e, a, b, d, scale, bias);
        *ran = st == FL_OK;
    }
    pthread_mutex_unlock(&mm.lock);
    return st;
}

/* Widen a contiguous 16-bit tensor to a new fp32 one (the fallback when oneDNN lacks a kernel). */
static fl_status widen(fl_tensor **out, const fl_tensor *t) {
    fl_tensor *f;
    FL_TRY(fl_tensor_empty(&f, FL_F32, t->ndim, t->shape, FL_DEV_CPU));
    for (int i = 0; i < t->ndim; i++) f->stride[i] = t->stride[i];   /* keep the batch stride 0 */
    const int64_t n = t->stride[0] == 0 ? t->shape[1] * t->shape[2] : fl_tensor_numel(t), blk = 1 << 16;
    float *d = fl_tensor_data(f);
    FL_PAR_FOR(n > 4 * FL_CPU_PAR_MIN, schedule(static),
    for (int64_t o = 0; o < n; o += blk) fl_cpu_load(t, o, 1, n - o < blk ? n - o : blk, d + o););
    *out = f;
    return FL_OK;
}

static fl_status matmul_locked(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    /* Large fp32 GEMMs on a CPU without AVX-512: the CPU device's own GEMM (cpu_fp8_mm.h's AVX2 + FMA family),
     * which on Zen 3 ran the GPT step's GEMMs (0.27-1.07 GFLOP each) at 0.84-0.90 of oneDNN 2.6's time, its
     * wgrads (a transposed A, K = 2048) at 0.6; oneDNN stays faster on the MLP's (0.07-0.21 GFLOP, 256 rows)
     * (docs/performance.md, "fp32 and bf16 GEMMs without AVX-512"). */
    const double flops = 2.0 * (double)dst->shape[1] * (double)dst->shape[2] * (double)a->shape[2];
    if (a->dtype == FL_F32 && b->dtype == FL_F32 && dst->dtype == FL_F32 && flops >= FL_CPU_FMA_MM_F32_MIN &&
        !fl_cpu_avx512()) {
        bool done = false;
        FL_TRY(fl_cpu_fma_mm(dst, a, b, &done));
        if (done) return FL_OK;
    }
    /* 16-bit GEMMs on an AVX-512 CPU whose fastest family is an FMA one: the CPU device's own (fl_cpu_fma_mm_first;
     * on CPUs without AVX-512 they come below, where oneDNN has no kernel). */
    if ((a->dtype == FL_BF16 || a->dtype == FL_F16) && b->dtype == a->dtype && fl_cpu_avx512() &&
        fl_cpu_fma_mm_first()) {
        bool done = false;
        FL_TRY(fl_cpu_fma_mm(dst, a, b, &done));
        if (done) return FL_OK;
    }
    FL_TRY(mm_init());
    int64_t B = dst->shape[0], M = dst->shape[1], N = dst->shape[2], K = a->shape[2];
    int64_t ba = (a->stride[0] == 0 && B > 1) ? 1 : B, bb = (b->stride[0] == 0 && B > 1) ? 1 : B;
    dnnl_data_type_t da = dnnl_dt(a->dtype), db = dnnl_dt(b->dtype), dd = dnnl_dt(dst->dtype);
    int ta = a->stride[2] != 1, tb = b->stride[2] != 1;
    mm_entry *e;
    bool unimpl;
    mm_key key = mm_dense_key(ba, bb, M, N, K, da, db, dd, ta, tb);
    FL_TRY(mm_get(&e, &key, &unimpl));
    if (!unimpl) {
        FL_TRY(mm_exec(e, fl_tensor_data(a), fl_tensor_data(b), fl_tensor_data(dst)));
        /* Both operands broadcast along the batch (batch stride 0, as an expanded [1, M, K]): the key's batch of
         * max(ba, bb) = 1 wrote C's first entry only; every other entry is the same product. */
        if (ba == 1 && bb == 1 && B > 1) {
            const size_t bytes = (size_t)(M * N) * fl_format(dst->dtype)->size;
            char *c = fl_tensor_data(dst);
            for (int64_t i = 1; i < B; i++) memcpy(c + (size_t)i * bytes, c, bytes);
        }
        return FL_OK;
    }
    /* No batched-broadcast kernel: one GEMM per batch entry. */
    if (B > 1 && (ba == 1 || bb == 1)) {
        key = mm_dense_key(1, 1, M, N, K, da, db, dd, ta, tb);
        FL_TRY(mm_get(&e, &key, &unimpl));
        if (!unimpl) {
            size_t ea = fl_format(a->dtype)->size, eb = fl_format(b->dtype)->size, ed = fl_format(dst->dtype)->size;
            for (int64_t i = 0; i < B; i++) {
                FL_TRY(fl_check_interrupt());
                FL_TRY(mm_exec(e, (const char *)fl_tensor_data(a) + (ba > 1 ? i * M * K * (int64_t)ea : 0),
                               (const char *)fl_tensor_data(b) + (bb > 1 ? i * K * N * (int64_t)eb : 0),
                               (char *)fl_tensor_data(dst) + i * M * N * (int64_t)ed));
            }
            return FL_OK;
        }
    }
    if (a->dtype == FL_F32 && b->dtype == FL_F32 && dst->dtype == FL_F32)
        return FL_ERR(FL_EDEVICE, "oneDNN has no fp32 matmul for [%lld, %lld, %lld] x [%lld, %lld, %lld]",
                      (long long)ba, (long long)M, (long long)K, (long long)bb, (long long)K, (long long)N);
    /* 16-bit inputs without a kernel (bf16 and fp16 on a CPU without AVX-512): the CPU device's own GEMM, which
     * widens them while packing its panels (cpu_fp8_mm.h's AVX2 + FMA family; docs/performance.md, "fp32 and
     * bf16 GEMMs without AVX-512": the GPT's at 0.73-0.84 of the time of widened copies for oneDNN's fp32 GEMM,
     * the MLP's level, no copies). Where AVX-512 fp32 GEMMs run, or the family declines: every value is exact in
     * fp32, so an fp32 GEMM on widened copies gives the same fp32-accumulated products. */
    if (!fl_cpu_avx512()) {
        bool done = false;
        FL_TRY(fl_cpu_fma_mm(dst, a, b, &done));
        if (done) return FL_OK;
    }
    fl_tensor *fa = NULL, *fb = NULL, *fd = NULL;
    fl_status st = a->dtype == FL_F32 ? (fa = fl_tensor_retain((fl_tensor *)a), FL_OK) : widen(&fa, a);
    if (st == FL_OK) st = b->dtype == FL_F32 ? (fb = fl_tensor_retain((fl_tensor *)b), FL_OK) : widen(&fb, b);
    if (st == FL_OK) st = dst->dtype == FL_F32 ? (fd = fl_tensor_retain(dst), FL_OK)
                                               : fl_tensor_empty(&fd, FL_F32, 3, dst->shape, FL_DEV_CPU);
    if (st == FL_OK) st = matmul_locked(fd, fa, fb);
    if (st == FL_OK && fd != dst) fl_cpu_store(dst, 0, 1, fl_tensor_numel(dst), fl_tensor_data(fd));
    fl_tensor_release(fa);
    fl_tensor_release(fb);
    fl_tensor_release(fd);
    return st;
}

static fl_status gemm_raw(fl_dtype in, int64_t batch, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                          int64_t sa, bool ta, const void *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc,
                          int64_t sc);

/* The elements a strided operand spans: rows of ld apart, batch entries sa apart (0: one shared entry). */
static size_t span_of(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t s) {
    return (size_t)((batch - 1) * s + (rows - 1) * ld + cols);
}

/* A bf16 GEMM amx_k_tail declines: fp32 copies of both operands' spans, same layout, through the fp32 GEMM. */
static fl_status gemm_bf16_widened(int64_t batch, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                                   int64_t sa, bool ta, const void *b, int64_t ldb, int64_t sb, bool tb, float *c,
                                   int64_t ldc, int64_t sc) {
    const size_t na = span_of(batch, ta ? k : m, ta ? m : k, lda, sa), nb = span_of(batch, tb ? n : k, tb ? k : n, ldb, sb);
    float *fa = malloc(na * sizeof(float)), *fb = malloc(nb * sizeof(float));
    fl_status st = FL_OK;
    if (!fa || !fb) st = FL_ERR(FL_ENOMEM, "gemm: out of memory widening bf16 operands (%zu and %zu values)", na, nb);
    if (st == FL_OK) {
        fl_bf16_to_f32_n(a, fa, na);
        fl_bf16_to_f32_n(b, fb, nb);
        st = gemm_raw(FL_F32, batch, m, n, k, fa, lda, sa, ta, fb, ldb, sb, tb, c, ldc, sc);
    }
    free(fa);
    free(fb);
    return st;
}

static fl_status gemm_raw(fl_dtype in, int64_t batch, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                          int64_t sa, bool ta, const void *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc,
                          int64_t sc) {
    if (batch <= 0 || m <= 0 || n <= 0 || k <= 0)
        return FL_ERR(FL_EINVAL, "gemm: empty shape %lld x [%lld, %lld, %lld]", (long long)batch, (long long)m, (long long)n, (long long)k);
    mm_key key = { batch, batch, m, n, k, lda, ldb, ldc, sa, sb, sc, dnnl_dt(in), dnnl_dt(in), dnnl_f32, ta, tb, 0 };
    if (in == FL_BF16 && amx_k_tail(&key)) return gemm_bf16_widened(batch, m, n, k, a, lda, sa, ta, b, ldb, sb, tb, c, ldc, sc);
    bool ran = false;
    FL_TRY(mm_run(&key, a, b, c, NULL, NULL, &ran));
    /* a CPU without AVX-512 (Zen 3): oneDNN 2.6 has no bf16 matmul at all; the widened copies give the same
     * fp32-accumulated products (test_fma_mm's small-K tails failed there, and attention's bf16 GEMM route fell to
     * its row loops) */
    if (!ran && in == FL_BF16) return gemm_bf16_widened(batch, m, n, k, a, lda, sa, ta, b, ldb, sb, tb, c, ldc, sc);
    if (!ran) return FL_ERR(FL_EDEVICE, "oneDNN has no %s batched matmul for %lld x [%lld, %lld, %lld]",
                            fl_format(in)->name, (long long)batch, (long long)m, (long long)n, (long long)k);
    return FL_OK;
}

fl_status fl_cpu_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int64_t sa, bool ta,
                          const float *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc, int64_t sc) {
    return gemm_raw(FL_F32, batch, m, n, k, a, lda, sa, ta, b, ldb, sb, tb, c, ldc, sc);
}

fl_status fl_cpu_gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, int64_t sa,
                           bool ta, const uint16_t *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc, int64_t sc) {
    return gemm_raw(FL_BF16, batch, m, n, k, a, lda, sa, ta, b, ldb, sb, tb, c, ldc, sc);
}

fl_status fl_cpu_dev_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    if (a->ndim != 3 || b->ndim != 3 || dst->ndim != 3)
        return FL_ERR(FL_EINVAL, "cpu matmul expects 3-d operands, got %d-d and %d-d", a->ndim, b->ndim);
    FL_TRY(fl_check_interrupt());
    pthread_mutex_lock(&mm.lock);
    fl_status st = matmul_locked(dst, a, b);
    pthread_mutex_unlock(&mm.lock);
    return st;
}

/* c[m, n] (fp32, row stride n) = a[m, k] · b[n, k]ᵀ of row-major bf16 operands (a linear layer's x and W), through
 * the primitive fl_cpu_dev_matmul runs for that dense bf16 linear of m rows: its key, so its sums, bit for bit.
 * *ran = false, nothing written, where fl_cpu_dev_matmul would take another path (matmul_locked's order): the CPU's
 * own FMA family where it comes first, or no oneDNN kernel (amx_k_tail's K; a CPU without AVX-512). */
fl_status fl_cpu_matmul_bf16_nt(const uint16_t *a, const uint16_t *b, float *c, int64_t m, int64_t n, int64_t k,
                                bool *ran) {
    *ran = false;
    if (m <= 0 || n <= 0 || k <= 0 || (fl_cpu_avx512() && fl_cpu_fma_mm_first())) return FL_OK;
    FL_TRY(fl_check_interrupt());
    const mm_key key = mm_dense_key(1, 1, m, n, k, dnnl_bf16, dnnl_bf16, dnnl_f32, 0, 1);
    return mm_run(&key, a, b, c, NULL, NULL, ran);
}

/* dst[M, N] (fp32, contiguous) = (a[M, K] · b[K, N]) · scale (+ bias[N]) in one oneDNN call: 16-bit or
 * fp32 operands, each row- or column-major. Sets *done = false, touching nothing, when oneDNN has no JIT
 * kernel for the fused form; the caller then runs the GEMM and its own epilogue pass. */
fl_status fl_cpu_matmul_scaled(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, float scale, const float *bias,
                               bool *done) {
    *done = false;
    if (a->ndim != 2 || b->ndim != 2 || dst->ndim != 2 || dst->dtype != FL_F32 || !fl_tensor_is_contiguous(dst) ||
        a->dtype != b->dtype)
        return FL_OK;
    int64_t M = dst->shape[0], N = dst->shape[1], K = a->shape[1];
    int ta = a->stride[1] != 1, tb = b->stride[1] != 1;
    if ((ta ? a->stride[0] != 1 || a->stride[1] != M : a->stride[0] != K) ||
        (tb ? b->stride[0] != 1 || b->stride[1] != K : b->stride[0] != N) || K == 0)
        return FL_OK;
    FL_TRY(fl_check_interrupt());
    mm_key key = mm_dense_key(1, 1, M, N, K, dnnl_dt(a->dtype), dnnl_dt(b->dtype), dnnl_f32, ta, tb);
    key.post = bias ? 2 : 1;
    return mm_run(&key, fl_tensor_data(a), fl_tensor_data(b), fl_tensor_data(dst), &scale, bias, done);
}
