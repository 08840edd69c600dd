-- wrk script for the PROXY protocol cells (bench/harness.py): every connection sends
-- one GET with Connection: close, preceded by a PROXY protocol v2 header when
-- PROXY_V2=1 (what HAProxy's send-proxy-v2 sends: TCP over IPv4, client 127.0.0.2:
-- 40000, no TLVs). Both cells go through this script, so the only difference between
-- them is the header: the per-request Lua call costs both the same.
--
-- wrk checks the script's request by parsing it as HTTP once, with the first
-- thread's request() before the run (a PROXY header is no HTTP): that one call gets
-- the plain request. setup() runs once per thread, in order, so the first thread is
-- the one marked.
local v2 = os.getenv("PROXY_V2") == "1"
local threads = 0

function setup(thread)
   threads = threads + 1
   if threads == 1 then
      thread:set("checked_first", true)
   end
end

function init(args)
   plain = wrk.format(nil, nil, { ["Connection"] = "close" })
   req = plain
   if v2 then
      req = "\r\n\r\n\0\r\nQUIT\n" .. "\x21\x11\x00\x0c"
         .. "\x7f\x00\x00\x02" .. "\x7f\x00\x00\x01" .. "\x9c\x40" .. "\x00\x50" .. plain
   end
end

function request()
   if checked_first then
      checked_first = false
      return plain
   end
   return req
end
