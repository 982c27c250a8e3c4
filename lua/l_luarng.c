/* l_luarng.c — module fp8._luarng: the state of Lua's own generator (math.random) read and set, so that
 * acc:save_state keeps it beside fp8's, as Accelerate's save_state keeps Python's random.getstate() beside torch's.
 *
 * Lua 5.4's library has no getter for it. In lmathlib.c (5.4.0 to 5.4.7; Debian 12 ships 5.4.4) the state is a
 * RanState { Rand64 s[4]; }, xoshiro256**'s four 64-bit words, in a full userdata of sizeof(RanState) bytes and no
 * user values that is the first upvalue of math.random and math.randomseed. That layout is an assumption about
 * another library's private struct, so every read and write checks it first and refuses loudly where it does not
 * hold: math.random must be a C function whose first upvalue is such a userdata of 32 bytes, and one draw of
 * math.random(0) (all 64 bits, Lua's I2Int of the generator's output) from a copy of the state must give the number
 * and the next state xoshiro256** gives from those words (a 32-bit Rand64, a reordered struct or another generator
 * fails it); the state is then put back, so the check draws nothing. The function checked is math.random as the
 * library opened it (kept when this module opens), so a script that replaces math.random does not move it. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <lualib.h>
#include "l_util.h"

#define RANSTATE_BYTES 32   /* lmathlib.c's sizeof(RanState): Rand64 s[4] */

static uint64_t rotl64(uint64_t x, int n) { return (x << n) | (x >> (64 - n)); }

/* xoshiro256** one step, as lmathlib.c's nextrand: the output, s advanced */
static uint64_t xoshiro_next(uint64_t s[4]) {
    const uint64_t out = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

/* Pushes the math library's random (package.loaded.math.random), or nil where the library is not open. */
static void push_lib_random(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    if (lua_getfield(L, -1, LUA_MATHLIBNAME) == LUA_TTABLE) lua_getfield(L, -1, "random"); else lua_pushnil(L);
    lua_replace(L, -3);
    lua_pop(L, 1);
}

/* The state's bytes of math.random (upvalue 1 of this function), checked as the file's comment says; raises
 * otherwise. The check leaves the state as it found it. */
static unsigned char *ranstate(lua_State *L, const char *fname) {
    lua_pushvalue(L, lua_upvalueindex(1));
    if (lua_isnil(L, -1)) {   /* the math library was opened after this module: read it now */
        lua_pop(L, 1);
        push_lib_random(L);
    }
    const int f = lua_gettop(L);
    const char *why = NULL;
    unsigned char *p = NULL;
    if (!lua_iscfunction(L, f)) why = "math.random is not Lua's C function";
    else if (!lua_getupvalue(L, f, 1) || lua_type(L, -1) != LUA_TUSERDATA || lua_getmetatable(L, -1))
        why = "math.random's first upvalue is not a plain full userdata";
    else if (lua_rawlen(L, -1) != RANSTATE_BYTES)
        why = lua_pushfstring(L, "math.random's state is %d bytes, not lmathlib.c's RanState of %d",
                              (int)lua_rawlen(L, -1), RANSTATE_BYTES);
    else {
        p = lua_touserdata(L, -1);
        uint64_t before[4], expect[4], after[4];
        memcpy(before, p, sizeof before);
        memcpy(expect, p, sizeof expect);
        const uint64_t want = xoshiro_next(expect);
        lua_pushvalue(L, f);
        lua_pushinteger(L, 0);
        lua_call(L, 1, 1);   /* math.random(0): cannot raise */
        const bool same_out = lua_isinteger(L, -1) && (uint64_t)lua_tointeger(L, -1) == want;
        memcpy(after, p, sizeof after);
        memcpy(p, before, sizeof before);   /* the check draws nothing */
        if (!same_out || memcmp(after, expect, sizeof after) != 0) {
            why = "math.random(0) from its state is not the number xoshiro256** gives from lmathlib.c's RanState";
            p = NULL;
        }
    }
    if (!p)
        luaL_error(L, "%s: cannot reach the state of Lua's math.random (%s; this Lua is %s, fp8lab knows Lua 5.4's "
                   "lmathlib.c): it cannot be saved or restored", fname, why, LUA_RELEASE);
    lua_settop(L, f - 1);
    return p;
}

/* state() -> the generator's 4 words as 64 hex digits (s[0] first, each most significant digit first) */
static int l_state(lua_State *L) {
    fl_lmaxargs(L, 0, "math_random_state", "()");
    uint64_t s[4];
    memcpy(s, ranstate(L, "math_random_state"), sizeof s);
    char buf[4 * 16 + 1];
    for (int i = 0; i < 4; i++) snprintf(buf + 16 * i, 17, "%016llx", (unsigned long long)s[i]);
    lua_pushlstring(L, buf, 64);
    return 1;
}

/* The one test of a state (set_state's, fp8.set_math_random_state's and load_state's, through is_state): the value
 * at idx is a string of 64 hex digits, either case (state() writes lowercase), whose four words are not all zero
 * (xoshiro256** would give 0 for ever). STATE_OK with the words in s, STATE_FORM (not 64 hex digits) or STATE_ZERO. */
enum { STATE_OK, STATE_FORM, STATE_ZERO };
static int state_of(lua_State *L, int idx, uint64_t s[4]) {
    size_t n = 0;
    const char *h = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &n) : "";   /* a number stays one */
    if (lua_type(L, idx) != LUA_TSTRING || n != 64 || strspn(h, "0123456789abcdefABCDEF") != 64) return STATE_FORM;
    for (int i = 0; i < 4; i++) {
        char w[17];
        memcpy(w, h + 16 * i, 16);
        w[16] = 0;
        unsigned long long v = 0;
        sscanf(w, "%llx", &v);
        s[i] = (uint64_t)v;
    }
    return (s[0] | s[1] | s[2] | s[3]) == 0 ? STATE_ZERO : STATE_OK;
}

/* is_state(v) -> whether v is a state set_state takes (the check of the Lua callers, each with its own message) */
static int l_is_state(lua_State *L) {
    fl_lmaxargs(L, 1, "math_random is_state", "(v)");
    uint64_t s[4];
    lua_pushboolean(L, state_of(L, 1, s) == STATE_OK);
    return 1;
}

/* set_state(hex): puts back a state state() returned; raises naming what came otherwise */
static int l_set_state(lua_State *L) {
    fl_lmaxargs(L, 1, "set_math_random_state", "(state)");
    uint64_t s[4];
    const int form = state_of(L, 1, s);
    if (form == STATE_FORM) {
        size_t n = 0;
        const char *h = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &n) : "";
        return luaL_error(L, "set_math_random_state: expected the 64 hex digits fp8.get_math_random_state() returns "
                          "(xoshiro256**'s four 64-bit words), got %s", lua_type(L, 1) == LUA_TSTRING
                          ? lua_pushfstring(L, "\"%s\"", n > 70 ? "a string of another length" : h)
                          : luaL_typename(L, 1));
    }
    if (form == STATE_ZERO)
        return luaL_error(L, "set_math_random_state: a state of four zero words is not one math.random can be in "
                          "(xoshiro256** would give 0 for ever)");
    memcpy(ranstate(L, "set_math_random_state"), s, sizeof s);
    return 0;
}

static const luaL_Reg luarng_funcs[] = { {"state", l_state}, {"set_state", l_set_state}, {"is_state", l_is_state},
                                         {NULL, NULL} };

int luaopen_fp8_luarng(lua_State *L) {
    lua_newtable(L);
    push_lib_random(L);   /* math.random as the library opened it, kept before any script can replace it */
    luaL_setfuncs(L, luarng_funcs, 1);
    return 1;
}
