/* scaling.h — the scaling state of one quantized tensor role and the rules that update it
 * (docs/fp8-spec.md §2–§4). A role is one of a layer's FP8 operands: the forward input, the weight, or the
 * output gradient. Its state is plain data — format, scale, scale_inv, an amax history ring — and
 * three rules move it:
 *   delayed  (TransformerEngine): a cast at step t uses the scale derived from the history up to
 *            t−1 and records its own amax in history[0]; fl_scaling_update() then derives the next
 *            scale (max over the history or the most recent entry, margin) and rolls the ring.
 *   current  (torchao): the scale comes from the tensor being cast, every time.
 *   pow2     (MS-AMP): like delayed (inputs/gradients, 16-step window, max) or current (weights),
 *            but the scale is rounded down to a power of two: 2^(floor(log2(max/amax)) − margin).
 * Amaxes from several casts in one step combine by max (a module called twice in a step).
 * NaN or ±inf amaxes and amax 0 keep the old scale.
 * A device may report a cast's statistics asynchronously (tensor.h fl_stats_future): the role then
 * queues the observation and applies it, in cast order, when its state is next read or updated
 * (fl_scaling_flush) — on the GPU one wait per step instead of one stream sync per cast. */
#ifndef FL_SCALING_H
#define FL_SCALING_H
#include <stdbool.h>
#include <stdint.h>
#include "error.h"
#include "format.h"
#include "tensor.h"
#include "scale_rule.h"

typedef enum { FL_SCALE_DELAYED = 0, FL_SCALE_CURRENT = 1 } fl_scale_rule;
typedef enum { FL_AMAX_MOST_RECENT = 0, FL_AMAX_MAX = 1 } fl_amax_algo;

#define FL_HISTORY_MAX (1 << 20)
/* Queued observations a role keeps before it waits for them itself (a loop that never updates, e.g.
 * evaluation, must not grow the queue or hold the device's statistics slots without bound). */
#define FL_SCALING_MAX_PENDING 256

typedef struct fl_scaling {
    fl_dtype fmt;            /* FL_E4M3 or FL_E5M2 */
    fl_scale_rule rule;
    bool pow2;               /* MS-AMP: scales are powers of two */
    int margin;
    fl_amax_algo algo;
    int interval;            /* delayed: recompute the scale every `interval` updates (1 = every step) */
    int amax_history_len;            /* delayed: ring length L >= 1 */
    float *history;          /* [amax_history_len]; history[0] = this step's amax (max over its casts) */
    bool step_ended;         /* current rule: an update passed, so the next cast starts history[0] afresh (it held
                              * the last step's max, for fp8.stats; it does not roll, the rule keeps no history) */
    float scale, scale_inv;  /* what the next delayed cast uses; start at 1 */
    int64_t updates;         /* fl_scaling_update calls that rolled the ring */
    /* MS-AMP's warm-up (ScalingMeta.amax_counter / window_size): while warm < warmup the delayed role casts in
     * time (its scale from the tensor being cast, as the current rule); each update adds one, an update whose
     * amax is inf or NaN sets warm back to 0. warmup 0: none (te). */
    int warmup;
    int64_t warm;
    /* What the most recent cast saw (for fp8.stats): amax of the source (NaN when it held a NaN, even where the
     * history passes the NaN over), element count, values that underflowed to zero, values that saturated, NaNs. */
    float last_amax;
    int64_t last_n, last_underflow, last_saturated, last_nan;
    /* Observed casts whose statistics are not known yet, oldest first (fl_scaling_flush). */
    struct fl_scaling_obs *pending;
    int npending, cap_pending;
} fl_scaling;

/* History of amax_history_len zeros, scale 1. amax_history_len is used by the delayed rule only (>= 1). */
fl_status fl_scaling_init(fl_scaling *s, fl_dtype fmt, fl_scale_rule rule, bool pow2, int margin,
                          fl_amax_algo algo, int amax_history_len, int interval);
void fl_scaling_free(fl_scaling *s);
/* Whether the next cast of role s takes its scale from the tensor itself: the current rule, or a delayed role
 * still warming up (MS-AMP's is_in_time_scaling). */
bool fl_scaling_in_time(const fl_scaling *s);

/* scale_rule.h's fl_amax_to_scale with the format's max: fp8_max·2^-margin/amax, or its power-of-two
 * rounding down; `fallback` when amax is not finite or <= 0; FLT_MAX for an infinite result. */
float fl_scale_for(float amax, fl_dtype fmt, int margin, bool pow2, float fallback);

/* scale_rule.h's fl_amax_to_scale_current with the format's max: fl_scale_for(max(amax, FL_AMAX_FLOOR), fmt,
 * margin, pow2, 1) — NaN counts as the floor too (every device's quantize_current uses this rule). */
float fl_scale_current(float amax, fl_dtype fmt, int margin, bool pow2);

/* Record one cast's amax into history[0] (max with what this step already saw; NaN sticks). */
void fl_scaling_record(fl_scaling *s, float amax);
/* Record the stats of one cast (amax goes through fl_scaling_record when `into_history`). */
void fl_scaling_observe(fl_scaling *s, float amax, int64_t n, int64_t underflow, int64_t saturated, bool into_history);
/* Observe the cast that made FP8 tensor q (n source elements): its amax (NaN if the source had a NaN)
 * and counters, into the history when `into_history`. take_scale: the role's scale becomes the one the
 * current rule derives from that amax (fl_scale_for(max(amax, FL_AMAX_FLOOR)), what a per-tensor
 * current-scaling cast used). Applied now when q's statistics are known, else queued (q->qfuture). */
fl_status fl_scaling_observe_cast(fl_scaling *s, const fl_tensor *q, int64_t n, bool into_history, bool take_scale);
/* Apply every queued observation in order (waiting for the device where needed). Every reader of a
 * role's state and fl_scaling_update call it first. On an error the remaining ones are dropped. */
fl_status fl_scaling_flush(fl_scaling *s);

/* End-of-step update (after fl_scaling_flush) of the delayed rule: if the role ran this step (history[0] != 0), derive the
 * new scale when (updates % interval) == 0 — amax = max(history) or history[0], and only a finite
 * positive amax replaces the scale — then roll the ring (oldest drops, slot 0 cleared). A role
 * that did not run (history[0] == 0) is left untouched. Current-rule roles are not changed. */
fl_status fl_scaling_update(fl_scaling *s);

/* The amax the update rule would use now (max over the history or the most recent entry); flush first. */
float fl_scaling_amax(const fl_scaling *s);

#endif
