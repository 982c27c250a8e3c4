-- sweep118_spec.lua — stop 104's sweep118: gather, scatter and scatter_add with torch 2.15's smaller index sizes
-- (an index no larger than the tensor in the dims other than dim, and than src in every dim; a larger one refused
-- by name), and take_along_dim's broadcasting, as tests/data/sweep118_torch.lua (scripts/gen_sweep118.py) gives them:
-- the result's shape and values, and the gradients of sum(3 * result), or a raise.
-- docs/robustness.md, "The hostile sweep, seed 118 (stop 104)".

local U = dofile("tests/spec/helpers/util.lua")

local function shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

describe("gather, scatter and scatter_add with an index smaller than the tensor, as torch 2.15's", function()
  local cases = dofile("tests/data/sweep118_torch.lua")
  for i, c in ipairs(cases) do
    local what = ("case %d: %s, x %s, dim %d, index %s%s"):format(i, c.op, shape_str(c.x_shape), c.dim,
      shape_str(c.index_shape), c.src_shape and (", src " .. shape_str(c.src_shape)) or "")
    it(what, function()
      local x = fp8.tensor(c.x):reshape(c.x_shape):detach():requires_grad(true)
      local dim = c.dim >= 0 and c.dim + 1 or c.dim   -- torch's 0-based dim as fp8's 1-based one
      local index = fp8.tensor(c.index):reshape(c.index_shape)
      local src = c.src
      if type(src) == "table" then src = fp8.tensor(c.src):reshape(c.src_shape):detach():requires_grad(true) end
      local function run()
        if c.op == "gather" then return x:gather(dim, index) end
        if c.op == "take_along_dim" then return x:take_along_dim(index, dim) end
        return x[c.op](x, dim, index, src)
      end
      if c.raises then
        local e = U.err_of(run)
        assert.truthy(e:find(c.op .. ": ", 1, true), e)
        return
      end
      local r = run()
      assert.are.same(c.shape, r:shape())
      assert.are.same(c.values, U.flat(r))
      ;(r * 3):sum():backward()
      assert.are.same(c.grad, U.grad_of(x))
      if c.src_grad then assert.are.same(c.src_grad, U.grad_of(src)) end
    end)
  end

  it("keeps the tensor's dtype and bits around the box, and the function and in-place forms take the same", function()
    local x = fp8.tensor { { -0.0, 1.5, -2.25 }, { 3, -0.0, 0 } }:to("bf16")
    local r = x:scatter(1, fp8.tensor { { 1 } }, fp8.tensor { { 7 } }:to("bf16"))
    assert.are.same("bf16", r:dtype())
    assert.are.same({ 2, 3 }, r:shape())
    -- the values x keeps are its own, -0 included (1 / -0 is -inf)
    assert.are.same(-math.huge, 1 / r:float():tolist()[1][1])
    assert.are.same(-math.huge, 1 / r:float():tolist()[2][2])
    assert.are.same({ { -0.0, 1.5, -2.25 }, { 7, -0.0, 0 } }, r:float():tolist())
    assert.are.same({ { 1, 2 } }, fp8.gather(fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }, 2, fp8.tensor { { 0, 1 } }):tolist())
    assert.are.same({ { 9, 2, 3 }, { 4, 5, 6 } },
      fp8.scatter(fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }, 1, fp8.tensor { { 0 } }, 9):tolist())
    local t = fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    t:scatter_add_(2, fp8.tensor { { 2, 2 } }, fp8.tensor { { 10, 20, 30 } })
    assert.are.same({ { 1, 2, 33 }, { 4, 5, 6 } }, t:tolist())
  end)

  it("names torch's rule when the index is larger", function()
    local x = fp8.zeros { 3, 4 }
    assert.truthy(U.err_of(x.gather, x, 2, fp8.zeros { 4, 2 }):find("gather: index [4, 2] must be no larger than "
      .. "the tensor [3, 4] in every dim but dim 2 (torch's rule), got 4 > 3 at dim 1", 1, true))
    assert.truthy(U.err_of(x.scatter, x, 1, fp8.zeros { 2, 2 }, fp8.ones { 1, 2 }):find("scatter: index [2, 2] must be "
      .. "no larger than the tensor [3, 4] in every dim but dim 1 and no larger than src [1, 2] (torch's rule), got "
      .. "2 > 1 at dim 1", 1, true))
    assert.truthy(U.err_of(x.scatter_add_, x, 1, fp8.zeros { 2, 5 }, fp8.ones { 3, 5 })
      :find("scatter_add_: index [2, 5] must be no larger than the tensor [3, 4]", 1, true))
  end)
end)

describe("an nn class's __init reached directly (stop 103's Left)", function()
  -- the sweep's values given as self: nothing, a number, a plain table, a table whose every key answers 1 (the lying
  -- object), one whose every key answers a function, and a module of another class
  local function selves()
    return {
      { "nil", nil }, { "a number", 5 }, { "a plain table", {} },
      { "the lying object", setmetatable({}, { __len = function() return 1 << 62 end, __index = function() return 1 end }) },
      { "an object of functions", setmetatable({}, { __index = function() return function() return 1 end end }) },
      { "a Linear", fp8.nn.Linear(2, 2) },
    }
  end
  it("is refused by the class's name for every class of fp8.nn, before its body runs", function()
    local names = {}
    for k, v in pairs(fp8.nn) do if type(v) == "table" and rawget(v, "__init") then names[#names + 1] = k end end
    table.sort(names)
    assert.is_true(#names > 100, #names)
    for _, k in ipairs(names) do
      for _, s in ipairs(selves()) do
        if not ((k == "Linear" or k == "Module") and s[1] == "a Linear") then
          local e = U.err_of(fp8.nn[k].__init, s[2], 3, 2)
          local want = ("%s.__init: self must be a %s being built (fp8.nn.%s(...) builds one and runs __init), got ")
            :format(k, k, k)
          assert.truthy(e:find(want, 1, true), k .. " given " .. s[1] .. ": " .. e)
        end
      end
    end
  end)
  it("still runs for the class's own instances, a subclass's and one built by a user's subclass", function()
    assert.are.same({ 3, 2 }, fp8.nn.Linear(2, 3).weight:shape())
    local ok, FP8Linear = pcall(function() return fp8.recipes.FP8Linear end)
    if ok and FP8Linear then assert.are.same({ 3, 2 }, FP8Linear(2, 3, true, { backend = "te" }).weight:shape()) end
    local My = fp8.nn.Module.class("My", fp8.nn.Linear)
    function My:__init(a, b) fp8.nn.Linear.__init(self, a, b); self.extra = 1 end
    local m = My(4, 5)
    assert.are.same({ 5, 4 }, m.weight:shape())
    assert.are.same(1, m.extra)
    -- the arity check reads the body's parameters, not the guard's
    assert.truthy(U.err_of(My, 1, 2, 3):find("My: takes at most 2 arguments, got 3", 1, true))
    -- a user's class is built by calling it, not through fp8.nn
    assert.truthy(U.err_of(My.__init, 5, 1, 2)
      :find("My.__init: self must be a My being built (My(...) builds one and runs __init), got 5", 1, true))
    assert.truthy(U.err_of(fp8.nn.Transformer.__init, setmetatable({}, { __index = function() return 1 end }))
      :find("Transformer.__init: self must be a Transformer being built", 1, true))
  end)
end)

describe("the sweep's findings (stop 104)", function()
  -- a value whose __tostring answers a table (the sweep's value 91): Lua's tostring raises on it
  local function V() return setmetatable({}, { __tostring = function() return {} end, __name = {} }) end
  it("fp8.hist names a format that is not a string", function()
    local hist = require("fp8.hist")
    assert.truthy(U.err_of(hist, fp8.ones { 2, 3 }, V())
      :find("bad argument #2 to 'hist' (expected \"e4m3\" or \"e5m2\", got a table", 1, true))
    assert.truthy(U.err_of(hist, fp8.ones { 2, 3 }:quantize("e4m3"), V())
      :find("hist: the tensor is already e4m3, got format 'a table", 1, true))
    assert.truthy(U.err_of(hist, fp8.ones { 2, 3 }, "bf16"):find("got bf16)", 1, true))
  end)
  it("plot.fp8_history names a csv that is not a file name", function()
    local e = U.err_of(require("fp8.plot").fp8_history, { csv = V() })
    assert.truthy(e:find("fp8_history: csv must be a file name, got a table", 1, true), e)
  end)
end)
