"""`tfdist experiments` and `tfdist experiment ID [--json]`: asked of the coordinator (a local launch follows its
own experiment), shown by experiment_view.py."""

from __future__ import annotations

from cluster.client import json_output, local_commands
from cluster.client.experiment_view import print_experiment, to_json
from cluster.client.job_commands import asks_coordinator
from cluster.client.tables import table


def _experiments(client, args) -> int:
    listed = client.experiments()
    if args.json:
        print(json_output.dumps({"experiments": [to_json(e) for e in listed]}))
        return 0
    rows = [[e.id, e.name, e.state, e.searcher, f"{e.trials_made}/{e.max_trials}", e.message] for e in listed]
    headers = ["ID", "NAME", "STATE", "SEARCHER", "TRIALS", "INFO"]
    print(table(headers, rows))
    return 0


def _experiment(client, args) -> int:
    return print_experiment(client.experiment(args.experiment_id), args.json)


def _not_local(ask, args) -> object:
    return local_commands.NOT_LOCAL  # a local launch's experiment is followed by that launch


list_experiments = asks_coordinator(_experiments, local=_not_local)
show_experiment = asks_coordinator(_experiment, local=_not_local)
