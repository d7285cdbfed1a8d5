--- Every answer rlm reads from a server has a size cap: a server that sends without end (or a
-- huge body) ends in a clear error, with memory flat, instead of growing rlm until the OOM
-- killer ends it.
local T = require "support"
local sys = require "rlm.sys"

local tests = {}

-- A server whose every answer is an endless body: chunked, or with a huge Content-Length.
local ENDLESS = [[
import socket, sys, threading
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print("READY http://127.0.0.1:%d" % srv.getsockname()[1], flush=True)
piece = b"x" * 65536
def serve(conn):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head, _, rest = data.partition(b"\r\n\r\n")
        length = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        need = int(length[0].split(b":")[1]) if length else 0
        while len(rest) < need:
            rest += conn.recv(65536)
        if b"/sized" in head.split(b"\r\n")[0]:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 10000000000\r\n\r\n")
            while True:
                conn.sendall(piece)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
        while True:
            conn.sendall(chunk)
    except OSError:
        pass
    finally:
        conn.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]

local function endless_server()
  local path = T.tmpdir() .. "/endless.py"
  assert(sys.write_file(path, ENDLESS))
  return T.server{"/usr/bin/python3", path}
end

-- Runs a Lua script in its own rlm process; returns its output lines and peak memory (kB).
local function run_script(src, env)
  local r = T.run_rlm({"run", T.lua_script(src .. [[

local status = io.open("/proc/self/status"):read("a")
print("peak_kb " .. status:match("VmHWM:%s*(%d+)"))
]])}, {env = env, timeout = 300})
  T.eq(r.code, 0, r.stderr)
  return r.stdout, tonumber(r.stdout:match("peak_kb (%d+)"))
end

tests["rlm.http: an endless answer fails as too_large, memory flat; max_bytes sets the cap"] =
function()
  local server = endless_server()
  local out, peak = run_script(([[
local http = require "rlm.http"
for _, path in ipairs{"/chunked", "/sized"} do
  local res, err = http.request{url = %q .. path, retries = 0, timeout = 120}
  print(path, res, err and err.kind, tostring(err))
end
local res, err = http.request{url = %q .. "/chunked", retries = 0, max_bytes = 1000000}
print("small", res, err and err.kind, tostring(err))
]]):format(server.url, server.url))
  T.contains(out, "/chunked\tnil\ttoo_large\t")
  T.contains(out, "/sized\tnil\ttoo_large\t")
  T.contains(out, "small\tnil\ttoo_large\tthe answer is larger than 1000000 bytes")
  T.contains(out, "/chunked\tnil\ttoo_large\tthe answer is larger than 67108864 bytes")
  T.truthy(peak and peak > 1000 and peak < 160 * 1024, "peak " .. tostring(peak) .. " kB")
end

tests["a model that answers without end: a clear error, peak memory under 100 MB"] = function()
  local server = endless_server()
  local env = sys.environ()
  env.OPENAI_BASE_URL, env.OPENAI_API_KEY = server.url .. "/v1", "sk-test-key-0123456789"
  env.ANTHROPIC_BASE_URL, env.ANTHROPIC_API_KEY = server.url, "sk-test-key-0123456789"
  local out, peak = run_script([[
local llm = require "rlm.llm"
for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
  for _, stream in ipairs{false, true} do
    local res, err = llm.complete{model = model, messages = {{role = "user", content = "hi"}},
                                  max_tokens = 4096, retries = 0, timeout = 120,
                                  on_delta = stream and function() end or nil}
    print(model, stream, res, err and err.kind, tostring(err))
  end
end
]], env)
  for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
    for _, stream in ipairs{"false", "true"} do
      T.contains(out, ("%s\t%s\tnil\ttoo_large\t"):format(model, stream))
    end
  end
  T.contains(out, "the answer is larger than 9437184 bytes, more than its max_tokens can need")
  T.truthy(peak and peak > 1000 and peak < 100 * 1024, "peak " .. tostring(peak) .. " kB")
end

return tests
