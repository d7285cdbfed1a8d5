"""The driver's HTTP proxy (lua/rlm/driver/proxy.py): the "proxy" request, and each request
the code sends to it becoming an "http" call whose reply is the response."""
import base64
import unittest

from test_driver import DriverTest

# Code that sends raw bytes to the proxy and prints the raw response.
RAW_CLIENT = """
import os, socket
port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
s = socket.create_connection(('127.0.0.1', port), timeout=30)
s.sendall(%r)
data = b''
while True:
    piece = s.recv(65536)
    if not piece:
        break
    data += piece
print(data.decode('latin-1'))
"""


class TestProxy(DriverTest):
    def start_proxy(self):
        ev = self.d.request({"op": "proxy"})
        self.assertEqual(ev["ev"], "proxy")
        self.assertGreater(ev["port"], 0)
        return ev["port"]

    def test_started_once_and_named_in_the_environment(self):
        port = self.start_proxy()
        self.assertEqual(self.start_proxy(), port)
        ev = self.run_ok("import os\nprint(os.environ['HTTP_PROXY'], os.environ['http_proxy'], "
                         "os.environ['HTTPS_PROXY'])")
        url = f"http://127.0.0.1:{port}"
        self.assertEqual(ev["stdout"], f"{url} {url} {url}\n")

    def test_a_chunked_post_becomes_one_call_and_its_reply_the_response(self):
        self.start_proxy()
        request = (b"POST http://api.example/v1/search?q=1 HTTP/1.1\r\nHost: api.example\r\n"
                   b"Proxy-Connection: keep-alive\r\nX-Mine: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        rid = self.d.start(RAW_CLIENT % request)
        ev = self.d.event()
        self.assertEqual(ev["kind"], "http")
        args = ev["args"]
        self.assertEqual(args["method"], "POST")
        self.assertEqual(args["url"], "http://api.example/v1/search?q=1")
        self.assertEqual(args["headers"], [["Host", "api.example"], ["X-Mine", "a"]])
        self.assertEqual(base64.b64decode(args["body"]), b"hello world")
        body = base64.b64encode(b'{"ok": true}').decode()
        done = self.d.request({"op": "reply", "id": rid, "results": [
            {"status": 201, "headers": [["content-type", "application/json"],
                                        ["transfer-encoding", "chunked"]], "body": body}]})
        self.assertIsNone(done["error"], done["traceback"])
        out = done["stdout"]
        self.assertTrue(out.startswith("HTTP/1.1 201 Created\r\n"), out)
        self.assertIn("content-type: application/json\r\n", out)
        self.assertNotIn("transfer-encoding", out)
        self.assertIn("Content-Length: 12\r\nConnection: close\r\n\r\n{\"ok\": true}", out)

    def test_a_refusal_keeps_its_reason_and_a_failed_call_is_a_502(self):
        self.start_proxy()
        rid = self.d.start(RAW_CLIENT % b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n")
        ev = self.d.event()
        self.assertEqual((ev["args"]["method"], ev["args"]["url"]), ("CONNECT", "api.example:443"))
        self.assertIsNone(ev["args"]["body"])
        done = self.d.request({"op": "reply", "id": rid, "results": [
            {"status": 403, "reason": "rlm: use http://api.example/...\r\nX: y", "headers": [],
             "body": base64.b64encode(b"no\n").decode()}]})
        self.assertTrue(done["stdout"].startswith("HTTP/1.1 403 rlm: use http://api.example/...X: y\r\n"),
                        done["stdout"])
        rid = self.d.start(RAW_CLIENT % b"GET http://api.example/ HTTP/1.1\r\n\r\n")
        self.d.event()
        done = self.d.request({"op": "reply", "id": rid, "error": "max_calls: api.example may be reached 2 times"})
        self.assertTrue(done["stdout"].startswith("HTTP/1.1 502 Bad Gateway\r\n"), done["stdout"])
        self.assertIn("\r\n\r\nrlm: max_calls: api.example may be reached 2 times\n", done["stdout"])

    def test_what_is_not_http_is_a_400_without_a_call(self):
        self.start_proxy()
        ev = self.run_ok(RAW_CLIENT % b"hello there\r\n\r\n")
        self.assertTrue(ev["stdout"].startswith("HTTP/1.1 400 Bad Request\r\n"), ev["stdout"])
        self.assertIn("rlm: not an HTTP request line", ev["stdout"])
        ev = self.run_ok(RAW_CLIENT % b"POST http://a.example/ HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n")
        self.assertIn("rlm: the request's body is over", ev["stdout"])
        ev = self.run_ok(RAW_CLIENT % b"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        self.assertIn("400 Bad Request\r\n", ev["stdout"])
        self.assertIn("rlm: a malformed chunked body", ev["stdout"])
        self.assertEqual(ev["stderr"], "")

    def test_a_negative_chunk_size_is_a_400_not_a_body_read_to_the_end(self):
        # read(-1) would read to the end of the stream, past the body limit: the driver then
        # sent the host a line over its limit and lost its state
        self.start_proxy()
        ev = self.run_ok(RAW_CLIENT % (b"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked"
                                       b"\r\n\r\n-1\r\nhello\r\n0\r\n\r\n"))
        self.assertTrue(ev["stdout"].startswith("HTTP/1.1 400 Bad Request\r\n"), ev["stdout"])
        self.assertIn("rlm: a malformed chunked body", ev["stdout"])


if __name__ == "__main__":
    unittest.main()
