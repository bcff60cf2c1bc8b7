%% @doc A line chart for the client benchmark: req/s against concurrency, one line per series (a
%% client's pool shape), the concurrency on a log2 axis as the grid doubles it. Drawn without any
%% network access, like the server benchmark's bar charts (cbench_bench_svg).
-module(cbench_clients_svg).

-export([lines/4]).

-define(W, 860).
-define(H, 420).
-define(LEFT, 80).
-define(RIGHT, 200).
-define(TOP, 50).
-define(BOTTOM, 60).

%% @doc Title, Series [{Label, [{Concurrency, ReqPerSec}]}] and a note at the bottom. A series
%% with no point is listed in the legend only.
-spec lines(string(), [{string(), [{number(), number()}]}], string(), string()) -> iodata().
lines(Title, Series, YLabel, Note) ->
    Points = lists:append([Ps || {_, Ps} <- Series]),
    Xs = [X || {X, _} <- Points],
    {XMin, XMax} = case Xs of
                       [] -> {1, 2};
                       _ -> {lists:min(Xs), max(lists:max(Xs), lists:min(Xs) * 2)}
                   end,
    YMax = nice(lists:max([1 | [Y || {_, Y} <- Points]])),
    PlotW = ?W - ?LEFT - ?RIGHT,
    PlotH = ?H - ?TOP - ?BOTTOM,
    X = fun(V) -> ?LEFT + (math:log2(V) - math:log2(XMin)) / (math:log2(XMax) - math:log2(XMin)) * PlotW end,
    Y = fun(V) -> ?TOP + PlotH - V / YMax * PlotH end,
    Colors = palette(length(Series)),
    ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", int(?W), "\" height=\"", int(?H),
     "\" viewBox=\"0 0 ", int(?W), " ", int(?H), "\" font-family=\"sans-serif\" font-size=\"12\">\n",
     "<rect x=\"0\" y=\"0\" width=\"", int(?W), "\" height=\"", int(?H), "\" fill=\"#ffffff\"/>\n",
     text(10, 22, esc(Title), " font-size=\"16\" font-weight=\"bold\""),
     %% Axes, with a grid line and label at every power of two and at fifths of the y range.
     [[line(X(C), ?TOP, X(C), ?TOP + PlotH, "#eeeeee"),
       text(X(C), ?TOP + PlotH + 16, integer_to_list(C), " text-anchor=\"middle\"")]
      || C <- powers(XMin, XMax)],
     [[line(?LEFT, Y(V), ?LEFT + PlotW, Y(V), "#eeeeee"),
       text(?LEFT - 6, Y(V) + 4, cbench_bench_stats:fmt_int(V), " text-anchor=\"end\"")]
      || V <- [YMax * I div 5 || I <- lists:seq(0, 5)]],
     line(?LEFT, ?TOP + PlotH, ?LEFT + PlotW, ?TOP + PlotH, "#333333"),
     line(?LEFT, ?TOP, ?LEFT, ?TOP + PlotH, "#333333"),
     text(?LEFT + PlotW div 2, ?H - 28, "concurrency (log scale)", " text-anchor=\"middle\""),
     text(14, ?TOP - 10, esc(YLabel), ""),
     [series(Label, lists:keysort(1, Ps), Color, X, Y)
      || {{Label, Ps}, Color} <- lists:zip(Series, Colors)],
     legend(Series, Colors),
     text(10, ?H - 8, esc(Note), " fill=\"#666666\" font-size=\"11\""),
     "</svg>\n"].

series(_Label, [], _Color, _X, _Y) -> [];
series(Label, Ps, Color, X, Y) ->
    Coords = [[fmt(X(Cx)), ",", fmt(Y(Cy))] || {Cx, Cy} <- Ps],
    ["<polyline fill=\"none\" stroke=\"", Color, "\" stroke-width=\"2\" points=\"",
     lists:join(" ", Coords), "\"><title>", esc(Label), "</title></polyline>\n",
     [["<circle cx=\"", fmt(X(Cx)), "\" cy=\"", fmt(Y(Cy)), "\" r=\"3\" fill=\"", Color, "\"><title>",
       esc(Label), ", concurrency ", integer_to_list(Cx), ": ", cbench_bench_stats:fmt_int(Cy),
       "</title></circle>\n"] || {Cx, Cy} <- Ps]].

legend(Series, Colors) ->
    X0 = ?W - ?RIGHT + 16,
    %% As many entries as fit beside the plot; the rest are summed up in one line.
    Max = (?H - ?TOP - ?BOTTOM) div 16,
    Shown = lists:sublist(lists:zip(Series, Colors), Max),
    [[["<rect x=\"", int(X0), "\" y=\"", int(?TOP + I * 16 - 9), "\" width=\"10\" height=\"10\" fill=\"", C, "\"/>\n",
       text(X0 + 14, ?TOP + I * 16, esc(L), " font-size=\"11\"")]
      || {I, {{L, _}, C}} <- lists:zip(lists:seq(0, length(Shown) - 1), Shown)],
     case length(Series) - length(Shown) of
         N when N > 0 -> text(X0, ?TOP + Max * 16, "... and " ++ integer_to_list(N) ++ " more", " font-size=\"11\"");
         _ -> []
     end].

powers(Min, Max) ->
    [1 bsl E || E <- lists:seq(0, 40), 1 bsl E >= Min, 1 bsl E =< Max].

%% A round upper bound for the y axis: 1, 2 or 5 times a power of ten, divisible by 5.
nice(V) ->
    P = math:pow(10, floor(math:log10(V))),
    hd([round(M * P) || M <- [1, 2, 5, 10], M * P >= V, round(M * P) rem 5 =:= 0] ++ [round(10 * P)]).

line(X1, Y1, X2, Y2, Color) ->
    ["<line x1=\"", fmt(X1), "\" y1=\"", fmt(Y1), "\" x2=\"", fmt(X2), "\" y2=\"", fmt(Y2),
     "\" stroke=\"", Color, "\"/>\n"].

text(X, Y, T, Attrs) ->
    ["<text x=\"", fmt(X), "\" y=\"", fmt(Y), "\"", Attrs, ">", T, "</text>\n"].

esc(S) -> cbench_bench_svg:escape(S).

int(I) -> integer_to_list(round(I)).

fmt(F) -> integer_to_list(round(F)).

palette(N) -> cbench_bench_svg:palette(N).
