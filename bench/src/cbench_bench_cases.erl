%% @doc The cases the benchmark harness measures (make bench; docs/bench.md): the 15 of the route
%% contract, the Erlang handler cases, then roadrunner's scenarios (cbench_bench_roadrunner), each
%% as the path, body and headers its requests send. The report (cbench_bench_report) and the unit
%% tests read them too.
-module(cbench_bench_cases).

-export([cases/0, erl_cases/0, all_cases/0, case_spec/1]).

%% @doc The 15 cases of the route contract, in the order of the published tables.
-spec cases() -> [atom()].
cases() ->
    [hello, hello_headers, echo_1kb, echo_1kb_headers, echo_10kb, echo_chunked_10kb,
     file_tiny, file_small, file_big, stream, stream_small, stream_big, sse, sse_small, sse_big].

%% @doc {Path, BodyFile | undefined, ExtraHeaders} of a case.
-spec case_spec(atom()) -> {string(), string() | undefined, [{string(), string()}]}.
case_spec(hello) -> {"/hello", undefined, []};
case_spec(hello_headers) -> {"/hello", undefined, extra_headers()};
case_spec(echo_1kb) -> {"/echo", "body_1k", []};
case_spec(echo_1kb_headers) -> {"/echo", "body_1k", extra_headers()};
case_spec(echo_10kb) -> {"/echo", "body_10k", []};
case_spec(echo_chunked_10kb) -> {"/echo/chunked", "body_10k", []};
case_spec(file_tiny) -> {"/file/tiny", undefined, []};
case_spec(file_small) -> {"/file/small", undefined, []};
case_spec(file_big) -> {"/file/big", undefined, []};
case_spec(stream) -> {"/stream", undefined, []};
case_spec(stream_small) -> {"/stream/small", undefined, []};
case_spec(stream_big) -> {"/stream/big", undefined, []};
case_spec(sse) -> {"/sse", undefined, []};
case_spec(sse_small) -> {"/sse/small", undefined, []};
case_spec(sse_big) -> {"/sse/big", undefined, []};
case_spec(erl_hello) -> {"/erl/hello", undefined, []};
case_spec(erl_hello_unbatched) -> {"/erl/hello1", undefined, []};
case_spec(erl_echo_1kb) -> {"/erl/echo", "body_1k", []};
case_spec(C) -> cbench_bench_roadrunner:spec(C).

%% @doc The Erlang handler cases (issue 14): the answer comes from a process in the node
%% (cbench_bench_node installs the routes on the nif and ehttpd engines): erl_hello and
%% erl_echo_1kb with batching, erl_hello_unbatched one message per request.
-spec erl_cases() -> [atom()].
erl_cases() -> [erl_hello, erl_hello_unbatched, erl_echo_1kb].

%% @doc Every case the harness knows: the 15, the Erlang handler cases, then the roadrunner scenarios
%% the 15 lack.
-spec all_cases() -> [atom()].
all_cases() ->
    cases() ++ erl_cases() ++
        [C || C <- cbench_bench_roadrunner:cases(), cbench_bench_roadrunner:is_case(C)].

%% Seven extra headers, as a browser behind a proxy sends them.
extra_headers() ->
    [{"cookie", "session=7f3a9c2e41b84d0f; theme=dark"},
     {"cookie", "cart=3fa85f64-5717-4562-b3fc-2c963f66afa6"},
     {"cookie", "consent=analytics:0,ads:0"},
     {"x-request-id", "b7e4c2a0-6f1d-4c3e-9a58-1d2e3f4a5b6c"},
     {"x-client-version", "cbench-bench/1.0"},
     {"accept-language", "en-GB,en;q=0.9,fr;q=0.8"},
     {"x-forwarded-for", "203.0.113.7, 198.51.100.23"}].
