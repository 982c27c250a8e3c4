/* l_fp8.c — luaopen_fp8_core: the C half of the `fp8` module (format traits, scalar FP8
 * encode/decode, the RNG seed) plus the tensor class from l_tensor.c. lua/fp8/init.lua wraps it. */
#include <math.h>
#include <string.h>
#include "l_util.h"
#include "device.h"
#include "rng.h"

/* Round a double to float with round-to-odd, so the following float → FP8 round-to-nearest-even
 * sees no double rounding (24 bits ≥ FP8's 4 mantissa bits + 2): a Lua number just above a tie
 * point must not round like the tie itself. */
static float f32_round_odd(double x) {
    float f = (float)x;
    if ((double)f == x || !isfinite(f) || isnan(x)) return f;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    b |= 1u;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* encode(x, fmt [, saturate]) -> byte. init.lua turns {saturate=bool} into the boolean. */
static int l_encode(lua_State *L) {
    fl_lmaxargs(L, 3, "encode", "(x, format [, saturate])");
    double x = luaL_checknumber(L, 1);
    fl_dtype fmt = fl_lcheckfp8(L, 2);
    int saturate = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
    uint8_t b = fl_f32_to_fp8(f32_round_odd(x), fmt, saturate ? FL_SATURATE : FL_IEEE);
    lua_pushinteger(L, b);
    return 1;
}

static int l_decode(lua_State *L) {
    fl_lmaxargs(L, 2, "decode", "(byte, format)");
    int isint = 0;
    /* a number only: lua_tointegerx would also read the string "1" (encode refuses strings too) */
    lua_Integer b = lua_type(L, 1) == LUA_TNUMBER ? lua_tointegerx(L, 1, &isint) : 0;
    if (!isint) {
        if (lua_type(L, 1) == LUA_TNUMBER)
            return luaL_argerror(L, 1, lua_pushfstring(L, "expected an integer byte 0..255, got %s",
                                                       lua_tostring(L, 1)));
        return luaL_argerror(L, 1, lua_pushfstring(L, "expected an integer byte 0..255, got %s",
                                                   luaL_typename(L, 1)));
    }
    if (b < 0 || b > 255)
        return luaL_argerror(L, 1, lua_pushfstring(L, "byte must be in 0..255, got %I", b));
    fl_dtype fmt = fl_lcheckfp8(L, 2);
    lua_pushnumber(L, (lua_Number)fl_fp8_to_f32((uint8_t)b, fmt));
    return 1;
}

/* Whether a byte is one of the format's NaN codes (explain.lua uses it). */
static int l_is_nan_code(lua_State *L) {
    fl_lmaxargs(L, 2, "is_nan_code", "(byte, format)");
    lua_Integer b = luaL_checkinteger(L, 1);
    luaL_argcheck(L, b >= 0 && b <= 255, 1, "byte must be in 0..255");
    fl_dtype fmt = fl_lcheckfp8(L, 2);
    lua_pushboolean(L, fl_fp8_is_nan((uint8_t)b, fmt));
    return 1;
}

static void set_num(lua_State *L, const char *k, double v) { lua_pushnumber(L, v); lua_setfield(L, -2, k); }
static void set_int(lua_State *L, const char *k, lua_Integer v) { lua_pushinteger(L, v); lua_setfield(L, -2, k); }

/* format(name) -> table of traits. */
static int l_format(lua_State *L) {
    fl_lmaxargs(L, 1, "format", "(name)");
    fl_dtype dt = fl_lcheckdtype(L, 1);
    const fl_format_traits *f = fl_format(dt);
    lua_createtable(L, 0, 16);
    lua_pushstring(L, f->name); lua_setfield(L, -2, "name");
    lua_pushstring(L, f->long_name); lua_setfield(L, -2, "long_name");
    set_int(L, "bits", f->bits);
    set_int(L, "bytes", (lua_Integer)f->size);
    set_int(L, "exp_bits", f->exp_bits);
    set_int(L, "mantissa_bits", f->mant_bits);
    set_int(L, "bias", f->bias);
    set_num(L, "max", f->max);
    set_num(L, "min_normal", f->min_normal);
    set_num(L, "min_subnormal", f->min_subnormal);
    set_num(L, "eps", ldexp(1.0, -f->mant_bits));  /* gap between 1 and the next value */
    lua_pushboolean(L, f->has_inf); lua_setfield(L, -2, "has_inf");
    lua_pushboolean(L, f->is_fp8); lua_setfield(L, -2, "is_fp8");
    set_int(L, "nan_codes", f->nan_count);
    return 1;
}

/* dtype_names() -> {"fp32", "bf16", ...} in enum order. */
static int l_dtype_names(lua_State *L) {
    fl_lmaxargs(L, 0, "dtype_names", "no arguments");
    lua_createtable(L, FL_DTYPE_COUNT, 0);
    for (int i = 0; i < FL_DTYPE_COUNT; i++) {
        lua_pushstring(L, fl_format((fl_dtype)i)->name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_manual_seed(lua_State *L) {
    fl_lmaxargs(L, 1, "manual_seed", "(seed)");
    int isint = 0;
    lua_Integer s = lua_tointegerx(L, 1, &isint);
    if (!isint) return luaL_argerror(L, 1, lua_pushfstring(L, "expected an integer seed, got %s",
                                                           lua_type(L, 1) == LUA_TNUMBER ? lua_tostring(L, 1) : luaL_typename(L, 1)));
    fl_manual_seed((uint64_t)s);
    return 0;
}

/* _device_has(device, entry): whether that device's op table fills the entry (core/device.h fl_device_has_entry);
 * the Lua layers pick their fused paths by it. An entry name no device has is an error (a typo would otherwise
 * read as "no kernel" and run the composite quietly). */
static int l_device_has(lua_State *L) {
    fl_lmaxargs(L, 2, "_device_has", "(device, entry)");
    int dev = fl_lcheckdevice(L, 1, "_device_has");
    const char *entry = luaL_checkstring(L, 2);
    int has = fl_device_has_entry(dev, entry);
    if (has < 0) return luaL_error(L, "_device_has: no device entry is called '%s'", entry);
    lua_pushboolean(L, has);
    return 1;
}

static const luaL_Reg core_funcs[] = {
    {"_device_has", l_device_has},
    {"encode", l_encode},
    {"decode", l_decode},
    {"is_nan_code", l_is_nan_code},
    {"format", l_format},
    {"dtype_names", l_dtype_names},
    {"manual_seed", l_manual_seed},
    {NULL, NULL},
};

int luaopen_fp8_cuda(lua_State *L);  /* l_cuda.c (the cuda helper's file) */

int luaopen_fp8_core(lua_State *L) {
    fl_lcallback_safe_std(L);   /* Lua's libraries call Lua holding no tensor: a free() under them is not deferred */
    luaL_newlib(L, core_funcs);
    /* fp8.cuda is always there (it answers "not built"/"no device" itself); requiref also makes
     * require "fp8.cuda" work without the host having to preload it. */
    luaL_requiref(L, "fp8.cuda", luaopen_fp8_cuda, 0);
    lua_setfield(L, -2, "cuda");
    { int luaopen_fp8_data(lua_State *L); luaL_requiref(L, "fp8._data", luaopen_fp8_data, 0); lua_pop(L, 1); } /* l_data.c, used by fp8.data */
    { int luaopen_fp8_settings(lua_State *L); luaL_requiref(L, "fp8.settings", luaopen_fp8_settings, 0); lua_setfield(L, -2, "settings"); }  /* l_settings.c: the settings table */
    { int luaopen_fp8_sys(lua_State *L); luaL_requiref(L, "fp8.sys", luaopen_fp8_sys, 0); lua_pop(L, 1); }  /* l_sys.c: process helpers */
    { int luaopen_fp8_config(lua_State *L); luaL_requiref(L, "fp8.config", luaopen_fp8_config, 0); lua_setfield(L, -2, "config"); }  /* l_config.c: config.yaml */
    lua_pushstring(L, fl_dtype_choices());
    lua_setfield(L, -2, "dtype_choices");
    { int luaopen_fp8_optim_c(lua_State *L); luaL_requiref(L, "fp8._optim", luaopen_fp8_optim_c, 0); lua_setfield(L, -2, "_optim"); }  /* l_optim.c: fused optimizer steps */
    { int luaopen_fp8_layer_c(lua_State *L); luaL_requiref(L, "fp8._fp8_layer", luaopen_fp8_layer_c, 0); lua_pop(L, 1); }  /* l_fp8_layer.c: FP8 layer state, FP8 linear */
    { int luaopen_fp8_memory(lua_State *L); luaL_requiref(L, "fp8._memory", luaopen_fp8_memory, 0); lua_pop(L, 1); }  /* l_memory.c: allocator counters */
    { int luaopen_fp8_dist_c(lua_State *L); luaL_requiref(L, "fp8._dist", luaopen_fp8_dist_c, 0); lua_pop(L, 1); }  /* l_dist.c: MPI collectives, DDP reducer */
    { int luaopen_fp8_profiler_c(lua_State *L); luaL_requiref(L, "fp8._profiler", luaopen_fp8_profiler_c, 0); lua_pop(L, 1); }  /* l_profiler.c: used by fp8.profiler */
    { int luaopen_fp8_checkpoint_c(lua_State *L); luaL_requiref(L, "fp8._checkpoint", luaopen_fp8_checkpoint_c, 0);  /* l_checkpoint.c */
      for (const char *const *k = (const char *const[]){ "save_file", "load_file", "safe_open", NULL }; *k; k++) {
          lua_getfield(L, -1, *k); lua_setfield(L, -3, *k); }
      lua_pop(L, 1); }
    { int luaopen_fp8_luarng(lua_State *L); luaL_requiref(L, "fp8._luarng", luaopen_fp8_luarng, 0); lua_pop(L, 1); }  /* l_luarng.c: math.random's state */
    fl_lopen_tensor(L);
    fl_lopen_autograd(L);   /* l_autograd.c: t:backward(), t.grad, fp8.no_grad, autocast */
    fl_lopen_nn(L);         /* l_nn.c: the C NN ops as core._nn (fp8.nn.functional re-exports them) */
    return 1;
}
