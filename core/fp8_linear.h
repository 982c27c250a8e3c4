/* fp8_linear.h — y = x·Wᵀ (+ b) with FP8 GEMMs (docs/fp8-spec.md §2–§4, docs/architecture.md).
 * Three GEMMs, each FP8 unless `hp` sends it back to high precision (override_linear_precision):
 *   fprop  y  = x_q · W_qᵀ        input role × weight role
 *   dgrad  dX = dY_q · W_q        grad role  × weight role
 *   wgrad  dW = dY_qᵀ · x_q       grad role  × input role
 * Operands are real FP8 bytes with scales; on the CPU a GEMM is a bf16 GEMM of the exactly decoded
 * bytes with fp32 accumulation (every E4M3/E5M2 value and every product of two is exact there), the
 * scales applied to the fp32 result, bias added in the same pass.
 * Granularity:
 *   TENSOR      one scale per operand (te delayed, ao tensorwise, msamp); the FP8 input and weight
 *               are what backward keeps (1 byte per element), the weight cast is cached until the
 *               weight changes (storage version) or its scale does.
 *   ROWWISE     ao rowwise: every operand scaled per row along its non-contracted dimension with
 *               power-of-two scales; backward keeps the high-precision input and weight and re-casts
 *               them along the other axis, as torchao does.
 *   ROWWISE_GW_HP  ao rowwise_with_gw_hp: fprop rowwise, dgrad dY rowwise × W tensorwise, wgrad in
 *               high precision.
 * High-precision GEMMs run in the autocast dtype active at forward time (bf16 or fp16 with fp32
 * accumulation) or fp32. Outputs and gradients are fp32. All operands on one device (CPU or CUDA). */
#ifndef FL_FP8_LINEAR_H
#define FL_FP8_LINEAR_H
#include "scaling.h"
#include "tensor.h"

typedef enum { FL_ROLE_INPUT = 0, FL_ROLE_WEIGHT = 1, FL_ROLE_GRAD = 2, FL_NROLES = 3 } fl_fp8_role;
typedef enum { FL_GRAN_TENSOR = 0, FL_GRAN_ROWWISE = 1, FL_GRAN_ROWWISE_GW_HP = 2 } fl_fp8_granularity;
extern const char *const fl_fp8_role_names[];   /* FL_NROLES (fp8_linear.c checks the count) */

typedef struct fl_fp8_layer {
    int refcount;
    fl_scaling role[FL_NROLES];
    bool hp[3];                     /* fprop, dgrad, wgrad in high precision */
    fl_fp8_granularity gran;
    bool fast_accum;                /* fprop GEMM may use the device's fast (reduced-precision) accumulation */
    /* FP8 weight cache (TENSOR granularity) */
    fl_tensor *wq;
    fl_tensor *wq_dev;              /* what the device's fp8_gemm derived from wq's bytes (the CPU: their
                                     * bf16 decode; CUDA: a K-major copy); same lifetime as wq */
    const fl_storage *wq_storage;
    uint64_t wq_version;
    int64_t wq_offset;
    float wq_scale;
    /* counters for fp8.stats and tests; fused_input_casts: forwards whose input cast ran in the pass of the op
     * before (GELU: fl_fp8_linear_gelu, LayerNorm: fl_fp8_linear_layernorm); dy_handovers: backwards whose dY the
     * next layer's fused GELU backward cast (core/fp8_linear.c, handover_dgelu); residual_adds: forwards whose
     * residual the FP8 GEMM added as it stored its result (fl_fp8_linear's residual) */
    int64_t forwards, backwards, weight_casts, cache_hits, fused_input_casts, dy_handovers, residual_adds;
    /* fl_fp8_layer_update calls and state loads (the binding's load_state): a layer trained without the
     * Accelerator tells by it whether an optimizer step had its update (lua/fp8/nn/fp8_linear.lua) */
    int64_t syncs;
} fl_fp8_layer;

/* A layer taking over the three initialised roles (roles[i] is moved, not copied). */
fl_status fl_fp8_layer_new(fl_fp8_layer **out, fl_scaling roles[FL_NROLES], const bool hp[3], fl_fp8_granularity gran);
fl_fp8_layer *fl_fp8_layer_retain(fl_fp8_layer *l);
void fl_fp8_layer_release(fl_fp8_layer *l);
/* End of an optimizer step: the delayed rule's update on every role (scaling.h), after the roles' queued
 * observations (the one wait for the device per step). */
fl_status fl_fp8_layer_update(fl_fp8_layer *l);
void fl_fp8_layer_drop_cache(fl_fp8_layer *l);

/* y = x·Wᵀ + b. x [..., K] fp32/bf16/fp16; w [M, K] fp32/bf16/fp16 (the parameter gradients flow
 * to); b [M] or NULL. w_fp8, when given, is an E4M3 [M, K] tensor used as the weight operand as is
 * (MS-AMP O3's FP8 weights; w is then its high-precision master, used for a high-precision dgrad and
 * receiving the gradient). `record`: this call's amaxes go into the histories (training with grad
 * enabled); otherwise recipe state is left untouched. residual: NULL, or a tensor the result is added to,
 * residual + (x·Wᵀ + b) with the bits and gradients of that add after the layer: an fp32 residual of the output's
 * shape on its device is added as the FP8 GEMM stores its result where the device can (fp8_gemm_add; counted in
 * residual_adds), any other by fl_binary after the layer. */
fl_status fl_fp8_linear(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                        fl_fp8_layer *l, bool record, const fl_tensor *w_fp8, const fl_tensor *residual);
/* fl_fp8_linear of GELU(x) (the tanh form), the same bits and recipe state as fl_gelu then fl_fp8_linear. Where
 * the device casts GELU's output in GELU's own pass (quantize_gelu), the layer is per-tensor with every GEMM in
 * FP8 and the input role casts with its stored scale (delayed scaling past its warm-up), the fp32 activation is
 * never made: one node whose backward applies GELU's derivative to dX; otherwise the two ops run. residual: as
 * fl_fp8_linear's. */
fl_status fl_fp8_linear_gelu(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                             fl_fp8_layer *l, bool record, const fl_tensor *w_fp8, const fl_tensor *residual);
/* fl_fp8_linear applied to LayerNorm(x; ln_w, ln_b, eps) (fl_layer_norm's arguments): under the conditions of
 * fl_fp8_linear_gelu (per-tensor delayed scaling past its warm-up, every GEMM in FP8) and where the device casts
 * in LayerNorm's pass (layernorm_quantize), LayerNorm's output goes to memory only as the layer's FP8 input;
 * otherwise fl_layer_norm then fl_fp8_linear. The same results, gradients and recipe state either way. */
fl_status fl_fp8_linear_layernorm(fl_tensor **out, const fl_tensor *x, const fl_tensor *ln_w, const fl_tensor *ln_b,
                                  double eps, const fl_tensor *w, const fl_tensor *b, fl_fp8_layer *l, bool record,
                                  const fl_tensor *w_fp8);

/* Building blocks, exported for tests and for other FP8 ops, on the tensor's device. src is a contiguous
 * fp32 [R, C] tensor; axis -1: one scale; 0: one per row; 1: one per column. scales[] (host; R, C or 1
 * entries) are the multipliers applied before the cast (saturating); the result carries 1/scales as
 * scale_inv and the cast's statistics in qstats (amax of the source, underflow/saturation counts). */
fl_status fl_fp8_cast_2d(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, int axis, const float *scales);
/* The same cast with current scaling in one device call and no host round trip: scales =
 * fl_scale_for(max(amax, FL_AMAX_FLOOR), fmt, margin, pow2, 1) of src's own amax (per tensor or per
 * index along axis; NaN ignored). qstats may be pending (q->qfuture; fl_tensor_qstats). */
fl_status fl_fp8_cast_current_2d(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, int axis, int margin, bool pow2);
/* amax per axis (as above; NaN ignored) into out[] (host). */
fl_status fl_fp8_amax_2d(const fl_tensor *src, int axis, float *out);

#endif
