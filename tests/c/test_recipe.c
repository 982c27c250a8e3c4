/* test_recipe.c — core/recipe.c: each backend's role configuration against the table of
 * docs/fp8-spec.md §2–§4 written out by hand, and the refusal of an unknown backend or ao config. */
#include "runner.h"
#include "recipe.h"

static int same_role(const fl_role_config *r, fl_dtype fmt, fl_scale_rule rule, bool pow2, int margin, fl_amax_algo algo,
                     int len, int interval) {
    return r->fmt == fmt && r->rule == rule && r->pow2 == pow2 && r->margin == margin && r->algo == algo &&
           r->amax_history_len == len && r->interval == interval;
}

TEST(recipe_te_roles_follow_the_settings) {
    fl_recipe r;
    fl_layer_config c;
    fl_recipe_defaults(&r, FL_BACKEND_TE);
    CHECK_OK(fl_recipe_layer_config(&r, &c));
    CHECK(same_role(&c.role[FL_ROLE_INPUT], FL_E4M3, FL_SCALE_DELAYED, false, 0, FL_AMAX_MOST_RECENT, 1024, 1), "te input");
    CHECK(same_role(&c.role[FL_ROLE_WEIGHT], FL_E4M3, FL_SCALE_DELAYED, false, 0, FL_AMAX_MOST_RECENT, 1024, 1), "te weight");
    CHECK(same_role(&c.role[FL_ROLE_GRAD], FL_E5M2, FL_SCALE_DELAYED, false, 0, FL_AMAX_MOST_RECENT, 1024, 1), "HYBRID grad is E5M2");
    CHECK(!c.hp[0] && !c.hp[1] && !c.hp[2] && c.gran == FL_GRAN_TENSOR, "te defaults: all FP8, per tensor");
    r.fp8_format = FL_RECIPE_E4M3;
    r.margin = 3; r.interval = 5; r.amax_history_len = 7; r.amax_compute_algo = FL_AMAX_MAX;
    r.override_linear_precision[2] = true;
    CHECK_OK(fl_recipe_layer_config(&r, &c));
    for (int i = 0; i < FL_NROLES; i++)
        CHECK(same_role(&c.role[i], FL_E4M3, FL_SCALE_DELAYED, false, 3, FL_AMAX_MAX, 7, 5), "te E4M3 role %d", i);
    CHECK(!c.hp[0] && !c.hp[1] && c.hp[2], "override_linear_precision (false, false, true)");
}

TEST(recipe_ao_roles_per_config) {
    fl_recipe r;
    fl_layer_config c;
    fl_recipe_defaults(&r, FL_BACKEND_AO);
    r.margin = 9;   /* te's field: ao ignores it */
    CHECK_OK(fl_recipe_layer_config(&r, &c));
    CHECK(same_role(&c.role[FL_ROLE_INPUT], FL_E4M3, FL_SCALE_CURRENT, false, 0, FL_AMAX_MOST_RECENT, 1, 1), "tensorwise input");
    CHECK(same_role(&c.role[FL_ROLE_WEIGHT], FL_E4M3, FL_SCALE_CURRENT, false, 0, FL_AMAX_MOST_RECENT, 1, 1), "tensorwise weight");
    CHECK(same_role(&c.role[FL_ROLE_GRAD], FL_E5M2, FL_SCALE_CURRENT, false, 0, FL_AMAX_MOST_RECENT, 1, 1), "tensorwise grad");
    CHECK(c.gran == FL_GRAN_TENSOR, "tensorwise granularity");
    const fl_ao_config rows[2] = { FL_AO_ROWWISE, FL_AO_ROWWISE_GW_HP };
    const fl_fp8_granularity grans[2] = { FL_GRAN_ROWWISE, FL_GRAN_ROWWISE_GW_HP };
    for (int k = 0; k < 2; k++) {
        r.ao_config = rows[k];
        CHECK_OK(fl_recipe_layer_config(&r, &c));
        for (int i = 0; i < FL_NROLES; i++)
            CHECK(same_role(&c.role[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MOST_RECENT, 1, 1), "%s role %d",
                  fl_setting_info(FL_SET_AO_CONFIG)->choices[rows[k]], i);
        CHECK(c.gran == grans[k], "%s granularity", fl_setting_info(FL_SET_AO_CONFIG)->choices[rows[k]]);
    }
    r.ao_config = FL_AO_CONFIG_COUNT;
    CHECK(fl_recipe_layer_config(&r, &c) == FL_EINVAL && strstr(fl_last_error(), "unknown ao config"), "%s", fl_last_error());
}

TEST(recipe_msamp_roles_are_power_of_two) {
    fl_recipe r;
    fl_layer_config c;
    fl_recipe_defaults(&r, FL_BACKEND_MSAMP);
    r.margin = 2;
    r.amax_history_len = 99;   /* te's field: msamp keeps its 16-step window */
    CHECK_OK(fl_recipe_layer_config(&r, &c));
    CHECK(same_role(&c.role[FL_ROLE_INPUT], FL_E4M3, FL_SCALE_DELAYED, true, 2, FL_AMAX_MAX, 16, 1), "msamp input");
    CHECK(same_role(&c.role[FL_ROLE_WEIGHT], FL_E4M3, FL_SCALE_CURRENT, true, 2, FL_AMAX_MOST_RECENT, 1, 1), "msamp weight");
    CHECK(same_role(&c.role[FL_ROLE_GRAD], FL_E5M2, FL_SCALE_DELAYED, true, 2, FL_AMAX_MAX, 16, 1), "msamp grad");
    CHECK(!c.hp[0] && !c.hp[1] && !c.hp[2] && c.gran == FL_GRAN_TENSOR, "msamp: all FP8 per tensor");
    r.backend = FL_BACKEND_COUNT;
    CHECK(fl_recipe_layer_config(&r, &c) == FL_EINVAL && strstr(fl_last_error(), "unknown backend"), "%s", fl_last_error());
}
