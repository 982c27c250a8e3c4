/* fuzz_lua_load.c — libFuzzer target for the Lua chunk loader as fp8lab runs it: text mode only
 * (lua/l_textonly.c). The bytes go through luaL_loadbufferx(..., "t") and through the replaced `load`,
 * `load` with a reader function, and — prefixed with the binary signature — must be refused, not run.
 * A chunk that compiles is not run (that would be fuzzing arbitrary programs). Never a crash. */
#include <stdint.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

void fl_lopen_textonly(lua_State *L);

static lua_State *L;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!L) {
        L = luaL_newstate();
        luaL_openlibs(L);
        fl_lopen_textonly(L);
    }
    int top = lua_gettop(L);
    /* 1. the host's loader (scripts, -e, the prompt) */
    int st = luaL_loadbufferx(L, (const char *)data, size, "=fuzz", "t");
    /* a failure leaves its message (syntax error, "C stack overflow" for deep nesting, memory) */
    if (st != LUA_OK && lua_type(L, -1) != LUA_TSTRING) __builtin_trap();
    if (size >= 4 && memcmp(data, LUA_SIGNATURE, 4) == 0 && st == LUA_OK) __builtin_trap();   /* binary ran */
    lua_settop(L, top);
    /* 2. the replaced global load, string and reader-function forms */
    lua_getglobal(L, "load");
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK) __builtin_trap();   /* load reports errors as nil, message */
    lua_settop(L, top);
    static const char reader[] =
        "local s = ... local i = 0 return load(function() i = i + 1 if i <= #s then return s:sub(i, i) end end)";
    if (luaL_loadstring(L, reader) != LUA_OK) __builtin_trap();
    lua_pushlstring(L, (const char *)data, size < 512 ? size : 512);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK) __builtin_trap();
    lua_settop(L, top);
    /* 3. the same bytes behind the binary signature: always refused */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, LUA_SIGNATURE);
    luaL_addlstring(&b, (const char *)data, size);
    luaL_pushresult(&b);
    lua_getglobal(L, "load");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK || !lua_isnil(L, -2)) __builtin_trap();
    lua_settop(L, top);
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
