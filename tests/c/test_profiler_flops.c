/* test_profiler_flops.c — with_flops' rules in the recorder (core/profiler.h), as torch.profiler counts: an op that
 * hides its inner FLOPs (torch's one op: aten::conv2d, aten::scaled_dot_product_attention) leaves every event inside
 * it at 0, however deep; an elementwise op's count (aten::add, aten::mul: the first input's elements) is kept where
 * the user called it (at top level, inside a range, or directly inside an autograd node that counts its ops) and not
 * inside another op or a node that counts none; and the real add and mul carry torch's counts.
 * tests/spec/profflops_spec.lua holds the whole against torch 2.15's numbers. */
#include "runner.h"
#include "ops_raw.h"
#include "profiler.h"

static double flops_of(uint64_t tok) {
    fl_prof_event e;
    int64_t i = fl_prof_index(tok);
    if (i < 0 || !fl_prof_get((size_t)i, &e)) return -1;
    return e.flops;
}

TEST(profiler_flops_hidden_inside_an_op_that_counts_as_one) {
    fl_prof_clear();
    REQUIRE_OK(fl_prof_start(FL_PROF_WITH_FLOPS));
    uint64_t op = fl_prof_begin("conv2d", FL_PROF_OP, NULL);
    fl_prof_hide_inner_flops(op);
    fl_prof_set_flops(op, 100);
    uint64_t gemm = fl_prof_begin("matmul", FL_PROF_OP, NULL);
    uint64_t deep = fl_prof_begin("mul", FL_PROF_OP, NULL);
    fl_prof_set_flops(gemm, 50);
    fl_prof_set_flops(deep, 7);
    fl_prof_end(deep);
    fl_prof_end(gemm);
    fl_prof_end(op);
    uint64_t after = fl_prof_begin("matmul", FL_PROF_OP, NULL);   /* outside it again: counted */
    fl_prof_set_flops(after, 9);
    fl_prof_end(after);
    fl_prof_stop();
    CHECK(flops_of(op) == 100, "the op's own count: %g", flops_of(op));
    CHECK(flops_of(gemm) == 0 && flops_of(deep) == 0, "inside: %g, %g", flops_of(gemm), flops_of(deep));
    CHECK(flops_of(after) == 9, "after it: %g", flops_of(after));
    fl_prof_clear();
}

TEST(profiler_flops_of_an_elementwise_op_where_the_user_called_it) {
    fl_prof_clear();
    REQUIRE_OK(fl_prof_start(FL_PROF_WITH_FLOPS));
    uint64_t top = fl_prof_begin("add", FL_PROF_OP, NULL);
    fl_prof_set_called_flops(top, 1);
    fl_prof_end(top);
    uint64_t range = fl_prof_begin("ProfilerStep#0", FL_PROF_RANGE, NULL);
    uint64_t in_range = fl_prof_begin("add", FL_PROF_OP, NULL);
    fl_prof_set_called_flops(in_range, 2);
    fl_prof_end(in_range);
    uint64_t lin = fl_prof_begin("linear", FL_PROF_OP, NULL);   /* linear's bias add: torch's addmm holds it */
    uint64_t bias = fl_prof_begin("add", FL_PROF_OP, NULL);
    fl_prof_set_called_flops(bias, 3);
    fl_prof_end(bias);
    fl_prof_end(lin);
    uint64_t bwd = fl_prof_begin("backward", FL_PROF_OP, NULL);
    uint64_t mulb = fl_prof_begin("MulBackward", FL_PROF_OP, NULL);
    fl_prof_mark_node(mulb, true);
    uint64_t m = fl_prof_begin("mul", FL_PROF_OP, NULL);
    fl_prof_set_called_flops(m, 4);
    fl_prof_end(m);
    fl_prof_end(mulb);
    uint64_t gelub = fl_prof_begin("GeluBackward", FL_PROF_OP, NULL);
    fl_prof_mark_node(gelub, false);
    uint64_t g = fl_prof_begin("mul", FL_PROF_OP, NULL), gg = fl_prof_begin("matmul", FL_PROF_OP, NULL);
    fl_prof_set_called_flops(g, 5);
    fl_prof_set_flops(gg, 6);
    fl_prof_end(gg);
    fl_prof_end(g);
    fl_prof_end(gelub);
    uint64_t acc = fl_prof_begin("add", FL_PROF_OP, NULL);   /* the walk's own sum of two gradients */
    fl_prof_set_called_flops(acc, 7);
    fl_prof_end(acc);
    fl_prof_end(bwd);
    fl_prof_end(range);
    fl_prof_stop();
    CHECK(flops_of(top) == 1 && flops_of(in_range) == 2, "called: %g, %g", flops_of(top), flops_of(in_range));
    CHECK(flops_of(bias) == 0, "inside linear: %g", flops_of(bias));
    CHECK(flops_of(m) == 4, "inside MulBackward: %g", flops_of(m));
    CHECK(flops_of(g) == 0 && flops_of(gg) == 0, "inside GeluBackward: %g, %g", flops_of(g), flops_of(gg));
    CHECK(flops_of(acc) == 0, "the walk's sum: %g", flops_of(acc));
    fl_prof_clear();
}

TEST(profiler_flops_of_add_and_mul_are_torchs) {
    fl_tensor *v = NULL, *x = NULL, *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
    REQUIRE_OK(fl_tensor_full(&v, FL_F32, 1, (int64_t[]){ 8 }, 1.0, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_full(&x, FL_BF16, 2, (int64_t[]){ 4, 8 }, 1.0, FL_DEV_CPU));
    fl_prof_clear();
    REQUIRE_OK(fl_prof_start(FL_PROF_WITH_FLOPS));
    CHECK_OK(fl_binary_raw(&r1, FL_OP_ADD, v, x));               /* torch: v's 8 elements */
    CHECK_OK(fl_binary_raw(&r2, FL_OP_MUL, x, v));               /* x's 32 */
    CHECK_OK(fl_binary_raw(&r3, FL_OP_SUB, x, v));               /* none */
    CHECK_OK(fl_binary_scalar_raw(&r4, FL_OP_MUL, x, 2.0, true));   /* 2 * x: aten::mul(x, 2), 32 */
    fl_prof_stop();
    fl_prof_event e[4];
    CHECK(fl_prof_count() == 4, "%zu events", fl_prof_count());
    for (size_t i = 0; i < 4 && i < fl_prof_count(); i++) fl_prof_get(i, &e[i]);
    CHECK(e[0].flops == 8 && e[1].flops == 32 && e[2].flops == 0 && e[3].flops == 32, "%g %g %g %g", e[0].flops,
          e[1].flops, e[2].flops, e[3].flops);
    fl_prof_clear();
    fl_tensor_release(v); fl_tensor_release(x);
    fl_tensor_release(r1); fl_tensor_release(r2); fl_tensor_release(r3); fl_tensor_release(r4);
}
