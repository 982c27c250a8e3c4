/* error.c — thread-local error messages and the process-wide interrupt flag. */
#include "error.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Thread_local char fl_err_buf[1024];
static _Thread_local size_t fl_err_detail_off;
static _Thread_local fl_status fl_err_code;
static _Thread_local int fl_err_errno;   /* the errno a message was made from (FL_ERR_SYS), else 0 */
static volatile sig_atomic_t fl_interrupt_flag;

static fl_status set_error(fl_status code, int err, const char *file, int line, const char *fmt, va_list ap) {
    const int saved = errno;
    fl_err_code = code;
    fl_err_errno = err;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(fl_err_buf, sizeof fl_err_buf, "%s:%d: ", base, line);
    if (n < 0 || (size_t)n >= sizeof fl_err_buf) n = 0;
    fl_err_detail_off = (size_t)n;
    vsnprintf(fl_err_buf + n, sizeof fl_err_buf - (size_t)n, fmt, ap);
    errno = saved;   /* for a caller that reads it after the call failed */
    return code;
}

/* errno is not taken here: at most of the sites it is stale, left by some earlier call that failed (an io.open
 * that ran out of descriptors made "is a directory" or an IDX file's bad magic look like EMFILE, which
 * fl_error_out_of_fds took for a reason to collect and call again; until stop 95) */
fl_status fl_set_error(fl_status code, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(code, 0, file, line, fmt, ap);
    va_end(ap);
    return code;
}

fl_status fl_set_error_sys(fl_status code, int err, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(code, err, file, line, fmt, ap);
    va_end(ap);
    return code;
}

bool fl_error_out_of_fds(fl_status st) {
    return st == FL_EIO && fl_err_code == FL_EIO && (fl_err_errno == EMFILE || fl_err_errno == ENFILE);
}

const char *fl_last_error(void) { return fl_err_buf; }
const char *fl_last_error_detail(void) { return fl_err_buf + fl_err_detail_off; }
void fl_clear_error(void) { fl_err_buf[0] = 0; fl_err_detail_off = 0; fl_err_code = FL_OK; fl_err_errno = 0; }

void fl_interrupt_set(void) { fl_interrupt_flag = 1; }
void fl_interrupt_clear(void) { fl_interrupt_flag = 0; }
int fl_interrupt_pending(void) { return fl_interrupt_flag != 0; }
void fl_signals_block(sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &set, old);
}
void fl_signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }
static volatile pid_t fl_main_tid;   /* 0: none recorded */
static pid_t fl_gettid(void) { return (pid_t)syscall(SYS_gettid); }
void fl_signals_set_main_thread(void) { fl_main_tid = fl_gettid(); }
bool fl_signal_on_main_thread(void) { return fl_main_tid == 0 || fl_gettid() == fl_main_tid; }
int fl_signal_send_to_main(int sig) {
    if (fl_signal_on_main_thread()) return 0;
    int saved = errno;
    syscall(SYS_tgkill, (pid_t)getpid(), fl_main_tid, sig);
    errno = saved;
    return 1;
}
fl_status fl_check_interrupt(void) {
    if (!fl_interrupt_flag) return FL_OK;
    fl_interrupt_flag = 0;
    return FL_ERR(FL_EINTR, "interrupted");
}
