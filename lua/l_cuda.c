/* l_cuda.c — the fp8.cuda table: is_built, is_available, device_count, synchronize and the memory
 * counters. Talks to the GPU only through the core's device interface (core/device.h), which answers
 * as torch does when there is no GPU, or no CUDA built in: 0 bytes, nothing to empty, synchronize raises. */
#include <lauxlib.h>
#include <lua.h>
#include "device.h"
#include "l_util.h"

/* Each takes no arguments (torch's device= among them: one GPU per process here, the counters are its own; a
 * device index was taken and the process's GPU answered for it) */
#define NO_ARGS(name) fl_lmaxargs(L, 0, name, "no arguments (one GPU per process: its own counters)")

int luaopen_fp8_cuda(lua_State *L);

static int l_is_built(lua_State *L) {
    NO_ARGS("is_built");
#ifdef FL_HAVE_CUDA
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    return 1;
}

/* Quiet: a question, not a request for the GPU; the CPU-fallback notice comes when a tensor or
 * synchronize() actually asks for the cuda device. */
static int l_is_available(lua_State *L) {
    NO_ARGS("is_available");
    lua_pushboolean(L, fl_device_count(FL_DEV_CUDA) > 0);
    return 1;
}
static int l_device_count(lua_State *L) {
    NO_ARGS("device_count");
    lua_pushinteger(L, fl_device_count(FL_DEV_CUDA));
    return 1;
}
static int l_synchronize(lua_State *L) {
    NO_ARGS("synchronize");
    if (fl_device_synchronize(FL_DEV_CUDA) != FL_OK) return luaL_error(L, "%s", fl_last_error_detail());
    return 0;
}
/* Byte counts are exact integers in Lua 5.4. Before the device is used (or without one) they are 0. */
static int l_memory_allocated(lua_State *L) {
    NO_ARGS("memory_allocated");
    lua_pushinteger(L, (lua_Integer)fl_device_memory_allocated(FL_DEV_CUDA));
    return 1;
}
static int l_max_memory_allocated(lua_State *L) {
    NO_ARGS("max_memory_allocated");
    lua_pushinteger(L, (lua_Integer)fl_device_max_memory_allocated(FL_DEV_CUDA));
    return 1;
}
/* Without a GPU torch raises "invalid argument"; resetting a peak that is 0 does what was asked. */
static int l_reset_peak_memory_stats(lua_State *L) {
    NO_ARGS("reset_peak_memory_stats");
    fl_device_reset_peak_memory(FL_DEV_CUDA);
    return 0;
}
static int l_max_memory_reserved(lua_State *L) {
    NO_ARGS("max_memory_reserved");
    lua_pushinteger(L, (lua_Integer)fl_device_max_memory_reserved(FL_DEV_CUDA));
    return 1;
}
static int l_memory_reserved(lua_State *L) {
    NO_ARGS("memory_reserved");
    lua_pushinteger(L, (lua_Integer)fl_device_memory_reserved(FL_DEV_CUDA));
    return 1;
}
static int l_empty_cache(lua_State *L) {
    NO_ARGS("empty_cache");
    fl_device_empty_cache(FL_DEV_CUDA);
    return 0;
}
/* Why the GPU is unusable, or nil when it is usable (or not probed yet). */
static int l_unavailable_reason(lua_State *L) {
    NO_ARGS("unavailable_reason");
    if (fl_device_count(FL_DEV_CUDA) > 0) { lua_pushnil(L); return 1; }
    const char *r = fl_device_probe_reason(FL_DEV_CUDA);
    if (r[0]) lua_pushstring(L, r); else lua_pushnil(L);
    return 1;
}

static const luaL_Reg cuda_funcs[] = {
    {"is_built", l_is_built},
    {"is_available", l_is_available},
    {"device_count", l_device_count},
    {"synchronize", l_synchronize},
    {"memory_allocated", l_memory_allocated},
    {"max_memory_allocated", l_max_memory_allocated},
    {"reset_peak_memory_stats", l_reset_peak_memory_stats},
    {"memory_reserved", l_memory_reserved},
    {"max_memory_reserved", l_max_memory_reserved},
    {"empty_cache", l_empty_cache},
    {"unavailable_reason", l_unavailable_reason},
    {NULL, NULL},
};

int luaopen_fp8_cuda(lua_State *L) {
    luaL_newlib(L, cuda_funcs);
    return 1;
}
