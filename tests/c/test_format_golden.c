/* test_format_golden.c — fp32 → E4M3/E5M2 against golden vectors made by ml_dtypes
 * (tests/data/golden_fp8.csv, written by scripts/gen_golden.py; run from the repo root). */
#include "runner.h"
#include "format.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TEST(format_golden_ml_dtypes) {
    FILE *f = fopen("tests/data/golden_fp8.csv", "r");
    REQUIRE(f != NULL, "cannot open tests/data/golden_fp8.csv (run from the repo root)");
    char line[256];
    int rows = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned bits, e4, e5;
        if (line[0] == '#' || sscanf(line, "%8x,%2x,%2x", &bits, &e4, &e5) != 3) continue;
        float x;
        memcpy(&x, &bits, 4);
        rows++;
        uint8_t g4 = fl_f32_to_e4m3(x, FL_IEEE), g5 = fl_f32_to_e5m2(x, FL_IEEE);
        /* ml_dtypes has no saturating cast; the rule: where the IEEE cast overflowed (E4M3: NaN
         * code from a non-NaN input; E5M2: ±inf) saturate gives ±max, elsewhere the same code. */
        uint8_t s4 = (e4 & 0x7F) == 0x7F && x == x ? (uint8_t)((e4 & 0x80) | 0x7E) : (uint8_t)e4;
        uint8_t s5 = (e5 & 0x7F) == 0x7C ? (uint8_t)((e5 & 0x80) | 0x7B) : (uint8_t)e5;
        uint8_t h4 = fl_f32_to_e4m3(x, FL_SATURATE), h5 = fl_f32_to_e5m2(x, FL_SATURATE);
        if ((g4 != e4 || g5 != e5 || h4 != s4 || h5 != s5) && bad++ < 10)
            CHECK(0, "input %08x (%a): e4m3 %02x want %02x, e5m2 %02x want %02x, sat %02x/%02x want %02x/%02x",
                  bits, x, g4, e4, g5, e5, h4, h5, s4, s5);
    }
    fclose(f);
    CHECK(rows > 1000, "only %d rows read", rows);
    CHECK(bad == 0, "%d of %d rows differ", bad, rows);
}
