-- norm_edges_compare.lua — fp8lab against torch 2.15 over the norms' edge cases (stop 101): prints each record of
-- scripts/gen_norm_edges.py's output where fp8lab differs (values or gradients, zeros by their sign, fp32 to 2e-6,
-- bf16 8e-3, fp16 1e-3 relative), then the count. Run:
--   /opt/torch2/bin/python scripts/gen_norm_edges.py --all > /tmp/norm_edges_all.lua
--   build/fp8lab scripts/norm_edges_compare.lua /tmp/norm_edges_all.lua [op pattern]
local F = fp8.nn.functional
local ref = dofile(arg[1] or "tests/data/norm_edges_torch.lua")
local INPUTS = {
  plain = {{1.5, -2.0, 0.5}, {3.0, 0.25, -4.0}}, zeros = {{0,0,0},{0,0,0}}, somezero = {{0, 2, -1}, {1, -1, 0}},
  nan = {{1, 0/0, -2}, {0.5, 3, 4}}, inf = {{1, math.huge, -2}, {-math.huge, 3, 4}}, one = {{-3}},
}
local function make(name, dt)
  local x = INPUTS[name] and fp8.tensor(INPUTS[name], {dtype = dt}) or fp8.zeros({2, 0}, {dtype = dt})
  return x:requires_grad_(true)
end
local function other(x)
  local vals = {0.5, 1.0, -1.0, 2.0, -0.75, 0.125}
  local n = x:numel(); local t = {}
  for i = 1, n do t[i] = vals[i] end
  return fp8.tensor(n > 0 and t or {}, {dtype = x:dtype()}):reshape(x:shape())
end
local OPS = {
  norm = function(x, p) return x:norm(p) end,
  norm_dim = function(x, p) return x:norm(p, 2) end,
  dist = function(x, p) return x:dist(other(x), p) end,
  cdist = function(x, p) return fp8.cdist(x, other(x), p) end,
  pairwise_distance = function(x, p) return F.pairwise_distance(x, other(x), p) end,
  normalize = function(x, p) return F.normalize(x, {p = p, dim = 2}) end,
  renorm = function(x, p) return x:renorm(p, 1, 1.0) end,
}
local function flat(t) if t:numel() == 0 then return {} end return t:detach():float():reshape({-1}):tolist() end
local TOL = {fp32 = 2e-6, bf16 = 8e-3, fp16 = 1e-3 }
local function same(a, b, tol)
  if a ~= a then return b ~= b end
  if b ~= b then return false end
  if a == b then return a ~= 0 or 1 / a == 1 / b end
  if math.abs(a) == math.huge or math.abs(b) == math.huge then return false end
  return math.abs(a - b) <= tol * math.max(math.abs(a), math.abs(b)) + 1e-30
end
local function lists_same(a, b, tol)
  if #a ~= #b then return false end
  for i = 1, #a do if not same(a[i], b[i], tol) then return false end end
  return true
end
local function show(l) local s = {} for i, v in ipairs(l) do s[i] = ("%.7g"):format(v) end return "{" .. table.concat(s, ",") .. "}" end
local only = arg[2]
local n, bad = 0, 0
for _, r in ipairs(ref) do
  if only and not r.op:match(only) then goto skip end
  if r.op == "norm_dim_upstream" then goto skip end   -- (stop 103's records: loose102_spec reads them)
  n = n + 1
  local p = r.p == "nan" and 0/0 or r.p
  local x = make(r.input, r.dtype)
  local ok, y, g, gerr
  if r.op == "clip_grad_norm_" then
    local w = fp8.nn.Parameter(fp8.zeros(x:shape(), {dtype = x:dtype()}))
    w.grad = x:detach():clone()
    ok, y = pcall(fp8.nn.utils.clip_grad_norm_, {w}, 1.0, p)
    if ok then g = flat(w.grad); y = fp8.is_tensor(y) and y or fp8.tensor(y) end
  else
    ok, y = pcall(OPS[r.op], x, p)
    if ok then
      local ok2, e = pcall(function() y:sum():backward() end)
      if ok2 then g = x.grad and flat(x.grad) or nil else gerr = e end
    end
  end
  local tag = ("%s %s %s p=%s"):format(r.op, r.input, r.dtype, tostring(r.p))
  if r.error then
    if ok then bad = bad + 1; print(tag, "TORCH REFUSES (" .. r.error .. "), fp8lab gives " .. show(flat(y))) end
  elseif not ok then bad = bad + 1; print(tag, "FP8LAB REFUSES: " .. tostring(y):sub(1, 150) .. " torch " .. show(r.y))
  else
    local tol = TOL[r.dtype]
    local yv = flat(y)
    if not lists_same(yv, r.y, tol) then bad = bad + 1; print(tag, "Y", show(yv), "torch", show(r.y)) end
    if r.gerror then
      if g then print(tag, "TORCH GRAD REFUSES (" .. r.gerror .. ") fp8lab " .. show(g)) end
    elseif r.g == nil then
      if g and #g > 0 then print(tag, "G torch none, fp8lab", show(g)) end
    elseif gerr then bad = bad + 1; print(tag, "GRAD ERR " .. tostring(gerr):sub(1, 150))
    elseif not g then bad = bad + 1; print(tag, "G nil, torch", show(r.g))
    elseif not lists_same(g, r.g, tol) then bad = bad + 1; print(tag, "G", show(g), "torch", show(r.g)) end
  end
  ::skip::
end
print(("%d records, %d differ"):format(n, bad))
