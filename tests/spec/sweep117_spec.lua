-- sweep117_spec.lua — stop 103's sweep117: gather, scatter, scatter_add, index_fill, index_add and index_copy at 0-d
-- and with an empty index, as torch 2.15's (tests/data/sweep117_torch.lua from scripts/gen_sweep117.py: the result's
-- shape and values, and the gradients of sum(3 * result), or a raise), and take_along_dim's refusal at 0-d; the
-- sweep's one loop (plot._csv_fields given a lying object).
-- docs/robustness.md, "The hostile sweep, the last batches (stop 103)".

local U = dofile("tests/spec/helpers/util.lua")

local function tensor_of(values, shape)
  if #values == 0 then return fp8.zeros(shape) end
  return fp8.tensor(values):reshape(shape)
end

describe("index ops at 0-d and with an empty index, as torch 2.15's", function()
  local cases = dofile("tests/data/sweep117_torch.lua")
  for i, c in ipairs(cases) do
    local what = ("case %d: %s, x %s, dim %d, index %s"):format(i, c.op, type(c.x) == "number" and "0-d" or
      (type(c.x[1]) == "table" and "2-d" or "1-d"), c.dim, "[" .. table.concat(c.index_shape, ", ") .. "]")
    it(what, function()
      local x = fp8.tensor(c.x):requires_grad(true)
      local dim = c.dim >= 0 and c.dim + 1 or c.dim   -- torch's 0-based dim as fp8's 1-based one
      local index = tensor_of(c.index, c.index_shape)
      local src = c.src
      if type(src) == "table" then src = tensor_of(c.src, c.src_shape):requires_grad(true) end
      local function run()
        if c.op == "gather" then return x:gather(dim, index) end
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
      if c.backward_raises then return end   -- torch's own backward raises there: the values only
      ;(r * 3):sum():backward()
      assert.are.same(c.grad, U.grad_of(x))
      assert.are.same(x:shape(), (x.grad or x):shape())
      -- (scatter's src under an empty index has a gradient, zeros, as torch's: the result stays on src's graph)
      if c.src_grad then assert.are.same(c.src_grad, U.grad_of(src)) end
    end)
  end

  it("the function forms and the in-place forms take the same 0-d forms", function()
    assert.are.same(3, fp8.gather(fp8.tensor { 1, 2, 3 }, 1, fp8.tensor(2)):item())
    assert.are.same({ 1, 7, 3 }, fp8.scatter(fp8.tensor { 1, 2, 3 }, 1, fp8.tensor(1), 7):tolist())
    assert.are.same(12, fp8.scatter_add(fp8.tensor(5), 1, fp8.tensor(0), fp8.tensor(7)):item())
    assert.are.same(12, fp8.index_add(fp8.tensor(5), 1, fp8.tensor(0), fp8.tensor(7)):item())
    local t = fp8.tensor(5)
    t:scatter_(1, fp8.tensor(0), 9)
    assert.are.same(9, t:item())
    local u = fp8.tensor { 1, 2, 3 }
    u:index_fill_(-1, fp8.tensor(2), 0)
    assert.are.same({ 1, 2, 0 }, u:tolist())
  end)

  it("names the 0-d rules in its refusals", function()
    local x0, x1 = fp8.tensor(5), fp8.tensor { 1, 2, 3 }
    assert.truthy(U.err_of(x0.gather, x0, 2, fp8.tensor(0))
      :find("gather: dim must be in 1..1 or -1..-1 (a 0-d tensor's one implicit dim), got 2", 1, true))
    assert.truthy(U.err_of(x0.gather, x0, 1, fp8.zeros { 1, 1 })
      :find("gather: the index must have the tensor's number of dims, 1 (a 0-d tensor or index counts as 1-d), "
        .. "got [1, 1]", 1, true))
    assert.truthy(U.err_of(x0.gather, x0, 1, fp8.tensor(1)):find("gather: ", 1, true))
    assert.truthy(U.err_of(x1.scatter, x1, 1, fp8.tensor(0), fp8.zeros { 1, 1 })
      :find("scatter: the index and src must have the tensor's number of dims, 1 (a 0-d tensor, index or src "
        .. "counts as 1-d), got [] and [1, 1]", 1, true))
    assert.truthy(U.err_of(x1.index_fill, x1, 1, fp8.zeros { 1, 1 }, 0)
      :find("index_fill: the index must be 1-d (or 0-d), got [1, 1]", 1, true))
    assert.truthy(U.err_of(x0.index_add, x0, 1, fp8.tensor(0), fp8.tensor { 7 })
      :find("index_add: a 0-d tensor takes a 0-d source (torch's), got [1]", 1, true))
    -- (stop 105: a 0-d source with an index of 2 was named by the [1] it is read as, "got [1]"; torch 2.15: "When
    -- source is scalar, index should have one element (got 2)")
    for _, x in ipairs { x0, x1 } do
      local e = U.err_of(x.index_copy, x, 1, fp8.tensor { 0, 1 }, fp8.tensor(7))
      assert.truthy(e:find("index_copy: a 0-d source (shape []) is one slice: the index must have one element, got 2",
        1, true), e)
      assert.is_nil(e:find("[1]", 1, true), e)
    end
    assert.truthy(U.err_of(x0.take_along_dim, x0, fp8.tensor(0), 1)
      :find("take_along_dim: a 0-d tensor has no dim to take along, got dim 1", 1, true))
    assert.truthy(U.err_of(x0.scatter, x0, 1, fp8.tensor(0), 7, "add")
      :find("scatter: reduce= is not supported", 1, true))
  end)
end)

describe("the sweep's finding (stop 103)", function()
  it("plot._csv_fields given a table whose every key answers a function ends with a refusal", function()
    local V = setmetatable({}, { __index = function() return function() return 1 end end,
      __len = function() return 3 end })
    local ok, err = U.ends(require("fp8.plot")._csv_fields, V)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("plot._csv_fields: expected a line of text, got a table", 1, true), err)
    assert.are.same({ "a", "b c", "" }, require("fp8.plot")._csv_fields('a,"b c",'))
  end)
  it("GradScaler:unscale_ names an optimizer whose parameters() answers no list (the filtered run's message)", function()
    local sc = fp8.amp.GradScaler()
    local e = U.err_of(sc.unscale_, sc, { parameters = function() end })
    assert.truthy(e:find("GradScaler: the optimizer's parameters() must return a list of tensors, got nil", 1, true), e)
  end)
end)
