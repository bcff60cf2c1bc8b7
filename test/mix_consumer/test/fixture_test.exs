defmodule FixtureTest do
  use ExUnit.Case

  test "a cbench fixture in an ExUnit test" do
    :cbench.with_server(:nif, %{port: 0}, fn server ->
      {:ok, {{_, 200, _}, _, body}} = :httpc.request(:cbench.url(server, "/hello"))
      assert body == 'Hello, Joe!'
      assert %{requests: 1} = :cbench.stats(server)
    end)
  end

  test "a server linked to the test process" do
    {:ok, server} = :cbench.start_link_server(:port, %{port: 0, threads: 1})
    {:ok, {{_, 200, _}, _, 'ok'}} = :httpc.request(:cbench.url(server, "delay/10"))
    :ok = :cbench.stop_server(server)
  end
end
