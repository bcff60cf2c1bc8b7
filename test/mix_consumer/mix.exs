# An Elixir project using cbench as a path dependency built by rebar3 (test/mix.sh runs it; docs/erlang.md shows
# it). A git dependency works the same way: {:cbench, git: "...", branch: "main", manager: :rebar3}.
defmodule Consumer.MixProject do
  use Mix.Project

  def project do
    [
      app: :consumer,
      version: "0.1.0",
      elixir: "~> 1.14",
      deps: [{:cbench, path: System.get_env("CBENCH_DIR", "../cbench"), manager: :rebar3}]
    ]
  end

  def application, do: [extra_applications: [:inets]]
end
