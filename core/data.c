/* data.c — IDX reader (through zlib, which reads gzipped and plain files alike), batch gather,
 * language-model windows and the loss-scaler's unscale + inf/NaN check. */
#include "data.h"
#include "fileio.h"
#include <unistd.h>
#include "optim.h"
#include "cpu/par.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- IDX ---------------------------------------------------------------------------------- */

/* Read up to n bytes; returns the count read (short only at end of stream or on a zlib error,
 * which *zerr then describes). gzread takes an unsigned count, so large payloads go in chunks. */
static int64_t gz_read_all(gzFile f, unsigned char *dst, int64_t n, const char **zerr) {
    int64_t got = 0;
    *zerr = NULL;
    while (got < n) {
        int64_t want = n - got;
        if (want > (1 << 30)) want = 1 << 30;
        int r = gzread(f, dst + got, (unsigned)want);
        if (r < 0) {
            int code;
            *zerr = gzerror(f, &code);
            break;
        }
        if (r == 0) break;
        got += r;
    }
    if (!*zerr) {
        int code;
        const char *m = gzerror(f, &code);
        /* A gzip stream cut short reads as end-of-data plus Z_BUF_ERROR: report zlib's words. */
        if (code != Z_OK && code != Z_STREAM_END) *zerr = m;
    }
    return got;
}

#define FL_IDX_MAX_FILE_BYTES (INT64_C(1) << 31)   /* Fashion-MNIST's largest file is 26 MB */

/* Opens path, checks the magic, reads `expect_ndims` big-endian dims and the whole ubyte payload
 * (exactly prod(dims) bytes, nothing after). *payload is malloc'ed; `what` names it in messages. */
static fl_status idx_read(const char *path, uint32_t magic, int expect_ndims, int64_t *dims,
                          unsigned char **payload, int64_t *nbytes, const char *what) {
    *payload = NULL;
    if (!path || !*path) return FL_ERR(FL_EINVAL, "IDX path is empty");
    /* a regular file only (a named pipe would block for ever; core/fileio.c) */
    int fd;
    FL_TRY(fl_open_regular(path, "IDX file", FL_IDX_MAX_FILE_BYTES, &fd, NULL));
    gzFile f = gzdopen(fd, "rb");
    if (!f) { close(fd); return FL_ERR(FL_EIO, "%s: %s", path, errno ? strerror(errno) : "cannot open (zlib)"); }

    fl_status st = FL_OK;
    const char *zerr = NULL;
    unsigned char hdr[4 + 4 * 8];
    int hlen = 4 + 4 * expect_ndims;
    int64_t got = gz_read_all(f, hdr, hlen, &zerr);
    if (got < 4) {
        st = FL_ERR(FL_EIO, "%s: not an IDX file: %lld bytes, shorter than the 4-byte header%s%s%s", path,
                    (long long)got, zerr ? " (" : "", zerr ? zerr : "", zerr ? ")" : "");
        goto done;
    }
    uint32_t m = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (m != magic) {
        st = FL_ERR(FL_EIO, "%s: not an IDX file: bad magic 0x%08x (expected 0x%08x for %s)", path, m, magic, what);
        goto done;
    }
    if (got < hlen) {
        st = FL_ERR(FL_EIO, "%s: truncated: expected %d header bytes, got %lld", path, hlen, (long long)got);
        goto done;
    }
    int64_t total = 1;
    for (int d = 0; d < expect_ndims; d++) {
        const unsigned char *p = hdr + 4 + 4 * d;
        dims[d] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        /* 2^31 elements is far beyond any IDX dataset: a larger product means a corrupt header. */
        if (dims[d] == 0 || total > (INT64_C(1) << 31) / dims[d]) {
            st = FL_ERR(FL_EIO, "%s: corrupt IDX header: dimension %d is %lld", path, d, (long long)dims[d]);
            goto done;
        }
        total *= dims[d];
    }
    /* The buffer grows with the bytes that really arrive (64 MiB first, then doubling), so a header that
     * announces 2^31 elements in a file of a few bytes costs a few bytes, not a 2 GiB allocation (found by
     * fuzz_idx: a 10 s timeout under ASan). */
    int64_t cap = total < (INT64_C(1) << 26) ? total : (INT64_C(1) << 26);
    *payload = malloc((size_t)cap);
    if (!*payload) { st = FL_ERR(FL_ENOMEM, "%s: cannot allocate %lld bytes", path, (long long)cap); goto done; }
    got = 0;
    for (;;) {
        int64_t want = cap - got, n = gz_read_all(f, *payload + got, want, &zerr);
        got += n > 0 ? n : 0;
        if (n < want || got == total) break;
        int64_t ncap = cap > total / 2 ? total : cap * 2;
        unsigned char *grown = realloc(*payload, (size_t)ncap);
        if (!grown) { st = FL_ERR(FL_ENOMEM, "%s: cannot allocate %lld bytes", path, (long long)ncap); goto done; }
        *payload = grown;
        cap = ncap;
    }
    if (got < total) {
        if (zerr)
            st = FL_ERR(FL_EIO, "%s: truncated: expected %lld bytes of %s, got %lld (%s)", path, (long long)total,
                        what, (long long)got, zerr);
        else
            st = FL_ERR(FL_EIO, "%s: truncated: expected %lld bytes of %s, got %lld", path, (long long)total,
                        what, (long long)got);
        goto done;
    }
    unsigned char extra[256];
    int64_t more = gz_read_all(f, extra, sizeof extra, &zerr);
    if (more > 0) {
        st = FL_ERR(FL_EIO, "%s: corrupt IDX file: %s%lld bytes after the %lld bytes of %s that the header announces",
                    path, more == (int64_t)sizeof extra ? "at least " : "", (long long)more, (long long)total, what);
        goto done;
    }
    if (zerr) { st = FL_ERR(FL_EIO, "%s: corrupt gzip stream (%s)", path, zerr); goto done; }
    *nbytes = total;
done:
    gzclose(f);
    if (st != FL_OK) { free(*payload); *payload = NULL; }
    return st;
}

fl_status fl_data_load_idx_images(fl_tensor **out, const char *path, double mean, double std,
                                  int64_t *rows, int64_t *cols) {
    *out = NULL;
    if (!isfinite(mean) || !isfinite(std))
        return FL_ERR(FL_EINVAL, "normalisation mean/std must be finite, got %g / %g", mean, std);
    int64_t dims[3], n;
    unsigned char *px;
    FL_TRY(idx_read(path, FL_IDX_MAGIC_IMAGES, 3, dims, &px, &n, "pixels"));
    int64_t shape[2] = { dims[0], dims[1] * dims[2] };
    fl_status st = fl_tensor_empty(out, FL_F32, 2, shape, FL_DEV_CPU);
    if (st != FL_OK) { free(px); return st; }
    /* One fused affine map per pixel: (p/255 - mean)/std = p*a + b. */
    double a = 1.0 / 255.0, b = 0.0;
    if (std > 0) { a = 1.0 / (255.0 * std); b = -mean / std; }
    float *dst = fl_tensor_data(*out);
    FL_PAR_FOR(1, schedule(static),
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(px[i] * a + b););
    free(px);
    if (rows) *rows = dims[1];
    if (cols) *cols = dims[2];
    return FL_OK;
}

fl_status fl_data_load_idx_labels(fl_tensor **out, const char *path) {
    *out = NULL;
    int64_t dims[1], n;
    unsigned char *lb;
    FL_TRY(idx_read(path, FL_IDX_MAGIC_LABELS, 1, dims, &lb, &n, "labels"));
    fl_status st = fl_tensor_empty(out, FL_F32, 1, dims, FL_DEV_CPU);
    if (st != FL_OK) { free(lb); return st; }
    float *dst = fl_tensor_data(*out);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)lb[i];
    free(lb);
    return FL_OK;
}

/* ---- batches ------------------------------------------------------------------------------ */

fl_status fl_data_gather(fl_tensor **out, const fl_tensor *src, const int64_t *idx, int64_t n) {
    *out = NULL;
    if (!src || src->ndim < 1) return FL_ERR(FL_EINVAL, "gather needs a tensor with at least 1 dim");
    if (src->device != FL_DEV_CPU) return FL_ERR(FL_EUNSUPPORTED, "gather: only CPU tensors are supported");
    if (fl_format(src->dtype)->is_fp8)
        return FL_ERR(FL_EUNSUPPORTED, "gather: FP8 tensors carry scales; dequantize first");
    if (n < 0) return FL_ERR(FL_EINVAL, "gather: batch size must be >= 0, got %lld", (long long)n);
    for (int64_t b = 0; b < n; b++)
        if (idx[b] < 0 || idx[b] >= src->shape[0])
            return FL_ERR(FL_EINVAL, "gather: index %lld (0-based, position %lld) out of range for %lld rows",
                          (long long)idx[b], (long long)b, (long long)src->shape[0]);
    fl_tensor *c = NULL;
    FL_TRY(fl_tensor_contiguous(&c, src));
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, src->shape, sizeof(int64_t) * (size_t)src->ndim);
    shape[0] = n;
    fl_status st = fl_tensor_empty(out, src->dtype, src->ndim, shape, FL_DEV_CPU);
    if (st != FL_OK) { fl_tensor_release(c); return st; }
    size_t row = fl_format(src->dtype)->size;
    for (int d = 1; d < src->ndim; d++) row *= (size_t)src->shape[d];
    const char *s = fl_tensor_data(c);
    char *d = fl_tensor_data(*out);
    FL_PAR_FOR(n * (int64_t)row > (1 << 20), schedule(static),
    for (int64_t b = 0; b < n; b++) memcpy(d + (size_t)b * row, s + (size_t)idx[b] * row, row););
    fl_tensor_release(c);
    return FL_OK;
}

fl_status fl_data_windows(fl_tensor **x, fl_tensor **y, const fl_tensor *tokens, const int64_t *start,
                          int64_t n, int64_t block) {
    *x = *y = NULL;
    if (!tokens || tokens->ndim != 1) return FL_ERR(FL_EINVAL, "windows: tokens must be a 1-D tensor");
    if (block < 1) return FL_ERR(FL_EINVAL, "windows: block size must be >= 1, got %lld", (long long)block);
    if (n < 0) return FL_ERR(FL_EINVAL, "windows: batch size must be >= 0, got %lld", (long long)n);
    int64_t len = tokens->shape[0];
    for (int64_t b = 0; b < n; b++)
        if (start[b] < 0 || start[b] >= len || block >= len - start[b])   /* start + block may overflow */
            return FL_ERR(FL_EINVAL, "windows: start %lld (0-based) + block %lld + 1 exceeds %lld tokens",
                          (long long)start[b], (long long)block, (long long)len);
    fl_tensor *c = NULL;
    FL_TRY(fl_tensor_to(&c, tokens, FL_F32));   /* contiguous fp32 copy, whatever came in */
    int64_t shape[2] = { n, block };
    fl_status st = fl_tensor_empty(x, FL_F32, 2, shape, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_empty(y, FL_F32, 2, shape, FL_DEV_CPU);
    if (st != FL_OK) {
        fl_tensor_release(c); fl_tensor_release(*x); fl_tensor_release(*y);
        *x = *y = NULL;
        return st;
    }
    const float *s = fl_tensor_data(c);
    float *dx = fl_tensor_data(*x), *dy = fl_tensor_data(*y);
    for (int64_t b = 0; b < n; b++) {
        memcpy(dx + b * block, s + start[b], sizeof(float) * (size_t)block);
        memcpy(dy + b * block, s + start[b] + 1, sizeof(float) * (size_t)block);
    }
    fl_tensor_release(c);
    return FL_OK;
}

/* ---- loss scaling ------------------------------------------------------------------------- */

/* One fp32 tensor in host memory: t *= factor in place, *bad set when a value (before scaling) is inf or NaN. */
static void unscale_host(fl_tensor *t, float factor, bool *found_nonfinite) {
    int64_t n = fl_tensor_numel(t);
    int bad = 0;
    if (fl_tensor_is_contiguous(t)) {
        float *p = fl_tensor_data(t);
        FL_PAR_FOR(n > (1 << 16), schedule(static) reduction(|:bad),
        for (int64_t i = 0; i < n; i++) {
            bad |= !isfinite(p[i]);
            p[i] *= factor;
        });
    } else {
        /* Strided walk (views of gradients are rare; correctness over speed). */
        int64_t idx[FL_MAX_DIMS] = {0};
        float *base = fl_tensor_data(t);
        for (int64_t k = 0; k < n; k++) {
            int64_t off = 0;
            for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
            bad |= !isfinite(base[off]);
            base[off] *= factor;
            for (int d = t->ndim - 1; d >= 0; d--) {
                if (++idx[d] < t->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    if (bad) *found_nonfinite = true;
}

/* A gradient whose check and scaling run on its device (an empty one needs neither). */
static bool on_device_nonempty(const fl_tensor *t) { return t->device != FL_DEV_CPU && fl_tensor_numel(t) > 0; }

fl_status fl_data_unscale_many(fl_tensor *const *ts, int n, float factor, bool *found_nonfinite) {
    if (n < 0 || (n > 0 && !ts) || !found_nonfinite)
        return FL_ERR(FL_EINVAL, "unscale: expected n >= 0 tensors and a result flag, got n = %d", n);
    /* Every argument is checked before any gradient changes: an error leaves all of them as they were. */
    int on_device = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) return FL_ERR(FL_EINVAL, "unscale: tensor %d of %d is missing", i + 1, n);
        if (ts[i]->dtype != FL_F32)
            return FL_ERR(FL_EUNSUPPORTED, "unscale: gradients must be fp32 tensors, got %s (tensor %d of %d)",
                          fl_format(ts[i]->dtype)->name, i + 1, n);
        if (on_device_nonempty(ts[i])) on_device++;
    }
    if (on_device) {
        /* On a device: Σx² in double is finite exactly when every element is (|x| <= FLT_MAX squares to at most
         * ~1.2e77), taken for every gradient in one call (one wait for the device, not one per gradient), then
         * one in-place scaling pass each. */
        const fl_tensor **dev = malloc((size_t)on_device * sizeof *dev);
        double *ss = malloc((size_t)on_device * sizeof *ss);
        if (!dev || !ss) {
            free(dev); free(ss);
            return FL_ERR(FL_ENOMEM, "unscale: out of memory for %d tensors", on_device);
        }
        for (int i = 0, k = 0; i < n; i++)
            if (on_device_nonempty(ts[i])) dev[k++] = ts[i];
        fl_status st = fl_sumsq_many(dev, on_device, ss);
        for (int k = 0; st == FL_OK && k < on_device; k++)
            if (!isfinite(ss[k])) *found_nonfinite = true;
        free(dev); free(ss);
        FL_TRY(st);
    }
    for (int i = 0; i < n; i++) {
        if (fl_tensor_numel(ts[i]) == 0) continue;
        if (ts[i]->device != FL_DEV_CPU) FL_TRY(fl_scale_(ts[i], factor));
        else { unscale_host(ts[i], factor, found_nonfinite); fl_tensor_bump(ts[i]); }   /* fl_scale_ bumps its own */
    }
    return FL_OK;
}

fl_status fl_data_unscale_(fl_tensor *t, float factor, bool *found_nonfinite) {
    if (!t) return FL_ERR(FL_EINVAL, "unscale: tensor is NULL");
    return fl_data_unscale_many(&t, 1, factor, found_nonfinite);
}

fl_status fl_data_encode_bytes(fl_tensor **tokens, const unsigned char *s, size_t n, char vocab[256], int *vocab_len) {
    *tokens = NULL;
    *vocab_len = 0;
    if (n > (size_t)FL_MAX_NUMEL) return FL_ERR(FL_EINVAL, "text: too large: %zu bytes (limit %lld)", n, (long long)FL_MAX_NUMEL);
    int seen[256] = {0}, id[256];
    for (size_t i = 0; i < n; i++) seen[s[i]] = 1;
    int v = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c]) { id[c] = v; vocab[v++] = (char)c; }
    int64_t shape[1] = { (int64_t)n };
    FL_TRY(fl_tensor_empty(tokens, FL_F32, 1, shape, FL_DEV_CPU));
    float *dst = fl_tensor_data(*tokens);
    for (size_t i = 0; i < n; i++) dst[i] = (float)id[s[i]];
    *vocab_len = v;
    return FL_OK;
}
