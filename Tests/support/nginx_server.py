"""nginx on 127.0.0.1 requiring client certificates (`ssl_verify_client on`): the one copy of the
harness, used by Tests/e2e (test_tls.py, test_pki.py), bindings/python/tests (conftest.py) and
bench/bench_python.py. Each server runs in a folder of its own, on an ephemeral port, in the
foreground; stop() ends it."""
import pathlib
import subprocess
import time

from ports import free_port, wait_port


class Nginx:
    """A running nginx: `.port`, `.url`, `.prefix` (its folder), `body_log()` and `stop()`."""

    def __init__(self, prefix, port, proc):
        self.prefix, self.port, self.proc = pathlib.Path(prefix), port, proc

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    def body_log(self, lines=1, timeout=10):
        """What the /upload location logged: one request body per line. nginx writes the log line
        after it has sent the response, so this waits (up to `timeout`) for `lines` lines."""
        path = self.prefix / "logs" / "body.log"
        end = time.monotonic() + timeout
        while True:
            text = path.read_text() if path.exists() else ""
            if len(text.splitlines()) >= lines or time.monotonic() > end:
                return text
            time.sleep(0.05)

    def stop(self):
        stop_process(self.proc)


def stop_process(proc):
    """Stops a peer the tests started: SIGTERM, then SIGKILL if it is still there after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(prefix, *, server_chain, server_key, client_ca, trusted=None, issuer_dn="", gzip=False,
          worker_connections=64, keepalive_requests=100000):
    """Starts nginx in the folder `prefix` (made here) serving https on 127.0.0.1 with the server
    certificate chain and key given, requiring client certificates issued under `client_ca` (a
    PEM file: also the CA names sent) and, with `trusted`, verified up to the certificates in that
    file too; TLS 1.2 and 1.3, a shared session cache.

    With `issuer_dn`, only clients whose issuer is that DN are served (others get 403 "wrong
    customer"). GET / answers "hello <client DN> conn=<connection serial> req=<request number on
    it> session=<TLS session id>"; /old redirects to /; POST /upload logs the request body (see
    Nginx.body_log) and is passed to a plain backend; with `gzip`, responses to clients accepting
    gzip are gzipped and chunked."""
    prefix = pathlib.Path(prefix)
    (prefix / "logs").mkdir(parents=True)
    port, backend = free_port(), free_port()
    check_issuer = f'if ($ssl_client_i_dn != "{issuer_dn}") {{ return 403 "wrong customer\\n"; }}' if issuer_dn else ""
    trust = f"ssl_trusted_certificate {trusted};" if trusted else ""
    compress = "gzip on; gzip_types text/plain; gzip_min_length 1;" if gzip else ""
    conf = prefix / "nginx.conf"
    conf.write_text(f"""
error_log {prefix}/logs/error.log;
pid {prefix}/nginx.pid;
events {{ worker_connections {worker_connections}; }}
http {{
  access_log off;
  log_format body '$request_body';
  client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fcgi; uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
  keepalive_requests {keepalive_requests};
  server {{
    listen 127.0.0.1:{port} ssl;
    server_name server.test;
    ssl_certificate {server_chain};
    ssl_certificate_key {server_key};
    ssl_client_certificate {client_ca};
    {trust}
    ssl_verify_client on;
    ssl_verify_depth 2;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:mtls{port}:1m;
    {compress}
    absolute_redirect off;
    default_type text/plain;
    location / {{
      {check_issuer}
      return 200 "hello $ssl_client_s_dn conn=$connection req=$connection_requests session=$ssl_session_id\\n";
    }}
    location /old {{ return 302 /; }}
    location /upload {{
      client_body_buffer_size 1m; client_max_body_size 1m;
      access_log {prefix}/logs/body.log body;
      proxy_http_version 1.1;
      proxy_pass http://127.0.0.1:{backend}/sink;
    }}
  }}
  server {{
    listen 127.0.0.1:{backend};
    location /sink {{ return 200 "stored\\n"; }}
  }}
}}
""")
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(prefix), "-g", "daemon off; master_process off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Nginx(prefix, port, proc)
    try:
        wait_port(port, proc)
    except Exception:
        server.stop()
        raise
    return server


__all__ = ["Nginx", "start"]
