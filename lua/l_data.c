/* l_data.c — the C half of fp8.data (module "fp8._data"): IDX loading, batch gather, text windows,
 * byte-level text encoding and the GradScaler's unscale + inf/NaN check. lua/fp8/data.lua wraps it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "l_util.h"
#include "data.h"

/* A list of 1-based integer indices (a Lua table) → malloc'ed 0-based int64 array held by a
 * userdata on the stack, so a Lua error cannot leak it. `lo` is added after the 1 → 0 shift. */
static int64_t *check_indices(lua_State *L, int arg, int64_t *n, const char *fname, const char *what) {
    lua_Integer len = fl_lchecklen(L, arg, fname, what, FL_LMAX_TABLE_LEN);
    int64_t *idx = (int64_t *)lua_newuserdatauv(L, (size_t)(len ? len : 1) * sizeof(int64_t), 0);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, arg, i);
        int isint = 0;
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (!isint)
            luaL_error(L, "%s: %s[%I] must be an integer, got %s", fname, what, i,
                       lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
        idx[i - 1] = v == LUA_MININTEGER ? -1 : (int64_t)v - 1;   /* no wrap: LUA_MININTEGER stays out of range */
        lua_pop(L, 1);
    }
    *n = (int64_t)len;
    return idx;
}

/* load_images(path [, mean, std]) -> tensor [N, rows*cols], rows, cols */
static int l_load_images(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "load_images");
    double mean = luaL_optnumber(L, 2, 0.0), std = luaL_optnumber(L, 3, 0.0);
    int64_t rows = 0, cols = 0;
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_data_load_idx_images(slot, path, mean, std, &rows, &cols));
    lua_pushinteger(L, (lua_Integer)rows);
    lua_pushinteger(L, (lua_Integer)cols);
    return 3;
}

/* load_labels(path) -> tensor [N] */
static int l_load_labels(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "load_labels");
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_data_load_idx_labels(slot, path));
    return 1;
}

/* gather(t, {i1, i2, ...}) -> rows i1, i2, ... (1-based) of t as a new contiguous tensor */
static int l_gather(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    int64_t n;
    int64_t *idx = check_indices(L, 2, &n, "gather", "indices");
    for (int64_t b = 0; b < n; b++)
        if (t->ndim >= 1 && (idx[b] < 0 || idx[b] >= t->shape[0]))
            return luaL_error(L, "gather: index %I out of range 1..%I", (lua_Integer)(idx[b] + 1),
                              (lua_Integer)t->shape[0]);
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_data_gather(slot, t, idx, n));
    return 1;
}

/* windows(tokens, {s1, s2, ...}, block) -> x, y [n, block] (starts are 1-based) */
static int l_windows(lua_State *L) {
    fl_tensor *tok = fl_lchecktensor(L, 1);
    int64_t n;
    int64_t *start = check_indices(L, 2, &n, "windows", "starts");
    lua_Integer block = luaL_checkinteger(L, 3);
    fl_tensor **sx = fl_lnewbox(L);
    fl_tensor **sy = fl_lnewbox(L);
    fl_tensor *x = NULL, *y = NULL;
    fl_status st = fl_data_windows(&x, &y, tok, start, n, (int64_t)block);
    *sx = x;   /* boxes own them from here on, even if the Lua error below fires */
    *sy = y;
    fl_lcheck(L, st);
    return 2;
}

/* encode_bytes(str) -> tokens [#str] fp32, vocab (string of the distinct bytes, sorted).
 * Token id (0-based) = position of the byte in vocab. */
static int l_encode_bytes(lua_State *L) {
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    char vocab[256];
    int v = 0;
    fl_tensor **slot = fl_lnewbox(L);
    FL_LCALL(L, fl_data_encode_bytes(slot, s, n, vocab, &v));   /* core/data.c, fuzzed by tests/fuzz/fuzz_text.c */
    lua_pushlstring(L, vocab, (size_t)v);
    return 2;
}

/* unscale_(t, factor) -> found_nonfinite: t *= factor in place; true when t had inf/NaN.
 * unscale_({t1, t2, ...}, factor): the same for every tensor of the list (all checked before any changes; on
 * a device one wait for all the inf/NaN checks); true when any had inf/NaN. */
static int l_unscale(lua_State *L) {
    lua_Number f = luaL_checknumber(L, 2);
    bool bad = false;
    if (lua_istable(L, 1)) {
        int n;
        fl_tensor **ts = fl_lchecktensorlist(L, 1, "unscale_", &n);
        /* no retry on ENOMEM (FL_LCALL's): a failure while scaling leaves the earlier gradients scaled */
        fl_lcheck(L, fl_data_unscale_many(ts, n, (float)f, &bad));
    } else {
        FL_LCALL(L, fl_data_unscale_(fl_lchecktensor(L, 1), (float)f, &bad));
    }
    lua_pushboolean(L, bad);
    return 1;
}

/* clock() -> wall seconds (monotonic): os.clock() counts CPU time of all OpenMP threads, os.time()
 * has 1 s resolution; progress bars and the training scripts need neither. */
static int l_clock(lua_State *L) {
    fl_lmaxargs(L, 0, "data.clock", "no arguments");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* wall_time() -> seconds since the epoch (CLOCK_REALTIME, sub-second: Python's time.time()), the wall_time of
 * TensorBoard's events (lua/fp8/tensorboard.lua). */
static int l_wall_time(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* isatty([fd=1]) -> whether fd is a terminal (progress bars redraw one line only there). */
static int l_isatty(lua_State *L) {
    lua_Integer fd = luaL_optinteger(L, 1, 1);
    lua_pushboolean(L, isatty((int)fd));
    return 1;
}

static const luaL_Reg data_funcs[] = {
    {"clock", l_clock},
    {"isatty", l_isatty},
    {"wall_time", l_wall_time},
    {"load_images", l_load_images},
    {"load_labels", l_load_labels},
    {"gather", l_gather},
    {"windows", l_windows},
    {"encode_bytes", l_encode_bytes},
    {"unscale_", l_unscale},
    {NULL, NULL},
};

int luaopen_fp8_data(lua_State *L) {
    /* fp8._fileio (l_fileio.c: regular-file reads, atomic writes) comes with the data module */
    { int luaopen_fp8_fileio(lua_State *L); luaL_requiref(L, "fp8._fileio", luaopen_fp8_fileio, 0); lua_pop(L, 1); }
    luaL_newlib(L, data_funcs);
    return 1;
}
