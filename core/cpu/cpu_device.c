/* cpu_device.c — the CPU device table: aligned host memory, strided copy and fill, and the shared
 * tile walker and load/store helpers the other CPU kernel files use. */
#include "cpu_internal.h"
#include "cpu_nn.h"
#include "par.h"
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* A training step frees and re-allocates the same activation-sized buffers every step. glibc would
 * serve them with fresh mmap()s (page faults on every first touch: ~20% of an MLP step when
 * measured); keeping freed blocks in the heap turns those into reuse. Process-wide, set once.
 * Not so under a finite address-space limit (`ulimit -v`, a job's RLIMIT_AS): a heap gives address space back only
 * from its top, so there a process that once reached its limit kept its freed tensors' space for later tensors
 * alone, and every oneDNN primitive of a new shape (its JIT code needs fresh mappings) was refused for the rest of
 * the process, even with every tensor freed. There (cpu_limited) every block carries a 64-byte header with its
 * mapping's length (0: from the heap); blocks of CPU_MAP_MIN and more are mappings of their own, and a freed one is
 * kept for the next allocation of the same length (a training step's, its pages faulted in already: the heap's
 * reuse), up to CPU_KEEP_MAX blocks and CPU_KEEP_BYTES, the oldest unmapped first. The kept ones are all unmapped
 * where an allocation or a oneDNN primitive finds no room (fl_cpu_release_kept). docs/robustness.md, stop 101. */
#define CPU_MAP_MIN ((size_t)1 << 20)
#define CPU_KEEP_MAX 256
#define CPU_KEEP_BYTES ((size_t)512 << 20)
#define CPU_HEADER ((size_t)64)
static pthread_once_t cpu_malloc_once = PTHREAD_ONCE_INIT;
static bool cpu_limited;
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { void *base; size_t len; } kept[CPU_KEEP_MAX];   /* oldest first; under keep_lock */
static int n_kept;
static size_t kept_bytes;

static void cpu_malloc_tune(void) {
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        cpu_limited = true;
        mallopt(M_MMAP_THRESHOLD, CPU_MAP_MIN);   /* the other large buffers (the conv's kept copies) unmapped when freed */
        return;
    }
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

/* kept block i taken off the list, its mapping the caller's (under keep_lock) */
static void *keep_take(int i) {
    void *p = kept[i].base;
    kept_bytes -= kept[i].len;
    memmove(&kept[i], &kept[i + 1], (size_t)(n_kept - i - 1) * sizeof kept[0]);
    n_kept--;
    return p;
}

/* kept block i taken off the list and unmapped (under keep_lock) */
static void keep_drop(int i) {
    const size_t len = kept[i].len;
    munmap(keep_take(i), len);
}

void fl_cpu_release_kept(void) {
    pthread_mutex_lock(&keep_lock);
    while (n_kept > 0) keep_drop(n_kept - 1);
    pthread_mutex_unlock(&keep_lock);
}

/* a block of len bytes (a whole number of pages) with its header: a kept one of that length, or a fresh mapping */
static void *map_block(size_t len) {
    pthread_mutex_lock(&keep_lock);
    for (int i = n_kept - 1; i >= 0; i--)
        if (kept[i].len == len) {
            void *p = keep_take(i);
            pthread_mutex_unlock(&keep_lock);
            return p;
        }
    pthread_mutex_unlock(&keep_lock);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void *limited_alloc(size_t n) {
    if (n + CPU_HEADER >= CPU_MAP_MIN) {
        const size_t page = 4096, len = (n + CPU_HEADER + page - 1) / page * page;
        char *b = map_block(len);
        if (!b) return NULL;
        *(size_t *)b = len;
        return b + CPU_HEADER;
    }
    char *b = aligned_alloc(64, n + CPU_HEADER);
    if (!b) return NULL;
    *(size_t *)b = 0;
    return b + CPU_HEADER;
}

static fl_status cpu_alloc(size_t nbytes, void **ptr) {
    pthread_once(&cpu_malloc_once, cpu_malloc_tune);
    size_t n = (nbytes + 63) & ~(size_t)63;
    if (cpu_limited) {
        *ptr = limited_alloc(n);
        if (!*ptr) {   /* the kept blocks' address space back, then once more */
            fl_cpu_release_kept();
            *ptr = limited_alloc(n);
        }
    } else {
        *ptr = aligned_alloc(64, n);
    }
    if (!*ptr) return FL_ERR(FL_ENOMEM, "out of memory allocating %zu bytes on cpu", nbytes);
    return FL_OK;
}

static void cpu_free(void *p) {
    if (!p) return;
    if (!cpu_limited) { free(p); return; }
    char *b = (char *)p - CPU_HEADER;
    const size_t len = *(size_t *)b;
    if (len == 0) { free(b); return; }
    if (len > CPU_KEEP_BYTES) { munmap(b, len); return; }
    pthread_mutex_lock(&keep_lock);
    while (n_kept > 0 && (n_kept == CPU_KEEP_MAX || kept_bytes + len > CPU_KEEP_BYTES)) keep_drop(0);
    kept[n_kept].base = b;
    kept[n_kept].len = len;
    n_kept++;
    kept_bytes += len;
    pthread_mutex_unlock(&keep_lock);
}
static fl_status cpu_memcpy(void *dst, const void *src, size_t n) { if (n) memcpy(dst, src, n); return FL_OK; }

void fl_cpu_load(const fl_tensor *t, int64_t off, int64_t stride, int64_t n, float *dst) {
    const char *base = fl_tensor_data(t);
    switch (t->dtype) {
    case FL_F32: {
        const float *p = (const float *)base + off;
        if (stride == 1) memcpy(dst, p, (size_t)n * 4);
        else for (int64_t i = 0; i < n; i++) dst[i] = p[i * stride];
        break;
    }
    case FL_BF16: case FL_F16: {
        const uint16_t *p = (const uint16_t *)base + off;
        if (stride == 1) {
            if (t->dtype == FL_BF16) fl_bf16_to_f32_n(p, dst, (size_t)n); else fl_f16_to_f32_n(p, dst, (size_t)n);
        } else if (t->dtype == FL_BF16) {
            for (int64_t i = 0; i < n; i++) dst[i] = fl_bf16_to_f32(p[i * stride]);
        } else {
            for (int64_t i = 0; i < n; i++) dst[i] = fl_f16_to_f32(p[i * stride]);
        }
        break;
    }
    default: {
        const uint8_t *p = (const uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) dst[i] = fl_fp8_to_f32(p[i * stride], t->dtype);
    }
    }
}

void fl_cpu_store(fl_tensor *t, int64_t off, int64_t stride, int64_t n, const float *src) {
    char *base = fl_tensor_data(t);
    switch (t->dtype) {
    case FL_F32: {
        float *p = (float *)base + off;
        if (stride == 1) memcpy(p, src, (size_t)n * 4);
        else for (int64_t i = 0; i < n; i++) p[i * stride] = src[i];
        break;
    }
    case FL_BF16: case FL_F16: {
        uint16_t *p = (uint16_t *)base + off;
        if (stride == 1) {
            if (t->dtype == FL_BF16) fl_f32_to_bf16_n(src, p, (size_t)n); else fl_f32_to_f16_n(src, p, (size_t)n);
        } else if (t->dtype == FL_BF16) {
            for (int64_t i = 0; i < n; i++) p[i * stride] = fl_f32_to_bf16(src[i]);
        } else {
            for (int64_t i = 0; i < n; i++) p[i * stride] = fl_f32_to_f16(src[i]);
        }
        break;
    }
    default: {
        uint8_t *p = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) p[i * stride] = fl_f32_to_fp8(src[i], t->dtype, FL_SATURATE);
    }
    }
}

fl_status fl_cpu_for_tiles(int ndim, const int64_t *shape, int nt, const fl_tensor *const *ts,
                           fl_cpu_tile_fn fn, void *ctx) {
    /* Coalesce: drop size-1 dims and merge neighbours that are contiguous for every tensor, so
     * most layouts become one long inner run. */
    int nd = 0;
    int64_t sh[FL_MAX_DIMS], st[3][FL_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0) return FL_OK;
        if (shape[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < nt && merge; k++) merge = st[k][nd - 1] == ts[k]->stride[d] * shape[d];
        if (merge) {
            sh[nd - 1] *= shape[d];
            for (int k = 0; k < nt; k++) st[k][nd - 1] = ts[k]->stride[d];
        } else {
            sh[nd] = shape[d];
            for (int k = 0; k < nt; k++) st[k][nd] = ts[k]->stride[d];
            nd++;
        }
    }
    if (nd == 0) { sh[0] = 1; for (int k = 0; k < nt; k++) st[k][0] = 1; nd = 1; }
    int64_t inner = sh[nd - 1], tiles_per_row = (inner + FL_CPU_TILE - 1) / FL_CPU_TILE, rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= sh[d];
    int64_t ntiles = rows * tiles_per_row;
    int64_t tile_elems = inner < FL_CPU_TILE ? inner : FL_CPU_TILE;
    int64_t chunk = FL_CPU_POLL / tile_elems + 1;
    for (int64_t c0 = 0; c0 < ntiles; c0 += chunk) {
        FL_TRY(fl_check_interrupt());
        int64_t c1 = c0 + chunk < ntiles ? c0 + chunk : ntiles;
        FL_PAR_FOR((c1 - c0) * tile_elems >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t t = c0; t < c1; t++) {
            int64_t row = t / tiles_per_row, j0 = (t % tiles_per_row) * FL_CPU_TILE;
            int64_t off[3] = { 0, 0, 0 }, istr[3];
            int64_t r = row;
            for (int d = nd - 2; d >= 0; d--) {
                int64_t i = r % sh[d];
                r /= sh[d];
                for (int k = 0; k < nt; k++) off[k] += i * st[k][d];
            }
            for (int k = 0; k < nt; k++) { istr[k] = st[k][nd - 1]; off[k] += j0 * istr[k]; }
            int64_t n = inner - j0 < FL_CPU_TILE ? inner - j0 : FL_CPU_TILE;
            fn(ctx, n, off, istr);
        });
    }
    return FL_OK;
}

/* ---- copy and fill ------------------------------------------------------------------------ */

typedef struct { fl_tensor *dst; const fl_tensor *src; } copy_ctx;

static void copy_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    copy_ctx *c = vc;
    if (c->dst->dtype == c->src->dtype) {
        /* Same dtype: move the bits (FP8 bytes and NaN payloads unchanged). */
        size_t es = fl_format(c->dst->dtype)->size;
        char *d = (char *)fl_tensor_data(c->dst) + off[0] * (int64_t)es;
        const char *s = (const char *)fl_tensor_data(c->src) + off[1] * (int64_t)es;
        if (st[0] == 1 && st[1] == 1) { memcpy(d, s, (size_t)n * es); return; }
        if (st[0] == 1 && st[1] == 0 && (es == 4 || es == 2)) {
            /* an expanded source (expand():contiguous(), autograd's expanded gradients): one element's bits
             * repeated, where a memcpy an element took ~10× a fill's time */
            if (es == 4) { uint32_t v; memcpy(&v, s, 4); for (int64_t i = 0; i < n; i++) ((uint32_t *)d)[i] = v; }
            else { uint16_t v; memcpy(&v, s, 2); for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i] = v; }
            return;
        }
        if (st[0] == 1 && st[1] == 0 && es == 1) { memset(d, *(const unsigned char *)s, (size_t)n); return; }
        for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0] * (int64_t)es, s + i * st[1] * (int64_t)es, es);
        return;
    }
    if (st[0] == 1 && st[1] == 1 && (c->src->dtype == FL_F32 || c->dst->dtype == FL_F32)) {
        /* fp32 ↔ 16-bit, both runs contiguous: convert in place of a load and a store through a buffer */
        const void *s = (const char *)fl_tensor_data(c->src) + off[1] * (int64_t)fl_format(c->src->dtype)->size;
        void *d = (char *)fl_tensor_data(c->dst) + off[0] * (int64_t)fl_format(c->dst->dtype)->size;
        switch (c->dst->dtype) {
        case FL_BF16: fl_f32_to_bf16_n(s, d, (size_t)n); return;
        case FL_F16:  fl_f32_to_f16_n(s, d, (size_t)n); return;
        default: if (c->src->dtype == FL_BF16) fl_bf16_to_f32_n(s, d, (size_t)n); else fl_f16_to_f32_n(s, d, (size_t)n); return;
        }
    }
    float buf[FL_CPU_TILE];
    fl_cpu_load(c->src, off[1], st[1], n, buf);
    fl_cpu_store(c->dst, off[0], st[0], n, buf);
}

/* A transpose into a contiguous tensor (t():contiguous(), permute(0, 2, 3, 1):contiguous()): the source's last dim
 * strided and another dim p of stride 1. The tiles above walk the destination's rows, reading the source one element
 * a cache line apart (a [4096, 1024] t():contiguous() took 8× torch's time); here each [P, Q] plane is copied in
 * 32 × 32 blocks, each block as 8 × 8 squares transposed in registers: eight runs of eight read along p, eight
 * written along the last dim. (Scalar 32 × 32 blocks with one side 32 lines apart lost 5-10× wherever that distance
 * was a multiple of 4 KiB: every line fell into one L1 set, a [1024, 256] t():contiguous() ran at 1.3 GB/s.)
 * Same dtype of 1, 2 or 4 bytes: bits moved. false: not such a copy (the general path takes it). */
#define FL_T_BLOCK 32
/* s: the square's first source element, its rows (fixed j, i = 0..7) ss elements apart; d: the destination's, its
 * rows (fixed i, j = 0..7) ds elements apart. */
static inline void t8x8_u32(const uint32_t *s, int64_t ss, uint32_t *d, int64_t ds) {
    __m256 r0 = _mm256_loadu_ps((const float *)(s + 0 * ss)), r1 = _mm256_loadu_ps((const float *)(s + 1 * ss));
    __m256 r2 = _mm256_loadu_ps((const float *)(s + 2 * ss)), r3 = _mm256_loadu_ps((const float *)(s + 3 * ss));
    __m256 r4 = _mm256_loadu_ps((const float *)(s + 4 * ss)), r5 = _mm256_loadu_ps((const float *)(s + 5 * ss));
    __m256 r6 = _mm256_loadu_ps((const float *)(s + 6 * ss)), r7 = _mm256_loadu_ps((const float *)(s + 7 * ss));
    __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1), a2 = _mm256_unpacklo_ps(r2, r3);
    __m256 a3 = _mm256_unpackhi_ps(r2, r3), a4 = _mm256_unpacklo_ps(r4, r5), a5 = _mm256_unpackhi_ps(r4, r5);
    __m256 a6 = _mm256_unpacklo_ps(r6, r7), a7 = _mm256_unpackhi_ps(r6, r7);
    __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    /* shuffles move 32-bit lanes whole: NaN payloads and signalling bits pass unchanged */
    _mm256_storeu_ps((float *)(d + 0 * ds), _mm256_permute2f128_ps(b0, b4, 0x20));
    _mm256_storeu_ps((float *)(d + 1 * ds), _mm256_permute2f128_ps(b1, b5, 0x20));
    _mm256_storeu_ps((float *)(d + 2 * ds), _mm256_permute2f128_ps(b2, b6, 0x20));
    _mm256_storeu_ps((float *)(d + 3 * ds), _mm256_permute2f128_ps(b3, b7, 0x20));
    _mm256_storeu_ps((float *)(d + 4 * ds), _mm256_permute2f128_ps(b0, b4, 0x31));
    _mm256_storeu_ps((float *)(d + 5 * ds), _mm256_permute2f128_ps(b1, b5, 0x31));
    _mm256_storeu_ps((float *)(d + 6 * ds), _mm256_permute2f128_ps(b2, b6, 0x31));
    _mm256_storeu_ps((float *)(d + 7 * ds), _mm256_permute2f128_ps(b3, b7, 0x31));
}
static inline void t8x8_u16(const uint16_t *s, int64_t ss, uint16_t *d, int64_t ds) {
    __m128i r[8], a[8], b[8];
    for (int k = 0; k < 8; k++) r[k] = _mm_loadu_si128((const __m128i *)(s + k * ss));
    for (int k = 0; k < 4; k++) {
        a[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
    }
    b[0] = _mm_unpacklo_epi32(a[0], a[2]); b[1] = _mm_unpackhi_epi32(a[0], a[2]);
    b[2] = _mm_unpacklo_epi32(a[1], a[3]); b[3] = _mm_unpackhi_epi32(a[1], a[3]);
    b[4] = _mm_unpacklo_epi32(a[4], a[6]); b[5] = _mm_unpackhi_epi32(a[4], a[6]);
    b[6] = _mm_unpacklo_epi32(a[5], a[7]); b[7] = _mm_unpackhi_epi32(a[5], a[7]);
    for (int k = 0; k < 4; k++) {
        _mm_storeu_si128((__m128i *)(d + (2 * k) * ds), _mm_unpacklo_epi64(b[k], b[k + 4]));
        _mm_storeu_si128((__m128i *)(d + (2 * k + 1) * ds), _mm_unpackhi_epi64(b[k], b[k + 4]));
    }
}
/* One block: i (along p) in [i0, i1), j (along the last dim) in [j0, j1); whole 8 × 8 squares in registers (4- and
 * 2-byte elements), the rest element by element. */
#define T_BLOCK_SCALAR(TYPE, IA, IB, JA, JB)                                                                        \
    for (int64_t i = (IA); i < (IB); i++)                                                                           \
        for (int64_t j = (JA); j < (JB); j++)                                                                       \
            ((TYPE *)d)[i * dp + j] = ((const TYPE *)s)[i + j * sq];
static void t_block(char *d, const char *s, size_t es, int64_t dp, int64_t sq, int64_t i0, int64_t i1, int64_t j0,
                    int64_t j1) {
    if (es == 1) { T_BLOCK_SCALAR(uint8_t, i0, i1, j0, j1) return; }
    const int64_t i8 = i0 + ((i1 - i0) & ~(int64_t)7), j8 = j0 + ((j1 - j0) & ~(int64_t)7);
    for (int64_t i = i0; i < i8; i += 8)
        for (int64_t j = j0; j < j8; j += 8) {
            if (es == 4) t8x8_u32((const uint32_t *)s + i + j * sq, sq, (uint32_t *)d + i * dp + j, dp);
            else t8x8_u16((const uint16_t *)s + i + j * sq, sq, (uint16_t *)d + i * dp + j, dp);
        }
    if (es == 4) { T_BLOCK_SCALAR(uint32_t, i0, i8, j8, j1) T_BLOCK_SCALAR(uint32_t, i8, i1, j0, j1) }
    else { T_BLOCK_SCALAR(uint16_t, i0, i8, j8, j1) T_BLOCK_SCALAR(uint16_t, i8, i1, j0, j1) }
}
static bool copy_transposed(fl_tensor *dst, const fl_tensor *src, fl_status *st) {
    const int nd = src->ndim, q = nd - 1;
    const size_t es = fl_format(src->dtype)->size;
    if (dst->dtype != src->dtype || nd < 2 || (es != 1 && es != 2 && es != 4) || src->stride[q] == 1 ||
        !fl_tensor_is_contiguous(dst))
        return false;
    int p = -1;
    for (int d = 0; d < q; d++)
        if (src->stride[d] == 1 && src->shape[d] > 1) { p = d; break; }
    if (p < 0) return false;
    const int64_t P = src->shape[p], Q = src->shape[q];
    if (P < 8 || Q < 8) return false;
    int64_t dstr[FL_MAX_DIMS];
    dstr[q] = 1;
    for (int d = q - 1; d >= 0; d--) dstr[d] = dstr[d + 1] * dst->shape[d + 1];
    const int64_t outer = fl_tensor_numel(dst) / (P * Q), bp = (P + FL_T_BLOCK - 1) / FL_T_BLOCK;
    const int64_t dp = dstr[p], sq = src->stride[q];
    char *dbase = fl_tensor_data(dst);
    const char *sbase = fl_tensor_data(src);
    const int64_t chunk = FL_CPU_POLL / (FL_T_BLOCK * Q) + 1;   /* blocks of rows between interrupt polls */
    for (int64_t c0 = 0; c0 < outer * bp; c0 += chunk) {
        fl_status s0 = fl_check_interrupt();
        if (s0 != FL_OK) { *st = s0; return true; }
        const int64_t c1 = c0 + chunk < outer * bp ? c0 + chunk : outer * bp;
        FL_PAR_FOR((c1 - c0) * FL_T_BLOCK * Q >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t t = c0; t < c1; t++) {
            int64_t o = t / bp, doff = 0, soff = 0;
            for (int d = q - 1; d >= 0; d--) {   /* the plane's place: o over the dims other than p and q */
                if (d == p) continue;
                const int64_t i = o % src->shape[d];
                o /= src->shape[d];
                doff += i * dstr[d];
                soff += i * src->stride[d];
            }
            const int64_t i0 = (t % bp) * FL_T_BLOCK, i1 = i0 + FL_T_BLOCK < P ? i0 + FL_T_BLOCK : P;
            char *d = dbase + doff * (int64_t)es;
            const char *s = sbase + soff * (int64_t)es;
            for (int64_t j0 = 0; j0 < Q; j0 += FL_T_BLOCK)
                t_block(d, s, es, dp, sq, i0, i1, j0, j0 + FL_T_BLOCK < Q ? j0 + FL_T_BLOCK : Q);
        });
    }
    *st = FL_OK;
    return true;
}

fl_status fl_cpu_dev_copy(fl_tensor *dst, const fl_tensor *src) {
    if ((fl_format(dst->dtype)->is_fp8 || fl_format(src->dtype)->is_fp8) && dst->dtype != src->dtype)
        return FL_ERR(FL_EINVAL, "copy: %s to %s needs quantize/dequantize", fl_format(src->dtype)->name, fl_format(dst->dtype)->name);
    fl_status tst;
    if (copy_transposed(dst, src, &tst)) return tst;
    const fl_tensor *ts[2] = { dst, src };
    copy_ctx c = { dst, src };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, copy_tile, &c);
}

fl_status fl_cpu_dev_fill(fl_tensor *dst, double value) {
    int64_t n = fl_tensor_numel(dst);
    void *d = fl_tensor_data(dst);
    float f = (float)value;
    switch (dst->dtype) {
    case FL_F32: { float *p = d; for (int64_t i = 0; i < n; i++) p[i] = f; break; }
    case FL_BF16: case FL_F16: {
        uint16_t h = dst->dtype == FL_BF16 ? fl_f32_to_bf16(f) : fl_f32_to_f16(f), *p = d;
        for (int64_t i = 0; i < n; i++) p[i] = h;
        break;
    }
    default: memset(d, fl_f32_to_fp8(f, dst->dtype, FL_SATURATE), (size_t)n);
    }
    return FL_OK;
}

static const fl_device fl_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_memcpy,
    .from_host = cpu_memcpy,
    .copy = fl_cpu_dev_copy,
    .fill = fl_cpu_dev_fill,
    .binary = fl_cpu_dev_binary,
    .binary_scalar = fl_cpu_dev_binary_scalar,
    .clamp = fl_cpu_dev_clamp,
    .sum_squares = fl_cpu_dev_sum_squares,
    .logsumexp = fl_cpu_dev_logsumexp,
    .norm_rescue = fl_cpu_dev_norm_rescue,
    .norm_rescue_bwd = fl_cpu_dev_norm_rescue_bwd,
    .conv2d_direct = fl_cpu_dev_conv2d_direct,
    .conv2d_direct_bwd_data = fl_cpu_dev_conv2d_direct_bwd_data,
    .conv2d_direct_bwd_weights = fl_cpu_dev_conv2d_direct_bwd_weights,
    .unary = fl_cpu_dev_unary,
    .reduce = fl_cpu_dev_reduce,
    .matmul = fl_cpu_dev_matmul,
    .quantize = fl_cpu_dev_quantize,
    .quantize_current = fl_cpu_dev_quantize_current,
    .quantize_dbias = fl_cpu_dev_quantize_dbias,
    .quantize_gelu = fl_cpu_dev_quantize_gelu,
    .quantize_dbias_dgelu = fl_cpu_dev_quantize_dbias_dgelu,
    .quantize_rows_aux = fl_cpu_dev_quantize_rows_aux,
    .quantize_rows_gelu = fl_cpu_dev_quantize_rows_gelu,
    .quantize_rows_dgelu = fl_cpu_dev_quantize_rows_dgelu,
    .dequantize = fl_cpu_dev_dequantize,
    .amax = fl_cpu_dev_amax,
    .act_fwd = fl_cpu_dev_act_fwd,
    .act_bwd = fl_cpu_dev_act_bwd,
    .act_fwd_bf16 = fl_cpu_dev_act_fwd_bf16,
    .act_bwd_bf16 = fl_cpu_dev_act_bwd_bf16,
    .softmax_fwd = fl_cpu_dev_softmax_fwd,
    .softmax_fwd_bf16 = fl_cpu_dev_softmax_fwd_bf16,
    .softmax_bwd = fl_cpu_dev_softmax_bwd,
    .softmax_dim_fwd = fl_cpu_dev_softmax_dim_fwd,
    .rms_norm_fwd = fl_cpu_dev_rms_norm_fwd,
    .softmax_dim_bwd = fl_cpu_dev_softmax_dim_bwd,
    .cross_entropy_fwd = fl_cpu_dev_cross_entropy_fwd,
    .cross_entropy_bwd = fl_cpu_dev_cross_entropy_bwd,
    .mse_fwd = fl_cpu_dev_mse_fwd,
    .mse_bwd = fl_cpu_dev_mse_bwd,
    .layernorm_fwd = fl_cpu_dev_layernorm_fwd,
    .layernorm_bwd = fl_cpu_dev_layernorm_bwd,
    .layernorm_bwd_add = fl_cpu_dev_layernorm_bwd_add,
    .layernorm_quantize = fl_cpu_dev_layernorm_quantize,
    .chnorm_fwd = fl_cpu_dev_chnorm_fwd,
    .chnorm_bwd = fl_cpu_dev_chnorm_bwd,
    .chnorm_eval = fl_cpu_dev_chnorm_eval,
    .chnorm_fwd_cl = fl_cpu_dev_chnorm_fwd_cl,
    .chnorm_bwd_cl = fl_cpu_dev_chnorm_bwd_cl,
    .chnorm_eval_cl = fl_cpu_dev_chnorm_eval_cl,
    .embedding_fwd = fl_cpu_dev_embedding_fwd,
    .embedding_bwd = fl_cpu_dev_embedding_bwd,
    .dropout_fwd = fl_cpu_dev_dropout_fwd,
    .dropout_bwd = fl_cpu_dev_dropout_bwd,
    .sdpa_fwd = fl_cpu_dev_sdpa_fwd,
    .sdpa_qkv_fwd = fl_cpu_dev_sdpa_qkv_fwd,
    .sdpa_qkv_bwd = fl_cpu_dev_sdpa_qkv_bwd,
    .sdpa_flash_fwd = fl_cpu_dev_sdpa_flash_fwd,
    .sdpa_flash_bwd = fl_cpu_dev_sdpa_flash_bwd,
    .sdpa_bwd = fl_cpu_dev_sdpa_bwd,
    .bias_add = fl_cpu_dev_bias_add,
    .linear_relu_bf16 = fl_cpu_dev_linear_relu_bf16,
    .linear_bias_bf16 = fl_cpu_dev_linear_bias_bf16,
    .add_layernorm_fwd = fl_cpu_dev_add_layernorm_fwd,
    .sgd = fl_cpu_dev_sgd,
    .adamw = fl_cpu_dev_adamw,
    .rmsprop = fl_cpu_dev_rmsprop,
    .adagrad = fl_cpu_dev_adagrad,
    .msamp_adamw = fl_cpu_dev_msamp_adamw,
    .sumsq = fl_cpu_dev_sumsq,
    .fp8_gemm = fl_cpu_dev_fp8_gemm,
    .fp8_gemm_add = fl_cpu_dev_fp8_gemm_add,
};

const fl_device *fl_cpu_device(void) { return &fl_cpu; }
