/* fuzz_idx.c — libFuzzer target for the Fashion-MNIST IDX reader (core/data.c): the bytes are written to
 * a file, plain and gzip-compressed, and read as images (with and without normalisation) and as labels.
 * Any bytes must give FL_OK or an error message, never a crash, a leak, a hang or an over-read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "data.h"
#include "tensor.h"

static char plain[64], packed[64];

static void check(fl_status st, fl_tensor *t) {
    if (st == FL_OK) {
        if (!t) __builtin_trap();
        /* touch every value: a tensor that claims more than was read would over-read here */
        double sum = 0, v;
        int64_t n = fl_tensor_numel(t), idx[2] = {0, 0};
        if (t->ndim == 2 && n > 0) { idx[0] = t->shape[0] - 1; idx[1] = t->shape[1] - 1; fl_tensor_get(t, idx, &v); sum += v; }
        (void)sum;
        fl_tensor_release(t);
    } else if (fl_last_error()[0] == 0) {
        __builtin_trap();   /* a failure always says why */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!plain[0]) {
        snprintf(plain, sizeof plain, "/tmp/fuzz_idx_%ld-ubyte", (long)getpid());
        snprintf(packed, sizeof packed, "/tmp/fuzz_idx_%ld-ubyte.gz", (long)getpid());
    }
    FILE *f = fopen(plain, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    gzFile g = gzopen(packed, "wb1");
    if (g) { if (size) gzwrite(g, data, (unsigned)size); gzclose(g); }
    for (int which = 0; which < 2; which++) {
        const char *path = which ? packed : plain;
        fl_tensor *t = NULL;
        int64_t rows = 0, cols = 0;
        check(fl_data_load_idx_images(&t, path, 0, 0, &rows, &cols), t);
        t = NULL;
        check(fl_data_load_idx_images(&t, path, 0.5, 0.25, &rows, &cols), t);
        t = NULL;
        check(fl_data_load_idx_labels(&t, path), t);
    }
    return 0;
}
