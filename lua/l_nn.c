/* l_nn.c — the differentiable NN ops of core/nn.h for Lua, as require("fp8.core")._nn (also
 * package.loaded["fp8._nn"]); lua/fp8/nn/functional.lua re-exports them as fp8.nn.functional.
 * Dims are 1-based, negative from the end; option tables reject unknown keys. */
#include <string.h>
#include <math.h>
#include "l_util.h"
#include "nn.h"
#include "ops.h"

/* An optional tensor argument: nil/none → NULL. */
static fl_tensor *opt_tensor(lua_State *L, int arg) {
    return lua_isnoneornil(L, arg) ? NULL : fl_lchecktensor(L, arg);
}

static void no_extra(lua_State *L, int first, const char *fname) {
    if (!lua_isnone(L, first))
        luaL_error(L, "%s: too many arguments (got an extra %s as argument %d)", fname, luaL_typename(L, first), first);
}

static int l_linear(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2), *b = opt_tensor(L, 3);
    no_extra(L, 4, "linear");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_linear(slot, x, w, b));
    return 1;
}

/* linear_relu_bf16(x, w [, b]): relu(linear(x, w, b)) rounded once to bf16, under a bf16 autocast with nothing
 * requiring grad (a TransformerEncoderLayer's feed-forward block in inference) */
static int l_linear_relu_bf16(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2), *b = opt_tensor(L, 3);
    no_extra(L, 4, "linear_relu_bf16");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_linear_relu_bf16(slot, x, w, b));
    return 1;
}

/* The bindings of one tensor and no more arguments, whose result is f(x); name is what an extra argument's error
 * names (the bf16 forms keep their ops' names) */
static int one_tensor(lua_State *L, const char *name, fl_status (*f)(fl_tensor **, const fl_tensor *)) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    no_extra(L, 2, name);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, f(slot, x));
    return 1;
}

static int l_relu(lua_State *L) { return one_tensor(L, "relu", fl_relu); }
static int l_silu(lua_State *L) { return one_tensor(L, "silu", fl_silu); }
/* relu_bf16(x): relu of a bf16 x that records no gradient, in bf16 (x:relu()'s form with nothing to record) */
static int l_relu_bf16(lua_State *L) { return one_tensor(L, "relu", fl_relu_bf16); }
/* silu_bf16(x): silu of a bf16 x that records no gradient, rounded once to bf16 (F.silu's inference form) */
static int l_silu_bf16(lua_State *L) { return one_tensor(L, "silu", fl_silu_bf16); }

/* rms_norm_fwd(x, w or nil, eps) → y, or nil where the device has no one-pass form (internal: F.rms_norm's) */
static int l_rms_norm_fwd(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = lua_isnoneornil(L, 2) ? NULL : fl_lchecktensor(L, 2);
    const double eps = luaL_checknumber(L, 3);
    no_extra(L, 4, "rms_norm");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_rms_norm_fwd(slot, x, w, eps));
    if (!*slot) lua_pushnil(L);
    return 1;
}

/* gelu(x [, "none"|"tanh"]) */
static int l_gelu(lua_State *L) {
    static const char *const names[] = { "none", "tanh", NULL };
    fl_tensor *x = fl_lchecktensor(L, 1);
    int approx = 0;
    if (!lua_isnoneornil(L, 2)) {
        if (lua_type(L, 2) != LUA_TSTRING)
            return luaL_argerror(L, 2, lua_pushfstring(L, "approximate must be \"none\" or \"tanh\", got %s", luaL_typename(L, 2)));
        const char *a = lua_tostring(L, 2);
        approx = -1;
        for (int i = 0; names[i]; i++) if (strcmp(a, names[i]) == 0) approx = i;
        if (approx < 0) return luaL_argerror(L, 2, lua_pushfstring(L, "approximate must be \"none\" or \"tanh\", got \"%s\"", a));
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_gelu(slot, x, approx));
    return 1;
}

/* 1-based dim (negative from the end) → 0-based. */
static int check_dim(lua_State *L, int arg, const fl_tensor *t, const char *fname) {
    int isint = 0;
    lua_Integer d = lua_tointegerx(L, arg, &isint);
    int n = t->ndim;
    if (!isint) luaL_error(L, "%s: dim must be an integer, got %s", fname, luaL_typename(L, arg));
    if (d == 0 || d > n || d < -n) luaL_error(L, "%s: dim %d out of range for a %d-d tensor (valid: 1..%d or -%d..-1)", fname, (int)d, n, n, n);
    return d > 0 ? (int)d - 1 : n + (int)d;
}

/* softmax over any dim (core/nn.c's fl_softmax_dim) */
static int softmax_any(lua_State *L, int log) {
    const char *fname = log ? "log_softmax" : "softmax";
    fl_tensor *x = fl_lchecktensor(L, 1);
    if (x->ndim == 0) return luaL_error(L, "%s: expected a tensor with at least 1 dim, got a 0-d tensor", fname);
    int d = lua_isnoneornil(L, 2) ? x->ndim - 1 : check_dim(L, 2, x, fname);
    no_extra(L, 3, fname);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_softmax_dim(slot, x, d, log));
    return 1;
}
static int l_softmax(lua_State *L) { return softmax_any(L, 0); }
static int l_log_softmax(lua_State *L) { return softmax_any(L, 1); }

/* cross_entropy(logits[N, C] (or [..., C]), target[N] (0-based class ids) [, {ignore_index=-100, label_smoothing=0}]) */
static int l_cross_entropy(lua_State *L) {
    static const char *const valid[] = { "ignore_index", "label_smoothing", NULL };
    fl_tensor *lg = fl_lchecktensor(L, 1), *tg = fl_lchecktensor(L, 2);
    fl_lcheckopts(L, 3, "cross_entropy", valid);
    no_extra(L, 4, "cross_entropy");
    double ii = fl_lfieldnumber(L, 3, "cross_entropy", "ignore_index", -100);
    if (ii != floor(ii)) return luaL_error(L, "cross_entropy: ignore_index must be an integer, got %f", ii);
    double ls = fl_lfieldnumber(L, 3, "cross_entropy", "label_smoothing", 0);
    if (!(ls >= 0 && ls <= 1)) return luaL_error(L, "cross_entropy: label_smoothing must be in [0, 1], got %f", ls);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_cross_entropy(slot, lg, tg, (int64_t)ii, ls));
    return 1;
}

/* name(a, b) for a core op of two tensors: fn(a, b) boxed */
static int two_tensors(lua_State *L, const char *name,
                       fl_status (*fn)(fl_tensor **, const fl_tensor *, const fl_tensor *)) {
    fl_tensor *a = fl_lchecktensor(L, 1), *b = fl_lchecktensor(L, 2);
    no_extra(L, 3, name);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fn(slot, a, b));
    return 1;
}

static int l_mse_loss(lua_State *L) { return two_tensors(L, "mse_loss", fl_mse_loss); }

/* layer_norm(x, w|nil, b|nil [, eps=1e-5]) */
static int l_layer_norm(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = opt_tensor(L, 2), *b = opt_tensor(L, 3);
    double eps = 1e-5;
    if (!lua_isnoneornil(L, 4)) {
        if (lua_type(L, 4) != LUA_TNUMBER) return luaL_argerror(L, 4, lua_pushfstring(L, "eps must be a number, got %s", luaL_typename(L, 4)));
        eps = lua_tonumber(L, 4);
    }
    no_extra(L, 5, "layer_norm");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_layer_norm(slot, x, w, b, eps));
    return 1;
}

/* _add_layer_norm(x, r, w|nil, b|nil, eps): layer_norm(x + r) recording nothing (a residual block's norm in
 * inference; fl_add_layer_norm) */
static int l_add_layer_norm(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *r = fl_lchecktensor(L, 2), *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
    const double eps = luaL_checknumber(L, 5);
    no_extra(L, 6, "_add_layer_norm");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_add_layer_norm(slot, x, r, w, b, eps));
    return 1;
}

/* _channel_norm(x, groups, w|nil, b|nil, eps) -> y, mean, var: fl_channel_norm (groups 0: BatchNorm's batch
 * statistics); the Lua norms (lua/fp8/nn/batch_norm.lua) call it for the devices that have its kernels. */
static int l_channel_norm(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    int isint = 0;
    lua_Integer g = lua_tointegerx(L, 2, &isint);
    if (!isint || g < 0)
        return luaL_argerror(L, 2, lua_pushfstring(L, "groups must be a non-negative integer, got %s", luaL_typename(L, 2)));
    fl_tensor *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
    if (lua_type(L, 5) != LUA_TNUMBER)
        return luaL_argerror(L, 5, lua_pushfstring(L, "eps must be a number, got %s", luaL_typename(L, 5)));
    double eps = lua_tonumber(L, 5);
    no_extra(L, 6, "_channel_norm");
    fl_tensor **y = fl_lnewbox(L), **mean = fl_lnewbox(L), **var = fl_lnewbox(L);
    FL_LCALL(L, fl_channel_norm(y, mean, var, x, w, b, (int64_t)g, eps));
    return 3;
}

/* _batch_norm_eval(x, mean, den, w|nil, b|nil) -> y: fl_batch_norm_eval, BatchNorm's eval pass with no gradient to
 * record (lua/fp8/nn/batch_norm.lua) for the devices that have its kernel */
static int l_batch_norm_eval(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *mean = fl_lchecktensor(L, 2), *den = fl_lchecktensor(L, 3);
    fl_tensor *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
    no_extra(L, 6, "_batch_norm_eval");
    fl_tensor **y = fl_lnewbox(L);
    FL_LCALL(L, fl_batch_norm_eval(y, x, mean, den, w, b));
    return 1;
}

/* _embedding_bag(ids, weight, starts, mode, pad [, psw]) -> [B, D]: fl_embedding_bag, EmbeddingBag's paths
 * (lua/fp8/nn/embedding_bag.lua) for fp32 CPU weights; mode "sum", "mean" or "max"; pad -1: none; psw the per-sample
 * weights (mode "sum") */
static int l_embedding_bag(lua_State *L) {
    fl_tensor *ids = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2), *starts = fl_lchecktensor(L, 3);
    static const char *const modes[] = { "sum", "mean", "max", NULL };
    const int mode = luaL_checkoption(L, 4, NULL, modes);
    int isint = 0;
    lua_Integer pad = lua_tointegerx(L, 5, &isint);
    if (!isint || pad < -1)
        return luaL_argerror(L, 5, lua_pushfstring(L, "pad must be an integer >= -1, got %s", luaL_typename(L, 5)));
    fl_tensor *psw = opt_tensor(L, 6);
    no_extra(L, 7, "_embedding_bag");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_embedding_bag(slot, ids, w, starts, mode, (int64_t)pad, psw));
    return 1;
}

static int l_embedding(lua_State *L) { return two_tensors(L, "embedding", fl_embedding); }

/* dropout(x [, p=0.5 [, training=true]]) — the mask comes from the default generator (fp8.manual_seed). */
static int l_dropout(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    double p = 0.5;
    if (!lua_isnoneornil(L, 2)) {
        if (lua_type(L, 2) != LUA_TNUMBER) return luaL_argerror(L, 2, lua_pushfstring(L, "p must be a number in [0, 1], got %s", luaL_typename(L, 2)));
        p = lua_tonumber(L, 2);
    }
    bool training = true;
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_isboolean(L, 3)) return luaL_argerror(L, 3, lua_pushfstring(L, "training must be a boolean, got %s", luaL_typename(L, 3)));
        training = lua_toboolean(L, 3);
    }
    no_extra(L, 4, "dropout");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_dropout(slot, x, p, training, NULL));
    return 1;
}

/* The options table of both attention functions at index `arg`: {is_causal=false, scale=1/sqrt(D)} (scale 0:
 * the default); nothing may follow it. */
static void attn_opts(lua_State *L, int arg, const char *fname, bool *causal, double *scale) {
    static const char *const valid[] = { "is_causal", "scale", NULL };
    fl_lcheckopts(L, arg, fname, valid);
    no_extra(L, arg + 1, fname);
    *causal = fl_lfieldbool(L, arg, fname, "is_causal", false);
    *scale = fl_lfieldnumber(L, arg, fname, "scale", 0);
    if (!lua_isnoneornil(L, arg)) {
        lua_getfield(L, arg, "scale");
        bool given = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (given && !(*scale > 0 && isfinite(*scale)))
            luaL_error(L, "%s: scale must be a positive finite number, got %f", fname, *scale);
    }
}

/* scaled_dot_product_attention(q, k, v [B, H, T, D] [, {is_causal=false, scale=1/sqrt(D)}]) */
static int l_sdpa(lua_State *L) {
    fl_tensor *q = fl_lchecktensor(L, 1), *k = fl_lchecktensor(L, 2), *v = fl_lchecktensor(L, 3);
    bool causal;
    double scale;
    attn_opts(L, 4, "scaled_dot_product_attention", &causal, &scale);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_sdpa(slot, q, k, v, causal, scale));
    return 1;
}

/* qkv_attention(qkv [B, T, 3C], n_head [, {is_causal=false, scale=1/sqrt(D)}]) -> [B, T, C] */
static int l_sdpa_qkv(lua_State *L) {
    fl_tensor *qkv = fl_lchecktensor(L, 1);
    int isint = 0;
    lua_Integer h = lua_tointegerx(L, 2, &isint);
    if (!isint || h < 1)
        return luaL_error(L, "qkv_attention: n_head must be a positive integer, got %s", fl_lshow(L, 2));
    bool causal;
    double scale;
    attn_opts(L, 3, "qkv_attention", &causal, &scale);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_sdpa_qkv(slot, qkv, (int64_t)h, causal, scale));
    return 1;
}

/* The window geometry at arg: a list of 10 integers {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr} (fl_window) */
static void check_window(lua_State *L, int arg, const char *fname, fl_window *g) {
    if (lua_type(L, arg) != LUA_TTABLE || lua_rawlen(L, arg) != 10)
        luaL_error(L, "%s: expected the geometry {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr} (10 integers) as argument "
                   "%d, got %s", fname, arg, lua_type(L, arg) == LUA_TTABLE ? "a table of another length"
                   : luaL_typename(L, arg));
    int64_t v[10];
    for (int i = 0; i < 10; i++) {
        int isint = 0;
        lua_rawgeti(L, arg, i + 1);
        v[i] = (int64_t)lua_tointegerx(L, -1, &isint);
        if (!isint || lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "%s: the geometry's entry %d must be an integer, got %s", fname, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    *g = (fl_window){ v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], 0 };
}

/* im2col(x[N, C, H, W], {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr} [, pad_value=0]) → [N, C, kh·kw, OH·OW]: the
 * windows (fl_unfold); F.unfold, the convolutions and the poolings are made of it (lua/fp8/nn/conv.lua) */
static int l_im2col(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    fl_window g;
    check_window(L, 2, "im2col", &g);
    if (!lua_isnoneornil(L, 3)) {
        if (lua_type(L, 3) != LUA_TNUMBER)
            return luaL_error(L, "im2col: pad_value must be a number, got %s", luaL_typename(L, 3));
        g.pad_value = lua_tonumber(L, 3);
    }
    no_extra(L, 4, "im2col");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_unfold(slot, x, &g));
    return 1;
}

/* col2im(cols[N, C, kh·kw, OH·OW], h, w, {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr}) → [N, C, h, w]: the windows added
 * back (fl_fold) */
static int l_col2im(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    int64_t hw[2];
    for (int i = 0; i < 2; i++) {
        int isint = 0;
        hw[i] = (int64_t)lua_tointegerx(L, 2 + i, &isint);
        if (!isint || lua_type(L, 2 + i) != LUA_TNUMBER || hw[i] < 0)
            return luaL_error(L, "col2im: %s must be an integer >= 0, got %s", i ? "w" : "h",
                              fl_lshow(L, 2 + i));
    }
    fl_window g;
    check_window(L, 4, "col2im", &g);
    no_extra(L, 5, "col2im");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_fold(slot, x, hw[0], hw[1], &g));
    return 1;
}

/* resample(x, dim, taps, pos, w): x (fp32) resampled along dim (1-based) to #pos / taps positions, position j the
 * weighted sum of x at pos[j·taps + t] (0-based) with weights w[...] (fl_resample); F.interpolate's linear and cubic
 * modes (lua/fp8/nn/upsample.lua). pos and w are plain lists of equal length, a multiple of taps. */
static int l_resample(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    const int dim = (int)fl_lcheckint(L, 2, "resample", "dim", 1, x->ndim > 0 ? x->ndim : 1);
    const int taps = (int)fl_lcheckint(L, 3, "resample", "taps", 1, 8);
    luaL_checktype(L, 4, LUA_TTABLE);
    luaL_checktype(L, 5, LUA_TTABLE);
    no_extra(L, 6, "resample");
    const lua_Integer k = fl_lcheckrawlist(L, 4, "resample");
    if (fl_lcheckrawlist(L, 5, "resample") != k || k == 0 || k % taps != 0 || k > FL_LMAX_TABLE_LEN)
        return luaL_error(L, "resample: pos and w must be lists of one equal length, a positive multiple of taps %d "
                          "(got %d and %d)", taps, (int)k, (int)lua_rawlen(L, 5));
    int64_t *pos = lua_newuserdatauv(L, (size_t)k * sizeof *pos, 0);
    float *w = lua_newuserdatauv(L, (size_t)k * sizeof *w, 0);
    for (lua_Integer i = 0; i < k; i++) {
        int isint = 0;
        lua_rawgeti(L, 4, i + 1);
        pos[i] = (int64_t)lua_tointegerx(L, -1, &isint);
        if (!isint) return luaL_error(L, "resample: pos[%d] must be an integer, got %s", (int)i + 1, luaL_typename(L, -1));
        lua_rawgeti(L, 5, i + 1);
        if (lua_type(L, -1) != LUA_TNUMBER)
            return luaL_error(L, "resample: w[%d] must be a number, got %s", (int)i + 1, luaL_typename(L, -1));
        w[i] = (float)lua_tonumber(L, -1);
        lua_pop(L, 2);
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_resample(slot, x, dim - 1, (int64_t)(k / taps), taps, pos, w));
    return 1;
}

/* conv_depthwise(x[N, C, H, W], w[C·m, 1, kh, kw], {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr}) → [N, C·m, OH, OW]:
 * conv2d with groups = C computed directly (fl_conv_depthwise); F.conv2d takes it for such a convolution */
static int l_conv_depthwise(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2);
    fl_window g;
    check_window(L, 3, "conv_depthwise", &g);
    no_extra(L, 4, "conv_depthwise");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_conv_depthwise(slot, x, w, &g));
    return 1;
}

/* max_pool(x[N, C, H, W], {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr}) → values, indices [N, C, OH, OW]: each
 * window's maximum and its flat input position (fl_max_pool); F.max_pool1d/2d are made of it */
static int l_max_pool(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    fl_window g;
    check_window(L, 2, "max_pool", &g);
    no_extra(L, 3, "max_pool");
    fl_tensor **v = fl_lnewbox(L), **i = fl_lnewbox(L);
    FL_LCALL(L, fl_max_pool(v, i, x, &g));
    return 2;
}

/* avg_pool(x[N, C, H, W], {kh, kw, sh, sw, 1, 1, pt, pb, pl, pr}, count_include_pad, divisor) → [N, C, OH, OW]:
 * each window's average (fl_avg_pool; divisor 0: the count of its positions); F.avg_pool1d/2d are made of it */
static int l_avg_pool(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    fl_window g;
    check_window(L, 2, "avg_pool", &g);
    if (lua_type(L, 3) != LUA_TBOOLEAN)
        return luaL_error(L, "avg_pool: count_include_pad must be a boolean, got %s", luaL_typename(L, 3));
    int isint = 0;
    lua_Integer div = lua_tointegerx(L, 4, &isint);
    if (!isint || lua_type(L, 4) != LUA_TNUMBER || div < 0)
        return luaL_error(L, "avg_pool: divisor must be an integer >= 0 (0: the count), got %s",
                          fl_lshow(L, 4));
    no_extra(L, 5, "avg_pool");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_avg_pool(slot, x, &g, lua_toboolean(L, 3), (int64_t)div));
    return 1;
}

/* conv2d_cols(x[N, C, H, W], w[OC, C/groups, kh, kw], bias[OC] or nil, {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr},
 * groups, wide, bwd16) → [N, OC, OH, OW]: conv2d as im2col + GEMM, the columns made a few samples at a time
 * (fl_conv2d_cols; CPU tensors) */
static int l_conv2d_cols(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1), *w = fl_lchecktensor(L, 2);
    fl_tensor *b = lua_isnil(L, 3) ? NULL : fl_lchecktensor(L, 3);
    fl_window g;
    check_window(L, 4, "conv2d_cols", &g);
    int isint = 0;
    lua_Integer groups = lua_tointegerx(L, 5, &isint);
    if (!isint || lua_type(L, 5) != LUA_TNUMBER || groups < 1)
        return luaL_error(L, "conv2d_cols: groups must be an integer >= 1, got %s", fl_lshow(L, 5));
    for (int i = 6; i <= 7; i++)
        if (lua_type(L, i) != LUA_TBOOLEAN)
            return luaL_error(L, "conv2d_cols: %s must be a boolean, got %s", i == 6 ? "wide" : "bwd16",
                              luaL_typename(L, i));
    no_extra(L, 8, "conv2d_cols");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_conv2d_cols(slot, x, w, b, &g, (int64_t)groups, lua_toboolean(L, 6), lua_toboolean(L, 7)));
    return 1;
}

/* matmul_wide(a, b): a·b of two bf16 (or two fp16) tensors, the GEMM in their dtype and the result fp32
 * (fl_matmul_wide): what a bf16 convolution adds its bias to before rounding once */
static int l_matmul_wide(lua_State *L) { return two_tensors(L, "matmul_wide", fl_matmul_wide); }

static const luaL_Reg funcs[] = {
    {"linear", l_linear}, {"linear_relu_bf16", l_linear_relu_bf16}, {"relu", l_relu}, {"relu_bf16", l_relu_bf16}, {"silu", l_silu}, {"silu_bf16", l_silu_bf16},
    {"rms_norm_fwd", l_rms_norm_fwd}, {"gelu", l_gelu}, {"softmax", l_softmax},
    {"log_softmax", l_log_softmax}, {"cross_entropy", l_cross_entropy}, {"mse_loss", l_mse_loss},
    {"layer_norm", l_layer_norm}, {"_add_layer_norm", l_add_layer_norm}, {"embedding", l_embedding}, {"dropout", l_dropout},
    {"_channel_norm", l_channel_norm}, {"_batch_norm_eval", l_batch_norm_eval}, {"_embedding_bag", l_embedding_bag},
    {"scaled_dot_product_attention", l_sdpa},
    {"qkv_attention", l_sdpa_qkv},
    {"im2col", l_im2col}, {"col2im", l_col2im}, {"conv_depthwise", l_conv_depthwise}, {"resample", l_resample},
    {"matmul_wide", l_matmul_wide}, {"max_pool", l_max_pool}, {"avg_pool", l_avg_pool},
    {"conv2d_cols", l_conv2d_cols},
    {NULL, NULL},
};

/* Named _nn (not nn) so fp8/init.lua's copy of core fields leaves fp8.nn to the Lua nn library. */
void fl_lopen_nn(lua_State *L) {
    luaL_newlib(L, funcs);
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "fp8._nn");
    lua_pop(L, 1);
    lua_setfield(L, -2, "_nn");
}
