# An HTTP/1.1 server on a Unix socket (python3's http.server handlers, a thread per connection), for
# tests/integration/test_crossproc.c: python3 unix_http_server.py PATH; prints "listening" once
# bound, answers every GET with "ok", ends on SIGINT.
import http.server
import socketserver
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("unix", 0)  # the handlers want an address pair


server = Server(sys.argv[1], Handler)
print("listening", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
