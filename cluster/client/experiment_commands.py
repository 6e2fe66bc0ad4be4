"""`tfdist experiments` and `tfdist experiment ID [--json]`: asked of the coordinator; without --coordinator and
--credentials, of this user's local runs first (cluster/client/local_experiments.py: every local launch's
experiment, running or ended), as `tfdist jobs` and `tfdist job ID` are. Shown by experiment_view.py."""

from __future__ import annotations

from cluster.client import json_output, local_commands, local_experiments, local_runs
from cluster.client.experiment_view import print_experiment, to_json
from cluster.client.job_commands import asks_coordinator
from cluster.client.tables import table


def _print_list(listed, as_json: bool) -> int:
    if as_json:
        print(json_output.dumps({"experiments": [to_json(e) for e in listed]}))
        return 0
    rows = [[e.id, e.name, e.state, e.searcher, f"{e.trials_made}/{e.max_trials}", e.message] for e in listed]
    headers = ["ID", "NAME", "STATE", "SEARCHER", "TRIALS", "INFO"]
    print(table(headers, rows))
    return 0


def _experiments(client, args) -> int:
    return _print_list(client.experiments(), args.json)


def _experiment(client, args) -> int:
    return print_experiment(client.experiment(args.experiment_id), args.json)


def _local_experiments(ask, args) -> object:
    """Every local run's experiments, oldest first; NOT_LOCAL when there is no local run (a coordinator answers)."""
    runs = local_runs.all_runs()
    if not runs:
        return local_commands.NOT_LOCAL
    code = _print_list(local_experiments.all_experiments(runs), args.json)
    local_commands.say_other_coordinators(runs, "experiments")
    return code


def _local_experiment(ask, args) -> object:
    """The experiment from the local run that holds it; NOT_LOCAL when none does (a coordinator answers, or the
    error says that no local run holds it)."""
    found = local_experiments.find(args.experiment_id)
    if found is None:
        return local_commands.NOT_LOCAL
    return print_experiment(found[1], args.json)


list_experiments = asks_coordinator(_experiments, local=_local_experiments)
show_experiment = asks_coordinator(_experiment, local=_local_experiment)
