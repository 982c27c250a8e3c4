-- cli.lua — fp8lab sub-commands (`fp8lab env|launch|config|test ...`); lua/main.c calls
-- main(host, cmd, args...) with host = {version, lua, onednn, cuda, readline} and exits with its result.
local M = {}

local function env(host)
  local rows = {
    { "fp8lab", host.version or "?" },
    { "Lua", host.lua or _VERSION },
    { "oneDNN", host.onednn or "not found" },
    { "CUDA", host.cuda and "built in" or "not built in" },
    { "readline", host.readline or "not built in (plain line input)" },
  }
  local fp8 = rawget(_G, "fp8")
  if type(fp8) == "table" and type(fp8.devices) == "function" then
    local ok, d = pcall(fp8.devices)
    if ok and type(d) == "table" then rows[#rows + 1] = { "devices", table.concat(d, ", ") } end
  end
  for _, r in ipairs(rows) do print(string.format("%-9s %s", r[1], r[2])) end
  return 0
end

local function not_yet(name)
  return function()
    io.stderr:write("fp8lab ", name, ": not yet implemented\n")
    return 2
  end
end

M.commands = {
  env = env,
  launch = not_yet("launch"),
  config = not_yet("config"),
  test = not_yet("test"),
}

function M.main(host, cmd, ...)
  local f = M.commands[cmd]
  if not f then
    io.stderr:write("fp8lab: unknown command '", tostring(cmd), "'\n")
    return 1
  end
  return f(host, ...) or 0
end

return M
