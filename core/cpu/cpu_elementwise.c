/* cpu_elementwise.c — binary (add/sub/mul/div, with broadcasting), tensor-scalar and unary ops.
 * Same-shape contiguous fp32 runs straight through vectorisable loops; everything else goes tile
 * by tile through fp32 scratch buffers (bf16/fp16 results rounded to nearest even on store). */
#include "cpu_internal.h"
#include <math.h>

static inline void binop_run(fl_binop op, const float *a, const float *b, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ADD:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] + b[i];
        break;
    case FL_OP_SUB:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] - b[i];
        break;
    case FL_OP_MUL:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] * b[i];
        break;
    default:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] / b[i];
        break;
    }
}

static inline void scalar_run(fl_binop op, const float *a, float s, bool first, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ADD:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] + s;
        break;
    case FL_OP_SUB:
        if (first) {
            #pragma omp simd
            for (int64_t i = 0; i < n; i++) d[i] = s - a[i];
        } else {
            #pragma omp simd
            for (int64_t i = 0; i < n; i++) d[i] = a[i] - s;
        }
        break;
    case FL_OP_MUL:
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = a[i] * s;
        break;
    default:
        if (first) {
            #pragma omp simd
            for (int64_t i = 0; i < n; i++) d[i] = s / a[i];
        } else {
            #pragma omp simd
            for (int64_t i = 0; i < n; i++) d[i] = a[i] / s;
        }
        break;
    }
}

static inline void unop_run(fl_unop op, const float *a, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ABS: for (int64_t i = 0; i < n; i++) d[i] = fabsf(a[i]); break;
    case FL_OP_NEG: for (int64_t i = 0; i < n; i++) d[i] = -a[i]; break;
    case FL_OP_EXP: for (int64_t i = 0; i < n; i++) d[i] = expf(a[i]); break;
    case FL_OP_LOG: for (int64_t i = 0; i < n; i++) d[i] = logf(a[i]); break;
    case FL_OP_SIGN: for (int64_t i = 0; i < n; i++) d[i] = a[i] > 0 ? 1.0f : a[i] < 0 ? -1.0f : a[i]; break;
    default:        for (int64_t i = 0; i < n; i++) d[i] = sqrtf(a[i]); break;
    }
}

/* All-fp32, all-contiguous, same shape: chunked for interrupt polling, threads within a chunk. */
static bool all_f32_contig(int nt, const fl_tensor *const *ts) {
    for (int k = 0; k < nt; k++)
        if (ts[k]->dtype != FL_F32 || !fl_tensor_is_contiguous(ts[k])) return false;
    return true;
}

typedef struct { int op; fl_tensor *dst; const fl_tensor *a, *b; float s; bool first; } ew_ctx;

static void binary_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], y[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    fl_cpu_load(c->b, off[2], st[2], n, y);
    binop_run((fl_binop)c->op, x, y, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

static void scalar_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    scalar_run((fl_binop)c->op, x, c->s, c->first, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

static void unary_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    unop_run((fl_unop)c->op, x, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

#define CHUNKED(n, body)                                                                  \
    for (int64_t c0 = 0; c0 < (n); c0 += FL_CPU_POLL) {                                   \
        FL_TRY(fl_check_interrupt());                                                     \
        int64_t c1 = c0 + FL_CPU_POLL < (n) ? c0 + FL_CPU_POLL : (n);                      \
        int64_t nblk = (c1 - c0 + 4095) / 4096;                                            \
        _Pragma("omp parallel for schedule(static) if (c1 - c0 >= FL_CPU_PAR_MIN)")        \
        for (int64_t blk = 0; blk < nblk; blk++) {                                        \
            int64_t i0 = c0 + blk * 4096, len = c1 - i0 < 4096 ? c1 - i0 : 4096;          \
            body;                                                                         \
        }                                                                                 \
    }

fl_status fl_cpu_dev_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    const fl_tensor *ts[3] = { dst, a, b };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(3, ts) && fl_tensor_numel(a) == n && fl_tensor_numel(b) == n) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a), *y = fl_tensor_data(b);
        CHUNKED(n, binop_run(op, x + i0, y + i0, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { op, dst, a, b, 0, false };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 3, ts, binary_tile, &c);
}

fl_status fl_cpu_dev_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first) {
    const fl_tensor *ts[2] = { dst, a };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(2, ts)) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a);
        CHUNKED(n, scalar_run(op, x + i0, (float)s, scalar_first, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { op, dst, a, NULL, (float)s, scalar_first };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, scalar_tile, &c);
}

fl_status fl_cpu_dev_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a) {
    const fl_tensor *ts[2] = { dst, a };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(2, ts)) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a);
        CHUNKED(n, unop_run(op, x + i0, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { op, dst, a, NULL, 0, false };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, unary_tile, &c);
}
