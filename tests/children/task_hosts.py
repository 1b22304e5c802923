"""Where a cluster's tasks ran: ``python task_hosts.py DASHBOARD_URL NAME`` prints, as JSON, one row per
task named NAME — its job id, state, the address of its node and its start and end (ms since the epoch,
None while unknown) — from Ray's state API (the client's token comes from the environment)."""

import json
import sys

from ray.util.state import list_nodes, list_tasks

url, name = sys.argv[1], sys.argv[2]
ips = {n.node_id: n.node_ip for n in list_nodes(address=url, limit=10_000, raise_on_missing_output=False)}
tasks = list_tasks(address=url, filters=[("name", "=", name)], detail=True, limit=10_000,
                   raise_on_missing_output=False)
print(json.dumps([dict(job=t.job_id, state=t.state, ip=ips.get(t.node_id), start=t.start_time_ms,
                       end=t.end_time_ms) for t in tasks]))
