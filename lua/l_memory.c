/* l_memory.c — module fp8._memory: the allocator's counters of tensor storage per device (live and
 * peak bytes, core/tensor.h) and the bytes one tensor holds, for the memory figures of the scripts,
 * the lessons and MS-AMP's optimizer-state report. */
#include "l_util.h"

/* bytes([device="cpu"]) -> live, peak bytes of tensor storage on that device. */
static int opt_device(lua_State *L, int arg, const char *fname) {
    return lua_isnoneornil(L, arg) ? FL_DEV_CPU : fl_lcheckdevice(L, arg, fname);
}
static int l_bytes(lua_State *L) {
    int dev = opt_device(L, 1, "bytes");
    lua_pushinteger(L, (lua_Integer)fl_bytes_live(dev));
    lua_pushinteger(L, (lua_Integer)fl_bytes_peak(dev));
    return 2;
}
static int l_reset_peak(lua_State *L) { fl_bytes_reset_peak(opt_device(L, 1, "reset_peak")); return 0; }

/* storage_bytes(t) -> bytes of t's storage (and of its scale_inv), for per-parameter accounting. */
static int l_storage_bytes(lua_State *L) {
    fl_tensor *t = fl_lchecktensor(L, 1);
    lua_Integer n = (lua_Integer)t->storage->nbytes;
    if (t->scale_inv) n += (lua_Integer)t->scale_inv->storage->nbytes;
    lua_pushinteger(L, n);
    return 1;
}

static const luaL_Reg memory_funcs[] = {
    {"bytes", l_bytes},
    {"reset_peak", l_reset_peak},
    {"storage_bytes", l_storage_bytes},
    {NULL, NULL},
};

int luaopen_fp8_memory(lua_State *L) {
    luaL_newlib(L, memory_funcs);
    return 1;
}
