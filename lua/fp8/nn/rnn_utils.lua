-- rnn_utils.lua — fp8.nn.utils.rnn: torch's pad_sequence(sequences [, {batch_first=false, padding_value=0,
-- padding_side="right"}]) and unpad_sequence(padded, lengths [, {batch_first=false}]), which batch sequences of
-- different lengths for the recurrent layers and undo it. Built of pad, stack and narrow, so gradients flow to each
-- sequence. Packed sequences (pack_padded_sequence) are not offered: the layers here run over padded batches.
local fp8 = require "fp8.core"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"

local M = {}
local public = require("fp8.errfmt").public_of("rnn_utils.lua")

local function impl_pad_sequence(seqs, opts, ...)
  O.no_more("pad_sequence", "(sequences [, {batch_first=, padding_value=, padding_side=}])", ...)
  if type(seqs) ~= "table" or getmetatable(seqs) ~= nil or rawlen(seqs) == 0 then
    error(("pad_sequence: sequences must be a non-empty list of tensors [L, ...], got %s"):format(O.got(seqs)), 0)
  end
  opts = O.check("pad_sequence", opts, { "batch_first", "padding_value", "padding_side" })
  local bf, value, side = opts.batch_first, opts.padding_value or 0, opts.padding_side or "right"
  if bf ~= nil and type(bf) ~= "boolean" then
    error(("pad_sequence: batch_first must be a boolean, got %s"):format(O.got(bf)), 0)
  end
  if type(value) ~= "number" then
    error(("pad_sequence: padding_value must be a number, got %s"):format(O.got(value)), 0)
  end
  if side ~= "right" and side ~= "left" then
    error(("pad_sequence: padding_side must be \"right\" or \"left\", got %s"):format(O.got(side)), 0)
  end
  local first, maxlen = rawget(seqs, 1), 0
  for i = 1, rawlen(seqs) do
    local s = rawget(seqs, i)
    if not fp8.is_tensor(s) or s:dim() < 1 then
      error(("pad_sequence: sequence %d must be a tensor [L, ...], got %s"):format(i, fp8.is_tensor(s)
        and s:shape_str() or O.got(s)), 0)
    end
    if i > 1 then
      local a, b = s:shape(), first:shape()
      local same = #a == #b and s:dtype() == first:dtype()
      for d = 2, #a do same = same and a[d] == b[d] end
      if not same then
        error(("pad_sequence: sequence %d is %s %s, sequence 1 %s %s: all must share the dims after the first and the "
          .. "dtype"):format(i, s:dtype(), s:shape_str(), first:dtype(), first:shape_str()), 0)
      end
    end
    maxlen = math.max(maxlen, s:size(1))
  end
  local padded = {}
  for i = 1, rawlen(seqs) do
    local s = rawget(seqs, i)
    local extra = maxlen - s:size(1)
    if extra > 0 then
      local amounts = {}
      for _ = 2, s:dim() do amounts[#amounts + 1] = 0; amounts[#amounts + 1] = 0 end
      amounts[#amounts + 1] = side == "left" and extra or 0
      amounts[#amounts + 1] = side == "left" and 0 or extra
      s = F.pad(s, amounts, { value = value })
    end
    padded[i] = s
  end
  return require("fp8.tensor").stack(padded, bf and 1 or 2)
end

local function impl_unpad_sequence(padded, lengths, opts, ...)
  O.no_more("unpad_sequence", "(padded_sequences, lengths [, {batch_first=}])", ...)
  if not fp8.is_tensor(padded) or padded:dim() < 2 then
    error(("unpad_sequence: padded_sequences must be a tensor [T, B, ...] ([B, T, ...] with batch_first), got %s")
      :format(fp8.is_tensor(padded) and padded:shape_str() or O.got(padded)), 0)
  end
  opts = O.check("unpad_sequence", opts, { "batch_first" })
  local bf = opts.batch_first
  if bf ~= nil and type(bf) ~= "boolean" then
    error(("unpad_sequence: batch_first must be a boolean, got %s"):format(O.got(bf)), 0)
  end
  local T, B = padded:size(bf and 2 or 1), padded:size(bf and 1 or 2)
  local list = lengths
  if fp8.is_tensor(lengths) then list = lengths:dim() == 1 and lengths:tolist() or nil end
  if type(list) ~= "table" or rawlen(list) ~= B then
    error(("unpad_sequence: lengths must be a list (or a 1-d tensor) of %d lengths, one per sequence, got %s"):format(B,
      O.got(lengths)), 0)
  end
  local out = {}
  for i = 1, B do
    local n = rawget(list, i)
    if math.type(n) == "float" and n == math.floor(n) then n = math.tointeger(n) end
    if math.type(n) ~= "integer" or n < 0 or n > T then
      error(("unpad_sequence: length %d must be an integer in 0..%d, got %s"):format(i, T, O.got(n)), 0)
    end
    local s = padded:select(bf and 1 or 2, i)
    out[i] = s:narrow(1, 1, n)
  end
  return out
end

M.pad_sequence = public(impl_pad_sequence)
M.unpad_sequence = public(impl_unpad_sequence)

return M
