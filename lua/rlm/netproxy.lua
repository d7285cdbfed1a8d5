--- A network that carries keys without handing them over: the hosts a run's code may reach,
-- each with the credentials the host adds (read from the host's environment).
--
--   network = {allow = {
--     ["api.search.example"] = {headers = {Authorization = "Bearer ${SEARCH_KEY}"}},
--     ["api.other.example"]  = {query = {api_key = "${OTHER_KEY}"}, price = 0.001, max_calls = 50},
--     ["internal.example"]   = {upstream = "http://127.0.0.1:8080", timeout = 30,
--                               max_bytes = 1 << 20},
--   }}
--
-- The sandbox keeps no network of its own. Its driver runs an HTTP proxy on 127.0.0.1 and
-- points HTTP_PROXY at it; each request the code sends there comes to the host as an "http"
-- call, like llm_query (counted, traced, limited by the run's budget and time, cancellable).
-- Here the URL's host is looked up in the allow list, and the request is made to the host's
-- upstream (default https://HOST, so the code writes http://HOST/... and the request travels
-- over https) with the configured headers and query parameters, ${VAR} replaced by the
-- variable's value; a header the code sent under a configured name is dropped. Anything else is
-- answered 403 with a one-line reason, and so is CONNECT (https through the proxy): a tunnel
-- cannot have a header added to it.
--
-- The values put in are secrets from then on (rlm.secrets: no trajectory, event or log shows
-- them), and every copy of one in the upstream's answer, headers and body, becomes
-- "[redacted]" before the code sees it: an upstream that echoes the key hands back nothing.
local base64 = require "rlm.core.base64"
local http = require "rlm.http"
local json = require "rlm.json"
local redact = require "rlm.core.redact"
local secrets = require "rlm.secrets"
local sys = require "rlm.sys"

local M = {}

M.MAX_BYTES = 10 << 20     -- an upstream's answer, by default
M.TIMEOUT = 60             -- seconds for one request, by default

local FIELDS = {upstream = true, headers = true, query = true, max_bytes = true, timeout = true,
                price = true, max_calls = true}
-- Headers of one connection, which the host's own request sets for itself.
local HOP = {connection = true, ["keep-alive"] = true, ["proxy-connection"] = true,
             ["proxy-authorization"] = true, ["proxy-authenticate"] = true, te = true,
             trailer = true, ["transfer-encoding"] = true, upgrade = true, host = true,
             ["content-length"] = true, ["accept-encoding"] = true, ["content-encoding"] = true}

local Proxy = {}
Proxy.__index = Proxy

-- What the code wrote as a host or method, as records and messages show it: a host name is at
-- most 253 bytes, and a refusal costs the code nothing, so each must stay small.
local SHOWN = 255
local function shown(text)
  return #text > SHOWN and text:sub(1, SHOWN) or text
end

local function misuse(host, msg)
  error(("network.allow[%q]%s"):format(host, msg), 0)
end

-- value with each ${VAR} replaced by the variable's value; the values put in go to used.
local function fill(host, value, used)
  if type(value) ~= "string" then misuse(host, ": header and query values must be strings") end
  local filled = value:gsub("%${([%a_][%w_]*)}", function(name)
    local v = sys.getenv(name)
    if v == nil or v == "" then
      misuse(host, (": %s is not set in the host's environment"):format(name))
    end
    used[#used + 1] = v
    return v
  end)
  -- (the message names the setting, never the value: it may be a key)
  if filled:find("%c") then misuse(host, ": a header or query value holds a control character") end
  return filled
end

-- name -> value pairs of a configured table, filled, in name order (the same bytes each time).
local function filled_pairs(host, t, used, what)
  if t == nil then return {} end
  if type(t) ~= "table" then misuse(host, (": %s must be a table of name = value"):format(what)) end
  local out = {}
  for name, value in pairs(t) do
    if type(name) ~= "string" or name == "" then misuse(host, (": %s names must be strings"):format(what)) end
    out[#out + 1] = {name, fill(host, value, used)}
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

local function url_encode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function entry(host, e, used)
  if type(host) ~= "string" or not host:lower():match("^[%w][%w%-%.]*:?%d*$") or host:find(":$") then
    error(("network.allow: %s is not a host name (write api.example.com, or host:port)"):format(
      tostring(host)), 0)
  end
  if type(e) ~= "table" then misuse(host, " must be a table ({} for a host without credentials)") end
  for k in pairs(e) do
    if not FIELDS[k] then
      misuse(host, (": unknown field %s (upstream, headers, query, max_bytes, timeout, price, " ..
        "max_calls)"):format(tostring(k)))
    end
  end
  local upstream = e.upstream or ("https://" .. host:lower())
  if type(upstream) ~= "string" or not upstream:match("^https?://[^/]") then
    misuse(host, ": upstream must be an http:// or https:// URL")
  end
  local headers, query = filled_pairs(host, e.headers, used, "headers"), {}
  for _, q in ipairs(filled_pairs(host, e.query, used, "query")) do
    query[#query + 1] = url_encode(q[1]) .. "=" .. url_encode(q[2])
  end
  local drop = {}
  for _, h in ipairs(headers) do drop[h[1]:lower()] = true end
  for _, k in ipairs{"max_bytes", "timeout", "price"} do
    if e[k] ~= nil and (type(e[k]) ~= "number" or e[k] < 0 or (k ~= "price" and e[k] == 0)) then
      misuse(host, (": %s must be a positive number"):format(k))
    end
  end
  if e.max_calls ~= nil and (math.type(e.max_calls) ~= "integer" or e.max_calls < 0) then
    misuse(host, ": max_calls must be a whole number")
  end
  return {host = host:lower(), upstream = upstream:gsub("/+$", ""), headers = headers,
          query = table.concat(query, "&"), drop = drop, max_bytes = e.max_bytes or M.MAX_BYTES,
          timeout = e.timeout or M.TIMEOUT, price = e.price, max_calls = e.max_calls}
end

--- The proxy of an interpreter's network option: nil for true, false or nil (the network as
-- the backend has it); raises for misuse, and when a variable a host needs is not set.
function M.new(network)
  if network == nil or type(network) == "boolean" then return nil end
  if type(network) ~= "table" or type(network.allow) ~= "table" or next(network, next(network)) ~= nil then
    error("network must be true, false or {allow = {[\"host\"] = {headers = {...}}, ...}} " ..
          "(see rlm.netproxy)", 0)
  end
  local hosts, used = {}, {}
  for host, e in pairs(network.allow) do
    local h = entry(host, e, used)
    hosts[h.host] = h
  end
  -- Each value as put in and as a URL carries it (the query's encoding, which an upstream that
  -- echoes its request target sends back, in either case of hex). Longest first: a key that
  -- contains another is replaced whole.
  local keys, seen = {}, {}
  for _, v in ipairs(used) do
    local encoded = url_encode(v)
    for _, form in ipairs{v, encoded, (encoded:gsub("%%%x%x", string.lower))} do
      if not seen[form] then seen[form] = true; keys[#keys + 1] = form; secrets.remember(form) end
    end
  end
  table.sort(keys, function(a, b) return #a > #b or (#a == #b and a < b) end)
  return setmetatable({hosts = hosts, keys = keys}, Proxy)
end

-- The allow-list entry for a URL's authority (host, or host:port; :80 is the host itself).
function Proxy:lookup(authority)
  authority = authority:lower()
  return self.hosts[authority] or self.hosts[authority:match("^(.-):80$") or ""]
end

-- A response the host makes up: status, the one-line reason as the body and reason phrase.
local function refusal(status, reason)
  return {status = status, reason = reason, headers = json.array({{"Content-Type", "text/plain"}}),
          body = base64.encode(reason .. "\n")}
end

local function hint(authority)
  return ("rlm: https through the proxy cannot carry the key: use http://%s/... (the host " ..
          "makes the request over https)"):format(authority:gsub(":443$", ""))
end

-- The upstream request for args (method, url, headers, body) and its allow-list entry; or nil,
-- status, reason when it is refused, and the host it named.
function Proxy:prepare(args)
  local method, url = tostring(args.method or ""), tostring(args.url or "")
  if method == "CONNECT" then
    local authority = shown(url:match("^([^/]+)$") or url)
    local e = self:lookup(authority) or self:lookup((authority:gsub(":443$", "")))
    if not e then return nil, 403, ("rlm: %s is not in the run's network allow list"):format(authority), authority end
    return nil, 403, hint(authority), authority
  end
  if not method:match("^%u+$") then return nil, 400, "rlm: not an HTTP method: " .. shown(method) end
  local authority, rest = url:match("^[Hh][Tt][Tt][Pp]://([^/?#]+)(.*)$")
  if not authority then
    return nil, 400, "rlm: the proxy takes http://HOST/... URLs (the host makes them https)"
  end
  if authority:find("@", 1, true) then return nil, 400, "rlm: no user names in the URL", shown(authority) end
  local e = self:lookup(authority)
  if not e then
    authority = shown(authority:lower())
    return nil, 403, ("rlm: %s is not in the run's network allow list"):format(authority), authority
  end
  rest = rest:gsub("#.*$", "")
  if rest == "" or rest:sub(1, 1) == "?" then rest = "/" .. rest end
  -- libcurl resolves . and .. (%2e too, by the upstream): they would climb out of the path of
  -- an upstream such as https://gateway.example/search
  if (rest:match("^[^?]*"):gsub("%%2[eE]", ".") .. "/"):find("/%.%.?/") then
    return nil, 400, "rlm: no . or .. segments in the URL's path", e.host
  end
  if e.query ~= "" then rest = rest .. (rest:find("?", 1, true) and "&" or "?") .. e.query end
  local headers = {}
  for _, h in ipairs(type(args.headers) == "table" and args.headers or {}) do
    local name, value = tostring(h[1]), tostring(h[2])
    if name:match("^[%w!#$%%&'*+%-.^_`|~]+$") and not HOP[name:lower()] and not e.drop[name:lower()]
       and not value:find("[%c]") then
      headers[#headers + 1] = name .. ": " .. value
    end
  end
  for _, h in ipairs(e.headers) do headers[#headers + 1] = h[1] .. ": " .. h[2] end
  local body
  if type(args.body) == "string" then
    body = base64.decode(args.body)
    if not body then return nil, 400, "rlm: the request's body is not base64", e.host end
  end
  return {url = e.upstream .. rest, method = method, headers = headers, body = body,
          timeout = e.timeout, max_bytes = e.max_bytes, retries = 0}, e
end

--- The host name an "http" call's args name (for the trajectory), or "?".
function Proxy:host_of(args)
  local url = tostring(args.url or "")
  local authority = url:match("^[Hh][Tt][Tt][Pp]://([^/?#]+)") or url:match("^([^/]+)$") or "?"
  return shown(authority:lower())
end

--- The allow-list entry of an "http" call's host, or nil: its price and max_calls.
function Proxy:entry_of(args)
  return self:lookup(self:host_of(args))
end

--- Makes the request of an "http" call: {response} where response = {status, reason,
-- headers ([name, value] pairs), body (base64)}, always (a refusal is a response too), and
-- what happened for the trajectory: {host, status, bytes, refused = reason, sent = true when
-- the request went to the upstream (which may have done the work, whatever came back)}.
function Proxy:request(args)
  local req, e, reason, host = self:prepare(args)
  if not req then
    return {refusal(e, reason)}, {host = host or "?", status = e, refused = reason}
  end
  local made, res, err = pcall(http.request, req)
  if not made then res, err = nil, {message = tostring(res)} end
  if not res then
    local why = err.kind == "too_large"
      and ("rlm: the answer from %s is over max_bytes (%d bytes)"):format(e.host, e.max_bytes)
      or ("rlm: %s: %s"):format(e.host, redact.text(tostring(err.message or err), self.keys))
    return {refusal(502, why)}, {host = e.host, status = 502, refused = why, sent = true}
  end
  local names, headers = {}, {}
  for name in pairs(res.headers or {}) do
    if not HOP[name] then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    headers[#headers + 1] = json.array({name, redact.text(tostring(res.headers[name]), self.keys)})
  end
  local body = redact.text(res.body or "", self.keys)
  return {{status = res.status, headers = json.array(headers), body = base64.encode(body)}},
         {host = e.host, status = res.status, bytes = #body, sent = true}
end

--- Answers an "http" call as an on_call handler does: {response}.
function Proxy:answer(args)
  return (self:request(args))
end

--- The hosts as the system prompt lists them, in name order ("" without a proxy).
--- The table a --network file returns ({allow = {...}}), checked as an interpreter would:
-- a file that will not do raises in one line here, not in every run.
function M.load_file(path)
  local chunk, err = loadfile(path, "t")
  if not chunk then error("--network: " .. err, 0) end
  local t = chunk()
  if type(t) ~= "table" then error(("--network: %s must return {allow = {...}}"):format(path), 0) end
  M.new(t)
  return t
end

function M.prompt_text(proxy)
  if not proxy then return "" end
  local names = {}
  for host in pairs(proxy.hosts) do names[#names + 1] = host end
  table.sort(names)
  local out = {"Network: only these hosts, over plain http:// URLs (the REPL's HTTP_PROXY carries "
    .. "them; the host adds any credentials and uses https); others are refused:"}
  for _, host in ipairs(names) do out[#out + 1] = "- http://" .. host .. "/" end
  return table.concat(out, "\n") .. "\n"
end

--- The code's URL as the trajectory keeps it (its own text: the keys are added later).
function M.shown_url(args)
  local url = tostring(args.url or "")
  return #url > 2000 and url:sub(1, 2000) or url
end

--- The code's method as the trajectory keeps it.
function M.shown_method(args)
  return shown(tostring(args.method))
end

return M
