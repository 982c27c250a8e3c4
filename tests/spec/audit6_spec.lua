-- Found on 2026-12-05/06 (stop 90) by porting Hugging Face Accelerate's own example scripts (examples/*.py and
-- examples/by_feature/*.py) to fp8lab, by auditing reproducibility (bits across runs, threads, resumes, ranks), and by
-- running ops on tensors past 2^24 and 2^31 elements. Resuming with by_feature/checkpointing.py's recipe (its own
-- count of done batches) is in resume_spec.lua; the cases here are the rest.
local U = dofile("tests/spec/helpers/util.lua")

-- fp8lab's command line in a child process: its output and whether it succeeded
local function cli(args)
  return U.sh(U.q(arg and arg[-1] or "build/fp8lab") .. " " .. args)
end

local function new_acc(t)
  t = t or {}
  t.cpu, t.config, t.env = true, false, {}
  return fp8.Accelerator(t)
end

describe("Accelerate's names", function()
  it("gather_for_metrics cuts to the last batch's samples in one process too, as Accelerate's remainder", function()
    -- gradient_accumulation_for_autoregressive_models.py gathers loss.repeat(batch_size): 70 samples in batches of
    -- 32 gave 96 losses in one process (70 under two), so its perplexity weighted the last batch 32/6 times
    local acc = new_acc {}
    local items = {}
    for i = 1, 70 do items[i] = { fp8.tensor { i }, i } end
    local dl = acc:prepare(fp8.data.DataLoader { items, batch_size = 32 })
    local rows, repeated, objects = 0, 0, 0
    for _, y in dl do
      rows = rows + acc:gather_for_metrics(y):numel()
      repeated = repeated + acc:gather_for_metrics(fp8.ones { 32 }):numel()
      local s = {}
      for j = 1, y:numel() do s[j] = "s" .. j end
      objects = objects + #acc:gather_for_metrics(s, true)
    end
    assert.are.equal(70, rows)
    assert.are.equal(70, repeated)
    assert.are.equal(70, objects)
    -- drop_last: no short batch, nothing to cut
    local dl2 = acc:prepare(fp8.data.DataLoader { items, batch_size = 32, drop_last = true })
    local n = 0
    for _ in dl2 do n = n + acc:gather_for_metrics(fp8.ones { 32 }):numel() end
    assert.are.equal(64, n)
  end)

  it("a prepared optimizer's train() and eval() pass to an optimizer that has them and do nothing otherwise", function()
    -- schedule_free.py calls optimizer.train() / optimizer.eval(): 'attempt to call a nil value (method 'train')'
    local acc = new_acc {}
    local m = fp8.nn.Linear(2, 2)
    local _, o = acc:prepare(m, fp8.optim.AdamW(m:parameters(), { lr = 1e-3 }))
    assert.are.equal(0, select("#", o:train()))
    assert.are.equal(0, select("#", o:eval()))
    local calls = {}
    o.optimizer.train = function(self) calls[#calls + 1] = self end
    o:train()
    assert.are.equal(o.optimizer, calls[1])
    U.fails_with("train: takes no arguments", o.train, o, true)
  end)

  it("names Accelerate has and fp8lab has not say so and what to use, where they were nil", function()
    for name, needle in pairs {
      FullyShardedDataParallelPlugin = "FSDP is not supported", DeepSpeedPlugin = "DeepSpeed is not supported",
      PartialState = "acc.process_index", GradientState = "acc.gradient_state", get_logger = "acc:print",
      notebook_launcher = "fp8lab launch", gather_object = "acc:gather_object", wait_for_everyone = "acc:wait_for_everyone",
      LoggerType = "log_with=\"tensorboard\"", extract_model_from_parallel = "acc:unwrap_model",
      init_empty_weights = "fp8.load_checkpoint_in_model",
    } do
      U.fails_with({ "fp8." .. name .. ": not in fp8lab: ", needle }, function() return fp8[name] end)
    end
    assert.is_nil(fp8.no_such_name_here)   -- other unknown names stay nil: `if fp8.x then` works
    assert.is_function(fp8.gather)         -- torch's gather along a dim, as before
  end)

  it("prepare refuses Accelerate's device_placement= list instead of handing the options back unread", function()
    local acc = new_acc {}
    local m = fp8.nn.Linear(2, 2)
    U.fails_with("prepare: device_placement= per object is not supported", acc.prepare, acc, m,
      { device_placement = { false } })
    -- other plain values still pass through prepare as they are, as Accelerate's
    local t = { 1, 2 }
    local _, back = acc:prepare(fp8.nn.Linear(2, 2), t)
    assert.are.equal(t, back)
  end)

  it("m:to(acc.device) and loader:to(acc.device) say that the device is a method", function()
    local acc = new_acc {}
    U.fails_with("the Accelerator's device is a method: m:to(acc:device())", function() fp8.nn.Linear(2, 2):to(acc.device) end)
    U.fails_with("loader:to(acc:device())", function()
      fp8.data.DataLoader { { 1, 2 }, batch_size = 1 }:to(acc.device)
    end)
  end)
end)

describe("GPT:generate without a seed", function()
  it("draws from fp8's generator, so fp8.manual_seed / set_seed make it reproducible (torch's multinomial's way)", function()
    -- it drew from Lua's math.random, seeded from the clock: another sample every run whatever the script seeded
    fp8.manual_seed(3)
    local m = fp8.nn.GPT { vocab_size = 10, block_size = 8, n_layer = 1, n_head = 1, n_embd = 16 }
    local function sample(seed)
      fp8.set_seed(seed)
      return table.concat(m:generate(fp8.tensor { { 1 } }, 24):view(-1):totable(), " ")
    end
    local a = sample(7)
    assert.are.equal(a, sample(7))
    assert.are_not.equal(a, sample(8))
    -- with a seed: its own generator, fp8's left alone (as before)
    fp8.manual_seed(5)
    local before = fp8.rand { 4 }:totable()
    fp8.manual_seed(5)
    m:generate(fp8.tensor { { 1 } }, 5, { seed = 1 })
    assert.are.same(before, fp8.rand { 4 }:totable())
  end)
end)

describe("positions past 2^24 (fp32, the index dtype, holds whole numbers exactly up to 2^24)", function()
  -- a helper ran ops on tensors past 2^24 and 2^31 elements: everything past 2^31 came out exact; ops that build
  -- their positions as fp32 tensors read or wrote a rounded neighbour past 2^24 without a word (a 4098×4097 image's
  -- pixel at an odd flat position read as its neighbour: conv2d, pools, unfold gave 0 for 7), or refused a valid
  -- index (gather at 2^24 in a dim of 2^24 + 1: the size was rounded to fp32 for the check)
  local F = fp8.nn.functional
  local N = (1 << 24) + 3
  local x = fp8.zeros { N }
  local refused = "indices above 2^24 are not exact in fp32, the index dtype"
  it("is refused, naming the op, where positions would pass 2^24", function()
    U.fails_with({ "cummax: ", refused }, function() return x:cummax(1) end)
    U.fails_with({ "cummin: ", refused }, function() return x:cummin(1) end)
    U.fails_with({ "one_hot: the class ids of 16777219 classes", refused }, F.one_hot, fp8.tensor { 1 }, N)
    U.fails_with({ "searchsorted: ", refused }, fp8.searchsorted, x, fp8.tensor { 1 })
    U.fails_with("take: index 1 asks for position 16777218: positions above 2^24", function() return x:take(fp8.tensor { -1 }) end)
    -- (the max pools' indices are fp32 positions; the windows themselves no longer are: core/im2col.c)
    U.fails_with({ "max_pool1d: the positions in the 1×16777219 input plane ", refused },
      function() return F.max_pool1d(x:view(1, 1, N), 1, { return_indices = true }) end)
  end)
  it("flip and tril on the CPU reach every position past 2^24 exactly (no index tensor since stop 93)", function()
    local v = fp8.zeros { N }
    v[2] = 5   -- position 1 goes to N - 2 = 2^24 + 1, odd: an fp32 position would have rounded it
    local f = v:flip { 1 }
    assert.are.equal(5, f[N - 1])
    assert.are.equal(0, f[N - 2])
    local row = fp8.ones { 2, N }
    local t = row:tril((1 << 24) + 1)   -- row 1 keeps columns 0 .. 2^24 + 1, row 2 one more
    assert.are.equal(1, t[1][(1 << 24) + 2])
    assert.are.equal(0, t[1][(1 << 24) + 3])
    assert.are.equal(1, t[2][(1 << 24) + 3])
  end)
  it("the windows of conv, pooling and unfold read every position past 2^24 exactly (no fp32 positions since "
    .. "2026-12-06)", function()
    local v = fp8.zeros { N }
    v[(1 << 24) + 2] = 7   -- position 2^24 + 1, odd: an fp32 position rounded it to 2^24, which holds 0
    local seq = v:view(1, 1, N)
    for name, f in pairs {
      conv1d = function() return F.conv1d(seq, fp8.ones { 1, 1, 1 }) end,
      max_pool1d = function() return F.max_pool1d(seq, 1) end,
      avg_pool1d = function() return F.avg_pool1d(seq, 1) end,
      unfold = function() return F.unfold(v:view(1, 1, 1, N), 1):reshape({ N }) end,
    } do
      local y = f():reshape({ N })
      assert.are.equal(7, y[(1 << 24) + 2], name)
      assert.are.equal(0, y[(1 << 24) + 1], name)
    end
    local img = fp8.zeros { 1, 1, 4098, 4097 }
    img[1][1][4097][4096] = 7   -- flat position 4096·4097 + 4095 = 2^24 + 8191 (odd)
    local y = F.conv2d(img, fp8.ones { 1, 1, 1, 1 })
    assert.are.equal(7, y[1][1][4097][4096])
    assert.are.equal(7, y:sum():item())
  end)
  it("works up to 2^24, and gather / index_select / scatter take index 2^24 in a dim of 2^24 + 1", function()
    local y = fp8.arange((1 << 24) + 1)
    assert.are.equal(16777216, y:gather(1, fp8.tensor { 16777216 }):item())
    assert.are.equal(16777216, y:index_select(1, fp8.tensor { 16777216 }):item())
    local z = fp8.zeros { (1 << 24) + 1 }
    z:scatter_(1, fp8.tensor { 16777216 }, fp8.tensor { 5 })
    assert.are.equal(5, z:sum():item())
    U.fails_with("gather: index 16777218 out of range 0..16777216", function() return y:gather(1, fp8.tensor { 16777218 }) end)
    assert.are.equal(16777216, fp8.arange(1 << 24):flip({ 1 }):numel())
    assert.are.equal(0, x:take(fp8.tensor { 16777216 }):item())
  end)
end)

describe("Accelerate's documentation, its snippets ported", function()
  it("set_seed seeds Lua's math.random too, as Accelerate's seeds Python's random (manual_seed: fp8's alone)", function()
    fp8.set_seed(42)
    local a = { math.random(1 << 30), math.random(1 << 30) }
    fp8.set_seed(42)
    assert.are.same(a, { math.random(1 << 30), math.random(1 << 30) })
    fp8.set_seed(43)
    assert.are_not.same(a, { math.random(1 << 30), math.random(1 << 30) })
  end)

  it("gradient_state has in_dataloader, active_dataloader, remainder and the plugin's settings; fp8_enabled", function()
    local acc = new_acc { mixed_precision = "fp8" }
    local gs = acc.gradient_state
    assert.is_false(gs.in_dataloader); assert.is_nil(gs.active_dataloader); assert.are.equal(-1, gs.remainder)
    assert.are.same({ num_steps = 1, sync_with_dataloader = true, sync_each_batch = false, adjust_scheduler = true },
      gs.plugin_kwargs)
    assert.is_true(gs.adjust_scheduler)
    local items = {}
    for i = 1, 10 do items[i] = { fp8.tensor { i }, i } end
    local dl = acc:prepare(fp8.data.DataLoader { items, batch_size = 4 })
    local seen = {}
    for _ in dl do seen[#seen + 1] = { gs.in_dataloader, gs.remainder, gs.active_dataloader ~= nil } end
    assert.are.same({ { true, 2, true }, { true, 2, true }, { true, 2, true } }, seen)
    assert.is_false(gs.in_dataloader)
    assert.is_true(acc.fp8_enabled)
    assert.is_false(new_acc {}.fp8_enabled)
    assert.are.equal(fp8.FP8BackendType.MSAMP, acc.fp8_backend)
    U.fails_with("FP8BackendType has no member NO", function() return fp8.FP8BackendType.NO end)
    assert.is_true(fp8.is_transformer_engine_available() and fp8.is_msamp_available() and fp8.is_torchao_available())
    assert.is_boolean(fp8.is_cuda_available())
  end)

  it("names that were still nil say why, an Accelerator's too", function()
    for name, needle in pairs { write_basic_config = "fp8lab config --default", RNGType = "one generator",
      debug_launcher = "fp8lab launch", KwargsHandler = "fp8.TERecipeKwargs{...}", patch_environment = "FP8LAB_*",
      convert_outputs_to_fp32 = "fp32 outputs", ComputeEnvironment = "this machine's processes" } do
      U.fails_with({ "fp8." .. name .. ": not in fp8lab: ", needle }, function() return fp8[name] end)
    end
    local acc = new_acc {}
    U.fails_with("Accelerator:verify_device_map is not supported: a model is on one device",
      function() acc:verify_device_map({}) end)
    U.fails_with("Accelerator:maybe_context_parallel is not supported", function() acc:maybe_context_parallel() end)
  end)

  it("fp8lab config default is --default; update and test --config_file say what to run instead", function()
    local dir = U.tmpdir()
    local out, ok = cli("config default --config_file " .. U.q(dir .. "/c.yaml"))
    assert.is_true(ok, out)
    assert.truthy(U.must_read(dir .. "/c.yaml"):find("num_processes: 1", 1, true))
    out, ok = cli("config update")
    assert.is_false(ok)
    assert.truthy(out:find("'update' is not needed", 1, true), out)
    out, ok = cli("test --config_file " .. U.q(dir .. "/c.yaml"))
    assert.is_false(ok)
    assert.truthy(out:find("is `fp8lab config --check --config_file F`", 1, true), out)
    os.execute("rm -rf " .. U.q(dir))
  end)
end)

describe("modes under errors and coroutines", function()
  it("acc:profile and acc:main_process_first refuse a yield inside fn, and leave nothing on", function()
    -- a coroutine abandoned inside acc:profile left the accelerator profiling for good (every later profile refused);
    -- one suspended inside main_process_first paired its barrier with a later one (a hang under 2 processes)
    local acc = new_acc {}
    for _, case in ipairs {
      { "profile", function(f) return acc:profile(f) end },
      { "main_process_first", function(f) return acc:main_process_first(f) end },
    } do
      local co = coroutine.create(function() case[2](function() coroutine.yield(1) end) end)
      local ok, err = coroutine.resume(co)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[1] .. ": a coroutine yielded inside it", 1, true), err)
    end
    assert.is_nil(rawget(acc, "_profiler"))
    assert.has_no.errors(function() acc:profile(function() end) end)
  end)

  it("a hook's error object comes back as itself through backward, nil and numbers too", function()
    -- a number came back as the string "backward: a tensor's hook raised: 42", nil as "... raised: nil"
    for _, e in ipairs { 42, false, "text" } do
      local x = fp8.ones { 2 }:requires_grad_()
      local y = x * 2
      y:register_hook(function() error(e, 0) end)
      local ok, got = pcall(function() y:sum():backward() end)
      assert.is_false(ok)
      if type(e) == "string" then assert.truthy(got:find("text", 1, true)) else assert.are.equal(e, got) end
    end
    local x = fp8.ones { 2 }:requires_grad_()
    local y = x * 2
    y:register_hook(function() error(nil, 0) end)
    local ok, got = pcall(function() y:sum():backward() end)
    assert.is_false(ok)
    assert.is_nil(got)
  end)

  it("embedding_bag gives per_sample_weights a zero gradient when no entry is kept, as torch's", function()
    local F = fp8.nn.functional
    local w = fp8.randn { 4, 2 }:requires_grad_()
    local psw = fp8.randn { 3 }:requires_grad_()
    F.embedding_bag(fp8.tensor { 1, 1, 1 }, w, fp8.tensor { 0, 2 }, { mode = "sum", per_sample_weights = psw,
      padding_idx = 1 }):sum():backward()
    assert.are.same({ 0, 0, 0 }, psw.grad:totable())
    local psw0 = fp8.zeros { 0 }:requires_grad_()
    F.embedding_bag(fp8.zeros { 0 }, w, fp8.tensor { 0, 0 }, { mode = "sum", per_sample_weights = psw0 }):sum():backward()
    assert.are.same({ 0 }, psw0.grad:shape())
  end)

  it("an FP8Linear's refusal of an FP8 input carries no position in fp8lab's files", function()
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    local m = acc:prepare(fp8.nn.Sequential(fp8.nn.Linear(16, 16)))
    local ok, err = pcall(function() return m(fp8.ones { 2, 16 }:quantize("e4m3")) end)
    assert.is_false(ok)
    assert.truthy(err:find("fp8 linear: input is e4m3", 1, true), err)
    assert.is_nil(err:find("fp8_linear.lua", 1, true), err)
  end)
end)

describe("what fp8lab writes, read by the real consumers", function()
  it("hparams.yml floats carry a '.', so PyYAML reads them as floats (1e-05 was a string, 2.0 an integer)", function()
    local dir = U.tmpdir()
    local acc = new_acc { log_with = "tensorboard", project_dir = dir }
    acc:init_trackers("p", { lr = 1e-5, big = 1e20, two = 2.0, negz = -0.0, small = 0.0003, n = 3 })
    acc:end_training()
    local found
    for f in io.popen("find " .. U.q(dir) .. " -name hparams.yml"):lines() do found = f end
    local y = U.must_read(found)
    for _, want in ipairs { "lr: 1.0e-05", "big: 1.0e+20", "two: 2.0", "negz: -0.0", "small: 0.0003", '"n": 3\n' } do
      assert.truthy(y:find(want, 1, true), want .. " in\n" .. y)
    end
    os.execute("rm -rf " .. U.q(dir))
  end)

  it("log_fp8_stats quotes a layer name holding a comma, and fp8.plot reads it back", function()
    local dir = U.tmpdir()
    local nn, F = fp8.nn, fp8.nn.functional
    local m = nn.Sequential(nn.Linear(16, 16))
    m:add_module("head,1", nn.Linear(16, 16))
    local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    m, opt = acc:prepare(m, opt)
    acc:log_fp8_stats { every = 1, path = dir .. "/s.csv" }
    acc:backward(F.cross_entropy(m(fp8.randn { 4, 16 }), fp8.tensor { 1, 2, 3, 4 })); opt:step(); opt:zero_grad()
    local text = U.must_read(dir .. "/s.csv")
    assert.truthy(text:find('\n1,"head,1",input,', 1, true), text)
    for line in text:gmatch("[^\n]+") do
      assert.are.equal(8, select(2, line:gsub('"[^"]*"', ""):gsub(",", ",")), line)   -- 9 fields
    end
    os.execute("rm -rf " .. U.q(dir))
  end)

  it("fp8lab config writes compute_environment and distributed_type, which Accelerate's loader requires", function()
    local dir = U.tmpdir()
    local out, ok = cli("config --default --num_processes 2 --config_file " .. U.q(dir .. "/c.yaml"))
    assert.is_true(ok, out)
    local y = U.must_read(dir .. "/c.yaml")
    assert.truthy(y:find("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\n", 1, true), y)
    out, ok = cli("config --check --config_file " .. U.q(dir .. "/c.yaml"))
    assert.is_true(ok, out)
    assert.is_nil(out:find("ignoring settings", 1, true), out)   -- its own keys are not news
    os.execute("rm -rf " .. U.q(dir))
  end)
end)

describe("topk by selection", function()
  it("gives a full sort's first k, ties (by position) and NaN included, on any input order", function()
    -- topk sorted the whole line to keep k of it (1e6 values for k = 100: 186 ms, now 15); a quickselect now picks
    -- the k, whose order a sort of k then gives (core/sort.c select_first)
    fp8.manual_seed(1)
    local rnd = fp8.rand { 300 * 3 }:totable()
    local at = 0
    local function r(lo, hi) at = at + 1; return lo + math.floor(rnd[at] * (hi - lo + 1)) end
    for trial = 1, 300 do
      local n = r(1, 300)
      local x = fp8.randn { n }
      if trial % 3 == 0 then x = (x * 3):round() end
      if trial % 7 == 0 then x[r(1, n)] = 0 / 0 end
      if trial % 11 == 0 then x = fp8.arange(n) end
      if trial % 13 == 0 then x = fp8.arange(n):flip { 1 } end
      if trial % 17 == 0 then x = fp8.zeros { n } end
      local k = r(0, n)
      for _, largest in ipairs { true, false } do
        local _, i = x:topk(k, -1, largest)
        local _, si = x:sort(-1, largest)
        local a, b = i:totable(), si:totable()
        for j = 1, k do assert.are.equal(b[j], a[j], ("trial %d, k %d, position %d"):format(trial, k, j)) end
      end
    end
  end)
end)

describe("a transposed copy into a contiguous tensor", function()
  it("moves the same bits in blocks as element by element (fp32, bf16, fp16, E4M3 bytes; 2-d and 4-d; offsets)", function()
    -- t():contiguous() read the source one element a cache line apart ([4096, 1024]: 35 → 14 ms, one thread)
    fp8.manual_seed(2)
    local flat = U.flat
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local y = fp8.randn { 3, 9, 10, 33 }:to(dt)
      for _, v in ipairs { fp8.randn { 37, 45 }:to(dt):t(), y:permute { 1, 3, 4, 2 }, y:transpose(2, 4),
        fp8.randn { 50, 60 }:to(dt):narrow(1, 3, 40):narrow(2, 5, 50):t(),
        -- several 32-blocks each way, 8 × 8 register squares and their ragged edges (stop 93)
        fp8.randn { 70, 100 }:to(dt):t(), fp8.randn { 2, 67, 130 }:to(dt):transpose(2, 3),
        fp8.randn { 64, 1024 }:to(dt):t() } do
        local c = v:contiguous()
        assert.is_true(c:is_contiguous())
        -- v * 1 walks the view element by element (reading v itself would take the same transposed copy)
        assert.are.same(flat(v * 1), flat(c))
      end
    end
    local q = fp8.randn { 40, 48 }:quantize("e4m3")
    assert.are.same(flat(q:t():dequantize()), flat(q:t():contiguous():dequantize()))
  end)
end)
