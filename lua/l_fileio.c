/* l_fileio.c — module "fp8._fileio": the Lua face of core/fileio.c, for the Lua library's readers and
 * writers: read_regular(path, what, max_bytes) -> string (regular files only, size-capped) and
 * write_atomic(path, data) (unnamed temporary file, fsync, rename, fsync the directory) and
 * fsync_rename(tmp, path) (a file another program wrote, made durable under its final name) and append(path, data
 * [, durable]) (an append-only log: TensorBoard's event files). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "l_util.h"
#include "fileio.h"

/* The open file and its staging buffer live in a box whose __gc releases them, so a Lua error at any
 * point (a memory error included) leaks nothing. */
typedef struct { int fd; char *buf; } read_box;
static int read_box_gc(lua_State *L) {
    read_box *rb = (read_box *)lua_touserdata(L, 1);
    if (rb->fd >= 0) close(rb->fd);
    free(rb->buf);
    rb->fd = -1;
    rb->buf = NULL;
    return 0;
}

static int l_read_regular(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "read_regular");
    const char *what = luaL_optstring(L, 2, "file");
    lua_Integer max = fl_loptint(L, 3, "read_regular", "max_bytes", 0, LUA_MAXINTEGER, 0);
    read_box *rb = (read_box *)lua_newuserdatauv(L, sizeof(read_box), 0);
    rb->fd = -1;
    rb->buf = NULL;
    if (luaL_newmetatable(L, "fp8._fileio.read_box")) {
        lua_pushcfunction(L, read_box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    int64_t size;
    FL_LCALL(L, fl_open_regular(path, what, (int64_t)max, &rb->fd, &size));
    rb->buf = (char *)malloc((size_t)size + 1);
    if (!rb->buf) return luaL_error(L, "%s: out of memory reading %I bytes", path, (lua_Integer)size);
    int64_t n = 0;
    while (n <= size) {   /* at most size + 1 bytes: a file that grew past its size is refused */
        ssize_t r = read(rb->fd, rb->buf + n, (size_t)(size + 1 - n));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return luaL_error(L, "%s: read error: %s", path, strerror(errno));
        if (r == 0) break;
        n += r;
    }
    if (n > size) return luaL_error(L, "%s: the %s grew while being read", path, what);
    lua_pushlstring(L, rb->buf, (size_t)n);
    close(rb->fd);   /* now, rather than at the next collection */
    free(rb->buf);
    rb->fd = -1;
    rb->buf = NULL;
    return 1;
}

static int l_write_atomic(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "write_atomic");
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    FL_LCALL(L, fl_write_atomic(path, data, len));
    lua_pushstring(L, path);
    return 1;
}

static int l_fsync_rename(lua_State *L) {
    const char *tmp = fl_lcheckpath(L, 1, "fsync_rename");
    const char *path = fl_lcheckpath(L, 2, "fsync_rename");
    FL_LCALL(L, fl_fsync_rename(tmp, path));
    lua_pushstring(L, path);
    return 1;
}

/* append(path, data [, durable=false]): fl_append, an append-only log's next bytes */
static int l_append(lua_State *L) {
    const char *path = fl_lcheckpath(L, 1, "append");
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    bool durable = lua_toboolean(L, 3);
    FL_LCALL(L, fl_append(path, data, len, durable));
    return 0;
}

static const luaL_Reg fileio_funcs[] = {
    {"append", l_append},
    {"fsync_rename", l_fsync_rename},
    {"read_regular", l_read_regular},
    {"write_atomic", l_write_atomic},
    {NULL, NULL},
};

int luaopen_fp8_fileio(lua_State *L) {
    luaL_newlib(L, fileio_funcs);
    return 1;
}
