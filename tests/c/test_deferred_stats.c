/* test_deferred_stats.c — cast statistics that a device reports later (tensor.h fl_stats_future,
 * scaling.h pending observations), as the CUDA device does to avoid a stream sync per FP8 cast. A stand-in
 * device ("deferred": the CPU's kernels, but every cast hands its statistics back through a future and
 * poisons qstats, and like CUDA casts with a transposed copy that the FP8 linear hands to its GEMMs) runs
 * the FP8 linear of every granularity for a few training steps after the plain CPU did: outputs, gradients
 * and recipe state must be the same bits, the observations must really wait until the update, the
 * transposed copies must hold the operands' bytes K-major, and every future must be freed. Needs no GPU. */
#include "runner.h"
#include <float.h>
#include <stdlib.h>
#include "autograd.h"
#include "device.h"
#include "fp8_linear.h"
#include "ops.h"
#include "scaling.h"
#include "rng.h"

static int live_futures, waits, fail_waits;

typedef struct {
    fl_stats_future base;
    fl_cast_stats st;
} fake_future;

static fl_status fake_wait(fl_stats_future *f, fl_cast_stats *out) {
    waits++;
    if (fail_waits) return FL_ERR(FL_EDEVICE, "deferred device: the stream failed (injected)");
    *out = ((fake_future *)f)->st;
    return FL_OK;
}

static void fake_destroy(fl_stats_future *f) {
    live_futures--;
    free(f);
}

/* Move dst's statistics into a future and poison qstats, so a reader that skips the future notices. */
static fl_status defer(fl_tensor *dst) {
    fake_future *f = malloc(sizeof *f);
    if (!f) return FL_ERR(FL_ENOMEM, "deferred device: out of memory");
    f->base = (fl_stats_future){ 1, fake_wait, fake_destroy };
    f->st = dst->qstats;
    live_futures++;
    fl_stats_future_release(dst->qfuture);
    dst->qfuture = &f->base;
    dst->qstats = (fl_cast_stats){ NAN, -1, -1, -1 };
    return FL_OK;
}

static fl_status fake_quantize(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p) {
    FL_TRY(fl_cpu_device()->quantize(dst, src, scales, axis, p));
    return defer(dst);
}

static fl_status fake_quantize_current(fl_tensor *dst, const fl_tensor *src, int axis, int margin, bool pow2,
                                       fl_overflow p) {
    FL_TRY(fl_cpu_device()->quantize_current(dst, src, axis, margin, pow2, p));
    return defer(dst);
}

/* quantize_transpose as the CUDA device has it: the cast plus its bytes transposed, sharing the future. */
static fl_status fake_quantize_transpose(fl_tensor *dst, fl_tensor *dst_t, const fl_tensor *src, const float *scale,
                                         int margin, bool pow2, fl_overflow p) {
    const fl_device *cpu = fl_cpu_device();
    FL_TRY(scale ? cpu->quantize(dst, src, scale, -1, p) : cpu->quantize_current(dst, src, -1, margin, pow2, p));
    const int64_t R = src->shape[0], C = src->shape[1];
    const uint8_t *q = fl_tensor_data(dst);
    uint8_t *t = fl_tensor_data(dst_t);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) t[c * R + r] = q[r * C + c];
    FL_TRY(defer(dst));
    dst_t->qfuture = fl_stats_future_retain(dst->qfuture);
    return FL_OK;
}

static int slots_checked, slots_bad;

/* Byte (i, j) of a 2-D FP8 tensor or view. */
static uint8_t byte_at(const fl_tensor *t, int64_t i, int64_t j) {
    return ((const uint8_t *)fl_tensor_data(t))[i * t->stride[0] + j * t->stride[1]];
}

/* Where CUDA's GEMM reads a slot instead of transposing — an operand not stored K-major (a as a transposed
 * view, b stored [K, N]) — a slot prefilled with FP8 bytes must hold it K-major: a [M, K] as [M, K], b [K, N]
 * as [N, K]. (The same slot serves the other GEMM in the other orientation, where it is not read.) The CPU's
 * GEMM then runs without the slots: they hold bf16 decodes there. */
static void check_slot(const fl_tensor *op, fl_tensor **slot, bool is_b) {
    if (!slot || !*slot || !fl_format((*slot)->dtype)->is_fp8) return;
    if (fl_tensor_is_contiguous(op) != is_b) return;   /* stored K-major already: the slot is not read */
    const fl_tensor *s = *slot;
    int64_t R = is_b ? op->shape[1] : op->shape[0], C = is_b ? op->shape[0] : op->shape[1];
    slots_checked++;
    if (s->dtype != op->dtype || s->ndim != 2 || s->shape[0] != R || s->shape[1] != C) { slots_bad++; return; }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (byte_at(s, i, j) != (is_b ? byte_at(op, j, i) : byte_at(op, i, j))) { slots_bad++; return; }
}

static fl_status fake_fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                               fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum) {
    check_slot(a, a_cache, false);
    check_slot(b, b_cache, true);
    return fl_cpu_device()->fp8_gemm(dst, a, b, bias, NULL, NULL, fast_accum);
}

static fl_device fake;

/* The stand-in takes the CPU's slot (its kernels check for CPU tensors, so it must be "the CPU"); every
 * test puts the real CPU back before it checks anything. */
static void install_fake(void) {
    fake = *fl_cpu_device();
    fake.quantize = fake_quantize;
    fake.quantize_current = fake_quantize_current;
    fake.quantize_transpose = fake_quantize_transpose;
    fake.fp8_gemm = fake_fp8_gemm;
    fake.quantize_rows_aux = NULL;   /* as on CUDA: rowwise dY takes the separate passes, its casts deferred */
    fl_device_register(FL_DEV_CPU, &fake);
}

static void remove_fake(void) { fl_device_register(FL_DEV_CPU, NULL); }

TEST(deferred_qstats_resolve_once_through_views) {
    live_futures = waits = 0;
    float v[6] = { 1, -3, 0.5f, 1e-9f, 1000, -2 };
    int64_t shape[2] = { 2, 3 };
    fl_tensor *x = NULL, *q = NULL, *view = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&x, v, 2, shape, FL_F32));
    install_fake();
    fl_status st = fl_fp8_cast_current_2d(&q, x, FL_E4M3, -1, 0, false);
    remove_fake();
    REQUIRE_OK(st);
    CHECK(q->qfuture && live_futures == 1, "the cast left its statistics pending");
    REQUIRE_OK(fl_tensor_transpose(&view, q, 0, 1));
    CHECK(view->qfuture == q->qfuture && q->qfuture->refcount == 2, "a view shares the future");
    fl_cast_stats a, b;
    REQUIRE_OK(fl_tensor_qstats(view, &a));
    REQUIRE_OK(fl_tensor_qstats(q, &b));
    CHECK(a.amax == 1000.0f && b.amax == 1000.0f && a.underflow == 1 && b.saturated == 0,
          "amax %g/%g underflow %lld", a.amax, b.amax, (long long)a.underflow);
    CHECK(waits == 2 && !q->qfuture && !view->qfuture, "each header waits once, then keeps the values");
    CHECK(live_futures == 0, "%d futures alive", live_futures);
    fl_tensor_release(view); fl_tensor_release(q); fl_tensor_release(x);
}

enum { N = 32, K = 48, M = 16 };

typedef struct { fl_tensor *x, *w, *b, *g; } lin;

static fl_status make_lin(lin *c, int device, uint64_t seed) {
    fl_rng r;
    fl_rng_seed(&r, seed);
    int64_t sx[2] = { N, K }, sw[2] = { M, K }, sb[1] = { M }, sg[2] = { N, M };
    fl_tensor *t[4] = { NULL, NULL, NULL, NULL };
    FL_TRY(fl_randn(&t[0], &r, 2, sx, FL_F32));
    FL_TRY(fl_randn(&t[1], &r, 2, sw, FL_F32));
    FL_TRY(fl_randn(&t[2], &r, 1, sb, FL_F32));
    FL_TRY(fl_randn(&t[3], &r, 2, sg, FL_F32));
    fl_tensor **dst[4] = { &c->x, &c->w, &c->b, &c->g };
    for (int i = 0; i < 4; i++) {
        FL_TRY(fl_tensor_to_device(dst[i], t[i], device));
        fl_tensor_release(t[i]);
        if (i < 3) fl_tensor_set_requires_grad(*dst[i], true);
    }
    return FL_OK;
}

static void free_lin(lin *c) {
    fl_tensor_release(c->x); fl_tensor_release(c->w); fl_tensor_release(c->b); fl_tensor_release(c->g);
}

/* A layer: TENSOR granularity with delayed roles (te), current roles (ao tensorwise / MS-AMP's pow2
 * weights), or ROWWISE (ao rowwise). */
static fl_fp8_layer *layer(int kind) {
    fl_scaling r[3];
    fl_scale_rule wr = kind == 1 || kind == 2 ? FL_SCALE_CURRENT : FL_SCALE_DELAYED;
    fl_scale_rule xr = kind == 1 || kind == 3 ? FL_SCALE_CURRENT : FL_SCALE_DELAYED;
    bool pow2 = kind >= 2;
    fl_scaling_init(&r[0], FL_E4M3, xr, pow2, 0, FL_AMAX_MAX, 4, 1);
    fl_scaling_init(&r[1], FL_E4M3, wr, pow2, 0, FL_AMAX_MAX, 4, 1);
    fl_scaling_init(&r[2], FL_E5M2, xr, pow2, 1, FL_AMAX_MOST_RECENT, 4, 1);
    fl_fp8_layer *l = NULL;
    fl_fp8_layer_new(&l, r, NULL, kind == 3 ? FL_GRAN_ROWWISE : FL_GRAN_TENSOR);
    return l;
}

/* One step: forward, backward, a small SGD-like change to w (so the weight cache is re-made every other
 * step), host copies of y and the three gradients into out[]. */
static fl_status step(lin *c, fl_fp8_layer *l, int s, float *out) {
    fl_tensor *y = NULL, *h[4] = { NULL, NULL, NULL, NULL };
    FL_TRY(fl_fp8_linear(&y, c->x, c->w, c->b, l, true, NULL, NULL));
    fl_status st = fl_backward(y, c->g, false);
    const fl_tensor *src[4] = { y, c->x->grad, c->w->grad, c->b->grad };
    size_t off = 0;
    for (int i = 0; i < 4 && st == FL_OK; i++) {
        st = fl_tensor_to_device(&h[i], src[i], FL_DEV_CPU);
        if (st == FL_OK) st = fl_tensor_read_f32(h[i], out + off);
        if (st == FL_OK) off += (size_t)fl_tensor_numel(h[i]);
    }
    if (st == FL_OK && s % 2 == 1) {
        fl_tensor *dw = NULL, *nw = NULL;
        st = fl_binary_scalar(&dw, FL_OP_MUL, c->w->grad, 1e-3, false);
        if (st == FL_OK) st = fl_binary(&nw, FL_OP_SUB, c->w, dw);
        if (st == FL_OK) st = fl_tensor_copy_(c->w, nw);   /* bumps the version: the weight cache is stale */
        fl_tensor_release(dw);
        fl_tensor_release(nw);
    }
    fl_tensor_zero_grad(c->x); fl_tensor_zero_grad(c->w); fl_tensor_zero_grad(c->b);
    for (int i = 0; i < 4; i++) fl_tensor_release(h[i]);
    fl_tensor_release(y);
    return st;
}

enum { STEPS = 4, OUT = N * M + N * K + M * K + M };

/* What one step leaves: outputs and gradients, each role after the update, and what was pending before it. */
typedef struct {
    float out[OUT];
    fl_scaling role[FL_NROLES];    /* shallow copies; history copied into hist */
    float hist[FL_NROLES][4];
    int pending_x, pending_g, waited;
    float hist0_x;
} snapshot;

/* STEPS training steps of a fresh layer of `kind` (same seed every time) into snap[]. */
static fl_status run_kind(int kind, snapshot *snap, int64_t *hits) {
    lin c;
    FL_TRY(make_lin(&c, FL_DEV_CPU, 11));
    fl_fp8_layer *l = layer(kind);
    fl_status st = FL_OK;
    for (int s = 0; s < STEPS && st == FL_OK; s++) {
        snapshot *sn = &snap[s];
        st = step(&c, l, s, sn->out);
        sn->pending_x = l->role[FL_ROLE_INPUT].npending;
        sn->pending_g = l->role[FL_ROLE_GRAD].npending;
        sn->hist0_x = l->role[FL_ROLE_INPUT].history[0];
        int w0 = waits;
        if (st == FL_OK) st = fl_fp8_layer_update(l);
        sn->waited = waits - w0;
        for (int i = 0; i < FL_NROLES; i++) {
            sn->role[i] = l->role[i];
            memcpy(sn->hist[i], l->role[i].history, sizeof sn->hist[i]);
        }
    }
    *hits = l->cache_hits;
    fl_fp8_layer_release(l);
    free_lin(&c);
    return st;
}

static bool same_role(const fl_scaling *a, const float *ha, const fl_scaling *b, const float *hb) {
    return memcmp(&a->scale, &b->scale, sizeof(float)) == 0 && memcmp(&a->scale_inv, &b->scale_inv, sizeof(float)) == 0 &&
           memcmp(ha, hb, 4 * sizeof(float)) == 0 && a->updates == b->updates &&
           memcmp(&a->last_amax, &b->last_amax, sizeof(float)) == 0 && a->last_n == b->last_n &&
           a->last_underflow == b->last_underflow && a->last_saturated == b->last_saturated && b->npending == 0;
}

TEST(deferred_stats_fp8_linear_matches_cpu_bit_for_bit) {
    static const char *const kinds[] = { "te delayed", "current", "current pow2 (msamp)", "rowwise" };
    static snapshot ref[STEPS], got[STEPS];
    for (int kind = 0; kind < 4; kind++) {
        live_futures = waits = slots_checked = slots_bad = 0;
        int64_t hits_ref = 0, hits_got = 0;
        REQUIRE_OK(run_kind(kind, ref, &hits_ref));
        CHECK(waits == 0 && ref[0].pending_x == 0, "%s: the CPU itself deferred", kinds[kind]);
        install_fake();
        fl_status st = run_kind(kind, got, &hits_got);
        remove_fake();
        REQUIRE_OK(st);
        for (int s = 0; s < STEPS; s++) {
            CHECK(memcmp(ref[s].out, got[s].out, sizeof ref[s].out) == 0, "%s step %d: outputs or gradients differ",
                  kinds[kind], s);
            CHECK(got[s].pending_x > 0 && got[s].pending_g > 0 && got[s].waited > 0,
                  "%s step %d: %d/%d observations pending before the update, %d waits in it", kinds[kind], s,
                  got[s].pending_x, got[s].pending_g, got[s].waited);
            if (kind == 0)
                CHECK(got[s].hist0_x == 0.0f && ref[s].hist0_x > 0.0f,
                      "te step %d: amax in the history before the update: %g (the CPU's %g)", s, got[s].hist0_x,
                      ref[s].hist0_x);
            for (int i = 0; i < FL_NROLES; i++)
                CHECK(same_role(&ref[s].role[i], ref[s].hist[i], &got[s].role[i], got[s].hist[i]),
                      "%s step %d: %s role differs (scale %g vs %g, amax %g vs %g)", kinds[kind], s,
                      fl_fp8_role_names[i], ref[s].role[i].scale, got[s].role[i].scale, ref[s].role[i].last_amax,
                      got[s].role[i].last_amax);
        }
        CHECK(hits_ref == hits_got, "%s: weight cache hits %lld vs %lld", kinds[kind], (long long)hits_ref,
              (long long)hits_got);
        CHECK(live_futures == 0, "%s: %d futures leaked", kinds[kind], live_futures);
        /* per step, TENSOR granularity: wgrad's dYᵀ and x, and dgrad's W after each fresh weight cast */
        CHECK(slots_bad == 0, "%s: %d of %d transposed copies hold other bytes", kinds[kind], slots_bad, slots_checked);
        CHECK(kind == 3 ? slots_checked == 0 : slots_checked >= 2 * STEPS + STEPS / 2,
              "%s: %d transposed copies reached the GEMMs", kinds[kind], slots_checked);
    }
}

/* Forward passes without updates (evaluation) must not queue observations without bound. */
TEST(deferred_stats_queue_is_bounded) {
    live_futures = waits = 0;
    lin c;
    REQUIRE_OK(make_lin(&c, FL_DEV_CPU, 9));
    fl_fp8_layer *l = layer(1);
    int most = 0;
    fl_status st = FL_OK;
    install_fake();
    for (int i = 0; i < 3 * FL_SCALING_MAX_PENDING && st == FL_OK; i++) {
        fl_tensor *y = NULL;
        st = fl_fp8_linear(&y, c.x, c.w, c.b, l, false, NULL, NULL);
        fl_tensor_release(y);
        if (l->role[FL_ROLE_INPUT].npending > most) most = l->role[FL_ROLE_INPUT].npending;
    }
    remove_fake();
    CHECK(st == FL_OK, "forward: %s", fl_last_error());
    CHECK(most > 0 && most < FL_SCALING_MAX_PENDING, "the input role queued up to %d observations", most);
    CHECK(waits >= 2, "%d waits over %d forwards", waits, 3 * FL_SCALING_MAX_PENDING);
    CHECK(live_futures <= FL_SCALING_MAX_PENDING + 2, "%d futures alive", live_futures);
    fl_fp8_layer_release(l);
    free_lin(&c);
    CHECK(live_futures == 0, "%d futures leaked", live_futures);
}

TEST(deferred_stats_wait_failure_is_reported_and_frees) {
    live_futures = waits = fail_waits = 0;
    lin c;
    REQUIRE_OK(make_lin(&c, FL_DEV_CPU, 5));
    fl_fp8_layer *l = layer(0);
    static float o[OUT];
    install_fake();
    fl_status st0 = step(&c, l, 0, o);
    fail_waits = 1;
    fl_status st = fl_fp8_layer_update(l);
    fail_waits = 0;
    fl_status st1 = step(&c, l, 1, o);        /* the layer goes on working */
    fl_status st2 = fl_fp8_layer_update(l);
    remove_fake();
    CHECK(st0 == FL_OK && st1 == FL_OK && st2 == FL_OK, "steps: %d %d %d: %s", (int)st0, (int)st1, (int)st2, fl_last_error());
    CHECK(st == FL_EDEVICE, "update after a failed wait: status %d", (int)st);
    for (int i = 0; i < FL_NROLES; i++) CHECK(l->role[i].npending == 0, "%s role kept its queue", fl_fp8_role_names[i]);
    CHECK(l->role[FL_ROLE_INPUT].updates == 1, "updates %lld (the failed step's update is lost, the next one counts)",
          (long long)l->role[FL_ROLE_INPUT].updates);
    fl_fp8_layer_release(l);
    free_lin(&c);
    CHECK(live_futures == 0, "%d futures leaked", live_futures);
}
