/* flash_attention.cu — fused scaled-dot-product attention under bf16 autocast (the sdpa_flash_fwd/bwd entries),
 * for head sizes D that are multiples of 16 up to 128. The maths of attention.cu's bf16 mode (q, k, v, P, dO and
 * dS rounded to bf16 as GEMM operands, fp32 accumulation, fp32 softmax and its backward, core/cpu's exp step for
 * step) without the B·H·T·T probabilities in device memory: each block keeps a tile of 64 query rows (or keys) in
 * shared memory and walks the other side's tiles, multiplying on the tensor cores (WMMA 16×16×16 bf16 fragments
 * loaded from and stored to shared memory).
 *   forward   for each key tile: S = Q·Kᵀ; a running row max m and sum l (online softmax): p = e^(scale·s − m),
 *             O ← O·e^(m_old − m) + bf16(p)·V; at the end out = O / l, and stats = (m, 1/l) per row
 *   backward  P = e^(scale·s − m)·(1/l) recomputed from S and stats (the CPU's softmax expression), dP = dO·Vᵀ,
 *             δ = rowsum(P ⊙ dP) and dS = scale·P ⊙ (dP − δ) (the CPU's dsoftmax). One kernel per query tile
 *             walks the key tiles twice: for δ, then for dQ = dS·K; one per key tile then accumulates
 *             dV = Pᵀ·dO and dK = dSᵀ·Q over the query tiles. S and dP are computed three times so that every
 *             output is written by one block: no atomics, runs are bit-identical. (FlashAttention-2 takes δ
 *             as rowsum(dO ⊙ out), equal in exact arithmetic; here dO is rounded to bf16 for dP but out is not,
 *             and the difference, the same for every key of a row, does not cancel in dQ and dK.)
 * Causal attention skips the tiles above the diagonal. The result differs from attention.cu's (and the CPU's) by
 * where P is rounded to bf16 for P·V (e^(s − running max), before the division by l, instead of P) and by the
 * order of sums: as accurate as the CPU's against float64 (tests/c/test_gpu_train_ops.c, gpu_flash_*).
 * Every block is one program of phases (threads, warps or lanes of 4 warps, separated by barriers) written once
 * (fwd_block, dkv_block, dq_block) and run either by a CUDA block or, phase by phase, on the host
 * (fl_cuda_flash_*_host), so make test checks the tiling, masks and online softmax without a GPU; on the host a
 * warp's tile product is a plain loop. */
#include "cuda_common.cuh"
#include "cuda_entries.h"
#include <mma.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <type_traits>

namespace {

constexpr int kTile = 64;                  /* query rows or keys per tile */
constexpr int kWarps = 4;                  /* warp w owns rows 16w .. 16w+15 of a tile */
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxD = 128;
constexpr int kLds = kTile + 4;            /* fp32 [64, 64] tiles (S, dP): ldm a multiple of 4 floats */
constexpr int kLdp = kTile + 8;            /* bf16 [64, 64] tiles (P, dS): ldm a multiple of 8 halves */

/* ---- shared memory ------------------------------------------------------------------------------- */

enum Kind { FWD, BWD_KV, BWD_Q };

struct Smem {
    uint16_t *q, *k, *v, *dO, *p16, *ds16;     /* bf16 bits: [64, D] tiles (ld D + 8) and [64, 64] (ld kLdp) */
    float *s, *dp, *acc0, *acc1;               /* S, dP [64, 64] (ld kLds); O / dK / dQ and dV [64, D] (ld D + 4) */
    float *m, *l, *mnew, *alpha, *red, *red2, *delta;   /* per row of the tile (red, red2: two per row) */
    int ldh, ldo;
};

FL_HD size_t carve(char *base, size_t &off, size_t bytes, void **out) {
    off = (off + 127) & ~(size_t)127;           /* WMMA pointers need 32-byte alignment; 128 keeps rows apart */
    *out = base ? base + off : nullptr;
    off += bytes;
    return off;
}

/* The layout of one block's shared memory for a kernel kind and head size; with base NULL only the size. */
FL_HD size_t smem_layout(Kind kind, int D, char *base, Smem *s) {
    size_t off = 0;
    s->ldh = D + 8;
    s->ldo = D + 4;
    const size_t h = (size_t)kTile * s->ldh * 2, f = (size_t)kTile * kLds * 4, p = (size_t)kTile * kLdp * 2,
                 o = (size_t)kTile * s->ldo * 4, r = (size_t)kTile * 4;
    void *x;
    *s = Smem{ nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
               nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, D + 8, D + 4 };
    carve(base, off, h, &x); s->q = (uint16_t *)x;
    carve(base, off, h, &x); s->k = (uint16_t *)x;
    carve(base, off, h, &x); s->v = (uint16_t *)x;
    carve(base, off, f, &x); s->s = (float *)x;
    carve(base, off, o, &x); s->acc0 = (float *)x;
    carve(base, off, r, &x); s->m = (float *)x;
    carve(base, off, r, &x); s->l = (float *)x;
    if (kind == FWD) {
        carve(base, off, p, &x); s->p16 = (uint16_t *)x;
        carve(base, off, r, &x); s->mnew = (float *)x;
        carve(base, off, r, &x); s->alpha = (float *)x;
        carve(base, off, 2 * r, &x); s->red = (float *)x;
        carve(base, off, 2 * r, &x); s->red2 = (float *)x;
    } else {
        carve(base, off, h, &x); s->dO = (uint16_t *)x;
        carve(base, off, f, &x); s->dp = (float *)x;
        carve(base, off, p, &x); s->ds16 = (uint16_t *)x;
        carve(base, off, r, &x); s->delta = (float *)x;
        if (kind == BWD_KV) {
            carve(base, off, p, &x); s->p16 = (uint16_t *)x;
            carve(base, off, o, &x); s->acc1 = (float *)x;
        } else {
            carve(base, off, 2 * r, &x); s->red = (float *)x;
        }
    }
    return (off + 127) & ~(size_t)127;
}

/* ---- one warp's 16×16 tile product ------------------------------------------------------------------
 * C[16, 16] (fp32, row-major, ldc) = (acc ? C : 0) + Σ_k A[16, k]·B[k, 16] over k < 16·kblocks, bf16 A and B:
 * A row-major (A[i][k] = a[i·lda + k]) or, ACOL, column-major (A[i][k] = a[k·lda + i], i.e. a stored Aᵀ);
 * B row-major (B[k][j] = b[k·ldb + j]) or, BCOL, column-major (B[k][j] = b[j·ldb + k]). On the device every
 * lane of the warp calls it (WMMA); on the host it is called once per warp. */
template <bool ACOL, bool BCOL>
FL_HD void tile_mma(float *c, int ldc, const uint16_t *a, int lda, const uint16_t *b, int ldb, int kblocks, bool acc) {
#if defined(__CUDA_ARCH__)
    using namespace nvcuda;
    typedef typename std::conditional<ACOL, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<BCOL, wmma::col_major, wmma::row_major>::type LB;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    if (acc) wmma::load_matrix_sync(fc, c, (unsigned)ldc, wmma::mem_row_major);
    else wmma::fill_fragment(fc, 0.0f);
    for (int kb = 0; kb < kblocks; kb++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
        wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16 *>(a + (ACOL ? (size_t)kb * 16 * lda : (size_t)kb * 16)),
                               (unsigned)lda);
        wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16 *>(b + (BCOL ? (size_t)kb * 16 : (size_t)kb * 16 * ldb)),
                               (unsigned)ldb);
        wmma::mma_sync(fc, fa, fb, fc);
    }
    wmma::store_matrix_sync(c, fc, (unsigned)ldc, wmma::mem_row_major);
#else
    const int K = 16 * kblocks;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float sum = acc ? c[i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++) {
                const float x = fl_bf16_bits_to_f32(ACOL ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k]);
                const float y = fl_bf16_bits_to_f32(BCOL ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j]);
                sum += x * y;   /* exact product (bf16·bf16 fits fp32), fp32 sum as the tensor cores keep */
            }
            c[i * ldc + j] = sum;
        }
#endif
}

/* ---- how a block program runs: a CUDA block (this thread's part of each phase, barriers between) or the host
 * (each phase for every thread, warp or lane in turn; a barrier is then the phase boundary itself) ---------- */

struct DevRun {
    int tid;
    template <class F> FL_HD void threads(F f) { f(tid); }
    template <class F> FL_HD void warps(F f) { f(tid >> 5); }
    template <class F> FL_HD void lanes(F f) { f(tid >> 5, tid & 31); }
    FL_HD void sync() {
#if defined(__CUDA_ARCH__)
        __syncthreads();
#endif
    }
    FL_HD void syncwarp() {
#if defined(__CUDA_ARCH__)
        __syncwarp();
#endif
    }
};

struct HostRun {
    template <class F> FL_HD void threads(F f) { for (int t = 0; t < kThreads; t++) f(t); }
    template <class F> FL_HD void warps(F f) { for (int w = 0; w < kWarps; w++) f(w); }
    template <class F> FL_HD void lanes(F f) { for (int w = 0; w < kWarps; w++) for (int l = 0; l < 32; l++) f(w, l); }
    FL_HD void sync() {}
    FL_HD void syncwarp() {}
};

struct Args {
    const float *q, *k, *v, *dout;          /* [BH, T, D] fp32 (dout: backward) */
    float *o, *dq, *dk, *dv;                /* outputs: forward o; backward dq, dk, dv */
    float *stats;                           /* [BH, T, 2]: the row max m and 1/l (written forward, read backward) */
    float *delta;                           /* [BH, T]: rowsum(P ⊙ dP) (written by the dQ blocks, read by dK/dV's) */
    int64_t BH, T;
    int D;
    float scale;
    bool causal;
    FL_HD int64_t ntiles() const { return (T + kTile - 1) / kTile; }
};

/* Rows [r0, r0 + 64) of a [BH·T, D] fp32 array (rows past T of this head as zeros) into a bf16 tile. */
FL_HD void load_tile(uint16_t *dst, int ldh, const float *src, int64_t bh, int64_t r0, const Args &a, int tid) {
    for (int e = tid; e < kTile * a.D; e += kThreads) {
        const int r = e / a.D, d = e % a.D;
        const int64_t row = r0 + r;
        dst[r * ldh + d] = row < a.T ? fl_f32_to_bf16_bits(src[(bh * a.T + row) * a.D + d]) : (uint16_t)0;
    }
}

/* A [64, D] fp32 accumulator tile to rows [r0, r0 + 64) of dst (rows past T skipped), each times mul. */
FL_HD void store_tile(float *dst, const float *acc, int ldo, int64_t bh, int64_t r0, const Args &a, float mul, int tid) {
    for (int e = tid; e < kTile * a.D; e += kThreads) {
        const int r = e / a.D, d = e % a.D;
        const int64_t row = r0 + r;
        if (row < a.T) dst[(bh * a.T + row) * a.D + d] = fl_fmul(acc[r * ldo + d], mul);
    }
}

/* Whether key kj is live for query row qi (both inside T, and kj ≤ qi when causal). */
FL_HD bool live(int64_t qi, int64_t kj, const Args &a) { return qi < a.T && kj < a.T && (!a.causal || kj <= qi); }

/* Max with NaN never winning, as the CPU's softmax. */
FL_HD float nmax(float m, float x) { return x > m ? x : m; }

/* S[16 rows of warp w, 64] = Q rows · Kᵀ, or dP = dO rows · Vᵀ (x: q or dO tile; y: k or v tile). */
FL_HD void scores(float *dst, const uint16_t *x, const uint16_t *y, const Smem &s, int D, int w) {
    for (int c = 0; c < kTile / 16; c++)
        tile_mma<false, true>(dst + 16 * w * kLds + 16 * c, kLds, x + 16 * w * s.ldh, s.ldh, y + 16 * c * s.ldh, s.ldh,
                              D / 16, false);
}

/* ---- forward: block (bh, query tile) ------------------------------------------------------------------ */

template <class R>
FL_HD void fwd_block(const Args &a, const Smem &s, int64_t bh, int64_t it, R &run) {
    const int64_t q0 = it * kTile, nk = a.causal ? it + 1 : a.ntiles();
    run.threads([&](int tid) {
        load_tile(s.q, s.ldh, a.q, bh, q0, a, tid);
        for (int e = tid; e < kTile * s.ldo; e += kThreads) s.acc0[e] = 0.0f;
        for (int r = tid; r < kTile; r += kThreads) { s.m[r] = -INFINITY; s.l[r] = 0.0f; }
    });
    for (int64_t jt = 0; jt < nk; jt++) {
        const int64_t k0 = jt * kTile;
        run.threads([&](int tid) {
            load_tile(s.k, s.ldh, a.k, bh, k0, a, tid);
            load_tile(s.v, s.ldh, a.v, bh, k0, a, tid);
        });
        run.sync();
        run.warps([&](int w) { scores(s.s, s.q, s.k, s, a.D, w); });
        run.syncwarp();
        /* lanes 2i and 2i+1 of warp w: row 16w + i, columns [0, 32) and [32, 64); scaled, masked scores and their max */
        run.lanes([&](int w, int lane) {
            const int r = 16 * w + lane / 2, c0 = (lane & 1) * 32;
            float mx = -INFINITY;
            for (int c = c0; c < c0 + 32; c++) {
                const float x = live(q0 + r, k0 + c, a) ? fl_fmul(s.s[r * kLds + c], a.scale) : -INFINITY;
                s.s[r * kLds + c] = x;
                mx = nmax(mx, x);
            }
            s.red[2 * r + (lane & 1)] = mx;
        });
        run.syncwarp();
        run.lanes([&](int w, int lane) {
            const int r = 16 * w + lane / 2, half = lane & 1, c0 = half * 32;
            const float mo = s.m[r], mn = nmax(nmax(mo, s.red[2 * r]), s.red[2 * r + 1]);
            const float alpha = mn == -INFINITY ? 1.0f : fl_cu_expf(fl_fsub(mo, mn));
            float sum = 0.0f;
            for (int c = c0; c < c0 + 32; c++) {
                const float x = s.s[r * kLds + c];
                const float p = x == -INFINITY ? 0.0f : fl_cu_expf(fl_fsub(x, mn));
                s.p16[r * kLdp + c] = fl_f32_to_bf16_bits(p);
                sum = fl_fadd(sum, p);
            }
            s.red2[2 * r + half] = sum;
            const int d0 = half * (a.D / 2), d1 = d0 + a.D / 2;
            for (int d = d0; d < d1; d++) s.acc0[r * s.ldo + d] = fl_fmul(s.acc0[r * s.ldo + d], alpha);
            if (!half) { s.mnew[r] = mn; s.alpha[r] = alpha; }
        });
        run.syncwarp();
        run.lanes([&](int w, int lane) {
            const int r = 16 * w + lane / 2;
            if (lane & 1) return;
            s.l[r] = fl_fadd(fl_fmul(s.l[r], s.alpha[r]), fl_fadd(s.red2[2 * r], s.red2[2 * r + 1]));
            s.m[r] = s.mnew[r];
        });
        run.syncwarp();   /* the lanes reconverge before the warp's fragment operations */
        /* O[16 rows of w, D] += bf16(p)[16, 64] · V[64, D] */
        run.warps([&](int w) {
            for (int c = 0; c < a.D / 16; c++)
                tile_mma<false, false>(s.acc0 + 16 * w * s.ldo + 16 * c, s.ldo, s.p16 + 16 * w * kLdp, kLdp, s.v + 16 * c,
                                       s.ldh, kTile / 16, true);
        });
        run.sync();   /* the next tile overwrites K, V */
    }
    run.lanes([&](int w, int lane) {
        const int r = 16 * w + lane / 2, half = lane & 1;
        const int64_t row = q0 + r;
        if (row >= a.T) return;
        const float inv = fl_fdiv(1.0f, s.l[r]);
        const int d0 = half * (a.D / 2), d1 = d0 + a.D / 2;
        for (int d = d0; d < d1; d++) a.o[(bh * a.T + row) * a.D + d] = fl_fmul(s.acc0[r * s.ldo + d], inv);
        if (!half) { a.stats[(bh * a.T + row) * 2] = s.m[r]; a.stats[(bh * a.T + row) * 2 + 1] = inv; }
    });
}

/* ---- backward ----------------------------------------------------------------------------------------- */

/* The query tile's bf16 Q and dO, and each row's m and 1/l (rows past T: m = −inf, so nothing is live); with
 * with_delta its δ too. */
FL_HD void load_query_side(const Args &a, const Smem &s, int64_t bh, int64_t q0, bool with_delta, int tid) {
    load_tile(s.q, s.ldh, a.q, bh, q0, a, tid);
    load_tile(s.dO, s.ldh, a.dout, bh, q0, a, tid);
    for (int r = tid; r < kTile; r += kThreads) {
        const int64_t row = q0 + r;
        const bool in = row < a.T;
        s.m[r] = in ? a.stats[(bh * a.T + row) * 2] : -INFINITY;
        s.l[r] = in ? a.stats[(bh * a.T + row) * 2 + 1] : 0.0f;   /* 1/l */
        if (with_delta) s.delta[r] = in ? a.delta[bh * a.T + row] : 0.0f;
    }
}

/* P of row r, key column c from the scaled score's tile (0 where the key is not live). */
FL_HD float prob(const Args &a, const Smem &s, int64_t q0, int64_t k0, int r, int c) {
    return live(q0 + r, k0 + c, a) ? fl_fmul(fl_cu_expf(fl_fsub(fl_fmul(s.s[r * kLds + c], a.scale), s.m[r])), s.l[r])
                                   : 0.0f;
}

/* From S and dP of rows 16w.. (S, dP in s.s, s.dp): P (into p16 as bf16 when given) and dS = scale·P ⊙ (dP − δ)
 * into ds16, both 0 where the key is not live. */
FL_HD void p_and_ds(const Args &a, const Smem &s, int64_t q0, int64_t k0, uint16_t *p16, int w, int lane) {
    const int r = 16 * w + lane / 2, c0 = (lane & 1) * 32;
    for (int c = c0; c < c0 + 32; c++) {
        float p = 0.0f, ds = 0.0f;
        if (live(q0 + r, k0 + c, a)) {
            p = prob(a, s, q0, k0, r, c);
            ds = fl_fmul(fl_fmul(a.scale, p), fl_fsub(s.dp[r * kLds + c], s.delta[r]));
        }
        if (p16) p16[r * kLdp + c] = fl_f32_to_bf16_bits(p);
        s.ds16[r * kLdp + c] = fl_f32_to_bf16_bits(ds);
    }
}

/* Block (bh, key tile): dK and dV of its 64 keys over every query tile that sees them. */
template <class R>
FL_HD void dkv_block(const Args &a, const Smem &s, int64_t bh, int64_t jt, R &run) {
    const int64_t k0 = jt * kTile, nt = a.ntiles();
    run.threads([&](int tid) {
        load_tile(s.k, s.ldh, a.k, bh, k0, a, tid);
        load_tile(s.v, s.ldh, a.v, bh, k0, a, tid);
        for (int e = tid; e < kTile * s.ldo; e += kThreads) { s.acc0[e] = 0.0f; s.acc1[e] = 0.0f; }
    });
    for (int64_t it = a.causal ? jt : 0; it < nt; it++) {
        const int64_t q0 = it * kTile;
        run.threads([&](int tid) { load_query_side(a, s, bh, q0, true, tid); });
        run.sync();
        run.warps([&](int w) {
            scores(s.s, s.q, s.k, s, a.D, w);     /* S = Q·Kᵀ */
            scores(s.dp, s.dO, s.v, s, a.D, w);   /* dP = dO·Vᵀ */
        });
        run.syncwarp();
        run.lanes([&](int w, int lane) { p_and_ds(a, s, q0, k0, s.p16, w, lane); });
        run.sync();   /* the products below read every query row's P and dS */
        /* keys 16w..: dV += Pᵀ·dO, dK += dSᵀ·Q (A = Pᵀ, dSᵀ: the [query, key] tiles read column-major) */
        run.warps([&](int w) {
            for (int c = 0; c < a.D / 16; c++) {
                tile_mma<true, false>(s.acc1 + 16 * w * s.ldo + 16 * c, s.ldo, s.p16 + 16 * w, kLdp, s.dO + 16 * c, s.ldh,
                                      kTile / 16, true);
                tile_mma<true, false>(s.acc0 + 16 * w * s.ldo + 16 * c, s.ldo, s.ds16 + 16 * w, kLdp, s.q + 16 * c, s.ldh,
                                      kTile / 16, true);
            }
        });
        run.sync();   /* the next query tile overwrites Q, dO, P, dS */
    }
    run.threads([&](int tid) {
        store_tile(a.dk, s.acc0, s.ldo, bh, k0, a, 1.0f, tid);
        store_tile(a.dv, s.acc1, s.ldo, bh, k0, a, 1.0f, tid);
    });
}

/* S and dP of the key tile at k0 for the query rows held (K, V loaded; ends with the warp's barrier). */
template <class R>
FL_HD void key_tile_scores(const Args &a, const Smem &s, int64_t bh, int64_t k0, R &run) {
    run.threads([&](int tid) {
        load_tile(s.k, s.ldh, a.k, bh, k0, a, tid);
        load_tile(s.v, s.ldh, a.v, bh, k0, a, tid);
    });
    run.sync();
    run.warps([&](int w) {
        scores(s.s, s.q, s.k, s, a.D, w);     /* S = Q·Kᵀ */
        scores(s.dp, s.dO, s.v, s, a.D, w);   /* dP = dO·Vᵀ */
    });
    run.syncwarp();
}

/* Block (bh, query tile): δ of its 64 rows (written out for the dK/dV blocks), then their dQ, each over every key
 * tile the rows see. */
template <class R>
FL_HD void dq_block(const Args &a, const Smem &s, int64_t bh, int64_t it, R &run) {
    const int64_t q0 = it * kTile, nk = a.causal ? it + 1 : a.ntiles();
    run.threads([&](int tid) {
        load_query_side(a, s, bh, q0, false, tid);
        for (int e = tid; e < kTile * s.ldo; e += kThreads) s.acc0[e] = 0.0f;
        for (int e = tid; e < 2 * kTile; e += kThreads) s.red[e] = 0.0f;
    });
    /* δ = Σ P·dP: lanes 2i and 2i+1 sum row 16w + i's columns [0, 32) and [32, 64) of every tile, then add */
    for (int64_t jt = 0; jt < nk; jt++) {
        const int64_t k0 = jt * kTile;
        key_tile_scores(a, s, bh, k0, run);
        run.lanes([&](int w, int lane) {
            const int r = 16 * w + lane / 2, c0 = (lane & 1) * 32;
            float acc = s.red[2 * r + (lane & 1)];
            for (int c = c0; c < c0 + 32; c++)
                if (live(q0 + r, k0 + c, a)) acc = fl_fadd(acc, fl_fmul(prob(a, s, q0, k0, r, c), s.dp[r * kLds + c]));
            s.red[2 * r + (lane & 1)] = acc;
        });
        run.sync();   /* the next tile overwrites K, V, S, dP */
    }
    run.lanes([&](int w, int lane) {
        const int r = 16 * w + lane / 2;
        if (lane & 1) return;
        const float d = fl_fadd(s.red[2 * r], s.red[2 * r + 1]);
        s.delta[r] = d;
        if (q0 + r < a.T) a.delta[bh * a.T + q0 + r] = d;
    });
    run.sync();
    for (int64_t jt = 0; jt < nk; jt++) {
        const int64_t k0 = jt * kTile;
        key_tile_scores(a, s, bh, k0, run);   /* its first barrier also publishes δ */
        run.lanes([&](int w, int lane) { p_and_ds(a, s, q0, k0, nullptr, w, lane); });
        run.syncwarp();
        /* rows 16w..: dQ += dS·K */
        run.warps([&](int w) {
            for (int c = 0; c < a.D / 16; c++)
                tile_mma<false, false>(s.acc0 + 16 * w * s.ldo + 16 * c, s.ldo, s.ds16 + 16 * w * kLdp, kLdp, s.k + 16 * c,
                                       s.ldh, kTile / 16, true);
        });
        run.sync();   /* the next key tile overwrites K, V */
    }
    run.threads([&](int tid) { store_tile(a.dq, s.acc0, s.ldo, bh, q0, a, 1.0f, tid); });
}

/* Block index → (bh, tile), the last tiles first: under causal masking they carry the most work. */
FL_HD void block_tile(const Args &a, int64_t b, int64_t *bh, int64_t *t) {
    const int64_t nt = a.ntiles();
    *bh = b / nt;
    *t = nt - 1 - b % nt;
}

/* ---- kernels -------------------------------------------------------------------------------------------- */

template <Kind K>
__global__ void __launch_bounds__(kThreads) flash_kernel(Args a) {
    extern __shared__ __align__(128) char smem[];
    Smem s;
    smem_layout(K, a.D, smem, &s);
    int64_t bh, t;
    block_tile(a, blockIdx.x, &bh, &t);
    DevRun run{ (int)threadIdx.x };
    if constexpr (K == FWD) fwd_block(a, s, bh, t, run);
    else if constexpr (K == BWD_KV) dkv_block(a, s, bh, t, run);
    else dq_block(a, s, bh, t, run);
}

/* Whether the fused kernels take these sizes, and the shared memory their blocks need (the largest kind). */
bool flash_ok(int64_t B, int64_t H, int64_t T, int64_t D) {
    if (B < 1 || H < 1 || T < 1 || D < 16 || D > kMaxD || D % 16) return false;
    const double blocks = (double)B * (double)H * (double)((T + kTile - 1) / kTile);
    return blocks <= (double)INT_MAX;
}

template <Kind K>
fl_status launch(const Args &a, const char *fn) {
    Smem s;
    const size_t bytes = smem_layout(K, a.D, nullptr, &s);
    FL_CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), fn);
    flash_kernel<K><<<(unsigned)(a.BH * a.ntiles()), kThreads, bytes, fl_cuda_stream()>>>(a);
    FL_CUDA_CHECK(cudaGetLastError(), fn);
    return FL_OK;
}

/* The opt-in shared memory a block may have on this GPU (0 when it cannot be read). */
size_t smem_optin() {
    static size_t cached = (size_t)-1;
    if (cached == (size_t)-1) {
        int dev = 0, v = 0;
        cached = cudaGetDevice(&dev) == cudaSuccess &&
                         cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess
                     ? (size_t)v : 0;
    }
    return cached;
}

bool fits(int D) {
    Smem s;
    const size_t need = smem_layout(BWD_KV, D, nullptr, &s);   /* the largest of the three */
    return need <= smem_optin();
}

Args make_args(const float *q, const float *k, const float *v, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
               bool causal) {
    Args a{};
    a.q = q; a.k = k; a.v = v;
    a.BH = B * H; a.T = T; a.D = (int)D; a.scale = scale; a.causal = causal;
    return a;
}

}  // namespace

extern "C" fl_status fl_cuda_dev_sdpa_flash_fwd(const float *q, const float *k, const float *v, float *out, float *stats,
                                                int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal,
                                                bool *done) {
    const char *fn = "cuda sdpa_flash_fwd";
    if (!done) return FL_ERR(FL_EINVAL, "%s: done is NULL", fn);
    *done = false;
    if (!flash_ok(B, H, T, D) || !fits((int)D)) return FL_OK;
    if (!q || !k || !v || !out || !stats) return FL_ERR(FL_EINVAL, "%s: a NULL array", fn);
    Args a = make_args(q, k, v, B, H, T, D, scale, causal);
    a.o = out;
    a.stats = stats;
    FL_TRY(launch<FWD>(a, fn));
    *done = true;
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_sdpa_flash_bwd(const float *q, const float *k, const float *v, const float *stats,
                                                const float *dout, float *dq, float *dk, float *dv, int64_t B, int64_t H,
                                                int64_t T, int64_t D, float scale, bool causal) {
    const char *fn = "cuda sdpa_flash_bwd";
    if (!flash_ok(B, H, T, D) || !fits((int)D))
        return FL_ERR(FL_EUNSUPPORTED, "%s: sizes B=%lld H=%lld T=%lld D=%lld are not the fused kernels' (D a multiple of "
                      "16 up to %d)", fn, (long long)B, (long long)H, (long long)T, (long long)D, kMaxD);
    if (!q || !k || !v || !stats || !dout || !dq || !dk || !dv) return FL_ERR(FL_EINVAL, "%s: a NULL array", fn);
    fl_cu_scratch delta;
    FL_TRY(delta.alloc((size_t)(B * H * T) * sizeof(float)));
    Args a = make_args(q, k, v, B, H, T, D, scale, causal);
    a.dout = dout; a.dq = dq; a.dk = dk; a.dv = dv;
    a.stats = const_cast<float *>(stats);
    a.delta = static_cast<float *>(delta.p);
    FL_TRY(launch<BWD_Q>(a, fn));   /* writes δ, which the dK/dV blocks read */
    return launch<BWD_KV>(a, fn);   /* delta goes back on return, after these on the stream */
}

/* ---- the block programs on the host (tests): every block in turn, each phase for all its threads ---------- */

namespace {

template <Kind K>
void host_blocks(const Args &a) {
    Smem s;
    const size_t bytes = smem_layout(K, a.D, nullptr, &s);
    char *mem = static_cast<char *>(aligned_alloc(128, bytes));
    if (!mem) return;
    smem_layout(K, a.D, mem, &s);
    HostRun run;
    for (int64_t b = 0; b < a.BH * a.ntiles(); b++) {
        int64_t bh, t;
        block_tile(a, b, &bh, &t);
        memset(mem, 0xff, bytes);   /* poison: the programs must not read what they did not write */
        if constexpr (K == FWD) fwd_block(a, s, bh, t, run);
        else if constexpr (K == BWD_KV) dkv_block(a, s, bh, t, run);
        else dq_block(a, s, bh, t, run);
    }
    free(mem);
}

}  // namespace

extern "C" int fl_cuda_flash_supports_host(int64_t D) { return D >= 16 && D <= kMaxD && D % 16 == 0; }

extern "C" void fl_cuda_flash_fwd_host(const float *q, const float *k, const float *v, float *out, float *stats,
                                       int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal) {
    Args a = make_args(q, k, v, B, H, T, D, scale, causal);
    a.o = out;
    a.stats = stats;
    host_blocks<FWD>(a);
}

extern "C" void fl_cuda_flash_bwd_host(const float *q, const float *k, const float *v, const float *stats,
                                       const float *dout, float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T,
                                       int64_t D, float scale, bool causal) {
    const int64_t rows = B * H * T;
    float *delta = static_cast<float *>(malloc((size_t)(rows ? rows : 1) * sizeof(float)));
    if (!delta) return;
    Args a = make_args(q, k, v, B, H, T, D, scale, causal);
    a.dout = dout; a.dq = dq; a.dk = dk; a.dv = dv;
    a.stats = const_cast<float *>(stats);
    a.delta = delta;
    host_blocks<BWD_Q>(a);
    host_blocks<BWD_KV>(a);
    free(delta);
}
