%% @doc The servers under test: the node with cbench's nif, port and ehttpd engines,
%% inets httpd, and mochiweb and yaws when installed, the cbench-server CLI, nginx and h2o with generated configs,
%% and any running server given with --target. Each is an engine map:
%%
%%   name      the column name in the tables
%%   kind      node | proc | target
%%   urls      #{h1 => Base, h2c => Base} (base URLs without a path)
%%   pids      fun() -> [OsPid] (the processes whose resources are counted)
%%   mem       fun() -> Bytes, or undefined (erlang:memory(total) of the node)
%%   version   text for the report
%%   cbench    true for cbench's own engines (they serve every route)
%%   alive     fun() -> boolean()
%%
%% Everything started here is pinned to the server CPUs and stopped by stop_all/1.
-module(cbench_bench_servers).

-export([start_node/1, node_engines/2, start_cbench_server/1, start_nginx/1,
         start_h2o/1, target/2, stop_all/1, write_fixtures/1, url/3]).

-define(NODE_ENGINES, [nif, port, ehttpd, httpd, mochiweb, yaws]).

%% @doc The full URL of Path on an engine for a protocol, or undefined.
-spec url(map(), h1 | h2c, string()) -> string() | undefined.
url(#{urls := U}, Proto, Path) ->
    case maps:find(Proto, U) of
        {ok, Base} -> Base ++ Path;
        error -> undefined
    end.

%% @doc Fixture files as the route contract defines them (byte i is i rem 251),
%% the request bodies, and the /hello file h2o serves, under Dir.
-spec write_fixtures(file:filename()) -> ok.
write_fixtures(Dir) ->
    ok = filelib:ensure_path(filename:join(Dir, "file")),
    [ok = file:write_file(filename:join([Dir, "file", N]), pattern(S))
     || {N, S} <- [{"tiny", 1024}, {"small", 102400}, {"big", 5242880}]],
    ok = file:write_file(filename:join(Dir, "hello"), <<"Hello, Joe!">>),
    Line = <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>,
    ok = file:write_file(filename:join(Dir, "body_1k"), binary:copy(Line, 16)),
    ok = file:write_file(filename:join(Dir, "body_10k"), binary:copy(Line, 160)),
    %% The roadrunner scenarios: a 64-byte echo body, /large and /gzip as the peers serve them,
    %% and the router's 100 stubs for cbench-server.
    ok = file:write_file(filename:join(Dir, "body_64"), Line),
    ok = file:write_file(filename:join(Dir, "large"), pattern(65536)),
    %% Out of the document root httpd serves: it would send it uncompressed.
    ok = filelib:ensure_path(filename:join(Dir, "gzip-plain")),
    ok = file:write_file(filename:join([Dir, "gzip-plain", "gzip"]), cbench_bench_roadrunner:gzip_json()),
    ok = cbench_bench_roadrunner:router_stubs_json(filename:join(Dir, "router-stubs.json")),
    ok.

pattern(Size) ->
    Cycle = list_to_binary(lists:seq(0, 250)),
    Whole = binary:copy(Cycle, Size div 251 + 1),
    binary:part(Whole, 0, Size).

%% ---------------------------------------------------------------------------
%% The node under test

%% @doc Starts the node (`erl +S N +sbt db +sbwt none', pinned to the server CPUs)
%% with the bench modules and, when built, cbench's ebin on its path.
-spec start_node(map()) -> {ok, pid(), [string()]} | {error, term()}.
start_node(#{server_cpus := Cpus, schedulers := S, root := Root}) ->
    Erl = os:find_executable("erl"),
    BenchEbin = filename:join([Root, "bench", "ebin"]),
    CbEbin = filename:join([Root, "_build", "default", "lib", "cbench", "ebin"]),
    Paths = ["-pa", BenchEbin] ++ case filelib:is_dir(CbEbin) of
                                      true -> ["-pa", CbEbin];
                                      false -> []
                                  end,
    Args = ["+S", integer_to_list(S), "+sbt", "db", "+sbwt", "none",
            "+sbwtdcpu", "none", "+sbwtdio", "none"] ++ Paths,
    try peer:start_link(#{connection => standard_io,
                          exec => {"/usr/bin/taskset", ["-c", Cpus, Erl]},
                          args => Args, wait_boot => 30000}) of
        {ok, Peer, _} -> {ok, Peer, Args};
        Other -> {error, Other}
    catch C:R -> {error, {C, R}}
    end.

%% @doc Starts the engines wanted in the node and returns their engine maps and
%% notes for those skipped.
node_engines(Peer, Opts = #{threads := T, docroot := Doc, engines := Wanted0}) ->
    Wanted = [E || E <- ?NODE_ENGINES, lists:member(atom_to_list(E), Wanted0)],
    Info = peer:call(Peer, cbench_bench_node, setup,
                     [#{threads => T, docroot => Doc, engines => Wanted,
                        router => maps:get(router, Opts, false)}], 60000),
    #{engines := Es, os_pid := NodePid} = Info,
    Mem = fun() -> peer:call(Peer, erlang, memory, [total], 2000) end,
    Alive = fun() -> is_process_alive(Peer) andalso
                         cbench_bench_os:proc_sample(NodePid) =/= undefined end,
    Vsn = fun(httpd) -> "inets " ++ str(maps:get(inets_vsn, Info));
             (mochiweb) -> "mochiweb " ++ str(maps:get(mochiweb_vsn, Info));
             (yaws) -> "yaws " ++ str(maps:get(yaws_vsn, Info));
             (_) -> "cbench " ++ str(maps:get(cbench_vsn, Info))
          end,
    Cbench = fun(E) -> lists:member(E, [nif, port, ehttpd]) end,
    Results =
        [case maps:get(E, Es) of
             {ok, Port} ->
                 Base = "http://127.0.0.1:" ++ integer_to_list(Port),
                 {ok, #{name => atom_to_list(E), kind => node,
                        urls => #{h1 => Base, h2c => Base},
                        pids => node_pids(E, NodePid), mem => Mem, alive => Alive,
                        version => Vsn(E), cbench => Cbench(E)}};
             {skip, Why} -> {skip, atom_to_list(E), binary_to_list(Why)}
         end || E <- Wanted],
    {Results, Info}.

str(undefined) -> "?";
str(B) when is_binary(B) -> binary_to_list(B);
str(L) -> L.

%% The port engine's own OS process is counted with the node: it is a descendant
%% of the node (through erl_child_setup) named cbench_port.
node_pids(port, NodePid) ->
    fun() ->
            Kids = cbench_bench_os:descendants(NodePid),
            Named = [K || K <- Kids, lists:prefix("cbench_port", cbench_bench_os:comm(K))],
            [NodePid | Named]
    end;
node_pids(_, NodePid) ->
    fun() -> [NodePid] end.

%% ---------------------------------------------------------------------------
%% Processes

proc_engine(Name, Owner, Urls, Version) ->
    #{name => Name, kind => proc, urls => Urls, owner => Owner,
      pids => fun() ->
                      case cbench_bench_os:os_pid(Owner) of
                          P when is_integer(P) -> [P | cbench_bench_os:descendants(P)];
                          _ -> []
                      end
              end,
      mem => undefined, version => Version, cbench => false,
      alive => fun() -> cbench_bench_os:alive(Owner) end}.

%% @doc cbench-server standalone, --threads N pinned to the server CPUs.
-spec start_cbench_server(map()) -> {ok, map()} | {skip, string(), string()}.
start_cbench_server(Opts = #{root := Root, server_cpus := Cpus, threads := T}) ->
    Exe = filename:join([Root, "build", "cbench-server"]),
    case filelib:is_regular(Exe) of
        false -> {skip, "cbench-server", "build/cbench-server is not built (make lib)"};
        true ->
            Port = cbench_bench_os:free_port(),
            Args = ["-c", Cpus, Exe, "--host", "127.0.0.1", "--port", integer_to_list(Port),
                    "--threads", integer_to_list(T), "--cpus", Cpus]
                ++ router_stubs(Opts),
            Ready = fun(Out) -> binary:match(Out, <<"listening on">>) =/= nomatch end,
            case cbench_bench_os:start("cbench-server", "/usr/bin/taskset", Args, Ready) of
                {ok, Owner} ->
                    Base = "http://127.0.0.1:" ++ integer_to_list(Port),
                    E = proc_engine("cbench-server", Owner, #{h1 => Base, h2c => Base},
                                    "cbench " ++ git_rev(Root)),
                    {ok, E#{cbench => true}};
                {error, Why, Out} ->
                    {skip, "cbench-server", fmt("did not start (~0p): ~s", [Why, last_line(Out)])}
            end
    end.

%% The 100 routes of varied_paths_router, when that scenario is measured.
router_stubs(#{router := true, docroot := Doc}) -> ["--stubs", filename:join(Doc, "router-stubs.json")];
router_stubs(_) -> [].

%% @doc nginx, one worker, serving /hello with `return 200' and the files from a
%% root; HTTP/1.1 on one port and h2c (prior knowledge) on another, since nginx
%% cannot offer both on one cleartext port.
-spec start_nginx(map()) -> {ok, map()} | {skip, string(), string()}.
start_nginx(#{tmp := Tmp, docroot := Doc, server_cpus := Cpus}) ->
    case os:find_executable("nginx", "/usr/sbin:/usr/bin:/sbin:/usr/local/sbin") of
        false -> {skip, "nginx", "nginx is not installed (apt-get install nginx-light)"};
        Exe ->
            Dir = filename:join(Tmp, "nginx"),
            ok = filelib:ensure_path(Dir),
            P1 = cbench_bench_os:free_port(),
            P2 = cbench_bench_os:free_port(),
            Conf = filename:join(Dir, "nginx.conf"),
            ok = file:write_file(Conf, nginx_conf(Dir, Doc, P1, P2)),
            Args = ["-c", Cpus, Exe, "-p", Dir, "-c", Conf],
            case start_and_connect("nginx", Args, P1) of
                {ok, Owner} ->
                    {ok, proc_engine("nginx", Owner,
                                     #{h1 => base(P1), h2c => base(P2)},
                                     "nginx " ++ version(Exe ++ " -v", "nginx/([0-9.]+)"))};
                {error, Why} -> {skip, "nginx", Why}
            end
    end.

nginx_conf(Dir, Doc, P1, P2) ->
    io_lib:format(
      "# generated by the cbench harness\n"
      "daemon off;\nmaster_process on;\nworker_processes 1;\n"
      "pid ~s/nginx.pid;\nerror_log ~s/error.log warn;\n"
      "events { worker_connections 4096; }\n"
      "http {\n"
      "  access_log off;\n"
      "  client_body_temp_path ~s/body;\n  proxy_temp_path ~s/proxy;\n"
      "  fastcgi_temp_path ~s/fastcgi;\n  uwsgi_temp_path ~s/uwsgi;\n  scgi_temp_path ~s/scgi;\n"
      "  sendfile on;\n  tcp_nodelay on;\n"
      "  keepalive_requests 1000000000;\n  keepalive_timeout 120s;\n"
      "  server {\n"
      "    listen 127.0.0.1:~b;\n    listen 127.0.0.1:~b http2;\n"
      "    location = /hello { default_type text/plain; return 200 'Hello, Joe!'; }\n"
      "    location /file/ { root ~s; default_type application/octet-stream; }\n"
      %% The roadrunner scenarios nginx can serve: /json, /large as a file, /gzip compressed
      %% by its gzip module (per request: it has no compress-once), the router as 100
      %% exact locations.
      "    location = /json { default_type application/json; return 200 '{\"message\":\"Hello, Joe!\"}'; }\n"
      "    location = /large { root ~s; default_type application/octet-stream; }\n"
      "    location = /gzip { root ~s/gzip-plain; default_type application/json; gzip on; gzip_types application/json;\n"
      "                       gzip_comp_level 6; gzip_min_length 0; gzip_vary on; }\n"
      "~s"
      "    location / { return 404; }\n"
      "  }\n"
      "}\n", [Dir, Dir, Dir, Dir, Dir, Dir, Dir, P1, P2, Doc, Doc, Doc,
               [io_lib:format("    location = ~s { default_type text/plain; return 200 'Hello, Joe!'; }\n", [P])
                || P <- cbench_bench_roadrunner:router_paths()]]).

%% The version a peer prints (on stdout or stderr) for Cmd, matched by Re; "?" if none.
version(Cmd, Re) ->
    case re:run(os:cmd(Cmd ++ " 2>&1"), Re, [{capture, all_but_first, list}]) of
        {match, [V]} -> V;
        nomatch -> "?"
    end.

%% @doc h2o, one thread, serving the files (and /hello as a file) from a directory
%% and POST /echo with a small mruby handler (which reads the body whole, so it
%% refuses /echo/chunked); HTTP/1.1 and h2c on one port.
-spec start_h2o(map()) -> {ok, map()} | {skip, string(), string()}.
start_h2o(#{tmp := Tmp, docroot := Doc, server_cpus := Cpus}) ->
    case os:find_executable("h2o") of
        false -> {skip, "h2o", "h2o is not installed (apt-get install h2o)"};
        Exe ->
            Dir = filename:join(Tmp, "h2o"),
            ok = filelib:ensure_path(Dir),
            P = cbench_bench_os:free_port(),
            Conf = filename:join(Dir, "h2o.conf"),
            ok = file:write_file(Conf, h2o_conf(Dir, Doc, P)),
            Args = ["-c", Cpus, Exe, "-c", Conf],
            case start_and_connect("h2o", Args, P) of
                {ok, Owner} ->
                    {ok, proc_engine("h2o", Owner, #{h1 => base(P), h2c => base(P)},
                                     "h2o " ++ version(Exe ++ " --version", "h2o version ([0-9.]+)"))};
                {error, Why} -> {skip, "h2o", Why}
            end
    end.

h2o_conf(Dir, Doc, P) ->
    User = case os:getenv("USER") of
               "root" -> "user: nobody\n";
               _ -> case cbench_bench_os:cmd("id -u") of
                        "0" -> "user: nobody\n";
                        _ -> ""
                    end
           end,
    io_lib:format(
      "# generated by the cbench harness\n"
      "~s"
      "num-threads: 1\n"
      "error-log: ~s/error.log\n"
      "http1-request-timeout: 120\n"
      "http2-idle-timeout: 120\n"
      "listen:\n  host: 127.0.0.1\n  port: ~b\n"
      "hosts:\n"
      "  default:\n"
      "    paths:\n"
      "      /echo:\n"
      "        mruby.handler: |\n"
      "          Proc.new do |env|\n"
      "            if env[\"PATH_INFO\"].to_s.empty? && env[\"REQUEST_METHOD\"] == \"POST\"\n"
      "              [200, {\"content-type\" => \"application/octet-stream\"}, [env[\"rack.input\"].read]]\n"
      "            else\n"
      "              [404, {}, []]\n"
      "            end\n"
      "          end\n"
      "      /:\n"
      "        file.dir: ~s\n", [User, Dir, P, Doc]).

start_and_connect(Tag, Args, Port) ->
    Ready = fun(_) -> cbench_bench_os:wait_tcp(Port, 1, 0) end,
    case cbench_bench_os:start(Tag, "/usr/bin/taskset", Args, Ready) of
        {ok, Owner} -> {ok, Owner};
        {error, Why, Out} -> {error, fmt("did not start (~0p): ~s", [Why, last_line(Out)])}
    end.

%% @doc A running server given as --target NAME=URL; its resources are not sampled.
-spec target(string(), string()) -> map().
target(Name, Url) ->
    Base = string:trim(Url, trailing, "/"),
    #{name => Name, kind => target, urls => #{h1 => Base, h2c => Base},
      pids => fun() -> [] end, mem => undefined, version => Base, cbench => false,
      alive => fun() -> true end}.

%% @doc Stops every process engine and the node.
-spec stop_all(map()) -> ok.
stop_all(St = #{engines := Es, peer := Peer}) ->
    [cbench_bench_os:stop(O) || #{kind := proc, owner := O} <- Es],
    case Peer of
        undefined -> ok;
        _ -> catch peer:stop(Peer)
    end,
    cbench_bench_os:rm_pidfile(maps:get(node_pidfile, St, undefined)),
    ok.

base(P) -> "http://127.0.0.1:" ++ integer_to_list(P).

git_rev(Root) ->
    case cbench_bench_os:cmd("git -C " ++ Root ++ " rev-parse --short HEAD 2>/dev/null") of
        "" -> "(uncommitted)";
        R -> case lists:prefix("fatal", R) of true -> "(uncommitted)"; false -> R end
    end.

last_line(Out) ->
    case binary:split(Out, <<"\n">>, [global, trim_all]) of
        [] -> "no output";
        Ls -> binary_to_list(lists:last(Ls))
    end.

fmt(F, A) -> lists:flatten(io_lib:format(F, A)).
