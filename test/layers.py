#!/usr/bin/env python3
"""The engine's layers keep their ties one-way (docs/architecture.md, "Layers").

    test/layers.py BUILD_DIR

Ranks, from the ground up: client, base, transport, core, routes, proto, kinds, then src/ itself (the wiring).
Three checks, each printing every breach with its place:

  includes  a file in src/LAYER/ includes only headers of its own folder and the main header (L/L.h) of a lower
            layer; src/client/ includes nothing of the engine (not even cbench.h) and no library but llhttp,
            nghttp2 (its h2c client session) and libc (and OpenSSL in tls_client.c alone, the TLS client session);
            src/load/ includes none of the engine's headers but client/client.h.
  headers   every function or variable a layer's header declares is defined in that layer (no upper-layer
            symbol declared in a lower header).
  calls     no object of a layer uses a symbol defined in a higher layer (read with nm from the objects that
            BUILD_DIR/obj holds: calls through tables and hooks are the only way up); client/'s objects use no
            library but llhttp, nghttp2 and libc (tls_client.o: OpenSSL too), and never allocate themselves (no
            malloc, calloc, realloc, free).

Exit 0 when all hold, 1 otherwise."""
import os
import re
import subprocess
import sys

LAYERS = ["client", "base", "transport", "core", "routes", "proto", "kinds"]
TOP = "top"
RANK = {name: i for i, name in enumerate(LAYERS + [TOP])}
THIRD_PARTY = {"cbench.h", "llhttp.h"}
# The client layer is shared with cbench-load: it stands on llhttp, nghttp2 (h2_client.c: nghttp2's HPACK decoder,
# and every block of the session from the allocator its caller gives) and libc alone.
CLIENT_THIRD_PARTY = {"llhttp.h"}
# OpenSSL is the client layer's fourth library, in its TLS session file alone (shared by cbench-load and the proxy).
CLIENT_TLS_FILE = os.path.join("src", "client", "tls_client.c")
CLIENT_TLS_SYMBOLS = re.compile(r"^(SSL_|OPENSSL_|EVP_|ERR_)")
CLIENT_NO_LIBS = re.compile(r"\s*#\s*include\s+<(uv\.h|uv/|openssl/|jansson\.h|zlib\.h|wslay/)")
CLIENT_NO_SYMBOLS = re.compile(r"^(uv_|SSL_|OPENSSL_|EVP_|ERR_|json_|deflate|inflate|wslay_|"
                               r"malloc$|calloc$|realloc$|free$|reallocarray$|strdup$|strndup$)")


def layer_of(path):
    parts = path.split(os.sep)
    if len(parts) >= 3 and parts[0] == "src" and parts[1] in RANK:
        return parts[1]
    if len(parts) == 2 and parts[0] == "src":
        return TOP
    return None


def sources():
    for root, _dirs, files in os.walk("src"):
        if root.startswith(os.path.join("src", "load")):
            continue
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(root, f)


def check_includes(breaches):
    for path in sources():
        layer = layer_of(path)
        folder = os.path.dirname(path)
        for no, line in enumerate(open(path, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            inc = m.group(1)
            if layer == "client" and inc in THIRD_PARTY and inc not in CLIENT_THIRD_PARTY:
                breaches.append(f"{path}:{no}: includes \"{inc}\": the client layer includes nothing of the engine")
                continue
            if inc in THIRD_PARTY:
                continue
            parts = inc.split("/")
            if layer == TOP:
                ok = len(parts) == 1 and os.path.exists(os.path.join("src", inc)) or \
                    len(parts) == 2 and parts[0] in LAYERS and parts[1] == parts[0] + ".h"
            elif len(parts) == 2 and parts[0] == layer:
                ok = os.path.exists(os.path.join(folder, parts[1]))
            elif len(parts) == 2 and parts[0] in LAYERS:
                ok = RANK[parts[0]] < RANK[layer] and parts[1] == parts[0] + ".h"
            else:
                ok = False
            if not ok:
                breaches.append(f"{path}:{no}: includes \"{inc}\": a {layer} file may include its own folder's "
                                f"headers and the main header of a lower layer only")
    for path in sources():
        if layer_of(path) != "client":
            continue
        for no, line in enumerate(open(path, encoding="utf-8"), 1):
            if CLIENT_NO_LIBS.match(line) and not (path == CLIENT_TLS_FILE and "<openssl/" in line):
                breaches.append(f"{path}:{no}: {line.strip()}: the client layer uses no library but llhttp, nghttp2 and libc")
    for root, _dirs, files in os.walk(os.path.join("src", "load")):
        for f in files:
            path = os.path.join(root, f)
            for no, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and m.group(1) == "client/client.h":
                    continue
                if m and "/" in m.group(1) or m and m.group(1) in ("engine.h", "testing.h"):
                    breaches.append(f"{path}:{no}: includes \"{m.group(1)}\": cbench-load stays apart from the engine")


def nm(obj, *flags):
    out = subprocess.run(["nm", *flags, obj], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def elf_undefined(obj):
    """The undefined symbols of the object's machine code. nm reads an LTO object's own symbol table, which
    leaves out calls to built-in functions (malloc, memcpy); readelf reads the ELF one of its code."""
    out = subprocess.run(["readelf", "-sW", obj], capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[6] == "UND" and parts[7]:
            names.append(parts[7])
    return names


def objects(build):
    objs = {}
    base = os.path.join(build, "obj")
    for layer in LAYERS:
        d = os.path.join(base, layer)
        if os.path.isdir(d):
            objs.update({os.path.join(d, f): layer for f in sorted(os.listdir(d)) if f.endswith(".o")})
    for f in sorted(os.listdir(base)):  # the wiring's objects: those of src/*.c (not stale ones of moved files)
        if f.endswith(".o") and os.path.exists(os.path.join("src", f[:-2] + ".c")):
            objs[os.path.join(base, f)] = TOP
    return objs


def check_calls(build, breaches):
    objs = objects(build)
    if not objs:
        breaches.append(f"{build}/obj: no objects (build the library first: make lib)")
        return {}
    defined = {}
    for obj, layer in objs.items():
        for line in nm(obj, "--defined-only", "-g"):
            parts = line.split()
            if len(parts) == 3 and parts[2].startswith("cb"):
                defined[parts[2]] = (layer, obj)
    for obj, layer in objs.items():
        if layer == "client":
            for name in elf_undefined(obj):
                if CLIENT_NO_SYMBOLS.match(name) and not (os.path.basename(obj) == "tls_client.o"
                                                          and CLIENT_TLS_SYMBOLS.match(name)):
                    breaches.append(f"{obj}: uses {name}: the client layer uses no library but llhttp, nghttp2 and libc, "
                                    f"and never allocates")
        for line in nm(obj, "-u"):
            parts = line.split()
            if len(parts) == 2 and parts[1] in defined:
                their, where = defined[parts[1]]
                if RANK[their] > RANK[layer]:
                    breaches.append(f"{obj}: uses {parts[1]} of {where}: {layer} reaches up to {their}")
    return defined


def check_headers(defined, breaches):
    for path in sources():
        layer = layer_of(path)
        if layer in (None, TOP) or not path.endswith(".h"):
            continue
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"static inline[^{]*\{", "{", text)
        names = set(re.findall(r"^(?:extern\s+)?[A-Za-z_][\w\s\*]*?\b(cb_?_?\w+)\s*\(", text, re.M))
        names |= set(re.findall(r"^extern\s+[^;(]*\b(cb_?_?\w+)\s*;", text, re.M))
        for name in sorted(names):
            if name in defined and defined[name][0] != layer:
                breaches.append(f"{path}: declares {name}, defined in {defined[name][1]} ({defined[name][0]})")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    breaches = []
    check_includes(breaches)
    defined = check_calls(sys.argv[1], breaches)
    check_headers(defined, breaches)
    for b in breaches:
        print(b)
    if breaches:
        print(f"layers: {len(breaches)} tie(s) against the layering (docs/architecture.md)")
        sys.exit(1)
    print(f"layers: {' < '.join(LAYERS)} < src/: every include, declaration and call is one-way")


if __name__ == "__main__":
    main()
