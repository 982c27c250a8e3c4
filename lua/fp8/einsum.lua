-- einsum.lua — fp8.einsum(equation, a, b, ...): torch.einsum, made of differentiable views, sums and batched
-- matrix products, so gradients reach every operand. The equation is torch's: subscripts a-z and A-Z, one "..."
-- per operand for its leading or inner dims (broadcast across the operands from the right), spaces ignored, an
-- optional "->" and output. Without it the output is "..." then the letters that appear once, A-Z before a-z (torch's
-- order); with it, a "..." left out of the output is summed. A subscript repeated in one operand takes its diagonal
-- ("ii->i", "ii" is the trace); a size-1 dim broadcasts against its subscript's size elsewhere, as torch's.
-- Operands are contracted left to right, two at a time: first each one's subscripts that nothing later needs are
-- summed; then the shared ones still needed are a batch, the other shared ones are contracted, and the rest are
-- rows and columns of one bmm ([batch, rows, shared] × [batch, shared, cols]), as torch's own einsum does without
-- opt_einsum. Under bf16 autocast the products take bf16-rounded operands, as torch's bmm under autocast.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local got = opts.got
local check_live, check_not_fp8 = T._check_live, T._check_not_fp8

local M = {}

local MAX_OPERANDS = 64   -- far beyond any real equation; a list past it is refused before it is read
local MAX_DIMS = 8        -- a tensor's (core/tensor.h's FL_MAX_DIMS)

-- the subscript's own order in an implicit output: A-Z, then a-z (torch numbers them so)
local function label_rank(c)
  local b = c:byte()
  return b <= 90 and b - 65 or b - 97 + 26
end

-- parse(eq, n): {terms = {{items...}, ...}, out = {items...} | nil}; an item is a letter or "..."
local function parse_term(eq, s, first, what)
  local items, i, ell = {}, 1, false
  while i <= #s do
    local c = s:sub(i, i)
    if c:match("%a") then
      items[#items + 1] = c
      i = i + 1
    elseif c == "." then
      if s:sub(i, i + 2) ~= "..." then
        error(("einsum: invalid subscript '.' at index %d of the equation '%s' (an ellipsis is '...')")
          :format(first + i - 1, eq), 0)
      end
      if ell then error(("einsum: %s has more than one ellipsis in '%s'"):format(what, eq), 0) end
      ell = true
      items[#items + 1] = "..."
      i = i + 3
    else
      error(("einsum: invalid subscript %q at index %d of the equation '%s' (subscripts are a-z and A-Z)")
        :format(c, first + i - 1, eq), 0)
    end
  end
  return items
end

local function parse(eq)
  local s = eq:gsub(" ", "")
  local lhs, rhs = s, nil
  local arrow = s:find("->", 1, true)
  if arrow then
    lhs, rhs = s:sub(1, arrow - 1), s:sub(arrow + 2)
    if rhs:find("->", 1, true) then error(("einsum: more than one '->' in '%s'"):format(eq), 0) end
  end
  local terms, pos = {}, 1
  for term in (lhs .. ","):gmatch("([^,]*),") do
    -- (positions in messages count in the equation without its spaces, which is what they show)
    terms[#terms + 1] = parse_term(s, term, pos, ("operand %d's subscripts"):format(#terms + 1))
    pos = pos + #term + 1
  end
  local out = rhs and parse_term(s, rhs, #lhs + 3, "the output") or nil
  return terms, out
end

-- operands: the tensors after the equation, or one list of them
local function operands_of(...)
  local n = select("#", ...)
  local first = ...
  if n == 1 and type(first) == "table" and not core.is_tensor(first) then
    local len = rawlen(first)
    if len > MAX_OPERANDS then
      error(("einsum: %d operands, more than %d"):format(len, MAX_OPERANDS), 0)
    end
    local ops = {}
    for i = 1, len do ops[i] = rawget(first, i) end
    return ops
  end
  if n > MAX_OPERANDS then error(("einsum: %d operands, more than %d"):format(n, MAX_OPERANDS), 0) end
  return { ... }
end

-- One operand's tensor and its subscripts, one per dim: letters, and "." .. k for the k-th of the equation's ellipsis
-- dims (right-aligned across the operands: an operand with fewer ellipsis dims takes the last ones).
local function bind(eq, i, x, items, ell_rank)
  local letters = 0
  for _, it in ipairs(items) do if it ~= "..." then letters = letters + 1 end end
  local nd, has_ell = x:dim(), false
  for _, it in ipairs(items) do if it == "..." then has_ell = true end end
  if (not has_ell and letters ~= nd) or (has_ell and letters > nd) then
    error(("einsum: operand %d has %d dims (%s) but %d subscript%s in '%s'%s"):format(i, nd, x:shape_str(), letters,
      letters == 1 and "" or "s", eq, has_ell and "" or " and no ellipsis"), 0)
  end
  local labels, e = {}, nd - letters
  for _, it in ipairs(items) do
    if it == "..." then
      for k = 1, e do labels[#labels + 1] = "." .. (ell_rank - e + k) end
    else
      labels[#labels + 1] = it
    end
  end
  return labels
end

local function shown(label)
  return label:sub(1, 1) == "." and ("the ellipsis' dim " .. label:sub(2)) or ("subscript " .. label)
end

-- x's diagonal over its dims p < q (one label, the same size): x·I summed over q
local function diagonal(x, p, q)
  local n = x:size(p)
  local shape = {}
  for d = 1, x:dim() do shape[d] = (d == p or d == q) and n or 1 end
  -- (the mask is no bigger than x's own n·n elements per index of its other dims)
  return (x * T.eye(n, { dtype = x:dtype(), device = x:device() }):reshape(shape)):sum(q)
end

-- sum x over the labels not in keep; returns the tensor and its labels
local function sum_out(x, labels, keep)
  local dims, rest = {}, {}
  for d, l in ipairs(labels) do
    if keep[l] then rest[#rest + 1] = l else dims[#dims + 1] = d end
  end
  if #dims == 0 then return x, labels end
  return x:sum(dims), rest
end

local function index_of(labels)
  local at = {}
  for d, l in ipairs(labels) do at[l] = d end
  return at
end

-- Contract a (labels la) with b (labels lb), keeping the labels in keep; returns the product and its labels.
local function contract(a, la, b, lb, keep, at_operand)
  local ia, ib = index_of(la), index_of(lb)
  local batch, shared, left, right = {}, {}, {}, {}
  for _, l in ipairs(la) do
    if ib[l] then
      local na, nb = a:size(ia[l]), b:size(ib[l])
      if keep[l] then
        batch[#batch + 1] = l
      elseif na ~= nb then
        -- a contracted subscript broadcast from size 1: Σ_k a·b_k = a·Σ_k b_k
        if na == 1 then b = b:sum(ib[l], true) else a = a:sum(ia[l], true) end
        batch[#batch + 1] = l   -- both size 1 now: a batch of one, dropped from the result below
      else
        shared[#shared + 1] = l
      end
    else
      left[#left + 1] = l
    end
  end
  for _, l in ipairs(lb) do if not ia[l] then right[#right + 1] = l end end
  -- a batch subscript of size 1 on one side only takes the other's size
  local bshape_a, bshape_b, sizes = {}, {}, {}
  for d, l in ipairs(la) do bshape_a[d] = a:size(d); sizes[l] = a:size(d) end
  for d, l in ipairs(lb) do
    bshape_b[d] = b:size(d)
    if sizes[l] == nil or sizes[l] < b:size(d) then sizes[l] = b:size(d) end
  end
  local expand_a, expand_b = false, false
  for _, l in ipairs(batch) do
    if bshape_a[ia[l]] ~= sizes[l] then bshape_a[ia[l]] = sizes[l]; expand_a = true end
    if bshape_b[ib[l]] ~= sizes[l] then bshape_b[ib[l]] = sizes[l]; expand_b = true end
  end
  if expand_a then a = a:expand(bshape_a) end
  if expand_b then b = b:expand(bshape_b) end
  local order_a, order_b = {}, {}
  for _, g in ipairs { batch, left, shared } do for _, l in ipairs(g) do order_a[#order_a + 1] = l end end
  for _, g in ipairs { batch, shared, right } do for _, l in ipairs(g) do order_b[#order_b + 1] = l end end
  local function prod(list)
    local n = 1
    for _, l in ipairs(list) do n = n * sizes[l] end
    return n
  end
  local function permuted(x, labels, order)
    local at, perm = index_of(labels), {}
    for k, l in ipairs(order) do perm[k] = at[l] end
    local ident = true
    for k = 1, #perm do if perm[k] ~= k then ident = false end end
    return ident and x or x:permute(perm)
  end
  local a3 = permuted(a, la, order_a):reshape { prod(batch), prod(left), prod(shared) }
  local b3 = permuted(b, lb, order_b):reshape { prod(batch), prod(shared), prod(right) }
  local r = a3:matmul(b3)
  local shape, labels = {}, {}
  for _, g in ipairs { batch, left, right } do
    for _, l in ipairs(g) do
      if keep[l] then
        shape[#shape + 1] = sizes[l]
        labels[#labels + 1] = l
      end
    end
  end
  -- the batch subscripts not kept are the broadcast contracted ones, of size 1 now: the reshape drops them
  if #shape > MAX_DIMS then
    error(("einsum: a product of the operands up to operand %d would have %d dims (%s), more than a tensor's %d; "
      .. "split the equation into several calls"):format(at_operand, #shape, table.concat(labels, ""):gsub("%.%d", "."),
      MAX_DIMS), 0)
  end
  if #shape == 0 then return r:reshape {}, labels end
  return r:reshape(shape), labels
end

function M.einsum(eq, ...)
  if type(eq) ~= "string" then
    error(("einsum: expected an equation string first (einsum(\"ij,jk->ik\", a, b)), got %s"):format(got(eq)), 0)
  end
  local ops = operands_of(...)
  local terms, out = parse(eq)
  if #terms ~= #ops then
    error(("einsum: the equation '%s' has subscripts for %d operand%s, got %d tensor%s"):format(eq, #terms,
      #terms == 1 and "" or "s", #ops, #ops == 1 and "" or "s"), 0)
  end
  for i, x in ipairs(ops) do
    if not core.is_tensor(x) then error(("einsum: operand %d must be a tensor, got %s"):format(i, got(x)), 0) end
    check_live("einsum", ("operand %d"):format(i), x)
    check_not_fp8("einsum", x:dtype())
  end
  -- the equation's ellipsis rank: the most dims any operand's "..." stands for
  local ell_rank = 0
  for i, items in ipairs(terms) do
    local letters, has = 0, false
    for _, it in ipairs(items) do if it == "..." then has = true else letters = letters + 1 end end
    if has and ops[i]:dim() - letters > ell_rank then ell_rank = ops[i]:dim() - letters end
  end
  local xs, labels, count, size = {}, {}, {}, {}
  for i, x in ipairs(ops) do
    local ls, here = bind(eq, i, x, terms[i], ell_rank), {}
    for d, l in ipairs(ls) do
      count[l] = (count[l] or 0) + 1
      local n = x:size(d)
      if here[l] and here[l] ~= n then
        error(("einsum: %s repeats in operand %d with sizes %d and %d (a diagonal needs one size)")
          :format(shown(l), i, here[l], n), 0)
      end
      here[l] = n
      if size[l] == nil or size[l] == 1 then
        size[l] = n
      elseif n ~= 1 and n ~= size[l] then
        error(("einsum: %s has size %d in operand %d, which does not broadcast with the size %d seen before")
          :format(shown(l), n, i, size[l]), 0)
      end
    end
    xs[i], labels[i] = x, ls
  end
  -- the output's labels
  local out_labels = {}
  if out then
    local seen = {}
    for _, it in ipairs(out) do
      if it == "..." then
        for k = 1, ell_rank do out_labels[#out_labels + 1] = "." .. k end
      else
        if seen[it] then error(("einsum: output subscript %s appears more than once in '%s'"):format(it, eq), 0) end
        if not count[it] then
          error(("einsum: output subscript %s is not among the operands' subscripts in '%s'"):format(it, eq), 0)
        end
        seen[it] = true
        out_labels[#out_labels + 1] = it
      end
    end
  else
    for k = 1, ell_rank do out_labels[#out_labels + 1] = "." .. k end
    local once = {}
    for l, c in next, count do if c == 1 and l:sub(1, 1) ~= "." then once[#once + 1] = l end end
    table.sort(once, function(p, q) return label_rank(p) < label_rank(q) end)
    for _, l in ipairs(once) do out_labels[#out_labels + 1] = l end
  end
  local in_out = {}
  for _, l in ipairs(out_labels) do in_out[l] = true end
  -- diagonals: a subscript repeated in one operand
  for i = 1, #xs do
    local ls, x = labels[i], xs[i]
    local d = 1
    while d <= #ls do
      local q = nil
      for e = d + 1, #ls do if ls[e] == ls[d] then q = e; break end end
      if q then
        x = diagonal(x, d, q)   -- (one size: checked above)
        table.remove(ls, q)
      else
        d = d + 1
      end
    end
    xs[i] = x
  end
  -- left to right: what the later operands and the output need is kept
  local function needed_after(i)
    local keep = {}
    for l in next, in_out do keep[l] = true end
    for j = i + 1, #xs do for _, l in ipairs(labels[j]) do keep[l] = true end end
    return keep
  end
  local cur, cl = xs[1], labels[1]
  for i = 2, #xs do
    local keep = needed_after(i)
    local keep_a, keep_b = {}, {}
    for l in next, keep do keep_a[l] = true; keep_b[l] = true end
    for _, l in ipairs(labels[i]) do keep_a[l] = true end
    for _, l in ipairs(cl) do keep_b[l] = true end
    local a, la = sum_out(cur, cl, keep_a)
    local b, lb = sum_out(xs[i], labels[i], keep_b)
    cur, cl = contract(a, la, b, lb, keep, i)
  end
  cur, cl = sum_out(cur, cl, in_out)
  -- a size-1 dim of a subscript the output has at a larger size (one operand alone, broadcast by none) stays 1,
  -- as torch's; then the output's order
  local at, perm = index_of(cl), {}
  for k, l in ipairs(out_labels) do perm[k] = at[l] end
  local ident = true
  for k = 1, #perm do if perm[k] ~= k then ident = false end end
  if not ident then cur = cur:permute(perm) end
  -- (one operand in its own order: a view of it, as torch's, not the operand itself)
  for _, x in ipairs(ops) do if rawequal(cur, x) then return require("fp8.tensor")._alias(cur) end end
  return cur
end

-- errors at the caller's line, each named einsum's (an op inside, out of memory in a product, names none)
local einsum = M.einsum
M.einsum = T._at_caller(function(...)
  local r = table.pack(pcall(einsum, ...))
  if r[1] then return r[2] end
  local e = r[2]
  if type(e) == "string" and e:sub(1, 8) ~= "einsum: " then e = "einsum: " .. e:gsub("^[^:\n]*%.lua:%d+: ", "") end
  error(e, 0)
end)
return M
