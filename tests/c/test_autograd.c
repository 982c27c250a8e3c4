/* test_autograd.c — graph behaviour of the engine: accumulation over several uses, retain_graph,
 * no_grad, detach, zero_grad, error messages, deep graphs, and reference counts (run under ASan via
 * `make BUILD=build-ag-san SAN=1 OPT=-O1 CUDA=0 build-ag-san/test_core` for leaks). */
#include "runner.h"
#include "autograd.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_nn_internal.h"
#include "nn.h"
#include "ops.h"
#include "rng.h"
#include <math.h>
#include <string.h>

static fl_tensor *vec(const float *v, int64_t n, bool rg) {
    fl_tensor *t = NULL;
    if (fl_tensor_from_f32(&t, v, 1, &n, FL_F32) != FL_OK) return NULL;
    if (rg) fl_tensor_set_requires_grad(t, true);
    return t;
}

static float at(const fl_tensor *t, int64_t i) { double v = 0; fl_tensor_get(t, &i, &v); return (float)v; }

TEST(autograd_accumulates_over_two_uses) {
    float xv[3] = { 1, 2, 3 };
    fl_tensor *x = vec(xv, 3, true), *a, *b, *c, *s;
    REQUIRE_OK(fl_binary_scalar(&a, FL_OP_MUL, x, 3.0, false));
    REQUIRE_OK(fl_binary(&b, FL_OP_MUL, x, x));
    REQUIRE_OK(fl_binary(&c, FL_OP_ADD, a, b));    /* c = 3x + x², dc/dx = 3 + 2x */
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, c, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, false));
    REQUIRE(x->grad, "no grad");
    for (int i = 0; i < 3; i++) CHECK_CLOSE(at(x->grad, i), 3 + 2 * xv[i], 1e-6, 0);
    /* a second graph accumulates into the same .grad */
    fl_tensor *s2;
    REQUIRE_OK(fl_reduce(&s2, FL_OP_SUM, x, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s2, NULL, false));
    for (int i = 0; i < 3; i++) CHECK_CLOSE(at(x->grad, i), 4 + 2 * xv[i], 1e-6, 0);
    CHECK(x->grad_fn == NULL && c->grad_fn != NULL, "leaf/non-leaf");
    CHECK(strcmp(c->grad_fn->name, "AddBackward") == 0, "name %s", c->grad_fn->name);
    fl_tensor *ts[] = { x, a, b, c, s, s2 };
    for (int i = 0; i < 6; i++) fl_tensor_release(ts[i]);
}

TEST(autograd_retain_graph_and_second_backward_error) {
    float xv[2] = { 1, -2 };
    fl_tensor *x = vec(xv, 2, true), *e, *s;
    REQUIRE_OK(fl_unary(&e, FL_OP_EXP, x));
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, e, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, true));
    REQUIRE_OK(fl_backward(s, NULL, false));     /* retained: a second pass works and accumulates */
    CHECK_CLOSE(at(x->grad, 0), 2 * expf(1), 1e-5, 1e-6);
    fl_status st = fl_backward(s, NULL, false);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "second time (use retain_graph=true)"), "%s", fl_last_error());
    fl_tensor_release(x); fl_tensor_release(e); fl_tensor_release(s);
}

TEST(autograd_errors) {
    int64_t sh[2] = { 4, 3 };
    fl_tensor *x, *y, *z;
    REQUIRE_OK(fl_tensor_zeros(&x, FL_F32, 2, sh, FL_DEV_CPU));
    fl_status st = fl_backward(x, NULL, false);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "does not require grad"), "%s", fl_last_error());
    REQUIRE_OK(fl_tensor_set_requires_grad(x, true));
    REQUIRE_OK(fl_binary_scalar(&y, FL_OP_MUL, x, 2, false));
    st = fl_backward(y, NULL, false);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "grad can be implicitly created only for scalar outputs; got shape [4, 3]"),
          "%s", fl_last_error());
    st = fl_tensor_set_requires_grad(y, false);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "only leaf tensors"), "%s", fl_last_error());
    /* linear shape message */
    int64_t xs[2] = { 32, 100 }, ws[2] = { 512, 784 };
    fl_tensor *a, *w;
    REQUIRE_OK(fl_tensor_zeros(&a, FL_F32, 2, xs, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&w, FL_F32, 2, ws, FL_DEV_CPU));
    st = fl_linear(&z, a, w, NULL);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "linear: input [32, 100] does not match weight [512, 784] (in_features 784)"),
          "%s", fl_last_error());
    fl_tensor_release(x); fl_tensor_release(y); fl_tensor_release(a); fl_tensor_release(w);
}

TEST(autograd_no_grad_and_detach) {
    float xv[2] = { 1, 2 };
    fl_tensor *x = vec(xv, 2, true), *y, *d, *z;
    bool prev = fl_set_grad_enabled(false);
    REQUIRE_OK(fl_binary_scalar(&y, FL_OP_MUL, x, 2, false));
    fl_set_grad_enabled(prev);
    CHECK(!y->requires_grad && !y->grad_fn, "no_grad recorded history");
    REQUIRE_OK(fl_tensor_detach(&d, x));
    CHECK(!d->requires_grad && !d->grad_fn && d->storage == x->storage, "detach shares data, no history");
    REQUIRE_OK(fl_binary_scalar(&z, FL_OP_MUL, d, 2, false));
    CHECK(!z->requires_grad, "detached input made a graph");
    fl_tensor *s;
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, x, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, false));
    CHECK(x->grad != NULL, "grad");
    fl_tensor_zero_grad(x);
    CHECK(x->grad == NULL, "zero_grad sets grad to none");
    fl_tensor *ts[] = { x, y, d, z, s };
    for (int i = 0; i < 5; i++) fl_tensor_release(ts[i]);
}

TEST(autograd_deep_chain) {
    /* 20000 nodes: the iterative walk and the queued release must not recurse per node. */
    float v = 1.0f;
    fl_tensor *x = vec(&v, 1, true), *cur = fl_tensor_retain(x);
    for (int i = 0; i < 20000; i++) {
        fl_tensor *n;
        REQUIRE_OK(fl_binary_scalar(&n, FL_OP_ADD, cur, 0.0, false));
        fl_tensor_release(cur);
        cur = n;
    }
    fl_tensor *s;
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, cur, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, true));
    CHECK_CLOSE(at(x->grad, 0), 1.0, 0, 0);
    fl_tensor_release(cur);
    fl_tensor_release(s);          /* frees the whole retained chain */
    CHECK(x->refcount == 1, "x refcount %d after the graph is gone", x->refcount);
    fl_tensor_release(x);
}

TEST(autograd_views_of_leaf_and_refcounts) {
    int64_t sh[2] = { 2, 3 }, sv[1] = { 6 };
    fl_tensor *x, *v, *s;
    REQUIRE_OK(fl_randn(&x, NULL, 2, sh, FL_F32));
    REQUIRE_OK(fl_tensor_set_requires_grad(x, true));
    REQUIRE_OK(fl_view(&v, x, 1, sv));
    CHECK(v->grad_fn && !v->grad && v->requires_grad, "view records");
    fl_tensor *raw;
    REQUIRE_OK(fl_tensor_view(&raw, x, 1, sv));
    CHECK(!raw->grad_fn && !raw->requires_grad && !raw->grad, "layout view copies no history");
    REQUIRE_OK(fl_reduce(&s, FL_OP_MEAN, v, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, false));
    CHECK(x->grad && x->grad->ndim == 2, "grad has x's shape");
    CHECK_CLOSE(at(v, 0), at(raw, 0), 0, 0);
    fl_tensor_release(v); fl_tensor_release(raw); fl_tensor_release(s);
    CHECK(x->refcount == 1, "refcount %d", x->refcount);
    fl_tensor_release(x);
}

TEST(autograd_mlp_step_shapes) {
    /* A small MLP forward/backward through linear, relu and cross_entropy: every parameter gets a
     * gradient of its own shape, and the input (no requires_grad) gets none. */
    int64_t xs[2] = { 16, 20 }, w1s[2] = { 32, 20 }, b1s[1] = { 32 }, w2s[2] = { 5, 32 }, b2s[1] = { 5 }, ts[1] = { 16 };
    fl_tensor *x, *w1, *b1, *w2, *b2, *t, *h, *r, *o, *loss;
    REQUIRE_OK(fl_randn(&x, NULL, 2, xs, FL_F32));
    REQUIRE_OK(fl_randn(&w1, NULL, 2, w1s, FL_F32));
    REQUIRE_OK(fl_randn(&b1, NULL, 1, b1s, FL_F32));
    REQUIRE_OK(fl_randn(&w2, NULL, 2, w2s, FL_F32));
    REQUIRE_OK(fl_randn(&b2, NULL, 1, b2s, FL_F32));
    REQUIRE_OK(fl_tensor_zeros(&t, FL_F32, 1, ts, FL_DEV_CPU));
    fl_tensor *p[4] = { w1, b1, w2, b2 };
    for (int i = 0; i < 4; i++) fl_tensor_set_requires_grad(p[i], true);
    REQUIRE_OK(fl_linear(&h, x, w1, b1));
    REQUIRE_OK(fl_relu(&r, h));
    REQUIRE_OK(fl_linear(&o, r, w2, b2));
    REQUIRE_OK(fl_cross_entropy(&loss, o, t, -100, 0));
    REQUIRE_OK(fl_backward(loss, NULL, false));
    for (int i = 0; i < 4; i++)
        CHECK(p[i]->grad && fl_shape_equal(p[i]->grad->ndim, p[i]->grad->shape, p[i]->ndim, p[i]->shape), "param %d", i);
    CHECK(x->grad == NULL, "input got a gradient");
    fl_tensor *all[] = { x, w1, b1, w2, b2, t, h, r, o, loss };
    for (int i = 0; i < 10; i++) fl_tensor_release(all[i]);
}

/* The CPU's attention without its probabilities (fl_sdpa_cpu_fused_min_bytes at 0: each row's max and 1/Σ kept,
 * P made again in the backward) against the same calls keeping them (the threshold out of reach): the same output
 * and gradient bits, through fl_sdpa_qkv's packed layout and through fl_sdpa's [B, H, T, D] heads (the flash
 * entries), under bf16 autocast; and B·H·T·T floats fewer alive between the forward and the backward. */
static fl_status stats_run(fl_tensor **y_out, fl_tensor **grad, size_t *held, const fl_tensor *base, bool split,
                           double threshold) {
    fl_tensor *x = NULL, *y = NULL, *s = NULL, *parts[3] = { NULL, NULL, NULL };
    const double prev_min = fl_sdpa_cpu_fused_min_bytes;
    fl_sdpa_cpu_fused_min_bytes = threshold;
    fl_dtype prev = fl_set_autocast_dtype(FL_BF16);
    fl_status st = fl_tensor_to(&x, base, FL_F32);
    if (st == FL_OK) fl_tensor_set_requires_grad(x, true);
    const size_t before = fl_bytes_live(FL_DEV_CPU);
    if (st == FL_OK && !split) st = fl_sdpa_qkv(&y, x, 2, true, 0.0);
    if (st == FL_OK && split) {   /* x as [3, B, H, T, D]: q, k, v contiguous heads */
        for (int i = 0; i < 3 && st == FL_OK; i++) st = fl_select(&parts[i], x, 0, i);
        if (st == FL_OK) st = fl_sdpa(&y, parts[0], parts[1], parts[2], false, 0.3);
    }
    *held = fl_bytes_live(FL_DEV_CPU) - before;
    if (st == FL_OK) st = fl_reduce(&s, FL_OP_SUM, y, FL_ALL_DIMS, false);
    if (st == FL_OK) st = fl_backward(s, NULL, false);
    fl_set_autocast_dtype(prev);
    fl_sdpa_cpu_fused_min_bytes = prev_min;
    if (st == FL_OK) { *grad = fl_tensor_retain(x->grad); *y_out = fl_tensor_retain(y); }
    for (int i = 0; i < 3; i++) fl_tensor_release(parts[i]);
    fl_tensor_release(x); fl_tensor_release(y); fl_tensor_release(s);
    return st;
}
TEST(autograd_sdpa_cpu_statistics_form_same_bits) {
    REQUIRE(fl_cpu_attn_bf16_stats_available(), "attention's statistics form does not run on this CPU");
    const int64_t B = 2, H = 2, T = 70, D = 16;
    for (int run = 0; run < 4; run++) {   /* fl_sdpa_qkv and fl_sdpa; the CPU's own family, then AVX2 + FMA */
        const int split = run % 2;
        fl_cpu_avx512_bf16_allowed = run < 2;
        const int64_t packed[3] = { B, T, 3 * H * D }, heads[5] = { 3, B, H, T, D };
        fl_tensor *base = NULL, *y[2] = { NULL, NULL }, *g[2] = { NULL, NULL };
        size_t held[2];
        fl_manual_seed(5 + split);
        REQUIRE_OK(fl_randn(&base, NULL, split ? 5 : 3, split ? heads : packed, FL_F32));
        REQUIRE_OK(stats_run(&y[0], &g[0], &held[0], base, split, 1e300));
        REQUIRE_OK(stats_run(&y[1], &g[1], &held[1], base, split, 0.0));
        const int64_t ny = fl_tensor_numel(y[0]), ng = fl_tensor_numel(g[0]);
        REQUIRE(fl_tensor_is_contiguous(y[0]) && fl_tensor_is_contiguous(y[1]) && fl_tensor_is_contiguous(g[0]) &&
                fl_tensor_is_contiguous(g[1]), "results not contiguous");
        CHECK(memcmp(fl_tensor_data(y[0]), fl_tensor_data(y[1]), (size_t)ny * 4) == 0,
              "%s: the output differs between the two forms", split ? "fl_sdpa" : "fl_sdpa_qkv");
        CHECK(memcmp(fl_tensor_data(g[0]), fl_tensor_data(g[1]), (size_t)ng * 4) == 0,
              "%s: the gradient differs between the two forms", split ? "fl_sdpa" : "fl_sdpa_qkv");
        const size_t att = (size_t)(B * H * T * T) * 4, st = (size_t)(B * H * T * 2) * 4;
        CHECK(held[0] >= held[1] + att - st, "%s: %zu bytes held with the probabilities, %zu without (expected %zu fewer)",
              split ? "fl_sdpa" : "fl_sdpa_qkv", held[0], held[1], att - st);
        for (int i = 0; i < 2; i++) { fl_tensor_release(y[i]); fl_tensor_release(g[i]); }
        fl_tensor_release(base);
    }
    fl_cpu_avx512_bf16_allowed = true;
}

/* Packed attention (fl_sdpa_qkv) whose backward finds the packed kernel unavailable (here: switched off
 * between forward and backward, as running out of memory for its buffers would) takes the copies and the
 * [B, H, T, D] entry instead, and gives the gradient of a run that never used the packed kernel, up to
 * fp32 accumulation order. Under bf16 autocast (the bf16 kernel families) and in fp32 (the fp32 one, which
 * runs on every x86-64-v3 CPU). */
static void attn_kernels_allowed(bool bf16, bool on) {
    if (bf16) fl_cpu_attn_bf16_allowed = on;
    else fl_cpu_attn_f32_allowed = on;
}
static fl_status qkv_grad(fl_tensor **grad, const fl_tensor *base, bool bf16, bool fwd_kernel, bool bwd_kernel) {
    fl_tensor *x = NULL, *y = NULL, *s = NULL;
    fl_status st = fl_tensor_to(&x, base, FL_F32);   /* a fresh leaf */
    if (st == FL_OK) fl_tensor_set_requires_grad(x, true);
    fl_dtype prev = fl_set_autocast_dtype(bf16 ? FL_BF16 : FL_F32);
    attn_kernels_allowed(bf16, fwd_kernel);
    if (st == FL_OK) st = fl_sdpa_qkv(&y, x, 2, true, 0.0);
    if (st == FL_OK) st = fl_reduce(&s, FL_OP_SUM, y, FL_ALL_DIMS, false);
    attn_kernels_allowed(bf16, bwd_kernel);
    if (st == FL_OK) st = fl_backward(s, NULL, false);
    attn_kernels_allowed(bf16, true);
    fl_set_autocast_dtype(prev);
    if (st == FL_OK) *grad = fl_tensor_retain(x->grad);
    fl_tensor_release(x); fl_tensor_release(y); fl_tensor_release(s);
    return st;
}
TEST(autograd_sdpa_qkv_packed_backward_falls_back) {
    int64_t shape[3] = { 2, 19, 3 * 2 * 16 };
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        fl_tensor *base = NULL, *g_ref = NULL, *g_mixed = NULL, *g_packed = NULL;
        fl_manual_seed(11);
        REQUIRE_OK(fl_randn(&base, NULL, 3, shape, FL_F32));
        REQUIRE_OK(qkv_grad(&g_ref, base, bf16, false, false));
        REQUIRE_OK(qkv_grad(&g_mixed, base, bf16, true, false));
        REQUIRE_OK(qkv_grad(&g_packed, base, bf16, true, true));
        const int64_t n = fl_tensor_numel(base);
        const float *gr = fl_tensor_data(g_ref), *gm = fl_tensor_data(g_mixed), *gp = fl_tensor_data(g_packed);
        REQUIRE(fl_tensor_is_contiguous(g_ref) && fl_tensor_is_contiguous(g_mixed) && fl_tensor_is_contiguous(g_packed) &&
                g_ref->dtype == FL_F32 && g_mixed->dtype == FL_F32 && g_packed->dtype == FL_F32,
                "gradients not contiguous fp32");
        int bad = 0, same = 0;
        for (int64_t i = 0; i < n; i++) {
            const float r = gr[i], m = gm[i], p = gp[i];
            if (!(fabsf(m - r) <= 1e-4f * (1.0f + fabsf(r))) || !(fabsf(p - r) <= 1e-4f * (1.0f + fabsf(r)))) bad++;
            same += p == r;
        }
        CHECK(bad == 0, "%s: %d of %lld dqkv entries off the copies-and-GEMM reference", bf16 ? "bf16" : "fp32", bad,
              (long long)n);
        /* fp32: the kernel ran (its exponential's last bits and its rounded products' order differ from the
         * GEMM path's; in bf16, whose products are exact, the two may agree bit for bit) */
        if (!bf16) CHECK(same < n, "fp32: the packed kernel's gradient equals the GEMMs' bit for bit");
        fl_tensor_release(base); fl_tensor_release(g_ref); fl_tensor_release(g_mixed); fl_tensor_release(g_packed);
    }
}

/* A C hook for the core's gradient hooks: counts its calls, records the gradient's first value, scales it. */
typedef struct { int calls, freed; float first, scale; } hook_probe;
static fl_status probe_hook(void *ud, const fl_tensor *g, fl_tensor **out) {
    hook_probe *p = ud;
    p->calls++;
    p->first = at(g, 0);
    return p->scale == 1 ? FL_OK : fl_binary_scalar(out, FL_OP_MUL, g, p->scale, false);
}
static void probe_free(void *ud) { ((hook_probe *)ud)->freed++; }

TEST(autograd_grad_hooks_and_retain_grad) {
    float xv[2] = { 1, 2 };
    fl_tensor *x = vec(xv, 2, true), *a, *b, *c, *s;
    hook_probe px = { 0, 0, 0, 10 }, pa = { 0, 0, 0, 2 };
    uint64_t idx, ida;
    fl_grad_hooks *lx = NULL;
    REQUIRE_OK(fl_tensor_add_grad_hook(x, probe_hook, &px, probe_free, &idx, &lx));
    REQUIRE_OK(fl_binary_scalar(&a, FL_OP_MUL, x, 3.0, false));   /* a = 3x */
    REQUIRE_OK(fl_tensor_add_grad_hook(a, probe_hook, &pa, probe_free, &ida, NULL));
    REQUIRE_OK(fl_tensor_retain_grad(a));
    REQUIRE_OK(fl_binary(&b, FL_OP_MUL, a, x));                  /* b = a·x: x used twice */
    REQUIRE_OK(fl_reduce(&c, FL_OP_SUM, b, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_binary_scalar(&s, FL_OP_ADD, c, 0.0, false));
    REQUIRE_OK(fl_backward(s, NULL, false));
    /* ds/da = x, hooked x2: a.grad = 2x; ds/dx = 3·(2x) + a = 6x + 3x = 9x, hooked once with the sum, x10 */
    CHECK(pa.calls == 1 && px.calls == 1, "hook calls %d %d", pa.calls, px.calls);
    CHECK_CLOSE(at(a->grad, 1), 4, 0, 0);
    CHECK_CLOSE(px.first, 9, 0, 0);
    CHECK_CLOSE(at(x->grad, 0), 90, 0, 0);
    CHECK_CLOSE(at(x->grad, 1), 180, 0, 0);
    /* removed: not called again, its ud freed once; the list outlives the tensor while a handle holds it */
    CHECK(fl_grad_hooks_remove(lx, idx) && !fl_grad_hooks_remove(lx, idx) && px.freed == 1, "remove");
    fl_tensor_release(a);   /* a's hooks go with it */
    CHECK(pa.freed == 1, "a's hook freed %d", pa.freed);
    fl_tensor_release(x);
    CHECK(lx->n == 0, "list");
    fl_grad_hooks_release(lx);
    /* a tensor that does not require grad is refused, and the ud is freed */
    hook_probe pn = { 0, 0, 0, 1 };
    fl_tensor *n = vec(xv, 2, false);
    uint64_t idn;
    CHECK(fl_tensor_add_grad_hook(n, probe_hook, &pn, probe_free, &idn, NULL) == FL_EINVAL && pn.freed == 1, "refused");
    fl_tensor_release(n); fl_tensor_release(b); fl_tensor_release(c); fl_tensor_release(s);
}

/* A C post-accumulate-grad hook: counts its calls and records the leaf's .grad[0] when called. */
static fl_status probe_post(void *ud, fl_tensor *t) {
    hook_probe *p = ud;
    p->calls++;
    p->first = t->grad ? at(t->grad, 0) : -1;
    return FL_OK;
}

TEST(autograd_post_accumulate_grad_hooks) {
    float xv[2] = { 1, 2 };
    fl_tensor *x = vec(xv, 2, true), *a, *b, *c;
    hook_probe pg = { 0, 0, 0, 10 }, pp = { 0, 0, 0, 1 };
    uint64_t idg, idp;
    fl_grad_hooks *lp = NULL;
    REQUIRE_OK(fl_tensor_add_post_accumulate_grad_hook(x, probe_post, &pp, probe_free, &idp, &lp));
    REQUIRE_OK(fl_tensor_add_grad_hook(x, probe_hook, &pg, probe_free, &idg, NULL));
    REQUIRE_OK(fl_binary(&a, FL_OP_MUL, x, x));                  /* x·x + 3x: two uses */
    REQUIRE_OK(fl_binary_scalar(&b, FL_OP_MUL, x, 3.0, false));
    REQUIRE_OK(fl_binary(&c, FL_OP_ADD, a, b));
    fl_tensor *s = NULL;
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, c, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(s, NULL, false));
    /* once, after the gradient hook (x10) and the addition: .grad[0] = 10 · (2·1 + 3) */
    CHECK(pp.calls == 1 && pg.calls == 1, "calls %d %d", pp.calls, pg.calls);
    CHECK_CLOSE(pp.first, 50, 0, 0);
    /* a tensor an op made, or one that does not require grad, is refused (ud freed) */
    hook_probe pr = { 0, 0, 0, 1 };
    uint64_t idr;
    CHECK(fl_tensor_add_post_accumulate_grad_hook(a, probe_post, &pr, probe_free, &idr, NULL) == FL_EINVAL &&
          pr.freed == 1, "non-leaf refused");
    fl_tensor *n = vec(xv, 2, false);
    CHECK(fl_tensor_add_post_accumulate_grad_hook(n, probe_post, &pr, probe_free, &idr, NULL) == FL_EINVAL &&
          pr.freed == 2, "no grad refused");
    /* removed through the handle's list after the tensor is gone */
    fl_tensor_release(x);
    CHECK(fl_grad_hooks_remove(lp, idp) && pp.freed == 1 && pg.freed == 1, "removed");
    fl_grad_hooks_release(lp);
    fl_tensor_release(n); fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(c); fl_tensor_release(s);
}

TEST(autograd_grad_captures_without_touching_grad) {
    float xv[2] = { 1, 2 }, wv[2] = { 3, 4 };
    fl_tensor *x = vec(xv, 2, true), *w = vec(wv, 2, true), *m, *u, *s1, *s2, *y;
    REQUIRE_OK(fl_binary(&m, FL_OP_MUL, x, x));                  /* y = Σx² + Σ2w */
    REQUIRE_OK(fl_binary_scalar(&u, FL_OP_MUL, w, 2.0, false));
    REQUIRE_OK(fl_reduce(&s1, FL_OP_SUM, m, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_reduce(&s2, FL_OP_SUM, u, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_binary(&y, FL_OP_ADD, s1, s2));
    fl_tensor *in[3] = { x, m, x }, *out[3] = { NULL, NULL, NULL };
    REQUIRE_OK(fl_autograd_grad(&y, NULL, 1, in, 3, false, out));
    CHECK(out[0] && out[1] && out[2] == out[0], "results");
    CHECK_CLOSE(at(out[0], 1), 4, 0, 0);                         /* 2x */
    CHECK_CLOSE(at(out[1], 1), 1, 0, 0);                         /* d/dm Σm */
    CHECK(!x->grad && !w->grad, ".grad untouched");
    /* u's branch did not run, so it was not freed: a backward through it still works */
    REQUIRE_OK(fl_backward(s2, NULL, false));
    CHECK_CLOSE(at(w->grad, 0), 2, 0, 0);
    for (int i = 0; i < 3; i++) { fl_tensor_release(out[i]); out[i] = NULL; }
    /* the root's node ran and was freed */
    CHECK(fl_autograd_grad(&y, NULL, 1, in, 1, false, out) == FL_EINVAL && !out[0], "second time refused");
    fl_tensor *tensors[] = { x, w, m, u, s1, s2, y };
    for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++) fl_tensor_release(tensors[i]);
}
