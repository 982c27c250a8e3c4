-- sweep119_spec.lua — stop 105's sweep119: take_along_dim broadcasting an empty dim against 1 (torch 2.15 keeps the
-- empty size), messages that no longer run a hostile table's __tostring, and x:_dot naming itself for an FP8 operand.
-- docs/robustness.md, "The hostile sweep, seed 119 (stop 105)".

local U = dofile("tests/spec/helpers/util.lua")

describe("take_along_dim broadcasting, as torch 2.15's", function()
  -- torch.take_along_dim(x, index, dim) by /opt/torch2 (2.15): the shapes below, the values of the non-empty cases
  it("keeps an empty dim met by a size-1 dim empty", function()
    assert.are.same({ 0, 2 }, fp8.zeros { 0, 4 }:take_along_dim(fp8.tensor { { 1, 0 } }, 2):shape())
    assert.are.same({ 1, 0 }, fp8.zeros { 3, 0 }:take_along_dim(fp8.tensor { { 0 } }, 1):shape())
    assert.are.same({ 2, 0 }, fp8.zeros { 1, 4 }:take_along_dim(fp8.zeros { 2, 0 }, 2):shape())
    assert.are.same({ 0, 2 }, fp8.take_along_dim(fp8.zeros { 0, 4 }, fp8.tensor { { 1, 0 } }, 2):shape())
    local x = fp8.zeros { 0, 4 }:requires_grad(true)
    x:take_along_dim(fp8.tensor { { 1, 0 } }, 2):sum():backward()
    assert.are.same({ 0, 4 }, x.grad:shape())
  end)

  it("broadcasts size-1 dims of either as before", function()
    local x = fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    assert.are.same({ { 2 }, { 4 } }, x:take_along_dim(fp8.tensor { { 1 }, { 0 } }, 2):tolist())
    assert.are.same({ { 30 }, { 10 } }, fp8.tensor { { 10, 20, 30 } }:take_along_dim(fp8.tensor { { 2 }, { 0 } }, 2):tolist())
    assert.truthy(U.err_of(x.take_along_dim, x, fp8.zeros { 3, 1 }, 2)
      :find("take_along_dim: the tensor [2, 3] and indices [3, 1] do not broadcast (dim 1)", 1, true))
  end)
end)

describe("a refusal naming a table whose __tostring raises or answers no string", function()
  local function hostile()
    return {
      setmetatable({}, { __tostring = function() return {} end, __name = {} }),
      setmetatable({}, { __tostring = function() error("hostile __tostring") end, __name = "hostile" }),
    }
  end
  -- each message names the function and the table, where luaL_tolstring ran the __tostring: Lua's own
  -- "'__tostring' must return a string", or the value's own error
  it("names it in backward's options, load's mode, a tensor's field and avg_pool's divisor", function()
    for _, V in ipairs(hostile()) do
      local y = fp8.ones { 2 }:requires_grad(true):sum()
      assert.truthy(U.err_of(y.backward, y, { [V] = true }):find("backward: unknown option 'a table'", 1, true))
      assert.truthy(U.err_of(load, "return 1", "chunk", V):find('load: mode must be "t"', 1, true))
      assert.truthy(U.err_of(load, "return 1", "chunk", V):find("got a table", 1, true))
      local t = fp8.ones { 2 }
      assert.truthy(U.err_of(function() t[V] = 1 end):find("cannot set field 'a table' on a tensor", 1, true))
      local NN = require("fp8.core")._nn
      assert.truthy(U.err_of(NN.avg_pool, fp8.ones { 1, 1, 2, 2 }, { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 }, true, V)
        :find("avg_pool: divisor must be an integer >= 0 (0: the count), got a table", 1, true))
    end
    -- other values are shown as before
    assert.truthy(U.err_of(load, "return 1", "chunk", "b"):find('got b', 1, true))
    assert.truthy(U.err_of(require("fp8.core")._nn.avg_pool, fp8.ones { 1, 1, 2, 2 }, { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 },
      true, 1.5):find("got 1.5", 1, true))
  end)
end)

describe("x:_dot with an FP8 operand (stop 104's core op)", function()
  it("names dot, where the mul inside it spoke", function()
    local a, q = fp8.ones { 3 }, fp8.ones { 3 }:quantize("e4m3")
    for _, args in ipairs { { a, q }, { q, a }, { q, q } } do
      local e = U.err_of(args[1]._dot, args[1], args[2])
      assert.truthy(e:find("dot: e4m3 tensor: call :dequantize() first", 1, true), e)
    end
    assert.are.equal(3, a:_dot(a):item())
  end)
end)

describe("help's suggestions for a word longer than every name (the sweep's 1 MB string)", function()
  -- help(('A'):rep(1 << 20)) lowered the word and measured its distance to each of the ~2,000 names: past the sweep's
  -- 5 s limit under ASan. Such a word is near no name (the distance is at least the lengths' difference, above the
  -- limit) and inside none, so no name is measured; the answer is the same.
  it("measures no name and answers as before", function()
    local H = require "fp8.help"
    local config = require "fp8.config"
    local real, calls = config.distance, 0
    config.distance = function(a, b) calls = calls + 1; return real(a, b) end
    local ok, text = pcall(H.text, ("A"):rep(1 << 20))
    local near = H.suggest(("resahpe"):rep(1))
    config.distance = real
    assert.truthy(ok, text)
    assert.are.equal("no help for '" .. ("A"):rep(57) .. "...' (help() lists the sections)", text)
    assert.truthy(calls > 0)   -- the short word was measured
    local long_calls = calls
    calls = 0
    config.distance = function(a, b) calls = calls + 1; return real(a, b) end
    H.suggest(("A"):rep(1 << 20))
    config.distance = real
    assert.are.equal(0, calls)
    assert.are.same({ "Tensor:reshape" }, { near[1] })
    assert.truthy(long_calls > 0)
  end)
end)

describe("a module's register_* and add_module given a name whose __tostring answers no string", function()
  -- the filtered run of the seed-119 sweep (--messages): Dropout:add_module, register_module, register_buffer and
  -- register_parameter raised Lua's "'__tostring' must return a string" from their own refusal
  it("name the method and 'a table'", function()
    local V = setmetatable({}, { __tostring = function() return {} end, __name = {} })
    local m = fp8.nn.Dropout(0.1)
    for _, k in ipairs { "add_module", "register_module", "register_buffer", "register_parameter" } do
      local e = U.err_of(m[k], m, V, nil)
      assert.truthy(e:find(k .. ": name must be a non-empty string without '.', got a table", 1, true), e)
    end
    assert.truthy(U.err_of(m.register_module, m, "a.b", fp8.nn.ReLU())
      :find("register_module: name must be a non-empty string without '.', got a.b", 1, true))
  end)
end)

describe("constructors' and load_state's refusals given a table whose __tostring answers no string", function()
  -- the sampled run of the seed-119 sweep (--messages): Embedding's sizes, GELU's approximate, GPT's sizes and
  -- Accelerator:load_state's strict raised Lua's "'__tostring' must return a string" from their own refusal
  it("name the option and 'a table'", function()
    local V = setmetatable({}, { __tostring = function() return {} end, __name = {} })
    local function has(e, s) assert.truthy(e:find(s, 1, true), e) end
    has(U.err_of(fp8.nn.Embedding, { num_embeddings = V }), "got a table")
    has(U.err_of(fp8.nn.GELU, { approximate = V }), 'GELU: approximate must be "none" or "tanh", got a table')
    has(U.err_of(fp8.nn.GPT, { vocab_size = V }), "GPT: vocab_size must be a positive integer, got a table")
    local acc = fp8.Accelerator()
    has(U.err_of(acc.load_state, acc, { strict = V }), "load_state: strict must be true or false, got a table")
    has(U.err_of(fp8.nn.GELU, { approximate = "x" }), 'GELU: approximate must be "none" or "tanh", got x')
  end)
end)
