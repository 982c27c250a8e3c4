/* fuzz_config.c — libFuzzer target for the config.yaml loader (`make fuzz`): any bytes must give
 * FL_OK or an error message, never a crash, a leak or a hang. Also checks that a loaded config
 * survives fl_settings_set_text on its own values, and feeds short inputs to fl_settings_set_text as
 * a launch flag value for every setting. */
#include <stdint.h>
#include <string.h>
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_config c;
    fl_config_init(&c);
    if (fl_config_load_buffer(&c, (const char *)data, size, "fuzz.yaml") == FL_OK) {
        char buf[64];
        for (int k = 0; k < FL_SET_COUNT; k++) {
            if (!fl_settings_has(&c.s, (fl_setting_id)k)) continue;
            int v = fl_settings_get(&c.s, (fl_setting_id)k);
            fl_setting_format((fl_setting_id)k, v, buf, sizeof buf);
            fl_settings again;
            fl_settings_init(&again);
            if (fl_settings_set_text(&again, (fl_setting_id)k, buf, "fuzz") != FL_OK ||
                fl_settings_get(&again, (fl_setting_id)k) != v)
                __builtin_trap();   /* a value that loads must round-trip through its text form */
        }
    } else if (fl_last_error()[0] == 0) {
        __builtin_trap();           /* a failure always says why */
    }
    fl_config_free(&c);

    if (size < 256) {   /* the launch-flag path: the bytes up to the first NUL as a value */
        char text[256];
        memcpy(text, data, size);
        text[size] = 0;
        for (int k = 0; k < FL_SET_COUNT; k++) {
            fl_settings s;
            fl_settings_init(&s);
            if (!fl_setting_info((fl_setting_id)k)) continue;
            fl_clear_error();
            if (fl_settings_set_text(&s, (fl_setting_id)k, text, "--flag") != FL_OK && fl_last_error()[0] == 0)
                __builtin_trap();
        }
    }
    return 0;
}
