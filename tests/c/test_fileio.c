/* test_fileio.c — core/fileio.c: readers refuse what is not a regular file (a named pipe at once, not
 * after blocking) and files over their cap; the atomic writer replaces the target whole and leaves no
 * temporary file in the directory, also when it is abandoned half-way. */
#include "runner.h"
#include "fileio.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

TEST(fileio_refuses_fifo_and_caps_size) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char pipe[256], file[256];
    snprintf(pipe, sizeof pipe, "%s/pipe", dir);
    snprintf(file, sizeof file, "%s/f.txt", dir);
    REQUIRE(mkfifo(pipe, 0600) == 0, "mkfifo");
    char *buf = NULL;
    size_t len = 0;
    CHECK(fl_read_regular(pipe, "text file", 0, &buf, &len) == FL_EIO, "a named pipe was opened");
    CHECK(strstr(fl_last_error(), "is a named pipe, not a regular file"), "%s", fl_last_error());
    CHECK(fl_read_regular(dir, "text file", 0, &buf, &len) == FL_EIO, "a directory was read");
    CHECK(strstr(fl_last_error(), "is a directory"), "%s", fl_last_error());
    REQUIRE_OK(fl_write_atomic(file, "0123456789", 10));
    CHECK(fl_read_regular(file, "text file", 9, &buf, &len) == FL_EINVAL, "cap of 9 bytes not applied");
    CHECK(strstr(fl_last_error(), "file too large for a text file (10 bytes; the limit is 9)"), "%s", fl_last_error());
    /* the article fits the word: this said "a IDX file" */
    CHECK(fl_read_regular(file, "IDX file", 9, &buf, &len) == FL_EINVAL, "cap of 9 bytes not applied");
    CHECK(strstr(fl_last_error(), "file too large for an IDX file (10 bytes"), "%s", fl_last_error());
    CHECK(fl_read_regular(pipe, "IDX file", 0, &buf, &len) == FL_EIO, "a named pipe was opened");
    CHECK(strstr(fl_last_error(), "(an IDX file must be a regular file)"), "%s", fl_last_error());
    REQUIRE_OK(fl_read_regular(file, "text file", 10, &buf, &len));
    CHECK(len == 10 && memcmp(buf, "0123456789", 10) == 0 && buf[10] == 0, "read back %zu bytes", len);
    free(buf);
    unlink(pipe);
    unlink(file);
    rmdir(dir);
}

TEST(fileio_atomic_write_replaces_whole_and_leaves_nothing) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[256];
    snprintf(file, sizeof file, "%s/out.json", dir);
    REQUIRE_OK(fl_write_atomic(file, "old", 3));
    /* abandoned half-way (what a killed writer amounts to): the target is untouched, nothing is left */
    fl_atomic_file af;
    REQUIRE_OK(fl_atomic_begin(&af, file));
    CHECK(write(af.fd, "partial", 7) == 7, "write");
    CHECK(count_entries(dir) == 1, "a temporary file is visible before commit: %d entries", count_entries(dir));
    fl_atomic_abort(&af);
    char *buf = NULL;
    size_t len = 0;
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 3 && memcmp(buf, "old", 3) == 0, "target changed by an abandoned write");
    free(buf);
    REQUIRE_OK(fl_write_atomic(file, "new contents", 12));
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 12 && memcmp(buf, "new contents", 12) == 0, "not replaced");
    free(buf);
    CHECK(count_entries(dir) == 1, "%d entries after commit", count_entries(dir));
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && (sb.st_mode & 0400), "unreadable result");
    CHECK(fl_write_atomic("/nonexistent/dir/x", "a", 1) == FL_EIO, "write into a missing directory");
    unlink(file);
    rmdir(dir);
}

/* Where the file system has no O_TMPFILE the temporary file is named "<name>.tmp<pid>.<n>" and locked while its writer
 * lives: a writer killed before the rename leaves a name that the next write of the path removes (a name of
 * mkstemp's, not looked for, stayed for good), while a live writer's file is left alone. */
TEST(fileio_atomic_write_without_o_tmpfile_leaves_nothing_behind) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[256], stale[300];
    snprintf(file, sizeof file, "%s/w.safetensors", dir);
    snprintf(stale, sizeof stale, "%s.tmp999999.0", file);   /* what a killed writer left: nobody holds its lock */
    fl_atomic_use_tmpfile(false);
    FILE *f = fopen(stale, "wb");
    REQUIRE(f, "fopen");
    fputs("half", f);
    fclose(f);
    fl_atomic_file live;
    REQUIRE_OK(fl_atomic_begin(&live, file));   /* a writer still at work, holding its lock */
    CHECK(live.tmp[0] != 0, "the named path was not taken");
    CHECK(count_entries(dir) == 1, "%d entries: the stale file should have gone", count_entries(dir));
    REQUIRE_OK(fl_write_atomic(file, "new", 3));   /* another write of the same path leaves the live one */
    CHECK(count_entries(dir) == 2, "%d entries: the file and the live writer's", count_entries(dir));
    CHECK(write(live.fd, "x", 1) == 1, "write");
    REQUIRE_OK(fl_atomic_commit(&live));
    CHECK(count_entries(dir) == 1, "%d entries after both writers", count_entries(dir));
    char *buf = NULL;
    size_t len = 0;
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 1 && buf[0] == 'x', "the last commit's bytes");
    free(buf);
    fl_atomic_use_tmpfile(true);
    unlink(file);
    rmdir(dir);
}

/* A legal file name near NAME_MAX (250 bytes): its temporary link's name ("<name>.tmp<pid>.<n>") would pass the
 * limit, so a short stem stands for it; the write succeeds and leaves only the file. */
TEST(fileio_atomic_write_takes_a_name_near_name_max) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[512];
    int n = snprintf(file, sizeof file, "%s/", dir);
    memset(file + n, 'z', 250);
    file[n + 250] = 0;
    REQUIRE_OK(fl_write_atomic(file, "long name", 9));
    char *buf = NULL;
    size_t len = 0;
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 9 && memcmp(buf, "long name", 9) == 0, "not written");
    free(buf);
    REQUIRE_OK(fl_write_atomic(file, "again", 5));   /* and replaced */
    CHECK(count_entries(dir) == 1, "%d entries after two writes", count_entries(dir));
    unlink(file);
    rmdir(dir);
}

/* fl_fsync_rename (what fp8.plot does with gnuplot's finished PNG): the file replaces the target whole, under the
 * target's name only; a missing file or a directory is refused and nothing is renamed or removed. */
TEST(fileio_fsync_rename_moves_a_finished_file) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[256], tmp[256], sub[256];
    snprintf(file, sizeof file, "%s/plot.png", dir);
    snprintf(tmp, sizeof tmp, "%s/plot.png.tmp", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    REQUIRE_OK(fl_write_atomic(file, "old", 3));
    FILE *f = fopen(tmp, "wb");
    REQUIRE(f, "fopen");
    fputs("new picture", f);
    fclose(f);
    REQUIRE_OK(fl_fsync_rename(tmp, file));
    char *buf = NULL;
    size_t len = 0;
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 11 && memcmp(buf, "new picture", 11) == 0, "not replaced");
    free(buf);
    CHECK(count_entries(dir) == 1, "%d entries after the rename", count_entries(dir));
    CHECK(fl_fsync_rename(tmp, file) == FL_EIO, "a missing file was renamed");
    CHECK(strstr(fl_last_error(), "plot.png.tmp"), "%s", fl_last_error());
    REQUIRE(mkdir(sub, 0700) == 0, "mkdir");
    CHECK(fl_fsync_rename(sub, file) == FL_EIO, "a directory was renamed over a file");
    struct stat sb;
    CHECK(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode), "the refused directory is gone");
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 11, "the target changed on a refused rename");
    free(buf);
    rmdir(sub);
    unlink(file);
    rmdir(dir);
}

/* An append that fails part-way (here a file-size limit, as a full disk does) is cut back to the size the file
 * had: a torn record in the middle of an event file hid every later one from TensorBoard. The limit is this
 * process's soft one, put back at the end; SIGXFSZ is ignored, as fp8lab's main does, so write fails with EFBIG. */
TEST(fileio_append_failing_part_way_is_cut_back) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[256];
    snprintf(file, sizeof file, "%s/events", dir);
    REQUIRE_OK(fl_append(file, "0123456789", 10, false));
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 100;   /* the next 90 bytes fit, the rest of a 1,000-byte record does not */
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    char big[1000];
    memset(big, 'x', sizeof big);
    fl_status st = fl_append(file, big, sizeof big, false);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK(st == FL_EIO, "an append past the limit succeeded");
    CHECK(strstr(fl_last_error(), "write failed: File too large"), "%s", fl_last_error());
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && sb.st_size == 10, "the file holds %lld bytes after the failed append, not 10",
          (long long)sb.st_size);
    REQUIRE_OK(fl_append(file, "abc", 3, false));   /* the next record follows the last whole one */
    char *buf = NULL;
    size_t len = 0;
    REQUIRE_OK(fl_read_regular(file, "file", 0, &buf, &len));
    CHECK(len == 13 && memcmp(buf, "0123456789abc", 13) == 0, "read back %zu bytes", len);
    free(buf);
    unlink(file);
    rmdir(dir);
}

/* fl_error_out_of_fds (the bindings collect and call again on it) says what the failed open said, never an errno
 * left by some earlier call: with errno EMFILE from before, "is a directory" read as out of descriptors (stop 95). */
TEST(fileio_out_of_fds_is_the_failed_open_s_own) {
    char dir[] = "/tmp/fl_test_fileio_XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char file[256];
    snprintf(file, sizeof file, "%s/f.txt", dir);
    REQUIRE_OK(fl_write_atomic(file, "0123456789", 10));
    char *buf = NULL;
    size_t len = 0;
    errno = EMFILE;   /* stale, as an io.open that ran out leaves it */
    fl_status st = fl_read_regular(dir, "text file", 0, &buf, &len);
    CHECK(st == FL_EIO && strstr(fl_last_error(), "is a directory"), "%s", fl_last_error());
    CHECK(!fl_error_out_of_fds(st), "a directory read as out of descriptors");
    errno = EMFILE;
    st = fl_append(dir, "x", 1, false);
    CHECK(st == FL_EIO && !fl_error_out_of_fds(st), "appending to a directory: %s", fl_last_error());
    /* the process out of descriptors: the limit at the lowest free one */
    const int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(lowest >= 0, "open /dev/null");
    close(lowest);
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit");
    lim = old;
    lim.rlim_cur = (rlim_t)lowest;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit");
    fl_status r1 = fl_read_regular(file, "text file", 0, &buf, &len);
    const bool o1 = fl_error_out_of_fds(r1);
    fl_status r2 = fl_write_atomic(file, "abc", 3);
    const bool o2 = fl_error_out_of_fds(r2);
    char err2[256];
    snprintf(err2, sizeof err2, "%s", fl_last_error());
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK(r1 == FL_EIO && o1, "a read with no descriptor left: %d, %d", (int)r1, (int)o1);
    CHECK(r2 == FL_EIO && o2, "a write with no descriptor left: %d, %d (%s)", (int)r2, (int)o2, err2);
    REQUIRE_OK(fl_read_regular(file, "text file", 0, &buf, &len));
    CHECK(len == 10, "the failed write changed the file (%zu bytes)", len);
    free(buf);
    unlink(file);
    rmdir(dir);
}
