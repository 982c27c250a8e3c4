/* test_settings.c — core/settings.c: the one parser and its messages (the same text from a flag, a
 * variable or YAML), the self-test row hidden without FP8LAB_SCHEMA_SELFTEST=1, the suggestion rule,
 * and that a recipe's defaults are the table's. */
#include <stdlib.h>
#include "runner.h"
#include "recipe.h"
#include "settings.h"

static int parse(fl_setting_id k, const char *s, fl_setting_from from, int *v, char *why, size_t n) {
    return fl_setting_parse(k, s, strlen(s), from, v, why, n);
}

TEST(settings_parse_reads_every_type_and_says_what_was_expected) {
    char why[640];
    int v = -1;
    CHECK(parse(FL_SET_BACKEND, " TE ", FL_FROM_TEXT, &v, why, sizeof why) && v == FL_BACKEND_TE, "%s", why);
    CHECK(parse(FL_SET_MARGIN, "64", FL_FROM_YAML_PLAIN, &v, why, sizeof why) && v == 64, "%s", why);
    CHECK(!parse(FL_SET_MARGIN, "65", FL_FROM_TEXT, &v, why, sizeof why), "65 is out of range");
    CHECK(strcmp(why, "expected an integer in 0..64, got 65") == 0, "%s", why);
    CHECK(!parse(FL_SET_MARGIN, "3", FL_FROM_YAML_QUOTED, &v, why, sizeof why), "a quoted number is a string");
    CHECK(strstr(why, "(a number in quotes is a string: remove the quotes)") != NULL, "%s", why);
    CHECK(parse(FL_SET_USE_AUTOCAST_DURING_EVAL, "y", FL_FROM_TEXT, &v, why, sizeof why) && v == 1, "y is true");
    CHECK(parse(FL_SET_PAD_INNER_DIM, "OFF", FL_FROM_TEXT, &v, why, sizeof why) && v == 0, "OFF is false");
    CHECK(!parse(FL_SET_PAD_INNER_DIM, "y", FL_FROM_YAML_PLAIN, &v, why, sizeof why), "YAML 1.1 has no y");
    CHECK(parse(FL_SET_OVERRIDE_LINEAR_PRECISION, "(false, False, TRUE)", FL_FROM_TEXT, &v, why, sizeof why) &&
          v == FL_OVERRIDE_WGRAD, "%s", why);
    CHECK(!parse(FL_SET_FP8_FORMAT, "e5m2", FL_FROM_TEXT, &v, why, sizeof why), "E5M2 is refused");
    CHECK(strncmp(why, "E5M2 alone is not a training format", 35) == 0 && strstr(why, "got \"e5m2\""), "%s", why);
    CHECK(parse(FL_SET_MIXED_PRECISION, "no", FL_FROM_YAML_PLAIN, &v, why, sizeof why) && v == FL_MP_NO, "bare no");
    CHECK(parse(FL_SET_MIXED_PRECISION, "false", FL_FROM_YAML_PLAIN, &v, why, sizeof why) && v == FL_MP_NO,
          "YAML's false for the choice 'no'");
    CHECK(!parse(FL_SET_MODULE_FILTER_FUNC, "f", FL_FROM_TEXT, &v, why, sizeof why), "a function is no text");
    CHECK(fl_setting_check_number(FL_SET_AMAX_HISTORY_LEN, 16.0, &v, why, sizeof why) && v == 16, "16.0 is 16");
    CHECK(!fl_setting_check_number(FL_SET_AMAX_HISTORY_LEN, 2.5, &v, why, sizeof why), "2.5");
    CHECK(strcmp(why, "expected an integer in 1..1048576, got 2.5") == 0, "%s", why);
}

TEST(settings_set_text_names_the_origin) {
    fl_settings s;
    fl_settings_init(&s);
    CHECK(fl_settings_get(&s, FL_SET_AMAX_HISTORY_LEN) == 1024, "the default is the table's");
    CHECK(fl_settings_set_text(&s, FL_SET_INTERVAL, "soon", "FP8LAB_FP8_INTERVAL") == FL_EINVAL, "bad value");
    CHECK(strstr(fl_last_error(), "FP8LAB_FP8_INTERVAL: expected an integer >= 1, got \"soon\"") != NULL, "%s",
          fl_last_error());
    CHECK(!fl_settings_has(&s, FL_SET_INTERVAL), "a failed set leaves nothing");
    CHECK_OK(fl_settings_set_text(&s, FL_SET_INTERVAL, "4", NULL));
    CHECK(fl_settings_get(&s, FL_SET_INTERVAL) == 4, "set");
}

TEST(settings_rows_are_found_by_name_and_alias_and_the_selftest_row_hides) {
    CHECK(fl_setting_find("amax_history_length") == FL_SET_AMAX_HISTORY_LEN, "alias");
    CHECK(fl_setting_find("opt_level") == FL_SET_OPT_LEVEL, "name");
    CHECK(fl_setting_find("nope") == -1, "unknown");
    const char *e = getenv("FP8LAB_SCHEMA_SELFTEST");
    bool on = e && strcmp(e, "1") == 0;
    CHECK((fl_setting_info(FL_SET_SCHEMA_SELFTEST) != NULL) == on, "the self-test row follows FP8LAB_SCHEMA_SELFTEST");
    CHECK((fl_setting_find("schema_selftest") >= 0) == on, "and so does finding it");
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *r = fl_setting_info((fl_setting_id)k);
        if (!r) continue;
        CHECK(r->help && r->help[0], "%s has help", r->name);
        CHECK((r->env != NULL) == (r->flag != NULL) && (r->env != NULL) == (r->file != FL_FILE_NONE),
              "%s: a variable, a flag and a config key go together", r->name);
    }
}

TEST(settings_suggest_edit_distance_or_prefix) {
    const char *c[] = {"margin", "interval", "amax_history_len"};
    CHECK(fl_suggest("marign", c, 3) == c[0], "transposition");
    CHECK(fl_suggest("amax_history", c, 3) == c[2], "prefix");
    CHECK(fl_suggest("zzz", c, 3) == NULL, "nothing close");
    CHECK(fl_suggest("", c, 3) == NULL, "empty");
    CHECK(fl_edit_distance("abc", "acb") == 1, "OSA counts a transposition once");
}

TEST(settings_recipe_defaults_are_the_tables) {
    fl_recipe r;
    fl_recipe_defaults(&r, FL_BACKEND_TE);
    CHECK(r.amax_history_len == fl_setting_info(FL_SET_AMAX_HISTORY_LEN)->def, "history");
    CHECK(r.interval == 1 && r.margin == 0 && r.fp8_format == FL_RECIPE_HYBRID, "te defaults");
    fl_settings s;
    fl_settings_init(&s);
    fl_settings_put(&s, FL_SET_BACKEND, FL_BACKEND_AO);
    fl_settings_put(&s, FL_SET_AO_CONFIG, FL_AO_ROWWISE);
    fl_settings_put(&s, FL_SET_OVERRIDE_LINEAR_PRECISION, FL_OVERRIDE_DGRAD);
    fl_recipe_from_settings(&r, &s);
    CHECK(r.backend == FL_BACKEND_AO && r.ao_config == FL_AO_ROWWISE, "ao rowwise");
    CHECK(!r.override_linear_precision[0] && r.override_linear_precision[1] && !r.override_linear_precision[2], "mask");
}
