/* test_checkpoint.c — safetensors: a round trip of every dtype through a file, byte-exact against
 * the bytes written, the header checks of the reader on hand-built images, and the atomic write. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checkpoint.h"
#include "runner.h"

static char *tmp_path(const char *name) {
    static char buf[256];
    const char *d = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/fl_test_ckpt_%ld_%s", d ? d : "/tmp", (long)getpid(), name);
    return buf;
}

TEST(checkpoint_roundtrip_every_dtype) {
    uint8_t data[FL_ST_DTYPE_COUNT][24];
    int64_t shapes[FL_ST_DTYPE_COUNT][2];
    fl_st_item items[FL_ST_DTYPE_COUNT];
    char names[FL_ST_DTYPE_COUNT][16];
    for (int d = 0; d < FL_ST_DTYPE_COUNT; d++) {
        size_t es = fl_st_dtype_size((fl_st_dtype)d);
        shapes[d][0] = 2; shapes[d][1] = (int64_t)(12 / es);   /* 24 bytes, or fewer for wide dtypes */
        for (int i = 0; i < 24; i++) data[d][i] = (uint8_t)(d * 31 + i * 7);
        snprintf(names[d], sizeof names[d], "t_%s", fl_st_dtype_name((fl_st_dtype)d));
        items[d] = (fl_st_item){ names[d], (fl_st_dtype)d, 2, shapes[d], data[d] };
    }
    const char *meta[] = { "format", "pt", "note", "h\xC3\xA9llo \"quoted\"" };
    const char *path = tmp_path("all.safetensors");
    REQUIRE_OK(fl_st_save(path, items, FL_ST_DTYPE_COUNT, meta, 2));
    fl_st_file *f;
    REQUIRE_OK(fl_st_open(&f, path));
    CHECK(f->n == FL_ST_DTYPE_COUNT, "%d tensors", f->n);
    CHECK(f->data_start % 8 == 0, "data starts at %llu", (unsigned long long)f->data_start);
    CHECK(f->n_meta == 2 && strcmp(fl_st_meta(f, "note"), meta[3]) == 0, "metadata");
    for (int d = 0; d < FL_ST_DTYPE_COUNT; d++) {
        int i = fl_st_find(f, names[d]);
        REQUIRE(i >= 0, "%s missing", names[d]);
        const fl_st_entry *e = &f->entries[i];
        CHECK(e->dtype == (fl_st_dtype)d && e->ndim == 2 && e->shape[1] == shapes[d][1], "%s header", names[d]);
        uint8_t back[24] = { 0 };
        size_t n = (size_t)(e->end - e->begin);
        CHECK_OK(fl_st_read(f, i, back));
        CHECK(n == (size_t)(2 * shapes[d][1]) * fl_st_dtype_size((fl_st_dtype)d) && memcmp(back, data[d], n) == 0,
              "%s bytes", names[d]);
    }
    fl_st_close(f);
    unlink(path);
}

TEST(checkpoint_empty_and_scalar) {
    int64_t zero = 0;
    float v = 3.5f;
    fl_st_item items[] = { { "empty", FL_ST_F32, 1, &zero, NULL }, { "scalar", FL_ST_F32, 0, NULL, &v } };
    const char *path = tmp_path("small.safetensors");
    REQUIRE_OK(fl_st_save(path, items, 2, NULL, 0));
    fl_st_file *f;
    REQUIRE_OK(fl_st_open(&f, path));
    int s = fl_st_find(f, "scalar");
    REQUIRE(s >= 0 && f->entries[s].ndim == 0 && f->entries[s].numel == 1, "scalar entry");
    float back = 0;
    CHECK_OK(fl_st_read(f, s, &back));
    CHECK(back == 3.5f, "%g", back);
    CHECK(f->entries[fl_st_find(f, "empty")].numel == 0, "empty numel");
    fl_st_close(f);
    unlink(path);
}

TEST(checkpoint_writer_refuses_duplicates) {
    float v = 1;
    fl_st_item items[] = { { "a", FL_ST_F32, 0, NULL, &v }, { "a", FL_ST_F32, 0, NULL, &v } };
    const char *path = tmp_path("dup.safetensors");
    CHECK(fl_st_save(path, items, 2, NULL, 0) == FL_EINVAL, "duplicate accepted");
    CHECK(strstr(fl_last_error(), "given twice") != NULL, "%s", fl_last_error());
    CHECK(access(path, F_OK) != 0, "a failed save left a file");
}

/* An image: 8-byte length then the header then `data` bytes of zeros. */
static size_t image(uint8_t *buf, const char *hdr, size_t data, uint64_t claimed) {
    size_t h = strlen(hdr);
    uint64_t hl = claimed ? claimed : h;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + 8, hdr, h);
    memset(buf + 8 + h, 0, data);
    return 8 + h + data;
}

static void expect_bad(int *fl__failed, const char *hdr, size_t data, uint64_t claimed, const char *msg) {
    uint8_t buf[1024];
    size_t n = image(buf, hdr, data, claimed);
    fl_st_file *f = NULL;
    fl_status st = fl_st_parse(&f, buf, n, "x.safetensors");
    CHECK(st != FL_OK, "accepted: %s", hdr);
    CHECK(strstr(fl_last_error(), msg) != NULL, "for %s: wanted \"%s\", got \"%s\"", hdr, msg, fl_last_error());
    fl_st_close(f);
}

TEST(checkpoint_reader_rejects_bad_headers) {
    expect_bad(fl__failed, "[]", 0, 0, "not a JSON object");
    expect_bad(fl__failed, "{\"a\":", 0, 0, "not valid JSON");
    expect_bad(fl__failed, "{}", 0, 200, "runs past the end");
    expect_bad(fl__failed, "{}", 0, 200000000, "exceeds the limit");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0, "beyond the end");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0, "need 8");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"X9\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, "unknown or unsupported dtype");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, "non-negative integer");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, 0, "overflows");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               4, 0, "overlap");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, "gap");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, 0, "cover 4 bytes");
    expect_bad(fl__failed, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, 0, "appears twice");
    expect_bad(fl__failed, "{\"__metadata__\":{\"k\":1}}", 0, 0, "values must be strings");
}

TEST(checkpoint_open_truncated_and_missing) {
    fl_st_file *f = NULL;
    CHECK(fl_st_open(&f, tmp_path("does-not-exist")) == FL_EIO, "missing file");
    CHECK(strstr(fl_last_error(), "cannot open") != NULL, "%s", fl_last_error());
    const char *path = tmp_path("short.safetensors");
    REQUIRE_OK(fl_write_atomic(path, "\x10\0\0", 3));
    CHECK(fl_st_open(&f, path) == FL_EINVAL && strstr(fl_last_error(), "too short"), "%s", fl_last_error());
    unlink(path);
}
