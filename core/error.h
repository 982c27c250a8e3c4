/* error.h — status codes, the thread-local error message, and the interrupt flag.
 * Core functions return fl_status; on failure they record "file:line: detail" for fl_last_error(). */
#ifndef FL_ERROR_H
#define FL_ERROR_H

#include <signal.h>
#include <stdbool.h>

typedef enum {
    FL_OK = 0,
    FL_EINVAL,      /* bad argument: shape, dtype, range */
    FL_ENOMEM,      /* allocation failed */
    FL_EIO,         /* file or stream problem */
    FL_EINTR,       /* interrupted by the user (Ctrl-C) */
    FL_EDEVICE,     /* device (CUDA, oneDNN) call failed */
    FL_EUNSUPPORTED,/* not implemented for this dtype/device */
    FL_STATUS_COUNT
} fl_status;

/* Record an error message (printf-style). Returns `code` so callers can `return FL_ERR(...)`. */
fl_status fl_set_error(fl_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same, for a message about a system call that failed with errno err, which fl_error_out_of_fds then reads.
 * Only where calling the whole function again is harmless: an open before anything was written or moved. */
fl_status fl_set_error_sys(fl_status code, int err, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#ifdef __clang_analyzer__
/* For the static analyzer (scripts/analyze.sh): the same call, with the code as the value, so it knows an error
 * path returns that code, not FL_OK (fl_set_error's body is in another file). The code is evaluated twice. */
#define FL_ERR(code, ...) (fl_set_error((code), __FILE__, __LINE__, __VA_ARGS__), (code))
#define FL_ERR_SYS(code, err, ...) (fl_set_error_sys((code), (err), __FILE__, __LINE__, __VA_ARGS__), (code))
#else
#define FL_ERR(code, ...) fl_set_error((code), __FILE__, __LINE__, __VA_ARGS__)
#define FL_ERR_SYS(code, err, ...) fl_set_error_sys((code), (err), __FILE__, __LINE__, __VA_ARGS__)
#endif

/* The last message recorded on this thread ("" when none). */
const char *fl_last_error(void);
/* The message without the "file:line: " prefix, for users. */
const char *fl_last_error_detail(void);
void fl_clear_error(void);
/* Whether st, the status of the call that recorded the last message, is a file that could not be opened because the
 * process (EMFILE) or the system (ENFILE) is out of descriptors, as FL_ERR_SYS recorded it (never a stale errno): the
 * binding layer then collects (descriptors held by handles nothing refers to any more are closed) and tries once
 * more, as it does for memory (lua/l_util.h). */
bool fl_error_out_of_fds(fl_status st);

/* Interrupt flag: set from a signal handler, polled by long core loops. */
void fl_interrupt_set(void);
void fl_interrupt_clear(void);
int  fl_interrupt_pending(void);
/* Returns FL_EINTR (with message "interrupted") and clears the flag if one is pending, else FL_OK. */
fl_status fl_check_interrupt(void);
/* The host's signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH) blocked in the calling thread, its mask before in
 * *old, and put back by fl_signals_restore: a thread created in between inherits the blocked set, so a signal sent
 * to the process goes to a thread that takes it (the main one), never to a helper thread (dist's watchdog, MPI's
 * progress threads), where SIGINT's handler would have no alternate stack (lua/main.c). */
void fl_signals_block(sigset_t *old);
void fl_signals_restore(const sigset_t *old);
/* The thread that takes the host's signals: fl_signals_set_main_thread() records the calling thread (the host's main
 * thread, before any other starts). Linux hands a signal sent to the process to any thread that does not block it,
 * and tgkill aims one at a thread: a SIGINT handler's first line is `if (fl_signal_send_to_main(sig)) return;`, which
 * on any other thread (an OpenMP worker, a library's own thread) sends the signal on to the main one (errno kept;
 * async-signal-safe) and returns 1, so only the main thread runs the rest (lua/main.c: lua_sethook on the main
 * thread's Lua state, the prompt's EINTR). Returns 0 on the main thread, or when none was recorded.
 * fl_signal_on_main_thread: whether the caller is that thread (true when none was recorded). */
void fl_signals_set_main_thread(void);
int fl_signal_send_to_main(int sig);
bool fl_signal_on_main_thread(void);

#define FL_TRY(expr) do { fl_status fl__s = (expr); if (fl__s != FL_OK) return fl__s; } while (0)

#endif
