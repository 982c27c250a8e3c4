/* recipe.c — te, ao and msamp as role configurations (recipe.h; docs/fp8-spec.md §2–§4). */
#include "recipe.h"
#include <string.h>

/* MS-AMP's window for inputs and output gradients. */
#define MSAMP_HISTORY 16

void fl_recipe_from_settings(fl_recipe *r, const fl_settings *s) {
    memset(r, 0, sizeof *r);
    r->backend = (fl_fp8_backend)fl_settings_get(s, FL_SET_BACKEND);
    r->fp8_format = (fl_recipe_format)fl_settings_get(s, FL_SET_FP8_FORMAT);
    r->margin = fl_settings_get(s, FL_SET_MARGIN);
    r->interval = fl_settings_get(s, FL_SET_INTERVAL);
    r->amax_history_len = fl_settings_get(s, FL_SET_AMAX_HISTORY_LEN);
    r->amax_compute_algo = (fl_amax_algo)fl_settings_get(s, FL_SET_AMAX_COMPUTE_ALGO);
    int olp = fl_settings_get(s, FL_SET_OVERRIDE_LINEAR_PRECISION);
    r->override_linear_precision[0] = olp & FL_OVERRIDE_FPROP;
    r->override_linear_precision[1] = olp & FL_OVERRIDE_DGRAD;
    r->override_linear_precision[2] = olp & FL_OVERRIDE_WGRAD;
    r->ao_config = (fl_ao_config)fl_settings_get(s, FL_SET_AO_CONFIG);
}

void fl_recipe_defaults(fl_recipe *r, fl_fp8_backend b) {
    fl_settings s;
    fl_settings_init(&s);
    fl_settings_put(&s, FL_SET_BACKEND, (int)b);
    fl_recipe_from_settings(r, &s);
}

static fl_role_config role(fl_dtype fmt, fl_scale_rule rule, bool pow2, int margin, fl_amax_algo algo, int len,
                           int interval) {
    return (fl_role_config){ fmt, rule, pow2, margin, algo, len, interval, 0 };
}

fl_status fl_recipe_layer_config(const fl_recipe *r, fl_layer_config *out) {
    memset(out, 0, sizeof *out);
    fl_role_config *in = &out->role[FL_ROLE_INPUT], *w = &out->role[FL_ROLE_WEIGHT], *g = &out->role[FL_ROLE_GRAD];
    switch (r->backend) {
    case FL_BACKEND_TE: {
        if ((unsigned)r->fp8_format >= FL_RECIPE_FORMAT_COUNT)
            return FL_ERR(FL_EINVAL, "fp8 recipe: te fp8_format %d is not HYBRID or E4M3", (int)r->fp8_format);
        *in = role(FL_E4M3, FL_SCALE_DELAYED, false, r->margin, r->amax_compute_algo, r->amax_history_len, r->interval);
        *w = *in;
        *g = *in;
        g->fmt = r->fp8_format == FL_RECIPE_HYBRID ? FL_E5M2 : FL_E4M3;
        for (int i = 0; i < 3; i++) out->hp[i] = r->override_linear_precision[i];
        out->gran = FL_GRAN_TENSOR;
        return FL_OK;
    }
    case FL_BACKEND_AO:
        switch (r->ao_config) {
        case FL_AO_TENSORWISE:
            *in = role(FL_E4M3, FL_SCALE_CURRENT, false, 0, FL_AMAX_MOST_RECENT, 1, 1);
            *w = *in;
            *g = *in;
            g->fmt = FL_E5M2;
            out->gran = FL_GRAN_TENSOR;
            return FL_OK;
        case FL_AO_ROWWISE:
        case FL_AO_ROWWISE_GW_HP:
            *in = role(FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MOST_RECENT, 1, 1);
            *w = *in;
            *g = *in;
            out->gran = r->ao_config == FL_AO_ROWWISE ? FL_GRAN_ROWWISE : FL_GRAN_ROWWISE_GW_HP;
            return FL_OK;
        default:
            return FL_ERR(FL_EINVAL, "fp8 recipe: unknown ao config %d (valid: tensorwise, rowwise, rowwise_with_gw_hp)",
                          (int)r->ao_config);
        }
    case FL_BACKEND_MSAMP:
        *in = role(FL_E4M3, FL_SCALE_DELAYED, true, r->margin, FL_AMAX_MAX, MSAMP_HISTORY, 1);
        in->warmup = MSAMP_HISTORY;   /* ScalingMeta.is_warmup: in-time casts until the window has filled */
        *w = role(FL_E4M3, FL_SCALE_CURRENT, true, r->margin, FL_AMAX_MOST_RECENT, 1, 1);
        *g = *in;
        g->fmt = FL_E5M2;
        out->gran = FL_GRAN_TENSOR;
        return FL_OK;
    default:
        return FL_ERR(FL_EINVAL, "fp8 recipe: unknown backend %d (valid: te, ao, msamp)", (int)r->backend);
    }
}
