-- rnn.lua — torch's recurrent layers: RNN, LSTM and GRU (several layers, bidirectional, dropout between layers,
-- batch_first, LSTM's proj_size) and their cells RNNCell, LSTMCell and GRUCell. Built of differentiable ops: each
-- layer's input projections for every step in one GEMM (x·W_ihᵀ + b_ih), then a loop over time of the hidden
-- projection (h·W_hhᵀ + b_hh) and the gates, as torch's CPU cells compute them:
--   RNN:  h' = tanh (or relu)(x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh)
--   LSTM: i, f, g, o = chunks of the sum; c' = σ(f)·c + σ(i)·tanh(g); h' = σ(o)·tanh(c') (then ·W_hrᵀ with proj_size)
--   GRU:  r = σ(x_r + h_r), z = σ(x_z + h_z), n = tanh(x_n + r·h_n); h' = (h - n)·z + n
-- Parameters carry torch's names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0, and _reverse
-- for the backward direction), shapes and init U(-1/√hidden_size, 1/√hidden_size), so state dicts load both ways.
-- LSTM returns (output, {h_n, c_n}) and takes its state as {h_0, c_0}, torch's tuple; LSTMCell returns h', c'.
-- Under every FP8 recipe these stay in high precision (recipes convert Linear layers only).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local init = require "fp8.nn.init_fns"
local stack = require("fp8.tensor").stack

local M = {}
local strip = select(2, require("fp8.errfmt").public_of("rnn.lua"))

local GATES = { RNN = 1, LSTM = 4, GRU = 3 }

-- gi[T, ...] as its T steps, one node for all: the backward stacks the steps' gradients once. gi:select(1, t) at each
-- step made T nodes whose backwards each gave a zero tensor of gi's whole size with one step filled, which the engine
-- added up: quadratic in T (an LSTM of 64 steps spent half its backward there)
local function selects(x)
  local out = {}
  for t = 1, x:size(1) do out[t] = x:select(1, t) end
  return out
end
local Steps
local function steps_of(gi)
  if not gi:requires_grad() or not fp8.is_grad_enabled() then return selects(gi) end
  Steps = Steps or require("fp8.autograd").Function {
    name = "RNNSteps",
    forward = function(_, x) return table.unpack(selects(x)) end,
    backward = function(_, ...) return stack({ ... }, 1) end,
  }
  return table.pack(Steps.apply(gi))
end

local function positive(name, what, v)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(name, what, O.got(v)), 0)
  end
end

-- one step of a cell: gi the input's projection for this step (x·W_ihᵀ + b_ih), h (and c) the state
local function step(kind, act, gi, h, c, w_hh, b_hh, w_hr)
  local gh = F.linear(h, w_hh, b_hh)
  if kind == "RNN" then return act(gh + gi) end
  if kind == "LSTM" then
    local i, f, g, o = (gh + gi):chunk(4, -1)
    local c2 = f:sigmoid() * c + i:sigmoid() * g:tanh()
    local h2 = o:sigmoid() * c2:tanh()
    if w_hr ~= nil then h2 = F.linear(h2, w_hr) end
    return h2, c2
  end
  local ri, zi, ni = gi:chunk(3, -1)
  local rh, zh, nh = gh:chunk(3, -1)
  local r, z = (rh + ri):sigmoid(), (zh + zi):sigmoid()
  local n = (ni + nh * r):tanh()
  return (h - n) * z + n
end

local function activation(name, nonlinearity)
  if nonlinearity == nil or nonlinearity == "tanh" then return function(x) return x:tanh() end, "tanh" end
  if nonlinearity == "relu" then return function(x) return x:relu() end, "relu" end
  error(("%s: nonlinearity must be \"tanh\" or \"relu\", got %s"):format(name, O.got(nonlinearity)), 0)
end

-- a cell's parameters under torch's names (sfx: "" for a cell, "_l0", "_l1_reverse", ... for a layer): weight_ih
-- [rows, inputs], weight_hh [rows, hidden] and, with bias, bias_ih and bias_hh [rows], all U(-k, k)
local function register_cell(self, sfx, rows, inputs, hidden, bias, k)
  self:register_parameter("weight_ih" .. sfx, init.uniform({ rows, inputs }, -k, k))
  self:register_parameter("weight_hh" .. sfx, init.uniform({ rows, hidden }, -k, k))
  if bias then
    self:register_parameter("bias_ih" .. sfx, init.uniform({ rows }, -k, k))
    self:register_parameter("bias_hh" .. sfx, init.uniform({ rows }, -k, k))
  end
end

local function check_input(self, name, x)
  if not fp8.is_tensor(x) then Module._forward_error(self, ("expected a tensor input, got %s"):format(O.got(x))) end
  if x:is_fp8() then error(("%s: %s tensor: dequantize it first"):format(name, x:dtype()), 0) end
end

-- ---- the cells ---------------------------------------------------------------------------------

local function cell_class(name, kind)
  local cls = Module.class(name)
  local keys = kind == "RNN" and { "input_size", "hidden_size", "bias", "nonlinearity" }
    or { "input_size", "hidden_size", "bias" }
  cls["__init"] = function(self, input_size, hidden_size, bias, nonlinearity, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, kind == "RNN" and "(input_size, hidden_size [, bias [, nonlinearity]])"
        or "(input_size, hidden_size [, bias])", ...)
      if type(input_size) == "table" then
        if hidden_size ~= nil then error(("%s: pass the sizes and options as one table or as arguments, not both")
          :format(name), 0) end
        local o = O.check(name, input_size, keys)
        input_size, hidden_size, bias, nonlinearity = o.input_size, o.hidden_size, o.bias, o.nonlinearity
      elseif type(bias) == "table" then
        if nonlinearity ~= nil then error(("%s: pass the options as one table"):format(name), 0) end
        local o = O.check(name, bias, { table.unpack(keys, 3) })
        bias, nonlinearity = o.bias, o.nonlinearity
      end
      if kind ~= "RNN" and nonlinearity ~= nil then
        error(("%s: takes (input_size, hidden_size [, bias]), got a fourth argument %s"):format(name,
          O.got(nonlinearity)), 0)
      end
      positive(name, "input_size", input_size)
      positive(name, "hidden_size", hidden_size)
      if bias == nil then bias = true end
      if type(bias) ~= "boolean" then error(("%s: bias must be a boolean, got %s"):format(name, O.got(bias)), 0) end
      local _, nl = activation(name, nonlinearity)
      local G = GATES[kind]
      Module._check_size(name, 3, "gates * hidden_size * (input_size + hidden_size)", G * hidden_size,
        input_size + hidden_size)
      self.input_size, self.hidden_size, self.nonlinearity = input_size, hidden_size, kind == "RNN" and nl or nil
      register_cell(self, "", G * hidden_size, input_size, hidden_size, bias, 1 / math.sqrt(hidden_size))
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  -- forward(input [N, input_size] or [input_size] [, hx]): hx a tensor [N, hidden_size] (zeros by default); LSTMCell's
  -- {h, c}. Returns h' (LSTMCell: h', c').
  cls.forward = function(self, x, hx)
    check_input(self, name, x)
    local H = self.hidden_size
    if (x:dim() ~= 1 and x:dim() ~= 2) or x:size(-1) ~= self.input_size then
      Module._forward_error(self, ("expected input [N, %d] or [%d], got %s"):format(self.input_size,
        self.input_size, x:shape_str()))
    end
    local unb = x:dim() == 1
    if unb then x = x:unsqueeze(1) end
    local N = x:size(1)
    local function state(t, what)
      if t == nil then return fp8.zeros({ N, H }, { dtype = x:dtype(), device = x:device() }) end
      if not fp8.is_tensor(t) then error(("%s must be a tensor, got %s"):format(what, O.got(t)), 0) end
      local want = unb and { H } or { N, H }
      local shape = t:shape()
      if #shape ~= #want or shape[1] ~= want[1] or shape[2] ~= want[2] then
        error(("%s must be [%s] for an input %s, got %s"):format(what, table.concat(want, ", "),
          unb and ("[%d]"):format(self.input_size) or x:shape_str(), t:shape_str()), 0)
      end
      return unb and t:unsqueeze(1) or t
    end
    local h, c
    if kind == "LSTM" then
      if hx ~= nil and (type(hx) ~= "table" or getmetatable(hx) ~= nil or rawlen(hx) ~= 2) then
        error(("hx must be a list {h, c} of two tensors, got %s"):format(O.got(hx)), 0)
      end
      h, c = state(hx and hx[1], "h"), state(hx and hx[2], "c")
    else
      h = state(hx, "hx")
    end
    local gi = F.linear(x, self.weight_ih, self.bias_ih)
    local h2, c2 = step(kind, activation(name, self.nonlinearity), gi, h, c, self.weight_hh, self.bias_hh)
    if unb then h2 = h2:squeeze(1); if c2 then c2 = c2:squeeze(1) end end
    if kind == "LSTM" then return h2, c2 end
    return h2
  end
  cls.extra_repr = function(self)
    return ("%d, %d%s%s"):format(self.input_size, self.hidden_size, self.bias_ih == nil and ", bias=False" or "",
      self.nonlinearity and self.nonlinearity ~= "tanh" and ", nonlinearity=" .. self.nonlinearity or "")
  end
  return cls
end
M.RNNCell = cell_class("RNNCell", "RNN")
M.LSTMCell = cell_class("LSTMCell", "LSTM")
M.GRUCell = cell_class("GRUCell", "GRU")

-- ---- the layers --------------------------------------------------------------------------------

-- RNN / LSTM / GRU(input_size, hidden_size [, {num_layers=1, nonlinearity="tanh" (RNN), bias=true,
-- batch_first=false, dropout=0, bidirectional=false, proj_size=0 (LSTM)}]) (or one table with every name)
local function layer_class(name, kind)
  local cls = Module.class(name)
  local keys = { "input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional" }
  if kind == "RNN" then keys[#keys + 1] = "nonlinearity" end
  if kind == "LSTM" then keys[#keys + 1] = "proj_size" end
  cls["__init"] = function(self, input_size, hidden_size, opts, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, "(input_size, hidden_size [, {options}])", ...)
      if type(input_size) == "table" then
        if hidden_size ~= nil then error(("%s: pass the sizes and options as one table or as arguments, not both")
          :format(name), 0) end
        opts = O.check(name, input_size, keys)
        input_size, hidden_size = opts.input_size, opts.hidden_size
      else
        opts = O.check(name, opts, { table.unpack(keys, 3) })
      end
      positive(name, "input_size", input_size)
      positive(name, "hidden_size", hidden_size)
      local L = opts.num_layers or 1
      -- (bounded as the encoder stacks' num_layers: each layer is a loop here, and num_layers = 2^62 built layers
      -- for ever, each one small enough for the size check below; sweep 111)
      if math.type(L) ~= "integer" or L < 1 or L > 4096 then
        error(("%s: num_layers must be an integer in 1..4096, got %s"):format(name, O.got(L)), 0)
      end
      local bias = opts.bias
      if bias == nil then bias = true end
      for what, v in pairs { bias = bias, batch_first = opts.batch_first, bidirectional = opts.bidirectional } do
        if v ~= nil and type(v) ~= "boolean" then
          error(("%s: %s must be a boolean, got %s"):format(name, what, O.got(v)), 0)
        end
      end
      local p = opts.dropout or 0
      if type(p) ~= "number" or not (p >= 0 and p <= 1) then
        error(("%s: dropout must be a probability in [0, 1], got %s"):format(name, O.got(p)), 0)
      end
      if p > 0 and L == 1 then   -- torch warns and drops it; here it is refused
        error(("%s: dropout acts between layers, so it needs num_layers > 1 (got dropout=%s with one layer)")
          :format(name, tostring(p)), 0)
      end
      local P = opts.proj_size or 0
      if math.type(P) ~= "integer" or P < 0 then
        error(("%s: proj_size must be an integer >= 0, got %s"):format(name, O.got(P)), 0)
      end
      if P >= hidden_size then
        error(("%s: proj_size %d must be smaller than hidden_size %d (torch's rule)"):format(name, P, hidden_size), 0)
      end
      local _, nl = activation(name, opts.nonlinearity)
      self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, L
      self.bias, self.batch_first, self.dropout = bias, opts.batch_first == true, p
      self.bidirectional, self.proj_size = opts.bidirectional == true, P
      self.nonlinearity = kind == "RNN" and nl or nil
      local G, D = GATES[kind], self.bidirectional and 2 or 1
      local Hout = P > 0 and P or hidden_size
      local k = 1 / math.sqrt(hidden_size)
      for layer = 0, L - 1 do
        local inp = layer == 0 and input_size or Hout * D
        Module._check_size(name, 3, "gates * hidden_size * (layer input + hidden_size)", G * hidden_size, inp + Hout)
        for dir = 0, D - 1 do
          local sfx = ("_l%d%s"):format(layer, dir == 1 and "_reverse" or "")
          register_cell(self, sfx, G * hidden_size, inp, Hout, bias, k)
          if P > 0 then self:register_parameter("weight_hr" .. sfx, init.uniform({ P, hidden_size }, -k, k)) end
        end
      end
    end, ...)
    if not ok then error(strip(err), 3) end
  end

  -- forward(input [T, N, input_size] ([N, T, ...] with batch_first) or unbatched [T, input_size] [, hx]): hx
  -- [num_layers·D, N, H_out] (zeros by default; LSTM's {h_0, c_0}, c_0 [num_layers·D, N, hidden_size]). Returns
  -- output [T, N, D·H_out] and h_n (LSTM: {h_n, c_n}).
  cls.forward = function(self, x, hx)
    check_input(self, name, x)
    local I, H, L = self.input_size, self.hidden_size, self.num_layers
    local D = self.bidirectional and 2 or 1
    local Hout = self.proj_size > 0 and self.proj_size or H
    if (x:dim() ~= 2 and x:dim() ~= 3) or x:size(-1) ~= I then
      Module._forward_error(self, ("expected input [T, N, %d]%s or unbatched [T, %d], got %s"):format(I,
        self.batch_first and " (batch_first: [N, T, " .. I .. "])" or "", I, x:shape_str()))
    end
    local unb = x:dim() == 2
    if unb then x = x:unsqueeze(2)
    elseif self.batch_first then x = x:transpose(1, 2) end
    local T, N = x:size(1), x:size(2)
    if T == 0 then error(("expected a sequence of at least one step, got %s"):format(x:shape_str()), 0) end
    local function state(t, what, size)
      if t == nil then return fp8.zeros({ L * D, N, size }, { dtype = x:dtype(), device = x:device() }) end
      if not fp8.is_tensor(t) then error(("%s must be a tensor, got %s"):format(what, O.got(t)), 0) end
      local want = unb and { L * D, size } or { L * D, N, size }
      local shape, same = t:shape(), #t:shape() == #want
      for i = 1, #want do same = same and shape[i] == want[i] end
      if not same then
        error(("%s must be [%s] (num_layers · directions%s, hidden), got %s"):format(what, table.concat(want, ", "),
          unb and "" or ", batch", t:shape_str()), 0)
      end
      return unb and t:unsqueeze(2) or t
    end
    local h0, c0
    if kind == "LSTM" then
      if hx ~= nil and (type(hx) ~= "table" or getmetatable(hx) ~= nil or rawlen(hx) ~= 2) then
        error(("hx must be a list {h_0, c_0} of two tensors, got %s"):format(O.got(hx)), 0)
      end
      h0, c0 = state(hx and hx[1], "h_0", Hout), state(hx and hx[2], "c_0", H)
    else
      h0 = state(hx, "hx", Hout)
    end
    local act = activation(name, self.nonlinearity)
    local hn, cn = {}, {}
    local layer_in = x
    for layer = 0, L - 1 do
      local outs = {}
      for dir = 0, D - 1 do
        local sfx = ("_l%d%s"):format(layer, dir == 1 and "_reverse" or "")
        local idx = layer * D + dir + 1
        local gi = F.linear(layer_in, self["weight_ih" .. sfx], self["bias_ih" .. sfx])   -- [T, N, G·H], all steps
        local w_hh, b_hh, w_hr = self["weight_hh" .. sfx], self["bias_hh" .. sfx], self["weight_hr" .. sfx]
        local h, c = h0:select(1, idx), c0 and c0:select(1, idx)
        local steps, gis = {}, steps_of(gi)
        for s = 1, T do
          local t = dir == 0 and s or T - s + 1
          h, c = step(kind, act, gis[t], h, c, w_hh, b_hh, w_hr)
          steps[t] = h
        end
        outs[dir + 1] = stack(steps, 1)
        hn[idx], cn[idx] = h, c
      end
      layer_in = D == 2 and fp8.cat(outs, 3) or outs[1]
      if layer < L - 1 and self.dropout > 0 and self.training then
        layer_in = F.dropout(layer_in, self.dropout, true)
      end
    end
    local out = layer_in
    local h_n, c_n = stack(hn, 1), kind == "LSTM" and stack(cn, 1) or nil
    if unb then
      out, h_n = out:squeeze(2), h_n:squeeze(2)
      if c_n then c_n = c_n:squeeze(2) end
    elseif self.batch_first then
      out = out:transpose(1, 2)
    end
    if kind == "LSTM" then return out, { h_n, c_n } end
    return out, h_n
  end
  -- torch's cuDNN weight compaction; the parameters here are used as they are, so there is nothing to do
  cls.flatten_parameters = function(self, ...)
    require("fp8.opts").no_more(name .. ":flatten_parameters", "no arguments", ...)
    return self
  end
  cls.extra_repr = function(self)
    local s = ("%d, %d"):format(self.input_size, self.hidden_size)
    if self.proj_size > 0 then s = s .. ", proj_size=" .. self.proj_size end
    if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
    if self.nonlinearity and self.nonlinearity ~= "tanh" then s = s .. ", nonlinearity=" .. self.nonlinearity end
    if not self.bias then s = s .. ", bias=False" end
    if self.batch_first then s = s .. ", batch_first=True" end
    if self.dropout ~= 0 then s = s .. ", dropout=" .. self.dropout end
    if self.bidirectional then s = s .. ", bidirectional=True" end
    return s
  end
  return cls
end
M.RNN = layer_class("RNN", "RNN")
M.LSTM = layer_class("LSTM", "LSTM")
M.GRU = layer_class("GRU", "GRU")

return M
