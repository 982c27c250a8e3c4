/* fileio.h — reading files a user names, and writing files atomically. Readers refuse anything but a
 * regular file (a named pipe would block for ever, a device never end) and cap the size; writers put
 * the data in an unnamed temporary file (O_TMPFILE) that gets a name only once complete, then fsync,
 * rename over the target, fsync the directory. A writer killed while writing leaves nothing behind; one
 * killed between naming the finished file and renaming it leaves that name ("<path>.tmp<pid>.<n>"), which
 * the next write to the same path removes. */
#ifndef FL_FILEIO_H
#define FL_FILEIO_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* Open path read-only (without blocking on a FIFO); FL_EIO unless it is a regular file, FL_EINVAL when
 * it is larger than max_bytes (0: no cap). `what` names the file's role in messages ("config file"). */
fl_status fl_open_regular(const char *path, const char *what, int64_t max_bytes, int *fd, int64_t *size);
/* The whole regular file in a malloc'ed buffer (NUL-terminated; *len excludes the NUL). */
fl_status fl_read_regular(const char *path, const char *what, int64_t max_bytes, char **buf, size_t *len);

/* An atomic write in progress: write to fd, then fl_atomic_commit (or fl_atomic_abort). */
typedef struct {
    int fd;
    char path[4096];
    char tmp[4096];   /* "" while the temporary file has no name (O_TMPFILE) */
} fl_atomic_file;
fl_status fl_atomic_begin(fl_atomic_file *af, const char *path);
/* Tests: false makes fl_atomic_begin take the path of file systems without O_TMPFILE (a named, locked file). */
void fl_atomic_use_tmpfile(bool on);
/* fsync, name it, rename over af->path, fsync the directory; closes fd. On failure nothing is left behind. */
fl_status fl_atomic_commit(fl_atomic_file *af);
void fl_atomic_abort(fl_atomic_file *af);
/* All of data to path, atomically. */
fl_status fl_write_atomic(const char *path, const void *data, size_t len);
/* The same with the bytes written by `fill` (called with the open fd; it writes everything). */
typedef fl_status (*fl_write_fn)(int fd, void *ctx);
fl_status fl_write_atomic_fn(const char *path, fl_write_fn fill, void *ctx);
/* Make a file someone else wrote (closed, complete) durable under its final name: fsync tmp, rename it over
 * path, fsync the directory (fl_write_atomic without copying the bytes). tmp must be a regular file in path's
 * directory; on failure it is left where it was, for the caller to remove. */
fl_status fl_fsync_rename(const char *tmp, const char *path);
/* An append-only log (a TensorBoard event file), which a reader may follow while it grows: all of data written at
 * path's end (the file created 0644 if missing, and its directory fsynced then), then fsync'ed when `durable`.
 * Earlier bytes are never rewritten, so a crash loses at most what this call was writing; a write that fails
 * part-way (a full disk, a file-size limit) is cut back to the size the file had. A path that is not a regular file
 * (a directory, a FIFO) is refused. */
fl_status fl_append(const char *path, const void *data, size_t len, bool durable);
/* fsync a directory (after renaming into it); file systems that cannot (EINVAL) are not an error. */
fl_status fl_fsync_dir(const char *dir);
/* mkdir -p: dir and the directories above it (mode 0777 & ~umask); an existing directory is fine, anything else
 * in the way is an error naming the part that could not be made ("a/file: cannot create the directory: File
 * exists"). An empty name is FL_EINVAL. The one mkdir -p: config files (core/config.c) and the Lua side's
 * checkpoints, profiler traces and --out (fp8._checkpoint.mkdir_p). */
fl_status fl_mkdir_p(const char *dir);
#endif
