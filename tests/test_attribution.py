"""Attribution rules on stored alerts, without the HTTP layer."""

from __future__ import annotations

from functools import cache

from exporters.patterns import load_catalog
from exporters.scanner import Matcher
from responder.attribution import GENERIC_PATTERNS, SYMPATHETIC_PATTERNS, Context, RankProgress, attribute
from responder.model import StoredAlert


def _a(category: str, host: str | None = None, rank: str | None = None, pattern: str = "p") -> StoredAlert:
    labels = {"alertname": "TrainguardX", "category": category, "pattern": pattern, "cluster": "lab", "workload": "1"}
    if host:
        labels["host"] = host
    if rank:
        labels["rank"] = rank
    return StoredAlert("f", "2026-11-29T00:00:00Z", 0.0, "firing", 0.0, labels, {})


def test_collective_timeouts_alone_implicate_nobody() -> None:
    verdict = attribute([_a("collective_timeout", f"h{i}", str(i)) for i in range(8)])
    assert verdict.failure_class == "unknown"
    assert verdict.implicated == ()


def test_gpu_fault_beats_symptoms_and_app_noise() -> None:
    alerts = [_a("collective_timeout", f"h{i}", str(i)) for i in range(8)]
    alerts += [_a("infra_gpu", "h3", "3", "xid_79_fallen_off_bus"), _a("app_error", "h5", "5", "nan_loss")]
    verdict = attribute(alerts)
    assert verdict.failure_class == "infra"
    assert verdict.implicated == ("h3",)


def test_application_errors_mean_app() -> None:
    verdict = attribute([_a("app_error", f"h{i}", str(i), "cuda_oom") for i in range(4)])
    assert verdict.failure_class == "app"
    assert verdict.implicated == ()


def test_app_error_wins_over_a_soft_straggler_signal() -> None:
    verdict = attribute([_a("app_error", f"h{i}", str(i), "cuda_oom") for i in range(4)] + [_a("straggler", "h2", "2")])
    assert verdict.failure_class == "app"


def test_network_errors_name_their_host_but_not_when_everywhere() -> None:
    one = attribute([_a("infra_network", "h1", "1", "ib_completion_error"), _a("collective_timeout", "h2", "2")])
    assert one.implicated == ("h1",)
    everywhere = attribute([_a("infra_network", f"h{i}", str(i), "ib_completion_error") for i in range(6)])
    assert everywhere.implicated == ()
    assert everywhere.failure_class == "infra"
    assert any("fabric" in line for line in everywhere.explanation)


def test_crash_alone_is_not_enough_but_adds_up() -> None:
    assert attribute([_a("crash", "h1", "1")]).implicated == ()


def test_hang_laggard_from_prometheus_progress() -> None:
    hangs = [_a("hang", f"h{i}", str(i)) for i in range(4)]
    progress = tuple(RankProgress(str(i), f"h{i}", 100.0 if i != 2 else 99.0, 1000.0) for i in range(4))
    verdict = attribute(hangs, Context(available=True, note="", progress=progress))
    assert verdict.implicated == ("h2",)
    assert verdict.failure_class == "infra"


def test_hang_on_all_ranks_without_progress_implicates_nobody_and_says_why() -> None:
    verdict = attribute([_a("hang", f"h{i}", str(i)) for i in range(4)])
    assert verdict.implicated == ()
    assert any("laggard cannot be told" in line for line in verdict.explanation)
    assert any("decided from the alerts alone" in line for line in verdict.explanation)


def test_hang_on_one_host_while_others_report_is_the_laggard() -> None:
    verdict = attribute(
        [_a("hang", "h1", "1"), _a("collective_timeout", "h2", "2"), _a("collective_timeout", "h3", "3")]
    )
    assert verdict.implicated == ("h1",)


def test_xids_found_by_enrichment_implicate() -> None:
    context = Context(available=True, note="", xid_hosts={"h4": ["79"]})
    verdict = attribute([_a("collective_timeout", "h4", "4")], context)
    assert verdict.implicated == ("h4",)


def test_sympathetic_socket_errors_from_survivors_do_not_blame_them() -> None:
    alerts = [_a("infra_network", "h1", "0", "nccl_socket_error"), _a("infra_network", "h3", "2", "nccl_remote_error"),
              _a("crash", "h2", "1", "TrainguardRankCrash")]  # fmt: skip
    verdict = attribute(alerts)
    assert verdict.implicated == ()
    assert verdict.failure_class == "unknown"
    assert any("sympathetic" in line for line in verdict.explanation)


def test_hang_laggard_is_the_stuck_process_even_at_the_same_step() -> None:
    hangs = [_a("hang", f"h{i}", str(i)) for i in range(3)]
    progress = tuple(RankProgress(str(i), f"h{i}", 50.0, 1000.0, 0.2, stuck=i == 1) for i in range(3))
    verdict = attribute(hangs, Context(available=True, note="", progress=progress))
    assert verdict.implicated == ("h1",)
    assert any("cannot progress" in line for line in verdict.explanation)


def test_catch_all_exceptions_of_survivors_do_not_turn_a_network_fault_into_an_app_error() -> None:
    """When one rank's link fails, every survivor raises some exception the catalog only knows as
    ``python_exception``: those are symptoms, so the host the network errors name is still blamed."""
    alerts = [_a("infra_network", "h2", "2", "ib_completion_error")]
    alerts += [
        _a("app_error", host, rank, "python_exception") for host, rank in (("h1", "1"), ("h3", "3"), ("h4", "4"))
    ]
    alerts += [_a("app_error", "h1", "0", "torch_elastic_child_failed")]
    verdict = attribute(alerts)
    assert verdict.failure_class == "infra"
    assert verdict.implicated == ("h2",)


def test_a_catch_all_exception_alone_blames_nobody_and_is_no_app_verdict() -> None:
    verdict = attribute([_a("app_error", "h1", "1", "python_exception")])
    assert verdict.failure_class == "unknown"
    assert verdict.implicated == ()


# The kernel's OOM report, as printed (from corpus cases fa-006 and o3-021, trimmed): the header and the
# reaper's line do not say whether the node or a memory cgroup ran out; the kill line and its constraint do.
GLOBAL_OOM = (
    "[2059991.491400] python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n"
    "[2059991.491436] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
    "task_memcg=/user.slice,task=python3,pid=25315,uid=0\n"
    "[2059991.491542] Out of memory: Killed process 25315 (python3) total-vm:53312244kB, anon-rss:31451456kB\n"
    "[2059992.056260] oom_reaper: reaped process 25315 (python3), now anon-rss:0kB, file-rss:74732kB\n"
)
CGROUP_OOM = (
    "[2612362.231458] python invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0\n"
    "[2612362.231487]  mem_cgroup_out_of_memory+0x4b/0x80\n"
    "[2612362.231600] Memory cgroup out of memory: Killed process 208253 (python) total-vm:14119556kB\n"
    "[2612362.240000] oom_reaper: reaped process 208253 (python), now anon-rss:0kB, file-rss:0kB\n"
)


@cache
def _matcher() -> Matcher:
    """The exporter's real catalog, compiled once for the tests that go from log lines to a verdict."""
    return Matcher(load_catalog())


def _catalog_alerts(text: str, host: str, rank: str | None = None) -> list[StoredAlert]:
    """What the exporter raises for these lines: one alert per finding, by the real catalog."""
    found = [f.pattern for f in _matcher().matches(text.encode()) if f.pattern is not None]
    assert found, text
    return [_a(p.category, host, rank, p.id) for p in found]


def _kernel_alerts(report: str, host: str) -> list[StoredAlert]:
    """A node's kernel log: node-level alerts, no rank."""
    return _catalog_alerts(report, host)


def test_the_kernel_killing_for_the_whole_node_blames_the_node() -> None:
    alerts = [*_kernel_alerts(GLOBAL_OOM, "h2"), _a("app_error", "h1", "1", "python_exception")]
    assert {a.labels["pattern"] for a in alerts} >= {"host_oom_killer", "kernel_oom_report"}
    verdict = attribute(alerts)
    assert verdict.failure_class == "infra"
    assert verdict.implicated == ("h2",)


def test_the_kernel_killing_at_a_cgroup_limit_is_the_job_and_blames_no_node() -> None:
    alerts = _kernel_alerts(CGROUP_OOM, "h2")
    assert {a.labels["pattern"] for a in alerts} == {"kernel_cgroup_oom", "kernel_oom_report"}
    verdict = attribute(alerts)
    assert verdict.failure_class == "app"
    assert verdict.implicated == ()


def test_an_oom_report_line_alone_is_a_symptom() -> None:
    verdict = attribute(_kernel_alerts("[1.0] python invoked oom-killer: gfp_mask=0x0, order=0\n", "h2"))
    assert verdict.failure_class == "unknown"
    assert verdict.implicated == ()


def test_every_symptom_pattern_the_responder_names_is_a_catalog_row() -> None:
    """The sets are matched by name: a misspelt or renamed row would silently turn a symptom into evidence."""
    rows = {p.id for p in _matcher().patterns}
    assert (SYMPATHETIC_PATTERNS | GENERIC_PATTERNS) - rows == set()


def test_workers_that_lost_the_ray_head_do_not_blame_their_own_hosts() -> None:
    alerts = [_a("infra_node", f"h{i}", str(i), "ray_gcs_unreachable") for i in range(1, 4)]
    verdict = attribute(alerts)
    assert verdict.implicated == ()
    assert any("sympathetic" in line for line in verdict.explanation)


def test_survivors_unhandled_system_errors_do_not_join_the_node_whose_gpu_fell_off() -> None:
    """When h3's GPU falls off the bus, the ranks on h0-h2 lose their sockets to it and NCCL reports
    ``unhandled system error``: only h3 is at fault (before, all four hosts were excluded)."""
    survivor = (
        "RuntimeError: NCCL Error 2: unhandled system error\n"
        "gpu-017:1234:1239 [0] NCCL INFO transport/net.cc:870 -> 2\n"
    )
    alerts = [_a("infra_gpu", "h3", "3", "xid_79_fallen_off_bus")]
    for i in range(3):
        found = _catalog_alerts(survivor, f"h{i}", str(i))
        assert {a.labels["pattern"] for a in found} == {"nccl_system_error", "nccl_trace_system"}
        alerts += found
    verdict = attribute(alerts)
    assert verdict.failure_class == "infra"
    assert verdict.implicated == ("h3",)
