-- busted.lua — runs the busted specs inside fp8lab: `build/fp8lab tests/busted.lua tests/spec [busted options]`.
-- Specs see the global FP8LAB_BIN (the binary running them) so they can spawn it.
package.path = "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;" .. package.path
package.cpath = "/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;" .. package.cpath

-- The interpreter is the most negative index of arg (options come between it and arg[0]).
local lo = 0
while arg[lo - 1] do lo = lo - 1 end
local bin = arg[lo]
if bin and not bin:find("/") then
  bin = bin  -- found through PATH; spawning by name finds it again
elseif bin and bin:sub(1, 1) ~= "/" then
  bin = (os.getenv("PWD") or ".") .. "/" .. bin
end
FP8LAB_BIN = bin

-- busted reads the global arg: default to the plain output handler so CI logs are readable.
local has_output = false
for i = 1, #arg do if arg[i]:match("^%-o") or arg[i]:match("^%-%-output") then has_output = true end end
if not has_output then table.insert(arg, 1, "--output=plainTerminal") end
if #arg == (has_output and 0 or 1) then arg[#arg + 1] = "tests/spec" end

require("busted.runner")({ standalone = false })
-- busted exits by itself on failures; reaching here means every test passed.
os.exit(0)
