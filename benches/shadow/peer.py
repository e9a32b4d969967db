#!/usr/bin/env python3
"""The two ends of a Shadow experiment's downloads, run inside the simulation.

  peer.py serve ADDR:PORT DIR          serve the files of DIR over HTTP/1.0, a thread per
                                       connection
  peer.py fetch SOCKS TARGET SPEC...   download through a SOCKS5 entry, print one JSON
                                       line per download

SPEC is `name:size:sha256`. `fetch` first retries a small request until the network is
ready (the client's directory and circuits come up inside the simulation), then downloads
each SPEC in turn and reports, in simulated time:
  connect_s  SOCKS CONNECT sent -> success reply (stream open; includes a circuit build
             when none is ready)
  ttfb_s     request sent -> first byte of the response
  goodput    body bytes / (last byte - first byte), in MB/s (10^6 bytes)
  ok         the body had the expected length and SHA-256
Standard library only; blocking sockets (what Shadow runs best).
"""

import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time

RETRY_EVERY_S = 2.0
READY_DEADLINE_S = 600.0
IO_TIMEOUT_S = 300.0


def serve(addr, root):
    host, port = addr.rsplit(":", 1)
    files = {}
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb") as f:
            files["/" + name] = f.read()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(128)
    print(f"serving {len(files)} files on {addr}", flush=True)
    while True:
        conn, _ = listener.accept()
        # One thread per connection: clients are served side by side, not queued.
        threading.Thread(target=answer, args=(conn, files), daemon=True).start()


def answer(conn, files):
    try:
        conn.settimeout(IO_TIMEOUT_S)
        request = b""
        while b"\r\n\r\n" not in request and len(request) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                break
            request += chunk
        parts = request.split(b" ")
        path = parts[1].decode("ascii", "replace") if len(parts) > 1 else ""
        body = files.get(path)
        if body is None:
            conn.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        else:
            head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
            conn.sendall(head.encode() + body)
    except OSError as e:
        print(f"connection failed: {e}", flush=True)
    finally:
        conn.close()


def socks_connect(socks, target):
    """A stream to TARGET (ip:port) through the SOCKS5 entry SOCKS; seconds to open it."""
    s_host, s_port = socks.rsplit(":", 1)
    t_host, t_port = target.rsplit(":", 1)
    s = socket.create_connection((s_host, int(s_port)), timeout=IO_TIMEOUT_S)
    s.sendall(b"\x05\x01\x00")
    if recv_exact(s, 2) != b"\x05\x00":
        raise OSError("SOCKS5 method refused")
    start = time.monotonic()
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(t_host) + struct.pack(">H", int(t_port)))
    reply = recv_exact(s, 4)
    if reply[1] != 0:
        s.close()
        raise OSError(f"SOCKS5 reply {reply[1]}")
    skip = {1: 4, 4: 16}.get(reply[3])
    if skip is None:
        skip = recv_exact(s, 1)[0]
    recv_exact(s, skip + 2)
    return s, time.monotonic() - start


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def expected_length(data):
    """Header block plus Content-Length once the headers are in, else None."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    for line in bytes(data[:end]).split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return end + 4 + int(value.strip())
    return float("inf")


def download(socks, target, name):
    """GET /NAME: (body, connect_s, ttfb_s, transfer_s)."""
    s, connect_s = socks_connect(socks, target)
    try:
        sent = time.monotonic()
        s.sendall(f"GET /{name} HTTP/1.0\r\nHost: server\r\n\r\n".encode())
        first = None
        last = None
        data = bytearray()
        # Like curl and browsers, the download is complete once Content-Length bytes of body
        # arrived; only a response without a length is read to the end of the stream. (Shadow
        # 3.3's TCP sometimes never sends the web server's FIN after close(): its packet
        # capture shows every byte acknowledged and no FIN, so a reader that waits for the
        # end of the stream would wait for good.)
        want = None
        while want is None or len(data) < want:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            now = time.monotonic()
            if first is None:
                first = now
            last = now
            data += chunk
            if want is None:
                want = expected_length(data)
    finally:
        s.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200"):
        raise OSError(f"response {head[:40]!r}")
    ttfb = (first - sent) if first is not None else None
    transfer = (last - first) if first is not None else None
    return body, connect_s, ttfb, transfer


def fetch(socks, target, specs):
    began = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            download(socks, target, specs[0].split(":")[0])
            break
        except OSError as e:
            if time.monotonic() - began > READY_DEADLINE_S:
                print(json.dumps({"ready": False, "attempts": attempts, "error": str(e)}), flush=True)
                return 1
            time.sleep(RETRY_EVERY_S)
    print(json.dumps({"ready": True, "after_s": round(time.monotonic() - began, 3),
                      "attempts": attempts}), flush=True)
    failures = 0
    for spec in specs:
        name, size, digest = spec.split(":")
        record = {"name": name, "size": int(size)}
        try:
            body, connect_s, ttfb, transfer = download(socks, target, name)
            ok = len(body) == int(size) and hashlib.sha256(body).hexdigest() == digest
            record.update({
                "ok": ok, "got": len(body), "connect_s": round(connect_s, 6),
                "ttfb_s": round(ttfb, 6) if ttfb is not None else None,
                "goodput": round(len(body) / transfer / 1e6, 4) if transfer else None,
            })
            failures += 0 if ok else 1
        except OSError as e:
            record.update({"ok": False, "error": str(e)})
            failures += 1
        print(json.dumps(record), flush=True)
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "serve":
        serve(argv[2], argv[3])
        return 0
    if len(argv) >= 5 and argv[1] == "fetch":
        return fetch(argv[2], argv[3], argv[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
