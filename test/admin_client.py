#!/usr/bin/env python3
"""A client of cbench-server's admin API (docs/routes.md, "The admin API") in the standard library only, and a
test that drives every endpoint with it: what a test suite in another language would do.

    test/admin_client.py DATA_URL ADMIN_URL

DATA_URL is the server's data listener (http://127.0.0.1:PORT), ADMIN_URL its --admin-port listener. The test
starts with POST /reset (and counts the counters from there); nothing else may use the server meanwhile. Prints one line per check that failed and exits 1 if any did."""

import json
import sys
import urllib.error
import urllib.parse
import urllib.request


class AdminError(Exception):
    """A 4xx or 5xx answer: status and the JSON body (field, why, value, message)."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


class Admin:
    """The admin API of one cbench-server."""

    def __init__(self, url):
        self.url = url.rstrip("/")

    def _call(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read()
                return r.status, (json.loads(text) if text else None), r.headers
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, (json.loads(text) if text else None), e.headers

    def _ok(self, method, path, body=None, raw=None):
        status, parsed, _ = self._call(method, path, body, raw)
        if status >= 400:
            raise AdminError(status, parsed)
        return parsed

    def add_stubs(self, stubs):
        """One stub (a dict) or a list of them, as in a stub file; returns their ids."""
        return self._ok("POST", "/stubs", stubs)["ids"]

    def remove_stub(self, stub_id):
        self._ok("DELETE", f"/stubs/{stub_id}")

    def stubs(self):
        return self._ok("GET", "/stubs")

    def requests(self, **filters):
        query = urllib.parse.urlencode(filters)
        return self._ok("GET", "/requests" + ("?" + query if query else ""))

    def clear_requests(self):
        self._ok("DELETE", "/requests")

    def near_misses(self):
        return self._ok("GET", "/near-misses")

    def verify(self):
        """(ok, problems): the expectations of the stubs ("expect") and the requests that matched nothing."""
        status, body, _ = self._call("POST", "/verify")
        if status not in (200, 409):
            raise AdminError(status, body)
        return body["ok"], body["problems"]

    def reset(self):
        self._ok("POST", "/reset")

    def stats(self):
        return self._ok("GET", "/stats")


failures = 0


def check(what, got, want):
    global failures
    if got != want:
        failures += 1
        print(f"admin_client: FAILED: {what}: got {got!r}, expected {want!r}", file=sys.stderr)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url, data):
    req = urllib.request.Request(url, data=data, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read()


def main(data_url, admin_url):
    a = Admin(admin_url)
    a.reset()
    check("no stubs after reset", a.stubs(), [])
    check("no requests after reset", a.requests(), [])
    before = a.stats()

    # Stubs: one, then a list; they answer on the data port.
    [order] = a.add_stubs({"name": "order", "match": {"method": "POST", "path": "/orders"},
                           "response": {"status": 201, "body": {"json": {"id": 7}}},
                           "expect": {"times": 1}})
    ids = a.add_stubs([{"match": {"path": "/users/{id}"}, "response": {"body": "user"}},
                       {"match": {"path": "/health"}, "expect": {"at_least": 2}}])
    check("ids in order", ids, [order + 1, order + 2])
    listed = a.stubs()
    check("stubs listed, first match first", [s["id"] for s in listed], [order + 2, order + 1, order])
    check("the order stub as listed",
          {k: v for k, v in listed[2].items()},
          {"id": order, "name": "order", "path": "/orders", "methods": ["POST"], "priority": 0, "status": 201,
           "times": 0, "hits": 0, "spent": False, "expect": {"times": 1}})

    # Nothing arrived yet: two expectations unmet.
    ok, problems = a.verify()
    check("verify before any request", (ok, [p["problem"] for p in problems]),
          (False, ["no_request_arrived", "no_request_arrived"]))
    check("the unmet expectation named", problems[0]["stub"], "POST /orders")

    check("POST /orders", post(data_url + "/orders", b'{"item": 1}'), (201, b'{"id":7}'))
    check("GET /users/3", get(data_url + "/users/3"), (200, b"user"))
    for _ in range(2):
        check("GET /health", get(data_url + "/health")[0], 200)
    ok, problems = a.verify()
    check("verify with every expectation met", (ok, problems), (True, []))

    # The journal, filtered; since; clearing it.
    orders = a.requests(path="/orders")
    check("journal: one POST /orders", [(r["method"], r["path"], r["body"], r["status"], r["stub_id"])
                                        for r in orders], [("POST", "/orders", '{"item": 1}', 201, order)])
    everything = a.requests()
    check("journal: four requests", len(everything), 4)
    later = a.requests(since=everything[1]["seq"])
    check("journal since the second", [r["path"] for r in later], ["/health", "/health"])
    check("journal limit", len(a.requests(limit=1)), 1)

    # A request nothing answers: 404, and verify names it.
    check("GET /nope", get(data_url + "/nope?x=1")[0], 404)
    ok, problems = a.verify()
    check("verify reports the stray request", (ok, problems),
          (False, [{"problem": "unexpected_request", "method": "GET", "path": "/nope", "query": "x=1",
                    "seq": everything[-1]["seq"] + 1, "status": 404}]))
    # Its near misses: the stubs scored as the 404's body scores them (path 4, method 2), equal scores in
    # matching order (the newest first).
    check("near misses of GET /nope", a.near_misses(),
          [{"seq": everything[-1]["seq"] + 1, "method": "GET", "path": "/nope", "query": "x=1",
            "near_misses": [{"name": f"stub_{order + 2}", "id": order + 2, "differs": ["path"]},
                            {"name": f"stub_{order + 1}", "id": order + 1, "differs": ["path"]},
                            {"name": "order", "id": order, "differs": ["method", "path"]}]}])

    # Counters.
    stats = a.stats()
    check("stats: requests", stats["requests"] - before["requests"], 5)
    check("stats: by route", (stats["requests_by_route"]["order"],
                              stats["requests_by_route"]["not_found"] - before["requests_by_route"]["not_found"]),
          (1, 1))

    # Errors name the field and why.
    for body, want in [
        ({"match": {"path": "/a", "pathx": 1}}, (400, "stubs[0].match.pathx", "unknown_key")),
        ([{"match": {"path": "/a"}}, {"match": {"path": "a"}}], (400, "stubs[1].match.path", "no_leading_slash")),
        ({"match": {"path": "/a"}, "expect": {"twice": 1}}, (400, "stubs[0].expect.twice", "unknown_key")),
        ({"match": {"path": "/a"}, "response": {"status": 99}}, (400, "stubs[0].response.status", "out_of_range")),
    ]:
        try:
            a.add_stubs(body)
            check(f"refused {body}", "accepted", want)
        except AdminError as e:
            check(f"refused {body}", (e.status, e.body.get("field"), e.body["why"]), want)
    try:
        a._ok("POST", "/stubs", raw=b'{"match": ')
        check("bad JSON", "accepted", 400)
    except AdminError as e:
        check("bad JSON", (e.status, e.body["why"]), (400, "bad_json"))
    try:
        a.requests(since="x")
        check("since=x", "accepted", 400)
    except AdminError as e:
        check("since=x", (e.status, e.body["field"], e.body["why"]), (400, "since", "wrong_type"))
    check("a refused stub adds nothing", len(a.stubs()), 3)

    # Removing a stub takes its expectation along; removing it again is 404.
    a.remove_stub(order)
    check("removed", [s["id"] for s in a.stubs()], [order + 2, order + 1])
    try:
        a.remove_stub(order)
        check("removed twice", "accepted", 404)
    except AdminError as e:
        check("removed twice", (e.status, e.body["why"]), (404, "not_found"))
    check("POST /orders after removal", post_status(data_url + "/orders"), 404)

    # Clear the journal, then reset everything.
    a.clear_requests()
    check("journal cleared", a.requests(), [])
    a.reset()
    check("reset: no stubs", a.stubs(), [])
    check("reset: verify ok", a.verify(), (True, []))
    check("reset: fixture routes again", get(data_url + "/hello"), (200, b"Hello, Joe!"))
    a.reset()
    return failures


def post_status(url):
    try:
        return post(url, b"")[0]
    except urllib.error.HTTPError as e:
        return e.code


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if main(sys.argv[1], sys.argv[2]) else 0)
