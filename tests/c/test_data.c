/* test_data.c — IDX reading (plain and gzipped files written here, byte by byte), its errors for
 * missing, corrupt, truncated and oversized files, batch gather, text windows and the loss-scaler's
 * unscale. References are computed in double from the bytes we wrote. */
#include "runner.h"
#include "data.h"
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "/tmp/fl_test_data_%d_%s", (int)getpid(), name);
}

static void be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* Writes bytes to path, gzipped when gz. */
static int write_file(const char *path, const unsigned char *b, size_t n, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return 0;
        int ok = gzwrite(f, b, (unsigned)n) == (int)n;
        return gzclose(f) == Z_OK && ok;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* IDX images: 3 images of 2x3 with pixel value (i*37 + j*11) % 256; `cut` bytes dropped from the end,
 * `extra` bytes appended. Returns the byte count written into buf. */
static size_t make_images(unsigned char *buf, int cut, int extra) {
    be32(buf, 0x00000803u); be32(buf + 4, 3); be32(buf + 8, 2); be32(buf + 12, 3);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++) buf[16 + i * 6 + j] = (unsigned char)((i * 37 + j * 11 + 250) % 256);
    for (int k = 0; k < extra; k++) buf[16 + 18 + k] = 7;
    return (size_t)(16 + 18 - cut + extra);
}

static double pixel(int i, int j) { return (double)((i * 37 + j * 11 + 250) % 256); }

TEST(data_idx_images_plain_and_gz) {
    unsigned char buf[64];
    char path[256];
    for (int gz = 0; gz <= 1; gz++) {
        tmp_path(path, sizeof path, gz ? "img.gz" : "img");
        REQUIRE(write_file(path, buf, make_images(buf, 0, 0), gz), "write %s", path);
        fl_tensor *t = NULL;
        int64_t rows = 0, cols = 0;
        REQUIRE_OK(fl_data_load_idx_images(&t, path, 0, 0, &rows, &cols));
        CHECK(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 6, "shape");
        CHECK(rows == 2 && cols == 3, "rows %lld cols %lld", (long long)rows, (long long)cols);
        CHECK(t->dtype == FL_F32, "dtype");
        const float *p = fl_tensor_data(t);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 6; j++) CHECK_CLOSE(p[i * 6 + j], pixel(i, j) / 255.0, 1e-7, 1e-6);
        fl_tensor_release(t);
        /* Normalised: (x/255 - mean)/std. */
        REQUIRE_OK(fl_data_load_idx_images(&t, path, 0.25, 0.5, NULL, NULL));
        p = fl_tensor_data(t);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 6; j++) CHECK_CLOSE(p[i * 6 + j], (pixel(i, j) / 255.0 - 0.25) / 0.5, 1e-6, 1e-6);
        fl_tensor_release(t);
        unlink(path);
    }
}

TEST(data_idx_labels) {
    unsigned char buf[16];
    be32(buf, 0x00000801u); be32(buf + 4, 5);
    unsigned char lab[5] = { 9, 0, 3, 3, 7 };
    memcpy(buf + 8, lab, 5);
    char path[256];
    tmp_path(path, sizeof path, "lab.gz");
    REQUIRE(write_file(path, buf, 13, 1), "write");
    fl_tensor *t = NULL;
    REQUIRE_OK(fl_data_load_idx_labels(&t, path));
    CHECK(t->ndim == 1 && t->shape[0] == 5, "shape");
    const float *p = fl_tensor_data(t);
    for (int i = 0; i < 5; i++) CHECK(p[i] == (float)lab[i], "label %d: %g", i, p[i]);
    fl_tensor_release(t);
    /* A labels file is not an images file: the magic says so. */
    CHECK(fl_data_load_idx_images(&t, path, 0, 0, NULL, NULL) == FL_EIO, "labels read as images");
    CHECK(strstr(fl_last_error(), "not an IDX file: bad magic 0x00000801"), "%s", fl_last_error());
    CHECK(t == NULL, "out set on failure");
    unlink(path);
}

TEST(data_idx_errors) {
    fl_tensor *t = NULL;
    CHECK(fl_data_load_idx_images(&t, "/nonexistent/dir/x-ubyte.gz", 0, 0, NULL, NULL) == FL_EIO, "missing");
    CHECK(strstr(fl_last_error(), "/nonexistent/dir/x-ubyte.gz: cannot open IDX file: No such file or directory"), "%s", fl_last_error());

    unsigned char buf[64];
    char path[256];
    for (int gz = 0; gz <= 1; gz++) {
        tmp_path(path, sizeof path, gz ? "bad.gz" : "bad");
        /* truncated payload: 5 pixels missing */
        REQUIRE(write_file(path, buf, make_images(buf, 5, 0), gz), "write");
        CHECK(fl_data_load_idx_images(&t, path, 0, 0, NULL, NULL) == FL_EIO, "truncated accepted");
        CHECK(strstr(fl_last_error(), "truncated: expected 18 bytes of pixels, got 13"), "%s", fl_last_error());
        /* trailing garbage */
        REQUIRE(write_file(path, buf, make_images(buf, 0, 3), gz), "write");
        CHECK(fl_data_load_idx_images(&t, path, 0, 0, NULL, NULL) == FL_EIO, "trailing accepted");
        CHECK(strstr(fl_last_error(), "3 bytes after the 18 bytes of pixels"), "%s", fl_last_error());
        /* text file */
        const char *txt = "hello, world\n";
        REQUIRE(write_file(path, (const unsigned char *)txt, strlen(txt), gz), "write");
        CHECK(fl_data_load_idx_labels(&t, path) == FL_EIO, "text accepted");
        CHECK(strstr(fl_last_error(), "not an IDX file: bad magic 0x68656c6c"), "%s", fl_last_error());
        /* empty file */
        REQUIRE(write_file(path, buf, 0, gz), "write");
        CHECK(fl_data_load_idx_labels(&t, path) == FL_EIO, "empty accepted");
        CHECK(strstr(fl_last_error(), "shorter than the 4-byte header"), "%s", fl_last_error());
        /* absurd dims */
        make_images(buf, 0, 0);
        be32(buf + 4, 0x7fffffffu);
        REQUIRE(write_file(path, buf, 34, gz), "write");
        CHECK(fl_data_load_idx_images(&t, path, 0, 0, NULL, NULL) == FL_EIO, "huge dims accepted");
        CHECK(strstr(fl_last_error(), "corrupt IDX header"), "%s", fl_last_error());
        /* a header that announces 2,097,152,000 labels in a file of 8 bytes: refused as truncated without
         * first allocating 2 GiB (fuzz_idx found the allocation: 10 s under ASan) */
        be32(buf, 0x00000801u); be32(buf + 4, 0x7d000000u);
        REQUIRE(write_file(path, buf, 8, gz), "write");
        CHECK(fl_data_load_idx_labels(&t, path) == FL_EIO, "huge count accepted");
        CHECK(strstr(fl_last_error(), "truncated: expected 2097152000 bytes of labels, got 0"), "%s", fl_last_error());
        unlink(path);
    }
    /* A gzip stream cut in half: zlib's complaint is passed on as truncation. */
    tmp_path(path, sizeof path, "cut.gz");
    unsigned char big[16 + 3000];
    be32(big, 0x00000803u); be32(big + 4, 3); be32(big + 8, 20); be32(big + 12, 50);
    srand(7);
    for (int i = 16; i < (int)sizeof big; i++) big[i] = (unsigned char)rand();  /* incompressible */
    REQUIRE(write_file(path, big, sizeof big, 1), "write");
    FILE *f = fopen(path, "rb");
    unsigned char whole[8192];
    size_t n = fread(whole, 1, sizeof whole, f);
    fclose(f);
    REQUIRE(write_file(path, whole, n / 2, 0), "rewrite");
    CHECK(fl_data_load_idx_images(&t, path, 0, 0, NULL, NULL) == FL_EIO, "cut gzip accepted");
    CHECK(strstr(fl_last_error(), "truncated: expected 3000 bytes of pixels"), "%s", fl_last_error());
    unlink(path);
    CHECK(t == NULL, "no tensor on failure");
}

TEST(data_gather_rows) {
    int64_t shape[3] = { 5, 2, 3 };
    float v[30];
    for (int i = 0; i < 30; i++) v[i] = (float)(i * 0.5 - 3);
    fl_tensor *src = NULL, *out = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&src, v, 3, shape, FL_F32));
    int64_t idx[4] = { 4, 0, 4, 2 };
    REQUIRE_OK(fl_data_gather(&out, src, idx, 4));
    CHECK(out->ndim == 3 && out->shape[0] == 4 && out->shape[1] == 2 && out->shape[2] == 3, "shape");
    const float *p = fl_tensor_data(out);
    for (int b = 0; b < 4; b++)
        for (int j = 0; j < 6; j++) CHECK(p[b * 6 + j] == (float)((idx[b] * 6 + j) * 0.5 - 3), "b %d j %d", b, j);
    fl_tensor_release(out);
    /* Non-contiguous source: rows of the transposed [3,5]ᵀ... use a [2,5] transposed to [5,2]. */
    int64_t s2[2] = { 2, 5 };
    fl_tensor *m = NULL, *mt = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&m, v, 2, s2, FL_F32));
    REQUIRE_OK(fl_tensor_transpose(&mt, m, 0, 1));
    int64_t idx2[2] = { 3, 1 };
    REQUIRE_OK(fl_data_gather(&out, mt, idx2, 2));
    p = fl_tensor_data(out);
    /* mt[r, c] = v[c*5 + r] */
    CHECK(p[0] == v[3] && p[1] == v[8] && p[2] == v[1] && p[3] == v[6], "transposed gather %g %g %g %g", p[0], p[1], p[2], p[3]);
    fl_tensor_release(out);
    int64_t bad[1] = { 5 };
    CHECK(fl_data_gather(&out, src, bad, 1) == FL_EINVAL, "out of range accepted");
    CHECK(strstr(fl_last_error(), "index 5 (0-based, position 0) out of range for 5 rows"), "%s", fl_last_error());
    fl_tensor_release(src); fl_tensor_release(m); fl_tensor_release(mt);
}

TEST(data_text_windows) {
    float v[10];
    for (int i = 0; i < 10; i++) v[i] = (float)(i * 3 % 7);
    int64_t s[1] = { 10 };
    fl_tensor *tok = NULL, *x = NULL, *y = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&tok, v, 1, s, FL_F32));
    int64_t start[2] = { 0, 5 };
    REQUIRE_OK(fl_data_windows(&x, &y, tok, start, 2, 4));
    const float *px = fl_tensor_data(x), *py = fl_tensor_data(y);
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++) {
            CHECK(px[b * 4 + t] == v[start[b] + t], "x");
            CHECK(py[b * 4 + t] == v[start[b] + t + 1], "y");
        }
    fl_tensor_release(x); fl_tensor_release(y);
    int64_t bad[1] = { 6 };   /* 6 + 4 = 10: the target of the last position would be token 10 */
    CHECK(fl_data_windows(&x, &y, tok, bad, 1, 4) == FL_EINVAL, "overrun accepted");
    CHECK(strstr(fl_last_error(), "exceeds 10 tokens"), "%s", fl_last_error());
    fl_tensor_release(tok);
}

TEST(data_unscale) {
    float v[5] = { 1, -2, 4, 0.5f, 8 };
    int64_t s[1] = { 5 };
    fl_tensor *t = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&t, v, 1, s, FL_F32));
    bool bad = false;
    REQUIRE_OK(fl_data_unscale_(t, 0.25f, &bad));
    CHECK(!bad, "finite reported as non-finite");
    const float *p = fl_tensor_data(t);
    for (int i = 0; i < 5; i++) CHECK(p[i] == v[i] * 0.25, "value %d: %g", i, p[i]);
    float *w = fl_tensor_data(t);
    w[2] = INFINITY;
    REQUIRE_OK(fl_data_unscale_(t, 0.5f, &bad));
    CHECK(bad, "inf not found");
    bad = false;
    w[2] = NAN;
    REQUIRE_OK(fl_data_unscale_(t, 1.0f, &bad));
    CHECK(bad, "NaN not found");
    fl_tensor_release(t);
    /* strided view: column of a [3,2] matrix */
    float m[6] = { 1, 2, 3, INFINITY, 5, 6 };
    int64_t s2[2] = { 3, 2 };
    fl_tensor *mm = NULL, *col = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&mm, m, 2, s2, FL_F32));
    REQUIRE_OK(fl_tensor_select(&col, mm, 1, 0));     /* 1, 3, 5: finite */
    bad = false;
    REQUIRE_OK(fl_data_unscale_(col, 2.0f, &bad));
    CHECK(!bad, "column 0 is finite");
    const float *pm = fl_tensor_data(mm);
    CHECK(pm[0] == 2 && pm[1] == 2 && pm[2] == 6 && pm[4] == 10 && pm[5] == 6, "strided scaling");
    fl_tensor_release(col);
    REQUIRE_OK(fl_tensor_select(&col, mm, 1, 1));
    REQUIRE_OK(fl_data_unscale_(col, 1.0f, &bad));
    CHECK(bad, "inf in column 1 not found");
    fl_tensor_release(col); fl_tensor_release(mm);
}

/* A list: every tensor scaled (contiguous, strided view, empty), the flag set by the one with NaN whatever its
 * place, and an argument error (a bf16 or missing tensor anywhere) changes none of them. */
TEST(data_unscale_many) {
    float a[3] = { 1, 2, 4 }, m[6] = { 1, 2, 3, 4, 5, 6 }, h[2] = { 8, 16 };
    int64_t s3[1] = { 3 }, s2[2] = { 3, 2 }, s0[1] = { 0 }, sh[1] = { 2 };
    fl_tensor *ta = NULL, *mm = NULL, *col = NULL, *empty = NULL, *half = NULL, *tb = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&ta, a, 1, s3, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&mm, m, 2, s2, FL_F32));
    REQUIRE_OK(fl_tensor_select(&col, mm, 1, 1));     /* 2, 4, 6 */
    REQUIRE_OK(fl_tensor_empty(&empty, FL_F32, 1, s0, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_from_f32(&half, h, 1, sh, FL_BF16));
    REQUIRE_OK(fl_tensor_from_f32(&tb, h, 1, sh, FL_F32));
    bool bad = false;
    fl_tensor *bf_list[4] = { ta, col, empty, half };
    CHECK(fl_data_unscale_many(bf_list, 4, 0.5f, &bad) == FL_EUNSUPPORTED, "bf16 gradient accepted");
    fl_tensor *null_list[3] = { ta, NULL, col };
    CHECK(fl_data_unscale_many(null_list, 3, 0.5f, &bad) == FL_EINVAL, "missing gradient accepted");
    const float *pa = fl_tensor_data(ta), *pm = fl_tensor_data(mm), *pb = fl_tensor_data(tb);
    CHECK(!bad && pa[0] == 1 && pa[2] == 4 && pm[1] == 2 && pm[5] == 6, "a refused list changed a gradient");
    fl_tensor *list[4] = { ta, col, empty, tb };
    REQUIRE_OK(fl_data_unscale_many(list, 4, 0.5f, &bad));
    CHECK(!bad, "finite list reported as non-finite");
    CHECK(pa[0] == 0.5f && pa[1] == 1 && pa[2] == 2, "first tensor: %g %g %g", pa[0], pa[1], pa[2]);
    CHECK(pm[0] == 1 && pm[1] == 1 && pm[2] == 3 && pm[3] == 2 && pm[5] == 3, "strided view scaled, the rest kept");
    CHECK(pb[0] == 4 && pb[1] == 8, "last tensor: %g %g", pb[0], pb[1]);
    ((float *)fl_tensor_data(mm))[3] = NAN;          /* in the middle tensor (the view) */
    REQUIRE_OK(fl_data_unscale_many(list, 4, 2.0f, &bad));
    CHECK(bad, "NaN in the second of four not found");
    CHECK(pa[0] == 1 && pb[1] == 16, "the tensors after and before the NaN are still scaled");
    bad = false;
    REQUIRE_OK(fl_data_unscale_many(NULL, 0, 2.0f, &bad));
    CHECK(!bad, "an empty list found something");
    fl_tensor_release(ta); fl_tensor_release(col); fl_tensor_release(mm); fl_tensor_release(empty);
    fl_tensor_release(half); fl_tensor_release(tb);
}
