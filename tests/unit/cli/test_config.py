"""Where `onyx` options come from: command line over environment over config file over default,
each value through its option's own check, over the real parser of every command."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer import cli, config

CLUSTER = ["--zookeeper", "zk:2181", "--tenancy", "t"]


def parse(argv, environ=None, toml=None, tmp_path=None):
    """`onyx` argv parsed as main parses it, with ``toml`` as the config file if given."""
    environ = dict(environ or {})
    if toml is not None:
        path = tmp_path / f"onyx-{abs(hash(toml))}.toml"
        path.write_text(toml)
        environ[config.CONFIG_VARIABLE] = str(path)
    return cli.parse_args(argv, environ)


def refused(capsys, argv, environ=None, toml=None, tmp_path=None) -> str:
    with pytest.raises(SystemExit) as exit_:
        parse(argv, environ, toml, tmp_path)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("onyx: error: ")
    return lines[0]


@settings(max_examples=60, deadline=None)
@given(
    cli_value=st.none() | st.integers(1, 10_000),
    env_value=st.none() | st.integers(1, 10_000),
    file_value=st.none() | st.integers(1, 10_000),
)
def test_command_line_over_environment_over_file_over_default(
    tmp_path_factory, cli_value, env_value, file_value
):
    tmp_path = tmp_path_factory.mktemp("precedence")
    argv = ["peer", "start", *CLUSTER]
    if cli_value is not None:
        argv += ["--vpeers", str(cli_value)]
    environ = {} if env_value is None else {"ONYX_VPEERS": str(env_value)}
    toml = "" if file_value is None else f"vpeers = {file_value}\n"
    args = parse(argv, environ, toml, tmp_path)
    expected = next(v for v in (cli_value, env_value, file_value, 1) if v is not None)
    assert args.vpeers == expected


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12))
def test_an_environment_value_is_checked_as_the_command_line_checks_it(text):
    """Whatever the text, ONYX_CONNECT_TIMEOUT gives what --connect-timeout=TEXT gives, or both
    refuse it with exit 2."""

    def outcome(argv, environ):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                return "ok", cli.parse_args(argv, environ).connect_timeout
        except SystemExit as e:
            return "refused", e.code

    base = ["replica", *CLUSTER]
    from_cli = outcome([*base, f"--connect-timeout={text}"], {})
    from_env = outcome(base, {"ONYX_CONNECT_TIMEOUT": text})
    assert from_cli == from_env


@pytest.mark.parametrize("text", ["inf", "nan", "-1", "0", "1e300", "x"])
def test_timeouts_are_positive_and_finite(capsys, text):
    line = refused(capsys, ["replica", *CLUSTER, "--connect-timeout", text])
    assert "--connect-timeout" in line
    assert repr(text) in line


def test_values_from_a_file_and_the_environment_reach_every_kind_of_option(tmp_path):
    toml = 'zookeeper = "zk1:2181,zk2:2181"\ntenancy = "prod"\nspark_conf = [" a=1", "b=2"]\n'
    args = parse(["peer", "start"], {"ONYX_PORT": "4000", "ONYX_MTU": "8192"}, toml, tmp_path)
    assert (args.zookeeper, args.tenancy) == ("zk1:2181,zk2:2181", "prod")
    assert args.spark_conf == ["a=1", "b=2"]
    assert (args.port, args.mtu, args.vpeers, args.bind) == (4000, 8192, 1, "127.0.0.1")


def test_a_list_on_the_command_line_replaces_the_environment_s():
    environ = {"ONYX_SPARK_CONF": '["a=1", "b=2"]'}
    assert parse(["run"], environ).spark_conf == ["a=1", "b=2"]
    assert parse(["run", "--spark-conf", "c=3"], environ).spark_conf == ["c=3"]
    assert parse(["run"], {"ONYX_SPARK_CONF": "only=one"}).spark_conf == ["only=one"]


@pytest.mark.parametrize(
    ("environ", "toml"),
    [({}, 'seed_nodes = ["a:1, b:2", "c:3"]\n'), ({}, '[peer.start]\nseed_nodes = "a:1,b:2,c:3"\n'),
     ({"ONYX_SEED_NODES": "a:1,b:2,c:3"}, ""), ({"ONYX_SEED_NODES": '["a:1,b:2", "c:3"]'}, "")],
)  # fmt: skip
def test_seed_nodes_are_one_list_from_a_file_array_a_comma_string_or_the_environment(
    tmp_path, environ, toml
):
    args = parse(["peer", "start", *CLUSTER], environ, toml, tmp_path)
    assert args.seed_nodes == ["a:1", "b:2", "c:3"]
    argv = ["peer", "start", *CLUSTER, "--seed-nodes", "d:4,e:5", "--seed-nodes", "f:6"]
    assert parse(argv, environ, toml, tmp_path).seed_nodes == ["d:4", "e:5", "f:6"]
    assert parse(["peer", "start", *CLUSTER]).seed_nodes == []


@pytest.mark.parametrize(("word", "value"), [("yes", True), ("1", True), ("false", False)])
def test_a_flag_from_the_environment(word, value):
    assert parse(["replica", *CLUSTER], {"ONYX_JSON": word}).json is value


def test_a_command_s_table_overrides_the_top_level_and_other_commands_ignore_it(tmp_path):
    toml = (
        'zookeeper = "zk:2181"\ntenancy = "t"\nvpeers = 2\ntimeout = 5\n'
        "[peer.start]\nvpeers = 7\n[job.wait]\ntimeout = 9\n"
    )
    assert parse(["peer", "start"], toml=toml, tmp_path=tmp_path).vpeers == 7
    assert parse(["run"], toml=toml, tmp_path=tmp_path).vpeers == 2
    assert parse(["job", "wait", "ID"], toml=toml, tmp_path=tmp_path).timeout == 9
    assert parse(["run"], toml=toml, tmp_path=tmp_path).timeout == 5
    # vpeers is no option of replica: a shared file still serves it.
    assert parse(["replica"], toml=toml, tmp_path=tmp_path).tenancy == "t"


def test_config_on_the_command_line_over_onyx_config(tmp_path):
    chosen = tmp_path / "chosen.toml"
    chosen.write_text('tenancy = "chosen"\n')
    other = tmp_path / "other.toml"
    other.write_text('tenancy = "other"\n')
    argv = ["replica", "--zookeeper", "zk:1", "--config", str(chosen)]
    assert parse(argv, {"ONYX_CONFIG": str(other)}).tenancy == "chosen"


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"ONYX_VPEERS": "0"}, ["ONYX_VPEERS", "'0'", "at least 1"]),
        ({"ONYX_ZOOKEEPER": "nohost"}, ["ONYX_ZOOKEEPER", "'nohost'"]),
        ({"ONYX_LOG_LEVEL": "loud"}, ["ONYX_LOG_LEVEL", "'loud'", "debug"]),
        ({"ONYX_SPARK_CONF": '["a=1", 2]'}, ["ONYX_SPARK_CONF", "array of strings"]),
        ({"ONYX_SPARK_CONF": "novalue"}, ["ONYX_SPARK_CONF", "KEY=VALUE"]),
        ({"ONYX_SEED_NODES": "a:1,b"}, ["ONYX_SEED_NODES", "'a:1,b'", "'b' has no port"]),
    ],
)
def test_a_bad_environment_value_names_its_variable(capsys, environ, words):
    line = refused(
        capsys, ["peer", "start", "--tenancy", "t"], {"ONYX_ZOOKEEPER": "zk:1", **environ}
    )
    for word in words:
        assert word in line


def test_a_bad_flag(capsys, tmp_path):
    line = refused(capsys, ["replica", *CLUSTER], {"ONYX_JSON": "maybe"})
    assert "ONYX_JSON" in line
    line = refused(capsys, ["replica", *CLUSTER], toml='json = "yes"\n', tmp_path=tmp_path)
    assert "json: 'yes' is not true or false" in line


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ("vpeers = 0\n", ["vpeers", "at least 1"]),
        ('vpeers = "many"\n', ["vpeers", "'many'"]),
        ("vpeers = true\n", ["vpeers", "not a string or a number"]),
        ("[peer.start]\nsession_timeout = inf\n", ["peer.start.session_timeout", "'inf'"]),
        ("vpeer = 3\n", ["unknown key 'vpeer'", "did you mean 'vpeers'"]),
        ("[peer.strat]\nvpeers = 3\n", ["unknown key 'peer.strat'"]),
        ("[replica]\nvpeers = 3\n", ["unknown key 'replica.vpeers'", "`onyx replica`"]),
        ("vpeers = [\n", ["is not TOML"]),
        ('seed_nodes = ["a:1", "b:0"]\n', ["seed_nodes", "'b:0'", "not a port"]),
        ('[peer.start]\nseed_nodes = ":1"\n', ["peer.start.seed_nodes", "':1' has no host"]),
    ],
)
def test_a_bad_file_value_names_the_file_and_the_key(capsys, tmp_path, toml, words):
    line = refused(capsys, ["peer", "start", *CLUSTER], toml=toml, tmp_path=tmp_path)
    assert str(tmp_path) in line
    for word in words:
        assert word in line


def test_a_missing_config_file(capsys, tmp_path):
    line = refused(capsys, ["replica", *CLUSTER, "--config", str(tmp_path / "absent.toml")])
    assert "absent.toml" in line
    assert "No such file" in line


def test_a_required_option_given_nowhere_names_where_it_may_come_from(capsys):
    line = refused(capsys, ["replica", "--zookeeper", "zk:1"])
    assert "--tenancy" in line
    assert "ONYX_TENANCY" in line


def test_settings_say_where_each_value_came_from(tmp_path):
    path = tmp_path / "onyx.toml"
    path.write_text('tenancy = "t"\n[peer.start]\nvpeers = 3\n')
    parser = cli.build_parser()
    args = parser.parse_args(["peer", "start", "--zookeeper", "zk:1", "--config", str(path)])
    found = {
        s.option: s
        for s in config.settings(parser, ("peer", "start"), args, {"ONYX_BIND": "10.0.0.5"})
    }
    assert (found["zookeeper"].source, found["zookeeper"].origin) == ("command line", "--zookeeper")
    assert (found["bind"].source, found["bind"].origin) == ("env", "ONYX_BIND")
    assert found["vpeers"].source == "file"
    assert found["vpeers"].origin == f"{path}: peer.start.vpeers"
    assert (found["tenancy"].value, found["session_timeout"].source) == ("t", "default")
    shown = json.loads(config.to_json({("peer", "start"): list(found.values())}))
    assert shown["peer start"]["bind"] == {
        "value": "10.0.0.5",
        "source": "env",
        "from": "ONYX_BIND",
    }


def _every_option() -> list[tuple[str, argparse.Action]]:
    parser = cli.build_parser()
    return [
        (" ".join(words), action)
        for words, leaf in config.commands(parser).items()
        for action in config.options(leaf)
    ]


@pytest.mark.parametrize(("command", "action"), _every_option(), ids=lambda x: str(x)[:40])
def test_every_option_has_help_and_shows_its_default_and_variable(command, action):
    assert action.help, (command, action.dest)
    shown = config.HelpFormatter("onyx")._get_help_string(action)
    assert f"env ONYX_{action.dest.upper()}" in shown
    assert "required" in shown or "default: " in shown or action.nargs == 0


def test_the_help_lists_the_commands_with_examples():
    text = cli.build_parser().format_help()
    for command in ("peer", "media-driver", "job", "replica", "gc", "config", "run"):
        assert command in text
    assert "examples:" in text
    assert "onyx peer start --config" in text


def test_every_command_takes_a_config_file(tmp_path: Path):
    parser = cli.build_parser()
    for leaf in config.commands(parser).values():
        assert "--config" in leaf._option_string_actions


def test_config_show_never_prints_a_password(capsys, monkeypatch):
    """Credentials come from a file or the environment and a config check's output lands in
    deployment logs: `config show` names the user and hides the password."""
    monkeypatch.setenv("ONYX_ZOOKEEPER_AUTH", "operator:s3cret")
    for extra in ([], ["--json"]):
        assert cli.main(["config", "show", *extra, "replica", "--zookeeper", "h:1",
                         "--tenancy", "t"]) == 0  # fmt: skip
        shown = capsys.readouterr().out
        assert "operator:***" in shown
        assert "s3cret" not in shown


def test_workers_come_from_the_command_line_the_environment_or_a_file(tmp_path):
    four = ["peer", "start", *CLUSTER, "--vpeers", "4"]
    assert parse(four).workers == "auto"
    assert parse([*four, "--workers", "4"]).workers == 4
    assert parse([*four, "--workers", "2", "--workers", "0"]).workers == 0, "the last one wins"
    assert parse(four, {"ONYX_WORKERS": "2"}).workers == 2
    toml = "[peer.start]\nworkers = 3\n"
    assert parse(four, toml=toml, tmp_path=tmp_path).workers == 3
    assert parse(four, {"ONYX_WORKERS": "auto"}).workers == "auto"


@pytest.mark.parametrize(
    ("cores", "vpeers", "expected"), [(2, 1, 1), (2, 4, 2), (8, 4, 4), (None, 4, 1)]
)
def test_the_default_is_one_worker_per_core_but_no_more_than_the_peers(
    monkeypatch, cores, vpeers, expected
):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    args = parse(["peer", "start", *CLUSTER, "--vpeers", str(vpeers)])
    assert cli.workers_of(args) == expected
    explicit = parse(["peer", "start", *CLUSTER, "--vpeers", str(vpeers), "--workers", "0"])
    assert cli.workers_of(explicit) == 0


@pytest.mark.parametrize("text", ["-1", "x", "1.5", "100000", "Auto"])
def test_a_number_of_workers_that_is_not_one_is_refused(capsys, text):
    line = refused(capsys, ["peer", "start", *CLUSTER, "--workers", text])
    assert "--workers" in line
    assert repr(text) in line


def test_more_workers_than_virtual_peers_are_refused_however_set(capsys, tmp_path):
    line = refused(capsys, ["peer", "start", *CLUSTER, "--vpeers", "2", "--workers", "3"])
    assert "--workers 3 is more than --vpeers 2" in line
    config = tmp_path / "onyx.toml"
    config.write_text("[peer.start]\nworkers = 2\n")
    line = refused(capsys, ["peer", "start", *CLUSTER, "--config", str(config)])
    assert "--workers 2 is more than --vpeers 1" in line
    assert parse(["peer", "start", *CLUSTER, "--vpeers", "2", "--workers", "2"]).workers == 2


def test_workers_go_with_join_direct_and_allocations_in_the_background():
    args = parse(["peer", "start", *CLUSTER, "--vpeers", "2", "--workers", "2",
                  "--join-direct", "--async-allocation"])  # fmt: skip
    assert (args.workers, args.join_direct, args.async_allocation) == (2, True, True)


def test_a_setting_of_a_coordination_mode_that_is_off_is_refused_however_set(capsys, tmp_path):
    line = refused(capsys, ["peer", "start", *CLUSTER, "--gossip-fanout", "0"])
    assert line.endswith("--gossip-fanout is a setting of --epidemic-log, which is off: turn "
                         "--epidemic-log on, or leave --gossip-fanout out")  # fmt: skip
    config = tmp_path / "onyx.toml"
    config.write_text("[peer.start]\nscheduler_timeout = 2.0\n")
    line = refused(capsys, ["peer", "start", *CLUSTER, "--config", str(config)])
    assert "--scheduler-timeout is a setting of --scheduler-servers, which is off" in line
    args = parse(["peer", "start", *CLUSTER, "--epidemic-log", "--gossip-fanout", "0"])
    assert (args.epidemic_log, args.gossip_fanout) == (True, 0)


def test_worker_ports_that_run_past_the_last_port_or_onto_the_members_are_refused(capsys):
    start = ["peer", "start", *CLUSTER, "--vpeers", "4", "--workers", "3"]
    assert parse([*start, "--worker-port-base", "65533"]).worker_port_base == 65533
    line = refused(capsys, [*start, "--worker-port-base", "65534"])
    assert "--worker-port-base 65534 leaves no port for worker 2 of 3" in line
    line = refused(capsys, [*start, "--worker-port-base", "7000", "--port", "7002"])
    assert "--port 7002 is the port of worker 2 (--worker-port-base 7000, 3 workers)" in line
    assert parse([*start, "--worker-port-base", "7000", "--port", "7003"]).port == 7003


def _numeric_options() -> list[tuple[str, argparse.Action]]:
    """Every option whose type takes a number: those that accept 1 or 1408 (an MTU) as one."""
    found = []
    for command, action in _every_option():
        for sample in ("1", "1408"):
            try:
                value = action.type(sample) if callable(action.type) else None
            except (argparse.ArgumentTypeError, ValueError):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                found.append((command, action))
                break
    return found


def test_the_numeric_options_are_found():
    found = {(command, action.dest) for command, action in _numeric_options()}
    assert {("peer start", "vpeers"), ("peer start", "workers"), ("peer start", "port"),
            ("peer start", "session_timeout"), ("run", "groups"), ("scheduler serve", "max_body"),
            ("replica", "connect_timeout"), ("job wait", "timeout")} <= found  # fmt: skip


@pytest.mark.parametrize(("command", "action"), _numeric_options(), ids=lambda x: str(x)[:40])
@pytest.mark.parametrize("text", ["9" * 30, "-1", "nan", "inf", "-inf", "1e400", "9" * 5000])
def test_every_number_an_option_takes_is_bounded(command, action, text):
    """A value a few digits too long, and NaN or an infinity, is refused by every option that
    takes a number, whichever its command: a member asked for 10^29 virtual peers never joins."""
    with pytest.raises(argparse.ArgumentTypeError, match="is not"):
        action.type(text)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["peer", "start", *CLUSTER, "--vpeers", "10001"], ["--vpeers", "at most 10000"]),
        (["peer", "start", *CLUSTER, "--monitors", "10001"], ["--monitors", "'10001'"]),
        (["peer", "start", *CLUSTER, "--gossip-fanout", "-1"], ["--gossip-fanout", "at least 0"]),
        (["peer", "start", *CLUSTER, "--gossip-rounds", "0"], ["--gossip-rounds", "'0'"]),
        (["peer", "start", *CLUSTER, "--reorder-cache", "1000001"], ["--reorder-cache"]),
        (["peer", "start", *CLUSTER, "--mtu", "1410"], ["--mtu", "a multiple of 32"]),
        (["peer", "start", *CLUSTER, "--mtu", "65536"], ["--mtu", "'65536'"]),
        (["peer", "start", *CLUSTER, "--port", "0"], ["--port", "from 1 to 65535"]),
        (["peer", "start", *CLUSTER, "--join-back-off", "-0.5"], ["--join-back-off", "positive"]),
        (["peer", "start", *CLUSTER, "--heartbeat-interval", "NaN"], ["--heartbeat-interval"]),
        (["run", "--groups", "101"], ["--groups", "at most 100"]),
        (["run", "--vpeers", "1e3"], ["--vpeers", "'1e3'"]),
        (["scheduler", "serve", "--listen", "h:1", "--max-body", "2000000000"], ["--max-body"]),
        (["scheduler", "serve", "--listen", "h:1", "--cache", "0"], ["--cache"]),
    ],
)  # fmt: skip
def test_a_number_out_of_its_option_s_range_is_refused_naming_the_option(capsys, argv, words):
    line = refused(capsys, argv)
    for word in words:
        assert word in line


@pytest.mark.parametrize(
    ("environ", "toml", "words"),
    [
        ({"ONYX_VPEERS": "99999999999999999999"}, "",
         ["ONYX_VPEERS", "'99999999999999999999'", "at most 10000"]),
        ({"ONYX_SESSION_TIMEOUT": "nan"}, "", ["ONYX_SESSION_TIMEOUT", "'nan'", "finite"]),
        ({}, "[peer.start]\nvpeers = 99999999999999999999\n",
         ["peer.start.vpeers", "'99999999999999999999'"]),
        ({}, "join_back_off = -1\n", ["join_back_off", "'-1'", "positive"]),
        ({}, "[peer.start]\nmonitors = 1e9\n", ["peer.start.monitors", "'1000000000.0'"]),
    ],
)  # fmt: skip
def test_a_number_out_of_range_names_the_variable_or_the_file_and_key(
    capsys, tmp_path, environ, toml, words
):
    line = refused(capsys, ["peer", "start", *CLUSTER], environ, toml or None, tmp_path)
    for word in words:
        assert word in line


def test_the_largest_numbers_allowed_are_taken():
    args = parse(["peer", "start", *CLUSTER, "--vpeers", "10000", "--mtu", "65504",
                  "--port", "65535", "--epidemic-log", "--gossip-fanout", "0",
                  "--session-timeout", "31536000"])  # fmt: skip
    assert (args.vpeers, args.mtu, args.port, args.gossip_fanout) == (10000, 65504, 65535, 0)
    assert args.session_timeout == 365 * 24 * 3600
    assert parse(["run", "--groups", "100"]).groups == 100


@pytest.mark.timeout(30)
def test_a_fifo_as_config_file_is_refused_without_waiting_for_a_writer(capsys, tmp_path):
    fifo = tmp_path / "onyx.toml"
    os.mkfifo(fifo)
    line = refused(capsys, ["replica", *CLUSTER], {"ONYX_CONFIG": str(fifo)})
    assert line == f"onyx: error: config file {fifo} is not a regular file (a FIFO)"


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a character device"),
                                            ("/", "a directory")])  # fmt: skip
def test_a_config_file_that_is_not_a_regular_file_is_refused(capsys, path, kind):
    line = refused(capsys, ["replica", *CLUSTER, "--config", path])
    assert line == f"onyx: error: config file {path} is not a regular file ({kind})"


def test_a_config_file_over_the_limit_is_refused(capsys, tmp_path):
    """Whatever it holds: past the limit nothing more is read."""
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * config.FILE_LIMIT + "\n")
    line = refused(capsys, ["replica", *CLUSTER, "--config", str(big)])
    assert line == (f"onyx: error: config file {big} is larger than the limit of "
                    f"{config.FILE_LIMIT:,} bytes")  # fmt: skip
    exactly = tmp_path / "exactly.toml"
    exactly.write_text('tenancy = "t"\n' + "#" * (config.FILE_LIMIT - 15) + "\n")
    assert exactly.stat().st_size == config.FILE_LIMIT
    assert parse(["replica", "--zookeeper", "zk:1", "--config", str(exactly)]).tenancy == "t"
