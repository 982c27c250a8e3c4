/* checkpoint.h — safetensors files (docs/checkpoints.md): an atomic writer and a validating reader.
 * Layout: 8-byte little-endian header length N, N bytes of JSON header {name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {string: string}}, then the data area (raw
 * little-endian bytes; offsets are relative to its start). Also the atomic file write every
 * checkpoint file goes through. No Lua here; lua/l_checkpoint.c binds it. */
#ifndef FL_CHECKPOINT_H
#define FL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "tensor.h"
#include "fileio.h"   /* fl_write_atomic, fl_fsync_dir: the atomic writer every file goes through */

/* The safetensors dtypes this build reads and writes. Append-only. */
typedef enum {
    FL_ST_F32 = 0, FL_ST_F16, FL_ST_BF16, FL_ST_F8_E4M3, FL_ST_F8_E5M2,
    FL_ST_I64, FL_ST_I32, FL_ST_U8, FL_ST_BOOL, FL_ST_DTYPE_COUNT
} fl_st_dtype;

const char *fl_st_dtype_name(fl_st_dtype d);   /* "F32", "F8_E4M3", ... */
size_t fl_st_dtype_size(fl_st_dtype d);
/* fp8lab tensor dtype → safetensors dtype (always exists) and back (false for I64/I32/U8/BOOL). */
fl_st_dtype fl_st_from_dtype(fl_dtype d);
bool fl_st_to_dtype(fl_st_dtype d, fl_dtype *out);

/* The largest header the reader accepts (the reference implementation's limit). */
#define FL_ST_MAX_HEADER (100u * 1000u * 1000u)
/* Dimensions per tensor in a file: more than fl_tensor holds, so such files are listed and refused
 * per tensor by the binding with a clear message, not at open. */
#define FL_ST_MAX_DIMS 16

typedef struct {
    char *name;
    fl_st_dtype dtype;
    int ndim;
    int64_t shape[FL_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;     /* byte offsets into the data area */
} fl_st_entry;

typedef struct {
    int fd;                  /* -1 for a file parsed from memory (fl_st_parse) */
    char *path;
    uint64_t file_size;
    uint64_t data_start;     /* 8 + header length */
    int n;                   /* tensors, in header order */
    fl_st_entry *entries;
    int *by_name;            /* entry indices sorted by name (fl_st_find's binary search) */
    int n_meta;
    char **meta_keys, **meta_vals;
} fl_st_file;

/* Open and validate a file (header only; no tensor data is read). On success *out owns the fd. */
fl_status fl_st_open(fl_st_file **out, const char *path);
/* Validate a whole file image held in memory (what fl_st_open checks, without a file): for tests
 * and the fuzzer. The result has fd -1 and cannot read data. */
fl_status fl_st_parse(fl_st_file **out, const uint8_t *buf, size_t len, const char *what);
void fl_st_close(fl_st_file *f);        /* NULL is fine */
int fl_st_find(const fl_st_file *f, const char *name);   /* index or -1 */
const char *fl_st_meta(const fl_st_file *f, const char *key);   /* NULL when absent */
/* Whether s[0..n) is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what the
 * reference implementation requires of a header, so of names and metadata written into one. */
bool fl_st_utf8_valid(const char *s, size_t n);
/* Read entry i's bytes (end - begin of them) into dst with pread. */
fl_status fl_st_read(const fl_st_file *f, int i, void *dst);

/* One tensor to write: host bytes, nbytes = numel(shape) * dtype size. */
typedef struct {
    const char *name;
    fl_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} fl_st_item;

/* Write a safetensors file atomically (fl_write_atomic_fn, fileio.h). Names must be unique and not
 * "__metadata__"; meta is n_meta key/value pairs (meta[2k], meta[2k+1]) or NULL. Tensors are laid
 * out in the order given; the header is padded with spaces to a multiple of 8 bytes. */
fl_status fl_st_save(const char *path, const fl_st_item *items, int n, const char *const *meta, int n_meta);


/* An exact contiguous copy of t on the CPU or its device (FP8: bytes, scale_inv and scale axis too):
 * what optimizer and model state dicts hold. */
fl_status fl_tensor_clone_exact(fl_tensor **out, const fl_tensor *t);

#endif
