"""The pure logic of server_status: Prometheus parsing, drift, uptime, the row and the table."""
import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (
    COLUMNS,
    METRICS,
    PD_COLUMNS,
    UNREADABLE,
    cmdline_argv,
    columns,
    drift,
    human_duration,
    parse_exposition,
    pd_from_argv,
    pd_from_record,
    pd_of,
    peers_cell,
    problems,
    row,
    scheduler_metrics,
    table_header,
    table_line,
    uptime_seconds,
)

# The shape of a real 0.5.9 /metrics (prometheus_client multiprocess output): HELP and TYPE
# lines, labels sorted, float values, histograms and series of other metrics around.
REAL_LIKE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi-k2.5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="kimi-k2.5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 412.3456
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="kimi-k2.5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
# HELP sglang:num_running_reqs_offline_batch The number of running low-priority offline batch requests(label is 'batch').
# TYPE sglang:num_running_reqs_offline_batch gauge
sglang:num_running_reqs_offline_batch{engine_type="unified",model_name="kimi-k2.5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="kimi-k2.5"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="kimi-k2.5"} 9.0
sglang:time_to_first_token_seconds_sum{model_name="kimi-k2.5"} 2.3518979474117756e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="kimi-k2.5"} 7.557572e+06
"""


def test_metric_names_are_sglangs():
    assert METRICS == {"running": "sglang:num_running_reqs", "queued": "sglang:num_queue_reqs",
                       "gen_throughput": "sglang:gen_throughput"}


def test_parse_exposition():
    found = parse_exposition(REAL_LIKE)
    names = [sample[0] for sample in found]
    assert names[0] == "sglang:num_running_reqs" and len(found) == 8
    assert found[0][1] == {"engine_type": "unified", "model_name": "kimi-k2.5",
                           "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    assert found[0][2] == 7.0
    assert found[5][1]["le"] == "+Inf" and found[6][2] == 2351897.9474117756
    assert found[-1][2] == 7557572.0


def test_parse_exposition_escapes_timestamps_and_garbage():
    text = 'a{x="q\\"uo\\\\te\\nnl",y=""} 1 1700000000000\nb 2\nc{} +Inf\nd NaN\n'
    found = parse_exposition(text.encode())
    assert found[0] == ("a", {"x": 'q"uo\\te\nnl', "y": ""}, 1.0)
    assert found[1] == ("b", {}, 2.0) and found[2] == ("c", {}, float("inf"))
    assert found[3][2] != found[3][2]  # NaN
    with pytest.raises(ValueError, match="not a Prometheus sample"):
        parse_exposition("this is not prometheus\n")
    with pytest.raises(ValueError, match="value"):
        parse_exposition("a 1.2.3\n")
    with pytest.raises(ValueError, match="bad labels"):
        parse_exposition('a{x=unquoted} 1\n')


def test_scheduler_metrics():
    assert scheduler_metrics(REAL_LIKE) == {"running": 7, "queued": 2, "gen_throughput": 412.35}
    assert scheduler_metrics("") == {"running": None, "queued": None, "gen_throughput": None}
    # other models' series are left out when a model is named
    assert scheduler_metrics(REAL_LIKE, model_name="other")["running"] is None


def test_scheduler_metrics_counts_reporting_ranks_once():
    lines = []
    for dp in ("0", "1"):
        for tp in ("0", "1"):
            lines.append('sglang:num_running_reqs{dp_rank="%s",model_name="m",pp_rank="0",tp_rank="%s"} %d'
                         % (dp, tp, 3 if dp == "0" else 4))
    lines.append('sglang:num_running_reqs{dp_rank="0",model_name="m",pp_rank="1",tp_rank="0"} 3')
    # TP rank 1 (--enable-metrics-for-all-schedulers) and PP rank 1 repeat their group's batch
    assert scheduler_metrics("\n".join(lines))["running"] == 7
    # 0.4.6.post5: no rank labels at all
    assert scheduler_metrics('sglang:num_queue_reqs{engine_type="unified",model_name="m"} 5.0\n')["queued"] == 5


RECORD = {"strategy": "ep8", "release": "0.5.9", "unit_sha1": "u1", "env_sha1": "e1",
          "port": 30000, "deployed_at": "2026-12-01T00:50:00Z"}
OURS = {"port": 30000, "owner": "ours", "programs": [], "pids": []}


def test_drift():
    assert drift(RECORD, "u1", "e1", OURS) == []
    assert drift(RECORD, "u2", "e1", OURS) == ["unit file differs from the deployment record"]
    assert drift(RECORD, "u1", "e2", None) == ["environment file differs from the deployment record"]
    assert drift(RECORD, None, None) == ["unit file is missing", "environment file is missing"]
    assert drift(RECORD, "u1", UNREADABLE) == [
        "environment file cannot be read (run as root or with become)"]
    other = {"port": 30000, "owner": "other", "programs": ["nginx"], "pids": [42]}
    assert drift(RECORD, "u1", "e1", other) == ["port 30000 is held by nginx (pid 42), not by our unit"]
    unknown = {"port": 30000, "owner": "other", "programs": [], "pids": []}
    assert "a process of unknown owner (pid ?)" in drift(RECORD, "u1", "e1", unknown)[0]
    # a record from before env_sha1 cannot tell env drift; no record: nothing to compare
    old = dict(RECORD)
    del old["env_sha1"]
    assert drift(old, "u1", "anything", OURS) == []
    assert drift({}, "u1", "e1", other) == []
    assert drift(None, None, None) == []


def test_uptime():
    props = {"ActiveState": "active", "MainPID": "1234", "ExecMainStartTimestampMonotonic": "5000000",
             "ActiveEnterTimestampMonotonic": "4000000"}
    assert uptime_seconds(props, 65 * 1000000) == 60
    assert uptime_seconds(dict(props, ExecMainStartTimestampMonotonic="0"), 65 * 1000000) == 61
    assert uptime_seconds(dict(props, ActiveState="inactive"), 65 * 1000000) is None
    assert uptime_seconds(dict(props, MainPID="0"), 65 * 1000000) is None
    assert uptime_seconds(dict(props, MainPID="x"), 65 * 1000000) is None
    assert uptime_seconds({}, 1) is None
    assert [human_duration(s) for s in (None, 0, 59, 61, 3700, 93784)] == \
        ["-", "0s", "59s", "1m1s", "1h1m", "1d2h3m"]


PROPS = {"ActiveState": "active", "MainPID": "1234", "ExecMainStartTimestampMonotonic": "1000000"}
READY = {"route": "/health", "ready": True, "detail": "200"}
METRICS_OK = {"detail": "ok", "running": 3, "queued": 0, "gen_throughput": 195.0}


def make_row(**over):
    args = dict(host="h1", record=RECORD, props=PROPS, now_monotonic_usec=313000000, readiness=READY,
                metrics=METRICS_OK, drift_reasons=[], port=30000, unit="sglang.service",
                record_path="/etc/ansible/facts.d/sglang.fact")
    args.update(over)
    return row(**args)


def test_row_healthy():
    r = make_row()
    assert r["ok"] and r["healthy"] and not r["drifted"] and r["problems"] == []
    assert (r["strategy"], r["release"], r["deployed_at"]) == ("ep8", "0.5.9", "2026-12-01T00:50:00Z")
    assert (r["main_pid"], r["uptime_s"], r["uptime"]) == (1234, 312, "5m12s")
    assert (r["running"], r["queued"], r["gen_throughput"]) == (3, 0, 195.0)
    assert r["verdict"] == "h1: ok"
    assert r["line"] == table_line(r)


def test_row_problems():
    drifted = make_row(drift_reasons=["unit file differs from the deployment record"])
    assert drifted["healthy"] and drifted["drifted"] and not drifted["ok"]
    assert drifted["problems"] == ["drift: unit file differs from the deployment record"]
    assert drifted["verdict"] == "h1: drift: unit file differs from the deployment record"

    stopped = make_row(props={"ActiveState": "inactive", "MainPID": "0"},
                       readiness={"route": "/health", "ready": False, "detail": "connection refused"})
    assert not stopped["healthy"] and not stopped["ok"] and stopped["main_pid"] is None
    assert stopped["problems"] == ["unit sglang.service is inactive",
                                   "not ready (/health: connection refused)"]

    warming = make_row(readiness={"route": "/ready", "ready": False, "detail": "503 Service Unavailable"})
    assert warming["problems"] == ["not ready (/ready: 503 Service Unavailable)"]

    bare = make_row(record={}, props={}, readiness={"route": None, "ready": False,
                                                    "detail": "the release is unknown (no record)"})
    assert bare["problems"][0] == "no deployment record (/etc/ansible/facts.d/sglang.fact)"
    assert "unit sglang.service is unknown" in bare["problems"]

    # metrics off (no --enable-metrics) is not a problem
    off = make_row(metrics={"detail": "off (404)", "running": None, "queued": None, "gen_throughput": None})
    assert off["ok"] and off["metrics"] == "off (404)"
    assert problems({"deployed": True, "active_state": "active", "ready": True}) == []


def test_table_is_fixed_width():
    header = table_header()
    assert header.split() == [column[0] for column in COLUMNS]
    r = make_row(host="a-rather-long-inventory-hostname.example.com",
                 drift_reasons=["unit file differs from the deployment record"])
    line = table_line(r)
    # every fixed column starts where its title starts
    start = 0
    for title, width, dummy in COLUMNS:
        assert header[start:start + len(title)] == title
        if width:
            assert line[start + width] == " " and line[start + width - 1] != "\n"
            start += width + 1
    assert line.startswith("a-rather-long-inve~ ")
    assert line.endswith("unit file differs from the deployment record")
    healthy = table_line(make_row())
    assert healthy.split() == ["h1", "ep8", "0.5.9", "1234", "5m12s", "yes", "3", "0", "195.0",
                               "2026-12-01T00:50:00Z", "-", "no"]
    off = table_line(make_row(props={}, metrics={}, readiness={"ready": False}))
    assert off.split() == ["h1", "ep8", "0.5.9", "-", "-", "NO", "-", "-", "-", "2026-12-01T00:50:00Z", "-", "no"]


def test_a_restart_owed_is_drift_while_the_old_process_runs():
    """Issue 22: the unit was installed for a restart that never came (the controller was
    killed); the old process (1234) still runs: drift, named. Once another process runs,
    no drift (the control)."""
    record = dict(RECORD, restart_owed_pid=1234)
    r = make_row(record=record)
    assert r["drifted"] and not r["ok"]
    assert r["drift"] == ["restart owed: the installed unit was never started (main PID 1234 runs "
                          "the one before it)"]
    assert make_row(record=record, props=dict(PROPS, MainPID="999"))["drift"] == []


def test_row_pending_while_the_recorded_process_runs():
    """Issue 23: what the record says is pending, while its main PID (1234) still runs."""
    record = dict(RECORD, pending=["Service.PrivateMounts"], pending_pid=1234)
    r = make_row(record=record)
    assert r["pending"] == ["Service.PrivateMounts"] and r["ok"] and r["problems"] == []
    assert table_line(r).split()[10] == "PrivateMounts"
    # another process runs (restarted since): applied, nothing pending
    restarted = make_row(record=record, props=dict(PROPS, MainPID="999"))
    assert restarted["pending"] == [] and table_line(restarted).split()[10] == "-"


# ------------------------------------------------------------------ prefill/decode

PY = "/opt/sglang/0.5.23/bin/python"
SERVER = [PY, "-m", "sglang.launch_server", "--model-path", "/models/k2", "--tp-size", "8"]
PREFILL_ARGV = SERVER[3:] + ["--disaggregation-mode", "prefill",
                             "--disaggregation-transfer-backend", "mooncake_tcp",
                             "--disaggregation-bootstrap-port", "9001"]
DECODE_ARGV = SERVER[3:] + ["--disaggregation-mode=decode", "--disaggregation-transfer-backend",
                            "mooncake"]


def test_pd_from_argv():
    assert pd_from_argv(PREFILL_ARGV) == {"role": "prefill", "bootstrap_port": 9001,
                                          "transfer_backend": "mooncake_tcp", "node_rank": 0}
    assert pd_from_argv(DECODE_ARGV) == {"role": "decode", "bootstrap_port": None,
                                         "transfer_backend": "mooncake", "node_rank": 0}
    # a prefill server without the flag listens on SGLang's default
    assert pd_from_argv(["--disaggregation-mode", "prefill"])["bootstrap_port"] == 8998
    # co-located: no flag, or the release's default "null"; argparse keeps the last value
    for argv in (SERVER[3:], SERVER[3:] + ["--disaggregation-mode", "null"],
                 ["--disaggregation-mode", "decode", "--disaggregation-mode", "null"]):
        assert pd_from_argv(argv) == {"role": None, "bootstrap_port": None,
                                      "transfer_backend": None, "node_rank": 0}
    assert pd_from_argv(DECODE_ARGV + ["--nnodes", "2", "--node-rank", "1"])["node_rank"] == 1
    assert pd_from_argv(None)["role"] is None


def test_cmdline_argv():
    raw = "\0".join(SERVER + ["--disaggregation-mode", "decode"]).encode() + b"\0"
    assert cmdline_argv(raw) == SERVER + ["--disaggregation-mode", "decode"]
    # through the collection's launcher (the API key stays in the environment)
    launcher = [PY, "/usr/local/libexec/gpufleet/secret_exec.py", "--api-key=SGLANG_API_KEY", "--",
                "-m", "sglang.launch_server", "--disaggregation-mode", "prefill"]
    assert pd_from_argv(cmdline_argv("\0".join(launcher).encode()))["role"] == "prefill"
    # not an SGLang server's (renamed, or another program), or nothing: unknown
    assert cmdline_argv(b"sglang::scheduler_TP0\0") is None
    assert cmdline_argv(b"") is None and cmdline_argv(None) is None


def test_pd_from_record():
    assert pd_from_record({}) is None and pd_from_record(None) is None
    assert pd_from_record({"argv": PREFILL_ARGV})["role"] == "prefill"
    assert pd_from_record({"argv": SERVER[3:]})["role"] is None
    # a record without argv: its placements (check/_pd_roles.previous_from_records' shape)
    assert pd_from_record({"pd": [{"role": "decode", "base_gpu_id": 0, "gpus": 8}]}) == {
        "role": "decode", "bootstrap_port": None, "transfer_backend": None, "node_rank": 0}
    both = pd_from_record({"pd": [{"role": "decode"}, {"role": "prefill"}]})
    assert both["role"] == "prefill+decode" and both["bootstrap_port"] == 8998
    assert pd_from_record({"pd": "prefill"})["role"] == "prefill"
    assert pd_from_record({"strategy": "ep8"})["role"] is None


def test_pd_of_prefers_what_runs_and_names_a_role_the_record_does_not_say():
    record = dict(RECORD, argv=DECODE_ARGV)
    facts, source, reasons = pd_of(SERVER + DECODE_ARGV[len(SERVER) - 3:], record)
    assert (facts["role"], source, reasons) == ("decode", "process", [])
    facts, source, reasons = pd_of(SERVER + ["--disaggregation-mode", "prefill"], record)
    assert (facts["role"], source) == ("prefill", "process")
    assert reasons == ["the process runs as prefill (--disaggregation-mode prefill), the "
                       "deployment record says decode"]
    # a co-located process where the record says decode, and the other way round
    assert pd_of(SERVER, record)[2] == ["the process runs co-located (no --disaggregation-mode), "
                                        "the deployment record says decode"]
    assert pd_of(SERVER + ["--disaggregation-mode", "decode"], dict(RECORD, argv=SERVER[3:]))[2] == [
        "the process runs as decode (--disaggregation-mode decode), the deployment record says "
        "co-located"]
    # nothing runs (or its command line cannot be read): the record; neither: co-located, unknown
    assert pd_of(None, record)[:2] == (pd_from_argv(DECODE_ARGV), "record")
    assert pd_of(None, {})[0]["role"] is None and pd_of(None, {})[1] is None
    # a record without argv cannot disagree
    assert pd_of(SERVER + ["--disaggregation-mode", "prefill"], {"pd": "decode"})[2] == []
    assert pd_of(SERVER + ["--disaggregation-mode", "prefill"], RECORD)[2] == []


def test_row_carries_the_pd_role_and_its_drift():
    record = dict(RECORD, argv=PREFILL_ARGV)
    r = make_row(record=record, process_argv=SERVER + PREFILL_ARGV[len(SERVER) - 3:])
    assert (r["pd_role"], r["pd_source"], r["pd_bootstrap_port"], r["pd_transfer_backend"],
            r["pd_peers"]) == ("prefill", "process", 9001, "mooncake_tcp", None)
    assert r["ok"] and r["line"] == table_line(r)  # the module's own line has no PD columns
    flipped = make_row(record=record, process_argv=SERVER + ["--disaggregation-mode", "decode"])
    assert flipped["drifted"] and not flipped["ok"] and flipped["pd_role"] == "decode"
    assert flipped["problems"] == ["drift: the process runs as decode (--disaggregation-mode "
                                   "decode), the deployment record says prefill"]
    # the unit is not active: no process, the record says it
    stopped = make_row(record=record, props={"ActiveState": "inactive", "MainPID": "0"},
                       process_argv=SERVER)
    assert (stopped["pd_role"], stopped["pd_source"]) == ("prefill", "record")
    assert make_row()["pd_role"] is None and make_row()["pd_source"] == "record"


def test_the_pd_columns_come_after_strategy():
    assert [c[0] for c in columns()] == [c[0] for c in COLUMNS]
    assert [c[0] for c in columns(pd=True)] == (
        ["HOST", "STRATEGY", "PD", "PEERS"] + [c[0] for c in COLUMNS[2:]])
    assert table_header(pd=True).split() == [c[0] for c in columns(pd=True)]
    decode = dict(make_row(record=dict(RECORD, argv=DECODE_ARGV)),
                  pd_peers=[{"host": "gpu-1", "role": "prefill", "bootstrap_port": 9001}])
    assert table_line(decode, pd=True).split()[:4] == ["h1", "ep8", "decode", "gpu-1"]
    prefill = dict(make_row(record=dict(RECORD, argv=PREFILL_ARGV)), pd_peers=[])
    assert table_line(prefill, pd=True).split()[2:4] == ["prefill:9001", "none"]
    co = make_row()
    assert table_line(co, pd=True).split()[:4] == ["h1", "ep8", "-", "-"]
    # every fixed column starts where its title starts, the PD ones too
    header, line = table_header(pd=True), table_line(decode, pd=True)
    start = 0
    for title, width, dummy in columns(pd=True):
        assert header[start:start + len(title)] == title
        if width:
            assert line[start + width] == " "
            start += width + 1
    assert [c[0] for c in PD_COLUMNS] == ["PD", "PEERS"]


def test_peers_cell():
    row_ = {"pd_role": "decode"}
    assert peers_cell(row_) == "?"
    assert peers_cell(dict(row_, pd_peers=[])) == "none"
    assert peers_cell({"pd_role": None, "pd_peers": []}) == "-"
    names = [{"host": "gpu-%d" % i} for i in range(1, 9)]
    assert peers_cell(dict(row_, pd_peers=names[:2])) == "gpu-1,gpu-2"
    many = peers_cell(dict(row_, pd_peers=names))
    assert many == "gpu-1,gpu-2,gpu-3,+5" and len(many) < 24
    # one name longer than the cell: the table cuts it
    long_name = [{"host": "a-very-long-inventory-hostname.example.com"}]
    assert peers_cell(dict(row_, pd_peers=long_name)) == long_name[0]["host"]
