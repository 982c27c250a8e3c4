-- Gaps found by the audits of 2026-12-05 (docs/robustness.md, "Audited by hand"): recipe fields a layer made outside
-- prepare took and ignored, MS-AMP O3's stale E4M3 weight, model conversion dropping what a layer carried, module
-- registration and containers, the data loaders, printing and the prompt's quoting.
local fp8 = fp8 or require "fp8"
local nn = fp8.nn
local U = dofile("tests/spec/helpers/util.lua")
local fails_with = U.fails_with

-- stderr of f(), and its results
local function stderr_of(f)
  local path = os.tmpname()
  local saved = io.stderr
  local h = assert(io.open(path, "w"))
  io.stderr = h
  local ok, err = pcall(f)
  io.stderr = saved
  h:close()
  local text = assert(io.open(path)):read("a")
  os.remove(path)
  assert(ok, err)
  return text
end

describe("a recipe's whole-model fields outside prepare", function()
  it("are refused by FP8Linear, linear_to_fp8 and convert_model, which would take them and do nothing", function()
    local function seq() return nn.Sequential(nn.Linear(16, 16)) end
    fails_with({ "convert_model: the recipe's opt_level is refused here", "acc:prepare(model, optimizer)" },
      fp8.convert_model, seq(), { recipe = fp8.MSAMPRecipeKwargs { opt_level = "O3" } })
    fails_with("FP8Linear: the recipe's opt_level is refused here", nn.FP8Linear, 16, 16, fp8.MSAMPRecipeKwargs {})
    fails_with("convert_model: the recipe's use_autocast_during_eval is refused here", fp8.convert_model, seq(),
      { recipe = fp8.TERecipeKwargs { use_autocast_during_eval = true } })
    fails_with("FP8Linear: the recipe's module_filter_func is refused here", nn.FP8Linear, 16, 16,
      fp8.AORecipeKwargs { module_filter_func = function() return false end })
    fails_with("linear_to_fp8: the recipe's opt_level is refused here", fp8.recipes.linear_to_fp8, nn.Linear(16, 16),
      fp8.MSAMPRecipeKwargs {})
    -- a recipe table's module_filter_func that is not a function (a raw "attempt to call" before)
    fails_with("convert_model: module_filter_func must be a function(module, name) -> boolean, got 3",
      fp8.convert_model, seq(), { recipe = { backend = "ao", module_filter_func = 3 } })
    -- MS-AMP's scaling alone, and te's eval option at its default, are layer-level
    assert.matches("fp8=msamp)", tostring(nn.FP8Linear(16, 16, { backend = "msamp" })), 1, true)
    local m = fp8.convert_model(seq(), { recipe = fp8.TERecipeKwargs {} })
    assert.are.equal("FP8Linear", m[1]:type_name())
    -- and prepare, which sets them up, still takes them
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O3" } },
      config = false, env = {} }
    local net = seq()
    local model = acc:prepare(net, fp8.optim.AdamW(net:parameters()))
    assert.are.equal("fp16", model[1].weight:dtype())
  end)

  it("convert_model applies te's shape rule as prepare does, with its notice", function()
    local a = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 24))
    local err = stderr_of(function() fp8.convert_model(a, { recipe = fp8.TERecipeKwargs {} }) end)
    assert.are.equal("FP8Linear", a[1]:type_name())
    assert.are.equal("Linear", a[2]:type_name())
    assert.matches("1 [16 -> 24] stays in high precision: FP8 GEMMs need dims divisible by 16", err, 1, true)
  end)
end)

describe("MS-AMP O3's E4M3 weight", function()
  it("follows a write to its fp16 master before the next forward, as O2's cache does", function()
    for _, lvl in ipairs { "O2", "O3" } do
      fp8.manual_seed(0)
      local acc = fp8.Accelerator { mixed_precision = "fp8", config = false, env = {},
        kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = lvl } } }
      local net = nn.Sequential(nn.Linear(16, 16))
      local opt = fp8.optim.AdamW(net:parameters())
      local model
      model, opt = acc:prepare(net, opt)
      local x = fp8.randn { 8, 16 }
      local y1 = model(x)
      fp8.no_grad(function() model[1].weight:zero_() end)
      local y2 = model(x)
      -- the forward now runs on the zero weight: the output is the bias alone (it ran on the old weight at O3)
      assert.is_true((y2 - model[1].bias:float()):abs():max():item() == 0, lvl)
      assert.is_true((y2 - y1):abs():max():item() > 0.1, lvl)
      -- and after an optimizer step the step's own cast is the one the forward reads (no second cast needed)
      acc:backward(model(x):sum()); opt:step(); opt:zero_grad()
      if lvl == "O3" then
        local q = rawget(model[1], "weight_fp8")
        local w = model[1].weight:float()
        local fresh = w:quantize("e4m3", { scale = require("fp8._fp8_layer").scale_for(w:abs():max():item(), "e4m3", 0, true) })
        assert.are.same(fresh:bytes(), q:bytes())
      end
    end
  end)
end)

describe("model conversion keeps what a layer carries", function()
  it("a Linear with a forward, entries or fields of its own stays in high precision, with a notice", function()
    local l = nn.Linear(16, 16)
    l.forward = function(_, x) return x * 0 + 42 end
    local s = nn.Sequential(l)
    local err = stderr_of(function() fp8.convert_model(s) end)
    assert.are.equal("Linear", s[1]:type_name())
    assert.are.equal(42, s(fp8.randn { 2, 16 }):mean():item())
    assert.matches("it carries a forward of its own", err, 1, true)
    local l2 = nn.Linear(16, 16)
    l2:register_buffer("mask", fp8.ones { 16 })
    local l3 = nn.Linear(16, 16)
    l3.tag = "x"
    local s2 = nn.Sequential(l2, l3, nn.Linear(16, 16))
    err = stderr_of(function() fp8.convert_model(s2) end)
    assert.are.same({ "Linear", "Linear", "FP8Linear" }, { s2[1]:type_name(), s2[2]:type_name(), s2[3]:type_name() })
    assert.matches("its buffer 'mask'", err, 1, true)
    assert.matches("its field 'tag'", err, 1, true)
    fails_with("linear_to_fp8: this Linear carries a forward of its own", fp8.recipes.linear_to_fp8, l, { backend = "te" })
  end)

  it("the way back refuses an FP8 layer that carries more, before changing anything", function()
    local s = fp8.convert_model(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16)))
    s[2]:register_buffer("m", fp8.ones { 1 })
    fails_with("convert_model: 1 (FP8Linear) carries its buffer 'm', which a plain Linear would not keep",
      fp8.convert_model, s, { to_fp8 = false })
    assert.are.equal("FP8Linear", s[1]:type_name())   -- all or nothing
  end)

  it("converting back draws nothing from the generator, as the way to FP8", function()
    local draws = {}
    for _, mp in ipairs { "no", "fp8" } do
      fp8.manual_seed(0)
      local acc = mp == "no" and fp8.Accelerator { config = false, env = {} } or fp8.Accelerator {
        mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, config = false, env = {} }
      local m = acc:prepare(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16)))
      acc:unwrap_model(m, { keep_fp32_wrapper = false })
      draws[mp] = fp8.rand { 2 }:totable()
    end
    assert.are.same(draws.no, draws.fp8)
  end)

  it("an ao layer has a Linear's state_dict keys, so checkpoints move both ways; an older file still loads", function()
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.AORecipeKwargs {} }, config = false,
      env = {} }
    local function mk() return nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)) end
    local m = acc:prepare(mk())
    assert.are.equal("FP8Linear", m[2]:type_name())
    mk():load_state_dict(m:state_dict())
    m:load_state_dict(mk():state_dict())
    local sd = mk():state_dict()
    sd["1.fp8_state"] = fp8.convert_model(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16)),
      { recipe = { backend = "ao" } })[2].fp8_state
    local r = m:load_state_dict(sd)
    assert.are.same({}, r.unexpected_keys)
  end)
end)

describe("modules as torch's", function()
  it("containers take an index written as a float with an integer value, and refuse others", function()
    local s = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert.are.equal(s[2], s[4 / 2])
    s[2.0] = nn.Identity()
    assert.are.equal("Identity", s[2]:type_name())
    assert.matches("(1): Identity()", tostring(s), 1, true)
    fails_with("index must be an integer, got 1.5", function() return s[1.5] end)
    local pl = nn.ParameterList { fp8.ones { 2 }:requires_grad_() }
    assert.are.equal(pl[1], pl[1.0])
  end)

  it("registering by assignment checks the name as register_* and add_module do", function()
    fails_with("cannot register a submodule under the name 'keys': it is already an attribute of ModuleDict",
      function() local d = nn.ModuleDict {}; d["keys"] = nn.Linear(2, 2) end)
    fails_with("a name is non-empty and without '.'", function() local d = nn.ModuleDict {}; d["a.b"] = nn.Linear(2, 2) end)
    fails_with("a name is non-empty and without '.'", function() local m = nn.Linear(2, 2); m[""] = nn.Linear(2, 2) end)
    fails_with("cannot register a submodule under the name 'train'",
      function() local l = nn.Linear(2, 2); l.train = nn.Linear(2, 2) end)
    fails_with("cannot register a parameter under the name 'cuda'",
      function() local l = nn.Linear(2, 2); l.cuda = fp8.ones { 2 }:requires_grad_() end)
    local l = nn.Linear(2, 2)
    l.extra = nn.ReLU()   -- a free name registers as before
    assert.are.equal("extra", l:named_children()[1][1])
  end)

  it("load_state_dict of a module, register_module, named_children once per module", function()
    local a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    fails_with("load_state_dict: expected a state_dict, got a module (Linear): pass its state_dict()",
      a.load_state_dict, a, b)
    fails_with("load_state_dict: expected a state_dict, got a module", a.load_state_dict, a, b, false)
    local m = nn.Module()
    assert.are.equal(m:register_module("act", nn.ReLU()), m.act)
    fails_with("register_module: name must be a non-empty string without '.', got a.b", m.register_module, m, "a.b",
      nn.ReLU())
    -- torch: Sequential(a, a).named_children() yields one; the printed tree and state_dict keep both names
    local x = nn.Linear(2, 2)
    local q = nn.Sequential(x, x)
    assert.are.equal(1, #q:named_children())
    assert.are.equal("0", q:named_children()[1][1])
    assert.are.equal(2, #q:_all_children())
    assert.matches("(1): Linear", tostring(q), 1, true)
  end)
end)

describe("data loaders", function()
  local D = fp8.data
  it("refuse torch's DataLoader(ds, {...}) form, extra arguments and a list of items as options", function()
    local td = D.TextDataset { text = "hello world", block_size = 2 }
    fails_with("DataLoader takes one options table holding the dataset: DataLoader{ds, batch_size=..., ...}; got 1 more",
      D.DataLoader, { td }, { batch_size = 4 })
    fails_with("got a dataset", D.DataLoader, td)
    fails_with("got a list of items", D.DataLoader, { { fp8.tensor { 1, 2 }, 3 }, { fp8.tensor { 1, 2 }, 3 } })
    fails_with("TextDataset: takes ({path= | text= | dir=, block_size=, ...}); got 1 more argument", D.TextDataset,
      { text = "abcdef", block_size = 2 }, 5)
    fails_with("FashionMNIST: takes", D.FashionMNIST, { train = false, limit = 2 }, 5)
  end)

  it("keep their settings: a write is refused as torch refuses it", function()
    local l = D.DataLoader { { 1, 2, 3, 4, 5 }, batch_size = 2 }
    for _, k in ipairs { "batch_size", "shuffle", "drop_last", "seed", "dataset", "device" } do
      fails_with(("DataLoader: %s should not be set after the DataLoader is made"):format(k), function() l[k] = 1 end)
    end
    assert.are.equal(2, l.batch_size)
    assert.are.equal(3, #l)
    l.epoch = 3   -- (the loader's own counters stay writable: set_epoch, resume)
    assert.are.equal(3, l.epoch)
    local seen = 0
    for x in l do seen = seen + x:numel() end
    assert.are.equal(5, seen)
    -- Accelerate's data_seed still orders a shuffling loader
    local acc = fp8.Accelerator { dataloader_config = fp8.DataLoaderConfiguration { use_seedable_sampler = true, data_seed = 7 }, config = false,
      env = {} }
    local s = acc:prepare(D.DataLoader { { 1, 2, 3, 4, 5 }, batch_size = 2, shuffle = true })
    assert.are.equal(7, s.seed)
  end)

  it("datasets end at their length for ipairs; ds[i] out of range is nil, ds:get(i) raises", function()
    local td = D.TextDataset { text = "hello world", block_size = 4 }
    local n = 0
    for _, item in ipairs(td) do n = n + 1; assert.are.equal(2, #item) end
    assert.are.equal(#td, n)
    assert.is_nil(td[#td + 1])
    assert.is_nil(td[0])
    fails_with("TextDataset: index must be an integer, got 1.5", function() return td[1.5] end)
    fails_with("TextDataset:get: index 8 out of range 1..7", td.get, td, 8)
  end)

  it("refuse cuda where there is none at :to, not at the first batch; name a missing std", function()
    local okc, cuda = pcall(require, "fp8.cuda")
    if not (okc and cuda.is_available()) then
      local l = D.DataLoader { { 1, 2 } }
      fails_with("DataLoader: device cuda is not available here", l.to, l, "cuda")
      fails_with("DataLoader: device cuda is not available here", D.DataLoader, { { 1, 2 }, device = "cuda" })
    end
    fails_with("FashionMNIST: normalize {mean, std}: std must be a number, got nil", D.FashionMNIST,
      { normalize = { mean = 0.5 } })
  end)

  it("with even_batches=false a process without a batch is refused on every process (it hung the others)", function()
    -- one process's view of two: the shard of rank 1 of a 1-item loader is empty
    local dist = require "fp8.distributed"
    local acc = fp8.Accelerator { config = false, env = {} }
    local fake = setmetatable({ num_processes = 2, process_index = 0 }, { __index = acc })
    local l = dist.shard(fake, D.DataLoader { { { fp8.tensor { 1 }, 1 } }, batch_size = 4 }, false)
    fails_with("DataLoaderShard: with even_batches=false process 1 of 2 gets no batch of this epoch", function()
      for _ in l do end
    end)
    local ok = dist.shard(fake, D.DataLoader { { 1, 2, 3, 4, 5, 6 }, batch_size = 2 }, false)
    local b = 0
    for _ in ok do b = b + 1 end
    assert.are.equal(2, b)
  end)
end)

describe("printing as torch's", function()
  it("whole numbers as '1.', torch's bounds for scientific notation, ' ...' inside a row", function()
    local function body(t) return (tostring(t):gsub(", dtype=.*$", ")")) end
    assert.are.equal("tensor([[1., 2.],\n        [3., 4.]])", body(fp8.tensor { { 1, 2 }, { 3, 4 } }))
    assert.are.equal("tensor([1.0000e+00, 2.0000e+03])", body(fp8.tensor { 1, 2000 }))
    assert.are.equal("tensor([5.0000e-01, 6.0000e+02])", body(fp8.tensor { 0.5, 600 }))
    assert.are.equal("tensor([1.0000e-03, 5.0000e+00])", body(fp8.tensor { 0.001, 5 }))
    assert.are.equal("tensor(-0.)", body(fp8.tensor(-0.0)))
    assert.are.equal("tensor([nan, 1., inf])", body(fp8.tensor { 0 / 0, 1, math.huge }))
    assert.matches("tensor([   2.,    3.,    4.,  ..., 1000., 1001., 1002.]", tostring(fp8.arange(2, 1003)), 1, true)
    assert.matches("tensor([5.0000e-01, 1.5000e+00, 2.5000e+00,  ..., 1.9975e+03, 1.9985e+03,\n        1.9995e+03]",
      tostring(fp8.arange(2000) + 0.5), 1, true)
  end)

  it("shows requires_grad and grad_fn", function()
    local x = fp8.tensor { 1.5, 2 }:requires_grad_()
    assert.are.equal(", requires_grad=true)", tostring(x):sub(-21))
    assert.are.equal(", grad_fn=<MulBackward>)", tostring(x * 2):sub(-24))
    assert.is_nil(tostring((x * 2):detach()):find("grad", 1, true))
  end)
end)

describe("the teaching tools", function()
  it("the prompt shows a string it can read back (a backslash before a 9 is not a tab)", function()
    local show = require("fp8.repl").format
    for _, s in ipairs { "C:\\9x", "x\\\\9", "a\tb", "a\t9", "\\\t" } do
      assert.are.equal(s, load("return " .. show(s))())
    end
  end)

  it("help refuses extra arguments; dequantize names the dtypes it takes", function()
    fails_with('help: takes ([fn | "name"]); got 1 more argument', help, "hist", 1)
    local q = fp8.tensor { 1 }:quantize("e4m3")
    fails_with("dequantize: target dtype must be fp32, bf16 or fp16, got int8", q.dequantize, q, "int8")
    fails_with("dequantize: target dtype must be fp32, bf16 or fp16, got e5m2", q.dequantize, q, "e5m2")
  end)
end)

describe("views, expands and FP8 element writes", function()
  it("optimizers and nn.init refuse an expanded tensor, whose elements share memory", function()
    local p = fp8.arange(3):unsqueeze(2):expand(3, 2):requires_grad_()
    for _, name in ipairs { "RMSprop", "Adagrad", "NAdam", "RAdam", "Adamax", "Adadelta" } do
      fails_with(name .. ": group 1 params[1] is an expanded view", fp8.optim[name], { p }, { lr = 0.5 })
    end
    local e = fp8.zeros { 4 }:unsqueeze(2):expand(4, 3)
    for _, init in ipairs { "normal_", "uniform_", "xavier_uniform_", "kaiming_normal_", "orthogonal_" } do
      fails_with(init .. ": more than one element of the tensor refers to one memory location", nn.init[init], e)
    end
  end)

  it("view ops give a new view even when nothing moves; tile and diff(0) copy", function()
    local x = fp8.arange(6):view(2, 3)
    local y = x:squeeze()
    y:free()
    assert.are.equal(15, x:sum():item())   -- (x was released with it)
    for _, v in ipairs { x:permute(1, 2), x:movedim(1, 1), fp8.einsum("ij", x), x:squeeze(1), fp8.arange(3):t() } do
      assert.is_false(rawequal(v, x))
    end
    local w = fp8.arange(6):requires_grad_()
    fails_with("only leaf tensors can change requires_grad", function() w:t():requires_grad_(false) end)
    assert.is_true(w:requires_grad())
    local t = fp8.arange(12):view(3, 4)
    t:tile(1, 1):fill_(-1)
    fp8.diff(t, 0):fill_(-1)
    assert.are.equal(66, t:sum():item())
    assert.is_true(fp8.zeros { 3, 4 }:narrow(2, 1, 0):t():is_contiguous())   -- empty: contiguous, as torch's
    local qa = fp8.randn { 2, 3 }:quantize("e4m3", { axis = 1 })
    fails_with("flatten: e4m3 tensor [2, 3] is scaled per index along dim 1", function() return qa:flatten() end)
  end)
end)

describe("low-precision pointwise ops as torch computes them", function()
  local F = fp8.nn.functional
  local function vals(t) return t:float():totable() end
  it("compute bf16/fp16 in fp32 and round once (softplus, logsigmoid, silu, sinc, lerp, logaddexp, hardsigmoid)", function()
    assert.are.same({ 11, 12, 20 }, vals(F.softplus(fp8.tensor({ 11, 12, 20 }, "fp16"))))   -- (inf, inf before)
    assert.are.same({ -11, -12, -20 }, vals(F.logsigmoid(fp8.tensor({ -11, -12, -20 }, "fp16"))))
    assert.are.equal("fp16", F.softplus(fp8.tensor({ 1 }, "fp16")):dtype())
    for _, v in ipairs(vals(fp8.tensor({ 1, 2, 3, -10 }, "bf16"):sinc())) do assert.is_true(math.abs(v) < 1e-7, v) end
    -- terms that cancel: torch's -0.0046997 (it was 0)
    local l = fp8.tensor({ -1.6875 }, "bf16"):lerp(fp8.tensor({ 3.921875 }, "bf16"), 0.3)
    assert.are.equal(-0.00469970703125, l:float():item())
    assert.are.equal(0.01361083984375, fp8.tensor({ -0.6953125 }, "bf16"):logaddexp(fp8.tensor({ -0.6640625 }, "bf16"))
      :float():item())
    assert.are.equal(0.002609252929688, tonumber(("%.15f"):format(F.hardsigmoid(fp8.tensor({ -2.984375 }, "bf16"))
      :float():item())))
    local s = vals(F.silu(fp8.tensor({ -17, -20 }, "fp16")))
    assert.is_true(math.abs(s[1] + 7.15e-7) < 1e-9 and s[2] < 0, s[1])   -- (subnormals: -1.013e-6 and -0 before)
  end)

  it("pow keeps a number exponent in double; fmod rounds a number divisor to the dtype; copysign promotes; //", function()
    local p = (fp8.tensor({ 1e20 }) ^ 1.3):item()
    assert.is_true(math.abs(p / 1.0000000e26 - 1) < 1e-7, p)   -- (9.99997812e25 with the exponent in fp32)
    assert.are.equal(0, fp8.tensor({ 2.59375 }, "bf16"):fmod(1.3):float():item())
    assert.are.equal(0, (fp8.tensor({ 2.59375 }, "bf16") % 1.3):float():item())
    assert.are.equal("fp32", fp8.tensor({ 1.5 }, "bf16"):copysign(fp8.tensor({ -1 })):dtype())
    assert.are.same({ 0, 1, -1 }, (fp8.tensor { 1, 2, -1 } // 2):totable())
    fails_with("//: the left operand must be a tensor, got 2", function() return 2 // fp8.tensor { 1 } end)
    local x = fp8.tensor({ 1.5, 3 }):xlogy(fp8.tensor({ 1.5, 3 }, "bf16"))
    assert.is_true(math.abs(x:totable()[1] - 0.6081976) < 1e-6)   -- (the log in bf16: 0.609375)
  end)
end)

describe("gradients at the edges, as torch's", function()
  local function leaf(l) return fp8.tensor(l):requires_grad_() end
  it("median() spreads its gradient over ties (and NaNs); atan2 at (0, 0) is 0", function()
    local m = leaf { 1, 2, 2, 2, 3, 4 }
    fp8.median(m):backward()
    for i, v in ipairs { 0, 1 / 3, 1 / 3, 1 / 3, 0, 0 } do assert.is_true(math.abs(m.grad:totable()[i] - v) < 1e-6) end
    local n = leaf { 1, 0 / 0, 2, 0 / 0 }
    fp8.median(n):backward()
    assert.are.same({ 0, 0.5, 0, 0.5 }, n.grad:totable())
    local big = leaf { math.huge, 2, -math.huge, 0.1, 0.3 }
    local v = fp8.median(big)
    v:backward()
    assert.is_true(math.abs(v:item() - 0.3) < 1e-7)
    assert.are.same({ 0, 0, 0, 0, 1 }, big.grad:totable())
    local y, x = leaf { 0 }, leaf { 0 }
    y:atan2(x):sum():backward()
    assert.are.same({ 0 }, y.grad:totable())
    assert.are.same({ 0 }, x.grad:totable())
  end)

  it("renorm of a zero slice, cdist with p < 1 at a shared coordinate: finite gradients; dist takes any p", function()
    local r = leaf { { 0, 0 }, { 3, 4 } }
    fp8.renorm(r, 2, 1, 1):sum():backward()
    assert.are.same({ 1, 1 }, r.grad:totable()[1])
    local a = leaf { { 1, 2 }, { 3, 4 } }
    fp8.cdist(a, fp8.tensor { { 1, 5 }, { 0, 0 } }, 0.5):sum():backward()
    assert.is_true(math.abs(a.grad:totable()[1][1] - 2.4142) < 1e-3)   -- (NaN before)
    local d = fp8.dist(fp8.tensor { 1, 2 }, fp8.tensor { 0, 0 }, 3)
    assert.is_true(math.abs(d:item() - 2.0801) < 1e-4)
    assert.are.equal(2, fp8.dist(fp8.tensor { 1, 2 }, fp8.tensor { 0, 0 }, 0):item())
    -- p < 0 was refused until stop 98; torch's (Σ|d|^p)^(1/p), as x:norm's (gaps16_spec.lua); NaN is refused
    assert.is_true(math.abs(fp8.dist(fp8.tensor { 1, 2 }, fp8.tensor { 0, 0 }, -1):item() - 2 / 3) < 1e-6)
    fails_with("dist: p must be a number (math.huge and -math.huge included, NaN not), got ", fp8.dist,
      fp8.tensor { 1 }, fp8.tensor { 0 }, 0 / 0)
  end)
end)

describe("random draws and dropout as torch's", function()
  it("uniform_ never gives its upper bound, in any dtype, and refuses bounds past the dtype's range", function()
    fp8.manual_seed(0)
    local y = fp8.empty({ 100000 }, "bf16"):uniform_(100, 101):float()
    assert.are.equal(0, y:eq(101):sum():item())   -- (a quarter of the draws before)
    assert.is_true(y:min():item() >= 100)
    local x = fp8.empty({ 100000 }):uniform_(1e6, 1e6 + 1)
    assert.is_true(x:max():item() < 1e6 + 1)
    assert.are.equal(0, nn.init.uniform(100000, 2 ^ 24, 2 ^ 24 + 4):eq(2 ^ 24 + 4):sum():item())
    fails_with("uniform_: b = 1e+39 is past fp32's largest value", function() fp8.empty(4):uniform_(0, 1e39) end)
    fails_with("uniform_: b = 70000 is past fp16's largest value", function() fp8.empty(4, "fp16"):uniform_(0, 70000) end)
    fails_with("uniform_: b - a", function() fp8.empty(4):uniform_(-3.4e38, 3.4e38) end)
  end)

  it("nn.init's functions refuse extra arguments (torch's generator= was taken and not used) and a negative gain",
    function()
      local w = fp8.empty(6, 4)
      fails_with("normal_: takes (tensor [, mean=0 [, std=1]]); got 1 more argument", nn.init.normal_, w, 0, 1,
        { generator = 1 })
      fails_with("uniform_: takes", nn.init.uniform_, w, 0, 1, 5)
      fails_with("zeros_: takes (tensor)", nn.init.zeros_, w, { generator = 1 })
      fails_with("uniform: takes", nn.init.uniform, { 3 }, 0, 1, "fp32", { generator = 1 })
      fails_with("xavier_uniform_: gain must be a finite number >= 0, got -1", nn.init.xavier_uniform_, w, -1)
      fails_with("xavier_normal_: gain must be a finite number >= 0, got -1", nn.init.xavier_normal_, w, -1)
    end)

  it("dropout keeps a NaN or an infinity a NaN where it drops it (x·0, as torch's), and names a non-integer id", function()
    local F = fp8.nn.functional
    local y = F.dropout(fp8.tensor { 0 / 0, math.huge, 1 }, 1.0):totable()
    assert.is_true(y[1] ~= y[1] and y[2] ~= y[2])
    assert.are.equal(0, y[3])
    fp8.manual_seed(0)
    local z = F.dropout(fp8.tensor({ 0 / 0 }):expand(64):contiguous(), 0.5)
    assert.are.equal(64, z:isnan():sum():item())
    local m = nn.Embedding(11, 4)
    fails_with("embedding: index 1.5 at position 0 is not a whole number (token ids are integers)", m, fp8.tensor { 1.5 })
  end)

  it("a released tensor's fields raise, so an optimizer or clip_grad_norm_ does not skip a freed parameter", function()
    local m = nn.Linear(3, 2)
    local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
    m(fp8.randn(2, 3)):sum():backward()
    m.weight:free()
    fails_with("released", function() return m.weight.grad end)
    fails_with("released", opt.step, opt)
    fails_with("released", fp8.nn.utils.clip_grad_norm_, m:parameters(), 1)
    local t = fp8.ones(2)
    t:free()
    fails_with('save_file: "a" has been released (freed or closed)', fp8.save_file, { a = t }, os.tmpname())
  end)

  it("an FP8 tensor's clone has a scale of its own: scaling the original leaves the clone as it was", function()
    local q = fp8.tensor { 1, 2, 4 }:quantize("e4m3")
    local c = q:clone()
    require("fp8._optim").scale_(q, 0.5)
    assert.are.same({ 1, 2, 4 }, c:dequantize():totable())
    assert.are.same({ 0.5, 1, 2 }, q:dequantize():totable())
    fails_with("memory_allocated: takes no arguments", fp8.cuda.memory_allocated, "cuda:5")
  end)
end)

describe("train_char_gpt.lua under gradient accumulation", function()
  it("runs --steps optimizer steps when an epoch's end closes a short window, and refuses a huge --sample-len", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local text = dir .. "/small.txt"
    local h = assert(io.open(text, "w"))
    for i = 1, 17 do h:write(("line %d of a small text\n"):format(i)) end
    h:close()
    -- 7 batches an epoch of 2 micro-batches a step: the 4th window of each epoch is one batch (a step more than
    -- 8 × 2 micro-batches counted for: step 9/8 before)
    local cmd = ("timeout 120 %s scripts/train_char_gpt.lua --text %s --steps 8 --eval-every 1 --block-size 16 "
      .. "--d-model 32 --heads 2 --layers 1 --batch-size 48 --sample-len 0 --eval-windows 8 --csv %s/gas.csv "
      .. "--gradient-accumulation-steps 2 2>&1"):format(FP8LAB_BIN or "build/fp8lab", text, dir)
    local p = io.popen(cmd)
    local out = p:read("a")
    assert(p:close(), out)
    local rows = {}
    for line in io.lines(dir .. "/gas.csv") do rows[#rows + 1] = line end
    assert.are.equal(9, #rows, out)   -- the header and steps 1..8
    assert.are.equal("8,", rows[9]:sub(1, 2))
    p = io.popen(("%s scripts/train_char_gpt.lua --text %s --steps 1 --sample-len 17000000 2>&1"):format(
      FP8LAB_BIN or "build/fp8lab", text))
    out = p:read("a")
    assert.is_nil(p:close())
    assert.truthy(out:find("--sample-len must be at most 16777215", 1, true), out)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("clamp with two tensor bounds", function()
  it("gives a tie's gradient as torch 2.15's: split where min < max, whole where min == max", function()
    local function T(l) return fp8.tensor(l):requires_grad_() end
    -- torch 2.15: per (min, max), the gradients of x, min and max for x = -1, 0, 0.5, 1, 2
    local want = {
      { 0, 1, { 0, 0.5, 1, 0.5, 0 }, { 1, 0.5, 0, 0, 0 }, { 0, 0, 0, 0.5, 1 } },
      { 1, 1, { 0, 0, 0, 1, 0 }, { 1, 1, 1, 0, 0 }, { 0, 0, 0, 0, 1 } },
      { 1, 0, { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 }, { 1, 1, 1, 1, 1 } },
    }
    for _, w in ipairs(want) do
      local x, lo, hi = T { -1, 0, 0.5, 1, 2 }, T { w[1], w[1], w[1], w[1], w[1] }, T { w[2], w[2], w[2], w[2], w[2] }
      x:clamp(lo, hi):sum():backward()
      assert.are.same(w[3], x.grad:totable())
      assert.are.same(w[4], lo.grad:totable())
      assert.are.same(w[5], hi.grad:totable())
    end
  end)
end)
