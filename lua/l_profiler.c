/* l_profiler.c — require "fp8._profiler": the core recorder (core/profiler.h) for Lua. start/stop a
 * recording session, push/pop named ranges (ProfilerStep#N, module paths), read the events as tables,
 * clear. lua/fp8/profiler.lua builds the user-facing profiler (schedule, tables, Chrome trace) on it. */
#include <unistd.h>
#include "l_util.h"
#include "profiler.h"

/* start{record_shapes=, profile_memory=, with_flops=, device=} (device: device time where a device clock
 * is registered) */
static int l_start(lua_State *L) {
    static const char *const keys[] = { "record_shapes", "profile_memory", "with_flops", "device", NULL };
    static const unsigned bits[] = { FL_PROF_RECORD_SHAPES, FL_PROF_MEMORY, FL_PROF_WITH_FLOPS, FL_PROF_DEVICE };
    unsigned flags = 0;
    if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TTABLE);
    fl_lcheckopts(L, 1, "profiler.start", keys);
    for (size_t i = 0; keys[i]; i++)
        if (fl_lfieldbool(L, 1, "profiler.start", keys[i], false)) flags |= bits[i];
    fl_lcheck(L, fl_prof_start(flags));
    return 0;
}

static int l_stop(lua_State *L) { (void)L; fl_prof_stop(); return 0; }
static int l_enabled(lua_State *L) { lua_pushboolean(L, atomic_load(&fl_prof_on) != 0); return 1; }
static int l_clear(lua_State *L) { (void)L; fl_prof_clear(); return 0; }
static int l_end_all(lua_State *L) { (void)L; fl_prof_end_all(); return 0; }
static int l_count(lua_State *L) { lua_pushinteger(L, (lua_Integer)fl_prof_count()); return 1; }
static int l_dropped(lua_State *L) { lua_pushinteger(L, (lua_Integer)fl_prof_dropped()); return 1; }
static int l_max_events(lua_State *L) { lua_pushinteger(L, (lua_Integer)fl_prof_max_events()); return 1; }
/* set_max_events(n): lower the cap on events between two clears (tests); 0: back to the default */
static int l_set_max_events(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0, 1, "expected a count >= 0");
    fl_prof_set_max_events((size_t)n);
    return 0;
}
static int l_now(lua_State *L) { lua_pushinteger(L, (lua_Integer)fl_prof_now_ns()); return 1; }
static int l_getpid(lua_State *L) { lua_pushinteger(L, (lua_Integer)getpid()); return 1; }
/* has_device_clock() -> whether device time can be recorded (a GPU in use); device_on() -> whether the
 * current session records it; resolve_device() -> events that got a device span (waits for the device). */
static int l_has_device_clock(lua_State *L) { lua_pushboolean(L, fl_prof_has_device_clock()); return 1; }
static int l_device_on(lua_State *L) { lua_pushboolean(L, (fl_prof_flags() & FL_PROF_DEVICE) != 0); return 1; }
static int l_resolve_device(lua_State *L) { lua_pushinteger(L, (lua_Integer)fl_prof_resolve_device()); return 1; }

/* push(name [, "range"|"module"|"op" [, note]]) -> token (0 while not recording). "op": an op that Lua composes of
 * others (fp8.addmm, conv_transpose2d, an in-place method), named as torch names it; the ops inside it count no FLOPs
 * (with_flops), as torch counts its one op: set_flops gives the op its own count where torch has one. */
static int l_push(lua_State *L) {
    static const char *const kinds[] = { "range", "module", "op", NULL };
    static const fl_prof_kind kv[] = { FL_PROF_RANGE, FL_PROF_MODULE, FL_PROF_OP };
    const char *name = luaL_checkstring(L, 1);
    int k = luaL_checkoption(L, 2, "range", kinds);
    const char *note = luaL_optstring(L, 3, NULL);
    uint64_t tok = fl_prof_begin(name, kv[k], note);
    if (tok && kv[k] == FL_PROF_OP) fl_prof_hide_inner_flops(tok);
    lua_pushinteger(L, (lua_Integer)tok);
    return 1;
}

/* set_flops(token, n): with_flops, the count of an "op" push's event (torch's for that op); token 0: nothing */
static int l_set_flops(lua_State *L) {
    lua_Integer tok = luaL_checkinteger(L, 1);
    lua_Number n = luaL_checknumber(L, 2);
    luaL_argcheck(L, n >= 0, 2, "expected a count >= 0");
    if (tok) fl_prof_set_flops((uint64_t)tok, (double)n);
    return 0;
}

/* pop(token): closes that range (and anything opened after it on this thread); 0 is a no-op. */
static int l_pop(lua_State *L) {
    fl_prof_end((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* set_shapes(token, n, v1, ..., vn): record_shapes, the input shapes of an "op" push's event as torch lists its
 * inputs: each v a tensor (its shape) or anything else (a scalar or None: "[]"); token 0: nothing */
static int l_set_shapes(lua_State *L) {
    lua_Integer tok = luaL_checkinteger(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, n >= 0 && n <= 16, 2, "expected 0 to 16 inputs");
    if (!tok || !(fl_prof_flags() & FL_PROF_RECORD_SHAPES)) return 0;
    const fl_tensor *ts[16];
    for (int i = 0; i < (int)n; i++) ts[i] = fl_ltotensor(L, 3 + i);
    fl_prof_set_shapes((uint64_t)tok, (int)n, ts);
    return 0;
}

/* index(token) -> its 1-based position in events(), or nil for a stale token */
static int l_index(lua_State *L) {
    int64_t i = fl_prof_index((uint64_t)luaL_checkinteger(L, 1));
    if (i < 0) lua_pushnil(L);
    else lua_pushinteger(L, (lua_Integer)i + 1);
    return 1;
}

/* events([first]) -> list of {name, kind, start_ns, end_ns (-1: still open), tid, parent (position or
 * nil), depth, flops?, bytes?, shapes?, note?, dev_start_ns?, dev_end_ns? (after resolve_device)} from
 * position `first` (1-based) on. */
static int l_events(lua_State *L) {
    lua_Integer first = luaL_optinteger(L, 1, 1);
    luaL_argcheck(L, first >= 1, 1, "first position must be >= 1");
    size_t n = fl_prof_count();
    bool mem = (fl_prof_flags() & FL_PROF_MEMORY) != 0;
    lua_createtable(L, n >= (size_t)first ? (int)(n - (size_t)first + 1) : 0, 0);
    fl_prof_event e;
    for (size_t i = (size_t)first - 1, out = 1; i < n && fl_prof_get(i, &e); i++, out++) {
        lua_createtable(L, 0, 12);
        lua_pushstring(L, e.name); lua_setfield(L, -2, "name");
        lua_pushstring(L, fl_prof_kind_names[e.kind]); lua_setfield(L, -2, "kind");
        lua_pushinteger(L, e.start_ns); lua_setfield(L, -2, "start_ns");
        lua_pushinteger(L, e.end_ns); lua_setfield(L, -2, "end_ns");
        lua_pushinteger(L, (lua_Integer)e.tid); lua_setfield(L, -2, "tid");
        lua_pushinteger(L, e.depth); lua_setfield(L, -2, "depth");
        if (e.parent >= 0) { lua_pushinteger(L, e.parent + 1); lua_setfield(L, -2, "parent"); }
        if (e.flops > 0) { lua_pushnumber(L, e.flops); lua_setfield(L, -2, "flops"); }
        if (mem) { lua_pushinteger(L, e.bytes); lua_setfield(L, -2, "bytes"); }
        if (e.shapes) { lua_pushstring(L, e.shapes); lua_setfield(L, -2, "shapes"); }
        if (e.note) { lua_pushstring(L, e.note); lua_setfield(L, -2, "note"); }
        if (e.dev_start_ns >= 0) {
            lua_pushinteger(L, e.dev_start_ns); lua_setfield(L, -2, "dev_start_ns");
            lua_pushinteger(L, e.dev_end_ns); lua_setfield(L, -2, "dev_end_ns");
        }
        lua_rawseti(L, -2, (lua_Integer)out);
    }
    return 1;
}

static const luaL_Reg funcs[] = {
    {"start", l_start},
    {"stop", l_stop},
    {"enabled", l_enabled},
    {"push", l_push}, {"set_flops", l_set_flops}, {"set_shapes", l_set_shapes},
    {"pop", l_pop},
    {"end_all", l_end_all},
    {"index", l_index},
    {"events", l_events},
    {"count", l_count},
    {"dropped", l_dropped},
    {"max_events", l_max_events},
    {"set_max_events", l_set_max_events},
    {"clear", l_clear},
    {"now", l_now},
    {"getpid", l_getpid},
    {"has_device_clock", l_has_device_clock},
    {"device_on", l_device_on},
    {"resolve_device", l_resolve_device},
    {NULL, NULL},
};

int luaopen_fp8_profiler_c(lua_State *L) {
    luaL_newlib(L, funcs);
    return 1;
}
