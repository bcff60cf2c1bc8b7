%%% @doc The fixture files of the Erlang engine: byte i is i rem 251, sizes 1,024 / 102,400 /
%%% 5,242,880, written once per node into a fresh temporary directory and removed by cleanup/0.
-module(cbench_fixture).

-compile({no_auto_import, [size/1]}).
-export([path/1, size/1, ensure/0, cleanup/0, bytes/2, fresh_dir/1]).

-define(KEY, {?MODULE, dir}).
%% The block generated bodies are sliced from: 261 periods of 251 bytes (65,511 bytes).
-define(BLOCK, 65511).

%% @doc The size in bytes of a fixture file.
-spec size(file_tiny | file_small | file_big) -> pos_integer().
size(file_tiny) -> 1024;
size(file_small) -> 102400;
size(file_big) -> 5242880.

%% @doc The path of a fixture file, writing the files first if this node has not yet.
-spec path(file_tiny | file_small | file_big) -> file:filename_all().
path(Route) ->
    filename:join(ensure(), atom_to_list(Route)).

%% @doc The expected content of a fixture file (for tests and for writing it).
-spec content(file_tiny | file_small | file_big) -> binary().
content(Route) ->
    Period = list_to_binary(lists:seq(0, 250)),
    N = size(Route),
    binary:part(binary:copy(Period, N div 251 + 1), 0, N).

%% @doc Len bytes of the generated content (byte i is i rem 251) from offset Off, as slices of one
%% block made once per node: the stubs' `{bytes, N}' bodies of the ehttpd engine.
-spec bytes(non_neg_integer(), non_neg_integer()) -> iodata().
bytes(Off, Len) ->
    Block = case persistent_term:get({?MODULE, block}, undefined) of
                undefined ->
                    B = binary:part(binary:copy(list_to_binary(lists:seq(0, 250)), 263), 0,
                                    ?BLOCK + 251),
                    persistent_term:put({?MODULE, block}, B),
                    B;
                B -> B
            end,
    slices(Block, Off rem 251, Len).

slices(_Block, _Start, 0) -> [];
slices(Block, Start, Len) when Len =< ?BLOCK -> [binary_part(Block, Start, Len)];
slices(Block, Start, Len) ->
    %% ?BLOCK is a multiple of 251, so the next slice starts at the same phase.
    [binary_part(Block, Start, ?BLOCK) | slices(Block, Start, Len - ?BLOCK)].

%% @doc Writes the files once per node and returns their directory.
-spec ensure() -> file:filename_all().
ensure() ->
    case persistent_term:get(?KEY, undefined) of
        undefined ->
            %% Serialised through a global lock so that two engines starting at once write one set.
            global:trans({?KEY, self()}, fun write/0, [node()]);
        Dir ->
            Dir
    end.

write() ->
    case persistent_term:get(?KEY, undefined) of
        undefined ->
            Dir = fresh_dir("cbench-erl"),
            [ok = file:write_file(filename:join(Dir, atom_to_list(R)), content(R))
             || R <- [file_tiny, file_small, file_big]],
            persistent_term:put(?KEY, lists:flatten(Dir)),
            lists:flatten(Dir);
        Dir ->
            Dir
    end.

%% @doc A new folder of our own under $TMPDIR (or /tmp), `Prefix-OSPID-N': a name that exists (a folder left by
%% an earlier node of the same OS pid that did not stop cleanly, whose counter started where ours did) is passed
%% over for the next one. The fixture files and cbench:load/2's files use it.
-spec fresh_dir(string()) -> file:filename().
fresh_dir(Prefix) ->
    Tmp = case os:getenv("TMPDIR") of
              false -> "/tmp";
              "" -> "/tmp";
              T -> T
          end,
    fresh_dir(Tmp, Prefix, 100).

fresh_dir(Tmp, Prefix, Tries) ->
    Dir = lists:flatten(filename:join(Tmp, io_lib:format("~s-~s-~b", [Prefix, os:getpid(),
                                                                        erlang:unique_integer([positive])]))),
    case file:make_dir(Dir) of
        ok -> Dir;
        {error, eexist} when Tries > 1 -> fresh_dir(Tmp, Prefix, Tries - 1);
        {error, Reason} -> error({tmp_dir, Dir, Reason})
    end.

%% @doc Removes the files (at application stop); the next ensure/0 writes them again.
-spec cleanup() -> ok.
cleanup() ->
    case persistent_term:get(?KEY, undefined) of
        undefined -> ok;
        Dir ->
            [file:delete(filename:join(Dir, atom_to_list(R)))
             || R <- [file_tiny, file_small, file_big]],
            _ = file:del_dir(Dir),
            _ = persistent_term:erase(?KEY),
            ok
    end.
