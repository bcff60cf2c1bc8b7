#!/usr/bin/env python3
"""Idle TLS connections for bench/tls.sh's idle cases (issue 24, docs/bench.md "TLS").

    bench/tls_idle.py PORT PROTO WARM N CAFILE

Opens WARM connections to 127.0.0.1:PORT, then prints "warm" and waits for a line on stdin; then opens N more,
prints "held N" and waits for stdin's end before it closes them all. Each connection does a full TLS 1.3
handshake (TLS_AES_128_GCM_SHA256, the certificate verified against CAFILE for localhost, ALPN PROTO: http/1.1
or h2) and one GET /hello, whose answer ("Hello, Joe!") is read in full: the server then holds the connection
idle, as a client pool does between requests. No session is offered back: every handshake is full.
An error (a refused connection, a wrong answer) ends the script with its message and status 1.
"""
import resource
import socket
import ssl
import sys

H1_REQ = b"GET /hello HTTP/1.1\r\nhost: localhost\r\nuser-agent: cbench-tls-idle\r\n\r\n"
# The preface, an empty SETTINGS and GET /hello on stream 1 (HPACK: :method GET, :scheme https, and :path and
# :authority as literals without indexing), as one write.
H2_REQ = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
          + b"\x00\x00\x15\x01\x05\x00\x00\x00\x01\x82\x87\x04\x06/hello\x01\x09localhost")
H2_SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
BODY = b"Hello, Joe!"


def read_n(s, n, buf):
    while len(buf) < n:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("the server closed the connection")
        buf += d
    return buf


def h1(s):
    s.sendall(H1_REQ)
    buf = b""
    while not (b"\r\n\r\n" in buf and buf.endswith(BODY)):
        d = s.recv(65536)
        if not d:
            raise RuntimeError("the server closed the connection")
        buf += d
    if not buf.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("answer %r" % buf[:40])


def h2(s):
    s.sendall(H2_REQ)
    buf, body, settings, ended = b"", b"", False, False
    while not (ended and settings):
        buf = read_n(s, 9, buf)
        n = int.from_bytes(buf[0:3], "big")
        buf = read_n(s, 9 + n, buf)
        ftype, flags, sid, payload = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]
        buf = buf[9 + n:]
        if ftype in (3, 7):
            raise RuntimeError("RST_STREAM or GOAWAY: %r" % payload)
        if ftype == 4 and not flags & 1:
            settings = True
            s.sendall(H2_SETTINGS_ACK)
        if sid == 1 and ftype == 0:
            body += payload
        if sid == 1 and ftype in (0, 1) and flags & 1:
            ended = True
    if body != BODY:
        raise RuntimeError("body %r" % body)


def main():
    port, proto, warm, n, cafile = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = warm + n + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols([proto])
    ask = h2 if proto == "h2" else h1
    held = []
    try:
        for i in range(warm + n):
            if i == warm:
                print("warm", flush=True)
                sys.stdin.readline()
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
            if s.version() != "TLSv1.3" or s.selected_alpn_protocol() != proto:
                raise RuntimeError("negotiated %s %s" % (s.version(), s.selected_alpn_protocol()))
            ask(s)
            held.append(s)
    except (OSError, RuntimeError) as e:
        print("tls_idle.py: connection %d: %s" % (len(held), e), file=sys.stderr, flush=True)
        sys.exit(1)
    print("held %d %s" % (n, held[-1].cipher()[0] if held else "-"), flush=True)
    sys.stdin.read()
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
