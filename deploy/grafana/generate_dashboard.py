#!/usr/bin/env python3
"""Writes kvserve-dashboard.json, the Grafana dashboard of a kvserve cluster.

The dashboard is generated so that its 40-odd queries stay short and uniform; edit this file and
run it (python3 deploy/grafana/generate_dashboard.py), never the JSON by hand.
tests/deploy/check_metric_names.py checks that the JSON is this script's output and that every
metric it queries is one the code exports.

Layout: KV cache occupancy first (the scarce resource), then requests and scheduling, latency,
throughput, and the routers' view.
"""
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).with_name("kvserve-dashboard.json")

# Series selectors. Worker metrics carry the pod label added by the ServiceMonitor; router
# metrics are filtered by namespace only (their `worker` label names the worker).
W = '{namespace=~"$namespace", pod=~"$pod"}'
R = '{namespace=~"$namespace"}'
RATE = "$__rate_interval"


def quantiles(metric, selector, qs=(0.5, 0.9, 0.99)):
    return [(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{selector}[{RATE}])))",
             f"p{int(q * 100)}") for q in qs]


class Layout:
    """Places panels on Grafana's 24-column grid, rows of panels of a given width."""

    def __init__(self):
        self.panels = []
        self.y = 0
        self.x = 0
        self.row_height = 0
        self.next_id = 1

    def row(self, title):
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": self._id(),
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def panel(self, title, targets, unit="short", width=8, height=8, kind="timeseries",
              stack=False, description="", minimum=None, maximum=None):
        if self.x + width > 24:
            self._newline()
        defaults = {"unit": unit}
        if minimum is not None:
            defaults["min"] = minimum
        if maximum is not None:
            defaults["max"] = maximum
        if kind == "timeseries":
            defaults["custom"] = {"drawStyle": "line", "fillOpacity": 20 if stack else 0,
                                  "stacking": {"mode": "normal" if stack else "none"}}
        panel = {
            "type": kind,
            "title": title,
            "id": self._id(),
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": height, "w": width, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
            if kind == "timeseries" else {"reduceOptions": {"calcs": ["lastNotNull"]}},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (expr, legend) in enumerate(targets)],
        }
        if description:
            panel["description"] = description
        self.panels.append(panel)
        self.x += width
        self.row_height = max(self.row_height, height)

    def _newline(self):
        self.y += self.row_height
        self.x = 0
        self.row_height = 0

    def _id(self):
        self.next_id += 1
        return self.next_id - 1


def build():
    g = Layout()
    g.row("KV cache occupancy")
    g.panel("Cluster KV usage",
            [(f"sum(kvserve_kv_blocks_used{W}) / sum(kvserve_kv_blocks_capacity{W})", "used / total")],
            unit="percentunit", width=4, kind="gauge", minimum=0, maximum=1,
            description="Blocks held by running requests over all usable blocks, all workers.")
    g.panel("Prefix cache hit rate", [
        (f"sum(rate(kvserve_prefix_cache_hit_tokens_total{W}[{RATE}])) / "
         f"sum(rate(kvserve_prefix_cache_queried_tokens_total{W}[{RATE}]))", "hit / queried")],
            unit="percentunit", width=4, kind="stat",
            description="Prompt tokens served from the prefix cache over tokens looked up.")
    g.panel("KV usage ratio per worker", [(f"kvserve_kv_cache_usage_ratio{W}", "{{pod}}")],
            unit="percentunit", width=16, minimum=0, maximum=1)
    g.panel("KV blocks used", [(f"kvserve_kv_blocks_used{W}", "{{pod}}")], stack=True,
            description="Blocks held by at least one running request.")
    g.panel("KV blocks free", [(f"kvserve_kv_blocks_free{W}", "{{pod}}")], stack=True,
            description="Blocks no running request holds (evictable ones included).")
    g.panel("KV blocks evictable (cached prefixes)",
            [(f"kvserve_kv_blocks_cached_evictable{W}", "{{pod}}")], stack=True,
            description="Free blocks that still hold a cached prefix; reclaimed LRU on demand.")
    g.panel("Prefix cache hit rate per worker", [
        (f"sum by (pod) (rate(kvserve_prefix_cache_hit_tokens_total{W}[{RATE}])) / "
         f"sum by (pod) (rate(kvserve_prefix_cache_queried_tokens_total{W}[{RATE}]))", "{{pod}}")],
            unit="percentunit", width=12, minimum=0, maximum=1)
    g.panel("KV pool, selected workers: total, used, free, evictable", [
        (f"sum(kvserve_kv_blocks_capacity{W})", "total"),
        (f"sum(kvserve_kv_blocks_used{W})", "used"),
        (f"sum(kvserve_kv_blocks_free{W})", "free"),
        (f"sum(kvserve_kv_blocks_cached_evictable{W})", "evictable"),
        (f"max(kvserve_kv_block_size_tokens{W})", "block size (tokens)")], width=12)

    g.row("Requests and scheduling")
    g.panel("Requests running", [(f"kvserve_requests_running{W}", "{{pod}}")], stack=True)
    g.panel("Requests waiting", [(f"kvserve_requests_waiting{W}", "{{pod}}")], stack=True)
    g.panel("Preemptions / s", [(f"sum by (pod) (rate(kvserve_preemptions_total{W}[{RATE}]))",
                                 "{{pod}}")], unit="ops",
            description="Running sequences preempted by recompute when decodes ran out of blocks.")
    g.panel("Requests finished / s by reason", [
        (f"sum by (reason) (rate(kvserve_requests_finished_total{W}[{RATE}]))", "{{reason}}")],
            unit="reqps", stack=True)
    g.panel("Requests rejected by workers / s", [
        (f"sum by (code) (rate(kvserve_requests_rejected_total{W}[{RATE}]))", "{{code}}")],
            unit="reqps")
    g.panel("Workers draining", [(f"kvserve_draining{W}", "{{pod}}")], minimum=0, maximum=1)

    g.row("Latency")
    g.panel("Time to first token", quantiles("kvserve_time_to_first_token_seconds", W), unit="s")
    g.panel("Inter-token latency", quantiles("kvserve_inter_token_latency_seconds", W), unit="s")
    g.panel("End-to-end request latency", quantiles("kvserve_e2e_request_latency_seconds", W),
            unit="s")
    g.panel("Queue time (submit to first step)",
            quantiles("kvserve_request_queue_time_seconds", W), unit="s")
    g.panel("Engine step duration", quantiles("kvserve_step_duration_seconds", W), unit="s")
    g.panel("Router queue wait", quantiles("kvserve_router_queue_wait_seconds", R), unit="s")

    g.row("Throughput")
    g.panel("Tokens / s", [
        (f"sum(rate(kvserve_generation_tokens_total{W}[{RATE}]))", "generated"),
        (f"sum(rate(kvserve_prompt_tokens_total{W}[{RATE}]))", "prompt"),
        (f"sum(rate(kvserve_cached_prompt_tokens_total{W}[{RATE}]))", "prompt, from cache")],
            unit="short", width=12)
    g.panel("Generated tokens / s per worker", [
        (f"sum by (pod) (rate(kvserve_generation_tokens_total{W}[{RATE}]))", "{{pod}}")],
            width=12, stack=True)
    g.panel("Batch: tokens per step", quantiles("kvserve_step_tokens", W, (0.5, 0.99)), width=8)
    g.panel("Batch: sequences per step", quantiles("kvserve_step_sequences", W, (0.5, 0.99)),
            width=8)
    g.panel("Engine steps / s", [(f"sum by (pod) (rate(kvserve_engine_steps_total{W}[{RATE}]))",
                                  "{{pod}}")], unit="ops", width=8)

    g.row("Router")
    g.panel("Router queue depth", [(f"kvserve_router_queue_depth{R}", "{{pod}}")], stack=True,
            description="Requests waiting for KV capacity in each router's admission queue.")
    g.panel("Migrations / s", [(f"sum(rate(kvserve_router_migrations_total{R}[{RATE}]))",
                                "migrations")], unit="ops",
            description="Requests moved to another worker after theirs failed mid-stream.")
    g.panel("Router rejections / s by reason", [
        (f"sum by (reason) (rate(kvserve_router_requests_rejected_total{R}[{RATE}]))",
         "{{reason}}")], unit="reqps")
    g.panel("Routed / s per worker", [
        (f"sum by (worker) (rate(kvserve_router_requests_routed_total{R}[{RATE}]))",
         "{{worker}}")], unit="reqps", stack=True)
    g.panel("Router's view: free blocks per worker", [
        (f"max by (worker) (kvserve_router_worker_free_blocks{R})", "free {{worker}}"),
        (f"max by (worker) (kvserve_router_worker_reserved_blocks{R})", "reserved {{worker}}")])
    g.panel("Router's view: cached prefix blocks per worker", [
        (f"max by (worker) (kvserve_router_worker_cached_blocks{R})", "{{worker}}")])
    g.panel("Router's view: healthy workers", [
        (f"sum by (pod) (kvserve_router_worker_healthy{R})", "{{pod}}")])
    g.panel("Router's view: requests per worker", [
        (f"max by (worker) (kvserve_router_worker_running_requests{R})", "running {{worker}}"),
        (f"max by (worker) (kvserve_router_worker_waiting_requests{R})", "waiting {{worker}}")])
    g.panel("Routing decision time", quantiles("kvserve_router_routing_decision_seconds", R),
            unit="s")
    g.panel("Routing quality: prefix reuse captured / delivered", [
        (f"max by (stage) (kvserve_router_prefix_reuse_ratio{R})", "{{stage}} / available")],
            unit="percentunit", minimum=0,
            description="Of the cached-prefix tokens some worker held when each request was "
                        "routed (available): the share on the worker chosen (captured) and the "
                        "share its engine reported reused (delivered).")
    g.panel("Routing quality: prefix tokens / s", [
        (f"sum by (stage) (rate(kvserve_router_prefix_reuse_tokens_total{R}[{RATE}]))",
         "{{stage}}"),
        (f"sum(rate(kvserve_router_routed_prompt_tokens_total{R}[{RATE}]))", "prompt")],
            description="Prompt tokens routed, and the cached prefix available, captured and "
                        "delivered.")
    g.panel("Router's index per worker: lag and state", [
        (f"time() - max by (worker) (kvserve_router_worker_last_report_timestamp_seconds{R} > 0)",
         "lag {{worker}}"),
        (f'max by (worker) (kvserve_router_worker_index_state{{state!="exact",'
         f'{R[1:-1]}}})', "not exact {{worker}}")],
            unit="s", description="Seconds since each worker's last status report was applied, "
                                  "and 1 where the router's index of it is resyncing or stale "
                                  "(unreachable, or refused for another serving fingerprint).")
    g.panel("Generate calls finished / s by code", [
        (f"sum by (code) (rate(kvserve_router_requests_finished_total{R}[{RATE}]))", "{{code}}")],
            unit="reqps", width=24)

    variables = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0},
        {"name": "namespace", "label": "Namespace", "type": "query",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": "label_values(kvserve_kv_blocks_capacity, namespace)", "refId": "ns"},
         "definition": "label_values(kvserve_kv_blocks_capacity, namespace)",
         "refresh": 2, "includeAll": False, "multi": False, "current": {}, "hide": 0},
        {"name": "pod", "label": "Worker", "type": "query",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": 'label_values(kvserve_kv_blocks_capacity{namespace=~"$namespace"}, pod)',
                   "refId": "pod"},
         "definition": 'label_values(kvserve_kv_blocks_capacity{namespace=~"$namespace"}, pod)',
         "refresh": 2, "includeAll": True, "allValue": ".*", "multi": True, "current": {},
         "hide": 0},
    ]
    return {
        "title": "kvserve: KV cache and serving",
        "uid": "kvserve-kv-cache",
        "description": "Per-worker KV cache occupancy, prefix cache, scheduling, latency, "
                       "throughput and the routers' view. Generated by "
                       "deploy/grafana/generate_dashboard.py.",
        "tags": ["kvserve", "llm", "kv-cache"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "",
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [],
        "panels": g.panels,
    }


def render():
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        if OUT.read_text() != render():
            sys.exit(f"{OUT} is stale: run python3 {pathlib.Path(__file__)}")
        return
    OUT.write_text(render())


if __name__ == "__main__":
    main()
