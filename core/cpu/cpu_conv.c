/* cpu_conv.c — conv2d's forward and backward by oneDNN's convolution primitives (cpu_conv.h): the forward, the
 * input's gradient (backward data) and the weight's with the bias's (backward weights), of fp32 operands or (since
 * stop 100) bf16 ones: the operands read in bf16, each sum of exact products kept in fp32 by the kernel and written
 * fp32 (the gradients), or rounded to bf16 once in the copy out (a bf16 result), as torch 2.15's mkldnn bf16 conv.
 * The columns route (core/conv_cols.c: im2col, then a GEMM; col2im backward) writes and reads C·kh·kw values per
 * output position; the direct kernels read the image in place, in the layout they choose (brgconv on AVX-512: NHWC;
 * other kernels nChw16c / nChw8c), as torch 2.15's CPU conv does (its mkldnn route); a first layer (one group of under
 * 16 channels) reads its NCHW input as it is, by the first-layer kernel (cv_make). The operands are reordered into
 * that layout each call, the result copied out of it (unblock, faster than oneDNN 2.6's reorder; an unknown layout or
 * the weight's gradient by that reorder); a few samples at a time (about 16 MiB of input and output a chunk), so the
 * blocked copies stay bounded and Ctrl-C is polled between chunks (the weight's and bias's gradients: each chunk's
 * summed in double, in chunk order, rounded once). Primitives (the convolution and its three reorders) are kept per
 * geometry, kind and dtype in a small LRU cache; the blocked copies' buffers between calls (cv_arena). Channels-last
 * images (NHWC memory seen as NCHW: torch's channels_last; since stop 101) are handed to oneDNN as they are, by nhwc
 * descriptors: the input and the output gradient read in place, the result and the input's gradient written in place
 * (a bf16 result by nhwc_out from the kernel's fp32), only the weight reordered. */
#include "cpu_internal.h"
#include "cpu_conv.h"
#include "half_cvt.h"
#include "par.h"
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>

#define CV_CACHE 16
#define CV_CHUNK (INT64_C(1) << 22)   /* input + output elements per chunk of samples */

/* the primitive's kind: the forward, the input's gradient, the weight's (with the bias's: CV_BWD_WB) */
enum { CV_FWD, CV_BWD_D, CV_BWD_W, CV_BWD_WB };

/* dt: the operands read (the input, the weight, the output's gradient): FL_F32 or FL_BF16; the operand written is
 * fp32 either way. nhwc: the images (the input, the result, their gradients) are channels-last in memory (NHWC, the
 * tensors seen as NCHW, torch's channels_last), handed to oneDNN as they are (stop 101) */
typedef struct { int64_t n, c, h, w, oc, groups, geo[10], kind, dt, nhwc; } cv_key;

typedef struct {
    cv_key key;
    bool used, unimpl;            /* unimpl: oneDNN has only a GEMM-based or reference kernel here */
    int out;                      /* the operand written: 0 src (CV_BWD_D), 1 weights (CV_BWD_W*), 2 dst (CV_FWD) */
    int64_t blk;                  /* the written image's channel block (16, 8: nChw16c, nChw8c; its channels: NHWC),
                                     copied back to NCHW here (unblock); 0: by oneDNN's reorder */
    uint64_t tick;
    dnnl_primitive_t conv, re[3]; /* re[i]: operand i's reorder (plain to the kernel's, or back for the written one),
                                     NULL where the plain layout is the kernel's */
    dnnl_memory_desc_t md[7];     /* plain src, weights, dst; the kernel's src, weights, dst; the bias (CV_BWD_WB) */
} cv_entry;

/* used under fl_cpu_dnnl_acquire's lock; pin: the entry a conv holds while it makes its last chunk's (cv_chunks),
 * which fl_cpu_conv_drop_oldest leaves */
static struct { cv_entry e[CV_CACHE]; uint64_t tick; const cv_entry *pin; } cv;

#define CV_CHECK(call)                                                                                               \
    do { dnnl_status_t s_ = (call);                                                                                  \
         if (s_ != dnnl_success) { st = fl_cpu_dnnl_status(s_, "conv2d", #call); goto fail; }                        \
    } while (0)

static void cv_drop(cv_entry *e) {
    dnnl_primitive_t *p[4] = { &e->conv, &e->re[0], &e->re[1], &e->re[2] };
    for (int i = 0; i < 4; i++) if (*p[i]) { dnnl_primitive_destroy(*p[i]); *p[i] = NULL; }
    e->used = false;
}

/* a reorder from one layout to another, NULL where they are the same */
static fl_status reorder_of(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                            dnnl_engine_t eng) {
    *out = NULL;
    if (dnnl_memory_desc_equal(from, to)) return FL_OK;
    dnnl_primitive_desc_t pd;
    FL_TRY(fl_cpu_dnnl_room("conv2d", 0));
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL);
    if (s != dnnl_success) return fl_cpu_dnnl_status(s, "conv2d", "dnnl_reorder_primitive_desc_create");
    fl_status st = fl_cpu_dnnl_create(out, pd, "conv2d");
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* the primitive descriptor of k's kind with src (the input, or its gradient) in the layout *src (the plain one, or
 * format_tag_any's), the rest left to oneDNN; a backward one with a forward-training descriptor as its hint, as
 * oneDNN asks, of the operands read's dtype throughout (hsrc, hany: a bf16 forward where the gradients are fp32).
 * *pd NULL where oneDNN refuses the geometry; FL_ENOMEM where it ran out of memory (not a refusal: the geometry is
 * not marked as the columns' for good). */
static fl_status cv_pd(dnnl_primitive_desc_t *pd, const cv_key *k, const dnnl_memory_desc_t *src,
                       const dnnl_memory_desc_t *any, const dnnl_memory_desc_t *hsrc, const dnnl_memory_desc_t *hany,
                       const dnnl_memory_desc_t *bias, dnnl_engine_t eng) {
    const int64_t *q = k->geo;
    dnnl_dims_t strides = { q[2], q[3] }, dil = { q[4] - 1, q[5] - 1 }, pl = { q[6], q[8] }, pr = { q[7], q[9] };
    const bool wb = k->kind == CV_BWD_WB;
    dnnl_convolution_desc_t fd, cd;
    dnnl_primitive_desc_t hint = NULL;
    const bool fwd = k->kind == CV_FWD;
    *pd = NULL;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(
        &fd, fwd ? dnnl_forward_inference : dnnl_forward_training, dnnl_convolution_direct, fwd ? src : hsrc,
        fwd ? &any[1] : &hany[1], wb ? bias : NULL, fwd ? &any[2] : &hany[2], strides, dil, pl, pr);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(fwd ? pd : &hint, &fd, NULL, eng, NULL);
    if (s == dnnl_success && k->kind == CV_BWD_D)
        s = dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, src, &any[1], &any[2],
                                                             strides, dil, pl, pr);
    else if (s == dnnl_success && k->kind != CV_FWD)
        s = dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, src, &any[1],
                                                                wb ? bias : NULL, &any[2], strides, dil, pl, pr);
    if (s == dnnl_success && k->kind != CV_FWD) s = dnnl_primitive_desc_create(pd, &cd, NULL, eng, hint);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (s != dnnl_success) *pd = NULL;
    return s == dnnl_out_of_memory ? FL_ERR(FL_ENOMEM, "conv2d: out of memory making oneDNN's descriptor") : FL_OK;
}

static fl_status cv_make(cv_entry *e, const cv_key *k, dnnl_engine_t eng) {
    fl_status st = FL_OK;
    dnnl_primitive_desc_t pd = NULL;
    cv_drop(e);
    memset(e, 0, sizeof *e);
    e->key = *k;
    e->out = k->kind == CV_FWD ? 2 : k->kind == CV_BWD_D ? 0 : 1;
    const int64_t g = k->groups, *q = k->geo;
    const int64_t oh = (k->h + q[6] + q[7] - (q[4] * (q[0] - 1) + 1)) / q[2] + 1;
    const int64_t ow = (k->w + q[8] + q[9] - (q[5] * (q[1] - 1) + 1)) / q[3] + 1;
    dnnl_dims_t sd = { k->n, k->c, k->h, k->w }, dd = { k->n, k->oc, oh, ow }, bd = { k->oc };
    dnnl_dims_t wd = { g, k->oc / g, k->c / g, q[0], q[1] }, w1 = { k->oc, k->c, q[0], q[1] };
    dnnl_memory_desc_t any[3], hany[3], hsrc;   /* hany, hsrc: the backward's hint's, every operand in dt */
    /* bf16: the operands read in bf16, the one written (the forward's result, a gradient) in fp32: the products
     * exact, summed in fp32 by the kernel, rounded (to bf16, where the caller wants it) once after */
    dnnl_data_type_t ty[3];
    for (int i = 0; i < 3; i++) ty[i] = i == e->out || k->dt == FL_F32 ? dnnl_f32 : dnnl_bf16;
    const dnnl_format_tag_t img = k->nhwc ? dnnl_nhwc : dnnl_nchw;   /* the images' plain layout */
    CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[0], 4, sd, ty[0], img));
    if (g == 1) CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[1], 4, w1, ty[1], dnnl_oihw));
    else CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[1], 5, wd, ty[1], dnnl_goihw));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[2], 4, dd, ty[2], img));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&e->md[6], 1, bd, dnnl_f32, dnnl_a));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[0], 4, sd, ty[0], dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[1], g == 1 ? 4 : 5, g == 1 ? w1 : wd, ty[1], dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&any[2], 4, dd, ty[2], dnnl_format_tag_any));
    const dnnl_data_type_t hty = k->dt == FL_F32 ? dnnl_f32 : dnnl_bf16;
    CV_CHECK(dnnl_memory_desc_init_by_tag(&hsrc, 4, sd, hty, img));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&hany[0], 4, sd, hty, dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&hany[1], g == 1 ? 4 : 5, g == 1 ? w1 : wd, hty, dnnl_format_tag_any));
    CV_CHECK(dnnl_memory_desc_init_by_tag(&hany[2], 4, dd, hty, dnnl_format_tag_any));
    /* channels-last images (stop 101): the input and the result (or their gradients) in their plain NHWC, read and
     * written in place, as torch 2.15's mkldnn route does for a channels_last conv; the weight's layout left to
     * oneDNN as before. (ONEDNN_VERBOSE on this host: the same kernels as the layouts left to oneDNN picked,
     * brgconv forward, jit:avx512_core / jit:avx512_core_amx_bf16 backward, in nhwc.) */
    if (k->nhwc) {
        any[2] = e->md[2];
        CV_CHECK(dnnl_memory_desc_init_by_tag(&hany[2], 4, dd, hty, dnnl_nhwc));
    }
    /* a first layer (one group of fewer than 16 channels: an image's 1-4) asks first for its input as it is, NCHW:
     * oneDNN's direct kernels for so few channels (jit:avx512_core's or jit:avx2's first-layer kernel) read NCHW in
     * place and write blocked channels, as torch 2.15's mkldnn route does for such a layer; the layouts left to the
     * primitive (format_tag_any) gave brgconv in NHWC, the input reordered each call, slower (docs/performance.md,
     * "conv2d's first layer"). The weight's gradient the same way (oneDNN's first-layer backward-weights kernel reads
     * NCHW too); a first layer's input gradient is the columns' (fl_cpu_conv2d_bwd_data declines it). A fixed
     * rule by geometry, not a timing: a geometry always takes the same kernel. */
    const bool first = g == 1 && k->c < 16 && k->kind != CV_BWD_D && !k->nhwc;
    const char *impl = NULL;
    /* the descriptors JIT their kernels too (brgconv's): the room for them first (fl_cpu_dnnl_room) */
    if ((st = fl_cpu_dnnl_room("conv2d", 0)) != FL_OK) goto fail;
    for (int t = first ? 0 : 1; t < 2 && !pd; t++) {
        const bool pl = !t || k->nhwc;   /* the input in its plain layout */
        if ((st = cv_pd(&pd, k, pl ? &e->md[0] : &any[0], any, pl ? &hsrc : &hany[0], hany, &e->md[6], eng)) != FL_OK)
            goto fail;
        impl = NULL;
        if (pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success) impl = NULL;
        /* declined: the GEMM-based kernels make columns as conv_cols.c does (slower here), the reference ones are
         * slower still, and a geometry oneDNN refuses (past its limits) is the columns' to compute, not an error */
        if (pd && (!impl || strstr(impl, "gemm") || strstr(impl, "ref"))) {
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
        }
    }
    /* the bias's gradient in its plain layout only (oneDNN's kernels keep it so; another would want a reorder) */
    if (pd && k->kind == CV_BWD_WB && !dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd,
                                                                  dnnl_query_diff_weights_md, 1), &e->md[6])) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if (!pd) {
        e->used = e->unimpl = true;
        return FL_OK;
    }
    const bool bw = k->kind == CV_BWD_W || k->kind == CV_BWD_WB;
    e->md[3] = *dnnl_primitive_desc_query_md(pd, k->kind == CV_BWD_D ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
    e->md[4] = *dnnl_primitive_desc_query_md(pd, bw ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    e->md[5] = *dnnl_primitive_desc_query_md(pd, k->kind == CV_FWD ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0);
    if ((st = fl_cpu_dnnl_create(&e->conv, pd, "conv2d")) != FL_OK) goto fail;
    /* the written image (the forward's result, the input's gradient) copied back by unblock where its layout is one
     * of these; the weight's gradient (small) by oneDNN's reorder */
    if (e->out != 1 && !k->nhwc) {
        static const dnnl_format_tag_t tags[3] = { dnnl_nhwc, dnnl_nChw16c, dnnl_nChw8c };
        const int o = e->out;
        for (int i = 0; i < 3 && !e->blk; i++) {
            dnnl_memory_desc_t t;
            CV_CHECK(dnnl_memory_desc_init_by_tag(&t, 4, o ? dd : sd, dnnl_f32, tags[i]));
            if (dnnl_memory_desc_equal(&t, &e->md[3 + o])) e->blk = i == 0 ? (o ? k->oc : k->c) : i == 1 ? 16 : 8;
        }
    }
    for (int i = 0; i < 3; i++) {
        if (i == e->out && e->blk) continue;
        st = i == e->out ? reorder_of(&e->re[i], &e->md[3 + i], &e->md[i], eng)
                         : reorder_of(&e->re[i], &e->md[i], &e->md[3 + i], eng);
        if (st != FL_OK) goto fail;
    }
    dnnl_primitive_desc_destroy(pd);
    e->used = true;
    return FL_OK;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    cv_drop(e);
    return st;
}

/* The least recently used cached conv primitives (the convolution and its reorders) destroyed, where fl_cpu_dnnl_room
 * finds no room (stop 102: a conv-heavy run's 16 entries held ~31 MiB of JIT code on AVX2, which a new primitive's
 * room could not take); not the pinned entry, nor one being made (its used flag is set only once it is whole). */
bool fl_cpu_conv_drop_oldest(void) {
    cv_entry *old = NULL;
    for (int i = 0; i < CV_CACHE; i++) {
        cv_entry *e = &cv.e[i];
        if (e->used && !e->unimpl && e != cv.pin && (!old || e->tick < old->tick)) old = e;
    }
    if (!old) return false;
    cv_drop(old);
    memset(old, 0, sizeof *old);   /* an empty slot: cv_get takes it first */
    return true;
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

/* The blocked copies (the operands in the kernel's layouts): one buffer per operand kept between calls, grown to the
 * largest chunk asked (a chunk's input and output are about 16 MiB), where each call allocated and freed them (the
 * pages of a fresh allocation faulted in again each call). Used under fl_cpu_dnnl_acquire's lock, as the cache, so
 * one set serves every thread; a set past CV_ARENA_KEEP bytes (a single sample past the chunk's size) is freed after
 * the call that needed it, and the set at exit, or where a oneDNN primitive finds no room (fl_cpu_conv_arena_free). */
#define CV_ARENA_KEEP (INT64_C(64) << 20)
static struct { void *p[3]; size_t n[3]; bool hooked; } cv_arena;

void fl_cpu_conv_arena_free(void) {
    for (int i = 0; i < 3; i++) {
        free(cv_arena.p[i]);
        cv_arena.p[i] = NULL;
        cv_arena.n[i] = 0;
    }
}

/* operand i's buffer of at least md's size, NULL where memory ran out */
static void *cv_buffer(int i, const dnnl_memory_desc_t *md) {
    size_t n = (dnnl_memory_desc_get_size(md) + 63) / 64 * 64;
    if (!n) n = 64;
    if (cv_arena.n[i] >= n) return cv_arena.p[i];
    if (!cv_arena.hooked) cv_arena.hooked = atexit(fl_cpu_conv_arena_free) == 0;
    free(cv_arena.p[i]);
    cv_arena.n[i] = 0;
    if (!(cv_arena.p[i] = aligned_alloc(64, n))) return NULL;
    cv_arena.n[i] = n;
    return cv_arena.p[i];
}

/* after a call: the set freed where it grew past CV_ARENA_KEEP */
static void cv_arena_trim(void) {
    if ((int64_t)(cv_arena.n[0] + cv_arena.n[1] + cv_arena.n[2]) > CV_ARENA_KEEP) fl_cpu_conv_arena_free();
}

/* one execution of p with two to four memories */
static fl_status cv_exec(dnnl_primitive_t p, dnnl_stream_t str, int n, const int *arg, dnnl_memory_t const *mem) {
    dnnl_exec_arg_t a[4];
    for (int i = 0; i < n; i++) a[i] = (dnnl_exec_arg_t){ arg[i], mem[i] };
    dnnl_status_t s = fl_cpu_dnnl_fail_injected("execute") ? dnnl_out_of_memory : dnnl_primitive_execute(p, str, n, a);
    if (s == dnnl_success) s = dnnl_stream_wait(str);
    return fl_cpu_dnnl_status(s, "conv2d", "dnnl_primitive_execute");
}

/* r[i] (16 floats) = column i of the 16×16 tile whose rows r held: four rounds of shuffles */
FL_CPU_AVX512 static inline void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

/* fl_f32_to_bf16_bits on 16 lanes (the same bits: RNE, a NaN kept quiet) */
FL_CPU_AVX512 static inline __m256i bf16x16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                   _mm512_set1_epi32(0x7F800000));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                                 _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* unblock's full tiles on AVX-512 (bs a multiple of 16): 16 positions × 16 channels read as 16 rows, transposed in
 * registers, written as 16 runs of a channel's plane (the bias added, or rounded to bf16, as the loop below does);
 * the same values as the loop (a copy, one fp32 addition, one rounding). Returns the positions done (a multiple of
 * 16): the caller's loop does the rest. */
FL_CPU_AVX512 static int64_t unblock_tiles(float *dst, uint16_t *d16, const float *src, const float *bias, int64_t nc,
                                           int64_t hw, int64_t bs) {
    const int64_t lt = hw / 16 * 16;
    for (int64_t l0 = 0; l0 < lt; l0 += 16)
        for (int64_t j0 = 0; j0 < nc; j0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (l0 + i) * bs + j0);
            tr16(r);
            for (int i = 0; i < 16; i++) {
                const __m512 v = bias ? _mm512_add_ps(r[i], _mm512_set1_ps(bias[j0 + i])) : r[i];
                if (d16) _mm256_storeu_si256((__m256i *)(d16 + (j0 + i) * hw + l0), bf16x16(v));
                else _mm512_storeu_ps(dst + (j0 + i) * hw + l0, v);
            }
        }
    return lt;
}

/* y [m, oc, hw] from b, its blocks of bs channels ([m, ⌈oc/bs⌉, hw, bs], the last block's spare channels skipped;
 * NHWC is one block of oc), plus bias[channel] where bias is given (the forward's: one fp32 addition, as conv_cols.c
 * added it after): a copy, 16 positions of a block at a time (16 rows of bs channels read, 16 floats of each channel's
 * plane written), where oneDNN 2.6's reorder ran it at about a third of the memory's speed. Where y16 is given the
 * values are rounded to bf16 there instead (fl_f32_to_bf16_bits: the cast's rounding, RNE, NaN kept quiet; a bf16
 * result rounded once). */
static void unblock(float *y, uint16_t *y16, const float *b, const float *bias, int64_t m, int64_t oc, int64_t hw,
                    int64_t bs) {
    const int64_t nbk = (oc + bs - 1) / bs;
    /* tiles where each block's channels are all there (nChw16c with oc a multiple of 16, or NHWC of such oc) */
    const bool tiles = bs % 16 == 0 && oc % 16 == 0 && fl_cpu_avx512();
    FL_PAR_FOR(m * oc * hw >= (INT64_C(1) << 16), collapse(2) schedule(static),
    for (int64_t n = 0; n < m; n++)
        for (int64_t cb = 0; cb < nbk; cb++) {
            const float *src = b + (n * nbk + cb) * hw * bs;
            const int64_t nc = oc - cb * bs < bs ? oc - cb * bs : bs;
            float *dst = y16 ? NULL : y + (n * oc + cb * bs) * hw;
            uint16_t *d16 = y16 ? y16 + (n * oc + cb * bs) * hw : NULL;
            const int64_t done = tiles ? unblock_tiles(dst, d16, src, bias ? bias + cb * bs : NULL, nc, hw, bs) : 0;
            for (int64_t l0 = done; l0 < hw; l0 += 16) {
                const int64_t le = hw - l0 < 16 ? hw - l0 : 16;
                for (int64_t j = 0; j < nc; j++) {
                    if (d16 && bias) {
                        const float bj = bias[cb * bs + j];
                        for (int64_t l = l0; l < l0 + le; l++) d16[j * hw + l] = fl_f32_to_bf16_bits(src[l * bs + j] + bj);
                    } else if (d16) {
                        for (int64_t l = l0; l < l0 + le; l++) d16[j * hw + l] = fl_f32_to_bf16_bits(src[l * bs + j]);
                    } else if (bias) {
                        const float bj = bias[cb * bs + j];
                        for (int64_t l = l0; l < l0 + le; l++) dst[j * hw + l] = src[l * bs + j] + bj;
                    } else {
                        for (int64_t l = l0; l < l0 + le; l++) dst[j * hw + l] = src[l * bs + j];
                    }
                }
            }
        });
}

/* the written image's copy out of an NHWC kernel into an NHWC bf16 result (y16: each value plus the bias where given,
 * rounded once, as unblock), or the bias added in place (y, an fp32 result the kernel wrote): np positions of oc
 * channels; the same fp32 addition and rounding as unblock's */
/* nhwc_out's rounding of n values (plus bias[j] where given) on AVX-512: 16 at a time (bf16x16: the same bits as
 * fl_f32_to_bf16_bits); returns how many it did (a multiple of 16) */
FL_CPU_AVX512 static int64_t nhwc_round16(uint16_t *d, const float *s, const float *bias, int64_t n) {
    const int64_t n16 = n / 16 * 16;
    for (int64_t j = 0; j < n16; j += 16) {
        __m512 v = _mm512_loadu_ps(s + j);
        if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + j));
        _mm256_storeu_si256((__m256i *)(d + j), bf16x16(v));
    }
    return n16;
}

static void nhwc_out(float *y, uint16_t *y16, const float *src, const float *bias, int64_t np, int64_t oc) {
    const bool v16 = fl_cpu_avx512();
    FL_PAR_FOR(np * oc >= (INT64_C(1) << 16), schedule(static),
    for (int64_t p = 0; p < np; p++) {
        const float *s = y16 ? src + p * oc : y + p * oc;
        const int64_t j0 = y16 && v16 ? nhwc_round16(y16 + p * oc, s, bias, oc) : 0;
        if (j0 == oc) continue;
        if (y16 && bias) {
            uint16_t *d = y16 + p * oc;
            for (int64_t j = j0; j < oc; j++) d[j] = fl_f32_to_bf16_bits(s[j] + bias[j]);
        } else if (y16) {
            uint16_t *d = y16 + p * oc;
            for (int64_t j = j0; j < oc; j++) d[j] = fl_f32_to_bf16_bits(s[j]);
        } else {
            float *d = y + p * oc;
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < oc; j++) d[j] = s[j] + bias[j];
        }
    });
}

/* a oneDNN memory over the buffer p; out of memory (the object's own allocation) is FL_ENOMEM, which the binding
 * collects and retries (until stop 101 a device error) */
static fl_status cv_memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md, dnnl_engine_t eng, void *p) {
    dnnl_status_t s = fl_cpu_dnnl_fail_injected("memory_create") ? dnnl_out_of_memory : dnnl_memory_create(m, md, eng, p);
    if (s != dnnl_success) *m = NULL;
    return fl_cpu_dnnl_status(s, "conv2d", "dnnl_memory_create");
}

/* m samples by e's primitives: user = { src, weights, dst } in the plain layouts (the written one e->out), db the
 * bias's gradient (CV_BWD_WB), bias the forward's bias where unblock adds it (*biased: it did); y16: the written
 * operand is bf16 there, rounded by unblock (e->blk set: the caller checked) */
static fl_status cv_run(cv_entry *e, dnnl_engine_t eng, dnnl_stream_t str, void *const user[3], float *db,
                        const float *bias, bool *biased, bool y16) {
    fl_status st = FL_OK;
    void *buf[3] = { NULL, NULL, NULL };   /* cv_arena's */
    dnnl_memory_t plain[3] = { NULL, NULL, NULL }, kern[3] = { NULL, NULL, NULL }, mb = NULL;
    const int o = e->out;
    const bool nh16 = e->key.nhwc && y16;   /* an NHWC bf16 result: the kernel's fp32 in a buffer, rounded by nhwc_out */
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        if ((st = cv_memory(&plain[i], &e->md[i], eng, user[i])) != FL_OK) break;
        if (!e->re[i] && !(i == o && (e->blk || nh16))) { kern[i] = plain[i]; continue; }
        if (!(buf[i] = cv_buffer(i, &e->md[3 + i]))) {
            st = FL_ERR(FL_ENOMEM, "conv2d: out of memory for oneDNN's blocked copy (%zu bytes)",
                        dnnl_memory_desc_get_size(&e->md[3 + i]));
            break;
        }
        st = cv_memory(&kern[i], &e->md[3 + i], eng, buf[i]);
    }
    if (st == FL_OK && e->key.kind == CV_BWD_WB) st = cv_memory(&mb, &e->md[6], eng, db);
    static const int args[4][4] = {
        { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST },
        { DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST },
        { DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST },
        { DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_BIAS },
    };
    const int rarg[2] = { DNNL_ARG_FROM, DNNL_ARG_TO };
    for (int i = 0; i < 3 && st == FL_OK; i++)
        if (i != o && e->re[i]) st = cv_exec(e->re[i], str, 2, rarg, (dnnl_memory_t[]){ plain[i], kern[i] });
    if (st == FL_OK)
        st = cv_exec(e->conv, str, mb ? 4 : 3, args[e->key.kind], (dnnl_memory_t[]){ kern[0], kern[1], kern[2], mb });
    if (st == FL_OK && e->re[o]) st = cv_exec(e->re[o], str, 2, rarg, (dnnl_memory_t[]){ kern[o], plain[o] });
    *biased = false;
    if (st == FL_OK && e->blk) {
        const dnnl_dim_t *d = e->md[o].dims;
        unblock(y16 ? NULL : user[o], y16 ? user[o] : NULL, buf[o], bias, d[0], d[1], d[2] * d[3], e->blk);
        *biased = bias != NULL;
    } else if (st == FL_OK && e->key.nhwc && o != 1 && (nh16 || bias)) {
        const dnnl_dim_t *d = e->md[o].dims;
        nhwc_out(nh16 ? NULL : user[o], nh16 ? user[o] : NULL, buf[o], bias, d[0] * d[2] * d[3], d[1]);
        *biased = bias != NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (kern[i] && kern[i] != plain[i]) dnnl_memory_destroy(kern[i]);
        if (plain[i]) dnnl_memory_destroy(plain[i]);
    }
    if (mb) dnnl_memory_destroy(mb);
    return st;
}

/* A padding wider than the image is the columns': oneDNN's kernels work over the padded plane, in time and memory (a
 * 3×3 image padded by 2^22 with a stride of 2^22 took 7.5 s and 540 MB there, 2^26 more than 30 s and 2 GB, not
 * interruptible, and the same with a dilation of 2^26 beside it; the columns 0.05 s), where the columns make only the
 * windows. Within the image's extent the padded plane is at most three times the image. */
static bool cv_wide_padding(int64_t H, int64_t W, const int64_t geo[10]) {
    const int64_t extent[2] = { H, W };
    for (int i = 0; i < 4; i++)
        if (geo[6 + i] > extent[i / 2]) return true;
    return false;
}

/* the primitives of kind for a whole chunk of *nb samples and for the last one (e[1]), both asked before anything is
 * written; *ok where oneDNN has a direct kernel for both */
static fl_status cv_chunks(cv_entry *e[2], int64_t *nb, bool *ok, int kind, fl_dtype dt, bool nhwc, int64_t N,
                           int64_t C, int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10],
                           int64_t oh, int64_t ow, dnnl_engine_t eng) {
    const int64_t per = C * H * W + OC * oh * ow;   /* a sample's input and output elements */
    int64_t b = CV_CHUNK / (per > 0 ? per : 1);
    b = b < 1 ? 1 : b > N ? N : b;
    *nb = b;
    cv_key k[2] = { { b, C, H, W, OC, groups, { 0 }, kind, dt, nhwc },
                    { N % b ? N % b : b, C, H, W, OC, groups, { 0 }, kind, dt, nhwc } };
    memcpy(k[0].geo, geo, sizeof k[0].geo);
    memcpy(k[1].geo, geo, sizeof k[1].geo);
    e[0] = e[1] = NULL;
    fl_status st = cv_get(&e[0], &k[0], eng);
    cv.pin = e[0];   /* (the room for e[1] must not drop it) */
    if (st == FL_OK) st = cv_get(&e[1], &k[1], eng);
    cv.pin = NULL;
    *ok = st == FL_OK && !e[0]->unimpl && !e[1]->unimpl;
    return st;
}

/* the bytes of an operand read in dt */
static int64_t cv_es(fl_dtype dt) { return dt == FL_F32 ? 4 : 2; }

/* bf16 declined, by measurement (docs/performance.md, "bf16 conv2d on oneDNN"): on NCHW images a 1×1 kernel (its
 * columns are a
 * strided copy; the primitive's reorders of the image cost more: [32, 64, 32, 32] → 128 at stride 2 took 2.3× the
 * columns' time forward) and a first layer (one group of under 16 channels: oneDNN 2.6's bf16 kernels for so few
 * channels are jit_bf16's, not AMX's, or brgconv's behind a reorder of the image; 1.4× the columns' forward); on NHWC
 * images (nhwc, stop 101) neither, read in place there (a first layer's jit:avx512_core_amx_bf16 forward 0.3-0.7×
 * the columns' time with their copies, its weight gradient 0.65-1.1×; a 1×1 forward at stride 1 0.4-0.5×: "conv2d on
 * channels_last (stop 101)"). And a
 * stride past the kernel's size in either dimension: oneDNN 2.6.3's brgconv:avx512_core_amx_bf16 forward there gives
 * wrong sums (-2.5e37 for 0.0023: 4,672 of 65,536 outputs of [1, 16, 256, 256] → 16, 3×3, stride 4, padding 1, on
 * one thread) or writes past its buffers (glibc's "munmap_chunk(): invalid pointer" for 2×2 at stride 4 on a 60×60
 * image) — a sweep of kernels 1-5, strides 1-7, images of 60-256 found no other case and fp32's brgconv right on the
 * same ones (docs/robustness.md, "bf16 conv2d on oneDNN, and the blocked buffers kept") */
static bool cv_bf16_declined(fl_dtype dt, bool nhwc, int64_t C, int64_t groups, const int64_t geo[10]) {
    return dt == FL_BF16 && (geo[2] > geo[0] || geo[3] > geo[1] ||
                             (!nhwc && ((geo[0] == 1 && geo[1] == 1) || (groups == 1 && C < 16))));
}

/* fl_cpu_conv2d's work, the result fp32 or, with y16, bf16 (each fp32 sum, plus the bias, rounded once: declined
 * where the kernel's layout is not one unblock copies) */
static fl_status cv_forward(void *y, bool y16, const void *x, const void *w, const float *bias, fl_dtype dt, bool nhwc,
                            int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t groups,
                            const int64_t geo[10], int64_t oh, int64_t ow, bool *ran) {
    *ran = false;
    if ((dt != FL_F32 && dt != FL_BF16) || cv_bf16_declined(dt, nhwc, C, groups, geo) || cv_wide_padding(H, W, geo))
        return FL_OK;
    const int64_t es = cv_es(dt);
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    cv_entry *e[2];
    int64_t nb;
    bool ok, biased = false;
    fl_status st = cv_chunks(e, &nb, &ok, CV_FWD, dt, nhwc, N, C, H, W, OC, groups, geo, oh, ow, ve);
    if (ok && y16 && !nhwc && (!e[0]->blk || !e[1]->blk)) ok = false;
    if (ok) {
        *ran = true;
        for (int64_t n0 = 0; st == FL_OK && n0 < N; n0 += nb) {
            void *const user[3] = { (char *)x + n0 * C * H * W * es, (void *)w,
                                    (char *)y + n0 * OC * oh * ow * (y16 ? 2 : 4) };
            st = fl_check_interrupt();
            if (st == FL_OK) st = cv_run(e[N - n0 < nb], ve, vs, user, NULL, bias, &biased, y16);
            if (st == FL_OK && bias && !biased) {   /* (a layout oneDNN's reorder copied back: the bias after) */
                float *yv = (float *)y + n0 * OC * oh * ow;
                const int64_t m = N - n0 < nb ? N - n0 : nb, L = oh * ow;
                for (int64_t q = 0; q < m * OC; q++) {
                    const float bq = bias[q % OC];
                    for (int64_t l = 0; l < L; l++) yv[q * L + l] += bq;
                }
            }
        }
    }
    cv_arena_trim();
    fl_cpu_dnnl_release();
    return st;
}

fl_status fl_cpu_conv2d(float *y, const void *x, const void *w, const float *bias, fl_dtype dt, int64_t N, int64_t C,
                        int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                        int64_t ow, bool *ran) {
    return cv_forward(y, false, x, w, bias, dt, false, N, C, H, W, OC, groups, geo, oh, ow, ran);
}

static fl_status cv_bwd_data(float *dx, const void *dy, const void *w, fl_dtype dt, bool nhwc, int64_t N, int64_t C,
                             int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                             int64_t ow, bool *ran) {
    *ran = false;
    if (dt != FL_F32 && dt != FL_BF16) return FL_OK;
    const int64_t es = cv_es(dt);
    /* declined, by measurement (docs/performance.md, "conv2d's backward by oneDNN"): a 1×1 kernel (jit_1x1's
     * reorders of the image cost more than the columns' GEMM: 1.2-1.35× their time) and a first layer's (one group
     * of under 16 channels: oneDNN's blocked input gradient of 3 channels took 2× the columns' time) */
    if ((geo[0] == 1 && geo[1] == 1) || (groups == 1 && C < 16) || cv_wide_padding(H, W, geo)) return FL_OK;
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    cv_entry *e[2];
    int64_t nb;
    bool ok, biased;
    fl_status st = cv_chunks(e, &nb, &ok, CV_BWD_D, dt, nhwc, N, C, H, W, OC, groups, geo, oh, ow, ve);
    if (ok) {
        *ran = true;
        for (int64_t n0 = 0; st == FL_OK && n0 < N; n0 += nb) {
            void *const user[3] = { dx + n0 * C * H * W, (void *)w, (char *)dy + n0 * OC * oh * ow * es };
            st = fl_check_interrupt();
            if (st == FL_OK) st = cv_run(e[N - n0 < nb], ve, vs, user, NULL, NULL, &biased, false);
        }
    }
    cv_arena_trim();
    fl_cpu_dnnl_release();
    return st;
}

fl_status fl_cpu_conv2d_bwd_data(float *dx, const void *dy, const void *w, fl_dtype dt, int64_t N, int64_t C,
                                 int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                                 int64_t ow, bool *ran) {
    return cv_bwd_data(dx, dy, w, dt, false, N, C, H, W, OC, groups, geo, oh, ow, ran);
}

static fl_status cv_bwd_weights(float *dw, float *db, const void *x, const void *dy, fl_dtype dt, bool nhwc, int64_t N,
                                int64_t C, int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10],
                                int64_t oh, int64_t ow, bool *ran) {
    *ran = false;
    if ((dt != FL_F32 && dt != FL_BF16) || cv_bf16_declined(dt, nhwc, C, groups, geo)) return FL_OK;
    const int64_t es = cv_es(dt);
    /* declined, by measurement: a 1×1 kernel (as the input's gradient; in NHWC too, stop 101: the same time as the
     * columns', [32, 64, 32, 32] → 128) */
    if ((geo[0] == 1 && geo[1] == 1) || cv_wide_padding(H, W, geo)) return FL_OK;
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    cv_entry *e[2];
    int64_t nb;
    bool ok, biased;
    fl_status st = cv_chunks(e, &nb, &ok, db ? CV_BWD_WB : CV_BWD_W, dt, nhwc, N, C, H, W, OC, groups, geo, oh, ow,
                             ve);
    const int64_t wn = OC * (C / groups) * geo[0] * geo[1], nv = wn + (db ? OC : 0);
    float *part = NULL;     /* a chunk's gradients (the weight's, then the bias's) where there are several chunks */
    double *acc = NULL;     /* their sum, in chunk order */
    if (ok && nb < N) {
        part = malloc((size_t)nv * sizeof *part);
        acc = calloc((size_t)nv, sizeof *acc);
        if (!part || !acc)
            st = FL_ERR(FL_ENOMEM, "conv2d: out of memory for the weight's gradient (%lld values)", (long long)nv);
    }
    if (ok && st == FL_OK) {
        *ran = true;
        for (int64_t n0 = 0; st == FL_OK && n0 < N; n0 += nb) {
            float *pw = part ? part : dw, *pb = part ? part + wn : db;
            void *const user[3] = { (char *)x + n0 * C * H * W * es, pw, (char *)dy + n0 * OC * oh * ow * es };
            st = fl_check_interrupt();
            if (st == FL_OK) st = cv_run(e[N - n0 < nb], ve, vs, user, pb, NULL, &biased, false);
            if (st == FL_OK && part)
                for (int64_t j = 0; j < nv; j++) acc[j] += (double)part[j];
        }
        if (st == FL_OK && part) {
            for (int64_t j = 0; j < wn; j++) dw[j] = (float)acc[j];
            for (int64_t j = wn; j < nv; j++) db[j - wn] = (float)acc[j];
        }
    }
    free(part);
    free(acc);
    cv_arena_trim();
    fl_cpu_dnnl_release();
    return st;
}

fl_status fl_cpu_conv2d_bwd_weights(float *dw, float *db, const void *x, const void *dy, fl_dtype dt, int64_t N,
                                    int64_t C, int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10],
                                    int64_t oh, int64_t ow, bool *ran) {
    return cv_bwd_weights(dw, db, x, dy, dt, false, N, C, H, W, OC, groups, geo, oh, ow, ran);
}

fl_status fl_cpu_conv2d_route(bool *direct, bool *in_place, fl_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W,
                              int64_t OC, int64_t groups, const int64_t geo[10]) {
    *direct = *in_place = false;
    if ((dt != FL_F32 && dt != FL_BF16) || cv_bf16_declined(dt, false, C, groups, geo)) return FL_OK;
    void *ve, *vs;
    FL_TRY(fl_cpu_dnnl_acquire(&ve, &vs));
    cv_key k = { N, C, H, W, OC, groups, { 0 }, CV_FWD, dt, 0 };
    memcpy(k.geo, geo, sizeof k.geo);
    cv_entry *e = NULL;
    fl_status st = cv_get(&e, &k, ve);
    if (st == FL_OK && !e->unimpl) *direct = true, *in_place = e->re[0] == NULL;
    fl_cpu_dnnl_release();
    return st;
}

size_t fl_cpu_conv2d_arena_bytes(void) {
    void *ve, *vs;
    if (fl_cpu_dnnl_acquire(&ve, &vs) != FL_OK) return 0;
    const size_t n = cv_arena.n[0] + cv_arena.n[1] + cv_arena.n[2];
    fl_cpu_dnnl_release();
    return n;
}

/* not a geometry of the direct route (the columns): the tensors are contiguous 4-D of dtype dt (conv_cols.c makes
 * them so): the operands read fp32 or bf16, the one written fp32 */
static bool cv_plain(const fl_tensor *t, fl_dtype dt) {
    return t->dtype == dt && t->ndim == 4 && fl_tensor_is_contiguous(t);
}

/* t 4-D [N, C, H, W] of dtype dt whose memory is NHWC without gaps (torch's channels_last strides: [H·W·C, 1, W·C,
 * C]; the stride of a size-1 dim not counted, as fl_tensor_is_contiguous) */
static bool cv_nhwc(const fl_tensor *t, fl_dtype dt) {
    if (t->dtype != dt || t->ndim != 4) return false;
    static const int order[4] = { 1, 3, 2, 0 };   /* innermost first */
    int64_t expect = 1;
    for (int i = 0; i < 4; i++) {
        const int d = order[i];
        if (t->shape[d] == 0) return true;
        if (t->shape[d] == 1) continue;
        if (t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

/* the images' layout for the entries: *nhwc false where both are contiguous (NCHW), true where both are NHWC
 * (conv_cols.c makes them one or the other); false returned where neither */
static bool cv_images(bool *nhwc, const fl_tensor *a, fl_dtype da, const fl_tensor *b, fl_dtype db) {
    *nhwc = !(cv_plain(a, da) && cv_plain(b, db));
    return !*nhwc || (cv_nhwc(a, da) && cv_nhwc(b, db));
}

static bool cv_bias_ok(const fl_tensor *b, int64_t oc) {
    return !b || (b->dtype == FL_F32 && b->ndim == 1 && b->shape[0] == oc && fl_tensor_is_contiguous(b));
}

/* The device entries (device.h, conv2d_direct*): the shapes read from the tensors, which conv_cols.c made contiguous
 * on the CPU, the operands read fp32 or bf16 (one dtype), the gradients written fp32, the result fp32 or (of bf16
 * operands) bf16 */
fl_status fl_cpu_dev_conv2d_direct(fl_tensor *y, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                                   int64_t groups, const int64_t *geo, bool *ran) {
    *ran = false;
    const bool y16 = y->dtype == FL_BF16 && x->dtype == FL_BF16;   /* a bf16 result of bf16 operands */
    bool nhwc;
    if (!cv_images(&nhwc, x, x->dtype, y, y16 ? FL_BF16 : FL_F32) || !cv_plain(w, x->dtype) ||
        !cv_bias_ok(b, y->shape[1]))
        return FL_OK;
    return cv_forward(fl_tensor_data(y), y16, fl_tensor_data(x), fl_tensor_data(w), b ? fl_tensor_data(b) : NULL,
                      x->dtype, nhwc, x->shape[0], x->shape[1], x->shape[2], x->shape[3], y->shape[1], groups, geo,
                      y->shape[2], y->shape[3], ran);
}

fl_status fl_cpu_dev_conv2d_direct_bwd_data(fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w, int64_t groups,
                                            const int64_t *geo, bool *ran) {
    *ran = false;
    bool nhwc;
    if (!cv_images(&nhwc, dx, FL_F32, dy, dy->dtype) || !cv_plain(w, dy->dtype)) return FL_OK;
    return cv_bwd_data(fl_tensor_data(dx), fl_tensor_data(dy), fl_tensor_data(w), dy->dtype, nhwc, dx->shape[0],
                       dx->shape[1], dx->shape[2], dx->shape[3], dy->shape[1], groups, geo, dy->shape[2], dy->shape[3],
                       ran);
}

fl_status fl_cpu_dev_conv2d_direct_bwd_weights(fl_tensor *dw, fl_tensor *db, const fl_tensor *x, const fl_tensor *dy,
                                               int64_t groups, const int64_t *geo, bool *ran) {
    *ran = false;
    bool nhwc;
    if (!cv_plain(dw, FL_F32) || !cv_images(&nhwc, x, x->dtype, dy, x->dtype) || !cv_bias_ok(db, dy->shape[1]))
        return FL_OK;
    return cv_bwd_weights(fl_tensor_data(dw), db ? fl_tensor_data(db) : NULL, fl_tensor_data(x), fl_tensor_data(dy),
                          x->dtype, nhwc, x->shape[0], x->shape[1], x->shape[2], x->shape[3], dy->shape[1], groups,
                          geo, dy->shape[2], dy->shape[3], ran);
}
