/* fileio.c — regular-file readers with a size cap and atomic writers (see fileio.h). */
#include "fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* "a" or "an" before what ("an IDX file", "a text file"), by its first letter */
static const char *fl_article(const char *what) {
    return what && what[0] && strchr("AEIOUaeiou", what[0]) ? "an" : "a";
}

fl_status fl_open_regular(const char *path, const char *what, int64_t max_bytes, int *fd, int64_t *size) {
    *fd = -1;
    if (!path || !*path) return FL_ERR(FL_EINVAL, "%s: the path is empty", what);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
        const int e = errno;
        return FL_ERR_SYS(FL_EIO, e, "%s: cannot open %s: %s", path, what, strerror(e));
    }
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return FL_ERR(FL_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        const char *kind = S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a named pipe"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" : S_ISSOCK(sb.st_mode) ? "a socket"
                         : "not a regular file";
        if (S_ISDIR(sb.st_mode)) return FL_ERR(FL_EIO, "%s: is a directory, not %s %s", path, fl_article(what), what);
        return FL_ERR(FL_EIO, "%s: is %s, not a regular file (%s %s must be a regular file)", path, kind,
                      fl_article(what), what);
    }
    if (max_bytes > 0 && sb.st_size > max_bytes) {
        close(f);
        return FL_ERR(FL_EINVAL, "%s: file too large for %s %s (%lld bytes; the limit is %lld)", path,
                      fl_article(what), what, (long long)sb.st_size, (long long)max_bytes);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    if (size) *size = (int64_t)sb.st_size;
    return FL_OK;
}

fl_status fl_read_regular(const char *path, const char *what, int64_t max_bytes, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    int fd;
    int64_t size;
    FL_TRY(fl_open_regular(path, what, max_bytes, &fd, &size));
    size_t cap = (size_t)size + 2, n = 0;   /* +1 to see EOF without growing, +1 for the NUL */
    char *b = malloc(cap);
    if (!b) { close(fd); return FL_ERR(FL_ENOMEM, "%s: out of memory reading %lld bytes", path, (long long)size); }
    for (;;) {
        if (n + 1 >= cap) {   /* the file grew while we read it */
            if (max_bytes > 0 && (int64_t)n > max_bytes) {
                free(b); close(fd);
                return FL_ERR(FL_EINVAL, "%s: file too large for %s %s (grew past the limit of %lld bytes)", path,
                              fl_article(what), what, (long long)max_bytes);
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); close(fd); return FL_ERR(FL_ENOMEM, "%s: out of memory", path); }
            b = nb; cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(b); close(fd);
            return FL_ERR(FL_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (max_bytes > 0 && (int64_t)n > max_bytes) {
        free(b); close(fd);
        return FL_ERR(FL_EINVAL, "%s: file too large for %s %s (grew past the limit of %lld bytes)", path,
                      fl_article(what), what, (long long)max_bytes);
    }
    close(fd);
    b[n] = 0;
    *buf = b;
    *len = n;
    return FL_OK;
}

static void dir_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(dir, len, "."); return; }
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1;   /* "/file" */
    if (n >= len) n = len - 1;
    memcpy(dir, path, n);
    dir[n] = 0;
}

/* The stem of a link's name for path's file name `base`: base itself, or where "<base>.tmp<pid>.<n>" could pass a
 * directory entry's limit (NAME_MAX, 255 bytes; a legal name of 240 bytes would not fit) ".fp8lab-<16 hex digits>",
 * a 64-bit FNV-1a hash of base, so that the name still fits and stale links are still found by it. */
static void link_stem(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (strlen(base) + 32 <= NAME_MAX) { snprintf(out, n, "%s", base); return; }
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *c = (const unsigned char *)base; *c; c++) h = (h ^ *c) * 1099511628211ull;
    snprintf(out, n, ".fp8lab-%016llx", (unsigned long long)h);
}

/* The temporary name number `attempt` of a write of path: "<dir>/<stem>.tmp<pid>.<attempt>"; false if too long. */
static bool temp_name(const char *path, int attempt, char *out, size_t n) {
    char dir[4096], stem[NAME_MAX + 1];
    dir_of(path, dir, sizeof dir);
    link_stem(path, stem, sizeof stem);
    return snprintf(out, n, "%s/%s.tmp%ld.%d", dir, stem, (long)getpid(), attempt) < (int)n;
}

/* retry: whether a want of descriptors is recorded as such (FL_ERR_SYS), so that the binding calls the function
 * again; not where the directory is synced after a file was appended to or renamed into place, which a second call
 * would append again or not find */
static fl_status fsync_dir(const char *dir, bool retry) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        return FL_ERR_SYS(FL_EIO, retry ? e : 0, "%s: cannot open the directory to fsync it: %s", dir, strerror(e));
    }
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL) return FL_ERR(FL_EIO, "%s: fsync of the directory failed: %s", dir, strerror(e));
    return FL_OK;
}
fl_status fl_fsync_dir(const char *dir) { return fsync_dir(dir, true); }

fl_status fl_append(const char *path, const void *data, size_t len, bool durable) {
    if (!path || !*path) return FL_ERR(FL_EINVAL, "cannot append: the path is empty");
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    bool created = false;
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
        created = fd >= 0;
    }
    if (fd < 0) {   /* nothing written yet: a second call is harmless */
        const int e = errno;
        return FL_ERR_SYS(FL_EIO, e, "%s: cannot open to append: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return FL_ERR(FL_EIO, "%s: not a regular file", path);
    }
    /* A write that fails part-way (a full disk, a file-size limit) is taken back: the file is cut to the size it
     * had, so that it never holds a torn record after which a reader (TensorBoard's, a CSV's) loses every later one. */
    const off_t start = st.st_size;
    const char *p = (const char *)data;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            bool cut = done == 0 || ftruncate(fd, start) == 0;
            close(fd);
            return FL_ERR(FL_EIO, "%s: write failed: %s%s", path, strerror(e),
                          cut ? "" : " (and the part written could not be taken back: the file ends in a torn write)");
        }
        done += (size_t)w;
    }
    if (durable && fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return FL_ERR(FL_EIO, "%s: fsync failed: %s", path, strerror(e));
    }
    if (close(fd) != 0 && errno != EINTR) return FL_ERR(FL_EIO, "%s: close failed: %s", path, strerror(errno));
    if (created) {
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        return fsync_dir(dir, false);
    }
    return FL_OK;
}

static void remove_stale_links(const char *path);

static _Atomic bool use_tmpfile = true;
void fl_atomic_use_tmpfile(bool on) { atomic_store(&use_tmpfile, on); }

fl_status fl_atomic_begin(fl_atomic_file *af, const char *path) {
    af->fd = -1;
    af->tmp[0] = 0;
    if (!path || !*path) return FL_ERR(FL_EINVAL, "cannot write: the path is empty");
    if (snprintf(af->path, sizeof af->path, "%s", path) >= (int)sizeof af->path)
        return FL_ERR(FL_EINVAL, "%s: path too long", path);
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    mode_t um = umask(0);
    umask(um);
#ifdef O_TMPFILE
    if (atomic_load(&use_tmpfile)) af->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666 & ~um);
    if (af->fd >= 0) {
        (void)flock(af->fd, LOCK_EX);   /* held until closed: marks the file's future name as in use */
        return FL_OK;
    }
#endif
    /* no O_TMPFILE here (old kernel, some file systems): a named temporary file, under the names the O_TMPFILE path
     * links its file to ("<stem>.tmp<pid>.<n>") and locked as that file is, so that a writer killed before the
     * rename leaves a name the next write of the same path removes (remove_stale_links), not one that stays */
    remove_stale_links(path);
    int e = EEXIST;
    for (int attempt = 0; attempt < 100 && af->fd < 0; attempt++) {
        if (!temp_name(path, attempt, af->tmp, sizeof af->tmp)) {
            af->tmp[0] = 0;
            return FL_ERR(FL_EINVAL, "%s: path too long", path);
        }
        af->fd = open(af->tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666 & ~um);
        if (af->fd < 0 && (e = errno) != EEXIST) break;
    }
    if (af->fd < 0) {
        af->tmp[0] = 0;
        return FL_ERR_SYS(FL_EIO, e, "%s: cannot create a temporary file in %s: %s", path, dir, strerror(e));
    }
    (void)flock(af->fd, LOCK_EX);   /* held until closed, as on the O_TMPFILE path */
    return FL_OK;
}

void fl_atomic_abort(fl_atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    if (af->tmp[0]) unlink(af->tmp);
    af->fd = -1;
    af->tmp[0] = 0;
}

/* The names fl_atomic_commit gives a finished file before renaming it over path are "<dir>/<stem>.tmp<pid>.<n>", the
 * stem link_stem's (where there is no O_TMPFILE, fl_atomic_begin creates the file under such a name). A writer
 * killed between those two calls (SIGKILL is delivered when the link call returns) leaves
 * its link behind. A writer holds an flock on its file from fl_atomic_begin until it
 * closes it after the rename, and the kernel drops the lock of a dead process: a link whose file can be
 * locked has no live writer, and goes. (Process ids would not do: they are reused.) */
static void remove_stale_links(const char *path) {
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    char base[NAME_MAX + 1];
    link_stem(path, base, sizeof base);
    size_t lb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *n = ent->d_name;
        if (strncmp(n, base, lb) != 0 || strncmp(n + lb, ".tmp", 4) != 0) continue;
        char *end, *end2;
        long pid = strtol(n + lb + 4, &end, 10);
        if (end == n + lb + 4 || *end != '.' || pid <= 0) continue;
        strtol(end + 1, &end2, 10);
        if (end2 == end + 1 || *end2) continue;
        char full[8192];
        if (snprintf(full, sizeof full, "%s/%s", dir, n) >= (int)sizeof full) continue;
        int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat sb;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0) (void)unlink(full);
        close(fd);
    }
    closedir(d);
}

fl_status fl_atomic_commit(fl_atomic_file *af) {
    int e = 0;
    /* the file it replaces keeps its permission bits (a checkpoint made private with chmod 600 stays so), as a
     * write in place would (set-id bits aside, which a write clears); a new file takes 0666 less the umask. Best
     * effort: a file system without modes (vfat) refuses fchmod, and the write goes on there */
    struct stat old;
    if (stat(af->path, &old) == 0 && S_ISREG(old.st_mode)) (void)fchmod(af->fd, old.st_mode & 0777);
    if (fsync(af->fd) != 0) { e = errno; goto fail; }
    if (!af->tmp[0]) {
        remove_stale_links(af->path);
        /* give the unnamed file a name next to the target, then rename it over the target */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", af->fd);
        for (int attempt = 0; attempt < 100; attempt++) {
            if (!temp_name(af->path, attempt, af->tmp, sizeof af->tmp)) { af->tmp[0] = 0; e = ENAMETOOLONG; goto fail; }
            if (linkat(AT_FDCWD, proc, AT_FDCWD, af->tmp, AT_SYMLINK_FOLLOW) == 0) break;
            if (errno != EEXIST) { e = errno; af->tmp[0] = 0; goto fail; }
            af->tmp[0] = 0;
        }
        if (!af->tmp[0]) { e = EEXIST; goto fail; }
    }
    if (rename(af->tmp, af->path) != 0) { e = errno; goto fail; }
    af->tmp[0] = 0;
    close(af->fd);
    af->fd = -1;
    char dir[4096];
    dir_of(af->path, dir, sizeof dir);
    return fsync_dir(dir, false);
fail:
    fl_atomic_abort(af);
    return FL_ERR(FL_EIO, "%s: cannot write: %s", af->path, strerror(e));
}

fl_status fl_fsync_rename(const char *tmp, const char *path) {
    if (!tmp || !*tmp || !path || !*path) return FL_ERR(FL_EINVAL, "cannot rename: a path is empty");
    int e = 0;
    int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);   /* a FIFO must not block the open */
    if (fd < 0) { e = errno; goto fail; }
    struct stat sb;
    if (fstat(fd, &sb) != 0) e = errno;
    else if (!S_ISREG(sb.st_mode)) e = EINVAL;
    else if (fsync(fd) != 0) e = errno;
    close(fd);
    if (e) goto fail;
    if (rename(tmp, path) != 0) { e = errno; goto fail; }
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return fsync_dir(dir, false);
fail:   /* (before the rename: a second call finds tmp where it was) */
    return FL_ERR_SYS(FL_EIO, e, "%s: cannot write (from %s): %s", path, tmp, strerror(e));
}

fl_status fl_write_atomic(const char *path, const void *data, size_t len) {
    fl_atomic_file af;
    FL_TRY(fl_atomic_begin(&af, path));
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(af.fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            fl_atomic_abort(&af);
            return FL_ERR(FL_EIO, "%s: cannot write: %s", path, strerror(e));
        }
        p += w;
        len -= (size_t)w;
    }
    return fl_atomic_commit(&af);
}

fl_status fl_write_atomic_fn(const char *path, fl_write_fn fill, void *ctx) {
    fl_atomic_file af;
    FL_TRY(fl_atomic_begin(&af, path));
    fl_status st = fill(af.fd, ctx);
    if (st != FL_OK) { fl_atomic_abort(&af); return st; }
    return fl_atomic_commit(&af);
}

fl_status fl_mkdir_p(const char *dir) {
    const size_t n = strlen(dir);
    if (n == 0) return FL_ERR(FL_EINVAL, "mkdir_p: cannot create a directory with an empty name");
    char *p = malloc(n + 1);
    if (!p) return FL_ERR(FL_ENOMEM, "mkdir_p: out of memory");
    memcpy(p, dir, n + 1);
    fl_status st = FL_OK;
    for (size_t i = 1; i <= n && st == FL_OK; i++) {   /* from 1: a leading '/' names the root, not an empty part */
        if (p[i] != '/' && p[i] != '\0') continue;
        const char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (mkdir(p, 0777) != 0) {
            const int e = errno;
            if (!(e == EEXIST && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)))
                st = FL_ERR(FL_EIO, "%s: cannot create the directory: %s", p, strerror(e));
        }
        p[i] = c;
    }
    free(p);
    return st;
}
