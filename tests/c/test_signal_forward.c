/* test_signal_forward.c — a SIGINT aimed at an OpenMP worker runs the host's handler on the main thread only
 * (stop 102). lua/main.c's two SIGINT handlers (laction, prompt_sigint) begin with fl_signal_send_to_main
 * (core/error.c): on any thread but the main one it sends the signal on to the main thread and returns, so the rest
 * of the handler (lua_sethook on the main thread's Lua state, the prompt's EINTR) runs there alone. This test installs
 * a handler of that shape, runs OpenMP work on the main thread, and has a helper thread tgkill a SIGINT at each OpenMP
 * worker in turn, many times, waiting for each to be handled: every one must be handled on the main thread, none on a
 * worker, and the work's sums stay exact. Without the forwarding (fl_signal_send_to_main returning 0) every signal
 * is handled on the worker it was aimed at and the test fails. */
#include "runner.h"
#include "error.h"
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pid_t sf_main_tid;
static atomic_int sf_on_main, sf_on_other;

static pid_t sf_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* the shape of lua/main.c's handlers: send on from another thread, else do the main thread's part */
static void sf_handler(int sig) {
    if (fl_signal_send_to_main(sig)) return;
    if (sf_gettid() == sf_main_tid) atomic_fetch_add(&sf_on_main, 1);
    else atomic_fetch_add(&sf_on_other, 1);
}

#define SF_WORKERS_MAX 64
#define SF_SIGNALS 200
static pid_t sf_workers[SF_WORKERS_MAX];
static int sf_nworkers;
static atomic_int sf_done, sf_sent, sf_lost;

static double sf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* aims SF_SIGNALS SIGINTs at the workers, one at a time: each waits until a handler has counted it (2 s at most) */
static void *sf_sender(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);   /* (tgkill aims at a thread: this one's mask does not matter) */
    for (int i = 0; i < SF_SIGNALS; i++) {
        pid_t to = sf_workers[i % sf_nworkers];
        if (syscall(SYS_tgkill, (pid_t)getpid(), to, SIGINT) != 0) { atomic_fetch_add(&sf_lost, 1); continue; }
        atomic_fetch_add(&sf_sent, 1);
        double t0 = sf_now();
        while (atomic_load(&sf_on_main) + atomic_load(&sf_on_other) < atomic_load(&sf_sent) && sf_now() - t0 < 2.0)
            usleep(100);
        if (atomic_load(&sf_on_main) + atomic_load(&sf_on_other) < atomic_load(&sf_sent)) break;   /* never handled */
        if (i % 7 == 0) usleep(500);   /* some land while the workers run, some while they wait for work */
    }
    atomic_store(&sf_done, 1);
    return NULL;
}

TEST(signal_forward_sigint_at_openmp_workers_runs_on_main_only) {
    sf_main_tid = sf_gettid();
    fl_signals_set_main_thread();   /* the test runner's thread, as main.c records the host's */
    REQUIRE(fl_signal_on_main_thread(), "the recording thread is the main one");
    atomic_store(&sf_on_main, 0); atomic_store(&sf_on_other, 0);
    atomic_store(&sf_done, 0); atomic_store(&sf_sent, 0); atomic_store(&sf_lost, 0);
    /* the team's worker threads (libgomp keeps them between regions of one size) */
    const int nt = 2;
    sf_nworkers = 0;
    pid_t tids[SF_WORKERS_MAX] = { 0 };
#pragma omp parallel num_threads(nt)
    {
        int k = omp_get_thread_num();
        if (k < SF_WORKERS_MAX) tids[k] = sf_gettid();
    }
    for (int k = 1; k < nt; k++)
        if (tids[k] && tids[k] != sf_main_tid) sf_workers[sf_nworkers++] = tids[k];
    REQUIRE(sf_nworkers >= 1, "no OpenMP worker thread (team of %d)", nt);

    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sf_handler;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGINT, &sa, &old) == 0, "sigaction");
    sigset_t unblock, oldmask;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &unblock, &oldmask);

    pthread_t th;
    int rc = pthread_create(&th, NULL, sf_sender, NULL);
    CHECK(rc == 0, "pthread_create: %d", rc);
    /* OpenMP work on the main thread while the signals come: sums of 0.5·i, exact in double */
    enum { N = 1 << 16 };
    static double v[N];
    for (int i = 0; i < N; i++) v[i] = 0.5 * i;
    const double want = 0.5 * (double)N * (double)(N - 1) / 2.0;
    int rounds = 0, wrong = 0;
    double t0 = sf_now();
    while (rc == 0 && !atomic_load(&sf_done) && sf_now() - t0 < 60.0) {
        double s = 0.0;
#pragma omp parallel for num_threads(nt) reduction(+:s) schedule(static)
        for (int i = 0; i < N; i++) s += v[i];
        if (s != want) wrong++;
        rounds++;
    }
    if (rc == 0) pthread_join(th, NULL);
    /* a signal still on its way to the main thread */
    for (double t1 = sf_now(); atomic_load(&sf_on_main) + atomic_load(&sf_on_other) < atomic_load(&sf_sent) &&
                               sf_now() - t1 < 2.0;)
        usleep(100);
    sigaction(SIGINT, &old, NULL);
    pthread_sigmask(SIG_SETMASK, &oldmask, NULL);

    int on_main = atomic_load(&sf_on_main), on_other = atomic_load(&sf_on_other), sent = atomic_load(&sf_sent);
    CHECK(atomic_load(&sf_lost) == 0, "%d tgkill calls failed", atomic_load(&sf_lost));
    CHECK(sent == SF_SIGNALS, "%d of %d signals sent (one not handled within 2 s stops the sending)", sent, SF_SIGNALS);
    CHECK(on_other == 0, "the handler ran on a worker %d times (of %d signals aimed at workers)", on_other, sent);
    CHECK(on_main == sent, "the handler ran on the main thread %d times for %d signals", on_main, sent);
    CHECK(wrong == 0, "%d of %d OpenMP sums wrong", wrong, rounds);
    CHECK(rounds > 0, "no OpenMP work ran");
}

TEST(signal_forward_main_thread_keeps_its_signal) {
    /* on the main thread the handler goes on (0), and errno is left as it was on either path */
    fl_signals_set_main_thread();
    errno = 1234;
    CHECK(fl_signal_send_to_main(SIGINT) == 0, "the main thread sends its own signal on");
    CHECK(errno == 1234, "errno changed: %d", errno);
    CHECK(fl_signal_on_main_thread(), "the main thread is not the recorded one");
}
