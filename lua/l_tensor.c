/* l_tensor.c — the fp8.Tensor class (liolib.c style: named metatable, methods behind __index)
 * and the tensor factories. Every result is boxed before the core call that fills it, so a Lua
 * error never leaks a core tensor. Dims and indices are 1-based here, 0-based in the core. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include "l_util.h"
#include "device.h"
#include "ops.h"
#include "rng.h"
#include "autograd.h"

/* ---- GC pressure: every new tensor box polls (fl_lnewbox, l_util.c); so does __index, the hot entry point ---- */

/* ---- argument helpers ------------------------------------------------------------------- */

/* fname names the method in the error ("sum: dim must be an integer, got 1.5"), as check_dim's other errors do */
static int64_t check_int(lua_State *L, int idx, const char *fname, const char *what) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    if (!isint) {
        if (lua_type(L, idx) == LUA_TNUMBER)
            luaL_error(L, "%s: %s must be an integer, got %s", fname, what, lua_tostring(L, idx));
        luaL_error(L, "%s: %s must be an integer, got %s", fname, what, luaL_typename(L, idx));
    }
    return (int64_t)v;
}

/* Optional trailing factory options: a dtype name, or {dtype=name, device="cpu"|"cuda"}. Returns the
 * dtype (the default when absent) and sets *device (FL_DEV_CPU when absent; pass NULL where a device
 * is not accepted). */
static fl_dtype opt_dtype_at_dev(lua_State *L, int idx, fl_dtype def, const char *fname, int *device) {
    int t = lua_type(L, idx);
    if (device) *device = FL_DEV_CPU;
    if (t == LUA_TNONE || t == LUA_TNIL) return def;
    if (t == LUA_TSTRING) return fl_lcheckdtype(L, idx);
    static const char *const with_device[] = { "dtype", "device", NULL }, *const dtype_only[] = { "dtype", NULL };
    if (t == LUA_TTABLE) {
        fl_lcheckopts(L, idx, fname, device ? with_device : dtype_only);
        fl_dtype dt = def;
        if (lua_getfield(L, idx, "dtype") != LUA_TNIL) {
            if (lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "%s: dtype must be a string (%s), got %s", fname, fl_dtype_choices(),
                           luaL_typename(L, -1));
            dt = fl_ldtype_from(L, lua_tostring(L, -1), "dtype");
        }
        lua_pop(L, 1);
        if (device && lua_getfield(L, idx, "device") != LUA_TNIL) *device = fl_lcheckdevice(L, lua_gettop(L), fname);
        if (device) lua_pop(L, 1);
        return dt;
    }
    luaL_argerror(L, idx, lua_pushfstring(L, "expected a dtype name or {%s=...}, got %s", device ? "dtype=..., device" : "dtype",
                                          luaL_typename(L, idx)));
    return def;
}
static fl_dtype opt_dtype_at(lua_State *L, int idx, fl_dtype def, const char *fname) {
    return opt_dtype_at_dev(L, idx, def, fname, NULL);
}

/* A factory result made on the CPU moved to `device` in its box (a no-op for the CPU). */
static void to_device_in_box(lua_State *L, fl_tensor **slot, int device) {
    if (device == FL_DEV_CPU) return;
    fl_tensor *moved = NULL;
    fl_status st = fl_tensor_to_device(&moved, *slot, device);
    if (st != FL_OK) fl_lcheck(L, st);
    fl_tensor_release(*slot);
    *slot = moved;
}

/* Factories make fp32/bf16/fp16 tensors; FP8 ones come from :quantize. */
static void reject_fp8_dtype(lua_State *L, fl_dtype dt, const char *fname) {
    if (fl_format(dt)->is_fp8)
        luaL_error(L, "%s: dtype %s is an FP8 format; create a fp32 tensor and call :quantize(\"%s\")",
                   fname, fl_format(dt)->name, fl_format(dt)->name);
}

/* Read one size list entry at the top of the stack (popped). allow_infer: -1 permitted. */
static int64_t shape_entry(lua_State *L, int dim, int allow_infer, const char *fname) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint) {
        const char *got = lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1);
        luaL_error(L, "%s: size of dimension %d must be an integer, got %s", fname, dim, got);
    }
    if (v < 0 && !(allow_infer && v == -1))
        luaL_error(L, "%s: size of dimension %d must be >= 0%s, got %I", fname, dim,
                   allow_infer == 2 ? " (or -1 to keep it)" : allow_infer ? " (or -1 to infer it)" : "", v);
    lua_pop(L, 1);
    return (int64_t)v;
}

/* A shape given as a table {2, 3} at `first`, or as integers first, first+1, ... Returns the index
 * of the first argument after the shape. */
static int parse_shape(lua_State *L, int first, int *ndim, int64_t *shape, int allow_infer, const char *fname) {
    if (lua_type(L, first) == LUA_TTABLE) {
        lua_Integer n = fl_lchecklen(L, first, fname, "shape", FL_LMAX_TABLE_LEN);
        if (n > FL_MAX_DIMS)
            luaL_error(L, "%s: at most %d dimensions, got %I", fname, FL_MAX_DIMS, n);
        for (int i = 0; i < n; i++) {
            lua_geti(L, first, i + 1);
            shape[i] = shape_entry(L, i + 1, allow_infer, fname);
        }
        *ndim = (int)n;
        return first + 1;
    }
    if (lua_type(L, first) != LUA_TNUMBER)   /* a nil (a misspelt variable) was taken as a 0-d shape; {} is one */
        luaL_error(L, "%s: expected a shape (a list {d1, d2, ...}, {} for 0-d, or sizes), got %s", fname,
                   luaL_typename(L, first));
    int n = 0, i = first;
    while (lua_type(L, i) == LUA_TNUMBER) {
        if (n == FL_MAX_DIMS) luaL_error(L, "%s: at most %d dimensions", fname, FL_MAX_DIMS);
        lua_pushvalue(L, i);
        shape[n] = shape_entry(L, n + 1, allow_infer, fname);
        n++, i++;
    }
    *ndim = n;
    return i;
}


/* 1-based (or negative from the end) dim → 0-based; fname names the method in the error. */
static int check_dim(lua_State *L, int arg, int ndim, const char *fname) {
    int64_t d = check_int(L, arg, fname, "dim");
    if (ndim == 0)
        luaL_error(L, "%s: dim %I given, but the tensor is 0-d (it has no dimensions)", fname, (lua_Integer)d);
    if (d >= 1 && d <= ndim) return (int)(d - 1);
    if (d < 0 && d >= -ndim) return (int)(ndim + d);
    luaL_error(L, "%s: dim %I out of range for a %d-d tensor (valid: 1..%d or -%d..-1)", fname, (lua_Integer)d, ndim,
               ndim, ndim);
    return 0;
}

/* A reduction's dim of a 0-d tensor: 1 or -1 name its one implicit dim, as torch's 0 and -1 do (FL_ALL_DIMS: the
 * whole of it); other tensors go through check_dim. */
static int check_reduce_dim(lua_State *L, int arg, int ndim, const char *fname) {
    if (ndim != 0) return check_dim(L, arg, ndim, fname);
    int64_t d = check_int(L, arg, fname, "dim");
    if (d != 1 && d != -1)
        luaL_error(L, "%s: dim %I out of range for a 0-d tensor (valid: 1 or -1, its one implicit dim)", fname,
                   (lua_Integer)d);
    return FL_ALL_DIMS;
}

/* 1-based (or negative) index along dim d → 0-based; fname names the call in the error. */
static int64_t norm_index(lua_State *L, lua_Integer i, const fl_tensor *t, int d, const char *fname) {
    int64_t n = t->shape[d];
    if (i >= 1 && i <= n) return i - 1;
    if (i < 0 && i >= -n) return n + i;
    /* x[#x + 1]: what ipairs(x) reads last (it stops at a nil, which a tensor never gives: the loop ran, then this) */
    const bool past = d == 0 && i == n + 1 && strcmp(fname, "x[i]") == 0;
    luaL_error(L, "%s: index %I out of range for dimension %d of size %I%s", fname, i, d + 1, (lua_Integer)n,
               i == 0 ? " (indices are 1-based)"
                      : past ? " (ipairs(x) reads until an index fails: iterate with for i = 1, #x, or over x:unbind())"
                             : "");
    return 0;
}

/* ---- factories -------------------------------------------------------------------------- */

/* zeros / ones / empty(shape [, dtype | {dtype=, device=}]): filled with 0, with 1, or left uninitialised. */
typedef enum { FILL_ZEROS, FILL_ONES, FILL_NONE } fill_kind;
static int l_factory(lua_State *L, fill_kind fill, const char *fname) {
    int ndim; int64_t shape[FL_MAX_DIMS];
    int next = parse_shape(L, 1, &ndim, shape, 0, fname);
    fl_lmaxargs(L, next, fname, "(shape [, dtype | {dtype=, device=}])");
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, next, FL_F32, fname, &dev);
    reject_fp8_dtype(L, dt, fname);
    fl_tensor **slot = fl_lnewbox(L);
    if (fill == FILL_ZEROS) FL_LCALL(L, fl_tensor_zeros(slot, dt, ndim, shape, dev));
    else if (fill == FILL_ONES) FL_LCALL(L, fl_tensor_full(slot, dt, ndim, shape, 1, dev));
    else FL_LCALL(L, fl_tensor_empty(slot, dt, ndim, shape, dev));
    return 1;
}
static int l_zeros(lua_State *L) { return l_factory(L, FILL_ZEROS, "zeros"); }
static int l_ones(lua_State *L) { return l_factory(L, FILL_ONES, "ones"); }
static int l_empty(lua_State *L) { return l_factory(L, FILL_NONE, "empty"); }

/* torch's rule for a number written into a tensor of dtype dt: a finite one past the dtype's range is refused, not
 * written as inf. kind: what the hint calls an infinite one ("fill", "value"). */
static void check_in_range(lua_State *L, const char *fname, double v, fl_dtype dt, const char *kind) {
    if (isfinite(v) && fabs(v) > fl_format(dt)->max)
        luaL_error(L, "%s: value %f overflows %s (largest finite %f; give ±math.huge for an infinite %s)", fname, v,
                   fl_format(dt)->name, fl_format(dt)->max, kind);
}

static int l_full(lua_State *L) {
    int ndim; int64_t shape[FL_MAX_DIMS];
    if (lua_type(L, 1) != LUA_TTABLE)
        return luaL_argerror(L, 1, lua_pushfstring(L, "expected a shape table like {2, 3}, got %s", luaL_typename(L, 1)));
    parse_shape(L, 1, &ndim, shape, 0, "full");
    fl_lmaxargs(L, 3, "full", "(shape, value [, dtype | {dtype=, device=}])");
    double v = luaL_checknumber(L, 2);
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, 3, FL_F32, "full", &dev);
    reject_fp8_dtype(L, dt, "full");
    check_in_range(L, "full", v, dt, "fill");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_full(slot, dt, ndim, shape, v, dev));
    return 1;
}

static int l_arange(lua_State *L) {
    int n = 0;
    while (n < 3 && lua_type(L, n + 1) == LUA_TNUMBER) n++;
    if (n == 0) return luaL_argerror(L, 1, lua_pushfstring(L, "expected arange(n) or arange(start, end [, step]), got %s", luaL_typename(L, 1)));
    double a = 0, b, step = 1;
    if (n == 1) b = lua_tonumber(L, 1);
    else { a = lua_tonumber(L, 1); b = lua_tonumber(L, 2); if (n == 3) step = lua_tonumber(L, 3); }
    if (step == 0) return luaL_error(L, "arange: step must be nonzero");
    fl_lmaxargs(L, n + 1, "arange", "(n) or (start, end [, step]), then [dtype | {dtype=, device=}]");
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, n + 1, FL_F32, "arange", &dev);
    reject_fp8_dtype(L, dt, "arange");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_arange(slot, a, b, step, dt));
    to_device_in_box(L, slot, dev);
    return 1;
}

static int l_random(lua_State *L, int normal, const char *fname) {
    int ndim; int64_t shape[FL_MAX_DIMS];
    int next = parse_shape(L, 1, &ndim, shape, 0, fname);
    fl_lmaxargs(L, next, fname, "(shape [, dtype | {dtype=, device=}])");
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, next, FL_F32, fname, &dev);
    reject_fp8_dtype(L, dt, fname);
    fl_tensor **slot = fl_lnewbox(L);
    if (normal) FL_LCALL(L, fl_randn(slot, fl_default_rng(), ndim, shape, dt));
    else FL_LCALL(L, fl_rand(slot, fl_default_rng(), ndim, shape, dt));
    to_device_in_box(L, slot, dev);
    return 1;
}
/* randint([low=0,] high, {shape} [, dtype | {dtype=, device=}]): torch's randint, integers uniform in [low, high) as
 * values of the dtype (fp32 unless given); the shape as a table, since numbers before it are the bounds. */
static int l_randint(lua_State *L) {
    const char *usage = "(high, {shape}) or (low, high, {shape}), then [dtype | {dtype=, device=}]";
    int nb = lua_type(L, 2) == LUA_TTABLE ? 1 : lua_type(L, 3) == LUA_TTABLE ? 2 : 0;
    if (nb == 0)
        return luaL_error(L, "randint: expected %s, got (%s, %s, ...)", usage, luaL_typename(L, 1),
                          luaL_typename(L, 2));
    int64_t low = nb == 2 ? check_int(L, 1, "randint", "low") : 0, high = check_int(L, nb, "randint", "high");
    int ndim; int64_t shape[FL_MAX_DIMS];
    int next = parse_shape(L, nb + 1, &ndim, shape, 0, "randint");
    fl_lmaxargs(L, next, "randint", usage);
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, next, FL_F32, "randint", &dev);
    reject_fp8_dtype(L, dt, "randint");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_randint(slot, fl_default_rng(), low, high, ndim, shape, dt));
    to_device_in_box(L, slot, dev);
    return 1;
}

/* randperm(n [, dtype | {dtype=, device=}]): torch's randperm, 0 .. n−1 in a random order. */
static int l_randperm(lua_State *L) {
    int64_t n = check_int(L, 1, "randperm", "n");
    fl_lmaxargs(L, 2, "randperm", "(n [, dtype | {dtype=, device=}])");
    int dev;
    fl_dtype dt = opt_dtype_at_dev(L, 2, FL_F32, "randperm", &dev);
    reject_fp8_dtype(L, dt, "randperm");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_randperm(slot, fl_default_rng(), n, dt));
    to_device_in_box(L, slot, dev);
    return 1;
}
static int l_rand(lua_State *L) { return l_random(L, 0, "rand"); }
static int l_randn(lua_State *L) { return l_random(L, 1, "randn"); }

/* Nested tables → shape: follow the first element down. */
static void nested_shape(lua_State *L, int idx, int *ndim, int64_t *shape) {
    int n = 0;
    lua_pushvalue(L, idx);
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (n == FL_MAX_DIMS) luaL_error(L, "tensor: nesting deeper than %d dimensions", FL_MAX_DIMS);
        shape[n++] = (int64_t)fl_lchecklen(L, -1, "tensor", "nested table", FL_LMAX_TABLE_LEN);
        if (shape[n - 1] == 0) break;
        lua_geti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    *ndim = n;
}

/* Position "[2][1]" of the element being read, for ragged/type errors. */
static const char *where_str(char *buf, size_t len, int depth, const int64_t *pos) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < depth && k < len; i++) k += (size_t)snprintf(buf + k, len - k, "[%lld]", (long long)pos[i] + 1);
    return buf;
}

static void fill_nested(lua_State *L, int depth, int ndim, const int64_t *shape, int64_t *pos, float **dst) {
    char w[160];
    if (depth == ndim) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "tensor: expected a number at %s, got %s", where_str(w, sizeof w, depth, pos),
                       luaL_typename(L, -1));
        *(*dst)++ = (float)lua_tonumber(L, -1);
        return;
    }
    if (lua_type(L, -1) != LUA_TTABLE)
        luaL_error(L, "tensor: ragged nested table: expected a table of %I elements at %s, got %s",
                   (lua_Integer)shape[depth], depth ? where_str(w, sizeof w, depth, pos) : "the top",
                   luaL_typename(L, -1));
    lua_Integer n = luaL_len(L, -1);
    if (n != shape[depth])
        luaL_error(L, "tensor: ragged nested table: %s has %I elements, expected %I (like the first one at that depth)",
                   depth ? where_str(w, sizeof w, depth, pos) : "the top", n, (lua_Integer)shape[depth]);
    for (int64_t i = 0; i < shape[depth]; i++) {
        pos[depth] = i;
        lua_geti(L, -1, i + 1);
        fill_nested(L, depth + 1, ndim, shape, pos, dst);
        lua_pop(L, 1);
    }
}

static int l_tensor_new(lua_State *L) {
    fl_tensor *src = lua_isuserdata(L, 1) ? fl_lchecktensor(L, 1) : NULL;   /* (a released one: said so) */
    fl_lmaxargs(L, 2, "tensor", "(data [, dtype | {dtype=}])");
    fl_dtype dt = opt_dtype_at(L, 2, src ? src->dtype : FL_F32, "tensor");
    if (src) {  /* copy of an existing tensor */
        reject_fp8_dtype(L, dt, "tensor");
        fl_tensor **slot = fl_lnewbox(L);
        if (src->scale_inv) FL_LCALL(L, fl_dequantize(slot, src, dt));
        else FL_LCALL(L, fl_tensor_to(slot, src, dt));
        return 1;
    }
    reject_fp8_dtype(L, dt, "tensor");
    int t = lua_type(L, 1);
    if (t != LUA_TTABLE && t != LUA_TNUMBER)
        return luaL_argerror(L, 1, lua_pushfstring(L, "expected a number or a nested table of numbers, got %s",
                                                   luaL_typename(L, 1)));
    int ndim = 0; int64_t shape[FL_MAX_DIMS];
    if (t == LUA_TTABLE) nested_shape(L, 1, &ndim, shape);
    int64_t n = fl_lchecknumel(L, "tensor", ndim, shape, FL_LMAX_TABLE_LEN);
    /* The staging buffer is a userdata so a Lua error in the middle frees it. */
    float *buf = (float *)lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof(float), 0);
    float *p = buf;
    int64_t pos[FL_MAX_DIMS] = {0};
    lua_pushvalue(L, 1);
    fill_nested(L, 0, ndim, shape, pos, &p);
    lua_pop(L, 1);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_from_f32(slot, buf, ndim, shape, dt));
    return 1;
}

static int l_is_tensor(lua_State *L) {
    fl_lmaxargs(L, 1, "is_tensor", "(value)");
    lua_pushboolean(L, luaL_testudata(L, 1, FL_TENSOR_MT) != NULL);
    return 1;
}

/* _live_dtype(v): the dtype name of a live tensor, false for a released one, nil for anything else; the one call
 * with which the methods written in Lua (fp8/tensor.lua) check their self, at the cost is_tensor had. */
static int l_live_dtype(lua_State *L) {
    fl_tensor **slot = (fl_tensor **)luaL_testudata(L, 1, FL_TENSOR_MT);
    if (!slot) lua_pushnil(L);
    else if (!*slot) lua_pushboolean(L, 0);
    else lua_pushstring(L, fl_format((*slot)->dtype)->name);
    return 1;
}

/* ---- metadata ----------------------------------------------------------------------------- */

/* t:shape() and t:stride(): the tensor's sizes or strides as a list */
static int dims_list(lua_State *L, const char *fname, bool strides) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 1, fname, "no arguments");
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, strides ? t->stride[i] : t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}
static int m_shape(lua_State *L) { return dims_list(L, "shape", false); }
static int m_stride(lua_State *L) { return dims_list(L, "stride", true); }
static int m_size(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "size", "([dim])");
    if (lua_isnoneornil(L, 2)) { lua_settop(L, 1); return m_shape(L); }
    lua_pushinteger(L, t->shape[check_dim(L, 2, t->ndim, "size")]);
    return 1;
}
static int m_dim(lua_State *L) { lua_pushinteger(L, fl_lchecknoargs(L, "dim")->ndim); return 1; }
static int m_numel(lua_State *L) { lua_pushinteger(L, fl_tensor_numel(fl_lchecknoargs(L, "numel"))); return 1; }
static int m_dtype(lua_State *L) { lua_pushstring(L, fl_format(fl_lchecknoargs(L, "dtype")->dtype)->name); return 1; }
static int m_device(lua_State *L) { lua_pushstring(L, fl_device_name(fl_lchecknoargs(L, "device")->device)); return 1; }
static int m_is_contiguous(lua_State *L) { lua_pushboolean(L, fl_tensor_is_contiguous(fl_lchecknoargs(L, "is_contiguous"))); return 1; }
/* x:_channels_last() -> bool: torch's suggest_memory_format guess from a 4-D x's strides (fl_tensor_is_channels_last;
 * an N111 shape whose strides fit both reads as NCHW), for the Lua composites that keep the layout (adaptive_pool.lua) */
static int m_channels_last(lua_State *L) {
    lua_pushboolean(L, fl_tensor_is_channels_last(fl_lchecknoargs(L, "_channels_last")));
    return 1;
}
static int m_is_fp8(lua_State *L) { lua_pushboolean(L, fl_format(fl_lchecknoargs(L, "is_fp8")->dtype)->is_fp8); return 1; }
static int m_shape_str(lua_State *L) { fl_tensor *t = fl_lchecknoargs(L, "shape_str"); fl_lpushshape(L, t->ndim, t->shape); return 1; }

static int m_len(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (t->ndim == 0) return luaL_error(L, "# of a 0-d tensor is undefined (it has no dimension 1)");
    lua_pushinteger(L, t->shape[0]);
    return 1;
}

/* __gc: the collector drops the box's reference (nothing uses an unreachable box). */
static int m_free(lua_State *L) {
    fl_tensor **slot = (fl_tensor **)luaL_checkudata(L, 1, FL_TENSOR_MT);
    fl_tensor_release(*slot);
    *slot = NULL;
    return 0;
}
/* __close and t:free(): release the reference early; later use of the tensor is an error. Inside a C function that
 * may be using the tensor (from a metamethod or finalizer it ran) the release waits until that is over
 * (fl_lrelease_box). */
static int m_close(lua_State *L) {
    fl_lrelease_box(L, 1);
    return 0;
}
/* t:free() as a method: no arguments (as __close it gets the error object too: m_close) */
static int m_free_method(lua_State *L) {
    luaL_checkudata(L, 1, FL_TENSOR_MT);
    fl_lmaxargs(L, 1, "free", "no arguments");
    return m_close(L);
}
static int m_is_released(lua_State *L) {
    fl_tensor **slot = (fl_tensor **)luaL_checkudata(L, 1, FL_TENSOR_MT);
    fl_lmaxargs(L, 1, "is_released", "no arguments");
    lua_pushboolean(L, *slot == NULL);
    return 1;
}

/* ---- views -------------------------------------------------------------------------------- */

static int m_view_reshape(lua_State *L, int reshape) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    const char *fname = reshape ? "reshape" : "view";
    int ndim; int64_t shape[FL_MAX_DIMS];
    int next = parse_shape(L, 2, &ndim, shape, 1, fname);
    if (!lua_isnone(L, next))
        return luaL_argerror(L, next, lua_pushfstring(L, "expected only sizes, got %s", luaL_typename(L, next)));
    fl_tensor **slot = fl_lnewbox(L);
    fl_status st = reshape ? fl_reshape(slot, t, ndim, shape) : fl_view(slot, t, ndim, shape);
    if (st == FL_ENOMEM) {   /* FL_LCALL's retry after a collection */
        lua_gc(L, LUA_GCCOLLECT);
        st = reshape ? fl_reshape(slot, t, ndim, shape) : fl_view(slot, t, ndim, shape);
    }
    fl_lcheckf(L, st, fname);
    return 1;
}
static int m_view(lua_State *L) { return m_view_reshape(L, 0); }
static int m_reshape(lua_State *L) { return m_view_reshape(L, 1); }

static int m_transpose(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);   /* a released tensor is named first */
    fl_lmaxargs(L, 3, "transpose", "(dim0, dim1)");
    int d0 = check_reduce_dim(L, 2, t->ndim, "transpose"), d1 = check_reduce_dim(L, 3, t->ndim, "transpose");
    if (t->ndim == 0) { lua_settop(L, 1); return 1; }   /* torch's: a 0-d tensor's one implicit dim with itself */
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_transpose(slot, t, d0, d1));
    return 1;
}
static int m_t(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);   /* a released tensor is named first */
    fl_lmaxargs(L, 1, "t", "no arguments");
    if (t->ndim < 2) {   /* torch's: a 0-D or 1-D tensor as it is, in a new view (not t itself: freeing or closing the
                          * result, or its requires_grad_, left t released or changed) */
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_expand(slot, t, t->ndim, t->shape));
        return 1;
    }
    if (t->ndim != 2) {
        lua_pushfstring(L, "t() expects a tensor of at most 2 dims, got %d-D shape ", t->ndim);
        fl_lpushshape(L, t->ndim, t->shape);
        lua_concat(L, 2);
        return lua_error(L);
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_transpose(slot, t, 0, 1));
    return 1;
}
static int m_contiguous(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "contiguous");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_contiguous(slot, t));
    return 1;
}
static int m_narrow(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    int d = check_dim(L, 2, t->ndim, "narrow");
    lua_Integer s1 = (lua_Integer)check_int(L, 3, "narrow", "start");
    int64_t len = check_int(L, 4, "narrow", "length");
    if (!lua_isnone(L, 5)) return luaL_error(L, "narrow: expected (dim, start, length), got %d arguments", lua_gettop(L) - 1);
    /* an empty slice may start just past the end (torch's narrow(d, size, 0)): the last piece of a split */
    int64_t start = len == 0 && s1 == (lua_Integer)t->shape[d] + 1 ? t->shape[d] : norm_index(L, s1, t, d, "narrow");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_narrow(slot, t, d, start, len));
    return 1;
}
/* x:select(dim, index): torch's select, the view at that position of dim with dim dropped (both 1-based, negative
 * from the end); x[i] is x:select(1, i) (a number for 1-D). */
static int m_select(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (t->ndim == 0) return luaL_error(L, "select: cannot select from a 0-d tensor; use :item()");
    int d = check_dim(L, 2, t->ndim, "select");
    lua_Integer i = (lua_Integer)check_int(L, 3, "select", "index");
    if (!lua_isnone(L, 4)) return luaL_error(L, "select: expected (dim, index), got %d arguments", lua_gettop(L) - 1);
    int64_t k = norm_index(L, i, t, d, "select");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_select(slot, t, d, k));
    return 1;
}
static int m_expand(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    int ndim; int64_t shape[FL_MAX_DIMS];
    int next = parse_shape(L, 2, &ndim, shape, 2, "expand");
    if (!lua_isnone(L, next))
        return luaL_argerror(L, next, lua_pushfstring(L, "expected only sizes, got %s", luaL_typename(L, next)));
    /* -1 keeps the size of the tensor's dimension there (sizes align from the right, as torch's) */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != -1) continue;
        const int j = i - (ndim - t->ndim);
        if (j < 0)
            return luaL_error(L, "expand: -1 for dimension %d, a new leading dimension of the %d-d tensor: give its "
                                 "size", i + 1, t->ndim);
        shape[i] = t->shape[j];
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_expand(slot, t, ndim, shape));
    return 1;
}
static int m_clone(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "clone");   /* an FP8 tensor: its bytes and scales, as torch's clone */
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_to(slot, t, t->dtype));
    return 1;
}
static int m_to(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);   /* a released tensor is named first */
    fl_lmaxargs(L, 2, "to", "(dtype or device)");
    int dev;
    if (lua_type(L, 2) == LUA_TSTRING && fl_device_from_name(lua_tostring(L, 2), &dev)) {
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_to_device(slot, t, dev));
        return 1;
    }
    if (lua_type(L, 2) == LUA_TSTRING) {
        fl_dtype d;
        if (!fl_dtype_from_name(lua_tostring(L, 2), &d))
            return luaL_error(L, "to: unknown dtype '%s' (valid: %s; or a device: cpu, cuda)",
                              lua_tostring(L, 2), fl_dtype_choices());
    }
    if (lua_type(L, 2) == LUA_TFUNCTION)   /* x:to(acc.device): Accelerate's property is a method here */
        return luaL_argerror(L, 2, "expected a dtype or a device name, got a function (the Accelerator's device is a "
                                   "method: x:to(acc:device()))");
    fl_dtype dt = fl_lcheckdtype(L, 2);
    if (fl_format(dt)->is_fp8 && fl_format(t->dtype)->is_fp8)   /* quantize refuses an FP8 source */
        return luaL_error(L, "to(\"%s\"): the tensor is %s; FP8 needs a scale: use :dequantize():quantize(\"%s\")",
                          fl_format(dt)->name, fl_format(t->dtype)->name, fl_format(dt)->name);
    if (fl_format(dt)->is_fp8)
        return luaL_error(L, "to(\"%s\"): FP8 needs a scale; use :quantize(\"%s\") (optionally with {scale=...} or {axis=...})",
                          fl_format(dt)->name, fl_format(dt)->name);
    fl_tensor **slot = fl_lnewbox(L);
    if (fl_format(t->dtype)->is_fp8) FL_LCALL(L, fl_dequantize_ag(slot, t, dt));   /* as :dequantize: differentiable */
    else FL_LCALL(L, fl_to(slot, t, dt));
    return 1;
}

static int m_cuda(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "cuda");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_to_device(slot, t, FL_DEV_CUDA));
    return 1;
}
static int m_cpu(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "cpu");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_to_device(slot, t, FL_DEV_CPU));
    return 1;
}
/* t:move_(device): the data (and .grad) of t itself moves; returns t. */
static int m_move_(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);   /* a released tensor is named first */
    fl_lmaxargs(L, 2, "move_", "(device)");
    int dev = fl_lcheckdevice(L, 2, "move_");
    FL_LCALL(L, fl_tensor_move_(t, dev));
    lua_settop(L, 1);
    return 1;
}

/* ---- element access ----------------------------------------------------------------------- */

static void read_index_table(lua_State *L, int arg, const fl_tensor *t, int64_t *idx, const char *fname) {
    luaL_checktype(L, arg, LUA_TTABLE);
    lua_Integer n = luaL_len(L, arg);
    if (n != t->ndim) {
        lua_pushfstring(L, "%s: expected %d indices for a tensor of shape ", fname, t->ndim);
        fl_lpushshape(L, t->ndim, t->shape);
        lua_pushfstring(L, ", got %I", n);
        lua_concat(L, 3);
        lua_error(L);
    }
    for (int d = 0; d < t->ndim; d++) {
        lua_geti(L, arg, d + 1);
        lua_Integer i = (lua_Integer)check_int(L, -1, fname, "index");
        lua_pop(L, 1);
        idx[d] = norm_index(L, i, t, d, fname);
    }
}

static void push_number_or_int(lua_State *L, double v) { lua_pushnumber(L, v); }

static int m_get(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);   /* a released tensor is named first */
    fl_lmaxargs(L, 2, "get", "({i, j, ...})");
    int64_t idx[FL_MAX_DIMS];
    read_index_table(L, 2, t, idx, "get");
    double v;
    FL_LCALL(L, fl_tensor_get(t, idx, &v));
    push_number_or_int(L, v);
    return 1;
}
/* An element write to a tensor that takes part in autograd: torch records it (CopySlices) or, for a leaf,
 * refuses it; here nothing would be recorded and the gradient would still flow through the overwritten
 * element, so it is refused while grad mode is on (fp8.no_grad allows it, as torch's optimizers write leaves). */
static void check_element_write(lua_State *L, const fl_tensor *t, const char *fname) {
    if ((t->requires_grad || t->grad_fn) && fl_grad_enabled())
        luaL_error(L, "%s: the tensor %s; an element written in place would still pass gradient as if it had not "
                   "been (torch records or refuses such writes); write under fp8.no_grad, or build a new tensor "
                   "(fp8.where, masked_fill)", fname, t->grad_fn ? "is part of an autograd graph" : "requires grad");
    /* torch's rule for a view made in no_grad mode: refused while the tensor it views requires grad */
    if (t->nograd_base && t->nograd_base->requires_grad && fl_grad_enabled())
        luaL_error(L, "%s: this tensor is a view, made under fp8.no_grad, of a tensor that requires grad, and it is "
                   "written in place with grad mode on; torch forbids that as ambiguous: make the write under "
                   "fp8.no_grad too, or write to a copy (:clone())", fname);
}

/* t:_write_(src, fname): t's values replaced in place by src's (a tensor that broadcasts to t's shape, or a number),
 * as torch's in-place methods write (copy_, fill_, zero_, add_, ...; lua/fp8/tensor_inplace.lua computes the new
 * values). Refused where an element write is (check_element_write), for an FP8 t, and for a t whose elements share
 * memory (an expand), as torch refuses a write to one. Returns t. */
static int m_write_(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    const char *fname = luaL_checkstring(L, 3);
    fl_lmaxargs(L, 3, fname, "(src)");
    check_element_write(L, t, fname);
    if (fl_format(t->dtype)->is_fp8)
        return luaL_error(L, "%s: the tensor is FP8 (%s): its bytes are made by quantize (dequantize, write, quantize "
                          "again)", fname, fl_format(t->dtype)->name);
    fl_lcheck_distinct(L, t, fname);
    fl_tensor *src = NULL, *e = NULL;
    fl_status st;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        double v = lua_tonumber(L, 2);
        check_in_range(L, fname, v, t->dtype, "value");
        st = fl_tensor_full(&src, t->dtype, 0, NULL, v, t->device);
    } else {
        fl_tensor *s = fl_ltotensor(L, 2);
        if (!s) return luaL_error(L, "%s: expected a tensor or a number to write, got %s", fname, luaL_typename(L, 2));
        fl_lchecktensor(L, 2);   /* a released one is named */
        int64_t ns = fl_tensor_numel(s);
        bool fits = s->ndim <= t->ndim;
        for (int d = 0; fits && d < s->ndim; d++) {
            int64_t a = s->shape[s->ndim - 1 - d], b = t->shape[t->ndim - 1 - d];
            fits = a == b || a == 1;
        }
        if (!fits) {
            lua_pushfstring(L, "%s: a source of shape ", fname);
            fl_lpushshape(L, s->ndim, s->shape);
            lua_pushstring(L, " does not broadcast to the tensor's shape ");
            fl_lpushshape(L, t->ndim, t->shape);
            lua_concat(L, 4);
            return lua_error(L);
        }
        /* a source that shares t's memory (x:copy_(x:t())) is read whole before t is written */
        if (s->storage == t->storage && ns) st = fl_tensor_to(&src, s, s->dtype);
        else { src = s; fl_tensor_retain(s); st = FL_OK; }
    }
    if (st == FL_OK) st = fl_tensor_expand(&e, src, t->ndim, t->shape);
    if (st == FL_OK) st = fl_tensor_copy_(t, e);
    fl_tensor_release(e);
    fl_tensor_release(src);
    FL_LCALL(L, st);
    lua_settop(L, 1);
    return 1;
}

static int m_set(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "set", "({i, j, ...}, value)");
    check_element_write(L, t, "set");
    int64_t idx[FL_MAX_DIMS];
    read_index_table(L, 2, t, idx, "set");
    double v = luaL_checknumber(L, 3);
    FL_LCALL(L, fl_tensor_set(t, idx, v));
    lua_settop(L, 1);
    return 1;
}

static int m_item(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "item");
    if (fl_tensor_numel(t) != 1) {
        lua_pushstring(L, "item() needs a tensor with exactly one element, got shape ");
        fl_lpushshape(L, t->ndim, t->shape);
        lua_concat(L, 2);
        return lua_error(L);
    }
    int64_t idx[FL_MAX_DIMS] = {0};
    double v;
    FL_LCALL(L, fl_tensor_get(t, idx, &v));
    lua_pushnumber(L, v);
    return 1;
}

/* __index: method names first, then integer indices (x[i]). */
static int m_index(lua_State *L) {
    fl_lgc_poll(L);
    if (lua_type(L, 2) == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        lua_rawget(L, lua_upvalueindex(1));
        /* Not a method: fields such as t.grad (l_autograd.c). A released tensor's raise, as its methods do (its
         * .grad read as nil, and an optimizer or clip_grad_norm_ skipped a freed parameter without a word). */
        if (lua_isnil(L, -1)) {
            fl_tensor *t = fl_ltotensor(L, 1);
            if (!t && luaL_testudata(L, 1, FL_TENSOR_MT)) fl_lchecktensor(L, 1);   /* raises "... released ..." */
            if (t && fl_lautograd_field(L, t, lua_tostring(L, 2))) return 1;
        }
        return 1;
    }
    if (lua_type(L, 2) != LUA_TNUMBER)   /* x[{1, 2}] or x[true] read as nil and failed later, far from here */
        return luaL_error(L, "x[k]: a tensor is indexed by a method name or an integer position (x[i]: the i-th row), "
                             "got %s; one dim at a time: x:select(dim, i), x:narrow(dim, start, length); by a mask: "
                             "x:masked_select(mask)",
                          luaL_typename(L, 2));
    fl_tensor *t = fl_lchecktensor(L, 1);
    lua_Integer i = (lua_Integer)check_int(L, 2, "x[i]", "index");
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-d tensor; use :item()");
    int64_t k = norm_index(L, i, t, 0, "x[i]");
    if (t->ndim == 1) {
        double v;
        FL_LCALL(L, fl_tensor_get(t, &k, &v));
        lua_pushnumber(L, v);
        return 1;
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_select(slot, t, 0, k));
    return 1;
}

static int m_newindex(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING && fl_lautograd_setfield(L, t, lua_tostring(L, 2), 3)) return 0;
    if (lua_type(L, 2) != LUA_TNUMBER)
        return luaL_error(L, "cannot set field '%s' on a tensor (only x[i] = v for 1-D tensors)", fl_lshow(L, 2));
    lua_Integer i = (lua_Integer)check_int(L, 2, "x[i] = v", "index");
    if (t->ndim != 1) {
        lua_pushfstring(L, "x[i] = v works on 1-D tensors; this one has shape ");
        fl_lpushshape(L, t->ndim, t->shape);
        lua_pushstring(L, "; use x:set({i, j, ...}, v)");
        lua_concat(L, 3);
        return lua_error(L);
    }
    int64_t k = norm_index(L, i, t, 0, "x[i] = v");
    double v = luaL_checknumber(L, 3);
    check_element_write(L, t, "x[i] = v");
    FL_LCALL(L, fl_tensor_set(t, &k, v));
    return 0;
}

/* Row-major fp32 copy of all values (FP8: dequantized) into a Lua-owned buffer. */
static float *read_all(lua_State *L, const fl_tensor *t, int64_t *n) {
    *n = fl_tensor_numel(t);
    float *buf = (float *)lua_newuserdatauv(L, (size_t)(*n ? *n : 1) * sizeof(float), 0);
    FL_LCALL(L, fl_tensor_read_f32(t, buf));
    return buf;
}

static void push_nested(lua_State *L, const fl_tensor *t, int d, const float **p) {
    if (d == t->ndim) { lua_pushnumber(L, *(*p)++); return; }
    lua_createtable(L, t->shape[d] > INT_MAX ? 0 : (int)t->shape[d], 0);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        push_nested(L, t, d + 1, p);
        lua_rawseti(L, -2, i + 1);
    }
}

static int m_totable(lua_State *L) {
    fl_tensor *t = fl_lchecknoargs(L, "totable");
    int64_t n;
    const float *p = read_all(L, t, &n);
    push_nested(L, t, 0, &p);
    return 1;
}

/* _values([edge]): flat list of values in row-major order. With edge, dims longer than 2*edge
 * keep only their first and last `edge` indices (what a summarised print shows); the second
 * result is the kept size per dim. */
static int m_values(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "_values", "([edge])");
    lua_Integer edge = fl_loptint(L, 2, "_values", "edge", 0, (lua_Integer)1 << 30, 0);
    int64_t n = fl_tensor_numel(t);
    if (edge <= 0) {
        const float *p = read_all(L, t, &n);
        lua_createtable(L, n > INT_MAX ? 0 : (int)n, 0);   /* a size hint only: never wrap it */
        for (int64_t i = 0; i < n; i++) { lua_pushnumber(L, p[i]); lua_rawseti(L, -2, i + 1); }
        return 1;
    }
    int64_t kept[FL_MAX_DIMS], idx[FL_MAX_DIMS], pos[FL_MAX_DIMS] = {0}, total = 1;
    for (int d = 0; d < t->ndim; d++) {
        kept[d] = t->shape[d] > 2 * edge ? 2 * edge : t->shape[d];
        total *= kept[d];
    }
    lua_createtable(L, total > INT_MAX ? 0 : (int)total, 0);
    for (int64_t k = 0; k < total; k++) {
        for (int d = 0; d < t->ndim; d++)
            idx[d] = (t->shape[d] > 2 * edge && pos[d] >= edge) ? t->shape[d] - 2 * edge + pos[d] : pos[d];
        double v = 0;
        if (total > 0) FL_LCALL(L, fl_tensor_get(t, idx, &v));
        lua_pushnumber(L, v);
        lua_rawseti(L, -2, k + 1);
        for (int d = t->ndim - 1; d >= 0; d--) { if (++pos[d] < kept[d]) break; pos[d] = 0; }
    }
    lua_createtable(L, t->ndim, 0);
    for (int d = 0; d < t->ndim; d++) { lua_pushinteger(L, kept[d]); lua_rawseti(L, -2, d + 1); }
    return 2;
}

/* ---- arithmetic --------------------------------------------------------------------------- */

static int arith(lua_State *L, fl_binop op) {
    fl_tensor *a = fl_ltotensor(L, 1), *b = fl_ltotensor(L, 2);
    const char *opname = fl_binop_names[op];
    for (int i = 1; i <= 2; i++) {
        fl_tensor **s = (fl_tensor **)luaL_testudata(L, i, FL_TENSOR_MT);
        if (s && !*s) return luaL_error(L, "%s: operand %d is a released tensor", opname, i);
        if (!s && lua_type(L, i) != LUA_TNUMBER)
            return luaL_error(L, "%s: expected a tensor or a number as operand %d, got %s", opname, i, luaL_typename(L, i));
    }
    fl_lmaxargs(L, 2, opname, "(a, b): two operands");   /* metamethods get exactly two */
    if (!a && !b)   /* x.sub(1, 2): a method called with no tensor at all */
        return luaL_error(L, "%s: expected a tensor as operand 1 or 2, got %s and %s", opname,
                          luaL_typename(L, 1), luaL_typename(L, 2));
    fl_tensor **slot = fl_lnewbox(L);
    if (a && b) FL_LCALL(L, fl_binary(slot, op, a, b));
    else if (a) FL_LCALL(L, fl_binary_scalar(slot, op, a, lua_tonumber(L, 2), false));
    else FL_LCALL(L, fl_binary_scalar(slot, op, b, lua_tonumber(L, 1), true));
    return 1;
}
static int m_add(lua_State *L) { return arith(L, FL_OP_ADD); }
static int m_sub(lua_State *L) { return arith(L, FL_OP_SUB); }
static int m_mul(lua_State *L) { return arith(L, FL_OP_MUL); }
static int m_div(lua_State *L) { return arith(L, FL_OP_DIV); }
static int m_pow(lua_State *L) { return arith(L, FL_OP_POW); }
static int m_maximum(lua_State *L) { return arith(L, FL_OP_MAXIMUM); }
static int m_minimum(lua_State *L) { return arith(L, FL_OP_MINIMUM); }
static int m_atan2(lua_State *L) { return arith(L, FL_OP_ATAN2); }
static int m_fmod(lua_State *L) { return arith(L, FL_OP_FMOD); }
static int m_remainder(lua_State *L) { return arith(L, FL_OP_REMAINDER); }   /* also x % y, Python's and torch's % */
/* x:_hypot(y): fp8.Tensor.hypot's core (lua/fp8/tensor_math.lua checks the arguments and makes a number a tensor) */
static int m_hypot(lua_State *L) { return fl_ltensor_op2(L, "hypot", "(other)", fl_hypot); }
/* x:_dot(y): fp8.Tensor.dot's core (lua/fp8/tensor_linalg.lua checks the arguments): core/ops.h's fl_dot, one node */
static int m_dot(lua_State *L) { return fl_ltensor_op2(L, "dot", "(other)", fl_dot); }
/* r:_norm_rescue(s, x, mask, p [, gate]): core/ops.h's fl_norm_rescue (lua/fp8/tensor_math.lua's T._norm_rescaled
 * gives the norms r and sums s of x over the dims in mask, bit i for dim i + 1, and p; gate x:_norm_gate(mask)'s
 * result, through which it computed r and s) */
static int m_norm_rescue(lua_State *L) {
    fl_tensor *r = fl_lchecktensor(L, 1), *s = fl_lchecktensor(L, 2), *x = fl_lchecktensor(L, 3);
    fl_lmaxargs(L, 6, "_norm_rescue", "(s, x, mask, p [, gate])");
    lua_Integer mask = luaL_checkinteger(L, 4);
    double p = luaL_checknumber(L, 5);
    fl_tensor *gate = lua_isnoneornil(L, 6) ? NULL : fl_lchecktensor(L, 6);
    if (mask < 0 || mask >= (1 << FL_MAX_DIMS))   /* (the value named: it said 'a mask of reduced dims' alone) */
        luaL_argerror(L, 4, lua_pushfstring(L, "expected a mask of reduced dims in [0, %d], got %I",
                                            (1 << FL_MAX_DIMS) - 1, mask));
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_norm_rescue(slot, r, s, x, (uint32_t)mask, p, gate));
    return 1;
}
/* x:_norm_gate(mask): core/ops.h's fl_norm_gate, the tensor T._norm_rescaled computes the plain norm from */
static int m_norm_gate(lua_State *L) {
    fl_tensor *x = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "_norm_gate", "(mask)");
    lua_Integer mask = luaL_checkinteger(L, 2);
    if (mask < 0 || mask >= (1 << FL_MAX_DIMS))   /* (the value named, as _norm_rescue's: it said the words alone) */
        luaL_argerror(L, 2, lua_pushfstring(L, "expected a mask of reduced dims in [0, %d], got %I",
                                            (1 << FL_MAX_DIMS) - 1, mask));
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_norm_gate(slot, x, (uint32_t)mask));
    return 1;
}
/* cond:_where(a, b): fp8.where's core (lua/fp8/tensor.lua checks the arguments first); a number is a 0-d tensor of
 * the other one's dtype (fp32 beside a number), on cond's device. */
static int m_where(lua_State *L) {
    fl_tensor *cond = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "where", "(cond, a, b)");
    fl_tensor *v[2] = { fl_ltotensor(L, 2), fl_ltotensor(L, 3) };
    for (int i = 0; i < 2; i++) {
        if (v[i]) continue;
        const double x = luaL_checknumber(L, 2 + i);
        fl_tensor **slot = fl_lnewbox(L);   /* owns the 0-d tensor until the call is done */
        FL_LCALL(L, fl_tensor_full(slot, v[1 - i] ? v[1 - i]->dtype : FL_F32, 0, NULL, x, cond->device));
        v[i] = *slot;
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_where(slot, cond, v[0], v[1]));
    return 1;
}
/* t:_clamp(lo, hi), both numbers: one node that keeps t alone (Tensor.clamp, lua/fp8/tensor.lua) */
static int m_clamp_scalar(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "clamp", "(min, max)");
    double lo = luaL_checknumber(L, 2), hi = luaL_checknumber(L, 3);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_clamp_scalar(slot, t, lo, hi));
    return 1;
}
/* Comparisons: 1 where true, 0 where false, in the operands' dtype (no bool dtype); no history. Lua's own
 * < <= == turn a metamethod's result into a boolean, so these are methods only. */
static int m_eq(lua_State *L) { return arith(L, FL_OP_EQ); }
static int m_ne(lua_State *L) { return arith(L, FL_OP_NE); }
static int m_lt(lua_State *L) { return arith(L, FL_OP_LT); }
static int m_le(lua_State *L) { return arith(L, FL_OP_LE); }
static int m_gt(lua_State *L) { return arith(L, FL_OP_GT); }
static int m_ge(lua_State *L) { return arith(L, FL_OP_GE); }

static int unary(lua_State *L, fl_unop op) {
    /* no arguments; Lua calls __unm (neg) with the operand twice */
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (lua_gettop(L) > 1 && !(lua_gettop(L) == 2 && lua_rawequal(L, 1, 2)))
        luaL_error(L, "%s: takes no arguments; got %d", fl_unop_names[op], lua_gettop(L) - 1);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_unary(slot, op, t));
    return 1;
}
static int m_abs(lua_State *L) { return unary(L, FL_OP_ABS); }
static int m_neg(lua_State *L) { return unary(L, FL_OP_NEG); }
static int m_exp(lua_State *L) { return unary(L, FL_OP_EXP); }
static int m_log(lua_State *L) { return unary(L, FL_OP_LOG); }
static int m_sqrt(lua_State *L) { return unary(L, FL_OP_SQRT); }
static int m_sign(lua_State *L) { return unary(L, FL_OP_SIGN); }
static int m_tanh(lua_State *L) { return unary(L, FL_OP_TANH); }
static int m_sigmoid(lua_State *L) { return unary(L, FL_OP_SIGMOID); }
static int m_sin(lua_State *L) { return unary(L, FL_OP_SIN); }
static int m_cos(lua_State *L) { return unary(L, FL_OP_COS); }
static int m_floor(lua_State *L) { return unary(L, FL_OP_FLOOR); }
static int m_ceil(lua_State *L) { return unary(L, FL_OP_CEIL); }
static int m_round(lua_State *L) { return unary(L, FL_OP_ROUND); }
static int m_trunc(lua_State *L) { return unary(L, FL_OP_TRUNC); }
static int m_erf(lua_State *L) { return unary(L, FL_OP_ERF); }
static int m_log1p(lua_State *L) { return unary(L, FL_OP_LOG1P); }
static int m_expm1(lua_State *L) { return unary(L, FL_OP_EXPM1); }
static int m_tan(lua_State *L) { return unary(L, FL_OP_TAN); }
static int m_asin(lua_State *L) { return unary(L, FL_OP_ASIN); }
static int m_acos(lua_State *L) { return unary(L, FL_OP_ACOS); }
static int m_atan(lua_State *L) { return unary(L, FL_OP_ATAN); }
static int m_sinh(lua_State *L) { return unary(L, FL_OP_SINH); }
static int m_cosh(lua_State *L) { return unary(L, FL_OP_COSH); }
static int m_log2(lua_State *L) { return unary(L, FL_OP_LOG2); }
static int m_log10(lua_State *L) { return unary(L, FL_OP_LOG10); }
static int m_exp2(lua_State *L) { return unary(L, FL_OP_EXP2); }
static int m_rsqrt(lua_State *L) { return unary(L, FL_OP_RSQRT); }

/* The arguments of a reduction method: (tensor [, dim [, keepdim]]); dim FL_ALL_DIMS when absent. */
static fl_tensor *reduce_args(lua_State *L, int *dim, bool *keepdim, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    *dim = lua_isnoneornil(L, 2) ? FL_ALL_DIMS : check_reduce_dim(L, 2, t->ndim, fname);
    /* keepdim: a boolean (0 is true in Lua, so a number would keep the dim silently) */
    if (!lua_isnoneornil(L, 3) && !lua_isboolean(L, 3))
        luaL_error(L, "%s: keepdim must be a boolean, got %s", fname, luaL_typename(L, 3));
    *keepdim = lua_toboolean(L, 3);
    return t;
}

/* A reduction method given more than (dim [, keepdim]) (checked before anything is pushed). */
static void reduce_arity(lua_State *L, const char *fname) {
    if (lua_gettop(L) > 3) luaL_error(L, "%s: expected (dim [, keepdim]), got %d arguments", fname, lua_gettop(L) - 1);
}

static int reduce(lua_State *L, fl_redop op);

/* sum/mean over a list of dims {d1, d2, ...} (torch's dim=(...)): one reduction a dim, the highest first so that the
 * others keep their numbers, each result in a box of its own (an error leaks nothing); a mean of means over equal
 * groups is the mean. */
static int reduce_dims(lua_State *L, fl_redop op, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    lua_Integer n = fl_lchecklen(L, 2, fname, "dims", FL_LMAX_TABLE_LEN);
    if (n < 1) luaL_error(L, "%s: the list of dims is empty (leave dim out to reduce over all of them)", fname);
    if (t->ndim == 0 && n == 1) {   /* {1} or {-1} of a 0-d tensor: its one implicit dim, as a plain dim */
        lua_geti(L, 2, 1);
        lua_replace(L, 2);
        return reduce(L, op);
    }
    if (n > t->ndim) luaL_error(L, "%s: %I dims listed for a %d-d tensor", fname, n, t->ndim);
    bool seen[FL_MAX_DIMS] = { false };
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, 2, i);
        int d = check_dim(L, lua_gettop(L), t->ndim, fname);
        lua_pop(L, 1);
        if (seen[d]) luaL_error(L, "%s: dim %d appears twice in the list", fname, d + 1);
        seen[d] = true;
    }
    if (!lua_isnoneornil(L, 3) && !lua_isboolean(L, 3))
        luaL_error(L, "%s: keepdim must be a boolean, got %s", fname, luaL_typename(L, 3));
    const bool keepdim = lua_toboolean(L, 3);
    const fl_tensor *cur = t;
    /* bf16/fp16 over several dims: the partial results in fp32 and the last rounded once, as torch's (each rounded
     * to bf16 made a quarter of the results an ulp off) */
    const bool narrow = n > 1 && (t->dtype == FL_BF16 || t->dtype == FL_F16);
    if (narrow) {
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_to(slot, t, FL_F32));
        cur = *slot;
    }
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (!seen[d]) continue;
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_reduce(slot, op, cur, d, keepdim));
        cur = *slot;
    }
    if (narrow) {
        fl_tensor **slot = fl_lnewbox(L);
        FL_LCALL(L, fl_to(slot, cur, t->dtype));
    }
    return 1;
}

static int reduce(lua_State *L, fl_redop op) {
    if (lua_type(L, 2) == LUA_TTABLE) return reduce_dims(L, op, op == FL_OP_SUM ? "sum" : "mean");
    int dim;
    bool keepdim;
    fl_tensor *t = reduce_args(L, &dim, &keepdim, op == FL_OP_SUM ? "sum" : op == FL_OP_MEAN ? "mean" :
                               op == FL_OP_MAX ? "max" : op == FL_OP_MIN ? "min" : "amax");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_reduce(slot, op, t, dim, keepdim));
    return 1;
}
static int m_sum(lua_State *L) { reduce_arity(L, "sum"); return reduce(L, FL_OP_SUM); }
/* x:_sum_squares([dim [, keepdim]]): (x * x):sum(dim, keepdim)'s values and gradient in one pass (core/ops.h's
 * fl_sum_squares); one dim or none (lua/fp8/torch_forms.lua's norm checks the arguments) */
/* x:_logsumexp(dim [, keepdim]): core/ops.h's fl_logsumexp, one dim of an fp32 tensor (lua/fp8/torch_forms.lua's
 * logsumexp checks the arguments and keeps the other cases) */
static int m_logsumexp(lua_State *L) {
    reduce_arity(L, "logsumexp");
    luaL_checkany(L, 2);
    int dim;
    bool keepdim;
    fl_tensor *t = reduce_args(L, &dim, &keepdim, "logsumexp");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_logsumexp(slot, t, dim, keepdim));
    return 1;
}
static int m_sum_squares(lua_State *L) {
    reduce_arity(L, "sum_squares");
    int dim;
    bool keepdim;
    fl_tensor *t = reduce_args(L, &dim, &keepdim, "sum_squares");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_sum_squares(slot, t, dim, keepdim));
    return 1;
}
static int m_mean(lua_State *L) { reduce_arity(L, "mean"); return reduce(L, FL_OP_MEAN); }
/* argmax([dim [, keepdim]]) / argmin: 0-based indices as fp32 (class labels compare with them directly);
 * without dim, the flat index over all elements. */
static int argreduce(lua_State *L, bool want_min) {
    int dim;
    bool keepdim;
    fl_tensor *t = reduce_args(L, &dim, &keepdim, want_min ? "argmin" : "argmax");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_argreduce(slot, t, dim, keepdim, want_min));
    return 1;
}
static int m_argmax(lua_State *L) { reduce_arity(L, "argmax"); return argreduce(L, false); }
static int m_argmin(lua_State *L) { reduce_arity(L, "argmin"); return argreduce(L, true); }
/* max(dim [, keepdim]) / min: the values and, as torch's, their 0-based indices, the gradient going to the index;
 * max() without dim: the value, the gradient split among a tie (torch's rules for the two). */
static int reduce_with_index(lua_State *L, fl_redop op) {
    reduce_arity(L, op == FL_OP_MAX ? "max" : "min");
    if (lua_isnoneornil(L, 2)) return reduce(L, op);
    int dim;
    bool keepdim;
    fl_tensor *t = reduce_args(L, &dim, &keepdim, op == FL_OP_MAX ? "max" : "min");
    fl_tensor **vals = fl_lnewbox(L), **idx = fl_lnewbox(L);
    FL_LCALL(L, fl_reduce_index(vals, idx, op, t, dim, keepdim));
    return 2;
}
/* An optional boolean argument (a number would read as true: 0 is true in Lua). */
static bool opt_bool(lua_State *L, int arg, bool dflt, const char *fname, const char *what) {
    if (lua_isnoneornil(L, arg)) return dflt;
    if (!lua_isboolean(L, arg)) luaL_error(L, "%s: %s must be a boolean, got %s", fname, what, luaL_typename(L, arg));
    return lua_toboolean(L, arg);
}

/* x:sort([dim=-1 [, descending=false [, stable]]]) → values, indices (torch's sort; ties always keep their order, so
 * stable=true is what it does anyway); x:argsort(...) → the indices alone. dims 1-based, negative from the end. */
static int sort_like(lua_State *L, const char *fname, bool values) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 4, fname, "([dim=-1 [, descending=false [, stable]]])");
    int d = lua_isnoneornil(L, 2) ? -1 : t->ndim == 0 ? 0 : check_dim(L, 2, t->ndim, fname);
    if (d < 0 && t->ndim > 0) d += t->ndim;
    const bool desc = opt_bool(L, 3, false, fname, "descending");
    (void)opt_bool(L, 4, false, fname, "stable");
    fl_tensor **v = fl_lnewbox(L), **i = fl_lnewbox(L);
    FL_LCALL(L, fl_sort(v, i, t, d, desc, -1, fname));
    if (values) return 2;
    lua_remove(L, -2);
    return 1;
}
static int m_sort(lua_State *L) { return sort_like(L, "sort", true); }
static int m_argsort(lua_State *L) { return sort_like(L, "argsort", false); }

/* x:topk(k [, dim=-1 [, largest=true [, sorted=true]]]) → values, indices: the k largest (or smallest) along dim,
 * in order (sorted=false allows any order, and this one is sorted). */
static int m_topk(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 5, "topk", "(k [, dim=-1 [, largest=true [, sorted=true]]])");
    int64_t k = check_int(L, 2, "topk", "k");
    if (k < 0) return luaL_error(L, "topk: k must be >= 0, got %I", (lua_Integer)k);
    int d = lua_isnoneornil(L, 3) ? -1 : t->ndim == 0 ? 0 : check_dim(L, 3, t->ndim, "topk");
    if (d < 0 && t->ndim > 0) d += t->ndim;
    const bool largest = opt_bool(L, 4, true, "topk", "largest");
    (void)opt_bool(L, 5, true, "topk", "sorted");
    fl_tensor **v = fl_lnewbox(L), **i = fl_lnewbox(L);
    FL_LCALL(L, fl_sort(v, i, t, d, largest, k, "topk"));
    return 2;
}

/* x:multinomial(num_samples [, replacement=false]) and fp8.multinomial(probs, ...): torch's, category indices drawn
 * from each row's weights with the default generator (reproducible after fp8.manual_seed). */
static int m_multinomial(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "multinomial", "(num_samples [, replacement=false])");
    int64_t n = check_int(L, 2, "multinomial", "num_samples");
    const bool repl = opt_bool(L, 3, false, "multinomial", "replacement");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_multinomial(slot, t, n, repl, fl_default_rng()));
    return 1;
}

/* x:gather(dim, index) (also fp8.gather(x, dim, index)): torch's; index of x's shape but for dim (0-based positions) */
static int m_gather(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "gather", "(dim, index)");
    int d = t->ndim == 0 ? 0 : check_dim(L, 2, t->ndim, "gather");
    fl_tensor *idx = fl_lchecktensor(L, 3);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_gather(slot, t, d, idx));
    return 1;
}

/* x:_index_select(dim, index): fl_index_select, behind Tensor.index_select's checks (lua/fp8/tensor.lua) */
static int m_index_select(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "index_select", "(dim, index)");
    int d = t->ndim == 0 ? 0 : check_dim(L, 2, t->ndim, "index_select");
    fl_tensor *idx = fl_lchecktensor(L, 3);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_index_select(slot, t, d, idx));
    return 1;
}

/* x:scatter(dim, index, src | value) and x:scatter_add(dim, index, src) (also fp8.scatter(x, ...)): torch's, out of
 * place; index and src of one shape, x's but for dim; a number value is written at every position of index */
static int scatter(lua_State *L, bool add) {
    const char *fn = add ? "scatter_add" : "scatter";
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (!lua_isnoneornil(L, 5) && lua_type(L, 5) == LUA_TSTRING)
        return luaL_error(L, "%s: reduce= is not supported (torch deprecates it; scatter_add adds)", fn);
    fl_lmaxargs(L, 4, fn, add ? "(dim, index, src)" : "(dim, index, src or value)");
    if (t->ndim == 0) return luaL_error(L, "%s: a 0-d tensor has no dim to scatter along", fn);
    int d = check_dim(L, 2, t->ndim, fn);
    fl_tensor *idx = fl_lchecktensor(L, 3);
    fl_tensor *src = NULL, *made = NULL;
    if (!add && lua_type(L, 4) == LUA_TNUMBER) {
        check_in_range(L, fn, lua_tonumber(L, 4), t->dtype, "value");
        fl_tensor **hold = fl_lnewbox(L);   /* the filled src, released with its box */
        FL_LCALL(L, fl_tensor_full(hold, t->dtype, idx->ndim, idx->shape, lua_tonumber(L, 4), t->device));
        made = *hold;
    } else if (lua_type(L, 4) != LUA_TUSERDATA) {   /* (a released tensor: fl_lchecktensor says so) */
        return luaL_error(L, "%s: expected a src tensor%s, got %s", fn, add ? "" : " or a number value",
                          luaL_typename(L, 4));
    }
    src = made ? made : fl_lchecktensor(L, 4);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_scatter(slot, t, d, idx, src, add));
    return 1;
}
static int m_scatter(lua_State *L) { return scatter(L, false); }
static int m_scatter_add(lua_State *L) { return scatter(L, true); }

/* x:cumsum(dim): torch's running sums along dim (1-based, negative from the end; a 0-d tensor takes 1 or -1) */
static int m_cumsum(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "cumsum", "(dim)");
    if (lua_isnoneornil(L, 2)) return luaL_error(L, "cumsum: dim is required (torch's cumsum(dim)), got none");
    int d = check_reduce_dim(L, 2, t->ndim, "cumsum");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_cumsum(slot, t, t->ndim == 0 ? 0 : d));
    return 1;
}

/* _flip(mask) / _triangle(k, lower): the CPU kernels of Tensor.flip and tril/triu (core/flip.c, core/triangle.c);
 * lua/fp8 checks the arguments and takes the composite on other devices. mask: bit d for dim d + 1. */
static int m_flip_raw(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 2, "_flip", "(mask)");
    lua_Integer mask = fl_lcheckint(L, 2, "_flip", "mask", 0, ((lua_Integer)1 << FL_MAX_DIMS) - 1);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_flip(slot, t, (uint32_t)mask));
    return 1;
}
static int m_triangle_raw(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "_triangle", "(k, lower)");
    lua_Integer k = fl_lcheckint(L, 2, "_triangle", "k", LUA_MININTEGER, LUA_MAXINTEGER);
    luaL_checktype(L, 3, LUA_TBOOLEAN);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_triangle(slot, t, (int64_t)k, lua_toboolean(L, 3)));
    return 1;
}

static int m_max(lua_State *L) { return reduce_with_index(L, FL_OP_MAX); }
static int m_min(lua_State *L) { return reduce_with_index(L, FL_OP_MIN); }
/* A read FP8 tensor's counters are not known: its amax, underflow and saturated counts raise, naming why. */
static void refuse_unknown(lua_State *L, const fl_tensor *t, const char *what) {
    if (t->qunknown)
        luaL_error(L, "%s: this FP8 tensor was read from a file, which holds its bytes and scales but not what its "
                   "cast saw (the source's amax, underflow and saturation); qstats().unknown is true", what);
}

/* amax: for an FP8 tensor, the amax of the source its cast saw (a number); else a reduction. */
static int m_amax(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    if (fl_format(t->dtype)->is_fp8) {
        fl_lmaxargs(L, 1, "amax", "no arguments for an FP8 tensor (the amax its cast saw)");
        refuse_unknown(L, t, "amax");
        fl_cast_stats st;
        fl_lcheck(L, fl_tensor_qstats(t, &st));
        lua_pushnumber(L, st.amax);
        return 1;
    }
    reduce_arity(L, "amax");
    return reduce(L, FL_OP_AMAX);
}

static int l_matmul(lua_State *L) { return fl_ltensor_op2(L, "matmul", "(a, b)", fl_matmul); }

/* fp8.cat(list [, dim=1]): the tensors joined along dim (1-based, negative from the end); 1-d empty ones beside
 * others left out, as torch's. */
static int l_cat(lua_State *L) {
    fl_lmaxargs(L, 2, "cat", "(list [, dim])");
    lua_settop(L, 2);   /* the list's owner goes above the arguments */
    int n = 0;
    fl_tensor **ts = fl_lchecktensorlist(L, 1, "cat", &n);   /* pushes the array's owner */
    if (n == 0) return luaL_error(L, "cat: expected a non-empty list of tensors");
    /* torch's legacy rule: a 1-d empty tensor ([0], torch.tensor([]): the accumulator a loop starts from) beside
     * tensors of another shape is left out (it takes no gradient then); the others keep their order. Its dtype
     * still counts, as torch's type promotion takes every tensor of the list: a bf16 tensor after an fp32
     * torch.tensor([]) gives fp32 (mixed dtypes give fp32, as fl_cat's own rule). An FP8 one is refused as fl_cat
     * refuses every FP8 tensor (and torch refuses to promote FP8 beside another dtype): left out, it was taken in one
     * order and not the other (bf16 then an empty e4m3 gave bf16, the other way round fp32; until stop 94) */
    int kept = 0, widen = 0;
    for (int i = 0; i < n; i++) kept += !(ts[i]->ndim == 1 && ts[i]->shape[0] == 0);
    if (kept > 0 && kept < n) {
        for (int i = 0; i < n; i++)
            if (fl_format(ts[i]->dtype)->is_fp8)
                return luaL_error(L, "cat: tensor %d is %s: call :dequantize() first (its scale covers only its own "
                                  "values)", i + 1, fl_format(ts[i]->dtype)->name);
        for (int i = 1; i < n; i++)
            if (ts[i]->dtype != ts[0]->dtype) widen = 1;   /* fp32, bf16 and fp16 alone here */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (!(ts[i]->ndim == 1 && ts[i]->shape[0] == 0)) ts[k++] = ts[i];
        n = k;
    }
    int dim = 0;
    if (!lua_isnoneornil(L, 2)) {
        int64_t d = check_int(L, 2, "cat", "dim");
        int nd = ts[0]->ndim;
        if (nd == 0) return luaL_error(L, "cat: tensor 1 is 0-d (reshape it to [1] first)");
        if (d >= 1 && d <= nd) dim = (int)(d - 1);
        else if (d < 0 && d >= -nd) dim = (int)(nd + d);
        else return luaL_error(L, "cat: dim %d out of range for tensors of %d dims (valid: 1..%d or -%d..-1)", (int)d, nd, nd, nd);
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_cat(slot, n, (const fl_tensor *const *)ts, dim));
    if (widen && (*slot)->dtype != FL_F32 && ((*slot)->dtype == FL_BF16 || (*slot)->dtype == FL_F16)) {
        fl_tensor **wide = fl_lnewbox(L);   /* the narrow result's box goes with the garbage */
        FL_LCALL(L, fl_to(wide, *slot, FL_F32));
    }
    return 1;
}

/* ---- FP8 ---------------------------------------------------------------------------------- */

static float opt_positive(lua_State *L, int opts, const char *key) {
    float v = 0;
    if (lua_getfield(L, opts, key) != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "quantize: %s must be a number, got %s", key, luaL_typename(L, -1));
        double d = lua_tonumber(L, -1);
        if (!(d > 0) || !isfinite(d))
            luaL_error(L, "quantize: %s must be a finite number > 0, got %s", key, lua_tostring(L, -1));
        v = (float)d;
        /* what the cast uses is the fp32 value, and a scale's reciprocal decodes: both must be finite and > 0 */
        if (!(v > 0) || !isfinite(v) || (strcmp(key, "scale") == 0 && !isfinite(1.0f / v)))
            luaL_error(L, "quantize: %s must be in fp32's range (%s), got %s", key,
                       strcmp(key, "scale") == 0 ? "from 1/3.4e38 to 3.4e38, so that its reciprocal is finite too"
                                                 : "from 1.4e-45 to 3.4e38",
                       lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

static int m_quantize(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    fl_lmaxargs(L, 3, "quantize", "(format [, {scale=, amax=, margin=, axis=, saturate=}])");
    fl_dtype fmt = fl_lcheckfp8(L, 2);
    fl_quant_opts o;
    fl_quant_opts_default(&o);
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        static const char *const valid[] = {"scale", "amax", "margin", "axis", "saturate", NULL};
        fl_lcheckopts(L, 3, "quantize", valid);
        o.scale = opt_positive(L, 3, "scale");
        o.amax = opt_positive(L, 3, "amax");
        if (o.scale > 0 && o.amax > 0) return luaL_error(L, "quantize: give either scale or amax, not both");
        if (lua_getfield(L, 3, "margin") != LUA_TNIL) {
            o.margin = (int)fl_lcheckint(L, -1, "quantize", "margin", 0, 64);   /* as the recipe setting */
            /* margin is the amax rule's head-room (fp8_max / amax / 2^margin); a given scale is used as it is */
            if (o.scale > 0)
                return luaL_error(L, "quantize: margin applies to the scale derived from an amax, not to a given "
                                     "scale; give scale / 2^margin as the scale, or amax= with margin=");
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "axis") != LUA_TNIL) {
            o.axis = check_dim(L, lua_gettop(L), t->ndim, "quantize");
            /* scale= / amax= are one number: every slice would get it, the same cast as without axis= */
            if (o.scale > 0 || o.amax > 0)
                return luaL_error(L, "quantize: axis= gives each slice the scale of its own amax; %s= is one for the "
                                     "whole tensor (give one or the other)", o.scale > 0 ? "scale" : "amax");
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "saturate") != LUA_TNIL) {
            if (!lua_isboolean(L, -1)) return luaL_error(L, "quantize: saturate must be a boolean, got %s", luaL_typename(L, -1));
            o.overflow = lua_toboolean(L, -1) ? FL_SATURATE : FL_IEEE;
        }
        lua_pop(L, 1);
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_quantize_ag(slot, t, fmt, &o));
    return 1;
}

static fl_tensor *check_fp8(lua_State *L, int arg, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, arg);
    if (!t->scale_inv || !fl_format(t->dtype)->is_fp8)
        luaL_error(L, "%s() needs an FP8 tensor (from :quantize), got dtype %s", fname, fl_format(t->dtype)->name);
    return t;
}

static int m_dequantize(lua_State *L) {
    fl_tensor *t = check_fp8(L, 1, "dequantize");
    fl_lmaxargs(L, 2, "dequantize", "([dtype])");
    fl_dtype dt = FL_F32;
    if (!lua_isnoneornil(L, 2)) {   /* (the general dtype check listed e4m3 and e5m2 among the valid ones) */
        const char *name = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
        if (!name || !fl_dtype_from_name(name, &dt) || fl_format(dt)->is_fp8)
            return luaL_error(L, "dequantize: target dtype must be fp32, bf16 or fp16, got %s",
                              name ? name : luaL_typename(L, 2));
    }
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_dequantize_ag(slot, t, dt));
    return 1;
}

/* scale()/scale_inv(): a number per-tensor, an fp32 tensor (a copy) per-axis. */
static int push_scale(lua_State *L, int inverse) {
    fl_tensor *t = check_fp8(L, 1, inverse ? "scale_inv" : "scale");
    fl_lmaxargs(L, 1, inverse ? "scale_inv" : "scale", "no arguments");
    if (t->scale_axis < 0) {
        double si = 0;
        int64_t z = 0;
        FL_LCALL(L, fl_tensor_get(t->scale_inv, &z, &si));
        /* the scale in fp32 as 1/scale_inv: the cast's own multiplier (448/amax in fp32), or one ulp off it where
         * the reciprocal of its reciprocal does not come back (docs/lua-api.md); the reciprocal of the largest scale,
         * FLT_MAX, is an inexact subnormal whose own reciprocal overflows: FLT_MAX again, as the scale rule caps it */
        float s = 1.0f / (float)si;
        lua_pushnumber(L, inverse ? si : (double)(s > FLT_MAX ? FLT_MAX : s));
        return 1;
    }
    fl_tensor **slot = fl_lnewbox(L);
    if (inverse) FL_LCALL(L, fl_tensor_to(slot, t->scale_inv, FL_F32));
    else {
        fl_tensor **tmp = fl_lnewbox(L);
        FL_LCALL(L, fl_binary_scalar(tmp, FL_OP_DIV, t->scale_inv, 1.0, true));
        FL_LCALL(L, fl_binary_scalar(slot, FL_OP_MINIMUM, *tmp, FLT_MAX, false));
        lua_pop(L, 1);
    }
    return 1;
}
static int m_scale(lua_State *L) { return push_scale(L, 0); }
static int m_scale_inv(lua_State *L) { return push_scale(L, 1); }
static int m_scale_axis(lua_State *L) {
    fl_tensor *t = check_fp8(L, 1, "scale_axis");
    fl_lmaxargs(L, 1, "scale_axis", "no arguments");
    if (t->scale_axis < 0) lua_pushnil(L); else lua_pushinteger(L, t->scale_axis + 1);
    return 1;
}

static int m_bytes(lua_State *L) {
    fl_tensor *t = check_fp8(L, 1, "bytes");
    fl_lmaxargs(L, 1, "bytes", "no arguments");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_contiguous(slot, t));
    fl_tensor *c = *slot;
    if (c->device != FL_DEV_CPU) return luaL_error(L, "bytes(): the tensor is on %s; only CPU tensors can be read", fl_device_name(c->device));
    const uint8_t *p = (const uint8_t *)fl_tensor_data(c);
    int64_t n = fl_tensor_numel(c);
    lua_createtable(L, n > INT_MAX ? 0 : (int)n, 0);
    for (int64_t i = 0; i < n; i++) { lua_pushinteger(L, p[i]); lua_rawseti(L, -2, i + 1); }
    return 1;
}

/* The cast statistics of the FP8 tensor at arg 1 (waiting for the device if they are still pending). */
static fl_cast_stats qstats_of(lua_State *L, const char *what) {
    fl_cast_stats st;
    fl_tensor *t = check_fp8(L, 1, what);
    fl_lmaxargs(L, 1, what, "no arguments");
    if (strcmp(what, "qstats") != 0) refuse_unknown(L, t, what);
    fl_lcheck(L, fl_tensor_qstats(t, &st));
    return st;
}
static int m_underflow(lua_State *L) { lua_pushinteger(L, qstats_of(L, "underflow").underflow); return 1; }
static int m_saturated(lua_State *L) { lua_pushinteger(L, qstats_of(L, "saturated").saturated); return 1; }
static int m_qstats(lua_State *L) {
    fl_cast_stats st = qstats_of(L, "qstats");
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, st.amax); lua_setfield(L, -2, "amax");
    lua_pushinteger(L, st.underflow); lua_setfield(L, -2, "underflow");
    lua_pushinteger(L, st.saturated); lua_setfield(L, -2, "saturated");
    lua_pushinteger(L, st.nan); lua_setfield(L, -2, "nan");
    /* a view of part of the cast (select, narrow): the counters are the whole cast's */
    if (fl_lchecktensor(L, 1)->qpart) { lua_pushboolean(L, 1); lua_setfield(L, -2, "part"); }
    /* read from a file: the counters (zeros) say nothing of the source */
    if (fl_lchecktensor(L, 1)->qunknown) { lua_pushboolean(L, 1); lua_setfield(L, -2, "unknown"); }
    return 1;
}

/* ---- registration ------------------------------------------------------------------------- */

static const luaL_Reg methods[] = {
    {"shape", m_shape}, {"size", m_size}, {"stride", m_stride}, {"dim", m_dim}, {"numel", m_numel},
    {"dtype", m_dtype}, {"device", m_device}, {"is_contiguous", m_is_contiguous}, {"_channels_last", m_channels_last}, {"is_fp8", m_is_fp8},
    {"shape_str", m_shape_str},
    {"free", m_free_method}, {"is_released", m_is_released},
    {"view", m_view}, {"reshape", m_reshape}, {"transpose", m_transpose}, {"t", m_t},
    {"contiguous", m_contiguous}, {"narrow", m_narrow}, {"select", m_select}, {"expand", m_expand}, {"clone", m_clone}, {"to", m_to}, {"cuda", m_cuda}, {"cpu", m_cpu}, {"move_", m_move_},
    {"get", m_get}, {"set", m_set}, {"_write_", m_write_},
    {"item", m_item}, {"totable", m_totable}, {"_values", m_values},
    {"add", m_add}, {"sub", m_sub}, {"mul", m_mul}, {"div", m_div},
    {"pow", m_pow}, {"maximum", m_maximum}, {"minimum", m_minimum}, {"_where", m_where}, {"_clamp", m_clamp_scalar},
    {"atan2", m_atan2}, {"_hypot", m_hypot}, {"_dot", m_dot}, {"_norm_rescue", m_norm_rescue}, {"_norm_gate", m_norm_gate},
    {"fmod", m_fmod}, {"remainder", m_remainder},
    {"eq", m_eq}, {"ne", m_ne}, {"lt", m_lt}, {"le", m_le}, {"gt", m_gt}, {"ge", m_ge},
    {"abs", m_abs}, {"neg", m_neg}, {"exp", m_exp}, {"log", m_log}, {"sqrt", m_sqrt}, {"sign", m_sign},
    {"tanh", m_tanh}, {"sigmoid", m_sigmoid}, {"sin", m_sin}, {"cos", m_cos}, {"floor", m_floor}, {"ceil", m_ceil},
    {"round", m_round}, {"trunc", m_trunc}, {"erf", m_erf}, {"log1p", m_log1p}, {"expm1", m_expm1},
    {"tan", m_tan}, {"asin", m_asin}, {"acos", m_acos}, {"atan", m_atan}, {"sinh", m_sinh}, {"cosh", m_cosh},
    {"log2", m_log2}, {"log10", m_log10}, {"exp2", m_exp2}, {"_rsqrt", m_rsqrt},
    {"sum", m_sum}, {"mean", m_mean}, {"max", m_max}, {"min", m_min}, {"amax", m_amax},
    {"_sum_squares", m_sum_squares}, {"_logsumexp", m_logsumexp},
    {"sort", m_sort}, {"argsort", m_argsort}, {"topk", m_topk}, {"multinomial", m_multinomial}, {"cumsum", m_cumsum}, {"_flip", m_flip_raw}, {"_triangle", m_triangle_raw},
    {"gather", m_gather}, {"scatter", m_scatter}, {"scatter_add", m_scatter_add}, {"_index_select", m_index_select},
    {"argmax", m_argmax}, {"argmin", m_argmin},
    {"matmul", l_matmul},
    {"quantize", m_quantize}, {"dequantize", m_dequantize}, {"scale", m_scale}, {"scale_inv", m_scale_inv},
    {"scale_axis", m_scale_axis},
    {"bytes", m_bytes}, {"underflow", m_underflow}, {"saturated", m_saturated}, {"qstats", m_qstats},
    {NULL, NULL},
};

static const luaL_Reg metamethods[] = {
    {"__newindex", m_newindex}, {"__len", m_len},
    {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div}, {"__pow", m_pow}, {"__unm", m_neg},
    {"__mod", m_remainder},
    {"__gc", m_free}, {"__close", m_close},
    {NULL, NULL},
};

static const luaL_Reg factories[] = {
    {"tensor", l_tensor_new}, {"zeros", l_zeros}, {"ones", l_ones}, {"empty", l_empty}, {"full", l_full},
    {"arange", l_arange}, {"rand", l_rand}, {"randn", l_randn},
    {"randint", l_randint}, {"randperm", l_randperm}, {"multinomial", m_multinomial}, {"gather", m_gather},
    {"scatter", m_scatter}, {"scatter_add", m_scatter_add},
    {"is_tensor", l_is_tensor},
    {"_live_dtype", l_live_dtype},
    {"matmul", l_matmul}, {"cat", l_cat}, {"maximum", m_maximum}, {"minimum", m_minimum}, {"pow", m_pow},
    {NULL, NULL},
};

void fl_lopen_tensor(lua_State *L) {
    int lib = lua_gettop(L);
    fl_lgc_init(L);
    luaL_newmetatable(L, FL_TENSOR_MT);
    luaL_setfuncs(L, metamethods, 0);
    luaL_newlib(L, methods);                /* methods table; Lua code (fp8/tensor.lua) adds more */
    lua_pushvalue(L, -1);
    lua_setfield(L, lib, "Tensor");
    lua_pushcclosure(L, m_index, 1);        /* __index: methods by name, x[i] by number */
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "fp8.Tensor");
    lua_setfield(L, -2, "__name");
    lua_setfield(L, lib, "_metatable");     /* so fp8/tensor.lua can add __tostring */
    luaL_setfuncs(L, factories, 0);
    lua_pushinteger(L, FL_MAX_NUMEL);       /* the bytes one storage may hold: layers check their sizes against it */
    lua_setfield(L, lib, "_max_bytes");
}
