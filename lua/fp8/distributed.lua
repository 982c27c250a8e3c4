-- distributed.lua — the Accelerator's multi-process side (docs/distributed.md): joining the MPI job
-- (InitProcessGroupKwargs), Accelerate's process utilities (print, wait_for_everyone, gather,
-- gather_for_metrics, gather_object, reduce, broadcast, broadcast_object_list, split_between_processes,
-- main_process_first and the on_* and trigger helpers) and the DataLoader sharding of Accelerate's
-- BatchSamplerShard (by whole batches, or split_batches=true). A single process makes no MPI call.
local D = require "fp8._dist"
local core = require "fp8.core"
local O = require "fp8.opts"

local M = {}

-- ---- joining the job ---------------------------------------------------------------------------

-- setup(acc): rank, world size and the process group from InitProcessGroupKwargs. Called by
-- fp8.Accelerator{...} before anything else that depends on the rank.
function M.setup(acc)
  local s = acc.settings
  local pg, explicit = s.process_group or {}, (s.sources or {}).process_group == "handler"
  local given = s.process_group_given or {}
  local info = D.info()
  -- the backend the user asked for; a handler that only sets the timeout keeps MPI (its dataclass default,
  -- nccl as in Accelerate, is not a request: NCCL needs GPU tensors, and the DDP reducer runs on the CPU)
  local backend = explicit and given.backend and pg.backend or "mpi"
  if backend == "nccl" and not info.nccl_built then
    error("Accelerator: InitProcessGroupKwargs{backend=\"nccl\"}: this fp8lab has no NCCL (built without it; GPU "
      .. "collectives are refused); use backend=\"mpi\" (CPU tensors through MPI)", 4)
  end
  if explicit and given.init_method then
    error(("Accelerator: InitProcessGroupKwargs init_method=%q is not supported: mpirun or srun start and wire the "
      .. "processes (fp8lab launch --num_processes N runs mpirun)"):format(pg.init_method), 4)
  end
  -- a timeout the user did not give follows the backend actually used: 600 s for nccl, 1800 s for mpi
  local timeout = explicit and given.timeout and pg.timeout or (backend == "nccl" and 600 or 1800)
  acc.process_group = { backend = backend, timeout = timeout }
  s.process_group = { backend = backend, timeout = timeout }   -- what acc:state() shows: the group in use, not the handler's defaults
  if info.launched or backend == "nccl" then
    local ok, w = pcall(D.init, { timeout = timeout, backend = backend })
    if not ok then
      error("Accelerator: " .. tostring(w) .. (backend == "nccl" and
        ' (backend="nccl" needs a GPU per process; backend="mpi" runs on the CPU)' or ""), 4)
    end
    acc.process_index, acc.num_processes, acc.local_process_index = w.rank, w.size, w.local_rank
  else
    acc.process_index, acc.num_processes, acc.local_process_index = 0, 1, 0
    -- num_processes from the config file or FP8LAB_NUM_PROCESSES is fp8lab launch's (it starts the processes); a
    -- process started without it runs alone, which is said rather than passed over
    local want, from = s.num_processes, (s.sources or {}).num_processes
    if math.type(want) == "integer" and want > 1 and (from == "config" or from == "env") then
      s.notices = s.notices or {}
      s.notices[#s.notices + 1] = ("num_processes=%d (%s) is for fp8lab launch, which starts the processes: this one "
        .. "was started without it and runs alone (fp8lab launch script.lua starts %d)"):format(want,
        from == "env" and "FP8LAB_NUM_PROCESSES" or "the config file", want)
    end
  end
  -- Accelerate's DistributedType (fp8.DistributedType): several processes on GPUs are MULTI_GPU
  acc.distributed_type = acc.num_processes <= 1 and "NO" or acc._device == "cuda" and "MULTI_GPU" or "MULTI_CPU"
  if acc.sync_gradients == nil then acc.sync_gradients = true end
end

-- ---- utilities -------------------------------------------------------------------------------

-- A table's keys in one order on every process (pairs' order depends on each process's hash seed and history, and
-- the collectives under fn must pair the same leaves): numbers first, ascending, then strings. Other keys (a table,
-- a boolean) have no order every process shares: refused.
local KEY_RANK = { number = 1, string = 2 }
local function sorted_keys(fname, t)
  local keys = {}
  for k in next, t do   -- raw: a __pairs that never ends looped here (acc:gather(t), sweep 115)
    if not KEY_RANK[type(k)] then
      error(("%s: table keys must be numbers or strings (every process walks them in one order), got a %s key")
        :format(fname, type(k)), 0)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys, function(a, b)
    local ra, rb = KEY_RANK[type(a)], KEY_RANK[type(b)]
    if ra ~= rb then return ra < rb end
    return a < b
  end)
  return keys
end

local function map_tensors(fname, x, fn)
  if core.is_tensor(x) then return fn(x) end
  if type(x) == "table" then
    local out = {}
    for _, k in ipairs(sorted_keys(fname, x)) do out[k] = map_tensors(fname, x[k], fn) end
    return out
  end
  error(("%s: expected a tensor or a table of tensors, got %s"):format(fname, type(x)), 4)
end

local function on_cpu(t)
  if t:device() ~= "cpu" then return t:to("cpu"), t:device() end
  return t:contiguous(), nil
end

local U = {}

-- Accelerate's print: once per machine (is_local_main_process; one machine: the main process)
function U:print(...) if self.local_process_index == 0 then print(...) end end

-- (M._announce first: every process is in wait_for_everyone, not in another utility's collective)
function U:wait_for_everyone()
  if self.num_processes > 1 then M._announce(self, "wait_for_everyone"); D.barrier() end
end

-- describe(fname, t, shapes): the leaves of t in sorted-key order as "path:dtype[shape]" lines (without the shapes
-- when `shapes` is false), raising, with the reason, what no collective can take: a leaf that is not a tensor, a key
-- that is neither a number nor a string, an FP8 tensor (its bytes mean something only with its own scale, which
-- differs across processes).
local function describe(fname, t, shapes)
  local out, on_path = {}, {}   -- on_path: the tables being walked (a cycle walked on until memory ran out)
  local function walk(x, path)
    local dt = core._live_dtype(x)   -- a dtype name, false for a released tensor, nil for what is not a tensor
    if dt == false then
      error(("%s: the tensor%s has been released (freed or closed)"):format(fname,
        path ~= "" and (" at " .. path:sub(2)) or ""), 0)
    elseif dt then
      if x:is_fp8() then
        error(("%s: an FP8 tensor's bytes mean something only with its own scale, which differs across processes; "
          .. "dequantize it first"):format(fname), 0)
      end
      if fname == "broadcast" then   -- written in place: an expanded view's elements share memory (torch refuses)
        local st, sh = x:stride(), x:shape()
        for d = 1, #sh do
          if st[d] == 0 and sh[d] > 1 then
            error(("broadcast: the tensor%s is an expanded view (its elements share memory) and is written in place; "
              .. "pass a tensor of its own (:contiguous())"):format(path ~= "" and (" at " .. path:sub(2)) or ""), 0)
          end
        end
      end
      out[#out + 1] = (path ~= "" and (path:sub(2) .. " ") or "") .. (shapes
        and (x:dtype() .. "[" .. table.concat(x:shape(), ", ") .. "]") or (x:dim() .. "-d"))
    elseif type(x) == "table" then
      if on_path[x] then
        error(("%s: the table refers to itself (a cycle)%s"):format(fname,
          path ~= "" and (" at " .. path:sub(2)) or ""), 0)
      end
      on_path[x] = true
      -- a key as it is written: [1] for a number, "name" quoted (control characters escaped) for a string, so that
      -- {[1]=...} and {["1"]=...}, or {a={b=...}} and {["a.b"]=...}, never read alike
      for _, k in ipairs(sorted_keys(fname, x)) do
        local key = type(k) == "number" and ("[" .. tostring(k) .. "]")
          or ('"' .. k:gsub('[%c"\\]', function(c) return ("\\%03d"):format(c:byte()) end) .. '"')
        walk(x[k], path .. "." .. key)
      end
      on_path[x] = nil
    else
      error(("%s: expected a tensor or a table of tensors, got %s%s"):format(fname, type(x),
        path ~= "" and (" at " .. path:sub(2)) or ""), 0)
    end
  end
  walk(t, "")
  return out
end

-- _first_error(n, rank, msg): every process learns the message of the lowest rank that has one (msg nil: none
-- here), or nil when no process has one. A collective: every process calls it, so an error found on one process
-- is raised on all of them and none is left waiting in a later collective.
function M._first_error(n, rank, msg)
  if math.type(n) ~= "integer" or n < 1 or math.type(rank) ~= "integer" or rank < 0 or rank >= n
     or (msg ~= nil and type(msg) ~= "string") then
    error("_first_error: expected (process count, this rank, message or nil)", 2)
  end
  if n <= 1 then return msg end
  local flag = core.tensor { msg and (n - rank) or 0 }
  D.all_reduce(flag, "max")
  local who = math.tointeger(flag:item())
  if who == 0 then return nil end
  return D.broadcast_string(msg or "", n - who)
end

-- Two hashes of a string, each an integer below 2^24 (exact in fp32): what the processes compare first
local function hash24(s)
  local a, b = 5381, 52711
  for i = 1, #s do
    local c = s:byte(i)
    a, b = (a * 33 + c) % 16777213, (b * 131 + c) % 16777199
  end
  return a, b
end

-- _rank0_difference(rank, lines): this process's lines against rank 0's (a collective): "rank R has X where rank 0
-- has Y" at the first line that differs, or nil. Its first collective is one MAX all-reduce of the lines' hashes
-- (h and -h), the same on every process whatever the caller: where they agree (the common case) every process learns
-- it from that one collective and the second result is true; else rank 0's lines are broadcast to find the line.
-- Every caller's first collective being this one is what lets a process in backward and one in save_state (or
-- gather, ...) meet and say so, where collectives of two kinds waited for each other until the timeout.
function M._rank0_difference(rank, lines)
  if math.type(rank) ~= "integer" or type(lines) ~= "table" or getmetatable(lines) ~= nil then
    error("_rank0_difference: expected (this rank, a list of strings)", 2)
  end
  for i = 1, rawlen(lines) do
    if type(rawget(lines, i)) ~= "string" then error("_rank0_difference: expected a list of strings", 2) end
  end
  local text = table.concat(lines, "\n")
  local a, b = hash24(text)
  -- seven values (no count the FP8 amax all-reduces take: 3 or 2 a layer, so no silent pairing with one: MPI refuses
  -- the other count), the last three marks that another MAX all-reduce met here would move (an msamp step's amaxes,
  -- 4 of them at 2 layers, took the hashes as amaxes, with four values here)
  local h = core.tensor { a, -a, b, -b, 1, -1, -7 }
  -- an all-reduce that failed here (MPI's error) may have sent part of its messages, or none while the others wait in
  -- it: this process's next collective would meet theirs (a backward's: until stop 104 the other process took its
  -- step as averaged, or waited until the watchdog). The job ends, naming it.
  local rok, rerr = pcall(D._all_reduce_unchecked, h, "max")
  if not rok then
    D.abort(("rank %d: the call agreement check's all-reduce failed (%s); the processes' collectives can no longer "
      .. "pair, so the job ends"):format(rank, tostring(rerr):gsub("^lua/fp8/[^:]*:%d+: ", "")))
  end
  local v = h:totable()
  if v[5] ~= 1 or v[6] ~= -1 or v[7] ~= -7 then
    error(("dist: rank %d's call agreement check met another collective (the processes' collectives did not pair: "
      .. "every process must make the same collective calls in the same order)"):format(rank), 0)
  end
  if v[1] == -v[2] and v[3] == -v[4] then return nil, true end   -- max == min: every process has these lines
  local theirs = D.broadcast_string(text, 0)
  local t0 = {}
  if theirs ~= "" then for line in (theirs .. "\n"):gmatch("(.-)\n") do t0[#t0 + 1] = line end end
  for i = 1, math.max(#lines, #t0) do
    if lines[i] ~= t0[i] then
      return ("rank %d has %s where rank 0 has %s"):format(rank, lines[i] or "nothing more", t0[i] or "nothing more")
    end
  end
end

-- _require_same(acc, lines, what): raises on every process, naming the first difference ("<what>: rank R has X where
-- rank 0 has Y"), unless every process has rank 0's lines. A collective.
function M._require_same(acc, lines, what)
  local diff = M._rank0_difference(acc.process_index, lines)
  local msg = M._first_error(acc.num_processes, acc.process_index, diff and (what .. ": " .. diff))
  if msg then error(msg, 0) end
end

-- Before a collective: every process has what rank 0 has (the same fields, and with `shapes` the same dtypes and
-- shapes), else one error on every process, the lowest rank's reason, so none waits for the others in a collective
-- another has left (a reduce of mismatched buffers would add unrelated elements or fail on one process only).
-- The first line is the utility's name: one process in gather while another is in reduce or gather_object would
-- otherwise pair their collectives wrongly (a hang until the timeout, or garbage).
-- from: the process that broadcast and broadcast_object_list send from, which every process must name alike (nil
-- for the others); a process index out of range is this process's refusal, raised on every process.
-- The error of a process in another utility than rank 0's, from _rank0_difference's first line ("call <name>"), or
-- nil when the calls are the same (agree's and M._announce's)
-- acc:backward (its gradient all-reduce), save_state and load_state announce themselves too: one of them called on
-- some processes only (under `if acc:is_main_process()`, a common mistake: Accelerate's issue 1171) met the
-- others' next collective and both waited until the process group's timeout (1800 s by default)
local NOT_UTILITY = { backward = true, save_state = true, load_state = true, forward = true }
local function call_mismatch(fname, diff)
  local r, theirs, ours = (diff or ""):match("^rank (%d+) has call (%S+) where rank 0 has call (%S+)$")
  if not r then return nil end
  local msg = ("%s: rank %s calls %s where rank 0 calls %s: every process must call the same collective utilities "
    .. "in the same order"):format(fname, r, theirs, ours)
  if theirs == "find_executable_batch_size" or ours == "find_executable_batch_size" then
    -- (stop 105) a process whose function ran out of memory, while this one went on
    return msg .. " (a process ran out of memory in find_executable_batch_size's function where another did not: "
      .. "the batch size can be lowered only on every process at once, so every process ends here)"
  end
  if NOT_UTILITY[theirs] or NOT_UTILITY[ours] then
    msg = msg .. " (acc:backward, save_state and load_state are collectives too: call them on every process, not "
      .. "under `if acc:is_main_process()`)"
    if theirs == "forward" or ours == "forward" then
      msg = msg .. "; so is a training-mode forward of a prepared model with buffers (broadcast_buffers sends rank 0's "
        .. "before it): run one on a single process in eval mode"
    end
  end
  return msg
end

local function agree(self, fname, t, shapes, from)
  local ok, mine = pcall(describe, fname, t, shapes)
  local msg = not ok and tostring(mine) or nil
  if from ~= nil and (math.type(from) ~= "integer" or from < 0 or from >= self.num_processes) then
    msg = ("%s: from_process must be a process index in 0..%d, got %s"):format(fname, self.num_processes - 1,
      require("fp8.opts").got(from))
  end
  if self.num_processes == 1 then
    if msg then error(msg, 3) end
    return
  end
  local lines = { "call " .. fname }
  if from ~= nil then lines[2] = "from_process=" .. tostring(from) end
  if ok then table.move(mine, 1, #mine, #lines + 1, lines) end
  local diff = M._rank0_difference(self.process_index, lines)
  local call_msg = call_mismatch(fname, diff)
  local r2, from_r, from_0 = (diff or ""):match("^rank (%d+) has from_process=(%S+) where rank 0 has "
    .. "from_process=(%S+)$")
  if call_msg then
    msg = call_msg
  elseif r2 and not msg then
    msg = ("%s: rank %s sends from process %s where rank 0 sends from %s: every process must name the same one")
      :format(fname, r2, from_r, from_0)
  elseif not msg and diff then
    msg = ("%s: the tensors differ across processes: %s"):format(fname, diff)
  end
  msg = M._first_error(self.num_processes, self.process_index, msg)
  if msg then error(msg, 3) end
end

-- _announce(acc, fname): the first collective of a utility whose own first one is another kind than agree's (an
-- all_gather, an all_reduce, a barrier): every process is in fname, else one error on every process naming both
-- calls (a process in gather_for_metrics and one in gather paired their collectives and waited out the timeout)
function M._announce(self, fname)
  if self.num_processes == 1 then return end
  local diff, same = M._rank0_difference(self.process_index, { "call " .. fname })
  if same then return end   -- (every process learnt it from the same collective: one collective in all)
  local msg = call_mismatch(fname, diff)
  msg = M._first_error(self.num_processes, self.process_index, msg)
  if msg then error(msg, 3) end
end

-- gather(t): every rank's t concatenated along dim 1 in rank order (0-d tensors: one entry per rank);
-- tables of tensors are gathered leaf by leaf. Shapes must agree across ranks.
-- gather's collective, once agree has checked t in the name of the utility called (gather, gather_for_metrics): its
-- refusal is raised at that utility's caller, which a call of U:gather from gather_for_metrics was not
local function gather_leaves(self, fname, t)
  return map_tensors(fname, t, function(x)
    if self.num_processes == 1 then return x end
    local c, dev = on_cpu(x)
    local g = D.all_gather(c)
    return dev and g:to(dev) or g
  end)
end

function U:gather(t)
  agree(self, "gather", t, true)
  local g = gather_leaves(self, "gather", t)   -- not a tail call: map_tensors counts this frame
  return g
end

-- (a table met again on the path, a cycle, is taken as tensors: agree then refuses the cycle by name)
local function all_tensors(x, on_path)
  if core.is_tensor(x) then return true end
  if type(x) ~= "table" or getmetatable(x) ~= nil or next(x) == nil then return false end
  on_path = on_path or {}
  if on_path[x] then return true end
  on_path[x] = true
  for _, v in next, x do if not all_tensors(v, on_path) then return false end end
  on_path[x] = nil
  return true
end

-- gather_for_metrics(t [, use_gather_object]): gather, then drop the samples that even_batches repeated to
-- fill the last batches (Accelerate's gradient_state.remainder), when the prepared loader has just ended.
-- As in Accelerate, a list that is not all tensors (predicted strings, say), or use_gather_object=true,
-- goes through gather_object, and the list is cut the same way.
function U:gather_for_metrics(t, use_gather_object)
  if use_gather_object ~= nil and type(use_gather_object) ~= "boolean" then
    error(("gather_for_metrics: use_gather_object must be a boolean, got %s"):format(type(use_gather_object)), 2)
  end
  local st = require("fp8.data")._active(self.gradient_state)   -- the loop being served, as Accelerate's active loader
  -- in one process too, as Accelerate's: a value with more rows than the last batch's samples (a loss repeated to
  -- the batch size) is cut to them
  local cut = st and st.end_of_dataloader and st.remainder > 0 and st.remainder or nil
  local as_objects = use_gather_object or not all_tensors(t)
  M._announce(self, "gather_for_metrics")
  if self.num_processes > 1 then   -- every process takes the same path (else each would wait in another collective)
    -- and is at the same batch: with even_batches=false a process may end its loop a batch before another, where
    -- Accelerate cuts a round of real samples to the remainder, and the process with a batch left waits for ever in
    -- its next gather; here every process stops with the reason
    local at_end = st ~= nil and st.end_of_dataloader
    local got = D.all_gather(core.tensor { as_objects and 1 or 0, at_end and 1 or 0 }):totable()
    local kinds, ends = {}, {}
    for r = 1, #got // 2 do kinds[r], ends[r] = got[2 * r - 1], got[2 * r] end
    for r = 2, #ends do
      if ends[r] ~= ends[1] then
        local last, more = ends[1] == 1 and 0 or r - 1, ends[1] == 1 and r - 1 or 0
        error(("gather_for_metrics: rank %d is at the last batch of its prepared loader, rank %d is not: the processes "
          .. "have different numbers of batches (even_batches=false), so the one with more would wait for ever in its "
          .. "next gather; use even_batches=true, or gather once after the loop"):format(last, more), 2)
      end
    end
    for r = 2, #kinds do
      if kinds[r] ~= kinds[1] then
        local what = function(k) return k == 1 and "other values (gather_object)" or "tensors (gather)" end
        error(("gather_for_metrics: rank 0 passes %s, rank %d %s: every process must pass the same kind"):format(
          what(kinds[1]), r - 1, what(kinds[r])), 2)
      end
    end
  end
  if as_objects then
    local ok, g = pcall(self.gather_object, self, t)
    if not ok then error((tostring(g):gsub("gather_object:", "gather_for_metrics:", 1)), 2) end
    if cut and #g > cut then g = table.move(g, 1, cut, 1, {}) end
    return g
  end
  agree(self, "gather_for_metrics", t, true)
  local g = gather_leaves(self, "gather_for_metrics", t)
  if cut then
    return map_tensors("gather_for_metrics", g, function(x)
      if x:dim() == 0 or x:shape()[1] <= cut then return x end
      return x:narrow(1, 1, cut)
    end)
  end
  return g
end

-- pad_across_processes(t [, dim=1, pad_index=0, pad_first=false]): Accelerate's; t padded with pad_index
-- along dim up to the largest size any process has there, so that gather (equal shapes) can follow, e.g.
-- generated sequences of different lengths. Tables of tensors leaf by leaf; a dim the tensor does not have
-- (and a single process) leaves it as it is. A collective: every process calls it with the same structure.
function U:pad_across_processes(t, dim, pad_index, pad_first)
  dim, pad_index = dim or 1, pad_index or 0
  if math.type(dim) ~= "integer" or dim == 0 then
    error(("pad_across_processes: dim must be a non-zero integer (1 is the first dimension, -1 the last), got %s")
      :format(tostring(dim)), 2)
  end
  if type(pad_index) ~= "number" then
    error(("pad_across_processes: pad_index must be a number, got %s"):format(type(pad_index)), 2)
  end
  if pad_first ~= nil and type(pad_first) ~= "boolean" then
    error(("pad_across_processes: pad_first must be a boolean, got %s"):format(type(pad_first)), 2)
  end
  agree(self, "pad_across_processes", t, false)   -- the same fields and ranks everywhere (sizes may differ: that is the point)
  return map_tensors("pad_across_processes", t, function(x)
    local nd = x:dim()
    local d = dim < 0 and nd + dim + 1 or dim
    if d < 1 or d > nd or self.num_processes == 1 then return x end
    local size = x:size(d)
    local g = D.all_gather(core.tensor({ size // 4096, size % 4096 })):totable()   -- two parts: exact in fp32
    local max = 0
    for i = 1, #g, 2 do max = math.max(max, math.tointeger(g[i] * 4096 + g[i + 1])) end
    if max == size then return x end
    if x:is_fp8() then
      error("pad_across_processes: an FP8 tensor cannot be padded in its bytes (its scale covers its own values); "
        .. "dequantize it first", 4)
    end
    local shape = x:shape()
    shape[d] = max
    local out = core.full(shape, pad_index, { dtype = x:dtype(), device = x:device() })
    require("fp8._optim").copy_(out:narrow(d, pad_first and max - size + 1 or 1, size), x)
    return out
  end)
end

-- reduce(t, "sum"|"mean" [, scale]): a new tensor, the elementwise sum (or mean) over ranks, times scale.
-- Accelerate's scale multiplies the sum (its XLA path, the only one that reads it; the mean then divides by N);
-- its "none" is documented as "no operation" but sums on every distributed backend, so it is refused for a name.
function U:reduce(t, reduction, scale)
  local op = reduction or "sum"
  if op == "none" then
    error("reduce: reduction=\"none\" is not supported: Accelerate documents it as no operation but sums across "
      .. "processes; pass \"sum\" for the sum, or use the tensor itself", 2)
  end
  if op ~= "sum" and op ~= "mean" then
    error(("reduce: reduction must be \"sum\" or \"mean\", got %s"):format(tostring(op)), 2)
  end
  if scale ~= nil and (type(scale) ~= "number" or scale ~= scale or scale == math.huge or scale == -math.huge) then
    error(("reduce: scale must be a finite number, got %s"):format(require("fp8.opts").got(scale)), 2)
  end
  agree(self, "reduce", t, true)
  return map_tensors("reduce", t, function(x)
    local c, dev = on_cpu(x)
    local r = c:to("fp32"):clone()
    if self.num_processes > 1 then D.all_reduce(r, "sum") end
    if scale and scale ~= 1 then r = r * scale end
    if op == "mean" then r = r / self.num_processes end
    if x:dtype() ~= "fp32" then r = r:to(x:dtype()) end
    return dev and r:to(dev) or r
  end)
end

-- split_between_processes(list [, apply_padding]) -> this rank's contiguous share (the first
-- #list % N ranks get one more); apply_padding adds the list's last item to the shorter shares so every share has
-- one length (Accelerate 1.15's inputs[-1]: process 1 of 3 given {a, b, c, d} gets {c, d}).
-- A tensor is split along dim 1, its rows as a list's items (Accelerate's tensors). A table of lists or tensors by
-- name ({input_ids = {...}, labels = {...}}, Accelerate's dict) is split value by value, the same share of each: the
-- values must have one length.
function U:split_between_processes(list, apply_padding)
  local is_t = core.is_tensor(list)
  if is_t and list:dim() == 0 then
    error("split_between_processes: a 0-d tensor has no rows to split (a tensor is split along dim 1)", 2)
  end
  if type(list) ~= "table" and not is_t then
    error(("split_between_processes: expected a list, a tensor or a table of them by name, got %s"):format(
      O.got(list)), 2)
  end
  if apply_padding ~= nil and type(apply_padding) ~= "boolean" then   -- (any other value was taken as true)
    error(("split_between_processes: apply_padding must be a boolean, got %s"):format(O.got(apply_padding)), 2)
  end
  -- this process's share of n items: first, count, and whether padding adds the last item
  local function share(n)
    local N, r = self.num_processes, self.process_index
    local base, extra = n // N, n % N
    local first = r * base + math.min(r, extra) + 1
    local count = base + (r < extra and 1 or 0)
    return first, count, apply_padding and extra > 0 and count == base
  end
  -- a tensor: its rows, as a list's items (Accelerate's tensor split along dim 0); padding repeats the last row
  if is_t then
    local n = list:size(1)
    local first, count, pad = share(n)
    local out = count > 0 and list:narrow(1, first, count) or list:narrow(1, n + 1, 0)
    if pad then out = core.cat({ out, list:narrow(1, n, 1) }, 1) end
    return out
  end
  local keys = {}
  for k in next, list do
    if type(k) == "string" then keys[#keys + 1] = k
    elseif math.type(k) ~= "integer" then
      error(("split_between_processes: expected a list or a table of lists by name, got a table with the key %s")
        :format(tostring(k)), 2)
    end
  end
  if #keys > 0 then
    if rawlen(list) > 0 then
      error("split_between_processes: expected a list or a table of lists by name, got a table with both", 2)
    end
    table.sort(keys)
    local len
    for _, k in ipairs(keys) do
      local v = list[k]
      local vt = core.is_tensor(v)
      if type(v) ~= "table" and not vt or vt and v:dim() == 0 then
        error(("split_between_processes: %q must be a list or a tensor of at least 1 dim (each value of the table "
          .. "is split), got %s"):format(k, vt and "a 0-d tensor" or O.got(v)), 2)
      end
      local vlen = vt and v:size(1) or rawlen(v)
      if len and vlen ~= len then
        error(("split_between_processes: the values must have one length: %q has %d, %q %d"):format(keys[1], len, k,
          vlen), 2)
      end
      len = vlen
    end
    local out = {}
    for _, k in ipairs(keys) do out[k] = self:split_between_processes(list[k], apply_padding) end
    return out
  end
  local n = rawlen(list)   -- rawlen: a lying __len cannot make it loop
  local first, count, pad = share(n)
  local out = {}
  for i = first, first + count - 1 do out[#out + 1] = list[i] end
  if pad then out[#out + 1] = list[n] end
  return out
end

-- first(acc, fname, is_first, fn, ...): the processes for which is_first holds run fn, then the others
-- (after a barrier); returns fn's results. An error in fn is raised after the barrier, so no process hangs.
local function first(acc, fname, is_first, fn, ...)
  if type(fn) ~= "function" then error(("%s: expected a function, got %s"):format(fname, type(fn)), 3) end
  if not is_first then acc:wait_for_everyone() end
  -- yields refused: a coroutine suspended in fn let this process's barrier pair with a later one of the script
  -- (another process ran fn first, and a process then waited for ever)
  local res = table.pack(require("fp8.core")._pcall_noyield(fname, "the other processes wait at a barrier until fn "
    .. "returns; a suspended coroutine would pair that barrier with a later one", fn, ...))
  if is_first then acc:wait_for_everyone() end
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- main_process_first(fn, ...): the main process runs fn first (e.g. downloads, preprocesses), the
-- others after it finished; returns fn's results. local_main_process_first: the first process of each machine.
function U:main_process_first(fn, ...) return first(self, "main_process_first", self.process_index == 0, fn, ...) end
function U:local_main_process_first(fn, ...)
  return first(self, "local_main_process_first", self.local_process_index == 0, fn, ...)
end

function U:is_last_process() return self.process_index == self.num_processes - 1 end

-- on_main_process(fn), on_local_main_process(fn), on_last_process(fn), on_process(fn, i): Accelerate's
-- decorators; a function that calls fn (returning its results) on that process and does nothing elsewhere.
local function on(acc, fname, fn, pick)   -- (every caller tail-calls it: level 2 is the user's call)
  if type(fn) ~= "function" then error(("%s: expected a function, got %s"):format(fname, type(fn)), 2) end
  return function(...) if pick(acc) then return fn(...) end end
end
function U:on_main_process(fn) return on(self, "on_main_process", fn, function(a) return a.process_index == 0 end) end
function U:on_local_main_process(fn)
  return on(self, "on_local_main_process", fn, function(a) return a.local_process_index == 0 end)
end
function U:on_last_process(fn) return on(self, "on_last_process", fn, function(a) return a:is_last_process() end) end
-- on_process(fn, i) / on_local_process(fn, i): fn on the process whose process_index / local_process_index is i
local function on_index(acc, fname, field, fn, i)
  if math.type(i) ~= "integer" or i < 0 or i >= acc.num_processes then
    error(("%s: %s must be an integer from 0 to %d (num_processes - 1), got %s")
      :format(fname, field, acc.num_processes - 1, tostring(i)), 2)   -- on_index is tail-called: 2 is the caller
  end
  return on(acc, fname, fn, function(a) return a[field] == i end)
end
function U:on_process(fn, process_index) return on_index(self, "on_process", "process_index", fn, process_index) end
function U:on_local_process(fn, local_process_index)
  return on_index(self, "on_local_process", "local_process_index", fn, local_process_index)
end

-- set_trigger() / check_trigger(): Accelerate's cross-process flag (early stopping): check_trigger is true on
-- every process when any process set it since the last check (which clears it). A collective: call it on all.
function U:set_trigger() rawset(self, "_trigger", true) end
function U:check_trigger()
  local t = core.tensor({ rawget(self, "_trigger") and 1 or 0 })
  M._announce(self, "check_trigger")
  if self.num_processes > 1 then D.all_reduce(t, "sum") end
  if t:item() >= 1 then rawset(self, "_trigger", nil); return true end
  return false
end

-- Plain Lua values as Lua source that load() reads back exactly (integers, floats through %a, strings,
-- booleans, tables without cycles or metatables): gather_object's wire format.
local function serialize(v, fname, seen, out)
  local tv = type(v)
  if tv == "nil" or tv == "boolean" then out[#out + 1] = tostring(v)
  -- (%q writes math.mininteger as 0x8000000000000000: as "-9223372036854775808" it was read back as a float)
  elseif math.type(v) == "integer" then out[#out + 1] = ("%q"):format(v)
  elseif tv == "number" then
    out[#out + 1] = v ~= v and "(0/0)" or v == math.huge and "math.huge" or v == -math.huge and "-math.huge"
      or ("%a"):format(v)
  elseif tv == "string" then out[#out + 1] = ("%q"):format(v)
  elseif tv == "table" then
    if getmetatable(v) ~= nil then
      error(("%s: only plain values travel (nil, booleans, numbers, strings, tables of them), got a table with a "
        .. "metatable%s"):format(fname, core.is_tensor(v) and " (a tensor: use gather)" or ""), 0)
    end
    if seen[v] then error(fname .. ": the table refers to itself (a cycle)", 0) end
    seen[v] = true
    out[#out + 1] = "{"
    for k, x in next, v do
      if type(k) ~= "string" and type(k) ~= "number" and type(k) ~= "boolean" then
        error(("%s: table keys must be strings, numbers or booleans, got %s"):format(fname, type(k)), 0)
      end
      out[#out + 1] = "["; serialize(k, fname, seen, out); out[#out + 1] = "]="
      serialize(x, fname, seen, out); out[#out + 1] = ","
    end
    out[#out + 1] = "}"
    seen[v] = nil
  else
    error(("%s: only plain values travel (nil, booleans, numbers, strings, tables of them), got %s"):format(fname,
      core.is_tensor(v) and "a tensor (use gather)" or tv), 0)
  end
end

-- Why obj is not a list whose items can be concatenated (nil: it is one): keys 1..n without holes, as Accelerate
-- flattens each process's list (a dict would give its keys there; a nil cannot be a Lua list item).
local function not_a_list(obj)
  local n = 0
  for k in next, obj do
    if math.type(k) ~= "integer" or k < 1 then
      return ("a table with the key %s (Accelerate concatenates lists; wrap a record in one: {t})"):format(
        type(k) == "string" and ("'" .. k .. "'") or tostring(k))
    end
    n = n + 1
  end
  for i = 1, n do
    if obj[i] == nil then
      return ("a list with a hole at %d (nil cannot be an item of a Lua list; use false as a placeholder)"):format(i)
    end
  end
end

-- gather_object(list): every process's list, concatenated in process order (Accelerate's gather_object,
-- which all-gathers picklable objects); with one process, the list itself. The items are plain Lua values.
function U:gather_object(obj)
  if type(obj) ~= "table" or getmetatable(obj) ~= nil then
    error(("gather_object: expected a list of plain values, got %s"):format(type(obj) == "table" and
      "a table with a metatable" or type(obj)), 2)
  end
  local why = not_a_list(obj)
  if self.num_processes == 1 then   -- refused as with several processes (a script tried on one met it on two)
    if why then error("gather_object: expected a list, got " .. why, 2) end
    local ok, err = pcall(serialize, obj, "gather_object", {}, { "return " })
    if not ok then error(err, 2) end
    return obj
  end
  agree(self, "gather_object", {}, false)   -- every process in gather_object (not in gather, say)
  local out = { "return " }
  local ok, err = true, nil
  if why then ok, err = false, "gather_object: expected a list, got " .. why
  else ok, err = pcall(serialize, obj, "gather_object", {}, out) end
  local mine = ok and table.concat(out) or ("error " .. tostring(err))
  local all, bad = {}, nil
  for r = 0, self.num_processes - 1 do   -- every process roots one broadcast, in rank order
    local text = D.broadcast_string(r == self.process_index and mine or "", r)
    if text:sub(1, 6) == "error " then bad = bad or ("rank %d: %s"):format(r, text:sub(7))
    else
      local f, lerr = load(text, "=gather_object", "t", { math = { huge = math.huge } })
      if not f then   -- e.g. tables nested deeper than Lua's parser takes (about 200 levels): the same on every rank
        bad = bad or ("rank %d: gather_object: its list cannot be read back: %s"):format(r, tostring(lerr))
      else
        local list = f()
        for i = 1, #list do all[#all + 1] = list[i] end
      end
    end
  end
  if bad then error(bad, 2) end   -- raised on every process, so none waits for the others
  return all
end

-- broadcast(t [, from_process=0]): Accelerate's utils.broadcast: every process's tensors (a tensor or a table of
-- them) take from_process's values, in place (as torch.distributed.broadcast, outside autograd: a parameter may be
-- one); returns t. Dtypes and shapes must agree across processes.
function U:broadcast(t, from_process)
  from_process = from_process == nil and 0 or from_process
  agree(self, "broadcast", t, true, from_process)
  if self.num_processes == 1 then return t end
  local copy_ = require("fp8._optim").copy_
  map_tensors("broadcast", t, function(x)
    local c, dev = on_cpu(x)
    if c == x then c = x:clone() end   -- the collective writes c; x is written once, below, by copy_
    D.broadcast(c, from_process)
    copy_(x, dev and c:to(dev) or c)
  end)
  return t
end

-- broadcast_object_list(list [, from_process=0]): Accelerate's: list filled, in place, with from_process's items
-- (plain Lua values, as gather_object's); returns it. torch's receivers pass [None] * n; a Lua list cannot hold nil,
-- so a receiver's list may have any length: it is given the sender's length (items past it are removed).
function U:broadcast_object_list(list, from_process)
  if type(list) ~= "table" or getmetatable(list) ~= nil then
    error(("broadcast_object_list: expected a list of plain values, got %s"):format(type(list) == "table" and
      "a table with a metatable" or type(list)), 2)
  end
  from_process = from_process == nil and 0 or from_process
  agree(self, "broadcast_object_list", {}, false, from_process)
  local why = self.process_index == from_process and not_a_list(list) or nil
  if self.num_processes == 1 then   -- refused as with several processes
    if why then error("broadcast_object_list: expected a list, got " .. why, 2) end
    local ok, err = pcall(serialize, list, "broadcast_object_list", {}, { "return " })
    if not ok then error(err, 2) end
    return list
  end
  local mine = ""
  if self.process_index == from_process then
    local out, ok, err = { "return " }, true, nil
    if why then ok, err = false, "broadcast_object_list: expected a list, got " .. why
    else ok, err = pcall(serialize, list, "broadcast_object_list", {}, out) end
    mine = ok and table.concat(out) or ("error " .. tostring(err))
  end
  local text = D.broadcast_string(mine, from_process)
  if text:sub(1, 6) == "error " then error(("rank %d: %s"):format(from_process, text:sub(7)), 2) end
  if self.process_index == from_process then return list end
  local f, lerr = load(text, "=broadcast_object_list", "t", { math = { huge = math.huge } })
  if not f then   -- (the same on every receiver; the sender returned already)
    error(("rank %d: broadcast_object_list: its list cannot be read back: %s"):format(from_process, tostring(lerr)), 2)
  end
  local items = f()
  for k in next, list do list[k] = nil end
  table.move(items, 1, #items, 1, list)
  return list
end

function M.install(Accelerator)
  for k, f in next, U do Accelerator[k] = f end
end

-- ---- DataLoader sharding ---------------------------------------------------------------------

-- Accelerate's BatchSamplerShard._iter_with_no_split, over the batches of one epoch (lists of indices):
-- process r gets batches r, r+N, ...; a round is handed out only when its last batch is full; with
-- drop_last=false the leftovers are completed from the epoch's first indices (even_batches) or handed out
-- as they are (even_batches=false).
function M.shard_batches(batches, bs, N, r, drop_last, even_batches)
  local out, initial, to_yield = {}, {}, nil
  local idx, batch = -1, nil
  for i, b in ipairs(batches) do
    idx, batch = i - 1, b
    if not drop_last and idx < N then for _, v in ipairs(b) do initial[#initial + 1] = v end end
    if idx % N == r then to_yield = b end
    if idx % N == N - 1 and #b == bs then
      out[#out + 1] = to_yield
      to_yield = nil
    end
  end
  if not drop_last and #initial > 0 then
    if not even_batches then
      if to_yield and #to_yield > 0 then out[#out + 1] = to_yield end
    else
      if to_yield and #to_yield == bs then out[#out + 1] = to_yield end
      while #initial < N * bs do
        local n0 = #initial
        for j = 1, n0 do initial[#initial + 1] = initial[j] end
      end
      local cur = {}
      if #batch == bs then idx = idx + 1 else for _, v in ipairs(batch) do cur[#cur + 1] = v end end
      local cycle = 0
      while idx % N ~= 0 or #cur > 0 do
        local need = bs - #cur
        for j = cycle + 1, cycle + need do cur[#cur + 1] = initial[j] end
        if idx % N == r then out[#out + 1] = cur end
        cycle = cycle + need
        cur = {}
        idx = idx + 1
      end
    end
  end
  return out
end

-- Accelerate's BatchSamplerShard._iter_with_split (DataLoaderConfiguration{split_batches=true}), over the batches of
-- one epoch: every process walks every batch of bs samples and takes its slice of bs / N, process r the samples
-- r * bs / N + 1 .. (r + 1) * bs / N (bs divisible by N, checked at prepare). A short last batch is completed with
-- the epoch's first batch (repeated while too short) under even_batches, or sliced as it is without them (a process
-- whose slice is empty then gets a batch less); drop_last=true drops it.
function M.split_batches(batches, bs, N, r, drop_last, even_batches)
  local out, per = {}, bs // N
  local function slice(b)
    local s = {}
    for j = per * r + 1, math.min(per * (r + 1), #b) do s[#s + 1] = b[j] end
    return s
  end
  for _, b in ipairs(batches) do
    if #b == bs then out[#out + 1] = slice(b) end
  end
  local initial, last = batches[1], batches[#batches]
  if not drop_last and initial ~= nil and #last < bs then
    if not even_batches then
      if #last > per * r then out[#out + 1] = slice(last) end
    else
      local fill = table.move(initial, 1, #initial, 1, {})
      while #fill < bs do table.move(fill, 1, #fill, #fill + 1, fill) end
      out[#out + 1] = slice(table.move(fill, 1, bs - #last, #last + 1, table.move(last, 1, #last, 1, {})))
    end
  end
  return out
end

-- A prepared loader: same fields and methods as its DataLoader, batches for this rank only.
local Sharded = {}
Sharded.__name = "DataLoaderShard"

local function epoch_batches(ld)
  local order
  local n, bs = ld.n, ld.batch_size
  if ld.shuffle then order = ld._permutation(n, ld.seed, ld.epoch) end
  local batches = {}
  local nb = ld.drop_last and n // bs or (n + bs - 1) // bs
  for b = 1, nb do
    local idx = {}
    for k = (b - 1) * bs + 1, math.min(b * bs, n) do idx[#idx + 1] = order and order[k] or k end
    batches[b] = idx
  end
  return batches
end

-- this process's batches of the loader's next epoch (its epoch as it is: the caller advances it); process r's
-- when r is given
local function my_batches(self, ld, batches, r)
  local cut = rawget(self, "_split") and M.split_batches or M.shard_batches
  return cut(batches or epoch_batches(ld), ld.batch_size, rawget(self, "_N"), r or rawget(self, "_r"), ld.drop_last,
    rawget(self, "_even"))
end

-- even_batches=false: a process whose shard of the epoch is empty would skip every collective the others make in
-- their loop (backward's gradient reduction, gather_for_metrics) and they would wait for it until the watchdog's
-- timeout; every process sees every shard's length, so all of them refuse it at once
local function check_no_empty_shard(self, ld, mine)
  if rawget(self, "_even") then return end
  local batches, N, empty = epoch_batches(ld), rawget(self, "_N"), nil
  local any = #mine > 0
  for r = 0, N - 1 do
    if #my_batches(self, ld, batches, r) == 0 then empty = empty or r else any = true end
  end
  if empty and any then
    error(("DataLoaderShard: with even_batches=false process %d of %d gets no batch of this epoch (%d items, batch "
      .. "size %d): it would miss the collectives the others make in the loop and they would wait for it; use "
      .. "even_batches=true, a smaller batch size or fewer processes"):format(empty, N, ld.n, ld.batch_size), 0)
  end
end

function Sharded.__index(t, k)
  local v = rawget(Sharded, k)
  if v ~= nil then return v end
  local ld = rawget(t, "_loader")
  -- Accelerate's DataLoaderShard.total_batch_size: the samples one step takes across the processes
  if k == "total_batch_size" then return rawget(t, "_split") and ld.batch_size or ld.batch_size * rawget(t, "_N") end
  return ld[k]
end
Sharded.__newindex = function(t, k, v) rawget(t, "_loader")[k] = v end

function Sharded:__len()
  local ld = rawget(self, "_loader")
  local saved = ld.epoch
  local n = #my_batches(self, ld)
  ld.epoch = saved
  return n
end

function Sharded:__tostring()
  local ld = rawget(self, "_loader")
  return ("DataLoaderShard(process %d of %d, %d batches of %s%s)"):format(rawget(self, "_r"), rawget(self, "_N"), #self,
    tostring(ld), rawget(self, "_split") and (", split_batches: %d samples each"):format(ld.batch_size //
    rawget(self, "_N")) or "")
end

function Sharded:iter()
  local ld, acc = rawget(self, "_loader"), rawget(self, "_acc")
  ld:_check_len()
  ld.epoch = ld.epoch + 1
  local data = require "fp8.data"
  -- (the epoch's order and batches, this process's cut: Lua tables; named where they do not fit, as the batches)
  local mine = data._oom_named("DataLoaderShard", function()
    return ("cutting epoch %d (%d items%s) into process %d's batches"):format(ld.epoch, ld.n,
      ld.shuffle and ", shuffle=true" or "", rawget(self, "_r"))
  end, my_batches, self, ld)
  check_no_empty_shard(self, ld, mine)
  local total = self.total_batch_size
  -- the real samples of the last round (Accelerate's remainder, even_batches or not): gather_for_metrics cuts the
  -- repeats even_batches added, or the padding pad_across_processes gave a short last batch without them
  local remainder = not ld.drop_last and ld.n % total or 0
  -- as DataLoader:iter: a checkpoint restored mid-epoch (lua/fp8/checkpointing.lua) resumes after the batches
  -- already served, and the gradient state learns when the last batch is out (end of an accumulation window, the
  -- cut of gather_for_metrics), and forgets the loader when its loop ends
  local b = ld._resume_at or 0
  ld._resume_at = nil
  ld.batches_served = b
  local gs = acc.gradient_state
  local st = data._active_begin(gs, self, remainder)
  return function()
    b = b + 1
    data._active_step(gs, st, b, #mine)
    if b > #mine then return nil end
    ld.batches_served = b
    return data._batch_named("DataLoaderShard", b, #mine, #mine[b], ld._batch_of, ld, mine[b])
  end
end

Sharded.__call = require("fp8.data")._loop_call   -- `for x, y in loader do`, as every loader

function Sharded:set_epoch(e) return rawget(self, "_loader"):set_epoch(e) end
function Sharded:to(dev, level) rawget(self, "_loader"):to(dev, level); return self end

function M.is_sharded(v) return getmetatable(v) == Sharded end

-- shard(acc, loader [, even_batches [, split_batches]]) -> the loader as this rank sees it.
function M.shard(acc, loader, even_batches, split)
  -- (the sharded loader read them at its first use, and a user's direct call failed there with 'attempt to index a
  -- nil value (local 'ld')'; stop 101)
  if type(acc) ~= "table" or math.type(acc.num_processes) ~= "integer" or math.type(acc.process_index) ~= "integer" then
    error(("fp8.distributed.shard: acc must be an Accelerator (num_processes and process_index integers), got %s")
      :format(require("fp8.opts").got(acc)), 2)
  end
  if type(loader) ~= "table" then
    error(("fp8.distributed.shard: loader must be a data loader, got %s"):format(require("fp8.opts").got(loader)), 2)
  end
  if even_batches == nil then even_batches = true end
  return setmetatable({ _loader = loader, _acc = acc, _N = acc.num_processes, _r = acc.process_index,
    _even = even_batches, _split = split == true }, Sharded)
end

-- whether a prepared loader hands out slices of its batches (split_batches=true)
-- a loader prepared with split_batches: sharded over several processes, or marked by a one-process prepare
function M.is_split(v)
  if getmetatable(v) == Sharded then return rawget(v, "_split") == true end
  return type(v) == "table" and rawget(v, "_split_batches") == true
end

-- ---- help -------------------------------------------------------------------------------------

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc } end
  add("data parallel", "fp8lab launch --num_processes N script.lua   |   mpirun -np N fp8lab script.lua",
    "N processes, one model each, gradients averaged over MPI in acc:backward (docs/distributed.md).\n"
    .. "prepare() checks the models agree, broadcasts rank 0's weights, shards loaders (BatchSamplerShard,\n"
    .. "even_batches, split_batches), and reduces gradients in buckets (DistributedDataParallelKwargs bucket_cap_mb,\n"
    .. "find_unused_parameters, broadcast_buffers, comm_hook \"no\"|\"fp16\"|\"bf16\"). te: amaxes MAX-reduced per step;\n"
    .. "msamp: FP8 gradient all-reduce. InitProcessGroupKwargs{backend=\"mpi\", timeout=} arms a watchdog.\n"
    .. "No NCCL in this build: backend=\"nccl\" is refused.")
  add("acc.num_processes", "acc.num_processes, acc.process_index, acc.local_process_index, acc.sync_gradients",
    "World size, rank, rank on this node (fields); sync_gradients is false on accumulation steps (no_sync leaves it).")
  add("acc:gather", "acc:gather(t) -> tensor", "Every process's t concatenated along dim 1 in rank order (N x the rows).")
  add("acc:gather_for_metrics", "acc:gather_for_metrics(t [, use_gather_object]) -> tensor or list",
    "gather(t), dropping the samples even_batches repeated at the end of a prepared loader's epoch (with\n"
    .. "even_batches=false, the padding pad_across_processes gave its short last batch); a list that is\n"
    .. "not all tensors (e.g. strings) goes through gather_object and is cut the same way.")
  add("acc:reduce", "acc:reduce(t, \"sum\"|\"mean\" [, scale]) -> tensor",
    "Elementwise sum or mean of t over the processes; scale multiplies the sum (Accelerate's, read on XLA only "
    .. "there). \"none\" is refused (documented as no operation, it sums in Accelerate).")
  add("acc:split_between_processes", "acc:split_between_processes(list [, apply_padding]) -> list",
    "This process's contiguous share of list (the first #list % N processes get one more); apply_padding adds the "
    .. "list's last item to the shorter shares, as Accelerate 1.15.")
  add("acc:main_process_first", "acc:main_process_first(fn, ...) / acc:local_main_process_first(fn, ...) -> fn's results",
    "main_process_first: the main process (process_index 0) runs fn first; the others run it after the main one\n"
    .. "finished (e.g. a download or a preprocessing cache). local_main_process_first: the same with each machine's\n"
    .. "first process (local_process_index 0) running first. Accelerate's context managers, as functions.")
  add("acc:pad_across_processes", "acc:pad_across_processes(t [, dim=1, pad_index=0, pad_first=false]) -> tensor",
    "t padded with pad_index along dim to the largest size any process has there (then gather can follow).")
  add("acc:gather_object", "acc:gather_object(list) -> list",
    "Every process's list of plain Lua values (no tensors: use gather), concatenated in rank order.")
  add("acc:broadcast", "acc:broadcast(t [, from_process=0]) -> t",
    "Accelerate's utils.broadcast: every process's tensors (a tensor or a table of them) take from_process's values,\n"
    .. "in place (a parameter too, outside autograd); dtypes and shapes must agree.")
  add("acc:broadcast_object_list", "acc:broadcast_object_list(list [, from_process=0]) -> list",
    "Accelerate's: list filled in place with from_process's plain Lua values and cut to its length (a Lua list\n"
    .. "holds no nil placeholders, so a receiver may pass {}).")
  add("acc:on_main_process", "acc:on_main_process(fn) | on_local_main_process(fn) | on_last_process(fn) | "
    .. "on_process(fn, i) | on_local_process(fn, i)",
    "Accelerate's decorators: a function that runs fn (returning its results) on that process only.")
  add("acc:check_trigger", "acc:set_trigger(); if acc:check_trigger() then break end",
    "A flag across processes (early stopping): check_trigger() is true everywhere when any process set it; it clears it.")
  add("acc:wait_for_everyone", "acc:wait_for_everyone()", "A barrier across the processes.")
  add("acc:no_sync", "acc:no_sync(model, fn, ...)", "fn runs without gradient synchronisation (no communication).")
  add("acc:end_training", "acc:end_training()",
    "Accelerate's last call: it finishes the trackers (closing TensorBoard's files); the process group, which\n"
    .. "Accelerate's ends there, ends here when the process exits, so that scripts ending with it run to the end.")
  add("DistributedType", "fp8.DistributedType.NO | MULTI_CPU | MULTI_GPU | ...",
    "Accelerate's enum: acc.distributed_type is one of these strings; a name that is no member raises.")
  add("DDPCommunicationHookType", "fp8.DDPCommunicationHookType.FP16 | DDPCommunicationHookType(\"fp16\")",
    "Accelerate's enum of DistributedDataParallelKwargs' comm_hook/comm_wrapper values (the strings themselves).")
  add("FP8BackendType", "fp8.FP8BackendType.TE | MSAMP | AO",
    "Accelerate's enum of acc.fp8_backend, holding fp8lab's values (\"te\", \"msamp\", \"ao\"), so that\n"
    .. "acc.fp8_backend == fp8.FP8BackendType.TE reads as in Accelerate; a name that is no member raises.")
  add("is_transformer_engine_available", "fp8.is_transformer_engine_available() | is_msamp_available() | "
    .. "is_torchao_available() | is_cuda_available()",
    "Accelerate's utilities: the three FP8 backends are fp8lab's own recipes, so the first three are true;\n"
    .. "is_cuda_available() is fp8.cuda.is_available() (a usable GPU and a CUDA build).")
  for _, n in ipairs { "is_msamp_available", "is_torchao_available", "is_cuda_available" } do
    help.ALIASES[n] = "is_transformer_engine_available"
  end
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Sharded, "DataLoaderShard")
-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.distributed")
return M
