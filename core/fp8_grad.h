/* fp8_grad.h — MS-AMP's FP8 weight gradients (docs/recipes.md, MS-AMP O1–O3): a tensor whose
 * grad_dtype is E4M3 or E5M2 keeps its .grad quantized; each accumulation dequantizes the sum so far,
 * adds g in fp32 and re-casts with a fresh per-tensor power-of-two scale from the sum's amax
 * (current scaling on the sum's device, IEEE overflow policy so an inf stays visible as NaN). */
#ifndef FL_FP8_GRAD_H
#define FL_FP8_GRAD_H
#include "tensor.h"

/* t->grad = fp8(dequant(t->grad) + g) in t->grad_dtype (t->grad may be NULL: g alone). */
fl_status fl_fp8_grad_accumulate(fl_tensor *t, const fl_tensor *g);

#endif
