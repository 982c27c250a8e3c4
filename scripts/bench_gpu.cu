/* bench_gpu.cu — FP8 vs bf16 cuBLASLt GEMM TFLOP/s (4096³, 8192³, 8192×8192×28672) and the cast
 * kernels' GB/s (cast+amax, cast+transpose, per tensor and per row) next to a device-to-device copy
 * of the same source. Prints markdown; scripts/bench_gpu.sh (make bench-gpu) puts it into
 * docs/performance.md. Without a GPU it prints "no GPU (...)" and exits 0.
 * Timing: CUDA events around each run on fp8lab's stream, warm-up first, median of the runs.
 * GEMM inputs are random (never zeros); FP8 operands are random E4M3 codes without NaN, scales 1.
 * GB/s counts bytes read + written once each: copy 2·S for an S-byte source; cast+amax S + n;
 * cast+transpose S + 2n; per row the same as per tensor (it reads the source twice: one row-amax pass); per
 * column (quantize_current along axis 1, as rowwise scaling's backward casts) 2S + n: an amax pass, then the cast. */
#include "../kernels/fl_cuda.h"
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <vector>

namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}
/* kind 0: E4M3 codes (no NaN); 1: bf16 in [-1, 1); 2: fp32 in [-500, 500) (some saturate in E4M3) */
__global__ void fill_kernel(void *p, size_t n, int kind, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = mix(i * 0x9e3779b97f4a7c15ull + seed);
        float u = (float)(h >> 8) * (1.0f / 16777216.0f);          /* [0, 1) */
        if (kind == 0) {
            uint8_t b = (uint8_t)h;
            static_cast<uint8_t *>(p)[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
        } else if (kind == 1) {
            static_cast<uint16_t *>(p)[i] = (uint16_t)(__float_as_uint(2.0f * u - 1.0f) >> 16);
        } else {
            static_cast<float *>(p)[i] = 1000.0f * u - 500.0f;
        }
    }
}

void die_if(fl_status st, const char *what) {
    if (st == FL_OK) return;
    fprintf(stderr, "bench_gpu: %s: %s\n", what, fl_last_error());
    exit(1);
}
void die_cuda(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "bench_gpu: %s failed: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

void *dmalloc(size_t bytes) {
    void *p = NULL;
    die_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

void fill(void *p, size_t n, int kind, uint64_t seed) {
    fill_kernel<<<fl_cuda_sm_count() * 8, 256, 0, fl_cuda_stream()>>>(p, n, kind, seed);
    die_cuda(cudaGetLastError(), "fill_kernel launch");
}

/* Median milliseconds of `reps` runs of f after `warm` untimed ones. */
template <typename F>
double median_ms(F f, int warm, int reps) {
    cudaStream_t s = fl_cuda_stream();
    cudaEvent_t a, b;
    die_cuda(cudaEventCreate(&a), "cudaEventCreate");
    die_cuda(cudaEventCreate(&b), "cudaEventCreate");
    for (int i = 0; i < warm; i++) f();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        die_cuda(cudaEventRecord(a, s), "cudaEventRecord");
        f();
        die_cuda(cudaEventRecord(b, s), "cudaEventRecord");
        die_cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
        float ms = 0;
        die_cuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

struct GemmRow { int64_t m, n, k; double bf16, fp8_fast, fp8_split; };

GemmRow bench_gemm(int64_t M, int64_t N, int64_t K, int reps) {
    GemmRow row = { M, N, K, 0, 0, 0 };
    size_t a8 = (size_t)(M * K), b8 = (size_t)(N * K), dn = (size_t)(M * N);
    void *A = dmalloc(a8 * 2), *B = dmalloc(b8 * 2), *D = dmalloc(dn * 2);
    float *one = (float *)dmalloc(4);
    const float h_one = 1.0f;
    die_cuda(cudaMemcpy(one, &h_one, 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    double flop = 2.0 * (double)M * (double)N * (double)K;
    fl_cuda_gemm_args g;
    /* bf16: A [M, K], B [N, K], D [M, N] bf16 — the same layout as fprop */
    fill(A, a8, 1, 1); fill(B, b8, 1, 2);
    fl_cuda_gemm_args_init(&g, M, N, K);
    g.a = A; g.b = B; g.d = D; g.a_dtype = g.b_dtype = g.d_dtype = FL_BF16;
    row.bf16 = flop / (median_ms([&] { die_if(fl_cuda_gemm(&g, NULL), "bf16 gemm"); }, 3, reps) * 1e-3) / 1e12;
    /* FP8 E4M3 x E4M3 -> bf16, scale pointers, fast accumulation (fprop) and split (dgrad/wgrad) */
    fill(A, a8, 0, 3); fill(B, b8, 0, 4);
    g.a_dtype = g.b_dtype = FL_E4M3;
    g.a_scale_inv = g.b_scale_inv = one;
    for (int fast = 1; fast >= 0; fast--) {
        g.fast_accum = fast;
        double ms = median_ms([&] { die_if(fl_cuda_gemm(&g, NULL), "fp8 gemm"); }, 3, reps);
        (fast ? row.fp8_fast : row.fp8_split) = flop / (ms * 1e-3) / 1e12;
    }
    cudaFree(A); cudaFree(B); cudaFree(D); cudaFree(one);
    return row;
}

struct CastRow { const char *name; double bytes, ms; };

}  // namespace

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) reps = 1;
    if (fl_cuda_device_count() == 0) {
        printf("no GPU (%s)\n", fl_cuda_unavailable_reason());
        return 0;
    }
    if (!fl_device_get(FL_DEV_CUDA)) {
        printf("no GPU (%s)\n", fl_last_error());
        return 0;
    }
    cudaDeviceProp prop;
    die_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("Measured %s on %s (%d SMs, %.1f GiB, compute capability %d.%d), CUDA runtime %d.%d, driver %d.%d.\n",
           date, prop.name, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor,
           rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
    printf("Each figure is the median of %d runs timed with CUDA events after 3 warm-ups.\n\n", reps);

    const int64_t sizes[3][3] = { { 4096, 4096, 4096 }, { 8192, 8192, 8192 }, { 8192, 8192, 28672 } };
    printf("cuBLASLt GEMMs, D[M, N] = A[M, K]·B[N, K]ᵀ (fprop's layout, Hopper's FP8 \"TN\"), bf16 output, "
           "random inputs:\n\n");
    printf("| M×N×K | bf16 TFLOP/s | FP8 E4M3 fast accum TFLOP/s | FP8 E4M3 split accum TFLOP/s | FP8 fast / bf16 |\n");
    printf("|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++) {
        GemmRow r = bench_gemm(sizes[i][0], sizes[i][1], sizes[i][2], reps);
        printf("| %lld×%lld×%lld | %.0f | %.0f | %.0f | %.2f× |\n", (long long)r.m, (long long)r.n, (long long)r.k,
               r.bf16, r.fp8_fast, r.fp8_split, r.fp8_fast / r.bf16);
        fflush(stdout);
    }

    const int64_t R = 8192, C = 8192;
    const size_t n = (size_t)(R * C);
    void *src = dmalloc(n * 4), *cpy = dmalloc(n * 4);
    uint8_t *q = (uint8_t *)dmalloc(n), *qt = (uint8_t *)dmalloc(n);
    float *scale = (float *)dmalloc(4 * (2 + 2 * (size_t)R));
    float *sinv = scale + 1, *row_amax = scale + 2, *row_sinv = row_amax + R;
    fl_cuda_qstats *st = (fl_cuda_qstats *)dmalloc(sizeof(fl_cuda_qstats));
    float *col = (float *)dmalloc(4 * 3 * (size_t)C);   /* per column: amax bits, scales, scale_inv */
    unsigned *col_amax = (unsigned *)col;
    float *col_scale = col + C, *col_sinv = col + 2 * C;
    const float h_scale = 0.9f;
    die_cuda(cudaMemcpy(scale, &h_scale, 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    cudaStream_t s = fl_cuda_stream();
    printf("\nCasts of a %lld×%lld source to E4M3 (saturating, amax and counters in the same pass) next to a "
           "device-to-device copy of that source:\n\n", (long long)R, (long long)C);
    printf("| source | kernel | bytes moved | time (ms) | GB/s | vs copy |\n|---|---|---|---|---|---|\n");
    for (int sdt = 0; sdt < 2; sdt++) {
        fl_dtype dt = sdt ? FL_BF16 : FL_F32;
        size_t S = n * (sdt ? 2 : 4);
        fill(src, n, sdt ? 1 : 2, 7 + sdt);
        CastRow rows[5] = {
            { "device-to-device copy", 2.0 * S, 0 },
            { "cast+amax (per tensor)", (double)S + n, 0 },
            { "cast+transpose+amax (per tensor)", (double)S + 2.0 * n, 0 },
            { "cast+transpose+amax (per row, 2 reads)", (double)S + 2.0 * n, 0 },
            { "cast+amax (per column, 2 reads)", 2.0 * S + n, 0 } };
        rows[0].ms = median_ms([&] { die_cuda(cudaMemcpyAsync(cpy, src, S, cudaMemcpyDeviceToDevice, s), "copy"); }, 3, reps);
        rows[1].ms = median_ms([&] {
            die_cuda(cudaMemsetAsync(st, 0, sizeof *st, s), "cudaMemsetAsync");
            die_if(cuda_quantize(src, dt, q, n, FL_E4M3, h_scale, NULL, FL_SATURATE, st, s), "cast+amax");
        }, 3, reps);
        rows[2].ms = median_ms([&] {
            die_cuda(cudaMemsetAsync(st, 0, sizeof *st, s), "cudaMemsetAsync");
            die_if(fl_cuda_cast_transpose(src, dt, R, C, FL_E4M3, scale, sinv, q, qt, st, NULL, NULL), "cast+transpose");
        }, 3, reps);
        rows[3].ms = median_ms([&] {
            die_cuda(cudaMemsetAsync(st, 0, sizeof *st, s), "cudaMemsetAsync");
            die_if(fl_cuda_cast_transpose_rowwise(src, dt, R, C, FL_E4M3, 0, true, row_amax, row_sinv, q, qt, st, NULL),
                   "rowwise cast+transpose");
        }, 3, reps);
        rows[4].ms = median_ms([&] {   /* what quantize_current does along axis 1: amax pass, scales, cast */
            die_cuda(cudaMemsetAsync(st, 0, sizeof *st, s), "cudaMemsetAsync");
            die_cuda(cudaMemsetAsync(col_amax, 0, 4 * (size_t)C, s), "cudaMemsetAsync");
            die_if(cuda_quantize_rows(src, dt, NULL, R, C, 1, FL_E4M3, NULL, FL_SATURATE, st, col_amax, s),
                   "per-column amax");
            die_if(cuda_scales(C, col_amax, NULL, 0.0f, FL_E4M3, 0, true, col_scale, col_sinv, s), "per-column scales");
            die_if(cuda_quantize_rows(src, dt, q, R, C, 1, FL_E4M3, col_scale, FL_SATURATE, st, col_amax, s),
                   "per-column cast");
        }, 3, reps);
        double copy_gbs = rows[0].bytes / (rows[0].ms * 1e-3) / 1e9;
        for (int i = 0; i < 5; i++) {
            double gbs = rows[i].bytes / (rows[i].ms * 1e-3) / 1e9;
            printf("| %s | %s | %.0f MB | %.3f | %.0f | %.0f%% |\n", fl_format(dt)->name, rows[i].name,
                   rows[i].bytes / 1e6, rows[i].ms, gbs, 100.0 * gbs / copy_gbs);
        }
        fflush(stdout);
    }
    cudaFree(src); cudaFree(cpy); cudaFree(q); cudaFree(qt); cudaFree(scale); cudaFree(st); cudaFree(col);
    die_if(fl_cuda_synchronize(), "synchronize");
    return 0;
}
