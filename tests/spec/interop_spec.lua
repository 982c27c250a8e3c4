-- interop_spec.lua — safetensors files shared with the Python ecosystem. Files written by the Python
-- `safetensors` package (tests/data/safetensors, made by scripts/gen_safetensors_fixtures.py) are read
-- exactly; and, when python3 has safetensors + ml_dtypes + numpy (scripts/install-deps.sh test), a
-- file fp8lab writes is read by the reference parser with every value and FP8 byte checked, then
-- written back by Python and read again by fp8lab.
local C = require "fp8._checkpoint"
local DIR = "tests/data/safetensors"
local DT = { F32 = "fp32", F16 = "fp16", BF16 = "bf16", F8_E4M3 = "e4m3", F8_E5M2 = "e5m2", I64 = "fp32", I32 = "fp32",
             U8 = "fp32", BOOL = "fp32" }

local U = dofile("tests/spec/helpers/util.lua")
local read = U.must_read

local function flat(t, out)
  out = out or {}
  if type(t) == "table" then for _, v in ipairs(t) do flat(v, out) end else out[#out + 1] = t end
  return out
end

local function num(s)
  if s == "inf" then return math.huge elseif s == "-inf" then return -math.huge elseif s:find("nan") then return 0 / 0 end
  return assert(tonumber(s), s)
end

local function hex(v)
  if v ~= v then return "nan" elseif v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  return ("%a"):format(v)
end

local function values(t)
  local v = t:is_fp8() and t:dequantize() or t:to("fp32")
  if t:dim() == 0 then return { v:item() } end
  return flat(v:totable())
end

describe("safetensors files written by the Python package", function()
  local expected = C.json_decode(read(DIR .. "/expected.json"))
  for _, name in ipairs { "all_dtypes", "empty_and_scalar", "metadata_only" } do
    it(name .. ".safetensors reads exactly", function()
      local path = DIR .. "/" .. name .. ".safetensors"
      local got = fp8.load_file(path)
      local want = expected.files[name]
      local n = 0
      for k, e in pairs(want) do
        n = n + 1
        local t = got[k]
        assert.is_not_nil(t, k)
        assert.are.equal(DT[e.dtype], t:dtype(), k)
        assert.same(e.shape, t:shape(), k)
        local vals = values(t)
        assert.are.equal(#e.values, #vals, k)
        for i, s in ipairs(e.values) do
          local w, g = num(s), vals[i]
          if w ~= w then assert.is_true(g ~= g, k .. "[" .. i .. "] NaN")
          else
            assert.are.equal(w, g, ("%s[%d]"):format(k, i))
            assert.are.equal(1 / w > 0, 1 / g > 0, ("%s[%d] sign"):format(k, i))   -- -0.0 stays -0.0
          end
        end
      end
      local keys = 0
      for _ in pairs(got) do keys = keys + 1 end
      assert.are.equal(n, keys)
      local f = fp8.safe_open(path)
      assert.same(expected.metadata[name], f:metadata())
      f:close()
    end)
  end
end)

local function have_python()
  return os.execute("python3 -c 'import safetensors, ml_dtypes, numpy' >/dev/null 2>&1")
end

describe("fp8lab files in the Python package", function()
  it("every dtype fp8lab writes reads back in Python exactly, and Python's rewrite reads back in fp8lab", function()
    if not have_python() then
      pending("python3 with safetensors, ml_dtypes and numpy not found: run scripts/install-deps.sh test")
      return
    end
    local d = os.tmpname()
    os.remove(d)
    assert(C.mkdir(d))
    fp8.manual_seed(11)
    local x = fp8.randn { 3, 5 }
    local t = { f32 = x, f16 = x:to("fp16"), bf16 = x:to("bf16"), scalar = fp8.tensor(-0.0), empty = fp8.zeros { 0, 4 },
                e4m3 = (x * 50):quantize("e4m3", { scale = 4 }), e5m2 = (x * 1000):quantize("e5m2", { scale = 0.5 }),
                rows = x:quantize("e4m3", { axis = 1 }) }
    fp8.save_file(t, d .. "/fp8lab.safetensors", { producer = "fp8lab", note = "h\u{e9}llo" })
    local exp = { tensors = {}, companions = {}, metadata = { producer = "fp8lab", note = "h\u{e9}llo" } }
    for k, v in pairs(t) do
      local e = { dtype = ({ fp32 = "F32", fp16 = "F16", bf16 = "BF16", e4m3 = "F8_E4M3", e5m2 = "F8_E5M2" })[v:dtype()],
                  shape = v:shape(), values = {} }
      for i, val in ipairs(values(v)) do e.values[i] = hex(val) end
      exp.tensors[k] = e
      if v:is_fp8() then
        local axis = v:scale_axis()   -- nil: per tensor; else the (1-based) scaled dimension
        local shape = { 1 }
        if axis then
          shape = {}
          for a = 1, v:dim() do shape[a] = a == axis and v:shape()[a] or 1 end
        end
        exp.companions[k .. "_scale_inv"] = shape
        e.pow2 = axis == nil   -- the per-tensor ones above have power-of-two scales: bytes checkable by re-encoding
      end
    end
    C.write_atomic(d .. "/expected.json", C.json_encode(exp))
    local p = io.popen(("python3 tests/spec/helpers/st_interop.py %s/fp8lab.safetensors %s/expected.json %s/py.safetensors 2>&1")
      :format(d, d, d))
    local out = p:read("a")
    local ok = p:close()
    assert(ok, out)
    local back = fp8.load_file(d .. "/py.safetensors")
    for k, v in pairs(t) do assert.same(values(v), values(back[k]), k) end
    os.execute("rm -rf " .. d)
  end)
end)
