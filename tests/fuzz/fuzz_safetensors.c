/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (`make fuzz`): any bytes must
 * give a validated file or an error message, never a crash, a leak, a hang or an allocation sized
 * by the header before it was checked against the input's length. A file that validates must
 * describe tensors lying inside the input. */
#include <stdint.h>
#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_st_file *f = NULL;
    if (fl_st_parse(&f, data, size, "fuzz.safetensors") == FL_OK) {
        for (int i = 0; i < f->n; i++) {
            const fl_st_entry *e = &f->entries[i];
            if (e->end > size - f->data_start || e->end - e->begin != e->numel * fl_st_dtype_size(e->dtype))
                __builtin_trap();
        }
        fl_st_close(f);
    } else if (fl_last_error()[0] == 0) {
        __builtin_trap();   /* a failure always says why */
    }
    return 0;
}
