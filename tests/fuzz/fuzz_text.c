/* fuzz_text.c — libFuzzer target for the text dataset reader: the bytes are written to a file, read back
 * through the regular-file reader (core/fileio.c, with a size cap), byte-encoded (core/data.c) and cut
 * into language-model windows at starts and a block size taken from the input, as TextDataset does.
 * Any bytes must give FL_OK or an error message, never a crash, a leak or an over-read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data.h"
#include "fileio.h"
#include "tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_text_%ld.txt", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    char *buf = NULL;
    size_t len = 0;
    fl_status st = fl_read_regular(path, "text file", 4096, &buf, &len);
    if (st != FL_OK) {
        if (fl_last_error()[0] == 0 || size <= 4096) __builtin_trap();   /* only the cap may refuse it */
        return 0;
    }
    if (len != size || memcmp(buf, data, size) != 0) __builtin_trap();   /* read back what was written */
    fl_tensor *tok = NULL;
    char vocab[256];
    int nv = 0;
    if (fl_data_encode_bytes(&tok, (const unsigned char *)buf, len, vocab, &nv) == FL_OK) {
        /* every id decodes back to its byte */
        const float *ids = fl_tensor_data(tok);
        for (size_t i = 0; i < len; i++) {
            int id = (int)ids[i];
            if (id < 0 || id >= nv || (unsigned char)vocab[id] != (unsigned char)buf[i]) __builtin_trap();
        }
        /* windows: block and starts from the first bytes, including out-of-range and overflowing ones */
        int64_t block = size >= 1 ? (int64_t)(int8_t)data[0] : 1;
        if (size >= 9) memcpy(&block, data + 1, 8);
        int64_t start[4] = {0, 1, INT64_MAX, -1};
        if (size >= 17) memcpy(&start[0], data + 9, 8);
        fl_tensor *x = NULL, *y = NULL;
        for (int n = 0; n <= 4; n++) {
            if (fl_data_windows(&x, &y, tok, start, n, block) != FL_OK && fl_last_error()[0] == 0) __builtin_trap();
            fl_tensor_release(x);   /* (a failure may leave either set, as the binding expects) */
            fl_tensor_release(y);
            x = y = NULL;
        }
        fl_tensor_release(tok);
    } else if (fl_last_error()[0] == 0) {
        __builtin_trap();
    }
    free(buf);
    return 0;
}
