/* l_dist.c — require "fp8._dist": the communicator of core/dist.h (init, rank/size, collectives on CPU
 * tensors in place or into new tensors, non-blocking all-reduce with a wait handle) and the DDP
 * reducer of core/ddp.h as a userdata. lua/fp8/distributed.lua and lua/fp8/ddp.lua build the
 * Accelerator's data parallelism on it (docs/distributed.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "l_util.h"
#include "device.h"
#include "dist.h"
#include "ddp.h"

#define REQ_MT "fp8.DistRequest"
#define DDP_MT "fp8.DDPReducer"

static fl_red_op check_op(lua_State *L, int arg, const char *fname) {
    static const char *const names[] = { "sum", "max", NULL };
    const char *s = luaL_optstring(L, arg, "sum");
    for (int i = 0; names[i]; i++) if (strcmp(s, names[i]) == 0) return (fl_red_op)i;
    return (fl_red_op)luaL_error(L, "%s: op must be \"sum\" or \"max\", got \"%s\"", fname, s);
}

/* A collective of a script (these bindings, and the Accelerator's utilities built on them) that MPI failed on this
 * process (stop 105): it may have sent part of its messages, or none while the others wait in it, and MPI without
 * ULFM (Open MPI 4.1.4) offers no agreement after it: a Lua error here would leave the others waiting until the
 * watchdog, or meet their next collective with this process's. The job ends at once, naming the call, this rank and
 * MPI's error, as DDP's step does (core/ddp.c's collective_failed). A refusal before anything was sent (the
 * arguments), a pairing MPI refused (MPI_ERR_TRUNCATE, which every process meets) and NCCL's errors stay Lua errors.
 * `before` is fl_dist_failures() taken before the collective. */
static void collective(lua_State *L, fl_status st, unsigned before, const char *what) {
    if (st != FL_OK && fl_dist_failures() != before) {
        char msg[768];
        snprintf(msg, sizeof msg, "rank %d: %s failed (%s); the processes' collectives can no longer pair (the others "
                 "may be waiting in it, or meet this process's next one), so the job ends", fl_dist_rank(), what,
                 fl_last_error_detail());
        fl_dist_abort(msg);
    }
    fl_lcheck(L, st);
}
#define COLLECTIVE(L, what, call) do { unsigned f0_ = fl_dist_failures(); collective(L, call, f0_, what); } while (0)

static fl_tensor *check_comm_tensor(lua_State *L, int arg, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, arg);
    fl_lcheck(L, fl_dist_check_tensor(t, fname));
    return t;
}

/* init{timeout=, backend="mpi"|"nccl"} -> {rank, size, local_rank} */
static int l_init(lua_State *L) {
    static const char *const keys[] = { "timeout", "backend", NULL }, *const backends[] = { "mpi", "nccl", NULL };
    if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TTABLE);
    fl_lcheckopts(L, 1, "dist.init", keys);
    double timeout = 0;   /* absent: the core's default */
    if (fl_lfieldnumber_opt(L, 1, "dist.init", "timeout", &timeout) && !(timeout > 0 && isfinite(timeout)))
        return luaL_error(L, "dist.init: timeout must be a finite number of seconds > 0, got %f", timeout);
    int nccl = strcmp(fl_lfieldchoice(L, 1, "dist.init", "backend", "mpi", backends), "nccl") == 0;
    if (nccl && !fl_dist_built_nccl())
        return luaL_error(L, "dist.init: backend \"nccl\" is not available: this fp8lab is built without NCCL "
                          "(GPU collectives are refused); use InitProcessGroupKwargs{backend=\"mpi\"}");
    fl_lcheck(L, fl_dist_init(timeout));
    if (nccl) fl_lcheck(L, fl_dist_init_nccl());
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, fl_dist_rank()); lua_setfield(L, -2, "rank");
    lua_pushinteger(L, fl_dist_size()); lua_setfield(L, -2, "size");
    lua_pushinteger(L, fl_dist_local_rank()); lua_setfield(L, -2, "local_rank");
    return 1;
}

static int l_info(lua_State *L) {
    lua_createtable(L, 0, 8);
    lua_pushboolean(L, fl_dist_built_mpi()); lua_setfield(L, -2, "mpi_built");
    lua_pushstring(L, fl_dist_mpi_version()); lua_setfield(L, -2, "mpi_version");
    lua_pushboolean(L, fl_dist_built_nccl()); lua_setfield(L, -2, "nccl_built");
    lua_pushstring(L, fl_dist_nccl_version()); lua_setfield(L, -2, "nccl_version");
    lua_pushboolean(L, fl_dist_nccl_ready()); lua_setfield(L, -2, "nccl_ready");
    lua_pushboolean(L, fl_dist_launched()); lua_setfield(L, -2, "launched");
    lua_pushboolean(L, fl_dist_initialized()); lua_setfield(L, -2, "initialized");
    lua_pushinteger(L, fl_dist_initialized() ? fl_dist_size() : fl_dist_env_size()); lua_setfield(L, -2, "world_size");
    lua_pushinteger(L, fl_dist_initialized() ? fl_dist_rank() : fl_dist_env_rank()); lua_setfield(L, -2, "rank");
    lua_pushinteger(L, fl_dist_initialized() ? fl_dist_local_rank() : fl_dist_env_local_rank());
    lua_setfield(L, -2, "local_rank");
    lua_pushnumber(L, fl_dist_timeout()); lua_setfield(L, -2, "timeout");
    return 1;
}

static int l_rank(lua_State *L) { lua_pushinteger(L, fl_dist_rank()); return 1; }
static int l_size(lua_State *L) { lua_pushinteger(L, fl_dist_size()); return 1; }
static int l_local_rank(lua_State *L) { lua_pushinteger(L, fl_dist_local_rank()); return 1; }
static int l_barrier(lua_State *L) { COLLECTIVE(L, "dist.barrier", fl_dist_barrier()); return 0; }

static fl_tensor *check_cpu_tensor(lua_State *L, int arg, const char *fname) {
    fl_tensor *t = fl_lchecktensor(L, arg);
    fl_lcheck(L, fl_dist_check_tensor_cpu(t, fname));
    return t;
}

/* What every rank must agree on before a collective combines their buffers (MPI would otherwise add or
 * concatenate unrelated bytes on one rank and fail on another): the dtype, the shape (all_gather, reduce_scatter) or
 * the element count (all_reduce), and an FP8 tensor's per-tensor scale, without which its bytes mean nothing (the
 * result keeps it). One small all-gather; the error is the same on every rank. */
typedef struct { int64_t dtype, ndim, shape[FL_MAX_DIMS], scale_bits; } comm_key;

static void agree_tensors(lua_State *L, const fl_tensor *t, const char *fname, int with_shape) {
    comm_key k;
    memset(&k, 0, sizeof k);
    k.dtype = t->dtype;
    if (with_shape) { k.ndim = t->ndim; memcpy(k.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim); }
    else { k.ndim = -1; k.shape[0] = fl_tensor_numel(t); }
    if (fl_format(t->dtype)->is_fp8) {
        float s = 0;
        const fl_device *dev = fl_device_get(t->device);
        if (t->scale_axis >= 0 || !t->scale_inv || fl_tensor_numel(t->scale_inv) != 1) k.scale_bits = -1;
        else if (dev) {
            fl_lcheck(L, dev->to_host(&s, fl_tensor_data(t->scale_inv), sizeof s));
            uint32_t b;
            memcpy(&b, &s, sizeof b);
            k.scale_bits = b;
        }
    }
    int size = fl_dist_size();
    comm_key *all = lua_newuserdatauv(L, sizeof k * (size_t)size, 0);
    char what[96];
    snprintf(what, sizeof what, "%s's comparison of the processes' tensors (an all_gather)", fname);
    COLLECTIVE(L, what, fl_dist_allgather(&k, all, sizeof k));
    for (int r = 0; r < size; r++) {
        const comm_key *a = &all[r], *z = &all[0];
        if (a->scale_bits == -1)
            luaL_error(L, "%s: rank %d has an FP8 tensor scaled per row: its bytes cannot be combined with "
                       "another rank's; dequantize it first", fname, r);
        if (memcmp(a, z, sizeof k) == 0) continue;
        const char *da = fl_format((fl_dtype)a->dtype)->name, *dz = fl_format((fl_dtype)z->dtype)->name;
        if (a->dtype != z->dtype || a->ndim != z->ndim || memcmp(a->shape, z->shape, sizeof k.shape) != 0) {
            if (with_shape)
                luaL_error(L, "%s: rank %d has a %s tensor %s where rank 0 has a %s tensor %s (every rank must pass "
                           "the same dtype and shape)", fname, r, da, fl_lpushshape(L, (int)a->ndim, a->shape), dz,
                           fl_lpushshape(L, (int)z->ndim, z->shape));
            luaL_error(L, "%s: rank %d has a %s tensor of %I elements where rank 0 has a %s tensor of %I (every "
                       "rank must pass the same dtype and element count)", fname, r, da, (lua_Integer)a->shape[0], dz,
                       (lua_Integer)z->shape[0]);
        }
        float sa, sz;
        uint32_t ba = (uint32_t)a->scale_bits, bz = (uint32_t)z->scale_bits;
        memcpy(&sa, &ba, sizeof sa);
        memcpy(&sz, &bz, sizeof sz);
        luaL_error(L, "%s: rank %d's FP8 tensor has scale_inv %f where rank 0's has %f: FP8 bytes with different "
                   "scales cannot be combined; dequantize first", fname, r, (lua_Number)sa, (lua_Number)sz);
    }
    lua_pop(L, 1);
}

/* The result of a collective that combined FP8 bytes of one scale (agree_tensors) takes that scale. */
static void keep_scale(lua_State *L, fl_tensor *out, const fl_tensor *t) {
    if (fl_format(t->dtype)->is_fp8 && out != t) fl_lcheck(L, fl_tensor_copy_(out->scale_inv, t->scale_inv));
}

/* all_reduce(t, "sum"|"max") in place; returns t. CPU tensors through MPI, CUDA ones through NCCL. */
static int l_all_reduce(lua_State *L) {
    fl_tensor *t = check_comm_tensor(L, 1, "dist.all_reduce");
    fl_red_op op = check_op(L, 2, "dist.all_reduce");
    agree_tensors(L, t, "dist.all_reduce", 0);
    COLLECTIVE(L, "dist.all_reduce", fl_dist_tensor_allreduce(t, op));
    lua_settop(L, 1);
    return 1;
}

/* _all_reduce_unchecked(t, op): all_reduce without the ranks' comparison of dtypes and counts first (one collective,
 * not two): for fp8.distributed's comparison of the calls the processes are in, whose first collective is this one
 * on 4 fp32 values everywhere. Paired with another all-reduce of another count, MPI says so (MPI_ERR_TRUNCATE). */
static int l_all_reduce_unchecked(lua_State *L) {
    fl_tensor *t = check_comm_tensor(L, 1, "dist._all_reduce_unchecked");
    fl_red_op op = check_op(L, 2, "dist._all_reduce_unchecked");
    if (t->dtype != FL_F32)
        return luaL_error(L, "dist._all_reduce_unchecked: expected an fp32 tensor, got %s", fl_format(t->dtype)->name);
    fl_lcheck(L, fl_dist_tensor_allreduce(t, op));
    lua_settop(L, 1);
    return 1;
}

typedef struct { fl_dist_req *r; } req_box;

/* all_reduce_async(t, op) -> request; request:wait() returns t. The request keeps t alive. */
static int l_all_reduce_async(lua_State *L) {
    fl_tensor *t = check_cpu_tensor(L, 1, "dist.all_reduce_async");
    fl_red_op op = check_op(L, 2, "dist.all_reduce_async");
    agree_tensors(L, t, "dist.all_reduce_async", 0);
    req_box *b = lua_newuserdatauv(L, sizeof *b, 1);
    b->r = NULL;
    luaL_setmetatable(L, REQ_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    fl_tensor_bump(t);   /* an in-place write, as all_reduce's (core/dist.c) */
    COLLECTIVE(L, "dist.all_reduce_async",
               fl_dist_iallreduce(fl_tensor_data(t), fl_tensor_numel(t), t->dtype, op, &b->r));
    return 1;
}

static int l_req_wait(lua_State *L) {
    req_box *b = luaL_checkudata(L, 1, REQ_MT);
    fl_dist_req *r = b->r;
    b->r = NULL;
    COLLECTIVE(L, "dist.all_reduce_async's wait", fl_dist_wait(r));
    lua_getiuservalue(L, 1, 1);
    return 1;
}

static int l_req_gc(lua_State *L) {
    req_box *b = luaL_checkudata(L, 1, REQ_MT);
    /* never free a buffer MPI still writes; a wait that failed here ends the job too (it was dropped: stop 105) */
    if (b->r) {
        fl_dist_req *r = b->r;
        b->r = NULL;
        unsigned f0 = fl_dist_failures();
        fl_status st = fl_dist_wait(r);
        if (st != FL_OK && fl_dist_failures() != f0)
            collective(L, st, f0, "the wait of an all_reduce_async request collected without one");
    }
    return 0;
}

/* broadcast(t, root=0) in place; returns t */
static int l_broadcast(lua_State *L) {
    fl_tensor *t = check_comm_tensor(L, 1, "dist.broadcast");
    lua_Integer root = luaL_optinteger(L, 2, 0);
    if (root < 0 || root >= fl_dist_size())
        return luaL_error(L, "dist.broadcast: root must be a rank in 0..%d, got %d", fl_dist_size() - 1, (int)root);
    COLLECTIVE(L, "dist.broadcast", fl_dist_tensor_broadcast(t, (int)root));
    if (t->scale_inv && fl_tensor_is_contiguous(t->scale_inv))
        COLLECTIVE(L, "dist.broadcast (the FP8 scale)", fl_dist_tensor_broadcast(t->scale_inv, (int)root));
    lua_settop(L, 1);
    return 1;
}

/* broadcast_string(s, root=0) -> root's string on every rank */
static int l_broadcast_string(lua_State *L) {
    size_t len = 0;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_Integer root = luaL_optinteger(L, 2, 0);
    if (root < 0 || root >= fl_dist_size())
        return luaL_error(L, "dist.broadcast_string: root must be a rank in 0..%d, got %d", fl_dist_size() - 1, (int)root);
    int64_t n = (int64_t)len;
    COLLECTIVE(L, "dist.broadcast_string (its length)", fl_dist_broadcast(&n, sizeof n, (int)root));
    if (n < 0 || n > (int64_t)1 << 30) return luaL_error(L, "dist.broadcast_string: bad length %lld", (long long)n);
    luaL_Buffer b;
    char *p = luaL_buffinitsize(L, &b, (size_t)n);
    if (fl_dist_rank() == root) memcpy(p, s, (size_t)n);
    COLLECTIVE(L, "dist.broadcast_string", fl_dist_broadcast(p, n, (int)root));
    luaL_pushresultsize(&b, (size_t)n);
    return 1;
}

/* all_gather(t) -> new tensor [size*rows, ...] (rank order); 0-d tensors give [size]. Shapes must agree. */
static int l_all_gather(lua_State *L) {
    fl_tensor *t = check_comm_tensor(L, 1, "dist.all_gather");
    int size = fl_dist_size();
    agree_tensors(L, t, "dist.all_gather", 1);   /* every rank's dtype, shape and FP8 scale first */
    int ndim = t->ndim ? t->ndim : 1;
    int64_t shape[8];
    if (t->ndim == 0) shape[0] = size;
    else { memcpy(shape, t->shape, sizeof shape); shape[0] = t->shape[0] * size; }
    fl_tensor **box = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_empty(box, t->dtype, ndim, shape, t->device));
    COLLECTIVE(L, "dist.all_gather", fl_dist_tensor_allgather(t, *box));
    keep_scale(L, *box, t);
    return 1;
}

/* reduce_scatter(t, op) -> new tensor: rank r gets the reduction of rows [r*m, (r+1)*m), m = rows/size */
static int l_reduce_scatter(lua_State *L) {
    fl_tensor *t = check_cpu_tensor(L, 1, "dist.reduce_scatter");
    fl_red_op op = check_op(L, 2, "dist.reduce_scatter");
    int size = fl_dist_size();
    if (t->ndim < 1 || t->shape[0] % size != 0)
        return luaL_error(L, "dist.reduce_scatter: the first dimension must be a multiple of the world size %d, got %s",
                          size, fl_lpushshape(L, t->ndim, t->shape));
    int64_t shape[8];
    agree_tensors(L, t, "dist.reduce_scatter", 1);
    memcpy(shape, t->shape, sizeof shape);
    shape[0] /= size;
    fl_tensor **box = fl_lnewbox(L);
    FL_LCALL(L, fl_tensor_empty(box, t->dtype, t->ndim, shape, FL_DEV_CPU));
    COLLECTIVE(L, "dist.reduce_scatter",
               fl_dist_reduce_scatter(fl_tensor_data(t), fl_tensor_data(*box), fl_tensor_numel(*box), t->dtype, op));
    keep_scale(L, *box, t);
    return 1;
}

/* abort(msg): end the whole job now (every rank), after printing msg */
static int l_abort(lua_State *L) {
    const char *m = luaL_checkstring(L, 1);
    fl_dist_abort(m);
    return 0;
}

/* ---- DDP reducer ----------------------------------------------------------------------- */

typedef struct { fl_ddp *d; } ddp_box;

static fl_ddp *check_ddp(lua_State *L) {
    ddp_box *b = luaL_checkudata(L, 1, DDP_MT);
    if (!b->d) luaL_argerror(L, 1, "DDP reducer was released");
    return b->d;
}

/* ddp(params, names, {bucket_cap_mb=25, wire="fp32"|"fp16"|"bf16", find_unused=false}) */
static int l_ddp(lua_State *L) {
    lua_Integer nn = fl_lcheckrawlist(L, 2, "dist.ddp");
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);   /* the arrays below are pushed above the arguments */
    int n = 0;
    fl_tensor **ps = fl_lchecktensorlist(L, 1, "dist.ddp", &n);
    if (nn != n) return luaL_error(L, "dist.ddp: %d parameters but %I names", n, nn);
    const char **ns = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ns, 0);
    for (int i = 0; i < n; i++) {
        /* a string, not a number: lua_tostring would convert the popped copy, which nothing would then hold */
        if (lua_rawgeti(L, 2, i + 1) != LUA_TSTRING)
            return luaL_error(L, "dist.ddp: name %d is not a string (got %s)", i + 1, luaL_typename(L, -1));
        ns[i] = lua_tostring(L, -1);
        lua_pop(L, 1);   /* the names table keeps the string alive */
    }
    static const char *const keys[] = { "bucket_cap_mb", "wire", "find_unused", NULL };
    static const char *const wires[] = { "fp32", "fp16", "bf16", NULL };
    static const fl_dtype wire_dt[] = { FL_F32, FL_F16, FL_BF16 };
    fl_lcheckopts(L, 3, "dist.ddp", keys);
    fl_ddp_opts o = { .bucket_cap_bytes = 25.0 * 1024 * 1024, .wire = FL_F32, .find_unused = false };
    double cap = fl_lfieldnumber(L, 3, "dist.ddp", "bucket_cap_mb", 25);
    if (!(cap > 0)) return luaL_error(L, "dist.ddp: bucket_cap_mb must be a number > 0, got %f", cap);
    o.bucket_cap_bytes = cap * 1024 * 1024;
    const char *w = fl_lfieldchoice(L, 3, "dist.ddp", "wire", wires[0], wires);   /* one of wires: compared by address */
    for (int i = 0; wires[i]; i++) if (w == wires[i]) o.wire = wire_dt[i];
    o.find_unused = fl_lfieldbool(L, 3, "dist.ddp", "find_unused", false);
    ddp_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->d = NULL;
    luaL_setmetatable(L, DDP_MT);
    fl_lcheck(L, fl_ddp_new(&b->d, ps, ns, n, &o));
    return 1;
}

static int l_ddp_begin(lua_State *L) { fl_lcheck(L, fl_ddp_begin(check_ddp(L))); return 0; }
/* r:finish([failed]): failed = this process's backward raised (the collectives still run; see fl_ddp_finish) */
static int l_ddp_finish(lua_State *L) { fl_lcheck(L, fl_ddp_finish(check_ddp(L), lua_toboolean(L, 2))); return 0; }
static int l_ddp_cancel(lua_State *L) { fl_ddp_cancel(check_ddp(L)); return 0; }

static int l_ddp_stats(lua_State *L) {
    const fl_ddp_stats *s = fl_ddp_get_stats(check_ddp(L));
    lua_createtable(L, 0, 10);
    lua_pushinteger(L, s->buckets); lua_setfield(L, -2, "buckets");
    lua_pushinteger(L, s->steps); lua_setfield(L, -2, "steps");
    lua_pushinteger(L, s->early); lua_setfield(L, -2, "started_in_backward");
    lua_pushinteger(L, s->wire_bytes); lua_setfield(L, -2, "wire_bytes");
    lua_pushnumber(L, s->wait_s); lua_setfield(L, -2, "wait_s");
    lua_pushnumber(L, s->comm_s); lua_setfield(L, -2, "comm_s");
    lua_pushinteger(L, s->fp8_n); lua_setfield(L, -2, "fp8_n");
    lua_pushinteger(L, s->fp8_underflow); lua_setfield(L, -2, "fp8_underflow");
    lua_pushinteger(L, s->fp8_saturated); lua_setfield(L, -2, "fp8_saturated");
    return 1;
}

static int l_ddp_bucket_of(lua_State *L) {
    fl_ddp *d = check_ddp(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    int b = fl_ddp_bucket_of(d, (int)i - 1);
    if (b == -2) return luaL_error(L, "ddp:bucket_of: no parameter %d", (int)i);
    if (b < 0) lua_pushnil(L); else lua_pushinteger(L, b + 1);
    return 1;
}

static int l_ddp_gc(lua_State *L) {
    ddp_box *b = luaL_checkudata(L, 1, DDP_MT);
    fl_ddp_free(b->d);
    b->d = NULL;
    return 0;
}

static const luaL_Reg req_methods[] = { {"wait", l_req_wait}, {NULL, NULL} };
static const luaL_Reg ddp_methods[] = {
    {"begin", l_ddp_begin}, {"finish", l_ddp_finish}, {"cancel", l_ddp_cancel},
    {"stats", l_ddp_stats}, {"bucket_of", l_ddp_bucket_of}, {NULL, NULL},
};
static const luaL_Reg funcs[] = {
    {"init", l_init}, {"info", l_info}, {"rank", l_rank}, {"size", l_size}, {"local_rank", l_local_rank},
    {"barrier", l_barrier}, {"all_reduce", l_all_reduce}, {"all_reduce_async", l_all_reduce_async},
    {"_all_reduce_unchecked", l_all_reduce_unchecked},
    {"broadcast", l_broadcast}, {"broadcast_string", l_broadcast_string}, {"all_gather", l_all_gather},
    {"reduce_scatter", l_reduce_scatter}, {"abort", l_abort}, {"ddp", l_ddp}, {NULL, NULL},
};

int luaopen_fp8_dist_c(lua_State *L) {
    if (luaL_newmetatable(L, REQ_MT)) {
        luaL_newlib(L, req_methods); lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_req_gc); lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, DDP_MT)) {
        luaL_newlib(L, ddp_methods); lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_ddp_gc); lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, funcs);
    return 1;
}
