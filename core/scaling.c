/* scaling.c — scaling state and its update rules (see scaling.h and docs/fp8-spec.md §2–§4). */
#include "scaling.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

fl_status fl_scaling_init(fl_scaling *s, fl_dtype fmt, fl_scale_rule rule, bool pow2, int margin,
                          fl_amax_algo algo, int amax_history_len, int interval) {
    memset(s, 0, sizeof *s);
    if (fmt != FL_E4M3 && fmt != FL_E5M2)
        return FL_ERR(FL_EINVAL, "scaling: format must be e4m3 or e5m2, got %s",
                      (int)fmt >= 0 && fmt < FL_DTYPE_COUNT ? fl_format(fmt)->name : "an unknown dtype");
    if (amax_history_len < 1 || amax_history_len > FL_HISTORY_MAX)
        return FL_ERR(FL_EINVAL, "scaling: amax_history_len must be in 1..%d, got %d", FL_HISTORY_MAX, amax_history_len);
    if (interval < 1) return FL_ERR(FL_EINVAL, "scaling: interval must be >= 1, got %d", interval);
    if (margin < 0 || margin > 64) return FL_ERR(FL_EINVAL, "scaling: margin must be in 0..64, got %d", margin);
    s->history = calloc((size_t)amax_history_len, sizeof(float));
    if (!s->history) return FL_ERR(FL_ENOMEM, "scaling: out of memory for an amax history of %d", amax_history_len);
    s->fmt = fmt;
    s->rule = rule;
    s->pow2 = pow2;
    s->margin = margin;
    s->algo = algo;
    s->amax_history_len = amax_history_len;
    s->interval = interval;
    s->scale = s->scale_inv = 1.0f;
    return FL_OK;
}

/* One queued observation: fl_scaling_observe_cast's arguments. */
struct fl_scaling_obs {
    fl_stats_future *f;
    int64_t n;
    bool into_history, take_scale;
};

static void drop_pending(fl_scaling *s, int from) {
    for (int i = from; i < s->npending; i++) fl_stats_future_release(s->pending[i].f);
    s->npending = 0;
}

void fl_scaling_free(fl_scaling *s) {
    if (!s) return;
    drop_pending(s, 0);
    free(s->pending);
    free(s->history);
    s->history = NULL;
    s->pending = NULL;
    s->cap_pending = 0;
}

bool fl_scaling_in_time(const fl_scaling *s) {
    return s->rule == FL_SCALE_CURRENT || (s->warmup > 0 && s->warm < s->warmup);
}

float fl_scale_for(float amax, fl_dtype fmt, int margin, bool pow2, float fallback) {
    return fl_amax_to_scale(amax, (float)fl_format(fmt)->max, margin, pow2, fallback);
}

float fl_scale_current(float amax, fl_dtype fmt, int margin, bool pow2) {
    return fl_amax_to_scale_current(amax, (float)fl_format(fmt)->max, margin, pow2);
}

void fl_scaling_record(fl_scaling *s, float amax) {
    float *h0 = &s->history[0];
    if (s->step_ended) { *h0 = 0.0f; s->step_ended = false; }
    if (isnan(amax) || isnan(*h0)) *h0 = NAN;
    else if (amax > *h0) *h0 = amax;
}

void fl_scaling_observe(fl_scaling *s, float amax, int64_t n, int64_t underflow, int64_t saturated, bool into_history) {
    s->last_amax = amax;
    s->last_n = n;
    s->last_underflow = underflow;
    s->last_saturated = saturated;
    s->last_nan = 0;
    if (into_history) fl_scaling_record(s, amax);
}

/* take_scale: the cast was in time (its scale from the tensor), and its amax is the tensor's |x| max, NaN when x
 * held one (torch's max, MS-AMP's in-time amax); a cast with a stored scale records the amax of the values that
 * are not NaN (TE's cast kernel takes fmaxf, which passes NaN over), so one NaN batch does not freeze a
 * `max` history for its whole length. */
static void apply_cast(fl_scaling *s, const fl_cast_stats *st, int64_t n, bool into_history, bool take_scale) {
    fl_scaling_observe(s, st->nan && take_scale ? NAN : st->amax, n, st->underflow, st->saturated, into_history);
    /* fp8.stats reports the NaN either way: a te layer fed a NaN would otherwise look healthy (or, all NaN, like an
     * all-zero tensor: amax 0) */
    s->last_nan = st->nan;
    if (st->nan) s->last_amax = NAN;
    /* MS-AMP's compute_scaling_factor keeps the previous scale where the amax is 0 or not finite (a NaN anywhere makes
     * torch's amax NaN), docs/fp8-spec.md §4; until 2026-12-05 an all-zero or NaN weight's scale jumped to the
     * floor's 2^48 (the cast itself is the same either way: zeros stay zeros, NaN stays NaN). torchao's rule floors. */
    const bool keep = s->pow2 && (st->nan || !(st->amax > 0.0f) || !isfinite(st->amax));
    if (take_scale && !keep) {
        s->scale = fl_scale_current(st->amax, s->fmt, s->margin, s->pow2);
        s->scale_inv = 1.0f / s->scale;
    }
}

fl_status fl_scaling_observe_cast(fl_scaling *s, const fl_tensor *q, int64_t n, bool into_history, bool take_scale) {
    if (!q->qfuture) {
        FL_TRY(fl_scaling_flush(s));   /* earlier casts first: the last one observed is the one reported */
        apply_cast(s, &q->qstats, n, into_history, take_scale);
        return FL_OK;
    }
    if (s->npending == s->cap_pending) {
        int cap = s->cap_pending ? 2 * s->cap_pending : 8;
        struct fl_scaling_obs *p = realloc(s->pending, (size_t)cap * sizeof *p);
        if (!p) return FL_ERR(FL_ENOMEM, "scaling: out of memory queueing a cast's statistics");
        s->pending = p;
        s->cap_pending = cap;
    }
    s->pending[s->npending++] = (struct fl_scaling_obs){ fl_stats_future_retain(q->qfuture), n, into_history, take_scale };
    return s->npending >= FL_SCALING_MAX_PENDING ? fl_scaling_flush(s) : FL_OK;
}

fl_status fl_scaling_flush(fl_scaling *s) {
    for (int i = 0; i < s->npending; i++) {
        struct fl_scaling_obs *o = &s->pending[i];
        fl_cast_stats st;
        fl_status rc = o->f->wait(o->f, &st);
        fl_stats_future_release(o->f);
        o->f = NULL;
        if (rc != FL_OK) {
            drop_pending(s, i + 1);
            return rc;
        }
        apply_cast(s, &st, o->n, o->into_history, o->take_scale);
    }
    s->npending = 0;
    return FL_OK;
}

float fl_scaling_amax(const fl_scaling *s) {
    if (s->algo == FL_AMAX_MOST_RECENT) return s->history[0];
    float m = 0.0f;
    for (int i = 0; i < s->amax_history_len; i++) {
        float v = s->history[i];
        if (isnan(v)) return NAN;
        if (v > m) m = v;
    }
    return m;
}

fl_status fl_scaling_update(fl_scaling *s) {
    FL_TRY(fl_scaling_flush(s));
    /* current scaling keeps no history: history[0] is the step's max until the next step's first cast (it was the
     * max since the start, so fp8.stats' amax(hist) of an ao layer never came down) */
    if (s->rule != FL_SCALE_DELAYED) { s->step_ended = true; return FL_OK; }
    if (s->history[0] == 0.0f) return FL_OK;     /* the role did not run this step */
    if (s->warmup > 0) s->warm = isfinite(s->history[0]) ? s->warm + 1 : 0;   /* MS-AMP's amax_counter */
    if (s->updates % s->interval == 0) {
        float amax = fl_scaling_amax(s);
        if (amax > 0.0f && isfinite(amax)) {
            s->scale = fl_scale_for(amax, s->fmt, s->margin, s->pow2, s->scale);
            s->scale_inv = 1.0f / s->scale;
        }
    }
    s->updates++;
    if (s->amax_history_len > 1) memmove(s->history + 1, s->history, (size_t)(s->amax_history_len - 1) * sizeof(float));
    s->history[0] = 0.0f;
    return FL_OK;
}
