"""/metrics, /healthz and /readyz of the packd server: the exposition parses
with prometheus_client's text parser, every documented family is there, and
the counters move by exactly what the calls did."""

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

import server_harness as h

st = h.stubs()
pb = st.packd_pb2

FAMILIES = {
    "packd_build_info": "gauge",
    "packd_serving": "gauge",
    "packd_requests": "counter",
    "packd_request_duration_seconds": "histogram",
    "packd_plan_sequences": "histogram",
    "packd_plan_duration_seconds": "histogram",
    "packd_encode_duration_seconds": "histogram",
    "packd_inflight_calls": "gauge",
    "packd_max_inflight_calls": "gauge",
    "packd_workers": "gauge",
    "packd_rejected_inflight": "counter",
    "packd_deadline_skipped": "counter",
    "packd_plan_cache_entries": "gauge",
    "packd_plan_cache_bytes": "gauge",
    "packd_plan_cache_max_bytes": "gauge",
    "packd_plan_cache_hits": "counter",
    "packd_plan_cache_misses": "counter",
    "packd_plan_cache_evictions": "counter",
    "packd_plan_cache_expired": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_start_time_seconds": "gauge",
}


@pytest.fixture(scope="module")
def server():
    s = h.start("--drain-delay", "0", "--workers", "3", "--max-inflight", "77")
    yield s
    assert s.stop() == 0


def scrape(server):
    """{(sample name, frozenset(labels)): value} and {family: type}."""
    samples, types = {}, {}
    for fam in text_string_to_metric_families(server.metrics()):
        types[fam.name] = fam.type
        for smp in fam.samples:
            samples[(smp.name, frozenset(smp.labels.items()))] = smp.value
    return samples, types


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_every_family_parses_with_its_type(server):
    samples, types = scrape(server)
    for name, typ in FAMILIES.items():
        assert types.get(name) == typ, (name, types.get(name))
    assert val(samples, "packd_workers") == 3
    assert val(samples, "packd_max_inflight_calls") == 77
    assert val(samples, "packd_serving") == 1
    assert val(samples, "process_resident_memory_bytes") > 1e6
    build = [k for k in samples if k[0] == "packd_build_info"]
    assert len(build) == 1 and dict(build[0][1])["version"]


def test_counters_move(server):
    before, _ = scrape(server)
    with server.channel() as ch:
        stub = st.packd_pb2_grpc.PlannerStub(ch)
        lengths = h.workload(n=1500)
        resp = stub.Plan(h.plan_request(lengths, dp=8, max_tokens=16384))
        stub.Plan(h.plan_request(lengths, dp=8, max_tokens=16384))
        with pytest.raises(grpc.RpcError):
            stub.Plan(h.plan_request([], dp=8))
        stub.GetRankPlan(pb.GetRankPlanRequest(plan_id=resp.plan_id, dp_rank=1))
        with pytest.raises(grpc.RpcError):
            stub.GetRankPlan(pb.GetRankPlanRequest(plan_id="0" * 32, dp_rank=1))
        with pytest.raises(grpc.RpcError):
            ch.unary_unary("/packd.v1.Planner/Missing")(b"")
        st.health_pb2_grpc.HealthStub(ch).Check(st.health_pb2.HealthCheckRequest())

    def all_recorded():
        now, _ = scrape(server)
        total = sum(v for (n, _l), v in now.items() if n == "packd_requests_total")
        total_before = sum(v for (n, _l), v in before.items() if n == "packd_requests_total")
        assert total - total_before == 7
        return now

    after = h.eventually(all_recorded)

    def delta(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)

    assert delta("packd_requests_total", method="Plan", code="OK") == 2
    assert delta("packd_requests_total", method="Plan", code="INVALID_ARGUMENT") == 1
    assert delta("packd_requests_total", method="GetRankPlan", code="OK") == 1
    assert delta("packd_requests_total", method="GetRankPlan", code="NOT_FOUND") == 1
    assert delta("packd_requests_total", method="unknown", code="UNIMPLEMENTED") == 1
    assert delta("packd_requests_total", method="Check", code="OK") == 1
    assert delta("packd_request_duration_seconds_count", method="Plan") == 3
    assert delta("packd_request_duration_seconds_bucket", method="Plan", le="+Inf") == 3
    assert delta("packd_plan_sequences_count") == 2
    assert delta("packd_plan_sequences_sum") == 3000
    assert delta("packd_plan_duration_seconds_count") == 2
    assert delta("packd_plan_duration_seconds_sum") > 0
    assert delta("packd_plan_cache_hits_total") == 1
    assert delta("packd_plan_cache_misses_total") == 1
    assert val(after, "packd_plan_cache_entries") >= 1
    assert val(after, "packd_plan_cache_bytes") > 0
    assert val(after, "packd_inflight_calls") == 0


def test_probe_endpoints(server):
    assert server.http_get("/healthz") == (200, "ok\n")
    assert server.http_get("/readyz") == (200, "ready\n")
    status, _ = server.http_get("/nope")
    assert status == 404
