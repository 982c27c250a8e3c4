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

describe("safetensors edge cases from a review against the reference implementation", function()
  local d = U.tmpdir()
  local function file(name, header, data)
    local p = d .. "/" .. name
    U.write(p, string.pack("<I8", #header) .. header .. (data or ""))
    return p
  end
  local function fails(needle, f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, needle)
    assert.truthy(tostring(err):find(needle, 1, true), tostring(err))
  end
  it("the writer refuses names and metadata a header cannot hold (a NUL crashed it), and non-UTF-8", function()
    fails('tensor name "a" holds a NUL byte', fp8.save_file, { ["a\0b"] = fp8.ones(2) }, d .. "/x.safetensors")
    fails("metadata value \"a\" holds a NUL byte", fp8.save_file, { w = fp8.ones(2) }, d .. "/x.safetensors", { note = "a\0secret" })
    fails("is not valid UTF-8", fp8.save_file, { ["w\xff"] = fp8.ones(2) }, d .. "/x.safetensors")
    fails("is not valid UTF-8", fp8.save_file, { w = fp8.ones(2) }, d .. "/x.safetensors", { note = "caf\xe9" })
    fp8.save_file({ ["é"] = fp8.ones(2) }, d .. "/ok.safetensors", { note = "café" })
    assert.are.equal("café", fp8.safe_open(d .. "/ok.safetensors"):metadata().note)
  end)
  it("the reader refuses what the reference refuses: non-UTF-8 headers, NUL padding", function()
    fails("the header is not valid UTF-8", fp8.load_file,
      file("u.safetensors", '{"w\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', "\0\0\0\0"))
    fails("only spaces may pad it", fp8.load_file,
      file("n.safetensors", '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\0\0\0', "\0\0\0\0"))
  end)
  it("reads back a per-axis FP8 tensor whose scaled axis has size 1", function()
    for _, c in ipairs { { { { 1, 2, 3, 4 } }, 1 }, { { { 1 }, { 2 }, { 3 } }, 2 } } do
      local q = fp8.tensor(c[1]):quantize("e4m3", { axis = c[2] })
      fp8.save_file({ q = q }, d .. "/axis.safetensors")
      local r = fp8.load_file(d .. "/axis.safetensors").q
      assert.are.equal(c[2], r:scale_axis())
      assert.are.equal(0, (r:dequantize() - q:dequantize()):abs():max():item())
    end
  end)
  it("refuses an I64 value fp32 cannot hold exactly, past 2^53 too", function()
    local p = file("i64.safetensors", '{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}', string.pack("<i8", (1 << 53) + 1))
    fails('"ids" (I64) holds 9007199254740993, which fp32 cannot hold exactly', fp8.load_file, p)
  end)
  it("a named pipe is refused, not waited on; a tensor with 17 dimensions leaves the rest of the file readable", function()
    assert(os.execute("mkfifo " .. U.q(d .. "/fifo")))
    fails("not a regular file", fp8.load_file, d .. "/fifo")
    local shape = ("1,"):rep(16) .. "1"
    local p = file("d17.safetensors", ('{"a":{"dtype":"F32","shape":[%s],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'):format(shape),
      string.pack("<ff", 1, 2))
    local f = fp8.safe_open(p)
    assert.are.same({ "a", "b" }, f:keys())
    assert.are.equal(2, f:get_tensor("b"):item())
    fails('"a" has 17 dimensions; fp8lab tensors have at most 8', f.get_tensor, f, "a")
  end)
  it("safe_open takes {device=} as load_file does: checked, and get_tensor's default", function()
    fp8.save_file({ w = fp8.ones(2) }, d .. "/dev.safetensors")
    fails("safe_open: unknown option 'dev'", fp8.safe_open, d .. "/dev.safetensors", { dev = "cpu" })
    assert.are.equal("cpu", fp8.safe_open(d .. "/dev.safetensors", { device = "cpu" }):get_tensor("w"):device())
    if not require("fp8.cuda").is_available() then
      fails("safe_open: device cuda is not available", fp8.safe_open, d .. "/dev.safetensors", { device = "cuda" })
    end
  end)
  it("many metadata keys and companions: found by name (a duplicate key among 20000 is still caught)", function()
    local parts = {}
    for i = 1, 20000 do parts[i] = ('"k%d":"v"'):format(i) end
    parts[#parts + 1] = '"k7":"again"'
    fails('__metadata__ has the key "k7" twice', fp8.safe_open, file("dup.safetensors", '{"__metadata__":{' .. table.concat(parts, ",") .. '}}'))
  end)
end)
