/* test_profiler_device.c — device time in the profiler's recorder (core/profiler.h FL_PROF_DEVICE) with a
 * stand-in device clock: every mark is a tick of a counter standing for the device's queue, so spans are
 * known exactly. Checks that each event gets a begin and an end mark (also events closed implicitly),
 * that resolve turns them into spans on the host clock's scale and frees every mark, that clear frees
 * marks of events never resolved, and that without a clock FL_PROF_DEVICE records host time only. The
 * CUDA clock itself (events on the stream) is covered by tests/gpu/cuda_spec.lua on a GPU. */
#include "runner.h"
#include "profiler.h"

static int64_t ticks;          /* the device's time: 1000 ns per mark */
static int live_marks;
static int64_t mark_time[1024];
static int nmarks;

static uint64_t fake_mark(void) {
    if (nmarks >= 1024) return 0;
    ticks += 1000;
    mark_time[nmarks] = ticks;
    live_marks++;
    return (uint64_t)++nmarks;
}

static uint64_t fake_origin(int64_t *cpu_ns) {
    *cpu_ns = 5000000;             /* the host time the origin mark happened */
    return fake_mark();
}

static bool fake_elapsed(uint64_t a, uint64_t b, int64_t *ns) {
    if (!a || !b || a > (uint64_t)nmarks || b > (uint64_t)nmarks) return false;
    *ns = mark_time[b - 1] - mark_time[a - 1];
    return true;
}

static void fake_release(uint64_t m) { if (m) live_marks--; }

static const fl_prof_device_clock fake_clock = { fake_origin, fake_mark, fake_elapsed, fake_release };

static void reset(void) { ticks = 0; live_marks = 0; nmarks = 0; }

TEST(profiler_device_time_from_a_device_clock) {
    fl_prof_clear();
    reset();
    fl_prof_set_device_clock(&fake_clock);
    CHECK(fl_prof_has_device_clock(), "clock registered");
    REQUIRE_OK(fl_prof_start(FL_PROF_DEVICE));
    CHECK(fl_prof_flags() & FL_PROF_DEVICE, "device flag kept with a clock");
    uint64_t outer = fl_prof_begin("outer", FL_PROF_RANGE, NULL);   /* mark 2 (origin is mark 1) */
    uint64_t a = fl_prof_begin("a", FL_PROF_OP, NULL);              /* 3 */
    fl_prof_end(a);                                                 /* 4 */
    uint64_t b = fl_prof_begin("b", FL_PROF_OP, NULL);              /* 5 */
    (void)b;
    fl_prof_end(outer);                                             /* b closed implicitly: 6, outer: 7 */
    uint64_t open = fl_prof_begin("open", FL_PROF_OP, NULL);        /* 8, never closed before resolve */
    fl_prof_stop();
    CHECK(nmarks == 8 && live_marks == 8, "%d marks made, %d live", nmarks, live_marks);
    size_t n = fl_prof_resolve_device();
    CHECK(n == 3, "%zu events resolved", n);
    fl_prof_event e;
    const char *names[3] = { "outer", "a", "b" };
    const int64_t want[3][2] = { { 2000, 7000 }, { 3000, 4000 }, { 5000, 6000 } };   /* µs after the origin */
    for (int i = 0; i < 3; i++) {
        REQUIRE(fl_prof_get((size_t)i, &e), "event %d", i);
        CHECK(strcmp(e.name, names[i]) == 0, "event %d is %s", i, e.name);
        CHECK(e.dev_start_ns == 5000000 + want[i][0] - 1000 && e.dev_end_ns == 5000000 + want[i][1] - 1000,
              "%s: device span %lld..%lld", e.name, (long long)e.dev_start_ns, (long long)e.dev_end_ns);
    }
    REQUIRE(fl_prof_get(3, &e), "open event");
    CHECK(e.dev_start_ns == -1 && e.end_ns == -1, "an open event has no device span yet");
    CHECK(live_marks == 2, "%d marks live after resolve (the origin and the open event's)", live_marks);
    fl_prof_end(open);
    fl_prof_clear();
    CHECK(live_marks == 0, "%d marks leaked by clear", live_marks);

    /* Without a clock the same session records host time only. */
    fl_prof_set_device_clock(NULL);
    reset();
    REQUIRE_OK(fl_prof_start(FL_PROF_DEVICE | FL_PROF_WITH_FLOPS));
    CHECK(!(fl_prof_flags() & FL_PROF_DEVICE) && (fl_prof_flags() & FL_PROF_WITH_FLOPS), "flags %u", fl_prof_flags());
    fl_prof_end(fl_prof_begin("host only", FL_PROF_OP, NULL));
    fl_prof_stop();
    CHECK(fl_prof_resolve_device() == 0 && nmarks == 0, "no marks without a clock");
    REQUIRE(fl_prof_get(0, &e), "event");
    CHECK(e.dev_start_ns == -1 && e.end_ns >= e.start_ns, "host time only");
    fl_prof_clear();
}

TEST(profiler_device_marks_freed_without_resolve) {
    fl_prof_clear();
    reset();
    fl_prof_set_device_clock(&fake_clock);
    REQUIRE_OK(fl_prof_start(FL_PROF_DEVICE));
    for (int i = 0; i < 10; i++) fl_prof_end(fl_prof_begin("op", FL_PROF_OP, NULL));
    fl_prof_clear();               /* a warmup window thrown away while still recording */
    CHECK(live_marks == 1, "%d marks live (only the session's origin)", live_marks);
    fl_prof_end(fl_prof_begin("kept", FL_PROF_OP, NULL));
    fl_prof_stop();
    CHECK(fl_prof_resolve_device() == 1, "the event after the clear resolves against the same origin");
    fl_prof_clear();
    CHECK(live_marks == 0, "%d marks leaked", live_marks);
    fl_prof_set_device_clock(NULL);
}
