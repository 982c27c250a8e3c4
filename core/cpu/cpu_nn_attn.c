/* cpu_nn_attn.c — scaled-dot-product attention on contiguous [B, H, T, D]: one (b, h) head per thread
 * (so every sum has a fixed order). Inner loops are axpys over contiguous rows: scores use a per-thread
 * transposed copy of K (or V in backward), so q·K^T becomes Σ_d q[d]·K^T[d, :] with no horizontal sums. */
#include "cpu_nn_internal.h"
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

static void transpose(const float *src, float *dst, int64_t T, int64_t D) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) dst[d * T + t] = src[t * D + d];
}

/* att[i, j] = softmax_j(scale · q_i·k_j) over j ≤ i when causal (0 stored above the diagonal),
 * out_i = Σ_j att[i, j] · v_j. */
void fl_cpu_sdpa_causal_fwd(const float *q, const float *k, const float *v, float *out, float *att,
                            int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal) {
    const int64_t BH = B * H;
    #pragma omp parallel if (BH > 1 && BH * T * T * D > FL_NN_PAR_MIN)
    {
        float *kt = malloc((size_t)(T * D) * sizeof(float));
        #pragma omp for schedule(static)
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
                #pragma omp simd reduction(max:m)
                for (int64_t j = 0; j < n; j++) { s[j] *= scale; m = s[j] > m ? s[j] : m; }
                float sum = 0.0f;
                #pragma omp simd reduction(+:sum)
                for (int64_t j = 0; j < n; j++) { float e = fl_nn_expf(s[j] - m); s[j] = e; sum += e; }
                const float inv = 1.0f / sum;
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) s[j] *= inv;
                for (int64_t j = n; j < T; j++) s[j] = 0.0f;
                for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float p = s[j], *vr = vh + j * D;
                    #pragma omp simd
                    for (int64_t d = 0; d < D; d++) o[d] += p * vr[d];
                }
            }
        }
        free(kt);
    }
}

/* With P = att, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)):
 * dV = Pᵀ·dO, dQ = scale·dS·K, dK = scale·dSᵀ·Q. dq, dk, dv are overwritten. Masked entries have P = 0,
 * so only j < n(i) is visited. */
void fl_cpu_sdpa_causal_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                            float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale) {
    const int64_t BH = B * H;
    #pragma omp parallel if (BH > 1 && BH * T * T * D > FL_NN_PAR_MIN)
    {
        float *vt = malloc((size_t)(T * D) * sizeof(float));
        /* the dS row lives on the stack up to T = 1024 (4 KiB), beyond that on the heap */
        float sbuf[1024];
        float *ds = T <= 1024 ? sbuf : malloc((size_t)T * sizeof(float));
        #pragma omp for schedule(static)
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
                #pragma omp simd reduction(+:dot)
                for (int64_t j = 0; j < n; j++) dot += p[j] * dsr[j];
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) dsr[j] = scale * p[j] * (dsr[j] - dot);
                for (int64_t j = 0; j < n; j++) {
                    const float g = dsr[j], pj = p[j], *kj = kh + j * D;
                    float *dkj = dkh + j * D, *dvj = dvh + j * D;
                    #pragma omp simd
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
    }
}
