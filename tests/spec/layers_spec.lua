-- layers_spec.lua — docs/architecture.md's "dependencies point one way" (Lua → bindings → core → devices), read
-- from the #include lines: core/ includes no Lua and no CUDA header; only the bindings and the host include lua.h;
-- the devices (core/cpu/, kernels/) include from core/ only the tensor/device interface and the shared maths
-- headers, never a recipe, a layer, the scaling state, the settings or the ops above them.
local U = dofile("tests/spec/helpers/util.lua")

local function files(dir, pattern)
  local p = assert(io.popen(("ls %s"):format(U.q(dir))))
  local out = {}
  for name in p:lines() do if name:match(pattern) then out[#out + 1] = dir .. "/" .. name end end
  p:close()
  assert.is_true(#out > 0, "no files in " .. dir)
  return out
end

local function includes(path)
  local out = {}
  for line in U.must_read(path):gmatch("[^\n]+") do
    local kind, name = line:match('^%s*#%s*include%s*([<"])([^>"]+)[>"]')
    if name then out[#out + 1] = { sys = kind == "<", name = name } end
  end
  return out
end

local function exists(p) local f = io.open(p, "r"); if f then f:close() end; return f ~= nil end

-- "file: include" for every #include of the files matching pattern in dirs that offends(file, include, dir) names
local function offending(dirs, pattern, offends)
  local bad = {}
  for _, dir in ipairs(dirs) do
    for _, f in ipairs(files(dir, pattern)) do
      for _, inc in ipairs(includes(f)) do
        if offends(f, inc, dir) then bad[#bad + 1] = f .. ": " .. inc.name end
      end
    end
  end
  return bad
end

-- what a device may take from core/ (and the NCCL glue dist.h, in kernels/): anything else is a layer above it
local DEVICE_MAY = {}
for _, h in ipairs { "tensor.h", "device.h", "format.h", "error.h", "half_cvt.h", "scale_rule.h", "philox.h",
  "prof_clock.h", "cpu_isa.h", "bf16_x86.h", "fp8_x86.h", "optim.h", "dist.h", "hypot1.h" } do DEVICE_MAY[h] = true end

describe("the layers' includes", function()
  it("core/ includes no Lua header, nothing from lua/ and no CUDA header", function()
    assert.are.same({}, offending({ "core", "core/cpu" }, "%.[ch]$", function(_, inc)
      local n = inc.name
      return n:match("^lua") or n:match("lauxlib") or n:match("^l_") or n:match("%.%./lua/")
        or (inc.sys and (n:match("^cuda") or n:match("^cublas") or n:match("^nccl")))
    end))
  end)

  it("only lua/l_*.c, lua/l_util.h and the host lua/main.c include lua.h", function()
    assert.are.same({}, offending({ "lua" }, "%.[ch]$", function(f, inc)
      return inc.name == "lua.h" and not (f:match("^lua/l_[%w_]+%.[ch]$") or f == "lua/main.c")
    end))
  end)

  it("core/cpu/ and kernels/ take from core/ only the device interface and the shared headers", function()
    assert.are.same({}, offending({ "core/cpu", "kernels" }, "%.[ch]u?h?$", function(_, inc, dir)
      local n = inc.name:gsub("^%.%./", ""):gsub("^core/", "")
      return not inc.sys and not exists(dir .. "/" .. n) and not DEVICE_MAY[n]
    end))
  end)
end)
