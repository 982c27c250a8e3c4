/* cpu_nn_attn.c — scaled-dot-product attention on contiguous [B, H, T, D]. The products of every head
 * (Q·Kᵀ and P·V forward; dO·Vᵀ, Pᵀ·dO, dS·K and dSᵀ·Q backward) are batched oneDNN GEMMs over all B·H
 * heads at once (transposes read in place), with one fused row pass between them: scale + causal mask +
 * softmax forward, dS = scale·P⊙(dP − rowsum(P⊙dP)) backward. Each row is done by one thread with
 * fixed-order sums, so results do not depend on the thread count. The per-row loops at the end are
 * the fallback when a GEMM cannot run (out of memory, no oneDNN kernel). With bf16 (bf16 autocast) the
 * GEMMs take bf16 operands — the rounded copies are made once per call, P and dS block by block after
 * their row pass — and accumulate in fp32; the fallback rounds the same operands (it also runs where oneDNN has no
 * bf16 kernel: 2.6 on a CPU without AVX-512). bf16 calls go to the per-head kernels of cpu_nn_attn_bf16.c (or
 * its AVX2 + FMA family, cpu_nn_attn_fma.c) first, and fp32 calls to that family's fp32 form. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "par.h"
#include <stdlib.h>

/* s[0..n) = Σ_d a[d] · bt[d*T + 0..n)  (bt is a [D, T] transposed matrix) */
static inline void scores_row(const float *a, const float *bt, float *s, int64_t n, int64_t T, int64_t D) {
    for (int64_t j = 0; j < n; j++) s[j] = 0.0f;
    for (int64_t d = 0; d < D; d++) {
        const float ad = a[d], *row = bt + d * T;
        #pragma omp simd
        for (int64_t j = 0; j < n; j++) s[j] += ad * row[j];
    }
}

/* Fallback when the transposed scratch cannot be allocated: plain dot products. */
static inline void scores_row_dot(const float *a, const float *b, float *s, int64_t n, int64_t D) {
    for (int64_t j = 0; j < n; j++) {
        const float *br = b + j * D;
        float acc = 0.0f;
        #pragma omp simd reduction(+:acc)
        for (int64_t d = 0; d < D; d++) acc += a[d] * br[d];
        s[j] = acc;
    }
}

/* x rounded to bf16 and back (RNE): what a bf16 GEMM operand holds. */
static inline float bf16r(float x) { return fl_bf16_to_f32(fl_f32_to_bf16(x)); }

static void transpose(const float *src, float *dst, int64_t T, int64_t D) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) dst[d * T + t] = src[t * D + d];
}

/* Fallback forward, one (b, h) head per thread; scores use a per-thread transposed copy of K, so q·Kᵀ
 * is Σ_d q[d]·Kᵀ[d, :] with no horizontal sums. */
static void sdpa_fwd_rows(const float *q, const float *k, const float *v, float *out, float *att,
                            int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal, bool r16) {
    const int64_t BH = B * H;
    FL_PARALLEL(BH > 1 && BH * T * T * D > FL_NN_PAR_MIN,,
    {
        float *kt = malloc((size_t)(T * D) * sizeof(float));
        FL_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < BH; bh++) {
            const float *qh = q + bh * T * D, *kh = k + bh * T * D, *vh = v + bh * T * D;
            float *oh = out + bh * T * D, *ah = att + bh * T * T;
            if (kt) transpose(kh, kt, T, D);
            for (int64_t i = 0; i < T; i++) {
                const int64_t n = causal ? i + 1 : T;
                float *s = ah + i * T, *o = oh + i * D;
                if (kt) scores_row(qh + i * D, kt, s, n, T, D);
                else scores_row_dot(qh + i * D, kh, s, n, D);
                float m = -INFINITY;
                FL_PRAGMA(omp simd reduction(max:m))
                for (int64_t j = 0; j < n; j++) { s[j] *= scale; m = s[j] > m ? s[j] : m; }
                float sum = 0.0f;
                FL_PRAGMA(omp simd reduction(+:sum))
                for (int64_t j = 0; j < n; j++) { float e = fl_nn_expf(s[j] - m); s[j] = e; sum += e; }
                const float inv = 1.0f / sum;
                FL_PRAGMA(omp simd)
                for (int64_t j = 0; j < n; j++) s[j] *= inv;
                for (int64_t j = n; j < T; j++) s[j] = 0.0f;
                for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float p = r16 ? bf16r(s[j]) : s[j], *vr = vh + j * D;
                    FL_PRAGMA(omp simd)
                    for (int64_t d = 0; d < D; d++) o[d] += p * vr[d];
                }
            }
        }
        free(kt);
    });
}

/* Fallback backward, one (b, h) head per thread. Masked entries have P = 0, so only j < n(i) is visited. */
static void sdpa_bwd_rows(const float *q, const float *k, const float *v, const float *att, const float *dout,
                            float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                            bool r16) {
    const int64_t BH = B * H;
    FL_PARALLEL(BH > 1 && BH * T * T * D > FL_NN_PAR_MIN,,
    {
        float *vt = malloc((size_t)(T * D) * sizeof(float));
        /* the dS row lives on the stack up to T = 1024 (4 KiB), beyond that on the heap */
        float sbuf[1024];
        float *ds = T <= 1024 ? sbuf : malloc((size_t)T * sizeof(float));
        FL_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < BH; bh++) {
            const float *qh = q + bh * T * D, *kh = k + bh * T * D, *vh = v + bh * T * D;
            const float *ah = att + bh * T * T, *goh = dout + bh * T * D;
            float *dqh = dq + bh * T * D, *dkh = dk + bh * T * D, *dvh = dv + bh * T * D;
            for (int64_t e = 0; e < T * D; e++) { dqh[e] = 0.0f; dkh[e] = 0.0f; dvh[e] = 0.0f; }
            if (vt) transpose(vh, vt, T, D);
            float *dsr = ds;
            if (!dsr) continue;   /* out of memory (void kernel): leave zero gradients, never write out of bounds */
            for (int64_t i = 0; i < T; i++) {
                const float *p = ah + i * T, *go = goh + i * D, *qi = qh + i * D;
                float *dqi = dqh + i * D;
                /* the causal row length: probabilities above the diagonal are exactly 0 */
                int64_t n = T;
                while (n > 1 && p[n - 1] == 0.0f) n--;
                if (vt) scores_row(go, vt, dsr, n, T, D);
                else scores_row_dot(go, vh, dsr, n, D);
                float dot = 0.0f;
                FL_PRAGMA(omp simd reduction(+:dot))
                for (int64_t j = 0; j < n; j++) dot += p[j] * dsr[j];
                FL_PRAGMA(omp simd)
                for (int64_t j = 0; j < n; j++) dsr[j] = scale * p[j] * (dsr[j] - dot);
                for (int64_t j = 0; j < n; j++) {
                    const float g = r16 ? bf16r(dsr[j]) : dsr[j], pj = r16 ? bf16r(p[j]) : p[j], *kj = kh + j * D;
                    float *dkj = dkh + j * D, *dvj = dvh + j * D;
                    FL_PRAGMA(omp simd)
                    for (int64_t d = 0; d < D; d++) {
                        dqi[d] += g * kj[d];
                        dkj[d] += g * qi[d];
                        dvj[d] += pj * go[d];
                    }
                }
            }
        }
        free(vt);
        if (ds != sbuf) free(ds);
    });
}

/* ---- the GEMM path ------------------------------------------------------------------------ */

/* Causal attention is done in blocks of query rows [i0, i1): they only see keys [0, i1), so each
 * block's GEMMs skip the masked triangle beyond it (with 2 blocks 3/4 of the full products are
 * computed, with 8 blocks 9/16). Blocks of about 64 rows keep the GEMMs efficient; at most 8 blocks
 * bound the number of cached primitives per sequence length. Non-causal: one block. */
static int64_t attn_nblocks(int64_t T, int causal) {
    if (!causal) return 1;
    int64_t nb = (T + 63) / 64;
    return nb > 8 ? 8 : nb;
}

/* Rows [i0, i1) of one head (s points at the head's [T, T] matrix); AVX2 and AVX-512 copies. */
static inline __attribute__((always_inline)) void softmax_rows_span(float *s, int64_t i0, int64_t i1, int64_t T,
                                                                    float scale, int causal) {
    for (int64_t i = i0; i < i1; i++) attn_softmax_row(s + i * T, causal ? i + 1 : T, T, scale);
}
FL_CPU_AVX512 static void softmax_rows_span512(float *s, int64_t i0, int64_t i1, int64_t T, float scale, int causal) {
    softmax_rows_span(s, i0, i1, T, scale, causal);
}
static inline __attribute__((always_inline)) void dsoftmax_rows_span(const float *p, float *d, int64_t i0, int64_t i1,
                                                                     int64_t T, float scale, int causal) {
    for (int64_t i = i0; i < i1; i++) attn_dsoftmax_row(p + i * T, d + i * T, causal ? i + 1 : T, T, scale);
}
FL_CPU_AVX512 static void dsoftmax_rows_span512(const float *p, float *d, int64_t i0, int64_t i1, int64_t T, float scale,
                                                int causal) {
    dsoftmax_rows_span(p, d, i0, i1, T, scale, causal);
}

/* Rows [i0, i1) of every head: forward softmax of att in place (p == NULL), or dS into d from P = p. */
static void row_pass(const float *p, float *d, int64_t BH, int64_t T, int64_t i0, int64_t i1, float scale, int causal) {
    const bool wide = fl_cpu_avx512();
    FL_PAR_FOR(BH > 1 && BH * (i1 - i0) * T > FL_NN_PAR_MIN, schedule(static),
    for (int64_t bh = 0; bh < BH; bh++) {
        float *dh = d + bh * T * T;
        if (p) {
            const float *ph = p + bh * T * T;
            if (wide) dsoftmax_rows_span512(ph, dh, i0, i1, T, scale, causal);
            else dsoftmax_rows_span(ph, dh, i0, i1, T, scale, causal);
        } else {
            if (wide) softmax_rows_span512(dh, i0, i1, T, scale, causal);
            else softmax_rows_span(dh, i0, i1, T, scale, causal);
        }
    });
}

/* The GEMMs of one call in fp32 or on bf16 copies: operand `f` (fp32) or its bf16 copy `h`, same layout. */
typedef struct { bool bf16; } gemm_mode;
static fl_status gemm(gemm_mode g, int64_t batch, int64_t m, int64_t n, int64_t k, const float *af, const uint16_t *ah,
                      int64_t lda, int64_t sa, bool ta, const float *bf, const uint16_t *bh, int64_t ldb, int64_t sb,
                      bool tb, float *c, int64_t ldc, int64_t sc) {
    if (g.bf16) return fl_cpu_gemm_bf16(batch, m, n, k, ah, lda, sa, ta, bh, ldb, sb, tb, c, ldc, sc);
    return fl_cpu_gemm_f32(batch, m, n, k, af, lda, sa, ta, bf, ldb, sb, tb, c, ldc, sc);
}

/* bf16 copies of n floats (threads over chunks); NULL when out of memory. */
static uint16_t *bf16_copy(const float *x, int64_t n) {
    uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
    if (!h) return NULL;
    const int64_t blk = 1 << 16, nblk = (n + blk - 1) / blk;
    FL_PAR_FOR(n > FL_NN_PAR_MIN, schedule(static),
    for (int64_t b = 0; b < nblk; b++) fl_f32_to_bf16_n(x + b * blk, h + b * blk, (size_t)(n - b * blk < blk ? n - b * blk : blk)););
    return h;
}

/* Rows [i0, i1) of every head's [T, T] matrix src as bf16 into dst (same layout). */
static void rows_to_bf16(const float *src, uint16_t *dst, int64_t BH, int64_t T, int64_t i0, int64_t i1) {
    FL_PAR_FOR(BH > 1 && BH * (i1 - i0) * T > FL_NN_PAR_MIN, schedule(static),
    for (int64_t bh = 0; bh < BH; bh++)
        fl_f32_to_bf16_n(src + bh * T * T + i0 * T, dst + bh * T * T + i0 * T, (size_t)((i1 - i0) * T)););
}

/* n floats rounded to bf16 and kept in fp32 (r may be x), through a bf16 buffer on the stack: what the bf16
 * GEMMs' operands hold, for the per-row fallback. */
static void round_span(const float *x, float *r, int64_t n) {
    uint16_t h[1024];
    for (int64_t i = 0; i < n; i += 1024) {
        const size_t len = (size_t)(n - i < 1024 ? n - i : 1024);
        fl_f32_to_bf16_n(x + i, h, len);
        fl_bf16_to_f32_n(h, r + i, len);
    }
}

/* round_span over a new copy of n floats (threads over chunks); NULL when out of memory (the per-row fallback
 * then uses the unrounded values, out of memory being its own situation already). */
static float *rounded_f32(const float *x, int64_t n) {
    float *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!r) return NULL;
    const int64_t blk = 1 << 16, nblk = (n + blk - 1) / blk;
    FL_PAR_FOR(n > FL_NN_PAR_MIN, schedule(static),
    for (int64_t b = 0; b < nblk; b++) round_span(x + b * blk, r + b * blk, n - b * blk < blk ? n - b * blk : blk););
    return r;
}

/* Per row block: S = Q·Kᵀ into att, softmax in place, O = P·V. bf16: on bf16 copies of Q, K, V and of
 * each block of P. */
static fl_status sdpa_fwd_gemm(const float *q, const float *k, const float *v, float *out, float *att,
                               int64_t BH, int64_t T, int64_t D, float scale, int causal, bool bf16) {
    const int64_t nb = attn_nblocks(T, causal), Tb = (T + nb - 1) / nb, sq = T * D, sa = T * T;
    const gemm_mode g = { bf16 };
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *p16 = NULL;
    fl_status st = FL_OK;
    if (bf16) {
        q16 = bf16_copy(q, BH * sq); k16 = bf16_copy(k, BH * sq); v16 = bf16_copy(v, BH * sq);
        p16 = malloc((size_t)(BH * sa) * sizeof(uint16_t));
        if (!q16 || !k16 || !v16 || !p16) st = FL_ERR(FL_ENOMEM, "attention: out of memory for bf16 operands");
    }
    for (int64_t i0 = 0; i0 < T && st == FL_OK; i0 += Tb) {
        const int64_t i1 = i0 + Tb < T ? i0 + Tb : T, m = i1 - i0, nk = causal ? i1 : T;
        st = gemm(g, BH, m, nk, D, q + i0 * D, q16 ? q16 + i0 * D : NULL, D, sq, false, k, k16, D, sq, true, att + i0 * T,
                  T, sa);
        if (st != FL_OK) break;
        row_pass(NULL, att, BH, T, i0, i1, scale, causal);
        if (bf16) rows_to_bf16(att, p16, BH, T, i0, i1);
        st = gemm(g, BH, m, D, nk, att + i0 * T, p16 ? p16 + i0 * T : NULL, T, sa, false, v, v16, D, sq, false,
                  out + i0 * D, D, sq);
    }
    free(q16); free(k16); free(v16); free(p16);
    return st;
}

/* Query blocks: dP = dO·Vᵀ, dS (row pass), dQ = dS·K. Then key blocks [j0, j1), which only rows i ≥ j0
 * see when causal: dV = Pᵀ·dO and dK = dSᵀ·Q over those rows. bf16: on bf16 copies of dO, V, K, Q, P
 * and of each block of dS. */
static fl_status sdpa_bwd_gemm(const float *q, const float *k, const float *v, const float *att, const float *dout,
                               float *dq, float *dk, float *dv, float *ds, int64_t BH, int64_t T, int64_t D,
                               float scale, int causal, bool bf16) {
    const int64_t nb = attn_nblocks(T, causal), Tb = (T + nb - 1) / nb, sq = T * D, sa = T * T;
    const gemm_mode g = { bf16 };
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *o16 = NULL, *p16 = NULL, *s16 = NULL;
    fl_status st = FL_OK;
    if (bf16) {
        q16 = bf16_copy(q, BH * sq); k16 = bf16_copy(k, BH * sq); v16 = bf16_copy(v, BH * sq);
        o16 = bf16_copy(dout, BH * sq); p16 = bf16_copy(att, BH * sa);
        s16 = malloc((size_t)(BH * sa) * sizeof(uint16_t));
        if (!q16 || !k16 || !v16 || !o16 || !p16 || !s16) st = FL_ERR(FL_ENOMEM, "attention: out of memory for bf16 operands");
    }
    for (int64_t i0 = 0; i0 < T && st == FL_OK; i0 += Tb) {
        const int64_t i1 = i0 + Tb < T ? i0 + Tb : T, m = i1 - i0, nk = causal ? i1 : T;
        st = gemm(g, BH, m, nk, D, dout + i0 * D, o16 ? o16 + i0 * D : NULL, D, sq, false, v, v16, D, sq, true,
                  ds + i0 * T, T, sa);
        if (st != FL_OK) break;
        row_pass(att, ds, BH, T, i0, i1, scale, causal);
        if (bf16) rows_to_bf16(ds, s16, BH, T, i0, i1);
        st = gemm(g, BH, m, D, nk, ds + i0 * T, s16 ? s16 + i0 * T : NULL, T, sa, false, k, k16, D, sq, false,
                  dq + i0 * D, D, sq);
    }
    for (int64_t j0 = 0; j0 < T && st == FL_OK; j0 += Tb) {
        const int64_t j1 = j0 + Tb < T ? j0 + Tb : T, m = j1 - j0, r0 = causal ? j0 : 0;
        st = gemm(g, BH, m, D, T - r0, att + r0 * T + j0, p16 ? p16 + r0 * T + j0 : NULL, T, sa, true, dout + r0 * D,
                  o16 ? o16 + r0 * D : NULL, D, sq, false, dv + j0 * D, D, sq);
        if (st == FL_OK)
            st = gemm(g, BH, m, D, T - r0, ds + r0 * T + j0, s16 ? s16 + r0 * T + j0 : NULL, T, sa, true, q + r0 * D,
                      q16 ? q16 + r0 * D : NULL, D, sq, false, dk + j0 * D, D, sq);
    }
    free(q16); free(k16); free(v16); free(o16); free(p16); free(s16);
    return st;
}

_Atomic bool fl_cpu_sdpa_gemm_allowed = true;

/* att[i, j] = softmax_j(scale · q_i·k_j) over j ≤ i when causal (0 stored above the diagonal),
 * out_i = Σ_j att[i, j] · v_j. */
void fl_cpu_sdpa_causal_fwd(const float *q, const float *k, const float *v, float *out, float *att,
                            int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal, bool bf16) {
    const int64_t BH = B * H;
    if (BH <= 0 || T <= 0) return;
    if (D > 0 && fl_cpu_sdpa_gemm_allowed && bf16 && fl_cpu_attn_bf16_available() &&
        fl_cpu_attn_bf16_fwd(q, k, v, out, att, BH, T, D, scale, causal) == FL_OK)
        return;
    const fl_attn_layout l = { 0, T * D, D };   /* contiguous heads, as one batch of BH */
    if (D > 0 && fl_cpu_sdpa_gemm_allowed && !bf16 && fl_cpu_attn_f32_available() &&
        fl_cpu_attn_f32_fwd_at(q, k, v, l, out, l, att, 1, BH, T, D, scale, causal) == FL_OK)
        return;
    if (D > 0 && fl_cpu_sdpa_gemm_allowed && sdpa_fwd_gemm(q, k, v, out, att, BH, T, D, scale, causal, bf16) == FL_OK)
        return;
    const int64_t n = BH * T * D;
    float *qr = bf16 ? rounded_f32(q, n) : NULL, *kr = bf16 ? rounded_f32(k, n) : NULL;
    float *vr = bf16 ? rounded_f32(v, n) : NULL;
    sdpa_fwd_rows(qr ? qr : q, kr ? kr : k, vr ? vr : v, out, att, B, H, T, D, scale, causal, bf16);
    free(qr); free(kr); free(vr);
}

/* With P = att, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)): dV = Pᵀ·dO, dQ = scale·dS·K,
 * dK = scale·dSᵀ·Q. dq, dk, dv are overwritten. `causal` must be the forward's (it only decides which
 * blocks are skipped: above the diagonal P = 0 either way). */
void fl_cpu_sdpa_causal_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                            float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                            int causal, bool bf16) {
    const int64_t BH = B * H;
    if (BH <= 0 || T <= 0 || D <= 0) return;
    if (fl_cpu_sdpa_gemm_allowed && bf16 && fl_cpu_attn_bf16_available() &&
        fl_cpu_attn_bf16_bwd(q, k, v, att, dout, dq, dk, dv, BH, T, D, scale, causal) == FL_OK)
        return;
    const fl_attn_layout l = { 0, T * D, D };
    if (fl_cpu_sdpa_gemm_allowed && !bf16 && fl_cpu_attn_f32_available() &&
        fl_cpu_attn_f32_bwd_at(q, k, v, l, att, dout, l, dq, dk, dv, l, 1, BH, T, D, scale, causal) == FL_OK)
        return;
    float *ds = fl_cpu_sdpa_gemm_allowed ? malloc((size_t)(BH * T * T) * sizeof(float)) : NULL;
    fl_status st = ds ? sdpa_bwd_gemm(q, k, v, att, dout, dq, dk, dv, ds, BH, T, D, scale, causal, bf16) : FL_ENOMEM;
    free(ds);
    if (st == FL_OK) return;
    const int64_t n = BH * T * D;
    float *qr = bf16 ? rounded_f32(q, n) : NULL, *kr = bf16 ? rounded_f32(k, n) : NULL;
    float *vr = bf16 ? rounded_f32(v, n) : NULL, *gr = bf16 ? rounded_f32(dout, n) : NULL;
    sdpa_bwd_rows(qr ? qr : q, kr ? kr : k, vr ? vr : v, att, gr ? gr : dout, dq, dk, dv, B, H, T, D, scale, bf16);
    free(qr); free(kr); free(vr); free(gr);
}
