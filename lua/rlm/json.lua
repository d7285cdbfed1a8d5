--- JSON for the host: exact integers, empty arrays, byte-exact strings. See host/json.h.
--   encode(v[, {indent = n, sort_keys = false}]) (keys in byte order unless sort_keys is false),
--   decode(s) -> v | nil, err, null,
--   array_mt, object_mt, array([t]), object([t]), is_array(v)
return require "rlm.core.json"
