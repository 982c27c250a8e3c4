/* test_dist.c — the single-process side of data parallelism: the autograd grad-ready hook (called once
 * per leaf, when its gradient is final, in walk order), the world-of-one communicator (no MPI call:
 * identity collectives), and the DDP reducer's bucketing and averaging over a world of one. The
 * multi-process behaviour is tested under mpirun by tests/spec/dist_spec.lua. */
#include "runner.h"
#include "autograd.h"
#include "ddp.h"
#include "dist.h"
#include "ops.h"

static fl_tensor *vec(const float *v, int64_t n) {
    fl_tensor *t = NULL;
    if (fl_tensor_from_f32(&t, v, 1, &n, FL_F32) != FL_OK) return NULL;
    fl_tensor_set_requires_grad(t, true);
    return t;
}
static float at(const fl_tensor *t, int64_t i) { double v = 0; fl_tensor_get(t, &i, &v); return (float)v; }

typedef struct { int calls; const fl_tensor *who[8]; float grad0[8]; } seen;

static fl_status record(fl_tensor *leaf, void *ud) {
    seen *s = ud;
    if (s->calls < 8) { s->who[s->calls] = leaf; s->grad0[s->calls] = leaf->grad ? at(leaf->grad, 0) : -1; }
    s->calls++;
    return FL_OK;
}

TEST(dist_grad_ready_hook_once_per_leaf_with_final_grad) {
    float xv[2] = { 1, 2 }, wv[2] = { 3, 4 };
    fl_tensor *x = vec(xv, 2), *w = vec(wv, 2), *a, *b, *c, *s;
    /* x is used twice (x*w and x*x): its hook must come after both contributions */
    REQUIRE_OK(fl_binary(&a, FL_OP_MUL, x, w));
    REQUIRE_OK(fl_binary(&b, FL_OP_MUL, x, x));
    REQUIRE_OK(fl_binary(&c, FL_OP_ADD, a, b));
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, c, FL_ALL_DIMS, false));
    seen sn = { 0 };
    fl_autograd_set_grad_ready_hook(record, &sn);
    REQUIRE_OK(fl_backward(s, NULL, false));
    fl_autograd_set_grad_ready_hook(NULL, NULL);
    CHECK(sn.calls == 2, "calls %d", sn.calls);
    for (int i = 0; i < 2 && i < sn.calls; i++) {
        if (sn.who[i] == x) CHECK_CLOSE(sn.grad0[i], wv[0] + 2 * xv[0], 0, 0);   /* final: w + 2x */
        else CHECK(sn.who[i] == w && sn.grad0[i] == xv[0], "w's grad at its hook %g", sn.grad0[i]);
    }
    fl_tensor *ts[] = { x, w, a, b, c, s };
    for (int i = 0; i < 6; i++) fl_tensor_release(ts[i]);
}

TEST(dist_world_of_one_makes_no_mpi_call) {
    /* not started by a launcher (the test runner never is): init is a no-op, collectives are identities */
    REQUIRE(!fl_dist_launched(), "the test runner was started by an MPI launcher");
    REQUIRE_OK(fl_dist_init(5));
    CHECK(!fl_dist_initialized() && fl_dist_size() == 1 && fl_dist_rank() == 0, "world of one");
    float v[3] = { 1, NAN, 3 }, m[3];
    CHECK_OK(fl_dist_allreduce(v, 3, FL_F32, FL_RED_SUM));
    CHECK(v[0] == 1 && isnan(v[1]) && v[2] == 3, "sum over one rank changed the data");
    CHECK_OK(fl_dist_allgather(v, m, sizeof v));
    CHECK(m[0] == 1 && m[2] == 3, "all_gather over one rank copies");
    CHECK_OK(fl_dist_barrier());
    CHECK(fl_dist_broadcast(v, 4, 1) == FL_EINVAL, "root 1 of a world of one");
    CHECK(fl_dist_allreduce(v, 3, FL_F16, FL_RED_MAX) == FL_OK, "no-op without MPI");
}

TEST(dist_ddp_buckets_and_unused_parameters) {
    float v[4] = { 1, 2, 3, 4 };
    fl_tensor *p[3] = { vec(v, 4), vec(v, 4), vec(v, 2) };
    const char *names[3] = { "a", "b", "c" };
    fl_ddp *d = NULL;
    /* 16-byte cap: each 4-element parameter fills a bucket; c (2 elements) starts the first one */
    fl_ddp_opts o = { .bucket_cap_bytes = 16, .wire = FL_F32, .find_unused = false };
    REQUIRE_OK(fl_ddp_new(&d, p, names, 3, &o));
    CHECK(fl_ddp_get_stats(d)->buckets == 3, "buckets %d", fl_ddp_get_stats(d)->buckets);
    CHECK(fl_ddp_bucket_of(d, 2) == 0 && fl_ddp_bucket_of(d, 0) == 2, "reverse registration order");
    /* loss uses a and b only: c gets no gradient -> an error naming it */
    fl_tensor *ab, *s;
    REQUIRE_OK(fl_binary(&ab, FL_OP_MUL, p[0], p[1]));
    REQUIRE_OK(fl_reduce(&s, FL_OP_SUM, ab, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_ddp_begin(d));
    REQUIRE_OK(fl_backward(s, NULL, false));
    fl_status st = fl_ddp_end(d);
    CHECK(st == FL_EINVAL && strstr(fl_last_error(), "'c' received no gradient"), "%s", fl_last_error());
    fl_ddp_free(d);
    /* with find_unused: the averaged (world of one: unchanged) gradients, c left without one */
    o.find_unused = true;
    o.bucket_cap_bytes = 1 << 20;
    REQUIRE_OK(fl_ddp_new(&d, p, names, 3, &o));
    CHECK(fl_ddp_get_stats(d)->buckets == 1, "one large bucket");
    for (int i = 0; i < 3; i++) fl_tensor_zero_grad(p[i]);
    fl_tensor *ab2, *s2;
    REQUIRE_OK(fl_binary(&ab2, FL_OP_MUL, p[0], p[1]));
    REQUIRE_OK(fl_reduce(&s2, FL_OP_SUM, ab2, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_ddp_begin(d));
    REQUIRE_OK(fl_backward(s2, NULL, false));
    REQUIRE_OK(fl_ddp_end(d));
    CHECK(p[0]->grad && at(p[0]->grad, 3) == 4 && at(p[1]->grad, 2) == 3, "a.grad = b, b.grad = a");
    CHECK(p[2]->grad == NULL, "unused everywhere: c.grad stays nil");
    fl_ddp_free(d);
    fl_tensor *ts[] = { p[0], p[1], p[2], ab, s, ab2, s2 };
    for (int i = 0; i < 7; i++) fl_tensor_release(ts[i]);
}

/* An FP8 gradient item (MS-AMP O1) whose cast is interrupted after its amax all-reduce ran: the cast's failure is a
 * packing failure (zeros sent, the step failed everywhere by fl_ddp_finish's flag) and the item's sum is issued at
 * once. Until stop 104 the item stayed unissued and fl_ddp_finish issued it again from the start, amax all-reduce
 * included, which on the other processes met the item's sum (stop 103's amax_done kept only an Iallreduce failure
 * from that). Over a world of one the collectives are identities; the wire bytes count the amax passes (4 + n). */
TEST(dist_ddp_fp8_item_interrupted_in_its_cast_runs_its_amax_once) {
    float v[4] = { 1, -2, 3, 0.5f };
    fl_tensor *p = vec(v, 4);
    p->grad_dtype = FL_E4M3;   /* an FP8-gradient parameter (core/ddp.c: one item of its own) */
    const char *names[1] = { "w" };
    fl_ddp *d = NULL;
    fl_ddp_opts o = { .bucket_cap_bytes = 1 << 20, .wire = FL_F32, .find_unused = true };
    REQUIRE_OK(fl_ddp_new(&d, &p, names, 1, &o));
    CHECK(fl_ddp_bucket_of(d, 0) == -1, "an FP8 item");
    REQUIRE_OK(fl_ddp_begin(d));
    fl_interrupt_set();   /* the item's cast (fl_quantize_f32) is its first interrupt poll: grad none, zeros packed */
    fl_status st = fl_ddp_end(d);
    fl_interrupt_clear();
    CHECK(st == FL_EINTR, "the cast's interruption is the step's error: %d %s", (int)st, fl_last_error());
    const fl_ddp_stats *s = fl_ddp_get_stats(d);
    CHECK(s->wire_bytes == 4 + 4, "one amax all-reduce and one sum of 4 bytes, got %lld wire bytes",
          (long long)s->wire_bytes);
    CHECK(s->steps == 0, "no step counted");
    /* the next step runs as ever */
    REQUIRE_OK(fl_ddp_begin(d));
    REQUIRE_OK(fl_ddp_end(d));
    CHECK(fl_ddp_get_stats(d)->wire_bytes == 4 + 4 && fl_ddp_get_stats(d)->steps == 1, "the next step: %lld bytes",
          (long long)fl_ddp_get_stats(d)->wire_bytes);
    fl_ddp_free(d);
    fl_tensor_release(p);
}
