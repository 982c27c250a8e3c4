/* l_textonly.c — Lua chunks load as source text only. Precompiled (binary) chunks bypass the parser
 * and Lua's VM trusts them: a corrupted one crashes the interpreter (docs/robustness.md). So the host
 * loads scripts and -e code with mode "t", and `load`, `loadfile` and `dofile` are replaced by
 * versions that refuse a binary chunk with a message (an explicit mode other than "t" is an error). */
#include <string.h>
#include "l_util.h"

/* load(chunk [, chunkname [, mode [, env]]]) with mode forced to "t"; env keeps its presence. */
static int l_load_text(lua_State *L) {
    int n = lua_gettop(L);
    if (n >= 3 && !lua_isnil(L, 3) && !(lua_type(L, 3) == LUA_TSTRING && strcmp(lua_tostring(L, 3), "t") == 0))
        return luaL_error(L, "load: mode must be \"t\" (binary chunks are not accepted; docs/robustness.md), got %s",
                          fl_lshow(L, 3));
    int nargs = n < 3 ? 3 : n;   /* env (4th) keeps its presence: load(s, n, m, nil) differs from load(s, n, m) */
    lua_settop(L, nargs);
    lua_pushliteral(L, "t");
    lua_replace(L, 3);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, nargs, LUA_MULTRET);
    return lua_gettop(L);
}

/* loadfile([filename [, mode [, env]]]) with mode "t". */
static int l_loadfile_text(lua_State *L) {
    int n = lua_gettop(L);
    if (n >= 2 && !lua_isnil(L, 2) && !(lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "t") == 0))
        return luaL_error(L, "loadfile: mode must be \"t\" (binary chunks are not accepted), got %s",
                          fl_lshow(L, 2));
    const char *fname = luaL_optstring(L, 1, NULL);
    int env = n >= 3 ? 3 : 0;
    if (luaL_loadfilex(L, fname, "t") != LUA_OK) {
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    if (env) {
        lua_pushvalue(L, env);
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
}

/* dofile([filename]) in text mode; errors propagate as in the original. */
static int l_dofile_text(lua_State *L) {
    const char *fname = luaL_optstring(L, 1, NULL);
    lua_settop(L, 1);
    if (luaL_loadfilex(L, fname, "t") != LUA_OK) return lua_error(L);
    lua_call(L, 0, LUA_MULTRET);
    return lua_gettop(L) - 1;
}

void fl_lopen_textonly(lua_State *L) {
    lua_getglobal(L, "load");
    lua_pushcclosure(L, l_load_text, 1);
    lua_setglobal(L, "load");
    lua_pushcfunction(L, l_loadfile_text);
    lua_setglobal(L, "loadfile");
    lua_pushcfunction(L, l_dofile_text);
    lua_setglobal(L, "dofile");
}
