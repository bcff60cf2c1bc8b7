%%% @doc Record once, replay offline (docs/record.md, "The replay helper"): a server for a test suite
%%% that answers from `Dir/Name.json' (replay mode, the default), or proxies to the real service and
%%% records what it answers (record mode: `CBENCH_RECORD=1' in the environment, or `record => true'),
%%% saving the file when it stops.
%%%
%%% ```
%%% init_per_suite(Config) ->
%%%     {ok, S} = cbench_record:server(payments, "http://127.0.0.1:8080",
%%%                                    #{dir => ?config(data_dir, Config)}),
%%%     [{server, S} | Config].
%%% end_per_suite(Config) ->
%%%     ok = cbench_record:stop(?config(server, Config)).
%%% '''
-module(cbench_record).

-export([server/3, stop/1, mode/1]).
-ignore_xref([{server, 3}, {stop, 1}, {mode, 1}]).

-type opts() :: #{dir => file:name_all(), engine => nif | port | ehttpd, server => map(), record => boolean(),
                  record_headers => [iodata()], record_body_file_bytes => non_neg_integer(),
                  record_status => [200..599]}.
-export_type([opts/0]).

-define(KEYS, [dir, engine, server, record, record_headers, record_body_file_bytes, record_status]).

%% @doc Starts a server for Name. Replay: the stubs of `Dir/Name.json' (`{error, {no_recording,
%% File}}' when there is none: record it first with CBENCH_RECORD=1). Record: a catch-all proxy stub
%% to Upstream (`"http://host:port"') with `record => true' and the record_* options; stop/1 saves
%% the file. Opts: `dir' (default "test/recordings"), `engine' (nif, port or ehttpd; default nif), `server'
%% (cbench:start_server/2's options; default `#{port => 0}'), `record', and the proxy's
%% `record_headers', `record_body_file_bytes', `record_status'.
-spec server(atom() | iodata(), iodata(), opts()) -> {ok, cbench:server()} | {error, term()}.
server(Name, Upstream, Opts) when is_map(Opts), (is_atom(Name) orelse is_list(Name) orelse is_binary(Name)) ->
    case maps:keys(Opts) -- ?KEYS of
        [] -> start(mode(Opts), file(Name, Opts), Upstream, Opts);
        [Key | _] -> {error, {bad_option, Key}}
    end;
server(_, _, _) ->
    error(badarg).

%% @doc `record' when Opts say `record => true', or when they do not say and the environment has
%% CBENCH_RECORD=1; `replay' otherwise.
-spec mode(opts()) -> record | replay.
mode(#{record := true}) -> record;
mode(#{record := false}) -> replay;
mode(_) ->
    case os:getenv("CBENCH_RECORD") of
        "1" -> record;
        _ -> replay
    end.

%% @doc Stops a server of server/3; in record mode the recordings are saved first (the file's
%% folder is made when missing). ok, or the save's `{error, Reason}' (the server is stopped anyway).
-spec stop(cbench:server()) -> ok | {error, term()}.
stop(S) when is_pid(S) ->
    Saved = case persistent_term:get({?MODULE, S}, undefined) of
                undefined -> ok;
                File ->
                    _ = persistent_term:erase({?MODULE, S}),
                    ok = filelib:ensure_dir(File),
                    cbench:save_stubs(S, File)
            end,
    _ = cbench:stop_server(S),
    Saved;
stop(_) ->
    error(badarg).

file(Name, Opts) ->
    Dir = maps:get(dir, Opts, "test/recordings"),
    filename:absname(filename:join(Dir, iolist_to_binary([to_iodata(Name), ".json"]))).

to_iodata(A) when is_atom(A) -> atom_to_binary(A);
to_iodata(N) -> N.

start(replay, File, _Upstream, Opts) ->
    case filelib:is_regular(File) of
        false -> {error, {no_recording, File}};
        true ->
            with_server(Opts, fun(S) ->
                                      case cbench:load_stubs(S, File) of
                                          {ok, _} -> ok;
                                          Error -> Error
                                      end
                              end)
    end;
start(record, File, Upstream, Opts) ->
    Proxy = maps:merge(#{to => Upstream, record => true},
                       maps:with([record_headers, record_body_file_bytes, record_status], Opts)),
    Match = #{path => <<"/*">>, method => any, priority => -1000000, name => <<"proxy_all">>},
    with_server(Opts, fun(S) ->
                              case cbench:stub(S, Match, #{proxy => Proxy}) of
                                  {ok, _} -> persistent_term:put({?MODULE, S}, File);
                                  Error -> Error
                              end
                      end).

%% Starts the server and runs Setup on it; a setup that fails stops it again.
with_server(Opts, Setup) ->
    Engine = maps:get(engine, Opts, nif),
    case cbench:start_server(Engine, maps:get(server, Opts, #{port => 0})) of
        {ok, S} ->
            case Setup(S) of
                ok -> {ok, S};
                Error ->
                    _ = cbench:stop_server(S),
                    Error
            end;
        Error -> Error
    end.
