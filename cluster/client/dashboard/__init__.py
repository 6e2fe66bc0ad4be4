"""`tfdist dashboard`: a web page of the cluster and its jobs, served by a local process that asks the
coordinator over gRPC with the user's own credential (as `tfdist jobs` does), so every read and action passes
the coordinator's access rules.

    command.py   the command: finds the credential, listens, prints the login link, stops on SIGTERM/Ctrl-C
    server.py    HTTP: the login (a random token, a session cookie), CSRF checks, routes, the static assets
    api.py       the JSON the page polls, from the coordinator's answers (json_output's shapes), and actions
    diagnoses.py `tfdist diagnose`'s runs: the CLI's verdict over each run's variant jobs, and its chart's numbers
    assets/      the page: plain HTML, CSS and JavaScript shipped in the package (nothing fetched at run time)
"""
