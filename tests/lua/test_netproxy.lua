--- A network that carries keys without handing them over (network = {allow = {...}}): code
-- reaches an allowed host through the driver's proxy and gets an answer made with the key,
-- which the host adds; the key is in no output, trajectory record, event or sandbox file, an
-- upstream that echoes it back is redacted, every other host is refused, https through the
-- proxy is refused with a hint, and the sandbox still has no network of its own. Run as root
-- and as uid 65534 (make isolation), and on the Daytona stand-in.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

local KEY = "sk-search-7f3c9e1d5b2a4680"
local VAR = "RLM_TEST_SEARCH_KEY"

-- The keyed stand-in upstream, and the key in the host's environment for this test.
local function upstream()
  local s = T.server{"tests/standins/keyed_api", "--key", KEY}
  local old = sys.getenv(VAR)
  sys.setenv(VAR, KEY)
  T.defer(function() sys.setenv(VAR, old) end)
  return s
end

local function network(s, extra)
  local allow = {["search.example"] = {upstream = s.url, price = 0.01,
                                       headers = {Authorization = "Bearer ${" .. VAR .. "}"}}}
  for k, v in pairs(extra or {}) do allow[k] = v end
  return {allow = allow}
end

local function stats(s)
  return json.decode(assert(require("rlm.http").request{url = s.url .. "/_stats"}).body)
end

-- The code: through the proxy (urllib, which reads HTTP_PROXY like most clients), then the
-- ways around it. Each line is "label: what happened".
local function probe_code(port)
  return ([[
import json, os, socket, urllib.request, urllib.error
def show(label, f):
    try:
        print(label + ':', f())
    except urllib.error.HTTPError as e:
        print(label + ': HTTP', e.code, e.read().decode()[:300])
    except Exception as e:
        print(label + ': failed', type(e).__name__, str(e)[:300])
def get(url, headers=None, data=None):
    req = urllib.request.Request(url, headers=headers or {}, data=data)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode()
show('search', lambda: get('http://search.example/search?q=rlm'))
show('echo', lambda: get('http://search.example/echo', {'Authorization': 'Bearer mine', 'X-Mine': 'kept'}, b'posted body'))
show('echo headers', lambda: dict(urllib.request.urlopen('http://search.example/echo', timeout=30).headers))
show('other', lambda: get('http://other.example/search?q=x'))
show('https', lambda: get('https://search.example/search?q=x'))
show('direct', lambda: socket.create_connection(('127.0.0.1', %d), timeout=5))
no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
show('unproxied', lambda: no_proxy.open('http://search.example/search?q=x', timeout=5).status)
if os.path.exists('/usr/bin/curl'):
    import subprocess
    show('curl', lambda: subprocess.run(['curl', '-s', 'http://search.example/search?q=curl'],
                                        capture_output=True, text=True, timeout=60).stdout[:40])
print('env has key:', any('%s' in v for v in os.environ.values()))
print('proxy env:', os.environ.get('HTTP_PROXY', '').startswith('http://127.0.0.1:'))
]]):format(port, KEY)
end

local function port_of(url) return tonumber(url:match(":(%d+)$")) end

-- What every backend must show for the probe's output.
local function check_probe(out)
  T.contains(out, 'search: (200, \'{"query": "rlm", "results": [{"title": "rlm result 1"',
             "an answer made with the key")
  T.contains(out, '"authorization": "Bearer [redacted]"', "the key the upstream echoed is redacted")
  T.truthy(not out:find("Bearer mine", 1, true), "the code's own Authorization is replaced")
  T.contains(out, '"x-mine": "kept"', "the code's other headers go through")
  T.contains(out, '"body": "posted body"', "the body goes through")
  T.contains(out, "'x-seen-authorization': 'Bearer [redacted]'", "echoed in a header: redacted")
  T.contains(out, "other: HTTP 403 rlm: other.example is not in the run's network allow list",
             "another host is refused")
  T.contains(out, "https: failed URLError", "https through the proxy is refused")
  T.contains(out, "use http://search.example/", "with the way that works")
  T.contains(out, "direct: failed", "no network of its own")
  T.contains(out, "unproxied: failed", "no way around the proxy")
  T.contains(out, "env has key: False")
  T.contains(out, "proxy env: True")
  T.truthy(not out:find(KEY, 1, true), "the key is in no output")
  if io.open("/usr/bin/curl") then
    T.contains(out, 'curl: {"query": "curl", "results"', "a subprocess's client goes through it too")
  end
end

-- Every file of the sandbox the code can write, and every process's environment there.
local GREP = ([[
import os
hits = []
for top in ('/home/daytona', '/tmp'):
    for d, _, files in os.walk(top):
        for f in files:
            try:
                with open(os.path.join(d, f), 'rb') as fh:
                    if b'%s' in fh.read():
                        hits.append(os.path.join(d, f))
            except OSError:
                pass
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            with open('/proc/%%s/environ' %% pid, 'rb') as fh:
                if b'%s' in fh.read():
                    hits.append('/proc/%%s/environ' %% pid)
        except OSError:
            pass
print('files with key:', hits)
]]):format(KEY, KEY)

local function probe_interpreter(backend_opts)
  local s = upstream()
  local opts = {network = network(s)}
  for k, v in pairs(backend_opts or {}) do opts[k] = v end
  local interp <close> = rlm.interpreter(opts)
  local _, run = interp:execute(probe_code(port_of(s.url)))
  T.eq(run.error, nil, run.traceback)
  check_probe(run.stdout)
  local _, grep = interp:execute(GREP)
  T.contains(grep.stdout, "files with key: []", "the key is in no sandbox file")
  local st = stats(s)
  -- search, echo, echo headers (and curl's): with the key; nothing else reached the upstream
  -- but this look
  local curl = io.open("/usr/bin/curl") and 1 or 0
  T.eq(st.keyed, 3 + curl, json.encode(st))
  T.eq(st.requests, 4 + curl, json.encode(st))
  -- what the backend was given: no network (local: --unshare-net; Daytona: network_block_all)
  T.eq(interp.opts.network, false)
end

tests["local: an allowed host answers with the key; the key never reaches the code"] = function()
  probe_interpreter()
end

tests["rlm.run: http calls counted and recorded, the key in no record, event or output"] = function()
  local s = upstream()
  local code = [[
import urllib.request, urllib.error
with urllib.request.urlopen('http://search.example/search?q=cats') as r:
    found = r.read().decode()
with urllib.request.urlopen('http://search.example/echo') as r:
    echoed = r.read().decode()
try:
    urllib.request.urlopen('http://evil.example/steal')
except urllib.error.HTTPError as e:
    refused = e.code
print(found, echoed, refused)
SUBMIT(answer=found + echoed)
]]
  local model = F.model{rules = {{match = "Task: keyed", reply = F.code(code)}}}
  local dir = T.tmpdir()
  local path = dir .. "/t.jsonl"
  local events = {}
  local res = rlm.run{task = "keyed", context = "x", network = network(s), trace = path,
                      max_iterations = 1, on_event = function(e) events[#events + 1] = json.encode(e) end}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.contains(res.answer, "cats result 1")
  T.contains(res.answer, "Bearer [redacted]")
  T.truthy(not res.answer:find(KEY, 1, true), "not in the answer")
  local text = assert(sys.read_file(path))
  T.truthy(not text:find(KEY, 1, true), "the key is in no trajectory record")
  T.truthy(not table.concat(events, "\n"):find(KEY, 1, true), "nor in any event")
  local http = {}
  for _, r in ipairs(assert(trace.read(path))) do
    if r.type == "subcall" and r.kind == "http" then http[#http + 1] = r end
  end
  T.eq(#http, 3, "every request is recorded, the refused one too")
  T.eq(http[1].host, "search.example")
  T.eq(http[1].status, 200)
  T.eq(http[1].url, "http://search.example/search?q=cats")
  T.eq(http[3].host, "evil.example")
  T.eq(http[3].status, 403)
  T.contains(http[3].refused, "not in the run's network allow list")
  local shown = T.run_rlm({"trace", path})
  T.eq(shown.code, 0, shown.stderr)
  T.contains(shown.stdout, "http GET http://search.example/search?q=cats -> 200")
  T.contains(shown.stdout, "http GET http://evil.example/steal -> 403")
  T.truthy(not shown.stdout:find(KEY, 1, true))
  local page = dir .. "/t.html"
  T.eq(T.run_rlm({"trace", path, "--html", page}).code, 0)
  T.contains(assert(sys.read_file(page)), "GET http://search.example/echo")
  local by = res.usage.by_model["http:search.example"]
  T.eq(by and by.cost, 0.02, "priced per request")
  T.eq(by and by.calls, 2, "counted per host")
  T.eq(stats(s).keyed, 2)
  local system = F.stats(model).last_body.messages[1].content
  T.contains(system, "Network: only these hosts, over plain http:// URLs")
  T.contains(system, "\n- http://search.example/\n", "the prompt lists the allowed hosts")
  T.truthy(not system:find(KEY, 1, true))
end

tests["an answer past max_bytes is refused, saying so; a redirect is handed back"] = function()
  local s = upstream()
  local allow = network(s)
  allow.allow["search.example"].max_bytes = 1000
  local interp <close> = rlm.interpreter{network = allow}
  local _, run = interp:execute([[
import urllib.request, urllib.error
for path in ('/big?bytes=1000', '/big?bytes=1001', '/redirect'):
    try:
        with urllib.request.urlopen('http://search.example' + path) as r:
            print(path, r.status, len(r.read()))
    except urllib.error.HTTPError as e:
        print(path, 'HTTP', e.code, e.headers.get('Location'), e.read().decode()[:200])
]])
  T.eq(run.error, nil, run.traceback)
  T.contains(run.stdout, "/big?bytes=1000 200 1000\n")
  T.contains(run.stdout, "/big?bytes=1001 HTTP 502 None rlm: the answer from search.example is over max_bytes (1000 bytes)")
  -- urllib follows a redirect itself: to a host not allowed, which the proxy refuses
  T.contains(run.stdout, "/redirect HTTP 403")
  T.contains(run.stdout, "elsewhere.invalid is not in the run's network allow list")
end

tests["8 threads at once, each answered with the key; a slow upstream stops at its timeout"] = function()
  local s = upstream()
  local net = network(s)
  net.allow["slow.example"] = {upstream = s.url, timeout = 1, headers = {Authorization = "Bearer ${" .. VAR .. "}"}}
  net.allow["query.example"] = {upstream = s.url .. "/", query = {api_key = "${" .. VAR .. "}"}}
  local interp <close> = rlm.interpreter{network = net}
  local _, run = interp:execute([[
import json, threading, urllib.request, urllib.error
got = {}
def worker(i):
    with urllib.request.urlopen('http://search.example/search?q=t%d' % i, timeout=60) as r:
        got[i] = json.loads(r.read())['query']
threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(got.values()))
try:
    urllib.request.urlopen('http://slow.example/slow?ms=8000', timeout=60)
except urllib.error.HTTPError as e:
    print('slow:', e.code, e.read().decode().strip())
print(urllib.request.urlopen('http://query.example/echo?x=1').read().decode())
]])
  T.eq(run.error, nil, run.traceback)
  T.contains(run.stdout, "['t0', 't1', 't2', 't3', 't4', 't5', 't6', 't7']\n")
  T.contains(run.stdout, "slow: 502 rlm: slow.example: ")
  T.contains(run.stdout, "imed out")
  T.contains(run.stdout, '"query": {"x": "1", "api_key": "[redacted]"}', "a key in the query, added and redacted")
  T.truthy(run.duration < 7, "stopped at the host's timeout, not the upstream's answer: " .. run.duration)
  T.eq(stats(s).keyed, 10)
  -- a driver started again (state lost) has its proxy again
  local _, lost = interp:execute("import os; os._exit(3)")
  T.truthy(lost.state_lost)
  local _, again = interp:execute([[
import urllib.request
print(urllib.request.urlopen('http://search.example/search?q=again').read().decode()[:18])
]])
  T.eq(again.stdout, '{"query": "again",\n')
end

tests["max_calls and max_cost refuse a request with the budget's message"] = function()
  local s = upstream()
  local net = network(s)
  net.allow["search.example"].max_calls = 2
  local code = [[
import urllib.request, urllib.error
for i in range(3):
    try:
        print(urllib.request.urlopen('http://search.example/search?q=%d' % i).status)
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
]]
  local interp <close> = rlm.interpreter{network = net}
  local _, run = interp:execute(code)
  T.eq(run.stdout, "200\n200\n502 rlm: max_calls: search.example may be reached 2 times\n")
  F.model{rules = {{match = "Task: priced", reply = F.code(code .. "SUBMIT(answer='x')")}}}
  net.allow["search.example"].max_calls = nil
  local dir = T.tmpdir()
  local res = rlm.run{task = "priced", context = "x", network = net, max_iterations = 1,
                      max_cost = 0.025, prices = {["openai/root-model"] = {input = 0, output = 0}},
                      trace = dir .. "/t.jsonl"}
  T.eq(res.reason, "submitted", tostring(res.detail))
  local out
  for _, r in ipairs(assert(trace.read(dir .. "/t.jsonl"))) do if r.type == "step" then out = r.output end end
  T.contains(out, "200\n200\n502 rlm: max_cost: http:search.example costs $0.0100 a call")
  T.eq(res.usage.by_model["http:search.example"].calls, 2)
  T.eq(stats(s).keyed, 4)
end

tests["an on_call of one's own gets the http calls and may answer them with args._proxy"] = function()
  local s = upstream()
  local seen = {}
  local interp <close> = rlm.interpreter{network = network(s), on_call = function(kind, args)
    seen[#seen + 1] = kind .. " " .. tostring(args.url)
    return args._proxy:answer(args)
  end}
  local _, run = interp:execute("import urllib.request\n"
    .. "print(urllib.request.urlopen('http://search.example/search?q=own').status)")
  T.eq(run.stdout, "200\n", run.error)
  T.eq(table.concat(seen, ","), "http http://search.example/search?q=own")
end

tests["misuse is named: a missing variable, a bad host entry, an upstream that is no URL"] = function()
  T.raises(function() rlm.interpreter{network = {allow = {["a.example"] = {headers = {
    Authorization = "Bearer ${RLM_TEST_NOT_SET_ANYWHERE}"}}}}} end,
    "network.allow[\"a.example\"]: RLM_TEST_NOT_SET_ANYWHERE is not set")
  local old = sys.getenv("RLM_TEST_BROKEN_KEY")
  sys.setenv("RLM_TEST_BROKEN_KEY", "sk-broken\r\nX-Evil: 1")
  T.defer(function() sys.setenv("RLM_TEST_BROKEN_KEY", old) end)
  local ok, err = pcall(rlm.interpreter, {network = {allow = {["a.example"] = {headers = {
    Authorization = "Bearer ${RLM_TEST_BROKEN_KEY}"}}}}})
  T.truthy(not ok)
  T.contains(tostring(err), "holds a control character")
  T.truthy(not tostring(err):find("sk-broken", 1, true), "the message never shows the value")
  T.raises(function() rlm.interpreter{network = {allow = {["a.example"] = "yes"}}} end,
    "network.allow[\"a.example\"] must be a table")
  T.raises(function() rlm.interpreter{network = {allow = {["a.example"] = {upstream = "ftp://x"}}}} end,
    "upstream must be an http:// or https:// URL")
  T.raises(function() rlm.interpreter{network = {allowed = {}}} end, "network must be true, false or {allow = {")
  T.raises(function() rlm.interpreter{network = {allow = {["https://a.example"] = {}}}} end,
    "is not a host name")
end

tests["without an allow list the code has no proxy and no network"] = function()
  local interp <close> = rlm.interpreter{}
  local _, run = interp:execute("import os; print(os.environ.get('HTTP_PROXY'), os.environ.get('http_proxy'))")
  T.eq(run.stdout, "None None\n")
end

tests["rlm ask --network FILE.lua"] = function()
  local s = upstream()
  local model = F.model{rules = {{match = "Task: ask keyed", reply = F.code([[
import urllib.request
with urllib.request.urlopen('http://search.example/search?q=dogs') as r:
    SUBMIT(answer=r.read().decode())
]])}}}
  local file = T.tmpdir() .. "/network.lua"
  assert(sys.write_file(file, ("return {allow = {['search.example'] = {upstream = %q, "
    .. "headers = {Authorization = 'Bearer ${%s}'}}}}\n"):format(s.url, VAR)))
  local r = T.run_rlm({"ask", "ask keyed", "--network", file}, {env = F.env(model, {[VAR] = KEY})})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "dogs result 1")
  T.truthy(not (r.stdout .. r.stderr):find(KEY, 1, true), "the key is in no output")
end

tests["daytona stand-in: the same proxy over the backend's call channel"] = function()
  local DKEY = "sk-daytona-netproxy-0123456789"
  local d = T.daytona_standin(DKEY)
  local env = {DAYTONA_API_KEY = DKEY, DAYTONA_API_URL = d.url .. "/api"}
  for k, v in pairs(env) do
    local old = sys.getenv(k)
    sys.setenv(k, v)
    T.defer(function() sys.setenv(k, old) end)
  end
  probe_interpreter{backend = "daytona"}
end

tests["a key the host URL-encodes into the query is redacted as it was sent"] = function()
  -- a key with the characters base64 keys have: sent as sk%2Bq%2F..., which an upstream echoes
  local qkey, qvar = "sk+q/7f3c=9e1d5b2a", "RLM_TEST_QUERY_KEY"
  local s = T.server{"tests/standins/keyed_api", "--key", qkey}
  local old = sys.getenv(qvar)
  sys.setenv(qvar, qkey)
  T.defer(function() sys.setenv(qvar, old) end)
  local interp <close> = rlm.interpreter{network = {allow = {["q.example"] = {upstream = s.url,
    query = {api_key = "${" .. qvar .. "}"}}}}}
  local _, run = interp:execute([[
import urllib.request
print(urllib.request.urlopen('http://q.example/echo?x=1').read().decode())
print(urllib.request.urlopen('http://q.example/echo?x=2').read().decode().upper())
]])
  T.eq(run.error, nil, run.traceback)
  T.contains(run.stdout, '"target": "/echo?x=1&api_key=[redacted]"', "the encoded key is redacted")
  T.contains(run.stdout, '"query": {"x": "1", "api_key": "[redacted]"}', "and the decoded one")
  local encoded = "sk%2Bq%2F7f3c%3D9e1d5b2a"
  for _, form in ipairs{qkey, encoded, encoded:lower(), encoded:upper()} do
    T.truthy(not run.stdout:upper():find(form:upper(), 1, true), "no form of the key: " .. run.stdout)
  end
end

tests["a refused request with a huge host or method makes a small record"] = function()
  local s = upstream()
  local code = [[
import os, socket
port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
for line in (b'GET http://' + b'h' * 60000 + b'/ HTTP/1.1', b'M' * 60000 + b' http://search.example/ HTTP/1.1',
             b'get' + b'm' * 60000 + b' http://search.example/ HTTP/1.1'):
    c = socket.create_connection(('127.0.0.1', port), timeout=30)
    c.sendall(line + b'\r\n\r\n')
    print(c.recv(100)[:12])
    c.close()
SUBMIT(answer='x')
]]
  F.model{rules = {{match = "Task: huge", reply = F.code(code)}}}
  local path = T.tmpdir() .. "/t.jsonl"
  local res = rlm.run{task = "huge", context = "x", network = network(s), trace = path, max_iterations = 1}
  T.eq(res.reason, "submitted", tostring(res.detail))
  local http = {}
  for _, r in ipairs(assert(trace.read(path))) do
    if r.type == "subcall" and r.kind == "http" then http[#http + 1] = r end
  end
  T.eq(#http, 3, "each refusal is recorded")
  T.eq(http[1].status, 403)
  T.contains(http[1].host, "hhhhhhhh")
  T.eq(http[3].status, 400)
  T.contains(http[3].refused, "not an HTTP method: getmmm")
  for _, r in ipairs(http) do
    local size = #json.encode(r)
    T.truthy(size > 100 and size < 6000, "a record of " .. size .. " bytes")
  end
end

tests["a request the upstream answered past max_bytes is paid for all the same"] = function()
  local s = upstream()
  local net = network(s)
  net.allow["search.example"].max_bytes = 100
  F.model{rules = {{match = "Task: big paid", reply = F.code([[
import urllib.request, urllib.error
for i in range(5):
    try:
        print(urllib.request.urlopen('http://search.example/big?bytes=1000').status)
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip()[:60])
SUBMIT(answer='x')
]])}}}
  local res = rlm.run{task = "big paid", context = "x", network = net, max_iterations = 1,
                      max_cost = 0.025, prices = {["openai/root-model"] = {input = 0, output = 0}}}
  T.eq(res.reason, "submitted", tostring(res.detail))
  -- two requests fit $0.025 at $0.01 each; the upstream answered both, so both are paid
  T.eq(stats(s).keyed, 2, "the third request is refused by the budget, not sent")
  T.eq(res.usage.by_model["http:search.example"].cost, 0.02)
end

tests["an upstream with a path keeps the code under it: no . or .. segments"] = function()
  local s = upstream()
  -- the stand-in answers /echo, never /base/...: what is under /base is a 404
  local proxy = require("rlm.netproxy").new{allow = {["api.example"] = {upstream = s.url .. "/base",
    headers = {Authorization = "Bearer ${" .. VAR .. "}"}}}}
  local function get(path)
    local res, info = proxy:request{method = "GET", url = "http://api.example" .. path}
    return res[1].status, info.refused
  end
  T.eq(get("/echo"), 404, "under the upstream's path")
  for _, path in ipairs{"/../echo", "/%2e%2e/echo", "/%2E./echo", "/./../echo", "/x/../../echo",
                        "/..?q=1", "/.."} do
    local status, why = get(path)
    T.eq(status, 400, path)
    T.contains(why, "no . or .. segments", path)
  end
  T.eq(select(1, get("/..x?q=dots")), 404, "a name with dots is no segment")
  T.eq(stats(s).keyed, 2, "nothing but those two reached the upstream with the key")
end

return tests
