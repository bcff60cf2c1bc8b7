%% @doc A small SVG writer for the charts of a run: horizontal bars grouped by
%% case, one bar per engine, each group scaled to its own largest value (cases
%% differ by orders of magnitude, so one axis would flatten most of them), with the
%% value written at the end of each bar.
-module(cbench_bench_svg).

-export([bars/4, escape/1]).
%% The colours, shared with the client benchmark's line charts (cbench_clients_svg).
-export([palette/1]).

-define(W, 860).
-define(LEFT, 150).
-define(BAR, 14).
-define(GAP, 3).
-define(HEAD, 20).

%% @doc Title, engine names (in column order), and groups [{CaseLabel, [{Engine,
%% Value | undefined, Label}]}]. Returns the SVG document as iodata.
-spec bars(string(), [string()], [{string(), [{string(), number() | undefined, string()}]}], string()) -> iodata().
bars(Title, Engines, Groups, Note) ->
    Colors = maps:from_list(lists:zip(Engines, palette(length(Engines)))),
    LegendH = 24,
    Top = 40 + LegendH,
    {Body, H} = lists:foldl(fun(G, {Acc, Y}) ->
                                    {Svg, Y1} = group(G, Colors, Y),
                                    {[Acc, Svg], Y1}
                            end, {[], Top}, Groups),
    Height = H + 30,
    ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", int(?W), "\" height=\"", int(Height),
     "\" viewBox=\"0 0 ", int(?W), " ", int(Height), "\" font-family=\"sans-serif\" font-size=\"12\">\n",
     "<rect x=\"0\" y=\"0\" width=\"", int(?W), "\" height=\"", int(Height), "\" fill=\"#ffffff\"/>\n",
     text(10, 22, escape(Title), " font-size=\"16\" font-weight=\"bold\""),
     legend(Engines, Colors, 46),
     Body,
     text(10, Height - 10, escape(Note), " fill=\"#666666\" font-size=\"11\""),
     "</svg>\n"].

group({Label, Bars}, Colors, Y0) ->
    Max = lists:max([0 | [V || {_, V, _} <- Bars, is_number(V)]]),
    Head = text(10, Y0 + 14, escape(Label), " font-weight=\"bold\""),
    Line = ["<line x1=\"10\" y1=\"", int(Y0 + 2), "\" x2=\"", int(?W - 10), "\" y2=\"", int(Y0 + 2),
            "\" stroke=\"#dddddd\"/>\n"],
    {Rows, Y1} = lists:foldl(
                   fun({E, V, L}, {Acc, Y}) ->
                           Row = bar(E, V, L, Max, maps:get(E, Colors, "#888888"), Y),
                           {[Acc, Row], Y + ?BAR + ?GAP}
                   end, {[], Y0 + ?HEAD}, Bars),
    {[Line, Head, Rows], Y1 + 6}.

bar(E, V, L, Max, Color, Y) ->
    Span = ?W - ?LEFT - 120,
    Len = case is_number(V) andalso Max > 0 of
              true -> max(1, round(V / Max * Span));
              false -> 0
          end,
    [text(?LEFT - 8, Y + ?BAR - 3, escape(E), " text-anchor=\"end\""),
     case Len of
         0 -> [];
         _ -> ["<rect x=\"", int(?LEFT), "\" y=\"", int(Y), "\" width=\"", int(Len), "\" height=\"",
               int(?BAR), "\" fill=\"", Color, "\"><title>", escape(E), ": ", escape(L), "</title></rect>\n"]
     end,
     text(?LEFT + Len + 6, Y + ?BAR - 3, escape(L), "")].

legend(Engines, Colors, Y) ->
    {Items, _} = lists:foldl(
                   fun(E, {Acc, X}) ->
                           Item = ["<rect x=\"", int(X), "\" y=\"", int(Y - 10), "\" width=\"12\" height=\"12\" fill=\"",
                                   maps:get(E, Colors), "\"/>\n", text(X + 16, Y, escape(E), "")],
                           {[Acc, Item], X + 28 + 7 * length(E)}
                   end, {[], 10}, Engines),
    Items.

text(X, Y, T, Attrs) ->
    ["<text x=\"", int(X), "\" y=\"", int(Y), "\"", Attrs, ">", T, "</text>\n"].

int(I) -> integer_to_list(round(I)).

palette(N) ->
    P = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
         "#7f7f7f", "#bcbd22", "#17becf"],
    [lists:nth((I rem length(P)) + 1, P) || I <- lists:seq(0, N - 1)].

%% @doc Escapes text for XML content and attributes.
escape(S) when is_binary(S) -> escape(binary_to_list(S));
escape(S) ->
    lists:flatmap(fun($&) -> "&amp;"; ($<) -> "&lt;"; ($>) -> "&gt;"; ($") -> "&quot;";
                     (C) -> [C] end, lists:flatten(S)).
