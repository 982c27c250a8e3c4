/* cpu_conv.c — conv2d's fp32 forward by oneDNN's convolution primitive (cpu_conv.h). The columns route
 * (core/conv_cols.c: im2col, then a GEMM) writes and reads C·kh·kw values per output position; the direct kernels
 * read the image in place, in the layout they choose (brgconv on AVX-512: NHWC; other kernels nChw16c / nChw8c), as
 * torch 2.15's CPU conv does (its mkldnn route); a first layer (one group of under 16 channels) reads its NCHW input
 * as it is, by the first-layer kernel (cv_make). The input and weight are reordered into that layout each call, the
 * result copied out of it (unblock, faster than oneDNN 2.6's reorder; an unknown layout by that reorder); a few samples
 * at a time (about 16 MiB of input and output a chunk), so the blocked copies stay bounded and Ctrl-C is polled
 * between chunks. Primitives (the convolution and its three reorders) are kept per geometry in a small LRU cache. */
#include "cpu_internal.h"
#include "cpu_conv.h"
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>

#define CV_CACHE 16
#define CV_CHUNK (INT64_C(1) << 22)   /* input + output elements per chunk of samples */

typedef struct { int64_t n, c, h, w, oc, groups, geo[10]; } cv_key;

typedef struct {
    cv_key key;
    bool used, unimpl;            /* unimpl: oneDNN has only a GEMM-based or reference kernel here */
    int64_t blk;                  /* the result's channel block (16, 8: nChw16c, nChw8c; OC: NHWC), copied back to
                                     NCHW here (unblock); 0: by oneDNN's reorder */
    uint64_t tick;
    dnnl_primitive_t conv, rsrc, rwei, rdst;   /* a reorder NULL where the plain layout is the kernel's */
    dnnl_memory_desc_t md[6];     /* plain src, weights, dst; the kernel's src, weights, dst */
} cv_entry;

static struct { cv_entry e[CV_CACHE]; uint64_t tick; } cv;   /* used under fl_cpu_dnnl_acquire's lock */

#define CV_CHECK(call)                                                                                               \
    do { dnnl_status_t s_ = (call);                                                                                  \
         if (s_ != dnnl_success) { st = FL_ERR(FL_EDEVICE, "oneDNN %s failed (status %d)", #call, (int)s_); goto fail; } \
    } while (0)

static void cv_drop(cv_entry *e) {
    dnnl_primitive_t *p[4] = { &e->conv, &e->rsrc, &e->rwei, &e->rdst };
    for (int i = 0; i < 4; i++) if (*p[i]) { dnnl_primitive_destroy(*p[i]); *p[i] = NULL; }
    e->used = false;
}

/* a reorder from one layout to another, NULL where they are the same */
static dnnl_status_t reorder_of(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                dnnl_engine_t eng) {
    *out = NULL;
    if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
    dnnl_primitive_desc_t pd;
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL);
    if (s != dnnl_success) return s;
    s = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

static fl_status cv_make(cv_entry *e, const cv_key *k, dnnl_engine_t eng) {
    fl_status st = FL_OK;
    dnnl_primitive_desc_t pd = NULL;
    cv_drop(e);
    memset(e, 0, sizeof *e);
    e->key = *k;
    const int64_t g = k->groups, *q = k->geo;
    const int64_t oh = (k->h + q[6] + q[7] - (q[4] * (q[0] - 1) + 1)) / q[2] + 1;
    const int64_t ow = (k->w + q[8] + q[9] - (q[5] * (q[1] - 1) + 1)) / q[3] + 1;
    dnnl_dims_t sd = { k->n, k->c, k->h, k->w }, dd = { k->n, k->oc, oh, ow };
    dnnl_dims_t wd = { g, k->oc / g, k->c / g, q[0], q[1] }, w1 = { k->oc, k->c, q[0], q[1] };
    dnnl_dims_t strides = { q[2], q[3] }, dil = { q[4] - 1, q[5] - 1 }, pl = { q[6], q[8] }, pr = { q[7], q[9] };
    dnnl_memory_desc_t any[3];
    CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[0], 4, sd, dnnl_f32, dnnl_nchw));
    if (g == 1) CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[1], 4, w1, dnnl_f32, dnnl_oihw));
    else CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[1], 5, wd, dnnl_f32, dnnl_goihw));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[2], 4, dd, dnnl_f32, dnnl_nchw));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[0], 4, sd, dnnl_f32, dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[1], g == 1 ? 4 : 5, g == 1 ? w1 : wd, dnnl_f32, dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[2], 4, dd, dnnl_f32, dnnl_format_tag_any));
    /* a first layer (one group of fewer than 16 channels: an image's 1-4) asks first for its input as it is, NCHW:
     * oneDNN's direct kernels for so few channels (jit:avx512_core's or jit:avx2's first-layer kernel) read NCHW in
     * place and write blocked channels, as torch 2.15's mkldnn route does for such a layer; the layouts left to the
     * primitive (format_tag_any) gave brgconv in NHWC, the input reordered each call, slower (docs/performance.md,
     * "conv2d's first layer"). A fixed rule by geometry, not a timing: a geometry always takes the same kernel. */
    const bool first = g == 1 && k->c < 16;
    const char *impl = NULL;
    for (int t = first ? 0 : 1; t < 2 && !pd; t++) {
        dnnl_convolution_desc_t cd;
        dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                                     dnnl_convolution_direct, t ? &any[0] : &e->md[0],
                                                                     &any[1], NULL, &any[2], strides, dil, pl, pr);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL);
        if (s != dnnl_success) pd = NULL;
        impl = NULL;
        if (pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success) impl = NULL;
        /* declined: the GEMM-based kernels make columns as conv_cols.c does (slower here), the reference ones are
         * slower still, and a geometry oneDNN refuses (past its limits) is the columns' to compute, not an error */
        if (pd && (!impl || strstr(impl, "gemm") || strstr(impl, "ref"))) {
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
        }
    }
    if (!pd) {
        e->used = e->unimpl = true;
        return FL_OK;
    }
    e->md[3] = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    e->md[4] = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    e->md[5] = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    CV_CHECK(dnnl_primitive_create(&e->conv, pd));
    CV_CHECK(reorder_of(&e->rsrc, &e->md[0], &e->md[3], eng));
    CV_CHECK(reorder_of(&e->rwei, &e->md[1], &e->md[4], eng));
    static const dnnl_format_tag_t tags[3] = { dnnl_nhwc, dnnl_nChw16c, dnnl_nChw8c };
    for (int i = 0; i < 3 && !e->blk; i++) {
        dnnl_memory_desc_t t;
        CV_CHECK(dnnl_memory_desc_init_by_tag(&t, 4, dd, dnnl_f32, tags[i]));
        if (dnnl_memory_desc_equal(&t, &e->md[5])) e->blk = i == 0 ? k->oc : i == 1 ? 16 : 8;
    }
    if (!e->blk) CV_CHECK(reorder_of(&e->rdst, &e->md[5], &e->md[2], eng));
    dnnl_primitive_desc_destroy(pd);
    e->used = true;
    return FL_OK;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    cv_drop(e);
    return st;
}

static fl_status cv_get(cv_entry **out, const cv_key *k, dnnl_engine_t eng) {
    cv_entry *lru = &cv.e[0];
    for (int i = 0; i < CV_CACHE; i++) {
        cv_entry *e = &cv.e[i];
        if (e->used && !memcmp(&e->key, k, sizeof *k)) { e->tick = ++cv.tick; *out = e; return FL_OK; }
        if (!e->used || (lru->used && e->tick < lru->tick)) lru = e;
    }
    fl_status st = cv_make(lru, k, eng);
    if (st != FL_OK) return st;
    lru->tick = ++cv.tick;
    *out = lru;
    return FL_OK;
}

static void *cv_alloc(const dnnl_memory_desc_t *md) {
    size_t n = (dnnl_memory_desc_get_size(md) + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

/* one execution of p with two or three memories */
static fl_status cv_exec(dnnl_primitive_t p, dnnl_stream_t str, int n, const int *arg, dnnl_memory_t const *mem) {
    dnnl_exec_arg_t a[3];
    for (int i = 0; i < n; i++) a[i] = (dnnl_exec_arg_t){ arg[i], mem[i] };
    dnnl_status_t s = dnnl_primitive_execute(p, str, n, a);
    if (s == dnnl_success) s = dnnl_stream_wait(str);
    return s == dnnl_success ? FL_OK : FL_ERR(FL_EDEVICE, "oneDNN dnnl_primitive_execute(convolution) failed (status %d)",
                                              (int)s);
}

/* y [m, oc, hw] from b, its blocks of bs channels ([m, ⌈oc/bs⌉, hw, bs], the last block's spare channels skipped;
 * NHWC is one block of oc): a copy, 16 positions of a block at a time (16 rows of bs channels read, 16 floats of
 * each channel's plane written), where oneDNN 2.6's reorder ran it at about a third of the memory's speed */
static void unblock(float *y, const float *b, int64_t m, int64_t oc, int64_t hw, int64_t bs) {
    const int64_t nbk = (oc + bs - 1) / bs;
    #pragma omp parallel for collapse(2) schedule(static) if (m * oc * hw >= (INT64_C(1) << 16))
    for (int64_t n = 0; n < m; n++)
        for (int64_t cb = 0; cb < nbk; cb++) {
            const float *src = b + (n * nbk + cb) * hw * bs;
            const int64_t nc = oc - cb * bs < bs ? oc - cb * bs : bs;
            float *dst = y + (n * oc + cb * bs) * hw;
            for (int64_t l0 = 0; l0 < hw; l0 += 16) {
                const int64_t le = hw - l0 < 16 ? hw - l0 : 16;
                for (int64_t j = 0; j < nc; j++)
                    for (int64_t l = l0; l < l0 + le; l++) dst[j * hw + l] = src[l * bs + j];
            }
        }
}

/* m samples: x [m, C, H, W] → y [m, OC, oh, ow] by e's primitives */
static fl_status cv_run(cv_entry *e, dnnl_engine_t eng, dnnl_stream_t str, const float *x, const float *w, float *y) {
    fl_status st = FL_OK;
    void *buf[3] = { NULL, NULL, NULL };
    dnnl_memory_t plain[3] = { NULL, NULL, NULL }, kern[3] = { NULL, NULL, NULL };
    void *user[3] = { (void *)x, (void *)w, y };
    dnnl_primitive_t re[3] = { e->rsrc, e->rwei, e->rdst };
    const bool unblk = e->blk != 0;
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        if (dnnl_memory_create(&plain[i], &e->md[i], eng, user[i]) != dnnl_success) {
            st = FL_ERR(FL_EDEVICE, "oneDNN dnnl_memory_create failed");
            break;
        }
        if (!re[i] && !(i == 2 && unblk)) { kern[i] = plain[i]; continue; }
        if (!(buf[i] = cv_alloc(&e->md[3 + i]))) {
            st = FL_ERR(FL_ENOMEM, "conv2d: out of memory for oneDNN's blocked copy (%zu bytes)",
                        dnnl_memory_desc_get_size(&e->md[3 + i]));
            break;
        }
        if (dnnl_memory_create(&kern[i], &e->md[3 + i], eng, buf[i]) != dnnl_success)
            st = FL_ERR(FL_EDEVICE, "oneDNN dnnl_memory_create failed");
    }
    const int rarg[2] = { DNNL_ARG_FROM, DNNL_ARG_TO }, carg[3] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST };
    for (int i = 0; i < 2 && st == FL_OK; i++)
        if (re[i]) st = cv_exec(re[i], str, 2, rarg, (dnnl_memory_t[]){ plain[i], kern[i] });
    if (st == FL_OK) st = cv_exec(e->conv, str, 3, carg, kern);
    if (st == FL_OK && re[2]) st = cv_exec(re[2], str, 2, rarg, (dnnl_memory_t[]){ kern[2], plain[2] });
    if (st == FL_OK && unblk) {
        const dnnl_dim_t *d = e->md[2].dims;
        unblock(y, buf[2], d[0], d[1], d[2] * d[3], e->blk);
    }
    for (int i = 0; i < 3; i++) {
        if (kern[i] && kern[i] != plain[i]) dnnl_memory_destroy(kern[i]);
        if (plain[i]) dnnl_memory_destroy(plain[i]);
        free(buf[i]);
    }
    return st;
}

fl_status fl_cpu_conv2d_f32(float *y, const float *x, const float *w, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh, int64_t ow, bool *ran) {
    *ran = false;
    /* A padding wider than the image is the columns': oneDNN's kernels work over the padded plane, in time and memory
     * (a 3×3 image padded by 2^22 with a stride of 2^22 took 7.5 s and 540 MB there, 2^26 more than 30 s and 2 GB,
     * not interruptible, and the same with a dilation of 2^26 beside it; the columns 0.05 s), where the columns make
     * only the windows. Within the image's extent the padded plane is at most three times the image. */
    const int64_t extent[2] = { H, W };
    for (int i = 0; i < 4; i++)
        if (geo[6 + i] > extent[i / 2]) return FL_OK;
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    const dnnl_engine_t eng = ve;
    const dnnl_stream_t str = vs;
    const int64_t per = C * H * W + OC * oh * ow;   /* a sample's input and output elements */
    int64_t nb = CV_CHUNK / (per > 0 ? per : 1);
    nb = nb < 1 ? 1 : nb > N ? N : nb;
    /* the primitives for a whole chunk and for the last one, both asked before anything is written */
    cv_key k[2] = { { nb, C, H, W, OC, groups, { 0 } }, { N % nb ? N % nb : nb, C, H, W, OC, groups, { 0 } } };
    memcpy(k[0].geo, geo, sizeof k[0].geo);
    memcpy(k[1].geo, geo, sizeof k[1].geo);
    cv_entry *e[2] = { NULL, NULL };
    fl_status st = cv_get(&e[0], &k[0], eng);
    if (st == FL_OK) st = cv_get(&e[1], &k[1], eng);
    if (st == FL_OK && !e[0]->unimpl && !e[1]->unimpl) {
        *ran = true;
        for (int64_t n0 = 0; st == FL_OK && n0 < N; n0 += nb) {
            st = fl_check_interrupt();
            if (st == FL_OK) st = cv_run(e[N - n0 < nb], eng, str, x + n0 * C * H * W, w, y + n0 * OC * oh * ow);
        }
    }
    fl_cpu_dnnl_release();
    return st;
}

fl_status fl_cpu_conv2d_f32_route(bool *direct, bool *in_place, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC,
                                  int64_t groups, const int64_t geo[10]) {
    *direct = *in_place = false;
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    cv_key k = { N, C, H, W, OC, groups, { 0 } };
    memcpy(k.geo, geo, sizeof k.geo);
    cv_entry *e = NULL;
    fl_status st = cv_get(&e, &k, ve);
    if (st == FL_OK && !e->unimpl) *direct = true, *in_place = e->rsrc == NULL;
    fl_cpu_dnnl_release();
    return st;
}

/* The device entry (device.h, conv2d_direct): the shapes read from the tensors, which conv_cols.c made contiguous
 * fp32 on the CPU */
fl_status fl_cpu_dev_conv2d_direct(fl_tensor *y, const fl_tensor *x, const fl_tensor *w, int64_t groups,
                                   const int64_t *geo, bool *ran) {
    *ran = false;
    if (x->dtype != FL_F32 || w->dtype != FL_F32 || y->dtype != FL_F32 || x->ndim != 4 || w->ndim != 4 ||
        y->ndim != 4 || !fl_tensor_is_contiguous(x) || !fl_tensor_is_contiguous(w) || !fl_tensor_is_contiguous(y))
        return FL_OK;   /* not a geometry of this route: the columns */
    return fl_cpu_conv2d_f32(fl_tensor_data(y), fl_tensor_data(x), fl_tensor_data(w), x->shape[0], x->shape[1],
                             x->shape[2], x->shape[3], y->shape[1], groups, geo, y->shape[2], y->shape[3], ran);
}
