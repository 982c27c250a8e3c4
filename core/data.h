/* data.h — dataset input for training: IDX files (the MNIST/Fashion-MNIST format, gzipped or plain)
 * read into fp32 tensors, and the batch helpers the Lua DataLoader uses (row gather, text windows). */
#ifndef FL_DATA_H
#define FL_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor.h"

#define FL_IDX_MAGIC_IMAGES 0x00000803u   /* unsigned byte, 3 dims: N, rows, cols */
#define FL_IDX_MAGIC_LABELS 0x00000801u   /* unsigned byte, 1 dim: N */

/* Images [N, rows*cols] fp32: pixel/255, then (x - mean)/std when std > 0 (std <= 0: no normalisation).
 * rows/cols (may be NULL) receive the image size. Errors (FL_EIO): "<path>: No such file or directory",
 * "<path>: not an IDX file: bad magic 0x...", "<path>: truncated: expected N bytes of pixels, got M",
 * "<path>: corrupt ...: N bytes after the pixels" and zlib's own complaints about a broken stream. */
fl_status fl_data_load_idx_images(fl_tensor **out, const char *path, double mean, double std,
                                  int64_t *rows, int64_t *cols);
/* Labels [N] fp32 holding the byte values (0..9 for Fashion-MNIST). Same errors ("... bytes of labels"). */
fl_status fl_data_load_idx_labels(fl_tensor **out, const char *path);

/* Batch of rows: out[b, ...] = src[idx[b], ...] for b < n (src any dtype/layout with ndim >= 1, out
 * contiguous, same dtype). Indices are 0-based; an out-of-range one is FL_EINVAL naming it. */
fl_status fl_data_gather(fl_tensor **out, const fl_tensor *src, const int64_t *idx, int64_t n);

/* Language-model windows from a 1-D token tensor: x[b, t] = tokens[start[b] + t],
 * y[b, t] = tokens[start[b] + t + 1], each [n, block] fp32. Needs start[b] + block < numel. */
fl_status fl_data_windows(fl_tensor **x, fl_tensor **y, const fl_tensor *tokens, const int64_t *start,
                          int64_t n, int64_t block);

/* Byte-level text encoding (the text dataset): tokens [n] fp32 holding each byte's id, the position of
 * the byte in vocab (the distinct bytes of s, sorted; *vocab_len of them, vocab has room for 256). */
fl_status fl_data_encode_bytes(fl_tensor **tokens, const unsigned char *s, size_t n, char vocab[256], int *vocab_len);

/* Mixed-precision loss-scaler helper (torch's _amp_foreach_non_finite_check_and_unscale_): multiplies
 * an fp32 tensor in place by `factor` and sets *found_nonfinite when any value (before scaling) is
 * inf or NaN. Leaves *found_nonfinite alone otherwise, so it can be OR-ed over many tensors. */
fl_status fl_data_unscale_(fl_tensor *t, float factor, bool *found_nonfinite);
/* The same for n gradients: all checked before any changes; on a device their inf/NaN checks take one
 * Σx² call (one wait), not one per gradient. A failure while scaling (no memory for a strided device
 * gradient's copy) leaves the gradients before it scaled. */
fl_status fl_data_unscale_many(fl_tensor *const *ts, int n, float factor, bool *found_nonfinite);

#endif
